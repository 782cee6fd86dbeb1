package model

import (
	"fmt"

	"gonum.org/v1/gonum/blas"

	"hpctrain/internal/dnnl"
	"hpctrain/internal/kernels"
)

// Kernels is how a Net's convolutions and linear layers compute on the
// CPU.
type Kernels struct {
	// DNNL selects oneDNN's convolutions and its matmuls for the linear
	// layers, run on each worker's own thread; false selects
	// im2col and the installed BLAS (OpenBLAS), the reference path.
	DNNL bool
	// BF16 rounds the operands of convolutions and linear layers to
	// bfloat16, accumulating in float32 (DNNL only). Parameters,
	// gradients, activations between layers and every other layer stay
	// float32.
	BF16 bool
	// Direct keeps the convolutions direct (oneDNN's). Without it, a
	// 3x3, stride-1 convolution with 32 or more input channels, input and
	// output channels in 16s, runs Winograd: in float32 oneDNN's F(4x4,
	// 3x3) where oneDNN has it (AVX-512 CPUs), elsewhere hpctrain's F(2x2,
	// 3x3) (kernels.Wino); in bf16 hpctrain's F(2x2, 3x3) on AVX512-BF16
	// (kernels.Wino16; oneDNN 2.6 has no bf16 Winograd). Fewer
	// multiplications, rounded differently (see dnnl.NewConvWinograd and
	// kernels.Wino16).
	Direct bool
	// OwnWinograd runs the layers that take Winograd on hpctrain's own
	// F(2x2, 3x3) (kernels.Wino) even where oneDNN has its F(4x4, 3x3):
	// for comparing the two on one machine, and for testing ours on a CPU
	// where oneDNN's would be chosen. Where oneDNN has none (CPUs without
	// AVX-512) those layers run ours without it.
	OwnWinograd bool
	// AllDNNL runs every convolution on oneDNN's direct primitives: no
	// Winograd, and none of hpctrain's own direct kernels for layers of
	// few input channels (nor their bf16 forms). It is what bf16 gets
	// where oneDNN computes on AMX-BF16's tile unit (OnThisCPU):
	// hpctrain's own bf16 kernels are built on AVX512-BF16's dot products,
	// several times slower than the tile unit by Intel's figures, so they
	// would hold back the layers that oneDNN runs on it.
	AllDNNL bool
}

// String names k as the command line does: "blas", "dnnl", "dnnl direct",
// "dnnl wino-f2", "dnnl all", "dnnl bf16", "dnnl bf16 direct" or "dnnl
// bf16 all".
func (k Kernels) String() string {
	switch {
	case !k.DNNL:
		return "blas"
	case k.BF16 && k.AllDNNL:
		return "dnnl bf16 all"
	case k.AllDNNL:
		return "dnnl all"
	case k.BF16 && k.Direct:
		return "dnnl bf16 direct"
	case k.BF16:
		return "dnnl bf16"
	case k.Direct:
		return "dnnl direct"
	case k.OwnWinograd:
		return "dnnl wino-f2"
	}
	return "dnnl"
}

// OnThisCPU returns k as this CPU should run it. With BF16 on oneDNN where
// oneDNN computes on AMX-BF16's tile unit (dnnl.AMX), that is every
// convolution on oneDNN (AllDNNL): hpctrain's own bf16 kernels use
// AVX512-BF16 only. DNNL_MAX_CPU_ISA=AVX512_CORE_BF16 keeps them on such a
// CPU (oneDNN then runs without AMX too), to compare the two.
func (k Kernels) OnThisCPU() Kernels {
	if k.DNNL && k.BF16 && cpuAMX() {
		k.AllDNNL = true
	}
	return k
}

// cpuAMX is dnnl.AMX; a variable, so that tests can play a CPU with AMX.
var cpuAMX = dnnl.AMX

// winograd reports whether the layer's convolution runs Winograd with
// kernels k, where oneDNN has it. Not with 16 input channels: there
// oneDNN's Winograd weight gradient is slower than its direct one (0.19
// against 0.14 ms per 4-sample chunk of resnet20's first stage,
// ONEDNN_VERBOSE) and its forward gains 10%, a loss overall.
func (k Kernels) winograd(l *Conv2D) bool {
	g := l.win
	return k.DNNL && !k.Direct && !k.AllDNNL && g.K == 3 && g.S == 1 && g.C >= 32 && g.C%16 == 0 && l.out.C%16 == 0
}

// typ is oneDNN's operand type for k.
func (k Kernels) typ() dnnl.Type {
	if k.BF16 {
		return dnnl.BF16
	}
	return dnnl.F32
}

// DefaultKernels is what a Net uses until SetKernels: oneDNN in float32
// where it is linked in, else the BLAS.
func DefaultKernels() Kernels { return Kernels{DNNL: dnnl.Native} }

// SetKernels chooses the kernels of the convolutions and linear layers. It
// is an error to ask for oneDNN where it is not linked in, or for bfloat16
// without oneDNN or on a CPU without bfloat16 dot products (AVX512-BF16
// or AMX-BF16): the error says which. Call it before Forward, after
// SetParallel. For a given choice the results do not depend on the number
// of workers; different choices round differently.
func (n *Net) SetKernels(k Kernels) error {
	if k.DNNL && !dnnl.Native {
		return fmt.Errorf("model: oneDNN kernels asked for, but this binary was built without oneDNN (cgo)")
	}
	if k.BF16 && !k.DNNL {
		return fmt.Errorf("model: bf16 needs the oneDNN kernels")
	}
	if k.BF16 {
		if ok, missing := dnnl.HasBF16(); !ok {
			return fmt.Errorf("model: bf16 needs AVX512-BF16 or AMX-BF16: %s", missing)
		}
	}
	n.x.closeKernels()
	n.x.kern = k
	n.x.p16ok = false
	return nil
}

// Weights16 is the buffer the linear layers read their weights from in
// bfloat16, laid out as Params, for an optimizer to write each parameter's
// new value into as it updates it (optim.BF16Copier); nil when the network
// does not compute in bf16. Without it every training forward converts
// each linear layer's W, reading all of W again from memory (the CNN's
// fc1: 1.6 million values, 0.52 ms of a 15 ms step on one Zen 4 core).
// With it, SGD's update kernel converts each block of parameters it has
// just written, for about a tenth of that, and the caller says so with
// WeightsUpdated. The same bits either way.
func (n *Net) Weights16() []uint16 {
	if !n.x.gemmBF16() {
		return nil
	}
	if len(n.x.p16) < len(n.Params) {
		n.x.p16, n.x.p16ok = make([]uint16, len(n.Params)), false
	}
	return n.x.p16
}

// WeightsUpdated says that Weights16 holds every parameter's current value
// (an optimizer has written them all since Params last changed), so the
// next forward reads them instead of converting its weights. The word holds
// until the next training forward has run (evaluation forwards before it
// use it too): Params must not change in between.
func (n *Net) WeightsUpdated() {
	if n.x.p16 != nil {
		n.x.p16ok = true
	}
}

// Kernels reports the kernels the network computes with.
func (n *Net) Kernels() Kernels { return n.x.kern }

// Close frees what the oneDNN kernels hold outside Go's heap. The network
// still works afterwards: the next step builds them again.
func (n *Net) Close() { n.x.closeKernels() }

// perWorkerKernels makes sure every worker has its cache of oneDNN
// matmuls and convolutions. It runs on the calling goroutine before the
// workers start, so that each worker then touches only its own.
func (x *exec) perWorkerKernels() {
	if !x.kern.DNNL {
		return
	}
	for len(x.gemms) < x.par.Workers() {
		x.gemms = append(x.gemms, dnnl.NewGemms(x.kern.typ()))
		x.convs = append(x.convs, make(map[convKey]convImpl))
		x.convs16 = append(x.convs16, make(map[convKey]conv16Impl))
	}
}

// closeKernels frees every oneDNN object the layers made.
func (x *exec) closeKernels() {
	for _, g := range x.gemms {
		g.Close()
	}
	x.gemms = nil
	for _, m := range x.convs {
		for _, c := range m {
			c.Close()
		}
	}
	x.convs = nil
	for _, m := range x.convs16 {
		for _, c := range m {
			c.Close()
		}
	}
	x.convs16 = nil
}

// blockGemm computes one worker's block of C = alpha*op(A)*op(B) +
// beta*C with the chosen kernels. oneDNN's matmul takes alpha 1 and beta
// 0 or 1, which is all the layers use.
func (x *exec) blockGemm(w int, tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if !x.gemmDNNL() {
		gemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if alpha != 1 || (beta != 0 && beta != 1) {
		panic("model: oneDNN gemm with alpha != 1 or beta not 0 or 1")
	}
	err := x.gemms[w].Run(tA != blas.NoTrans, tB != blas.NoTrans, m, n, k, a, lda, b, ldb, beta == 1, c, ldc)
	if err != nil {
		panic(fmt.Sprintf("model: %v", err)) // a shape oneDNN refuses: a bug, not bad input
	}
}

// gemmDNNL reports whether the linear layers' GEMMs run on oneDNN's
// matmul (with the oneDNN kernels; else on the installed BLAS).
func (x *exec) gemmDNNL() bool { return x.kern.DNNL }

// convKey identifies one of a worker's oneDNN convolutions: a layer's
// shape for a number of samples.
type convKey struct {
	layer *Conv2D
	n     int
}

// A convImpl is one of a worker's float32 convolutions for a number of
// samples: oneDNN's (*dnnl.Conv, direct or Winograd, bf16 too) or, where a
// layer runs Winograd and oneDNN has none for it, kernels.Wino.
type convImpl interface {
	ForwardGen(x, w, y []float32, gen uint64)
	BackwardDataGen(dy, w, dx []float32, gen uint64)
	BackwardWeights(x, dy, dw []float32)
	Close()
}

// dnnlConv returns worker w's convolution of l for n samples, making it on
// first use: oneDNN's, except for a layer that runs Winograd (Kernels.
// winograd) on a CPU where oneDNN has no Winograd for it (oneDNN 2.6's is
// AVX-512 only): there kernels.Wino, our F(2x2, 3x3).
func (x *exec) dnnlConv(l *Conv2D, w, n int) convImpl {
	key := convKey{l, n}
	if c, ok := x.convs[w][key]; ok {
		return c
	}
	g := l.win
	s := dnnl.ConvShape{N: n, H: g.H, W: g.W, C: g.C, O: l.out.C, K: g.K, S: g.S, P: g.P}
	var c convImpl
	if x.kern.winograd(l) {
		if !x.kern.OwnWinograd {
			if d, err := dnnl.NewConvWinograd(s); err == nil {
				c = d
			}
		}
		if c == nil && kernels.WinoFits(g, l.out.C) {
			c, _ = kernels.NewWino(g, l.out.C)
		}
	}
	if c == nil {
		d, err := dnnl.NewConv(s, x.kern.typ())
		if err != nil {
			panic(fmt.Sprintf("model: %s: %v", l.name, err))
		}
		c = d
	}
	x.convs[w][key] = c
	return c
}

// A conv16Impl is one of a worker's bf16 convolutions for a number of
// samples (inputs x and dy in bf16, weights and outputs float32):
// oneDNN's direct one or, for a layer that runs Winograd, kernels.Wino16.
type conv16Impl interface {
	ForwardGen16(x []uint16, w, y []float32, gen uint64)
	BackwardDataGen16(dy []uint16, w, dx []float32, gen uint64)
	BackwardWeights16(x, dy []uint16, dw []float32)
	Close()
}

// dnnlConv16 is dnnlConv for a layer on the bf16 kernels: hpctrain's
// Winograd (kernels.Wino16) for a layer that runs Winograd, else (or
// without AVX512-BF16: a CPU with AMX-BF16 alone) oneDNN's direct
// convolution. A Wino16 takes any number of samples: a worker has one per
// layer, filed under n 0.
func (x *exec) dnnlConv16(l *Conv2D, w, n int) conv16Impl {
	if c, ok := x.convs16[w][convKey{l, 0}]; ok {
		return c
	}
	key := convKey{l, n}
	if c, ok := x.convs16[w][key]; ok {
		return c
	}
	var c conv16Impl
	if x.kern.winograd(l) && kernels.WinoFits(l.win, l.out.C) {
		if k, err := kernels.NewWino16(l.win, l.out.C); err == nil {
			c, key.n = k, 0
		}
	}
	if c == nil {
		g := l.win
		d, err := dnnl.NewConv(dnnl.ConvShape{N: n, H: g.H, W: g.W, C: g.C, O: l.out.C, K: g.K, S: g.S, P: g.P}, dnnl.BF16)
		if err != nil {
			panic(fmt.Sprintf("model: %s: %v", l.name, err))
		}
		c = d
	}
	x.convs16[w][key] = c
	return c
}
