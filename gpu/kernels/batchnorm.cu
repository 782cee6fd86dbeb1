// Batch normalisation over the channels of a row-major (m, c) matrix (the
// N*H*W positions of a channels-last batch by its C channels), as the CPU
// network computes it (hpctrain/model.BatchNorm): statistics summed in
// double over fixed chunks of rows, then the chunks in order (two
// launches); running statistics updated with the momentum and the
// unbiased variance; coefficients kept per channel so that the passes
// over the data are one multiply-add each.
//
// Buffers of doubles travel as float* and are cast here: part (chunks, 2c),
// red (2c+1: sums of a, sums of a*(b-mu), count), istd (c).

// bn_part: for each chunk of rows consecutive rows and channel j, the sums
// of a and of a*(b - mu[j]) (mu null: 0).
extern "C" __global__ void bn_part(float* part_d, const float* a, const float* b, const float* mu,
                                   long long m, int c, int rows) {
	double* part = (double*)part_d;
	long long chunks = (m + rows - 1) / rows;
	KLOOP(t, chunks * c) {
		long long k = t / c;
		int j = (int)(t % c);
		long long r1 = (k + 1) * rows < m ? (k + 1) * rows : m;
		double mj = mu ? (double)mu[j] : 0.0;
		double sa = 0.0, sab = 0.0;
		for (long long r = k * rows; r < r1; r++) {
			double av = (double)a[r * c + j];
			sa += av;
			sab += av * ((double)b[r * c + j] - mj);
		}
		part[k * 2 * c + j] = sa;
		part[k * 2 * c + c + j] = sab;
	}
}

// bn_total: red[0:2c] = the chunks' sums in chunk order; red[2c] = count.
extern "C" __global__ void bn_total(float* red_d, const float* part_d, int chunks, int c, double count) {
	double* red = (double*)red_d;
	const double* part = (const double*)part_d;
	KLOOP(j, 2 * c) {
		double s = 0.0;
		for (int k = 0; k < chunks; k++)
			s += part[(long long)k * 2 * c + j];
		red[j] = s;
		if (j == 0)
			red[2 * c] = count;
	}
}

// bn_stats_train: the batch's mean and 1/std from red, the running
// statistics' update, and the forward coefficients y = (x-mean)*s + t.
extern "C" __global__ void bn_stats_train(float* mean, float* istd_d, float* s, float* t,
                                          float* rmean, float* rvar, const float* red_d,
                                          const float* gamma, const float* beta, int c,
                                          double momentum, double eps) {
	double* istd = (double*)istd_d;
	const double* red = (const double*)red_d;
	KLOOP(j, c) {
		double m = red[2 * c];
		double mu = red[j] / m;
		double v = red[c + j] / m - mu * mu;
		if (!(v > 0.0))
			v = 0.0;
		mean[j] = (float)mu;
		istd[j] = 1.0 / sqrt(v + eps);
		double unbiased = m > 1.0 ? v * m / (m - 1.0) : v;
		rmean[j] = (float)((1.0 - momentum) * (double)rmean[j] + momentum * mu);
		rvar[j] = (float)((1.0 - momentum) * (double)rvar[j] + momentum * unbiased);
		s[j] = (float)((double)gamma[j] * istd[j]);
		t[j] = beta[j];
	}
}

// bn_stats_eval: the forward coefficients from the running statistics.
extern "C" __global__ void bn_stats_eval(float* mean, float* istd_d, float* s, float* t,
                                         const float* rmean, const float* rvar,
                                         const float* gamma, const float* beta, int c, double eps) {
	double* istd = (double*)istd_d;
	KLOOP(j, c) {
		mean[j] = rmean[j];
		istd[j] = 1.0 / sqrt((double)rvar[j] + eps);
		s[j] = (float)((double)gamma[j] * istd[j]);
		t[j] = beta[j];
	}
}

// bn_norm: y = (x - mean)*s + t.
extern "C" __global__ void bn_norm(float* y, const float* x, long long m, int c, const float* mean,
                                   const float* s, const float* t) {
	KLOOP(i, m * c) {
		int j = (int)(i % c);
		y[i] = (x[i] - mean[j]) * s[j] + t[j];
	}
}

// bn_grads: dbeta = sum dy, dgamma = sum dy*(x-mean) / std, from the
// replica's own sums red (before any reduction over replicas).
extern "C" __global__ void bn_grads(float* dgamma, float* dbeta, const float* red_d,
                                    const float* istd_d, int c) {
	const double* red = (const double*)red_d;
	const double* istd = (const double*)istd_d;
	KLOOP(j, c) {
		dbeta[j] = (float)red[j];
		dgamma[j] = (float)(red[c + j] * istd[j]);
	}
}

// bn_coef: backward's dx = a*dy + b*(x-mean) + k. In training (batch
// statistics) from the sums red (reduced over replicas when synchronised)
// and the forward's count fred[2c]; in evaluation mean and std are
// constants: a = gamma/std, b = k = 0.
extern "C" __global__ void bn_coef(float* a, float* b, float* k, const float* red_d,
                                   const float* fred_d, const float* istd_d, const float* gamma,
                                   int c, int train) {
	const double* red = (const double*)red_d;
	const double* istd = (const double*)istd_d;
	const double* fred = (const double*)fred_d;
	KLOOP(j, c) {
		double g = (double)gamma[j] * istd[j];
		a[j] = (float)g;
		if (!train) {
			b[j] = 0.0f;
			k[j] = 0.0f;
			continue;
		}
		double m = fred[2 * c];
		double dbeta = red[j], dgamma = red[c + j] * istd[j];
		b[j] = (float)(-g * istd[j] * dgamma / m);
		k[j] = (float)(-g * dbeta / m);
	}
}

// bn_bwd: dx = a*dy + b*(x - mean) + k.
extern "C" __global__ void bn_bwd(float* dx, const float* dy, const float* x, long long m, int c,
                                  const float* mean, const float* a, const float* b, const float* k) {
	KLOOP(i, m * c) {
		int j = (int)(i % c);
		dx[i] = a[j] * dy[i] + b[j] * (x[i] - mean[j]) + k[j];
	}
}
