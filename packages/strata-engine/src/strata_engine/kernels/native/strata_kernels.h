/*
 * Strata's kernel library: every function it exports, every type code and every struct that
 * crosses into it, stated once, grouped by the C file that defines it. Every kernel file includes
 * this header (through internal.h; cpu_features.c directly), so the compiler holds their
 * definitions to it; the Python side binds the library from it
 * (native/header.py parses it: one declaration per statement, the types below only).
 *
 * The parser reads: enum NAME { CONSTANT = integer, ... };   typedef struct { TYPE field, ...; } NAME;
 * function declarations  RESULT strata_NAME(TYPE arg, ...);  with TYPE one of void, int,
 * int32_t, int64_t, float, a pointer to any of those or to uint8_t / int8_t / a struct below,
 * and const char * (a string result); and tables of int32_t structs indexed by an enum's codes:
 * static const STRUCT NAME[] = { [CONSTANT] = {VALUE, ...}, ... };  each VALUE an integer or
 * constants or'ed (A | B).
 */
#ifndef STRATA_KERNELS_H
#define STRATA_KERNELS_H

#include <stdint.h>

/* A weight's kernel type: the GGML type id of the stored type (weights.py's NATIVE_TYPES). */
enum strata_wtype {
    WT_F32 = 0, WT_F16 = 1, WT_Q4_0 = 2, WT_Q4_1 = 3, WT_Q5_0 = 6, WT_Q5_1 = 7, WT_Q8_0 = 8, WT_Q2_K = 10,
    WT_Q3_K = 11, WT_Q4_K = 12, WT_Q5_K = 13, WT_Q6_K = 14, WT_IQ2_XXS = 16, WT_IQ2_XS = 17, WT_IQ3_XXS = 18, WT_IQ1_S = 19,
    WT_IQ4_NL = 20, WT_IQ3_S = 21, WT_IQ2_S = 22, WT_IQ4_XS = 23, WT_IQ1_M = 29, WT_BF16 = 30, WT_MXFP4 = 39
};
/* How a type's blocks as stored become the layout matmul.c reads, at load (weights.py): kept as
 * they are, kept as they are with their leading fp16 scale fields read as fp32 where read
 * (WP_WIDEN: the loader's weights carry WT_HALF_SCALES; kernel_bytes is the layout with those
 * fields widened to fp32, which the kernels read too and the GPU reads), rearranged by strata_kquant_pack,
 * (4-bit codebook types) each 32 values as their fp32 scale and their 16 bytes of 4-bit
 * codebook indices (transcode.py's codebook_blocks; 20 bytes: kernel_bytes, the GPU's; the loader
 * holds all three as stored with WT_HALF_SCALES), or (grid types) kept as they are
 * where every block's scale is finite, else widened to fp32 (transcode.py's grid_blocks; IQ2_XS,
 * IQ2_S, Q3_K and IQ1_M too, each 16 values' scale a small integer times the super-block's d). */
enum strata_wpack { WP_STORED = 0, WP_WIDEN = 1, WP_KQUANT = 2, WP_CODEBOOK = 3, WP_GRID = 4 };
/* The arithmetics that read a type: the fp32 matmul (matmul.c), 8-bit activations (q8.c), integer
 * limbs (limb.c); the last two on q8.c's repacking (strata_q8_pack). */
enum strata_wreads { READS_FP32 = 1, READS_Q8 = 2, READS_LIMB = 4 };

/* One row of strata_wtypes: a weight type's blocks, in the file and in the kernels. */
typedef struct {
    int32_t values;       /* weights a block */
    int32_t stored_bytes; /* bytes a block in the GGUF file (gguf-py's GGML_QUANT_SIZES) */
    int32_t kernel_bytes; /* bytes a block in the layout matmul.c reads, after `pack` at load */
    int32_t scale_fields; /* fp16 scale (and min) fields a block (WP_WIDEN: read as stored or widened) */
    int32_t pack;         /* enum strata_wpack */
    int32_t reads;        /* enum strata_wreads, or'ed */
} strata_wtype_row;

/*
 * The one table of weight types, indexed by type code (a code without a row reads as zeros: no
 * kernel reads it). Every size the C and Python sides use comes from here (native/header.py
 * parses it; weight_types.py gives it to Python and Triton); adding a type is a row here, its
 * unpacking in matmul.c's dequant_block, its packer where pack is WP_KQUANT, and its Triton
 * dequantisation (docs/engine.md, "Adding a weight type").
 */
static const strata_wtype_row strata_wtypes[] = {
    [WT_F32] = {1, 4, 4, 0, WP_STORED, READS_FP32},
    [WT_F16] = {1, 2, 2, 0, WP_STORED, READS_FP32},
    [WT_BF16] = {1, 2, 2, 0, WP_STORED, READS_FP32},
    [WT_Q4_0] = {32, 18, 20, 1, WP_WIDEN, READS_FP32 | READS_Q8 | READS_LIMB},
    [WT_Q4_1] = {32, 20, 24, 2, WP_WIDEN, READS_FP32 | READS_Q8 | READS_LIMB},
    [WT_Q5_0] = {32, 22, 24, 1, WP_WIDEN, READS_FP32 | READS_Q8 | READS_LIMB},
    [WT_Q5_1] = {32, 24, 28, 2, WP_WIDEN, READS_FP32 | READS_Q8 | READS_LIMB},
    [WT_Q8_0] = {32, 34, 36, 1, WP_WIDEN, READS_FP32 | READS_Q8 | READS_LIMB},
    [WT_Q2_K] = {256, 84, 84, 0, WP_STORED, READS_FP32 | READS_Q8 | READS_LIMB},
    [WT_Q4_K] = {256, 144, 152, 2, WP_KQUANT, READS_FP32 | READS_Q8 | READS_LIMB},
    [WT_Q5_K] = {256, 176, 184, 2, WP_KQUANT, READS_FP32 | READS_Q8 | READS_LIMB},
    [WT_Q6_K] = {256, 210, 276, 1, WP_KQUANT, READS_FP32 | READS_Q8 | READS_LIMB},
    [WT_IQ4_NL] = {32, 18, 20, 0, WP_CODEBOOK, READS_FP32 | READS_Q8 | READS_LIMB},
    [WT_IQ4_XS] = {256, 136, 160, 0, WP_CODEBOOK, READS_FP32 | READS_Q8 | READS_LIMB},
    [WT_MXFP4] = {32, 17, 20, 0, WP_CODEBOOK, READS_FP32 | READS_Q8 | READS_LIMB},
    [WT_IQ2_XXS] = {256, 66, 66, 0, WP_GRID, READS_FP32 | READS_Q8 | READS_LIMB},
    [WT_IQ3_XXS] = {256, 98, 98, 0, WP_GRID, READS_FP32 | READS_Q8 | READS_LIMB},
    [WT_IQ3_S] = {256, 110, 110, 0, WP_GRID, READS_FP32 | READS_Q8 | READS_LIMB},
    [WT_IQ1_S] = {256, 50, 50, 0, WP_GRID, READS_FP32 | READS_Q8 | READS_LIMB},
    [WT_IQ2_XS] = {256, 74, 74, 0, WP_GRID, READS_FP32 | READS_Q8 | READS_LIMB},
    [WT_IQ2_S] = {256, 82, 82, 0, WP_GRID, READS_FP32 | READS_Q8 | READS_LIMB},
    [WT_Q3_K] = {256, 110, 110, 0, WP_GRID, READS_FP32 | READS_Q8 | READS_LIMB},
    [WT_IQ1_M] = {256, 56, 56, 0, WP_GRID, READS_FP32 | READS_Q8 | READS_LIMB},
};
/* A weight repacked for 8-bit activations (q8.c) has this bit added to its type; with its
 * activations as integer limbs (limb.c), also the limb count shifted left by WT_LIMB_SHIFT.
 * WT_HALF_SCALES added to a WP_WIDEN type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): its blocks as the file
 * stores them (stored_bytes a block, fp16 scale fields), each fp16 field converted to fp32 (an
 * exact conversion) where a kernel reads it, so every arithmetic gives the widened layout's bits;
 * the loader holds them so (weights.py), packed too (q8.c: fp16 scales in the packed groups).
 * Added to IQ4_NL, IQ4_XS or MXFP4 (WP_CODEBOOK) likewise: the file's blocks, IQ4_NL's fp16 d,
 * MXFP4's e8m0 byte E (2^(E - 128), the codebook doubled) and IQ4_XS's 136-byte super-blocks of
 * 256 (fp16 d, 6-bit scales ls, each 32's scale d * (ls - 32)) made fp32 exactly where read
 * (internal.h's codebook_group_scale), the packed groups keeping those bytes (q8.h); the
 * fp32-scale layout's bits. */
enum strata_wflag { WT_HALF_SCALES = 128, WT_Q8_PACKED = 256, WT_LIMB_SHIFT = 9 };
/* What strata_cpu_features reports: the instruction sets this CPU and OS can run. */
enum strata_cpu { HAS_AVX2_FMA = 1, HAS_AVX512 = 2 /* F, BW and VNNI */, HAS_NEON = 4, HAS_AVX_VNNI = 8 };

/*
 * One dense transformer layer, described once at load (fused_layer.py) for strata_layer: the
 * weights and switches of model.py's layer loop. NULL pointers: an absent norm or bias.
 */
typedef struct {
    const float *attn_norm, *ffn_norm, *q_norm, *k_norm, *post_attn_norm, *post_ffn_norm;
    const float *bq, *bk, *bv;
    const uint8_t *wq, *wk, *wv, *wo, *w_gate, *w_up, *w_down;
    int32_t tq, tk, tv, to, t_gate, t_up, t_down; /* weight types */
    int64_t hidden, n_heads, n_kv_heads, head_dim, ffn;
    float eps, scale, softcap;
    int32_t window, gelu;
    const float *rope_cos, *rope_sin;
    int32_t rope_dim, rope_interleaved;
} strata_layer_desc;

/* cpu_features.c (a library of its own, built first) */
int strata_cpu_features(void);

/* common.c; strata_alloc_failures: the kernels' allocations that failed since it was last called
 * (each failed call left its outputs, or a share of them, uncomputed); the count starts again at 0 */
const char *strata_target(void);
int strata_alloc_failures(void);

/* amx.c: whether the limb kernels take many rows' integer sums on AMX tiles (AVX-512 build, a CPU
 * with AMX-INT8, the OS's permission; $STRATA_AMX=0: never). want -1: ask (the first call
 * decides from the CPU and $STRATA_AMX), 0: off, 1: on where the CPU allows; returns the state.
 * The bits are the same either way. */
int strata_amx_use(int want);

/* grids.c: which grid and K-grid types (bit t: weight type code t) the avx512 build decodes without
 * gathers, as the avx2 build does. mask >= 0: set; -1: ask; -2: this CPU's default (AMD's: the types
 * measured faster so; others: none). Bit 30 set: a CPU with AVX512_VBMI decodes IQ2_XXS, IQ3_XXS and
 * IQ3_S at one to four rows as the type's bit says too (clear: by byte permutes, either way). Returns
 * the mask in force; -1 in the other builds (one way a type). -3: whether those byte permutes are in
 * force now (1: a VBMI CPU and bit 30 clear, else 0), nothing set. The bits are the same either way. */
int strata_grid_gather_free(int mask);

/* matmul.c: the fp32 matmul on weights as stored (or repacked: q8.c, limb.c), the embedding gather */
void strata_matmul(const float *x, int64_t M, int64_t K, const uint8_t *w, int wtype, int64_t N,
                   const float *bias, float *y, int nthreads);
void strata_gather_rows(const uint8_t *w, int wtype, int64_t K, const int64_t *ids, int64_t n, float *out);

/* elementwise.c: a row or an element at a time */
void strata_rmsnorm(const float *x, int64_t M, int64_t K, const float *weight, float eps, float *y, int nthreads);
void strata_rope(float *x, int64_t T, int H, int D, int rot, const int32_t *pos, const float *cos_t,
                 const float *sin_t, int interleaved);
void strata_exp(const float *x, int64_t n, float *out);
void strata_silu_mul(const float *gate, const float *up, int64_t n, float *out, int nthreads);
void strata_gelu_mul(const float *gate, const float *up, int64_t n, float *out, int nthreads);
void strata_softcap(const float *x, int64_t n, float cap, float *out);
void strata_swiglu_oai(const float *gate, const float *up, int64_t n, float alpha, float limit, float *out,
                       int nthreads);

/* attention.c: the paged KV cache, and the types its values are stored as (engine --kv-cache-dtype) */
enum strata_kvtype { KV_F32 = 0, KV_BF16 = 1, KV_F16 = 2, KV_Q8_0 = 3 };
void strata_attention(const float *q, int64_t T, int H, int KVH, int D, const void *kc, const void *vc, int kv_type,
                      int block_size, const int32_t *tables, int max_blocks, const int32_t *t_seq,
                      const int32_t *pos, float scale, float softcap, int window, float *out, int nthreads);
void strata_attention_sinks(const float *q, int64_t T, int H, int KVH, int D, const void *kc, const void *vc,
                            int kv_type, int block_size, const int32_t *tables, int max_blocks, const int32_t *t_seq,
                            const int32_t *pos, float scale, float softcap, int window, const float *sinks,
                            float *out, int nthreads);
void strata_kv_write(const float *k, const float *v, int64_t T, int64_t row_floats, const int64_t *slots,
                     void *kc, void *vc, int kv_type, int nthreads);

/* logprobs.c */
void strata_log_softmax(const float *x, int64_t M, int64_t N, float *out, int nthreads);

/* layer.c: one dense layer, composed of the functions above */
void strata_layer(const strata_layer_desc *L, float *x, int64_t T, const int32_t *pos, const int32_t *t_seq,
                  const int32_t *tables, int max_blocks, int block_size, const int64_t *slots, void *kc,
                  void *vc, int kv_type, int nthreads);

/* kquant_pack.c: K-quant blocks as stored -> the kernels' layout */
void strata_kquant_pack(int wtype, const uint8_t *src, int64_t n, uint8_t *dst, int nthreads);

/* q8.c: the opt-in 8-bit-activation kernels */
int strata_q8_supported(int wtype);
int64_t strata_q8_packed_bytes(int wtype, int64_t N, int64_t K);
void strata_q8_pack(int wtype, const uint8_t *w, int64_t N, int64_t K, uint8_t *out, int nthreads);
void strata_q8_dequant_row(int t, const uint8_t *packed, int64_t K, int64_t n, float *out);
void strata_q8_matmul(const float *x, int64_t M, int64_t K, const uint8_t *packed, int wtype, int64_t N,
                      const float *bias, float *y, int nthreads);

/* limb.c: activations as exact integer limbs, on q8's packed weights */
void strata_limb_matmul(const float *x, int64_t M, int64_t K, const uint8_t *packed, int wtype, int64_t N,
                        const float *bias, float *y, int nthreads, int limbs);

/* recurrence.c: hybrid models' DeltaNet recurrence, token by token per sequence and head */
void strata_delta_rule(float *states, const int32_t *slots, int64_t S, const int32_t *starts, const int32_t *counts,
                       const float *q, const float *k, const float *v, const float *decay, const float *beta,
                       int HV, int D, float scale, float *core, const int32_t *cap_row, const int32_t *cap_after,
                       const int32_t *cap_slot, int n_caps, int nthreads);
/* recurrence.c: one DeltaNet layer from its input matmuls' outputs to ssm_out's input */
void strata_delta_net(const float *qkv, const float *z, const float *b, const float *alpha, int64_t T,
                      const float *taps, int d_conv, float *windows, float *states, const int32_t *slots, int64_t S,
                      const int32_t *starts, const int32_t *counts, const int32_t *cap_row, const int32_t *cap_after,
                      const int32_t *cap_slot, int n_caps, const float *dt_bias, const float *ssm_a,
                      const float *norm_w, const int32_t *kh, int NK, int HV, int D, const int64_t *l2_eps_bits,
                      float eps, float scale, float *out, int nthreads);
/* recurrence.c: x * sigmoid(gate), the sigmoid in float64 (exactmath's steps): a hybrid model's gated attention */
void strata_sigmoid_gate(const float *x, const float *gate, int64_t n, float *out, int nthreads);

/* fpmode.c: the IEEE default floating-point modes the kernels assume, set around each step */
int strata_fp_mode(void);
int strata_fp_ieee(int nthreads);
void strata_fp_restore(int mode);

#endif
