package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"hpctrain/chart"
	"hpctrain/model"
)

// trainCNN trains the CNN briefly with a checkpoint directory and a
// metrics file, with 2 threads (an evaluation with as many reproduces the
// run's scores bit for bit), and returns the run's final record.
func trainCNN(t *testing.T, dir string) map[string]any {
	t.Helper()
	m := filepath.Join(dir, "m.jsonl")
	r := hpctrain(t, 0, 3*time.Minute, "train", "-model", "cnn", "-limit", "2048", "-test-limit", "600", "-threads", "2",
		"-progress", "0", "-checkpoint-dir", filepath.Join(dir, "ck"), "-metrics", m)
	if r.code != 0 {
		t.Fatalf("train: exit %d\n%s", r.code, r.out)
	}
	recs := readMetrics(t, m)
	final := recs[len(recs)-1]
	if final["final"] != true {
		t.Fatalf("no final record: %v", recs)
	}
	return final
}

func evalJSON(t *testing.T, out string) evalReport {
	t.Helper()
	var rep evalReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("eval -json: %v\n%s", err, out)
	}
	return rep
}

// TestEvalIsTheRunsAccuracy: hpctrain eval on a training run's checkpoint
// and data gives the run's final test accuracy and loss, exactly, with
// per-class accuracies and a confusion matrix that add up, as JSON, text
// and a PNG.
func TestEvalIsTheRunsAccuracy(t *testing.T) {
	dir := t.TempDir()
	final := trainCNN(t, dir)
	plot := filepath.Join(dir, "confusion.png")
	rep := evalJSON(t, mustRun(t, evalCmd, "-checkpoint-dir", filepath.Join(dir, "ck"), "-json", "-threads", "2", "-plot", plot))
	if rep.Samples != 600 || rep.Accuracy != final["test_accuracy"].(float64) || rep.Loss != final["test_loss"].(float64) {
		t.Fatalf("eval: %d samples, accuracy %v, loss %v; the run's final: accuracy %v, loss %v", rep.Samples, rep.Accuracy, rep.Loss, final["test_accuracy"], final["test_loss"])
	}
	if rep.Accuracy < 0.5 {
		t.Fatalf("accuracy %v: the run learnt too little for a good test", rep.Accuracy)
	}
	var n, correct int64
	for i, c := range rep.Classes {
		var row int64
		for _, v := range rep.Confusion[i] {
			row += v
		}
		if c.Samples != row || c.Correct != rep.Confusion[i][i] || c.Accuracy == nil || *c.Accuracy != float64(c.Correct)/float64(c.Samples) {
			t.Errorf("class %d: %+v, confusion row %v", i, c, rep.Confusion[i])
		}
		n, correct = n+row, correct+c.Correct
	}
	if n != 600 || int(correct) != rep.Correct || rep.Classes[9].Name != "Ankle boot" {
		t.Errorf("classes: %d samples, %d correct (report %d), class 9 %q", n, correct, rep.Correct, rep.Classes[9].Name)
	}
	f, err := os.Open(plot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil || img.Bounds().Dx() != chart.ConfusionSize {
		t.Errorf("plot: %v", err)
	}
	// The text form says the same.
	out := mustRun(t, evalCmd, "-checkpoint-dir", filepath.Join(dir, "ck"), "-threads", "2")
	for _, want := range []string{fmt.Sprintf("test accuracy %.2f%% (%d of 600)", 100*rep.Accuracy, rep.Correct), "Ankle boot", "confusion matrix", "; 1 rank, batch"} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
	// Another -test-limit: another sample count.
	if r := evalJSON(t, mustRun(t, evalCmd, "-checkpoint-dir", filepath.Join(dir, "ck"), "-json", "-test-limit", "100")); r.Samples != 100 {
		t.Errorf("-test-limit 100: %d samples", r.Samples)
	}

}

// TestEvalUnderMPIRun: two ranks under mpirun evaluate halves of the test
// set and reduce: the counts of one process.
func TestEvalUnderMPIRun(t *testing.T) {
	dir := t.TempDir()
	ck := zooCheckpoint(t, dir, "lenet5")
	rep := evalJSON(t, mustRun(t, evalCmd, "-checkpoint", ck, "-json", "-test-limit", "1000"))
	r := hpctrain(t, 2, 2*time.Minute, "eval", "-checkpoint", ck, "-json", "-test-limit", "1000", "-threads", "1")
	if strings.Contains(r.out, `unknown command "eval"`) {
		t.Fatalf("the hpctrain binary has no eval command: main.go must dispatch \"eval\" to evalCmd\n%s", r.out)
	}
	if r.code != 0 {
		t.Fatalf("mpirun -np 2 hpctrain eval: exit %d\n%s", r.code, r.out)
	}
	var mr evalReport
	lines := 0
	for _, line := range strings.Split(r.out, "\n") {
		if strings.HasPrefix(line, "{") {
			mr = evalJSON(t, line)
			lines++
		}
	}
	if lines != 1 || mr.Samples != 1000 || mr.Correct != rep.Correct || fmt.Sprint(mr.Confusion) != fmt.Sprint(rep.Confusion) {
		t.Errorf("2 ranks: %d reports, %d samples, %d correct; 1 rank: %d correct\n%s", lines, mr.Samples, mr.Correct, rep.Correct, r.out)
	}

	// A rank on another checkpoint or other data is refused on every rank,
	// exit 2. Before, the counts of two networks were added up into one
	// report (exit 0), and a rank with 2,000 samples was counted against a
	// report of 1,000.
	other := zooCheckpoint(t, t.TempDir(), "mlp")
	for _, c := range []struct {
		odd  []string
		want string
	}{
		{[]string{"-checkpoint", other}, "checkpoint differs from rank 0's (model lenet5, step "},
		{[]string{"-test-limit", "2000"}, "test data differs from rank 0's (1000 samples of 28x28x1): rank 1 has 2000 samples"},
	} {
		r := mpmd(t, time.Minute, []string{"eval", "-checkpoint", ck, "-json", "-test-limit", "1000", "-threads", "1"}, c.odd)
		if r.code != 2 {
			t.Fatalf("%v: exit %d, want 2\n%s", c.odd, r.code, r.out)
		}
		if n := strings.Count(r.out, c.want); n != 2 {
			t.Errorf("%v: want both ranks to say %q:\n%s", c.odd, c.want, r.out)
		}
	}
}

// TestEvalOtherData: the same network on an image folder of test images
// (class directories c0..c9) gives the confusion matrix it gives on those
// images from the IDX files.
func TestEvalOtherData(t *testing.T) {
	dir := t.TempDir()
	ck := zooCheckpoint(t, dir, "lenet5")
	imgs, labels := testImages(t, 40)
	folder := filepath.Join(dir, "folder")
	for k := 0; k < 10; k++ {
		os.MkdirAll(filepath.Join(folder, fmt.Sprintf("c%d", k)), 0o755)
	}
	for i, im := range imgs {
		writePNG(t, filepath.Join(folder, fmt.Sprintf("c%d", labels[i]), fmt.Sprintf("%03d.png", i)), grey(im, 28, 28))
	}
	want := evalJSON(t, mustRun(t, evalCmd, "-checkpoint", ck, "-json", "-test-limit", "40"))
	got := evalJSON(t, mustRun(t, evalCmd, "-checkpoint", ck, "-json", "-dataset", "folder", "-data-dir", folder))
	if got.Samples != 40 || fmt.Sprint(got.Confusion) != fmt.Sprint(want.Confusion) || got.Classes[3].Name != "c3" || got.Dataset != "folder" {
		t.Errorf("folder: %d samples, confusion %v, class 3 %q; IDX: %v", got.Samples, got.Confusion, got.Classes[3].Name, want.Confusion)
	}
}

// TestEvalBadInput: one line each, exit 1 or 2, no plot file. A file
// that is no checkpoint is the wrong file named, exit 2 as a missing one
// is; a damaged checkpoint is exit 1.
func TestEvalBadInput(t *testing.T) {
	dir := t.TempDir()
	ck := zooCheckpoint(t, dir, "mlp")
	b, _ := os.ReadFile(ck)
	corrupt := filepath.Join(dir, "corrupt.hpck")
	os.WriteFile(corrupt, b[:len(b)-10], 0o644)
	five := filepath.Join(dir, "five")
	for k := 0; k < 5; k++ {
		os.MkdirAll(filepath.Join(five, fmt.Sprint(k)), 0o755)
		imgs, _ := testImages(t, 1)
		writePNG(t, filepath.Join(five, fmt.Sprint(k), "a.png"), grey(imgs[0], 28, 28))
	}
	plot := filepath.Join(dir, "out", "cm.png")
	notCk := filepath.Join(dir, "job.toml") // a file, but no checkpoint
	os.WriteFile(notCk, []byte("model = \"mlp\"\n"), 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-checkpoint", corrupt}, 1, "truncated"},
		{[]string{"-checkpoint", "/dev/zero"}, 2, "not a checkpoint: a device, not a file"},
		{[]string{"-checkpoint", notCk}, 2, "not a checkpoint: bad magic"},
		{[]string{"-checkpoint", ck, "-model", "cnn"}, 2, "of model mlp, not cnn"},
		{[]string{"-checkpoint-dir", filepath.Join(dir, "none")}, 2, "none: no such directory"},
		{[]string{"-checkpoint", dir}, 2, "a directory (use -checkpoint-dir for its newest checkpoint)"},
		{[]string{"-checkpoint", ck, "-data-dir", filepath.Join(dir, "none")}, 2, "no t10k-images-idx3-ubyte"},
		{[]string{"-checkpoint", ck, "-dataset", "mnist"}, 2, "data_dir is empty: dataset mnist reads its files from there"},
		{[]string{"-checkpoint", ck, "-dataset", "folder", "-data-dir", five}, 2, "has 5 classes, the network 10"},
		{[]string{"-checkpoint", ck, "-plot", plot}, 2, "no such directory"},
		{[]string{"-checkpoint", ck, "-test-limit", "-5"}, 2, "-test-limit -5"},
		{[]string{"-checkpoint", ck, "-test-limit", "-1"}, 2, "-test-limit -1: must be >= 0 (0: all)"},
		{[]string{"-checkpoint", ck, "-batch", "16777216"}, 2, "-batch 16777216: model mlp with batches of that many samples needs"},
		{[]string{"-checkpoint", ck, "extra"}, 2, "unexpected argument"},
	} {
		r := runCmd(evalCmd, c.args...)
		if r.code != c.code || !strings.Contains(r.errs, c.want) || strings.Count(r.errs, "\n") != 1 {
			t.Errorf("%v: exit %d, want %d and one line with %q:\n%s%s", c.args, r.code, c.code, c.want, r.out, r.errs)
		}
	}

	// A description file edited since the run is called that, not a
	// model other than itself ("of model my.toml, not my.toml").
	mine := filepath.Join(dir, "my.toml")
	text := "layers = [{kind = \"flatten\"}, {kind = \"linear\", out = 512}, {kind = \"relu\"}, {kind = \"linear\", out = \"classes\"}]\n"
	os.WriteFile(mine, []byte(text), 0o644)
	d, err := model.LoadDesc(mine)
	if err != nil {
		t.Fatal(err)
	}
	myCk := testCheckpoint(t, filepath.Join(dir, "mine"), mine, d, nil)
	os.WriteFile(mine, []byte(strings.Replace(text, "512", "256", 1)), 0o644)
	e := runCmd(evalCmd, "-checkpoint", myCk, "-model", mine)
	if want := mine + " (-model) has changed since the checkpoint was written: layer 2 (linear): out 256 vs 512"; e.code != 2 || !strings.Contains(e.errs, want) {
		t.Errorf("an edited description: exit %d, want 2 and %q:\n%s", e.code, want, e.errs)
	}

	// A colour network on Fashion-MNIST: the shape is the reason given,
	// not the run's three means (it blamed those, which nobody had set).
	colour := filepath.Join(dir, "colour")
	r := hpctrain(t, 0, time.Minute, "train", "-model", "mlp", "-dataset", "synthetic", "-image-shape", "8x8x3", "-mean", "0.5,0.5,0.5", "-std", "0.2,0.2,0.2",
		"-limit", "64", "-test-limit", "16", "-threads", "1", "-progress", "0", "-checkpoint-dir", colour)
	if r.code != 0 {
		t.Fatalf("train: exit %d\n%s", r.code, r.out)
	}
	e = runCmd(evalCmd, "-checkpoint-dir", colour, "-dataset", "fashion-mnist")
	if want := "data set fashion-mnist gives 28x28x1 samples, the network takes 8x8x3"; e.code != 2 || !strings.Contains(e.errs, want) || strings.Count(e.errs, "\n") != 1 {
		t.Errorf("a colour network on Fashion-MNIST: exit %d, want 2 and one line with %q:\n%s%s", e.code, want, e.out, e.errs)
	}
}

// TestFolderClassNamesRecorded: a run on an image folder records its class
// directories in the checkpoint, and eval, predict and export name the
// outputs by that record: before, they read the folder as it is now, so a
// class directory renamed since the run renamed the outputs (predict said
// "dog" of a cat), and one added, or a class behind a symlink, made the
// checkpoint "of another network". eval on a tree of other class names
// (the same count) is refused instead of scored against the wrong classes.
func TestFolderClassNamesRecorded(t *testing.T) {
	dir := t.TempDir()
	at := func(parts ...string) string { return filepath.Join(append([]string{dir}, parts...)...) }
	for _, tree := range []string{"train", "test"} {
		for k, cls := range []string{"cat", "dog"} {
			os.MkdirAll(at(tree, cls), 0o755)
			for i := 0; i < 8; i++ {
				im := image.NewGray(image.Rect(0, 0, 8, 8))
				for j := range im.Pix {
					im.Pix[j] = uint8(200*k + 7*i + j%5) // dark cats, light dogs
				}
				writePNG(t, at(tree, cls, fmt.Sprintf("%d.png", i)), im)
			}
		}
	}
	ck := at("ck")
	if r := hpctrain(t, 0, 2*time.Minute, "train", "-dataset", "folder", "-data-dir", at("train"), "-test-dir", at("test"), "-image-shape", "8x8x1",
		"-model", "mlp", "-batch", "4", "-epochs", "2", "-threads", "1", "-progress", "0", "-checkpoint-dir", ck); r.code != 0 {
		t.Fatalf("training: exit %d\n%s", r.code, r.out)
	}
	// The training tree changes after the run: cat renamed, a new class.
	os.Rename(at("train", "cat"), at("train", "zebra"))
	os.MkdirAll(at("train", "ant"), 0o755)
	writePNG(t, at("train", "ant", "0.png"), image.NewGray(image.Rect(0, 0, 8, 8)))

	r := runCmd(predictCmd, "-checkpoint-dir", ck, at("test", "cat", "0.png"))
	if r.code != 0 || !strings.Contains(r.out, `"name":"cat"`) || strings.Contains(r.out, "zebra") || strings.Contains(r.out, "ant") {
		t.Errorf("predict after the training tree changed: exit %d, want the recorded names cat and dog:\n%s%s", r.code, r.out, r.errs)
	}
	r = runCmd(exportCmd, "-checkpoint-dir", ck, "-format", "safetensors", "-o", at("m.safetensors"))
	if r.code != 0 {
		t.Errorf("export after the training tree changed: exit %d\n%s%s", r.code, r.out, r.errs)
	} else if b, err := os.ReadFile(at("m.safetensors")); err != nil || !bytes.Contains(b, []byte(`[\"cat\",\"dog\"]`)) && !bytes.Contains(b, []byte(`["cat","dog"]`)) {
		t.Errorf("export's metadata does not name the recorded classes cat, dog (%v)", err)
	}
	got := evalJSON(t, mustRun(t, evalCmd, "-checkpoint-dir", ck, "-json", "-dataset", "folder", "-data-dir", at("test")))
	if len(got.Classes) != 2 || got.Classes[0].Name != "cat" || got.Samples != 16 {
		t.Errorf("eval on a tree of the same names: %d samples, classes %+v", got.Samples, got.Classes)
	}

	os.Rename(at("test", "cat"), at("test", "bee")) // bee, dog: the same count, other names
	r = runCmd(evalCmd, "-checkpoint-dir", ck, "-dataset", "folder", "-data-dir", at("test"))
	want := "has the classes bee, dog, the network was trained on cat, dog"
	if r.code != 2 || !strings.Contains(r.errs, want) {
		t.Errorf("eval on other class names: exit %d, want 2 saying %q:\n%s%s", r.code, want, r.out, r.errs)
	}
}
