/* The gated delta rule of a hybrid model's DeltaNet layers (hybrid_model.py), token by token per
 * sequence and value head, in one fixed order of fp32 operations (internal.h's contract). Per
 * token, with S the head's D x D state (row j: value j's weights over the keys):
 *   S = S * decay;  d_j = (v_j - tree(S[j,:] * k)) * beta;  S[j,:] = S[j,:] + d_j * k;
 *   o_j = tree(S[j,:] * q) * scale
 * where tree sums over the key index as a halving tree of adds, a zero appended to an odd length:
 * hybrid_model._tree_sum's order, so these are the bits of its numpy sequence (a test compares
 * them), whatever the target, the thread count or the chunk. strata_delta_net runs a whole
 * DeltaNet layer between its matmuls around it (hybrid_model.delta_net_steps' operations: the
 * convolution, SiLU, the L2 norms, exactmath's float64 gates, the gated RMSNorm). */
#include "internal.h"

static float tree_sum(float *p, int n) {
    while (n > 1) {
        if (n & 1) p[n++] = 0.0f;
        int half = n / 2;
        for (int i = 0; i < half; i++) p[i] = p[i] + p[i + half];
        n = half;
    }
    return p[0];
}

/* One token on one head's state st: o = its output row (D values). */
static void delta_step(float *st, const float *q, const float *k, const float *v, float decay, float beta,
                       float scale, int D, float *p, float *o) {
    for (int j = 0; j < D; j++) { /* each element's operations in the order above, two passes a row */
        float *row = st + (int64_t)j * D;
        for (int i = 0; i < D; i++) {
            row[i] = row[i] * decay;
            p[i] = row[i] * k[i];
        }
        float d = (v[j] - tree_sum(p, D)) * beta;
        for (int i = 0; i < D; i++) {
            row[i] = row[i] + d * k[i];
            p[i] = row[i] * q[i];
        }
        o[j] = tree_sum(p, D) * scale;
    }
}

/* A halving tree over nv (a power of two) vectors to one: element i pairs with i + half at every
 * level; vf_hsum (or vf_hsum4: the same pairs) then halves the 16 lanes, tree_sum's order for
 * D = 16 nv. */
static inline vf vf_tree(vf *p, int nv) {
    for (int half = nv / 2; half >= 1; half /= 2)
        for (int a = 0; a < half; a++) p[a] = vf_add(p[a], p[a + half]);
    return p[0];
}

#define MAX_VECTORS 16 /* D up to 256 */

/* delta_step for D = 16 nv, nv a power of two: the same operations on the same operand pairs,
 * four rows at a time (four independent chains for the core to overlap, their lanes summed by
 * one vf_hsum4), k and q held in registers. Inlined with nv constant where it is called so:
 * with nv a variable the products p[] and the tree lived on the stack, each add waiting on a
 * store and a load (the loop ran at half the speed). */
static inline __attribute__((always_inline)) void delta_step_vf(float *st, const float *q, const float *k,
                                                                const float *v, float decay, float beta,
                                                                float scale, int nv, float *o) {
    vf kv[MAX_VECTORS], qv[MAX_VECTORS], p[MAX_VECTORS], dec = vf_set1(decay), part[4];
    int64_t D = (int64_t)nv * VL;
    float sum[4], d[4];
    for (int a = 0; a < nv; a++) kv[a] = vf_load(k + a * VL), qv[a] = vf_load(q + a * VL);
    for (int64_t j = 0; j < D; j += 4) {
        for (int x = 0; x < 4; x++) {
            float *row = st + (j + x) * D;
            for (int a = 0; a < nv; a++) {
                vf r = vf_mul(vf_load(row + a * VL), dec);
                vf_store(row + a * VL, r);
                p[a] = vf_mul(r, kv[a]);
            }
            part[x] = vf_tree(p, nv);
        }
        vf_hsum4(part[0], part[1], part[2], part[3], sum);
        for (int x = 0; x < 4; x++) d[x] = (v[j + x] - sum[x]) * beta;
        for (int x = 0; x < 4; x++) {
            float *row = st + (j + x) * D;
            vf dx = vf_set1(d[x]);
            for (int a = 0; a < nv; a++) {
                vf r = vf_add(vf_load(row + a * VL), vf_mul(dx, kv[a]));
                vf_store(row + a * VL, r);
                p[a] = vf_mul(r, qv[a]);
            }
            part[x] = vf_tree(p, nv);
        }
        vf_hsum4(part[0], part[1], part[2], part[3], sum);
        for (int x = 0; x < 4; x++) o[j + x] = sum[x] * scale;
    }
}

/* Rows r = 0 .. S-1 through their tokens, (row, head) pairs in parallel, each its tokens in order
 * (strata_delta_rule states the arrays). Token t's q, k of value head h start at q, k + t qs +
 * kh[h] D (kh NULL: h), its v at v + t vs + h D, its output at core + t cs + h D. */
static void delta_rows(float *states, const int32_t *slots, int64_t S, const int32_t *starts, const int32_t *counts,
                       const float *q, const float *k, int64_t qs, const int32_t *kh, const float *v, int64_t vs,
                       const float *decay, const float *beta, int HV, int D, float scale, float *core, int64_t cs,
                       const int32_t *cap_row, const int32_t *cap_after, const int32_t *cap_slot, int n_caps,
                       int nthreads) {
    int64_t tasks = S * HV, work = 0;
    int nv = D / VL, vectors = D % VL == 0 && nv <= MAX_VECTORS && (nv & (nv - 1)) == 0;
    for (int64_t r = 0; r < S; r++) work += (int64_t)counts[r] * HV * D * D;
#pragma omp parallel num_threads(nthreads) if (tasks > 1 && work >= SMALL_WORK)
    {
        float *p = (float *)kernel_malloc((size_t)(D + 1) * 4); /* a tree's products (+ an odd length's zero) */
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < tasks; task++) {
            if (!p) continue; /* out of memory (counted): this thread's share is skipped */
            int64_t r = task / HV, h = task % HV, dd = (int64_t)D * D, g = kh ? kh[h] : h;
            float *st = states + ((int64_t)slots[r] * HV + h) * dd;
            for (int32_t n = 0; n < counts[r]; n++) {
                int64_t t = (int64_t)starts[r] + n, at = t * HV + h;
                const float *qt = q + t * qs + g * D, *kt = k + t * qs + g * D, *vt = v + t * vs + h * D;
                float *o = core + t * cs + h * D;
                if (vectors && nv == 8) /* D = 128: Qwen3.5's and Qwen3-Next's heads */
                    delta_step_vf(st, qt, kt, vt, decay[at], beta[at], scale, 8, o);
                else if (vectors)
                    delta_step_vf(st, qt, kt, vt, decay[at], beta[at], scale, nv, o);
                else
                    delta_step(st, qt, kt, vt, decay[at], beta[at], scale, D, p, o);
                for (int c = 0; c < n_caps; c++)
                    if (cap_row[c] == r && cap_after[c] == n + 1)
                        memcpy(states + ((int64_t)cap_slot[c] * HV + h) * dd, st, (size_t)dd * 4);
            }
        }
        free(p);
    }
}

/*
 * Rows r = 0 .. S-1 (sequences) each advance state slot slots[r] by tokens starts[r] ..
 * starts[r] + counts[r] - 1 of q, k, v [T, HV, D], decay and beta [T, HV]; core [T, HV, D] gets
 * the outputs. states: [slots, HV, D, D]. After cap_after[c] tokens of row cap_row[c], that row's
 * state is copied to slot cap_slot[c] (the prefix cache's snapshots). (row, head) pairs run in
 * parallel, each its tokens in order.
 */
void strata_delta_rule(float *states, const int32_t *slots, int64_t S, const int32_t *starts, const int32_t *counts,
                       const float *q, const float *k, const float *v, const float *decay, const float *beta,
                       int HV, int D, float scale, float *core, const int32_t *cap_row, const int32_t *cap_after,
                       const int32_t *cap_slot, int n_caps, int nthreads) {
    int64_t row = (int64_t)HV * D;
    delta_rows(states, slots, S, starts, counts, q, k, row, NULL, v, row, decay, beta, HV, D, scale, core, row,
               cap_row, cap_after, cap_slot, n_caps, nthreads);
}

/* ---- one DeltaNet layer between its input matmuls and ssm_out (strata_delta_net) ------------ */

static const double LN2_HI = 6.93147180369123816490e-01, LN2_LO = 1.90821492927058770002e-10,
                    INV_LN2 = 1.44269504088896338700e00;

/* exactmath.exp: e^x in float64 from +, -, *, rint and ldexp (exact or correctly rounded by IEEE
 * 754), Taylor to r^13 in Horner form; NaN stays NaN, above 709.7 inf, below -745 zero. */
static double exact_exp(double x) {
    static const double factorial[14] = {6227020800.0, 479001600.0, 39916800.0, 3628800.0, 362880.0, 40320.0, 5040.0,
                                         720.0,        120.0,       24.0,       6.0,       2.0,      1.0,     1.0};
    if (x != x) return x;
    if (x > 709.7) return INFINITY;
    if (x < -745.0) return 0.0;
    double k = rint(x * INV_LN2);
    double r = (x - k * LN2_HI) - k * LN2_LO, p = 1.0 / factorial[0];
    for (int i = 1; i < 14; i++) p = p * r + 1.0 / factorial[i];
    /* p (about 0.7 to 1.4) times 2^k, a power of two built from its bits where the product is a
     * normal number: exact, so ldexp's value, without its libm call (scalbn was a third of the
     * gated attention's time); ldexp itself at the edges (a subnormal rounds, a large k overflows) */
    if (k < -1020.0 || k > 1022.0) return ldexp(p, (int)k);
    uint64_t bits = (uint64_t)((int64_t)k + 1023) << 52;
    double two_k;
    memcpy(&two_k, &bits, 8);
    return p * two_k;
}

/* exactmath.log: 2 atanh((m-1)/(m+1)) by its series to f^22, m from frexp in [sqrt(1/2), sqrt(2));
 * 0 gives -inf, a negative number or NaN the quiet NaN. */
static double exact_log(double x) {
    if (!(x > 0.0)) return x == 0.0 ? -INFINITY : (double)NAN;
    int e;
    double m = frexp(x, &e);
    if (m < 0.7071067811865476) m = m * 2.0, e = e - 1;
    double f = (m - 1.0) / (m + 1.0), s = f * f, series = 1.0 / 23.0;
    for (int n = 21; n >= 1; n -= 2) series = series * s + 1.0 / (double)n;
    double ed = (double)e;
    return ed * LN2_HI + (ed * LN2_LO + 2.0 * f * series);
}

/* exactmath.sigmoid: 1 / (1 + e^-g). A NaN gives -g, as numpy's steps do (a negated NaN through
 * exp, the add and the divide), written out: the compiler may turn 1 + (-x) into 1 - x, whose
 * NaN keeps x's sign. */
static double exact_sigmoid(double g) {
    if (g != g) {
        uint64_t bits;
        memcpy(&bits, &g, 8);
        bits ^= (uint64_t)1 << 63;
        memcpy(&g, &bits, 8);
        return g;
    }
    return 1.0 / (1.0 + exact_exp(-g));
}

/* hybrid_model.gates for one value head: beta = sigmoid(b), decay = e^(softplus(alpha) a), each
 * float64 step of the numpy code, rounded to fp32 where it rounds. */
static void gate_pair(float b, float alpha, float a, float *beta, float *decay) {
    double b64 = (double)b, x64 = (double)alpha;
    double ex = exact_exp(x64 != x64 ? x64 : x64 < 20.0 ? x64 : 20.0);
    *beta = (float)exact_sigmoid(b64);
    float sp = (float)(x64 > 20.0 ? x64 : x64 < -20.0 ? ex : exact_log(1.0 + ex));
    *decay = (float)exact_exp((double)(sp * a));
}

/* hybrid_model's gated attention: x * fp32(1 / (1 + e^-gate)), the sigmoid in float64. */
void strata_sigmoid_gate(const float *x, const float *gate, int64_t n, float *out, int nthreads) {
#pragma omp parallel for num_threads(nthreads) schedule(static) if (n >= SMALL_WORK)
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * (float)exact_sigmoid((double)gate[i]);
}

/* hybrid_model._tree_sum in float64: a halving tree, a zero appended to an odd length. */
static double tree_sum_d(double *p, int n) {
    while (n > 1) {
        if (n & 1) p[n++] = 0.0;
        int half = n / 2;
        for (int i = 0; i < half; i++) p[i] = p[i] + p[i + half];
        n = half;
    }
    return p[0];
}

/* hybrid_model.l2_normalize of one head's D values in place: x * fp32(1 / max(|x|, eps)), the sum
 * of squares in float64 by the tree (max keeps a NaN norm, as numpy's maximum). */
static void l2_normalize(float *x, int D, double eps, double *p) {
    for (int i = 0; i < D; i++) p[i] = (double)x[i] * (double)x[i];
    double norm = sqrt(tree_sum_d(p, D));
    float s = (float)(1.0 / (norm != norm || norm > eps ? norm : eps));
    for (int i = 0; i < D; i++) x[i] = x[i] * s;
}

/* elementwise.c's silu: g / (1 + e^-g) */
static inline vf silu_vf(vf g) { return vf_div(g, vf_add(vf_set1(1.0f), vf_exp(vf_sub(vf_set1(0.0f), g)))); }

/*
 * A DeltaNet layer's steps from its matmuls' outputs to ssm_out's input, in hybrid_model's order
 * (delta_net_steps; each step the same operations as its numpy or Ops call there):
 * per sequence r (state slot slots[r], tokens starts[r] .. + counts[r]) the short convolution of
 * qkv [T, C] (C = 2 NK D + HV D) with taps [d_conv, C] over its window [slots, d_conv - 1, C]
 * (the window after cap_after tokens copied to slot cap_slot for row cap_row: the prefix cache's
 * snapshots), SiLU; each q and k head L2-normalised (eps: its float64 bits); beta and decay from
 * b and alpha + dt_bias [T, HV] and ssm_a; the recurrence (value head h reads key head kh[h]);
 * then out [T, HV D] = silu(z) * rmsnorm(core, norm_w, eps).
 */
void strata_delta_net(const float *qkv, const float *z, const float *b, const float *alpha, int64_t T,
                      const float *taps, int d_conv, float *windows, float *states, const int32_t *slots, int64_t S,
                      const int32_t *starts, const int32_t *counts, const int32_t *cap_row, const int32_t *cap_after,
                      const int32_t *cap_slot, int n_caps, const float *dt_bias, const float *ssm_a,
                      const float *norm_w, const int32_t *kh, int NK, int HV, int D, const int64_t *l2_eps_bits,
                      float eps, float scale, float *out, int nthreads) {
    int64_t kd = (int64_t)NK * D, C = 2 * kd + (int64_t)HV * D, keep = d_conv - 1;
    double l2_eps;
    memcpy(&l2_eps, l2_eps_bits, 8);
    /* the convolved [q | k | v] per token, then beta and decay: one block (layer.c's slot: a
     * hybrid model never runs the fused dense layer) */
    float *conv = (float *)scratch(SCRATCH_LAYER, (size_t)(T * C + 2 * T * HV) * 4);
    if (!conv) return; /* counted: the caller raises */
    float *beta = conv + T * C, *decay = beta + T * HV;
    int big = T * C >= SMALL_WORK;
#pragma omp parallel num_threads(nthreads) if (big)
    {
        double *p = (double *)kernel_malloc((size_t)(D + 1) * 8);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < T; t++) { /* each token its own values, whichever thread */
            int64_t r = 0;
            while (r + 1 < S && t >= starts[r + 1]) r++; /* the rows' tokens are consecutive, in order */
            int64_t n = t - starts[r];
            const float *win = windows + (int64_t)slots[r] * keep * C;
            float *y = conv + t * C;
            for (int j = 0; j < d_conv; j++) { /* window row n + j: the old window's, then the tokens' */
                int64_t w = n + j;
                const float *x = w < keep ? win + w * C : qkv + (t - n + w - keep) * C;
                const float *tap = taps + (int64_t)j * C;
                if (j == 0)
                    for (int64_t c = 0; c < C; c++) y[c] = x[c] * tap[c];
                else
                    for (int64_t c = 0; c < C; c++) y[c] = y[c] + x[c] * tap[c];
            }
            for (int64_t c = 0; c < C; c += VL) { /* silu_mul(conv, 1) */
                int len = C - c < VL ? (int)(C - c) : VL;
                vf_store_n(y + c, vf_mul(silu_vf(vf_load_n(y + c, len)), vf_set1(1.0f)), len);
            }
            for (int g = 0; g < 2 * NK; g++)
                if (p) l2_normalize(y + (int64_t)g * D, D, l2_eps, p);
            for (int h = 0; h < HV; h++)
                gate_pair(b[t * HV + h], alpha[t * HV + h] + dt_bias[h], ssm_a[h], beta + t * HV + h,
                          decay + t * HV + h);
        }
        free(p);
    }
    /* each row's window after its captures and after its last token: window row w of the step is
     * the old window's row w (w < keep), else token w - keep */
    for (int64_t r = 0; r < S; r++) {
        float *win = windows + (int64_t)slots[r] * keep * C;
        const float *tok = qkv + (int64_t)starts[r] * C;
        for (int c = 0; c < n_caps; c++) {
            if (cap_row[c] != r) continue;
            float *snap = windows + (int64_t)cap_slot[c] * keep * C;
            for (int64_t i = 0; i < keep; i++) {
                int64_t w = cap_after[c] + i;
                memcpy(snap + i * C, w < keep ? win + w * C : tok + (w - keep) * C, (size_t)C * 4);
            }
        }
        for (int64_t i = 0; i < keep; i++) { /* ascending: row i reads row counts + i >= i */
            int64_t w = counts[r] + i;
            memmove(win + i * C, w < keep ? win + w * C : tok + (w - keep) * C, (size_t)C * 4);
        }
    }
    delta_rows(states, slots, S, starts, counts, conv, conv + kd, C, kh, conv + 2 * kd, C, decay, beta, HV, D, scale,
               out, (int64_t)HV * D, cap_row, cap_after, cap_slot, n_caps, nthreads);
    /* rmsnorm of each head's outputs (strata_rmsnorm's steps), times silu(z) (strata_silu_mul's) */
    int64_t rows = T * HV;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (rows * D >= SMALL_WORK)
    for (int64_t m = 0; m < rows; m++) {
        float *o = out + m * D;
        const float *g = z + m * D;
        vf rs = vf_set1(1.0f / sqrtf(dot_1(o, o, D) / (float)D + eps));
        for (int64_t i = 0; i < D; i += VL) {
            int len = D - i < VL ? (int)(D - i) : VL;
            vf normed = vf_mul(vf_mul(vf_load_n(o + i, len), rs), vf_load_n(norm_w + i, len));
            vf_store_n(o + i, vf_mul(silu_vf(vf_load_n(g + i, len)), normed), len);
        }
        /* where a NaN gate meets a NaN row, x86 keeps one operand's NaN and the compiler picks
         * which (a product commutes for it): C's NAN instead, the same bits on every target */
        canonical_nans(o, D);
    }
}
