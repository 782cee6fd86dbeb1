package export

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"sort"

	"google.golang.org/protobuf/proto"

	"hpctrain/export/internal/onnxpb"
	"hpctrain/model"
)

// ONNX versions written: IR version 7 (ONNX 1.7) with opset 13, the
// oldest pair the issue allows, so that the widest range of runtimes
// reads the file; every operator used (Conv, Gemm, BatchNormalization,
// MaxPool, AveragePool, GlobalAveragePool, Relu, Flatten, Unsqueeze, Add)
// is in opset 13 as written.
const (
	IRVersion = 7
	Opset     = 13
)

// ONNX writes net to w as an ONNX model (see the package documentation):
// input "input" (batch, C, H, W), output "logits" (batch, classes). An
// error names the layer without an ONNX form; nothing is written then.
func ONNX(w io.Writer, net *model.Net, info Info) error {
	g, err := build(net, info.Step)
	if err != nil {
		return err
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(onnxModel(g, metadata(net, info)))
	if err != nil {
		return fmt.Errorf("onnx: %w", err)
	}
	_, err = w.Write(b)
	return err
}

func onnxModel(g *graph, meta map[string]string) *onnxpb.ModelProto {
	gp := &onnxpb.GraphProto{
		Name:   proto.String(meta["model"]),
		Input:  []*onnxpb.ValueInfoProto{valueInfo("input", "batch", g.in.C, g.in.H, g.in.W)},
		Output: []*onnxpb.ValueInfoProto{valueInfo("logits", "batch", g.classes)},
	}
	for _, t := range g.tensors {
		if t.I64 == nil { // num_batches_tracked is PyTorch's alone
			gp.Initializer = append(gp.Initializer, tensorProto(t))
		}
	}
	for _, t := range g.consts {
		gp.Initializer = append(gp.Initializer, tensorProto(t))
	}
	for _, n := range g.nodes {
		np := &onnxpb.NodeProto{Name: proto.String(n.name), OpType: proto.String(n.op), Input: n.inputs, Output: n.outputs}
		for _, a := range n.attrs {
			ap := &onnxpb.AttributeProto{Name: proto.String(a.name)}
			switch {
			case a.f != nil:
				ap.Type, ap.F = onnxpb.AttributeProto_FLOAT.Enum(), proto.Float32(*a.f)
			case a.i != nil:
				ap.Type, ap.I = onnxpb.AttributeProto_INT.Enum(), proto.Int64(*a.i)
			default:
				ap.Type, ap.Ints = onnxpb.AttributeProto_INTS.Enum(), a.ints
			}
			np.Attribute = append(np.Attribute, ap)
		}
		gp.Node = append(gp.Node, np)
	}
	m := &onnxpb.ModelProto{
		IrVersion:    proto.Int64(IRVersion),
		ProducerName: proto.String("hpctrain"),
		ModelVersion: proto.Int64(1),
		DocString:    proto.String(fmt.Sprintf("hpctrain model %s: input NCHW float32 normalised as the metadata says, output class scores (logits)", meta["model"])),
		OpsetImport:  []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(Opset)}},
		Graph:        gp,
	}
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		m.MetadataProps = append(m.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(k), Value: proto.String(meta[k])})
	}
	return m
}

// valueInfo is a float32 tensor whose first dimension is the symbolic
// sym and the others dims.
func valueInfo(name, sym string, dims ...int) *onnxpb.ValueInfoProto {
	shape := &onnxpb.TensorShapeProto{Dim: []*onnxpb.TensorShapeProto_Dimension{
		{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: sym}},
	}}
	for _, d := range dims {
		shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(d)}})
	}
	return &onnxpb.ValueInfoProto{
		Name: proto.String(name),
		Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{
			ElemType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)),
			Shape:    shape,
		}}},
	}
}

// tensorProto is t as an initializer, its values as little-endian raw
// data.
func tensorProto(t Tensor) *onnxpb.TensorProto {
	tp := &onnxpb.TensorProto{Name: proto.String(t.Name)}
	for _, d := range t.Shape {
		tp.Dims = append(tp.Dims, int64(d))
	}
	if t.I64 != nil {
		tp.DataType = proto.Int32(int32(onnxpb.TensorProto_INT64))
		raw := make([]byte, 8*len(t.I64))
		for i, v := range t.I64 {
			binary.LittleEndian.PutUint64(raw[8*i:], uint64(v))
		}
		tp.RawData = raw
		return tp
	}
	tp.DataType = proto.Int32(int32(onnxpb.TensorProto_FLOAT))
	raw := make([]byte, 4*len(t.F32))
	for i, v := range t.F32 {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	tp.RawData = raw
	return tp
}
