package tomlfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCheck: nesting is counted outside strings and comments only.
func TestCheck(t *testing.T) {
	deep := "layers = " + strings.Repeat("[{kind='residual', layers=", 40) + "[]" + strings.Repeat("}]", 40) + "\n"
	for _, c := range []struct {
		text string
		bad  bool
	}{
		{"layers = [{kind = \"relu\"}, {kind = \"linear\", out = \"classes\"}]\n", false},
		{"[[layers]]\nkind = \"relu\"\n", false},
		{"a = \"" + strings.Repeat("[", 100) + "\"\n", false},
		{"a = '" + strings.Repeat("{", 100) + "'\n", false},
		{"a = \"\\\"" + strings.Repeat("[", 100) + "\"\n", false},
		{"a = \"\"\"\n" + strings.Repeat("[", 100) + "\n\"\"\"\n", false},
		{"# " + strings.Repeat("[", 100) + "\na = 1\n", false},
		{"a = " + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + "\n", false},
		{"a = " + strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1) + "\n", true},
		{deep, true},
	} {
		err := Check([]byte(c.text))
		if (err != nil) != c.bad {
			t.Errorf("%.60q: %v, want an error %v", c.text, err, c.bad)
		}
		if err != nil && !strings.Contains(err.Error(), "nested more than 64 deep") {
			t.Errorf("%.60q: %v", c.text, err)
		}
	}
}

// TestRead: a FIFO (which nobody writes: opening it to read would block)
// and a directory are refused by their mode, an oversized file by its
// size.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.toml")
	os.WriteFile(ok, []byte("a = 1\n"), 0o644)
	if b, err := Read(ok); err != nil || string(b) != "a = 1\n" {
		t.Errorf("ok: %q, %v", b, err)
	}
	big := filepath.Join(dir, "big.toml")
	os.WriteFile(big, []byte(strings.Repeat("#\n", MaxBytes)), 0o644)
	if _, err := Read(big); err == nil || !strings.Contains(err.Error(), "larger than 256 KiB") {
		t.Errorf("big: %v", err)
	}
	// A checkpoint (binary, larger than the limit) is named as binary,
	// with its first bytes, rather than as too large.
	bin := filepath.Join(dir, "ck.hpck")
	os.WriteFile(bin, append([]byte("\x89HPCKPT\n\x02\x00\x00\x00"), make([]byte, MaxBytes)...), 0o644)
	if _, err := Read(bin); err == nil || !strings.Contains(err.Error(), `a binary file, not TOML text (it begins "\x89HPCKPT\n")`) {
		t.Errorf("binary: %v", err)
	}
	if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "a directory, not a file") {
		t.Errorf("directory: %v", err)
	}
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := Read(fifo); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "a named pipe (FIFO), not a file") {
			t.Errorf("fifo: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Read blocked on a FIFO")
	}
}
