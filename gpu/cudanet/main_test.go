package cudanet

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"hpctrain/internal/cudaemu"
)

// emuEnv holds the emulated device's directory in the process that runs
// the tests; without it TestMain builds the emulator and runs the tests
// again in a process whose LD_LIBRARY_PATH names it (dlopen reads
// LD_LIBRARY_PATH only when a process starts).
const emuEnv = "HPCTRAIN_CUDANET_TEST_EMU"

func TestMain(m *testing.M) {
	if os.Getenv(emuEnv) == "" {
		dir, err := cudaemu.Dir()
		if err != nil {
			fmt.Fprintln(os.Stderr, "gpu/cudanet tests: the emulated device:", err)
			os.Exit(1)
		}
		cmd := exec.Command(os.Args[0], os.Args[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.Env = append(os.Environ(), emuEnv+"="+dir, "LD_LIBRARY_PATH="+dir)
		if os.Getenv("HPCTRAIN_KERNEL_CACHE") == "" {
			// The emulator compiles a module with g++: keep it across runs.
			cache := filepath.Join(os.TempDir(), fmt.Sprintf("hpctrain-cudanet-test-kernels-%d", os.Getuid()))
			cmd.Env = append(cmd.Env, "HPCTRAIN_KERNEL_CACHE="+cache)
		}
		if err := cmd.Run(); err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				os.Exit(ee.ExitCode())
			}
			fmt.Fprintln(os.Stderr, "gpu/cudanet tests: re-run with LD_LIBRARY_PATH:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var (
	devOnce sync.Once
	dev     *Device
	devErr  error
)

// device opens emulated device 0 once for the whole test binary and binds
// its context on the calling test's thread (locked for the test).
func device(t *testing.T) *Device {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	devOnce.Do(func() { dev, devErr = Open(0) })
	if devErr != nil {
		t.Fatal(devErr)
	}
	if err := dev.Context().Bind(); err != nil {
		t.Fatal(err)
	}
	return dev
}
