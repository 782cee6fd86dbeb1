//go:build !cgo || purego

package dnnl

import "errors"

// Native reports whether libdnnl is linked in (false under purego).
const Native = false

var errNoCgo = errors.New("dnnl: built without cgo: oneDNN unavailable")

// HasBF16 reports false: without oneDNN there is no bf16 arithmetic here.
func HasBF16() (ok bool, missing string) { return false, errNoCgo.Error() }

// ISA is "none" without oneDNN.
func ISA() string { return "none (built without cgo)" }

// AMX is false: no oneDNN.
func AMX() bool { return false }

// HasWinograd is false: no oneDNN.
func HasWinograd() bool { return false }

// Conv is unavailable without cgo: NewConv returns an error.
type Conv struct{}

// NewConv returns an error without cgo.
func NewConv(s ConvShape, t Type) (*Conv, error) { return nil, errNoCgo }

// NewConvWinograd returns an error without cgo.
func NewConvWinograd(s ConvShape) (*Conv, error) { return nil, errNoCgo }

func (c *Conv) Shape() ConvShape          { return ConvShape{} }
func (c *Conv) Type() Type                { return F32 }
func (c *Conv) Err() error                { return errNoCgo }
func (c *Conv) Forward(x, w, y []float32) { panic(errNoCgo) }
func (c *Conv) ForwardGen(x, w, y []float32, gen uint64) {
	panic(errNoCgo)
}
func (c *Conv) BackwardData(dy, w, dx []float32) { panic(errNoCgo) }
func (c *Conv) BackwardDataGen(dy, w, dx []float32, gen uint64) {
	panic(errNoCgo)
}
func (c *Conv) BackwardWeights(x, dy, dw []float32) { panic(errNoCgo) }
func (c *Conv) ForwardGen16(x []uint16, w, y []float32, gen uint64) {
	panic(errNoCgo)
}
func (c *Conv) BackwardDataGen16(dy []uint16, w, dx []float32, gen uint64) {
	panic(errNoCgo)
}
func (c *Conv) BackwardWeights16(x, dy []uint16, dw []float32) { panic(errNoCgo) }
func (c *Conv) Impl() string                                   { return "" }
func (c *Conv) Close()                                         {}

// Gemm is unavailable without cgo: NewGemm returns an error.
type Gemm struct{}

// NewGemm returns an error without cgo.
func NewGemm(tA, tB bool, m, n, k, lda, ldb, ldc int, accumulate bool, t Type) (*Gemm, error) {
	return nil, errNoCgo
}

func (g *Gemm) Run(a, b, c []float32) { panic(errNoCgo) }
func (g *Gemm) Err() error            { return errNoCgo }
func (g *Gemm) Impl() string          { return "" }
func (g *Gemm) Close()                {}

// Gemms is unavailable without cgo: Run returns an error.
type Gemms struct{}

// NewGemms returns a cache whose Run always fails without cgo.
func NewGemms(t Type) *Gemms { return &Gemms{} }

func (c *Gemms) Run(tA, tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, accumulate bool, cc []float32, ldc int) error {
	return errNoCgo
}
func (c *Gemms) Close() {}

// RunBF16 returns an error without cgo.
func (c *Gemms) RunBF16(tA, tB bool, m, n, k int, a []uint16, lda int, b []uint16, ldb int, accumulate bool, cc []float32, ldc int) error {
	return errNoCgo
}

// ToBF16 panics without cgo (nothing converts for a kernel that is absent).
func ToBF16(dst []uint16, src []float32) { panic(errNoCgo) }

// Sgemm returns an error without cgo.
func Sgemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) error {
	return errNoCgo
}
