// Softmax cross-entropy with label smoothing, as the CPU network's Loss
// (hpctrain/model.Net.Loss): one thread per sample computes the softmax of
// its logits in double, its loss (logsumexp minus the target's score,
// smoothed: (1-eps)(lse - z[y]) + eps (lse - mean z)), whether its highest
// score is its label, and the gradient of the scaled mean loss.
//
// res (doubles, as float*): res[i] the loss of sample i, res[n+i] 1 when it
// is classified correctly, else 0.
extern "C" __global__ void softmax_xent(float* dl, float* res_d, const float* z, const int* labels,
                                        int n, int k, double eps, float inv, float off, float on) {
	double* res = (double*)res_d;
	KLOOP(i, n) {
		const float* zr = z + i * k;
		float* p = dl + i * k;
		int y = labels[i];
		float m = zr[0];
		int best = 0;
		for (int j = 1; j < k; j++) {
			if (zr[j] > m)
				m = zr[j];
			if (zr[j] > zr[best])
				best = j;
		}
		double s = 0.0;
		for (int j = 0; j < k; j++) {
			double e = exp((double)(zr[j] - m));
			p[j] = (float)e;
			s += e;
		}
		double is = 1.0 / s;
		for (int j = 0; j < k; j++)
			p[j] = (float)((double)p[j] * is);
		double lse = (double)m + log(s);
		double l = lse - (double)zr[y];
		if (eps != 0.0) {
			double sz = 0.0;
			for (int j = 0; j < k; j++)
				sz += (double)zr[j];
			l = (1.0 - eps) * l + eps * (lse - sz / (double)k);
		}
		res[i] = l;
		res[n + i] = best == y ? 1.0 : 0.0;
		if (eps == 0.0) {
			for (int j = 0; j < k; j++)
				p[j] = p[j] * inv;
			p[y] -= inv;
		} else {
			for (int j = 0; j < k; j++)
				p[j] = p[j] * inv - off;
			p[y] -= on;
		}
	}
}
