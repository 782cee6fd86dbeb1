package cuda

/*
#include <stdlib.h>
#include <string.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"unsafe"
)

// Module is a loaded PTX module.
type Module struct {
	ctx   *Context
	m     C.CUmodule
	funcs map[string]*Function
}

// LoadModule loads PTX (or any image cuModuleLoadData takes) into c.
func (c *Context) LoadModule(ptx []byte) (*Module, error) {
	unbind, err := c.bindHere()
	if err != nil {
		return nil, err
	}
	defer unbind()
	// The image is NUL-terminated text: copy it into C memory with the NUL.
	img := C.malloc(C.size_t(len(ptx) + 1))
	defer C.free(img)
	if len(ptx) > 0 {
		C.memcpy(img, unsafe.Pointer(&ptx[0]), C.size_t(len(ptx)))
	}
	*(*byte)(unsafe.Add(img, len(ptx))) = 0
	m := &Module{ctx: c, funcs: map[string]*Function{}}
	if r := C.hc_cuModuleLoadData(&m.m, img); r != 0 {
		return nil, driverError("cuModuleLoadData", int(r))
	}
	return m, nil
}

// Function returns the kernel name of m (cuModuleGetFunction); every call
// for one name returns the same *Function.
func (m *Module) Function(name string) (*Function, error) {
	if f := m.funcs[name]; f != nil {
		return f, nil
	}
	if m.m == nil {
		return nil, fmt.Errorf("cuda: cuModuleGetFunction %s: the module is unloaded", name)
	}
	unbind, err := m.ctx.bindHere()
	if err != nil {
		return nil, err
	}
	defer unbind()
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	f := &Function{name: name}
	if r := C.hc_cuModuleGetFunction(&f.f, m.m, cname); r != 0 {
		err := driverError("cuModuleGetFunction", int(r)).(*Error)
		err.Call += " " + name
		return nil, err
	}
	m.funcs[name] = f
	return f, nil
}

// Unload unloads m (cuModuleUnload) and frees its functions' argument
// buffers; its Functions must not be launched afterwards. A second call
// does nothing.
func (m *Module) Unload() error {
	if m.m == nil {
		return nil
	}
	for _, f := range m.funcs {
		f.free()
	}
	m.funcs = map[string]*Function{}
	unbind, err := m.ctx.bindHere()
	if err != nil {
		return err
	}
	defer unbind()
	h := m.m
	m.m = nil
	if r := C.hc_cuModuleUnload(h); r != 0 {
		return driverError("cuModuleUnload", int(r))
	}
	return nil
}

// Dim3 is a grid or block size; a zero Y or Z counts as 1.
type Dim3 struct{ X, Y, Z int }

// Function is a kernel of a Module.
type Function struct {
	name string
	f    C.CUfunction
	// buf is C memory for n arguments: n 8-byte value slots, then n
	// pointers to them (cuLaunchKernel's kernelParams). It is reused by
	// every launch and grown when a launch has more arguments.
	buf unsafe.Pointer
	n   int
}

func (f *Function) free() {
	if f.buf != nil {
		C.free(f.buf)
		f.buf, f.n = nil, 0
	}
	f.f = nil
}

// Name returns the kernel's name.
func (f *Function) Name() string { return f.name }

func dim(v int) C.uint {
	if v == 0 {
		return 1
	}
	return C.uint(v)
}

// Launch queues the kernel on s with grid x block threads (cuLaunchKernel,
// no dynamic shared memory). args are the kernel's parameters in order,
// each a Ptr, int32, uint32, int64, uint64, float32 or float64 matching the
// C parameter's type (a pointer, int, unsigned int, long long, unsigned long
// long, float, double); any other type panics, a programming error.
//
// Launch allocates nothing on the Go heap: args does not escape, so the
// compiler keeps the variadic slice and the boxed values on the caller's
// stack, and the values are copied into C memory that f reuses. So one
// Function must not be launched from two goroutines at once.
func (f *Function) Launch(grid, block Dim3, s *Stream, args ...any) error {
	if !driverLib.loaded.Load() {
		return errNotLoaded("the CUDA driver")
	}
	if f.f == nil {
		return fmt.Errorf("cuda: cuLaunchKernel %s: its module is unloaded", f.name)
	}
	for _, d := range [...]int{grid.X, grid.Y, grid.Z, block.X, block.Y, block.Z} {
		if d < 0 || d > math.MaxUint32 {
			return fmt.Errorf("cuda: cuLaunchKernel %s: grid %v, block %v out of range", f.name, grid, block)
		}
	}
	if len(args) > f.n {
		f.grow(len(args))
	}
	vals := unsafe.Slice((*uint64)(f.buf), f.n)
	for i, a := range args {
		slot := unsafe.Pointer(&vals[i])
		vals[i] = 0
		switch v := a.(type) {
		case Ptr:
			*(*uint64)(slot) = uint64(v)
		case int32:
			*(*int32)(slot) = v
		case uint32:
			*(*uint32)(slot) = v
		case int64:
			*(*int64)(slot) = v
		case uint64:
			*(*uint64)(slot) = v
		case float32:
			*(*float32)(slot) = v
		case float64:
			*(*float64)(slot) = v
		default:
			panic("cuda: Launch " + f.name + ": argument " + strconv.Itoa(i) + " is a " +
				reflect.TypeOf(a).String() + "; want Ptr, int32, uint32, int64, uint64, float32 or float64")
		}
	}
	params := (*unsafe.Pointer)(unsafe.Add(f.buf, 8*f.n))
	r := C.hc_cuLaunchKernel(f.f, dim(grid.X), dim(grid.Y), dim(grid.Z), dim(block.X), dim(block.Y), dim(block.Z),
		0, s.handle(), params, nil)
	if r != 0 {
		err := driverError("cuLaunchKernel", int(r)).(*Error)
		err.Call += " " + f.name
		return err
	}
	return nil
}

// grow replaces f's argument buffer by one for n arguments.
func (f *Function) grow(n int) {
	if f.buf != nil {
		C.free(f.buf)
	}
	f.buf = C.calloc(C.size_t(2*n), 8)
	f.n = n
	ptrs := unsafe.Slice((*unsafe.Pointer)(unsafe.Add(f.buf, 8*n)), n)
	for i := range ptrs {
		ptrs[i] = unsafe.Add(f.buf, 8*i)
	}
}
