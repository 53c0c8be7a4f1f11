/*
 * The integer-limb kernels' integer sums on AMX tiles (AVX-512 build, where amx.c allows them),
 * for calls of many rows: included by limb.c, whose limb_group hands a group of 16 outputs here.
 *
 * A tile step TDPBSUD multiplies signed bytes (A: 16 rows x 32, or 16 for a half of Q6_K) by
 * unsigned bytes (B) into 16 x 16 int32 sums. q8's packed byte layout (q8.h: per group and block,
 * 8 rows of 64 bytes, byte 4o+c of row r = w(o, 4r+c) + offset) is B's layout as it is, and
 * limb j of a block for 16 consecutive rows is an A tile (xr->q: [M, nb, limbs, 32], so rows
 * nb * limbs * 32 bytes apart). So C[m][o] = sum_k l_j(m, k) (w(o, k) + offset), the sum the
 * vector step forms, and with the offset's share taken back (xr->start) exactly S_j: integer
 * sums are exact in any order. Each row then runs limb_group_rows's float sequence on those
 * S_j, block by block in order, so the outputs have the same bits as without tiles.
 *
 * Rows go 16 at a time; a last partial tile is the call's last 16 rows (M >= 16), so a few
 * rows are computed twice, to the same bits, by the same thread. The 4- and 5-bit types are
 * put one byte a weight (q8_row) into a block of B per block; Q6_K and Q5_K arrive unpacked.
 */
#ifndef STRATA_AMX_H
#define STRATA_AMX_H

STRATA_HIDDEN int amx_on(void); /* amx.c: whether tiles may run (asked once) */

#define AMX_ROWS 16     /* rows of an A (and C) tile */
#define AMX_MIN_ROWS 16 /* rows from which a call takes its sums on tiles */
#define AMX_TARGET __attribute__((target("amx-tile,amx-int8")))

typedef struct { /* ldtilecfg's 64 bytes, palette 1 */
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

/* Tiles: C_j = j (0 .. 2), A_j = 3 + j, B = 6. `halves` 2 (Q6_K): K = 16 a step (A 16 bytes a
 * row, B 4 rows), else 32. */
static inline AMX_TARGET void amx_configure(int halves) {
    amx_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int j = 0; j < 3; j++) {
        c.rows[j] = AMX_ROWS, c.colsb[j] = 64;
        c.rows[3 + j] = AMX_ROWS, c.colsb[3 + j] = (uint16_t)(32 / halves);
    }
    c.rows[6] = (uint8_t)(8 / halves), c.colsb[6] = 64;
    _tile_loadconfig(&c);
}

/* C_j = A_j x B for each limb, stored to c[j] ([16 rows][16 outputs] int32). */
static inline __attribute__((always_inline)) AMX_TARGET void amx_sums(int limbs, const int8_t *a, int64_t stride,
                                                                      const uint8_t *b, int32_t (*c)[256]) {
    _tile_loadd(6, b, 64);
    _tile_zero(0);
    _tile_loadd(3, a, stride);
    _tile_dpbsud(0, 3, 6);
    _tile_zero(1);
    _tile_loadd(4, a + 32, stride);
    _tile_dpbsud(1, 4, 6);
    if (limbs == 3) {
        _tile_zero(2);
        _tile_loadd(5, a + 64, stride);
        _tile_dpbsud(2, 5, 6);
    }
    _tile_stored(0, c[0], 64);
    _tile_stored(1, c[1], 64);
    if (limbs == 3) _tile_stored(2, c[2], 64);
}

#define AMX_CHUNK 4 /* rows whose float steps run together (limb_values3's one test) */

/* Rows m0 .. m0+16 of one group: the integer sums on tiles, then limb_group_rows's float sequence. */
static inline __attribute__((always_inline)) AMX_TARGET void amx_group_rows(int t, const uint8_t *grp, int64_t nb,
                                                                            const limb_rows *xr, int limbs, int64_t m0,
                                                                            vf *acc) {
    int halves = q8_halves(t), kq = q8_kquant(t);
    int bytes = t == WT_Q8_0 || t == WT_Q5_0_BYTES || t == WT_Q5_K_BYTES || t == WT_Q6_K_BYTES;
    int64_t stride = nb * limbs * 32;
    _Alignas(64) int32_t c[3][256];
    _Alignas(64) uint8_t wb[512]; /* a block of a 4- or 5-bit type, a byte a weight */
    for (int i = 0; i < AMX_ROWS; i++) acc[i] = vf_zero();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = grp + q8_block_at(t, b);
        const float *head = kq ? (const float *)(blk - (b & 7) * q8_block_bytes(t) - q8_super_bytes(t)) : NULL;
        const uint8_t *qs = q8_quants(t, blk);
        q8_prefetch_ahead(t, blk);
        if (!bytes) {
            for (int r = 0; r < 8; r++) vq_store(wb + 64 * r, q8_row(t, qs, r));
            qs = wb;
        }
        const int8_t *a = xr->q + (m0 * nb + b) * limbs * 32;
        for (int h = 0; h < halves; h++) {
            amx_sums(limbs, a + 16 * h, stride, qs + 256 * h, c);
            vf ws = kq ? vf_mul(vf_load(head), vf_from_i8((const int8_t *)blk + 16 * h)) : vf_load((const float *)blk);
            for (int i0 = 0; i0 < AMX_ROWS; i0 += AMX_CHUNK) {
                vi s[3 * AMX_CHUNK];
                vf f[AMX_CHUNK];
                for (int i = 0; i < AMX_CHUNK; i++) {
                    const int32_t *start = xr->start + ((m0 + i0 + i) * nb + b) * limbs * 2;
                    for (int j = 0; j < limbs; j++) {
                        vi v = _mm512_load_si512((const void *)(c[j] + 16 * (i0 + i)));
                        s[limbs * i + j] = q8_offset(t) ? vi_add(v, vi_set1(start[2 * j + h])) : v;
                    }
                }
                if (limbs == 3) limb_values3(s, AMX_CHUNK, f);
                else
                    for (int i = 0; i < AMX_CHUNK; i++) f[i] = vf_from_vi(limb_low(s[2 * i], s[2 * i + 1]));
                for (int i = 0; i < AMX_CHUNK; i++)
                    acc[i0 + i] = vf_fma(vf_mul(ws, vf_set1(xr->s[(m0 + i0 + i) * nb + b])), f[i], acc[i0 + i]);
            }
        }
        q8_add_min(t, blk, head, xr->dsum + m0 * nb + b, nb, AMX_ROWS, acc);
    }
}

/* Group g's outputs for all M >= AMX_MIN_ROWS rows on tiles: y[:, 16g .. 16g + outs) (+ bias). */
static AMX_TARGET void amx_group(int t, const uint8_t *grp, int64_t nb, const limb_rows *xr, int limbs, int64_t M,
                                 int64_t g, int outs, const float *bias, float *y, int64_t N) {
    amx_configure(q8_halves(t));
    for (int64_t m0 = 0; m0 < M; m0 += AMX_ROWS) {
        int64_t at = m0 + AMX_ROWS <= M ? m0 : M - AMX_ROWS; /* the last 16 rows */
        vf acc[AMX_ROWS];
#define AMX_CASE(T)                                                                                                    \
    case T:                                                                                                            \
        if (limbs == 3) amx_group_rows(T, grp, nb, xr, 3, at, acc);                                                     \
        else amx_group_rows(T, grp, nb, xr, 2, at, acc);                                                                \
        break
        switch (t) { /* a constant type and limb count in the inner loops */
            AMX_CASE(WT_Q4_0);
            AMX_CASE(WT_Q4_1);
            AMX_CASE(WT_Q5_0);
            AMX_CASE(WT_Q8_0);
            AMX_CASE(WT_Q4_K);
            AMX_CASE(WT_Q5_K);
            AMX_CASE(WT_Q6_K);
            AMX_CASE(WT_Q5_K_BYTES);
            AMX_CASE(WT_Q5_0_BYTES);
        default:
            AMX_CASE(WT_Q6_K_BYTES);
        }
#undef AMX_CASE
        q8_store_rows(acc, AMX_ROWS, at, g, outs, bias, y, N);
    }
    _tile_release();
}

#endif
