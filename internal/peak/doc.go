// Package peak measures one core's peak floating-point rate in the two
// arithmetics the CPU kernels use: float32 fused multiply-adds (AVX-512
// or AVX2, as the kernels would use them: DNNL_MAX_CPU_ISA caps both) and
// bf16 dot products (AVX512-BF16's vdpbf16ps, each instruction two bf16
// products per float32 lane). The loop is a chain of independent
// accumulators, enough to hide the instruction's latency, with no memory
// traffic: what the core's vector units can issue, the denominator of a
// roofline. bench reports a step's rate against it. AMX-BF16's tile unit,
// faster still where a CPU has it, is not measured.
package peak
