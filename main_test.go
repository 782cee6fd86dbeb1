package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"hpctrain/bench"
	"hpctrain/internal/mpitest"
)

// bin is the hpctrain binary built once for these tests.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hpctrain-test")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "hpctrain")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building hpctrain: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is what one run printed and how it ended.
type result struct {
	out  string
	code int
}

// hpctrain runs the binary alone (np == 0) or under mpirun with np ranks,
// failing the test if it does not end within timeout (a hang).
func hpctrain(t *testing.T, np int, timeout time.Duration, args ...string) result {
	t.Helper()
	return hpctrainEnv(t, np, timeout, nil, args...)
}

// hpctrainEnv is hpctrain with variables added to the environment.
func hpctrainEnv(t *testing.T, np int, timeout time.Duration, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var cmd *exec.Cmd
	if np == 0 {
		cmd = exec.CommandContext(ctx, bin, args...)
	} else {
		cmd = mpitest.Command(ctx, np, bin, args...)
	}
	if env != nil {
		cmd.Env = append(cmd.Environ(), env...)
	}
	hide(t, cmd, env)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("hpctrain %v (np %d) did not end within %v (hang):\n%s", args, np, timeout, out)
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{string(out), code}
}

// mpmd runs two ranks under mpirun, each with args and rank 1 with odd
// after them (MPMD), failing the test if they do not end within timeout.
func mpmd(t *testing.T, timeout time.Duration, args, odd []string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	base := append([]string{bin}, args...)
	all := append([]string{"--oversubscribe", "--bind-to", "none", "-np", "1"}, base...)
	all = append(append(append(all, ":", "-np", "1"), base...), odd...)
	cmd := exec.CommandContext(ctx, "mpirun", all...)
	cmd.Env = mpitest.Env()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("mpirun %v did not end within %v (hang):\n%s", all, timeout, out)
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{string(out), code}
}

// hideEnv, in the environment hpctrainEnv is given, lists files (space
// separated) the job must not see: it then runs in a mount namespace of
// its own with /dev/null mounted over each (unshare, as root), as on a
// machine without them.
const hideEnv = "TEST_HIDE_FILES"

func hide(t *testing.T, cmd *exec.Cmd, env []string) {
	t.Helper()
	var files string
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, hideEnv+"="); ok {
			files = v
		}
	}
	if files == "" {
		return
	}
	if os.Getuid() != 0 {
		t.Fatalf("hiding %s needs root (mount namespaces)", files)
	}
	script := `for f in $` + hideEnv + `; do mount --bind /dev/null "$f" || exit 1; done; exec "$@"`
	cmd.Args = append([]string{"unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"}, cmd.Args...)
	p, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Path = p
}

func TestHelp(t *testing.T) {
	r := hpctrain(t, 0, 10*time.Second, "-h")
	if r.code != 0 || !strings.Contains(r.out, "train") {
		t.Errorf("hpctrain -h: code %d\n%s", r.code, r.out)
	}
	r = hpctrain(t, 0, 10*time.Second, "train", "-h")
	for _, f := range []string{"-config", "-model", "-epochs", "-batch", "-lr", "-momentum", "-optimizer", "-seed", "-data-dir", "-limit", "-threads", "-metrics", "-print-config", "-dataset", "-data-workers", "-prefetch", "-augment", "-mean", "-std", "-bad-input", "-test-dir", "-val-split"} {
		if !strings.Contains(r.out, "  "+f+" ") && !strings.Contains(r.out, "  "+f+"\n") {
			t.Errorf("train -h does not explain %s", f)
		}
	}
	if r.code != 0 {
		t.Errorf("train -h exit code %d", r.code)
	}
	// eval's data flags default to the run's, except where another
	// -dataset makes them that set's own.
	r = hpctrain(t, 0, 10*time.Second, "eval", "-h")
	for _, want := range []string{"(raw or .gz), the CIFAR-10 .bin batches, or the folder's training tree (default: the training run's; with another -dataset, train's default for fashion-mnist, else none)",
		"(default: the training run's; with another -dataset, the network's input)", "or skip (a counted warning) (default: the training run's)\n",
		"test samples only (0: all) (default: the training run's -test-limit)\n"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("eval -h lacks %q:\n%s", want, r.out)
		}
	}
	r = hpctrain(t, 0, 10*time.Second, "train", "-print-config", "-lr", "0.5")
	if r.code != 0 || !strings.Contains(r.out, "lr = 0.5") {
		t.Errorf("-print-config: code %d\n%s", r.code, r.out)
	}
}

// TestSingleProcess trains without a launcher: world size 1.
func TestSingleProcess(t *testing.T) {
	m := filepath.Join(t.TempDir(), "m.jsonl")
	r := hpctrain(t, 0, 2*time.Minute, "train", "-model", "mlp", "-epochs", "2", "-limit", "3200", "-test-limit", "1000", "-metrics", m)
	if r.code != 0 {
		t.Fatalf("code %d\n%s", r.code, r.out)
	}
	// One rank: said in the singular (it was "1 ranks x 2 threads").
	for _, w := range []string{"1 rank x ", "final: test accuracy", "after 2 epochs (100 steps, 1 rank)"} {
		if !strings.Contains(r.out, w) {
			t.Errorf("output lacks %q:\n%s", w, r.out)
		}
	}
	recs := readMetrics(t, m)
	if len(recs) != 3 || recs[2]["final"] != true || recs[2]["world_size"].(float64) != 1 || recs[1]["epoch"].(float64) != 2 {
		t.Errorf("metrics %v", recs)
	}
	for _, k := range []string{"epoch", "step", "world_size", "threads_per_rank", "train_loss", "test_accuracy", "samples_per_second", "train_seconds"} {
		if _, ok := recs[2][k]; !ok {
			t.Errorf("metrics lack %s", k)
		}
	}
}

func readMetrics(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		recs = append(recs, m)
	}
	return recs
}

// TestBadInput: each kind of bad input gives one clear error line per rank,
// a non-zero exit, no panic trace and no hang, under mpirun with 2 ranks.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	real := "/usr/share/datasets/fashion-mnist/"
	copyFile := func(dst, src string) {
		b, err := os.ReadFile(real + src)
		if err != nil {
			t.Fatal(err)
		}
		write(dst, b)
	}
	// A data dir whose training images are not IDX, and one whose labels are
	// truncated.
	for _, f := range []string{"train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"} {
		copyFile("badmagic/"+f, f)
	}
	write("badmagic/train-images-idx3-ubyte", []byte("this is not an IDX file at all"))
	lab, _ := os.ReadFile(real + "t10k-labels-idx1-ubyte.gz")
	copyFile("trunc/t10k-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz")
	copyFile("trunc/train-images-idx3-ubyte.gz", "train-images-idx3-ubyte.gz")
	copyFile("trunc/train-labels-idx1-ubyte.gz", "train-labels-idx1-ubyte.gz")
	write("trunc/t10k-labels-idx1-ubyte.gz", lab[:len(lab)/2])
	bad := write("bad.toml", []byte("model = \"cnn\"\nlr = [oops\n"))
	// A description that parses but does not fit the 28x28 input.
	shape := write("shape.toml", []byte(`layers = [{kind = "maxpool", kernel = 3}, {kind = "maxpool", kernel = 3}, {kind = "conv", out = 4, kernel = 7}, {kind = "flatten"}, {kind = "linear", out = "classes"}]`))
	// Batch norm after a linear layer, one sample per rank: one value per
	// channel, normalised to 0 (it trained, learning nothing).
	bnvec := write("bnvec.toml", []byte(`layers = [{kind = "flatten"}, {kind = "linear", out = 16}, {kind = "batchnorm"}, {kind = "relu"}, {kind = "linear", out = "classes"}]`))

	// Exit 2: settings or files the user names and must change; 1: data
	// that is damaged.
	for _, c := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"-data-dir", filepath.Join(dir, "nowhere")}, "no train-images-idx3-ubyte", 2},
		{[]string{"-data-dir", filepath.Join(dir, "badmagic")}, "bad magic number", 1},
		{[]string{"-data-dir", filepath.Join(dir, "trunc")}, "t10k-labels-idx1-ubyte.gz", 1},
		{[]string{"-model", "resnet"}, `unknown model "resnet"`, 2},
		{[]string{"-model", shape}, "layer 3 (conv): kernel 7 larger than its input 3x3 with pad 0", 2},
		{[]string{"-cpu-kernels", "blas", "-precision", "bf16"}, "cpu_kernels blas computes in fp32 only", 2},
		{[]string{"-precision", "fp16"}, "precision fp16 needs a CUDA device", 2},
		{[]string{"-model", bnvec, "-batch", "1"}, "layer bn1 (batchnorm) would train on 1 value per channel (batch 1, output 1x1x16 per sample)", 2},
		{[]string{"-optimizer", "sgdx"}, `unknown optimizer "sgdx"`, 2},
		{[]string{"-config", bad}, "line 2", 2},
		{[]string{"-batch", "0"}, "batch = 0", 2},
		{[]string{"-lr", "-0.1"}, "lr = -0.1", 2},
		{[]string{"-epochs", "0"}, "epochs = 0", 2},
		{[]string{"-limit", "10", "-batch", "64"}, "do not fill one global batch", 2},
		// Outputs that cannot be written fail at start-up, not after the training.
		{[]string{"-timeline", filepath.Join(dir, "nowhere", "t.json")}, "timeline file", 2},
		{[]string{"-timeline", dir}, "timeline file " + dir + ": a directory; give a file name in it", 2},
		{[]string{"-metrics", filepath.Join(dir, "nowhere", "m.jsonl")}, "metrics file", 2},
	} {
		t.Run(c.want, func(t *testing.T) {
			r := hpctrain(t, 2, time.Minute, append([]string{"train", "-limit", "640"}, c.args...)...)
			lines := errorLines(t, r)
			if len(lines) != 2 && !(c.code == 2 && len(lines) == 1) {
				t.Fatalf("%d error lines, want one per rank (or one, before MPI):\n%s", len(lines), r.out)
			}
			if !strings.Contains(strings.Join(lines, ""), c.want) {
				t.Errorf("no rank says %q:\n%s", c.want, r.out)
			}
			if r.code != c.code {
				t.Errorf("exit %d, want %d:\n%s", r.code, c.code, r.out)
			}
		})
	}
}

// TestConfigMismatch starts two ranks with different settings (MPMD): both
// stop with a message naming the odd rank and key instead of training
// apart. The collective and the checkpoint directory are keys a
// checkpoint does not record, which once escaped the comparison and left
// the ranks waiting on each other.
func TestConfigMismatch(t *testing.T) {
	ck := t.TempDir()
	for _, c := range []struct {
		odd  []string
		want string
	}{
		{[]string{"-lr", "0.02"}, "rank 1 has another lr;"},
		{[]string{"-collective", "mpi"}, "rank 1 has another collective;"},
		{[]string{"-checkpoint-dir", ck}, "rank 1 has another checkpoint_dir;"},
		{[]string{"-optimizer", "adam", "-beta2", "0.98"}, "rank 1 has another optimizer, lr, momentum, beta2;"}, // adam's own lr and momentum
	} {
		r := mpmd(t, time.Minute, []string{"train", "-model", "mlp", "-limit", "640", "-collective", "shm"}, c.odd)
		// Exit 2, like any other configuration error (it was 1).
		if r.code != 2 {
			t.Fatalf("%v: exit %d, want 2\n%s", c.odd, r.code, r.out)
		}
		if n := strings.Count(r.out, "configuration differs from rank 0's: "+c.want); n != 2 {
			t.Errorf("%v: want both ranks to say %q:\n%s", c.odd, c.want, r.out)
		}
	}
	// The same settings agree, pointer keys (an optimizer's beta2) too:
	// each process holds its own pointer, and the comparison is of values.
	r := hpctrain(t, 2, time.Minute, "train", "-model", "mlp", "-limit", "640", "-test-limit", "100", "-progress", "0",
		"-optimizer", "adam", "-beta1", "0.8", "-beta2", "0.98", "-eps", "1e-7")
	if r.code != 0 {
		t.Errorf("2 ranks with the same adam settings: exit %d\n%s", r.code, r.out)
	}
}

// TestAccuracyBar: 2 ranks, per-rank batch 64, SGD lr 0.01 momentum 0.9,
// one epoch of all 60,000 images reaches >= 80% test accuracy (PyTorch with
// the same recipe: 82.2%, docs/background.md).
func TestAccuracyBar(t *testing.T) {
	m := filepath.Join(t.TempDir(), "m.jsonl")
	r := hpctrain(t, 2, 10*time.Minute, "train", "-model", "cnn", "-epochs", "1", "-batch", "64", "-lr", "0.01", "-momentum", "0.9", "-threads", "1", "-metrics", m, "-progress", "20s")
	if r.code != 0 {
		t.Fatalf("code %d\n%s", r.code, r.out)
	}
	recs := readMetrics(t, m)
	last := recs[len(recs)-1]
	acc := last["test_accuracy"].(float64)
	t.Logf("2 ranks, 1 epoch: test accuracy %.2f%%, %.0f samples/s", 100*acc, last["samples_per_second"].(float64))
	if acc < 0.80 {
		t.Errorf("test accuracy %.4f < 0.80\n%s", acc, r.out)
	}
	if last["world_size"].(float64) != 2 || last["step"].(float64) != 468 {
		t.Errorf("final record %v", last)
	}
}

// TestSignalCheckpointResume: SIGUSR1 to one rank of two makes both
// checkpoint the same step and exit 85; -resume auto then finishes with the
// uninterrupted run's result.
func TestSignalCheckpointResume(t *testing.T) {
	dir := t.TempDir()
	args := []string{"train", "-model", "cnn", "-limit", "3840", "-test-limit", "500", "-epochs", "2", "-threads", "1", "-progress", "0"}
	ref := filepath.Join(dir, "ref.jsonl")
	if r := hpctrain(t, 2, 3*time.Minute, append(args, "-metrics", ref)...); r.code != 0 {
		t.Fatalf("reference run: %d\n%s", r.code, r.out)
	}
	ck := filepath.Join(dir, "ck")
	j := startJob(t, 2, nil, append(args, "-checkpoint-dir", ck)...)
	// Rank 0 prints the data line once every rank has its signal handler
	// and training begins: signal one rank (the last hpctrain started) then,
	// not after a fixed sleep that a loaded machine can outlast.
	j.waitFor(t, "hpctrain: data ", time.Minute)
	pids, _ := exec.Command("pgrep", "-n", "-f", bin+" train").Output()
	if len(pids) == 0 {
		t.Fatalf("no rank found\n%s", j.out.String())
	}
	exec.Command("kill", "-USR1", strings.TrimSpace(string(pids))).Run()
	code, _ := j.end(t, 3*time.Minute)
	out := &j.out
	if code != 85 || !strings.Contains(out.String(), "checkpointed step") {
		t.Fatalf("exit %d (want 85)\n%s", code, out.String())
	}
	// The record so far (the interrupted run's lines, here a marker): a
	// requeued run appends to it, each of its lines saying where it resumed.
	res := filepath.Join(dir, "res.jsonl")
	if err := os.WriteFile(res, []byte(`{"marker":"before the requeue"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := hpctrain(t, 2, 3*time.Minute, append(args, "-checkpoint-dir", ck, "-resume", "auto", "-metrics", res)...); r.code != 0 || !strings.Contains(r.out, "resuming from") {
		t.Fatalf("resume: %d\n%s", r.code, r.out)
	}
	a, b := readMetrics(t, ref), readMetrics(t, res)
	fa, fb := a[len(a)-1], b[len(b)-1]
	if fa["test_loss"] != fb["test_loss"] || fa["step"] != fb["step"] {
		t.Errorf("resumed final %v, uninterrupted %v", fb, fa)
	}
	if len(b) < 2 || b[0]["marker"] != "before the requeue" {
		t.Errorf("the resumed run did not append to the metrics record: %v", b)
	}
	for _, m := range b[1:] {
		if from, _ := m["resumed_from"].(float64); from <= 0 {
			t.Errorf("resumed run's metrics line lacks resumed_from: %v", m)
		}
	}
}

// TestBadDataInput: bad files in the data sets of -dataset (a corrupt,
// unreadable or wrong-size image in a folder, an empty class, a CIFAR-10
// batch of the wrong size, a test set of another shape) end a run alone
// with one error line naming the file or directory, a non-zero exit and
// no panic trace; with -bad-input skip a corrupt image is skipped with a
// counted warning and the run succeeds.
func TestBadDataInput(t *testing.T) {
	dir := t.TempDir()
	at := func(parts ...string) string { return filepath.Join(append([]string{dir}, parts...)...) }
	write := func(p string, b []byte) {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pngOf := func(w, h int, v uint8) []byte {
		m := image.NewRGBA(image.Rect(0, 0, w, h))
		for i := range m.Pix {
			m.Pix[i] = v + uint8(i)
		}
		var b bytes.Buffer
		png.Encode(&b, m)
		return b.Bytes()
	}
	// A good tree: 2 classes of 6 8x8 images; each bad tree is a copy
	// with one fault.
	tree := func(name string) string {
		for _, cls := range []string{"ant", "bee"} {
			for i := 0; i < 6; i++ {
				write(at(name, cls, fmt.Sprintf("%d.png", i)), pngOf(8, 8, uint8(40*i)))
			}
		}
		return at(name)
	}
	tree("good")
	tree("corrupt")
	write(at("corrupt", "ant", "bad.png"), []byte("\x89PNG\r\n\x1a\nthis is no image"))
	tree("unreadable")
	os.Symlink(at("nowhere.png"), at("unreadable", "bee", "gone.png"))
	tree("empty")
	os.MkdirAll(at("empty", "cow"), 0o755)
	write(at("empty", "cow", "notes.txt"), []byte("no images here"))
	tree("big")
	write(at("big", "ant", "big.png"), pngOf(12, 10, 3))
	tree("cut")
	write(at("cut", "bee", "cut.png"), pngOf(8, 8, 5)[:60]) // passes the lazy header check
	tree("other")
	os.Rename(at("other", "bee"), at("other", "cat"))
	tree("stray") // a file of another format, and images one level too deep
	write(at("stray", "ant", "0.bmp"), []byte("BM"))
	write(at("stray", "bee", "more", "0.png"), pngOf(8, 8, 1))
	for _, cls := range []string{"ant", "bee", "cow"} { // one image a class: no validation image
		write(at("lone", cls, "0.png"), pngOf(8, 8, 9))
	}

	// CIFAR-10: five training batches and a test batch of 4 records, one
	// training batch cut short.
	rec := make([]byte, 4*3073)
	for i := 0; i < 4; i++ {
		rec[i*3073] = byte(i)
	}
	for _, n := range []string{"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"} {
		write(at("cifar", n), rec)
	}
	write(at("cifar", "data_batch_3.bin"), rec[:len(rec)-7])

	// IDX: 28x28 training images but 32x32 test images.
	idx := func(p string, dims ...int) {
		b := []byte{0, 0, 8, byte(len(dims))}
		n := 1
		for _, d := range dims {
			b = binary.BigEndian.AppendUint32(b, uint32(d))
			n *= d
		}
		write(p, append(b, make([]byte, n)...))
	}
	idx(at("idx", "train-images-idx3-ubyte"), 16, 28, 28)
	idx(at("idx", "train-labels-idx1-ubyte"), 16)
	idx(at("idx", "t10k-images-idx3-ubyte"), 8, 32, 32)
	idx(at("idx", "t10k-labels-idx1-ubyte"), 8)

	folder := func(root string, more ...string) []string {
		return append([]string{"-dataset", "folder", "-data-dir", root, "-image-shape", "8x8x3"}, more...)
	}
	for _, c := range []struct {
		name string
		args []string
		want []string
		code int // a data set's fault 1, the settings' 2
	}{
		{"corrupt image", folder(at("corrupt"), "-val-split", "0.25"), []string{at("corrupt", "ant", "bad.png"), "-bad-input skip"}, 1},
		{"unreadable image", folder(at("unreadable"), "-val-split", "0.25"), []string{at("unreadable", "bee", "gone.png")}, 1},
		{"empty class", folder(at("empty"), "-val-split", "0.25"), []string{at("empty", "cow"), "no .png"}, 1},
		{"wrong image size", folder(at("big"), "-val-split", "0.25", "-folder-resize", "none"), []string{at("big", "ant", "big.png"), "resizing is off"}, 1},
		{"corrupt in test tree", folder(at("good"), "-test-dir", at("corrupt")), []string{at("corrupt", "ant", "bad.png")}, 1},
		{"test tree of other classes", folder(at("good"), "-test-dir", at("other")), []string{at("other"), "same class directories"}, 1},
		{"lazy, cut short", folder(at("good"), "-test-dir", at("cut"), "-lazy"), []string{"reading images", at("cut", "bee", "cut.png")}, 1},
		{"folder that is a file", folder(at("cifar", "test_batch.bin"), "-val-split", "0.25"), []string{at("cifar", "test_batch.bin") + " is a file, not a directory"}, 2},
		// Said at start-up (exit 2), not after an epoch's training.
		{"empty validation split", folder(at("lone"), "-val-split", "0.5", "-loss-log", at("lone.log")), []string{"val_split = 0.5 holds out no image"}, 2},
		{"CIFAR batch size", []string{"-dataset", "cifar10", "-data-dir", at("cifar")}, []string{at("cifar", "data_batch_3.bin"), "not a whole number"}, 1},
		{"test images of another shape", []string{"-dataset", "mnist", "-data-dir", at("idx")}, []string{at("idx"), "32x32x1", "28x28x1"}, 1},
		{"augmentation too large", []string{"-dataset", "synthetic", "-limit", "64", "-augment", "crop_pad=4:40x40"}, []string{"crop_pad=4:40x40"}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"train", "-model", "mlp", "-batch", "4", "-progress", "0", "-threads", "1"}, c.args...)
			r := hpctrain(t, 0, time.Minute, args...)
			lines := errorLines(t, r)
			if len(lines) != 1 {
				t.Fatalf("%d error lines, want 1:\n%s", len(lines), r.out)
			}
			if r.code != c.code {
				t.Errorf("exit %d, want %d", r.code, c.code)
			}
			if _, err := os.Stat(at("lone.log")); err == nil {
				t.Errorf("a step was trained before the refusal (the loss log was written)")
			}
			for _, w := range c.want {
				if !strings.Contains(lines[0], w) {
					t.Errorf("error line does not say %q:\n%s", w, lines[0])
				}
			}
		})
	}

	// Skipping: the corrupt image is named in a warning and counted, and
	// training goes on; a lazy folder reads the cut image as zeros.
	for _, c := range []struct {
		args []string
		want string
	}{
		{folder(at("corrupt"), "-val-split", "0.25", "-bad-input", "skip"), "1 bad images skipped at load"},
		{folder(at("good"), "-test-dir", at("cut"), "-lazy", "-bad-input", "skip", "-epochs", "2"), "read as zeros in this epoch"},
		// Entries the data set leaves out are said, not passed over.
		{folder(at("stray"), "-val-split", "0.25"), "2 entries of the class directories not read (only .png, .jpg, .jpeg and .gif files directly inside are): 1 .bmp file, 1 sub-directory; the first is " + at("stray", "ant", "0.bmp")},
	} {
		for _, np := range []int{0, 2} {
			// Under 2 ranks each reads its own shard lazily: the rank
			// that read the image says so (rank 0 alone said nothing).
			r := hpctrain(t, np, time.Minute, append([]string{"train", "-model", "mlp", "-batch", "4", "-progress", "0", "-threads", "1", "-data-workers", "2"}, c.args...)...)
			if r.code != 0 || !strings.Contains(r.out, "warning: ") || !strings.Contains(r.out, c.want) || !strings.Contains(r.out, "final: test accuracy") {
				t.Errorf("%v, np %d: exit %d, want success with a warning %q:\n%s", c.args, np, r.code, c.want, r.out)
			}
		}
	}

	// Stopping on a training image read as zeros, with a checkpoint after
	// every step (13 of them in the epoch): the run stops at the first
	// checkpoint after the image was read, so no checkpoint holds a model
	// trained on zeros. Before, every step's checkpoint was written and
	// the run stopped at the end of the epoch; -resume auto then went on
	// from the damaged model.
	// Where it stops is the step that trained on the image, whatever the
	// loader read ahead: with 3 workers and 8 batches prefetched it once
	// stopped earlier than without workers.
	var newest []string
	for _, loader := range [][]string{{"-data-workers", "0"}, {"-data-workers", "3", "-prefetch", "8"}} {
		ck := filepath.Join(t.TempDir(), "ck")
		args := append([]string{"train", "-model", "mlp", "-batch", "1", "-progress", "0", "-threads", "1",
			"-checkpoint-dir", ck, "-checkpoint-every", "1"}, folder(at("cut"), "-test-dir", at("good"), "-lazy")...)
		r := hpctrain(t, 0, time.Minute, append(args, loader...)...)
		kept, _ := filepath.Glob(filepath.Join(ck, "ckpt-*.hpck"))
		if lines := errorLines(t, r); len(lines) != 1 || !strings.Contains(lines[0], "reading images") || len(kept) >= 13 {
			t.Errorf("a training image read as zeros, %v: %d checkpoints (want fewer than the epoch's 13), error lines %q:\n%s", loader, len(kept), lines, r.out)
		}
		if len(kept) > 0 {
			newest = append(newest, filepath.Base(kept[len(kept)-1]))
		}
	}
	if len(newest) != 2 || newest[0] != newest[1] {
		t.Errorf("newest checkpoint without and with workers reading ahead: %v, want the same", newest)
	}
}

// errorLines fails t unless the run failed without a panic trace, and
// returns its "hpctrain: rank ..." error lines.
func errorLines(t *testing.T, r result) []string {
	t.Helper()
	if r.code == 0 {
		t.Fatalf("exit code 0\n%s", r.out)
	}
	if strings.Contains(r.out, "goroutine ") || strings.Contains(r.out, "panic:") {
		t.Fatalf("panic trace:\n%s", r.out)
	}
	var lines []string
	for _, l := range strings.Split(r.out, "\n") {
		if strings.HasPrefix(l, "hpctrain: rank ") {
			lines = append(lines, l)
		}
	}
	// Bad configuration is refused before MPI starts, so before a rank
	// exists: then the whole output is the one line, and the exit code 2.
	if out := strings.TrimSpace(r.out); len(lines) == 0 && r.code == 2 && strings.HasPrefix(out, "hpctrain: ") && !strings.Contains(out, "\n") {
		lines = []string{out}
	}
	return lines
}

// TestOneRankCommands: models, summary and plot use no MPI; under mpirun
// rank 0 alone prints (and writes the PNG) and says so, the others return
// without a word, instead of every rank printing the same output.
func TestOneRankCommands(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, "m.jsonl")
	if err := os.WriteFile(m, []byte(`{"epoch":1,"train_loss":0.9,"test_accuracy":0.7}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	png := filepath.Join(dir, "c.png")
	for _, c := range []struct {
		args []string
		once string // in the output once, not once per rank
	}{
		{[]string{"models"}, "hpctrain models NAME prints one"},
		{[]string{"models", "mlp"}, "# mlp: "},
		{[]string{"summary", "-model", "mlp"}, "Total params: 407,050"},
		{[]string{"plot", "-metrics", m, "-out", png}, "hpctrain: wrote " + png},
	} {
		r := hpctrain(t, 2, time.Minute, c.args...)
		note := "hpctrain: " + c.args[0] + " runs in one process: rank 0 of these 2 does the work, the others nothing"
		if r.code != 0 || strings.Count(r.out, c.once) != 1 || strings.Count(r.out, note) != 1 {
			t.Errorf("mpirun -np 2 hpctrain %q: exit %d, want %q and %q once each:\n%s", c.args, r.code, c.once, note, r.out)
		}
	}
	mustPNG(t, png)
}

// streams runs the binary alone and returns its standard output and
// standard error apart, and its exit code.
func streams(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("hpctrain %q: %v", args, err)
	}
	return out.String(), errs.String(), code
}

// TestHelpOnStdout: help that was asked for, of hpctrain or of any
// command, is on standard output with exit 0, like the top-level help
// (subcommands printed theirs on standard error); a bad flag is one line
// on standard error, exit 2, and hpctrain without a command prints its
// usage there too.
func TestHelpOnStdout(t *testing.T) {
	for _, args := range [][]string{
		{"-h"}, {"-help"}, {"--help"}, {"help"},
		{"train", "-h"}, {"train", "--help"}, {"eval", "-help"}, {"predict", "-h"}, {"export", "--help"},
		{"models", "-h"}, {"summary", "-help"}, {"topo", "-h"}, {"plot", "--help"},
		{"slurm", "-h"}, {"slurm", "template", "-h"}, {"bench", "-h"}, {"bench", "-help"}, {"bench", "--help"}, {"bench", "gemm", "-h"},
		{"bench", "step", "--help"}, {"bench", "allreduce", "-h"}, {"bench", "scaling", "-help"},
		{"help", "summary"}, {"help", "bench", "optim"}, {"help", "slurm", "template"}, {"help", "plot"},
	} {
		out, errs, code := streams(t, args...)
		want := "Usage"
		if args[0] == "help" && len(args) > 1 {
			want = "Usage: hpctrain " + strings.Join(args[1:], " ") // the command's own
		}
		if code != 0 || !strings.Contains(out, want) || errs != "" {
			t.Errorf("hpctrain %q: exit %d, stdout %d bytes, stderr %q; want %q on stdout, exit 0", args, code, len(out), errs, want)
		}
	}
	// Every benchmark's help says how it is called and what it measures,
	// before its flags (it was Go's bare "Usage of hpctrain bench gemm:").
	for _, b := range bench.Benchmarks {
		out, _, code := streams(t, "bench", b.Name, "-h")
		if want := "Usage: " + b.Call + " [flags]\n\n"; code != 0 || !strings.HasPrefix(out, want) || !strings.Contains(out, b.Line[1:]+".\n\nFlags:\n  -") {
			t.Errorf("hpctrain bench %s -h: exit %d, stdout %q; want it to start %q and give %q", b.Name, code, out, want, b.Line)
		}
		// A model description file works wherever -model is taken.
		if strings.Contains(out, "  -model") && !strings.Contains(out, "or a description FILE.toml") {
			t.Errorf("hpctrain bench %s -h: -model does not say a FILE.toml is taken:\n%s", b.Name, out)
		}
	}
	for _, args := range [][]string{{"models", "-nope"}, {"summary", "-nope"}, {"plot", "-nope"}, {"train", "-nope"}, {"bench", "gemm", "-nope"}, {"help", "nope"}} {
		out, errs, code := streams(t, args...)
		if code != 2 || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "nope") {
			t.Errorf("hpctrain %q: exit %d, stdout %q, stderr %q; want one line on stderr, exit 2", args, code, out, errs)
		}
	}
	for _, args := range [][]string{nil, {"bench"}} {
		if out, errs, code := streams(t, args...); code != 2 || out != "" || !strings.Contains(errs, "Usage") {
			t.Errorf("hpctrain %q alone: exit %d, stdout %q, stderr %d bytes; want the usage on stderr, exit 2", args, code, out, len(errs))
		}
	}
}

// TestSubcommandErrors: a missing or unknown subcommand, and a model
// argument that is not one, are one line, exit 2, saying so once
// ("hpctrain: hpctrain slurm: ..." before); a flag after models' NAME is
// said to go before it (it was counted as a second model).
func TestSubcommandErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"slurm"}, "hpctrain: slurm needs the subcommand template (see hpctrain slurm -h)\n"},
		{[]string{"slurm", "render"}, `hpctrain: unknown slurm subcommand "render" (there is one: template; see hpctrain slurm -h)` + "\n"},
		{[]string{"bench", "gemmm"}, `hpctrain: unknown benchmark "gemmm" (gemm, peak, step, allreduce, affinity, optim, data, scaling; see hpctrain bench -h)` + "\n"},
		{[]string{"models", "mlp", "cnn"}, "hpctrain: one model at a time, got 2: mlp cnn (see hpctrain models -h)\n"},
		{[]string{"models", "mlp", "-canonical"}, "hpctrain: -canonical after the model mlp: flags go before it (hpctrain models -canonical mlp)\n"},
	} {
		if out, errs, code := streams(t, c.args...); code != 2 || out != "" || errs != c.want {
			t.Errorf("hpctrain %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errs, c.want)
		}
	}
}

// TestBenchFlagMismatch starts the two ranks of bench allreduce and bench
// scaling with different flags (MPMD): both stop at once, exit 2, each
// naming the flag and both values, instead of waiting on each other in
// collectives of other sizes or counts. A flag for rank 0's own output
// (-json) may differ.
func TestBenchFlagMismatch(t *testing.T) {
	for _, c := range []struct {
		args, odd []string
		want      string
	}{
		{[]string{"bench", "allreduce", "-b", "4", "-e", "64", "-rounds", "3"}, []string{"-e", "128"}, "flag -e differs from rank 0's (64): rank 1 has 128;"},
		{[]string{"bench", "allreduce", "-b", "4", "-e", "64", "-rounds", "3"}, []string{"-collective", "shm"}, "flag -collective differs from rank 0's (mpi): rank 1 has shm;"},
		{[]string{"bench", "scaling", "-model", "mlp", "-steps", "2", "-q"}, []string{"-sweep-max-mb", "1"}, "flag -sweep-max-mb differs from rank 0's (0): rank 1 has 1;"},
		{[]string{"bench", "scaling", "-model", "mlp", "-steps", "2", "-q"}, []string{"-collective", "mpi"}, "flag -collective differs from rank 0's (shm): rank 1 has mpi;"},
	} {
		r := mpmd(t, 30*time.Second, c.args, c.odd)
		if r.code != 2 {
			t.Errorf("%v, rank 1 %v: exit %d, want 2\n%s", c.args, c.odd, r.code, r.out)
		}
		if n := strings.Count(r.out, c.want); n != 2 {
			t.Errorf("%v, rank 1 %v: want both ranks to say %q:\n%s", c.args, c.odd, c.want, r.out)
		}
	}
	js := filepath.Join(t.TempDir(), "ar.json")
	if r := mpmd(t, 30*time.Second, []string{"bench", "allreduce", "-b", "4", "-e", "8", "-rounds", "1"}, []string{"-json", js}); r.code != 0 {
		t.Errorf("-json on rank 1 only: exit %d\n%s", r.code, r.out)
	}
}

// TestBenchAllreduceItersHelp: bench allreduce -h says how many calls a
// block has by size, and the JSON rows of a sweep have those: it once said
// 50 calls for the smallest sizes, and 2 from 1 MiB, where the rows had 49,
// and 2 from 512 KiB.
func TestBenchAllreduceItersHelp(t *testing.T) {
	r := hpctrain(t, 0, 10*time.Second, "bench", "allreduce", "-h")
	m := regexp.MustCompile(`(\d+) for the smallest sizes down to (\d+) from (\d+) (KiB|MiB)`).FindStringSubmatch(r.out)
	if m == nil {
		t.Fatalf("-n's help names no calls by size:\n%s", r.out)
	}
	small, fewest, from := atoi(t, m[1]), atoi(t, m[2]), atoi(t, m[3])<<10
	if m[4] == "MiB" {
		from <<= 10
	}
	js := filepath.Join(t.TempDir(), "ar.json")
	if r := hpctrain(t, 0, time.Minute, "bench", "allreduce", "-b", "4", "-e", "2097152", "-rounds", "1", "-w", "0", "-json", js); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.out)
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Size  int `json:"size"`
		Iters int `json:"iters"`
	}
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatal(err)
	}
	first := 0 // the smallest size with the fewest calls
	for _, row := range rows {
		if row.Size == 4 && row.Iters != small {
			t.Errorf("4 B: %d calls per block, -h says %d", row.Iters, small)
		}
		if row.Iters < fewest {
			t.Errorf("%d B: %d calls per block, -h says at least %d", row.Size, row.Iters, fewest)
		}
		if row.Iters == fewest && first == 0 {
			first = row.Size
		}
	}
	if first != from {
		t.Errorf("%d calls per block from %d B on, -h says from %d B", fewest, first, from)
	}
}

// atoi is s as a number, failing t where it is none.
func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMakeNeedsCgo: make build without cgo stops with one line saying so
// (exit 2) instead of the compiler's page of undefined symbols from the
// packages whose C parts it left out; with cgo the check passes.
func TestMakeNeedsCgo(t *testing.T) {
	for _, c := range []struct {
		cgo  string
		fail bool
	}{{"0", true}, {"1", false}} {
		cmd := exec.Command("make", "-s", "cgo-check")
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+c.cgo)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != c.fail || c.fail && !strings.Contains(string(out), "hpctrain needs cgo") {
			t.Errorf("CGO_ENABLED=%s make cgo-check: %v\n%s", c.cgo, err, out)
		}
	}
}
