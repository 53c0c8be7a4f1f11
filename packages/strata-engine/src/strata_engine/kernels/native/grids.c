/* The grid types held as stored (IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S: WP_GRID), each 32 of their values
 * decoded to the Q8_0 block the loader once rewrote them as (transcode.py): the scale of the 32
 * and their integers, value = scale * q exactly (gguf-py's values). Every arithmetic reads them
 * through grid_group: the fp32 matmul multiplies out the products, the integer kernels expand a
 * group of rows into Q8_0's packed bytes per call (q8.c's expand_group), so every arithmetic
 * gives the bits of those Q8_0 blocks, with the file's own 1.56 to 3.44 bits a weight held. */
#include "internal.h"
#include "iq_grids.h"

/* The 8 signs of an IQ2_XXS / IQ3_XXS set: 7 stored bits, the eighth their parity (gguf-py's
 * ksigns table). */
static inline uint32_t parity_signs(uint32_t s7) { return s7 | (uint32_t)(__builtin_popcount(s7) & 1) << 7; }

/* The integers of 8 values (4 for the IQ3 grids) from their grid entry and sign bits. */
static inline void signed_entry(int8_t *q, uint32_t entry, uint32_t signs, int wtype) {
    for (int i = 0; i < 4; i++) {
        int c = (int)(entry >> (3 * i)) & 7;
        int v = wtype == WT_IQ3_XXS ? 4 + 8 * c + 2 * (c == 7) : 1 + 2 * c; /* 4, 12, .., 52, 62; 1, 3, .., 15 */
        q[i] = (int8_t)((signs >> i) & 1 ? -v : v);
    }
}

/* See internal.h. */
float grid_group(int wtype, const uint8_t *row, int64_t g, int8_t q[32]) {
    const uint8_t *blk = row + (g >> 3) * block_bytes(wtype);
    int j = (int)(g & 7);
    float d = f16_at(blk), scale;
    uint32_t aux;
    if (wtype == WT_IQ2_XXS) { /* per 32: 4 grid indices, then a u32 of 4 x 7 sign bits and the scale */
        const uint8_t *qs = blk + 2 + 8 * j;
        memcpy(&aux, qs + 4, 4);
        for (int k = 0; k < 4; k++) {
            uint32_t entry = iq2xxs_grid[qs[k]], signs = parity_signs((aux >> (7 * k)) & 127);
            for (int i = 0; i < 8; i++) {
                int c = (int)(entry >> (2 * i)) & 3, v = 8 + 17 * c + (c >> 1); /* 8, 25, 43 */
                q[8 * k + i] = (int8_t)((signs >> i) & 1 ? -v : v);
            }
        }
        scale = d * (0.5f + (float)(aux >> 28)) * 0.25f;
    } else if (wtype == WT_IQ3_XXS) { /* qs[64]: 8 indices per 32; then a u32 per 32 as IQ2_XXS's */
        const uint8_t *qs = blk + 2 + 8 * j;
        memcpy(&aux, blk + 66 + 4 * j, 4);
        for (int k = 0; k < 8; k++)
            signed_entry(q + 4 * k, iq3xxs_grid[qs[k]], parity_signs((aux >> (7 * (k >> 1))) & 127) >> (4 * (k & 1)), wtype);
        scale = d * (0.5f + (float)(aux >> 28)) * 0.5f;
    } else if (wtype == WT_IQ3_S) { /* qs[64] low index bits, qh[8] ninth bits, signs[32], scales[4] nibbles */
        const uint8_t *qs = blk + 2 + 8 * j, *signs = blk + 74 + 4 * j;
        for (int k = 0; k < 8; k++) {
            uint32_t index = qs[k] | ((uint32_t)(blk[66 + j] >> k) & 1) << 8;
            signed_entry(q + 4 * k, iq3s_grid[index], (uint32_t)signs[k >> 1] >> (4 * (k & 1)), wtype);
        }
        scale = d * (1.0f + 2.0f * (float)((blk[106 + j / 2] >> (4 * (j & 1))) & 15));
    } else { /* IQ1_S: qs[32] low index bits; per 32 a u16: 4 x 3 high bits, the scale, the delta's sign */
        uint16_t qh;
        memcpy(&qh, blk + 34 + 2 * j, 2);
        int delta = qh & 0x8000 ? -1 : 1; /* value = dl * (grid +- 1/8): eighths of dl, 8 grid +- 1 */
        for (int k = 0; k < 4; k++) {
            uint32_t entry = iq1s_grid[blk[2 + 4 * j + k] | ((qh >> (3 * k)) & 7) << 8];
            for (int i = 0; i < 8; i++) q[8 * k + i] = (int8_t)(8 * ((int)(entry >> (2 * i)) & 3) - 8 + delta);
        }
        scale = d * (2.0f * (float)((qh >> 12) & 7) + 1.0f) * 0.125f;
    }
    /* a zero scale's products are zeros signed by q: the rewrite kept them as q = +-1 (no q is 0) */
    if (scale == 0.0f)
        for (int i = 0; i < 32; i++) q[i] = (int8_t)(q[i] < 0 ? -1 : 1);
    return scale;
}
