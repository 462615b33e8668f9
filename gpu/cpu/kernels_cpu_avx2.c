/* gpu/cpu/kernels_cpu_avx2.c - the AVX2 + FMA + F16C kernels of gpu/cpu/kernels_cpu.c (which
 * picks them at run time): one dot product per weight type, the 4-row Q4_0 product, the
 * activation's int8 quantization and axpy. Compiled with __attribute__((target)), so the rest of
 * the build keeps the baseline x86-64 instruction set.
 *
 * Q4_0 and Q8_0 multiply in int8 (the activation rounded to int8 blocks, as llama.cpp does):
 * maddubs wants an unsigned left operand, so the weight's sign is moved onto the activation
 * (Q8_0), or the nibbles stay unsigned and the -8 is applied once per activation block (Q4_0).
 * The K-quants multiply in int8 too, against the activation laid out per super-block
 * (cairn__xk_block): their quants are unsigned (Q4_K 0..15, Q6_K 0..63, whose -32 comes off
 * through the activation's prepared sums), scaled per sub-block in float. Q4_1, Q5_0 and Q5_1
 * keep their quants unsigned as Q4_0 does (the fifth bits expanded from their 32-bit word by a
 * shuffle and a compare), their minimum multiplying the activation block's sum.
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

/* signed int8 (32) . signed int8 (32) -> 8 int32 partial sums, via maddubs (which wants an
 * unsigned left operand: move w's sign onto a) */
AVX2 static inline __m256 dot_i8x32(__m256i w, __m256i a)
{
    const __m256i aw = _mm256_sign_epi8(w, w);
    const __m256i sa = _mm256_sign_epi8(a, w);
    const __m256i p16 = _mm256_maddubs_epi16(aw, sa);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

/* w (n) . x (n) -> float */
AVX2 float cairn__dot_q8_0_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
                                int64_t n)
{
    (void)x, (void)xs;
    const cairn__block_q8_0 *b = (const cairn__block_q8_0 *)w;
    const cairn__xq8_block *a = xq;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256i wv = _mm256_loadu_si256((const __m256i *)(const void *)b[i].qs);
        const __m256i av = _mm256_loadu_si256((const __m256i *)(const void *)a[i].qs);
        const __m256 d = _mm256_set1_ps(F16(b[i].d) * a[i].d);
        acc = _mm256_fmadd_ps(d, dot_i8x32(wv, av), acc);
    }
    return hsum256(acc);
}

/* w (n) . x (n) -> float */
AVX2 float cairn__dot_q4_0_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
                                int64_t n)
{
    (void)x, (void)xs;
    const cairn__block_q4_0 *b = (const cairn__block_q4_0 *)w;
    const cairn__xq8_block *a = xq;
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m256i off = _mm256_set1_epi8(8);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)b[i].qs);
        const __m128i lo = _mm_and_si128(q, m4);                    /* elements 0..15 */
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4); /* elements 16..31 */
        const __m256i wv = _mm256_sub_epi8(_mm256_set_m128i(hi, lo), off);
        const __m256i av = _mm256_loadu_si256((const __m256i *)(const void *)a[i].qs);
        const __m256 d = _mm256_set1_ps(F16(b[i].d) * a[i].d);
        acc = _mm256_fmadd_ps(d, dot_i8x32(wv, av), acc);
    }
    return hsum256(acc);
}

/* Q4_0 for decode, R (1..4) consecutive rows per pass. Three things make it ~1.5x the one-row
 * kernel above in cache: the activation block (and its 8*a correction below) is loaded once for
 * R rows, each row has its own accumulator so R fmadd chains run side by side instead of one
 * 4-cycle chain, and the nibbles stay unsigned: (q-8).a = q.a - 8.a, where q.a is one maddubs
 * (q <= 15, so no saturation) and 8.a is shared by all rows, instead of two sign instructions
 * per row. The two nibble halves come from one 128-bit broadcast load shifted by 0 / 4 bits per
 * lane. Each row's arithmetic is the same whatever R is (and the same as cairn__dot_q4_0_avx2's:
 * the integer sums are exact), so grouping never changes a result. */
/* one Q4_0 block (32) . one activation block (av, with a8 = 8 * its pairs and its scale da),
 * added into the row's 8 partial sums */
AVX2 static inline __m256 q4_0_step(__m256 acc, const cairn__block_q4_0 *b, __m256i av, __m256i a8,
                                    __m256 da)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    const __m256i q = _mm256_and_si256(
        _mm256_srlv_epi64(
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)b->qs)),
            _mm256_set_epi64x(4, 4, 0, 0)),
        m4); /* elements 0..15 in the low lane, 16..31 in the high one */
    const __m256i p = _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(q, av), a8), ones);
    const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_set1_epi16((short)b->d)), da);
    return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
}

/* Prefetch distance of the multi-row Q4_0 kernel, in rows: it reads 4 rows side by side, 18
 * bytes of each per step, which the hardware prefetchers do not follow well once the weights
 * are out of cache (without this the kernel ran at half the one-row speed on a 110M model);
 * 12 rows ahead measured best on a Zen 4 host, 4 and 8 clearly slower. The prefetches walk the
 * pass's rows as the one contiguous run they are (as in kernels_cpu_avx512.c), two lines a step
 * where one per row and step was four: out of cache on this Zen 5 VM, 2 threads, 1280-column
 * products went from 35-38 to 38-42 GB/s (in cache the kernel runs at ~47). */
#define Q4_PF 12
/* W rows (R, n) of stride rb bytes . x (n) -> out (R); R is a constant after inlining, and the
 * accumulators are named variables so that they stay in registers */
AVX2 static inline __attribute__((always_inline)) void q4_0_rows_avx2(const uint8_t *w, size_t rb,
                                                                      const cairn__xq8_block *a,
                                                                      int64_t n, float *out,
                                                                      const int R)
{
    const __m256i eight = _mm256_set1_epi8(8);
    const cairn__block_q4_0 *b0 = (const cairn__block_q4_0 *)(const void *)w;
    const cairn__block_q4_0 *b1 = (const cairn__block_q4_0 *)(const void *)(w + rb);
    const cairn__block_q4_0 *b2 = (const cairn__block_q4_0 *)(const void *)(w + 2 * rb);
    const cairn__block_q4_0 *b3 = (const cairn__block_q4_0 *)(const void *)(w + 3 * rb);
    __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256i av = _mm256_loadu_si256((const __m256i *)(const void *)a[i].qs);
        const __m256i a8 = _mm256_maddubs_epi16(eight, av); /* |8 * (a + a')| <= 2032 */
        const __m256 da = _mm256_set1_ps(a[i].d);
        {
            /* the pass's R rows are one contiguous run of R * rb bytes, read 18 R bytes a
             * step: prefetch the lines of that run Q4_PF rows ahead, in order */
            const char *pf = (const char *)w + Q4_PF * rb + (size_t)i * 18 * R;
            for (int e = 0; e < (18 * R + 63) / 64; e++)
                _mm_prefetch(pf + 64 * e, _MM_HINT_T0);
        }
        c0 = q4_0_step(c0, b0 + i, av, a8, da);
        if (R > 1)
            c1 = q4_0_step(c1, b1 + i, av, a8, da);
        if (R > 2)
            c2 = q4_0_step(c2, b2 + i, av, a8, da);
        if (R > 3)
            c3 = q4_0_step(c3, b3 + i, av, a8, da);
    }
    out[0] = hsum256(c0);
    if (R > 1)
        out[1] = hsum256(c1);
    if (R > 2)
        out[2] = hsum256(c2);
    if (R > 3)
        out[3] = hsum256(c3);
}

/* W rows (nr, n) of stride rb bytes . x (n) -> out (nr) */
AVX2 void cairn__q4_0_rows_avx2(const uint8_t *w, size_t rb, int nr, const void *xq, int64_t n,
                                float *out)
{
    CAIRN__ROWS_DISPATCH(q4_0_rows_avx2, w, rb, nr, xq, n, out);
}

/* unsigned bytes u (each <= 63) . signed bytes a -> 8 int32 sums of 4 products; maddubs's pair
 * sums stay within int16 (2 * 63 * 127) */
AVX2 static inline __m256i dot_u8_i8(__m256i u, __m256i a)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1));
}

/* Q4_1, Q5_0 and Q5_1: the quants stay unsigned (0..15, 0..31), so q . a is one maddubs
 * (no saturation: 2 * 31 * 127 fits in int16); Q5_0's -16 comes off as 16 a in the same int16
 * pairs, as Q4_0's -8 in q4_0_step, and the minimum of Q4_1 / Q5_1 multiplies sum(a), the pairs
 * of a maddubs by ones. Integer sums are exact, so each block's terms are the reference's. */

/* the f16 at p (any alignment) as a float */
AVX2 static inline float half_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* the 16 nibble bytes at qs in element order: low nibbles (elements 0..15) in the low lane,
 * high nibbles (16..31) in the high one */
AVX2 static inline __m256i nibbles32(const uint8_t *qs)
{
    const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)qs), m4 = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
}

/* the fifth bits of a Q5 block (32 bits at qh, any alignment): byte e = 0x10 if bit e is set.
 * Byte e takes qh's byte e / 8 (a shuffle of the broadcast word) and tests its bit e % 8. */
AVX2 static inline __m256i q5_high_avx2(const uint8_t *qh)
{
    uint32_t h;
    memcpy(&h, qh, 4);
    const __m256i pick =
        _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)h), pick), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(0x10));
}

/* the int8 activation's pair sums as 8 int32 sums of 4 */
AVX2 static inline __m256i sum_i8(__m256i a)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), a), _mm256_set1_epi16(1));
}

/* w (n) . x (n) -> float; Q4_1 (Q5 0) or Q5_1 (Q5 1): acc + (d xd) (q . a), macc + (m xd) sum(a) */
AVX2 static inline __attribute__((always_inline)) float
dot_min_avx2(const uint8_t *w, const void *xq, int64_t n, const int Q5)
{
    const cairn__xq8_block *a = xq;
    const size_t bb = Q5 ? sizeof(cairn__block_q5_1) : sizeof(cairn__block_q4_1);
    const size_t qs = Q5 ? offsetof(cairn__block_q5_1, qs) : offsetof(cairn__block_q4_1, qs);
    __m256 acc = _mm256_setzero_ps(), macc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++, w += bb) {
        __m256i q = nibbles32(w + qs);
        if (Q5)
            q = _mm256_or_si256(q, q5_high_avx2(w + offsetof(cairn__block_q5_1, qh)));
        const __m256i av = _mm256_loadu_si256((const __m256i *)(const void *)a[i].qs);
        const float xd = a[i].d;
        /* d and m lead both blocks */
        acc = _mm256_fmadd_ps(_mm256_set1_ps(half_at(w + offsetof(cairn__block_q4_1, d)) * xd),
                              _mm256_cvtepi32_ps(dot_u8_i8(q, av)), acc);
        macc = _mm256_fmadd_ps(_mm256_set1_ps(half_at(w + offsetof(cairn__block_q4_1, m)) * xd),
                               _mm256_cvtepi32_ps(sum_i8(av)), macc);
    }
    return hsum256(acc) + hsum256(macc);
}

/* w (n) . x (n) -> float */
AVX2 float cairn__dot_q4_1_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
                                int64_t n)
{
    (void)x, (void)xs;
    return dot_min_avx2(w, xq, n, 0);
}

/* w (n) . x (n) -> float */
AVX2 float cairn__dot_q5_1_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
                                int64_t n)
{
    (void)x, (void)xs;
    return dot_min_avx2(w, xq, n, 1);
}

/* w (n) . x (n) -> float */
AVX2 float cairn__dot_q5_0_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
                                int64_t n)
{
    (void)x, (void)xs;
    const cairn__xq8_block *a = xq;
    const __m256i sixteen = _mm256_set1_epi8(16), ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps(); /* even, odd blocks */
    for (int64_t i = 0; i < n / 32; i++, w += sizeof(cairn__block_q5_0)) {
        const __m256i q = _mm256_or_si256(nibbles32(w + offsetof(cairn__block_q5_0, qs)),
                                          q5_high_avx2(w + offsetof(cairn__block_q5_0, qh)));
        const __m256i av = _mm256_loadu_si256((const __m256i *)(const void *)a[i].qs);
        const __m256i p = _mm256_madd_epi16(
            _mm256_sub_epi16(_mm256_maddubs_epi16(q, av), _mm256_maddubs_epi16(sixteen, av)), ones);
        const __m256 d = _mm256_set1_ps(half_at(w + offsetof(cairn__block_q5_0, d)) * a[i].d);
        if (i & 1)
            acc2 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc2);
        else
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    }
    return hsum256(_mm256_add_ps(acc, acc2));
}

/* IQ4_NL and IQ4_XS: the nibbles look their int8 levels up with one byte shuffle of the 16-entry
 * table, then a signed int8 product as Q8_0's (|level| <= 127, so maddubs's pairs stay in
 * int16). */

/* the 32 levels of the quants at qs (an IQ4_NL block's 16 bytes), in element order */
AVX2 static inline __m256i iq4_levels(const uint8_t *qs)
{
    const __m256i tbl = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)(const void *)cairn__iq4nl_values));
    return _mm256_shuffle_epi8(tbl, nibbles32(qs));
}

/* w (n) . x (n) -> float; xq: n / 32 int8 blocks */
AVX2 float cairn__dot_iq4_nl_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
                                  int64_t n)
{
    (void)x, (void)xs;
    const cairn__xq8_block *a = xq;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}; /* even, odd blocks */
    for (int64_t i = 0; i < n / 32; i++, w += sizeof(cairn__block_iq4_nl)) {
        const __m256i v = iq4_levels(w + offsetof(cairn__block_iq4_nl, qs));
        const __m256i av = _mm256_loadu_si256((const __m256i *)(const void *)a[i].qs);
        const __m256 d = _mm256_set1_ps(half_at(w + offsetof(cairn__block_iq4_nl, d)) * a[i].d);
        acc[i & 1] = _mm256_fmadd_ps(d, dot_i8x32(v, av), acc[i & 1]);
    }
    return hsum256(_mm256_add_ps(acc[0], acc[1]));
}

/* w (n) . x (n) -> float; xq: n / 32 int8 blocks, one per sub-block */
AVX2 float cairn__dot_iq4_xs_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
                                  int64_t n)
{
    (void)x, (void)xs;
    const cairn__xq8_block *a = xq;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}; /* even, odd sub-blocks */
    for (int64_t i = 0; i < n / CAIRN__QK_K; i++, w += sizeof(cairn__block_iq4_xs)) {
        const float d = half_at(w + offsetof(cairn__block_iq4_xs, d));
        for (int ib = 0; ib < 8; ib++) {
            const cairn__xq8_block *b = &a[8 * i + ib];
            const __m256i v = iq4_levels(w + offsetof(cairn__block_iq4_xs, qs) + 16 * ib);
            const __m256i av = _mm256_loadu_si256((const __m256i *)(const void *)b->qs);
            const __m256 f = _mm256_set1_ps(d * (float)cairn__iq4_xs_scale(w, ib) * b->d);
            acc[ib & 1] = _mm256_fmadd_ps(f, dot_i8x32(v, av), acc[ib & 1]);
        }
    }
    return hsum256(_mm256_add_ps(acc[0], acc[1]));
}

/* Q4_K against the int8 activation (cairn__xk_block): per sub-block of 32, the 4-bit quants
 * (unsigned) . the activation in int8, scaled by d * sc * xd; the mins once per super-block,
 * dmin * (m . ds) over the 8 sub-blocks. */
/* Q2_K and Q3_K against the int8 activation: per group g of 32, the quants unsigned (Q2_K 0..3;
 * Q3_K 0..7, the hmask bit as 4); lanes 0-3 of the product are sub-block 2g, lanes 4-7 sub-block
 * 2g + 1, scaled by d * sc * xd (a permute of the 8 factors of the group's half). What the
 * unsigned quants leave out comes off once per super-block from the activation's sums per 16
 * (o16 = 32 * sum, exact): Q2_K's mins as (dmin * m * xd) . o16 / 32, Q3_K's -4 as
 * (d * sc * xd) . o16 / 8. */
/* w (n) . x (n) -> float; xq: n / 256 cairn__xk blocks; Q2_K (Q3 0) or Q3_K (Q3 1) */
AVX2 static inline __attribute__((always_inline)) float
dot_q23_K_avx2(const uint8_t *w, const void *xq, int64_t n, const int Q3)
{
    const cairn__xk_block *xk = xq;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    const size_t bb = Q3 ? sizeof(cairn__block_q3_K) : sizeof(cairn__block_q2_K);
    const size_t qs_at = Q3 ? offsetof(cairn__block_q3_K, qs) : offsetof(cairn__block_q2_K, qs);
    const size_t d_at = Q3 ? offsetof(cairn__block_q3_K, d) : offsetof(cairn__block_q2_K, d);
    /* group k of a half: lanes 0-3 its sub-block 2k, 4-7 its sub-block 2k + 1 */
    const __m256i idx[4] = {
        _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0), _mm256_set_epi32(3, 3, 3, 3, 2, 2, 2, 2),
        _mm256_set_epi32(5, 5, 5, 5, 4, 4, 4, 4), _mm256_set_epi32(7, 7, 7, 7, 6, 6, 6, 6)};
    /* the activation scale of sub-blocks 8h..8h+7: block 4h + s / 2 */
    const __m256i dup[2] = {_mm256_set_epi32(3, 3, 2, 2, 1, 1, 0, 0),
                            _mm256_set_epi32(7, 7, 6, 6, 5, 5, 4, 4)};
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()}; /* one chain per shift */
    __m256 macc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / CAIRN__QK_K; i++, w += bb) {
        const __m256 d = _mm256_set1_ps(half_at(w + d_at));
        const __m256 xd = _mm256_load_ps(xk[i].d);
        __m256 f[2]; /* d * sc * xd of sub-blocks 8h.. */
        __m256i hb = _mm256_setzero_si256();
        if (Q3) {
            uint8_t u[16];
            cairn__q3_K_scales_u6(w + offsetof(cairn__block_q3_K, scales), u);
            const __m128i uv = _mm_loadu_si128((const __m128i *)(const void *)u);
            for (int h = 0; h < 2; h++) {
                const __m256i sc = _mm256_sub_epi32(
                    _mm256_cvtepu8_epi32(h ? _mm_srli_si128(uv, 8) : uv), _mm256_set1_epi32(32));
                f[h] = _mm256_mul_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(sc)),
                                     _mm256_permutevar8x32_ps(xd, dup[h]));
            }
            hb = _mm256_loadu_si256(
                (const __m256i *)(const void *)(w + offsetof(cairn__block_q3_K, hmask)));
            for (int h = 0; h < 2; h++) /* the quants' -4: 4 * the sums per 16, o16 / 8 */
                macc = _mm256_fmadd_ps(
                    f[h],
                    _mm256_mul_ps(_mm256_load_ps(xk[i].o16 + 8 * h), _mm256_set1_ps(1.0f / 8.0f)),
                    macc);
        } else {
            const __m128i sb = _mm_loadu_si128(
                (const __m128i *)(const void *)(w + offsetof(cairn__block_q2_K, scales)));
            const __m128i m4 = _mm_set1_epi8(0x0F);
            const __m128i sc = _mm_and_si128(sb, m4), mn = _mm_and_si128(_mm_srli_epi16(sb, 4), m4);
            const __m256 dmin = _mm256_set1_ps(half_at(w + offsetof(cairn__block_q2_K, dmin)));
            for (int h = 0; h < 2; h++) {
                const __m256 xdh = _mm256_permutevar8x32_ps(xd, dup[h]);
                const __m128i sch = h ? _mm_srli_si128(sc, 8) : sc,
                              mnh = h ? _mm_srli_si128(mn, 8) : mn;
                f[h] = _mm256_mul_ps(
                    _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sch))), xdh);
                macc = _mm256_fmadd_ps(
                    _mm256_mul_ps(
                        _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mnh))), xdh),
                    _mm256_mul_ps(_mm256_load_ps(xk[i].o16 + 8 * h), _mm256_set1_ps(1.0f / 32.0f)),
                    macc);
            }
        }
        for (int h = 0; h < 2; h++) {
            const __m256i q2 =
                _mm256_loadu_si256((const __m256i *)(const void *)(w + qs_at + 32 * h));
            for (int j = 0; j < 4; j++) {
                const int g = 4 * h + j;
                __m256i q = _mm256_and_si256(_mm256_srli_epi16(q2, 2 * j), m3);
                const __m256i a =
                    _mm256_load_si256((const __m256i *)(const void *)(xk[i].a + 32 * g));
                if (Q3)
                    q = _mm256_or_si256(
                        q, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, g), one), 2));
                const __m256i p = dot_u8_i8(q, a);
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p),
                                         _mm256_permutevar8x32_ps(f[h], idx[j]), acc[j]);
            }
        }
    }
    return hsum256(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))) -
           hsum256(macc);
}

/* w (n) . x (n) -> float; xq: n / 256 cairn__xk blocks */
AVX2 float cairn__dot_q2_K_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
                                int64_t n)
{
    (void)x, (void)xs;
    return dot_q23_K_avx2(w, xq, n, 0);
}

/* w (n) . x (n) -> float; xq: n / 256 cairn__xk blocks */
AVX2 float cairn__dot_q3_K_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
                                int64_t n)
{
    (void)x, (void)xs;
    return dot_q23_K_avx2(w, xq, n, 1);
}

/* Q5_K is Q4_K with a fifth bit: sub-block j's bit j of the 32 qh bytes, isolated by a shift
 * and an AND and put on top of the nibbles before the same product. */
/* w (n) . x (n) -> float; xq: n / 256 cairn__xk blocks; Q4_K (Q5 0) or Q5_K (Q5 1) */
AVX2 static inline __attribute__((always_inline)) float
dot_q45_K_avx2(const uint8_t *w, const void *xq, int64_t n, const int Q5)
{
    const cairn__xk_block *xk = xq;
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const size_t bb = Q5 ? sizeof(cairn__block_q5_K) : sizeof(cairn__block_q4_K);
    const size_t qs_at = Q5 ? offsetof(cairn__block_q5_K, qs) : offsetof(cairn__block_q4_K, qs);
    /* two chains (low and high nibbles): one chain of 8 multiply-adds a super-block was the
     * bound in cache */
    __m256 acc = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps(), macc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / CAIRN__QK_K; i++, w += bb) {
        const cairn__q4_K_head hd = cairn__q4_K_head_of(w);
        const float d = F16(hd.d), dmin = F16(hd.dmin);
        const uint8_t *qs = w + qs_at;
        const __m256i qh =
            Q5 ? _mm256_loadu_si256(
                     (const __m256i *)(const void *)(w + offsetof(cairn__block_q5_K, qh)))
               : _mm256_setzero_si256();
        const uint64_t sc = hd.sc, m = hd.m;
        /* d * sc[j] * xd[j] for the 8 sub-blocks, and the mins' dmin * m[j] * ds[j] */
        float f[8];
        _mm256_storeu_ps(
            f, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(d),
                                           _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                                               (const __m128i *)(const void *)&sc)))),
                             _mm256_loadu_ps(xk[i].d)));
        macc =
            _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(dmin),
                                          _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                                              _mm_loadl_epi64((const __m128i *)(const void *)&m)))),
                            _mm256_loadu_ps(xk[i].ds), macc);
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
            const __m256i p0 =
                dot_u8_i8(lo, _mm256_load_si256((const __m256i *)(const void *)(xk[i].a + 64 * c)));
            const __m256i p1 = dot_u8_i8(
                hi, _mm256_load_si256((const __m256i *)(const void *)(xk[i].a + 64 * c + 32)));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(f[2 * c]), acc);
            acc2 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(f[2 * c + 1]), acc2);
        }
    }
    return hsum256(_mm256_add_ps(acc, acc2)) - hsum256(macc);
}

/* w (n) . x (n) -> float; xq: n / 256 cairn__xk blocks */
AVX2 float cairn__dot_q4_K_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
                                int64_t n)
{
    (void)x, (void)xs;
    return dot_q45_K_avx2(w, xq, n, 0);
}

/* w (n) . x (n) -> float; xq: n / 256 cairn__xk blocks */
AVX2 float cairn__dot_q5_K_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
                                int64_t n)
{
    (void)x, (void)xs;
    return dot_q45_K_avx2(w, xq, n, 1);
}

/* Q6_K against the int8 activation: per sub-block of 16, the 6-bit quants (unsigned, 0..63) .
 * the activation, scaled by d * sc * xd; the offset, 32 * the activation's sum per 16
 * (prepared), comes off once per super-block as the factors . o16. */
/* w (n) . x (n) -> float; xq: n / 256 cairn__xk blocks */
AVX2 float cairn__dot_q6_K_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
                                int64_t n)
{
    (void)x, (void)xs;
    const cairn__xk_block *xk = xq;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    /* group k of 32 in a half: lanes 0-3 are its sub-block 2k, 4-7 its sub-block 2k+1 */
    const __m256i idx[4] = {
        _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0), _mm256_set_epi32(3, 3, 3, 3, 2, 2, 2, 2),
        _mm256_set_epi32(5, 5, 5, 5, 4, 4, 4, 4), _mm256_set_epi32(7, 7, 7, 7, 6, 6, 6, 6)};
    /* the activation scale of sub-blocks 8h..8h+7: block 4h + s / 2 */
    const __m256i dup[2] = {_mm256_set_epi32(3, 3, 2, 2, 1, 1, 0, 0),
                            _mm256_set_epi32(7, 7, 6, 6, 5, 5, 4, 4)};
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()}; /* one chain per group of 32 */
    __m256 off = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / CAIRN__QK_K; i++, w += sizeof(cairn__block_q6_K)) {
        const __m256 d = _mm256_set1_ps(cairn__f16_at(w + offsetof(cairn__block_q6_K, d)));
        const uint8_t *ql = w + offsetof(cairn__block_q6_K, ql),
                      *qh = w + offsetof(cairn__block_q6_K, qh);
        const __m128i sc = _mm_loadu_si128(
            (const __m128i *)(const void *)(w + offsetof(cairn__block_q6_K, scales)));
        const __m256 xd = _mm256_load_ps(xk[i].d);
        const __m256 f[2] = {
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)),
                          _mm256_mul_ps(d, _mm256_permutevar8x32_ps(xd, dup[0]))),
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8))),
                          _mm256_mul_ps(d, _mm256_permutevar8x32_ps(xd, dup[1])))};
        off = _mm256_fmadd_ps(f[0], _mm256_load_ps(xk[i].o16), off);
        off = _mm256_fmadd_ps(f[1], _mm256_load_ps(xk[i].o16 + 8), off);
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 64 * h));
            const __m256i l1 =
                _mm256_loadu_si256((const __m256i *)(const void *)(ql + 64 * h + 32));
            const __m256i hb = _mm256_loadu_si256((const __m256i *)(const void *)(qh + 32 * h));
            /* the 4 groups of 32 of this half, in element order */
            const __m256i g[4] = {
                _mm256_or_si256(_mm256_and_si256(l0, m4),
                                _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4)),
                _mm256_or_si256(
                    _mm256_and_si256(l1, m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4)),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4)),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4))};
            for (int k = 0; k < 4; k++) { /* elements 128h + 32k.., activation block 4h + k */
                const __m256i a =
                    _mm256_load_si256((const __m256i *)(const void *)(xk[i].a + 128 * h + 32 * k));
                acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8_i8(g[k], a)),
                                         _mm256_permutevar8x32_ps(f[h], idx[k]), acc[k]);
            }
        }
    }
    return hsum256(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))) -
           hsum256(off);
}

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
