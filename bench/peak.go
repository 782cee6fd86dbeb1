package bench

import (
	"fmt"
	"io"
	"os"
	"time"

	"hpctrain/affinity"
	"hpctrain/internal/cli"
	"hpctrain/internal/peak"
)

// PeakRow is one arithmetic's peak rate on a number of cores.
type PeakRow struct {
	Arithmetic string  `json:"arithmetic"` // "fp32" (fused multiply-adds) or "bf16" (dot products)
	Threads    int     `json:"threads"`
	GFLOPS     float64 `json:"gflops"` // all threads together
	PerCore    float64 `json:"gflops_per_core"`
}

// Peak is `hpctrain bench peak`: the cores' peak floating-point rate in
// float32 fused multiply-adds and bf16 dot products (package peak), on
// one core and on -threads cores at once, each thread pinned to its own
// CPU of the mask: the ceiling the step's GFLOP/s are measured against.
func Peak(args []string, out io.Writer) error {
	fs := newFlags("peak")
	threads := fs.Int("threads", 0, "cores measured at once besides one (0: every CPU of the mask)")
	js := fs.String("json", "", "also write the rows as JSON to `FILE`")
	if err := cli.Parse(fs, args, os.Stderr, false); err != nil {
		return err
	}
	if err := writable("json", *js)(); err != nil {
		return cli.Usage(err)
	}
	mask, err := affinity.Allowed()
	if err != nil {
		return err
	}
	if *threads == 0 {
		*threads = len(mask.CPUs())
	}
	if n := len(mask.CPUs()); *threads < 1 || *threads > n {
		return cli.Usage(fmt.Errorf("-threads %d: must be 0 to %d, the CPUs of the mask %s", *threads, n, mask))
	}
	counts := []int{1}
	if *threads > 1 {
		counts = append(counts, *threads)
	}
	var rows []PeakRow
	fmt.Fprintf(out, "%-12s %8s %10s %16s\n", "arithmetic", "threads", "GFLOP/s", "GFLOP/s per core")
	for _, bf16 := range []bool{false, true} {
		for _, t := range counts {
			g, err := PeakRate(bf16, t)
			if err != nil {
				return err
			}
			r := PeakRow{Arithmetic: arithmetic(bf16), Threads: t, GFLOPS: g, PerCore: g / float64(t)}
			if g == 0 {
				fmt.Fprintf(out, "%-12s %8d %10s %16s\n", r.Arithmetic, t, "-", "(no such vector instruction here)")
				continue
			}
			fmt.Fprintf(out, "%-12s %8d %10.1f %16.1f\n", r.Arithmetic, t, r.GFLOPS, r.PerCore)
			rows = append(rows, r)
		}
	}
	return writeJSON(*js, rows)
}

func arithmetic(bf16 bool) string {
	if bf16 {
		return "bf16"
	}
	return "fp32"
}

// PeakRate is the peak rate of float32 fused multiply-adds (or bf16 dot
// products) in GFLOP/s on the first threads CPUs of the process's mask,
// one pinned thread on each, all running at once, summed: 0 where the CPU
// has no such vector instruction.
func PeakRate(bf16 bool, threads int) (float64, error) {
	mask, err := affinity.Allowed()
	if err != nil {
		return 0, err
	}
	cpus := mask.CPUs()
	if threads < 1 || threads > len(cpus) {
		return 0, fmt.Errorf("peak rate: %d threads, %d cpus in the mask %s", threads, len(cpus), mask)
	}
	w, err := affinity.NewWorkers(cpus[:threads])
	if err != nil {
		return 0, err
	}
	defer w.Close()
	t := &peakTask{bf16: bf16, rates: make([]float64, threads)}
	w.Run(threads, t)
	sum := 0.0
	for _, r := range t.rates {
		sum += r
	}
	return sum, nil
}

type peakTask struct {
	bf16  bool
	rates []float64
}

func (t *peakTask) Run(w, lo, hi int) { t.rates[w] = peak.Rate(t.bf16, 100*time.Millisecond, 3) }
