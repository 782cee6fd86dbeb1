package cudanet

import (
	"fmt"

	"hpctrain/gpu/cuda"
	"hpctrain/gpu/kernels"
)

// Device is one CUDA device's primary context with every kernel of
// hpctrain/gpu/kernels compiled into one module.
type Device struct {
	ctx   *cuda.Context
	mod   *cuda.Module
	label string
}

// compileOpts are NVRTC's options for the kernels: no contraction of a
// multiply and an add into an FMA, so the element-wise kernels round as
// the CPU's Go code does.
var compileOpts = []string{"--fmad=false"}

// Open loads the CUDA driver, cuBLAS and NVRTC, opens device ordinal (its
// primary context, made current on the calling OS thread) and compiles
// kernels.Source() into one module (NVRTC's output is cached on disk).
func Open(ordinal int) (*Device, error) {
	for _, load := range []func() error{cuda.LoadDriver, cuda.LoadBLAS, cuda.LoadNVRTC} {
		if err := load(); err != nil {
			return nil, err
		}
	}
	ctx, err := cuda.OpenDevice(ordinal)
	if err != nil {
		return nil, fmt.Errorf("cudanet: open cuda:%d: %w", ordinal, err)
	}
	mod, err := ctx.CompileModule("hpctrain", kernels.Source(), compileOpts...)
	if err != nil {
		ctx.Close()
		return nil, fmt.Errorf("cudanet: compile the kernels for cuda:%d: %w", ordinal, err)
	}
	major, minor := ctx.ComputeCapability()
	return &Device{
		ctx:   ctx,
		mod:   mod,
		label: fmt.Sprintf("cuda:%d %s, sm_%d%d", ordinal, ctx.Name(), major, minor),
	}, nil
}

// Context is the device's primary context.
func (d *Device) Context() *cuda.Context { return d.ctx }

// Module is the module of the compiled kernels.
func (d *Device) Module() *cuda.Module { return d.mod }

// ComputeCapability is the device's compute capability (9, 0 for sm_90).
func (d *Device) ComputeCapability() (major, minor int) { return d.ctx.ComputeCapability() }

// Label names the device for logs: "cuda:0 NVIDIA H100 80GB HBM3, sm_90".
func (d *Device) Label() string { return d.label }

// Close unloads the kernels and releases the device's primary context.
// Its Nets must be closed first. A second call does nothing.
func (d *Device) Close() error {
	if d.ctx == nil {
		return nil
	}
	err := d.mod.Unload()
	if cerr := d.ctx.Close(); err == nil {
		err = cerr
	}
	d.ctx, d.mod = nil, nil
	return err
}
