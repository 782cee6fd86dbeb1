//go:build linux

package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// scriptsDir is scripts/cluster as an absolute path (tests run in cluster/).
var scriptsDir = func() string {
	d, err := filepath.Abs(filepath.Join("..", "scripts", "cluster"))
	if err != nil {
		panic(err)
	}
	return d
}()

// lockPath serialises clusters between processes: the namespace names are
// fixed (hpct-*), so two `go test` runs on one machine must take turns.
const lockPath = "/run/lock/hpct-cluster.lock"

// held is the lock of the cluster this process has up, nil when none.
var held struct {
	sync.Mutex
	f *os.File
}

func TestMain(m *testing.M) {
	// The tests look at hpct-* namespaces and lock lockPath, hpct's: a
	// cluster name of the caller's own (HPCT_CLUSTER) would reach the scripts
	// and mpirun.sh through the environment but not them.
	os.Setenv("HPCT_CLUSTER", "hpct")
	// The trap: an interrupt or termination tears our cluster down first.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "cluster: %v: tearing the test cluster down\n", s)
		release(true)
		os.Exit(2)
	}()
	code := m.Run()
	release(true) // normally a no-op: every test's Cleanup already did this
	os.Exit(code)
}

// upCluster starts a cluster of n hosts node1..nodeN with scripts/cluster/up.sh
// for the rest of t (down.sh runs in t.Cleanup, also when t fails) and returns
// the absolute path of scripts/cluster/mpirun.sh, which runs mpirun on node1:
//
//	mpirun := upCluster(t, 2)
//	out := runMPI(t, mpirun, nil, "-np", "4", "--host", "node1:2,node2:2", bin, "train", ...)
//
// Every host sees the same filesystem, so a binary built into t.TempDir()
// runs on all of them; remote ranks get a login-like environment, so pass
// variables the program needs with "-x NAME" or HPCT_EXPORT (see mpirun.sh).
// It skips with -short, without root, and when the kernel refuses network
// namespaces. Tests that call it must not be parallel.
func upCluster(t *testing.T, n int) (mpirun string) {
	t.Helper()
	lockCluster(t)
	start := time.Now()
	out, err := script(60*time.Second, nil, "up.sh", fmt.Sprint(n))
	if err != nil {
		if strings.Contains(out, "Operation not permitted") {
			t.Skipf("kernel refuses network namespaces here:\n%s", out)
		}
		t.Fatalf("up.sh %d: %v\n%s", n, err, out)
	}
	t.Logf("cluster of %d hosts up in %v", n, time.Since(start).Round(time.Millisecond))
	return filepath.Join(scriptsDir, "mpirun.sh")
}

// lockCluster is upCluster without up.sh: it skips as upCluster does, takes
// the cluster lock for the rest of t and runs down.sh in t.Cleanup, for tests
// that run up.sh themselves.
func lockCluster(t *testing.T) {
	t.Helper()
	needCluster(t)
	if err := acquire(50 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := release(false); err != nil {
			t.Errorf("down.sh: %v\n%s", err, out)
		}
	})
}

// needCluster skips t as upCluster does: with -short or without root. No
// mpirun fails it: scripts/setup.sh (make test) installs Open MPI, so a
// skip would only hide a broken install.
func needCluster(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: not starting a multi-host test cluster")
	}
	if os.Geteuid() != 0 {
		t.Skip("the test cluster needs root (network namespaces)")
	}
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Fatal("no mpirun in PATH: run scripts/setup.sh, which installs Open MPI")
	}
}

// script runs scripts/cluster/NAME with args and returns its combined output.
func script(timeout time.Duration, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(scriptsDir, name), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// acquire takes lockPath, waiting up to wait for another process's cluster.
// The file is removed again by release; the inode check below makes that safe.
func acquire(wait time.Duration) error {
	held.Lock()
	defer held.Unlock()
	if held.f != nil {
		return errors.New("upCluster: a cluster is already up in this process (tests using it must not run in parallel)")
	}
	deadline := time.Now().Add(wait)
	for {
		f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("upCluster: %v", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			// Still the file at lockPath? (Its holder may have removed it
			// between our open and our flock.)
			var a, b syscall.Stat_t
			if syscall.Fstat(int(f.Fd()), &a) == nil && syscall.Stat(lockPath, &b) == nil && a.Ino == b.Ino && a.Dev == b.Dev {
				held.f = f
				return nil
			}
		}
		f.Close()
		if time.Now().After(deadline) {
			return fmt.Errorf("upCluster: another process has held %s (its cluster) for %v", lockPath, wait)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// release runs down.sh and drops the lock if this process holds one.
// quiet: called from TestMain or the signal handler, where no t exists.
func release(quiet bool) (string, error) {
	held.Lock()
	defer held.Unlock()
	if held.f == nil {
		return "", nil
	}
	out, err := script(30*time.Second, nil, "down.sh")
	if err != nil && quiet {
		fmt.Fprintf(os.Stderr, "cluster: down.sh: %v\n%s", err, out)
	}
	os.Remove(lockPath) // before unlocking: waiters then see a new inode and retry
	held.f.Close()
	held.f = nil
	return out, err
}

// runMPI runs mpirun.sh (from upCluster) with args and extra environment
// entries env ("NAME=value"), at most 60 s, and returns its standard output;
// it fails t with both outputs if mpirun fails.
func runMPI(t *testing.T, mpirun string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, mpirun, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("mpirun.sh %s: %v (after %v)\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err,
			time.Since(start).Round(time.Millisecond), out.String(), errb.String())
	}
	t.Logf("mpirun.sh %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	return out.String()
}

// buildProbe builds testdata/mpiprobe into a temporary directory.
func buildProbe(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mpiprobe")
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/mpiprobe")
	if _, ok := os.LookupEnv("GOTOOLCHAIN"); !ok {
		cmd.Env = append(os.Environ(), "GOTOOLCHAIN=auto") // go.mod's go line, also when run without `go test`
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build mpiprobe: %v\n%s", err, out)
	}
	return bin
}
