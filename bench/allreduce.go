package bench

import (
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math"
	"time"

	"hpctrain/mpi"
)

// AllreduceRow is one size of `hpctrain bench allreduce`, nccl-tests'
// columns: time is the mean per call after warm-up; algbw = bytes / time;
// busbw = algbw * 2(n-1)/n; wrong counts elements that differ from the
// exact sum of a verifiable input.
type AllreduceRow struct {
	Path   string  `json:"path"` // "hpctrain" (the training path) or "mpi" (raw MPI_Allreduce)
	Place  string  `json:"place"`
	Bytes  int     `json:"size"`
	Count  int     `json:"count"`
	Type   string  `json:"type"`
	TimeUS float64 `json:"time_us"` // mean over ranks
	MinUS  float64 `json:"time_us_min"`
	MaxUS  float64 `json:"time_us_max"`
	AlgBW  float64 `json:"algbw_GBps"`
	BusBW  float64 `json:"busbw_GBps"`
	Wrong  int     `json:"wrong"`
}

// Allreduce is `hpctrain bench allreduce`, run under mpirun: the gradient
// all-reduce exactly as training calls it (IallreduceSum on the MPI thread,
// then Wait), in place, beside raw MPI_Allreduce calls made back to back on
// the MPI thread, in place and out of place, in the same run.
func Allreduce(args []string, c mpi.Comm, out io.Writer) error {
	fs := flag.NewFlagSet("hpctrain bench allreduce", flag.ContinueOnError)
	minB := fs.Int("b", 4, "smallest size in bytes")
	maxB := fs.Int("e", 64<<20, "largest size in bytes")
	factor := fs.Int("f", 2, "size multiplication factor")
	iters := fs.Int("n", 0, "timed iterations per size (0: about 0.2 s worth, 5 to 1000)")
	warm := fs.Int("w", 5, "untimed warm-up iterations")
	typ := fs.String("type", "float32", "element type (float32)")
	js := fs.String("json", "", "rank 0 writes the rows as JSON to `FILE`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *typ != "float32" {
		return fmt.Errorf("type %q: only float32 so far", *typ)
	}
	if *minB < 4 || *maxB < *minB || *factor < 2 || *warm < 0 || *iters < 0 {
		return fmt.Errorf("need 4 <= -b <= -e, -f >= 2, -w >= 0, -n >= 0")
	}
	w, raw := c.(*mpi.World)
	n := c.Size()
	rank0 := c.Rank() == 0
	if rank0 {
		fmt.Fprintf(out, "# hpctrain bench allreduce: %d ranks, sum, float32; time = mean per call (min/max over ranks)\n", n)
		fmt.Fprintf(out, "%-9s %-12s %12s %10s %7s %10s %10s %10s %8s %8s %6s\n",
			"path", "place", "size", "count", "type", "time_us", "min_us", "max_us", "algbw", "busbw", "#wrong")
	}
	var rows []AllreduceRow
	buf := make([]float32, *maxB/4)
	recv := make([]float32, *maxB/4)
	var req mpi.Request
	for size := *minB; size <= *maxB; size *= *factor {
		count := size / 4
		b, r := buf[:count], recv[:count]
		it := *iters
		if it == 0 {
			it = min(1000, max(5, int(2e8/float64(size+20000))))
		}
		type path struct {
			name, place string
			run         func(iters int) (time.Duration, error)
			result      []float32
		}
		paths := []path{{"hpctrain", "in-place", func(k int) (time.Duration, error) {
			t := time.Now()
			for i := 0; i < k; i++ {
				c.IallreduceSum(b, &req)
				if err := req.Wait(); err != nil {
					return 0, err
				}
			}
			return time.Since(t) / time.Duration(k), nil
		}, b}}
		if raw {
			paths = append(paths,
				path{"mpi", "in-place", func(k int) (time.Duration, error) { return w.RawAllreduce(b, nil, k) }, b},
				path{"mpi", "out-of-place", func(k int) (time.Duration, error) { return w.RawAllreduce(b, r, k) }, r})
		}
		for _, p := range paths {
			if *warm > 0 {
				fill(b, c.Rank())
				if _, err := p.run(*warm); err != nil {
					return err
				}
			}
			// Verify one call on a known input: rank k contributes
			// (k+1)*(i%7+1); the exact sum is n(n+1)/2*(i%7+1).
			fill(b, c.Rank())
			if _, err := p.run(1); err != nil {
				return err
			}
			wrong := 0
			for i, v := range p.result {
				if v != float32(n*(n+1)/2*(i%7+1)) {
					wrong++
				}
			}
			d, err := p.run(it)
			if err != nil {
				return err
			}
			st, err := stats(c, d.Seconds()*1e6, float64(wrong))
			if err != nil {
				return err
			}
			row := AllreduceRow{Path: p.name, Place: p.place, Bytes: size, Count: count, Type: "float32",
				TimeUS: st.mean, MinUS: st.min, MaxUS: st.max, Wrong: int(st.sum)}
			row.AlgBW = float64(size) / (row.TimeUS * 1e-6) / 1e9
			row.BusBW = row.AlgBW * 2 * float64(n-1) / float64(n)
			rows = append(rows, row)
			if rank0 {
				fmt.Fprintf(out, "%-9s %-12s %12d %10d %7s %10.2f %10.2f %10.2f %8.3f %8.3f %6d\n",
					row.Path, row.Place, row.Bytes, row.Count, row.Type, row.TimeUS, row.MinUS, row.MaxUS, row.AlgBW, row.BusBW, row.Wrong)
			}
		}
	}
	if rank0 {
		return writeJSON(*js, rows)
	}
	return nil
}

func fill(b []float32, rank int) {
	for i := range b {
		b[i] = float32((rank + 1) * (i%7 + 1))
	}
}

type rankStats struct{ min, max, mean, sum float64 }

// stats gathers x (and y, summed) from every rank.
func stats(c mpi.Comm, x, y float64) (rankStats, error) {
	send := make([]byte, 16)
	binary.LittleEndian.PutUint64(send, math.Float64bits(x))
	binary.LittleEndian.PutUint64(send[8:], math.Float64bits(y))
	all := make([]byte, 16*c.Size())
	if err := c.Allgather(send, all); err != nil {
		return rankStats{}, err
	}
	s := rankStats{min: math.Inf(1), max: math.Inf(-1)}
	for r := 0; r < c.Size(); r++ {
		v := math.Float64frombits(binary.LittleEndian.Uint64(all[16*r:]))
		s.min, s.max = math.Min(s.min, v), math.Max(s.max, v)
		s.mean += v / float64(c.Size())
		s.sum += math.Float64frombits(binary.LittleEndian.Uint64(all[16*r+8:]))
	}
	return s, nil
}
