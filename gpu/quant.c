/* gpu/quant.c - ggml-compatible dequantizers and reference quantizers.
 *
 * The dequantizers are the contract: they must reproduce ggml bit for bit, because the weights
 * come from files produced by llama.cpp's tools. They follow ggml's loop order and float
 * operation order (d * sc computed first, then times q, minus dmin * m) so even rounding matches.
 *
 * The quantizers are simple reference ones (round to nearest, per-block min/max) used by the
 * test writer and the benchmarks (Q4_1 and Q5_1 keep a block's least value as its offset,
 * Q5_0 maps its signed extreme to -16 as Q4_0 maps it to -8); quality only has to be good
 * enough that dequant(quant(x)) stays close to x. The K-quant ones pick each sub-block's scale (and
 * min) from its range and then quantize those scales to 6 bits (Q4_K, Q5_K) or int8 (Q6_K) against
 * a super-block scale, and re-derive the 4/6-bit values from the *quantized* scales, so error does
 * not compound.
 */
#include "gpu/quant.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "gpu/gguf.h"

#include "cairn_errors.h"
_Static_assert(sizeof(cairn__block_q8_0) == 34, "Q8_0 block layout");
_Static_assert(sizeof(cairn__block_q4_0) == 18, "Q4_0 block layout");
_Static_assert(sizeof(cairn__block_q4_1) == 20, "Q4_1 block layout");
_Static_assert(sizeof(cairn__block_q5_0) == 22, "Q5_0 block layout");
_Static_assert(sizeof(cairn__block_q5_1) == 24, "Q5_1 block layout");
_Static_assert(sizeof(cairn__block_q2_K) == 84, "Q2_K block layout");
_Static_assert(sizeof(cairn__block_q3_K) == 110, "Q3_K block layout");
_Static_assert(sizeof(cairn__block_q4_K) == 144, "Q4_K block layout");
_Static_assert(sizeof(cairn__block_q5_K) == 176, "Q5_K block layout");
_Static_assert(sizeof(cairn__block_q6_K) == 210, "Q6_K block layout");
_Static_assert(sizeof(cairn__block_iq4_nl) == 18, "IQ4_NL block layout");
_Static_assert(sizeof(cairn__block_iq4_xs) == 136, "IQ4_XS block layout");

const int8_t cairn__iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113};

/* ---- half / bfloat16 ---------------------------------------------------------------------- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float cairn__f16_to_f32(uint16_t h) { return cairn__f16_to_f32_inline(h); }

uint16_t cairn__f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) /* inf or NaN (keep NaN quiet and non-zero) */
        return (uint16_t)(sign | 0x7c00 | (a > 0x7f800000u ? 0x200 : 0));
    if (a >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00);
    if (a < 0x38800000u) {
        /* result is subnormal (or zero) in half: round a * 2^24 to nearest even integer */
        float v = bits_f32(a) * 16777216.0f; /* exact: a < 2^-14 so v < 2^10 */
        return (uint16_t)(sign | (uint16_t)nearbyintf(v));
    }
    /* normal: rebias exponent, round the 13 dropped mantissa bits to nearest even */
    uint32_t r = a - (112u << 23);
    r += 0xfffu + ((r >> 13) & 1);
    return (uint16_t)(sign | (r >> 13));
}

float cairn__bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t cairn__f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: force quiet, as ggml does */
        return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

/* ---- sizes -------------------------------------------------------------------------------- */

uint64_t cairn__quant_block_elems(uint32_t type)
{
    switch (type) {
    case CAIRN__GGML_F32:
    case CAIRN__GGML_F16:
    case CAIRN__GGML_BF16:
        return 1;
    case CAIRN__GGML_Q8_0:
    case CAIRN__GGML_Q4_0:
    case CAIRN__GGML_Q4_1:
    case CAIRN__GGML_Q5_0:
    case CAIRN__GGML_Q5_1:
    case CAIRN__GGML_IQ4_NL:
        return 32;
    case CAIRN__GGML_Q2_K:
    case CAIRN__GGML_Q3_K:
    case CAIRN__GGML_Q4_K:
    case CAIRN__GGML_Q5_K:
    case CAIRN__GGML_Q6_K:
    case CAIRN__GGML_IQ4_XS:
        return CAIRN__QK_K;
    default:
        return 0;
    }
}

uint64_t cairn__quant_block_bytes(uint32_t type)
{
    switch (type) {
    case CAIRN__GGML_F32:
        return 4;
    case CAIRN__GGML_F16:
    case CAIRN__GGML_BF16:
        return 2;
    case CAIRN__GGML_Q8_0:
        return sizeof(cairn__block_q8_0);
    case CAIRN__GGML_Q4_0:
        return sizeof(cairn__block_q4_0);
    case CAIRN__GGML_Q4_1:
        return sizeof(cairn__block_q4_1);
    case CAIRN__GGML_Q5_0:
        return sizeof(cairn__block_q5_0);
    case CAIRN__GGML_Q5_1:
        return sizeof(cairn__block_q5_1);
    case CAIRN__GGML_Q2_K:
        return sizeof(cairn__block_q2_K);
    case CAIRN__GGML_Q3_K:
        return sizeof(cairn__block_q3_K);
    case CAIRN__GGML_Q4_K:
        return sizeof(cairn__block_q4_K);
    case CAIRN__GGML_Q5_K:
        return sizeof(cairn__block_q5_K);
    case CAIRN__GGML_Q6_K:
        return sizeof(cairn__block_q6_K);
    case CAIRN__GGML_IQ4_NL:
        return sizeof(cairn__block_iq4_nl);
    case CAIRN__GGML_IQ4_XS:
        return sizeof(cairn__block_iq4_xs);
    default:
        return 0;
    }
}

int cairn__quant_supported(uint32_t type) { return cairn__quant_block_elems(type) != 0; }

/* ---- dequantizers ------------------------------------------------------------------------- */

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K block: j < 4 sit in the low 6 bits of
 * bytes j and j+4; j >= 4 are split into a low nibble in byte j+4 and 2 high bits borrowed
 * from the top of bytes j-4 (scale) and j (min). */
static void q4k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* The dequantizers walk the blocks through byte pointers and fetch the f16 scales with
 * cairn__f16_at (any alignment); offsetof keeps the byte offsets tied to the structs above. */

static void dequant_q8_0(const uint8_t *x, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += sizeof(cairn__block_q8_0)) {
        const float d = cairn__f16_at(x + offsetof(cairn__block_q8_0, d));
        const int8_t *qs = (const int8_t *)(x + offsetof(cairn__block_q8_0, qs));
        for (int j = 0; j < 32; j++)
            y[i * 32 + j] = qs[j] * d;
    }
}

static void dequant_q4_0(const uint8_t *x, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += sizeof(cairn__block_q4_0)) {
        const float d = cairn__f16_at(x + offsetof(cairn__block_q4_0, d));
        const uint8_t *qs = x + offsetof(cairn__block_q4_0, qs);
        for (int j = 0; j < 16; j++) {
            const int x0 = (qs[j] & 0x0F) - 8;
            const int x1 = (qs[j] >> 4) - 8;
            y[i * 32 + j] = x0 * d;
            y[i * 32 + j + 16] = x1 * d;
        }
    }
}

static void dequant_q4_1(const uint8_t *x, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += sizeof(cairn__block_q4_1)) {
        const float d = cairn__f16_at(x + offsetof(cairn__block_q4_1, d));
        const float m = cairn__f16_at(x + offsetof(cairn__block_q4_1, m));
        const uint8_t *qs = x + offsetof(cairn__block_q4_1, qs);
        for (int j = 0; j < 16; j++) {
            y[i * 32 + j] = (qs[j] & 0x0F) * d + m;
            y[i * 32 + j + 16] = (qs[j] >> 4) * d + m;
        }
    }
}

/* the 32 high bits of a Q5_0 / Q5_1 block at p, bit i for element i (little-endian) */
static uint32_t q5_high_bits(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Q5_0 (min 0: value (q - 16) * d) or Q5_1 (min 1: q * d + m), in ggml's float operations */
static void dequant_q5(const uint8_t *x, float *y, uint64_t nb, const int min)
{
    const size_t bb = min ? sizeof(cairn__block_q5_1) : sizeof(cairn__block_q5_0);
    const size_t qh_at = min ? offsetof(cairn__block_q5_1, qh) : offsetof(cairn__block_q5_0, qh);
    const size_t qs_at = min ? offsetof(cairn__block_q5_1, qs) : offsetof(cairn__block_q5_0, qs);
    for (uint64_t i = 0; i < nb; i++, x += bb) {
        const float d = cairn__f16_at(x); /* d leads both blocks, m follows it in Q5_1 */
        const float m = min ? cairn__f16_at(x + offsetof(cairn__block_q5_1, m)) : 0.0f;
        const uint32_t qh = q5_high_bits(x + qh_at);
        const uint8_t *qs = x + qs_at;
        for (int j = 0; j < 16; j++) {
            const int x0 = (int)((qs[j] & 0x0F) | (((qh >> j) & 1) << 4)) - (min ? 0 : 16);
            const int x1 = (int)((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - (min ? 0 : 16);
            y[i * 32 + j] = min ? x0 * d + m : x0 * d;
            y[i * 32 + j + 16] = min ? x1 * d + m : x1 * d;
        }
    }
}

/* in ggml's order: per half (128 values), 4 shifts of the 2-bit fields, each 2 sub-blocks of 16
 * with d * sc times the quant less dmin * m */
static void dequant_q2_K(const uint8_t *x, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += sizeof(cairn__block_q2_K)) {
        const float d = cairn__f16_at(x + offsetof(cairn__block_q2_K, d));
        const float min = cairn__f16_at(x + offsetof(cairn__block_q2_K, dmin));
        const uint8_t *q = x + offsetof(cairn__block_q2_K, qs);
        const uint8_t *sc = x + offsetof(cairn__block_q2_K, scales);
        int is = 0;
        for (int n = 0; n < CAIRN__QK_K; n += 128) {
            for (int shift = 0; shift < 8; shift += 2)
                for (int k = 0; k < 32; k += 16) { /* the two sub-blocks of this shift */
                    const float dl = d * (float)(sc[is] & 0xF), ml = min * (float)(sc[is] >> 4);
                    is++;
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * (float)((q[k + l] >> shift) & 3) - ml;
                }
            q += 32;
        }
    }
}

/* in ggml's order: per half (128 values), 4 shifts of the 2-bit fields, each 2 sub-blocks of 16
 * with the scale times the signed quant */
static void dequant_q3_K(const uint8_t *x, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += sizeof(cairn__block_q3_K)) {
        const float d_all = cairn__f16_at(x + offsetof(cairn__block_q3_K, d));
        const uint8_t *q = x + offsetof(cairn__block_q3_K, qs);
        const uint8_t *hm = x + offsetof(cairn__block_q3_K, hmask);
        int sc[16];
        cairn__q3_K_scales(x + offsetof(cairn__block_q3_K, scales), sc);
        int is = 0;
        uint8_t m = 1;
        for (int n = 0; n < CAIRN__QK_K; n += 128) {
            for (int j = 0; j < 4; j++, m = (uint8_t)(m << 1)) {
                const int shift = 2 * j;
                float dl = d_all * (float)sc[is++];
                for (int l = 0; l < 16; l++)
                    *y++ = dl * (float)(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                dl = d_all * (float)sc[is++];
                for (int l = 0; l < 16; l++)
                    *y++ = dl * (float)(((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
            }
            q += 32;
        }
    }
}

/* Q4_K (q5 0) or Q5_K (q5 1: bit j of qh[l] on top of sub-block j's nibble l), whose heads
 * (d, dmin, scales) are the same bytes */
static void dequant_q45_K(const uint8_t *x, float *y, uint64_t nb, const int q5)
{
    const size_t bb = q5 ? sizeof(cairn__block_q5_K) : sizeof(cairn__block_q4_K);
    for (uint64_t i = 0; i < nb; i++, x += bb) {
        const uint8_t *q =
            x + (q5 ? offsetof(cairn__block_q5_K, qs) : offsetof(cairn__block_q4_K, qs));
        const uint8_t *qh = x + offsetof(cairn__block_q5_K, qh);
        const uint8_t *scales = x + offsetof(cairn__block_q4_K, scales);
        const float d = cairn__f16_at(x + offsetof(cairn__block_q4_K, d));
        const float min = cairn__f16_at(x + offsetof(cairn__block_q4_K, dmin));
        int is = 0;
        uint8_t sc, m;
        for (int j = 0; j < CAIRN__QK_K; j += 64) {
            q4k_scale_min(is + 0, scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            q4k_scale_min(is + 1, scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            const int h1 = q5 << is, h2 = q5 << (is + 1); /* 0 for Q4_K: no fifth bit */
            for (int l = 0; l < 32; l++)
                *y++ = d1 * ((q[l] & 0xF) + (qh[l] & h1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * ((q[l] >> 4) + (qh[l] & h2 ? 16 : 0)) - m2;
            q += 32;
            is += 2;
        }
    }
}

static void dequant_q6_K(const uint8_t *x, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += sizeof(cairn__block_q6_K)) {
        const float d = cairn__f16_at(x + offsetof(cairn__block_q6_K, d));
        const uint8_t *ql = x + offsetof(cairn__block_q6_K, ql);
        const uint8_t *qh = x + offsetof(cairn__block_q6_K, qh);
        const int8_t *sc = (const int8_t *)(x + offsetof(cairn__block_q6_K, scales));
        for (int n = 0; n < CAIRN__QK_K; n += 128) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

static void dequant_iq4_nl(const uint8_t *x, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += sizeof(cairn__block_iq4_nl), y += 32) {
        const float d = cairn__f16_at(x + offsetof(cairn__block_iq4_nl, d));
        const uint8_t *qs = x + offsetof(cairn__block_iq4_nl, qs);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)cairn__iq4nl_values[qs[j] & 0xF];
            y[j + 16] = d * (float)cairn__iq4nl_values[qs[j] >> 4];
        }
    }
}

static void dequant_iq4_xs(const uint8_t *x, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += sizeof(cairn__block_iq4_xs)) {
        const float d = cairn__f16_at(x + offsetof(cairn__block_iq4_xs, d));
        const uint8_t *qs = x + offsetof(cairn__block_iq4_xs, qs);
        for (int ib = 0; ib < 8; ib++, qs += 16, y += 32) {
            const float dl = d * (float)cairn__iq4_xs_scale(x, ib);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)cairn__iq4nl_values[qs[j] & 0xF];
                y[j + 16] = dl * (float)cairn__iq4nl_values[qs[j] >> 4];
            }
        }
    }
}

void cairn__dequant_row(uint32_t type, const void *src, float *dst, uint64_t n)
{
    const uint64_t be = cairn__quant_block_elems(type);
    if (be == 0) {
        memset(dst, 0, n * sizeof(float));
        return;
    }
    const uint64_t nb = n / be;
    switch (type) {
    case CAIRN__GGML_F32:
        memcpy(dst, src, n * sizeof(float));
        break;
    case CAIRN__GGML_F16: {
        const uint8_t *s = src;
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i,
                   2); /* GGUF data may be only 2-byte aligned or less in memory files */
            dst[i] = cairn__f16_to_f32(h);
        }
        break;
    }
    case CAIRN__GGML_BF16: {
        const uint8_t *s = src;
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = cairn__bf16_to_f32(h);
        }
        break;
    }
    case CAIRN__GGML_Q8_0:
        dequant_q8_0(src, dst, nb);
        break;
    case CAIRN__GGML_Q4_0:
        dequant_q4_0(src, dst, nb);
        break;
    case CAIRN__GGML_Q4_1:
        dequant_q4_1(src, dst, nb);
        break;
    case CAIRN__GGML_Q5_0:
        dequant_q5(src, dst, nb, 0);
        break;
    case CAIRN__GGML_Q5_1:
        dequant_q5(src, dst, nb, 1);
        break;
    case CAIRN__GGML_Q2_K:
        dequant_q2_K(src, dst, nb);
        break;
    case CAIRN__GGML_Q3_K:
        dequant_q3_K(src, dst, nb);
        break;
    case CAIRN__GGML_Q4_K:
        dequant_q45_K(src, dst, nb, 0);
        break;
    case CAIRN__GGML_Q5_K:
        dequant_q45_K(src, dst, nb, 1);
        break;
    case CAIRN__GGML_Q6_K:
        dequant_q6_K(src, dst, nb);
        break;
    case CAIRN__GGML_IQ4_NL:
        dequant_iq4_nl(src, dst, nb);
        break;
    case CAIRN__GGML_IQ4_XS:
        dequant_iq4_xs(src, dst, nb);
        break;
    default:
        break;
    }
}

/* ---- quantizers --------------------------------------------------------------------------- */

static void quant_q8_0(const float *x, cairn__block_q8_0 *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[i * 32 + j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = cairn__f32_to_f16(d);
        for (int j = 0; j < 32; j++)
            y[i].qs[j] = (int8_t)roundf(x[i * 32 + j] * id);
    }
}

static void quant_q4_0(const float *x, cairn__block_q4_0 *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        /* the signed value of largest magnitude maps to -8, so the asymmetric range [-8, 7]
         * is spent where it matters */
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++) {
            const float v = x[i * 32 + j];
            if (fabsf(v) > amax) {
                amax = fabsf(v);
                max = v;
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = cairn__f32_to_f16(d);
        for (int j = 0; j < 16; j++) {
            const float x0 = x[i * 32 + j] * id, x1 = x[i * 32 + 16 + j] * id;
            int q0 = (int)(x0 + 8.5f), q1 = (int)(x1 + 8.5f);
            q0 = q0 < 0 ? 0 : q0 > 15 ? 15 : q0;
            q1 = q1 < 0 ? 0 : q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* One block of 32 with a minimum (Q4_1, Q5_1): value ~= q * d + m, q in 0..qmax, m the block's
 * least value; q rounded against the f16-rounded d and m the dequantizer will use. */
static void quant_min_block(const float *x, int qmax, uint16_t *d, uint16_t *m, uint8_t q[32])
{
    float lo = x[0], hi = x[0];
    for (int j = 1; j < 32; j++) {
        lo = fminf(lo, x[j]);
        hi = fmaxf(hi, x[j]);
    }
    *d = cairn__f32_to_f16((hi - lo) / (float)qmax);
    *m = cairn__f32_to_f16(lo);
    const float dq = cairn__f16_to_f32(*d), mq = cairn__f16_to_f32(*m);
    for (int j = 0; j < 32; j++)
        q[j] = (uint8_t)(dq > 0.0f ? clampi((int)nearbyintf((x[j] - mq) / dq), 0, qmax) : 0);
}

/* 32 values of 5 bits -> the low nibbles (element j and j+16 in byte j) and the high bits */
static void pack_q5(const uint8_t q[32], uint8_t qs[16], uint8_t qh[4])
{
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
        h |= (uint32_t)(q[j] >> 4) << j | (uint32_t)(q[j + 16] >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; k++)
        qh[k] = (uint8_t)(h >> (8 * k));
}

static void quant_q4_1(const float *x, cairn__block_q4_1 *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        uint8_t q[32];
        quant_min_block(x + i * 32, 15, &y[i].d, &y[i].m, q);
        for (int j = 0; j < 16; j++)
            y[i].qs[j] = (uint8_t)(q[j] | (q[j + 16] << 4));
    }
}

static void quant_q5_0(const float *x, cairn__block_q5_0 *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        /* as Q4_0: the signed value of largest magnitude maps to -16 */
        const float *xb = x + i * 32;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++)
            if (fabsf(xb[j]) > amax) {
                amax = fabsf(xb[j]);
                max = xb[j];
            }
        y[i].d = cairn__f32_to_f16(max / -16.0f);
        const float dq = cairn__f16_to_f32(y[i].d);
        uint8_t q[32];
        for (int j = 0; j < 32; j++)
            q[j] = (uint8_t)(dq != 0.0f ? clampi((int)nearbyintf(xb[j] / dq) + 16, 0, 31) : 16);
        pack_q5(q, y[i].qs, y[i].qh);
    }
}

static void quant_q5_1(const float *x, cairn__block_q5_1 *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        uint8_t q[32];
        quant_min_block(x + i * 32, 31, &y[i].d, &y[i].m, q);
        pack_q5(q, y[i].qs, y[i].qh);
    }
}

/* the value of largest magnitude among x (n), with its sign */
static float signed_extreme(const float *x, int n)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    return max;
}

/* Q2_K as Q4_K with 16 sub-blocks: each sub-block's range [min(x, 0), max] in 4 steps, its
 * scale and min (>= 0) quantized to 4 bits against super-block scales, the quants re-derived
 * from the quantized ones */
static void quant_q2_K(const float *x, cairn__block_q2_K *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        const float *xb = x + i * CAIRN__QK_K;
        float scales[16], mins[16], max_scale = 0.0f, max_min = 0.0f;
        for (int j = 0; j < 16; j++) {
            float lo = 0.0f, hi = xb[16 * j];
            for (int l = 0; l < 16; l++) {
                lo = fminf(lo, xb[16 * j + l]);
                hi = fmaxf(hi, xb[16 * j + l]);
            }
            scales[j] = (hi - lo) / 3.0f;
            mins[j] = -lo;
            max_scale = fmaxf(max_scale, scales[j]);
            max_min = fmaxf(max_min, mins[j]);
        }
        y[i].d = cairn__f32_to_f16(max_scale / 15.0f);
        y[i].dmin = cairn__f32_to_f16(max_min / 15.0f);
        const float dq = cairn__f16_to_f32(y[i].d), dminq = cairn__f16_to_f32(y[i].dmin);
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int j = 0; j < 16; j++) {
            const int ls = dq > 0.0f ? clampi((int)nearbyintf(scales[j] / dq), 0, 15) : 0;
            const int lm = dminq > 0.0f ? clampi((int)nearbyintf(mins[j] / dminq), 0, 15) : 0;
            y[i].scales[j] = (uint8_t)(ls | (lm << 4));
            const float sd = dq * (float)ls, sm = dminq * (float)lm;
            for (int l = 0; l < 16; l++) {
                const int e = 16 * j + l, g = e / 32;
                const int q = sd > 0.0f ? clampi((int)nearbyintf((xb[e] + sm) / sd), 0, 3) : 0;
                y[i].qs[32 * (g / 4) + e % 32] |= (uint8_t)(q << (2 * (g % 4)));
            }
        }
    }
}

/* Q3_K, symmetric as Q6_K: each sub-block's signed extreme maps to quant -4, and the sub-block
 * scale of largest magnitude to -32 */
static void quant_q3_K(const float *x, cairn__block_q3_K *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        const float *xb = x + i * CAIRN__QK_K;
        float scales[16];
        for (int j = 0; j < 16; j++)
            scales[j] = signed_extreme(xb + 16 * j, 16) / -4.0f;
        y[i].d = cairn__f32_to_f16(signed_extreme(scales, 16) / -32.0f);
        const float dq = cairn__f16_to_f32(y[i].d);
        memset(y[i].scales, 0, sizeof y[i].scales);
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int j = 0; j < 16; j++) {
            const int ls = dq != 0.0f ? clampi((int)nearbyintf(scales[j] / dq), -32, 31) : 0;
            const int u = ls + 32; /* the stored 6 bits */
            y[i].scales[j % 8] |= (uint8_t)((u & 0xF) << (4 * (j / 8)));
            y[i].scales[8 + j % 4] |= (uint8_t)((u >> 4) << (2 * (j / 4)));
            const float s = dq * (float)ls;
            for (int l = 0; l < 16; l++) {
                const int e = 16 * j + l, g = e / 32, k = e % 32;
                const int q =
                    (s != 0.0f ? clampi((int)nearbyintf(xb[e] / s), -4, 3) : 0) + 4; /* 0..7 */
                y[i].qs[32 * (g / 4) + k] |= (uint8_t)((q & 3) << (2 * (g % 4)));
                y[i].hmask[k] |= (uint8_t)((q >> 2) << g);
            }
        }
    }
}

/* Q4_K (q5 0: quants 0..15) or Q5_K (q5 1: 0..31, the fifth bits into qh); y: nb blocks */
static void quant_q45_K(const float *x, uint8_t *y, uint64_t nb, const int q5)
{
    const int qmax = q5 ? 31 : 15;
    const size_t bb = q5 ? sizeof(cairn__block_q5_K) : sizeof(cairn__block_q4_K);
    for (uint64_t i = 0; i < nb; i++, y += bb) {
        /* the head is Q4_K's in both types */
        cairn__block_q4_K *hd = (cairn__block_q4_K *)(void *)y;
        const float *xb = x + i * CAIRN__QK_K;
        float scales[8], mins[8]; /* value ~= scale * q - min, min >= 0 */
        float max_scale = 0.0f, max_min = 0.0f;
        for (int j = 0; j < 8; j++) {
            float lo = xb[32 * j], hi = xb[32 * j];
            for (int l = 1; l < 32; l++) {
                lo = fminf(lo, xb[32 * j + l]);
                hi = fmaxf(hi, xb[32 * j + l]);
            }
            if (lo > 0.0f) /* the min is stored as a non-negative offset */
                lo = 0.0f;
            scales[j] = (hi - lo) / (float)qmax;
            mins[j] = -lo;
            max_scale = fmaxf(max_scale, scales[j]);
            max_min = fmaxf(max_min, mins[j]);
        }
        const float d = max_scale / 63.0f, dmin = max_min / 63.0f;
        hd->d = cairn__f32_to_f16(d);
        hd->dmin = cairn__f32_to_f16(dmin);
        /* quantize against the f16-rounded super scales, the ones the dequantizer will use */
        const float dq = cairn__f16_to_f32(hd->d), dminq = cairn__f16_to_f32(hd->dmin);
        uint8_t ls[8], lm[8];
        for (int j = 0; j < 8; j++) {
            ls[j] = (uint8_t)(dq > 0.0f ? clampi((int)nearbyintf(scales[j] / dq), 0, 63) : 0);
            lm[j] = (uint8_t)(dminq > 0.0f ? clampi((int)nearbyintf(mins[j] / dminq), 0, 63) : 0);
        }
        memset(hd->scales, 0, sizeof hd->scales);
        for (int j = 0; j < 8; j++) {
            if (j < 4) {
                hd->scales[j] = ls[j];
                hd->scales[j + 4] = lm[j];
            } else {
                hd->scales[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
                hd->scales[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
                hd->scales[j] |= (uint8_t)((lm[j] >> 4) << 6);
            }
        }
        uint8_t L[CAIRN__QK_K];
        for (int j = 0; j < 8; j++) {
            const float sd = dq * ls[j], sm = dminq * lm[j];
            for (int l = 0; l < 32; l++) {
                const float v = xb[32 * j + l];
                L[32 * j + l] =
                    (uint8_t)(sd > 0.0f ? clampi((int)nearbyintf((v + sm) / sd), 0, qmax) : 0);
            }
        }
        uint8_t *q = y + (q5 ? offsetof(cairn__block_q5_K, qs) : offsetof(cairn__block_q4_K, qs));
        for (int j = 0; j < CAIRN__QK_K; j += 64) {
            for (int l = 0; l < 32; l++)
                q[l] = (uint8_t)((L[j + l] & 0xF) | ((L[j + l + 32] & 0xF) << 4));
            q += 32;
        }
        if (q5) {
            uint8_t *qh = y + offsetof(cairn__block_q5_K, qh);
            memset(qh, 0, CAIRN__QK_K / 8);
            for (int j = 0; j < 8; j++)
                for (int l = 0; l < 32; l++)
                    qh[l] |= (uint8_t)((L[32 * j + l] >> 4) << j);
        }
    }
}

static void quant_q6_K(const float *x, cairn__block_q6_K *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        const float *xb = x + i * CAIRN__QK_K;
        float scales[16], amax_scale = 0.0f;
        for (int j = 0; j < 16; j++) {
            /* symmetric: the signed extreme maps to -32, like Q4_0 uses its -8 */
            float amax = 0.0f, max = 0.0f;
            for (int l = 0; l < 16; l++) {
                const float v = xb[16 * j + l];
                if (fabsf(v) > amax) {
                    amax = fabsf(v);
                    max = v;
                }
            }
            scales[j] = max / -32.0f;
            amax_scale = fmaxf(amax_scale, fabsf(scales[j]));
        }
        const float d = amax_scale / 127.0f;
        y[i].d = cairn__f32_to_f16(d);
        const float dq = cairn__f16_to_f32(y[i].d);
        uint8_t L[CAIRN__QK_K];
        for (int j = 0; j < 16; j++) {
            const int sc = dq > 0.0f ? clampi((int)nearbyintf(scales[j] / dq), -128, 127) : 0;
            y[i].scales[j] = (int8_t)sc;
            const float s = dq * sc;
            for (int l = 0; l < 16; l++) {
                const int q = s != 0.0f ? clampi((int)nearbyintf(xb[16 * j + l] / s), -32, 31) : 0;
                L[16 * j + l] = (uint8_t)(q + 32);
            }
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < CAIRN__QK_K; j += 128) {
            for (int l = 0; l < 32; l++) {
                const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
                ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                  ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
            }
            ql += 64;
            qh += 32;
        }
    }
}

/* the index of the IQ4_NL level nearest v */
static int iq4_nearest(float v)
{
    int best = 0;
    for (int k = 1; k < 16; k++)
        if (fabsf(v - (float)cairn__iq4nl_values[k]) < fabsf(v - (float)cairn__iq4nl_values[best]))
            best = k;
    return best;
}

/* 32 values at x against the scale d (the dequantizer's, f16-rounded) -> 16 bytes of indices,
 * each the nearest level; d 0 picks level 1 (index 8), which times 0 is 0 */
static void iq4_pack(const float *x, float d, uint8_t qs[16])
{
    uint8_t q[32];
    for (int j = 0; j < 32; j++)
        q[j] = (uint8_t)(d != 0.0f ? iq4_nearest(x[j] / d) : 8);
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)(q[j] | (q[j + 16] << 4));
}

/* IQ4_NL: the block's signed extreme maps to the lowest level, -127 (as ggml's reference does
 * before its search for a better scale, which this leaves out) */
static void quant_iq4_nl(const float *x, cairn__block_iq4_nl *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        y[i].d = cairn__f32_to_f16(signed_extreme(x + 32 * i, 32) / (float)cairn__iq4nl_values[0]);
        iq4_pack(x + 32 * i, cairn__f16_to_f32(y[i].d), y[i].qs);
    }
}

/* IQ4_XS: each sub-block's signed extreme would map to level -127 (IQ4_NL's scale), and those 8
 * scales are quantized to 6 bits against a super-block scale, the largest to -32 */
static void quant_iq4_xs(const float *x, cairn__block_iq4_xs *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        const float *xb = x + i * CAIRN__QK_K;
        float scales[8];
        for (int ib = 0; ib < 8; ib++)
            scales[ib] = signed_extreme(xb + 32 * ib, 32) / (float)cairn__iq4nl_values[0];
        y[i].d = cairn__f32_to_f16(signed_extreme(scales, 8) / -32.0f);
        const float dq = cairn__f16_to_f32(y[i].d);
        y[i].scales_h = 0;
        memset(y[i].scales_l, 0, sizeof y[i].scales_l);
        for (int ib = 0; ib < 8; ib++) {
            const int ls = dq != 0.0f ? clampi((int)nearbyintf(scales[ib] / dq), -32, 31) : 0;
            const int u = ls + 32;
            y[i].scales_l[ib / 2] |= (uint8_t)((u & 0xF) << (4 * (ib % 2)));
            y[i].scales_h |= (uint16_t)((u >> 4) << (2 * ib));
            iq4_pack(xb + 32 * ib, dq * (float)ls, y[i].qs + 16 * ib);
        }
    }
}

int cairn__quant_row(uint32_t type, const float *src, void *dst, uint64_t n)
{
    const uint64_t be = cairn__quant_block_elems(type);
    if (be == 0)
        return CAIRN_EUNSUPPORTED;
    if (n % be != 0)
        return CAIRN_EINVAL;
    const uint64_t nb = n / be;
    switch (type) {
    case CAIRN__GGML_F32:
        memcpy(dst, src, n * sizeof(float));
        break;
    case CAIRN__GGML_F16:
        for (uint64_t i = 0; i < n; i++) {
            const uint16_t h = cairn__f32_to_f16(src[i]);
            memcpy((uint8_t *)dst + 2 * i, &h, 2);
        }
        break;
    case CAIRN__GGML_BF16:
        for (uint64_t i = 0; i < n; i++) {
            const uint16_t h = cairn__f32_to_bf16(src[i]);
            memcpy((uint8_t *)dst + 2 * i, &h, 2);
        }
        break;
    case CAIRN__GGML_Q8_0:
        quant_q8_0(src, dst, nb);
        break;
    case CAIRN__GGML_Q4_0:
        quant_q4_0(src, dst, nb);
        break;
    case CAIRN__GGML_Q4_1:
        quant_q4_1(src, dst, nb);
        break;
    case CAIRN__GGML_Q5_0:
        quant_q5_0(src, dst, nb);
        break;
    case CAIRN__GGML_Q5_1:
        quant_q5_1(src, dst, nb);
        break;
    case CAIRN__GGML_Q2_K:
        quant_q2_K(src, dst, nb);
        break;
    case CAIRN__GGML_Q3_K:
        quant_q3_K(src, dst, nb);
        break;
    case CAIRN__GGML_Q4_K:
        quant_q45_K(src, dst, nb, 0);
        break;
    case CAIRN__GGML_Q5_K:
        quant_q45_K(src, dst, nb, 1);
        break;
    case CAIRN__GGML_Q6_K:
        quant_q6_K(src, dst, nb);
        break;
    case CAIRN__GGML_IQ4_NL:
        quant_iq4_nl(src, dst, nb);
        break;
    case CAIRN__GGML_IQ4_XS:
        quant_iq4_xs(src, dst, nb);
        break;
    default:
        return CAIRN_EUNSUPPORTED;
    }
    return 0;
}
