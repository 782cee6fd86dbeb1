package checkpoint

import (
	"errors"
	"os"
	"syscall"
	"testing"
)

// Lock refuses a directory another open file description holds (another
// job: flock is per open file), shares it within this process, and lets
// it go when every hold is released.
func TestLock(t *testing.T) {
	dir := t.TempDir()
	other, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Skipf("no flock on directories here: %v", err)
	}
	if _, err := Lock(dir); !errors.Is(err, ErrInUse) {
		t.Fatalf("held by another: %v, want ErrInUse", err)
	}
	syscall.Flock(int(other.Fd()), syscall.LOCK_UN)

	r1, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := Lock(dir) // the same process: shared
	if err != nil {
		t.Fatal(err)
	}
	r1()
	r1() // once only
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		t.Fatal("released while a hold remains")
	}
	r2()
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("still held after every release: %v", err)
	}
	if es, _ := os.ReadDir(dir); len(es) != 0 {
		t.Errorf("the lock left %d files in the directory", len(es))
	}
}
