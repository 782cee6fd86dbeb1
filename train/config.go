package train

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"hpctrain/gpu"
	"hpctrain/optim"
)

// optFloat is a flag for an optional float: unset leaves nil (the
// optimizer's default).
type optFloat struct{ p **float64 }

func (f optFloat) String() string {
	if f.p == nil || *f.p == nil {
		return ""
	}
	return strconv.FormatFloat(**f.p, 'g', -1, 64)
}

func (f optFloat) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return err
	}
	*f.p = &v
	return nil
}

// intList is a flag of comma-separated integers.
type intList struct{ p *[]int }

func (f intList) String() string {
	if f.p == nil {
		return ""
	}
	s := make([]string, len(*f.p))
	for i, v := range *f.p {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (f intList) Set(s string) error {
	*f.p = nil
	for _, part := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil {
			return fmt.Errorf("%q is not a list of integers", s)
		}
		*f.p = append(*f.p, v)
	}
	return nil
}

// Config is a training run's configuration. Every field is a TOML key and a
// flag of the same name (dashes in flags, underscores in TOML); flags given
// on the command line override the file.
type Config struct {
	// The optimizer (optimizer, lr, momentum, beta1, ...) and the learning
	// rate schedule (schedule, warmup_steps, lr_scaling, ...): their keys
	// sit at the top level of the file.
	optim.Config         `json:"-"`
	optim.ScheduleConfig `json:"-"`

	Model     string `toml:"model" json:"model"`
	Epochs    int    `toml:"epochs" json:"epochs"`
	Steps     int    `toml:"steps" json:"steps"`
	Batch     int    `toml:"batch" json:"batch"`
	Seed      uint64 `toml:"seed" json:"seed"`
	Limit     int    `toml:"limit" json:"limit"`
	TestLimit int    `toml:"test_limit" json:"test_limit"`
	Threads   int    `toml:"threads" json:"threads"`

	// The data pipeline (train/data.go, package data): what is read, how
	// it is augmented and normalised, and how many goroutines load it.
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

	Bind    string `toml:"bind" json:"bind"`
	CPUList string `toml:"cpu_list" json:"cpu_list"`
	UseSMT  bool   `toml:"use_smt" json:"use_smt"`

	// GPU placement (package gpu). Left out of the configuration hash: the
	// GPU a rank drives does not change the arithmetic, and checkpoints
	// resume on another node layout.
	GPUs     string `toml:"gpus" json:"-"`
	GPUShare bool   `toml:"gpu_share" json:"-"`

	CheckpointDir   string `toml:"checkpoint_dir" json:"-"`
	CheckpointEvery Every  `toml:"checkpoint_every" json:"-"`
	Keep            int    `toml:"keep" json:"-"`
	Resume          string `toml:"resume" json:"-"`

	BucketMB   float64 `toml:"bucket_mb" json:"bucket_mb"`
	CheckEvery int     `toml:"check_every" json:"check_every"`

	// Output only: excluded from the configuration hash.
	Timeline          string        `toml:"timeline" json:"-"`
	TimelineSteps     int           `toml:"timeline_steps" json:"-"`
	CollectiveTimeout time.Duration `toml:"collective_timeout" json:"-"`
	Metrics           string        `toml:"metrics" json:"-"`
	Progress          time.Duration `toml:"progress" json:"-"`
	Verbose           bool          `toml:"verbose" json:"-"`
	ReportBindings    bool          `toml:"report_bindings" json:"-"`
}

// Defaults is the configuration before any file or flag: the course's recipe
// (SGD, lr 0.01, momentum 0.9, batch 64 per rank) on the reference CNN.
func Defaults() Config {
	return Config{
		Config:         optim.Config{Name: "sgd", LR: 0.01, Momentum: 0.9},
		ScheduleConfig: optim.ScheduleConfig{Name: "constant", LRScaling: "none"},
		Model:          "cnn", Epochs: 1, Batch: 64,
		Seed: 1, Progress: 2 * time.Second,
		Dataset: "fashion-mnist", DataDir: "/usr/share/datasets/fashion-mnist", FolderResize: "bilinear", BadInput: "stop",
		Bind: "cores", BucketMB: -1, TimelineSteps: 20, CollectiveTimeout: 5 * time.Minute,
	}
}

// Flags binds every field of c to a flag of fs.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Model, "model", c.Model, "network: cnn (the book's reference CNN) or mlp (784-512-10)")
	fs.IntVar(&c.Epochs, "epochs", c.Epochs, "passes over the training set (>= 1)")
	fs.IntVar(&c.Steps, "steps", c.Steps, "stop after `N` steps in all, wherever that falls in an epoch (0: run every epoch)")
	fs.IntVar(&c.Batch, "batch", c.Batch, "samples per step `per rank`; the global batch is batch x ranks")
	fs.StringVar(&c.Config.Name, "optimizer", c.Config.Name, "optimizer: "+strings.Join(optim.Names(), ", "))
	fs.Float64Var(&c.LR, "lr", c.LR, "learning rate (>= 0; 0: the optimizer's default), before -lr-scaling")
	fs.Float64Var(&c.Momentum, "momentum", c.Momentum, "momentum of sgd, rmsprop, lars (>= 0)")
	fs.Float64Var(&c.Dampening, "dampening", c.Dampening, "SGD dampening")
	fs.BoolVar(&c.Nesterov, "nesterov", c.Nesterov, "use Nesterov momentum (sgd)")
	fs.Float64Var(&c.WeightDecay, "weight-decay", c.WeightDecay, "weight decay, never applied to biases (>= 0; adamw: decoupled, default 0.01)")
	fs.Var(optFloat{&c.Beta1}, "beta1", "first-moment decay of adam, adamw, adamax, nadam, lamb (default 0.9)")
	fs.Var(optFloat{&c.Beta2}, "beta2", "second-moment decay (default 0.999)")
	fs.Var(optFloat{&c.Eps}, "eps", "denominator guard (default per optimizer, as in PyTorch)")
	fs.Var(optFloat{&c.Rho}, "rho", "adadelta's decay (default 0.9)")
	fs.Var(optFloat{&c.Alpha}, "alpha", "rmsprop's decay (default 0.99)")
	fs.BoolVar(&c.Centered, "centered", c.Centered, "centered rmsprop")
	fs.BoolVar(&c.AMSGrad, "amsgrad", c.AMSGrad, "AMSGrad variant of adam/adamw")
	fs.Var(optFloat{&c.TrustCoefficient}, "trust-coefficient", "LARS trust coefficient (default 0.001)")
	fs.StringVar(&c.ScheduleConfig.Name, "schedule", c.ScheduleConfig.Name, "learning-rate schedule, stepped per iteration: "+strings.Join(optim.ScheduleNames(), ", "))
	fs.Var(intList{&c.Milestones}, "milestones", "multistep: steps after which the lr is multiplied by -gamma, e.g. 400,800")
	fs.Float64Var(&c.Gamma, "gamma", c.Gamma, "multistep factor (default 0.1) or exponential per-step factor")
	fs.Float64Var(&c.MinLR, "min-lr", c.MinLR, "cosine: the lr at the end")
	fs.IntVar(&c.WarmupSteps, "warmup-steps", c.WarmupSteps, "linear warm-up steps in front of the schedule")
	fs.Float64Var(&c.WarmupStartFactor, "warmup-start-factor", c.WarmupStartFactor, "warm-up starts at this fraction of the lr (default 1/3)")
	fs.StringVar(&c.LRScaling, "lr-scaling", c.LRScaling, "scale -lr by global batch / -base-batch: linear, sqrt or none (Goyal et al. 2017)")
	fs.IntVar(&c.BaseBatch, "base-batch", c.BaseBatch, "the batch -lr was tuned for (needed by -lr-scaling)")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of parameter initialisation and data shuffling")
	fs.StringVar(&c.Dataset, "dataset", c.Dataset, "data set: fashion-mnist or mnist (IDX files), cifar10 (binary batches), folder (root/<class>/<image>, PNG, JPEG, GIF), synthetic (generated, no files)")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory of the data set: the IDX files (raw or .gz), the CIFAR-10 .bin batches, or the folder's training tree")
	fs.StringVar(&c.TestDir, "test-dir", c.TestDir, "folder: the test/validation tree, with the same class directories as -data-dir")
	fs.Float64Var(&c.ValSplit, "val-split", c.ValSplit, "folder without -test-dir: hold out this `fraction` of each class for evaluation")
	fs.StringVar(&c.ImageShape, "image-shape", c.ImageShape, "folder and synthetic: sample shape `HxWxC`, C 1 or 3 (default 32x32x3 for folder, 28x28x1 for synthetic)")
	fs.StringVar(&c.FolderResize, "folder-resize", c.FolderResize, "folder: resize images to -image-shape, bilinear or nearest; none makes an image of another size bad input")
	fs.BoolVar(&c.Lazy, "lazy", c.Lazy, "folder: decode each image when it is sampled instead of all at start (sets larger than memory)")
	fs.StringVar(&c.BadInput, "bad-input", c.BadInput, "unreadable, corrupt or wrong-size images in a folder: stop (an error naming the file) or skip (a counted warning)")
	fs.IntVar(&c.Limit, "limit", c.Limit, "train on the first `N` training samples only (0: all)")
	fs.IntVar(&c.TestLimit, "test-limit", c.TestLimit, "evaluate on the first `N` test samples only (0: all)")
	fs.Var(floatList{&c.Mean}, "mean", "per-channel `means` subtracted from pixels scaled to [0, 1], e.g. 0.49,0.48,0.45 (default by data set: none for fashion-mnist, mnist and synthetic; CIFAR-10's; ImageNet's for colour folders)")
	fs.Var(floatList{&c.Std}, "std", "per-channel standard `deviations` the pixels are then divided by (with -mean)")
	fs.Var(&c.Augment, "augment", "training augmentation `chain`, applied in order, seeded per sample, e.g. crop_pad=4,flip,rotate_deg=10,blur_sigma=0.5,resize=32x32,center_crop=28x28; evaluation keeps only resizes and centre crops (TOML: this string or an [augment] table)")
	fs.IntVar(&c.DataWorkers, "data-workers", c.DataWorkers, "goroutines assembling batches ahead of the step (0: assemble on the training goroutine between steps); results do not depend on it")
	fs.IntVar(&c.Prefetch, "prefetch", c.Prefetch, "batches assembled ahead of the step (0: 2 x data-workers, at least 1)")
	fs.IntVar(&c.Threads, "threads", c.Threads, "compute threads `per rank` (default: cores in the allowed mask / local ranks)")
	fs.StringVar(&c.Bind, "bind", c.Bind, "placement of each rank's threads: cores (disjoint physical cores by local rank), numa (the rank's NUMA node), none")
	fs.StringVar(&c.CPUList, "cpu-list", c.CPUList, "this rank's cpus, e.g. 0-3,8 (overrides the automatic plan; must lie inside the allowed mask)")
	fs.BoolVar(&c.UseSMT, "use-smt", c.UseSMT, "let a rank's threads use SMT siblings of its cores")
	fs.StringVar(&c.GPUs, "gpus", c.GPUs, "GPU of each local rank, e.g. 0,1,2,3 (numbered as CUDA_VISIBLE_DEVICES leaves them), or none; empty: local rank mod GPUs, the best-linked GPUs when there are more GPUs than local ranks")
	fs.BoolVar(&c.GPUShare, "gpu-share", c.GPUShare, "let several local ranks drive one GPU (e.g. under MPS); without it more local ranks than GPUs is an error")
	fs.BoolVar(&c.ReportBindings, "report-bindings", c.ReportBindings, "rank 0 prints every rank's host, rank, local rank, cores and NUMA node, and its GPU (index, bus id, NUMA node)")
	fs.StringVar(&c.CheckpointDir, "checkpoint-dir", c.CheckpointDir, "rank 0 writes checkpoints here; SIGUSR1/SIGTERM then checkpoint and exit 85 (requeue)")
	fs.StringVar((*string)(&c.CheckpointEvery), "checkpoint-every", string(c.CheckpointEvery), "periodic checkpoints: every `N` steps (500) or a duration (10m); empty: on signals and at the end")
	fs.IntVar(&c.Keep, "keep", c.Keep, "keep the newest `N` checkpoints (0: all)")
	fs.StringVar(&c.Resume, "resume", c.Resume, "resume from `auto` (the newest valid checkpoint in -checkpoint-dir, if any) or a checkpoint file")
	fs.Float64Var(&c.BucketMB, "bucket-mb", c.BucketMB, "gradient bucket size in MB; buckets are all-reduced during backward (0: one all-reduce after backward; -1: auto, 1 MB when a rank has 2 or more threads, else 0)")
	fs.IntVar(&c.CheckEvery, "check-every", c.CheckEvery, "every `N` steps the ranks compare a checksum of their parameters and stop on divergence (0: never)")
	fs.StringVar(&c.Timeline, "timeline", c.Timeline, "write a Chrome trace (chrome://tracing, Perfetto) of the step's phases per rank to `FILE` (rank inserted before the extension)")
	fs.IntVar(&c.TimelineSteps, "timeline-steps", c.TimelineSteps, "steps the timeline records, from the 10th step on")
	fs.DurationVar(&c.CollectiveTimeout, "collective-timeout", c.CollectiveTimeout, "abort the whole job when a collective has not completed after this long (0: never)")
	fs.StringVar(&c.Metrics, "metrics", c.Metrics, "rank 0 writes JSON lines (one per epoch and a final one) to `FILE`")
	fs.DurationVar(&c.Progress, "progress", c.Progress, "interval between progress lines of rank 0 (0: off)")
	fs.BoolVar(&c.Verbose, "v", c.Verbose, "print launch and placement decisions")
}

// Parse builds the effective configuration from args: defaults, then the
// TOML file named by -config, then the flags given on the command line. It
// also returns whether -print-config was given.
func Parse(args []string, stderr io.Writer) (Config, bool, error) {
	cfg := Defaults()
	fs := flag.NewFlagSet("hpctrain train", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "TOML `file` with a key for any flag (flags given on the command line win)")
	printCfg := fs.Bool("print-config", false, "print the effective configuration as TOML and exit")
	cfg.Flags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: hpctrain train [flags]\n\nTrains a model data-parallel: under mpirun every rank trains a replica on its\nshard of each batch and the gradients are averaged by MPI all-reduce.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, false, err
	}
	if fs.NArg() > 0 {
		return cfg, false, fmt.Errorf("unexpected argument %q (flags start with -)", fs.Arg(0))
	}
	// Leaving -threads out means automatic; asking for 0 threads is a mistake.
	var zeroThreads bool
	fs.Visit(func(f *flag.Flag) { zeroThreads = zeroThreads || (f.Name == "threads" && f.Value.String() == "0") })
	if zeroThreads {
		return cfg, false, fmt.Errorf("config: threads = 0: must be >= 1 (leave -threads out for cores / local ranks)")
	}
	if *path != "" {
		// Re-apply the command line over the file: remember what was set.
		set := map[string]string{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = f.Value.String() })
		if err := LoadFile(*path, &cfg); err != nil {
			return cfg, false, err
		}
		for name, v := range set {
			if err := fs.Set(name, v); err != nil {
				return cfg, false, err
			}
		}
	}
	return cfg, *printCfg, cfg.Validate()
}

// LoadFile decodes the TOML file at path into cfg. Unknown keys are errors,
// and a syntax error names its line.
func LoadFile(path string, cfg *Config) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	md, err := toml.Decode(string(b), cfg)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return fmt.Errorf("config %s: line %d: %s", path, pe.Position.Line, pe.Message)
		}
		return fmt.Errorf("config %s: %w", path, err)
	}
	if un := md.Undecoded(); len(un) > 0 {
		keys := make([]string, len(un))
		for i, k := range un {
			keys[i] = k.String()
		}
		return fmt.Errorf("config %s: unknown key %s", path, strings.Join(keys, ", "))
	}
	return nil
}

// Validate checks every value's domain and names the key of the first that
// is outside it.
func (c *Config) Validate() error {
	bad := func(key string, v any, want string) error {
		return fmt.Errorf("config: %s = %v: must be %s", key, v, want)
	}
	if _, err := parseEvery(c.CheckpointEvery); err != nil {
		return err
	}
	switch {
	case c.Epochs < 1:
		return bad("epochs", c.Epochs, ">= 1")
	case c.Steps < 0:
		return bad("steps", c.Steps, ">= 0 (0: no limit)")
	case c.Batch < 1:
		return bad("batch", c.Batch, ">= 1")
	case c.LR < 0 || c.LR != c.LR:
		return bad("lr", c.LR, ">= 0")
	case c.Limit < 0:
		return bad("limit", c.Limit, ">= 0")
	case c.TestLimit < 0:
		return bad("test_limit", c.TestLimit, ">= 0")
	case c.Threads < 0:
		return bad("threads", c.Threads, ">= 0 (0: automatic)")
	case c.Keep < 0:
		return bad("keep", c.Keep, ">= 0")
	case c.Resume == "auto" && c.CheckpointDir == "":
		return fmt.Errorf("config: resume = \"auto\" needs checkpoint_dir")
	case c.BucketMB < 0 && c.BucketMB != -1:
		return bad("bucket_mb", c.BucketMB, ">= 0, or -1 (auto)")
	case c.CheckEvery < 0:
		return bad("check_every", c.CheckEvery, ">= 0")
	case c.TimelineSteps < 1:
		return bad("timeline_steps", c.TimelineSteps, ">= 1")
	case c.CollectiveTimeout < 0:
		return bad("collective_timeout", c.CollectiveTimeout, ">= 0")
	case c.Progress < 0:
		return bad("progress", c.Progress, ">= 0")
	}
	// GPU placement: syntax and duplicates here; the GPUs exist only on the node.
	if _, err := gpu.ParseSpec(c.GPUs, c.GPUShare); err != nil {
		return fmt.Errorf("config: gpus = %q: %w", c.GPUs, err)
	}
	return c.validateData()
}

// Hash is a digest of every field that must agree across ranks (all but the
// output-only ones), used to catch ranks started with different settings.
func (c *Config) Hash() string {
	b, _ := json.Marshal(c)
	h := sha256.New()
	h.Write(b)
	// The embedded optimizer and schedule settings have no JSON tags of
	// their own; hash their TOML form.
	toml.NewEncoder(h).Encode(struct {
		O optim.Config
		S optim.ScheduleConfig
	}{c.Config, c.ScheduleConfig})
	sum := h.Sum(nil)
	return hex.EncodeToString(sum[:8])
}

// WriteTOML prints c as a TOML file (what -print-config shows).
func (c *Config) WriteTOML(w io.Writer) error {
	return toml.NewEncoder(w).Encode(c)
}
