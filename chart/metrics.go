package chart

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"hpctrain/internal/atomicfile"
)

// Record is one line of the training loop's JSON-lines metrics: one per
// epoch, and a last one with Final set (the run's summary).
type Record struct {
	Epoch            int     `json:"epoch"`
	Step             int     `json:"step"`
	WorldSize        int     `json:"world_size"`
	ThreadsPerRank   int     `json:"threads_per_rank"`
	TrainLoss        float64 `json:"train_loss"`
	TestAccuracy     float64 `json:"test_accuracy"`
	SamplesPerSecond float64 `json:"samples_per_second"`
	TrainSeconds     float64 `json:"train_seconds"`
	// ResumedFrom is the step a resumed run went on from; its lines are
	// appended to those of the run it continues.
	ResumedFrom int  `json:"resumed_from"`
	Final       bool `json:"final"`
}

// ReadMetrics parses JSON-lines metrics: one JSON object per line, blank
// lines skipped, unknown fields ignored (newer writers may add some). A
// malformed line, a line that is not one object, or a per-epoch line without
// "epoch", "train_loss" and "test_accuracy", or with values no training
// writes (a negative or infinite loss, an accuracy outside [0, 1]), is an
// error naming the line number (from 1).
func ReadMetrics(r io.Reader) ([]Record, error) {
	var recs []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if line[0] != '{' {
			return nil, fmt.Errorf("metrics line %d: want a JSON object, got %q", n, abbrev(line))
		}
		var rec Record
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(line, &keys); err != nil {
			return nil, fmt.Errorf("metrics line %d: %w", n, err)
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			return nil, fmt.Errorf("metrics line %d: %w", n, err)
		}
		if !rec.Final {
			for _, k := range []string{"epoch", "train_loss", "test_accuracy"} {
				if _, ok := keys[k]; !ok {
					return nil, fmt.Errorf("metrics line %d: no %q field (and not \"final\": true)", n, k)
				}
			}
			switch {
			case rec.Epoch < 0:
				return nil, fmt.Errorf("metrics line %d: epoch %d: want >= 0", n, rec.Epoch)
			case !(rec.TrainLoss >= 0) || math.IsInf(rec.TrainLoss, 0):
				return nil, fmt.Errorf("metrics line %d: train_loss %g: want a finite loss >= 0", n, rec.TrainLoss)
			case !(rec.TestAccuracy >= 0 && rec.TestAccuracy <= 1):
				return nil, fmt.Errorf("metrics line %d: test_accuracy %g: want a fraction in [0, 1]", n, rec.TestAccuracy)
			}
		}
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("metrics: read: %w", err)
	}
	return recs, nil
}

func abbrev(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

// ErrInput is in the chain of MetricsPNG's errors that its caller's input
// caused, for a command to tell them from a failure to write (a full disk):
// a file name that is empty, a metrics file that is missing, unreadable or
// not metrics, and an out that cannot be written (a missing directory, a
// directory, no permission).
var ErrInput = errors.New("chart: bad input")

// inputError marks err as ErrInput, its message unchanged.
type inputError struct{ error }

func (e inputError) Unwrap() error      { return e.error }
func (inputError) Is(target error) bool { return target == ErrInput }

// MetricsPNG reads each JSON-lines metrics file and writes Curves to out:
// training loss and test accuracy per epoch, one series per file, named by
// the shortest end of its path that tells it from the other files (see
// shortNames). Final summary lines are not plotted. In a file a resumed run
// appended to, its lines replace those of the epochs it trained again and
// those past the step it resumed from (the stopped run went on beyond its
// checkpoint), so each epoch is one point, from the run that went on.
func MetricsPNG(out string, files []string) error {
	if err := atomicfile.Check(out); err != nil {
		return inputError{fmt.Errorf("chart: write %s: %w", out, err)}
	}
	series, err := metricsSeries(files)
	if err != nil {
		return inputError{err}
	}
	title := "training curves"
	if len(files) == 1 {
		title = series[0].Name
	}
	return Curves(out, title, series)
}

// metricsSeries reads MetricsPNG's files, one series each.
func metricsSeries(files []string) ([]Series, error) {
	if len(files) == 0 {
		return nil, errors.New("chart: metrics: no files given")
	}
	if i := slices.Index(files, ""); i >= 0 {
		return nil, fmt.Errorf("chart: metrics: file %d of %d has an empty name (a comma too many?)", i+1, len(files))
	}
	names := shortNames(files)
	var series []Series
	for i, name := range files {
		s, err := readSeries(name)
		if err != nil {
			return nil, err
		}
		s.Name = names[i]
		series = append(series, s)
	}
	return series, nil
}

// shortNames names each file by the shortest end of its path, in whole
// components, that no other file's path ends with: m.jsonl alone, but
// a/m.jsonl and b/m.jsonl side by side (the base names alone made two
// legend entries alike). Paths are compared made absolute, so m.jsonl
// beside ../b/m.jsonl is run1/m.jsonl beside b/m.jsonl; a file named twice
// keeps its base name.
func shortNames(files []string) []string {
	parts := make([][]string, len(files))
	for i, f := range files {
		p, err := filepath.Abs(f)
		if err != nil {
			p = filepath.Clean(f)
		}
		parts[i] = strings.Split(p, string(filepath.Separator))
	}
	names := make([]string, len(files))
	for i, p := range parts {
		for k := 1; k <= len(p); k++ {
			end := p[len(p)-k:]
			clash := false
			for _, q := range parts {
				if len(q) >= k && slices.Equal(q[len(q)-k:], end) && !slices.Equal(q, p) {
					clash = true
				}
			}
			if !clash || k == len(p) {
				names[i] = filepath.Join(end...)
				break
			}
		}
	}
	return names
}

func readSeries(name string) (Series, error) {
	f, err := os.Open(name)
	if err != nil {
		return Series{}, fmt.Errorf("chart: metrics: %w", err)
	}
	defer f.Close()
	recs, err := ReadMetrics(f)
	if err != nil {
		return Series{}, fmt.Errorf("chart: %s: %w", name, err)
	}
	var kept []Record
	from := 0 // the resumed_from of the lines so far
	for _, r := range recs {
		if r.Final {
			continue
		}
		resumed := r.ResumedFrom > 0 && r.ResumedFrom != from // a resumed run's first line
		from = r.ResumedFrom
		kept = slices.DeleteFunc(kept, func(k Record) bool {
			return k.Epoch == r.Epoch || (resumed && k.Step > r.ResumedFrom)
		})
		kept = append(kept, r)
	}
	slices.SortStableFunc(kept, func(a, b Record) int { return a.Epoch - b.Epoch })
	s := Series{Name: filepath.Base(name)}
	for _, r := range kept {
		s.Epoch = append(s.Epoch, float64(r.Epoch))
		s.Loss = append(s.Loss, r.TrainLoss)
		s.Accuracy = append(s.Accuracy, r.TestAccuracy)
	}
	if len(s.Epoch) == 0 {
		return Series{}, fmt.Errorf("chart: %s: no per-epoch records (HINT: pass the JSON-lines metrics file the training loop writes)", name)
	}
	return s, nil
}
