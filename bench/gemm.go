package bench

import (
	"fmt"
	"hpctrain/internal/cli"
	"hpctrain/internal/openblas"
	"io"
	"os"
	"strings"
	"time"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// GemmRow is one SGEMM shape's rate.
type GemmRow struct {
	Name    string  `json:"name"`
	M, N, K int     `json:"-"`
	Shape   string  `json:"shape"`
	Seconds float64 `json:"seconds_median"`
	GFLOPS  float64 `json:"gflops"`
}

// gemmShapes are the GEMMs of one CNN training step at batch 64 (channels
// last: M = batch x positions) and the machine's reference 2048^3.
var gemmShapes = []struct {
	name    string
	tA, tB  blas.Transpose
	m, n, k int
}{
	{"2048^3 (machine rate)", blas.NoTrans, blas.NoTrans, 2048, 2048, 2048},
	{"conv1 fwd  y=col W^T", blas.NoTrans, blas.Trans, 64 * 784, 32, 9},
	{"conv2 fwd  y=col W^T", blas.NoTrans, blas.Trans, 64 * 196, 64, 288},
	{"conv2 dW   dy^T col", blas.Trans, blas.NoTrans, 64, 288, 64 * 196},
	{"conv2 dcol dy W", blas.NoTrans, blas.NoTrans, 64 * 196, 288, 64},
	{"fc1 fwd    x W^T", blas.NoTrans, blas.Trans, 64, 512, 3136},
	{"fc1 dW     dy^T x", blas.Trans, blas.NoTrans, 512, 3136, 64},
	{"fc1 dx     dy W", blas.NoTrans, blas.NoTrans, 64, 3136, 512},
}

// Gemm is `hpctrain bench gemm`: SGEMM GFLOP/s through the installed blas32
// implementation, single call, this thread. A long run (many -reps) says
// how far it is on progress, every gemmProgressEvery.
func Gemm(args []string, out, progress io.Writer) error {
	fs := newFlags("gemm")
	reps := fs.Int("reps", 7, fmt.Sprintf("timed repetitions per shape (median reported); a progress line on stderr every %v of a long run", gemmProgressEvery))
	js := fs.String("json", "", "also write the rows as JSON to `FILE`")
	if err := cli.Parse(fs, args, os.Stderr, false); err != nil {
		return err
	}
	if err := writable("json", *js)(); err != nil {
		return cli.Usage(err)
	}
	if *reps < 1 {
		return cli.Usage(fmt.Errorf("-reps %d: must be >= 1", *reps))
	}
	rows, err := GemmRates(*reps, progress)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%-24s %-18s %10s %9s\n", "gemm", "m x n x k", "time_ms", "GFLOP/s")
	for _, r := range rows {
		fmt.Fprintf(out, "%-24s %-18s %10.3f %9.1f\n", r.Name, r.Shape, 1e3*r.Seconds, r.GFLOPS)
	}
	return writeJSON(*js, rows)
}

// gemmProgressEvery is the interval between GemmRates' progress lines.
var gemmProgressEvery = 10 * time.Second

// GemmRates measures every shape of gemmShapes. Every gemmProgressEvery it
// writes a line to progress (nil: none): the shape, the repetitions done
// and the time left for the shape, as train's progress lines.
func GemmRates(reps int, progress io.Writer) ([]GemmRow, error) {
	if reps < 1 {
		return nil, fmt.Errorf("reps %d: must be >= 1", reps)
	}
	impl := blas32.Implementation()
	var rows []GemmRow
	last := time.Now()
	for si, s := range gemmShapes {
		a := make([]float32, s.m*s.k)
		b := make([]float32, s.k*s.n)
		c := make([]float32, s.m*s.n)
		for i := range a {
			a[i] = float32(i%7) * 0.1
		}
		for i := range b {
			b[i] = float32(i%5) * 0.1
		}
		lda, ldb := s.k, s.n
		if s.tA == blas.Trans {
			lda = s.m
		}
		if s.tB == blas.Trans {
			ldb = s.k
		}
		call := func() { impl.Sgemm(s.tA, s.tB, s.m, s.n, s.k, 1, a, lda, b, ldb, 0, c, s.n) }
		call() // warm-up
		// Repeat small shapes so each timing covers at least ~20 ms.
		inner := 1
		t := time.Now()
		call()
		if d := time.Since(t); d < 20*time.Millisecond {
			inner = int(20*time.Millisecond/max(d, time.Microsecond)) + 1
		}
		ts := make([]time.Duration, reps)
		start := time.Now()
		for r := range ts {
			t := time.Now()
			for i := 0; i < inner; i++ {
				call()
			}
			ts[r] = time.Since(t) / time.Duration(inner)
			if now := time.Now(); progress != nil && now.Sub(last) >= gemmProgressEvery {
				last = now
				el := now.Sub(start)
				left := time.Duration(float64(el) / float64(r+1) * float64(reps-r-1)).Round(time.Second)
				fmt.Fprintf(progress, "hpctrain: bench gemm: shape %d/%d %s: rep %d/%d, ETA %v for this shape\n", si+1, len(gemmShapes), strings.Join(strings.Fields(s.name), " "), r+1, reps, left)
			}
		}
		med := median(ts).Seconds()
		rows = append(rows, GemmRow{Name: s.name, M: s.m, N: s.n, K: s.k, Shape: fmt.Sprintf("%dx%dx%d", s.m, s.n, s.k),
			Seconds: med, GFLOPS: 2 * float64(s.m) * float64(s.n) * float64(s.k) / med / 1e9})
	}
	return rows, nil
}

// SgemmRate is OpenBLAS's SGEMM rate at 2048^3 in GFLOP/s with the given
// number of threads (OpenBLAS's own, over the process's CPU mask), the
// median of reps calls: the machine rate a training step is compared with.
func SgemmRate(threads, reps int) (float64, error) {
	if threads < 1 || reps < 1 {
		return 0, fmt.Errorf("sgemm rate: threads %d, reps %d: must be >= 1", threads, reps)
	}
	prev := openblas.Threads()
	openblas.SetThreads(threads)
	defer openblas.SetThreads(prev)
	const n = 2048
	a, b, c := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
	for i := range a {
		a[i], b[i] = float32(i%7)*0.1, float32(i%5)*0.1
	}
	impl := blas32.Implementation()
	call := func() { impl.Sgemm(blas.NoTrans, blas.NoTrans, n, n, n, 1, a, n, b, n, 0, c, n) }
	call() // warm-up
	ts := make([]time.Duration, reps)
	for r := range ts {
		t := time.Now()
		call()
		ts[r] = time.Since(t)
	}
	return 2 * n * n * n / median(ts).Seconds() / 1e9, nil
}
