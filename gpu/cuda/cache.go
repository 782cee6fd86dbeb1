package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"hpctrain/internal/atomicfile"
)

// CacheDir returns the directory of compiled kernels:
// $HPCTRAIN_KERNEL_CACHE, else os.UserCacheDir()/hpctrain/kernels.
func CacheDir() (string, error) {
	if d := os.Getenv("HPCTRAIN_KERNEL_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("cuda: kernel cache: %w (set HPCTRAIN_KERNEL_CACHE)", err)
	}
	return filepath.Join(d, "hpctrain", "kernels"), nil
}

// cacheKey names a compilation: sha256 of the source, the architecture,
// the options and the NVRTC version, each length-prefixed so that no two
// different inputs run together into one.
func cacheKey(src, arch string, opts []string, nvrtcMajor, nvrtcMinor int) string {
	h := sha256.New()
	field := func(s string) {
		io.WriteString(h, strconv.Itoa(len(s))+":"+s)
	}
	field("hpctrain-ptx-1")
	field(src)
	field(arch)
	field(strconv.Itoa(len(opts)))
	for _, o := range opts {
		field(o)
	}
	field(fmt.Sprintf("nvrtc %d.%d", nvrtcMajor, nvrtcMinor))
	return hex.EncodeToString(h.Sum(nil))
}

// CompileModule compiles src with NVRTC for c's device
// (--gpu-architecture=compute_XY from its compute capability, or the newest
// NVRTC has below it: CompileArch; then opts) and loads it. The PTX is cached on disk under CacheDir, keyed by the
// sha256 of src, the architecture, opts and the NVRTC version, and written
// atomically (a temporary file renamed), so concurrent processes share it.
// A cached PTX that fails to load is compiled again and replaced. A cache
// that cannot be read or written only costs a compilation.
func (c *Context) CompileModule(name, src string, opts ...string) (*Module, error) {
	major, minor, err := NVRTCVersion()
	if err != nil {
		return nil, err
	}
	archs, err := NVRTCArchs()
	if err != nil {
		return nil, err
	}
	arch, err := CompileArch(10*c.major+c.minor, archs, major, minor)
	if err != nil {
		return nil, err
	}
	var path string
	if dir, err := CacheDir(); err == nil {
		path = filepath.Join(dir, cacheKey(src, arch, opts, major, minor)+".ptx")
		if ptx, err := os.ReadFile(path); err == nil {
			if m, err := c.LoadModule(ptx); err == nil {
				return m, nil
			}
		}
	}
	ptx, _, err := Compile(name, src, arch, opts...)
	if err != nil {
		return nil, err
	}
	m, err := c.LoadModule(ptx)
	if err != nil {
		return nil, fmt.Errorf("%w (module %s, compiled for %s)", err, name, arch)
	}
	if path != "" && os.MkdirAll(filepath.Dir(path), 0o755) == nil {
		// A failed write leaves the cache as it was: the next run compiles again.
		_ = atomicfile.Write(path, func(w io.Writer) error {
			_, err := w.Write(ptx)
			return err
		})
	}
	return m, nil
}
