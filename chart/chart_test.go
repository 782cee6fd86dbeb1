package chart

import (
	"fmt"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/plot"

	"hpctrain/optim"
)

// outDir is where the figures go: $CHART_OUT to keep them, else a temp dir.
func outDir(t *testing.T) string {
	if d := os.Getenv("CHART_OUT"); d != "" {
		return d
	}
	return t.TempDir()
}

// checkPNG asserts path is a non-empty PNG of w x h pixels.
func checkPNG(t *testing.T, path string, w, h int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if st, _ := f.Stat(); st.Size() == 0 {
		t.Fatalf("%s is empty", path)
	}
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		t.Errorf("%s is %dx%d, want %dx%d", path, b.Dx(), b.Dy(), w, h)
	}
}

func TestTrajectoriesPNG(t *testing.T) {
	paths, err := optim.Trajectories(nil, 200)
	if err != nil {
		t.Fatal(err)
	}
	var runs []Run
	for _, p := range paths {
		runs = append(runs, Run{Name: p.Name, X: p.X, Y: p.Y})
	}
	out := filepath.Join(outDir(t), "optim_traj.png")
	if err := Trajectories(out, optim.Quadratic, [2]float64{-1.2, 1.2}, [2]float64{-1.2, 1.2}, runs); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, out, TrajectoryWidth, TrajectoryHeight)
	if err := Trajectories(out, optim.Quadratic, [2]float64{1, 1}, [2]float64{-1, 1}, runs); err == nil {
		t.Error("empty window accepted")
	}
}

const metricsA = `{"epoch":1,"step":938,"world_size":2,"threads_per_rank":4,"train_loss":0.62,"test_accuracy":0.78,"samples_per_second":5100,"train_seconds":11.7}
{"epoch":2,"step":1876,"world_size":2,"threads_per_rank":4,"train_loss":0.41,"test_accuracy":0.82,"samples_per_second":5200,"train_seconds":23.2}

{"epoch":3,"step":2814,"world_size":2,"threads_per_rank":4,"train_loss":0.35,"test_accuracy":0.84,"samples_per_second":5150,"train_seconds":34.9,"new_field":1}
{"final":true,"epoch":3,"step":2814,"world_size":2,"threads_per_rank":4,"train_loss":0.35,"test_accuracy":0.84,"samples_per_second":5150,"train_seconds":34.9}
`

func TestReadMetrics(t *testing.T) {
	recs, err := ReadMetrics(strings.NewReader(metricsA))
	if err != nil {
		t.Fatal(err)
	}
	want := Record{Epoch: 2, Step: 1876, WorldSize: 2, ThreadsPerRank: 4, TrainLoss: 0.41, TestAccuracy: 0.82, SamplesPerSecond: 5200, TrainSeconds: 23.2}
	if len(recs) != 4 || recs[1] != want || !recs[3].Final {
		t.Errorf("records %+v", recs)
	}
	const ok = `{"epoch":1,"train_loss":0.5,"test_accuracy":0.8}` + "\n"
	for _, tc := range []struct{ in, want string }{
		{ok + "{\"epoch\":2,", "metrics line 2:"},
		{ok + "\n[1,2]\n", "metrics line 3: want a JSON object"},
		{"{\"epoch\":\"one\"}", "metrics line 1:"},
		{ok + ok[:len(ok)-1] + " " + ok, "metrics line 2:"},
		{ok + `{"train_loss":0.5,"test_accuracy":0.8}`, "metrics line 2: no \"epoch\""},
		{ok + `{"epoch":2,"test_accuracy":0.8}`, "metrics line 2: no \"train_loss\""},
		{ok + `{"epoch":2,"train_loss":0.5}`, "metrics line 2: no \"test_accuracy\""},
		// Values no training writes; a loss of -1e308 beside +1e308
		// once hung the plot's axis (its range overflowed).
		{ok + `{"epoch":2,"train_loss":-1e308,"test_accuracy":0.8}`, "metrics line 2: train_loss -1e+308: want a finite loss >= 0"},
		{ok + `{"epoch":2,"train_loss":0.5,"test_accuracy":1e308}`, "metrics line 2: test_accuracy 1e+308: want a fraction in [0, 1]"},
		{ok + `{"epoch":-2,"train_loss":0.5,"test_accuracy":0.8}`, "metrics line 2: epoch -2"},
		{"epoch=1", "metrics line 1: want a JSON object"},
	} {
		if _, err := ReadMetrics(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.want)
		}
	}
}

func FuzzReadMetrics(f *testing.F) {
	f.Add(metricsA)
	f.Add("{\"epoch\":1}\n{")
	f.Add(`{"epoch":1,"train_loss":-1e308,"test_accuracy":0.5}`)
	f.Fuzz(func(t *testing.T, s string) { ReadMetrics(strings.NewReader(s)) })
}

func TestMetricsPNG(t *testing.T) {
	dir := outDir(t)
	a := filepath.Join(dir, "np2_t4.jsonl")
	b := filepath.Join(dir, "np4_t2.jsonl")
	os.WriteFile(a, []byte(metricsA), 0o644)
	os.WriteFile(b, []byte(strings.ReplaceAll(strings.ReplaceAll(metricsA, "0.8", "0.7"), "0.3", "0.4")), 0o644)
	out := filepath.Join(dir, "curves.png")
	if err := MetricsPNG(out, []string{a, b}); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, out, CurvesWidth, CurvesHeight)

	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"epoch":1,"train_loss":0.5,"test_accuracy":0.8}`+"\n{oops}\n"), 0o644)
	if err := MetricsPNG(out, []string{a, bad}); err == nil || !strings.Contains(err.Error(), "bad.jsonl: metrics line 2") {
		t.Errorf("bad file: %v", err)
	}
	if err := MetricsPNG(out, []string{filepath.Join(dir, "missing.jsonl")}); err == nil {
		t.Error("missing file accepted")
	}
}

func TestCurves(t *testing.T) {
	out := filepath.Join(outDir(t), "one.png")
	s := Series{Name: "run", Epoch: []float64{1, 2, 3}, Loss: []float64{1, 0.5, 0.3}, Accuracy: []float64{0.5, 0.7, math.NaN()}[:2]}
	if err := Curves(out, "t", []Series{s}); err == nil {
		t.Error("mismatched lengths accepted")
	}
	s.Accuracy = nil
	if err := Curves(out, "t", []Series{s}); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, out, CurvesWidth, CurvesHeight)
}

// TestCurvesTicks: the panels' y axes are labelled at multiples of a step
// of 1, 2 or 5 times a power of ten, at least 4 labels and at most 11,
// every label its tick's value and no two alike; plot's default ticks
// labelled a loss from 2.0984 to 2.1206 2.1, 2.1, 2.1, and one from 0.31
// to 0.36 0.32, 0.34, 0.36.
func TestCurvesTicks(t *testing.T) {
	s := Series{Name: "run", Epoch: []float64{1, 2}, Loss: []float64{0.36, 0.31}, Accuracy: []float64{0.8, 0.85}}
	loss, acc, err := curves("c.png", "t", []Series{s})
	if err != nil {
		t.Fatal(err)
	}
	labels := func(p *plot.Plot, lo, hi float64) []string {
		t.Helper()
		var ls []string
		var vs []float64
		for _, tk := range p.Y.Tick.Marker.Ticks(lo, hi) {
			if tk.IsMinor() {
				continue
			}
			v, err := strconv.ParseFloat(tk.Label, 64)
			if err != nil || math.Abs(v-tk.Value) > 1e-9*(hi-lo) || tk.Value < lo || tk.Value > hi {
				t.Errorf("[%g, %g]: label %q at %g", lo, hi, tk.Label, tk.Value)
			}
			ls, vs = append(ls, tk.Label), append(vs, v)
		}
		if len(ls) < 4 || len(ls) > 11 {
			t.Errorf("[%g, %g]: %d labels %q, want 4 to 11", lo, hi, len(ls), ls)
			return ls
		}
		step := vs[1] - vs[0]
		m := step / math.Pow(10, math.Floor(math.Log10(step)+1e-6))
		if math.Abs(m-1) > 1e-6 && math.Abs(m-2) > 1e-6 && math.Abs(m-5) > 1e-6 {
			t.Errorf("[%g, %g]: step %g of labels %q is not 1, 2 or 5 x 10^k", lo, hi, step, ls)
		}
		for i := 1; i < len(ls); i++ {
			if ls[i] == ls[i-1] || math.Abs(vs[i]-vs[i-1]-step) > 1e-6*step {
				t.Errorf("[%g, %g]: labels %q not evenly stepped or alike", lo, hi, ls)
				break
			}
		}
		return ls
	}
	if got := strings.Join(labels(loss, 0.31, 0.36), " "); got != "0.31 0.32 0.33 0.34 0.35 0.36" {
		t.Errorf("loss 0.31 to 0.36: labels %s", got)
	}
	if got := strings.Join(labels(loss, 2.0984, 2.1206), " "); got != "2.100 2.105 2.110 2.115 2.120" {
		t.Errorf("loss 2.0984 to 2.1206: labels %s", got)
	}
	if got := strings.Join(labels(acc, 0.312, 0.315), " "); got != "0.312 0.313 0.314 0.315" {
		t.Errorf("accuracy 0.312 to 0.315: labels %s", got)
	}
	if got := strings.Join(labels(loss, 1.2e6, 1.5e6), " "); got != "1.2e+06 1.3e+06 1.4e+06 1.5e+06" {
		t.Errorf("loss 1.2e6 to 1.5e6: labels %s", got)
	}
	if got := strings.Join(labels(loss, -0.3, 1.2), " "); got != "-0.2 0.0 0.2 0.4 0.6 0.8 1.0 1.2" {
		t.Errorf("-0.3 to 1.2: labels %s", got)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		lo := math.Pow(10, rng.Float64()*8-5)
		hi := lo * (1 + math.Pow(10, rng.Float64()*6-6))
		labels(acc, lo, hi)
		labels(acc, 0, math.Pow(10, rng.Float64()*10-3))
	}
}

// TestMetricsNames: a run is named by the shortest end of its path that
// tells it from the others; the base name alone gave two runs in a/ and
// b/ the same legend entry.
func TestMetricsNames(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for _, f := range []string{"a/m.jsonl", "b/m.jsonl", "c.jsonl", "x/s/m.jsonl", "y/s/m.jsonl"} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(metricsA), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	for _, c := range []struct {
		files []string
		want  string
	}{
		{files[:1], "m.jsonl"},
		{files, "a/m.jsonl b/m.jsonl c.jsonl x/s/m.jsonl y/s/m.jsonl"},
		{[]string{files[2], files[0]}, "c.jsonl m.jsonl"},
		{[]string{files[0], files[0]}, "m.jsonl m.jsonl"}, // one file twice
		{[]string{files[0], files[3]}, "a/m.jsonl s/m.jsonl"},
	} {
		series, err := metricsSeries(c.files)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range series {
			names = append(names, s.Name)
		}
		if got := strings.Join(names, " "); got != c.want {
			t.Errorf("%q: named %s, want %s", c.files, got, c.want)
		}
	}
	// Relative paths are compared from the working directory.
	t.Chdir(filepath.Join(dir, "a"))
	series, err := metricsSeries([]string{"m.jsonl", "../b/m.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	if series[0].Name != "a/m.jsonl" || series[1].Name != "b/m.jsonl" {
		t.Errorf("m.jsonl and ../b/m.jsonl from a/: named %q and %q", series[0].Name, series[1].Name)
	}
}

// TestMetricsResumed: in a file a resumed run appended to, each epoch is
// one point, the resumed run's, and the lines the stopped run wrote past
// its checkpoint go; the curve went back from epoch 4 to 3 and on again.
func TestMetricsResumed(t *testing.T) {
	line := func(epoch, step, from int, loss float64) string {
		return fmt.Sprintf(`{"epoch":%d,"step":%d,"train_loss":%g,"test_accuracy":0.5,"resumed_from":%d}`+"\n", epoch, step, loss, from)
	}
	stopped := line(1, 32, 0, 1) + line(2, 64, 0, 0.9) + line(3, 96, 0, 0.8) + line(4, 128, 0, 0.7)
	for _, c := range []struct {
		name, file string
		epochs     []float64
		loss       []float64
	}{
		{"resumed at 80", stopped + line(3, 96, 80, 0.75) + line(4, 128, 80, 0.65) + `{"final":true,"epoch":4,"resumed_from":80}` + "\n",
			[]float64{1, 2, 3, 4}, []float64{1, 0.9, 0.75, 0.65}},
		// Resumed with -epochs 3: the stopped run's epoch 4 is not this run's.
		{"resumed to 3 epochs", stopped + line(3, 96, 80, 0.75),
			[]float64{1, 2, 3}, []float64{1, 0.9, 0.75}},
		{"resumed twice", stopped + line(3, 96, 80, 0.75) + line(4, 128, 80, 0.65) + line(2, 64, 40, 0.85) + line(3, 96, 40, 0.74),
			[]float64{1, 2, 3}, []float64{1, 0.85, 0.74}},
		{"not resumed", stopped, []float64{1, 2, 3, 4}, []float64{1, 0.9, 0.8, 0.7}},
	} {
		f := filepath.Join(t.TempDir(), "m.jsonl")
		if err := os.WriteFile(f, []byte(c.file), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := metricsSeries([]string{f})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !slices.Equal(s[0].Epoch, c.epochs) || !slices.Equal(s[0].Loss, c.loss) {
			t.Errorf("%s: epochs %v losses %v, want %v %v", c.name, s[0].Epoch, s[0].Loss, c.epochs, c.loss)
		}
	}
}
