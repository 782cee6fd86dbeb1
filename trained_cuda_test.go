package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"hpctrain/internal/cudaemu"
)

// eval and predict on the emulated device (see cuda_test.go): the real
// binary, the emulator's libraries on LD_LIBRARY_PATH.

// jsonLines are the lines of out that are JSON objects (the command's
// output, apart from the messages hpctrainEnv's combined output holds).
func jsonLines(out string) string {
	var js []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "{") {
			js = append(js, l)
		}
	}
	return strings.Join(js, "\n")
}

// sameEvaluation fails t unless got (on the device) is want (on the CPU)
// within fp32 rounding: the loss within 1e-4 relative (train's CUDA tests'
// tolerance, TestCUDAMatchesCPU), and the counts equal but for at most one
// sample whose top two scores are too close for the two devices' sums to
// agree on (none here: the checkpoint and data are fixed).
func sameEvaluation(t *testing.T, what string, want, got evalReport) {
	t.Helper()
	if got.Samples != want.Samples || len(got.Confusion) != len(want.Confusion) {
		t.Fatalf("%s: %d samples, %d classes; on the CPU %d, %d", what, got.Samples, len(got.Confusion), want.Samples, len(want.Confusion))
	}
	if rel := math.Abs(got.Loss-want.Loss) / math.Abs(want.Loss); rel > 1e-4 {
		t.Errorf("%s: loss %.7f, on the CPU %.7f: relative difference %.2g > 1e-4", what, got.Loss, want.Loss, rel)
	}
	moved := int64(0)
	for i := range want.Confusion {
		for j := range want.Confusion[i] {
			d := got.Confusion[i][j] - want.Confusion[i][j]
			moved += max(d, -d)
		}
	}
	if moved > 2 || math.Abs(float64(got.Correct-want.Correct)) > 1 {
		t.Errorf("%s: accuracy %v (%d correct), confusion %v; on the CPU %v (%d correct), %v", what, got.Accuracy, got.Correct, got.Confusion, want.Accuracy, want.Correct, want.Confusion)
	}
	// The device's sums go in another order than the CPU's: a loss equal
	// to the last bit would mean the CPU computed it.
	if got.Loss == want.Loss {
		t.Errorf("%s: loss %v, bit for bit the CPU's: did the device compute?", what, got.Loss)
	}
}

// trainResnet8 trains resnet8 on the CPU for two short epochs (about
// 60% test accuracy: a confusion matrix worth comparing, where a network
// of random parameters puts most samples in one class) and returns its
// checkpoint directory.
func trainResnet8(t *testing.T) string {
	t.Helper()
	ck := filepath.Join(t.TempDir(), "ck")
	r := hpctrain(t, 0, 3*time.Minute, "train", "-model", "resnet8", "-device", "cpu", "-limit", "2048", "-test-limit", "300", "-epochs", "2",
		"-lr", "0.05", "-threads", "2", "-progress", "0", "-checkpoint-dir", ck)
	if r.code != 0 {
		t.Fatalf("train: exit %d\n%s", r.code, r.out)
	}
	return ck
}

// TestEvalCUDA: a checkpoint of resnet8 (batch norm: its running
// statistics must reach the device too) evaluated with -device cuda, in
// one process and under mpirun -np 2 (a device per rank), gives the CPU's
// report within fp32 rounding, and names each rank's device.
func TestEvalCUDA(t *testing.T) {
	env := emuEnv(t) // two devices
	args := []string{"eval", "-checkpoint-dir", trainResnet8(t), "-json", "-test-limit", "1000", "-threads", "1"}
	for _, np := range []int{0, 2} {
		r := hpctrainEnv(t, np, 5*time.Minute, env, append(args, "-device", "cpu")...)
		if r.code != 0 {
			t.Fatalf("np %d, -device cpu: exit %d\n%s", np, r.code, r.out)
		}
		cpu := evalJSON(t, jsonLines(r.out))
		if cpu.Accuracy < 0.4 {
			t.Fatalf("accuracy %v on the CPU: the network learnt too little for a good test", cpu.Accuracy)
		}
		r = hpctrainEnv(t, np, 5*time.Minute, env, append(args, "-device", "cuda")...)
		if r.code != 0 {
			t.Fatalf("np %d, -device cuda: exit %d\n%s", np, r.code, r.out)
		}
		want := "hpctrain: device: cuda:0 cudaemu (host memory), sm_80\n"
		if np == 2 {
			want = "hpctrain: device: rank 0 cuda:0 cudaemu (host memory), sm_80; rank 1 cuda:1 cudaemu (host memory), sm_80\n"
		}
		if !strings.Contains(r.out, want) {
			t.Errorf("np %d, -device cuda: no line %q:\n%s", np, want, r.out)
		}
		gpu := evalJSON(t, jsonLines(r.out))
		sameEvaluation(t, fmt.Sprintf("np %d, -device cuda", np), cpu, gpu)
		t.Logf("np %d: loss cpu %.9f, cuda %.9f; accuracy cpu %.4f, cuda %.4f", np, cpu.Loss, gpu.Loss, cpu.Accuracy, gpu.Accuracy)
	}
}

// TestEvalCUDAMissing: without CUDA's libraries, eval -device cuda stops
// every rank with train's line and exit code (TestCUDAMissing); -device
// auto evaluates on the CPU, warning on every rank where the driver loads
// and the rest does not, as train does, and quietly where there is no
// driver; a CUDA_VISIBLE_DEVICES that hides every GPU is train's line,
// exit 2. NCCL is not needed: eval sums over MPI.
func TestEvalCUDAMissing(t *testing.T) {
	emu, err := cudaemu.Dir()
	if err != nil {
		t.Fatal(err)
	}
	ck := zooCheckpoint(t, t.TempDir(), "mlp")
	args := []string{"eval", "-checkpoint", ck, "-json", "-test-limit", "200", "-threads", "1"}
	cpu := hpctrainEnv(t, 2, 2*time.Minute, nil, append(args, "-device", "cpu")...)
	if cpu.code != 0 {
		t.Fatalf("-device cpu: exit %d\n%s", cpu.code, cpu.out)
	}
	libs := []string{"libcuda.so.1", "libcublas.so.12", "libnvrtc.so.12", "libnccl.so.2"}
	without := func(missing string) []string {
		dir := t.TempDir()
		for _, l := range libs {
			if l != missing {
				if err := os.Symlink(filepath.Join(emu, l), filepath.Join(dir, l)); err != nil {
					t.Fatal(err)
				}
			}
		}
		return []string{"LD_LIBRARY_PATH=" + dir, "HPCTRAIN_CUDAEMU_DEVICES=2", "HPCTRAIN_KERNEL_CACHE=" + filepath.Join(t.TempDir(), "kernels")}
	}
	for _, c := range []struct{ missing, line string }{
		{"libcuda.so.1", "cannot load the CUDA driver: tried libcuda.so.1"},
		{"libcublas.so.12", "cannot load cuBLAS: tried libcublas.so.12, libcublas.so.11"},
	} {
		env := without(c.missing)
		r := hpctrainEnv(t, 2, 2*time.Minute, env, append(args, "-device", "cuda")...)
		if r.code != 1 || strings.Count(r.out, c.line) != 2 || strings.Contains(r.out, "goroutine ") || jsonLines(r.out) != "" {
			t.Errorf("-device cuda without %s: exit %d, want 1 and %q on each rank:\n%s", c.missing, r.code, c.line, r.out)
		}
		r = hpctrainEnv(t, 2, 2*time.Minute, env, append(args, "-device", "auto")...)
		warnings := 2
		if c.missing == "libcuda.so.1" {
			warnings = 0 // no driver: a CPU node, as for train
		}
		if r.code != 0 || strings.Count(r.out, "-device auto: ") != warnings || (warnings > 0 && strings.Count(r.out, "; evaluating on the CPU") != 2) {
			t.Errorf("-device auto without %s: exit %d, want 0 and %d warnings:\n%s", c.missing, r.code, warnings, r.out)
		}
		if !strings.Contains(r.out, "hpctrain: device: cpu on every rank") || jsonLines(r.out) != jsonLines(cpu.out) {
			t.Errorf("-device auto without %s: not the CPU's evaluation:\n%s\nthe CPU's:\n%s", c.missing, r.out, cpu.out)
		}
	}
	r := hpctrainEnv(t, 2, 5*time.Minute, without("libnccl.so.2"), append(args, "-device", "cuda")...)
	if r.code != 0 || !strings.Contains(r.out, "rank 1 cuda:1 cudaemu") {
		t.Errorf("-device cuda without NCCL: exit %d, want an evaluation on the devices:\n%s", r.code, r.out)
	}
	env := append(emuEnv(t), "CUDA_VISIBLE_DEVICES=-1")
	r = hpctrainEnv(t, 2, 2*time.Minute, env, append(args, "-device", "cuda")...)
	want := `CUDA_VISIBLE_DEVICES="-1" leaves CUDA no GPU; unset it or list the GPUs to use, or use -device cpu`
	if r.code != 2 || strings.Count(r.out, want) != 2 {
		t.Errorf("CUDA_VISIBLE_DEVICES=-1 -device cuda: exit %d, want 2 and %q on each rank:\n%s", r.code, want, r.out)
	}
	// More local ranks than devices needs -gpu-share, as in train.
	one := append(emuEnv(t), "HPCTRAIN_CUDAEMU_DEVICES=1")
	r = hpctrainEnv(t, 2, 2*time.Minute, one, append(args, "-device", "cuda")...)
	want = "2 local ranks but CUDA sees 1 device: each rank needs a GPU of its own; use -gpu-share"
	if r.code != 2 || strings.Count(r.out, want) != 2 {
		t.Errorf("2 ranks on 1 device: exit %d, want 2 and %q on each rank:\n%s", r.code, want, r.out)
	}
	r = hpctrainEnv(t, 2, 5*time.Minute, one, append(args, "-device", "cuda", "-gpu-share")...)
	if want := "hpctrain: device: cuda:0 cudaemu (host memory), sm_80 on every rank"; r.code != 0 || !strings.Contains(r.out, want) {
		t.Errorf("2 ranks sharing 1 device: exit %d, want %q:\n%s", r.code, want, r.out)
	}
	for _, bad := range [][]string{{"-device", "gpu"}, {"-device", "cuda", "-gpus", "none"}} {
		r := hpctrain(t, 0, time.Minute, append(args, bad...)...)
		if r.code != 2 || !strings.Contains(r.out, "-device") {
			t.Errorf("%v: exit %d, want 2 naming -device:\n%s", bad, r.code, r.out)
		}
	}
}

// TestPredictCUDA: predict -device cuda gives the CPU's top classes, in
// the same order, and their probabilities and scores within fp32
// rounding, saying which device computed; without the driver it is
// train's line, exit 1.
func TestPredictCUDA(t *testing.T) {
	env := emuEnv(t)
	dir := t.TempDir()
	idx := writeIDX(t, dir, 40)
	args := []string{"predict", "-checkpoint-dir", trainResnet8(t), "-top", "3", "-logits", "-threads", "1", "-batch", "16", idx}
	r := hpctrainEnv(t, 0, 2*time.Minute, env, append([]string{args[0], "-device", "cpu"}, args[1:]...)...)
	if r.code != 0 {
		t.Fatalf("-device cpu: exit %d\n%s", r.code, r.out)
	}
	cpu := predictions(t, jsonLines(r.out))
	r = hpctrainEnv(t, 0, 5*time.Minute, env, append([]string{args[0], "-device", "cuda"}, args[1:]...)...)
	if r.code != 0 {
		t.Fatalf("-device cuda: exit %d\n%s", r.code, r.out)
	}
	if want := "hpctrain: device: cuda:0 cudaemu (host memory), sm_80\n"; !strings.Contains(r.out, want) {
		t.Errorf("-device cuda: no line %q:\n%s", want, r.out)
	}
	gpu := predictions(t, jsonLines(r.out))
	if len(gpu) != 40 || len(cpu) != 40 {
		t.Fatalf("%d lines on the device, %d on the CPU, want 40", len(gpu), len(cpu))
	}
	exact := true
	for i := range cpu {
		c, g := cpu[i], gpu[i]
		if *g.Index != *c.Index || len(g.Top) != 3 {
			t.Fatalf("line %d: %+v, on the CPU %+v", i, g, c)
		}
		for j := range c.Top {
			if g.Top[j].Class != c.Top[j].Class || g.Top[j].Name != c.Top[j].Name || math.Abs(g.Top[j].Probability-c.Top[j].Probability) > 1e-5 {
				t.Errorf("input %d: top %v, on the CPU %v", *c.Index, g.Top, c.Top)
				break
			}
		}
		if d := maxAbsDiff(g.Logits, c.Logits); d > 1e-4*max(1, maxAbs(c.Logits)) {
			t.Errorf("input %d: scores %v, on the CPU %v: %.2g apart", *c.Index, g.Logits, c.Logits, d)
		}
		exact = exact && maxAbsDiff(g.Logits, c.Logits) == 0
	}
	if exact {
		t.Errorf("every score bit for bit the CPU's: did the device compute?")
	}
	b, _ := json.Marshal(gpu[0])
	t.Logf("first line on the device: %s", b)

	emu, err := cudaemu.Dir()
	if err != nil {
		t.Fatal(err)
	}
	noDriver := t.TempDir()
	for _, l := range []string{"libcublas.so.12", "libnvrtc.so.12"} {
		os.Symlink(filepath.Join(emu, l), filepath.Join(noDriver, l))
	}
	r = hpctrainEnv(t, 0, time.Minute, []string{"LD_LIBRARY_PATH=" + noDriver}, append([]string{args[0], "-device", "cuda"}, args[1:]...)...)
	if want := "cannot load the CUDA driver: tried libcuda.so.1"; r.code != 1 || !strings.Contains(r.out, want) || jsonLines(r.out) != "" {
		t.Errorf("-device cuda without a driver: exit %d, want 1 and %q:\n%s", r.code, want, r.out)
	}
}
