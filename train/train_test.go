package train

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"hpctrain/checkpoint"
	"hpctrain/data"
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
	t.Helper()
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
// Ranks started with different settings (here rank 1's data_dir) stop at
// the configuration-hash check, every rank naming rank 1. The path in which
// one rank fails a start-up stage with the same configuration is
// TestStartupStageFailureNamesRank's.
func TestStartupConfigMismatch(t *testing.T) {
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
		{"checkpoint_every = 1.5\n", "checkpoint_every = 1.5: must be a step count"},
		{"checkpoint_every = \"often\"\n", `checkpoint_every = "often": must be a step count`},
		{"checkpoint_every = -3\n", `checkpoint_every = "-3": must be a step count`},
	} {
		os.WriteFile(p, []byte(c.file), 0o644)
		if _, _, err := Parse([]string{"-config", p}, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.file, err, c.want)
		}
	}
	// checkpoint_every: a TOML integer is a step count, a string a step
	// count or a duration.
	for file, want := range map[string]everyPolicy{
		"checkpoint_every = 40\n":      {Steps: 40},
		"checkpoint_every = \"40\"\n":  {Steps: 40},
		"checkpoint_every = \"10m\"\n": {Period: 10 * time.Minute},
		// 0 is off in every form, a duration's too (\"0s\" was refused).
		"checkpoint_every = 0\n":        {},
		"checkpoint_every = \"0\"\n":    {},
		"checkpoint_every = \"0s\"\n":   {},
		"checkpoint_every = \"0m0s\"\n": {},
	} {
		os.WriteFile(p, []byte(file), 0o644)
		cfg, _, err := Parse([]string{"-config", p}, io.Discard)
		if err != nil {
			t.Errorf("%q: %v", file, err)
			continue
		}
		if got, err := parseEvery(cfg.CheckpointEvery); err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", file, got, err, want)
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

// TestResumeIsExact: a run stopped after 13 steps and resumed from its
// checkpoint continues with exactly the losses and parameters of the
// uninterrupted run (same world size), and reports the same training
// loss for the epoch it resumed in: the checkpoint carries the epoch's
// losses so far (it used to report the mean of the steps after resuming).
// Stopped by a periodic checkpoint, or by -steps, on 1 rank and on 2.
func TestResumeIsExact(t *testing.T) {
	cfg := Defaults()
	cfg.Model, cfg.Limit, cfg.TestLimit, cfg.Progress, cfg.DataDir, cfg.Batch = "mlp", 640, 64, 0, dataDir, 32
	cfg.Epochs, cfg.Steps = 2, 30 // crosses the epoch boundary at step 20
	cfg.Metrics = filepath.Join(t.TempDir(), "full.jsonl")
	full, err := Run(cfg, mpi.NewSingle(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	epochLoss := func(path string, epoch int) float64 {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var m struct {
				Epoch     int     `json:"epoch"`
				TrainLoss float64 `json:"train_loss"`
				Final     bool    `json:"final"`
			}
			json.Unmarshal([]byte(line), &m)
			if m.Epoch == epoch && !m.Final {
				return m.TrainLoss
			}
		}
		t.Fatalf("%s: no epoch %d", path, epoch)
		return 0
	}
	dir := t.TempDir()
	first := cfg
	first.Steps, first.CheckpointDir, first.Metrics = 13, dir, ""
	if _, err := Run(first, mpi.NewSingle(), io.Discard); err != nil {
		t.Fatal(err)
	}
	second := cfg
	second.CheckpointDir, second.Resume = dir, "auto"
	second.Metrics = filepath.Join(t.TempDir(), "resumed.jsonl")
	res, err := Run(second, mpi.NewSingle(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := epochLoss(cfg.Metrics, 1), epochLoss(second.Metrics, 1); a != b {
		t.Errorf("epoch 1's training loss: uninterrupted %v, resumed at step 13 %v", a, b)
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

// TestResumeEpochLossTwoRanks: on 2 ranks, a run resumed from a periodic
// checkpoint within an epoch (its losses so far summed over the ranks
// when it was written) reports the uninterrupted run's training loss for
// that epoch.
func TestResumeEpochLossTwoRanks(t *testing.T) {
	cfg := Defaults()
	cfg.Model, cfg.Limit, cfg.TestLimit, cfg.Progress, cfg.DataDir, cfg.Batch = "mlp", 640, 64, 0, dataDir, 16
	cfg.Epochs, cfg.Steps = 2, 30 // 20 steps an epoch at 2 x 16
	runs := func(cfg Config) []Result {
		t.Helper()
		ranks := mpi.NewFake(2, 0)
		res := make([]Result, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r, c := range ranks {
			wg.Add(1)
			go func() { defer wg.Done(); res[r], errs[r] = Run(cfg, c, io.Discard) }()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		return res
	}
	full := cfg
	full.Epochs, full.Steps = 1, 0
	want := runs(full)[0].TrainLoss

	dir := t.TempDir()
	first := cfg
	first.Steps, first.CheckpointDir, first.CheckpointEvery = 15, dir, "7"
	runs(first)
	// Leave the periodic checkpoint of step 14; the run's final one (step
	// 15) goes.
	if err := os.Remove(filepath.Join(dir, "ckpt-000000000015.hpck")); err != nil {
		t.Fatal(err)
	}
	second := cfg
	second.Epochs, second.Steps, second.CheckpointDir, second.Resume = 1, 0, dir, "auto"
	// The same sums, added in another order: equal to rounding.
	if got := runs(second)[0]; got.ResumedFrom != 14 || math.Abs(got.TrainLoss-want) > 1e-12*want {
		t.Errorf("resumed from step %d: epoch 1's training loss %v, uninterrupted %v", got.ResumedFrom, got.TrainLoss, want)
	}
}

// TestResumeEpochLossPaths: the epoch's training loss after resuming
// (one rank, 20 steps an epoch), where the checkpoint does not carry the
// whole epoch so far:
//   - a checkpoint of an older build (no epoch_loss), resumed at step 7 and
//     checkpointed again at step 14 within the epoch, then resumed to the
//     epoch's end: the mean of the steps counted since the first resume,
//     8 to 20 (it was their sum over all 20 steps);
//   - a run resumed at its last step with nothing left to train (its
//     checkpoint written before the final one could be): the recorded
//     mean of steps 1 to 14 (it was 0).
func TestResumeEpochLossPaths(t *testing.T) {
	cfg := Defaults()
	cfg.Model, cfg.Limit, cfg.TestLimit, cfg.Progress, cfg.DataDir, cfg.Batch = "mlp", 640, 64, 0, dataDir, 32
	cfg.Epochs = 1
	full, err := Run(cfg, mpi.NewSingle(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	mean := func(from, to int) float64 { // steps from..to, numbered from 1
		var s float64
		for _, l := range full.StepLosses[from-1 : to] {
			s += l
		}
		return s / float64(to-from+1)
	}
	// rewrite replaces the newest checkpoint in dir by change's copy.
	rewrite := func(dir string, change func(*checkpoint.State)) {
		t.Helper()
		st, _, err := checkpoint.Latest(dir, nil)
		if err != nil || st == nil {
			t.Fatalf("newest checkpoint: %v", err)
		}
		change(st)
		if _, err := checkpoint.Save(dir, st, 0); err != nil {
			t.Fatal(err)
		}
	}
	run := func(c Config) Result {
		t.Helper()
		res, err := Run(c, mpi.NewSingle(), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Abs(b) }

	dir := t.TempDir()
	c := cfg
	c.CheckpointDir, c.Steps = dir, 7
	run(c)
	rewrite(dir, func(st *checkpoint.State) { st.EpochLoss = nil })
	c.Resume, c.Steps = "auto", 14
	run(c)
	c.Steps = 0
	if got, want := run(c).TrainLoss, mean(8, 20); !near(got, want) {
		t.Errorf("resumed from an older build's checkpoint, checkpointed within the epoch, resumed again: training loss %v, want steps 8-20's %v", got, want)
	}

	dir = t.TempDir()
	c = cfg
	c.CheckpointDir, c.Steps = dir, 14
	run(c)
	rewrite(dir, func(st *checkpoint.State) { st.Final = nil })
	c.Resume = "auto"
	if got, want := run(c).TrainLoss, mean(1, 14); !near(got, want) {
		t.Errorf("resumed with nothing left to train: training loss %v, want steps 1-14's %v", got, want)
	}
}

// TestStopAtEpochEnd: a run asked to stop (SIGUSR1, here the usr1 fault)
// at an epoch's last step exits for requeue at once, its checkpoint
// marking the epoch unreported; the resumed run evaluates and reports that
// epoch before it trains the next (no run reported it), and every epoch's
// figures are the uninterrupted run's. Asked at the run's last step, the
// resumed run has nothing to train and reports the last epoch.
func TestStopAtEpochEnd(t *testing.T) {
	t.Cleanup(func() { stopSignalled.Store(false) })
	cfg := Defaults()
	cfg.Model, cfg.Limit, cfg.TestLimit, cfg.Progress, cfg.DataDir, cfg.Batch = "mlp", 640, 64, 0, dataDir, 32
	cfg.Epochs = 2 // 20 steps each
	cfg.Metrics = filepath.Join(t.TempDir(), "full.jsonl")
	if _, err := Run(cfg, mpi.NewSingle(), io.Discard); err != nil {
		t.Fatal(err)
	}
	type line struct {
		Epoch        int     `json:"epoch"`
		TrainLoss    float64 `json:"train_loss"`
		TestAccuracy float64 `json:"test_accuracy"`
		Final        bool    `json:"final"`
	}
	epochs := func(path string) []line {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var ls []line
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var m line
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("%s: %q: %v", path, l, err)
			}
			if !m.Final {
				ls = append(ls, m)
			}
		}
		return ls
	}
	want := epochs(cfg.Metrics)

	c := cfg
	c.CheckpointDir, c.Resume, c.Metrics = t.TempDir(), "auto", filepath.Join(t.TempDir(), "stopped.jsonl")
	for _, at := range []string{"20", "40"} {
		c := c
		c.CheckpointDir, c.Metrics = t.TempDir(), filepath.Join(t.TempDir(), "stopped.jsonl")
		t.Setenv(FaultEnv, "usr1@0:"+at)
		if _, err := Run(c, mpi.NewSingle(), io.Discard); !errors.Is(err, ErrPreempted) {
			t.Fatalf("stopped at step %s: %v, want ErrPreempted", at, err)
		}
		stopSignalled.Store(false)
		t.Setenv(FaultEnv, "")
		if _, err := Run(c, mpi.NewSingle(), io.Discard); err != nil {
			t.Fatal(err)
		}
		got := epochs(c.Metrics)
		if len(got) != 2 || got[0] != want[0] || math.Abs(got[1].TrainLoss-want[1].TrainLoss) > 1e-12 || got[1].TestAccuracy != want[1].TestAccuracy {
			t.Errorf("stopped after step %s and resumed: epochs %+v, uninterrupted %+v", at, got, want)
		}
	}
}

// TestResumeIsExactWithLoader: as TestResumeIsExact, with loader workers
// and a random transform: the resumed run starts the loader in mid-epoch
// and continues with exactly the uninterrupted run's batches, hence its
// losses and parameters, whatever the number of workers after resuming.
func TestResumeIsExactWithLoader(t *testing.T) {
	cfg, _, err := Parse(strings.Fields("-model mlp -limit 640 -test-limit 64 -progress 0 -batch 32 -epochs 2 -steps 30 -data-workers 2 -augment crop_pad=2,flip,rotate_deg=10 -data-dir "+dataDir), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	full, err := Run(cfg, mpi.NewSingle(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, workers := range []int{2, 0} {
		dir := t.TempDir()
		first := cfg
		first.Steps, first.CheckpointDir = 13, dir
		if _, err := Run(first, mpi.NewSingle(), io.Discard); err != nil {
			t.Fatal(err)
		}
		second := cfg
		second.CheckpointDir, second.Resume, second.DataWorkers = dir, "auto", workers
		res, err := Run(second, mpi.NewSingle(), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.StepLosses) != 17 {
			t.Fatalf("resumed run took %d steps, want 17", len(res.StepLosses))
		}
		for i, l := range res.StepLosses {
			if l != full.StepLosses[13+i] {
				t.Fatalf("resumed with %d workers: step %d: loss %v, uninterrupted %v", workers, 14+i, l, full.StepLosses[13+i])
			}
		}
		for i := range res.Params {
			if res.Params[i] != full.Params[i] {
				t.Fatalf("resumed with %d workers: parameter %d: %v, uninterrupted %v", workers, i, res.Params[i], full.Params[i])
			}
		}
		if res.TestLoss != full.TestLoss {
			t.Errorf("resumed with %d workers: test loss %v, uninterrupted %v", workers, res.TestLoss, full.TestLoss)
		}
	}
	// Another augmentation is another run: no resuming from it.
	other := cfg
	other.CheckpointDir, other.Resume, other.Augment = t.TempDir(), "auto", "flip"
	first := other
	first.Steps = 3
	if _, err := Run(first, mpi.NewSingle(), io.Discard); err != nil {
		t.Fatal(err)
	}
	other.Augment = "crop_pad=2,flip,rotate_deg=10"
	if _, err := Run(other, mpi.NewSingle(), io.Discard); err == nil || !strings.Contains(err.Error(), "config") {
		t.Errorf("resuming with another augmentation: %v, want a configuration refusal", err)
	}
}

// TestDeterministicAcrossDataWorkers: the loss of every step, the final
// parameters and the test metrics of a short run with augmentation are
// bit for bit the same with 0, 1 and 3 loader workers (same seed), and
// another seed changes them.
func TestDeterministicAcrossDataWorkers(t *testing.T) {
	run := func(extra string) Result {
		t.Helper()
		cfg, _, err := Parse(strings.Fields("-model cnn -limit 384 -test-limit 100 -progress 0 -batch 32 -epochs 2 -steps 16 -threads 1 -augment crop_pad=2,flip,blur_sigma=0.6 -data-dir "+dataDir+" "+extra), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(cfg, mpi.NewSingle(), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	ref := run("-data-workers 0")
	if len(ref.StepLosses) != 16 {
		t.Fatalf("%d steps", len(ref.StepLosses))
	}
	for _, extra := range []string{"-data-workers 1", "-data-workers 3", "-data-workers 3 -prefetch 1"} {
		res := run(extra)
		for i := range ref.StepLosses {
			if res.StepLosses[i] != ref.StepLosses[i] {
				t.Fatalf("%s: step %d loss %v, with 0 workers %v", extra, i+1, res.StepLosses[i], ref.StepLosses[i])
			}
		}
		if maxRelErr(res.Params, ref.Params) != 0 || res.TestLoss != ref.TestLoss || res.TestAccuracy != ref.TestAccuracy {
			t.Errorf("%s: parameters or test metrics differ from 0 workers", extra)
		}
	}
	if other := run("-data-workers 3 -seed 2"); other.StepLosses[3] == ref.StepLosses[3] {
		t.Error("another seed gives the same losses: the comparison cannot tell runs apart")
	}
}

// TestDataConfig: the data keys from TOML (augment as a string or a
// table), their validation naming the key, and which of them the
// configuration hash covers.
func TestDataConfig(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "job.toml")
	os.WriteFile(p, []byte("dataset = \"synthetic\"\nimage_shape = \"32x32x3\"\ndata_workers = 2\nprefetch = 3\nmean = [0.5, 0.5, 0.5]\nstd = [0.25, 0.25, 0.25]\n[augment]\nflip = true\ncrop_pad = 4\n"), 0o644)
	cfg, _, err := Parse([]string{"-config", p, "-data-workers", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Dataset != "synthetic" || cfg.DataWorkers != 3 || cfg.Prefetch != 3 || len(cfg.Std) != 3 || cfg.Augment != "crop_pad=4,flip" {
		t.Errorf("file then flags gave %+v", cfg)
	}
	// The string form, in order, and its round trip through -print-config.
	os.WriteFile(p, []byte("augment = \"flip, rotate_deg=5:nearest\"\n"), 0o644)
	cfg, _, err = Parse([]string{"-config", p}, io.Discard)
	if err != nil || cfg.Augment != "flip,rotate_deg=5:nearest" {
		t.Fatalf("augment string: %q, %v", cfg.Augment, err)
	}
	var out strings.Builder
	cfg.WriteTOML(&out)
	os.WriteFile(p, []byte(out.String()), 0o644)
	again, _, err := Parse([]string{"-config", p}, io.Discard)
	if err != nil || again.Hash() != cfg.Hash() {
		t.Errorf("-print-config does not round-trip: %v\n%s", err, out.String())
	}
	for _, c := range []struct{ file, want string }{
		{"dataset = \"imagenet\"\n", "dataset = \"imagenet\": must be fashion-mnist, mnist, cifar10, folder, synthetic"},
		{"data_workers = -1\n", "data_workers = -1"},
		{"prefetch = -2\n", "prefetch = -2"},
		{"mean = [0.5]\n", "give both"},
		{"mean = [0.5]\nstd = [0.0]\n", "stds > 0"},
		{"augment = \"sharpen=1\"\n", "unknown transform \"sharpen\""},
		{"[augment]\nflip = true\nsharpen = 2\n", "augment: unknown key sharpen"},
		{"[augment]\ncrop_pad = -1\n", "augment.crop_pad"},
		{"bad_input = \"ignore\"\n", "bad_input = \"ignore\""},
		{"dataset = \"folder\"\n", "needs test_dir"},
		{"dataset = \"folder\"\nval_split = 1.5\n", "val_split = 1.5"},
		{"val_split = 0.1\n", "val_split applies to dataset folder only"},
		{"dataset = \"folder\"\nval_split = 0.1\nimage_shape = \"32x32x2\"\n", "channels must be 1 or 3"},
		{"image_shape = \"32x32x3\"\n", "image_shape applies"},
		{"dataset = \"folder\"\nval_split = 0.1\nfolder_resize = \"cubic\"\n", "folder_resize = \"cubic\""},
		{"lazy = true\n", "lazy applies to dataset folder only"},
		{"folder_resize = \"none\"\n", "folder_resize = \"none\" applies to dataset folder only (dataset is fashion-mnist)"},
		{"dataset = \"synthetic\"\nbad_input = \"skip\"\n", "bad_input = \"skip\" applies to dataset folder only (dataset is synthetic)"},
	} {
		os.WriteFile(p, []byte(c.file), 0o644)
		if _, _, err := Parse([]string{"-config", p}, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.file, err, c.want)
		}
	}
	a, b := Defaults(), Defaults()
	b.DataWorkers, b.Prefetch = 4, 9
	if a.Hash() != b.Hash() {
		t.Error("data_workers or prefetch change the configuration hash: results do not depend on them")
	}
	for _, change := range []func(*Config){
		func(c *Config) { c.Augment = "flip" },
		func(c *Config) { c.Mean, c.Std = []float64{0.3}, []float64{0.3} },
		func(c *Config) { c.Dataset = "mnist" },
		func(c *Config) { c.BadInput = "skip" },
	} {
		b := Defaults()
		change(&b)
		if a.Hash() == b.Hash() {
			t.Errorf("%+v does not change the configuration hash", b)
		}
	}
}

// TestLoadData: the model's input follows the loader (CIFAR-shaped
// samples give the CNN 3 input channels), training batches are augmented
// and evaluation batches are not.
func TestLoadData(t *testing.T) {
	cfg := Defaults()
	cfg.Dataset, cfg.ImageShape, cfg.Limit, cfg.TestLimit, cfg.Batch = "synthetic", "32x32x3", 64, 20, 16
	cfg.Augment, cfg.DataWorkers = "flip=1", 2 // always flip: easy to check
	pipe, err := loadData(cfg, mpi.NewSingle(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pipe.close()
	if s := pipe.trainLoad.Shape(); s.H != 32 || s.W != 32 || s.C != 3 {
		t.Fatalf("loader shape %v", s)
	}
	// Raw sample 0 of the test set against the evaluation loader's first
	// sample: unflipped, scaled to [0, 1].
	raw := make([]byte, 32*32*3)
	pipe.test.Sample(0, raw)
	pipe.testLoad.StartRange(0, pipe.test.Len())
	b, _ := pipe.testLoad.Next()
	for j, p := range raw {
		if b.X[j] != float32(p)*(1.0/255) {
			t.Fatalf("evaluation value %d is %v, want the unaugmented %v", j, b.X[j], float32(p)/255)
		}
	}
	pipe.testLoad.Release(b)
	// The training loader's samples are mirrored.
	pipe.trainLoad.Start(1)
	b, _ = pipe.trainLoad.Next()
	idx := data.NewSampler(64, 16, 0, 1, cfg.Seed)
	idx.SetEpoch(1)
	pipe.train.Sample(idx.Batch(0)[0], raw)
	for x := 0; x < 32; x++ {
		if got, want := b.X[3*x], float32(raw[3*(31-x)])*(1.0/255); got != want {
			t.Fatalf("training sample column %d is %v, want the mirrored %v", x, got, want)
		}
	}
	pipe.trainLoad.Release(b)

	// The reference CNN on 32x32x3 input: conv1 3->32 (896), conv2 (18,496),
	// fc 4096->512 (2,097,664), fc 512->10 (5,130).
	cfg.Model, cfg.Steps, cfg.Progress = "cnn", 2, 0
	cfg.Augment = "crop_pad=4,flip"
	res, err := Run(cfg, mpi.NewSingle(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Params) != 2122186 || res.Step != 2 {
		t.Errorf("CNN on 32x32x3: %d parameters, %d steps", len(res.Params), res.Step)
	}
	// A crop to 28x28 feeds the model 28x28x3; evaluation centre-crops.
	cfg.Augment = "crop_pad=2:28x28"
	if res, err = Run(cfg, mpi.NewSingle(), io.Discard); err != nil || len(res.Params) != 1630090+2*9*32 {
		t.Errorf("CNN on 28x28x3 crops: %d parameters, %v", len(res.Params), err)
	}
}

// TestTrimResumed: a resumed run cuts its metrics and loss log back to
// the checkpoint's step: lines of later steps (the stopped run went past
// its last checkpoint) and a last line cut short (it stopped mid-write, on
// a full disk) go, lines without a step stay, and the run appends after
// what is left. Before, it appended to all of it: a metrics file that no
// longer parsed, and steps twice in the loss log.
func TestTrimResumed(t *testing.T) {
	dir := t.TempDir()
	var said []string
	r := &run{log: func(f string, a ...any) { said = append(said, fmt.Sprintf(f, a...)) }}
	for _, c := range []struct {
		name, text string
		last       int
		step       func([]byte) (int, bool)
		want       string
	}{
		{"loss log", "1 0.5\n2 0.4\n3 0.3\n4 0.2\n", 2, lossLogStep, "1 0.5\n2 0.4\n"},
		{"loss log cut short", "1 0.5\n2 0.4\n3 0.2", 5, lossLogStep, "1 0.5\n2 0.4\n"},
		{"loss log whole", "1 0.5\n2 0.4\n", 2, lossLogStep, "1 0.5\n2 0.4\n"},
		{"metrics", `{"epoch":1,"step":10}` + "\n" + `{"epoch":2,"step":20}` + "\n", 10, metricsStep, `{"epoch":1,"step":10}` + "\n"},
		// An epoch the checkpoint left unreported is reported again:
		// its line goes (the caller asks for the steps before it).
		{"metrics unreported", `{"epoch":1,"step":10}` + "\n" + `{"epoch":2,"step":20}` + "\n", 19, metricsStep, `{"epoch":1,"step":10}` + "\n"},
		{"metrics cut short", `{"epoch":1,"step":10}` + "\n" + `{"epoch":2,"st`, 20, metricsStep, `{"epoch":1,"step":10}` + "\n"},
		{"metrics foreign line", "# notes\n" + `{"epoch":1,"step":10}` + "\n", 10, metricsStep, "# notes\n" + `{"epoch":1,"step":10}` + "\n"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_"))
		if err := os.WriteFile(p, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		said = nil
		if err := r.trimResumed(c.name, p, c.last, c.step); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b, _ := os.ReadFile(p)
		if string(b) != c.want {
			t.Errorf("%s: %q after trimming to step %d, want %q", c.name, b, c.last, c.want)
		}
		if (len(said) == 1) != (c.text != c.want) {
			t.Errorf("%s: said %q", c.name, said)
		}
	}
	if err := r.trimResumed("metrics", filepath.Join(dir, "none"), 5, metricsStep); err != nil {
		t.Errorf("a file not there: %v", err)
	}
}
