// Package mpi is hpctrain's communicator: it tells a process its rank, the
// size of the job and its place on the node, and it sums float32 buffers
// across every rank.
//
// Three implementations satisfy Comm and run the same test suite:
//
//   - World: real MPI (Open MPI, MPICH) through github.com/sbromberger/gompi
//     plus a small cgo shim for what gompi lacks (MPI_IN_PLACE,
//     MPI_Comm_split_type, MPI_Allgather), and memory the ranks of a node
//     share (NodeBuffer, MPI_Win_allocate_shared), whose parts it sums in
//     place through that memory and across nodes with MPI (shm.go).
//   - Single: a job of one process, used when no launcher started us.
//   - Fake: n ranks as goroutines in one process, for unit tests of code that
//     is written against Comm.
//
// # Invariants
//
// All MPI calls of a World are made from one goroutine locked to one OS
// thread (the thread that called MPI_Init), because Go moves goroutines
// between threads and MPI libraries initialised below MPI_THREAD_MULTIPLE
// require calls from the initialising thread. Callers may use a World from any
// goroutine; calls are serialised.
//
// Collectives must be called by every rank in the same order, as in MPI.
//
// Non-goals: this package knows nothing of models, tensors or training; it
// moves and sums numbers.
package mpi
