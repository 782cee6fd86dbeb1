package data

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"hash/crc32"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/BurntSushi/toml"

	"hpctrain/internal/cli"
)

// TestConfigValidate: each data key's domain, named in the error; sizes
// above MaxSide; and an augmentation chain checked against the sample
// shape wherever the configuration alone fixes it.
func TestConfigValidate(t *testing.T) {
	with := func(change func(*Config)) Config {
		c := Defaults()
		change(&c)
		return c
	}
	for _, c := range []Config{
		Defaults(),
		with(func(c *Config) { c.Dataset, c.ImageShape, c.Augment = "synthetic", "8192x8192x3", "center_crop=8192" }),
		with(func(c *Config) { c.Dataset, c.ValSplit, c.Augment = "folder", 0.1, "resize=36x36,crop_pad=0:32x32" }),
		with(func(c *Config) { c.Augment = "center_crop=40x40" }), // IDX files carry their own shape: checked at load
	} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{with(func(c *Config) { c.Dataset = "imagenet" }), `dataset = "imagenet": must be fashion-mnist, mnist, cifar10, folder, synthetic`},
		{with(func(c *Config) { c.Dataset, c.ImageShape = "synthetic", "8193x8x1" }), `image_shape = "8193x8x1": must be HxWxC with H and W 1 to 8192`},
		{with(func(c *Config) { c.Dataset, c.ImageShape = "synthetic", "8x8x2" }), "channels must be 1 or 3"},
		{with(func(c *Config) { c.Dataset, c.Augment = "synthetic", "crop_pad=4:40x40" }), "crop_pad=4:40x40"},
		{with(func(c *Config) { c.Dataset, c.DataDir, c.Augment = "cifar10", "cifar", "center_crop=33" }), "center_crop 33x33 is larger than the image"},
		// MNIST's file names are Fashion-MNIST's: the default directory
		// would train the wrong data set in silence.
		{with(func(c *Config) { c.Dataset = "mnist" }), "dataset mnist with data_dir /usr/share/datasets/fashion-mnist, Fashion-MNIST's files (the default): give -data-dir (data_dir) with mnist's"},
		{with(func(c *Config) { c.Dataset = "cifar10" }), "dataset cifar10 with data_dir /usr/share/datasets/fashion-mnist"},
		{with(func(c *Config) { c.Dataset, c.ValSplit, c.Augment = "folder", 0.1, "center_crop=64" }), "center_crop 64x64"},
		{with(func(c *Config) { c.DataWorkers = 257 }), "data_workers = 257"},
		{with(func(c *Config) { c.Prefetch = 1025 }), "prefetch = 1025"},
		{with(func(c *Config) { c.Mean, c.Std = []float64{math.NaN()}, []float64{1} }), "finite means"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	for _, spec := range []string{"resize=8193x8", "center_crop=9000", "crop_pad=1:8193x8"} {
		var a Augment
		if err := a.Set(spec); err == nil || !strings.Contains(err.Error(), "1 to 8192") {
			t.Errorf("augment %s: %v, want sizes 1 to 8192", spec, err)
		}
	}
	var a Augment
	if err := a.UnmarshalTOML(map[string]any{"resize": []any{int64(9000), int64(8)}}); err == nil || !strings.Contains(err.Error(), "1 to 8192") {
		t.Errorf("[augment] resize = [9000, 8]: %v", err)
	}
}

// TestConfigFlags: every field of Config is bound to the flag of its TOML
// name (dashes for underscores), and Defaults are the flags' defaults.
func TestConfigFlags(t *testing.T) {
	c := Defaults()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c.Flags(fs)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n != 13 {
		t.Errorf("%d flags for 13 keys", n)
	}
	args := strings.Fields("-dataset folder -data-dir d -test-dir e -val-split 0.25 -image-shape 9x9x1 -folder-resize none -lazy -bad-input skip -mean 0.5 -std 0.25 -augment flip -data-workers 3 -prefetch 5")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	want := Config{Dataset: "folder", DataDir: "d", TestDir: "e", ValSplit: 0.25, ImageShape: "9x9x1", FolderResize: "none", Lazy: true,
		BadInput: "skip", Mean: []float64{0.5}, Std: []float64{0.25}, Augment: "flip", DataWorkers: 3, Prefetch: 5}
	if c.Dataset != want.Dataset || c.DataDir != want.DataDir || c.TestDir != want.TestDir || c.ValSplit != want.ValSplit ||
		c.ImageShape != want.ImageShape || c.FolderResize != want.FolderResize || !c.Lazy || c.BadInput != want.BadInput ||
		len(c.Mean) != 1 || len(c.Std) != 1 || c.Augment != want.Augment || c.DataWorkers != 3 || c.Prefetch != 5 {
		t.Errorf("flags gave %+v, want %+v", c, want)
	}
}

// TestBudget: a rank's share of the memory, reservations that add up, a
// refusal of one line naming what, the sizes and the fix, and sizes that
// saturate instead of wrapping.
func TestBudget(t *testing.T) {
	b := newBudget(4<<30, "MemTotal", 2) // 2 GiB per rank
	if err := b.Take("the training set", 1<<30, "fix"); err != nil {
		t.Fatal(err)
	}
	err := b.Take("the batch buffers", 1536<<20, "lower -batch")
	var me *MemoryError
	if !errors.As(err, &me) {
		t.Fatalf("over the share: %v, want a *MemoryError", err)
	}
	for _, w := range []string{"the batch buffers needs 1.5 GiB", "on top of 1.0 GiB already taken", "2.0 GiB per rank, 2 ranks sharing this machine's 4.0 GiB (MemTotal)", "lower -batch"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not say %q", err, w)
		}
	}
	if err := b.Take("the rest", 1<<30, "fix"); err != nil {
		t.Errorf("what is left: %v (a refused Take reserves nothing)", err)
	}
	if err := b.Take("a byte more", 1, "fix"); err == nil {
		t.Error("a byte past the share accepted")
	}
	if err := newBudget(4<<30, "", 1).Take("overflowed", mulBytes(1<<40, 1<<40), "fix"); err == nil || !strings.Contains(err.Error(), "more than 8 EiB") {
		t.Errorf("a saturated size: %v", err)
	}
	if err := newBudget(0, "", 1).Take("anything", 1<<62, "fix"); err != nil {
		t.Errorf("unknown memory: %v, want no check", err)
	}
	var nilBudget *Budget
	if err := nilBudget.Take("anything", 1<<62, "fix"); err != nil {
		t.Errorf("nil budget: %v", err)
	}
	if mulBytes(1<<31, 1<<31, 4) != math.MaxInt64 || mulBytes(3, -1) != math.MaxInt64 || mulBytes(6, 7) != 42 || addBytes(math.MaxInt64, 1) != math.MaxInt64 {
		t.Error("mulBytes/addBytes do not saturate")
	}
}

// TestReadMemory: the smaller of MemTotal and the memory limits of the
// process's control group and its ancestors (cgroup v2 and v1), "max" and
// v1's huge "no limit" ignored.
func TestReadMemory(t *testing.T) {
	write := func(root, p, s string) {
		p = filepath.Join(root, p)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	meminfo := "MemTotal:       16384000 kB\nMemFree:         1000 kB\n"
	v2 := t.TempDir()
	write(v2, "proc/meminfo", meminfo)
	write(v2, "proc/self/cgroup", "0::/slurm/job1/step0\n")
	write(v2, "sys/fs/cgroup/slurm/job1/memory.max", "4294967296\n")
	write(v2, "sys/fs/cgroup/slurm/job1/step0/memory.max", "max\n")
	if m, src := readMemory(v2); m != 4<<30 || !strings.Contains(src, "slurm/job1/memory.max") {
		t.Errorf("cgroup v2 job limit: %d from %q, want 4 GiB from the job's memory.max", m, src)
	}
	v1 := t.TempDir()
	write(v1, "proc/meminfo", meminfo)
	write(v1, "proc/self/cgroup", "5:cpu,cpuacct:/x\n4:memory:/job\n0::/\n")
	write(v1, "sys/fs/cgroup/memory/job/memory.limit_in_bytes", "9223372036854771712\n")
	if m, src := readMemory(v1); m != 16384000*1024 || src != "MemTotal" {
		t.Errorf("cgroup v1 without a limit: %d from %q, want MemTotal", m, src)
	}
	write(v1, "sys/fs/cgroup/memory/job/memory.limit_in_bytes", "1073741824\n")
	if m, _ := readMemory(v1); m != 1<<30 {
		t.Errorf("cgroup v1 limit: %d, want 1 GiB", m)
	}
	if m, _ := readMemory(t.TempDir()); m != 0 {
		t.Errorf("no /proc: %d, want 0 (unknown)", m)
	}
	if m, src := Memory(); m <= 0 || src == "" {
		t.Errorf("this machine: %d bytes from %q", m, src)
	}
}

// TestLoaderRefusesAbsurdSizes: NewLoader checks its buffers against the
// machine before allocating them; a batch whose size overflows is an
// error, not a makeslice panic.
func TestLoaderRefusesAbsurdSizes(t *testing.T) {
	ds := NewSynthetic(8, Shape{4, 4, 1}, 2, 1)
	for _, opts := range []LoaderOptions{
		{Batch: math.MaxInt},
		{Batch: 1 << 40},
		{Batch: 2, Transforms: []Transform{Resize(8192, 8192, Bilinear)}, EvalTransforms: []Transform{Resize(8192, 8192, Bilinear)}, Prefetch: 1 << 20},
	} {
		_, err := NewLoader(ds, nil, opts)
		if err == nil || !strings.Contains(err.Error(), "more than this machine's") {
			t.Errorf("batch %d, prefetch %d: %v, want a refusal", opts.Batch, opts.Prefetch, err)
		}
	}
	if _, err := NewLoader(ds, nil, LoaderOptions{Batch: 4}); err != nil {
		t.Errorf("a small loader: %v", err)
	}
	if n, err := LoaderBytes(Shape{28, 28, 1}, 64, LoaderOptions{}); err != nil || n < 2*64*28*28*4 || n > 3*64*28*28*4+1<<20 {
		t.Errorf("LoaderBytes of batch 64 of 28x28, 2 buffers: %d, %v", n, err)
	}
}

// hugePNG is a PNG whose header announces w x h pixels, with almost no
// data behind it.
func hugePNG(t *testing.T, w, h uint32) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, rgbaImage(1, 1)); err != nil {
		t.Fatal(err)
	}
	p := b.Bytes()
	// Signature (8), IHDR length (4), "IHDR" (4), width, height, ...; CRC
	// over type and data after the 13 data bytes.
	binary.BigEndian.PutUint32(p[16:], w)
	binary.BigEndian.PutUint32(p[20:], h)
	binary.BigEndian.PutUint32(p[29:], crc32.ChecksumIEEE(p[12:29]))
	return p
}

// TestFolderSizeLimits: an image whose header announces more than
// MaxImagePixels is a bad image found before decoding (a decoder would
// allocate gigabytes), and an eager folder that would not fit in the
// budget is refused before decoding, pointing to lazy mode.
func TestFolderSizeLimits(t *testing.T) {
	root := folderFixture(t)
	shape := Shape{8, 8, 3}
	bomb := filepath.Join(root, "cat", "bomb.png")
	if err := os.WriteFile(bomb, hugePNG(t, 100000, 100000), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, lazy := range []bool{false, true} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := LoadImageFolder(root, shape, FolderOptions{Lazy: lazy})
		runtime.ReadMemStats(&after)
		var ie *ImageError
		if !errors.As(err, &ie) || ie.Path != bomb || !strings.Contains(err.Error(), "100000x100000") {
			t.Errorf("lazy %v: %v, want a bad image naming %s and its size", lazy, err, bomb)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
			t.Errorf("lazy %v: %d MiB allocated for a 100000x100000 header", lazy, grew>>20)
		}
	}
	f, err := LoadImageFolder(root, shape, FolderOptions{SkipBad: true, Warn: func(string) {}})
	if err != nil || f.Skipped() != 1 {
		t.Errorf("skipping the oversized image: %v", err)
	}
	os.Remove(bomb)

	small := newBudget(int64(6*shape.Size()), "test", 1) // the fixture has 6 images
	if _, err := LoadImageFolder(root, shape, FolderOptions{Budget: small}); err != nil {
		t.Errorf("6 images in a budget of 6: %v", err)
	}
	_, err = LoadImageFolder(root, shape, FolderOptions{Budget: newBudget(int64(5*shape.Size()), "test", 1)})
	var me *MemoryError
	if !errors.As(err, &me) || !strings.Contains(err.Error(), root) || !strings.Contains(err.Error(), "-lazy") {
		t.Errorf("eager folder over the budget: %v, want a MemoryError naming it and -lazy", err)
	}
	if _, err := LoadImageFolder(root, shape, FolderOptions{Lazy: true, Budget: newBudget(1, "test", 1)}); err != nil {
		t.Errorf("lazy folder: %v (it holds no pixels)", err)
	}
}

// TestOpen: the configured set opened through Config, limits applied, and
// a synthetic set that cannot fit refused before it is generated.
func TestOpen(t *testing.T) {
	c := Defaults()
	c.Dataset, c.ImageShape = "synthetic", "6x6x3"
	s, err := c.Open(OpenOptions{Limit: 30, TestLimit: 10})
	if err != nil || s.Train.Len() != 30 || s.Test.Len() != 10 || s.Train.Shape() != (Shape{6, 6, 3}) || s.Err() != nil {
		t.Fatalf("synthetic: %v", err)
	}
	_, err = c.Open(OpenOptions{Limit: 1000, Budget: newBudget(500*108, "test", 1)})
	var me *MemoryError
	if !errors.As(err, &me) || !strings.Contains(err.Error(), "synthetic training set (1000 samples of 6x6x3)") {
		t.Errorf("synthetic over the budget: %v", err)
	}
	c.Dataset, c.ImageShape, c.DataDir = "mnist", "", filepath.Join(t.TempDir(), "none")
	if _, err := c.Open(OpenOptions{}); err == nil || !strings.Contains(err.Error(), "no train-images-idx3-ubyte") {
		t.Errorf("missing IDX files: %v", err)
	}
}

// classTree writes root/<class>/<i>.png, n 2x2 images for each class of
// counts.
func classTree(t *testing.T, counts map[string]int) string {
	root := t.TempDir()
	for class, n := range counts {
		for i := 0; i < n; i++ {
			writeImage(t, filepath.Join(root, class, strconv.Itoa(i)+".png"), rgbaImage(2, 2))
		}
	}
	return root
}

// classCounts is the number of samples of each class of d.
func classCounts(d Dataset) []int {
	c := make([]int, d.Classes())
	buf := make([]byte, d.Shape().Size())
	for i := 0; i < d.Len(); i++ {
		c[d.Sample(i, buf)]++
	}
	return c
}

// labels is d's labels in order.
func labels(d Dataset) []int {
	l := make([]int, d.Len())
	buf := make([]byte, d.Shape().Size())
	for i := range l {
		l[i] = int(d.Sample(i, buf))
	}
	return l
}

// TestOpenFolderLimitByClass: -limit and -test-limit on a folder, stored
// class by class, keep samples of every class in proportion, the same ones
// every time, with a test tree and after -val-split; IDX and CIFAR-10 keep
// their first N (LimitByClass is not applied to them).
func TestOpenFolderLimitByClass(t *testing.T) {
	tr := classTree(t, map[string]int{"a": 12, "b": 12, "c": 6})
	te := classTree(t, map[string]int{"a": 4, "b": 4, "c": 4})
	c := Defaults()
	c.Dataset, c.DataDir, c.TestDir, c.ImageShape = "folder", tr, te, "2x2x3"
	s, err := c.Open(OpenOptions{Limit: 10, TestLimit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := classCounts(s.Train); !equalInts(got, []int{4, 4, 2}) {
		t.Errorf("-limit 10 of classes of 12, 12, 6: %v per class, want [4 4 2]", got)
	}
	if got := classCounts(s.Test); !equalInts(got, []int{1, 1, 1}) {
		t.Errorf("-test-limit 3 of classes of 4: %v per class, want [1 1 1]", got)
	}
	s2, err := c.Open(OpenOptions{Limit: 10, TestLimit: 3})
	if err != nil || !equalInts(labels(s.Train), labels(s2.Train)) {
		t.Errorf("a second Open chose other samples (%v)", err)
	}
	c.TestDir, c.ValSplit = "", 0.5
	s, err = c.Open(OpenOptions{Limit: 5, TestLimit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := classCounts(s.Train), classCounts(s.Test); !equalInts(a, []int{2, 2, 1}) || !equalInts(b, []int{2, 2, 1}) {
		t.Errorf("-val-split 0.5, limits 5: %v and %v per class, want [2 2 1] each", a, b)
	}
	// Without a limit, or one above the size, the set is as it was.
	if d := LimitByClass(s.Train.(Labeled), 0); !equalInts(labels(d), labels(s.Train)) {
		t.Error("LimitByClass with no limit changed the set")
	}
	// Another data set keeps its first N.
	l, _ := NewImages(Shape{1, 1, 1}, 2, make([]byte, 6), []uint8{0, 0, 0, 0, 1, 1})
	if d := Limit(l, 3); classCounts(d)[1] != 0 {
		t.Error("Limit did not keep the first samples")
	}
}

// TestOpenFolderOneClass: a folder of one class directory is a usage
// error naming it and the other entries ignored; a network would score
// 100% on it whatever it learnt.
func TestOpenFolderOneClass(t *testing.T) {
	root := classTree(t, map[string]int{"cat": 3})
	os.WriteFile(filepath.Join(root, "dog.png"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(root, "notes.txt"), []byte("x"), 0o644)
	c := Defaults()
	c.Dataset, c.DataDir, c.ValSplit, c.ImageShape = "folder", root, 0.5, "2x2x3"
	_, err := c.Open(OpenOptions{})
	want := "image folder " + root + ": 1 class directory (cat), want 2 or more (root/<class>/<image>); 2 entries that are not directories ignored"
	if err == nil || err.Error() != want || !errors.As(err, new(cli.UsageError)) {
		t.Errorf("one class: %v, want a usage error %q", err, want)
	}
}

// TestMeanStdChannels: a mean and std of other than one value per channel
// is a configuration error naming -mean, -std and the channels, found
// without reading the data (IDX sets are grey, a folder or synthetic set
// has its image_shape's channels), and by LoaderOptions for the shape the
// data turned out to have.
func TestMeanStdChannels(t *testing.T) {
	c := Defaults()
	c.Mean, c.Std = []float64{0.5, 0.5}, []float64{0.2, 0.2}
	want := "config: mean [0.5 0.5] and std [0.2 0.2]: 2 values each, but fashion-mnist samples have 1 channel: give -mean and -std (mean, std) one value per channel"
	if err := c.ValidateRecord(); err == nil || err.Error() != want {
		t.Errorf("fashion-mnist: %v, want %q", err, want)
	}
	c.Dataset, c.ImageShape = "synthetic", "4x4x3"
	if err := c.ValidateRecord(); err == nil || !strings.Contains(err.Error(), "2 values each, but synthetic samples have 3 channels") {
		t.Errorf("synthetic 4x4x3: %v", err)
	}
	if _, err := c.LoaderOptions(Shape{4, 4, 1}, 0); err == nil || !strings.Contains(err.Error(), "have 1 channel:") {
		t.Errorf("LoaderOptions of grey samples: %v", err)
	}
	c.Mean, c.Std = []float64{0.5, 0.5, 0.5}, []float64{0.2, 0.2, 0.2}
	if err := c.ValidateRecord(); err != nil {
		t.Errorf("3 values for 3 channels: %v", err)
	}
}

// TestAugmentTable: the [augment] table as a TOML file gives it. A size is
// [H, W] or one integer (as the documentation shows), and a value of the
// wrong type is named by its key, without the line of a re-encoded copy of
// the table.
func TestAugmentTable(t *testing.T) {
	for _, c := range []struct{ table, want string }{
		{"resize = 32", "resize=32x32"},
		{"resize = [36, 40]\ncenter_crop = [32]\nflip = true", "resize=36x40,center_crop=32x32,flip"},
		{"crop_pad = 4\ncrop = 28\nrotate_deg = 10\nblur_sigma = 0.5\ninterp = \"nearest\"", "crop_pad=4:28x28,rotate_deg=10:nearest,blur_sigma=0.5"},
	} {
		var v struct{ Augment Augment }
		if _, err := toml.Decode("[augment]\n"+c.table, &v); err != nil || string(v.Augment) != c.want {
			t.Errorf("[augment] %q: %q, %v; want %q", c.table, v.Augment, err, c.want)
		}
	}
	for _, c := range []struct{ table, want string }{
		{"flip = 3", "augment.flip: 3: want true or false"},
		{"resize = \"a\"", "augment.resize: a: want [H, W] or one size"},
		{"resize = [32, \"a\"]", "augment.resize: [32 a]: want integers"},
		{"resize = 99999999999999", "augment.resize: 99999999999999: want sizes 1 to 8192"},
		{"crop_pad = 1.5", "augment.crop_pad: 1.5: want an integer 0 to 1024"},
		{"crop_pad = -99999999999", "augment.crop_pad: -99999999999: want an integer 0 to 1024"},
		{"interp = 3", "augment.interp: 3: want \"bilinear\" or \"nearest\""},
		{"blur_sigma = \"x\"", "augment.blur_sigma: x: want a number"},
		{"resize = [1, 2, 3]", "augment.resize: [1 2 3], want [H, W] or [size]"},
		{"bogus = 1", "augment: unknown key bogus"},
	} {
		var v struct{ Augment Augment }
		_, err := toml.Decode("# the table starts on line 3\n\n[augment]\n"+c.table, &v)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "line 1") {
			t.Errorf("[augment] %q: %v, want %q", c.table, err, c.want)
		}
	}
}

// TestOpenProgress: Open tells Progress as the load goes on, so that a
// watchdog can tell a slow load from a stuck one: after each IDX split
// (the real Fashion-MNIST), and after each class directory listed and
// each image read, decoded or (lazy) checked, of a folder.
func TestOpenProgress(t *testing.T) {
	var n atomic.Int64
	tick := func() { n.Add(1) }
	c := Defaults() // fashion-mnist in /usr/share/datasets
	if _, err := c.Open(OpenOptions{Limit: 100, TestLimit: 10, Progress: tick}); err != nil {
		t.Fatalf("%v (make test installs dataset-fashion-mnist)", err)
	}
	if got := n.Load(); got != 2 {
		t.Errorf("fashion-mnist: %d calls, want 2 (training and test files)", got)
	}
	root := classTree(t, map[string]int{"a": 3, "b": 2, "c": 4})
	for _, lazy := range []bool{false, true} {
		n.Store(0)
		c := Defaults()
		c.Dataset, c.DataDir, c.ImageShape, c.ValSplit, c.Lazy = "folder", root, "2x2x3", 0.4, lazy
		if _, err := c.Open(OpenOptions{Progress: tick}); err != nil {
			t.Fatal(err)
		}
		if got := n.Load(); got != 3+9 {
			t.Errorf("folder of 3 classes and 9 images, lazy %v: %d calls, want 12", lazy, got)
		}
	}
}
