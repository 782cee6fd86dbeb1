//go:build linux

package cluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"hpctrain/internal/mpitest"
)

// finalRecord reads the final line of a -metrics file.
func finalRecord(t *testing.T, path string) map[string]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var last map[string]float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		if m["final"] == true {
			last = map[string]float64{}
			for k, v := range m {
				if x, ok := v.(float64); ok {
					last[k] = x
				}
			}
		}
	}
	if last == nil {
		t.Fatalf("%s has no final record", path)
	}
	return last
}

// TestTrainAcrossHosts runs the real hpctrain with 4 ranks on two hosts
// (2 + 2, TCP between them) and checks each host's local ranks and
// bindings, and that the result equals 4 ranks on one host: same seed, same
// batches, so the same losses within 1e-5 relative.
func TestTrainAcrossHosts(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "hpctrain")
	if out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	args := []string{bin, "train", "-model", "mlp", "-steps", "16", "-limit", "4096", "-test-limit", "512",
		"-seed", "5", "-threads", "1", "-report-bindings", "-progress", "0"}
	multi := filepath.Join(dir, "multi.jsonl")
	mpirun := upCluster(t, 2)
	out := runMPI(t, mpirun, nil, append([]string{"-np", "4", "--host", "node1:2,node2:2"}, append(args, "-metrics", multi)...)...)

	// Bindings: [host:rank R local L] ...: ranks 0,1 on node1 and 2,3 on
	// node2, local ranks 0,1 on each, and each host's cores disjoint.
	re := regexp.MustCompile(`\[(\S+):rank (\d) local (\d)\] cores (\S+)`)
	cores := map[string][]string{}
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		host, rank, local := m[1], m[2], m[3]
		wantHost := map[string]string{"0": "node1", "1": "node1", "2": "node2", "3": "node2"}[rank]
		wantLocal := map[string]string{"0": "0", "1": "1", "2": "0", "3": "1"}[rank]
		if host != wantHost || local != wantLocal {
			t.Errorf("rank %s on %s local %s, want %s local %s", rank, host, local, wantHost, wantLocal)
		}
		cores[host] = append(cores[host], m[4])
	}
	if len(cores["node1"]) != 2 || len(cores["node2"]) != 2 {
		t.Fatalf("bindings reported: %v\n%s", cores, out)
	}
	for h, c := range cores {
		if c[0] == c[1] {
			t.Errorf("%s: both local ranks bound to cores %s", h, c[0])
		}
	}

	single := filepath.Join(dir, "single.jsonl")
	mpitest.Run(t, 2*time.Minute, 4, args[0], append(args[1:], "-metrics", single)...)
	a, b := finalRecord(t, multi), finalRecord(t, single)
	for _, k := range []string{"train_loss", "test_loss", "test_accuracy"} {
		if d := math.Abs(a[k]-b[k]) / math.Max(math.Abs(b[k]), 1e-12); d > 1e-5 {
			t.Errorf("%s: 2 hosts %v, 1 host %v (relative %.3g)", k, a[k], b[k], d)
		}
	}
	if a["world_size"] != 4 || a["step"] != 16 {
		t.Errorf("final record %v", a)
	}
	if !strings.Contains(out, "final: test accuracy") {
		t.Errorf("no final line:\n%s", out)
	}
}

// trainAcross starts a 4-rank mlp training on a cluster of 2 hosts, 2
// ranks each, with extra flags, and returns once it has made progress:
// the job, its output so far and the channel its end is sent on.
func trainAcross(t *testing.T, extra ...string) (*exec.Cmd, *mpitest.Buffer, <-chan error) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hpctrain")
	if out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	mpirun := upCluster(t, 2)
	args := append([]string{"-np", "4", "--host", "node1:2,node2:2", bin, "train", "-model", "mlp", "-epochs", "50",
		"-limit", "4096", "-test-limit", "256", "-threads", "1", "-progress", "300ms"}, extra...)
	cmd := exec.Command(mpirun, args...)
	out := new(mpitest.Buffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(out.String(), "step "); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no progress after a minute:\n%s", out.String())
		}
	}
	return cmd, out, done
}

// jobEnd waits at most limit for the job's end after what happened to it,
// and returns how it ended.
func jobEnd(t *testing.T, done <-chan error, out *mpitest.Buffer, limit time.Duration, what string) error {
	t.Helper()
	start := time.Now()
	select {
	case err := <-done:
		t.Logf("job ended %v after %s, exit %d", time.Since(start).Round(time.Millisecond), what, code(err))
		return err
	case <-time.After(limit):
		t.Fatalf("job still running %v after %s:\n%s", limit, what, out.String())
		return nil
	}
}

// TestRankKilledAcrossHosts kills a rank on node2 mid-training: the job must
// end within 30 s with a non-zero code and a message naming node2.
func TestRankKilledAcrossHosts(t *testing.T) {
	cmd, out, done := trainAcross(t)
	defer func() {
		for _, pid := range netnsPids(t, "hpct-node2") {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		cmd.Process.Kill()
	}()
	victim := 0
	for _, pid := range netnsPids(t, "hpct-node2") {
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if strings.Contains("\x00"+string(env), "\x00OMPI_COMM_WORLD_RANK=3\x00") {
			victim = pid
		}
	}
	if victim == 0 {
		t.Fatalf("rank 3 not found in node2's namespace")
	}
	syscall.Kill(victim, syscall.SIGKILL)
	err := jobEnd(t, done, out, 30*time.Second, "SIGKILL of rank 3 on node2")
	if code(err) == 0 {
		t.Errorf("exit 0 after a rank was killed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "node2") || !strings.Contains(out.String(), "rank 3") {
		t.Errorf("no message naming rank 3 and node2:\n%s", out.String())
	}
}

// TestHostLinkDown takes node2's link down mid-training (the hub's end of
// its veth: the host is still running but no longer answers): the ranks on
// node1 time out in the gradient all-reduce (-collective-timeout 5s) and
// abort, and the job must end within 90 s with a non-zero code and the
// watchdog's line, and node2's orted and ranks must go too. Before up.sh set
// tcp_retries2, mpirun waited ~15 min for node2's orted after the abort.
func TestHostLinkDown(t *testing.T) {
	cmd, out, done := trainAcross(t, "-collective-timeout", "5s")
	defer cmd.Process.Kill() // down.sh (upCluster's cleanup) ends the rest
	if b, err := exec.Command("ip", "-n", "hpct-hub", "link", "set", "vnode2", "down").CombinedOutput(); err != nil {
		t.Fatalf("ip link set vnode2 down: %v\n%s", err, b)
	}
	err := jobEnd(t, done, out, 90*time.Second, "node2's link went down (-collective-timeout 5s)")
	if code(err) == 0 {
		t.Errorf("exit 0 with node2 gone:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "collective timeout") {
		t.Errorf("no watchdog line:\n%s", out.String())
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		left := netnsPids(t, "hpct-node2")
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("processes left on node2 60 s after the job ended: %v", left)
			break
		}
	}
}

// TestHostLostKernelRetries is TestHostLinkDown on hosts that keep the
// kernel's default tcp_retries2 (15: ~15 min of retransmitting to a peer
// that stopped answering), as a real cluster's do, with the watchdog
// (-collective-timeout 5m, the default) later than the test's limit: what
// must end the job within 90 s of node2's link going down is mpirun itself,
// through the keepalive that scripts/mpirun.sh sets on Open MPI's own
// connections (20 s idle, then 8 probes 5 s apart: 60 s), with Open MPI's
// "lost communication with a remote daemon" message naming node2. With Open
// MPI's own keepalive (300 s + 9 x 20 s) the watchdog aborts first, at 5
// min, and mpirun then retransmits its order to node2's orted for ~15 min.
func TestHostLostKernelRetries(t *testing.T) {
	cmd, out, done := trainAcross(t, "-collective-timeout", "5m")
	defer cmd.Process.Kill() // down.sh (upCluster's cleanup) ends the rest
	// up.sh's 6 undone in both hosts' namespaces (they go with down.sh);
	// the kernel reads tcp_retries2 at each retransmission, so a job that
	// started under 6 retransmits under 15 from here on. node1's is the one
	// that counts: mpirun runs there.
	for _, ns := range []string{"hpct-node1", "hpct-node2"} {
		sh := "echo 15 >/proc/sys/net/ipv4/tcp_retries2 && cat /proc/sys/net/ipv4/tcp_retries2"
		if b, err := exec.Command("ip", "netns", "exec", ns, "sh", "-c", sh).CombinedOutput(); err != nil || strings.TrimSpace(string(b)) != "15" {
			t.Fatalf("%s: tcp_retries2 15: %v\n%s", ns, err, b)
		}
	}
	if b, err := exec.Command("ip", "-n", "hpct-hub", "link", "set", "vnode2", "down").CombinedOutput(); err != nil {
		t.Fatalf("ip link set vnode2 down: %v\n%s", err, b)
	}
	err := jobEnd(t, done, out, 90*time.Second, "node2's link went down (tcp_retries2 15, -collective-timeout 5m)")
	if code(err) == 0 {
		t.Errorf("exit 0 with node2 gone:\n%s", out.String())
	}
	if !regexp.MustCompile(`lost communication with a remote daemon(?s:.*)Remote daemon: .* on node node2`).MatchString(out.String()) {
		t.Errorf("no message naming node2 as lost:\n%s", out.String())
	}
}
