package bench

import (
	"fmt"
	"hpctrain/internal/cli"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"time"

	"hpctrain/affinity"
	"hpctrain/data"
	"hpctrain/model"
	"hpctrain/mpi"
	"hpctrain/optim"
	"hpctrain/train"
)

// StepReport is `hpctrain bench step`'s result.
type StepReport struct {
	Model            string  `json:"model"`
	Input            string  `json:"input"` // one sample, HxWxC
	Classes          int     `json:"classes"`
	Batch            int     `json:"batch"`
	Threads          int     `json:"threads"`
	Optimizer        string  `json:"optimizer"` // "none": forward, loss and backward only
	Kernels          string  `json:"kernels"`   // the convolutions' and linear layers': blas, dnnl or dnnl bf16
	SamplesPerSecond float64 `json:"samples_per_second"`
	StepMillis       float64 `json:"step_ms_median"`
	GFLOPS           float64 `json:"gflops"`
	SgemmGFLOPS      float64 `json:"sgemm_2048_gflops_same_run"` // OpenBLAS, as many threads as the step
	FractionOfSgemm  float64 `json:"fraction_of_sgemm_rate"`
	// PeakGFLOPS is the cores' peak rate in the kernels' arithmetic (bf16
	// dot products for bf16 kernels, else float32 fused multiply-adds),
	// on as many cores as the step, same run (PeakRate); 0 where there is
	// no vector loop to measure it.
	PeakGFLOPS     float64     `json:"peak_gflops_same_run"`
	FractionOfPeak float64     `json:"fraction_of_peak,omitempty"`
	PeakRSSMB      float64     `json:"peak_rss_mb"`
	Layers         []LayerTime `json:"layers"`
}

// LayerTime is one layer's share of a step.
type LayerTime struct {
	Name          string  `json:"name"`
	ForwardMS     float64 `json:"forward_ms"`
	BackwardMS    float64 `json:"backward_ms"`
	ForwardGFLOPS float64 `json:"forward_gflops,omitempty"`
}

// Step is `hpctrain bench step`: full training steps (forward, loss,
// backward, optimizer update) of a model on pinned workers, with the
// per-layer breakdown and the SGEMM rate measured in the same run.
func Step(args []string, out io.Writer) error {
	fs := newFlags("step")
	name := fs.String("model", "cnn", "network: a built-in model ("+strings.Join(model.Names(), ", ")+") or a description FILE.toml")
	input := fs.String("input", "28x28x1", "shape of one input sample, `HxWxC` (random pixels in [0,1))")
	classes := fs.Int("classes", 10, "number of classes (outputs; random labels)")
	batch := fs.Int("batch", 64, "batch")
	threads := fs.Int("threads", 1, "compute threads (pinned to the first cores of the mask)")
	steps := fs.Int("steps", 30, "timed steps")
	opt := fs.String("optimizer", "sgd", "update in each step, lr 0.01 and, for sgd, momentum 0.9 (the PyTorch comparison's recipe): "+fmt.Sprint(optim.Names())+" or none")
	kern := fs.String("kernels", "", "convolution and linear kernels, a comma list measured side by side: blas, dnnl, dnnl-direct (as dnnl, without Winograd), dnnl-wino-f2 (Winograd layers on hpctrain's F(2x2, 3x3) even where oneDNN has its own), dnnl-all (every convolution on oneDNN's direct primitives, none on hpctrain's own kernels), dnnl-bf16 (3x3 stride-1 layers on hpctrain's bf16 Winograd F(2x2, 3x3)), dnnl-bf16-direct (bf16, no Winograd), dnnl-bf16-all (bf16, every convolution on oneDNN); the bf16 sets as train runs them on this CPU: on oneDNN alone where oneDNN runs AMX-BF16; default: dnnl where linked in, else blas; with several, -json writes a list")
	js := fs.String("json", "", "also write the report as JSON to `FILE`")
	if err := cli.Parse(fs, args, os.Stderr, false); err != nil {
		return err
	}
	var kerns []model.Kernels
	if *kern == "" {
		kerns = []model.Kernels{model.DefaultKernels()}
	}
	seen := map[string]bool{}
	for _, k := range strings.Split(*kern, ",") {
		if k != "" && seen[k] {
			return cli.Usage(fmt.Errorf("-kernels %q: %s twice", *kern, k))
		}
		seen[k] = true
		switch k {
		case "":
			if *kern != "" {
				return cli.Usage(fmt.Errorf("-kernels %q: an empty name in the list", *kern))
			}
		case "blas":
			kerns = append(kerns, model.Kernels{})
		case "dnnl":
			kerns = append(kerns, model.Kernels{DNNL: true})
		case "dnnl-direct":
			kerns = append(kerns, model.Kernels{DNNL: true, Direct: true})
		case "dnnl-wino-f2":
			kerns = append(kerns, model.Kernels{DNNL: true, OwnWinograd: true})
		case "dnnl-all":
			kerns = append(kerns, model.Kernels{DNNL: true, AllDNNL: true})
		case "dnnl-bf16":
			kerns = append(kerns, model.Kernels{DNNL: true, BF16: true}.OnThisCPU())
		case "dnnl-bf16-direct":
			kerns = append(kerns, model.Kernels{DNNL: true, BF16: true, Direct: true}.OnThisCPU())
		case "dnnl-bf16-all":
			kerns = append(kerns, model.Kernels{DNNL: true, BF16: true, AllDNNL: true})
		default:
			return cli.Usage(fmt.Errorf("-kernels: %q is not blas, dnnl, dnnl-direct, dnnl-wino-f2, dnnl-all, dnnl-bf16, dnnl-bf16-direct or dnnl-bf16-all", k))
		}
	}
	if err := firstBad(intIn("batch", *batch, 1, train.MaxBatch), intIn("threads", *threads, 1, train.MaxThreads),
		intIn("steps", *steps, 1, 1e6), intIn("classes", *classes, 1, 1<<20), writable("json", *js)); err != nil {
		return cli.Usage(err)
	}
	in, err := model.ParseShape(*input)
	if err != nil {
		return cli.Usage(fmt.Errorf("-input: %w", err))
	}
	var reps []StepReport
	for _, k := range kerns {
		rep, err := StepRateKernels(k, *name, in, *classes, *batch, *threads, *steps, *opt)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s batch %d, %d thread(s), %s kernels, optimizer %s: %.0f samples/s, %.2f ms/step, %.1f GFLOP/s = %.0f%% of %d-thread SGEMM 2048^3 (%.1f GFLOP/s, same run)",
			rep.Model, rep.Batch, rep.Threads, rep.Kernels, rep.Optimizer, rep.SamplesPerSecond, rep.StepMillis, rep.GFLOPS, 100*rep.FractionOfSgemm, rep.Threads, rep.SgemmGFLOPS)
		if rep.PeakGFLOPS > 0 {
			fmt.Fprintf(out, " = %.0f%% of the %d core(s)' %s peak (%.1f GFLOP/s)", 100*rep.FractionOfPeak, rep.Threads, arithmetic(k.BF16), rep.PeakGFLOPS)
		}
		fmt.Fprintf(out, ", peak RSS %.0f MB\n", rep.PeakRSSMB)
		fmt.Fprintf(out, "%-10s %12s %12s %14s\n", "layer", "forward_ms", "backward_ms", "fwd GFLOP/s")
		for _, l := range rep.Layers {
			fmt.Fprintf(out, "%-10s %12.3f %12.3f %14.1f\n", l.Name, l.ForwardMS, l.BackwardMS, l.ForwardGFLOPS)
		}
		reps = append(reps, rep)
	}
	if len(reps) == 1 {
		return writeJSON(*js, reps[0])
	}
	return writeJSON(*js, reps)
}

// StepRateKernels measures steps of the named model, with the given
// convolution and linear kernels, for input shape in (zero: 28x28x1) and
// classes outputs, each updating the parameters with the named optimizer
// ("none": no update).
func StepRateKernels(k model.Kernels, name string, in model.Shape, classes, batch, threads, steps int, optimizer string) (StepReport, error) {
	// Refused in one line, as train refuses it, before the allocation
	// would end the process.
	if err := checkNet(data.NewBudget(1), name, in, classes, batch); err != nil {
		return StepReport{}, err
	}
	net, err := model.New(name, in, classes, batch, 1)
	if err != nil {
		return StepReport{}, err
	}
	if err := net.SetKernels(k); err != nil {
		return StepReport{}, err
	}
	defer net.Close()
	var opt optim.Optimizer
	if optimizer != "none" {
		if opt, err = newOptimizer(optimizer, net); err != nil {
			return StepReport{}, err
		}
	}
	mask, err := affinity.Allowed()
	if err != nil {
		return StepReport{}, err
	}
	cpus := mask.CPUs()
	if threads > len(cpus) {
		return StepReport{}, cli.Usage(fmt.Errorf("-threads %d: only %d cpus in the mask %s", threads, len(cpus), mask))
	}
	w, err := affinity.NewWorkers(cpus[:threads])
	if err != nil {
		return StepReport{}, err
	}
	defer w.Close()
	if err := w.Lead(); err != nil { // as train: the caller computes worker 0's share
		return StepReport{}, err
	}
	runtime.GOMAXPROCS(affinity.Procs(threads)) // as train sets it
	net.SetParallel(w)
	if opt != nil {
		opt.SetParallel(w)
	}
	// The training step itself (train.Step), on one random batch, with
	// no peers: the all-reduce of a job of one is free.
	sched, err := optim.NewSchedule(optim.ScheduleConfig{Name: "constant"}, 0.01, steps)
	if err != nil {
		return StepReport{}, err
	}
	st := train.NewStep(net, opt, sched, mpi.NewSingle(), 0)
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, batch*net.In.Size())
	for i := range x {
		x[i] = rng.Float32()
	}
	labels := make([]int32, batch)
	for i := range labels {
		labels[i] = int32(rng.IntN(classes))
	}
	st.Load(x, labels)
	step := func() {
		if _, err := st.Run(0); err != nil {
			panic("bench: step on random data failed: " + err.Error())
		}
	}
	for i := 0; i < 3; i++ {
		step()
	}
	ts := make([]time.Duration, steps)
	for i := range ts {
		t := time.Now()
		step()
		ts[i] = time.Since(t)
	}
	med := median(ts)
	fwd, bwd := layerTimes(net, batch, labels, 15)
	w.Close() // OpenBLAS's threads get the cores, the caller its mask back
	sgemm, err := SgemmRate(threads, 3)
	if err != nil {
		return StepReport{}, err
	}
	flop := 2 * float64(net.TrainMACs()) * float64(batch) // 2 flops per multiply-add
	rep := StepReport{
		Model: name, Input: net.In.String(), Classes: classes, Batch: batch, Threads: threads, Optimizer: optimizer, Kernels: k.String(),
		SamplesPerSecond: float64(batch) / med.Seconds(), StepMillis: 1e3 * med.Seconds(),
		GFLOPS: flop / med.Seconds() / 1e9, SgemmGFLOPS: sgemm, PeakRSSMB: float64(peakRSS()) / (1 << 20),
	}
	rep.FractionOfSgemm = rep.GFLOPS / rep.SgemmGFLOPS
	if rep.PeakGFLOPS, err = PeakRate(k.BF16, threads); err != nil {
		return StepReport{}, err
	}
	if rep.PeakGFLOPS > 0 {
		rep.FractionOfPeak = rep.GFLOPS / rep.PeakGFLOPS
	}
	for i, l := range net.Layers {
		lt := LayerTime{Name: l.Name(), ForwardMS: 1e3 * fwd[i].Seconds(), BackwardMS: 1e3 * bwd[i].Seconds()}
		if l.MACs() > 0 {
			lt.ForwardGFLOPS = 2 * float64(l.MACs()) * float64(batch) / fwd[i].Seconds() / 1e9
		}
		rep.Layers = append(rep.Layers, lt)
	}
	return rep, nil
}

// layerTimes is each layer's forward and backward time over a batch of nb,
// the median of passes passes after two unmeasured ones (the first pass
// after a training step finds the weights just written by the optimizer
// and the layers' buffers cold).
func layerTimes(net *model.Net, nb int, labels []int32, passes int) (fwd, bwd []time.Duration) {
	n := len(net.Layers)
	f, b := make([][]time.Duration, n), make([][]time.Duration, n)
	pf, pb := make([]time.Duration, n), make([]time.Duration, n)
	for p := -2; p < passes; p++ {
		clear(pf)
		clear(pb)
		net.TimeLayers(nb, labels, pf, pb)
		if p < 0 {
			continue
		}
		for i := range n {
			f[i], b[i] = append(f[i], pf[i]), append(b[i], pb[i])
		}
	}
	fwd, bwd = make([]time.Duration, n), make([]time.Duration, n)
	for i := range n {
		fwd[i], bwd[i] = median(f[i]), median(b[i])
	}
	return fwd, bwd
}
