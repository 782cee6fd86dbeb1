package train

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"hpctrain/checkpoint"
	"hpctrain/internal/cli"
	"hpctrain/model"
	"hpctrain/mpi"
	"hpctrain/optim"
)

// smallRun is the configuration of the resume tests: 20 steps per epoch.
func smallRun() Config {
	cfg := Defaults()
	cfg.Model, cfg.Limit, cfg.TestLimit, cfg.Progress, cfg.DataDir, cfg.Batch = "mlp", 640, 64, 0, dataDir, 32
	cfg.Epochs, cfg.Steps = 2, 30
	return cfg
}

// files reads every file of dir.
func files(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	m := map[string][]byte{}
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = b
	}
	return m
}

func sameFiles(t *testing.T, what string, got, want map[string][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d files, want %d", what, len(got), len(want))
	}
	for name, b := range want {
		if !bytes.Equal(got[name], b) {
			t.Errorf("%s: %s changed or removed", what, name)
		}
	}
}

// TestResumeConfig: the settings record has the keys a user writes (the
// optimizer's from its TOML form), leaves out what a resumption may change
// (threads and placement, epochs, steps, checkpoint and output settings),
// and changes with anything else.
func TestResumeConfig(t *testing.T) {
	cfg := smallRun()
	rec, err := resumeConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(rec, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"lr", "momentum", "optimizer", "schedule", "warmup_steps", "batch", "seed", "model", "augment", "limit", "bucket_mb"} {
		if _, ok := m[k]; !ok {
			t.Errorf("record lacks %s: %s", k, rec)
		}
	}
	for _, k := range []string{"threads", "bind", "cpu_list", "use_smt", "epochs", "steps", "checkpoint_dir", "resume", "keep", "data_workers", "metrics", "progress"} {
		if _, ok := m[k]; ok {
			t.Errorf("record holds %s: %s", k, rec)
		}
	}
	free := cfg
	free.Threads, free.Bind, free.CPUList, free.UseSMT, free.Epochs, free.Steps = 2, "none", "0-1", true, 7, 0
	free.CheckpointDir, free.Resume, free.Keep, free.DataWorkers, free.Metrics = "x", "auto", 3, 2, "m.jsonl"
	if r2, _ := resumeConfig(free); !bytes.Equal(r2, rec) || resumeHash(free) != resumeHash(cfg) {
		t.Errorf("a resumable change changed the record:\n%s\n%s", rec, r2)
	}
	for name, change := range map[string]func(*Config){
		"lr":      func(c *Config) { c.LR = 0.02 },
		"batch":   func(c *Config) { c.Batch = 64 },
		"beta1":   func(c *Config) { b := 0.8; c.Beta1 = &b },
		"augment": func(c *Config) { c.Augment = "flip" },
		"seed":    func(c *Config) { c.Seed = math.MaxUint64 },
	} {
		o := cfg
		change(&o)
		r2, _ := resumeConfig(o)
		if bytes.Equal(r2, rec) || resumeHash(o) == resumeHash(cfg) {
			t.Errorf("changing %s changed neither record nor hash", name)
		}
	}
}

// TestResumeOtherThreads: -threads does not change results, so a run
// resumed with another thread count is accepted and continues exactly.
func TestResumeOtherThreads(t *testing.T) {
	cfg := smallRun()
	cfg.Threads = 1
	full, err := Run(cfg, mpi.NewSingle(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	first := cfg
	first.Steps, first.CheckpointDir = 13, dir
	if _, err := Run(first, mpi.NewSingle(), io.Discard); err != nil {
		t.Fatal(err)
	}
	second := cfg
	second.CheckpointDir, second.Resume, second.Threads = dir, "auto", 2
	res, err := Run(second, mpi.NewSingle(), io.Discard)
	if err != nil {
		t.Fatalf("resuming with -threads 2: %v", err)
	}
	if len(res.StepLosses) != 17 {
		t.Fatalf("resumed run took %d steps, want 17", len(res.StepLosses))
	}
	for i := range res.Params {
		if math.Float32bits(res.Params[i]) != math.Float32bits(full.Params[i]) {
			t.Fatalf("parameter %d: resumed with 2 threads %v, uninterrupted with 1 %v", i, res.Params[i], full.Params[i])
		}
	}
}

// TestResumeRefusalNamesKeys: a resume with other settings is refused with
// one line naming each key that differs and both values, as a usage error.
func TestResumeRefusalNamesKeys(t *testing.T) {
	cfg := smallRun()
	dir := t.TempDir()
	first := cfg
	first.Steps, first.CheckpointDir = 4, dir
	if _, err := Run(first, mpi.NewSingle(), io.Discard); err != nil {
		t.Fatal(err)
	}
	other := cfg
	other.CheckpointDir, other.Resume, other.LR, other.Batch = dir, "auto", 0.02, 16
	_, err := Run(other, mpi.NewSingle(), io.Discard)
	if !errors.Is(err, checkpoint.ErrIncompatible) || !errors.As(err, new(cli.UsageError)) {
		t.Fatalf("%v: want a usage error wrapping ErrIncompatible", err)
	}
	want := "its configuration differs: it was written with batch = 32, lr = 0.01; this run has batch = 16, lr = 0.02 (resume with the same settings, or start a fresh run in another -checkpoint-dir)"
	if msg := err.Error(); !strings.Contains(msg, want) || !strings.Contains(msg, filepath.Join(dir, checkpoint.FileName(4))) || strings.Contains(msg, "\n") {
		t.Errorf("refusal %q\nwant it to contain %q and the file", msg, want)
	}
}

// TestFreshRunRefusesUsedDir: a run without -resume into a directory of
// checkpoints is refused, saying what is there, and leaves every file as
// it was, whether the files are of other settings or of the same; -resume
// auto continues the run of the same settings.
func TestFreshRunRefusesUsedDir(t *testing.T) {
	cfg := smallRun()
	dir := t.TempDir()
	first := cfg
	first.Steps, first.CheckpointDir, first.CheckpointEvery = 6, dir, "2"
	if _, err := Run(first, mpi.NewSingle(), io.Discard); err != nil {
		t.Fatal(err)
	}
	before := files(t, dir)
	if len(before) != 3 {
		t.Fatalf("%d checkpoints, want 3 (steps 2, 4, 6)", len(before))
	}
	for _, c := range []struct {
		lr   float64
		want string
	}{
		{0.05, "in use: it holds 3 checkpoints of another configuration (run "},
		{0.05, "model mlp, steps 2-6; differs in lr); a run without -resume needs a directory without checkpoints: continue with -resume auto (same settings), or use another -checkpoint-dir"},
		{cfg.LR, "in use: it holds 3 checkpoints of this configuration (run "},
	} {
		fresh := cfg
		fresh.CheckpointDir, fresh.LR, fresh.Keep, fresh.CheckpointEvery = dir, c.lr, 1, "1"
		_, err := Run(fresh, mpi.NewSingle(), io.Discard)
		if !errors.Is(err, checkpoint.ErrInUse) || !errors.As(err, new(cli.UsageError)) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("fresh run with lr %g: %v\nwant a usage error containing %q", c.lr, err, c.want)
		}
		sameFiles(t, fmt.Sprintf("after the fresh run with lr %g", c.lr), files(t, dir), before)
	}
	cont := cfg
	cont.CheckpointDir, cont.Resume = dir, "auto"
	if _, err := Run(cont, mpi.NewSingle(), io.Discard); err != nil {
		t.Errorf("-resume auto: %v", err)
	}
}

// testCheckpointers makes one checkpointer per rank of an in-process job,
// for a model of n parameters and nbuf buffer values.
func testCheckpointers(t *testing.T, cfg Config, ranks int, n, nbuf int, out io.Writer) []*checkpointer {
	t.Helper()
	cps := make([]*checkpointer, ranks)
	for r, c := range mpi.NewFake(ranks, 0) {
		net := &model.Net{Params: make([]float32, n)}
		opt, err := optim.New(cfg.Config, []optim.Group{{Name: "w", Off: 0, Len: n}}, n)
		if err != nil {
			t.Fatal(err)
		}
		opt.Step(net.Params, make([]float32, n), 0) // a state to save, as a run's after its first step
		log := func(string, ...any) {}
		if r == 0 {
			log = func(f string, a ...any) { fmt.Fprintf(out, f+"\n", a...) }
		}
		cp, err := newCheckpointer(cfg, c, net, opt, log)
		if err != nil {
			t.Fatal(err)
		}
		cp.buffers = make([]float32, nbuf)
		t.Cleanup(cp.close)
		cps[r] = cp
	}
	return cps
}

// onRanks runs f on every rank at once.
func onRanks(cps []*checkpointer, f func(cp *checkpointer) error) []error {
	errs := make([]error, len(cps))
	var wg sync.WaitGroup
	for r, cp := range cps {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = f(cp) }()
	}
	wg.Wait()
	return errs
}

// TestCheckpointerBuffers: the buffers (running statistics) and the model
// description are saved and restored on every rank bit for bit; a
// checkpoint without buffers, with other buffers, or with another
// description is refused on every rank as a usage error.
func TestCheckpointerBuffers(t *testing.T) {
	cfg := smallRun()
	cfg.CheckpointDir = t.TempDir()
	desc := "[[layer]]\nkind = \"batchnorm\"\nchannels = 3\n"
	cps := testCheckpointers(t, cfg, 2, 5, 6, io.Discard)
	want := []float32{1, math.SmallestNonzeroFloat32, -math.MaxFloat32, float32(math.Copysign(0, -1)), 1e-38, 3}
	for _, err := range onRanks(cps, func(cp *checkpointer) error {
		cp.desc = desc
		if _, err := cp.resume(); err != nil {
			return err
		}
		copy(cp.buffers, want)
		cp.net.Params[2] = 7
		return cp.save(3, 1)
	}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	st, _, err := checkpoint.Latest(cfg.CheckpointDir, nil)
	if err != nil || st == nil || st.Desc != desc || len(st.Lookup("buffers")) != 6 {
		t.Fatalf("saved state %+v, %v", st, err)
	}

	cfg.Resume = "auto"
	cps = testCheckpointers(t, cfg, 2, 5, 6, io.Discard)
	for r, err := range onRanks(cps, func(cp *checkpointer) error {
		cp.desc = desc
		step, err := cp.resume()
		if err == nil && step != 3 {
			err = fmt.Errorf("resumed at step %d, want 3", step)
		}
		return err
	}) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		for i, v := range cps[r].buffers {
			if math.Float32bits(v) != math.Float32bits(want[i]) {
				t.Errorf("rank %d: buffer %d = %v, want %v", r, i, v, want[i])
			}
		}
		if cps[r].net.Params[2] != 7 {
			t.Errorf("rank %d: parameters not restored", r)
		}
	}

	for _, c := range []struct {
		nbuf int
		desc string
		want string
	}{
		{4, desc, "6 buffer values (running statistics), the model has 4"},
		{0, desc, "6 buffer values (running statistics), the model has 0"},
		{6, strings.Replace(desc, "3", "4", 1), "its model description differs: it was written with layer.0.channels = 3; this run has layer.0.channels = 4"},
	} {
		cps = testCheckpointers(t, cfg, 2, 5, c.nbuf, io.Discard)
		for r, err := range onRanks(cps, func(cp *checkpointer) error {
			cp.desc = c.desc
			_, err := cp.resume()
			return err
		}) {
			if !errors.As(err, new(cli.UsageError)) || r == 0 && !strings.Contains(fmt.Sprint(err), c.want) {
				t.Errorf("rank %d, %d buffers, desc %q: %v, want a usage error saying %q", r, c.nbuf, c.desc, err, c.want)
			}
		}
	}

	// A checkpoint written without buffers (an older build's) cannot give
	// a model with running statistics its state.
	cfg.Resume = ""
	cfg.CheckpointDir = t.TempDir()
	cps = testCheckpointers(t, cfg, 1, 5, 0, io.Discard)
	cps[0].resume()
	if err := cps[0].save(2, 1); err != nil {
		t.Fatal(err)
	}
	cfg.Resume = "auto"
	cps = testCheckpointers(t, cfg, 1, 5, 6, io.Discard)
	if _, err := cps[0].resume(); !errors.As(err, new(cli.UsageError)) || !strings.Contains(err.Error(), "it holds no buffers (running statistics), the model has 6 values") {
		t.Errorf("checkpoint without buffers: %v", err)
	}
}

// TestResumeNonFinite: a checkpoint whose parameters or running statistics
// hold a NaN or an infinity (training never writes one) is refused in one
// line at the start, instead of a NaN loss at the first step blamed on -lr
// (parameters) or a run whose every evaluation is NaN (statistics).
func TestResumeNonFinite(t *testing.T) {
	for _, c := range []struct {
		name string
		bad  func(cp *checkpointer)
		want string
	}{
		{"parameter", func(cp *checkpointer) { cp.net.Params[3] = float32(math.NaN()) }, "step 2: parameter 3 is NaN: the run cannot continue from it"},
		{"buffer", func(cp *checkpointer) { cp.buffers[4] = float32(math.Inf(1)) }, "step 2: buffer value 4 (running statistics) is +Inf: the run cannot continue from it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := smallRun()
			cfg.CheckpointDir = t.TempDir()
			cps := testCheckpointers(t, cfg, 2, 5, 6, io.Discard)
			for _, err := range onRanks(cps, func(cp *checkpointer) error {
				if _, err := cp.resume(); err != nil {
					return err
				}
				c.bad(cp)
				return cp.save(2, 1)
			}) {
				if err != nil {
					t.Fatal(err)
				}
			}
			cfg.Resume = "auto"
			for r, err := range onRanks(testCheckpointers(t, cfg, 2, 5, 6, io.Discard), func(cp *checkpointer) error {
				_, err := cp.resume()
				return err
			}) {
				if !errors.As(err, new(cli.UsageError)) || r == 0 && !strings.Contains(err.Error(), c.want) {
					t.Errorf("rank %d: %v, want a usage error saying %q", r, err, c.want)
				}
			}
		})
	}
}

// TestResumeAutoNothingUsable: -resume auto in a directory whose only
// checkpoint is damaged stops at the start, saying so, on every rank;
// it used to start a fresh run, train, and fail at the first save (the
// damaged file holds the name the save needs). An empty or missing
// directory starts fresh.
func TestResumeAutoNothingUsable(t *testing.T) {
	cfg := smallRun()
	cfg.CheckpointDir = t.TempDir()
	cps := testCheckpointers(t, cfg, 1, 5, 0, io.Discard)
	cps[0].resume()
	if err := cps[0].save(8, 1); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(cfg.CheckpointDir, "ckpt-*.hpck"))
	if len(files) != 1 {
		t.Fatalf("checkpoints %v, want one", files)
	}
	b, _ := os.ReadFile(files[0])
	os.WriteFile(files[0], b[:len(b)/2], 0o644)
	cfg.Resume = "auto"
	for r, err := range onRanks(testCheckpointers(t, cfg, 2, 5, 0, io.Discard), func(cp *checkpointer) error {
		_, err := cp.resume()
		return err
	}) {
		if !errors.As(err, new(cli.UsageError)) || r == 0 && !strings.Contains(err.Error(), "can be resumed (see the warnings above), and a fresh run would have to replace them") {
			t.Errorf("rank %d: %v, want a usage error", r, err)
		}
	}
	cfg.CheckpointDir = filepath.Join(t.TempDir(), "new")
	for r, err := range onRanks(testCheckpointers(t, cfg, 2, 5, 0, io.Discard), func(cp *checkpointer) error {
		step, err := cp.resume()
		if err == nil && step != 0 {
			err = fmt.Errorf("step %d, want a fresh start", step)
		}
		return err
	}) {
		if err != nil {
			t.Errorf("missing directory, rank %d: %v", r, err)
		}
	}
}

// TestCheckpointerComplete: the checkpoint written at the end of a run
// records its result; resuming it with no more steps to take reports the
// run complete with that result on every rank, and a run with more steps
// continues.
func TestCheckpointerComplete(t *testing.T) {
	cfg := smallRun()
	cfg.CheckpointDir = t.TempDir()
	res := Result{Epoch: 2, Step: 40, WorldSize: 2, ThreadsPerRank: 1, TrainLoss: 0.5, TestLoss: 0.625, TestAccuracy: 0.8125, SamplesPerSecond: 1000, Params: []float32{1}, StepLosses: []float64{1, 2}}
	var log bytes.Buffer // rank 0's
	cps := testCheckpointers(t, cfg, 2, 5, 0, &log)
	for _, err := range onRanks(cps, func(cp *checkpointer) error {
		if _, err := cp.resume(); err != nil {
			return err
		}
		return cp.saveFinal(40, res)
	}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	// The line says what the file holds (a periodic checkpoint of the same
	// step said the same words just before it).
	if want := "ckpt-000000000040.hpck (step 40) with the run's final result\n"; !strings.Contains(log.String(), want) {
		t.Errorf("log %q, want %q", log.String(), want)
	}
	cfg.Resume = "auto"
	for _, c := range []struct {
		total int
		done  bool
	}{{40, true}, {30, true}, {60, false}} {
		var out bytes.Buffer
		cps := testCheckpointers(t, cfg, 2, 5, 0, &out)
		got := make([]Result, 2)
		done := make([]bool, 2)
		for r, err := range onRanks(cps, func(cp *checkpointer) error {
			step, err := cp.resume()
			if err == nil && step != 40 {
				err = fmt.Errorf("resumed at step %d, want 40", step)
			}
			got[cp.comm.Rank()], done[cp.comm.Rank()] = cp.complete(c.total)
			return err
		}) {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
			if done[r] != c.done {
				t.Errorf("total %d, rank %d: complete = %v, want %v", c.total, r, done[r], c.done)
			}
			if want := res; c.done {
				want.Final, want.Params, want.StepLosses = true, nil, nil
				if fmt.Sprint(got[r]) != fmt.Sprint(want) {
					t.Errorf("rank %d: recorded result %+v, want %+v", r, got[r], want)
				}
			}
		}
		msg := "hpctrain: run already complete at step 40 (epoch 2, 2 ranks): test accuracy 81.25%, test loss 0.6250; nothing to train (raise -epochs or -steps to continue it)\n"
		if c.done != strings.Contains(out.String(), msg) {
			t.Errorf("total %d: rank 0 printed %q", c.total, out.String())
		}
	}
	// A checkpoint of no evaluated epoch records no result.
	cps = testCheckpointers(t, cfg, 2, 5, 0, io.Discard)
	for _, err := range onRanks(cps, func(cp *checkpointer) error {
		if _, err := cp.resume(); err != nil {
			return err
		}
		return cp.saveFinal(40, Result{})
	}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if st, _, _ := checkpoint.Latest(cfg.CheckpointDir, nil); st == nil || st.Final != nil || st.Epoch != 2 {
		t.Errorf("saveFinal without a result: %+v", st)
	}
}

// TestRefusalOnEveryRank: when rank 0 refuses the directory, every rank
// returns a usage error (all exit 2), and the others say where to look.
func TestRefusalOnEveryRank(t *testing.T) {
	cfg := smallRun()
	cfg.CheckpointDir = t.TempDir()
	cps := testCheckpointers(t, cfg, 1, 5, 0, io.Discard)
	cps[0].resume()
	cps[0].save(1, 1)
	cps = testCheckpointers(t, cfg, 3, 5, 0, io.Discard)
	for r, err := range onRanks(cps, func(cp *checkpointer) error { _, err := cp.resume(); return err }) {
		want := "loading the checkpoint failed on rank 0 (see its message)"
		if r == 0 {
			want = "in use: it holds 1 checkpoint of another configuration (run "
		}
		if !errors.As(err, new(cli.UsageError)) || !strings.Contains(fmt.Sprint(err), want) {
			t.Errorf("rank %d: %v, want a usage error saying %q", r, err, want)
		}
	}
}

// writeV1 rewrites st as a checkpoint of format version 1 at path.
func writeV1(t *testing.T, path string, st *checkpoint.State, hash string) {
	t.Helper()
	type sec struct {
		Name string `json:"name"`
		Len  int    `json:"len"`
	}
	h := map[string]any{"model": st.Model, "config_hash": hash, "optimizer": st.Optimizer, "world_size": st.WorldSize,
		"epoch": st.Epoch, "step": st.Step, "sampler_epoch": st.Epoch, "sampler_index": 0, "rng": []uint64{1}}
	var secs []sec
	for _, s := range st.Sections {
		secs = append(secs, sec{s.Name, len(s.Data)})
	}
	h["sections"] = secs
	js, _ := json.Marshal(h)
	b := []byte(checkpoint.Magic)
	b = binary.LittleEndian.AppendUint32(b, 1)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(js)))
	b = append(b, js...)
	for _, s := range st.Sections {
		for _, v := range s.Data {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
	}
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestResumeVersion1: a checkpoint of format version 1 resumes exactly when
// its configuration hash matches, continues as a new run that never prunes
// it, and is refused with a message saying what version 1 lacks when the
// hash differs.
func TestResumeVersion1(t *testing.T) {
	cfg := smallRun()
	full, err := Run(cfg, mpi.NewSingle(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	first := cfg
	first.Steps, first.CheckpointDir = 13, dir
	if _, err := Run(first, mpi.NewSingle(), io.Discard); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, checkpoint.FileName(13))
	st, err := checkpoint.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	writeV1(t, path, st, hashV1(cfg))
	v1, _ := os.ReadFile(path)

	other := cfg
	other.CheckpointDir, other.Resume, other.LR = dir, "auto", 0.05
	if _, err := Run(other, mpi.NewSingle(), io.Discard); !errors.As(err, new(cli.UsageError)) || !strings.Contains(fmt.Sprint(err), "a format-version-1 checkpoint does not record which") {
		t.Errorf("version 1, other lr: %v", err)
	}

	second := cfg
	second.CheckpointDir, second.Resume, second.Keep, second.CheckpointEvery = dir, "auto", 1, "5"
	res, err := Run(second, mpi.NewSingle(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for i := range res.Params {
		if math.Float32bits(res.Params[i]) != math.Float32bits(full.Params[i]) {
			t.Fatalf("parameter %d: resumed from version 1 %v, uninterrupted %v", i, res.Params[i], full.Params[i])
		}
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, v1) {
		t.Error("the version-1 checkpoint was pruned or changed")
	}
	latest, _, err := checkpoint.Latest(dir, nil)
	if err != nil || latest.Step != 30 || latest.Version != checkpoint.Version || latest.RunID == "" {
		t.Errorf("newest checkpoint %+v, %v", latest, err)
	}
}

// TestCheckpointDirRemoved: a checkpoint directory removed during the run
// is made again and locked before the next save, with a warning (before,
// Save made it unlocked, and a second job was let in beside this one);
// if another job holds the new directory by then, the save fails saying
// so, and writes nothing there.
func TestCheckpointDirRemoved(t *testing.T) {
	cfg := smallRun()
	cfg.CheckpointDir = filepath.Join(t.TempDir(), "ck")
	var log bytes.Buffer
	cp := testCheckpointers(t, cfg, 1, 5, 0, &log)[0]
	if _, err := cp.resume(); err != nil {
		t.Fatal(err)
	}
	if err := cp.save(1, 1); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(cfg.CheckpointDir); err != nil {
		t.Fatal(err)
	}
	if err := cp.save(2, 1); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "hpctrain: warning: checkpoint dir "+cfg.CheckpointDir+" was removed during the run: made it again and locked it") {
		t.Errorf("no warning:\n%s", log.String())
	}
	other, err := os.Open(cfg.CheckpointDir)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		t.Skip("no flock on directories here")
	} else if !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("flock: %v", err)
	}
	if st, _, err := checkpoint.Latest(cfg.CheckpointDir, nil); err != nil || st == nil || st.Step != 2 {
		t.Errorf("after the directory was made again: %+v, %v; want step 2", st, err)
	}

	// Removed again, and another job holds the new one first.
	os.RemoveAll(cfg.CheckpointDir)
	os.Mkdir(cfg.CheckpointDir, 0o755)
	taken, err := os.Open(cfg.CheckpointDir)
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	if err := syscall.Flock(int(taken.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	err = cp.save(3, 1)
	if err == nil || !strings.Contains(err.Error(), "was removed during the run, and checkpoint dir "+cfg.CheckpointDir+" in use: another job") {
		t.Errorf("save into a directory another job holds: %v", err)
	}
	if es, _ := os.ReadDir(cfg.CheckpointDir); len(es) != 0 {
		t.Errorf("wrote %d files into the other job's directory", len(es))
	}
}

// TestRequeuedWithoutCheckpoint: a requeued SLURM job (SLURM_RESTART_COUNT
// above 0) that finds no checkpoint says loudly that it starts from step
// 0: its directory was emptied or removed between the runs.
func TestRequeuedWithoutCheckpoint(t *testing.T) {
	for _, c := range []struct {
		restarts string
		want     string
	}{
		{"0", "hpctrain: no checkpoint in "},
		{"2", "hpctrain: warning: SLURM job 7 was requeued 2 times, but "},
	} {
		t.Setenv("SLURM_JOB_ID", "7")
		t.Setenv("SLURM_RESTART_COUNT", c.restarts)
		cfg := smallRun()
		cfg.CheckpointDir, cfg.Resume = t.TempDir(), "auto"
		var log bytes.Buffer
		cp := testCheckpointers(t, cfg, 1, 5, 0, &log)[0]
		if step, err := cp.resume(); err != nil || step != 0 {
			t.Fatalf("restarts %s: step %d, %v", c.restarts, step, err)
		}
		if !strings.HasPrefix(log.String(), c.want) {
			t.Errorf("restarts %s: %q, want it to start %q", c.restarts, log.String(), c.want)
		}
	}
}

// TestResumeOtherData: the settings name where the data is, not what is
// there; a run resumed on other data (files replaced, a link moved) is
// warned that its epochs are not the interrupted run's.
func TestResumeOtherData(t *testing.T) {
	cfg := smallRun()
	cfg.CheckpointDir = t.TempDir()
	cp := testCheckpointers(t, cfg, 1, 5, 0, io.Discard)[0]
	cp.data = "640 training and 64 test samples of 28x28x1, 10 classes"
	cp.resume()
	if err := cp.save(3, 1); err != nil {
		t.Fatal(err)
	}
	cfg.Resume = "auto"
	for _, c := range []struct{ data, want string }{
		{"640 training and 64 test samples of 28x28x1, 10 classes", ""},
		{"576 training and 64 test samples of 28x28x1, 10 classes", "was written on 640 training and 64 test samples of 28x28x1, 10 classes; this run reads 576 training"},
	} {
		var log bytes.Buffer
		cp := testCheckpointers(t, cfg, 1, 5, 0, &log)[0]
		cp.data = c.data
		if step, err := cp.resume(); err != nil || step != 3 {
			t.Fatalf("resume: step %d, %v", step, err)
		}
		if got := strings.Contains(log.String(), "warning"); got != (c.want != "") || !strings.Contains(log.String(), c.want) {
			t.Errorf("data %q: %q, want a warning saying %q", c.data, log.String(), c.want)
		}
	}
}

// TestResumePastEnd: a checkpoint past the run's last step without a
// final result (-steps or -epochs lowered after a stop) is refused on
// every rank as a usage error naming its step, and the directory is left
// as it was; before, the run reported an epoch past the last and wrote
// the checkpoint again as the run's end.
func TestResumePastEnd(t *testing.T) {
	cfg := smallRun() // 640 samples, batch 32: 10 steps per epoch on 2 ranks
	cfg.CheckpointDir, cfg.Threads = t.TempDir(), 1
	runAll := func(cfg Config) []error { return runEvery(cfg, 2) }
	t.Setenv(FaultEnv, "usr1@0:13") // stopped within epoch 2: no final result
	for r, err := range runAll(cfg) {
		if !errors.Is(err, ErrPreempted) {
			t.Fatalf("stopped at step 13, rank %d: %v, want ErrPreempted", r, err)
		}
	}
	stopSignalled.Store(false)
	t.Setenv(FaultEnv, "")
	before := files(t, cfg.CheckpointDir)
	for _, c := range []struct {
		epochs, steps int
		end           string
	}{{1, 30, "past this run's last step 10 (-epochs 1 of 10 steps)"}, {2, 12, "past this run's last step 12 (-steps 12)"}} {
		again := cfg
		again.Resume, again.Epochs, again.Steps = "auto", c.epochs, c.steps
		for r, err := range runAll(again) {
			want := "the checkpoint is at step 13 (in epoch 2), " + c.end + ": nothing to train"
			if !errors.As(err, new(cli.UsageError)) || !strings.Contains(fmt.Sprint(err), want) {
				t.Errorf("-epochs %d -steps %d, rank %d: %v\nwant a usage error saying %q", c.epochs, c.steps, r, err, want)
			}
		}
		sameFiles(t, "after the refused resume", files(t, cfg.CheckpointDir), before)
	}
}

// TestResumeRollBack: a run resumed from an earlier checkpoint of its own
// (step 10 of a run that went to 30) sets the later files aside instead
// of leaving them to be taken for its newest: before, -keep 1 pruned the
// file the run had just written (the abandoned step 30 was "newer"), and
// -resume auto went back to step 30. Another run's checkpoint resumed
// into a directory holding later files of its own run is refused at once
// (exit 2), not at the first save after training up to it.
func TestResumeRollBack(t *testing.T) {
	cfg := smallRun() // 10 steps per epoch on 2 ranks
	cfg.CheckpointDir, cfg.Threads, cfg.CheckpointEvery, cfg.Epochs = t.TempDir(), 1, "5", 3
	if _, err := runRanks(t, cfg, 2); err != nil {
		t.Fatal(err)
	}
	back := cfg
	back.Resume, back.Keep, back.Steps = filepath.Join(cfg.CheckpointDir, checkpoint.FileName(10)), 1, 20
	if _, err := runRanks(t, back, 2); err != nil {
		t.Fatal(err)
	}
	st, path, err := checkpoint.Latest(cfg.CheckpointDir, nil)
	if err != nil || st == nil || st.Step != 20 || st.Final == nil {
		step := int64(-1)
		if st != nil {
			step = st.Step
		}
		t.Fatalf("newest after the roll-back: %s (step %d), %v; want this run's final step 20", path, step, err)
	}
	var names []string
	for name := range files(t, cfg.CheckpointDir) {
		names = append(names, name)
	}
	if want := []string{checkpoint.FileName(20)}; !slices.Equal(names, want) {
		t.Errorf("with -keep 1 the directory holds %q, want %q", names, want)
	}
	aside := files(t, filepath.Join(cfg.CheckpointDir, "set-aside-after-step-10"))
	for _, step := range []int64{15, 20, 25, 30} {
		if _, ok := aside[checkpoint.FileName(step)]; !ok {
			t.Errorf("step %d of the abandoned future not set aside: %d files there", step, len(aside))
		}
	}
	again := back
	again.Resume = "auto"
	if res, err := runRanks(t, again, 2); err != nil || res.Step != 20 {
		t.Errorf("-resume auto after the roll-back: step %d, %v; want the run complete at step 20", res.Step, err)
	}

	other := cfg
	other.CheckpointDir, other.Seed, other.Steps, other.Epochs = t.TempDir(), 2, 5, 3
	if _, err := runRanks(t, other, 2); err != nil {
		t.Fatal(err)
	}
	into := cfg // its directory's newest is step 20 of the first run
	into.Resume = filepath.Join(other.CheckpointDir, checkpoint.FileName(5))
	into.Seed = 2
	before := files(t, cfg.CheckpointDir)
	for r, err := range runEvery(into, 2) {
		want := "is step 20 of another run" // rank 0's; the others point to it
		if r > 0 {
			want = "failed on rank 0"
		}
		if !errors.As(err, new(cli.UsageError)) || !strings.Contains(fmt.Sprint(err), want) {
			t.Errorf("another run's checkpoint into a directory with later files, rank %d: %v, want a usage error saying %q", r, err, want)
		}
	}
	sameFiles(t, "after the refusal", files(t, cfg.CheckpointDir), before)
}

// TestCheckpointDirNotMakeable: a -checkpoint-dir that cannot be made (a
// file in its path) is bad input like an unwritable -metrics path: one
// line, a usage error (exit 2; it was 1), on every rank.
func TestCheckpointDirNotMakeable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	cfg := smallRun()
	cfg.CheckpointDir, cfg.Threads = filepath.Join(file, "ck"), 1
	for r, err := range runEvery(cfg, 2) {
		want := "checkpoint dir " + cfg.CheckpointDir + ": mkdir " + file + ": not a directory"
		if r > 0 {
			want = "failed on rank 0"
		}
		if !errors.As(err, new(cli.UsageError)) || !strings.Contains(fmt.Sprint(err), want) {
			t.Errorf("rank %d: %v, want a usage error saying %q", r, err, want)
		}
	}
}

// runEvery runs cfg on n fake ranks and returns every rank's error; every
// rank returns, so none kills the fake job as runRanks does (which makes
// the other ranks' errors "fake job killed").
func runEvery(cfg Config, n int) []error {
	ranks := mpi.NewFake(n, 0)
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for r, comm := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[r] = Run(cfg, comm, io.Discard)
		}()
	}
	wg.Wait()
	return errs
}

// TestUnsavedSignalSaid: SIGUSR1 in a run without -checkpoint-dir, which
// has nothing to save, is said once on rank 0 at the next step boundary,
// and the run goes on to its end (Go dropped it without a word before).
func TestUnsavedSignalSaid(t *testing.T) {
	cfg := smallRun()
	cfg.Threads, cfg.Steps = 1, 4
	WatchUnsavedSignal()
	// Where an earlier test started CatchStopSignals, the signal sets its
	// flag too: cleared for the tests after this one.
	t.Cleanup(func() { stopSignalled.Store(false); unsavedSignal.Store(false) })
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); !unsavedSignal.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("SIGUSR1 not caught")
		}
	}
	var out bytes.Buffer
	res, err := Run(cfg, mpi.NewSingle(), &out)
	if err != nil || res.Step != 4 {
		t.Fatalf("step %d, %v; want the run's 4 steps", res.Step, err)
	}
	want := "hpctrain: warning: SIGUSR1 received at step 1, but this run writes no checkpoints (no -checkpoint-dir): nothing to save; training goes on"
	if n := strings.Count(out.String(), want); n != 1 {
		t.Errorf("said %d times, want once: %q\n%s", n, want, out.String())
	}
}

// TestReportFailureCheckpointed: a run that stops at an epoch's end
// because its report cannot be written (-metrics on a full disk)
// checkpoints that step first, marked unreported; before, everything
// since the last periodic checkpoint was lost. Resumed, the run reports
// the epoch it could not, and ends as the uninterrupted run does.
func TestReportFailureCheckpointed(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skipf("no /dev/full here: %v", err)
	}
	cfg := smallRun() // 10 steps per epoch on 2 ranks, 2 epochs
	cfg.Threads = 1
	cfg.Metrics = filepath.Join(t.TempDir(), "whole.jsonl")
	want, err := runRanks(t, cfg, 2)
	if err != nil {
		t.Fatal(err)
	}

	full := cfg
	full.CheckpointDir, full.Metrics = t.TempDir(), "/dev/full"
	for r, err := range runEvery(full, 2) {
		if err == nil || !strings.Contains(err.Error(), "writing metrics") && !strings.Contains(err.Error(), "failed on rank 0") {
			t.Fatalf("rank %d: %v, want the metrics' write error", r, err)
		}
	}
	st, _, err := checkpoint.Latest(full.CheckpointDir, nil)
	if err != nil || st == nil || st.Step != 10 || st.EpochLoss == nil || !st.EpochLoss.Unreported {
		t.Fatalf("after the failed report: %+v, %v; want a checkpoint at step 10 marking epoch 1 unreported", st, err)
	}

	again := full
	again.Resume, again.Metrics = "auto", filepath.Join(t.TempDir(), "resumed.jsonl")
	got, err := runRanks(t, again, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Params, want.Params) || got.TestAccuracy != want.TestAccuracy {
		t.Errorf("resumed run: accuracy %v, want the uninterrupted run's %v (parameters equal: %v)", got.TestAccuracy, want.TestAccuracy, slices.Equal(got.Params, want.Params))
	}
	lines := func(path string) (rs []Result) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var r Result
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			rs = append(rs, r)
		}
		return rs
	}
	w, g := lines(cfg.Metrics), lines(again.Metrics)
	if len(g) != len(w) {
		t.Fatalf("resumed run wrote %d metrics lines, the uninterrupted one %d", len(g), len(w))
	}
	for i := range w {
		if g[i].Epoch != w[i].Epoch || g[i].TrainLoss != w[i].TrainLoss || g[i].TestLoss != w[i].TestLoss || g[i].Final != w[i].Final {
			t.Errorf("metrics line %d: epoch %d train loss %v test loss %v final %v; want epoch %d, %v, %v, %v",
				i+1, g[i].Epoch, g[i].TrainLoss, g[i].TestLoss, g[i].Final, w[i].Epoch, w[i].TrainLoss, w[i].TestLoss, w[i].Final)
		}
	}
}

// TestResumeOptimizerState: a checkpoint whose optimizer state is missing
// (no optim.* sections), of other sizes, or not finite is refused on every
// rank as a usage error naming it, and the directory is left as it was;
// before, a file without the sections resumed with the moments restarted
// from zero and no word said.
func TestResumeOptimizerState(t *testing.T) {
	cfg := smallRun() // 10 steps per epoch on 2 ranks
	cfg.CheckpointDir, cfg.Threads, cfg.Steps, cfg.Config.Name, cfg.LR = t.TempDir(), 1, 5, "adam", 0.001
	if _, err := runRanks(t, cfg, 2); err != nil {
		t.Fatal(err)
	}
	good, err := checkpoint.Load(filepath.Join(cfg.CheckpointDir, checkpoint.FileName(5)))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		edit func(s []checkpoint.Section) []checkpoint.Section
		want string
	}{
		{"none", func(s []checkpoint.Section) []checkpoint.Section {
			return slices.DeleteFunc(s, func(s checkpoint.Section) bool { return strings.HasPrefix(s.Name, "optim.") })
		}, "its optimizer state (0 buffers) does not fit this run's adam optimizer"},
		{"short", func(s []checkpoint.Section) []checkpoint.Section {
			for i := range s {
				if s[i].Name == "optim.1" {
					s[i].Data = s[i].Data[:len(s[i].Data)-1]
				}
			}
			return s
		}, "does not fit this run's adam optimizer (optim: restore: state buffer 1 has"},
		{"nan", func(s []checkpoint.Section) []checkpoint.Section {
			for i := range s {
				if s[i].Name == "optim.2" {
					s[i].Data = slices.Clone(s[i].Data)
					s[i].Data[7] = float32(math.NaN())
				}
			}
			return s
		}, "step 5: optimizer state optim.2 value 7 is NaN"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := *good
			st.Sections = c.edit(slices.Clone(good.Sections))
			run := cfg
			run.CheckpointDir, run.Resume, run.Steps = t.TempDir(), "auto", 10
			if _, err := checkpoint.Save(run.CheckpointDir, &st, 0); err != nil {
				t.Fatal(err)
			}
			before := files(t, run.CheckpointDir)
			for r, err := range runEvery(run, 2) {
				want := c.want
				if r > 0 {
					want = "failed on rank 0"
				}
				if !errors.As(err, new(cli.UsageError)) || !strings.Contains(fmt.Sprint(err), want) {
					t.Errorf("rank %d: %v, want a usage error saying %q", r, err, want)
				}
			}
			sameFiles(t, "after the refusal", files(t, run.CheckpointDir), before)
		})
	}
}

// TestScheduleDiverges: a resumed run whose cosine schedule spans another
// length is found out at the first step whose rate differs, also when it
// resumes during the warm-up, where the first step's rate is the same for
// both lengths (no warning was given there); the same length, or a
// schedule that does not depend on it, never differs.
func TestScheduleDiverges(t *testing.T) {
	cos := optim.ScheduleConfig{Name: "cosine", WarmupSteps: 6, MinLR: 0.001}
	for _, c := range []struct {
		sc             optim.ScheduleConfig
		was, now, from int
		want           int // -1: no difference
	}{
		{cos, 12, 16, 4, 7},   // in the warm-up: the second cosine step differs (the first is lr in both)
		{cos, 12, 16, 8, 8},   // past it: the resumed step itself
		{cos, 12, 12, 4, -1},  // the same length
		{cos, 10, 40, 10, 10}, // the old run ended: its held rate against the new schedule's
		{cos, 40, 10, 4, 7},   // shortened
		{optim.ScheduleConfig{Name: "constant", WarmupSteps: 6}, 12, 16, 4, -1},
		{optim.ScheduleConfig{Name: "multistep", Milestones: []int{8}, Gamma: 0.1}, 12, 16, 4, -1},
	} {
		step, _, _, ok := scheduleDiverges(c.sc, 0.01, c.was, c.now, c.from)
		if got := map[bool]int{true: step, false: -1}[ok]; got != c.want {
			t.Errorf("%s warm-up %d, %d -> %d steps, from step %d: first difference at %d, want %d", c.sc.Name, c.sc.WarmupSteps, c.was, c.now, c.from, got, c.want)
		}
	}
}
