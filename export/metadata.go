package export

import (
	"encoding/json"
	"strconv"

	"hpctrain/model"
)

// Info is what a file says about the network beyond its tensors: where it
// came from and what its inputs and outputs mean.
type Info struct {
	Model      string    // the model's name ("cnn") or description file
	Step       int64     // optimizer steps it was trained for
	Dataset    string    // the data set it was trained on ("fashion-mnist")
	ClassNames []string  // output k is ClassNames[k]; nil when unknown
	Mean, Std  []float32 // per channel: inputs are (pixel/255 - Mean)/Std; nil: pixel/255
	// Preprocess is what evaluation does to a sample before the
	// normalisation, in order, as hpctrain's -augment names it (e.g.
	// "resize=32x32", "center_crop=28x28"); empty: nothing.
	Preprocess []string
	// SampleShape is the data set's sample (C, H, W) that Preprocess
	// starts from; nil: the input shape.
	SampleShape []int
	// SampleResize is how an image file of another size becomes a sample
	// (as predict, and a run on an image folder, read it): "bilinear"
	// (also for ""), "nearest", or "none" (such an image is refused).
	SampleResize string
}

// metadata is the key-value metadata both formats carry (see the package
// documentation). Values are strings; lists and objects are JSON.
func metadata(net *model.Net, info Info) map[string]string {
	js := func(v any) string {
		b, _ := json.Marshal(v) // plain data: cannot fail
		return string(b)
	}
	in := net.In
	m := map[string]string{
		"producer":     "hpctrain",
		"model":        info.Model,
		"desc":         string(net.Desc.TOML()),
		"layers":       js(layersJSON(net.Desc.Layers, net.Classes)),
		"input_shape":  js([]int{in.C, in.H, in.W}),
		"input_layout": "NCHW, float32, normalised: (pixel/255 - mean[c]) / std[c]",
		"classes":      strconv.Itoa(net.Classes),
		"step":         strconv.FormatInt(info.Step, 10),
	}
	if info.Dataset != "" {
		m["dataset"] = info.Dataset
	}
	if info.ClassNames != nil {
		m["class_names"] = js(info.ClassNames)
	}
	mean, std := make([]float32, in.C), make([]float32, in.C)
	for c := range std {
		std[c] = 1
	}
	copy(mean, info.Mean)
	copy(std, info.Std)
	m["mean"], m["std"] = js(mean), js(std)
	// Without these a file of a network trained through a resize is
	// fed samples of the wrong size. Resizes are PyTorch's interpolate:
	// bilinear with align_corners=False, rounded half up to bytes
	// (floor(x + 0.5)), or, named ":nearest", mode "nearest-exact" (its
	// "nearest" samples other pixels).
	pre, shape := info.Preprocess, info.SampleShape
	if pre == nil {
		pre = []string{}
	}
	if shape == nil {
		shape = []int{in.C, in.H, in.W}
	}
	m["preprocess"], m["sample_shape"] = js(pre), js(shape)
	m["sample_resize"] = info.SampleResize
	if info.SampleResize == "" {
		m["sample_resize"] = "bilinear"
	}
	return m
}

// layersJSON is a description as JSON objects: kind and that kind's keys,
// "out" resolved to a number, residual blocks' bodies under "layers".
func layersJSON(ls []model.LayerDesc, classes int) []map[string]any {
	out := make([]map[string]any, len(ls))
	for i, l := range ls {
		o := l.Out
		if o == model.OutClasses {
			o = classes
		}
		m := map[string]any{"kind": l.Kind}
		switch l.Kind {
		case "conv":
			m["out"], m["kernel"], m["stride"], m["pad"], m["bias"] = o, l.Kernel, l.Stride, l.Pad, l.Bias
		case "linear":
			m["out"], m["bias"] = o, l.Bias
		case "maxpool", "avgpool":
			m["kernel"], m["stride"] = l.Kernel, l.Stride
		case "batchnorm":
			m["momentum"], m["eps"] = l.Momentum, l.Eps
		case "dropout":
			m["p"] = l.P
		case "residual":
			m["shortcut"] = l.Shortcut
			m["layers"] = layersJSON(l.Layers, classes)
		}
		out[i] = m
	}
	return out
}
