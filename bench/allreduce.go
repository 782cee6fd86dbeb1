package bench

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"time"
	"unsafe"

	"hpctrain/gpu/collective"
	"hpctrain/gpu/cuda"
	"hpctrain/internal/cli"
	"hpctrain/mpi"
	"hpctrain/train"
)

// AllreduceRow is one size and path of `hpctrain bench allreduce`, in
// nccl-tests' columns. Every path of a size is timed in the same rounds: a
// round times one block of Iters calls of each path, ranks in lock-step (a
// barrier before each block). time is the median over rounds of the block's
// time per call averaged over ranks; min and max are the medians over rounds
// of the fastest and slowest rank's; algbw = bytes / time; busbw = algbw *
// 2(n-1)/n; wrong counts elements that differ from the exact sum of a
// verifiable input.
type AllreduceRow struct {
	Path   string  `json:"path"` // "hpctrain" (the training path) or "mpi" (raw MPI_Allreduce)
	Place  string  `json:"place"`
	Bytes  int     `json:"size"`
	Count  int     `json:"count"`
	Type   string  `json:"type"`
	TimeUS float64 `json:"time_us"` // median over rounds of the mean over ranks
	MinUS  float64 `json:"time_us_min"`
	MaxUS  float64 `json:"time_us_max"`
	AlgBW  float64 `json:"algbw_GBps"`
	BusBW  float64 `json:"busbw_GBps"`
	Wrong  int     `json:"wrong"`

	Rounds   int       `json:"rounds"`
	Iters    int       `json:"iters"`          // timed calls per block
	RoundsUS []float64 `json:"time_us_rounds"` // per round, in order: time per call, mean over ranks
	BestUS   float64   `json:"time_us_best"`   // the fastest round's

	// Only on the training path's row, when raw MPI ran beside it: its
	// time over raw in-place MPI_Allreduce's of the same size.
	WrapperRaw       float64   `json:"wrapper_raw,omitempty"`                  // ratio of the medians (time_us / time_us)
	WrapperRawRounds float64   `json:"wrapper_raw_per_round_median,omitempty"` // median of the per-round ratios
	RoundRatios      []float64 `json:"wrapper_raw_per_round,omitempty"`        // the per-round ratios, in order
	WrapperRawBest   float64   `json:"wrapper_raw_best,omitempty"`             // ratio of the fastest rounds' times (time_us_best)
}

// AllreduceOverhead sums up wrapper/raw over the sizes from a threshold on.
// The verdict rests on the paired figure, the median over rounds of the
// ratio of the two blocks timed side by side in a round: the machine's
// drift between rounds cancels in it. The ratio of the two paths' medians,
// taken over different rounds, is reported beside it.
type AllreduceOverhead struct {
	From     int     // smallest size counted, bytes
	Sizes    int     // sizes counted
	MaxR     float64 // of the medians of per-round ratios
	MaxRAt   int     // size of MaxR
	MedianR  float64 // of the medians of per-round ratios
	Max      float64 // of the ratios of medians
	MaxAt    int     // size of Max
	Median   float64 // of the ratios of medians
	Target   float64 // largest overhead allowed, e.g. 0.03
	Achieved bool    // MaxR <= 1 + Target
}

// maxAllreduceBytes bounds -b and -e: 2 GiB, of which each rank holds two
// buffers.
const maxAllreduceBytes = 1 << 31

// nextSize is size times factor, or past max when that would pass it (or
// overflow).
func nextSize(size, factor, max int) int {
	if size > max/factor {
		return max + 1
	}
	return size * factor
}

// rawAllreducer times raw MPI_Allreduce calls made with no wrapper in
// between (*mpi.World; tests stand in for it).
type rawAllreducer interface {
	RawAllreduce(send, recv []float32, iters int) (time.Duration, error)
}

// Allreduce is `hpctrain bench allreduce`, run under mpirun: the gradient
// all-reduce exactly as training calls it (IallreduceSum on the MPI thread,
// then Wait), in place, beside raw MPI_Allreduce calls made back to back on
// the MPI thread, in place and out of place, in the same run and, size by
// size, interleaved: every round times a block of each, the wrapper's and
// raw in-place blocks adjacent with their order alternating, so that the
// wrapper/raw ratio compares calls made within milliseconds of each other.
func Allreduce(args []string, c mpi.Comm, out io.Writer) error {
	fs := newFlags("allreduce")
	minB := fs.Int("b", 4, "smallest size in bytes")
	maxB := fs.Int("e", 64<<20, "largest size in bytes")
	factor := fs.Int("f", 2, "size multiplication factor")
	iters := fs.Int("n", 0, itersHelp())
	rounds := fs.Int("rounds", 101, "rounds per size; each times one block of every path, the wrapper's and raw in-place blocks adjacent, which goes first alternating; rows report medians over rounds")
	warm := fs.Int("w", 5, "untimed warm-up calls per path and size")
	from := fs.Int("overhead-from", 64<<10, "summary line: wrapper/raw over the sizes >= `BYTES`")
	target := fs.Float64("overhead-target", 3, "summary line: the wrapper's allowed overhead over raw MPI_Allreduce, in `PERCENT`")
	typ := fs.String("type", "float32", "element type (float32)")
	js := fs.String("json", "", "rank 0 writes the rows as JSON to `FILE`")
	coll := fs.String("collective", "mpi", "what sums: mpi (host buffers, the training path with -collective mpi, beside raw MPI_Allreduce), shm (the same, the buffer in memory the node's ranks share: the CPU training path's default, summed through it, raw MPI_Allreduce beside it on the same buffer) or nccl (device buffers on the local rank's GPU, ncclAllReduce on a stream)")
	if err := cli.Parse(fs, args, os.Stderr, false); err != nil {
		return err
	}
	// Every flag but -json (rank 0's file) shapes the collectives, or
	// whether a rank refuses: the same on every rank, or none runs.
	if err := agreeFlags(c, fs, "json"); err != nil {
		return err
	}
	if *typ != "float32" {
		return cli.Usage(fmt.Errorf("-type %q: only float32 so far", *typ))
	}
	err := firstBad(intIn("b", *minB, 4, maxAllreduceBytes), intIn("e", *maxB, *minB, maxAllreduceBytes),
		func() error {
			if *minB%4 != 0 {
				return fmt.Errorf("-b %d: must be a multiple of 4 (float32 elements)", *minB)
			}
			return nil
		},
		intIn("f", *factor, 2, 1<<20), intIn("n", *iters, 0, 1e6), intIn("rounds", *rounds, 1, 1e6), intIn("w", *warm, 0, 1e6),
		intIn("overhead-from", *from, 0, maxAllreduceBytes), floatIn("overhead-target", *target, 0, 1e6))
	if err != nil {
		return err
	}
	// Rank 0 writes -json: its check is every rank's answer, so that no
	// rank goes on into a collective the others have left.
	if err := outputsWritable(c, writable("json", *js)); err != nil {
		return err
	}
	shm := *coll == "shm"
	if shm {
		*coll = "mpi"
	}
	mode, err := collective.ParseMode(*coll)
	if err != nil {
		return cli.Usage(fmt.Errorf("%w, or shm", err))
	}
	if mode == collective.NCCL {
		return allreduceNCCL(sweep{minB: *minB, maxB: *maxB, factor: *factor, iters: *iters, rounds: *rounds, warm: *warm}, c, out, *js)
	}
	w, raw := c.(rawAllreducer)
	n := c.Size()
	rank0 := c.Rank() == 0
	if rank0 {
		fmt.Fprintf(out, "# hpctrain bench allreduce: %d ranks, sum, float32; %d rounds per size, each timing a block of every path (wrapper and raw in-place adjacent, order alternating), ranks in lock-step\n", n, *rounds)
		fmt.Fprintf(out, "# time = median over rounds of the time per call, mean over ranks (min/max: of the fastest/slowest rank); wrapper/raw = hpctrain time / mpi in-place time; per_round = median of the per-round ratios\n")
		printHeader(out)
	}
	var rows []AllreduceRow
	buf := make([]float32, *maxB/4)
	if shm {
		nb, err := c.NodeBuffer(*maxB / 4)
		if err != nil {
			return err
		}
		if nb == nil {
			return fmt.Errorf("-collective shm: this job shares no memory (one rank per node, or nodes of different sizes)")
		}
		buf = nb
	}
	recv := make([]float32, *maxB/4)
	var req mpi.Request
	for size := *minB; size <= *maxB; size = nextSize(size, *factor, *maxB) {
		count := size / 4
		b, r := buf[:count], recv[:count]
		it := sweep{iters: *iters}.itersFor(size)
		type path struct {
			name, place string
			run         func(iters int) (time.Duration, error)
			result      []float32
		}
		// paths[0] is the wrapper, paths[1] raw in place: the pair compared.
		name := "hpctrain"
		if shm {
			name = "hpctrain-shm"
		}
		paths := []path{{name, "in-place", func(k int) (time.Duration, error) {
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
		np := len(paths)
		// mine: per path, the block times of every round (us per call),
		// then per path the wrong elements: one allgather per size.
		mine := make([]float64, np*(*rounds)+np)
		for pi, p := range paths {
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
			mine[np*(*rounds)+pi] = float64(wrong)
		}
		fill(b, c.Rank())
		// The compared pair, the wrapper and raw in place, share rounds,
		// which of them goes first alternating. Out of place, whose
		// second buffer evicts the first from cache, has rounds of its
		// own afterwards, so that it precedes neither of the pair.
		timeBlock := func(pi, k int) error {
			if err := c.Barrier(); err != nil {
				return err
			}
			d, err := paths[pi].run(it)
			mine[pi*(*rounds)+k] = d.Seconds() * 1e6
			return err
		}
		for k := 0; k < *rounds; k++ {
			pair := []int{0, 1}[:min(np, 2)]
			if k%2 == 1 {
				slices.Reverse(pair)
			}
			for _, pi := range pair {
				if err := timeBlock(pi, k); err != nil {
					return err
				}
			}
		}
		for pi := 2; pi < np; pi++ {
			for k := 0; k < *rounds; k++ {
				if err := timeBlock(pi, k); err != nil {
					return err
				}
			}
		}
		all, err := gather(c, mine)
		if err != nil {
			return err
		}
		start := len(rows)
		for pi, p := range paths {
			rows = append(rows, summarizeRow(all, pi, np, *rounds, AllreduceRow{Path: p.name, Place: p.place, Bytes: size, Count: count, Type: "float32",
				Rounds: *rounds, Iters: it}))
		}
		if raw {
			wr, rr := &rows[start], rows[start+1]
			wr.WrapperRaw = wr.TimeUS / rr.TimeUS
			wr.RoundRatios = make([]float64, *rounds)
			for k := range wr.RoundRatios {
				wr.RoundRatios[k] = wr.RoundsUS[k] / rr.RoundsUS[k]
			}
			wr.WrapperRawRounds = medianF(wr.RoundRatios)
			wr.WrapperRawBest = wr.BestUS / rr.BestUS
		}
		if rank0 {
			printRows(out, rows[start:])
		}
	}
	if !rank0 {
		return nil
	}
	if !raw {
		fmt.Fprintf(out, "# wrapper/raw: no raw MPI_Allreduce rows (they need MPI: run under mpirun)\n")
	} else if o, ok := SummarizeOverhead(rows, *from, *target/100); !ok {
		fmt.Fprintf(out, "# wrapper/raw: no size >= %d B in this run\n", *from)
	} else {
		verdict := "yes"
		if !o.Achieved {
			verdict = "NO"
		}
		fmt.Fprintf(out, "# wrapper/raw, %d sizes >= %d B: per_round max %.3f (at %d B), median %.3f; ratio of medians max %.3f (at %d B), median %.3f; overhead <= %g%% (per_round max): %s\n",
			o.Sizes, o.From, o.MaxR, o.MaxRAt, o.MedianR, o.Max, o.MaxAt, o.Median, *target, verdict)
	}
	return writeJSON(*js, rows)
}

// pathWidth is the table's path column: its longest name's. It was 9,
// which hpctrain-shm's rows overran, shifting every column after it.
const pathWidth = len("hpctrain-shm")

// printHeader prints the column names of the rows.
func printHeader(out io.Writer) {
	fmt.Fprintf(out, "%-*s %-12s %12s %10s %7s %10s %10s %10s %8s %8s %6s %11s %9s\n",
		pathWidth, "path", "place", "size", "count", "type", "time_us", "min_us", "max_us", "algbw", "busbw", "#wrong", "wrapper/raw", "per_round")
}

// printRows prints rows under printHeader's columns.
func printRows(out io.Writer, rows []AllreduceRow) {
	for _, row := range rows {
		ratio, perRound := "-", "-"
		if row.WrapperRaw != 0 {
			ratio, perRound = fmt.Sprintf("%.3f", row.WrapperRaw), fmt.Sprintf("%.3f", row.WrapperRawRounds)
		}
		fmt.Fprintf(out, "%-*s %-12s %12d %10d %7s %10.2f %10.2f %10.2f %8.3f %8.3f %6d %11s %9s\n",
			pathWidth, row.Path, row.Place, row.Bytes, row.Count, row.Type, row.TimeUS, row.MinUS, row.MaxUS, row.AlgBW, row.BusBW, row.Wrong, ratio, perRound)
	}
}

// summarizeRow completes row, path pi of np, from every rank's figures of
// one size (all, as gather returns them): per path the block time of each
// round (us per call), then per path the wrong elements.
func summarizeRow(all [][]float64, pi, np, rounds int, row AllreduceRow) AllreduceRow {
	n := len(all)
	row.RoundsUS = make([]float64, rounds)
	mins, maxs := make([]float64, rounds), make([]float64, rounds)
	for k := 0; k < rounds; k++ {
		s := over(all, pi*rounds+k)
		row.RoundsUS[k], mins[k], maxs[k] = s.mean, s.min, s.max
	}
	row.TimeUS, row.MinUS, row.MaxUS = medianF(row.RoundsUS), medianF(mins), medianF(maxs)
	row.BestUS = slices.Min(row.RoundsUS)
	row.Wrong = int(over(all, np*rounds+pi).sum)
	row.AlgBW = float64(row.Bytes) / (row.TimeUS * 1e-6) / 1e9
	row.BusBW = row.AlgBW * 2 * float64(n-1) / float64(n)
	return row
}

// sweep is the size sweep and timing settings of a run.
type sweep struct {
	minB, maxB, factor, iters, rounds, warm int
}

// itersFor is the timed calls per block for size bytes: -n, or by size,
// 1e6 / (size + 20000) rounded down and at least 2 (itersHelp says it).
func (s sweep) itersFor(size int) int {
	if s.iters > 0 {
		return s.iters
	}
	// Short blocks, many rounds: the blocks compared see the same
	// machine, however it drifts.
	return max(2, int(1e6/float64(size+20000)))
}

// itersHelp is -n's help, its figures itersFor's: the calls at the
// smallest size (-b's least, 4 bytes), and the size of the default sweep
// (powers of 2) from which they are the fewest. It once said 50 calls
// and 1 MiB where the rows had 49 and 512 KiB.
func itersHelp() string {
	var s sweep
	from := 4
	for s.itersFor(from) > s.itersFor(maxAllreduceBytes) {
		from *= 2
	}
	return fmt.Sprintf("timed calls per block, one block per path and round (0: by size, 1e6 / (size + 20000) rounded down: %d for the smallest sizes down to %d from %d KiB, blocks of well under a millisecond)",
		s.itersFor(4), s.itersFor(from), from>>10)
}

// openLocalDevice opens GPU local mod the devices CUDA sees.
func openLocalDevice(local int) (*cuda.Context, error) {
	gpu, err := cuda.LocalDevice(local)
	if err != nil {
		return nil, err
	}
	return cuda.OpenDevice(gpu)
}

// allreduceNCCL is `hpctrain bench allreduce -collective nccl`: the
// all-reduce of device buffers on the local rank's GPU (ordinal: local
// rank mod the devices CUDA sees) with ncclAllReduce on a stream, in place
// and out of place, nccl-tests' way: untimed warm-up, one verified call on
// a known input, then rounds of timed blocks (ranks in lock-step, a
// barrier before each block; a block is its calls enqueued back to back
// and one stream synchronisation).
func allreduceNCCL(sw sweep, c mpi.Comm, out io.Writer, js string) (err error) {
	runtime.LockOSThread() // the context is current on this thread
	defer runtime.UnlockOSThread()
	// Every rank learns whether any rank failed to open its device, so that
	// none waits for a failed one in NewNCCL.
	ctx, err := openLocalDevice(c.LocalRank())
	if err = train.Agree(c, "opening the GPU", err); err != nil {
		if ctx != nil {
			ctx.Close()
		}
		return err
	}
	defer func() {
		if e := ctx.Close(); err == nil {
			err = e
		}
	}()
	comm, err := collective.NewNCCL(c)
	if err != nil {
		return err
	}
	defer func() {
		if e := comm.Destroy(); err == nil {
			err = e
		}
	}()
	st, err := ctx.NewStream()
	if err != nil {
		return err
	}
	defer st.Destroy()
	send, err := ctx.Alloc(sw.maxB)
	if err != nil {
		return fmt.Errorf("device buffer of %d bytes: %w", sw.maxB, err)
	}
	defer ctx.Free(send)
	recv, err := ctx.Alloc(sw.maxB)
	if err != nil {
		return fmt.Errorf("device buffer of %d bytes: %w", sw.maxB, err)
	}
	defer ctx.Free(recv)
	pinned, err := ctx.HostAlloc(sw.maxB)
	if err != nil {
		return fmt.Errorf("page-locked buffer of %d bytes: %w", sw.maxB, err)
	}
	defer ctx.HostFree(pinned)
	hbuf := unsafe.Slice((*float32)(pinned), sw.maxB/4)

	n, rank0 := c.Size(), c.Rank() == 0
	if rank0 {
		fmt.Fprintf(out, "# hpctrain bench allreduce -collective nccl: %d ranks, sum, float32, device buffers on %s; %d rounds per size, each timing a block of every path (order alternating), ranks in lock-step\n", n, ctx.Name(), sw.rounds)
		fmt.Fprintf(out, "# time = median over rounds of the time per call (calls enqueued back to back, one stream sync per block), mean over ranks (min/max: of the fastest/slowest rank)\n")
		printHeader(out)
	}
	// load puts the verifiable input into send: rank k contributes
	// (k+1)*(i%7+1), whose exact sum is n(n+1)/2*(i%7+1).
	load := func(count int) error {
		fill(hbuf[:count], c.Rank())
		if err := cuda.CopyHtoD(send, pinned, 4*count, st); err != nil {
			return err
		}
		return st.Sync()
	}
	var rows []AllreduceRow
	for size := sw.minB; size <= sw.maxB; size = nextSize(size, sw.factor, sw.maxB) {
		count := size / 4
		it := sw.itersFor(size)
		type path struct {
			place string
			dst   cuda.Ptr
			run   func(iters int) (time.Duration, error)
		}
		block := func(dst cuda.Ptr) func(int) (time.Duration, error) {
			return func(k int) (time.Duration, error) {
				t := time.Now()
				for i := 0; i < k; i++ {
					if err := comm.AllReduceSum(send, dst, count, st); err != nil {
						return 0, err
					}
				}
				if err := st.Sync(); err != nil {
					return 0, err
				}
				return time.Since(t) / time.Duration(k), nil
			}
		}
		paths := []path{{place: "in-place", dst: send}, {place: "out-of-place", dst: recv}}
		for i := range paths {
			paths[i].run = block(paths[i].dst)
		}
		np := len(paths)
		mine := make([]float64, np*sw.rounds+np)
		for pi, p := range paths {
			if sw.warm > 0 {
				if _, err := p.run(sw.warm); err != nil {
					return err
				}
			}
			if err := load(count); err != nil {
				return err
			}
			if _, err := p.run(1); err != nil {
				return err
			}
			if err := cuda.CopyDtoH(pinned, p.dst, 4*count, st); err != nil {
				return err
			}
			if err := st.Sync(); err != nil {
				return err
			}
			wrong := 0
			for i, v := range hbuf[:count] {
				if v != float32(n*(n+1)/2*(i%7+1)) {
					wrong++
				}
			}
			mine[np*sw.rounds+pi] = float64(wrong)
		}
		if err := load(count); err != nil {
			return err
		}
		for k := 0; k < sw.rounds; k++ {
			order := []int{0, 1}
			if k%2 == 1 {
				slices.Reverse(order)
			}
			for _, pi := range order {
				if err := c.Barrier(); err != nil {
					return err
				}
				d, err := paths[pi].run(it)
				if err != nil {
					return err
				}
				mine[pi*sw.rounds+k] = d.Seconds() * 1e6
			}
		}
		all, err := gather(c, mine)
		if err != nil {
			return err
		}
		start := len(rows)
		for pi, p := range paths {
			rows = append(rows, summarizeRow(all, pi, np, sw.rounds, AllreduceRow{Path: "nccl", Place: p.place, Bytes: size, Count: count, Type: "float32",
				Rounds: sw.rounds, Iters: it}))
		}
		if rank0 {
			printRows(out, rows[start:])
		}
	}
	if !rank0 {
		return nil
	}
	return writeJSON(js, rows)
}

// SummarizeOverhead sums up the wrapper/raw ratios of the rows of sizes >=
// from; target is the allowed overhead (0.03 for 3%), met when the largest
// median of per-round ratios is at most 1+target. ok is false when no row
// counts.
func SummarizeOverhead(rows []AllreduceRow, from int, target float64) (o AllreduceOverhead, ok bool) {
	o = AllreduceOverhead{From: from, Target: target}
	var ratios, roundRatios []float64
	for _, r := range rows {
		if r.WrapperRaw == 0 || r.Bytes < from {
			continue
		}
		if r.WrapperRaw > o.Max {
			o.Max, o.MaxAt = r.WrapperRaw, r.Bytes
		}
		if r.WrapperRawRounds > o.MaxR {
			o.MaxR, o.MaxRAt = r.WrapperRawRounds, r.Bytes
		}
		ratios = append(ratios, r.WrapperRaw)
		roundRatios = append(roundRatios, r.WrapperRawRounds)
	}
	if len(ratios) == 0 {
		return o, false
	}
	o.Sizes = len(ratios)
	o.Median, o.MedianR = medianF(ratios), medianF(roundRatios)
	o.Achieved = o.MaxR <= 1+target
	return o, true
}

func fill(b []float32, rank int) {
	for i := range b {
		b[i] = float32((rank + 1) * (i%7 + 1))
	}
}

// medianF is the median of x (the mean of the middle two for an even
// count); x is not changed.
func medianF(x []float64) float64 {
	s := append([]float64(nil), x...)
	sort.Float64s(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// gather returns every rank's x (all of one length), indexed by rank.
func gather(c mpi.Comm, x []float64) ([][]float64, error) {
	send := make([]byte, 8*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint64(send[8*i:], math.Float64bits(v))
	}
	all := make([]byte, len(send)*c.Size())
	if err := c.Allgather(send, all); err != nil {
		return nil, err
	}
	out := make([][]float64, c.Size())
	for r := range out {
		out[r] = make([]float64, len(x))
		for i := range x {
			out[r][i] = math.Float64frombits(binary.LittleEndian.Uint64(all[len(send)*r+8*i:]))
		}
	}
	return out, nil
}

type rankStats struct{ min, max, mean, sum float64 }

// over is the min, max, mean and sum over ranks of element i.
func over(all [][]float64, i int) rankStats {
	s := rankStats{min: math.Inf(1), max: math.Inf(-1)}
	for _, x := range all {
		v := x[i]
		s.min, s.max = math.Min(s.min, v), math.Max(s.max, v)
		s.mean += v / float64(len(all))
		s.sum += v
	}
	return s
}
