package model

// Replica is a network as a training step drives it, wherever it computes:
// *Net computes on the host; hpctrain/gpu/cudanet's Net on a CUDA device.
// Both build from the same Desc, initialise alike from a seed, and share
// the flat layouts of Params, Grads and Buffers, so a checkpoint written by
// one resumes on the other.
//
// The methods mean what *Net's do. Host is the host copy of the network:
// its Params, Grads, Buffers, Desc, Groups and Summary. For a device
// replica the host copy is current only after Pull, and the device takes
// what the host copy holds only at Push; for *Net both are no-ops.
type Replica interface {
	Host() *Net
	// Pull copies the device's parameters and buffers (batch norm's running
	// statistics) into Host().Params and Host().Buffers.
	Pull() error
	// Push copies Host().Params and Host().Buffers to the device.
	Push() error

	// Batch is the largest batch; Input the host memory (pinned, for a
	// device) that a batch of (N, H, W, C) samples is written into before
	// Forward.
	Batch() int
	Input() []float32
	SetStep(step, first int)
	// Forward returns the logits (N, Classes) in host memory.
	Forward(n int) []float32
	Loss(labels []int32) (loss float64, correct int)
	Backward(hook GradHook)
	Err() error

	SetTraining(on bool)
	SetSyncBN(r SumReducer)
	SetLabelSmoothing(eps float64)
	LabelSmoothing() float64
	SetGradScale(s float32)
}

// Host returns n: a host network is its own host copy.
func (n *Net) Host() *Net { return n }

// Pull does nothing: the host copy is the network.
func (n *Net) Pull() error { return nil }

// Push does nothing: the host copy is the network.
func (n *Net) Push() error { return nil }

var _ Replica = (*Net)(nil)
