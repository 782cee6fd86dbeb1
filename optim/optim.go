package optim

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// Group is one parameter tensor's range in the flat buffers.
type Group struct {
	Name     string
	Off, Len int
	// NoDecay excludes the tensor from weight decay (biases, and batch
	// norm's scale and shift: the "no bias decay" of He et al. 2019, and
	// timm's default). LARS and LAMB also leave NoDecay tensors out of the
	// layer-wise trust ratio (ratio 1), as the reference implementations
	// do for biases and norms.
	NoDecay bool
}

// Optimizer updates params in place from grads (same length, the flat
// buffers the Groups index). Step allocates nothing after the first call.
type Optimizer interface {
	// Name is the optimizer's name as accepted by New.
	Name() string
	// Step applies one update with learning rate lr.
	Step(params, grads []float32, lr float64)
	// State returns the optimizer's state buffers, in a fixed order, for
	// checkpoints: the slices are the live state, so copying into them
	// restores it. They are allocated lazily: before the first Step (or
	// Restore) State returns nil. State()[0] is always the step counter, two
	// float32 holding t mod 2^24 and t / 2^24 (both exact in float32).
	State() [][]float32
	// Restore allocates the state if needed and copies state into it, so a
	// checkpoint can be loaded before the first Step. It fails, changing
	// nothing, unless state has the number and lengths of buffers State
	// returns after a Step.
	Restore(state [][]float32) error
	// SetParallel makes Step split its loops over p's workers; nil (the
	// default) runs them on the calling goroutine.
	SetParallel(p Parallel)
}

// StateSizer is an Optimizer that says, before its first Step, how many
// float32 values State will hold after it (the step counter's two
// included): what a checkpoint of the run will take, known at start-up.
// Every optimizer of this package is one.
type StateSizer interface {
	StateLen() int
}

// BF16Copier is an Optimizer that also writes its parameters in
// bfloat16: after SetBF16Copy(h) (len(h) == n), every Step leaves each
// parameter's new value rounded to bfloat16 in h (kernels.GoToBF16's
// rounding: to nearest even, as oneDNN converts), written while the value
// is still in cache. A network whose layers multiply bf16 weights
// (model.Net.Weights16) then need not read and convert every parameter
// again before its next forward. SGD with momentum converts inside its
// update kernel, a few hundred values at a time; the others convert each
// worker's range after updating it. nil stops it. Every optimizer of this
// package is one.
type BF16Copier interface {
	SetBF16Copy(h []uint16)
}

// Config holds every optimizer's hyperparameters; each optimizer reads the
// fields it uses.
//
// Unset values: a nil pointer field means "PyTorch's default for this
// optimizer" (write new(0.0) for an explicit zero, which a plain float64
// could not express). The plain float64 fields whose zero is already the
// default (momentum, dampening, lr_decay, initial_accumulator_value) take
// the value as given. Two plain fields predate the pointers and keep their
// meaning: LR == 0 selects the optimizer's default lr (a zero lr is never
// wanted), and WeightDecay == 0 selects the default, which is 0 except for
// AdamW's 1e-2 (AdamW without decay is Adam: use "adam").
// WithDefaults returns the config with every default filled in.
type Config struct {
	Name string `toml:"optimizer"`
	// LR is the base learning rate, the schedule's starting value; Step
	// takes the current one.
	LR          float64 `toml:"lr"`
	Momentum    float64 `toml:"momentum"`
	Dampening   float64 `toml:"dampening"`
	Nesterov    bool    `toml:"nesterov"`
	WeightDecay float64 `toml:"weight_decay"`

	Beta1    *float64 `toml:"beta1"` // Adam family, LAMB: first-moment decay
	Beta2    *float64 `toml:"beta2"` // second-moment (AdaMax: infinity-norm) decay
	Eps      *float64 `toml:"eps"`   // denominator guard, default per optimizer
	AMSGrad  bool     `toml:"amsgrad"`
	Rho      *float64 `toml:"rho"`   // Adadelta's decay
	Alpha    *float64 `toml:"alpha"` // RMSprop's decay
	Centered bool     `toml:"centered"`
	// Adagrad: lr / (1 + (t-1)*LRDecay), and the accumulator's start value.
	LRDecay                 float64 `toml:"lr_decay"`
	InitialAccumulatorValue float64 `toml:"initial_accumulator_value"`
	// Nadam's psi in mu_t = beta1*(1 - 0.5*0.96^(t*psi)).
	MomentumDecay *float64 `toml:"momentum_decay"`
	// LARS's eta in the trust ratio eta*||w|| / (||g|| + wd*||w|| + eps).
	TrustCoefficient *float64 `toml:"trust_coefficient"`
}

// defaults are one optimizer's PyTorch defaults; a zero field means the
// optimizer does not read that hyperparameter.
type defaults struct {
	lr, wd, beta1, beta2, eps, rho, alpha, momentumDecay, trust float64
}

type entry struct {
	def defaults
	new func(c Config, b base) (Optimizer, error)
}

// registry holds the known optimizers by name, with their defaults.
// LARS and LAMB are not in torch.optim: their defaults follow timm's Lars
// (lr 1, eps 1e-8, trust_coefficient 1e-3) and the LAMB paper (eps 1e-6).
var registry = map[string]entry{
	"sgd":      {defaults{lr: 1e-3}, newSGD},
	"adagrad":  {defaults{lr: 1e-2, eps: 1e-10}, newAdagrad},
	"adadelta": {defaults{lr: 1, rho: 0.9, eps: 1e-6}, newAdadelta},
	"rmsprop":  {defaults{lr: 1e-2, alpha: 0.99, eps: 1e-8}, newRMSprop},
	"adam":     {defaults{lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8}, newAdam},
	"adamw":    {defaults{lr: 1e-3, wd: 1e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8}, newAdamW},
	"adamax":   {defaults{lr: 2e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8}, newAdamax},
	"nadam":    {defaults{lr: 2e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, momentumDecay: 4e-3}, newNadam},
	"lars":     {defaults{lr: 1, eps: 1e-8, trust: 1e-3}, newLARS},
	"lamb":     {defaults{lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-6}, newLAMB},
}

// Names lists the optimizers New knows, sorted.
func Names() []string {
	var s []string
	for k := range registry {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// WithDefaults returns c with the defaults of optimizer c.Name filled in:
// LR and WeightDecay when zero, and every nil pointer field the optimizer
// reads. Fields the optimizer does not read stay nil. An unknown name
// returns c unchanged (New reports it).
func (c Config) WithDefaults() Config {
	e, ok := registry[c.Name]
	if !ok {
		return c
	}
	d := e.def
	if c.LR == 0 {
		c.LR = d.lr
	}
	if c.WeightDecay == 0 {
		c.WeightDecay = d.wd
	}
	fill := func(p **float64, v float64) {
		if *p == nil && v != 0 {
			*p = new(v)
		}
	}
	fill(&c.Beta1, d.beta1)
	fill(&c.Beta2, d.beta2)
	fill(&c.Eps, d.eps)
	fill(&c.Rho, d.rho)
	fill(&c.Alpha, d.alpha)
	fill(&c.MomentumDecay, d.momentumDecay)
	fill(&c.TrustCoefficient, d.trust)
	return c
}

// New returns the optimizer c.Name for n parameters laid out as groups,
// after filling in defaults (see Config). The groups must tile [0, n)
// without gaps or overlaps, in any order; no groups means one group over
// everything. Bad hyperparameters are errors naming the key and its range.
func New(c Config, groups []Group, n int) (Optimizer, error) {
	e, ok := registry[c.Name]
	if !ok {
		return nil, fmt.Errorf("unknown optimizer %q (known: %v)", c.Name, Names())
	}
	c = c.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("optimizer %s: %w", c.Name, err)
	}
	b, err := newBase(groups, n)
	if err != nil {
		return nil, fmt.Errorf("optimizer %s: %w", c.Name, err)
	}
	return e.new(c, b)
}

// Validate checks c as New would, without parameters: the name, every
// hyperparameter's range after defaults, and the constraints of the named
// optimizer (nesterov), with New's messages; and that every value is
// finite (New takes an infinite lr or decay). It allocates nothing large:
// a configuration can be checked before the model exists.
func (c Config) Validate() error {
	if _, err := New(c, nil, 0); err != nil {
		return err
	}
	d := c.WithDefaults()
	for _, k := range []struct {
		key string
		v   *float64
	}{
		{"lr", &d.LR}, {"weight_decay", &d.WeightDecay}, {"momentum", &d.Momentum},
		{"lr_decay", &d.LRDecay}, {"initial_accumulator_value", &d.InitialAccumulatorValue},
		{"eps", d.Eps}, {"momentum_decay", d.MomentumDecay}, {"trust_coefficient", d.TrustCoefficient},
	} {
		if k.v != nil && math.IsInf(*k.v, 0) {
			return fmt.Errorf("optimizer %s: %s %v: must be finite", c.Name, k.key, *k.v)
		}
	}
	return nil
}

// reads lists, for each optimizer, the hyperparameters (TOML keys) it
// reads beyond lr and weight_decay, which every one reads.
var reads = map[string][]string{
	"sgd":      {"momentum", "dampening", "nesterov"},
	"lars":     {"momentum", "dampening", "nesterov", "eps", "trust_coefficient"},
	"adam":     {"beta1", "beta2", "eps", "amsgrad"},
	"adamw":    {"beta1", "beta2", "eps", "amsgrad"},
	"adamax":   {"beta1", "beta2", "eps"},
	"nadam":    {"beta1", "beta2", "eps", "momentum_decay"},
	"lamb":     {"beta1", "beta2", "eps"},
	"rmsprop":  {"alpha", "eps", "momentum", "centered"},
	"adagrad":  {"eps", "lr_decay", "initial_accumulator_value"},
	"adadelta": {"rho", "eps"},
}

// set lists the hyperparameter keys c gives a value, in Config's order:
// a non-nil pointer, a non-zero number, a true flag. lr and weight_decay
// are left out (every optimizer reads them).
func (c Config) set() []string {
	var ks []string
	for _, k := range []struct {
		key string
		set bool
	}{
		{"momentum", c.Momentum != 0}, {"dampening", c.Dampening != 0}, {"nesterov", c.Nesterov},
		{"beta1", c.Beta1 != nil}, {"beta2", c.Beta2 != nil}, {"eps", c.Eps != nil},
		{"amsgrad", c.AMSGrad}, {"rho", c.Rho != nil}, {"alpha", c.Alpha != nil},
		{"centered", c.Centered}, {"lr_decay", c.LRDecay != 0},
		{"initial_accumulator_value", c.InitialAccumulatorValue != 0},
		{"momentum_decay", c.MomentumDecay != nil}, {"trust_coefficient", c.TrustCoefficient != nil},
	} {
		if k.set {
			ks = append(ks, k.key)
		}
	}
	return ks
}

// Unread lists the keys c sets that optimizer c.Name does not read (beta1
// for sgd, momentum for adam), in Config's order: settings a run would
// ignore in silence. An unknown name reads nothing.
func (c Config) Unread() []string {
	var ks []string
	for _, k := range c.set() {
		if !slices.Contains(reads[c.Name], k) {
			ks = append(ks, k)
		}
	}
	return ks
}

// ReadBy lists, sorted, the optimizers that read hyperparameter key (its
// TOML name): what to tell the user who set it for another.
func ReadBy(key string) []string {
	var names []string
	for _, n := range Names() {
		if key == "lr" || key == "weight_decay" || slices.Contains(reads[n], key) {
			names = append(names, n)
		}
	}
	return names
}

// validate checks ranges; comparisons are written so that NaN fails.
func (c Config) validate() error {
	type check struct {
		key    string
		v      *float64
		ok     func(float64) bool
		accept string
	}
	nonNeg := func(x float64) bool { return x >= 0 }
	unit := func(x float64) bool { return x >= 0 && x <= 1 }
	beta := func(x float64) bool { return x >= 0 && x < 1 }
	pos := func(x float64) bool { return x > 0 }
	checks := []check{
		{"lr", &c.LR, nonNeg, "must be >= 0"},
		{"weight_decay", &c.WeightDecay, nonNeg, "must be >= 0"},
		{"momentum", &c.Momentum, nonNeg, "must be >= 0"},
		{"dampening", &c.Dampening, unit, "must be in [0, 1]"},
		{"lr_decay", &c.LRDecay, nonNeg, "must be >= 0"},
		{"initial_accumulator_value", &c.InitialAccumulatorValue, nonNeg, "must be >= 0"},
		{"beta1", c.Beta1, beta, "must be in [0, 1)"},
		{"beta2", c.Beta2, beta, "must be in [0, 1)"},
		{"eps", c.Eps, pos, "must be > 0"},
		{"rho", c.Rho, unit, "must be in [0, 1]"},
		{"alpha", c.Alpha, unit, "must be in [0, 1]"},
		{"momentum_decay", c.MomentumDecay, nonNeg, "must be >= 0"},
		{"trust_coefficient", c.TrustCoefficient, pos, "must be > 0"},
	}
	for _, k := range checks {
		if k.v != nil && !k.ok(*k.v) {
			return fmt.Errorf("%s %v: %s", k.key, *k.v, k.accept)
		}
	}
	// Past these every step diverges, found before as a NaN loss blamed
	// on the lr: a momentum of 1 or more never forgets; RMSprop's alpha of
	// 1 never learns the squares it divides by; a decay with lr x decay
	// above 1 shrinks the weights past zero at every step (infinite values
	// are Validate's to name).
	switch {
	case c.Momentum >= 1:
		return fmt.Errorf("momentum %v: must be below 1 (1 or more never forgets a gradient)", c.Momentum)
	case c.Alpha != nil && *c.Alpha >= 1:
		return fmt.Errorf("alpha %v: must be below 1 (1 never learns the squared gradients)", *c.Alpha)
	case !math.IsInf(c.WeightDecay, 0) && !math.IsInf(c.LR, 0) && c.LR*c.WeightDecay > 1:
		return fmt.Errorf("weight_decay %v: must be at most 1/lr = %v (lr x weight_decay above 1 shrinks the weights past zero every step)", c.WeightDecay, 1/c.LR)
	case c.TrustCoefficient != nil && *c.TrustCoefficient > 1 && !math.IsInf(*c.TrustCoefficient, 0):
		return fmt.Errorf("trust_coefficient %v: must be at most 1 (LARS takes 0.001 to 0.02)", *c.TrustCoefficient)
	}
	return nil
}

// checkNesterov is the SGD and LARS constraint on nesterov.
func (c Config) checkNesterov() error {
	if c.Nesterov && (c.Momentum <= 0 || c.Dampening != 0) {
		return fmt.Errorf("optimizer %s: nesterov: needs momentum > 0 and dampening 0 (have momentum %v, dampening %v)", c.Name, c.Momentum, c.Dampening)
	}
	return nil
}
