package affinity

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

const applyChildEnv = "AFFINITY_TEST_APPLY_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(applyChildEnv) != "" {
		if err := applyChild(); err != nil {
			fmt.Println("FAIL:", err)
			os.Exit(1)
		}
		fmt.Println("OK")
		os.Exit(0)
	}
	// Plans warn of a thread count the environment sets (envNote); the
	// tests' expected warnings are those of an environment without one.
	for _, name := range ThreadEnv {
		os.Unsetenv(name)
	}
	os.Exit(m.Run())
}

// applyChild plans local rank 0 of as many ranks as there are physical
// cores (one core each, so the plan is a real restriction whenever there
// are two), applies it, starts threads, and checks every thread's
// Cpus_allowed_list, GOMAXPROCS and the environment.
func applyChild() error {
	topo, err := ReadTopology("/")
	if err != nil {
		return err
	}
	mask, err := Allowed()
	if err != nil {
		return err
	}
	n := topo.PhysicalCores(mask)
	p, err := topo.Plan(mask, Request{LocalSize: n, Threads: 1, PreferNUMA: -1})
	if err != nil {
		return err
	}
	if err := Apply(p); err != nil {
		return err
	}
	// Threads made after Apply inherit the mask: lock a few goroutines to
	// fresh threads and keep them busy.
	stop := make(chan struct{})
	for range 4 {
		go func() {
			runtime.LockOSThread()
			<-stop
		}()
	}
	time.Sleep(20 * time.Millisecond)
	masks, err := ThreadMasks()
	if err != nil {
		return err
	}
	close(stop)
	if len(masks) < 2 {
		return fmt.Errorf("only %d threads seen", len(masks))
	}
	for tid, m := range masks {
		if !m.IsSubset(p.CPUs) {
			return fmt.Errorf("thread %d allowed %s, outside plan %s", tid, m, p.CPUs)
		}
	}
	if got, err := Allowed(); err != nil || !got.Equal(p.CPUs) {
		return fmt.Errorf("Allowed() after Apply = %s, %v; want %s", got, err, p.CPUs)
	}
	if runtime.GOMAXPROCS(0) != p.Threads+1 {
		return fmt.Errorf("GOMAXPROCS %d, want %d", runtime.GOMAXPROCS(0), p.Threads+1)
	}
	cpu := fmt.Sprint(p.WorkerCPUs[0])
	for k, want := range map[string]string{
		"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "GOMP_CPU_AFFINITY": cpu,
		"KMP_AFFINITY": "granularity=fine,explicit,proclist=[" + cpu + "]",
	} {
		if got := os.Getenv(k); got != want {
			return fmt.Errorf("%s=%q, want %q", k, got, want)
		}
	}
	fmt.Printf("plan %s, %d threads checked\n", p, len(masks))
	return nil
}

// TestApply runs Apply in a child process (this test binary re-executed),
// so that it does not restrict the rest of the tests.
func TestApply(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), applyChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Logf("child: %s", strings.TrimSpace(string(out)))
}
