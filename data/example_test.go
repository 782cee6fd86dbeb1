package data_test

import (
	"fmt"

	"hpctrain/data"
)

func ExampleParseTransforms() {
	ts, err := data.ParseTransforms([]string{"crop_pad=4,flip", "rotate_deg=10", "blur_sigma=0.5"})
	if err != nil {
		fmt.Println(err)
		return
	}
	p, _ := data.NewPipeline(data.CIFAR10Shape, ts)
	fmt.Println(p, p.Out())
	_, err = data.ParseTransforms([]string{"rotate_deg=720"})
	fmt.Println(err)
	// Output:
	// crop_pad=4,flip,rotate_deg=10,blur_sigma=0.5 {32 32 3}
	// transform "rotate_deg=720": rotate_deg "720", want 0 to 180
}

func ExampleLoader() {
	ds := data.NewSynthetic(100, data.Shape{H: 8, W: 8, C: 3}, 10, 1)
	sampler := data.NewSampler(ds.Len(), 32, 0, 1, 42) // rank 0 of 1
	l, err := data.NewLoader(ds, sampler, data.LoaderOptions{
		Workers:    2,
		Transforms: []data.Transform{data.RandomCrop(2, 0, 0), data.Flip(0.5)},
		Mean:       []float32{0.5, 0.5, 0.5},
		Std:        []float32{0.25, 0.25, 0.25},
		Seed:       7,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	l.Start(1)
	for {
		b, ok := l.Next()
		if !ok {
			break
		}
		fmt.Println("step", b.Step, "samples", b.N, "values", len(b.X))
		l.Release(b) // after the step has used b.X and b.Y
	}
	// Output:
	// step 0 samples 32 values 6144
	// step 1 samples 32 values 6144
	// step 2 samples 32 values 6144
}

// A run's data section, as flags or a TOML file would set it: validated
// without reading anything, opened within this rank's memory budget, and
// turned into the loaders' options.
func ExampleConfig() {
	c := data.Defaults()
	c.Dataset, c.ImageShape, c.Augment = "synthetic", "12x12x3", "crop_pad=2:10x10,flip"
	if err := c.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	sets, err := c.Open(data.OpenOptions{Limit: 64, TestLimit: 16, Budget: data.NewBudget(1)})
	if err != nil {
		fmt.Println(err)
		return
	}
	opts, err := c.LoaderOptions(sets.Train.Shape(), 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(sets.Train.Len(), sets.Test.Len(), sets.Train.Shape())
	fmt.Println(data.ChainString(opts.Transforms), "| evaluation:", data.ChainString(opts.EvalTransforms))

	c.Augment = "center_crop=16"
	fmt.Println(c.Validate())
	// Output:
	// 64 16 {12 12 3}
	// crop_pad=2:10x10,flip | evaluation: center_crop=10x10
	// config: augment = "center_crop=16": transform center_crop=16x16 on 12x12x3: center_crop 16x16 is larger than the image
}
