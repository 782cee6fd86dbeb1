package train

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/BurntSushi/toml"

	"hpctrain/data"
	"hpctrain/mpi"
)

// This file is the training run's side of package data: the data keys of
// Config, loading the configured data set, and the two loaders (training,
// with augmentation; evaluation, without) that the loop reads.

// datasets are the values of -dataset.
var datasets = []string{"fashion-mnist", "mnist", "cifar10", "folder", "synthetic"}

// Augment is the training transform chain, in data.ParseTransforms syntax
// ("crop_pad=4,flip"), kept in the canonical form of the parsed chain so
// that equal chains hash equally. In a TOML file it is either that string
// or a table of data.TransformConfig keys:
//
//	augment = "crop_pad=4,flip"
//
//	[augment]
//	crop_pad = 4
//	flip = true
type Augment string

// Set parses a flag value.
func (a *Augment) Set(s string) error {
	ts, err := data.ParseTransforms([]string{s})
	if err != nil {
		return err
	}
	*a = Augment(chainString(ts))
	return nil
}

func (a *Augment) String() string {
	if a == nil {
		return ""
	}
	return string(*a)
}

// UnmarshalTOML takes the string or the table form.
func (a *Augment) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case string:
		if err := a.Set(v); err != nil {
			return fmt.Errorf("augment: %w", err)
		}
		return nil
	case map[string]any:
		// Round-trip the table through TOML into TransformConfig, so that
		// its keys and types are checked by the same decoder as the file.
		var buf bytes.Buffer
		if err := toml.NewEncoder(&buf).Encode(v); err != nil {
			return fmt.Errorf("augment: %w", err)
		}
		var tc data.TransformConfig
		md, err := toml.Decode(buf.String(), &tc)
		if err != nil {
			return fmt.Errorf("augment: %w", err)
		}
		if un := md.Undecoded(); len(un) > 0 {
			return fmt.Errorf("augment: unknown key %s (keys: resize, center_crop, crop_pad, crop, rotate_deg, flip, blur_sigma, interp)", un[0])
		}
		ts, err := tc.Transforms()
		if err != nil {
			return fmt.Errorf("augment.%w", err)
		}
		*a = Augment(chainString(ts))
		return nil
	}
	return fmt.Errorf("augment: %T, want a string (\"crop_pad=4,flip\") or a table", v)
}

// Transforms parses the chain.
func (a Augment) Transforms() ([]data.Transform, error) {
	ts, err := data.ParseTransforms([]string{string(a)})
	if err != nil {
		return nil, fmt.Errorf("config: augment = %q: %w", string(a), err)
	}
	return ts, nil
}

func chainString(ts []data.Transform) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.String()
	}
	return strings.Join(s, ",")
}

// floatList is a flag of comma-separated numbers ("" is the empty list).
type floatList struct{ p *[]float64 }

func (f floatList) String() string {
	if f.p == nil {
		return ""
	}
	s := make([]string, len(*f.p))
	for i, v := range *f.p {
		s[i] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	return strings.Join(s, ",")
}

func (f floatList) Set(s string) error {
	*f.p = nil
	if strings.TrimSpace(s) == "" {
		return nil
	}
	for _, part := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
		if err != nil {
			return fmt.Errorf("%q is not a list of numbers", s)
		}
		*f.p = append(*f.p, v)
	}
	return nil
}

// parseImageShape reads "HxWxC".
func parseImageShape(s string) (data.Shape, error) {
	parts := strings.Split(s, "x")
	var v [3]int
	if len(parts) != 3 {
		return data.Shape{}, fmt.Errorf("config: image_shape = %q: must be HxWxC, e.g. 32x32x3", s)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 1<<14 {
			return data.Shape{}, fmt.Errorf("config: image_shape = %q: must be HxWxC with sizes 1 to 16384", s)
		}
		v[i] = n
	}
	if v[2] != 1 && v[2] != 3 {
		return data.Shape{}, fmt.Errorf("config: image_shape = %q: channels must be 1 or 3", s)
	}
	return data.Shape{H: v[0], W: v[1], C: v[2]}, nil
}

// imageShape is the sample shape of folder and synthetic sets.
func (c *Config) imageShape() (data.Shape, error) {
	switch {
	case c.ImageShape != "":
		return parseImageShape(c.ImageShape)
	case c.Dataset == "folder":
		return data.Shape{H: 32, W: 32, C: 3}, nil
	}
	return data.Shape{H: 28, W: 28, C: 1}, nil
}

// validateData checks the data keys (called by Validate).
func (c *Config) validateData() error {
	bad := func(key string, v any, want string) error {
		return fmt.Errorf("config: %s = %v: must be %s", key, v, want)
	}
	folder := c.Dataset == "folder"
	known := false
	for _, d := range datasets {
		known = known || c.Dataset == d
	}
	switch {
	case !known:
		return bad("dataset", strconv.Quote(c.Dataset), strings.Join(datasets, ", "))
	case c.DataDir == "" && c.Dataset != "synthetic":
		return fmt.Errorf("config: data_dir is empty: dataset %s reads its files from there", c.Dataset)
	case c.TestDir != "" && !folder:
		return fmt.Errorf("config: test_dir applies to dataset folder only (dataset is %s)", c.Dataset)
	case !(c.ValSplit >= 0 && c.ValSplit < 1):
		return bad("val_split", c.ValSplit, "in [0, 1)")
	case c.ValSplit > 0 && !folder:
		return fmt.Errorf("config: val_split applies to dataset folder only (dataset is %s)", c.Dataset)
	case folder && c.TestDir != "" && c.ValSplit > 0:
		return fmt.Errorf("config: test_dir and val_split both set: evaluate on one of them")
	case folder && c.TestDir == "" && c.ValSplit == 0:
		return fmt.Errorf("config: dataset folder needs test_dir (a tree with the same class directories) or val_split (a fraction held out, e.g. 0.1)")
	case c.ImageShape != "" && !folder && c.Dataset != "synthetic":
		return fmt.Errorf("config: image_shape applies to datasets folder and synthetic (%s has its own; use the resize transform in augment)", c.Dataset)
	case c.FolderResize != "bilinear" && c.FolderResize != "nearest" && c.FolderResize != "none":
		return bad("folder_resize", strconv.Quote(c.FolderResize), `"bilinear", "nearest" or "none"`)
	case c.Lazy && !folder:
		return fmt.Errorf("config: lazy applies to dataset folder only (dataset is %s)", c.Dataset)
	case c.BadInput != "stop" && c.BadInput != "skip":
		return bad("bad_input", strconv.Quote(c.BadInput), `"stop" or "skip"`)
	case c.DataWorkers < 0 || c.DataWorkers > 256:
		return bad("data_workers", c.DataWorkers, "0 to 256 (0: assemble batches on the training goroutine)")
	case c.Prefetch < 0 || c.Prefetch > 1024:
		return bad("prefetch", c.Prefetch, "0 to 1024 (0: 2 x data_workers, at least 1)")
	case (c.Mean == nil) != (c.Std == nil) || len(c.Mean) != len(c.Std):
		return fmt.Errorf("config: mean %v and std %v: give both, one value per channel", c.Mean, c.Std)
	}
	for i := range c.Std {
		if !(c.Std[i] > 0) || math.IsInf(c.Std[i], 0) || math.IsNaN(c.Mean[i]) || math.IsInf(c.Mean[i], 0) {
			return fmt.Errorf("config: mean %v, std %v: want finite means and stds > 0", c.Mean, c.Std)
		}
	}
	if folder || c.Dataset == "synthetic" {
		if _, err := c.imageShape(); err != nil {
			return err
		}
	}
	_, err := c.Augment.Transforms()
	return err
}

// normalisation is the mean and std per channel of a data set with c
// channels: the configured ones, else the data set's default. (Fashion-)
// MNIST and synthetic sets default to none (pixels in [0, 1]), the recipe
// of the book and of the PyTorch baseline (shared/BASELINES.md), so that
// results stay comparable; CIFAR-10 to its training set's statistics, and
// colour folders to ImageNet's, as torchvision's examples do.
func normalisation(cfg Config, c int) (mean, std []float32, desc string) {
	m, s := cfg.Mean, cfg.Std
	if m == nil {
		switch {
		case cfg.Dataset == "cifar10":
			m, s = []float64{0.4914, 0.4822, 0.4465}, []float64{0.2470, 0.2435, 0.2616}
		case cfg.Dataset == "folder" && c == 3:
			m, s = []float64{0.485, 0.456, 0.406}, []float64{0.229, 0.224, 0.225}
		default:
			return nil, nil, "none (pixels in [0, 1])"
		}
	}
	for i := range m {
		mean = append(mean, float32(m[i]))
		std = append(std, float32(s[i]))
	}
	return mean, std, fmt.Sprintf("mean %v std %v", m, s)
}

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
	trainLoad   *data.Loader // Start/StartAt by epoch, with augmentation
	testLoad    *data.Loader // StartRange over a rank's shard, no augmentation
	lazy        []*data.Folder
	warn        *warnings
	desc        string // for the start-up line
}

// loadData reads the configured data set and builds its loaders for rank
// of ranks. Every error names the file or the key at fault.
func loadData(cfg Config, c mpi.Comm) (*pipeline, error) {
	if err := cfg.validateData(); err != nil {
		return nil, err
	}
	p := &pipeline{warn: &warnings{}}
	tr, te, err := loadSets(cfg, p)
	if err != nil {
		return nil, err
	}
	if te.Shape() != tr.Shape() || te.Classes() != tr.Classes() {
		return nil, fmt.Errorf("test set (%s): %d classes of %dx%dx%d samples, but the training set has %d classes of %dx%dx%d",
			testWhere(cfg), te.Classes(), te.Shape().H, te.Shape().W, te.Shape().C, tr.Classes(), tr.Shape().H, tr.Shape().W, tr.Shape().C)
	}
	p.train, p.test = data.Limit(tr, cfg.Limit), data.Limit(te, cfg.TestLimit)

	ts, err := cfg.Augment.Transforms()
	if err != nil {
		return nil, err
	}
	in := tr.Shape()
	ev, err := data.EvalTransforms(ts, in)
	if err != nil {
		return nil, fmt.Errorf("config: augment: %w", err)
	}
	mean, std, norm := normalisation(cfg, in.C)
	opts := data.LoaderOptions{Workers: cfg.DataWorkers, Prefetch: cfg.Prefetch, Mean: mean, Std: std,
		Transforms: ts, EvalTransforms: ev, Seed: cfg.Seed}
	sampler := data.NewSampler(p.train.Len(), cfg.Batch, c.Rank(), c.Size(), cfg.Seed)
	if p.trainLoad, err = data.NewLoader(p.train, sampler, opts); err != nil {
		return nil, fmt.Errorf("training data: %w", err)
	}
	opts.Transforms, opts.Batch = ev, cfg.Batch
	if p.testLoad, err = data.NewLoader(p.test, nil, opts); err != nil {
		p.trainLoad.Close()
		return nil, fmt.Errorf("test data: %w", err)
	}
	out := p.trainLoad.Shape()
	aug := chainString(ts)
	if aug == "" {
		aug = "none"
	}
	p.desc = fmt.Sprintf("data %s: %d training and %d test samples of %dx%dx%d, input %dx%dx%d; normalise %s; augment %s; %d loader workers",
		cfg.Dataset, p.train.Len(), p.test.Len(), in.H, in.W, in.C, out.H, out.W, out.C, norm, aug, cfg.DataWorkers)
	return p, nil
}

func testWhere(cfg Config) string {
	if cfg.TestDir != "" {
		return cfg.TestDir
	}
	return cfg.DataDir
}

// loadSets reads the training and test (or validation) sets.
func loadSets(cfg Config, p *pipeline) (train, test data.Dataset, err error) {
	switch cfg.Dataset {
	case "fashion-mnist", "mnist":
		tr, err := data.LoadMNIST(cfg.DataDir, true)
		if err != nil {
			return nil, nil, err
		}
		te, err := data.LoadMNIST(cfg.DataDir, false)
		return tr, te, err
	case "cifar10":
		tr, err := data.LoadCIFAR10(cfg.DataDir, true)
		if err != nil {
			return nil, nil, err
		}
		te, err := data.LoadCIFAR10(cfg.DataDir, false)
		return tr, te, err
	case "synthetic":
		shape, err := cfg.imageShape()
		if err != nil {
			return nil, nil, err
		}
		// Fixed seeds: the set is the same whatever -seed, as a data set
		// on disk would be; the test set is other samples.
		n, nt := 60000, 10000
		if cfg.Limit > 0 {
			n = cfg.Limit
		}
		if cfg.TestLimit > 0 {
			nt = cfg.TestLimit
		}
		return data.NewSynthetic(n, shape, 10, 1), data.NewSynthetic(nt, shape, 10, 2), nil
	case "folder":
		return loadFolders(cfg, p)
	}
	return nil, nil, fmt.Errorf("config: unknown dataset %q", cfg.Dataset)
}

// loadFolders reads the folder's training tree and its test tree, or
// splits off the validation part.
func loadFolders(cfg Config, p *pipeline) (train, test data.Dataset, err error) {
	shape, err := cfg.imageShape()
	if err != nil {
		return nil, nil, err
	}
	opts := data.FolderOptions{Lazy: cfg.Lazy, SkipBad: cfg.BadInput == "skip", Warn: p.warn.add}
	switch cfg.FolderResize {
	case "none":
		opts.NoResize = true
	case "nearest":
		opts.Interp = data.Nearest
	}
	load := func(dir string) (*data.Folder, error) {
		f, err := data.LoadImageFolder(dir, shape, opts)
		var ie *data.ImageError
		if errors.As(err, &ie) {
			err = fmt.Errorf("%w (-bad-input skip skips bad images with a warning)", err)
		}
		if err == nil && cfg.Lazy {
			p.lazy = append(p.lazy, f)
		}
		return f, err
	}
	tr, err := load(cfg.DataDir)
	if err != nil {
		return nil, nil, err
	}
	if cfg.TestDir == "" {
		train, test = data.Split(tr, cfg.ValSplit, 1)
		return train, test, nil
	}
	te, err := load(cfg.TestDir)
	if err != nil {
		return nil, nil, err
	}
	if a, b := tr.ClassNames(), te.ClassNames(); strings.Join(a, "\x00") != strings.Join(b, "\x00") {
		return nil, nil, fmt.Errorf("image folder %s: classes %v, but the training tree %s has %v: the same class directories are needed", cfg.TestDir, b, cfg.DataDir, a)
	}
	return tr, te, nil
}

// lazyErr is the first image a lazy folder failed to decode since the
// start, or nil; under bad_input = "skip" such images only warn.
func (p *pipeline) lazyErr(cfg Config) error {
	if cfg.BadInput == "skip" {
		return nil
	}
	for _, f := range p.lazy {
		if err := f.Err(); err != nil {
			return fmt.Errorf("reading images: %w; stopping (-bad-input skip reads them as zeros with a warning)", err)
		}
	}
	return nil
}

func (p *pipeline) close() {
	p.trainLoad.Close()
	p.testLoad.Close()
}
