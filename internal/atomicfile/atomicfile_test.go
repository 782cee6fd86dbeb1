package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteWhole(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.bin")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, func(w io.Writer) error { _, err := io.WriteString(w, "new content"); return err }); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "new content" {
		t.Fatalf("read back %q, %v", b, err)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", st.Mode().Perm())
	}
	assertOnly(t, dir, "out.bin")
}

// A failing writer leaves the old file and no temporary file.
func TestWriteFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.bin")
	os.WriteFile(p, []byte("old"), 0o644)
	boom := errors.New("boom")
	err := Write(p, func(w io.Writer) error { io.WriteString(w, "partial"); return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	b, _ := os.ReadFile(p)
	if string(b) != "old" {
		t.Errorf("destination %q, want the old content", b)
	}
	assertOnly(t, dir, "out.bin")

	// A new path: nothing at all afterwards.
	q := filepath.Join(dir, "new.bin")
	if err := Write(q, func(w io.Writer) error { return boom }); err == nil {
		t.Fatal("no error")
	}
	if _, err := os.Stat(q); !os.IsNotExist(err) {
		t.Errorf("%s exists after a failed write", q)
	}
	assertOnly(t, dir, "out.bin")
}

func TestWriteUnwritable(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "missing", "x.onnx"), "no such directory"},
		{dir, "is a directory"},
	} {
		err := Write(c.path, func(w io.Writer) error { return nil })
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Write(%s): %v, want one line with %q", c.path, err, c.want)
		}
	}
	if os.Getuid() != 0 {
		ro := filepath.Join(dir, "ro")
		os.Mkdir(ro, 0o555)
		err := Write(filepath.Join(ro, "x"), func(w io.Writer) error { return nil })
		if err == nil || !strings.Contains(err.Error(), "not writable") {
			t.Errorf("read-only dir: %v", err)
		}
	}
}

func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	es, _ := os.ReadDir(dir)
	var got []string
	for _, e := range es {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("directory holds %v, want %v", got, names)
	}
}
