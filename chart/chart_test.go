package chart

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
