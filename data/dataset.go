package data

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Shape is the shape of one sample: height, width, channels.
type Shape struct{ H, W, C int }

// Size is the number of values in one sample.
func (s Shape) Size() int { return s.H * s.W * s.C }

// Dataset is an indexable set of labelled samples.
type Dataset interface {
	// Len is the number of samples.
	Len() int
	// Shape is the shape of every sample.
	Shape() Shape
	// Classes is the number of classes; labels are in [0, Classes).
	Classes() int
	// Sample copies sample i's pixels (H, W, C) into dst and returns its
	// label. len(dst) must be at least Shape().Size(). A Loader with
	// workers calls Sample from several goroutines at once.
	Sample(i int, dst []byte) int32
}

// Images is an in-memory data set of uint8 images: the form IDX files and
// CIFAR batches are loaded into.
type Images struct {
	shape   Shape
	classes int
	pix     []byte  // (N, H, W, C)
	labels  []uint8 // (N)
}

// NewImages wraps pixels (N, H, W, C) and labels as a Dataset. It checks
// that the lengths agree and every label is below classes.
func NewImages(shape Shape, classes int, pix []byte, labels []uint8) (*Images, error) {
	if shape.Size() == 0 || len(pix) != len(labels)*shape.Size() {
		return nil, fmt.Errorf("%d pixel bytes do not make %d samples of %v", len(pix), len(labels), shape)
	}
	for i, l := range labels {
		if int(l) >= classes {
			return nil, fmt.Errorf("sample %d has label %d, not below %d classes", i, l, classes)
		}
	}
	return &Images{shape: shape, classes: classes, pix: pix, labels: labels}, nil
}

func (d *Images) Len() int     { return len(d.labels) }
func (d *Images) Shape() Shape { return d.shape }
func (d *Images) Classes() int { return d.classes }
func (d *Images) Sample(i int, dst []byte) int32 {
	n := d.shape.Size()
	copy(dst[:n], d.pix[i*n:(i+1)*n])
	return int32(d.labels[i])
}

// Limit returns a view of the first n samples of d (all of them if n <= 0
// or n >= Len()).
func Limit(d Dataset, n int) Dataset {
	if n <= 0 || n >= d.Len() {
		return d
	}
	return limited{d, n}
}

type limited struct {
	Dataset
	n int
}

func (l limited) Len() int { return l.n }

// Label is sample i's label, without reading its pixels.
func (d *Images) Label(i int) int32 { return int32(d.labels[i]) }

// Labeled is a data set that can tell a sample's label without reading
// its pixels (a lazy image folder would have to decode the image).
type Labeled interface {
	Dataset
	Label(i int) int32
}

// subset is the view of a data set whose sample k is its sample idx[k].
type subset struct {
	Dataset
	idx []int
}

func (s subset) Len() int                       { return len(s.idx) }
func (s subset) Sample(i int, dst []byte) int32 { return s.Dataset.Sample(s.idx[i], dst) }

// SampleChecked passes on the failures of a data set whose samples can
// fail (checkedSampler).
func (s subset) SampleChecked(i int, dst []byte) (int32, error) {
	if c, ok := s.Dataset.(checkedSampler); ok {
		return c.SampleChecked(s.idx[i], dst)
	}
	return s.Dataset.Sample(s.idx[i], dst), nil
}

// labeledSubset is a subset of a Labeled data set, itself Labeled.
type labeledSubset struct{ subset }

// Label is sample i's label, without reading its pixels.
func (s labeledSubset) Label(i int) int32 { return s.Dataset.(Labeled).Label(s.idx[i]) }

// LimitByClass returns a view of n samples of d drawn from every class in
// proportion to its size (all of d if n <= 0 or n >= Len()): the j-th of a
// class's m samples, in d's order, ranks at (j+1/2)/m, ties in class
// order, and the n first ranked are kept, in d's order. Limit's first n
// samples of a data set stored class by class (an image folder) would be
// its first classes only; LimitByClass is deterministic, and depends only
// on d's labels and n.
func LimitByClass(d Labeled, n int) Dataset {
	if n <= 0 || n >= d.Len() {
		return d
	}
	size := make([]int64, d.Classes())
	type rank struct {
		i, class int
		j        int64 // the sample's place in its class
	}
	ranks := make([]rank, d.Len())
	for i := range ranks {
		k := int(d.Label(i))
		ranks[i] = rank{i, k, size[k]}
		size[k]++
	}
	slices.SortFunc(ranks, func(a, b rank) int {
		// (2a.j+1)/(2 size[a]) against (2b.j+1)/(2 size[b]), exactly.
		return cmp.Or(cmp.Compare((2*a.j+1)*size[b.class], (2*b.j+1)*size[a.class]), cmp.Compare(a.class, b.class))
	})
	idx := make([]int, n)
	for k := range idx {
		idx[k] = ranks[k].i
	}
	slices.Sort(idx)
	return labeledSubset{subset{d, idx}}
}

// Split holds out a fraction of d for validation, class by class: of each
// class's n samples, round(frac*n) (at least one when n >= 2, never all)
// go to held, the rest to train, chosen by a shuffle drawn from seed.
// Both views keep d's order (class by class for an image folder; see
// LimitByClass) and are Labeled. The split depends only on (d's labels, frac,
// seed), so every rank computes the same one. It panics unless 0 < frac < 1.
func Split(d Labeled, frac float64, seed uint64) (train, held Dataset) {
	if !(frac > 0 && frac < 1) {
		panic("data: Split fraction outside (0, 1)")
	}
	byClass := make([][]int, d.Classes())
	for i := 0; i < d.Len(); i++ {
		l := d.Label(i)
		byClass[l] = append(byClass[l], i)
	}
	out := make([]bool, d.Len())
	rng := rand.New(rand.NewPCG(seed, 0x73706c6974)) // "split"
	for _, idx := range byClass {
		n := len(idx)
		k := int(math.Round(frac * float64(n)))
		if n >= 2 {
			k = min(max(k, 1), n-1)
		} else {
			k = 0
		}
		rng.Shuffle(n, func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
		for _, i := range idx[:k] {
			out[i] = true
		}
	}
	var tr, ho []int
	for i, o := range out {
		if o {
			ho = append(ho, i)
		} else {
			tr = append(tr, i)
		}
	}
	return labeledSubset{subset{d, tr}}, labeledSubset{subset{d, ho}}
}
