package optim

import (
	"math"
	"strings"
	"testing"
)

// TestConfigValidate: Validate refuses what New refuses, with its message,
// before any parameter exists, and infinite values New would take.
func TestConfigValidate(t *testing.T) {
	inf := math.Inf(1)
	for _, c := range []Config{{Name: "sgd", LR: 0.1}, {Name: "adamw"}, {Name: "lars", Nesterov: true, Momentum: 0.9}} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{Name: "sgdx"}, `unknown optimizer "sgdx"`},
		{Config{Name: "sgd", LR: -1}, "lr -1: must be >= 0"},
		{Config{Name: "sgd", Nesterov: true}, "nesterov: needs momentum > 0"},
		{Config{Name: "adam", Beta1: new(1.0)}, "beta1 1: must be in [0, 1)"},
		{Config{Name: "sgd", LR: inf}, "lr +Inf: must be finite"},
		{Config{Name: "sgd", WeightDecay: inf}, "weight_decay +Inf: must be finite"},
		{Config{Name: "adam", Eps: &inf}, "eps +Inf: must be finite"},
	} {
		err := tc.c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
		if _, nerr := New(tc.c, nil, 10); nerr != nil && (err == nil || nerr.Error() != err.Error()) {
			t.Errorf("%+v: New says %q, Validate %v", tc.c, nerr, err)
		}
	}
}

// TestScheduleValidate: Validate refuses every schedule NewSchedule would
// refuse for any lr and length, and base_batch missing for lr_scaling.
func TestScheduleValidate(t *testing.T) {
	for _, c := range []ScheduleConfig{{}, {Name: "cosine", MinLR: 0.001, WarmupSteps: 5}, {Name: "multistep", Milestones: []int{3, 9}}, {LRScaling: "sqrt", BaseBatch: 64}} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	for _, tc := range []struct {
		c    ScheduleConfig
		want string
	}{
		{ScheduleConfig{Name: "step"}, `unknown schedule "step"`},
		{ScheduleConfig{Name: "multistep", Milestones: []int{10, 10}}, "strictly increasing"},
		{ScheduleConfig{Name: "multistep"}, "needs milestones"},
		{ScheduleConfig{Name: "exponential"}, "exponential needs gamma"},
		{ScheduleConfig{WarmupSteps: -1}, "warmup_steps -1"},
		{ScheduleConfig{WarmupSteps: 5, WarmupStartFactor: 1.5}, "warmup_start_factor 1.5"},
		{ScheduleConfig{LRScaling: "square"}, `lr_scaling "square"`},
		{ScheduleConfig{LRScaling: "linear"}, "base_batch 0: must be > 0 with lr_scaling linear"},
		{ScheduleConfig{BaseBatch: -1}, "base_batch -1"},
		{ScheduleConfig{Name: "cosine", MinLR: -0.1}, "min_lr -0.1"},
		{ScheduleConfig{Name: "exponential", Gamma: math.Inf(1)}, "gamma +Inf: must be finite"},
		{ScheduleConfig{Name: "exponential", Gamma: 1e300}, "gamma 1e+300: exponential's per-step factor must be at most 1"},
	} {
		if err := tc.c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
}
