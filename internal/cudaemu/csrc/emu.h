// emu.h: what the emulated libraries share. libcublas.so.12 and libnccl.so.2
// link against libcuda.so.1 for cudaemu_check_range, the bounds check of
// device addresses; it is the only symbol the emulator exports beyond the
// real CUDA, cuBLAS, NVRTC and NCCL entry points it implements.
#ifndef CUDAEMU_EMU_H
#define CUDAEMU_EMU_H

#include <stddef.h>
#include <stdint.h>

#define EMU_EXPORT __attribute__((visibility("default")))

// cudaemu_check_range reports whether [addr, addr+bytes) lies inside one live
// device allocation. When it does not, it prints one line naming who asked
// (call) and the range to stderr, and returns 0.
EMU_EXPORT int cudaemu_check_range(const char *call, uint64_t addr, size_t bytes);

#endif
