//go:build !cgo || purego

package kernels

func winoTiles() int { return goWinoTiles }

func winoFilters(c, o int, w []float32, flip bool, u []float32) { goWinoFilters(c, o, w, flip, u) }

func winoConv(n, h, w, c, o int, x, u, y, v, m, zero, junk []float32) {
	goWinoConv(n, h, w, c, o, x, u, y, v, m, zero, junk)
}

func winoWeights(n, h, w, c, o int, x, dy, dw, du, v, z, zero []float32) {
	goWinoWeights(n, h, w, c, o, x, dy, dw, du, v, z, zero)
}

// The bf16 Winograd has no Go twin: bf16 needs oneDNN, and so cgo.

func winoBF16() bool { return false }

func winoPack16(k, n int, f []float32, u []uint16) { panic(ErrNoBF16) }

func winoConv16(n, h, w, c, o int, x, u []uint16, y []float32, v []uint16, m []float32, zero []uint16, junk []float32) {
	panic(ErrNoBF16)
}

func winoWeights16(n, h, w, c, o int, x, dy []uint16, dw, du []float32, v, z, zero []uint16) {
	panic(ErrNoBF16)
}
