package train

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"hpctrain/internal/mpitest"
	_ "hpctrain/internal/openblas"
	"hpctrain/mpi"
)

const dataDir = "/usr/share/datasets/fashion-mnist"

// TestMain lets the test binary act as an MPI program: started by mpirun
// with HPCTRAIN_TRAIN_CHILD set, each rank trains with the flags in
// HPCTRAIN_TRAIN_ARGS and rank 0 writes the final parameters to
// HPCTRAIN_TRAIN_OUT.
func TestMain(m *testing.M) {
	if os.Getenv("HPCTRAIN_TRAIN_CHILD") != "" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

func child() int {
	cfg, _, err := Parse(strings.Fields(os.Getenv("HPCTRAIN_TRAIN_ARGS")), os.Stderr)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	w, err := mpi.Start()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	res, err := Run(cfg, w, io.Discard)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if w.Rank() == 0 {
		if err := writeFloats(os.Getenv("HPCTRAIN_TRAIN_OUT"), res.Params); err != nil {
			fmt.Println(err)
			return 1
		}
	}
	w.Close()
	return 0
}

func writeFloats(path string, a []float32) error {
	b := make([]byte, 4*len(a))
	for i, v := range a {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return os.WriteFile(path, b, 0o644)
}

func readFloats(t *testing.T, path string) []float32 {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a := make([]float32, len(b)/4)
	for i := range a {
		a[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return a
}

// trainUnderMPI runs np ranks of this test binary with args and returns rank
// 0's final parameters.
func trainUnderMPI(t *testing.T, np int, args string) []float32 {
	t.Helper()
	out := filepath.Join(t.TempDir(), "params")
	t.Setenv("HPCTRAIN_TRAIN_CHILD", "1")
	t.Setenv("HPCTRAIN_TRAIN_ARGS", args+" -data-dir "+dataDir)
	t.Setenv("HPCTRAIN_TRAIN_OUT", out)
	mpitest.Run(t, 3*time.Minute, np, os.Args[0])
	return readFloats(t, out)
}

// maxRelErr is max|a-b| / max|b|.
func maxRelErr(a, b []float32) float64 {
	var d, s float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
		s = math.Max(s, math.Abs(float64(b[i])))
	}
	return d / s
}

// TestDataParallelEquivalence: under mpirun, 2 ranks with per-rank batch 32
// end 5 steps with the same parameters as 1 rank with batch 64 on the same
// samples.
func TestDataParallelEquivalence(t *testing.T) {
	common := "-model cnn -steps 5 -limit 640 -test-limit 64 -seed 3 -threads 1"
	two := trainUnderMPI(t, 2, common+" -batch 32")
	one := trainUnderMPI(t, 1, common+" -batch 64")
	if len(one) != 1630090 || len(two) != len(one) {
		t.Fatalf("parameter counts %d and %d", len(one), len(two))
	}
	if e := maxRelErr(two, one); e > 1e-5 {
		t.Errorf("2x32 vs 1x64 after 5 steps: relative error %.3g > 1e-5", e)
	}
	// The check can fail: a different global batch gives other parameters.
	three := trainUnderMPI(t, 2, common+" -batch 16")
	if e := maxRelErr(three, one); e < 1e-4 {
		t.Errorf("2x16 vs 1x64 agree to %.3g: the comparison cannot tell runs apart", e)
	}
}

// TestFakeRanksMatchSingle runs the same loop on 3 in-process ranks and on
// one process with the global batch: same parameters after 4 steps.
func TestFakeRanksMatchSingle(t *testing.T) {
	cfg := Defaults()
	cfg.Model, cfg.Steps, cfg.Limit, cfg.TestLimit, cfg.Seed, cfg.Progress, cfg.DataDir = "mlp", 4, 960, 30, 9, 0, dataDir
	cfg.Batch = 30
	single, err := Run(cfg, mpi.NewSingle(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Batch = 10
	ranks := mpi.NewFake(3, 0)
	res := make([]Result, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r, c := range ranks {
		wg.Add(1)
		go func() { defer wg.Done(); res[r], errs[r] = Run(cfg, c, io.Discard) }()
	}
	wg.Wait()
	for r := range ranks {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if e := maxRelErr(res[r].Params, single.Params); e > 1e-5 {
			t.Errorf("rank %d vs single: relative error %.3g", r, e)
		}
	}
	if res[0].TestAccuracy != res[2].TestAccuracy || res[0].Step != 4 {
		t.Errorf("ranks disagree on results: %+v vs %+v", res[0], res[2])
	}
}

// TestStartupAgreement: a rank whose data is missing makes every rank stop
// with an error at start-up (none hangs), and a rank with another
// configuration is named.
func TestStartupAgreement(t *testing.T) {
	cfg := Defaults()
	cfg.Model, cfg.Limit, cfg.Progress, cfg.DataDir = "mlp", 256, 0, dataDir
	ranks := mpi.NewFake(3, 0)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r, c := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cr := cfg
			if r == 1 {
				cr.DataDir = t.TempDir() // nothing there
			}
			_, errs[r] = Run(cr, c, io.Discard)
		}()
	}
	wg.Wait()
	// data_dir is part of the configuration: the hash check catches it first.
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "rank 1 has") {
			t.Errorf("rank %d: %v, want a configuration mismatch naming rank 1", r, err)
		}
	}
}

func TestConfigFileAndFlags(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "job.toml")
	os.WriteFile(p, []byte("model = \"mlp\"\nepochs = 3\nlr = 0.05\n"), 0o644)
	cfg, _, err := Parse([]string{"-config", p, "-lr", "0.1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Model != "mlp" || cfg.Epochs != 3 || cfg.LR != 0.1 {
		t.Errorf("file then flags gave %+v", cfg)
	}
	for _, c := range []struct{ file, want string }{
		{"model = \"mlp\"\nepochs = = 3\n", "line 2"},
		{"modle = \"mlp\"\n", "unknown key modle"},
		{"batch = 0\n", "batch = 0: must be >= 1"},
		{"lr = -1.0\n", "lr = -1: must be >= 0"},
		{"epochs = 0\n", "epochs = 0: must be >= 1"},
	} {
		os.WriteFile(p, []byte(c.file), 0o644)
		if _, _, err := Parse([]string{"-config", p}, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.file, err, c.want)
		}
	}
	a, b := Defaults(), Defaults()
	b.Metrics = "x.jsonl"
	if a.Hash() != b.Hash() {
		t.Error("output-only field changes the configuration hash")
	}
	b.LR = 0.02
	if a.Hash() == b.Hash() {
		t.Error("lr does not change the configuration hash")
	}
}

// TestResumeIsExact: a run stopped after 4 steps and resumed from its
// checkpoint continues with exactly the losses and parameters of the
// uninterrupted run (same world size).
func TestResumeIsExact(t *testing.T) {
	cfg := Defaults()
	cfg.Model, cfg.Limit, cfg.TestLimit, cfg.Progress, cfg.DataDir, cfg.Batch = "mlp", 640, 64, 0, dataDir, 32
	cfg.Epochs, cfg.Steps = 2, 30 // crosses the epoch boundary at step 20
	full, err := Run(cfg, mpi.NewSingle(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	first := cfg
	first.Steps, first.CheckpointDir = 13, dir
	if _, err := Run(first, mpi.NewSingle(), io.Discard); err != nil {
		t.Fatal(err)
	}
	second := cfg
	second.CheckpointDir, second.Resume = dir, "auto"
	res, err := Run(second, mpi.NewSingle(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.StepLosses) != 17 {
		t.Fatalf("resumed run took %d steps, want 17", len(res.StepLosses))
	}
	for i, l := range res.StepLosses {
		if l != full.StepLosses[13+i] {
			t.Fatalf("step %d: resumed loss %v, uninterrupted %v", 14+i, l, full.StepLosses[13+i])
		}
	}
	for i := range res.Params {
		if res.Params[i] != full.Params[i] {
			t.Fatalf("parameter %d: resumed %v, uninterrupted %v", i, res.Params[i], full.Params[i])
		}
	}
	// Another configuration must not resume from this checkpoint.
	other := second
	other.LR = 0.05
	if _, err := Run(other, mpi.NewSingle(), io.Discard); err == nil || !strings.Contains(err.Error(), "config") {
		t.Errorf("resuming with another lr: %v, want a configuration refusal", err)
	}
}
