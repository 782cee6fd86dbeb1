package cuda

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// library is one dlopen'ed library: loaded once, its outcome (success or
// the error) kept for every later call.
type library struct {
	what  string   // for messages: "the CUDA driver", "cuBLAS", ...
	names []string // file names tried, in order, through the dynamic loader
	id    C.int    // HC_LIB_*

	mu     sync.Mutex
	done   bool
	err    error
	loaded atomic.Bool // set once every symbol is resolved (and, for the driver, cuInit passed)
	handle unsafe.Pointer
	file   string // the name that opened
}

var (
	driverLib = &library{what: "the CUDA driver", names: []string{"libcuda.so.1"}, id: C.HC_LIB_CUDA}
	blasLib   = &library{what: "cuBLAS", names: []string{"libcublas.so.12", "libcublas.so.11"}, id: C.HC_LIB_CUBLAS}
	nvrtcLib  = &library{what: "NVRTC", names: []string{"libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so.11"}, id: C.HC_LIB_NVRTC}
	ncclLib   = &library{what: "NCCL", names: []string{"libnccl.so.2"}, id: C.HC_LIB_NCCL}
)

// load opens the first of l.names the dynamic loader finds and resolves
// every symbol of l; then, if init is not nil, runs it.
func (l *library) load(init func() error) error {
	if l.loaded.Load() {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return l.err
	}
	l.done = true
	l.err = l.open()
	if l.err == nil && init != nil {
		l.err = init()
	}
	if l.err == nil {
		l.loaded.Store(true)
	}
	return l.err
}

func (l *library) open() error {
	var reasons []string
	errBuf := (*C.char)(C.malloc(512))
	defer C.free(unsafe.Pointer(errBuf))
	for i, name := range l.names {
		cname := C.CString(name)
		h := C.hc_open(cname, errBuf, 512)
		C.free(unsafe.Pointer(cname))
		if h == nil {
			reasons = appendNew(reasons, C.GoString(errBuf))
			continue
		}
		if missing := C.hc_resolve(h, l.id); missing != nil {
			sym := C.GoString(missing)
			C.hc_close(h)
			return &LoadError{What: l.what, Tried: l.names[:i+1], Symbol: sym}
		}
		l.handle, l.file = h, name
		return nil
	}
	return &LoadError{What: l.what, Tried: l.names, Reason: strings.Join(reasons, "; ")}
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// LoadDriver loads libcuda.so.1, resolves the driver functions the package
// calls and runs cuInit(0). It is idempotent and safe for concurrent use: the
// first call's outcome is every call's. Its error is a *LoadError, for
// example "cuda: no CUDA device: cuInit: CUDA_ERROR_NO_DEVICE (100)".
func LoadDriver() error {
	return driverLib.load(func() error {
		if r := C.hc_cuInit(0); r != 0 {
			err := driverError("cuInit", int(r))
			return &LoadError{What: "no CUDA device", Reason: err.Error()[len("cuda: "):], Err: err}
		}
		var n C.int
		if r := C.hc_cuDeviceGetCount(&n); r != 0 {
			err := driverError("cuDeviceGetCount", int(r))
			return &LoadError{What: "no CUDA device", Reason: err.Error()[len("cuda: "):], Err: err}
		}
		if n == 0 {
			return &LoadError{What: "no CUDA device", Reason: "cuDeviceGetCount: 0 devices"}
		}
		return nil
	})
}

// LoadBLAS loads cuBLAS (libcublas.so.12, else libcublas.so.11).
func LoadBLAS() error { return blasLib.load(nil) }

// LoadNVRTC loads NVRTC (libnvrtc.so.12, else libnvrtc.so.11.2, else
// libnvrtc.so.11).
func LoadNVRTC() error {
	return nvrtcLib.load(func() error {
		C.hc_nvrtc_resolve_archs(nvrtcLib.handle)
		return nil
	})
}

// LoadNCCL loads NCCL (libnccl.so.2).
func LoadNCCL() error { return ncclLib.load(nil) }

// driverErrorName is cuGetErrorName's answer for r.
func driverErrorName(r int) string {
	var s *C.char
	if C.hc_cuGetErrorName(C.CUresult(r), &s) != 0 || s == nil {
		return "CUDA_ERROR_UNKNOWN_CODE"
	}
	return C.GoString(s)
}

// DeviceCount loads the driver and returns cuDeviceGetCount.
func DeviceCount() (int, error) {
	if err := LoadDriver(); err != nil {
		return 0, err
	}
	var n C.int
	if r := C.hc_cuDeviceGetCount(&n); r != 0 {
		return 0, driverError("cuDeviceGetCount", int(r))
	}
	return int(n), nil
}

// LocalDevice is the ordinal a process of local rank local takes when
// nothing chose its device: local mod the devices the driver sees.
func LocalDevice(local int) (int, error) {
	n, err := DeviceCount()
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("cuda: the CUDA driver sees no device")
	}
	return local % n, nil
}

// DriverVersion loads the driver and returns cuDriverGetVersion, 1000*major
// + 10*minor (12040 is CUDA 12.4).
func DriverVersion() (int, error) {
	if err := LoadDriver(); err != nil {
		return 0, err
	}
	var v C.int
	if r := C.hc_cuDriverGetVersion(&v); r != 0 {
		return 0, driverError("cuDriverGetVersion", int(r))
	}
	return int(v), nil
}
