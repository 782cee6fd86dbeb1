// Element-wise layer kernels and column sums: ReLU, bias, residual add,
// and the two-launch column sums of bias gradients.

// relu_fwd: y = max(x, 0).
extern "C" __global__ void relu_fwd(float* y, const float* x, long long n) {
	KLOOP(i, n) {
		float v = x[i];
		y[i] = v > 0.0f ? v : 0.0f;
	}
}

// relu_bwd: dx = dy where y > 0, else 0.
extern "C" __global__ void relu_bwd(float* dx, const float* y, const float* dy, long long n) {
	KLOOP(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

// bias_add: y (m, c) += b (c) on every row.
extern "C" __global__ void bias_add(float* y, const float* b, long long m, int c) {
	KLOOP(i, m * c) y[i] += b[i % c];
}

// add: z = a + b (z may be a or b).
extern "C" __global__ void add(float* z, const float* a, const float* b, long long n) {
	KLOOP(i, n) z[i] = a[i] + b[i];
}

// colsum_part: part (chunks, c) holds, for each chunk of rows consecutive
// rows of the row-major (m, c) matrix x, the sums of its columns, rows in
// order (first of two launches; chunks = ceil(m/rows)).
extern "C" __global__ void colsum_part(float* part, const float* x, long long m, int c, int rows) {
	long long chunks = (m + rows - 1) / rows;
	KLOOP(t, chunks * c) {
		long long k = t / c;
		int j = (int)(t % c);
		long long r1 = (k + 1) * rows < m ? (k + 1) * rows : m;
		double s = 0.0;
		for (long long r = k * rows; r < r1; r++)
			s += (double)x[r * c + j];
		part[t] = (float)s;
	}
}

// colsum_final: y (c) = the sums of the chunks' partial sums, in chunk
// order (second launch).
extern "C" __global__ void colsum_final(float* y, const float* part, int chunks, int c) {
	KLOOP(j, c) {
		double s = 0.0;
		for (int k = 0; k < chunks; k++)
			s += (double)part[(long long)k * c + j];
		y[j] = (float)s;
	}
}

// zero: y[0:n] = 0 (32-bit words).
extern "C" __global__ void zero(float* y, long long n) {
	KLOOP(i, n) y[i] = 0.0f;
}
