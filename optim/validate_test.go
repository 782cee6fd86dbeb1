package optim

import (
	"math"
	"slices"
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

// TestUnread: Unread names exactly the keys that do not change what an
// optimizer does. For every optimizer and every key, four steps with the
// key set are compared with four steps without it: Unread lists the key
// if and only if the parameters come out the same, bit for bit.
func TestUnread(t *testing.T) {
	set := map[string]func(*Config){
		"momentum":                  func(c *Config) { c.Momentum = 0.3 },
		"dampening":                 func(c *Config) { c.Dampening = 0.5 },
		"nesterov":                  func(c *Config) { c.Nesterov = true },
		"beta1":                     func(c *Config) { c.Beta1 = new(0.5) },
		"beta2":                     func(c *Config) { c.Beta2 = new(0.9) },
		"eps":                       func(c *Config) { c.Eps = new(0.1) },
		"amsgrad":                   func(c *Config) { c.AMSGrad = true },
		"rho":                       func(c *Config) { c.Rho = new(0.5) },
		"alpha":                     func(c *Config) { c.Alpha = new(0.5) },
		"centered":                  func(c *Config) { c.Centered = true },
		"lr_decay":                  func(c *Config) { c.LRDecay = 0.5 },
		"initial_accumulator_value": func(c *Config) { c.InitialAccumulatorValue = 0.5 },
		"momentum_decay":            func(c *Config) { c.MomentumDecay = new(0.5) },
		"trust_coefficient":         func(c *Config) { c.TrustCoefficient = new(0.5) },
	}
	// A large first gradient then small ones: AMSGrad's max then differs
	// from v.
	grads := [][]float32{{1, -2, 0.5}, {0.01, 0.02, -0.01}, {0.3, -0.1, 0.2}, {-0.2, 0.05, 0.1}}
	run := func(c Config) []float32 {
		o, err := New(c, nil, 3)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		p := []float32{1, -2, 0.5}
		for _, g := range grads {
			o.Step(p, g, 0.01)
		}
		return p
	}
	for _, name := range Names() {
		base := Config{Name: name, LR: 0.01}
		if name == "sgd" || name == "lars" || name == "rmsprop" {
			base.Momentum = 0.5 // so that nesterov and dampening can act
		}
		want := run(base)
		for key, f := range set {
			c := base
			f(&c)
			same := slices.Equal(run(c), want)
			unread := slices.Contains(c.Unread(), key)
			if same != unread {
				t.Errorf("%s with %s: parameters unchanged %v, but Unread() = %v", name, key, same, c.Unread())
			}
			if readers := ReadBy(key); slices.Contains(readers, name) == unread {
				t.Errorf("%s with %s: ReadBy(%s) = %v, Unread() = %v", name, key, key, readers, c.Unread())
			}
		}
	}
	if got := ReadBy("beta1"); !slices.Equal(got, []string{"adam", "adamax", "adamw", "lamb", "nadam"}) {
		t.Errorf("ReadBy(beta1) = %v", got)
	}
}
