package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// These tests run the real scripts/setup.sh and Makefile against this
// machine's packages, with PATH narrowed to a directory of links to
// /usr/bin's commands (never /sbin), where a test leaves some out and puts
// small scripts in place of others: id (to be root or not), apt-get (which
// logs what it was asked and installs nothing), pkg-config, dpkg-query, go.
// Most run setup.sh --build, which leaves out the Python packages, so that
// they do not depend on whether /usr/bin/python3 has torch.

// shimPath makes the directory PATH is set to: a link to every command in
// /usr/bin and to go, except those in without, and a script for each fake.
func shimPath(t *testing.T, without []string, fakes map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	skip := map[string]bool{}
	for _, c := range without {
		skip[c] = true
	}
	link := func(path string) {
		name := filepath.Base(path)
		if skip[name] || fakes[name] != "" {
			return
		}
		if err := os.Symlink(path, filepath.Join(dir, name)); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	ents, err := os.ReadDir("/usr/bin")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		link(filepath.Join("/usr/bin", e.Name()))
	}
	if gobin, err := exec.LookPath("go"); err == nil {
		link(gobin)
	}
	for name, script := range fakes {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/bash\n"+script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Fakes for shimPath.
const (
	fakeRoot   = "echo 0"
	fakeUser   = "echo 1000"
	fakeAptGet = `echo "apt-get $*" >>"$SETUP_LOG"`
	fakeNoBLAS = `[ "$2" = openblas ] && exit 1; exec /usr/bin/pkg-config "$@"`
	fakeNoDebs = `exit 1` // dpkg-query: no package installed
	fakeOldGo  = `[ "$*" = "env GOVERSION" ] && { echo go1.19.8; exit; }; echo "go version go1.19.8 linux/amd64"`
)

// runIn runs name with args in the repository root with PATH set to path and
// SETUP_LOG to a file, and returns what it printed, its exit status and what
// the fake apt-get logged.
func runIn(t *testing.T, path string, env []string, name string, args ...string) (out string, code int, log string) {
	t.Helper()
	logf := filepath.Join(t.TempDir(), "apt.log")
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "PATH="+path, "SETUP_LOG="+logf, "GOTOOLCHAIN=auto")
	cmd.Env = append(cmd.Env, env...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	l, _ := os.ReadFile(logf)
	return string(b), code, string(l)
}

// TestSetupGo: without a go command, or with one too old to fetch go.mod's
// Go (GOTOOLCHAIN needs Go 1.21), setup says so in one line and exits 1,
// instead of bash's "go: command not found" (127) or nothing at all.
func TestSetupGo(t *testing.T) {
	for _, c := range []struct {
		name  string
		fakes map[string]string
		want  string
	}{
		{"no go", nil, "setup: no go command on PATH"},
		{"go 1.19", map[string]string{"go": fakeOldGo}, "setup: go1.19.8 on PATH cannot fetch"},
	} {
		without := []string{}
		if c.fakes == nil {
			without = append(without, "go")
		}
		out, code, _ := runIn(t, shimPath(t, without, c.fakes), nil, "scripts/setup.sh", "--build")
		last := strings.TrimSpace(out)
		if i := strings.LastIndexByte(last, '\n'); i >= 0 {
			last = last[i+1:]
		}
		if code != 1 || !strings.HasPrefix(last, c.want) {
			t.Errorf("%s: scripts/setup.sh: exit %d, last line %q, want exit 1 and %q...\n%s", c.name, code, last, c.want, out)
		}
	}
}

// TestSetupInstalls: as root, setup asks apt-get for what is missing and
// nothing else: gcc, which cgo needs (Go turns cgo off without it), and
// Open MPI when only MPICH's ompi-less pkg-config files are there
// (hpctrain's mpi package links with pkg-config ompi).
func TestSetupInstalls(t *testing.T) {
	for _, c := range []struct {
		name    string
		without []string
		fakes   map[string]string
		want    string // the packages apt-get install was asked for
	}{
		{"nothing missing", nil, nil, ""},
		{"openblas", nil, map[string]string{"pkg-config": fakeNoBLAS}, "libopenblas-dev"},
		{"gcc", []string{"gcc"}, nil, "gcc"},
		{"mpich", nil, map[string]string{"pkg-config": `[ "$2" = ompi ] && exit 1; exec /usr/bin/pkg-config "$@"`}, "openmpi-bin libopenmpi-dev"},
	} {
		fakes := map[string]string{"id": fakeRoot, "apt-get": fakeAptGet}
		for k, v := range c.fakes {
			fakes[k] = v
		}
		out, code, log := runIn(t, shimPath(t, c.without, fakes), nil, "scripts/setup.sh", "--build")
		got := ""
		for _, l := range strings.Split(log, "\n") {
			if p, ok := strings.CutPrefix(l, "apt-get install -y -qq --no-install-recommends "); ok {
				got = p
			}
		}
		if code != 0 || got != c.want {
			t.Errorf("%s: scripts/setup.sh: exit %d, installed %q, want exit 0 and %q\n%s\napt-get log:\n%s", c.name, code, got, c.want, out, log)
		}
	}
}

// TestSetupFindsDNNL: oneDNN counts as present where the C compiler finds
// its header, as cgo will: a cluster's module adds its directory through
// CPATH or CGO_CFLAGS. Here the compiler is kept from /usr/include
// (-nostdinc), where Debian's oneDNN is, and given a directory with a
// dnnl.h through each. Before, only /usr/include/oneapi/dnnl/dnnl.h
// counted: a module's oneDNN was installed again, or, not as root, setup
// stopped.
func TestSetupFindsDNNL(t *testing.T) {
	inc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(inc, "oneapi", "dnnl"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(inc, "oneapi", "dnnl", "dnnl.h"), []byte("/* a module's oneDNN */\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := shimPath(t, nil, map[string]string{"id": fakeRoot, "apt-get": fakeAptGet})
	for _, c := range []struct {
		name string
		env  []string
		want bool // libdnnl-dev installed
	}{
		{"not found", []string{"CC=gcc -nostdinc"}, true},
		{"CPATH", []string{"CC=gcc -nostdinc", "CPATH=" + inc}, false},
		{"CGO_CFLAGS", []string{"CC=gcc -nostdinc", "CGO_CFLAGS=-I" + inc}, false},
		{"Debian's", nil, false},
	} {
		out, code, log := runIn(t, path, c.env, "scripts/setup.sh", "--build")
		if got := strings.Contains(log, "libdnnl-dev"); code != 0 || got != c.want {
			t.Errorf("%s: exit %d, libdnnl-dev installed %v, want %v:\n%s\napt-get log:\n%s", c.name, code, got, c.want, out, log)
		}
	}
}

// TestSetupCannotInstall: when something is missing and setup cannot install
// it (not root, or no apt-get), it names the packages and the commands that
// install them in one line, runs no apt-get, and exits 1.
func TestSetupCannotInstall(t *testing.T) {
	for _, c := range []struct {
		name    string
		without []string
		fakes   map[string]string
		want    string
	}{
		{"not root", nil, map[string]string{"id": fakeUser, "apt-get": fakeAptGet},
			"setup: missing libopenblas-dev: as root run apt-get update && apt-get install --no-install-recommends libopenblas-dev"},
		{"no apt-get", []string{"apt-get"}, map[string]string{"id": fakeRoot},
			"setup: missing libopenblas-dev, and no apt-get to install it with"},
	} {
		c.fakes["pkg-config"] = fakeNoBLAS
		out, code, log := runIn(t, shimPath(t, c.without, c.fakes), nil, "scripts/setup.sh", "--build")
		if code != 1 || strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, c.want) || log != "" {
			t.Errorf("%s: scripts/setup.sh: exit %d, printed\n%s\nwant exit 1 and one line %q..., apt-get log %q", c.name, code, out, c.want, log)
		}
	}
}

// TestSetupCUDAUser: setup --cuda, run by a user whose PATH has no /sbin (a
// login shell's), finds an NVRTC that the loader's cache knows (one from
// NVIDIA's packages or a CUDA install, which dpkg-query does not know) and
// passes, where it said "no NVRTC" and stopped make test.
func TestSetupCUDAUser(t *testing.T) {
	if out, _ := exec.Command("/sbin/ldconfig", "-p").Output(); !strings.Contains(string(out), "libnvrtc.so.") {
		t.Skip("no NVRTC in the loader's cache (scripts/setup.sh --cuda installs one)")
	}
	fakes := map[string]string{"id": fakeUser, "dpkg-query": fakeNoDebs, "apt-get": fakeAptGet}
	path := shimPath(t, nil, fakes)
	for i := range 10 { // ldconfig -p | grep -q under pipefail failed at random
		out, code, log := runIn(t, path, []string{"LD_LIBRARY_PATH="}, "scripts/setup.sh", "--build", "--cuda")
		if code != 0 || log != "" {
			t.Fatalf("run %d: scripts/setup.sh --build --cuda as a user: exit %d, apt-get log %q\n%s", i, code, log, out)
		}
	}
}

// TestMakeVetGofmt: make vet finds a file gofmt would change with the gofmt
// of the Go it builds with (go.mod's, through GOTOOLCHAIN), also when no
// gofmt is on PATH and in a copy that is not a git checkout (a release
// tarball); both passed it unchecked, and the second left gofmt waiting on
// stdin.
func TestMakeVetGofmt(t *testing.T) {
	for _, git := range []bool{false, true} {
		dir := t.TempDir()
		for _, f := range []string{"Makefile", "go.mod"} {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "bad.go"), []byte("package bad\nfunc  x( ) {}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		path := os.Getenv("PATH")
		if git {
			path = shimPath(t, []string{"gofmt"}, nil)
			for _, args := range [][]string{{"init", "-q"}, {"add", "."}} {
				if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
					t.Fatalf("git %v: %v\n%s", args, err, out)
				}
			}
		}
		cmd := exec.Command("make", "-s", "-C", dir, "vet")
		cmd.Env = append(os.Environ(), "PATH="+path)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "bad.go") {
			t.Errorf("make vet (git checkout %v) of a file gofmt would change: %v\n%s", git, err, out)
		}
	}
}

// TestSetupBuildNoPython: make build and make demo need neither python3-onnx
// nor python3-torch, so a user whose /usr/bin/python3 lacks them can build
// and train; setup.sh without --build (make test's) still asks for them.
func TestSetupBuildNoPython(t *testing.T) {
	hide := t.TempDir() // torch and onnx that fail to import
	for _, m := range []string{"torch", "onnx"} {
		if err := os.WriteFile(filepath.Join(hide, m+".py"), []byte("raise ImportError('hidden')\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	path := shimPath(t, nil, map[string]string{"id": fakeUser, "apt-get": fakeAptGet})
	env := []string{"PYTHONPATH=" + hide}
	if out, code, _ := runIn(t, path, env, "scripts/setup.sh", "--build"); code != 0 {
		t.Errorf("scripts/setup.sh --build without torch, as a user: exit %d\n%s", code, out)
	}
	if out, code, _ := runIn(t, path, env, "scripts/setup.sh"); code != 1 || !strings.Contains(out, "missing python3-onnx python3-torch:") {
		t.Errorf("scripts/setup.sh without torch, as a user: exit %d, want 1 naming python3-onnx python3-torch\n%s", code, out)
	}
	out, err := exec.Command("make", "-n", "build", "demo").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "scripts/setup.sh --build\n") || strings.Contains(string(out), "scripts/setup.sh\n") {
		t.Errorf("make -n build demo: %v, want setup.sh --build and not setup.sh alone:\n%s", err, out)
	}
}

// TestMakeSerial: under make -j, the setup targets still run one after the
// other, so two apt-get never hold dpkg's lock at once (the fake apt-get
// fails as apt does when another holds it), and cgo-check and vet run after
// setup has installed gcc and the headers.
func TestMakeSerial(t *testing.T) {
	fakes := map[string]string{"id": fakeRoot, "pkg-config": fakeNoBLAS,
		"apt-get": `mkdir "$SETUP_LOG.lock" 2>/dev/null || { echo "E: Could not get lock /var/lib/dpkg/lock-frontend" >&2; exit 100; }
echo "apt-get $*" >>"$SETUP_LOG"; sleep 2; rmdir "$SETUP_LOG.lock"`}
	out, code, log := runIn(t, shimPath(t, nil, fakes), nil, "make", "-s", "-j2", "setup-build", "setup")
	if code != 0 || strings.Count(log, "apt-get install") != 2 {
		t.Errorf("make -j2 setup-build setup, both installing: exit %d\n%s\napt-get log:\n%s", code, out, log)
	}
}

// TestMpirunScriptNoMPI: scripts/mpirun.sh without an mpirun on PATH says
// what to do in one line, instead of bash's "exec: mpirun: not found".
func TestMpirunScriptNoMPI(t *testing.T) {
	out, code, _ := runIn(t, shimPath(t, []string{"mpirun"}, nil), nil, "scripts/mpirun.sh", "-np", "2", "true")
	if code != 1 || !strings.HasPrefix(out, "mpirun.sh: no mpirun on PATH") || strings.Count(out, "\n") != 1 {
		t.Errorf("scripts/mpirun.sh without mpirun: exit %d\n%s", code, out)
	}
}

// TestMpirunScriptKeepalive: scripts/mpirun.sh gives mpirun the OOB
// keepalive (20 s, then 8 probes 5 s apart) as OMPI_MCA_* variables, each
// only where the user has not set it: in the environment, with --mca on the
// command line, or in ~/.openmpi/mca-params.conf (seen through the real
// ompi_info; that case is skipped without one). The mpirun is a fake that
// prints the variables it was given.
func TestMpirunScriptKeepalive(t *testing.T) {
	fake := map[string]string{"mpirun": `env | grep '^OMPI_MCA_oob_tcp_keepalive_' | sort`}
	for _, c := range []struct {
		name  string
		env   []string
		args  []string
		conf  string
		want  string
		needs string
	}{
		{"none", nil, nil, "", "intvl=5 probes=8 time=20", ""},
		{"env", []string{"OMPI_MCA_oob_tcp_keepalive_time=60"}, nil, "", "intvl=5 probes=8 time=60", ""},
		{"--mca", nil, []string{"--mca", "oob_tcp_keepalive_probes", "3"}, "", "intvl=5 time=20", ""},
		{"-gmca", nil, []string{"-gmca", "oob_tcp_keepalive_intvl", "9"}, "", "probes=8 time=20", ""},
		{"params file", nil, nil, "oob_tcp_keepalive_intvl = 10\n", "probes=8 time=20", "ompi_info"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := exec.LookPath(c.needs); c.needs != "" && err != nil {
				t.Skipf("no %s on PATH", c.needs)
			}
			home := t.TempDir()
			if c.conf != "" {
				os.Mkdir(filepath.Join(home, ".openmpi"), 0o755)
				if err := os.WriteFile(filepath.Join(home, ".openmpi", "mca-params.conf"), []byte(c.conf), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			env := append([]string{"HOME=" + home}, c.env...)
			out, code, _ := runIn(t, shimPath(t, nil, fake), env, "scripts/mpirun.sh", append(c.args, "-np", "2", "true")...)
			// What the fake mpirun saw, sorted by name (intvl, probes, time).
			got := strings.Join(strings.Fields(strings.ReplaceAll(out, "OMPI_MCA_oob_tcp_keepalive_", "")), " ")
			if code != 0 || got != c.want {
				t.Errorf("scripts/mpirun.sh %v with %v: exit %d, mpirun got %q, want %q", c.args, c.env, code, got, c.want)
			}
		})
	}
}
