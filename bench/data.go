package bench

import (
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"hpctrain/affinity"
	"hpctrain/data"
	"hpctrain/model"
)

// DataReport compares the training step fed by the loader with the step on
// a batch already in memory.
type DataReport struct {
	Workers          int     `json:"workers"`
	Chain            string  `json:"chain"`
	StepInMemoryMS   float64 `json:"step_in_memory_ms"`
	StepWithLoaderMS float64 `json:"step_with_loader_ms"`
	Slowdown         float64 `json:"slowdown"`
}

// Data is `hpctrain bench data`: loader throughput for 0, 1, 2, 4 workers
// with no, a light and a heavy transform chain (samples/s), then the CNN's
// training step fed by the loader beside the same step on a batch already in
// memory.
func Data(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("hpctrain bench data", flag.ContinueOnError)
	dir := fs.String("data-dir", "/usr/share/datasets/fashion-mnist", "Fashion-MNIST files")
	secs := fs.Float64("seconds", 1, "seconds per loader measurement")
	steps := fs.Int("steps", 30, "training steps per step measurement")
	js := fs.String("json", "", "also write the step comparison as JSON to `FILE`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ds, err := data.LoadMNIST(*dir, true)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "## loader throughput, Fashion-MNIST, batch 64\n\n")
	if err := data.BenchLoader(out, ds, 64, []int{0, 1, 2, 4}, *secs); err != nil {
		return err
	}
	net, err := model.New("cnn", model.Shape{}, 10, 64, 1)
	if err != nil {
		return err
	}
	mask, err := affinity.Allowed()
	if err != nil {
		return err
	}
	w, err := affinity.NewWorkers(mask.CPUs()[:1])
	if err != nil {
		return err
	}
	defer w.Close()
	net.SetParallel(w)
	labels := make([]int32, 64)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range net.Input() {
		net.Input()[i] = rng.Float32()
	}
	stepOn := func(x []float32, y []int32) {
		copy(net.Input(), x)
		net.Forward(64)
		net.Loss(y)
		net.Backward(nil)
	}
	mem := make([]float32, len(net.Input()))
	copy(mem, net.Input())
	t := time.Now()
	for i := 0; i < *steps; i++ {
		stepOn(mem, labels)
	}
	inMem := time.Since(t) / time.Duration(*steps)
	fmt.Fprintf(out, "\n## CNN step, in memory vs fed by the loader (1 compute thread)\n\n| workers | chain | in memory ms | with loader ms | slowdown |\n|---|---|---|---|---|\n")
	var reps []DataReport
	for _, chain := range data.BenchChains() {
		for _, nw := range []int{0, 2} {
			sampler := data.NewSampler(ds.Len(), 64, 0, 1, 1)
			l, err := data.NewLoader(ds, sampler, data.LoaderOptions{Workers: nw, Batch: 64, Transforms: chain.Transforms, Seed: 1})
			if err != nil {
				return err
			}
			l.Start(1)
			for i := 0; i < 2; i++ { // warm-up fills the queue
				b, _ := l.Next()
				l.Release(b)
			}
			t := time.Now()
			for i := 0; i < *steps; i++ {
				b, ok := l.Next()
				if !ok {
					break
				}
				stepOn(b.X, b.Y)
				l.Release(b)
			}
			with := time.Since(t) / time.Duration(*steps)
			l.Close()
			r := DataReport{Workers: nw, Chain: chain.Name, StepInMemoryMS: 1e3 * inMem.Seconds(), StepWithLoaderMS: 1e3 * with.Seconds()}
			r.Slowdown = with.Seconds()/inMem.Seconds() - 1
			reps = append(reps, r)
			fmt.Fprintf(out, "| %d | %s | %.2f | %.2f | %+.1f%% |\n", nw, chain.Name, r.StepInMemoryMS, r.StepWithLoaderMS, 100*r.Slowdown)
		}
	}
	return writeJSON(*js, reps)
}
