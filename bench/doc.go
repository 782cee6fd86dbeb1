// Package bench measures what hpctrain's speed rests on, each as a
// subcommand of `hpctrain bench`: SGEMM (gemm), full training steps with a
// per-layer breakdown (step), the gradient all-reduce in nccl-tests' format
// (allreduce), the optimizers on the course's quadratic (optim), and the
// single-node affinity grid of instances x threads (affinity).
//
// Every benchmark prints a human table and, with -json FILE, writes the same
// numbers as JSON; timings are medians or means after an untimed warm-up,
// and comparisons (pinned vs unpinned, wrapper vs raw MPI) are measured side
// by side in one run, because the machines are shared and noisy.
//
// Non-goals: pass/fail thresholds. Targets are checked by reading the
// reports, not by timed tests.
package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"hpctrain/internal/atomicfile"
)

// writeJSON writes v to path, indented (nothing when path is empty).
func writeJSON(path string, v any) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}

// median of durations (sorts d).
func median(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

// peakRSS is the process's peak resident memory in bytes (VmHWM).
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	var kb int64
	for _, line := range strings.Split(string(b), "\n") {
		if n, _ := fmt.Sscanf(line, "VmHWM: %d kB", &kb); n == 1 {
			return kb << 10
		}
	}
	return 0
}
