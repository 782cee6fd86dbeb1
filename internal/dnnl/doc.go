// Package dnnl runs oneDNN's convolution and matmul primitives on the
// calling thread, in float32 or bfloat16 arithmetic, for hpctrain's CPU
// layers. Each object (a Conv, a Gemm, a Gemms cache) is built once for one
// shape, owns its stream, scratchpad and conversion buffers, and is used by
// one goroutine at a time; different objects run concurrently on different
// worker threads. oneDNN's OpenMP runtime is held to one thread (the
// caller's) for every primitive created and executed here, and the calls
// allocate nothing on the Go heap after construction.
//
// Built with -tags purego, or without cgo, Native is false and every
// constructor returns an error.
package dnnl
