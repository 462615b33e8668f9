/* gpu/cpu/kernels_ref.c - the scalar reference of the CPU kernels: the activation's int8
 * rounding, one dot product per weight type, and axpy, in portable C.
 *
 * They are the "scalar" level of gpu/cpu/kernels_cpu.c's dispatch (the only one off x86, and the
 * one CAIRN_KERNELS_ISA=scalar forces), and what the vector kernels (kernels_cpu_avx2.c,
 * kernels_cpu_avx512.c) are measured against: each vector kernel does the same integer
 * arithmetic per block and differs only in the order of the float additions. Kept apart from
 * the dispatch and the threading so the arithmetic reads alone: every function here is one row
 * (or one vector) and knows nothing of threads, tiles or instruction sets.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gpu/cpu/kernels_cpu.h"
#include "gpu/quant.h"

/* ==== activation quantization ================================================================ */

/* x (32 nb) -> nb int8 blocks, rounded to nearest even (as the vector versions' cvtps2dq does,
 * so every ISA quantizes x identically) */
void cairn__quant_x_ref(const float *x, cairn__xq8_block *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[i * 32 + j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = d;
        for (int j = 0; j < 32; j++)
            y[i].qs[j] = (int8_t)nearbyintf(x[i * 32 + j] * id);
    }
}

/* ==== dot products ===========================================================================
 * Each a cairn__dot_fn (kernels_cpu.h): one row w . x -> float. */

/* w (n) . x (n) -> float */
float cairn__dot_f32_ref(const uint8_t *w, const float *x, const void *xq, const float *xs,
                         int64_t n)
{
    (void)xq, (void)xs;
    float s = 0.0f, v;
    for (int64_t i = 0; i < n; i++) {
        memcpy(&v, w + 4 * i, 4);
        s += v * x[i];
    }
    return s;
}

/* w (n) . x (n) -> float */
float cairn__dot_f16_ref(const uint8_t *w, const float *x, const void *xq, const float *xs,
                         int64_t n)
{
    (void)xq, (void)xs;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, w + 2 * i, 2);
        s += cairn__f16_to_f32_inline(h) * x[i];
    }
    return s;
}

/* w (n) . x (n) -> float */
float cairn__dot_bf16_ref(const uint8_t *w, const float *x, const void *xq, const float *xs,
                          int64_t n)
{
    (void)xq, (void)xs;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, w + 2 * i, 2);
        s += cairn__bf16_to_f32(h) * x[i];
    }
    return s;
}

/* w (n) . x (n) -> float */
float cairn__dot_q8_0_ref(const uint8_t *w, const float *x, const void *xq, const float *xs,
                          int64_t n)
{
    (void)x, (void)xs;
    const cairn__block_q8_0 *b = (const cairn__block_q8_0 *)w;
    const cairn__xq8_block *a = xq;
    float s = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int sum = 0;
        for (int j = 0; j < 32; j++)
            sum += b[i].qs[j] * a[i].qs[j];
        s += (float)sum * (cairn__f16_to_f32_inline(b[i].d) * a[i].d);
    }
    return s;
}

/* w (n) . x (n) -> float */
float cairn__dot_q4_0_ref(const uint8_t *w, const float *x, const void *xq, const float *xs,
                          int64_t n)
{
    (void)x, (void)xs;
    const cairn__block_q4_0 *b = (const cairn__block_q4_0 *)w;
    const cairn__xq8_block *a = xq;
    float s = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int sum = 0;
        for (int j = 0; j < 16; j++) {
            sum += ((b[i].qs[j] & 0xF) - 8) * a[i].qs[j];
            sum += ((b[i].qs[j] >> 4) - 8) * a[i].qs[j + 16];
        }
        s += (float)sum * (cairn__f16_to_f32_inline(b[i].d) * a[i].d);
    }
    return s;
}

/* Q4_1, Q5_0 and Q5_1 against the int8 blocks: the quants unsigned (0..15, 0..31), so per
 * block q . a and, for the types with a minimum, sum(a); Q5_0's -16 comes off as 16 sum(a):
 *   Q4_1 / Q5_1: (d * xd) * (q . a) + (m * xd) * sum(a);   Q5_0: (d * xd) * (q . a - 16 sum(a)).
 * Block fields are read by byte offset (cairn__f16_at): a row may sit at any address. */

/* the 5-bit quants of a Q5_0 / Q5_1 block, in element order: the low nibbles at qs, bit e of
 * the little-endian 32 bits at qh on top of element e */
static void q5_quants(const uint8_t *qs, const uint8_t *qh, int q[32])
{
    const uint32_t h =
        (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0xF) | (int)((h >> j) & 1) << 4;
        q[j + 16] = (qs[j] >> 4) | (int)((h >> (j + 16)) & 1) << 4;
    }
}

/* w (n) . x (n) -> float */
float cairn__dot_q4_1_ref(const uint8_t *w, const float *x, const void *xq, const float *xs,
                          int64_t n)
{
    (void)x, (void)xs;
    const cairn__xq8_block *a = xq;
    float s = 0.0f;
    for (int64_t i = 0; i < n / 32; i++, w += sizeof(cairn__block_q4_1)) {
        const uint8_t *qs = w + offsetof(cairn__block_q4_1, qs);
        int dot = 0, sum = 0;
        for (int j = 0; j < 16; j++) {
            dot += (qs[j] & 0xF) * a[i].qs[j] + (qs[j] >> 4) * a[i].qs[j + 16];
            sum += a[i].qs[j] + a[i].qs[j + 16];
        }
        s += (float)dot * (cairn__f16_at(w + offsetof(cairn__block_q4_1, d)) * a[i].d) +
             (float)sum * (cairn__f16_at(w + offsetof(cairn__block_q4_1, m)) * a[i].d);
    }
    return s;
}

/* w (n) . x (n) -> float */
float cairn__dot_q5_0_ref(const uint8_t *w, const float *x, const void *xq, const float *xs,
                          int64_t n)
{
    (void)x, (void)xs;
    const cairn__xq8_block *a = xq;
    float s = 0.0f;
    for (int64_t i = 0; i < n / 32; i++, w += sizeof(cairn__block_q5_0)) {
        int q[32], dot = 0;
        q5_quants(w + offsetof(cairn__block_q5_0, qs), w + offsetof(cairn__block_q5_0, qh), q);
        for (int j = 0; j < 32; j++)
            dot += (q[j] - 16) * a[i].qs[j];
        s += (float)dot * (cairn__f16_at(w + offsetof(cairn__block_q5_0, d)) * a[i].d);
    }
    return s;
}

/* w (n) . x (n) -> float */
float cairn__dot_q5_1_ref(const uint8_t *w, const float *x, const void *xq, const float *xs,
                          int64_t n)
{
    (void)x, (void)xs;
    const cairn__xq8_block *a = xq;
    float s = 0.0f;
    for (int64_t i = 0; i < n / 32; i++, w += sizeof(cairn__block_q5_1)) {
        int q[32], dot = 0, sum = 0;
        q5_quants(w + offsetof(cairn__block_q5_1, qs), w + offsetof(cairn__block_q5_1, qh), q);
        for (int j = 0; j < 32; j++) {
            dot += q[j] * a[i].qs[j];
            sum += a[i].qs[j];
        }
        s += (float)dot * (cairn__f16_at(w + offsetof(cairn__block_q5_1, d)) * a[i].d) +
             (float)sum * (cairn__f16_at(w + offsetof(cairn__block_q5_1, m)) * a[i].d);
    }
    return s;
}

/* w (n) . x (n) -> float: the levels are int8, so per block sum(level[q] * a) is exact */
float cairn__dot_iq4_nl_ref(const uint8_t *w, const float *x, const void *xq, const float *xs,
                            int64_t n)
{
    (void)x, (void)xs;
    const cairn__xq8_block *a = xq;
    float s = 0.0f;
    for (int64_t i = 0; i < n / 32; i++, w += sizeof(cairn__block_iq4_nl)) {
        const uint8_t *qs = w + offsetof(cairn__block_iq4_nl, qs);
        int dot = 0;
        for (int j = 0; j < 16; j++)
            dot += cairn__iq4nl_values[qs[j] & 0xF] * a[i].qs[j] +
                   cairn__iq4nl_values[qs[j] >> 4] * a[i].qs[j + 16];
        s += (float)dot * (cairn__f16_at(w + offsetof(cairn__block_iq4_nl, d)) * a[i].d);
    }
    return s;
}

/* w (n) . x (n) -> float; xq: n / 32 int8 blocks, one per sub-block */
float cairn__dot_iq4_xs_ref(const uint8_t *w, const float *x, const void *xq, const float *xs,
                            int64_t n)
{
    (void)x, (void)xs;
    const cairn__xq8_block *a = xq;
    float s = 0.0f;
    for (int64_t i = 0; i < n / CAIRN__QK_K; i++, w += sizeof(cairn__block_iq4_xs)) {
        const float d = cairn__f16_at(w + offsetof(cairn__block_iq4_xs, d));
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *qs = w + offsetof(cairn__block_iq4_xs, qs) + 16 * ib;
            const cairn__xq8_block *b = &a[8 * i + ib];
            int dot = 0;
            for (int j = 0; j < 16; j++)
                dot += cairn__iq4nl_values[qs[j] & 0xF] * b->qs[j] +
                       cairn__iq4nl_values[qs[j] >> 4] * b->qs[j + 16];
            s += d * (float)cairn__iq4_xs_scale(w, ib) * b->d * (float)dot;
        }
    }
    return s;
}

/* K-quants against the int8 activation (cairn__xk_block, kernels_cpu.h); block fields read
 * through cairn__f16_at / cairn__q4_K_head_of, since a block may sit at an odd address. */

/* w (n) . x (n) -> float; xq: n / 256 cairn__xk blocks */
float cairn__dot_q2_K_ref(const uint8_t *w, const float *x, const void *xq, const float *xs,
                          int64_t n)
{
    (void)x, (void)xs;
    const cairn__xk_block *xk = xq;
    float s = 0.0f;
    for (int64_t i = 0; i < n / CAIRN__QK_K; i++, w += sizeof(cairn__block_q2_K)) {
        const float d = cairn__f16_at(w + offsetof(cairn__block_q2_K, d));
        const float dmin = cairn__f16_at(w + offsetof(cairn__block_q2_K, dmin));
        const uint8_t *qs = w + offsetof(cairn__block_q2_K, qs),
                      *sc = w + offsetof(cairn__block_q2_K, scales);
        for (int sb = 0; sb < 16; sb++) { /* elements e = 16 sb.. of group g = sb / 2 */
            int dot = 0, sum = 0;
            for (int k = 0; k < 16; k++) {
                const int e = 16 * sb + k, g = e / 32;
                dot += ((qs[32 * (g / 4) + e % 32] >> (2 * (g % 4))) & 3) * xk[i].a[e];
                sum += xk[i].a[e];
            }
            const float xd = xk[i].d[sb / 2];
            s += d * (float)(sc[sb] & 0xF) * xd * (float)dot -
                 dmin * (float)(sc[sb] >> 4) * xd * (float)sum;
        }
    }
    return s;
}

/* w (n) . x (n) -> float; xq: n / 256 cairn__xk blocks */
float cairn__dot_q3_K_ref(const uint8_t *w, const float *x, const void *xq, const float *xs,
                          int64_t n)
{
    (void)x, (void)xs;
    const cairn__xk_block *xk = xq;
    float s = 0.0f;
    for (int64_t i = 0; i < n / CAIRN__QK_K; i++, w += sizeof(cairn__block_q3_K)) {
        const float d = cairn__f16_at(w + offsetof(cairn__block_q3_K, d));
        const uint8_t *qs = w + offsetof(cairn__block_q3_K, qs),
                      *hm = w + offsetof(cairn__block_q3_K, hmask);
        int sc[16];
        cairn__q3_K_scales(w + offsetof(cairn__block_q3_K, scales), sc);
        for (int sb = 0; sb < 16; sb++) { /* elements e = 16 sb.. of group g = sb / 2 */
            int dot = 0;
            for (int k = 0; k < 16; k++) {
                const int e = 16 * sb + k, g = e / 32, l = e % 32;
                const int q = ((qs[32 * (g / 4) + l] >> (2 * (g % 4))) & 3) | ((hm[l] >> g) & 1)
                                                                                  << 2;
                dot += (q - 4) * xk[i].a[e];
            }
            s += d * (float)sc[sb] * xk[i].d[sb / 2] * (float)dot;
        }
    }
    return s;
}

/* Q4_K (q5 0) or Q5_K (q5 1: bit j of qh[k] on top of sub-block j's quant k); the heads are
 * the same bytes. w (n) . x (n) -> float; xq: n / 256 cairn__xk blocks */
static float dot_q45_K(const uint8_t *w, const void *xq, int64_t n, const int q5)
{
    const cairn__xk_block *xk = xq;
    const size_t bb = q5 ? sizeof(cairn__block_q5_K) : sizeof(cairn__block_q4_K);
    float s = 0.0f;
    for (int64_t i = 0; i < n / CAIRN__QK_K; i++, w += bb) {
        const cairn__q4_K_head hd = cairn__q4_K_head_of(w);
        const float d = cairn__f16_to_f32_inline(hd.d), dmin = cairn__f16_to_f32_inline(hd.dmin);
        const uint8_t *qs =
            w + (q5 ? offsetof(cairn__block_q5_K, qs) : offsetof(cairn__block_q4_K, qs));
        const uint8_t *qh = w + offsetof(cairn__block_q5_K, qh);
        const uint64_t sc = hd.sc, m = hd.m;
        for (int j = 0; j < 8; j++) { /* sub-block j: nibbles (j & 1) of bytes 32 (j / 2).. */
            const int8_t *a = xk[i].a + 32 * j;
            int dot = 0;
            for (int k = 0; k < 32; k++) {
                const int hi = q5 ? ((qh[k] >> j) & 1) << 4 : 0;
                dot += (((qs[32 * (j / 2) + k] >> (4 * (j & 1))) & 0xF) | hi) * a[k];
            }
            const int scj = (int)((sc >> (8 * j)) & 0xFF), mj = (int)((m >> (8 * j)) & 0xFF);
            s += d * (float)scj * xk[i].d[j] * (float)dot - dmin * (float)mj * xk[i].ds[j];
        }
    }
    return s;
}

/* w (n) . x (n) -> float; xq: n / 256 cairn__xk blocks */
float cairn__dot_q4_K_ref(const uint8_t *w, const float *x, const void *xq, const float *xs,
                          int64_t n)
{
    (void)x, (void)xs;
    return dot_q45_K(w, xq, n, 0);
}

/* w (n) . x (n) -> float; xq: n / 256 cairn__xk blocks */
float cairn__dot_q5_K_ref(const uint8_t *w, const float *x, const void *xq, const float *xs,
                          int64_t n)
{
    (void)x, (void)xs;
    return dot_q45_K(w, xq, n, 1);
}

/* w (n) . x (n) -> float; xq: n / 256 cairn__xk blocks */
float cairn__dot_q6_K_ref(const uint8_t *w, const float *x, const void *xq, const float *xs,
                          int64_t n)
{
    (void)x, (void)xs;
    const cairn__xk_block *xk = xq;
    float s = 0.0f;
    for (int64_t i = 0; i < n / CAIRN__QK_K; i++, w += sizeof(cairn__block_q6_K)) {
        const float d = cairn__f16_at(w + offsetof(cairn__block_q6_K, d));
        const uint8_t *ql = w + offsetof(cairn__block_q6_K, ql),
                      *qh = w + offsetof(cairn__block_q6_K, qh);
        const int8_t *sc = (const int8_t *)(w + offsetof(cairn__block_q6_K, scales));
        for (int sb = 0; sb < 16; sb++) { /* 16 elements e = 16 sb.. of half h = sb / 8 */
            int dot = 0;
            for (int k = 0; k < 16; k++) {
                const int e = 16 * (sb % 8) + k, l = e % 32, g = e / 32; /* group of 32 */
                const uint8_t lo = ql[64 * (sb / 8) + l + 32 * (g & 1)] >> (4 * (g >> 1));
                const uint8_t hi = qh[32 * (sb / 8) + l] >> (2 * g);
                const int q = ((lo & 0xF) | ((hi & 3) << 4)) - 32;
                dot += q * xk[i].a[16 * sb + k];
            }
            s += d * (float)sc[sb] * xk[i].d[sb / 2] * (float)dot;
        }
    }
    return s;
}

/* ==== axpy (attention's weighted sum of V rows) ============================================== */

/* y (n) += a * x (n) */
void cairn__axpy_ref(float *y, float a, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}
