/*
 * K-quant super-blocks (Q4_K, Q5_K, Q6_K) rearranged at load, exactly, into the layout the
 * kernels read (matmul.c dequantises it, q8.c packs it further).
 *
 * A super-block holds 256 weights in 8 sub-blocks of 32; the kernels dequantise one sub-block at
 * a time, so each is given its quants contiguously, and the fp16 scales are widened to fp32
 * (exact). Per super-block (sizes: strata_wtypes):
 *   Q4_K: d f32, dmin f32, sc u8[8], m u8[8], then per sub-block 16 bytes of nibbles: byte i
 *         holds element i (low) and element i + 16 (high).
 *   Q5_K: as Q4_K, then per sub-block 4 bytes: bit i of that 32-bit little-endian word is
 *         element i's fifth bit.
 *   Q6_K: d f32, sc i8[16], then q - 32 as int8 for all 256 elements.
 * The values the kernels form from these are gguf-py's, bit for bit (test_quants.py).
 */
#include "internal.h"

/* fp16 -> fp32, exact (normal, subnormal, zero, inf and NaN with its payload), on every target. */
static inline float f16_to_f32(const uint8_t *p) {
    uint32_t h = (uint32_t)p[0] | (uint32_t)p[1] << 8;
    uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 31u, man = h & 1023u, bits;
    if (exp == 31u)
        bits = sign | 0x7F800000u | man << 13;
    else if (exp != 0u)
        bits = sign | (exp + 112u) << 23 | man << 13;
    else { /* zero or subnormal: man * 2^-24, exact in fp32 */
        float v = (float)man * 5.9604644775390625e-08f;
        memcpy(&bits, &v, 4);
        bits |= sign;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* The 8 six-bit scales and mins of Q4_K/Q5_K, packed in 12 bytes (llama.cpp's get_scale_min_k4). */
static void kquant_scale_min(const uint8_t *s, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63, mn[j] = s[j + 4] & 63;
        sc[j + 4] = (uint8_t)((s[j + 8] & 15) | ((s[j] >> 2) & 0x30));
        mn[j + 4] = (uint8_t)((s[j + 8] >> 4) | ((s[j + 4] >> 2) & 0x30));
    }
}

static void kquant_block(int wtype, const uint8_t *src, uint8_t *dst) {
    if (wtype == WT_Q6_K) { /* file: ql[128], qh[64], sc i8[16], d f16 */
        const uint8_t *ql = src, *qh = src + 128;
        float d = f16_to_f32(src + 208);
        memcpy(dst, &d, 4);
        memcpy(dst + 4, src + 192, 16);
        int8_t *q = (int8_t *)(dst + 20);
        for (int n = 0; n < 2; n++) /* element 128n + 32s + l: ql nibble s & 1 of byte 64n + 32(s >> 1) + l */
            for (int s = 0; s < 4; s++)
                for (int l = 0; l < 32; l++) {
                    int low = (ql[64 * n + 32 * (s & 1) + l] >> (4 * (s >> 1))) & 15;
                    int high = (qh[32 * n + l] >> (2 * s)) & 3;
                    q[128 * n + 32 * s + l] = (int8_t)((low | high << 4) - 32);
                }
        return;
    }
    /* Q4_K, Q5_K. file: d f16, dmin f16, scales[12], (Q5_K: qh[32]), qs[128] */
    float d = f16_to_f32(src), dmin = f16_to_f32(src + 2);
    memcpy(dst, &d, 4);
    memcpy(dst + 4, &dmin, 4);
    kquant_scale_min(src + 4, dst + 8, dst + 16);
    const uint8_t *qs = src + (wtype == WT_Q5_K ? 48 : 16);
    for (int j = 0; j < 8; j++) { /* sub-block j: nibble j & 1 of bytes 32 (j >> 1) .. + 31 */
        const uint8_t *b = qs + 32 * (j >> 1);
        int shift = 4 * (j & 1);
        for (int i = 0; i < 16; i++)
            dst[24 + 16 * j + i] = (uint8_t)(((b[i] >> shift) & 15) | ((b[i + 16] >> shift) & 15) << 4);
    }
    if (wtype == WT_Q5_K) { /* file: bit j of qh[t] is element t of sub-block j's fifth bit */
        const uint8_t *qh = src + 16;
        for (int j = 0; j < 8; j++) {
            uint32_t word = 0;
            for (int t = 0; t < 32; t++) word |= (uint32_t)((qh[t] >> j) & 1) << t;
            for (int c = 0; c < 4; c++) dst[block_bytes(WT_Q4_K) + 4 * j + c] = (uint8_t)(word >> (8 * c));
        }
    }
}

/* n super-blocks of a K-quant tensor as stored in the file -> the kernels' layout. */
void strata_kquant_pack(int wtype, const uint8_t *src, int64_t n, uint8_t *dst, int nthreads) {
    int64_t in = strata_wtypes[wtype].stored_bytes, out = block_bytes(wtype);
#pragma omp parallel for num_threads(nthreads) schedule(static) if (n >= 256)
    for (int64_t b = 0; b < n; b++) kquant_block(wtype, src + b * in, dst + b * out);
}
