package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"hpctrain/model"
)

// TestExportZooAgainstPyTorch exports every zoo model (batch norm and
// residual blocks included, with running statistics that are not the
// initial ones) and checks both files with other tools: ONNX's checker
// passes on the ONNX file, and the graph run by a reference evaluator made
// of PyTorch's functional operations, and the PyTorch modules that load
// the safetensors file (load_state_dict, strict), both give the logits of
// hpctrain predict on 100 test images within 1e-4.
func TestExportZooAgainstPyTorch(t *testing.T) {
	needPython(t, "onnx", "torch", "numpy")
	dir := t.TempDir()
	idx := writeIDX(t, dir, 100)
	scripts, _ := filepath.Abs("export/testdata")
	for _, name := range model.Zoo() {
		t.Run(name, func(t *testing.T) {
			sub := filepath.Join(dir, name)
			os.Mkdir(sub, 0o755)
			ck := zooCheckpoint(t, sub, name)
			ps := predictions(t, mustRun(t, predictCmd, "-checkpoint", ck, "-logits", "-top", "1", idx))
			if len(ps) != 100 {
				t.Fatalf("%d predictions, want 100", len(ps))
			}
			var want []float32
			for _, p := range ps {
				want = append(want, p.Logits...)
			}
			onnxFile, stFile := filepath.Join(sub, name+".onnx"), filepath.Join(sub, name+".safetensors")
			mustRun(t, exportCmd, "-checkpoint", ck, "-o", onnxFile)
			mustRun(t, exportCmd, "-checkpoint", ck, "-format", "safetensors", "-o", stFile)
			diffs := map[string]float64{}
			for _, c := range []struct{ script, file string }{{"check_onnx.py", onnxFile}, {"check_torch.py", stFile}} {
				out := filepath.Join(sub, c.script+".bin")
				cmd := exec.Command(python, filepath.Join(scripts, c.script), c.file, idx, "100", out)
				cmd.Dir = scripts
				b, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s %s: %v\n%s", c.script, c.file, err, b)
				}
				diffs[c.script] = maxAbsDiff(readFloats(t, out), want)
			}
			t.Logf("%s: max |logit difference| from hpctrain predict: ONNX %.3g, safetensors in PyTorch %.3g (logits up to %.3g)",
				name, diffs["check_onnx.py"], diffs["check_torch.py"], maxAbs(want))
			for s, d := range diffs {
				if d > 1e-4 {
					t.Errorf("%s: max |logit difference| %g > 1e-4", s, d)
				}
			}
		})
	}
}

func maxAbs(v []float32) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, float64(x), -float64(x))
	}
	return m
}

// A network with a layer that has no channels-first form is refused with
// the layer named, and nothing is left at -o.
func TestExportRefusal(t *testing.T) {
	dir := t.TempDir()
	d, err := model.ParseDesc("mixed.toml", []byte(`layers = [
	  {kind = "conv", out = 2, kernel = 3, pad = 1, stride = 2}, {kind = "flatten"},
	  {kind = "residual", layers = [{kind = "linear", out = 392}]},
	  {kind = "linear", out = "classes"}]`))
	if err != nil {
		t.Fatal(err)
	}
	ck := testCheckpoint(t, dir, "mixed.toml", d, nil)
	out := filepath.Join(dir, "out")
	os.Mkdir(out, 0o755)
	for _, f := range []string{"m.onnx", "m.safetensors"} {
		r := runCmd(exportCmd, "-checkpoint", ck, "-o", filepath.Join(out, f))
		if r.code != 1 || !strings.Contains(r.errs, "layer 3 (residual, res1)") || strings.Count(r.errs, "\n") != 1 {
			t.Errorf("%s: exit %d\n%s", f, r.code, r.errs)
		}
	}
	if names := dirNames(t, out); len(names) != 0 {
		t.Errorf("left behind: %v", names)
	}
}

// TestExportBadInput: a corrupt checkpoint, one of an unknown format
// version, one of another model than -model, an output that cannot be
// written, an unknown format: one line each, exit 1 or 2, nothing written.
func TestExportBadInput(t *testing.T) {
	dir := t.TempDir()
	ck := zooCheckpoint(t, dir, "mlp")
	b, _ := os.ReadFile(ck)
	corrupt := filepath.Join(dir, "corrupt.hpck")
	c := append([]byte(nil), b...)
	c[len(c)-100] ^= 1
	os.WriteFile(corrupt, c, 0o644)
	future := filepath.Join(dir, "future.hpck")
	f := append([]byte(nil), b...)
	f[8] = 7
	os.WriteFile(future, f, 0o644)
	notDir := filepath.Join(dir, "file")
	os.WriteFile(notDir, nil, 0o644)
	out := filepath.Join(dir, "out")
	os.Mkdir(out, 0o755)
	o := filepath.Join(out, "m.onnx")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-checkpoint", corrupt, "-o", o}, 1, "checksum mismatch"},
		{[]string{"-checkpoint", future, "-o", o}, 2, "format version 7, this build reads 1 to 2"},
		{[]string{"-checkpoint", ck, "-model", "cnn", "-o", o}, 2, "of model mlp, not cnn"},
		{[]string{"-checkpoint", filepath.Join(dir, "nope.hpck"), "-o", o}, 2, "no such file"},
		{[]string{"-checkpoint", ck, "-o", filepath.Join(notDir, "m.onnx")}, 2, "not a directory"},
		{[]string{"-checkpoint", ck, "-o", filepath.Join(dir, "missing", "m.onnx")}, 2, "no such directory"},
		{[]string{"-checkpoint", ck, "-format", "onnx", "-o", out}, 2, "is a directory"},
		{[]string{"-checkpoint", ck, "-o", filepath.Join(out, "m.pt")}, 2, "-format is missing"},
		{[]string{"-checkpoint", ck, "-o", "-"}, 2, "-o - (standard output) has no extension to go by: give -format onnx or -format safetensors"},
		{[]string{"-checkpoint", ck, "-format", "tflite", "-o", o}, 2, `-format "tflite": want onnx or safetensors`},
		{[]string{"-checkpoint", ck, "-format", "onnx", "-o", filepath.Join(out, "m.safetensors")}, 2, "-format onnx but -o " + filepath.Join(out, "m.safetensors") + " is named for safetensors: name it .onnx, or leave -format out"},
		{[]string{"-checkpoint", ck, "-format", "safetensors", "-o", filepath.Join(out, "m.ONNX")}, 2, "is named for onnx"},
		{[]string{"-checkpoint", ck}, 2, "-o PATH is missing"},
		{[]string{"-o", o}, 2, "give -checkpoint FILE or -checkpoint-dir DIR"},
		{[]string{"-checkpoint", ck, "-format", "onnx", "-o", ck}, 2, "-o " + ck + " is a checkpoint: export would write over it"},
		{[]string{"-checkpoint", ck, "-format", "onnx", "-o", filepath.Join(filepath.Dir(ck), "ckpt-000000999999.hpck")}, 2, "ckpt-000000999999.hpck: a checkpoint's name (ckpt-STEP.hpck): a run resuming from that directory would take the export for a damaged checkpoint"},
		{[]string{"-checkpoint", ck, "-format", "safetensors", "-o", future}, 2, "-o " + future + " is a checkpoint"},
	} {
		r := runCmd(exportCmd, c.args...)
		if r.code != c.code || !strings.Contains(r.errs, c.want) || strings.Count(r.errs, "\n") != 1 || r.out != "" {
			t.Errorf("%v: exit %d, want %d and one line with %q:\n%s%s", c.args, r.code, c.code, c.want, r.out, r.errs)
		}
	}
	if names := dirNames(t, out); len(names) != 0 {
		t.Errorf("left behind in the output directory: %v", names)
	}
	if now, _ := os.ReadFile(ck); !bytes.Equal(now, b) {
		t.Errorf("the checkpoint %s was written over", ck)
	}
	// And the good one.
	mustRun(t, exportCmd, "-checkpoint-dir", dir, "-o", o)
	if names := dirNames(t, out); len(names) != 1 || names[0] != "m.onnx" {
		t.Errorf("output directory holds %v, want m.onnx alone", names)
	}
	// -o - is standard output: the same bytes, the closing line on
	// standard error, and no file named "-".
	want, _ := os.ReadFile(o)
	r := runCmd(exportCmd, "-checkpoint", ck, "-format", "onnx", "-o", "-")
	if r.code != 0 || r.out != string(want) || !strings.HasPrefix(r.errs, "hpctrain: wrote standard output (onnx;") {
		t.Errorf("-o -: exit %d, %d bytes out (want %d), stderr %q", r.code, len(r.out), len(want), r.errs)
	}
	if _, err := os.Stat("-"); err == nil {
		t.Error(`-o - wrote a file named "-"`)
	}
	// export reads no batch: -batch is not one of its flags.
	if r := runCmd(exportCmd, "-checkpoint", ck, "-batch", "-5", "-o", o); r.code != 2 || !strings.Contains(r.errs, "-batch") {
		t.Errorf("-batch: exit %d\n%s", r.code, r.errs)
	}
}

// TestExportPreprocess: a network trained through a resize (28x28
// Fashion-MNIST resized to 32x32, bilinear; or to 34x34, nearest, and
// centre-cropped to 32x32) carries those steps in its metadata, and both
// files, fed the 28x28 test images through them outside hpctrain, give
// hpctrain predict's logits (they failed: the scripts saw 28x28 images
// and a 32x32 input, and nothing said how to get from one to the other).
// The resizes are PyTorch's interpolate, bilinear with
// align_corners=False rounded half up to bytes, and "nearest-exact":
// with round() (half to even) a logit was 0.0012 away, and with "nearest"
// (which samples floor(x*scale), not floor((x+0.5)*scale)) 2.0.
func TestExportPreprocess(t *testing.T) {
	needPython(t, "onnx", "torch", "numpy")
	dir := t.TempDir()
	idx := writeIDX(t, dir, 100)
	scripts, _ := filepath.Abs("export/testdata")
	for i, chain := range []string{"resize=32x32,flip,crop_pad=2", "resize=34x34:nearest,center_crop=32x32"} {
		sub := filepath.Join(dir, strconv.Itoa(i))
		ck := filepath.Join(sub, "ck")
		r := hpctrain(t, 0, 2*time.Minute, "train", "-model", "lenet5", "-augment", chain, "-mean", "0.286", "-std", "0.353",
			"-limit", "1280", "-test-limit", "100", "-threads", "1", "-progress", "0", "-checkpoint-dir", ck)
		if r.code != 0 {
			t.Fatalf("train -augment %s: exit %d\n%s", chain, r.code, r.out)
		}
		var want []float32
		for _, p := range predictions(t, mustRun(t, predictCmd, "-checkpoint-dir", ck, "-logits", "-top", "1", idx)) {
			want = append(want, p.Logits...)
		}
		for _, c := range []struct{ script, file string }{{"check_onnx.py", "m.onnx"}, {"check_torch.py", "m.safetensors"}} {
			f := filepath.Join(sub, c.file)
			mustRun(t, exportCmd, "-checkpoint-dir", ck, "-o", f)
			out := f + ".bin"
			cmd := exec.Command(python, filepath.Join(scripts, c.script), f, idx, "100", out)
			cmd.Dir = scripts
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s %s: %v\n%s", c.script, f, err, b)
			}
			if d := maxAbsDiff(readFloats(t, out), want); d > 1e-4 {
				t.Errorf("-augment %s, %s: max |logit difference| from hpctrain predict %g (logits up to %.3g)", chain, c.script, d, maxAbs(want))
			} else {
				t.Logf("-augment %s, %s: max |logit difference| from hpctrain predict %.3g (logits up to %.3g)", chain, c.script, d, maxAbs(want))
			}
		}
	}
}

// TestExportStopped: a SIGTERM (or Ctrl-C) while export makes files
// beside -o (the writability probe, then the file's temporary copy)
// ends it by the signal once they are removed, the file whole or not
// there; the signal killed it at once and left them (.m.onnx.*.tmp,
// .hpctrain-probe-*).
func TestExportStopped(t *testing.T) {
	dir := t.TempDir()
	// 16M parameters: writing takes long enough to be stopped.
	d, err := model.ParseDesc("wide.toml", []byte(`layers = [{kind = "flatten"}, {kind = "linear", out = 20000}, {kind = "linear", out = "classes"}]`))
	if err != nil {
		t.Fatal(err)
	}
	ck := testCheckpoint(t, dir, "wide.toml", d, nil)
	for _, f := range []string{"m.onnx", "m.safetensors"} {
		out := filepath.Join(dir, strings.ReplaceAll(f, ".", "-"))
		os.Mkdir(out, 0o755)
		cmd := exec.Command(bin, "export", "-checkpoint", ck, "-o", filepath.Join(out, f))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(time.Minute); len(dirNames(t, out)) == 0; time.Sleep(100 * time.Microsecond) {
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatalf("%s: export made no file in a minute", f)
			}
		}
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		names := dirNames(t, out)
		killed := ws.Signaled() && ws.Signal() == syscall.SIGTERM
		if !killed && !(ws.Exited() && ws.ExitStatus() == 0) || len(names) > 1 || len(names) == 1 && names[0] != f {
			t.Errorf("%s: ended %v, left %v; want killed by SIGTERM (or exit 0) and nothing or %s alone", f, cmd.ProcessState, names, f)
			continue
		}
		if len(names) == 1 {
			if b, _ := os.ReadFile(filepath.Join(out, f)); len(b) < 4*20000*784 {
				t.Errorf("%s: a file of %d bytes, want the whole network", f, len(b))
			}
		}
		t.Logf("%s: %v, left %v", f, cmd.ProcessState, names)
	}
}

// TestExportDevStdout: -o /dev/stdout into a pipe is the network alone,
// its closing line on standard error as with -o -; the line was written
// after the network, into the piped file.
func TestExportDevStdout(t *testing.T) {
	dir := t.TempDir()
	ck := zooCheckpoint(t, dir, "mlp")
	want := filepath.Join(dir, "m.safetensors")
	mustRun(t, exportCmd, "-checkpoint", ck, "-o", want)
	wantB, _ := os.ReadFile(want)
	var out, errs bytes.Buffer
	cmd := exec.Command(bin, "export", "-checkpoint", ck, "-format", "safetensors", "-o", "/dev/stdout")
	cmd.Stdout, cmd.Stderr = &out, &errs // a pipe each
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, errs.String())
	}
	if !bytes.Equal(out.Bytes(), wantB) || !strings.HasPrefix(errs.String(), "hpctrain: wrote /dev/stdout (safetensors;") {
		t.Errorf("standard output: %d bytes (want the %d of the file; %d more: %q); standard error %q",
			out.Len(), len(wantB), out.Len()-len(wantB), out.Bytes()[min(len(wantB), out.Len()):], errs.String())
	}
}
