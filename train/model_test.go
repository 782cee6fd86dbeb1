package train

import (
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"hpctrain/checkpoint"
	"hpctrain/internal/cli"
	"hpctrain/model"
	"hpctrain/mpi"
)

// runRanks runs cfg on n in-process ranks and returns rank 0's result.
func runRanks(t *testing.T, cfg Config, n int) (Result, error) {
	t.Helper()
	ranks := mpi.NewFake(n, 0)
	res := make([]Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[r], errs[r] = Run(cfg, c, io.Discard)
			if errs[r] != nil {
				c.Kill()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return res[0], err
		}
	}
	return res[0], nil
}

// A residual network with batch norm on 2 ranks resumes exactly: the
// checkpoint carries the running statistics, every rank gets rank 0's,
// and losses, parameters and statistics equal the uninterrupted run's.
func TestResumeIsExactResNet8(t *testing.T) {
	cfg := Defaults()
	cfg.Model, cfg.Limit, cfg.TestLimit, cfg.Progress, cfg.DataDir, cfg.Batch = "resnet8", 384, 64, 0, dataDir, 16
	cfg.Epochs, cfg.Steps, cfg.Threads = 2, 18, 1 // 12 steps an epoch: crosses the boundary
	refDir := t.TempDir()
	ref := cfg
	ref.CheckpointDir = refDir
	full, err := runRanks(t, ref, 2)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	first := cfg
	first.Steps, first.CheckpointDir = 7, dir
	if _, err := runRanks(t, first, 2); err != nil {
		t.Fatal(err)
	}
	second := cfg
	second.CheckpointDir, second.Resume = dir, "auto"
	res, err := runRanks(t, second, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.StepLosses) != 11 {
		t.Fatalf("resumed run took %d steps, want 11", len(res.StepLosses))
	}
	for i, l := range res.StepLosses {
		if l != full.StepLosses[7+i] {
			t.Fatalf("step %d: resumed loss %v, uninterrupted %v", 8+i, l, full.StepLosses[7+i])
		}
	}
	for i := range res.Params {
		if res.Params[i] != full.Params[i] {
			t.Fatalf("parameter %d: resumed %v, uninterrupted %v", i, res.Params[i], full.Params[i])
		}
	}
	a, _, err := checkpoint.Latest(refDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := checkpoint.Latest(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ba, bb := a.Lookup("buffers"), b.Lookup("buffers")
	if len(ba) == 0 || len(ba) != len(bb) {
		t.Fatalf("buffers in the final checkpoints: %d and %d values", len(ba), len(bb))
	}
	for i := range ba {
		if ba[i] != bb[i] {
			t.Fatalf("running statistic %d: resumed %v, uninterrupted %v", i, bb[i], ba[i])
		}
	}
	if a.Desc == "" || a.Desc != b.Desc {
		t.Errorf("model description not recorded alike: %q vs %q", a.Desc, b.Desc)
	}
}

// Resuming with an edited description file is refused, naming the change.
func TestResumeOtherDescription(t *testing.T) {
	dir := t.TempDir()
	src, err := model.ZooSource("mlp")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "net.toml")
	if err := os.WriteFile(path, src, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Defaults()
	cfg.Model, cfg.Limit, cfg.TestLimit, cfg.Progress, cfg.DataDir, cfg.Batch = path, 256, 64, 0, dataDir, 32
	cfg.Steps, cfg.CheckpointDir = 3, filepath.Join(dir, "ck")
	if _, err := Run(cfg, mpi.NewSingle(), io.Discard); err != nil {
		t.Fatal(err)
	}
	d, err := model.LoadDesc(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range d.Layers {
		if d.Layers[i].Kind == "linear" && d.Layers[i].Out == 512 {
			d.Layers[i].Out = 256
		}
	}
	if err := os.WriteFile(path, d.TOML(), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Steps, cfg.Resume = 6, "auto"
	_, err = Run(cfg, mpi.NewSingle(), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "512") || !strings.Contains(err.Error(), "256") {
		t.Errorf("resuming with another description: %v, want a refusal naming out 512 vs 256", err)
	}
}

// Sync BN: 2 ranks of 16 samples normalise with the statistics of all 32,
// so they take the steps 1 rank of 32 takes (to rounding); without it the
// per-rank statistics give other steps.
func TestSyncBNMatchesOneRank(t *testing.T) {
	cfg := Defaults()
	cfg.Model, cfg.Limit, cfg.TestLimit, cfg.Progress, cfg.DataDir = "resnet8", 256, 64, 0, dataDir
	cfg.Steps, cfg.Threads = 4, 1
	one := cfg
	one.Batch = 32
	ref, err := Run(one, mpi.NewSingle(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	maxDiff := func(sync bool) float64 {
		two := cfg
		two.Batch, two.SyncBN = 16, sync
		res, err := runRanks(t, two, 2)
		if err != nil {
			t.Fatal(err)
		}
		d := 0.0
		for i := range res.Params {
			d = math.Max(d, math.Abs(float64(res.Params[i]-ref.Params[i])))
		}
		return d
	}
	synced, local := maxDiff(true), maxDiff(false)
	t.Logf("max |param diff| after 4 steps vs 1 rank x 32: sync_bn %.2g, per-rank statistics %.2g", synced, local)
	if synced > 1e-4 {
		t.Errorf("sync_bn: parameters differ from 1 rank x 32 by %g", synced)
	}
	if local < 10*synced {
		t.Errorf("per-rank statistics differ by only %g (sync %g): the test cannot tell them apart", local, synced)
	}
}

// A batch whose activations cannot fit is refused before the model
// allocates them: one line, a usage error (exit 2), not a Go out-of-memory
// crash.
func TestModelMemoryRefused(t *testing.T) {
	cfg, _, err := Parse(strings.Fields("-model resnet20 -dataset synthetic -image-shape 32x32x3 -limit 60000 -batch 60000 -progress 0"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(cfg, mpi.NewSingle(), io.Discard)
	if !errors.As(err, new(cli.UsageError)) || !strings.Contains(err.Error(), "model resnet20 with batches of 60000 samples needs") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("got %v, want one line refusing the batch", err)
	}
}

// TestGroupsNoDecay: weight decay leaves out biases and batch norm's scale
// and shift (He et al. 2019's "no bias decay"), and nothing else.
func TestGroupsNoDecay(t *testing.T) {
	d, err := model.LoadDesc("resnet8")
	if err != nil {
		t.Fatal(err)
	}
	net, err := model.Build(d, model.Shape{H: 28, W: 28, C: 1}, 10, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	decayed := 0
	for _, g := range Groups(net) {
		exempt := strings.HasSuffix(g.Name, ".bias") || strings.Contains(g.Name, "bn") && strings.HasSuffix(g.Name, ".weight")
		if g.NoDecay != exempt {
			t.Errorf("%s: NoDecay %v, want %v", g.Name, g.NoDecay, exempt)
		}
		if !g.NoDecay {
			decayed++
		}
	}
	if decayed != 10 { // 7 3x3 convolutions, 2 projections, the linear layer
		t.Errorf("%d tensors decayed, want 10", decayed)
	}
}
