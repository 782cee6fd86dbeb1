package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"sync/atomic"
	"unsafe"
)

// ncclInProgress is ncclResult_t's "not finished yet" (7), not an error.
const ncclInProgress = 7

func ncclError(call string, r C.ncclResult_t) *Error {
	name := "unknown NCCL error"
	if s := C.hc_ncclGetErrorString(r); s != nil {
		name = C.GoString(s)
	}
	return &Error{Call: call, Code: int(r), Name: name}
}

// NCCLVersion loads NCCL and returns ncclGetVersion (for example 21903
// for 2.19.3).
func NCCLVersion() (int, error) {
	if err := LoadNCCL(); err != nil {
		return 0, err
	}
	var v C.int
	if r := C.hc_ncclGetVersion(&v); r != 0 {
		return 0, ncclError("ncclGetVersion", r)
	}
	return int(v), nil
}

// UniqueID identifies a communicator: rank 0 makes it and sends it to the
// others (over MPI, say) before InitRank.
type UniqueID [128]byte

// GetUniqueID loads NCCL and returns a new ncclUniqueId.
func GetUniqueID() (UniqueID, error) {
	var id UniqueID
	if err := LoadNCCL(); err != nil {
		return id, err
	}
	if r := C.hc_nccl_unique_id(unsafe.Pointer(&id[0])); r != 0 {
		return id, ncclError("ncclGetUniqueId", r)
	}
	return id, nil
}

// Comm is an NCCL communicator.
type Comm struct {
	c    C.ncclComm_t
	gone atomic.Bool // aborted or destroyed
}

// InitRank joins the communicator id as rank of nranks
// (ncclCommInitRank); it returns once all nranks have joined. The device
// is the context bound on the calling thread.
func InitRank(nranks int, id UniqueID, rank int) (*Comm, error) {
	if err := LoadNCCL(); err != nil {
		return nil, err
	}
	c := &Comm{}
	if r := C.hc_nccl_init_rank(&c.c, C.int(nranks), unsafe.Pointer(&id[0]), C.int(rank)); r != 0 {
		return nil, ncclError("ncclCommInitRank", r)
	}
	return c, nil
}

const errCommGone = errString("cuda: the NCCL communicator is aborted or destroyed")

// AllReduceSum queues recv = the sum over ranks of send, count float32s, on
// s (ncclAllReduce, ncclFloat32, ncclSum); send == recv is in place.
func (c *Comm) AllReduceSum(send, recv Ptr, count int, s *Stream) error {
	if c.gone.Load() {
		return errCommGone
	}
	if count < 0 {
		return errString("cuda: ncclAllReduce: negative count")
	}
	if r := C.hc_nccl_allreduce_sum_f32(C.CUdeviceptr(send), C.CUdeviceptr(recv), C.size_t(count), c.c, s.handle()); r != 0 {
		return ncclError("ncclAllReduce", r)
	}
	return nil
}

// Abort aborts the communicator (ncclCommAbort), making a call blocked in
// it return; it is safe from another goroutine while one blocks. The
// communicator is freed: a later Destroy does nothing.
func (c *Comm) Abort() error {
	if !c.gone.CompareAndSwap(false, true) {
		return nil
	}
	if r := C.hc_ncclCommAbort(c.c); r != 0 {
		return ncclError("ncclCommAbort", r)
	}
	return nil
}

// AsyncError returns the communicator's asynchronous error
// (ncclCommGetAsyncError), nil while there is none.
func (c *Comm) AsyncError() error {
	if c.gone.Load() {
		return errCommGone
	}
	var async C.int
	if r := C.hc_nccl_async_error(c.c, &async); r != 0 {
		return ncclError("ncclCommGetAsyncError", r)
	}
	if async != 0 && async != ncclInProgress {
		return ncclError("ncclCommGetAsyncError", C.ncclResult_t(async))
	}
	return nil
}

// Destroy frees the communicator after its queued work (ncclCommDestroy); a
// second call, or one after Abort, does nothing.
func (c *Comm) Destroy() error {
	if !c.gone.CompareAndSwap(false, true) {
		return nil
	}
	if r := C.hc_ncclCommDestroy(c.c); r != 0 {
		return ncclError("ncclCommDestroy", r)
	}
	return nil
}
