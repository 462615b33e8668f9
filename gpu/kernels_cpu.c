/* gpu/kernels_cpu.c - the CPU's compute: matrix-vector and matrix-matrix products, and the
 * element-wise operations of a layer. Their loops run on the thread pool of gpu/threadpool.c.
 *
 * Decode (one token) is a chain of matrix-vector products whose cost is reading the weights
 * once, so the kernels work directly on the quantized blocks, one output row per dot product,
 * rows split into chunks that the pool's threads claim as they go (every row is still summed by
 * one thread in one order, so no result depends on timing or on which thread ran it). For Q8_0
 * and Q4_0 the activation vector is first rounded to int8 blocks and the inner loops are integer
 * dot products, as in llama.cpp; the K-quants and float types multiply in float. Q4_0, being
 * the cheapest to read, is bound by the dot product itself, so its kernel takes up to 4 rows at
 * once (sharing the activation loads, 4 independent accumulator chains) and prefetches ahead;
 * each row still gets the same arithmetic, so results do not depend on the grouping.
 *
 * Each dot product exists twice: portable C, and an AVX2+FMA(+F16C) version compiled with
 * __attribute__((target)) and picked once at startup with __builtin_cpu_supports, so one binary
 * runs on any x86-64 and uses the vector units where they exist.
 *
 * The prompt is a matrix-matrix product: weights are dequantized a tile of rows at a time into
 * f32 (F32 weights are used in place) and multiplied with sgemm.
 */
#include "gpu/kernels_cpu.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gguf.h"
#include "gpu/quant.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CAIRN__X86 1
#endif

#ifdef CAIRN_HAVE_OPENBLAS
#include <cblas.h>
#endif

/* ==== activation quantization ================================================================ */

/* x rounded to int8 per 32 elements, with a float scale (more precise than ggml's f16 one) */
typedef struct {
    float d;
    int8_t qs[32];
} xq8_block;

static void quantize_x_q8(const float *x, xq8_block *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[i * 32 + j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = d;
        for (int j = 0; j < 32; j++)
            y[i].qs[j] = (int8_t)roundf(x[i * 32 + j] * id);
    }
}

/* ==== dot products: scalar ===================================================================
 * Each: one row w (cols elements of its type) . x -> float. xq: x as xq8 blocks (Q8_0/Q4_0 only).
 * xs: sums of x per 32 elements (K-quants only). */
typedef float (*dot_fn)(const uint8_t *w, const float *x, const void *xq, const float *xs,
                        int64_t cols);
/* nr (1..4) consecutive rows, stride row_bytes, . x -> out (nr), for types whose kernel gains
 * from sharing the activation between rows; each row's result must equal what the kernel gives
 * it in any other grouping. xq: x as xq8 blocks. */
typedef void (*rows_fn)(const uint8_t *w, size_t row_bytes, int nr, const void *xq, int64_t cols,
                        float *out);

/* w (n) . x (n) -> float */
static float dot_f32_c(const uint8_t *w, const float *x, const void *xq, const float *xs, int64_t n)
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
static float dot_f16_c(const uint8_t *w, const float *x, const void *xq, const float *xs, int64_t n)
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
static float dot_bf16_c(const uint8_t *w, const float *x, const void *xq, const float *xs,
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
static float dot_q8_0_c(const uint8_t *w, const float *x, const void *xq, const float *xs,
                        int64_t n)
{
    (void)x, (void)xs;
    const cairn__block_q8_0 *b = (const cairn__block_q8_0 *)w;
    const xq8_block *a = xq;
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
static float dot_q4_0_c(const uint8_t *w, const float *x, const void *xq, const float *xs,
                        int64_t n)
{
    (void)x, (void)xs;
    const cairn__block_q4_0 *b = (const cairn__block_q4_0 *)w;
    const xq8_block *a = xq;
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

/* K-quants in plain C: dequantize a super-block, then multiply */
static float dot_kq_c(uint32_t type, const uint8_t *w, const float *x, int64_t n)
{
    const size_t bb = cairn__quant_block_bytes(type);
    float tmp[CAIRN__QK_K], s = 0.0f;
    for (int64_t i = 0; i < n / CAIRN__QK_K; i++) {
        cairn__dequant_row(type, w + (size_t)i * bb, tmp, CAIRN__QK_K);
        for (int j = 0; j < CAIRN__QK_K; j++)
            s += tmp[j] * x[i * CAIRN__QK_K + j];
    }
    return s;
}

/* w (n) . x (n) -> float */
static float dot_q4_K_c(const uint8_t *w, const float *x, const void *xq, const float *xs,
                        int64_t n)
{
    (void)xq, (void)xs;
    return dot_kq_c(CAIRN__GGML_Q4_K, w, x, n);
}

/* w (n) . x (n) -> float */
static float dot_q6_K_c(const uint8_t *w, const float *x, const void *xq, const float *xs,
                        int64_t n)
{
    (void)xq, (void)xs;
    return dot_kq_c(CAIRN__GGML_Q6_K, w, x, n);
}

/* ==== dot products: AVX2 + FMA =============================================================== */
#ifdef CAIRN__X86
#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define F16(h) _cvtsh_ss(h) /* one half -> float in one instruction (F16C) */

AVX2 static inline float hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* w (n) . x (n) -> float */
AVX2 static float dot_f32_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
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
AVX2 static float dot_f16_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
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
AVX2 static float dot_bf16_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
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
AVX2 static float dot_q8_0_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
                                int64_t n)
{
    (void)x, (void)xs;
    const cairn__block_q8_0 *b = (const cairn__block_q8_0 *)w;
    const xq8_block *a = xq;
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
AVX2 static float dot_q4_0_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
                                int64_t n)
{
    (void)x, (void)xs;
    const cairn__block_q4_0 *b = (const cairn__block_q4_0 *)w;
    const xq8_block *a = xq;
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
 * lane. Each row's arithmetic is the same whatever R is (and the same as dot_q4_0_avx2's: the
 * integer sums are exact), so grouping never changes a result. */
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
 * 12 rows ahead measured best on a Zen 4 host, 4 and 8 clearly slower */
#define Q4_PF 12
/* W rows (R, n) of stride rb bytes . x (n) -> out (R); R is a constant after inlining, and the
 * accumulators are named variables so that they stay in registers */
AVX2 static inline __attribute__((always_inline)) void
q4_0_rows_avx2(const uint8_t *w, size_t rb, const xq8_block *a, int64_t n, float *out, const int R)
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
        _mm_prefetch((const char *)(b0 + i) + Q4_PF * rb, _MM_HINT_T0);
        if (R > 1)
            _mm_prefetch((const char *)(b1 + i) + Q4_PF * rb, _MM_HINT_T0);
        if (R > 2)
            _mm_prefetch((const char *)(b2 + i) + Q4_PF * rb, _MM_HINT_T0);
        if (R > 3)
            _mm_prefetch((const char *)(b3 + i) + Q4_PF * rb, _MM_HINT_T0);
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

/* W rows (nr <= 4, n) of stride rb bytes . x (n) -> out (nr) */
AVX2 static void rows_q4_0_avx2(const uint8_t *w, size_t rb, int nr, const void *xq, int64_t n,
                                float *out)
{
    switch (nr) {
    case 4:
        q4_0_rows_avx2(w, rb, xq, n, out, 4);
        break;
    case 3:
        q4_0_rows_avx2(w, rb, xq, n, out, 3);
        break;
    case 2:
        q4_0_rows_avx2(w, rb, xq, n, out, 2);
        break;
    default:
        q4_0_rows_avx2(w, rb, xq, n, out, 1);
        break;
    }
}

/* 32 unsigned bytes . 32 floats -> 8 partial float sums */
AVX2 static inline __m256 dot_u8x32_f32(const uint8_t *q, const float *x)
{
    __m256 s = _mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)q))),
        _mm256_loadu_ps(x));
    for (int k = 8; k < 32; k += 8)
        s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                                _mm_loadl_epi64((const __m128i *)(const void *)(q + k)))),
                            _mm256_loadu_ps(x + k), s);
    return s;
}

/* Q4_K: sum over a sub-block of (d*sc*q - dmin*m) x = d*sc * (q . x) - dmin*m * sum(x), with
 * sum(x) per 32 elements precomputed once per product (xs). */
/* w (n) . x (n) -> float */
AVX2 static float dot_q4_K_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
                                int64_t n)
{
    (void)xq;
    const cairn__block_q4_K *b = (const cairn__block_q4_K *)w;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    float macc = 0.0f;
    for (int64_t i = 0; i < n / CAIRN__QK_K; i++) {
        const float d = F16(b[i].d), dmin = F16(b[i].dmin);
        const uint8_t *sc = b[i].scales;
        const float *xb = x + i * CAIRN__QK_K;
        const float *xsb = xs + i * 8;
        for (int j = 0; j < 4; j++) {
            uint8_t s1, m1, s2, m2;
            if (j < 2) {
                s1 = sc[2 * j] & 63, m1 = sc[2 * j + 4] & 63;
                s2 = sc[2 * j + 1] & 63, m2 = sc[2 * j + 5] & 63;
            } else {
                const int a = 2 * j, c = 2 * j + 1;
                s1 = (uint8_t)((sc[a + 4] & 0xF) | ((sc[a - 4] >> 6) << 4));
                m1 = (uint8_t)((sc[a + 4] >> 4) | ((sc[a] >> 6) << 4));
                s2 = (uint8_t)((sc[c + 4] & 0xF) | ((sc[c - 4] >> 6) << 4));
                m2 = (uint8_t)((sc[c + 4] >> 4) | ((sc[c] >> 6) << 4));
            }
            const __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(b[i].qs + 32 * j));
            uint8_t lo[32], hi[32];
            _mm256_storeu_si256((__m256i *)(void *)lo, _mm256_and_si256(q, m4));
            _mm256_storeu_si256((__m256i *)(void *)hi,
                                _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * s1), dot_u8x32_f32(lo, xb + 64 * j), acc);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * s2), dot_u8x32_f32(hi, xb + 64 * j + 32), acc);
            macc += dmin * m1 * xsb[2 * j] + dmin * m2 * xsb[2 * j + 1];
        }
    }
    return hsum256(acc) - macc;
}

/* w (n) . x (n) -> float */
AVX2 static float dot_q6_K_avx2(const uint8_t *w, const float *x, const void *xq, const float *xs,
                                int64_t n)
{
    (void)xq, (void)xs;
    const cairn__block_q6_K *b = (const cairn__block_q6_K *)w;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    const __m256i k32 = _mm256_set1_epi32(32);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / CAIRN__QK_K; i++) {
        const float d = F16(b[i].d);
        const float *xb = x + i * CAIRN__QK_K;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b[i].ql + 64 * h, *qh = b[i].qh + 32 * h;
            const int8_t *sc = b[i].scales + 8 * h;
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(const void *)ql);
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 32));
            const __m256i hb = _mm256_loadu_si256((const __m256i *)(const void *)qh);
            uint8_t q[128]; /* 6-bit values 0..63 of the 128 elements of this half */
            _mm256_storeu_si256((__m256i *)(void *)(q + 0),
                                _mm256_or_si256(_mm256_and_si256(l0, m4),
                                                _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4)));
            _mm256_storeu_si256(
                (__m256i *)(void *)(q + 32),
                _mm256_or_si256(
                    _mm256_and_si256(l1, m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4)));
            _mm256_storeu_si256(
                (__m256i *)(void *)(q + 64),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4)));
            _mm256_storeu_si256(
                (__m256i *)(void *)(q + 96),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4)));
            for (int s = 0; s < 8; s++) { /* 16-element sub-blocks */
                const uint8_t *qs = q + 16 * s;
                const float *xs16 = xb + 128 * h + 16 * s;
                __m256 v0 = _mm256_cvtepi32_ps(_mm256_sub_epi32(
                    _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)qs)), k32));
                __m256 v1 = _mm256_cvtepi32_ps(_mm256_sub_epi32(
                    _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(qs + 8))),
                    k32));
                __m256 p = _mm256_fmadd_ps(v1, _mm256_loadu_ps(xs16 + 8),
                                           _mm256_mul_ps(v0, _mm256_loadu_ps(xs16)));
                acc = _mm256_fmadd_ps(_mm256_set1_ps(d * sc[s]), p, acc);
            }
        }
    }
    return hsum256(acc);
}
#endif /* CAIRN__X86 */

/* ==== dispatch ================================================================================ */

typedef struct {
    dot_fn f32, f16, bf16, q8_0, q4_0, q4_K, q6_K;
    rows_fn q4_0_rows; /* NULL: use q4_0 row by row */
    const char *isa;
} dot_table;

static const dot_table dots_scalar = {dot_f32_c,  dot_f16_c,  dot_bf16_c, dot_q8_0_c, dot_q4_0_c,
                                      dot_q4_K_c, dot_q6_K_c, NULL,       "scalar"};
#ifdef CAIRN__X86
static const dot_table dots_avx2 = {dot_f32_avx2,  dot_f16_avx2,   dot_bf16_avx2,
                                    dot_q8_0_avx2, dot_q4_0_avx2,  dot_q4_K_avx2,
                                    dot_q6_K_avx2, rows_q4_0_avx2, "avx2"};
#endif

static _Atomic int force_scalar;

static const dot_table *dots(void)
{
#ifdef CAIRN__X86
    /* __builtin_cpu_supports needs __builtin_cpu_init before use in constructors only; from
     * ordinary code it is ready, and the answer never changes, so no caching is needed */
    if (!atomic_load_explicit(&force_scalar, memory_order_relaxed) &&
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))
        return &dots_avx2;
#endif
    return &dots_scalar;
}

const char *cairn__kernels_isa(void) { return dots()->isa; }

void cairn__kernels_force_scalar(int on) { atomic_store(&force_scalar, on ? 1 : 0); }

static dot_fn dot_for(const dot_table *t, uint32_t type)
{
    switch (type) {
    case CAIRN__GGML_F32:
        return t->f32;
    case CAIRN__GGML_F16:
        return t->f16;
    case CAIRN__GGML_BF16:
        return t->bf16;
    case CAIRN__GGML_Q8_0:
        return t->q8_0;
    case CAIRN__GGML_Q4_0:
        return t->q4_0;
    case CAIRN__GGML_Q4_K:
        return t->q4_K;
    case CAIRN__GGML_Q6_K:
        return t->q6_K;
    default:
        return NULL;
    }
}

/* ==== matrix-vector ============================================================================
 */

size_t cairn__matvec_scratch_bytes(int64_t cols)
{
    const size_t nb = (size_t)(cols + 31) / 32;
    /* int8 blocks for Q8_0/Q4_0 and per-32 sums of x for Q4_K: a fused product over
     * matrices of mixed types needs both */
    return nb * sizeof(xq8_block) + nb * sizeof(float) + 64;
}

#define MV_MAX 4 /* matrices one fused product can take */

typedef struct {
    const cairn__mat *W[MV_MAX];
    float *out[MV_MAX];
    dot_fn dot[MV_MAX];
    rows_fn rows[MV_MAX]; /* NULL where the matrix goes row by row */
    int n;
    int64_t total; /* rows of all matrices together */
    const float *x;
    const void *xq;
    const float *xs;
} mv_job;

/* rows [r0, r1) of the matrices stacked: each row is one dot product in a fixed order, so
 * which thread computes it never changes its value */
static void mv_range(void *arg, int64_t r0, int64_t r1, int ith)
{
    const mv_job *j = arg;
    (void)ith;
    int64_t base = 0;
    for (int k = 0; k < j->n && r0 < r1; k++) {
        const cairn__mat *W = j->W[k];
        const int64_t end = base + W->rows;
        const int64_t stop = r1 < end ? r1 : end;
        if (j->rows[k]) {
            while (r0 < stop) {
                const int nr = stop - r0 < 4 ? (int)(stop - r0) : 4;
                j->rows[k](W->data + (size_t)(r0 - base) * W->row_bytes, W->row_bytes, nr, j->xq,
                           W->cols, j->out[k] + (r0 - base));
                r0 += nr;
            }
        }
        for (; r0 < stop; r0++)
            j->out[k][r0 - base] = j->dot[k](W->data + (size_t)(r0 - base) * W->row_bytes, j->x,
                                             j->xq, j->xs, W->cols);
        base = end;
    }
}

/* W[k] (rows_k, cols) @ x (cols) -> out[k] (rows_k) for k < n, in one pass of the pool */
void cairn__matvec_n(cairn__pool *p, const cairn__mat *const *W, int n, const float *x,
                     float *const *out, void *scratch)
{
    mv_job j;
    memset(&j, 0, sizeof j);
    const int64_t cols = W[0]->cols, nb = cols / 32;
    int need_q8 = 0, need_sums = 0;
    size_t bytes = 0;
    for (int k = 0; k < n && k < MV_MAX; k++) {
        j.W[j.n] = W[k];
        j.out[j.n] = out[k];
        j.dot[j.n] = dot_for(dots(), W[k]->type);
        j.rows[j.n] = W[k]->type == CAIRN__GGML_Q4_0 ? dots()->q4_0_rows : NULL;
        if (!j.dot[j.n]) {
            memset(out[k], 0, (size_t)W[k]->rows * sizeof(float));
            continue;
        }
        need_q8 |= W[k]->type == CAIRN__GGML_Q8_0 || W[k]->type == CAIRN__GGML_Q4_0;
        need_sums |= W[k]->type == CAIRN__GGML_Q4_K;
        j.total += W[k]->rows;
        bytes += (size_t)W[k]->rows * W[k]->row_bytes;
        j.n++;
    }
    j.x = x;
    if (need_q8) {
        quantize_x_q8(x, scratch, nb);
        j.xq = scratch;
    }
    if (need_sums) {
        float *xs = (float *)(void *)((char *)scratch + (size_t)nb * sizeof(xq8_block));
        for (int64_t i = 0; i < nb; i++) {
            float s = 0.0f;
            for (int k = 0; k < 32; k++)
                s += x[32 * i + k];
            xs[i] = s;
        }
        j.xs = xs;
    }
    /* tiny products are not worth waking the workers for */
    if (bytes < 32768)
        mv_range(&j, 0, j.total, 0);
    else
        cairn__pool_for(p, j.total, 0, mv_range, &j);
}

/* W (rows, cols) @ x (cols) -> out (rows) */
void cairn__matvec(cairn__pool *p, const cairn__mat *W, const float *x, float *out, void *scratch)
{
    cairn__matvec_n(p, &W, 1, x, &out, scratch);
}

/* ==== matrix-matrix =============================================================================
 */

void cairn__mat_row(const cairn__mat *W, int64_t r, float *dst)
{
    cairn__dequant_row(W->type, W->data + (size_t)r * W->row_bytes, dst, (uint64_t)W->cols);
}

#define TILE_BYTES (2u << 20) /* dequantized tile: small enough to stay in cache for sgemm */

static int64_t tile_rows(const cairn__mat *W)
{
    int64_t t = (int64_t)(TILE_BYTES / ((size_t)W->cols * sizeof(float)));
    t = t / 16 * 16;
    if (t < 16)
        t = 16;
    return t < W->rows ? t : W->rows;
}

size_t cairn__matmul_scratch_bytes(const cairn__mat *W)
{
    return (size_t)tile_rows(W) * (size_t)W->cols * sizeof(float);
}

typedef struct {
    const cairn__mat *W;
    int64_t r0, nr;
    float *tile;
    /* plain-loop product (no OpenBLAS) */
    const float *X, *T;
    int64_t n;
    float *OUT;
} mm_job;

static void mm_dequant_range(void *arg, int64_t a, int64_t b, int ith)
{
    const mm_job *j = arg;
    (void)ith;
    for (int64_t r = a; r < b; r++)
        cairn__mat_row(j->W, j->r0 + r, j->tile + (size_t)r * (size_t)j->W->cols);
}

#ifndef CAIRN_HAVE_OPENBLAS
/* T (nr, cols) @ X^T: X (n, cols) -> OUT[:, r0:r0+nr] (ld rows) */
static void mm_gemm_range(void *arg, int64_t a, int64_t b, int ith)
{
    const mm_job *j = arg;
    const int64_t cols = j->W->cols;
    const dot_fn dot = dots()->f32;
    (void)ith;
    for (int64_t r = a; r < b; r++)
        for (int64_t i = 0; i < j->n; i++)
            j->OUT[i * j->W->rows + j->r0 + r] =
                dot((const uint8_t *)(j->T + (size_t)r * (size_t)cols), j->X + i * cols, NULL, NULL,
                    cols);
}
#endif

/* W (rows, cols) @ X^T: X (n, cols) -> OUT (n, rows) */
void cairn__matmul(cairn__pool *p, const cairn__mat *W, const float *X, int64_t n, float *OUT,
                   float *scratch)
{
    const int64_t cols = W->cols, rows = W->rows;
#ifdef CAIRN_HAVE_OPENBLAS
    if (W->type == CAIRN__GGML_F32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)rows, (int)cols, 1.0f, X,
                    (int)cols, (const float *)(const void *)W->data, (int)cols, 0.0f, OUT,
                    (int)rows);
        return;
    }
#endif
    const int64_t tr = tile_rows(W);
    for (int64_t r0 = 0; r0 < rows; r0 += tr) {
        mm_job j = {W, r0, rows - r0 < tr ? rows - r0 : tr, scratch, X, scratch, n, OUT};
        if (W->type == CAIRN__GGML_F32)
            j.T = (const float *)(const void *)(W->data + (size_t)r0 * W->row_bytes);
        else
            cairn__pool_for(p, j.nr, 0, mm_dequant_range, &j);
#ifdef CAIRN_HAVE_OPENBLAS
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)j.nr, (int)cols, 1.0f, X,
                    (int)cols, j.T, (int)cols, 0.0f, OUT + r0, (int)rows);
#else
        cairn__pool_for(p, j.nr, 0, mm_gemm_range, &j);
#endif
    }
}

/* ==== element-wise ==============================================================================
 */

/* a (n) . b (n) -> float */
float cairn__dot_f32(const float *a, const float *b, int64_t n)
{
    return dots()->f32((const uint8_t *)(const void *)a, b, NULL, NULL, n);
}

#ifdef CAIRN__X86
AVX2 static void axpy_avx2(float *y, float a, const float *x, int64_t n)
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

/* y (n) += a * x (n) */
void cairn__axpy(float *y, float a, const float *x, int64_t n)
{
#ifdef CAIRN__X86
    if (dots() == &dots_avx2) {
        axpy_avx2(y, a, x, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* out (n) = x (n) / rms(x) * w (n) */
void cairn__rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps)
{
    double ss = 0.0; /* double: the sum of squares of a few thousand values loses bits in float */
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    const float scale = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++)
        out[i] = x[i] * scale * w[i];
}

/* x (n) = softmax(x) */
void cairn__softmax(float *x, int64_t n)
{
    float max = x[0];
    for (int64_t i = 1; i < n; i++)
        max = x[i] > max ? x[i] : max;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
}

/* g (n) = silu(g) * u (n) */
void cairn__swiglu(float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}
