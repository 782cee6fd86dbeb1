package bench

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"hpctrain/data"
	"hpctrain/internal/atomicfile"
	"hpctrain/internal/cli"
	"hpctrain/model"
	"hpctrain/mpi"
	"hpctrain/optim"
	"hpctrain/train"
)

// Benchmarks lists the benchmarks in the order bench -h gives them: the
// name, how it is called, and what it measures.
var Benchmarks = []struct{ Name, Call, Line string }{
	{"gemm", "hpctrain bench gemm", "SGEMM GFLOP/s for the CNN's shapes and 2048^3"},
	{"peak", "hpctrain bench peak", "the cores' peak GFLOP/s: fp32 fused multiply-adds, bf16 dot products"},
	{"step", "hpctrain bench step", "training steps of a model: samples/s, GFLOP/s, per layer, memory"},
	{"allreduce", "mpirun -np N hpctrain bench allreduce", "the gradient all-reduce, nccl-tests style (run under mpirun)"},
	{"affinity", "hpctrain bench affinity", "instances x threads grid, bound and not (launches mpirun)"},
	{"optim", "hpctrain bench optim", "every optimizer on J(x,y) = 100x^2 + y^2: PNG and CSV"},
	{"data", "hpctrain bench data", "loader throughput by workers and transforms; step with vs without loader"},
	{"scaling", "hpctrain bench scaling", "predicted samples/s and efficiency on N nodes (measures compute here, all-reduce under mpirun)"},
}

// newFlags is the flag set of the benchmark name, whose -h gives how it
// is called and what it measures before the flags, as every other
// command's does.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("hpctrain bench "+name, flag.ContinueOnError)
	for _, b := range Benchmarks {
		if b.Name == name {
			fs.Usage = func() {
				fmt.Fprintf(fs.Output(), "Usage: %s [flags]\n\n%s%s.\n\nFlags:\n", b.Call, strings.ToUpper(b.Line[:1]), b.Line[1:])
				fs.PrintDefaults()
			}
		}
	}
	return fs
}

// A flag check: each names the flag and the range it must be in, so that
// a bad value is refused in one line before anything runs; firstBad
// returns the first that fails, as a usage error (exit 2, as for a flag
// that does not parse).
type flagCheck func() error

func firstBad(checks ...flagCheck) error {
	for _, c := range checks {
		if err := c(); err != nil {
			return cli.Usage(err)
		}
	}
	return nil
}

// intIn checks -name's value v against [lo, hi].
func intIn(name string, v, lo, hi int) flagCheck {
	return func() error {
		if v < lo || v > hi {
			return fmt.Errorf("-%s %d: must be %d to %d", name, v, lo, hi)
		}
		return nil
	}
}

// floatIn checks -name's value v against [lo, hi]; NaN is outside.
func floatIn(name string, v, lo, hi float64) flagCheck {
	return func() error {
		if !(v >= lo && v <= hi) {
			return fmt.Errorf("-%s %v: must be %v to %v", name, v, lo, hi)
		}
		return nil
	}
}

// writable checks that -name's file path (none when empty) can be written
// once the benchmark has run (atomicfile.Check), before the run, so that a
// typo costs no minutes of measuring.
func writable(name, path string) flagCheck {
	return func() error {
		if path == "" {
			return nil
		}
		if err := atomicfile.Check(path); err != nil {
			return fmt.Errorf("-%s %s: %w", name, path, err)
		}
		return nil
	}
}

// outputDir makes -out's directory dir, with its parents, and checks that
// each of files can be written in it (writable), before any measuring: a
// file that could not be written (a directory of its name, a directory
// that takes no new files) stopped the run after the files written before
// it, and after the measuring. A usage error naming -out.
func outputDir(dir string, files ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return cli.Usage(fmt.Errorf("-out %s: %w", dir, err))
	}
	checks := make([]flagCheck, len(files))
	for i, f := range files {
		checks[i] = writable("out", filepath.Join(dir, f))
	}
	return firstBad(checks...)
}

// outputsWritable runs checks of the files rank 0 writes on rank 0, and
// makes every rank of c return rank 0's answer (train.Agree): a rank that
// stopped alone would leave the others waiting in the benchmark's first
// collective. c may be nil (no job: this process is rank 0). Collective.
func outputsWritable(c mpi.Comm, checks ...flagCheck) error {
	var err error
	if c == nil || c.Rank() == 0 {
		err = firstBad(checks...)
	}
	if c == nil {
		return err
	}
	return train.Agree(c, "checking the output files", err)
}

// agreeFlags checks that every rank of c was started with rank 0's value of
// each flag of fs but own (those that only shape what a rank writes of its
// own, such as the files rank 0 writes): the others decide which
// collectives a rank calls, and how large, or whether it refuses to start,
// and ranks that differ there (an MPMD launch, mpirun -np 1 ... : -np 1
// ...) waited on each other forever. A difference is the same usage error
// on every rank, naming the first such flag, rank 0's value and the odd
// ranks' (train.AgreeText). c may be nil (no job). Collective.
func agreeFlags(c mpi.Comm, fs *flag.FlagSet, own ...string) error {
	if c == nil {
		return nil
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) { // in name order, the same on every rank
		if err == nil && !slices.Contains(own, f.Name) {
			err = train.AgreeText(c, "flag -"+f.Name, flagText(f.Value.String()),
				"start every rank with the same flags")
		}
	})
	return err
}

// flagText is a flag's value as agreeFlags compares it: the value, or for
// a long one (a list, a path) its start and a digest of the whole, which
// train.AgreeText's width of 128 bytes holds.
func flagText(v string) string {
	if len(v) <= 96 {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return fmt.Sprintf("%s... (sha256 %x)", v[:64], sum[:8])
}

// checkNet refuses, in one line and before anything is allocated, a
// network that does not exist, does not fit the input, or whose batches
// would not fit what is left of budget (this node's memory, shared by its
// ranks): what train refuses at start-up, as usage errors.
func checkNet(budget *data.Budget, name string, in model.Shape, classes, batch int) error {
	d, err := model.LoadDesc(name)
	if err != nil {
		return cli.Usage(err)
	}
	s, err := model.Summarize(d, in, classes)
	if err != nil {
		return cli.Usage(err) // a network that does not fit the input, as summary says it
	}
	return cli.Usage(budget.Take(fmt.Sprintf("model %s with batches of %d samples", name, batch), train.NetBytes(s, batch, runtime.GOMAXPROCS(0)), train.NetHint(s, batch)))
}

// newOptimizer is the benchmarks' optimizer for net: lr 0.01, and sgd's
// momentum 0.9; an unknown name is a usage error.
func newOptimizer(name string, net *model.Net) (optim.Optimizer, error) {
	c := optim.Config{Name: name, LR: 0.01}
	if name == "sgd" {
		c.Momentum = 0.9
	}
	opt, err := optim.New(c, train.Groups(net), len(net.Params))
	return opt, cli.Usage(err)
}
