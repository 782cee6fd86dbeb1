package data

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// randImage returns an image of shape s with pixels from seed.
func randImage(s Shape, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 99))
	p := make([]byte, s.Size())
	for i := range p {
		p[i] = byte(r.UintN(256))
	}
	return p
}

// apply runs one transform with a scratch seeded for (seed, 0, i).
func apply(t Transform, src []byte, in Shape, seed uint64, i int) ([]byte, Shape) {
	out, err := t.Out(in)
	if err != nil {
		panic(err)
	}
	dst := make([]byte, out.Size())
	s := NewScratch()
	s.Seed(seed, 0, i)
	got := t.Apply(dst, src, in, s)
	if got != out {
		panic(fmt.Sprintf("%s: Apply shape %v, Out %v", t, got, out))
	}
	return dst, out
}

func TestFlip(t *testing.T) {
	in := Shape{5, 7, 3}
	src := randImage(in, 1)
	once, _ := apply(Flip(1), src, in, 1, 0)
	twice, _ := apply(Flip(1), once, in, 1, 0)
	if !bytes.Equal(twice, src) {
		t.Error("flip twice is not the identity")
	}
	if bytes.Equal(once, src) {
		t.Error("flip(1) left the image unchanged")
	}
	// Reference: pixel (y, x) comes from (y, W-1-x).
	for y := 0; y < in.H; y++ {
		for x := 0; x < in.W; x++ {
			for c := 0; c < in.C; c++ {
				if once[(y*in.W+x)*3+c] != src[(y*in.W+in.W-1-x)*3+c] {
					t.Fatalf("flip (%d,%d,%d) wrong", y, x, c)
				}
			}
		}
	}
	if none, _ := apply(Flip(0), src, in, 1, 0); !bytes.Equal(none, src) {
		t.Error("flip(0) changed the image")
	}
	// flip(0.5) flips about half the samples.
	flips := 0
	for i := 0; i < 1000; i++ {
		if out, _ := apply(Flip(0.5), src, in, 7, i); !bytes.Equal(out, src) {
			flips++
		}
	}
	if flips < 430 || flips > 570 {
		t.Errorf("flip(0.5) flipped %d of 1000", flips)
	}
}

func TestCrop(t *testing.T) {
	in := Shape{6, 5, 2}
	src := randImage(in, 2)
	for _, tr := range []Transform{RandomCrop(0, 0, 0), RandomCrop(0, 6, 5), CenterCrop(6, 5)} {
		if out, _ := apply(tr, src, in, 3, 0); !bytes.Equal(out, src) {
			t.Errorf("%s of the same size is not the identity", tr)
		}
	}
	// Reference: every random crop is some window of the zero-padded image.
	const pad = 2
	ph, pw := in.H+2*pad, in.W+2*pad
	padded := make([]byte, ph*pw*in.C)
	for y := 0; y < in.H; y++ {
		copy(padded[((y+pad)*pw+pad)*in.C:], src[y*in.W*in.C:(y+1)*in.W*in.C])
	}
	offsets := map[[2]int]bool{}
	for i := 0; i < 300; i++ {
		out, os := apply(RandomCrop(pad, 4, 5), src, in, 4, i)
		found := false
		for y0 := 0; y0+os.H <= ph && !found; y0++ {
			for x0 := 0; x0+os.W <= pw && !found; x0++ {
				ok := true
				for y := 0; y < os.H && ok; y++ {
					a := padded[((y0+y)*pw+x0)*in.C : ((y0+y)*pw+x0+os.W)*in.C]
					ok = bytes.Equal(a, out[y*os.W*in.C:(y+1)*os.W*in.C])
				}
				if ok {
					found = true
					offsets[[2]int{y0, x0}] = true
				}
			}
		}
		if !found {
			t.Fatalf("crop %d is no window of the padded image", i)
		}
	}
	if want := (ph - 4 + 1) * (pw - 5 + 1); len(offsets) != want {
		t.Errorf("random crop reached %d of %d offsets", len(offsets), want)
	}
	cc, _ := apply(CenterCrop(2, 3), src, in, 0, 0)
	for y := 0; y < 2; y++ {
		if !bytes.Equal(cc[y*3*2:(y+1)*3*2], src[((y+2)*in.W+1)*2:((y+2)*in.W+4)*2]) {
			t.Fatalf("center crop row %d wrong", y)
		}
	}
}

func TestBlur(t *testing.T) {
	in := Shape{9, 8, 3}
	con := bytes.Repeat([]byte{17, 200, 255}, 9*8)
	for _, sigma := range []float64{0, 0.5, 1, 2.5} {
		if out, _ := apply(Blur(sigma), con, in, 0, 0); !bytes.Equal(out, con) {
			t.Errorf("blur %g of a constant image is not constant", sigma)
		}
	}
	src := randImage(in, 5)
	if out, _ := apply(Blur(0), src, in, 0, 0); !bytes.Equal(out, src) {
		t.Error("blur 0 is not the identity")
	}
	// Reference: direct 2-D Gaussian with clamped edges, in float64.
	const sigma = 1.2
	out, _ := apply(Blur(sigma), src, in, 0, 0)
	r := int(math.Ceil(3 * sigma))
	var norm float64
	for dy := -r; dy <= r; dy++ {
		for dx := -r; dx <= r; dx++ {
			norm += math.Exp(-float64(dx*dx+dy*dy) / (2 * sigma * sigma))
		}
	}
	for y := 0; y < in.H; y++ {
		for x := 0; x < in.W; x++ {
			for c := 0; c < in.C; c++ {
				var v float64
				for dy := -r; dy <= r; dy++ {
					for dx := -r; dx <= r; dx++ {
						sy, sx := min(max(y+dy, 0), in.H-1), min(max(x+dx, 0), in.W-1)
						v += math.Exp(-float64(dx*dx+dy*dy)/(2*sigma*sigma)) * float64(src[(sy*in.W+sx)*3+c])
					}
				}
				if d := math.Abs(v/norm - float64(out[(y*in.W+x)*3+c])); d > 0.51 {
					t.Fatalf("blur (%d,%d,%d) = %d, reference %.2f", y, x, c, out[(y*in.W+x)*3+c], v/norm)
				}
			}
		}
	}
}

func TestRotate(t *testing.T) {
	in := Shape{7, 9, 3}
	src := randImage(in, 6)
	for _, m := range []Interp{Nearest, Bilinear} {
		for i := 0; i < 5; i++ {
			if out, _ := apply(Rotate(0, m), src, in, 1, i); !bytes.Equal(out, src) {
				t.Errorf("rotation by 0 (%v) is not the identity", m)
			}
		}
	}
	// A small rotation keeps the centre pixel and a constant interior.
	con := bytes.Repeat([]byte{90}, 15*15)
	out, _ := apply(Rotate(10, Bilinear), con, Shape{15, 15, 1}, 1, 3)
	if out[7*15+7] != 90 || out[5*15+9] != 90 {
		t.Errorf("rotated constant image: centre %d, interior %d", out[7*15+7], out[5*15+9])
	}
	// Different samples get different angles.
	in = Shape{31, 31, 1}
	src = randImage(in, 6)
	a, _ := apply(Rotate(10, Nearest), src, in, 1, 1)
	b, _ := apply(Rotate(10, Nearest), src, in, 1, 2)
	c, _ := apply(Rotate(10, Nearest), src, in, 1, 1)
	if !bytes.Equal(a, c) {
		t.Error("same seed and sample gave different rotations")
	}
	if bytes.Equal(a, b) {
		t.Error("samples 1 and 2 got the same rotation")
	}
}

func TestResize(t *testing.T) {
	in := Shape{4, 6, 3}
	src := randImage(in, 7)
	for _, m := range []Interp{Nearest, Bilinear} {
		if out, _ := apply(Resize(4, 6, m), src, in, 0, 0); !bytes.Equal(out, src) {
			t.Errorf("resize (%v) to the same size is not the identity", m)
		}
		con := bytes.Repeat([]byte{3, 77, 250}, 4*6)
		if out, _ := apply(Resize(9, 5, m), con, in, 0, 0); !bytes.Equal(out, bytes.Repeat([]byte{3, 77, 250}, 9*5)) {
			t.Errorf("resize (%v) of a constant image is not constant", m)
		}
	}
	// Nearest 2x up-sampling repeats each pixel in a 2x2 block.
	up, _ := apply(Resize(8, 12, Nearest), src, in, 0, 0)
	for y := 0; y < 8; y++ {
		for x := 0; x < 12; x++ {
			if !bytes.Equal(up[(y*12+x)*3:(y*12+x)*3+3], src[((y/2)*6+x/2)*3:((y/2)*6+x/2)*3+3]) {
				t.Fatalf("nearest up-sampling wrong at (%d,%d)", y, x)
			}
		}
	}
	// Bilinear 2x down-sampling of a 2x2-block image averages the blocks:
	// output centres fall between the four pixels of a block.
	down, _ := apply(Resize(2, 3, Bilinear), up, Shape{8, 12, 3}, 0, 0)
	for i := range down {
		y, x, c := i/9, (i/3)%3, i%3
		var s float64
		for dy := 0; dy < 2; dy++ {
			for dx := 0; dx < 2; dx++ {
				s += float64(src[((2*y+dy)*6+2*x+dx)*3+c])
			}
		}
		if d := math.Abs(float64(down[i]) - s/4); d > 0.51 {
			t.Fatalf("bilinear down-sampling %d: %d, want %.2f", i, down[i], s/4)
		}
	}
}

func TestPipelineShapes(t *testing.T) {
	in := Shape{10, 10, 3}
	p, err := NewPipeline(in, []Transform{Resize(12, 14, Bilinear), CenterCrop(11, 12), RandomCrop(2, 8, 8), Flip(0.5)})
	if err != nil {
		t.Fatal(err)
	}
	if p.Out() != (Shape{8, 8, 3}) || p.In() != in {
		t.Errorf("pipeline %v -> %v", p.In(), p.Out())
	}
	for _, c := range []struct {
		ts   []Transform
		want string
	}{
		{[]Transform{CenterCrop(11, 2)}, "center_crop=11x2"},
		{[]Transform{Flip(1), RandomCrop(1, 13, 5)}, "crop_pad=1:13x5"},
	} {
		if _, err := NewPipeline(in, c.ts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one naming %q", c.ts, err, c.want)
		}
	}
}

func TestParseTransforms(t *testing.T) {
	ts, err := ParseTransforms([]string{"crop_pad=4", "flip,rotate_deg=10:nearest", "blur_sigma=0.5", "resize=32x30:nearest", "center_crop=28", "flip=1", "crop_pad=0:3x4"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tr := range ts {
		names = append(names, tr.String())
	}
	got := strings.Join(names, ",")
	want := "crop_pad=4,flip,rotate_deg=10:nearest,blur_sigma=0.5,resize=32x30:nearest,center_crop=28x28,flip=1,crop_pad=0:3x4"
	if got != want {
		t.Errorf("parsed %s\nwant   %s", got, want)
	}
	// String round-trips.
	again, err := ParseTransforms([]string{got})
	if err != nil || len(again) != len(ts) {
		t.Fatalf("round trip: %v", err)
	}
	for _, c := range []struct{ spec, want string }{
		{"crop_pad", "crop_pad needs a value"},
		{"crop_pad=-1", "crop_pad"},
		{"rotate_deg=200", "rotate_deg"},
		{"rotate_deg=5:cubic", "cubic"},
		{"blur_sigma=x", "blur_sigma"},
		{"resize=0x3", "size"},
		{"flip=2", "flip probability"},
		{"sharpen=1", "unknown transform \"sharpen\""},
	} {
		if _, err := ParseTransforms([]string{c.spec}); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.spec) {
			t.Errorf("%s: error %v, want one containing %q and the spec", c.spec, err, c.want)
		}
	}
}

func TestTransformConfig(t *testing.T) {
	ts, err := TransformConfig{Resize: []int{36}, CenterCrop: []int{34, 34}, CropPad: 4, Crop: []int{32, 32}, Flip: true, RotateDeg: 10, BlurSigma: 0.5, Interp: "nearest"}.Transforms()
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPipeline(Shape{40, 40, 3}, ts)
	if err != nil {
		t.Fatal(err)
	}
	if s := p.String(); s != "resize=36x36:nearest,center_crop=34x34,crop_pad=4:32x32,rotate_deg=10:nearest,flip,blur_sigma=0.5" {
		t.Errorf("chain %s", s)
	}
	if ts, err := (TransformConfig{}).Transforms(); err != nil || len(ts) != 0 {
		t.Errorf("zero config: %v %v", ts, err)
	}
	for _, c := range []struct {
		cfg TransformConfig
		key string
	}{
		{TransformConfig{CropPad: -1}, "crop_pad:"},
		{TransformConfig{Crop: []int{1, 2, 3}}, "crop:"},
		{TransformConfig{Resize: []int{0, 3}}, "resize:"},
		{TransformConfig{CenterCrop: []int{}}, "center_crop:"},
		{TransformConfig{RotateDeg: -3}, "rotate_deg:"},
		{TransformConfig{RotateDeg: math.NaN()}, "rotate_deg:"},
		{TransformConfig{BlurSigma: 100}, "blur_sigma:"},
		{TransformConfig{Interp: "cubic"}, "interp:"},
	} {
		if _, err := c.cfg.Transforms(); err == nil || !strings.HasPrefix(err.Error(), c.key) {
			t.Errorf("%+v: error %v, want one starting %q", c.cfg, err, c.key)
		}
	}
}

func heavyChain() []Transform {
	return []Transform{Resize(14, 14, Bilinear), RandomCrop(4, 12, 12), Flip(0.5), Rotate(15, Bilinear), Blur(1)}
}

func TestPipelineNoAlloc(t *testing.T) {
	in := Shape{12, 12, 3}
	p, err := NewPipeline(in, heavyChain())
	if err != nil {
		t.Fatal(err)
	}
	src, dst := randImage(in, 8), make([]byte, p.Out().Size())
	s := NewScratch()
	i := 0
	if a := testing.AllocsPerRun(50, func() {
		s.Seed(1, 2, i)
		i++
		p.Apply(dst, src, s)
	}); a != 0 {
		t.Errorf("Pipeline.Apply allocates %v times per sample", a)
	}
}

// FuzzTransforms runs the heavy chain and parsed specs on arbitrary shapes,
// seeds and pixels. Each transform's Apply returns the shape its Out
// promised, writes every byte of an output of that size (the result does
// not depend on what dst held) and nothing past it, leaves src alone, and
// is a function of the seed; the pipeline's output is the transforms'
// outputs chained.
func FuzzTransforms(f *testing.F) {
	f.Add(uint8(5), uint8(7), uint8(3), uint64(1), "crop_pad=2,flip,rotate_deg=30:nearest,blur_sigma=0.7", []byte{1, 2, 3})
	f.Add(uint8(1), uint8(1), uint8(1), uint64(2), "resize=3x2,center_crop=1", []byte{})
	f.Add(uint8(9), uint8(4), uint8(2), uint64(3), "crop_pad=1:6x3,flip=1,resize=5:nearest,blur_sigma=2", []byte{200, 7})
	f.Add(uint8(5), uint8(7), uint8(3), uint64(84), "crop_pad=1", []byte("0")) // a window into the left padding
	f.Fuzz(func(t *testing.T, h, w, c uint8, seed uint64, spec string, pix []byte) {
		in := Shape{int(h%40) + 1, int(w%40) + 1, int(c%4) + 1}
		ts, err := ParseTransforms([]string{spec})
		if err != nil {
			return
		}
		p, err := NewPipeline(in, ts)
		if err != nil || p.max > 1<<16 { // keep the fuzzer's images small
			return
		}
		src := make([]byte, in.Size())
		copy(src, pix)
		const guard = 64
		// run applies one transform into a dst prefilled with fill and
		// returns the output; it fails t on a broken promise.
		run := func(tr Transform, x []byte, sh Shape, fill byte) ([]byte, Shape) {
			out, err := tr.Out(sh)
			if err != nil {
				t.Fatalf("%s on %v: Out failed inside a checked pipeline: %v", tr, sh, err)
			}
			dst := bytes.Repeat([]byte{fill}, out.Size()+guard)
			keep := append([]byte(nil), x...)
			s := NewScratch()
			s.Seed(seed, 0, 0)
			if got := tr.Apply(dst, x, sh, s); got != out {
				t.Fatalf("%s on %v: Apply returned %v, Out promised %v", tr, sh, got, out)
			}
			if !bytes.Equal(dst[out.Size():], bytes.Repeat([]byte{fill}, guard)) {
				t.Fatalf("%s on %v: wrote past the promised %d bytes", tr, sh, out.Size())
			}
			if !bytes.Equal(x, keep) {
				t.Fatalf("%s on %v: modified its source", tr, sh)
			}
			return dst[:out.Size()], out
		}
		x, sh := src, in
		for _, tr := range ts {
			a, out := run(tr, x, sh, 0x00)
			b, _ := run(tr, x, sh, 0xff)
			if !bytes.Equal(a, b) {
				t.Fatalf("%s on %v: output depends on what dst held (not every byte written)", tr, sh)
			}
			x, sh = a, out
		}
		if sh != p.Out() {
			t.Fatalf("%s: chain ends at %v, pipeline promises %v", spec, sh, p.Out())
		}
		for _, fill := range []byte{0x00, 0xff} {
			dst := bytes.Repeat([]byte{fill}, p.Out().Size()+guard)
			s := NewScratch()
			s.Seed(seed, 0, 0)
			p.Apply(dst, src, s)
			// The pipeline reseeds nothing between transforms: one stream
			// runs through the chain. Compare with the chain run on one
			// scratch.
			want := chainOnOneScratch(ts, src, in, seed)
			if !bytes.Equal(dst[:p.Out().Size()], want) {
				t.Fatalf("%s: pipeline output differs from its transforms applied in turn", spec)
			}
			if !bytes.Equal(dst[p.Out().Size():], bytes.Repeat([]byte{fill}, guard)) {
				t.Fatalf("%s: pipeline wrote past its %v output", spec, p.Out())
			}
		}
	})
}

// chainOnOneScratch applies ts in turn with one scratch seeded once, as a
// Pipeline does, into fresh buffers.
func chainOnOneScratch(ts []Transform, src []byte, in Shape, seed uint64) []byte {
	s := NewScratch()
	s.Seed(seed, 0, 0)
	x := append([]byte(nil), src...)
	for _, t := range ts {
		out, _ := t.Out(in)
		dst := make([]byte, out.Size())
		t.Apply(dst, x, in, s)
		x, in = dst, out
	}
	return x
}

// Evaluation chains keep the preprocessing and the training chain's
// output shape, and drop the randomness.
func TestEvalTransforms(t *testing.T) {
	in := Shape{10, 10, 3}
	for _, c := range []struct{ train, eval string }{
		{"", ""},
		{"flip,rotate_deg=10,blur_sigma=1", ""},
		{"crop_pad=4,flip", ""},
		{"resize=14x14,crop_pad=2:12x12,flip", "resize=14x14,center_crop=12x12"},
		{"center_crop=8x8,rotate_deg=5", "center_crop=8x8"},
	} {
		ts, err := ParseTransforms([]string{c.train})
		if err != nil {
			t.Fatal(err)
		}
		ev, err := EvalTransforms(ts, in)
		if err != nil {
			t.Fatalf("%s: %v", c.train, err)
		}
		pt, _ := NewPipeline(in, ts)
		pe, err := NewPipeline(in, ev)
		if err != nil || pe.Out() != pt.Out() {
			t.Errorf("%s: eval chain gives %v, training chain %v (%v)", c.train, pe.Out(), pt.Out(), err)
		}
		if got := pe.String(); got != c.eval && !(c.eval == "" && got == "none") {
			t.Errorf("%s: eval chain %s, want %s", c.train, got, c.eval)
		}
	}
	if _, err := EvalTransforms([]Transform{RandomCrop(2, 12, 12)}, in); err == nil || !strings.Contains(err.Error(), "crop_pad=2:12x12") {
		t.Errorf("window larger than the image: %v", err)
	}
}
