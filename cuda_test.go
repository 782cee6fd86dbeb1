package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"hpctrain/internal/cudaemu"
	"hpctrain/internal/mpitest"
)

// The GPU path, end to end, on the emulated device: the real binary under
// the real mpirun loads the emulator's libcuda, libcublas, libnvrtc and
// libnccl through LD_LIBRARY_PATH, as it would load NVIDIA's on a GPU
// node. No physical GPU runs here (see docs/gpu.md).

// emuEnv is the environment that makes the emulated device the CUDA the
// binary finds.
func emuEnv(t *testing.T) []string {
	t.Helper()
	dir, err := cudaemu.Dir()
	if err != nil {
		t.Fatalf("building the emulated device: %v", err)
	}
	// Two devices: the tests' jobs of two ranks each get one, as on a
	// node of two GPUs (more local ranks than devices needs -gpu-share).
	return []string{"LD_LIBRARY_PATH=" + dir, "HPCTRAIN_KERNEL_CACHE=" + filepath.Join(t.TempDir(), "kernels"), "HPCTRAIN_CUDAEMU_DEVICES=2"}
}

// readLosses reads a -loss-log file: step -> loss.
func readLosses(t *testing.T, path string) []float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ls []float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 2 {
			t.Fatalf("%s: bad line %q", path, sc.Text())
		}
		v, err := strconv.ParseFloat(fs[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, v)
	}
	return ls
}

// TestCUDAMatchesCPU trains the CNN and resnet8 with 2 ranks on the CPU
// and on the emulated device (NCCL over MPI): the first 20 losses agree
// within 1e-4 relative and the test accuracy after an epoch of 10,000
// samples within 0.5 points.
//
// resnet8 runs at lr 0.005: at 0.01 and above its training is chaotic
// from the first steps, on the CPU alone. There, changing the lr by 2e-7
// relative moves the loss by 1.8e-4 relative within 20 steps (measured on
// the CPU path, 2 ranks, batch 32), so no two implementations that add in
// a different order could agree to 1e-4; at 0.005 the same change moves
// it by 2e-6.
func TestCUDAMatchesCPU(t *testing.T) {
	env := emuEnv(t)
	for _, m := range []struct{ name, lr string }{{"cnn", "0.02"}, {"resnet8", "0.005"}} {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			acc := map[string]float64{}
			losses := map[string][]float64{}
			for _, dev := range []string{"cpu", "cuda"} {
				ll := filepath.Join(dir, dev+".losses")
				mf := filepath.Join(dir, dev+".jsonl")
				args := []string{"train", "-model", m.name, "-device", dev, "-limit", "10000", "-test-limit", "2000",
					"-batch", "32", "-threads", "1", "-lr", m.lr, "-loss-log", ll, "-metrics", mf, "-report-bindings"}
				if dev == "cpu" {
					// Direct convolutions on both sides: Winograd's
					// rounding alone moves the CNN's loss by 5e-3
					// relative within 20 steps.
					args = append(args, "-cpu-kernels", "dnnl-direct")
				}
				r := hpctrainEnv(t, 2, 10*time.Minute, env, args...)
				if r.code != 0 {
					t.Fatalf("-device %s: code %d\n%s", dev, r.code, r.out)
				}
				if dev == "cuda" && !strings.Contains(r.out, "cudaemu") {
					t.Errorf("-report-bindings does not show the CUDA device:\n%s", r.out)
				}
				// NCCL sums on the device's stream, MPI on its thread.
				if want := map[string]string{"cpu": "on the MPI thread", "cuda": "communication: NCCL all-reduce"}[dev]; !strings.Contains(r.out, want) {
					t.Errorf("-device %s: no %q in the communication line:\n%s", dev, want, r.out)
				}
				losses[dev] = readLosses(t, ll)
				recs := readMetrics(t, mf)
				acc[dev] = 100 * recs[len(recs)-1]["test_accuracy"].(float64)
			}
			if len(losses["cpu"]) < 20 || len(losses["cuda"]) != len(losses["cpu"]) {
				t.Fatalf("%d cpu and %d cuda losses", len(losses["cpu"]), len(losses["cuda"]))
			}
			for i := 0; i < 20; i++ {
				c, g := losses["cpu"][i], losses["cuda"][i]
				if rel := math.Abs(g-c) / math.Abs(c); rel > 1e-4 {
					t.Errorf("step %d: cpu loss %.7f, cuda %.7f: relative difference %.2g > 1e-4", i+1, c, g, rel)
				}
			}
			if d := math.Abs(acc["cpu"] - acc["cuda"]); d > 0.5 {
				t.Errorf("test accuracy cpu %.2f%%, cuda %.2f%%: %.2f points apart (> 0.5)", acc["cpu"], acc["cuda"], d)
			}
			t.Logf("%s: test accuracy cpu %.2f%%, cuda %.2f%%; loss at step 20 cpu %.6f, cuda %.6f", m.name, acc["cpu"], acc["cuda"], losses["cpu"][19], losses["cuda"][19])
		})
	}
}

// TestCUDAPrecisionAuto: -precision auto on the emulated device is bf16
// on a GPU of compute capability 8.0 and fp32 on one of 7.0 (no bf16
// tensor cores), saying which and why.
func TestCUDAPrecisionAuto(t *testing.T) {
	for _, c := range []struct{ cc, want, line string }{
		{"8.0", ", bf16, ", "hpctrain: precision auto: bf16 (every rank's GPU is sm_80 or later)"},
		{"7.0", ", fp32, ", "hpctrain: precision auto: fp32, no bf16 here: cuda:0 cudaemu"},
	} {
		env := append(emuEnv(t), "HPCTRAIN_CUDAEMU_CC="+c.cc)
		r := hpctrainEnv(t, 2, 5*time.Minute, env, "train", "-model", "mlp", "-device", "cuda", "-limit", "640", "-test-limit", "100",
			"-precision", "auto", "-progress", "0")
		if r.code != 0 {
			t.Fatalf("compute capability %s: exit %d\n%s", c.cc, r.code, r.out)
		}
		for _, w := range []string{c.line, c.want} {
			if !strings.Contains(r.out, w) {
				t.Errorf("compute capability %s: the output does not say %q:\n%s", c.cc, w, r.out)
			}
		}
	}
}

// TestCUDAPrecisionRefused: -precision bf16 or tf32 on a GPU without the
// tensor cores for them (compute capability 7.0) is refused on every rank
// in one line; it used to train and say "bf16" (real cuBLAS refuses bf16
// there, and computes tf32 as plain fp32).
func TestCUDAPrecisionRefused(t *testing.T) {
	for _, p := range []string{"bf16", "tf32"} {
		env := append(emuEnv(t), "HPCTRAIN_CUDAEMU_CC=7.0")
		r := hpctrainEnv(t, 2, 5*time.Minute, env, "train", "-model", "mlp", "-device", "cuda", "-limit", "640", "-test-limit", "100",
			"-precision", p, "-progress", "0")
		want := "precision " + p + ": cuda:0 cudaemu (host memory), sm_70 has no " + p + " tensor cores (compute capability 7.0; they start at 8.0); use -precision fp32, fp16 or auto"
		if r.code != 2 || !strings.Contains(r.out, want) {
			t.Errorf("-precision %s at compute capability 7.0: exit %d, want 2 and %q:\n%s", p, r.code, want, r.out)
		}
	}
}

// TestCUDAOutOfMemory: a device too small for the network at the batch
// asked is one line with the sizes: what was asked, what the network
// already holds, and the device's memory.
func TestCUDAOutOfMemory(t *testing.T) {
	env := append(emuEnv(t), "HPCTRAIN_CUDAEMU_MEM=3000000")
	r := hpctrainEnv(t, 0, 2*time.Minute, env, "train", "-model", "resnet8", "-device", "cuda", "-limit", "640", "-test-limit", "100", "-progress", "0")
	want := regexp.MustCompile(`cuda: cuMemAlloc of [0-9.]+ [KM]iB: CUDA_ERROR_OUT_OF_MEMORY \(2\), after [0-9.]+ [KM]iB for this network at a batch of 64, on a device of 2\.9 MiB: lower -batch`)
	if r.code != 1 || !want.MatchString(r.out) || strings.Count(strings.TrimSpace(r.out), "\n") > 0 {
		t.Errorf("resnet8 on a device of 3 MB: exit %d, want 1 and one line matching %s:\n%s", r.code, want, r.out)
	}
	// A device that holds the MLP at batch 32 but not adam's two values
	// per parameter besides: the optimizer's state is allocated at
	// start-up, on both ranks, and named with the sizes and a hint. It was
	// allocated at the first step, after the data had loaded, and said
	// "epoch 1 step 1: optimizer step: cudaoptim: adam state: cuda:
	// cuMemAlloc of 3.1 MiB: CUDA_ERROR_OUT_OF_MEMORY (2)", no more.
	env = append(emuEnv(t), "HPCTRAIN_CUDAEMU_MEM=5000000")
	r = hpctrainEnv(t, 2, 2*time.Minute, env, "train", "-model", "mlp", "-device", "cuda", "-optimizer", "adam", "-limit", "512", "-test-limit", "100",
		"-batch", "32", "-threads", "1", "-progress", "0")
	line := "cudaoptim: adam state (2 values per parameter, 407050 parameters): cuda: cuMemAlloc of 3.1 MiB: CUDA_ERROR_OUT_OF_MEMORY (2), on a device of 4.8 MiB: lower -batch, use an optimizer that keeps less, or give the rank a device of its own"
	if r.code != 1 || strings.Count(r.out, line) != 2 || strings.Contains(r.out, "step 1") || strings.Contains(r.out, "hpctrain: data ") {
		t.Errorf("adam's state on a device of 5 MB: exit %d, want 1, %q on each rank, at start-up:\n%s", r.code, line, r.out)
	}
}

// TestCUDAArchitectures: a GPU newer than NVRTC (the emulated NVRTC is
// 12.4, which has no Blackwell: compute capability 10.0 and 12.0) trains on
// PTX of the newest architecture NVRTC has (compute_90), which the driver
// compiles for it; the run compiled for compute_100 and stopped at
// NVRTC_ERROR_INVALID_OPTION. A GPU older than NVRTC has (Kepler, 3.5) is
// one line naming the range.
func TestCUDAArchitectures(t *testing.T) {
	args := []string{"train", "-model", "mlp", "-device", "cuda", "-limit", "512", "-test-limit", "100", "-steps", "2", "-progress", "0"}
	for _, cc := range []string{"10.0", "12.0"} {
		r := hpctrainEnv(t, 0, 2*time.Minute, append(emuEnv(t), "HPCTRAIN_CUDAEMU_CC="+cc), args...)
		if r.code != 0 || !strings.Contains(r.out, "final: test accuracy") {
			t.Errorf("compute capability %s: exit %d, want a run:\n%s", cc, r.code, r.out)
		}
	}
	r := hpctrainEnv(t, 0, 2*time.Minute, append(emuEnv(t), "HPCTRAIN_CUDAEMU_CC=3.5"), args...)
	want := "cuda: NVRTC 12.4 compiles for compute_50 to compute_90, and this GPU is sm_35: install an NVRTC of the CUDA release that still supports it, or use -device cpu"
	if r.code != 1 || !strings.Contains(r.out, want) || strings.Count(strings.TrimSpace(r.out), "\n") > 0 {
		t.Errorf("compute capability 3.5: exit %d, want 1 and one line %q:\n%s", r.code, want, r.out)
	}
}

// TestCUDALossScaleResumes: fp16's loss scale is in the checkpoint. As
// TestCUDALossScaling, stopped after step 7 (scale 4096) and resumed to
// step 12: the overflow at step 10 halves 8192 to 4096, as in the
// uninterrupted run; restarted from -loss-scale 1024 it said 1024.
func TestCUDALossScaleResumes(t *testing.T) {
	env := append(emuEnv(t), "HPCTRAIN_FAULT=overflow@1:5,overflow@1:10")
	ck := filepath.Join(t.TempDir(), "ck")
	args := []string{"train", "-model", "mlp", "-device", "cuda", "-precision", "fp16", "-limit", "1280", "-test-limit", "100",
		"-batch", "32", "-threads", "1", "-loss-scale", "1024", "-loss-scale-interval", "2", "-checkpoint-dir", ck, "-resume", "auto"}
	if r := hpctrainEnv(t, 2, 5*time.Minute, env, append(args, "-steps", "7")...); r.code != 0 {
		t.Fatalf("first part: code %d\n%s", r.code, r.out)
	}
	r := hpctrainEnv(t, 2, 5*time.Minute, env, append(args, "-steps", "12")...)
	if want := "step 10: fp16 gradients overflowed; step skipped on every rank, loss scale now 4096"; r.code != 0 || !strings.Contains(r.out, want) {
		t.Errorf("resumed: code %d, want %q:\n%s", r.code, want, r.out)
	}
	// -loss-scale-interval is not a setting the checkpoint holds the run
	// to: lowered below the checkpoint's count of clean steps, the state
	// cannot be restored, and the run resumes from -loss-scale, saying so.
	ck2 := filepath.Join(t.TempDir(), "ck")
	args = append(args, "-checkpoint-dir", ck2, "-loss-scale-interval")
	if r := hpctrainEnv(t, 2, 5*time.Minute, emuEnv(t), append(args, "100", "-steps", "7")...); r.code != 0 {
		t.Fatalf("interval 100: code %d\n%s", r.code, r.out)
	}
	r = hpctrainEnv(t, 2, 5*time.Minute, emuEnv(t), append(args, "5", "-steps", "9")...)
	if want := "warning: the checkpoint's fp16 loss scale does not fit this run's settings"; r.code != 0 || !strings.Contains(r.out, want) {
		t.Errorf("resumed with a lower interval: code %d, want a warning %q:\n%s", r.code, want, r.out)
	}
}

// TestCUDASkippedStepCheckpoint: under fp16 loss scaling a rank whose
// loss is NaN skips the step with the others and the run goes on; the
// skipped step's loss is left out of the epoch's training loss, so the
// checkpoints after it are written (its NaN in the checkpoint's epoch_loss
// failed the save) and the reported loss is finite.
func TestCUDASkippedStepCheckpoint(t *testing.T) {
	dir := t.TempDir()
	env := append(emuEnv(t), "HPCTRAIN_FAULT=nan@1:3")
	r := hpctrainEnv(t, 2, 5*time.Minute, env, "train", "-model", "mlp", "-device", "cuda", "-precision", "fp16", "-limit", "1280", "-test-limit", "100",
		"-batch", "32", "-threads", "1", "-steps", "12", "-checkpoint-dir", filepath.Join(dir, "ck"), "-checkpoint-every", "5", "-metrics", filepath.Join(dir, "m.jsonl"))
	if r.code != 0 || !strings.Contains(r.out, "step 3: fp16 gradients overflowed; step skipped") {
		t.Fatalf("code %d, want 0 and step 3 skipped:\n%s", r.code, r.out)
	}
	for _, step := range []string{"5", "10", "12"} {
		if !strings.Contains(r.out, "ckpt-0000000000"+fmt.Sprintf("%02s", step)+".hpck (step "+step+")") {
			t.Errorf("no checkpoint of step %s:\n%s", step, r.out)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "m.jsonl"))
	if !regexp.MustCompile(`"train_loss":[0-9]`).Match(b) {
		t.Errorf("metrics without a finite training loss:\n%s", b)
	}
}

// TestCUDADevicesPerRank: where NVML finds no GPU but CUDA does (the
// emulated device has no NVML), more local ranks than devices is refused
// without -gpu-share, as placement refuses it, and shared with it; -gpus
// none keeps -device auto on the CPU and contradicts -device cuda. All
// of these once trained on cuda:0 regardless.
func TestCUDADevicesPerRank(t *testing.T) {
	args := []string{"train", "-model", "mlp", "-limit", "640", "-test-limit", "100", "-steps", "2", "-progress", "0"}
	one := append(emuEnv(t), "HPCTRAIN_CUDAEMU_DEVICES=1")
	r := hpctrainEnv(t, 2, 5*time.Minute, one, append(args, "-device", "cuda")...)
	if want := "2 local ranks but CUDA sees 1 device: each rank needs a GPU of its own; use -gpu-share to let ranks share GPUs (MPS), -device cpu, or start at most 1 per node"; r.code != 2 || !strings.Contains(r.out, want) {
		t.Errorf("2 ranks on 1 device: exit %d, want 2 and %q:\n%s", r.code, want, r.out)
	}
	r = hpctrainEnv(t, 2, 5*time.Minute, one, append(args, "-device", "cuda", "-gpu-share")...)
	if r.code != 0 || strings.Count(r.out, "cuda:0") == 0 {
		t.Errorf("2 ranks sharing 1 device: exit %d:\n%s", r.code, r.out)
	}
	r = hpctrainEnv(t, 1, 5*time.Minute, emuEnv(t), append(args, "-device", "auto", "-gpus", "none")...)
	if r.code != 0 || !strings.Contains(r.out, "(cpu, ") {
		t.Errorf("-device auto -gpus none: exit %d, want a run on the CPU:\n%s", r.code, r.out)
	}
	r = hpctrainEnv(t, 1, 5*time.Minute, emuEnv(t), append(args, "-device", "cuda", "-gpus", "none")...)
	if want := `device = "cuda" and gpus = "none" contradict each other`; r.code != 2 || !strings.Contains(r.out, want) {
		t.Errorf("-device cuda -gpus none: exit %d, want 2 and %q:\n%s", r.code, want, r.out)
	}
}

// TestCUDALossScaling: fp16 with an overflow on one rank at steps 5 and
// 10. Both ranks skip those steps (the parameters stay identical: checked
// every step) and halve the scale, which doubles after every 2 clean
// steps: 1024 -> 2048 after steps 1-2, 4096 after 3-4, 2048 at step 5,
// 4096 after 6-7, 8192 after 8-9, 4096 at step 10.
func TestCUDALossScaling(t *testing.T) {
	env := append(emuEnv(t), "HPCTRAIN_FAULT=overflow@1:5,overflow@1:10")
	r := hpctrainEnv(t, 2, 5*time.Minute, env, "train", "-model", "cnn", "-device", "cuda", "-precision", "fp16", "-limit", "2560", "-test-limit", "500",
		"-batch", "32", "-threads", "1", "-steps", "12", "-loss-scale", "1024", "-loss-scale-interval", "2", "-check-every", "1")
	if r.code != 0 {
		t.Fatalf("code %d\n%s", r.code, r.out)
	}
	for _, want := range []string{"step 5: fp16 gradients overflowed; step skipped on every rank, loss scale now 2048",
		"step 10: fp16 gradients overflowed; step skipped on every rank, loss scale now 4096"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("no line %q in\n%s", want, r.out)
		}
	}
	if n := strings.Count(r.out, "overflowed"); n != 2 {
		t.Errorf("%d overflow lines, want 2:\n%s", n, r.out)
	}
}

// TestCUDAWatchdogNCCL: a rank that stops before its first step leaves
// its peer in the NCCL all-reduce; the watchdog aborts NCCL and the job
// with its usual message instead of hanging.
func TestCUDAWatchdogNCCL(t *testing.T) {
	env := append(emuEnv(t), "HPCTRAIN_FAULT=stop@1:training")
	start := time.Now()
	r := hpctrainEnv(t, 2, 2*time.Minute, env, "train", "-model", "cnn", "-device", "cuda", "-limit", "640", "-test-limit", "100",
		"-batch", "32", "-threads", "1", "-collective-timeout", "8") // 8: start-up compiles the kernels on both ranks at once
	if r.code == 0 {
		t.Fatalf("exit 0 with a stopped rank:\n%s", r.out)
	}
	if !regexp.MustCompile(`rank 0 on host .*collective timeout: the NCCL gradient all-reduce \(bucket \d+\) during training at step 1 waited 8s`).MatchString(r.out) {
		t.Errorf("no watchdog line naming NCCL:\n%s", r.out)
	}
	t.Logf("ended in %v", time.Since(start).Round(time.Second))
}

// TestCUDAMissing: each missing library (or no device) is one line naming
// what was looked for, on every rank, exit 1; with -device auto the run
// warns and trains on the CPU.
func TestCUDAMissing(t *testing.T) {
	emu, err := cudaemu.Dir()
	if err != nil {
		t.Fatal(err)
	}
	libs := []string{"libcuda.so.1", "libcublas.so.12", "libnvrtc.so.12", "libnccl.so.2"}
	want := map[string]string{
		"libcuda.so.1":    "cannot load the CUDA driver: tried libcuda.so.1",
		"libcublas.so.12": "cannot load cuBLAS: tried libcublas.so.12, libcublas.so.11",
		"libnvrtc.so.12":  "cannot load NVRTC: tried libnvrtc.so.12",
		"libnccl.so.2":    "cannot load NCCL: tried libnccl.so.2",
	}
	args := []string{"train", "-model", "mlp", "-limit", "640", "-test-limit", "100", "-batch", "32", "-threads", "1"}
	for _, missing := range libs {
		t.Run(missing, func(t *testing.T) {
			dir := t.TempDir()
			for _, l := range libs {
				if l != missing {
					if err := os.Symlink(filepath.Join(emu, l), filepath.Join(dir, l)); err != nil {
						t.Fatal(err)
					}
				}
			}
			env := []string{"LD_LIBRARY_PATH=" + dir, "HPCTRAIN_CUDAEMU_DEVICES=2"}
			if missing == "libnvrtc.so.12" {
				// make test installs Debian's NVRTC 11.8 (the kernel
				// compile check), which the loader would take instead:
				// hide it from this job in a mount namespace of its own.
				sys, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/libnvrtc.so.*")
				if len(sys) > 0 {
					env = append(env, hideEnv+"="+strings.Join(sys, " "))
				}
			}
			r := hpctrainEnv(t, 2, 2*time.Minute, env, append(args, "-device", "cuda")...)
			if r.code != 1 || strings.Count(r.out, want[missing]) != 2 || strings.Contains(r.out, "goroutine ") {
				t.Errorf("-device cuda without %s: code %d, want 1 and the line %q on each rank:\n%s", missing, r.code, want[missing], r.out)
			}
			if missing == "libcuda.so.1" {
				return // auto without a driver is the CPU node's normal case: no warning
			}
			r = hpctrainEnv(t, 2, 2*time.Minute, env, append(args, "-device", "auto")...)
			if r.code != 0 || strings.Count(r.out, "-device auto: ") != 2 || !strings.Contains(r.out, "training on the CPU") {
				t.Errorf("-device auto without %s: code %d, want 0 and a warning on each rank:\n%s", missing, r.code, r.out)
			}
		})
	}
	t.Run("no device", func(t *testing.T) {
		env := []string{"LD_LIBRARY_PATH=" + emu, "HPCTRAIN_CUDAEMU_DEVICES=0"}
		r := hpctrainEnv(t, 2, 2*time.Minute, env, append(args, "-device", "cuda")...)
		if r.code != 1 || strings.Count(r.out, "CUDA_ERROR_NO_DEVICE") != 2 {
			t.Errorf("-device cuda with no device: code %d\n%s", r.code, r.out)
		}
	})
}

// TestCUDACheckpointMoves: parameters, gradients' layout and optimizer
// state are the same on both devices, so a run checkpointed on the
// emulated GPU (here with -collective mpi: buckets staged through host
// memory) resumes on the CPU. Its steps 11-20 repeat those of an
// uninterrupted GPU run (NCCL) within 1e-4 relative, and the finished
// CPU checkpoint is read back by a GPU run, which reports it complete.
func TestCUDACheckpointMoves(t *testing.T) {
	env := emuEnv(t)
	dir := t.TempDir()
	args := []string{"train", "-model", "cnn", "-limit", "1280", "-test-limit", "200", "-batch", "32", "-threads", "1", "-epochs", "2", "-steps", "20", "-optimizer", "adam", "-lr", "0.001"}
	run := func(name string, extra ...string) result {
		r := hpctrainEnv(t, 2, 5*time.Minute, env, append(append(args, "-loss-log", filepath.Join(dir, name)), extra...)...)
		if r.code != 0 {
			t.Fatalf("%s: code %d\n%s", name, r.code, r.out)
		}
		return r
	}
	run("full", "-device", "cuda", "-checkpoint-dir", filepath.Join(dir, "full.cp"))
	cp := filepath.Join(dir, "moved.cp")
	run("moved", "-device", "cuda", "-collective", "mpi", "-steps", "10", "-checkpoint-dir", cp)
	r := run("moved", "-device", "cpu", "-checkpoint-dir", cp, "-resume", "auto")
	if !strings.Contains(r.out, "resum") {
		t.Errorf("the CPU run does not say it resumed:\n%s", r.out)
	}
	full, moved := readLosses(t, filepath.Join(dir, "full")), readLosses(t, filepath.Join(dir, "moved"))
	if len(full) != 20 || len(moved) != 20 {
		t.Fatalf("%d and %d losses, want 20 each", len(full), len(moved))
	}
	for i := range full {
		if rel := math.Abs(moved[i]-full[i]) / math.Abs(full[i]); rel > 1e-4 {
			t.Errorf("step %d: uninterrupted GPU loss %.7f, GPU then CPU %.7f: relative difference %.2g > 1e-4", i+1, full[i], moved[i], rel)
		}
	}
	r = run("back", "-device", "cuda", "-checkpoint-dir", cp, "-resume", "auto")
	if !strings.Contains(r.out, "run already complete at step 20") {
		t.Errorf("the GPU run does not read the CPU's final checkpoint:\n%s", r.out)
	}
}

// TestCUDAVisibleDevices: CUDA_VISIBLE_DEVICES that hides every GPU
// (empty, -1, Slurm's NoDevFiles) keeps -device auto on the CPU, as on a
// GPU node, and makes -device cuda one line on every rank naming the
// variable, exit 2 (the user's setting, as placement's refusal of an
// entry naming no GPU); a value naming one GPU of two trains on it.
func TestCUDAVisibleDevices(t *testing.T) {
	args := []string{"train", "-model", "mlp", "-limit", "512", "-test-limit", "200", "-steps", "2", "-progress", "0"}
	for _, v := range []string{"", "-1", "NoDevFiles"} {
		env := append(emuEnv(t), "CUDA_VISIBLE_DEVICES="+v)
		r := hpctrainEnv(t, 0, 2*time.Minute, env, append(args, "-device", "auto")...)
		if r.code != 0 || !strings.Contains(r.out, "(cpu, ") {
			t.Errorf("CUDA_VISIBLE_DEVICES=%q -device auto: exit %d, want a run on the CPU:\n%s", v, r.code, r.out)
		}
		r = hpctrainEnv(t, 2, 2*time.Minute, env, append(args, "-device", "cuda")...)
		want := fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q leaves CUDA no GPU; unset it or list the GPUs to use, or use -device cpu", v)
		if r.code != 2 || strings.Count(r.out, want) != 2 || strings.Contains(r.out, "goroutine ") {
			t.Errorf("CUDA_VISIBLE_DEVICES=%q -device cuda: exit %d, want 2 and %q on each rank:\n%s", v, r.code, want, r.out)
		}
	}
	r := hpctrainEnv(t, 0, 2*time.Minute, append(emuEnv(t), "CUDA_VISIBLE_DEVICES=1"), append(args, "-device", "auto")...)
	if r.code != 0 || !strings.Contains(r.out, "(cuda:0 cudaemu") {
		t.Errorf("CUDA_VISIBLE_DEVICES=1 -device auto: exit %d, want a run on cuda:0:\n%s", r.code, r.out)
	}
}

// TestCUDADeviceDiffers: with -device auto, a rank that sees no GPU
// (CUDA_VISIBLE_DEVICES=-1 on rank 1 alone) while rank 0 has one stops
// both ranks in one line that says what each has; it said two hashes.
func TestCUDADeviceDiffers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{bin, "train", "-model", "mlp", "-limit", "512", "-test-limit", "200", "-steps", "2", "-progress", "0"}
	all := append([]string{"--oversubscribe", "--bind-to", "none", "-np", "1"}, args...)
	all = append(append(all, ":", "-np", "1", "-x", "CUDA_VISIBLE_DEVICES=-1"), args...)
	cmd := exec.CommandContext(ctx, "mpirun", all...)
	cmd.Env = append(mpitest.Env(), emuEnv(t)...)
	b, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("mpirun %v did not end (hang):\n%s", all, b)
	}
	var ee *exec.ExitError
	want := "device, collective and precision differs from rank 0's (cuda with nccl, fp32): rank 1 has cpu, fp32; give every rank a GPU"
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || strings.Count(string(b), want) != 2 {
		t.Errorf("rank 1 without a GPU: %v, want exit 2 and %q on each rank:\n%s", err, want, b)
	}
}

// TestBF16RefusedAlike: -precision bf16 where the rank computes on a CPU
// without bf16 dot products (oneDNN held to AVX2) is refused as on a GPU
// without bf16 tensor cores: one line on every rank with what to use,
// exit 2, with -device cpu and with -device auto kept off the emulated
// GPU; it was the model's error, exit 1, without a hint.
func TestBF16RefusedAlike(t *testing.T) {
	env := append(emuEnv(t), "DNNL_MAX_CPU_ISA=AVX2")
	args := []string{"train", "-model", "mlp", "-limit", "512", "-test-limit", "200", "-steps", "2", "-progress", "0", "-precision", "bf16"}
	for _, dev := range [][]string{{"-device", "cpu"}, {"-device", "auto", "-gpus", "none"}} {
		r := hpctrainEnv(t, 2, 2*time.Minute, env, append(args, dev...)...)
		want := "precision bf16 needs AVX512-BF16 or AMX-BF16 on the CPU: oneDNN's effective ISA is avx2"
		if r.code != 2 || strings.Count(r.out, want) != 2 || !strings.Contains(r.out, "; use -precision fp32 or auto") {
			t.Errorf("%v: exit %d, want 2 and %q with a hint on each rank:\n%s", dev, r.code, want, r.out)
		}
	}
}
