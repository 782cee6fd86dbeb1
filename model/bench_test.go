package model

import (
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// benchNet is a zoo model with batch 64 and random input, on one worker
// (the calling goroutine): 28x28x1 for the cnn and mlp, 32x32x3 for the
// others.
func benchNet(b *testing.B, name string) (*Net, []int32) {
	b.Helper()
	in := Shape{}
	if name != "cnn" && name != "mlp" {
		in = Shape{32, 32, 3}
	}
	net, err := New(name, in, 10, 64, 1)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range net.Input() {
		net.Input()[i] = rng.Float32()
	}
	labels := make([]int32, 64)
	for i := range labels {
		labels[i] = int32(rng.IntN(10))
	}
	return net, labels
}

// BenchmarkStep times full training steps (forward, loss, backward) of the
// zoo, batch 64, one thread.
func BenchmarkStep(b *testing.B) {
	for _, name := range []string{"cnn", "mlp", "lenet5", "resnet8", "resnet20"} {
		b.Run(name, func(b *testing.B) {
			net, labels := benchNet(b, name)
			flop := 2 * float64(net.TrainMACs()) * 64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				net.Forward(64)
				net.Loss(labels)
				net.Backward(nil)
			}
			s := b.Elapsed().Seconds()
			b.ReportMetric(flop*float64(b.N)/s/1e9, "GFLOP/s")
			b.ReportMetric(64*float64(b.N)/s, "samples/s")
		})
	}
}

// BenchmarkLayers reports each layer of the reference CNN (or of the model
// named by BENCH_MODEL), forward and backward, with GFLOP/s for the layers
// that multiply.
func BenchmarkLayers(b *testing.B) {
	name := "cnn"
	if m := os.Getenv("BENCH_MODEL"); m != "" {
		name = m
	}
	net, labels := benchNet(b, name)
	nl := len(net.Layers)
	fwd, bwd := make([]time.Duration, nl), make([]time.Duration, nl)
	for i := 0; i < 3; i++ {
		net.TimeLayers(64, labels, fwd, bwd) // warm-up
	}
	for i, l := range net.Layers {
		if _, ok := l.(*Flat); ok {
			continue
		}
		for _, dir := range []string{"forward", "backward"} {
			b.Run(l.Name()+"/"+dir, func(b *testing.B) {
				f, w := make([]time.Duration, nl), make([]time.Duration, nl)
				for j := 0; j < b.N; j++ {
					net.TimeLayers(64, labels, f, w)
				}
				d, macs := f[i], l.MACs()
				if dir == "backward" {
					d, macs = w[i], 2*macs
					if i == net.firstParam() {
						macs = l.MACs()
					}
				}
				b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "layer-ns/op")
				if macs > 0 {
					b.ReportMetric(2*float64(macs)*64*float64(b.N)/d.Seconds()/1e9, "GFLOP/s")
				}
			})
		}
	}
}
