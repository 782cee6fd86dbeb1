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
// thread), the wait for communication and the optimizer step.
type timeline struct {
	rank   int
	t0     time.Time
	events []traceEvent
	first  int // record steps [first, first+n)
	n      int
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

func newTimeline(rank, first, n int) *timeline {
	return &timeline{rank: rank, t0: time.Now(), first: first, n: n, events: make([]traceEvent, 0, 16*n)}
}

func (tl *timeline) on(step int) bool {
	return tl != nil && step >= tl.first && step < tl.first+tl.n
}

func (tl *timeline) span(step int, name string, lane int, start, end time.Time) {
	if !tl.on(step) {
		return
	}
	tl.events = append(tl.events, traceEvent{
		Name: name, Ph: "X", Pid: tl.rank, Tid: lane,
		Ts:   float64(start.Sub(tl.t0).Nanoseconds()) / 1e3,
		Dur:  float64(end.Sub(start).Nanoseconds()) / 1e3,
		Args: map[string]any{"step": step},
	})
}

// rankPath inserts the rank before the extension: t.json -> t.rank1.json.
func rankPath(path string, rank int) string {
	ext := filepath.Ext(path)
	return fmt.Sprintf("%s.rank%d%s", strings.TrimSuffix(path, ext), rank, ext)
}

func (tl *timeline) write(path string) error {
	if tl == nil {
		return nil
	}
	meta := []traceEvent{
		{Name: "process_name", Ph: "M", Pid: tl.rank, Args: map[string]any{"name": fmt.Sprintf("rank %d", tl.rank)}},
		{Name: "thread_name", Ph: "M", Pid: tl.rank, Tid: laneCompute, Args: map[string]any{"name": "compute"}},
		{Name: "thread_name", Ph: "M", Pid: tl.rank, Tid: laneMPI, Args: map[string]any{"name": "MPI thread"}},
	}
	b, err := json.Marshal(map[string]any{"traceEvents": append(meta, tl.events...), "displayTimeUnit": "ms"})
	if err != nil {
		return err
	}
	p := rankPath(path, tl.rank)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return fmt.Errorf("writing timeline: %w", err)
	}
	return nil
}
