/* tests/model/test_quant.c - ggml block formats: layouts, known bytes, round trips, halves. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gguf.h"
#include "gpu/quant.h"
#include "tests/tap.h"

#include "cairn_errors.h"
static double rel_rms(const float *a, const float *b, int n)
{
    double e = 0, s = 0;
    for (int i = 0; i < n; i++) {
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return sqrt(e / (s > 0 ? s : 1));
}

/* A Q4_K block with d = dmin = 1.0, sub-block j's scale j+1 (+16 for the upper four, to use the
 * sixth bit) and min j (+32), packed as ggml packs 8 6-bit scales and mins into 12 bytes; quants
 * all zero. ls and lm get the scales and mins. */
static void q4k_header(cairn__block_q4_K *bk, uint8_t ls[8], uint8_t lm[8])
{
    memset(bk, 0, sizeof *bk);
    bk->d = 0x3c00;
    bk->dmin = 0x3c00;
    for (int j = 0; j < 8; j++)
        ls[j] = (uint8_t)(j + 1 + (j >= 4 ? 16 : 0)), lm[j] = (uint8_t)(j + (j >= 4 ? 32 : 0));
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            bk->scales[j] = ls[j];
            bk->scales[j + 4] = lm[j];
        } else {
            bk->scales[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            bk->scales[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            bk->scales[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

static void known_blocks(void)
{
    /* Q8_0: d = 0.5 (f16 0x3800), q = i - 16 */
    cairn__block_q8_0 b8;
    b8.d = 0x3800;
    for (int i = 0; i < 32; i++)
        b8.qs[i] = (int8_t)(i - 16);
    float y[256];
    cairn__dequant_row(CAIRN__GGML_Q8_0, &b8, y, 32);
    int good = 1;
    for (int i = 0; i < 32; i++)
        good &= y[i] == 0.5f * (float)(i - 16);
    ok(good, "Q8_0 known block dequantizes to q*d");

    /* Q4_0: d = 2, byte j holds element j (low) and j+16 (high) */
    cairn__block_q4_0 b4;
    b4.d = 0x4000;
    for (int j = 0; j < 16; j++)
        b4.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    cairn__dequant_row(CAIRN__GGML_Q4_0, &b4, y, 32);
    good = 1;
    for (int j = 0; j < 16; j++)
        good &= y[j] == 2.0f * (float)(j - 8) && y[j + 16] == 2.0f * (float)(15 - j - 8);
    ok(good, "Q4_0 known block: low nibbles are elements 0..15, high 16..31");

    /* Q4_K: d = 1, dmin = 1; sub-block j scale j+1 and min j; all quants 3 */
    cairn__block_q4_K bk;
    uint8_t ls[8], lm[8];
    q4k_header(&bk, ls, lm);
    memset(bk.qs, 0x33, sizeof bk.qs);
    cairn__dequant_row(CAIRN__GGML_Q4_K, &bk, y, 256);
    good = 1;
    for (int i = 0; i < 256; i++)
        good &= y[i] == (float)ls[i / 32] * 3.0f - (float)lm[i / 32];
    ok(good, "Q4_K known block: 6-bit scales/mins unpacked per 32-element sub-block");

    /* Q6_K: d = 1, scale of sub-block s = s - 8, all quants 33 (value 1) */
    cairn__block_q6_K b6;
    memset(&b6, 0, sizeof b6);
    b6.d = 0x3c00;
    for (int s = 0; s < 16; s++)
        b6.scales[s] = (int8_t)(s - 8);
    memset(b6.ql, 0x11, sizeof b6.ql); /* low 4 bits 1 */
    memset(b6.qh, 0xAA, sizeof b6.qh); /* high 2 bits 2 -> 32 + 1 = 33 */
    cairn__dequant_row(CAIRN__GGML_Q6_K, &b6, y, 256);
    good = 1;
    for (int i = 0; i < 256; i++)
        good &= y[i] == (float)(i / 16 - 8);
    ok(good, "Q6_K known block: int8 scale per 16 elements, q - 32");
}

/* ---- K-quant layouts against ggml, element by element ------------------------------------- */

/* The known blocks above give every element of a sub-block the same quant, so they check the
 * scale unpacking but not which nibble or bit pair is which element. Here every quant byte
 * differs (a fixed LCG fills them) and the expected value of each of the 256 elements is
 * hard-coded, computed outside this project from ggml's dequantize_row_q4_K and
 * dequantize_row_q6_K (a short Python restatement of those loops):
 *   Q4_K: 64-element chunk c reads qs[32c .. 32c+31]; element 64c+l is the low nibble of
 *         qs[32c+l] (sub-block 2c), element 64c+32+l the high nibble (sub-block 2c+1);
 *         value = d * sc[j] * q - dmin * m[j] with d = dmin = 1, sc[j]/m[j] as in known_blocks.
 *   Q6_K: half h (128 elements) reads ql[64h ..], qh[32h ..], scales[8h ..]; for l < 32,
 *         elements l, l+32, l+64, l+96 are ql[l] low, ql[l+32] low, ql[l] high, ql[l+32] high,
 *         each with bit pair 0, 1, 2, 3 of qh[l] on top; value = d * scales[i/16] * (q - 32).
 * For example Q4_K element 0 is qs[0] = 198 = 0xC6: low nibble 6, scale 1, min 0 -> 6; element
 * 32 is its high nibble 12 in sub-block 1 (scale 2, min 1) -> 23. Q6_K element 0 is ql[0] =
 * 140 = 0x8C low nibble 12 with qh[0] = 83 = 0b01010011 bits 0-1 = 3 -> 60 - 32 = 28, scale 1.
 * A layout error made the same way in quantizer and dequantizer would pass every round trip
 * and still misread real llama.cpp files; it cannot pass these tables. */
/* clang-format off: 16 elements a row */
static const int16_t q4k_want[256] = {
    6,   14,  1,   11,  11,  11,  2,   11,  4,   6,   13,  15,  12,  12,  1,   7,   1,   15,  1,
    14,  6,   2,   15,  7,   7,   6,   7,   9,   10,  8,   12,  9,   23,  13,  15,  11,  7,   29,
    27,  29,  9,   29,  21,  25,  13,  1,   27,  15,  -1,  21,  5,   25,  9,   13,  -1,  7,   11,
    11,  15,  9,   19,  15,  5,   9,   28,  16,  7,   31,  4,   13,  1,   22,  34,  10,  13,  43,
    19,  40,  13,  31,  28,  4,   25,  22,  34,  7,   28,  16,  40,  43,  25,  25,  43,  43,  43,
    16,  53,  17,  1,   25,  49,  29,  37,  49,  9,   17,  17,  5,   9,   37,  21,  17,  49,  -3,
    25,  33,  45,  53,  1,   25,  29,  17,  49,  33,  29,  1,   9,   9,   258, 27,  132, 237, 237,
    174, 258, 90,  174, 48,  90,  258, 216, 153, 237, 258, 279, 90,  -15, -36, -36, 195, 279, -15,
    132, 69,  -36, 69,  153, 216, 27,  237, 271, 51,  117, 51,  -37, 293, 205, 183, 249, 271, 139,
    139, 249, 7,   95,  51,  293, 73,  271, 117, 7,   293, 139, 205, 73,  -37, 161, 227, -37, 249,
    73,  227, 192, 215, 146, 169, 8,   31,  8,   261, 100, 307, 192, 77,  8,   100, 31,  146, 169,
    8,   -15, 284, 238, 8,   146, -15, 238, 8,   100, 77,  -15, 100, 307, 123, 201, 33,  57,  177,
    81,  273, 81,  177, -39, 177, 297, 225, 249, -39, -15, 177, 57,  225, -39, -15, 201, 33,  153,
    33,  177, 81,  57,  177, 129, 33,  153, 81,
};

static const int16_t q6k_want[256] = {
    28,   17,   -1,  -30,  13,  -25,  -8,   25,  -18,  19,   -11,  3,    -4,   -5,   -13,  -20,
    -58,  -52,  44,  -34,  56,  -54,  -52,  -64, -38,  0,    -44,  -22,  -2,   -60,  42,   -18,
    -54,  -84,  57,  36,   57,  -15,  54,   -42, 0,    51,   51,   -12,  48,   9,    -21,  -60,
    -12,  124,  52,  -112, -72, 48,   76,   48,  -36,  28,   64,   -116, -4,   68,   84,   -40,
    -40,  -150, 155, 115,  -90, 145,  -155, 145, -140, 5,    45,   -155, 145,  -75,  30,   155,
    54,   -192, 186, 66,   54,  -12,  96,   180, 132,  162,  -192, 96,   -42,  -6,   42,   144,
    -56,  133,  -35, -35,  77,  14,   -14,  0,   -28,  -154, -77,  -56,  -168, -210, 189,  -14,
    -208, -80,  24,  48,   128, -56,  144,  -16, -120, 128,  40,   0,    24,   -128, 64,   24,
    -15,  -10,  -28, -1,   -31, 4,    -16,  23,  16,   9,    17,   11,   7,    16,   15,   16,
    -38,  48,   22,  34,   26,  6,    64,   -36, 44,   58,   -42,  6,    -30,  62,   58,   -8,
    75,   63,   93,  -72,  66,  87,   63,   -60, 33,   -90,  -75,  -18,  -42,  -24,  -57,  -90,
    -112, -92,  100, 96,   120, 64,   -88,  92,  68,   80,   60,   -112, -92,  36,   -92,  28,
    -145, 65,   55,  -115, 60,  10,   0,    0,   160,  -60,  110,  -40,  135,  30,   85,   -95,
    -126, 18,   138, -126, 18,  48,   -42,  -48, -72,  -144, 114,  -84,  0,    -78,  114,  -132,
    119,  196,  91,  -154, -77, -189, 210,  196, 56,   -175, 14,   -203, -147, -14,  140,  105,
    -216, -168, 232, 192,  16,  88,   176,  8,   -120, -24,  -232, 56,   -128, -248, -136, 208,
};
/* clang-format on */

static uint8_t lcg_byte(uint32_t *x)
{
    *x = *x * 1103515245u + 12345u;
    return (uint8_t)(*x >> 16);
}

/* One block of n elements against its ggml values, unit * want[i] (the K-quants' 256 integers,
 * unit 1); then the quantizer, through the dequantizer just checked: a layout of the quantizer's
 * own would scatter the values far past qtol. */
static void check_known_block(uint32_t type, const void *block, int n, const int16_t *want,
                              float unit, double qtol)
{
    const char *tn = cairn__ggml_type_name(type);
    float y[256], z[256];
    unsigned char q[256];
    cairn__dequant_row(type, block, y, (uint64_t)n);
    int bad = 0, first = -1;
    for (int i = 0; i < n; i++)
        if (y[i] != unit * (float)want[i] && (bad++, first < 0))
            first = i;
    ok(bad == 0, "%s distinct quants: all %d elements as ggml dequantizes them (%d differ)", tn, n,
       bad);
    if (bad)
        diag("first: element %d, got %g, ggml %g", first, (double)y[first],
             (double)(unit * (float)want[first]));
    for (int i = 0; i < n; i++)
        z[i] = unit * (float)want[i];
    int rc = cairn__quant_row(type, z, q, (uint64_t)n);
    cairn__dequant_row(type, q, y, (uint64_t)n);
    double e = rel_rms(y, z, n);
    ok(rc == 0 && e <= qtol, "%s quantizer puts each element where ggml reads it (rel rms %.3g)",
       tn, e);
}

static void kquant_layouts(void)
{
    cairn__block_q4_K bk;
    uint8_t ls[8], lm[8];
    q4k_header(&bk, ls, lm);
    uint32_t x = 1;
    for (int b = 0; b < 128; b++)
        bk.qs[b] = lcg_byte(&x);
    check_known_block(CAIRN__GGML_Q4_K, &bk, 256, q4k_want, 1.0f, 0.05);

    cairn__block_q6_K b6;
    memset(&b6, 0, sizeof b6);
    b6.d = 0x3c00;
    for (int s = 0; s < 16; s++) /* 1..8, then -1..-8: no zero scale hides a quant */
        b6.scales[s] = (int8_t)(s < 8 ? s + 1 : -(s - 7));
    x = 2;
    for (int b = 0; b < 128; b++)
        b6.ql[b] = lcg_byte(&x);
    x = 3;
    for (int b = 0; b < 64; b++)
        b6.qh[b] = lcg_byte(&x);
    check_known_block(CAIRN__GGML_Q6_K, &b6, 256, q6k_want, 1.0f, 0.02);
}

/* ---- Q4_1, Q5_0, Q5_1 against ggml ----------------------------------------------------------
 * One block of each, its 16 quant bytes and 4 high-bit bytes from the LCG below (seeds 4 and 5),
 * d = 0.5 and m = -3.5; the expected values, twice the element's value, were computed outside
 * this project by restating ggml's dequantize_row_q4_1 / _q5_0 / _q5_1 in Python on those
 * bytes: element j < 16 is the low nibble of qs[j], element j + 16 its high nibble, with bit j
 * (bit j + 16) of the little-endian qh on top for Q5; value q * d + m (Q4_1, Q5_1) or
 * (q - 16) * d (Q5_0). Element 0: qs[0] = 25 = 0x19, low nibble 9; qh = 0x857809df, bit 0 set:
 * Q4_1 9 * 0.5 - 3.5 = 1, Q5_0 (25 - 16) * 0.5 = 4.5, Q5_1 25 * 0.5 - 3.5 = 9. */
/* clang-format off */
static const int16_t q4_1_want2[32] = {2, -1, 4, 8, 8, -7, -5, -2, -5, 4, -2, 2, 6, 0, 0, -2,
                                      -6, -1, 8, 0, -5, 2, 1, 2, -3, -3, -3, 0, 2, -6, -1, 7};
static const int16_t q5_0_want2[32] = {9, 6, 11, 15, 15, -16, 2, 5, 2, -5, -11, 9, -3, -9, -9, -11,
                                      -15, -10, -1, 7, 2, 9, 8, -7, 4, -12, 4, -9, -7, -15, -10, 14};
static const int16_t q5_1_want2[32] = {18, 15, 20, 24, 24, -7, 11, 14, 11, 4, -2, 18, 6, 0, 0, -2,
                                      -6, -1, 8, 16, 11, 18, 17, 2, 13, -3, 13, 0, 2, -6, -1, 23};
/* clang-format on */

static void q32_layouts(void)
{
    uint8_t qs[16], qh[4];
    uint32_t x = 4;
    for (int b = 0; b < 16; b++)
        qs[b] = lcg_byte(&x);
    x = 5;
    for (int b = 0; b < 4; b++)
        qh[b] = lcg_byte(&x);
    cairn__block_q4_1 b41 = {.d = 0x3800, .m = 0xc300}; /* 0.5, -3.5 */
    memcpy(b41.qs, qs, 16);
    check_known_block(CAIRN__GGML_Q4_1, &b41, 32, q4_1_want2, 0.5f, 0.05);
    cairn__block_q5_0 b50 = {.d = 0x3800};
    memcpy(b50.qs, qs, 16);
    memcpy(b50.qh, qh, 4);
    check_known_block(CAIRN__GGML_Q5_0, &b50, 32, q5_0_want2, 0.5f, 0.03);
    cairn__block_q5_1 b51 = {.d = 0x3800, .m = 0xc300};
    memcpy(b51.qs, qs, 16);
    memcpy(b51.qh, qh, 4);
    check_known_block(CAIRN__GGML_Q5_1, &b51, 32, q5_1_want2, 0.5f, 0.03);
}

static void round_trips(void)
{
    const uint32_t types[] = {CAIRN__GGML_F32,  CAIRN__GGML_F16,    CAIRN__GGML_BF16,
                              CAIRN__GGML_Q8_0, CAIRN__GGML_Q4_0,   CAIRN__GGML_Q4_1,
                              CAIRN__GGML_Q5_0, CAIRN__GGML_Q5_1,   CAIRN__GGML_Q4_K,
                              CAIRN__GGML_Q6_K, CAIRN__GGML_Q5_K,   CAIRN__GGML_Q3_K,
                              CAIRN__GGML_Q2_K, CAIRN__GGML_IQ4_NL, CAIRN__GGML_IQ4_XS};
    const double tol[] = {0,    1e-3, 5e-3, 1e-2, 0.12, 0.1,  0.05, 0.05,
                          0.12, 3e-2, 0.06, 0.25, 0.5,  0.12, 0.12};
    enum { N = 4096 };
    static float x[N], y[N], z[N];
    static unsigned char q[N * 4], q2[N * 4];
    uint64_t r = 1234567;
    for (int i = 0; i < N; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        /* varying scale per block, some all-zero and all-positive blocks */
        const int blk = i / 256;
        const float v = (float)((double)(r >> 11) * 0x1.0p-53 - 0.5) * (float)(1 + blk);
        x[i] = blk == 3 ? 0.0f : blk == 5 ? fabsf(v) + 1.0f : v;
    }
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        const uint32_t ty = types[t];
        const char *tn = cairn__ggml_type_name(ty);
        const uint64_t bytes = N / cairn__quant_block_elems(ty) * cairn__quant_block_bytes(ty);
        ok(cairn__ggml_row_size(ty, N) == bytes,
           "%s: block size agrees with the GGUF reader (%llu)", tn, (unsigned long long)bytes);
        int rc = cairn__quant_row(ty, x, q, N);
        cairn__dequant_row(ty, q, y, N);
        double e = rel_rms(y, x, N);
        ok(rc == 0 && e <= tol[t], "%s: dequant(quant(x)) rel rms err %.3g <= %g", tn, e, tol[t]);
        int zero = 1;
        for (int i = 3 * 256; i < 4 * 256; i++)
            zero &= y[i] == 0.0f;
        ok(zero, "%s: an all-zero block stays exactly zero", tn);
        /* quantizing the dequantized values again is a fixed point for the 8-bit types */
        cairn__quant_row(ty, y, q2, N);
        cairn__dequant_row(ty, q2, z, N);
        double e2 = rel_rms(z, y, N);
        ok(e2 <= tol[t] / 2 + 1e-7, "%s: re-quantizing is stable (rel rms %.3g)", tn, e2);
    }
    ok(cairn__quant_row(16 /* IQ2_XXS */, x, q, 256) == CAIRN_EUNSUPPORTED,
       "unsupported type -> EUNSUPPORTED");
    ok(cairn__quant_row(CAIRN__GGML_Q8_0, x, q, 33) == CAIRN_EINVAL, "partial block -> EINVAL");
    ok(cairn__quant_row(CAIRN__GGML_Q4_K, x, q, 128) == CAIRN_EINVAL,
       "half a K super-block -> EINVAL");
    ok(!cairn__quant_supported(16) && cairn__quant_supported(CAIRN__GGML_Q6_K) &&
           cairn__quant_supported(CAIRN__GGML_Q5_K) && cairn__quant_supported(CAIRN__GGML_Q3_K) &&
           cairn__quant_supported(CAIRN__GGML_Q2_K) && cairn__quant_supported(CAIRN__GGML_IQ4_NL) &&
           cairn__quant_supported(CAIRN__GGML_IQ4_XS) && cairn__quant_supported(CAIRN__GGML_Q4_1) &&
           cairn__quant_supported(CAIRN__GGML_Q5_0) && cairn__quant_supported(CAIRN__GGML_Q5_1),
       "supported types");
}

static void halves(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = cairn__f16_to_f32((uint16_t)h);
        if (isnan(f))
            bad += !isnan(cairn__f16_to_f32(cairn__f32_to_f16(f)));
        else
            bad += cairn__f32_to_f16(f) != h;
    }
    ok(bad == 0, "f16 -> f32 -> f16 is the identity on all 65536 halves (%d bad)", bad);
    ok(cairn__f32_to_f16(65520.0f) == 0x7c00 && cairn__f32_to_f16(65519.0f) == 0x7bff,
       "f16 overflow rounding");
    ok(cairn__f32_to_f16(1.0f + 0x1.0p-11f) == 0x3c00 &&
           cairn__f32_to_f16(1.0f + 3 * 0x1.0p-11f) == 0x3c02,
       "f16 ties round to even");
    ok(cairn__f16_to_f32(0x0001) == 0x1.0p-24f && cairn__f32_to_f16(0x1.0p-25f) == 0 &&
           cairn__f32_to_f16(0x1.8p-25f) == 1,
       "f16 subnormals");
    ok(cairn__bf16_to_f32(cairn__f32_to_bf16(1.0f)) == 1.0f &&
           cairn__f32_to_bf16(1.0f + 0x1.0p-8f) == 0x3f80 &&
           cairn__f32_to_bf16(1.0f + 0x1.8p-8f) == 0x3f81,
       "bf16 round to nearest even");
    ok(isnan(cairn__bf16_to_f32(cairn__f32_to_bf16(NAN))), "bf16 keeps NaN");
}

int main(void)
{
    known_blocks();
    kquant_layouts();
    q32_layouts();
    round_trips();
    halves();
    return tap_done();
}
