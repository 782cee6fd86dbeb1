package cuda

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Device attributes (CUdevice_attribute).
const (
	attrComputeCapabilityMajor = 75
	attrComputeCapabilityMinor = 76
)

// Context is the primary context of one device.
type Context struct {
	ordinal      int
	dev          C.CUdevice
	ctx          C.CUcontext
	name         string
	major, minor int
	totalMem     int64
}

// OpenDevice loads the driver, retains the primary context of device
// ordinal (0-based, among the devices CUDA_VISIBLE_DEVICES leaves) and
// binds it on the calling OS thread.
func OpenDevice(ordinal int) (*Context, error) {
	n, err := DeviceCount()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("cuda: no device %d: the driver sees %d", ordinal, n)
	}
	c := &Context{ordinal: ordinal}
	if r := C.hc_cuDeviceGet(&c.dev, C.int(ordinal)); r != 0 {
		return nil, driverError("cuDeviceGet", int(r))
	}
	name := (*C.char)(C.calloc(256, 1))
	defer C.free(unsafe.Pointer(name))
	if r := C.hc_cuDeviceGetName(name, 256, c.dev); r != 0 {
		return nil, driverError("cuDeviceGetName", int(r))
	}
	c.name = C.GoString(name)
	var v C.int
	if r := C.hc_cuDeviceGetAttribute(&v, attrComputeCapabilityMajor, c.dev); r != 0 {
		return nil, driverError("cuDeviceGetAttribute", int(r))
	}
	c.major = int(v)
	if r := C.hc_cuDeviceGetAttribute(&v, attrComputeCapabilityMinor, c.dev); r != 0 {
		return nil, driverError("cuDeviceGetAttribute", int(r))
	}
	c.minor = int(v)
	var mem C.size_t
	if r := C.hc_cuDeviceTotalMem_v2(&mem, c.dev); r != 0 {
		return nil, driverError("cuDeviceTotalMem", int(r))
	}
	c.totalMem = int64(mem)
	if r := C.hc_cuDevicePrimaryCtxRetain(&c.ctx, c.dev); r != 0 {
		return nil, driverError("cuDevicePrimaryCtxRetain", int(r))
	}
	if err := c.Bind(); err != nil {
		C.hc_cuDevicePrimaryCtxRelease_v2(c.dev)
		return nil, err
	}
	return c, nil
}

// Ordinal returns the device's ordinal.
func (c *Context) Ordinal() int { return c.ordinal }

// Name returns the device's name, as nvidia-smi shows it.
func (c *Context) Name() string { return c.name }

// ComputeCapability returns the device's compute capability (8, 0 for an
// A100).
func (c *Context) ComputeCapability() (major, minor int) { return c.major, c.minor }

// TotalMem returns the device's memory in bytes.
func (c *Context) TotalMem() int64 { return c.totalMem }

// Bind makes c current on the calling OS thread (cuCtxSetCurrent). A
// goroutine that drives the device calls runtime.LockOSThread first, so
// that it stays on the thread c is bound to.
func (c *Context) Bind() error {
	if c.ctx == nil {
		return errClosed
	}
	if r := C.hc_cuCtxSetCurrent(c.ctx); r != 0 {
		return driverError("cuCtxSetCurrent", int(r))
	}
	return nil
}

var errClosed = fmt.Errorf("cuda: the context is closed")

// bindHere locks the calling goroutine to its thread and binds c there;
// the returned function unlocks it. Setup calls (allocation, streams,
// modules, handles) use it, so that they work from any goroutine.
func (c *Context) bindHere() (func(), error) {
	runtime.LockOSThread()
	if err := c.Bind(); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	return runtime.UnlockOSThread, nil
}

// Close releases the primary context. Memory, streams, events, modules and
// cuBLAS handles made in it are the caller's to free first.
func (c *Context) Close() error {
	if c.ctx == nil {
		return nil
	}
	c.ctx = nil
	if r := C.hc_cuDevicePrimaryCtxRelease_v2(c.dev); r != 0 {
		return driverError("cuDevicePrimaryCtxRelease", int(r))
	}
	return nil
}

// Ptr is a device address (CUdeviceptr).
type Ptr uint64

// Add returns p advanced by bytes.
func (p Ptr) Add(bytes int) Ptr { return p + Ptr(bytes) }

// Alloc allocates bytes of device memory (cuMemAlloc).
func (c *Context) Alloc(bytes int) (Ptr, error) {
	if bytes < 0 {
		return 0, fmt.Errorf("cuda: cuMemAlloc: negative size %d", bytes)
	}
	unbind, err := c.bindHere()
	if err != nil {
		return 0, err
	}
	defer unbind()
	var p C.CUdeviceptr
	if r := C.hc_cuMemAlloc_v2(&p, C.size_t(bytes)); r != 0 {
		err := driverError("cuMemAlloc", int(r)).(*Error)
		err.Call += " of " + Bytes(int64(bytes))
		return 0, err
	}
	return Ptr(p), nil
}

// Free frees memory from Alloc (cuMemFree).
func (c *Context) Free(p Ptr) error {
	unbind, err := c.bindHere()
	if err != nil {
		return err
	}
	defer unbind()
	if r := C.hc_cuMemFree_v2(C.CUdeviceptr(p)); r != 0 {
		return driverError("cuMemFree", int(r))
	}
	return nil
}

// cuMemHostAlloc's CU_MEMHOSTALLOC_PORTABLE: pinned for every context.
const memHostAllocPortable = 1

// HostAlloc allocates bytes of page-locked host memory, portable across
// contexts (cuMemHostAlloc). It is C memory: free it with HostFree.
func (c *Context) HostAlloc(bytes int) (unsafe.Pointer, error) {
	if bytes < 0 {
		return nil, fmt.Errorf("cuda: cuMemHostAlloc: negative size %d", bytes)
	}
	unbind, err := c.bindHere()
	if err != nil {
		return nil, err
	}
	defer unbind()
	var p unsafe.Pointer
	if r := C.hc_cuMemHostAlloc(&p, C.size_t(bytes), memHostAllocPortable); r != 0 {
		err := driverError("cuMemHostAlloc", int(r)).(*Error)
		err.Call += " of " + Bytes(int64(bytes))
		return nil, err
	}
	return p, nil
}

// HostFree frees memory from HostAlloc (cuMemFreeHost).
func (c *Context) HostFree(p unsafe.Pointer) error {
	unbind, err := c.bindHere()
	if err != nil {
		return err
	}
	defer unbind()
	if r := C.hc_cuMemFreeHost(p); r != 0 {
		return driverError("cuMemFreeHost", int(r))
	}
	return nil
}

// Stream is a CUDA stream. A nil *Stream is the legacy default stream.
type Stream struct {
	s C.CUstream
}

func (s *Stream) handle() C.CUstream {
	if s == nil {
		return nil
	}
	return s.s
}

// cuStreamCreate's CU_STREAM_NON_BLOCKING: no implicit synchronisation
// with the legacy default stream.
const streamNonBlocking = 1

// NewStream creates a non-blocking stream.
func (c *Context) NewStream() (*Stream, error) {
	unbind, err := c.bindHere()
	if err != nil {
		return nil, err
	}
	defer unbind()
	s := &Stream{}
	if r := C.hc_cuStreamCreate(&s.s, streamNonBlocking); r != 0 {
		return nil, driverError("cuStreamCreate", int(r))
	}
	return s, nil
}

// Sync waits until everything queued on s has run (cuStreamSynchronize).
func (s *Stream) Sync() error {
	if !driverLib.loaded.Load() {
		return errNotLoaded("the CUDA driver")
	}
	if r := C.hc_cuStreamSynchronize(s.handle()); r != 0 {
		return driverError("cuStreamSynchronize", int(r))
	}
	return nil
}

// Wait makes the work queued on s after it wait for e (cuStreamWaitEvent).
func (s *Stream) Wait(e *Event) error {
	if !driverLib.loaded.Load() {
		return errNotLoaded("the CUDA driver")
	}
	if r := C.hc_cuStreamWaitEvent(s.handle(), e.e, 0); r != 0 {
		return driverError("cuStreamWaitEvent", int(r))
	}
	return nil
}

// Destroy destroys s; a second call does nothing.
func (s *Stream) Destroy() error {
	if s == nil || s.s == nil {
		return nil
	}
	h := s.s
	s.s = nil
	if r := C.hc_cuStreamDestroy_v2(h); r != 0 {
		return driverError("cuStreamDestroy", int(r))
	}
	return nil
}

// Event marks a point in a stream.
type Event struct {
	e C.CUevent
}

// cuEventCreate's CU_EVENT_DISABLE_TIMING: cheaper to record and wait on.
const eventDisableTiming = 2

// NewEvent creates an event without timing.
func (c *Context) NewEvent() (*Event, error) {
	unbind, err := c.bindHere()
	if err != nil {
		return nil, err
	}
	defer unbind()
	e := &Event{}
	if r := C.hc_cuEventCreate(&e.e, eventDisableTiming); r != 0 {
		return nil, driverError("cuEventCreate", int(r))
	}
	return e, nil
}

// Record records e on s (cuEventRecord).
func (e *Event) Record(s *Stream) error {
	if !driverLib.loaded.Load() {
		return errNotLoaded("the CUDA driver")
	}
	if r := C.hc_cuEventRecord(e.e, s.handle()); r != 0 {
		return driverError("cuEventRecord", int(r))
	}
	return nil
}

// Sync waits until the work before e's last record has run.
func (e *Event) Sync() error {
	if !driverLib.loaded.Load() {
		return errNotLoaded("the CUDA driver")
	}
	if r := C.hc_cuEventSynchronize(e.e); r != 0 {
		return driverError("cuEventSynchronize", int(r))
	}
	return nil
}

// Destroy destroys e; a second call does nothing.
func (e *Event) Destroy() error {
	if e == nil || e.e == nil {
		return nil
	}
	h := e.e
	e.e = nil
	if r := C.hc_cuEventDestroy_v2(h); r != 0 {
		return driverError("cuEventDestroy", int(r))
	}
	return nil
}

// CopyHtoD queues a copy of bytes from host memory src to dst on s
// (cuMemcpyHtoDAsync). src may be Go memory without Go pointers in it (a
// []float32's data) or HostAlloc memory; Go memory must stay reachable
// until s has run the copy (runtime.KeepAlive after Sync).
func CopyHtoD(dst Ptr, src unsafe.Pointer, bytes int, s *Stream) error {
	if !driverLib.loaded.Load() {
		return errNotLoaded("the CUDA driver")
	}
	if bytes < 0 {
		return fmt.Errorf("cuda: cuMemcpyHtoDAsync: negative size %d", bytes)
	}
	if r := C.hc_cuMemcpyHtoDAsync_v2(C.CUdeviceptr(dst), src, C.size_t(bytes), s.handle()); r != 0 {
		return driverError("cuMemcpyHtoDAsync", int(r))
	}
	return nil
}

// CopyDtoH queues a copy of bytes from src to host memory dst on s
// (cuMemcpyDtoHAsync); dst is as CopyHtoD's src.
func CopyDtoH(dst unsafe.Pointer, src Ptr, bytes int, s *Stream) error {
	if !driverLib.loaded.Load() {
		return errNotLoaded("the CUDA driver")
	}
	if bytes < 0 {
		return fmt.Errorf("cuda: cuMemcpyDtoHAsync: negative size %d", bytes)
	}
	if r := C.hc_cuMemcpyDtoHAsync_v2(dst, C.CUdeviceptr(src), C.size_t(bytes), s.handle()); r != 0 {
		return driverError("cuMemcpyDtoHAsync", int(r))
	}
	return nil
}

// CopyDtoD queues a device-to-device copy of bytes on s
// (cuMemcpyDtoDAsync).
func CopyDtoD(dst, src Ptr, bytes int, s *Stream) error {
	if !driverLib.loaded.Load() {
		return errNotLoaded("the CUDA driver")
	}
	if bytes < 0 {
		return fmt.Errorf("cuda: cuMemcpyDtoDAsync: negative size %d", bytes)
	}
	if r := C.hc_cuMemcpyDtoDAsync_v2(C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(bytes), s.handle()); r != 0 {
		return driverError("cuMemcpyDtoDAsync", int(r))
	}
	return nil
}

// MemsetD32 queues setting n 32-bit words at dst to value on s
// (cuMemsetD32Async); value 0 clears float32 buffers.
func MemsetD32(dst Ptr, value uint32, n int, s *Stream) error {
	if !driverLib.loaded.Load() {
		return errNotLoaded("the CUDA driver")
	}
	if n < 0 {
		return fmt.Errorf("cuda: cuMemsetD32Async: negative count %d", n)
	}
	if r := C.hc_cuMemsetD32Async(C.CUdeviceptr(dst), C.uint(value), C.size_t(n), s.handle()); r != 0 {
		return driverError("cuMemsetD32Async", int(r))
	}
	return nil
}
