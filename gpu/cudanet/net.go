package cudanet

import (
	"errors"
	"fmt"
	"unsafe"

	"hpctrain/gpu/cuda"
	"hpctrain/model"
)

// Net is a network on a CUDA device; it implements model.Replica. Its
// host copy (Host) is a model.Net of the same description and seed.
type Net struct {
	d    *Device
	host *model.Net
	prec Precision
	f    fns
	blas *cuda.BLAS

	stream  *cuda.Stream // compute: every kernel and GEMM
	copy    *cuda.Stream // input uploads
	inReady *cuda.Event  // the current input is on the device

	params, grads, bufs cuda.Ptr
	np, nbuf            int
	body                chain
	first               int // the first top-level layer with parameters

	// Double-buffered input: Forward uploads hin[cur] into in[cur] on the
	// copy stream, then flips cur.
	in   [2]cuda.Ptr
	hin  [2][]float32
	cur  int
	size int // values per input sample

	logits []float32 // pinned (Batch, Classes)
	labels []int32   // pinned (Batch)
	res    []float64 // pinned (2 Batch): per-sample loss and correct flag
	dlab   cuda.Ptr
	dres   cuda.Ptr

	// Scratch shared by the layers (the stream orders their uses), sized
	// by the builder: im2col blocks, a fused convolution's output, column
	// sum and batch norm partial sums, low-precision GEMM operands, and
	// pinned host memory for synchronised batch norm.
	col, convOut, sumPart, bnPartBuf cuda.Ptr
	lo                               [2]cuda.Ptr
	redHost                          []float64
	maxCol, maxConvOut, maxSum       int
	maxBN, maxRed, maxOp             int

	batch   int
	nb      int // the batch of the last Forward
	classes int
	train   bool
	sync    model.SumReducer
	err     error
	hook    model.GradHook
	scale   float32
	smooth  float64

	seed, step, pass uint64
	firstSample      int

	devAllocs  []cuda.Ptr
	devBytes   int64 // their sizes' sum
	hostAllocs []unsafe.Pointer
	closed     bool
}

var _ model.Replica = (*Net)(nil)

// New builds desc on device d for input shape in, classes outputs and
// batches of up to batch samples, computing its matrix products in
// precision p. The host copy is model.Build(desc, in, classes, batch,
// seed), initialised exactly as a CPU network of that seed, then pushed to
// the device. The device's context must be current on the calling thread.
func New(d *Device, desc model.Desc, in model.Shape, classes, batch int, seed uint64, p Precision) (*Net, error) {
	if p < FP32 || p > FP16 {
		return nil, fmt.Errorf("cudanet: unknown precision %d", int(p))
	}
	host, err := model.Build(desc, in, classes, batch, seed)
	if err != nil {
		return nil, err
	}
	n := &Net{d: d, host: host, prec: p, batch: batch, classes: host.Classes, train: true, scale: 1,
		seed: seed, size: in.Size()}
	if err := n.setup(); err != nil {
		n.Close()
		return nil, fmt.Errorf("cudanet: build %s on %s: %w", host.Desc.Name, d.Label(), err)
	}
	return n, nil
}

// setup makes the streams, cuBLAS handle, device memory and layers, and
// pushes the host copy.
func (n *Net) setup() error {
	ctx := n.d.ctx
	var err error
	if err = n.f.load(n.d.mod); err != nil {
		return err
	}
	if n.stream, err = ctx.NewStream(); err != nil {
		return err
	}
	if n.copy, err = ctx.NewStream(); err != nil {
		return err
	}
	if n.inReady, err = ctx.NewEvent(); err != nil {
		return err
	}
	if n.blas, err = ctx.NewBLAS(); err != nil {
		return err
	}
	if err = n.blas.SetStream(n.stream); err != nil {
		return err
	}
	if err = n.blas.SetTF32(n.prec == TF32); err != nil {
		return err
	}
	h := n.host
	n.np, n.nbuf = len(h.Params), len(h.Buffers)
	n.params, n.grads, n.bufs = n.alloc(4*n.np), n.alloc(4*n.np), n.alloc(4*n.nbuf)
	for i := range n.in {
		n.in[i] = n.alloc(4 * n.batch * n.size)
		n.hin[i] = unsafe.Slice((*float32)(n.hostAlloc(4*n.batch*n.size)), n.batch*n.size)
	}
	if n.err != nil {
		return n.err
	}

	bd := &builder{n: n, classes: n.classes, batch: n.batch}
	layers, out, err := bd.stack(h.Desc.Layers, h.In)
	if err != nil {
		return err
	}
	if bd.p != n.np || bd.b != n.nbuf || out != (model.Shape{H: 1, W: 1, C: n.classes}) {
		return fmt.Errorf("device layout (%d parameters, %d buffers, output %v) differs from the host's (%d, %d, 1x1x%d)",
			bd.p, bd.b, out, n.np, n.nbuf, n.classes)
	}
	n.body.wire(n, layers, n.batch, false)
	n.first = len(layers)
	for i, l := range layers {
		if l.numParams() > 0 {
			n.first = i
			break
		}
	}

	n.col, n.convOut = n.alloc(4*n.maxCol), n.alloc(4*n.maxConvOut)
	n.sumPart, n.bnPartBuf = n.alloc(4*n.maxSum), n.alloc(8*n.maxBN)
	if n.prec == BF16 || n.prec == FP16 {
		n.lo[0], n.lo[1] = n.alloc(2*n.maxOp), n.alloc(2*n.maxOp)
	}
	n.dlab, n.dres = n.alloc(4*n.batch), n.alloc(8*2*n.batch)
	n.logits = unsafe.Slice((*float32)(n.hostAlloc(4*n.batch*n.classes)), n.batch*n.classes)
	n.labels = unsafe.Slice((*int32)(n.hostAlloc(4*n.batch)), n.batch)
	n.res = unsafe.Slice((*float64)(n.hostAlloc(8*2*n.batch)), 2*n.batch)
	n.redHost = unsafe.Slice((*float64)(n.hostAlloc(8*max(n.maxRed, 1))), max(n.maxRed, 1))
	if n.err != nil {
		return n.err
	}
	return n.Push()
}

// alloc allocates device memory (at least 4 bytes), zeroed, recording a
// failure in n.err.
func (n *Net) alloc(bytes int) cuda.Ptr {
	if n.err != nil {
		return 0
	}
	bytes = (max(bytes, 4) + 7) &^ 7
	p, err := n.d.ctx.Alloc(bytes)
	if err != nil {
		n.err = err
		if ce := (*cuda.Error)(nil); errors.As(err, &ce) && ce.Code == cuda.ErrOutOfMemory {
			n.err = fmt.Errorf("%w, after %s for this network at a batch of %d, on a device of %s: lower -batch, or give the rank a device of its own",
				err, cuda.Bytes(n.devBytes), n.batch, cuda.Bytes(n.d.ctx.TotalMem()))
		}
		return 0
	}
	n.devAllocs = append(n.devAllocs, p)
	n.devBytes += int64(bytes)
	n.launch(n.f.zero, bytes/4, p, int64(bytes/4))
	return p
}

// hostAlloc allocates pinned host memory (at least 8 bytes), zeroed.
func (n *Net) hostAlloc(bytes int) unsafe.Pointer {
	bytes = max(bytes, 8)
	if n.err != nil {
		return unsafe.Pointer(&make([]float64, (bytes+7)/8)[0]) // never used: setup fails
	}
	p, err := n.d.ctx.HostAlloc(bytes)
	if err != nil {
		n.err = err
		return unsafe.Pointer(&make([]float64, (bytes+7)/8)[0])
	}
	n.hostAllocs = append(n.hostAllocs, p)
	clear(unsafe.Slice((*byte)(p), bytes))
	return p
}

func (n *Net) param(off int) cuda.Ptr  { return n.params.Add(4 * off) }
func (n *Net) grad(off int) cuda.Ptr   { return n.grads.Add(4 * off) }
func (n *Net) buffer(off int) cuda.Ptr { return n.bufs.Add(4 * off) }

func (n *Net) needCol(v int)     { n.maxCol = max(n.maxCol, v) }
func (n *Net) needConvOut(v int) { n.maxConvOut = max(n.maxConvOut, v) }
func (n *Net) needSum(v int)     { n.maxSum = max(n.maxSum, v) }
func (n *Net) needBN(part, red int) {
	n.maxBN, n.maxRed = max(n.maxBN, part), max(n.maxRed, red)
}

// Close frees the Net's device and pinned memory, streams, event and
// cuBLAS handle. It is safe to call twice.
func (n *Net) Close() error {
	if n.closed {
		return nil
	}
	if n.d.ctx == nil {
		return fmt.Errorf("cudanet: close: the device was closed before its network")
	}
	n.closed = true
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if n.stream != nil {
		keep(n.stream.Sync())
	}
	if n.blas != nil {
		keep(n.blas.Destroy())
	}
	for _, p := range n.devAllocs {
		keep(n.d.ctx.Free(p))
	}
	for _, p := range n.hostAllocs {
		keep(n.d.ctx.HostFree(p))
	}
	n.devAllocs, n.hostAllocs = nil, nil
	if n.inReady != nil {
		keep(n.inReady.Destroy())
	}
	for _, s := range []*cuda.Stream{n.stream, n.copy} {
		if s != nil {
			keep(s.Destroy())
		}
	}
	n.logits, n.labels, n.res, n.redHost = nil, nil, nil, nil
	n.hin = [2][]float32{}
	return first
}

// Host is the host copy: current after Pull; the device takes it at Push.
func (n *Net) Host() *model.Net { return n.host }

// Stream is the compute stream: every kernel and GEMM of the Net runs on it.
func (n *Net) Stream() *cuda.Stream { return n.stream }

// Params is the device's flat parameter buffer, laid out as Host().Params.
func (n *Net) Params() cuda.Ptr { return n.params }

// Grads is the device's flat gradient buffer, laid out as Host().Grads.
func (n *Net) Grads() cuda.Ptr { return n.grads }

// Buffers is the device's flat buffer of running statistics, laid out as
// Host().Buffers.
func (n *Net) Buffers() cuda.Ptr { return n.bufs }

// Len is the number of parameters.
func (n *Net) Len() int { return n.np }

// Precision is the arithmetic of the Net's matrix products.
func (n *Net) Precision() Precision { return n.prec }

// Pull copies the device's parameters and buffers into Host().Params and
// Host().Buffers.
func (n *Net) Pull() error {
	if err := cuda.CopyDtoH(unsafe.Pointer(&n.host.Params[0]), n.params, 4*n.np, n.stream); err != nil {
		return fmt.Errorf("cudanet: pull the parameters: %w", err)
	}
	if n.nbuf > 0 {
		if err := cuda.CopyDtoH(unsafe.Pointer(&n.host.Buffers[0]), n.bufs, 4*n.nbuf, n.stream); err != nil {
			return fmt.Errorf("cudanet: pull the buffers: %w", err)
		}
	}
	if err := n.stream.Sync(); err != nil {
		return fmt.Errorf("cudanet: pull: %w", err)
	}
	return nil
}

// Push copies Host().Params and Host().Buffers to the device.
func (n *Net) Push() error {
	if err := cuda.CopyHtoD(n.params, unsafe.Pointer(&n.host.Params[0]), 4*n.np, n.stream); err != nil {
		return fmt.Errorf("cudanet: push the parameters: %w", err)
	}
	if n.nbuf > 0 {
		if err := cuda.CopyHtoD(n.bufs, unsafe.Pointer(&n.host.Buffers[0]), 4*n.nbuf, n.stream); err != nil {
			return fmt.Errorf("cudanet: push the buffers: %w", err)
		}
	}
	if err := n.stream.Sync(); err != nil {
		return fmt.Errorf("cudanet: push: %w", err)
	}
	return nil
}

// Batch is the largest batch.
func (n *Net) Batch() int { return n.batch }

// Input is the pinned host memory the next Forward uploads: (N, H, W, C)
// for up to Batch() samples. It alternates between two buffers, so a
// caller can fill the next batch while the device computes.
func (n *Net) Input() []float32 { return n.hin[n.cur] }

// SetStep keys the dropout noise of the following passes, as
// model.Net.SetStep.
func (n *Net) SetStep(step, first int) {
	n.step, n.firstSample, n.pass = uint64(step), first, 0
}

// SetTraining switches between training (the default) and evaluation, as
// model.Net.SetTraining.
func (n *Net) SetTraining(on bool) { n.train = on }

// SetSyncBN makes batch norm in training reduce its statistics over the
// replicas with r (nil: each replica's own), as model.Net.SetSyncBN; each
// reduction syncs the compute stream and goes through pinned host memory.
func (n *Net) SetSyncBN(r model.SumReducer) { n.sync = r }

// SetLabelSmoothing sets the loss's label smoothing, as
// model.Net.SetLabelSmoothing.
func (n *Net) SetLabelSmoothing(eps float64) {
	if !(eps >= 0 && eps <= 1) {
		panic("cudanet: label smoothing outside [0, 1]")
	}
	n.smooth = eps
}

// LabelSmoothing is the loss's label smoothing.
func (n *Net) LabelSmoothing() float64 { return n.smooth }

// SetGradScale makes Backward's gradients those of the mean loss times s.
func (n *Net) SetGradScale(s float32) { n.scale = s }

// Err returns the first failure since the last call (a CUDA call, or a
// reduction of synchronised batch norm) and clears it.
func (n *Net) Err() error {
	err := n.err
	n.err = nil
	return err
}

// Forward uploads the first nb samples of Input() (on the copy stream; the
// compute stream waits for it), runs the network and returns the logits
// (N, Classes) in pinned host memory, valid until the next Forward.
func (n *Net) Forward(nb int) []float32 {
	if nb < 1 || nb > n.batch {
		panic("cudanet: batch outside [1, Net.Batch()]")
	}
	n.nb = nb
	cur := n.cur
	n.check(cuda.CopyHtoD(n.in[cur], unsafe.Pointer(&n.hin[cur][0]), 4*nb*n.size, n.copy))
	n.check(n.inReady.Record(n.copy))
	n.check(n.stream.Wait(n.inReady))
	n.body.setInput(n.in[cur], 0)
	n.body.forward(n, nb)
	if n.train {
		n.pass++
	}
	n.check(cuda.CopyDtoH(unsafe.Pointer(&n.logits[0]), n.body.output(), 4*nb*n.classes, n.stream))
	n.check(n.stream.Sync())
	n.cur = 1 - cur
	return n.logits[:nb*n.classes]
}

// Loss computes the mean softmax cross-entropy of the last Forward's
// logits against labels (with label smoothing if set) on the device, sets
// up the gradient for Backward (of the mean loss times SetGradScale's
// factor), and returns the loss and the number of correctly classified
// samples. It syncs the compute stream.
func (n *Net) Loss(labels []int32) (loss float64, correct int) {
	nb, k := n.nb, n.classes
	if len(labels) < nb {
		panic("cudanet: fewer labels than samples")
	}
	for _, y := range labels[:nb] {
		if y < 0 || int(y) >= k {
			panic("cudanet: label outside [0, Classes)")
		}
	}
	copy(n.labels, labels[:nb])
	n.check(cuda.CopyHtoD(n.dlab, unsafe.Pointer(&n.labels[0]), 4*nb, n.stream))
	eps := n.smooth
	inv := n.scale / float32(nb)
	off := float32(eps/float64(k)) * inv
	on := float32(1-eps) * inv
	n.launch(n.f.softmaxXent, nb, n.body.outGrad(), n.dres, n.body.output(), n.dlab,
		int32(nb), int32(k), eps, inv, off, on)
	n.check(cuda.CopyDtoH(unsafe.Pointer(&n.res[0]), n.dres, 8*2*nb, n.stream))
	n.check(n.stream.Sync())
	for i := 0; i < nb; i++ {
		loss += n.res[i]
		if n.res[nb+i] != 0 {
			correct++
		}
	}
	return loss / float64(nb), correct
}

// Backward enqueues every gradient of the last Forward and Loss on the
// compute stream. If hook is not nil it is told, layer by layer from the
// last (inside residual blocks too), right after that layer's gradient
// kernels are enqueued, the offset where its parameters start. Backward
// does not wait for the device: sync Stream (or an event recorded on it)
// before reading Grads.
func (n *Net) Backward(hook model.GradHook) {
	n.hook = hook
	n.body.backward(n, n.nb, n.first)
	n.hook = nil
}
