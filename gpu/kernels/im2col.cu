// Convolution's data movement for channels-last (N, H, W, C) samples: im2col
// copies every K x K receptive field (stride S, zero padding P) into a row
// of col, (N*Ho*Wo, K*K*C) in (kh, kw, c) order; col2im is its adjoint, each
// input value gathering its contributions (no atomics).

extern "C" __global__ void im2col(float* col, const float* x, int n, int h, int w, int c,
                                  int k, int s, int p, int ho, int wo) {
	long long total = (long long)n * ho * wo * k * k * c;
	KLOOP(idx, total) {
		long long t = idx;
		int ch = take(&t, c);
		int kw = take(&t, k);
		int kh = take(&t, k);
		int ow = take(&t, wo);
		int oh = take(&t, ho);
		long long i = t;
		int ih = oh * s - p + kh;
		int iw = ow * s - p + kw;
		float v = 0.0f;
		if (ih >= 0 && ih < h && iw >= 0 && iw < w)
			v = x[((i * h + ih) * w + iw) * c + ch];
		col[idx] = v;
	}
}

extern "C" __global__ void col2im(float* dx, const float* col, int n, int h, int w, int c,
                                  int k, int s, int p, int ho, int wo) {
	long long total = (long long)n * h * w * c;
	KLOOP(idx, total) {
		long long t = idx;
		int ch = take(&t, c);
		int iw = take(&t, w);
		int ih = take(&t, h);
		long long i = t;
		float sum = 0.0f;
		for (int kh = 0; kh < k; kh++) {
			int a = ih + p - kh; // = oh*s
			if (a < 0 || a % s != 0 || a / s >= ho)
				continue;
			int oh = a / s;
			for (int kw = 0; kw < k; kw++) {
				int b = iw + p - kw;
				if (b < 0 || b % s != 0 || b / s >= wo)
					continue;
				int ow = b / s;
				sum += col[((((i * ho + oh) * wo + ow) * k + kh) * k + kw) * c + ch];
			}
		}
		dx[idx] = sum;
	}
}
