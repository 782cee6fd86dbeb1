// Precision conversions of whole buffers: GEMM operands in bf16 or fp16
// (fp32 accumulation in cuBLAS), written from fp32 values.

extern "C" __global__ void to_bf16(unsigned short* y, const float* x, long long n) {
	KLOOP(i, n) y[i] = float_to_bf16(x[i]);
}

extern "C" __global__ void to_half(unsigned short* y, const float* x, long long n) {
	KLOOP(i, n) y[i] = float_to_half(x[i]);
}
