// Command cudaemu builds the emulated CUDA device's libraries and prints
// their directory, for LD_LIBRARY_PATH:
//
//	export LD_LIBRARY_PATH=$(go run ./internal/cudaemu/cmd/cudaemu)
//	go run ./internal/cudaemu/cmd/cudaemu DIR   # build into DIR instead
package main

import (
	"fmt"
	"os"

	"hpctrain/internal/cudaemu"
)

func main() {
	if len(os.Args) > 2 {
		fmt.Fprintln(os.Stderr, "usage: cudaemu [DIR]")
		os.Exit(2)
	}
	dir := ""
	var err error
	if len(os.Args) == 2 {
		dir = os.Args[1]
		err = cudaemu.Build(dir)
	} else {
		dir, err = cudaemu.Dir()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(dir)
}
