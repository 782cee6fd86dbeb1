package mpi

import (
	"sync/atomic"
	"testing"
	"time"
)

// testQueue is a queue served the way World.loop serves it, by a goroutine
// standing in for the MPI thread, and whose waiters may run their own
// requests. consumer counts the requests that goroutine ran.
type testQueue struct {
	*queue
	consumer atomic.Int64
	stopped  chan struct{}
}

func newTestQueue(t *testing.T) *testQueue {
	tq := &testQueue{queue: newQueue(), stopped: make(chan struct{})}
	tq.run = func(q *request) { q.start = mono(); q.end = mono() }
	go func() {
		defer close(tq.stopped)
		for {
			q := tq.pop()
			tq.run(q)
			tq.consumer.Add(1)
			tq.served()
			last := q.op == opFinalize
			q.complete()
			if last {
				return
			}
		}
	}()
	t.Cleanup(func() {
		var q request
		q.reset(args{op: opFinalize})
		tq.push(&q, true) // finalize is never run by its waiter
		q.wait()
		<-tq.stopped
	})
	return tq
}

// asleep waits until the consumer sleeps.
func (tq *testQueue) asleep(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !tq.sleeping.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the consumer never went to sleep")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// done waits until q is complete, failing t after a few seconds.
func done(t *testing.T, q *request, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for q.state.Load() != reqDone {
		if time.Now().After(deadline) {
			t.Fatalf("%s never completed", what)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// Back-to-back non-blocking calls, each waited for at once (a loop of
// Iallreduce and Wait, the collective benchmark): the caller runs them
// itself and the MPI thread is not woken for each.
func TestHandoffBackToBack(t *testing.T) {
	tq := newTestQueue(t)
	tq.asleep(t)
	const calls = 400
	var q request
	for i := 0; i < calls; i++ {
		q.reset(args{op: opAllreduce32})
		tq.push(&q, false)
		q.wait()
	}
	// The first call wakes the consumer (no call before it); a loaded
	// machine may stretch a few gaps past backToBack.
	if w := tq.wakes.Load(); w > calls/4 {
		t.Errorf("%d wake-ups for %d back-to-back calls", w, calls)
	}
	if c := tq.consumer.Load(); c > calls/4 {
		t.Errorf("the MPI thread ran %d of %d back-to-back calls", c, calls)
	}
}

// A call queued well after the last one and not waited for (a gradient
// bucket at the start of backward) wakes the MPI thread, which runs it
// while the caller goes on.
func TestHandoffQueuedAndLeftRuns(t *testing.T) {
	tq := newTestQueue(t)
	tq.asleep(t)
	var q request
	q.reset(args{op: opAllreduce32})
	tq.push(&q, true)
	q.wait() // run by this goroutine
	time.Sleep(2 * backToBack)
	tq.asleep(t)
	q.reset(args{op: opAllreduce32})
	tq.push(&q, false)
	done(t, &q, "a bucket queued after a pause")
	if tq.consumer.Load() != 1 {
		t.Errorf("the MPI thread ran %d calls, want the one left to it", tq.consumer.Load())
	}
	q.wait()
}

// A call queued back to back but then not waited for still completes: the
// next call queued behind it wakes the MPI thread, and so does its Wait.
func TestHandoffBackToBackMisjudged(t *testing.T) {
	tq := newTestQueue(t)
	tq.asleep(t)
	var a, b request
	a.reset(args{op: opAllreduce32})
	tq.push(&a, true)
	a.wait()
	a.reset(args{op: opAllreduce32})
	tq.push(&a, false) // back to back: the MPI thread is left asleep
	b.reset(args{op: opAllreduce32})
	tq.push(&b, false) // not alone: wakes it
	done(t, &a, "a call queued back to back, then left")
	done(t, &b, "the call behind it")
	a.wait()
	b.wait()

	// Left without a second call: Wait runs it, however late.
	a.reset(args{op: opAllreduce32})
	tq.push(&a, true)
	a.wait()
	a.reset(args{op: opAllreduce32})
	tq.push(&a, false)
	time.Sleep(time.Millisecond)
	a.wait()
	if a.state.Load() != reqDone {
		t.Error("Wait returned before the call was done")
	}
}
