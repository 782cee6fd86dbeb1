package train

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestProgressRate: the progress line's samples/s is of the steps, as the
// epoch's line has it: the evaluation between two epochs (here twice the
// first epoch's steps, 400 ms at least, against 20 ms a step) is left out;
// it counted, so that the rate fell to half the steps' after one epoch
// (every line's rate was samples since start-up over the time since). The
// time left still counts it.
//
// The steps are sleeps, which a machine busy with other tests stretches
// (35 ms instead of 20 on the 2-core CI machine): the rate is compared
// with the steps as this test timed them, not with 20 ms, and the pause
// is made long against them, so that a rate that counts it stays far off.
func TestProgressRate(t *testing.T) {
	var out strings.Builder
	const step, global = 20 * time.Millisecond, 64
	p := newProgress(&out, true, time.Nanosecond, 20, global)
	done := 0
	var steps time.Duration // the steps after each epoch's first, timed here
	var epoch1 time.Duration
	for epoch := 1; epoch <= 2; epoch++ {
		if epoch == 2 {
			time.Sleep(max(400*time.Millisecond, 2*epoch1)) // evaluating epoch 1
		}
		var first time.Time
		for s := 1; s <= 10; s++ {
			time.Sleep(step)
			done++
			now := time.Now()
			p.update(epoch, s, 10, done, 0.5)
			if s == 1 {
				first = now
			}
			if s == 10 {
				steps += now.Sub(first)
				if epoch == 1 {
					epoch1 = now.Sub(first)
				}
			}
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
	// 18 steps timed (each epoch's first follows start-up or the pause).
	// A rate that counted the pause would be under 2/3 of this one.
	if want := global / (steps / 18).Seconds(); rate > want*1.1 || rate < want*0.9 {
		t.Errorf("last line %q: %.0f samples/s, want %.0f (%v a step, timed here)", lines[19], rate, want, steps/18)
	}
	if eta != "0s" {
		t.Errorf("last line %q: ETA %s, want 0s", lines[19], eta)
	}
	// After epoch 1, before the pause: 10 steps to go at epoch 1's pace.
	var mid string
	fmt.Sscanf(lines[9], "epoch %d step %d/%d loss %f %f samples/s ETA %s", &e, &s, &n, &loss, &rate, &mid)
	if d, err := time.ParseDuration(mid); err != nil || d > 10*epoch1/9*12/10+time.Second/2 {
		t.Errorf("line 10 %q: ETA %s, want about 10 steps of %v", lines[9], mid, epoch1/9)
	}
}
