package train

import (
	"errors"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"hpctrain/data"
	"hpctrain/internal/cli"
	"hpctrain/mpi"
)

// TestLoadDataRefusesSizes: a batch, a run length or loaders that the data
// or the memory cannot hold are refused by loadData once the data set is
// known and before the loaders or the model allocate: one line, a usage
// error (exit 2), and far less allocated than asked for. (-batch
// 9223372036854775807 died in makeslice, -augment resize=32768x32768 and
// -batch 1000000000 in Go's out-of-memory handler.)
func TestLoadDataRefusesSizes(t *testing.T) {
	synth := func(change func(*Config)) Config {
		cfg := Defaults()
		cfg.Model, cfg.Dataset, cfg.Limit, cfg.TestLimit, cfg.Progress = "mlp", "synthetic", 640, 64, 0
		change(&cfg)
		return cfg
	}
	fmnist := Defaults()
	fmnist.DataDir, fmnist.Limit, fmnist.TestLimit = dataDir, 640, 64
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"batch above the samples", synth(func(c *Config) { c.Batch = 641 }), "batch = 641: 640 training samples do not fill one global batch of 641 x 1 ranks"},
		{"batch at the bound", synth(func(c *Config) { c.Batch = MaxBatch; c.Limit = 0 }), "do not fill one global batch"},
		// Sizes beyond any machine's memory (tens of TiB), so that the test
		// means the same on every machine.
		{"huge resize", func() Config { c := fmnist; c.Augment, c.Prefetch = "resize=8192x8192", 1024; return c }(), "lower -batch or -prefetch"},
		{"huge synthetic samples", synth(func(c *Config) { c.ImageShape, c.Limit = "8192x8192x3", 1<<20 }), "the synthetic training set (1048576 samples of 8192x8192x3) needs 192.0 TiB"},
		{"many synthetic samples", synth(func(c *Config) { c.Limit = math.MaxInt / 2 }), "synthetic training set"},
		{"cosine shorter than its warm-up", synth(func(c *Config) { c.ScheduleConfig.Name = "cosine"; c.WarmupSteps = 50 }), "cosine needs total steps (10) > warmup_steps (50)"},
		{"min_lr above the scaled lr", synth(func(c *Config) { c.ScheduleConfig.Name = "cosine"; c.MinLR = 0.5 }), "min_lr 0.5: must be in [0, lr=0.01]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.cfg.Validate(); err != nil {
				t.Fatalf("Validate refused it already: %v", err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			p, err := loadData(c.cfg, mpi.NewSingle(), nil)
			runtime.ReadMemStats(&after)
			if p != nil {
				p.close()
			}
			var ue cli.UsageError
			switch {
			case err == nil:
				t.Fatalf("accepted, want %q", c.want)
			case !errors.As(err, &ue):
				t.Errorf("%v is not a usage error (exit 2)", err)
			case strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), c.want):
				t.Errorf("%q, want one line containing %q", err, c.want)
			}
			// Fashion-MNIST itself is 55 MB; nothing of the refused size.
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 512<<20 {
				t.Errorf("allocated %d MiB before refusing", grew>>20)
			}
		})
	}
	// The same run with a fitting batch loads.
	p, err := loadData(synth(func(c *Config) { c.Batch = 640 }), mpi.NewSingle(), nil)
	if err != nil {
		t.Fatalf("batch = all samples: %v", err)
	}
	p.close()
}

// TestCheckRunOverflow: epochs x steps per epoch that would overflow an
// int (the step count wrapped, the cosine schedule's lr became 0 and the
// run ended at once with exit 0) is refused, whatever let it through.
func TestCheckRunOverflow(t *testing.T) {
	cfg := Defaults()
	cfg.Epochs, cfg.Batch = math.MaxInt/100, 1 // past Validate's bound, as if it were lifted
	cfg.ScheduleConfig.Name = "cosine"
	err := cfg.checkRun(1000, 1)
	if err == nil || !strings.Contains(err.Error(), "epochs = ") || !strings.Contains(err.Error(), "more steps than can be counted") {
		t.Errorf("epochs x 1000 steps: %v, want a refusal naming epochs", err)
	}
	cfg.Epochs = MaxEpochs
	if err := cfg.checkRun(1<<30, 1); err != nil {
		t.Errorf("MaxEpochs x 2^30 steps: %v", err)
	}
	if got := totalSteps(cfg, 1<<30, 1); got != MaxEpochs<<30 {
		t.Errorf("totalSteps = %d, want %d", got, MaxEpochs<<30)
	}
}

// TestDataConfigOwnsData: train.Config embeds data.Config, so the data
// keys, their defaults and their validation are package data's, and the
// run's view of them is the same fields.
func TestDataConfigOwnsData(t *testing.T) {
	cfg := Defaults()
	if !reflect.DeepEqual(cfg.DataConfig, data.Defaults()) {
		t.Errorf("train.Defaults' data section %+v, data.Defaults %+v", cfg.DataConfig, data.Defaults())
	}
	cfg.Dataset = "imagenet"
	if err := cfg.Validate(); err == nil || err.Error() != cfg.DataConfig.Validate().Error() {
		t.Errorf("train's validation of the data keys (%v) is not data's", err)
	}
}

// TestNamesTextUTF8: long class names are cut to their start and a
// digest, and the cut never falls inside a character: names with
// accents or CJK came out with half a rune, which printed as U+FFFD.
func TestNamesTextUTF8(t *testing.T) {
	names := []string{"épée", "ça", "日本語のクラス", "ëëëëëëëëëëëëëëëëëëëëëëëëëëëëëë"}
	for shift := 0; shift < 4; shift++ {
		n := append([]string{strings.Repeat("a", shift)}, names...)
		got := namesText(n)
		if !utf8.ValidString(got) {
			t.Errorf("namesText(%q) = %q: not valid UTF-8", n, got)
		}
		if !strings.Contains(got, "... fnv ") {
			t.Errorf("namesText(%q) = %q: no digest", n, got)
		}
	}
	if a, b := namesText([]string{strings.Repeat("é", 30), "x"}), namesText([]string{strings.Repeat("é", 30), "y"}); a == b {
		t.Errorf("different names give the same text %q", a)
	}
}
