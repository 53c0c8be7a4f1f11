/* The gated delta rule of a hybrid model's DeltaNet layers (hybrid_model.py), token by token per
 * sequence and value head, in one fixed order of fp32 operations (internal.h's contract). Per
 * token, with S the head's D x D state (row j: value j's weights over the keys):
 *   S = S * decay;  d_j = (v_j - tree(S[j,:] * k)) * beta;  S[j,:] = S[j,:] + d_j * k;
 *   o_j = tree(S[j,:] * q) * scale
 * where tree sums over the key index as a halving tree of adds, a zero appended to an odd length:
 * hybrid_model._tree_sum's order, so these are the bits of its numpy sequence (a test compares
 * them), whatever the target, the thread count or the chunk. */
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

/* A halving tree over nv (a power of two) vectors, then vf_hsum's own halving over the 16 lanes:
 * element i pairs with i + half at every level, tree_sum's order for D = 16 nv. */
static inline float vf_tree(vf *p, int nv) {
    for (int half = nv / 2; half >= 1; half /= 2)
        for (int a = 0; a < half; a++) p[a] = vf_add(p[a], p[a + half]);
    return vf_hsum(p[0]);
}

#define MAX_VECTORS 16 /* D up to 256 in registers */

/* delta_step for D = 16 nv, nv a power of two: the same operations on the same operand pairs,
 * each row held in registers between its two passes (one load and one store a row). */
static void delta_step_vf(float *st, const float *q, const float *k, const float *v, float decay, float beta,
                          float scale, int nv, float *o) {
    vf kv[MAX_VECTORS], qv[MAX_VECTORS], r[MAX_VECTORS], p[MAX_VECTORS], dec = vf_set1(decay);
    for (int a = 0; a < nv; a++) kv[a] = vf_load(k + a * VL), qv[a] = vf_load(q + a * VL);
    for (int j = 0; j < nv * VL; j++) {
        float *row = st + (int64_t)j * nv * VL;
        for (int a = 0; a < nv; a++) {
            r[a] = vf_mul(vf_load(row + a * VL), dec);
            p[a] = vf_mul(r[a], kv[a]);
        }
        vf d = vf_set1((v[j] - vf_tree(p, nv)) * beta);
        for (int a = 0; a < nv; a++) {
            r[a] = vf_add(r[a], vf_mul(d, kv[a]));
            vf_store(row + a * VL, r[a]);
            p[a] = vf_mul(r[a], qv[a]);
        }
        o[j] = vf_tree(p, nv) * scale;
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
    int64_t tasks = S * HV, work = 0;
    int nv = D / VL, vectors = D % VL == 0 && nv <= MAX_VECTORS && (nv & (nv - 1)) == 0;
    for (int64_t r = 0; r < S; r++) work += (int64_t)counts[r] * HV * D * D;
#pragma omp parallel num_threads(nthreads) if (tasks > 1 && work >= SMALL_WORK)
    {
        float *p = (float *)kernel_malloc((size_t)(D + 1) * 4); /* a tree's products (+ an odd length's zero) */
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < tasks; task++) {
            if (!p) continue; /* out of memory (counted): this thread's share is skipped */
            int64_t r = task / HV, h = task % HV, dd = (int64_t)D * D;
            float *st = states + ((int64_t)slots[r] * HV + h) * dd;
            for (int32_t n = 0; n < counts[r]; n++) {
                int64_t t = (int64_t)starts[r] + n, at = t * HV + h;
                if (vectors)
                    delta_step_vf(st, q + at * D, k + at * D, v + at * D, decay[at], beta[at], scale, D / VL,
                                  core + at * D);
                else
                    delta_step(st, q + at * D, k + at * D, v + at * D, decay[at], beta[at], scale, D, p,
                               core + at * D);
                for (int c = 0; c < n_caps; c++)
                    if (cap_row[c] == r && cap_after[c] == n + 1)
                        memcpy(states + ((int64_t)cap_slot[c] * HV + h) * dd, st, (size_t)dd * 4);
            }
        }
        free(p);
    }
}
