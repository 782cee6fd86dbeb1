package main

import (
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func mustPNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() < 200 || b.Dy() < 200 {
		t.Errorf("%s is only %v", path, b)
	}
}

func TestTopoCommand(t *testing.T) {
	r := hpctrain(t, 0, 10*time.Second, "topo", "-np", "2")
	if r.code != 0 || !strings.Contains(r.out, "local 1:") || !strings.Contains(r.out, "physical cores") {
		t.Errorf("topo: %d\n%s", r.code, r.out)
	}
	r = hpctrain(t, 0, 10*time.Second, "topo", "-json", "-np", "1")
	if r.code != 0 || !strings.Contains(r.out, `"plans"`) && !strings.Contains(r.out, `"Plans"`) {
		t.Errorf("topo -json: %d\n%s", r.code, r.out)
	}
	// More ranks than cpus: shown unbound with train's warning, not refused.
	n := strconv.Itoa(2*runtime.NumCPU() + 1)
	r = hpctrain(t, 0, 10*time.Second, "topo", "-json", "-np", n)
	if r.code != 0 || !strings.Contains(r.out, "oversubscribed, so ranks are not bound") {
		t.Errorf("topo -json -np %s: %d\n%s", n, r.code, r.out)
	}
	r = hpctrain(t, 0, 10*time.Second, "topo", "-bind", "sideways")
	if r.code != 2 || !strings.Contains(r.out, "sideways") {
		t.Errorf("bad policy: %d\n%s", r.code, r.out)
	}
	// Refused before the topology is printed: one line each.
	// -np 1000000000 ran the machine out of memory (a Go trace).
	for _, args := range [][]string{{"-threads", "-1"}, {"-gpus", "0,1"}, {"-gpu-share"}, {"-np", "1000000000", "-json"}, {"-np", "4097"}, {"-sysfs", "/nonexistent"}} {
		r = hpctrain(t, 0, 10*time.Second, append([]string{"topo"}, args...)...)
		if r.code != 2 || strings.Count(r.out, "\n") != 1 {
			t.Errorf("topo %v: exit %d, want 2 and one line:\n%s", args, r.code, r.out)
		}
	}
}

// TestTrainDescriptionFile: the README's path to a network of one's own,
// a description printed by hpctrain models and passed to train -model,
// trains under mpirun (train's settings check once knew only the zoo's
// names); a bad file is one line naming it.
func TestTrainDescriptionFile(t *testing.T) {
	dir := t.TempDir()
	desc := filepath.Join(dir, "my.toml")
	r := hpctrain(t, 0, 10*time.Second, "models", "mlp")
	if r.code != 0 {
		t.Fatalf("models mlp: %d\n%s", r.code, r.out)
	}
	os.WriteFile(desc, []byte(r.out), 0o644)
	r = hpctrain(t, 2, 2*time.Minute, "train", "-model", desc, "-limit", "640", "-test-limit", "100", "-progress", "0")
	if r.code != 0 || !strings.Contains(r.out, "final: test accuracy") {
		t.Errorf("train -model %s: exit %d\n%s", desc, r.code, r.out)
	}
	r = hpctrain(t, 0, 10*time.Second, "train", "-model", filepath.Join(dir, "none.toml"), "-limit", "640")
	if r.code != 2 || !strings.Contains(r.out, "none.toml: no such file") || strings.Count(r.out, "\n") != 1 {
		t.Errorf("missing description: exit %d\n%s", r.code, r.out)
	}
}

// TestBadPlacement: a -cpu-list outside the mask or shared by two ranks
// and -threads 0 with explicit nonsense give one clear line, no hang.
func TestBadPlacement(t *testing.T) {
	// A request this node cannot meet is bad input (exit 2), found before
	// the data is read (no data line).
	r := hpctrain(t, 2, time.Minute, "train", "-model", "mlp", "-limit", "640", "-cpu-list", "4000")
	if r.code != 2 || !strings.Contains(r.out, "4000") || strings.Contains(r.out, "goroutine ") || strings.Contains(r.out, "hpctrain: data ") {
		t.Errorf("cpu-list outside mask: exit %d (want 2, before the data loads)\n%s", r.code, r.out)
	}
	// Both ranks given the same cpu: bad input too (it was exit 1).
	r = hpctrain(t, 2, time.Minute, "train", "-model", "mlp", "-limit", "640", "-cpu-list", "0")
	if r.code != 2 || !strings.Contains(r.out, "are both bound to cpus 0") || strings.Contains(r.out, "hpctrain: data ") {
		t.Errorf("cpu-list 0 on 2 ranks: exit %d (want 2, before the data loads)\n%s", r.code, r.out)
	}
	r = hpctrain(t, 2, time.Minute, "train", "-model", "mlp", "-limit", "640", "-threads", "0")
	if r.code != 2 || !strings.Contains(r.out, "threads = 0") {
		t.Errorf("threads 0: %d\n%s", r.code, r.out)
	}
	r = hpctrain(t, 2, time.Minute, "train", "-model", "mlp", "-limit", "640", "-threads", "-1")
	if r.code == 0 || !strings.Contains(r.out, "threads = -1") {
		t.Errorf("threads -1: %d\n%s", r.code, r.out)
	}
}

func TestBenchCommands(t *testing.T) {
	dir := t.TempDir()
	r := hpctrain(t, 0, time.Minute, "bench", "gemm", "-reps", "1")
	if r.code != 0 || !strings.Contains(r.out, "2048^3") {
		t.Errorf("bench gemm: %d\n%s", r.code, r.out)
	}
	if r := hpctrain(t, 0, time.Minute, "bench", "gemm", "-reps", "0"); r.code != 2 || !strings.Contains(r.out, "-reps 0: must be >= 1") {
		t.Errorf("bench gemm -reps 0: exit %d, want 2\n%s", r.code, r.out)
	}
	r = hpctrain(t, 0, time.Minute, "bench", "step", "-model", "mlp", "-steps", "3", "-json", filepath.Join(dir, "step.json"))
	if r.code != 0 || !strings.Contains(r.out, "samples/s") || !strings.Contains(r.out, "fc1") {
		t.Errorf("bench step: %d\n%s", r.code, r.out)
	}
	r = hpctrain(t, 0, time.Minute, "bench", "optim", "-steps", "30", "-out", dir)
	if r.code != 0 {
		t.Fatalf("bench optim: %d\n%s", r.code, r.out)
	}
	mustPNG(t, filepath.Join(dir, "optim_trajectories.png"))
	if b, _ := os.ReadFile(filepath.Join(dir, "optim_trajectories.csv")); !strings.HasPrefix(string(b), "optimizer,step,x,y,J") {
		t.Errorf("csv starts %q", b[:min(40, len(b))])
	}
}

// TestBenchAllreduce runs the collective benchmark under mpirun: every row
// verified (#wrong 0), the training path and raw MPI side by side, timed in
// interleaved rounds; the training path's rows carry wrapper/raw (also in
// the JSON) and the summary line covers the sizes from -overhead-from.
func TestBenchAllreduce(t *testing.T) {
	js := filepath.Join(t.TempDir(), "ar.json")
	r := hpctrain(t, 2, 2*time.Minute, "bench", "allreduce", "-e", "262144", "-n", "5", "-rounds", "3", "-overhead-from", "65536", "-json", js)
	if r.code != 0 {
		t.Fatalf("%d\n%s", r.code, r.out)
	}
	row := regexp.MustCompile(`(?m)^(hpctrain|mpi)\s+(in-place|out-of-place)\s+(\d+)\s+\d+\s+float32\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+(\d+)\s+(\S+)\s+(\S+)$`)
	rows := row.FindAllStringSubmatch(r.out, -1)
	if len(rows) != 3*17 { // 4 B .. 256 KiB: 17 sizes x 3 paths
		t.Fatalf("%d rows\n%s", len(rows), r.out)
	}
	for _, m := range rows {
		if m[4] != "0" {
			t.Errorf("row %s %s %s: %s wrong", m[1], m[2], m[3], m[4])
		}
		ratio := m[1] == "hpctrain"
		for _, v := range m[5:7] {
			if x, err := strconv.ParseFloat(v, 64); ratio && (err != nil || x <= 0) || !ratio && v != "-" {
				t.Errorf("row %s %s %s: wrapper/raw %q", m[1], m[2], m[3], v)
			}
		}
	}
	sum := regexp.MustCompile(`(?m)^# wrapper/raw, 3 sizes >= 65536 B: per_round max [\d.]+ \(at \d+ B\), median [\d.]+; ratio of medians max [\d.]+ \(at \d+ B\), median [\d.]+; overhead <= 3% \(per_round max\): (yes|NO)$`)
	if !sum.MatchString(r.out) {
		t.Errorf("no summary line over 64-256 KiB\n%s", r.out)
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var got []struct {
		Path     string    `json:"path"`
		Size     int       `json:"size"`
		Wrong    int       `json:"wrong"`
		Rounds   int       `json:"rounds"`
		Iters    int       `json:"iters"`
		TimeUS   []float64 `json:"time_us_rounds"`
		Ratio    float64   `json:"wrapper_raw"`
		PerRound []float64 `json:"wrapper_raw_per_round"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(rows) {
		t.Fatalf("%d JSON rows, %d printed", len(got), len(rows))
	}
	for _, g := range got {
		if g.Rounds != 3 || g.Iters != 5 || len(g.TimeUS) != 3 || g.Wrong != 0 || (g.Path == "hpctrain") != (g.Ratio > 0 && len(g.PerRound) == 3) {
			t.Errorf("JSON row %+v", g)
		}
	}
}

func TestBenchAffinityGrid(t *testing.T) {
	dir := t.TempDir()
	r := hpctrain(t, 0, 5*time.Minute, "bench", "affinity", "-model", "mlp", "-limit", "1280", "-test-limit", "200", "-out", dir)
	if r.code != 0 || !strings.Contains(r.out, "| instances x threads |") {
		t.Fatalf("%d\n%s", r.code, r.out)
	}
	mustPNG(t, filepath.Join(dir, "affinity.png"))
	for _, f := range []string{"affinity.csv", "affinity.json"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestSlurmTemplateAndPlot(t *testing.T) {
	dir := t.TempDir()
	job := filepath.Join(dir, "job.toml")
	if err := os.WriteFile(job, []byte("model = \"mlp\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := hpctrain(t, 0, 10*time.Second, "slurm", "template", "-config", job, "-nodes", "2", "-tasks-per-node", "4", "-cpus-per-task", "2", "-time", "02:00:00")
	for _, want := range []string{"#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --cpus-per-task=2", "--signal=B:USR1@", "scontrol requeue", "-config " + job, "-resume auto"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("template lacks %q:\n%s", want, r.out)
		}
	}
	// A training configuration that is missing or bad would only fail in
	// the queue: refused when rendering.
	r = hpctrain(t, 0, 10*time.Second, "slurm", "template", "-config", filepath.Join(dir, "missing.toml"))
	if r.code != 2 || !strings.Contains(r.out, "missing.toml") {
		t.Errorf("template with a missing -config: %d\n%s", r.code, r.out)
	}
	r = hpctrain(t, 0, 10*time.Second, "slurm", "template", "-config", job, "-time", "forever")
	if r.code != 2 || !strings.Contains(r.out, "forever") {
		t.Errorf("bad time: %d\n%s", r.code, r.out)
	}
	m := filepath.Join(dir, "m.jsonl")
	if r := hpctrain(t, 0, time.Minute, "train", "-model", "mlp", "-epochs", "2", "-limit", "1280", "-test-limit", "200", "-metrics", m); r.code != 0 {
		t.Fatalf("train: %s", r.out)
	}
	png := filepath.Join(dir, "c.png")
	if r := hpctrain(t, 0, time.Minute, "plot", "-metrics", m+","+m, "-out", png); r.code != 0 {
		t.Fatalf("plot: %s", r.out)
	}
	mustPNG(t, png)
	if r := hpctrain(t, 0, time.Minute, "plot", "-metrics", m+".missing", "-out", png); r.code != 2 || !strings.Contains(r.out, "no such file") {
		t.Errorf("plot of a missing metrics file: exit %d, want 2\n%s", r.code, r.out)
	}
}

// TestPlotStatusOnStderr: plot's closing line goes to standard error, so
// -out /dev/stdout piped to a viewer gets the PNG and nothing else.
func TestPlotStatusOnStderr(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, "m.jsonl")
	lines := `{"epoch":1,"step":10,"train_loss":0.9,"test_accuracy":0.7}
{"epoch":2,"step":20,"train_loss":0.5,"test_accuracy":0.8}
`
	if err := os.WriteFile(m, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	png := filepath.Join(dir, "c.png")
	r := runCmd(plotCmd, "-metrics", m, "-out", png)
	if r.code != 0 || r.out != "" || r.errs != "hpctrain: wrote "+png+"\n" {
		t.Fatalf("plot: exit %d, stdout %q, stderr %q", r.code, r.out, r.errs)
	}
	mustPNG(t, png)
}

// TestPlotBadInput: a metrics file that is empty, of another format or
// cut short, a -metrics list with an empty name, and an -out in a missing
// directory or naming one are the user's to mend: one line naming the
// file, exit 2 (all but a missing metrics file were exit 1).
func TestPlotBadInput(t *testing.T) {
	dir := t.TempDir()
	good := `{"epoch":1,"step":10,"train_loss":0.9,"test_accuracy":0.7}` + "\n"
	files := map[string]string{
		"empty.jsonl": "",
		"loss.txt":    "1 2.30258\n2 2.1\n",
		"cut.jsonl":   good + `{"epoch":2,"step":20,"train_lo`,
		"m.jsonl":     good,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, png := filepath.Join(dir, "m.jsonl"), filepath.Join(dir, "c.png")
	for _, c := range []struct{ metrics, out, want string }{
		{filepath.Join(dir, "empty.jsonl"), png, "empty.jsonl: no per-epoch records"},
		{filepath.Join(dir, "loss.txt"), png, "loss.txt: metrics line 1: want a JSON object"},
		{filepath.Join(dir, "cut.jsonl"), png, "cut.jsonl: metrics line 2: unexpected end of JSON input"},
		{m + ",", png, "file 2 of 2 has an empty name"},
		{dir, png, "is a directory"},
		{m, filepath.Join(dir, "no", "c.png"), "no such directory " + filepath.Join(dir, "no")},
		{m, dir, "write " + dir + ": is a directory"},
	} {
		r := runCmd(plotCmd, "-metrics", c.metrics, "-out", c.out)
		if r.code != 2 || !strings.Contains(r.errs, c.want) || strings.Count(r.errs, "\n") != 1 {
			t.Errorf("plot -metrics %s -out %s: exit %d, stderr %q; want exit 2 and one line with %q", c.metrics, c.out, r.code, r.errs, c.want)
		}
	}
}

// TestSlurmTemplateJobAndFlags: flags fill in and correct the job file
// before it is checked; the training configuration's checkpoint_dir is
// the script's unless the job file names one (then a warning); extra_args
// are checked as train would check them, and may not take over the
// flags that make a requeued job resume.
func TestSlurmTemplateJobAndFlags(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	train := write("train.toml", "model = \"mlp\"\n")
	share := write("share.toml", "model = \"mlp\"\ngpu_share = true\n")
	cuda := write("cuda.toml", "model = \"mlp\"\ndevice = \"cuda\"\n")
	cpu := write("cpu.toml", "model = \"mlp\"\ndevice = \"cpu\"\n")
	pair := write("pair.toml", "model = \"mlp\"\ngpus = \"0,1\"\n")
	trainCk := write("train-ck.toml", "model = \"mlp\"\ncheckpoint_dir = \"mydir\"\n")
	for _, c := range []struct {
		job  string
		args []string
		want []string // in the script (exit 0), or in the error (exit 2)
		code int
		warn string
	}{
		{"nodes = 2\n", []string{"-config", train}, []string{"#SBATCH --nodes=2", "-config " + train + " -checkpoint-dir checkpoints -resume auto"}, 0, ""},
		{"nodes = 0\nconfig = \"" + train + "\"\n", []string{"-nodes", "3"}, []string{"#SBATCH --nodes=3"}, 0, ""},
		{"nodes = 0\nconfig = \"" + train + "\"\n", nil, []string{"nodes: 0 out of range"}, 2, ""},
		{"nodes = 2\n", nil, []string{"config: must not be empty (the training TOML"}, 2, ""},
		{"config = \"" + trainCk + "\"\n", nil, []string{"-checkpoint-dir mydir -resume auto"}, 0, ""},
		{"config = \"" + trainCk + "\"\ncheckpoint_dir = \"ck9\"\n", nil, []string{"-checkpoint-dir ck9 -resume auto"}, 0, `the job's checkpoint_dir "ck9" replaces`},
		// A short limit with the default warning 120 s before it is
		// refused, naming signal_grace; -signal-grace lowers it (the hint
		// named a key that had no flag).
		{"config = \"" + train + "\"\n", []string{"-time", "00:03:00"}, []string{"signal_grace: 120 s is more than half the time limit"}, 2, ""},
		{"config = \"" + train + "\"\n", []string{"-time", "00:03:00", "-signal-grace", "60"}, []string{"#SBATCH --time=00:03:00", "#SBATCH --signal=B:USR1@60"}, 0, ""},
		// GPUs per node against the ranks that drive them, as train
		// checks them on each node once the job runs (before, a job of 8
		// ranks on 4 GPUs waited in the queue to stop at start-up).
		{"config = \"" + train + "\"\n", []string{"-gpus-per-node", "4", "-tasks-per-node", "8"}, []string{"tasks_per_node = 8 but gpus_per_node = 4: each rank needs a GPU of its own"}, 2, ""},
		{"config = \"" + share + "\"\n", []string{"-gpus-per-node", "4", "-tasks-per-node", "8"}, []string{"#SBATCH --gpus-per-node=4"}, 0, ""},
		{"config = \"" + train + "\"\n", []string{"-gpus-per-node", "4", "-tasks-per-node", "4"}, []string{"#SBATCH --gpus-per-node=4"}, 0, ""},
		{"config = \"" + train + "\"\n", []string{"-gpus-per-node", "4", "-tasks-per-node", "2"}, []string{"#SBATCH --gpus-per-node=4"}, 0, "2 would sit idle"},
		{"config = \"" + pair + "\"\n", []string{"-gpus-per-node", "4", "-tasks-per-node", "4"}, []string{`gpus = "0,1" maps 2 local ranks but tasks_per_node = 4`}, 2, ""},
		{"config = \"" + cpu + "\"\n", []string{"-gpus-per-node", "2", "-tasks-per-node", "2"}, []string{"#SBATCH --gpus-per-node=2"}, 0, "uses no GPU (device = cpu"},
		{"config = \"" + cuda + "\"\n", nil, []string{"#SBATCH --nodes=1"}, 0, "gpus_per_node = 0 but " + cuda + " has device = cuda"},
		{"config = \"" + train + "\"\nextra_args = [\"-epochs\", \"3\"]\n", nil, []string{"-resume auto -epochs 3"}, 0, ""},
		{"config = \"" + train + "\"\nextra_args = [\"-lrr\", \"1\"]\n", nil, []string{"flag provided but not defined: -lrr"}, 2, ""},
		{"config = \"" + train + "\"\nextra_args = [\"-epochs\", \"0\"]\n", nil, []string{"epochs = 0"}, 2, ""},
		{"config = \"" + train + "\"\nextra_args = [\"--resume=x.hpck\"]\n", nil, []string{"-resume is the script's own"}, 2, ""},
		// Further #SBATCH lines: the file's, then the flags' (sbatch takes
		// the last); one the script writes itself is refused by its key.
		{"config = \"" + train + "\"\nsbatch = [\"--qos=low\"]\n", []string{"-sbatch", "--qos=high", "-sbatch=--exclusive"}, []string{"#SBATCH --qos=low\n#SBATCH --qos=high\n#SBATCH --exclusive\n"}, 0, ""},
		{"config = \"" + train + "\"\n", []string{"-sbatch", "--nodes=4"}, []string{`sbatch: "--nodes=4": the script writes --nodes from the job's nodes: set nodes instead`}, 2, ""},
		// An --output or --error directory that is not there: SLURM would
		// fail the job without a log; one warning per directory.
		{"config = \"" + train + "\"\noutput = \"" + dir + "/logs/%x-%j.out\"\nerror = \"" + dir + "/logs/%x-%j.err\"\n", nil, []string{"#SBATCH --output=" + dir + "/logs/%x-%j.out"}, 0, "directory " + dir + "/logs is not there"},
		{"config = \"" + train + "\"\noutput = \"" + dir + "/%x-%j.out\"\nerror = \"" + dir + "/%u/%j.err\"\n", nil, []string{"#SBATCH --output=" + dir + "/%x-%j.out"}, 0, ""},
	} {
		job := write("job.toml", c.job)
		r := runCmd(slurmCmd, append([]string{"template", "-job", job}, c.args...)...)
		text := r.out
		if c.code != 0 {
			text = r.errs
		}
		for _, w := range c.want {
			if r.code != c.code || !strings.Contains(text, w) {
				t.Errorf("job %q %v: exit %d, want %d with %q\n%s%s", c.job, c.args, r.code, c.code, w, r.out, r.errs)
			}
		}
		if c.code == 0 && (c.warn == "") != (r.errs == "") || !strings.Contains(r.errs, c.warn) || strings.Count(r.errs, "\n") > 1 {
			t.Errorf("job %q %v: stderr %q, want %q", c.job, c.args, r.errs, c.warn)
		}
	}
}

// TestBenchBadInput: the benchmarks refuse what train refuses, before any
// work, in one line with exit 2: data sets and networks that would not fit
// in memory (they ended in a Go out-of-memory trace, one after minutes of
// generating samples), networks that do not fit the input, unknown names,
// malformed shapes (32x32x3junk was taken as 32x32x3) and a -data-dir that
// is not there (exit 1 before).
func TestBenchBadInput(t *testing.T) {
	quick := []string{"-workers", "0", "-rounds", "1", "-steps", "1", "-seconds", "0.01"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{append([]string{"data", "-dataset", "synthetic", "-image-shape", "4096x4096x1"}, quick...), "the synthetic data set (10000 samples of 4096x4096x1) needs 156.2 GiB"},
		{append([]string{"data", "-dataset", "synthetic", "-image-shape", "1000x1000x1"}, quick...), "model cnn: layer 8 (linear): too large"},
		{append([]string{"data", "-dataset", "synthetic", "-image-shape", "32x32x3junk"}, quick...), `-image-shape "32x32x3junk": must be HxWxC`},
		{append([]string{"data", "-dataset", "synthetic", "-image-shape", "8x8x1", "-batch", "20000"}, quick...), "-batch 20000: more than the synthetic data set's 10000 samples"},
		{append([]string{"data", "-image-shape", "8x8x1"}, quick...), "-image-shape applies with -dataset synthetic only"},
		{append([]string{"data", "-batch", "10000000"}, quick...), "model cnn with batches of 10000000 samples needs"},
		{append([]string{"data", "-data-dir", filepath.Join(t.TempDir(), "none")}, quick...), "no train-images-idx3-ubyte"},
		{[]string{"step", "-steps", "1", "-optimizer", "bogus"}, `unknown optimizer "bogus"`},
		{[]string{"scaling", "-q", "-steps", "1", "-model", "bogus"}, `unknown model "bogus"`},
		{[]string{"scaling", "-q", "-steps", "1", "-optimizer", "bogus"}, `unknown optimizer "bogus"`},
		{[]string{"scaling", "-q", "-steps", "1", "-input", "1x1x1"}, "kernel 2 larger than its input 1x1"},
		{[]string{"scaling", "-q", "-steps", "1", "-batch", "10000000"}, "model cnn with batches of 10000000 samples needs"},
		// The grid's own flags in -args ran other cells than the table named.
		{[]string{"affinity", "-model", "mlp", "-out", t.TempDir(), "-args", "-threads 1"}, "-threads is set by the grid for every cell"},
		{[]string{"affinity", "-model", "mlp", "-out", t.TempDir(), "-args", "--metrics=m.jsonl"}, "-metrics is set by the grid for every cell"},
	} {
		r := hpctrain(t, 0, time.Minute, append([]string{"bench"}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.out, c.want) || strings.Count(r.out, "\n") != 1 {
			t.Errorf("bench %v: exit %d, want 2 and one line with %q:\n%s", c.args, r.code, c.want, r.out)
		}
	}
}
