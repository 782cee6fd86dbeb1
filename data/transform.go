package data

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Transform is one step of a per-sample augmentation pipeline on uint8
// images stored (H, W, C).
//
// Out reports the shape Apply produces from an input of shape in, or an
// error when the transform cannot take that input (a crop larger than the
// image). It depends only on in, never on randomness, so that every sample
// of a batch has the same shape.
//
// Apply writes the transformed src (shape in) into dst and returns the
// output shape, equal to Out(in). dst and src do not overlap; len(dst) is
// at least Out(in).Size(). All randomness comes from s.Rand, which the
// caller has seeded for this sample (see Scratch.Seed): the result is a
// function of (src, the seed) alone. Apply must not allocate; floating
// point scratch space comes from s.Floats.
//
// A Transform holds only its parameters and is safe for concurrent use by
// workers that each own a Scratch.
type Transform interface {
	Out(in Shape) (Shape, error)
	Apply(dst, src []byte, in Shape, s *Scratch) Shape
	// String is the transform in the ParseTransforms syntax.
	String() string
}

// Scratch is one worker's state for applying transforms: a random source
// reseeded before each sample and buffers reused from sample to sample.
// It is not safe for concurrent use; each loader worker owns one.
type Scratch struct {
	Rand *rand.Rand // the sample's random stream, seeded by Seed
	pcg  *rand.PCG
	f32  []float32
	a, b []byte // pipeline ping-pong buffers
}

// NewScratch returns an empty Scratch; its buffers grow on first use.
func NewScratch() *Scratch {
	pcg := rand.NewPCG(0, 0)
	return &Scratch{Rand: rand.New(pcg), pcg: pcg}
}

// Seed makes s.Rand the random stream of sample i in epoch under seed. The
// stream depends on nothing else: not on the worker, the batch or the rank
// that processes the sample.
func (s *Scratch) Seed(seed uint64, epoch, i int) {
	s.pcg.Seed(seed, splitmix(splitmix(uint64(epoch))^uint64(i)))
}

// Floats returns a float32 buffer of length n, reused between calls (its
// contents are undefined). It allocates only when n exceeds every earlier n.
func (s *Scratch) Floats(n int) []float32 {
	if cap(s.f32) < n {
		s.f32 = make([]float32, n)
	}
	return s.f32[:n]
}

// splitmix is the SplitMix64 finaliser (Steele, Lea and Flood 2014): a
// bijection that spreads nearby inputs (consecutive epochs, indices) over
// all 64 bits before they seed PCG.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Pipeline is a fixed chain of transforms checked against an input shape.
type Pipeline struct {
	ts     []Transform
	shapes []Shape // shapes[k] is the input of ts[k]; shapes[len(ts)] the output
	max    int     // largest intermediate size
}

// NewPipeline checks that ts can be applied in order to samples of shape
// in and returns the chain. An empty chain copies its input.
func NewPipeline(in Shape, ts []Transform) (*Pipeline, error) {
	if in.H < 1 || in.W < 1 || in.C < 1 {
		return nil, fmt.Errorf("transforms: input shape %v is empty", in)
	}
	p := &Pipeline{ts: append([]Transform(nil), ts...), shapes: []Shape{in}, max: in.Size()}
	for _, t := range ts {
		out, err := t.Out(in)
		if err != nil {
			return nil, fmt.Errorf("transform %s on %dx%dx%d: %w", t, in.H, in.W, in.C, err)
		}
		in = out
		p.shapes = append(p.shapes, in)
		p.max = max(p.max, in.Size())
	}
	return p, nil
}

// In is the shape the pipeline takes.
func (p *Pipeline) In() Shape { return p.shapes[0] }

// Out is the shape the pipeline produces.
func (p *Pipeline) Out() Shape { return p.shapes[len(p.shapes)-1] }

// Len is the number of transforms.
func (p *Pipeline) Len() int { return len(p.ts) }

// String lists the transforms in ParseTransforms syntax.
func (p *Pipeline) String() string {
	s := ""
	for i, t := range p.ts {
		if i > 0 {
			s += ","
		}
		s += t.String()
	}
	if s == "" {
		return "none"
	}
	return s
}

// Apply runs the chain on src (shape In) into dst (at least Out().Size()),
// drawing randomness from s.Rand, which the caller seeds per sample. After
// the first call with a given Scratch it allocates nothing.
func (p *Pipeline) Apply(dst, src []byte, s *Scratch) {
	n := len(p.ts)
	if n == 0 {
		copy(dst[:p.Out().Size()], src)
		return
	}
	if len(s.a) < p.max {
		s.a, s.b = make([]byte, p.max), make([]byte, p.max)
	}
	cur := src
	for k, t := range p.ts {
		out := s.a
		if k == n-1 {
			out = dst
		} else if k%2 == 1 {
			out = s.b
		}
		t.Apply(out, cur, p.shapes[k], s)
		cur = out
	}
}

// Interp is an interpolation rule for resampling.
type Interp int

const (
	Bilinear Interp = iota // weighted mean of the 4 nearest pixels
	Nearest                // the nearest pixel
)

func (m Interp) String() string {
	if m == Nearest {
		return "nearest"
	}
	return "bilinear"
}

// sample reads src (shape in) at real coordinates (y, x), pixel centres at
// integers, writing C channels to dst; outside the image reads as zero.
func sample(dst, src []byte, in Shape, y, x float64, m Interp) {
	c := in.C
	if m == Nearest {
		iy, ix := int(math.Floor(y+0.5)), int(math.Floor(x+0.5))
		if iy < 0 || iy >= in.H || ix < 0 || ix >= in.W {
			clear(dst[:c])
			return
		}
		copy(dst[:c], src[(iy*in.W+ix)*c:])
		return
	}
	fy, fx := math.Floor(y), math.Floor(x)
	y0, x0 := int(fy), int(fx)
	wy, wx := float32(y-fy), float32(x-fx)
	if y0 >= 0 && y0+1 < in.H && x0 >= 0 && x0+1 < in.W {
		// Inside: the four neighbours without per-read bounds tests.
		i := (y0*in.W + x0) * c
		p00, p01 := src[i:i+c], src[i+c:i+2*c]
		j := i + in.W*c
		p10, p11 := src[j:j+c], src[j+c:j+2*c]
		for ch := 0; ch < c; ch++ {
			v := (1-wy)*((1-wx)*float32(p00[ch])+wx*float32(p01[ch])) +
				wy*((1-wx)*float32(p10[ch])+wx*float32(p11[ch]))
			dst[ch] = uint8(v + 0.5)
		}
		return
	}
	for ch := 0; ch < c; ch++ {
		v := (1-wy)*((1-wx)*pix(src, in, y0, x0, ch)+wx*pix(src, in, y0, x0+1, ch)) +
			wy*((1-wx)*pix(src, in, y0+1, x0, ch)+wx*pix(src, in, y0+1, x0+1, ch))
		dst[ch] = uint8(v + 0.5)
	}
}

// pix is src[y, x, ch] as float32, zero outside the image.
func pix(src []byte, in Shape, y, x, ch int) float32 {
	if y < 0 || y >= in.H || x < 0 || x >= in.W {
		return 0
	}
	return float32(src[(y*in.W+x)*in.C+ch])
}

// resize scales src (shape in) to out.H x out.W with the same channels.
// Pixel centres are aligned (align_corners=false, as PIL and PyTorch): the
// output pixel x samples the input at (x+0.5)*in.W/out.W - 0.5, clamped to
// the image so that borders do not fade. Same size is an exact copy. It does
// not low-pass filter before shrinking: large reductions alias.
func resize(dst, src []byte, in, out Shape, m Interp) {
	if in.H == out.H && in.W == out.W {
		copy(dst[:out.Size()], src[:in.Size()])
		return
	}
	sy, sx := float64(in.H)/float64(out.H), float64(in.W)/float64(out.W)
	c := in.C
	for y := 0; y < out.H; y++ {
		fy := clampf((float64(y)+0.5)*sy-0.5, 0, float64(in.H-1))
		for x := 0; x < out.W; x++ {
			fx := clampf((float64(x)+0.5)*sx-0.5, 0, float64(in.W-1))
			if m == Nearest {
				// Nearest picks the input pixel whose cell holds the
				// output centre.
				fy = math.Min(math.Floor((float64(y)+0.5)*sy), float64(in.H-1))
				fx = math.Min(math.Floor((float64(x)+0.5)*sx), float64(in.W-1))
			}
			sample(dst[(y*out.W+x)*c:], src, in, fy, fx, m)
		}
	}
}

func clampf(v, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, v)) }

// Resize returns a transform that scales samples to h x w.
func Resize(h, w int, m Interp) Transform {
	if h < 1 || w < 1 {
		panic("data: Resize to an empty size")
	}
	return resizeT{h, w, m}
}

type resizeT struct {
	h, w int
	m    Interp
}

func (t resizeT) Out(in Shape) (Shape, error) { return Shape{t.h, t.w, in.C}, nil }
func (t resizeT) Apply(dst, src []byte, in Shape, _ *Scratch) Shape {
	out := Shape{t.h, t.w, in.C}
	resize(dst, src, in, out, t.m)
	return out
}
func (t resizeT) String() string {
	s := fmt.Sprintf("resize=%dx%d", t.h, t.w)
	if t.m == Nearest {
		s += ":nearest"
	}
	return s
}

// CenterCrop returns a transform that keeps the central h x w window.
func CenterCrop(h, w int) Transform {
	if h < 1 || w < 1 {
		panic("data: CenterCrop to an empty size")
	}
	return centerCrop{h, w}
}

type centerCrop struct{ h, w int }

func (t centerCrop) Out(in Shape) (Shape, error) {
	if t.h > in.H || t.w > in.W {
		return Shape{}, fmt.Errorf("center_crop %dx%d is larger than the image", t.h, t.w)
	}
	return Shape{t.h, t.w, in.C}, nil
}
func (t centerCrop) Apply(dst, src []byte, in Shape, _ *Scratch) Shape {
	out := Shape{t.h, t.w, in.C}
	crop(dst, src, in, out, (in.H-t.h)/2, (in.W-t.w)/2)
	return out
}
func (t centerCrop) String() string { return fmt.Sprintf("center_crop=%dx%d", t.h, t.w) }

// crop copies the out.H x out.W window of src whose top-left corner is at
// (y0, x0), which may lie outside the image (zero padding).
func crop(dst, src []byte, in, out Shape, y0, x0 int) {
	c := in.C
	row := out.W * c
	for y := 0; y < out.H; y++ {
		d := dst[y*row : (y+1)*row]
		sy := y0 + y
		if sy < 0 || sy >= in.H {
			clear(d)
			continue
		}
		// Columns [lo, hi) of the output read inside the image.
		lo, hi := max(0, -x0), min(out.W, in.W-x0)
		if lo >= hi {
			clear(d)
			continue
		}
		clear(d[:lo*c])
		copy(d[lo*c:hi*c], src[(sy*in.W+x0+lo)*c:])
		clear(d[hi*c:])
	}
}

// RandomCrop returns a transform that pads the image with pad zero pixels
// on every side and takes an h x w window at a uniformly random offset, as
// in the CIFAR-10 recipe of He et al. (2016) (pad 4, crop 32). h or w 0
// means the input's height or width.
func RandomCrop(pad, h, w int) Transform {
	if pad < 0 || h < 0 || w < 0 {
		panic("data: negative RandomCrop argument")
	}
	return randomCrop{pad, h, w}
}

type randomCrop struct{ pad, h, w int }

func (t randomCrop) size(in Shape) Shape {
	out := Shape{t.h, t.w, in.C}
	if out.H == 0 {
		out.H = in.H
	}
	if out.W == 0 {
		out.W = in.W
	}
	return out
}
func (t randomCrop) Out(in Shape) (Shape, error) {
	out := t.size(in)
	if out.H > in.H+2*t.pad || out.W > in.W+2*t.pad {
		return Shape{}, fmt.Errorf("crop %dx%d is larger than the padded image", out.H, out.W)
	}
	return out, nil
}
func (t randomCrop) Apply(dst, src []byte, in Shape, s *Scratch) Shape {
	out := t.size(in)
	// Offsets in the padded image, then shifted back to image coordinates.
	y0 := s.Rand.IntN(in.H+2*t.pad-out.H+1) - t.pad
	x0 := s.Rand.IntN(in.W+2*t.pad-out.W+1) - t.pad
	crop(dst, src, in, out, y0, x0)
	return out
}
func (t randomCrop) String() string {
	if t.h == 0 && t.w == 0 {
		return fmt.Sprintf("crop_pad=%d", t.pad)
	}
	return fmt.Sprintf("crop_pad=%d:%dx%d", t.pad, t.h, t.w)
}

// Flip returns a transform that mirrors the image left-right with
// probability p (1: always, useful in tests).
func Flip(p float64) Transform {
	if !(p >= 0 && p <= 1) {
		panic("data: Flip probability outside [0, 1]")
	}
	return flip{p}
}

type flip struct{ p float64 }

func (t flip) Out(in Shape) (Shape, error) { return in, nil }
func (t flip) Apply(dst, src []byte, in Shape, s *Scratch) Shape {
	// Always draw, so that the stream position after the flip does not
	// depend on p.
	if s.Rand.Float64() >= t.p {
		copy(dst[:in.Size()], src)
		return in
	}
	c := in.C
	for y := 0; y < in.H; y++ {
		row := y * in.W * c
		for x := 0; x < in.W; x++ {
			copy(dst[row+x*c:row+x*c+c], src[row+(in.W-1-x)*c:])
		}
	}
	return in
}
func (t flip) String() string {
	if t.p == 0.5 {
		return "flip"
	}
	return fmt.Sprintf("flip=%g", t.p)
}

// Rotate returns a transform that rotates the image about its centre by an
// angle drawn uniformly from [-maxDeg, maxDeg] degrees; corners that come
// from outside the image are zero.
func Rotate(maxDeg float64, m Interp) Transform {
	if !(maxDeg >= 0 && maxDeg <= 180) {
		panic("data: Rotate angle outside [0, 180]")
	}
	return rotate{maxDeg, m}
}

type rotate struct {
	deg float64
	m   Interp
}

func (t rotate) Out(in Shape) (Shape, error) { return in, nil }
func (t rotate) Apply(dst, src []byte, in Shape, s *Scratch) Shape {
	a := (2*s.Rand.Float64() - 1) * t.deg * math.Pi / 180
	if t.deg == 0 {
		a = 0
	}
	sin, cos := math.Sincos(a)
	cy, cx := float64(in.H-1)/2, float64(in.W-1)/2
	c := in.C
	// Inverse mapping: output pixel p reads the input at R(-a)(p-c)+c.
	for y := 0; y < in.H; y++ {
		dy := float64(y) - cy
		for x := 0; x < in.W; x++ {
			dx := float64(x) - cx
			sy := cy + cos*dy - sin*dx
			sx := cx + sin*dy + cos*dx
			sample(dst[(y*in.W+x)*c:], src, in, sy, sx, t.m)
		}
	}
	return in
}
func (t rotate) String() string {
	s := fmt.Sprintf("rotate_deg=%g", t.deg)
	if t.m == Nearest {
		s += ":nearest"
	}
	return s
}

// Blur returns a Gaussian blur of standard deviation sigma pixels: two
// separable passes with a kernel of radius ceil(3*sigma) whose weights sum
// to 1, edges clamped (a constant image stays constant). sigma 0 copies.
func Blur(sigma float64) Transform {
	if !(sigma >= 0 && sigma <= 64) {
		panic("data: Blur sigma outside [0, 64]")
	}
	r := int(math.Ceil(3 * sigma))
	k := make([]float32, 2*r+1)
	var sum float64
	w := make([]float64, len(k))
	for i := range w {
		d := float64(i - r)
		if sigma > 0 {
			w[i] = math.Exp(-d * d / (2 * sigma * sigma))
		} else {
			w[i] = 1
		}
		sum += w[i]
	}
	for i := range k {
		k[i] = float32(w[i] / sum)
	}
	return blur{sigma, r, k}
}

type blur struct {
	sigma float64
	r     int
	k     []float32 // (2r+1) weights
}

func (t blur) Out(in Shape) (Shape, error) { return in, nil }
func (t blur) Apply(dst, src []byte, in Shape, s *Scratch) Shape {
	if t.r == 0 {
		copy(dst[:in.Size()], src)
		return in
	}
	H, W, C, r := in.H, in.W, in.C, t.r
	row := W * C
	f := s.Floats(in.Size() + (W+2*r)*C + row)
	tmp := f[:in.Size()]                                    // (H, W, C) after the horizontal pass
	prow := f[in.Size() : in.Size()+(W+2*r)*C]              // (W+2r, C) one row, edges replicated
	acc := f[in.Size()+(W+2*r)*C : in.Size()+(W+2*r)*C+row] // (W, C)
	// Each pass is a sum of shifted rows, kernel weight times row: axpy
	// over contiguous slices, which the compiler keeps free of bounds checks.
	for y := 0; y < H; y++ {
		srow := src[y*row : (y+1)*row]
		for x := -r; x < W+r; x++ {
			sx := min(max(x, 0), W-1)
			for ch := 0; ch < C; ch++ {
				prow[(x+r)*C+ch] = float32(srow[sx*C+ch])
			}
		}
		out := tmp[y*row : (y+1)*row]
		clear(out)
		for j, w := range t.k {
			axpy(out, w, prow[j*C:])
		}
	}
	for y := 0; y < H; y++ {
		clear(acc)
		for j, w := range t.k {
			sy := min(max(y+j-r, 0), H-1)
			axpy(acc, w, tmp[sy*row:])
		}
		d := dst[y*row : (y+1)*row]
		for i, v := range acc {
			d[i] = uint8(min(max(v+0.5, 0), 255))
		}
	}
	return in
}

// axpy adds a*x to dst, element by element (len(x) >= len(dst)).
func axpy(dst []float32, a float32, x []float32) {
	x = x[:len(dst)]
	for i := range dst {
		dst[i] += a * x[i]
	}
}

func (t blur) String() string { return fmt.Sprintf("blur_sigma=%g", t.sigma) }
