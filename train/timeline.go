package train

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// timeline records spans of the training step as a Chrome trace (the JSON
// Array/Object format read by chrome://tracing and Perfetto): one file per
// rank, with forward, backward, each bucket's all-reduce (as run on the MPI
// thread), the wait for communication and the optimizer step. Each span's
// "step" is the step's number from 1, as in the loss log and the progress
// lines.
type timeline struct {
	rank    int
	path    string // -timeline, before the rank is inserted
	t0      time.Time
	events  []traceEvent
	first   int // record step indexes [first, first+n), from 0
	n       int
	written bool
	err     error // from writing the file
}

type traceEvent struct {
	Name string         `json:"name"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`  // microseconds
	Dur  float64        `json:"dur"` // microseconds
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// Thread lanes in the trace.
const (
	laneCompute = 1
	laneMPI     = 2
)

// newTimeline records up to n of the steps this process trains, step
// indexes [start, total): from its 10th step on, past the first steps'
// warm-up, or from the middle where it trains fewer than 20 (a resumed
// run records its own steps; counted from step 0 its window had passed).
func newTimeline(rank int, path string, start, total, n int) *timeline {
	left := max(total-start, 0)
	first := start + min(9, left/2)
	n = max(min(n, total-first), 0)
	return &timeline{rank: rank, path: path, t0: time.Now(), first: first, n: n, events: make([]traceEvent, 0, 16*n)}
}

// on says whether the timeline records step (an index from 0); asked once
// per step, before its spans. The first step past the recorded ones writes
// the file, so that a run stopped later (a signal, a NaN loss, a failure)
// leaves the steps it recorded rather than an empty file.
func (tl *timeline) on(step int) bool {
	if tl == nil {
		return false
	}
	if step >= tl.first+tl.n {
		tl.write()
	}
	return step >= tl.first && step < tl.first+tl.n
}

func (tl *timeline) span(step int, name string, lane int, start, end time.Time) {
	if !tl.on(step) {
		return
	}
	tl.events = append(tl.events, traceEvent{
		Name: name, Ph: "X", Pid: tl.rank, Tid: lane,
		Ts:   float64(start.Sub(tl.t0).Nanoseconds()) / 1e3,
		Dur:  float64(end.Sub(start).Nanoseconds()) / 1e3,
		Args: map[string]any{"step": step + 1},
	})
}

// rankPath inserts the rank before the extension: t.json -> t.rank1.json.
func rankPath(path string, rank int) string {
	ext := filepath.Ext(path)
	return fmt.Sprintf("%s.rank%d%s", strings.TrimSuffix(path, ext), rank, ext)
}

// write writes the file, once: a later call returns the first one's error.
func (tl *timeline) write() error {
	if tl == nil {
		return nil
	}
	if !tl.written {
		tl.written = true
		tl.err = tl.writeFile()
	}
	return tl.err
}

func (tl *timeline) writeFile() error {
	meta := []traceEvent{
		{Name: "process_name", Ph: "M", Pid: tl.rank, Args: map[string]any{"name": fmt.Sprintf("rank %d", tl.rank)}},
		{Name: "thread_name", Ph: "M", Pid: tl.rank, Tid: laneCompute, Args: map[string]any{"name": "compute"}},
		{Name: "thread_name", Ph: "M", Pid: tl.rank, Tid: laneMPI, Args: map[string]any{"name": "MPI thread"}},
	}
	b, err := json.Marshal(map[string]any{"traceEvents": append(meta, tl.events...), "displayTimeUnit": "ms"})
	if err != nil {
		return err
	}
	p := rankPath(tl.path, tl.rank)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return fmt.Errorf("writing timeline: %w", err)
	}
	return nil
}
