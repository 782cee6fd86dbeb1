package tomlfile

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"hpctrain/internal/cli"
)

// MaxBytes is the largest TOML file Read accepts: far above any real
// description or configuration (the zoo's largest is a few KB).
const MaxBytes = 256 << 10

// MaxDepth is the deepest nesting of arrays and inline tables Check
// accepts: a description nests its blocks at most 8 deep, two levels
// each.
const MaxDepth = 64

// Read returns the contents of the TOML file at path, after checking that
// it is a regular file of at most MaxBytes and that Check accepts it.
// Errors name the limit, not the path: callers add it.
func Read(path string) ([]byte, error) {
	// Stat before opening: opening a FIFO blocks until it has a writer.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s, not a file", cli.NotRegular(fi.Mode()))
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return nil, err
	}
	// TOML text has no NUL byte: a file that does is something else (a
	// checkpoint given as -model, say), and says what it begins with.
	if head := b[:min(len(b), 512)]; bytes.IndexByte(head, 0) >= 0 {
		return nil, fmt.Errorf("a binary file, not TOML text (it begins %q)", head[:min(len(head), 8)])
	}
	if len(b) > MaxBytes {
		return nil, fmt.Errorf("larger than %d KiB: not a description or configuration hpctrain would write", MaxBytes>>10)
	}
	return b, Check(b)
}

// Check refuses TOML text whose arrays and inline tables nest deeper than
// MaxDepth, counting brackets and braces outside strings and comments.
// It does not otherwise validate the text: the decoder does.
func Check(b []byte) error {
	depth, line := 0, 1
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '\n':
			line++
		case '#':
			for i+1 < len(b) && b[i+1] != '\n' {
				i++
			}
		case '"', '\'':
			// A string to its closing quote (a basic one's escapes
			// skipped). A multi-line string's triple quotes read as an
			// empty string and an opening quote, so its body is skipped
			// the same way.
			for i++; i < len(b) && b[i] != c; i++ {
				switch {
				case b[i] == '\n':
					line++
				case b[i] == '\\' && c == '"' && i+1 < len(b):
					i++
				}
			}
		case '[', '{':
			if depth++; depth > MaxDepth {
				return fmt.Errorf("line %d: arrays and tables nested more than %d deep", line, MaxDepth)
			}
		case ']', '}':
			depth--
		}
	}
	return nil
}
