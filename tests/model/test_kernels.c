/* test_kernels.c - every instruction-set level of the CPU decode kernels against plain
 * references, at the shapes the model tests do not reach.
 *
 * test_model.c checks whole forward passes on 512-wide layers, which never exercise the tails
 * of the vector kernels (an AVX-512 Q4_0 pass takes four 32-column blocks per register, so 1-3
 * leftover blocks take another path) nor odd row counts (4 rows per pass). Here each level the
 * CPU has (scalar, avx2, avx512) runs:
 *   - cairn__matvec on Q4_0, Q8_0, Q4_1, Q5_0, Q5_1 and IQ4_NL weights of 1-13 blocks (Q2_K-Q6_K:
 *     1-4 super-blocks) by 1-11 rows, against a float64 dot product of the same dequantized
 * weights and int8-rounded input (what the integer kernels compute), and against the scalar level;
 *   - cairn__matvec on F32, F16 and BF16 rows of every length 1-100 against float64;
 *   - cairn__matvec_n (Q, K, V in one pass) against three cairn__matvec calls;
 *   - the multi-row kernels of the level (AVX2 Q4_0, AVX-512 Q4_0 and Q8_0 4 rows a pass and
 *     Q4_K 2, the last blocks of a row's quad zero-filled) on every grouping of 1-9 rows: each
 * row's result must be bit for bit the one it gets alone, which is what keeps a fused product equal
 * to separate ones and results independent of how the rows are split among threads;
 *   - cairn__matmul on every quantized type (the prompt's products in int8): every token's
 *     outputs bit for bit cairn__matvec's on that token, for 1-130 tokens (passes of up to 64)
 *     and row counts that leave partial groups of 4 and of 16;
 *   - cairn__mat_row (the prompt's dequantization, vector code for every type but F32)
 *     against cairn__dequant_row bit for bit (NaN for NaN: F16C quiets a signalling NaN, the
 *     reference keeps its payload as it is): every one of the 65536 halves as
 *     F16 and BF16 rows, rows of 1-100 halves (the tails), and random blocks of every type, their
 *     scales any half at all;
 *   - cairn__attn_head for head sizes 16-160 and 1-70 positions against a float64
 *     dot / softmax / weighted sum, and cairn__attn_head_f16 (a half cache) against it on the
 *     widened rows, bit for bit, with the rounding of cairn__f32_to_f16_row.
 * The weight buffers are allocated to their exact size, so a kernel that reads past a row is
 * caught under ASan or valgrind.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gguf.h"
#include "gpu/cpu/kernels_cpu.h"
#include "gpu/quant.h"
#include "gpu/cpu/threadpool.h"
#include "tests/tap.h"

static const char *levels[] = {"scalar", "avx2", "avx512"};

/* What the integer kernels compute for row r: the input rounded to Q8_0 blocks (scale =
 * max|x| / 127, round to nearest even), dotted in float64 with the dequantized row. */
static double ref_row(const cairn__mat *W, int64_t r, const float *x)
{
    int64_t cols = W->cols;
    float *w = malloc(sizeof(float) * (size_t)cols);
    cairn__mat_row(W, r, w);
    double sum = 0;
    for (int64_t b = 0; b < cols; b += 32) {
        float amax = 0;
        for (int i = 0; i < 32; i++)
            amax = fmaxf(amax, fabsf(x[b + i]));
        float d = amax / 127.0f;
        for (int i = 0; i < 32; i++) {
            float q = d != 0 ? nearbyintf(x[b + i] / d) : 0;
            sum += (double)w[b + i] * (double)(q * d);
        }
    }
    free(w);
    return sum;
}

static void check_matvec(cairn__pool *pool, const char *level, uint32_t type, size_t block_bytes)
{
    int bad_ref = 0, bad_scalar = 0, shapes = 0;
    double worst = 0;
    /* K-quants: rows of 1-4 super-blocks of 256 */
    const int kq = cairn__quant_block_elems(type) == CAIRN__QK_K;
    for (int nbk = kq ? 8 : 1; nbk <= (kq ? 32 : 13); nbk += kq ? 8 : 1) {
        for (int rows = 1; rows <= 11; rows++) {
            int cols = 32 * nbk;
            size_t rb = (size_t)(cols / (int)cairn__quant_block_elems(type)) * block_bytes;
            float *w = malloc(sizeof(float) * (size_t)(cols * rows)),
                  *x = malloc(sizeof(float) * cols);
            unsigned char *q = malloc(rb * (size_t)rows); /* exact: an overrun is caught */
            for (int i = 0; i < cols * rows; i++)
                w[i] = sinf((float)i * 1.7f + (float)rows);
            for (int i = 0; i < cols; i++)
                x[i] = cosf((float)i * 0.3f) * (float)(i % 7);
            for (int r = 0; r < rows; r++)
                cairn__quant_row(type, w + r * cols, q + (size_t)r * rb, (uint64_t)cols);
            cairn__mat W = {type, rows, cols, rb, q};
            void *s = malloc(cairn__matvec_scratch_bytes(cols));
            float y[16], y0[16];
            cairn__kernels_set_isa("scalar");
            cairn__matvec(pool, &W, x, y0, s);
            cairn__kernels_set_isa(level);
            cairn__matvec(pool, &W, x, y, s);
            for (int r = 0; r < rows; r++) {
                double ref = ref_row(&W, r, x), tol = 1e-4 * (1 + fabs(ref)) * sqrt(cols);
                double e = fabs(y[r] - ref);
                worst = e > worst ? e : worst;
                bad_ref += e > tol;
                bad_scalar += fabs(y[r] - y0[r]) > tol;
            }
            shapes++;
            free(w), free(x), free(q), free(s);
        }
    }
    cairn__kernels_set_isa(NULL);
    ok(bad_ref == 0 && bad_scalar == 0,
       "%s %s matvec, %d shapes of %s x 1-11 rows: agrees with the float64 reference "
       "(worst %.2g) and the scalar level (%d, %d rows off)",
       level, cairn__ggml_type_name(type), shapes, kq ? "256-1024 columns" : "1-13 blocks", worst,
       bad_ref, bad_scalar);
}

/* F32, F16 and BF16 rows of every length 1..100 (the vector bodies and their masked or scalar
 * tails) against a float64 dot product of the widened weights; exact-size buffers */
static void check_float_matvec(cairn__pool *pool, const char *level)
{
    static const uint32_t types[] = {CAIRN__GGML_F32, CAIRN__GGML_F16, CAIRN__GGML_BF16};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        int bad = 0, cases = 0;
        double worst = 0;
        for (int cols = 1; cols <= 100; cols++) {
            const int rows = 1 + cols % 5;
            const size_t es = types[t] == CAIRN__GGML_F32 ? 4 : 2, rb = (size_t)cols * es;
            float *wf = malloc(sizeof(float) * (size_t)(cols * rows)),
                  *x = malloc(sizeof(float) * (size_t)cols), y[8], row[100];
            unsigned char *q = malloc(rb * (size_t)rows);
            for (int i = 0; i < cols * rows; i++)
                wf[i] = sinf((float)i * 0.9f) * 3.0f;
            for (int i = 0; i < cols; i++)
                x[i] = cosf((float)i * 0.4f);
            for (int r = 0; r < rows; r++)
                cairn__quant_row(types[t], wf + r * cols, q + (size_t)r * rb, (uint64_t)cols);
            cairn__mat W = {types[t], rows, cols, rb, q};
            void *s = malloc(cairn__matvec_scratch_bytes(cols));
            cairn__kernels_set_isa(level);
            cairn__matvec(pool, &W, x, y, s);
            cairn__kernels_set_isa(NULL);
            for (int r = 0; r < rows; r++) {
                cairn__mat_row(&W, r, row);
                double ref = 0, mag = 0;
                for (int c = 0; c < cols; c++) {
                    ref += (double)row[c] * x[c];
                    mag += fabs((double)row[c] * x[c]);
                }
                const double e = fabs(y[r] - ref) / (mag + 1e-30);
                worst = e > worst ? e : worst;
                bad += e > 1e-6;
            }
            cases++;
            free(wf), free(x), free(q), free(s);
        }
        ok(bad == 0,
           "%s %s matvec, rows of 1-100 columns (%d shapes): agrees with float64 (worst %.2g of "
           "the sum of |products|, %d rows off)",
           level, cairn__ggml_type_name(types[t]), cases, worst, bad);
    }
}

/* Q, K and V of types ty[3] (rows[3] by cols) in one matvec_n: each matrix's rows equal its own
 * matvec's, bit for bit (the activation is prepared once for all the types present) */
static void check_matvec_n(cairn__pool *pool, const char *level, const uint32_t ty[3],
                           const int rows[3], int cols)
{
    float *x = malloc(sizeof(float) * (size_t)cols), *w[3], *y[3], *z[3];
    unsigned char *q[3];
    cairn__mat M[3];
    const cairn__mat *Mp[3];
    for (int i = 0; i < cols; i++)
        x[i] = sinf((float)i * 0.21f);
    for (int k = 0; k < 3; k++) {
        const size_t rb =
            (size_t)cols / cairn__quant_block_elems(ty[k]) * cairn__quant_block_bytes(ty[k]);
        w[k] = malloc(sizeof(float) * (size_t)cols * (size_t)rows[k]);
        q[k] = malloc(rb * (size_t)rows[k]);
        y[k] = malloc(sizeof(float) * (size_t)rows[k]);
        z[k] = malloc(sizeof(float) * (size_t)rows[k]);
        for (int i = 0; i < cols * rows[k]; i++)
            w[k][i] = cosf((float)(i * (k + 2)) * 0.37f);
        for (int r = 0; r < rows[k]; r++)
            cairn__quant_row(ty[k], w[k] + (size_t)r * cols, q[k] + (size_t)r * rb, (uint64_t)cols);
        M[k] = (cairn__mat){ty[k], rows[k], cols, rb, q[k]};
        Mp[k] = &M[k];
    }
    void *s = malloc(cairn__matvec_scratch_bytes(cols));
    cairn__kernels_set_isa(level);
    cairn__matvec_n(pool, Mp, 3, x, y, s);
    int bad = 0;
    for (int k = 0; k < 3; k++) {
        cairn__matvec(pool, &M[k], x, z[k], s);
        for (int r = 0; r < rows[k]; r++)
            bad += y[k][r] != z[k][r];
    }
    cairn__kernels_set_isa(NULL);
    ok(bad == 0,
       "%s matvec_n of Q, K, V (%s, %s, %s; %d, %d, %d rows of %d) equals three matvec calls (%d "
       "off)",
       level, cairn__ggml_type_name(ty[0]), cairn__ggml_type_name(ty[1]),
       cairn__ggml_type_name(ty[2]), rows[0], rows[1], rows[2], cols, bad);
    for (int k = 0; k < 3; k++)
        free(w[k]), free(q[k]), free(y[k]), free(z[k]);
    free(x);
    free(s);
}

/* Calls the level's rows kernel on rows [r0, r0 + nr) of q (rb bytes a row, nbk blocks) */
static void rows_call(const char *level, uint32_t type, const unsigned char *q, size_t rb, int r0,
                      int nr, const void *xp, int cols, float *out)
{
#ifdef __x86_64__
    cairn__rows_fn *rows = NULL;
    cairn__tile_fn *tile = NULL;
    cairn__kernels_find(strcmp(level, "avx512") == 0 ? cairn__kernels_avx512 : cairn__kernels_avx2,
                        type, &rows, &tile);
    rows(q + (size_t)r0 * rb, rb, nr, xp, cols, out + r0);
#else
    (void)level, (void)type, (void)q, (void)rb, (void)r0, (void)nr, (void)xp, (void)cols, (void)out;
#endif
}

/* every split of 1-9 rows into calls of 1-9 rows gives each row the same bits (rows of 1-13
 * blocks of 32, or for Q4_K 1-3 super-blocks) */
static void check_grouping(const char *level, uint32_t type, size_t block_bytes)
{
    int bad = 0, cases = 0;
    const int kq = type == CAIRN__GGML_Q4_K || type == CAIRN__GGML_IQ4_XS ||
                   type == CAIRN__GGML_Q2_K || type == CAIRN__GGML_Q3_K || type == CAIRN__GGML_Q6_K;
    for (int nsb = 1; nsb <= (kq ? 3 : 13); nsb++) {
        const int nbk = kq ? 8 * nsb : nsb, cols = 32 * nbk, rows = 9;
        const size_t rb = (size_t)(kq ? nsb : nbk) * block_bytes;
        float *w = malloc(sizeof(float) * (size_t)(cols * rows)), *x = malloc(sizeof(float) * cols);
        unsigned char *q = malloc(rb * (size_t)rows);
        cairn__xq8_block *xq = malloc(sizeof *xq * (size_t)nbk);
        void *prep = malloc(cairn__matvec_scratch_bytes(cols));
        for (int i = 0; i < cols * rows; i++)
            w[i] = sinf((float)i * 0.91f) * (float)(1 + i % 5);
        for (int i = 0; i < cols; i++)
            x[i] = cosf((float)i * 0.43f);
        for (int r = 0; r < rows; r++)
            cairn__quant_row(type, w + r * cols, q + (size_t)r * rb, (uint64_t)cols);
        cairn__quant_x_avx2(x, xq, nbk);
        const void *xp = xq;
#ifdef __x86_64__
        cairn__rows_fn *rk = NULL;
        cairn__tile_fn *tk = NULL;
        const int form = cairn__kernels_find(strcmp(level, "avx512") == 0 ? cairn__kernels_avx512
                                                                          : cairn__kernels_avx2,
                                             type, &rk, &tk);
        xp = form == CAIRN__XF_XK ? (const void *)cairn__xk_prep(xq, cols, prep)
                                  : cairn__xf_prep(xq, cols, form, prep);
#endif
        float alone[9], y[9];
        for (int r = 0; r < rows; r++)
            rows_call(level, type, q, rb, r, 1, xp, cols, alone);
        /* a first call of `first` rows from row `start`, then the rest in calls of `step` */
        for (int start = 0; start < 4; start++)
            for (int first = 1; first <= rows - start; first++)
                for (int step = 1; step <= 9; step++) {
                    for (int r = start; r < rows;) {
                        const int nr = r == start ? first : (rows - r < step ? rows - r : step);
                        rows_call(level, type, q, rb, r, nr, xp, cols, y);
                        r += nr;
                    }
                    for (int r = start; r < rows; r++)
                        bad += memcmp(&y[r], &alone[r], sizeof(float)) != 0;
                    cases++;
                }
        free(w), free(x), free(q), free(xq), free(prep);
    }
    ok(bad == 0,
       "%s %s rows kernel: %d splits of 9 rows of 1-%d blocks give every row its bits alone (%d "
       "off)",
       level, cairn__ggml_type_name(type), cases, kq ? 3 : 13, bad);
}

static void check_attention(const char *level)
{
    static const int hds[] = {16, 24, 32, 48, 64, 80, 96, 112, 128, 160};
    int bad = 0, cases = 0;
    double worst = 0;
    for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++) {
        for (int n = 1; n <= 70; n += 3) {
            int hd = hds[hi];
            size_t ld = (size_t)hd * 3 + 16; /* a KV row of several heads, this one in the middle */
            float *K = malloc(sizeof(float) * ld * (size_t)n),
                  *V = malloc(sizeof(float) * ld * (size_t)n);
            float q[160], o[160], sc[80];
            double p[80], ref[160];
            for (size_t i = 0; i < ld * (size_t)n; i++) {
                K[i] = sinf((float)i * 0.13f) * 2;
                V[i] = cosf((float)i * 0.07f);
            }
            for (int i = 0; i < hd; i++)
                q[i] = cosf((float)i * 0.5f);
            const float *Kh = K + hd, *Vh = V + hd;
            double mx = -INFINITY, sum = 0;
            for (int t = 0; t < n; t++) {
                double d = 0;
                for (int i = 0; i < hd; i++)
                    d += (double)q[i] * Kh[(size_t)t * ld + (size_t)i];
                p[t] = d * 0.125;
                mx = p[t] > mx ? p[t] : mx;
            }
            for (int t = 0; t < n; t++)
                sum += p[t] = exp(p[t] - mx);
            for (int i = 0; i < hd; i++) {
                ref[i] = 0;
                for (int t = 0; t < n; t++)
                    ref[i] += p[t] / sum * Vh[(size_t)t * ld + (size_t)i];
            }
            cairn__kernels_set_isa(level);
            cairn__attn_head(q, Kh, Vh, ld, n, hd, 0.125f, sc, o);
            for (int i = 0; i < hd; i++) {
                double e = fabs(o[i] - ref[i]);
                worst = e > worst ? e : worst;
                bad += e > 1e-5;
            }
            cases++;
            free(K), free(V);
        }
    }
    cairn__kernels_set_isa(NULL);
    ok(bad == 0,
       "%s attention head, %d cases (head size 16-160, 1-70 positions): agrees with float64 "
       "(worst %.2g, %d values off)",
       level, cases, worst, bad);
}

/* A half cache: cairn__attn_head_f16 on halves gives cairn__attn_head's bits on the widened
 * floats (scores and output), and cairn__f32_to_f16_row rounds as cairn__f32_to_f16 does. */
static void check_attention_f16(const char *level)
{
    static const int hds[] = {16, 24, 32, 48, 64, 80, 96, 112, 128, 160};
    int bad = 0, cases = 0;
    for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++) {
        for (int n = 1; n <= 70; n += 3) {
            const int hd = hds[hi];
            const size_t ld = (size_t)hd * 3 + 16, len = ld * (size_t)n;
            uint16_t *K = malloc(sizeof *K * len), *V = malloc(sizeof *V * len);
            float *Kf = malloc(sizeof *Kf * len), *Vf = malloc(sizeof *Vf * len);
            float q[160], o[160], of[160], sc[80], scf[80], tmp[160];
            for (size_t i = 0; i < len; i++) {
                K[i] = cairn__f32_to_f16(sinf((float)i * 0.13f) * 2);
                V[i] = cairn__f32_to_f16(cosf((float)i * 0.07f));
                Kf[i] = cairn__f16_to_f32(K[i]);
                Vf[i] = cairn__f16_to_f32(V[i]);
            }
            for (int i = 0; i < hd; i++)
                q[i] = cosf((float)i * 0.5f);
            cairn__kernels_set_isa(level);
            cairn__attn_head(q, Kf + hd, Vf + hd, ld, n, hd, 0.125f, scf, of);
            cairn__attn_head_f16(q, K + hd, V + hd, ld, n, hd, 0.125f, sc, tmp, o);
            cairn__kernels_set_isa(NULL);
            bad += memcmp(o, of, sizeof *o * (size_t)hd) != 0 ||
                   memcmp(sc, scf, sizeof *sc * (size_t)n) != 0;
            cases++;
            free(K), free(V), free(Kf), free(Vf);
        }
    }
    ok(bad == 0,
       "%s attention head over halves, %d cases: the float kernel's bits on the widened "
       "rows (%d off)",
       level, cases, bad);

    /* rounding: ties, the largest half, overflow to infinity, subnormal halves, underflow to
     * zero, signs; every length 1..40 so the vector body and its tail both run */
    static const float special[] = {
        0.0f,     -0.0f,     1.0f,          1.00048828125f, 1.000732421875f,
        65504.0f, 65519.99f, 65520.0f,      1e30f,          -1e30f,
        INFINITY, -INFINITY, 5.96e-8f,      2.98e-8f,       2.99e-8f,
        1e-10f,   -6.1e-5f,  3.0517578e-5f, 0.1f,           -2.5f};
    const int ns = (int)(sizeof special / sizeof *special);
    float src[40];
    uint16_t got[40];
    int off = 0, total = 0;
    for (int len = 1; len <= 40; len++) {
        for (int i = 0; i < len; i++)
            src[i] = i < ns ? special[(i + len) % ns] : sinf((float)(i * len)) * 300.0f;
        cairn__kernels_set_isa(level);
        cairn__f32_to_f16_row(got, src, len);
        cairn__kernels_set_isa(NULL);
        for (int i = 0; i < len; i++, total++)
            off += got[i] != cairn__f32_to_f16(src[i]);
    }
    ok(off == 0, "%s f32 -> f16 rows: %d values round as cairn__f32_to_f16 (%d off)", level, total,
       off);
}

/* a == b as floats, bit for bit, or both NaN */
static int same_float(float a, float b)
{
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    return x == y || (a != a && b != b);
}

/* n values of `type` from (a copy of exactly their size of) src: cairn__mat_row at `level`
 * against cairn__dequant_row; the index of the first difference, or -1 */
static int64_t dequant_diff(const char *level, uint32_t type, const uint8_t *from, int64_t n)
{
    float *got = malloc(sizeof(float) * (size_t)n), *want = malloc(sizeof(float) * (size_t)n);
    const uint64_t be = cairn__quant_block_elems(type), bb = cairn__quant_block_bytes(type);
    const size_t bytes = (size_t)((uint64_t)n / be * bb);
    uint8_t *src = malloc(bytes); /* a kernel that reads past the row is caught under ASan */
    memcpy(src, from, bytes);
    const cairn__mat W = {type, 1, n, bytes, src};
    cairn__kernels_set_isa(level);
    cairn__mat_row(&W, 0, got);
    cairn__kernels_set_isa(NULL);
    cairn__dequant_row(type, src, want, (uint64_t)n);
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++)
        if (!same_float(got[i], want[i]))
            bad = i;
    free(got);
    free(want);
    free(src);
    return bad;
}

/* rows x cols random weights of `type` (rows of cols / block elements blocks) with sane scales:
 * every f16 scale set to a small normal value */
static uint8_t *random_weights(uint32_t type, int64_t rows, int64_t cols, uint64_t *seed)
{
    const uint64_t be = cairn__quant_block_elems(type), bb = cairn__quant_block_bytes(type);
    const size_t rb = (size_t)((uint64_t)cols / be * bb);
    uint8_t *w = malloc(rb * (size_t)rows);
    for (size_t i = 0; i < rb * (size_t)rows; i++) {
        *seed ^= *seed << 13, *seed ^= *seed >> 7, *seed ^= *seed << 17;
        w[i] = (uint8_t)(*seed >> 24);
    }
    for (int64_t r = 0; r < rows; r++)
        for (uint64_t b = 0; b < (uint64_t)cols / be; b++) {
            uint8_t *blk = w + (size_t)r * rb + b * bb;
            const uint16_t h = 0x2000 | (uint16_t)(b & 0xff); /* ~0.008 */
            /* d at the end of the block */
            if (type == CAIRN__GGML_Q6_K || type == CAIRN__GGML_Q3_K)
                memcpy(blk + bb - 2, &h, 2);
            else {
                memcpy(blk, &h, 2);
                /* the second scale: Q4_K's dmin, Q4_1's and Q5_1's m */
                if (type == CAIRN__GGML_Q4_K || type == CAIRN__GGML_Q5_K ||
                    type == CAIRN__GGML_Q4_1 || type == CAIRN__GGML_Q5_1)
                    memcpy(blk + 2, &h, 2);
            }
        }
    return w;
}

/* The AVX2 and AVX-512 lane kernels (the types of 32, Q2_K, Q3_K and Q6_K) give the same bits (the
 * same lanes, the same float operations): matvec and matmul of 1, 5 and 64 tokens by 1, 7 and 37
 * rows, 3, 13 and 24 blocks a row (2 and 3 super-blocks for the types of 256), at each level. */
static void check_same_bits(cairn__pool *pool)
{
    static const uint32_t types[] = {CAIRN__GGML_Q8_0,   CAIRN__GGML_Q4_0, CAIRN__GGML_Q4_1,
                                     CAIRN__GGML_Q5_0,   CAIRN__GGML_Q5_1, CAIRN__GGML_IQ4_NL,
                                     CAIRN__GGML_IQ4_XS, CAIRN__GGML_Q2_K, CAIRN__GGML_Q3_K,
                                     CAIRN__GGML_Q6_K};
    static const int ns[3] = {1, 5, 64}, rows_of[3] = {1, 7, 37}, blocks[3] = {3, 13, 24};
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        long bad = 0, cases = 0;
        for (int ci = 0; ci < 3; ci++)
            for (int ri = 0; ri < 3; ri++) {
                /* IQ4_XS's blocks are 32 values, its rows super-blocks of 256 */
                const int64_t cols =
                    cairn__quant_block_elems(types[t]) == 256 || types[t] == CAIRN__GGML_IQ4_XS
                        ? 256 * (2 + ci % 2)
                        : 32 * blocks[ci];
                const int64_t rows = rows_of[ri];
                uint8_t *w = random_weights(types[t], rows, cols, &seed);
                const size_t rb = (size_t)((uint64_t)cols / cairn__quant_block_elems(types[t]) *
                                           cairn__quant_block_bytes(types[t]));
                const cairn__mat W = {types[t], rows, cols, rb, w};
                for (int ni = 0; ni < 3; ni++) {
                    const int64_t n = ns[ni];
                    float *X = malloc(sizeof(float) * (size_t)(n * cols));
                    float *got[2];
                    for (int64_t i = 0; i < n * cols; i++) {
                        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
                        X[i] = (float)((double)(seed >> 11) * 0x1.0p-52 - 1.0);
                    }
                    void *mm = malloc(cairn__matmul_scratch_bytes(&W));
                    void *mv = malloc(cairn__matvec_scratch_bytes(cols));
                    for (int l = 0; l < 2; l++) {
                        got[l] = malloc(sizeof(float) * (size_t)(n * rows));
                        cairn__kernels_set_isa(l ? "avx512" : "avx2");
                        if (n == 1)
                            cairn__matvec(pool, &W, X, got[l], mv);
                        else
                            cairn__matmul(pool, &W, X, n, got[l], mm);
                    }
                    cairn__kernels_set_isa(NULL);
                    for (int64_t i = 0; i < n; i++, cases++)
                        bad += memcmp(got[0] + i * rows, got[1] + i * rows,
                                      sizeof(float) * (size_t)rows) != 0;
                    free(mm), free(mv), free(X), free(got[0]), free(got[1]);
                }
                free(w);
            }
        ok(bad == 0,
           "%s: avx2 and avx512 kernels give the same bits, matvec and matmul (%ld of %ld "
           "tokens differ)",
           cairn__ggml_type_name(types[t]), bad, cases);
    }
}

static void check_matmul_int8(cairn__pool *pool, const char *level)
{
    static const uint32_t types[] = {CAIRN__GGML_Q8_0, CAIRN__GGML_Q4_0,   CAIRN__GGML_Q4_1,
                                     CAIRN__GGML_Q5_0, CAIRN__GGML_Q5_1,   CAIRN__GGML_Q4_K,
                                     CAIRN__GGML_Q5_K, CAIRN__GGML_Q6_K,   CAIRN__GGML_Q3_K,
                                     CAIRN__GGML_Q2_K, CAIRN__GGML_IQ4_NL, CAIRN__GGML_IQ4_XS};
    /* 300 rows: a scratch with room for passes of 64 tokens (130 = 64 + 64 + 2); 6 and 7 tokens:
     * tiles of 4 tokens and every remainder of 1-3 */
    static const int ns[5] = {1, 6, 7, 64, 130}, rows_of[4] = {1, 7, 37, 300};
    uint64_t seed = 0x2545f4914f6cdd1dull;
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        const uint64_t be = cairn__quant_block_elems(types[t]),
                       bb = cairn__quant_block_bytes(types[t]);
        long bad = 0, cases = 0;
        /* 3 blocks (only the Q4_0 kernel's leftovers, one Q8_0 pair and a single block), 13
         * (3 whole quads and 1 left, 6 Q8_0 pairs and 1 left) and 65 (16 whole quads, a panel of
         * the AVX2 tiles, and a second panel of 1 block); 2, 3 and 9 super-blocks */
        for (int ci = 0; ci < 3; ci++)
            for (int ri = 0; ri < 4; ri++) {
                const int64_t cols = ci == 2     ? (int64_t)be * (be == 256 ? 9 : 65)
                                     : be == 256 ? 512 + 256 * ci
                                                 : 96 + 320 * ci;
                const int64_t rows = rows_of[ri];
                const size_t rb = (size_t)((uint64_t)cols / be * bb);
                uint8_t *w = random_weights(types[t], rows, cols, &seed);
                const cairn__mat W = {types[t], rows, cols, rb, w};
                for (int ni = 0; ni < 5; ni++) {
                    const int64_t n = ns[ni];
                    float *X = malloc(sizeof(float) * (size_t)(n * cols));
                    float *got = malloc(sizeof(float) * (size_t)(n * rows));
                    float *one = malloc(sizeof(float) * (size_t)rows);
                    for (int64_t i = 0; i < n * cols; i++) {
                        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
                        X[i] = (float)((double)(seed >> 11) * 0x1.0p-52 - 1.0);
                    }
                    void *mm = malloc(cairn__matmul_scratch_bytes(&W));
                    void *mv = malloc(cairn__matvec_scratch_bytes(cols));
                    cairn__kernels_set_isa(level);
                    cairn__matmul(pool, &W, X, n, got, mm);
                    for (int64_t i = 0; i < n; i++) {
                        cairn__matvec(pool, &W, X + i * cols, one, mv);
                        if (memcmp(one, got + i * rows, sizeof(float) * (size_t)rows) != 0)
                            bad++;
                        cases++;
                    }
                    cairn__kernels_set_isa(NULL);
                    free(mm), free(mv), free(X), free(got), free(one);
                }
                free(w);
            }
        ok(bad == 0,
           "%s: %s matmul (int8) of 1-130 tokens by 1-300 rows, 3 widths = matvec on each, bit for "
           "bit "
           "(%ld of %ld tokens differ)",
           level, cairn__ggml_type_name(types[t]), bad, cases);
    }
}

static void check_dequant(const char *level)
{
    /* every half, as F16 and as BF16 */
    uint8_t *all = malloc(2 * 65536);
    for (uint32_t h = 0; h < 65536; h++)
        all[2 * h] = (uint8_t)h, all[2 * h + 1] = (uint8_t)(h >> 8);
    static const uint32_t halves[2] = {CAIRN__GGML_F16, CAIRN__GGML_BF16};
    for (int t = 0; t < 2; t++) {
        int64_t bad = dequant_diff(level, halves[t], all, 65536);
        for (int64_t n = 1; n <= 100 && bad < 0; n++) /* the tails */
            if (dequant_diff(level, halves[t], all + 2 * (7919 * n % 60000), n) >= 0)
                bad = n;
        ok(bad < 0,
           "%s: %s rows dequantize as cairn__dequant_row does (all 65536 halves, rows of "
           "1-100) (first difference %lld)",
           level, cairn__ggml_type_name(halves[t]), (long long)bad);
    }
    free(all);
    /* random blocks: any byte anywhere, so any half as a scale */
    static const uint32_t blocks[] = {CAIRN__GGML_Q8_0, CAIRN__GGML_Q4_0,   CAIRN__GGML_Q4_1,
                                      CAIRN__GGML_Q5_0, CAIRN__GGML_Q5_1,   CAIRN__GGML_Q4_K,
                                      CAIRN__GGML_Q5_K, CAIRN__GGML_Q6_K,   CAIRN__GGML_Q3_K,
                                      CAIRN__GGML_Q2_K, CAIRN__GGML_IQ4_NL, CAIRN__GGML_IQ4_XS};
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (size_t t = 0; t < sizeof blocks / sizeof *blocks; t++) {
        const uint64_t be = cairn__quant_block_elems(blocks[t]),
                       bb = cairn__quant_block_bytes(blocks[t]);
        int64_t bad = -1;
        uint8_t src[13 * 256];
        for (int nb = 1; nb <= 13 && bad < 0; nb++)
            for (int rep = 0; rep < 40 && bad < 0; rep++) {
                for (uint64_t i = 0; i < nb * bb; i++) {
                    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
                    src[i] = (uint8_t)(seed >> 24);
                }
                if (dequant_diff(level, blocks[t], src, (int64_t)(nb * be)) >= 0)
                    bad = nb;
            }
        ok(bad < 0,
           "%s: %s rows of 1-13 random blocks dequantize as cairn__dequant_row does "
           "(first bad block count %lld)",
           level, cairn__ggml_type_name(blocks[t]), (long long)bad);
    }
}

/* cairn__matmul on the float types (F32, F16, BF16): the prompt's products (on AVX-512 the float
 * tile kernel, 4 rows x 6 tokens, masked tails; elsewhere dequantize + sgemm) against float64
 * sums of the dequantized weights, for 2-130 tokens (tiles of 6 and every remainder), 1-300 rows
 * and widths that are and are not multiples of 16 */
static void check_matmul_float(cairn__pool *pool, const char *level)
{
    static const uint32_t types[] = {CAIRN__GGML_F32, CAIRN__GGML_F16, CAIRN__GGML_BF16};
    static const int ns[5] = {2, 5, 7, 64, 130}, rows_of[4] = {1, 7, 37, 300},
                     cols_of[4] = {16, 40, 333, 2048}; /* 2048: 8 KB F32 rows */
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        const size_t es = types[t] == CAIRN__GGML_F32 ? 4 : 2;
        long bad = 0, cases = 0;
        double worst = 0;
        cairn__kernels_set_isa(level);
        const char *path = cairn__matmul_path(types[t]);
        cairn__kernels_set_isa(NULL);
        for (int ci = 0; ci < 4; ci++)
            for (int ri = 0; ri < 4; ri++) {
                const int64_t cols = cols_of[ci], rows = rows_of[ri];
                if (cols > 333 && rows > 37)
                    continue;
                const size_t rb = (size_t)cols * es;
                uint8_t *w = malloc(rb * (size_t)rows);
                float *wf = malloc(sizeof(float) * (size_t)(rows * cols));
                for (int64_t i = 0; i < rows * cols; i++) {
                    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
                    const float v = (float)((double)(seed >> 11) * 0x1.0p-52 - 1.0);
                    if (types[t] == CAIRN__GGML_F32)
                        memcpy(w + 4 * i, &v, 4);
                    else {
                        const uint16_t h = types[t] == CAIRN__GGML_F16 ? cairn__f32_to_f16(v)
                                                                       : cairn__f32_to_bf16(v);
                        memcpy(w + 2 * i, &h, 2);
                    }
                }
                const cairn__mat W = {types[t], rows, cols, rb, w};
                for (int64_t r = 0; r < rows; r++)
                    cairn__mat_row(&W, r, wf + r * cols);
                for (int ni = 0; ni < 5; ni++) {
                    const int64_t n = ns[ni];
                    float *X = malloc(sizeof(float) * (size_t)(n * cols));
                    float *got = malloc(sizeof(float) * (size_t)(n * rows));
                    for (int64_t i = 0; i < n * cols; i++) {
                        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
                        X[i] = (float)((double)(seed >> 11) * 0x1.0p-52 - 1.0);
                    }
                    void *mm = malloc(cairn__matmul_scratch_bytes(&W));
                    cairn__kernels_set_isa(level);
                    cairn__matmul(pool, &W, X, n, got, mm);
                    cairn__kernels_set_isa(NULL);
                    for (int64_t i = 0; i < n; i++)
                        for (int64_t r = 0; r < rows; r++) {
                            double s = 0, mag = 0;
                            for (int64_t k = 0; k < cols; k++) {
                                s += (double)wf[r * cols + k] * X[i * cols + k];
                                mag += fabs((double)wf[r * cols + k] * X[i * cols + k]);
                            }
                            const double e = fabs(got[i * rows + r] - s) / (mag > 0 ? mag : 1);
                            worst = e > worst ? e : worst;
                            bad += e > 1e-5;
                            cases++;
                        }
                    free(mm), free(X), free(got);
                }
                free(w), free(wf);
            }
        ok(bad == 0,
           "%s: %s matmul of 2-130 tokens by 1-300 rows, widths 16/40/333/2048 (%s): agrees "
           "with float64 (worst %.2g of the sum of |products|, %ld of %ld off)",
           level, cairn__ggml_type_name(types[t]), path, worst, bad, cases);
    }
}

int main(void)
{
    cairn__pool *pool = NULL;
    if (cairn__pool_new(2, &pool) != 0)
        tap_skip_all("no thread pool");
    for (size_t l = 0; l < sizeof levels / sizeof *levels; l++) {
        int rc = cairn__kernels_set_isa(levels[l]);
        cairn__kernels_set_isa(NULL);
        if (rc != 0) {
            skip("%s kernels: this CPU does not have them", levels[l]);
            continue;
        }
        check_matvec(pool, levels[l], CAIRN__GGML_Q4_0, 18);
        check_matvec(pool, levels[l], CAIRN__GGML_Q8_0, 34);
        check_float_matvec(pool, levels[l]);
        check_matvec(pool, levels[l], CAIRN__GGML_Q4_K, 144);
        check_matvec(pool, levels[l], CAIRN__GGML_Q5_K, 176);
        check_matvec(pool, levels[l], CAIRN__GGML_Q3_K, 110);
        check_matvec(pool, levels[l], CAIRN__GGML_Q2_K, 84);
        check_matvec(pool, levels[l], CAIRN__GGML_IQ4_NL, 18);
        check_matvec(pool, levels[l], CAIRN__GGML_IQ4_XS, 136);
        check_matvec(pool, levels[l], CAIRN__GGML_Q6_K, 210);
        check_matvec(pool, levels[l], CAIRN__GGML_Q4_1, 20);
        check_matvec(pool, levels[l], CAIRN__GGML_Q5_0, 22);
        check_matvec(pool, levels[l], CAIRN__GGML_Q5_1, 24);
        {
            static const uint32_t q4[3] = {CAIRN__GGML_Q4_0, CAIRN__GGML_Q4_0, CAIRN__GGML_Q4_0};
            /* a Q4_K_M layer (V in Q6_K), and types needing both activation layouts; on the
             * pool (over 32 KB of weights) */
            static const uint32_t km[3] = {CAIRN__GGML_Q4_K, CAIRN__GGML_Q4_K, CAIRN__GGML_Q6_K};
            static const uint32_t mix[3] = {CAIRN__GGML_Q8_0, CAIRN__GGML_Q6_K, CAIRN__GGML_Q4_K};
            /* the types of 32 with a fifth bit or a minimum, and llama-quantize's Q4_K_M where
             * a matrix's rows are not a multiple of 256 (Q5_0 for Q4_K, Q8_0 for Q6_K) */
            static const uint32_t q5[3] = {CAIRN__GGML_Q5_0, CAIRN__GGML_Q4_1, CAIRN__GGML_Q5_1};
            static const uint32_t kmf[3] = {CAIRN__GGML_Q5_0, CAIRN__GGML_Q5_0, CAIRN__GGML_Q8_0};
            /* llama-quantize's Q5_K_M, and Q4_K_M's attention V and FFN down in Q5_K */
            static const uint32_t k5[3] = {CAIRN__GGML_Q5_K, CAIRN__GGML_Q5_K, CAIRN__GGML_Q6_K};
            /* llama-quantize's Q3_K_M: Q3_K, with attention V and FFN down in Q5_K / Q4_K */
            static const uint32_t k3[3] = {CAIRN__GGML_Q3_K, CAIRN__GGML_Q3_K, CAIRN__GGML_Q4_K};
            /* llama-quantize's Q2_K: Q2_K, attention V in Q3_K / Q4_K */
            static const uint32_t k2[3] = {CAIRN__GGML_Q2_K, CAIRN__GGML_Q2_K, CAIRN__GGML_Q3_K};
            /* llama-quantize's IQ4_NL beside the Q6_K it keeps for some matrices */
            static const uint32_t nl[3] = {CAIRN__GGML_IQ4_NL, CAIRN__GGML_IQ4_NL,
                                           CAIRN__GGML_Q6_K};
            static const int small[3] = {9, 3, 3}, big[3] = {150, 40, 40};
            check_matvec_n(pool, levels[l], q4, small, 32 * 7);
            check_matvec_n(pool, levels[l], km, big, 512);
            check_matvec_n(pool, levels[l], mix, big, 512);
            check_matvec_n(pool, levels[l], q5, small, 32 * 7);
            check_matvec_n(pool, levels[l], kmf, big, 288);
            check_matvec_n(pool, levels[l], k5, big, 512);
            check_matvec_n(pool, levels[l], k3, big, 512);
            check_matvec_n(pool, levels[l], k2, big, 512);
            check_matvec_n(pool, levels[l], nl, big, 512);
            /* llama-quantize's IQ4_XS: IQ4_XS, with IQ4_NL where rows are not a multiple of 256
             * (both take the int8 blocks), and a K-quant beside them */
            static const uint32_t xs[3] = {CAIRN__GGML_IQ4_XS, CAIRN__GGML_IQ4_NL,
                                           CAIRN__GGML_Q4_K};
            check_matvec_n(pool, levels[l], xs, big, 512);
        }
        if (l >= 1) { /* the levels with multi-row kernels: avx2 (the types of 32), avx512 */
            check_grouping(levels[l], CAIRN__GGML_Q4_0, 18);
            check_grouping(levels[l], CAIRN__GGML_Q8_0, 34);
            check_grouping(levels[l], CAIRN__GGML_Q4_1, sizeof(cairn__block_q4_1));
            check_grouping(levels[l], CAIRN__GGML_Q5_0, sizeof(cairn__block_q5_0));
            check_grouping(levels[l], CAIRN__GGML_Q5_1, sizeof(cairn__block_q5_1));
            check_grouping(levels[l], CAIRN__GGML_IQ4_NL, sizeof(cairn__block_iq4_nl));
            check_grouping(levels[l], CAIRN__GGML_IQ4_XS, sizeof(cairn__block_iq4_xs));
            check_grouping(levels[l], CAIRN__GGML_Q2_K, sizeof(cairn__block_q2_K));
            check_grouping(levels[l], CAIRN__GGML_Q3_K, sizeof(cairn__block_q3_K));
            check_grouping(levels[l], CAIRN__GGML_Q6_K, sizeof(cairn__block_q6_K));
        }
        if (l >= 2) {
            check_same_bits(pool);
            check_grouping(levels[l], CAIRN__GGML_Q4_K, sizeof(cairn__block_q4_K));
        }
        check_dequant(levels[l]);
        check_matmul_int8(pool, levels[l]);
        check_matmul_float(pool, levels[l]);
        check_attention(levels[l]);
        check_attention_f16(levels[l]);
    }
    diag("default level on this CPU: %s", cairn__kernels_isa());
    cairn__pool_free(pool);
    return tap_done();
}
