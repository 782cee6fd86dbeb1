// Package mpitest starts test programs under the real mpirun, so that
// integration tests of every package launch ranks the way users do.
package mpitest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Command returns an mpirun command that starts np copies of prog with args.
// It adds what this workplace needs: permission to run as root (only when
// uid is 0), --oversubscribe (tests start more ranks than the 2 cores) and
// --bind-to none, so that placement is the program's own.
func Command(ctx context.Context, np int, prog string, args ...string) *exec.Cmd {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		mpirun = "mpirun" // the command fails with a clear "not found"
	}
	a := []string{"-np", strconv.Itoa(np), "--oversubscribe", "--bind-to", "none", prog}
	cmd := exec.CommandContext(ctx, mpirun, append(a, args...)...)
	cmd.Env = Env()
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Env is the environment for mpirun: the process's own, plus the root
// permission variables when running as root.
func Env() []string {
	env := os.Environ()
	if os.Getuid() == 0 {
		env = append(env, "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	}
	return env
}

// Run runs prog under mpirun with np ranks, failing t with the combined
// output if it exits non-zero or takes longer than timeout.
func Run(t testing.TB, timeout time.Duration, np int, prog string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := Command(ctx, np, prog, args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("mpirun -np %d %s %v: timed out after %v\n%s", np, prog, args, timeout, out)
	}
	if err != nil {
		t.Fatalf("mpirun -np %d %s %v: %v\n%s", np, prog, args, err, out)
	}
	return string(out)
}

// Buffer collects a running job's output: safe to read while mpirun writes.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
