/* The grid types held as stored (IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S: WP_GRID), each 32 of their values
 * decoded to the Q8_0 block the loader once rewrote them as (transcode.py): the scale of the 32
 * and their integers, value = scale * q exactly (gguf-py's values). Every arithmetic reads them
 * through grid_group: the fp32 matmul multiplies out the products, the integer kernels expand a
 * group of rows into Q8_0's packed bytes per call (q8.c's expand_group), so every arithmetic
 * gives the bits of those Q8_0 blocks, with the file's own 1.56 to 3.44 bits a weight held. */
#include "internal.h"
#include "iq_grids.h"

#define BYTES(v) (0x0101010101010101ull * (v)) /* v in every byte of a word */

/* Words of 8 (IQ3: 4) bytes, one value a byte, every step within its byte (no carry crosses
 * into the next): the grid codes spread a byte each, their values, the signs applied. */

/* The 8 two-bit codes of a grid entry, code k in byte k. */
static inline uint64_t spread2(uint32_t entry) {
    uint64_t x = entry & 0xFFFFu;
    x = (x | x << 24) & 0x000000FF000000FFull;
    x = (x | x << 12) & 0x000F000F000F000Full;
    return (x | x << 6) & BYTES(3);
}

/* The 4 three-bit codes of an IQ3 grid entry, code k in byte k. */
static inline uint64_t spread3(uint32_t entry) {
    uint64_t x = entry & 0xFFFu;
    x = (x | x << 10) & 0x003F003Full;
    return (x | x << 5) & 0x07070707ull;
}

/* 0xFF in byte i where bit i of s is set (s < 256), 0 elsewhere. */
static inline uint64_t sign_mask(uint32_t s) {
    uint64_t bit = (BYTES(s) & 0x8040201008040201ull) + BYTES(0x7F); /* top bit of byte i: bit i of s */
    return ((bit >> 7) & BYTES(1)) * 0xFF;
}

/* The bytes v (1..127 each) negated where m is 0xFF: 255 - v + 1, no carry. */
static inline uint64_t with_signs(uint64_t v, uint64_t m) { return (v ^ m) + (m & BYTES(1)); }

/* The 8 signs of an IQ2_XXS / IQ3_XXS set: 7 stored bits, the eighth their parity (gguf-py's
 * ksigns table). */
static inline uint32_t parity_signs(uint32_t s7) {
    uint32_t p = s7 ^ s7 >> 4;
    p ^= p >> 2, p ^= p >> 1;
    return s7 | (p & 1) << 7;
}

/* The 4 bytes of an IQ3 entry's values (4, 12, .., 52, 62; IQ3_S 1, 3, .., 15), the word's low half. */
static inline uint64_t iq3_values(int wtype, uint32_t entry) {
    uint64_t c = spread3(entry);
    if (wtype == WT_IQ3_S) return (uint32_t)(BYTES(1) + (c << 1));
    return (uint32_t)(BYTES(4) + (c << 3) + (((c + BYTES(1)) & BYTES(8)) >> 2)); /* code 7: 60 + 2 */
}

/* Each grid entry's values as bytes (IQ3: 4, in the low half) and each sign set as its byte mask
 * (IQ2_XXS / IQ3_XXS: 7 bits and their parity; IQ3_S: 8 bits), made from the codes above once,
 * when the library loads: a word of 8 values is then one load, its signs another. */
static uint64_t iq2xxs_bytes[256], iq1s_bytes[2048], signs7[128], signs8[256];
static uint32_t iq3xxs_bytes[256], iq3s_bytes[512];

__attribute__((constructor)) static void grid_bytes(void) {
    for (int i = 0; i < 256; i++) {
        uint64_t c = spread2(iq2xxs_grid[i]);
        iq2xxs_bytes[i] = BYTES(8) + (c << 4) + c + ((c >> 1) & BYTES(1)); /* 8, 25, 43 */
        iq3xxs_bytes[i] = (uint32_t)iq3_values(WT_IQ3_XXS, iq3xxs_grid[i]);
        signs8[i] = sign_mask((uint32_t)i);
    }
    for (int i = 0; i < 512; i++) iq3s_bytes[i] = (uint32_t)iq3_values(WT_IQ3_S, iq3s_grid[i]);
    for (int i = 0; i < 2048; i++) iq1s_bytes[i] = spread2(iq1s_grid[i]) << 3; /* 8 code: 0, 8, 16 */
    for (int i = 0; i < 128; i++) signs7[i] = sign_mask(parity_signs((uint32_t)i));
}

/* See internal.h. */
float grid_group(int wtype, const uint8_t *row, int64_t g, int8_t q[32]) {
    const uint8_t *blk = row + (g >> 3) * block_bytes(wtype);
    int j = (int)(g & 7);
    float d = f16_at(blk), scale;
    uint32_t aux;
    uint64_t out[4];
    if (wtype == WT_IQ2_XXS) { /* per 32: 4 grid indices, then a u32 of 4 x 7 sign bits and the scale */
        const uint8_t *qs = blk + 2 + 8 * j;
        memcpy(&aux, qs + 4, 4);
        for (int k = 0; k < 4; k++) out[k] = with_signs(iq2xxs_bytes[qs[k]], signs7[(aux >> (7 * k)) & 127]);
        scale = d * (0.5f + (float)(aux >> 28)) * 0.25f;
    } else if (wtype == WT_IQ3_XXS) { /* qs[64]: 8 indices per 32; then a u32 per 32 as IQ2_XXS's */
        const uint8_t *qs = blk + 2 + 8 * j;
        memcpy(&aux, blk + 66 + 4 * j, 4);
        for (int k = 0; k < 4; k++) {
            uint64_t v = iq3xxs_bytes[qs[2 * k]] | (uint64_t)iq3xxs_bytes[qs[2 * k + 1]] << 32;
            out[k] = with_signs(v, signs7[(aux >> (7 * k)) & 127]);
        }
        scale = d * (0.5f + (float)(aux >> 28)) * 0.5f;
    } else if (wtype == WT_IQ3_S) { /* qs[64] low index bits, qh[8] ninth bits, signs[32], scales[4] nibbles */
        const uint8_t *qs = blk + 2 + 8 * j, *signs = blk + 74 + 4 * j;
        uint32_t qh = blk[66 + j];
        for (int k = 0; k < 4; k++) {
            uint32_t lo = qs[2 * k] | (qh >> (2 * k) & 1) << 8, hi = qs[2 * k + 1] | (qh >> (2 * k + 1) & 1) << 8;
            out[k] = with_signs(iq3s_bytes[lo] | (uint64_t)iq3s_bytes[hi] << 32, signs8[signs[k]]);
        }
        scale = d * (1.0f + 2.0f * (float)((blk[106 + j / 2] >> (4 * (j & 1))) & 15));
    } else { /* IQ1_S: qs[32] low index bits; per 32 a u16: 4 x 3 high bits, the scale, the delta's sign */
        uint16_t qh;
        memcpy(&qh, blk + 34 + 2 * j, 2);
        /* value = dl * (grid +- 1/8): eighths of dl, q = 8 grid +- 1 = 8 code - 8 +- 1; q + 128 in
         * each byte (119 to 137), then its top bit flipped */
        uint64_t offset = qh & 0x8000 ? BYTES(119) : BYTES(121);
        for (int k = 0; k < 4; k++)
            out[k] = (iq1s_bytes[blk[2 + 4 * j + k] | ((qh >> (3 * k)) & 7) << 8] + offset) ^ BYTES(0x80);
        scale = d * (2.0f * (float)((qh >> 12) & 7) + 1.0f) * 0.125f;
    }
    memcpy(q, out, 32);
    /* a zero scale's products are zeros signed by q: the rewrite kept them as q = +-1 (no q is 0) */
    if (scale == 0.0f)
        for (int i = 0; i < 32; i++) q[i] = (int8_t)(q[i] < 0 ? -1 : 1);
    return scale;
}
