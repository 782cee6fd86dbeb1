package train

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"hpctrain/checkpoint"
	"hpctrain/data"
	"hpctrain/internal/cli"
	"hpctrain/model"
	"hpctrain/mpi"
	"hpctrain/optim"
)

// Result is what a run reports at the end (and, per epoch, to -metrics).
type Result struct {
	Epoch            int     `json:"epoch"`
	Step             int     `json:"step"`
	WorldSize        int     `json:"world_size"`
	ThreadsPerRank   int     `json:"threads_per_rank"`
	TrainLoss        float64 `json:"train_loss"`
	TestLoss         float64 `json:"test_loss"`
	TestAccuracy     float64 `json:"test_accuracy"`
	SamplesPerSecond float64 `json:"samples_per_second"`
	TrainSeconds     float64 `json:"train_seconds"`
	// CommSeconds is the time the gradient all-reduces took on the MPI
	// thread; CommWaitSeconds the time the steps waited for them after
	// backward (what was not hidden behind backward). The wait includes
	// the hand-offs to and from the MPI thread, so with nothing to overlap
	// (one bucket, started after backward) it can pass CommSeconds.
	CommSeconds     float64 `json:"comm_seconds"`
	CommWaitSeconds float64 `json:"comm_wait_seconds"`
	// ResumedFrom is the step a resumed run continued from (its lines are
	// appended to the record of the run it continues).
	ResumedFrom int  `json:"resumed_from,omitempty"`
	Final       bool `json:"final,omitempty"`

	// Params are the final parameters (the same on every rank).
	Params []float32 `json:"-"`
	// StepLosses are this rank's losses of the steps run in this call.
	StepLosses []float64 `json:"-"`
}

// Run trains cfg.Model on rank c's shards and prints progress on rank 0 to
// out. It returns the final result (the same on every rank).
func Run(cfg Config, c mpi.Comm, out io.Writer) (Result, error) {
	return RunWith(cfg, c, out, os.Stderr)
}

// RunWith is Run with the stream for messages that must appear on every
// rank (the watchdog's).
func RunWith(cfg Config, c mpi.Comm, out, errOut io.Writer) (Result, error) {
	if cfg.Device != "cpu" {
		// A CUDA context is current on one OS thread: the run keeps its
		// goroutine there from opening the device to the end.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	r, err := start(cfg, c, out, errOut)
	if err != nil {
		return Result{}, err
	}
	defer r.close()
	if res, done := r.cp.complete(r.total); done {
		res.Params = r.net.Params
		return res, nil // nothing to train: the checkpoint's recorded result
	}
	if err := r.pastEnd(); err != nil {
		return Result{}, err
	}
	if err := r.reportStoppedEpoch(); err != nil {
		return r.res, err
	}
	for r.epoch = r.step/r.steps + 1; r.more(); r.epoch++ {
		if err := r.trainEpoch(); err != nil {
			return r.res, err
		}
		if err := r.endEpoch(); err != nil {
			return r.res, err
		}
		if err := r.saveReported(); err != nil {
			return r.res, err
		}
	}
	return r.finish()
}

// run is one training run on one rank: its parts, joined by start, and
// where it is.
type run struct {
	cfg     Config
	out     io.Writer // rank 0's report
	errOut  io.Writer // every rank's messages
	c       mpi.Comm  // every collective under the watchdog (guard)
	log     func(format string, a ...any)
	wd      *watchdog
	flt     faults
	pipe    *pipeline
	dev     *device       // nil: the CPU
	rep     model.Replica // the network on the rank's device
	net     *model.Net    // its host copy (rep itself on the CPU)
	opt     optim.Optimizer
	lr      float64
	sched   optim.Schedule
	pl      *placement
	st      *Step
	cp      *checkpointer
	metrics *os.File
	lossLog *bufio.Writer
	prog    *progress
	tl      *timeline
	closers []func()

	steps, total    int // steps per epoch (the sampler's, drop-last), in the run
	startStep, step int // where this call began, and the global step
	// epochLoss sums this rank's training losses of epochSteps steps of
	// the epoch (steps the loss scaler skipped left out, on every rank);
	// a run resumed within an epoch starts rank 0's sum and every rank's
	// count at the checkpoint's (checkpoint.State.EpochLoss, every rank's
	// losses), so the epoch's mean is the whole epoch's.
	epochLoss         float64
	epochSteps        int
	saveAfterReport   bool // a periodic checkpoint fell on the epoch's last step (checkpointOrStop)
	params            int  // the model's parameter count (fitModel)
	epoch             int
	res               Result
	trainTime         time.Duration
	commTime, waiting time.Duration
}

// start builds the run: every stage ends in an agreement, so a failure on
// any rank stops all ranks with a message instead of hanging the others in
// the next collective.
func start(cfg Config, comm mpi.Comm, out, errOut io.Writer) (r *run, err error) {
	r = &run{cfg: cfg, out: out, errOut: errOut}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	r.log = func(format string, a ...any) {
		if comm.Rank() == 0 {
			fmt.Fprintf(out, format+"\n", a...)
		}
	}
	r.wd = newWatchdog(cfg.CollectiveTimeout, cfg.StepTimeout, comm.Size(), fmt.Sprintf("rank %d on host %s", comm.Rank(), comm.Host()), errOut, comm.Abort)
	r.closers = append(r.closers, r.wd.close)
	c := guard(comm, r.wd)
	r.c = c
	r.flt, err = faultsFromEnv(c.Rank())
	r.enter(&phaseStartup)
	if err = agree(c, "reading "+FaultEnv, err); err != nil {
		return r, err
	}
	if err := agreeConfig(c, &cfg); err != nil {
		return r, err
	}
	// Placement first: a rank whose cores cannot be had fails before the
	// data is read.
	if err := r.placeAndPin(); err != nil {
		return r, err
	}
	// The data and its loaders; the model takes the loader's sample shape
	// (after transforms) and the data set's classes.
	// The load is timed file by file (an image folder image by image), as
	// a training step is (-step-timeout). The watchdog's phase alone: the
	// run is still in start-up, whose faults (stop@RANK:startup) fired
	// once, on its entry.
	r.wd.setPhase(&phaseLoading, r.step)
	r.pipe, err = loadData(cfg, c, func() {
		r.wd.batchBegins()
		r.flt.hangIn(&phaseLoading)
	})
	r.wd.setPhase(&phaseStartup, r.step)
	if r.pipe != nil {
		r.closers = append(r.closers, r.pipe.close)
	}
	if err = agree(c, "loading data", err); err != nil {
		return r, err
	}
	r.pipe.warn.flush(r.log, "skipped at load")
	// Each node reads its own copy of the data: copies that differ in
	// length or shape would hang the ranks in the epoch's collectives, or
	// overrun the parameter broadcast.
	if err := agreeText(c, "data", r.pipe.identity(), "give every node the same data set (-data-dir, -limit, -test-limit)"); err != nil {
		return r, err
	}
	n := r.pipe.train.Len()
	r.steps = n / (cfg.Batch * c.Size()) // the sampler's Steps: drop-last
	r.total = totalSteps(cfg, n, c.Size())
	if r.steps == 0 {
		err = fmt.Errorf("%d training samples do not fill one global batch of %d x %d ranks; lower -batch or raise -limit", n, cfg.Batch, c.Size())
	}
	if err = agree(c, "sizing the epoch", err); err != nil {
		return r, err
	}
	if err := r.build(); err != nil {
		return r, err
	}
	// Every replica starts from rank 0's parameters; a resumed run then
	// takes the checkpoint's, a fresh one -init's if given.
	r.enter(&phaseBroadcast)
	if err := c.Bcast(r.net.Params, 0); err != nil {
		return r, fmt.Errorf("broadcasting initial parameters: %w", err)
	}
	if err = agree(c, "copying the parameters to the device", r.rep.Push()); err != nil {
		return r, err
	}
	if err := r.syncBuffers(); err != nil {
		return r, err
	}
	r.enter(&phaseResume)
	r.cp, err = newCheckpointer(cfg, c, r.net, r.opt, r.log)
	if r.cp != nil {
		r.closers = append(r.closers, r.cp.close) // its lock, even if another rank failed
		r.cp.data, r.cp.classNames = r.pipe.identity(), r.pipe.classNames()
	}
	if err = agree(c, "preparing checkpoints", err); err != nil {
		return r, err
	}
	if r.startStep, err = r.cp.resume(); err != nil {
		return r, err
	}
	r.cp.roomAhead(r.startStep, r.total)
	if err := r.init(); err != nil {
		return r, err
	}
	if err = agree(c, "copying the checkpoint to the device", r.rep.Push()); err != nil {
		return r, err
	}
	r.step = r.startStep
	// Seeded at an epoch's end too: a run resumed at its last step then
	// reports the finished epoch's loss (the next epoch starts from 0).
	if l := r.cp.resumedLoss; l != nil {
		r.epochSteps = l.Steps
		if c.Rank() == 0 {
			r.epochLoss = l.Sum
		}
	}
	if err := r.openOutputs(); err != nil {
		return r, err
	}

	// Each rank's gradient is of its mean loss divided by the ranks, so
	// that the all-reduced sum is the gradient of the mean over the global
	// batch without another pass over the gradients.
	r.rep.SetGradScale(1 / float32(c.Size()))
	if err := r.newStep(); err != nil {
		return r, err
	}
	// fp16's loss scale goes on from the checkpoint's, as the
	// uninterrupted run's would (which steps it skips depends on it). The
	// plan is rank 0's: every rank restores the same, or none does. A
	// state this run's settings refuse (-loss-scale-interval lowered
	// below its count of clean steps) is not worth stopping a resume for.
	if r.st.scaler != nil && r.cp.resumedScaler != nil {
		if err := r.st.scaler.Restore(r.cp.resumedScaler); err != nil {
			r.log("hpctrain: warning: the checkpoint's fp16 loss scale does not fit this run's settings (%v): starting from -loss-scale %g", err, cfg.LossScale)
		} else {
			r.log("hpctrain: fp16 loss scale %g, from the checkpoint (-loss-scale sets a fresh run's)", r.st.scaler.Scale())
		}
	}
	r.cp.scaler = r.st.scaler
	r.prog = newProgress(out, c.Rank() == 0, cfg.Progress, r.total-r.startStep, cfg.Batch*c.Size())
	if cfg.Timeline != "" {
		r.tl = newTimeline(c.Rank(), cfg.Timeline, r.startStep, r.total, cfg.TimelineSteps)
	}
	r.log("hpctrain: model %s, %d parameters, %s x %s (%s), batch %d per rank (%d global), %s per epoch, %s lr %g (%s schedule)",
		cfg.Model, len(r.net.Params), plural(c.Size(), "rank"), plural(r.pl.plan.Threads, "thread"), describeDevice(r.dev, r.cfg.Precision, r.net), cfg.Batch, cfg.Batch*c.Size(), plural(r.steps, "step"), r.opt.Name(), r.lr, cfg.ScheduleConfig.Name)
	r.log("hpctrain: %s", r.pipe.desc)
	for _, n := range r.pipe.sets.Notes {
		r.log("hpctrain: warning: %s", n)
	}
	for _, w := range append(cfg.inert(), cfg.scheduleNotes(r.total)...) {
		r.log("hpctrain: warning: %s", w)
	}
	if cfg.Verbose && c.Rank() == 0 {
		if err := r.net.Summary().Write(out); err != nil {
			return r, err
		}
	}
	return r, nil
}

// init starts a fresh run from -init's checkpoint: rank 0 reads it and
// the broadcasts give it to every rank. A resumed run has its own
// checkpoint and leaves -init unread, so that a requeued fine-tuning job
// does not depend on where it started. Collective.
func (r *run) init() error {
	cfg, c := r.cfg, r.c
	if cfg.Init == "" {
		return nil
	}
	if r.cp.resumed {
		if c.Rank() == 0 {
			r.log("hpctrain: -init %s not read: the run goes on from its own checkpoint", cfg.Init)
		}
		return nil
	}
	var err error
	if c.Rank() == 0 {
		err = r.initFrom(cfg.Init)
	}
	if err = agree(c, "starting from -init "+cfg.Init, err); err != nil {
		return err
	}
	if err := c.Bcast(r.net.Params, 0); err != nil {
		return fmt.Errorf("broadcasting -init's parameters: %w", err)
	}
	if err = agree(c, "copying the parameters to the device", r.rep.Push()); err != nil {
		return err
	}
	return r.syncBuffers()
}

// initFrom copies the parameters and batch-norm statistics of the
// checkpoint at path (a file, or the newest in a directory) into this
// rank's network: another run's, whose network must be this one (layers,
// input, classes). The broadcast and syncBuffers then give them to every
// rank.
func (r *run) initFrom(path string) error {
	opts := LoadOptions{Batch: 1, Warn: func(m string) { r.log("hpctrain: warning: %s", m) }}
	var t *Trained
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return cli.Usage(fmt.Errorf("-init %s: %w", path, errors.Unwrap(err)))
	case st.IsDir():
		t, err = LatestTrained(path, opts)
	default:
		t, err = LoadTrained(path, opts)
	}
	if err != nil {
		return err
	}
	net := r.net
	switch d := t.Desc.Diff(net.Desc); {
	case d != "":
		return cli.Usage(fmt.Errorf("%s is of another network than this run's -model %s (checkpoint vs this run): %s", t.Path, r.cfg.Model, d))
	case t.Net.In != net.In || t.Net.Classes != net.Classes:
		return cli.Usage(fmt.Errorf("%s was trained on %v samples of %d classes, this run's data gives %v and %d", t.Path, t.Net.In, t.Net.Classes, net.In, net.Classes))
	case len(t.Net.Params) != len(net.Params) || len(t.Net.Buffers) != len(net.Buffers):
		return fmt.Errorf("%s: %d parameters and %d buffer values, the network has %d and %d", t.Path, len(t.Net.Params), len(t.Net.Buffers), len(net.Params), len(net.Buffers))
	}
	copy(net.Params, t.Net.Params)
	copy(net.Buffers, t.Net.Buffers)
	r.log("hpctrain: starting from %s (model %s, step %d, trained on %s): its parameters and batch-norm statistics, at step 0 with this run's settings", t.Path, t.State.Model, t.State.Step, t.Config.Dataset)
	return nil
}

// syncBuffers gives every rank rank 0's non-parameter state (batch-norm
// running statistics). Without sync_bn each rank's statistics follow its
// own batches, as under DistributedDataParallel, whose default
// (broadcast_buffers) likewise makes rank 0's the ones that count; they are
// made equal at start, before each evaluation and before each checkpoint,
// so every rank evaluates alike and a resumed run continues exactly.
func (r *run) syncBuffers() error {
	if len(r.net.Buffers) == 0 || r.c.Size() == 1 {
		return nil
	}
	if err := agree(r.c, "copying the model from the device", r.rep.Pull()); err != nil {
		return err
	}
	if err := r.c.Bcast(r.net.Buffers, 0); err != nil {
		return fmt.Errorf("broadcasting batch-norm statistics: %w", err)
	}
	return agree(r.c, "copying the model to the device", r.rep.Push())
}

// newStep makes the step on the rank's device: its gradient reducer, and
// fp16's loss scaler.
func (r *run) newStep() error {
	cfg, c := r.cfg, r.c
	r.st = &Step{rep: r.rep, opt: r.opt, sched: r.sched, flt: r.flt,
		labels: make([]int32, r.rep.Batch()), inv: 1 / float32(c.Size()),
		first: c.Rank() * cfg.Batch} // this rank's first sample in the global batch: dropout's masks
	var err error
	r.st.red, r.st.bk, err = newReducer(r.dev, r.rep, c, bucketBytes(cfg.BucketMB, r.pl.plan.Threads), r.wd, &r.st.step)
	if err == nil && cfg.Precision == "fp16" {
		r.st.scaler, err = optim.NewLossScaler(optim.ScalerConfig{Init: cfg.LossScale, Interval: cfg.LossScaleInterval})
	}
	r.st.hookWeights()
	return agree(c, "setting up the gradient all-reduce", err)
}

// build makes the model, the optimizer and the learning-rate schedule.
func (r *run) build() error {
	c := r.c
	in, classes := model.Shape(r.pipe.trainLoad.Shape()), r.pipe.train.Classes()
	err := r.fitModel(in, classes)
	if err = agree(c, "building the model", err); err != nil {
		return err
	}
	if r.dev, err = r.openDevice(); err != nil {
		return err
	}
	cfg := r.cfg // precision auto is now what the ranks resolved it to
	r.closers = append(r.closers, r.dev.close)
	if r.dev != nil {
		// The device the rank computes on, then the GPU placement chose
		// (when NVML or sysfs found one).
		r.pl.plan.Device = strings.TrimSuffix(r.dev.label()+", "+r.pl.plan.Device, ", ")
	} else {
		r.pl.plan.Device = "cpu"
	}
	r.wd.setDescribe(fmt.Sprintf("rank %d on host %s (%s)", c.Rank(), c.Host(), r.pl.plan))
	if r.cfg.ReportBindings {
		if err := r.pl.report(c, r.out); err != nil {
			return err
		}
	}
	grads, err := r.nodeGrads()
	if err = agree(c, "sharing memory for the gradients on the node", err); err != nil {
		return err
	}
	r.rep, err = buildReplica(r.dev, cfg, in, classes, grads)
	if err = agree(c, "building the model", err); err != nil {
		return err
	}
	r.net = r.rep.Host()
	// With -model FILE.toml every node reads its own copy of the file.
	if err := agreeHash(c, "model description", r.net.Desc.Hash(), "give every node the same -model file"); err != nil {
		return err
	}
	if cfg.SyncBN {
		r.rep.SetSyncBN(c)
	}
	r.rep.SetLabelSmoothing(cfg.LabelSmoothing)
	r.opt, err = newOptimizer(r.dev, r.rep, cfg.Config)
	if err = agree(c, "creating the optimizer", err); err != nil {
		return err
	}
	// The learning rate: scaled with the global batch if asked (Goyal et
	// al. 2017), then scheduled per step.
	r.lr, err = optim.ScaleLR(cfg.Config.WithDefaults().LR, cfg.Batch*c.Size(), cfg.BaseBatch, cfg.LRScaling)
	if err == nil {
		r.sched, err = optim.NewSchedule(cfg.ScheduleConfig, r.lr, r.total)
	}
	if err = agree(c, "setting up the learning-rate schedule", err); err != nil {
		return err
	}
	r.net.SetParallel(r.pl.workers) // the host network computes on the CPU only
	r.opt.SetParallel(r.pl.workers)
	return nil
}

// nodeGrads is the memory for the gradients of a CPU replica: a buffer
// the ranks of the node share (mpi.Comm.NodeBuffer), which the all-reduce
// sums in place, unless -collective mpi asks for MPI_Allreduce alone; nil
// where nothing is shared (one rank per node), and the model allocates.
func (r *run) nodeGrads() ([]float32, error) {
	if r.dev != nil || r.cfg.Collective == "mpi" || r.c.Size() == 1 {
		return nil, nil
	}
	g, err := r.c.NodeBuffer(r.params)
	if err == nil && g != nil {
		r.log("hpctrain: gradients are summed in memory the %d ranks of each node share, and with MPI between nodes (-collective mpi: MPI alone)", r.c.LocalSize())
	}
	return g, err
}

// fitModel checks, before the model allocates anything, that its
// activations for a batch, its parameters, gradients and optimizer state
// fit in what the data left of this rank's memory: a batch or a network
// too large is one line, not a Go out-of-memory crash.
func (r *run) fitModel(in model.Shape, classes int) error {
	d, err := model.LoadDesc(r.cfg.Model)
	if err != nil {
		return err
	}
	// A description that does not fit the data's shape is the user's to
	// mend, as one that does not parse is.
	s, err := model.Summarize(d, in, classes)
	if err != nil {
		return cli.Usage(err)
	}
	r.params = s.Params
	if err := oneValueBN(s, r.cfg.Batch, r.c.Size(), r.cfg.SyncBN); err != nil {
		return cli.Usage(fmt.Errorf("model %s: %w", r.cfg.Model, err))
	}
	if err := r.pipe.budget.Take(fmt.Sprintf("model %s with batches of %d samples", r.cfg.Model, r.cfg.Batch), NetBytes(s, r.cfg.Batch, r.pl.plan.Threads), NetHint(s, r.cfg.Batch)); err != nil {
		return cli.Usage(err)
	}
	return nil
}

// oneValueBN refuses a batch-norm layer that trains on one value per
// channel: its statistics come from batch samples (x ranks with sync),
// each of its output's H x W per channel. Normalised, the one value is 0
// whatever it was, so the layer passes its shift alone and nothing before
// it learns (PyTorch refuses this too: "Expected more than 1 value per
// channel when training").
func oneValueBN(s model.Summary, batch, ranks int, sync bool) error {
	n := batch
	if sync {
		n *= ranks
	}
	for _, row := range s.Rows {
		if row.Kind != "batchnorm" {
			continue
		}
		out, err := model.ParseShape(row.Output)
		if err != nil || n*out.H*out.W > 1 {
			continue
		}
		hint := "raise -batch"
		if !sync && ranks > 1 {
			hint += ", or set sync_bn (-sync-bn) to take the statistics over the ranks' batches together"
		}
		return fmt.Errorf("layer %s (batchnorm) would train on 1 value per channel (batch %d, output %s per sample): normalised, each is 0, and the layers before it would learn nothing; %s", row.Name, batch, row.Output, hint)
	}
	return nil
}

// NetBytes estimates the memory of a network of summary s training with
// batches of batch samples on workers compute workers: per sample every
// layer's output and its gradient, and the input; the parameters four
// times (values, gradients, two optimizer buffers); and the layers'
// scratch (Summary.ScratchBytes: a wide convolution's weight-gradient
// partials, im2col blocks, ...). math.MaxInt64 stands for more than can
// be counted.
func NetBytes(s model.Summary, batch, workers int) int64 {
	perSample := int64(2*s.OutputBytes + s.InputBytes)
	if perSample > 0 && int64(batch) > math.MaxInt64/4/perSample {
		return math.MaxInt64
	}
	return int64(batch)*perSample + 4*int64(s.ParamBytes) + s.ScratchBytes(batch, workers)
}

// NetHint is what to change when NetBytes does not fit: -batch where the
// batch's activations are most of it, the model where its parameters,
// gradients and optimizer state are, which no -batch makes fit.
func NetHint(s model.Summary, batch int) string {
	params := 4 * int64(s.ParamBytes)
	perSample := int64(2*s.OutputBytes + s.InputBytes)
	if params >= int64(batch)*perSample {
		return fmt.Sprintf("its parameters, gradients and optimizer state alone take %s: a smaller model", data.GiB(params))
	}
	return fmt.Sprintf("lower -batch (activations %s per sample)", data.GiB(perSample))
}

// placeAndPin pins this rank's compute workers to its own cores; the model
// and the optimizer split their work over them (build).
func (r *run) placeAndPin() error {
	pl, err := place(r.cfg, r.c, r.log)
	if err != nil {
		return err
	}
	r.pl = pl
	r.closers = append(r.closers, pl.close)
	r.wd.setDescribe(fmt.Sprintf("rank %d on host %s (%s)", r.c.Rank(), r.c.Host(), pl.plan))
	if r.cfg.DataWorkers > 0 {
		// Loader goroutines get Ps of their own beside the compute
		// workers' (package data, Procs); their threads are confined to
		// this rank's cores like every unpinned thread.
		runtime.GOMAXPROCS(data.Procs(pl.plan.Threads, r.cfg.DataWorkers))
	}
	return nil
}

// outputErr is the error of an output file that would not open: a path
// the user must mend (a missing directory, no permission, a directory
// where the file should be) is a usage error; anything else (a full
// disk) is not.
func outputErr(what string, err error) error {
	err = fmt.Errorf("%s: %w", what, err)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ENOTDIR) {
		return cli.Usage(err)
	}
	return err
}

// openOutputs opens -metrics on rank 0 (a fresh run starts the file, a
// resumed one appends to the record of the run it continues) and makes
// sure every rank can write its -timeline, so that a bad path fails now
// rather than after the training.
func (r *run) openOutputs() error {
	var err error
	// A resumed run appends to the files, after the lines of the steps
	// up to its checkpoint: those of later steps (the run that wrote them
	// went on past its last checkpoint) and a line cut short (it stopped
	// mid-write) are dropped, as this run writes them again. An epoch the
	// checkpoint left unreported is reported again, so its line goes too.
	metricsUpTo := r.startStep
	if l := r.cp.resumedLoss; l != nil && l.Unreported {
		metricsUpTo--
	}
	if r.c.Rank() == 0 && r.cfg.Metrics != "" {
		flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
		if r.startStep > 0 {
			flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
			err = r.trimResumed("metrics file", r.cfg.Metrics, metricsUpTo, metricsStep)
		}
		if err == nil {
			r.metrics, err = os.OpenFile(r.cfg.Metrics, flags, 0o644)
		}
		if err == nil {
			r.closers = append(r.closers, func() { r.metrics.Close() })
		} else {
			err = outputErr("metrics file", err)
		}
	}
	if err = agree(r.c, "opening the metrics file", err); err != nil {
		return err
	}
	if r.c.Rank() == 0 && r.cfg.LossLog != "" {
		flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
		if r.startStep > 0 {
			flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
			err = r.trimResumed("loss log", r.cfg.LossLog, r.startStep, lossLogStep)
		}
		var f *os.File
		if err == nil {
			f, err = os.OpenFile(r.cfg.LossLog, flags, 0o644)
		}
		if err == nil {
			r.lossLog = bufio.NewWriter(f)
			r.closers = append(r.closers, func() { r.lossLog.Flush(); f.Close() })
		} else {
			err = outputErr("loss log", err)
		}
	}
	if err = agree(r.c, "opening the loss log", err); err != nil {
		return err
	}
	if r.cfg.Timeline != "" {
		var f *os.File
		if fi, serr := os.Stat(r.cfg.Timeline); serr == nil && fi.IsDir() {
			// Each rank writes NAME.rankN.EXT beside it: from a directory
			// /tmp that was /tmp.rank0.
			err = cli.Usage(fmt.Errorf("timeline file %s: a directory; give a file name in it, e.g. -timeline %s (rank %d writes %s)",
				r.cfg.Timeline, filepath.Join(r.cfg.Timeline, "timeline.json"), r.c.Rank(), rankPath(filepath.Join(r.cfg.Timeline, "timeline.json"), r.c.Rank())))
		} else if f, err = os.Create(rankPath(r.cfg.Timeline, r.c.Rank())); err == nil {
			f.Close()
		} else {
			err = outputErr("timeline file", err)
		}
	}
	return agree(r.c, "opening the timeline file", err)
}

// trimResumed cuts the file at path (what names it in the log) back to
// its lines of steps up to last, as step reads a line's step: it ends the
// file before the first line of a later step, or before a last line
// without its newline. A file not there is left so. It says on rank 0's
// log how many lines it dropped.
func (r *run) trimResumed(what, path string, last int, step func([]byte) (int, bool)) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	off := 0
	for off < len(b) {
		nl := bytes.IndexByte(b[off:], '\n')
		if nl < 0 {
			break // cut short
		}
		if n, ok := step(b[off : off+nl]); ok && n > last {
			break
		}
		off += nl + 1
	}
	if off == len(b) {
		return nil
	}
	lines := bytes.Count(b[off:], []byte{'\n'})
	if b[len(b)-1] != '\n' {
		lines++
	}
	if err := os.Truncate(path, int64(off)); err != nil {
		return err
	}
	r.log("hpctrain: %s %s: dropped %s after step %d, the checkpoint this run resumes from (written past it, or cut short, by the run that stopped): this run writes them again", what, path, plural(lines, "line"), last)
	return nil
}

// metricsStep is the step of a -metrics line.
func metricsStep(line []byte) (int, bool) {
	var m struct {
		Step *int `json:"step"`
	}
	if json.Unmarshal(line, &m) != nil || m.Step == nil {
		return 0, false
	}
	return *m.Step, true
}

// lossLogStep is the step of a -loss-log line ("step loss").
func lossLogStep(line []byte) (int, bool) {
	f := bytes.Fields(line)
	if len(f) == 0 {
		return 0, false
	}
	n, err := strconv.Atoi(string(f[0]))
	return n, err == nil
}

// enter records the phase for the watchdog, and stops here if a fault says so.
func (r *run) enter(phase *string) {
	r.wd.setPhase(phase, r.step)
	r.flt.enter(phase)
}

// more reports whether the run has epochs and steps left.
func (r *run) more() bool {
	return r.epoch <= r.cfg.Epochs && !(r.cfg.Steps > 0 && r.step >= r.cfg.Steps)
}

// trainEpoch runs the epoch's steps from wherever the run is in it.
func (r *run) trainEpoch() error {
	// The epoch's batches depend only on (seed, epoch, step), so a resumed
	// run starts the loader at the checkpoint's step and sees what the
	// uninterrupted run saw.
	ld := r.pipe.trainLoad
	ld.StartAt(r.epoch, r.step%r.steps)
	start := time.Now()
	if r.step%r.steps == 0 {
		r.epochLoss, r.epochSteps = 0, 0
	}
	for s := r.step % r.steps; s < r.steps && !(r.cfg.Steps > 0 && r.step >= r.cfg.Steps); s++ {
		r.enter(&phaseTraining)
		t0 := time.Now()
		b, ok := ld.Next()
		if !ok {
			panic("train: loader ended before the epoch's last step") // Steps() said otherwise
		}
		r.st.Load(b.X, b.Y)
		r.pipe.took(b)
		ld.Release(b) // the buffer goes back to the workers at once
		loss, err := r.st.Run(r.step)
		if err != nil {
			return fmt.Errorf("epoch %d step %d: %w", r.epoch, s+1, err)
		}
		if r.cfg.CheckEvery > 0 && (r.step+1)%r.cfg.CheckEvery == 0 {
			r.enter(&phaseChecksum)
			if err := agree(r.c, "copying the parameters from the device", r.rep.Pull()); err != nil {
				return err
			}
			if err := checkParams(r.c, r.net.Params, r.step+1); err != nil {
				return err
			}
		}
		r.account(t0)
		if !r.st.Skipped {
			// A skipped step's loss may be the overflow that skipped it.
			r.epochLoss += loss
			r.epochSteps++
		}
		r.res.StepLosses = append(r.res.StepLosses, loss)
		if r.lossLog != nil {
			fmt.Fprintf(r.lossLog, "%d %.9g\n", r.step+1, loss)
		}
		if r.st.Skipped {
			r.log("hpctrain: step %d: fp16 gradients overflowed; step skipped on every rank, loss scale now %g", r.step+1, r.st.scaler.Scale())
		}
		r.step++
		r.flt.signal(r.step)
		r.prog.update(r.epoch, s+1, r.steps, r.step-r.startStep, loss)
		if err := r.checkpointOrStop(); err != nil {
			r.trainTime += time.Since(start)
			return err
		}
	}
	r.trainTime += time.Since(start)
	return r.epochMean()
}

// pastEnd refuses a resumed checkpoint that is past this run's last step
// (-epochs or -steps lowered since it was written, or a file made by
// hand) and holds no final result: going on would report an epoch beyond
// the last one and write the checkpoint again as the run's end. Every
// rank has the same steps from the resume plan, so every rank refuses.
func (r *run) pastEnd() error {
	if r.startStep <= r.total {
		return nil
	}
	end := fmt.Sprintf("-epochs %d of %d steps", r.cfg.Epochs, r.steps)
	if r.cfg.Steps > 0 && r.cfg.Steps < r.cfg.Epochs*r.steps {
		end = fmt.Sprintf("-steps %d", r.cfg.Steps)
	}
	return cli.Usage(fmt.Errorf("the checkpoint is at step %d (in epoch %d), past this run's last step %d (%s): nothing to train; raise -epochs or -steps to go on from it, or start a new run from its weights with -init",
		r.startStep, (r.startStep-1)/r.steps+1, r.total, end))
}

// reportStoppedEpoch evaluates and reports the epoch a stopped run ended
// without reporting (its checkpoint, at the epoch's last step, says so),
// before this run trains the next; a run with nothing left to train
// reports it in finish.
func (r *run) reportStoppedEpoch() error {
	if l := r.cp.resumedLoss; l == nil || !l.Unreported || r.step%r.steps != 0 || r.step >= r.total {
		return nil
	}
	r.epoch = r.step / r.steps
	if err := r.epochMean(); err != nil {
		return err
	}
	return r.endEpoch()
}

// epochMean sets the result's training loss: the mean over the epoch's
// counted steps and all ranks. Collective.
func (r *run) epochMean() error {
	l, err := r.epochSum()
	if err != nil {
		return err
	}
	r.res.TrainLoss = 0 // no step counted: every one skipped by the loss scaler
	if l.Steps > 0 {
		r.res.TrainLoss = l.Sum / float64(l.Steps*r.c.Size())
	}
	return nil
}

// epochSum is the epoch's training losses so far, summed over the ranks,
// with the count of steps they cover: what its mean and a checkpoint
// need. Collective.
func (r *run) epochSum() (*checkpoint.EpochLoss, error) {
	r.enter(&phaseEpochLoss)
	tl := []float64{r.epochLoss}
	if err := r.c.AllreduceSum64(tl); err != nil {
		return nil, err
	}
	return &checkpoint.EpochLoss{Sum: tl[0], Steps: r.epochSteps}, nil
}

// account adds the last step's communication figures and, when the
// timeline records this step, its spans; t0 is when it asked for its batch.
func (r *run) account(t0 time.Time) {
	m := &r.st.Marks
	r.commTime += r.st.Comm
	r.waiting += m.Reduced.Sub(m.Backward)
	if !r.tl.on(r.step) {
		return
	}
	r.tl.span(r.step, "wait for batch", laneCompute, t0, m.Start)
	r.tl.span(r.step, "forward+loss", laneCompute, m.Start, m.Forward)
	r.tl.span(r.step, "backward", laneCompute, m.Forward, m.Backward)
	r.tl.span(r.step, "wait for all-reduce", laneCompute, m.Backward, m.Reduced)
	r.tl.span(r.step, "optimizer step", laneCompute, m.Reduced, m.Updated)
	for i := 0; i < r.st.Buckets(); i++ {
		a, b, bytes := r.st.Bucket(i)
		r.tl.span(r.step, fmt.Sprintf("all-reduce bucket %d (%.2f MB)", i, float64(bytes)/(1<<20)), laneMPI, a, b)
	}
}

// checkpointOrStop writes periodic checkpoints (when rank 0 says one is
// due), and on a signal on any rank checkpoints and returns ErrPreempted
// (ErrInterrupted for SIGINT or SIGHUP alone); all agreed by all ranks at
// this step boundary.
func (r *run) checkpointOrStop() error {
	r.enter(&phaseSignals)
	stop, interrupted, save, err := r.cp.agreeStep(r.step)
	if err != nil {
		return err
	}
	switch {
	case save && !stop && (r.step%r.steps == 0 || r.step >= r.total):
		// The epoch (or the run) ends here: saved once it is reported
		// (saveReported), so that a job that dies while evaluating resumes
		// from the checkpoint before and reports the epoch. Saved here, it
		// said the epoch was reported and the report was lost.
		r.saveAfterReport = true
	case save:
		// Stopping at an epoch's last step leaves the epoch unevaluated
		// (evaluating now would spend the signal's grace): the resumed run
		// reports it first.
		if err := r.savePeriodic(stop && r.step%r.steps == 0); err != nil {
			return err
		}
	}
	switch {
	case interrupted:
		r.log("hpctrain: interrupted (SIGINT or SIGHUP): checkpointed step %d; exiting with code %d (-resume auto goes on from here)", r.step, ExitInterrupted)
		return ErrInterrupted
	case stop:
		r.log("hpctrain: signal received: checkpointed step %d; exiting with code %d for requeue", r.step, ExitRequeue)
		return ErrPreempted
	}
	return nil
}

// saveReported writes the periodic checkpoint due at the epoch's last
// step, now that the epoch is reported; at the run's last step the final
// checkpoint (finish) is that checkpoint. Collective.
func (r *run) saveReported() error {
	if !r.saveAfterReport {
		return nil
	}
	r.saveAfterReport = false
	if r.step >= r.total {
		return nil
	}
	return r.savePeriodic(false)
}

// savePeriodic writes the loss log's lines so far, then the checkpoint
// (saveHere): a run resumed from it after a crash finds every line up to
// its step (they waited in the buffer, and were lost). A loss log that
// cannot be written stops the run as at an epoch's end, checkpointed
// (keepWork). Collective.
func (r *run) savePeriodic(unreported bool) error {
	if err := agree(r.c, "writing the loss log", r.flushLossLog()); err != nil {
		return r.keepWork(err)
	}
	return r.saveHere(unreported)
}

// saveHere writes a checkpoint at this step, with the epoch's losses so
// far; unreported marks an epoch that ended without its report, which a
// run resumed from it makes first. Collective.
func (r *run) saveHere(unreported bool) error {
	r.enter(&phaseCheckpoint)
	// A model trained on images a lazy folder read as zeros is not
	// saved: under bad_input = "stop" every rank stops here instead,
	// as at the end of the epoch, and the newest checkpoint stays the
	// last good one. What counts is the batches trained on, not those
	// the loader read ahead, so where a run stops does not depend on
	// -data-workers or -prefetch.
	r.pipe.warn.flush(r.everyRank, "read as zeros since the last report (lazy decoding)")
	if err := agree(r.c, "reading images", r.pipe.trainedErr(r.cfg)); err != nil {
		return err
	}
	if err := r.syncBuffers(); err != nil {
		return err
	}
	if err := agree(r.c, "copying the model from the device", pull(r.rep, r.opt)); err != nil {
		return err
	}
	// The checkpoint records the epoch's losses so far, summed over
	// the ranks, for a run resumed from it.
	var err error
	if r.cp.epochLoss, err = r.epochSum(); err != nil {
		return err
	}
	r.cp.epochLoss.Unreported = unreported
	err = agree(r.c, "writing a checkpoint", r.cp.save(r.step, r.epoch))
	r.cp.epochLoss = nil
	if err != nil {
		return err
	}
	return nil
}

// endEpoch evaluates on the test set and reports the epoch.
func (r *run) endEpoch() error {
	r.enter(&phaseEvaluation)
	if err := r.syncBuffers(); err != nil {
		return err
	}
	// Each batch is timed as a training step is (-step-timeout).
	batch := func() {
		r.wd.batchBegins()
		r.flt.hangIn(&phaseEvaluation)
	}
	testLoss, acc, err := evaluate(r.c, r.rep, r.pipe.testLoad, r.pipe.test.Len(), batch)
	if err != nil {
		return err
	}
	// Images a lazy folder failed to decode were read as zeros; under
	// bad_input = "stop" every rank stops here, together.
	r.pipe.warn.flush(r.everyRank, "read as zeros in this epoch (lazy decoding)")
	if err := agree(r.c, "reading images", r.pipe.lazyErr(r.cfg)); err != nil {
		return err
	}
	c := r.c
	r.res = Result{
		StepLosses: r.res.StepLosses, TrainLoss: r.res.TrainLoss,
		Epoch: r.epoch, Step: r.step, WorldSize: c.Size(), ThreadsPerRank: r.pl.plan.Threads,
		TestLoss: testLoss, TestAccuracy: acc,
		SamplesPerSecond: float64((r.step-r.startStep)*r.cfg.Batch*c.Size()) / max(r.trainTime.Seconds(), 1e-9),
		TrainSeconds:     r.trainTime.Seconds(),
		CommSeconds:      r.commTime.Seconds(), CommWaitSeconds: r.waiting.Seconds(),
		ResumedFrom: r.startStep,
	}
	r.log("epoch %d/%d: train loss %.4f, test loss %.4f, test accuracy %.2f%%, %.0f samples/s, %.1f s",
		r.epoch, r.cfg.Epochs, r.res.TrainLoss, r.res.TestLoss, 100*r.res.TestAccuracy, r.res.SamplesPerSecond, r.res.TrainSeconds)
	if err := r.writeOutputs(r.res); err != nil {
		return r.keepWork(err)
	}
	return nil
}

// keepWork checkpoints a run that stops at an epoch's end on err, a
// report it could not write (the metrics or the loss log on a full disk),
// and returns err: a run checkpointing every hour lost up to an hour of
// training to a metrics line. The checkpoint marks the epoch unreported,
// so the run resumed from it reports the epoch, and writes the line,
// first. err is agreed by every rank, so every rank saves. Collective.
func (r *run) keepWork(err error) error {
	if r.cfg.CheckpointDir == "" {
		return err
	}
	if serr := r.saveHere(r.step%r.steps == 0); serr != nil {
		// One line, as every other error (errors.Join makes two).
		return fmt.Errorf("%w; and the checkpoint before stopping failed: %w", err, serr)
	}
	r.log("hpctrain: checkpointed step %d before stopping: resume with -resume auto once the report can be written", r.step)
	return err
}

// writeOutputs writes res to the metrics file and flushes the loss log,
// both rank 0's, and makes every rank return rank 0's failure: a rank 0
// that stopped alone on a full disk left the others waiting in the next
// collective. Collective.
func (r *run) writeOutputs(res Result) error {
	err := writeMetrics(r.metrics, res)
	if err == nil {
		err = r.flushLossLog()
	}
	return agree(r.c, "writing the metrics and the loss log", err)
}

// flushLossLog writes out the -loss-log lines buffered so far: a write
// that fails (a full disk) is an error, as the metrics' is.
func (r *run) flushLossLog() error {
	if r.lossLog == nil {
		return nil
	}
	if err := r.lossLog.Flush(); err != nil {
		return fmt.Errorf("writing the loss log: %w", err)
	}
	return nil
}

// finish writes the final checkpoint, metrics line and summary.
func (r *run) finish() (Result, error) {
	if r.res.Epoch == 0 {
		// No epoch ended in this call (resumed from a checkpoint taken at
		// the run's last step): evaluate now, so the result is real, with
		// the training loss the checkpoint recorded for the epoch.
		r.epoch = max(r.step-1, 0)/r.steps + 1
		if err := r.epochMean(); err != nil {
			return r.res, err
		}
		if err := r.endEpoch(); err != nil {
			return r.res, err
		}
	}
	r.enter(&phaseCheckpoint)
	if err := r.syncBuffers(); err != nil {
		return r.res, err
	}
	if err := agree(r.c, "copying the model from the device", pull(r.rep, r.opt)); err != nil {
		return r.res, err
	}
	// The epoch's losses so far (all of it at an epoch's end), for a run
	// that raises -steps and resumes within the epoch.
	var err error
	if r.cp.epochLoss, err = r.epochSum(); err != nil {
		return r.res, err
	}
	err = agree(r.c, "writing the final checkpoint", r.cp.saveFinal(r.step, r.res))
	r.cp.epochLoss = nil
	if err != nil {
		return r.res, err
	}
	r.enter(&phaseFinish)
	res := r.res
	res.Final = true
	res.Params = r.net.Params
	if err := r.writeOutputs(res); err != nil {
		return res, err
	}
	r.log("final: test accuracy %.2f%% after %s (%s, %s), %.0f samples/s",
		100*res.TestAccuracy, plural(res.Epoch, "epoch"), plural(res.Step, "step"), plural(res.WorldSize, "rank"), res.SamplesPerSecond)
	if done := r.step - r.startStep; r.c.Size() > 1 && done > 0 {
		r.log("%s", r.commLine(res, done))
	}
	return res, r.tl.write()
}

// commLine says what the gradient all-reduce cost the run's done steps.
// NCCL's runs on a stream of the device, not on the MPI thread, and the
// host sees only how long it waited after queueing backward: for
// backward's kernels and the sums both.
func (r *run) commLine(res Result, done int) string {
	buckets := plural(r.st.red.Buckets(), "bucket")
	if r.dev.ncclReduces() {
		return fmt.Sprintf("communication: NCCL all-reduce on the device's own stream, %s; the host waited %.1f ms per step after queueing backward",
			buckets, 1e3*res.CommWaitSeconds/float64(done))
	}
	return fmt.Sprintf("communication: all-reduce %.1f ms per step on the MPI thread; %s; %s",
		1e3*res.CommSeconds/float64(done), waited(res.CommSeconds, res.CommWaitSeconds, done), buckets)
}

// waited says how long the steps waited for the all-reduce after backward,
// of comm seconds it took on the MPI thread, over steps. The wait also
// counts the hand-offs to and from that thread, so where nothing overlaps
// it is longer than the all-reduce: said as such, not as a share above
// 100%.
func waited(comm, wait float64, steps int) string {
	per := func(s float64) float64 { return 1e3 * s / float64(steps) }
	if wait <= comm {
		return fmt.Sprintf("the step waited %.1f ms for it after backward (%.0f%% of it)", per(wait), 100*wait/max(comm, 1e-9))
	}
	return fmt.Sprintf("the step waited %.1f ms for it after backward (all of it, and %.1f ms of hand-offs to and from the MPI thread)", per(wait), per(wait-comm))
}

// close releases what start acquired, last first.
func (r *run) close() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
	r.closers = nil
}

// totalSteps is the number of steps the run will take.
func totalSteps(cfg Config, n, ranks int) int {
	t := cfg.Epochs * (n / (cfg.Batch * ranks))
	if cfg.Steps > 0 {
		t = min(t, cfg.Steps)
	}
	return max(t, 1)
}

// bucketBytes resolves -bucket-mb. Auto (-1) overlaps the all-reduce with
// backward only when the rank has a second core: Open MPI's shared-memory
// all-reduce busy-polls while it waits for the peer, and on a rank with one
// core that polling takes the core from backward. Measured on 2 cores,
// 2 ranks x 1 thread, CNN: 2292 samples/s with one all-reduce after
// backward, 1906 with 1 MB buckets overlapped (the step waited only 23% of
// the all-reduce time, but the all-reduce took 13.4 ms instead of 3.5).
func bucketBytes(mb float64, threads int) int {
	if mb < 0 {
		if threads >= 2 {
			return 1 << 20
		}
		return 0
	}
	return int(mb * (1 << 20))
}

// layerStarts lists where each layer's parameters begin in the flat
// buffer: the edges at which backward hands over finished gradients.
func layerStarts(net *model.Net) []int {
	var starts []int
	for _, g := range net.Groups() {
		if !g.Bias {
			starts = append(starts, g.Off)
		}
	}
	return starts
}

// checkParams compares a checksum of every rank's parameters with rank 0's:
// replicas that silently drift apart train garbage, which is worse than
// stopping.
func checkParams(c mpi.Comm, params []float32, step int) error {
	h := fnv.New64a()
	h.Write(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(params))), 4*len(params)))
	sum := h.Sum(nil)
	all := make([]byte, len(sum)*c.Size())
	if err := c.Allgather(sum, all); err != nil {
		return fmt.Errorf("step %d: comparing parameter checksums: %w", step, err)
	}
	var bad []string
	for r := 1; r < c.Size(); r++ {
		if string(all[r*8:(r+1)*8]) != string(all[:8]) {
			bad = append(bad, fmt.Sprint(r))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("step %d: parameters of rank %s differ from rank 0's: the replicas diverged; stopping", step, strings.Join(bad, ", "))
	}
	return nil
}

// Groups maps the model's parameter tensors to the optimizer's groups.
func Groups(net *model.Net) []optim.Group {
	var gs []optim.Group
	for _, g := range net.Groups() {
		gs = append(gs, optim.Group{Name: g.Name, Off: g.Off, Len: g.Len, NoDecay: g.Bias || g.Norm})
	}
	return gs
}

// evaluate computes the mean loss and accuracy over the whole test set of
// n samples: each rank takes a contiguous shard, read through the
// evaluation loader (no augmentation), and the sums are reduced. The net
// runs in evaluation mode (batch norm's running statistics, no dropout)
// and the loss is plain cross-entropy, without label smoothing. each is
// called as every batch begins.
func evaluate(c mpi.Comm, net model.Replica, ld *data.Loader, n int, each func()) (loss, acc float64, err error) {
	net.SetTraining(false)
	smoothing := net.LabelSmoothing()
	net.SetLabelSmoothing(0)
	defer func() {
		net.SetTraining(true)
		net.SetLabelSmoothing(smoothing)
	}()
	e, err := evaluateEach(c, net, ld, n, each)
	if err != nil {
		return math.NaN(), 0, err
	}
	return e.Loss, e.Accuracy, nil
}

func writeMetrics(f *os.File, r Result) error {
	if f == nil {
		return nil
	}
	b, err := json.Marshal(r) // fails on a NaN: no empty line written for it
	if err != nil {
		return fmt.Errorf("writing metrics: %w", err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("writing metrics: %w", err)
	}
	return nil
}

// progress prints a line every interval on rank 0: epoch, step, loss,
// throughput and the estimated time left. The throughput is of the steps
// alone, as the epoch's line has it: the time before an epoch's first step
// (the start-up, the evaluation of the epoch before) is left out. The
// estimate goes by the wall time since the first step, evaluations
// included, so it is the time to the end of the last step.
type progress struct {
	out           io.Writer
	on            bool
	every         time.Duration
	total, global int
	start, last   time.Time // progress's start and its last line
	first, prev   time.Time // the first step's end and the last update's
	stepTime      time.Duration
	steps         int // the steps in stepTime
}

func newProgress(out io.Writer, on bool, every time.Duration, totalSteps, globalBatch int) *progress {
	now := time.Now()
	return &progress{out: out, on: on && every > 0, every: every, total: totalSteps, global: globalBatch, start: now, last: now, prev: now}
}

// update is called after each step: s of the epoch's steps, done of the
// run's.
func (p *progress) update(epoch, s, steps, done int, loss float64) {
	if !p.on {
		return
	}
	now := time.Now()
	if s > 1 && done > 1 {
		p.stepTime += now.Sub(p.prev) // one step, nothing between
		p.steps++
	}
	if done == 1 {
		p.first = now
	}
	p.prev = now
	if now.Sub(p.last) < p.every && done != p.total {
		return
	}
	p.last = now
	// Each step so far first in its epoch (or of the run): the time since
	// start-up is all there is to go by.
	perStep := now.Sub(p.start) / time.Duration(done)
	if p.steps > 0 {
		perStep = p.stepTime / time.Duration(p.steps)
	}
	rate := float64(p.global) / max(perStep, time.Nanosecond).Seconds()
	eta := perStep * time.Duration(p.total-done)
	if done > 1 {
		eta = now.Sub(p.first) / time.Duration(done-1) * time.Duration(p.total-done)
	}
	fmt.Fprintf(p.out, "epoch %d step %d/%d loss %.4f %.0f samples/s ETA %v\n", epoch, s, steps, loss, rate, eta.Round(time.Second))
}
