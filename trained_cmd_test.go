package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"hpctrain/affinity"
	"hpctrain/checkpoint"
	"hpctrain/data"
	"hpctrain/internal/cli"
	"hpctrain/model"
	"hpctrain/train"
)

// Helpers of the eval, predict and export tests.

// cmdResult is what a command run in-process printed and how it ended,
// as main would end it.
type cmdResult struct {
	out, errs string // stdout, and stderr with main's error line
	code      int
}

// runCmd runs cmd (evalCmd, predictCmd, exportCmd) as main's run does:
// its error becomes the line "hpctrain: ..." and the exit code 2 (usage)
// or 1.
func runCmd(cmd func([]string, io.Writer, io.Writer) error, args ...string) cmdResult {
	var out, errs bytes.Buffer
	defer keepPlacement()()
	err := cmd(args, &out, &errs)
	r := cmdResult{out: out.String()}
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
	case errors.As(err, new(cli.UsageError)):
		r.code = 2
	default:
		r.code = 1
	}
	if err != nil && r.code != 0 {
		errs.WriteString("hpctrain: " + err.Error() + "\n")
	}
	r.errs = errs.String()
	return r
}

// keepPlacement saves what placing compute threads (eval's and predict's
// train.PlaceCPU, in this process) changes for the whole process: every
// thread's cpu mask, GOMAXPROCS and the thread variables affinity.Apply
// sets. The function it returns puts them back, so that a command run
// in-process with -threads 1 does not leave every later test, and the
// processes they start, on one cpu.
func keepPlacement() (restore func()) {
	mask, err := affinity.Allowed()
	procs := runtime.GOMAXPROCS(0)
	env := map[string]*string{}
	for _, k := range append([]string{"GOMP_CPU_AFFINITY", "KMP_AFFINITY"}, affinity.ThreadEnv...) {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = &v
		} else {
			env[k] = nil
		}
	}
	return func() {
		if err == nil {
			affinity.Apply(affinity.Plan{Policy: affinity.Cores, CPUs: mask, Threads: 1})
		}
		runtime.GOMAXPROCS(procs)
		for k, v := range env {
			if v == nil {
				os.Unsetenv(k)
			} else {
				os.Setenv(k, *v)
			}
		}
	}
}

// mustRun is runCmd that fails t unless the command succeeded.
func mustRun(t *testing.T, cmd func([]string, io.Writer, io.Writer) error, args ...string) string {
	t.Helper()
	r := runCmd(cmd, args...)
	if r.code != 0 {
		t.Fatalf("%v: exit %d\n%s%s", args, r.code, r.out, r.errs)
	}
	return r.out
}

// testCheckpoint writes a checkpoint of model d on Fashion-MNIST, as a run
// of settings cfg would (nil: the defaults), with parameters and
// batch-norm statistics that are not the initial ones, and returns its
// path.
func testCheckpoint(t *testing.T, dir, name string, d model.Desc, cfg *train.Config) string {
	t.Helper()
	if cfg == nil {
		c := train.Defaults()
		cfg = &c
	}
	cfg.Model = name
	net, err := model.Build(d, model.Shape{H: 28, W: 28, C: 1}, 10, 1, 11)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	for _, g := range net.Groups() {
		if g.Norm || g.Bias {
			for i := g.Off; i < g.Off+g.Len; i++ {
				net.Params[i] += float32(rng.NormFloat64() * 0.2)
			}
		}
	}
	// Running statistics as training leaves them: batch norm's running
	// mean and variance of real inputs (training-mode passes over test
	// images 100 to 163), so that activations keep a trained network's
	// scale; then moved a little, so that a mix-up of statistics shows.
	if len(net.Buffers) > 0 {
		calib, err := model.Build(d, model.Shape{H: 28, W: 28, C: 1}, 10, 64, 11)
		if err != nil {
			t.Fatal(err)
		}
		copy(calib.Params, net.Params)
		imgs, _ := testImages(t, 164)
		x := calib.Input()
		for i, im := range imgs[100:] {
			for j, p := range im {
				x[i*784+j] = float32(p) / 255
			}
		}
		for range 30 {
			calib.Forward(64)
		}
		for i, v := range calib.Buffers {
			net.Buffers[i] = v * float32(1+0.1*rng.NormFloat64())
		}
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := &checkpoint.State{Model: name, Desc: string(net.Desc.TOML()), Config: js, RunID: "test" + name, Step: 123, Epoch: 2,
		Sections: []checkpoint.Section{{Name: "params", Data: net.Params}}}
	if len(net.Buffers) > 0 {
		st.Sections = append(st.Sections, checkpoint.Section{Name: "buffers", Data: net.Buffers})
	}
	p, err := checkpoint.Save(dir, st, 0)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func zooCheckpoint(t *testing.T, dir, name string) string {
	t.Helper()
	d, err := model.LoadDesc(name)
	if err != nil {
		t.Fatal(err)
	}
	return testCheckpoint(t, dir, name, d, nil)
}

// testImages returns the first n Fashion-MNIST test images and labels.
func testImages(t *testing.T, n int) ([][]byte, []byte) {
	t.Helper()
	ds, err := data.LoadMNIST(data.DefaultDataDir, false)
	if err != nil {
		t.Fatal(err)
	}
	imgs, labels := make([][]byte, n), make([]byte, n)
	for i := range imgs {
		imgs[i] = make([]byte, 28*28)
		labels[i] = byte(ds.Sample(i, imgs[i]))
	}
	return imgs, labels
}

// writeIDX writes n test images as dir/test-images-idx3-ubyte (raw IDX)
// with their labels beside, and returns its path.
func writeIDX(t *testing.T, dir string, n int) string {
	t.Helper()
	imgs, labels := testImages(t, n)
	var b bytes.Buffer
	b.Write([]byte{0, 0, 8, 3})
	for _, d := range []uint32{uint32(n), 28, 28} {
		binary.Write(&b, binary.BigEndian, d)
	}
	for _, im := range imgs {
		b.Write(im)
	}
	p := filepath.Join(dir, "test-images-idx3-ubyte")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var l bytes.Buffer
	l.Write([]byte{0, 0, 8, 1})
	binary.Write(&l, binary.BigEndian, uint32(n))
	l.Write(labels)
	os.WriteFile(filepath.Join(dir, "test-labels-idx1-ubyte"), l.Bytes(), 0o644)
	return p
}

// predictions parses predict's JSON lines.
func predictions(t *testing.T, out string) []prediction {
	t.Helper()
	var ps []prediction
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var p prediction
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatalf("predict line %q: %v", line, err)
		}
		ps = append(ps, p)
	}
	return ps
}

func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	if math.IsNaN(d) {
		return math.Inf(1)
	}
	return d
}

// python is Debian's interpreter, where python3-onnx and python3-torch
// install (not a pyenv one earlier on PATH).
const python = "/usr/bin/python3"

// needPython fails t, with the fix, unless python imports every module.
func needPython(t *testing.T, modules ...string) {
	t.Helper()
	for _, m := range modules {
		if out, err := exec.Command(python, "-c", "import "+m).CombinedOutput(); err != nil {
			t.Fatalf("%s cannot import %s (%v: %s): run scripts/setup.sh, which installs Debian's python3-onnx and python3-torch", python, m, err, strings.TrimSpace(string(out)))
		}
	}
}

// readFloats reads little-endian float32s.
func readFloats(t *testing.T, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// dirNames lists a directory.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, e := range es {
		s = append(s, e.Name())
	}
	return s
}
