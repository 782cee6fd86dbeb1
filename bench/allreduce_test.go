package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"hpctrain/internal/cudaemu"
	"hpctrain/internal/mpitest"
	"hpctrain/mpi"
)

// fakeRaw stands in for *mpi.World's RawAllreduce on an in-process rank.
type fakeRaw struct{ *mpi.Fake }

func (f fakeRaw) RawAllreduce(send, recv []float32, iters int) (time.Duration, error) {
	t := time.Now()
	for i := 0; i < iters; i++ {
		dst := send
		if recv != nil {
			copy(recv, send)
			dst = recv
		}
		if err := f.AllreduceSum(dst); err != nil {
			return 0, err
		}
	}
	return time.Since(t) / time.Duration(iters), nil
}

// runAllreduce runs Allreduce on n in-process ranks and returns rank 0's
// output.
func runAllreduce(t *testing.T, n int, withRaw bool, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, f := range mpi.NewFake(n, 0) {
		var c mpi.Comm = f
		if withRaw {
			c = fakeRaw{f}
		}
		var w io.Writer = io.Discard
		if r == 0 {
			w = &out
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = Allreduce(args, c, w)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v\n%s", r, err, out.String())
		}
	}
	return out.String()
}

var (
	arRow     = regexp.MustCompile(`(?m)^(hpctrain|mpi)\s+(in-place|out-of-place)\s+(\d+)\s+\d+\s+float32\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+(\d+)\s+(\S+)\s+(\S+)$`)
	arSummary = regexp.MustCompile(`(?m)^# wrapper/raw, (\d+) sizes >= (\d+) B: per_round max ([\d.]+) \(at (\d+) B\), median ([\d.]+); ratio of medians max ([\d.]+) \(at (\d+) B\), median ([\d.]+); overhead <= 3% \(per_round max\): (yes|NO)$`)
)

// TestAllreduceInterleaved: every path is timed in every round, the
// wrapper's row carries wrapper/raw (text and JSON) and the summary line
// agrees with the rows.
func TestAllreduceInterleaved(t *testing.T) {
	js := filepath.Join(t.TempDir(), "ar.json")
	out := runAllreduce(t, 2, true, "-b", "4", "-e", "1024", "-f", "4", "-n", "3", "-rounds", "3", "-w", "1", "-overhead-from", "64", "-json", js)
	rows := arRow.FindAllStringSubmatch(out, -1)
	if len(rows) != 3*5 { // 4, 16, 64, 256, 1024 B x 3 paths
		t.Fatalf("%d rows\n%s", len(rows), out)
	}
	for i, m := range rows {
		want := [][2]string{{"hpctrain", "in-place"}, {"mpi", "in-place"}, {"mpi", "out-of-place"}}[i%3]
		if m[1] != want[0] || m[2] != want[1] {
			t.Errorf("row %d is %s %s, want %s %s", i, m[1], m[2], want[0], want[1])
		}
		if m[4] != "0" {
			t.Errorf("row %s %s %s: %s wrong", m[1], m[2], m[3], m[4])
		}
		if m[1] == "hpctrain" {
			for _, v := range m[5:7] {
				if x, err := strconv.ParseFloat(v, 64); err != nil || x <= 0 {
					t.Errorf("row %s %s %s: ratio %q", m[1], m[2], m[3], v)
				}
			}
		} else if m[5] != "-" || m[6] != "-" {
			t.Errorf("raw row %s %s: ratio %q %q, want -", m[2], m[3], m[5], m[6])
		}
	}

	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var got []AllreduceRow
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(rows) {
		t.Fatalf("%d JSON rows, %d printed", len(got), len(rows))
	}
	var wantMax, maxR float64
	var wantAt, maxRAt int
	for i, r := range got {
		if r.Rounds != 3 || r.Iters != 3 || len(r.RoundsUS) != 3 || r.Wrong != 0 {
			t.Errorf("row %d: rounds %d iters %d time_us_rounds %v wrong %d", i, r.Rounds, r.Iters, r.RoundsUS, r.Wrong)
		}
		if r.TimeUS != medianF(r.RoundsUS) || r.BestUS != slices.Min(r.RoundsUS) {
			t.Errorf("row %d: time_us %v, time_us_best %v: not the median and min of %v", i, r.TimeUS, r.BestUS, r.RoundsUS)
		}
		if r.Path != "hpctrain" {
			if r.WrapperRaw != 0 || r.RoundRatios != nil || r.WrapperRawBest != 0 {
				t.Errorf("raw row %d has a ratio", i)
			}
			continue
		}
		raw := got[i+1]
		if ratio := r.TimeUS / raw.TimeUS; math.Abs(r.WrapperRaw-ratio) > 1e-12 {
			t.Errorf("size %d: wrapper_raw %v, want %v", r.Bytes, r.WrapperRaw, ratio)
		}
		if r.WrapperRawBest != r.BestUS/raw.BestUS {
			t.Errorf("size %d: wrapper_raw_best %v", r.Bytes, r.WrapperRawBest)
		}
		if len(r.RoundRatios) != 3 || r.WrapperRawRounds != medianF(r.RoundRatios) {
			t.Errorf("size %d: per-round ratios %v, median %v", r.Bytes, r.RoundRatios, r.WrapperRawRounds)
		}
		for k, x := range r.RoundRatios {
			if math.Abs(x-r.RoundsUS[k]/raw.RoundsUS[k]) > 1e-12 {
				t.Errorf("size %d round %d: ratio %v", r.Bytes, k, x)
			}
		}
		if printed := fmt.Sprintf("%.3f", r.WrapperRaw); printed != rows[i][5] {
			t.Errorf("size %d: printed %s, JSON %s", r.Bytes, rows[i][5], printed)
		}
		if r.Bytes >= 64 {
			if r.WrapperRaw > wantMax {
				wantMax, wantAt = r.WrapperRaw, r.Bytes
			}
			if r.WrapperRawRounds > maxR {
				maxR, maxRAt = r.WrapperRawRounds, r.Bytes
			}
		}
	}

	m := arSummary.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no summary line\n%s", out)
	}
	if m[1] != "3" || m[2] != "64" || m[3] != fmt.Sprintf("%.3f", maxR) || m[4] != strconv.Itoa(maxRAt) ||
		m[6] != fmt.Sprintf("%.3f", wantMax) || m[7] != strconv.Itoa(wantAt) {
		t.Errorf("summary %q: want 3 sizes from 64 B, per-round max %.3f at %d, max %.3f at %d", m[0], maxR, maxRAt, wantMax, wantAt)
	}
	if yes := maxR <= 1.03; (m[9] == "yes") != yes {
		t.Errorf("summary says %s for per-round max %.3f", m[9], maxR)
	}
}

// TestAllreduceNoRaw: without raw MPI (one process, or a communicator that
// is not MPI's) only the training path's rows, no ratio, and the summary
// says why.
func TestAllreduceNoRaw(t *testing.T) {
	out := runAllreduce(t, 2, false, "-b", "64", "-e", "256", "-f", "4", "-n", "2", "-rounds", "2")
	rows := arRow.FindAllStringSubmatch(out, -1)
	if len(rows) != 2 || rows[0][1] != "hpctrain" || rows[0][5] != "-" {
		t.Fatalf("rows %q\n%s", rows, out)
	}
	if !strings.Contains(out, "# wrapper/raw: no raw MPI_Allreduce rows") {
		t.Errorf("no summary\n%s", out)
	}
	for _, bad := range [][]string{{"-rounds", "0"}, {"-overhead-target", "-1"}, {"-b", "2"}} {
		if err := Allreduce(bad, mpi.NewSingle(), io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestSummarizeOverhead(t *testing.T) {
	row := func(size int, ratio, perRound float64) AllreduceRow {
		return AllreduceRow{Path: "hpctrain", Bytes: size, WrapperRaw: ratio, WrapperRawRounds: perRound}
	}
	rows := []AllreduceRow{
		row(16<<10, 1.50, 1.40), // below the threshold
		row(64<<10, 1.01, 1.00),
		{Path: "mpi", Bytes: 64 << 10}, // raw rows carry no ratio
		row(256<<10, 1.025, 1.02),
		row(1<<20, 0.99, 1.01),
		row(4<<20, 1.00, 0.98),
	}
	o, ok := SummarizeOverhead(rows, 64<<10, 0.03)
	if !ok || o.Sizes != 4 || o.Max != 1.025 || o.MaxAt != 256<<10 || o.MaxR != 1.02 || o.MaxRAt != 256<<10 || !o.Achieved {
		t.Errorf("%+v %v", o, ok)
	}
	if math.Abs(o.Median-1.005) > 1e-12 || math.Abs(o.MedianR-1.005) > 1e-12 { // even count: mean of the middle two
		t.Errorf("medians %v %v", o.Median, o.MedianR)
	}
	if o, _ := SummarizeOverhead(rows, 64<<10, 0.02); !o.Achieved {
		t.Errorf("per-round 1.02 not within 2%%: %+v", o)
	}
	if o, _ := SummarizeOverhead(rows, 64<<10, 0.015); o.Achieved {
		t.Errorf("per-round 1.02 within 1.5%%: %+v", o)
	}
	if _, ok := SummarizeOverhead(rows, 8<<20, 0.03); ok {
		t.Error("no size counted, yet ok")
	}
	// The verdict follows the paired figure, not the ratio of medians.
	rows = append(rows, row(16<<20, 1.10, 1.00))
	if o, _ := SummarizeOverhead(rows, 64<<10, 0.03); !o.Achieved || o.Max != 1.10 || o.MaxAt != 16<<20 {
		t.Errorf("ratio of medians 1.10 with per-round 1.00 decided the verdict: %+v", o)
	}
}

// hpctrainBinary builds the hpctrain command into a test directory.
func hpctrainBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hpctrain")
	if out, err := exec.Command("go", "build", "-o", bin, "hpctrain").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// runBench runs hpctrain under mpirun -np 2 with LD_LIBRARY_PATH=libdir
// (each rank its own emulated device) and returns the output and error.
func runBench(t *testing.T, bin, libdir string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := mpitest.Command(ctx, 2, bin, args...)
	cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+libdir, "HPCTRAIN_CUDAEMU_DEVICES=2", "HPCTRAIN_KERNEL_CACHE="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("mpirun %v: timed out\n%s", args, out)
	}
	return string(out), err
}

var ncclRow = regexp.MustCompile(`(?m)^nccl\s+(in-place|out-of-place)\s+(\d+)\s+(\d+)\s+float32\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+(\d+)\s+-\s+-$`)

// TestAllreduceNCCL: bench allreduce -collective nccl under mpirun on the
// emulated device prints, per size, an in-place and an out-of-place row
// with no wrong element, and the same rows as JSON; without libnccl every
// rank says so in one line and the job fails.
func TestAllreduceNCCL(t *testing.T) {
	dir, err := cudaemu.Dir()
	if err != nil {
		t.Fatal(err)
	}
	bin := hpctrainBinary(t)
	js := filepath.Join(t.TempDir(), "nccl.json")
	out, err := runBench(t, bin, dir, "bench", "allreduce", "-collective", "nccl", "-b", "4", "-e", "4096", "-f", "8", "-rounds", "3", "-n", "2", "-w", "1", "-json", js)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "# hpctrain bench allreduce -collective nccl: 2 ranks, sum, float32, device buffers on cudaemu") {
		t.Errorf("no header\n%s", out)
	}
	rows := ncclRow.FindAllStringSubmatch(out, -1)
	sizes := []int{4, 32, 256, 2048}
	if len(rows) != 2*len(sizes) {
		t.Fatalf("%d rows, want %d\n%s", len(rows), 2*len(sizes), out)
	}
	for i, m := range rows {
		size, count := sizes[i/2], strconv.Itoa(sizes[i/2]/4)
		if m[1] != []string{"in-place", "out-of-place"}[i%2] || m[2] != strconv.Itoa(size) || m[3] != count || m[4] != "0" {
			t.Errorf("row %d: %q, want size %d count %s, #wrong 0", i, m[0], size, count)
		}
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var got []AllreduceRow
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(rows) {
		t.Fatalf("%d JSON rows, %d printed", len(got), len(rows))
	}
	for i, r := range got {
		if r.Path != "nccl" || r.Bytes != sizes[i/2] || r.Wrong != 0 || r.Rounds != 3 || len(r.RoundsUS) != 3 || r.TimeUS <= 0 || r.TimeUS != medianF(r.RoundsUS) {
			t.Errorf("JSON row %d: %+v", i, r)
		}
	}

	// The driver but no NCCL.
	partial := t.TempDir()
	for _, lib := range []string{"libcuda.so.1", "libcublas.so.12", "libnvrtc.so.12"} {
		if err := os.Symlink(filepath.Join(dir, lib), filepath.Join(partial, lib)); err != nil {
			t.Fatal(err)
		}
	}
	out, err = runBench(t, bin, partial, "bench", "allreduce", "-collective", "nccl", "-b", "4", "-e", "4")
	if err == nil {
		t.Fatalf("succeeded without libnccl\n%s", out)
	}
	for r := 0; r < 2; r++ {
		re := regexp.MustCompile(fmt.Sprintf(`(?m)^hpctrain: rank %d \(.*\): cuda: cannot load NCCL: tried libnccl\.so\.2 \([^\n]*\)[^\n]*$`, r))
		if !re.MatchString(out) {
			t.Errorf("rank %d: no one-line error naming libnccl.so.2\n%s", r, out)
		}
	}
}

// TestAllreduceBadJSONPath: rank 0's -json path that cannot be written
// stops every rank before the first all-reduce (rank 0 alone stopped, and
// the others waited in it forever).
func TestAllreduceBadJSONPath(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	fakes := mpi.NewFake(2, 0)
	errs := make(chan error, 2)
	for _, f := range fakes {
		go func() {
			errs <- Allreduce([]string{"-b", "4", "-e", "64", "-rounds", "1", "-json", filepath.Join(missing, "ar.json")}, fakeRaw{f}, io.Discard)
		}()
	}
	for range fakes {
		select {
		case err := <-errs:
			if err == nil || !strings.Contains(err.Error(), missing) && !strings.Contains(err.Error(), "failed on rank 0") {
				t.Errorf("%v, want every rank to stop on rank 0's bad -json", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("a rank still running after a minute")
		}
	}
}

// The table's columns line up for every path's name: the path and place
// columns start where their names in the header start, the figures end
// where theirs end. hpctrain-shm (12 letters) once overran a path column
// of 9, shifting its rows' columns off the header's.
func TestAllreduceTableAligned(t *testing.T) {
	var out strings.Builder
	printHeader(&out)
	var rows []AllreduceRow
	for _, p := range []string{"hpctrain", "hpctrain-shm", "mpi", "nccl"} {
		rows = append(rows, AllreduceRow{Path: p, Place: "out-of-place", Bytes: 67108864, Count: 16777216, Type: "float32",
			TimeUS: 12345.67, MinUS: 1234.5, MaxUS: 23456.78, AlgBW: 5.437, BusBW: 5.437, WrapperRaw: 1.013, WrapperRawRounds: 1.002})
	}
	printRows(&out, rows)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	spans := func(l string) [][]int { return regexp.MustCompile(`\S+`).FindAllStringIndex(l, -1) }
	head := spans(lines[0])
	for _, l := range lines[1:] {
		got := spans(l)
		if len(got) != len(head) {
			t.Fatalf("%d columns, the header %d:\n%s", len(got), len(head), out.String())
		}
		for i := range head {
			if i < 2 && got[i][0] != head[i][0] || i >= 2 && got[i][1] != head[i][1] {
				t.Errorf("column %d of %q is off the header's:\n%s", i, l, out.String())
				break
			}
		}
	}
}
