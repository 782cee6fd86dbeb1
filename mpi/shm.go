package mpi

/*
#cgo pkg-config: ompi
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

// A node region: one slot of bytes per rank of the node, in one segment
// that every rank of the node maps (MPI_Win_allocate_shared), behind a
// page of barrier words. group > 0 cuts each node into groups of that many
// ranks (tests: several "nodes" on one machine).
typedef struct {
	MPI_Win win;
	MPI_Comm node, cross; // cross: the ranks of the same node rank on every node, or MPI_COMM_NULL
	char *base;           // the barrier page; slot r starts at base + page + r*stride
	long stride;
	int rank, size;
} hpc_region;

enum { HPC_PAGE = 4096 };

// hpc_region_new makes r collectively over MPI_COMM_WORLD. It returns an
// MPI error code, or -1 (r unset, nothing allocated) when every node does
// not have the same number of ranks, at least two, or when a node could not
// allocate: the decision is the same on every rank.
static int hpc_region_new(long bytes, int group, hpc_region *r) {
	int wr, ws, rc;
	MPI_Comm_rank(MPI_COMM_WORLD, &wr);
	MPI_Comm_size(MPI_COMM_WORLD, &ws);
	MPI_Comm node;
	rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, wr, MPI_INFO_NULL, &node);
	if (rc != MPI_SUCCESS) return rc;
	if (group > 0) {
		int nr;
		MPI_Comm_rank(node, &nr);
		MPI_Comm sub;
		rc = MPI_Comm_split(node, nr / group, nr, &sub);
		MPI_Comm_free(&node);
		if (rc != MPI_SUCCESS) return rc;
		node = sub;
	}
	MPI_Comm_rank(node, &r->rank);
	MPI_Comm_size(node, &r->size);
	r->stride = (bytes + HPC_PAGE - 1) / HPC_PAGE * HPC_PAGE;
	r->base = NULL;
	int ok = r->size >= 2;
	if (ok) {
		MPI_Aint own = r->rank == 0 ? HPC_PAGE + (MPI_Aint)r->size * r->stride : 0;
		void *mine;
		rc = MPI_Win_allocate_shared(own, 1, MPI_INFO_NULL, node, &mine, &r->win);
		ok = rc == MPI_SUCCESS;
		if (ok) {
			MPI_Win_set_errhandler(r->win, MPI_ERRORS_RETURN);
			MPI_Aint sz;
			int du;
			rc = MPI_Win_shared_query(r->win, 0, &sz, &du, &r->base);
			ok = rc == MPI_SUCCESS && r->base != NULL;
		}
	}
	// Every node the same size, and every allocation made, or nobody uses it.
	int v[3] = {r->size, -r->size, ok};
	rc = MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	if (rc != MPI_SUCCESS) return rc;
	if (v[0] != -v[1] || !v[2]) {
		if (ok) MPI_Win_free(&r->win);
		MPI_Comm_free(&node);
		return -1;
	}
	r->node = node;
	// Each rank first touches its own slot (the page lands on its NUMA node),
	// the node's first rank the barrier words.
	if (r->rank == 0) memset(r->base, 0, HPC_PAGE);
	memset(r->base + HPC_PAGE + r->rank * r->stride, 0, r->stride);
	r->cross = MPI_COMM_NULL;
	if (ws > r->size) {
		rc = MPI_Comm_split(MPI_COMM_WORLD, r->rank, wr, &r->cross);
		if (rc != MPI_SUCCESS) return rc;
	}
	return MPI_Barrier(node);
}

static int hpc_region_free(hpc_region *r) {
	if (r->cross != MPI_COMM_NULL) MPI_Comm_free(&r->cross);
	int rc = MPI_Win_free(&r->win);
	MPI_Comm_free(&r->node);
	return rc;
}

static float *hpc_slot(hpc_region *r, int k) {
	return (float *)(r->base + HPC_PAGE + k * r->stride);
}

// hpc_region_sum writes into this rank's slot, elements [lo, lo+n), the sum
// over the slots in node-rank order: ((s0 + s1) + s2) + ..., so the bits
// do not depend on which rank computes them. The partial sums of a block
// of 2048 stay in L1 (t), and this rank's slot, one of the terms, is
// written only when its block is summed.
__attribute__((optimize("O3"))) static void hpc_region_sum(hpc_region *r, long lo, long n) {
	float t[2048];
	float *dst = hpc_slot(r, r->rank) + lo;
	for (long b = 0; b < n; b += 2048) {
		long m = n - b < 2048 ? n - b : 2048;
		const float *s0 = hpc_slot(r, 0) + lo + b, *s1 = hpc_slot(r, 1) + lo + b;
		for (long i = 0; i < m; i++) t[i] = s0[i] + s1[i];
		for (int k = 2; k < r->size; k++) {
			const float *s = hpc_slot(r, k) + lo + b;
			for (long i = 0; i < m; i++) t[i] += s[i];
		}
		memcpy(dst + b, t, m * sizeof(float));
	}
}

// hpc_region_share copies this rank's elements [lo, lo+n) into every other slot.
static void hpc_region_share(hpc_region *r, long lo, long n) {
	const float *src = hpc_slot(r, r->rank) + lo;
	for (int k = 0; k < r->size; k++) {
		if (k != r->rank) memcpy(hpc_slot(r, k) + lo, src, n * sizeof(float));
	}
}

static int hpc_region_cross(hpc_region *r, long lo, long n) {
	return MPI_Allreduce(MPI_IN_PLACE, hpc_slot(r, r->rank) + lo, (int)n, MPI_FLOAT, MPI_SUM, r->cross);
}
*/
import "C"

import (
	"math"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// A region is memory shared by the ranks of a node (NodeBuffer): one slot
// of floats per rank. An all-reduce of a part of a slot is the first level
// of a hierarchical all-reduce, done in place with no copy in or out:
//
//  1. the node's ranks meet at a barrier (every slot's part is final);
//  2. rank k of the node sums its share (the k-th of the node's size
//     pieces) over every slot, in node-rank order, into its own slot;
//  3. across nodes, the ranks of node rank k all-reduce that share with
//     MPI (when there is more than one node);
//  4. rank k copies its share into every other slot, and the node meets at
//     a second barrier.
//
// Each element is summed by one rank and copied to the others, so every
// rank has the same bits. On one node of R ranks each rank reads 1/R of
// each slot and writes 1/R of each: (R-1)/R of the buffer each way, where
// MPI_Allreduce (Open MPI's shared-memory transport) also copies the
// buffer into and out of its own segments.
type region struct {
	c     C.hpc_region
	slots [][]float32
	// The barrier words, in the region's first page, a cache line apart:
	// arrivals in this round, the round, and ranks asleep on the round.
	count, round, sleepers *atomic.Uint32
	gen                    uint32 // the rounds this rank has seen end
}

// nodeGroup, when positive, cuts each node into groups of that many ranks
// that share memory, the others being "other nodes": it lets one machine
// test the path across nodes. Set by tests before NodeBuffer.
var nodeGroup int

// newRegion makes a region of n floats per rank on the MPI thread. It
// returns nil, nil when the job cannot share memory usefully (see
// hpc_region_new).
func newRegion(n int) (*region, error) {
	g := &region{}
	rc := C.hpc_region_new(C.long(4*n), C.int(nodeGroup), &g.c)
	if rc == -1 {
		return nil, nil
	}
	if err := mpiErr("MPI_Win_allocate_shared", rc); err != nil {
		return nil, err
	}
	for k := 0; k < int(g.c.size); k++ {
		g.slots = append(g.slots, unsafe.Slice((*float32)(unsafe.Pointer(C.hpc_slot(&g.c, C.int(k)))), n))
	}
	words := unsafe.Pointer(g.c.base)
	g.count = (*atomic.Uint32)(words)
	g.round = (*atomic.Uint32)(unsafe.Add(words, 64))
	g.sleepers = (*atomic.Uint32)(unsafe.Add(words, 128))
	return g, nil
}

// mine is this rank's slot.
func (g *region) mine() []float32 { return g.slots[g.c.rank] }

// offset returns where buf starts in this rank's slot, or -1 when buf is
// not a part of it.
func (g *region) offset(buf []float32) int {
	s := g.mine()
	if len(buf) == 0 || len(s) == 0 {
		return -1
	}
	p, lo := uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&s[0]))
	if p < lo || p+4*uintptr(len(buf)) > lo+4*uintptr(len(s)) || (p-lo)%4 != 0 {
		return -1
	}
	return int((p - lo) / 4)
}

// allreduce sums buf, elements [lo, lo+n) of every rank's slot, over the
// job (see region).
func (g *region) allreduce(lo, n int) error {
	size, me := int(g.c.size), int(g.c.rank)
	// Shares of whole cache lines (16 floats), so that no two ranks write
	// the same line.
	a, b := share(n, size, me), share(n, size, me+1)
	g.barrier()
	var err error
	if b > a {
		C.hpc_region_sum(&g.c, C.long(lo+a), C.long(b-a))
	}
	if g.c.cross != C.MPI_Comm(C.MPI_COMM_NULL) {
		for p := a; p < b && err == nil; {
			m := min(b-p, maxCount)
			err = mpiErr("MPI_Allreduce", C.hpc_region_cross(&g.c, C.long(lo+p), C.long(m)))
			p += m
		}
	}
	if b > a {
		C.hpc_region_share(&g.c, C.long(lo+a), C.long(b-a))
	}
	g.barrier() // even after an error: the node's other ranks wait here
	return err
}

// share is where the k-th of size shares of n elements starts: whole
// lines of 16 floats, the last share taking the remainder.
func share(n, size, k int) int {
	if k >= size {
		return n
	}
	lines := (n + 15) / 16
	return min(n, lines*k/size*16)
}

// barrier returns once every rank of the node has called it as often as
// this one. It spins briefly, then sleeps on a futex in the shared page
// (a process-shared futex: FUTEX_WAIT without FUTEX_PRIVATE_FLAG), so a
// rank waiting for a slower one gives its core back.
func (g *region) barrier() {
	next := g.gen + 1
	g.gen = next
	if g.count.Add(1) == uint32(g.c.size) {
		g.count.Store(0)
		g.round.Store(next)
		if g.sleepers.Load() > 0 {
			futex(g.round, futexWake, math.MaxInt32)
		}
		return
	}
	done := func() bool { return g.round.Load() == next }
	if spinUntil(barrierSpin, done) {
		return
	}
	for !done() {
		g.sleepers.Add(1)
		// Returns at once if the round has already moved on; the
		// timeout only bounds a wake-up lost to a dying peer.
		futex(g.round, futexWait, next-1)
		g.sleepers.Add(^uint32(0))
	}
}

// barrierSpin is how long barrier polls before it sleeps: longer than the
// MPI thread's serveSpin, because the peers it waits for are finishing
// the same sum (tens to hundreds of microseconds apart), and a futex
// wake-up on a busy node costs tens of microseconds itself. It yields the
// core between polls.
const barrierSpin = time.Millisecond

const (
	futexWait = 0
	futexWake = 1
)

// futexTimeout bounds one sleep of barrier, so that it re-checks its round.
var futexTimeout = syscall.NsecToTimespec(int64(100 * time.Millisecond))

func futex(addr *atomic.Uint32, op int, val uint32) {
	var ts unsafe.Pointer
	if op == futexWait {
		ts = unsafe.Pointer(&futexTimeout)
	}
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), uintptr(op), uintptr(val), uintptr(ts), 0, 0)
}

// free releases the region (collective over the node).
func (g *region) free() error {
	g.slots = nil
	return mpiErr("MPI_Win_free", C.hpc_region_free(&g.c))
}
