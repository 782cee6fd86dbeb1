package cuda

import (
	"errors"
	"fmt"
	"strings"
)

// Error is a failed call into the driver, cuBLAS, NVRTC or NCCL, for
// example "cuda: cuMemAlloc of 3.1 MiB: CUDA_ERROR_OUT_OF_MEMORY (2)".
type Error struct {
	Call string // the C function, without its _v2 suffix
	Code int    // the CUresult, cublasStatus_t, nvrtcResult or ncclResult_t
	Name string // its name (NCCL: ncclGetErrorString's text)
	Log  string // NVRTC compilations: the first lines of the program log
}

func (e *Error) Error() string {
	s := fmt.Sprintf("cuda: %s: %s (%d)", e.Call, e.Name, e.Code)
	if e.Log != "" {
		s += ": " + e.Log
	}
	return s
}

// LoadError says why a library could not be used: it is not found, it
// lacks a symbol, or (What "no CUDA device") the driver has no device.
type LoadError struct {
	What   string   // "the CUDA driver", "cuBLAS", "NVRTC", "NCCL" or "no CUDA device"
	Tried  []string // the file names tried, in order
	Symbol string   // the missing symbol, if that is what failed
	Reason string   // dlerror's messages, or the failed call
	Err    error    // the failed call's *Error, when there is one
}

var hints = map[string]string{
	"the CUDA driver": "install the NVIDIA driver or add its directory to LD_LIBRARY_PATH",
	"cuBLAS":          "install the CUDA toolkit's cuBLAS or add its directory to LD_LIBRARY_PATH",
	"NVRTC":           "install the CUDA toolkit's NVRTC or add its directory to LD_LIBRARY_PATH",
	"NCCL":            "install NCCL (libnccl2) or add its directory to LD_LIBRARY_PATH",
}

func (e *LoadError) Error() string {
	switch {
	case e.Symbol != "":
		lib := e.What
		if len(e.Tried) > 0 {
			lib = e.Tried[len(e.Tried)-1]
		}
		return fmt.Sprintf("cuda: %s has no symbol %s", lib, e.Symbol)
	case len(e.Tried) > 0:
		s := fmt.Sprintf("cuda: cannot load %s: tried %s (%s)", e.What, strings.Join(e.Tried, ", "), e.Reason)
		if h := hints[e.What]; h != "" {
			s += "; " + h
		}
		return s
	default:
		return fmt.Sprintf("cuda: %s: %s", e.What, e.Reason)
	}
}

func (e *LoadError) Unwrap() error { return e.Err }

// NoDevice reports whether err says the driver loaded and sees no device
// (cuInit's CUDA_ERROR_NO_DEVICE, or a count of 0): what a node without
// a GPU, or CUDA_VISIBLE_DEVICES hiding every GPU, gives.
func NoDevice(err error) bool {
	var le *LoadError
	if !errors.As(err, &le) || le.What != "no CUDA device" {
		return false
	}
	var ce *Error
	return le.Err == nil || errors.As(le.Err, &ce) && ce.Code == errNoDevice
}

// errNoDevice is CUDA_ERROR_NO_DEVICE.
const errNoDevice = 100

// errNotLoaded is returned by calls made before their library is loaded:
// a call through an unset function pointer would crash the process.
type errNotLoaded string

func (e errNotLoaded) Error() string {
	return "cuda: " + string(e) + " is not loaded (call OpenDevice or its Load function first)"
}

// driverError makes the *Error of a failed driver call; r != 0.
func driverError(call string, r int) error {
	return &Error{Call: call, Code: r, Name: driverErrorName(r)}
}

// cuBLAS has no name function among the loaded symbols: these are
// cublas_api.h's cublasStatus_t values.
var blasStatusNames = map[int]string{
	1:  "CUBLAS_STATUS_NOT_INITIALIZED",
	3:  "CUBLAS_STATUS_ALLOC_FAILED",
	7:  "CUBLAS_STATUS_INVALID_VALUE",
	8:  "CUBLAS_STATUS_ARCH_MISMATCH",
	11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED",
	14: "CUBLAS_STATUS_INTERNAL_ERROR",
	15: "CUBLAS_STATUS_NOT_SUPPORTED",
	16: "CUBLAS_STATUS_LICENSE_ERROR",
}

func blasError(call string, r int) error {
	name, ok := blasStatusNames[r]
	if !ok {
		name = "CUBLAS_STATUS_UNKNOWN"
	}
	return &Error{Call: call, Code: r, Name: name}
}

// firstLines returns up to n non-empty lines of log joined by " | ", so
// that an error stays one line.
func firstLines(log string, n int) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if len(out) == n {
			out = append(out, "...")
			break
		}
		out = append(out, l)
	}
	return strings.Join(out, " | ")
}

// ErrOutOfMemory is CUDA_ERROR_OUT_OF_MEMORY's code (an *Error's Code).
const ErrOutOfMemory = 2

// Bytes writes a size for a message: "512 B", "3.1 MiB", "80.0 GiB".
func Bytes(b int64) string {
	switch {
	case b < 1<<10:
		return fmt.Sprintf("%d B", b)
	case b < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	case b < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
}
