package model

import (
	"fmt"
	"math/rand/v2"

	"hpctrain/internal/dnnl"
	"hpctrain/internal/kernels"
)

// chunkBudget bounds a chunk's im2col block plus its output (or output
// gradient): small enough that both stay in a core's L2 cache between the
// kernels that write and read them.
const chunkBudget = 640 << 10

// partsBudget bounds the chunks' weight-gradient partials kept side by
// side: past it (a wide layer, whose chunks are single samples) the
// backward runs the chunks a wave of one per worker at a time, and keeps
// one partial per worker and the running sum (partRows).
const partsBudget = 4 << 20

// Conv2D is a 2-D convolution with square kernel K, stride S and zero
// padding P, computed chunk by chunk over the batch: for a chunk of a few
// samples,
//
//	col (n*Ho*Wo, K*K*C) = im2col(x)
//	y   (n*Ho*Wo, O)     = col W^T + b
//
// and backward, recomputing col for the chunk rather than keeping the
// whole batch's,
//
//	dW_chunk = dy^T col, db_chunk = column sums of dy
//	dcol     = dy W, dx = col2im(dcol)
//
// Chunks are sized so col stays in cache (chunkBudget) and are shared out
// to the workers, each with its own col block. The per-chunk weight
// gradients are summed in chunk order afterwards, so the result does not
// depend on the number of workers; where they would take more than
// partsBudget, they are made and summed a wave of one chunk per worker at
// a time, still in chunk order (the same sums, to the bit), so that a
// layer with millions of weights keeps a copy of them per worker rather
// than per sample.
type Conv2D struct {
	name    string
	in, out Shape
	kkc     int // K*K*C: one row of col
	hwo     int // Ho*Wo: rows of col per sample
	win     kernels.Window
	bias    bool
	w, b    []float32 // (O, K, K, C), (O) or nil without bias
	grad    []float32 // dW then db, contiguous
	chunk   int       // samples per chunk
	batch   int       // the largest batch
	dnnl    bool      // the chunk size and buffers are oneDNN's (exec.kern)
	cols    [][]float32
	// direct: K*K*C is so small (few input channels: the first layer)
	// that a direct convolution beats im2col and the BLAS. It wants W^T
	// (K*K*C, O) and, per worker, a padded sample and a chunk's dW^T.
	direct   bool
	wT       []float32
	pads     [][]float32
	dwT      [][]float32
	part     []float32 // (partRows, O*K*K*C + O): chunks' dW and db
	c0, r0   int       // the wave's first chunk, and its row in part
	rows     int       // the rows of part that sumParts adds
	x        *exec
	cx, cy   []float32 // the current call's buffers, for the tasks
	cdy, cdx []float32
	n        int
	// pool, when not nil, is the max-pool (after a ReLU or not) that
	// follows and is fused into this layer: each chunk's output is
	// pooled while in cache, bias and ReLU added after the pool (see
	// MaxPool2D), and only the pooled output is kept. outs are the
	// workers' chunk outputs, or their gradients in backward.
	pool *MaxPool2D
	outs [][]float32
	// On oneDNN's bf16 kernels, x16 is the batch's input in bf16,
	// converted once in forward for the forward and the weight gradient,
	// and dy16 each worker's chunk of the output gradient, converted once
	// for both backward products. Where the layer before is a batch norm,
	// it writes x16 instead, in bf16 only (input16; have16 says it did for
	// the coming forward); where the layer after is one, dyBN, it computes
	// each chunk's output gradient into dy16 when this layer's backward
	// asks for it (gradFrom, BatchNorm.gradRows16).
	x16    []uint16
	dy16   [][]uint16
	have16 bool
	dyBN   *BatchNorm
	// A direct layer runs in bf16 on bf16 kernels where the CPU has
	// AVX512-BF16 (small16): its forward on kernels.ConvSmallForward16
	// or ConvPoolForward16, with w16 the weights paired and rounded once
	// per forward and pads16 each worker's scratch; its weight gradient
	// too where a pixel pair's inputs lie side by side (small16dw: one
	// input channel, stride 1), the other direct layers' (the 1x1
	// projections') being faster in float32.
	small16, small16dw bool
	w16                []uint32
	pads16             [][]uint16

	fwdTask, bwdTask, dwTask perWorker
}

// Conv returns the Spec of a convolution with o output channels, a k x k
// kernel, stride s, zero padding p and a bias.
func Conv(o, k, s, p int) Spec { return conv(o, k, s, p, true) }

// conv is Conv with or without bias (a convolution followed by batch
// normalisation needs none: the normalisation's shift replaces it).
func conv(o, k, s, p int, bias bool) Spec {
	return Spec{prefix: "conv", kind: "conv", make: func(in Shape, name, path string) (Layer, error) {
		if o < 1 || k < 1 || s < 1 || p < 0 {
			return nil, fmt.Errorf("bad convolution (out %d, kernel %d, stride %d, pad %d)", o, k, s, p)
		}
		if k > in.H+2*p || k > in.W+2*p {
			return nil, fmt.Errorf("kernel %d larger than its input %dx%d with pad %d", k, in.H, in.W, p)
		}
		ho := (in.H+2*p-k)/s + 1
		wo := (in.W+2*p-k)/s + 1
		if tooLarge(o, k, k, in.C) || tooLarge(ho, wo, o) || tooLarge(ho, wo, k, k, in.C) {
			return nil, fmt.Errorf("too large (out %d, kernel %d, input %v)", o, k, in)
		}
		l := &Conv2D{name: name, in: in, out: Shape{ho, wo, o}, bias: bias}
		l.kkc, l.hwo = k*k*in.C, ho*wo
		l.win = kernels.Window{H: in.H, W: in.W, C: in.C, K: k, S: s, P: p, Ho: ho, Wo: wo}
		return l, nil
	}}
}

func (l *Conv2D) Name() string   { return l.name }
func (l *Conv2D) Out() Shape     { return l.out }
func (l *Conv2D) NumParams() int { return l.out.C*l.kkc + l.nb() }
func (l *Conv2D) MACs() int      { return l.hwo * l.out.C * l.kkc }
func (l *Conv2D) buffers() []tensor {
	return nil
}

// nb is the number of biases: O, or 0 without bias.
func (l *Conv2D) nb() int {
	if l.bias {
		return l.out.C
	}
	return 0
}

func (l *Conv2D) tensors() []tensor {
	t := []tensor{{name: "weight", len: l.out.C * l.kkc}} // (O, K, K, C)
	if l.bias {
		t = append(t, tensor{name: "bias", len: l.out.C, bias: true}) // (O)
	}
	return t
}

func (l *Conv2D) bind(s slot) {
	n, x := s.n, s.x
	nw := l.out.C * l.kkc
	l.w, l.b = s.p[:nw], s.p[nw:nw+l.nb()]
	if !l.bias {
		l.b = nil // the fused pool's kernel adds no bias
	}
	l.grad = s.g[:nw+l.nb()]
	l.batch = n
	if l.direct = l.kkc <= kernels.SmallMax && l.out.C%8 == 0; l.direct {
		l.wT = make([]float32, l.kkc*l.out.C)
	}
	l.x = x
	l.fwdTask, l.bwdTask, l.dwTask = l.fwd, l.bwd, l.sumParts
}

func (l *Conv2D) initParams(rng *rand.Rand) {
	heNormal(l.w, l.kkc, rng)
	clear(l.b)
}

func (l *Conv2D) chunks(n int) int { return (n + l.chunk - 1) / l.chunk }

// partRows is the rows of part for batches of up to n samples on workers
// workers: one per chunk, or, past partsBudget and with more chunks than
// one per worker and one more, one per worker and the running sum.
func (l *Conv2D) partRows(n, workers int) int {
	c, np := l.chunks(n), l.NumParams()
	if c <= workers+1 || c*np <= partsBudget/4 {
		return c
	}
	return workers + 1
}

// scratchBytes is what colBlocks allocates, at most, for batches of n
// samples on workers workers, whichever kernels it runs on (Summary's
// ScratchBytes).
func (l *Conv2D) scratchBytes(n, workers int) int64 {
	o, w := int64(l.out.C), int64(workers)
	var b int64
	for _, dnnl := range []bool{false, true} {
		c := *l
		c.batch = n
		if dnnl {
			c.chunk = chunkSize(n, chunkBudget/(4*(l.in.Size()+l.hwo*l.out.C)))
		} else {
			c.chunk = chunkSize(n, chunkBudget/(4*l.hwo*(l.kkc+l.out.C)))
		}
		chunk, hwo, kkc := int64(c.chunk), int64(l.hwo), int64(l.kkc)
		part := int64(c.partRows(n, workers)) * int64(l.NumParams())
		per := chunk * hwo * o // outs, or dy16 (half as large)
		if !dnnl {
			per += chunk * hwo * kkc // cols
			per += int64(l.win.Padded()) + kkc*o
		}
		b = max(b, 4*(part+w*per))
	}
	// wT, w16, and x16: the batch's input in bf16.
	return b + 4*int64(l.kkc)*o*2 + 2*int64(n*l.in.Size())
}

// colBlocks makes sure every worker has its scratch buffers (once: the
// workers and the kernels are set after bind). With oneDNN there is no
// im2col block, and a chunk is the samples whose input and output fit
// chunkBudget.
func (l *Conv2D) colBlocks() {
	// In fp32 the direct kernel beats oneDNN on the few input channels it
	// is for (a first layer: oneDNN's backward weights with one input
	// channel is slow); in bf16 too with the pool fused in (the CNN's
	// conv1: 1.3-1.4 ms per step of 64 against oneDNN bf16's 1.7-1.9, on
	// one Zen 4 core) or in its AVX-512 form (resnet8's conv1, 16
	// channels: 0.39-0.40 ms against 0.75-1.0), and in bf16 it has bf16
	// forms of its own (small16; BenchmarkConv1: the CNN's conv1 and
	// pool, forward 22-24 µs per 4 samples in float32, 15-16 in bf16,
	// weight gradient 24 against 15).
	k := l.x.kern
	l.small16 = k.BF16 && l.direct && !l.useDNNL(k) && kernels.Small16(l.out.C)
	l.small16dw = l.small16 && l.win.S*l.win.C == 1
	if l.small16 && l.w16 == nil {
		l.w16 = make([]uint32, l.win.Small16Pairs(l.out.C))
	}
	if l.chunk == 0 || l.dnnl != l.useDNNL(k) {
		l.dnnl = l.useDNNL(k)
		if l.dnnl {
			l.chunk = chunkSize(l.batch, chunkBudget/(4*(l.in.Size()+l.hwo*l.out.C)))
		} else {
			l.chunk = chunkSize(l.batch, chunkBudget/(4*l.hwo*(l.kkc+l.out.C)))
		}
		l.part = nil
		l.cols, l.pads, l.dwT, l.outs, l.pads16 = nil, nil, nil, nil, nil
		l.x16, l.dy16 = nil, nil
	}
	l.x.perWorkerKernels()
	if r := l.partRows(l.batch, l.x.par.Workers()); len(l.part) != r*len(l.grad) {
		l.part = make([]float32, r*len(l.grad))
	}
	if l.bf16() {
		if l.x16 == nil {
			l.x16 = make([]uint16, l.batch*l.in.Size())
		}
		for len(l.dy16) < l.x.par.Workers() {
			l.dy16 = append(l.dy16, make([]uint16, l.chunk*l.hwo*l.out.C))
		}
	}
	// (The kernels may turn bf16 after the buffers below were made.)
	for l.small16 && len(l.pads16) < l.x.par.Workers() {
		l.pads16 = append(l.pads16, make([]uint16, l.win.Small16Scratch(l.out.C, l.poolTiles())))
	}
	for len(l.cols) < l.x.par.Workers() {
		if l.dnnl {
			l.cols = append(l.cols, nil)
		} else {
			l.cols = append(l.cols, make([]float32, l.chunk*l.hwo*l.kkc))
		}
		if l.direct && !l.dnnl {
			pad := l.win.Padded()
			if l.pooled() {
				pad = l.win.ConvPoolScratch(l.out.C)
			}
			l.pads = append(l.pads, make([]float32, pad))
			l.dwT = append(l.dwT, make([]float32, l.kkc*l.out.C))
		}
		if l.pool != nil {
			l.outs = append(l.outs, make([]float32, l.chunk*l.hwo*l.out.C))
		}
	}
}

// forward: x (N, H, W, C), y (N, Ho, Wo, O); with a fused pool, y is the
// pool's output.
func (l *Conv2D) forward(x, y []float32, n int) {
	l.colBlocks()
	if l.small16 {
		kernels.PackSmall16(l.win, l.out.C, l.w, l.w16)
	} else if l.direct && !l.dnnl {
		transpose(l.wT, l.w, l.out.C, l.kkc)
	}
	l.cx, l.cy, l.n = x, y, n
	l.x.par.Run(l.chunks(n), l.fwdTask)
	l.have16 = false
}

// input16 is where the layer before this one (a batch norm) may write this
// layer's input in bf16 for the coming forward, in place of the float32
// input, which this layer then does not read: the layer's own x16, or nil
// where the layer does not run on bf16 kernels and wants none.
func (l *Conv2D) input16() []uint16 {
	l.colBlocks()
	if !l.bf16() {
		return nil
	}
	l.have16 = true
	return l.x16
}

// gradFrom is input16 for the coming backward: it reports whether bn, the
// batch norm after this layer, is to compute this layer's output gradient
// chunk by chunk in bf16 (BatchNorm.gradRows16) as the backward asks for
// it, in place of its own pass over the batch: where this layer runs on
// bf16 kernels, pools nothing, and has no bias (whose gradient sums the
// float32 values).
func (l *Conv2D) gradFrom(bn *BatchNorm) bool {
	l.colBlocks()
	if !l.bf16() || l.pool != nil || l.bias {
		return false
	}
	l.dyBN = bn
	return true
}

// bf16 reports whether the layer runs on oneDNN's bf16 kernels.
func (l *Conv2D) bf16() bool { return l.dnnl && l.x.kern.BF16 }

// useDNNL reports whether the layer runs on oneDNN with kernels k.
func (l *Conv2D) useDNNL(k Kernels) bool {
	return k.DNNL && (k.AllDNNL || !(l.direct && (!k.BF16 || l.poolTiles() || kernels.ConvSmallWide(l.out.C))))
}

// poolTiles reports whether a 2x2, stride-2 pool tiling the output
// exactly is fused in: the direct kernel can pool as it goes.
func (l *Conv2D) poolTiles() bool {
	p := l.pool
	return p != nil && p.win.K == 2 && p.win.S == 2 && p.win.P == 0 &&
		l.out.H%2 == 0 && l.out.W%2 == 0 && p.out.H == l.out.H/2 && p.out.W == l.out.W/2
}

// pooled reports whether the direct kernel runs with the pool fused in
// (ConvPoolForward, ConvPoolWeights).
func (l *Conv2D) pooled() bool { return l.direct && !l.dnnl && l.poolTiles() }

// span returns chunk c's first sample and its number of samples.
func (l *Conv2D) span(c int) (int, int) {
	s0 := c * l.chunk
	return s0, min(l.chunk, l.n-s0)
}

func (l *Conv2D) fwd(w, lo, hi int) {
	o, size := l.out.C, l.in.Size()
	for c := lo; c < hi; c++ {
		s0, ns := l.span(c)
		m := ns * l.hwo
		x := l.cx[s0*size:][:ns*size]
		var y []float32
		if l.pool != nil {
			y = l.outs[w][:m*o] // pooled below, while still in cache
		} else {
			y = l.cy[s0*l.hwo*o:][:m*o]
		}
		switch {
		case l.bf16():
			x16 := l.x16[s0*size:][:ns*size]
			if !l.have16 {
				dnnl.ToBF16(x16, x)
			}
			l.x.dnnlConv16(l, w, ns).ForwardGen16(x16, l.w, y, l.x.wgen)
		case l.dnnl:
			l.x.dnnlConv(l, w, ns).ForwardGen(x, l.w, y, l.x.wgen)
		case l.pooled():
			p, po := l.pool, l.pool.out.Size()
			py, arg := l.cy[s0*po:][:ns*po], p.arg[s0*po:][:ns*po]
			if l.small16 {
				kernels.ConvPoolForward16(l.win, ns, x, l.w16, o, l.b, p.relu, py, arg, l.pads16[w])
			} else {
				kernels.ConvPoolForward(l.win, ns, x, l.wT, o, l.b, p.relu, py, arg, l.pads[w])
			}
			continue
		case l.small16:
			kernels.ConvSmallForward16(l.win, ns, x, l.w16, o, y, l.pads16[w])
		case l.direct:
			kernels.ConvSmallForward(l.win, ns, x, l.wT, o, y, l.pads[w])
		default:
			col := l.cols[w][:m*l.kkc]
			kernels.Im2col(l.win, ns, x, col)
			gemm(noT, tr, m, o, l.kkc, 1, col, l.kkc, l.w, l.kkc, 0, y, o)
		}
		if p := l.pool; p != nil {
			po := p.out.Size()
			kernels.PoolForward(p.win, ns, y, l.b, p.relu, l.cy[s0*po:][:ns*po], p.arg[s0*po:][:ns*po])
			continue
		}
		if len(l.b) == 0 {
			continue // before batch norm: no bias
		}
		for i := 0; i < m; i++ {
			yr := y[i*o : (i+1)*o]
			for j, b := range l.b {
				yr[j] += b
			}
		}
	}
}

// backward: with a fused pool, y and dy are the pool's output and its
// gradient.
func (l *Conv2D) backward(x, y, dy, dx []float32, n int) {
	l.colBlocks()
	l.cx, l.cy, l.cdy, l.cdx, l.n = x, y, dy, dx, n
	nc, rows := l.chunks(n), len(l.part)/len(l.grad)
	if nc <= rows {
		l.c0, l.r0, l.rows = 0, 0, nc
		l.x.par.Run(nc, l.bwdTask)
		l.x.par.Run(len(l.grad), l.dwTask)
	}
	// Waves: the first in rows 0 to rows-1, the next ones in rows 1 on,
	// with row 0 the sum so far (sumParts).
	for c0 := 0; nc > rows && c0 < nc; {
		l.c0, l.r0 = c0, min(c0, 1)
		k := min(nc-c0, rows-l.r0)
		l.rows = l.r0 + k
		l.x.par.Run(k, l.bwdTask)
		l.x.par.Run(len(l.grad), l.dwTask)
		c0 += k
	}
	l.cdx = nil
	l.dyBN = nil
}

func (l *Conv2D) bwd(w, lo, hi int) {
	o, size, nw := l.out.C, l.in.Size(), l.out.C*l.kkc
	for i := lo; i < hi; i++ {
		s0, ns := l.span(l.c0 + i)
		m := ns * l.hwo
		var col []float32
		if !l.dnnl {
			col = l.cols[w][:m*l.kkc]
		}
		part := l.part[(l.r0+i)*len(l.grad):][:len(l.grad)]
		x := l.cx[s0*size:][:ns*size]
		if l.pooled() && l.cdx == nil {
			// The first layer: only weight and bias gradients, from
			// the pooled gradient routed in registers.
			p, po := l.pool, l.pool.out.Size()
			pdy, py, arg := l.cdy[s0*po:][:ns*po], l.cy[s0*po:][:ns*po], p.arg[s0*po:][:ns*po]
			if l.small16dw {
				kernels.ConvPoolWeights16(l.win, ns, x, pdy, py, arg, p.relu, o, l.dwT[w], part[nw:], l.pads16[w])
			} else {
				kernels.ConvPoolWeights(l.win, ns, x, pdy, py, arg, p.relu, o, l.dwT[w], part[nw:], l.pads[w])
			}
			transpose(part[:nw], l.dwT[w], l.kkc, o)
			continue
		}
		var dy []float32
		if p := l.pool; p != nil {
			po := p.out.Size()
			dy = l.outs[w][:m*o]
			kernels.PoolBackward(p.win, ns, l.cdy[s0*po:][:ns*po], l.cy[s0*po:][:ns*po], p.arg[s0*po:][:ns*po], p.relu, dy)
		} else {
			dy = l.cdy[s0*l.hwo*o:][:m*o]
		}
		var dy16 []uint16
		switch {
		case l.bf16():
			dy16 = l.dy16[w][:m*o]
			if l.dyBN != nil {
				l.dyBN.gradRows16(w, s0*l.hwo*o, (s0+ns)*l.hwo*o, dy16)
			} else {
				dnnl.ToBF16(dy16, dy)
			}
			l.x.dnnlConv16(l, w, ns).BackwardWeights16(l.x16[s0*size:][:ns*size], dy16, part[:nw])
		case l.dnnl:
			l.x.dnnlConv(l, w, ns).BackwardWeights(x, dy, part[:nw])
		case l.small16dw:
			kernels.ConvSmallWeights16(l.win, ns, x, dy, o, l.dwT[w], l.pads16[w])
			transpose(part[:nw], l.dwT[w], l.kkc, o)
		case l.direct:
			kernels.ConvSmallWeights(l.win, ns, x, dy, o, l.dwT[w], l.pads[w])
			transpose(part[:nw], l.dwT[w], l.kkc, o)
		default:
			kernels.Im2col(l.win, ns, x, col)
			gemm(tr, noT, o, l.kkc, m, 1, dy, o, col, l.kkc, 0, part[:nw], l.kkc)
		}
		if l.bias {
			kernels.ColSums(part[nw:], dy, m, o, o)
		}
		if l.cdx == nil {
			continue
		}
		dx := l.cdx[s0*size:][:ns*size]
		if dy16 != nil {
			l.x.dnnlConv16(l, w, ns).BackwardDataGen16(dy16, l.w, dx, l.x.wgen)
			continue
		}
		if l.dnnl {
			l.x.dnnlConv(l, w, ns).BackwardDataGen(dy, l.w, dx, l.x.wgen)
			continue
		}
		gemm(noT, noT, m, l.kkc, o, 1, dy, o, l.w, l.kkc, 0, col, l.kkc)
		kernels.Col2im(l.win, ns, col, dx)
	}
}

// sumParts adds the chunks' gradients, in chunk order, for parameters
// [lo, hi): the wave's rows of part, after a first wave with the sum so
// far put in row 0 (0 + s is s to the bit: a sum from 0 is never -0).
func (l *Conv2D) sumParts(w, lo, hi int) {
	if l.r0 > 0 {
		copy(l.part[lo:hi], l.grad[lo:hi])
	}
	kernels.ColSums(l.grad[lo:hi], l.part[lo:], l.rows, hi-lo, len(l.grad))
}

// transpose sets dst (n, m) to the transpose of src (m, n).
func transpose(dst, src []float32, m, n int) {
	for i := 0; i < m; i++ {
		for j, v := range src[i*n : (i+1)*n] {
			dst[j*m+i] = v
		}
	}
}
