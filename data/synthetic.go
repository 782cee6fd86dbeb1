package data

import (
	"math"
	"math/rand/v2"
)

// NewSynthetic returns n generated samples of shape in classes classes, a
// data set for benchmarks and smoke tests that needs no files.
//
// Sample i is a function of (seed, i) alone: its label is drawn from
// PCG(seed, i), and its pixels are its class's template, a sinusoidal
// grating whose orientation, frequency and colour depend on the class,
// shifted circularly by a random offset, plus uniform noise of +-32. The
// class is therefore learnable (orientation and colour survive shifts,
// flips only mirror the orientation) but no two samples are equal.
//
// The samples are generated at once into memory, n*shape.Size() bytes, so
// that a loader benchmark measures loading, not generation. It panics on
// misuse (n < 1, an empty shape, classes outside [1, 256]).
func NewSynthetic(n int, shape Shape, classes int, seed uint64) *Images {
	if n < 1 || shape.H < 1 || shape.W < 1 || shape.C < 1 || classes < 1 || classes > 256 {
		panic("data: NewSynthetic arguments out of range")
	}
	H, W, C := shape.H, shape.W, shape.C
	size := shape.Size()
	// Templates (classes, H, W, C), values around 128 +- 64.
	tmpl := make([]float32, classes*size)
	for k := 0; k < classes; k++ {
		theta := math.Pi * float64(k) / float64(classes)
		freq := 1.5 + float64(k%3)
		sin, cos := math.Sincos(theta)
		for y := 0; y < H; y++ {
			for x := 0; x < W; x++ {
				u := (cos*float64(x)/float64(W) + sin*float64(y)/float64(H)) * 2 * math.Pi * freq
				g := math.Sin(u)
				for c := 0; c < C; c++ {
					// Per-channel tint: class k brightens channel k%C.
					tint := -16.0
					if c == k%C {
						tint = 24
					}
					tmpl[k*size+(y*W+x)*C+c] = float32(128 + 64*g + tint)
				}
			}
		}
	}
	pix := make([]byte, n*size)
	labels := make([]uint8, n)
	pcg := rand.NewPCG(0, 0)
	rng := rand.New(pcg)
	for i := 0; i < n; i++ {
		pcg.Seed(seed, splitmix(uint64(i)))
		k := rng.IntN(classes)
		labels[i] = uint8(k)
		dy, dx := rng.IntN(H), rng.IntN(W)
		t := tmpl[k*size : (k+1)*size]
		dst := pix[i*size : (i+1)*size]
		var bits uint64
		nb := 0
		for y := 0; y < H; y++ {
			sy := (y + dy) % H
			for x := 0; x < W; x++ {
				s := t[(sy*W+(x+dx)%W)*C:]
				for c := 0; c < C; c++ {
					if nb == 0 {
						bits, nb = rng.Uint64(), 8
					}
					noise := float32(int(bits&63) - 32)
					bits >>= 8
					nb--
					v := s[c] + noise
					dst[(y*W+x)*C+c] = uint8(min(max(v, 0), 255))
				}
			}
		}
	}
	d, err := NewImages(shape, classes, pix, labels)
	if err != nil {
		panic("data: NewSynthetic: " + err.Error()) // unreachable: sizes agree by construction
	}
	return d
}
