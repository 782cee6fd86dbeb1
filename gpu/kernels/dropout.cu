// Dropout with the CPU network's mask (hpctrain/model.Dropout), bit for
// bit: value j of global sample first+i is dropped when the top 32 bits of
// mix(key + (first+i)*0x9e3779b97f4a7c15 + j) are below thresh, kept and
// scaled otherwise. The same launch applies the mask in forward (x -> y)
// and backward (dy -> dx). key and thresh carry 64 unsigned bits in a long
// long.

// mix64 is SplitMix64's finaliser, as model's mix.
__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

extern "C" __global__ void dropout(float* y, const float* x, long long total, long long sz,
                                   long long key, long long first, long long thresh, float scale) {
	KLOOP(idx, total) {
		unsigned long long i = (unsigned long long)(idx / sz);
		unsigned long long j = (unsigned long long)(idx % sz);
		unsigned long long base = (unsigned long long)key +
		                          ((unsigned long long)first + i) * 0x9e3779b97f4a7c15ULL;
		unsigned long long h = mix64(base + j) >> 32;
		y[idx] = h < (unsigned long long)thresh ? 0.0f : x[idx] * scale;
	}
}
