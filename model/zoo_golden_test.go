package model

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"testing"
)

// paramHash is FNV-1a over the bits of every parameter.
func paramHash(p []float32) string {
	h := fnv.New64a()
	var b [4]byte
	for _, v := range p {
		u := math.Float32bits(v)
		b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		h.Write(b[:])
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

// goldenSteps runs three plain SGD steps (lr 0.001) of net on fixed random
// data and returns the losses and the final parameters' hash.
func goldenSteps(net *Net) ([3]float64, string) {
	rng := rand.New(rand.NewPCG(21, 22))
	nb := net.Batch()
	labels := make([]int32, nb)
	var losses [3]float64
	for s := range losses {
		for i := range net.Input() {
			net.Input()[i] = rng.Float32()
		}
		for i := range labels {
			labels[i] = int32(rng.IntN(net.Classes))
		}
		net.Forward(nb)
		losses[s], _ = net.Loss(labels)
		net.Backward(nil)
		for i, g := range net.Grads {
			net.Params[i] -= 0.001 * g
		}
	}
	return losses, paramHash(net.Params)
}

// golden are the cnn and mlp of the code before descriptions (Go-built
// spec lists), seed 7, batch 8: the hash of the initial parameters (bit
// for bit: only the RNG is involved) and three losses (to 1e-5: the GEMM
// implementation may round differently).
var golden = []struct {
	name   string
	in     Shape
	init   string
	losses [3]float64
}{
	{"cnn", Shape{28, 28, 1}, "98a9cac92b038896", [3]float64{7.209044132687342, 2.5476951797716616, 3.385495196506884}},
	{"cnn", Shape{32, 32, 3}, "2276f2c28601d37b", [3]float64{5.104424148767344, 4.343809888373705, 3.464089955949738}},
	{"mlp", Shape{28, 28, 1}, "7537fbb389b0d614", [3]float64{2.8365160244997623, 2.425385899056895, 2.3442226032220157}},
	{"mlp", Shape{32, 32, 3}, "730e1f4525a7b066", [3]float64{2.4132898837821686, 2.7511300829763337, 2.6389186221896086}},
}

// oldSpecs are the spec lists the cnn and mlp were built from before
// descriptions.
func oldSpecs(name string, classes int) []Spec {
	if name == "mlp" {
		return []Spec{Flatten(), FullyConnected(512), Rectifier(), FullyConnected(classes)}
	}
	return []Spec{
		Conv(32, 3, 1, 1), Rectifier(), MaxPool(2, 2),
		Conv(64, 3, 1, 1), Rectifier(), MaxPool(2, 2),
		Flatten(), FullyConnected(512), FullyConnected(classes),
	}
}

// TestZooMatchesGoBuilt: the cnn and mlp built from their TOML files have
// the parameters of the Go-built networks bit for bit after
// initialisation, the same layer names, and train alike: bit for bit
// beside the spec lists in this build, and to the recorded losses.
func TestZooMatchesGoBuilt(t *testing.T) {
	for _, g := range golden {
		net, err := New(g.name, g.in, 10, 8, 7)
		if err != nil {
			t.Fatal(err)
		}
		if h := paramHash(net.Params); h != g.init {
			t.Errorf("%s %v: initial parameters hash %s, want %s", g.name, g.in, h, g.init)
		}
		old, err := NewNet(g.in, 8, 7, oldSpecs(g.name, 10)...)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(net.Groups()) != fmt.Sprint(old.Groups()) {
			t.Errorf("%s %v: groups %v, Go-built %v", g.name, g.in, net.Groups(), old.Groups())
		}
		if g.name == "cnn" && !(pooled(net.Layers[0]) && pooled(net.Layers[3])) {
			t.Errorf("cnn %v: convolution, ReLU and max-pool not fused", g.in)
		}
		losses, final := goldenSteps(net)
		oldLosses, oldFinal := goldenSteps(old)
		if losses != oldLosses || final != oldFinal {
			t.Errorf("%s %v: losses %v (params %s), Go-built %v (%s)", g.name, g.in, losses, final, oldLosses, oldFinal)
		}
		for i, l := range losses {
			if d := math.Abs(l - g.losses[i]); d > 1e-5*g.losses[i] {
				t.Errorf("%s %v: loss %d = %v, recorded %v", g.name, g.in, i, l, g.losses[i])
			}
		}
	}
}
