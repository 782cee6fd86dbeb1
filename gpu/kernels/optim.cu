// Optimizer updates on device buffers (hpctrain/gpu/cudaoptim): the
// arithmetic of hpctrain/optim's CPU loops, element by element, in double
// precision and rounded to float once per stored value, so that a run on
// the device and one on the CPU stay the same run.
//
// NVRTC contracts a*b+c into a fused multiply-add unless told --fmad=false
// (the backend tells it), and the CPU code never fuses: under NVRTC the
// OPT_* operations below are the round-to-nearest intrinsics, which are
// never fused whatever the options. Under the emulated device they are the
// plain operators of the host compiler (g++ -O2 for x86-64, no FMA).
#ifdef __CUDACC_RTC__
#define OPT_ADD(a, b) __dadd_rn((a), (b))
#define OPT_SUB(a, b) __dadd_rn((a), -(b))
#define OPT_MUL(a, b) __dmul_rn((a), (b))
#define OPT_DIV(a, b) __ddiv_rn((a), (b))
#else
#define OPT_ADD(a, b) ((a) + (b))
#define OPT_SUB(a, b) ((a) - (b))
#define OPT_MUL(a, b) ((a) * (b))
#define OPT_DIV(a, b) ((a) / (b))
#endif

// optim_decay is the weight decay of element i: wd, or 0 when i lies in a
// NoDecay group. groups holds ng ascending group end offsets followed by ng
// flags (1: NoDecay); ng == 0 means every element decays.
__device__ __forceinline__ double optim_decay(const int* groups, int ng, long long i, double wd) {
	if (ng == 0)
		return wd;
	int lo = 0, hi = ng - 1;
	while (lo < hi) { // the first group whose end is past i
		int mid = (lo + hi) / 2;
		if ((long long)groups[mid] > i)
			hi = mid;
		else
			lo = mid + 1;
	}
	return groups[ng + lo] ? 0.0 : wd;
}

// optim_max is Go's max of two float64: NaN when either is NaN.
__device__ __forceinline__ double optim_max(double a, double b) {
	if (a != a || b != b)
		return a + b;
	return a < b ? b : a;
}

// optim_sgd is optim.SGD's step (sgdUpdate with ratio 1). v is null without
// momentum; first is 1 on the first step (v = g), nesterov 1 for Nesterov
// momentum; damp is 1 - dampening.
extern "C" __global__ void optim_sgd(float* p, const float* g, float* v, long long n,
		const int* groups, int ng, double lr, double wd, double m, double damp,
		int nesterov, int first) {
	KLOOP(i, n) {
		double pi = (double)p[i];
		double d = OPT_ADD((double)g[i], OPT_MUL(optim_decay(groups, ng, i, wd), pi));
		if (v) {
			double vi = d;
			if (!first)
				vi = OPT_ADD(OPT_MUL(m, (double)v[i]), OPT_MUL(damp, d));
			v[i] = (float)vi;
			if (nesterov)
				d = OPT_ADD(d, OPT_MUL(m, vi));
			else
				d = vi;
		}
		p[i] = (float)OPT_SUB(pi, OPT_MUL(lr, d));
	}
}

// optim_adam is optim.Adam's and optim.AdamW's step. vmax is null without
// AMSGrad. decoupled is 1 for AdamW (the parameter shrinks by 1 - lr*wd),
// 0 for Adam (wd*theta joins the gradient). step is lr/(1-b1^t) and bc2sqrt
// sqrt(1-b2^t), both computed on the host as the CPU does.
extern "C" __global__ void optim_adam(float* p, const float* g, float* m, float* v, float* vmax,
		long long n, const int* groups, int ng, double lr, double wd, int decoupled,
		double b1, double b2, double eps, double step, double bc2sqrt) {
	KLOOP(i, n) {
		double w = optim_decay(groups, ng, i, wd);
		double l2 = w, shrink = 1.0;
		if (decoupled) {
			l2 = 0.0;
			shrink = OPT_SUB(1.0, OPT_MUL(lr, w));
		}
		double th = (double)p[i];
		double gi = OPT_ADD((double)g[i], OPT_MUL(l2, th));
		double mi = OPT_ADD(OPT_MUL(b1, (double)m[i]), OPT_MUL(OPT_SUB(1.0, b1), gi));
		double vi = OPT_ADD(OPT_MUL(b2, (double)v[i]), OPT_MUL(OPT_MUL(OPT_SUB(1.0, b2), gi), gi));
		m[i] = (float)mi;
		v[i] = (float)vi;
		if (vmax) {
			vi = optim_max(vi, (double)vmax[i]);
			vmax[i] = (float)vi;
		}
		double den = OPT_ADD(OPT_DIV(sqrt(vi), bc2sqrt), eps);
		p[i] = (float)OPT_SUB(OPT_MUL(th, shrink), OPT_DIV(OPT_MUL(step, mi), den));
	}
}
