package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"time"
	"unsafe"

	"hpctrain/data"
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
	// thread; CommWaitSeconds the part of it the steps waited for after
	// backward (the rest was hidden behind backward).
	CommSeconds     float64 `json:"comm_seconds"`
	CommWaitSeconds float64 `json:"comm_wait_seconds"`
	Final           bool    `json:"final,omitempty"`

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
	log := func(format string, a ...any) {
		if c.Rank() == 0 {
			fmt.Fprintf(out, format+"\n", a...)
		}
	}
	// Start-up: every stage ends in an agreement, so a failure on any rank
	// stops all ranks here instead of hanging them in the loop.
	if err := agreeConfig(c, &cfg); err != nil {
		return Result{}, err
	}
	// The data and its loaders; the model takes the loader's sample shape
	// (after transforms) and the data set's classes.
	pipe, err := loadData(cfg, c)
	if err = agree(c, "loading data", err); err != nil {
		if pipe != nil {
			pipe.close()
		}
		return Result{}, err
	}
	defer pipe.close()
	pipe.warn.flush(log, "skipped at load")
	trainSet := pipe.train
	net, err := model.New(cfg.Model, model.Shape(pipe.trainLoad.Shape()), trainSet.Classes(), cfg.Batch, cfg.Seed)
	if err = agree(c, "building the model", err); err != nil {
		return Result{}, err
	}
	opt, err := optim.New(cfg.Config, groups(net), len(net.Params))
	if err = agree(c, "creating the optimizer", err); err != nil {
		return Result{}, err
	}
	// The learning rate: scaled with the global batch if asked (Goyal et
	// al. 2017), then scheduled per step.
	lr, err := optim.ScaleLR(cfg.Config.WithDefaults().LR, cfg.Batch*c.Size(), cfg.BaseBatch, cfg.LRScaling)
	var sched optim.Schedule
	if err == nil {
		sched, err = optim.NewSchedule(cfg.ScheduleConfig, lr, totalSteps(cfg, trainSet.Len(), c.Size()))
	}
	if err = agree(c, "setting up the learning-rate schedule", err); err != nil {
		return Result{}, err
	}
	// Pin this rank's compute threads to its own cores; the model and the
	// optimizer split their work over them.
	pl, err := place(cfg, c, log)
	if err != nil {
		return Result{}, err
	}
	defer pl.close()
	if cfg.ReportBindings {
		if err := pl.report(c, out); err != nil {
			return Result{}, err
		}
	}
	threads := pl.plan.Threads
	if cfg.DataWorkers > 0 {
		// Loader goroutines get Ps of their own beside the compute
		// workers' (package data, Procs); their threads are confined to
		// this rank's cores like every unpinned thread.
		runtime.GOMAXPROCS(data.Procs(threads, cfg.DataWorkers))
	}
	net.SetParallel(pl.workers)
	opt.SetParallel(pl.workers)
	var metrics *os.File
	if c.Rank() == 0 && cfg.Metrics != "" {
		metrics, err = os.Create(cfg.Metrics)
		if err == nil {
			defer metrics.Close()
		}
	}
	if err = agree(c, "opening the metrics file", err); err != nil {
		return Result{}, err
	}
	// Every replica starts from rank 0's parameters.
	if err := c.Bcast(net.Params, 0); err != nil {
		return Result{}, fmt.Errorf("broadcasting initial parameters: %w", err)
	}

	// Resume: rank 0 reads the checkpoint and broadcasts it.
	cp, err := newCheckpointer(cfg, c, net, opt, log)
	if err = agree(c, "preparing checkpoints", err); err != nil {
		return Result{}, err
	}
	defer cp.close()
	startStep, err := cp.resume()
	if err != nil {
		return Result{}, err
	}

	loader := pipe.trainLoad
	steps := trainSet.Len() / (cfg.Batch * c.Size()) // the sampler's Steps: drop-last
	if steps == 0 {
		return Result{}, fmt.Errorf("%d training samples do not fill one global batch of %d x %d ranks; lower -batch or raise -limit", trainSet.Len(), cfg.Batch, c.Size())
	}
	log("hpctrain: model %s, %d parameters, %d ranks x %d threads, batch %d per rank (%d global), %d steps per epoch, %s lr %g (%s schedule)",
		cfg.Model, len(net.Params), c.Size(), threads, cfg.Batch, cfg.Batch*c.Size(), steps, opt.Name(), lr, cfg.ScheduleConfig.Name)
	log("hpctrain: %s", pipe.desc)

	labels := make([]int32, cfg.Batch)
	// Each rank's gradient is of its mean loss divided by the ranks, so
	// that the all-reduced sum is the gradient of the mean over the global
	// batch without another pass over the gradients.
	net.SetGradScale(1 / float32(c.Size()))
	total := totalSteps(cfg, trainSet.Len(), c.Size())
	prog := newProgress(out, c.Rank() == 0, cfg.Progress, total-startStep, cfg.Batch*c.Size())
	wd := newWatchdog(cfg.CollectiveTimeout, fmt.Sprintf("rank %d on host %s (%s)", c.Rank(), c.Host(), pl.plan), errOut, c.Abort)
	defer wd.close()
	flt, err := faultsFromEnv(c.Rank())
	if err != nil {
		return Result{}, err
	}
	bk := newBuckets(c, net.Grads, layerStarts(net), bucketBytes(cfg.BucketMB, threads), wd)
	var tl *timeline
	if cfg.Timeline != "" {
		tl = newTimeline(c.Rank(), min(10, total/2), cfg.TimelineSteps)
	}
	var res Result
	var trainTime, commTime, waitTime time.Duration
	step := startStep
	for epoch := step/steps + 1; epoch <= cfg.Epochs && !(cfg.Steps > 0 && step >= cfg.Steps); epoch++ {
		// The epoch's batches depend only on (seed, epoch, step), so a
		// resumed run starts the loader at the checkpoint's step and sees
		// what the uninterrupted run saw.
		loader.StartAt(epoch, step%steps)
		start := time.Now()
		var lossSum float64
		first := step
		for s := step % steps; s < steps && !(cfg.Steps > 0 && step >= cfg.Steps); s++ {
			t0 := time.Now()
			b, ok := loader.Next()
			if !ok {
				panic("train: loader ended before the epoch's last step") // Steps() said otherwise
			}
			copy(net.Input(), b.X)
			copy(labels, b.Y)
			loader.Release(b) // the buffer goes back to the workers at once
			tIn := time.Now()
			net.Forward(cfg.Batch)
			loss, _ := net.Loss(labels)
			loss = flt.loss(step+1, loss)
			bk.poison = math.IsNaN(loss) || math.IsInf(loss, 0)
			t1 := time.Now()
			// Backward starts each bucket's all-reduce as soon as its layers
			// are done; wait collects them. The sums of all replicas'
			// gradients (each scaled by 1/ranks, see SetGradScale) are the
			// gradient of the mean loss over the global batch.
			net.Backward(bk)
			t2 := time.Now()
			comm, err := bk.wait(step)
			if err != nil {
				return res, fmt.Errorf("epoch %d step %d: all-reduce of gradients: %w", epoch, s, err)
			}
			t3 := time.Now()
			if !bk.healthy() {
				if bk.poison {
					return res, fmt.Errorf("epoch %d step %d: loss is %v on this rank; all ranks stop here (lower -lr?)", epoch, s+1, loss)
				}
				return res, fmt.Errorf("epoch %d step %d: another rank's loss or gradients are NaN/Inf; all ranks stop here", epoch, s+1)
			}
			opt.Step(net.Params, net.Grads, sched.LR(step))
			flt.perturb(step+1, net.Params)
			t4 := time.Now()
			if cfg.CheckEvery > 0 && (step+1)%cfg.CheckEvery == 0 {
				if err := checkParams(c, net.Params, step+1); err != nil {
					return res, err
				}
			}
			commTime += comm
			waitTime += t3.Sub(t2)
			if tl.on(step) {
				tl.span(step, "wait for batch", laneCompute, t0, tIn)
				tl.span(step, "forward+loss", laneCompute, tIn, t1)
				tl.span(step, "backward", laneCompute, t1, t2)
				tl.span(step, "wait for all-reduce", laneCompute, t2, t3)
				tl.span(step, "optimizer step", laneCompute, t3, t4)
				for i := range bk.b {
					a, b := bk.b[i].req.Span()
					tl.span(step, fmt.Sprintf("all-reduce bucket %d (%.2f MB)", i, float64(4*(bk.b[i].hi-bk.b[i].lo))/(1<<20)), laneMPI, a, b)
				}
			}
			lossSum += loss
			res.StepLosses = append(res.StepLosses, loss)
			step++
			prog.update(epoch, s+1, steps, step-startStep, loss)

			// Checkpoints: periodic ones from rank 0, and on a signal on
			// any rank, agreed by all at this step boundary.
			stop, err := cp.stopAgreed()
			if err != nil {
				return res, err
			}
			if stop || cp.due(step) {
				if err := agree(c, "writing a checkpoint", cp.save(step, epoch)); err != nil {
					return res, err
				}
			}
			if stop {
				log("hpctrain: signal received: checkpointed step %d; exiting with code %d for requeue", step, ExitRequeue)
				return res, ErrPreempted
			}
		}
		trainTime += time.Since(start)

		// Epoch summary: the mean training loss over all ranks, then the
		// test set, sharded and reduced.
		tl := []float64{lossSum}
		if err := c.AllreduceSum64(tl); err != nil {
			return res, err
		}
		testLoss, acc, err := evaluate(c, net, pipe.testLoad, pipe.test.Len())
		if err != nil {
			return res, err
		}
		// Images a lazy folder failed to decode were read as zeros; under
		// bad_input = "stop" every rank stops here, together.
		pipe.warn.flush(log, "read as zeros in this epoch (lazy decoding)")
		if err := agree(c, "reading images", pipe.lazyErr(cfg)); err != nil {
			return res, err
		}
		res = Result{
			StepLosses: res.StepLosses,
			Epoch:      epoch, Step: step, WorldSize: c.Size(), ThreadsPerRank: threads,
			TrainLoss: tl[0] / float64((step-first)*c.Size()), TestLoss: testLoss, TestAccuracy: acc,
			SamplesPerSecond: float64((step-startStep)*cfg.Batch*c.Size()) / trainTime.Seconds(),
			TrainSeconds:     trainTime.Seconds(),
			CommSeconds:      commTime.Seconds(), CommWaitSeconds: waitTime.Seconds(),
		}
		log("epoch %d/%d: train loss %.4f, test loss %.4f, test accuracy %.2f%%, %.0f samples/s, %.1f s",
			epoch, cfg.Epochs, res.TrainLoss, res.TestLoss, 100*res.TestAccuracy, res.SamplesPerSecond, res.TrainSeconds)
		if err := writeMetrics(metrics, res); err != nil {
			return res, err
		}
	}
	if err := agree(c, "writing the final checkpoint", cp.save(step, res.Epoch)); err != nil {
		return res, err
	}
	res.Final = true
	res.Params = net.Params
	if err := writeMetrics(metrics, res); err != nil {
		return res, err
	}
	log("final: test accuracy %.2f%% after %d epochs (%d steps, %d ranks), %.0f samples/s",
		100*res.TestAccuracy, res.Epoch, res.Step, res.WorldSize, res.SamplesPerSecond)
	if c.Size() > 1 {
		log("communication: all-reduce %.1f ms per step, of which the step waited %.1f ms (%.0f%%) after backward; %d buckets",
			1e3*res.CommSeconds/float64(step), 1e3*res.CommWaitSeconds/float64(step), 100*res.CommWaitSeconds/max(res.CommSeconds, 1e-9), len(bk.b))
	}
	if err := tl.write(cfg.Timeline); err != nil {
		return res, err
	}
	return res, nil
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

// groups maps the model's parameter tensors to the optimizer's groups.
func groups(net *model.Net) []optim.Group {
	var gs []optim.Group
	for _, g := range net.Groups() {
		gs = append(gs, optim.Group{Name: g.Name, Off: g.Off, Len: g.Len, NoDecay: g.Bias})
	}
	return gs
}

// evaluate computes the mean loss and accuracy over the whole test set of
// n samples: each rank takes a contiguous shard, read through the
// evaluation loader (no augmentation), and the sums are reduced.
func evaluate(c mpi.Comm, net *model.Net, ld *data.Loader, n int) (loss, acc float64, err error) {
	lo, hi := data.Shard(n, c.Rank(), c.Size())
	ld.StartRange(lo, hi)
	sums := make([]float64, 3) // loss*n, correct, n
	for {
		b, ok := ld.Next()
		if !ok {
			break
		}
		copy(net.Input(), b.X)
		net.Forward(b.N)
		l, correct := net.Loss(b.Y)
		sums[0] += l * float64(b.N)
		sums[1] += float64(correct)
		sums[2] += float64(b.N)
		ld.Release(b)
	}
	if err := c.AllreduceSum64(sums); err != nil {
		return 0, 0, fmt.Errorf("reducing test results: %w", err)
	}
	if sums[2] == 0 {
		return math.NaN(), 0, errors.New("empty test set")
	}
	return sums[0] / sums[2], sums[1] / sums[2], nil
}

func writeMetrics(f *os.File, r Result) error {
	if f == nil {
		return nil
	}
	b, _ := json.Marshal(r)
	if _, err := f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("writing metrics: %w", err)
	}
	return nil
}

// progress prints a line every interval on rank 0: epoch, step, loss,
// throughput and the estimated time left.
type progress struct {
	out           io.Writer
	on            bool
	every         time.Duration
	total, global int
	start, last   time.Time
}

func newProgress(out io.Writer, on bool, every time.Duration, totalSteps, globalBatch int) *progress {
	now := time.Now()
	return &progress{out: out, on: on && every > 0, every: every, total: totalSteps, global: globalBatch, start: now, last: now}
}

func (p *progress) update(epoch, s, steps, done int, loss float64) {
	if !p.on {
		return
	}
	now := time.Now()
	if now.Sub(p.last) < p.every && done != p.total {
		return
	}
	p.last = now
	el := now.Sub(p.start)
	rate := float64(done*p.global) / el.Seconds()
	eta := time.Duration(float64(el) / float64(done) * float64(p.total-done)).Round(time.Second)
	fmt.Fprintf(p.out, "epoch %d step %d/%d loss %.4f %.0f samples/s ETA %v\n", epoch, s, steps, loss, rate, eta)
}
