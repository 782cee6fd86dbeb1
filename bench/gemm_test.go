package bench

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// bench gemm with many -reps runs for minutes: it says on stderr, every
// gemmProgressEvery (here at every repetition), which shape and repetition
// it is at and the time left for the shape; its table on stdout is the
// table alone.
func TestGemmProgress(t *testing.T) {
	defer func(d time.Duration) { gemmProgressEvery = d }(gemmProgressEvery)
	gemmProgressEvery = 0
	var out, progress bytes.Buffer
	if err := Gemm([]string{"-reps", "2"}, &out, &progress); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(progress.String(), "\n"), "\n")
	if len(lines) != 2*len(gemmShapes) {
		t.Fatalf("%d progress lines, want one per repetition (%d):\n%s", len(lines), 2*len(gemmShapes), progress.String())
	}
	for i, l := range lines {
		want := fmt.Sprintf("hpctrain: bench gemm: shape %d/%d %s: rep %d/2, ETA ", i/2+1, len(gemmShapes), strings.Join(strings.Fields(gemmShapes[i/2].name), " "), i%2+1)
		if !strings.HasPrefix(l, want) || !strings.HasSuffix(l, " for this shape") {
			t.Errorf("progress line %d: %q, want %q...", i, l, want)
		}
	}
	if strings.Contains(out.String(), "rep ") || !strings.HasPrefix(out.String(), "gemm ") {
		t.Errorf("stdout is not the table alone:\n%s", out.String())
	}
}
