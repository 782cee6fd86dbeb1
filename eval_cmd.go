package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"runtime"
	"text/tabwriter"

	"hpctrain/chart"
	"hpctrain/data"
	"hpctrain/internal/atomicfile"
	"hpctrain/internal/cli"
	"hpctrain/train"
)

const evalUsage = `Usage: hpctrain eval -checkpoint FILE [flags]
       mpirun -np N hpctrain eval -checkpoint-dir DIR [flags]

Evaluates a trained network on the test set of the data set it was trained
on (or any other, with the data flags): loss, accuracy, per-class accuracy
and the confusion matrix, as text, JSON (-json) and a PNG heat map (-plot).
The samples go through the training run's normalisation and evaluation
transforms, in its batches, sharded over the ranks as the run's own
evaluation is: on the same checkpoint and data its accuracy is the run's.
As in training, a collective that waits -collective-timeout (a rank dead
or stuck) or a load or batch stuck -step-timeout on every rank aborts the
job with exit 3 and a line naming the rank.

-device cuda evaluates on a GPU per rank, chosen and opened as train
chooses and opens it (local rank i takes GPU i of those CUDA_VISIBLE_DEVICES
leaves, or -gpus'; several ranks on one GPU with -gpu-share); -device auto
uses the GPU where placement finds one or a CUDA driver sees a device, else
the CPU, warning where the rest of CUDA does not load. The forward passes
run on the device in fp32 (the loss and the counts agree with the CPU's to
fp32 rounding); the data is loaded, and the sums reduced over MPI, on the
host as on the CPU. Every rank computes on the same kind of device.

Flags:
`

// evalReport is eval's JSON output (-json), one object.
type evalReport struct {
	Checkpoint string       `json:"checkpoint"`
	Model      string       `json:"model"`
	Step       int64        `json:"step"`
	Epoch      int          `json:"epoch"`
	Dataset    string       `json:"dataset"`
	DataDir    string       `json:"data_dir"`
	Samples    int          `json:"samples"`
	Loss       float64      `json:"loss"`
	Accuracy   float64      `json:"accuracy"`
	Correct    int          `json:"correct"`
	Classes    []classScore `json:"classes"`
	// Confusion[i][j]: samples of true class i predicted as class j.
	Confusion [][]int64 `json:"confusion"`
}

type classScore struct {
	Class    int      `json:"class"`
	Name     string   `json:"name,omitempty"`
	Samples  int64    `json:"samples"`
	Correct  int64    `json:"correct"`
	Accuracy *float64 `json:"accuracy"` // null for a class without samples
}

// evalCmd is `hpctrain eval`.
func evalCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hpctrain eval", flag.ContinueOnError)
	var ck ckptFlags
	ck.bind(fs)
	testLimit := fs.Int("test-limit", 0, "evaluate the first `N` test samples only (0: all) (default: the training run's -test-limit)")
	js := fs.Bool("json", false, "print one JSON object instead of text (messages go to stderr)")
	var devc train.DeviceChoice
	devc.Flags(fs, "each rank")
	plotPath := fs.String("plot", "", "write the confusion matrix as a PNG heat map to `FILE`")
	df := bindData(fs)
	timeouts := train.DefaultTimeouts()
	timeouts.Flags(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), evalUsage)
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr, false); err != nil {
		return err
	}
	if *testLimit < 0 {
		return cli.Usage(fmt.Errorf("-test-limit %d: must be >= 0 (0: all)", *testLimit))
	}
	if err := timeouts.Validate(); err != nil {
		return cli.Usage(err)
	}
	// Not given: the run's own (-1 was that, shown in the help as the
	// default, and taken as such when given).
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "test-limit" })
	if !given {
		*testLimit = -1
	}
	if err := devc.Validate(); err != nil {
		return err
	}
	if *plotPath != "" {
		if err := atomicfile.Check(*plotPath); err != nil {
			return cli.Usage(fmt.Errorf("-plot %s: %w", *plotPath, err)) // a misspelt directory: bad input
		}
	}
	train.StopBeforeInit() // a test fault: a rank that never reaches MPI_Init
	comm, err := connectWithin(timeouts.Collective)
	if err != nil {
		return err
	}
	who = fmt.Sprintf("rank %d (%s): ", comm.Rank(), comm.Host())
	if comm.Size() == 1 {
		who = ""
	}
	wt, err := train.NewWatch(comm, timeouts, stderr)
	if err == nil {
		err = evalRun(wt, &ck, df, devc, *testLimit, *js, *plotPath, stdout, stderr)
		wt.Close()
	}
	if err != nil && comm.Size() > 1 {
		// Say it before MPI_Finalize, as trainCmd does: once one rank
		// has exited non-zero, mpirun kills the others.
		fmt.Fprintf(stderr, "hpctrain: %s%v\n", where(), err)
		err = reported{err}
	}
	if cerr := comm.Close(); err == nil {
		err = cerr
	}
	return err
}

// evalRun is eval on the ranks wt watches: every rank loads the
// checkpoint, puts its network on the device devc chooses and opens the
// data, agreeing on failures, and evaluates its shard; rank 0 reports. A
// rank dead or stuck, or a load or batch stuck on every rank, ends the
// job at the watchdog's timeouts.
func evalRun(wt *train.Watch, ck *ckptFlags, df *dataFlags, devc train.DeviceChoice, testLimit int, js bool, plotPath string, stdout, stderr io.Writer) error {
	comm := wt.Comm()
	info := stdout
	if js {
		info = stderr
	}
	if comm.Rank() != 0 {
		info = io.Discard
	}
	say := func(format string, a ...any) { fmt.Fprintf(info, format+"\n", a...) }

	t, err := ck.load("hpctrain eval", stderr)
	if err = train.Agree(comm, "loading the checkpoint", err); err != nil {
		return err
	}
	// Each rank reads its own copy: a rank on another file (another
	// -checkpoint, a newer file in its -checkpoint-dir) would add its
	// network's counts to the others', or hang them in the reductions.
	if err := train.AgreeText(comm, "checkpoint", t.Identity(), "give every rank the same -checkpoint, or a -checkpoint-dir whose newest file is the same"); err != nil {
		return err
	}
	say("hpctrain: %s: model %s (%d parameters), step %d (epoch %d), trained on %s", t.Path, t.State.Model, len(t.Net.Params), t.State.Step, t.State.Epoch, t.Config.Dataset)
	w, err := ck.compute(t, comm, info, stderr)
	if err != nil {
		return err
	}
	defer w.Close()
	// The compute threads stay placed as for the CPU with -device cuda
	// too (not near the GPU, as train's): this goroutine, their leader,
	// drives the device, and the others wait.
	net, err := t.OnDevice(comm, devc, "evaluating", func(m string) { say("%s", m) }, func(m string) { fmt.Fprintln(stderr, m) })
	if err != nil {
		return err
	}
	defer net.Close() // before the workers: their thread holds the device's context
	if devc.Device != "cpu" {
		say("hpctrain: device: %s", net.Ranks)
	}

	dc := df.over(t.Config.DataConfig, t.DataShape)
	limit := t.Config.TestLimit
	if testLimit >= 0 {
		limit = testLimit
	}
	set, err := wt.OpenEval(t, dc, limit, comm.LocalSize(), func(m string) { fmt.Fprintf(stderr, "hpctrain: warning: %s\n", m) })
	if err = train.Agree(comm, "opening the data", err); err != nil {
		return err
	}
	defer set.Close()
	// A P for each loader worker beside the compute threads', as train
	// and predict give (data.Procs).
	runtime.GOMAXPROCS(data.Procs(w.Workers(), dc.DataWorkers))
	sh := set.Test.Shape()
	if err := train.AgreeText(comm, "test data", fmt.Sprintf("%d samples of %dx%dx%d", set.Test.Len(), sh.H, sh.W, sh.C), "give every rank the same data (-data-dir, -test-limit)"); err != nil {
		return err
	}
	ranks := "1 rank"
	if comm.Size() > 1 {
		ranks = fmt.Sprintf("%d ranks", comm.Size())
	}
	say("hpctrain: evaluating on %s; %s, batch %d", set.Desc, ranks, t.Batch)
	ev, err := wt.Evaluate(net, set.Loader, set.Test.Len())
	if err == nil {
		err = set.Err()
	}
	if err = train.Agree(comm, "evaluating", err); err != nil {
		return err
	}
	if comm.Rank() != 0 {
		return nil
	}
	names := set.ClassNames
	if names == nil {
		names = t.ClassNames
	}
	rep := report(t, dc.Dataset, dc.DataDir, names, ev)
	if plotPath != "" {
		title := fmt.Sprintf("%s step %d on %s: accuracy %.2f%% (%d samples)", t.State.Model, t.State.Step, dc.Dataset, 100*ev.Accuracy, ev.Samples)
		if err := atomicfile.Write(plotPath, func(w io.Writer) error { return chart.Confusion(w, title, names, ev.Confusion) }); err != nil {
			return err
		}
		say("hpctrain: wrote %s", plotPath)
	}
	if js {
		b, err := json.Marshal(rep)
		if err != nil { // a NaN or infinite loss
			return fmt.Errorf("eval %s: the report holds a number JSON cannot carry (%v)", t.Path, err)
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	return writeEvalText(stdout, rep)
}

func report(t *train.Trained, dataset, dir string, names []string, ev train.Evaluation) evalReport {
	rep := evalReport{
		Checkpoint: t.Path, Model: t.State.Model, Step: t.State.Step, Epoch: t.State.Epoch,
		Dataset: dataset, DataDir: dir,
		Samples: ev.Samples, Loss: ev.Loss, Accuracy: ev.Accuracy, Correct: ev.Correct, Confusion: ev.Confusion,
	}
	for i, acc := range ev.ClassAccuracy() {
		cs := classScore{Class: i, Correct: ev.Confusion[i][i]}
		for _, v := range ev.Confusion[i] {
			cs.Samples += v
		}
		if names != nil {
			cs.Name = names[i]
		}
		if !math.IsNaN(acc) {
			a := acc
			cs.Accuracy = &a
		}
		rep.Classes = append(rep.Classes, cs)
	}
	return rep
}

// writeEvalText prints the report for people: the totals, a line per
// class, and the confusion matrix (rows true, columns predicted).
func writeEvalText(out io.Writer, rep evalReport) error {
	fmt.Fprintf(out, "test loss %.4f, test accuracy %.2f%% (%d of %d)\n\n", rep.Loss, 100*rep.Accuracy, rep.Correct, rep.Samples)
	tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "class\tname\tsamples\taccuracy")
	for _, c := range rep.Classes {
		acc := "-"
		if c.Accuracy != nil {
			acc = fmt.Sprintf("%.2f%%", 100**c.Accuracy)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\n", c.Class, c.Name, c.Samples, acc)
	}
	tw.Flush()
	fmt.Fprintln(out, "\nconfusion matrix (rows: true class, columns: predicted class)")
	tw = tabwriter.NewWriter(out, 0, 8, 1, ' ', tabwriter.AlignRight)
	head := "\t"
	for j := range rep.Confusion {
		head += fmt.Sprintf("%d\t", j)
	}
	fmt.Fprintln(tw, head)
	for i, row := range rep.Confusion {
		line := fmt.Sprintf("%d\t", i)
		for _, v := range row {
			line += fmt.Sprintf("%d\t", v)
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}
