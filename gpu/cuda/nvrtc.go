package cuda

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"slices"
	"sync/atomic"
	"unsafe"
)

// compiles counts NVRTC compilations (nvrtcCompileProgram calls), so that
// tests can tell a cache hit from a compile.
var compiles atomic.Int64

// NVRTCVersion loads NVRTC and returns its version (nvrtcVersion).
func NVRTCVersion() (major, minor int, err error) {
	if err := LoadNVRTC(); err != nil {
		return 0, 0, err
	}
	var ma, mi C.int
	if r := C.hc_nvrtcVersion(&ma, &mi); r != 0 {
		return 0, 0, nvrtcError("nvrtcVersion", r)
	}
	return int(ma), int(mi), nil
}

// NVRTCArchs returns the virtual architectures NVRTC compiles for, as
// compute capabilities times ten (80 for compute_80), ascending
// (nvrtcGetSupportedArchs); nil where NVRTC cannot say (11.0 and 11.1).
func NVRTCArchs() ([]int, error) {
	if err := LoadNVRTC(); err != nil {
		return nil, err
	}
	buf := (*C.int)(C.malloc(C.size_t(256 * C.sizeof_int)))
	defer C.free(unsafe.Pointer(buf))
	n := int(C.hc_nvrtc_supported_archs(buf, 256))
	switch {
	case n == -1:
		return nil, nil
	case n < 0:
		return nil, &Error{Call: "nvrtcGetSupportedArchs", Code: -1, Name: "NVRTC_ERROR_UNKNOWN"}
	}
	archs := make([]int, n)
	for i, a := range unsafe.Slice(buf, n) {
		archs[i] = int(a)
	}
	slices.Sort(archs)
	return archs, nil
}

// CompileArch is the virtual architecture to compile for a device of
// compute capability cc (times ten) with NVRTC major.minor, which compiles
// for archs (NVRTCArchs; nil: unknown, cc itself is tried): cc where
// NVRTC has it, else the newest NVRTC has below cc, whose PTX the driver
// compiles for the device (PTX runs on later GPUs), as PyTorch's JIT does
// for a GPU newer than its NVRTC. A device older than every architecture
// NVRTC has is an error.
func CompileArch(cc int, archs []int, major, minor int) (string, error) {
	if len(archs) == 0 || slices.Contains(archs, cc) {
		return fmt.Sprintf("compute_%d", cc), nil
	}
	best := -1
	for _, a := range archs {
		if a < cc {
			best = a
		}
	}
	if best < 0 {
		return "", fmt.Errorf("cuda: NVRTC %d.%d compiles for compute_%d to compute_%d, and this GPU is sm_%d: install an NVRTC of the CUDA release that still supports it, or use -device cpu",
			major, minor, archs[0], archs[len(archs)-1], cc)
	}
	return fmt.Sprintf("compute_%d", best), nil
}

func nvrtcError(call string, r C.nvrtcResult) *Error {
	name := "NVRTC_ERROR_UNKNOWN"
	if s := C.hc_nvrtcGetErrorString(r); s != nil {
		name = C.GoString(s)
	}
	return &Error{Call: call, Code: int(r), Name: name}
}

// Compile compiles CUDA C source with NVRTC for arch (a virtual
// architecture such as "compute_80") with --gpu-architecture=arch and
// opts, and returns the PTX and NVRTC's program log. A failed compilation
// is an *Error whose message ends with the log's first lines; the whole
// log is returned too. name is the program's name in the log's messages.
func Compile(name, src, arch string, opts ...string) (ptx []byte, log string, err error) {
	if err := LoadNVRTC(); err != nil {
		return nil, "", err
	}
	csrc, cname := C.CString(src), C.CString(name)
	defer C.free(unsafe.Pointer(csrc))
	defer C.free(unsafe.Pointer(cname))
	var prog C.nvrtcProgram
	if r := C.hc_nvrtcCreateProgram(&prog, csrc, cname, 0, nil, nil); r != 0 {
		return nil, "", nvrtcError("nvrtcCreateProgram "+name, r)
	}
	defer C.hc_nvrtcDestroyProgram(&prog)

	all := append([]string{"--gpu-architecture=" + arch}, opts...)
	copts := C.malloc(C.size_t(len(all)) * C.size_t(unsafe.Sizeof(uintptr(0))))
	defer C.free(copts)
	optv := unsafe.Slice((**C.char)(copts), len(all))
	for i, o := range all {
		optv[i] = C.CString(o)
		defer C.free(unsafe.Pointer(optv[i]))
	}
	compiles.Add(1)
	rc := C.hc_nvrtcCompileProgram(prog, C.int(len(all)), (**C.char)(copts))
	log = programLog(prog)
	if rc != 0 {
		e := nvrtcError("nvrtcCompileProgram "+name, rc)
		e.Log = firstLines(log, 3)
		return nil, log, e
	}
	var size C.size_t
	if r := C.hc_nvrtcGetPTXSize(prog, &size); r != 0 {
		return nil, log, nvrtcError("nvrtcGetPTXSize", r)
	}
	buf := C.malloc(size + 1)
	defer C.free(buf)
	if r := C.hc_nvrtcGetPTX(prog, (*C.char)(buf)); r != 0 {
		return nil, log, nvrtcError("nvrtcGetPTX", r)
	}
	ptx = C.GoBytes(buf, C.int(size))
	// The size counts the terminating NUL; keep the text only.
	for len(ptx) > 0 && ptx[len(ptx)-1] == 0 {
		ptx = ptx[:len(ptx)-1]
	}
	return ptx, log, nil
}

func programLog(prog C.nvrtcProgram) string {
	var size C.size_t
	if C.hc_nvrtcGetProgramLogSize(prog, &size) != 0 || size <= 1 {
		return ""
	}
	buf := C.malloc(size)
	defer C.free(buf)
	if C.hc_nvrtcGetProgramLog(prog, (*C.char)(buf)) != 0 {
		return ""
	}
	return C.GoString((*C.char)(buf))
}
