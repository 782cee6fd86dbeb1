package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// FileName returns the name Save gives the checkpoint of step:
// ckpt-000000012000.hpck. Twelve digits keep names in step order for ls.
func FileName(step int64) string {
	return fmt.Sprintf("ckpt-%012d.hpck", step)
}

// parseName returns the step of a checkpoint file name, or ok = false.
func parseName(name string) (step int64, ok bool) {
	digits, found := strings.CutPrefix(name, "ckpt-")
	if !found {
		return 0, false
	}
	digits, found = strings.CutSuffix(digits, ".hpck")
	if !found || len(digits) < 12 {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	step, err := strconv.ParseInt(digits, 10, 64)
	return step, err == nil
}

// Save writes s to dir/FileName(s.Step) atomically (see the package
// documentation), creating dir if needed, and returns the path. It then
// removes leftover .tmp files and, when keep > 0, the oldest valid
// checkpoints beyond the newest keep; keep <= 0 keeps all. A checkpoint of
// the same step is replaced.
//
// On error no existing checkpoint has been touched. An unusable dir gives
// "checkpoint dir /x: not writable: permission denied" (or "not a
// directory", "read-only file system", ...). Save is for one writer per
// directory: rank 0, while the other ranks wait.
func Save(dir string, s *State, keep int) (path string, err error) {
	checkState(s)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", notWritable(dir, err)
	}
	removeTemps(dir)
	final := filepath.Join(dir, FileName(s.Step))
	tmp, err := os.CreateTemp(dir, fmt.Sprintf("ckpt-%012d-*.tmp", s.Step))
	if err != nil {
		return "", notWritable(dir, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := encode(tmp, s); err != nil {
		return "", fmt.Errorf("save checkpoint %s: write: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("save checkpoint %s: fsync: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("save checkpoint %s: close: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", fmt.Errorf("save checkpoint %s: %w", final, err)
	}
	// Make the rename itself durable. From here the new file exists, so a
	// failure is still reported but the temp file is gone.
	if err := syncDir(dir); err != nil {
		return final, fmt.Errorf("save checkpoint %s: fsync dir: %w", final, err)
	}
	if keep > 0 {
		if err := prune(dir, keep); err != nil {
			return final, fmt.Errorf("save checkpoint %s: prune: %w", final, err)
		}
	}
	return final, nil
}

// notWritable words a failure to create or write in dir.
func notWritable(dir string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("checkpoint dir %s: not writable: %w", dir, err)
}

// syncDir fsyncs a directory. File systems that cannot (EINVAL) are let be.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) {
		err = nil
	}
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// removeTemps deletes the ckpt-*.tmp files an interrupted Save left behind.
// Failing to is harmless (Latest ignores them), so errors are dropped.
func removeTemps(dir string) {
	tmps, _ := filepath.Glob(filepath.Join(dir, "ckpt-*.tmp"))
	for _, t := range tmps {
		os.Remove(t)
	}
}

// candidate is a checkpoint file found in a directory.
type candidate struct {
	path string
	step int64
}

// list returns the *.hpck files of dir, newest step first.
func list(dir string) ([]candidate, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var cs []candidate
	for _, e := range entries {
		if step, ok := parseName(e.Name()); ok && e.Type().IsRegular() {
			cs = append(cs, candidate{filepath.Join(dir, e.Name()), step})
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].step > cs[j].step })
	return cs, nil
}

// prune removes valid checkpoints older than the newest keep valid ones.
func prune(dir string, keep int) error {
	cs, err := list(dir)
	if err != nil {
		return err
	}
	valid := 0
	for _, c := range cs {
		if _, err := loadNamed(c); err != nil {
			continue // never delete what we cannot read
		}
		valid++
		if valid > keep {
			if err := os.Remove(c.path); err != nil {
				return err
			}
		}
	}
	return nil
}

// loadNamed loads c and checks that its header agrees with its name.
func loadNamed(c candidate) (*State, error) {
	s, err := Load(c.path)
	if err != nil {
		return nil, err
	}
	if s.Step != c.step {
		return nil, fmt.Errorf("load checkpoint %s: %w: file name says step %d, header says %d", c.path, ErrFormat, c.step, s.Step)
	}
	return s, nil
}

// Latest returns the valid checkpoint with the highest step in dir and its
// path. Files that fail to load are skipped, each reported through warn
// (which may be nil) with its path and reason. A missing dir, or one
// without a valid checkpoint, gives (nil, "", nil); an unreadable dir is an
// error.
func Latest(dir string, warn func(msg string)) (*State, string, error) {
	cs, err := list(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("find latest checkpoint: %w", err)
	}
	for _, c := range cs {
		s, err := loadNamed(c)
		if err == nil {
			return s, c.path, nil
		}
		if warn != nil {
			warn("skipping unusable checkpoint: " + err.Error())
		}
	}
	return nil, "", nil
}
