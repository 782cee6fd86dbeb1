package mpi

import (
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The MPI thread and its callers hand requests and completions to each
// other the way MPI libraries wait for the network: spin on a flag for a
// short while (yielding the core each round, so an oversubscribed node
// still progresses), then sleep. A futex wake-up of a sleeping thread costs
// tens of microseconds on a busy node, as much as a 64 KiB all-reduce
// itself; the spin keeps back-to-back calls off that path.

// A caller that queues a request within backToBack of the end of the last
// call it waited for is taken to be calling back to back (a loop of
// blocking calls, or of Iallreduce and Wait) and to wait for this one at
// once as well: the request is left to it, and the MPI thread is not woken
// for it. Training queues a step's first gradient bucket milliseconds after
// the last call of the step before ended, and so wakes the MPI thread,
// which runs the bucket while backward goes on.
const backToBack = 50 * time.Microsecond

// Spin budgets. The MPI thread spins for the next request after each call
// (backward produces gradient buckets a few milliseconds apart, so it sleeps
// in between); a caller spins for its own call's completion.
const (
	serveSpin = 20 * time.Microsecond
	waitSpin  = 500 * time.Microsecond
)

// args is what one MPI call needs: plain values, copied freely.
type args struct {
	op    opKind
	f32   []float32
	f64   []float64
	b, r  []byte
	root  int
	iters int // opRawTimed: calls to time; opNodeBuffer: floats per rank

	reg *region  // opRegionSum: the node region that holds f32
	lo  int      // opRegionSum: where f32 starts in this rank's slot of reg
	out **region // opNodeBuffer: where the new region goes
}

// request is one MPI call for the MPI thread. Requests are served in the
// order they are queued, so ranks that queue the same calls in the same order
// run matching collectives. Requests are reused: a call allocates nothing.
type request struct {
	args
	err        error
	start, end int64 // when the call began and finished: mono()

	state atomic.Int32  // reqPending, reqDone or reqSleeping
	done  chan struct{} // capacity 1: the wake-up of a sleeping waiter
	owner *queue        // set when the waiter may run the request itself
}

const (
	reqPending int32 = iota
	reqDone
	reqSleeping // the waiter gave up spinning and sleeps on done
)

// reset prepares q for a new call of a.
func (q *request) reset(a args) {
	if q.done == nil {
		q.done = make(chan struct{}, 1)
	}
	q.args, q.err, q.start, q.end, q.owner = a, nil, 0, 0, nil
	q.state.Store(reqPending)
}

// complete marks q done, waking its waiter if it sleeps. The waiter owns q
// from here on: complete must be the last touch.
func (q *request) complete() {
	if q.state.Swap(reqDone) == reqSleeping {
		q.done <- struct{}{}
	}
}

// wait returns once q is complete. A request still waiting at the head of
// its queue while nothing else is being served is run by the waiter itself
// (MPI_THREAD_SERIALIZED allows any one thread at a time): no hand-off at
// all when the MPI thread has nothing to overlap.
func (q *request) wait() {
	qu := q.owner
	if qu == nil {
		q.waitDone()
		return
	}
	if !qu.steal(q) {
		q.waitDone()
	}
	qu.waited.Store(q.end)
}

// waitDone spins, then sleeps, until q is complete.
func (q *request) waitDone() {
	if spinUntil(waitSpin, func() bool { return q.state.Load() == reqDone }) {
		return
	}
	if q.owner != nil {
		// Not taken by now: make sure the MPI thread is up for it (push
		// may have left q to this waiter).
		q.owner.kick()
	}
	if q.state.CompareAndSwap(reqPending, reqSleeping) {
		<-q.done
	}
}

// queue is the FIFO of requests for the MPI thread: any number of
// producers, one consumer, and waiters that may take their own request.
type queue struct {
	mu       sync.Mutex
	items    []*request // items[head:] are waiting
	head     int
	n        atomic.Int32 // len(items) - head, for polling without the lock
	busy     atomic.Bool  // a request is being served; written under mu
	sleeping atomic.Bool  // the consumer is (about to be) asleep on wake
	wake     chan struct{}

	// run serves one request on the calling thread; nil while waiters may
	// not (MPI below MPI_THREAD_SERIALIZED).
	run func(*request)

	// left: the head request is left to its waiter, and the MPI thread
	// does not take it unless woken (see push).
	left   atomic.Bool
	waited atomic.Int64 // when the call last waited for ended: mono()
	wakes  atomic.Int64 // wake-ups sent to the MPI thread, for tests
}

// epoch anchors mono.
var epoch = time.Now()

// mono is the monotonic clock in nanoseconds since epoch: half the cost of
// time.Now, which reads the wall clock too.
func mono() int64 { return int64(time.Since(epoch)) }

// monoTime converts a mono reading back; 0 (never set) is the zero Time.
func monoTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return epoch.Add(time.Duration(ns))
}

func newQueue() *queue { return &queue{items: make([]*request, 0, 64), wake: make(chan struct{}, 1)} }

// push queues q. waiting says that the caller waits for q right away.
//
// q is left to its waiter when the waiter may run it, q is alone in an idle
// queue, and the caller waits at once or calls back to back (backToBack):
// the MPI thread is not woken for q and, should it be spinning, does not
// take it. A wake-up would only cost a thread switch on a busy node and
// race the caller for q. If the caller does not wait after all, the next
// push (which ends the leaving) or the Wait wakes the MPI thread.
func (qu *queue) push(q *request, waiting bool) {
	if qu.run != nil && q.op != opFinalize {
		q.owner = qu
	}
	qu.mu.Lock()
	alone := len(qu.items) == qu.head && !qu.busy.Load()
	leave := alone && q.owner != nil && (waiting || mono()-qu.waited.Load() < int64(backToBack))
	qu.items = append(qu.items, q)
	qu.left.Store(leave)
	qu.n.Add(1)
	qu.mu.Unlock()
	if leave {
		return
	}
	// Sequentially consistent atomics: either the consumer sees n > 0
	// after announcing sleep, or this sees sleeping and wakes it.
	qu.kick()
}

// kick wakes the MPI thread if it sleeps.
func (qu *queue) kick() {
	if qu.sleeping.Load() {
		qu.wakes.Add(1)
		select {
		case qu.wake <- struct{}{}:
		default:
		}
	}
}

// takeLocked removes the head request and marks the queue busy; mu held.
func (qu *queue) takeLocked() *request {
	q := qu.items[qu.head]
	qu.items[qu.head] = nil
	qu.head++
	if qu.head == len(qu.items) {
		qu.items, qu.head = qu.items[:0], 0
	}
	qu.n.Add(-1)
	qu.busy.Store(true)
	qu.left.Store(false)
	return q
}

// ready reports whether a request could be taken now.
func (qu *queue) ready() bool { return qu.n.Load() > 0 && !qu.busy.Load() }

// open reports whether the MPI thread may take a request without being
// woken for it: one is ready and not left to its waiter.
func (qu *queue) open() bool { return qu.ready() && !qu.left.Load() }

func (qu *queue) tryPop() *request {
	if !qu.ready() {
		return nil
	}
	qu.mu.Lock()
	defer qu.mu.Unlock()
	if qu.busy.Load() || qu.head == len(qu.items) {
		return nil
	}
	return qu.takeLocked()
}

// served ends the busy period of the request just served.
func (qu *queue) served() {
	qu.mu.Lock()
	qu.busy.Store(false)
	more := qu.head < len(qu.items)
	qu.mu.Unlock()
	if more {
		qu.kick()
	}
}

// steal runs q on the calling thread if it is next and nothing is being
// served, and reports whether it did.
func (qu *queue) steal(q *request) bool {
	if !qu.ready() {
		return false
	}
	qu.mu.Lock()
	if qu.busy.Load() || qu.head == len(qu.items) || qu.items[qu.head] != q {
		qu.mu.Unlock()
		return false
	}
	qu.takeLocked()
	qu.mu.Unlock()
	qu.run(q)
	qu.served()
	q.complete()
	return true
}

// pop returns the next request, spinning and then sleeping until one comes.
// The caller serves it, then calls served and completes it. A request left
// to its waiter is taken only after a wake-up.
func (qu *queue) pop() *request {
	for {
		if q := qu.tryPop(); q != nil {
			return q
		}
		if spinUntil(serveSpin, qu.open) {
			continue
		}
		qu.sleeping.Store(true)
		if qu.open() {
			if q := qu.tryPop(); q != nil {
				qu.sleeping.Store(false)
				return q
			}
		}
		<-qu.wake // a stale token only costs one more round
		qu.sleeping.Store(false)
	}
}

// spinUntil polls ready for up to budget, yielding the core between polls,
// and reports whether it became true.
func spinUntil(budget time.Duration, ready func() bool) bool {
	var deadline time.Time
	for i := 0; ; i++ {
		if ready() {
			return true
		}
		if i&15 == 15 {
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(budget)
			} else if now.After(deadline) {
				return false
			}
			syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		}
	}
}
