package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	"hpctrain/affinity"
	"hpctrain/data"
	"hpctrain/internal/cli"
	"hpctrain/mpi"
	"hpctrain/slurm"
	"hpctrain/train"
)

// What eval, predict and export share: naming the checkpoint, rebuilding
// its network, and the threads it computes on.

// ckptFlags are the flags that name a checkpoint.
type ckptFlags struct {
	file, dir, model string
	batch, threads   int
}

func (f *ckptFlags) bind(fs *flag.FlagSet) {
	f.bindFile(fs)
	fs.IntVar(&f.batch, "batch", 0, "samples per forward pass (0: the training run's batch per rank)")
	fs.IntVar(&f.threads, "threads", 0, fmt.Sprintf("compute threads `per rank`, 1 to %d (default: physical cores in the allowed mask / local ranks; on a hybrid CPU its performance cores, where there is one per rank)", train.MaxThreads))
}

// bindFile binds the flags that choose the checkpoint alone, for commands
// that only read the network (export).
func (f *ckptFlags) bindFile(fs *flag.FlagSet) {
	fs.StringVar(&f.file, "checkpoint", "", "checkpoint `FILE` (.hpck) to use")
	fs.StringVar(&f.dir, "checkpoint-dir", "", "use the newest valid checkpoint in `DIR` instead")
	fs.StringVar(&f.model, "model", "", "refuse a checkpoint of another model than this (zoo name or description file)")
}

// load rebuilds the checkpoint's network; warnings go to warn.
func (f *ckptFlags) load(cmd string, warn io.Writer) (*train.Trained, error) {
	switch {
	case f.file != "" && f.dir != "":
		return nil, cli.Usage(fmt.Errorf("-checkpoint %s and -checkpoint-dir %s both given: give one", f.file, f.dir))
	case f.file == "" && f.dir == "":
		return nil, cli.Usage(fmt.Errorf("give -checkpoint FILE or -checkpoint-dir DIR (see %s -h)", cmd))
	}
	if f.batch < 0 || f.batch > train.MaxBatch {
		return nil, cli.Usage(fmt.Errorf("-batch %d: must be 0 to %d", f.batch, train.MaxBatch))
	}
	if f.threads < 0 || f.threads > train.MaxThreads {
		return nil, cli.Usage(fmt.Errorf("-threads %d: must be 0 to %d", f.threads, train.MaxThreads))
	}
	opts := train.LoadOptions{Model: f.model, Batch: f.batch, Warn: func(m string) { fmt.Fprintf(warn, "hpctrain: warning: %s\n", m) }}
	if f.file != "" {
		return train.LoadTrained(f.file, opts)
	}
	return train.LatestTrained(f.dir, opts)
}

// compute gives t's network its compute threads, placed as train places
// its own by default (train.PlaceCPU): f.threads of them (0: the physical
// cores in the allowed mask / the local ranks sharing it; on a hybrid CPU
// its performance cores, where there is one per rank), pinned to the
// plan's cores, or unbound where the node's ranks outnumber its cpus. It
// is collective over c (mpi.NewSingle for one process): every rank gets
// the same verdict. Rank 0 says where the threads went on info and warns
// on warn. The calling goroutine leads the workers: it must compute on
// them and close them.
func (f *ckptFlags) compute(t *train.Trained, c mpi.Comm, info, warn io.Writer) (*affinity.Workers, error) {
	w, plan, err := train.PlaceCPU(c, f.threads)
	if err != nil {
		return nil, err
	}
	if c.Rank() == 0 {
		if plan.Warning != "" {
			fmt.Fprintf(warn, "hpctrain: warning: %s\n", plan.Warning)
		}
		fmt.Fprintf(info, "hpctrain: compute threads: %s\n", affinity.ReportLine(c.Host(), c.Rank(), plan))
	}
	t.Net.SetParallel(w)
	return w, nil
}

// otherRank reports whether this process is a rank other than 0 of a
// launch of several (mpirun -np N): predict, export, models, summary and
// plot run in one process, and N copies of their output, or N writers of
// one file, help nobody. Rank 0 does the work and says what the others do.
func otherRank(cmd string, stderr io.Writer) bool {
	// The launcher's variables, as train reads them without MPI (mpirun,
	// PMI, an srun step); ones that contradict each other leave this
	// process alone to do the work.
	l, err := slurm.Resolve(0, 0, os.Getenv)
	rank, size := l.Rank, l.Size
	if err != nil || size <= 1 {
		return false
	}
	if rank == 0 {
		fmt.Fprintf(stderr, "hpctrain: %s runs in one process: rank 0 of these %d does the work, the others nothing\n", cmd, size)
	}
	return rank != 0
}

// dataFlags binds the data keys (data.Config.Flags) for a command that
// starts from a run's data configuration and changes what is given.
type dataFlags struct {
	fs  *flag.FlagSet
	cfg data.Config
}

func bindData(fs *flag.FlagSet) *dataFlags {
	d := &dataFlags{fs: fs, cfg: data.Defaults()}
	before := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { before[f.Name] = true })
	d.cfg.Flags(fs)
	// A flag not given keeps the training run's value, not train's
	// default: the help says so instead of showing that default.
	fs.VisitAll(func(f *flag.Flag) {
		if !before[f.Name] {
			f.Usage += " (default: the training run's)"
			if other, ok := ownSet[f.Name]; ok {
				f.Usage = strings.TrimSuffix(f.Usage, ")") + "; with another -dataset, " + other + ")"
			}
			f.DefValue = zeroText(f.Value)
		}
	})
	return d
}

// ownSet are the data keys that another -dataset does not take from the
// training run (over), and what they are then.
var ownSet = map[string]string{"data-dir": "train's default for fashion-mnist, else none", "test-dir": "none", "val-split": "none", "image-shape": "the network's input"}

// zeroText is how a flag.Value of v's type prints its zero value, which
// the help leaves out as no default.
// (flag.PrintDefaults does the same; a String that cannot print a zero
// value counts as "").
func zeroText(v flag.Value) (s string) {
	defer func() {
		if recover() != nil {
			s = ""
		}
	}()
	if z, ok := reflect.New(reflect.TypeOf(v).Elem()).Interface().(flag.Value); ok {
		return z.String()
	}
	return ""
}

// over returns run with the data keys given on the command line. The
// run's normalisation is made explicit first, so that evaluating on
// another data set keeps the network's input as it was trained; another
// -dataset starts from none of the run's data_dir, test_dir and
// val_split, and a folder or synthetic set from samples of the run's
// shape (sample); a folder named by -data-dir alone (no -test-dir or
// -val-split) is evaluated whole.
func (d *dataFlags) over(run data.Config, sample data.Shape) data.Config {
	set := map[string]bool{}
	d.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	cfg := run
	if run.Mean == nil {
		cfg.Mean, cfg.Std = run.NormalisationValues(sample.C)
	}
	if set["dataset"] && d.cfg.Dataset != run.Dataset {
		cfg.DataDir, cfg.TestDir, cfg.ValSplit = "", "", 0
		if d.cfg.Dataset == "fashion-mnist" {
			cfg.DataDir = data.DefaultDataDir // train's default
		}
		cfg.ImageShape = ""
		if d.cfg.Dataset == "folder" || d.cfg.Dataset == "synthetic" {
			// Samples of the shape the network was trained on.
			cfg.ImageShape = fmt.Sprintf("%dx%dx%d", sample.H, sample.W, sample.C)
		}
		if d.cfg.Dataset != "folder" {
			cfg.Lazy = false
		}
	}
	v, src := reflect.ValueOf(&cfg).Elem(), reflect.ValueOf(d.cfg)
	for i := 0; i < v.NumField(); i++ {
		name := strings.ReplaceAll(v.Type().Field(i).Tag.Get("toml"), "_", "-")
		if set[name] {
			v.Field(i).Set(src.Field(i))
		}
	}
	if cfg.Dataset == "folder" && set["data-dir"] && !set["test-dir"] && !set["val-split"] {
		cfg.TestDir, cfg.ValSplit = cfg.DataDir, 0
	}
	return cfg
}
