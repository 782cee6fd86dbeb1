package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
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

// Parse parses args with fs. With -h or -help it prints fs's usage to help
// and returns flag.ErrHelp. A malformed or unknown flag returns a
// UsageError of one line, "<flag's complaint> (see NAME -h)",
// without printing the usage. Arguments after the flags are refused
// unless positional is true.
func Parse(fs *flag.FlagSet, args []string, help io.Writer, positional bool) error {
	fs.SetOutput(io.Discard) // the flag package would print the whole usage on any error
	err := fs.Parse(args)
	fs.SetOutput(help)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return flag.ErrHelp
	case err != nil:
		return UsageError{fmt.Errorf("%s (see %s -h)", strings.TrimSpace(err.Error()), fs.Name())}
	case !positional && fs.NArg() > 0:
		return UsageError{fmt.Errorf("unexpected argument %q (flags start with -; see %s -h)", fs.Arg(0), fs.Name())}
	}
	return nil
}
