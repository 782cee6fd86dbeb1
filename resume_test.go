package main

import (
	"bytes"
	"errors"
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

	"hpctrain/checkpoint"
)

// resumeArgs is a short 2-rank run: 20 steps per epoch, 40 in all.
var resumeArgs = []string{"train", "-model", "mlp", "-limit", "1280", "-test-limit", "200", "-batch", "32", "-epochs", "2", "-threads", "1", "-progress", "0"}

func with(extra ...string) []string {
	return append(append([]string(nil), resumeArgs...), extra...)
}

// dirFiles reads every file of dir.
func dirFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	m := map[string][]byte{}
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = b
	}
	return m
}

// TestFreshRunIntoUsedDir: a run without -resume into a directory holding
// another run's checkpoints stops at start-up with exit 2 and a line per
// rank saying what is there, and every file keeps its bytes (before, the
// run replaced the files of its steps and -keep pruned the rest, its own
// new files first). A directory of the same settings is refused too.
func TestFreshRunIntoUsedDir(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	if r := hpctrain(t, 2, 2*time.Minute, with("-steps", "6", "-checkpoint-dir", ck, "-checkpoint-every", "2")...); r.code != 0 {
		t.Fatalf("first run: %d\n%s", r.code, r.out)
	}
	before := dirFiles(t, ck)
	if len(before) != 3 {
		t.Fatalf("first run left %d files, want 3", len(before))
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-lr", "0.02"}, "it holds 3 checkpoints of another configuration (run "},
		{[]string{"-lr", "0.02"}, "model mlp, steps 2-6; differs in lr); a run without -resume needs a directory without checkpoints: continue with -resume auto (same settings), or use another -checkpoint-dir"},
		{nil, "it holds 3 checkpoints of this configuration (run "},
	} {
		r := hpctrain(t, 2, 2*time.Minute, with(append(c.args, "-steps", "4", "-checkpoint-dir", ck, "-checkpoint-every", "1", "-keep", "1")...)...)
		if r.code != 2 {
			t.Errorf("fresh run %v into a used dir: exit %d, want 2\n%s", c.args, r.code, r.out)
		}
		lines := errorLines(t, r)
		if len(lines) != 2 || !strings.Contains(lines[0]+lines[1], "checkpoint dir "+ck+" in use: it holds ") || !strings.Contains(lines[0]+lines[1], c.want) {
			t.Errorf("fresh run %v: want one line per rank, one saying %q:\n%s", c.args, c.want, r.out)
		}
		after := dirFiles(t, ck)
		if len(after) != len(before) {
			t.Errorf("fresh run %v: %d files, before %d", c.args, len(after), len(before))
		}
		for name, b := range before {
			if !bytes.Equal(after[name], b) {
				t.Errorf("fresh run %v: %s changed or removed", c.args, name)
			}
		}
	}
}

// TestResumeOtherThreads: a run resumed with another -threads (and
// -bind) is accepted and ends bit for bit where the uninterrupted run
// ends (before, "config hash differs" refused it); a resume with another
// -lr is refused with exit 2, naming lr and both values.
func TestResumeOtherThreads(t *testing.T) {
	dir := t.TempDir()
	ref, ck := filepath.Join(dir, "ref"), filepath.Join(dir, "ck")
	if r := hpctrain(t, 2, 2*time.Minute, with("-checkpoint-dir", ref)...); r.code != 0 {
		t.Fatalf("reference run: %d\n%s", r.code, r.out)
	}
	if r := hpctrain(t, 2, 2*time.Minute, with("-steps", "13", "-checkpoint-dir", ck)...); r.code != 0 {
		t.Fatalf("first part: %d\n%s", r.code, r.out)
	}
	r := hpctrain(t, 2, 2*time.Minute, with("-lr", "0.02", "-checkpoint-dir", ck, "-resume", "auto")...)
	lines := errorLines(t, r)
	want := "its configuration differs: it was written with lr = 0.01; this run has lr = 0.02 (resume with the same settings, or start a fresh run in another -checkpoint-dir)"
	if r.code != 2 || len(lines) != 2 || !strings.Contains(lines[0]+lines[1], want) {
		t.Errorf("resume with another lr: exit %d, want 2 and a line per rank, one saying %q:\n%s", r.code, want, r.out)
	}
	r = hpctrain(t, 2, 2*time.Minute, with("-threads", "2", "-bind", "none", "-checkpoint-dir", ck, "-resume", "auto")...)
	if r.code != 0 || !strings.Contains(r.out, "resuming from") || !strings.Contains(r.out, "2 ranks x 2 threads") {
		t.Fatalf("resume with -threads 2: %d\n%s", r.code, r.out)
	}
	a, _, err := checkpoint.Latest(ref, nil)
	if err != nil || a == nil {
		t.Fatalf("reference checkpoint: %v", err)
	}
	b, _, err := checkpoint.Latest(ck, nil)
	if err != nil || b == nil {
		t.Fatalf("resumed checkpoint: %v", err)
	}
	if a.Step != 40 || b.Step != 40 || len(a.Sections) != len(b.Sections) || len(a.Sections) < 2 {
		t.Fatalf("final checkpoints: step %d vs %d, %d vs %d sections", a.Step, b.Step, len(a.Sections), len(b.Sections))
	}
	for i, sa := range a.Sections {
		sb := b.Sections[i]
		if sa.Name != sb.Name || len(sa.Data) != len(sb.Data) {
			t.Fatalf("section %d: %s[%d] vs %s[%d]", i, sa.Name, len(sa.Data), sb.Name, len(sb.Data))
		}
		for j := range sa.Data {
			if math.Float32bits(sa.Data[j]) != math.Float32bits(sb.Data[j]) {
				t.Fatalf("%s[%d]: uninterrupted with 1 thread %v, resumed with 2 %v", sa.Name, j, sa.Data[j], sb.Data[j])
			}
		}
	}
}

// TestResumeCompletedRun: resuming a run that finished says it is complete,
// with the accuracy it recorded, exits 0 and writes no metrics line (before,
// it printed "final: test accuracy 0.00% after 0 epochs (0 steps, 0 ranks)"
// and appended an all-zero final record). Raising -epochs continues it.
func TestResumeCompletedRun(t *testing.T) {
	dir := t.TempDir()
	ck, m := filepath.Join(dir, "ck"), filepath.Join(dir, "m.jsonl")
	r := hpctrain(t, 2, 2*time.Minute, with("-checkpoint-dir", ck, "-metrics", m)...)
	if r.code != 0 {
		t.Fatalf("first run: %d\n%s", r.code, r.out)
	}
	acc := regexp.MustCompile(`final: test accuracy ([0-9.]+)%`).FindStringSubmatch(r.out)
	if acc == nil {
		t.Fatalf("no final line:\n%s", r.out)
	}
	metrics, err := os.ReadFile(m)
	if err != nil || len(metrics) == 0 {
		t.Fatalf("first run's metrics: %q, %v; want its epochs' records", metrics, err)
	}
	ckBefore := dirFiles(t, ck)

	r = hpctrain(t, 2, 2*time.Minute, with("-checkpoint-dir", ck, "-metrics", m, "-resume", "auto")...)
	want := "hpctrain: run already complete at step 40 (epoch 2, 2 ranks): test accuracy " + acc[1] + "%"
	if r.code != 0 || !strings.Contains(r.out, want) {
		t.Errorf("resuming the completed run: exit %d, want 0 and %q:\n%s", r.code, want, r.out)
	}
	if strings.Contains(r.out, "final: test accuracy 0.00%") || strings.Contains(r.out, "after 0 epochs") {
		t.Errorf("resuming the completed run printed an empty result:\n%s", r.out)
	}
	if after, err := os.ReadFile(m); err != nil || !bytes.Equal(after, metrics) {
		t.Errorf("metrics changed (%v):\nbefore %s\nafter  %s", err, metrics, after)
	}
	after := dirFiles(t, ck)
	for name, b := range ckBefore {
		if !bytes.Equal(after[name], b) {
			t.Errorf("%s changed", name)
		}
	}

	// More epochs: a legitimate extension, trained from step 40.
	r = hpctrain(t, 2, 2*time.Minute, append(with("-checkpoint-dir", ck, "-metrics", m, "-resume", "auto"), "-epochs", "3")...)
	if r.code != 0 || !strings.Contains(r.out, "epoch 3/3") || !strings.Contains(r.out, "(60 steps, 2 ranks)") {
		t.Errorf("extending the completed run to 3 epochs: exit %d\n%s", r.code, r.out)
	}
}

// TestInitFromCheckpoint: -init starts a run, under mpirun, from another
// run's checkpoint (parameters and batch-norm statistics) with its own
// settings at step 0: one step at a vanishing learning rate keeps the
// first run's accuracy (a fresh resnet8 scores about 10% here; without
// the running statistics, the first step's would be 90% the defaults'),
// and it counts its own steps. A checkpoint of another network, or a path
// that is not there, is one line and exit 2.
func TestInitFromCheckpoint(t *testing.T) {
	dir := t.TempDir()
	a, mb := filepath.Join(dir, "a"), filepath.Join(dir, "b.jsonl")
	common := []string{"train", "-model", "resnet8", "-limit", "3200", "-test-limit", "1000", "-threads", "1", "-progress", "0"}
	r := hpctrain(t, 2, 3*time.Minute, append(common, "-lr", "0.05", "-checkpoint-dir", a, "-metrics", filepath.Join(dir, "a.jsonl"))...)
	if r.code != 0 {
		t.Fatalf("first run: exit %d\n%s", r.code, r.out)
	}
	first := readMetrics(t, filepath.Join(dir, "a.jsonl"))
	accA := first[len(first)-1]["test_accuracy"].(float64)
	r = hpctrain(t, 2, 3*time.Minute, append(common, "-init", a, "-steps", "1", "-lr", "1e-9", "-momentum", "0", "-metrics", mb)...)
	if r.code != 0 || !strings.Contains(r.out, "hpctrain: starting from "+a+"/ckpt-") || !strings.Contains(r.out, "its parameters and batch-norm statistics, at step 0 with this run's settings") {
		t.Fatalf("-init: exit %d\n%s", r.code, r.out)
	}
	second := readMetrics(t, mb)
	fin := second[len(second)-1]
	if accB := fin["test_accuracy"].(float64); accA < 0.5 || math.Abs(accB-accA) > 0.02 || fin["step"].(float64) != 1 {
		t.Errorf("first run %.4f, one step from its checkpoint %.4f at step %v: want within 2 points, at step 1", accA, accB, fin["step"])
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-model", "cnn", "-init", a}, "is of another network than this run's -model cnn (checkpoint vs this run): layer 1 (conv): out 16 vs 32"},
		{[]string{"-model", "resnet8", "-init", filepath.Join(dir, "none")}, "-init " + filepath.Join(dir, "none") + ": no such file or directory"},
	} {
		r := hpctrain(t, 0, time.Minute, append([]string{"train", "-limit", "640", "-progress", "0"}, c.args...)...)
		if lines := errorLines(t, r); r.code != 2 || len(lines) != 1 || !strings.Contains(lines[0], c.want) {
			t.Errorf("%v: exit %d, want 2 and one line with %q:\n%s", c.args, r.code, c.want, r.out)
		}
	}
	// A requeued fine-tuning job goes on from its own checkpoint, even
	// where -init's has gone since.
	b := filepath.Join(dir, "b")
	ft := append(common, "-init", a, "-checkpoint-dir", b, "-resume", "auto")
	if r := hpctrain(t, 2, 3*time.Minute, append(ft, "-steps", "2")...); r.code != 0 || !strings.Contains(r.out, "hpctrain: starting from "+a) {
		t.Fatalf("-init with -resume auto: exit %d\n%s", r.code, r.out)
	}
	if err := os.Rename(a, a+".gone"); err != nil {
		t.Fatal(err)
	}
	r = hpctrain(t, 2, 3*time.Minute, append(ft, "-steps", "3")...)
	if r.code != 0 || !strings.Contains(r.out, "hpctrain: -init "+a+" not read: the run goes on from its own checkpoint") || strings.Contains(r.out, "starting from") {
		t.Errorf("requeued -init run: exit %d, want 0, resuming without reading -init\n%s", r.code, r.out)
	}
}

// immutable makes dir unwritable even for root (chattr +i), or skips t
// where the file system or the tools cannot; the test's cleanup undoes it.
func immutable(t *testing.T, dir string) {
	t.Helper()
	if out, err := exec.Command("chattr", "+i", dir).CombinedOutput(); err != nil {
		t.Skipf("chattr +i %s: %v %s", dir, err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", dir).Run() })
}

// TestCheckpointDirNotWritable: a -checkpoint-dir the run cannot write
// in stops it at start-up, exit 2, one line naming the directory, before
// any training. Before, it trained to the first checkpoint (here the end
// of the run) and failed there, exit 1, the training lost.
func TestCheckpointDirNotWritable(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	if err := os.Mkdir(ck, 0o755); err != nil {
		t.Fatal(err)
	}
	immutable(t, ck)
	refusedAtStart(t, ck, "checkpoint dir "+ck+": not writable: operation not permitted")
}

// refusedAtStart runs 6 steps into checkpoint dir ck and asks that every
// rank stop at start-up, exit 2, one of them saying want.
func refusedAtStart(t *testing.T, ck, want string) {
	t.Helper()
	r := hpctrain(t, 2, 2*time.Minute, with("-steps", "6", "-checkpoint-dir", ck, "-resume", "auto")...)
	lines := errorLines(t, r)
	if r.code != 2 || len(lines) != 2 || !strings.Contains(lines[0]+lines[1], want) {
		t.Errorf("exit %d, want 2 and a line per rank, one saying %q:\n%s", r.code, want, r.out)
	}
	if strings.Contains(r.out, "epoch 1") {
		t.Errorf("the run trained before it stopped:\n%s", r.out)
	}
}

// TestCheckpointDirFull: a -checkpoint-dir on a full disk stops the run
// at start-up, exit 2, one line naming the directory and the disk's
// error, as a read-only one does. Before, the start-up probe (an empty
// file, which a full disk still takes) passed, and the run trained to its
// first checkpoint (here the end of the run) and failed there, exit 1.
func TestCheckpointDirFull(t *testing.T) {
	disk := smallDisk(t, 1<<20)
	fill, err := os.Create(filepath.Join(disk, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = fill.Write(make([]byte, 1<<16))
	}
	fill.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling %s: %v", disk, err)
	}
	ck := filepath.Join(disk, "ck")
	refusedAtStart(t, ck, "checkpoint dir "+ck+": not writable: no space left on device")
}

// TestCheckpointDirNoRoom: a -checkpoint-dir whose disk has room for the
// start-up probe but not for one checkpoint (2 MB; an mlp checkpoint with
// SGD's momentum is 3.3 MB, its parameters alone 1.6 MB) stops the run at
// start-up, exit 2, one line giving both sizes. Before, it trained to its
// first checkpoint and failed there.
func TestCheckpointDirNoRoom(t *testing.T) {
	ck := filepath.Join(smallDisk(t, 2<<20), "ck")
	refusedAtStart(t, ck, "MB free, and a checkpoint of this run takes 3.3 MB: make room, or use another -checkpoint-dir")
	if files := dirFiles(t, ck); len(files) != 0 {
		t.Errorf("files left in the checkpoint dir: %v", files)
	}
}

// TestCheckpointRoomAhead: a checkpoint dir with room for two mlp
// checkpoints (3.3 MB each) and not three. A run that will hold three at
// once (-keep 0 and three saves; -keep 2, the two kept and the one being
// written) is warned at its start, naming the count; one that holds two
// (-keep 1), or a resumed run whose kept checkpoint is already there and
// is pruned by its next save, is not. Before, nothing was said until the
// save that filled the disk failed.
func TestCheckpointRoomAhead(t *testing.T) {
	ck := filepath.Join(smallDisk(t, 8<<20), "ck")
	const warning = "free, and this run will hold "
	for _, tc := range []struct {
		args []string
		want string // "": no warning
	}{
		{[]string{"-steps", "6", "-keep", "1"}, ""},
		{[]string{"-steps", "10", "-keep", "1", "-resume", "auto"}, ""}, // one held: each save replaces it
		{[]string{"-steps", "14", "-keep", "2", "-resume", "auto"}, warning + "2 more checkpoints of 3.3 MB there at once (-keep 2, and one more while it is written)"},
		{[]string{"-steps", "6"}, warning + "3 more checkpoints of 3.3 MB there at once (-keep 0 keeps all 3 that it writes)"},
	} {
		args := with(append([]string{"-checkpoint-dir", ck, "-checkpoint-every", "2"}, tc.args...)...)
		if tc.want == "" {
			r := hpctrain(t, 2, 2*time.Minute, args...)
			if r.code != 0 || strings.Contains(r.out, warning) {
				t.Errorf("%v: exit %d, want 0 and no warning:\n%s", tc.args, r.code, r.out)
			}
			continue
		}
		r := hpctrain(t, 2, 2*time.Minute, args...)
		at := strings.Index(r.out, tc.want)
		if at < 0 || strings.Count(r.out, warning) != 1 || strings.Contains(r.out[:max(at, 0)], "epoch 1/") {
			t.Errorf("%v: want one warning %q before the first epoch's line:\n%s", tc.args, tc.want, r.out)
		}
		if tc.args[len(tc.args)-1] == "auto" {
			os.RemoveAll(ck) // the -keep 0 case starts afresh
		}
	}
}

// TestCheckpointDirLocked: a run whose -checkpoint-dir another job holds
// (here this test, by checkpoint.Lock) is refused at start-up with exit 2,
// as a directory of another run's checkpoints is, in one line naming the
// directory, and writes nothing there. Before, the exit was 1.
func TestCheckpointDirLocked(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	release, err := checkpoint.Lock(ck)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	r := hpctrain(t, 2, 2*time.Minute, with("-steps", "2", "-checkpoint-dir", ck, "-resume", "auto")...)
	lines := errorLines(t, r)
	want := "checkpoint dir " + ck + " in use: another job is writing checkpoints there now"
	if r.code != 2 || len(lines) != 2 || !strings.Contains(lines[0]+lines[1], want) {
		t.Errorf("exit %d, want 2 and a line per rank, one saying %q:\n%s", r.code, want, r.out)
	}
	if files := dirFiles(t, ck); len(files) != 0 {
		t.Errorf("files written in a directory another job holds: %v", files)
	}
}

// TestResumeFromDirectory: -resume naming a directory (the checkpoint
// directory instead of a file in it) is one line per rank saying so and
// what to write instead, exit 2, before any training. Before, it was
// "load checkpoint: read ck: is a directory", exit 1. A file that is not
// a checkpoint is exit 2 as well.
func TestResumeFromDirectory(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	if r := hpctrain(t, 2, 2*time.Minute, with("-steps", "2", "-checkpoint-dir", ck)...); r.code != 0 {
		t.Fatalf("first run: %d\n%s", r.code, r.out)
	}
	r := hpctrain(t, 2, 2*time.Minute, with("-checkpoint-dir", ck, "-resume", ck)...)
	lines := errorLines(t, r)
	want := `resume = "` + ck + `": a directory (name a checkpoint file, or use -checkpoint-dir ` + ck + ` -resume auto for its newest)`
	if r.code != 2 || len(lines) != 2 || !strings.Contains(lines[0]+lines[1], want) {
		t.Errorf("exit %d, want 2 and a line per rank, one saying %q:\n%s", r.code, want, r.out)
	}

	// A file that is no checkpoint (the job's TOML named by mistake) is
	// the wrong input, exit 2 as a missing file is; it was exit 1.
	job := filepath.Join(t.TempDir(), "job.toml")
	os.WriteFile(job, []byte("model = \"mlp\"\n"), 0o644)
	r = hpctrain(t, 2, 2*time.Minute, with("-checkpoint-dir", ck, "-resume", job)...)
	lines = errorLines(t, r)
	if want := "not a checkpoint: bad magic"; r.code != 2 || len(lines) != 2 || !strings.Contains(lines[0]+lines[1], want) {
		t.Errorf("-resume %s: exit %d, want 2 and a line per rank, one saying %q:\n%s", job, r.code, want, r.out)
	}
}

// TestResumeOptimizerDefaults: a setting left to the optimizer's default
// and the same value given (-lr 0.001 -weight-decay 0.01 -beta1 0.9 for
// adamw) are the same run: the resumption is accepted. Another value is
// refused naming the values the runs had, not 0 for "default". Before,
// "it was written with lr = 0; this run has lr = 0.001" refused it.
func TestResumeOptimizerDefaults(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	if r := hpctrain(t, 2, 2*time.Minute, with("-optimizer", "adamw", "-steps", "2", "-checkpoint-dir", ck)...); r.code != 0 {
		t.Fatalf("first run: %d\n%s", r.code, r.out)
	}
	r := hpctrain(t, 2, 2*time.Minute, with("-optimizer", "adamw", "-lr", "0.001", "-weight-decay", "0.01", "-beta1", "0.9", "-steps", "4", "-checkpoint-dir", ck, "-resume", "auto")...)
	if r.code != 0 || !strings.Contains(r.out, "resuming from "+filepath.Join(ck, checkpoint.FileName(2))) {
		t.Fatalf("resume with adamw's defaults given: exit %d\n%s", r.code, r.out)
	}
	r = hpctrain(t, 2, 2*time.Minute, with("-optimizer", "adamw", "-lr", "0.002", "-steps", "6", "-checkpoint-dir", ck, "-resume", "auto")...)
	lines := errorLines(t, r)
	want := "it was written with lr = 0.001; this run has lr = 0.002"
	if r.code != 2 || len(lines) != 2 || !strings.Contains(lines[0]+lines[1], want) {
		t.Errorf("resume with another lr: exit %d, want 2 and a line per rank, one saying %q:\n%s", r.code, want, r.out)
	}
}

// TestResumeScheduleLength: a cosine run resumed with the length it was
// started with goes on without a word; one resumed with -epochs or -steps
// changed (here a 10-step run extended to 40) is warned, on rank 0, that
// its schedule spans other steps and at which rate the next step trains,
// both rates named. Before, the learning rate jumped (0 to 0.0854) in
// silence.
func TestResumeScheduleLength(t *testing.T) {
	dir := t.TempDir()
	same, longer := filepath.Join(dir, "same"), filepath.Join(dir, "longer")
	cosine := with("-schedule", "cosine", "-lr", "0.1")
	if r := hpctrainEnv(t, 2, 2*time.Minute, []string{"HPCTRAIN_FAULT=usr1@0:10"}, append(cosine, "-checkpoint-dir", same)...); r.code != 85 {
		t.Fatalf("run stopped at step 10: exit %d, want 85\n%s", r.code, r.out)
	}
	r := hpctrain(t, 2, 2*time.Minute, append(cosine, "-checkpoint-dir", same, "-resume", "auto")...)
	if r.code != 0 || !strings.Contains(r.out, "resuming from") || strings.Contains(r.out, "schedule spans") {
		t.Errorf("resumed with its own length: exit %d, want 0 and no warning\n%s", r.code, r.out)
	}
	if r := hpctrain(t, 2, 2*time.Minute, append(cosine, "-steps", "10", "-checkpoint-dir", longer)...); r.code != 0 {
		t.Fatalf("10-step run: exit %d\n%s", r.code, r.out)
	}
	r = hpctrain(t, 2, 2*time.Minute, append(cosine, "-checkpoint-dir", longer, "-resume", "auto")...)
	want := "hpctrain: warning: the cosine schedule spans 40 steps in this run, 10 in the run that wrote the checkpoint (-epochs or -steps changed): step 11 trains at lr 0.0853553 where that run's schedule gives 0; resume with its -epochs and -steps to continue it as it was"
	if r.code != 0 || strings.Count(r.out, want) != 1 {
		t.Errorf("resumed with -steps raised: exit %d, want 0 and once %q\n%s", r.code, want, r.out)
	}
}

// TestCheckpointDirDanglingLink: a -checkpoint-dir that is a symbolic
// link to a directory not there (a scratch file system not mounted, a
// directory removed) is one line naming the link and its target, exit 2.
// Before: "checkpoint dir ck: mkdir ck: file exists", exit 1.
func TestCheckpointDirDanglingLink(t *testing.T) {
	dir := t.TempDir()
	ck, to := filepath.Join(dir, "ck"), filepath.Join(dir, "gone")
	if err := os.Symlink(to, ck); err != nil {
		t.Fatal(err)
	}
	r := hpctrain(t, 2, 2*time.Minute, with("-steps", "2", "-checkpoint-dir", ck, "-resume", "auto")...)
	lines := errorLines(t, r)
	want := "checkpoint dir " + ck + ": a symbolic link to " + to + ", which does not exist: make that directory, or mend the link"
	if r.code != 2 || len(lines) != 2 || !strings.Contains(lines[0]+lines[1], want) {
		t.Errorf("exit %d, want 2 and a line per rank, one saying %q:\n%s", r.code, want, r.out)
	}
}

// TestResumePastNewerVersion: -resume auto in a directory whose newest
// file is of a newer format version (a newer build went on; the job was
// requeued under an older one) is refused, exit 2, a line naming the file
// and its version, nothing moved, and no "resuming from" said before it.
// Before, the older build resumed the step before, set the newer file
// aside and trained on, its progress thrown away.
func TestResumePastNewerVersion(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	if r := hpctrain(t, 2, 2*time.Minute, with("-steps", "4", "-checkpoint-dir", ck, "-checkpoint-every", "2")...); r.code != 0 {
		t.Fatalf("first run: %d\n%s", r.code, r.out)
	}
	newest := filepath.Join(ck, checkpoint.FileName(4))
	b, err := os.ReadFile(newest)
	if err != nil {
		t.Fatal(err)
	}
	b[8] = checkpoint.Version + 1
	if err := os.WriteFile(newest, b, 0o644); err != nil {
		t.Fatal(err)
	}
	before := dirFiles(t, ck)
	r := hpctrain(t, 2, 2*time.Minute, with("-checkpoint-dir", ck, "-resume", "auto")...)
	lines := errorLines(t, r)
	want := fmt.Sprintf("ckpt-000000000004.hpck is of format version %d, written by a newer hpctrain", checkpoint.Version+1)
	if r.code != 2 || len(lines) != 2 || !strings.Contains(lines[0]+lines[1], want) {
		t.Errorf("exit %d, want 2 and a line per rank, one saying %q:\n%s", r.code, want, r.out)
	}
	if strings.Contains(r.out, "resuming from") {
		t.Errorf("a refused resumption said it was resuming:\n%s", r.out)
	}
	if after := dirFiles(t, ck); len(after) != len(before) || !bytes.Equal(after[checkpoint.FileName(4)], b) {
		t.Errorf("the directory changed: %d files, before %d", len(after), len(before))
	}
}
