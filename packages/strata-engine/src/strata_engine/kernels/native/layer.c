/*
 * One dense transformer layer in one call (decode and prefill alike): the same kernels in the
 * same order as model.py's layer loop, so the same bits, without a Python round trip per
 * operation. The weights and switches of a layer are described once at load (strata_layer_desc in
 * strata_kernels.h); each call passes the step's tokens and attention metadata. It calls only the
 * library's exported kernels (and the scratch memory), so it is their composition and nothing else.
 */
#include "internal.h"

/* y_i = h @ W_i^T (+ b_i) for n projections of one input: runs of one limb-packed type in one
 * parallel region (limb_matmul_many), the others one strata_matmul each. The same bits either way. */
static void project(const float *h, int64_t T, int64_t K, int n, const uint8_t *const *w, const int *t, const int64_t *N,
                    const float *const *b, float *const *y, int nthreads) {
    for (int i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && t[j] == t[i] && (t[i] & WT_Q8_PACKED) && WT_LIMBS(t[i]); j++) {}
        if (j - i > 1) limb_matmul_many(h, T, K, j - i, w + i, WT_BASE(t[i]), N + i, b + i, y + i, nthreads, WT_LIMBS(t[i]));
        else strata_matmul(h, T, K, w[i], t[i], N[i], b[i], y[i], nthreads);
    }
}

void strata_layer(const strata_layer_desc *L, float *x, int64_t T, const int32_t *pos, const int32_t *t_seq,
                  const int32_t *tables, int max_blocks, int block_size, const int64_t *slots, void *kc,
                  void *vc, int kv_type, int nthreads) {
    int64_t H = L->hidden, q_dim = L->n_heads * L->head_dim, kv_dim = L->n_kv_heads * L->head_dim;
    int64_t wide = L->ffn > q_dim ? L->ffn : q_dim;
    /* the layer's temporaries: one scratch block, each part a whole number of 16-float vectors */
    int64_t sizes[7] = {T * H, T * q_dim, T * kv_dim, T * kv_dim, T * wide, T * L->ffn, T * L->ffn}, total = 0;
    for (int i = 0; i < 7; i++) sizes[i] = (sizes[i] + 15) / 16 * 16, total += sizes[i];
    float *parts[7], *at = (float *)scratch(SCRATCH_LAYER, (size_t)total * 4);
    if (!at) return; /* out of memory: counted (strata_alloc_failures) */
    for (int i = 0; i < 7; i++) parts[i] = at, at += sizes[i];
    float *h = parts[0], *q = parts[1], *k = parts[2], *v = parts[3], *a = parts[4], *g = parts[5], *u = parts[6];
    int nh = (int)L->n_heads, nkv = (int)L->n_kv_heads, d = (int)L->head_dim;

    strata_rmsnorm(x, T, H, L->attn_norm, L->eps, h, nthreads);
    project(h, T, H, 3, (const uint8_t *[]){L->wq, L->wk, L->wv}, (int[]){L->tq, L->tk, L->tv},
            (int64_t[]){q_dim, kv_dim, kv_dim}, (const float *[]){L->bq, L->bk, L->bv}, (float *[]){q, k, v}, nthreads);
    if (L->q_norm && L->k_norm) { /* per head, in place (a row is read whole before it is written) */
        strata_rmsnorm(q, T * nh, d, L->q_norm, L->eps, q, nthreads);
        strata_rmsnorm(k, T * nkv, d, L->k_norm, L->eps, k, nthreads);
    }
    strata_rope(q, T, nh, d, L->rope_dim, pos, L->rope_cos, L->rope_sin, L->rope_interleaved);
    strata_rope(k, T, nkv, d, L->rope_dim, pos, L->rope_cos, L->rope_sin, L->rope_interleaved);
    strata_kv_write(k, v, T, kv_dim, slots, kc, vc, kv_type, nthreads);
    strata_attention(q, T, nh, nkv, d, kc, vc, kv_type, block_size, tables, max_blocks, t_seq, pos, L->scale, L->softcap,
                     L->window, a, nthreads);
    strata_matmul(a, T, q_dim, L->wo, L->to, H, NULL, h, nthreads);
    if (L->post_attn_norm) strata_rmsnorm(h, T, H, L->post_attn_norm, L->eps, h, nthreads);
    for (int64_t i = 0; i < T * H; i++) x[i] = x[i] + h[i];

    strata_rmsnorm(x, T, H, L->ffn_norm, L->eps, h, nthreads);
    project(h, T, H, 2, (const uint8_t *[]){L->w_gate, L->w_up}, (int[]){L->t_gate, L->t_up}, (int64_t[]){L->ffn, L->ffn},
            (const float *[]){NULL, NULL}, (float *[]){g, u}, nthreads);
    if (L->gelu) strata_gelu_mul(g, u, T * L->ffn, a, nthreads);
    else strata_silu_mul(g, u, T * L->ffn, a, nthreads);
    strata_matmul(a, T, L->ffn, L->w_down, L->t_down, H, NULL, h, nthreads);
    if (L->post_ffn_norm) strata_rmsnorm(h, T, H, L->post_ffn_norm, L->eps, h, nthreads);
    for (int64_t i = 0; i < T * H; i++) x[i] = x[i] + h[i];
}
