/* gpu/quant.h - ggml-compatible weight formats: block layouts, (de)quantizers, f16/bf16.
 *
 * Types are the GGUF numbers of enum cairn__ggml_type (gpu/gguf.h): F32, F16, BF16, Q8_0,
 * Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS. Block layouts are
 * bit-for-bit those of ggml, so tensors read from any GGUF file dequantize to exactly what
 * llama.cpp would compute, and files written by the test writer with cairn__quant_row load in
 * llama.cpp.
 */
#ifndef CAIRN_GPU_QUANT_H
#define CAIRN_GPU_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h> /* memcpy in the inline readers below */

#ifdef __cplusplus
extern "C" {
#endif

#define CAIRN__QK8_0 32 /* weights per Q8_0 / Q4_0 block */
#define CAIRN__QK4_0 32
#define CAIRN__QK_K 256 /* weights per K-quant super-block */

/* The block structs, exactly as ggml lays them out (no padding: every member is a byte array
 * or a uint16_t at an even offset). f16 fields are raw IEEE half bits. */
typedef struct {
    uint16_t d;              /* scale */
    int8_t qs[CAIRN__QK8_0]; /* value = qs[i] * d */
} cairn__block_q8_0;         /* 34 bytes */

typedef struct {
    uint16_t d;                   /* scale */
    uint8_t qs[CAIRN__QK4_0 / 2]; /* element i in the low nibble of qs[i], i+16 in the high */
} cairn__block_q4_0;              /* 18 bytes; value = (q - 8) * d */

typedef struct {
    uint16_t d;                   /* scale */
    uint16_t m;                   /* the block's minimum */
    uint8_t qs[CAIRN__QK4_0 / 2]; /* as in Q4_0 */
} cairn__block_q4_1;              /* 20 bytes; value = q * d + m */

/* Q5_0 / Q5_1: Q4_0 / Q4_1 with a fifth bit per weight, bit i of the little-endian 32-bit qh
 * being the high bit of element i (so bits 0..15 go with the low nibbles, 16..31 the high). */
typedef struct {
    uint16_t d;                   /* scale */
    uint8_t qh[4];                /* the high bits */
    uint8_t qs[CAIRN__QK4_0 / 2]; /* the low 4 bits, as in Q4_0 */
} cairn__block_q5_0;              /* 22 bytes; value = (q - 16) * d */

typedef struct {
    uint16_t d;                   /* scale */
    uint16_t m;                   /* the block's minimum */
    uint8_t qh[4];                /* the high bits */
    uint8_t qs[CAIRN__QK4_0 / 2]; /* the low 4 bits */
} cairn__block_q5_1;              /* 24 bytes; value = q * d + m */

/* Q2_K: 16 sub-blocks of 16, each with a 4-bit scale (low nibble of scales[s]) and a 4-bit min
 * (high nibble), 2-bit quants laid out as Q3_K's low 2 bits: element 32g + l takes bits
 * 2(g % 4).. of qs[32(g / 4) + l]. */
typedef struct {
    uint8_t scales[CAIRN__QK_K / 16]; /* scale | min << 4 per sub-block */
    uint8_t qs[CAIRN__QK_K / 4];      /* the 2-bit quants */
    uint16_t d;                       /* super-block scale for the scales */
    uint16_t dmin;                    /* super-block scale for the mins */
} cairn__block_q2_K;                  /* 84 bytes; value = d * sc * q - dmin * m */

/* Q3_K: 16 sub-blocks of 16 with a 6-bit scale each (minus 32), 3-bit quants (minus 4). Element
 * 32g + l (group g of 32, l < 32) takes bits 2(g % 4).. of qs[32(g / 4) + l] and bit g of
 * hmask[l] as its third bit; its scale is that of sub-block (32g + l) / 16. */
typedef struct {
    uint8_t hmask[CAIRN__QK_K / 8]; /* the third bits */
    uint8_t qs[CAIRN__QK_K / 4];    /* the low 2 bits */
    uint8_t scales[12];             /* 16 scales of 6 bits, packed (cairn__q3_K_scales) */
    uint16_t d;                     /* super-block scale */
} cairn__block_q3_K;                /* 110 bytes; value = d * (sc - 32) * (q - 4) */

/* The 16 stored scales (6 bits, 0..63: the scale plus 32) of a Q3_K block from its 12 packed bytes
 * s: scale k has its low 4 bits in the low (k < 8) or high (k >= 8) nibble of s[k % 8] and its
 * high 2 bits at bit 2 (k / 4) of s[8 + k % 4]. Four scales a 32-bit word (byte j of word i is
 * scale 4i + j, the files' little-endian order), as ggml unpacks them: the kernels call this once
 * per 256 weights. */
static inline void cairn__q3_K_scales_u6(const uint8_t *s, uint8_t u[16])
{
    uint32_t a0, a1, t;
    memcpy(&a0, s, 4);
    memcpy(&a1, s + 4, 4);
    memcpy(&t, s + 8, 4);
    const uint32_t m4 = 0x0F0F0F0Fu, m2 = 0x03030303u;
    const uint32_t w[4] = {(a0 & m4) | ((t & m2) << 4), (a1 & m4) | (((t >> 2) & m2) << 4),
                           ((a0 >> 4) & m4) | (((t >> 4) & m2) << 4),
                           ((a1 >> 4) & m4) | (((t >> 6) & m2) << 4)};
    memcpy(u, w, 16);
}

/* The 16 scales of a Q3_K block as signed values (the stored 6 bits minus 32). */
static inline void cairn__q3_K_scales(const uint8_t *s, int sc[16])
{
    uint8_t u[16];
    cairn__q3_K_scales_u6(s, u);
    for (int k = 0; k < 16; k++)
        sc[k] = u[k] - 32;
}

typedef struct {
    uint16_t d;                  /* super-block scale for the 6-bit sub-block scales */
    uint16_t dmin;               /* super-block scale for the 6-bit sub-block mins */
    uint8_t scales[12];          /* 8 scales + 8 mins, 6 bits each, packed */
    uint8_t qs[CAIRN__QK_K / 2]; /* 4-bit quants: 64-element chunk c uses qs[32c..32c+31],
                                    low nibbles first 32, high nibbles next 32 */
} cairn__block_q4_K;             /* 144 bytes; value = d*sc[j]*q - dmin*m[j], j = i/32 */

/* Q4_K with a fifth bit per weight: element 32j + l (sub-block j) has bit j of qh[l] on top of
 * its nibble (the nibbles laid out as in Q4_K) */
typedef struct {
    uint16_t d;    /* as in Q4_K: the super-block scales and the packed 6-bit */
    uint16_t dmin; /* sub-block scales and mins */
    uint8_t scales[12];
    uint8_t qh[CAIRN__QK_K / 8]; /* the fifth bits */
    uint8_t qs[CAIRN__QK_K / 2]; /* the low 4 bits, as Q4_K's qs */
} cairn__block_q5_K;             /* 176 bytes; value = d*sc[j]*q - dmin*m[j], j = i/32 */

typedef struct {
    uint8_t ql[CAIRN__QK_K / 2];     /* low 4 bits of the 6-bit quants */
    uint8_t qh[CAIRN__QK_K / 4];     /* high 2 bits */
    int8_t scales[CAIRN__QK_K / 16]; /* one int8 scale per 16 weights */
    uint16_t d;                      /* super-block scale */
} cairn__block_q6_K;                 /* 210 bytes; value = d * scales[i/16] * (q - 32) */

/* IQ4_NL: Q4_0's layout with a non-linear code book: the 4-bit index picks one of 16 int8 levels
 * (cairn__iq4nl_values, ggml's kvalues_iq4nl), denser near zero where weights cluster. */
typedef struct {
    uint16_t d;                   /* scale */
    uint8_t qs[CAIRN__QK4_0 / 2]; /* element i in the low nibble of qs[i], i+16 in the high */
} cairn__block_iq4_nl;            /* 18 bytes; value = d * cairn__iq4nl_values[q] */

/* The 16 levels of IQ4_NL, ascending (ggml's kvalues_iq4nl). */
extern const int8_t cairn__iq4nl_values[16];

/* IQ4_XS: IQ4_NL's levels in super-blocks of 256: 8 sub-blocks of 32, each laid out as an IQ4_NL
 * block's quants, with a 6-bit scale (minus 32): low 4 bits in nibble ib % 2 of scales_l[ib / 2],
 * high 2 bits at bit 2 ib of scales_h. */
typedef struct {
    uint16_t d;                         /* super-block scale */
    uint16_t scales_h;                  /* the scales' high bits */
    uint8_t scales_l[CAIRN__QK_K / 64]; /* the scales' low bits */
    uint8_t qs[CAIRN__QK_K / 2];        /* sub-block ib: qs[16 ib..], as an IQ4_NL block's */
} cairn__block_iq4_xs; /* 136 bytes; value = d * (sc - 32) * cairn__iq4nl_values[q] */

/* The scale of sub-block ib (0..7) of the IQ4_XS block at w (any alignment), minus 32. */
static inline int cairn__iq4_xs_scale(const uint8_t *w, int ib)
{
    uint16_t h;
    memcpy(&h, w + offsetof(cairn__block_iq4_xs, scales_h), 2);
    const uint8_t l = w[offsetof(cairn__block_iq4_xs, scales_l) + ib / 2];
    return (((l >> (4 * (ib % 2))) & 0xF) | (((h >> (2 * ib)) & 3) << 4)) - 32;
}

/* A weight matrix W (rows, cols), row-major in its ggml storage type: `rows` rows of `cols`
 * elements each, row r starting at data + r * row_bytes (a ggml tensor with ne = [cols, rows]).
 * Here, beside the block layouts, because the model (gpu/model.h) and every backend (gpu/cpu/,
 * gpu/cuda/) share it. */
typedef struct {
    uint32_t type;      /* enum cairn__ggml_type */
    int64_t rows, cols; /* cols is a multiple of the type's block size */
    size_t row_bytes;
    const uint8_t *data;
} cairn__mat;

/* Elements per block of type (1 for F32/F16/BF16), 0 if the type is not supported here. */
uint64_t cairn__quant_block_elems(uint32_t type);
/* Bytes per block of type, 0 if not supported. */
uint64_t cairn__quant_block_bytes(uint32_t type);
/* 1 if this file can (de)quantize type. */
int cairn__quant_supported(uint32_t type);

/* Dequantizes n elements (a multiple of the block size; a trailing partial block is ignored)
 * from src into dst. Any supported type; an unsupported type writes zeros. */
void cairn__dequant_row(uint32_t type, const void *src, float *dst, uint64_t n);
/* Quantizes n elements (a multiple of the block size) with the reference round-to-nearest
 * quantizers. Returns 0, CAIRN_EUNSUPPORTED for an unknown type, CAIRN_EINVAL if n is not a
 * multiple of the block size. dst must hold n / block_elems * block_bytes bytes. */
int cairn__quant_row(uint32_t type, const float *src, void *dst, uint64_t n);

/* IEEE half and bfloat16 conversions (round to nearest even; NaN stays NaN). */
float cairn__f16_to_f32(uint16_t h);
/* The same as cairn__f16_to_f32, inlinable: kernels convert one block scale per 32 weights and
 * a function call per block costs more than the block's arithmetic. */
static inline float cairn__f16_to_f32_inline(uint16_t h)
{
    union {
        uint32_t u;
        float f;
    } v;
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) {
        v.u = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        v.f = (float)man * 5.9604644775390625e-8f; /* subnormal or zero: exact */
        v.u |= sign;
    } else {
        v.u = sign | ((exp + 112) << 23) | (man << 13);
    }
    return v.f;
}
/* The f16 at p as a float, whatever p's alignment: tensor data in a valid file with
 * general.alignment = 1 can sit at an odd address, where reading a uint16_t block member is
 * undefined (UBSan flags it, strict-alignment targets fault). */
static inline float cairn__f16_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return cairn__f16_to_f32_inline(h);
}
uint16_t cairn__f32_to_f16(float f);
float cairn__bf16_to_f32(uint16_t h);
uint16_t cairn__f32_to_bf16(float f);

#ifdef __cplusplus
}
#endif

#endif
