package data

import (
	"fmt"
	"strconv"
	"strings"
)

// TransformConfig is the augmentation section of a run's configuration, in
// the form a TOML table decodes into:
//
//	[augment]
//	resize = [36, 36]   # H, W; or one number for a square
//	center_crop = [32, 32]
//	crop_pad = 4        # random crop after zero padding
//	crop = [32, 32]     # random crop size; default the input size
//	rotate_deg = 10     # uniform angle in [-10, 10] degrees
//	flip = true         # horizontal flip with probability 0.5
//	blur_sigma = 0.5    # Gaussian blur, pixels
//	interp = "bilinear" # or "nearest", for resize and rotate
//
// Transforms apply in the fixed order of the lines above. The zero value
// is no augmentation.
type TransformConfig struct {
	Resize     Sizes   `toml:"resize"`
	CenterCrop Sizes   `toml:"center_crop"`
	CropPad    int     `toml:"crop_pad"`
	Crop       Sizes   `toml:"crop"`
	Flip       bool    `toml:"flip"`
	RotateDeg  float64 `toml:"rotate_deg"`
	BlurSigma  float64 `toml:"blur_sigma"`
	Interp     string  `toml:"interp"`
}

// Transforms validates c and returns its chain. Errors name the key.
func (c TransformConfig) Transforms() ([]Transform, error) {
	m, err := parseInterp(c.Interp)
	if err != nil {
		return nil, fmt.Errorf("interp: %w", err)
	}
	var ts []Transform
	if c.Resize != nil {
		h, w, err := hw(c.Resize)
		if err != nil {
			return nil, fmt.Errorf("resize: %w", err)
		}
		ts = append(ts, Resize(h, w, m))
	}
	if c.CenterCrop != nil {
		h, w, err := hw(c.CenterCrop)
		if err != nil {
			return nil, fmt.Errorf("center_crop: %w", err)
		}
		ts = append(ts, CenterCrop(h, w))
	}
	if c.CropPad < 0 || c.CropPad > 1024 {
		return nil, fmt.Errorf("crop_pad: %d, want 0 to 1024", c.CropPad)
	}
	if c.CropPad > 0 || c.Crop != nil {
		h, w := 0, 0
		if c.Crop != nil {
			if h, w, err = hw(c.Crop); err != nil {
				return nil, fmt.Errorf("crop: %w", err)
			}
		}
		ts = append(ts, RandomCrop(c.CropPad, h, w))
	}
	if !(c.RotateDeg >= 0 && c.RotateDeg <= 180) {
		return nil, fmt.Errorf("rotate_deg: %g, want 0 to 180", c.RotateDeg)
	}
	if c.RotateDeg > 0 {
		ts = append(ts, Rotate(c.RotateDeg, m))
	}
	if c.Flip {
		ts = append(ts, Flip(0.5))
	}
	if !(c.BlurSigma >= 0 && c.BlurSigma <= 64) {
		return nil, fmt.Errorf("blur_sigma: %g, want 0 to 64", c.BlurSigma)
	}
	if c.BlurSigma > 0 {
		ts = append(ts, Blur(c.BlurSigma))
	}
	return ts, nil
}

// Sizes is an image size as TOML gives it: [H, W], or one integer (or a
// one-element array) for a square.
type Sizes []int

// UnmarshalTOML takes an integer or an array of integers; their count and
// range are checked by TransformConfig.Transforms.
func (s *Sizes) UnmarshalTOML(v any) error {
	if n, ok := v.(int64); ok {
		v = []any{n}
	}
	a, ok := v.([]any)
	if !ok {
		return fmt.Errorf("%v: want [H, W] or one size", v)
	}
	out := make(Sizes, len(a))
	for i, e := range a {
		n, ok := e.(int64)
		if !ok {
			return fmt.Errorf("%v: want integers, [H, W] or one size", v)
		}
		if n < 1 || n > MaxSide {
			return fmt.Errorf("%d: want sizes 1 to %d", n, MaxSide)
		}
		out[i] = int(n)
	}
	*s = out
	return nil
}

// MaxSide is the largest height or width of a sample shape or of a
// transform's output (image_shape, resize, center_crop, crop): an
// 8192x8192x3 sample is 192 MiB as bytes and 768 MiB as float32, so that
// even a batch of one is a large allocation; the memory checks of Budget
// and NewLoader judge what a batch of such samples needs.
const MaxSide = 8192

// hw reads [H, W] or [S] (square) with positive sizes.
func hw(v []int) (h, w int, err error) {
	switch {
	case len(v) == 1:
		h, w = v[0], v[0]
	case len(v) == 2:
		h, w = v[0], v[1]
	default:
		return 0, 0, fmt.Errorf("%v, want [H, W] or [size]", v)
	}
	if h < 1 || w < 1 || h > MaxSide || w > MaxSide {
		return 0, 0, fmt.Errorf("%v, want sizes 1 to %d", v, MaxSide)
	}
	return h, w, nil
}

func parseInterp(s string) (Interp, error) {
	switch s {
	case "", "bilinear":
		return Bilinear, nil
	case "nearest":
		return Nearest, nil
	}
	return 0, fmt.Errorf("%q, want \"bilinear\" or \"nearest\"", s)
}

// ParseTransforms builds a chain from command-line specs, applied in the
// order given. Each spec is key or key=value with the keys of
// TransformConfig; sizes are HxW or one number:
//
//	flip            flip=P          (probability, default 0.5)
//	crop_pad=4      crop_pad=4:28x28 (pad, then a random 28x28 window)
//	rotate_deg=10   rotate_deg=10:nearest (default bilinear)
//	blur_sigma=0.5
//	resize=32x32    resize=32x32:nearest (default bilinear)
//	center_crop=28x28
//
// A spec may hold several comma-separated transforms. Errors name the spec.
func ParseTransforms(specs []string) ([]Transform, error) {
	var ts []Transform
	for _, spec := range specs {
		for _, one := range strings.Split(spec, ",") {
			one = strings.TrimSpace(one)
			if one == "" || one == "none" {
				continue
			}
			t, err := parseTransform(one)
			if err != nil {
				return nil, fmt.Errorf("transform %q: %w", one, err)
			}
			ts = append(ts, t)
		}
	}
	return ts, nil
}

func parseTransform(spec string) (Transform, error) {
	key, val, hasVal := strings.Cut(spec, "=")
	arg, opt, hasOpt := strings.Cut(val, ":")
	need := func() error {
		if !hasVal || arg == "" {
			return fmt.Errorf("%s needs a value (%s=...)", key, key)
		}
		return nil
	}
	switch key {
	case "flip":
		if hasOpt {
			return nil, fmt.Errorf("flip takes no option")
		}
		p := 0.5
		if hasVal {
			var err error
			if p, err = strconv.ParseFloat(arg, 64); err != nil || !(p >= 0 && p <= 1) {
				return nil, fmt.Errorf("flip probability %q, want 0 to 1", arg)
			}
		}
		return Flip(p), nil
	case "crop_pad":
		if err := need(); err != nil {
			return nil, err
		}
		pad, err := strconv.Atoi(arg)
		if err != nil || pad < 0 || pad > 1024 {
			return nil, fmt.Errorf("crop_pad %q, want 0 to 1024", arg)
		}
		h, w := 0, 0
		if hasOpt {
			if h, w, err = parseHW(opt); err != nil {
				return nil, err
			}
		}
		return RandomCrop(pad, h, w), nil
	case "rotate_deg":
		if err := need(); err != nil {
			return nil, err
		}
		d, err := strconv.ParseFloat(arg, 64)
		if err != nil || !(d >= 0 && d <= 180) {
			return nil, fmt.Errorf("rotate_deg %q, want 0 to 180", arg)
		}
		m := Bilinear
		if hasOpt {
			if m, err = parseInterp(opt); err != nil {
				return nil, err
			}
		}
		return Rotate(d, m), nil
	case "blur_sigma":
		if err := need(); err != nil {
			return nil, err
		}
		s, err := strconv.ParseFloat(arg, 64)
		if err != nil || hasOpt || !(s >= 0 && s <= 64) {
			return nil, fmt.Errorf("blur_sigma %q, want 0 to 64", val)
		}
		return Blur(s), nil
	case "resize":
		if err := need(); err != nil {
			return nil, err
		}
		h, w, err := parseHW(arg)
		if err != nil {
			return nil, err
		}
		m := Bilinear
		if hasOpt {
			if m, err = parseInterp(opt); err != nil {
				return nil, err
			}
		}
		return Resize(h, w, m), nil
	case "center_crop":
		if err := need(); err != nil {
			return nil, err
		}
		h, w, err := parseHW(arg)
		if err != nil {
			return nil, err
		}
		if hasOpt {
			return nil, fmt.Errorf("center_crop %q, want HxW (no option)", val)
		}
		return CenterCrop(h, w), nil
	}
	return nil, fmt.Errorf("unknown transform %q (want flip, crop_pad, rotate_deg, blur_sigma, resize or center_crop)", key)
}

// parseHW reads "HxW" or "S".
func parseHW(s string) (h, w int, err error) {
	a, b, two := strings.Cut(s, "x")
	h, err1 := strconv.Atoi(a)
	w, err2 := h, error(nil)
	if two {
		w, err2 = strconv.Atoi(b)
	}
	if err1 != nil || err2 != nil || h < 1 || w < 1 || h > MaxSide || w > MaxSide {
		return 0, 0, fmt.Errorf("size %q, want HxW or one number, 1 to %d", s, MaxSide)
	}
	return h, w, nil
}

// EvalTransforms derives, from a training chain, the chain that validation
// and test samples go through: the same shapes without the augmentation.
// Resize and center_crop are kept (they are preprocessing); a random crop
// becomes a center crop of its size, or is dropped when it keeps the
// shape; flips, rotations and blurs are dropped. The result gives the same
// output shape as ts for input in, so that one model takes both. A random
// crop larger than its input (a window reaching into the padding) has no
// center-crop twin and is an error, as is a chain that does not fit in.
func EvalTransforms(ts []Transform, in Shape) ([]Transform, error) {
	var ev []Transform
	for _, t := range ts {
		out, err := t.Out(in)
		if err != nil {
			return nil, fmt.Errorf("transform %s on %dx%dx%d: %w", t, in.H, in.W, in.C, err)
		}
		switch t.(type) {
		case resizeT, centerCrop:
			ev = append(ev, t)
		case randomCrop:
			if out.H > in.H || out.W > in.W {
				return nil, fmt.Errorf("transform %s: a %dx%d window of a %dx%d image has no deterministic twin for evaluation (resize first, or crop at most the image size)", t, out.H, out.W, in.H, in.W)
			}
			if out != in {
				ev = append(ev, CenterCrop(out.H, out.W))
			}
		}
		in = out
	}
	return ev, nil
}
