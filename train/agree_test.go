package train

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"hpctrain/mpi"
)

// agree: the rank that failed returns its own error; every other rank an
// error naming the stage and the failed ranks.
func TestAgreeNamesFailedRank(t *testing.T) {
	ranks := mpi.NewFake(4, 0)
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for r, c := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var own error
			if r == 1 || r == 3 {
				own = errors.New("disk full")
			}
			errs[r] = agree(c, "loading data", own)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		switch {
		case r == 1 || r == 3:
			if err == nil || err.Error() != "disk full" {
				t.Errorf("rank %d: %v, want its own error", r, err)
			}
		case err == nil || !strings.Contains(err.Error(), "loading data failed on rank 1, 3"):
			t.Errorf("rank %d: %v, want the stage and ranks 1, 3 named", r, err)
		}
	}
	// Nobody failed: nobody errs.
	for r, c := range mpi.NewFake(1, 0) {
		if err := agree(c, "x", nil); err != nil {
			t.Errorf("rank %d: %v with no failure", r, err)
		}
	}
}

// A stage that fails on one rank only, with every rank's configuration the
// same: only rank 0 opens the metrics file, so an unwritable path fails
// there, and the other ranks stop at the same stage naming rank 0 instead
// of waiting in the parameter broadcast.
func TestStartupStageFailureNamesRank(t *testing.T) {
	cfg := Defaults()
	cfg.Model, cfg.Limit, cfg.TestLimit, cfg.Progress, cfg.DataDir = "mlp", 256, 100, 0, dataDir
	cfg.Metrics = filepath.Join(t.TempDir(), "no", "such", "dir", "m.jsonl")
	errs := runEvery(cfg, 3)
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "no such file or directory") {
		t.Errorf("rank 0: %v, want the metrics file's own error", errs[0])
	}
	for r := 1; r < 3; r++ {
		if errs[r] == nil || !strings.Contains(errs[r].Error(), "opening the metrics file failed on rank 0") {
			t.Errorf("rank %d: %v, want the stage naming rank 0", r, errs[r])
		}
	}
}

// Periodic checkpoints by time run on rank 0's clock and are agreed at the
// step boundary: when every rank asked its own clock, the ranks that found
// a checkpoint due went into its collectives while the others went on to
// the next step, and the job deadlocked.
func TestTimedCheckpointsAgreed(t *testing.T) {
	cfg := Defaults()
	cfg.Model, cfg.Limit, cfg.TestLimit, cfg.Progress, cfg.DataDir, cfg.Batch = "mlp", 640, 64, 0, dataDir, 16
	// A period of a few steps: rank 0 finds one due now and then.
	cfg.Steps, cfg.Threads = 40, 1
	cfg.CheckpointDir, cfg.CheckpointEvery = t.TempDir(), "20ms"
	done := make(chan error, 1)
	go func() {
		_, err := runRanks(t, cfg, 2)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("2 ranks with checkpoint_every = \"20ms\" still running after 2 minutes")
	}
	ents, _ := os.ReadDir(cfg.CheckpointDir)
	if len(ents) < 2 {
		t.Errorf("%d checkpoint files, want periodic ones besides the final", len(ents))
	}
}
