package cudanet

import (
	"runtime"
	"sync"
	"testing"

	"hpctrain/internal/cudaemu"
)

func TestMain(m *testing.M) { cudaemu.Main(m, "gpu/cudanet") }

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
