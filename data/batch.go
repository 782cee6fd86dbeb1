package data

// Batcher assembles samples into a network's float32 input, converting
// pixels to [0, 1] and normalising per channel: (p/255 - mean[c]) / std[c].
// It owns one reusable byte buffer; Fill allocates nothing.
type Batcher struct {
	ds        Dataset
	mean, inv []float32 // per channel
	buf       []byte
}

// NewBatcher returns a Batcher for ds. mean and std have one value per
// channel, or are nil for mean 0 and std 1 (pixels scaled to [0, 1]).
func NewBatcher(ds Dataset, mean, std []float32) *Batcher {
	c := ds.Shape().C
	b := &Batcher{ds: ds, mean: make([]float32, c), inv: make([]float32, c), buf: make([]byte, ds.Shape().Size())}
	for i := 0; i < c; i++ {
		b.inv[i] = 1
		if mean != nil {
			b.mean[i] = mean[i]
		}
		if std != nil {
			if std[i] <= 0 {
				panic("data: non-positive std")
			}
			b.inv[i] = 1 / std[i]
		}
	}
	return b
}

// Fill writes the samples idx into x, (N, H, W, C), and their labels into y.
func (b *Batcher) Fill(idx []int, x []float32, y []int32) {
	for k, i := range idx {
		b.put(k, i, x, y)
	}
}

// FillRange writes samples [lo, hi) into x and y (evaluation order).
func (b *Batcher) FillRange(lo, hi int, x []float32, y []int32) {
	for k := 0; k < hi-lo; k++ {
		b.put(k, lo+k, x, y)
	}
}

// put converts sample i into slot k of x and y.
func (b *Batcher) put(k, i int, x []float32, y []int32) {
	size, c := len(b.buf), len(b.mean)
	y[k] = b.ds.Sample(i, b.buf)
	dst := x[k*size : (k+1)*size]
	for j, p := range b.buf {
		ch := j % c
		dst[j] = (float32(p)*(1.0/255) - b.mean[ch]) * b.inv[ch]
	}
}
