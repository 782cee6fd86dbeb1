package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// A symbolic link is followed: its target gets the content, and the link
// stays a link. One to nowhere is refused in one line.
func TestWriteThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	target, link := filepath.Join(dir, "real.bin"), filepath.Join(dir, "link.bin")
	os.WriteFile(target, []byte("old"), 0o644)
	if err := os.Symlink("real.bin", link); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	if err := Write(link, func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "new" {
		t.Errorf("target holds %q, want new", b)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v, %v", st.Mode(), err)
	}
	assertOnly(t, dir, "link.bin", "real.bin")

	// A link to a file still to be written: the file is created.
	os.Symlink("later.bin", filepath.Join(dir, "next.bin"))
	if err := Write(filepath.Join(dir, "next.bin"), func(w io.Writer) error { _, err := io.WriteString(w, "x"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "later.bin")); string(b) != "x" {
		t.Errorf("the link's target holds %q, want x", b)
	}
	// One into a directory that does not exist, and a loop: one line each.
	os.Symlink(filepath.Join(dir, "nowhere", "x"), filepath.Join(dir, "dangling"))
	os.Symlink("loop", filepath.Join(dir, "loop"))
	for _, c := range []struct{ name, want string }{{"dangling", "no such directory"}, {"loop", "too many symbolic links"}} {
		err := Write(filepath.Join(dir, c.name), func(w io.Writer) error { return nil })
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line with %q", c.name, err, c.want)
		}
	}
}

// A named pipe (like a device) is written in place: it is still a pipe
// afterwards and its reader got every byte.
func TestWriteNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	want := strings.Repeat("0123456789", 100000) // more than a pipe holds
	got := make(chan string, 1)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(f)
		f.Close()
		got <- string(b)
	}()
	if err := Write(fifo, func(w io.Writer) error { _, err := io.WriteString(w, want); return err }); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&fs.ModeNamedPipe == 0 {
		t.Fatalf("the pipe was replaced: %v, %v", st.Mode(), err) // (its reader waits on forever)
	}
	if g := <-got; g != want {
		t.Errorf("reader got %d bytes, want %d", len(g), len(want))
	}
	assertOnly(t, dir, "pipe")
}

// A failed write of the temporary file is reported under the path asked
// for, not the temporary file's name.
func TestWriteErrorNamesPath(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.onnx")
	err := Write(p, func(w io.Writer) error {
		return &fs.PathError{Op: "write", Path: w.(*os.File).Name(), Err: syscall.ENOSPC}
	})
	if err == nil || err.Error() != "write "+p+": "+syscall.ENOSPC.Error() || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("got %v, want write %s: %v", err, p, syscall.ENOSPC)
	}
	assertOnly(t, dir)
}

// Check says beforehand what Write would find: a directory, a missing
// directory, a link into one; and nothing for a path Write can create.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "file"), nil, 0o644)
	os.Symlink(filepath.Join(dir, "nowhere", "x"), filepath.Join(dir, "dangling"))
	for _, c := range []struct{ path, want string }{
		{dir, "is a directory"},
		{filepath.Join(dir, "missing", "x.onnx"), "no such directory " + filepath.Join(dir, "missing")},
		{filepath.Join(dir, "file", "x.onnx"), filepath.Join(dir, "file") + " is not a directory"},
		{filepath.Join(dir, "dangling"), "no such directory " + filepath.Join(dir, "nowhere")},
		{filepath.Join(dir, "new.onnx"), ""},
	} {
		err := Check(c.path)
		if c.want == "" && err != nil || c.want != "" && (err == nil || err.Error() != c.want) {
			t.Errorf("Check(%s): %v, want %q", c.path, err, c.want)
		}
	}
	assertOnly(t, dir, "dangling", "file")
}

// A link inside a linked directory points from the directory's real
// place: out -> real/out, out/x.png -> ../figs/x.png names real/figs/x.png.
// Check passes a device (nothing to create beside it), and Write writes
// /dev/stdout where it is, whatever it resolves to.
func TestLinksFromRealDirectory(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "real", "out"), 0o755)
	os.MkdirAll(filepath.Join(dir, "real", "figs"), 0o755)
	os.Symlink(filepath.Join(dir, "real", "out"), filepath.Join(dir, "out"))
	os.Symlink(filepath.Join("..", "figs", "x.png"), filepath.Join(dir, "real", "out", "x.png"))
	if err := Write(filepath.Join(dir, "out", "x.png"), func(w io.Writer) error { _, err := io.WriteString(w, "png"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "real", "figs", "x.png")); err != nil || string(b) != "png" {
		t.Errorf("real/figs/x.png: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "figs")); err == nil {
		t.Error("wrote beside the link instead of beside its directory's real place")
	}
	if _, err := os.Stat("/dev/null"); err == nil {
		if err := Check("/dev/null"); err != nil {
			t.Errorf("Check(/dev/null): %v", err)
		}
	}
}
