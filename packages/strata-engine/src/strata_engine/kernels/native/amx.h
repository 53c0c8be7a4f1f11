/*
 * The integer-limb kernels' integer sums on AMX tiles (AVX-512 build, where amx.c allows them),
 * for calls of AMX_MIN_ROWS rows or more: included by limb.c, whose limb_matmul_many hands its
 * call here (amx_matmul) once the rows are split into limbs.
 *
 * A tile step TDPBSSD multiplies signed bytes A (16 rows x 32, or 16 for a half of Q6_K) by signed
 * bytes B (8 rows x 64: byte 4o+c of row r = w(o, 4r+c)) into 16 x 16 int32 sums. q8's packed
 * layout (q8.h) is B's, less each type's offset (amx_weights), and limb j of a block for 16 rows
 * is an A tile (amx_pack). So C[m][o] = S_j = sum_k w_k l_j,k, the sum the vector steps form:
 * integer sums are exact in any order. Each row then runs limb_group_rows's float sequence on
 * those S_j, block by block in order, so the outputs have the same bits as without tiles.
 *
 * Rows go 16 at a time; a last partial tile is the call's last 16 rows (M >= 16), so a few rows
 * are computed twice, to the same bits, by the same thread. Groups of 16 outputs go a few at a
 * time (a chunk), each row tile's limbs read once for all of them from cache.
 */
#ifndef STRATA_AMX_H
#define STRATA_AMX_H

#define AMX_ROWS 16     /* rows of an A (and C) tile */
#define AMX_MIN_ROWS 16 /* rows from which a call takes its sums on tiles */
#define AMX_CHUNK 8     /* groups a chunk takes at most */
#define AMX_CHUNK_BYTES (512 * 1024) /* a chunk's B tiles at most (so that they stay in L2 with a row tile's A) */
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

/* ---- the rows' limbs as tiles ---------------------------------------------------------------
 * Once a call, before its groups: per tile of 16 rows (the last: the call's last 16) and block,
 * amx_step_bytes(limbs) bytes holding the A tile of each limb (512 bytes: 16 rows x 32), then the rows' s[16]
 * and dsum[16]: what a group's step reads, in one run of memory (a row's own limbs lie
 * nb * limbs * 32 bytes from the next row's, its scales nb * 4). */
static inline int64_t amx_step_bytes(int limbs) { return 512 * limbs + 128; }
static inline int64_t amx_tiles(int64_t M) { return (M + AMX_ROWS - 1) / AMX_ROWS; }
static inline int64_t amx_row0(int64_t tile, int64_t M) { /* a tile's first row */
    return tile * AMX_ROWS + AMX_ROWS <= M ? tile * AMX_ROWS : M - AMX_ROWS;
}

/* A buffer of at least `bytes` (starting on a cache line), kept between calls per thread and slot; NULL
 * where the memory is not there (the vector steps then run: the same bits, never an error). */
static uint8_t *amx_buffer(int slot, size_t bytes) {
    static _Thread_local uint8_t *buf[3]; /* the rows' tiles, a chunk's B tiles, its expanded groups */
    static _Thread_local size_t cap[3];
    if (bytes > cap[slot]) {
        free(buf[slot]);
        cap[slot] = bytes + bytes / 4 + 4096;
        buf[slot] = malloc(cap[slot] + 64);
        if (!buf[slot]) cap[slot] = 0;
    }
    return buf[slot] ? buf[slot] + (64 - (uintptr_t)buf[slot] % 64) : NULL; /* rows on cache lines */
}

/* The rows' tiles for M >= AMX_MIN_ROWS rows, or NULL where tiles do not run. */
static const uint8_t *amx_pack(const limb_rows *xr, int64_t M, int64_t nb, int limbs, int nthreads) {
    if (M < AMX_MIN_ROWS || !strata_amx_use(-1)) return NULL; /* amx.c: asked once */
    int64_t per = amx_step_bytes(limbs);
    uint8_t *dst = amx_buffer(0, (size_t)(amx_tiles(M) * nb * per));
    if (!dst) return NULL;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (M * nb * limbs >= SMALL_WORK / 32)
    for (int64_t i = 0; i < amx_tiles(M) * nb; i++) {
        int64_t b = i % nb, m0 = amx_row0(i / nb, M);
        uint8_t *step = dst + i * per;
        float *s = (float *)(step + 512 * limbs), *dsum = s + 16;
        for (int r = 0; r < AMX_ROWS; r++) {
            int64_t at = (m0 + r) * nb + b;
            for (int j = 0; j < limbs; j++) memcpy(step + 512 * j + 32 * r, xr->q + (at * limbs + j) * 32, 32);
            s[r] = xr->s[at], dsum[r] = xr->dsum[2 * at]; /* the block's (limb.c: [M, nb, 2]) */
        }
    }
    return dst;
}

/* ---- a group's weights as B tiles --------------------------------------------------------------
 * Once a group, for all its row tiles: per block 8 rows x 64 bytes, byte 4o+c of row r = w(o, 4r+c)
 * itself, signed (q8_row's bytes less the type's offset: Q8_0's -128 .. 127, the others' within
 * -32 .. 31). TDPBSSD (signed x signed) then gives S_j = sum_k w_k l_j,k at once, with no offset
 * share to take back. */
static inline __attribute__((always_inline)) void amx_weights(int t, const uint8_t *grp, int64_t nb, uint8_t *dst) {
    vq off = _mm512_set1_epi8((char)q8_offset(t));
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *qs = q8_quants(t, grp + q8_block_at(t, b));
        for (int r = 0; r < 8; r++) vq_store(dst + 512 * b + 64 * r, _mm512_sub_epi8(q8_row(t, qs, r), off));
    }
}

/* Step (b, h)'s integer sums begun on tiles: C_j = A_j x B (amx_store puts them in memory). */
static inline __attribute__((always_inline)) AMX_TARGET void amx_sums(int limbs, const uint8_t *w, const uint8_t *step,
                                                                      int h) {
    _tile_loadd(6, w + 256 * h, 64);
    _tile_zero(0);
    _tile_loadd(3, step + 16 * h, 32);
    _tile_dpbssd(0, 3, 6);
    _tile_zero(1);
    _tile_loadd(4, step + 512 + 16 * h, 32);
    _tile_dpbssd(1, 4, 6);
    if (limbs == 3) {
        _tile_zero(2);
        _tile_loadd(5, step + 1024 + 16 * h, 32);
        _tile_dpbssd(2, 5, 6);
    }
}

/* The sums amx_sums began, into c[limbs][16 rows x 16 outputs]: a step later, so that the
 * products are done by then and the stores do not wait on them. */
static inline __attribute__((always_inline)) AMX_TARGET void amx_store(int limbs, int32_t (*c)[256]) {
    _tile_stored(0, c[0], 64);
    _tile_stored(1, c[1], 64);
    if (limbs == 3) _tile_stored(2, c[2], 64);
}

#define AMX_ROW_CHUNK 4 /* rows whose float steps run together (limb_values3's one test) */

/* One tile of 16 rows of one group (w: its B tiles): the integer sums of each step (block, half)
 * on tiles, a step ahead of limb_group_rows's float sequence on them, so that the two overlap. */
static inline __attribute__((always_inline)) AMX_TARGET void amx_group_rows(int t, const uint8_t *grp, int64_t nb,
                                                                            const uint8_t *w, const uint8_t *tiles,
                                                                            int limbs, vf *acc) {
    int halves = q8_halves(t), kq = q8_kquant(t);
    int64_t per = amx_step_bytes(limbs), steps = nb * halves;
    _Alignas(64) int32_t c[2][3][256];
    for (int i = 0; i < AMX_ROWS; i++) acc[i] = vf_zero();
    amx_sums(limbs, w, tiles, 0);
    amx_store(limbs, c[0]);
    for (int64_t n = 0; n < steps; n++) {
        int64_t b = n / halves, next = (n + 1) / halves;
        int h = (int)(n % halves);
        if (n + 1 < steps) amx_sums(limbs, w + 512 * next, tiles + next * per, (int)((n + 1) % halves));
        const uint8_t *blk = grp + q8_block_at(t, b);
        const float *head = kq ? (const float *)(blk - (b & 7) * q8_block_bytes(t) - q8_super_bytes(t)) : NULL;
        const float *s = (const float *)(tiles + b * per + 512 * limbs);
        if (h == 0) q8_prefetch_ahead(t, blk);
        vf ws = q8_scale(t, blk, head, h); /* fp16 scales (WT_HALF_SCALES) converted exactly */
        int32_t (*cn)[256] = c[n & 1];
        for (int i0 = 0; i0 < AMX_ROWS; i0 += AMX_ROW_CHUNK) {
            vi sums[3 * AMX_ROW_CHUNK];
            vf f[AMX_ROW_CHUNK];
            for (int i = 0; i < AMX_ROW_CHUNK; i++)
                for (int j = 0; j < limbs; j++) sums[limbs * i + j] = _mm512_load_si512((const void *)(cn[j] + 16 * (i0 + i)));
            if (limbs == 3) limb_values3(sums, AMX_ROW_CHUNK, f);
            else
                for (int i = 0; i < AMX_ROW_CHUNK; i++) f[i] = vf_from_vi(limb_low(sums[2 * i], sums[2 * i + 1]));
            for (int i = 0; i < AMX_ROW_CHUNK; i++)
                acc[i0 + i] = vf_fma(vf_mul(ws, vf_set1(s[i0 + i])), f[i], acc[i0 + i]);
        }
        if (h == halves - 1) q8_add_min(t, blk, head, s + 16, 1, AMX_ROWS, acc);
        if (n + 1 < steps) amx_store(limbs, c[(n + 1) & 1]);
    }
}

/* Groups c0 .. c1 of the call (counted over its n weights: first[i] is weight i's first) for
 * every row tile; t a constant (the groups' type as tiles take it). 0 where the memory is not there. */
static inline __attribute__((always_inline)) AMX_TARGET int amx_chunk_type(
    int t, int wtype, const uint8_t *tiles, int64_t M, int64_t nb, int limbs, int64_t c0, int64_t c1,
    const uint8_t *const *packed, const int64_t *N, const int64_t *first, const float *const *bias, float *const *y) {
    int count = (int)(c1 - c0);
    uint8_t *w = amx_buffer(1, (size_t)(count * nb * 512));
    uint8_t *expanded = q8_expanded(wtype) ? amx_buffer(2, (size_t)(count * q8_group_bytes(t, nb))) : NULL;
    if (!w || (q8_expanded(wtype) && !expanded)) return 0;
    const uint8_t *grp[AMX_CHUNK];
    int64_t at[AMX_CHUNK], of[AMX_CHUNK]; /* the group within its weight, the weight */
    for (int k = 0; k < count; k++) {
        int64_t i = 0;
        while (c0 + k >= first[i + 1]) i++;
        of[k] = i, at[k] = c0 + k - first[i];
        grp[k] = packed[i] + at[k] * q8_group_bytes(wtype, nb);
        if (expanded) { /* looked up as the Q8_0 group of the same values (q8.h) */
            expand_group(wtype, grp[k], nb, expanded + k * q8_group_bytes(t, nb));
            grp[k] = expanded + k * q8_group_bytes(t, nb);
        }
        amx_weights(t, grp[k], nb, w + k * nb * 512);
    }
    amx_configure(q8_halves(t));
    for (int64_t tile = 0; tile < amx_tiles(M); tile++) {
        const uint8_t *rows = tiles + tile * nb * amx_step_bytes(limbs);
        for (int k = 0; k < count; k++) {
            vf acc[AMX_ROWS];
            if (limbs == 3) amx_group_rows(t, grp[k], nb, w + k * nb * 512, rows, 3, acc);
            else amx_group_rows(t, grp[k], nb, w + k * nb * 512, rows, 2, acc);
            int64_t n = N[of[k]];
            int outs = n - at[k] * Q8_GROUP < Q8_GROUP ? (int)(n - at[k] * Q8_GROUP) : Q8_GROUP;
            q8_store_rows(acc, AMX_ROWS, amx_row0(tile, M), at[k], outs, bias[of[k]], y[of[k]], n);
        }
    }
    _tile_release();
    return 1;
}

static AMX_TARGET int amx_chunk(int wtype, const uint8_t *tiles, int64_t M, int64_t nb, int limbs, int64_t c0,
                                int64_t c1, const uint8_t *const *packed, const int64_t *N, const int64_t *first,
                                const float *const *bias, float *const *y) {
#define AMX_CASE(T) return amx_chunk_type(T, wtype, tiles, M, nb, limbs, c0, c1, packed, N, first, bias, y)
    switch (wtype) { /* a constant type in the inner loops; the codebook and grid types as Q8_0 */
    case WT_Q4_0: AMX_CASE(WT_Q4_0);
    case WT_Q4_1: AMX_CASE(WT_Q4_1);
    case WT_Q5_0: AMX_CASE(WT_Q5_0);
    case WT_Q4_K: AMX_CASE(WT_Q4_K);
    case WT_Q5_K: AMX_CASE(WT_Q5_K);
    case WT_Q6_K: AMX_CASE(WT_Q6_K);
    case WT_Q4_0 | WT_HALF_SCALES: AMX_CASE(WT_Q4_0 | WT_HALF_SCALES);
    case WT_Q4_1 | WT_HALF_SCALES: AMX_CASE(WT_Q4_1 | WT_HALF_SCALES);
    case WT_Q5_0 | WT_HALF_SCALES: AMX_CASE(WT_Q5_0 | WT_HALF_SCALES);
    case WT_Q8_0 | WT_HALF_SCALES: AMX_CASE(WT_Q8_0 | WT_HALF_SCALES);
    default: AMX_CASE(WT_Q8_0);
    }
#undef AMX_CASE
}

/* limb_matmul_many's groups (xr: the rows' limbs) on tiles where the CPU has AMX and M is large
 * enough: 1 when done, 0 when the call is the vector steps' (few rows, no AMX, no memory for the
 * rows' tiles). A chunk whose buffers cannot be had is done by the vector steps (the same bits). */
/* The types whose groups amx_chunk takes (the codebook and grid types as the Q8_0 groups they
 * expand to); the others' calls stay with the vector steps. */
static inline int amx_takes(int wtype) {
    wtype = wtype_half(wtype) && wtype_code(wtype) != WT_Q5_1 ? wtype_code(wtype) : wtype; /* fp16 scales too */
    return wtype == WT_Q4_0 || wtype == WT_Q4_1 || wtype == WT_Q5_0 || wtype == WT_Q8_0 || wtype == WT_Q4_K ||
           wtype == WT_Q5_K || wtype == WT_Q6_K || wtype_codebook(wtype) || wtype_grid(wtype);
}

static int amx_matmul(const limb_rows *xr, int64_t M, int64_t nb, int limbs, int wtype, int t, int n,
                      const uint8_t *const *packed, const int64_t *N, const int64_t *first, const float *const *bias,
                      float *const *y, int nthreads) {
    if (!amx_takes(wtype)) return 0;
    const uint8_t *tiles = amx_pack(xr, M, nb, limbs, nthreads);
    if (!tiles) return 0;
    int64_t groups = first[n], size = (AMX_CHUNK_BYTES / 512) / nb; /* a chunk's B tiles in AMX_CHUNK_BYTES */
    size = size < 1 ? 1 : size > AMX_CHUNK ? AMX_CHUNK : size;
    int64_t chunks = (groups + size - 1) / size;
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1) if (chunks > 1)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t c0 = c * size, c1 = c0 + size < groups ? c0 + size : groups;
        if (!amx_chunk(wtype, tiles, M, nb, limbs, c0, c1, packed, N, first, bias, y))
            for (int64_t g = c0; g < c1; g++) {
                int i = 0;
                while (g >= first[i + 1]) i++;
                limb_group(xr, M, nb, limbs, wtype, t, 0, packed[i], g - first[i], N[i], bias[i], y[i]);
            }
    }
    return 1;
}

#endif
