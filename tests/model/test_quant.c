/* tests/model/test_quant.c - ggml block formats: layouts, known bytes, round trips, halves. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gguf.h"
#include "gpu/quant.h"
#include "tests/tap.h"

#include "cairn_errors.h"
enum {
#define CAIRN__X(n, v, s) CAIRN_##n = v,
    CAIRN_ERROR_TABLE(CAIRN__X)
#undef CAIRN__X
};

static double rel_rms(const float *a, const float *b, int n)
{
    double e = 0, s = 0;
    for (int i = 0; i < n; i++) {
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return sqrt(e / (s > 0 ? s : 1));
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
    memset(&bk, 0, sizeof bk);
    bk.d = 0x3c00;
    bk.dmin = 0x3c00;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++)
        ls[j] = (uint8_t)(j + 1 + (j >= 4 ? 16 : 0)), lm[j] = (uint8_t)(j + (j >= 4 ? 32 : 0));
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            bk.scales[j] = ls[j];
            bk.scales[j + 4] = lm[j];
        } else {
            bk.scales[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            bk.scales[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            bk.scales[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
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

static void round_trips(void)
{
    const uint32_t types[] = {CAIRN__GGML_F32,  CAIRN__GGML_F16,  CAIRN__GGML_BF16,
                              CAIRN__GGML_Q8_0, CAIRN__GGML_Q4_0, CAIRN__GGML_Q4_K,
                              CAIRN__GGML_Q6_K};
    const double tol[] = {0, 1e-3, 5e-3, 1e-2, 0.12, 0.12, 3e-2};
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
    ok(cairn__quant_row(3 /* Q4_1 */, x, q, 32) == CAIRN_EUNSUPPORTED,
       "unsupported type -> EUNSUPPORTED");
    ok(cairn__quant_row(CAIRN__GGML_Q8_0, x, q, 33) == CAIRN_EINVAL, "partial block -> EINVAL");
    ok(cairn__quant_row(CAIRN__GGML_Q4_K, x, q, 128) == CAIRN_EINVAL,
       "half a K super-block -> EINVAL");
    ok(!cairn__quant_supported(3) && cairn__quant_supported(CAIRN__GGML_Q6_K), "supported types");
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
    round_trips();
    halves();
    return tap_done();
}
