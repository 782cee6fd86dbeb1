package dnnl

import (
	"fmt"
	"math"
)

// Type is the arithmetic of a primitive's operands.
type Type int

const (
	F32  Type = iota // float32 operands
	BF16             // bfloat16 operands (converted from the float32 inputs inside the call, round to nearest even), float32 accumulation and float32 results
)

func (t Type) String() string {
	switch t {
	case F32:
		return "fp32"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("dnnl.Type(%d)", int(t))
}

// ConvShape is a 2-D convolution of N samples NHWC (H, W, C) with O output
// channels, a square K x K kernel, stride S, zero padding P on all sides;
// Ho = (H+2P-K)/S+1, same for Wo. Weights are laid out (O, K, K, C); x is
// (N, H, W, C), y is (N, Ho, Wo, O), all float32 row-major contiguous.
type ConvShape struct{ N, H, W, C, O, K, S, P int }

// Ho is the output height.
func (s ConvShape) Ho() int { return (s.H+2*s.P-s.K)/s.S + 1 }

// Wo is the output width.
func (s ConvShape) Wo() int { return (s.W+2*s.P-s.K)/s.S + 1 }

// XLen, YLen and WLen are the lengths of x, y and the weights.
func (s ConvShape) XLen() int { return s.N * s.H * s.W * s.C }
func (s ConvShape) YLen() int { return s.N * s.Ho() * s.Wo() * s.O }
func (s ConvShape) WLen() int { return s.O * s.K * s.K * s.C }

// Flops is the multiply-adds of one pass times two.
func (s ConvShape) Flops() float64 {
	return 2 * float64(s.YLen()) * float64(s.K*s.K*s.C)
}

func (s ConvShape) String() string {
	str := fmt.Sprintf("%dx%dx%dx%d -> %d k%d", s.N, s.H, s.W, s.C, s.O, s.K)
	if s.S != 1 {
		str += fmt.Sprintf(" s%d", s.S)
	}
	if s.P != 0 {
		str += fmt.Sprintf(" p%d", s.P)
	}
	return str
}

func (s ConvShape) check() error {
	if s.N < 1 || s.H < 1 || s.W < 1 || s.C < 1 || s.O < 1 || s.K < 1 || s.S < 1 || s.P < 0 ||
		s.H+2*s.P < s.K || s.W+2*s.P < s.K {
		return fmt.Errorf("dnnl: convolution %v: bad shape", s)
	}
	return nil
}

// RoundBF16 rounds src to bfloat16 (nearest even) and back to float32 in
// dst: the reference rounding the tests and the model's gradient checks
// use. Like VCVTNEPS2BF16 it flushes denormals to signed zero and keeps
// NaNs NaN (quiet).
func RoundBF16(dst, src []float32) {
	if len(dst) < len(src) {
		panic("dnnl: RoundBF16: dst shorter than src")
	}
	for i, f := range src {
		dst[i] = math.Float32frombits(uint32(bf16Bits(f)) << 16)
	}
}

func bf16Bits(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	if u&0x7f800000 == 0 {
		u &= 0x80000000
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

var statusNames = [...]string{"success", "out of memory", "invalid arguments", "unimplemented",
	"iterator ends", "runtime error", "not required"}

func statusName(st int) string {
	if st >= 0 && st < len(statusNames) {
		return statusNames[st]
	}
	return "error"
}

// gemmKey is one Gemm's shape.
type gemmKey struct {
	tA, tB        bool
	m, n, k       int
	lda, ldb, ldc int
	acc           bool
	in16          bool // the operands come as bfloat16 (Gemms.RunBF16)
}

// checkGemm panics if the slices are too short for the dimensions (misuse
// on the Go side: a C library must never read or write outside Go's
// slices).
func checkGemm[T float32 | uint16](tA, tB bool, m, n, k int, a []T, lda int, b []T, ldb int, c []float32, ldc int) {
	ar, ac := m, k
	if tA {
		ar, ac = k, m
	}
	br, bc := k, n
	if tB {
		br, bc = n, k
	}
	if m < 0 || n < 0 || k < 0 || lda < max(1, ac) || ldb < max(1, bc) || ldc < max(1, n) ||
		(m > 0 && n > 0 && k > 0 && (len(a) < lda*(ar-1)+ac || len(b) < ldb*(br-1)+bc)) ||
		(m > 0 && n > 0 && len(c) < ldc*(m-1)+n) {
		panic(fmt.Sprintf("dnnl: bad gemm arguments (tA %v tB %v m %d n %d k %d lda %d ldb %d ldc %d, len a %d b %d c %d)",
			tA, tB, m, n, k, lda, ldb, ldc, len(a), len(b), len(c)))
	}
}
