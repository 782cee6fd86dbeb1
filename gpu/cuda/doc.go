// Package cuda binds the CUDA driver, cuBLAS, NVRTC and NCCL, loaded at
// run time with dlopen: the binary builds and runs without CUDA, and finds
// out only when asked whether a GPU is there.
//
// No CUDA header is needed to build it: shim.h declares the few types and
// prototypes the package calls, from the public headers' documented
// signatures, and shim.c holds one function pointer per symbol.
//
// # Loading
//
// LoadDriver, LoadBLAS, LoadNVRTC and LoadNCCL each open the first file the
// dynamic loader finds (so LD_LIBRARY_PATH chooses) of
//
//	the driver  libcuda.so.1 (then cuInit(0) and a device count)
//	cuBLAS      libcublas.so.12, libcublas.so.11
//	NVRTC       libnvrtc.so.12, libnvrtc.so.11.2, libnvrtc.so.11
//	NCCL        libnccl.so.2
//
// and resolve every symbol the package calls from it at once, so a missing
// one is a *LoadError naming the file and the symbol, never a crash later.
// Each is idempotent and safe for concurrent use; OpenDevice loads the
// driver, NewBLAS cuBLAS, Compile and CompileModule NVRTC, GetUniqueID and
// InitRank NCCL.
//
// # Threads
//
// A driver call acts on the context current on the calling OS thread.
// OpenDevice and Context.Bind make a context current; a goroutine that
// drives a device calls runtime.LockOSThread, then Bind, and keeps to that
// thread. Setup methods of Context (Alloc, Free, HostAlloc, NewStream,
// NewEvent, LoadModule, CompileModule, NewBLAS, Module.Function) bind their
// context themselves and so work from any goroutine; the hot-path calls
// (copies, MemsetD32, Launch, stream and event calls, BLAS and NCCL calls)
// do not, and rely on the caller's bound thread. InitRank takes its device
// from the calling thread's context.
//
// # Launching without allocating
//
// Function.Launch takes the kernel's arguments as ...any and allocates
// nothing on the Go heap: the arguments do not escape, so the compiler keeps
// them on the caller's stack, and Launch copies their values into C memory
// the Function keeps (TestLaunchAllocs pins this). So one Function must not
// be launched from two goroutines at once.
//
// # Invariants
//
//   - Every call returns an error rather than panicking; only programming
//     errors panic (a Launch argument of an unsupported type).
//   - Errors are one line: *Error ("cuda: cuMemAlloc of 3.1 MiB:
//     CUDA_ERROR_OUT_OF_MEMORY (2)"; NVRTC's with the program log's first
//     lines; NCCL's with ncclGetErrorString's text) or *LoadError.
//   - No Go pointer is kept by C: host buffers passed to copies are Go
//     memory without Go pointers in it, or C memory (HostAlloc).
//   - CompileModule caches PTX on disk, written atomically (see CacheDir).
//
// Non-goals: the runtime API (libcudart), graphs, multiple contexts per
// device, peer access, timing events; tensors and kernels live in the
// packages above (hpctrain/gpu/kernels holds the CUDA C sources).
package cuda
