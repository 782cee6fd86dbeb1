package model

import (
	"fmt"
	"io"
	"strings"
)

// Summary describes a network layer by layer, in the manner of Keras's
// model.summary() and torchinfo: each layer's output shape, parameters and
// multiply-adds, and the totals.
type Summary struct {
	Model   string       `json:"model"` // the description's Name
	Hash    string       `json:"hash"`  // Desc.Hash
	Input   string       `json:"input"` // HxWxC
	Classes int          `json:"classes"`
	Rows    []SummaryRow `json:"layers"`
	// Params counts every parameter; all are trainable. Buffers counts
	// the non-trainable values (batch norm's running statistics).
	Params    int `json:"params"`
	Trainable int `json:"trainable_params"`
	Buffers   int `json:"buffers"`
	// MACs is the forward multiply-adds of one sample (convolutions and
	// linear layers, as Net.MACs); TrainMACs those of a training step
	// (Net.TrainMACs).
	MACs      int `json:"macs_per_sample"`
	TrainMACs int `json:"train_macs_per_sample"`
	// Bytes, as float32: one input sample, every layer's output for one
	// sample (what a training step keeps per sample for backward, about),
	// and the parameters with the buffers.
	InputBytes  int `json:"input_bytes"`
	OutputBytes int `json:"output_bytes_per_sample"`
	ParamBytes  int `json:"param_bytes"`

	layers []Layer // for ScratchBytes
}

// ScratchBytes is what the layers allocate beside their outputs and the
// parameters to train on batches of up to batch samples with workers
// compute workers (each has blocks of its own): a convolution's im2col
// blocks, its weight-gradient partials (per chunk, or per worker for a
// wide layer: Conv2D.partRows), its transposed weights and its bf16
// copies; a batch norm's per-chunk sums. Counted whichever kernels the
// layer ends up on (oneDNN's chunks, or im2col's), so it errs high.
func (s Summary) ScratchBytes(batch, workers int) int64 {
	batch, workers = max(batch, 1), max(workers, 1)
	var b int64
	walk(s.layers, func(l Layer) {
		switch l := l.(type) {
		case *Conv2D:
			b += l.scratchBytes(batch, workers)
		case *BatchNorm:
			b += int64(8 * 2 * l.Out().C * batch) // part: at most a chunk a sample
		}
	})
	return b
}

// SummaryRow is one layer of a Summary. Layers inside a residual block
// follow the block's row with Depth one more.
type SummaryRow struct {
	Name   string `json:"name"`   // as in Net.Groups: "conv1", "res2.bn1"
	Kind   string `json:"kind"`   // the description's kind: conv, batchnorm, residual, ...
	Depth  int    `json:"depth"`  // 0 at the top, 1 inside a block, ...
	Output string `json:"output"` // one sample's output shape, HxWxC
	Params int    `json:"params"` // with its children's for a block
	MACs   int    `json:"macs"`   // per sample, with its children's for a block
}

// Summarize lays out the network d describes for input in and classes
// outputs, checked as Build checks it, and summarises it. It allocates nothing of the network's size: the summary is how callers
// find out, before building it, whether a network fits in memory.
func Summarize(d Desc, in Shape, classes int) (Summary, error) {
	d, layers, err := plan(d, in, classes, 1)
	if err != nil {
		return Summary{}, err
	}
	if err := scoresLast(layers); err != nil {
		return Summary{}, fmt.Errorf("model %s: %w", d.Name, err)
	}
	s := (&Net{In: in, Classes: layers[len(layers)-1].Out().C, Layers: layers, Desc: d}).Summary()
	s.layers = layers
	return s, nil
}

// Summary summarises the network.
func (n *Net) Summary() Summary {
	// Counted from the layers, not the slices: Summarize's net has none.
	np, nb := 0, 0
	for _, l := range n.Layers {
		np += l.NumParams()
		nb += numBuffers(l)
	}
	s := Summary{Model: n.Desc.Name, Input: n.In.String(), Classes: n.Classes,
		Params: np, Trainable: np, Buffers: nb,
		MACs: n.MACs(), TrainMACs: n.TrainMACs(),
		InputBytes: 4 * n.In.Size(), ParamBytes: 4 * (np + nb), layers: n.Layers}
	if len(n.Desc.Layers) > 0 {
		s.Hash = n.Desc.Hash()
	}
	var rows func(ls []Layer, depth int)
	rows = func(ls []Layer, depth int) {
		for _, l := range ls {
			s.Rows = append(s.Rows, SummaryRow{Name: l.Name(), Kind: kindOf(l), Depth: depth,
				Output: l.Out().String(), Params: l.NumParams(), MACs: l.MACs()})
			if c, ok := l.(container); ok {
				rows(c.children(), depth+1)
				continue
			}
			s.OutputBytes += 4 * l.Out().Size()
		}
	}
	rows(n.Layers, 0)
	return s
}

// kindOf is a layer's kind in descriptions.
func kindOf(l Layer) string {
	switch l.(type) {
	case *Conv2D:
		return "conv"
	case *Linear:
		return "linear"
	case *ReLU:
		return "relu"
	case *MaxPool2D:
		return "maxpool"
	case *AvgPool2D:
		return "avgpool"
	case *GlobalAvgPool:
		return "globalavgpool"
	case *Flat:
		return "flatten"
	case *BatchNorm:
		return "batchnorm"
	case *Dropout:
		return "dropout"
	case *Residual:
		return "residual"
	}
	return "layer"
}

// Write prints the summary as a table in torchinfo's manner: one row per
// layer, a block's layers indented under it, "--" where a layer has no
// parameters or multiply-adds, then the totals.
func (s Summary) Write(w io.Writer) error {
	name := 20
	for _, r := range s.Rows {
		name = max(name, 2*r.Depth+len(r.Name)+len(r.Kind)+3)
	}
	width := name + 2 + 14 + 12 + 16
	rule := strings.Repeat("=", width)
	var b strings.Builder
	fmt.Fprintf(&b, "Model %s (hash %s): input %s, %d classes\n", s.Model, s.Hash, s.Input, s.Classes)
	fmt.Fprintln(&b, rule)
	fmt.Fprintf(&b, "%-*s  %-14s%12s%16s\n", name, "Layer (kind)", "Output shape", "Param #", "Mult-adds")
	fmt.Fprintln(&b, rule)
	for _, r := range s.Rows {
		label := strings.Repeat("  ", r.Depth) + r.Name + " (" + r.Kind + ")"
		fmt.Fprintf(&b, "%-*s  %-14s%12s%16s\n", name, label, r.Output, dashes(r.Params), dashes(r.MACs))
	}
	fmt.Fprintln(&b, rule)
	fmt.Fprintf(&b, "Total params: %s\n", commas(s.Params))
	fmt.Fprintf(&b, "Trainable params: %s\n", commas(s.Trainable))
	fmt.Fprintf(&b, "Non-trainable buffers: %s\n", commas(s.Buffers))
	fmt.Fprintf(&b, "Mult-adds per sample (M): %.2f forward, %.2f training step\n", float64(s.MACs)/1e6, float64(s.TrainMACs)/1e6)
	fmt.Fprintln(&b, rule)
	fmt.Fprintf(&b, "Input size per sample (MB): %.2f\n", float64(s.InputBytes)/1e6)
	fmt.Fprintf(&b, "Layer outputs per sample (MB): %.2f\n", float64(s.OutputBytes)/1e6)
	fmt.Fprintf(&b, "Params and buffers size (MB): %.2f\n", float64(s.ParamBytes)/1e6)
	fmt.Fprintln(&b, rule)
	_, err := io.WriteString(w, b.String())
	return err
}

func dashes(v int) string {
	if v == 0 {
		return "--"
	}
	return commas(v)
}

// commas writes v with thousands separators: 1,630,090.
func commas(v int) string {
	s := fmt.Sprint(v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}
