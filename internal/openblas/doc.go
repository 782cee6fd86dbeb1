// Package openblas installs OpenBLAS as gonum's blas32 implementation for
// the calls that carry hpctrain's arithmetic (Sgemm, Sgemv); every other
// routine stays gonum's pure-Go code. Importing the package for its side
// effect is enough:
//
//	import _ "hpctrain/internal/openblas"
//
// Built with -tags purego, or without cgo, the package installs nothing and
// gonum's pure-Go BLAS does all the work; the test suite runs either way.
package openblas
