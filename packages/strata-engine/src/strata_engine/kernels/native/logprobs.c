/*
 * The logprob tail: out[m, :] = (x[m, :] - max) - log(sum(e^(x - max))) for each row, over the
 * full vocabulary. The sum runs over 16-lane chunks in order with Kahan compensation in every
 * lane (so its error does not grow with the vocabulary), then the lanes in double in lane
 * order; log in double.
 */
#include "internal.h"

void strata_log_softmax(const float *x, int64_t M, int64_t N, float *out, int nthreads) { /* out may be x */
#pragma omp parallel for num_threads(nthreads) schedule(static) if (M > 1)
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * N;
        float *yr = out + m * N;
        float mx = max_n(xr, N);
        vf vmx = vf_set1(mx), acc = vf_zero(), comp = vf_zero();
        for (int64_t i = 0; i < N; i += VL) {
            int len = N - i < VL ? (int)(N - i) : VL;
            vf e = vf_exp(vf_sub(vf_load_n(xr + i, len), vmx));
            if (len < VL) { /* padded lanes hold e^(0 - mx): keep them out of the sum */
                float buf[VL] = {0};
                vf_store_n(buf, e, len);
                e = vf_load(buf);
            }
            vf y = vf_sub(e, comp), t = vf_add(acc, y);
            comp = vf_sub(vf_sub(t, acc), y);
            acc = t;
        }
        float sums[VL], comps[VL];
        vf_store(sums, acc);
        vf_store(comps, comp);
        double total = 0.0;
        for (int l = 0; l < VL; l++) total += (double)sums[l] - (double)comps[l];
        vf lse = vf_set1((float)log_d(total));
        for (int64_t i = 0; i < N; i += VL) {
            int len = N - i < VL ? (int)(N - i) : VL;
            vf_store_n(yr + i, vf_sub(vf_sub(vf_load_n(xr + i, len), vmx), lse), len);
        }
        canonical_nans(yr, N);
    }
}
