package train

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"hpctrain/gpu"
	"hpctrain/gpu/collective"
	"hpctrain/gpu/cuda"
	"hpctrain/gpu/cudanet"
	"hpctrain/gpu/cudaoptim"
	"hpctrain/internal/cli"
	"hpctrain/internal/dnnl"
	"hpctrain/model"
	"hpctrain/mpi"
	"hpctrain/optim"
)

// A rank computes on the CPU or on a CUDA device. Both are the same three
// parts behind the same interfaces, so the step reads the same for both:
//
//	part                 cpu                      cuda
//	model.Replica        model.Net                cudanet.Net
//	gradReducer          buckets (MPI)            collective.Reducer (NCCL, or MPI staged)
//	optim.Optimizer      optim's implementations  deviceOptimizer (cudaoptim kernels)
//
// openDevice picks the device and backend builds the parts.

// gradReducer sums the replicas' gradients as backward produces them
// (model.GradHook), in buckets.
type gradReducer interface {
	model.GradHook
	// Poison makes the reduced gradients non-finite on every rank (this
	// rank's loss is not finite, or a fault says so).
	Poison()
	// Wait starts what backward did not start and waits for every bucket;
	// it returns the time the all-reduces took.
	Wait(step int) (time.Duration, error)
	// Finish multiplies the reduced gradients by unscale (fp16's loss
	// scale; 1 leaves them) and reports whether they are all finite: the
	// same answer on every rank, since all hold the same sums.
	Finish(unscale float32) (finite bool, err error)
	// Buckets is the number of buckets.
	Buckets() int
}

// device is this rank's CUDA device, or nil for the CPU.
type device struct {
	dev  *cudanet.Device
	mode collective.Mode
	nccl *cuda.Comm
}

// ncclReduces reports whether NCCL sums the gradients (on a stream of
// the device), not MPI.
func (d *device) ncclReduces() bool {
	return d != nil && d.mode == collective.NCCL
}

// label names where the rank computes, for -report-bindings and the log.
func (d *device) label() string {
	if d == nil {
		return "cpu"
	}
	return d.dev.Label()
}

func (d *device) close() {
	if d == nil {
		return
	}
	if d.nccl != nil {
		d.nccl.Destroy()
	}
	d.dev.Close()
}

// openDevice resolves -device for this rank. cuda opens the GPU placement
// chose (else local rank mod the devices CUDA sees); auto does the same
// when placement gave the rank a GPU or a CUDA driver loads and sees a
// device, and falls back to the CPU with a warning when the rest of CUDA
// (cuBLAS, NVRTC, NCCL) does not load. All ranks then agree on the kind of
// device, so that every rank sums gradients the same way.
func (r *run) openDevice() (*device, error) {
	cfg, c := r.cfg, r.c
	d, err := resolveDevice(cfg, r.pl.gpu, c, func(err error) {
		r.warn("hpctrain: warning: rank %d: -device auto: %v; training on the CPU", c.Rank(), err)
	})
	if err != nil {
		return nil, err
	}
	if cfg.Precision == "auto" {
		p, err := r.resolvePrecision(d)
		if err != nil {
			d.close()
			return nil, err
		}
		cfg.Precision, r.cfg.Precision = p, p
	}
	// bf16 and tf32 products are the tensor cores' of compute capability
	// 8.0 on: older GPUs would refuse bf16, or compute tf32 in plain fp32
	// while the run said tf32.
	// A CPU without bf16 dot products is refused alike, here rather than
	// by the model's kernels later (exit 1, no hint).
	var why string
	switch {
	case d != nil && (cfg.Precision == "bf16" || cfg.Precision == "tf32"):
		if why = bf16Missing(d, cfg.CPUKernels); why != "" {
			why = fmt.Sprintf("precision %s: %s; use -precision fp32, fp16 or auto", cfg.Precision, strings.Replace(why, "bf16", cfg.Precision, 1))
		}
	case d == nil && cfg.Precision == "bf16":
		if k, err := CPUKernelsOf(cfg.CPUKernels, "fp32"); err == nil && k.DNNL {
			if ok, missing := cpuBF16(); !ok {
				why = fmt.Sprintf("precision bf16 needs AVX512-BF16 or AMX-BF16 on the CPU: %s; use -precision fp32 or auto", missing)
			}
		}
	}
	if why != "" {
		err = cli.Usage(errors.New(why))
	}
	if err = agree(c, "choosing the precision", err); err != nil {
		d.close()
		return nil, err
	}
	// Every rank must sum gradients alike, in the same precision. The
	// text itself is compared, so that a rank that found no GPU is named
	// with what it has ("rank 1 has cpu, fp32").
	kind := "cpu"
	if d != nil {
		kind = "cuda with " + d.mode.String()
	}
	kind += ", " + cfg.Precision
	if cfg.Precision == "fp16" {
		kind += fmt.Sprintf(", loss scale %g every %d steps", cfg.LossScale, cfg.LossScaleInterval)
	}
	if err := agreeText(c, "device, collective and precision", kind, "give every rank a GPU, or none (-device cpu), and the same -precision"); err != nil {
		d.close()
		return nil, err
	}
	if d == nil && cfg.Collective == "nccl" {
		return nil, agree(c, "choosing the collective", cli.Usage(fmt.Errorf("collective = \"nccl\" sums on GPUs, and this run computes on the CPU (-device %s found no usable GPU): use -collective auto, shm or mpi", cfg.Device)))
	}
	if d == nil && cfg.Precision != "fp32" && cfg.Precision != "bf16" {
		return nil, agree(c, "choosing the precision", cli.Usage(fmt.Errorf("precision %s needs a CUDA device, and this run computes on the CPU (fp32 or bf16 there)", cfg.Precision)))
	}
	if d != nil && d.mode == collective.NCCL {
		d.nccl, err = collective.NewNCCL(c)
		if err = agree(c, "creating the NCCL communicator", err); err != nil {
			d.close()
			return nil, err
		}
	}
	return d, nil
}

// resolveDevice opens this rank's device for cfg.Device: cuda opens the
// GPU of ordinal gpuOrdinal (placement's choice; -1: local rank mod the
// devices CUDA sees), auto does the same when placement gave the rank a
// GPU or a CUDA driver loads and sees a device, and falls back to the CPU
// (nil), calling fallback with the reason, when the rest of CUDA does not
// load; cpu is nil. Collective: every rank gets the same verdict ("opening
// the CUDA device"); on failure no rank keeps a device open.
func resolveDevice(cfg Config, gpuOrdinal int, c mpi.Comm, fallback func(error)) (*device, error) {
	var d *device
	var err error
	switch cfg.Device {
	case "cuda":
		d, err = openCUDA(gpuOrdinal, c.LocalRank(), c.LocalSize(), cfg)
	case "auto":
		// A GPU placement found, or a CUDA driver that loads and sees a
		// device (a node without NVML): try it, else the CPU. Collective
		// shm sums host memory: it asks for the CPU.
		// -gpus none keeps the ranks off the GPUs.
		if spec, _ := gpu.ParseSpec(cfg.GPUs, cfg.GPUShare); !spec.Off && cfg.Collective != "shm" && (gpuOrdinal >= 0 || cudaPresent()) {
			d, err = openCUDA(gpuOrdinal, c.LocalRank(), c.LocalSize(), cfg)
			if err != nil && !errors.As(err, new(cli.UsageError)) { // a bad request is refused, as -device cuda's
				fallback(err)
				d, err = nil, nil
			}
		}
	}
	if err = agree(c, "opening the CUDA device", err); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

// resolvePrecision returns what precision auto is on every rank: bf16
// where every rank's device computes bfloat16 products in hardware
// (bf16Missing), else fp32. Rank 0 says which and why; where only some
// ranks lack bf16, rank 0 names them and the first of them prints what it
// lacks, so that a mixed partition is named rather than silently slow.
func (r *run) resolvePrecision(d *device) (string, error) {
	c := r.c
	why := bf16Missing(d, r.cfg.CPUKernels)
	mine := []byte{1}
	if why != "" {
		mine[0] = 0
	}
	all := make([]byte, c.Size())
	if err := c.Allgather(mine, all); err != nil {
		return "", fmt.Errorf("choosing the precision (auto): %w", err)
	}
	var without []int
	for rank, ok := range all {
		if ok == 0 {
			without = append(without, rank)
		}
	}
	where := "CPU has AVX512-BF16 or AMX-BF16"
	if d != nil {
		where = "GPU is sm_80 or later"
	}
	if len(without) == 0 {
		r.log("hpctrain: precision auto: bf16 (every rank's %s)", where)
		return "bf16", nil
	}
	if len(without) == c.Size() {
		r.log("hpctrain: precision auto: fp32, no bf16 here: %s", why) // rank 0's reason
		return "fp32", nil
	}
	if c.Rank() == without[0] {
		r.warn("hpctrain: rank %d: precision auto: no bf16 here: %s", c.Rank(), why)
	}
	r.log("hpctrain: precision auto: fp32, since %s of %d cannot compute in bf16", rankList(without), c.Size())
	return "fp32", nil
}

// bf16Missing says why this rank's device cannot compute in bf16 at
// speed, or "" when it can: a GPU needs compute capability 8.0 (bf16
// tensor cores), a CPU oneDNN's kernels on AVX512-BF16 or AMX-BF16.
func bf16Missing(d *device, cpuKernels string) string {
	if d != nil {
		if major, minor := d.dev.ComputeCapability(); major < 8 {
			return fmt.Sprintf("%s has no bf16 tensor cores (compute capability %d.%d; they start at 8.0)", d.label(), major, minor)
		}
		return ""
	}
	if k, err := CPUKernelsOf(cpuKernels, "fp32"); err != nil || !k.DNNL {
		return fmt.Sprintf("cpu_kernels %s has no bf16 products (oneDNN's have)", cpuKernels)
	}
	if ok, missing := cpuBF16(); !ok {
		return missing
	}
	return ""
}

// cpuBF16 is dnnl.HasBF16 (a variable for tests).
var cpuBF16 = dnnl.HasBF16

// rankList names ranks: "rank 3", "ranks 1, 4, 7", "ranks 1, 4, 7 and 12 more".
func rankList(ranks []int) string {
	if len(ranks) == 1 {
		return fmt.Sprintf("rank %d", ranks[0])
	}
	var s []string
	for _, r := range ranks[:min(len(ranks), 8)] {
		s = append(s, fmt.Sprint(r))
	}
	out := "ranks " + strings.Join(s, ", ")
	if len(ranks) > 8 {
		out += fmt.Sprintf(" and %d more", len(ranks)-8)
	}
	return out
}

// cudaPresent reports whether a CUDA driver loads and sees a device.
func cudaPresent() bool {
	if cuda.LoadDriver() != nil {
		return false
	}
	n, err := cuda.DeviceCount()
	return err == nil && n > 0
}

// openCUDA opens the device of ordinal gpu (placement's), or of local
// rank mod the devices CUDA sees when placement found none (no NVML): as
// placement does, more local ranks (of localSize) than devices needs
// gpu_share.
func openCUDA(gpu, localRank, localSize int, cfg Config) (*device, error) {
	d, err := openCUDADevice(gpu, localRank, localSize, cfg)
	if v, set := os.LookupEnv("CUDA_VISIBLE_DEVICES"); set && cuda.NoDevice(err) {
		// The user's own setting hid the GPUs: bad input, as
		// placement's refusal of a CUDA_VISIBLE_DEVICES naming no GPU.
		return nil, cli.Usage(fmt.Errorf("%w: CUDA_VISIBLE_DEVICES=%q leaves CUDA no GPU; unset it or list the GPUs to use, or use -device cpu", err, v))
	}
	return d, err
}

func openCUDADevice(gpu, localRank, localSize int, cfg Config) (*device, error) {
	mode := collective.NCCL
	if cfg.Collective == "mpi" {
		mode = collective.MPI
	}
	if gpu < 0 {
		n, err := cuda.DeviceCount()
		if err != nil {
			return nil, err
		}
		if n > 0 && localSize > n && !cfg.GPUShare {
			devices := fmt.Sprintf("%d devices", n)
			if n == 1 {
				devices = "1 device"
			}
			return nil, cli.Usage(fmt.Errorf("%d local ranks but CUDA sees %s: each rank needs a GPU of its own; use -gpu-share to let ranks share GPUs (MPS), -device cpu, or start at most %d per node", localSize, devices, n))
		}
		if gpu, err = cuda.LocalDevice(localRank); err != nil {
			return nil, err
		}
	}
	if mode == collective.NCCL {
		if err := cuda.LoadNCCL(); err != nil {
			return nil, err
		}
	}
	dev, err := cudanet.Open(gpu)
	if err != nil {
		return nil, err
	}
	return &device{dev: dev, mode: mode}, nil
}

// warn prints a message of this rank's (every rank's, not just rank 0's).
func (r *run) warn(format string, a ...any) {
	fmt.Fprintf(r.errOut, format+"\n", a...)
}

// everyRank is log on every rank, the rank named at the end of the line:
// for what each rank saw of its own (the images its loader read lazily,
// which rank 0 alone would leave unsaid).
func (r *run) everyRank(format string, a ...any) {
	fmt.Fprintf(r.out, format+" (rank %d)\n", append(a, r.c.Rank())...)
}

// buildReplica makes the network on the rank's device: the host network
// itself on the CPU, with its gradients in grads when not nil (see
// nodeGrads), else its device copy (whose Host is the host network).
func buildReplica(d *device, cfg Config, in model.Shape, classes int, grads []float32) (model.Replica, error) {
	if d == nil {
		var opts []model.Option
		if grads != nil {
			opts = append(opts, model.GradsIn(grads))
		}
		net, err := model.New(cfg.Model, in, classes, cfg.Batch, cfg.Seed, opts...)
		if err != nil {
			return nil, err
		}
		k, err := CPUKernelsOf(cfg.CPUKernels, cfg.Precision)
		if err != nil {
			return nil, err
		}
		if err := net.SetKernels(k); err != nil {
			return nil, err
		}
		return net, nil
	}
	desc, err := model.LoadDesc(cfg.Model)
	if err != nil {
		return nil, err
	}
	return deviceNet(d, desc, in, classes, cfg.Batch, cfg.Seed, cfg.Precision)
}

// deviceNet builds desc on the CUDA device d (cudanet.New) for batches of
// up to batch samples, its products in precision (fp32, tf32, bf16, fp16).
func deviceNet(d *device, desc model.Desc, in model.Shape, classes, batch int, seed uint64, precision string) (*cudanet.Net, error) {
	p, err := cudanet.ParsePrecision(precision)
	if err != nil {
		return nil, err
	}
	return cudanet.New(d.dev, desc, in, classes, batch, seed, p)
}

// CPUKernelsOf is the model's CPU kernels for the cpu_kernels and
// precision settings, as this CPU runs them (model.Kernels.OnThisCPU).
func CPUKernelsOf(kernels, precision string) (model.Kernels, error) {
	dnnlK := kernels == "dnnl" || kernels == "dnnl-direct" || kernels == "dnnl-all" || (kernels == "auto" && model.DefaultKernels().DNNL)
	k := model.Kernels{DNNL: dnnlK, BF16: precision == "bf16", Direct: kernels == "dnnl-direct"}
	k.AllDNNL = kernels == "dnnl-all"
	switch {
	case !slices.Contains(CPUKernels, kernels):
		return k, cli.Usage(fmt.Errorf("cpu kernels %q: want %s", kernels, strings.Join(CPUKernels, ", ")))
	case precision != "fp32" && precision != "bf16":
		return k, cli.Usage(fmt.Errorf("precision %s: the CPU computes in fp32 or bf16", precision))
	case k.BF16 && kernels == "blas":
		return k, cli.Usage(fmt.Errorf("precision bf16 needs the oneDNN kernels, and cpu_kernels blas computes in fp32 only: use cpu_kernels auto, dnnl, dnnl-direct or dnnl-all"))
	case k.BF16 && !k.DNNL:
		return k, cli.Usage(fmt.Errorf("precision bf16 needs the oneDNN kernels, and this binary has none (built without oneDNN): use precision fp32"))
	}
	return k.OnThisCPU(), nil
}

// newOptimizer makes the optimizer of the replica: optim's on the host
// network, or the device's kernels.
func newOptimizer(d *device, rep model.Replica, cfg optim.Config) (optim.Optimizer, error) {
	net := rep.Host()
	if d == nil {
		return optim.New(cfg, Groups(net), len(net.Params))
	}
	g := rep.(*cudanet.Net)
	o, err := cudaoptim.New(d.dev.Context(), g.Stream(), d.dev.Module(), cfg, Groups(net), g.Params(), g.Grads(), g.Len())
	if err != nil {
		return nil, err
	}
	return &deviceOptimizer{o: o}, nil
}

// newReducer makes the gradient reducer of the replica.
func newReducer(d *device, rep model.Replica, c mpi.Comm, bucket int, wd *watchdog, step *int) (gradReducer, *buckets, error) {
	net := rep.Host()
	if d == nil {
		bk := newBuckets(c, net.Grads, layerStarts(net), bucket, wd)
		return bk, bk, nil
	}
	g := rep.(*cudanet.Net)
	red, err := collective.New(d.dev.Context(), g.Stream(), d.dev.Module(), g.Grads(), g.Len(), layerStarts(net), bucket, d.mode, c, d.nccl)
	if err != nil {
		return nil, nil, err
	}
	op := &opNCCL
	if d.mode == collective.MPI {
		op = &opGradients
	}
	red.SetWatch(func(b int) { wd.enter(op, *step, b) }, wd.leave)
	wd.onAbort(red.Abort)
	return deviceReducer{red}, nil, nil
}

// deviceReducer is collective.Reducer as a gradReducer (its Wait times
// itself through SetWatch).
type deviceReducer struct{ *collective.Reducer }

func (d deviceReducer) Wait(int) (time.Duration, error) { return d.Reducer.Wait() }

// deviceOptimizer is a cudaoptim.Optimizer as an optim.Optimizer: Step
// updates the device's buffers (the host slices it is given are the host
// copy, not the values it updates), and State is the host copy of the
// device's state as of the last Pull, which the run calls before it
// writes a checkpoint.
type deviceOptimizer struct {
	o     *cudaoptim.Optimizer
	state [][]float32
	err   error // the first failure of Step, reported by the step
}

func (d *deviceOptimizer) Name() string { return d.o.Name() }

func (d *deviceOptimizer) Step(_, _ []float32, lr float64) {
	if err := d.o.Step(lr); err != nil && d.err == nil {
		d.err = err
	}
}

func (d *deviceOptimizer) State() [][]float32 { return d.state }

func (d *deviceOptimizer) Restore(state [][]float32) error {
	if err := d.o.Restore(state); err != nil {
		return err
	}
	d.state = state
	return nil
}

func (d *deviceOptimizer) SetParallel(optim.Parallel) {}

// Err returns the first failed Step since the last call, and clears it.
func (d *deviceOptimizer) Err() error {
	err := d.err
	d.err = nil
	return err
}

// Pull copies the device's optimizer state to the host (State).
func (d *deviceOptimizer) Pull() error {
	s, err := d.o.State()
	d.state = s
	return err
}

// pull makes the host copy current: the replica's parameters and
// buffers, and the optimizer's state, before they are written or
// compared. A no-op on the CPU.
func pull(rep model.Replica, opt optim.Optimizer) error {
	if err := rep.Pull(); err != nil {
		return fmt.Errorf("copying the model from the device: %w", err)
	}
	if d, ok := opt.(*deviceOptimizer); ok {
		if err := d.Pull(); err != nil {
			return fmt.Errorf("copying the optimizer state from the device: %w", err)
		}
	}
	return nil
}

// describeDevice is the start-up line's part about the device.
func describeDevice(d *device, precision string, net *model.Net) string {
	if d == nil {
		return "cpu, " + net.Kernels().String()
	}
	return strings.Join([]string{d.label(), precision, d.mode.String()}, ", ")
}
