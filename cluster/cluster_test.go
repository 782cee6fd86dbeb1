//go:build linux

package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// probe is one line of testdata/mpiprobe.
type probe struct {
	host                         string
	rank, size, local, localSize int
	env, sum                     string
}

var probeRE = regexp.MustCompile(`^probe host=(\S+) rank=(\d+) size=(\d+) local=(\d+) localsize=(\d+) env=(\S*) sum=(\S+)$`)

// parseProbes returns the probe lines of out by rank; it fails t unless
// there is exactly one per rank 0..np-1.
func parseProbes(t *testing.T, out string, np int) []probe {
	t.Helper()
	ps := make([]probe, np)
	seen := make([]bool, np)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		m := probeRE.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		n := func(s string) int { v, _ := strconv.Atoi(s); return v }
		p := probe{host: m[1], rank: n(m[2]), size: n(m[3]), local: n(m[4]), localSize: n(m[5]), env: m[6], sum: m[7]}
		if p.rank >= np || seen[p.rank] {
			t.Fatalf("unexpected or repeated rank %d in:\n%s", p.rank, out)
		}
		ps[p.rank], seen[p.rank] = p, true
	}
	for r, ok := range seen {
		if !ok {
			t.Fatalf("no line from rank %d in:\n%s", r, out)
		}
	}
	return ps
}

// checkPlacement: 4 ranks, 0 and 1 on node1, 2 and 3 on node2, local ranks
// 0 and 1 on each host, and a correct allreduce everywhere.
func checkPlacement(t *testing.T, ps []probe) {
	t.Helper()
	for _, p := range ps {
		want := fmt.Sprintf("node%d", p.rank/2+1)
		if p.host != want || p.local != p.rank%2 || p.localSize != 2 || p.size != len(ps) {
			t.Errorf("rank %d: host %s local %d/%d size %d, want host %s local %d/2 size %d",
				p.rank, p.host, p.local, p.localSize, p.size, want, p.rank%2, len(ps))
		}
		if p.sum != "ok" {
			t.Errorf("rank %d on %s: allreduce %s", p.rank, p.host, p.sum)
		}
	}
}

// hubBytes returns the bytes the hub's end of nodeI's link has received
// (sent by nodeI) and transmitted (to nodeI).
func hubBytes(t *testing.T, i int) (rx, tx int64) {
	t.Helper()
	read := func(what string) int64 {
		out, err := exec.Command("ip", "netns", "exec", "hpct-hub", "cat",
			fmt.Sprintf("/sys/class/net/vnode%d/statistics/%s_bytes", i, what)).Output()
		if err != nil {
			t.Fatalf("reading vnode%d %s bytes: %v", i, what, err)
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	return read("rx"), read("tx")
}

// TestPlacement runs 4 ranks on 2 hosts: ranks 0,1 on node1 and 2,3 on node2,
// local ranks 0,1 on each, an allreduce of 2 MiB whose bytes must cross the
// bridge, and variables reaching remote ranks only when exported.
func TestPlacement(t *testing.T) {
	mpirun := upCluster(t, 2)
	bin := buildProbe(t)
	const n = 1 << 18 // float64s: 2 MiB
	rx0, tx0 := hubBytes(t, 2)
	out := runMPI(t, mpirun, []string{"HPCT_EXPORT=HPCT_PROBE", "HPCT_PROBE=exported"},
		"-np", "4", "--host", "node1:2,node2:2", bin, "-n", strconv.Itoa(n), "-env", "HPCT_PROBE")
	ps := parseProbes(t, out, 4)
	checkPlacement(t, ps)
	for _, p := range ps {
		if p.env != "exported" {
			t.Errorf("rank %d on %s: HPCT_PROBE=%q, want %q (mpirun.sh -x from HPCT_EXPORT)", p.rank, p.host, p.env, "exported")
		}
	}
	rx1, tx1 := hubBytes(t, 2)
	if rx1-rx0 < 8*n || tx1-tx0 < 8*n {
		t.Errorf("node2's link carried %d bytes out and %d in during the job, want >= %d each way", rx1-rx0, tx1-tx0, 8*n)
	}

	// Like ssh, rsh-agent.sh gives remote orteds a fresh environment: a
	// variable that is not exported reaches node1's ranks (mpirun's own
	// host) but not node2's.
	out = runMPI(t, mpirun, []string{"HPCT_PROBE_LOCAL=here"},
		"-np", "4", "--host", "node1:2,node2:2", bin, "-env", "HPCT_PROBE_LOCAL")
	for _, p := range parseProbes(t, out, 4) {
		want := map[string]string{"node1": "here", "node2": ""}[p.host]
		if p.env != want {
			t.Errorf("rank %d on %s: unexported HPCT_PROBE_LOCAL=%q, want %q", p.rank, p.host, p.env, want)
		}
	}
}

// TestNetem is TestPlacement's job over links with 5 ms delay each way and
// 1% loss (tc netem). It skips where the kernel has no netem.
func TestNetem(t *testing.T) {
	mpirun := upCluster(t, 2)
	bin := buildProbe(t)
	if out, err := script(20*time.Second, nil, "netem.sh", "on", "5ms", "1%"); err != nil {
		if code(err) == 3 {
			t.Skipf("kernel lacks netem (netem.sh exit 3): %s", strings.TrimSpace(out))
		}
		t.Fatalf("netem.sh on 5ms 1%%: %v\n%s", err, out)
	}
	qd, _ := exec.Command("ip", "netns", "exec", "hpct-node2", "tc", "qdisc", "show", "dev", "eth0").CombinedOutput()
	if !strings.Contains(string(qd), "netem") {
		t.Fatalf("no netem qdisc on node2's eth0:\n%s", qd)
	}
	out := runMPI(t, mpirun, nil, "-np", "4", "--host", "node1:2,node2:2", bin, "-n", strconv.Itoa(1<<18))
	checkPlacement(t, parseProbes(t, out, 4))
}

// TestLossyLinks is TestPlacement's job while nftables drops 5% of the
// packets arriving at each host (netem.sh drop: no netem needed), so TCP
// must retransmit; it checks that packets were in fact dropped.
func TestLossyLinks(t *testing.T) {
	mpirun := upCluster(t, 2)
	bin := buildProbe(t)
	if out, err := script(60*time.Second, nil, "netem.sh", "drop", "5%"); err != nil {
		if code(err) == 3 {
			t.Skipf("kernel refuses the nftables drop rule (netem.sh exit 3): %s", strings.TrimSpace(out))
		}
		t.Fatalf("netem.sh drop 5%%: %v\n%s", err, out)
	}
	out := runMPI(t, mpirun, nil, "-np", "4", "--host", "node1:2,node2:2", bin, "-n", strconv.Itoa(1<<19)) // 4 MiB: ~25 drops at 5%
	checkPlacement(t, parseProbes(t, out, 4))
	dropped := 0
	for i := 1; i <= 2; i++ {
		rules, err := exec.Command("ip", "netns", "exec", fmt.Sprintf("hpct-node%d", i), "nft", "list", "table", "inet", "hpct_loss").CombinedOutput()
		if err != nil {
			t.Fatalf("nft list on node%d: %v\n%s", i, err, rules)
		}
		if m := regexp.MustCompile(`counter packets (\d+)`).FindSubmatch(rules); m != nil {
			v, _ := strconv.Atoi(string(m[1]))
			dropped += v
		}
	}
	t.Logf("packets dropped: %d", dropped)
	if dropped == 0 {
		t.Error("the drop rules dropped nothing; the job did not run over lossy links")
	}
	if out, err := script(20*time.Second, nil, "netem.sh", "off"); err != nil {
		t.Errorf("netem.sh off: %v\n%s", err, out)
	}
}

// TestTearDown leaves a job running on both hosts, runs down.sh, and checks
// that every process of the cluster is gone, no hpct-* namespace, netns file
// or state is left, the root namespace's links are as before, and a second
// down.sh is a no-op.
func TestTearDown(t *testing.T) {
	linksBefore := rootLinks(t)
	mpirun := upCluster(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	job := exec.CommandContext(ctx, mpirun, "-np", "4", "--host", "node1:2,node2:2", "sleep", "300")
	if err := job.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- job.Wait() }()

	// Wait for the 4 sleeps, then note every process in the namespaces.
	var pids []int
	for deadline := time.Now().Add(20 * time.Second); ; {
		pids = nil
		sleeps := 0
		for _, ns := range []string{"hpct-node1", "hpct-node2"} {
			for _, pid := range netnsPids(t, ns) {
				pids = append(pids, pid)
				if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "sleep" {
					sleeps++
				}
			}
		}
		if sleeps == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 4 ranks started after 20 s", sleeps)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("processes in the cluster before down.sh: %v", pids)

	start := time.Now()
	if out, err := script(30*time.Second, nil, "down.sh"); err != nil {
		t.Fatalf("down.sh: %v\n%s", err, out)
	}
	t.Logf("down.sh took %v", time.Since(start).Round(time.Millisecond))
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("mpirun still running 10 s after down.sh")
	}
	for _, pid := range pids {
		if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			// A zombie holds nothing; its parent (init) reaps it.
			if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) > 0 && f[0] != "Z" {
				t.Errorf("process %d survived down.sh: %s", pid, stat)
			}
		}
	}
	list, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v\n%s", err, list)
	}
	if strings.Contains(string(list), "hpct-") {
		t.Errorf("namespaces left after down.sh:\n%s", list)
	}
	if left, _ := filepath.Glob("/etc/netns/hpct-*"); len(left) > 0 {
		t.Errorf("left after down.sh: %v", left)
	}
	if _, err := os.Stat("/run/hpct-cluster"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir /run/hpct-cluster left after down.sh (%v)", err)
	}
	if after := rootLinks(t); !slices.Equal(after, linksBefore) {
		t.Errorf("root namespace links changed: before %v, after %v", linksBefore, after)
	}
	if out, err := script(30*time.Second, nil, "down.sh"); err != nil {
		t.Errorf("second down.sh: %v\n%s", err, out)
	}
}

// netnsPids lists the processes in network namespace ns.
func netnsPids(t *testing.T, ns string) []int {
	t.Helper()
	out, err := exec.Command("ip", "netns", "pids", ns).Output()
	if err != nil {
		t.Fatalf("ip netns pids %s: %v", ns, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if v, err := strconv.Atoi(f); err == nil {
			pids = append(pids, v)
		}
	}
	return pids
}

// rootLinks returns the sorted names of the root namespace's links.
func rootLinks(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatalf("ip link: %v", err)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			names = append(names, strings.TrimSuffix(f[1], ":"))
		}
	}
	slices.Sort(names)
	return names
}

// code is the exit status in err, or -1.
func code(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// TestUpInterrupted stops up.sh half-way through a cluster of 100 hosts, by
// SIGINT to its process group (Ctrl-C) and by SIGTERM to up.sh alone (what
// timeout(1) sends): either way up.sh must tear down what it had built and
// exit non-zero, leaving no namespace, /etc/netns entry or state dir.
func TestUpInterrupted(t *testing.T) {
	lockCluster(t)
	for _, c := range []struct {
		sig   syscall.Signal
		group bool
	}{{syscall.SIGINT, true}, {syscall.SIGTERM, false}} {
		cmd := exec.Command(filepath.Join(scriptsDir, "up.sh"), "100")
		cmd.Env = append(os.Environ(), "HPCT_CLUSTER=hpct")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat("/run/netns/hpct-node5"); err == nil {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatalf("hpct-node5 not made after 30 s:\n%s", out.String())
			}
		}
		pid := cmd.Process.Pid
		if c.group {
			pid = -pid
		}
		syscall.Kill(pid, c.sig)
		err := cmd.Wait()
		t.Logf("%v: up.sh exit %d:\n%s", c.sig, code(err), out.String())
		if err == nil {
			t.Errorf("%v: up.sh exit 0", c.sig)
		}
		list, _ := exec.Command("ip", "netns", "list").CombinedOutput()
		if strings.Contains(string(list), "hpct-") {
			t.Errorf("%v: namespaces left after an interrupted up.sh:\n%s", c.sig, list)
		}
		if left, _ := filepath.Glob("/etc/netns/hpct-*"); len(left) > 0 {
			t.Errorf("%v: left after an interrupted up.sh: %d entries, %v...", c.sig, len(left), left[0])
		}
		if _, err := os.Stat("/run/hpct-cluster"); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%v: state dir /run/hpct-cluster left after an interrupted up.sh (%v)", c.sig, err)
		}
		if out, err := script(30*time.Second, nil, "down.sh"); err != nil {
			t.Fatalf("down.sh: %v\n%s", err, out)
		}
	}
}

// TestNetemBadArgs gives netem.sh arguments it must refuse: each is exit 2
// with one line naming what was wrong, checked before the kernel's support
// (a bad delay is not "no netem here"), and leaves node1's link as it was.
func TestNetemBadArgs(t *testing.T) {
	upCluster(t, 1)
	for _, c := range []struct{ args, want string }{
		{"", "usage:"},
		{"bogus", "usage:"},
		{"on", "usage:"},
		{"on 5xs", "bad delay '5xs'"},
		{"on -5ms", "bad delay '-5ms'"},
		{"on 5", "bad delay '5'"},
		{"on 5ms 200%", "bad loss '200%'"},
		{"on 5ms -1%", "bad loss '-1%'"},
		{"on 5ms 1% 2ms", "usage:"},
		{"rate 0mbit", "bad rate '0mbit'"},
		{"rate -5mbit", "bad rate '-5mbit'"},
		{"rate 10Mbps", "bad rate '10Mbps'"},
		{"rate 0.0001kbit", "bad rate '0.0001kbit'"}, // tc: 0 bytes/s, 'the "rate" parameter is mandatory'
		{"rate 1.2.3mbit", "bad rate '1.2.3mbit'"},
		{"drop 101%", "bad loss '101%'"},
		{"drop -1%", "bad loss '-1%'"},
		{"off now", "usage:"},
	} {
		out, err := script(20*time.Second, nil, "netem.sh", strings.Fields(c.args)...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code(err) != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "cluster netem.sh: ") || !strings.Contains(out, c.want) {
			t.Errorf("netem.sh %s: exit %d, output:\n%s\nwant exit 2 and one line with %q", c.args, code(err), out, c.want)
		}
	}
	qd, err := exec.Command("ip", "netns", "exec", "hpct-node1", "tc", "qdisc", "show", "dev", "eth0").CombinedOutput()
	if err != nil || strings.Contains(string(qd), "tbf") || strings.Contains(string(qd), "netem") {
		t.Errorf("node1's eth0 after refused arguments (%v):\n%s", err, qd)
	}
}

// TestNetemRateQueue checks that netem.sh rate gives the token bucket the
// queue it promises, 50 ms at the rate, at 100 Mbit/s and at 10 Gbit/s:
// above 2.1 Gbit/s, awk's %d (mawk: at most 2^31-1) cut the rate short in
// the sums, and 10gbit got 10.5 ms of queue and 0.2 ms of bucket.
func TestNetemRateQueue(t *testing.T) {
	upCluster(t, 1)
	if out, err := script(20*time.Second, nil, "netem.sh", "check-rate"); err != nil {
		if code(err) == 3 {
			t.Skipf("kernel lacks tbf (netem.sh exit 3): %s", strings.TrimSpace(out))
		}
		t.Fatalf("netem.sh check-rate: %v\n%s", err, out)
	}
	latRE := regexp.MustCompile(`\blat ([0-9.]+)ms\b`)
	for _, c := range []struct{ rate, burst string }{{"100mbit", "burst 32768 B"}, {"10gbit", "burst 1250000 B"}} {
		out, err := script(20*time.Second, nil, "netem.sh", "rate", c.rate)
		if err != nil {
			t.Fatalf("netem.sh rate %s: %v\n%s", c.rate, err, out)
		}
		if !strings.Contains(out, c.burst) {
			t.Errorf("netem.sh rate %s: %s; want %s (1 ms at the rate, at least 32 KiB)", c.rate, strings.TrimSpace(out), c.burst)
		}
		qd, err := exec.Command("ip", "netns", "exec", "hpct-node1", "tc", "qdisc", "show", "dev", "eth0").CombinedOutput()
		m := latRE.FindSubmatch(qd)
		if err != nil || m == nil {
			t.Fatalf("tc qdisc show on node1 (%v):\n%s", err, qd)
		}
		if lat, _ := strconv.ParseFloat(string(m[1]), 64); lat < 40 || lat > 60 {
			t.Errorf("netem.sh rate %s: tbf queue of %v ms on node1, want about 50:\n%s", c.rate, lat, qd)
		}
	}
}

// TestUpDownUsage gives up.sh and down.sh arguments they must refuse: exit
// 2 and one line, and no cluster made ("up.sh 2 3" made one of 2 hosts).
func TestUpDownUsage(t *testing.T) {
	lockCluster(t)
	for _, c := range []struct{ name, args, want string }{
		{"up.sh", "abc", "usage: up.sh [N]"},
		{"up.sh", "-1", "usage: up.sh [N]"},
		{"up.sh", "0", "N must be 1..200, not 0"},
		{"up.sh", "201", "N must be 1..200, not 201"},
		{"up.sh", "2 3", "usage: up.sh [N]"},
		{"down.sh", "now", "usage: down.sh"},
	} {
		out, err := script(30*time.Second, nil, c.name, strings.Fields(c.args)...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code(err) != 2 || len(lines) != 1 || !strings.Contains(out, c.want) {
			t.Errorf("%s %s: exit %d, output:\n%s\nwant exit 2 and one line with %q", c.name, c.args, code(err), out, c.want)
		}
		if _, err := os.Stat("/run/hpct-cluster"); err == nil {
			t.Errorf("%s %s made a cluster", c.name, c.args)
			script(30*time.Second, nil, "down.sh")
		}
	}
}

// TestScalingBadInput gives scaling.sh settings it must refuse: each is exit
// 2 with one line naming the setting, at once (before go build, up.sh or any
// measurement), leaving no temporary directory. A bad RATES or STEPS was
// found minutes into a run (STEPS in silence: train's output is filtered),
// a bad OUT only at the end, and a bad HOSTS after the build, leaving
// /tmp/hpct-scaling.* with its binary.
func TestScalingBadInput(t *testing.T) {
	lockCluster(t)
	out := t.TempDir()
	before, _ := filepath.Glob("/tmp/hpct-scaling.*")
	for _, c := range []struct{ env, want string }{
		{"HOSTS=0x2", "HOSTS: '0x2'"},
		{"HOSTS=1x", "HOSTS: '1x'"},
		{"HOSTS=201", "HOSTS: '201'"},
		{"HOSTS= ", "HOSTS: no layout"},
		{"RATES=abc", "RATES: 'abc'"},
		{"RATES=0", "RATES: '0'"},
		{"STEPS=abc", "STEPS=abc"},
		{"BATCH=0", "BATCH=0"},
		{"BUCKET_MB=-1", "BUCKET_MB=-1"},
		{"OUT=" + filepath.Join(out, "missing"), "OUT="},
		{"DATA=" + filepath.Join(out, "missing"), "DATA="},
		{"BIN=" + filepath.Join(out, "missing"), "BIN="},
	} {
		start := time.Now()
		o, err := script(20*time.Second, []string{"HOSTS=1", "RATES=1000", "OUT=" + out, c.env}, "scaling.sh")
		lines := strings.Split(strings.TrimSpace(o), "\n")
		if code(err) != 2 || len(lines) != 1 || !strings.Contains(o, c.want) {
			t.Errorf("%s scaling.sh: exit %d after %v, output:\n%s\nwant exit 2 and one line with %q", c.env, code(err),
				time.Since(start).Round(time.Millisecond), o, c.want)
		}
	}
	if after, _ := filepath.Glob("/tmp/hpct-scaling.*"); len(after) > len(before) {
		t.Errorf("temporary directories left: %v (before: %v)", after, before)
	}
}

// scalingCluster skips t as upCluster does and returns the environment for
// scaling.sh: a cluster name of its own, hpctscal, since scaling.sh takes
// that name's lock itself (and refuses to run while another holds it).
func scalingCluster(t *testing.T) []string {
	t.Helper()
	needCluster(t)
	env := []string{"HPCT_CLUSTER=hpctscal"}
	t.Cleanup(func() {
		if out, err := script(30*time.Second, env, "down.sh"); err != nil {
			t.Errorf("down.sh: %v\n%s", err, out)
		}
	})
	return env
}

// TestScalingRunFails runs scaling.sh's smallest case (one host, one rate)
// with a data directory that has no data: the benchmarks run, training
// fails, and scaling.sh must stop naming the run, with hpctrain's own line.
// Training's output went through grep for its final line, and scaling.sh
// ended with exit 1 and not a word.
func TestScalingRunFails(t *testing.T) {
	env := scalingCluster(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "hpctrain")
	if out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	empty := filepath.Join(dir, "nodata")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := script(3*time.Minute, append(env, "HOSTS=1", "RATES=1000", "STEPS=2", "BIN="+bin, "DATA="+empty, "OUT="+dir), "scaling.sh")
	t.Logf("scaling.sh: exit %d after %v:\n%s", code(err), time.Since(start).Round(time.Millisecond), out)
	if code(err) == 3 {
		t.Skip("kernel lacks tbf (scaling.sh exit 3)")
	}
	if code(err) != 1 || !strings.Contains(out, "cluster scaling.sh: train on 1 x 1 at 1000 Mbit/s failed (exit 2)") ||
		!strings.Contains(out, "no train-images-idx3-ubyte") {
		t.Errorf("want exit 1, a line naming the failed training and hpctrain's line on the data")
	}
}

// TestScalingOut runs scaling.sh's smallest case (one host, one rate, 2
// steps) with OUT in a temporary directory: it must write its JSON and
// table there, the table with the columns of docs/scaling_validation.md,
// and leave docs/scaling.md alone (its table is the run of record; a trial
// with OUT elsewhere replaced it).
func TestScalingOut(t *testing.T) {
	env := scalingCluster(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "hpctrain")
	if out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	doc := filepath.Join("..", "docs", "scaling.md")
	before, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if now, _ := os.ReadFile(doc); !bytes.Equal(now, before) {
			os.WriteFile(doc, before, 0o644) // put it back, failed or not
		}
	})
	out, err := script(3*time.Minute, append(env, "HOSTS=1", "RATES=1000", "STEPS=2", "BIN="+bin, "OUT="+dir), "scaling.sh")
	if code(err) == 3 {
		t.Skip("kernel lacks tbf (scaling.sh exit 3)")
	}
	if err != nil {
		t.Fatalf("scaling.sh: %v\n%s", err, out)
	}
	if now, _ := os.ReadFile(doc); !bytes.Equal(now, before) {
		t.Errorf("scaling.sh with OUT=%s rewrote %s", dir, doc)
	}
	var v struct {
		Command string
		Rows    []map[string]any
	}
	if b, err := os.ReadFile(filepath.Join(dir, "scaling_validation.json")); err != nil || json.Unmarshal(b, &v) != nil {
		t.Fatalf("scaling_validation.json in OUT: %v\n%s", err, b)
	}
	if len(v.Rows) != 1 || v.Rows[0]["hosts"] != 1.0 || v.Rows[0]["rate_mbit"] != 1000.0 || !(v.Rows[0]["train"].(float64) > 0) {
		t.Errorf("scaling_validation.json rows: %v", v.Rows)
	}
	header := func(md string) string {
		for _, l := range strings.Split(md, "\n") {
			if strings.HasPrefix(l, "| link |") {
				return l
			}
		}
		return ""
	}
	md, _ := os.ReadFile(filepath.Join(dir, "scaling_validation.md"))
	ref, _ := os.ReadFile(filepath.Join("..", "docs", "scaling_validation.md"))
	// The latency in the prose is rounded to the microsecond (it was
	// jq's float, "(1047.6538871578025 us)").
	if !regexp.MustCompile(`latency \([0-9]+ us\)`).Match(md) {
		t.Errorf("scaling_validation.md in OUT: the unlimited link's latency is not in whole microseconds:\n%s", md)
	}
	if h := header(string(md)); h == "" || h != header(string(ref)) || !strings.Contains(string(md), "| 1000 Mbit/s | 1 x 1 |") {
		t.Errorf("scaling_validation.md in OUT:\n%s\nwant the table header of docs/scaling_validation.md:\n%s\nand a row for 1000 Mbit/s, 1 x 1", md, header(string(ref)))
	}
}

// TestScalingClusterBusy runs scaling.sh while this test has a cluster up:
// scaling.sh must refuse at once, naming the lock, and leave the cluster as
// it was. It ran up.sh, which tore the test's cluster down and built its
// own, and its down.sh at the end left none.
func TestScalingClusterBusy(t *testing.T) {
	upCluster(t, 1)
	out, err := script(2*time.Minute, []string{"HOSTS=1", "RATES=1000", "BIN=/bin/true", "OUT=" + t.TempDir()}, "scaling.sh")
	if code(err) != 1 || !strings.Contains(out, "another process holds /run/lock/hpct-cluster.lock") {
		t.Errorf("scaling.sh: exit %d, output:\n%s\nwant exit 1 and a line naming the lock", code(err), out)
	}
	if _, err := os.Stat("/run/netns/hpct-node1"); err != nil {
		t.Errorf("the test's cluster is gone: %v", err)
	}
	if _, err := os.Stat("/run/netns/hpct-node2"); err == nil {
		t.Errorf("a cluster of 2 hosts replaced the test's of 1")
	}
}

// TestUpNamedCluster starts a cluster of another name (HPCT_CLUSTER) and
// runs the shell and stop commands up.sh prints: they must act on that
// cluster. They were the bare scripts, which act on hpct: the printed
// down.sh took down the default cluster (another's) and left this one.
func TestUpNamedCluster(t *testing.T) {
	lockCluster(t) // hpct's lock: where the printed commands go wrong, they act on hpct
	env := []string{"HPCT_CLUSTER=hpctnamed"}
	t.Cleanup(func() { script(30*time.Second, env, "down.sh") })
	out, err := script(60*time.Second, env, "up.sh", "1")
	if err != nil {
		t.Fatalf("up.sh 1: %v\n%s", err, out)
	}
	printed := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok && (k == "shell" || k == "stop") {
			printed[k] = strings.TrimSpace(v)
		}
	}
	sh := func(line string) string {
		b, err := exec.Command("sh", "-c", line).CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", line, err, b)
		}
		return string(b)
	}
	if got := sh(printed["shell"]); !strings.Contains(got, "node1") || !strings.Contains(got, "10.77.0.11") {
		t.Errorf("up.sh's shell command %q printed:\n%s", printed["shell"], got)
	}
	sh(printed["stop"])
	if _, err := os.Stat("/run/netns/hpctnamed-node1"); err == nil {
		t.Errorf("up.sh's stop command %q left cluster hpctnamed up; up.sh printed:\n%s", printed["stop"], out)
	}
}
