package data

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/color/palette"
	"image/gif"
	"image/jpeg"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// rgbaImage is a w x h image whose pixel (x, y) is (10x, 20y, 7, 255).
func rgbaImage(w, h int) *image.RGBA {
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			m.SetRGBA(x, y, color.RGBA{uint8(10 * x), uint8(20 * y), 7, 255})
		}
	}
	return m
}

func writeImage(t *testing.T, path string, img image.Image) {
	t.Helper()
	var b bytes.Buffer
	var err error
	switch filepath.Ext(path) {
	case ".png":
		err = png.Encode(&b, img)
	case ".jpg", ".JPEG":
		err = jpeg.Encode(&b, img, &jpeg.Options{Quality: 95})
	case ".gif":
		err = gif.Encode(&b, img, &gif.Options{NumColors: 256})
	}
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Dir(path), 0o755)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// folderFixture writes three classes of small images in several formats
// and sizes, plus files the loader must ignore.
func folderFixture(t *testing.T) string {
	root := t.TempDir()
	p := func(s string) string { return filepath.Join(root, s) }
	writeImage(t, p("cat/a.png"), rgbaImage(8, 8))
	grey := image.NewGray(image.Rect(0, 0, 8, 8))
	for i := range grey.Pix {
		grey.Pix[i] = uint8(3 * i)
	}
	writeImage(t, p("cat/b.png"), grey)
	writeImage(t, p("dog/c.jpg"), rgbaImage(16, 12))
	pal := image.NewPaletted(image.Rect(0, 0, 10, 10), palette.Plan9)
	for i := range pal.Pix {
		pal.Pix[i] = uint8(i)
	}
	writeImage(t, p("dog/d.gif"), pal)
	nrgba := image.NewNRGBA(image.Rect(0, 0, 8, 8))
	for i := 0; i < len(nrgba.Pix); i += 4 {
		nrgba.Pix[i], nrgba.Pix[i+1], nrgba.Pix[i+2], nrgba.Pix[i+3] = 200, 100, 50, 128
	}
	writeImage(t, p("emu/e.png"), nrgba)
	writeImage(t, p("emu/f.JPEG"), grey)
	os.WriteFile(p("emu/notes.txt"), []byte("not an image"), 0o644)
	os.WriteFile(p("emu/.hidden.png"), []byte("junk"), 0o644)
	os.WriteFile(p("README"), []byte("top-level file"), 0o644)
	os.Mkdir(p(".cache"), 0o755)
	return root
}

func TestImageFolder(t *testing.T) {
	root := folderFixture(t)
	shape := Shape{8, 8, 3}
	eager, err := LoadImageFolder(root, shape, FolderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if eager.Len() != 6 || eager.Classes() != 3 || strings.Join(eager.ClassNames(), ",") != "cat,dog,emu" {
		t.Fatalf("%d images of classes %v", eager.Len(), eager.ClassNames())
	}
	buf := make([]byte, shape.Size())
	wantLabels := []int32{0, 0, 1, 1, 2, 2}
	for i, w := range wantLabels {
		if l := eager.Sample(i, buf); l != w {
			t.Errorf("sample %d (%s): label %d, want %d", i, eager.Path(i), l, w)
		}
	}
	// The 8x8 RGBA PNG is exact.
	eager.Sample(0, buf)
	if !bytes.Equal(buf[(3*8+5)*3:(3*8+5)*3+3], []byte{50, 60, 7}) {
		t.Errorf("pixel (3,5) = %v", buf[(3*8+5)*3:(3*8+5)*3+3])
	}
	// Grey becomes three equal channels.
	eager.Sample(1, buf)
	if buf[9*3] != 27 || buf[9*3+1] != 27 || buf[9*3+2] != 27 {
		t.Errorf("grey pixel 9 = %v", buf[27:30])
	}
	// Alpha 128 over black halves the colour.
	eager.Sample(4, buf)
	if !bytes.Equal(buf[:3], []byte{100, 50, 25}) {
		t.Errorf("NRGBA pixel = %v", buf[:3])
	}
	// Lazy decoding gives the same samples.
	lazy, err := LoadImageFolder(root, shape, FolderOptions{Lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	lb := make([]byte, shape.Size())
	for i := 0; i < eager.Len(); i++ {
		eager.Sample(i, buf)
		if lazy.Sample(i, lb) != wantLabels[i] || !bytes.Equal(buf, lb) {
			t.Errorf("lazy sample %d differs", i)
		}
	}
	if lazy.Err() != nil {
		t.Error(lazy.Err())
	}
	// One channel: luma.
	g, err := LoadImageFolder(root, Shape{4, 4, 1}, FolderOptions{Interp: Nearest})
	if err != nil {
		t.Fatal(err)
	}
	gb := make([]byte, 16)
	g.Sample(1, gb)
	// Nearest 2x shrink reads input pixel (2y+1, 2x+1), whose value is 3*(8(2y+1)+2x+1).
	if gb[0] != 27 || gb[5] != 81 {
		t.Errorf("grey 4x4 nearest: %v, want pixel 0 = 27, pixel 5 = 81", gb)
	}
	// A loader with workers over the lazy folder matches the eager one.
	opts := LoaderOptions{Workers: 2, Transforms: []Transform{Flip(0.5)}, Seed: 3}
	le, _ := NewLoader(eager, NewSampler(6, 2, 0, 1, 1), opts)
	ll, _ := NewLoader(lazy, NewSampler(6, 2, 0, 1, 1), opts)
	xe, ye := epochBatches(t, le, 1, -1, 0)
	xl, yl := epochBatches(t, ll, 1, -1, 0)
	if err := sameBatches(xe, ye, xl, yl); err != nil {
		t.Error(err)
	}
}

// TestImageFolderIgnored: the entries of class directories that are not
// read (other formats, sub-directories, which torchvision's ImageFolder
// would search) are counted by kind for a warning; dot names are not.
func TestImageFolderIgnored(t *testing.T) {
	root := folderFixture(t) // emu/notes.txt, emu/.hidden.png
	p := func(s string) string { return filepath.Join(root, s) }
	writeImage(t, p("cat/deeper/g.png"), rgbaImage(8, 8))
	os.WriteFile(p("dog/h.bmp"), []byte("BM"), 0o644)
	os.WriteFile(p("dog/i.BMP"), []byte("BM"), 0o644)
	os.WriteFile(p("dog/LICENSE"), []byte("text"), 0o644)
	f, err := LoadImageFolder(root, Shape{8, 8, 3}, FolderOptions{Lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	want := "image folder " + root + ": 5 entries of the class directories not read (only .png, .jpg, .jpeg and .gif files directly inside are): " +
		"2 .bmp files, 1 file without extension, 1 .txt file, 1 sub-directory; the first is " + p("cat/deeper")
	if f.Len() != 6 || f.Ignored() != want {
		t.Errorf("%d images, ignored:\n%s\nwant\n%s", f.Len(), f.Ignored(), want)
	}
	clean := t.TempDir()
	writeImage(t, filepath.Join(clean, "a", "0.png"), rgbaImage(8, 8))
	writeImage(t, filepath.Join(clean, "b", "0.png"), rgbaImage(8, 8))
	os.WriteFile(filepath.Join(clean, "a", ".DS_Store"), nil, 0o644)
	if f, err := LoadImageFolder(clean, Shape{8, 8, 3}, FolderOptions{}); err != nil || f.Ignored() != "" {
		t.Errorf("a folder of images only: %q, %v", f.Ignored(), err)
	}
}

func TestImageFolderBadInput(t *testing.T) {
	root := folderFixture(t)
	p := func(s string) string { return filepath.Join(root, s) }
	shape := Shape{8, 8, 3}

	// Resizing off: the 16x12 JPEG and 10x10 GIF have the wrong size.
	_, err := LoadImageFolder(root, shape, FolderOptions{NoResize: true})
	if err == nil || !strings.Contains(err.Error(), p("dog/c.jpg")) || !strings.Contains(err.Error(), "resizing is off") {
		t.Errorf("wrong size without resizing: %v", err)
	}
	var ie *ImageError
	if !errors.As(err, &ie) || ie.Path != p("dog/c.jpg") {
		t.Errorf("wrong size: %v does not wrap an ImageError for the file", err)
	}
	// ... and with SkipBad the dog class is left empty.
	var warnings []string
	warn := func(s string) { warnings = append(warnings, s) }
	_, err = LoadImageFolder(root, shape, FolderOptions{NoResize: true, SkipBad: true, Warn: warn})
	if err == nil || !strings.Contains(err.Error(), p("dog")) || len(warnings) != 2 {
		t.Errorf("all of a class skipped: %v, warnings %q", err, warnings)
	}

	// A corrupt image: an error naming it, or skipped with a warning.
	os.WriteFile(p("cat/bad.png"), []byte("\x89PNG\r\n\x1a\ngarbage"), 0o644)
	for _, lazy := range []bool{false, true} {
		_, err = LoadImageFolder(root, shape, FolderOptions{Lazy: lazy})
		if err == nil || !strings.Contains(err.Error(), p("cat/bad.png")) {
			t.Errorf("lazy %v: corrupt image: %v", lazy, err)
		}
		warnings = nil
		f, err := LoadImageFolder(root, shape, FolderOptions{Lazy: lazy, SkipBad: true, Warn: warn})
		if err != nil || f.Len() != 6 || f.Skipped() != 1 || len(warnings) != 1 || !strings.Contains(warnings[0], "bad.png") {
			t.Errorf("lazy %v: skipping: %v, %d images, %d skipped, warnings %q", lazy, err, f.Len(), f.Skipped(), warnings)
		}
	}
	os.Remove(p("cat/bad.png"))

	// A PNG cut short after its header passes the lazy check, then reads
	// as zeros with the failure counted and reported.
	var full bytes.Buffer
	png.Encode(&full, rgbaImage(8, 8))
	os.WriteFile(p("cat/cut.png"), full.Bytes()[:60], 0o644)
	warnings = nil
	f, err := LoadImageFolder(root, shape, FolderOptions{Lazy: true, Warn: warn})
	if err != nil {
		t.Fatal(err)
	}
	buf := bytes.Repeat([]byte{9}, shape.Size())
	i := 0
	for f.Path(i) != p("cat/cut.png") {
		i++
	}
	if l := f.Sample(i, buf); l != 0 || !bytes.Equal(buf, make([]byte, shape.Size())) {
		t.Errorf("truncated image read as label %d, %v", l, buf[:6])
	}
	if err := f.Err(); err == nil || !strings.Contains(err.Error(), "cut.png") || len(warnings) != 1 {
		t.Errorf("lazy failure: %v, warnings %q", err, warnings)
	}
	if _, err := LoadImageFolder(root, shape, FolderOptions{}); err == nil || !strings.Contains(err.Error(), "cut.png") {
		t.Errorf("eager truncated image: %v", err)
	}
	os.Remove(p("cat/cut.png"))

	// An empty class directory.
	os.Mkdir(p("fox"), 0o755)
	os.WriteFile(p("fox/readme.txt"), nil, 0o644)
	if _, err := LoadImageFolder(root, shape, FolderOptions{}); err == nil || !strings.Contains(err.Error(), p("fox")) {
		t.Errorf("empty class: %v", err)
	}
	if _, err := LoadImageFolder(t.TempDir(), shape, FolderOptions{}); err == nil || !strings.Contains(err.Error(), "no class") {
		t.Errorf("no classes: %v", err)
	}
	if _, err := LoadImageFolder(p("nowhere"), shape, FolderOptions{}); err == nil || !strings.Contains(err.Error(), "nowhere") {
		t.Errorf("missing root: %v", err)
	}
	if _, err := LoadImageFolder(root, Shape{8, 8, 2}, FolderOptions{}); err == nil {
		t.Error("two channels accepted")
	}
}

func TestSynthetic(t *testing.T) {
	shape := Shape{12, 12, 3}
	a, b, c := NewSynthetic(2000, shape, 10, 1), NewSynthetic(2000, shape, 10, 1), NewSynthetic(50, shape, 10, 2)
	if !bytes.Equal(a.pix, b.pix) || !bytes.Equal(a.labels, b.labels) {
		t.Fatal("same seed, different data")
	}
	if bytes.Equal(a.pix[:50*shape.Size()], c.pix) {
		t.Error("seeds 1 and 2 give the same data")
	}
	// A prefix of a larger set is the smaller set: sample i depends on i.
	if d := NewSynthetic(30, shape, 10, 1); !bytes.Equal(d.pix, a.pix[:30*shape.Size()]) {
		t.Error("sample i depends on n")
	}
	var count [10]int
	for _, l := range a.labels {
		count[l]++
	}
	for k, n := range count {
		if n < 150 || n > 250 {
			t.Errorf("class %d has %d of 2000 samples", k, n)
		}
	}
	// Learnable: nearest class centroid on shift-invariant features (DFT
	// magnitudes per channel), fitted on 1000 samples, scores well on
	// the other 1000.
	feat := func(i int) []float64 {
		buf := make([]byte, shape.Size())
		a.Sample(i, buf)
		return dftMagnitudes(buf, shape)
	}
	nf := len(feat(0))
	cent := make([][]float64, 10)
	for k := range cent {
		cent[k] = make([]float64, nf)
	}
	for i := 0; i < 1000; i++ {
		for j, v := range feat(i) {
			cent[a.labels[i]][j] += v / float64(count[a.labels[i]])
		}
	}
	right := 0
	for i := 1000; i < 2000; i++ {
		f := feat(i)
		best, bestD := 0, -1.0
		for k := range cent {
			var d float64
			for j := range f {
				d += (f[j] - cent[k][j]) * (f[j] - cent[k][j])
			}
			if bestD < 0 || d < bestD {
				best, bestD = k, d
			}
		}
		if best == int(a.labels[i]) {
			right++
		}
	}
	if right < 800 { // chance is 100
		t.Errorf("nearest centroid classifies %d of 1000 synthetic samples", right)
	}
}

// dftMagnitudes returns |DFT| of each channel of an (H, W, C) image.
func dftMagnitudes(pix []byte, s Shape) []float64 {
	if s.H != s.W {
		panic("square images only")
	}
	n := s.H
	cos, sin := make([]float64, n), make([]float64, n) // twiddles, angle 2*pi*k/n
	for k := range cos {
		sin[k], cos[k] = math.Sincos(2 * math.Pi * float64(k) / float64(n))
	}
	var out []float64
	for c := 0; c < s.C; c++ {
		for u := 0; u < n; u++ {
			for v := 0; v < n; v++ {
				var re, im float64
				for y := 0; y < n; y++ {
					for x := 0; x < n; x++ {
						k := (u*y + v*x) % n
						p := float64(pix[(y*n+x)*s.C+c])
						re += p * cos[k]
						im -= p * sin[k]
					}
				}
				out = append(out, math.Hypot(re, im))
			}
		}
	}
	return out
}

// TestImageFolderLinks: a class directory or an image that is a symbolic
// link counts as what it points to (it was left out silently, a class
// fewer); a FIFO with an image's name is refused by its mode instead of
// blocking the decoder.
func TestImageFolderLinks(t *testing.T) {
	src := folderFixture(t)
	root := t.TempDir()
	if err := os.Symlink(filepath.Join(src, "cat"), filepath.Join(root, "cat")); err != nil {
		t.Fatal(err)
	}
	writeImage(t, filepath.Join(root, "dog", "c.png"), rgbaImage(8, 8))
	if err := os.Symlink(filepath.Join(src, "cat", "a.png"), filepath.Join(root, "dog", "linked.png")); err != nil {
		t.Fatal(err)
	}
	f, err := LoadImageFolder(root, Shape{8, 8, 3}, FolderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if f.Len() != 4 || strings.Join(f.ClassNames(), ",") != "cat,dog" {
		t.Errorf("%d images of classes %v, want 4 of cat,dog", f.Len(), f.ClassNames())
	}
	fifo := filepath.Join(root, "dog", "z.png")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := LoadImageFolder(root, Shape{8, 8, 3}, FolderOptions{}); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), fifo+" is a named pipe (FIFO), not an image file") {
			t.Errorf("a FIFO among the images: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("blocked on a FIFO")
	}
}

// TestImageFolderReplacedMidRun: images of a lazy folder removed, or
// replaced by a named pipe or a directory, after it was listed (during a
// run) are bad images when their batch is assembled, by loader workers
// prefetching ahead: read as zeros, each failure naming its file, and the
// loader ends its epoch and closes. A named pipe blocked its worker's
// open for ever, and with it the loader's Next and Close: the rank hung,
// and its peers until the collective timeout, naming no file.
func TestImageFolderReplacedMidRun(t *testing.T) {
	root := t.TempDir()
	for _, cls := range []string{"cat", "dog"} {
		for i := 0; i < 8; i++ {
			writeImage(t, filepath.Join(root, cls, fmt.Sprintf("%d.png", i)), rgbaImage(8, 8))
		}
	}
	var mu sync.Mutex
	var warnings []string
	warn := func(s string) { mu.Lock(); warnings = append(warnings, s); mu.Unlock() }
	f, err := LoadImageFolder(root, Shape{8, 8, 3}, FolderOptions{Lazy: true, Warn: warn})
	if err != nil {
		t.Fatal(err)
	}
	fifo, dir, gone := filepath.Join(root, "cat", "3.png"), filepath.Join(root, "dog", "5.png"), filepath.Join(root, "dog", "6.png")
	for _, p := range []string{fifo, dir, gone} {
		os.Remove(p)
	}
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(dir, 0o755)

	l, err := NewLoader(f, NewSampler(f.Len(), 4, 0, 1, 1), LoaderOptions{Workers: 2, Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		bad := 0
		l.Start(1)
		for {
			b, ok := l.Next()
			if !ok {
				break
			}
			bad += b.Bad
			l.Release(b)
		}
		l.Close()
		done <- bad
	}()
	select {
	case bad := <-done:
		if bad != 3 {
			t.Errorf("%d bad samples in the epoch's batches, want 3", bad)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the loader blocked on an image replaced by a named pipe")
	}
	all := strings.Join(warnings, "\n")
	for _, want := range []string{
		fifo + ": a named pipe (FIFO), not an image file",
		dir + ": a directory, not an image file",
		gone + ": open: no such file or directory",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no warning %q in:\n%s", want, all)
		}
	}
	if err := f.Err(); err == nil || !strings.Contains(err.Error(), "(3 bad images read as zeros)") {
		t.Errorf("Err: %v, want the first failure and a count of 3", err)
	}
}
