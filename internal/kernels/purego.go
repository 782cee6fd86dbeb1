//go:build !cgo || purego

package kernels

// Native reports whether the C kernels are in use (false under purego).
const Native = false

// ISA is "go": the Go kernels, whatever the CPU.
func ISA() string { return "go" }

// ConvSmallWide is false: the Go kernels have no wide forms.
func ConvSmallWide(o int) bool { return false }

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
func SGDMomentum(p, g, v []float32, lr, m, damp, wd, ratio float64, nesterov bool) {
	GoSGDMomentum(p, g, v, lr, m, damp, wd, ratio, nesterov)
}

// SGDMomentumBF16 is GoSGDMomentum, then GoToBF16 of p into h.
func SGDMomentumBF16(p, g, v []float32, h []uint16, lr, m, damp, wd, ratio float64, nesterov bool) {
	checkBF16(p, h)
	GoSGDMomentum(p, g, v, lr, m, damp, wd, ratio, nesterov)
	GoToBF16(h, p)
}

// ToBF16 is GoToBF16.
func ToBF16(h []uint16, p []float32) {
	checkBF16(p, h)
	GoToBF16(h, p)
}

// Adam is GoAdam.
func Adam(p, g, m, v, vmax []float32, a AdamArgs) {
	checkState("Adam", p, g, m, v, vmax)
	GoAdam(p, g, m, v, vmax, a)
}

// LAMBMoments is GoLAMBMoments.
func LAMBMoments(p, g, m, v []float32, a LAMBArgs) (ws, us float64) {
	checkState("LAMB", p, g, m, v)
	return GoLAMBMoments(p, g, m, v, a)
}

// LAMBApply is GoLAMBApply.
func LAMBApply(p, m, v []float32, a LAMBArgs, s float64) {
	checkState("LAMB", p, m, v)
	GoLAMBApply(p, m, v, a, s)
}

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

// ConvPoolForward is GoConvPoolForward.
func ConvPoolForward(g Window, n int, x, wT []float32, o int, bias []float32, relu bool, y []float32, arg []uint8, scratch []float32) {
	g.checkConvPool(n, o, len(x), len(wT), len(bias), len(y), len(arg), len(scratch))
	GoConvPoolForward(g, n, x, wT, o, bias, relu, y, arg, scratch)
}

// ConvPoolWeights is GoConvPoolWeights.
func ConvPoolWeights(g Window, n int, x, dy, y []float32, arg []uint8, relu bool, o int, dwT, db, scratch []float32) {
	g.checkConvPool(n, o, len(x), len(dwT), len(db), len(dy), len(arg), len(scratch))
	g.check(n, len(y), n*(g.Ho/2)*(g.Wo/2)*o)
	GoConvPoolWeights(g, n, x, dy, y, arg, relu, o, dwT, db, scratch)
}

// ChanMoments is GoChanMoments.
func ChanMoments(a, b []float32, m, c int, mu []float32, sa, sab []float64) {
	checkChan(m, c, len(a), len(b), -1, len(mu), len(sa), len(sab))
	GoChanMoments(a, b, m, c, mu, sa, sab)
}

// ChanNorm is GoChanNorm.
func ChanNorm(y, x []float32, m, c int, mu, s, t []float32) {
	checkChan(m, c, len(y), len(x), -1, len(mu), len(s), len(t))
	GoChanNorm(y, x, m, c, mu, s, t)
}

// ChanNormBackward is GoChanNormBackward.
func ChanNormBackward(dx, dy, x []float32, m, c int, mu, a, b, k []float32) {
	checkChan(m, c, len(dx), len(dy), len(x), len(mu), len(a), len(b), len(k))
	GoChanNormBackward(dx, dy, x, m, c, mu, a, b, k)
}

// Add is GoAdd.
func Add(dst, a, b []float32) {
	if len(a) < len(dst) || len(b) < len(dst) {
		panic("kernels: Add operands shorter than dst")
	}
	GoAdd(dst, a, b)
}

// ChanNormReLU is GoChanNormReLU.
func ChanNormReLU(y, x []float32, m, c int, mu, s, t []float32) {
	checkChan(m, c, len(y), len(x), -1, len(mu), len(s), len(t))
	GoChanNormReLU(y, x, m, c, mu, s, t)
}

// ChanMomentsReLU is GoChanMomentsReLU.
func ChanMomentsReLU(a, b []float32, m, c int, mu, s, t []float32, sa, sab []float64) {
	checkChan(m, c, len(a), len(b), -1, len(mu), len(s), len(t), len(sa), len(sab))
	GoChanMomentsReLU(a, b, m, c, mu, s, t, sa, sab)
}

// ChanNormBackwardReLU is GoChanNormBackwardReLU.
func ChanNormBackwardReLU(dx, dy, x []float32, m, c int, mu, a, b, k, s, t []float32) {
	checkChan(m, c, len(dx), len(dy), len(x), len(mu), len(a), len(b), len(k), len(s), len(t))
	GoChanNormBackwardReLU(dx, dy, x, m, c, mu, a, b, k, s, t)
}

// AddReLU is GoAddReLU.
func AddReLU(dst, a, b []float32) {
	if len(a) < len(dst) || len(b) < len(dst) {
		panic("kernels: AddReLU operands shorter than dst")
	}
	GoAddReLU(dst, a, b)
}

// Adagrad is GoAdagrad.
func Adagrad(p, g, s []float32, wd, clr, eps float64) {
	checkState("Adagrad", p, g, s)
	GoAdagrad(p, g, s, wd, clr, eps)
}

// RMSprop is GoRMSprop.
func RMSprop(p, g, s, a, b []float32, alpha, m, wd, lr, eps float64) {
	checkState("RMSprop", p, g, s, a, b)
	GoRMSprop(p, g, s, a, b, alpha, m, wd, lr, eps)
}

// Adamax is GoAdamax.
func Adamax(p, g, m, u []float32, b1, b2, wd, step, eps float64) {
	checkState("Adamax", p, g, m, u)
	GoAdamax(p, g, m, u, b1, b2, wd, step, eps)
}

// Nadam is GoNadam.
func Nadam(p, g, m, v []float32, b1, b2, wd, bc2inv, cg, cm, eps float64) {
	checkState("Nadam", p, g, m, v)
	GoNadam(p, g, m, v, b1, b2, wd, bc2inv, cg, cm, eps)
}

// Adadelta is GoAdadelta.
func Adadelta(p, g, sq, acc []float32, rho, wd, lr, eps float64) {
	checkState("Adadelta", p, g, sq, acc)
	GoAdadelta(p, g, sq, acc, rho, wd, lr, eps)
}

// Small16 is false: the bf16 direct kernels need cgo.
func Small16(o int) bool { return false }

// ConvSmallForward16 panics: see Small16.
func ConvSmallForward16(g Window, n int, x []float32, w16 []uint32, o int, y []float32, scratch []uint16) {
	panic(ErrNoBF16)
}

// ConvPoolForward16 panics: see Small16.
func ConvPoolForward16(g Window, n int, x []float32, w16 []uint32, o int, bias []float32, relu bool, y []float32, arg []uint8,
	scratch []uint16) {
	panic(ErrNoBF16)
}

// ConvSmallWeights16 panics: see Small16.
func ConvSmallWeights16(g Window, n int, x, dy []float32, o int, dwT []float32, scratch []uint16) {
	panic(ErrNoBF16)
}

// ConvPoolWeights16 panics: see Small16.
func ConvPoolWeights16(g Window, n int, x, dy, y []float32, arg []uint8, relu bool, o int, dwT, db []float32, scratch []uint16) {
	panic(ErrNoBF16)
}
