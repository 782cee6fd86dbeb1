package kernels

import (
	"embed"
	"io/fs"
	"path"
	"sort"
	"strings"
)

//go:embed prelude.cuh *.cu
var files embed.FS

// Files lists the kernel files (*.cu), sorted.
func Files() []string {
	names, err := fs.Glob(files, "*.cu")
	if err != nil {
		panic(err) // the pattern is constant
	}
	sort.Strings(names)
	return names
}

// Source returns prelude.cuh followed by the named kernel files (every
// file of Files when names is empty) as one CUDA C source. An unknown name
// panics: names are constants of the calling code.
func Source(names ...string) string {
	if len(names) == 0 {
		names = Files()
	}
	var b strings.Builder
	b.WriteString(read("prelude.cuh"))
	for _, n := range names {
		b.WriteString("\n// ---- " + path.Base(n) + "\n")
		b.WriteString(read(n))
	}
	return b.String()
}

func read(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic("kernels: no file " + name)
	}
	return string(b)
}
