package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// writeIDX writes an IDX file of bytes with the given magic type/dims.
func writeIDX(t *testing.T, path string, typ byte, dims []int, elems []byte, gz bool) {
	t.Helper()
	var b bytes.Buffer
	b.Write([]byte{0, 0, typ, byte(len(dims))})
	for _, d := range dims {
		binary.Write(&b, binary.BigEndian, uint32(d))
	}
	b.Write(elems)
	data := b.Bytes()
	if gz {
		var z bytes.Buffer
		w := gzip.NewWriter(&z)
		w.Write(data)
		w.Close()
		data = z.Bytes()
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestIDXRoundTrip(t *testing.T) {
	dir := t.TempDir()
	pix := make([]byte, 3*2*2)
	for i := range pix {
		pix[i] = byte(i * 10)
	}
	for _, gz := range []bool{false, true} {
		suffix := ""
		if gz {
			suffix = ".gz"
		}
		writeIDX(t, filepath.Join(dir, "train-images-idx3-ubyte"+suffix), 8, []int{3, 2, 2}, pix, gz)
		writeIDX(t, filepath.Join(dir, "train-labels-idx1-ubyte"+suffix), 8, []int{3}, []byte{1, 9, 0}, gz)
		d, err := LoadMNIST(dir, true)
		if err != nil {
			t.Fatal(err)
		}
		if d.Len() != 3 || d.Shape() != (Shape{2, 2, 1}) {
			t.Fatalf("got %d samples of %v", d.Len(), d.Shape())
		}
		buf := make([]byte, 4)
		if l := d.Sample(1, buf); l != 9 || !bytes.Equal(buf, pix[4:8]) {
			t.Errorf("sample 1 = %v label %d", buf, l)
		}
		os.Remove(filepath.Join(dir, "train-images-idx3-ubyte"+suffix))
		os.Remove(filepath.Join(dir, "train-labels-idx1-ubyte"+suffix))
	}
}

func TestIDXBadInput(t *testing.T) {
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	writeIDX(t, p("good-img"), 8, []int{2, 2, 2}, make([]byte, 8), false)
	writeIDX(t, p("good-lab"), 8, []int{2}, []byte{0, 1}, false)
	writeIDX(t, p("three-lab"), 8, []int{3}, []byte{0, 1, 2}, false)
	writeIDX(t, p("trunc-img"), 8, []int{2, 2, 2}, make([]byte, 5), true)
	writeIDX(t, p("float-img"), 0x0d, []int{2, 2, 2}, make([]byte, 32), false)
	writeIDX(t, p("long-img"), 8, []int{2, 2, 2}, make([]byte, 9), false)
	writeIDX(t, p("bad-label"), 8, []int{2}, []byte{0, 12}, false)
	os.WriteFile(p("png"), []byte("\x89PNG\r\n\x1a\nxxxxxxxx"), 0o644)
	os.WriteFile(p("short"), []byte{0, 0}, 0o644)
	for _, c := range []struct{ img, lab, want string }{
		{"png", "good-lab", "bad magic number"},
		{"short", "good-lab", "too short"},
		{"trunc-img", "good-lab", "truncated: 5 of 8"},
		{"float-img", "good-lab", "element type"},
		{"long-img", "good-lab", "more data than"},
		{"good-img", "three-lab", "has 2 images but"},
		{"good-img", "bad-label", "label 12"},
		{"good-lab", "good-lab", "want 3"},
		{"missing", "good-lab", "no such file"},
	} {
		_, err := LoadIDX(p(c.img), p(c.lab))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("LoadIDX(%s, %s) = %v, want error containing %q", c.img, c.lab, err, c.want)
		}
	}
	if _, err := LoadMNIST(dir, false); err == nil || !strings.Contains(err.Error(), "t10k-images-idx3-ubyte") {
		t.Errorf("missing files: %v", err)
	}
	// A link whose target is gone is named as a link, not as missing.
	os.Symlink(filepath.Join(dir, "moved-away"), filepath.Join(dir, "t10k-images-idx3-ubyte.gz"))
	want := "t10k-images-idx3-ubyte.gz is a symbolic link to " + filepath.Join(dir, "moved-away") + ", which cannot be read: no such file or directory"
	if _, err := LoadMNIST(dir, false); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("dangling link: %v, want %q", err, want)
	}
	// The raw file beside it is read: the link hides nothing that can be.
	for from, to := range map[string]string{"good-img": "t10k-images-idx3-ubyte", "good-lab": "t10k-labels-idx1-ubyte"} {
		b, _ := os.ReadFile(p(from))
		os.WriteFile(p(to), b, 0o644)
	}
	if im, err := LoadMNIST(dir, false); err != nil || im.Len() != 2 {
		t.Errorf("a dangling .gz link beside the raw file: %v, want the raw file's 2 images", err)
	}
}

// TestIDXDamagedGzip: a gzip IDX file whose checksum, length or deflate
// stream is damaged is an error of one line naming the file and saying it
// is damaged, at every damaged byte; never data, and never "more data than
// dimensions promise" (the message of an intact but over-long file).
func TestIDXDamagedGzip(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.gz")
	pix := make([]byte, 2*7*5)
	for i := range pix {
		pix[i] = byte(i*37 + i*i)
	}
	writeIDX(t, good, 8, []int{2, 7, 5}, pix, true)
	z, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if _, got, err := ReadIDX(good); err != nil || !bytes.Equal(got, pix) {
		t.Fatalf("intact file: %v", err)
	}
	bad := filepath.Join(dir, "bad.gz")
	var got []byte
	read := func(b []byte) error {
		if err := os.WriteFile(bad, b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, e, err := ReadIDX(bad)
		got = e
		return err
	}
	// The trailer: CRC-32 then the length, the last 8 bytes.
	crc := append([]byte(nil), z...)
	crc[len(crc)-8] ^= 0x01
	if err := read(crc); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("bad CRC: %v, want an error naming %s and its checksum", err, bad)
	}
	size := append([]byte(nil), z...)
	size[len(size)-1] ^= 0x40
	if err := read(size); err == nil || !strings.Contains(err.Error(), "corrupt gzip") {
		t.Errorf("bad length in the trailer: %v, want corrupt gzip data", err)
	}
	if err := read(z[:len(z)-3]); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("trailer cut short: %v, want truncated", err)
	}
	// Every bit of the deflate stream and trailer (after the 10-byte
	// header): the damage is found, and called damage. A few bits do not
	// change what the stream decodes to (padding after the last block):
	// those files must give the intact pixels.
	damaged := 0
	for i := 10; i < len(z); i++ {
		for bit := byte(1); bit != 0; bit <<= 1 {
			b := append([]byte(nil), z...)
			b[i] ^= bit
			err := read(b)
			if err == nil {
				if !bytes.Equal(got, pix) {
					t.Errorf("byte %d ^ %#x: damaged file read as other pixels without error", i, bit)
				}
				continue
			}
			damaged++
			msg := err.Error()
			if strings.Contains(msg, "\n") || !strings.HasPrefix(msg, bad+": ") || strings.Contains(msg, "more data than") {
				t.Errorf("byte %d ^ %#x: %q, want one line naming the file as damaged", i, bit, msg)
			}
		}
	}
	if damaged < 8*(len(z)-10)*9/10 {
		t.Errorf("only %d of %d bit flips were errors", damaged, 8*(len(z)-10))
	}
	// Bytes after an intact stream are named as such, however few
	// (a short tail used to read as the next member's truncated header).
	for _, tail := range []string{"x", "xyz", "not gzip at all, a longer tail"} {
		want := fmt.Sprintf("%d bytes after the end of its gzip stream that are not gzip (they begin %q)", len(tail), tail[:min(len(tail), 8)])
		if err := read(append(append([]byte(nil), z...), tail...)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%d bytes of trailing garbage: %v, want %q", len(tail), err, want)
		}
	}
	// A file of two members (gzip -c a >f; gzip -c b >>f) is one stream,
	// as gzip -d reads it.
	raw, err := io.ReadAll(mustGunzip(t, z))
	if err != nil {
		t.Fatal(err)
	}
	var two bytes.Buffer
	for _, part := range [][]byte{raw[:11], raw[11:]} {
		w := gzip.NewWriter(&two)
		w.Write(part)
		w.Close()
	}
	if err := read(two.Bytes()); err != nil || !bytes.Equal(got, pix) {
		t.Errorf("two gzip members: %v", err)
	}
	// A gzip stream that is intact but longer than promised is too long.
	writeIDX(t, bad, 8, []int{2, 2}, make([]byte, 5), true)
	if err := read(mustRead(t, bad)); err == nil || !strings.Contains(err.Error(), "more data than dimensions [2 2] promise (1 bytes more)") {
		t.Errorf("intact, one byte too long: %v", err)
	}
}

// TestIDXPromiseNotAllocated: a header promising far more than the file
// holds fails without allocating the promise.
func TestIDXPromiseNotAllocated(t *testing.T) {
	dir := t.TempDir()
	for _, gz := range []bool{false, true} {
		p := filepath.Join(dir, fmt.Sprint("huge", gz))
		writeIDX(t, p, 8, []int{1 << 16, 1 << 16, 2}, make([]byte, 100), gz) // 8 GiB promised
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, _, err := ReadIDX(p)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("gzip %v: %v, want an error naming %s", gz, err, p)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
			t.Errorf("gzip %v: reading a 100-byte file allocated %d MiB", gz, grew>>20)
		}
	}
}

// ReadIDXChecked asks its check before it reads any element: a file of
// the wrong shape is refused with the check's own error, read no further
// (here the elements are missing, which a read would report), and a file
// that passes is read as ReadIDX reads it.
func TestIDXChecked(t *testing.T) {
	dir := t.TempDir()
	wrong := errors.New("wrong shape")
	for _, gz := range []bool{false, true} {
		p := filepath.Join(dir, fmt.Sprint("short", gz))
		writeIDX(t, p, 8, []int{1000, 200, 200}, nil, gz)
		var seen []int
		_, _, err := ReadIDXChecked(p, func(d []int) error { seen = d; return wrong })
		if err != wrong || fmt.Sprint(seen) != "[1000 200 200]" {
			t.Errorf("gzip %v: %v after the check saw %v, want the check's error after [1000 200 200]", gz, err, seen)
		}
		q := filepath.Join(dir, fmt.Sprint("ok", gz))
		writeIDX(t, q, 8, []int{2, 3}, []byte{1, 2, 3, 4, 5, 6}, gz)
		dims, elems, err := ReadIDXChecked(q, func(d []int) error { return nil })
		if err != nil || fmt.Sprint(dims, elems) != "[2 3] [1 2 3 4 5 6]" {
			t.Errorf("gzip %v: %v %v %v", gz, dims, elems, err)
		}
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSamplerShards(t *testing.T) {
	const n, batch = 103, 4
	for _, ranks := range []int{1, 2, 3, 5} {
		samplers := make([]*Sampler, ranks)
		for r := range samplers {
			samplers[r] = NewSampler(n, batch, r, ranks, 42)
		}
		steps := samplers[0].Steps()
		if steps != n/(batch*ranks) {
			t.Fatalf("%d ranks: %d steps", ranks, steps)
		}
		for epoch := 1; epoch <= 2; epoch++ {
			seen := map[int]int{}
			for _, s := range samplers {
				s.SetEpoch(epoch)
			}
			for step := 0; step < steps; step++ {
				for r, s := range samplers {
					for _, i := range s.Batch(step) {
						if i < 0 || i >= n {
							t.Fatalf("index %d out of range", i)
						}
						if prev, ok := seen[i]; ok {
							t.Fatalf("%d ranks: sample %d on rank %d and rank %d", ranks, i, prev, r)
						}
						seen[i] = r
					}
				}
			}
			// Union is the epoch less a dropped tail smaller than a global batch.
			if dropped := n - len(seen); dropped < 0 || dropped >= batch*ranks {
				t.Errorf("%d ranks: %d samples dropped", ranks, dropped)
			}
		}
	}
}

// Every rank draws the same order; the order changes with epoch and seed;
// R ranks with batch B cover exactly one rank's batch R*B.
func TestSamplerAgreement(t *testing.T) {
	a, b := NewSampler(60, 5, 0, 2, 7), NewSampler(60, 5, 1, 2, 7)
	one := NewSampler(60, 10, 0, 1, 7)
	a.SetEpoch(3)
	b.SetEpoch(3)
	one.SetEpoch(3)
	for step := 0; step < a.Steps(); step++ {
		got := append(append([]int{}, a.Batch(step)...), b.Batch(step)...)
		want := one.Batch(step)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("step %d: 2x5 batch %v, 1x10 batch %v", step, got, want)
			}
		}
	}
	first := append([]int{}, a.Batch(0)...)
	a.SetEpoch(4)
	if equalInts(first, a.Batch(0)) {
		t.Error("epoch 4 has epoch 3's order")
	}
	c := NewSampler(60, 5, 0, 2, 8)
	c.SetEpoch(3)
	if equalInts(first, c.Batch(0)) {
		t.Error("seed 8 has seed 7's order")
	}
}

func equalInts(a, b []int) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

func TestShardCoversAll(t *testing.T) {
	for _, ranks := range []int{1, 3, 7} {
		next := 0
		for r := 0; r < ranks; r++ {
			lo, hi := Shard(10000, r, ranks)
			if lo != next || hi < lo {
				t.Fatalf("rank %d shard [%d,%d) after %d", r, lo, hi, next)
			}
			next = hi
		}
		if next != 10000 {
			t.Errorf("%d ranks cover %d", ranks, next)
		}
	}
}

func TestBatcher(t *testing.T) {
	ds, err := NewImages(Shape{1, 2, 2}, 3, []byte{0, 255, 51, 102, 255, 0, 0, 0}, []uint8{2, 1})
	if err != nil {
		t.Fatal(err)
	}
	b := NewBatcher(ds, []float32{0.5, 0}, []float32{0.5, 1})
	x := make([]float32, 8)
	y := make([]int32, 2)
	b.Fill([]int{1, 0}, x, y)
	want := []float32{1, 0, -1, 0, -1, 1, -0.6, 0.4}
	for i := range want {
		if d := x[i] - want[i]; d > 1e-6 || d < -1e-6 {
			t.Fatalf("x = %v, want %v", x, want)
		}
	}
	if y[0] != 1 || y[1] != 2 {
		t.Errorf("labels %v", y)
	}
	if a := testing.AllocsPerRun(10, func() { b.Fill([]int{1, 0}, x, y) }); a != 0 {
		t.Errorf("Fill allocates %v times", a)
	}
}

// TestFashionMNIST reads the real data set installed by the Debian package.
func TestFashionMNIST(t *testing.T) {
	dir := "/usr/share/datasets/fashion-mnist"
	tr, err := LoadMNIST(dir, true)
	if err != nil {
		t.Fatalf("%v (make test installs dataset-fashion-mnist)", err)
	}
	te, err := LoadMNIST(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Len() != 60000 || te.Len() != 10000 || tr.Shape() != (Shape{28, 28, 1}) {
		t.Errorf("train %d test %d shape %v", tr.Len(), te.Len(), tr.Shape())
	}
	var counts [10]int
	for _, l := range te.labels {
		counts[l]++
	}
	for c, n := range counts {
		if n != 1000 {
			t.Errorf("test class %d has %d samples, want 1000", c, n)
		}
	}
}

// Split holds out about frac of every class, disjointly, the same way for
// the same seed.
func TestSplit(t *testing.T) {
	ds := NewSynthetic(500, Shape{2, 2, 1}, 7, 3)
	tr, va := Split(ds, 0.2, 1)
	if tr.Len()+va.Len() != 500 || tr.Classes() != 7 || va.Shape() != ds.Shape() {
		t.Fatalf("split into %d + %d", tr.Len(), va.Len())
	}
	count := func(d Dataset) []int {
		c := make([]int, 7)
		buf := make([]byte, 4)
		for i := 0; i < d.Len(); i++ {
			c[d.Sample(i, buf)]++
		}
		return c
	}
	all, held := count(ds), count(va)
	for k := range all {
		if want := math.Round(0.2 * float64(all[k])); math.Abs(float64(held[k])-want) > 1 {
			t.Errorf("class %d: %d of %d held out, want about %v", k, held[k], all[k], want)
		}
	}
	// Disjoint and in order: the views' indices interleave into 0..N-1.
	seen := map[int]bool{}
	for _, v := range []Dataset{tr, va} {
		idx := v.(labeledSubset).idx
		for j, i := range idx {
			if seen[i] || (j > 0 && idx[j-1] >= i) {
				t.Fatalf("index %d twice or out of order", i)
			}
			seen[i] = true
		}
	}
	tr2, _ := Split(ds, 0.2, 1)
	tr3, _ := Split(ds, 0.2, 2)
	if !equalInts(tr.(labeledSubset).idx, tr2.(labeledSubset).idx) || equalInts(tr.(labeledSubset).idx, tr3.(labeledSubset).idx) {
		t.Error("split is not a function of the seed")
	}
	// A class of one sample stays in training.
	one, _ := NewImages(Shape{1, 1, 1}, 2, []byte{1, 2, 3}, []uint8{0, 0, 1})
	tr, va = Split(one, 0.5, 1)
	if tr.Len() != 2 || va.Len() != 1 {
		t.Errorf("3 samples, classes of 2 and 1: %d + %d", tr.Len(), va.Len())
	}
}

// TestLoadsTakeBudget: the IDX and CIFAR-10 loaders take their pixels from
// the rank's memory budget before reading them, so that a header (or a
// file size) promising more than there is ends in one line instead of
// reading until memory runs out (a 1 MB gzip bomb reached 2.1 GB; a
// sparse 40 GB CIFAR batch crashed the runtime). Images wider than
// MaxSide are refused by the header alone.
func TestLoadsTakeBudget(t *testing.T) {
	dir := t.TempDir()
	writeIDX(t, filepath.Join(dir, "train-images-idx3-ubyte"), 0x08, []int{100, 28, 28}, make([]byte, 100*28*28), false)
	writeIDX(t, filepath.Join(dir, "train-labels-idx1-ubyte"), 0x08, []int{100}, make([]byte, 100), false)
	if _, err := loadMNIST(dir, true, newBudget(1<<30, "test", 1)); err != nil {
		t.Fatalf("within the budget: %v", err)
	}
	_, err := loadMNIST(dir, true, newBudget(50000, "test", 1))
	if !errors.As(err, new(*MemoryError)) || !strings.Contains(err.Error(), "train-images-idx3-ubyte (dimensions [100 28 28])") {
		t.Errorf("over the budget: %v", err)
	}
	wide := filepath.Join(t.TempDir(), "train-images-idx3-ubyte.gz")
	writeIDX(t, wide, 0x08, []int{1, 10000, 10000}, nil, true)
	os.WriteFile(filepath.Join(filepath.Dir(wide), "train-labels-idx1-ubyte"), nil, 0o644)
	if _, err := loadMNIST(filepath.Dir(wide), true, newBudget(1<<40, "test", 1)); err == nil || !strings.Contains(err.Error(), "images of 10000x10000: larger than 8192x8192") {
		t.Errorf("10000x10000 images: %v", err)
	}

	cdir := t.TempDir()
	for _, n := range []string{"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"} {
		f, err := os.Create(filepath.Join(cdir, n))
		if err != nil {
			t.Fatal(err)
		}
		f.Truncate(10 * cifarRecord) // sparse: no disk, zeros as records of label 0
		f.Close()
	}
	if _, err := loadCIFAR10(cdir, true, newBudget(1<<30, "test", 1)); err != nil {
		t.Fatalf("CIFAR-10 within the budget: %v", err)
	}
	if _, err := loadCIFAR10(cdir, true, newBudget(100000, "test", 1)); !errors.As(err, new(*MemoryError)) || !strings.Contains(err.Error(), "CIFAR-10 in "+cdir) {
		t.Errorf("CIFAR-10 over the budget: %v", err)
	}
}

func mustGunzip(t *testing.T, z []byte) io.Reader {
	t.Helper()
	r, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// FuzzIDX feeds arbitrary bytes to ReadIDX, raw and as the bytes of a gzip
// file: it returns an error or dimensions whose product is the number of
// elements, and those are exactly what the file holds after its header
// (for gzip, after gzip -d); it never panics.
func FuzzIDX(f *testing.F) {
	idx := func(dims []int, elems []byte) []byte {
		b := []byte{0, 0, 8, byte(len(dims))}
		for _, d := range dims {
			b = binary.BigEndian.AppendUint32(b, uint32(d))
		}
		return append(b, elems...)
	}
	gz := func(parts ...[]byte) []byte {
		var z bytes.Buffer
		for _, p := range parts {
			w := gzip.NewWriter(&z)
			w.Write(p)
			w.Close()
		}
		return z.Bytes()
	}
	ok := idx([]int{2, 2, 3}, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add(ok)
	f.Add(ok[:len(ok)-1])
	f.Add(append(ok, 0))
	f.Add(idx([]int{3}, []byte{0, 1, 9}))
	f.Add(gz(ok))
	f.Add(gz(ok[:7], ok[7:]))
	f.Add(append(gz(ok), 'x', 'y'))
	f.Add(gz(ok)[:20])
	f.Add([]byte{0x1f, 0x8b})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, raw []byte) {
		p := filepath.Join(dir, "f.idx")
		if err := os.WriteFile(p, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		dims, elems, err := ReadIDX(p)
		if err != nil {
			return
		}
		n := 1
		for _, d := range dims {
			n *= d
		}
		want := raw
		if bytes.HasPrefix(raw, gzipMagic) {
			r, err := gzip.NewReader(bytes.NewReader(raw))
			if err != nil {
				t.Fatalf("ReadIDX read a gzip file Go's gzip cannot open: %v", err)
			}
			if want, err = io.ReadAll(r); err != nil {
				t.Fatalf("ReadIDX read a gzip file Go's gzip cannot: %v", err)
			}
		}
		if len(elems) != n || !bytes.Equal(idx(dims, elems), want) {
			t.Fatalf("dimensions %v, %d elements, from %d bytes (%d after gzip -d)", dims, len(elems), len(raw), len(want))
		}
	})
}
