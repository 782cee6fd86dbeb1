package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"

	"hpctrain/mpi"
)

// A flag check: each names the flag and the range it must be in, so that
// a bad value is refused in one line before anything runs; firstBad
// returns the first that fails.
type flagCheck func() error

func firstBad(checks ...flagCheck) error {
	for _, c := range checks {
		if err := c(); err != nil {
			return err
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
// once the benchmark has run: not a directory, in a directory that exists
// and takes new files. Checked before the run, so that a typo costs no
// minutes of measuring.
func writable(name, path string) flagCheck {
	return func() error {
		if path == "" {
			return nil
		}
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			return fmt.Errorf("-%s %s: is a directory", name, path)
		}
		dir := filepath.Dir(path)
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return fmt.Errorf("-%s %s: no such directory %s", name, path, dir)
		}
		f, err := os.CreateTemp(dir, ".hpctrain-probe-*")
		if err != nil {
			return fmt.Errorf("-%s %s: directory %s is not writable", name, path, dir)
		}
		f.Close()
		os.Remove(f.Name())
		return nil
	}
}

// rank0 is check on rank 0 alone (the rank that writes); c may be nil (no
// job yet: every caller is rank 0).
func rank0(c mpi.Comm, check flagCheck) flagCheck {
	return func() error {
		if c != nil && c.Rank() != 0 {
			return nil
		}
		return check()
	}
}
