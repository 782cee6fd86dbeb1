package optim

import (
	"fmt"
	"math"
	"sort"
)

// Schedule gives the learning rate for each optimizer step; step counts
// from 0 and the schedule is stepped per iteration, not per epoch.
// LR allocates nothing.
type Schedule interface {
	LR(step int) float64
}

// ScheduleConfig selects and shapes a Schedule. Zero values mean unset:
// gamma and warmup_start_factor take their defaults (gamma 0.1 for
// multistep, no default for exponential; start factor 1/3 as in
// torch.optim.lr_scheduler.LinearLR), since a zero for either would be
// meaningless. LRScaling and BaseBatch are for ScaleLR, which the caller
// applies to the base lr before NewSchedule (it knows the global batch).
type ScheduleConfig struct {
	// Name is constant, multistep, exponential or cosine ("" = constant).
	Name string `toml:"schedule"`
	// Milestones (multistep): strictly increasing steps at which the lr
	// is multiplied by Gamma ("divide by 10 after N iterations, again
	// after M"), counted after the warm-up.
	Milestones []int `toml:"milestones"`
	// Gamma: multistep factor (default 0.1) or exponential per-step decay
	// (required).
	Gamma float64 `toml:"gamma"`
	// MinLR (cosine): the lr the cosine ends at, in [0, lr].
	MinLR float64 `toml:"min_lr"`
	// WarmupSteps puts a linear warm-up from WarmupStartFactor*lr to lr in
	// front of any schedule; the schedule then starts its own step count at
	// 0 after the warm-up, like torch's SequentialLR.
	WarmupSteps       int     `toml:"warmup_steps"`
	WarmupStartFactor float64 `toml:"warmup_start_factor"`
	// LRScaling is linear, sqrt or none ("" = none); BaseBatch is the batch
	// the base lr was tuned for. See ScaleLR.
	LRScaling string `toml:"lr_scaling"`
	BaseBatch int    `toml:"base_batch"`
}

// ScheduleNames lists the schedules NewSchedule knows.
func ScheduleNames() []string { return []string{"constant", "cosine", "exponential", "multistep"} }

// NewSchedule returns the schedule c describes, starting at lr, for a run
// of totalSteps optimizer steps (needed by cosine; others may pass 0).
// Bad input is an error naming the key and the accepted range.
func NewSchedule(c ScheduleConfig, lr float64, totalSteps int) (Schedule, error) {
	if !(lr >= 0) {
		return nil, fmt.Errorf("schedule: lr %v: must be >= 0", lr)
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	f := c.WarmupStartFactor
	if f == 0 {
		f = 1.0 / 3
	}
	var s Schedule
	switch c.Name {
	case "", "constant":
		s = constant(lr)
	case "multistep":
		g := c.Gamma
		if g == 0 {
			g = 0.1
		}
		s = multistep{lr: lr, gamma: g, milestones: append([]int(nil), c.Milestones...)}
	case "exponential":
		s = exponential{lr: lr, gamma: c.Gamma}
	case "cosine":
		n := totalSteps - c.WarmupSteps
		if n <= 0 {
			return nil, fmt.Errorf("schedule: cosine needs total steps (%d) > warmup_steps (%d)", totalSteps, c.WarmupSteps)
		}
		if !(c.MinLR >= 0 && c.MinLR <= lr) {
			return nil, fmt.Errorf("schedule: min_lr %v: must be in [0, lr=%v]", c.MinLR, lr)
		}
		s = cosine{lr: lr, min: c.MinLR, n: n}
	}
	if c.WarmupSteps > 0 {
		s = warmup{inner: s, lr: lr, steps: c.WarmupSteps, start: f}
	}
	return s, nil
}

// check is every check of NewSchedule that needs neither the lr nor the
// run's length.
func (c ScheduleConfig) check() error {
	if c.WarmupSteps < 0 {
		return fmt.Errorf("schedule: warmup_steps %d: must be >= 0", c.WarmupSteps)
	}
	if f := c.WarmupStartFactor; f != 0 && !(f > 0 && f <= 1) {
		return fmt.Errorf("schedule: warmup_start_factor %v: must be in (0, 1]", c.WarmupStartFactor)
	}
	if _, err := ScaleLR(1, 1, 1, c.LRScaling); err != nil {
		return fmt.Errorf("schedule: %w", err)
	}
	if c.BaseBatch < 0 {
		return fmt.Errorf("schedule: base_batch %d: must be >= 0", c.BaseBatch)
	}
	if c.Gamma < 0 || math.IsNaN(c.Gamma) {
		return fmt.Errorf("schedule: gamma %v: must be > 0", c.Gamma)
	}
	if c.Name == "exponential" && c.Gamma > 1 && !math.IsInf(c.Gamma, 1) {
		// A per-step factor above 1 grows the rate without end.
		return fmt.Errorf("schedule: gamma %v: exponential's per-step factor must be at most 1", c.Gamma)
	}
	switch c.Name {
	case "", "constant", "cosine":
	case "multistep":
		if len(c.Milestones) == 0 {
			return fmt.Errorf("schedule: multistep needs milestones (strictly increasing steps >= 0)")
		}
		for i, m := range c.Milestones {
			if m < 0 || (i > 0 && m <= c.Milestones[i-1]) {
				return fmt.Errorf("schedule: milestones %v: must be strictly increasing steps >= 0", c.Milestones)
			}
		}
	case "exponential":
		if c.Gamma == 0 {
			return fmt.Errorf("schedule: exponential needs gamma (per-step factor > 0, e.g. 0.999)")
		}
	default:
		return fmt.Errorf("schedule: unknown schedule %q (known: %v)", c.Name, ScheduleNames())
	}
	return nil
}

// Validate checks c before a run knows its lr and its length: every key
// NewSchedule checks that depends on neither, base_batch where lr_scaling
// needs it (ScaleLR), and finite gamma and min_lr. NewSchedule can then
// fail only on the run's own figures: cosine's total steps against
// warmup_steps, and min_lr against the lr after scaling.
func (c ScheduleConfig) Validate() error {
	if err := c.check(); err != nil {
		return err
	}
	if c.LRScaling == "linear" || c.LRScaling == "sqrt" {
		if _, err := ScaleLR(1, 1, c.BaseBatch, c.LRScaling); err != nil {
			return fmt.Errorf("schedule: %w", err)
		}
	}
	if math.IsInf(c.Gamma, 0) {
		return fmt.Errorf("schedule: gamma %v: must be finite", c.Gamma)
	}
	if !(c.MinLR >= 0) || math.IsInf(c.MinLR, 0) {
		return fmt.Errorf("schedule: min_lr %v: must be finite and >= 0", c.MinLR)
	}
	return nil
}

type constant float64

func (c constant) LR(int) float64 { return float64(c) }

// multistep is lr * gamma^(number of milestones <= step)
// (torch.optim.lr_scheduler.MultiStepLR).
type multistep struct {
	lr, gamma  float64
	milestones []int
}

func (m multistep) LR(step int) float64 {
	k := sort.SearchInts(m.milestones, step+1) // milestones <= step
	return m.lr * math.Pow(m.gamma, float64(k))
}

// exponential is lr * gamma^step (ExponentialLR stepped per iteration).
type exponential struct{ lr, gamma float64 }

func (e exponential) LR(step int) float64 { return e.lr * math.Pow(e.gamma, float64(step)) }

// cosine anneals from lr to min over n steps and stays at min after
// (Loshchilov and Hutter 2017, SGDR, without restarts; CosineAnnealingLR):
// min + (lr-min)*(1+cos(pi*step/n))/2.
type cosine struct {
	lr, min float64
	n       int
}

func (c cosine) LR(step int) float64 {
	if step >= c.n {
		return c.min
	}
	return c.min + (c.lr-c.min)*(1+math.Cos(math.Pi*float64(step)/float64(c.n)))/2
}

// warmup ramps linearly from start*lr at step 0 towards lr over steps
// steps (Goyal et al. 2017, "Accurate, Large Minibatch SGD", section 2.2;
// LinearLR), then hands over to inner, shifted to start at 0.
type warmup struct {
	inner Schedule
	lr    float64
	steps int
	start float64
}

func (w warmup) LR(step int) float64 {
	if step < w.steps {
		return w.lr * (w.start + (1-w.start)*float64(step)/float64(w.steps))
	}
	return w.inner.LR(step - w.steps)
}

// ScaleLR scales a base learning rate tuned for baseBatch to globalBatch
// (the batch summed over all ranks): "linear" multiplies by
// globalBatch/baseBatch (Goyal et al. 2017, "Accurate, Large Minibatch SGD:
// Training ImageNet in 1 Hour", arXiv:1706.02677), "sqrt" by its square
// root (Krizhevsky 2014, "One weird trick", arXiv:1404.5997; common for
// adaptive optimizers), "none" or "" returns base.
func ScaleLR(base float64, globalBatch, baseBatch int, rule string) (float64, error) {
	switch rule {
	case "", "none":
		return base, nil
	case "linear", "sqrt":
	default:
		return 0, fmt.Errorf("lr_scaling %q: must be linear, sqrt or none", rule)
	}
	if baseBatch <= 0 {
		return 0, fmt.Errorf("base_batch %d: must be > 0 with lr_scaling %s", baseBatch, rule)
	}
	if globalBatch <= 0 {
		return 0, fmt.Errorf("global batch %d: must be > 0", globalBatch)
	}
	k := float64(globalBatch) / float64(baseBatch)
	if rule == "sqrt" {
		k = math.Sqrt(k)
	}
	return base * k, nil
}
