package optim

import (
	"fmt"
	"math"
)

// ScalerConfig shapes a LossScaler. A zero field takes PyTorch's
// GradScaler default (Min, which GradScaler lacks, defaults to 1).
type ScalerConfig struct {
	// Init is the first scale (default 65536 = 2^16).
	Init float64
	// Growth multiplies the scale after Interval consecutive clean steps
	// (default 2); Backoff multiplies it after an overflow (default 0.5).
	Growth, Backoff float64
	// Interval is the number of consecutive clean steps after which the
	// scale grows (default 2000), at most 2^24 so that the count of clean
	// steps is exact in one float32 of State.
	Interval int
	// Min is the floor: an overflow that would take the scale below it is
	// an error, since the gradients then overflow at any useful scale
	// (default 1).
	Min float64
}

// MaxScalerInterval is the largest ScalerConfig.Interval: clean-step
// counts below it are exact in a float32.
const MaxScalerInterval = 1 << 24

// withDefaults returns c with every zero field set to its default.
func (c ScalerConfig) withDefaults() ScalerConfig {
	if c.Init == 0 {
		c.Init = 1 << 16
	}
	if c.Growth == 0 {
		c.Growth = 2
	}
	if c.Backoff == 0 {
		c.Backoff = 0.5
	}
	if c.Interval == 0 {
		c.Interval = 2000
	}
	if c.Min == 0 {
		c.Min = 1
	}
	return c
}

// check validates a config with its defaults filled in.
func (c ScalerConfig) check() error {
	switch {
	case !(c.Init > 0 && c.Init <= math.MaxFloat32) || float64(float32(c.Init)) != c.Init:
		return fmt.Errorf("loss scaler: init %v: must be > 0 and a float32 value", c.Init)
	case !(c.Growth > 1 && c.Growth <= math.MaxFloat32):
		return fmt.Errorf("loss scaler: growth %v: must be > 1 and finite", c.Growth)
	case !(c.Backoff > 0 && c.Backoff < 1):
		return fmt.Errorf("loss scaler: backoff %v: must be in (0, 1)", c.Backoff)
	case c.Interval < 1 || c.Interval > MaxScalerInterval:
		return fmt.Errorf("loss scaler: interval %d: must be in [1, %d]", c.Interval, MaxScalerInterval)
	case !(c.Min > 0 && c.Min <= c.Init):
		return fmt.Errorf("loss scaler: min %v: must be > 0 and <= init %v", c.Min, c.Init)
	}
	return nil
}

// LossScaler is dynamic loss scaling for fp16 training, with the semantics
// of PyTorch's torch.amp.GradScaler (Micikevicius et al., "Mixed Precision
// Training", 2018): the loss is multiplied by Scale before the backward pass
// so that small fp16 gradients do not flush to zero, the gradients are
// divided by it before the optimizer step, and the scale adapts to the
// largest value that does not overflow.
//
// The caller checks the reduced (all-ranks) gradients for non-finite
// values and calls Update once per step with the result, so every rank
// takes the same decision and the scalers stay identical.
//
// # Invariants
//   - Every scale is a float32 value (each product is rounded to float32),
//     so State is exact. With a power-of-two Init and the default factors 2
//     and 0.5 every scale is a power of two, and scaling and unscaling fp16
//     or fp32 gradients by it are exact (short of overflow and underflow).
//   - The scale never falls below Min: the overflow that would take it
//     there is an error, and the scale stays as it was.
//   - Update allocates nothing.
//
// Non-goals: finding the non-finite values, scaling the loss or unscaling
// the gradients (the backend does those on its device).
type LossScaler struct {
	c     ScalerConfig
	scale float64 // a float32 value
	clean int     // consecutive clean steps since the last growth or overflow, < c.Interval
}

// NewLossScaler returns a scaler starting at c.Init. Bad values are a
// one-line error naming the field and its accepted range.
func NewLossScaler(c ScalerConfig) (*LossScaler, error) {
	c = c.withDefaults()
	if err := c.check(); err != nil {
		return nil, err
	}
	return &LossScaler{c: c, scale: c.Init}, nil
}

// Scale is the factor the loss is multiplied by in the current step.
func (s *LossScaler) Scale() float64 { return s.scale }

// Update records one step. overflow true (some reduced gradient is not
// finite) means the step must be skipped: skip is true and the scale is
// multiplied by Backoff, and the count of clean steps restarts. If that
// would take the scale below Min, err says so and training should stop.
// A clean step counts towards growth: after Interval consecutive ones the
// scale is multiplied by Growth (unless that would overflow a float32) and
// the count restarts.
func (s *LossScaler) Update(overflow bool) (skip bool, err error) {
	if overflow {
		s.clean = 0
		next := float64(float32(s.scale * s.c.Backoff))
		if next < s.c.Min {
			return true, fmt.Errorf("fp16 loss scale fell below %v: the gradients overflow at any scale", s.c.Min)
		}
		s.scale = next
		return true, nil
	}
	s.clean++
	if s.clean == s.c.Interval {
		s.clean = 0
		if next := float32(s.scale * s.c.Growth); !math.IsInf(float64(next), 0) {
			s.scale = float64(next)
		}
	}
	return false, nil
}

// State returns the scaler's state for a checkpoint: {scale, clean steps},
// both exact in float32 (the scale is a float32 value and the count is
// below Interval <= 2^24). It is a new slice.
func (s *LossScaler) State() []float32 {
	return []float32{float32(s.scale), float32(s.clean)}
}

// Restore loads a State. It fails, changing nothing, unless state has two
// values: a finite scale >= Min and a whole count of clean steps in
// [0, Interval).
func (s *LossScaler) Restore(state []float32) error {
	if len(state) != 2 {
		return fmt.Errorf("loss scaler: restore: %d values, want 2 (scale, clean steps)", len(state))
	}
	scale, clean := float64(state[0]), float64(state[1])
	if !(scale >= s.c.Min && scale <= math.MaxFloat32) {
		return fmt.Errorf("loss scaler: restore: scale %v: must be finite and >= min %v", scale, s.c.Min)
	}
	if !(clean >= 0 && clean < float64(s.c.Interval)) || clean != math.Trunc(clean) {
		return fmt.Errorf("loss scaler: restore: clean steps %v: must be a whole number in [0, %d)", clean, s.c.Interval)
	}
	s.scale, s.clean = scale, int(clean)
	return nil
}
