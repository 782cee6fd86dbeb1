package export

import (
	"errors"
	"fmt"
	"slices"

	"hpctrain/model"
)

// Tensor is one exported tensor in PyTorch's layout: F32 (or, for
// counters, I64) values in row-major order of Shape.
type Tensor struct {
	Name  string
	Shape []int
	F32   []float32
	I64   []int64
}

// graph is a network in channels-first form: its nodes in order (ONNX
// operators), its parameters and buffers in PyTorch's names and layouts,
// and the constants only the ONNX graph needs.
type graph struct {
	in      model.Shape // (H, W, C) of one input sample
	classes int
	nodes   []node
	tensors []Tensor // parameters and buffers, in the model's order
	consts  []Tensor // ONNX-only inputs of nodes (Unsqueeze's axes)
	bns     []string // batch-norm layers, in order
}

// node is one ONNX operator.
type node struct {
	op, name        string
	inputs, outputs []string
	attrs           []attr
}

// attr is an ONNX attribute: ints, or one float, or one int.
type attr struct {
	name string
	ints []int64
	f    *float32
	i    *int64
}

func intsAttr(name string, v ...int64) attr { return attr{name: name, ints: v} }
func floatAttr(name string, v float32) attr { return attr{name: name, f: &v} }
func intAttr(name string, v int64) attr     { return attr{name: name, i: &v} }

// value is a tensor flowing between nodes. shape is hpctrain's (H, W, C)
// of one sample; flat says the ONNX tensor is (N, F), F = shape.Size(),
// rather than (N, C, H, W). perm maps channels-first to channels-last:
// channel j of the ONNX tensor (feature j when flat) is hpctrain's channel
// perm[j]; nil is the identity. Only a flattened map has a perm that is
// not the identity, and only for as long as the layers after the flatten
// work channel by channel.
type value struct {
	name  string
	shape model.Shape
	flat  bool
	perm  []int
}

// LayerError is a layer without a channels-first form, or whose
// parameters do not match the description: Pos is its position in the
// description ("5", "5.2" for the second layer of block 5) and Kind its
// kind.
type LayerError struct {
	Pos, Kind, Name string
	Err             error
}

func (e *LayerError) Error() string {
	return fmt.Sprintf("layer %s (%s, %s): %v", e.Pos, e.Kind, e.Name, e.Err)
}
func (e *LayerError) Unwrap() error { return e.Err }

// prefixes are the model package's layer-name prefixes by kind: layer
// names are prefix + count within their list ("conv2", "res1.bn1").
var prefixes = map[string]string{
	"conv": "conv", "linear": "fc", "relu": "relu", "maxpool": "pool", "avgpool": "avgpool",
	"globalavgpool": "gap", "flatten": "flatten", "batchnorm": "bn", "dropout": "dropout", "residual": "res",
}

// walker builds a graph from a network's description and tensors.
type walker struct {
	g            *graph
	net          *model.Net
	params, bufs map[string]model.Group
	used         map[string]bool
	step         int64
}

// build converts net (built by model.Build, so that net.Desc says what
// it is) into channels-first form; step is recorded as each batch norm's
// num_batches_tracked.
func build(net *model.Net, step int64) (*graph, error) {
	if len(net.Desc.Layers) == 0 {
		return nil, errors.New("export: the network has no description (build it with model.Build)")
	}
	w := &walker{g: &graph{in: net.In, classes: net.Classes}, net: net, params: map[string]model.Group{}, bufs: map[string]model.Group{}, used: map[string]bool{}, step: step}
	for _, g := range net.Groups() {
		w.params[g.Name] = g
	}
	for _, g := range net.BufferGroups() {
		w.bufs[g.Name] = g
	}
	x := value{name: "input", shape: net.In}
	x, err := w.layers(net.Desc.Layers, x, "", "")
	if err != nil {
		return nil, err
	}
	if x.shape != (model.Shape{H: 1, W: 1, C: net.Classes}) {
		return nil, fmt.Errorf("export: the network ends in %v, not %d class scores", x.shape, net.Classes)
	}
	if x.perm != nil {
		return nil, errors.New("export: the class scores come out of a flatten in another order")
	}
	if !x.flat {
		w.add(node{op: "Flatten", name: "logits", inputs: []string{x.name}, outputs: []string{"logits"}, attrs: []attr{intAttr("axis", 1)}})
	} else {
		last := &w.g.nodes[len(w.g.nodes)-1]
		if last.outputs[0] != x.name {
			w.add(node{op: "Identity", name: "logits", inputs: []string{x.name}, outputs: []string{"logits"}})
		} else {
			last.outputs[0] = "logits"
		}
	}
	// Every tensor of the network must have been exported, once.
	for _, m := range []map[string]model.Group{w.params, w.bufs} {
		for name := range m {
			if !w.used[name] {
				return nil, fmt.Errorf("export: tensor %s of the network is not in the exported model (the description and the network disagree)", name)
			}
		}
	}
	return w.g, nil
}

func (w *walker) add(n node) { w.g.nodes = append(w.g.nodes, n) }

// layers adds a list of layers whose names start with prefix and whose
// positions start with path, from input x.
func (w *walker) layers(ls []model.LayerDesc, x value, prefix, path string) (value, error) {
	counts := map[string]int{}
	for i, l := range ls {
		p := prefixes[l.Kind]
		counts[p]++
		name := fmt.Sprintf("%s%s%d", prefix, p, counts[p])
		pos := fmt.Sprintf("%s%d", path, i+1)
		var err error
		x, err = w.layer(l, x, name, pos)
		if err != nil {
			if errors.As(err, new(*LayerError)) {
				return x, err
			}
			return x, &LayerError{Pos: pos, Kind: l.Kind, Name: name, Err: err}
		}
	}
	return x, nil
}

func (w *walker) layer(l model.LayerDesc, x value, name, pos string) (value, error) {
	switch l.Kind {
	case "conv":
		return w.conv(l, x, name)
	case "linear":
		return w.linear(l, x, name)
	case "relu":
		w.add(node{op: "Relu", name: name, inputs: []string{x.name}, outputs: []string{name}})
		return value{name: name, shape: x.shape, flat: x.flat, perm: x.perm}, nil
	case "dropout":
		return x, nil // the identity in inference
	case "maxpool", "avgpool":
		x = w.to4(x, name)
		in, k, s := x.shape, l.Kernel, l.Stride
		if k > in.H || k > in.W {
			return x, fmt.Errorf("kernel %d larger than its input %v", k, in)
		}
		op := map[string]string{"maxpool": "MaxPool", "avgpool": "AveragePool"}[l.Kind]
		w.add(node{op: op, name: name, inputs: []string{x.name}, outputs: []string{name},
			attrs: []attr{intsAttr("kernel_shape", int64(k), int64(k)), intsAttr("strides", int64(s), int64(s))}})
		return value{name: name, shape: model.Shape{H: (in.H-k)/s + 1, W: (in.W-k)/s + 1, C: in.C}, perm: x.perm}, nil
	case "globalavgpool":
		x = w.to4(x, name)
		w.add(node{op: "GlobalAveragePool", name: name, inputs: []string{x.name}, outputs: []string{name}})
		return value{name: name, shape: model.Shape{H: 1, W: 1, C: x.shape.C}, perm: x.perm}, nil
	case "flatten":
		if x.flat {
			return x, nil // already (N, F): nothing moves
		}
		return w.flatten(x, name), nil
	case "batchnorm":
		return w.batchnorm(l, x, name)
	case "residual":
		return w.residual(l, x, name, pos)
	}
	return x, fmt.Errorf("no ONNX form for layers of kind %q", l.Kind)
}

// to4 makes x a 4-D (N, C, H, W) tensor: a flat one is (N, F, 1, 1).
func (w *walker) to4(x value, name string) value {
	if !x.flat {
		return x
	}
	out := name + ".unsqueeze"
	if !slices.ContainsFunc(w.g.consts, func(t Tensor) bool { return t.Name == "axes_2_3" }) {
		w.g.consts = append(w.g.consts, Tensor{Name: "axes_2_3", Shape: []int{2}, I64: []int64{2, 3}})
	}
	w.add(node{op: "Unsqueeze", name: out, inputs: []string{x.name, "axes_2_3"}, outputs: []string{out}})
	return value{name: out, shape: model.Shape{H: 1, W: 1, C: x.shape.Size()}, perm: x.perm}
}

// flatten adds a Flatten node named name: (N, C, H, W) to (N, C*H*W), in
// PyTorch's (C, H, W) order, and works out the new perm.
func (w *walker) flatten(x value, name string) value {
	w.add(node{op: "Flatten", name: name, inputs: []string{x.name}, outputs: []string{name}, attrs: []attr{intAttr("axis", 1)}})
	s := x.shape
	if s.H*s.W == 1 {
		return value{name: name, shape: model.Shape{H: 1, W: 1, C: s.C}, flat: true, perm: x.perm}
	}
	hw := s.H * s.W
	perm := make([]int, s.Size())
	for c := 0; c < s.C; c++ {
		pc := c
		if x.perm != nil {
			pc = x.perm[c]
		}
		for p := 0; p < hw; p++ {
			perm[c*hw+p] = p*s.C + pc
		}
	}
	return value{name: name, shape: model.Shape{H: 1, W: 1, C: s.Size()}, flat: true, perm: canon(perm)}
}

// canon returns nil for the identity permutation.
func canon(perm []int) []int {
	for i, p := range perm {
		if i != p {
			return perm
		}
	}
	return nil
}

// param returns the network's tensor name (parameters, or buffers when
// buf) and marks it exported; want is its expected length.
func (w *walker) param(name string, want int, buf bool) ([]float32, error) {
	m, src, what := w.params, w.net.Params, "parameter"
	if buf {
		m, src, what = w.bufs, w.net.Buffers, "buffer"
	}
	g, ok := m[name]
	if !ok {
		return nil, fmt.Errorf("the network has no %s %s (the description and the network disagree)", what, name)
	}
	if g.Len != want {
		return nil, fmt.Errorf("%s %s has %d values, the description says %d", what, name, g.Len, want)
	}
	w.used[name] = true
	return src[g.Off : g.Off+g.Len], nil
}

func (w *walker) conv(l model.LayerDesc, x value, name string) (value, error) {
	x = w.to4(x, name)
	in := x.shape
	o, k, s, p := l.Out, l.Kernel, l.Stride, l.Pad
	if o == model.OutClasses {
		o = w.g.classes
	}
	if k > in.H+2*p || k > in.W+2*p {
		return x, fmt.Errorf("kernel %d larger than its input %v with pad %d", k, in, p)
	}
	src, err := w.param(name+".weight", o*k*k*in.C, false)
	if err != nil {
		return x, err
	}
	// (O, K, K, C) to (O, C, K, K); input channel j of the ONNX tensor is
	// hpctrain's channel perm[j].
	c := in.C
	wt := make([]float32, len(src))
	for oo := 0; oo < o; oo++ {
		for j := 0; j < c; j++ {
			cj := j
			if x.perm != nil {
				cj = x.perm[j]
			}
			for kh := 0; kh < k; kh++ {
				for kw := 0; kw < k; kw++ {
					wt[((oo*c+j)*k+kh)*k+kw] = src[((oo*k+kh)*k+kw)*c+cj]
				}
			}
		}
	}
	w.g.tensors = append(w.g.tensors, Tensor{Name: name + ".weight", Shape: []int{o, c, k, k}, F32: wt})
	inputs := []string{x.name, name + ".weight"}
	if l.Bias {
		b, err := w.param(name+".bias", o, false)
		if err != nil {
			return x, err
		}
		w.g.tensors = append(w.g.tensors, Tensor{Name: name + ".bias", Shape: []int{o}, F32: slices.Clone(b)})
		inputs = append(inputs, name+".bias")
	}
	w.add(node{op: "Conv", name: name, inputs: inputs, outputs: []string{name}, attrs: []attr{
		intsAttr("kernel_shape", int64(k), int64(k)), intsAttr("strides", int64(s), int64(s)),
		intsAttr("pads", int64(p), int64(p), int64(p), int64(p)),
	}})
	return value{name: name, shape: model.Shape{H: (in.H+2*p-k)/s + 1, W: (in.W+2*p-k)/s + 1, C: o}}, nil
}

func (w *walker) linear(l model.LayerDesc, x value, name string) (value, error) {
	if !x.flat {
		// A linear layer flattens its input itself (model.Linear).
		x = w.flatten(x, name+".flatten")
	}
	in := x.shape.Size()
	o := l.Out
	if o == model.OutClasses {
		o = w.g.classes
	}
	src, err := w.param(name+".weight", o*in, false)
	if err != nil {
		return x, err
	}
	// (O, I), the columns in channels-first order.
	wt := slices.Clone(src)
	if x.perm != nil {
		for oo := 0; oo < o; oo++ {
			row, dst := src[oo*in:(oo+1)*in], wt[oo*in:(oo+1)*in]
			for j, p := range x.perm {
				dst[j] = row[p]
			}
		}
	}
	w.g.tensors = append(w.g.tensors, Tensor{Name: name + ".weight", Shape: []int{o, in}, F32: wt})
	inputs := []string{x.name, name + ".weight"}
	if l.Bias {
		b, err := w.param(name+".bias", o, false)
		if err != nil {
			return x, err
		}
		w.g.tensors = append(w.g.tensors, Tensor{Name: name + ".bias", Shape: []int{o}, F32: slices.Clone(b)})
		inputs = append(inputs, name+".bias")
	}
	w.add(node{op: "Gemm", name: name, inputs: inputs, outputs: []string{name}, attrs: []attr{intAttr("transB", 1)}})
	return value{name: name, shape: model.Shape{H: 1, W: 1, C: o}, flat: true}, nil
}

func (w *walker) batchnorm(l model.LayerDesc, x value, name string) (value, error) {
	c := x.shape.C
	if x.flat {
		c = x.shape.Size()
	}
	inputs := []string{x.name}
	for _, t := range []struct {
		suffix string
		buf    bool
	}{{"weight", false}, {"bias", false}, {"running_mean", true}, {"running_var", true}} {
		src, err := w.param(name+"."+t.suffix, c, t.buf)
		if err != nil {
			return x, err
		}
		v := slices.Clone(src)
		if x.perm != nil {
			for j, p := range x.perm {
				v[j] = src[p]
			}
		}
		w.g.tensors = append(w.g.tensors, Tensor{Name: name + "." + t.suffix, Shape: []int{c}, F32: v})
		inputs = append(inputs, name+"."+t.suffix)
	}
	// PyTorch's state_dict has it; ONNX does not use it.
	w.g.tensors = append(w.g.tensors, Tensor{Name: name + ".num_batches_tracked", Shape: []int{}, I64: []int64{w.step}})
	w.g.bns = append(w.g.bns, name)
	// ONNX's momentum is the weight of the old running value, PyTorch's
	// (and hpctrain's) that of the batch; inference uses neither.
	w.add(node{op: "BatchNormalization", name: name, inputs: inputs, outputs: []string{name},
		attrs: []attr{floatAttr("epsilon", float32(l.Eps)), floatAttr("momentum", float32(1-l.Momentum))}})
	return value{name: name, shape: x.shape, flat: x.flat, perm: x.perm}, nil
}

func (w *walker) residual(l model.LayerDesc, x value, name, pos string) (value, error) {
	body, err := w.layers(l.Layers, x, name+".", pos+".")
	if err != nil {
		return x, err
	}
	short := x
	if l.Shortcut != "identity" {
		s := projStride(x.shape, body.shape)
		if s == 0 {
			return x, fmt.Errorf("the body's output %v is no strided 1x1 convolution's output of its input %v", body.shape, x.shape)
		}
		proj := []model.LayerDesc{{Kind: "conv", Out: body.shape.C, Kernel: 1, Stride: s, Bias: l.Shortcut == "conv"}}
		if l.Shortcut == "projection" {
			proj = append(proj, model.LayerDesc{Kind: "batchnorm", Momentum: 0.1, Eps: 1e-5})
		}
		if short, err = w.layers(proj, x, name+".proj.", pos+".shortcut."); err != nil {
			return x, err
		}
	}
	if body.shape != short.shape {
		return x, fmt.Errorf("the body's output %v does not match the shortcut's %v", body.shape, short.shape)
	}
	if !slices.Equal(body.perm, short.perm) {
		return x, errors.New("the body and the shortcut order the features of a flattened map differently (one went through a linear layer, the other not): no channels-first form without reordering; flatten after the block instead")
	}
	// (N, F) and (N, F, 1, 1) hold the same values: add them flat.
	if body.flat != short.flat {
		if !body.flat {
			body = w.flatten(body, name+".flatten_body")
		} else {
			short = w.flatten(short, name+".flatten_shortcut")
		}
	}
	w.add(node{op: "Add", name: name, inputs: []string{body.name, short.name}, outputs: []string{name}})
	return value{name: name, shape: body.shape, flat: body.flat, perm: body.perm}, nil
}

// projStride is the stride of the 1x1 convolution from in to out's height
// and width, or 0 if there is none (as model's residual blocks find it).
func projStride(in, out model.Shape) int {
	for s := 1; s <= max(in.H, in.W); s++ {
		if (in.H-1)/s+1 == out.H && (in.W-1)/s+1 == out.W {
			return s
		}
	}
	return 0
}
