package bench

import (
	"fmt"
	"math"

	"hpctrain/data"
	"hpctrain/internal/atomicfile"
	"hpctrain/internal/cli"
	"hpctrain/model"
	"hpctrain/mpi"
	"hpctrain/optim"
	"hpctrain/train"
)

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

// finiteFrom checks that -name's value v is a finite number >= lo.
func finiteFrom(name string, v, lo float64) flagCheck {
	return func() error {
		if !(v >= lo) || math.IsInf(v, 0) {
			return fmt.Errorf("-%s %v: must be a finite number >= %v", name, v, lo)
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
	return cli.Usage(budget.Take(fmt.Sprintf("model %s with batches of %d samples", name, batch), train.NetBytes(s, batch), "lower -batch"))
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
