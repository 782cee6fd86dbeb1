package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
)

// UsageError marks an error in what the user asked for (bad flags, bad
// configuration): main turns it into exit code 2.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usage wraps err as a UsageError (nil stays nil).
func Usage(err error) error {
	if err == nil {
		return nil
	}
	return UsageError{err}
}

// HelpOutput, where set, is where Parse prints a usage that was asked for
// (-h, -help, --help), instead of the writer Parse is given. main sets it
// to standard output, where the top-level help goes: help that was asked
// for is the command's output (hpctrain train -h | less) and exits 0,
// while a bad flag is an error, one line on standard error, exit 2.
// Commands give Parse their standard error, so where HelpOutput is not set
// (a command called from a test) the usage goes there.
var HelpOutput io.Writer

// Parse parses args with fs. With -h, -help or --help it prints fs's usage
// to HelpOutput, or where that is not set to stderr, and returns
// flag.ErrHelp. A malformed or unknown flag returns a UsageError of one
// line, "<flag's complaint> (see NAME -h)", without printing the usage.
// Arguments after the flags are refused unless positional is true. fs's
// output is stderr afterwards.
func Parse(fs *flag.FlagSet, args []string, stderr io.Writer, positional bool) error {
	fs.SetOutput(io.Discard) // the flag package would print the whole usage on any error
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		if HelpOutput != nil {
			fs.SetOutput(HelpOutput)
			defer fs.SetOutput(stderr)
		}
		fs.Usage()
		return flag.ErrHelp
	case err != nil:
		return UsageError{fmt.Errorf("%s (see %s -h)", strings.TrimSpace(err.Error()), fs.Name())}
	case !positional && fs.NArg() > 0:
		return UsageError{fmt.Errorf("unexpected argument %q (flags start with -; see %s -h)", fs.Arg(0), fs.Name())}
	}
	return nil
}

// NotRegular says in words what a path of mode m is, for a message where a
// regular file was wanted: "a directory", "a named pipe (FIFO)", ...
// (fs.FileMode's "d---------" means little to a reader).
func NotRegular(m fs.FileMode) string {
	switch t := m.Type(); {
	case t&fs.ModeDir != 0:
		return "a directory"
	case t&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeCharDevice != 0 || t&fs.ModeDevice != 0:
		return "a device"
	case t&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return fmt.Sprintf("not a regular file (%v)", m.Type())
}

// OwnFlag returns the first of args that is one of the flags names
// (-name, --name or -name=value), and that name, or "", "" if none is: for
// a command that passes args on to another (hpctrain train) and sets those
// flags itself.
func OwnFlag(args []string, names ...string) (arg, name string) {
	for _, a := range args {
		n, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && slices.Contains(names, n) {
			return a, n
		}
	}
	return "", ""
}
