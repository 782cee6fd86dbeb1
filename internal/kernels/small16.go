package kernels

import "fmt"

// The bf16 forms of the direct convolutions (ConvSmallForward16,
// ConvPoolForward16 and their weight gradients): the first layers' few
// input channels, on AVX512-BF16. Inputs and gradients are rounded to
// bfloat16 inside the kernels (nearest even, as GoToBF16), the weights by
// PackSmall16, and every product is summed in float32 by vdpbf16ps, two
// products to an instruction: a forward pixel takes K*ceil(K*C/2) of them
// where the float32 form takes K*K*C fused multiply-adds, and the weight
// gradient half as many. There is no Go twin (bf16 needs cgo): the tests
// compare with float64 sums of the rounded operands.

// small16Slack is the zeros the kernels keep after a padded bf16 sample
// (the C side's SLACK16).
const small16Slack = 2*SmallMax + 2

// Small16Scratch is the number of bf16 values of scratch the bf16 direct
// kernels need for o output channels: a padded sample and its slack, and,
// pooled, two 32-bit values per pooled output of one sample.
func (g Window) Small16Scratch(o int, pooled bool) int {
	n := g.Padded() + small16Slack
	if pooled {
		n += n%2 + 4*g.PooledOut(o)
	}
	return n
}

// Small16Pairs is the length of PackSmall16's w16 for o output channels.
func (g Window) Small16Pairs(o int) int { return g.K * (g.K*g.C + 1) / 2 * o }

// PackSmall16 sets w16 (K, ceil(K*C/2), o) to the weights w (o, K, K, C)
// rounded to bf16 and paired along each kernel row's K*C values: pair q of
// row kh holds values 2q and 2q+1 of that row (low and high half), an odd
// row's last pair a zero in its high half.
func PackSmall16(g Window, o int, w []float32, w16 []uint32) {
	kc := g.K * g.C
	nq := (kc + 1) / 2
	if len(w) != o*g.K*kc || len(w16) != g.Small16Pairs(o) {
		panic(fmt.Sprintf("kernels: PackSmall16 %+v to %d: %d weights and %d pairs", g, o, len(w), len(w16)))
	}
	var h [2]uint16
	var f [2]float32
	for j := 0; j < o; j++ {
		for kh := 0; kh < g.K; kh++ {
			row := w[(j*g.K+kh)*kc:][:kc]
			for q := 0; q < nq; q++ {
				f[0], f[1] = row[2*q], 0
				if 2*q+1 < kc {
					f[1] = row[2*q+1]
				}
				GoToBF16(h[:], f[:])
				w16[(kh*nq+q)*o+j] = uint32(h[0]) | uint32(h[1])<<16
			}
		}
	}
}

func (g Window) checkSmall16(n, o, lx, lw16, ly, ls int, pooled bool) {
	g.check(n)
	kkc := g.K * g.K * g.C
	out := g.Ho * g.Wo * o
	if pooled {
		out = g.PooledOut(o)
	}
	if kkc > SmallMax || o < 16 || o%16 != 0 || (pooled && (g.Ho%2 != 0 || g.Wo%2 != 0)) || lx < n*g.In() ||
		lw16 < g.Small16Pairs(o) || ly < n*out || ls < g.Small16Scratch(o, pooled) {
		panic(fmt.Sprintf("kernels: bad bf16 direct convolution arguments (window %+v, %d samples, %d outputs)", g, n, o))
	}
}
