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
func Write(path string, write func(w io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	if st, serr := os.Stat(path); serr == nil && st.IsDir() {
		return fmt.Errorf("write %s: is a directory", path)
	}
	if st, serr := os.Stat(dir); serr != nil || !st.IsDir() {
		return fmt.Errorf("write %s: no such directory %s (create it first)", path, dir)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
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
		return err
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
