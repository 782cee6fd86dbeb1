package optim

import (
	"math"
	"strings"
	"testing"
)

func newScaler(t *testing.T, c ScalerConfig) *LossScaler {
	t.Helper()
	s, err := NewLossScaler(c)
	if err != nil {
		t.Fatalf("NewLossScaler(%+v): %v", c, err)
	}
	return s
}

// update calls Update and fails the test on an error.
func update(t *testing.T, s *LossScaler, overflow bool) bool {
	t.Helper()
	skip, err := s.Update(overflow)
	if err != nil {
		t.Fatalf("Update(%v) at scale %v: %v", overflow, s.Scale(), err)
	}
	return skip
}

func TestLossScalerDefaults(t *testing.T) {
	s := newScaler(t, ScalerConfig{})
	if s.Scale() != 65536 {
		t.Errorf("default scale %v, want 65536", s.Scale())
	}
	want := ScalerConfig{Init: 65536, Growth: 2, Backoff: 0.5, Interval: 2000, Min: 1}
	if s.c != want {
		t.Errorf("defaults %+v, want %+v", s.c, want)
	}
}

func TestLossScalerOverflowSkipsAndHalves(t *testing.T) {
	s := newScaler(t, ScalerConfig{})
	for i, want := range []float64{32768, 16384, 8192} {
		if !update(t, s, true) {
			t.Errorf("overflow %d: skip false, want true", i+1)
		}
		if s.Scale() != want {
			t.Errorf("after overflow %d: scale %v, want %v", i+1, s.Scale(), want)
		}
	}
	if update(t, s, false) {
		t.Errorf("clean step: skip true, want false")
	}
	if s.Scale() != 8192 {
		t.Errorf("clean step changed the scale to %v", s.Scale())
	}
}

func TestLossScalerGrowthAfterInterval(t *testing.T) {
	const interval = 5
	s := newScaler(t, ScalerConfig{Init: 1024, Interval: interval})
	for i := 1; i < interval; i++ {
		update(t, s, false)
		if s.Scale() != 1024 {
			t.Fatalf("after %d clean steps: scale %v, want 1024 (grows only after %d)", i, s.Scale(), interval)
		}
	}
	update(t, s, false)
	if s.Scale() != 2048 {
		t.Fatalf("after %d clean steps: scale %v, want 2048", interval, s.Scale())
	}
	// The count restarts after a growth: the next growth is another
	// interval away.
	for i := 1; i < interval; i++ {
		update(t, s, false)
	}
	if s.Scale() != 2048 {
		t.Fatalf("%d clean steps after a growth: scale %v, want 2048", interval-1, s.Scale())
	}
	update(t, s, false)
	if s.Scale() != 4096 {
		t.Fatalf("%d clean steps after a growth: scale %v, want 4096", interval, s.Scale())
	}
}

func TestLossScalerOverflowResetsCount(t *testing.T) {
	const interval = 4
	s := newScaler(t, ScalerConfig{Init: 1024, Interval: interval})
	for i := 0; i < interval-1; i++ {
		update(t, s, false)
	}
	update(t, s, true) // 512, count back to 0
	for i := 0; i < interval-1; i++ {
		update(t, s, false)
		if s.Scale() != 512 {
			t.Fatalf("clean step %d after an overflow: scale %v, want 512 (the overflow restarts the count)", i+1, s.Scale())
		}
	}
	update(t, s, false)
	if s.Scale() != 1024 {
		t.Fatalf("%d clean steps after an overflow: scale %v, want 1024", interval, s.Scale())
	}
}

// With the default factors every scale is a power of two, whatever the
// sequence of steps.
func TestLossScalerPowersOfTwo(t *testing.T) {
	s := newScaler(t, ScalerConfig{Interval: 3})
	x := uint32(12345)
	grew, shrank := 0, 0
	for i := 0; i < 5000; i++ {
		x = x*1664525 + 1013904223
		// 1 step in 16 overflows, and every step above 2^20 does: the
		// scale wanders below 2^20 without reaching the cap or the floor.
		overflow := x>>28 == 0 || s.Scale() > 0x1p20
		before := s.Scale()
		if _, err := s.Update(overflow); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		switch {
		case s.Scale() > before:
			grew++
		case s.Scale() < before:
			shrank++
		}
		if f, _ := math.Frexp(s.Scale()); f != 0.5 {
			t.Fatalf("step %d: scale %v is not a power of two", i, s.Scale())
		}
	}
	if grew < 100 || shrank < 100 {
		t.Errorf("%d growths and %d backoffs in 5000 steps: the sequence does not exercise both", grew, shrank)
	}
}

func TestLossScalerFloor(t *testing.T) {
	s := newScaler(t, ScalerConfig{Init: 4})
	update(t, s, true) // 2
	update(t, s, true) // 1
	if s.Scale() != 1 {
		t.Fatalf("scale %v, want 1", s.Scale())
	}
	skip, err := s.Update(true)
	if err == nil {
		t.Fatalf("overflow at scale 1: no error, scale now %v", s.Scale())
	}
	if want := "fp16 loss scale fell below 1: the gradients overflow at any scale"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if !skip {
		t.Errorf("overflow at the floor: skip false, want true")
	}
	if s.Scale() != 1 {
		t.Errorf("scale %v after the floor error, want 1 (never below Min)", s.Scale())
	}

	// A higher floor is honoured the same way.
	s = newScaler(t, ScalerConfig{Init: 64, Min: 32})
	update(t, s, true)
	if _, err := s.Update(true); err == nil || !strings.Contains(err.Error(), "below 32") {
		t.Errorf("overflow at min 32: error %v, want one naming 32", err)
	}
}

// Growth stops short of float32's overflow, so State stays finite.
func TestLossScalerGrowthCap(t *testing.T) {
	s := newScaler(t, ScalerConfig{Init: 0x1p126, Interval: 1})
	update(t, s, false)
	if s.Scale() != 0x1p127 {
		t.Fatalf("scale %v, want 2^127", s.Scale())
	}
	update(t, s, false)
	if s.Scale() != 0x1p127 {
		t.Errorf("scale %v after growth past float32, want 2^127 kept", s.Scale())
	}
}

func TestLossScalerStateRestore(t *testing.T) {
	c := ScalerConfig{Interval: 10}
	a := newScaler(t, c)
	update(t, a, true)
	for i := 0; i < 17; i++ {
		update(t, a, false)
	}
	st := a.State()
	if want := []float32{65536, 7}; len(st) != 2 || st[0] != want[0] || st[1] != want[1] {
		t.Fatalf("State %v, want %v", st, want)
	}

	b := newScaler(t, c)
	if err := b.Restore(st); err != nil {
		t.Fatal(err)
	}
	// The restored scaler continues exactly as the original.
	for i := 0; i < 40; i++ {
		overflow := i%13 == 12
		sa, ea := a.Update(overflow)
		sb, eb := b.Update(overflow)
		if sa != sb || (ea == nil) != (eb == nil) || a.Scale() != b.Scale() {
			t.Fatalf("step %d after restore: original (%v, %v, %v), restored (%v, %v, %v)", i, sa, ea, a.Scale(), sb, eb, b.Scale())
		}
	}
	// A scale far from 1 and the largest count survive float32.
	big := newScaler(t, ScalerConfig{Init: 0x1p100, Interval: MaxScalerInterval})
	big.clean = MaxScalerInterval - 1
	r := newScaler(t, ScalerConfig{Init: 0x1p100, Interval: MaxScalerInterval})
	if err := r.Restore(big.State()); err != nil {
		t.Fatal(err)
	}
	if r.scale != big.scale || r.clean != big.clean {
		t.Errorf("restored (%v, %d), want (%v, %d)", r.scale, r.clean, big.scale, big.clean)
	}
}

func TestLossScalerRestoreRejects(t *testing.T) {
	for _, st := range [][]float32{
		nil,
		{1024},
		{1024, 0, 0},
		{0.5, 0},                           // below min 1
		{float32(math.Inf(1)), 0},          // not finite
		{float32(math.NaN()), 0},           // not finite
		{1024, -1},                         // negative count
		{1024, 10},                         // count == interval
		{1024, 2.5},                        // not whole
		{1024, float32(math.NaN())},        // not a number
		{-1024, 3},                         // negative scale
		{float32(math.Inf(-1)), 3},         // negative infinity
		{1024, float32(math.Inf(1))},       // infinite count
		{1024, float32(MaxScalerInterval)}, // count beyond interval
	} {
		s := newScaler(t, ScalerConfig{Interval: 10})
		s.clean = 3
		if err := s.Restore(st); err == nil {
			t.Errorf("Restore(%v): no error", st)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("Restore(%v): error of several lines: %q", st, err)
		}
		if s.scale != 65536 || s.clean != 3 {
			t.Errorf("Restore(%v) failed but changed the state to (%v, %d)", st, s.scale, s.clean)
		}
	}
}

func TestScalerConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		c    ScalerConfig
		want string // a substring of the error
	}{
		{ScalerConfig{Init: -1}, "init -1"},
		{ScalerConfig{Init: math.Inf(1)}, "init +Inf"},
		{ScalerConfig{Init: math.NaN()}, "init NaN"},
		{ScalerConfig{Init: 1e39}, "init 1e+39"},
		{ScalerConfig{Init: 0.1}, "init 0.1"}, // not a float32 value
		{ScalerConfig{Growth: 1}, "growth 1"},
		{ScalerConfig{Growth: 0.5}, "growth 0.5"},
		{ScalerConfig{Growth: math.Inf(1)}, "growth +Inf"},
		{ScalerConfig{Growth: math.NaN()}, "growth NaN"},
		{ScalerConfig{Backoff: 1}, "backoff 1"},
		{ScalerConfig{Backoff: -0.5}, "backoff -0.5"},
		{ScalerConfig{Backoff: math.NaN()}, "backoff NaN"},
		{ScalerConfig{Interval: -1}, "interval -1"},
		{ScalerConfig{Interval: MaxScalerInterval + 1}, "interval 16777217"},
		{ScalerConfig{Min: -1}, "min -1"},
		{ScalerConfig{Min: math.NaN()}, "min NaN"},
		{ScalerConfig{Init: 8, Min: 16}, "min 16"},
	} {
		_, err := NewLossScaler(tc.c)
		if err == nil {
			t.Errorf("NewLossScaler(%+v): no error, want one with %q", tc.c, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("NewLossScaler(%+v): %q, want one line with %q", tc.c, err, tc.want)
		}
	}
	// The edges that are allowed.
	for _, c := range []ScalerConfig{
		{Init: 1},
		{Init: 1000},
		{Init: 0.25, Min: 0.25},
		{Growth: 1.5, Backoff: 0.9},
		{Interval: 1},
		{Interval: MaxScalerInterval},
	} {
		if _, err := NewLossScaler(c); err != nil {
			t.Errorf("NewLossScaler(%+v): %v", c, err)
		}
	}
}

func TestLossScalerUpdateAllocs(t *testing.T) {
	s := newScaler(t, ScalerConfig{Interval: 3})
	i := 0
	a := testing.AllocsPerRun(100, func() {
		i++
		s.Update(i%7 == 0)
	})
	if a != 0 {
		t.Errorf("%v allocations per Update, want 0", a)
	}
}
