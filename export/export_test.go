package export

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"hpctrain/export/internal/onnxpb"
	"hpctrain/model"
)

var fmnist = model.Shape{H: 28, W: 28, C: 1}

// trained builds a network and gives it parameters and batch-norm state
// that are not the initial ones (the running statistics of a fresh net
// are 0 and 1, which would hide a mix-up of mean and variance).
func trained(t testing.TB, d model.Desc, in model.Shape, seed uint64) *model.Net {
	t.Helper()
	net, err := model.Build(d, in, 10, 8, seed)
	if err != nil {
		t.Fatal(err)
	}
	// The forward the ONNX graph is held to computes its convolutions
	// directly, as the graph's evaluator does: Winograd (the default for
	// 3x3 layers from 32 channels) rounds differently, by up to 1.4e-4 at
	// resnet20's outputs here.
	if err := net.SetKernels(model.Kernels{DNNL: model.DefaultKernels().DNNL, Direct: true}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	for _, g := range net.Groups() {
		if g.Norm || g.Bias {
			for i := g.Off; i < g.Off+g.Len; i++ {
				net.Params[i] += float32(rng.NormFloat64() * 0.2)
			}
		}
	}
	for _, g := range net.BufferGroups() {
		for i := g.Off; i < g.Off+g.Len; i++ {
			if strings.HasSuffix(g.Name, "running_var") {
				net.Buffers[i] = float32(0.5 + rng.Float64())
			} else {
				net.Buffers[i] = float32(rng.NormFloat64() * 0.1)
			}
		}
	}
	net.SetTraining(false)
	return net
}

func zooNet(t testing.TB, name string) *model.Net {
	t.Helper()
	d, err := model.LoadDesc(name)
	if err != nil {
		t.Fatal(err)
	}
	return trained(t, d, fmnist, 3)
}

func parseDesc(t testing.TB, text string) model.Desc {
	t.Helper()
	d, err := model.ParseDesc("test", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func exportONNX(t testing.TB, net *model.Net) (*onnxpb.ModelProto, []byte) {
	t.Helper()
	var b bytes.Buffer
	if err := ONNX(&b, net, Info{Model: "test", Step: 7}); err != nil {
		t.Fatal(err)
	}
	m := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(b.Bytes(), m); err != nil {
		t.Fatal(err)
	}
	return m, b.Bytes()
}

// TestONNXMatchesForward runs every zoo model and a few odd descriptions
// (a batch norm over flattened features, a linear layer straight after a
// convolution, a convolution after a linear layer, a flatten inside a
// residual block) through the exported graph with the reference evaluator
// below, and compares with the network's own forward pass.
func TestONNXMatchesForward(t *testing.T) {
	cases := map[string]model.Desc{}
	for _, name := range model.Zoo() {
		d, _ := model.LoadDesc(name)
		cases[name] = d
	}
	cases["bn-after-flatten"] = parseDesc(t, `layers = [
	  {kind = "conv", out = 3, kernel = 3, stride = 2},
	  {kind = "relu"}, {kind = "flatten"}, {kind = "batchnorm"}, {kind = "dropout"},
	  {kind = "linear", out = "classes"}]`)
	cases["linear-after-conv"] = parseDesc(t, `layers = [
	  {kind = "conv", out = 4, kernel = 5, stride = 3, pad = 1}, {kind = "maxpool", kernel = 2},
	  {kind = "linear", out = 12, bias = false}, {kind = "relu"},
	  {kind = "conv", out = 6, kernel = 1}, {kind = "batchnorm"}, {kind = "globalavgpool"},
	  {kind = "linear", out = "classes"}]`)
	cases["flatten-in-block"] = parseDesc(t, `layers = [
	  {kind = "conv", out = 4, kernel = 3, stride = 3},
	  {kind = "globalavgpool"},
	  {kind = "residual", shortcut = "identity", layers = [{kind = "flatten"}, {kind = "relu"}]},
	  {kind = "residual", shortcut = "conv", layers = [{kind = "conv", out = 5, kernel = 1}]},
	  {kind = "linear", out = "classes"}]`)
	cases["block-after-flatten"] = parseDesc(t, `layers = [
	  {kind = "conv", out = 3, kernel = 3, stride = 3},
	  {kind = "flatten"},
	  {kind = "residual", shortcut = "identity", layers = [{kind = "batchnorm"}, {kind = "relu"}]},
	  {kind = "linear", out = "classes"}]`)
	for name, d := range cases {
		t.Run(name, func(t *testing.T) {
			net := trained(t, d, fmnist, 5)
			m, _ := exportONNX(t, net)
			n := 3
			x := make([]float32, n*fmnist.Size())
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range x {
				x[i] = float32(rng.Float64())
			}
			copy(net.Input(), x)
			want := net.Forward(n)
			got := evalONNX(t, m, toNCHW(x, n, fmnist), n)
			if d := maxDiff(got, want); d > 1e-4 || math.IsNaN(d) {
				t.Fatalf("max |onnx - forward| = %g", d)
			}
		})
	}
}

// A residual block whose body goes through a linear layer while its
// shortcut carries a flattened map is refused, naming the layer.
func TestONNXRefusesMixedOrder(t *testing.T) {
	d := parseDesc(t, `layers = [
	  {kind = "conv", out = 2, kernel = 3, pad = 1, stride = 2}, {kind = "flatten"},
	  {kind = "residual", layers = [{kind = "linear", out = 392}]},
	  {kind = "linear", out = "classes"}]`)
	net := trained(t, d, fmnist, 1)
	var b bytes.Buffer
	for _, err := range []error{ONNX(&b, net, Info{}), Safetensors(&b, net, Info{})} {
		var le *LayerError
		if !errors.As(err, &le) || le.Pos != "3" || le.Name != "res1" || strings.Contains(err.Error(), "\n") {
			t.Fatalf("err = %v, want a one-line LayerError for layer 3 (res1)", err)
		}
	}
	if b.Len() != 0 {
		t.Errorf("%d bytes written for a refused network", b.Len())
	}
}

func TestONNXHeader(t *testing.T) {
	net := zooNet(t, "resnet8")
	m, b := exportONNX(t, net)
	if m.GetIrVersion() != IRVersion || len(m.OpsetImport) != 1 || m.OpsetImport[0].GetVersion() < 13 || m.OpsetImport[0].GetDomain() != "" {
		t.Fatalf("ir %d opsets %v", m.GetIrVersion(), m.OpsetImport)
	}
	in := m.Graph.Input[0].Type.GetTensorType().Shape.Dim
	if len(in) != 4 || in[0].GetDimParam() != "batch" || in[1].GetDimValue() != 1 || in[2].GetDimValue() != 28 || in[3].GetDimValue() != 28 {
		t.Errorf("input dims %v, want [batch 1 28 28]", in)
	}
	out := m.Graph.Output[0]
	if out.GetName() != "logits" || out.Type.GetTensorType().Shape.Dim[0].GetDimParam() != "batch" || out.Type.GetTensorType().Shape.Dim[1].GetDimValue() != 10 {
		t.Errorf("output %v", out)
	}
	// Every parameter and buffer is an initializer under its name.
	inits := map[string]bool{}
	for _, t := range m.Graph.Initializer {
		inits[t.GetName()] = true
	}
	for _, g := range append(net.Groups(), net.BufferGroups()...) {
		if !inits[g.Name] {
			t.Errorf("no initializer %s", g.Name)
		}
	}
	meta := map[string]string{}
	for _, p := range m.MetadataProps {
		meta[p.GetKey()] = p.GetValue()
	}
	if meta["input_shape"] != "[1,28,28]" || meta["classes"] != "10" || meta["step"] != "7" || meta["sample_resize"] != "bilinear" {
		t.Errorf("metadata %v", meta)
	}
	if d, err := model.ParseDesc("meta", []byte(meta["desc"])); err != nil || d.Diff(net.Desc) != "" {
		t.Errorf("metadata desc does not read back: %v", err)
	}
	_, b2 := exportONNX(t, net)
	if !bytes.Equal(b, b2) {
		t.Error("two exports of one network differ")
	}
}

// TestSafetensorsLayout reads the file as the format's specification
// says and checks the layouts against the network's own tensors: a
// convolution's (O, K, K, C) becomes (O, C, K, K), a linear layer after a
// flatten takes its inputs in (C, H, W) order.
func TestSafetensorsLayout(t *testing.T) {
	net := zooNet(t, "cnn")
	var buf bytes.Buffer
	if err := Safetensors(&buf, net, Info{Model: "cnn", Step: 42, ClassNames: []string{"a", "b"}, SampleResize: "nearest"}); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	n := binary.LittleEndian.Uint64(b)
	if (8+n)%8 != 0 || 8+n > uint64(len(b)) {
		t.Fatalf("header length %d", n)
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &header); err != nil {
		t.Fatal(err)
	}
	data := b[8+n:]
	var meta map[string]string
	json.Unmarshal(header["__metadata__"], &meta)
	if meta["format"] != "pt" || meta["step"] != "42" || meta["class_names"] != `["a","b"]` || meta["sample_resize"] != "nearest" {
		t.Errorf("metadata %v", meta)
	}
	type entry struct {
		Dtype   string
		Shape   []int
		Offsets [2]int `json:"data_offsets"`
	}
	ts := map[string]entry{}
	covered := 0
	for k, v := range header {
		if k == "__metadata__" {
			continue
		}
		var e entry
		if err := json.Unmarshal(v, &e); err != nil {
			t.Fatal(err)
		}
		ts[k] = e
		covered += e.Offsets[1] - e.Offsets[0]
	}
	if covered != len(data) {
		t.Fatalf("tensors cover %d of %d data bytes", covered, len(data))
	}
	get := func(name string) ([]int, []float32) {
		e, ok := ts[name]
		if !ok || e.Dtype != "F32" {
			t.Fatalf("tensor %s: %+v", name, e)
		}
		v := make([]float32, (e.Offsets[1]-e.Offsets[0])/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[e.Offsets[0]+4*i:]))
		}
		return e.Shape, v
	}
	groups := map[string]model.Group{}
	for _, g := range net.Groups() {
		groups[g.Name] = g
	}
	shape, w := get("conv2.weight")
	if fmt.Sprint(shape) != "[64 32 3 3]" {
		t.Fatalf("conv2.weight shape %v", shape)
	}
	src := net.Params[groups["conv2.weight"].Off:]
	for _, ix := range [][4]int{{0, 0, 0, 0}, {5, 7, 1, 2}, {63, 31, 2, 0}} {
		o, c, kh, kw := ix[0], ix[1], ix[2], ix[3]
		if got, want := w[((o*32+c)*3+kh)*3+kw], src[((o*3+kh)*3+kw)*32+c]; got != want {
			t.Errorf("conv2.weight%v = %v, want %v", ix, got, want)
		}
	}
	// fc1 follows the flatten of a 7x7x64 map.
	shape, w = get("fc1.weight")
	if fmt.Sprint(shape) != "[512 3136]" {
		t.Fatalf("fc1.weight shape %v", shape)
	}
	src = net.Params[groups["fc1.weight"].Off:]
	for _, ix := range [][4]int{{0, 0, 0, 0}, {9, 3, 4, 5}, {511, 63, 6, 6}} {
		o, c, h, ww := ix[0], ix[1], ix[2], ix[3]
		if got, want := w[o*3136+c*49+h*7+ww], src[o*3136+(h*7+ww)*64+c]; got != want {
			t.Errorf("fc1.weight[%d, c %d h %d w %d] = %v, want %v", o, c, h, ww, got, want)
		}
	}
	_, bias := get("fc2.bias")
	if g := groups["fc2.bias"]; !equal(bias, net.Params[g.Off:g.Off+g.Len]) {
		t.Error("fc2.bias differs")
	}
}

func TestSafetensorsBatchNorm(t *testing.T) {
	net := zooNet(t, "resnet8")
	var buf bytes.Buffer
	if err := Safetensors(&buf, net, Info{Step: 99}); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	n := binary.LittleEndian.Uint64(b)
	var header map[string]json.RawMessage
	json.Unmarshal(b[8:8+n], &header)
	for _, name := range []string{"bn1.running_mean", "bn1.running_var", "res2.proj.bn1.running_var", "res3.bn2.weight"} {
		if _, ok := header[name]; !ok {
			t.Errorf("no %s", name)
		}
	}
	var e struct {
		Dtype   string
		Shape   []int
		Offsets [2]int `json:"data_offsets"`
	}
	json.Unmarshal(header["res1.bn2.num_batches_tracked"], &e)
	data := b[8+n:]
	if e.Dtype != "I64" || len(e.Shape) != 0 || e.Offsets[1]-e.Offsets[0] != 8 || binary.LittleEndian.Uint64(data[e.Offsets[0]:]) != 99 {
		t.Errorf("num_batches_tracked %+v", e)
	}
}

func equal(a, b []float32) bool {
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

func maxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// toNCHW reorders n samples (H, W, C) to (C, H, W).
func toNCHW(x []float32, n int, s model.Shape) []float32 {
	y := make([]float32, len(x))
	for i := 0; i < n; i++ {
		for h := 0; h < s.H; h++ {
			for w := 0; w < s.W; w++ {
				for c := 0; c < s.C; c++ {
					y[i*s.Size()+(c*s.H+h)*s.W+w] = x[i*s.Size()+(h*s.W+w)*s.C+c]
				}
			}
		}
	}
	return y
}

// tensor is a value of the reference evaluator: float64, row-major dims.
type tensor struct {
	dims []int
	v    []float64
}

// evalONNX runs m on x (n samples, NCHW) with plain loops, reading only
// what the file says: a slow, obvious twin of an ONNX runtime for the
// operators the exporter writes.
func evalONNX(t *testing.T, m *onnxpb.ModelProto, x []float32, n int) []float32 {
	t.Helper()
	env := map[string]tensor{}
	in := m.Graph.Input[0].Type.GetTensorType().Shape.Dim
	dims := []int{n}
	for _, d := range in[1:] {
		dims = append(dims, int(d.GetDimValue()))
	}
	env["input"] = tensor{dims, f64(x)}
	for _, init := range m.Graph.Initializer {
		var d []int
		for _, v := range init.Dims {
			d = append(d, int(v))
		}
		raw := init.RawData
		var v []float64
		switch init.GetDataType() {
		case int32(onnxpb.TensorProto_FLOAT):
			for i := 0; i < len(raw); i += 4 {
				v = append(v, float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[i:]))))
			}
		case int32(onnxpb.TensorProto_INT64):
			for i := 0; i < len(raw); i += 8 {
				v = append(v, float64(int64(binary.LittleEndian.Uint64(raw[i:]))))
			}
		}
		env[init.GetName()] = tensor{d, v}
	}
	for _, nd := range m.Graph.Node {
		a := map[string]*onnxpb.AttributeProto{}
		for _, at := range nd.Attribute {
			a[at.GetName()] = at
		}
		args := make([]tensor, len(nd.Input))
		for i, name := range nd.Input {
			v, ok := env[name]
			if !ok {
				t.Fatalf("node %s: input %s undefined", nd.GetName(), name)
			}
			args[i] = v
		}
		env[nd.Output[0]] = refOp(t, nd.GetOpType(), args, a)
	}
	out := env["logits"]
	if len(out.dims) != 2 || out.dims[0] != n {
		t.Fatalf("logits dims %v", out.dims)
	}
	r := make([]float32, len(out.v))
	for i, v := range out.v {
		r[i] = float32(v)
	}
	return r
}

func f64(x []float32) []float64 {
	r := make([]float64, len(x))
	for i, v := range x {
		r[i] = float64(v)
	}
	return r
}

func refOp(t *testing.T, op string, in []tensor, a map[string]*onnxpb.AttributeProto) tensor {
	x := in[0]
	switch op {
	case "Relu":
		y := tensor{x.dims, make([]float64, len(x.v))}
		for i, v := range x.v {
			y.v[i] = math.Max(v, 0)
		}
		return y
	case "Identity":
		return x
	case "Add":
		y := tensor{x.dims, make([]float64, len(x.v))}
		if fmt.Sprint(x.dims) != fmt.Sprint(in[1].dims) {
			t.Fatalf("Add of %v and %v", x.dims, in[1].dims)
		}
		for i := range y.v {
			y.v[i] = x.v[i] + in[1].v[i]
		}
		return y
	case "Flatten":
		f := 1
		for _, d := range x.dims[1:] {
			f *= d
		}
		return tensor{[]int{x.dims[0], f}, x.v}
	case "Unsqueeze":
		return tensor{append(append([]int{}, x.dims...), 1, 1), x.v}
	case "Gemm":
		w := in[1]
		n, k, o := x.dims[0], x.dims[1], w.dims[0]
		if w.dims[1] != k || a["transB"].GetI() != 1 {
			t.Fatalf("Gemm %v x %v^T", x.dims, w.dims)
		}
		y := tensor{[]int{n, o}, make([]float64, n*o)}
		for i := 0; i < n; i++ {
			for j := 0; j < o; j++ {
				s := 0.0
				if len(in) > 2 {
					s = in[2].v[j]
				}
				for l := 0; l < k; l++ {
					s += x.v[i*k+l] * w.v[j*k+l]
				}
				y.v[i*o+j] = s
			}
		}
		return y
	case "BatchNormalization":
		eps := float64(a["epsilon"].GetF())
		c := x.dims[1]
		inner := len(x.v) / (x.dims[0] * c)
		y := tensor{x.dims, make([]float64, len(x.v))}
		for i := range x.v {
			ch := (i / inner) % c
			y.v[i] = (x.v[i]-in[3].v[ch])/math.Sqrt(in[4].v[ch]+eps)*in[1].v[ch] + in[2].v[ch]
		}
		return y
	case "GlobalAveragePool":
		n, c, hw := x.dims[0], x.dims[1], x.dims[2]*x.dims[3]
		y := tensor{[]int{n, c, 1, 1}, make([]float64, n*c)}
		for i := 0; i < n*c; i++ {
			s := 0.0
			for _, v := range x.v[i*hw : (i+1)*hw] {
				s += v
			}
			y.v[i] = s / float64(hw)
		}
		return y
	case "MaxPool", "AveragePool", "Conv":
		ks, st := a["kernel_shape"].Ints, a["strides"].Ints
		pad := 0
		if p := a["pads"]; p != nil {
			pad = int(p.Ints[0])
		}
		k, s := int(ks[0]), int(st[0])
		n, c, h, w := x.dims[0], x.dims[1], x.dims[2], x.dims[3]
		ho, wo := (h+2*pad-k)/s+1, (w+2*pad-k)/s+1
		oc := c
		if op == "Conv" {
			oc = in[1].dims[0]
		}
		y := tensor{[]int{n, oc, ho, wo}, make([]float64, n*oc*ho*wo)}
		at := func(i, ch, r, q int) (float64, bool) {
			r, q = r-pad, q-pad
			if r < 0 || q < 0 || r >= h || q >= w {
				return 0, false
			}
			return x.v[((i*c+ch)*h+r)*w+q], true
		}
		for i := 0; i < n; i++ {
			for o := 0; o < oc; o++ {
				for r := 0; r < ho; r++ {
					for q := 0; q < wo; q++ {
						var acc float64
						switch op {
						case "MaxPool":
							acc = math.Inf(-1)
							for kh := 0; kh < k; kh++ {
								for kw := 0; kw < k; kw++ {
									v, _ := at(i, o, r*s+kh, q*s+kw)
									acc = math.Max(acc, v)
								}
							}
						case "AveragePool":
							for kh := 0; kh < k; kh++ {
								for kw := 0; kw < k; kw++ {
									v, _ := at(i, o, r*s+kh, q*s+kw)
									acc += v
								}
							}
							acc /= float64(k * k)
						case "Conv":
							if len(in) > 2 {
								acc = in[2].v[o]
							}
							for ch := 0; ch < c; ch++ {
								for kh := 0; kh < k; kh++ {
									for kw := 0; kw < k; kw++ {
										v, _ := at(i, ch, r*s+kh, q*s+kw)
										acc += v * in[1].v[((o*c+ch)*k+kh)*k+kw]
									}
								}
							}
						}
						y.v[((i*oc+o)*ho+r)*wo+q] = acc
					}
				}
			}
		}
		return y
	}
	t.Fatalf("reference evaluator: no operator %s", op)
	return tensor{}
}
