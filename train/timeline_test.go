package train

import (
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"hpctrain/mpi"
)

// readTimeline reads rank 0's trace of -timeline path, checks every
// event's fields (Chrome's trace event format: name, ph, ts, dur, pid,
// tid; "X" spans with a step in args) and that each step's compute spans
// follow each other without gap or overlap, and returns the steps it
// holds, in order.
func readTimeline(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(rankPath(path, 0))
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Ph   string         `json:"ph"`
			Ts   *float64       `json:"ts"`
			Dur  *float64       `json:"dur"`
			Pid  *int           `json:"pid"`
			Tid  *int           `json:"tid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("%s: %v (%d bytes)", rankPath(path, 0), err, len(b))
	}
	var steps []int
	end := map[int]float64{} // the end of each step's last compute span so far
	for _, e := range tr.TraceEvents {
		if e.Name == "" || e.Ts == nil || e.Dur == nil || e.Pid == nil || e.Tid == nil || *e.Pid != 0 {
			t.Fatalf("event %+v: want name, ts, dur, pid 0 and tid", e)
		}
		if e.Ph == "M" {
			continue
		}
		step, ok := e.Args["step"].(float64)
		if e.Ph != "X" || !ok || *e.Dur < 0 || (*e.Tid != laneCompute && *e.Tid != laneMPI) {
			t.Fatalf("event %+v: want a span (ph X) of a step, on lane 1 or 2", e)
		}
		s := int(step)
		if len(steps) == 0 || steps[len(steps)-1] != s {
			steps = append(steps, s)
		}
		if *e.Tid != laneCompute {
			continue
		}
		if last, ok := end[s]; ok && math.Abs(*e.Ts-last) > 0.01 {
			t.Errorf("step %d: %s starts at %.3f us, the span before it ends at %.3f", s, e.Name, *e.Ts, last)
		}
		end[s] = *e.Ts + *e.Dur
	}
	return steps
}

func stepRange(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// TestTimeline: -timeline records -timeline-steps steps from the 10th
// on, numbered from 1 as the loss log numbers them; a resumed run records
// its 10th step on, or the middle of what it has left (counted from step 0,
// the window had passed or was cut: resumed at step 25 it recorded 5), and
// a run stopped after the recorded steps (a NaN loss) leaves them (the file
// was written only at the end, so it was left empty, not JSON).
func TestTimeline(t *testing.T) {
	cfg := Defaults()
	cfg.Model, cfg.Limit, cfg.TestLimit, cfg.Progress, cfg.DataDir, cfg.Batch = "mlp", 640, 64, 0, dataDir, 32
	cfg.Epochs, cfg.TimelineSteps = 2, 5
	cfg.Timeline = filepath.Join(t.TempDir(), "t.json")
	if _, err := Run(cfg, mpi.NewSingle(), io.Discard); err != nil {
		t.Fatal(err)
	}
	if got := readTimeline(t, cfg.Timeline); !slices.Equal(got, stepRange(10, 14)) {
		t.Errorf("40 steps: timeline of steps %v, want 10 to 14", got)
	}

	dir := t.TempDir()
	first := cfg
	first.Steps, first.CheckpointDir, first.Timeline = 25, dir, ""
	if _, err := Run(first, mpi.NewSingle(), io.Discard); err != nil {
		t.Fatal(err)
	}
	second := cfg
	second.CheckpointDir, second.Resume, second.TimelineSteps = dir, "auto", 20
	if _, err := Run(second, mpi.NewSingle(), io.Discard); err != nil {
		t.Fatal(err)
	}
	// 15 steps left: from the middle of them.
	if got := readTimeline(t, cfg.Timeline); !slices.Equal(got, stepRange(33, 40)) {
		t.Errorf("resumed at step 25 of 40: timeline of steps %v, want 33 to 40", got)
	}

	t.Setenv(FaultEnv, "nan@0:30")
	if _, err := Run(cfg, mpi.NewSingle(), io.Discard); err == nil {
		t.Fatal("a NaN loss at step 30: no error")
	}
	if got := readTimeline(t, cfg.Timeline); !slices.Equal(got, stepRange(10, 14)) {
		t.Errorf("stopped at step 30: timeline of steps %v, want 10 to 14", got)
	}
}
