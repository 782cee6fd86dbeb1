package train

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math"
	"strings"
	"sync"
	"unicode/utf8"

	"hpctrain/data"
	"hpctrain/internal/cli"
	"hpctrain/mpi"
)

// This file connects package data to the run: it opens the configured data
// set (data.Config, embedded in Config), checks that the run's batch,
// length and loaders fit the data and this rank's memory, and builds the
// two loaders (training, with augmentation; evaluation, without) that the
// loop reads. What the data sets are is package data's business.

// warnings collects the data set's warnings (bad images skipped at load,
// or read as zeros by loader workers in lazy mode) for rank 0 to print
// from the training goroutine: the first few in full, then a count.
type warnings struct {
	mu    sync.Mutex
	n     int
	first []string
}

const maxWarnings = 10

func (w *warnings) add(msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n++
	if len(w.first) < maxWarnings {
		w.first = append(w.first, msg)
	}
}

// flush logs what arrived since the last flush.
func (w *warnings) flush(log func(string, ...any), what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.first {
		log("hpctrain: warning: %s", m)
	}
	if w.n > len(w.first) {
		log("hpctrain: warning: ... and %d more", w.n-len(w.first))
	}
	if w.n > 0 {
		log("hpctrain: warning: %d bad images %s", w.n, what)
	}
	w.n, w.first = 0, nil
}

// pipeline is what the training loop reads.
type pipeline struct {
	train, test data.Dataset
	badTrained  int          // images read as zeros in the batches trained on (took)
	badErr      error        // the first of them
	trainLoad   *data.Loader // Start/StartAt by epoch, with augmentation
	testLoad    *data.Loader // StartRange over a rank's shard, no augmentation
	sets        *data.Sets
	warn        *warnings
	desc        string       // for the start-up line
	budget      *data.Budget // this rank's memory, less what the data took
}

// identity says what a rank's data is, for the ranks to compare: the sets'
// lengths, the sample shape the model sees, and the classes, by name where
// a folder names them (the same counts under other names would label the
// same images differently on two ranks).
func (p *pipeline) identity() string {
	sh := p.trainLoad.Shape()
	id := fmt.Sprintf("%d training and %d test samples of %dx%dx%d, %d classes", p.train.Len(), p.test.Len(), sh.H, sh.W, sh.C, p.train.Classes())
	if names := p.classNames(); names != nil {
		id += " (" + namesText(names) + ")"
	}
	return id
}

// classNames is a folder's class directories, output k's name; nil for
// data sets that do not name their classes by directories.
func (p *pipeline) classNames() []string { return p.sets.ClassNames }

// namesText is class names as identity compares them: the names, or
// where they are long their start and a digest of all of them, so that
// identity stays within what the ranks compare (agreeText's textWidth).
func namesText(names []string) string {
	t := strings.Join(names, ", ")
	if len(t) <= 40 {
		return t
	}
	h := fnv.New64a()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
	}
	cut := 24
	for cut > 0 && !utf8.RuneStart(t[cut]) {
		cut-- // never half a character: the text is shown to people
	}
	return fmt.Sprintf("%s... fnv %016x", t[:cut], h.Sum64())
}

// loadData reads the configured data set and builds its loaders for rank
// of ranks. Every error names the file or the key at fault; a batch, a
// run length or loaders that do not fit the data or this rank's share of
// the node's memory are configuration errors (cli.UsageError), found
// before anything of that size is allocated. progress (if not nil) is
// called as the load goes on (data.OpenOptions.Progress).
func loadData(cfg Config, c mpi.Comm, progress func()) (*pipeline, error) {
	if err := cfg.DataConfig.Validate(); err != nil {
		return nil, cli.Usage(err)
	}
	budget := data.NewBudget(c.LocalSize())
	p := &pipeline{warn: &warnings{}, budget: budget}
	var err error
	p.sets, err = cfg.DataConfig.Open(data.OpenOptions{Limit: cfg.Limit, TestLimit: cfg.TestLimit, Budget: budget, Warn: p.warn.add, Progress: progress})
	if err != nil {
		if errors.As(err, new(*data.MemoryError)) || errors.Is(err, fs.ErrNotExist) {
			err = cli.Usage(err) // the configuration asks for more than there is, or for what is not there
		}
		return nil, err
	}
	p.train, p.test = p.sets.Train, p.sets.Test
	if p.test.Len() == 0 {
		// Found here, not after the first epoch's training.
		why := "the test set has no samples"
		if cfg.Dataset == "folder" && cfg.TestDir == "" {
			why = fmt.Sprintf("val_split = %g holds out no image: a class gives one only from 2 images on, and these classes have 1 each (add images, or give test_dir)", cfg.ValSplit)
		}
		return nil, cli.Usage(fmt.Errorf("data: %s", why))
	}
	if err := cfg.checkRun(p.train.Len(), c.Size()); err != nil {
		return nil, cli.Usage(err)
	}
	in := p.train.Shape()
	opts, err := cfg.DataConfig.LoaderOptions(in, cfg.Seed)
	if err != nil {
		return nil, cli.Usage(err)
	}
	// Two loaders (training, evaluation) of the same batch and pool.
	need, err := data.LoaderBytes(in, cfg.Batch, opts)
	if err != nil {
		return nil, cli.Usage(fmt.Errorf("config: augment: %w", err))
	}
	need = 2*min(need, math.MaxInt64/4) + 8*int64(p.train.Len()) // and the sampler's permutation
	if err := budget.Take(fmt.Sprintf("loading batches of %d samples (2 loaders)", cfg.Batch), need, "lower -batch or -prefetch"); err != nil {
		return nil, cli.Usage(err)
	}
	sampler := data.NewSampler(p.train.Len(), cfg.Batch, c.Rank(), c.Size(), cfg.Seed)
	if p.trainLoad, err = data.NewLoader(p.train, sampler, opts); err != nil {
		return nil, fmt.Errorf("training data: %w", err)
	}
	aug := data.ChainString(opts.Transforms)
	opts.Transforms, opts.Batch = opts.EvalTransforms, cfg.Batch
	if p.testLoad, err = data.NewLoader(p.test, nil, opts); err != nil {
		p.trainLoad.Close()
		return nil, fmt.Errorf("test data: %w", err)
	}
	out := p.trainLoad.Shape()
	_, _, norm := cfg.DataConfig.Normalisation(in.C)
	if aug == "" {
		aug = "none"
	}
	p.desc = fmt.Sprintf("data %s: %d training and %d test samples of %dx%dx%d, input %dx%dx%d; normalise %s; augment %s; %d loader workers",
		cfg.Dataset, p.train.Len(), p.test.Len(), in.H, in.W, in.C, out.H, out.W, out.C, norm, aug, cfg.DataWorkers)
	return p, nil
}

// lazyErr is the first image a lazy folder failed to decode since the
// start, or nil; under bad_input = "skip" such images only warn.
func (p *pipeline) lazyErr(cfg Config) error { return p.sets.Err() }

// took notes a training batch the run is about to train on: images a
// lazy folder read as zeros in it are counted, the first one's error
// kept. (The data set's own record, lazyErr, also holds batches the
// loader's workers read ahead, which depends on -data-workers.)
func (p *pipeline) took(b *data.Batch) {
	if b.Bad > 0 {
		if p.badTrained += b.Bad; p.badErr == nil {
			p.badErr = b.BadErr
		}
	}
}

// trainedErr is an error when the model has trained on images read as
// zeros, under bad_input = "stop": such a model is not checkpointed.
func (p *pipeline) trainedErr(cfg Config) error {
	if p.badErr == nil || cfg.BadInput == "skip" {
		return nil
	}
	return fmt.Errorf("reading images: %w (%d bad images read as zeros in the batches trained on); stopping (-bad-input skip reads them as zeros with a warning)", p.badErr, p.badTrained)
}

func (p *pipeline) close() {
	p.trainLoad.Close()
	p.testLoad.Close()
}
