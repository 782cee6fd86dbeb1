package cli

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"
)

func newFS() (*flag.FlagSet, *int) {
	fs := flag.NewFlagSet("hpctrain x", flag.ContinueOnError)
	n := fs.Int("n", 1, "a number")
	return fs, n
}

func TestParse(t *testing.T) {
	var out bytes.Buffer
	fs, n := newFS()
	if err := Parse(fs, []string{"-n", "3"}, &out, false); err != nil || *n != 3 {
		t.Fatalf("good flags: err %v, n %d", err, *n)
	}

	out.Reset()
	fs, _ = newFS()
	err := Parse(fs, []string{"-bogus"}, &out, false)
	var ue UsageError
	if !errors.As(err, &ue) {
		t.Fatalf("unknown flag: %v is not a UsageError", err)
	}
	if out.Len() != 0 {
		t.Errorf("unknown flag printed the usage:\n%s", out.String())
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "-bogus") || !strings.Contains(msg, "hpctrain x -h") {
		t.Errorf("unknown flag: message %q should be one line naming -bogus and pointing to -h", msg)
	}

	out.Reset()
	fs, _ = newFS()
	if err := Parse(fs, []string{"-h"}, &out, false); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v, want flag.ErrHelp", err)
	}
	if !strings.Contains(out.String(), "a number") {
		t.Errorf("-h did not print the flags: %q", out.String())
	}

	fs, _ = newFS()
	if err := Parse(fs, []string{"extra"}, &out, false); !errors.As(err, &ue) {
		t.Errorf("positional argument: %v, want a UsageError", err)
	}
	fs, _ = newFS()
	if err := Parse(fs, []string{"extra"}, &out, true); err != nil {
		t.Errorf("positional argument allowed: %v", err)
	}
}

func TestNotRegular(t *testing.T) {
	for path, want := range map[string]string{"/": "a directory", "/dev/null": "a device"} {
		st, err := os.Stat(path)
		if err != nil {
			t.Skipf("%s: %v", path, err)
		}
		if got := NotRegular(st.Mode()); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
}

// TestOwnFlag: -name, --name and -name=value are found, values and other
// flags are not.
func TestOwnFlag(t *testing.T) {
	for _, c := range []struct {
		args      []string
		arg, name string
	}{
		{[]string{"-epochs", "3", "-threads", "1"}, "-threads", "threads"},
		{[]string{"--metrics=m.jsonl"}, "--metrics=m.jsonl", "metrics"},
		{[]string{"-epochs", "threads"}, "", ""},
		{[]string{"-threadsx", "1"}, "", ""},
		{nil, "", ""},
	} {
		if a, n := OwnFlag(c.args, "threads", "metrics"); a != c.arg || n != c.name {
			t.Errorf("%q: %q %q, want %q %q", c.args, a, n, c.arg, c.name)
		}
	}
}

// TestParseHelpOutput: a usage that was asked for goes to HelpOutput
// (main's standard output) when it is set, and nothing of it to stderr;
// a bad flag still prints nothing but returns its one-line UsageError.
func TestParseHelpOutput(t *testing.T) {
	var help, stderr bytes.Buffer
	HelpOutput = &help
	t.Cleanup(func() { HelpOutput = nil })
	for _, h := range []string{"-h", "-help", "--help"} {
		help.Reset()
		fs, _ := newFS()
		if err := Parse(fs, []string{h}, &stderr, false); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s: %v, want flag.ErrHelp", h, err)
		}
		if !strings.Contains(help.String(), "a number") || stderr.Len() != 0 {
			t.Errorf("%s: help output %q, stderr %q; want the usage in the help output alone", h, help.String(), stderr.String())
		}
		if fs.Output() != &stderr {
			t.Errorf("%s: the flag set's output is left at the help output", h)
		}
	}
	help.Reset()
	fs, _ := newFS()
	if err := Parse(fs, []string{"-bogus"}, &stderr, false); !errors.As(err, new(UsageError)) || help.Len() != 0 || stderr.Len() != 0 {
		t.Errorf("-bogus: %v, help output %q, stderr %q; want a UsageError and nothing printed", err, help.String(), stderr.String())
	}
}
