//go:build cgo && !purego

package dnnl

/*
#cgo CFLAGS: -O2
#cgo LDFLAGS: -ldnnl -lgomp
#include <stdlib.h>
#include "hc_dnnl.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// Native reports whether libdnnl is linked in (false under purego).
const Native = true

// plainWeights makes the convolutions use the caller's (O,K,K,C) weight
// layout instead of the primitives' preferred blocked one. Measured on Zen4
// (avx512_core_bf16, one thread) for the conv2 shape, 32x14x14x32 -> 64 k3:
// with plain weights oneDNN 2.6 finds only its reference implementation
// (ref:any, 0.07-0.4 GFLOP/s), with format_tag_any it picks brgconv / jit
// (fp32 ~115-120, bf16 ~190-230 GFLOP/s) and the weight reorder per call
// costs a few microseconds. So it is off; TestConvPlainWeights keeps the
// plain path correct.
var plainWeights = false

// HasBF16 reports whether this CPU has bf16 dot-product instructions that
// oneDNN uses: AVX512-BF16 (cpuid leaf 7 subleaf 1 EAX bit 5) or AMX-BF16
// (leaf 7 subleaf 0 EDX bit 22, with the AMX tile state enabled by the OS
// in XCR0 bits 17 and 18). missing is empty when ok, else it names what is
// missing. (It cannot be called BF16: that is the Type constant.)
func HasBF16() (ok bool, missing string) {
	bits := int(C.hcdnnl_cpu_bf16())
	avx, amx, tiles := bits&1 != 0, bits&2 != 0, bits&4 != 0
	switch {
	case !avx && !amx:
		return false, "this CPU has neither AVX512-BF16 nor AMX-BF16 (cpuid)"
	case !avx && !tiles:
		return false, "this CPU has AMX-BF16 but no AVX512-BF16, and the OS has not enabled AMX tile state (XCR0 bits 17, 18)"
	}
	// oneDNN uses them only when its effective ISA includes them (it also
	// checks the OS's AVX-512 state; DNNL_MAX_CPU_ISA can lower it).
	switch isa := C.GoString(C.hcdnnl_isa()); isa {
	case "avx512_core_bf16", "avx512_core_amx":
		return true, ""
	default:
		return false, fmt.Sprintf("oneDNN's effective ISA is %s, below avx512_core_bf16 (DNNL_MAX_CPU_ISA set, or no OS AVX-512 state?)", isa)
	}
}

// AMX reports whether oneDNN runs its bf16 primitives on AMX-BF16's tile
// unit on this CPU: its effective ISA is avx512_core_amx (the CPU has
// AMX-BF16, the OS has enabled the tile state and granted it, and
// DNNL_MAX_CPU_ISA does not cap oneDNN below it).
func AMX() bool { return C.GoString(C.hcdnnl_isa()) == "avx512_core_amx" }

// HasWinograd reports whether oneDNN has float32 Winograd convolutions on
// this CPU (2.6: AVX-512 only), by building one of 16 channels; where it
// has none, the model runs hpctrain's own (kernels.Wino).
func HasWinograd() bool {
	c, err := NewConvWinograd(ConvShape{N: 1, H: 4, W: 4, C: 16, O: 16, K: 3, S: 1, P: 1})
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// ISA is oneDNN's effective ISA (dnnl_get_effective_cpu_isa) as a short
// name, e.g. "avx512_core_bf16", followed by the bf16 instructions cpuid
// shows: "avx512_core_bf16 (cpuid bf16: avx512_bf16)".
func ISA() string {
	bits := int(C.hcdnnl_cpu_bf16())
	var found string
	switch {
	case bits&1 != 0 && bits&2 != 0:
		found = "avx512_bf16 amx_bf16"
	case bits&1 != 0:
		found = "avx512_bf16"
	case bits&2 != 0:
		found = "amx_bf16"
	default:
		found = "none"
	}
	if bits&2 != 0 && bits&4 == 0 {
		found += " (no AMX tile state)"
	}
	return C.GoString(C.hcdnnl_isa()) + " (cpuid bf16: " + found + ")"
}

func statusError(what string, stage *C.char, st C.int) error {
	s := "dnnl: " + what
	if stage != nil {
		s += ": " + C.GoString(stage)
	}
	return fmt.Errorf("%s: %s (dnnl status %d)", s, statusName(int(st)), int(st))
}

func f32p(s []float32) *C.float { return (*C.float)(unsafe.Pointer(unsafe.SliceData(s))) }

func u16p(s []uint16) *C.uint16_t { return (*C.uint16_t)(unsafe.Pointer(unsafe.SliceData(s))) }

// Conv is one convolution shape in one Type, with forward, backward-data
// and backward-weights primitives (no bias: the caller adds the bias and
// sums its gradient). The weights are reordered inside each call from the
// caller's (O,K,K,C) float32 into the primitives' preferred format (and to
// bfloat16 for BF16); diff weights come back the same way. For BF16, x and
// dy are converted to bfloat16 into the Conv's own buffers; y, dx and dw
// are float32 straight from the primitives.
type Conv struct {
	p   *C.hcdnnl_conv
	s   ConvShape
	t   Type
	err error
}

// NewConv builds the three primitives of shape s in arithmetic t.
func NewConv(s ConvShape, t Type) (*Conv, error) { return newConv(s, t, plainWeights, false) }

// NewConvWinograd builds Winograd primitives (F(4x4, 3x3): float32, 3x3
// kernels, stride 1, channel counts multiples of 16) for shape s, or
// returns an error where oneDNN has none for s on this CPU: the caller
// falls back to NewConv. They read and write the same NHWC buffers as
// NewConv's (reordered inside the call to oneDNN's nChw16c, except with 16
// channels, where the two layouts are the same), and round differently:
// the transforms add error of order 1e-6 relative to the outputs' scale.
func NewConvWinograd(s ConvShape) (*Conv, error) { return newConv(s, F32, false, true) }

func newConv(s ConvShape, t Type, plain, wino bool) (*Conv, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if t != F32 && t != BF16 {
		return nil, fmt.Errorf("dnnl: convolution %v: unknown type %v", s, t)
	}
	c := &Conv{s: s, t: t}
	var stage *C.char
	st := C.hcdnnl_conv_new(&c.p, C.long(s.N), C.long(s.H), C.long(s.W), C.long(s.C), C.long(s.O),
		C.long(s.K), C.long(s.S), C.long(s.P), cbool(t == BF16), cbool(plain), cbool(wino), &stage)
	if st != 0 {
		return nil, statusError(fmt.Sprintf("convolution %v %v", s, t), stage, st)
	}
	return c, nil
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// Shape is the Conv's shape.
func (c *Conv) Shape() ConvShape { return c.s }

// Type is the Conv's arithmetic.
func (c *Conv) Type() Type { return c.t }

func (c *Conv) check(op string, a, b, out []float32, la, lb, lout int) {
	if c.p == nil {
		panic("dnnl: Conv." + op + " after Close")
	}
	if len(a) < la || len(b) < lb || len(out) < lout {
		panic(fmt.Sprintf("dnnl: Conv.%s %v: slices of %d, %d, %d elements, want %d, %d, %d",
			op, c.s, len(a), len(b), len(out), la, lb, lout))
	}
}

func (c *Conv) fail(op string, st C.int) {
	if st != 0 && c.err == nil {
		c.err = statusError(fmt.Sprintf("convolution %s %v %v", op, c.s, c.t), nil, st)
	}
}

// Err is the first error a call returned since construction: the
// primitives do not fail once built (their memory is all allocated then),
// but should one, its outputs are undefined and Err says why.
func (c *Conv) Err() error { return c.err }

// Forward sets y = conv(x, w), overwriting y.
func (c *Conv) Forward(x, w, y []float32) { c.ForwardGen(x, w, y, 0) }

// ForwardGen is Forward where gen names the contents of w: after a call
// with a nonzero gen, later calls (Forward's and BackwardData's apart)
// with the same gen skip reordering w into the primitive's format (for
// Winograd, transforming it) and use the copy made then. The caller
// promises w has not changed between them; 0 always reorders.
func (c *Conv) ForwardGen(x, w, y []float32, gen uint64) {
	c.check("Forward", x, w, y, c.s.XLen(), c.s.WLen(), c.s.YLen())
	c.fail("forward", C.hcdnnl_conv_fwd(c.p, f32p(x), nil, f32p(w), C.ulong(gen), f32p(y)))
}

// ForwardGen16 is ForwardGen on a BF16 Conv for x already converted by
// ToBF16: the result has the bits ForwardGen gives for the float32 x, and
// a caller converts x once for the forward and BackwardWeights16.
func (c *Conv) ForwardGen16(x []uint16, w, y []float32, gen uint64) {
	c.check16("Forward", x, nil, w, y, c.s.XLen(), 0, c.s.WLen(), c.s.YLen())
	c.fail("forward", C.hcdnnl_conv_fwd(c.p, nil, u16p(x), f32p(w), C.ulong(gen), f32p(y)))
}

// check16 is check for the bf16 operands a and b (b nil: none).
func (c *Conv) check16(op string, a, b []uint16, w, out []float32, la, lb, lw, lout int) {
	if c.t != BF16 {
		panic("dnnl: Conv." + op + "16 on a float32 convolution")
	}
	c.check(op, w, w, out, lw, lw, lout)
	if len(a) < la || len(b) < lb {
		panic(fmt.Sprintf("dnnl: Conv.%s16 %v: bf16 slices of %d, %d elements, want %d, %d", op, c.s, len(a), len(b), la, lb))
	}
}

// BackwardData sets dx to the gradient of the input given dy, overwriting
// dx.
func (c *Conv) BackwardData(dy, w, dx []float32) { c.BackwardDataGen(dy, w, dx, 0) }

// BackwardDataGen is BackwardData with ForwardGen's gen.
func (c *Conv) BackwardDataGen(dy, w, dx []float32, gen uint64) {
	c.check("BackwardData", dy, w, dx, c.s.YLen(), c.s.WLen(), c.s.XLen())
	c.fail("backward data", C.hcdnnl_conv_bwd_data(c.p, f32p(dy), nil, f32p(w), C.ulong(gen), f32p(dx)))
}

// BackwardDataGen16 is BackwardDataGen on a BF16 Conv for dy already
// converted by ToBF16 (see ForwardGen16).
func (c *Conv) BackwardDataGen16(dy []uint16, w, dx []float32, gen uint64) {
	c.check16("BackwardData", dy, nil, w, dx, c.s.YLen(), 0, c.s.WLen(), c.s.XLen())
	c.fail("backward data", C.hcdnnl_conv_bwd_data(c.p, nil, u16p(dy), f32p(w), C.ulong(gen), f32p(dx)))
}

// BackwardWeights sets dw (O,K,K,C) to the gradient of the weights given x
// and dy, overwriting dw.
func (c *Conv) BackwardWeights(x, dy, dw []float32) {
	c.check("BackwardWeights", x, dy, dw, c.s.XLen(), c.s.YLen(), c.s.WLen())
	c.fail("backward weights", C.hcdnnl_conv_bwd_weights(c.p, f32p(x), nil, f32p(dy), nil, f32p(dw)))
}

// BackwardWeights16 is BackwardWeights on a BF16 Conv for x and dy already
// converted by ToBF16 (see ForwardGen16).
func (c *Conv) BackwardWeights16(x, dy []uint16, dw []float32) {
	c.check16("BackwardWeights", x, dy, dw, dw, c.s.XLen(), c.s.YLen(), c.s.WLen(), c.s.WLen())
	c.fail("backward weights", C.hcdnnl_conv_bwd_weights(c.p, nil, u16p(x), nil, u16p(dy), f32p(dw)))
}

// Impl is oneDNN's name of the forward primitive's implementation, e.g.
// "brgconv:avx512_core_bf16".
func (c *Conv) Impl() string { return c.impl(0) }

// impl: 0 forward, 1 backward data, 2 backward weights.
func (c *Conv) impl(which int) string {
	if c.p == nil {
		return ""
	}
	return C.GoString(C.hcdnnl_conv_impl(c.p, C.int(which)))
}

// Close frees the primitives and buffers; it is idempotent.
func (c *Conv) Close() {
	if c.p != nil {
		C.hcdnnl_conv_free(c.p)
		c.p = nil
	}
}

// Gemm computes C = op(A) op(B) (+ C when accumulate) for row-major float32
// matrices with leading dimensions, as cblas_sgemm with alpha 1 and beta 0
// or 1, on the calling thread: a oneDNN matmul primitive whose memory
// descriptors carry the transposes as strides, accumulation as a sum
// post-op. A is (M,K) or, transposed, stored (K,M); B is (K,N) or stored
// (N,K). For BF16, A and B are converted into dense bfloat16 buffers of
// the Gemm's own each call.
type Gemm struct {
	p   *C.hcdnnl_gemm
	key gemmKey
	t   Type
	err error
}

// NewGemm builds the matmul primitive of one shape.
func NewGemm(tA, tB bool, m, n, k, lda, ldb, ldc int, accumulate bool, t Type) (*Gemm, error) {
	return newGemm(gemmKey{tA, tB, m, n, k, lda, ldb, ldc, accumulate, false}, t)
}

// newGemm builds the Gemm of key: operands in float32, or in bfloat16
// when key.in16 (then t is BF16).
func newGemm(key gemmKey, t Type) (*Gemm, error) {
	m, n, k := key.m, key.n, key.k
	what := fmt.Sprintf("matmul tA %v tB %v m %d n %d k %d lda %d ldb %d ldc %d accumulate %v %v",
		key.tA, key.tB, m, n, k, key.lda, key.ldb, key.ldc, key.acc, t)
	if key.in16 {
		what += " (bf16 operands)"
	}
	ac, bc := k, n
	if key.tA {
		ac = m
	}
	if key.tB {
		bc = k
	}
	if m < 0 || n < 0 || k < 0 || key.lda < max(1, ac) || key.ldb < max(1, bc) || key.ldc < max(1, n) {
		return nil, fmt.Errorf("dnnl: %s: bad dimensions", what)
	}
	if t != F32 && t != BF16 || key.in16 && t != BF16 {
		return nil, fmt.Errorf("dnnl: %s: unknown type", what)
	}
	g := &Gemm{key: key, t: t}
	if key.m == 0 || key.n == 0 || key.k == 0 {
		return g, nil // nothing for oneDNN to do: Run clears or keeps C
	}
	mode := 0 // f32
	switch {
	case key.in16:
		mode = 2 // bf16 operands given
	case t == BF16:
		mode = 1 // f32 operands converted
	}
	var stage *C.char
	st := C.hcdnnl_gemm_new(&g.p, cbool(key.tA), cbool(key.tB), C.long(key.m), C.long(key.n), C.long(key.k),
		C.long(key.lda), C.long(key.ldb), C.long(key.ldc), cbool(key.acc), C.int(mode), &stage)
	if st != 0 {
		return nil, statusError(what, stage, st)
	}
	return g, nil
}

// Run computes c = op(a) op(b), or c += op(a) op(b) when the Gemm
// accumulates.
func (g *Gemm) Run(a, b, c []float32) {
	k := g.key
	checkGemm(k.tA, k.tB, k.m, k.n, k.k, a, k.lda, b, k.ldb, c, k.ldc)
	if g.degenerate(c) {
		return
	}
	if st := C.hcdnnl_gemm_run(g.p, f32p(a), f32p(b), f32p(c)); st != 0 && g.err == nil {
		g.err = statusError("matmul", nil, st)
	}
}

// degenerate handles a Gemm with a zero dimension, which has no
// primitive: with k = 0, C is cleared (kept when accumulating). It
// reports whether g is one.
func (g *Gemm) degenerate(c []float32) bool {
	if g.p != nil {
		return false
	}
	if k := g.key; k.m > 0 && k.n > 0 && k.k == 0 && !k.acc {
		for i := 0; i < k.m; i++ {
			clear(c[i*k.ldc : i*k.ldc+k.n])
		}
	}
	return true
}

// runBF16 is Run with bfloat16 operands (a Gemm of RunBF16's key).
func (g *Gemm) runBF16(a, b []uint16, c []float32) {
	k := g.key
	checkGemm(k.tA, k.tB, k.m, k.n, k.k, a, k.lda, b, k.ldb, c, k.ldc)
	if g.degenerate(c) {
		return
	}
	st := C.hcdnnl_gemm_run_bf16(g.p, (*C.uint16_t)(unsafe.Pointer(unsafe.SliceData(a))),
		(*C.uint16_t)(unsafe.Pointer(unsafe.SliceData(b))), f32p(c))
	if st != 0 && g.err == nil {
		g.err = statusError("matmul", nil, st)
	}
}

// Err is the first error Run met (see Conv.Err).
func (g *Gemm) Err() error { return g.err }

// Impl is oneDNN's name of the matmul's implementation ("" when the shape
// needs none).
func (g *Gemm) Impl() string {
	if g.p == nil {
		return ""
	}
	return C.GoString(C.hcdnnl_gemm_impl(g.p))
}

// Close frees the primitive and buffers; it is idempotent.
func (g *Gemm) Close() {
	if g.p != nil {
		C.hcdnnl_gemm_free(g.p)
		g.p = nil
	}
}

// Gemms is a cache of Gemm by shape for one worker: the first call of a
// shape builds it, later calls reuse it (a map lookup, no allocation).
type Gemms struct {
	t      Type
	m      map[gemmKey]*Gemm
	failed map[gemmKey]error
}

// NewGemms makes an empty cache of Gemms in arithmetic t.
func NewGemms(t Type) *Gemms {
	return &Gemms{t: t, m: map[gemmKey]*Gemm{}, failed: map[gemmKey]error{}}
}

// Run computes cc = op(a) op(b) (+ cc when accumulate) with the cached
// Gemm of this shape. The error is the shape's construction failure (kept,
// not retried) or a failed execution.
func (c *Gemms) Run(tA, tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, accumulate bool, cc []float32, ldc int) error {
	g, err := c.lookup(gemmKey{tA, tB, m, n, k, lda, ldb, ldc, accumulate, false})
	if err != nil {
		return err
	}
	g.Run(a, b, cc)
	return g.takeErr()
}

// lookup returns the cached Gemm of key, building it on first use (a
// failure is kept, not retried).
func (c *Gemms) lookup(key gemmKey) (*Gemm, error) {
	if g := c.m[key]; g != nil {
		return g, nil
	}
	if err := c.failed[key]; err != nil {
		return nil, err
	}
	g, err := newGemm(key, c.t)
	if err != nil {
		c.failed[key] = err
		return nil, err
	}
	c.m[key] = g
	return g, nil
}

// takeErr returns and clears the error of the Gemm's last Run.
func (g *Gemm) takeErr() error {
	err := g.err
	g.err = nil
	return err
}

// RunBF16 is Run with operands already in bfloat16 (see ToBF16), for a
// caller that converts an operand once and uses it in many products: the
// cache's Type must be BF16. Each product accumulates in float32 as Run's
// do, and the results are those of Run on the float32 operands.
func (c *Gemms) RunBF16(tA, tB bool, m, n, k int, a []uint16, lda int, b []uint16, ldb int, accumulate bool, cc []float32, ldc int) error {
	if c.t != BF16 {
		return fmt.Errorf("dnnl: RunBF16 on a cache of %v", c.t)
	}
	g, err := c.lookup(gemmKey{tA, tB, m, n, k, lda, ldb, ldc, accumulate, true})
	if err != nil {
		return err
	}
	g.runBF16(a, b, cc)
	return g.takeErr()
}

// ToBF16 converts src to bfloat16 bits in dst (round to nearest even), as
// the BF16 primitives convert their float32 operands.
func ToBF16(dst []uint16, src []float32) { toBF16(dst, src, vector16()) }

// vector16 is vectorBF16, asked of the CPU once: ToBF16 runs on small
// blocks too (batch norm's bf16 hand-off), where a second cgo call per
// block would cost as much as the block.
var vector16 = sync.OnceValue(vectorBF16)

// Close frees every cached Gemm; it is idempotent.
func (c *Gemms) Close() {
	for k, g := range c.m {
		g.Close()
		delete(c.m, k)
	}
}

// Sgemm is dnnl_sgemm (row major, as cblas_sgemm) on the calling thread.
func Sgemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) error {
	checkGemm(tA, tB, m, n, k, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return nil
	}
	if k == 0 || alpha == 0 {
		for i := 0; i < m; i++ {
			row := c[i*ldc : i*ldc+n]
			for j := range row {
				if beta == 0 {
					row[j] = 0
				} else {
					row[j] *= beta
				}
			}
		}
		return nil
	}
	st := C.hcdnnl_sgemm(cbool(tA), cbool(tB), C.long(m), C.long(n), C.long(k), C.float(alpha),
		f32p(a), C.long(lda), f32p(b), C.long(ldb), C.float(beta), f32p(c), C.long(ldc))
	if st != 0 {
		return statusError(fmt.Sprintf("sgemm tA %v tB %v m %d n %d k %d", tA, tB, m, n, k), nil, st)
	}
	return nil
}

// toBF16 converts src to bfloat16 bits in dst with the C conversion the
// BF16 primitives use: the AVX512-BF16 loop when vector and the CPU has
// it, else the portable one (for the tests).
func toBF16(dst []uint16, src []float32, vector bool) {
	if len(dst) < len(src) {
		panic("dnnl: toBF16: dst shorter than src")
	}
	if len(src) == 0 {
		return
	}
	d := (*C.uint16_t)(unsafe.Pointer(unsafe.SliceData(dst)))
	if vector {
		C.hcdnnl_to_bf16(d, f32p(src), C.long(len(src)))
	} else {
		C.hcdnnl_to_bf16_plain(d, f32p(src), C.long(len(src)))
	}
}

// vectorBF16 reports whether toBF16 uses the AVX512-BF16 loop.
func vectorBF16() bool { return C.hcdnnl_bf16_vector() != 0 }

// ompMaxThreads is OpenMP's thread count for a parallel region started
// from the calling thread.
func ompMaxThreads() int { return int(C.hcdnnl_omp_max_threads()) }
