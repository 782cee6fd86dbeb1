package train

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"hpctrain/checkpoint"
	"hpctrain/model"
	"hpctrain/mpi"
	"hpctrain/optim"
)

// ExitRequeue is the exit code of a run that stopped on SIGUSR1 or SIGTERM
// after writing a checkpoint: the batch script (slurm.ExitRequeue, the same
// number) requeues the job, and the requeued job resumes with -resume auto.
const ExitRequeue = 85

// ErrPreempted is returned by Run when a signal stopped the run after a
// checkpoint was written.
var ErrPreempted = errors.New("stopped by signal after writing a checkpoint; exit for requeue")

// resumeHash is the configuration hash a checkpoint records: the run's
// configuration less what may change between a run and its resumption
// (epochs and step cap, checkpoint and output settings).
func resumeHash(cfg Config) string {
	cfg.Epochs, cfg.Steps = 0, 0
	cfg.CheckpointDir, cfg.CheckpointEvery, cfg.Keep, cfg.Resume = "", "", 0, ""
	return cfg.Hash()
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
// ("10m"); empty means only on signals and at the end.
func parseEvery(e Every) (everyPolicy, error) {
	s := string(e)
	if s == "" || s == "0" {
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
	cfg      Config
	comm     mpi.Comm
	net      *model.Net
	opt      optim.Optimizer
	every    everyPolicy
	last     time.Time
	stopFlag atomic.Bool // a signal arrived
	sigs     chan os.Signal
	flag     []float64
	log      func(string, ...any)
}

func newCheckpointer(cfg Config, c mpi.Comm, net *model.Net, opt optim.Optimizer, log func(string, ...any)) (*checkpointer, error) {
	every, err := parseEvery(cfg.CheckpointEvery)
	if err != nil {
		return nil, err
	}
	cp := &checkpointer{cfg: cfg, comm: c, net: net, opt: opt, every: every, last: time.Now(), flag: make([]float64, 1), log: log}
	if cfg.CheckpointDir != "" {
		if c.Rank() == 0 {
			if err := os.MkdirAll(cfg.CheckpointDir, 0o755); err != nil {
				return nil, fmt.Errorf("checkpoint dir %s: %w", cfg.CheckpointDir, err)
			}
		}
		// SIGUSR1 (SLURM's warning before the time limit) and SIGTERM
		// (preemption) only set a flag; a second one while the checkpoint
		// is being written changes nothing.
		cp.sigs = make(chan os.Signal, 4)
		signal.Notify(cp.sigs, syscall.SIGUSR1, syscall.SIGTERM)
		go func() {
			for range cp.sigs {
				cp.stopFlag.Store(true)
			}
		}()
	}
	return cp, nil
}

func (cp *checkpointer) close() {
	if cp.sigs != nil {
		signal.Stop(cp.sigs)
		close(cp.sigs)
	}
}

// resume restores the newest valid checkpoint (-resume auto) or the named
// one, on rank 0, and broadcasts it. It returns the global step to continue
// from (0 for a fresh start). Collective.
func (cp *checkpointer) resume() (int, error) {
	cfg, c := cp.cfg, cp.comm
	var st *checkpoint.State
	var err error
	if c.Rank() == 0 && cfg.Resume != "" {
		var path string
		if cfg.Resume == "auto" {
			st, path, err = checkpoint.Latest(cfg.CheckpointDir, func(m string) { cp.log("hpctrain: warning: %s", m) })
		} else {
			path = cfg.Resume
			st, err = checkpoint.Load(path)
		}
		if err == nil && st != nil {
			err = st.Check(cfg.Model, resumeHash(cfg), c.Size())
		}
		if err == nil && st != nil {
			if len(st.Lookup("params")) != len(cp.net.Params) {
				err = fmt.Errorf("checkpoint %s: %d parameters, the model has %d", path, len(st.Lookup("params")), len(cp.net.Params))
			} else {
				cp.log("hpctrain: resuming from %s (step %d, epoch %d)", path, st.Step, st.Epoch)
			}
		}
	}
	if err = agree(c, "loading the checkpoint", err); err != nil {
		return 0, err
	}
	// Header: step, then the number and lengths of the optimizer buffers.
	var opt [][]float32
	hdr := make([]byte, 8*18)
	if st != nil {
		binary.LittleEndian.PutUint64(hdr, uint64(st.Step)+1) // 0: nothing to resume
		for i := 0; ; i++ {
			s := st.Lookup(fmt.Sprintf("optim.%d", i))
			if s == nil || i == 16 {
				break
			}
			opt = append(opt, s)
			binary.LittleEndian.PutUint64(hdr[8:], uint64(i+1))
			binary.LittleEndian.PutUint64(hdr[16+8*i:], uint64(len(s)))
		}
		copy(cp.net.Params, st.Lookup("params"))
	}
	if err := c.BcastBytes(hdr, 0); err != nil {
		return 0, err
	}
	step := int(binary.LittleEndian.Uint64(hdr)) - 1
	if step < 0 {
		return 0, nil
	}
	if c.Rank() != 0 {
		n := int(binary.LittleEndian.Uint64(hdr[8:]))
		opt = make([][]float32, n)
		for i := range opt {
			opt[i] = make([]float32, binary.LittleEndian.Uint64(hdr[16+8*i:]))
		}
	}
	if err := c.Bcast(cp.net.Params, 0); err != nil {
		return 0, err
	}
	for _, s := range opt {
		if err := c.Bcast(s, 0); err != nil {
			return 0, err
		}
	}
	if len(opt) > 0 {
		if err := cp.opt.Restore(opt); err != nil {
			return 0, fmt.Errorf("restoring the optimizer: %w", err)
		}
	}
	return step, nil
}

// save writes the state after global step on rank 0.
func (cp *checkpointer) save(step, epoch int) error {
	if cp.cfg.CheckpointDir == "" || cp.comm.Rank() != 0 {
		return nil
	}
	st := &checkpoint.State{
		Model: cp.cfg.Model, ConfigHash: resumeHash(cp.cfg), Optimizer: cp.opt.Name(),
		WorldSize: cp.comm.Size(), Epoch: epoch, Step: int64(step),
		SamplerEpoch: epoch, RNG: []uint64{cp.cfg.Seed},
		Sections: []checkpoint.Section{{Name: "params", Data: cp.net.Params}},
	}
	for i, s := range cp.opt.State() {
		st.Sections = append(st.Sections, checkpoint.Section{Name: fmt.Sprintf("optim.%d", i), Data: s})
	}
	path, err := checkpoint.Save(cp.cfg.CheckpointDir, st, cp.cfg.Keep)
	if err != nil {
		return err
	}
	cp.last = time.Now()
	cp.log("hpctrain: checkpoint %s (step %d)", path, step)
	return nil
}

// due reports whether rank 0 should write a periodic checkpoint now.
func (cp *checkpointer) due(step int) bool {
	if cp.cfg.CheckpointDir == "" {
		return false
	}
	if cp.every.Steps > 0 {
		return step%cp.every.Steps == 0
	}
	return cp.every.Period > 0 && time.Since(cp.last) >= cp.every.Period
}

// stopAgreed makes all ranks agree, at a step boundary, whether any rank
// was signalled: so all ranks checkpoint and stop at the same step.
// Collective (one 8-byte all-reduce per step, only with -checkpoint-dir).
func (cp *checkpointer) stopAgreed() (bool, error) {
	if cp.cfg.CheckpointDir == "" {
		return false, nil
	}
	cp.flag[0] = 0
	if cp.stopFlag.Load() {
		cp.flag[0] = 1
	}
	if err := cp.comm.AllreduceSum64(cp.flag); err != nil {
		return false, err
	}
	return cp.flag[0] > 0, nil
}
