package optim

import (
	"fmt"
	"sort"

	"hpctrain/internal/kernels"
)

// Task is one parallel loop: Run handles elements [lo, hi) as worker w.
type Task = interface {
	Run(w, lo, hi int)
}

// Parallel runs a Task's loop over [0, n) on a pool of workers. Run must
// call t.Run(w, lo, hi) for disjoint ranges covering [0, n), with
// 0 <= w < Workers() and no two concurrent calls sharing a w, and return
// when all calls have returned. Workers must not change after SetParallel
// (Step keeps per-worker scratch). An implementation that allocates nothing
// keeps Step allocation-free. The training loop's thread pool satisfies it
// structurally: optim imports no hpctrain package but internal/kernels
// (the vectorised SGD update), so it knows nothing of models or MPI.
type Parallel interface {
	Workers() int
	Run(n int, t Task)
}

// parallelMin is the buffer length below which Step ignores its Parallel:
// handing a few thousand elements to other threads costs more than it saves.
const parallelMin = 1 << 14

// taskFunc adapts an optimizer's kernel method to Task. It is built once at
// construction, so passing it to Parallel.Run allocates nothing.
type taskFunc func(w, lo, hi int)

func (f taskFunc) Run(w, lo, hi int) { f(w, lo, hi) }

// base is what every optimizer shares: the layout, the lazily allocated
// state, the step counter and the parallel runner.
//
// # Invariants
//   - groups are sorted by Off and tile [0, n).
//   - state is nil, or holds len(sizes) buffers, state[i] of length sizes[i],
//     views into one allocation; state[0] is the step counter.
//   - p, g and lr are set only while Step runs (kernels read them).
type base struct {
	n      int
	groups []Group
	par    Parallel
	task   Task
	sizes  []int     // state buffer lengths; sizes[0] == 2 (step counter)
	inits  []float32 // the value each state buffer starts at
	state  [][]float32
	// per-worker, per-group scratch for norms (LARS, LAMB): nnorm floats
	// per group, allocated with the state and by SetParallel.
	nnorm   int
	partial []float64
	p, g    []float32
	lr      float64
	// h is SetBF16Copy's buffer (nil: none); copyTask runs task and then
	// converts its range into h, for optimizers whose kernels do not write
	// h themselves (selfCopy).
	h        []uint16
	copyTask Task
	selfCopy bool
}

func newBase(groups []Group, n int) (base, error) {
	if n < 0 {
		return base{}, fmt.Errorf("parameter count %d: must be >= 0", n)
	}
	if len(groups) == 0 {
		groups = []Group{{Name: "all", Len: n}}
	}
	gs := append([]Group(nil), groups...)
	sort.SliceStable(gs, func(i, j int) bool { return gs[i].Off < gs[j].Off })
	end := 0
	for _, g := range gs {
		if g.Len < 0 || g.Off != end {
			return base{}, fmt.Errorf("group %q [%d, %d): groups must tile [0, %d) without gaps or overlaps (next expected offset %d)", g.Name, g.Off, g.Off+g.Len, n, end)
		}
		end += g.Len
	}
	if end != n {
		return base{}, fmt.Errorf("groups cover [0, %d): must tile [0, %d)", end, n)
	}
	return base{n: n, groups: gs, sizes: []int{2}, inits: []float32{0}}, nil
}

// addState declares a state buffer of n elements starting at init and
// returns its index in State().
func (b *base) addState(init float32) int {
	b.sizes = append(b.sizes, b.n)
	b.inits = append(b.inits, init)
	return len(b.sizes) - 1
}

// ensure allocates the state on first use.
func (b *base) ensure() {
	if b.state != nil {
		return
	}
	total := 0
	for _, s := range b.sizes {
		total += s
	}
	all := make([]float32, total)
	b.state = make([][]float32, len(b.sizes))
	for i, s := range b.sizes {
		b.state[i] = all[:s:s]
		all = all[s:]
		for j := range b.state[i] {
			b.state[i][j] = b.inits[i]
		}
	}
	b.allocPartial()
}

func (b *base) allocPartial() {
	w := 1
	if b.par != nil {
		w = max(1, b.par.Workers())
	}
	if b.nnorm > 0 && len(b.partial) != w*len(b.groups)*b.nnorm {
		b.partial = make([]float64, w*len(b.groups)*b.nnorm)
	}
}

// StateLen implements StateSizer.
func (b *base) StateLen() int {
	n := 0
	for _, s := range b.sizes {
		n += s
	}
	return n
}

// State implements Optimizer.
func (b *base) State() [][]float32 { return b.state }

// Restore implements Optimizer.
func (b *base) Restore(state [][]float32) error {
	if len(state) != len(b.sizes) {
		return fmt.Errorf("optim: restore: %d state buffers, want %d", len(state), len(b.sizes))
	}
	for i, s := range state {
		if len(s) != b.sizes[i] {
			return fmt.Errorf("optim: restore: state buffer %d has %d values, want %d", i, len(s), b.sizes[i])
		}
	}
	b.ensure()
	for i, s := range state {
		copy(b.state[i], s)
	}
	return nil
}

// SetParallel implements Optimizer.
func (b *base) SetParallel(p Parallel) {
	b.par = p
	if b.state != nil {
		b.allocPartial()
	}
}

// steps is the number of Steps taken, from the state's step counter.
func (b *base) steps() int {
	return int(b.state[0][0]) + int(b.state[0][1])<<24
}

// begin checks the buffers, allocates the state on the first call, counts
// the step and returns its number t (1 on the first Step).
func (b *base) begin(params, grads []float32, lr float64) int {
	if len(params) != len(grads) {
		panic("optim: params and grads of different lengths")
	}
	if len(params) != b.n {
		panic("optim: params length differs from the n given to New")
	}
	b.ensure()
	t := b.steps() + 1
	b.state[0][0], b.state[0][1] = float32(t&(1<<24-1)), float32(t>>24)
	b.p, b.g, b.lr = params, grads, lr
	return t
}

// end drops the step's buffers so the optimizer does not pin them.
func (b *base) end() { b.p, b.g = nil, nil }

// SetBF16Copy implements BF16Copier.
func (b *base) SetBF16Copy(h []uint16) {
	if h != nil && len(h) != b.n {
		panic(fmt.Sprintf("optim: bf16 copy of %d values for %d parameters", len(h), b.n))
	}
	b.h = h
	if b.copyTask == nil {
		b.copyTask = taskFunc(b.runCopy) // once: Step then allocates nothing
	}
}

// runCopy is the copying Task: the kernel on [lo, hi), then the range's
// conversion, while this worker has it in cache.
func (b *base) runCopy(w, lo, hi int) {
	b.task.Run(w, lo, hi)
	kernels.ToBF16(b.h[lo:hi], b.p[lo:hi])
}

// run runs the kernel over [0, n), through the Parallel when worthwhile:
// the pass of a Step that gives the parameters their new values, and
// their bf16 copy where asked for.
func (b *base) run() {
	t := b.task
	if b.h != nil && !b.selfCopy {
		t = b.copyTask
	}
	b.runTask(t)
}

// runNorms runs the kernel without the copy: LARS's and LAMB's first pass,
// which only sums norms.
func (b *base) runNorms() { b.runTask(b.task) }

func (b *base) runTask(t Task) {
	if b.par == nil || b.n < parallelMin || b.par.Workers() <= 1 {
		t.Run(0, 0, b.n)
		return
	}
	b.par.Run(b.n, t)
}

// groupAt is the index of the group holding element i (groups tile [0, n)).
func (b *base) groupAt(i int) int {
	lo, hi := 0, len(b.groups)-1
	for lo < hi { // last group with Off <= i and Len > 0 at or after it
		mid := (lo + hi + 1) / 2
		if b.groups[mid].Off <= i {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// workers is the number of per-worker scratch rows in partial.
func (b *base) workers() int { return len(b.partial) / (len(b.groups) * b.nnorm) }

// reduce sums the per-worker partial norms into row 0 and clears the rest
// for the next Step.
func (b *base) reduce() {
	row := len(b.groups) * b.nnorm
	for w := 1; w < b.workers(); w++ {
		for i := 0; i < row; i++ {
			b.partial[i] += b.partial[w*row+i]
			b.partial[w*row+i] = 0
		}
	}
}

// each calls f for the part of [lo, hi) inside each group, in order.
func (b *base) each(lo, hi int, f func(lo, hi int, g *Group)) {
	for gi := b.groupAt(lo); lo < hi; gi++ {
		g := &b.groups[gi]
		end := min(hi, g.Off+g.Len)
		f(lo, end, g)
		lo = end
	}
}

// decay is the weight decay for group g: wd, or 0 for NoDecay groups.
func decay(wd float64, g *Group) float64 {
	if g.NoDecay {
		return 0
	}
	return wd
}
