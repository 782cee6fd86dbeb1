package bench

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"hpctrain/affinity"
	"hpctrain/internal/cli"
	"hpctrain/mpi"
)

// Out-of-range flags of the benchmarks are refused in one line naming the
// flag, before anything runs: each of these once crashed (out of memory,
// thread exhaustion, an index or slice panic), hung, or printed
// meaningless figures with exit 0.
func TestBenchFlagsRefused(t *testing.T) {
	noComm := func() (mpi.Comm, error) { t.Fatal("connected despite a bad flag"); return nil, nil }
	single := func() (mpi.Comm, error) { return mpi.NewSingle(), nil } // outputs are checked by rank 0 of the job
	missing := filepath.Join(t.TempDir(), "missing")
	for _, c := range []struct {
		run  func([]string) error
		args string
		want string
	}{
		{func(a []string) error { return Allreduce(a, nil, io.Discard) }, "-e 99999999999999", "-e 99999999999999: must be"},
		{func(a []string) error { return Allreduce(a, nil, io.Discard) }, "-f 2305843009213693952", "-f 2305843009213693952: must be"},
		{func(a []string) error { return Allreduce(a, nil, io.Discard) }, "-b 6 -e 64", "-b 6: must be a multiple of 4"},
		{func(a []string) error { return Allreduce(a, nil, io.Discard) }, "-overhead-target NaN", "-overhead-target NaN"},
		{func(a []string) error { return Scaling(a, noComm, io.Discard) }, "-threads 100000", "-threads 100000: must be 0 to"},
		{func(a []string) error { return Scaling(a, noComm, io.Discard) }, "-shm-alpha-us 5", "give both -shm-alpha-us and -shm-gbps"},
		{func(a []string) error { return Scaling(a, noComm, io.Discard) }, "-sweep-max-mb 1000000", "-sweep-max-mb 1e+06"},
		{func(a []string) error { return Scaling(a, noComm, io.Discard) }, "-alpha-us -5", "-alpha-us -5"},
		{func(a []string) error { return Scaling(a, noComm, io.Discard) }, "-shm-gbps NaN", "-shm-gbps NaN"},
		{func(a []string) error { return Scaling(a, noComm, io.Discard) }, "-compute-scale Inf", "-compute-scale +Inf"},
		{func(a []string) error { return Scaling(a, noComm, io.Discard) }, "-bucket-mb Inf", "-bucket-mb +Inf"},
		{func(a []string) error { return Scaling(a, noComm, io.Discard) }, "-nodes 9223372036854775807", "-nodes:"},
		{func(a []string) error { return Scaling(a, noComm, io.Discard) }, "-link-gbps 1e-300", "-link-gbps:"},
		{func(a []string) error { return Data(a, io.Discard) }, "-dataset synthetic -image-shape 4294967296x4294967296x1", "-image-shape"},
		{func(a []string) error { return Data(a, io.Discard) }, "-seconds NaN", "-seconds NaN"},
		{func(a []string) error { return Data(a, io.Discard) }, "-workers 100000", "-workers \"100000\""},
		{func(a []string) error { return Data(a, io.Discard) }, "-gomaxprocs many", "-gomaxprocs \"many\""},
		{func(a []string) error { return Data(a, io.Discard) }, "-dataset cifar", "-dataset \"cifar\""},
		{func(a []string) error { return Allreduce(a, nil, io.Discard) }, "-type float64", "-type \"float64\""},
		{func(a []string) error { return Optim(a, io.Discard) }, "-steps 99999999999", "-steps 99999999999"},
		{func(a []string) error { return Step(a, io.Discard) }, "-kernels ,", "an empty name"},
		{func(a []string) error { return Step(a, io.Discard) }, "-kernels blas,blas", "blas twice"},
		{func(a []string) error { return Step(a, io.Discard) }, "-batch 16777216 -steps 1", "with batches of 16777216 samples needs"},
		{func(a []string) error { return Step(a, io.Discard) }, "-input 2x2x1 -steps 1", "kernel 2 larger than its input 1x1"},
		{func(a []string) error { return Affinity(a, "hpctrain", io.Discard) }, "-limit 0", "-limit 0"},
		// An output that cannot be written, found before minutes of measuring.
		{func(a []string) error { return Step(a, io.Discard) }, "-json " + missing + "/dir/s.json", "-json " + missing + "/dir/s.json: no such directory"},
		{func(a []string) error { return Gemm(a, io.Discard, io.Discard) }, "-json /", "-json /: is a directory"},
		{func(a []string) error { return Scaling(a, single, io.Discard) }, "-png " + missing + "/p.png", "-png " + missing + "/p.png: no such directory"},
		{func(a []string) error { return Affinity(a, "hpctrain", io.Discard) }, "-epochs 0", "epochs = 0"},
	} {
		err := c.run(strings.Fields(c.args))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line with %q", c.args, err, c.want)
		}
		// A value out of range is a usage error (exit 2), as is a flag
		// that does not parse.
		if !errors.As(err, new(cli.UsageError)) {
			t.Errorf("%s: %v is not a usage error", c.args, err)
		}
	}
}

// Several ranks per node with neither the -shm figures nor a job that
// measures them within a node is refused before the compute steps
// (minutes for a big model), not after them.
func TestScalingIntraRefusedFirst(t *testing.T) {
	var out strings.Builder
	err := Scaling(strings.Fields("-ranks-per-node 4 -link-gbps 100 -threads 1"), func() (mpi.Comm, error) { return mpi.NewSingle(), nil }, &out)
	if err == nil || !strings.Contains(err.Error(), "4 ranks per node, but no intra-node figures") || !errors.As(err, new(cli.UsageError)) || out.Len() > 0 {
		t.Errorf("%v, printed %q: want the usage error alone", err, out.String())
	}
}

// An output of bench optim or bench affinity that cannot be written (here
// a directory of its name) is refused before any measuring, in one line
// naming it, exit 2, and nothing is written: the files before it were
// written, and the error came after the measuring (the whole grid).
func TestOutputsCheckedFirst(t *testing.T) {
	topo, err := affinity.ReadTopology("/")
	if err != nil {
		t.Fatal(err)
	}
	mask, err := affinity.Allowed()
	if err != nil {
		t.Fatal(err)
	}
	last := cellMetrics(GridCell{Instances: topo.PhysicalCores(mask), Threads: 1}) // the grid's last cell's
	for _, c := range []struct {
		run  func(dir string) error
		file string
	}{
		{func(dir string) error { return Optim([]string{"-out", dir}, io.Discard) }, "optim_trajectories.png"},
		{func(dir string) error { return Affinity([]string{"-out", dir}, "hpctrain", io.Discard) }, "affinity.png"},
		{func(dir string) error { return Affinity([]string{"-out", dir}, "hpctrain", io.Discard) }, last},
	} {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, c.file), 0o755); err != nil {
			t.Fatal(err)
		}
		err := c.run(dir)
		want := "-out " + filepath.Join(dir, c.file) + ": is a directory"
		if err == nil || err.Error() != want || !errors.As(err, new(cli.UsageError)) {
			t.Errorf("%s a directory: %v, want the usage error %q", c.file, err, want)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 1 {
			t.Errorf("%s a directory: %d files in -out, want it alone", c.file, len(ents))
		}
	}
}
