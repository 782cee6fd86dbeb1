package train

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"hpctrain/affinity"
	"hpctrain/checkpoint"
	"hpctrain/data"
	"hpctrain/internal/cli"
	"hpctrain/model"
	"hpctrain/mpi"
)

// trainedRun trains a small run with a checkpoint directory and returns
// its result and the final checkpoint's path.
func trainedRun(t *testing.T, change func(*Config)) (Result, string) {
	t.Helper()
	cfg := Defaults()
	cfg.Dataset, cfg.ImageShape, cfg.Limit, cfg.TestLimit, cfg.Batch, cfg.LR = "synthetic", "32x32x3", 512, 150, 32, 0.003
	cfg.Augment, cfg.Mean, cfg.Std = "crop_pad=2:28x28,flip", []float64{0.4, 0.5, 0.6}, []float64{0.2, 0.25, 0.3}
	cfg.Model, cfg.Epochs, cfg.Progress, cfg.Bind, cfg.Threads = "cnn", 3, 0, "none", evalThreads
	cfg.CheckpointDir = t.TempDir()
	if change != nil {
		change(&cfg)
	}
	res, err := Run(cfg, mpi.NewSingle(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	st, path, err := checkpoint.Latest(cfg.CheckpointDir, nil)
	if err != nil || st == nil {
		t.Fatalf("no checkpoint: %v", err)
	}
	return res, path
}

// evalThreads is the compute threads of the runs here and of their
// evaluations: the scores of a forward pass may differ in the last bits
// with the number of workers, so an exact comparison needs the same.
const evalThreads = 2

// TestEvaluateIsTheRunsEvaluation: a checkpoint's network, restored and
// evaluated on the run's test set (normalised and centre-cropped as the
// run's evaluation does) with the run's threads, gives the run's final
// test loss and accuracy, exactly; sharded over two ranks, the same
// accuracy. For the CNN, and for a residual network with batch norm
// (running statistics restored, evaluation mode) and label smoothing in
// training (none in the test loss).
func TestEvaluateIsTheRunsEvaluation(t *testing.T) {
	t.Run("cnn", func(t *testing.T) { testEvaluate(t, nil, 0.3) })
	t.Run("resnet8", func(t *testing.T) {
		testEvaluate(t, func(c *Config) { c.Model, c.LR, c.LabelSmoothing = "resnet8", 0.05, 0.1 }, 0.15)
	})
}

func testEvaluate(t *testing.T, change func(*Config), minAcc float64) {
	res, path := trainedRun(t, change)
	tr, err := LoadTrained(path, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := affinity.NewUnpinnedWorkers(evalThreads)
	defer w.Close()
	tr.Net.SetParallel(w)
	if res.TestAccuracy < minAcc {
		t.Fatalf("the run learnt nothing (test accuracy %v): a poor test of the evaluation", res.TestAccuracy)
	}
	if tr.Net.In != (model.Shape{H: 28, W: 28, C: 3}) || tr.Net.Training() || tr.Batch != 32 {
		t.Fatalf("restored net: input %v, training %v, batch %d", tr.Net.In, tr.Net.Training(), tr.Batch)
	}
	set, err := tr.OpenEval(tr.Config.DataConfig, tr.Config.TestLimit, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	ev, err := Evaluate(mpi.NewSingle(), tr.Net, set.Loader, set.Test.Len())
	if err != nil {
		t.Fatal(err)
	}
	if ev.Samples != 150 || ev.Accuracy != res.TestAccuracy || ev.Loss != res.TestLoss {
		t.Fatalf("evaluation: %d samples, accuracy %v loss %v; the run's: accuracy %v loss %v", ev.Samples, ev.Accuracy, ev.Loss, res.TestAccuracy, res.TestLoss)
	}
	var total, diag int64
	for i, row := range ev.Confusion {
		for j, v := range row {
			total += v
			if i == j {
				diag += v
			}
		}
	}
	if total != 150 || int(diag) != ev.Correct {
		t.Errorf("confusion matrix holds %d samples, %d on the diagonal; want 150 and %d", total, diag, ev.Correct)
	}

	// Two ranks in process: each evaluates its shard on its own copy of
	// the checkpoint's network (wrap: what rank r evaluates it through).
	onTwoRanks := func(wrap func(r int, net model.Replica) model.Replica) ([]Evaluation, []error) {
		fakes := mpi.NewFake(2, 2)
		evs := make([]Evaluation, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := range fakes {
			tr, err := LoadTrained(path, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			set, err := tr.OpenEval(tr.Config.DataConfig, tr.Config.TestLimit, 2, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer set.Close()
			net := wrap(r, tr.Net)
			wg.Add(1)
			go func() {
				defer wg.Done()
				evs[r], errs[r] = Evaluate(fakes[r], net, set.Loader, set.Test.Len())
			}()
		}
		wg.Wait()
		return evs, errs
	}
	evs, errs := onTwoRanks(func(_ int, net model.Replica) model.Replica { return net })
	for r := range evs {
		if errs[r] != nil || evs[r].Accuracy != ev.Accuracy || math.Abs(evs[r].Loss-ev.Loss) > 1e-6 || evs[r].Samples != 150 {
			t.Errorf("rank %d of 2: %+v, %v; one rank: accuracy %v loss %v", r, evs[r], errs[r], ev.Accuracy, ev.Loss)
		}
	}

	// A device error on rank 1 during its passes (a failed kernel leaves
	// stale scores) fails the evaluation on both ranks, instead of an
	// accuracy of whatever the scores held.
	evs, errs = onTwoRanks(func(r int, net model.Replica) model.Replica {
		if r == 1 {
			return failingReplica{net}
		}
		return net
	})
	for r, want := range []string{"evaluation failed on 1 other rank(s)", "evaluation: cuLaunchKernel: CUDA_ERROR_LAUNCH_FAILED"} {
		if errs[r] == nil || !strings.Contains(errs[r].Error(), want) {
			t.Errorf("rank %d of 2, rank 1's device failing: %+v, %v; want an error saying %q", r, evs[r], errs[r], want)
		}
	}

	// Scores that overflow on rank 1's shard: no test loss to report, on
	// either rank (it reached the metrics' JSON as an empty line).
	evs, errs = onTwoRanks(func(r int, net model.Replica) model.Replica {
		if r == 1 {
			return overflowingReplica{net}
		}
		return net
	})
	for r := range errs {
		if want := "evaluation: the test loss is +Inf"; errs[r] == nil || !strings.Contains(errs[r].Error(), want) {
			t.Errorf("rank %d of 2, rank 1's scores overflowing: %+v, %v; want an error saying %q", r, evs[r], errs[r], want)
		}
	}
}

// overflowingReplica is a replica whose scores overflow: its loss is +Inf.
type overflowingReplica struct{ model.Replica }

func (o overflowingReplica) Loss(labels []int32) (float64, int) {
	_, c := o.Replica.Loss(labels)
	return math.Inf(1), c
}

// failingReplica is a replica whose device failed: Err reports it.
type failingReplica struct{ model.Replica }

func (failingReplica) Err() error { return errors.New("cuLaunchKernel: CUDA_ERROR_LAUNCH_FAILED") }

func TestLoadTrainedRefusals(t *testing.T) {
	_, path := trainedRun(t, func(c *Config) { c.Steps, c.TestLimit = 1, 10 })
	dir := t.TempDir()
	b, _ := os.ReadFile(path)

	check := func(name string, err error, usage bool, want ...string) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") || errors.As(err, new(cli.UsageError)) != usage {
			t.Errorf("%s: %q (usage error %v, want %v)", name, msg, !usage, usage)
		}
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: %q does not say %q", name, msg, w)
			}
		}
	}
	_, err := LoadTrained(filepath.Join(dir, "none.hpck"), LoadOptions{})
	check("missing", err, true, "none.hpck", "no such file")

	corrupt := filepath.Join(dir, "corrupt.hpck")
	c := append([]byte(nil), b...)
	c[len(c)/2] ^= 0x40
	os.WriteFile(corrupt, c, 0o644)
	_, err = LoadTrained(corrupt, LoadOptions{})
	check("corrupt", err, false, "corrupt.hpck", "checksum")
	if !errors.Is(err, checkpoint.ErrChecksum) {
		t.Errorf("corrupt: %v does not wrap ErrChecksum", err)
	}

	future := filepath.Join(dir, "future.hpck")
	f := append([]byte(nil), b...)
	f[8] = 9
	os.WriteFile(future, f, 0o644)
	_, err = LoadTrained(future, LoadOptions{})
	// A file this build cannot read is the wrong input for it (exit 2, as
	// a file that is no checkpoint); only a damaged one is exit 1.
	check("version", err, true, "future.hpck", "format version 9")

	_, err = LoadTrained(path, LoadOptions{Model: "mlp"})
	check("other model", err, true, "of model cnn, not mlp")
	if _, err := LoadTrained(path, LoadOptions{Model: "cnn"}); err != nil {
		t.Errorf("-model cnn on a cnn checkpoint: %v", err)
	}

	_, err = LatestTrained(dir, LoadOptions{})
	check("no valid file", err, true, "no valid checkpoint")
}

// A batch-norm network's checkpoint without its running statistics
// cannot be evaluated; one with them restores them.
func TestLoadTrainedBuffers(t *testing.T) {
	d, _ := model.LoadDesc("resnet8")
	net, err := model.Build(d, model.Shape{H: 28, W: 28, C: 1}, 10, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range net.Buffers {
		net.Buffers[i] = float32(i%7) + 0.5
	}
	st := &checkpoint.State{Model: "resnet8", Desc: string(net.Desc.TOML()), RunID: "r", Step: 3,
		Sections: []checkpoint.Section{{Name: "params", Data: net.Params}}}
	dir := t.TempDir()
	p, err := checkpoint.Save(dir, st, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = LoadTrained(p, LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), "running statistics") {
		t.Fatalf("no buffers: %v", err)
	}
	st.Step, st.Sections = 4, append(st.Sections, checkpoint.Section{Name: "buffers", Data: net.Buffers})
	if p, err = checkpoint.Save(dir, st, 0); err != nil {
		t.Fatal(err)
	}
	var warned []string
	tr, err := LoadTrained(p, LoadOptions{Warn: func(m string) { warned = append(warned, m) }})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Net.Buffers[10] != net.Buffers[10] || tr.Net.Classes != 10 || len(tr.ClassNames) != 10 || tr.ClassNames[9] != "Ankle boot" {
		t.Errorf("restored: buffer %v, %d classes, names %v", tr.Net.Buffers[10], tr.Net.Classes, tr.ClassNames)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "records no settings") {
		t.Errorf("warnings %q, want one about the missing settings", warned)
	}
}

// A checkpoint whose recorded data settings training would have refused
// (a mean without a std once panicked in Normalisation), or whose
// parameters or running statistics are not finite, is refused in one
// line naming it.
func TestLoadTrainedDamagedRecord(t *testing.T) {
	d, _ := model.LoadDesc("resnet8")
	net, err := model.Build(d, model.Shape{H: 28, W: 28, C: 1}, 10, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	save := func(step int64, config string, params, bufs []float32) string {
		t.Helper()
		st := &checkpoint.State{Model: "resnet8", Desc: string(net.Desc.TOML()), RunID: "r", Step: step, Config: []byte(config),
			Sections: []checkpoint.Section{{Name: "params", Data: params}, {Name: "buffers", Data: bufs}}}
		p, err := checkpoint.Save(dir, st, 0)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	nan := func(v []float32, i int, x float64) []float32 {
		w := append([]float32(nil), v...)
		w[i] = float32(x)
		return w
	}
	for _, c := range []struct {
		config       string
		params, bufs []float32
		want         string
	}{
		{`{"mean":[0.5]}`, net.Params, net.Buffers, "its recorded settings do not hold: config: mean [0.5] and std []"},
		{`{"mean":[0.5,0.5],"std":[0.5]}`, net.Params, net.Buffers, "give both, one value per channel"},
		{`{"dataset":"nosuch"}`, net.Params, net.Buffers, `dataset = "nosuch"`},
		{`{}`, nan(net.Params, 7, math.NaN()), net.Buffers, "parameter 7 of 77754 is NaN"},
		{`{}`, net.Params, nan(net.Buffers, 3, math.Inf(-1)), "buffer value 3 of"},
	} {
		p := save(1, c.config, c.params, c.bufs)
		_, err := LoadTrained(p, LoadOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line naming the file and saying %q", c.config, err, c.want)
		}
		os.Remove(p)
	}
	if _, err := LoadTrained(save(2, `{}`, net.Params, net.Buffers), LoadOptions{}); err != nil {
		t.Errorf("the undamaged record: %v", err)
	}
	// A run of mnist in Fashion-MNIST's directory, which training refuses
	// since but older builds ran: its network still loads, with a warning.
	var warned []string
	warn := func(m string) { warned = append(warned, m) }
	if _, err := LoadTrained(save(3, `{"dataset":"mnist"}`, net.Params, net.Buffers), LoadOptions{Warn: warn}); err != nil || len(warned) != 1 || !strings.Contains(warned[0], "dataset mnist with data_dir "+data.DefaultDataDir) {
		t.Errorf("mnist in the default directory: %v, warnings %q: want it loaded with one warning", err, warned)
	}
}

func TestClassesFromParams(t *testing.T) {
	d, _ := model.LoadDesc("lenet5")
	in := model.Shape{H: 32, W: 32, C: 3}
	for _, k := range []int{1, 3, 10, 102} {
		net, err := model.Build(d, in, k, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := classesFromParams(d, in, len(net.Params)); got != k {
			t.Errorf("%d classes: found %d", k, got)
		}
	}
	if got := classesFromParams(d, in, 12345); got != 0 {
		t.Errorf("12345 parameters: %d classes, want 0", got)
	}
}

// A -loss-log (or -metrics) that cannot be written is an error of the
// run, not lines lost in silence: the loss log's buffered write errors were
// dropped when it was closed.
func TestOutputWriteErrors(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skipf("no /dev/full here: %v", err)
	}
	for _, c := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.LossLog = "/dev/full" }, "writing the loss log: write /dev/full: no space left on device"},
		{func(c *Config) { c.Metrics = "/dev/full" }, "writing metrics: write /dev/full: no space left on device"},
	} {
		cfg := smallRun()
		cfg.Epochs, cfg.Steps, cfg.Bind = 1, 0, "none"
		c.set(&cfg)
		if _, err := Run(cfg, mpi.NewSingle(), io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want an error saying %q", err, c.want)
		}
	}
}

// -collective nccl where -device auto finds no GPU is refused in one line
// (it quietly summed on the CPU instead), as it is with -device cpu.
func TestNCCLWithoutGPU(t *testing.T) {
	if cudaPresent() {
		t.Skip("a CUDA driver sees a device here: -device auto would use it")
	}
	cfg := smallRun()
	cfg.Epochs, cfg.Steps, cfg.Bind, cfg.Collective = 1, 0, "none", "nccl"
	_, err := Run(cfg, mpi.NewSingle(), io.Discard)
	if !errors.As(err, new(cli.UsageError)) || !strings.Contains(err.Error(), `collective = "nccl" sums on GPUs, and this run computes on the CPU`) {
		t.Errorf("%v, want a usage error", err)
	}
}

// checkpoint_every without checkpoint_dir writes nothing, and says so (a
// job file may leave the directory to the sbatch script's flags, so it is
// no error).
func TestCheckpointEveryWithoutDir(t *testing.T) {
	cfg := smallRun()
	cfg.Epochs, cfg.Steps, cfg.Bind, cfg.CheckpointEvery = 1, 0, "none", "5"
	var out bytes.Buffer
	if _, err := Run(cfg, mpi.NewSingle(), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "warning: checkpoint_every and keep apply with checkpoint_dir, and none is given: this run writes no checkpoint") {
		t.Errorf("no warning:\n%s", out.String())
	}
}
