package affinity

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// From linux/futex.h; x/sys/unix does not export them.
const (
	futexWaitPrivate = 0 | 128 // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
	futexWakePrivate = 1 | 128 // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
)

// futexWait blocks the calling thread while *addr == val (or until a
// wake or signal; callers re-check). It enters the syscall through the Go
// runtime (unix.Syscall6), so the thread's P can be handed off if it
// sleeps long.
func futexWait(addr *atomic.Uint32, val uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitPrivate, uintptr(val), 0, 0, 0)
}

// futexWake wakes up to n threads blocked in futexWait on addr.
func futexWake(addr *atomic.Uint32, n int) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakePrivate, uintptr(n), 0, 0, 0)
}
