package train

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestProgressRate: the progress line's samples/s is of the steps, as the
// epoch's line has it: the evaluation between two epochs (here 400 ms,
// against 20 ms a step) is left out; it counted, so that the rate fell to
// half the steps' after one epoch (every line's rate was samples since
// start-up over the time since). The time left still counts it.
func TestProgressRate(t *testing.T) {
	var out strings.Builder
	const step, global = 20 * time.Millisecond, 64
	p := newProgress(&out, true, time.Nanosecond, 20, global)
	done := 0
	for epoch := 1; epoch <= 2; epoch++ {
		if epoch == 2 {
			time.Sleep(400 * time.Millisecond) // evaluating epoch 1
		}
		for s := 1; s <= 10; s++ {
			time.Sleep(step)
			done++
			p.update(epoch, s, 10, done, 0.5)
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 20 {
		t.Fatalf("%d lines, want one a step:\n%s", len(lines), out.String())
	}
	var rate float64
	var e, s, n int
	var loss float64
	var eta string
	if _, err := fmt.Sscanf(lines[19], "epoch %d step %d/%d loss %f %f samples/s ETA %s", &e, &s, &n, &loss, &rate, &eta); err != nil {
		t.Fatalf("%q: %v", lines[19], err)
	}
	// Sleeps only run long: at most the steps' rate, and well above half.
	if want := global / step.Seconds(); rate > want*1.05 || rate < want*0.75 {
		t.Errorf("last line %q: %.0f samples/s, want about %.0f", lines[19], rate, want)
	}
	if eta != "0s" {
		t.Errorf("last line %q: ETA %s, want 0s", lines[19], eta)
	}
	var mid string
	fmt.Sscanf(lines[9], "epoch %d step %d/%d loss %f %f samples/s ETA %s", &e, &s, &n, &loss, &rate, &mid)
	if d, err := time.ParseDuration(mid); err != nil || d > time.Second {
		t.Errorf("line 10 %q: ETA %s, want under a second", lines[9], mid)
	}
}
