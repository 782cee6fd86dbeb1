package data

import "fmt"

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
