package data

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
)

// LoaderOptions configures a Loader.
type LoaderOptions struct {
	// Workers is the number of goroutines assembling batches ahead of the
	// trainer; 0 assembles each batch synchronously inside Next.
	Workers int
	// Prefetch is how many batches the workers may assemble ahead of the
	// one the caller holds (default 2*Workers, at least 1). The loader
	// owns Prefetch+1 batch buffers, reused from step to step.
	Prefetch int
	// Batch is the batch size for StartRange when there is no sampler; with
	// a sampler it is the sampler's per-rank batch (0 or equal).
	Batch int
	// Mean and Std normalise each channel at assembly, as Batcher:
	// x = (p/255 - Mean[c]) / Std[c]. nil means 0 and 1.
	Mean, Std []float32
	// Transforms augment each training sample (Start), in order, seeded
	// per sample by (Seed, epoch, sample index).
	Transforms []Transform
	// EvalTransforms are applied in StartRange instead of Transforms:
	// deterministic ones (resize, center_crop) that give the same shape as
	// Transforms, or none.
	EvalTransforms []Transform
	// Seed is the augmentation seed.
	Seed uint64
}

// Batch is one assembled batch. X and Y are views into a buffer the Loader
// reuses once the batch is released: copy what must outlive Release.
type Batch struct {
	X     []float32 // (N, H, W, C), normalised
	Y     []int32   // (N)
	N     int       // samples in this batch
	Step  int       // step in the epoch (or range), from 0
	Shape Shape     // of one sample
	// Bad counts the samples of this batch that failed to decode (a lazy
	// folder's), read as zeros; BadErr is the first one's error. A
	// trainer that must not learn from them checks the batches it takes,
	// not the data set, which workers may have read further ahead.
	Bad    int
	BadErr error

	x    []float32 // full capacity (B, H, W, C)
	y    []int32   // (B)
	held atomic.Bool
}

// Loader assembles the batches of an epoch, in step order, from a data set
// and a Sampler, with optional worker goroutines that prefetch ahead of the
// trainer. See the package documentation for its invariants.
//
// Start, StartRange, Next and Close are called from one goroutine; Release
// may be called from any.
type Loader struct {
	ds      Dataset
	sampler *Sampler
	opts    LoaderOptions
	batch   int
	train   *Pipeline
	eval    *Pipeline
	shape   Shape     // of an assembled sample
	lut     []float32 // (C, 256) normalised value of each byte

	ws   []*worker // max(1, Workers); ws[0] also serves synchronous mode
	pool int
	free chan *Batch   // buffers not in use
	ring []chan *Batch // ring[step%pool]: assembled batch of step

	// The current run (an epoch, or an evaluation range).
	running bool
	isEval  bool
	epoch   int
	lo, hi  int
	steps   int
	next    atomic.Int64 // next step a worker claims
	taken   int          // next step Next returns
	quit    chan struct{}
	wg      sync.WaitGroup
	out     atomic.Int32 // batches held by the caller
	closed  bool
}

// worker is one goroutine's private state: nothing here is shared.
type worker struct {
	s   *Scratch
	raw []byte // (H, W, C) sample as the data set gives it
	aug []byte // (H, W, C) after transforms
}

// NewLoader returns a loader of ds whose training epochs follow sampler
// (which the loader then owns: it calls SetEpoch). sampler may be nil for
// a loader used only with StartRange. Configuration errors (normalisation
// of the wrong length, transforms that do not fit the shape) are returned.
func NewLoader(ds Dataset, sampler *Sampler, opts LoaderOptions) (*Loader, error) {
	if ds == nil {
		panic("data: NewLoader with a nil data set")
	}
	in := ds.Shape()
	if opts.Workers < 0 || opts.Prefetch < 0 {
		return nil, fmt.Errorf("loader: workers %d, prefetch %d: want 0 or more", opts.Workers, opts.Prefetch)
	}
	batch := opts.Batch
	if sampler != nil {
		if batch != 0 && batch != sampler.batch {
			return nil, fmt.Errorf("loader: batch %d but the sampler's batch is %d", batch, sampler.batch)
		}
		if sampler.n > ds.Len() {
			return nil, fmt.Errorf("loader: sampler over %d samples but the data set has %d", sampler.n, ds.Len())
		}
		batch = sampler.batch
	}
	if batch < 1 {
		return nil, fmt.Errorf("loader: batch %d, want 1 or more (set LoaderOptions.Batch without a sampler)", batch)
	}
	train, err := NewPipeline(in, opts.Transforms)
	if err != nil {
		return nil, fmt.Errorf("loader: %w", err)
	}
	eval, err := NewPipeline(in, opts.EvalTransforms)
	if err != nil {
		return nil, fmt.Errorf("loader: eval %w", err)
	}
	shape := train.Out()
	if eval.Out() != shape {
		return nil, fmt.Errorf("loader: transforms give %v samples but eval transforms give %v; add resize or center_crop to the eval transforms", shape, eval.Out())
	}
	c := shape.C
	if (opts.Mean != nil && len(opts.Mean) != c) || (opts.Std != nil && len(opts.Std) != c) {
		return nil, fmt.Errorf("loader: mean %v and std %v, want %d values each", opts.Mean, opts.Std, c)
	}
	lut := make([]float32, c*256)
	for ch := 0; ch < c; ch++ {
		mean, inv := float32(0), float32(1)
		if opts.Mean != nil {
			mean = opts.Mean[ch]
		}
		if opts.Std != nil {
			if !(opts.Std[ch] > 0) {
				return nil, fmt.Errorf("loader: std[%d] = %g, want > 0", ch, opts.Std[ch])
			}
			inv = 1 / opts.Std[ch]
		}
		for p := 0; p < 256; p++ {
			// The same arithmetic as Batcher, so the two agree exactly.
			lut[ch*256+p] = (float32(p)*(1.0/255) - mean) * inv
		}
	}
	// Nothing below allocates a size that cannot exist.
	need, err := LoaderBytes(in, batch, opts)
	if m, src := Memory(); err != nil || need == math.MaxInt64 || (m > 0 && need > m) {
		return nil, fmt.Errorf("loader: %d batch buffers of %d samples of %dx%dx%d need %s, more than this machine's %s (%s); lower the batch or the prefetch depth",
			poolSize(opts), batch, shape.H, shape.W, shape.C, GiB(need), GiB(m), src)
	}
	l := &Loader{ds: ds, sampler: sampler, opts: opts, batch: batch, train: train, eval: eval,
		shape: shape, lut: lut, pool: poolSize(opts)}
	for w := 0; w < max(1, opts.Workers); w++ {
		l.ws = append(l.ws, &worker{s: NewScratch(), raw: make([]byte, in.Size()), aug: make([]byte, shape.Size())})
	}
	l.free = make(chan *Batch, l.pool)
	for k := 0; k < l.pool; k++ {
		b := &Batch{x: make([]float32, batch*shape.Size()), y: make([]int32, batch), Shape: shape}
		l.free <- b
		l.ring = append(l.ring, make(chan *Batch, 1))
	}
	return l, nil
}

// Shape is the shape of an assembled sample (after transforms).
func (l *Loader) Shape() Shape { return l.shape }

// Steps is the number of batches of the current run.
func (l *Loader) Steps() int { return l.steps }

// Start begins training epoch epoch: the sampler's permutation, with
// Transforms seeded by (Seed, epoch, sample index). It abandons any run in
// progress. Next then returns Steps() batches in step order.
func (l *Loader) Start(epoch int) { l.StartAt(epoch, 0) }

// StartAt is Start from step first of the epoch: Next returns the batches
// of steps first, first+1, ..., exactly as Start's run would, and the
// batches before first are never assembled. A run resumed from a
// checkpoint in mid-epoch uses it; Steps() still counts the whole epoch.
func (l *Loader) StartAt(epoch, first int) {
	if l.sampler == nil {
		panic("data: Loader.Start without a sampler")
	}
	l.stop()
	l.sampler.SetEpoch(epoch)
	l.isEval, l.epoch, l.steps = false, epoch, l.sampler.Steps()
	if first < 0 || first > l.steps {
		panic("data: Loader.StartAt step outside [0, Steps()]")
	}
	l.run(first)
}

// StartRange begins an evaluation pass over samples [lo, hi) in order,
// with EvalTransforms and no augmentation, in batches of the loader's
// batch (LoaderOptions.Batch, or the sampler's); the last batch may be
// short (Batch.N). It abandons any run in progress.
func (l *Loader) StartRange(lo, hi int) {
	if lo < 0 || hi < lo || hi > l.ds.Len() {
		panic("data: Loader.StartRange outside the data set")
	}
	l.stop()
	l.isEval, l.lo, l.hi = true, lo, hi
	l.steps = (hi - lo + l.batch - 1) / l.batch
	l.run(0)
}

// run launches the workers of a run set up by Start or StartRange, from
// step first.
func (l *Loader) run(first int) {
	if l.closed {
		panic("data: Loader used after Close")
	}
	l.running, l.taken = true, first
	l.next.Store(int64(first))
	if l.opts.Workers == 0 {
		return
	}
	l.quit = make(chan struct{})
	for _, w := range l.ws {
		l.wg.Add(1)
		go l.work(w, l.quit)
	}
}

// work claims steps in increasing order and assembles them. A worker takes
// a free buffer before it claims a step, so every claimed step has a
// buffer: the step Next waits for is always claimed or claimable, and a
// claimed step's ring slot is empty (claimed, unconsumed steps are fewer
// than the pool and consecutive).
func (l *Loader) work(w *worker, quit chan struct{}) {
	defer l.wg.Done()
	for {
		var b *Batch
		select {
		case b = <-l.free:
		case <-quit:
			return
		}
		step := int(l.next.Add(1) - 1)
		if step >= l.steps {
			l.free <- b
			return
		}
		l.fill(w, b, step)
		l.ring[step%l.pool] <- b
	}
}

// stop ends the current run: workers exit, and assembled batches that
// were not handed out return to the pool.
func (l *Loader) stop() {
	if !l.running {
		return
	}
	if l.quit != nil {
		close(l.quit)
		l.wg.Wait()
		l.quit = nil
	}
	for _, r := range l.ring {
		select {
		case b := <-r:
			l.free <- b
		default:
		}
	}
	l.running = false
}

// Next returns the next batch of the run in step order, or ok false at its
// end. The batch is the caller's until Release. It panics before Start, or
// when the caller holds every buffer (release batches as you finish them).
func (l *Loader) Next() (b *Batch, ok bool) {
	if !l.running {
		panic("data: Loader.Next before Start")
	}
	if l.taken >= l.steps {
		return nil, false
	}
	if int(l.out.Load()) >= l.pool {
		panic("data: Loader.Next while the caller holds every batch buffer (Release batches, or raise Prefetch)")
	}
	step := l.taken
	if l.opts.Workers == 0 {
		b = <-l.free
		l.fill(l.ws[0], b, step)
	} else {
		b = <-l.ring[step%l.pool]
	}
	l.taken++
	l.out.Add(1)
	b.held.Store(true)
	return b, true
}

// Release returns b's buffer to the loader. b must not be used afterwards.
func (l *Loader) Release(b *Batch) {
	if b == nil {
		return
	}
	if !b.held.CompareAndSwap(true, false) {
		panic("data: Loader.Release of a batch not held (released twice?)")
	}
	l.out.Add(-1)
	l.free <- b
}

// Queued is the number of assembled batches waiting for Next. With
// workers it rises to Prefetch+1 (every buffer the caller does not hold)
// or to the steps left in the run; it is always 0 without workers.
func (l *Loader) Queued() int {
	n := 0
	for _, r := range l.ring {
		n += len(r)
	}
	return n
}

// Stop ends the current run: the workers exit and the batches they had
// assembled ahead are dropped. Next panics until the next Start. Held
// batches may still be released.
func (l *Loader) Stop() { l.stop() }

// Close stops the workers. Batches still held may be released afterwards.
func (l *Loader) Close() {
	l.stop()
	l.closed = true
}

// fill assembles step of the current run into b with w's buffers.
func (l *Loader) fill(w *worker, b *Batch, step int) {
	size := l.shape.Size()
	n := l.batch
	var idx []int
	pipe := l.train
	if l.isEval {
		n = min(l.batch, l.hi-l.lo-step*l.batch)
		pipe = l.eval
	} else {
		idx = l.sampler.Batch(step)
	}
	b.N, b.Step = n, step
	b.X, b.Y = b.x[:n*size], b.y[:n]
	b.Bad, b.BadErr = 0, nil
	checked, _ := l.ds.(checkedSampler)
	for k := 0; k < n; k++ {
		var i int
		if l.isEval {
			i = l.lo + step*l.batch + k
		} else {
			i = idx[k]
		}
		if checked != nil {
			var err error
			if b.y[k], err = checked.SampleChecked(i, w.raw); err != nil {
				if b.Bad++; b.BadErr == nil {
					b.BadErr = err
				}
			}
		} else {
			b.y[k] = l.ds.Sample(i, w.raw)
		}
		px := w.raw
		if pipe.Len() > 0 {
			w.s.Seed(l.opts.Seed, l.epoch, i)
			pipe.Apply(w.aug, w.raw, w.s)
			px = w.aug
		}
		l.normalise(b.x[k*size:(k+1)*size], px[:size])
	}
}

// checkedSampler is a Dataset whose samples can fail to read (a lazy
// Folder): SampleChecked is Sample, returning the failure as well.
type checkedSampler interface {
	SampleChecked(i int, dst []byte) (int32, error)
}

// normalise converts bytes (H, W, C) to float32 through the lookup table.
func (l *Loader) normalise(dst []float32, src []byte) {
	switch c := l.shape.C; c {
	case 1:
		lut := l.lut[:256]
		for j, p := range src {
			dst[j] = lut[p]
		}
	case 3:
		l0, l1, l2 := l.lut[:256], l.lut[256:512], l.lut[512:768]
		for j := 0; j+2 < len(src); j += 3 {
			dst[j] = l0[src[j]]
			dst[j+1] = l1[src[j+1]]
			dst[j+2] = l2[src[j+2]]
		}
	default:
		for j, p := range src {
			dst[j] = l.lut[(j%c)*256+int(p)]
		}
	}
}

// Procs is the GOMAXPROCS for a rank with threads compute workers and
// workers loader workers: one P (the Go scheduler's right to run Go code)
// for each, so that a loader goroutine never holds a P that a compute
// worker, back from BLAS or a futex wait, needs, and the spare one that
// hpctrain/affinity.Procs adds to the compute threads' (it keeps Go's
// sysmon from taking Ps from long C calls). The cores stay the rank's: see
// "Loader workers and the trainer's compute threads" in the package
// documentation.
func Procs(threads, workers int) int { return threads + 1 + workers }
