package train

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"hpctrain/checkpoint"
	"hpctrain/internal/cli"
	"hpctrain/model"
	"hpctrain/mpi"
	"hpctrain/optim"
	"hpctrain/slurm"
)

// ExitRequeue is the exit code of a run that stopped on SIGUSR1 or SIGTERM
// after writing a checkpoint: the batch script (slurm.ExitRequeue, the same
// number) requeues the job, and the requeued job resumes with -resume auto.
const ExitRequeue = 85

// ErrPreempted is returned by Run when a signal stopped the run after a
// checkpoint was written.
var ErrPreempted = errors.New("stopped by signal after writing a checkpoint; exit for requeue")

// ExitInterrupted is the exit code of a run that stopped on SIGINT (Ctrl-C)
// or SIGHUP after writing a checkpoint: the shell's code for Ctrl-C, which
// no batch script takes for a requeue.
const ExitInterrupted = 130

// ErrInterrupted is returned by Run when SIGINT or SIGHUP, and no
// preemption signal, stopped the run after a checkpoint was written.
var ErrInterrupted = errors.New("interrupted after writing a checkpoint")

// resumeFree names the fields of Config a resumed run may change: the
// epochs and the step cap (a run may be extended), the compute threads and
// their placement (the arithmetic, hence every result, is the same for any
// thread count and any cores), and the checkpoint settings. Output-only
// fields are out of the hash already (json:"-").
var resumeFree = []string{"Epochs", "Steps", "Threads", "Bind", "CPUList", "UseSMT", "CheckpointDir", "CheckpointEvery", "Keep", "Resume"}

// resumable is cfg with the resumeFree fields zero, and their JSON keys.
func resumable(cfg Config) (Config, []string) {
	v := reflect.ValueOf(&cfg).Elem()
	keys := make([]string, 0, len(resumeFree))
	for _, name := range resumeFree {
		sf, ok := v.Type().FieldByName(name)
		if !ok {
			panic("train: resumeFree names no field " + name)
		}
		v.FieldByIndex(sf.Index).SetZero()
		keys = append(keys, strings.Split(sf.Tag.Get("json"), ",")[0])
	}
	return cfg, keys
}

// resumeHash is the configuration hash a checkpoint records, for people
// and tools: resuming compares the settings key by key (resumeConfig).
func resumeHash(cfg Config) string {
	c, _ := resumable(cfg)
	return c.Hash()
}

// hashV1 is the hash checkpoints of format version 1 recorded, and the
// only thing about their settings they hold: the configuration less epochs,
// steps and the checkpoint settings (threads included).
func hashV1(cfg Config) string {
	cfg.Epochs, cfg.Steps = 0, 0
	cfg.CheckpointDir, cfg.CheckpointEvery, cfg.Keep, cfg.Resume = "", "", 0, ""
	return cfg.Hash()
}

// resumeConfig is the record of the run's settings a checkpoint holds and
// a resumption is compared with, key by key: the JSON object of the
// resumable configuration (what Hash covers by JSON), plus the keys of
// every embedded settings struct left out of the JSON (json:"-", as the
// optimizer's and the schedule's are), taken from its TOML form, as Hash
// does. The keys are those of the TOML file and the flags, so a refusal
// names them as the user writes them: "lr = 0.01". Nothing here lists
// fields: a field added to Config, or to a struct it embeds, is recorded
// and compared without a change here.
func resumeConfig(cfg Config) (json.RawMessage, error) {
	c, free := resumable(cfg)
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("recording the configuration: %w", err)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber() // a uint64 seed stays exact
	m := map[string]any{}
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("recording the configuration: %w", err)
	}
	v := reflect.ValueOf(c)
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		if !f.Anonymous || !f.IsExported() || f.Type.Kind() != reflect.Struct || f.Tag.Get("json") != "-" {
			continue
		}
		var buf bytes.Buffer
		if err := toml.NewEncoder(&buf).Encode(v.Field(i).Interface()); err != nil {
			return nil, fmt.Errorf("recording the configuration (%s): %w", f.Name, err)
		}
		var sub map[string]any
		if _, err := toml.Decode(buf.String(), &sub); err != nil {
			return nil, fmt.Errorf("recording the configuration (%s): %w", f.Name, err)
		}
		for k, x := range sub {
			m[k] = x
		}
	}
	for _, k := range free {
		delete(m, k)
	}
	return json.Marshal(m) // keys sorted: the same settings give the same bytes
}

// optimDefaults returns the settings of a resumeConfig record with the
// optimizer's hyperparameters that were left to its default (0 or absent:
// optim.Config.WithDefaults) set to that default, so that records compare
// by the values the optimizer ran with: lr = 0 and lr = 0.001 are the same
// adamw. Records kept as given in the files, and where they were written
// before WithDefaults knew a default the comparison still holds. A record
// that is not a JSON object, or whose optimizer keys do not read as
// optim.Config's, is returned as it is.
func optimDefaults(conf json.RawMessage) json.RawMessage {
	d := json.NewDecoder(bytes.NewReader(conf))
	d.UseNumber() // the other keys keep their text: a uint64 seed stays exact
	var m map[string]any
	if d.Decode(&m) != nil || m == nil {
		return conf
	}
	sub := map[string]any{}
	t := reflect.TypeFor[optim.Config]()
	for i := 0; i < t.NumField(); i++ {
		k := strings.Split(t.Field(i).Tag.Get("toml"), ",")[0]
		switch v := m[k].(type) {
		case json.Number:
			f, err := v.Float64()
			if err != nil {
				return conf
			}
			sub[k] = f
		case string, bool:
			sub[k] = v
		}
	}
	var buf bytes.Buffer
	if toml.NewEncoder(&buf).Encode(sub) != nil {
		return conf
	}
	var oc optim.Config
	if _, err := toml.Decode(buf.String(), &oc); err != nil {
		return conf
	}
	buf.Reset()
	if toml.NewEncoder(&buf).Encode(oc.WithDefaults()) != nil {
		return conf
	}
	var filled map[string]any
	if _, err := toml.Decode(buf.String(), &filled); err != nil {
		return conf
	}
	for k, v := range filled {
		m[k] = v
	}
	out, err := json.Marshal(m)
	if err != nil {
		return conf
	}
	return out
}

// everyPolicy says when to write periodic checkpoints: every Steps steps
// or every Period of wall time (rank 0's clock; only rank 0 writes).
type everyPolicy struct {
	Steps  int
	Period time.Duration
}

// Every is checkpoint_every as written: a step count or a duration. In
// TOML it is an integer (500) or a string ("500", "10m").
type Every string

// UnmarshalTOML takes an integer or a string; parseEvery checks the value.
func (e *Every) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case int64:
		*e = Every(strconv.FormatInt(v, 10))
	case string:
		*e = Every(v)
	default:
		return fmt.Errorf("checkpoint_every = %v: must be a step count (500) or a duration (\"10m\")", v)
	}
	return nil
}

// parseEvery reads -checkpoint-every: a step count ("500") or a duration
// ("10m"); empty, 0 or a zero duration ("0s") mean only on signals and
// at the end.
func parseEvery(e Every) (everyPolicy, error) {
	s := string(e)
	if s == "" || s == "0" {
		return everyPolicy{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d == 0 {
		return everyPolicy{}, nil
	}
	if n, err := strconv.Atoi(s); err == nil && n > 0 {
		return everyPolicy{Steps: n}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return everyPolicy{Period: d}, nil
	}
	return everyPolicy{}, fmt.Errorf("config: checkpoint_every = %q: must be a step count (500) or a duration (10m)", s)
}

// checkpointer writes and restores the run's state.
type checkpointer struct {
	cfg    Config
	comm   mpi.Comm
	net    *model.Net
	opt    optim.Optimizer
	every  everyPolicy
	last   time.Time
	flag   []float64
	log    func(string, ...any)
	unlock func()      // rank 0's hold on the checkpoint directory
	locked os.FileInfo // the directory it holds (relock)

	config json.RawMessage // resumeConfig(cfg)
	runID  string          // the run the checkpoints belong to (set by resume)
	// desc is the model's description (TOML), recorded in every checkpoint
	// and compared on resume; "" records none.
	desc string
	// buffers is the net's state that is not parameters (batch-norm running
	// statistics), saved as the section "buffers" when not empty and
	// restored into this slice, on every rank, by resume.
	buffers []float32
	// Where resume left the run (resumed: whether it restored a
	// checkpoint at all), and the recorded result when the checkpoint was
	// written at the run's end.
	resumed                   bool
	resumedStep, resumedEpoch int
	final                     *Result
	// resumedLoss is the checkpoint's EpochLoss (the epoch's losses so
	// far, all ranks'), nil if it has none; epochLoss is what the next
	// save records (nil: none), set by the run for a save within an epoch.
	resumedLoss, epochLoss *checkpoint.EpochLoss
	// total is the steps this run is to take (set by complete), recorded
	// in every checkpoint; resumedTotal is the checkpoint's (0: none
	// recorded), rank 0's.
	total        int
	resumedTotal int64
	// data is what this run reads (pipeline.identity), recorded in every
	// checkpoint and compared on resume.
	data string
	// classNames is an image folder's class directories (nil for other
	// data sets), recorded in every checkpoint for evaluation and
	// prediction to name the outputs by.
	classNames []string
	// scaler is fp16's loss scaler (nil in other precisions), saved as the
	// section "loss_scaler"; resumedScaler is that section of the
	// checkpoint resumed (nil: none), for the run to restore.
	scaler        *optim.LossScaler
	resumedScaler []float32
}

func newCheckpointer(cfg Config, c mpi.Comm, net *model.Net, opt optim.Optimizer, log func(string, ...any)) (*checkpointer, error) {
	every, err := parseEvery(cfg.CheckpointEvery)
	if err != nil {
		return nil, err
	}
	config, err := resumeConfig(cfg)
	if err != nil {
		return nil, err
	}
	cp := &checkpointer{cfg: cfg, comm: c, net: net, opt: opt, every: every, last: time.Now(), flag: make([]float64, 3), log: log, config: config,
		desc: string(net.Desc.TOML()), buffers: net.Buffers}
	if cfg.CheckpointDir != "" {
		if c.Rank() == 0 {
			if to, err := os.Readlink(cfg.CheckpointDir); err == nil {
				if _, err := os.Stat(cfg.CheckpointDir); errors.Is(err, fs.ErrNotExist) {
					// MkdirAll would say "file exists".
					return nil, cli.Usage(fmt.Errorf("checkpoint dir %s: a symbolic link to %s, which does not exist: make that directory, or mend the link", cfg.CheckpointDir, to))
				}
			}
			if err := os.MkdirAll(cfg.CheckpointDir, 0o755); err != nil {
				return nil, outputErr("checkpoint dir "+cfg.CheckpointDir, err) // a file in the path, no permission: exit 2
			}
			// The writer holds the directory for the whole run: a second
			// job there (resuming too) would remove this one's files.
			if cp.unlock, err = checkpoint.Lock(cfg.CheckpointDir); err != nil {
				if errors.Is(err, checkpoint.ErrInUse) {
					err = cli.Usage(err) // as CheckFresh's "in use": exit 2
				}
				return nil, err
			}
			// Found now, not at the first save after hours of training.
			if err := checkpoint.Writable(cfg.CheckpointDir); err != nil {
				cp.unlock()
				return nil, cli.Usage(err)
			}
			if err := checkpoint.Room(cfg.CheckpointDir, cp.size()); err != nil {
				cp.unlock()
				return nil, cli.Usage(err)
			}
			cp.locked, _ = os.Stat(cfg.CheckpointDir)
		}
		CatchStopSignals()
	} else {
		WatchUnsavedSignal()
	}
	return cp, nil
}

// size is about the bytes of one checkpoint of this run, before its
// first step: 4 a value of the parameters, buffers and optimizer state
// (an optimizer that cannot say counts as none), the model description
// and configuration, and 64 KB for the rest of the header and the loss
// scaler.
func (cp *checkpointer) size() int64 {
	n := len(cp.net.Params) + len(cp.buffers)
	if s, ok := cp.opt.(optim.StateSizer); ok {
		n += s.StateLen()
	}
	return 4*int64(n) + int64(len(cp.desc)+len(cp.config)) + 64<<10
}

// roomAhead warns, on rank 0 before the first step, when the checkpoint
// dir has room for the run's next checkpoint (newCheckpointer refused a
// dir without) but not for all those the run will hold at once: with
// -keep K, K of them and the one being written; with -keep 0, every one
// it writes. The count is known for a step period (-checkpoint-every N);
// for a time period it is taken to be unbounded, and -keep 0 is not
// checked there. A warning, not a refusal: the run can go on until then,
// the disk may gain room meanwhile, and a save that fails leaves the
// checkpoints before it intact.
func (cp *checkpointer) roomAhead(from, total int) {
	if cp.comm.Rank() != 0 || cp.cfg.CheckpointDir == "" || from >= total {
		return
	}
	saves := 0 // this run's saves still to come; -1: not known
	switch e := cp.every; {
	case e.Steps > 0:
		saves = total/e.Steps - from/e.Steps
		if total%e.Steps != 0 {
			saves++ // and the final one
		}
	case e.Period > 0:
		saves = -1
	default:
		saves = 1 // the final checkpoint
	}
	keep := cp.cfg.Keep
	if keep == 0 && saves < 0 {
		return
	}
	// The i-th save (from 1) holds, beside the files there now, its own and
	// the newer ones up to keep: min(held+i-1, keep) + 1 - held more.
	held := checkpoint.Held(cp.cfg.CheckpointDir, cp.runID)
	more := saves
	if keep > 0 && (saves < 0 || held+saves-1 > keep) {
		more = keep + 1 - held
	}
	size := cp.size()
	free, ok := checkpoint.Free(cp.cfg.CheckpointDir)
	if more <= 1 || !ok || free >= int64(more)*size {
		return
	}
	what, hint := fmt.Sprintf("-keep 0 keeps all %d that it writes", saves), "set -keep"
	if keep > 0 {
		what, hint = fmt.Sprintf("-keep %d, and one more while it is written", keep), "lower -keep"
	}
	cp.log("hpctrain: warning: checkpoint dir %s: %s free, and this run will hold %d more checkpoints of %s there at once (%s): a save will fail once the disk is full; make room, or %s",
		cp.cfg.CheckpointDir, checkpoint.Megabytes(free), more, checkpoint.Megabytes(size), what, hint)
}

// close gives up the checkpoint directory.
func (cp *checkpointer) close() {
	if cp.unlock != nil {
		cp.unlock()
	}
}

// identity is what a checkpoint must share with this run to resume it.
func (cp *checkpointer) identity() checkpoint.Identity {
	return checkpoint.Identity{Model: cp.cfg.Model, Desc: cp.desc, Config: cp.config, HashV1: hashV1(cp.cfg), WorldSize: cp.comm.Size()}
}

// resumePlan is what rank 0 tells the other ranks about the checkpoint it
// read, before the tensors follow.
type resumePlan struct {
	Resume  bool            `json:"resume"` // false: a fresh start
	Step    int             `json:"step"`
	Epoch   int             `json:"epoch"`
	RunID   string          `json:"run_id"`
	Buffers int             `json:"buffers"` // values in the "buffers" section
	Optim   []int           `json:"optim"`   // lengths of the optimizer's buffers
	Final   json.RawMessage `json:"final,omitempty"`
	// EpochLoss is the checkpoint's (checkpoint.State.EpochLoss).
	EpochLoss *checkpoint.EpochLoss `json:"epoch_loss,omitempty"`
	// Scaler is its section "loss_scaler" (scale, clean steps), if any.
	Scaler []float32 `json:"loss_scaler,omitempty"`
}

// resume starts the run's checkpoints. Without -resume the run is fresh:
// it gets a new run identity, and a -checkpoint-dir that holds checkpoints
// is refused (checkpoint.CheckFresh). With -resume it restores the newest
// valid checkpoint (auto) or the named one on rank 0, after checking that
// it is of this run's model, description, settings and world size, and
// broadcasts it. It returns the global step to continue from (0 for a
// fresh start). Refusals are usage errors (exit 2) on every rank.
// Collective.
func (cp *checkpointer) resume() (int, error) {
	c := cp.comm
	var st *checkpoint.State
	var plan resumePlan
	var err error
	if c.Rank() == 0 {
		st, err = cp.load()
		if err == nil {
			plan = cp.plan(st)
		}
	}
	if err = agree(c, "loading the checkpoint", err); err != nil {
		return 0, err
	}
	var js []byte
	if c.Rank() == 0 {
		js, _ = json.Marshal(plan) // plain data: cannot fail
	}
	n := make([]byte, 8)
	binary.LittleEndian.PutUint64(n, uint64(len(js)))
	if err := c.BcastBytes(n, 0); err != nil {
		return 0, err
	}
	if c.Rank() != 0 {
		js = make([]byte, binary.LittleEndian.Uint64(n))
	}
	if err := c.BcastBytes(js, 0); err != nil {
		return 0, err
	}
	if err := json.Unmarshal(js, &plan); err != nil {
		return 0, fmt.Errorf("reading rank 0's resume plan: %w", err)
	}
	cp.runID = plan.RunID
	if !plan.Resume {
		return 0, nil
	}
	err = nil
	if len(cp.buffers) != plan.Buffers {
		err = fmt.Errorf("the checkpoint has %d buffer values, this rank's model %d", plan.Buffers, len(cp.buffers))
	}
	if err = agree(c, "restoring buffers", err); err != nil {
		return 0, err
	}
	opt := make([][]float32, len(plan.Optim))
	for i, n := range plan.Optim {
		if st != nil {
			opt[i] = st.Lookup(fmt.Sprintf("optim.%d", i))
		} else {
			opt[i] = make([]float32, n)
		}
	}
	if st != nil {
		copy(cp.net.Params, st.Lookup("params"))
		copy(cp.buffers, st.Lookup("buffers"))
	}
	if err := c.Bcast(cp.net.Params, 0); err != nil {
		return 0, err
	}
	if len(cp.buffers) > 0 {
		if err := c.Bcast(cp.buffers, 0); err != nil {
			return 0, err
		}
	}
	for _, s := range opt {
		if err := c.Bcast(s, 0); err != nil {
			return 0, err
		}
	}
	if err := cp.opt.Restore(opt); err != nil {
		return 0, fmt.Errorf("restoring the optimizer: %w", err)
	}
	if plan.Final != nil {
		var r Result
		if err := json.Unmarshal(plan.Final, &r); err != nil {
			return 0, fmt.Errorf("reading the checkpoint's final result: %w", err)
		}
		cp.final = &r
	}
	cp.resumed = true
	cp.resumedStep, cp.resumedEpoch, cp.resumedLoss = plan.Step, plan.Epoch, plan.EpochLoss
	cp.resumedScaler = plan.Scaler
	return plan.Step, nil
}

// load is resume's part on rank 0: it finds, reads and checks the
// checkpoint (nil for a fresh start) and sets the run identity.
func (cp *checkpointer) load() (*checkpoint.State, error) {
	cfg := cp.cfg
	if cfg.Resume == "" {
		cp.runID = checkpoint.NewRunID()
		if cfg.CheckpointDir == "" {
			return nil, nil
		}
		return nil, cli.Usage(checkpoint.CheckFresh(cfg.CheckpointDir, cp.identity()))
	}
	var st *checkpoint.State
	var path string
	var err error
	if cfg.Resume == "auto" {
		st, path, err = checkpoint.Latest(cfg.CheckpointDir, func(m string) { cp.log("hpctrain: warning: %s", m) })
		if err != nil {
			return nil, err
		}
		if st == nil {
			cp.runID = checkpoint.NewRunID()
			// Files that cannot be resumed still hold the names a fresh
			// run saves to: refused now, not when the first save is
			// refused after the training.
			if err := checkpoint.CheckFresh(cfg.CheckpointDir, cp.identity()); errors.Is(err, checkpoint.ErrInUse) {
				return nil, cli.Usage(fmt.Errorf("resume = \"auto\": no checkpoint in %s can be resumed (see the warnings above), and a fresh run would have to replace them: move them away, or use another -checkpoint-dir", cfg.CheckpointDir))
			} else if err != nil {
				return nil, err
			}
			if env, inJob, _ := slurm.ReadEnv(os.Getenv); inJob && env.RestartCount > 0 {
				// A requeued job's earlier run may have checkpointed
				// here: say loudly that this one starts from nothing.
				cp.log("hpctrain: warning: SLURM job %s was requeued %d times, but %s holds no checkpoint: starting a fresh run from step 0 (if an earlier run wrote checkpoints there, they were removed)", env.JobID, env.RestartCount, cfg.CheckpointDir)
				return nil, nil
			}
			cp.log("hpctrain: no checkpoint in %s: starting a fresh run", cfg.CheckpointDir)
			return nil, nil
		}
	} else {
		path = cfg.Resume
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			return nil, cli.Usage(fmt.Errorf("resume = %q: a directory (name a checkpoint file, or use -checkpoint-dir %s -resume auto for its newest)", path, path))
		}
		if st, err = checkpoint.Load(path); err != nil {
			switch {
			case errors.Is(err, fs.ErrNotExist):
				err = cli.Usage(fmt.Errorf("resume = %q: %w (name a checkpoint file, or use -resume auto)", path, err))
			case errors.Is(err, checkpoint.ErrFormat):
				err = cli.Usage(err) // the wrong file named; a damaged one stays exit 1
			}
			return nil, err
		}
	}
	if err := cp.fits(st); err != nil {
		return nil, cli.Usage(fmt.Errorf("resume from %s: %w", path, err))
	}
	cp.runID = st.RunID
	if cp.runID == "" {
		cp.runID = checkpoint.NewRunID()
		cp.log("hpctrain: %s is of format version %d: continuing it as run %s (its files stay: only the run's own are pruned)", path, st.Version, cp.runID)
	}
	cp.resumedTotal = st.TotalSteps
	if cfg.CheckpointDir != "" {
		// Later checkpoints there are a future this run gives up (a
		// roll-back to an earlier one, or a newest file that does not
		// load): set aside, they cannot be resumed by mistake nor make
		// -keep prune this run's own files.
		aside, moved, err := checkpoint.SetAside(cfg.CheckpointDir, st.Step, st.RunID)
		if errors.Is(err, checkpoint.ErrInUse) {
			return nil, cli.Usage(fmt.Errorf("resume from %s: %w", path, err))
		} else if err != nil {
			return nil, err
		}
		if len(moved) > 0 {
			cp.log("hpctrain: moved %s after step %d (%s) to %s: this run goes on from step %d in their place", plural(len(moved), "checkpoint file"), st.Step, listNames(moved), aside, st.Step)
		}
	}
	// Said once nothing can refuse the resumption any more.
	cp.log("hpctrain: resuming from %s (step %d, epoch %d)", path, st.Step, st.Epoch)
	if st.Data != "" && cp.data != "" && st.Data != cp.data {
		// The same settings, other data (files replaced, a link moved):
		// it trains, but not as the interrupted run would have.
		cp.log("hpctrain: warning: %s was written on %s; this run reads %s: its epochs and batches are not those the interrupted run would have had", path, st.Data, cp.data)
	}
	return st, nil
}

// fits checks that st is of this run and that its tensors fit this model.
func (cp *checkpointer) fits(st *checkpoint.State) error {
	// Settings left to the optimizer's default are compared as that
	// default: a run of -optimizer adamw resumed with -lr 0.001 (its
	// default) is the same run.
	run, was := cp.identity(), *st
	run.Config, was.Config = optimDefaults(run.Config), optimDefaults(st.Config)
	if err := was.Check(run); err != nil {
		return err
	}
	if n := len(st.Lookup("params")); n != len(cp.net.Params) {
		return fmt.Errorf("%w at step %d: %d parameters, the model has %d", checkpoint.ErrIncompatible, st.Step, n, len(cp.net.Params))
	}
	b := st.Lookup("buffers")
	switch {
	case b == nil && len(cp.buffers) > 0:
		return fmt.Errorf("%w at step %d: it holds no buffers (running statistics), the model has %d values of them: it was written by an older build; start a fresh run in another -checkpoint-dir", checkpoint.ErrIncompatible, st.Step, len(cp.buffers))
	case len(b) != len(cp.buffers):
		return fmt.Errorf("%w at step %d: %d buffer values (running statistics), the model has %d", checkpoint.ErrIncompatible, st.Step, len(b), len(cp.buffers))
	}
	// Training stops before it writes non-finite parameters or running
	// statistics: such a file was damaged or made by hand. Every step from
	// NaN parameters would be NaN, and NaN statistics would make every
	// evaluation NaN (eval, predict and export refuse them too).
	if i := nonFinite(st.Lookup("params")); i >= 0 {
		return fmt.Errorf("step %d: parameter %d is %v: the run cannot continue from it", st.Step, i, st.Lookup("params")[i])
	}
	if i := nonFinite(b); i >= 0 {
		return fmt.Errorf("step %d: buffer value %d (running statistics) is %v: the run cannot continue from it", st.Step, i, b[i])
	}
	// Every checkpoint a run writes holds its optimizer's state (the
	// step counter at least, then momentum or Adam's moments): one
	// without, or with buffers of other sizes, was damaged or made by
	// hand, and resuming from it restarted the moments in silence. Tried
	// here on rank 0, before any file is set aside; resume restores the
	// same state on every rank.
	var opt [][]float32
	for i := 0; st.Lookup(fmt.Sprintf("optim.%d", i)) != nil; i++ {
		s := st.Lookup(fmt.Sprintf("optim.%d", i))
		if j := nonFinite(s); j >= 0 {
			return fmt.Errorf("step %d: optimizer state optim.%d value %d is %v: the run cannot continue from it", st.Step, i, j, s[j])
		}
		opt = append(opt, s)
	}
	if err := cp.opt.Restore(opt); err != nil {
		return fmt.Errorf("%w at step %d: its optimizer state (%d buffers) does not fit this run's %s optimizer (%v)", checkpoint.ErrIncompatible, st.Step, len(opt), cp.opt.Name(), err)
	}
	return nil
}

// plan describes st (nil: a fresh start) for the other ranks.
func (cp *checkpointer) plan(st *checkpoint.State) resumePlan {
	p := resumePlan{RunID: cp.runID}
	if st == nil {
		return p
	}
	p.Resume, p.Step, p.Epoch, p.Final, p.EpochLoss = true, int(st.Step), st.Epoch, st.Final, st.EpochLoss
	// Only a state that can be restored travels: a NaN would not even
	// make it into the plan's JSON.
	if s := st.Lookup("loss_scaler"); len(s) == 2 && nonFinite(s) < 0 {
		p.Scaler = s
	}
	p.Buffers = len(st.Lookup("buffers"))
	for i := 0; ; i++ {
		s := st.Lookup(fmt.Sprintf("optim.%d", i))
		if s == nil {
			break
		}
		p.Optim = append(p.Optim, len(s))
	}
	return p
}

// complete reports whether the checkpoint resume restored was written at
// the end of the run and this run asks for no more steps than it took
// (total: the steps of the whole run), and if so prints on rank 0 that the
// run is already complete and returns its recorded result. A run whose
// -epochs or -steps were raised is not complete: it continues from there.
//
// It also records total for the checkpoints this run writes and, when
// resuming a run that was to take another number of steps changes the
// learning rate of the steps to come (a cosine schedule spans the run),
// warns on rank 0 with both rates.
func (cp *checkpointer) complete(total int) (Result, bool) {
	cp.total = total
	if cp.final == nil || cp.resumedStep < total {
		cp.warnSchedule()
		return Result{}, false
	}
	r := *cp.final
	cp.log("hpctrain: run already complete at step %d (epoch %d, %s): test accuracy %.2f%%, test loss %.4f; nothing to train (raise -epochs or -steps to continue it)",
		r.Step, r.Epoch, plural(r.WorldSize, "rank"), 100*r.TestAccuracy, r.TestLoss)
	return r, true
}

// warnSchedule warns, on rank 0, when the learning rate of the resumed
// run's next step differs from the one the checkpoint's run would have
// given it: the schedule spans the run (cosine) and -epochs or -steps
// changed its length. The resumed run is then neither the interrupted one
// continued nor a fresh run of the new length; the user may mean it (a
// warm restart), but should know.
func (cp *checkpointer) warnSchedule() {
	was, now := int(cp.resumedTotal), cp.total
	if !cp.resumed || was <= 0 || was == now {
		return
	}
	cfg := cp.cfg
	lr, err := optim.ScaleLR(cfg.Config.WithDefaults().LR, cfg.Batch*cp.comm.Size(), cfg.BaseBatch, cfg.LRScaling)
	if err != nil {
		return // the run's own set-up reports it
	}
	step, lrNow, lrWas, ok := scheduleDiverges(cfg.ScheduleConfig, lr, was, now, cp.resumedStep)
	if !ok {
		return
	}
	cp.log("hpctrain: warning: the %s schedule spans %d steps in this run, %d in the run that wrote the checkpoint (-epochs or -steps changed): step %d trains at lr %.6g where that run's schedule gives %.6g; resume with its -epochs and -steps to continue it as it was",
		cfg.ScheduleConfig.Name, now, was, step+1, lrNow, lrWas)
}

// scheduleDiverges finds the first step from step from on (0-based) that
// the run of now steps trains at another rate of schedule sc (base rate
// lr) than the run of was steps gives it, up to the end of either (where
// was ended first, its schedule's rate at step was, the one it holds). A
// run resumed during a warm-up has the same rate at its first step whatever
// the length, so comparing that step alone missed a changed cosine.
func scheduleDiverges(sc optim.ScheduleConfig, lr float64, was, now, from int) (step int, lrNow, lrWas float64, ok bool) {
	a, errA := optim.NewSchedule(sc, lr, was)
	b, errB := optim.NewSchedule(sc, lr, now)
	if errA != nil || errB != nil {
		return 0, 0, 0, false // the run's own set-up reports it
	}
	for s := from; s < now && s <= was; s++ {
		if x, y := b.LR(s), a.LR(s); x != y {
			return s, x, y, true
		}
	}
	return 0, 0, 0, false
}

// save writes the state after global step on rank 0.
func (cp *checkpointer) save(step, epoch int) error {
	return cp.write(step, epoch, nil)
}

// saveFinal writes the checkpoint at the end of the run, recording res as
// the run's final result, so that resuming the finished run reports it
// (complete). A res of no epoch (nothing evaluated) is not recorded.
func (cp *checkpointer) saveFinal(step int, res Result) error {
	if res.Epoch == 0 {
		return cp.write(step, cp.resumedEpoch, nil)
	}
	res.Final = true
	final, err := json.Marshal(res) // Params and StepLosses are json:"-"
	if err != nil {
		return fmt.Errorf("recording the final result: %w", err)
	}
	return cp.write(step, res.Epoch, final)
}

// write saves the state on rank 0 with final as the recorded result.
func (cp *checkpointer) write(step, epoch int, final json.RawMessage) error {
	if cp.cfg.CheckpointDir == "" || cp.comm.Rank() != 0 {
		return nil
	}
	if cp.runID == "" { // resume not called: a run of its own
		cp.runID = checkpoint.NewRunID()
	}
	st := &checkpoint.State{
		Model: cp.cfg.Model, Desc: cp.desc, Config: cp.config, ConfigHash: resumeHash(cp.cfg),
		RunID: cp.runID, Optimizer: cp.opt.Name(), WorldSize: cp.comm.Size(),
		Epoch: epoch, Step: int64(step), Final: final, EpochLoss: cp.epochLoss, Data: cp.data, ClassNames: cp.classNames, TotalSteps: int64(cp.total),
		Sections: []checkpoint.Section{{Name: "params", Data: cp.net.Params}},
	}
	if len(cp.buffers) > 0 {
		st.Sections = append(st.Sections, checkpoint.Section{Name: "buffers", Data: cp.buffers})
	}
	for i, s := range cp.opt.State() {
		st.Sections = append(st.Sections, checkpoint.Section{Name: fmt.Sprintf("optim.%d", i), Data: s})
	}
	if cp.scaler != nil {
		st.Sections = append(st.Sections, checkpoint.Section{Name: "loss_scaler", Data: cp.scaler.State()})
	}
	if err := cp.relock(); err != nil {
		return err
	}
	path, err := checkpoint.Save(cp.cfg.CheckpointDir, st, cp.cfg.Keep)
	if err != nil {
		return err
	}
	cp.last = time.Now()
	with := ""
	if final != nil {
		// At a periodic checkpoint's step this rewrites the same file,
		// which the line must not seem to repeat.
		with = " with the run's final result"
	}
	cp.log("hpctrain: checkpoint %s (step %d)%s", path, step, with)
	return nil
}

// relock makes sure that the directory Save writes into is the one this
// run holds. If it was removed during the run (by hand, by a clean-up
// script), Save would make it again, unlocked, and a second job could be
// let in beside this one: relock makes it and locks it first, warning that
// the checkpoints written before are gone, or fails if another job holds
// it by now. Rank 0.
func (cp *checkpointer) relock() error {
	dir := cp.cfg.CheckpointDir
	if fi, err := os.Stat(dir); cp.locked == nil || err == nil && os.SameFile(fi, cp.locked) {
		return nil
	}
	cp.unlock()
	var err error
	if cp.unlock, err = checkpoint.Lock(dir); err != nil {
		cp.unlock = func() {}
		return fmt.Errorf("checkpoint dir %s was removed during the run, and %w", dir, err)
	}
	cp.locked, _ = os.Stat(dir)
	cp.log("hpctrain: warning: checkpoint dir %s was removed during the run: made it again and locked it; the checkpoints written before are gone", dir)
	return nil
}

// due reports whether rank 0 would write a periodic checkpoint now. Only
// rank 0's answer counts (agreeStep): a period runs on rank 0's clock.
func (cp *checkpointer) due(step int) bool {
	if cp.cfg.CheckpointDir == "" {
		return false
	}
	if cp.every.Steps > 0 {
		return step%cp.every.Steps == 0
	}
	return cp.every.Period > 0 && time.Since(cp.last) >= cp.every.Period
}

// agreeStep makes all ranks agree, at a step boundary, whether any rank
// was signalled (then all checkpoint and stop at this step: stop), whether
// only by an interruption (SIGINT, SIGHUP: interrupted; a preemption on any
// rank wins, so the job is requeued) and whether a periodic checkpoint is
// due by rank 0's reckoning: each rank asking its own clock would send
// some ranks into the checkpoint's collectives and not others. Collective:
// one 24-byte all-reduce per step, only with -checkpoint-dir.
func (cp *checkpointer) agreeStep(step int) (stop, interrupted, save bool, err error) {
	if cp.cfg.CheckpointDir == "" {
		if unsavedSignal.Swap(false) {
			cp.log("hpctrain: warning: SIGUSR1 received at step %d, but this run writes no checkpoints (no -checkpoint-dir): nothing to save; training goes on", step)
		}
		return false, false, false, nil
	}
	cp.flag[0], cp.flag[1], cp.flag[2] = 0, 0, 0
	if stopSignalled.Load() {
		cp.flag[0] = 1
	}
	if interruptSignalled.Load() {
		cp.flag[2] = 1
	}
	if cp.comm.Rank() == 0 && cp.due(step) {
		cp.flag[1] = 1
	}
	if err := cp.comm.AllreduceSum64(cp.flag); err != nil {
		return false, false, false, err
	}
	stop = cp.flag[0] > 0 || cp.flag[2] > 0
	return stop, cp.flag[0] == 0 && cp.flag[2] > 0, stop || cp.flag[1] > 0, nil
}

// plural writes "1 checkpoint file", "3 checkpoint files".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// listNames joins names, the first three and a count of the rest.
func listNames(names []string) string {
	if len(names) > 3 {
		return fmt.Sprintf("%s and %d more", strings.Join(names[:3], ", "), len(names)-3)
	}
	return strings.Join(names, ", ")
}
