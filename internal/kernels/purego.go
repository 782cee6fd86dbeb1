//go:build !cgo || purego

package kernels

// Native reports whether the C kernels are in use (false under purego).
const Native = false

// Im2col is GoIm2col.
func Im2col(g Window, n int, x, col []float32) {
	g.check(n, len(x), n*g.In(), len(col), n*g.Cols())
	GoIm2col(g, n, x, col)
}

// Col2im is GoCol2im.
func Col2im(g Window, n int, col, dx []float32) {
	g.check(n, len(col), n*g.Cols(), len(dx), n*g.In())
	GoCol2im(g, n, col, dx)
}

// PoolForward is GoPoolForward.
func PoolForward(g Window, n int, x, bias []float32, relu bool, y []float32, arg []uint8) {
	g.check(n, len(x), n*g.In(), len(y), n*g.Out(), len(arg), n*g.Out())
	GoPoolForward(g, n, x, bias, relu, y, arg)
}

// PoolBackward is GoPoolBackward.
func PoolBackward(g Window, n int, dy, y []float32, arg []uint8, relu bool, dx []float32) {
	g.check(n, len(dy), n*g.Out(), len(y), n*g.Out(), len(arg), n*g.Out(), len(dx), n*g.In())
	GoPoolBackward(g, n, dy, y, arg, relu, dx)
}

// ColSums is GoColSums.
func ColSums(dst, a []float32, m, n, lda int) {
	checkColSums(dst, a, m, n, lda)
	GoColSums(dst, a, m, n, lda)
}

// ReLU is GoReLU.
func ReLU(x, y []float32) { GoReLU(x, y) }

// ReLUBackward is GoReLUBackward.
func ReLUBackward(y, dy, dx []float32) { GoReLUBackward(y, dy, dx) }

// SGDMomentum is GoSGDMomentum.
func SGDMomentum(p, g, v []float32, lr, m, damp, wd float64) { GoSGDMomentum(p, g, v, lr, m, damp, wd) }

// ConvSmallForward is GoConvSmallForward.
func ConvSmallForward(g Window, n int, x, wT []float32, o int, y, scratch []float32) {
	g.checkSmall(n, o, len(x), len(wT), len(y), len(scratch))
	GoConvSmallForward(g, n, x, wT, o, y, scratch)
}

// ConvSmallWeights is GoConvSmallWeights.
func ConvSmallWeights(g Window, n int, x, dy []float32, o int, dwT, scratch []float32) {
	g.checkSmall(n, o, len(x), len(dwT), len(dy), len(scratch))
	GoConvSmallWeights(g, n, x, dy, o, dwT, scratch)
}
