//go:build cgo && !purego

package kernels

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"unsafe"
)

// isaHashEnv makes TestISAForms print isaHash's result and nothing else.
const isaHashEnv = "HPCTRAIN_KERNELS_ISA_HASH"

// isaHash runs every fp32 kernel that has an AVX-512 form (the direct
// first convolution with and without its pool, both passes, and the
// Winograd's three) on fixed inputs, channel counts that take the 32- and
// 16-channel blocks and rows that leave a tail, and hashes the results'
// bits.
func isaHash(t *testing.T) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	h := sha256.New()
	put := func(s []float32) {
		h.Write(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 4*len(s)))
	}
	for _, c := range []struct {
		g Window
		o int
	}{{conv(28, 28, 1, 3, 1, 1), 16}, {conv(28, 28, 1, 3, 1, 1), 32}, {conv(9, 11, 2, 3, 2, 1), 48}, {conv(6, 7, 1, 5, 1, 2), 16}} {
		g, o := c.g, c.o
		const n = 3
		kkc := g.K * g.K * g.C
		x, wT, dy := randf(rng, n*g.In()), randf(rng, kkc*o), randf(rng, n*g.Ho*g.Wo*o)
		y, dw, s := make([]float32, n*g.Ho*g.Wo*o), make([]float32, kkc*o), make([]float32, g.ConvPoolScratch(o))
		ConvSmallForward(g, n, x, wT, o, y, s)
		ConvSmallWeights(g, n, x, dy, o, dw, s)
		put(y)
		put(dw)
		if g.Ho%2 == 0 && g.Wo%2 == 0 {
			out := n * g.PooledOut(o)
			yp, arg, bias, dp, db := make([]float32, out), make([]uint8, out), randf(rng, o), randf(rng, out), make([]float32, o)
			ConvPoolForward(g, n, x, wT, o, bias, true, yp, arg, s)
			ConvPoolWeights(g, n, x, dp, yp, arg, true, o, dw, db, s)
			put(yp)
			put(dw)
			put(db)
			h.Write(arg)
		}
	}
	for _, sh := range []struct{ n, h, w, c, o int }{{3, 14, 14, 32, 64}, {2, 7, 5, 16, 32}} {
		g := Window{H: sh.h, W: sh.w, C: sh.c, K: 3, S: 1, P: 1, Ho: sh.h, Wo: sh.w}
		k, err := NewWino(g, sh.o)
		if err != nil {
			t.Fatal(err)
		}
		x, w, dy := randf(rng, sh.n*g.In()), randf(rng, sh.o*9*sh.c), randf(rng, sh.n*sh.h*sh.w*sh.o)
		y, dx, dw := make([]float32, len(dy)), make([]float32, len(x)), make([]float32, len(w))
		k.ForwardGen(x, w, y, 0)
		k.BackwardDataGen(dy, w, dx, 0)
		k.BackwardWeights(x, dy, dw)
		put(y)
		put(dx)
		put(dw)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestISAForms: the AVX-512 forms of the fp32 kernels give the bits of
// their AVX2 forms, which this test gets by running itself again with
// DNNL_MAX_CPU_ISA=AVX2 (the cap they follow, as oneDNN does).
func TestISAForms(t *testing.T) {
	if os.Getenv(isaHashEnv) != "" {
		os.Stdout.WriteString("isa " + ISA() + " hash " + isaHash(t) + "\n")
		return
	}
	if ISA() != "avx512" {
		t.Skipf("the C kernels run %s here: no AVX-512 forms to compare with the AVX2 ones", ISA())
	}
	want := isaHash(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestISAForms$", "-test.count=1")
	cmd.Env = append(os.Environ(), isaHashEnv+"=1", "DNNL_MAX_CPU_ISA=AVX2")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the capped run: %v\n%s", err, out)
	}
	got := ""
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "isa ") {
			got = line
		}
	}
	if got != "isa avx2 hash "+want {
		t.Errorf("under DNNL_MAX_CPU_ISA=AVX2 the kernels give %q, AVX-512 %q", got, "isa avx512 hash "+want)
	}
}
