/* gpu/cpu/kernels_cpu_avx2.c - the AVX2 + FMA + F16C kernels of gpu/cpu/kernels_cpu.c (which
 * picks them at run time): the rows and tile kernels of the quantized types on lanes (the types
 * of 32-value blocks, Q4_0, Q8_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS; Q2_K, Q3_K and Q6_K; Q4_K and
 * Q5_K), each preparing a step's weights once and applying them to every token of a prompt
 * (the panels), the float types' tiles and dot products, the activation's int8 quantization and
 * axpy. Compiled with __attribute__((target)), so the rest of the build keeps the baseline x86-64
 * instruction set.
 *
 * The quantized products multiply in int8 (the activation rounded to int8 blocks, as llama.cpp
 * does), with maddubs, which wants an unsigned left operand: the K-quants' quants are unsigned
 * (Q4_K 0..15, Q6_K 0..63, whose -32 comes off through the activation's prepared sums), against
 * the activation laid out per super-block (cairn__xk_block), scaled per sub-block in float.
 *
 * The dequantization of a row for the prompt's products (cairn__dequant_avx2: every type but
 * F32) does what cairn__dequant_row (quant.c) does, eight values an instruction: the same
 * exact conversions and the same roundings in the same order, so the same floats (except that
 * F16C turns a signalling NaN half into a quiet NaN, where the reference keeps the payload).
 */
#include "gpu/cpu/kernels_cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <string.h>

#include "gpu/gguf.h" /* CAIRN__GGML_* */
#include "gpu/quant.h"

#define AVX2 __attribute__((target("avx2,fma,f16c")))

/* the scale of a block, an f16 at any alignment */
AVX2 static inline __m256 scale8(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _mm256_set1_ps(_cvtsh_ss(h));
}

/* n values of a row of `type` -> dst, as cairn__dequant_row; 0 for a type it leaves to that */
AVX2 int cairn__dequant_avx2(uint32_t type, const uint8_t *src, float *dst, int64_t n)
{
    switch (type) {
    case CAIRN__GGML_F16: {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i,
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + 2 * i))));
        for (; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = _cvtsh_ss(h);
        }
        return 1;
    }
    case CAIRN__GGML_BF16: {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            const __m256i h =
                _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + 2 * i)));
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
        }
        for (; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = cairn__bf16_to_f32(h);
        }
        return 1;
    }
    case CAIRN__GGML_Q8_0:
        for (int64_t b = 0; b < n / 32; b++, src += sizeof(cairn__block_q8_0), dst += 32) {
            const __m256 d = scale8(src + offsetof(cairn__block_q8_0, d));
            const uint8_t *qs = src + offsetof(cairn__block_q8_0, qs);
            for (int k = 0; k < 4; k++) {
                const __m256i q =
                    _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(qs + 8 * k)));
                _mm256_storeu_ps(dst + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
            }
        }
        return 1;
    case CAIRN__GGML_Q4_0: {
        const __m128i lo = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
        for (int64_t b = 0; b < n / 32; b++, src += sizeof(cairn__block_q4_0), dst += 32) {
            const __m256 d = scale8(src + offsetof(cairn__block_q4_0, d));
            const __m128i qs =
                _mm_loadu_si128((const __m128i *)(src + offsetof(cairn__block_q4_0, qs)));
            /* elements 0..15 are the low nibbles, 16..31 the high ones; each minus 8 */
            const __m128i v[2] = {_mm_sub_epi8(_mm_and_si128(qs, lo), eight),
                                  _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), lo), eight)};
            for (int h = 0; h < 2; h++) {
                const __m256i a = _mm256_cvtepi8_epi32(v[h]);
                const __m256i c = _mm256_cvtepi8_epi32(_mm_srli_si128(v[h], 8));
                _mm256_storeu_ps(dst + 16 * h, _mm256_mul_ps(_mm256_cvtepi32_ps(a), d));
                _mm256_storeu_ps(dst + 16 * h + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(c), d));
            }
        }
        return 1;
    }
    case CAIRN__GGML_Q4_K: {
        const __m128i lo = _mm_set1_epi8(0x0F);
        for (int64_t b = 0; b < n / CAIRN__QK_K; b++, src += sizeof(cairn__block_q4_K)) {
            const cairn__q4_K_head h = cairn__q4_K_head_of(src);
            const float d = _cvtsh_ss(h.d), dmin = _cvtsh_ss(h.dmin);
            const uint8_t *q = src + offsetof(cairn__block_q4_K, qs);
            /* sub-block j: 32 nibbles (low ones for even j, high for odd) times d * sc[j],
             * minus dmin * m[j]: a product and a difference, as the reference rounds them */
            for (int j = 0; j < 8; j++, dst += 32) {
                const __m256 d1 = _mm256_set1_ps(d * (float)(uint8_t)(h.sc >> (8 * j)));
                const __m256 m1 = _mm256_set1_ps(dmin * (float)(uint8_t)(h.m >> (8 * j)));
                for (int k = 0; k < 2; k++) {
                    __m128i v = _mm_loadu_si128((const __m128i *)(q + 32 * (j / 2) + 16 * k));
                    v = _mm_and_si128(j % 2 ? _mm_srli_epi16(v, 4) : v, lo);
                    const __m256 a = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
                    const __m256 c = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)));
                    _mm256_storeu_ps(dst + 16 * k, _mm256_sub_ps(_mm256_mul_ps(d1, a), m1));
                    _mm256_storeu_ps(dst + 16 * k + 8, _mm256_sub_ps(_mm256_mul_ps(d1, c), m1));
                }
            }
        }
        return 1;
    }
    case CAIRN__GGML_Q6_K: {
        const __m128i m4 = _mm_set1_epi8(0x0F), m2 = _mm_set1_epi8(3), o32 = _mm_set1_epi8(32);
        for (int64_t b = 0; b < n / CAIRN__QK_K; b++, src += sizeof(cairn__block_q6_K)) {
            uint16_t hd;
            memcpy(&hd, src + offsetof(cairn__block_q6_K, d), 2);
            const float d = _cvtsh_ss(hd);
            const uint8_t *ql = src + offsetof(cairn__block_q6_K, ql);
            const uint8_t *qh = src + offsetof(cairn__block_q6_K, qh);
            const int8_t *sc = (const int8_t *)(src + offsetof(cairn__block_q6_K, scales));
            /* 128 values a pass: output r (0-3) takes a nibble of ql and 2 bits of qh, minus 32,
             * times d * sc, in 16s (one scale each) */
            for (int c = 0; c < 2; c++, dst += 128, ql += 64, qh += 32, sc += 8)
                for (int hl = 0; hl < 2; hl++) {
                    const __m128i l0 = _mm_loadu_si128((const __m128i *)(ql + 16 * hl));
                    const __m128i l1 = _mm_loadu_si128((const __m128i *)(ql + 32 + 16 * hl));
                    const __m128i h = _mm_loadu_si128((const __m128i *)(qh + 16 * hl));
                    const __m128i lo[4] = {_mm_and_si128(l0, m4), _mm_and_si128(l1, m4),
                                           _mm_and_si128(_mm_srli_epi16(l0, 4), m4),
                                           _mm_and_si128(_mm_srli_epi16(l1, 4), m4)};
                    for (int r = 0; r < 4; r++) {
                        const __m128i hi = _mm_and_si128(_mm_srli_epi16(h, 2 * r), m2);
                        const __m128i v =
                            _mm_sub_epi8(_mm_or_si128(lo[r], _mm_slli_epi16(hi, 4)), o32);
                        const __m256 ds = _mm256_set1_ps(d * (float)sc[hl + 2 * r]);
                        float *y = dst + 32 * r + 16 * hl;
                        _mm256_storeu_ps(
                            y, _mm256_mul_ps(ds, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))));
                        _mm256_storeu_ps(y + 8,
                                         _mm256_mul_ps(ds, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                                               _mm_srli_si128(v, 8)))));
                    }
                }
        }
        return 1;
    }
    default:
        return 0;
    }
}
#define F16(h) _cvtsh_ss(h) /* one half -> float in one instruction (F16C) */

AVX2 static inline float hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* x (32 nb) -> nb int8 blocks, the same values as quantize_x_q8. It runs on the calling thread
 * before every product while the others wait, so it is worth the vector code. */
AVX2 void cairn__quant_x_avx2(const float *x, cairn__xq8_block *y, int64_t nb)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < nb; i++) {
        const float *xb = x + 32 * i;
        __m256 v[4], m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(xb + 8 * k);
            m = _mm256_max_ps(_mm256_andnot_ps(sign, v[k]), m); /* a NaN is skipped, as fmaxf */
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        const float d = _mm_cvtss_f32(h) / 127.0f;
        const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
        y[i].d = d;
        __m256i q[4];
        for (int k = 0; k < 4; k++)
            q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], id)); /* nearest even */
        /* packs work per 128-bit lane: the dwords come out in the order 0 4 1 5 2 6 3 7 */
        const __m256i p =
            _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256(
            (__m256i *)(void *)y[i].qs,
            _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
}

/* w (n) . x (n) -> float */
AVX2 float cairn__dot_f32_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
                               int64_t n)
{
    (void)xq, (void)xs;
    const float *wf = (const float *)(const void *)w;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(wf + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(wf + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(wf + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(wf + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(wf + i), _mm256_loadu_ps(x + i), a0);
    float s = hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++)
        s += wf[i] * x[i];
    return s;
}

/* w (n) . x (n) -> float */
AVX2 float cairn__dot_f16_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
                               int64_t n)
{
    (void)xq, (void)xs;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(w + 2 * i)));
        __m256 w1 =
            _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(w + 2 * i + 16)));
        a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i + 8), a1);
    }
    float s = hsum256(_mm256_add_ps(a0, a1));
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, w + 2 * i, 2);
        s += cairn__f16_to_f32_inline(h) * x[i];
    }
    return s;
}

/* w (n) . x (n) -> float */
AVX2 float cairn__dot_bf16_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
                                int64_t n)
{
    (void)xq, (void)xs;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(w + 2 * i));
        __m256 w0 = _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(h)), 16));
        __m256 w1 = _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1)), 16));
        a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i + 8), a1);
    }
    float s = hsum256(_mm256_add_ps(a0, a1));
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, w + 2 * i, 2);
        s += cairn__bf16_to_f32(h) * x[i];
    }
    return s;
}

/* unsigned bytes u (each <= 63) . signed bytes a -> 8 int32 sums of 4 products; maddubs's pair
 * sums stay within int16 (2 * 63 * 127) */
AVX2 static inline __m256i dot_u8_i8(__m256i u, __m256i a)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1));
}

/* the f16 at p (any alignment) as a float */
AVX2 static inline float half_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* Q4_K against the int8 activation (cairn__xk_block): per sub-block of 32, the 4-bit quants
 * (unsigned) . the activation in int8, scaled by d * sc * xd; the mins once per super-block,
 * dmin * (m . ds) over the 8 sub-blocks. */
/* Q5_K is Q4_K with a fifth bit: sub-block j's bit j of the 32 qh bytes, isolated by a shift
 * and an AND and put on top of the nibbles before the same product. */
/* w (n) . x (n) for T <= 4 tokens xk[t] (n / 256 cairn__xk blocks each) -> out[t]; Q4_K (Q5 0) or
 * Q5_K (Q5 1): the 32-bit build's products (x86-64 runs the lane kernels, q4k_tile_avx2). The
 * weights are unpacked once for the T tokens, and each token's float operations are the one-token
 * product's, so out[t] is bit for bit the dot product of token t alone. */
AVX2 static inline __attribute__((always_inline)) void
dots_q45_K_avx2(const uint8_t *w, const cairn__xk_block *const *xk, int64_t n, float *out,
                const int T, const int Q5)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const size_t bb = Q5 ? sizeof(cairn__block_q5_K) : sizeof(cairn__block_q4_K);
    const size_t qs_at = Q5 ? offsetof(cairn__block_q5_K, qs) : offsetof(cairn__block_q4_K, qs);
    /* two chains (low and high nibbles): one chain of 8 multiply-adds a super-block was the
     * bound in cache */
    __m256 acc[4], acc2[4], macc[4];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        acc[t] = acc2[t] = macc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / CAIRN__QK_K; i++, w += bb) {
        const cairn__q4_K_head hd = cairn__q4_K_head_of(w);
        const float d = F16(hd.d), dmin = F16(hd.dmin);
        const uint8_t *qs = w + qs_at;
        const __m256i qh =
            Q5 ? _mm256_loadu_si256(
                     (const __m256i *)(const void *)(w + offsetof(cairn__block_q5_K, qh)))
               : _mm256_setzero_si256();
        const uint64_t sc = hd.sc, m = hd.m;
        const __m256 dsc = _mm256_mul_ps(_mm256_set1_ps(d),
                                         _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                                             _mm_loadl_epi64((const __m128i *)(const void *)&sc))));
        const __m256 dm = _mm256_mul_ps(_mm256_set1_ps(dmin),
                                        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                                            _mm_loadl_epi64((const __m128i *)(const void *)&m))));
        /* d * sc[j] * xd[j] for the 8 sub-blocks, and the mins' dmin * m[j] * ds[j] */
        float f[4][8];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            _mm256_storeu_ps(f[t], _mm256_mul_ps(dsc, _mm256_loadu_ps(xk[t][i].d)));
            macc[t] = _mm256_fmadd_ps(dm, _mm256_loadu_ps(xk[t][i].ds), macc[t]);
        }
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) { /* bytes 32c..: sub-block 2c low nibbles, 2c+1 high */
            const __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * c));
            __m256i lo = _mm256_and_si256(q, m4),
                    hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (Q5) { /* bits 2c and 2c + 1 of each qh byte, as 16 */
                lo = _mm256_or_si256(
                    lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4));
                hi = _mm256_or_si256(
                    hi,
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4));
            }
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                const int8_t *a = xk[t][i].a + 64 * c;
                const __m256i p0 =
                    dot_u8_i8(lo, _mm256_load_si256((const __m256i *)(const void *)a));
                const __m256i p1 =
                    dot_u8_i8(hi, _mm256_load_si256((const __m256i *)(const void *)(a + 32)));
                acc[t] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(f[t][2 * c]), acc[t]);
                acc2[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(f[t][2 * c + 1]),
                                          acc2[t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        out[t] = hsum256(_mm256_add_ps(acc[t], acc2[t])) - hsum256(macc[t]);
}

/* w (n) . x (n) -> float; xq: n / 256 cairn__xk blocks */
#define DOT_Q45_K(name, Q5)                                                                        \
    AVX2 float name(const uint8_t *w, const float *x, const void *xq, const float *xs, int64_t n)  \
    {                                                                                              \
        (void)x, (void)xs;                                                                         \
        const cairn__xk_block *xk[1] = {xq};                                                       \
        float out;                                                                                 \
        dots_q45_K_avx2(w, xk, n, &out, 1, Q5);                                                    \
        return out;                                                                                \
    }
#ifndef __x86_64__ /* there: the lane kernels' (below) */
DOT_Q45_K(cairn__dot_q4_K_avx2, 0)
DOT_Q45_K(cairn__dot_q5_K_avx2, 1)
#endif
#undef DOT_Q45_K

#if defined(__x86_64__)
/* ---- the types of 32-value blocks on (row, block) lanes ------------------------------------
 * Q4_0, Q8_0, Q4_1, Q5_0, Q5_1, IQ4_NL and IQ4_XS: the decode's and the prompt's products in one
 * kernel, kernels_cpu_avx512.c's quad kernel on 256-bit registers. A step takes 2 rows and 4
 * blocks (a quad; the activation in the same cairn__xq_quad form), lane 4r + b of a register
 * holding row r's block b: each row's 4 blocks are loaded into the two 128-bit halves of 4
 * registers (row 0 low, row 1 high), and a 4 x 4 transposition of their dwords (8 unpacks)
 * gives register k = group k (elements 4k..4k+3) of every (row, block) lane, as the activation's
 * group k is laid out (broadcast to both halves). Then, per token, maddubs (unsigned weight x
 * signed int8 activation, pairs summed in int16) and madd by ones sum each lane's block exactly:
 *   - Q4_0, Q4_1: nibbles 0..15, all 8 groups summed in int16 (8 * 2 * 15 * 127 < 2^15), one
 *     madd; Q4_0's -8 comes back as the quad's -8 sum(a);
 *   - Q5_0, Q5_1: nibbles with the fifth bit (a shuffle of the qh words and a compare) 0..31,
 *     4 groups in int16 at a time; Q5_0's -16 as -16 sum(a);
 *   - Q8_0, IQ4_NL, IQ4_XS (levels by a byte shuffle): signed, so the weight's sign moves onto
 *     the activation (|w| . sign(a, w)), a madd per group (|w| up to 128: one pair fills int16).
 * The float part is the AVX-512 kernel's, lane for lane: acc_b += (d_w * d_x) * (exact integer
 * sum), then m_w * (d_x sum(a)) for a minimum, one multiply-add after the other in block order,
 * and a row's result is (acc0 + acc1) + (acc2 + acc3): every output is bit for bit the AVX-512
 * level's, so a product's bits do not depend on which of the two levels the CPU has, and (one
 * kernel for 1 token and for tiles) the decode's are the prompt's. Blocks past a row's end (the
 * last quad of rows whose block count is not a multiple of 4) are zeros, which add exact zeros.
 */
#define QUAD2_RR 2 /* rows a pass (one register of (row, block) lanes) */
#define QUAD2_TT 4 /* tokens a tile: 8 weight registers and 4 accumulators */

/* 4 registers Y[b] (dword j of each half: group j of block b) -> G[j] (dword b: the same) */
AVX2 static inline __attribute__((always_inline)) void tr4x4(const __m256i Y[4], __m256i G[4])
{
    const __m256i t0 = _mm256_unpacklo_epi32(Y[0], Y[1]), t1 = _mm256_unpackhi_epi32(Y[0], Y[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(Y[2], Y[3]), t3 = _mm256_unpackhi_epi32(Y[2], Y[3]);
    G[0] = _mm256_unpacklo_epi64(t0, t2), G[1] = _mm256_unpackhi_epi64(t0, t2);
    G[2] = _mm256_unpacklo_epi64(t1, t3), G[3] = _mm256_unpackhi_epi64(t1, t3);
}

/* the 16 bytes at p (row 0) and, for R > 1, at p + rb (row 1) as the two halves */
AVX2 static inline __attribute__((always_inline)) __m256i load2(const uint8_t *p, size_t rb,
                                                                const int R)
{
    const __m128i lo = _mm_loadu_si128((const __m128i *)(const void *)p);
    return R > 1 ? _mm256_inserti128_si256(_mm256_castsi128_si256(lo),
                                           _mm_loadu_si128((const __m128i *)(const void *)(p + rb)),
                                           1)
                 : _mm256_zextsi128_si256(lo);
}

/* out[t * ld + r] = (acc0 + acc1) + (acc2 + acc3) of acc[t]'s lanes 4r.., r < R <= 2 */
AVX2 static inline __attribute__((always_inline)) void
store2_rows(const __m256 *acc, const int T, const int R, float *out, size_t ld)
{
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        __m256 u = _mm256_add_ps(acc[t], _mm256_permute_ps(acc[t], 0xB1));
        u = _mm256_add_ps(u, _mm256_permute_ps(u, 0x4E));
        out[(size_t)t * ld] = _mm256_cvtss_f32(u);
        if (R > 1)
            out[(size_t)t * ld + 1] = _mm_cvtss_f32(_mm256_extractf128_ps(u, 1));
    }
}

/* the u16 (or u32) at p */
static inline uint32_t u16at(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
static inline uint32_t u32at(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* byte e of lane L of the IQ4_XS scale shuffle (the two rows' 8-byte headers side by side in
 * each half; row L / 4): scales_l byte 2h + b / 2, scales_h byte h (b = L % 4), then zeros */
#define XS2_(r, b, h) 8 * (r) + 4 + 2 * (h) + (b) / 2, 8 * (r) + 2 + (h), -1, -1
#define XS2R_(r, h) XS2_(r, 0, h), XS2_(r, 1, h), XS2_(r, 2, h), XS2_(r, 3, h)

/* IQ4_XS quad h (sub-blocks 4h..4h+3) of 2 rows' super-blocks at w, rb bytes apart: lane 4r + b
 * the scale of row r's sub-block 4h + b, d (ls - 32), as floats (the AVX-512 kernel's values) */
AVX2 static inline __attribute__((always_inline)) __m256 iq4_xs_scales2(const uint8_t *w, size_t rb,
                                                                        const int R, int h)
{
    uint64_t h0, h1 = 0;
    memcpy(&h0, w, 8);
    if (R > 1)
        memcpy(&h1, w + rb, 8);
    const __m128i H = _mm_set_epi64x((long long)h1, (long long)h0);
    const __m256i idx =
        h ? _mm256_setr_epi8(XS2R_(0, 1), XS2R_(1, 1)) : _mm256_setr_epi8(XS2R_(0, 0), XS2R_(1, 0));
    const __m256i v = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(H), idx);
    const __m256i lo = _mm256_and_si256(
        _mm256_srlv_epi32(v, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4)), _mm256_set1_epi32(0xF));
    const __m256i hi =
        _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(8, 10, 12, 14, 8, 10, 12, 14)),
                         _mm256_set1_epi32(3));
    const __m256i ls =
        _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
    const __m128i dd =
        _mm_shuffle_epi8(H, _mm_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 8, 9, 8, 9, 8, 9, 8, 9));
    return _mm256_mul_ps(_mm256_cvtph_ps(dd), _mm256_cvtepi32_ps(ls));
}
#undef XS2_
#undef XS2R_

/* A quad's weights as the token loop takes them: K[k] group k of every (row, block) lane (the
 * values; nibbles, fifth bits or levels already applied), U[k] their magnitudes (the signed
 * kinds), and each lane's scale and minimum. */
typedef struct {
    __m256i K[8], U[8];
    __m256 sw, mw;
} quad2_w;

/* quad g of rows (R <= 2) of stride rb bytes, its first nbk blocks (4, but for the last quad of a
 * row whose block count is not a multiple of 4) -> *q */
AVX2 static inline __attribute__((always_inline)) void quad_prep_avx2(const uint8_t *w, size_t rb,
                                                                      int64_t g, const int nbk,
                                                                      size_t pf, quad2_w *q,
                                                                      const int R, const int KIND)
{
    const int SIGNED = KIND == CAIRN__QK_Q8_0 || CAIRN__QK_LUT(KIND);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i lut = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)(const void *)cairn__iq4nl_values));
    /* the fifth bits: group 2j and 2j + 1 of a lane test bits e and 4 + e of qh byte j */
    const __m256i mlo = _mm256_set1_epi32(0x08040201), mhi = _mm256_set1_epi32((int)0x80402010u);
    const int BB = KIND == CAIRN__QK_IQ4_XS ? 16 : CAIRN__QK_BYTES(KIND);
    const int qb = KIND == CAIRN__QK_IQ4_XS ? (int)sizeof(cairn__block_iq4_xs) / 2 : 4 * BB;
    /* the quad's first byte in row 0, where its values start */
    const size_t off = KIND == CAIRN__QK_IQ4_XS ? (size_t)(g / 2) * sizeof(cairn__block_iq4_xs)
                                                : (size_t)g * (size_t)qb;
    const uint8_t *q0 = KIND == CAIRN__QK_IQ4_XS
                            ? w + off + offsetof(cairn__block_iq4_xs, qs) + 64 * (size_t)(g & 1)
                            : w + off + CAIRN__QK_QS(KIND);
    if (nbk == 4)
        CAIRN__PF_RUN(w, pf, g, qb, R);
    else
        CAIRN__PF_TAIL(w, pf, off * R, R, rb);
    __m256i Y[4], Z[4], K[8];
#pragma GCC unroll 4
    for (int b = 0; b < 4; b++) {
        if (b < nbk) {
            Y[b] = load2(q0 + b * BB, rb, R);
            if (KIND == CAIRN__QK_Q8_0)
                Z[b] = load2(q0 + b * BB + 16, rb, R);
        } else
            Y[b] = Z[b] = _mm256_setzero_si256();
    }
    tr4x4(Y, K);
    if (KIND == CAIRN__QK_Q8_0)
        tr4x4(Z, K + 4);
    else
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) { /* elements 4k.. low nibbles, 16 + 4k.. high */
            K[4 + k] = _mm256_and_si256(_mm256_srli_epi16(K[k], 4), m4);
            K[k] = _mm256_and_si256(K[k], m4);
            if (CAIRN__QK_LUT(KIND)) {
                K[k] = _mm256_shuffle_epi8(lut, K[k]);
                K[4 + k] = _mm256_shuffle_epi8(lut, K[4 + k]);
            }
        }
    if (CAIRN__QK_FIVE(KIND)) {
        /* lane 4r + b: block b's qh word of row r */
        const int QH = KIND == CAIRN__QK_Q5_0 ? 2 : 4;
        const uint8_t *h0 = w + off + QH, *h1 = h0 + rb;
        const __m256i H = _mm256_setr_epi32(
            nbk > 0 ? (int)u32at(h0) : 0, nbk > 1 ? (int)u32at(h0 + BB) : 0,
            nbk > 2 ? (int)u32at(h0 + 2 * BB) : 0, nbk > 3 ? (int)u32at(h0 + 3 * BB) : 0,
            R > 1 && nbk > 0 ? (int)u32at(h1) : 0, R > 1 && nbk > 1 ? (int)u32at(h1 + BB) : 0,
            R > 1 && nbk > 2 ? (int)u32at(h1 + 2 * BB) : 0,
            R > 1 && nbk > 3 ? (int)u32at(h1 + 3 * BB) : 0);
        const __m256i lanes = _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0C0C0C0C, 0,
                                                0x04040404, 0x08080808, 0x0C0C0C0C);
        const __m256i b4 = _mm256_set1_epi8(0x10);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            /* every byte of a lane: byte j of its qh word, whose bits e and 4 + e are
             * elements 8j + e (group 2j) and 8j + 4 + e (group 2j + 1) */
            const __m256i S =
                _mm256_shuffle_epi8(H, _mm256_add_epi8(lanes, _mm256_set1_epi8((char)j)));
            const __m256i lo =
                _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(S, mlo), mlo), b4);
            const __m256i hi =
                _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(S, mhi), mhi), b4);
            /* group k is K[k] for k < 4 (low nibbles), K[k] too for k >= 4 (high) */
            K[2 * j] = _mm256_or_si256(K[2 * j], lo);
            K[2 * j + 1] = _mm256_or_si256(K[2 * j + 1], hi);
        }
    }
    /* lane 4r + b: row r's block b's scale (and minimum) */
    __m256 sw, mw = _mm256_setzero_ps();
    if (KIND == CAIRN__QK_IQ4_XS)
        sw = iq4_xs_scales2(w + off, rb, R, (int)(g & 1));
    else {
        /* the f16 words at byte `at` of each (row, block), built in registers (an array
         * read back whole would wait on its stores) */
#define W16(r, b, at)                                                                              \
    (short)((r) < R && (b) < nbk ? u16at(w + (size_t)(r)*rb + off + (size_t)(b)*BB + (at)) : 0)
#define SC8(at)                                                                                    \
    _mm256_cvtph_ps(_mm_setr_epi16(W16(0, 0, at), W16(0, 1, at), W16(0, 2, at), W16(0, 3, at),     \
                                   W16(1, 0, at), W16(1, 1, at), W16(1, 2, at), W16(1, 3, at)))
        sw = SC8(0);
        if (CAIRN__QK_MIN(KIND))
            mw = SC8(2);
#undef SC8
#undef W16
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        q->K[k] = K[k];
        if (SIGNED)
            q->U[k] = _mm256_sign_epi8(K[k], K[k]); /* |w|: 0..128 as unsigned bytes */
    }
    q->sw = sw;
    q->mw = mw;
}

/* the quad *q (quad g of its rows) @ tokens a[0..T), added into acc[0..T): each group's weights
 * loaded once for the T tokens */
AVX2 static inline __attribute__((always_inline)) void
quad_apply_avx2(const quad2_w *q, const cairn__xq_quad *const *a, int64_t g, __m256 *acc,
                const int T, const int KIND)
{
    const int SIGNED = KIND == CAIRN__QK_Q8_0 || CAIRN__QK_LUT(KIND);
    const __m256i ones = _mm256_set1_epi16(1);
#define BC(p) _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)(const void *)(p)))
    __m256i p[QUAD2_TT];
    if (SIGNED) {
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            p[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m256i Kk = q->K[k], Uk = q->U[k];
#pragma GCC unroll 4
            for (int t = 0; t < T; t++)
                p[t] = _mm256_add_epi32(
                    p[t],
                    _mm256_madd_epi16(
                        _mm256_maddubs_epi16(Uk, _mm256_sign_epi8(BC(a[t][g].a[k]), Kk)), ones));
        }
    } else { /* groups 0-3 and 4-7 in int16; Q4's 8 together, Q5's 4 at a time */
        __m256i s0[QUAD2_TT], s1[QUAD2_TT];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i K0 = q->K[k], K1 = q->K[4 + k];
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                const __m256i u0 = _mm256_maddubs_epi16(K0, BC(a[t][g].a[k]));
                const __m256i u1 = _mm256_maddubs_epi16(K1, BC(a[t][g].a[4 + k]));
                s0[t] = k ? _mm256_add_epi16(s0[t], u0) : u0;
                s1[t] = k ? _mm256_add_epi16(s1[t], u1) : u1;
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            p[t] = CAIRN__QK_FIVE(KIND) ? _mm256_add_epi32(_mm256_madd_epi16(s0[t], ones),
                                                           _mm256_madd_epi16(s1[t], ones))
                                        : _mm256_madd_epi16(_mm256_add_epi16(s0[t], s1[t]), ones);
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        const cairn__xq_quad *x = &a[t][g];
        if (!SIGNED && !CAIRN__QK_MIN(KIND))
            p[t] = _mm256_add_epi32(p[t], BC(x->c));
        const __m256 sx = _mm256_broadcast_ps((const __m128 *)(const void *)x->d);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p[t]), _mm256_mul_ps(q->sw, sx), acc[t]);
        if (CAIRN__QK_MIN(KIND))
            acc[t] = _mm256_fmadd_ps(q->mw, _mm256_broadcast_ps((const __m128 *)(const void *)x->s),
                                     acc[t]);
    }
#undef BC
}

/* quad g of rows (R <= 2) @ tokens a[0..T), its first nbk blocks, added into acc[0..T) */
AVX2 static inline __attribute__((always_inline)) void
quad_step_avx2(const uint8_t *w, size_t rb, const cairn__xq_quad *const *a, int64_t g,
               const int nbk, size_t pf, __m256 *acc, const int R, const int T, const int KIND)
{
    quad2_w q;
    quad_prep_avx2(w, rb, g, nbk, pf, &q, R, KIND);
    quad_apply_avx2(&q, a, g, acc, T, KIND);
}

/* rows (R <= 2, n) of stride rb bytes @ tokens a[0..T) (T <= 4, each in the type's quad form) ->
 * out[t * ld + r]; KIND one of CAIRN__QK_*, R and T constants after inlining */
AVX2 static inline __attribute__((always_inline)) void
quad_tile_avx2(const uint8_t *w, size_t rb, const cairn__xq_quad *const *a, int64_t n, float *out,
               size_t ld, const int R, const int T, const int KIND)
{
    const int64_t nb = n / 32;
    const size_t pf = cairn__pf_ahead(rb, R);
    __m256 acc[QUAD2_TT];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        acc[t] = _mm256_setzero_ps();
    /* whole quads with their block count a constant, then the 1-3 blocks left */
    for (int64_t g = 0; g < nb / 4; g++)
        quad_step_avx2(w, rb, a, g, 4, pf, acc, R, T, KIND);
    if (nb % 4)
        quad_step_avx2(w, rb, a, nb / 4, (int)(nb % 4), pf, acc, R, T, KIND);
    store2_rows(acc, T, R, out, ld);
}

/* ---- Q2_K, Q3_K and Q6_K: (row, sub-block) lanes, one kernel for 1-4 tokens ---------------
 * kernels_cpu_avx512.c's K16 kernel on 256-bit registers, as the quad kernel above is its quad
 * kernel's: a step takes 2 rows and 64 elements of their super-block (4 sub-blocks of 16), lane
 * 4r + s holding row r's sub-block s. A sub-block's 16 fields lie in 16 consecutive bytes, so a
 * 4 x 4 dword transposition of 4 such 16-byte runs of each row gives group g (elements
 * 4g..4g+3) of every lane, and a shift per dword (vpsrlvd) and a mask bring each sub-block's
 * field down:
 *   - Q2_K, Q3_K: the two-bit fields of a half's 32 qs bytes (blocks 2m and 2m + 1 the same
 *     bytes at shifts 2j and 2j + 2), transposed once per two steps; Q3_K's third bits are
 *     hmask's bytes, transposed once per super-block, tested against the step's bit (a compare)
 *     and added as 4. Values 0..3 or 0..7, 4 groups summed in int16 (4 * 2 * 7 * 127 < 2^15);
 *   - Q6_K: the half's 64 ql bytes (sub-block s of step m: bytes 64h + 16s.., nibble m % 2) and
 *     32 qh bytes (bits 4 (m % 2) + 2 (s / 2)), transposed once per two steps. Values 0..63, two
 *     groups summed in int16 (2 * 2 * 63 * 127 < 2^15).
 * Q3_K's -4 comes back as -4 * sum(a) over the sub-block, Q6_K's -32 as 8 times that, Q2_K's
 * minimum (dmin * m) multiplies d_x * sum(a), all prepared with the activation (cairn__xq_k16).
 * The float order is the AVX-512 kernel's lane for lane (acc = fma(isum, sw * d_x, acc), the
 * row (acc lanes s 0 + 1) + (2 + 3)), so Q2_K's and Q3_K's outputs are bit for bit the AVX-512
 * level's; the decode's are the prompt's for all three. */

/* A step's weights as the token loop takes them: P[g] group g of every (row, sub-block) lane,
 * and each lane's scale and (Q2_K) minimum. */
typedef struct {
    __m256i P[4];
    __m256 sw, mw;
} k16_w;

/* step s of rows' K16 weights q @ tokens a[0..T), added into acc[0..T) */
AVX2 static inline __attribute__((always_inline)) void k16_apply_avx2(const k16_w *q,
                                                                      const cairn__xq_k16 *const *a,
                                                                      int64_t s, __m256 *acc,
                                                                      const int T, const int KQ)
{
    const __m256i ones = _mm256_set1_epi16(1);
#define BC(p) _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)(const void *)(p)))
    __m256i s0[QUAD2_TT], s1[QUAD2_TT]; /* Q6_K: groups 0-1 and 2-3; else all 4 in s0 */
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        const __m256i Pg = q->P[g];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const __m256i u = _mm256_maddubs_epi16(Pg, BC(a[t][s].a[g]));
            if (KQ == CAIRN__K16_Q6 && g >= 2)
                s1[t] = g == 2 ? u : _mm256_add_epi16(s1[t], u);
            else
                s0[t] = g == 0 ? u : _mm256_add_epi16(s0[t], u);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        const cairn__xq_k16 *x = &a[t][s];
        __m256i p;
        if (KQ == CAIRN__K16_Q6)
            p = _mm256_add_epi32(
                _mm256_slli_epi32(BC(x->c), 3),
                _mm256_add_epi32(_mm256_madd_epi16(s0[t], ones), _mm256_madd_epi16(s1[t], ones)));
        else {
            p = _mm256_madd_epi16(s0[t], ones);
            if (KQ == CAIRN__K16_Q3)
                p = _mm256_add_epi32(BC(x->c), p);
        }
        const __m256 sx = _mm256_broadcast_ps((const __m128 *)(const void *)x->d);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(q->sw, sx), acc[t]);
        if (KQ == CAIRN__K16_Q2)
            acc[t] = _mm256_fmadd_ps(q->mw, _mm256_broadcast_ps((const __m128 *)(const void *)x->s),
                                     acc[t]);
    }
#undef BC
}

/* super-block i of rows (R <= 2) of stride rb bytes: its 4 steps' weights, each kept in
 * store[m] (store not NULL) or applied at once to tokens a[0..T) into acc[0..T) */
AVX2 static inline __attribute__((always_inline)) void
k16_sb_avx2(const uint8_t *w, size_t rb, int64_t i, size_t pf, k16_w *store,
            const cairn__xq_k16 *const *a, __m256 *acc, const int R, const int T, const int KQ)
{
    const int Q3 = KQ == CAIRN__K16_Q3, Q6 = KQ == CAIRN__K16_Q6;
    const size_t bb = Q6   ? sizeof(cairn__block_q6_K)
                      : Q3 ? sizeof(cairn__block_q3_K)
                           : sizeof(cairn__block_q2_K);
    const size_t QS = Q3 ? offsetof(cairn__block_q3_K, qs) : offsetof(cairn__block_q2_K, qs);
    const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(0x0F), four = _mm256_set1_epi8(4);
    {
        const uint8_t *b0 = w + (size_t)i * bb;
        CAIRN__PF_RUN(w, pf, i, (int)bb, R);
        /* W[m], dword r: row r's scales of sub-blocks 4m..4m+3 (a byte each: Q3_K's 6 bits,
         * unsigned, Q6_K's signed 8, or Q2_K's scale | min << 4); D (M): lane 4r + s row r's
         * d (-dmin) */
        __m128i S[2] = {_mm_setzero_si128(), _mm_setzero_si128()}, W[4];
        uint16_t dh[2] = {0, 0}, mh[2] = {0, 0};
#pragma GCC unroll 2
        for (int r = 0; r < R && r < 2; r++) {
            const uint8_t *b = b0 + (size_t)r * rb;
            if (Q6) {
                S[r] = _mm_loadu_si128(
                    (const __m128i *)(const void *)(b + offsetof(cairn__block_q6_K, scales)));
                dh[r] = (uint16_t)u16at(b + offsetof(cairn__block_q6_K, d));
            } else if (Q3) { /* the 12 packed bytes, from the 16 that end with d (in the block) */
                S[r] = _mm_srli_si128(_mm_loadu_si128((const __m128i *)(const void *)(b + bb - 16)),
                                      2);
                dh[r] = (uint16_t)u16at(b + offsetof(cairn__block_q3_K, d));
            } else {
                S[r] = _mm_loadu_si128((const __m128i *)(const void *)b);
                dh[r] = (uint16_t)u16at(b + offsetof(cairn__block_q2_K, d));
                mh[r] = (uint16_t)u16at(b + offsetof(cairn__block_q2_K, dmin));
            }
        }
        { /* the dword transposition: T[k], dword r = dword k of row r's S */
            const __m128i u0 = _mm_unpacklo_epi32(S[0], S[1]), u1 = _mm_unpackhi_epi32(S[0], S[1]);
            const __m128i T0 = u0, T1 = _mm_srli_si128(u0, 8), T2 = u1, T3 = _mm_srli_si128(u1, 8);
            if (Q3) { /* cairn__q3_K_scales_u6 on the 2 rows at once */
                const __m128i n4 = _mm_set1_epi8(0x0F), n2 = _mm_set1_epi8(3);
                W[0] =
                    _mm_or_si128(_mm_and_si128(T0, n4), _mm_slli_epi32(_mm_and_si128(T2, n2), 4));
                W[1] = _mm_or_si128(_mm_and_si128(T1, n4),
                                    _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(T2, 2), n2), 4));
                W[2] = _mm_or_si128(_mm_and_si128(_mm_srli_epi32(T0, 4), n4),
                                    _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(T2, 4), n2), 4));
                W[3] = _mm_or_si128(_mm_and_si128(_mm_srli_epi32(T1, 4), n4),
                                    _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(T2, 6), n2), 4));
            } else
                W[0] = T0, W[1] = T1, W[2] = T2, W[3] = T3;
        }
        const __m256 D =
            _mm256_setr_m128(_mm_set1_ps(_cvtsh_ss(dh[0])), _mm_set1_ps(_cvtsh_ss(dh[1])));
        /* -dmin as 0 - dmin, the AVX-512 kernel's */
        const __m256 M =
            _mm256_sub_ps(_mm256_setzero_ps(), _mm256_setr_m128(_mm_set1_ps(_cvtsh_ss(mh[0])),
                                                                _mm_set1_ps(_cvtsh_ss(mh[1]))));
        /* Q3_K: HG[g], dword s: hmask bytes 16 (s % 2) + 4g.. of each row */
        __m256i HG[4];
        if (Q3) {
            const __m256i ha = load2(b0, rb, R), hb = load2(b0 + 16, rb, R);
            const __m256i Y[4] = {ha, hb, ha, hb};
            tr4x4(Y, HG);
        }
        __m256i G[4], QG[4];
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) {
            if (m % 2 == 0) {
                if (Q6) { /* half m / 2: ql bytes 64h + 16s.., qh bytes 32h + 16 (s % 2).. */
                    const uint8_t *ql = b0 + offsetof(cairn__block_q6_K, ql) + 32 * m,
                                  *qh = b0 + offsetof(cairn__block_q6_K, qh) + 16 * m;
                    const __m256i Y[4] = {load2(ql, rb, R), load2(ql + 16, rb, R),
                                          load2(ql + 32, rb, R), load2(ql + 48, rb, R)};
                    tr4x4(Y, G);
                    const __m256i ha = load2(qh, rb, R), hb = load2(qh + 16, rb, R);
                    const __m256i H[4] = {ha, hb, ha, hb};
                    tr4x4(H, QG);
                } else { /* the 32 qs bytes of half m / 2, dword s: bytes 16 (s % 2) + 4g.. */
                    const __m256i qa = load2(b0 + QS + 16 * m, rb, R),
                                  qb = load2(b0 + QS + 16 * m + 16, rb, R);
                    const __m256i Y[4] = {qa, qb, qa, qb};
                    tr4x4(Y, G);
                }
            }
            /* dword s: the field of block 2m + s / 2 (Q2_K, Q3_K: bits 2j.., j its index in the
             * half; Q6_K: qh bits 2k.., k = 2 (m % 2) + s / 2) */
            const int j0 = 4 * (m % 2);
            const __m256i shv = _mm256_setr_epi32(j0, j0, j0 + 2, j0 + 2, j0, j0, j0 + 2, j0 + 2);
            /* each byte of dword s: hmask bit 2m + s / 2 */
            const int h0 = (int)(0x01010101u << (2 * m)), h1 = (int)(0x01010101u << (2 * m + 1));
            const __m256i hsel = _mm256_setr_epi32(h0, h0, h1, h1, h0, h0, h1, h1);
            __m256i P[4];
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                if (Q6) {
                    const __m256i lo = m % 2 ? _mm256_and_si256(_mm256_srli_epi16(G[g], 4), m4)
                                             : _mm256_and_si256(G[g], m4);
                    P[g] = _mm256_or_si256(
                        lo,
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srlv_epi32(QG[g], shv), m3), 4));
                    continue;
                }
                P[g] = _mm256_and_si256(_mm256_srlv_epi32(G[g], shv), m3);
                if (Q3)
                    P[g] = _mm256_add_epi8(
                        P[g], _mm256_and_si256(
                                  _mm256_cmpeq_epi8(_mm256_and_si256(HG[g], hsel), hsel), four));
            }
            /* lane 4r + s: row r's scale of sub-block 4m + s (and Q2_K's minimum) */
            __m256 sw, mw = _mm256_setzero_ps();
            if (Q6)
                sw = _mm256_mul_ps(D, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(W[m])));
            else if (Q3)
                sw = _mm256_mul_ps(D, _mm256_cvtepi32_ps(_mm256_sub_epi32(
                                          _mm256_cvtepu8_epi32(W[m]), _mm256_set1_epi32(32))));
            else {
                const __m256i us = _mm256_cvtepu8_epi32(W[m]);
                sw = _mm256_mul_ps(
                    D, _mm256_cvtepi32_ps(_mm256_and_si256(us, _mm256_set1_epi32(0xF))));
                mw = _mm256_mul_ps(M, _mm256_cvtepi32_ps(_mm256_srli_epi32(us, 4)));
            }
            k16_w e = {{P[0], P[1], P[2], P[3]}, sw, mw};
            if (store)
                store[m] = e;
            else
                k16_apply_avx2(&e, a, 4 * i + m, acc, T, KQ);
        }
    }
}

/* rows (R <= 2, n) of stride rb bytes @ tokens a[0..T) (T <= 4, form CAIRN__XF_K16) ->
 * out[t * ld + r]; KQ one of K16_* */
AVX2 static inline __attribute__((always_inline)) void
k16_tile_avx2(const uint8_t *w, size_t rb, const cairn__xq_k16 *const *a, int64_t n, float *out,
              size_t ld, const int R, const int T, const int KQ)
{
    const size_t pf = cairn__pf_ahead(rb, R);
    __m256 acc[QUAD2_TT];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / CAIRN__QK_K; i++)
        k16_sb_avx2(w, rb, i, pf, NULL, a, acc, R, T, KQ);
    store2_rows(acc, T, R, out, ld);
}

/* ---- Q4_K: (row, sub-block) lanes, one kernel for 1-4 tokens ---------------------------------
 * kernels_cpu_avx512.c's Q4_K kernel on 256-bit registers: lane s of a row's register holds its
 * sub-block s (of 32 weights), so 8 maddubs (nibbles 0..15, summed in int16: 8 * 2 * 15 * 128 <
 * 2^15) and one madd sum each sub-block's 32 products exactly, and one conversion, one scale
 * product and two multiply-adds per token serve the row's 8 sub-blocks, where dots_q45_K_avx2
 * pays a madd, a conversion and a multiply-add for each. Group k of a row (elements 4k..4k+3 of
 * every sub-block): dword k of each 32-byte chunk c of its nibbles (sub-block 2c low, 2c + 1
 * high), gathered by a 4 x 8 dword transposition, spread to lanes 2c and 2c + 1 (vpermd) and
 * shifted by 0 or 4; the activation's bytes in that order are cairn__xk_block.g. The float order
 * of a row is the AVX-512 kernel's: lane s takes, super-block after super-block, acc = fma(isum,
 * (d * sc) * xd, acc), then acc = fnma(dmin * m, ds, acc); the row is ((a0 + a1) + (a2 + a3)) +
 * ((a4 + a5) + (a6 + a7)). One kernel is the decode (1 token) and the tiles. Q5_K is the same
 * with its fifth bits OR'ed in (lane s of group k: bit s of qh bytes 4k.., by a byte compare) and
 * its values 0..31 summed in int16 four groups at a time (4 * 2 * 31 * 128 < 2^15); the AVX-512
 * level has no such kernel for Q5_K, so those bits are this level's own. */
typedef struct {
    __m256i K[2][8]; /* row r's group k */
    __m256 dsc[2], mf[2];
} q4k_w;

/* super-block i of rows (R <= 2) of stride rb bytes -> *q; Q4_K, or (Q5) Q5_K */
AVX2 static inline __attribute__((always_inline)) void q4k_prep_avx2(const uint8_t *w, size_t rb,
                                                                     int64_t i, size_t pf, q4k_w *q,
                                                                     const int R, const int Q5)
{
    const size_t bb = Q5 ? sizeof(cairn__block_q5_K) : sizeof(cairn__block_q4_K);
    const size_t qs_at = Q5 ? offsetof(cairn__block_q5_K, qs) : offsetof(cairn__block_q4_K, qs);
    const __m256i m4 = _mm256_set1_epi8(0x0F), nib = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);
    const __m256i lo4 = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3),
                  hi4 = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
    CAIRN__PF_RUN(w, pf, i, (int)bb, R);
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
        const uint8_t *b = w + (size_t)r * rb + (size_t)i * bb;
        const cairn__q4_K_head h = cairn__q4_K_head_of(b);
        __m256i C[4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            C[c] = _mm256_loadu_si256((const __m256i *)(const void *)(b + qs_at + 32 * c));
        /* v[k]: dword c of the low half group k's of chunk c, of the high half group k + 4's */
        const __m256i u0 = _mm256_unpacklo_epi32(C[0], C[1]),
                      u1 = _mm256_unpackhi_epi32(C[0], C[1]);
        const __m256i u2 = _mm256_unpacklo_epi32(C[2], C[3]),
                      u3 = _mm256_unpackhi_epi32(C[2], C[3]);
        const __m256i v[4] = {_mm256_unpacklo_epi64(u0, u2), _mm256_unpackhi_epi64(u0, u2),
                              _mm256_unpacklo_epi64(u1, u3), _mm256_unpackhi_epi64(u1, u3)};
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            q->K[r][k] = _mm256_and_si256(
                _mm256_srlv_epi32(_mm256_permutevar8x32_epi32(v[k], lo4), nib), m4);
            q->K[r][k + 4] = _mm256_and_si256(
                _mm256_srlv_epi32(_mm256_permutevar8x32_epi32(v[k], hi4), nib), m4);
        }
        if (Q5) { /* group k's fifth bits: bit s of qh bytes 4k.., in lane s, as 16 */
            const __m256i qh = _mm256_loadu_si256(
                (const __m256i *)(const void *)(b + offsetof(cairn__block_q5_K, qh)));
            const __m256i bit = _mm256_setr_epi32(0x01010101, 0x02020202, 0x04040404, 0x08080808,
                                                  0x10101010, 0x20202020, 0x40404040,
                                                  (int)0x80808080u),
                          b16 = _mm256_set1_epi8(0x10);
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m256i hk = _mm256_permutevar8x32_epi32(qh, _mm256_set1_epi32(k));
                q->K[r][k] = _mm256_or_si256(
                    q->K[r][k],
                    _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hk, bit), bit), b16));
            }
        }
        q->dsc[r] = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(h.d)),
                                  _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                                      _mm_loadl_epi64((const __m128i *)(const void *)&h.sc))));
        q->mf[r] = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(h.dmin)),
                                 _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                                     _mm_loadl_epi64((const __m128i *)(const void *)&h.m))));
    }
}

/* super-block i's weights q @ tokens a[0..T), added into acc[2 t + r] (r < R); Q5_K's values
 * (0..31) are summed in int16 4 groups at a time */
AVX2 static inline __attribute__((always_inline)) void
q4k_apply_avx2(const q4k_w *q, const cairn__xk_block *const *a, int64_t i, __m256 *acc, const int R,
               const int T, const int Q5)
{
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
        __m256i s16[QUAD2_TT], h16[QUAD2_TT]; /* Q5_K: groups 0-3 and 4-7 */
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m256i Kk = q->K[r][k];
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                const __m256i u = _mm256_maddubs_epi16(
                    Kk, _mm256_load_si256((const __m256i *)(const void *)(a[t][i].g + 32 * k)));
                if (Q5 && k >= 4)
                    h16[t] = k > 4 ? _mm256_add_epi16(h16[t], u) : u;
                else
                    s16[t] = k ? _mm256_add_epi16(s16[t], u) : u;
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const cairn__xk_block *x = &a[t][i];
            const __m256i p = Q5 ? _mm256_add_epi32(_mm256_madd_epi16(s16[t], ones),
                                                    _mm256_madd_epi16(h16[t], ones))
                                 : _mm256_madd_epi16(s16[t], ones);
            __m256 *ac = &acc[2 * t + r];
            *ac = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p),
                                  _mm256_mul_ps(q->dsc[r], _mm256_loadu_ps(x->d)), *ac);
            *ac = _mm256_fnmadd_ps(q->mf[r], _mm256_loadu_ps(x->ds), *ac);
        }
    }
}

/* out[t * ld + r] = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) of acc[2 t + r] */
AVX2 static inline __attribute__((always_inline)) void q4k_store(const __m256 *acc, const int T,
                                                                 const int R, float *out, size_t ld)
{
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            __m256 u = _mm256_add_ps(acc[2 * t + r], _mm256_permute_ps(acc[2 * t + r], 0xB1));
            u = _mm256_add_ps(u, _mm256_permute_ps(u, 0x4E));
            out[(size_t)t * ld + r] =
                _mm256_cvtss_f32(u) + _mm_cvtss_f32(_mm256_extractf128_ps(u, 1));
        }
}

/* rows (R <= 2, n) of stride rb bytes @ tokens a[0..T) (T <= 4, cairn__xk blocks) ->
 * out[t * ld + r] */
AVX2 static inline __attribute__((always_inline)) void
q4k_tile_avx2(const uint8_t *w, size_t rb, const cairn__xk_block *const *a, int64_t n, float *out,
              size_t ld, const int R, const int T, const int Q5)
{
    if (R > 2) /* CAIRN__TILE's case of 3 rows, which its passes of 2 never reach */
        return;
    const size_t pf = cairn__pf_ahead(rb, R);
    __m256 acc[2 * QUAD2_TT];
#pragma GCC unroll 8
    for (int e = 0; e < 2 * T; e++)
        acc[e] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / CAIRN__QK_K; i++) {
        q4k_w q;
        q4k_prep_avx2(w, rb, i, pf, &q, R, Q5);
        q4k_apply_avx2(&q, a, i, acc, R, T, Q5);
    }
    q4k_store(acc, T, R, out, ld);
}

/* ---- the prompt's tiles: a row pair's weights prepared once for every token ------------------
 * The kernels above prepare a step's weights (the loads, the transposition, the unpacking, the
 * scales) and apply them to the token at once; for a prompt that was a third of a tile's work,
 * repeated for every 4 tokens. Here a row pair's steps are prepared once into a panel in L1 and
 * every token runs over it: QUAD2_SEG units (FAM_QUAD: a quad of 32-value blocks, one step;
 * FAM_K16: a super-block, four; FAM_Q4K: a super-block, one), 2048 columns, 5-10 KB. A longer row
 * takes several panels, its tokens in blocks of QUAD2_TB whose accumulators wait in memory
 * between them. Each lane's operations are the rows kernels' in the same order, so every output
 * is bit for bit the decode's. */
#define QUAD2_SEG 16
#define QUAD2_TB 64
enum { FAM_QUAD, FAM_K16, FAM_Q4K };

typedef union {
    quad2_w q;
    k16_w k;
    q4k_w k4;
} lane2_w;

/* tokens a[0..T) over the panel's ns steps (the rows' steps s0..): the accumulators (2 a token:
 * FAM_Q4K's are a row's, the others' both rows') start at zero (first) or from accb, and end in
 * out (last) or accb */
AVX2 static inline __attribute__((always_inline)) void
panel_tokens_avx2(const lane2_w *P, int ns, const void *const *a, int64_t s0, int first, int last,
                  __m256 *accb, float *out, size_t ld, const int R, const int T, const int KIND,
                  const int FAM)
{
    __m256 acc[2 * QUAD2_TT];
#pragma GCC unroll 8
    for (int e = 0; e < 2 * T; e++)
        acc[e] = first ? _mm256_setzero_ps() : accb[e];
    for (int s = 0; s < ns; s++) {
        if (FAM == FAM_Q4K)
            q4k_apply_avx2(&P[s].k4, (const cairn__xk_block *const *)a, s0 + s, acc, R, T, KIND);
        else if (FAM == FAM_K16)
            k16_apply_avx2(&P[s].k, (const cairn__xq_k16 *const *)a, s0 + s, acc, T, KIND);
        else
            quad_apply_avx2(&P[s].q, (const cairn__xq_quad *const *)a, s0 + s, acc, T, KIND);
    }
    if (last) {
        if (FAM == FAM_Q4K)
            q4k_store(acc, T, R, out, ld);
        else
            store2_rows(acc, T, R, out, ld);
    } else
#pragma GCC unroll 8
        for (int e = 0; e < 2 * T; e++)
            accb[e] = acc[e];
}

/* rows (R <= 2, n) of stride rb bytes @ tokens a[0..nt) -> out[t * ld + r], family FAM (its
 * KIND) */
AVX2 static inline __attribute__((always_inline)) void
panel_avx2(const uint8_t *w, size_t rb, const void *const *a, int nt, int64_t n, float *out,
           size_t ld, const int R, const int KIND, const int FAM)
{
    const int64_t nb = n / 32, nu = FAM == FAM_QUAD ? (nb + 3) / 4 : n / CAIRN__QK_K;
    const int E = FAM == FAM_K16 ? 4 : 1; /* steps a unit */
    const int segu = FAM == FAM_QUAD ? QUAD2_SEG : QUAD2_SEG / 2;
    const size_t pf = cairn__pf_ahead(rb, R);
    lane2_w P[QUAD2_SEG * 2]; /* 16 quads, 8 super-blocks of 4 steps or 8 of 1 */
    __m256 accb[2 * QUAD2_TB];
    for (int t0 = 0; t0 < nt; t0 += QUAD2_TB) {
        const int tn = nt - t0 < QUAD2_TB ? nt - t0 : QUAD2_TB;
        for (int64_t u0 = 0; u0 < nu; u0 += segu) {
            const int un = (int)(nu - u0 < segu ? nu - u0 : segu);
            for (int u = 0; u < un; u++) {
                if (FAM == FAM_Q4K)
                    q4k_prep_avx2(w, rb, u0 + u, pf, &P[u].k4, R, KIND);
                else if (FAM == FAM_K16) {
                    k16_w e[4];
                    k16_sb_avx2(w, rb, u0 + u, pf, e, NULL, NULL, R, 1, KIND);
#pragma GCC unroll 4
                    for (int m = 0; m < 4; m++)
                        P[4 * u + m].k = e[m];
                } else if (u0 + u < nb / 4)
                    quad_prep_avx2(w, rb, u0 + u, 4, pf, &P[u].q, R, KIND);
                else
                    quad_prep_avx2(w, rb, u0 + u, (int)(nb % 4), pf, &P[u].q, R, KIND);
            }
            const int first = u0 == 0, last = u0 + un == nu, ns = E * un;
            const int64_t s0 = E * u0;
            const void *const *at = a + t0;
            float *o = out + (size_t)t0 * ld;
            __m256 *ab = accb;
            int t = 0;
            for (; t + QUAD2_TT <= tn; t += QUAD2_TT, ab += 2 * QUAD2_TT)
                panel_tokens_avx2(P, ns, at + t, s0, first, last, ab, o + (size_t)t * ld, ld, R,
                                  QUAD2_TT, KIND, FAM);
            switch (tn - t) {
            case 3:
                panel_tokens_avx2(P, ns, at + t, s0, first, last, ab, o + (size_t)t * ld, ld, R, 3,
                                  KIND, FAM);
                break;
            case 2:
                panel_tokens_avx2(P, ns, at + t, s0, first, last, ab, o + (size_t)t * ld, ld, R, 2,
                                  KIND, FAM);
                break;
            case 1:
                panel_tokens_avx2(P, ns, at + t, s0, first, last, ab, o + (size_t)t * ld, ld, R, 1,
                                  KIND, FAM);
                break;
            default:
                break;
            }
        }
    }
}

/* Each type's rows and tile kernels, over any number of rows and tokens */
#define PANEL_KERNELS(name, kernel, X, KIND, FAM)                                                  \
    CAIRN__LANE_ROWS(AVX2, name, kernel, X, KIND, QUAD2_RR)                                        \
    AVX2 static void name##_tile(const uint8_t *w, size_t rb, int nr, const void *const *a,        \
                                 int nt, int64_t n, float *out, size_t ld)                         \
    {                                                                                              \
        int r = 0;                                                                                 \
        for (; r + 2 <= nr; r += 2)                                                                \
            panel_avx2(w + (size_t)r * rb, rb, a, nt, n, out + r, ld, 2, KIND, FAM);               \
        if (r < nr)                                                                                \
            panel_avx2(w + (size_t)r * rb, rb, a, nt, n, out + r, ld, 1, KIND, FAM);               \
    }
#define QUAD2_KERNELS(name, KIND)                                                                  \
    PANEL_KERNELS(name, quad_tile_avx2, cairn__xq_quad, KIND, FAM_QUAD)

QUAD2_KERNELS(q4_0, CAIRN__QK_Q4_0)
QUAD2_KERNELS(q8_0, CAIRN__QK_Q8_0)
QUAD2_KERNELS(q4_1, CAIRN__QK_Q4_1)
QUAD2_KERNELS(q5_0, CAIRN__QK_Q5_0)
QUAD2_KERNELS(q5_1, CAIRN__QK_Q5_1)
QUAD2_KERNELS(iq4_nl, CAIRN__QK_IQ4_NL)
QUAD2_KERNELS(iq4_xs, CAIRN__QK_IQ4_XS)
#undef QUAD2_KERNELS
PANEL_KERNELS(q2_K, k16_tile_avx2, cairn__xq_k16, CAIRN__K16_Q2, FAM_K16)
PANEL_KERNELS(q3_K, k16_tile_avx2, cairn__xq_k16, CAIRN__K16_Q3, FAM_K16)
PANEL_KERNELS(q6_K, k16_tile_avx2, cairn__xq_k16, CAIRN__K16_Q6, FAM_K16)
PANEL_KERNELS(q4_K, q4k_tile_avx2, cairn__xk_block, 0, FAM_Q4K)
PANEL_KERNELS(q5_K, q4k_tile_avx2, cairn__xk_block, 1, FAM_Q4K)
#undef PANEL_KERNELS

/* Q4_K's and Q5_K's dot products (w (n) . x (n); xq: n / 256 cairn__xk blocks) are their rows
 * kernels, so the decode's bits are the prompt's */
#define DOT_LANE(name, rows)                                                                       \
    AVX2 float name(const uint8_t *w, const float *x, const void *xq, const float *xs, int64_t n)  \
    {                                                                                              \
        (void)x, (void)xs;                                                                         \
        float out;                                                                                 \
        rows(w, 0, 1, xq, n, &out);                                                                \
        return out;                                                                                \
    }
DOT_LANE(cairn__dot_q4_K_avx2, q4_K_rows)
DOT_LANE(cairn__dot_q5_K_avx2, q5_K_rows)
#undef DOT_LANE

/* ---- F32, F16 and BF16 weights: the prompt's tiles and the decode's rows --------------------
 * kernels_cpu_avx512.c's float tile and rows kernels on 256-bit registers. A tile of 3 rows x 4
 * tokens keeps 12 accumulators of 8 products each: per 8 columns 3 weight loads (F16 widened by
 * vcvtph2ps, BF16 by a shift), 4 token loads and 12 multiply-adds, so F16 is widened in
 * registers rather than dequantized into memory for sgemm (110M prompt, avx2, alternating: 2 x 6
 * tiles F32 550-610 tok/s, F16 560-650; 3 x 4 F32 740-890, F16 850-1000; 4 x 3 spilled, 250). Each
 * (row, token) result is its accumulator's lanes summed; to float rounding what the dot products
 * give (not bit for bit: the prompt's float products never were, see cairn__matmul). The rows
 * kernel (the decode) lets 4 rows share each load of x, 2 chains a row, prefetching the pass's
 * rows as one run; each row's result is the same in any grouping of the rows. */
#define FT2_RR 3
#define FT2_TT 4

/* 8 weights of type WT (0 F32, 1 F16, 2 BF16) at element k of row p, as floats; the first m
 * only (the rest 0) where m < 8 */
AVX2 static inline __attribute__((always_inline)) __m256 fw8(const uint8_t *p, int64_t k, int m,
                                                             const int WT)
{
    const size_t es = WT == 0 ? 4 : 2;
    if (m < 8) { /* the tail: through a zeroed buffer, once a row */
        uint8_t tmp[32] = {0};
        memcpy(tmp, p + (size_t)k * es, (size_t)m * es);
        return fw8(tmp, 0, 8, WT);
    }
    if (WT == 0)
        return _mm256_loadu_ps((const float *)(const void *)p + k);
    const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(p + 2 * (size_t)k));
    return WT == 1 ? _mm256_cvtph_ps(h)
                   : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* 8 floats at x + k, the first m only (the rest 0) where m < 8 */
AVX2 static inline __attribute__((always_inline)) __m256 fx8(const float *x, int64_t k, int m)
{
    if (m >= 8)
        return _mm256_loadu_ps(x + k);
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_maskload_ps(x + k, _mm256_cmpgt_epi32(_mm256_set1_epi32(m), idx));
}

/* rows (R <= 3, n) of stride rb bytes @ T <= 4 tokens (x[t], n floats each) -> out[t * ld + r] */
AVX2 static inline __attribute__((always_inline)) void
ftile_avx2(const uint8_t *w, size_t rb, const float *const *x, int64_t n, float *out, size_t ld,
           const int R, const int T, const int WT)
{
    const int R2 = R < FT2_RR ? R : FT2_RR;
    __m256 acc[FT2_RR][FT2_TT];
#pragma GCC unroll 2
    for (int r = 0; r < R2; r++)
#pragma GCC unroll 6
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        __m256 wv[FT2_RR];
#pragma GCC unroll 2
        for (int r = 0; r < R2; r++)
            wv[r] = fw8(w + (size_t)r * rb, k, 8, WT);
#pragma GCC unroll 6
        for (int t = 0; t < T; t++) {
            const __m256 xv = _mm256_loadu_ps(x[t] + k);
#pragma GCC unroll 2
            for (int r = 0; r < R2; r++)
                acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    if (k < n) {
        const int m = (int)(n - k);
        __m256 wv[FT2_RR];
#pragma GCC unroll 2
        for (int r = 0; r < R2; r++)
            wv[r] = fw8(w + (size_t)r * rb, k, m, WT);
#pragma GCC unroll 6
        for (int t = 0; t < T; t++) {
            const __m256 xv = fx8(x[t], k, m);
#pragma GCC unroll 2
            for (int r = 0; r < R2; r++)
                acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
#pragma GCC unroll 6
    for (int t = 0; t < T; t++)
#pragma GCC unroll 2
        for (int r = 0; r < R2; r++)
            out[(size_t)t * ld + r] = hsum256(acc[r][t]);
}

CAIRN__FLOAT_TILES(AVX2, cairn__float_tile_avx2, ftile_avx2, FT2_RR, FT2_TT)

/* rows (R <= 4, n) of F32 (WT 0), F16 (1) or BF16 (2) weights, stride rb bytes, . x (n) ->
 * out (R), the rows sharing each load of x */
AVX2 static inline __attribute__((always_inline)) void frows_avx2(const uint8_t *w, size_t rb,
                                                                  const float *x, int64_t n,
                                                                  float *out, const int R,
                                                                  const int WT)
{
    const size_t es = WT == 0 ? 4 : 2;
    __m256 a[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        a[r][0] = a[r][1] = _mm256_setzero_ps();
    /* prefetch as frows_avx512 does: the pass's rows as one run, walked R times as fast */
    const size_t pf = cairn__pf_ahead(rb, R);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        CAIRN__PF_RUN(w, pf, i / 16, (int)(16 * es), R);
        const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            a[r][0] = _mm256_fmadd_ps(fw8(w + (size_t)r * rb, i, 8, WT), x0, a[r][0]);
            a[r][1] = _mm256_fmadd_ps(fw8(w + (size_t)r * rb, i + 8, 8, WT), x1, a[r][1]);
        }
    }
    for (; i < n; i += 8) {
        const int m = n - i < 8 ? (int)(n - i) : 8;
        const __m256 xv = fx8(x, i, m);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            a[r][0] = _mm256_fmadd_ps(fw8(w + (size_t)r * rb, i, m, WT), xv, a[r][0]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        out[r] = hsum256(_mm256_add_ps(a[r][0], a[r][1]));
}

CAIRN__FLOAT_ROWS3(AVX2, frows_avx2)

const cairn__kernel_set cairn__kernels_avx2[] = {
    {CAIRN__GGML_Q4_0, CAIRN__XF_Q4, q4_0_rows, q4_0_tile},
    {CAIRN__GGML_Q8_0, CAIRN__XF_Q8, q8_0_rows, q8_0_tile},
    {CAIRN__GGML_Q4_1, CAIRN__XF_MIN, q4_1_rows, q4_1_tile},
    {CAIRN__GGML_Q5_0, CAIRN__XF_Q5, q5_0_rows, q5_0_tile},
    {CAIRN__GGML_Q5_1, CAIRN__XF_MIN, q5_1_rows, q5_1_tile},
    {CAIRN__GGML_IQ4_NL, CAIRN__XF_Q8, iq4_nl_rows, iq4_nl_tile},
    {CAIRN__GGML_IQ4_XS, CAIRN__XF_Q8, iq4_xs_rows, iq4_xs_tile},
    {CAIRN__GGML_Q2_K, CAIRN__XF_K16, q2_K_rows, q2_K_tile},
    {CAIRN__GGML_Q3_K, CAIRN__XF_K16, q3_K_rows, q3_K_tile},
    {CAIRN__GGML_Q6_K, CAIRN__XF_K16, q6_K_rows, q6_K_tile},
    {CAIRN__GGML_F32, CAIRN__XF_FLOAT, f32_frows, NULL},
    {CAIRN__GGML_F16, CAIRN__XF_FLOAT, f16_frows, NULL},
    {CAIRN__GGML_BF16, CAIRN__XF_FLOAT, bf16_frows, NULL},
    {CAIRN__GGML_Q4_K, CAIRN__XF_XK, q4_K_rows, q4_K_tile},
    {CAIRN__GGML_Q5_K, CAIRN__XF_XK, q5_K_rows, q5_K_tile},
    {0, -1, NULL, NULL}};
#endif /* __x86_64__ */

/* y (n) += a * x (n) */
AVX2 void cairn__axpy_avx2(float *y, float a, const float *x, int64_t n)
{
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] += a * x[i];
}
#endif
