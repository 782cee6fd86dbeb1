package export_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"

	"hpctrain/export"
	"hpctrain/model"
)

// A network's weights for PyTorch: the safetensors header lists each
// tensor under its state_dict name, in PyTorch's shape.
func ExampleSafetensors() {
	d, _ := model.LoadDesc("lenet5")
	net, _ := model.Build(d, model.Shape{H: 28, W: 28, C: 1}, 10, 1, 1)
	var b bytes.Buffer
	if err := export.Safetensors(&b, net, export.Info{Model: "lenet5"}); err != nil {
		fmt.Println(err)
		return
	}
	n := binary.LittleEndian.Uint64(b.Bytes())
	var header map[string]struct {
		Dtype string `json:"dtype"`
		Shape []int  `json:"shape"`
	}
	json.Unmarshal(b.Bytes()[8:8+n], &header)
	var names []string
	for k := range header {
		if k != "__metadata__" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Println(k, header[k].Dtype, header[k].Shape)
	}
	// Output:
	// conv1.bias F32 [6]
	// conv1.weight F32 [6 1 5 5]
	// conv2.bias F32 [16]
	// conv2.weight F32 [16 6 5 5]
	// fc1.bias F32 [120]
	// fc1.weight F32 [120 400]
	// fc2.bias F32 [84]
	// fc2.weight F32 [84 120]
	// fc3.bias F32 [10]
	// fc3.weight F32 [10 84]
}
