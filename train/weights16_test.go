package train

import (
	"math"
	"math/rand/v2"
	"testing"

	"hpctrain/internal/dnnl"
	"hpctrain/model"
	"hpctrain/mpi"
	"hpctrain/optim"
)

// In bf16, the step whose optimizer writes the network's bf16 weights
// (hookWeights) trains to the same bits as one whose forward converts them,
// for every optimizer; in fp32 there is nothing to hook.
func TestStepHookedWeights(t *testing.T) {
	if !dnnl.Native {
		t.Skip("oneDNN not linked in (purego build): no bf16 kernels")
	}
	if ok, missing := dnnl.HasBF16(); !ok {
		t.Skipf("bf16 kernels not available: %s", missing)
	}
	const batch = 16
	newStep := func(opt string, k model.Kernels, hook bool) (*Step, *model.Net) {
		net, err := model.New("cnn", model.Shape{H: 28, W: 28, C: 1}, 10, batch, 5)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(net.Close)
		if err := net.SetKernels(k); err != nil {
			t.Fatal(err)
		}
		o, err := optim.New(optim.Config{Name: opt, LR: 0.01, Momentum: 0.9}, Groups(net), len(net.Params))
		if err != nil {
			t.Fatal(err)
		}
		sched, err := optim.NewSchedule(optim.ScheduleConfig{Name: "constant"}, 0.01, 10)
		if err != nil {
			t.Fatal(err)
		}
		s := NewStep(net, o, sched, mpi.NewSingle(), 0)
		if !hook && s.hooked {
			o.(optim.BF16Copier).SetBF16Copy(nil)
			s.hooked = false
		}
		return s, net
	}
	if s, _ := newStep("sgd", model.Kernels{DNNL: true}, true); s.hooked {
		t.Error("fp32 kernels: the step hooked the optimizer, want no hook")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	x := make([]float32, batch*28*28)
	y := make([]int32, batch)
	for _, opt := range []string{"sgd", "adam", "lars"} {
		a, na := newStep(opt, model.Kernels{DNNL: true, BF16: true}, false)
		b, nb := newStep(opt, model.Kernels{DNNL: true, BF16: true}, true)
		if !b.hooked {
			t.Fatalf("%s: bf16 kernels, but the step did not hook the optimizer", opt)
		}
		for step := range 4 {
			for i := range x {
				x[i] = rng.Float32()
			}
			for i := range y {
				y[i] = int32(rng.IntN(10))
			}
			a.Load(x, y)
			b.Load(x, y)
			la, err := a.Run(step)
			if err != nil {
				t.Fatal(err)
			}
			lb, err := b.Run(step)
			if err != nil {
				t.Fatal(err)
			}
			if math.Float64bits(la) != math.Float64bits(lb) {
				t.Fatalf("%s step %d: loss %v hooked, %v converting in the forward", opt, step, lb, la)
			}
		}
		for i := range na.Params {
			if math.Float32bits(na.Params[i]) != math.Float32bits(nb.Params[i]) {
				t.Fatalf("%s: after 4 steps param %d is %v hooked, %v converting in the forward", opt, i, nb.Params[i], na.Params[i])
			}
		}
	}
}
