package cudaoptim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"

	"hpctrain/gpu/cuda"
	"hpctrain/gpu/kernels"
	"hpctrain/internal/cudaemu"
	"hpctrain/optim"
)

func TestMain(m *testing.M) { cudaemu.Main(m, "gpu/cudaoptim") }

// device is the emulated device with the optimizer kernels, and buffers.
type device struct {
	t   *testing.T
	ctx *cuda.Context
	s   *cuda.Stream
	k   *cuda.Module
}

func openDevice(t *testing.T) *device {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	ctx, err := cuda.OpenDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	t.Setenv("HPCTRAIN_KERNEL_CACHE", t.TempDir())
	k, err := ctx.CompileModule("optim", kernels.Source("optim.cu"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return &device{t: t, ctx: ctx, s: s, k: k}
}

// bind makes d's context current on t's goroutine, locked to its thread
// (each subtest runs on a goroutine of its own).
func (d *device) bind(t *testing.T) {
	d.t = t
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	if err := d.ctx.Bind(); err != nil {
		t.Fatal(err)
	}
}

// upload returns a device copy of x.
func (d *device) upload(x []float32) cuda.Ptr {
	d.t.Helper()
	p, err := d.ctx.Alloc(4 * len(x))
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { d.ctx.Free(p) })
	d.put(p, x)
	return p
}

func (d *device) put(p cuda.Ptr, x []float32) {
	d.t.Helper()
	if err := copyIn(p, unsafe.Pointer(&x[0]), 4*len(x), d.s); err != nil {
		d.t.Fatal(err)
	}
}

func (d *device) get(p cuda.Ptr, n int) []float32 {
	d.t.Helper()
	x := make([]float32, n)
	if err := copyOut(unsafe.Pointer(&x[0]), p, 4*n, d.s); err != nil {
		d.t.Fatal(err)
	}
	return x
}

// groups are a network's tensors: weights and NoDecay biases, unsorted.
func groups(n int) []optim.Group {
	return []optim.Group{
		{Name: "fc.weight", Off: 300, Len: 200},
		{Name: "conv1.weight", Off: 0, Len: 250},
		{Name: "conv1.bias", Off: 250, Len: 50, NoDecay: true},
		{Name: "fc.bias", Off: 500, Len: n - 500, NoDecay: true},
	}
}

func random(r *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * scale)
	}
	return x
}

type tcase struct {
	name string
	cfg  optim.Config
	dev  bool // runs as kernels
}

func cases() []tcase {
	return []tcase{
		{"sgd", optim.Config{Name: "sgd", LR: 0.1}, true},
		{"sgd-momentum", optim.Config{Name: "sgd", LR: 0.1, Momentum: 0.9, Dampening: 0.1}, true},
		{"sgd-nesterov", optim.Config{Name: "sgd", LR: 0.1, Momentum: 0.9, Nesterov: true}, true},
		{"sgd-wd", optim.Config{Name: "sgd", LR: 0.1, Momentum: 0.9, WeightDecay: 1e-2}, true},
		{"sgd-wd-plain", optim.Config{Name: "sgd", LR: 0.1, WeightDecay: 5e-2}, true},
		{"adam", optim.Config{Name: "adam", LR: 1e-2, WeightDecay: 1e-2}, true},
		{"adamw-amsgrad", optim.Config{Name: "adamw", LR: 1e-2, WeightDecay: 0.1, AMSGrad: true}, true},
		{"lamb", optim.Config{Name: "lamb", LR: 1e-2, WeightDecay: 1e-2}, false},
	}
}

const n = 777

// relErr is max|a-b| / max|b|.
func relErr(a, b []float32) float64 {
	var d, s float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
		s = math.Max(s, math.Abs(float64(b[i])))
	}
	if s == 0 {
		return d
	}
	return d / s
}

// same fails t unless a and b have the same values within 1e-6 relative,
// and the same bits: the kernels do the CPU's operations in its order, and
// the emulator's host compiler fuses no multiply-add (neither does the
// backend's NVRTC, with the OPT_* operations).
func same(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	if e := relErr(got, want); e > 1e-6 || math.IsNaN(e) {
		t.Fatalf("%s: relative error %g > 1e-6", what, e)
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v, the CPU's %v (within 1e-6, but not the same bits)", what, i, got[i], want[i])
		}
	}
}

func sameState(t *testing.T, what string, got, want [][]float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d buffers, the CPU's State has %d", what, len(got), len(want))
	}
	for i := range want {
		same(t, fmt.Sprintf("%s[%d]", what, i), got[i], want[i])
	}
}

// TestMatchesCPU: 5 steps of every optimizer on the device give the CPU
// optimizer's parameters and State (layout and values).
func TestMatchesCPU(t *testing.T) {
	d := openDevice(t)
	for _, c := range cases() {
		t.Run(c.name, func(t *testing.T) {
			d.bind(t)
			r := rand.New(rand.NewPCG(1, 2))
			p0 := random(r, n, 1)
			cpu, err := optim.New(c.cfg, groups(n), n)
			if err != nil {
				t.Fatal(err)
			}
			params, grads := d.upload(p0), d.upload(make([]float32, n))
			o, err := New(d.ctx, d.s, d.k, c.cfg, groups(n), params, grads, n)
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			if o.OnDevice() != c.dev || o.Name() != c.cfg.Name {
				t.Fatalf("OnDevice %v, Name %q: want %v, %q", o.OnDevice(), o.Name(), c.dev, c.cfg.Name)
			}
			if st, err := o.State(); err != nil || st != nil {
				t.Fatalf("State before the first Step: %v, %v; want nil", st, err)
			}
			hp := append([]float32(nil), p0...)
			for step := 0; step < 5; step++ {
				g := random(r, n, 0.5)
				lr := c.cfg.LR * (1 - 0.1*float64(step))
				d.put(grads, g)
				if err := o.Step(lr); err != nil {
					t.Fatal(err)
				}
				cpu.Step(hp, g, lr)
			}
			same(t, "params", d.get(params, n), hp)
			if e := relErr(hp, p0); e < 1e-4 {
				t.Fatalf("the parameters hardly moved (%g): the test proves nothing", e)
			}
			st, err := o.State()
			if err != nil {
				t.Fatal(err)
			}
			sameState(t, "State", st, cpu.State())
			if st[0][0] != 5 || st[0][1] != 0 {
				t.Errorf("step counter %v, want [5 0]", st[0])
			}
		})
	}
}

// TestRestore: a checkpoint of the CPU optimizer resumes on the device and
// one of the device resumes on the CPU, the same steps following; Restore
// of a state of the wrong shape fails and changes nothing.
func TestRestore(t *testing.T) {
	d := openDevice(t)
	for _, c := range cases() {
		t.Run(c.name, func(t *testing.T) {
			d.bind(t)
			r := rand.New(rand.NewPCG(3, 4))
			p := random(r, n, 1)
			gs := make([][]float32, 6)
			for i := range gs {
				gs[i] = random(r, n, 0.5)
			}
			// The CPU takes 3 steps; its checkpoint goes to the device.
			cpu, _ := optim.New(c.cfg, groups(n), n)
			for i := 0; i < 3; i++ {
				cpu.Step(p, gs[i], c.cfg.LR)
			}
			params, grads := d.upload(p), d.upload(make([]float32, n))
			o, err := New(d.ctx, d.s, d.k, c.cfg, groups(n), params, grads, n)
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			// A state at step 0 is a state (State is not nil after it).
			zero := make([][]float32, len(cpu.State()))
			for i, b := range cpu.State() {
				zero[i] = make([]float32, len(b))
			}
			if err := o.Restore(zero); err != nil {
				t.Fatal(err)
			}
			st, err := o.State()
			if err != nil {
				t.Fatal(err)
			}
			sameState(t, "State after Restore of step 0", st, zero)
			if err := o.Restore(cpu.State()); err != nil {
				t.Fatal(err)
			}
			st, err = o.State()
			if err != nil {
				t.Fatal(err)
			}
			sameState(t, "State after Restore", st, cpu.State())
			// Both take step 4; the device's state goes to a fresh CPU
			// optimizer, and all three take steps 5 and 6.
			d.put(grads, gs[3])
			if err := o.Step(c.cfg.LR); err != nil {
				t.Fatal(err)
			}
			cpu.Step(p, gs[3], c.cfg.LR)
			st, err = o.State()
			if err != nil {
				t.Fatal(err)
			}
			cpu2, _ := optim.New(c.cfg, groups(n), n)
			if err := cpu2.Restore(st); err != nil {
				t.Fatal(err)
			}
			p2 := d.get(params, n)
			for i := 4; i < 6; i++ {
				d.put(grads, gs[i])
				if err := o.Step(c.cfg.LR); err != nil {
					t.Fatal(err)
				}
				cpu.Step(p, gs[i], c.cfg.LR)
				cpu2.Step(p2, gs[i], c.cfg.LR)
			}
			got := d.get(params, n)
			same(t, "device params", got, p)
			same(t, "params of the CPU resumed from the device", p2, p)

			// Wrong shapes: refused, nothing changed.
			before, _ := o.State()
			bad := [][][]float32{nil, before[:len(before)-1], append(before[:len(before):len(before)], make([]float32, n))}
			short := make([][]float32, len(before))
			copy(short, before)
			short[len(short)-1] = make([]float32, n-1)
			bad = append(bad, short)
			for i, b := range bad {
				if err := o.Restore(b); err == nil {
					t.Errorf("bad state %d accepted", i)
				}
			}
			after, _ := o.State()
			sameState(t, "State after refused Restores", after, before)
		})
	}
}

// TestStepAllocs: a device Step allocates nothing on the Go heap.
func TestStepAllocs(t *testing.T) {
	d := openDevice(t)
	for _, c := range cases() {
		if !c.dev {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			d.bind(t)
			r := rand.New(rand.NewPCG(5, 6))
			params, grads := d.upload(random(r, n, 1)), d.upload(random(r, n, 0.1))
			o, err := New(d.ctx, d.s, d.k, c.cfg, groups(n), params, grads, n)
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			if err := o.Step(1e-3); err != nil {
				t.Fatal(err)
			}
			if a := testing.AllocsPerRun(20, func() { o.Step(1e-3) }); a != 0 {
				t.Errorf("%v allocations per Step", a)
			}
		})
	}
}

// TestBadConfig: optim.New's errors, before anything is allocated.
func TestBadConfig(t *testing.T) {
	d := openDevice(t)
	for _, c := range []optim.Config{
		{Name: "sgdd"},
		{Name: "sgd", Nesterov: true},
		{Name: "adam", Beta1: new(1.5)},
	} {
		if _, err := New(d.ctx, d.s, d.k, c, nil, 0, 0, 10); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if _, err := New(d.ctx, d.s, d.k, optim.Config{Name: "sgd"}, []optim.Group{{Name: "a", Len: 5}}, 0, 0, 10); err == nil {
		t.Error("groups not tiling [0, n) accepted")
	}
}
