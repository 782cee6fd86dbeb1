// Gradient buffer kernels of the all-reduce (hpctrain/gpu/collective).

// grads_unscale_finite multiplies g by s (unless s is 1) and sets *bad to 1
// when any resulting value is Inf or NaN; *bad must be 0 before the launch.
// Every thread that writes *bad writes the same 1, so the flag needs no
// atomics. Finiteness is read from the exponent bits, identical on the GPU
// and under the emulator whatever the compiler's fast-math settings.
extern "C" __global__ void grads_unscale_finite(float* g, long long n, float s, int* bad) {
	KLOOP(i, n) {
		float x = g[i];
		if (s != 1.0f) {
			x *= s;
			g[i] = x;
		}
		if ((__float_as_uint(x) & 0x7f800000u) == 0x7f800000u)
			*bad = 1;
	}
}
