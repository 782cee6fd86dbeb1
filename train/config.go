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
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Config is a training run's configuration. Every field is a TOML key and a
// flag of the same name (dashes in flags, underscores in TOML); flags given
// on the command line override the file.
type Config struct {
	Model       string  `toml:"model" json:"model"`
	Epochs      int     `toml:"epochs" json:"epochs"`
	Steps       int     `toml:"steps" json:"steps"`
	Batch       int     `toml:"batch" json:"batch"`
	Optimizer   string  `toml:"optimizer" json:"optimizer"`
	LR          float64 `toml:"lr" json:"lr"`
	Momentum    float64 `toml:"momentum" json:"momentum"`
	Nesterov    bool    `toml:"nesterov" json:"nesterov"`
	WeightDecay float64 `toml:"weight_decay" json:"weight_decay"`
	Seed        uint64  `toml:"seed" json:"seed"`
	DataDir     string  `toml:"data_dir" json:"data_dir"`
	Limit       int     `toml:"limit" json:"limit"`
	TestLimit   int     `toml:"test_limit" json:"test_limit"`
	Threads     int     `toml:"threads" json:"threads"`

	// Output only: excluded from the configuration hash.
	Metrics  string        `toml:"metrics" json:"-"`
	Progress time.Duration `toml:"progress" json:"-"`
	Verbose  bool          `toml:"verbose" json:"-"`
}

// Defaults is the configuration before any file or flag: the course's recipe
// (SGD, lr 0.01, momentum 0.9, batch 64 per rank) on the reference CNN.
func Defaults() Config {
	return Config{
		Model: "cnn", Epochs: 1, Batch: 64, Optimizer: "sgd", LR: 0.01, Momentum: 0.9,
		Seed: 1, DataDir: "/usr/share/datasets/fashion-mnist", Progress: 2 * time.Second,
	}
}

// Flags binds every field of c to a flag of fs.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Model, "model", c.Model, "network: cnn (the book's reference CNN) or mlp (784-512-10)")
	fs.IntVar(&c.Epochs, "epochs", c.Epochs, "passes over the training set (>= 1)")
	fs.IntVar(&c.Steps, "steps", c.Steps, "stop after `N` steps in all, wherever that falls in an epoch (0: run every epoch)")
	fs.IntVar(&c.Batch, "batch", c.Batch, "samples per step `per rank`; the global batch is batch x ranks")
	fs.StringVar(&c.Optimizer, "optimizer", c.Optimizer, "optimizer: sgd")
	fs.Float64Var(&c.LR, "lr", c.LR, "learning rate (>= 0)")
	fs.Float64Var(&c.Momentum, "momentum", c.Momentum, "SGD momentum (>= 0)")
	fs.BoolVar(&c.Nesterov, "nesterov", c.Nesterov, "use Nesterov momentum")
	fs.Float64Var(&c.WeightDecay, "weight-decay", c.WeightDecay, "L2 weight decay, not applied to biases (>= 0)")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of parameter initialisation and data shuffling")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory with the Fashion-MNIST (or MNIST) IDX files, raw or .gz")
	fs.IntVar(&c.Limit, "limit", c.Limit, "train on the first `N` training samples only (0: all)")
	fs.IntVar(&c.TestLimit, "test-limit", c.TestLimit, "evaluate on the first `N` test samples only (0: all)")
	fs.IntVar(&c.Threads, "threads", c.Threads, "compute threads `per rank` (0: cores on the node / local ranks)")
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
	switch {
	case c.Epochs < 1:
		return bad("epochs", c.Epochs, ">= 1")
	case c.Steps < 0:
		return bad("steps", c.Steps, ">= 0 (0: no limit)")
	case c.Batch < 1:
		return bad("batch", c.Batch, ">= 1")
	case c.LR < 0 || c.LR != c.LR:
		return bad("lr", c.LR, ">= 0")
	case c.Momentum < 0:
		return bad("momentum", c.Momentum, ">= 0")
	case c.WeightDecay < 0:
		return bad("weight_decay", c.WeightDecay, ">= 0")
	case c.Limit < 0:
		return bad("limit", c.Limit, ">= 0")
	case c.TestLimit < 0:
		return bad("test_limit", c.TestLimit, ">= 0")
	case c.Threads < 0:
		return bad("threads", c.Threads, ">= 0 (0: automatic)")
	case c.Progress < 0:
		return bad("progress", c.Progress, ">= 0")
	}
	return nil
}

// Hash is a digest of every field that must agree across ranks (all but the
// output-only ones), used to catch ranks started with different settings.
func (c *Config) Hash() string {
	b, _ := json.Marshal(c)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// WriteTOML prints c as a TOML file (what -print-config shows).
func (c *Config) WriteTOML(w io.Writer) error {
	return toml.NewEncoder(w).Encode(c)
}
