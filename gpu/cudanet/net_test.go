package cudanet

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"hpctrain/gpu/cuda"
	"hpctrain/model"
)

// tol is the largest relative difference allowed between the device's and
// the CPU's logits, losses and gradients in fp32: per tensor, the largest
// difference over the largest magnitude of the CPU's tensor.
const tol = 1e-4

// relErr is max |a-b| / max |b|: the error of a relative to the size of
// the tensor b (0 when both are zero).
func relErr(a, b []float32) float64 {
	var d, m float64
	for i := range b {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
		m = max(m, math.Abs(float64(b[i])))
	}
	if d == 0 {
		return 0
	}
	if m == 0 || math.IsNaN(d) {
		return math.Inf(1)
	}
	return d / m
}

// hookLog records the offsets a GradHook is told.
type hookLog struct{ offs []int }

func (h *hookLog) Ready(off int) { h.offs = append(h.offs, off) }

// pair is a CPU network and a device network built alike.
type pair struct {
	cpu *model.Net
	gpu *Net
	rng *rand.Rand
	lab []int32
}

func newPair(t *testing.T, desc model.Desc, in model.Shape, batch int, p Precision) *pair {
	t.Helper()
	d := device(t)
	const classes, seed = 10, 7
	cpu, err := model.Build(desc, in, classes, batch, seed)
	if err != nil {
		t.Fatal(err)
	}
	gpu, err := New(d, desc, in, classes, batch, seed, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := gpu.Close(); err != nil {
			t.Error(err)
		}
	})
	if relErr(gpu.Host().Params, cpu.Params) != 0 {
		t.Fatal("host copy's parameters differ from the CPU network's of the same seed")
	}
	return &pair{cpu: cpu, gpu: gpu, rng: rand.New(rand.NewPCG(21, 22)), lab: make([]int32, batch)}
}

// grads copies the device's gradients to the host.
func grads(t *testing.T, n *Net) []float32 {
	t.Helper()
	g := make([]float32, n.Len())
	if err := n.Stream().Sync(); err != nil {
		t.Fatal(err)
	}
	if err := cuda.CopyDtoH(unsafe.Pointer(&g[0]), n.Grads(), 4*len(g), n.Stream()); err != nil {
		t.Fatal(err)
	}
	if err := n.Stream().Sync(); err != nil {
		t.Fatal(err)
	}
	return g
}

// stepResult is what one step of a pair gave on each side.
type stepResult struct {
	lossCPU, lossGPU float64
	okCPU, okGPU     int
	logitErr         float64
}

// step feeds both networks the same random batch of nb samples, runs
// forward, loss and (if backward) backward, compares logits, losses,
// gradients (per tensor), the hooks' offsets, and then applies one plain
// SGD step (lr) on both: the CPU's from its gradients, the device's on its
// host copy from its pulled gradients, pushed back.
func (p *pair) step(t *testing.T, s, nb int, backward bool, lr float32, gtol float64) stepResult {
	t.Helper()
	for i := range p.cpu.Input()[:nb*p.cpu.In.Size()] {
		v := p.rng.Float32()*2 - 1
		p.cpu.Input()[i] = v
		p.gpu.Input()[i] = v
	}
	for i := range p.lab {
		p.lab[i] = int32(p.rng.IntN(p.cpu.Classes))
	}
	p.cpu.SetStep(s, 3*s)
	p.gpu.SetStep(s, 3*s)
	lc := p.cpu.Forward(nb)
	lg := p.gpu.Forward(nb)
	var r stepResult
	r.logitErr = relErr(lg, lc)
	if r.logitErr > gtol {
		t.Errorf("step %d: logits differ by %.3g relative", s, r.logitErr)
	}
	r.lossCPU, r.okCPU = p.cpu.Loss(p.lab)
	r.lossGPU, r.okGPU = p.gpu.Loss(p.lab)
	if e := math.Abs(r.lossGPU-r.lossCPU) / math.Abs(r.lossCPU); e > gtol || math.IsNaN(r.lossGPU) {
		t.Errorf("step %d: loss %v on the device, %v on the CPU", s, r.lossGPU, r.lossCPU)
	}
	if r.okCPU != r.okGPU && gtol <= tol {
		t.Errorf("step %d: %d correct on the device, %d on the CPU", s, r.okGPU, r.okCPU)
	}
	if err := p.gpu.Err(); err != nil {
		t.Fatalf("step %d: %v", s, err)
	}
	if !backward {
		return r
	}
	var hc, hg hookLog
	p.cpu.Backward(&hc)
	p.gpu.Backward(&hg)
	if fmt.Sprint(hc.offs) != fmt.Sprint(hg.offs) {
		t.Errorf("step %d: hook offsets %v on the device, %v on the CPU", s, hg.offs, hc.offs)
	}
	g := grads(t, p.gpu)
	if err := p.gpu.Err(); err != nil {
		t.Fatalf("step %d: %v", s, err)
	}
	worst, name := 0.0, ""
	for _, gr := range p.cpu.Groups() {
		a, b := g[gr.Off:gr.Off+gr.Len], p.cpu.Grads[gr.Off:gr.Off+gr.Len]
		e := relErr(a, b)
		if e > gtol {
			t.Errorf("step %d: gradient %s differs by %.3g relative", s, gr.Name, e)
		}
		if e >= worst {
			worst, name = e, gr.Name
		}
	}
	t.Logf("step %d: loss %.6f (cpu %.6f), logits %.2g, worst gradient %s %.2g", s, r.lossGPU, r.lossCPU, r.logitErr, name, worst)
	for i, v := range p.cpu.Grads {
		p.cpu.Params[i] -= lr * v
	}
	if err := p.gpu.Pull(); err != nil {
		t.Fatal(err)
	}
	h := p.gpu.Host()
	for i, v := range g {
		h.Params[i] -= lr * v
	}
	if err := p.gpu.Push(); err != nil {
		t.Fatal(err)
	}
	return r
}

// checkBuffers compares batch norm's running statistics after Pull.
func (p *pair) checkBuffers(t *testing.T, gtol float64) {
	t.Helper()
	if err := p.gpu.Pull(); err != nil {
		t.Fatal(err)
	}
	for _, gr := range p.cpu.BufferGroups() {
		a, b := p.gpu.Host().Buffers[gr.Off:gr.Off+gr.Len], p.cpu.Buffers[gr.Off:gr.Off+gr.Len]
		if e := relErr(a, b); e > gtol {
			t.Errorf("buffer %s differs by %.3g relative", gr.Name, e)
		}
	}
}

func parse(t *testing.T, name, text string) model.Desc {
	t.Helper()
	d, err := model.ParseDesc(name, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func zoo(t *testing.T, name string) model.Desc {
	t.Helper()
	d, err := model.LoadDesc(name)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestTiny: a two-layer network, three SGD steps, every number matching.
func TestTiny(t *testing.T) {
	d := parse(t, "tiny", `layers = [{kind = "flatten"}, {kind = "linear", out = 16}, {kind = "relu"}, {kind = "linear", out = "classes"}]`)
	p := newPair(t, d, model.Shape{H: 3, W: 3, C: 2}, 4, FP32)
	for s := 0; s < 3; s++ {
		p.step(t, s, 4, true, 0.1, tol)
	}
	// A smaller batch than the largest.
	p.step(t, 3, 3, true, 0.1, tol)
}

// TestZoo runs every built-in network for three SGD steps on small inputs.
func TestZoo(t *testing.T) {
	for _, c := range []struct {
		name string
		in   model.Shape
	}{
		{"mlp", model.Shape{H: 6, W: 6, C: 1}},
		{"cnn", model.Shape{H: 8, W: 8, C: 1}},
		{"lenet5", model.Shape{H: 12, W: 12, C: 1}},
		{"resnet8", model.Shape{H: 8, W: 8, C: 3}},
		{"resnet20", model.Shape{H: 8, W: 8, C: 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := len(model.Zoo()); got != 5 {
				t.Logf("the zoo has %d models; this test runs 5", got)
			}
			p := newPair(t, zoo(t, c.name), c.in, 4, FP32)
			for s := 0; s < 3; s++ {
				p.step(t, s, 4, true, 0.01, tol)
			}
			p.checkBuffers(t, tol)
		})
	}
}

// TestZooCovered makes TestZoo fail when a model is added to the zoo
// without being added there.
func TestZooCovered(t *testing.T) {
	want := "cnn lenet5 mlp resnet20 resnet8"
	if got := strings.Join(model.Zoo(), " "); got != want {
		t.Errorf("zoo is %q; TestZoo runs %q", got, want)
	}
}

// TestEvalAndSmoothing: label smoothing with a gradient scale in training,
// then evaluation (running statistics, no dropout), whose forward, loss and
// backward match and which leaves the buffers alone.
func TestEvalAndSmoothing(t *testing.T) {
	p := newPair(t, zoo(t, "resnet8"), model.Shape{H: 8, W: 8, C: 3}, 4, FP32)
	for _, n := range []model.Replica{p.cpu, p.gpu} {
		n.SetLabelSmoothing(0.1)
		n.SetGradScale(0.5)
	}
	if p.gpu.LabelSmoothing() != 0.1 {
		t.Fatalf("LabelSmoothing %v", p.gpu.LabelSmoothing())
	}
	for s := 0; s < 2; s++ {
		p.step(t, s, 4, true, 0.01, tol)
	}
	p.checkBuffers(t, tol)
	before := append([]float32(nil), p.gpu.Host().Buffers...)
	p.cpu.SetTraining(false)
	p.gpu.SetTraining(false)
	p.step(t, 2, 4, true, 0, tol)
	p.checkBuffers(t, tol)
	if relErr(p.gpu.Host().Buffers, before) != 0 {
		t.Error("evaluation changed the running statistics")
	}
}

// dropoutDesc has dropout at the top level and inside a residual block,
// with a flatten inside a block too (it copies there).
const dropoutDesc = `layers = [
  {kind = "conv", out = 4, kernel = 3, pad = 1},
  {kind = "relu"},
  {kind = "dropout", p = 0.3},
  {kind = "residual", shortcut = "conv", layers = [
    {kind = "conv", out = 6, kernel = 3, stride = 2, pad = 1},
    {kind = "dropout", p = 0.2},
  ]},
  {kind = "maxpool", kernel = 2, stride = 1},
  {kind = "residual", shortcut = "projection", layers = [
    {kind = "flatten"},
    {kind = "linear", out = 8},
    {kind = "dropout"},
  ]},
  {kind = "flatten"},
  {kind = "linear", out = "classes"},
]`

// TestDropout: masks equal the CPU's (the logits and gradients could not
// match otherwise), across steps and with a non-zero first sample; in
// evaluation dropout passes through.
func TestDropout(t *testing.T) {
	d := parse(t, "dropout", dropoutDesc)
	p := newPair(t, d, model.Shape{H: 6, W: 6, C: 2}, 5, FP32)
	for s := 0; s < 3; s++ {
		p.step(t, s, 5, true, 0.05, tol)
	}
	// Two forwards without SetStep draw different masks (the count of
	// forwards tells them apart), on both sides alike.
	var outs [2][]float32
	for k := range outs {
		for _, n := range []model.Replica{p.cpu, p.gpu} {
			x := n.Input()
			for i := range x {
				x[i] = 1
			}
		}
		c := p.cpu.Forward(5)
		outs[k] = append([]float32(nil), p.gpu.Forward(5)...)
		if e := relErr(outs[k], c); e > tol {
			t.Errorf("forward %d after the steps: logits differ by %.3g relative", k, e)
		}
	}
	if relErr(outs[0], outs[1]) == 0 {
		t.Error("two training forwards drew the same dropout mask")
	}
	p.cpu.SetTraining(false)
	p.gpu.SetTraining(false)
	p.step(t, 3, 5, true, 0, tol)
}

// TestDropoutMask compares one dropout layer's output with the CPU's bit
// for bit.
func TestDropoutMask(t *testing.T) {
	d := parse(t, "mask", `layers = [{kind = "flatten"}, {kind = "dropout", p = 0.4}, {kind = "linear", out = "classes", bias = false}]`)
	p := newPair(t, d, model.Shape{H: 5, W: 5, C: 3}, 6, FP32)
	// The dropout's output is the device activation after it (acts[2]:
	// the flatten before it is in place).
	for i := range p.cpu.Input() {
		v := float32(i%7) + 1
		p.cpu.Input()[i] = v
		p.gpu.Input()[i] = v
	}
	p.cpu.SetStep(11, 6)
	p.gpu.SetStep(11, 6)
	p.cpu.Forward(6)
	p.gpu.Forward(6)
	got := make([]float32, 6*75)
	if err := cuda.CopyDtoH(unsafe.Pointer(&got[0]), p.gpu.body.acts[2], 4*len(got), p.gpu.Stream()); err != nil {
		t.Fatal(err)
	}
	if err := p.gpu.Stream().Sync(); err != nil {
		t.Fatal(err)
	}
	want := cpuDropout(p.cpu, 11, 6, 0.4)
	dropped := 0
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("value %d: %v on the device, %v from the CPU's mask", i, got[i], want[i])
		}
		if got[i] == 0 {
			dropped++
		}
	}
	if dropped < 100 || dropped > 260 {
		t.Errorf("%d of %d dropped with p = 0.4", dropped, len(want))
	}
}

// cpuDropout is the output of the CPU network's first dropout layer on
// its input for the first training forward after SetStep(step, first):
// model.Dropout's mask (seed 7, pass 0, layer 0) restated in Go, since the
// CPU network does not export its activations.
func cpuDropout(n *model.Net, step, first int, p float64) []float32 {
	key := mix(mix(mix(mix(7^0x64726f706f7574)+uint64(step))+0) + 0)
	thresh := uint64(math.Round(p * (1 << 32)))
	scale := float32(1 / (1 - p))
	x := n.Input()
	out := make([]float32, 6*75)
	for i := 0; i < 6; i++ {
		base := key + uint64(first+i)*0x9e3779b97f4a7c15
		for j := 0; j < 75; j++ {
			if mix(base+uint64(j))>>32 >= thresh {
				out[i*75+j] = x[i*75+j] * scale
			}
		}
	}
	return out
}

// doubler is a SumReducer standing for two replicas with the same data:
// every sum doubles. It fails from call fail on (0: never).
type doubler struct{ calls, fail int }

func (r *doubler) AllreduceSum64(buf []float64) error {
	r.calls++
	if r.fail > 0 && r.calls >= r.fail {
		return errors.New("reduction failed")
	}
	for i := range buf {
		buf[i] *= 2
	}
	return nil
}

// TestSyncBN: with a reducer, batch norm reduces the same sums as the CPU
// (same number of calls, same results), and a failed reduction is
// reported by Err.
func TestSyncBN(t *testing.T) {
	p := newPair(t, zoo(t, "resnet8"), model.Shape{H: 8, W: 8, C: 3}, 4, FP32)
	rc, rg := &doubler{}, &doubler{}
	p.cpu.SetSyncBN(rc)
	p.gpu.SetSyncBN(rg)
	p.step(t, 0, 4, true, 0.01, tol)
	if rc.calls == 0 || rc.calls != rg.calls {
		t.Errorf("%d reductions on the device, %d on the CPU", rg.calls, rc.calls)
	}
	p.checkBuffers(t, tol)
	rg.fail = rg.calls + 2
	rg2 := rg.calls
	x := p.gpu.Input()
	for i := range x {
		x[i] = 0.5
	}
	p.gpu.Forward(4)
	err := p.gpu.Err()
	if err == nil || err.Error() != "reduction failed" {
		t.Errorf("Err after a failed reduction: %v", err)
	}
	if rg.calls != rg2+2 {
		t.Errorf("%d reductions after the failure; want none after it", rg.calls-rg2-2)
	}
	if err := p.gpu.Err(); err != nil {
		t.Errorf("Err does not clear: %v", err)
	}
}

// TestPrecision: TF32, BF16 and FP16 give losses within 2% of FP32's, and
// not the same bits.
func TestPrecision(t *testing.T) {
	desc := zoo(t, "cnn")
	in := model.Shape{H: 8, W: 8, C: 1}
	losses := map[Precision][3]float64{}
	for _, pr := range []Precision{FP32, TF32, BF16, FP16} {
		p := newPair(t, desc, in, 8, pr)
		var l [3]float64
		for s := range l {
			// Gradients in low precision differ too much from the
			// CPU's to compare per tensor: the losses are the check.
			r := p.step(t, s, 8, true, 0.01, math.Inf(1))
			l[s] = r.lossGPU
			if pr == FP32 && r.logitErr > tol {
				t.Errorf("fp32 logits differ by %.3g", r.logitErr)
			}
		}
		losses[pr] = l
	}
	for _, pr := range []Precision{TF32, BF16, FP16} {
		same := true
		for s, l := range losses[pr] {
			ref := losses[FP32][s]
			if e := math.Abs(l-ref) / ref; e > 0.02 {
				t.Errorf("%v: step %d loss %v, fp32 %v (%.2g%%)", pr, s, l, ref, 100*e)
			}
			same = same && l == ref
		}
		if same {
			t.Errorf("%v: losses %v are fp32's bit for bit", pr, losses[pr])
		}
		t.Logf("%v losses %v (fp32 %v)", pr, losses[pr], losses[FP32])
	}
}

// TestPushPull: Pull gives the host copy the device's values; Push gives
// the device the host copy's.
func TestPushPull(t *testing.T) {
	p := newPair(t, zoo(t, "resnet8"), model.Shape{H: 8, W: 8, C: 3}, 2, FP32)
	h := p.gpu.Host()
	for i := range h.Params {
		h.Params[i] = float32(i%97) * 0.25
	}
	for i := range h.Buffers {
		h.Buffers[i] = float32(i%13) + 0.5
	}
	wantP := append([]float32(nil), h.Params...)
	wantB := append([]float32(nil), h.Buffers...)
	if err := p.gpu.Push(); err != nil {
		t.Fatal(err)
	}
	clear(h.Params)
	clear(h.Buffers)
	if err := p.gpu.Pull(); err != nil {
		t.Fatal(err)
	}
	if relErr(h.Params, wantP) != 0 || relErr(h.Buffers, wantB) != 0 {
		t.Error("Pull after Push does not give the pushed values back")
	}
}

type nopHook struct{ n int }

func (h *nopHook) Ready(off int) { h.n++ }

// TestSteadyStateAllocs: Forward, Loss and Backward allocate nothing after
// the first step, in fp32 and bf16, with dropout and batch norm.
func TestSteadyStateAllocs(t *testing.T) {
	for _, c := range []struct {
		desc model.Desc
		in   model.Shape
		p    Precision
	}{
		{zoo(t, "resnet8"), model.Shape{H: 8, W: 8, C: 3}, FP32},
		{parse(t, "dropout", dropoutDesc), model.Shape{H: 6, W: 6, C: 2}, BF16},
	} {
		p := newPair(t, c.desc, c.in, 4, c.p)
		n := p.gpu
		labels := []int32{1, 2, 3, 4}
		h := &nopHook{}
		n.SetSyncBN(&doubler{})
		run := func() {
			n.Forward(4)
			n.Loss(labels)
			n.Backward(h)
		}
		run()
		if a := testing.AllocsPerRun(5, run); a != 0 {
			t.Errorf("%s %v: %v allocations per step", c.desc.Name, c.p, a)
		}
		if err := n.Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestParsePrecision(t *testing.T) {
	for _, p := range []Precision{FP32, TF32, BF16, FP16} {
		q, err := ParsePrecision(p.String())
		if err != nil || q != p {
			t.Errorf("ParsePrecision(%q) = %v, %v", p.String(), q, err)
		}
	}
	_, err := ParsePrecision("fp8")
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), `"fp8"`) {
		t.Errorf("ParsePrecision(fp8): %v", err)
	}
}

func TestLabel(t *testing.T) {
	d := device(t)
	if got := d.Label(); !strings.HasPrefix(got, "cuda:0 cudaemu") || !strings.HasSuffix(got, ", sm_80") {
		t.Errorf("Label %q", got)
	}
}

// TestFP16Overflow: in FP16 an operand beyond half's range becomes Inf on
// conversion, and the loss shows it; FP32 and BF16 stay finite.
func TestFP16Overflow(t *testing.T) {
	d := parse(t, "tiny", `layers = [{kind = "flatten"}, {kind = "linear", out = 16}, {kind = "relu"}, {kind = "linear", out = "classes"}]`)
	for _, c := range []struct {
		p      Precision
		finite bool
	}{{FP32, true}, {BF16, true}, {FP16, false}} {
		p := newPair(t, d, model.Shape{H: 2, W: 2, C: 2}, 2, c.p)
		h := p.gpu.Host()
		for i := range h.Params {
			h.Params[i] *= 1e5 // weights of 1e4 to 1e5: beyond half's 65504
		}
		if err := p.gpu.Push(); err != nil {
			t.Fatal(err)
		}
		x := p.gpu.Input()
		for i := range x {
			x[i] = 1
		}
		p.gpu.Forward(2)
		loss, _ := p.gpu.Loss([]int32{0, 1})
		if finite := !math.IsInf(loss, 0) && !math.IsNaN(loss); finite != c.finite {
			t.Errorf("%v: loss %v", c.p, loss)
		}
	}
}
