package data

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// epochBatches runs one epoch (or range when lo >= 0) and copies out every
// batch.
func epochBatches(t *testing.T, l *Loader, epoch, lo, hi int) (xs [][]float32, ys [][]int32) {
	t.Helper()
	if lo >= 0 {
		l.StartRange(lo, hi)
	} else {
		l.Start(epoch)
	}
	for step := 0; ; step++ {
		b, ok := l.Next()
		if !ok {
			break
		}
		if b.Step != step || len(b.X) != b.N*b.Shape.Size() || len(b.Y) != b.N {
			t.Fatalf("batch step %d (want %d), N %d, %d values, %d labels", b.Step, step, b.N, len(b.X), len(b.Y))
		}
		xs = append(xs, append([]float32(nil), b.X...))
		ys = append(ys, append([]int32(nil), b.Y...))
		l.Release(b)
	}
	if len(xs) != l.Steps() {
		t.Fatalf("%d batches, Steps() = %d", len(xs), l.Steps())
	}
	return xs, ys
}

func sameBatches(ax [][]float32, ay [][]int32, bx [][]float32, by [][]int32) error {
	if len(ax) != len(bx) {
		return fmt.Errorf("%d batches vs %d", len(ax), len(bx))
	}
	for s := range ax {
		if len(ax[s]) != len(bx[s]) || !equalInt32(ay[s], by[s]) {
			return fmt.Errorf("step %d: labels %v vs %v", s, ay[s], by[s])
		}
		for j := range ax[s] {
			if math.Float32bits(ax[s][j]) != math.Float32bits(bx[s][j]) {
				return fmt.Errorf("step %d value %d: %v vs %v", s, j, ax[s][j], bx[s][j])
			}
		}
	}
	return nil
}

func equalInt32(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The batch sequence of an epoch is identical for any number of workers
// and any prefetch depth, with random transforms on.
func TestLoaderDeterministicAcrossWorkers(t *testing.T) {
	ds := NewSynthetic(203, Shape{12, 12, 3}, 10, 5)
	mean, std := []float32{0.5, 0.4, 0.3}, []float32{0.2, 0.25, 0.3}
	type run struct{ workers, prefetch int }
	var refX [][][]float32
	var refY [][][]int32
	for k, r := range []run{{0, 0}, {1, 0}, {2, 0}, {4, 0}, {4, 1}, {2, 7}} {
		opts := LoaderOptions{Workers: r.workers, Prefetch: r.prefetch, Mean: mean, Std: std, Transforms: heavyChain(), Seed: 9}
		l, err := NewLoader(ds, NewSampler(ds.Len(), 8, 0, 1, 3), opts)
		if err != nil {
			t.Fatal(err)
		}
		if l.Shape() != (Shape{12, 12, 3}) {
			t.Fatalf("shape %v", l.Shape())
		}
		for e := 1; e <= 2; e++ {
			x, y := epochBatches(t, l, e, -1, 0)
			if k == 0 {
				refX, refY = append(refX, x), append(refY, y)
				continue
			}
			if err := sameBatches(refX[e-1], refY[e-1], x, y); err != nil {
				t.Errorf("%d workers, prefetch %d, epoch %d differs from synchronous: %v", r.workers, r.prefetch, e, err)
			}
		}
		l.Close()
	}
	if sameBatches(refX[0], refY[0], refX[1], refY[1]) == nil {
		t.Error("epochs 1 and 2 are identical")
	}
}

// A sample's augmentation depends on (seed, epoch, index) only: two ranks
// with batch 4 together see what one rank with batch 8 sees.
func TestLoaderAugmentationPerSample(t *testing.T) {
	ds := NewSynthetic(64, Shape{8, 8, 1}, 4, 1)
	opts := LoaderOptions{Workers: 2, Transforms: []Transform{RandomCrop(2, 0, 0), Flip(0.5), Rotate(20, Nearest)}, Seed: 4}
	one, _ := NewLoader(ds, NewSampler(64, 8, 0, 1, 11), opts)
	r0, _ := NewLoader(ds, NewSampler(64, 4, 0, 2, 11), opts)
	r1, _ := NewLoader(ds, NewSampler(64, 4, 1, 2, 11), opts)
	x, y := epochBatches(t, one, 3, -1, 0)
	x0, y0 := epochBatches(t, r0, 3, -1, 0)
	x1, y1 := epochBatches(t, r1, 3, -1, 0)
	for s := range x {
		jx := append(append([]float32{}, x0[s]...), x1[s]...)
		jy := append(append([]int32{}, y0[s]...), y1[s]...)
		if err := sameBatches(x[s:s+1], y[s:s+1], [][]float32{jx}, [][]int32{jy}); err != nil {
			t.Fatalf("step %d: 2 ranks x 4 differ from 1 rank x 8: %v", s, err)
		}
	}
}

// Without transforms the loader gives what Batcher gives.
func TestLoaderMatchesBatcher(t *testing.T) {
	ds := NewSynthetic(50, Shape{5, 4, 3}, 3, 2)
	mean, std := []float32{0.1, 0.2, 0.3}, []float32{0.5, 1, 2}
	bt := NewBatcher(ds, mean, std)
	for _, workers := range []int{0, 3} {
		s := NewSampler(50, 7, 0, 1, 1)
		l, err := NewLoader(ds, s, LoaderOptions{Workers: workers, Mean: mean, Std: std})
		if err != nil {
			t.Fatal(err)
		}
		xs, ys := epochBatches(t, l, 2, -1, 0)
		x, y := make([]float32, 7*60), make([]int32, 7)
		for step := range xs {
			bt.Fill(s.Batch(step), x, y)
			if err := sameBatches(xs[step:step+1], ys[step:step+1], [][]float32{x}, [][]int32{y}); err != nil {
				t.Fatalf("%d workers: %v", workers, err)
			}
		}
		// Evaluation over a range: no augmentation, a short last batch.
		xs, ys = epochBatches(t, l, 0, 3, 25)
		if len(xs) != 4 || len(ys[3]) != 1 {
			t.Fatalf("range [3,25) in batches of 7: %d batches, last %d", len(xs), len(ys[len(ys)-1]))
		}
		for step := range xs {
			lo, hi := 3+7*step, min(25, 3+7*(step+1))
			bt.FillRange(lo, hi, x, y)
			if err := sameBatches(xs[step:step+1], ys[step:step+1], [][]float32{x[:(hi-lo)*60]}, [][]int32{y[:hi-lo]}); err != nil {
				t.Fatalf("%d workers, range step %d: %v", workers, step, err)
			}
		}
		l.Close()
	}
}

// Evaluation ignores the random transforms and applies EvalTransforms.
func TestLoaderEvalTransforms(t *testing.T) {
	ds := NewSynthetic(20, Shape{10, 10, 1}, 2, 2)
	l, err := NewLoader(ds, nil, LoaderOptions{Batch: 6, Workers: 1,
		Transforms: []Transform{RandomCrop(2, 8, 8), Flip(0.5)}, EvalTransforms: []Transform{CenterCrop(8, 8)}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	xs, _ := epochBatches(t, l, 0, 0, 20)
	ref := NewBatcher(ds, nil, nil)
	x, y := make([]float32, 100), make([]int32, 1)
	for i := 0; i < 20; i++ {
		ref.FillRange(i, i+1, x, y)
		for r := 0; r < 8; r++ {
			for c := 0; c < 8; c++ {
				if xs[i/6][(i%6)*64+r*8+c] != x[(r+1)*10+c+1] {
					t.Fatalf("sample %d (%d,%d) is not the centre crop", i, r, c)
				}
			}
		}
	}
	if _, err := NewLoader(ds, nil, LoaderOptions{Batch: 6, Transforms: []Transform{RandomCrop(2, 8, 8)}}); err == nil || !strings.Contains(err.Error(), "eval transforms") {
		t.Errorf("shape mismatch: %v", err)
	}
}

func TestLoaderNoAlloc(t *testing.T) {
	ds := NewSynthetic(4000, Shape{12, 12, 3}, 10, 1)
	for _, workers := range []int{0, 2} {
		l, err := NewLoader(ds, NewSampler(ds.Len(), 4, 0, 1, 1), LoaderOptions{Workers: workers, Transforms: heavyChain(), Mean: []float32{.5, .5, .5}, Std: []float32{.2, .2, .2}})
		if err != nil {
			t.Fatal(err)
		}
		l.Start(1)
		cycle := func() {
			b, ok := l.Next()
			if !ok {
				t.Fatal("epoch ended")
			}
			l.Release(b)
		}
		cycle() // first use grows the scratch buffers
		cycle()
		if a := testing.AllocsPerRun(100, cycle); a != 0 {
			t.Errorf("%d workers: Next/Release allocates %v times per batch", workers, a)
		}
		l.Close()
	}
}

// Restarting mid-epoch, holding batches across Start, and Close with
// workers mid-flight neither deadlock nor corrupt the pool.
func TestLoaderRestart(t *testing.T) {
	ds := NewSynthetic(100, Shape{4, 4, 1}, 2, 1)
	l, err := NewLoader(ds, NewSampler(100, 5, 0, 1, 1), LoaderOptions{Workers: 3, Prefetch: 2, Transforms: []Transform{Flip(0.5)}})
	if err != nil {
		t.Fatal(err)
	}
	for e := 1; e <= 5; e++ {
		l.Start(e)
		held, _ := l.Next()
		b, _ := l.Next()
		l.Release(b)
		l.Start(e + 100) // abandon the epoch while holding one batch
		b, _ = l.Next()
		l.Release(held)
		l.Release(b)
	}
	want, wantY := epochBatches(t, l, 7, -1, 0)
	l2, _ := NewLoader(ds, NewSampler(100, 5, 0, 1, 1), LoaderOptions{Transforms: []Transform{Flip(0.5)}})
	got, gotY := epochBatches(t, l2, 7, -1, 0)
	if err := sameBatches(want, wantY, got, gotY); err != nil {
		t.Errorf("after restarts: %v", err)
	}
	l.Start(8)
	l.Close()
	l.Close()
}

func TestLoaderMisuse(t *testing.T) {
	ds := NewSynthetic(30, Shape{4, 4, 3}, 2, 1)
	s := NewSampler(30, 5, 0, 1, 1)
	for _, c := range []struct {
		opts LoaderOptions
		want string
	}{
		{LoaderOptions{Mean: []float32{0.5}}, "want 3 values"},
		{LoaderOptions{Std: []float32{1, 0, 1}}, "std[1]"},
		{LoaderOptions{Workers: -1}, "workers -1"},
		{LoaderOptions{Batch: 6}, "sampler's batch is 5"},
		{LoaderOptions{Transforms: []Transform{CenterCrop(5, 5)}}, "center_crop=5x5"},
	} {
		if _, err := NewLoader(ds, s, c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.opts, err, c.want)
		}
	}
	if _, err := NewLoader(ds, NewSampler(31, 5, 0, 1, 1), LoaderOptions{}); err == nil {
		t.Error("sampler larger than the data set accepted")
	}
	if _, err := NewLoader(ds, nil, LoaderOptions{}); err == nil {
		t.Error("no batch size accepted")
	}
	l, _ := NewLoader(ds, s, LoaderOptions{Prefetch: 1})
	wantPanic(t, "Next before Start", func() { l.Next() })
	l.Start(1)
	a, _ := l.Next()
	l.Next()
	wantPanic(t, "holds every batch", func() { l.Next() })
	l.Release(a)
	wantPanic(t, "not held", func() { l.Release(a) })
	l.Close()
	wantPanic(t, "after Close", func() { l.Start(2) })
}

func wantPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		r := recover()
		if s, _ := r.(string); !strings.Contains(s, want) {
			t.Errorf("panic %v, want one containing %q", r, want)
		}
	}()
	f()
}

func TestMeasureLoader(t *testing.T) {
	ds := NewSynthetic(256, Shape{8, 8, 3}, 10, 1)
	for _, workers := range []int{0, 2} {
		r, err := MeasureLoader(ds, LoaderOptions{Workers: workers, Transforms: []Transform{Flip(0.5)}}, 16, 0.05)
		if err != nil || !(r > 0) {
			t.Errorf("%d workers: %v samples/s, %v", workers, r, err)
		}
	}
	if _, err := MeasureLoader(ds, LoaderOptions{}, 1000, 0.01); err == nil {
		t.Error("batch larger than the data set accepted")
	}
	var sb strings.Builder
	if rows, err := BenchLoader(&sb, ds, 16, []int{0, 1}, 0.01); err != nil || len(rows) != 2*len(BenchChains()) || strings.Count(sb.String(), "\n") != 2+2*len(BenchChains()) {
		t.Errorf("BenchLoader: %v\n%s", err, sb.String())
	}
}

// BenchmarkLoader measures loader throughput on CIFAR-sized synthetic
// samples for each chain and worker count; the consumer only releases.
func BenchmarkLoader(b *testing.B) {
	ds := NewSynthetic(2048, CIFAR10Shape, 10, 1)
	const batch = 64
	for _, c := range BenchChains() {
		for _, workers := range []int{0, 1, 2, 4} {
			b.Run(fmt.Sprintf("%s/workers=%d", c.Name, workers), func(b *testing.B) {
				l, err := NewLoader(ds, NewSampler(ds.Len(), batch, 0, 1, 1), LoaderOptions{Workers: workers, Transforms: c.Transforms, Seed: 1})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				epoch := 1
				l.Start(epoch)
				b.SetBytes(int64(batch * 4 * ds.Shape().Size()))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					bt, ok := l.Next()
					if !ok {
						epoch++
						l.Start(epoch)
						bt, _ = l.Next()
					}
					l.Release(bt)
				}
				b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "samples/s")
			})
		}
	}
}

// StartAt(e, k) continues the epoch exactly where Start(e) was at step k,
// for any number of workers: what a resumed training run relies on.
func TestLoaderStartAt(t *testing.T) {
	ds := NewSynthetic(90, Shape{6, 6, 3}, 3, 2)
	opts := LoaderOptions{Transforms: heavyChain()[2:], Seed: 5}
	ref, _ := NewLoader(ds, NewSampler(90, 7, 0, 1, 4), opts)
	wantX, wantY := epochBatches(t, ref, 2, -1, 0)
	for _, workers := range []int{0, 1, 3} {
		opts.Workers = workers
		l, err := NewLoader(ds, NewSampler(90, 7, 0, 1, 4), opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, first := range []int{0, 1, 5, len(wantX) - 1, len(wantX)} {
			l.StartAt(2, first)
			var xs [][]float32
			var ys [][]int32
			for step := first; ; step++ {
				b, ok := l.Next()
				if !ok {
					break
				}
				if b.Step != step {
					t.Fatalf("%d workers, from %d: batch of step %d, want %d", workers, first, b.Step, step)
				}
				xs = append(xs, append([]float32(nil), b.X...))
				ys = append(ys, append([]int32(nil), b.Y...))
				l.Release(b)
			}
			if err := sameBatches(wantX[first:], wantY[first:], xs, ys); err != nil {
				t.Errorf("%d workers, from step %d: %v", workers, first, err)
			}
		}
		l.Close()
	}
	defer func() {
		if r := recover(); r == nil {
			t.Error("StartAt past the epoch's end did not panic")
		}
	}()
	ref.StartAt(1, len(wantX)+1)
}

// Queued counts assembled batches: workers fill every free buffer, and
// Next takes from them; without workers nothing is queued.
func TestLoaderQueued(t *testing.T) {
	ds := NewSynthetic(64, Shape{4, 4, 1}, 2, 1)
	for _, workers := range []int{0, 2} {
		l, _ := NewLoader(ds, NewSampler(64, 4, 0, 1, 1), LoaderOptions{Workers: workers, Prefetch: 3})
		l.Start(1)
		want := 0
		if workers > 0 {
			want = 4 // Prefetch+1 buffers, none held
		}
		for t0 := time.Now(); l.Queued() < want && time.Since(t0) < 5*time.Second; {
			time.Sleep(time.Millisecond)
		}
		if got := l.Queued(); got != want {
			t.Errorf("%d workers: %d queued, want %d", workers, got, want)
		}
		b, _ := l.Next()
		if got := l.Queued(); workers > 0 && got != want-1 {
			t.Errorf("%d workers: %d queued while the caller holds one, want %d", workers, got, want-1)
		}
		l.Release(b)
		l.Stop()
		if l.Queued() != 0 {
			t.Errorf("%d workers: %d queued after Stop", workers, l.Queued())
		}
		l.Close()
	}
}
