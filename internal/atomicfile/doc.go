// Package atomicfile writes a file whole or not at all: the content goes
// to a temporary file in the destination's directory, which is synced,
// closed and renamed over the destination only when every byte was
// written. A failure at any point removes the temporary file and leaves
// the destination as it was (absent, or its old content). Links are
// followed; a device or named pipe, which cannot be replaced, is written in
// place. Check tells beforehand whether a write could succeed.
//
// Non-goals: fsyncing the directory (the outputs written this way, exports
// and figures, can be written again), and locking against other writers.
package atomicfile
