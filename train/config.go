package train

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"hpctrain/affinity"
	"hpctrain/data"
	"hpctrain/gpu"
	"hpctrain/internal/cli"
	"hpctrain/internal/tomlfile"
	"hpctrain/model"
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

// DataConfig is the data section of the configuration (package data):
// embedded under this name because optim.Config already takes the field
// name Config.
type DataConfig = data.Config

// Config is a training run's configuration. Every field is a key: a TOML
// key (its toml tag), a flag of the same name with dashes for underscores
// (Flags), and in or out of the configuration hash (its json tag; "-" is
// out). The keys of the embedded sections (optimizer, schedule, data) sit
// at the top level of the file. Adding a key is adding a field with both
// tags and its line in Flags (or in its section's Flags); TestConfigKeys
// fails until all of them agree, and loadFile, -print-config and Hash need
// no change.
type Config struct {
	// The optimizer (optimizer, lr, momentum, beta1, ...) and the learning
	// rate schedule (schedule, warmup_steps, lr_scaling, ...). Their
	// fields have no json tags: Hash covers all of them through their TOML
	// form.
	optim.Config         `json:"-"`
	optim.ScheduleConfig `json:"-"`

	Model string `toml:"model" json:"model"`
	// SyncBN normalises every batch-norm layer with the global batch's
	// statistics (all-reduced) instead of each rank's own.
	SyncBN bool `toml:"sync_bn" json:"sync_bn"`
	// LabelSmoothing is the loss's label smoothing (PyTorch's definition).
	LabelSmoothing float64 `toml:"label_smoothing" json:"label_smoothing"`
	Epochs         int     `toml:"epochs" json:"epochs"`
	Steps          int     `toml:"steps" json:"steps"`
	Batch          int     `toml:"batch" json:"batch"`
	Seed           uint64  `toml:"seed" json:"seed"`
	Limit          int     `toml:"limit" json:"limit"`
	TestLimit      int     `toml:"test_limit" json:"test_limit"`
	Threads        int     `toml:"threads" json:"threads"`

	// The data pipeline (package data; train/data.go connects it to the
	// run): what is read, how it is augmented and normalised, and how many
	// goroutines load it.
	DataConfig

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
	// Init starts the run from another run's checkpoint (a file, or the
	// newest in a directory): its parameters and batch-norm statistics,
	// with this run's settings, at step 0 (fine-tuning). Out of the hash:
	// a run resumed from its own checkpoint no longer depends on it.
	Init string `toml:"init" json:"-"`

	// The compute device and its arithmetic: cpu, or cuda (hpctrain/gpu/
	// cudanet) with NCCL or MPI for the gradients, and fp16's dynamic loss
	// scaling (optim.LossScaler: the first scale, and the clean steps after
	// which it doubles). Out of the hash and of a checkpoint's settings:
	// layouts are the same on every device and in every precision, so a
	// checkpoint moves between them, and auto may resolve differently on
	// different nodes; the ranks agree on what they resolved to instead
	// (openDevice).
	Device            string  `toml:"device" json:"-"`
	Precision         string  `toml:"precision" json:"-"`
	Collective        string  `toml:"collective" json:"-"`
	CPUKernels        string  `toml:"cpu_kernels" json:"-"`
	LossScale         float64 `toml:"loss_scale" json:"-"`
	LossScaleInterval int     `toml:"loss_scale_interval" json:"-"`

	BucketMB   float64 `toml:"bucket_mb" json:"bucket_mb"`
	CheckEvery int     `toml:"check_every" json:"check_every"`

	// Output only: excluded from the configuration hash. Durations are
	// TOML integers of seconds or strings ("90s", "5m").
	Timeline          string        `toml:"timeline" json:"-"`
	TimelineSteps     int           `toml:"timeline_steps" json:"-"`
	CollectiveTimeout time.Duration `toml:"collective_timeout" json:"-"`
	StepTimeout       time.Duration `toml:"step_timeout" json:"-"`
	Metrics           string        `toml:"metrics" json:"-"`
	LossLog           string        `toml:"loss_log" json:"-"`
	Progress          time.Duration `toml:"progress" json:"-"`
	Verbose           bool          `toml:"verbose" json:"-"`
	ReportBindings    bool          `toml:"report_bindings" json:"-"`
}

// Bounds of the keys whose size drives an allocation or a step count.
// They are far above any real run and far below overflow: epochs x
// (samples per epoch) must fit an int, and a batch of MaxBatch samples of
// even 28x28 pixels is 50 GB of float32 per rank.
const (
	MaxEpochs        = 1_000_000
	MaxSteps         = 1_000_000_000_000
	MaxBatch         = 1 << 24
	MaxThreads       = 4096
	MaxTimelineSteps = 100_000
	MaxBucketMB      = 1 << 16
)

// Defaults is the configuration before any file or flag: the course's recipe
// (SGD, lr 0.01, momentum 0.9, batch 64 per rank) on the reference CNN.
func Defaults() Config {
	return Config{
		Config:         optim.Config{Name: "sgd", LR: 0.01, Momentum: 0.9},
		ScheduleConfig: optim.ScheduleConfig{Name: "constant", LRScaling: "none"},
		Model:          "cnn", Epochs: 1, Batch: 64,
		Seed: 1, Progress: 2 * time.Second,
		DataConfig: data.Defaults(),
		Bind:       "cores", BucketMB: -1, TimelineSteps: 20, CollectiveTimeout: 5 * time.Minute, StepTimeout: 10 * time.Minute,
		Device: "auto", Precision: "fp32", Collective: "auto", CPUKernels: "auto", LossScale: 1 << 16, LossScaleInterval: 2000,
	}
}

// The values of device, precision and collective.
var (
	Devices     = []string{"cpu", "cuda", "auto"}
	Precisions  = []string{"fp32", "tf32", "bf16", "fp16", "auto"}
	Collectives = []string{"mpi", "nccl", "shm", "auto"}
	CPUKernels  = []string{"dnnl", "dnnl-direct", "dnnl-all", "blas", "auto"}
)

// Flags binds every field of c to a flag of fs.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Model, "model", c.Model, "network: a built-in model ("+strings.Join(model.Names(), ", ")+"; hpctrain models lists them) or a description FILE.toml (hpctrain models NAME prints one to start from)")
	fs.BoolVar(&c.SyncBN, "sync-bn", c.SyncBN, "batch norm with the global batch's statistics, all-reduced over the ranks (default: each rank its own batch's, as DistributedDataParallel)")
	fs.Float64Var(&c.LabelSmoothing, "label-smoothing", c.LabelSmoothing, "label smoothing of the training loss, in [0, 1) (PyTorch's CrossEntropyLoss(label_smoothing)); the test loss stays plain cross-entropy")
	fs.IntVar(&c.Epochs, "epochs", c.Epochs, fmt.Sprintf("passes over the training set (1 to %d)", MaxEpochs))
	fs.IntVar(&c.Steps, "steps", c.Steps, fmt.Sprintf("stop after `N` steps in all, wherever that falls in an epoch (0: run every epoch; at most %d)", MaxSteps))
	fs.IntVar(&c.Batch, "batch", c.Batch, fmt.Sprintf("samples per step `per rank`, 1 to %d and at most the training samples / ranks; the global batch is batch x ranks", MaxBatch))
	fs.StringVar(&c.Config.Name, "optimizer", c.Config.Name, "optimizer: "+strings.Join(optim.Names(), ", "))
	fs.Float64Var(&c.LR, "lr", c.LR, "learning rate before -lr-scaling (>= 0; 0: the optimizer's default, PyTorch's); left out: 0.01 for sgd (the course's recipe), the optimizer's default for the others")
	fs.Float64Var(&c.Momentum, "momentum", c.Momentum, "momentum of sgd, rmsprop, lars (0 to below 1); left out: 0.9 for sgd (the course's recipe), 0 for the others")
	fs.Float64Var(&c.Dampening, "dampening", c.Dampening, "SGD dampening")
	fs.BoolVar(&c.Nesterov, "nesterov", c.Nesterov, "use Nesterov momentum (sgd, lars)")
	fs.Float64Var(&c.WeightDecay, "weight-decay", c.WeightDecay, "weight decay, never applied to biases (>= 0, lr x it at most 1; adamw: decoupled, default 0.01)")
	fs.Var(optFloat{&c.Beta1}, "beta1", "first-moment decay of adam, adamw, adamax, nadam, lamb (default 0.9)")
	fs.Var(optFloat{&c.Beta2}, "beta2", "second-moment decay (default 0.999)")
	fs.Var(optFloat{&c.Eps}, "eps", "denominator guard (default per optimizer, as in PyTorch)")
	fs.Var(optFloat{&c.Rho}, "rho", "adadelta's decay (default 0.9)")
	fs.Var(optFloat{&c.Alpha}, "alpha", "rmsprop's decay, 0 to below 1 (default 0.99)")
	fs.BoolVar(&c.Centered, "centered", c.Centered, "centered rmsprop")
	fs.BoolVar(&c.AMSGrad, "amsgrad", c.AMSGrad, "AMSGrad variant of adam/adamw")
	fs.Float64Var(&c.LRDecay, "lr-decay", c.LRDecay, "adagrad: lr / (1 + (t-1) x lr-decay) (>= 0)")
	fs.Float64Var(&c.InitialAccumulatorValue, "initial-accumulator-value", c.InitialAccumulatorValue, "adagrad: the accumulator's start value (>= 0)")
	fs.Var(optFloat{&c.MomentumDecay}, "momentum-decay", "nadam's momentum decay psi (default 0.004)")
	fs.Var(optFloat{&c.TrustCoefficient}, "trust-coefficient", "LARS trust coefficient, above 0 to 1 (default 0.001)")
	fs.StringVar(&c.ScheduleConfig.Name, "schedule", c.ScheduleConfig.Name, "learning-rate schedule, stepped per iteration: "+strings.Join(optim.ScheduleNames(), ", "))
	fs.Var(intList{&c.Milestones}, "milestones", "multistep: steps after which the lr is multiplied by -gamma, e.g. 400,800")
	fs.Float64Var(&c.Gamma, "gamma", c.Gamma, "multistep factor (default 0.1) or exponential per-step factor (at most 1)")
	fs.Float64Var(&c.MinLR, "min-lr", c.MinLR, "cosine: the lr at the end")
	fs.IntVar(&c.WarmupSteps, "warmup-steps", c.WarmupSteps, "linear warm-up steps in front of the schedule")
	fs.Float64Var(&c.WarmupStartFactor, "warmup-start-factor", c.WarmupStartFactor, "warm-up starts at this fraction of the lr (default 1/3)")
	fs.StringVar(&c.LRScaling, "lr-scaling", c.LRScaling, "scale -lr by global batch / -base-batch: linear, sqrt or none (Goyal et al. 2017)")
	fs.IntVar(&c.BaseBatch, "base-batch", c.BaseBatch, "the batch -lr was tuned for (needed by -lr-scaling)")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of parameter initialisation and data shuffling (0 to 2^63-1)")
	c.DataConfig.Flags(fs)
	fs.IntVar(&c.Limit, "limit", c.Limit, "train on `N` training samples only: the first N, or of an image folder N of every class in proportion to its size (0: all)")
	fs.IntVar(&c.TestLimit, "test-limit", c.TestLimit, "evaluate on `N` test samples only: the first N, or of an image folder N of every class in proportion to its size (0: all)")
	fs.IntVar(&c.Threads, "threads", c.Threads, fmt.Sprintf("compute threads `per rank`, 1 to %d (default: physical cores in the allowed mask / local ranks; on a hybrid CPU its performance cores, where there is one per rank)", MaxThreads))
	fs.StringVar(&c.Bind, "bind", c.Bind, "placement of each rank's threads: cores (disjoint physical cores by local rank), numa (the rank's NUMA node), none")
	fs.StringVar(&c.CPUList, "cpu-list", c.CPUList, "this rank's cpus, e.g. 0-3,8 (overrides the automatic plan; must lie inside the allowed mask)")
	fs.BoolVar(&c.UseSMT, "use-smt", c.UseSMT, "let a rank's threads use SMT siblings of its cores")
	fs.StringVar(&c.GPUs, "gpus", c.GPUs, "GPU of each local rank, e.g. 0,1,2,3 (numbered as CUDA_VISIBLE_DEVICES leaves them), or none; empty: local rank mod GPUs, the best-linked GPUs when there are more GPUs than local ranks")
	fs.BoolVar(&c.GPUShare, "gpu-share", c.GPUShare, gpuShareHelp)
	fs.StringVar(&c.Device, "device", c.Device, "where each rank computes: cpu, cuda (the rank's GPU: CUDA driver, cuBLAS, NVRTC and NCCL loaded at run time) or auto (cuda when placement gave the rank a GPU and CUDA loads, else cpu)")
	fs.StringVar(&c.Precision, "precision", c.Precision, "arithmetic of convolutions and linear layers: fp32 or bf16, or on cuda also tf32 or fp16 (fp32 master weights, loss and all-reduce; fp16 with dynamic loss scaling; bf16 on the CPU needs AVX512-BF16 or AMX-BF16); auto: bf16 where every rank's CPU or GPU has bf16 products (a GPU from sm_80), else fp32, and says which")
	fs.StringVar(&c.CPUKernels, "cpu-kernels", c.CPUKernels, "how convolutions and linear layers compute on the CPU: dnnl (oneDNN; 3x3 stride-1 convolutions with 32 or more channels, in 16s, run Winograd: oneDNN's F(4x4, 3x3) in fp32 where it has it, else and in bf16 hpctrain's F(2x2, 3x3)), dnnl-direct (as dnnl, without Winograd), dnnl-all (every convolution on oneDNN's direct primitives, none on hpctrain's own kernels: what bf16 gets where oneDNN runs AMX-BF16), blas (im2col and OpenBLAS; fp32 only) or auto (dnnl where linked in)")
	fs.StringVar(&c.Collective, "collective", c.Collective, "how gradients are summed: mpi (MPI_Allreduce), nccl (cuda only: device buffers, its own stream), shm (cpu only: in memory the ranks of a node share, MPI between nodes) or auto (nccl on cuda, shm on cpu)")
	fs.Float64Var(&c.LossScale, "loss-scale", c.LossScale, "fp16: the first loss scale (halved on overflow, the step skipped)")
	fs.IntVar(&c.LossScaleInterval, "loss-scale-interval", c.LossScaleInterval, "fp16: clean `steps` after which the loss scale doubles")
	fs.BoolVar(&c.ReportBindings, "report-bindings", c.ReportBindings, "rank 0 prints every rank's host, rank, local rank, cores and NUMA node, and its GPU (index, bus id, NUMA node)")
	fs.StringVar(&c.CheckpointDir, "checkpoint-dir", c.CheckpointDir, "rank 0 writes checkpoints here, and holds the directory while the run lasts; SIGUSR1/SIGTERM to the ranks then checkpoint and exit 85 (requeue; signal mpirun with USR1: it kills the ranks about 1 s after relaying TERM)")
	fs.StringVar((*string)(&c.CheckpointEvery), "checkpoint-every", string(c.CheckpointEvery), "periodic checkpoints: every `N` steps (500; in TOML an integer is steps too) or a duration (10m); empty or 0: only on signals and at the end")
	fs.IntVar(&c.Keep, "keep", c.Keep, "keep the newest `N` checkpoints (0: all)")
	fs.StringVar(&c.Resume, "resume", c.Resume, "resume from `auto` (the newest valid checkpoint in -checkpoint-dir, if any) or a checkpoint file")
	fs.StringVar(&c.Init, "init", c.Init, "start from the parameters and batch-norm statistics of another run's checkpoint (a .hpck `FILE`, or a directory: its newest), with this run's settings, at step 0 and a fresh optimizer (fine-tuning; the network must be the same: layers, input and classes); a checkpoint to resume from wins")
	fs.Float64Var(&c.BucketMB, "bucket-mb", c.BucketMB, fmt.Sprintf("gradient bucket size in MB, 0 to %d; buckets are all-reduced during backward (0: one all-reduce after backward; -1: auto, 1 MB when a rank has 2 or more threads, else 0)", MaxBucketMB))
	fs.IntVar(&c.CheckEvery, "check-every", c.CheckEvery, "every `N` steps the ranks compare a checksum of their parameters and stop on divergence (0: never)")
	fs.StringVar(&c.Timeline, "timeline", c.Timeline, "write a Chrome trace (chrome://tracing, Perfetto) of the step's phases per rank to `FILE` (rank inserted before the extension)")
	fs.IntVar(&c.TimelineSteps, "timeline-steps", c.TimelineSteps, fmt.Sprintf("steps the timeline records, from the 10th step on (1 to %d)", MaxTimelineSteps))
	fs.Var(seconds{&c.CollectiveTimeout}, "collective-timeout", collectiveTimeoutHelp)
	fs.Var(seconds{&c.StepTimeout}, "step-timeout", "abort the whole job when a training step or a batch of evaluation has gone this `duration` without finishing or reaching a collective, or the data's load without reading a file: stuck on every rank at once, or in a job of one rank, where no collective times out (integer seconds or a duration like 10m; 0: never)")
	fs.StringVar(&c.Metrics, "metrics", c.Metrics, "rank 0 writes JSON lines (one per epoch and a final one) to `FILE`")
	fs.StringVar(&c.LossLog, "loss-log", c.LossLog, "rank 0 writes every step's loss on its own batch to `FILE`, a line \"step loss\" each (to compare runs step by step)")
	fs.Var(seconds{&c.Progress}, "progress", "`interval` between progress lines of rank 0 (integer seconds or a duration like 5m; 0: off)")
	fs.BoolVar(&c.Verbose, "verbose", c.Verbose, "print launch and placement decisions")
	fs.BoolVar(&c.Verbose, "v", c.Verbose, "short for -verbose")
}

// Parse builds the effective configuration from args: defaults, then the
// TOML file named by -config, then the flags given on the command line. It
// also returns whether -print-config was given. -h prints the flags to
// stderr and returns flag.ErrHelp; every other error is one line, a
// cli.UsageError.
func Parse(args []string, stderr io.Writer) (Config, bool, error) {
	cfg := Defaults()
	fs := flag.NewFlagSet("hpctrain train", flag.ContinueOnError)
	var paths configFiles
	fs.Var(&paths, "config", "TOML `file` with a key for any flag; repeat it to layer files, later ones winning (flags given on the command line win over all)")
	printCfg := fs.Bool("print-config", false, "print the effective configuration as TOML and exit")
	cfg.Flags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: hpctrain train [flags]\n\nTrains a model data-parallel: under mpirun every rank trains a replica on its\nshard of each batch and the gradients are averaged by MPI all-reduce.\n\nEvery flag is also a key of the -config file (dashes become underscores).\nDurations are integer seconds or Go durations like 90s or 5m.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr, false); err != nil {
		return cfg, false, err
	}
	// Leaving -threads out means automatic; asking for 0 threads is a mistake.
	var zeroThreads bool
	fs.Visit(func(f *flag.Flag) { zeroThreads = zeroThreads || (f.Name == "threads" && f.Value.String() == "0") })
	if zeroThreads {
		return cfg, false, cli.Usage(fmt.Errorf("config: threads = 0: must be >= 1 (leave -threads out for cores / local ranks)"))
	}
	given := map[string]bool{} // keys set by a flag or the file
	fs.Visit(func(f *flag.Flag) { given[strings.ReplaceAll(f.Name, "-", "_")] = true })
	if len(paths) > 0 {
		// Re-apply the command line over the files: remember what was set.
		set := map[string]string{}
		fs.Visit(func(f *flag.Flag) {
			if f.Name != "config" {
				set[f.Name] = f.Value.String()
			}
		})
		for _, path := range paths {
			keys, err := loadFile(path, &cfg)
			if err != nil {
				return cfg, false, cli.Usage(err)
			}
			for _, k := range keys {
				given[k] = true
			}
		}
		for name, v := range set {
			if err := fs.Set(name, v); err != nil {
				return cfg, false, cli.Usage(fmt.Errorf("-%s %s: %w", name, v, err))
			}
		}
	}
	cfg.ownDefaults(given)
	return cfg, *printCfg, cli.Usage(cfg.Validate())
}

// configFiles is -config: each use adds a file, read in the order given.
// (A plain string flag would keep only the last, silently dropping the
// others.)
type configFiles []string

func (c *configFiles) String() string { return strings.Join(*c, ",") }

func (c *configFiles) Set(path string) error {
	if path == "" {
		return fmt.Errorf("empty file name")
	}
	*c = append(*c, path)
	return nil
}

// ownDefaults gives an optimizer other than sgd its own defaults
// (PyTorch's: optim.Config) for lr and momentum where neither a flag nor
// the file set them: Defaults' lr 0.01 and momentum 0.9 are the course's
// SGD recipe, and carried over they made rmsprop diverge (momentum 0.9
// where torch.optim.RMSprop has 0) and adam run at 10 times its lr.
func (c *Config) ownDefaults(given map[string]bool) {
	if c.Config.Name == "sgd" {
		return
	}
	if !given["lr"] {
		c.LR = 0 // the optimizer's default (optim.Config.WithDefaults)
	}
	if !given["momentum"] {
		c.Momentum = 0
	}
}

// key is one configuration key: a field of Config, or of a section it
// embeds, with a toml tag.
type key struct {
	name  string // TOML name; the flag is the same with dashes
	field reflect.StructField
	value reflect.Value // the field in the Config keys was called on
	// hashed: the key is part of Hash (json tag not "-"; the optimizer's
	// and the schedule's keys, which Hash takes from their TOML form).
	hashed bool
}

// keys lists every key of c in declaration order, sections flattened.
func (c *Config) keys() []key {
	var ks []key
	var walk func(v reflect.Value, section string)
	walk = func(v reflect.Value, section string) {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name := f.Tag.Get("toml")
			if f.Anonymous && f.Type.Kind() == reflect.Struct && name == "" {
				walk(v.Field(i), f.Type.String())
				continue
			}
			if !f.IsExported() || name == "-" {
				continue
			}
			hashed := f.Tag.Get("json") != "-"
			if section == "optim.Config" || section == "optim.ScheduleConfig" {
				hashed = true
			}
			ks = append(ks, key{name: name, field: f, value: v.Field(i), hashed: hashed})
		}
	}
	walk(reflect.ValueOf(c).Elem(), "")
	return ks
}

// loadFile decodes the TOML file at path into cfg, key by key, and returns
// the keys it set. Unknown keys are errors, and an error names its line
// and key. Durations are integers of seconds or strings ("90s", "5m", or
// "300" for seconds); a negative integer for an unsigned key (seed) is
// refused, not wrapped.
func loadFile(path string, cfg *Config) ([]string, error) {
	b, err := tomlfile.Read(path)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	var raw map[string]toml.Primitive
	md, err := toml.Decode(string(b), &raw)
	if err != nil {
		return nil, tomlError(path, err)
	}
	byName := map[string]key{}
	for _, k := range cfg.keys() {
		byName[k.name] = k
	}
	var unknown []string
	seen := map[string]bool{}
	for _, mk := range md.Keys() {
		name := mk[0]
		if seen[name] {
			continue // a key inside a table belongs to the table's key
		}
		seen[name] = true
		k, ok := byName[name]
		if !ok {
			unknown = append(unknown, name)
			continue
		}
		if err := k.decode(&md, raw[name]); err != nil {
			return nil, tomlError(path, err)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("config %s: unknown key %s (keys are the flags of hpctrain train -h, with underscores)", path, strings.Join(unknown, ", "))
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	return keys, nil
}

var durationType = reflect.TypeOf(time.Duration(0))

// decode sets k's field from the file's value p.
func (k key) decode(md *toml.MetaData, p toml.Primitive) error {
	ptr := k.value.Addr().Interface()
	switch {
	case k.field.Type == durationType:
		return md.PrimitiveDecode(p, &durationTOML{k.name, ptr.(*time.Duration)})
	case k.field.Type.Kind() == reflect.Uint64:
		return md.PrimitiveDecode(p, &uintTOML{k.name, ptr.(*uint64)})
	}
	err := md.PrimitiveDecode(p, ptr)
	if err != nil && strings.Contains(err.Error(), "incompatible types") {
		// The decoder's "TOML value has type int64; destination has
		// type string" said as the key's value and what it takes.
		var v any
		if md.PrimitiveDecode(p, &v) == nil {
			return typeError{line: errorLine(err), msg: fmt.Sprintf("%s = %s: %s", k.name, tomlText(v), wantOf(k.field.Type, v))}
		}
	}
	return err
}

// typeError is a key's value of the wrong TOML type, on line (0: unknown).
type typeError struct {
	line int
	msg  string
}

func (e typeError) Error() string { return e.msg }

// errorLine is the line a TOML decoder's message names ("toml: line 3
// (last key ...)"), or 0.
func errorLine(err error) int {
	var n int
	if _, err := fmt.Sscanf(err.Error(), "toml: line %d", &n); err != nil {
		return 0
	}
	return n
}

// tomlText is a decoded TOML value as it would be written.
func tomlText(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = tomlText(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprint(v)
}

// wantOf says what a key of Go type t takes; a scalar given for a string
// key is shown quoted, the likeliest fix.
func wantOf(t reflect.Type, v any) string {
	switch t.Kind() {
	case reflect.Pointer: // the optimizer's *float64 keys (beta1, eps, ...): unset is nil
		return wantOf(t.Elem(), v)
	case reflect.String:
		switch v := v.(type) {
		case int64, float64, bool:
			return fmt.Sprintf("want a string, in quotes (%q)", fmt.Sprint(v))
		case []any: // gpus = [0, 1]: the list is one string, "0,1"
			parts := make([]string, len(v))
			for i, e := range v {
				parts[i] = fmt.Sprint(e)
			}
			return fmt.Sprintf("want a string, in quotes (%q)", strings.Join(parts, ","))
		}
		return "want a string, in quotes"
	case reflect.Bool:
		return "want true or false"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "want an integer"
	case reflect.Float64, reflect.Float32:
		return "want a number"
	case reflect.Slice:
		switch t.Elem().Kind() {
		case reflect.Float64, reflect.Float32:
			return "want an array of numbers"
		case reflect.Int, reflect.Int64, reflect.Int32:
			return "want an array of integers"
		case reflect.String:
			return "want an array of strings, in quotes"
		}
	}
	return "want a " + t.Kind().String()
}

// tomlError is err about the file at path, with its line when known.
func tomlError(path string, err error) error {
	var te typeError
	if errors.As(err, &te) {
		if te.line > 0 {
			return fmt.Errorf("config %s: line %d: %s", path, te.line, te.msg)
		}
		return fmt.Errorf("config %s: %s", path, te.msg)
	}
	var pe toml.ParseError
	if errors.As(err, &pe) && pe.Position.Line > 0 {
		return fmt.Errorf("config %s: line %d: %s", path, pe.Position.Line, pe.Message)
	}
	return fmt.Errorf("config %s: %s", path, strings.TrimPrefix(err.Error(), "toml: "))
}

// durationTOML decodes a duration key: an integer or a float is seconds,
// a string a Go duration or an integer of seconds.
type durationTOML struct {
	name string
	p    *time.Duration
}

func (d *durationTOML) UnmarshalTOML(v any) error {
	var err error
	switch v := v.(type) {
	case int64:
		if v > math.MaxInt64/int64(time.Second) || v < math.MinInt64/int64(time.Second) {
			return fmt.Errorf("%s = %d: too many seconds", d.name, v)
		}
		*d.p = time.Duration(v) * time.Second
	case float64:
		if !(math.Abs(v) < float64(math.MaxInt64/int64(time.Second))) {
			return fmt.Errorf("%s = %v: want seconds or a duration like \"5m\"", d.name, v)
		}
		*d.p = time.Duration(v * float64(time.Second))
	case string:
		*d.p, err = parseSeconds(v)
		if err != nil {
			return fmt.Errorf("%s = %q: %w", d.name, v, err)
		}
	default:
		return fmt.Errorf("%s = %v: want integer seconds or a duration like \"5m\"", d.name, v)
	}
	return nil
}

// uintTOML decodes an unsigned key: a TOML integer >= 0 (TOML has no
// unsigned integers; a negative one must not wrap around).
type uintTOML struct {
	name string
	p    *uint64
}

func (u *uintTOML) UnmarshalTOML(v any) error {
	n, ok := v.(int64)
	if !ok || n < 0 {
		return fmt.Errorf("%s = %v: must be an integer from 0 to %d", u.name, v, int64(math.MaxInt64))
	}
	*u.p = uint64(n)
	return nil
}

// seconds is a flag of a duration: Go's syntax (90s, 1h30m) or an integer
// of seconds.
type seconds struct{ p *time.Duration }

func (s seconds) String() string {
	if s.p == nil {
		return ""
	}
	return s.p.String()
}

func (s seconds) Set(v string) error {
	d, err := parseSeconds(v)
	if err != nil {
		return err
	}
	*s.p = d
	return nil
}

// parseSeconds reads an integer of seconds or a Go duration.
func parseSeconds(v string) (time.Duration, error) {
	if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
		if n > math.MaxInt64/int64(time.Second) || n < math.MinInt64/int64(time.Second) {
			return 0, fmt.Errorf("%d seconds is out of range", n)
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("want integer seconds or a duration like 90s or 5m")
	}
	return d, nil
}

// Validate checks every value's domain, and the syntax of the optimizer,
// schedule, placement and data keys, and names the key of the first that
// is wrong: all that can be checked before MPI starts and the data loads.
// What depends on the data (the batch against its size, memory, the
// cosine schedule's length) is checked by checkRun.
func (c *Config) Validate() error {
	bad := func(key string, v any, want string) error {
		if s, ok := v.(string); ok {
			v = strconv.Quote(s) // as TOML writes it: "" and "cuda " show
		}
		return fmt.Errorf("config: %s = %v: must be %s", key, v, want)
	}
	if _, err := parseEvery(c.CheckpointEvery); err != nil {
		return err
	}
	// A built-in model, or a description file: read here, so that a bad
	// one is refused (naming its layer and key) before MPI starts.
	if !slices.Contains(model.Names(), c.Model) {
		if _, err := model.LoadDesc(c.Model); err != nil {
			return fmt.Errorf("config: %w", err) // "model FILE: layer 1 (conv): ...", the file named once
		}
	}
	switch {
	case c.Epochs < 1 || c.Epochs > MaxEpochs:
		return bad("epochs", c.Epochs, fmt.Sprintf(">= 1 (at most %d)", MaxEpochs))
	case c.Steps < 0 || c.Steps > MaxSteps:
		return bad("steps", c.Steps, fmt.Sprintf(">= 0 (0: no limit; at most %d)", MaxSteps))
	case c.Batch < 1 || c.Batch > MaxBatch:
		return bad("batch", c.Batch, fmt.Sprintf(">= 1 (at most %d per rank)", MaxBatch))
	case c.Seed > math.MaxInt64:
		return bad("seed", c.Seed, fmt.Sprintf("0 to %d", int64(math.MaxInt64)))
	case c.LR < 0 || c.LR != c.LR:
		return bad("lr", c.LR, ">= 0")
	case math.IsInf(c.LR, 0):
		return bad("lr", c.LR, "finite")
	case c.Limit < 0:
		return bad("limit", c.Limit, ">= 0")
	case c.TestLimit < 0:
		return bad("test_limit", c.TestLimit, ">= 0")
	case c.Threads < 0 || c.Threads > MaxThreads:
		return bad("threads", c.Threads, fmt.Sprintf(">= 0 (0: automatic; at most %d)", MaxThreads))
	case c.Keep < 0:
		return bad("keep", c.Keep, ">= 0")
	case c.Resume == "auto" && c.CheckpointDir == "":
		return fmt.Errorf("config: resume = \"auto\" needs checkpoint_dir")
	case !(c.BucketMB >= 0 && c.BucketMB <= MaxBucketMB) && c.BucketMB != -1:
		return bad("bucket_mb", c.BucketMB, fmt.Sprintf("0 to %d, or -1 (auto)", MaxBucketMB))
	case c.CheckEvery < 0:
		return bad("check_every", c.CheckEvery, ">= 0")
	case !slices.Contains(Devices, c.Device):
		return bad("device", c.Device, strings.Join(Devices, ", "))
	case !slices.Contains(Precisions, c.Precision):
		return bad("precision", c.Precision, strings.Join(Precisions, ", "))
	case !slices.Contains(Collectives, c.Collective):
		return bad("collective", c.Collective, strings.Join(Collectives, ", "))
	case !slices.Contains(CPUKernels, c.CPUKernels):
		return bad("cpu_kernels", c.CPUKernels, strings.Join(CPUKernels, ", "))
	case c.Device == "cpu" && c.Precision != "fp32" && c.Precision != "bf16" && c.Precision != "auto":
		return cli.Usage(fmt.Errorf("config: precision = %q needs device = \"cuda\": the CPU computes in fp32 or bf16 (or auto)", c.Precision))
	case c.Device == "cpu" && c.Precision == "bf16" && c.CPUKernels == "blas":
		return cli.Usage(fmt.Errorf("config: precision = \"bf16\" on the CPU needs cpu_kernels = \"dnnl\" (or auto): OpenBLAS has no bf16 GEMM"))
	case c.Device == "cpu" && c.Collective == "nccl":
		return cli.Usage(fmt.Errorf("config: collective = \"nccl\" needs device = \"cuda\" (NCCL sums device buffers); use mpi or auto"))
	case c.Device == "cuda" && c.Collective == "shm":
		return cli.Usage(fmt.Errorf("config: collective = \"shm\" needs device = \"cpu\" (it sums host memory); use nccl, mpi or auto"))
	case !(c.LossScale >= 1 && c.LossScale <= 1<<24) || float64(float32(c.LossScale)) != c.LossScale:
		// The scale is a float32 (optim.LossScaler), as GradScaler's is;
		// 1.1 was refused by the scaler only once a GPU run had started.
		return bad("loss_scale", c.LossScale, "1 to 2^24 and a float32 value (a power of two such as 65536 keeps scaling exact)")
	case c.LossScaleInterval < 1 || c.LossScaleInterval > optim.MaxScalerInterval:
		return bad("loss_scale_interval", c.LossScaleInterval, fmt.Sprintf("1 to %d", optim.MaxScalerInterval))
	case !(c.LabelSmoothing >= 0 && c.LabelSmoothing < 1):
		return bad("label_smoothing", c.LabelSmoothing, "in [0, 1)")
	case c.TimelineSteps < 1 || c.TimelineSteps > MaxTimelineSteps:
		return bad("timeline_steps", c.TimelineSteps, fmt.Sprintf("1 to %d", MaxTimelineSteps))
	case !timeoutOK(c.CollectiveTimeout):
		return bad("collective_timeout", c.CollectiveTimeout, timeoutRange)
	case !timeoutOK(c.StepTimeout):
		return bad("step_timeout", c.StepTimeout, timeoutRange)
	case c.Progress < 0:
		return bad("progress", c.Progress, ">= 0")
	}
	if err := c.Config.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := c.ScheduleConfig.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if _, err := affinity.ParsePolicy(c.Bind); err != nil {
		return fmt.Errorf("config: bind = %q: %w", c.Bind, err)
	}
	if _, err := affinity.Parse(c.CPUList); err != nil {
		return fmt.Errorf("config: cpu_list = %q: %w", c.CPUList, err)
	}
	// GPU placement: syntax and duplicates here; the GPUs exist only on the node.
	spec, err := gpu.ParseSpec(c.GPUs, c.GPUShare)
	if err != nil {
		return fmt.Errorf("config: gpus = %q: %w", c.GPUs, err)
	}
	if spec.Off && c.Device == "cuda" {
		return fmt.Errorf("config: device = \"cuda\" and gpus = \"none\" contradict each other: give the ranks GPUs, or use -device cpu")
	}
	if err := c.DataConfig.CheckFolderKeys(); err != nil {
		return err
	}
	return c.DataConfig.Validate()
}

// inert lists, as warnings, the settings this run will ignore: a key of
// another optimizer or schedule (-nesterov or -momentum with adam, -beta1
// with sgd, -gamma with cosine), and the checkpoint interval without a
// checkpoint directory (a job file may leave the directory to the sbatch
// script's flags). Warnings, not
// errors: a run already checkpointed with such a setting must still
// resume, and resuming compares the settings.
func (c *Config) inert() []string {
	var ws []string
	for _, k := range []struct {
		key  string
		set  bool
		want []string // the optimizers or schedules that read it
		of   string
	}{
		{"milestones", len(c.Milestones) > 0, []string{"multistep"}, c.ScheduleConfig.Name},
		{"gamma", c.Gamma != 0, []string{"multistep", "exponential"}, c.ScheduleConfig.Name},
		{"min_lr", c.MinLR != 0, []string{"cosine"}, c.ScheduleConfig.Name},
	} {
		if k.set && !slices.Contains(k.want, k.of) {
			ws = append(ws, fmt.Sprintf("%s applies to %s only, and this run uses %s: it has no effect", k.key, strings.Join(k.want, " and "), k.of))
		}
	}
	// Every optimizer key the optimizer does not read (beta1 with sgd,
	// momentum with adam), as optim knows them.
	for _, k := range c.Config.Unread() {
		ws = append(ws, fmt.Sprintf("%s applies to %s only, and this run uses %s: it has no effect", k, andList(optim.ReadBy(k)), c.Config.Name))
	}
	if c.WarmupStartFactor != 0 && c.WarmupSteps == 0 {
		ws = append(ws, "warmup_start_factor applies with warmup_steps above 0 only, and this run has no warm-up: it has no effect")
	}
	if c.BaseBatch != 0 && (c.LRScaling == "" || c.LRScaling == "none") {
		ws = append(ws, "base_batch applies with lr_scaling linear or sqrt only, and this run scales no lr: it has no effect")
	}
	if c.CheckpointDir == "" && (c.CheckpointEvery != "" || c.Keep != 0) {
		ws = append(ws, "checkpoint_every and keep apply with checkpoint_dir, and none is given: this run writes no checkpoint")
	}
	// Settings of one precision or device, given to another (auto may
	// choose fp16 on a GPU: no warning there).
	d := Defaults()
	if (c.LossScale != d.LossScale || c.LossScaleInterval != d.LossScaleInterval) && c.Precision != "fp16" && c.Precision != "auto" {
		ws = append(ws, fmt.Sprintf("loss_scale and loss_scale_interval apply to precision fp16 only, and this run uses %s: they have no effect", c.Precision))
	}
	if c.CPUKernels != d.CPUKernels && c.Device == "cuda" {
		ws = append(ws, "cpu_kernels applies to device cpu only, and this run uses cuda: it has no effect")
	}
	return ws
}

// scheduleNotes lists, as warnings, the schedule settings that this
// run's length of total steps makes inert or surprising: multistep
// milestones at or past its last step (a milestone m lowers the lr from
// step m on, and the steps are 0 to total-1), a multistep gamma above 1
// (each milestone raises the lr), and a warm-up of constant, multistep or
// exponential that lasts the whole run (cosine refuses one). Warnings, not
// errors, as PyTorch's schedulers take them; and a run resumed with a
// shorter -steps must still start.
func (c *Config) scheduleNotes(total int) []string {
	var ws []string
	s := c.ScheduleConfig
	if s.Name == "multistep" {
		var past []string
		for _, m := range s.Milestones {
			if m >= total {
				past = append(past, strconv.Itoa(m))
			}
		}
		if len(past) > 0 {
			effect := "they have no effect"
			if len(past) == 1 {
				effect = "it has no effect"
			}
			ws = append(ws, fmt.Sprintf("milestones %s: at or past this run's last step (%s, numbered from 0): %s", strings.Join(past, ", "), plural(total, "step"), effect))
		}
		if s.Gamma > 1 {
			ws = append(ws, fmt.Sprintf("gamma %g is above 1: each milestone raises the lr, it does not lower it", s.Gamma))
		}
	}
	if s.WarmupSteps >= total && s.Name != "cosine" {
		ws = append(ws, fmt.Sprintf("warmup_steps %d lasts the whole run (%s): the lr never reaches its full value", s.WarmupSteps, plural(total, "step")))
	}
	return ws
}

// andList is "a", "a and b", "a, b and c".
func andList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// checkRun checks what depends on the size of the training set, n
// samples shared by ranks ranks: the global batch fits in it, the run's
// step count (epochs x steps per epoch) fits an int, and the learning-rate
// schedule can run that long (cosine's warm-up shorter than the run, its
// min_lr at most the lr after -lr-scaling). loadData calls it once the
// data set is open, before the loaders allocate.
func (c *Config) checkRun(n, ranks int) error {
	if c.Batch > n/ranks {
		return fmt.Errorf("config: batch = %d: %d training samples do not fill one global batch of %d x %d ranks; lower -batch or raise -limit", c.Batch, n, c.Batch, ranks)
	}
	perEpoch := n / (c.Batch * ranks)
	if c.Epochs > math.MaxInt/perEpoch {
		return fmt.Errorf("config: epochs = %d: %d epochs of %d steps is more steps than can be counted; use fewer epochs or -steps", c.Epochs, c.Epochs, perEpoch)
	}
	lr, err := optim.ScaleLR(c.Config.WithDefaults().LR, c.Batch*ranks, c.BaseBatch, c.LRScaling)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if lr != c.Config.WithDefaults().LR {
		// The optimizer's bounds that involve the lr (lr x weight_decay at
		// most 1, a finite lr) hold for the lr it steps with.
		o := c.Config
		o.LR = lr
		if err := o.Validate(); err != nil {
			return fmt.Errorf("config: %w (lr %g is lr_scaling %s of %g for a global batch of %d x %d against base_batch %d)", err, lr, c.LRScaling, c.Config.WithDefaults().LR, c.Batch, ranks, c.BaseBatch)
		}
	}
	if _, err := optim.NewSchedule(c.ScheduleConfig, lr, totalSteps(*c, n, ranks)); err != nil {
		return fmt.Errorf("config: %w (%d steps of %d x %d samples)", err, totalSteps(*c, n, ranks), c.Batch, ranks)
	}
	return nil
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

// WriteTOML prints c as a TOML file (what -print-config shows), each key
// under a comment that is its flag's help: many keys take 0 or "" for a
// default or for "off" (gamma, threads, warmup_start_factor), which the
// value alone does not say.
func (c *Config) WriteTOML(w io.Writer) error {
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(c); err != nil {
		return err
	}
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	d := Defaults()
	d.Flags(fs)
	var out bytes.Buffer
	for _, line := range strings.SplitAfter(b.String(), "\n") {
		name, _, ok := strings.Cut(line, " = ")
		if f := fs.Lookup(strings.ReplaceAll(name, "_", "-")); ok && f != nil {
			_, usage := flag.UnquoteUsage(f)
			fmt.Fprintf(&out, "# %s\n", strings.ReplaceAll(usage, "\n", " "))
		}
		out.WriteString(line)
	}
	_, err := w.Write(out.Bytes())
	return err
}
