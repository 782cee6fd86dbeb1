package chart

import (
	"bytes"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfusionPNG draws a 3-class matrix and reads the cells back from
// the pixels: true class 0 at the top, predicted class 0 at the left, the
// colour the cell's share of its row.
func TestConfusionPNG(t *testing.T) {
	counts := [][]int64{{90, 10, 0}, {0, 100, 0}, {50, 0, 50}}
	var b bytes.Buffer
	if err := Confusion(&b, "test", []string{"cat", "dog", "bird"}, counts); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(outDir(t), "confusion.png"), b.Bytes(), 0o644)
	img, err := png.Decode(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if r := img.Bounds(); r.Dx() != ConfusionSize || r.Dy() != ConfusionSize {
		t.Fatalf("%v, want %d square", r, ConfusionSize)
	}
	// The heat map's extent: the pixels bluer than they are red.
	box := image.Rectangle{Min: image.Pt(1<<30, 1<<30)}
	for y := 0; y < ConfusionSize; y++ {
		for x := 0; x < ConfusionSize; x++ {
			r, _, bl, _ := img.At(x, y).RGBA()
			if bl > r+0x800 {
				box.Min.X, box.Min.Y = min(box.Min.X, x), min(box.Min.Y, y)
				box.Max.X, box.Max.Y = max(box.Max.X, x+1), max(box.Max.Y, y+1)
			}
		}
	}
	if box.Dx() < ConfusionSize/2 || box.Dy() < ConfusionSize/2 {
		t.Fatalf("heat map covers only %v", box)
	}
	// red channel at a point a quarter into the cell (clear of its count).
	red := func(row, col int) uint32 {
		x := box.Min.X + box.Dx()*(4*col+1)/12
		y := box.Min.Y + box.Dy()*(4*row+1)/12
		r, _, _, _ := img.At(x, y).RGBA()
		return r >> 8
	}
	if r := red(0, 0); r > 60 {
		t.Errorf("cell (cat, cat), 90%% of its row, has red %d: want dark blue (top left)", r)
	}
	if r := red(0, 2); r < 230 {
		t.Errorf("cell (cat, bird), 0%%, has red %d: want near white (top right)", r)
	}
	if r := red(2, 0); r < 90 || r > 170 {
		t.Errorf("cell (bird, cat), 50%%, has red %d: want a middle blue (bottom left)", r)
	}
}

func TestConfusionErrors(t *testing.T) {
	var b bytes.Buffer
	for _, c := range []struct {
		names  []string
		counts [][]int64
		want   string
	}{
		{nil, nil, "empty"},
		{nil, [][]int64{{1, 2}, {3}}, "not square"},
		{[]string{"a"}, [][]int64{{1, 2}, {3, 4}}, "1 class names for 2 classes"},
	} {
		if err := Confusion(&b, "x", c.names, c.counts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want %q", c.counts, err, c.want)
		}
	}
	if b.Len() != 0 {
		t.Errorf("%d bytes written on errors", b.Len())
	}
}
