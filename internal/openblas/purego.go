//go:build !cgo || purego

package openblas

// Native reports whether OpenBLAS is linked in (false under purego).
const Native = false

// SetThreads does nothing without OpenBLAS.
func SetThreads(n int) {}

// Threads is 1 without OpenBLAS.
func Threads() int { return 1 }
