package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// Lock makes this process the directory's only writer for as long as it
// runs: an exclusive flock(2) on the directory itself (no file is added
// to it), which the kernel releases when the process ends however it
// ends, so a requeued job finds it free. A second job on the same
// directory, started while the first runs (an sbatch submitted twice, a
// requeue that overlaps), is refused with an ErrInUse error, instead of
// both saving, pruning and removing each other's files. Save is for one
// writer: Lock is how the writer makes sure of it.
//
// Where the file system cannot lock a directory (some network file
// systems), Lock holds nothing and returns no error: the run goes on as
// it did before there was a lock. Within one process the lock is shared
// (the ranks of a test job, run as goroutines, are one job): the
// directory is unlocked when every release has been called.
func Lock(dir string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, notWritable(dir, err)
	}
	key, err := filepath.EvalSymlinks(dir) // one directory, however spelled
	if err == nil {
		key, err = filepath.Abs(key)
	}
	if err != nil {
		key = dir
	}
	locks.Lock()
	defer locks.Unlock()
	f, err := os.Open(dir)
	if err != nil {
		return nil, notWritable(dir, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, notWritable(dir, err)
	}
	// A hold of a directory since removed (and perhaps made again) is not
	// a hold of the one there now.
	if h := locks.held[key]; h != nil && os.SameFile(h.fi, fi) {
		f.Close()
		h.n++
		return h.release(key), nil
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("checkpoint dir %s %w: another job is writing checkpoints there now; wait for it to end, or use another -checkpoint-dir", dir, ErrInUse)
		}
		return func() {}, nil // no locks on this file system
	}
	h := &heldLock{f: f, fi: fi, n: 1}
	locks.held[key] = h
	return h.release(key), nil
}

// locks are the directories this process holds, by absolute path.
var locks = struct {
	sync.Mutex
	held map[string]*heldLock
}{held: map[string]*heldLock{}}

type heldLock struct {
	f  *os.File
	fi os.FileInfo // the directory locked
	n  int         // releases still to come
}

// release returns the function that gives up one hold of key (once).
func (h *heldLock) release(key string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			locks.Lock()
			defer locks.Unlock()
			if h.n--; h.n == 0 {
				syscall.Flock(int(h.f.Fd()), syscall.LOCK_UN)
				h.f.Close()
				if locks.held[key] == h {
					delete(locks.held, key)
				}
			}
		})
	}
}
