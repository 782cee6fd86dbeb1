package optim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"hpctrain/internal/kernels"
)

// goldenCase is one case of testdata/golden_<name>.json (gen_golden.py).
type goldenCase struct {
	Optimizer string         `json:"optimizer"`
	Case      string         `json:"case"`
	Config    map[string]any `json:"config"`
	Groups    []struct {
		Name    string `json:"name"`
		Off     int    `json:"off"`
		Len     int    `json:"len"`
		NoDecay bool   `json:"no_decay"`
	} `json:"groups"`
	Params0 []float64   `json:"params0"`
	Grads   [][]float64 `json:"grads"`
	LRs     []float64   `json:"lrs"`
	Params  [][]float64 `json:"params"` // after each step; nil for hand-only cases
}

func (gc goldenCase) groups() []Group {
	var gs []Group
	for _, g := range gc.Groups {
		gs = append(gs, Group{Name: g.Name, Off: g.Off, Len: g.Len, NoDecay: g.NoDecay})
	}
	return gs
}

// config maps the case's toml-named keys onto Config and onto the
// reference's hyper (which starts from the restated defaults).
func (gc goldenCase) config(t *testing.T) (Config, hyper) {
	t.Helper()
	c := Config{Name: gc.Optimizer}
	h := refDefaults(gc.Optimizer)
	for k, v := range gc.Config {
		f, _ := v.(float64)
		b, _ := v.(bool)
		switch k {
		case "weight_decay":
			c.WeightDecay, h.wd = f, f
		case "momentum":
			c.Momentum, h.momentum = f, f
		case "dampening":
			c.Dampening, h.dampening = f, f
		case "nesterov":
			c.Nesterov, h.nesterov = b, b
		case "amsgrad":
			c.AMSGrad, h.amsgrad = b, b
		case "centered":
			c.Centered, h.centered = b, b
		case "lr_decay":
			c.LRDecay, h.lrDecay = f, f
		case "initial_accumulator_value":
			c.InitialAccumulatorValue, h.initAcc = f, f
		case "beta1":
			c.Beta1, h.beta1 = new(f), f
		case "beta2":
			c.Beta2, h.beta2 = new(f), f
		case "eps":
			c.Eps, h.eps = new(f), f
		case "rho":
			c.Rho, h.rho = new(f), f
		case "alpha":
			c.Alpha, h.alpha = new(f), f
		case "momentum_decay":
			c.MomentumDecay, h.momentumDecay = new(f), f
		case "trust_coefficient":
			c.TrustCoefficient, h.eta = new(f), f
		default:
			t.Fatalf("case %s/%s: unknown config key %q", gc.Optimizer, gc.Case, k)
		}
	}
	return c, h
}

func loadGolden(t *testing.T) []goldenCase {
	t.Helper()
	files, err := filepath.Glob("testdata/golden_*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files (%v); HINT: /usr/bin/python3 testdata/gen_golden.py", err)
	}
	var all []goldenCase
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cs []goldenCase
		if err := json.Unmarshal(b, &cs); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		all = append(all, cs...)
	}
	return all
}

var (
	twoGroups = []map[string]any{
		{"name": "w", "off": 0, "len": 2, "no_decay": false},
		{"name": "b", "off": 2, "len": 1, "no_decay": true},
	}
	p0     = []float64{1, -2, 0.5}
	grads3 = [][]float64{{0.5, -1, 0.25}, {-0.3, 0.8, 0.1}, {0.2, 0.4, -0.6}}
)

// handCases are the cases without a torch golden: LARS and LAMB.
func handCases() []goldenCase {
	mk := func(name, label string, cfg map[string]any, lrs []float64) goldenCase {
		gc := goldenCase{Optimizer: name, Case: label, Config: cfg, Params0: p0, Grads: grads3, LRs: lrs}
		b, _ := json.Marshal(twoGroups)
		json.Unmarshal(b, &gc.Groups)
		return gc
	}
	return []goldenCase{
		mk("lars", "momentum", map[string]any{"momentum": 0.9, "weight_decay": 0.1, "trust_coefficient": 0.02}, []float64{1, 0.5, 0.2}),
		mk("lars", "nesterov", map[string]any{"momentum": 0.9, "nesterov": true, "weight_decay": 0.1}, []float64{10, 5, 2}),
		mk("lars", "plain", map[string]any{}, []float64{10, 5, 2}),
		mk("lamb", "default", map[string]any{}, []float64{0.1, 0.05, 0.02}),
		mk("lamb", "decay", map[string]any{"weight_decay": 0.1, "beta1": 0.8, "eps": 1e-4}, []float64{0.1, 0.05, 0.02}),
	}
}

// near reports whether got is within 1e-6 relative of want (with a tiny
// absolute floor for values at zero).
func near(got, want float64) bool {
	return math.Abs(got-want) <= 1e-6*math.Abs(want)+1e-12
}

// runCase runs the implementation and the reference for three steps and
// compares both with each other and, when present, with torch's values.
func runCase(t *testing.T, gc goldenCase) {
	c, h := gc.config(t)
	gs := gc.groups()
	n := len(gc.Params0)
	o, err := New(c, gs, n)
	if err != nil {
		t.Fatal(err)
	}
	ref := newRef(gc.Optimizer, h, gs, n)
	p := make([]float32, n)
	pr := append([]float64(nil), gc.Params0...)
	for i, v := range gc.Params0 {
		p[i] = float32(v)
	}
	g := make([]float32, n)
	for s := range gc.Grads {
		for i, v := range gc.Grads[s] {
			g[i] = float32(v)
		}
		o.Step(p, g, gc.LRs[s])
		ref.step(pr, gc.Grads[s], gc.LRs[s])
		for i := range p {
			if !near(float64(p[i]), pr[i]) {
				t.Errorf("step %d param %d: optim %.9g, hand formula %.9g", s+1, i, p[i], pr[i])
			}
			if gc.Params != nil && !near(float64(p[i]), gc.Params[s][i]) {
				t.Errorf("step %d param %d: optim %.9g, torch %.9g", s+1, i, p[i], gc.Params[s][i])
			}
			if gc.Params != nil && !near(pr[i], gc.Params[s][i]) {
				t.Errorf("step %d param %d: hand formula %.9g, torch %.9g", s+1, i, pr[i], gc.Params[s][i])
			}
		}
		if p[0] == float32(gc.Params0[0]) {
			t.Errorf("step %d: param 0 did not move", s+1)
		}
	}
}

func TestAgainstTorchAndHandFormulas(t *testing.T) {
	cases := append(loadGolden(t), handCases()...)
	seen := map[string]bool{}
	for _, gc := range cases {
		seen[gc.Optimizer] = true
		t.Run(gc.Optimizer+"/"+gc.Case, func(t *testing.T) { runCase(t, gc) })
	}
	for _, name := range Names() {
		if !seen[name] {
			t.Errorf("optimizer %s has no test case", name)
		}
	}
}

// fullConfigs exercise every state buffer of every optimizer.
func fullConfigs() []Config {
	var cs []Config
	for _, name := range Names() {
		c := Config{Name: name, WeightDecay: 1e-4}
		switch name {
		case "sgd", "lars":
			c.Momentum, c.Nesterov = 0.9, true
		case "rmsprop":
			c.Momentum, c.Centered = 0.9, true
		case "adam", "adamw":
			c.AMSGrad = true
		}
		cs = append(cs, c)
	}
	return cs
}

// TestStateLen: every optimizer says before its first Step how many
// values State holds after it, with every state buffer in use and with
// the fewest (PyTorch's defaults).
func TestStateLen(t *testing.T) {
	var cs []Config
	for _, name := range Names() {
		cs = append(cs, Config{Name: name})
	}
	for _, c := range append(cs, fullConfigs()...) {
		p, g, gs := testBuffers(37)
		o, err := New(c, gs, len(p))
		if err != nil {
			t.Fatal(err)
		}
		s, ok := o.(StateSizer)
		if !ok {
			t.Fatalf("%s is not a StateSizer", c.Name)
		}
		before := s.StateLen()
		o.Step(p, g, 0.01)
		n := 0
		for _, b := range o.State() {
			n += len(b)
		}
		if before != n {
			t.Errorf("%+v: StateLen %d before the first step, State holds %d after it", c, before, n)
		}
	}
}

func testBuffers(n int) (p, g []float32, gs []Group) {
	r := rand.New(rand.NewPCG(1, 2))
	p, g = make([]float32, n), make([]float32, n)
	for i := range p {
		p[i], g[i] = r.Float32()-0.5, r.Float32()-0.5
	}
	w := n * 3 / 4
	gs = []Group{{Name: "w", Off: 0, Len: w}, {Name: "empty", Off: w, Len: 0}, {Name: "b", Off: w, Len: n - w, NoDecay: true}}
	return p, g, gs
}

// pool is a test Parallel: persistent goroutines fed over channels, so Run
// allocates nothing.
type pool struct {
	jobs chan job
	wg   sync.WaitGroup
	n    int
}

type job struct {
	t         Task
	w, lo, hi int
}

func newPool(n int) *pool {
	p := &pool{jobs: make(chan job, n), n: n}
	for range n {
		go func() {
			for j := range p.jobs {
				j.t.Run(j.w, j.lo, j.hi)
				p.wg.Done()
			}
		}()
	}
	return p
}

func (p *pool) Workers() int { return p.n }

func (p *pool) Run(n int, t Task) {
	p.wg.Add(p.n)
	for w := range p.n {
		p.jobs <- job{t, w, n * w / p.n, n * (w + 1) / p.n}
	}
	p.wg.Wait()
}

func (p *pool) close() { close(p.jobs) }

func TestStepAllocatesNothing(t *testing.T) {
	par := newPool(3)
	defer par.close()
	for _, c := range fullConfigs() {
		for _, pp := range []Parallel{nil, par} {
			n := 100
			if pp != nil {
				n = parallelMin + 5
			}
			p, g, gs := testBuffers(n)
			o, err := New(c, gs, n)
			if err != nil {
				t.Fatal(err)
			}
			o.SetParallel(pp)
			o.Step(p, g, 1e-3) // allocates the state
			if a := testing.AllocsPerRun(20, func() { o.Step(p, g, 1e-3) }); a != 0 {
				t.Errorf("%s (parallel %v): %v allocations per Step, want 0", c.Name, pp != nil, a)
			}
		}
	}
}

func TestParallelMatchesSerial(t *testing.T) {
	par := newPool(4)
	defer par.close()
	n := 3*parallelMin + 7
	for _, c := range fullConfigs() {
		p1, g, gs := testBuffers(n)
		p2 := append([]float32(nil), p1...)
		o1, _ := New(c, gs, n)
		o2, _ := New(c, gs, n)
		o2.SetParallel(par)
		for range 3 {
			o1.Step(p1, g, 1e-2)
			o2.Step(p2, g, 1e-2)
		}
		for i := range p1 {
			// LARS/LAMB sum norms in a different order: allow rounding.
			if !near(float64(p2[i]), float64(p1[i])) {
				t.Errorf("%s: param %d parallel %v, serial %v", c.Name, i, p2[i], p1[i])
				break
			}
		}
	}
}

func TestRestoreBeforeFirstStep(t *testing.T) {
	for _, c := range fullConfigs() {
		n := 50
		p1, g, gs := testBuffers(n)
		a, _ := New(c, gs, n)
		if a.State() != nil {
			t.Errorf("%s: State before the first Step = %v, want nil", c.Name, a.State())
		}
		for range 3 {
			a.Step(p1, g, 1e-2)
		}
		var saved [][]float32
		for _, s := range a.State() {
			saved = append(saved, append([]float32(nil), s...))
		}
		if st := a.State()[0]; st[0] != 3 || st[1] != 0 {
			t.Errorf("%s: step counter %v, want [3 0]", c.Name, st)
		}
		b, _ := New(c, gs, n)
		if err := b.Restore(saved); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		p2 := append([]float32(nil), p1...)
		for range 2 {
			a.Step(p1, g, 1e-2)
			b.Step(p2, g, 1e-2)
		}
		for i := range p1 {
			if p1[i] != p2[i] {
				t.Errorf("%s: param %d after restore %v, uninterrupted %v", c.Name, i, p2[i], p1[i])
				break
			}
		}
		if err := b.Restore(saved[:len(saved)-1]); err == nil {
			t.Errorf("%s: Restore with a missing buffer succeeded", c.Name)
		}
		short := append([][]float32(nil), saved...)
		short[len(short)-1] = short[len(short)-1][1:]
		if err := b.Restore(short); err == nil || !strings.Contains(err.Error(), "want") {
			t.Errorf("%s: Restore with a short buffer: %v", c.Name, err)
		}
	}
}

func TestStepCounterBeyondFloat32Integers(t *testing.T) {
	o, _ := New(Config{Name: "adam"}, nil, 1)
	t0 := 1<<24 + 5
	if err := o.Restore([][]float32{{float32(t0 & (1<<24 - 1)), float32(t0 >> 24)}, {0}, {0}}); err != nil {
		t.Fatal(err)
	}
	o.Step([]float32{1}, []float32{1}, 1e-3)
	if got := o.(*Adam).steps(); got != t0+1 {
		t.Errorf("steps = %d, want %d", got, t0+1)
	}
}

func TestConvergesOnQuadratic(t *testing.T) {
	const steps, threshold = 500, 1e-3
	paths, err := Trajectories(nil, steps)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, p := range paths {
		seen[TrajectoryRuns[i].Config.Name] = true
		j0, j := p.J[0], p.J[steps]
		if !(j < threshold) || !(j < j0) {
			t.Errorf("%s: J went %.4g -> %.4g in %d steps, want below %g", p.Name, j0, j, steps, threshold)
		}
		if len(p.X) != steps+1 || p.X[0] != 1 || p.Y[0] != 1 {
			t.Errorf("%s: path of %d points starting (%v, %v)", p.Name, len(p.X), p.X[0], p.Y[0])
		}
	}
	for _, name := range Names() {
		if !seen[name] {
			t.Errorf("optimizer %s has no trajectory run", name)
		}
	}
	var buf bytes.Buffer
	if err := WriteTrajectoriesCSV(&buf, paths[:2]); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if lines[0] != "optimizer,step,x,y,J" || len(lines) != 1+2*(steps+1) || !strings.HasPrefix(lines[1], "sgd,0,1,1,101") {
		t.Errorf("csv: %d lines, header %q, first row %q", len(lines), lines[0], lines[1])
	}
	if _, err := Trajectories([]string{"bogus"}, 10); err == nil || !strings.Contains(err.Error(), "momentum") {
		t.Errorf("unknown run: %v", err)
	}
}

func TestWithDefaults(t *testing.T) {
	c := Config{Name: "adamw"}.WithDefaults()
	if c.LR != 1e-3 || c.WeightDecay != 1e-2 || *c.Beta1 != 0.9 || *c.Beta2 != 0.999 || *c.Eps != 1e-8 || c.Rho != nil {
		t.Errorf("adamw defaults: %+v", c)
	}
	c = Config{Name: "adam", Beta1: new(0.0), WeightDecay: 0}.WithDefaults()
	if *c.Beta1 != 0 || c.WeightDecay != 0 {
		t.Errorf("explicit beta1 0 lost: %v", *c.Beta1)
	}
	for name, want := range map[string][2]float64{"adagrad": {1e-2, 1e-10}, "adadelta": {1, 1e-6}, "rmsprop": {1e-2, 1e-8}, "adamax": {2e-3, 1e-8}, "nadam": {2e-3, 1e-8}} {
		c := Config{Name: name}.WithDefaults()
		if c.LR != want[0] || *c.Eps != want[1] {
			t.Errorf("%s: lr %v eps %v, want %v", name, c.LR, *c.Eps, want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{Name: "adamm"}, "known: [adadelta adagrad adam adamax adamw lamb lars nadam rmsprop sgd]"},
		{Config{Name: "sgd", LR: -1}, "lr -1: must be >= 0"},
		{Config{Name: "adam", Beta1: new(1.0)}, "beta1 1: must be in [0, 1)"},
		{Config{Name: "adam", Beta2: new(-0.1)}, "beta2 -0.1: must be in [0, 1)"},
		{Config{Name: "sgd", Momentum: -0.9}, "momentum -0.9: must be >= 0"},
		{Config{Name: "sgd", Momentum: 1e10}, "momentum 1e+10: must be below 1"},
		{Config{Name: "sgd", LR: 0.01, WeightDecay: 1e300}, "weight_decay 1e+300: must be at most 1/lr = 100"},
		{Config{Name: "rmsprop", Alpha: new(1.0)}, "alpha 1: must be below 1"},
		{Config{Name: "lars", TrustCoefficient: new(1e300)}, "trust_coefficient 1e+300: must be at most 1"},
		{Config{Name: "adam", Eps: new(0.0)}, "eps 0: must be > 0"},
		{Config{Name: "adam", Eps: new(math.NaN())}, "eps NaN"},
		{Config{Name: "adadelta", Rho: new(1.5)}, "rho 1.5: must be in [0, 1]"},
		{Config{Name: "rmsprop", Alpha: new(-1.0)}, "alpha -1"},
		{Config{Name: "sgd", WeightDecay: -1}, "weight_decay -1"},
		{Config{Name: "sgd", Dampening: 2}, "dampening 2"},
		{Config{Name: "adagrad", LRDecay: -1}, "lr_decay -1"},
		{Config{Name: "lars", TrustCoefficient: new(0.0)}, "trust_coefficient 0"},
		{Config{Name: "nadam", MomentumDecay: new(-1.0)}, "momentum_decay -1"},
		{Config{Name: "sgd", Nesterov: true}, "nesterov: needs momentum > 0"},
	} {
		_, err := New(tc.c, nil, 3)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want it to contain %q", tc.c, err, tc.want)
		}
	}
	for _, gs := range [][]Group{
		{{Name: "a", Off: 0, Len: 2}},
		{{Name: "a", Off: 0, Len: 2}, {Name: "b", Off: 1, Len: 2}},
		{{Name: "a", Off: 1, Len: 2}},
		{{Name: "a", Off: 0, Len: 4}},
	} {
		if _, err := New(Config{Name: "sgd"}, gs, 3); err == nil || !strings.Contains(err.Error(), "tile") {
			t.Errorf("groups %v: error %v, want a tiling error", gs, err)
		}
	}
	if _, err := New(Config{Name: "sgd"}, []Group{{Name: "b", Off: 2, Len: 1}, {Name: "a", Off: 0, Len: 2}}, 3); err != nil {
		t.Errorf("unsorted tiling groups rejected: %v", err)
	}
}

func TestStepMisusePanics(t *testing.T) {
	o, _ := New(Config{Name: "adam"}, nil, 3)
	defer func() {
		if r := recover(); r == nil || !strings.HasPrefix(fmt.Sprint(r), "optim: ") {
			t.Errorf("panic %v, want an optim: message", r)
		}
	}()
	o.Step(make([]float32, 2), make([]float32, 2), 1e-3)
}

// Every optimizer is a BF16Copier: after each Step, serial and across
// workers, the copy holds every parameter's new value rounded to bf16; the
// update is the same bits as without the copy, and a Step with it still
// allocates nothing. Several workers' ranges and SGD's blocks of 256 are
// crossed (n is not a multiple of either).
func TestBF16Copy(t *testing.T) {
	par := newPool(3)
	defer par.close()
	n := 3*parallelMin + 7
	for _, c := range fullConfigs() {
		for _, pp := range []Parallel{nil, par} {
			p, g, gs := testBuffers(n)
			ref := append([]float32(nil), p...)
			o, err := New(c, gs, n)
			if err != nil {
				t.Fatal(err)
			}
			o2, _ := New(c, gs, n)
			o.SetParallel(pp)
			o2.SetParallel(pp)
			bc, ok := o.(BF16Copier)
			if !ok {
				t.Fatalf("%s is not a BF16Copier", c.Name)
			}
			h := make([]uint16, n)
			want := make([]uint16, n)
			bc.SetBF16Copy(h)
			for step := 1; step <= 3; step++ {
				clear(h)
				o.Step(p, g, 1e-2)
				o2.Step(ref, g, 1e-2)
				kernels.GoToBF16(want, p)
				for i := range p {
					if math.Float32bits(p[i]) != math.Float32bits(ref[i]) {
						t.Fatalf("%s (parallel %v) step %d: param %d is %v with the copy, %v without", c.Name, pp != nil, step, i, p[i], ref[i])
					}
					if h[i] != want[i] {
						t.Fatalf("%s (parallel %v) step %d: copy[%d] = %#x, want %#x (param %v)", c.Name, pp != nil, step, i, h[i], want[i], p[i])
					}
				}
			}
			if a := testing.AllocsPerRun(5, func() { o.Step(p, g, 1e-3) }); a != 0 {
				t.Errorf("%s (parallel %v): %v allocations per Step with the copy, want 0", c.Name, pp != nil, a)
			}
			bc.SetBF16Copy(nil)
			clear(h)
			o.Step(p, g, 1e-3)
			for i := range h {
				if h[i] != 0 {
					t.Fatalf("%s: the copy was written after SetBF16Copy(nil)", c.Name)
				}
			}
		}
	}
}
