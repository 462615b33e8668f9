/* gpu/cpu/kernels_cpu_elt.c - the element-wise operations of a layer (RMS norm, softmax,
 * SwiGLU) and one head's attention at decode, over a KV cache of floats or of IEEE halves.
 *
 * They are cheap next to the products, but they run on the calling thread between two
 * products while the pool's other threads wait, so at decode every microsecond here is lost on
 * all threads at once (12 layers x 2048 expf for SwiGLU alone were ~5% of a 110M token). Each
 * has a plain C version (the reference, and the only one off x86) and an AVX2+FMA one picked
 * by the same run-time level as the products (cairn__kernels_level). The vector exp is a
 * Cody-Waite reduction and a degree-6 polynomial (Cephes' expf), within 2 ulp of expf; inputs
 * are clamped to [-87.3, 88.7], so exp never returns 0 or inf, which neither caller needs.
 *
 * A half cache is widened exactly (vcvtph2ps, or the table-free bit conversion of gpu/quant.h),
 * so attention over it is the float kernel on the widened rows; only the store rounds (to
 * nearest even, the same bits with F16C or without for every number; a NaN stays a NaN, with
 * F16C's payload bits or cairn__f32_to_f16's).
 */
#include <math.h>
#include <stdint.h>

#include "gpu/cpu/kernels_cpu.h"
#include "gpu/quant.h" /* IEEE half conversions */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CAIRN__X86 1
#endif

/* ---- plain C ----------------------------------------------------------------------------------
 */

/* out (n) = x (n) / rms(x) * w (n) */
static void rmsnorm_c(float *out, const float *x, const float *w, int64_t n, float eps)
{
    double ss = 0.0; /* double: the sum of squares of a few thousand values loses bits in float */
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    const float scale = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++)
        out[i] = x[i] * scale * w[i];
}

/* x (n) = softmax(x) */
static void softmax_c(float *x, int64_t n)
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
static void swiglu_c(float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* ---- AVX2 + FMA -------------------------------------------------------------------------------
 */
#ifdef CAIRN__X86
#define AVX2 __attribute__((target("avx2,fma")))

/* exp of 8 floats (see the top of the file) */
AVX2 static inline __m256 exp256(__m256 x)
{
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
    /* x = n ln2 + r, |r| <= ln2/2; ln2 in two parts so that n ln2 is exact */
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* * 2^n: n is in [-126, 128] after the clamp; 2^128 is not a float, so split it */
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i h = _mm256_srai_epi32(ni, 1);
    const __m256 s1 =
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, _mm256_set1_epi32(127)), 23));
    const __m256 s2 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, h), _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

/* sum of 8 floats in double */
AVX2 static inline __m256d widen_add(__m256d acc, __m256 v)
{
    acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    return _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

AVX2 static inline double hsum_pd(__m256d v)
{
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

/* out (n) = x (n) / rms(x) * w (n) */
AVX2 static void rmsnorm_avx2(float *out, const float *x, const float *w, int64_t n, float eps)
{
    __m256d a0 = _mm256_setzero_pd(), a1 = a0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        a0 = _mm256_fmadd_pd(lo, lo, a0);
        a1 = _mm256_fmadd_pd(hi, hi, a1);
    }
    double ss = hsum_pd(_mm256_add_pd(a0, a1));
    for (; i < n; i++)
        ss += (double)x[i] * x[i];
    const float scale = (float)(1.0 / sqrt(ss / (double)n + eps));
    const __m256 vs = _mm256_set1_ps(scale);
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs),
                                                _mm256_loadu_ps(w + i)));
    for (; i < n; i++)
        out[i] = x[i] * scale * w[i];
}

/* x (n) = softmax(x) */
AVX2 static void softmax_avx2(float *x, int64_t n)
{
    __m256 vm = _mm256_set1_ps(x[0]);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(vm), _mm256_extractf128_ps(vm, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    float max = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
    for (; i < n; i++)
        max = x[i] > max ? x[i] : max;
    vm = _mm256_set1_ps(max);
    __m256d acc = _mm256_setzero_pd();
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(x + i, e);
        acc = widen_add(acc, e);
    }
    double sum = hsum_pd(acc);
    if (i < n) { /* the tail through the same exp, so every element gets the same function */
        float t[8] = {0};
        const int64_t k = n - i;
        for (int64_t j = 0; j < k; j++)
            t[j] = x[i + j] - max;
        _mm256_storeu_ps(t, exp256(_mm256_loadu_ps(t)));
        for (int64_t j = 0; j < k; j++) {
            x[i + j] = t[j];
            sum += t[j];
        }
    }
    const __m256 inv = _mm256_set1_ps((float)(1.0 / sum));
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; i++)
        x[i] *= _mm256_cvtss_f32(inv);
}

/* g (n) = silu(g) * u (n) */
AVX2 static void swiglu_avx2(float *g, const float *u, int64_t n)
{
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(g + i);
        const __m256 e = exp256(_mm256_sub_ps(zero, v));
        _mm256_storeu_ps(
            g + i, _mm256_mul_ps(_mm256_div_ps(v, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
    }
    if (i < n) {
        float t[8] = {0}, e[8];
        const int64_t k = n - i;
        for (int64_t j = 0; j < k; j++)
            t[j] = -g[i + j];
        _mm256_storeu_ps(e, exp256(_mm256_loadu_ps(t)));
        for (int64_t j = 0; j < k; j++)
            g[i + j] = g[i + j] / (1.0f + e[j]) * u[i + j];
    }
}
#endif /* CAIRN__X86 */

/* ---- dispatch ---------------------------------------------------------------------------------
 */

/* out (n) = x (n) / rms(x) * w (n) */
void cairn__rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps)
{
#ifdef CAIRN__X86
    if (cairn__kernels_level() >= 1) {
        rmsnorm_avx2(out, x, w, n, eps);
        return;
    }
#endif
    rmsnorm_c(out, x, w, n, eps);
}

/* x (n) = softmax(x) */
void cairn__softmax(float *x, int64_t n)
{
#ifdef CAIRN__X86
    if (cairn__kernels_level() >= 1) {
        softmax_avx2(x, n);
        return;
    }
#endif
    softmax_c(x, n);
}

/* g (n) = silu(g) * u (n) */
void cairn__swiglu(float *g, const float *u, int64_t n)
{
#ifdef CAIRN__X86
    if (cairn__kernels_level() >= 1) {
        swiglu_avx2(g, u, n);
        return;
    }
#endif
    swiglu_c(g, u, n);
}

/* sc (n) = softmax(q . K rows * scale), out (hd) = sc @ V */
void cairn__attn_head(const float *q, const float *K, const float *V, size_t ld, int n, int hd,
                      float scale, float *sc, float *out)
{
#if defined(__x86_64__)
    if (cairn__kernels_level() >= 2 && hd % 16 == 0 && hd >= 16 && hd <= 128) {
        cairn__attn_head_avx512(q, K, V, ld, n, hd, scale, sc, out, 0);
        return;
    }
#endif
    for (int t = 0; t < n; t++)
        sc[t] = cairn__dot_f32(q, K + (size_t)t * ld, hd) * scale;
    cairn__softmax(sc, n);
    for (int i = 0; i < hd; i++)
        out[i] = 0.0f;
    for (int t = 0; t < n; t++)
        cairn__axpy(out, sc[t], V + (size_t)t * ld, hd);
}

#ifdef CAIRN__X86
#define F16C __attribute__((target("avx,f16c")))
F16C static void widen_f16c(float *dst, const uint16_t *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++)
        dst[i] = _cvtsh_ss(src[i]);
}

F16C static void narrow_f16c(uint16_t *dst, const float *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++)
        dst[i] = cairn__f32_to_f16(src[i]);
}
#endif

/* dst (n) = the halves src (n) as floats (exact) */
static void widen_f16(float *dst, const uint16_t *src, int64_t n)
{
#ifdef CAIRN__X86
    if (cairn__kernels_level() >= 1) { /* AVX2 implies F16C here (cairn__kernels_level) */
        widen_f16c(dst, src, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++)
        dst[i] = cairn__f16_to_f32_inline(src[i]);
}

void cairn__f32_to_f16_row(uint16_t *dst, const float *src, int64_t n)
{
#ifdef CAIRN__X86
    if (cairn__kernels_level() >= 1) {
        narrow_f16c(dst, src, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++)
        dst[i] = cairn__f32_to_f16(src[i]);
}

/* cairn__attn_head with each K / V row widened first (into tmp) where no kernel widens as it
 * loads: the same calls on the same floats, so the same bits */
void cairn__attn_head_f16(const float *q, const uint16_t *K, const uint16_t *V, size_t ld, int n,
                          int hd, float scale, float *sc, float *tmp, float *out)
{
#if defined(__x86_64__)
    if (cairn__kernels_level() >= 2 && hd % 16 == 0 && hd >= 16 && hd <= 128) {
        cairn__attn_head_avx512(q, K, V, ld, n, hd, scale, sc, out, 1);
        return;
    }
#endif
    for (int t = 0; t < n; t++) {
        widen_f16(tmp, K + (size_t)t * ld, hd);
        sc[t] = cairn__dot_f32(q, tmp, hd) * scale;
    }
    cairn__softmax(sc, n);
    for (int i = 0; i < hd; i++)
        out[i] = 0.0f;
    for (int t = 0; t < n; t++) {
        widen_f16(tmp, V + (size_t)t * ld, hd);
        cairn__axpy(out, sc[t], tmp, hd);
    }
}
