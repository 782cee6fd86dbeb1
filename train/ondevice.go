package train

import (
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strings"

	"hpctrain/gpu"
	"hpctrain/gpu/cudanet"
	"hpctrain/internal/cli"
	"hpctrain/model"
	"hpctrain/mpi"
)

// A trained network on the device a rank computes on, for the commands
// that use one (hpctrain eval, predict): the device chosen and opened as a
// training run chooses and opens its own (chooseGPU, resolveDevice), the
// network built there as the run builds its replica (deviceNet), and the
// checkpoint's parameters and batch-norm statistics pushed to it as a
// resumed run pushes them. What computes is a model.Replica either way:
// Evaluate and a caller's forward passes do not know which.

// DeviceChoice is where a command that runs a trained network computes:
// -device, -gpus and -gpu-share, meaning what they mean to train.
type DeviceChoice struct {
	Device   string // cpu, cuda or auto
	GPUs     string // each local rank's GPU, "none", or "" (local rank mod GPUs)
	GPUShare bool   // several local ranks may drive one GPU
}

// Flags binds -device (default cpu), -gpus and -gpu-share to fs. what
// names what computes in the help: "each rank", "the network".
func (d *DeviceChoice) Flags(fs *flag.FlagSet, what string) {
	if d.Device == "" {
		d.Device = "cpu"
	}
	fs.StringVar(&d.Device, "device", d.Device, "where "+what+" computes: cpu, cuda (a GPU, chosen as train chooses it: local rank i takes GPU i of those CUDA_VISIBLE_DEVICES leaves, or -gpus'; the CUDA driver, cuBLAS and NVRTC loaded at run time; one missing is an error) or auto (cuda when placement finds a GPU or a CUDA driver sees a device, else cpu; the CPU, with a warning, when the rest of CUDA does not load)")
	fs.StringVar(&d.GPUs, "gpus", d.GPUs, "GPU of each local rank, e.g. 0,1,2,3 (numbered as CUDA_VISIBLE_DEVICES leaves them), or none (-device auto: the CPU); empty: local rank mod GPUs, as train")
	fs.BoolVar(&d.GPUShare, "gpu-share", d.GPUShare, gpuShareHelp)
}

// gpuShareHelp is -gpu-share's help, train's and the trained network's
// commands'.
const gpuShareHelp = "let several local ranks drive one GPU (e.g. under MPS); without it more local ranks than GPUs is an error"

// Validate checks the choice as train's configuration checks the same
// keys; an error is a usage error naming the flag.
func (d DeviceChoice) Validate() error {
	if !slices.Contains(Devices, d.Device) {
		return cli.Usage(fmt.Errorf("-device %q: must be %s", d.Device, strings.Join(Devices, ", ")))
	}
	spec, err := gpu.ParseSpec(d.GPUs, d.GPUShare)
	if err != nil {
		return cli.Usage(fmt.Errorf("-gpus %q: %w", d.GPUs, err))
	}
	if spec.Off && d.Device == "cuda" {
		return cli.Usage(fmt.Errorf("-device cuda and -gpus none contradict each other: give the ranks GPUs, or use -device cpu"))
	}
	return nil
}

// config is the choice as a training run's settings: the GPU keys, and
// the collective mpi, since what is summed (an evaluation's counts) is
// summed over MPI on the host: NCCL is neither loaded nor needed.
func (d DeviceChoice) config() Config {
	cfg := Defaults()
	cfg.Device, cfg.GPUs, cfg.GPUShare = d.Device, d.GPUs, d.GPUShare
	cfg.Collective = "mpi"
	return cfg
}

// DeviceReplica is a trained network on the device this rank computes on.
type DeviceReplica struct {
	// Replica computes: the Trained's own Net on the CPU, else its copy
	// on the device (whose Host is a second host network, not the
	// Trained's).
	model.Replica
	// Label names this rank's device: "cpu", or the GPU's, as train's
	// -report-bindings does ("cuda:0 NVIDIA H100 80GB HBM3, sm_90").
	Label string
	// Ranks is one line naming every rank's device, for rank 0 to print:
	// the label where there is one rank or all have the same, else
	// "rank 0 LABEL; rank 1 LABEL; ...".
	Ranks string
	dev   *device
}

// OnCUDA reports whether the replica computes on a CUDA device.
func (r *DeviceReplica) OnCUDA() bool { return r.dev != nil }

// Close frees the device's copy of the network and the device (nothing
// on the CPU), and unlocks the OS thread OnDevice locked: it must be
// called from the goroutine that called OnDevice. A second call does
// nothing.
func (r *DeviceReplica) Close() {
	if r.dev == nil {
		return
	}
	if n, ok := r.Replica.(*cudanet.Net); ok {
		n.Close()
	}
	r.dev.close()
	r.dev = nil
	runtime.UnlockOSThread()
}

// OnDevice gives t's network on the device ch chooses for this rank of c
// (mpi.NewSingle for one process), as a training run chooses, opens and
// fills its own: the GPU by local rank (chooseGPU: CUDA_VISIBLE_DEVICES,
// -gpus, -gpu-share; then CUDA's numbering where no GPU was discovered),
// the device opened as train opens it (resolveDevice: its errors and exit
// codes; -device auto falls back to the CPU with a warning on warn, the
// line ending "; " + doing + " on the CPU"), the network built there in
// fp32 for batches of t.Batch in evaluation mode, and t's parameters and
// batch-norm statistics pushed to it. On the CPU it is t.Net itself.
//
// log takes lines for rank 0 to print (the GPU placement's notes), warn
// every rank's warnings. It is collective: every rank gets the same
// verdict, and a mix of ranks on the CPU and on GPUs (-device auto where
// some find none) is refused as train refuses it. With a CUDA device the
// calling goroutine is locked to its OS thread (the device's context is
// current there) until Close; it must run the forward passes.
func (t *Trained) OnDevice(c mpi.Comm, ch DeviceChoice, doing string, log, warn func(string)) (*DeviceReplica, error) {
	err := ch.Validate()
	if err = agree(c, "checking -device", err); err != nil {
		return nil, err
	}
	cfg := ch.config()
	g, err := chooseGPUSaid(cfg, c, func(f string, a ...any) { log(fmt.Sprintf(f, a...)) })
	if err != nil {
		return nil, err
	}
	ordinal := -1
	if g.top != nil {
		ordinal = g.assign.GPUs[c.LocalRank()]
	}
	if cfg.Device != "cpu" {
		// A CUDA context is current on one OS thread: the caller's
		// goroutine stays there until Close, as a training run's does.
		runtime.LockOSThread()
	}
	unlock := func() {
		if cfg.Device != "cpu" {
			runtime.UnlockOSThread()
		}
	}
	who := ""
	if c.Size() > 1 {
		who = fmt.Sprintf("rank %d: ", c.Rank())
	}
	d, err := resolveDevice(cfg, ordinal, c, func(err error) {
		warn(fmt.Sprintf("hpctrain: warning: %s-device auto: %v; %s on the CPU", who, err, doing))
	})
	if err != nil {
		unlock()
		return nil, err
	}
	kind := "cpu"
	if d != nil {
		kind = "cuda"
	}
	if err := agreeText(c, "device", kind, "give every rank a GPU, or none (-device cpu)"); err != nil {
		d.close()
		unlock()
		return nil, err
	}
	r := &DeviceReplica{Replica: t.Net, Label: "cpu"}
	if d != nil {
		var net *cudanet.Net
		net, err = deviceNet(d, t.Desc, t.Net.In, t.Net.Classes, t.Batch, t.Config.Seed, "fp32")
		if err = agree(c, "building the model", err); err != nil {
			if net != nil { // built here, not on another rank
				net.Close()
			}
			d.close()
			unlock()
			return nil, err
		}
		r.Replica, r.Label, r.dev = net, d.label(), d
		h := net.Host()
		copy(h.Params, t.Net.Params)
		copy(h.Buffers, t.Net.Buffers)
		net.SetTraining(false)
		if err = agree(c, "copying the checkpoint to the device", net.Push()); err != nil {
			r.Close()
			return nil, err
		}
	} else {
		unlock()
	}
	if r.Ranks, err = deviceLine(c, r.Label); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// deviceLine gathers every rank's device label into one line: the label
// where all are the same, else each rank's (the first 8). Collective.
func deviceLine(c mpi.Comm, label string) (string, error) {
	b := make([]byte, textWidth)
	copy(b, label)
	all := make([]byte, textWidth*c.Size())
	if err := c.Allgather(b, all); err != nil {
		return "", fmt.Errorf("gathering the ranks' devices: %w", err)
	}
	labels := make([]string, c.Size())
	same := true
	for r := range labels {
		labels[r] = strings.TrimRight(string(all[r*textWidth:(r+1)*textWidth]), "\x00")
		same = same && labels[r] == labels[0]
	}
	switch {
	case c.Size() == 1:
		return labels[0], nil
	case same:
		return labels[0] + " on every rank", nil
	}
	var parts []string
	for r, l := range labels[:min(len(labels), 8)] {
		parts = append(parts, fmt.Sprintf("rank %d %s", r, l))
	}
	line := strings.Join(parts, "; ")
	if len(labels) > 8 {
		line += fmt.Sprintf("; and %d more ranks", len(labels)-8)
	}
	return line, nil
}
