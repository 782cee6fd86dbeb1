package mpi

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Fake is one rank of an in-process job whose ranks are goroutines. It exists
// for unit tests of code written against Comm; it sums in rank order, so its
// results are deterministic.
type Fake struct {
	rank   int
	group  *fakeGroup
	closed bool
}

type fakeGroup struct {
	size, perNode int
	mu            sync.Mutex
	cond          *sync.Cond
	arrived, gen  int
	slots         []any
	abort         func(code int)
	dead          bool // Kill was called: collectives fail at once
}

// ErrKilled is returned by a Fake's collectives once any rank called Kill.
var ErrKilled = errors.New("mpi: fake job killed (a rank failed)")

// NewFake returns the n ranks of an in-process job. perNode ranks share each
// simulated node (0 means all on one node): rank r has local rank r%perNode.
func NewFake(n, perNode int) []*Fake {
	if n < 1 {
		panic("mpi: fake job needs at least one rank")
	}
	if perNode <= 0 || perNode > n {
		perNode = n
	}
	g := &fakeGroup{size: n, perNode: perNode, slots: make([]any, n), abort: os.Exit}
	g.cond = sync.NewCond(&g.mu)
	ranks := make([]*Fake, n)
	for r := range ranks {
		ranks[r] = &Fake{rank: r, group: g}
	}
	return ranks
}

// barrier blocks until all ranks of the group have arrived, or returns
// false at once when the job was killed.
func (g *fakeGroup) barrier() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dead {
		return false
	}
	gen := g.gen
	g.arrived++
	if g.arrived == g.size {
		g.arrived = 0
		g.gen++
		g.cond.Broadcast()
		return true
	}
	for gen == g.gen && !g.dead {
		g.cond.Wait()
	}
	return !g.dead
}

// Kill ends the fake job as a dead rank would: every collective in
// progress on any rank, and every later one, returns ErrKilled at once.
// A test whose rank goroutine fails calls it so the others do not wait for
// that rank forever.
func (f *Fake) Kill() {
	g := f.group
	g.mu.Lock()
	g.dead = true
	g.cond.Broadcast()
	g.mu.Unlock()
}

func (f *Fake) Rank() int      { return f.rank }
func (f *Fake) Size() int      { return f.group.size }
func (f *Fake) LocalRank() int { return f.rank % f.group.perNode }
func (f *Fake) LocalSize() int {
	node := f.rank / f.group.perNode
	n := f.group.size - node*f.group.perNode
	return min(n, f.group.perNode)
}
func (f *Fake) Host() string { return fmt.Sprintf("fake%d", f.rank/f.group.perNode) }

// exchange publishes v, waits for every rank, runs read (which may look at
// every rank's slot), waits again so no slot changes while it is read.
func (f *Fake) exchange(v any, read func(slots []any)) error {
	if f.closed {
		return ErrClosed
	}
	g := f.group
	g.slots[f.rank] = v
	if !g.barrier() {
		return ErrKilled
	}
	read(g.slots)
	if !g.barrier() {
		return ErrKilled
	}
	return nil
}

func (f *Fake) AllreduceSum(buf []float32) error {
	sum := make([]float32, len(buf))
	err := f.exchange(buf, func(s []any) {
		for _, v := range s {
			b := v.([]float32)
			if len(b) != len(buf) {
				panic("mpi: allreduce buffers of different lengths")
			}
			for i, x := range b {
				sum[i] += x
			}
		}
	})
	copy(buf, sum)
	return err
}

// IallreduceSum runs the sum at once: the fake has no background thread,
// so every rank must start its calls in the same order, as with MPI.
func (f *Fake) IallreduceSum(buf []float32, r *Request) {
	r.begin(args{op: opAllreduce32, f32: buf})
	start := time.Now()
	r.finish(start, f.AllreduceSum(buf))
}

// NodeBuffer shares nothing: a Fake's ranks sum through exchange.
func (f *Fake) NodeBuffer(n int) ([]float32, error) { return nil, f.exchange(nil, func([]any) {}) }

func (f *Fake) AllreduceSum64(buf []float64) error {
	sum := make([]float64, len(buf))
	err := f.exchange(buf, func(s []any) {
		for _, v := range s {
			for i, x := range v.([]float64) {
				sum[i] += x
			}
		}
	})
	copy(buf, sum)
	return err
}

func (f *Fake) Bcast(buf []float32, root int) error {
	tmp := make([]float32, len(buf))
	err := f.exchange(buf, func(s []any) { copy(tmp, s[root].([]float32)) })
	copy(buf, tmp)
	return err
}

func (f *Fake) BcastBytes(buf []byte, root int) error {
	tmp := make([]byte, len(buf))
	err := f.exchange(buf, func(s []any) { copy(tmp, s[root].([]byte)) })
	copy(buf, tmp)
	return err
}

func (f *Fake) Allgather(send, recv []byte) error {
	if len(recv) != len(send)*f.group.size {
		panic("mpi: allgather recv length is not size*len(send)")
	}
	return f.exchange(send, func(s []any) {
		for r, v := range s {
			copy(recv[r*len(send):], v.([]byte))
		}
	})
}

func (f *Fake) Barrier() error { return f.exchange(nil, func([]any) {}) }
func (f *Fake) Abort(code int) { f.group.abort(code) }
func (f *Fake) Close() error   { f.closed = true; return nil }
