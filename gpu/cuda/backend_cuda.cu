/* gpu/cuda/backend_cuda.cu - the forward pass on an NVIDIA GPU: cuBLAS for the matrix products,
 * small kernels (gpu/cuda/kernels_*.cuh) for everything between them.
 *
 * Weights are uploaded once, at creation, in one device element type for the whole model: f32
 * when every matrix is stored F32 (products then run as plain f32 GEMMs, no TF32), else f16 (or
 * bf16 when CAIRN_CUDA_DTYPE=bf16; f32 can be forced the same way). Quantized blocks are expanded
 * on the host with the program's cairn__dequant_row (bit-exact with the CPU path; rows split
 * over up to 16 threads) into f32 and rounded to the device type by a kernel; F16/BF16 weights
 * whose type is the device type are copied as they are. f16 has the precision (the tests hold it to
 * 1e-3 of the CPU) but not the range of bf16, so a model with a weight beyond +-65504 is reloaded
 * as bf16 automatically. Q, K and V are stored as one (q_dim + 2 kv_dim, dim) matrix and gate/up as
 * one (2 ff, dim) matrix, so a layer is four GEMMs; the output projections accumulate straight into
 * the f32 residual stream (beta = 1), so there are no separate residual-add kernels. Every GEMM
 * reads half-precision inputs with f32 accumulation and writes f32 (cublasGemmEx,
 * CUBLAS_COMPUTE_32F); the kernel before each GEMM writes its input directly in the device type
 * (RMSNorm, attention, SwiGLU), so nothing is converted separately.
 *
 * A single token's products (every decode step) are matrix-vector products bound by the memory,
 * where cuBLAS's GEMM heuristics are not at their best and where the small kernels between the
 * products cost as much as a product of a small layer. They run as gemv_kernel
 * (kernels_gemv.cuh), which streams the weights 16 bytes per lane, folds the RMSNorm before it
 * into its prologue, and the bias/rope/KV step after the Q/K/V product and the SwiGLU after the
 * gate/up product into its epilogue (same code, same bits): five launches per layer instead of
 * nine. A product of few
 * rows (a layer's Q/K/V, output or down projection: 2048-4096 rows on a 132-SM GPU) may spread
 * each row pair over 2, 4 or 8 warps so that enough loads are in flight (the first H200 run
 * measured those products at a third of the wide ones' bandwidth with one warp a pair). Every
 * split computes the same bits, so the split of each of a layer's products and of the output
 * head is simply timed on the device when the backend is created (gv_tune: tens of milliseconds)
 * and the fastest kept; CAIRN_CUDA_GV_SPLIT=1|2|4|8 forces one.
 * CAIRN_CUDA_GEMV=cublas runs them through cuBLAS as above, the peer bench-llm measures it
 * against. Prompt chunks of more than one token always use cuBLAS. A single token's attention
 * is split over the keys (attention_split_kernel: flash-decoding), so that a model of few heads
 * does not leave most of the GPU idle while its context grows. On compute capability 9.x
 * the decode products and attention are programmatic dependent launches (launch(); the rules
 * are in kernels_common.cuh): each may start while the one before it drains and sends for its
 * first weights meanwhile; CAIRN_CUDA_PDL=0 launches them the ordinary way (same results, bit
 * for bit: the test checks it).
 *
 * The KV cache holds floats or IEEE halves (cairn__backend_opts.cache_type), laid out
 * [layer][position][kv_head * head_dim] (the CPU keeps each head's positions together instead:
 * its attention streams one head at a time, where a warp here reads a 128-byte piece of a row in
 * one go; a cache never crosses backends). The bias/rope/KV step rounds k and v to nearest even
 * as it stores them, and attention (templated on the element type) widens them exactly as it
 * reads.
 *
 * Decode: one CUDA graph per kind of step, captured once and replayed for every token. The token
 * id and the position are not baked into it: the graph begins with a copy of both from pinned
 * host memory into device memory, and every kernel reads the position from there. So the host
 * writes two ints, launches the graph, and waits once per token; no per-layer synchronisation,
 * no re-instantiation, no cudaGraphExecUpdate. The kinds (enum step_kind) differ only in their
 * end: nothing (the engine's catch-up steps on resume), the logits copied to pinned host memory,
 * or the device sampler (gpu/cuda/sample_cuda.cuh: penalty, then argmax, or sort keys, a CUB radix
 * sort and the draw) with only the token copied back; its parameters (the host sampler's penalty
 * set and draw) are copied in at the start like the token. Every kind runs identical kernels for
 * the layers, so the KV cache they write is the same bit for bit, which is what exact resume
 * needs. A prompt chunk of more than one token is launched directly on the stream (its kernels
 * are large) and synchronised once per chunk.
 *
 * Packaging: this file is the shared module libcairn-cuda.so (gpu/meson.build), the only part of
 * cairn linked against cudart and cuBLAS; the program dlopen()s it on first use of the "cuda" or
 * "auto" backend (gpu/backend_plugin.c) through its one exported function, cairn_cuda_plugin. It
 * calls nothing of the program by name: cairn__dequant_row and cairn__errf come as pointers in
 * the host table. CUB (the sort) includes <iostream>, so the module links libstdc++.
 *
 * Profile: CAIRN_CUDA_PROFILE=1 runs every step eagerly with an event after each operation and
 * prints the time per operation (summed over the layers) to stderr when the backend is freed:
 * where a decode step's time goes, from one run (the graph's own speed is bench-llm's).
 *
 * Errors: every CUDA and cuBLAS call is checked; cudaError_t / cublasStatus_t become
 * CAIRN_ECUDA with the original name and text in the message, allocation failures
 * CAIRN_ENOMEM with the sizes, and the absence of a usable device CAIRN_ENODEVICE.
 */
#include <cub/device/device_radix_sort.cuh>
#include <utility>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/backend.h"
#include "gpu/backend_plugin.h"
#include "gpu/gguf.h"
#include "gpu/model.h"

#include "gpu/cuda/kernels_attention.cuh"
#include "gpu/cuda/kernels_elt.cuh"
#include "gpu/cuda/kernels_gemv.cuh"
#include "gpu/cuda/kernels_rope.cuh"
#include "gpu/cuda/sample_cuda.cuh"

#include "cairn_errors.h"
extern "C" {
extern const cairn__backend_ops
    cairn__backend_cuda_ops; /* hidden: reached through cairn_cuda_plugin */
/* the module's one exported symbol; declared through the type the program calls it by */
__attribute__((visibility("default"))) cairn__cuda_plugin_fn cairn_cuda_plugin;
}

static cairn__cuda_host
    host; /* the program's functions (errf, dequant_row), lent by cairn_cuda_plugin */

enum dtype { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2 };
static const char *const DT_NAME[] = {"f32", "f16", "bf16"};
static const size_t DT_SIZE[] = {4, 2, 2};
static const cudaDataType_t DT_CUDA[] = {CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF};

#define PROF_MAX 4096 /* events per profiled step */
#define PROF_BINS 48  /* distinct operation names */
#define MAX_BATCH 512 /* tokens per prompt chunk: bounds the activations and the logits buffer */
#define STAGE_FLOATS ((size_t)8 << 20) /* rows dequantized per upload step: 32 MiB of f32 */
#define WORKSPACE_BYTES                                                                            \
    ((size_t)32 << 20) /* cuBLAS workspace (fixed, so graph capture allocates nothing) */

typedef struct {
    void *wqkv, *wo, *wgu,
        *wd; /* (q+2kv, dim), (dim, q), (2ff, dim), (dim, ff) in the device type */
    float *attn_norm, *ffn_norm; /* (dim) */
    float *bqkv;                 /* (q+2kv) or NULL */
} dlayer;

/* The products of a decode step: a layer's four, then the output head (gv_sk) */
enum gv_prod { GVP_QKV, GVP_WO, GVP_GU, GVP_DOWN, GVP_OUT, GVP_N };
static const char *const GVP_NAME[GVP_N] = {"Q/K/V", "attention output", "gate/up", "down",
                                            "output"};

/* The decode graphs, one per kind of step; all run the same layer kernels, so the KV cache they
 * write is the same bit for bit whichever ran. */
enum step_kind {
    STEP_NOHEAD, /* fill the cache only */
    STEP_LOGITS, /* logits to the host */
    STEP_GREEDY, /* the device sampler's argmax (greedy, top-k 1): the token to the host */
    STEP_SAMPLE, /* the device sampler's sort and draw: the token to the host */
    STEP_KINDS
};

typedef struct {
    cairn__backend base;
    int device;
    int dt; /* enum dtype */
    int n_batch;
    int q_dim, kv_dim, qkv_dim;
    char *e; /* where errors go: the caller's buffer during create, then base.err */
    size_t elen;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *workspace;
    /* weights */
    dlayer *layers;
    void *tok_embd, *output; /* output == tok_embd when tied */
    float *output_norm;
    uint64_t weight_bytes; /* read per decode step */
    /* state and activations */
    void *kc, *vc;   /* (n_layers, n_ctx, kv_dim) floats, or __half when cache_f16 */
    int cache_f16;   /* cache_type == CAIRN__CACHE_F16 */
    float *x;        /* (nb, dim) residual stream */
    void *xn;        /* (nb, dim) T: normed input of the next product */
    float *qkv;      /* (nb, qkv_dim) */
    void *att;       /* (nb, q_dim) T */
    float *gu;       /* (nb, 2 ff) */
    void *hb;        /* (nb, ff) T */
    float *logits;   /* (nb, n_vocab) */
    float *inv_freq; /* (rope_dim / 2) */
    float *rope_cs;  /* (nb, rope_dim / 2, 2): cos, sin of the chunk's positions */
    int *d_tokens, *d_pos;
    int *d_overflow;
    /* pinned host staging: the graph reads tokens/pos from here and writes logits here */
    int *h_tokens, *h_pos;
    float *h_logits;
    /* the device sampler: its parameters (pinned -> device at each step), sort keys, the token */
    sample_in *h_sin, *d_sin;
    int *h_next, *d_next;
    int *h_overflow;              /* d_overflow copied back at the end of every step and chunk */
    uint64_t *keys, *keys_sorted; /* (n_vocab) */
    double *weights;              /* (n_vocab) the sorted candidates' weights */
    void *sort_temp;              /* cub::DeviceRadixSort's scratch */
    size_t sort_temp_bytes;
    cudaGraphExec_t graphs[STEP_KINDS];
    /* CAIRN_CUDA_PROFILE=1: every step runs eagerly with an event after each operation; the
     * time per operation name is summed (prompt chunks and decode steps apart) and printed to
     * stderr when the backend is destroyed. prof_n is -1 outside a profiled step. */
    int prof, prof_n, prof_steps[2], prof_bins;
    cudaEvent_t *prof_ev;
    const char **prof_at; /* (PROF_MAX) the operation each event ends */
    const char *prof_name[PROF_BINS];
    double prof_ms[2][PROF_BINS];
    const char *prof_gv[PROF_BINS]; /* the decode products seen, with their split and grid */
    int prof_gv_sk[PROF_BINS], prof_gv_grid[PROF_BINS], prof_gv_n;
    /* single-token products: gemv_kernel (1) or cuBLAS (0, CAIRN_CUDA_GEMV=cublas, or a model
     * whose rows do not fit the kernel's shared memory); its grid is at most gv_blocks */
    int gv, gv_blocks[GV_SPLITS]; /* the grid resident at once, for each split */
    int gv_force;     /* CAIRN_CUDA_GV_SPLIT: every product's split, 0 to time them (gv_tune) */
    int gv_sk[GVP_N]; /* each product's split */
    float gv_us[GVP_N][GV_SPLITS]; /* gv_tune's times, microseconds a product (0: not tried) */
    int pdl;             /* decode kernels as programmatic dependent launches (launch()) */
    int qkv_items;       /* a token's bias/rope/KV items (qkv_items in kernels_rope.cuh) */
    float *att_part;     /* (n_heads, att_splits, 2 + head_dim): a single token's attention */
    int *att_count;      /* (n_heads) splits done, zero between steps */
    unsigned qkv_blocks; /* qkv_post_kernel's blocks per token */
    int no_graph;        /* a capture failed: decode steps are launched directly */
    char graph_err[256]; /* why */
    char pdl_err[320];   /* a capture with programmatic dependent launches failed: why */
} cuda_backend;

/* ==== errors
 * ======================================================================================= */

static int cuda_err(char *err, size_t errlen, cudaError_t e, const char *what)
{
    if (e == cudaErrorMemoryAllocation)
        return host.errf(err, errlen, CAIRN_ENOMEM, "out of device memory in %s (%s: %s)", what,
                         cudaGetErrorName(e), cudaGetErrorString(e));
    return host.errf(err, errlen, CAIRN_ECUDA, "%s: %s (%s)", what, cudaGetErrorName(e),
                     cudaGetErrorString(e));
}

static int blas_err(char *err, size_t errlen, cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_ALLOC_FAILED)
        return host.errf(err, errlen, CAIRN_ENOMEM, "out of device memory in %s (%s: %s)", what,
                         cublasGetStatusName(s), cublasGetStatusString(s));
    return host.errf(err, errlen, CAIRN_ECUDA, "%s: %s (%s)", what, cublasGetStatusName(s),
                     cublasGetStatusString(s));
}

#define CU(b, call, what)                                                                          \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return cuda_err((b)->e, (b)->elen, e_, what);                                          \
    } while (0)

#define BL(b, call, what)                                                                          \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return blas_err((b)->e, (b)->elen, s_, what);                                          \
    } while (0)

/* ---- the profile (CAIRN_CUDA_PROFILE) ---- */

static void prof_mark(cuda_backend *b, const char *what)
{
    if (b->prof_n < 0 || b->prof_n >= PROF_MAX)
        return;
    if (cudaEventRecord(b->prof_ev[b->prof_n], b->stream) == cudaSuccess)
        b->prof_at[b->prof_n++] = what;
}

static void prof_begin(cuda_backend *b)
{
    if (!b->prof)
        return;
    b->prof_n = 0;
    prof_mark(b, "start");
}

/* after the step's synchronisation: its events into the bins */
static void prof_end(cuda_backend *b, int prompt)
{
    if (b->prof_n < 0)
        return;
    for (int i = 1; i < b->prof_n; i++) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, b->prof_ev[i - 1], b->prof_ev[i]) != cudaSuccess)
            continue;
        int k = 0;
        while (k < b->prof_bins && strcmp(b->prof_name[k], b->prof_at[i]) != 0)
            k++;
        if (k == b->prof_bins) {
            if (k == PROF_BINS)
                continue;
            b->prof_name[b->prof_bins++] = b->prof_at[i];
        }
        b->prof_ms[prompt][k] += ms;
    }
    b->prof_steps[prompt]++;
    b->prof_n = -1;
    (void)cudaGetLastError();
}

static void prof_print(const cuda_backend *b)
{
    static const char *const what[2] = {"decode step", "prompt chunk"};
    for (int p = 0; p < 2; p++) {
        if (!b->prof_steps[p])
            continue;
        double total = 0.0;
        for (int k = 0; k < b->prof_bins; k++)
            total += b->prof_ms[p][k];
        fprintf(stderr, "cuda profile: %d %ss (eager, %s): %.1f us each\n", b->prof_steps[p],
                what[p], DT_NAME[b->dt], 1e3 * total / b->prof_steps[p]);
        for (int k = 0; k < b->prof_bins; k++) {
            if (b->prof_ms[p][k] <= 0.0)
                continue;
            char note[48] = "";
            for (int j = 0; j < b->prof_gv_n; j++)
                if (p == 0 && strcmp(b->prof_gv[j], b->prof_name[k]) == 0)
                    snprintf(note, sizeof note, "   split %d, %d blocks", b->prof_gv_sk[j],
                             b->prof_gv_grid[j]);
            fprintf(stderr, "  %-34s %9.1f us %5.1f%%%s\n", b->prof_name[k],
                    1e3 * b->prof_ms[p][k] / b->prof_steps[p], 100.0 * b->prof_ms[p][k] / total,
                    note);
        }
    }
}

/* after a kernel launch: launch-configuration errors surface here, execution errors at the
 * next synchronisation; a profiled step marks the operation's end */
#define LAUNCHED(b, what)                                                                          \
    do {                                                                                           \
        CU(b, cudaGetLastError(), what);                                                           \
        prof_mark(b, what);                                                                        \
    } while (0)

static int dmalloc(cuda_backend *b, void **p, size_t bytes, const char *what)
{
    *p = NULL;
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e == cudaSuccess)
        return 0;
    *p = NULL;
    (void)cudaGetLastError(); /* allocation failures are not sticky: clear it */
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    if (e == cudaErrorMemoryAllocation)
        return host.errf(
            b->e, b->elen, CAIRN_ENOMEM,
            "out of device memory allocating %zu bytes for %s (%zu of %zu bytes free on device %d)",
            bytes, what, fr, tot, b->device);
    return cuda_err(b->e, b->elen, e, what);
}

/* The range flag, read after a step or chunk has completed: an activation (a matrix-product
 * input: normed x, attention output, SwiGLU) that the device type cannot hold. Silent infinities
 * would become NaN logits; f16 is the type at risk, and bf16 has float's range. */
static int check_range(cuda_backend *b)
{
    if (!*b->h_overflow)
        return 0;
    /* ECUDA, not EUNSUPPORTED: the step ran (the engine reads EUNSUPPORTED as "nothing run") */
    return host.errf(b->e, b->elen, CAIRN_ECUDA,
                     "an activation went beyond the range of %s on the GPU%s", DT_NAME[b->dt],
                     b->dt == DT_F16 ? "; run this model with CAIRN_CUDA_DTYPE=bf16" : "");
}

/* ==== launches
 * ===================================================================================== */

/* f(T()) for the device type T of the backend's weights: the one switch from b->dt to the
 * templates */
template <typename F> static int by_dtype(const cuda_backend *b, F f)
{
    switch (b->dt) {
    case DT_F32:
        return f(float());
    case DT_F16:
        return f(__half());
    default:
        return f(__nv_bfloat16());
    }
}

static unsigned grid_for(size_t n)
{
    const size_t g = (n + CK_THREADS - 1) / CK_THREADS;
    return (unsigned)(g < 1 ? 1 : g > 8192 ? 8192 : g);
}

/* W (rows, cols) @ X^T: X (n, cols) -> C (n, rows) row-major with row stride ldc, C = W X + beta C.
 * Column-major view for cuBLAS: C^T (rows, n) = op(W^T (cols, rows))^T @ X^T (cols, n). */
static int gemm(cuda_backend *b, const void *W, int rows, int cols, const void *X, int n, float *C,
                int ldc, float beta, const char *what)
{
    const float one = 1.0f;
    const cudaDataType_t t = DT_CUDA[b->dt];
    BL(b,
       cublasGemmEx(b->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, cols, &one, W, t, cols, X, t, cols,
                    &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
       what);
    prof_mark(b, what);
    return 0;
}

/* Launches kernel k on the stream; with dep (and b->pdl) as a programmatic dependent launch:
 * it may start while the kernel before it drains, and waits for it in pdl_wait()
 * (kernels_common.cuh says which kernels are written for that). */
template <typename... P, typename... A>
static cudaError_t launch(cuda_backend *b, int dep, void (*k)(P...), dim3 grid, dim3 block,
                          size_t smem, A &&...args)
{
    cudaLaunchConfig_t c = {};
    c.gridDim = grid;
    c.blockDim = block;
    c.dynamicSmemBytes = smem;
    c.stream = b->stream;
    cudaLaunchAttribute at[1];
    if (dep && b->pdl) {
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        c.attrs = at;
        c.numAttrs = 1;
    }
    return cudaLaunchKernelEx(&c, k, std::forward<A>(args)...);
}

/* C (rows) = W (rows, cols) @ in, or + C (beta 1), for a single token: gemv_kernel with the
 * prologue IN and the epilogue OUT (kernels_gemv.cuh; GV_GLU: C is the SwiGLU, rows / 2 T), at
 * product prod's split */
template <typename T, int IN, int OUT>
static int gemv(cuda_backend *b, int prod, const void *W, int rows, int cols, const void *in,
                const float *nw, float beta, void *C, const qkv_args &qa, const char *what)
{
    const int groups = gv_groups(OUT, rows, b->qkv_items);
    const int sk = b->gv_sk[prod];
    int blocks = (groups * sk + GV_WARPS - 1) / GV_WARPS;
    if (blocks > b->gv_blocks[gv_split_index(sk)])
        blocks = b->gv_blocks[gv_split_index(sk)];
    const int vec = cols % (int)(16 / sizeof(T)) == 0 && (uintptr_t)W % 16 == 0;
    void (*const k[GV_SPLITS])(const T *, int, int, int, const void *, const float *, float, float,
                               void *, int *,
                               qkv_args) = {gemv_kernel<T, IN, OUT, 1>, gemv_kernel<T, IN, OUT, 2>,
                                            gemv_kernel<T, IN, OUT, 4>, gemv_kernel<T, IN, OUT, 8>};
    CU(b,
       launch(b, 1, k[gv_split_index(sk)], dim3((unsigned)blocks), dim3(CK_THREADS),
              gv_smem_bytes(cols, (int)sizeof(T)), (const T *)W, rows, cols, vec, in, nw,
              b->base.model->rms_eps, beta, C, (int *)b->d_overflow, qa),
       what);
    if (b->prof_n >= 0) { /* a profiled step: the profile names each product's split and grid */
        int j = 0;
        while (j < b->prof_gv_n && strcmp(b->prof_gv[j], what) != 0)
            j++;
        if (j == b->prof_gv_n && j < PROF_BINS) {
            b->prof_gv[j] = what;
            b->prof_gv_sk[j] = sk;
            b->prof_gv_grid[j] = blocks;
            b->prof_gv_n++;
        }
    }
    LAUNCHED(b, what);
    return 0;
}

/* bytes of one cache element */
static size_t kv_elem(const cuda_backend *b)
{
    return b->cache_f16 ? sizeof(__half) : sizeof(float);
}

/* the bias/rope/KV parameters of layer l (qkv_args, kernels_rope.cuh) */
static qkv_args qkv_of(const cuda_backend *b, int l)
{
    const cairn__model *m = b->base.model;
    const size_t layer_kv = (size_t)b->base.n_ctx * (size_t)b->kv_dim;
    qkv_args a;
    a.bias = b->layers[l].bqkv;
    a.pos = b->d_pos;
    a.cs = b->rope_cs;
    a.kc = (char *)b->kc + (size_t)l * layer_kv * kv_elem(b);
    a.vc = (char *)b->vc + (size_t)l * layer_kv * kv_elem(b);
    a.cache_f16 = b->cache_f16;
    a.n_heads = m->n_heads;
    a.n_kv = m->n_kv_heads;
    a.hd = m->head_dim;
    a.rope_dim = m->rope_dim;
    a.neox = m->rope_mode == CAIRN__ROPE_NEOX;
    return a;
}

/* The three kinds of product of a layer, each with the small kernel before it. A single token
 * (n 1) runs them fused (gemv_kernel) unless CAIRN_CUDA_GEMV=cublas; a prompt chunk, or that
 * setting, runs the small kernel into its T buffer and then cuBLAS. */

/* C (n, rows) = W (rows, dim) @ rmsnorm(x (n, dim); nw) */
template <typename T>
static int normed_product(cuda_backend *b, int prod, int n, const float *x, const float *nw,
                          const void *W, int rows, float *C, const char *fused, const char *blas)
{
    const cairn__model *m = b->base.model;
    if (n == 1 && b->gv)
        return gemv<T, GV_NORM, GV_Y>(b, prod, W, rows, m->dim, x, nw, 0.0f, C, qkv_args(), fused);
    rmsnorm_kernel<T>
        <<<n, CK_THREADS, 0, b->stream>>>(x, nw, m->dim, m->rms_eps, (T *)b->xn, b->d_overflow);
    LAUNCHED(b, "rmsnorm kernel");
    return gemm(b, W, rows, m->dim, b->xn, n, C, rows, 0.0f, blas);
}

/* the Q/K/V projection of layer l and its bias/rope/KV step: qkv (n, qkv_dim) = Wqkv @
 * rmsnorm(x), then q rotated in place and k, v into the cache */
template <typename T> static int qkv_product(cuda_backend *b, int n, int l)
{
    const dlayer *ly = &b->layers[l];
    const qkv_args qa = qkv_of(b, l);
    if (n == 1 && b->gv)
        return gemv<T, GV_NORM, GV_QKV>(b, GVP_QKV, ly->wqkv, b->qkv_dim, b->base.model->dim, b->x,
                                        ly->attn_norm, 0.0f, b->qkv, qa,
                                        "rmsnorm + QKV + bias/rope/KV (gemv)");
    int rc = normed_product<T>(b, GVP_QKV, n, b->x, ly->attn_norm, ly->wqkv, b->qkv_dim, b->qkv,
                               "rmsnorm + QKV (gemv)", "cublasGemmEx (QKV)");
    if (rc)
        return rc;
    qkv_post_kernel<<<dim3((unsigned)n, b->qkv_blocks), CK_THREADS, 0, b->stream>>>(b->qkv,
                                                                                    b->qkv_dim, qa);
    LAUNCHED(b, "bias/rope/KV kernel");
    return 0;
}

/* C (n, rows) += W (rows, cols) @ in (n, cols), in already in T (product prod) */
template <typename T>
static int added_product(cuda_backend *b, int prod, int n, const void *W, int rows, int cols,
                         const void *in, float *C, const char *fused, const char *blas)
{
    if (n == 1 && b->gv)
        return gemv<T, GV_PLAIN, GV_Y>(b, prod, W, rows, cols, in, NULL, 1.0f, C, qkv_args(),
                                       fused);
    return gemm(b, W, rows, cols, in, n, C, rows, 1.0f, blas);
}

/* gu (n, 2 ff) = Wgu (2 ff, dim) @ rmsnorm(x), and hb (n, ff) = swiglu(gu) in T; a single token's
 * fused product stores hb alone (GV_GLU) */
template <typename T> static int gate_up_product(cuda_backend *b, int n, const dlayer *ly)
{
    const cairn__model *m = b->base.model;
    const int ff = m->ff_dim;
    if (n == 1 && b->gv)
        return gemv<T, GV_NORM, GV_GLU>(b, GVP_GU, ly->wgu, 2 * ff, m->dim, b->x, ly->ffn_norm,
                                        0.0f, b->hb, qkv_args(),
                                        "rmsnorm + gate/up + swiglu (gemv)");
    int rc = normed_product<T>(b, GVP_GU, n, b->x, ly->ffn_norm, ly->wgu, 2 * ff, b->gu,
                               "rmsnorm + gate/up (gemv)", "cublasGemmEx (gate/up)");
    if (rc)
        return rc;
    swiglu_kernel<T><<<grid_for((size_t)n * ff), CK_THREADS, 0, b->stream>>>(
        b->gu, ff, n, (T *)b->hb, b->d_overflow);
    LAUNCHED(b, "swiglu kernel");
    return 0;
}

/* softmax(q . K) @ V for n tokens into att, over this layer's cache kc, vc (C: its type) */
template <typename T, typename C>
static int attend(cuda_backend *b, int n, const C *kc, const C *vc)
{
    const cairn__model *m = b->base.model;
    const int hd = m->head_dim;
    const float scale = 1.0f / sqrtf((float)hd);
    T *att = (T *)b->att;
    if (n == 1) /* one token: the keys split over blocks; between decode products */
        CU(b,
           launch(b, 1, attention_split_kernel<T, ATT_DECODE_WARPS, ATT_DECODE_U, C>,
                  dim3((unsigned)m->n_heads, (unsigned)att_splits(m->n_heads)),
                  dim3(ATT_DECODE_WARPS * 32), 0, (const float *)b->qkv, kc, vc,
                  (const int *)b->d_pos, m->n_heads, m->n_kv_heads, hd, scale, b->att_part,
                  b->att_count, att, (int *)b->d_overflow),
           "attention kernel");
    else { /* a prompt chunk: tiles of tokens, sized by the head (hd <= ATT_MAX_HD = 256) */
        const dim3 blk(ATT_TILE_WARPS * 32);
#define ATT_TILE(TQ, KC, HDM)                                                                      \
    attention_tile_kernel<T, TQ, KC, HDM, C>                                                       \
        <<<dim3((unsigned)m->n_heads, (unsigned)((n + TQ - 1) / TQ)), blk, 0, b->stream>>>(        \
            b->qkv, b->qkv_dim, kc, vc, b->d_pos, n, m->n_heads, m->n_kv_heads, hd, scale, att,    \
            b->d_overflow)
        if (hd <= 64)
            ATT_TILE(16, 32, 64);
        else if (hd <= 128)
            ATT_TILE(16, 32, 128);
        else
            ATT_TILE(8, 16, 256);
#undef ATT_TILE
    }
    LAUNCHED(b, "attention kernel");
    return 0;
}

/* Product prod (enum gv_prod) of layer l for the n tokens of a chunk, with the small kernels
 * folded into it; the output head's input is the last head_rows of them. */
template <typename T>
static int layer_product(cuda_backend *b, int prod, int l, int n, int head_rows)
{
    const cairn__model *m = b->base.model;
    const dlayer *ly = &b->layers[l];
    const int dim = m->dim, ff = m->ff_dim;
    switch (prod) {
    case GVP_QKV:
        return qkv_product<T>(b, n, l);
    case GVP_WO: /* Wo (dim, q_dim) @ att (n, q_dim) + x -> x (n, dim) */
        return added_product<T>(b, GVP_WO, n, ly->wo, dim, b->q_dim, b->att, b->x,
                                "attention output (gemv)", "cublasGemmEx (attention output)");
    case GVP_GU: /* swiglu(Wgu (2 ff, dim) @ rmsnorm(x)) -> hb (n, ff) */
        return gate_up_product<T>(b, n, ly);
    case GVP_DOWN: /* Wd (dim, ff) @ hb + x -> x (n, dim) */
        return added_product<T>(b, GVP_DOWN, n, ly->wd, dim, ff, b->hb, b->x, "down (gemv)",
                                "cublasGemmEx (down)");
    default: /* Wout (n_vocab, dim) @ rmsnorm(x) -> logits (head_rows, n_vocab) */
        return normed_product<T>(b, GVP_OUT, head_rows, b->x + (size_t)(n - head_rows) * dim,
                                 b->output_norm, b->output, m->n_vocab, b->logits,
                                 "rmsnorm + output (gemv)", "cublasGemmEx (output)");
    }
}

template <typename T> static int enqueue_t(cuda_backend *b, int n, int head_rows)
{
    const cairn__model *m = b->base.model;
    const int dim = m->dim;
    const size_t layer_kv = (size_t)b->base.n_ctx * (size_t)b->kv_dim;
    int rc;

    /* x (n, dim) = tok_embd[tokens] */
    embed_kernel<T>
        <<<n, CK_THREADS, 0, b->stream>>>((const T *)b->tok_embd, b->d_tokens, dim, b->x);
    LAUNCHED(b, "embedding kernel");
    /* the rope angles of these positions, once for every layer and head */
    if (m->rope_dim >= 2) {
        rope_table_kernel<<<n, 128, 0, b->stream>>>(b->d_pos, b->inv_freq, m->rope_dim / 2,
                                                    b->rope_cs);
        LAUNCHED(b, "rope table kernel");
    }
    for (int l = 0; l < m->n_layers; l++) {
        /* Wqkv (qkv_dim, dim) @ rmsnorm(x) -> qkv (n, qkv_dim); bias, rope, k/v into the cache */
        if ((rc = layer_product<T>(b, GVP_QKV, l, n, 0)))
            return rc;
        const size_t at = (size_t)l * layer_kv * kv_elem(b);
        if (b->cache_f16)
            rc = attend<T, __half>(b, n, (const __half *)((const char *)b->kc + at),
                                   (const __half *)((const char *)b->vc + at));
        else
            rc = attend<T, float>(b, n, (const float *)((const char *)b->kc + at),
                                  (const float *)((const char *)b->vc + at));
        if (rc)
            return rc;
        if ((rc = layer_product<T>(b, GVP_WO, l, n, 0)) ||
            (rc = layer_product<T>(b, GVP_GU, l, n, 0)) ||
            (rc = layer_product<T>(b, GVP_DOWN, l, n, 0)))
            return rc;
    }
    return head_rows ? layer_product<T>(b, GVP_OUT, 0, n, head_rows) : 0;
}

/* Enqueues the pass of n tokens (already in d_tokens, position in d_pos) on the stream, and the
 * output head for the last head_rows of them (0: none). */
static int enqueue(cuda_backend *b, int n, int head_rows)
{
    return by_dtype(b, [&](auto t) { return enqueue_t<decltype(t)>(b, n, head_rows); });
}

/* ==== decode graph
 * ================================================================================= */

/* The device sampler on the logits of row 0 (penalty, then argmax or keys, sort and draw),
 * parameters in d_sin; the token lands in h_next when the stream reaches it. */
static int enqueue_sampling(cuda_backend *b, int kind)
{
    const int nv = b->base.model->n_vocab;
    penalty_kernel<<<1, CK_THREADS, 0, b->stream>>>(b->logits, b->d_sin);
    LAUNCHED(b, "penalty kernel");
    if (kind == STEP_GREEDY) {
        argmax_kernel<<<1, SAMPLE_THREADS, 0, b->stream>>>(b->logits, nv, b->d_next);
        LAUNCHED(b, "argmax kernel");
    } else {
        keys_kernel<<<grid_for((size_t)nv), CK_THREADS, 0, b->stream>>>(b->logits, nv, b->keys);
        LAUNCHED(b, "sort key kernel");
        size_t bytes = b->sort_temp_bytes;
        /* bits 32..63 only (the logit): the sort is stable and the keys are made in id order,
         * so equal logits stay in ascending id, the order the low half encodes */
        CU(b,
           cub::DeviceRadixSort::SortKeysDescending(b->sort_temp, bytes, b->keys, b->keys_sorted,
                                                    nv, 32, 64, b->stream),
           "cub::DeviceRadixSort::SortKeysDescending");
        prof_mark(b, "cub::DeviceRadixSort");
        weights_kernel<<<grid_for((size_t)nv), CK_THREADS, 0, b->stream>>>(b->keys_sorted, nv,
                                                                           b->d_sin, b->weights);
        LAUNCHED(b, "sample weights kernel");
        finish_kernel<<<1, SAMPLE_THREADS, 0, b->stream>>>(b->keys_sorted, b->weights, nv, b->d_sin,
                                                           b->d_next);
        LAUNCHED(b, "sampling kernel");
    }
    CU(b, cudaMemcpyAsync(b->h_next, b->d_next, sizeof(int), cudaMemcpyDeviceToHost, b->stream),
       "cudaMemcpyAsync (token)");
    return 0;
}

/* the whole graph body of a decode step: inputs in, the pass, then logits or a token out */
static int enqueue_decode(cuda_backend *b, int kind)
{
    prof_begin(b);
    CU(b, cudaMemcpyAsync(b->d_tokens, b->h_tokens, sizeof(int), cudaMemcpyHostToDevice, b->stream),
       "cudaMemcpyAsync (token)");
    CU(b, cudaMemcpyAsync(b->d_pos, b->h_pos, sizeof(int), cudaMemcpyHostToDevice, b->stream),
       "cudaMemcpyAsync (position)");
    if (kind >= STEP_GREEDY)
        CU(b,
           cudaMemcpyAsync(b->d_sin, b->h_sin, sizeof(sample_in), cudaMemcpyHostToDevice,
                           b->stream),
           "cudaMemcpyAsync (sampling parameters)");
    int rc = enqueue(b, 1, kind != STEP_NOHEAD);
    if (rc)
        return rc;
    CU(b,
       cudaMemcpyAsync(b->h_overflow, b->d_overflow, sizeof(int), cudaMemcpyDeviceToHost,
                       b->stream),
       "cudaMemcpyAsync (flags)");
    if (kind == STEP_LOGITS)
        CU(b,
           cudaMemcpyAsync(b->h_logits, b->logits, (size_t)b->base.model->n_vocab * sizeof(float),
                           cudaMemcpyDeviceToHost, b->stream),
           "cudaMemcpyAsync (logits)");
    else if (kind >= STEP_GREEDY)
        return enqueue_sampling(b, kind);
    return 0;
}

/* Captures the decode graph of a kind (once). The first time, the same step runs eagerly before
 * the capture so that every kernel module and cuBLAS's heuristics are loaded outside of it (lazy
 * loading inside a capture is not allowed everywhere); the graph then recomputes the same
 * position, writing the same values. */
static int capture(cuda_backend *b, int kind, cudaGraphExec_t *out)
{
    int rc = enqueue_decode(b, kind);
    if (rc)
        return rc;
    CU(b, cudaStreamSynchronize(b->stream), "warm-up decode step");
    cudaGraph_t g = NULL;
    CU(b, cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal),
       "cudaStreamBeginCapture");
    rc = enqueue_decode(b, kind);
    cudaError_t e =
        cudaStreamEndCapture(b->stream, &g); /* always end, or the stream stays capturing */
    if (rc) {
        if (g)
            cudaGraphDestroy(g);
        (void)cudaGetLastError();
        return rc;
    }
    /* on failure, clear the error too: the eager fallback's first launch check would read it */
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return cuda_err(b->e, b->elen, e, "cudaStreamEndCapture");
    }
    e = cudaGraphInstantiate(out, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *out = NULL;
        return cuda_err(b->e, b->elen, e, "cudaGraphInstantiate");
    }
    return 0;
}

/* one token at position pos, as kind; the inputs of a sampling kind are already in h_sin */
static int decode_step(cuda_backend *b, int32_t token, int pos, int kind)
{
    cudaGraphExec_t *ge = &b->graphs[kind];
    b->h_tokens[0] = token; /* the previous step has completed: the staging is free */
    b->h_pos[0] = pos;
    if (!*ge && !b->no_graph) {
        int rc = capture(b, kind, ge);
        if (rc && rc != CAIRN_ENOMEM && b->pdl) {
            /* programmatic dependent launches are the newest thing in the graph: without them
             * the step computes the same bits, so try that before giving up on graphs */
            (void)cudaGetLastError();
            snprintf(b->pdl_err, sizeof b->pdl_err,
                     "graph, without programmatic dependent launch: %s", b->base.err);
            b->base.err[0] = '\0';
            b->pdl = 0;
            const cudaError_t se = cudaStreamSynchronize(b->stream);
            if (se != cudaSuccess)
                return cuda_err(b->e, b->elen, se, "decode step");
            rc = capture(b, kind, ge);
        }
        if (rc == CAIRN_ENOMEM)
            return rc;
        if (rc) { /* run without graphs from now on (every kind: the cache they write must agree) */
            b->no_graph = 1;
            (void)cudaGetLastError();
            snprintf(b->graph_err, sizeof b->graph_err, "eager: %s", b->base.err);
            b->base.err[0] = '\0';
            const cudaError_t se = cudaStreamSynchronize(b->stream);
            if (se != cudaSuccess) /* a fault, not a capture problem */
                return cuda_err(b->e, b->elen, se, "decode step");
        }
    }
    if (b->no_graph) {
        int rc = enqueue_decode(b, kind);
        if (rc)
            return rc;
    } else {
        CU(b, cudaGraphLaunch(*ge, b->stream), "cudaGraphLaunch");
    }
    CU(b, cudaStreamSynchronize(b->stream), "decode step");
    prof_end(b, 0);
    return check_range(b);
}

/* the host's request into the pinned parameters the next step copies to the device */
static void set_sample_in(cuda_backend *b, const cairn__sample_req *q)
{
    sample_in *s = b->h_sin;
    s->temperature = q->temperature;
    s->top_p = q->top_p;
    s->penalty = q->repeat_penalty;
    s->top_k = q->top_k;
    s->r = q->r;
    s->n_pen = q->n_pen;
    if (q->n_pen > 0)
        memcpy(s->pen, q->pen, (size_t)q->n_pen * sizeof *q->pen);
}

/* greedy and top-k 1 pick the largest key: no sort */
static int sample_kind(const cairn__sample_req *q)
{
    return q->temperature <= 0.0f || q->top_k == 1 ? STEP_GREEDY : STEP_SAMPLE;
}

static int cuda_forward_sample(cairn__backend *bb, int32_t token, int pos,
                               const cairn__sample_req *q, int32_t *next)
{
    cuda_backend *b = (cuda_backend *)bb;
    b->e = b->base.err;
    b->elen = sizeof b->base.err;
    CU(b, cudaSetDevice(b->device), "cudaSetDevice");
    set_sample_in(b, q);
    const int rc = decode_step(b, token, pos, sample_kind(q));
    if (rc)
        return rc;
    *next = b->h_next[0];
    return 0;
}

/* the sampler alone on given logits (eager, not a graph): the gpu test's view of it */
static int cuda_sample_logits(cairn__backend *bb, const float *logits, const cairn__sample_req *q,
                              int32_t *next)
{
    if (!bb || bb->ops != &cairn__backend_cuda_ops)
        return CAIRN_EINVAL;
    cuda_backend *b = (cuda_backend *)bb;
    b->e = b->base.err;
    b->elen = sizeof b->base.err;
    if (q->n_pen < 0 || q->n_pen > CAIRN__SAMPLE_MAX_PEN)
        return host.errf(b->e, b->elen, CAIRN_EUNSUPPORTED, "%d penalized ids", q->n_pen);
    for (int i = 0; i < q->n_pen; i++)
        if (q->pen[i] < 0 || q->pen[i] >= b->base.model->n_vocab)
            return host.errf(b->e, b->elen, CAIRN_EINVAL,
                             "penalized id %d is outside the vocabulary", q->pen[i]);
    CU(b, cudaSetDevice(b->device), "cudaSetDevice");
    set_sample_in(b, q);
    CU(b,
       cudaMemcpyAsync(b->logits, logits, (size_t)b->base.model->n_vocab * sizeof(float),
                       cudaMemcpyHostToDevice, b->stream),
       "cudaMemcpyAsync (logits)");
    CU(b, cudaMemcpyAsync(b->d_sin, b->h_sin, sizeof(sample_in), cudaMemcpyHostToDevice, b->stream),
       "cudaMemcpyAsync (sampling parameters)");
    const int rc = enqueue_sampling(b, sample_kind(q));
    if (rc)
        return rc;
    CU(b, cudaStreamSynchronize(b->stream), "sampling");
    *next = b->h_next[0];
    return 0;
}

/* n (2..n_batch) tokens at pos..; logits: NULL, the last row, or all n rows (all_logits) */
static int prompt_chunk(cuda_backend *b, const int32_t *tokens, int n, int pos, float *logits,
                        int all_logits)
{
    const size_t nv = (size_t)b->base.model->n_vocab;
    const int head = logits ? (all_logits ? n : 1) : 0;
    for (int i = 0; i < n; i++)
        b->h_tokens[i] = tokens[i];
    b->h_pos[0] = pos;
    prof_begin(b);
    CU(b,
       cudaMemcpyAsync(b->d_tokens, b->h_tokens, (size_t)n * sizeof(int), cudaMemcpyHostToDevice,
                       b->stream),
       "cudaMemcpyAsync (tokens)");
    CU(b, cudaMemcpyAsync(b->d_pos, b->h_pos, sizeof(int), cudaMemcpyHostToDevice, b->stream),
       "cudaMemcpyAsync (position)");
    int rc = enqueue(b, n, head);
    if (rc)
        return rc;
    if (head)
        CU(b,
           cudaMemcpyAsync(logits, b->logits, (size_t)head * nv * sizeof(float),
                           cudaMemcpyDeviceToHost, b->stream),
           "cudaMemcpyAsync (logits)");
    CU(b,
       cudaMemcpyAsync(b->h_overflow, b->d_overflow, sizeof(int), cudaMemcpyDeviceToHost,
                       b->stream),
       "cudaMemcpyAsync (flags)");
    /* once per chunk: the pinned token staging is reused by the next one */
    CU(b, cudaStreamSynchronize(b->stream), "prompt chunk");
    prof_end(b, 1);
    return check_range(b);
}

static int cuda_forward(cairn__backend *bb, const int32_t *tokens, int n, int pos, float *logits,
                        int all_logits)
{
    cuda_backend *b = (cuda_backend *)bb;
    const size_t nv = (size_t)b->base.model->n_vocab;
    b->e = b->base.err;
    b->elen = sizeof b->base.err;
    CU(b, cudaSetDevice(b->device), "cudaSetDevice");
    for (int c0 = 0; c0 < n; c0 += b->n_batch) {
        const int nc = n - c0 < b->n_batch ? n - c0 : b->n_batch;
        const int last = c0 + nc == n;
        float *lg = NULL;
        if (logits && all_logits)
            lg = logits + (size_t)c0 * nv;
        else if (logits && last)
            lg = logits;
        if (nc == 1) {
            const int rc = decode_step(b, tokens[c0], pos + c0, lg ? STEP_LOGITS : STEP_NOHEAD);
            if (rc)
                return rc;
            if (lg)
                memcpy(lg, b->h_logits, nv * sizeof(float));
            continue;
        }
        const int rc = prompt_chunk(b, tokens + c0, nc, pos + c0, lg, all_logits);
        if (rc)
            return rc;
    }
    return 0;
}

/* ==== creation: weights
 * ============================================================================ */

/* Rows of W converted to the device type at dst (rows * cols elements). Same-type F32/F16/BF16
 * are copied as stored; anything else is dequantized on the host (cairn__dequant_row, the CPU
 * path's own function) a slab of rows at a time and rounded on the device. */
/* Rows [r0, r1) of W dequantized into out (row r0 first): one thread's share of a slab. */
typedef struct {
    const cairn__mat *W;
    size_t r0, r1;
    float *out;
} dequant_share;

static void *dequant_rows(void *arg)
{
    const dequant_share *j = (const dequant_share *)arg;
    const size_t cols = (size_t)j->W->cols;
    for (size_t r = j->r0; r < j->r1; r++)
        host.dequant_row(j->W->type, j->W->data + r * j->W->row_bytes, j->out + (r - j->r0) * cols,
                         (uint64_t)cols);
    return NULL;
}

/* Rows [r0, r0 + nr) of W into stage, split over up to DEQUANT_THREADS threads: loading a
 * quantized model is bound by this host work (a 7B Q4_K file is ~28 GB of f32 to produce), and
 * every row is independent. A thread that cannot be started leaves its share to the caller. */
#define DEQUANT_THREADS 16
static void dequant_slab(const cairn__mat *W, size_t r0, size_t nr, float *stage)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t nt = cpus > 1 ? (size_t)cpus : 1;
    if (nt > DEQUANT_THREADS)
        nt = DEQUANT_THREADS;
    if (nt > nr)
        nt = nr;
    dequant_share job[DEQUANT_THREADS];
    pthread_t tid[DEQUANT_THREADS];
    int started[DEQUANT_THREADS] = {0};
    for (size_t t = 0; t < nt; t++) {
        job[t].W = W;
        job[t].r0 = r0 + nr * t / nt;
        job[t].r1 = r0 + nr * (t + 1) / nt;
        job[t].out = stage + (job[t].r0 - r0) * (size_t)W->cols;
    }
    for (size_t t = 1; t < nt; t++)
        started[t] = pthread_create(&tid[t], NULL, dequant_rows, &job[t]) == 0;
    dequant_rows(&job[0]);
    for (size_t t = 1; t < nt; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            dequant_rows(&job[t]);
    }
}

static int upload_mat(cuda_backend *b, const cairn__mat *W, void *dst, float *h_stage,
                      float *d_stage)
{
    const size_t cols = (size_t)W->cols, rows = (size_t)W->rows, es = DT_SIZE[b->dt];
    const int same = (b->dt == DT_F32 && W->type == CAIRN__GGML_F32) ||
                     (b->dt == DT_F16 && W->type == CAIRN__GGML_F16) ||
                     (b->dt == DT_BF16 && W->type == CAIRN__GGML_BF16);
    if (same) {
        CU(b, cudaMemcpy(dst, W->data, rows * W->row_bytes, cudaMemcpyHostToDevice),
           "cudaMemcpy (weights)");
        return 0;
    }
    const size_t slab = STAGE_FLOATS / cols > 0 ? STAGE_FLOATS / cols : 1;
    for (size_t r0 = 0; r0 < rows; r0 += slab) {
        const size_t nr = rows - r0 < slab ? rows - r0 : slab;
        dequant_slab(W, r0, nr, h_stage);
        char *d = (char *)dst + r0 * cols * es;
        if (b->dt == DT_F32) {
            CU(b, cudaMemcpy(d, h_stage, nr * cols * sizeof(float), cudaMemcpyHostToDevice),
               "cudaMemcpy (weights)");
            continue;
        }
        CU(b, cudaMemcpy(d_stage, h_stage, nr * cols * sizeof(float), cudaMemcpyHostToDevice),
           "cudaMemcpy (weights)");
        if (b->dt == DT_F16)
            convert_kernel<__half><<<grid_for(nr * cols), CK_THREADS, 0, 0>>>(
                d_stage, (__half *)d, nr * cols, b->d_overflow);
        else
            convert_kernel<__nv_bfloat16><<<grid_for(nr * cols), CK_THREADS, 0, 0>>>(
                d_stage, (__nv_bfloat16 *)d, nr * cols, b->d_overflow);
        LAUNCHED(b, "weight conversion kernel");
        CU(b, cudaDeviceSynchronize(),
           "weight conversion"); /* d_stage and h_stage are reused next */
    }
    return 0;
}

/* Matrices stacked by rows (all with the same cols) into one new device matrix *out. */
static int upload_stack(cuda_backend *b, const cairn__mat *const *mats, int nm, void **out,
                        float *h_stage, float *d_stage, const char *what, int count)
{
    size_t rows = 0;
    for (int i = 0; i < nm; i++)
        rows += (size_t)mats[i]->rows;
    const size_t cols = (size_t)mats[0]->cols, es = DT_SIZE[b->dt];
    int rc = dmalloc(b, out, rows * cols * es, what);
    if (rc)
        return rc;
    size_t r0 = 0;
    for (int i = 0; i < nm; i++) {
        if ((rc = upload_mat(b, mats[i], (char *)*out + r0 * cols * es, h_stage, d_stage)))
            return rc;
        r0 += (size_t)mats[i]->rows;
    }
    if (count)
        b->weight_bytes += rows * cols * es;
    return 0;
}

static int upload_vec(cuda_backend *b, const float *v, size_t n, float **out, const char *what)
{
    int rc = dmalloc(b, (void **)out, n * sizeof(float), what);
    if (rc)
        return rc;
    CU(b, cudaMemcpy(*out, v, n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy (vectors)");
    return 0;
}

static int upload_weights(cuda_backend *b)
{
    const cairn__model *m = b->base.model;
    size_t max_cols = (size_t)m->dim > (size_t)m->ff_dim ? (size_t)m->dim : (size_t)m->ff_dim;
    if ((size_t)b->q_dim > max_cols)
        max_cols = (size_t)b->q_dim;
    const size_t stage = STAGE_FLOATS > max_cols ? STAGE_FLOATS : max_cols;
    float *h_stage = NULL, *d_stage = NULL;
    int rc = 0;
    if (cudaMallocHost((void **)&h_stage, stage * sizeof(float)) != cudaSuccess) {
        (void)cudaGetLastError();
        h_stage = NULL;
        return host.errf(b->e, b->elen, CAIRN_ENOMEM,
                         "cannot allocate %zu bytes of pinned host memory", stage * sizeof(float));
    }
    if ((rc = dmalloc(b, (void **)&d_stage, stage * sizeof(float), "weight staging")))
        goto out;
    {
        const cairn__mat *e[1] = {&m->tok_embd};
        if ((rc = upload_stack(b, e, 1, &b->tok_embd, h_stage, d_stage, "token_embd.weight",
                               m->tied_output)))
            goto out;
    }
    if (m->tied_output) {
        b->output = b->tok_embd;
    } else {
        const cairn__mat *o[1] = {&m->output};
        if ((rc = upload_stack(b, o, 1, &b->output, h_stage, d_stage, "output.weight", 1)))
            goto out;
    }
    if ((rc = upload_vec(b, m->output_norm, (size_t)m->dim, &b->output_norm, "output_norm.weight")))
        goto out;
    for (int l = 0; l < m->n_layers; l++) {
        const cairn__layer *ly = &m->layers[l];
        dlayer *d = &b->layers[l];
        const cairn__mat *qkv[3] = {&ly->wq, &ly->wk, &ly->wv}, *gu[2] = {&ly->w_gate, &ly->w_up};
        const cairn__mat *wo[1] = {&ly->wo}, *wd[1] = {&ly->w_down};
        if ((rc = upload_stack(b, qkv, 3, &d->wqkv, h_stage, d_stage, "attention Q/K/V weights",
                               1)) ||
            (rc =
                 upload_stack(b, wo, 1, &d->wo, h_stage, d_stage, "attention output weights", 1)) ||
            (rc = upload_stack(b, gu, 2, &d->wgu, h_stage, d_stage, "gate/up weights", 1)) ||
            (rc = upload_stack(b, wd, 1, &d->wd, h_stage, d_stage, "down weights", 1)) ||
            (rc = upload_vec(b, ly->attn_norm, (size_t)m->dim, &d->attn_norm, "attention norm")) ||
            (rc = upload_vec(b, ly->ffn_norm, (size_t)m->dim, &d->ffn_norm, "feed-forward norm")))
            goto out;
        if (ly->bq || ly->bk || ly->bv) { /* absent ones are zero */
            float *bias = (float *)calloc((size_t)b->qkv_dim, sizeof(float));
            if (!bias) {
                rc = host.errf(b->e, b->elen, CAIRN_ENOMEM, "out of memory");
                goto out;
            }
            if (ly->bq)
                memcpy(bias, ly->bq, (size_t)b->q_dim * sizeof(float));
            if (ly->bk)
                memcpy(bias + b->q_dim, ly->bk, (size_t)b->kv_dim * sizeof(float));
            if (ly->bv)
                memcpy(bias + b->q_dim + b->kv_dim, ly->bv, (size_t)b->kv_dim * sizeof(float));
            rc = upload_vec(b, bias, (size_t)b->qkv_dim, &d->bqkv, "Q/K/V biases");
            free(bias);
            if (rc)
                goto out;
        }
    }
out:
    cudaFree(d_stage);
    cudaFreeHost(h_stage);
    return rc;
}

/* ==== creation
 * ===================================================================================== */

static void cuda_destroy(cairn__backend *bb)
{
    cuda_backend *b = (cuda_backend *)bb;
    if (!b)
        return;
    /* nothing here can be reported: free what exists and clear any error it raises */
    cudaSetDevice(b->device);
    if (b->stream)
        cudaStreamSynchronize(b->stream);
    for (int k = 0; k < STEP_KINDS; k++)
        if (b->graphs[k])
            cudaGraphExecDestroy(b->graphs[k]);
    if (b->prof_ev) {
        prof_print(b);
        for (int i = 0; i < PROF_MAX; i++)
            if (b->prof_ev[i])
                cudaEventDestroy(b->prof_ev[i]);
        free(b->prof_ev);
        free(b->prof_at);
    }
    if (b->layers) {
        for (int l = 0; l < b->base.model->n_layers; l++) {
            dlayer *d = &b->layers[l];
            cudaFree(d->wqkv);
            cudaFree(d->wo);
            cudaFree(d->wgu);
            cudaFree(d->wd);
            cudaFree(d->attn_norm);
            cudaFree(d->ffn_norm);
            cudaFree(d->bqkv);
        }
        free(b->layers);
    }
    if (b->output != b->tok_embd)
        cudaFree(b->output);
    cudaFree(b->tok_embd);
    cudaFree(b->output_norm);
    void *dev[] = {b->kc,       b->vc,       b->x,           b->xn,        b->qkv,
                   b->att,      b->gu,       b->hb,          b->logits,    b->inv_freq,
                   b->d_tokens, b->d_pos,    b->d_overflow,  b->workspace, b->d_sin,
                   b->d_next,   b->keys,     b->keys_sorted, b->sort_temp, b->rope_cs,
                   b->weights,  b->att_part, b->att_count};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        cudaFree(dev[i]);
    cudaFreeHost(b->h_tokens);
    cudaFreeHost(b->h_pos);
    cudaFreeHost(b->h_logits);
    cudaFreeHost(b->h_sin);
    cudaFreeHost(b->h_next);
    cudaFreeHost(b->h_overflow);
    if (b->blas)
        cublasDestroy(b->blas);
    if (b->stream)
        cudaStreamDestroy(b->stream);
    (void)cudaGetLastError();
    free(b);
}

static int host_alloc(cuda_backend *b, void **p, size_t bytes, const char *what)
{
    if (cudaMallocHost(p, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        *p = NULL;
        return host.errf(b->e, b->elen, CAIRN_ENOMEM,
                         "cannot allocate %zu bytes of pinned host memory for %s", bytes, what);
    }
    return 0;
}

/* everything but the weights */
static int setup(cuda_backend *b)
{
    const cairn__model *m = b->base.model;
    const size_t nb = (size_t)b->n_batch, es = DT_SIZE[b->dt];
    const size_t kv = (size_t)m->n_layers * (size_t)b->base.n_ctx * (size_t)b->kv_dim * kv_elem(b);
    int rc;
    CU(b, cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    BL(b, cublasCreate(&b->blas), "cublasCreate");
    BL(b, cublasSetStream(b->blas, b->stream), "cublasSetStream");
    /* no TF32 for the f32 path; f16/bf16 products accumulate in f32 by the compute type */
    BL(b, cublasSetMathMode(b->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    if ((rc = dmalloc(b, &b->workspace, WORKSPACE_BYTES, "the cuBLAS workspace")))
        return rc;
    BL(b, cublasSetWorkspace(b->blas, b->workspace, WORKSPACE_BYTES), "cublasSetWorkspace");
    if ((rc = dmalloc(b, (void **)&b->kc, kv, "the key cache")) ||
        (rc = dmalloc(b, (void **)&b->vc, kv, "the value cache")) ||
        (rc = dmalloc(b, (void **)&b->x, nb * (size_t)m->dim * sizeof(float), "activations")) ||
        (rc = dmalloc(b, &b->xn, nb * (size_t)m->dim * es, "activations")) ||
        (rc = dmalloc(b, (void **)&b->qkv, nb * (size_t)b->qkv_dim * sizeof(float),
                      "activations")) ||
        (rc = dmalloc(b, &b->att, nb * (size_t)b->q_dim * es, "activations")) ||
        (rc = dmalloc(b, (void **)&b->gu, nb * 2 * (size_t)m->ff_dim * sizeof(float),
                      "activations")) ||
        (rc = dmalloc(b, &b->hb, nb * (size_t)m->ff_dim * es, "activations")) ||
        (rc = dmalloc(b, (void **)&b->logits, nb * (size_t)m->n_vocab * sizeof(float), "logits")) ||
        (rc = dmalloc(b, (void **)&b->inv_freq, (size_t)(m->rope_dim / 2 + 1) * sizeof(float),
                      "rope")) ||
        (rc = dmalloc(b, (void **)&b->rope_cs,
                      nb * (size_t)(m->rope_dim / 2 + 1) * 2 * sizeof(float), "rope")) ||
        (rc = dmalloc(b, (void **)&b->d_tokens, nb * sizeof(int), "tokens")) ||
        (rc = dmalloc(b, (void **)&b->d_pos, sizeof(int), "position")) ||
        (rc = dmalloc(b, (void **)&b->d_overflow, sizeof(int), "flags")) ||
        (rc = dmalloc(b, (void **)&b->att_part,
                      (size_t)m->n_heads * (size_t)att_splits(m->n_heads) *
                          (size_t)(2 + m->head_dim) * sizeof(float),
                      "attention splits")) ||
        (rc = dmalloc(b, (void **)&b->att_count, (size_t)m->n_heads * sizeof(int),
                      "attention splits")))
        return rc;
    if ((rc = host_alloc(b, (void **)&b->h_tokens, nb * sizeof(int), "tokens")) ||
        (rc = host_alloc(b, (void **)&b->h_pos, sizeof(int), "the position")) ||
        (rc = host_alloc(b, (void **)&b->h_logits, (size_t)m->n_vocab * sizeof(float), "logits")) ||
        (rc = host_alloc(b, (void **)&b->h_sin, sizeof(sample_in), "sampling parameters")) ||
        (rc = host_alloc(b, (void **)&b->h_next, sizeof(int), "the sampled token")) ||
        (rc = host_alloc(b, (void **)&b->h_overflow, sizeof(int), "flags")))
        return rc;
    /* the device sampler: its scratch is sized once, for the vocabulary, so that a captured
     * step allocates nothing */
    const size_t nvk = (size_t)m->n_vocab * sizeof(uint64_t);
    CU(b,
       cub::DeviceRadixSort::SortKeysDescending(NULL, b->sort_temp_bytes, (const uint64_t *)NULL,
                                                (uint64_t *)NULL, m->n_vocab, 32, 64, b->stream),
       "cub::DeviceRadixSort (scratch size)");
    if ((rc = dmalloc(b, (void **)&b->d_sin, sizeof(sample_in), "sampling parameters")) ||
        (rc = dmalloc(b, (void **)&b->d_next, sizeof(int), "the sampled token")) ||
        (rc = dmalloc(b, (void **)&b->keys, nvk, "sort keys")) ||
        (rc = dmalloc(b, (void **)&b->keys_sorted, nvk, "sort keys")) ||
        (rc = dmalloc(b, (void **)&b->weights, (size_t)m->n_vocab * sizeof(double),
                      "sampling weights")) ||
        (rc = dmalloc(b, &b->sort_temp, b->sort_temp_bytes, "the sort's scratch")))
        return rc;
    memset(b->h_sin, 0, sizeof(sample_in));
    if (b->prof) {
        b->prof_ev = (cudaEvent_t *)calloc(PROF_MAX, sizeof *b->prof_ev);
        b->prof_at = (const char **)calloc(PROF_MAX, sizeof *b->prof_at);
        if (!b->prof_ev || !b->prof_at)
            return host.errf(b->e, b->elen, CAIRN_ENOMEM, "out of memory");
        for (int i = 0; i < PROF_MAX; i++)
            CU(b, cudaEventCreate(&b->prof_ev[i]), "cudaEventCreate (profile)");
    }
    /* never read before written, but a cache of zeros makes any indexing bug reproducible */
    CU(b, cudaMemset(b->kc, 0, kv), "cudaMemset");
    CU(b, cudaMemset(b->vc, 0, kv), "cudaMemset");
    CU(b, cudaMemset(b->d_overflow, 0, sizeof(int)), "cudaMemset");
    CU(b, cudaMemset(b->att_count, 0, (size_t)m->n_heads * sizeof(int)), "cudaMemset");
    /* theta_i = pos * base^(-2i/rope_dim) / rope_freqs[i] (Llama 3's factors, when the file has
     * them): the CPU backend's table, computed the same way */
    float inv[ATT_MAX_HD / 2 + 1]; /* rope_dim <= head_dim <= ATT_MAX_HD (checked at create) */
    const int half = m->rope_dim / 2;
    if (half > (int)(sizeof inv / sizeof *inv))
        return host.errf(b->e, b->elen, CAIRN_EUNSUPPORTED, "rope dimension %d is too large",
                         m->rope_dim);
    for (int i = 0; i < half; i++)
        inv[i] = (float)(pow((double)m->rope_base, -2.0 * i / (double)m->rope_dim) /
                         (m->rope_freqs ? (double)m->rope_freqs[i] : 1.0));
    if (half > 0)
        CU(b, cudaMemcpy(b->inv_freq, inv, (size_t)half * sizeof(float), cudaMemcpyHostToDevice),
           "cudaMemcpy (rope)");
    b->layers = (dlayer *)calloc((size_t)m->n_layers, sizeof *b->layers);
    if (!b->layers)
        return host.errf(b->e, b->elen, CAIRN_ENOMEM, "out of memory");
    return 0;
}

/* The single-token product's launch limits: shared memory for the longest input it stages
 * (dim, q_dim or ff elements of T, and its segment sums), and the grid of each split that is
 * resident at once. Without the shared memory (an f32 model of very wide layers) the products
 * stay cuBLAS's. */
template <typename T> static int gemv_setup_t(cuda_backend *b)
{
    const cairn__model *m = b->base.model;
    int cols = m->dim > b->q_dim ? m->dim : b->q_dim;
    if (m->ff_dim > cols)
        cols = m->ff_dim;
    const size_t smem = gv_smem_bytes(cols, (int)sizeof(T));
    int optin = 0, sms = 0;
    CU(b, cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, b->device),
       "cudaDeviceGetAttribute");
    CU(b, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, b->device),
       "cudaDeviceGetAttribute");
#define GV_VARIANTS(S)                                                                             \
    (const void *)gemv_kernel<T, GV_PLAIN, GV_Y, S>,                                               \
        (const void *)gemv_kernel<T, GV_NORM, GV_Y, S>,                                            \
        (const void *)gemv_kernel<T, GV_NORM, GV_QKV, S>,                                          \
        (const void *)gemv_kernel<T, GV_NORM, GV_GLU, S>
    const void *k[] = {GV_VARIANTS(1), GV_VARIANTS(2), GV_VARIANTS(4), GV_VARIANTS(8)};
#undef GV_VARIANTS
    int per_sm[GV_SPLITS] = {0};
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        /* the cap is the kernel's, shared by every backend of the process: set it to what the
         * device allows, the same value each time, never to this model's need (a backend for a
         * smaller model created later would lower it under this one) */
        const size_t si = i / 4; /* the split's four variants share its grid */
        cudaFuncAttributes fa;
        CU(b, cudaFuncGetAttributes(&fa, k[i]), "cudaFuncGetAttributes (gemv)");
        if (smem + fa.sharedSizeBytes > (size_t)optin) { /* the input does not fit: cuBLAS */
            b->gv = b->pdl = 0;
            return 0;
        }
        CU(b,
           cudaFuncSetAttribute(k[i], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                optin - (int)fa.sharedSizeBytes),
           "cudaFuncSetAttribute (gemv)");
        int nb = 0;
        CU(b, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k[i], CK_THREADS, smem),
           "cudaOccupancyMaxActiveBlocksPerMultiprocessor (gemv)");
        if (i % 4 == 0 || nb < per_sm[si])
            per_sm[si] = nb;
    }
    for (int si = 0; si < GV_SPLITS; si++)
        b->gv_blocks[si] = (per_sm[si] > 0 ? per_sm[si] : 1) * (sms > 0 ? sms : 1);
    for (int p = 0; p < GVP_N; p++)
        b->gv_sk[p] = b->gv_force ? b->gv_force : 1;
    return 0;
}

/* The rows and input columns of product p (enum gv_prod) */
static int gv_rows(const cuda_backend *b, int p)
{
    const cairn__model *m = b->base.model;
    return p == GVP_QKV   ? b->qkv_dim
           : p == GVP_GU  ? 2 * m->ff_dim
           : p == GVP_OUT ? m->n_vocab
                          : m->dim;
}
static int gv_cols(const cuda_backend *b, int p)
{
    const cairn__model *m = b->base.model;
    return p == GVP_WO ? b->q_dim : p == GVP_DOWN ? m->ff_dim : m->dim;
}

/* Keeps the stream busy for about `cycles` clock cycles (one thread): gv_tune queues its timed
 * launches behind it, so that they run back to back on the device and the host's launch rate
 * takes no part in their times. A wait, not a computation: no CPU reference. */
__global__ void spin_kernel(long long cycles)
{
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

/* Each decode product's split, timed (CAIRN_CUDA_GV_SPLIT unset or auto). Every split computes
 * the same bits (gemv_kernel's order depends on the row length only), so this picks a speed,
 * never a result. For each product, GV_TUNE_ROUNDS rounds (after one to warm up) queue behind
 * a spin kernel, for each split in turn, GV_TUNE_REPS launches as the decode step launches them,
 * each on the next layer's matrix (so that the weights come from memory, not from L2), between
 * two events; a split's time is its best round, and a larger split must beat the best smaller
 * one by 2 %. A split of more warps than the row has segments leaves some idle and is not tried.
 * Inputs are zeros; what the products write (x, att, hb, the position and the rope angles are
 * zeroed before and after; q, every layer's key and value at position 0 and the logits are written
 * again before any step reads them) changes nothing a forward pass computes. About 2 ms a
 * product and round: tens of milliseconds at load. */
#define GV_TUNE_REPS 10
#define GV_TUNE_ROUNDS 3
#define GV_TUNE_SPIN_MS 2
template <typename T> static int gv_tune_t(cuda_backend *b)
{
    const cairn__model *m = b->base.model;
    cudaEvent_t ev[2 * GV_SPLITS] = {};
    int rc = 0, khz = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, b->device) != cudaSuccess || khz <= 0) {
        (void)cudaGetLastError(); /* the spin's length only: assume 2 GHz */
        khz = 2000000;
    }
    for (int i = 0; i < 2 * GV_SPLITS && !rc; i++)
        if (cudaEventCreate(&ev[i]) != cudaSuccess)
            rc = cuda_err(b->e, b->elen, cudaGetLastError(), "cudaEventCreate (gemv tuning)");
    const struct {
        void *p;
        size_t bytes;
    } zero[] = {{b->x, (size_t)m->dim * sizeof(float)},
                {b->att, (size_t)b->q_dim * sizeof(T)},
                {b->hb, (size_t)m->ff_dim * sizeof(T)},
                {b->d_pos, sizeof(int)},
                {b->rope_cs, (size_t)(m->rope_dim / 2 + 1) * 2 * sizeof(float)}};
    for (size_t i = 0; i < sizeof zero / sizeof *zero && !rc; i++)
        if (cudaMemsetAsync(zero[i].p, 0, zero[i].bytes, b->stream) != cudaSuccess)
            rc = cuda_err(b->e, b->elen, cudaGetLastError(), "cudaMemsetAsync (gemv tuning)");
    for (int p = 0; p < GVP_N && !rc; p++) {
        const int segs = gv_segs(gv_cols(b, p), (int)sizeof(T));
        for (int r = 0; r <= GV_TUNE_ROUNDS && !rc; r++) { /* round 0 warms up */
            spin_kernel<<<1, 1, 0, b->stream>>>((long long)khz * GV_TUNE_SPIN_MS);
            cudaError_t e = cudaGetLastError();
            int last = 0;
            for (int sk = 1; sk <= GV_WARPS && sk <= segs && !rc && e == cudaSuccess; sk *= 2) {
                b->gv_sk[p] = sk;
                last = gv_split_index(sk);
                e = cudaEventRecord(ev[2 * last], b->stream);
                for (int i = 0; i < GV_TUNE_REPS && !rc && e == cudaSuccess; i++)
                    rc = layer_product<T>(b, p, i % m->n_layers, 1, 1);
                if (!rc && e == cudaSuccess)
                    e = cudaEventRecord(ev[2 * last + 1], b->stream);
            }
            if (!rc && e == cudaSuccess)
                e = cudaEventSynchronize(ev[2 * last + 1]);
            for (int si = 0; si <= last && !rc && e == cudaSuccess && r > 0; si++) {
                float ms = 0.0f;
                e = cudaEventElapsedTime(&ms, ev[2 * si], ev[2 * si + 1]);
                const float us = 1e3f * ms / GV_TUNE_REPS;
                if (e == cudaSuccess && (b->gv_us[p][si] == 0.0f || us < b->gv_us[p][si]))
                    b->gv_us[p][si] = us;
            }
            if (!rc && e != cudaSuccess)
                rc = cuda_err(b->e, b->elen, e, "gemv tuning");
        }
        int best = 1;
        for (int sk = 2; sk <= GV_WARPS && sk <= segs; sk *= 2)
            if (b->gv_us[p][gv_split_index(sk)] < 0.98f * b->gv_us[p][gv_split_index(best)])
                best = sk;
        b->gv_sk[p] = best;
    }
    for (size_t i = 0; i < sizeof zero / sizeof *zero && !rc; i++)
        if (cudaMemsetAsync(zero[i].p, 0, zero[i].bytes, b->stream) != cudaSuccess)
            rc = cuda_err(b->e, b->elen, cudaGetLastError(), "cudaMemsetAsync (gemv tuning)");
    for (int i = 0; i < 2 * GV_SPLITS; i++)
        if (ev[i])
            cudaEventDestroy(ev[i]);
    if (!rc && b->prof) { /* the profile shows what was measured */
        fprintf(stderr, "cuda gemv splits, timed at load (us a product, * chosen; weights read "
                        "at the chosen one's speed):\n");
        for (int p = 0; p < GVP_N; p++) {
            const double bytes = (double)gv_rows(b, p) * gv_cols(b, p) * sizeof(T);
            fprintf(stderr, "  %-17s %7.1f MB", GVP_NAME[p], bytes / 1e6);
            for (int si = 0; si < GV_SPLITS; si++)
                if (b->gv_us[p][si] > 0.0f)
                    fprintf(stderr, "  split %d %8.2f%s", 1 << si, b->gv_us[p][si],
                            gv_split_index(b->gv_sk[p]) == si ? "*" : " ");
            fprintf(stderr, "  %6.0f GB/s\n",
                    bytes / (1e3 * b->gv_us[p][gv_split_index(b->gv_sk[p])]));
        }
    }
    return rc;
}

/* The timed splits (gv_tune_t), or, when the timing cannot run, split 1 everywhere: slower
 * perhaps, the same bits. A launch refused with programmatic dependent launch is retried without
 * it (as decode_step does); a fault that leaves the device unusable is an error. The range flag
 * is cleared afterwards: the products ran on zeros, not on the model's activations. */
static int gv_tune(cuda_backend *b)
{
    if (!b->gv || b->gv_force)
        return 0;
    for (int attempt = 0;; attempt++) {
        memset(b->gv_us, 0, sizeof b->gv_us);
        const int rc = by_dtype(b, [&](auto t) { return gv_tune_t<decltype(t)>(b); });
        (void)cudaGetLastError();
        const cudaError_t e = cudaStreamSynchronize(b->stream);
        if (e != cudaSuccess)
            return cuda_err(b->e, b->elen, e, "gemv tuning");
        if (!rc)
            break;
        if (attempt == 0 && b->pdl) {
            snprintf(b->pdl_err, sizeof b->pdl_err,
                     "graph, without programmatic dependent launch (refused when timing the "
                     "decode products): %s",
                     b->e);
            b->e[0] = '\0';
            b->pdl = 0;
            continue;
        }
        b->e[0] = '\0';
        for (int p = 0; p < GVP_N; p++)
            b->gv_sk[p] = 1;
        memset(b->gv_us, 0, sizeof b->gv_us);
        break;
    }
    CU(b, cudaMemset(b->d_overflow, 0, sizeof(int)), "cudaMemset");
    return 0;
}

static int gemv_setup(cuda_backend *b)
{
    if (!b->gv)
        return 0;
    return by_dtype(b, [&](auto t) { return gemv_setup_t<decltype(t)>(b); });
}

/* device type when CAIRN_CUDA_DTYPE does not say: f32 only for an all-F32 model */
static int default_dtype(const cairn__model *m)
{
    const cairn__mat *ms[] = {&m->tok_embd, &m->output};
    for (size_t i = 0; i < sizeof ms / sizeof *ms; i++)
        if (ms[i]->type != CAIRN__GGML_F32)
            return DT_F16;
    for (int l = 0; l < m->n_layers; l++) {
        const cairn__layer *ly = &m->layers[l];
        const cairn__mat *w[] = {&ly->wq,     &ly->wk,   &ly->wv,    &ly->wo,
                                 &ly->w_gate, &ly->w_up, &ly->w_down};
        for (size_t i = 0; i < sizeof w / sizeof *w; i++)
            if (w[i]->type != CAIRN__GGML_F32)
                return DT_F16;
    }
    return DT_F32;
}

static int create_as(const cairn__model *m, const cairn__backend_opts *o, int device, int dt,
                     int gv, int gv_force, int pdl, cairn__backend **out, int *overflow, char *err,
                     size_t errlen)
{
    *overflow = 0;
    cuda_backend *b = (cuda_backend *)calloc(1, sizeof *b);
    if (!b)
        return host.errf(err, errlen, CAIRN_ENOMEM, "out of memory");
    b->base.ops = &cairn__backend_cuda_ops;
    b->base.model = m;
    b->base.n_ctx = o->n_ctx > 0 ? o->n_ctx : (m->n_ctx_train < 4096 ? m->n_ctx_train : 4096);
    b->device = device;
    b->cache_f16 = o->cache_type == CAIRN__CACHE_F16;
    b->dt = dt;
    b->gv = gv;
    b->gv_force = gv_force;
    b->pdl = gv && pdl;
    b->n_batch = o->n_batch > 0 ? o->n_batch : 256;
    if (b->n_batch > MAX_BATCH)
        b->n_batch = MAX_BATCH;
    if (b->n_batch > b->base.n_ctx)
        b->n_batch = b->base.n_ctx;
    b->q_dim = m->n_heads * m->head_dim;
    b->kv_dim = m->n_kv_heads * m->head_dim;
    b->qkv_dim = b->q_dim + 2 * b->kv_dim;
    b->qkv_items = (m->n_heads + m->n_kv_heads) * (m->head_dim / 2) + b->kv_dim / 2;
    b->qkv_blocks = grid_for((size_t)b->qkv_items) < 64 ? grid_for((size_t)b->qkv_items) : 64;
    b->e = err;
    b->elen = errlen;
    b->prof_n = -1;
    const char *pe = getenv("CAIRN_CUDA_PROFILE");
    if (pe && *pe && strcmp(pe, "0") != 0) {
        b->prof = 1;
        b->no_graph = 1; /* events between the operations: run them as launched */
        snprintf(b->graph_err, sizeof b->graph_err, "eager: CAIRN_CUDA_PROFILE is set");
    }
    int rc = setup(b);
    if (!rc)
        rc = gemv_setup(b);
    if (!rc)
        rc = upload_weights(b);
    if (!rc) {
        int flag = 0;
        cudaError_t e = cudaMemcpy(&flag, b->d_overflow, sizeof flag, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess)
            rc = cuda_err(err, errlen, e, "weight upload");
        else if (flag) {
            *overflow = 1;
            rc = host.errf(err, errlen, CAIRN_EUNSUPPORTED, "a weight is beyond the range of f16");
        }
    }
    if (!rc) { /* pageable-memory copies may still be in flight: finish before the stream starts */
        cudaError_t e = cudaDeviceSynchronize();
        if (e != cudaSuccess)
            rc = cuda_err(err, errlen, e, "weight upload");
    }
    if (!rc)
        rc = gv_tune(b);
    if (rc) {
        cuda_destroy(&b->base);
        return rc;
    }
    b->e = b->base.err;
    b->elen = sizeof b->base.err;
    *out = &b->base;
    return 0;
}

static int cuda_create(const cairn__model *m, const cairn__backend_opts *o, cairn__backend **out,
                       char *err, size_t errlen)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return host.errf(err, errlen, CAIRN_ENODEVICE, "no CUDA device: %s (%s)",
                         cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (count <= 0)
        return host.errf(err, errlen, CAIRN_ENODEVICE, "no CUDA device: none found");
    if (o->device < 0 || o->device >= count)
        return host.errf(err, errlen, CAIRN_ENODEVICE,
                         "no CUDA device: device %d requested, %d present", o->device, count);
    if ((e = cudaSetDevice(o->device)) != cudaSuccess)
        return cuda_err(err, errlen, e, "cudaSetDevice");
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, o->device)) != cudaSuccess)
        return cuda_err(err, errlen, e, "cudaGetDeviceProperties");
    if (prop.major < 8)
        return host.errf(
            err, errlen, CAIRN_ENODEVICE,
            "no CUDA device: %s has compute capability %d.%d, this build needs 8.0 or newer",
            prop.name, prop.major, prop.minor);
    if (m->head_dim > ATT_MAX_HD)
        return host.errf(err, errlen, CAIRN_EUNSUPPORTED,
                         "head dimension %d exceeds the CUDA backend's %d", m->head_dim,
                         ATT_MAX_HD);
    int dt = default_dtype(m);
    const char *env = getenv("CAIRN_CUDA_DTYPE");
    if (env && *env) {
        if (strcmp(env, "f16") == 0)
            dt = DT_F16;
        else if (strcmp(env, "bf16") == 0)
            dt = DT_BF16;
        else if (strcmp(env, "f32") == 0)
            dt = DT_F32;
        else
            return host.errf(err, errlen, CAIRN_EINVAL,
                             "CAIRN_CUDA_DTYPE='%s': expected f16, bf16 or f32", env);
    }
    int gv = 1;
    env = getenv("CAIRN_CUDA_GEMV");
    if (env && *env) {
        if (strcmp(env, "kernel") == 0)
            gv = 1;
        else if (strcmp(env, "cublas") == 0)
            gv = 0;
        else
            return host.errf(err, errlen, CAIRN_EINVAL,
                             "CAIRN_CUDA_GEMV='%s': expected kernel or cublas", env);
    }
    /* every decode product's split (gemv_kernel), instead of the timed choice (gv_tune): for
     * the benchmark's sweep and the tests */
    int gv_force = 0;
    env = getenv("CAIRN_CUDA_GV_SPLIT");
    if (env && *env) {
        if (strcmp(env, "1") == 0 || strcmp(env, "2") == 0 || strcmp(env, "4") == 0 ||
            strcmp(env, "8") == 0)
            gv_force = atoi(env);
        else if (strcmp(env, "auto") != 0)
            return host.errf(err, errlen, CAIRN_EINVAL,
                             "CAIRN_CUDA_GV_SPLIT='%s': expected auto, 1, 2, 4 or 8", env);
    }
    /* programmatic dependent launches: 9.x only (the module's sm_90 code has the waits, its
     * compute_80 PTX, which other GPUs compile, does not) */
    int pdl = prop.major == 9;
    env = getenv("CAIRN_CUDA_PDL");
    if (env && *env) {
        if (strcmp(env, "0") == 0)
            pdl = 0;
        else if (strcmp(env, "1") != 0)
            return host.errf(err, errlen, CAIRN_EINVAL, "CAIRN_CUDA_PDL='%s': expected 0 or 1",
                             env);
    }
    int overflow = 0;
    int rc = create_as(m, o, o->device, dt, gv, gv_force, pdl, out, &overflow, err, errlen);
    if (rc && overflow) /* f16 cannot hold this model: bf16 can */
        rc = create_as(m, o, o->device, DT_BF16, gv, gv_force, pdl, out, &overflow, err, errlen);
    return rc;
}

/* ==== diagnostics, for the gpu test and the benchmark
 * ============================================== */

static int cuda_bandwidth(int device, double *bytes_per_s, char *name, size_t name_len, char *err,
                          size_t errlen)
{
    *bytes_per_s = 0;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= device || device < 0) {
        (void)cudaGetLastError();
        return host.errf(err, errlen, CAIRN_ENODEVICE, "no CUDA device: %s",
                         e != cudaSuccess ? cudaGetErrorString(e) : "none at that index");
    }
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(device)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess)
        return cuda_err(err, errlen, e, "device query");
    if (name && name_len)
        snprintf(name, name_len, "%s", prop.name);
    /* 2 x 2 GiB: far beyond any L2, so every byte crosses HBM (read once, written once) */
    const size_t n = (size_t)2 << 30;
    void *a = NULL, *c = NULL;
    cudaEvent_t t0 = NULL, t1 = NULL;
    float best = 0.0f;
    int rc = 0;
    if ((e = cudaMalloc(&a, n)) != cudaSuccess || (e = cudaMalloc(&c, n)) != cudaSuccess) {
        rc = e == cudaErrorMemoryAllocation
                 ? host.errf(err, errlen, CAIRN_ENOMEM,
                             "out of device memory allocating 2 x %zu bytes", n)
                 : cuda_err(err, errlen, e, "cudaMalloc");
        goto out;
    }
    if ((e = cudaMemset(a, 1, n)) != cudaSuccess || (e = cudaMemset(c, 2, n)) != cudaSuccess ||
        (e = cudaEventCreate(&t0)) != cudaSuccess || (e = cudaEventCreate(&t1)) != cudaSuccess) {
        rc = cuda_err(err, errlen, e, "bandwidth setup");
        goto out;
    }
    for (int rep = 0; rep < 12; rep++) { /* the first two are warm-up */
        float ms = 0.0f;
        if ((e = cudaEventRecord(t0, 0)) != cudaSuccess ||
            (e = cudaMemcpyAsync(c, a, n, cudaMemcpyDeviceToDevice, 0)) != cudaSuccess ||
            (e = cudaEventRecord(t1, 0)) != cudaSuccess ||
            (e = cudaEventSynchronize(t1)) != cudaSuccess ||
            (e = cudaEventElapsedTime(&ms, t0, t1)) != cudaSuccess) {
            rc = cuda_err(err, errlen, e, "device-to-device copy");
            goto out;
        }
        if (rep >= 2 && ms > 0.0f && (best == 0.0f || ms < best))
            best = ms;
    }
    *bytes_per_s = best > 0.0f ? 2.0 * (double)n / ((double)best * 1e-3) : 0.0;
out:
    if (t0)
        cudaEventDestroy(t0);
    if (t1)
        cudaEventDestroy(t1);
    cudaFree(a);
    cudaFree(c);
    (void)cudaGetLastError();
    return rc;
}

static uint64_t cuda_weight_bytes(const cairn__backend *b)
{
    return b && b->ops == &cairn__backend_cuda_ops ? ((const cuda_backend *)b)->weight_bytes : 0;
}

static const char *cuda_dtype(const cairn__backend *b)
{
    return b && b->ops == &cairn__backend_cuda_ops ? DT_NAME[((const cuda_backend *)b)->dt]
                                                   : "none";
}

static const char *cuda_graph_status(const cairn__backend *bb)
{
    if (!bb || bb->ops != &cairn__backend_cuda_ops)
        return "none";
    const cuda_backend *b = (const cuda_backend *)bb;
    if (b->no_graph)
        return b->graph_err;
    if (b->pdl_err[0])
        return b->pdl_err;
    for (int k = 0; k < STEP_KINDS; k++)
        if (b->graphs[k])
            return "graph";
    return "not yet";
}

const cairn__backend_ops cairn__backend_cuda_ops = {.name = "cuda",
                                                    .create = cuda_create,
                                                    .forward = cuda_forward,
                                                    .destroy = cuda_destroy,
                                                    .forward_sample = cuda_forward_sample};

/* ==== the entry point
 * ============================================================================== */

const cairn__cuda_plugin *cairn_cuda_plugin(uint32_t abi, const cairn__cuda_host *h)
{
    static cairn__cuda_plugin table; /* filled on every call: the same values each time */
    table.abi = CAIRN__CUDA_PLUGIN_ABI;
    table.layout = cairn__cuda_plugin_layout();
    /* h's own layout is known only when abi matches: check that first */
    if (abi != CAIRN__CUDA_PLUGIN_ABI || !h || h->layout != table.layout || !h->dequant_row ||
        !h->errf) {
        table.ops = NULL;
        return &table;
    }
    host = *h;
    table.ops = &cairn__backend_cuda_ops;
    table.bandwidth = cuda_bandwidth;
    table.weight_bytes = cuda_weight_bytes;
    table.dtype = cuda_dtype;
    table.graph_status = cuda_graph_status;
    table.sample_logits = cuda_sample_logits;
    return &table;
}
