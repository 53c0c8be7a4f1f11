/* The opt-in 8-bit-activation kernels ("native-q8"): weights repacked at load, activations
 * quantised per call, integer dot products (q8.h states the layout, the steps and the contract). */
#include "q8.h"

int strata_q8_supported(int wtype) {
    return wtype_reads(wtype, READS_Q8);
}

int64_t strata_q8_packed_bytes(int wtype, int64_t N, int64_t K) {
    return (N + Q8_GROUP - 1) / Q8_GROUP * q8_group_bytes(wtype, K / 32);
}

/* The quant bytes of one output o of a packed block (see the top): 4-bit types 4 rows of 4 bytes,
 * the others 8. A 4-bit block's byte k already holds w(k) | w(16 + k) << 4 in the kernels'
 * layout (Q4_0's offset 8 is its own stored nibble), so those bytes are copied as they are. */
static void q8_block_bytes_of(int t, const uint8_t *row, int64_t b, int o, uint8_t *qs) {
    if (t == WT_Q2_K) { /* block b % 8 is 2-bit field b % 4 of the stored bytes 32 ((b % 8) / 4) .. + 31:
                         * element 16h + 4r + c into bits 2r, 2r + 1 of byte 4o + c of half h's 64 */
        int j = (int)(b & 7), shift = 2 * (j & 3);
        const uint8_t *src = row + (b >> 3) * block_bytes(WT_Q2_K) + 16 + 32 * (j >> 2);
        for (int h = 0; h < 2; h++)
            for (int c = 0; c < 4; c++) {
                int byte = 0;
                for (int r = 0; r < 4; r++) byte |= ((src[16 * h + 4 * r + c] >> shift) & 3) << (2 * r);
                qs[64 * h + 4 * o + c] = (uint8_t)byte;
            }
        return;
    }
    if (q8_nibbles(t)) { /* Q4_0, Q4_1: after their scale fields (scale_head: widened or as stored) */
        const uint8_t *src = t == WT_Q4_K ? row + (b >> 3) * block_bytes(WT_Q4_K) + 24 + (b & 7) * 16
                          : wtype_codebook(t) ? codebook_qs(t, row, b) /* after its scale (IQ4_XS held: at 8 + 16 j) */
                                              : row + b * group32_bytes(t) + scale_head(t);
        for (int r = 0; r < 4; r++) memcpy(qs + r * 64 + 4 * o, src + 4 * r, 4);
        return;
    }
    if (wtype_code(t) == WT_Q8_0) { /* q + 128 is the stored byte with its top bit flipped */
        for (int r = 0; r < 8; r++) {
            uint32_t word;
            memcpy(&word, row + b * block_bytes(t) + scale_head(t) + 4 * r, 4);
            word ^= 0x80808080u;
            memcpy(qs + r * 64 + 4 * o, &word, 4);
        }
        return;
    }
    if (q8_five(t)) { /* 5 bits: the nibbles as they are, then the fifth bits: bit r of byte 4o+c is
                       * w(o, 4r+c)'s, bit 4 + r w(o, 16+4r+c)'s (the kernels' word: bit i, element i;
                       * Q5_0's block: d (f32 widened, f16 as stored), that word, then its nibbles,
                       * the stored q = w + 16; Q5_1's: d, m, that word, its nibbles, q unsigned) */
        const uint8_t *blk = row + (b >> 3) * block_bytes(WT_Q5_K), *h = blk + block_bytes(WT_Q4_K) + (b & 7) * 4;
        const uint8_t *nib = blk + 24 + (b & 7) * 16;
        if (wtype_code(t) == WT_Q5_0 || wtype_code(t) == WT_Q5_1) /* after d (m): scale_head's bytes */
            blk = row + b * block_bytes(t), h = blk + scale_head(t), nib = h + 4;
        uint32_t bits = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
        for (int r = 0; r < 4; r++) memcpy(qs + r * 64 + 4 * o, nib + 4 * r, 4);
        for (int c = 0; c < 4; c++) {
            int high = 0;
            for (int r = 0; r < 4; r++) high |= (int)((bits >> (4 * r + c)) & 1u) << r | (int)((bits >> (16 + 4 * r + c)) & 1u) << (4 + r);
            qs[256 + 4 * o + c] = (uint8_t)high;
        }
        return;
    }
    /* Q6_K: its int8 quant q plus 32 in 6 bits: the low nibbles as a 4-bit block's, then the high 2 bits */
    const int8_t *q = (const int8_t *)(row + (b >> 3) * block_bytes(WT_Q6_K) + 20 + (b & 7) * 32);
    for (int c = 0; c < 4; c++) {
        int high[2] = {0, 0};
        for (int r = 0; r < 4; r++) {
            int lo = q[4 * r + c] + 32, hi = q[16 + 4 * r + c] + 32; /* 0..63 */
            qs[r * 64 + 4 * o + c] = (uint8_t)((lo & 15) | (hi & 15) << 4);
            high[0] |= (lo >> 4) << (2 * r), high[1] |= (hi >> 4) << (2 * r);
        }
        qs[256 + 4 * o + c] = (uint8_t)high[0], qs[320 + 4 * o + c] = (uint8_t)high[1];
    }
}

/* Repack a [N, K] weight in the kernels' block layout into the q8 layout (see the top). */
void strata_q8_pack(int wtype, const uint8_t *w, int64_t N, int64_t K, uint8_t *out, int nthreads) {
    int64_t rb = row_bytes(wtype, K), nb = K / 32, groups = (N + Q8_GROUP - 1) / Q8_GROUP;
    int64_t bb = q8_block_bytes(wtype), gbytes = q8_group_bytes(wtype, nb);
    int kq = q8_kquant(wtype);
    if (N % Q8_GROUP) memset(out + (groups - 1) * gbytes, 0, (size_t)gbytes); /* the missing outputs */
    if (wtype_grid(wtype) || wtype_kgrid(wtype)) { /* the rows as stored: each call expands them (expand_group) */
        memcpy(out, w, (size_t)(N * rb));
        return;
    }
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t g = 0; g < groups; g++)
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *dst = out + g * gbytes + q8_block_at(wtype, b);
            uint8_t *qs = (uint8_t *)q8_quants(wtype, dst);
            for (int o = 0; o < Q8_GROUP && g * Q8_GROUP + o < N; o++) {
                const uint8_t *row = w + (g * Q8_GROUP + o) * rb;
                if (kq) { /* the super-block's d (and dmin), and the block's 6-bit scale(s) (and min) */
                    const uint8_t *sblk = row + (b >> 3) * row_bytes(wtype, 256);
                    float *head = (float *)(dst - (b & 7) * bb - q8_super_bytes(wtype));
                    int j = (int)(b & 7);
                    if (wtype == WT_Q2_K) { /* as stored: d, dmin f16 after the quants (widened: exact),
                                             * a byte sc | m << 4 a half */
                        head[o] = f16_at(sblk + 80), head[16 + o] = f16_at(sblk + 82);
                        dst[o] = sblk[2 * j], dst[16 + o] = sblk[2 * j + 1];
                    } else if (wtype == WT_Q6_K) {
                        head[o] = f32_at(sblk);
                        dst[o] = sblk[4 + 2 * j], dst[16 + o] = sblk[5 + 2 * j];
                    } else {
                        head[o] = f32_at(sblk), head[16 + o] = f32_at(sblk + 4);
                        dst[o] = sblk[8 + j], dst[16 + o] = sblk[16 + j];
                    }
                } else if (codebook_xs_held(wtype)) { /* IQ4_XS as stored: its super-block's d, scales_h
                                                       * and scales_l before its first block (q8_super_bytes) */
                    if ((b & 7) == 0) {
                        const uint8_t *sblk = row + (b >> 3) * block_bytes(wtype);
                        uint8_t *head = dst - q8_super_bytes(wtype);
                        memcpy(head + 2 * o, sblk, 2), memcpy(head + 32 + 2 * o, sblk + 2, 2);
                        memcpy(head + 64 + 4 * o, sblk + 4, 4);
                    }
                } else { /* the block's fp32 scale (and Q4_1's min), as the kernels' layout holds them
                          * (WT_HALF_SCALES: the fields as the file stores them, fp16, MXFP4's e8m0 byte) */
                    const uint8_t *blk = row + b * group32_bytes(wtype);
                    int f = scale_width(wtype); /* 4, 2 (fp16), 1 (MXFP4's E) */
                    memcpy(dst + f * o, blk, (size_t)f);
                    if (q8_has_min(wtype)) memcpy(dst + 16 * f + f * o, blk + f, (size_t)f);
                }
                q8_block_bytes_of(wtype, row, b, o, qs);
            }
        }
}

/* A row's blocks quantised: q = round-to-nearest-even(x * (127 / amax)), d = amax / 127, and the
 * sums of q over each half of 16 (for offsets and mins). The same values on every target. */
typedef struct {
    int8_t *q;      /* [M, K] */
    float *d;       /* [M, nb] */
    float *dsum;    /* [M, nb, 2]: d * (float)(sum of the block's q), or (Q2_K) of each half's q */
    int32_t *sums;  /* [M, nb, 2]: sums of q over each half */
} q8_rows;

static void q8_quantize(const float *x, int64_t M, int64_t K, int t, q8_rows *r, int nthreads) {
    int64_t nb = K / 32;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (M * K >= SMALL_WORK)
    for (int64_t i = 0; i < M * nb; i++) {
        const float *xb = x + i * 32;
        vf m = vf_zero(); /* |x| as max(x, -x); a NaN never wins a comparison */
        for (int h = 0; h < 2; h++) {
            vf v = vf_load(xb + 16 * h);
            m = vf_max(vf_max(v, vf_sub(vf_zero(), v)), m);
        }
        float lanes[VL], amax = 0.0f; /* a max is exact: any order gives the same value */
        vf_store(lanes, m);
        for (int l = 0; l < VL; l++)
            if (lanes[l] > amax) amax = lanes[l];
        int32_t s[2];
        q8_round_block(xb, amax > 0.0f ? 127.0f / amax : 0.0f, r->q + i * 32, s);
        r->d[i] = amax / 127.0f;
        r->dsum[2 * i] = r->d[i] * (float)(q8_two(t) ? s[0] : s[0] + s[1]);
        r->dsum[2 * i + 1] = r->d[i] * (float)s[1];
        r->sums[2 * i] = s[0];
        r->sums[2 * i + 1] = s[1];
    }
}

/* Output o's scale (i = 0) or min (i = 1) of a packed WP_WIDEN block: fp32, or (WT_HALF_SCALES)
 * the file's fp16 converted exactly (f16_at: a NaN keeps its payload, as gguf-py's). */
static inline float scale_of(int t, const uint8_t *blk, int o, int i) {
    return wtype_half(t) ? f16_at(blk + 32 * i + 2 * o) : f32_at(blk + 64 * i + 4 * o);
}

/* Output o's scale of a packed codebook block blk (block b of its group) as fp32, exactly:
 * codebook_scale's, or IQ4_XS held as stored d * (ls - 32) from its super-block's header. */
static inline float packed_codebook_scale(int t, const uint8_t *blk, int64_t b, int o) {
    if (!codebook_xs_held(t)) return codebook_scale(t, blk + scale_width(t) * o);
    const uint8_t *head = blk - (b & 7) * q8_block_bytes(t) - q8_super_bytes(t);
    uint16_t h;
    uint32_t l;
    memcpy(&h, head + 32 + 2 * o, 2), memcpy(&l, head + 64 + 4 * o, 4);
    return f16_at(head + 2 * o) * (float)(iq4_xs_ls(l, h, (int)(b & 7)) - 32);
}

/* Row n of a weight packed by strata_q8_pack, dequantised with dequant_block's float operations
 * (gguf-py's values, bit for bit): a tied LM head's packed copy serves as the embedding too. */
void strata_q8_dequant_row(int t, const uint8_t *packed, int64_t K, int64_t n, float *out) {
    int64_t nb = K / 32, bb = q8_block_bytes(t);
    if (wtype_grid(t)) { /* the row as stored (strata_q8_pack): the Q8_0 block's products */
        for (int64_t b = 0; b < nb; b++) {
            int8_t q[32];
            float d = grid_group(t, packed + n * row_bytes(t, K), b, q);
            for (int k = 0; k < 32; k++) out[b * 32 + k] = (float)q[k] * d;
        }
        return;
    }
    if (wtype_kgrid(t)) { /* the row as stored: (d * sc) * q, the Q6_K-shaped block's products */
        for (int64_t b = 0; b < nb; b++) {
            int8_t q[32], sc[2];
            float d;
            kgrid_block(t, packed + n * row_bytes(t, K), b, &d, sc, q);
            for (int k = 0; k < 32; k++) out[b * 32 + k] = d * (float)sc[k >> 4] * (float)q[k];
        }
        return;
    }
    int o = (int)(n % Q8_GROUP), c8 = wtype_code(t);
    const uint8_t *grp = packed + n / Q8_GROUP * q8_group_bytes(t, nb);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = grp + q8_block_at(t, b), *qs = q8_quants(t, blk);
        const float *head = (const float *)(blk - (b & 7) * bb - q8_super_bytes(t)); /* K-quants only */
        for (int R = 0; R < 8; R++) {
            uint8_t bytes[64];
            vq_store(bytes, q8_row(t, qs, R));
            for (int c = 0; c < 4; c++) {
                int k = 4 * R + c, v = bytes[4 * o + c]; /* w(o, k) plus the type's offset */
                float *y = out + b * 32 + k;
                if (c8 == WT_Q8_0)
                    *y = (float)(v - 128) * scale_of(t, blk, o, 0);
                else if (wtype_codebook(t)) /* the Q8_0 block's product (lookup_group) */
                    *y = (float)codebook_of(t)[v] * packed_codebook_scale(t, blk, b, o);
                else if (c8 == WT_Q5_0) /* the product of the Q8_0 block it equals (and gguf-py's) */
                    *y = (float)(v - 16) * scale_of(t, blk, o, 0);
                else if (c8 == WT_Q4_0)
                    *y = scale_of(t, blk, o, 0) * ((float)v - 8.0f);
                else if (c8 == WT_Q4_1 || c8 == WT_Q5_1)
                    *y = scale_of(t, blk, o, 0) * (float)v + scale_of(t, blk, o, 1);
                else if (t == WT_Q6_K)
                    *y = head[o] * (float)(int8_t)blk[16 * (k >> 4) + o] * (float)(v - 32);
                else if (t == WT_Q2_K) { /* (d * sc) * q - (dmin * m), sc and m half k / 16's */
                    int sm = blk[16 * (k >> 4) + o];
                    *y = head[o] * (float)(sm & 15) * (float)v - head[16 + o] * (float)(sm >> 4);
                }
                else /* Q4_K, Q5_K: (d * sc) * q - (dmin * m) */
                    *y = head[o] * (float)(int8_t)blk[o] * (float)v - head[16 + o] * (float)(int8_t)blk[16 + o];
            }
        }
    }
}

/* Rows m0 .. m0+rows of one group of 16 outputs: the per-output sequence at the top, a tile's
 * rows (q8_tile_rows) sharing each unpacked block of weights. */
static inline __attribute__((always_inline)) void q8_group_rows(int t, const uint8_t *grp, int64_t nb, const q8_rows *xr, int64_t K, int64_t m0,
                                 int rows, vf *acc) {
    int halves = q8_halves(t), off = q8_offset(t), kq = q8_kquant(t);
#ifdef Q8_SIGNED_DOT
    int signed_dot = wtype_code(t) == WT_Q8_0; /* this target multiplies Q8_0's signed weights as they are */
    if (signed_dot) off = 0;
#else
    int signed_dot = 0;
#endif
    for (int i = 0; i < rows; i++) acc[i] = vf_zero();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = grp + q8_block_at(t, b);
        const float *head = kq ? (const float *)(blk - (b & 7) * q8_block_bytes(t) - q8_super_bytes(t)) : NULL;
        const uint8_t *qs = q8_quants(t, blk);
        q8_prefetch_ahead(t, blk);
        for (int h = 0; h < halves; h++) {
            /* two independent chains per row (integers: any order is exact; 4-bit blocks on AVX2:
             * one, Q8_NIBBLE_CHAINS), in int16 partial sums where the target has them (see vh): at
             * most 4 steps a chain, 8 for a 4-bit block's */
            vi s[Q8_MR];
            vh p[Q8_MR], p2[Q8_MR];
            for (int i = 0; i < rows; i++) s[i] = vi_zero(), p[i] = vh_zero(), p2[i] = vh_zero();
            if (q8_nibbles(t) || q8_five(t)) { /* quads r and r + 4: one load's low and high nibbles */
                vq plane = vq_load(qs + (q8_five(t) ? 256 : 0)); /* the fifth bits, once a block (unused else) */
                for (int r = 0; r < 4; r++) {
                    vq v = vq_load(qs + r * 64), lo = vq_lo(v), hi = vq_hi(v);
                    if (q8_five(t)) lo = q8_high(t, lo, plane, r), hi = q8_high(t, hi, plane, r + 4);
                    for (int i = 0; i < rows; i++) {
                        const int8_t *x = xr->q + (m0 + i) * K + b * 32;
                        p[i] = vh_dot4(p[i], lo, x + 4 * r);
                        if (Q8_NIBBLE_CHAINS == 1 && q8_nibbles(t)) p[i] = vh_dot4(p[i], hi, x + 16 + 4 * r);
                        else p2[i] = vh_dot4(p2[i], hi, x + 16 + 4 * r);
                    }
                }
            } else if (signed_dot) { /* Q8_0 where its signed weights are multiplied: one step fills int16 */
                for (int r = 0; r < 8; r++)
                    for (int i = 0; i < rows; i++) s[i] = vi_dot4_signed(s[i], q8_row(t, qs, r), xr->q + (m0 + i) * K + b * 32 + 4 * r);
            } else { /* quad rows in pairs (Q6_K: half h's four; halves run in order) */
                int r0 = halves == 2 ? 4 * h : 0, r1 = halves == 2 ? 4 * h + 4 : 8;
                for (int r = r0; r < r1; r += 2) {
                    vq v = q8_row(t, qs, r), v2 = q8_row(t, qs, r + 1);
                    for (int i = 0; i < rows; i++) {
                        const int8_t *x = xr->q + (m0 + i) * K + b * 32 + 4 * r;
                        p[i] = vh_dot4(p[i], v, x);
                        p2[i] = vh_dot4(p2[i], v2, x + 4);
                    }
#ifdef Q8_INT16_SUMS
                    if (q8_int16_steps(t) == 1) /* the IQ2 bytes: each step widened before the next */
                        for (int i = 0; i < rows; i++) s[i] = vi_add_vh(vi_add_vh(s[i], p[i]), p2[i]), p[i] = p2[i] = vh_zero();
#endif
                }
            }
            for (int i = 0; i < rows; i++) /* 4-bit weights: both chains fit one int16 sum (8 steps) */
                s[i] = q8_nibbles(t) ? vi_add_vh(s[i], vh_add(p[i], p2[i])) : vi_add_vh(vi_add_vh(s[i], p[i]), p2[i]);
            /* K-quants: d * scale, the load's own fp32 product (as dequant_kblock forms it) */
            vf ws = q8_scale(t, blk, head, h);
            for (int i = 0; i < rows; i++) {
                int64_t xb = (m0 + i) * nb + b;
                const int32_t *sums = xr->sums + 2 * xb;
                if (off) s[i] = vi_sub_n(s[i], off * (halves == 2 ? sums[h] : sums[0] + sums[1]));
                acc[i] = vf_fma(vf_mul(ws, vf_set1(xr->d[xb])), vf_from_vi(s[i]), acc[i]);
            }
        }
        q8_add_min(t, blk, head, xr->dsum + 2 * (m0 * nb + b), 2 * nb, rows, acc);
    }
}

/* One row tile of one group (see q8_group_rows), with a constant row count: the compiler keeps the
 * tile in registers. */
static inline __attribute__((always_inline)) void q8_tile(int t, const uint8_t *grp, int64_t nb, const q8_rows *xr,
                                                          int64_t K, int64_t m0, int rows, vf *acc) {
    switch (rows) {
#define Q8_ROWS(R) case R: q8_group_rows(t, grp, nb, xr, K, m0, R, acc); break;
        Q8_ROWS(1) Q8_ROWS(2) Q8_ROWS(3)
#if Q8_MR >= 4
        Q8_ROWS(4)
#endif
#if Q8_MR >= 8
        Q8_ROWS(5) Q8_ROWS(6) Q8_ROWS(7) Q8_ROWS(8)
#endif
#undef Q8_ROWS
    }
}

/* See q8.h. */
void unpack_group(int t, const uint8_t *grp, int64_t nb, uint8_t *dst) {
    int bytes = t == WT_Q4_K ? WT_Q5_K_BYTES : q8_unpacked(t), head = (int)q8_super_bytes(t);
    int scales = (int)(q8_quants(t, grp) - grp);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *src = grp + q8_block_at(t, b);
        uint8_t *out = dst + q8_block_at(bytes, b);
        if ((b & 7) == 0) memcpy(out - head, src - head, (size_t)head); /* the super-block's d (and dmin) */
        memcpy(out, src, (size_t)scales);
        for (int R = 0; R < 8; R++) vq_store(out + scales + 64 * R, q8_row(t, src + scales, R));
    }
}

/* A codebook type's group looked up (expand_group): Q8_0's fp32 scales (WT_HALF_SCALES: the
 * file's fields converted exactly), then codebook[index] + 128 a byte. */
/* kind: the packed scales (0 fp32, 1 the file's fp16 d, 2 MXFP4's e8m0 bytes, 3 IQ4_XS's super-block
 * fields), a constant in the loop (one binary each: no per-block tests of the type). */
static inline __attribute__((always_inline)) void lookup_blocks(int kind, const uint8_t *table, const uint8_t *grp,
                                                                int64_t nb, uint8_t *dst) {
    int64_t sb = kind == 0 ? 64 : kind == 1 ? 32 : kind == 2 ? 16 : 0; /* q8_scale_bytes of the kind */
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *src = kind == 3 ? grp + q8_block_at(WT_IQ4_XS | WT_HALF_SCALES, b) : grp + b * (sb + 256);
        uint8_t *out = dst + q8_block_at(WT_Q8_0, b);
        if (kind == 3) { /* at a super-block's first block, its 8 blocks' scales: d * (ls - 32) of the
                          * 16 outputs (packed_codebook_scale's products), d widened once */
            if ((b & 7) == 0) {
                const uint8_t *head = src - 128;
                vf d = vf_from_f16(head);
                for (int j = 0; j < 8 && b + j < nb; j++) {
                    float ls[16];
                    for (int o = 0; o < 16; o++) { /* each lane's fields read in place (one vector load each) */
                        uint16_t h;
                        uint32_t l;
                        memcpy(&h, head + 32 + 2 * o, 2), memcpy(&l, head + 64 + 4 * o, 4);
                        ls[o] = (float)(iq4_xs_ls(l, h, j) - 32);
                    }
                    vf_store((float *)(dst + q8_block_at(WT_Q8_0, b + j)), vf_mul(d, vf_load(ls)));
                }
            }
        } else if (kind == 0) memcpy(out, src, 64); /* the scales: fp32 as Q8_0's */
        else if (kind == 1) vf_store((float *)out, vf_from_f16(src)); /* the file's fp16 d: exact (vf_from_f16) */
        else { /* the file's e8m0 bytes, each 2^(E - 128) exactly (e8m0_half_at, a lane at a time) */
            uint32_t bits[16];
            for (int o = 0; o < 16; o++) {
                uint32_t e = src[o];
                bits[o] = e < 2 ? 0x00200000u << e : (e - 1) << 23;
            }
            memcpy(out, bits, 64);
        }
        for (int R = 0; R < 8; R++) vq_store(out + 64 + 64 * R, vq_lut(q8_row(WT_IQ4_NL, src + sb, R), table));
    }
}
static void lookup_group(int t, const uint8_t *grp, int64_t nb, uint8_t *dst) {
    uint8_t table[16];
    for (int i = 0; i < 16; i++) table[i] = (uint8_t)(codebook_of(t)[i] + 128);
    if (!wtype_half(t)) lookup_blocks(0, table, grp, nb, dst);
    else if (wtype_code(t) == WT_MXFP4) lookup_blocks(2, table, grp, nb, dst);
    else if (wtype_code(t) == WT_IQ4_XS) lookup_blocks(3, table, grp, nb, dst);
    else lookup_blocks(1, table, grp, nb, dst);
}

/* See q8.h. */
void expand_group(int t, const uint8_t *grp, int64_t nb, uint8_t *dst) {
    if (wtype_codebook(t)) {
        lookup_group(t, grp, nb, dst);
        return;
    }
    if (grid_expand(t, grp, nb, dst)) return; /* the target's own decoding of 16 rows at once */
    int64_t rb = row_bytes(t, 32 * nb);
    if (wtype_kgrid(t)) { /* row by row: d, the int8 scales, q + offset (see q8.h) */
        int bt = q8_expanded_type(t), off = q8_offset(bt);
        for (int o = 0; o < Q8_GROUP; o++)
            for (int64_t b = 0; b < nb; b++) {
                int8_t q[32], sc[2];
                float d;
                kgrid_block(t, grp + o * rb, b, &d, sc, q);
                uint8_t *out = dst + q8_block_at(bt, b);
                if ((b & 7) == 0) memcpy(out - q8_super_bytes(bt) + 4 * o, &d, 4);
                out[o] = (uint8_t)sc[0], out[16 + o] = (uint8_t)sc[1];
                for (int r = 0; r < 8; r++)
                    for (int c = 0; c < 4; c++) out[32 + 64 * r + 4 * o + c] = (uint8_t)(q[4 * r + c] + off);
            }
        return;
    }
    for (int o = 0; o < Q8_GROUP; o++)
        for (int64_t b = 0; b < nb; b++) {
            int8_t q[32];
            float d = grid_group(t, grp + o * rb, b, q);
            uint8_t *out = dst + q8_block_at(WT_Q8_0, b);
            memcpy(out + 4 * o, &d, 4);
            for (int r = 0; r < 8; r++) { /* q + 128: q's byte with its top bit flipped */
                uint32_t word;
                memcpy(&word, q + 4 * r, 4);
                word ^= 0x80808080u;
                memcpy(out + 64 + 64 * r + 4 * o, &word, 4);
            }
        }
}

/* y[M, N] = x[M, K] @ W^T (+ bias) with W packed by strata_q8_pack and x quantised here. */
void strata_q8_matmul(const float *x, int64_t M, int64_t K, const uint8_t *packed, int wtype, int64_t N,
                      const float *bias, float *y, int nthreads) {
    int64_t nb = K / 32, groups = (N + Q8_GROUP - 1) / Q8_GROUP, gbytes = q8_group_bytes(wtype, nb);
    int unpack = q8_unpacked(wtype) && M >= UNPACK_ROWS, lookup = q8_expanded(wtype);
    int t = lookup ? q8_expanded_type(wtype) : unpack ? q8_unpacked(wtype) : wtype;
    q8_rows xr; /* in one scratch block kept between calls (internal.h): sums, d, dsum, then q */
    uint8_t *block = (uint8_t *)scratch(SCRATCH_Q8, (size_t)(M * nb) * 20 + (size_t)(M * K));
    if (!block) return; /* out of memory: counted */
    xr.sums = (int32_t *)block;
    xr.d = (float *)(block + M * nb * 8);
    xr.dsum = (float *)(block + M * nb * 12);
    xr.q = (int8_t *)(block + M * nb * 20);
    q8_quantize(x, M, K, t, &xr, nthreads);
#pragma omp parallel for num_threads(nthreads) schedule(static) if (groups > 1 && M * K * N >= SMALL_WORK)
    for (int64_t g = 0; g < groups; g++) {
        int outs = N - g * Q8_GROUP < Q8_GROUP ? (int)(N - g * Q8_GROUP) : Q8_GROUP;
        const uint8_t *grp = packed + g * gbytes;
        if (lookup) { /* into this thread's scratch, kept between calls */
            uint8_t *bytes = (uint8_t *)scratch(SCRATCH_LOOKUP, (size_t)q8_group_bytes(t, nb));
            if (!bytes) continue; /* out of memory: counted */
            expand_group(wtype, grp, nb, bytes);
            grp = bytes;
        }
        if (unpack) { /* into this thread's scratch, kept between calls */
            uint8_t *bytes = (uint8_t *)scratch(SCRATCH_UNPACK, (size_t)q8_group_bytes(t, nb));
            if (!bytes) continue; /* out of memory: counted */
            unpack_group(wtype, grp, nb, bytes);
            grp = bytes;
        }
        int mr = q8_tile_rows(t);
        for (int64_t m0 = 0; m0 < M; m0 += mr) {
            int rows = M - m0 < mr ? (int)(M - m0) : mr;
            vf acc[Q8_MR];
            switch (t) { /* a constant type: no per-block tests of it in the inner loops */
            case WT_Q4_0: q8_tile(WT_Q4_0, grp, nb, &xr, K, m0, rows, acc); break;
            case WT_Q4_1: q8_tile(WT_Q4_1, grp, nb, &xr, K, m0, rows, acc); break;
            case WT_Q5_0: q8_tile(WT_Q5_0, grp, nb, &xr, K, m0, rows, acc); break;
            case WT_Q5_1: q8_tile(WT_Q5_1, grp, nb, &xr, K, m0, rows, acc); break;
            case WT_Q8_0: q8_tile(WT_Q8_0, grp, nb, &xr, K, m0, rows, acc); break;
#define Q8_HALF(T) case T | WT_HALF_SCALES: q8_tile(T | WT_HALF_SCALES, grp, nb, &xr, K, m0, rows, acc); break;
            Q8_HALF(WT_Q4_0) Q8_HALF(WT_Q4_1) Q8_HALF(WT_Q5_0) Q8_HALF(WT_Q5_1) Q8_HALF(WT_Q8_0)
#undef Q8_HALF
            case WT_Q4_K: q8_tile(WT_Q4_K, grp, nb, &xr, K, m0, rows, acc); break;
            case WT_Q6_K: q8_tile(WT_Q6_K, grp, nb, &xr, K, m0, rows, acc); break;
            case WT_Q2_K: q8_tile(WT_Q2_K, grp, nb, &xr, K, m0, rows, acc); break;
            default: q8_tile(t, grp, nb, &xr, K, m0, rows, acc); break; /* Q5_K (faster so at 2-15 rows), the unpacked bytes */
            }
            q8_store_rows(acc, rows, m0, g, outs, bias, y, N);
        }
    }
    canonical_nans(y, M * N);
}
