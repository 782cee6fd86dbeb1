package slurm

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCluster starts a real one-host SLURM cluster with
// scripts/slurm/up.sh (root; installs packages if missing), runs a trivial
// job and a script rendered by Render whose fake trainer is told to stop by
// `scancel --signal=USR1 --batch`, checks that the script forwards the signal,
// sees ExitRequeue and requeues the job, and stops the cluster with down.sh;
// the same with the signal arriving before the trainer starts, with
// mpirun killed by the forwarded signal, and with the requeue refused by
// SLURM.
// It takes about 20 s; -short skips it.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: not starting a SLURM cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c := startCluster(ctx, t, dir)
	conf := filepath.Join(dir, "cluster", "slurm.conf")
	if want := "export SLURM_CONF=" + conf; !strings.Contains(c.up, want) {
		t.Fatalf("up.sh printed %q, want %q", c.up, want)
	}
	run := func(name string, args ...string) string {
		t.Helper()
		return c.run(t, dir, name, args...)
	}
	run(filepath.Join(c.scripts, "up.sh"), filepath.Join(dir, "cluster")) // idempotent

	t.Run("hostlist matches scontrol", func(t *testing.T) {
		for _, c := range hostlistCases {
			if c.in == "" {
				continue
			}
			got := strings.Fields(run("scontrol", "show", "hostnames", c.in))
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("scontrol show hostnames %q = %q, ExpandHostlist test wants %q", c.in, got, c.want)
			}
		}
	})

	// A trivial job.
	id := strings.TrimSpace(run("sbatch", "--parsable", "-D", dir, "-o", "wrap-%j.out", "--wrap", "hostname; echo ok"))
	waitFor(ctx, t, filepath.Join(dir, "wrap-"+id+".out"), "ok\n")

	// The rendered script with a fake trainer that checkpoints on SIGUSR1.
	trainer := filepath.Join(dir, "fake-trainer")
	writeFile(t, trainer, 0o755, `#!/bin/bash
trap 'echo "rank $OMPI_COMM_WORLD_RANK got USR1"; exit `+strconv.Itoa(ExitRequeue)+`' USR1
echo "rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE started: $*"
for i in $(seq 400); do sleep 0.1; done
`)
	spec := DefaultJobSpec()
	spec.Name, spec.TasksPerNode, spec.Time = "fake", 2, "5"
	spec.Output, spec.Error = filepath.Join(dir, "%x-%j.out"), filepath.Join(dir, "%x-%j.out")
	spec.Binary, spec.Config, spec.Oversubscribe = trainer, "cfg.toml", true
	spec.Sbatch = []string{"--comment=from-the-job-file"} // reaches SLURM: scontrol shows it below
	var script bytes.Buffer
	if err := Render(&script, spec); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "job.sbatch"), 0o644, script.String())
	id = strings.TrimSpace(run("sbatch", "--parsable", "-D", dir, filepath.Join(dir, "job.sbatch")))
	out := filepath.Join(dir, "fake-"+id+".out")
	waitFor(ctx, t, out, "rank 1 of 2 started: train -config cfg.toml -checkpoint-dir checkpoints -resume auto")
	waitFor(ctx, t, out, "rank 0 of 2 started")
	run("scancel", "--signal=USR1", "--batch", id)
	waitFor(ctx, t, out, "got SIGUSR1, forwarding SIGUSR1 to mpirun")
	waitFor(ctx, t, out, "trainer exited with status 85")
	waitFor(ctx, t, out, "requeueing job "+id)
	// SLURM holds a requeued job for about two minutes (BeginTime) before
	// rerunning it; seeing it pending with Restarts=1 is enough here.
	waitJob(ctx, t, c, id, "JobState=PENDING", "Restarts=1", "Comment=from-the-job-file")
	run("scancel", id)

	// Stopped before the trainer starts (here while a slow `module load`
	// runs, the module command being an exported shell function as Lmod's
	// is): the batch shell must not die of the signal, and the job is
	// requeued without starting mpirun.
	t.Run("stopped before the trainer starts", func(t *testing.T) {
		slow := spec
		slow.Modules = []string{"slow/1"}
		script.Reset()
		if err := Render(&script, slow); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "slow.sbatch"), 0o644, script.String())
		id := c.submit(t, dir, filepath.Join(dir, "slow.sbatch"), `BASH_FUNC_module%%=() {  echo "module $*: loading"; sleep 3; }`)
		out := filepath.Join(dir, "fake-"+id+".out")
		waitFor(ctx, t, out, "module load slow/1: loading")
		c.run(t, dir, "scancel", "--signal=USR1", "--batch", id)
		waitJob(ctx, t, c, id, "JobState=PENDING", "Restarts=1")
		waitFor(ctx, t, out, "requeueing job "+id)
		if log, _ := os.ReadFile(out); bytes.Contains(log, []byte("of 2 started")) {
			t.Errorf("the trainer was started after the job was told to stop:\n%s", log)
		}
	})

	// mpirun killed by the SIGUSR1 the script forwards (it relays USR1 to
	// the ranks only until they begin to end: a signal as the run finishes
	// kills it): the script sees 138, not the trainer's status, and must
	// requeue as for a stop, not end the job FAILED with 138. A stand-in
	// mpirun that a USR1 kills, found first on the job's PATH, makes the
	// moment certain.
	t.Run("mpirun killed by the forwarded signal", func(t *testing.T) {
		bin := filepath.Join(dir, "usr1-kills")
		if err := os.Mkdir(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(bin, "mpirun"), 0o755, "#!/bin/sh\necho \"stand-in mpirun started\"\nexec sleep 60\n")
		id := c.submit(t, dir, filepath.Join(dir, "job.sbatch"), "PATH="+bin+":"+os.Getenv("PATH"))
		out := filepath.Join(dir, "fake-"+id+".out")
		waitFor(ctx, t, out, "stand-in mpirun started")
		c.run(t, dir, "scancel", "--signal=USR1", "--batch", id)
		waitFor(ctx, t, out, "trainer exited with status 138")
		waitJob(ctx, t, c, id, "JobState=PENDING", "Restarts=1")
		waitFor(ctx, t, out, "requeueing job "+id)
	})

	// A job whose requeue SLURM refuses (sbatch --no-requeue overrides the
	// script's --requeue) ends with the trainer's 85, saying so, not with
	// scontrol's 1.
	t.Run("requeue refused", func(t *testing.T) {
		id := strings.TrimSpace(c.run(t, dir, "sbatch", "--parsable", "--no-requeue", "-D", dir, filepath.Join(dir, "job.sbatch")))
		defer c.cancel(id)
		out := filepath.Join(dir, "fake-"+id+".out")
		waitFor(ctx, t, out, "rank 0 of 2 started")
		waitFor(ctx, t, out, "rank 1 of 2 started")
		c.run(t, dir, "scancel", "--signal=USR1", "--batch", id)
		waitJob(ctx, t, c, id, "JobState=FAILED", "ExitCode="+strconv.Itoa(ExitRequeue)+":0")
		waitFor(ctx, t, out, "scontrol requeue failed")
	})
}

// waitJob polls `scontrol show job id` until it shows every one of want,
// failing at once when the job has ended without showing them.
func waitJob(ctx context.Context, t *testing.T, c *testCluster, id string, want ...string) {
	t.Helper()
	for {
		show := c.run(t, c.dir, "scontrol", "show", "job", id)
		all := true
		for _, w := range want {
			all = all && strings.Contains(show, w)
		}
		if all {
			return
		}
		switch state := jobField(show, "JobState"); state {
		case "FAILED", "CANCELLED", "COMPLETED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY":
			t.Fatalf("job %s ended (%s), want %q:\n%s", id, state, want, show)
		}
		if ctx.Err() != nil {
			t.Fatalf("job %s never showed %q:\n%s", id, want, show)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// testCluster is a one-host SLURM started for one test.
type testCluster struct {
	ctx     context.Context
	scripts string   // scripts/slurm
	dir     string   // its configuration, state and logs
	env     []string // the cluster's own ports and SLURM_CONF
	up      string   // what up.sh printed
}

// startCluster starts a cluster in dir/cluster with scripts/slurm/up.sh, on
// its own ports (a cluster someone already runs on 6817/6818 is left
// alone), and stops it with down.sh when t ends.
func startCluster(ctx context.Context, t *testing.T, dir string) *testCluster {
	t.Helper()
	scripts, err := filepath.Abs("../scripts/slurm")
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{ctx: ctx, scripts: scripts,
		env: append(os.Environ(), "SLURMCTLD_PORT="+freePort(t), "SLURMD_PORT="+freePort(t))}
	clusterDir := filepath.Join(dir, "cluster")
	c.dir = clusterDir
	t.Cleanup(func() {
		cmd := exec.Command(filepath.Join(scripts, "down.sh"), clusterDir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("down.sh: %v\n%s", err, out)
		}
	})
	c.up = c.run(t, dir, filepath.Join(scripts, "up.sh"), clusterDir)
	c.env = append(c.env, "SLURM_CONF="+filepath.Join(clusterDir, "slurm.conf"))
	return c
}

// run runs name with args in wd with the cluster's environment and returns
// its standard output; it fails t with both outputs if the command fails.
func (c *testCluster) run(t *testing.T, wd, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(c.ctx, name, args...)
	cmd.Env, cmd.Dir = c.env, wd
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// submit submits script with sbatch from wd, in the cluster's
// environment and extra (a variable set there again takes the new value),
// and returns the job's id; the job is cancelled when t ends.
func (c *testCluster) submit(t *testing.T, wd, script string, extra ...string) string {
	t.Helper()
	cmd := exec.CommandContext(c.ctx, "sbatch", "--parsable", "-D", wd, script)
	cmd.Env = append(slices.Clip(c.env), extra...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch %s: %v\n%s", script, err, b)
	}
	id := strings.TrimSpace(string(b))
	t.Cleanup(func() { c.cancel(id) })
	return id
}

// cancel cancels job id if it is still there, ignoring scancel's error for
// one that has ended.
func (c *testCluster) cancel(id string) {
	cmd := exec.Command("scancel", id)
	cmd.Env = c.env
	cmd.Run()
}

// diagnose returns what an administrator would look at when a job is stuck:
// the queue, the node, and the tails of both daemons' logs. It runs after
// the test's context may have ended, so it has a short deadline of its own.
func (c *testCluster) diagnose() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	for _, args := range [][]string{{"squeue", "-l"}, {"sinfo", "-N", "-l"}, {"scontrol", "show", "node"}} {
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Env = c.env
		out, err := cmd.CombinedOutput()
		fmt.Fprintf(&b, "--- %s (%v) ---\n%s", strings.Join(args, " "), err, out)
	}
	for _, log := range []string{"slurmctld.log", "slurmd.log"} {
		text, _ := os.ReadFile(filepath.Join(c.dir, log))
		lines := strings.SplitAfter(string(text), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		fmt.Fprintf(&b, "--- %s (last %d lines) ---\n%s", log, len(lines), strings.Join(lines, ""))
	}
	return b.String()
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

func writeFile(t *testing.T, path string, mode os.FileMode, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls path until it contains want or ctx ends.
func waitFor(ctx context.Context, t *testing.T, path, want string) {
	t.Helper()
	for {
		b, _ := os.ReadFile(path)
		if bytes.Contains(b, []byte(want)) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never contained %q; it holds:\n%s", path, want, b)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
