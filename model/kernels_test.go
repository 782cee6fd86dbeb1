package model

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"hpctrain/internal/dnnl"
	"hpctrain/internal/kernels"
)

// OnThisCPU gives bf16 on oneDNN every convolution on oneDNN where oneDNN
// runs AMX-BF16 (a CPU played by replacing cpuAMX), and leaves every other
// choice as it was; on the real CPU it follows oneDNN's effective ISA.
func TestOnThisCPU(t *testing.T) {
	defer func(f func() bool) { cpuAMX = f }(cpuAMX)
	for _, amx := range []bool{false, true} {
		cpuAMX = func() bool { return amx }
		for _, c := range []struct {
			k   Kernels
			all bool
		}{
			{Kernels{}, false},
			{Kernels{DNNL: true}, false},
			{Kernels{DNNL: true, Direct: true}, false},
			{Kernels{DNNL: true, AllDNNL: true}, true},
			{Kernels{DNNL: true, BF16: true}, amx},
			{Kernels{DNNL: true, BF16: true, Direct: true}, amx},
		} {
			want := c.k
			want.AllDNNL = c.all
			if got := c.k.OnThisCPU(); got != want {
				t.Errorf("AMX %v: %+v.OnThisCPU() = %+v, want %+v", amx, c.k, got, want)
			}
		}
	}
	cpuAMX = dnnl.AMX
	if amx := strings.HasPrefix(dnnl.ISA(), "avx512_core_amx"); cpuAMX() != amx {
		t.Errorf("dnnl.AMX() = %v with oneDNN's ISA %s", cpuAMX(), dnnl.ISA())
	}
}

// With AllDNNL, after three training steps no convolution of the CNN or
// resnet8 has run on hpctrain's own kernels (direct, their bf16 forms,
// Winograd) or on oneDNN's Winograd, and the losses are finite; without
// it some have (so that the check can tell).
func TestAllDNNLRouting(t *testing.T) {
	if !dnnl.Native {
		t.Skip("oneDNN not linked in (purego build): nothing to route")
	}
	for _, bf16 := range []bool{false, true} {
		if ok, missing := dnnl.HasBF16(); bf16 && !ok {
			t.Logf("bf16 not checked: %s", missing)
			continue
		}
		for _, name := range []string{"cnn", "resnet8"} {
			for _, all := range []bool{false, true} {
				k := Kernels{DNNL: true, BF16: bf16, AllDNNL: all}
				own, losses := ownConvs(t, name, k)
				for _, l := range losses {
					if math.IsNaN(l) || math.IsInf(l, 0) {
						t.Errorf("%s, %s: losses %v", name, k, losses)
					}
				}
				switch {
				case all && len(own) > 0:
					t.Errorf("%s, %s: not on oneDNN's direct primitives: %s", name, k, strings.Join(own, ", "))
				case !all && len(own) == 0 && (!bf16 || kernels.HasWino16()):
					t.Errorf("%s, %s: no convolution on hpctrain's own kernels; the check cannot tell", name, k)
				}
			}
		}
	}
}

// ownConvs trains the named network three steps with kernels k and lists
// its convolutions that ran on hpctrain's own kernels or Winograd.
func ownConvs(t *testing.T, name string, k Kernels) (own []string, losses [3]float64) {
	t.Helper()
	net, err := New(name, Shape{28, 28, 1}, 10, 8, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	if err := net.SetKernels(k); err != nil {
		t.Fatal(err)
	}
	losses, _ = goldenSteps(net)
	walk(net.Layers, func(l Layer) {
		if c, ok := l.(*Conv2D); ok && (!c.dnnl || c.small16) {
			own = append(own, c.name+" (direct)")
		}
	})
	for _, m := range net.x.convs16 {
		for key, c := range m {
			if _, ok := c.(*kernels.Wino16); ok {
				own = append(own, key.layer.name+" (bf16 Winograd)")
			}
		}
	}
	for _, m := range net.x.convs {
		for key, c := range m {
			switch c := c.(type) {
			case *kernels.Wino:
				own = append(own, key.layer.name+" (Winograd)")
			case *dnnl.Conv:
				if strings.Contains(c.Impl(), "wino") {
					own = append(own, fmt.Sprintf("%s (oneDNN's Winograd, %s)", key.layer.name, c.Impl()))
				}
			}
		}
	}
	return own, losses
}
