/* The kernels on one row or one element at a time: RMSNorm, RoPE, the gated activations
 * (SwiGLU, GeGLU), logit soft-capping and e^x (internal.h states the contract they keep). */
#include "internal.h"

/* RMSNorm per row: (x * (1 / sqrt(mean(x^2) + eps))) * weight. */
void strata_rmsnorm(const float *x, int64_t M, int64_t K, const float *weight, float eps, float *y, int nthreads) {
#pragma omp parallel for num_threads(nthreads) schedule(static) if (M * K >= SMALL_WORK)
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * K;
        float *yr = y + m * K;
        vf r = vf_set1(1.0f / sqrtf(dot_1(xr, xr, K) / (float)K + eps));
        for (int64_t k = 0; k < K; k += VL) {
            int n = K - k < VL ? (int)(K - k) : VL;
            vf_store_n(yr + k, vf_mul(vf_mul(vf_load_n(xr + k, n), r), vf_load_n(weight + k, n)), n);
        }
    }
}

/*
 * RoPE in place on x[T, H, D] (first `rot` dims). cos/sin: [ctx, rot/2] tables per absolute
 * position. interleaved=1 pairs (2i, 2i+1) (llama GGUFs); 0 pairs (i, i+rot/2) (NeoX/qwen).
 * Each element is a*c - b*s or a*s + b*c with separately rounded products.
 */
void strata_rope(float *x, int64_t T, int H, int D, int rot, const int32_t *pos, const float *cos_t,
                 const float *sin_t, int interleaved) {
    int half = rot / 2;
    for (int64_t t = 0; t < T; t++) {
        const float *c = cos_t + (int64_t)pos[t] * half, *s = sin_t + (int64_t)pos[t] * half;
        for (int h = 0; h < H; h++) {
            float *v = x + (t * H + h) * D;
            for (int i = 0; i < half; i++) {
                int ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + half;
                float a = v[ia], b = v[ib];
                float ac = a * c[i], bs = b * s[i], as = a * s[i], bc = b * c[i];
                v[ia] = ac - bs;
                v[ib] = as + bc;
            }
        }
    }
}

/* e^x elementwise (exposed for tests: the accuracy of vf_exp against float64). */
void strata_exp(const float *x, int64_t n, float *out) {
    for (int64_t i = 0; i < n; i += VL) {
        int len = n - i < VL ? (int)(n - i) : VL;
        vf_store_n(out + i, vf_exp(vf_load_n(x + i, len)), len);
    }
}

/* silu(g) = g / (1 + e^-g) */
static inline vf silu(vf g) { return vf_div(g, vf_add(vf_set1(1.0f), vf_exp(vf_sub(vf_set1(0.0f), g)))); }

/*
 * GELU's tanh approximation (Gemma's GeGLU): gelu(g) = g/2 (1 + tanh(u)),
 * u = sqrt(2/pi) (g + 0.044715 g^3), evaluated as the identical g / (1 + e^(-2u)) (no
 * cancellation near g = 0, no libm): one fixed sequence per element.
 */
static inline vf gelu_tanh(vf g) {
    vf inner = vf_fma(vf_mul(g, g), vf_set1(0.044715f), vf_set1(1.0f)); /* 1 + 0.044715 g^2 */
    vf z = vf_mul(vf_mul(g, inner), vf_set1(-1.5957691216057308f));    /* -2u = -2 sqrt(2/pi) g (...) */
    return vf_div(g, vf_add(vf_set1(1.0f), vf_exp(z)));
}

/* out = act(gate) * up, elementwise; act is SiLU (SwiGLU) or GELU-tanh (GeGLU). */
static void gated_mul(const float *gate, const float *up, int64_t n, float *out, int nthreads, int gelu) {
    int64_t chunks = (n + VL - 1) / VL;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (n >= SMALL_WORK)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t i = c * VL;
        int len = n - i < VL ? (int)(n - i) : VL;
        vf g = vf_load_n(gate + i, len);
        vf_store_n(out + i, vf_mul(gelu ? gelu_tanh(g) : silu(g), vf_load_n(up + i, len)), len);
    }
}

void strata_silu_mul(const float *gate, const float *up, int64_t n, float *out, int nthreads) {
    gated_mul(gate, up, n, out, nthreads, 0);
}

void strata_gelu_mul(const float *gate, const float *up, int64_t n, float *out, int nthreads) {
    gated_mul(gate, up, n, out, nthreads, 1);
}

/* Logit soft-capping (Gemma 2): out = cap * tanh(x / cap), elementwise (x / cap correctly rounded). */
void strata_softcap(const float *x, int64_t n, float cap, float *out) {
    vf c = vf_set1(cap);
    for (int64_t i = 0; i < n; i += VL) {
        int len = n - i < VL ? (int)(n - i) : VL;
        vf_store_n(out + i, vf_mul(c, vf_tanh(vf_div(vf_load_n(x + i, len), c))), len);
    }
}

/* gpt-oss's clamped SwiGLU (ggml_swiglu_oai): x = min(gate, limit), y = clamp(up, -limit, limit),
 * out = x / (1 + e^(-(alpha x))) * (y + 1), each step one correctly rounded fp32 operation in
 * ggml's order (alpha * -x is -(alpha * x) exactly), vf_exp for expf. */
void strata_swiglu_oai(const float *gate, const float *up, int64_t n, float alpha, float limit, float *out,
                       int nthreads) {
    int64_t chunks = (n + VL - 1) / VL;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (n >= SMALL_WORK)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t i = c * VL;
        int len = n - i < VL ? (int)(n - i) : VL;
        vf x = vf_min(vf_load_n(gate + i, len), vf_set1(limit));
        vf y = vf_max(vf_min(vf_load_n(up + i, len), vf_set1(limit)), vf_set1(-limit));
        vf e = vf_exp(vf_sub(vf_set1(0.0f), vf_mul(vf_set1(alpha), x)));
        vf glu = vf_div(x, vf_add(vf_set1(1.0f), e));
        vf_store_n(out + i, vf_mul(glu, vf_add(y, vf_set1(1.0f))), len);
    }
}
