package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"hpctrain/train"
)

func writePNG(t *testing.T, path string, img image.Image) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func grey(pix []byte, h, w int) *image.Gray {
	g := image.NewGray(image.Rect(0, 0, w, h))
	copy(g.Pix, pix)
	return g
}

// TestPredictImagesAndIDX: PNG files of test images give exactly the
// scores of the same images in an IDX file; the IDX lines carry index and
// label; top-k is sorted, named, and its probabilities are a softmax.
func TestPredictImagesAndIDX(t *testing.T) {
	dir := t.TempDir()
	ck := zooCheckpoint(t, dir, "lenet5")
	idx := writeIDX(t, dir, 10)
	imgs, labels := testImages(t, 10)
	var pngs []string
	for i, im := range imgs {
		p := filepath.Join(dir, "img"+string(rune('a'+i))+".png")
		writePNG(t, p, grey(im, 28, 28))
		pngs = append(pngs, p)
	}
	fromIDX := predictions(t, mustRun(t, predictCmd, "-checkpoint", ck, "-logits", "-top", "10", idx))
	// The labels found compressed beside raw images too.
	lp := filepath.Join(filepath.Dir(idx), "test-labels-idx1-ubyte")
	lb, _ := os.ReadFile(lp)
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(lb)
	zw.Close()
	os.WriteFile(lp+".gz", z.Bytes(), 0o644)
	os.Remove(lp)
	if gz := predictions(t, mustRun(t, predictCmd, "-checkpoint", ck, "-top", "1", idx)); len(gz) != 10 || gz[3].Label == nil || *gz[3].Label != int(labels[3]) {
		t.Errorf("labels as .gz beside raw images: not found (%+v)", gz)
	}
	fromPNG := predictions(t, mustRun(t, predictCmd, append([]string{"-checkpoint", ck, "-logits", "-top", "3"}, pngs...)...))
	if len(fromIDX) != 10 || len(fromPNG) != 10 {
		t.Fatalf("%d and %d lines, want 10", len(fromIDX), len(fromPNG))
	}
	for i := range fromIDX {
		a, b := fromIDX[i], fromPNG[i]
		if string(b.Input) != pngs[i] || a.Index == nil || *a.Index != i || a.Label == nil || *a.Label != int(labels[i]) {
			t.Fatalf("line %d: %+v / %+v", i, a, b)
		}
		if d := maxAbsDiff(a.Logits, b.Logits); d != 0 {
			t.Errorf("image %d: PNG and IDX scores differ by %g", i, d)
		}
		if len(a.Top) != 10 || len(b.Top) != 3 {
			t.Fatalf("top %d and %d, want 10 and 3", len(a.Top), len(b.Top))
		}
		sum := 0.0
		for j, c := range a.Top {
			sum += c.Probability
			if j > 0 && c.Probability > a.Top[j-1].Probability {
				t.Errorf("image %d: top not sorted: %+v", i, a.Top)
			}
			if c.Name == "" {
				t.Errorf("class %d has no name", c.Class)
			}
			// softmax: p_j / p_0 = exp(z_j - z_0)
			want := math.Exp(float64(a.Logits[c.Class]) - float64(a.Logits[a.Top[0].Class]))
			if got := c.Probability / a.Top[0].Probability; math.Abs(got-want) > 1e-9*max(1, want) {
				t.Errorf("image %d class %d: probability ratio %v, want %v", i, c.Class, got, want)
			}
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Errorf("image %d: probabilities sum to %v", i, sum)
		}
	}
	// Other sizes, colour and JPEG are converted as training's folders
	// convert them (luma, bilinear resize).
	big := image.NewRGBA(image.Rect(0, 0, 56, 40))
	for y := 0; y < 40; y++ {
		for x := 0; x < 56; x++ {
			big.Set(x, y, color.RGBA{uint8(4 * x), uint8(6 * y), 90, 255})
		}
	}
	pb := filepath.Join(dir, "big.png")
	writePNG(t, pb, big)
	pj := filepath.Join(dir, "photo.jpg")
	f, _ := os.Create(pj)
	jpeg.Encode(f, big, nil)
	f.Close()
	ps := predictions(t, mustRun(t, predictCmd, "-checkpoint", ck, pb, pj))
	if len(ps) != 2 || string(ps[0].Input) != pb || string(ps[1].Input) != pj || len(ps[0].Top) != 5 {
		t.Errorf("big and JPEG: %+v", ps)
	}
}

// TestPredictIsTrainingsPreprocessing: a colour network trained on
// 32x32x3 samples centre-cropped to 28x28 for evaluation, with its own
// mean and std: predict on PNG files of test samples gives the scores the
// run's evaluation pipeline feeds the network, exactly.
func TestPredictIsTrainingsPreprocessing(t *testing.T) {
	dir := t.TempDir()
	ckdir := filepath.Join(dir, "ck")
	r := hpctrain(t, 0, 2*time.Minute, "train", "-model", "lenet5", "-dataset", "synthetic", "-image-shape", "32x32x3",
		"-augment", "crop_pad=2:28x28,flip", "-mean", "0.4,0.5,0.6", "-std", "0.2,0.25,0.3",
		"-limit", "256", "-test-limit", "12", "-batch", "32", "-steps", "8", "-threads", "1", "-progress", "0", "-checkpoint-dir", ckdir)
	if r.code != 0 {
		t.Fatalf("train: exit %d\n%s", r.code, r.out)
	}
	tr, err := train.LatestTrained(ckdir, train.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set, err := tr.OpenEval(tr.Config.DataConfig, 12, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	set.Loader.StartRange(0, 12)
	b, _ := set.Loader.Next()
	copy(tr.Net.Input(), b.X)
	want := append([]float32(nil), tr.Net.Forward(b.N)...)
	set.Loader.Release(b)

	raw := make([]byte, 32*32*3)
	var pngs []string
	for i := 0; i < 12; i++ {
		set.Test.Sample(i, raw)
		img := image.NewRGBA(image.Rect(0, 0, 32, 32))
		for p := 0; p < 32*32; p++ {
			img.Pix[4*p], img.Pix[4*p+1], img.Pix[4*p+2], img.Pix[4*p+3] = raw[3*p], raw[3*p+1], raw[3*p+2], 255
		}
		pngs = append(pngs, filepath.Join(dir, strings.Repeat("x", i+1)+".png"))
		writePNG(t, pngs[i], img)
	}
	ps := predictions(t, mustRun(t, predictCmd, append([]string{"-checkpoint-dir", ckdir, "-logits", "-threads", "1"}, pngs...)...))
	var got []float32
	for _, p := range ps {
		got = append(got, p.Logits...)
		if p.Top[0].Name != "" {
			t.Errorf("synthetic classes have no names, got %q", p.Top[0].Name)
		}
	}
	if d := maxAbsDiff(got, want); d != 0 {
		t.Errorf("predict on PNGs differs from the run's evaluation pipeline by %g", d)
	}
}

// TestPredictBadInput: an input that is not an image (or a damaged one),
// a missing input, a bad checkpoint: one line, exit 1 or 2, and not one
// prediction printed, even for the good inputs before the bad one.
func TestPredictBadInput(t *testing.T) {
	dir := t.TempDir()
	ck := zooCheckpoint(t, dir, "mlp")
	good := filepath.Join(dir, "good.png")
	imgs, _ := testImages(t, 1)
	writePNG(t, good, grey(imgs[0], 28, 28))
	text := filepath.Join(dir, "notes.png")
	os.WriteFile(text, []byte("these are not pixels"), 0o644)
	b, _ := os.ReadFile(good)
	cut := filepath.Join(dir, "cut.png")
	os.WriteFile(cut, b[:len(b)/2], 0o644)
	badIDX := filepath.Join(dir, "bad-images-idx3-ubyte")
	os.WriteFile(badIDX, []byte{0, 0, 8, 3, 0, 0, 0, 5, 0, 0, 0, 28}, 0o644)
	wrongIDX := writeIDX(t, t.TempDir(), 2)
	wb, _ := os.ReadFile(wrongIDX)
	wb[11], wb[15] = 14, 56 // 2 images of 14x56
	os.WriteFile(wrongIDX, wb, 0o644)
	// Labels beside the images that are not theirs: fewer of them, and a
	// label of a class the network does not have.
	fewer := writeIDX(t, t.TempDir(), 3)
	fl := filepath.Join(filepath.Dir(fewer), "test-labels-idx1-ubyte")
	os.WriteFile(fl, []byte{0, 0, 8, 1, 0, 0, 0, 2, 1, 2}, 0o644)
	past := writeIDX(t, t.TempDir(), 2)
	pl := filepath.Join(filepath.Dir(past), "test-labels-idx1-ubyte")
	os.WriteFile(pl, []byte{0, 0, 8, 1, 0, 0, 0, 2, 1, 10}, 0o644)
	floats := filepath.Join(dir, "floats-idx3-ubyte") // IDX of float32
	os.WriteFile(floats, append([]byte{0, 0, 0x0d, 3, 0, 0, 0, 1, 0, 0, 0, 28, 0, 0, 0, 28}, make([]byte, 4*784)...), 0o644)
	fifo := filepath.Join(t.TempDir(), "fifo.png") // no writer: opening it would block
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-checkpoint", ck, good, fifo}, 2, "input " + fifo + ": a named pipe (FIFO), not a file"},
		{[]string{"-checkpoint", ck, good, text}, 1, "input " + text + ": not a readable image: image: unknown format"},
		{[]string{"-checkpoint", ck, good, cut}, 1, "input " + cut + ": not a readable image"},
		{[]string{"-checkpoint", ck, good, filepath.Join(dir, "nope.png")}, 2, "nope.png: no such file"},
		{[]string{"-checkpoint", ck, dir}, 2, "a directory, not a file"},
		{[]string{"-checkpoint", ck, good, badIDX}, 1, "input " + badIDX + ": truncated header"},
		{[]string{"-checkpoint", ck, wrongIDX}, 1, "images of 14x56x1, but the network was trained on 28x28x1 samples"},
		{[]string{"-checkpoint", ck}, 2, "no inputs"},
		{[]string{"-checkpoint", ck, "-top", "0", good}, 2, "-top 0"},
		{[]string{"-checkpoint", ck, "-model", "lenet5", good}, 2, "of model mlp, not lenet5"},
		{[]string{"-checkpoint", good, good}, 2, "not a checkpoint: bad magic"}, // the wrong file named
		{[]string{"-checkpoint", ck, fewer}, 1, "labels " + fl + ": dimensions [2], want one label for each of the 3 images"},
		{[]string{"-checkpoint", ck, past}, 1, "labels " + pl + ": label 10 of image 1, but the network has 10 classes"},
		{[]string{"-checkpoint", ck, good, "-top", "1"}, 2, "input -top: no such file (flags go before the inputs)"},
		{[]string{"-checkpoint", ck, "-checkpoint-dir", dir, good}, 2, "-checkpoint " + ck + " and -checkpoint-dir " + dir + " both given: give one"},
		{[]string{"-checkpoint", ck, floats}, 1, "input " + floats + ": element type 0x0d, want 0x08 (unsigned byte)"},
	} {
		r := runCmd(predictCmd, c.args...)
		if r.code != c.code || !strings.Contains(r.errs, c.want) || strings.Count(r.errs, "\n") != 1 || r.out != "" {
			t.Errorf("%v: exit %d, want %d and one line with %q:\n%s%s", c.args, r.code, c.code, c.want, r.out, r.errs)
		}
	}
}

// TestPredictUnderMPIRun: predict and export started by mpirun -np 2 run
// once, on rank 0, which says so (each rank printed every line, and wrote
// the file, once more).
func TestPredictUnderMPIRun(t *testing.T) {
	dir := t.TempDir()
	ck := zooCheckpoint(t, dir, "mlp")
	imgs, _ := testImages(t, 2)
	var pngs []string
	for i, im := range imgs {
		p := filepath.Join(dir, fmt.Sprintf("%d.png", i))
		writePNG(t, p, grey(im, 28, 28))
		pngs = append(pngs, p)
	}
	r := hpctrain(t, 2, time.Minute, append([]string{"predict", "-checkpoint", ck, "-top", "1", "-threads", "1"}, pngs...)...)
	if n := strings.Count(r.out, `"input":`); r.code != 0 || n != 2 || !strings.Contains(r.out, "hpctrain: predict runs in one process: rank 0 of these 2 does the work, the others nothing") {
		t.Errorf("predict under mpirun -np 2: exit %d, %d lines for 2 inputs, want 2 and rank 0's note:\n%s", r.code, n, r.out)
	}
	out := filepath.Join(dir, "m.safetensors")
	r = hpctrain(t, 2, time.Minute, "export", "-checkpoint", ck, "-o", out)
	if _, err := os.Stat(out); r.code != 0 || err != nil || strings.Count(r.out, "export runs in one process") != 1 {
		t.Errorf("export under mpirun -np 2: exit %d, %v:\n%s", r.code, err, r.out)
	}
}

// Under srun with PMIx (no PMI_SIZE) the step's SLURM variables say which
// rank this is, as for train: rank 1 stays quiet, rank 0 works and says so.
func TestOtherRankSrun(t *testing.T) {
	for _, v := range []string{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"} {
		t.Setenv(v, "")
	}
	t.Setenv("SLURM_STEP_ID", "0")
	t.Setenv("SLURM_NTASKS", "2")
	t.Setenv("SLURM_STEP_NUM_TASKS", "2")
	for rank, want := range []bool{false, true} {
		t.Setenv("PMIX_RANK", strconv.Itoa(rank))
		t.Setenv("SLURM_PROCID", strconv.Itoa(rank))
		var b strings.Builder
		got := otherRank("predict", &b)
		if note := strings.Contains(b.String(), "rank 0 of these 2 does the work"); got != want || note != (rank == 0) {
			t.Errorf("rank %d of an srun step: otherRank %v, note %q", rank, got, b.String())
		}
	}
}

// TestPredictStdin: "-" reads one image or IDX file from standard input,
// with the scores the same file gives by name and "-" as its input; a
// second "-", an empty input and a terminal are refused (exit 2), and
// nothing is left in the temporary directory.
func TestPredictStdin(t *testing.T) {
	dir := t.TempDir()
	ck := zooCheckpoint(t, dir, "lenet5")
	idx := writeIDX(t, dir, 4)
	imgs, _ := testImages(t, 1)
	png := filepath.Join(dir, "a.png")
	writePNG(t, png, grey(imgs[0], 28, 28))
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	stdin := os.Stdin
	defer func() { os.Stdin = stdin }()
	from := func(path string) {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		os.Stdin = f
	}
	for _, p := range []string{png, idx} {
		want := predictions(t, mustRun(t, predictCmd, "-checkpoint", ck, "-logits", p))
		from(p)
		got := predictions(t, mustRun(t, predictCmd, "-checkpoint", ck, "-logits", "-", png))
		if len(got) != len(want)+1 || string(got[len(got)-1].Input) != png {
			t.Fatalf("%s through -: %d lines (%+v), want %d and then %s's", p, len(got), got, len(want), png)
		}
		for i := range want {
			if got[i].Input != "-" || (got[i].Index == nil) != (want[i].Index == nil) || got[i].Index != nil && *got[i].Index != *want[i].Index || maxAbsDiff(got[i].Logits, want[i].Logits) != 0 {
				t.Errorf("%s through -, line %d: %+v, by name %+v", p, i, got[i], want[i])
			}
		}
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o644)
	from(empty)
	tty, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("a terminal for the test: %v", err)
	}
	defer tty.Close()
	for _, c := range []struct {
		stdin *os.File
		args  []string
		want  string
	}{
		{os.Stdin, []string{"-", "-"}, "input -: standard input is named more than once"},
		{os.Stdin, []string{"-"}, "input -: standard input is empty"},
		{tty, []string{"-"}, "input -: standard input is a terminal: pipe an image or IDX file into it"},
	} {
		os.Stdin = c.stdin
		r := runCmd(predictCmd, append([]string{"-checkpoint", ck}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.errs, c.want) || strings.Count(r.errs, "\n") != 1 {
			t.Errorf("%v: exit %d, %q; want exit 2 and one line saying %q", c.args, r.code, r.errs, c.want)
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left in the temporary directory: %v", left)
	}
}

// TestPredictLeavesNoTempDir: predict's directory of links to its image
// inputs is gone however predict ends part-way: a reader of its lines
// that stops after the first (predict *.png | head -1: SIGPIPE), and a
// SIGTERM while it reads the inputs. Both left a directory of links in
// $TMPDIR every time.
func TestPredictLeavesNoTempDir(t *testing.T) {
	dir := t.TempDir()
	ck := zooCheckpoint(t, dir, "mlp")
	// 3000 inputs of one 280x280 image: long enough to decode that the
	// signal comes while they are read.
	im := image.NewGray(image.Rect(0, 0, 280, 280))
	for i := range im.Pix {
		im.Pix[i] = uint8(i * 7)
	}
	p := filepath.Join(dir, "a.png")
	writePNG(t, p, im)
	args := []string{"predict", "-checkpoint", ck, "-top", "1"}
	for range 3000 {
		args = append(args, p)
	}
	start := func(tmp string) (*exec.Cmd, io.ReadCloser) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var errs bytes.Buffer
		cmd.Stderr = &errs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() })
		return cmd, out
	}
	ended := func(cmd *exec.Cmd, tmp string, want syscall.Signal) {
		t.Helper()
		cmd.Wait()
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !(ws.Signaled() && ws.Signal() == want) && ws.ExitStatus() != 128+int(want) {
			t.Errorf("ended with %v, want %v (or exit %d); stderr %s", cmd.ProcessState, want, 128+int(want), cmd.Stderr)
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Errorf("left in $TMPDIR: %v", left)
		}
	}

	t.Run("reader gone", func(t *testing.T) {
		tmp := t.TempDir()
		cmd, out := start(tmp)
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, `{"input":`) {
			t.Fatalf("first line %q, %v", line, err)
		}
		out.Close()
		ended(cmd, tmp, syscall.SIGPIPE)
	})
	t.Run("SIGTERM", func(t *testing.T) {
		tmp := t.TempDir()
		cmd, out := start(tmp)
		go io.Copy(io.Discard, out)
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
			if left, _ := os.ReadDir(tmp); len(left) != 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("predict made no directory in $TMPDIR")
			}
		}
		cmd.Process.Signal(syscall.SIGTERM)
		ended(cmd, tmp, syscall.SIGTERM)
	})
}

// TestPredictNonUTF8Name: a file name that is not UTF-8 comes out with
// its stray bytes as \udcXX, so that two such names stay apart and the
// file can be found again (both were "caf\ufffd.png").
func TestPredictNonUTF8Name(t *testing.T) {
	dir := t.TempDir()
	ck := zooCheckpoint(t, dir, "mlp")
	imgs, _ := testImages(t, 1)
	a, b := filepath.Join(dir, "caf\xe9.png"), filepath.Join(dir, "caf\xe8.png")
	writePNG(t, a, grey(imgs[0], 28, 28))
	writePNG(t, b, grey(imgs[0], 28, 28))
	lines := strings.Split(strings.TrimSpace(mustRun(t, predictCmd, "-checkpoint", ck, "-top", "1", a, b)), "\n")
	for i, want := range []string{`caf\udce9.png"`, `caf\udce8.png"`} {
		if len(lines) != 2 || !strings.HasPrefix(lines[i], `{"input":"`) || !strings.Contains(lines[i], want) {
			t.Errorf("line %d of %q: want the input ending %s", i, lines, want)
		}
	}
}

// TestPredictTempDirMissing: a $TMPDIR that is not there is named as the
// temporary directory (it was "predict: stat DIR: no such file or
// directory").
func TestPredictTempDirMissing(t *testing.T) {
	dir := t.TempDir()
	ck := zooCheckpoint(t, dir, "mlp")
	imgs, _ := testImages(t, 1)
	p := filepath.Join(dir, "a.png")
	writePNG(t, p, grey(imgs[0], 28, 28))
	tmp := filepath.Join(dir, "gone")
	t.Setenv("TMPDIR", tmp)
	stdin := os.Stdin
	defer func() { os.Stdin = stdin }()
	for _, c := range []struct{ arg, want string }{
		{p, "a directory for the image inputs cannot be made in " + tmp + " (the temporary directory, $TMPDIR): no such file or directory"},
		{"-", "input -: a file to copy standard input to cannot be made in " + tmp + " (the temporary directory, $TMPDIR): no such file or directory"},
	} {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		os.Stdin = f
		r := runCmd(predictCmd, "-checkpoint", ck, c.arg)
		f.Close()
		if r.code != 1 || !strings.Contains(r.errs, c.want) || strings.Count(r.errs, "\n") != 1 || r.out != "" {
			t.Errorf("%s: exit %d, %q; want exit 1 and one line saying %q", c.arg, r.code, r.errs, c.want)
		}
	}
}
