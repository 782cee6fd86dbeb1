package cudaoptim

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sort"
	"unsafe"

	"hpctrain/gpu/cuda"
	"hpctrain/optim"
)

// Optimizer is one optimizer of hpctrain/optim stepping parameters in
// device memory from gradients in device memory.
//
// # Invariants
//   - host is the CPU optimizer of the same configuration: it validated
//     the configuration and groups, and on the host path it is the
//     optimizer (its State is this one's).
//   - On the device path, state is nbuf*n float32 on the device, zeroed
//     by New (0 when nbuf or n is 0): the buffers State()[1:], in order.
//     New allocates it, not the first Step, so that a device too small
//     for it stops the run at start-up, not after loading and a step.
type Optimizer struct {
	ctx           *cuda.Context
	s             *cuda.Stream
	cfg           optim.Config // with defaults filled in
	params, grads cuda.Ptr
	n             int
	host          optim.Optimizer
	device        bool

	// The device path.
	fn     *cuda.Function
	adam   bool     // optim_adam, else optim_sgd
	groups cuda.Ptr // ng group ends, then ng NoDecay flags (int32); 0 when ng == 0
	ng     int
	nbuf   int      // per-parameter state buffers
	state  cuda.Ptr // nbuf*n float32, 0 until allocated
	t      int      // steps taken
	begun  bool     // a Step or Restore happened: State is not nil

	// The host path: page-locked copies of params (hp) and grads (hg).
	pinned unsafe.Pointer
	hp, hg []float32
}

// threads per block of the update kernels, and the most blocks launched (a
// grid-stride loop covers the rest).
const (
	blockSize = 256
	maxBlocks = 4096
)

// New makes cfg's optimizer updating the n float32 at params from the n at
// grads, on stream s, with the kernels of module k (compiled from
// kernels.Source, which holds optim.cu). groups are as
// optim.New takes them. Bad configurations and groups are optim.New's
// errors.
func New(ctx *cuda.Context, s *cuda.Stream, k *cuda.Module, cfg optim.Config, groups []optim.Group, params, grads cuda.Ptr, n int) (*Optimizer, error) {
	host, err := optim.New(cfg, groups, n)
	if err != nil {
		return nil, err
	}
	if n > math.MaxInt32 {
		return nil, fmt.Errorf("cudaoptim: %d parameters: at most %d", n, math.MaxInt32)
	}
	o := &Optimizer{ctx: ctx, s: s, cfg: cfg.WithDefaults(), params: params, grads: grads, n: n, host: host}
	switch host.Name() {
	case "sgd":
		o.device = true
		if o.cfg.Momentum != 0 {
			o.nbuf = 1
		}
	case "adam", "adamw":
		o.device, o.adam = true, true
		o.nbuf = 2
		if o.cfg.AMSGrad {
			o.nbuf = 3
		}
	}
	if !o.device {
		if err := o.newHost(); err != nil {
			return nil, err
		}
		return o, nil
	}
	name := "optim_sgd"
	if o.adam {
		name = "optim_adam"
	}
	if o.fn, err = k.Function(name); err != nil {
		return nil, fmt.Errorf("cudaoptim: %s: %w", host.Name(), err)
	}
	if err := o.uploadGroups(groups); err != nil {
		o.Close()
		return nil, err
	}
	if err := o.ensure(); err != nil {
		o.Close()
		return nil, err
	}
	return o, nil
}

// newHost allocates the page-locked copies of the host path.
func (o *Optimizer) newHost() error {
	if o.n == 0 {
		return nil
	}
	p, err := o.ctx.HostAlloc(2 * 4 * o.n)
	if err != nil {
		return fmt.Errorf("cudaoptim: %s on the host: %w", o.host.Name(), err)
	}
	o.pinned = p
	all := unsafe.Slice((*float32)(p), 2*o.n)
	o.hp, o.hg = all[:o.n:o.n], all[o.n:]
	return nil
}

// uploadGroups copies the groups' ends and NoDecay flags to the device,
// when weight decay applies to some groups and not to others; otherwise
// the kernels need no groups (ng 0: every element has the same decay).
func (o *Optimizer) uploadGroups(groups []optim.Group) error {
	gs := append([]optim.Group(nil), groups...)
	sort.SliceStable(gs, func(i, j int) bool { return gs[i].Off < gs[j].Off })
	some, all := false, true
	for _, g := range gs {
		some = some || g.NoDecay
		all = all && g.NoDecay
	}
	if o.cfg.WeightDecay == 0 || !some {
		return nil
	}
	if all { // no group decays: the same as no decay at all
		o.cfg.WeightDecay = 0
		return nil
	}
	tab := make([]int32, 2*len(gs))
	for i, g := range gs {
		tab[i] = int32(g.Off + g.Len)
		if g.NoDecay {
			tab[len(gs)+i] = 1
		}
	}
	p, err := o.ctx.Alloc(4 * len(tab))
	if err != nil {
		return fmt.Errorf("cudaoptim: %s groups: %w", o.host.Name(), err)
	}
	o.groups, o.ng = p, len(gs)
	if err := copyIn(p, unsafe.Pointer(&tab[0]), 4*len(tab), o.s); err != nil {
		return fmt.Errorf("cudaoptim: %s groups: %w", o.host.Name(), err)
	}
	return nil
}

// copyIn copies Go memory to the device and waits for the copy, with the
// memory pinned for the Go runtime while the driver holds its address.
func copyIn(dst cuda.Ptr, src unsafe.Pointer, bytes int, s *cuda.Stream) error {
	var pin runtime.Pinner
	pin.Pin(src)
	defer pin.Unpin()
	if err := cuda.CopyHtoD(dst, src, bytes, s); err != nil {
		return err
	}
	return s.Sync()
}

// copyOut is copyIn the other way.
func copyOut(dst unsafe.Pointer, src cuda.Ptr, bytes int, s *cuda.Stream) error {
	var pin runtime.Pinner
	pin.Pin(dst)
	defer pin.Unpin()
	if err := cuda.CopyDtoH(dst, src, bytes, s); err != nil {
		return err
	}
	return s.Sync()
}

// Name is the optimizer's name, as optim.New takes it.
func (o *Optimizer) Name() string { return o.host.Name() }

// OnDevice reports whether Step runs as kernels (true) or on the host.
func (o *Optimizer) OnDevice() bool { return o.device }

// ensure allocates the device state, zeroed (every buffer of sgd, adam and
// adamw starts at 0), unless it is there.
func (o *Optimizer) ensure() error {
	if o.state != 0 || o.nbuf == 0 || o.n == 0 {
		return nil
	}
	p, err := o.ctx.Alloc(4 * o.nbuf * o.n)
	if ce := (*cuda.Error)(nil); errors.As(err, &ce) && ce.Code == cuda.ErrOutOfMemory {
		return fmt.Errorf("cudaoptim: %s state (%d values per parameter, %d parameters): %w, on a device of %s: lower -batch, use an optimizer that keeps less, or give the rank a device of its own",
			o.Name(), o.nbuf, o.n, err, cuda.Bytes(o.ctx.TotalMem()))
	}
	if err != nil {
		return fmt.Errorf("cudaoptim: %s state: %w", o.Name(), err)
	}
	if err := cuda.MemsetD32(p, 0, o.nbuf*o.n, o.s); err != nil {
		o.ctx.Free(p)
		return fmt.Errorf("cudaoptim: %s state: %w", o.Name(), err)
	}
	o.state = p
	return nil
}

// buf is the device address of state buffer i (1-based, as in State), or 0
// when the optimizer has fewer buffers.
func (o *Optimizer) buf(i int) cuda.Ptr {
	if i > o.nbuf || o.state == 0 {
		return 0
	}
	return o.state.Add(4 * (i - 1) * o.n)
}

// Step applies one update with learning rate lr, enqueued on the stream.
// The host path returns when the parameters' copy back is enqueued.
func (o *Optimizer) Step(lr float64) error {
	if !o.device {
		return o.hostStep(lr)
	}
	if err := o.ensure(); err != nil {
		return err
	}
	o.t++
	o.begun = true
	if o.n == 0 {
		return nil
	}
	c := &o.cfg
	var err error
	if o.adam {
		t := float64(o.t)
		b1, b2 := *c.Beta1, *c.Beta2
		step := lr / (1 - math.Pow(b1, t))
		bc2sqrt := math.Sqrt(1 - math.Pow(b2, t))
		err = o.launch(o.fn, o.n, o.params, o.grads, o.buf(1), o.buf(2), o.buf(3),
			int64(o.n), o.groups, int32(o.ng), lr, c.WeightDecay, flag(o.Name() == "adamw"),
			b1, b2, *c.Eps, step, bc2sqrt)
	} else {
		err = o.launch(o.fn, o.n, o.params, o.grads, o.buf(1),
			int64(o.n), o.groups, int32(o.ng), lr, c.WeightDecay, c.Momentum, 1-c.Dampening,
			flag(c.Nesterov), flag(o.t == 1))
	}
	if err != nil {
		return fmt.Errorf("cudaoptim: %s step: %w", o.Name(), err)
	}
	return nil
}

// launch runs f over n elements on the stream (a grid-stride kernel).
func (o *Optimizer) launch(f *cuda.Function, n int, args ...any) error {
	grid := cuda.Dim3{X: min(maxBlocks, (n+blockSize-1)/blockSize), Y: 1, Z: 1}
	return f.Launch(grid, cuda.Dim3{X: blockSize, Y: 1, Z: 1}, o.s, args...)
}

func flag(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// hostStep is Step on the host: params and grads to page-locked memory, the
// CPU optimizer's Step, params back. The copy back needs no wait: the next
// step's copies are behind it on the stream.
func (o *Optimizer) hostStep(lr float64) error {
	if o.n > 0 {
		if err := cuda.CopyDtoH(unsafe.Pointer(&o.hp[0]), o.params, 4*o.n, o.s); err != nil {
			return fmt.Errorf("cudaoptim: %s step: %w", o.Name(), err)
		}
		if err := cuda.CopyDtoH(unsafe.Pointer(&o.hg[0]), o.grads, 4*o.n, o.s); err != nil {
			return fmt.Errorf("cudaoptim: %s step: %w", o.Name(), err)
		}
		if err := o.s.Sync(); err != nil {
			return fmt.Errorf("cudaoptim: %s step: %w", o.Name(), err)
		}
	}
	o.host.Step(o.hp, o.hg, lr)
	if o.n > 0 {
		if err := cuda.CopyHtoD(o.params, unsafe.Pointer(&o.hp[0]), 4*o.n, o.s); err != nil {
			return fmt.Errorf("cudaoptim: %s step: %w", o.Name(), err)
		}
	}
	return nil
}

// State returns a copy of the optimizer's state in optim.Optimizer's
// layout: State()[0] the step counter as two float32 (t mod 2^24, t /
// 2^24), then the per-parameter buffers (sgd: velocity with momentum;
// adam, adamw: m, v, and vmax with amsgrad). It is nil before the first
// Step or Restore. It waits for the stream.
func (o *Optimizer) State() ([][]float32, error) {
	if !o.device {
		if err := o.s.Sync(); err != nil {
			return nil, fmt.Errorf("cudaoptim: %s state: %w", o.Name(), err)
		}
		st := o.host.State()
		if st == nil {
			return nil, nil
		}
		out := make([][]float32, len(st))
		for i, b := range st {
			out[i] = append([]float32(nil), b...)
		}
		return out, nil
	}
	if !o.begun {
		return nil, nil
	}
	out := make([][]float32, 1+o.nbuf)
	out[0] = []float32{float32(o.t & (1<<24 - 1)), float32(o.t >> 24)}
	for i := 1; i <= o.nbuf; i++ {
		out[i] = make([]float32, o.n)
		if o.n == 0 {
			continue
		}
		if err := copyOut(unsafe.Pointer(&out[i][0]), o.buf(i), 4*o.n, o.s); err != nil {
			return nil, fmt.Errorf("cudaoptim: %s state: %w", o.Name(), err)
		}
	}
	return out, nil
}

// Restore loads state in State's layout (from this package or from the
// CPU optimizer of the same configuration), before or after the first
// Step. It fails, changing nothing, unless state has the number and
// lengths of buffers State returns.
func (o *Optimizer) Restore(state [][]float32) error {
	if !o.device {
		if err := o.s.Sync(); err != nil {
			return fmt.Errorf("cudaoptim: %s restore: %w", o.Name(), err)
		}
		return o.host.Restore(state)
	}
	if len(state) != 1+o.nbuf {
		return fmt.Errorf("cudaoptim: %s restore: %d state buffers, want %d", o.Name(), len(state), 1+o.nbuf)
	}
	for i, s := range state {
		want := o.n
		if i == 0 {
			want = 2
		}
		if len(s) != want {
			return fmt.Errorf("cudaoptim: %s restore: state buffer %d has %d values, want %d", o.Name(), i, len(s), want)
		}
	}
	if err := o.ensure(); err != nil {
		return err
	}
	for i := 1; i <= o.nbuf && o.n > 0; i++ {
		if err := copyIn(o.buf(i), unsafe.Pointer(&state[i][0]), 4*o.n, o.s); err != nil {
			return fmt.Errorf("cudaoptim: %s restore: %w", o.Name(), err)
		}
	}
	o.t = int(state[0][0]) + int(state[0][1])<<24
	o.begun = true
	return nil
}

// Close frees the optimizer's device and page-locked memory, after waiting
// for the stream. The optimizer must not be used afterwards.
func (o *Optimizer) Close() error {
	err := o.s.Sync()
	for _, p := range []*cuda.Ptr{&o.state, &o.groups} {
		if *p != 0 {
			if e := o.ctx.Free(*p); e != nil && err == nil {
				err = e
			}
			*p = 0
		}
	}
	if o.pinned != nil {
		if e := o.ctx.HostFree(o.pinned); e != nil && err == nil {
			err = e
		}
		o.pinned, o.hp, o.hg = nil, nil, nil
	}
	if err != nil {
		return fmt.Errorf("cudaoptim: %s close: %w", o.Name(), err)
	}
	return nil
}
