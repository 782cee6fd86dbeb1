package train

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"hpctrain/internal/cli"
	"hpctrain/model"
)

// flagSet is a FlagSet with c's flags, as Parse registers them.
func flagSet(c *Config) *flag.FlagSet {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Flags(fs)
	return fs
}

// otherValue is a flag value for k that differs from its default.
func otherValue(t *testing.T, k key) string {
	t.Helper()
	switch k.field.Type.String() {
	case "bool":
		return "true"
	case "int", "uint64":
		return "7"
	case "float64", "*float64":
		return "0.375"
	case "string", "train.Every":
		return "7"
	case "time.Duration":
		return "7s"
	case "[]int":
		return "3,9"
	case "[]float64":
		return "0.5"
	case "data.Augment":
		return "flip"
	}
	t.Fatalf("key %s: no test value for type %s", k.name, k.field.Type)
	return ""
}

// TestConfigKeys: every key of Config, its sections included, has a TOML
// name, an explicit place in or out of the configuration hash (a json
// tag, or the optimizer's and schedule's sections, hashed whole), and a
// flag of the same name bound to the same field; and the hash follows the
// declaration: changing a hashed key changes it, changing any other does
// not.
func TestConfigKeys(t *testing.T) {
	base := Defaults()
	ks := base.keys()
	if len(ks) < 60 {
		t.Fatalf("only %d keys found: the walk over Config misses sections", len(ks))
	}
	seen := map[string]bool{}
	for _, k := range ks {
		if k.name == "" || k.name != strings.ToLower(k.name) || strings.Contains(k.name, "-") {
			t.Errorf("field %s: TOML name %q, want lower_case", k.field.Name, k.name)
		}
		if seen[k.name] {
			t.Errorf("TOML key %s declared twice", k.name)
		}
		seen[k.name] = true
		if _, ok := k.field.Tag.Lookup("json"); !ok && !inOptim(k.name) {
			t.Errorf("key %s (field %s): no json tag: say whether it is in the configuration hash (json:\"name\") or out (json:\"-\")", k.name, k.field.Name)
		}

		c := Defaults()
		fs := flagSet(&c)
		name := strings.ReplaceAll(k.name, "_", "-")
		f := fs.Lookup(name)
		if f == nil {
			t.Errorf("key %s has no flag -%s", k.name, name)
			continue
		}
		if f.Usage == "" {
			t.Errorf("flag -%s has no help", name)
		}
		field := keyNamed(t, &c, k.name).value
		before := field.Interface()
		v := otherValue(t, k)
		if err := fs.Set(name, v); err != nil {
			t.Errorf("-%s %s: %v", name, v, err)
			continue
		}
		if reflect.DeepEqual(before, field.Interface()) {
			t.Errorf("-%s %s did not change field %s: the flag is bound to another field", name, v, k.field.Name)
			continue
		}
		if changed := c.Hash() != base.Hash(); changed != k.hashed {
			t.Errorf("key %s: declared in the hash %v, but changing it changes the hash: %v", k.name, k.hashed, changed)
		}
	}
	// Every flag but the command's own is a key (and -v is -verbose).
	c := Defaults()
	flagSet(&c).VisitAll(func(f *flag.Flag) {
		if !seen[strings.ReplaceAll(f.Name, "-", "_")] && f.Name != "v" {
			t.Errorf("flag -%s is no TOML key", f.Name)
		}
	})
}

// inOptim reports whether key belongs to the optimizer's or the
// schedule's section, whose fields carry no json tags (Hash takes them
// whole from their TOML form).
func inOptim(name string) bool {
	for _, s := range []any{Defaults().Config, Defaults().ScheduleConfig} {
		t := reflect.TypeOf(s)
		for i := 0; i < t.NumField(); i++ {
			if t.Field(i).Tag.Get("toml") == name {
				return true
			}
		}
	}
	return false
}

// keyNamed is c's key name.
func keyNamed(t *testing.T, c *Config, name string) key {
	t.Helper()
	for _, k := range c.keys() {
		if k.name == name {
			return k
		}
	}
	t.Fatalf("no key %s", name)
	return key{}
}

// TestPrintConfigRoundTrip: what -print-config writes, read back as a
// -config file, is the same configuration, every key set away from its
// default included.
func TestPrintConfigRoundTrip(t *testing.T) {
	args := strings.Fields("-model mlp -epochs 3 -steps 50 -batch 32 -seed 9 -optimizer adam -lr 0.002 -beta1 0.8 -eps 1e-7 -amsgrad" +
		" -schedule multistep -milestones 10,20 -gamma 0.5 -warmup-steps 4 -warmup-start-factor 0.25 -lr-scaling sqrt -base-batch 64" +
		" -dataset synthetic -image-shape 16x16x3 -mean 0.5,0.4,0.3 -std 0.2,0.2,0.2 -augment crop_pad=2,flip,rotate_deg=5:nearest" +
		" -data-workers 2 -prefetch 3 -limit 640 -test-limit 64 -threads 2 -bind numa -cpu-list 0-1 -use-smt -gpus none" +
		" -checkpoint-dir ck -checkpoint-every 10m -keep 2 -resume auto -bucket-mb 2.5 -check-every 5 -timeline tl.json" +
		" -timeline-steps 7 -collective-timeout 90 -metrics m.jsonl -progress 1m30s -verbose -report-bindings")
	cfg, _, err := Parse(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := cfg.WriteTOML(&out); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "printed.toml")
	os.WriteFile(p, out.Bytes(), 0o644)
	again, _, err := Parse([]string{"-config", p}, io.Discard)
	if err != nil {
		t.Fatalf("reading -print-config's output: %v\n%s", err, out.String())
	}
	if !reflect.DeepEqual(again, cfg) {
		t.Errorf("round trip changed the configuration:\nflags: %+v\nfile:  %+v\n%s", cfg, again, out.String())
	}
	// Each key comes under its flag's help: a 0 that means a default says so.
	if !strings.Contains(out.String(), "# multistep factor (default 0.1) or exponential per-step factor (at most 1)\ngamma = 0.5\n") ||
		!strings.Contains(out.String(), "# compute threads per rank, 1 to 4096 (default: physical cores in the allowed mask / local ranks; on a hybrid CPU its performance cores, where there is one per rank)\nthreads = 2\n") {
		t.Errorf("-print-config's keys lack their help:\n%s", out.String())
	}
	if cfg.CollectiveTimeout != 90*time.Second || cfg.Progress != 90*time.Second {
		t.Errorf("-collective-timeout 90 and -progress 1m30s gave %v and %v", cfg.CollectiveTimeout, cfg.Progress)
	}
}

// TestDurationKeys: a bare TOML integer for a duration is seconds (it was
// nanoseconds: progress = 5 printed on every step, collective_timeout =
// 300 aborted training at once); strings take Go's syntax or seconds;
// flags take both; -h says so.
func TestDurationKeys(t *testing.T) {
	p := filepath.Join(t.TempDir(), "job.toml")
	for file, want := range map[string][2]time.Duration{
		"progress = 5\ncollective_timeout = 300\n":         {5 * time.Second, 300 * time.Second},
		"progress = \"5m\"\ncollective_timeout = \"90\"\n": {5 * time.Minute, 90 * time.Second},
		"progress = 0.5\ncollective_timeout = 0\n":         {500 * time.Millisecond, 0},
	} {
		os.WriteFile(p, []byte(file), 0o644)
		cfg, _, err := Parse([]string{"-config", p}, io.Discard)
		if err != nil {
			t.Errorf("%q: %v", file, err)
			continue
		}
		if cfg.Progress != want[0] || cfg.CollectiveTimeout != want[1] {
			t.Errorf("%q: progress %v, collective_timeout %v; want %v, %v", file, cfg.Progress, cfg.CollectiveTimeout, want[0], want[1])
		}
	}
	for file, msg := range map[string]string{
		"progress = true\n":            "line 1: progress = true: want integer seconds",
		"collective_timeout = \"x\"\n": `collective_timeout = "x": want integer seconds or a duration`,
		"progress = -2\n":              "progress = -2s: must be >= 0",
		"progress = 9223372036854\n":   "too many seconds",
	} {
		os.WriteFile(p, []byte(file), 0o644)
		if _, _, err := Parse([]string{"-config", p}, io.Discard); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want %q", file, err, msg)
		}
	}
	cfg, _, err := Parse([]string{"-progress", "5", "-collective-timeout", "2m"}, io.Discard)
	if err != nil || cfg.Progress != 5*time.Second || cfg.CollectiveTimeout != 2*time.Minute {
		t.Errorf("-progress 5 -collective-timeout 2m: %v, %v, %v", cfg.Progress, cfg.CollectiveTimeout, err)
	}
	// checkpoint_every stays a step count as an integer.
	os.WriteFile(p, []byte("checkpoint_every = 500\n"), 0o644)
	if cfg, _, err := Parse([]string{"-config", p}, io.Discard); err != nil || cfg.CheckpointEvery != "500" {
		t.Errorf("checkpoint_every = 500: %q, %v", cfg.CheckpointEvery, err)
	}
	var help bytes.Buffer
	if _, _, err := Parse([]string{"-h"}, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	for _, f := range []string{"-progress", "-collective-timeout"} {
		i := strings.Index(help.String(), "  "+f+" ")
		if i < 0 || !strings.Contains(help.String()[i:min(i+300, help.Len())], "integer seconds or a duration like 5m") {
			t.Errorf("-h does not say %s takes integer seconds or a duration", f)
		}
	}
}

// TestSeedNotWrapped: seed = -1 in a file is refused, as the flag refuses
// it, instead of becoming 18446744073709551615.
// TestTypeErrors: a key's value of the wrong TOML type is said as the key,
// its value and what it takes, on its line, instead of the decoder's
// "incompatible types: TOML value has type int64; destination has type
// string"; a scalar or list for a string key is shown quoted.
func TestTypeErrors(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.toml")
	for file, msg := range map[string]string{
		"# gpus\ngpus = 0\n":         `line 2: gpus = 0: want a string, in quotes ("0")`,
		"gpus = [0, 1]\n":            `line 1: gpus = [0, 1]: want a string, in quotes ("0,1")`,
		"lr = 0.1\nepochs = 1.5\n":   "line 2: epochs = 1.5: want an integer",
		"lr = \"fast\"\n":            `line 1: lr = "fast": want a number`,
		"beta1 = \"x\"\n":            `line 1: beta1 = "x": want a number`,
		"mean = [\"a\"]\n":           `line 1: mean = ["a"]: want an array of numbers`,
		"sync_bn = \"yes\"\n":        `line 1: sync_bn = "yes": want true or false`,
		"model = {name = \"cnn\"}\n": "line 1: model = a table: want a string, in quotes",
	} {
		os.WriteFile(p, []byte(file), 0o644)
		_, _, err := Parse([]string{"-config", p}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), msg) || strings.Contains(err.Error(), "destination") {
			t.Errorf("%q: %v, want %q", file, err, msg)
		}
	}
}

// TestLossScaleFloat32: a loss_scale that no float32 holds is refused when
// the flags are read (exit 2), not by the loss scaler once an fp16 run on
// a GPU has started; 65536 and 1000 are taken.
func TestLossScaleFloat32(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"-loss-scale 1.1", "loss_scale = 1.1: must be 1 to 2^24 and a float32 value"},
		{"-loss-scale 0.5", "loss_scale = 0.5: must be 1 to 2^24"},
		{"-loss-scale 65536", ""},
		{"-loss-scale 1000", ""},
	} {
		_, _, err := Parse(strings.Fields(c.args+" -precision fp16 -device cuda"), io.Discard)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.args, err, c.want)
		}
	}
}

// TestCheckRunScaledLR: lr x weight_decay at most 1 holds for the lr
// after lr_scaling, which checkRun knows: lr 0.5 scaled to 2 with weight
// decay 1.9 trained at chance in silence, and lr 1e308 scaled to +Inf.
func TestCheckRunScaledLR(t *testing.T) {
	for _, c := range []struct {
		args string
		want string
	}{
		{"-lr 0.5 -weight-decay 1.9 -lr-scaling linear -base-batch 16", "weight_decay 1.9: must be at most 1/lr = 0.5"},
		{"-lr 1e308 -lr-scaling linear -base-batch 16", "lr +Inf: must be finite"},
		{"-lr 0.5 -weight-decay 1.9 -lr-scaling none -base-batch 16", ""},
		{"-lr 0.5 -weight-decay 0.4 -lr-scaling linear -base-batch 16", ""},
		{"-optimizer adamw -lr-scaling sqrt -base-batch 16", ""},
	} {
		cfg, _, err := Parse(strings.Fields(c.args+" -batch 64"), io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", c.args, err)
		}
		err = cfg.checkRun(6400, 1)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.args, err, c.want)
		}
	}
}

func TestSeedNotWrapped(t *testing.T) {
	p := filepath.Join(t.TempDir(), "job.toml")
	os.WriteFile(p, []byte("seed = -1\n"), 0o644)
	cfg, _, err := Parse([]string{"-config", p}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "seed = -1") || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("seed = -1: %v (seed %d), want a refusal naming the key and line", err, cfg.Seed)
	}
	if _, _, err := Parse([]string{"-seed", "-1"}, io.Discard); err == nil {
		t.Error("-seed -1 accepted")
	}
	if _, _, err := Parse([]string{"-seed", "18446744073709551615"}, io.Discard); err == nil || !strings.Contains(err.Error(), "seed = 18446744073709551615") {
		t.Errorf("-seed 2^64-1: %v, want a refusal (TOML could not hold it)", err)
	}
}

// TestSizesRefusedAtParse: sizes that drive allocations or step counts are
// bounded before anything runs: one line, a usage error (exit 2), no
// panic or out-of-memory crash.
func TestSizesRefusedAtParse(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"-batch 1000000000", "batch = 1000000000: must be >= 1 (at most 16777216 per rank)"},
		{"-batch 9223372036854775807", "batch = 9223372036854775807"},
		{"-epochs 300000000000000000 -schedule cosine", "epochs = 300000000000000000: must be >= 1 (at most 1000000)"},
		{"-steps 9223372036854775807", "steps = 9223372036854775807"},
		{"-threads 100000000", "threads = 100000000"},
		{"-timeline-steps 1000000000000", "timeline_steps = 1000000000000"},
		{"-bucket-mb NaN", "bucket_mb = NaN"},
		{"-bucket-mb 1e300", "bucket_mb = 1e+300"},
		{"-augment resize=32768x32768", "1 to 8192"},
		{"-dataset synthetic -image-shape 32768x32768x3", "image_shape = \"32768x32768x3\""},
		{"-dataset synthetic -augment crop_pad=4:40x40", "crop_pad=4:40x40"},
		{"-lr +Inf", "lr = +Inf: must be finite"},
	} {
		_, _, err := Parse(strings.Fields(c.args), io.Discard)
		assertUsage(t, c.args, err, c.want)
	}
}

func assertUsage(t *testing.T, what string, err error, want string) {
	t.Helper()
	var ue cli.UsageError
	switch {
	case err == nil:
		t.Errorf("%s: accepted, want %q", what, want)
	case !errors.As(err, &ue):
		t.Errorf("%s: %v is not a usage error (exit 2)", what, err)
	case strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), want):
		t.Errorf("%s: %q, want one line containing %q", what, err, want)
	}
}

// TestValidateBeforeData: optimizer, schedule, model and placement
// mistakes are usage errors from Parse, before MPI starts or any data is
// read (they used to surface after the data had loaded, with exit 1).
// The data directory here does not exist: had anything been read, that
// would be the error.
func TestValidateBeforeData(t *testing.T) {
	nowhere := " -data-dir " + filepath.Join(t.TempDir(), "nowhere")
	for _, c := range []struct{ args, want string }{
		{"-optimizer sgdx", `unknown optimizer "sgdx"`},
		{"-optimizer sgd -nesterov -momentum 0", "nesterov: needs momentum > 0"},
		{"-optimizer adam -beta2 1.5", "beta2 1.5: must be in [0, 1)"},
		{"-schedule step", `unknown schedule "step"`},
		{"-schedule multistep -milestones 20,10", "milestones [20 10]: must be strictly increasing"},
		{"-schedule multistep", "multistep needs milestones"},
		{"-schedule exponential", "exponential needs gamma"},
		{"-lr-scaling linear", "base_batch 0: must be > 0 with lr_scaling linear"},
		{"-schedule cosine -min-lr -1", "min_lr -1"},
		{"-model resnet9000", `unknown model "resnet9000"`},
		{"-bind sockets", `bind = "sockets"`},
		{"-cpu-list 3-x", `cpu_list = "3-x"`},
		{"-gpus 0,0", `gpus = "0,0"`},
		{"-collective-timeout 1ns", "collective_timeout = 1ns: must be 0 (never) or at least 1s"},
		{"-collective-timeout 300ms", "collective_timeout = 300ms"},
	} {
		_, _, err := Parse(strings.Fields(c.args+nowhere), io.Discard)
		assertUsage(t, c.args, err, c.want)
	}
	// The same settings are fine apart from the one at fault.
	if _, _, err := Parse(strings.Fields("-optimizer sgd -nesterov -schedule multistep -milestones 10,20 -bind none -cpu-list 0"+nowhere), io.Discard); err != nil {
		t.Errorf("valid settings refused: %v", err)
	}
}

// TestUnknownFlagOneLine: an unknown flag is one line pointing to -h, not
// the 130-line usage followed by the error.
func TestUnknownFlagOneLine(t *testing.T) {
	var out bytes.Buffer
	_, _, err := Parse([]string{"-bogus"}, &out)
	assertUsage(t, "-bogus", err, "-bogus")
	if err != nil && !strings.Contains(err.Error(), "hpctrain train -h") {
		t.Errorf("-bogus: %q does not point to hpctrain train -h", err)
	}
	if out.Len() != 0 {
		t.Errorf("-bogus printed %d lines of usage", strings.Count(out.String(), "\n"))
	}
	// A bad value in a flag, or an argument that is not a flag.
	_, _, err = Parse([]string{"-batch", "lots"}, &out)
	assertUsage(t, "-batch lots", err, "-batch")
	_, _, err = Parse([]string{"train.toml"}, &out)
	assertUsage(t, "train.toml", err, `unexpected argument "train.toml"`)
	if out.Len() != 0 {
		t.Errorf("bad flags printed the usage:\n%s", out.String())
	}
}

// TestCPUKernelsOf: each cpu_kernels value and precision maps to the
// model's kernels, dnnl-direct only turning Winograd off, dnnl-all every
// convolution onto oneDNN, and bf16 on oneDNN as this CPU runs it
// (model.Kernels.OnThisCPU: on oneDNN alone where it runs AMX-BF16);
// unknown values are refused.
func TestCPUKernelsOf(t *testing.T) {
	if !model.DefaultKernels().DNNL {
		t.Log("oneDNN not linked in (purego): auto is blas")
	}
	for _, c := range []struct {
		kernels, precision string
		want               model.Kernels
	}{
		{"dnnl", "fp32", model.Kernels{DNNL: true}},
		{"dnnl-direct", "fp32", model.Kernels{DNNL: true, Direct: true}},
		{"dnnl", "bf16", model.Kernels{DNNL: true, BF16: true}.OnThisCPU()},
		{"dnnl-all", "fp32", model.Kernels{DNNL: true, AllDNNL: true}},
		{"dnnl-all", "bf16", model.Kernels{DNNL: true, BF16: true, AllDNNL: true}},
		{"blas", "fp32", model.Kernels{}},
		{"auto", "fp32", model.DefaultKernels()},
	} {
		k, err := CPUKernelsOf(c.kernels, c.precision)
		if err != nil || k != c.want {
			t.Errorf("CPUKernelsOf(%q, %q) = %+v, %v; want %+v", c.kernels, c.precision, k, err, c.want)
		}
	}
	for _, bad := range [][2]string{{"winograd", "fp32"}, {"dnnl", "fp16"}, {"blas", "bf16"}} {
		if k, err := CPUKernelsOf(bad[0], bad[1]); err == nil {
			t.Errorf("CPUKernelsOf(%q, %q) = %+v, accepted", bad[0], bad[1], k)
		}
	}
}

// TestBF16Missing: what precision auto asks of a CPU rank (the GPU and the
// ranks' agreement run in TestPrecisionAuto and TestCUDAPrecisionAuto,
// package main, under the real mpirun).
func TestBF16Missing(t *testing.T) {
	defer func(f func() (bool, string)) { cpuBF16 = f }(cpuBF16)
	for _, c := range []struct {
		kernels string
		cpu     bool
		want    string // "" for bf16
	}{
		{"dnnl", true, ""},
		{"dnnl-direct", true, ""},
		{"dnnl", false, "no AVX512-BF16 here"},
		{"blas", true, "cpu_kernels blas has no bf16 products"},
		{"auto", true, ""},
	} {
		cpuBF16 = func() (bool, string) {
			if c.cpu {
				return true, ""
			}
			return false, "no AVX512-BF16 here"
		}
		if c.kernels != "blas" && !model.DefaultKernels().DNNL {
			continue // purego: no oneDNN, so no bf16 whatever the CPU
		}
		got := bf16Missing(nil, c.kernels)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("cpu_kernels %s, bf16 CPU %v: %q, want %q", c.kernels, c.cpu, got, c.want)
		}
	}
	for _, c := range []struct {
		ranks []int
		want  string
	}{
		{[]int{3}, "rank 3"},
		{[]int{1, 4, 7}, "ranks 1, 4, 7"},
		{[]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, "ranks 0, 1, 2, 3, 4, 5, 6, 7 and 2 more"},
	} {
		if got := rankList(c.ranks); got != c.want {
			t.Errorf("rankList(%v) = %q, want %q", c.ranks, got, c.want)
		}
	}
}

// Settings this run ignores are warned about, not refused: a run that
// checkpointed with one must still resume.
func TestInertSettings(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"-optimizer adam -nesterov", "nesterov applies to lars and sgd only, and this run uses adam: it has no effect"},
		{"-optimizer sgd -amsgrad", "amsgrad applies to adam and adamw only"},
		{"-optimizer adam -centered", "centered applies to rmsprop only"},
		{"-optimizer adam -momentum 0.9", "momentum applies to lars, rmsprop and sgd only, and this run uses adam: it has no effect"},
		{"-beta1 0.5", "beta1 applies to adam, adamax, adamw, lamb and nadam only, and this run uses sgd"},
		{"-optimizer adam -rho 0.5", "rho applies to adadelta only"},
		{"-optimizer adam -alpha 0.5", "alpha applies to rmsprop only"},
		{"-eps 1e-6", "eps applies to adadelta, adagrad, adam, adamax, adamw, lamb, lars, nadam and rmsprop only, and this run uses sgd"},
		{"-optimizer adam -lr-decay 0.1", "lr_decay applies to adagrad only"},
		{"-initial-accumulator-value 0.1", "initial_accumulator_value applies to adagrad only"},
		{"-optimizer adam -momentum-decay 0.1", "momentum_decay applies to nadam only"},
		{"-trust-coefficient 0.01", "trust_coefficient applies to lars only"},
		{"-optimizer adam -dampening 0.5", "dampening applies to lars and sgd only"},
		{"-optimizer lars -momentum 0.9 -eps 1e-6 -trust-coefficient 0.01 -nesterov -dampening 0", ""},
		{"-optimizer adagrad -eps 1e-3 -lr-decay 0.1 -initial-accumulator-value 0.1", ""},
		{"-schedule cosine -gamma 0.5", "gamma applies to multistep and exponential only, and this run uses cosine"},
		{"-schedule exponential -gamma 0.99", ""},
		{"-warmup-start-factor 0.5", "warmup_start_factor applies with warmup_steps above 0 only"},
		{"-warmup-steps 5 -warmup-start-factor 0.5", ""},
		{"-base-batch 32", "base_batch applies with lr_scaling linear or sqrt only"},
		{"-base-batch 32 -lr-scaling sqrt", ""},
		{"-milestones 2,4", "milestones applies to multistep only, and this run uses constant"},
		{"-schedule constant -min-lr 0.001", "min_lr applies to cosine only"},
		{"-checkpoint-every 5", "this run writes no checkpoint"},
		{"-optimizer sgd -nesterov -schedule multistep -milestones 2,4", ""},
		{"-loss-scale 1024", "loss_scale and loss_scale_interval apply to precision fp16 only, and this run uses fp32"},
		{"-precision bf16 -loss-scale-interval 100", "this run uses bf16: they have no effect"},
		{"-precision fp16 -loss-scale 1024", ""},
		{"-precision auto -loss-scale 1024", ""},
		{"-device cuda -cpu-kernels blas", "cpu_kernels applies to device cpu only, and this run uses cuda"},
		{"-device cpu -cpu-kernels blas", ""},
	} {
		cfg, _, err := Parse(strings.Fields(c.args), io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", c.args, err)
		}
		ws := cfg.inert()
		if c.want == "" && len(ws) != 0 || c.want != "" && (len(ws) != 1 || !strings.Contains(ws[0], c.want)) {
			t.Errorf("%s: warnings %q, want %q", c.args, ws, c.want)
		}
	}
}

// TestScheduleNotes: schedule settings that the run's length makes inert
// (milestones at or past its last step, a warm-up as long as the run) or
// that raise the lr (a multistep gamma above 1) are warned of; those that
// act are not.
func TestScheduleNotes(t *testing.T) {
	for _, c := range []struct {
		args  string
		total int
		want  []string
	}{
		{"-schedule multistep -milestones 2,4", 10, nil},
		{"-schedule multistep -milestones 2,10,40", 10, []string{"milestones 10, 40: at or past this run's last step (10 steps, numbered from 0): they have no effect"}},
		{"-schedule multistep -milestones 9", 10, nil},
		{"-schedule multistep -milestones 1,9", 9, []string{"milestones 9: at or past this run's last step (9 steps, numbered from 0): it has no effect"}},
		{"-schedule multistep -milestones 2 -gamma 2", 10, []string{"gamma 2 is above 1: each milestone raises the lr"}},
		{"-schedule multistep -milestones 2 -gamma 1", 10, nil},
		{"-schedule constant -warmup-steps 10", 10, []string{"warmup_steps 10 lasts the whole run (10 steps): the lr never reaches its full value"}},
		{"-schedule exponential -gamma 0.99 -warmup-steps 9", 10, nil},
		{"-schedule exponential -gamma 0.99 -warmup-steps 20", 1, []string{"(1 step)"}},
		{"-schedule cosine -warmup-steps 9", 10, nil},
	} {
		cfg, _, err := Parse(strings.Fields(c.args), io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", c.args, err)
		}
		ws := cfg.scheduleNotes(c.total)
		ok := len(ws) == len(c.want)
		for i := 0; ok && i < len(ws); i++ {
			ok = strings.Contains(ws[i], c.want[i])
		}
		if !ok {
			t.Errorf("%s, %d steps: warnings %q, want %q", c.args, c.total, ws, c.want)
		}
	}
}

// TestOptimizerOwnDefaults: lr 0.01 and momentum 0.9, the course's SGD
// recipe, are sgd's alone; another optimizer given neither (by flag or
// file) runs with its own defaults, PyTorch's (rmsprop had momentum 0.9
// and diverged, adam ran at 0.01), and a value given anywhere is kept.
// The printed configuration reads back as the same.
func TestOptimizerOwnDefaults(t *testing.T) {
	file := filepath.Join(t.TempDir(), "job.toml")
	os.WriteFile(file, []byte("optimizer = \"adam\"\nlr = 0.02\n"), 0o644)
	for _, c := range []struct {
		args         string
		lr, momentum float64 // after optim's defaults
	}{
		{"-optimizer sgd", 0.01, 0.9},
		{"", 0.01, 0.9},
		{"-optimizer rmsprop", 0.01, 0},
		{"-optimizer adam", 0.001, 0},
		{"-optimizer lars", 1, 0},
		{"-optimizer rmsprop -momentum 0.5 -lr 0.003", 0.003, 0.5},
		{"-config " + file, 0.02, 0},
		{"-config " + file + " -optimizer rmsprop", 0.02, 0},
		{"-config " + file + " -optimizer sgd", 0.02, 0.9},
	} {
		cfg, _, err := Parse(strings.Fields(c.args), io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", c.args, err)
		}
		if d := cfg.Config.WithDefaults(); d.LR != c.lr || d.Momentum != c.momentum {
			t.Errorf("%q: lr %v, momentum %v; want %v, %v", c.args, d.LR, d.Momentum, c.lr, c.momentum)
		}
		var out bytes.Buffer
		cfg.WriteTOML(&out)
		p := filepath.Join(t.TempDir(), "printed.toml")
		os.WriteFile(p, out.Bytes(), 0o644)
		if again, _, err := Parse([]string{"-config", p}, io.Discard); err != nil || !reflect.DeepEqual(again, cfg) {
			t.Errorf("%q: -print-config read back: %v\n%+v\n%+v", c.args, err, again, cfg)
		}
	}
}

// TestConfigLayered: -config may be given more than once; the files are
// read in order, a later file's keys winning, and the command line wins
// over all of them wherever it stands. Before, only the last -config was
// read and the others were dropped without a word.
func TestConfigLayered(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base.toml")
	os.WriteFile(base, []byte("model = \"mlp\"\nbatch = 32\nepochs = 3\noptimizer = \"adam\"\n"), 0o644)
	exp := filepath.Join(dir, "exp.toml")
	os.WriteFile(exp, []byte("batch = 128\nseed = 5\n"), 0o644)
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("batchh = 1\n"), 0o644)
	for _, c := range []struct {
		args          string
		model         string
		batch, epochs int
		seed          uint64
		optimizer     string
		lr            float64 // after optim's defaults
	}{
		{"-config " + base, "mlp", 32, 3, 1, "adam", 0.001},
		{"-config " + base + " -config " + exp, "mlp", 128, 3, 5, "adam", 0.001},
		{"-config " + exp + " -config " + base, "mlp", 32, 3, 5, "adam", 0.001},
		{"-batch 16 -config " + base + " -config " + exp + " -epochs 2", "mlp", 16, 2, 5, "adam", 0.001},
		{"-config " + base + " -optimizer sgd -config " + exp, "mlp", 128, 3, 5, "sgd", 0.01},
	} {
		cfg, _, err := Parse(strings.Fields(c.args), io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", c.args, err)
		}
		if cfg.Model != c.model || cfg.Batch != c.batch || cfg.Epochs != c.epochs || cfg.Seed != c.seed || cfg.Config.Name != c.optimizer || cfg.Config.WithDefaults().LR != c.lr {
			t.Errorf("%q: model %s batch %d epochs %d seed %d optimizer %s lr %v; want %s %d %d %d %s %v", c.args,
				cfg.Model, cfg.Batch, cfg.Epochs, cfg.Seed, cfg.Config.Name, cfg.Config.WithDefaults().LR,
				c.model, c.batch, c.epochs, c.seed, c.optimizer, c.lr)
		}
	}
	// An error in any file names that file.
	_, _, err := Parse([]string{"-config", base, "-config", bad}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "batchh") {
		t.Errorf("a bad second file: %v, want its name and key", err)
	}
	if _, _, err := Parse([]string{"-config", ""}, io.Discard); err == nil || !strings.Contains(err.Error(), "-config") {
		t.Errorf("-config \"\": %v, want an error naming -config", err)
	}
}

// TestBadStringQuoted: a string key's bad value is shown as TOML writes it,
// so that an empty value or a trailing space can be seen.
func TestBadStringQuoted(t *testing.T) {
	for _, c := range []struct{ flag, value, want string }{
		{"-device", "", `device = "": must be cpu, cuda, auto`},
		{"-device", "cuda ", `device = "cuda ": must be`},
		{"-precision", "", `precision = "": must be`},
	} {
		_, _, err := Parse([]string{c.flag, c.value}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %q: %v, want %q", c.flag, c.value, err, c.want)
		}
	}
}

// TestModelFileNamedOnce: a description file that does not read is named
// once in the error ('config: model = "x.toml": model x.toml: layer 1'
// before).
func TestModelFileNamedOnce(t *testing.T) {
	p := filepath.Join(t.TempDir(), "padk.toml")
	os.WriteFile(p, []byte(`layers = [{kind = "conv", out = 4, kernel = 0}]`), 0o644)
	_, _, err := Parse([]string{"-model", p}, io.Discard)
	if err == nil || strings.Count(err.Error(), p) != 1 || !strings.Contains(err.Error(), "config: model "+p+": layer 1 (conv)") {
		t.Errorf("%v, want the file named once, then the layer", err)
	}
}
