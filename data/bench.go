package data

import (
	"fmt"
	"io"
	"time"
)

// MeasureLoader measures how many samples per second a Loader of ds with
// opts delivers to a consumer that does nothing but Release: epochs of a
// single-rank sampler with batch, after an untimed warm-up of
// 2*(Workers+1) batches, for at least seconds of wall time. It is the
// loader's ceiling; a trainer that computes meanwhile sees the loader's
// cost only where it exceeds the compute.
func MeasureLoader(ds Dataset, opts LoaderOptions, batch int, seconds float64) (samplesPerSec float64, err error) {
	if batch < 1 || ds.Len() < batch {
		return 0, fmt.Errorf("measure loader: batch %d for %d samples", batch, ds.Len())
	}
	opts.Batch = 0
	l, err := NewLoader(ds, NewSampler(ds.Len(), batch, 0, 1, opts.Seed), opts)
	if err != nil {
		return 0, err
	}
	defer l.Close()
	warm := 2 * (opts.Workers + 1)
	var start time.Time
	samples := 0
	for epoch := 1; ; epoch++ {
		l.Start(epoch)
		for {
			b, ok := l.Next()
			if !ok {
				break
			}
			n := b.N
			l.Release(b)
			if warm > 0 {
				if warm--; warm == 0 {
					start = time.Now()
				}
				continue
			}
			samples += n
			if el := time.Since(start).Seconds(); el >= seconds {
				return float64(samples) / el, nil
			}
		}
	}
}

// BenchChain is a named transform chain for loader benchmarks.
type BenchChain struct {
	Name       string
	Transforms []Transform
}

// BenchChains are the chains loader benchmarks compare: "none", "light"
// (flip) and "heavy" (random crop with padding 4, flip, bilinear rotation
// up to 15 degrees, Gaussian blur sigma 1), after the book's heavy image
// pipeline (chapter 5).
func BenchChains() []BenchChain {
	return []BenchChain{
		{"none", nil},
		{"light", []Transform{Flip(0.5)}},
		{"heavy", []Transform{RandomCrop(4, 0, 0), Flip(0.5), Rotate(15, Bilinear), Blur(1)}},
	}
}

// LoaderResult is one row of BenchLoader.
type LoaderResult struct {
	Chain         string  `json:"chain"`
	Workers       int     `json:"workers"`
	Batch         int     `json:"batch"`
	SamplesPerSec float64 `json:"samples_per_second"`
	MBPerSec      float64 `json:"mb_per_second"` // float32 batches delivered, 1e6 bytes
	Speedup       float64 `json:"speedup"`       // over the chain's first worker count
}

// BenchLoader measures every chain of BenchChains with each worker count
// (MeasureLoader, seconds per row after warm-up), writes a Markdown table
// to w and returns its rows:
//
//	| chain | workers | batch | samples/s | MB/s | speedup |
//
// MB/s counts the float32 batches delivered; speedup is relative to the
// chain's first worker count.
func BenchLoader(w io.Writer, ds Dataset, batch int, workers []int, seconds float64) ([]LoaderResult, error) {
	size := ds.Shape().Size()
	fmt.Fprintf(w, "| chain | workers | batch | samples/s | MB/s | speedup |\n|---|---:|---:|---:|---:|---:|\n")
	var rows []LoaderResult
	for _, c := range BenchChains() {
		var base float64
		for k, nw := range workers {
			rate, err := MeasureLoader(ds, LoaderOptions{Workers: nw, Transforms: c.Transforms, Seed: 1}, batch, seconds)
			if err != nil {
				return rows, fmt.Errorf("bench loader %s, %d workers: %w", c.Name, nw, err)
			}
			if k == 0 {
				base = rate
			}
			r := LoaderResult{Chain: c.Name, Workers: nw, Batch: batch, SamplesPerSec: rate, MBPerSec: rate * float64(4*size) / 1e6, Speedup: rate / base}
			rows = append(rows, r)
			fmt.Fprintf(w, "| %s | %d | %d | %.0f | %.1f | %.2f |\n", r.Chain, r.Workers, r.Batch, r.SamplesPerSec, r.MBPerSec, r.Speedup)
		}
	}
	return rows, nil
}
