package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Write creates or replaces path with what write writes, with permissions
// 0644. The error names path and what failed, for example "write
// out/m.onnx: not writable: permission denied" or "write out/m.onnx: no
// such directory out".
//
// A symbolic link is followed: the file it names is replaced (or
// created), and the link stays. A path that names something other than a
// regular file or a directory (a device such as /dev/null, a named pipe, a
// socket) is written to in place, as a shell's redirection would, since it
// cannot be replaced: such a write is not all or nothing.
func Write(path string, write func(w io.Writer) error) (err error) {
	if inPlaceOnly(path) {
		return inPlace(path, write)
	}
	if path, err = target(path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: not writable: %w", path, cause(err))
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		return named(path, tmp.Name(), err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, cause(err))
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, cause(err))
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, cause(err))
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, cause(err))
	}
	return nil
}

// Check reports, before any work is done, whether Write(path, ...) could
// write there: path (links followed) is not a directory, and its
// directory exists and takes new files. The error says what is wrong
// without naming path ("is a directory", "no such directory out"), for
// the caller to name the flag or key.
func Check(path string) error {
	if inPlaceOnly(path) {
		return nil // opened when written; nothing to create beside it
	}
	path, err := target(path)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".hpctrain-probe-*")
	if err != nil {
		return fmt.Errorf("not writable: %w", cause(err))
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// target is the file Write replaces for path (links followed), checked to
// be no directory and to lie in an existing directory; the error, which
// does not name path, says which of these fails.
func target(path string) (string, error) {
	path, err := follow(path)
	if err != nil {
		return path, err
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return path, errors.New("is a directory")
	}
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil {
		return path, fmt.Errorf("no such directory %s", dir)
	} else if !st.IsDir() {
		return path, fmt.Errorf("%s is not a directory", dir)
	}
	return path, nil
}

// inPlaceOnly reports whether path, links followed by the kernel, names
// something that is neither a regular file nor a directory (a device, a
// named pipe, /dev/stdout on a pipe): written where it is, never replaced.
func inPlaceOnly(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && !st.Mode().IsRegular()
}

// follow is the file that path names once symbolic links are followed,
// which may not exist yet (a link to a file still to be written). An
// existing file is resolved by filepath.EvalSymlinks; for one still to
// come, each link's relative target is taken from the link's real
// directory (a link inside a linked directory points from there).
func follow(path string) (string, error) {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		return real, nil
	}
	for hops := 0; ; hops++ {
		st, err := os.Lstat(path)
		if err != nil || st.Mode()&fs.ModeSymlink == 0 {
			return path, nil
		}
		if hops == 40 {
			return path, errors.New("too many symbolic links")
		}
		t, err := os.Readlink(path)
		if err != nil {
			return path, cause(err)
		}
		if !filepath.IsAbs(t) {
			dir := filepath.Dir(path)
			if real, err := filepath.EvalSymlinks(dir); err == nil {
				dir = real
			}
			t = filepath.Join(dir, t)
		}
		path = t
	}
}

// inPlace writes to the existing non-regular file path (a device, a named
// pipe).
func inPlace(path string, write func(w io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("write %s: not writable: %w", path, cause(err))
	}
	if err := write(f); err != nil {
		f.Close()
		return named(path, path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, cause(err))
	}
	return nil
}

// named is the error of write on file name (the temporary file, or path
// itself) as an error of path: an *fs.PathError of name becomes "write
// path: its cause", so the message names what the user asked for; any
// other error is write's own and is returned as it is.
func named(path, name string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == name {
		return fmt.Errorf("write %s: %w", path, pe.Err)
	}
	return err
}

// cause drops an *fs.PathError's operation and (temporary) path.
func cause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}
