/* gpu/cpu/kernels_cpu.h - CPU compute kernels: quantized matrix-vector products for decode, the
 * prompt's and the batched decode's matrix-matrix products (tile kernels over the same blocks),
 * and the small element-wise operations of a transformer layer. They run on the thread pool of
 * gpu/cpu/threadpool.h. Internal to gpu/.
 *
 * The weight matrices they take are cairn__mat (gpu/quant.h).
 */
#ifndef CAIRN_GPU_KERNELS_CPU_H
#define CAIRN_GPU_KERNELS_CPU_H

#include <stddef.h>
#include <stdint.h>
#include <string.h> /* memcpy in cairn__q4_K_head_of */

#include "gpu/quant.h" /* the block layouts */
#include "gpu/cpu/threadpool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which instruction set the kernels use: "avx512" (F, BW, VL, VNNI and VBMI), "avx2" (with FMA
 * and F16C) or "scalar": the highest the CPU has, capped by the environment variable
 * CAIRN_KERNELS_ISA (one of those names; so a test suite can run each level) or by
 * cairn__kernels_set_isa. */
const char *cairn__kernels_isa(void);
/* For tests and benchmarks: cap the kernels at the level `name` ("scalar", "avx2", "avx512"), or
 * go back to the default (NULL, "" or "auto": CAIRN_KERNELS_ISA's cap, else none). Every level
 * up to the CPU's own can be chosen, so each set of kernels can be checked on one machine. Returns
 * 0, CAIRN_EUNSUPPORTED if the CPU lacks that level, CAIRN_EINVAL for an unknown name. Not for use
 * while products are running. */
int cairn__kernels_set_isa(const char *name);
/* cairn__kernels_set_isa("scalar") (on != 0) or cairn__kernels_set_isa(NULL) (on == 0). */
void cairn__kernels_force_scalar(int on);

/* Bytes of scratch cairn__matvec needs for an input of `cols` elements (the activation vector
 * quantized to int8 blocks for the integer kernels, and laid out as each kernel reads it). */
size_t cairn__matvec_scratch_bytes(int64_t cols);

/* W (rows, cols) @ x (cols) -> out (rows), rows split over the pool's threads.
 * For quantized weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) x is first
 * rounded to int8 per 32 elements (into scratch) and the products are int8 dot products, as
 * llama.cpp does; the float types (F32, F16, BF16) use x in float. */
void cairn__matvec(cairn__pool *p, const cairn__mat *W, const float *x, float *out, void *scratch);

/* Several products of one input in one pass of the pool (at most 4 matrices, all with the
 * same cols): W[k] (rows_k, cols) @ x (cols) -> out[k] (rows_k). Saves a synchronisation per
 * matrix (Q, K and V; gate and up). */
void cairn__matvec_n(cairn__pool *p, const cairn__mat *const *W, int n, const float *x,
                     float *const *out, void *scratch);

/* Bytes of scratch cairn__matmul needs (an f32 tile of dequantized weight rows, or the int8
 * path's prepared activations, whichever is larger). */
size_t cairn__matmul_scratch_bytes(const cairn__mat *W);
/* W (rows, cols) @ X^T: X (n, cols) -> OUT (n, rows), row-major with leading dimension rows.
 * Quantized weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K): the decode
 * kernels on each token, over groups of rows kept in cache, each token's output bit for bit
 * cairn__matvec's (cairn__cpu_prompt_int8, below). Otherwise in float: dequantizes W a tile at a
 * time (F32 weights are used in place) and multiplies with sgemm (OpenBLAS where cairn__blas_on(),
 * a threaded plain loop otherwise); up to 16 tokens, each thread dequantizes a row at a time and
 * dots it with every token (no tiles, no hand-offs); results match cairn__matvec to float rounding.
 */
void cairn__matmul(cairn__pool *p, const cairn__mat *W, const float *X, int64_t n, float *OUT,
                   float *scratch);
/* W (rows, cols) @ X^T: X (n, cols) -> OUT (n, rows) with every row of OUT bit for bit what
 * cairn__matvec gives its token, for every type (the float types too, unlike cairn__matmul):
 * the weights streamed once a pass for all the tokens, each token's dot products in the decode
 * kernels' order. The batched decode step's product. scratch: cairn__matmul_scratch_bytes(W);
 * n == 1 uses it as cairn__matvec's (which needs less). */
void cairn__matmul_rows(cairn__pool *p, const cairn__mat *W, const float *X, int64_t n, float *OUT,
                        float *scratch);
/* 1 (the default): cairn__matmul multiplies the quantized weights with the decode
 * kernels, the activations rounded to int8 per 32 values as a decode step rounds them, each
 * token's output bit for bit cairn__matvec's; 0: dequantize + sgemm on float activations (the
 * exact float product of the dequantized weights, which the tests' references need). Read at
 * every call. */
extern int cairn__cpu_prompt_int8;
/* 1 (the default): cairn__matmul multiplies F32, F16 and BF16 weights with the ISA's float tile
 * kernel where it has one (AVX-512); 0: dequantize + sgemm (OpenBLAS where it is loaded), as on
 * the other levels. For benchmarks and tests. Read at every call. */
extern int cairn__cpu_float_tile;

/* Which path cairn__matmul takes at this level for weights of `type`, for a stats line:
 * "int8-tiles" (the AVX-512 tile kernels on the int8 activation), "int8" (the decode kernels a
 * token at a time), "float-tiles" (the AVX-512 float tile kernel), "openblas" (dequantized tiles
 * and OpenBLAS's sgemm) or "cairn" (cairn's own loops). Static storage. */
const char *cairn__matmul_path(uint32_t type);

/* Dequantizes row r of W into dst (cols floats). */
void cairn__mat_row(const cairn__mat *W, int64_t r, float *dst);

/* The level of cairn__kernels_isa() as a number: 0 scalar, 1 avx2, 2 avx512. */
int cairn__kernels_level(void);

/* ---- between the kernel files (kernels_cpu.c, kernels_ref.c, kernels_cpu_<isa>.c) ---------- */
/* x rounded to int8 per 32 elements, with a float scale (more precise than ggml's f16 one): the
 * activation the Q8_0 / Q4_0 kernels multiply with */
typedef struct {
    float d;
    int8_t qs[32];
} cairn__xq8_block;

/* The activation as the K-quant kernels take it (xq of their dot products): per 256 elements
 * (one super-block) the int8 values of its 8 xq8 blocks in order, each block's scale, each
 * block's scale times the sum of its int8 values (what a Q4_K min multiplies), and 32 times the
 * sum of each 16 int8 values (Q6_K's offset). Arrays of them start 64-byte aligned
 * (cairn__xk_prep). A Q4_K sub-block of 32 meets one activation block:
 *   d*sc*xd * (q . a) - dmin*m * ds;
 * a Q6_K sub-block of 16 meets half of one: d*sc*xd * (q . a - o16). The integer parts are
 * exact, so every ISA level computes the same sub-block terms up to the order of the float
 * additions, as for Q8_0 / Q4_0. */
typedef struct {
    int8_t a[256];
    float d[8];
    float ds[8];
    float o16[16];
    /* the values again for the AVX-512 Q4_K kernel: g[32k + 4s + e] = a[32s + 4k + e], group k
     * (elements 4k..4k+3) of the 8 blocks side by side */
    int8_t g[256];
} cairn__xk_block;
/* xq (cols / 32 blocks, cols a multiple of 256) -> cols / 256 blocks at the first 64-byte
 * boundary of dst (cairn__matvec_scratch_bytes leaves room), which it returns */
cairn__xk_block *cairn__xk_prep(const cairn__xq8_block *xq, int64_t cols, void *dst);

/* A Q4_K block's header at w (any alignment): its two f16 scales as bits, and its 8 scales and
 * 8 mins (6 bits each) as two 8-byte words (byte j: sub-block j). The 12 packed bytes hold scales
 * 0-3 and mins 0-3 in the low 6 bits of bytes 0-3 and 4-7; scales and mins 4-7 are a nibble of
 * bytes 8-11 each plus the 2 top bits of bytes 0-3 (scales) and 4-7 (mins), as gpu/quant.c's
 * q4k_scale_min reads them one at a time. */
typedef struct {
    uint16_t d, dmin;
    uint64_t sc, m;
} cairn__q4_K_head;
static inline cairn__q4_K_head cairn__q4_K_head_of(const uint8_t *w)
{
    cairn__q4_K_head h;
    uint32_t w0, w1, w2;
    const uint8_t *s12 = w + offsetof(cairn__block_q4_K, scales);
    memcpy(&h.d, w + offsetof(cairn__block_q4_K, d), 2);
    memcpy(&h.dmin, w + offsetof(cairn__block_q4_K, dmin), 2);
    memcpy(&w0, s12, 4);
    memcpy(&w1, s12 + 4, 4);
    memcpy(&w2, s12 + 8, 4);
    const uint32_t sc_hi = (w2 & 0x0F0F0F0Fu) | (((w0 >> 6) & 0x03030303u) << 4);
    const uint32_t m_hi = ((w2 >> 4) & 0x0F0F0F0Fu) | (((w1 >> 6) & 0x03030303u) << 4);
    h.sc = (uint64_t)(w0 & 0x3F3F3F3Fu) | (uint64_t)sc_hi << 32;
    h.m = (uint64_t)(w1 & 0x3F3F3F3Fu) | (uint64_t)m_hi << 32;
    return h;
}

/* Runs kernel(w, rb, xp, n, out, R) over nr rows, 4 at a time and then the 1-3 left, R a
 * constant in each call: the multi-row kernels are always_inline functions of R, compiled once
 * per row count with their accumulators in registers. One call of the caller's covers a whole
 * claim of rows, so the indirect call and the kernel's set-up are paid once per claim, not per
 * pass (rows of 288 columns take ~20 ns a pass). */
#define CAIRN__ROWS_DISPATCH(kernel, w, rb, nr, xp, n, out)                                        \
    do {                                                                                           \
        const uint8_t *w_ = (w);                                                                   \
        float *o_ = (out);                                                                         \
        int nr_ = (nr);                                                                            \
        for (; nr_ >= 4; nr_ -= 4, w_ += 4 * (rb), o_ += 4)                                        \
            kernel(w_, rb, xp, n, o_, 4);                                                          \
        switch (nr_) {                                                                             \
        case 3:                                                                                    \
            kernel(w_, rb, xp, n, o_, 3);                                                          \
            break;                                                                                 \
        case 2:                                                                                    \
            kernel(w_, rb, xp, n, o_, 2);                                                          \
            break;                                                                                 \
        case 1:                                                                                    \
            kernel(w_, rb, xp, n, o_, 1);                                                          \
            break;                                                                                 \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
    } while (0)

/* Software prefetch, for the lane kernels of kernels_cpu_avx512.c and kernels_cpu_avx2.c. The R
 * rows a pass reads side by side are R streams, which the hardware prefetchers follow poorly once
 * the weights are out of cache; but the rows are adjacent, so a pass as a whole reads one
 * contiguous run of R row_bytes, R * 72 (Q4_0) or R * 68 (Q8_0) bytes per step. So each step
 * prefetches the next lines of that run (CAIRN__PF_RUN), CAIRN__PF_BYTES ahead, or one whole pass
 * ahead when rows are long (R * rb > CAIRN__PF_BYTES), else the last rows of a pass would be read
 * before their prefetch. Memory then sees one sequential stream per thread, as in a plain read.
 * Measured on this Zen 5 VM, 2 threads, out of cache, against a plain threaded read of 39-41 GB/s:
 * Q4_0 1280 x 1280 34 -> 38-41 GB/s, 32000 x 1280 35-37 -> 42, 768 x 768 33 -> 36, over the earlier
 * prefetch of each row's own stream 16 KB ahead (itself 768 x 768: 11-29 -> 33). 4 to 16 KB ahead
 * measured alike; prefetching into L2 only (T1) was slower. Past the end of a share it fetches what
 * the next share or the next matrix needs; prefetches never fault. */
#define CAIRN__PF_BYTES 8192

/* bytes from a pass's start to the run it prefetches: CAIRN__PF_BYTES, or one whole pass if that is
 * longer (then the last row's first lines, 3/4 of a pass in, are still fetched a quarter of a
 * pass before they are read) */
static inline size_t cairn__pf_ahead(size_t rb, int R)
{
    const size_t run = (size_t)R * rb;
    return run > CAIRN__PF_BYTES ? run : CAIRN__PF_BYTES;
}

/* the lines PF bytes ahead of what step g (of `step` bytes per row) of an R-row pass at w
 * reads: ceil(R * step / 64) of them, a line more than needed now and then */
#define CAIRN__PF_RUN(w, pf, g, step, R)                                                           \
    do {                                                                                           \
        const char *pf_ = (const char *)(w) + (pf) + (size_t)(g) * (size_t)(step) * (R);           \
        for (int e_ = 0; e_ < ((step) * (R) + 63) / 64; e_++)                                      \
            _mm_prefetch(pf_ + 64 * e_, _MM_HINT_T0);                                              \
    } while (0)
/* the rest of the run, from byte `from` of the pass to its end at R * rb (the partial step at
 * the end of each row, which PF_RUN's whole steps leave out) */
#define CAIRN__PF_TAIL(w, pf, from, R, rb)                                                         \
    do {                                                                                           \
        for (size_t o_ = (from); o_ < (size_t)(R) * (rb); o_ += 64)                                \
            _mm_prefetch((const char *)(w) + (pf) + o_, _MM_HINT_T0);                              \
    } while (0)

/* Runs tile(w, rb, a, n, out, ld, R, T) over nr rows (RR at a time, then the 1-3 left) and nt
 * tokens (TT at a time, then 4 if TT is 8, then the 1-3 left), R and T constants in each call; for
 * each group of rows every token, so the group's weights stay in L1 while the tokens pass. */
#define CAIRN__TILE_T(tile, w, rb, a, n, out, ld, R, nt, TT)                                       \
    do {                                                                                           \
        int t_ = 0;                                                                                \
        for (; t_ + (TT) <= (nt); t_ += (TT))                                                      \
            tile(w, rb, (a) + t_, n, (out) + (size_t)t_ * (ld), ld, R, TT);                        \
        if ((TT) > 4 && (nt)-t_ >= 4) {                                                            \
            tile(w, rb, (a) + t_, n, (out) + (size_t)t_ * (ld), ld, R, 4);                         \
            t_ += 4;                                                                               \
        }                                                                                          \
        switch ((nt)-t_) {                                                                         \
        case 3:                                                                                    \
            tile(w, rb, (a) + t_, n, (out) + (size_t)t_ * (ld), ld, R, 3);                         \
            break;                                                                                 \
        case 2:                                                                                    \
            tile(w, rb, (a) + t_, n, (out) + (size_t)t_ * (ld), ld, R, 2);                         \
            break;                                                                                 \
        case 1:                                                                                    \
            tile(w, rb, (a) + t_, n, (out) + (size_t)t_ * (ld), ld, R, 1);                         \
            break;                                                                                 \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
    } while (0)
#define CAIRN__TILE(tile, w, rb, nr, a, nt, n, out, ld, RR, TT)                                    \
    do {                                                                                           \
        const uint8_t *w_ = (w);                                                                   \
        float *o_ = (out);                                                                         \
        int nr_ = (nr);                                                                            \
        for (; nr_ >= (RR); nr_ -= (RR), w_ += (RR) * (rb), o_ += (RR))                            \
            CAIRN__TILE_T(tile, w_, rb, a, n, o_, ld, RR, nt, TT);                                 \
        switch (nr_) {                                                                             \
        case 3:                                                                                    \
            CAIRN__TILE_T(tile, w_, rb, a, n, o_, ld, 3, nt, TT);                                  \
            break;                                                                                 \
        case 2:                                                                                    \
            CAIRN__TILE_T(tile, w_, rb, a, n, o_, ld, 2, nt, TT);                                  \
            break;                                                                                 \
        case 1:                                                                                    \
            CAIRN__TILE_T(tile, w_, rb, a, n, o_, ld, 1, nt, TT);                                  \
            break;                                                                                 \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
    } while (0)

/* The entry points of an ISA's kernels, compiled with the function attribute ATTR (the ISA's
 * target), around an always_inline kernel whose row count R and token count T are constants in
 * each call:
 * - CAIRN__LANE_KERNELS: name##_rows (cairn__rows_fn) and name##_tile (cairn__tile_fn) around a
 *   lane kernel kernel(w, rb, a, n, out, ld, R, T, KIND) over activations of type X, RR rows and
 *   TT tokens at a time (then the rest); CAIRN__LANE_ROWS the rows kernel alone (for an ISA whose
 *   tiles have their own loop);
 * - CAIRN__FLOAT_TILE: name##_ftile (cairn__tile_fn) around a float tile kernel kernel(w, rb, x,
 *   n, out, ld, R, T, WT), tokens outer (a tile's TT token rows stay in L1 while the rows pass);
 * - CAIRN__FLOAT_ROWS: name##_frows (cairn__rows_fn) around a float rows kernel kernel(w, rb, x,
 *   n, out, R, WT), 4 rows at a time. */
#define CAIRN__LANE_ROWS(ATTR, name, kernel, X, KIND, RR)                                          \
    ATTR static inline __attribute__((always_inline)) void name##_tile_(                           \
        const uint8_t *w, size_t rb, const X *const *a, int64_t n, float *out, size_t ld,          \
        const int R, const int T)                                                                  \
    {                                                                                              \
        kernel(w, rb, a, n, out, ld, R, T, KIND);                                                  \
    }                                                                                              \
    ATTR static void name##_rows(const uint8_t *w, size_t rb, int nr, const void *xp, int64_t n,   \
                                 float *out)                                                       \
    {                                                                                              \
        const X *a = (const X *)xp;                                                                \
        CAIRN__TILE(name##_tile_, w, rb, nr, &a, 1, n, out, 0, RR, 1);                             \
    }
#define CAIRN__LANE_KERNELS(ATTR, name, kernel, X, KIND, RR, TT)                                   \
    CAIRN__LANE_ROWS(ATTR, name, kernel, X, KIND, RR)                                              \
    ATTR static void name##_tile(const uint8_t *w, size_t rb, int nr, const void *const *xp,       \
                                 int nt, int64_t n, float *out, size_t ld)                         \
    {                                                                                              \
        const X *const *a = (const X *const *)xp;                                                  \
        CAIRN__TILE(name##_tile_, w, rb, nr, a, nt, n, out, ld, RR, TT);                           \
    }
#define CAIRN__FLOAT_TILE(ATTR, name, kernel, WT, RR, TT)                                          \
    ATTR static inline __attribute__((always_inline)) void name##_ftile_(                          \
        const uint8_t *w, size_t rb, const float *const *x, int64_t n, float *out, size_t ld,      \
        const int R, const int T)                                                                  \
    {                                                                                              \
        kernel(w, rb, x, n, out, ld, R, T, WT);                                                    \
    }                                                                                              \
    ATTR static void name##_ftile(const uint8_t *w, size_t rb, int nr, const void *const *xp,      \
                                  int nt, int64_t n, float *out, size_t ld)                        \
    {                                                                                              \
        const float *const *x = (const float *const *)xp;                                          \
        for (int t0 = 0; t0 < nt; t0 += (TT)) {                                                    \
            const int tn = nt - t0 < (TT) ? nt - t0 : (TT);                                        \
            CAIRN__TILE(name##_ftile_, w, rb, nr, x + t0, tn, n, out + (size_t)t0 * ld, ld, RR,    \
                        TT);                                                                       \
        }                                                                                          \
    }
/* the three float types' tile kernels (f32_ftile, f16_ftile, bf16_ftile) and the function fname
 * that returns the one for a type (NULL for the other types); their rows kernels likewise */
#define CAIRN__FLOAT_TILES(ATTR, fname, kernel, RR, TT)                                            \
    CAIRN__FLOAT_TILE(ATTR, f32, kernel, 0, RR, TT)                                                \
    CAIRN__FLOAT_TILE(ATTR, f16, kernel, 1, RR, TT)                                                \
    CAIRN__FLOAT_TILE(ATTR, bf16, kernel, 2, RR, TT)                                               \
    cairn__tile_fn *fname(uint32_t type)                                                           \
    {                                                                                              \
        return type == CAIRN__GGML_F32    ? f32_ftile                                              \
               : type == CAIRN__GGML_F16  ? f16_ftile                                              \
               : type == CAIRN__GGML_BF16 ? bf16_ftile                                             \
                                          : NULL;                                                  \
    }
#define CAIRN__FLOAT_ROWS3(ATTR, kernel)                                                           \
    CAIRN__FLOAT_ROWS(ATTR, f32, kernel, 0)                                                        \
    CAIRN__FLOAT_ROWS(ATTR, f16, kernel, 1)                                                        \
    CAIRN__FLOAT_ROWS(ATTR, bf16, kernel, 2)
#define CAIRN__FLOAT_ROWS(ATTR, name, kernel, WT)                                                  \
    ATTR static inline __attribute__((always_inline)) void name##_frows_(                          \
        const uint8_t *w, size_t rb, const float *x, int64_t n, float *out, const int R)           \
    {                                                                                              \
        kernel(w, rb, x, n, out, R, WT);                                                           \
    }                                                                                              \
    ATTR static void name##_frows(const uint8_t *w, size_t rb, int nr, const void *xp, int64_t n,  \
                                  float *out)                                                      \
    {                                                                                              \
        CAIRN__ROWS_DISPATCH(name##_frows_, w, rb, nr, (const float *)xp, n, out);                 \
    }

/* A dot product: one row w (n elements of its type) . x (n) -> float, with xq = x as int8
 * blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS) or as cairn__xk blocks (Q2_K, Q3_K, Q4_K,
 * Q5_K, Q6_K); the float types read x; xs is unused. Every level's dot products have this
 * signature. */
typedef float cairn__dot_fn(const uint8_t *w, const float *x, const void *xq, const float *xs,
                            int64_t n);

/* The scalar reference (kernels_ref.c, every CPU): the "scalar" level's dot products; x (32 nb)
 * -> nb int8 blocks, rounded to nearest even (as the vector versions' cvtps2dq does, so every
 * ISA quantizes x identically); y (n) += a * x (n). */
cairn__dot_fn cairn__dot_f32_ref, cairn__dot_f16_ref, cairn__dot_bf16_ref, cairn__dot_q8_0_ref,
    cairn__dot_q4_0_ref, cairn__dot_q4_1_ref, cairn__dot_q5_0_ref, cairn__dot_q5_1_ref,
    cairn__dot_q2_K_ref, cairn__dot_q3_K_ref, cairn__dot_q4_K_ref, cairn__dot_q5_K_ref,
    cairn__dot_q6_K_ref, cairn__dot_iq4_nl_ref, cairn__dot_iq4_xs_ref;
void cairn__quant_x_ref(const float *x, cairn__xq8_block *y, int64_t nb);
void cairn__axpy_ref(float *y, float a, const float *x, int64_t n);

/* The AVX2 + FMA + F16C kernels (kernels_cpu_avx2.c, x86 only; call only where
 * cairn__kernels_level() >= 1). */
cairn__dot_fn cairn__dot_f32_avx2, cairn__dot_f16_avx2, cairn__dot_bf16_avx2, cairn__dot_q4_K_avx2,
    cairn__dot_q5_K_avx2;
/* x (32 nb) -> nb int8 blocks, rounded to nearest even */
void cairn__quant_x_avx2(const float *x, cairn__xq8_block *y, int64_t nb);
/* y (n) += a * x (n) */
void cairn__axpy_avx2(float *y, float a, const float *x, int64_t n);
/* A row of F16, BF16, Q8_0, Q4_0, Q4_K or Q6_K -> n floats, as cairn__dequant_row gives them;
 * returns 0 (and writes nothing) for the other types. */
int cairn__dequant_avx2(uint32_t type, const uint8_t *src, float *dst, int64_t n);

/* The forms the rows and tile kernels take the activation in (their xp): */
enum {
    CAIRN__XF_XQ,    /* the int8 blocks themselves (cairn__xq8_block) */
    CAIRN__XF_XK,    /* the K-quants' cairn__xk blocks */
    CAIRN__XF_FLOAT, /* x itself, as floats (the float types' kernels) */
    CAIRN__XF_Q4,    /* quads of 4 blocks (cairn__quad_prep), offset 8: Q4_0 */
    CAIRN__XF_Q5,    /* quads, offset 16: Q5_0 */
    CAIRN__XF_Q8,    /* quads, offset 128: Q8_0, IQ4_NL, IQ4_XS */
    CAIRN__XF_MIN,   /* quads with d_x sum(a) for a minimum: Q4_1, Q5_1 */
    CAIRN__XF_K16,   /* steps of 4 sub-blocks of 16 (cairn__xq_k16): Q2_K, Q3_K */
    CAIRN__XF_N
};
/* The activation of a quad (4 consecutive blocks) in the order of the lane kernels (AVX-512 and
 * AVX2, forms CAIRN__XF_Q4 to CAIRN__XF_MIN): 160 bytes */
typedef struct {
    int8_t a[8][16]; /* group k: elements 4k..4k+3 of blocks 0..3 (4 bytes each) */
    union {
        int32_t c[4]; /* -off times the sum of block b's 32 values: the unsigned weights' offset */
        float s[4];   /* CAIRN__XF_MIN: d_x times that sum, which the minimum multiplies */
    };
    float d[4]; /* block b's scale */
} cairn__xq_quad;

/* Bytes of scratch the quads of `cols` elements take, and the preparation: xq (cols / 32 blocks)
 * -> (nb + 3) / 4 quads at the first 64-byte boundary of dst, the last one's missing blocks zero,
 * in `form` (CAIRN__XF_Q4, _Q5, _Q8 or _MIN); returns their start. */
size_t cairn__quad_bytes(int64_t cols);
void *cairn__quad_prep(const cairn__xq8_block *xq, int64_t cols, int form, void *dst);

/* The types of 32-value blocks the lane kernels take (their KIND): */
enum {
    CAIRN__QK_Q4_0,
    CAIRN__QK_Q8_0,
    CAIRN__QK_Q4_1,
    CAIRN__QK_Q5_0,
    CAIRN__QK_Q5_1,
    CAIRN__QK_IQ4_NL,
    CAIRN__QK_IQ4_XS
};
/* bytes of a block (IQ4_XS: 16 bytes of a super-block's values), where its values start */
#define CAIRN__QK_BYTES(K)                                                                         \
    ((K) == CAIRN__QK_Q8_0   ? 34                                                                  \
     : (K) == CAIRN__QK_Q4_1 ? 20                                                                  \
     : (K) == CAIRN__QK_Q5_0 ? 22                                                                  \
     : (K) == CAIRN__QK_Q5_1 ? 24                                                                  \
                             : 18)
#define CAIRN__QK_QS(K)                                                                            \
    ((K) == CAIRN__QK_Q4_1 ? 4 : (K) == CAIRN__QK_Q5_0 ? 6 : (K) == CAIRN__QK_Q5_1 ? 8 : 2)
/* two registers a row (values split before the transposition), a minimum, a table of levels */
#define CAIRN__QK_TWO(K) ((K) == CAIRN__QK_Q8_0 || (K) == CAIRN__QK_Q5_0 || (K) == CAIRN__QK_Q5_1)
#define CAIRN__QK_FIVE(K) ((K) == CAIRN__QK_Q5_0 || (K) == CAIRN__QK_Q5_1)
#define CAIRN__QK_MIN(K) ((K) == CAIRN__QK_Q4_1 || (K) == CAIRN__QK_Q5_1)
#define CAIRN__QK_LUT(K) ((K) == CAIRN__QK_IQ4_NL || (K) == CAIRN__QK_IQ4_XS)

/* The activation of one step of the K16 kernels (64 elements, 4 sub-blocks of 16; form
 * CAIRN__XF_K16) in their order: 112 bytes */
typedef struct {
    int8_t a[4][16]; /* group g: elements 16s + 4g..+3 of the step, s = 0..3 */
    int32_t c[4];    /* -4 times the sum of sub-block s's 16 values (Q3_K's offset) */
    float s[4];      /* d_x times that sum (what Q2_K's minimum multiplies) */
    float d[4];      /* d_x of sub-block s's activation block */
} cairn__xq_k16;

/* The types the K16 kernels take (their KIND) */
enum { CAIRN__K16_Q2, CAIRN__K16_Q3, CAIRN__K16_Q6 };
/* Bytes of scratch any of the lane kernels' forms (CAIRN__XF_Q4 and after) of `cols` elements
 * takes, and the preparation (xq: cols / 32 blocks -> dst in that form; returns the aligned start
 * of what it wrote) */
size_t cairn__xf_prep_bytes(int64_t cols);
void *cairn__xf_prep(const cairn__xq8_block *xq, int64_t cols, int form, void *dst);

/* A rows kernel: W rows (nr, n) of stride rb bytes . x (n) -> out (nr), xp: x in the kernel's
 * form. Each row's result is the same in any grouping of the rows. */
typedef void cairn__rows_fn(const uint8_t *w, size_t rb, int nr, const void *xp, int64_t n,
                            float *out);
/* A tile kernel: the prompt's and the batched decode's products, W rows (nr, n) of stride rb
 * bytes @ nt tokens -> out[t * ld + r], xp[t] token t's activation in the kernel's form. Each
 * weight block is decoded once for a tile of up to 8 tokens, and every (row, token) output is
 * bit for bit what the type's rows kernel gives that token alone (one kernel does both). */
typedef void cairn__tile_fn(const uint8_t *w, size_t rb, int nr, const void *const *xp, int nt,
                            int64_t n, float *out, size_t ld);

/* An ISA level's kernels for one weight type: its rows and tile kernels (either may be NULL:
 * NULL rows, row by row with the dot product; NULL tile, the rows kernel a token at a time) and
 * the form (CAIRN__XF_*) they take x in. A level's sets end with an entry of form -1. */
typedef struct {
    uint32_t type;
    int form;
    cairn__rows_fn *rows;
    cairn__tile_fn *tile;
} cairn__kernel_set;
/* set's entry for `type`: sets *rows and *tile and returns the form, or returns -1 */
int cairn__kernels_find(const cairn__kernel_set *set, uint32_t type, cairn__rows_fn **rows,
                        cairn__tile_fn **tile);

/* The AVX2 level's sets (kernels_cpu_avx2.c, x86-64 only; call only where the CPU has AVX2, FMA
 * and F16C): Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and IQ4_XS (2 rows and 4 blocks a step, the
 * activation in quads, cairn__quad_prep), Q2_K, Q3_K and Q6_K (2 rows and 4 sub-blocks of 16 a
 * step), every output of those but Q6_K's bit for bit the AVX-512 kernels'; Q4_K and Q5_K (tile
 * kernels over their dot product), and the rows kernels of F32, F16 and BF16. */
extern const cairn__kernel_set cairn__kernels_avx2[];
/* The prompt's products on F32, F16 and BF16 weights at the AVX2 level: as
 * cairn__float_tile_avx512, in tiles of 3 rows x 4 tokens; NULL for the other types. */
cairn__tile_fn *cairn__float_tile_avx2(uint32_t type);
/* The AVX-512 level's sets (kernels_cpu_avx512.c, x86-64 only; call only where
 * cairn__kernels_isa() is "avx512"): Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS (4 rows and 4
 * blocks a step, the activation in quads), Q2_K, Q3_K (4 rows and 4 sub-blocks of 16 a step) and
 * Q4_K, and the rows kernels of F32, F16 and BF16 (4 rows sharing the loads of x, each row bit
 * for bit its dot product). */
extern const cairn__kernel_set cairn__kernels_avx512[];
/* The prompt's products on float weights: for F32, F16 and BF16, a tile kernel whose xp[t] is
 * token t's n floats themselves, in tiles of 4 rows x 6 tokens (halves widened in registers), to
 * float rounding what the dot products give (not bit for bit); NULL for the other types. */
cairn__tile_fn *cairn__float_tile_avx512(uint32_t type);
/* y (n) += a * x (n) */
void cairn__axpy_avx512(float *y, float a, const float *x, int64_t n);
/* The dot products of F32, F16 and BF16 weights (64 a pass) and of the K-quants (VNNI) */
cairn__dot_fn cairn__dot_f32_avx512, cairn__dot_f16_avx512, cairn__dot_bf16_avx512,
    cairn__dot_q4_K_avx512, cairn__dot_q5_K_avx512;
/* Q4_K's rows and tile kernels (form CAIRN__XF_XK), each output bit for bit
 * cairn__dot_q4_K_avx512's for that token alone */
cairn__rows_fn cairn__q4_K_rows_avx512;
cairn__tile_fn cairn__q4_K_tile_avx512;
/* One Q5_K row against two tokens' cairn__xk blocks (a prompt's products): out[0], out[1], each
 * bit for bit its dot product's, the weights unpacked once */
void cairn__dot2_q5_K_avx512(const uint8_t *w, const void *xa, const void *xb, int64_t n,
                             float *out);
/* cairn__attn_head (f16 0) or cairn__attn_head_f16 (f16 1) for hd a multiple of 16, at most 128 */
void cairn__attn_head_avx512(const float *q, const void *K, const void *V, size_t ld, int n, int hd,
                             float scale, float *sc, float *out, int f16);

/* ---- element-wise ---------------------------------------------------------------------------- */
/* a (n) . b (n) -> float (vectorized like the matvec kernels) */
float cairn__dot_f32(const float *a, const float *b, int64_t n);
/* y (n) += a * x (n) */
void cairn__axpy(float *y, float a, const float *x, int64_t n);
/* out (n) = x (n) / rms(x) * w (n) ; out may alias x */
void cairn__rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps);
/* x (n) = softmax(x) in place */
void cairn__softmax(float *x, int64_t n);
/* g (n) = silu(g) * u (n) */
void cairn__swiglu(float *g, const float *u, int64_t n);

/* One attention head at one position: q (hd) against n cached positions, K and V rows (hd)
 * of position t at K + t * ld and V + t * ld (ld: elements from one position's row to the
 * next: head_dim in the CPU backend's cache, where a head's positions are one run) ->
 *   sc (n) = softmax(q . K rows * scale),  out (hd) = sc (n) @ V (n, hd).
 * sc is scratch of n floats the caller owns (it holds the probabilities afterwards). The same
 * as cairn__dot_f32 + cairn__softmax + cairn__axpy per position (to float rounding), but with
 * q and out in registers and the K / V rows prefetched where the ISA allows. */
void cairn__attn_head(const float *q, const float *K, const float *V, size_t ld, int n, int hd,
                      float scale, float *sc, float *out);
/* The same over a cache of IEEE halves (as cairn__f32_to_f16_row stores them): each row is
 * widened exactly, and the arithmetic is cairn__attn_head's on the widened rows, bit for bit at
 * every ISA level. tmp: hd floats of scratch the caller owns (a row widened where the ISA has no
 * widening load). */
void cairn__attn_head_f16(const float *q, const uint16_t *K, const uint16_t *V, size_t ld, int n,
                          int hd, float scale, float *sc, float *tmp, float *out);
/* dst (n) = src (n) as IEEE halves, rounded to nearest even: cairn__f32_to_f16 of each element
 * (vcvtps2ph where the CPU has F16C) */
void cairn__f32_to_f16_row(uint16_t *dst, const float *src, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
