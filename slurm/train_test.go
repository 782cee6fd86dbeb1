package slurm

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"hpctrain/checkpoint"
	"hpctrain/internal/mpitest"
)

// TestSbatchTrain runs the committed scripts/train.sbatch with the real
// hpctrain on a real one-host SLURM: once to completion, and once
// preempted mid-run (`scancel --signal=USR1 --batch`), requeued and
// resumed, whose final parameters must equal an uninterrupted run's bit for
// bit. It takes about a minute; -short skips it.
func TestSbatchTrain(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: not starting a SLURM cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	dir := t.TempDir()
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "hpctrain")
	if out, err := exec.Command("go", "build", "-o", bin, repo).CombinedOutput(); err != nil {
		t.Fatalf("building hpctrain: %v\n%s", err, out)
	}
	c := startCluster(ctx, t, dir)
	run, env := c.run, c.env

	// A job directory as a user has it: the binary and scripts/train.toml
	// (here a short configuration) beside it; the script is the committed
	// one, unchanged.
	jobDir := func(t *testing.T, name, config string) string {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Join(d, "scripts"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(d, "scripts", "train.toml"), 0o644, config)
		if err := os.Symlink(bin, filepath.Join(d, "hpctrain")); err != nil {
			t.Fatal(err)
		}
		return d
	}
	sbatch := func(t *testing.T, d string) (id, out string) {
		out = filepath.Join(d, "job.out")
		id = strings.TrimSpace(run(t, d, "sbatch", "--parsable", "-D", d, "-o", out, "-e", out, filepath.Join(repo, "scripts/train.sbatch")))
		t.Cleanup(func() {
			c := exec.Command("scancel", id)
			c.Env = env
			c.Run()
		})
		return id, out
	}

	t.Run("completes", func(t *testing.T) {
		d := jobDir(t, "short", `model = "cnn"
epochs = 1
limit = 3200
test_limit = 1000
threads = 1
progress = "1s"
verbose = true
`)
		_, out := sbatch(t, d)
		waitFor(ctx, t, out, "trainer exited with status 0")
		b, _ := os.ReadFile(out)
		m := regexp.MustCompile(`final: test accuracy ([0-9.]+)%`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("no accuracy line:\n%s", b)
		}
		// 50 steps of 2 x 64: far above chance (10%).
		if acc, _ := strconv.ParseFloat(string(m[1]), 64); acc < 60 {
			t.Errorf("test accuracy %.2f%% after one short epoch, want >= 60%%:\n%s", acc, b)
		}
		// -v: each rank says where its place in the job came from; inside
		// the allocation the batch shell's SLURM_PROCID is not trusted.
		for _, want := range []string{"rank 0 (", "rank 1 (", "from MPI_Comm_rank/size", "ignored SLURM_PROCID"} {
			if !bytes.Contains(b, []byte(want)) {
				t.Errorf("output lacks %q:\n%s", want, b)
			}
		}
	})

	t.Run("srun --mpi=pmix", func(t *testing.T) {
		if !strings.Contains(run(t, dir, "srun", "--mpi=list"), "pmix") {
			t.Skip("this SLURM has no PMIx plugin (srun --mpi=list)")
		}
		cmd := exec.CommandContext(ctx, "srun", "--mpi=pmix", "-n", "2", bin, "train", "-v", "-model", "cnn", "-epochs", "1",
			"-limit", "1280", "-test-limit", "200", "-threads", "1", "-progress", "0")
		cmd.Env, cmd.Dir = env, dir
		b, err := cmd.CombinedOutput()
		out := string(b)
		if err != nil {
			t.Fatalf("srun: %v\n%s", err, out)
		}
		for _, want := range []string{"rank 0 of 2 (local 0 of 2) from MPI_Comm_rank/size", "rank 1 of 2 (local 1 of 2) from MPI_Comm_rank/size",
			"2 ranks x 1 thread (", "final: test accuracy"} {
			if !strings.Contains(out, want) {
				t.Errorf("srun output lacks %q:\n%s", want, out)
			}
		}
	})

	// SIGUSR1 is SLURM's warning before the time limit (--signal=B:USR1);
	// SIGTERM is what scancel and pre-emption send. Both must end in the
	// agreed checkpoint, exit 85 through mpirun and a requeue.
	for _, sig := range []string{"USR1", "TERM"} {
		t.Run("SIG"+sig+": preempted, requeued, resumed", func(t *testing.T) {
			// Four epochs (300 steps, 10-20 s here), stopped from the first
			// progress line on: a signal slowed by a busy machine still
			// arrives well before the end.
			config := `model = "cnn"
epochs = 4
limit = 9600
test_limit = 500
threads = 1
progress = "500ms"
checkpoint_every = "40"
`
			// The uninterrupted reference, same configuration, same world size.
			ref := jobDir(t, "reference-"+sig, config)
			refCk := filepath.Join(ref, "checkpoints")
			mpitest.Run(t, 3*time.Minute, 2, bin, "train", "-config", filepath.Join(ref, "scripts/train.toml"), "-checkpoint-dir", refCk)

			d := jobDir(t, "preempted-"+sig, config)
			id, out := sbatch(t, d)
			waitFor(ctx, t, out, "epoch 1 step ")
			run(t, d, "scancel", "--signal="+sig, "--batch", id)
			waitFor(ctx, t, out, "trainer exited with status 85")
			waitFor(ctx, t, out, "requeueing job "+id)
			// SLURM holds a requeued job for a while (BeginTime); an
			// administrator's "start now" keeps the test short. Not at once,
			// though: slurmd revokes the old run's credential, and a new launch
			// within the same second as that revocation is refused ("Job
			// credential revoked") and fails the job; SLURM's own hold exists
			// for this. So the job is started only after it has been seen
			// pending for two seconds. It passes through COMPLETING and REQUEUE
			// first. Each state is logged, and a stuck or failed job is reported
			// with the queue, the node and the daemons' logs.
			var show, seen string
			var pendingSince time.Time
			stuck := func(why string) {
				t.Helper()
				log, _ := os.ReadFile(out)
				t.Fatalf("requeued job %s %s; last seen as\n%s\n--- %s ---\n%s\n%s", id, why, show, out, log, c.diagnose())
			}
			for {
				cmd := exec.CommandContext(ctx, "scontrol", "show", "job", id)
				cmd.Env = env
				b, err := cmd.Output()
				if ctx.Err() != nil {
					stuck("never ran again")
				}
				if err != nil {
					t.Fatalf("scontrol show job %s: %v", id, err)
				}
				show = string(b)
				state := jobField(show, "JobState") + " Reason=" + jobField(show, "Reason") + " Restarts=" + jobField(show, "Restarts")
				if state != seen {
					t.Logf("job %s: %s", id, state)
					seen = state
				}
				if strings.Contains(show, "Restarts=1") && (strings.Contains(show, "JobState=RUNNING") || strings.Contains(show, "JobState=COMPLETED")) {
					break
				}
				switch jobField(show, "JobState") {
				case "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY", "DEADLINE":
					stuck("ended without running again")
				}
				if strings.Contains(show, "Restarts=1") && strings.Contains(show, "JobState=PENDING") && pendingSince.IsZero() {
					pendingSince = time.Now()
				}
				if strings.Contains(show, "Restarts=1") && strings.Contains(show, "JobState=PENDING") && time.Since(pendingSince) > 2*time.Second {
					// It may have started in between: then this fails, harmlessly.
					upd := exec.CommandContext(ctx, "scontrol", "update", "JobId="+id, "StartTime=now")
					upd.Env = env
					upd.Run()
				}
				time.Sleep(300 * time.Millisecond)
			}
			waitFor(ctx, t, out, "resuming from")
			waitFor(ctx, t, out, "trainer exited with status 0")

			a, _, err := checkpoint.Latest(refCk, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _, err := checkpoint.Latest(filepath.Join(d, "checkpoints"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if a.Step != b.Step || len(a.Sections) != len(b.Sections) {
				t.Fatalf("final checkpoints: step %d vs %d, %d vs %d sections", a.Step, b.Step, len(a.Sections), len(b.Sections))
			}
			// Parameters and optimizer state, bit for bit.
			for k, sa := range a.Sections {
				sb := b.Sections[k]
				if sa.Name != sb.Name || len(sa.Data) != len(sb.Data) {
					t.Fatalf("section %d: %s[%d] vs %s[%d]", k, sa.Name, len(sa.Data), sb.Name, len(sb.Data))
				}
				for i := range sa.Data {
					if sa.Data[i] != sb.Data[i] {
						log, _ := os.ReadFile(out)
						t.Fatalf("%s[%d]: uninterrupted %v, preempted and resumed %v\n%s", sa.Name, i, sa.Data[i], sb.Data[i], log)
					}
				}
			}
			if len(a.Lookup("params")) == 0 {
				t.Fatalf("no parameters in the final checkpoint")
			}
		})
	}
}

// jobField returns the value of key in scontrol's "key=value key=value"
// output, or "" when it is absent.
func jobField(show, key string) string {
	for _, f := range strings.Fields(show) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}
