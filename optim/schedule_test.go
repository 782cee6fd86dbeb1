package optim

import (
	"math"
	"strings"
	"testing"
)

func TestScheduleValues(t *testing.T) {
	type at struct {
		step int
		lr   float64
	}
	for _, tc := range []struct {
		name  string
		c     ScheduleConfig
		total int
		want  []at
	}{
		{"constant", ScheduleConfig{}, 0, []at{{0, 0.1}, {1000, 0.1}}},
		{"multistep", ScheduleConfig{Name: "multistep", Milestones: []int{100, 150}}, 0,
			[]at{{0, 0.1}, {99, 0.1}, {100, 0.01}, {149, 0.01}, {150, 0.001}, {10000, 0.001}}},
		{"multistep gamma", ScheduleConfig{Name: "multistep", Milestones: []int{0, 10}, Gamma: 0.5}, 0,
			[]at{{0, 0.05}, {9, 0.05}, {10, 0.025}}},
		{"exponential", ScheduleConfig{Name: "exponential", Gamma: 0.9}, 0,
			[]at{{0, 0.1}, {1, 0.09}, {2, 0.081}, {10, 0.1 * math.Pow(0.9, 10)}}},
		{"cosine", ScheduleConfig{Name: "cosine", MinLR: 0.01}, 100,
			[]at{{0, 0.1}, {50, 0.055}, {100, 0.01}, {200, 0.01}, {25, 0.01 + 0.09*(1+math.Sqrt2/2)/2}}},
		{"warmup constant", ScheduleConfig{WarmupSteps: 10, WarmupStartFactor: 0.1}, 0,
			[]at{{0, 0.01}, {5, 0.055}, {9, 0.091}, {10, 0.1}, {50, 0.1}}},
		{"warmup default factor", ScheduleConfig{WarmupSteps: 3}, 0,
			[]at{{0, 0.1 / 3}, {1, 0.1 * (1.0/3 + 2.0/9)}, {3, 0.1}}},
		{"warmup multistep", ScheduleConfig{Name: "multistep", Milestones: []int{20}, WarmupSteps: 10, WarmupStartFactor: 0.5}, 0,
			[]at{{0, 0.05}, {10, 0.1}, {29, 0.1}, {30, 0.01}}},
		{"warmup cosine", ScheduleConfig{Name: "cosine", WarmupSteps: 10, WarmupStartFactor: 0.5}, 110,
			[]at{{0, 0.05}, {10, 0.1}, {60, 0.05}, {110, 0}}},
		{"warmup exponential", ScheduleConfig{Name: "exponential", Gamma: 0.5, WarmupSteps: 2, WarmupStartFactor: 0.5}, 0,
			[]at{{0, 0.05}, {1, 0.075}, {2, 0.1}, {3, 0.05}}},
	} {
		s, err := NewSchedule(tc.c, 0.1, tc.total)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if got := s.LR(w.step); math.Abs(got-w.lr) > 1e-12 {
				t.Errorf("%s: LR(%d) = %v, want %v", tc.name, w.step, got, w.lr)
			}
		}
		if a := testing.AllocsPerRun(10, func() { s.LR(77) }); a != 0 {
			t.Errorf("%s: LR allocates %v", tc.name, a)
		}
	}
}

func TestScheduleErrors(t *testing.T) {
	for _, tc := range []struct {
		c     ScheduleConfig
		lr    float64
		total int
		want  string
	}{
		{ScheduleConfig{Name: "step"}, 0.1, 0, "known: [constant cosine exponential multistep]"},
		{ScheduleConfig{}, -0.1, 0, "lr -0.1: must be >= 0"},
		{ScheduleConfig{Name: "multistep", Milestones: []int{10, 10}}, 0.1, 0, "milestones [10 10]: must be strictly increasing"},
		{ScheduleConfig{Name: "multistep", Milestones: []int{20, 10}}, 0.1, 0, "strictly increasing"},
		{ScheduleConfig{Name: "multistep", Milestones: []int{-1}}, 0.1, 0, "steps >= 0"},
		{ScheduleConfig{Name: "multistep"}, 0.1, 0, "needs milestones"},
		{ScheduleConfig{Name: "multistep", Milestones: []int{1}, Gamma: -0.1}, 0.1, 0, "gamma -0.1: must be > 0"},
		{ScheduleConfig{Name: "exponential"}, 0.1, 0, "exponential needs gamma"},
		{ScheduleConfig{Name: "cosine"}, 0.1, 0, "cosine needs total steps"},
		{ScheduleConfig{Name: "cosine", WarmupSteps: 100}, 0.1, 100, "> warmup_steps"},
		{ScheduleConfig{Name: "cosine", MinLR: 0.2}, 0.1, 100, "min_lr 0.2: must be in [0, lr=0.1]"},
		{ScheduleConfig{WarmupSteps: -1}, 0.1, 0, "warmup_steps -1"},
		{ScheduleConfig{WarmupSteps: 5, WarmupStartFactor: 1.5}, 0.1, 0, "warmup_start_factor 1.5: must be in (0, 1]"},
		{ScheduleConfig{LRScaling: "square"}, 0.1, 0, "lr_scaling \"square\": must be linear, sqrt or none"},
		{ScheduleConfig{BaseBatch: -1}, 0.1, 0, "base_batch -1"},
	} {
		_, err := NewSchedule(tc.c, tc.lr, tc.total)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want it to contain %q", tc.c, err, tc.want)
		}
	}
}

func TestScaleLR(t *testing.T) {
	for _, tc := range []struct {
		rule         string
		global, base int
		want         float64
	}{
		{"linear", 256, 64, 0.4}, {"sqrt", 256, 64, 0.2}, {"none", 256, 64, 0.1}, {"", 256, 64, 0.1}, {"linear", 32, 64, 0.05},
	} {
		got, err := ScaleLR(0.1, tc.global, tc.base, tc.rule)
		if err != nil || math.Abs(got-tc.want) > 1e-15 {
			t.Errorf("ScaleLR(0.1, %d, %d, %q) = %v, %v; want %v", tc.global, tc.base, tc.rule, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		rule         string
		global, base int
		want         string
	}{
		{"linear", 256, 0, "base_batch 0: must be > 0"}, {"sqrt", 0, 64, "global batch 0"}, {"log", 1, 1, "must be linear, sqrt or none"},
	} {
		if _, err := ScaleLR(0.1, tc.global, tc.base, tc.rule); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ScaleLR(%q, %d, %d): %v, want %q", tc.rule, tc.global, tc.base, err, tc.want)
		}
	}
}
