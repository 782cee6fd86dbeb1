package data

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"hpctrain/internal/cli"
)

// Config is the data section of a training run's configuration: which data
// set is read and from where, how its samples are augmented and
// normalised, and how many goroutines load them. Every field is a TOML key
// and a flag of the same name (dashes for underscores; Flags binds them);
// the json tag says whether the key is part of the run's configuration
// hash ("-": it is not). A run's configuration embeds Config, so these
// keys sit at the top level of its file.
//
// Validate checks every key without reading a file; Open reads the data
// set; LoaderOptions gives the loaders' transforms and normalisation.
type Config struct {
	Dataset      string    `toml:"dataset" json:"dataset"`
	DataDir      string    `toml:"data_dir" json:"data_dir"`
	TestDir      string    `toml:"test_dir" json:"test_dir"`
	ValSplit     float64   `toml:"val_split" json:"val_split"`
	ImageShape   string    `toml:"image_shape" json:"image_shape"`
	FolderResize string    `toml:"folder_resize" json:"folder_resize"`
	Lazy         bool      `toml:"lazy" json:"lazy"`
	BadInput     string    `toml:"bad_input" json:"bad_input"`
	Mean         []float64 `toml:"mean" json:"mean"`
	Std          []float64 `toml:"std" json:"std"`
	Augment      Augment   `toml:"augment" json:"augment"`
	// The batches are the same for any number of loader workers and any
	// prefetch depth, so these stay out of the hash: ranks, and a run and
	// its resumption, may differ in them.
	DataWorkers int `toml:"data_workers" json:"-"`
	Prefetch    int `toml:"prefetch" json:"-"`
}

// Datasets are the values of Config.Dataset.
var Datasets = []string{"fashion-mnist", "mnist", "cifar10", "folder", "synthetic"}

// DefaultDataDir is where Debian's dataset-fashion-mnist package puts the
// files.
const DefaultDataDir = "/usr/share/datasets/fashion-mnist"

// Synthetic set sizes when no limit is given: those of Fashion-MNIST.
const (
	syntheticTrain = 60000
	syntheticTest  = 10000
)

// Defaults is the data configuration before any file or flag:
// Fashion-MNIST from its Debian package, no augmentation, no loader
// workers.
func Defaults() Config {
	return Config{Dataset: "fashion-mnist", DataDir: DefaultDataDir, FolderResize: "bilinear", BadInput: "stop"}
}

// Flags binds every field of c to a flag of fs.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Dataset, "dataset", c.Dataset, "data set: fashion-mnist or mnist (IDX files), cifar10 (binary batches), folder (root/<class>/<image>, PNG, JPEG, GIF), synthetic (generated, no files)")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory of the data set: the IDX files (raw or .gz), the CIFAR-10 .bin batches, or the folder's training tree")
	fs.StringVar(&c.TestDir, "test-dir", c.TestDir, "folder: the test/validation tree, with the same class directories as -data-dir")
	fs.Float64Var(&c.ValSplit, "val-split", c.ValSplit, "folder without -test-dir: hold out this `fraction` of each class for evaluation")
	fs.StringVar(&c.ImageShape, "image-shape", c.ImageShape, fmt.Sprintf("folder and synthetic: sample shape `HxWxC`, H and W 1 to %d, C 1 or 3 (default 32x32x3 for folder, 28x28x1 for synthetic)", MaxSide))
	fs.StringVar(&c.FolderResize, "folder-resize", c.FolderResize, "folder: resize images to -image-shape, bilinear or nearest; none makes an image of another size bad input")
	fs.BoolVar(&c.Lazy, "lazy", c.Lazy, "folder: decode each image when it is sampled instead of all at start (sets larger than memory)")
	fs.StringVar(&c.BadInput, "bad-input", c.BadInput, "unreadable, corrupt or wrong-size images in a folder: stop (an error naming the file) or skip (a counted warning)")
	fs.Var(floatList{&c.Mean}, "mean", "per-channel `means` subtracted from pixels scaled to [0, 1], e.g. 0.49,0.48,0.45 (default by data set: none for fashion-mnist, mnist and synthetic; CIFAR-10's; ImageNet's for colour folders)")
	fs.Var(floatList{&c.Std}, "std", "per-channel standard `deviations` the pixels are then divided by (with -mean)")
	fs.Var(&c.Augment, "augment", fmt.Sprintf("training augmentation `chain`, applied in order, seeded per sample, e.g. crop_pad=4,flip,rotate_deg=10,blur_sigma=0.5,resize=32x32,center_crop=28x28 (sizes up to %d); evaluation keeps only resizes and centre crops (TOML: this string or an [augment] table)", MaxSide))
	fs.IntVar(&c.DataWorkers, "data-workers", c.DataWorkers, "goroutines assembling batches ahead of the step, 0 to 256 (0: assemble on the training goroutine between steps); results do not depend on it")
	fs.IntVar(&c.Prefetch, "prefetch", c.Prefetch, "batches assembled ahead of the step, 0 to 1024 (0: 2 x data-workers, at least 1)")
}

// Validate checks the settings of a run that is to read the data:
// ValidateRecord's checks, and that data_dir is not Fashion-MNIST's for
// another data set of the same file names.
func (c *Config) Validate() error {
	if err := c.ValidateRecord(); err != nil {
		return err
	}
	return c.CheckDataDir()
}

// CheckDataDir refuses MNIST's or CIFAR-10's data set in Fashion-MNIST's
// directory (the default): MNIST's files are named as Fashion-MNIST's, so
// the run would train the wrong data set without a word.
func (c *Config) CheckDataDir() error {
	if c.DataDir == DefaultDataDir && (c.Dataset == "mnist" || c.Dataset == "cifar10") {
		return fmt.Errorf("config: dataset %s with data_dir %s, Fashion-MNIST's files (the default): give -data-dir (data_dir) with %s's", c.Dataset, c.DataDir, c.Dataset)
	}
	return nil
}

// CheckFolderKeys refuses folder_resize and bad_input other than their
// defaults for a data set that is not an image folder, where nothing reads
// them: a new run's settings, so that a key set for the wrong data set is
// not taken in silence. (Records of older runs may hold such settings, so
// ValidateRecord does not check this.)
func (c *Config) CheckFolderKeys() error {
	if c.Dataset == "folder" {
		return nil
	}
	d := Defaults()
	switch {
	case c.FolderResize != d.FolderResize:
		return fmt.Errorf("config: folder_resize = %q applies to dataset folder only (dataset is %s)", c.FolderResize, c.Dataset)
	case c.BadInput != d.BadInput:
		return fmt.Errorf("config: bad_input = %q applies to dataset folder only (dataset is %s)", c.BadInput, c.Dataset)
	}
	return nil
}

// ValidateRecord checks every key's domain and the keys' consistency, and
// names the key at fault: what a configuration recorded in a checkpoint
// must pass before anything is built from it. It reads no file; where the
// configuration alone fixes the sample shape (folder, synthetic, cifar10)
// it also checks the augmentation chain against it.
func (c *Config) ValidateRecord() error {
	bad := func(key string, v any, want string) error {
		return fmt.Errorf("config: %s = %v: must be %s", key, v, want)
	}
	folder := c.Dataset == "folder"
	known := false
	for _, d := range Datasets {
		known = known || c.Dataset == d
	}
	switch {
	case !known:
		return bad("dataset", strconv.Quote(c.Dataset), strings.Join(Datasets, ", "))
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
	in, known, err := c.shape()
	if err != nil {
		return err
	}
	ts, err := c.Augment.Transforms()
	if err != nil {
		return err
	}
	if known {
		if _, err := c.loaderOptions(in, ts, 0); err != nil {
			return err
		}
	} else if err := c.checkChannels(1); err != nil { // IDX: grey
		return err
	}
	return nil
}

// checkChannels refuses a mean and std of other than one value per
// channel of samples with channels channels.
func (c *Config) checkChannels(channels int) error {
	if c.Mean == nil || len(c.Mean) == channels {
		return nil
	}
	ch := "1 channel"
	if channels != 1 {
		ch = fmt.Sprintf("%d channels", channels)
	}
	return fmt.Errorf("config: mean %v and std %v: %d values each, but %s samples have %s: give -mean and -std (mean, std) one value per channel", c.Mean, c.Std, len(c.Mean), c.Dataset, ch)
}

// shape is the sample shape the configuration fixes before any file is
// read: folder and synthetic sets take image_shape (or their default),
// CIFAR-10 is 32x32x3. IDX files carry their own (known false).
func (c *Config) shape() (s Shape, known bool, err error) {
	switch {
	case c.ImageShape != "":
		s, err = ParseShape(c.ImageShape)
		if err != nil {
			return Shape{}, false, fmt.Errorf("config: image_shape = %q: %w", c.ImageShape, err)
		}
		return s, true, nil
	case c.Dataset == "folder":
		return Shape{H: 32, W: 32, C: 3}, true, nil
	case c.Dataset == "synthetic":
		return Shape{H: 28, W: 28, C: 1}, true, nil
	case c.Dataset == "cifar10":
		return CIFAR10Shape, true, nil
	}
	return Shape{}, false, nil
}

// ParseShape reads a sample shape "HxWxC": H and W 1 to MaxSide, C 1 or 3.
func ParseShape(s string) (Shape, error) {
	parts := strings.Split(s, "x")
	var v [3]int
	if len(parts) != 3 {
		return Shape{}, fmt.Errorf("must be HxWxC, e.g. 32x32x3")
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || (i < 2 && n > MaxSide) {
			return Shape{}, fmt.Errorf("must be HxWxC with H and W 1 to %d", MaxSide)
		}
		v[i] = n
	}
	if v[2] != 1 && v[2] != 3 {
		return Shape{}, fmt.Errorf("channels must be 1 or 3")
	}
	return Shape{H: v[0], W: v[1], C: v[2]}, nil
}

// LoaderOptions are the options of the loaders of a data set whose
// samples have shape in: the training chain (Augment) and its evaluation
// twin, the normalisation (Normalisation), the workers and the prefetch
// depth, and seed for the augmentation. A chain that does not fit in is
// an error naming the key.
func (c *Config) LoaderOptions(in Shape, seed uint64) (LoaderOptions, error) {
	ts, err := c.Augment.Transforms()
	if err != nil {
		return LoaderOptions{}, err
	}
	return c.loaderOptions(in, ts, seed)
}

func (c *Config) loaderOptions(in Shape, ts []Transform, seed uint64) (LoaderOptions, error) {
	if err := c.checkChannels(in.C); err != nil {
		return LoaderOptions{}, err
	}
	ev, err := EvalTransforms(ts, in)
	if err != nil {
		return LoaderOptions{}, fmt.Errorf("config: augment = %q: %w", string(c.Augment), err)
	}
	mean, std, _ := c.Normalisation(in.C)
	return LoaderOptions{Workers: c.DataWorkers, Prefetch: c.Prefetch, Mean: mean, Std: std,
		Transforms: ts, EvalTransforms: ev, Seed: seed}, nil
}

// Normalisation is the mean and std per channel of a data set with
// channels channels: the configured ones, else the data set's default.
// (Fashion-)MNIST and synthetic sets default to none (pixels in [0, 1]),
// the recipe of the book and of the PyTorch baseline
// (docs/background.md), so that results stay comparable; CIFAR-10 to its
// training set's statistics, and colour folders to ImageNet's, as
// torchvision's examples do. desc says which, for the start-up line.
func (c *Config) Normalisation(channels int) (mean, std []float32, desc string) {
	m, s := c.NormalisationValues(channels)
	if m == nil {
		return nil, nil, "none (pixels in [0, 1])"
	}
	for i := range m {
		mean = append(mean, float32(m[i]))
		std = append(std, float32(s[i]))
	}
	return mean, std, fmt.Sprintf("mean %v std %v", m, s)
}

// NormalisationValues is the mean and std Normalisation uses, as given
// (float64); nil for none.
func (c *Config) NormalisationValues(channels int) (mean, std []float64) {
	switch {
	case c.Mean != nil:
		return c.Mean, c.Std
	case c.Dataset == "cifar10":
		return []float64{0.4914, 0.4822, 0.4465}, []float64{0.2470, 0.2435, 0.2616}
	case c.Dataset == "folder" && channels == 3:
		return []float64{0.485, 0.456, 0.406}, []float64{0.229, 0.224, 0.225}
	}
	return nil, nil
}

// Augment is the training transform chain, in ParseTransforms syntax
// ("crop_pad=4,flip"), kept in the canonical form of the parsed chain so
// that equal chains hash equally. In a TOML file it is either that string
// or a table of TransformConfig keys:
//
//	augment = "crop_pad=4,flip"
//
//	[augment]
//	crop_pad = 4
//	flip = true
type Augment string

// Set parses a flag value.
func (a *Augment) Set(s string) error {
	ts, err := ParseTransforms([]string{s})
	if err != nil {
		return err
	}
	*a = Augment(ChainString(ts))
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
		tc, err := transformTable(v)
		if err != nil {
			return err
		}
		ts, err := tc.Transforms()
		if err != nil {
			return fmt.Errorf("augment.%w", err)
		}
		*a = Augment(ChainString(ts))
		return nil
	}
	return fmt.Errorf("augment: %T, want a string (\"crop_pad=4,flip\") or a table", v)
}

// transformTable reads an [augment] table's values, each checked for its
// key's type, into a TransformConfig. Errors name the key.
func transformTable(t map[string]any) (TransformConfig, error) {
	var c TransformConfig
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first bad key is the same every run
	for _, k := range keys {
		v := t[k]
		var err error
		switch k {
		case "resize":
			err = c.Resize.UnmarshalTOML(v)
		case "center_crop":
			err = c.CenterCrop.UnmarshalTOML(v)
		case "crop":
			err = c.Crop.UnmarshalTOML(v)
		case "crop_pad":
			n, ok := v.(int64)
			if !ok || n < 0 || n > 1024 {
				err = fmt.Errorf("%v: want an integer 0 to 1024", v)
			}
			c.CropPad = int(n)
		case "flip":
			var ok bool
			if c.Flip, ok = v.(bool); !ok {
				err = fmt.Errorf("%v: want true or false", v)
			}
		case "rotate_deg":
			c.RotateDeg, err = tableFloat(v)
		case "blur_sigma":
			c.BlurSigma, err = tableFloat(v)
		case "interp":
			var ok bool
			if c.Interp, ok = v.(string); !ok {
				err = fmt.Errorf("%v: want \"bilinear\" or \"nearest\"", v)
			}
		default:
			return c, fmt.Errorf("augment: unknown key %s (keys: resize, center_crop, crop_pad, crop, rotate_deg, flip, blur_sigma, interp)", k)
		}
		if err != nil {
			return c, fmt.Errorf("augment.%s: %w", k, err)
		}
	}
	return c, nil
}

func tableFloat(v any) (float64, error) {
	switch v := v.(type) {
	case int64:
		return float64(v), nil
	case float64:
		return v, nil
	}
	return 0, fmt.Errorf("%v: want a number", v)
}

// Transforms parses the chain.
func (a Augment) Transforms() ([]Transform, error) {
	ts, err := ParseTransforms([]string{string(a)})
	if err != nil {
		return nil, fmt.Errorf("config: augment = %q: %w", string(a), err)
	}
	return ts, nil
}

// ChainString is ts in ParseTransforms syntax, "" for no transforms.
func ChainString(ts []Transform) string {
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

// OpenOptions are what Open needs beyond the configuration.
type OpenOptions struct {
	// Limit and TestLimit keep only the first N training and test samples
	// (0: all); a synthetic set generates that many (default 60,000 and
	// 10,000). A folder, stored class by class, keeps N drawn from every
	// class in proportion to its size (LimitByClass).
	Limit, TestLimit int
	// Budget is the memory the sets kept in memory may take; nil: no
	// check.
	Budget *Budget
	// Warn receives a line per bad image skipped at load, or read as
	// zeros by a lazy folder (possibly from loader goroutines).
	Warn func(msg string)
	// Progress, when not nil, is called as the load goes on: after each
	// file of a data set in files (IDX, CIFAR-10), and as FolderOptions
	// says for a folder, possibly from several goroutines at once.
	Progress func()
}

// Sets is a configured data set, opened: its training part and its test
// (or held-out validation) part, with equal sample shapes and classes.
type Sets struct {
	Train, Test Dataset
	// ClassNames is an image folder's class directories, label k's name
	// (whatever -limit or -val-split made of its sets); nil for data sets
	// that do not name their classes.
	ClassNames []string
	// Notes are lines worth a warning at start-up: an image folder's
	// entries that are not read (Folder.Ignored).
	Notes   []string
	lazy    []*Folder
	skipBad bool
}

// Open reads the configured data set. Every error names the file or the
// key at fault, and a set that would not fit in opts.Budget is refused
// before it is allocated.
func (c *Config) Open(opts OpenOptions) (*Sets, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	s := &Sets{skipBad: c.BadInput == "skip"}
	tr, te, err := c.open(s, opts)
	if err != nil {
		return nil, err
	}
	if te.Shape() != tr.Shape() || te.Classes() != tr.Classes() {
		where := c.DataDir
		if c.TestDir != "" {
			where = c.TestDir
		}
		return nil, fmt.Errorf("test set (%s): %d classes of %dx%dx%d samples, but the training set has %d classes of %dx%dx%d",
			where, te.Classes(), te.Shape().H, te.Shape().W, te.Shape().C, tr.Classes(), tr.Shape().H, tr.Shape().W, tr.Shape().C)
	}
	limit := Limit
	if c.Dataset == "folder" {
		// A folder is stored class by class: its first samples would be
		// its first classes. (IDX and CIFAR-10 files are mixed already,
		// and keep their first N, the figures in README.md.)
		limit = func(d Dataset, n int) Dataset { return LimitByClass(d.(Labeled), n) }
	}
	s.Train, s.Test = limit(tr, opts.Limit), limit(te, opts.TestLimit)
	return s, nil
}

func (c *Config) open(s *Sets, opts OpenOptions) (train, test Dataset, err error) {
	switch c.Dataset {
	case "fashion-mnist", "mnist":
		return loadPair(func(train bool) (Dataset, error) { return loadMNIST(c.DataDir, train, opts.Budget) }, opts.Progress)
	case "cifar10":
		return loadPair(func(train bool) (Dataset, error) { return loadCIFAR10(c.DataDir, train, opts.Budget) }, opts.Progress)
	case "synthetic":
		shape, _, err := c.shape()
		if err != nil {
			return nil, nil, err
		}
		// Fixed seeds: the set is the same whatever the run's seed, as a
		// data set on disk would be; the test set is other samples.
		n, nt := syntheticTrain, syntheticTest
		if opts.Limit > 0 {
			n = opts.Limit
		}
		if opts.TestLimit > 0 {
			nt = opts.TestLimit
		}
		// Each set, and the float32 class templates it is generated from.
		hint := "lower -limit, -test-limit or -image-shape"
		for _, set := range []struct {
			what string
			n    int
		}{{"training", n}, {"test", nt}} {
			need := addBytes(mulBytes(set.n, shape.Size()), mulBytes(4*10, shape.Size()))
			if err := opts.Budget.Take(fmt.Sprintf("the synthetic %s set (%d samples of %dx%dx%d)", set.what, set.n, shape.H, shape.W, shape.C), need, hint); err != nil {
				return nil, nil, err
			}
		}
		return NewSynthetic(n, shape, 10, 1), NewSynthetic(nt, shape, 10, 2), nil
	case "folder":
		return c.openFolders(s, opts)
	}
	return nil, nil, fmt.Errorf("config: unknown dataset %q", c.Dataset)
}

// loadPair loads a data set's training part, then its test part, telling
// progress (if not nil) after each.
func loadPair(load func(train bool) (Dataset, error), progress func()) (train, test Dataset, err error) {
	var sets [2]Dataset
	for i, tr := range []bool{true, false} {
		if sets[i], err = load(tr); err != nil {
			return nil, nil, err
		}
		if progress != nil {
			progress()
		}
	}
	return sets[0], sets[1], nil
}

// openFolders reads the folder's training tree and its test tree, or
// splits off the validation part.
func (c *Config) openFolders(s *Sets, opts OpenOptions) (train, test Dataset, err error) {
	shape, _, err := c.shape()
	if err != nil {
		return nil, nil, err
	}
	fo := FolderOptions{Lazy: c.Lazy, SkipBad: c.BadInput == "skip", Warn: opts.Warn, Budget: opts.Budget, Progress: opts.Progress}
	switch c.FolderResize {
	case "none":
		fo.NoResize = true
	case "nearest":
		fo.Interp = Nearest
	}
	load := func(dir string) (*Folder, error) {
		f, err := LoadImageFolder(dir, shape, fo)
		var ie *ImageError
		if errors.As(err, &ie) {
			err = fmt.Errorf("%w (-bad-input skip skips bad images with a warning)", err)
		}
		if err == nil && f.Classes() < 2 {
			// Every label would be the one class: any network scores
			// 100%, and the run would say so.
			return nil, cli.Usage(fmt.Errorf("image folder %s: 1 class directory (%s), want 2 or more (root/<class>/<image>)%s", dir, f.names[0], f.ignored()))
		}
		if err == nil && c.Lazy {
			s.lazy = append(s.lazy, f)
		}
		if err == nil && f.Ignored() != "" {
			s.Notes = append(s.Notes, f.Ignored())
		}
		return f, err
	}
	tr, err := load(c.DataDir)
	if err != nil {
		return nil, nil, err
	}
	s.ClassNames = tr.ClassNames()
	if c.TestDir == "" {
		train, test = Split(tr, c.ValSplit, 1)
		return train, test, nil
	}
	te, err := load(c.TestDir)
	if err != nil {
		return nil, nil, err
	}
	if a, b := tr.ClassNames(), te.ClassNames(); strings.Join(a, "\x00") != strings.Join(b, "\x00") {
		return nil, nil, fmt.Errorf("image folder %s: classes %v, but the training tree %s has %v: the same class directories are needed", c.TestDir, b, c.DataDir, a)
	}
	return tr, te, nil
}

// Err is the first image a lazy folder failed to decode since the start,
// or nil; under bad_input = "skip" such images only warn.
func (s *Sets) Err() error {
	if s.skipBad {
		return nil
	}
	for _, f := range s.lazy {
		if err := f.Err(); err != nil {
			return fmt.Errorf("reading images: %w; stopping (-bad-input skip reads them as zeros with a warning)", err)
		}
	}
	return nil
}

// LoaderBytes is the memory a Loader of samples of shape in with batch
// and opts allocates: its Prefetch+1 batch buffers (float32 samples after
// the transforms, int32 labels) and each worker's sample buffers and
// transform scratch. It saturates at math.MaxInt64 instead of
// overflowing. A chain that does not fit in is an error.
func LoaderBytes(in Shape, batch int, opts LoaderOptions) (int64, error) {
	p, err := NewPipeline(in, opts.Transforms)
	if err != nil {
		return 0, err
	}
	out := p.Out()
	buffers := mulBytes(poolSize(opts), batch, 4*out.Size()+4)
	// Per worker: the raw and the transformed sample, the pipeline's two
	// intermediate buffers, and float scratch (blur) of about one
	// intermediate sample.
	perWorker := in.Size() + out.Size() + 6*p.max
	return addBytes(buffers, mulBytes(max(1, opts.Workers), perWorker)), nil
}

// poolSize is the number of batch buffers a Loader with opts owns.
func poolSize(opts LoaderOptions) int {
	prefetch := opts.Prefetch
	if prefetch == 0 {
		prefetch = max(2*opts.Workers, 1)
	}
	return prefetch + 1
}
