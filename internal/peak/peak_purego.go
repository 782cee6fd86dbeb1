//go:build !cgo || purego

package peak

// Sink is the last loop's result (always 0 here).
func Sink() float32 { return 0 }

// run has no vector loop to run without cgo.
func run(bf16 bool, iters int) float64 { return 0 }
