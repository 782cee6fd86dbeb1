package model

import (
	"fmt"

	"gonum.org/v1/gonum/blas"

	"hpctrain/internal/dnnl"
)

// exec is what every layer of a Net shares to run its work: the Parallel of
// the rank's workers and reusable task values, so that a step allocates
// nothing (layers run one after another, so one of each task suffices),
// and the network's mode: training or evaluation, the reducer of
// synchronised batch norm, the GradHook of the running Backward, and the
// key of this step's dropout noise.
type exec struct {
	par   Parallel
	gt    gemmTask
	train bool
	sync  SumReducer
	err   error // the first failed reduction since Net.Err
	hook  GradHook
	seed  uint64 // the network's seed
	step  uint64 // see Net.SetStep
	pass  uint64 // training forwards since SetStep
	// wgen counts forwards (from 1): the parameters do not change between
	// a forward and the backward after it, so oneDNN convolutions reorder
	// their weights once per forward and worker, not once per chunk.
	wgen  uint64
	first int
	drops uint64 // dropout layers bound so far: each draws its own stream
	// kern is how convolutions and linear layers compute (SetKernels);
	// with oneDNN, gemms and convs are each worker's primitives.
	kern    Kernels
	gemms   []*dnnl.Gemms
	convs   []map[convKey]convImpl
	convs16 []map[convKey]conv16Impl
	// toBF16's current buffers and its task.
	cv16   []uint16
	cvf    []float32
	cvTask samples
	// The parameters in bfloat16 for the linear layers on oneDNN's bf16
	// kernels (see weights16 and Net.Weights16): p16 has Params' layout,
	// nil until needed, as long as Params once Net.Weights16 has made it
	// (before that, as far as the layers that converted into it). p16ok:
	// an optimizer has just written all of p16 from Params
	// (Net.WeightsUpdated); p16use: this forward's layers read p16 as it
	// is instead of converting their weights into it.
	p16           []uint16
	p16ok, p16use bool
}

// weights16 is the bfloat16 copy of the weights w, which start at off in
// the network's parameters: converted now, unless an optimizer wrote it
// with the last update (p16use).
func (x *exec) weights16(off int, w []float32) []uint16 {
	if len(x.p16) < off+len(w) { // a first bf16 forward before Net.Weights16 (or a layer bound alone, in tests)
		p16 := make([]uint16, off+len(w))
		copy(p16, x.p16)
		x.p16, x.p16use, x.p16ok = p16, false, false
	}
	wh := x.p16[off : off+len(w)]
	if !x.p16use {
		x.toBF16(wh, w)
	}
	return wh
}

// ready tells the running Backward's hook that Grads[off:] is final.
func (x *exec) ready(off int) {
	if x.hook != nil {
		x.hook.Ready(off)
	}
}

// reduce sums buf over the replicas with the synchronised batch norm's
// reducer. After a failure it reduces nothing more (every later result is
// this replica's own) until Net.Err has reported it.
func (x *exec) reduce(buf []float64) {
	if x.sync == nil || x.err != nil {
		return
	}
	if err := x.sync.AllreduceSum64(buf); err != nil {
		x.err = err
	}
}

// gemmTask computes C = alpha*op(A)*op(B) + beta*C split over workers,
// each worker calling the single-threaded BLAS on a block of C: rows of C
// when M is the longer side, else columns. No worker shares output, so the
// result does not depend on the number of workers.
type gemmTask struct {
	x           *exec
	tA, tB      blas.Transpose
	m, n, k     int
	alpha, beta float32
	a, b, c     []float32
	a16, b16    []uint16 // gemm16's operands, in place of a and b
	lda, ldb    int
	ldc         int
	byRows      bool
	block       int // > 0: Run's items are blocks of this many rows or columns
}

// A oneDNN gemm is cut into blocks of fixed size, so that every block is
// computed alike however many workers there are. The sizes suit the
// linear layers at batch 64, measured on one Zen 4 core on the CNN's fc1
// (512x64x3136 forward as y^T = W x^T, 512x3136x64, 64x3136x512): wide
// products in blocks of 512 columns (oneDNN's matmul 95-105 GFLOP/s in
// fp32, OpenBLAS 70-85), the others in fp32 in blocks of 128 rows (the
// forward with caches flushed first: 86-93 GFLOP/s; 64 rows 81-83, 32
// rows 79), in bf16 in blocks of 128 along the longer side (gemm, whose
// blocks convert their own operands: rows would convert all of B once per
// block; the linear layers convert once and use gemm16).
const (
	gemmColBlock = 512
	gemmRowBlock = 128
	gemmBF16     = 128
)

// dnnlBlocks is how a oneDNN gemm of C (m, n) is cut: by columns or rows,
// and the block's size.
func dnnlBlocks(m, n int, bf16 bool) (byRows bool, block int) {
	switch {
	case n >= 2*gemmColBlock:
		return false, gemmColBlock
	case bf16:
		return m >= n, gemmBF16
	}
	return true, gemmRowBlock
}

// gemm runs C = alpha*op(A)*op(B) + beta*C (row major) on the workers.
func (x *exec) gemm(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	x.perWorkerKernels()
	g := &x.gt
	*g = gemmTask{x: x, tA: tA, tB: tB, m: m, n: n, k: k, alpha: alpha, beta: beta, a: a, b: b, c: c, lda: lda, ldb: ldb, ldc: ldc, byRows: m >= n}
	if x.gemmDNNL() {
		g.byRows, g.block = dnnlBlocks(m, n, x.kern.BF16)
		size := n
		if g.byRows {
			size = m
		}
		x.par.Run((size+g.block-1)/g.block, g)
		*g = gemmTask{}
		return
	}
	if x.par.Workers() == 1 {
		x.blockGemm(0, tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if g.byRows {
		x.par.Run(m, g)
	} else {
		x.par.Run(n, g)
	}
	*g = gemmTask{} // drop references to the buffers
}

// Run computes rows (or columns) [lo, hi) of C, or with blocks, blocks
// [lo, hi) one by one.
func (g *gemmTask) Run(w, lo, hi int) {
	if g.block > 0 {
		size := g.n
		if g.byRows {
			size = g.m
		}
		for b := lo; b < hi; b++ {
			g.run(w, b*g.block, min((b+1)*g.block, size))
		}
		return
	}
	g.run(w, lo, hi)
}

// run computes rows (or columns) [lo, hi) of C.
func (g *gemmTask) run(w, lo, hi int) {
	m, n, ao, bo, co := g.m, hi-lo, 0, 0, lo
	if g.byRows {
		m, n, co = hi-lo, g.n, lo*g.ldc
		if g.tA == blas.NoTrans {
			ao = lo * g.lda // A is (M, K): its rows lo.. start at lo*lda
		} else {
			ao = lo // A is stored (K, M): columns lo..
		}
	} else if g.tB == blas.NoTrans {
		bo = lo // B is (K, N): columns lo..
	} else {
		bo = lo * g.ldb // B is stored (N, K): rows lo..
	}
	if g.a16 != nil {
		err := g.x.gemms[w].RunBF16(g.tA != blas.NoTrans, g.tB != blas.NoTrans, m, n, g.k, g.a16[ao:], g.lda, g.b16[bo:], g.ldb, g.beta == 1, g.c[co:], g.ldc)
		if err != nil {
			panic(fmt.Sprintf("model: %v", err)) // a shape oneDNN refuses: a bug, not bad input
		}
		return
	}
	g.x.blockGemm(w, g.tA, g.tB, m, n, g.k, g.alpha, g.a[ao:], g.lda, g.b[bo:], g.ldb, g.beta, g.c[co:], g.ldc)
}

// gemm16 is gemm (alpha 1, beta 0 or 1) on oneDNN's bf16 kernels with
// operands already converted (see toBF16), in gemm's blocks: for a layer
// that converts an operand once and uses it in several products.
func (x *exec) gemm16(tA, tB blas.Transpose, m, n, k int, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	if !x.gemmBF16() || (beta != 0 && beta != 1) {
		panic("model: gemm16 without oneDNN bf16 kernels, or beta not 0 or 1")
	}
	x.perWorkerKernels()
	g := &x.gt
	*g = gemmTask{x: x, tA: tA, tB: tB, m: m, n: n, k: k, alpha: 1, beta: beta, a16: a, b16: b, c: c, lda: lda, ldb: ldb, ldc: ldc}
	g.byRows, g.block = dnnlBlocks(m, n, true)
	size := n
	if g.byRows {
		size = m
	}
	x.par.Run((size+g.block-1)/g.block, g)
	*g = gemmTask{}
}

// gemmBF16 reports whether the linear layers' GEMMs run on oneDNN's bf16
// matmul (gemm16 may be used).
func (x *exec) gemmBF16() bool { return x.kern.DNNL && x.kern.BF16 }

// toBF16 converts src to bfloat16 in dst on the workers.
func (x *exec) toBF16(dst []uint16, src []float32) {
	if x.cvTask == nil {
		x.cvTask = x.convert // once
	}
	x.cv16, x.cvf = dst, src
	x.par.Run((len(src)+cvBlock-1)/cvBlock, x.cvTask)
	x.cv16, x.cvf = nil, nil
}

// cvBlock is toBF16's values per task item.
const cvBlock = 1 << 14

func (x *exec) convert(lo, hi int) {
	n := len(x.cvf)
	dnnl.ToBF16(x.cv16[lo*cvBlock:min(hi*cvBlock, n)], x.cvf[lo*cvBlock:min(hi*cvBlock, n)])
}

// samples is a Task over the samples of a batch, calling fn(lo, hi); layers
// keep one per kernel, made once from a method value.
type samples func(lo, hi int)

func (f samples) Run(w, lo, hi int) { f(lo, hi) }

// perWorker is a Task whose work needs the worker's index (to use that
// worker's scratch buffers), calling fn(w, lo, hi).
type perWorker func(w, lo, hi int)

func (f perWorker) Run(w, lo, hi int) { f(w, lo, hi) }
