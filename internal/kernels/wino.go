package kernels

import "fmt"

// Wino computes a 3x3, stride-1, pad-1 convolution on NHWC float32
// samples (C input channels, O output channels, weights (O, 3, 3, C) as in
// the model's parameters) by Winograd's minimal filtering F(2x2, 3x3):
// 16 multiplications per 2x2 tile of outputs and channel pair where the
// direct convolution does 36. Its three passes (forward, backward data,
// weight gradient) are the float32 convolution oneDNN's Winograd gives
// where oneDNN has none (oneDNN 2.6's is for AVX-512 only): on a CPU with
// AVX2 its products run a register-blocked AVX2 kernel. It rounds
// differently from the direct convolution: the transforms add error of
// order 1e-7 relative to the outputs' scale. For a given input the result
// does not depend on anything but n (the tiles are summed in order).
//
// A Wino holds the transformed filters of the last weights it saw and
// its scratch; it is not safe for concurrent use (one per worker).
type Wino struct {
	g            Window
	o            int
	u, ub        []float32 // filters transformed for forward (16, C, O) and backward data (16, O, C)
	ugen, ubgen  uint64    // the gen each was made for; 0 none
	du           []float32 // sums of the weight gradient: (16, O, C); the Go twin's (16, C, O)
	v, m         []float32 // a block of tiles' transforms (16, tiles, channels)
	zeros, spill []float32 // a pixel of zeros to read, one to write
}

// WinoFits reports whether NewWino takes window g with o output channels:
// 3x3, stride 1, padding 1 (output the input's size), input and output
// channels multiples of 16.
func WinoFits(g Window, o int) bool {
	return g.K == 3 && g.S == 1 && g.P == 1 && g.Ho == g.H && g.Wo == g.W && g.H > 0 && g.W > 0 &&
		g.C > 0 && g.C%16 == 0 && o > 0 && o%16 == 0
}

// NewWino makes the convolution of window g to o output channels, or
// says why it cannot (see WinoFits).
func NewWino(g Window, o int) (*Wino, error) {
	if !WinoFits(g, o) {
		return nil, fmt.Errorf("kernels: Winograd F(2x2, 3x3) needs a 3x3, stride-1, pad-1 window and channels in 16s: %+v to %d", g, o)
	}
	c, t := max(g.C, o), winoTiles()
	return &Wino{g: g, o: o,
		u: make([]float32, 16*g.C*o), ub: make([]float32, 16*g.C*o), du: make([]float32, 16*g.C*o),
		v: make([]float32, 16*t*c), m: make([]float32, 16*t*c), zeros: make([]float32, c), spill: make([]float32, c),
	}, nil
}

// samples returns the number of samples in x of per values each, or
// panics when x is not whole samples or y not the matching size.
func (k *Wino) samples(op string, x []float32, per int, y []float32, yper int) int {
	n := len(x) / per
	if len(x) != n*per || len(y) != n*yper {
		panic(fmt.Sprintf("kernels: Wino.%s %+v to %d: %d and %d values, not whole samples of %d and %d", op, k.g, k.o, len(x), len(y), per, yper))
	}
	return n
}

func (k *Wino) checkW(op string, w []float32) {
	if len(w) != 9*k.g.C*k.o {
		panic(fmt.Sprintf("kernels: Wino.%s %+v to %d: %d weights, want %d", op, k.g, k.o, len(w), 9*k.g.C*k.o))
	}
}

// ForwardGen sets y (n, H, W, O) to the convolution of x (n, H, W, C)
// with w. gen names w's contents as in dnnl.Conv: a call with the nonzero
// gen of the previous call reuses the filters transformed then; 0 always
// transforms.
func (k *Wino) ForwardGen(x, w, y []float32, gen uint64) {
	g := k.g
	n := k.samples("Forward", x, g.In(), y, g.H*g.W*k.o)
	k.checkW("Forward", w)
	if gen == 0 || gen != k.ugen {
		winoFilters(g.C, k.o, w, false, k.u)
		k.ugen = gen
	}
	winoConv(n, g.H, g.W, g.C, k.o, x, k.u, y, k.v, k.m, k.zeros, k.spill)
}

// BackwardDataGen sets dx (n, H, W, C) to the gradient of the input given
// dy (n, H, W, O): the convolution of dy with the rotated filters, input
// and output channels swapped. gen as in ForwardGen.
func (k *Wino) BackwardDataGen(dy, w, dx []float32, gen uint64) {
	g := k.g
	n := k.samples("BackwardData", dy, g.H*g.W*k.o, dx, g.In())
	k.checkW("BackwardData", w)
	if gen == 0 || gen != k.ubgen {
		winoFilters(g.C, k.o, w, true, k.ub)
		k.ubgen = gen
	}
	winoConv(n, g.H, g.W, k.o, g.C, dy, k.ub, dx, k.v, k.m, k.zeros, k.spill)
}

// BackwardWeights sets dw (O, 3, 3, C) to the gradient of the weights
// given x (n, H, W, C) and dy (n, H, W, O).
func (k *Wino) BackwardWeights(x, dy, dw []float32) {
	g := k.g
	n := k.samples("BackwardWeights", x, g.In(), dy, g.H*g.W*k.o)
	k.checkW("BackwardWeights", dw)
	winoWeights(n, g.H, g.W, g.C, k.o, x, dy, dw, k.du, k.v, k.m, k.zeros)
}

// Close does nothing: a Wino holds only Go memory. It is there so that a
// Wino can stand where a dnnl.Conv does.
func (k *Wino) Close() {}

// The Go twins of the C passes (the kernels under purego; the tests hold
// both to a float64 direct convolution).

// goWinoTiles is the C side's block of tiles (WB).
const goWinoTiles = 48

func goWinoFilters(c, o int, w []float32, flip bool, u []float32) {
	for oc := 0; oc < o; oc++ {
		for ic := 0; ic < c; ic++ {
			var g [3][3]float32
			var r [4][3]float32
			for i := 0; i < 3; i++ {
				for j := 0; j < 3; j++ {
					if flip {
						g[i][j] = w[oc*9*c+((2-i)*3+2-j)*c+ic]
					} else {
						g[i][j] = w[oc*9*c+(i*3+j)*c+ic]
					}
				}
			}
			for j := 0; j < 3; j++ {
				r[0][j] = g[0][j]
				r[1][j] = 0.5 * (g[0][j] + g[1][j] + g[2][j])
				r[2][j] = 0.5 * (g[0][j] - g[1][j] + g[2][j])
				r[3][j] = g[2][j]
			}
			for i := 0; i < 4; i++ {
				q := [4]float32{r[i][0], 0.5 * (r[i][0] + r[i][1] + r[i][2]), 0.5 * (r[i][0] - r[i][1] + r[i][2]), r[i][2]}
				for j, v := range q {
					p := 4*i + j
					if flip {
						u[p*o*c+oc*c+ic] = v
					} else {
						u[p*c*o+ic*o+oc] = v
					}
				}
			}
		}
	}
}

// goTile returns tile t's sample and top-left output pixel.
func goTile(t, h, w int) (s, y0, x0 int) {
	th, tw := (h+1)/2, (w+1)/2
	r := t % (th * tw)
	return t / (th * tw), 2 * (r / tw), 2 * (r % tw)
}

// goWinoIn sets v (16 x c) to B^T d B of tile t of x.
func goWinoIn(t, h, w, c int, x []float32, v []float32) {
	s, y0, x0 := goTile(t, h, w)
	px := func(i, j, k int) float32 {
		iy, ix := y0-1+i, x0-1+j
		if iy < 0 || iy >= h || ix < 0 || ix >= w {
			return 0
		}
		return x[((s*h+iy)*w+ix)*c+k]
	}
	for k := 0; k < c; k++ {
		var tt [4][4]float32
		for j := 0; j < 4; j++ {
			d0, d1, d2, d3 := px(0, j, k), px(1, j, k), px(2, j, k), px(3, j, k)
			tt[0][j], tt[1][j], tt[2][j], tt[3][j] = d0-d2, d1+d2, d2-d1, d1-d3
		}
		for i := 0; i < 4; i++ {
			a := tt[i]
			v[(4*i)*c+k], v[(4*i+1)*c+k], v[(4*i+2)*c+k], v[(4*i+3)*c+k] = a[0]-a[2], a[1]+a[2], a[2]-a[1], a[1]-a[3]
		}
	}
}

func goWinoConv(n, h, w, c, o int, x, u, y, v, m, _, _ []float32) {
	tiles := n * ((h + 1) / 2) * ((w + 1) / 2)
	v, m = v[:16*c], m[:16*o]
	for t := 0; t < tiles; t++ {
		goWinoIn(t, h, w, c, x, v)
		for p := 0; p < 16; p++ {
			mp := m[p*o : (p+1)*o]
			clear(mp)
			for k := 0; k < c; k++ {
				a := v[p*c+k]
				for j, b := range u[(p*c+k)*o : (p*c+k+1)*o] {
					mp[j] += a * b
				}
			}
		}
		s, y0, x0 := goTile(t, h, w)
		for k := 0; k < o; k++ {
			var r [2][4]float32
			for j := 0; j < 4; j++ {
				m0, m1, m2, m3 := m[j*o+k], m[(4+j)*o+k], m[(8+j)*o+k], m[(12+j)*o+k]
				r[0][j], r[1][j] = m0+m1+m2, m1-m2-m3
			}
			for i := 0; i < 2; i++ {
				for j, val := range [2]float32{r[i][0] + r[i][1] + r[i][2], r[i][1] - r[i][2] - r[i][3]} {
					if oy, ox := y0+i, x0+j; oy < h && ox < w {
						y[((s*h+oy)*w+ox)*o+k] = val
					}
				}
			}
		}
	}
}

func goWinoWeights(n, h, w, c, o int, x, dy, dw, du, v, z, _ []float32) {
	tiles := n * ((h + 1) / 2) * ((w + 1) / 2)
	v, z, du = v[:16*c], z[:16*o], du[:16*c*o]
	clear(du)
	for t := 0; t < tiles; t++ {
		goWinoIn(t, h, w, c, x, v)
		s, y0, x0 := goTile(t, h, w)
		g := func(i, j, k int) float32 {
			if oy, ox := y0+i, x0+j; oy < h && ox < w {
				return dy[((s*h+oy)*w+ox)*o+k]
			}
			return 0
		}
		for k := 0; k < o; k++ {
			y00, y01, y10, y11 := g(0, 0, k), g(0, 1, k), g(1, 0, k), g(1, 1, k)
			r := [4][2]float32{{y00, y01}, {y00 + y10, y01 + y11}, {y00 - y10, y01 - y11}, {-y10, -y11}}
			for i := 0; i < 4; i++ {
				a, b := r[i][0], r[i][1]
				z[(4*i)*o+k], z[(4*i+1)*o+k], z[(4*i+2)*o+k], z[(4*i+3)*o+k] = a, a+b, a-b, -b
			}
		}
		for p := 0; p < 16; p++ {
			for ic := 0; ic < c; ic++ {
				a := v[p*c+ic]
				row := du[(p*c+ic)*o : (p*c+ic+1)*o]
				for j, b := range z[p*o : (p+1)*o] {
					row[j] += a * b
				}
			}
		}
	}
	for oc := 0; oc < o; oc++ {
		for ic := 0; ic < c; ic++ {
			var s [4][4]float32
			var r [3][4]float32
			for p := 0; p < 16; p++ {
				s[p/4][p%4] = du[(p*c+ic)*o+oc]
			}
			for j := 0; j < 4; j++ {
				r[0][j] = s[0][j] + 0.5*(s[1][j]+s[2][j])
				r[1][j] = 0.5 * (s[1][j] - s[2][j])
				r[2][j] = 0.5*(s[1][j]+s[2][j]) + s[3][j]
			}
			for i := 0; i < 3; i++ {
				g := dw[oc*9*c+i*3*c+ic:]
				g[0] = r[i][0] + 0.5*(r[i][1]+r[i][2])
				g[c] = 0.5 * (r[i][1] - r[i][2])
				g[2*c] = 0.5*(r[i][1]+r[i][2]) + r[i][3]
			}
		}
	}
}
