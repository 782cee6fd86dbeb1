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
