package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"hpctrain/affinity"
	"hpctrain/data"
	"hpctrain/internal/cli"
	"hpctrain/model"
	"hpctrain/mpi"
	"hpctrain/optim"
	"hpctrain/train"
)

// syntheticLen is the samples of -dataset synthetic.
const syntheticLen = 10000

// DataReport is `hpctrain bench data`'s result.
type DataReport struct {
	Dataset    string              `json:"dataset"`
	Model      string              `json:"model"`
	Batch      int                 `json:"batch"`
	Threads    int                 `json:"threads"`
	GOMAXPROCS string              `json:"gomaxprocs"`
	Loader     []data.LoaderResult `json:"loader"`
	Step       []StepWithLoader    `json:"step"`
}

// StepWithLoader compares the training step fed by the loader with the
// same step on a batch already in memory, measured in alternating rounds.
type StepWithLoader struct {
	Chain   string `json:"chain"`
	Workers int    `json:"workers"`
	// Medians over the rounds of each round's mean step time.
	InMemoryMS   float64 `json:"step_in_memory_ms"`
	WithLoaderMS float64 `json:"step_with_loader_ms"`
	// Ratio is WithLoaderMS / InMemoryMS; the target is <= 1.05
	// with enough workers.
	Ratio float64 `json:"ratio"`
	// PairRatio is the median over rounds of each loader round's time over
	// the in-memory round just before it: robust to load that drifts.
	PairRatio float64 `json:"median_pair_ratio"`
	// CPU time of the process per step (user + system, getrusage), medians
	// over the rounds: the work the loader adds, which other tenants of a
	// shared machine do not change the way they change wall time.
	InMemoryCPUMS   float64 `json:"cpu_in_memory_ms"`
	WithLoaderCPUMS float64 `json:"cpu_with_loader_ms"`
	Rounds          int     `json:"rounds"`
	Steps           int     `json:"steps_per_round"`
}

// Data is `hpctrain bench data`: loader throughput (samples/s) for each
// worker count with no, a light and a heavy transform chain, then the
// reference CNN's training step (forward, loss, backward, SGD with
// momentum: what train runs per step, less the all-reduce) fed by the real
// loader, beside the same step on a batch already in memory.
//
// The compute runs as in `hpctrain train`: -threads workers pinned to the
// first CPUs of the mask, GOMAXPROCS set as train sets it (data.Procs), so
// the loader's goroutines compete with compute as in a run. Both variants
// copy the batch into the network's input. They alternate round by round,
// because the machine is shared and noisy: a round of -steps steps on the
// batch in memory with the loader stopped, then a round fed by the loader,
// whose workers start it with their queue full and refill it within the
// round, so that it pays for one batch per step as in steady state. Each
// round's mean step time counts every stall; the table shows the median
// round of each variant and their ratio.
func Data(args []string, out io.Writer) error {
	fs := newFlags("data")
	dsName := fs.String("dataset", "fashion-mnist", "fashion-mnist (files in -data-dir) or synthetic (10,000 generated samples of -image-shape)")
	dir := fs.String("data-dir", "/usr/share/datasets/fashion-mnist", "Fashion-MNIST files")
	shape := fs.String("image-shape", "32x32x3", "synthetic: sample shape `HxWxC` (CIFAR-10's by default)")
	secs := fs.Float64("seconds", 1, "seconds per loader throughput row")
	batch := fs.Int("batch", 64, "batch")
	threads := fs.Int("threads", 0, "compute threads, pinned to the first CPUs of the mask (0: every CPU in the mask, as one rank trains by default)")
	workerList := fs.String("workers", "0,1,2,4", "loader worker counts")
	steps := fs.Int("steps", 6, "training steps per round")
	rounds := fs.Int("rounds", 11, "alternating rounds (in memory, with the loader) per row")
	procs := fs.String("gomaxprocs", "train", "GOMAXPROCS: train (as hpctrain train sets it), threads, or threads+workers")
	js := fs.String("json", "", "also write the report as JSON to `FILE`")
	if err := cli.Parse(fs, args, os.Stderr, false); err != nil {
		return err
	}
	var workers []int
	for _, s := range strings.Split(*workerList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 || n > 256 {
			return cli.Usage(fmt.Errorf("-workers %q: want comma-separated counts 0 to 256 (as -data-workers)", *workerList))
		}
		workers = append(workers, n)
	}
	if *procs != "train" && *procs != "threads" && *procs != "threads+workers" {
		return cli.Usage(fmt.Errorf("-gomaxprocs %q: want train, threads or threads+workers", *procs))
	}
	if err := firstBad(intIn("batch", *batch, 1, train.MaxBatch), intIn("steps", *steps, 1, 1e6), intIn("rounds", *rounds, 1, 1e6),
		intIn("threads", *threads, 0, train.MaxThreads), floatIn("seconds", *secs, 0.001, 3600), writable("json", *js)); err != nil {
		return err
	}
	// Everything that can be refused is, before the data set is read or
	// made: the shape, the network on it and the memory both take.
	var shapeSet bool
	fs.Visit(func(f *flag.Flag) { shapeSet = shapeSet || f.Name == "image-shape" })
	budget := data.NewBudget(1)
	var sh data.Shape
	switch *dsName {
	case "fashion-mnist":
		if shapeSet {
			return cli.Usage(fmt.Errorf("-image-shape applies with -dataset synthetic only (fashion-mnist is 28x28x1)"))
		}
		sh = data.Shape{H: 28, W: 28, C: 1}
	case "synthetic":
		var err error
		if sh, err = data.ParseShape(*shape); err != nil {
			return cli.Usage(fmt.Errorf("-image-shape %q: %w", *shape, err))
		}
		if err := budget.Take(fmt.Sprintf("the synthetic data set (%d samples of %s)", syntheticLen, *shape), int64(syntheticLen)*int64(sh.Size()), "use a smaller -image-shape"); err != nil {
			return cli.Usage(err)
		}
		if *batch > syntheticLen {
			return cli.Usage(fmt.Errorf("-batch %d: more than the synthetic data set's %d samples", *batch, syntheticLen))
		}
	default:
		return cli.Usage(fmt.Errorf("-dataset %q: want fashion-mnist or synthetic", *dsName))
	}
	if err := checkNet(budget, "cnn", model.Shape(sh), 10, *batch); err != nil {
		return err
	}
	var ds data.Dataset
	var err error
	if *dsName == "synthetic" {
		ds = data.NewSynthetic(syntheticLen, sh, 10, 1)
	} else if ds, err = data.LoadMNIST(*dir, true); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			err = cli.Usage(err) // a -data-dir that is not there, as train says it
		}
		return err
	}
	mask, err := affinity.Allowed()
	if err != nil {
		return err
	}
	cpus := mask.CPUs()
	if *threads == 0 {
		*threads = len(cpus)
	}
	if *threads > len(cpus) {
		return cli.Usage(fmt.Errorf("-threads %d: only %d cpus in the mask %s", *threads, len(cpus), mask))
	}
	rep := DataReport{Dataset: *dsName, Model: "cnn", Batch: *batch, Threads: *threads, GOMAXPROCS: *procs}
	s := ds.Shape()
	fmt.Fprintf(out, "## Loader throughput: %s, %d samples of %dx%dx%d, batch %d, %g s per row, consumer only releases\n\n", *dsName, ds.Len(), s.H, s.W, s.C, *batch, *secs)
	if rep.Loader, err = data.BenchLoader(out, ds, *batch, workers, *secs); err != nil {
		return err
	}

	net, err := model.New("cnn", model.Shape(s), ds.Classes(), *batch, 1)
	if err != nil {
		return err
	}
	opt, err := optim.New(optim.Config{Name: "sgd", LR: 0.01, Momentum: 0.9}, train.Groups(net), len(net.Params))
	if err != nil {
		return err
	}
	w, err := affinity.NewWorkers(cpus[:*threads])
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Lead(); err != nil { // as train: the caller computes worker 0's share
		return err
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	net.SetParallel(w)
	opt.SetParallel(w)
	// The training step itself (train.Step), with no peers.
	sched, err := optim.NewSchedule(optim.ScheduleConfig{Name: "constant"}, 0.01, 1)
	if err != nil {
		return err
	}
	st := train.NewStep(net, opt, sched, mpi.NewSingle(), 0)
	step := func() {
		if _, err := st.Run(0); err != nil {
			panic("bench: training step failed: " + err.Error())
		}
	}
	// The in-memory batch: the first samples, in [0, 1].
	mem := make([]float32, *batch*net.In.Size())
	memY := make([]int32, *batch)
	data.NewBatcher(ds, nil, nil).FillRange(0, *batch, mem, memY)

	fmt.Fprintf(out, "\n## Training step of the reference CNN on %dx%dx%d, batch %d, %d compute thread(s) pinned to cpus %v, GOMAXPROCS %s: batch in memory vs. fed by the loader\n\n", s.H, s.W, s.C, *batch, *threads, cpus[:*threads], *procs)
	fmt.Fprintf(out, "Median over %d alternating rounds of the mean step time of %d steps; ratio = with loader / in memory; median pair ratio = median over rounds of (loader round / the in-memory round before it); cpu = the process's CPU time per step (all threads), which a shared machine's other load disturbs less than wall time.\n\n", *rounds, *steps)
	fmt.Fprintf(out, "| chain | workers | in memory ms | with loader ms | ratio | median pair ratio | in memory cpu ms | with loader cpu ms | cpu ratio |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, chain := range data.BenchChains() {
		for _, nw := range workers {
			p := *threads
			switch *procs {
			case "train":
				p = data.Procs(*threads, nw)
			case "threads+workers":
				p = *threads + nw
			}
			runtime.GOMAXPROCS(p)
			opts := data.LoaderOptions{Workers: nw, Transforms: chain.Transforms, Seed: 1}
			l, err := data.NewLoader(ds, data.NewSampler(ds.Len(), *batch, 0, 1, 1), opts)
			if err != nil {
				return err
			}
			full := max(2*nw, 1) + 1 // the default Prefetch, plus the buffer Next would hold
			epoch, pos := 1, 0
			fromLoader := func() {
				b, ok := l.Next()
				if !ok {
					epoch, pos = epoch+1, 0
					l.Start(epoch)
					b, _ = l.Next()
				}
				pos++
				st.Load(b.X, b.Y)
				l.Release(b)
				step()
			}
			// A loader round starts with the workers' queue full and ends
			// with it refilled (the refill is timed, then dropped), so it
			// pays for one batch per step, as in steady state; between
			// loader rounds the workers are stopped, so the in-memory
			// rounds run without loading in the background.
			startLoader := func() {
				l.StartAt(epoch, pos)
				want := min(l.Steps()-pos, full)
				for t := time.Now(); nw > 0 && l.Queued() < want && time.Since(t) < time.Second; {
					time.Sleep(100 * time.Microsecond)
				}
			}
			inMemory := func() {
				st.Load(mem, memY) // what the loader path copies too
				step()
			}
			// Untimed warm-up of both paths.
			startLoader()
			for i := 0; i < 2; i++ {
				inMemory()
				fromLoader()
			}
			l.Stop()
			memT := make([]time.Duration, *rounds)
			ldT := make([]time.Duration, *rounds)
			memC := make([]time.Duration, *rounds)
			ldC := make([]time.Duration, *rounds)
			ratios := make([]time.Duration, *rounds) // in 1e-6, to reuse median
			for r := 0; r < *rounds; r++ {
				t, c := time.Now(), cpuTime()
				for i := 0; i < *steps; i++ {
					inMemory()
				}
				memT[r] = time.Since(t) / time.Duration(*steps)
				memC[r] = (cpuTime() - c) / time.Duration(*steps)
				startLoader()
				t, c = time.Now(), cpuTime()
				for i := 0; i < *steps; i++ {
					fromLoader()
				}
				ldT[r] = time.Since(t) / time.Duration(*steps)
				l.Stop()
				ldC[r] = (cpuTime() - c) / time.Duration(*steps)
				ratios[r] = time.Duration(1e6 * ldT[r].Seconds() / memT[r].Seconds())
			}
			l.Close()
			row := StepWithLoader{Chain: chain.Name, Workers: nw, Rounds: *rounds, Steps: *steps,
				InMemoryMS: 1e3 * median(memT).Seconds(), WithLoaderMS: 1e3 * median(ldT).Seconds()}
			row.Ratio = row.WithLoaderMS / row.InMemoryMS
			row.PairRatio = float64(median(ratios)) / 1e6
			row.InMemoryCPUMS, row.WithLoaderCPUMS = 1e3*median(memC).Seconds(), 1e3*median(ldC).Seconds()
			rep.Step = append(rep.Step, row)
			fmt.Fprintf(out, "| %s | %d | %.2f | %.2f | %.3f | %.3f | %.2f | %.2f | %.3f |\n", row.Chain, row.Workers, row.InMemoryMS, row.WithLoaderMS, row.Ratio, row.PairRatio,
				row.InMemoryCPUMS, row.WithLoaderCPUMS, row.WithLoaderCPUMS/row.InMemoryCPUMS)
		}
	}
	return writeJSON(*js, rep)
}

// cpuTime is the CPU time the process has used, all threads, user and
// system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
