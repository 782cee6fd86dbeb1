package model

// The rounding bounds of the bf16 Winograd convolution (kernels.Wino16).
// It rounds x (or dy) to bf16, then the transforms V = B^T d B (or
// Z = A dY A^T) and U = G g G^T, each to nearest (relative error at most
// u = 2^-8): a product of a rounded V and U is off by at most about 3u
// |V||U| in the passes with one rounded input, 4u in the weight gradient
// (two). Those errors then go through the output transform, so each
// output may be off by winoU times the same computation on absolute
// values: |B^T| |d| |B|, |G| |g| |G^T|, |A^T| (sum |U||V|) |A|. That sum
// includes products the exact Winograd cancels, so it can be several
// times the direct convolution's sum |x||w| (bf16Bound's).
const winoU = 1.01 * 4 * 0x1p-8

var (
	winoBT = [4][4]float64{{1, 0, 1, 0}, {0, 1, 1, 0}, {0, 1, 1, 0}, {0, 1, 0, 1}} // |B^T|
	winoG  = [4][3]float64{{1, 0, 0}, {.5, .5, .5}, {.5, .5, .5}, {0, 0, 1}}       // |G|
	winoAT = [2][4]float64{{1, 1, 1, 0}, {0, 1, 1, 1}}                             // |A^T|
)

// winoBounds returns, scaled by winoU, the absolute-value Winograd of the
// layer's forward (x, w), backward data (r, w rotated) and weight gradient
// (x, r), for n samples: the bounds on the bf16 Winograd's rounding.
func winoBounds(l *Conv2D, n int, x, p, r []float64) (y, dx, dw []float64) {
	g, o := l.win, l.out.C
	h, w, c := g.H, g.W, g.C
	th, tw := (h+1)/2, (w+1)/2
	// in returns |V| of tile (s, ty, tx), channel k of a (n, h, w, ch).
	in := func(a []float64, ch, s, ty, tx, k int) (v [4][4]float64) {
		var d [4][4]float64
		for i := 0; i < 4; i++ {
			for j := 0; j < 4; j++ {
				if iy, ix := 2*ty-1+i, 2*tx-1+j; iy >= 0 && iy < h && ix >= 0 && ix < w {
					d[i][j] = a[((s*h+iy)*w+ix)*ch+k]
				}
			}
		}
		for a := 0; a < 4; a++ {
			for b := 0; b < 4; b++ {
				for i := 0; i < 4; i++ {
					for j := 0; j < 4; j++ {
						v[a][b] += winoBT[a][i] * winoBT[b][j] * d[i][j]
					}
				}
			}
		}
		return v
	}
	// filt returns |U| of filter (oc, ic), rotated with flip.
	filt := func(oc, ic int, flip bool) (u [4][4]float64) {
		for a := 0; a < 4; a++ {
			for b := 0; b < 4; b++ {
				for i := 0; i < 3; i++ {
					for j := 0; j < 3; j++ {
						ki, kj := i, j
						if flip {
							ki, kj = 2-i, 2-j
						}
						u[a][b] += winoG[a][i] * winoG[b][j] * p[oc*9*c+(ki*3+kj)*c+ic]
					}
				}
			}
		}
		return u
	}
	// conv is the absolute-value Winograd of a (n, h, w, ci) to co
	// channels with filters fu(out, in).
	conv := func(a []float64, ci, co int, fu func(oc, ic int) [4][4]float64) []float64 {
		out := make([]float64, n*h*w*co)
		for s := 0; s < n; s++ {
			for ty := 0; ty < th; ty++ {
				for tx := 0; tx < tw; tx++ {
					vs := make([][4][4]float64, ci)
					for k := range vs {
						vs[k] = in(a, ci, s, ty, tx, k)
					}
					for oc := 0; oc < co; oc++ {
						var m [4][4]float64
						for ic := 0; ic < ci; ic++ {
							u := fu(oc, ic)
							for a := 0; a < 4; a++ {
								for b := 0; b < 4; b++ {
									m[a][b] += u[a][b] * vs[ic][a][b]
								}
							}
						}
						for i := 0; i < 2; i++ {
							for j := 0; j < 2; j++ {
								oy, ox := 2*ty+i, 2*tx+j
								if oy >= h || ox >= w {
									continue
								}
								var sum float64
								for a := 0; a < 4; a++ {
									for b := 0; b < 4; b++ {
										sum += winoAT[i][a] * winoAT[j][b] * m[a][b]
									}
								}
								out[((s*h+oy)*w+ox)*co+oc] = winoU * sum
							}
						}
					}
				}
			}
		}
		return out
	}
	y = conv(x, c, o, func(oc, ic int) [4][4]float64 { return filt(oc, ic, false) })
	dx = conv(r, o, c, func(oc, ic int) [4][4]float64 { return filt(ic, oc, true) })
	dw = make([]float64, o*9*c)
	for s := 0; s < n; s++ {
		for ty := 0; ty < th; ty++ {
			for tx := 0; tx < tw; tx++ {
				for oc := 0; oc < o; oc++ {
					var z [4][4]float64 // |Z| = |A| |dY| |A^T|
					for i := 0; i < 2; i++ {
						for j := 0; j < 2; j++ {
							oy, ox := 2*ty+i, 2*tx+j
							if oy >= h || ox >= w {
								continue
							}
							for a := 0; a < 4; a++ {
								for b := 0; b < 4; b++ {
									z[a][b] += winoAT[i][a] * winoAT[j][b] * r[((s*h+oy)*w+ox)*o+oc]
								}
							}
						}
					}
					for ic := 0; ic < c; ic++ {
						v := in(x, c, s, ty, tx, ic)
						for ki := 0; ki < 3; ki++ {
							for kj := 0; kj < 3; kj++ {
								var sum float64
								for a := 0; a < 4; a++ {
									for b := 0; b < 4; b++ {
										sum += winoG[a][ki] * winoG[b][kj] * v[a][b] * z[a][b]
									}
								}
								dw[oc*9*c+(ki*3+kj)*c+ic] += winoU * sum
							}
						}
					}
				}
			}
		}
	}
	return y, dx, dw
}
