package cudaemu

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

//go:embed csrc/*.h csrc/*.c
var sources embed.FS

// Libraries are the file names (and sonames) of the libraries Build
// writes, in build order.
var Libraries = []string{"libcuda.so.1", "libcublas.so.12", "libnvrtc.so.12", "libnccl.so.2"}

// buildVersion changes when Build's commands change in a way the sources
// do not show.
const buildVersion = "1"

var (
	dirMu  sync.Mutex
	dirHit string
)

// Dir returns a directory holding the four emulated libraries, building
// them on first use into os.TempDir()/hpctrain-cudaemu-<uid>-<hash of the
// sources>. The directory appears complete or not at all (a build goes to a
// temporary directory renamed into place), so concurrent processes are
// safe. Put it first in LD_LIBRARY_PATH of a process started afterwards.
func Dir() (string, error) {
	dirMu.Lock()
	defer dirMu.Unlock()
	if dirHit != "" {
		return dirHit, nil
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("hpctrain-cudaemu-%d-%s", os.Getuid(), sourceHash()[:16]))
	if complete(dir) {
		dirHit = dir
		return dir, nil
	}
	tmp, err := os.MkdirTemp(os.TempDir(), "hpctrain-cudaemu-build-")
	if err != nil {
		return "", fmt.Errorf("cudaemu: %w", err)
	}
	if err := Build(tmp); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		if !complete(dir) { // another process did not win the race either
			return "", fmt.Errorf("cudaemu: %w", err)
		}
	}
	dirHit = dir
	return dir, nil
}

// complete reports whether dir holds every library.
func complete(dir string) bool {
	for _, l := range Libraries {
		if _, err := os.Stat(filepath.Join(dir, l)); err != nil {
			return false
		}
	}
	return true
}

func sourceHash() string {
	h := sha256.New()
	h.Write([]byte(buildVersion))
	names, _ := fs.Glob(sources, "csrc/*")
	sort.Strings(names)
	for _, n := range names {
		b, _ := sources.ReadFile(n)
		fmt.Fprintf(h, "%s %d\n", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Build compiles the four libraries into dir (created if missing) with
// gcc, OpenBLAS and Open MPI (found with pkg-config, else mpicc
// --showme), their sources going to dir/src.
func Build(dir string) error {
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return fmt.Errorf("cudaemu: %w", err)
	}
	names, _ := fs.Glob(sources, "csrc/*")
	for _, n := range names {
		b, _ := sources.ReadFile(n)
		if err := os.WriteFile(filepath.Join(src, path.Base(n)), b, 0o644); err != nil {
			return fmt.Errorf("cudaemu: %w", err)
		}
	}
	shim, _ := sources.ReadFile("csrc/shim.h")
	if err := os.WriteFile(filepath.Join(src, "cudaemu_shim.inc"), []byte(cString("shim_text", shim)), 0o644); err != nil {
		return fmt.Errorf("cudaemu: %w", err)
	}
	mpiFlags, err := mpiFlags()
	if err != nil {
		return err
	}
	blas := strings.Fields(pkgConfig("--libs", "openblas"))
	if len(blas) == 0 {
		blas = []string{"-lopenblas"}
	}
	cuda := []string{"-L" + dir, "-l:libcuda.so.1", "-Wl,-rpath,$ORIGIN"}
	extra := map[string][]string{
		"libcuda.so.1":    {"cuda.c", "-ldl", "-lpthread"},
		"libcublas.so.12": append(append([]string{"cublas.c"}, cuda...), blas...),
		"libnvrtc.so.12":  {"nvrtc.c"},
		"libnccl.so.2":    append(append([]string{"nccl.c"}, cuda...), mpiFlags...),
	}
	for _, lib := range Libraries {
		args := []string{"-O2", "-fPIC", "-shared", "-Wall", "-fvisibility=hidden",
			"-Wl,-soname," + lib, "-o", filepath.Join(dir, lib)}
		args = append(args, extra[lib]...)
		cmd := exec.Command("gcc", args...)
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("cudaemu: build %s: gcc %s: %v\n%s", lib, strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// mpiFlags returns the compile and link flags of Open MPI's C library.
func mpiFlags() ([]string, error) {
	if f := pkgConfig("--cflags", "--libs", "ompi-c"); f != "" {
		return strings.Fields(f), nil
	}
	c, err1 := exec.Command("mpicc", "--showme:compile").Output()
	l, err2 := exec.Command("mpicc", "--showme:link").Output()
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("cudaemu: no MPI for the emulated NCCL: neither pkg-config ompi-c nor mpicc --showme works (%v); install libopenmpi-dev", err)
	}
	return strings.Fields(string(c) + " " + string(l)), nil
}

// pkgConfig returns pkg-config's output, or "" when it fails.
func pkgConfig(args ...string) string {
	out, err := exec.Command("pkg-config", args...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// cString returns a C definition of the constant string name holding b.
func cString(name string, b []byte) string {
	var s strings.Builder
	s.WriteString("static const char " + name + "[] =\n\t\"")
	for _, c := range b {
		switch {
		case c == '\n':
			s.WriteString("\\n\"\n\t\"")
		case c == '"' || c == '\\':
			s.WriteByte('\\')
			s.WriteByte(c)
		case c >= 0x20 && c < 0x7f && c != '?': // '?' could start a trigraph
			s.WriteByte(c)
		default:
			fmt.Fprintf(&s, "\\%03o", c)
		}
	}
	s.WriteString("\";\n")
	return s.String()
}

// MainEnv, set in a test process, names the emulated device's directory:
// Main has re-executed the tests with LD_LIBRARY_PATH pointing there.
const MainEnv = "HPCTRAIN_CUDAEMU_TEST_DIR"

// Main is a TestMain for packages whose tests load CUDA: the dynamic loader
// reads LD_LIBRARY_PATH only when a process starts, so Main builds the
// emulated device and runs the test binary again with LD_LIBRARY_PATH
// naming it (and a kernel cache of its own unless HPCTRAIN_KERNEL_CACHE
// says where), then exits with that run's status. In the re-executed
// process it runs the tests. what names the package in messages.
func Main(m *testing.M, what string) {
	if os.Getenv(MainEnv) != "" {
		os.Exit(m.Run())
	}
	dir, err := Dir()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s tests: the emulated device: %v\n", what, err)
		os.Exit(1)
	}
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), MainEnv+"="+dir, "LD_LIBRARY_PATH="+dir)
	if os.Getenv("HPCTRAIN_KERNEL_CACHE") == "" {
		// The emulator compiles a module with g++: keep it across runs.
		cache := filepath.Join(os.TempDir(), fmt.Sprintf("hpctrain-cudaemu-test-kernels-%d", os.Getuid()))
		cmd.Env = append(cmd.Env, "HPCTRAIN_KERNEL_CACHE="+cache)
	}
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			os.Exit(ee.ExitCode())
		}
		fmt.Fprintf(os.Stderr, "%s tests: re-running with LD_LIBRARY_PATH: %v\n", what, err)
		os.Exit(1)
	}
	os.Exit(0)
}
