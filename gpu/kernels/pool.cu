// Pooling over channels-last (N, H, W, C) samples, k x k windows with
// stride s and no padding: max-pool (with the argmax kh*k + kw of every
// output, an optional per-channel bias added after the maximum and an
// optional ReLU: the fused conv, ReLU, pool of the CPU network), average
// pool, and global average pool. Backward kernels gather: each input
// value sums the outputs that reach it.

extern "C" __global__ void maxpool_fwd(float* y, int* arg, const float* x, const float* bias,
                                       int relu, int n, int h, int w, int c, int k, int s,
                                       int ho, int wo) {
	long long total = (long long)n * ho * wo * c;
	KLOOP(idx, total) {
		long long t = idx;
		int ch = take(&t, c);
		int ow = take(&t, wo);
		int oh = take(&t, ho);
		long long i = t;
		const float* xs = x + i * h * w * c;
		float m = xs[((long long)(oh * s) * w + ow * s) * c + ch];
		int a = 0;
		for (int kh = 0; kh < k; kh++)
			for (int kw = 0; kw < k; kw++) {
				float v = xs[((long long)(oh * s + kh) * w + ow * s + kw) * c + ch];
				if (v > m) {
					m = v;
					a = kh * k + kw;
				}
			}
		if (bias)
			m += bias[ch];
		if (relu && m < 0.0f)
			m = 0.0f;
		y[idx] = m;
		arg[idx] = a;
	}
}

// maxpool_bwd: dx = the sum of dy over the outputs whose maximum came from
// each input; with relu, outputs y cut to zero pass nothing.
extern "C" __global__ void maxpool_bwd(float* dx, const float* dy, const float* y, const int* arg,
                                       int relu, int n, int h, int w, int c, int k, int s,
                                       int ho, int wo) {
	long long total = (long long)n * h * w * c;
	KLOOP(idx, total) {
		long long t = idx;
		int ch = take(&t, c);
		int iw = take(&t, w);
		int ih = take(&t, h);
		long long i = t;
		float sum = 0.0f;
		// Outputs oh with oh*s <= ih < oh*s + k.
		int oh0 = ih >= k ? (ih - k) / s + 1 : 0;
		int ow0 = iw >= k ? (iw - k) / s + 1 : 0;
		for (int oh = oh0; oh < ho && oh * s <= ih; oh++)
			for (int ow = ow0; ow < wo && ow * s <= iw; ow++) {
				long long o = ((i * ho + oh) * wo + ow) * c + ch;
				if (arg[o] != (ih - oh * s) * k + (iw - ow * s))
					continue;
				if (relu && y[o] == 0.0f)
					continue;
				sum += dy[o];
			}
		dx[idx] = sum;
	}
}

extern "C" __global__ void avgpool_fwd(float* y, const float* x, int n, int h, int w, int c,
                                       int k, int s, int ho, int wo) {
	long long total = (long long)n * ho * wo * c;
	float inv = 1.0f / (float)(k * k);
	KLOOP(idx, total) {
		long long t = idx;
		int ch = take(&t, c);
		int ow = take(&t, wo);
		int oh = take(&t, ho);
		long long i = t;
		const float* xs = x + i * h * w * c;
		float sum = 0.0f;
		for (int kh = 0; kh < k; kh++)
			for (int kw = 0; kw < k; kw++)
				sum += xs[((long long)(oh * s + kh) * w + ow * s + kw) * c + ch];
		y[idx] = sum * inv;
	}
}

extern "C" __global__ void avgpool_bwd(float* dx, const float* dy, int n, int h, int w, int c,
                                       int k, int s, int ho, int wo) {
	long long total = (long long)n * h * w * c;
	float inv = 1.0f / (float)(k * k);
	KLOOP(idx, total) {
		long long t = idx;
		int ch = take(&t, c);
		int iw = take(&t, w);
		int ih = take(&t, h);
		long long i = t;
		float sum = 0.0f;
		int oh0 = ih >= k ? (ih - k) / s + 1 : 0;
		int ow0 = iw >= k ? (iw - k) / s + 1 : 0;
		for (int oh = oh0; oh < ho && oh * s <= ih; oh++)
			for (int ow = ow0; ow < wo && ow * s <= iw; ow++)
				sum += dy[((i * ho + oh) * wo + ow) * c + ch] * inv;
		dx[idx] = sum;
	}
}

// gap_fwd: y (n, c) = the mean over the hw positions of each sample's
// channels, x (n, hw, c).
extern "C" __global__ void gap_fwd(float* y, const float* x, int n, int hw, int c) {
	float inv = 1.0f / (float)hw;
	KLOOP(idx, (long long)n * c) {
		long long i = idx / c;
		int ch = (int)(idx % c);
		const float* xs = x + i * hw * c + ch;
		float sum = 0.0f;
		for (int r = 0; r < hw; r++)
			sum += xs[(long long)r * c];
		y[idx] = sum * inv;
	}
}

extern "C" __global__ void gap_bwd(float* dx, const float* dy, int n, int hw, int c) {
	float inv = 1.0f / (float)hw;
	KLOOP(idx, (long long)n * hw * c) {
		long long i = idx / ((long long)hw * c);
		int ch = (int)(idx % c);
		dx[idx] = dy[i * c + ch] * inv;
	}
}
