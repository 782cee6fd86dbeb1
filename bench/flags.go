package bench

import (
	"fmt"
	"math"
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
