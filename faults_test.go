package main

import (
	"bytes"
	"context"
	"fmt"
	"image"
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

	"hpctrain/checkpoint"
	"hpctrain/internal/mpitest"
	"hpctrain/train"
)

// The failure paths of issue 5, each under the real mpirun: a rank killed,
// a rank stuck, a NaN on one rank, a replica that drifts.

// job is an mpirun started in the background.
type job struct {
	cmd  *exec.Cmd
	out  mpitest.Buffer
	done chan struct{}
	err  error
}

func startJob(t *testing.T, np int, env []string, args ...string) *job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	j := &job{cmd: mpitest.Command(ctx, np, bin, args...), done: make(chan struct{})}
	j.cmd.Env = append(j.cmd.Env, env...)
	j.cmd.Stdout, j.cmd.Stderr = &j.out, &j.out
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { j.err = j.cmd.Wait(); close(j.done) }()
	t.Cleanup(func() {
		// Nothing may outlive the test: stopped ranks included.
		for _, pid := range descendants(j.cmd.Process.Pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		j.cmd.Process.Kill()
		<-j.done
	})
	return j
}

// waitFor waits until the job's output contains s, failing after timeout.
func (j *job) waitFor(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(j.out.String(), s) {
		select {
		case <-j.done:
			t.Fatalf("job ended before printing %q:\n%s", s, j.out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q after %v:\n%s", s, timeout, j.out.String())
		}
	}
}

// end waits for the job to end within limit and returns its exit code and
// how long it took.
func (j *job) end(t *testing.T, limit time.Duration) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	select {
	case <-j.done:
	case <-time.After(limit):
		t.Fatalf("job still running %v after the fault:\n%s", limit, j.out.String())
	}
	code := 0
	if ee, ok := j.err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	return code, time.Since(start)
}

// rankPID returns the process of rank r among the job's processes.
func (j *job) rankPID(t *testing.T, r int) int {
	t.Helper()
	pid := j.findRank(r)
	if pid == 0 {
		t.Fatalf("rank %d not found among the job's processes", r)
	}
	return pid
}

// findRank returns the process of rank r, or 0 while there is none.
func (j *job) findRank(r int) int {
	want := "OMPI_COMM_WORLD_RANK=" + strconv.Itoa(r)
	for _, pid := range descendants(j.cmd.Process.Pid) {
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(string(env), "\x00") {
			if kv == want {
				return pid
			}
		}
	}
	return 0
}

// descendants lists every process below pid.
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so cut at ')'.
		i := bytes.LastIndexByte(stat, ')')
		f := strings.Fields(string(stat[i+1:]))
		if len(f) > 1 {
			pp, _ := strconv.Atoi(f[1])
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	for todo := children[pid]; len(todo) > 0; todo = todo[1:] {
		out = append(out, todo[0])
		todo = append(todo, children[todo[0]]...)
	}
	return out
}

// longRun trains long enough for a fault to strike mid-run.
var longRun = []string{"train", "-model", "cnn", "-epochs", "20", "-limit", "6400", "-test-limit", "200", "-threads", "1", "-progress", "500ms"}

func TestRankKilled(t *testing.T) {
	j := startJob(t, 3, nil, longRun...)
	j.waitFor(t, "step ", time.Minute)
	if err := syscall.Kill(j.rankPID(t, 1), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	code, took := j.end(t, 30*time.Second)
	host, _ := os.Hostname()
	out := j.out.String()
	t.Logf("job ended %v after SIGKILL of rank 1, exit %d", took.Round(time.Millisecond), code)
	if code == 0 {
		t.Errorf("exit code 0 after a rank was killed:\n%s", out)
	}
	// Open MPI names the lost rank and its node.
	if !strings.Contains(out, "rank 1") || !strings.Contains(out, host) {
		t.Errorf("no message naming rank 1 and host %s:\n%s", host, out)
	}
}

func TestStuckRankWatchdog(t *testing.T) {
	// 8s: the timeout also covers start-up, whose ranks a loaded
	// machine can hold seconds apart.
	j := startJob(t, 2, nil, append(longRun, "-collective-timeout", "8s")...)
	j.waitFor(t, "step ", time.Minute)
	// A stopped process neither answers nor dies: the peer's collective
	// never completes, only the watchdog ends the job.
	if err := syscall.Kill(j.rankPID(t, 1), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	code, took := j.end(t, 30*time.Second)
	out := j.out.String()
	t.Logf("job ended %v after SIGSTOP of rank 1, exit %d", took.Round(time.Millisecond), code)
	if code == 0 {
		t.Errorf("exit code 0 with a stuck rank:\n%s", out)
	}
	host, _ := os.Hostname()
	for _, want := range []string{"collective timeout", "rank 0 on host " + host, "step ", "cores"} {
		if !strings.Contains(out, want) {
			t.Errorf("watchdog message lacks %q:\n%s", want, out)
		}
	}
}

// TestStuckRankNamesItself: a rank stuck in its forward pass (a kernel
// that never returns, the process alive) is not in a collective, so only
// its peers time one out; its own watchdog names it first, once, and the
// peers' abort ends the job.
func TestStuckRankNamesItself(t *testing.T) {
	// 8s: the timeout also covers start-up and the load, which a loaded
	// machine can hold seconds apart (or long enough for a held line).
	args := []string{"train", "-model", "cnn", "-epochs", "1", "-limit", "3200", "-test-limit", "200", "-threads", "1", "-progress", "0", "-collective-timeout", "8s"}
	r := hpctrainEnv(t, 2, time.Minute, []string{"HPCTRAIN_FAULT=hang@1:4"}, args...)
	host, _ := os.Hostname()
	held := regexp.MustCompile(`rank 1 on host ` + regexp.QuoteMeta(host) + ` \(cores [^)]*\): no collective for [0-9.]+m?s, in training at step 4; a rank waiting for this one aborts the job at -collective-timeout 8s: if the job ends so, this rank held it up`)
	if r.code != train.ExitWatchdog || strings.Count(r.out, "held it up") != 1 || !held.MatchString(r.out) {
		t.Errorf("rank 1 stuck at step 4: exit %d, want %d and one line matching %s:\n%s", r.code, train.ExitWatchdog, held, r.out)
	}
	if i, j := strings.Index(r.out, "held it up"), strings.Index(r.out, "collective timeout:"); j < 0 || i > j {
		t.Errorf("the stuck rank's line should come before a peer's timeout:\n%s", r.out)
	}
}

// TestEveryRankStuck: a batch stuck on every rank at once (a hung file
// system under every rank's loader) leaves no rank in a collective to time
// out; it ran until the job's time limit. The step timeout ends it, exit 3,
// a stuck rank saying so: a training step with the collective timeout off
// (2 ranks), a batch of evaluation, a job of one process, where nobody
// waits at all, and the data's load at start-up. The first rank whose
// timer fires aborts the job, so a peer whose timer would fire a moment
// later (the load, where nothing keeps ranks in step) may be ended before
// its own line: one line from a stuck rank is what is asked.
func TestEveryRankStuck(t *testing.T) {
	args := []string{"train", "-model", "mlp", "-epochs", "1", "-limit", "1280", "-test-limit", "100", "-threads", "1", "-progress", "0", "-step-timeout", "5s"} // 5s: it also times the load of 60,000 images
	for _, c := range []struct {
		np           int
		fault, where string
		extra        []string
		ranks        []string
	}{
		{2, "hang@0:3,hang@1:3", "training at step 3", []string{"-collective-timeout", "0"}, []string{"0", "1"}},
		{2, "hang@0:evaluation,hang@1:evaluation", "evaluation after step 10", nil, []string{"0", "1"}},
		{0, "hang@0:2", "training at step 2", nil, []string{"0"}},
		{2, "hang@0:loading,hang@1:loading", "loading the data", nil, []string{"0", "1"}},
	} {
		r := hpctrainEnv(t, c.np, 2*time.Minute, []string{"HPCTRAIN_FAULT=" + c.fault}, append(args, c.extra...)...)
		if r.code != train.ExitWatchdog {
			t.Errorf("np %d, %s: exit %d, want %d:\n%s", c.np, c.fault, r.code, train.ExitWatchdog, r.out)
		}
		without := "finishing its batch or reaching a collective"
		if c.where == "loading the data" {
			without = "reading a file"
		}
		line := regexp.MustCompile(`rank (` + strings.Join(c.ranks, "|") + `) on host [^ ]+ \(cores [^)]*\): step timeout: ` + c.where + ` has gone 5s without ` + without)
		if !line.MatchString(r.out) {
			t.Errorf("np %d, %s: no line matching %s:\n%s", c.np, c.fault, line, r.out)
		}
	}
}

func TestNaNStopsAllRanks(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	args := []string{"train", "-model", "cnn", "-epochs", "1", "-limit", "3200", "-test-limit", "200", "-threads", "1",
		"-progress", "0", "-checkpoint-dir", ck, "-checkpoint-every", "2"}
	r := hpctrainEnv(t, 3, time.Minute, []string{"HPCTRAIN_FAULT=nan@2:5"}, args...)
	if r.code == 0 {
		t.Fatalf("exit 0 with a NaN loss on rank 2:\n%s", r.out)
	}
	// Every rank stops at the same step, each with one line.
	for rank, want := range []string{
		"rank 0 (", "rank 1 (", "rank 2 (",
	} {
		line := ""
		for _, l := range strings.Split(r.out, "\n") {
			if strings.HasPrefix(l, "hpctrain: "+want) {
				line = l
			}
		}
		if !strings.Contains(line, "step 5:") || !strings.Contains(line, "NaN") {
			t.Errorf("rank %d: no NaN stop at step 5 in %q:\n%s", rank, line, r.out)
		}
	}
	// The newest checkpoint is the last good one, step 4, and it loads.
	st, path, err := checkpoint.Latest(ck, func(msg string) { t.Log(msg) })
	if err != nil {
		t.Fatalf("newest checkpoint: %v\n%s", err, r.out)
	}
	if st.Step != 4 {
		t.Errorf("newest checkpoint %s is step %d, want 4", path, st.Step)
	}
}

// TestRankFailsAlone: a rank whose step fails on it alone (a device's
// failed allocation, a failed kernel) used to wait in MPI_Finalize while
// the others waited in their next all-reduce, until the watchdog ended the
// job minutes later (or never, with -collective-timeout 0). Now it aborts
// the job once the others have not stopped within finalizeGrace: exit 1,
// its own line first. The checkpoint written before the failure stays
// whole.
func TestRankFailsAlone(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	args := []string{"train", "-model", "cnn", "-epochs", "1", "-limit", "3200", "-test-limit", "200", "-threads", "1",
		"-progress", "0", "-checkpoint-dir", ck, "-checkpoint-every", "2", "-collective-timeout", "0"}
	start := time.Now()
	r := hpctrainEnv(t, 2, 90*time.Second, []string{"HPCTRAIN_FAULT=fail@1:3"}, args...)
	took := time.Since(start)
	t.Logf("job ended after %v, exit %d", took.Round(time.Millisecond), r.code)
	if r.code != 1 {
		t.Errorf("exit %d, want 1:\n%s", r.code, r.out)
	}
	for _, want := range []string{
		"hpctrain: rank 1 (", "epoch 1 step 3: HPCTRAIN_FAULT: step 3 fails on rank 1 alone",
		"the other ranks did not stop within 10s of this rank's error: aborting the job (exit 1)",
	} {
		if !strings.Contains(r.out, want) {
			t.Errorf("output lacks %q:\n%s", want, r.out)
		}
	}
	if st, path, err := checkpoint.Latest(ck, func(msg string) { t.Log(msg) }); err != nil || st == nil || st.Step != 2 {
		t.Errorf("newest checkpoint %s: %+v, %v; want step 2", path, st, err)
	}
}

// TestRanksDataDiffers: each node reads its own copy of the data; copies
// of another length or shape used to hang the ranks until the watchdog,
// or overrun the parameter broadcast (a segfault). Now every rank stops at
// start-up naming what differs. Rank 1's copy here has a test set of 300
// images, rank 0's the whole 10,000; the flags are the same (-data-dir
// data, each rank in its own working directory).
func TestRanksDataDiffers(t *testing.T) {
	real := "/usr/share/datasets/fashion-mnist"
	dirs := []string{filepath.Join(t.TempDir(), "w0"), filepath.Join(t.TempDir(), "w1")}
	for i, w := range dirs {
		d := filepath.Join(w, "data")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"} {
			if i == 1 && strings.HasPrefix(f, "t10k") {
				continue
			}
			if err := os.Symlink(filepath.Join(real, f), filepath.Join(d, f)); err != nil {
				t.Fatal(err)
			}
		}
	}
	writeIDX(t, filepath.Join(dirs[1], "data"), 300)
	for _, f := range []string{"images-idx3-ubyte", "labels-idx1-ubyte"} {
		if err := os.Rename(filepath.Join(dirs[1], "data", "test-"+f), filepath.Join(dirs[1], "data", "t10k-"+f)); err != nil {
			t.Fatal(err)
		}
	}
	out, err := inDirs(t, dirs, "train", "-model", "mlp", "-data-dir", "data", "-limit", "640", "-threads", "1", "-progress", "0")
	want := "data differs from rank 0's (640 training and 10000 test samples of 28x28x1, 10 classes): rank 1 has 640 training and 300 test samples of 28x28x1, 10 classes; give every node the same data set"
	if err == nil || strings.Count(string(out), want) != 2 {
		t.Errorf("%v, want both ranks to say %q:\n%s", err, want, out)
	}
}

// inDirs runs the same command line on one rank in each of dirs, its
// working directory (each node's copy of "data"), and fails the test on a
// hang.
func inDirs(t *testing.T, dirs []string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mpmd := []string{"--oversubscribe", "--bind-to", "none"}
	for i, w := range dirs {
		if i > 0 {
			mpmd = append(mpmd, ":")
		}
		mpmd = append(append(mpmd, "-np", "1", "-wdir", w, bin), args...)
	}
	cmd := exec.CommandContext(ctx, "mpirun", mpmd...)
	cmd.Env = mpitest.Env()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("hang:\n%s", out)
	}
	return out, err
}

// TestRanksFolderClassesDiffer: two nodes' copies of an image folder with
// the same counts under other class names (rank 1's cat images are in
// "zebra") would label the same images differently on the two ranks; the
// ranks compared only the counts and trained on. Now both stop at start-up
// naming the classes.
func TestRanksFolderClassesDiffer(t *testing.T) {
	dirs := []string{filepath.Join(t.TempDir(), "w0"), filepath.Join(t.TempDir(), "w1")}
	for i, w := range dirs {
		for k, cls := range [][]string{{"cat", "dog"}, {"zebra", "dog"}}[i] {
			d := filepath.Join(w, "data", cls)
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			for j := 0; j < 4; j++ {
				writePNG(t, filepath.Join(d, fmt.Sprintf("%d.png", j)), image.NewGray(image.Rect(0, 0, 8, 8+k)))
			}
		}
	}
	out, err := inDirs(t, dirs, "train", "-dataset", "folder", "-data-dir", "data", "-val-split", "0.25", "-image-shape", "8x8x1",
		"-model", "mlp", "-batch", "2", "-threads", "1", "-progress", "0")
	want := "data differs from rank 0's (6 training and 2 test samples of 8x8x1, 2 classes (cat, dog)): rank 1 has 6 training and 2 test samples of 8x8x1, 2 classes (dog, zebra)"
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 2 || strings.Count(string(out), want) != 2 {
		t.Errorf("exit %d (%v), want 2 with both ranks saying %q:\n%s", code, err, want, out)
	}
}

func TestDivergenceCheck(t *testing.T) {
	args := []string{"train", "-model", "cnn", "-epochs", "1", "-limit", "3200", "-test-limit", "200", "-threads", "1",
		"-progress", "0", "-check-every", "2"}
	r := hpctrainEnv(t, 2, time.Minute, []string{"HPCTRAIN_FAULT=perturb@1:3"}, args...)
	if r.code == 0 || !strings.Contains(r.out, "step 4: parameters of rank 1 differ") {
		t.Fatalf("exit %d, want a divergence stop at step 4:\n%s", r.code, r.out)
	}
	// Without the fault the same run passes every check.
	if r := hpctrain(t, 2, time.Minute, args...); r.code != 0 {
		t.Fatalf("healthy run: exit %d\n%s", r.code, r.out)
	}
}

// Every collective after MPI is up is under the watchdog, and MPI_Init under
// the start-up timeout: a rank that stops in any phase (HPCTRAIN_FAULT
// stop@1:PHASE sends it SIGSTOP as it enters the phase) ends the job with a
// message naming the collective and the phase and the watchdog's exit code,
// instead of hanging it. The timeout leaves a loaded machine's start-up
// (data, oneDNN, the placement) room: at 3s, with load 6 on the 2 cores,
// the resume case timed out in start-up before its rank stopped.
func TestWatchdogEveryPhase(t *testing.T) {
	for _, tc := range []struct {
		phase, want string
		stopped     int // the rank that stops; the other one reports
		extra       []string
	}{
		{"init", "MPI_Init did not complete within 5s", 1, nil},
		{"startup", "MPI_Allgather during start-up", 1, nil},
		// The root of a broadcast may finish before its peers have the
		// data, so the root stops and the receiver is caught.
		{"broadcast", "MPI_Bcast during the initial parameter broadcast", 0, nil},
		{"resume", "during resuming from a checkpoint", 1, []string{"-resume", "auto"}},
		{"signals", "MPI_Allreduce during agreeing on signals", 1, nil},
		{"checksum", "MPI_Allgather during comparing parameter checksums", 1, []string{"-check-every", "1"}},
		{"checkpoint", "during writing a checkpoint", 1, []string{"-checkpoint-every", "1"}},
		{"evaluation", "MPI_Allreduce during evaluation", 1, nil},
	} {
		t.Run(tc.phase, func(t *testing.T) {
			reporter := fmt.Sprintf("rank %d ", 1-tc.stopped)
			args := []string{"train", "-model", "mlp", "-limit", "256", "-test-limit", "1000", "-threads", "1", "-progress", "0",
				"-collective-timeout", "5s", "-checkpoint-dir", filepath.Join(t.TempDir(), "ck")}
			fault := fmt.Sprintf("HPCTRAIN_FAULT=stop@%d:%s", tc.stopped, tc.phase)
			j := startJob(t, 2, []string{fault}, append(args, tc.extra...)...)
			code, took := j.end(t, 40*time.Second)
			out := j.out.String()
			t.Logf("job ended %v after rank %d stopped in %s, exit %d", took.Round(time.Millisecond), tc.stopped, tc.phase, code)
			if code != train.ExitWatchdog {
				t.Errorf("exit %d with rank %d stopped in %s, want %d (a hung job):\n%s", code, tc.stopped, tc.phase, train.ExitWatchdog, out)
			}
			host, _ := os.Hostname()
			if !strings.Contains(out, tc.want) || !strings.Contains(out, reporter) || !strings.Contains(out, host) {
				t.Errorf("no message naming %q, %sand host %s:\n%s", tc.want, reporter, host, out)
			}
		})
	}
}

// TestTwoJobsOneCheckpointDir: a second job resuming into the directory a
// running job writes (an sbatch submitted twice, an overlapping requeue)
// is refused at its start, in one line per rank; the first job goes on.
// Before, neither held the directory: each save removed the other's
// temporary file, and one of them died at its next checkpoint.
func TestTwoJobsOneCheckpointDir(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	args := []string{"train", "-model", "mlp", "-limit", "6400", "-test-limit", "200", "-epochs", "5000", "-threads", "1",
		"-progress", "0", "-checkpoint-dir", ck, "-checkpoint-every", "50", "-resume", "auto"}
	first := startJob(t, 2, nil, args...) // ended by the test's cleanup
	first.waitFor(t, "hpctrain: checkpoint ", time.Minute)
	r := hpctrain(t, 2, time.Minute, args...)
	if r.code == 0 || strings.Count(r.out, "another job is writing checkpoints there now; wait for it to end, or use another -checkpoint-dir") != 1 {
		t.Errorf("second job: exit %d, want a refusal from rank 0:\n%s", r.code, r.out)
	}
	select {
	case <-first.done:
		t.Fatalf("the first job ended:\n%s", first.out.String())
	default:
	}
}

// TestSignalDuringStartup: a preemption signal that reaches a rank before
// MPI_Init (rank 1 stops itself there, the signal waits for SIGCONT) is
// acted on after the first step: every rank checkpoints and exits 85 for the
// requeue. Before, SIGTERM killed the rank (exit 143, no checkpoint, no
// requeue) and SIGUSR1, Go's default, was ignored.
func TestSignalDuringStartup(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGUSR1} {
		ck := filepath.Join(t.TempDir(), "ck")
		j := startJob(t, 2, []string{"HPCTRAIN_FAULT=stop@1:init"}, "train", "-model", "mlp", "-limit", "640", "-test-limit", "100",
			"-threads", "1", "-progress", "0", "-checkpoint-dir", ck)
		pid := waitStopped(t, j.out.String, func() int { return j.findRank(1) })
		syscall.Kill(pid, sig)
		syscall.Kill(pid, syscall.SIGCONT)
		code, _ := j.end(t, time.Minute)
		if code != 85 || !strings.Contains(j.out.String(), "; exiting with code 85 for requeue") {
			t.Errorf("%v during start-up: exit %d, want 85 after a checkpoint:\n%s", sig, code, j.out.String())
		}
	}
}

// TestUnsavedSignalDuringStartup: SIGUSR1 (SLURM's warning before the
// time limit) reaching a run without -checkpoint-dir before MPI_Init is
// said at the first step, as one that comes later is, and the run goes
// on to its end. Before, Go dropped it without a word until the run had
// built its checkpointer.
func TestUnsavedSignalDuringStartup(t *testing.T) {
	j := startJob(t, 1, []string{"HPCTRAIN_FAULT=stop@0:init"}, "train", "-model", "mlp", "-limit", "640", "-test-limit", "100",
		"-threads", "1", "-progress", "0")
	pid := waitStopped(t, j.out.String, func() int { return j.findRank(0) })
	syscall.Kill(pid, syscall.SIGUSR1)
	syscall.Kill(pid, syscall.SIGCONT)
	code, _ := j.end(t, time.Minute)
	said := "hpctrain: warning: SIGUSR1 received at step 1, but this run writes no checkpoints (no -checkpoint-dir): nothing to save; training goes on"
	if code != 0 || strings.Count(j.out.String(), said) != 1 {
		t.Errorf("SIGUSR1 during start-up of a run without checkpoints: exit %d, want 0 and %q once:\n%s", code, said, j.out.String())
	}
}

// waitStopped waits until the process find returns (0: none yet) is
// stopped (a stop@ fault), and returns it; out is the job's output so far.
func waitStopped(t *testing.T, out func() string, find func() int) int {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the process never stopped itself:\n%s", out())
		}
		pid := find()
		if pid == 0 {
			continue
		}
		if st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && strings.Contains(string(st), ") T ") {
			return pid
		}
	}
}

// TestInterruptCheckpoints: SIGINT (Ctrl-C) or SIGHUP reaching a rank of a
// run with -checkpoint-dir checkpoints on every rank and exits 130, which
// no batch script takes for a requeue; with a preemption signal on another
// rank the job exits 85 for the requeue. A run started alone (no mpirun)
// does the same, and one whose SIGINT is ignored (nohup, a background
// job) keeps ignoring it. Before, SIGINT or SIGHUP killed the rank with no
// checkpoint.
func TestInterruptCheckpoints(t *testing.T) {
	args := func(ck string) []string {
		return []string{"train", "-model", "mlp", "-limit", "640", "-test-limit", "100", "-threads", "1", "-progress", "0", "-checkpoint-dir", ck}
	}
	saidInterrupted := "hpctrain: interrupted (SIGINT or SIGHUP): checkpointed step 1; exiting with code 130"
	for _, c := range []struct {
		name      string
		rank0     syscall.Signal // sent to rank 0 as well (0: none)
		rank1     syscall.Signal
		code      int
		said      string
		saidNever string
	}{
		{"int", 0, syscall.SIGINT, 130, saidInterrupted, "for requeue"},
		{"hup", 0, syscall.SIGHUP, 130, saidInterrupted, "for requeue"},
		{"int and term", syscall.SIGTERM, syscall.SIGINT, 85, "; exiting with code 85 for requeue", "interrupted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ck := filepath.Join(t.TempDir(), "ck")
			fault := "stop@1:init"
			if c.rank0 != 0 {
				// Rank 0 stopped too, its handlers in place: on a loaded
				// machine it may not have reached them yet when rank 1
				// stops, and the signal's default would kill it.
				fault = "stop@0:init,stop@1:init"
			}
			j := startJob(t, 2, []string{"HPCTRAIN_FAULT=" + fault}, args(ck)...)
			pid := waitStopped(t, j.out.String, func() int { return j.findRank(1) })
			if c.rank0 != 0 {
				pid0 := waitStopped(t, j.out.String, func() int { return j.findRank(0) })
				syscall.Kill(pid0, c.rank0)
				syscall.Kill(pid0, syscall.SIGCONT)
			}
			syscall.Kill(pid, c.rank1)
			syscall.Kill(pid, syscall.SIGCONT)
			code, _ := j.end(t, time.Minute)
			out := j.out.String()
			if code != c.code || !strings.Contains(out, c.said) || strings.Contains(out, c.saidNever) {
				t.Errorf("exit %d, want %d, saying %q and not %q:\n%s", code, c.code, c.said, c.saidNever, out)
			}
			if _, err := os.Stat(filepath.Join(ck, checkpoint.FileName(1))); err != nil {
				t.Errorf("no checkpoint of step 1: %v", err)
			}
		})
	}

	t.Run("alone", func(t *testing.T) {
		cmd, out := stoppedAlone(t, bin, args(filepath.Join(t.TempDir(), "ck"))...)
		pid := cmd.Process.Pid
		syscall.Kill(pid, syscall.SIGINT)
		syscall.Kill(pid, syscall.SIGCONT)
		err := cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 130 || !strings.Contains(out.String(), saidInterrupted) {
			t.Errorf("exit %d (%v), want 130 after a checkpoint:\n%s", code, err, out.String())
		}
	})

	t.Run("ignored", func(t *testing.T) {
		// As nohup or a shell's background job starts it: SIGINT ignored.
		cmd, out := stoppedAlone(t, "sh", append([]string{"-c", `trap "" INT; exec "$0" "$@"`, bin}, args(filepath.Join(t.TempDir(), "ck"))...)...)
		pid := cmd.Process.Pid
		syscall.Kill(pid, syscall.SIGINT)
		syscall.Kill(pid, syscall.SIGCONT)
		if err := cmd.Wait(); err != nil || !strings.Contains(out.String(), "final: test accuracy") {
			t.Errorf("%v, want the run to end normally, its SIGINT ignored:\n%s", err, out.String())
		}
	})
}

// stoppedAlone starts name args (hpctrain, or a shell that execs it) with
// no launcher and a fault that stops it as its run starts, and returns it
// stopped, with its output so far.
func stoppedAlone(t *testing.T, name string, args ...string) (*exec.Cmd, *mpitest.Buffer) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "HPCTRAIN_FAULT=stop@0:startup") // no launcher: no rank before MPI_Init
	out := new(mpitest.Buffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitStopped(t, out.String, func() int { return cmd.Process.Pid })
	return cmd, out
}

// TestRankZeroOutputFails: rank 0's -loss-log (or -metrics) on a full
// disk stops every rank at once, each saying why; rank 0 used to stop
// alone and the others waited in the next collective until the watchdog.
func TestRankZeroOutputFails(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skipf("no /dev/full here: %v", err)
	}
	r := hpctrain(t, 2, time.Minute, "train", "-model", "mlp", "-limit", "640", "-test-limit", "100", "-threads", "1", "-progress", "0", "-loss-log", "/dev/full")
	if r.code == 0 || !strings.Contains(r.out, "writing the loss log: write /dev/full: no space left on device") ||
		!strings.Contains(r.out, "rank 1 (") || !strings.Contains(r.out, "writing the metrics and the loss log failed on rank 0") {
		t.Errorf("exit %d, want both ranks to stop on rank 0's full disk:\n%s", r.code, r.out)
	}
}

// smallDisk mounts a tmpfs of size bytes in a new temporary directory,
// unmounted when the test ends, and returns it: a real full disk. The
// test is skipped where mounting is not permitted (not root).
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("cannot mount a tmpfs here (root needed): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// TestCheckpointDiskFull: the checkpoint directory fills up mid-run (room
// for one mlp checkpoint of 3.3 MB, not two). Every rank stops at the
// second save, rank 0 naming the checkpoint it could not write and the
// disk's error in one line; nothing partial is left, and the first
// checkpoint resumes once there is room. Before, the line named the
// temporary file twice ("save checkpoint ck/ckpt-000000000004-9a1f....tmp:
// write: write ck/ckpt-000000000004-9a1f....tmp: no space left on
// device"), a file already removed.
func TestCheckpointDiskFull(t *testing.T) {
	disk := smallDisk(t, 5<<20)
	ck := filepath.Join(disk, "ck")
	args := []string{"train", "-model", "mlp", "-limit", "640", "-test-limit", "100", "-threads", "1", "-progress", "0",
		"-checkpoint-dir", ck, "-checkpoint-every", "2"}
	r := hpctrain(t, 2, time.Minute, args...)
	want := "hpctrain: rank 0 (" // then the host
	line := ""
	for _, l := range strings.Split(r.out, "\n") {
		if strings.HasPrefix(l, want) {
			line = l
		}
	}
	second := filepath.Join(ck, checkpoint.FileName(4))
	if r.code != 1 || !strings.HasSuffix(line, "): save checkpoint "+second+": write: no space left on device; the checkpoints before it are as they were") ||
		strings.Contains(r.out, ".tmp") || !strings.Contains(r.out, "rank 1 (") {
		t.Errorf("exit %d, want 1, rank 0 naming %s and the full disk, rank 1 stopping:\n%s", r.code, second, r.out)
	}
	names, _ := filepath.Glob(filepath.Join(ck, "*"))
	if len(names) != 1 || filepath.Base(names[0]) != checkpoint.FileName(2) {
		t.Errorf("checkpoint dir holds %v, want %s alone", names, checkpoint.FileName(2))
	}
	// Room again: the first checkpoint resumes and the run completes.
	if err := syscall.Mount("tmpfs", disk, "tmpfs", syscall.MS_REMOUNT, "size=16m"); err != nil {
		t.Fatal(err)
	}
	r = hpctrain(t, 2, time.Minute, append(args, "-resume", "auto")...)
	if r.code != 0 || !strings.Contains(r.out, "resuming from "+filepath.Join(ck, checkpoint.FileName(2))+" (step 2") {
		t.Errorf("resuming after the disk had room: exit %d:\n%s", r.code, r.out)
	}
}

// TestEpochReportSurvivesDeath: a rank that dies while the epoch is
// evaluated (stopped as it enters the evaluation, then killed) loses no
// report and no loss-log line. The periodic checkpoint due at the epoch's
// last step is written once the epoch is reported, so the run resumed
// from the one before reports the epoch; and the loss log is written out
// at every checkpoint, so the lines up to it survive the kill. Before,
// the checkpoint came before the evaluation and said the epoch was
// reported (the resumed run never reported epoch 1), and the lines of
// steps 1-5 died in rank 0's buffer.
func TestEpochReportSurvivesDeath(t *testing.T) {
	dir := t.TempDir()
	ck, m, l := filepath.Join(dir, "ck"), filepath.Join(dir, "m.jsonl"), filepath.Join(dir, "loss.txt")
	// 640 samples, batch 32 on 2 ranks: 10 steps per epoch, checkpoints
	// every 5.
	args := []string{"train", "-model", "mlp", "-limit", "640", "-test-limit", "100", "-batch", "32", "-epochs", "2", "-threads", "1",
		"-progress", "0", "-checkpoint-dir", ck, "-checkpoint-every", "5", "-metrics", m, "-loss-log", l}
	j := startJob(t, 2, []string{"HPCTRAIN_FAULT=stop@1:evaluation"}, args...)
	pid := waitStopped(t, j.out.String, func() int { return j.findRank(1) })
	syscall.Kill(pid, syscall.SIGKILL)
	if code, _ := j.end(t, time.Minute); code == 0 {
		t.Fatalf("the job with a killed rank exited 0:\n%s", j.out.String())
	}
	if _, err := os.Stat(filepath.Join(ck, checkpoint.FileName(10))); err == nil {
		t.Errorf("a checkpoint of step 10, the unreported epoch's last step, was written before its report")
	}
	r := hpctrain(t, 2, 2*time.Minute, append(args, "-resume", "auto")...)
	if r.code != 0 || !strings.Contains(r.out, "resuming from "+filepath.Join(ck, checkpoint.FileName(5))) {
		t.Fatalf("resumed: exit %d, want 0 from step 5:\n%s", r.code, r.out)
	}
	var epochs []float64
	for _, rec := range readMetrics(t, m) {
		epochs = append(epochs, rec["epoch"].(float64))
	}
	if !slices.Equal(epochs, []float64{1, 2, 2}) { // the last is the final line
		t.Errorf("metrics of epochs %v, want 1, 2 and the final 2:\n%s", epochs, r.out)
	}
	b, _ := os.ReadFile(l)
	var steps []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		steps = append(steps, strings.Fields(line)[0])
	}
	if want := strings.Fields("1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"); !slices.Equal(steps, want) {
		t.Errorf("loss log of steps %v, want 1 to 20 once each", steps)
	}
}

// TestReportAndSaveFail: a run whose epoch report cannot be written
// (-metrics on /dev/full) checkpoints before it stops; when that fails
// too (a second checkpoint does not fit on its disk) both are said on
// rank 0's one line. Before, errors.Join put the checkpoint's failure on a
// second line, without the rank's prefix.
func TestReportAndSaveFail(t *testing.T) {
	// Room for one mlp checkpoint (3.3 MB), which start-up checks for and
	// step 6 writes, not for the second at the epoch's end (step 10).
	disk := smallDisk(t, 5<<20)
	r := hpctrain(t, 2, time.Minute, "train", "-model", "mlp", "-limit", "640", "-test-limit", "100", "-batch", "32", "-threads", "1", "-progress", "0",
		"-checkpoint-dir", filepath.Join(disk, "ck"), "-checkpoint-every", "6", "-metrics", "/dev/full")
	var line string
	for _, l := range strings.Split(r.out, "\n") {
		if strings.Contains(l, "save checkpoint") {
			line = l
		}
	}
	if r.code != 1 || !strings.HasPrefix(line, "hpctrain: rank 0 (") || !strings.Contains(line, "writing metrics") ||
		!strings.Contains(line, "; and the checkpoint before stopping failed: ") || !strings.Contains(line, "no space left on device") {
		t.Errorf("exit %d, want 1 and rank 0's one line naming the metrics and the checkpoint:\n%s", r.code, r.out)
	}
}

// TestEvalStuck: `hpctrain eval` under mpirun had no watchdog: a rank dead
// or stuck left the others in the evaluation's reduction for good (in
// MPI_Init, where it never started MPI), and a load or batch stuck on every
// rank (or in one process) ran until the job's time limit. It now times
// them as train does: exit 3, a line naming the rank or host.
func TestEvalStuck(t *testing.T) {
	ck := zooCheckpoint(t, t.TempDir(), "mlp")
	host, _ := os.Hostname()
	args := []string{"eval", "-checkpoint", ck, "-test-limit", "500", "-threads", "1"}
	for _, c := range []struct {
		np    int
		fault string
		extra []string
		want  []string // regular expressions, each to be matched
	}{
		// 10s: the timeout also covers start-up, whose ranks a loaded
		// machine can hold seconds apart. Rank 1's own line ("held it
		// up") comes a tick before rank 0's abort, which may kill it
		// first under load: TestStuckRankNamesItself asks it of training.
		{2, "hang@1:evaluation", []string{"-collective-timeout", "10s"}, []string{
			`rank 0 on host ` + regexp.QuoteMeta(host) + `: collective timeout: MPI_Allreduce during evaluation waited 10s; a peer is dead or stuck`,
		}},
		{2, "hang@0:evaluation,hang@1:evaluation", []string{"-step-timeout", "5s"}, []string{
			`rank [01] on host [^ ]+: step timeout: evaluation has gone 5s without finishing its batch or reaching a collective`,
		}},
		{0, "hang@0:loading", []string{"-step-timeout", "5s"}, []string{
			`rank 0 on host [^ ]+: step timeout: loading the data has gone 5s without reading a file`,
		}},
		// A rank that never starts MPI: MPI_Init is timed as in train.
		{2, "stop@1:init", []string{"-collective-timeout", "5s"}, []string{
			`MPI_Init did not complete within 5s on host ` + regexp.QuoteMeta(host),
		}},
	} {
		start := time.Now()
		r := hpctrainEnv(t, c.np, time.Minute, []string{"HPCTRAIN_FAULT=" + c.fault}, append(args, c.extra...)...)
		took := time.Since(start)
		if r.code != train.ExitWatchdog {
			t.Errorf("np %d, %s: exit %d after %v, want %d:\n%s", c.np, c.fault, r.code, took, train.ExitWatchdog, r.out)
		}
		for _, w := range c.want {
			if !regexp.MustCompile(w).MatchString(r.out) {
				t.Errorf("np %d, %s: no line matching %s:\n%s", c.np, c.fault, w, r.out)
			}
		}
	}
	// Out of range: one line, exit 2, before any rank starts.
	for _, bad := range [][]string{{"-step-timeout", "500ms"}, {"-collective-timeout", "-1"}} {
		r := hpctrain(t, 0, time.Minute, append(args, bad...)...)
		if want := bad[0] + " "; r.code != 2 || !strings.Contains(r.out, want) || !strings.Contains(r.out, "must be 0 (never) or at least 1s") {
			t.Errorf("%v: exit %d, want 2 and a line naming %s:\n%s", bad, r.code, bad[0], r.out)
		}
	}
}
