package mpi

import (
	"os"
	"time"
)

// Single is the communicator of a job of one process. Collectives return at
// once: the sum over one rank is the rank's own buffer.
type Single struct {
	host   string
	closed bool
}

// NewSingle returns the communicator of a one-process job.
func NewSingle() *Single { return &Single{host: hostname()} }

func (s *Single) Rank() int      { return 0 }
func (s *Single) Size() int      { return 1 }
func (s *Single) LocalRank() int { return 0 }
func (s *Single) LocalSize() int { return 1 }
func (s *Single) Host() string   { return s.host }

func (s *Single) check() error {
	if s.closed {
		return ErrClosed
	}
	return nil
}

func (s *Single) AllreduceSum(buf []float32) error { return s.check() }
func (s *Single) IallreduceSum(buf []float32, r *Request) {
	r.begin(args{op: opAllreduce32, f32: buf})
	r.finish(time.Now(), s.check())
}
func (s *Single) NodeBuffer(n int) ([]float32, error) { return nil, s.check() }
func (s *Single) AllreduceSum64(buf []float64) error  { return s.check() }
func (s *Single) Bcast(buf []float32, root int) error {
	if root != 0 {
		panic("mpi: bcast root out of range")
	}
	return s.check()
}
func (s *Single) BcastBytes(buf []byte, root int) error {
	if root != 0 {
		panic("mpi: bcast root out of range")
	}
	return s.check()
}
func (s *Single) Allgather(send, recv []byte) error {
	if len(recv) != len(send) {
		panic("mpi: allgather recv length is not size*len(send)")
	}
	copy(recv, send)
	return s.check()
}
func (s *Single) Barrier() error { return s.check() }
func (s *Single) Abort(code int) { os.Exit(code) }
func (s *Single) Close() error   { s.closed = true; return nil }
