/* gpu/cpu/kernels_cpu.c - the CPU's compute: matrix-vector and matrix-matrix products, their
 * run-time choice of instruction set and their threading. Their loops run on the thread pool of
 * gpu/cpu/threadpool.c; the per-row kernels they dispatch to live beside this file: the scalar
 * reference in kernels_ref.c, the vector ones in kernels_cpu_avx2.c and kernels_cpu_avx512.c,
 * the element-wise operations in kernels_cpu_elt.c.
 *
 * Decode (one token) is a chain of matrix-vector products whose cost is reading the weights
 * once, so the kernels work directly on the quantized blocks, one output row per dot product
 * (every row is summed by one thread in one order, so no result depends on timing or on which
 * thread ran it). Each thread gets one contiguous share of the rows and then helps with the
 * others' (mv_shares). For the quantized types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q3_K, Q4_K, Q5_K,
 * Q6_K) the activation vector is first rounded to int8 blocks of 32 and the inner loops are integer
 * dot products, as in llama.cpp; the float types multiply in float. The int8 kernels are bound by
 * their arithmetic unless it is cheap, so they take up to 4 rows at once (sharing the activation
 * loads, 4 independent accumulator chains) and prefetch ahead; each row still gets the same
 * arithmetic, so results do not depend on the grouping.
 *
 * Each kernel exists as portable C (kernels_ref.c) and as an AVX2+FMA(+F16C) version, some also as
 * AVX-512 (with VNNI and VBMI), compiled with __attribute__((target)) and picked at run time from
 * __builtin_cpu_supports, so one binary runs on any x86-64 and uses the vector units where
 * they exist. CAIRN_KERNELS_ISA or cairn__kernels_set_isa caps the level, so the tests can run
 * every level on one machine.
 *
 * The prompt is a matrix-matrix product. On the quantized types it runs the decode kernels'
 * arithmetic on each token (the activation rounded to int8 the same way), over groups of rows
 * kept in cache (matmul_int8), through each level's tile kernels (its cairn__kernel_set), which
 * decode each weight block once for a tile of tokens and are the same kernels as the decode's,
 * so the same bits: at both vector levels every quantized type but Q5_K (two tokens a row on
 * AVX-512) and the types of 32, Q2_K, Q3_K and Q6_K on (row, block) lane kernels whose float
 * operations are the same lane for lane at AVX2 and AVX-512, so those types give the same bits
 * at either level. The batched decode step is the same product (cairn__matmul_rows). The float
 * types' prompt runs the level's float tile kernel; without one, weights are dequantized a tile
 * of rows at a time into f32 (F32 weights are used in place) and multiplied with sgemm, or, for
 * a few tokens, a row at a time against every token.
 */
#include "gpu/cpu/kernels_cpu.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cairn_errors.h"
#include "gpu/gguf.h"
#include "gpu/quant.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define CAIRN__X86 1
#endif

#include "gpu/cpu/blas.h"

typedef cairn__xq8_block xq8_block;
/* A dot product: one row . x (cairn__dot_fn, kernels_cpu.h). */
typedef cairn__dot_fn *dot_fn;
/* nr consecutive rows . x -> out (nr), for types whose kernel gains from sharing the activation
 * between rows (cairn__rows_fn, kernels_cpu.h) */
typedef cairn__rows_fn *rows_fn;

/* ==== dispatch ================================================================================ */

typedef struct {
    dot_fn f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl,
        iq4_xs;
    /* NULL, or the ISA's rows and tile kernels, by type (cairn__kernel_set) */
    const cairn__kernel_set *kernels;
    /* NULL, or x rearranged into dst in a form of the ISA's own (CAIRN__XF_Q4 and after), the start
     * of what it wrote returned */
    void *(*xf_prep)(const xq8_block *xq, int64_t cols, int form, void *dst);
    /* NULL, or the prompt's tile kernel on a float type's weights (xp[t]: token t's floats), NULL
     * for the other types */
    cairn__tile_fn *(*float_tile)(uint32_t type);
    void (*axpy)(float *y, float a, const float *x, int64_t n);
    void (*quant_x)(const float *x, xq8_block *y, int64_t nb); /* x -> int8 blocks */
    /* NULL, or one Q5_K row against two tokens (the prompt's products): each result bit
     * for bit q5_K's */
    void (*q5_K_2)(const uint8_t *w, const void *xa, const void *xb, int64_t n, float *out);
    /* NULL, or a row's dequantization for some types (0 for the others: cairn__dequant_row) */
    int (*dequant)(uint32_t type, const uint8_t *src, float *dst, int64_t n);
    const char *isa;
    int level; /* ISA_* */
} dot_table;

/* Instruction-set levels, each a superset of the one below. "avx512" is F, BW, VL, VNNI and VBMI
 * (Ice Lake and later, Zen 4 and later). */
enum { ISA_SCALAR, ISA_AVX2, ISA_AVX512, ISA_N };

static const dot_table dots_scalar = {.f32 = cairn__dot_f32_ref,
                                      .f16 = cairn__dot_f16_ref,
                                      .bf16 = cairn__dot_bf16_ref,
                                      .q8_0 = cairn__dot_q8_0_ref,
                                      .q4_0 = cairn__dot_q4_0_ref,
                                      .q4_1 = cairn__dot_q4_1_ref,
                                      .q5_0 = cairn__dot_q5_0_ref,
                                      .q5_1 = cairn__dot_q5_1_ref,
                                      .q2_K = cairn__dot_q2_K_ref,
                                      .q3_K = cairn__dot_q3_K_ref,
                                      .q4_K = cairn__dot_q4_K_ref,
                                      .q5_K = cairn__dot_q5_K_ref,
                                      .q6_K = cairn__dot_q6_K_ref,
                                      .iq4_nl = cairn__dot_iq4_nl_ref,
                                      .iq4_xs = cairn__dot_iq4_xs_ref,
                                      .axpy = cairn__axpy_ref,
                                      .quant_x = cairn__quant_x_ref,
                                      .isa = "scalar",
                                      .level = ISA_SCALAR};
#ifdef CAIRN__X86
static const dot_table dots_avx2 = {.f32 = cairn__dot_f32_avx2,
                                    .f16 = cairn__dot_f16_avx2,
                                    .bf16 = cairn__dot_bf16_avx2,
                                    .q4_K = cairn__dot_q4_K_avx2,
                                    .q5_K = cairn__dot_q5_K_avx2,
                                    .axpy = cairn__axpy_avx2,
#ifdef __x86_64__
                                    .kernels = cairn__kernels_avx2,
                                    .xf_prep = cairn__xf_prep,
                                    .float_tile = cairn__float_tile_avx2,
#endif
                                    .quant_x = cairn__quant_x_avx2,
                                    .dequant = cairn__dequant_avx2,
                                    .isa = "avx2",
                                    .level = ISA_AVX2};
#ifdef __x86_64__
/* the AVX2 kernels, but the float and K-quant dot products, axpy and every type's rows and tile
 * kernels from kernels_cpu_avx512.c. */
static const dot_table dots_avx512 = {.f32 = cairn__dot_f32_avx512,
                                      .f16 = cairn__dot_f16_avx512,
                                      .bf16 = cairn__dot_bf16_avx512,
                                      .q4_K = cairn__dot_q4_K_avx512,
                                      .q5_K = cairn__dot_q5_K_avx512,
                                      .axpy = cairn__axpy_avx512,
                                      .kernels = cairn__kernels_avx512,
                                      .xf_prep = cairn__xf_prep,
                                      .float_tile = cairn__float_tile_avx512,
                                      .quant_x = cairn__quant_x_avx2,
                                      .q5_K_2 = cairn__dot2_q5_K_avx512,
                                      .dequant = cairn__dequant_avx2,
                                      .isa = "avx512",
                                      .level = ISA_AVX512};
#endif
#endif

static const char *const isa_names[ISA_N] = {"scalar", "avx2", "avx512"};

/* The highest level this CPU runs (the answer never changes, so it is computed once). */
static int isa_detected(void)
{
    static _Atomic int det = -1;
    int d = atomic_load_explicit(&det, memory_order_relaxed);
    if (d >= 0)
        return d;
    d = ISA_SCALAR;
#ifdef CAIRN__X86
    __builtin_cpu_init();
    /* F16C from cpuid itself: clang's __builtin_cpu_supports does not know it (the OS support
     * it needs, the AVX state, comes with the avx2 answer) */
    unsigned eax, ebx, ecx, edx;
    const int f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c) {
        d = ISA_AVX2;
#ifdef __x86_64__ /* the AVX-512 kernels are built for x86-64 only */
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
            __builtin_cpu_supports("avx512vbmi"))
            d = ISA_AVX512;
#endif
    }
#endif
    atomic_store_explicit(&det, d, memory_order_relaxed);
    return d;
}

/* The default cap: CAIRN_KERNELS_ISA if it names a level, else none. */
static int isa_default_cap(void)
{
    const char *e = getenv("CAIRN_KERNELS_ISA");
    for (int i = 0; e && i < ISA_N; i++)
        if (strcmp(e, isa_names[i]) == 0)
            return i;
    return ISA_N - 1;
}

/* The cap set by cairn__kernels_set_isa; -1 until the first use. */
static _Atomic int isa_cap = -1;

static int isa_level(void)
{
    int cap = atomic_load_explicit(&isa_cap, memory_order_relaxed);
    if (cap < 0) {
        cap = isa_default_cap();
        atomic_store_explicit(&isa_cap, cap, memory_order_relaxed);
    }
    const int d = isa_detected();
    return cap < d ? cap : d;
}

static const dot_table *dots_for_level(int level)
{
#ifdef CAIRN__X86
    switch (level) {
#ifdef __x86_64__
    case ISA_AVX512:
        return &dots_avx512;
#endif
    case ISA_AVX2:
        return &dots_avx2;
    default:
        break;
    }
#else
    (void)level;
#endif
    return &dots_scalar;
}

/* the table in use, looked up once: attention calls a kernel per head and position */
static _Atomic(const dot_table *) dots_cur;

static const dot_table *dots(void)
{
    const dot_table *t = atomic_load_explicit(&dots_cur, memory_order_relaxed);
    if (!t) {
        t = dots_for_level(isa_level());
        atomic_store_explicit(&dots_cur, t, memory_order_relaxed);
    }
    return t;
}

const char *cairn__kernels_isa(void) { return dots()->isa; }

int cairn__kernels_level(void) { return dots()->level; }

int cairn__kernels_set_isa(const char *name)
{
    int level = -1;
    if (!name || !*name || strcmp(name, "auto") == 0)
        level = isa_default_cap();
    for (int i = 0; level < 0 && i < ISA_N; i++)
        if (strcmp(name, isa_names[i]) == 0) {
            if (i > isa_detected())
                return CAIRN_EUNSUPPORTED;
            level = i;
        }
    if (level < 0)
        return CAIRN_EINVAL;
    atomic_store(&isa_cap, level);
    atomic_store(&dots_cur, dots_for_level(isa_level()));
    return 0;
}

void cairn__kernels_force_scalar(int on) { (void)cairn__kernels_set_isa(on ? "scalar" : NULL); }

static dot_fn dot_of(const dot_table *t, uint32_t type)
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
    case CAIRN__GGML_Q4_1:
        return t->q4_1;
    case CAIRN__GGML_Q5_0:
        return t->q5_0;
    case CAIRN__GGML_Q5_1:
        return t->q5_1;
    case CAIRN__GGML_Q4_K:
        return t->q4_K;
    case CAIRN__GGML_Q2_K:
        return t->q2_K;
    case CAIRN__GGML_Q3_K:
        return t->q3_K;
    case CAIRN__GGML_Q5_K:
        return t->q5_K;
    case CAIRN__GGML_Q6_K:
        return t->q6_K;
    case CAIRN__GGML_IQ4_NL:
        return t->iq4_nl;
    case CAIRN__GGML_IQ4_XS:
        return t->iq4_xs;
    default:
        return NULL;
    }
}

/* the ISA's dot product for a type, or the reference one where the ISA has none (its rows
 * kernels do the products: the dot product then only says that the type is supported) */
static dot_fn dot_for(const dot_table *t, uint32_t type)
{
    const dot_fn f = dot_of(t, type);
    return f ? f : dot_of(&dots_scalar, type);
}

/* The quantized types and the activation their dot products take: the K-quants cairn__xk
 * blocks, the others the int8 blocks themselves. */
static int is_kquant(uint32_t type)
{
    return type == CAIRN__GGML_Q2_K || type == CAIRN__GGML_Q3_K || type == CAIRN__GGML_Q4_K ||
           type == CAIRN__GGML_Q5_K || type == CAIRN__GGML_Q6_K;
}

static int takes_xq8(uint32_t type)
{
    switch (type) {
    case CAIRN__GGML_Q8_0:
    case CAIRN__GGML_Q4_0:
    case CAIRN__GGML_Q4_1:
    case CAIRN__GGML_Q5_0:
    case CAIRN__GGML_Q5_1:
    case CAIRN__GGML_IQ4_NL:
    case CAIRN__GGML_IQ4_XS:
        return 1;
    default:
        return 0;
    }
}

/* ==== matrix-vector ============================================================================
 */

cairn__xk_block *cairn__xk_prep(const cairn__xq8_block *xq, int64_t cols, void *dst)
{
    cairn__xk_block *k = (cairn__xk_block *)(((uintptr_t)dst + 63) & ~(uintptr_t)63);
    for (int64_t i = 0; i < cols / CAIRN__QK_K; i++)
        for (int j = 0; j < 8; j++) {
            const xq8_block *b = &xq[8 * i + j];
            int sum = 0;
            for (int e = 0; e < 32; e++)
                sum += b->qs[e];
            memcpy(k[i].a + 32 * j, b->qs, 32);
            for (int g = 0; g < 8; g++)
                memcpy(k[i].g + 32 * g + 4 * j, b->qs + 4 * g, 4);
            k[i].d[j] = b->d;
            k[i].ds[j] = b->d * (float)sum;
            for (int h = 0; h < 2; h++) {
                int s16 = 0;
                for (int e = 0; e < 16; e++)
                    s16 += b->qs[16 * h + e];
                k[i].o16[2 * j + h] = (float)(32 * s16);
            }
        }
    return k;
}

/* ---- the lane kernels' forms of the activation (kernels_cpu.h) */

static cairn__xq_quad *quads(void *p)
{
    return (cairn__xq_quad *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
}

size_t cairn__quad_bytes(int64_t cols)
{
    return (size_t)((cols / 32 + 3) / 4) * sizeof(cairn__xq_quad) + 64; /* + 64: alignment */
}

/* (nb + 3) / 4 quads of 4 consecutive blocks, the last one's missing blocks zero, in the form
 * (CAIRN__XF_Q4, _Q5, _Q8, _MIN) that the type's kernel takes */
void *cairn__quad_prep(const cairn__xq8_block *xq, int64_t cols, int form, void *dst)
{
    const int off = form == CAIRN__XF_Q4 ? 8 : form == CAIRN__XF_Q5 ? 16 : 128;
    const int64_t nb = cols / 32, nq = (nb + 3) / 4;
    cairn__xq_quad *q = quads(dst);
    memset(q, 0, (size_t)nq * sizeof *q);
    for (int64_t b = 0; b < nb; b++) {
        cairn__xq_quad *o = &q[b / 4];
        const int k = (int)(b % 4);
        int s = 0;
        for (int g = 0; g < 8; g++)
            memcpy(o->a[g] + 4 * k, xq[b].qs + 4 * g, 4);
        for (int e = 0; e < 32; e++)
            s += xq[b].qs[e];
        if (form == CAIRN__XF_MIN)
            o->s[k] = xq[b].d * (float)s;
        else
            o->c[k] = -off * s;
        o->d[k] = xq[b].d;
    }
    return q;
}

static size_t k16_bytes(int64_t cols)
{
    return (size_t)(cols / 64) * sizeof(cairn__xq_k16) + 64; /* + 64: alignment */
}

/* cols / 64 steps (cols a multiple of 256) */
static void *k16_prep(const cairn__xq8_block *xq, int64_t cols, void *dst)
{
    cairn__xq_k16 *q = (cairn__xq_k16 *)(((uintptr_t)dst + 63) & ~(uintptr_t)63);
    for (int64_t m = 0; m < cols / 64; m++)
        for (int s = 0; s < 4; s++) {
            const cairn__xq8_block *b = &xq[2 * m + s / 2];
            const int8_t *v = b->qs + 16 * (s % 2);
            int sum = 0;
            for (int g = 0; g < 4; g++)
                memcpy(q[m].a[g] + 4 * s, v + 4 * g, 4);
            for (int e = 0; e < 16; e++)
                sum += v[e];
            q[m].c[s] = -4 * sum;
            q[m].s[s] = b->d * (float)sum;
            q[m].d[s] = b->d;
        }
    return q;
}

size_t cairn__xf_prep_bytes(int64_t cols)
{
    const size_t q = cairn__quad_bytes(cols), k = k16_bytes(cols);
    return q > k ? q : k;
}

void *cairn__xf_prep(const cairn__xq8_block *xq, int64_t cols, int form, void *dst)
{
    return form == CAIRN__XF_K16 ? k16_prep(xq, cols, dst) : cairn__quad_prep(xq, cols, form, dst);
}

size_t cairn__matvec_scratch_bytes(int64_t cols)
{
    const size_t nb = (size_t)(cols + 31) / 32;
    /* int8 blocks for Q8_0/Q4_0, and the same laid out for the K-quants: a fused product over
     * matrices of mixed types needs both */
    size_t n =
        nb * sizeof(xq8_block) + (size_t)(cols / CAIRN__QK_K) * sizeof(cairn__xk_block) + 128;
#ifdef __x86_64__
    /* whatever the ISA now: it can change later */
    n += (CAIRN__XF_N - CAIRN__XF_Q4) * cairn__xf_prep_bytes(cols);
#endif
    return n;
}

#define MV_MAX 4     /* matrices one fused product can take */
#define MV_SHARES 16 /* threads that get a share of their own; more take from these */
#define MV_STEP 16   /* rows claimed at a time within a share (a multiple of 4) */

/* One thread's share of a product: rows [next, end), claimed MV_STEP at a time from next by
 * its owner and, once they are done with their own, by the others. A line of its own, so the
 * owner's claims stay in its cache until someone comes to help. */
typedef struct {
    _Alignas(64) _Atomic int64_t next;
    int64_t end;
} mv_share;

/* x prepared for the integer kernels (prep_x8): x[f] in form f (CAIRN__XF_*), where asked for */
typedef struct {
    const void *x[CAIRN__XF_N];
} x8_prep;

/* The type's kernels at this level: its rows and tile kernels (NULL where it has none) and the
 * form they, or else its dot product, take x in (the int8 blocks, or the K-quants' blocks). */
typedef struct {
    rows_fn rows;
    cairn__tile_fn *tile;
    int form;
} kern;

int cairn__kernels_find(const cairn__kernel_set *set, uint32_t type, cairn__rows_fn **rows,
                        cairn__tile_fn **tile)
{
    for (; set->form >= 0; set++)
        if (set->type == type) {
            *rows = set->rows, *tile = set->tile;
            return set->form;
        }
    return -1;
}

static kern kern_for(const dot_table *t, uint32_t type)
{
    kern k = {NULL, NULL, -1};
    if (t->kernels)
        k.form = cairn__kernels_find(t->kernels, type, &k.rows, &k.tile);
    if (k.form < 0)
        k = (kern){NULL, NULL,
                   is_kquant(type)   ? CAIRN__XF_XK
                   : takes_xq8(type) ? CAIRN__XF_XQ
                                     : CAIRN__XF_FLOAT};
    return k;
}

/* x (cols) in the forms flagged in `need` (bit f: form f), in dst
 * (cairn__matvec_scratch_bytes(cols)): int8 blocks (always), laid out per super-block for the
 * K-quants, rearranged into quads for the ISA's rows kernels */
static x8_prep prep_x8(const dot_table *t, const float *x, int64_t cols, unsigned need, void *dst)
{
    x8_prep p = {{NULL}};
    const int64_t nb = cols / 32;
    t->quant_x(x, dst, nb);
    p.x[CAIRN__XF_XQ] = dst;
    p.x[CAIRN__XF_FLOAT] = x;
    char *kprep = (char *)dst + (size_t)nb * sizeof(xq8_block);
    if (need & (1u << CAIRN__XF_XK))
        p.x[CAIRN__XF_XK] = cairn__xk_prep(dst, cols, kprep);
#ifdef __x86_64__
    char *prep = kprep + (size_t)(cols / CAIRN__QK_K) * sizeof(cairn__xk_block) + 64;
    for (int f = CAIRN__XF_Q4; f < CAIRN__XF_N && t->xf_prep; f++)
        if (need & (1u << f))
            p.x[f] = t->xf_prep(dst, cols, f,
                                prep + (size_t)(f - CAIRN__XF_Q4) * cairn__xf_prep_bytes(cols));
#endif
    return p;
}

/* rows [r0, r1) of W . x -> out[r0..r1), with the type's kernel (k): the rows kernel where it has
 * one, else a dot product a row */
static void rows_of(const cairn__mat *W, dot_fn dot, const kern *k, const float *x,
                    const x8_prep *p, int64_t r0, int64_t r1, float *out)
{
    if (r0 >= r1)
        return;
    if (k->rows) {
        k->rows(W->data + (size_t)r0 * W->row_bytes, W->row_bytes, (int)(r1 - r0), p->x[k->form],
                W->cols, out + r0);
        return;
    }
    for (int64_t r = r0; r < r1; r++)
        out[r] = dot(W->data + (size_t)r * W->row_bytes, x, p->x[k->form], NULL, W->cols);
}

typedef struct {
    const cairn__mat *W[MV_MAX];
    float *out[MV_MAX];
    dot_fn dot[MV_MAX];
    kern k[MV_MAX];
    int n;
    int64_t total; /* rows of all matrices together */
    const float *x;
    x8_prep xp;
    int n_shares;
    mv_share share[MV_SHARES];
} mv_job;

/* rows [r0, r1) of the matrices stacked: each row is one dot product in a fixed order, so
 * which thread computes it never changes its value */
static void mv_range(void *arg, int64_t r0, int64_t r1, int ith)
{
    const mv_job *j = arg;
    (void)ith;
    int64_t base = 0;
    for (int k = 0; k < j->n && r0 < r1; k++) {
        const int64_t end = base + j->W[k]->rows;
        const int64_t stop = r1 < end ? r1 : end;
        if (r0 < stop) {
            rows_of(j->W[k], j->dot[k], &j->k[k], j->x, &j->xp, r0 - base, stop - base, j->out[k]);
            r0 = stop;
        }
        base = end;
    }
}

/* The pool's function for a product: thread ith works through its own share, then helps with
 * the others'. Each thread reading one contiguous run of the weights keeps the prefetchers on one
 * stream, and claims cost an uncontended atomic instead of a cache line bounced between cores
 * per chunk (with the pool's shared counter over ~16 chunks, that was a good part of the 1-3 us
 * a small product spent beyond its arithmetic). A thread that never shows up leaves its share
 * to the others, as the pool requires. */
static void mv_shares(void *arg, int ith, int nth)
{
    mv_job *j = arg;
    (void)nth;
    for (int k = 0; k < j->n_shares; k++) {
        mv_share *s = &j->share[(ith + k) % j->n_shares];
        for (;;) {
            const int64_t r0 = atomic_fetch_add_explicit(&s->next, MV_STEP, memory_order_relaxed);
            if (r0 >= s->end)
                break;
            mv_range(j, r0, r0 + MV_STEP < s->end ? r0 + MV_STEP : s->end, ith);
        }
    }
}

/* W[k] (rows_k, cols) @ x (cols) -> out[k] (rows_k) for k < n, in one pass of the pool */
void cairn__matvec_n(cairn__pool *p, const cairn__mat *const *W, int n, const float *x,
                     float *const *out, void *scratch)
{
    const dot_table *t = dots();
    mv_job j;
    memset(&j, 0, sizeof j);
    const int64_t cols = W[0]->cols;
    int need_q8 = 0;
    unsigned need = 0;
    size_t bytes = 0;
    for (int k = 0; k < n && k < MV_MAX; k++) {
        j.W[j.n] = W[k];
        j.out[j.n] = out[k];
        j.dot[j.n] = dot_for(t, W[k]->type);
        j.k[j.n] = kern_for(t, W[k]->type);
        if (!j.dot[j.n]) {
            memset(out[k], 0, (size_t)W[k]->rows * sizeof(float));
            continue;
        }
        need_q8 |= takes_xq8(W[k]->type) || is_kquant(W[k]->type);
        need |= 1u << j.k[j.n].form;
        j.total += W[k]->rows;
        bytes += (size_t)W[k]->rows * W[k]->row_bytes;
        j.n++;
    }
    j.x = x;
    if (need_q8)
        j.xp = prep_x8(t, x, cols, need, scratch);
    else
        j.xp.x[CAIRN__XF_FLOAT] = x;
    /* tiny products are not worth waking the workers for */
    if (bytes < 32768)
        mv_range(&j, 0, j.total, 0);
    else {
        /* shares in whole 4-row groups, so that no group of the Q4_0 kernel is split */
        const int nth = cairn__pool_size(p);
        j.n_shares = nth < MV_SHARES ? nth : MV_SHARES;
        const int64_t per = (j.total / j.n_shares + 3) / 4 * 4;
        for (int i = 0; i < j.n_shares; i++) {
            const int64_t a = per * i < j.total ? per * i : j.total;
            atomic_init(&j.share[i].next, a);
            j.share[i].end =
                per * (i + 1) < j.total && i + 1 < j.n_shares ? per * (i + 1) : j.total;
        }
        cairn__pool_run(p, mv_shares, &j);
    }
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
    const uint8_t *src = W->data + (size_t)r * W->row_bytes;
    const dot_table *t = dots();
    if (!t->dequant || !t->dequant(W->type, src, dst, W->cols))
        cairn__dequant_row(W->type, src, dst, (uint64_t)W->cols);
}

/* dequantized tile handed to sgemm: each tile is a hand-off from the pool to OpenBLAS's threads
 * and back, and 8 MB tiles took 64- and 128-token prompts of the 500M model from 160-171 and
 * 206-214 tok/s with 2 MB tiles to 200-219 and 235-240 (32 MB: no better) */
#define TILE_BYTES (8u << 20)

static int64_t tile_rows(const cairn__mat *W)
{
    int64_t t = (int64_t)(TILE_BYTES / ((size_t)W->cols * sizeof(float)));
    t = t / 16 * 16;
    if (t < 16)
        t = 16;
    return t < W->rows ? t : W->rows;
}

/* the int8 path's preparations: the head of x8_prep records and a pass of up to MM8_TOKENS
 * tokens' activations */
#define MM8_TOKENS 64
static size_t mm8_stride(int64_t cols)
{
    return (cairn__matvec_scratch_bytes(cols) + 63) & ~(size_t)63;
}

size_t cairn__matmul_scratch_bytes(const cairn__mat *W)
{
    const size_t tile = (size_t)tile_rows(W) * (size_t)W->cols * sizeof(float);
    /* room for 16 tokens a pass at least */
    _Static_assert(sizeof(x8_prep) <= 64, "the head holds MM8_TOKENS records of 64 bytes");
    const size_t mm8 = 64 + MM8_TOKENS * 64 + 64 + 16 * mm8_stride(W->cols);
    return tile > mm8 ? tile : mm8;
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

/* T (nr, cols) @ X^T: X (n, cols) -> OUT[:, r0:r0+nr] (ld rows): without OpenBLAS */
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

/* A chunk of few tokens (n <= MM_ROWWISE): each thread dequantizes one row at a time into its
 * own cols floats of the scratch (in L1/L2) and takes that row's dot product with every token.
 * The weights are still read once, but nothing waits between tiles: dequantize-then-sgemm hands
 * every tile from the pool to OpenBLAS's threads and back, which cost a 4-token prompt of the
 * 500M Q4_0 bench model (2 MB tiles then; that type now takes the int8 path) four times the
 * dequantization itself (9.9 tok/s, against 92 for decoding). The same exact float arithmetic on
 * the same dequantized weights; only the order of each sum is the dot kernel's instead of sgemm's.
 */
#define MM_ROWWISE 16

static void mm_rowwise_range(void *arg, int64_t a, int64_t b, int ith)
{
    const mm_job *j = arg;
    const int64_t cols = j->W->cols, rows = j->W->rows;
    const dot_fn dot = dots()->f32;
    float *row = j->tile + (size_t)ith * (size_t)cols;
    for (int64_t r = a; r < b; r++) {
        cairn__mat_row(j->W, r, row);
        for (int64_t i = 0; i < j->n; i++)
            j->OUT[i * rows + r] =
                dot((const uint8_t *)(const void *)row, j->X + i * cols, NULL, NULL, cols);
    }
}

/* A prompt chunk's products on quantized weights in int8 (when
 * cairn__cpu_prompt_int8, the default): each token's activation is prepared as a decode step
 * prepares it (rounded to int8 per 32, prep_x8), and the decode kernels run over groups of
 * MM8_ROWS rows, every token against a group while its weights sit in L1/L2. Each output is
 * bit for bit what cairn__matvec gives that token; against dequantize + sgemm (float
 * activations) it costs the decode path's accuracy (the model tests' 2e-2 / 3e-2 of float64
 * instead of 1e-4) and saves the dequantization and the float arithmetic. */
int cairn__cpu_prompt_int8 = 1;
int cairn__cpu_float_tile = 1;
#define MM8_ROWS 16 /* a multiple of 4: the rows kernels' groups stay whole */

typedef struct {
    const cairn__mat *W;
    const dot_table *t;
    dot_fn dot;
    kern k; /* the type's kernels: k.tile NULL, or its kernel over tiles of tokens */
    const float *X;
    float *OUT;
    int64_t n;
    x8_prep *xp; /* (n) */
    char *area;  /* n preparations, stride bytes apart */
    size_t stride;
    const void *xa[MM8_TOKENS]; /* for k.tile: each token's activation in its form */
} mm8_job;

static void mm8_prep_range(void *arg, int64_t a, int64_t b, int ith)
{
    const mm8_job *j = arg;
    const uint32_t ty = j->W->type;
    (void)ith;
    const int fl = !takes_xq8(ty) && !is_kquant(ty); /* the float types (cairn__matmul_rows)
                                                        read the activation as it is */
    for (int64_t i = a; i < b; i++)
        if (fl) {
            memset(&j->xp[i], 0, sizeof j->xp[i]);
            j->xp[i].x[CAIRN__XF_FLOAT] = j->X + i * j->W->cols;
        } else
            j->xp[i] = prep_x8(j->t, j->X + i * j->W->cols, j->W->cols, 1u << j->k.form,
                               j->area + (size_t)i * j->stride);
}

/* the tile kernel's view of the preparations: token i's activation in the kernel's form */
static void mm8_tile_args(mm8_job *j)
{
    for (int64_t i = 0; i < j->n; i++)
        j->xa[i] = j->xp[i].x[j->k.form];
}

/* row groups [a, b), one at a time: every token against it while it is in cache */
static void mm8_rows_range(void *arg, int64_t a, int64_t b, int ith)
{
    const mm8_job *j = arg;
    const int64_t rows = j->W->rows;
    (void)ith;
    /* two tokens a row where the ISA has a kernel for that (the weights unpacked once) */
    void (*const two)(const uint8_t *, const void *, const void *, int64_t, float *) =
        j->W->type == CAIRN__GGML_Q5_K ? j->t->q5_K_2 : NULL;
    for (int64_t g = a; g < b; g++) {
        const int64_t r0 = g * MM8_ROWS, r1 = r0 + MM8_ROWS < rows ? r0 + MM8_ROWS : rows;
        if (j->k.tile) {
            j->k.tile(j->W->data + (size_t)r0 * j->W->row_bytes, j->W->row_bytes, (int)(r1 - r0),
                      j->xa, (int)j->n, j->W->cols, j->OUT + r0, (size_t)rows);
            continue;
        }
        int64_t i = 0;
        for (; two && i + 1 < j->n; i += 2)
            for (int64_t r = r0; r < r1; r++) {
                float o[2];
                two(j->W->data + (size_t)r * j->W->row_bytes, j->xp[i].x[CAIRN__XF_XK],
                    j->xp[i + 1].x[CAIRN__XF_XK], j->W->cols, o);
                j->OUT[i * rows + r] = o[0];
                j->OUT[(i + 1) * rows + r] = o[1];
            }
        for (; i < j->n; i++)
            rows_of(j->W, j->dot, &j->k, j->X + i * j->W->cols, &j->xp[i], r0, r1,
                    j->OUT + i * rows);
    }
}

/* the int8 path for tokens [0, n) in passes of as many as the scratch holds; 0 if it holds
 * none */
static int matmul_int8(cairn__pool *p, const cairn__mat *W, const float *X, int64_t n, float *OUT,
                       float *scratch)
{
    const dot_table *t = dots();
    const size_t stride = mm8_stride(W->cols);
    /* the records at the first 64-byte boundary (the scratch is only a float *), then the
     * preparations at the next */
    const size_t room = cairn__matmul_scratch_bytes(W), head = MM8_TOKENS * sizeof(x8_prep);
    if (room < 64 + head + 64 + stride)
        return 0;
    int64_t per = (int64_t)((room - 64 - head - 64) / stride);
    if (per > MM8_TOKENS)
        per = MM8_TOKENS;
    x8_prep *xp = (x8_prep *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    mm8_job j = {W,      t,     dot_for(t, W->type), kern_for(t, W->type), X, OUT, 0, xp, NULL,
                 stride, {NULL}};
    j.area = (char *)(((uintptr_t)xp + head + 63) & ~(uintptr_t)63);
    for (int64_t i0 = 0; i0 < n; i0 += per) {
        j.n = n - i0 < per ? n - i0 : per;
        j.X = X + i0 * W->cols;
        j.OUT = OUT + i0 * W->rows;
        cairn__pool_for(p, j.n, 1, mm8_prep_range, &j);
        if (j.k.tile)
            mm8_tile_args(&j);
        cairn__pool_for(p, (W->rows + MM8_ROWS - 1) / MM8_ROWS, 0, mm8_rows_range, &j);
    }
    return 1;
}

/* W (rows, cols) @ X^T: X (n, cols) -> OUT (n, rows), each row of OUT cairn__matvec's for its
 * token: the int8 path above, which for the float types is the same loop without the
 * preparation (rows_of's dot product reads the float activation, as cairn__matvec's does). A
 * batch of decode steps (gpu/batch.c) is this product, so a sequence's bits do not depend on
 * which others share its step: every row is still one dot product in the decode kernel's order,
 * and the threads split the weight rows, never a row's sum. */
void cairn__matmul_rows(cairn__pool *p, const cairn__mat *W, const float *X, int64_t n, float *OUT,
                        float *scratch)
{
    if (!dot_for(dots(), W->type)) {
        memset(OUT, 0, (size_t)n * (size_t)W->rows * sizeof(float)); /* as cairn__matvec */
        return;
    }
    if (n == 1 || !matmul_int8(p, W, X, n, OUT, scratch))
        for (int64_t i = 0; i < n; i++)
            cairn__matvec(p, W, X + i * W->cols, OUT + i * W->rows, scratch);
}

/* W (rows, cols) @ X^T: X (n, cols) -> OUT (n, rows) */
/* Float weights on the ISA's float tile kernel: groups of MMF_ROWS rows, each against the
 * pass's tokens (up to MMF_TOKENS) while its weights are in L2. */
#define MMF_ROWS 32
#define MMF_TOKENS 64
typedef struct {
    const cairn__mat *W;
    cairn__tile_fn *tile;
    float *OUT;
    int nt;
    const void *xa[MMF_TOKENS];
} mmf_job;

static void mmf_range(void *arg, int64_t a, int64_t b, int ith)
{
    const mmf_job *j = arg;
    const int64_t rows = j->W->rows;
    (void)ith;
    for (int64_t g = a; g < b; g++) {
        const int64_t r0 = g * MMF_ROWS, r1 = r0 + MMF_ROWS < rows ? r0 + MMF_ROWS : rows;
        j->tile(j->W->data + (size_t)r0 * j->W->row_bytes, j->W->row_bytes, (int)(r1 - r0), j->xa,
                j->nt, j->W->cols, j->OUT + r0, (size_t)rows);
    }
}

static void matmul_float_tile(cairn__pool *p, cairn__tile_fn *tile, const cairn__mat *W,
                              const float *X, int64_t n, float *OUT)
{
    mmf_job j = {W, tile, NULL, 0, {NULL}};
    for (int64_t i0 = 0; i0 < n; i0 += MMF_TOKENS) {
        j.nt = (int)(n - i0 < MMF_TOKENS ? n - i0 : MMF_TOKENS);
        for (int i = 0; i < j.nt; i++)
            j.xa[i] = X + (i0 + i) * W->cols;
        j.OUT = OUT + i0 * W->rows;
        cairn__pool_for(p, (W->rows + MMF_ROWS - 1) / MMF_ROWS, 0, mmf_range, &j);
    }
}

const char *cairn__matmul_path(uint32_t type)
{
    const dot_table *t = dots();
    if (cairn__cpu_prompt_int8 && (takes_xq8(type) || is_kquant(type)))
        return kern_for(t, type).tile ? "int8-tiles" : "int8";
    if (cairn__cpu_float_tile && t->float_tile && t->float_tile(type))
        return "float-tiles";
    return cairn__blas_on() ? "openblas" : "cairn";
}

void cairn__matmul(cairn__pool *p, const cairn__mat *W, const float *X, int64_t n, float *OUT,
                   float *scratch)
{
    const int64_t rows = W->rows;
    const uint32_t ty = W->type;
    if (cairn__cpu_prompt_int8 && (takes_xq8(ty) || is_kquant(ty)) &&
        matmul_int8(p, W, X, n, OUT, scratch))
        return;
    /* float weights where the ISA has a tile kernel for them: no dequantized tiles, no sgemm */
    cairn__tile_fn *const ft = dots()->float_tile ? dots()->float_tile(ty) : NULL;
    if (ft && n > 1 && cairn__cpu_float_tile) {
        matmul_float_tile(p, ft, W, X, n, OUT);
        return;
    }
    /* few tokens on quantized or half weights: row by row (the scratch holds tile_rows rows, one
     * a thread) */
    if (W->type != CAIRN__GGML_F32 && n <= MM_ROWWISE && cairn__pool_size(p) <= tile_rows(W)) {
        mm_job j = {W, 0, rows, scratch, X, NULL, n, OUT};
        cairn__pool_for(p, rows, 0, mm_rowwise_range, &j);
        return;
    }
    const int64_t cols = W->cols;
    const int blas = cairn__blas_on();
    if (blas && W->type == CAIRN__GGML_F32) {
        cairn__sgemm(1, (int)n, (int)rows, (int)cols, 1.0f, X, (int)cols,
                     (const float *)(const void *)W->data, (int)cols, 0.0f, OUT, (int)rows);
        return;
    }
    const int64_t tr = tile_rows(W);
    for (int64_t r0 = 0; r0 < rows; r0 += tr) {
        mm_job j = {W, r0, rows - r0 < tr ? rows - r0 : tr, scratch, X, scratch, n, OUT};
        if (W->type == CAIRN__GGML_F32)
            j.T = (const float *)(const void *)(W->data + (size_t)r0 * W->row_bytes);
        else
            cairn__pool_for(p, j.nr, 0, mm_dequant_range, &j);
        if (blas)
            cairn__sgemm(1, (int)n, (int)j.nr, (int)cols, 1.0f, X, (int)cols, j.T, (int)cols, 0.0f,
                         OUT + r0, (int)rows);
        else
            cairn__pool_for(p, j.nr, 0, mm_gemm_range, &j);
    }
}

/* ==== element-wise ==============================================================================
 */

/* a (n) . b (n) -> float */
float cairn__dot_f32(const float *a, const float *b, int64_t n)
{
    return dots()->f32((const uint8_t *)(const void *)a, b, NULL, NULL, n);
}

/* y (n) += a * x (n) */
void cairn__axpy(float *y, float a, const float *x, int64_t n) { dots()->axpy(y, a, x, n); }
