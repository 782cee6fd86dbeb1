package cudanet

import (
	"hpctrain/gpu/cuda"
)

// fns are the kernels a Net launches. A Module gives every caller of one
// name the same Function, so the Nets of a Device share them: they are
// used from one goroutine at a time.
type fns struct {
	reluFwd, reluBwd, biasAdd, add         *cuda.Function
	colsumPart, colsumFinal                *cuda.Function
	im2col, col2im                         *cuda.Function
	maxpoolFwd, maxpoolBwd                 *cuda.Function
	avgpoolFwd, avgpoolBwd, gapFwd, gapBwd *cuda.Function
	bnPart, bnTotal, bnStatsTrain          *cuda.Function
	bnStatsEval, bnNorm, bnGrads, bnCoef   *cuda.Function
	bnBwd, softmaxXent, dropout            *cuda.Function
	toBF16, toHalf, zero                   *cuda.Function
}

func (f *fns) load(m *cuda.Module) error {
	for _, k := range []struct {
		p    **cuda.Function
		name string
	}{
		{&f.reluFwd, "relu_fwd"}, {&f.reluBwd, "relu_bwd"}, {&f.biasAdd, "bias_add"}, {&f.add, "add"},
		{&f.colsumPart, "colsum_part"}, {&f.colsumFinal, "colsum_final"},
		{&f.im2col, "im2col"}, {&f.col2im, "col2im"},
		{&f.maxpoolFwd, "maxpool_fwd"}, {&f.maxpoolBwd, "maxpool_bwd"},
		{&f.avgpoolFwd, "avgpool_fwd"}, {&f.avgpoolBwd, "avgpool_bwd"},
		{&f.gapFwd, "gap_fwd"}, {&f.gapBwd, "gap_bwd"},
		{&f.bnPart, "bn_part"}, {&f.bnTotal, "bn_total"}, {&f.bnStatsTrain, "bn_stats_train"},
		{&f.bnStatsEval, "bn_stats_eval"}, {&f.bnNorm, "bn_norm"}, {&f.bnGrads, "bn_grads"},
		{&f.bnCoef, "bn_coef"}, {&f.bnBwd, "bn_bwd"}, {&f.softmaxXent, "softmax_xent"},
		{&f.dropout, "dropout"}, {&f.toBF16, "to_bf16"}, {&f.toHalf, "to_half"}, {&f.zero, "zero"},
	} {
		fn, err := m.Function(k.name)
		if err != nil {
			return err
		}
		*k.p = fn
	}
	return nil
}

// Launch geometry: blocks of 256 threads, at most maxBlocks blocks (the
// kernels' grid-stride loops cover any count).
const (
	blockSize = 256
	maxBlocks = 4096
	// sumRows is the rows of one chunk of the two-launch column sums.
	sumRows = 256
)

// launch runs f on the compute stream with enough threads for count
// items, recording the first failure.
func (n *Net) launch(f *cuda.Function, count int, args ...any) {
	if count <= 0 {
		return
	}
	blocks := min((count+blockSize-1)/blockSize, maxBlocks)
	n.check(f.Launch(cuda.Dim3{X: blocks, Y: 1, Z: 1}, cuda.Dim3{X: blockSize, Y: 1, Z: 1}, n.stream, args...))
}

// check records err as the Net's first failure (reported by Err).
func (n *Net) check(err error) {
	if err != nil && n.err == nil {
		n.err = err
	}
}

// ready tells the running Backward's hook that Grads[off:] is final.
func (n *Net) ready(off int) {
	if n.hook != nil {
		n.hook.Ready(off)
	}
}

func chunks(m, rows int) int { return (m + rows - 1) / rows }

// colSums sets dst (c) to the column sums of the row-major (m, c) matrix
// x: chunk sums, then the chunks in order.
func (n *Net) colSums(dst, x cuda.Ptr, m, c int) {
	nc := chunks(m, sumRows)
	n.launch(n.f.colsumPart, nc*c, n.sumPart, x, int64(m), int32(c), int32(sumRows))
	n.launch(n.f.colsumFinal, c, dst, n.sumPart, int32(nc), int32(c))
}

// gemm computes C = op(A) op(B) for row-major matrices, C (m, nn), in the
// Net's precision. cuBLAS is column-major, where a row-major matrix is its
// transpose, so this is cuBLAS's C^T = op(B)^T op(A)^T: the operands
// swapped.
func (n *Net) gemm(tA, tB bool, m, nn, k int, a cuda.Ptr, lda int, b cuda.Ptr, ldb int, c cuda.Ptr, ldc int) {
	switch n.prec {
	case BF16, FP16:
		conv, typ := n.f.toBF16, cuda.R16BF
		if n.prec == FP16 {
			conv, typ = n.f.toHalf, cuda.R16F
		}
		la, lb := opLen(tA, m, k, lda), opLen(tB, k, nn, ldb)
		n.launch(conv, la, n.lo[0], a, int64(la))
		n.launch(conv, lb, n.lo[1], b, int64(lb))
		n.check(n.blas.GemmEx(tB, tA, nn, m, k, 1, n.lo[1], typ, ldb, n.lo[0], typ, lda, 0, c, cuda.R32F, ldc))
	default:
		n.check(n.blas.Sgemm(tB, tA, nn, m, k, 1, b, ldb, a, lda, 0, c, ldc))
	}
}

// opLen is the number of values a row-major operand op(X) (rows, cols)
// with leading dimension ld spans.
func opLen(t bool, rows, cols, ld int) int {
	if t {
		rows = cols
	}
	return rows * ld
}

// needOp makes the low-precision scratch hold operands of size values.
func (n *Net) needOp(size int) { n.maxOp = max(n.maxOp, size) }
