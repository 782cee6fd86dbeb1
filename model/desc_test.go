package model

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// zooParams are the zoo's parameter counts for 10 classes (batch norm's
// running statistics are buffers, not parameters).
var zooParams = []struct {
	name         string
	mnist, cifar int // 28x28x1, 32x32x3
	buffers      int
}{
	{"cnn", 1630090, 2122186, 0},
	{"lenet5", 61706, 83126, 0},
	{"mlp", 407050, 1578506, 0},
	{"resnet20", 272186, 272474, 1568},
	{"resnet8", 77754, 78042, 672},
}

// TestZoo: every built-in model builds for 28x28x1 and 32x32x3, with the
// parameter counts above (resnet20 on 32x32x3: 272,474, the usual figure
// for He et al.'s ResNet-20 with option-B projection shortcuts and their
// batch norm), reads back what it prints, and has a stable hash.
func TestZoo(t *testing.T) {
	if got, want := strings.Join(Zoo(), " "), "cnn lenet5 mlp resnet20 resnet8"; got != want {
		t.Fatalf("zoo %q, want %q", got, want)
	}
	for _, z := range zooParams {
		d, err := LoadDesc(z.name)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range []Shape{{28, 28, 1}, {32, 32, 3}} {
			net, err := Build(d, in, 10, 2, 1)
			if err != nil {
				t.Fatalf("%s %v: %v", z.name, in, err)
			}
			want := z.mnist
			if in.C == 3 {
				want = z.cifar
			}
			t.Logf("%-8s %v: %9d parameters, %5d buffer values, %11d MACs per sample", z.name, in, len(net.Params), len(net.Buffers), net.MACs())
			if len(net.Params) != want {
				t.Errorf("%s %v: %d parameters, want %d", z.name, in, len(net.Params), want)
			}
			if len(net.Buffers) != z.buffers {
				t.Errorf("%s %v: %d buffer values, want %d", z.name, in, len(net.Buffers), z.buffers)
			}
		}
		back, err := ParseDesc(z.name, d.TOML())
		if err != nil {
			t.Fatalf("%s: reading back its TOML: %v\n%s", z.name, err, d.TOML())
		}
		if !reflect.DeepEqual(back, d) {
			t.Errorf("%s: parse(print(d)) != d:\n%s", z.name, d.TOML())
		}
		if back.Hash() != d.Hash() || len(d.Hash()) != 16 {
			t.Errorf("%s: hash %q, read back %q", z.name, d.Hash(), back.Hash())
		}
	}
}

// TestDescDefaults: defaults written out or left out make the same
// description, hash and all; [[layers]] tables read as inline ones do.
func TestDescDefaults(t *testing.T) {
	short := `layers = [{kind = "conv", out = 4, kernel = 3}, {kind = "maxpool", kernel = 2}, {kind = "batchnorm"}, {kind = "dropout"}, {kind = "residual", layers = [{kind = "relu"}]}, {kind = "flatten"}, {kind = "linear", out = "classes"}]`
	long := `
[[layers]]
kind = "conv"
out = 4
kernel = 3
stride = 1
pad = 0
bias = true

[[layers]]
kind = "maxpool"
kernel = 2
stride = 2

[[layers]]
kind = "batchnorm"
momentum = 0.1
eps = 1e-5

[[layers]]
kind = "dropout"
p = 0.5

[[layers]]
kind = "residual"
shortcut = "identity"

  [[layers.layers]]
  kind = "relu"

[[layers]]
kind = "flatten"

[[layers]]
kind = "linear"
out = "classes"
bias = true
`
	a, err := ParseDesc("short", []byte(short))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseDesc("long", []byte(long))
	if err != nil {
		t.Fatal(err)
	}
	if a.Hash() != b.Hash() || a.Diff(b) != "" || !reflect.DeepEqual(a.Layers, b.Layers) {
		t.Errorf("same network, different descriptions:\n%s\n%s", a.TOML(), b.TOML())
	}
	if _, err := Build(a, Shape{8, 8, 2}, 3, 2, 1); err != nil {
		t.Error(err)
	}
}

func TestDescDiff(t *testing.T) {
	base, _ := LoadDesc("resnet8")
	edit := func(f func(d *Desc)) Desc {
		d, _ := LoadDesc("resnet8")
		f(&d)
		return d
	}
	for _, c := range []struct {
		d    Desc
		want string
	}{
		{base, ""},
		{edit(func(d *Desc) { d.Name = "other" }), ""},
		{edit(func(d *Desc) { d.Layers[0].Out = 32 }), "layer 1 (conv): out 16 vs 32"},
		{edit(func(d *Desc) { d.Layers[1].Kind = "relu" }), "layer 2: kind batchnorm vs relu"},
		{edit(func(d *Desc) { d.Layers[5].Layers[0].Stride = 1 }), "layer 6.1 (conv): stride 2 vs 1"},
		{edit(func(d *Desc) { d.Layers[5].Shortcut = "conv" }), `layer 6 (residual): shortcut "projection" vs "conv"`},
		{edit(func(d *Desc) { d.Layers[3].Layers = d.Layers[3].Layers[:4] }), "layer 4 (residual): 5 layers vs 4"},
		{edit(func(d *Desc) { d.Layers = d.Layers[:3] }), "11 layers vs 3"},
		{edit(func(d *Desc) { d.Layers[10].Out = 10 }), `layer 11 (linear): out "classes" vs 10`},
	} {
		if got := base.Diff(c.d); got != c.want {
			t.Errorf("diff %q, want %q", got, c.want)
		}
		if (base.Hash() == c.d.Hash()) != (c.want == "") {
			t.Errorf("%q: hashes %s %s", c.want, base.Hash(), c.d.Hash())
		}
	}
}

// TestBadDesc: every mistake is one line naming the file, the layer and
// the key, and none panics.
func TestBadDesc(t *testing.T) {
	const conv = `{kind = "conv", out = 4, kernel = 3}`
	for _, c := range []struct{ text, want string }{
		{`layers = [` + conv + `, {kind = "convv"}]`, `model my.toml: layer 2 (convv): unknown kind "convv" (kinds: avgpool, batchnorm, conv, dropout, flatten, globalavgpool, linear, maxpool, relu, residual)`},
		{`layers = [` + conv + `, {kind = "relu"}, {kind = "flatten"}, {kind = "linear", out = "abc"}]`, `model my.toml: layer 4 (linear): key "out" must be an integer >= 1 or "classes", got "abc"`},
		{`layers = [{kind = "conv", out = 4}]`, `model my.toml: layer 1 (conv): key "kernel" is missing`},
		{`layers = [{kind = "conv", out = 4, kernel = 3, kernal = 2}]`, `model my.toml: layer 1 (conv): unknown key "kernal" (conv has keys out, kernel, stride, pad, bias)`},
		{`layers = [{kind = "relu", out = 3}]`, `model my.toml: layer 1 (relu): unknown key "out" (relu has no keys)`},
		{`layers = [{kind = "conv", out = 0, kernel = 3}]`, `model my.toml: layer 1 (conv): key "out" must be an integer >= 1 or "classes", got 0`},
		{`layers = [{kind = "conv", out = -2, kernel = 3}]`, `model my.toml: layer 1 (conv): key "out" must be an integer >= 1 or "classes", got -2`},
		{`layers = [{kind = "conv", out = 4, kernel = 3.0}]`, `model my.toml: layer 1 (conv): key "kernel" must be an integer >= 1, got 3.0`},
		{`layers = [{kind = "conv", out = 4, kernel = 3, pad = -1}]`, `model my.toml: layer 1 (conv): key "pad" must be an integer >= 0, got -1`},
		{`layers = [{kind = "maxpool", kernel = 17}]`, `model my.toml: layer 1 (maxpool): key "kernel" must be at most 16 for a max-pool (its argmax is one byte), got 17`},
		{`layers = [{kind = "conv", out = 4, kernel = 3, bias = "no"}]`, `model my.toml: layer 1 (conv): key "bias" must be true or false, got "no"`},
		{`layers = [{kind = "conv", out = 4000000, kernel = 3}]`, `model my.toml: layer 1 (conv): key "out" must be at most 1048576, got 4000000`},
		{`layers = [{kind = "dropout", p = 1}]`, `model my.toml: layer 1 (dropout): key "p" must be a number in [0, 1), got 1`},
		{`layers = [{kind = "dropout", p = 0.9999999999}]`, `model my.toml: layer 1 (dropout): key "p" must be a number in [0, 1), got 0.9999999999, which drops every value (the mask compares 32 random bits with p rounded to 32 bits, here 1)`},
		{`layers = [{kind = "batchnorm", eps = 0}]`, `model my.toml: layer 1 (batchnorm): key "eps" must be a number in [1e-30, 1], got 0`},
		{`layers = [{kind = "batchnorm", eps = 1e-300}]`, `model my.toml: layer 1 (batchnorm): key "eps" must be a number in [1e-30, 1], got 1e-300`},
		{`layers = [{kind = "residual", shortcut = "proj", layers = [{kind = "relu"}]}]`, `model my.toml: layer 1 (residual): key "shortcut" must be one of identity, projection, conv, got "proj"`},
		{`layers = [{kind = "residual"}]`, `model my.toml: layer 1 (residual): key "layers" is missing (the block's body)`},
		{`layers = [{kind = "residual", layers = []}]`, `model my.toml: layer 1 (residual): key "layers" is an empty list`},
		{`layers = [{kind = "residual", layers = [{kind = "relu"}, {kind = "batchnorm", momentum = "x"}]}]`, `model my.toml: layer 1.2 (batchnorm): key "momentum" must be a number in [0, 1], got "x"`},
		{`layers = [{kind = "residual", layers = [{kind = "relu"}, 3]}]`, `model my.toml: layer 1.2: not a table but 3 (write {kind = "...", ...})`},
		{`layers = [{out = 3}]`, `model my.toml: layer 1: missing key "kind" (kinds: avgpool, batchnorm, conv, dropout, flatten, globalavgpool, linear, maxpool, relu, residual)`},
		{`layers = [{kind = 3}]`, `model my.toml: layer 1: key "kind" must be a string, got 3`},
		{`layers = 3`, `model my.toml: key "layers" must be a list of layers, got 3`},
		{`layers = []`, `model my.toml: key "layers" is an empty list`},
		{`layer = []`, `model my.toml: unknown key "layer" (a description has one key, layers)`},
		{``, `model my.toml: missing key "layers" (the list of layers)`},
		{`layers = [`, `model my.toml: toml: `},
		// Shapes: found when building for 5x5x1 input.
		{`layers = [{kind = "conv", out = 4, kernel = 3}, {kind = "relu"}, {kind = "conv", out = 4, kernel = 7}, {kind = "flatten"}, {kind = "linear", out = "classes"}]`, `model my.toml: layer 3 (conv): kernel 7 larger than its input 3x3 with pad 0`},
		{`layers = [{kind = "maxpool", kernel = 6}, {kind = "flatten"}, {kind = "linear", out = "classes"}]`, `model my.toml: layer 1 (maxpool): kernel 6 larger than its input 5x5`},
		{`layers = [{kind = "residual", layers = [{kind = "conv", out = 4, kernel = 3, pad = 1}]}, {kind = "flatten"}, {kind = "linear", out = "classes"}]`, `model my.toml: layer 1 (residual): the body's output 5x5x4 does not match its input 5x5x1, as the identity shortcut needs (use shortcut = "projection")`},
		{`layers = [{kind = "residual", shortcut = "projection", layers = [{kind = "conv", out = 4, kernel = 2}]}, {kind = "flatten"}, {kind = "linear", out = "classes"}]`, `model my.toml: layer 1 (residual): the body's output 4x4x4 is no strided 1x1 convolution's output of its input 5x5x1, as the projection shortcut needs`},
		{`layers = [{kind = "residual", layers = [{kind = "relu"}, {kind = "conv", out = 1, kernel = 9}]}, {kind = "flatten"}, {kind = "linear", out = "classes"}]`, `model my.toml: layer 1.2 (conv): kernel 9 larger than its input 5x5 with pad 0`},
		{`layers = [{kind = "conv", out = 4, kernel = 3}]`, `model my.toml: the last layer's output 3x3x4 is not a vector of class scores (end with globalavgpool or flatten, then linear)`},
		{`layers = [{kind = "flatten"}, {kind = "linear", out = 7}]`, `model my.toml: the last layer gives 7 scores for 3 classes (use out = "classes")`},
		{`layers = [{kind = "conv", out = 1048576, kernel = 5}, {kind = "conv", out = 1048576, kernel = 1}, {kind = "flatten"}, {kind = "linear", out = "classes"}]`, `model my.toml: layer 2 (conv): too large (out 1048576, kernel 1, input 1x1x1048576)`},
	} {
		d, err := ParseDesc("my.toml", []byte(c.text))
		if err == nil {
			_, err = Build(d, Shape{5, 5, 1}, 3, 2, 1)
		}
		if err == nil {
			t.Errorf("%s: no error, want %s", c.text, c.want)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, c.want) || strings.Contains(msg, "\n") || (!strings.HasSuffix(c.want, " ") && msg != c.want) {
			t.Errorf("%s:\n got %s\nwant %s", c.text, msg, c.want)
		}
	}
}

// TestLoadDesc: a zoo name, a file, and the errors for neither.
func TestLoadDesc(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tiny.toml")
	src, _ := ZooSource("mlp")
	if err := os.WriteFile(path, src, 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := LoadDesc(path)
	if err != nil {
		t.Fatal(err)
	}
	z, _ := LoadDesc("mlp")
	if d.Name != path || d.Diff(z) != "" || d.Hash() != z.Hash() {
		t.Errorf("file %s read as %+v", path, d)
	}
	if net, err := New(path, Shape{}, 10, 2, 1); err != nil || len(net.Params) != 407050 {
		t.Errorf("New(%s): %v", path, err)
	}
	// Nesting that would take the TOML decoder gigabytes (a 135 KB file
	// took 1.7 GB and 41 s), and a FIFO, are refused before decoding.
	nested := filepath.Join(dir, "nested.toml")
	os.WriteFile(nested, []byte("layers = ["+strings.Repeat(`{kind="residual",layers=[`, 5000)+`{kind="relu"}`+strings.Repeat("]}", 5000)+"]\n"), 0o644)
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ arg, want string }{
		{"resnet", `unknown model "resnet" (zoo: cnn, lenet5, mlp, resnet20, resnet8; or a .toml file)`},
		{filepath.Join(dir, "none.toml"), "model " + filepath.Join(dir, "none.toml") + ": no such file or directory"},
		{nested, "model " + nested + ": line 1: arrays and tables nested more than 64 deep"},
		{fifo, "model " + fifo + ": a named pipe (FIFO), not a file"},
	} {
		if _, err := LoadDesc(c.arg); err == nil || err.Error() != c.want {
			t.Errorf("LoadDesc(%q): %v, want %s", c.arg, err, c.want)
		}
	}
	if _, err := ZooSource("../desc.go"); err == nil {
		t.Error("ZooSource read outside the zoo")
	}
}

// FuzzParseDesc: any text gives an error or a description that prints and
// reads back to itself and builds into a Net or an error; nothing panics.
func FuzzParseDesc(f *testing.F) {
	for _, name := range Zoo() {
		src, _ := ZooSource(name)
		f.Add(src)
	}
	f.Add([]byte(dropoutNet))
	f.Add([]byte(`layers = [{kind = "residual", shortcut = "projection", layers = [{kind = "conv", out = 2, kernel = 3, stride = 2}]}, {kind = "globalavgpool"}, {kind = "linear", out = "classes"}]`))
	for _, s := range []string{
		`layers = [{kind = "conv", out = 4, kernel = 3, pad = 5}, {kind = "batchnorm", eps = 1e-30}, {kind = "flatten"}, {kind = "linear", out = "classes"}]`,
		`layers = [{kind = "globalavgpool"}, {kind = "conv", out = 4, kernel = 3, pad = 1}, {kind = "flatten"}, {kind = "flatten"}, {kind = "linear", out = "classes"}, {kind = "relu"}]`,
		`layers = [{kind = "residual", layers = [{kind = "residual", layers = [{kind = "relu"}]}, {kind = "dropout", p = 0.9999999999}]}, {kind = "maxpool", kernel = 2, stride = 9}, {kind = "flatten"}, {kind = "linear", out = "classes"}]`,
		`layers = [{kind = "residual", shortcut = "conv", layers = [{kind = "conv", out = 2, kernel = 3, stride = 3, pad = 1}, {kind = "avgpool", kernel = 2}]}, {kind = "flatten"}, {kind = "linear", out = "classes"}]`,
		`layers = [{kind = "conv", out = "classes", kernel = 8}, {kind = "batchnorm"}, {kind = "dropout", p = 0}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		d, err := ParseDesc("fuzz", text)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error of several lines: %q", err)
			}
			return
		}
		back, err := ParseDesc("fuzz", d.TOML())
		if err != nil || !reflect.DeepEqual(back, d) {
			t.Fatalf("print and read back: %v\n%s", err, d.TOML())
		}
		// Build only what is small: the fuzzer may well ask for 10^6
		// channels, which is legal but slow.
		layers, _, err := stack(Shape{8, 8, 3}, specs(d.Layers, 4), "", "")
		if err != nil {
			if net, err := Build(d, Shape{8, 8, 3}, 4, 2, 1); err == nil {
				net.Close()
				t.Fatal("Build succeeded where stack failed")
			}
			return
		}
		size, macs := 0, 0
		walk(layers, func(l Layer) {
			size += l.NumParams() + 2*l.Out().Size()
			macs += l.MACs()
		})
		if size > 1<<20 || macs > 1<<24 {
			return
		}
		sum, serr := Summarize(d, Shape{8, 8, 3}, 4)
		net, err := Build(d, Shape{8, 8, 3}, 4, 2, 1)
		if (serr == nil) != (err == nil) {
			t.Fatalf("Summarize: %v; Build: %v", serr, err)
		}
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error of several lines: %q", err)
			}
			return
		}
		defer net.Close() // oneDNN's objects: ~20 MB a network, outside Go's heap
		if sum.Params != len(net.Params) || sum.Buffers != len(net.Buffers) || sum.Classes != net.Classes {
			t.Fatalf("Summarize: %d params, %d buffers, %d classes; Build: %d, %d, %d", sum.Params, sum.Buffers, sum.Classes, len(net.Params), len(net.Buffers), net.Classes)
		}
		for _, train := range []bool{true, false} {
			net.SetTraining(train)
			for _, v := range net.Forward(2) {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("training %v: score %v\n%s", train, v, d.TOML())
				}
			}
			loss, _ := net.Loss([]int32{1, 3})
			if math.IsNaN(loss) || math.IsInf(loss, 0) {
				t.Fatalf("training %v: loss %v\n%s", train, loss, d.TOML())
			}
			if !train {
				break
			}
			net.Backward(nil)
			for i, g := range net.Grads {
				if math.IsNaN(float64(g)) || math.IsInf(float64(g), 0) {
					t.Fatalf("gradient %d: %v\n%s", i, g, d.TOML())
				}
			}
		}
	})
}

func TestSummary(t *testing.T) {
	d, _ := LoadDesc("resnet8")
	s, err := Summarize(d, Shape{32, 32, 3}, 10)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := s.Write(&b); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	if s.Params != 78042 || s.Trainable != 78042 || s.Buffers != 672 || s.Hash != d.Hash() || s.Input != "32x32x3" {
		t.Errorf("totals %+v", s)
	}
	params, macs := 0, 0
	for _, r := range s.Rows {
		if r.Depth == 0 {
			params += r.Params
			macs += r.MACs
		}
	}
	if params != s.Params || macs != s.MACs {
		t.Errorf("top-level rows add up to %d parameters and %d MACs, totals %d and %d", params, macs, s.Params, s.MACs)
	}
	for _, want := range []string{
		"res2 (residual)              16x16x32            14,528       3,670,016",
		"  res2.proj.conv1 (conv)     16x16x32               512         131,072",
		"  res2.proj.bn1 (batchnorm)  16x16x32                64              --",
		"Total params: 78,042",
		"Non-trainable buffers: 672",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	cnn, _ := LoadDesc("cnn")
	if _, err := Summarize(cnn, Shape{2, 2, 1}, 10); err == nil || !strings.HasPrefix(err.Error(), "model cnn: layer 6 (maxpool): kernel 2 larger than its input 1x1") {
		t.Errorf("cnn on 2x2 input: %v", err)
	}
}

// TestSummarizeAllocatesNothingLarge: the summary is how callers learn
// whether a network fits before building it, so it must not build it: a
// description of 2.2 G parameters (8.7 GB) used to be allocated and
// initialised by Summarize, 32 s and 8.6 GB before train refused it.
func TestSummarizeAllocatesNothingLarge(t *testing.T) {
	d, err := ParseDesc("big", []byte(`layers = [{kind="flatten"},{kind="linear",out=32768},{kind="relu"},{kind="linear",out=32768},{kind="relu"},{kind="linear",out=32768},{kind="relu"},{kind="linear",out="classes"}]`))
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s, err := Summarize(d, Shape{H: 28, W: 28, C: 1}, 10)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	want := 784*32768 + 32768 + 2*(32768*32768+32768) + 32768*10 + 10
	if s.Params != want {
		t.Errorf("%d parameters, want %d", s.Params, want)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
		t.Errorf("Summarize allocated %d MB", got>>20)
	}
}

// TestParseShape: the bound on a side is said, not only positivity
// ("1048577x1x1" was told to use positive integers).
func TestParseShape(t *testing.T) {
	if s, err := ParseShape("1048576x1x3"); err != nil || s != (Shape{1048576, 1, 3}) {
		t.Errorf("1048576x1x3: %v, %v", s, err)
	}
	for _, in := range []string{"1048577x1x1", "0x28x1", "28x28", "28x28x1x1", "-1x2x3", "axbxc", ""} {
		_, err := ParseShape(in)
		want := fmt.Sprintf("shape %q: want HxWxC, each an integer from 1 to 1048576, e.g. 32x32x3", in)
		if err == nil || err.Error() != want {
			t.Errorf("%q: %v, want %s", in, err, want)
		}
	}
}
