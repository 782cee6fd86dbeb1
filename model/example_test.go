package model_test

import (
	"fmt"
	"os"

	"hpctrain/model"
)

// A network described in TOML, built for 8x8 grey images and 3 classes,
// its parameter tensors, and its summary.
func Example() {
	d, err := model.ParseDesc("tiny.toml", []byte(`
layers = [
  {kind = "conv", out = 4, kernel = 3, pad = 1, bias = false},
  {kind = "batchnorm"},
  {kind = "relu"},
  {kind = "residual", layers = [
    {kind = "conv", out = 4, kernel = 3, pad = 1},
    {kind = "relu"},
  ]},
  {kind = "globalavgpool"},
  {kind = "linear", out = "classes"},
]`))
	if err != nil {
		fmt.Println(err)
		return
	}
	net, err := model.Build(d, model.Shape{H: 8, W: 8, C: 1}, 3, 16, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, g := range net.Groups() {
		fmt.Printf("%-16s %3d at %3d\n", g.Name, g.Len, g.Off)
	}
	for _, g := range net.BufferGroups() {
		fmt.Printf("%-16s %3d at %3d (buffer)\n", g.Name, g.Len, g.Off)
	}
	net.Summary().Write(os.Stdout)
	// Output:
	// conv1.weight      36 at   0
	// bn1.weight         4 at  36
	// bn1.bias           4 at  40
	// res1.conv1.weight 144 at  44
	// res1.conv1.bias    4 at 188
	// fc1.weight        12 at 192
	// fc1.bias           3 at 204
	// bn1.running_mean   4 at   0 (buffer)
	// bn1.running_var    4 at   4 (buffer)
	// Model tiny.toml (hash d1e9ae55cfd58230): input 8x8x1, 3 classes
	// ================================================================
	// Layer (kind)          Output shape       Param #       Mult-adds
	// ================================================================
	// conv1 (conv)          8x8x4                   36           2,304
	// bn1 (batchnorm)       8x8x4                    8              --
	// relu1 (relu)          8x8x4                   --              --
	// res1 (residual)       8x8x4                  148           9,216
	//   res1.conv1 (conv)   8x8x4                  148           9,216
	//   res1.relu1 (relu)   8x8x4                   --              --
	// gap1 (globalavgpool)  1x1x4                   --              --
	// fc1 (linear)          1x1x3                   15              12
	// ================================================================
	// Total params: 207
	// Trainable params: 207
	// Non-trainable buffers: 8
	// Mult-adds per sample (M): 0.01 forward, 0.03 training step
	// ================================================================
	// Input size per sample (MB): 0.00
	// Layer outputs per sample (MB): 0.01
	// Params and buffers size (MB): 0.00
	// ================================================================
}

// Two descriptions of the same network differ in nothing but their text;
// an edit is named in one line.
func ExampleDesc_Diff() {
	a, _ := model.ParseDesc("a.toml", []byte(`layers = [{kind = "flatten"}, {kind = "linear", out = "classes"}]`))
	b, _ := model.ParseDesc("b.toml", []byte(`layers = [{kind = "flatten"}, {kind = "linear", out = "classes", bias = true}]`))
	c, _ := model.ParseDesc("c.toml", []byte(`layers = [{kind = "flatten"}, {kind = "linear", out = "classes", bias = false}]`))
	fmt.Printf("%q %v\n", a.Diff(b), a.Hash() == b.Hash())
	fmt.Printf("%q %v\n", a.Diff(c), a.Hash() == c.Hash())
	fmt.Print(string(c.TOML()))
	// Output:
	// "" true
	// "layer 2 (linear): bias true vs false" false
	// layers = [
	//   {kind = "flatten"},
	//   {kind = "linear", out = "classes", bias = false},
	// ]
}
