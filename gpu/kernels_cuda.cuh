/* gpu/kernels_cuda.cuh - the CUDA kernels of the forward pass (everything but the matrix
 * products, which are cuBLAS's). Included by backend_cuda.cu only.
 *
 * Each kernel names its plain C reference in the CPU backend (gpu/cpu/backend_cpu.c,
 * gpu/cpu/kernels_cpu.c) and follows it operation for operation where that is cheap: RMSNorm sums
 * squares in double, rope angles are computed in double and rounded to float, and the rope and
 * norm products use __fmul_rn/__fadd_rn so nvcc cannot contract them into FMAs that the CPU
 * (compiled without FMA contraction) does not do. What differs is summation order (the attention
 * dot products and softmax are per-warp online sums) and the half-precision rounding of the
 * matrix-product inputs, which is what the tests' tolerances are for.
 *
 * T is the element type of the weights and of every matrix-product input: float, __half or
 * __nv_bfloat16. The residual stream, the Q/K/V projections, the KV cache and the logits are
 * always f32.
 *
 * Positions are read from device memory (*pos), never passed by value, so a CUDA graph
 * captured once replays for every decode step.
 */
#ifndef CAIRN_GPU_KERNELS_CUDA_CUH
#define CAIRN_GPU_KERNELS_CUDA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define CK_THREADS 256 /* threads per block of the row kernels */
#define ATT_DECODE_WARPS                                                                           \
    8 /* warps a block of a single token's attention (80 registers: 3 blocks an SM) */
#define ATT_DECODE_U 4 /* keys a decode warp loads at once */
#define ATT_MAX_HD 256 /* largest head dimension the attention kernel holds in registers */

/* ---- element conversions --------------------------------------------------------------------- */

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
/* round to nearest even, as cairn__f32_to_f16 / cairn__f32_to_bf16 */
template <> __device__ __forceinline__ __half from_f32<__half>(float v)
{
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}

/* v rounded to T, flagging (*ovf = 1) a finite v that T cannot hold: only __half's range is
 * narrower than float's by much (|v| >= 65520). Every writer stores the same value: no atomic. */
template <typename T> __device__ __forceinline__ T to_t_checked(float v, int *ovf)
{
    const T r = from_f32<T>(v);
    if (isinf(to_f32(r)) && isfinite(v))
        *ovf = 1;
    return r;
}

/* ---- programmatic dependent launch -----------------------------------------------------------
 *
 * On compute capability 9.x the decode chain's kernels (gemv_kernel, attention_split_kernel) are
 * launched as programmatic dependents (backend_cuda.cu, launch()): a kernel may start while the
 * one before it drains, so the gap between two kernels is not spent idle. Such a kernel must
 * call pdl_wait(), which returns when the kernel before it has completed and its writes are
 * visible, before it reads anything an earlier kernel wrote and before it writes anything;
 * what comes before the wait may only touch the weights (constant) and the parameters. Each
 * also calls pdl_launch_dependents() first thing, letting the next one start once all its
 * blocks run. Launched the ordinary way, both are no-ops. The compute_80 PTX of the module
 * (JIT-compiled for other GPUs) has neither, which is why the host enables this on 9.x only. */
__device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* ---- reductions -------------------------------------------------------------------------------
 */

template <typename A> __device__ __forceinline__ A warp_sum(A v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it. */
template <typename A> __device__ A block_sum(A v)
{
    __shared__ A part[32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* part may still be read by a previous call */
    if (lane == 0)
        part[w] = v;
    __syncthreads();
    A s = 0;
    for (int i = 0; i < nw; i++) /* the same order in every thread: all get the same sum */
        s += part[i];
    return s;
}

/* ---- kernels ----------------------------------------------------------------------------------
 */

/* Elements a thread loads at once in the loops over a row (embed_kernel, rmsnorm_row,
 * gemv_kernel's prologues): thread t takes elements t, t + B, t + 2B, ... (B = blockDim.x) in
 * batches of ROW_U, every load of a batch issued before the first is used. A loop that loaded one
 * element, used it and went on waited a whole memory latency per element (56 of them for
 * Llama-3-8B's 14336-wide SwiGLU input), which on an H200 cost the small decode products as much
 * time as their weights. The order in which a thread's elements are used is the same either
 * way. */
#define ROW_U 8

/* CPU reference: cairn__mat_row (gpu/cpu/kernels_cpu.c), per token in forward_chunk.
 * emb (n_vocab, dim)[tokens[i]] -> x (n, dim); grid (n), block CK_THREADS */
template <typename T>
__global__ void embed_kernel(const T *__restrict__ emb, const int *__restrict__ tokens, int dim,
                             float *__restrict__ x)
{
    const T *r = emb + (size_t)tokens[blockIdx.x] * (size_t)dim;
    float *o = x + (size_t)blockIdx.x * (size_t)dim;
    const int B = blockDim.x;
    for (int k0 = threadIdx.x; k0 < dim; k0 += ROW_U * B) { /* in batches, as rmsnorm_row */
        float v[ROW_U];
#pragma unroll
        for (int j = 0; j < ROW_U; j++)
            v[j] = k0 + j * B < dim ? to_f32(r[k0 + j * B]) : 0.0f;
#pragma unroll
        for (int j = 0; j < ROW_U; j++)
            if (k0 + j * B < dim)
                o[k0 + j * B] = v[j];
    }
}

/* One row of rmsnorm_kernel by the whole block (every thread must call it): the fused decode
 * product (gemv_kernel) runs the same code with the same block size, so its normed input is
 * the same bit for bit. */
template <typename T>
__device__ void rmsnorm_row(const float *__restrict__ xr, const float *__restrict__ w, int dim,
                            float eps, T *__restrict__ o, int *__restrict__ ovf)
{
    const int B = blockDim.x;
    double ss = 0.0;
    for (int k0 = threadIdx.x; k0 < dim; k0 += ROW_U * B) {
        float v[ROW_U];
#pragma unroll
        for (int j = 0; j < ROW_U; j++)
            v[j] = k0 + j * B < dim ? xr[k0 + j * B] : 0.0f;
#pragma unroll
        for (int j = 0; j < ROW_U; j++)
            if (k0 + j * B < dim)
                ss += (double)v[j] * (double)v[j];
    }
    ss = block_sum(ss);
    const float scale = (float)(1.0 / sqrt(ss / (double)dim + (double)eps));
    for (int k0 = threadIdx.x; k0 < dim; k0 += ROW_U * B) {
        float v[ROW_U], wv[ROW_U];
#pragma unroll
        for (int j = 0; j < ROW_U; j++) {
            const bool in = k0 + j * B < dim;
            v[j] = in ? xr[k0 + j * B] : 0.0f;
            wv[j] = in ? w[k0 + j * B] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < ROW_U; j++)
            if (k0 + j * B < dim)
                o[k0 + j * B] = to_t_checked<T>(__fmul_rn(__fmul_rn(v[j], scale), wv[j]), ovf);
    }
}

/* CPU reference: cairn__rmsnorm (gpu/cpu/kernels_cpu.c): sum of squares in double, then
 * out = x * scale * w in that order.
 * x (rows, dim) f32, w (dim) -> out (rows, dim) T; grid (rows), block CK_THREADS */
template <typename T>
__global__ void rmsnorm_kernel(const float *__restrict__ x, const float *__restrict__ w, int dim,
                               float eps, T *__restrict__ out, int *__restrict__ ovf)
{
    rmsnorm_row<T>(x + (size_t)blockIdx.x * (size_t)dim, w, dim, eps,
                   out + (size_t)blockIdx.x * (size_t)dim, ovf);
}

/* CPU reference: the rope angle table of forward_chunk (gpu/cpu/backend_cpu.c), once per step for
 * all layers and heads: cs (n, half, 2) = cos, sin of (*pos + i) * inv_freq[j], computed in
 * double and rounded to float as the CPU does. grid (n), block 128 */
__global__ void rope_table_kernel(const int *__restrict__ pos, const float *__restrict__ inv_freq,
                                  int half, float *__restrict__ cs)
{
    pdl_launch_dependents(); /* the first Q/K/V product may start (and wait for this one) */
    const int i = blockIdx.x, p = *pos + i;
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
        const double th = (double)p * (double)inv_freq[j];
        cs[((size_t)i * half + j) * 2] = (float)cos(th);
        cs[((size_t)i * half + j) * 2 + 1] = (float)sin(th);
    }
}

/* ---- bias, rope and the KV cache ----------------------------------------------------------
 *
 * CPU reference: add_bias, rope and the two memcpy into the cache in forward_chunk
 * (gpu/cpu/backend_cpu.c). For token i at position p = *pos + i, its row of the Q/K/V product,
 * [q (n_heads*hd) | k (n_kv*hd) | v (n_kv*hd)] f32, gets the bias (if any); q is rotated in
 * place, k rotated into kc (n_ctx, n_kv*hd)[p], v copied into vc (n_ctx, n_kv*hd)[p]. Rotation:
 * NORMAL pairs (2j, 2j+1), NEOX pairs (j, j + rope_dim/2), for j < rope_dim/2, by the angle of
 * cs (rope_table_kernel); elements >= rope_dim pass through. A cache of halves (cache_f16) gets
 * each k and v rounded to nearest even (from_f32<__half>), as cairn__f32_to_f16_row does.
 *
 * The work is cut into items of two elements: first the rotation pairs of every q head and then
 * every k head (pass-through elements in adjacent twos), then the v elements in twos (head_dim
 * and rope_dim are even: the loader checks). qkv_post_kernel runs the items over the row a GEMM
 * wrote (prompt chunks); the fused decode product (gemv_kernel, OUT = GV_QKV) computes an item's
 * two rows in one warp and stores them through the same function, so both write the same
 * values from the same products. */
typedef struct {
    const float *bias; /* (q + 2 kv) or NULL */
    const int *pos;
    const float *cs; /* (n, rope_dim / 2, 2) */
    void *kc, *vc;   /* this layer's cache: floats, or __half when cache_f16 */
    int n_heads, n_kv, hd, rope_dim, neox, cache_f16;
} qkv_args;

/* x into element e of position p's row of a cache */
__device__ __forceinline__ void kv_put(float *row, int e, float x) { row[e] = x; }
__device__ __forceinline__ void kv_put(__half *row, int e, float x)
{
    row[e] = from_f32<__half>(x);
}
__device__ __forceinline__ void kv_store(const qkv_args &a, void *cache, int p, int e, float x)
{
    const size_t at = (size_t)p * (size_t)(a.n_kv * a.hd);
    if (a.cache_f16)
        kv_put((__half *)cache + at, e, x);
    else
        kv_put((float *)cache + at, e, x);
}

__device__ __forceinline__ int qkv_items(const qkv_args &a)
{
    return (a.n_heads + a.n_kv) * (a.hd / 2) + a.n_kv * a.hd / 2;
}

/* the row elements *ea, *ez of item it */
__device__ __forceinline__ void qkv_item_elems(const qkv_args &a, int it, int *ea, int *ez)
{
    const int hh = a.hd / 2, pairs = (a.n_heads + a.n_kv) * hh;
    if (it >= pairs) { /* v: two elements */
        *ea = (a.n_heads + a.n_kv) * a.hd + 2 * (it - pairs);
        *ez = *ea + 1;
        return;
    }
    const int h = it / hh, j = it % hh, off = h * a.hd, half = a.rope_dim / 2;
    if (j < half) {
        *ea = off + (a.neox ? j : 2 * j);
        *ez = off + (a.neox ? j + half : 2 * j + 1);
    } else {
        *ea = off + a.rope_dim + 2 * (j - half);
        *ez = *ea + 1;
    }
}

/* item it's two products x0 (element ea), x1 (ez) of token i: bias, rotation, then q into qrow
 * (the token's row) or k / v into the cache */
__device__ __forceinline__ void qkv_item_store(const qkv_args &a, int it, int ea, int ez, float x0,
                                               float x1, float *__restrict__ qrow, int i)
{
    const int q_dim = a.n_heads * a.hd, kv_dim = a.n_kv * a.hd, hh = a.hd / 2;
    const int pairs = (a.n_heads + a.n_kv) * hh, half = a.rope_dim / 2, p = *a.pos + i;
    if (a.bias) {
        x0 += a.bias[ea];
        x1 += a.bias[ez];
    }
    if (it >= pairs) {
        kv_store(a, a.vc, p, ea - q_dim - kv_dim, x0);
        kv_store(a, a.vc, p, ez - q_dim - kv_dim, x1);
        return;
    }
    const int j = it % hh;
    if (j < half) {
        const float *csr = a.cs + ((size_t)i * half + j) * 2;
        const float c = csr[0], s = csr[1];
        const float y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        const float y1 = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
        x0 = y0;
        x1 = y1;
    }
    if (ea < q_dim) {
        qrow[ea] = x0;
        qrow[ez] = x1;
    } else {
        kv_store(a, a.kc, p, ea - q_dim, x0);
        kv_store(a, a.kc, p, ez - q_dim, x1);
    }
}

/* qkv (n, ld) rows as above; grid (n, any): a token's items spread over blockIdx.y */
__global__ void qkv_post_kernel(float *__restrict__ qkv, int ld, qkv_args a)
{
    const int i = blockIdx.x, items = qkv_items(a);
    float *row = qkv + (size_t)i * (size_t)ld;
    const int stride = (int)(gridDim.y * blockDim.x);
    for (int it = (int)(blockIdx.y * blockDim.x + threadIdx.x); it < items; it += stride) {
        int ea, ez;
        qkv_item_elems(a, it, &ea, &ez);
        qkv_item_store(a, it, ea, ez, row[ea], row[ez], row, i);
    }
}

/* ---- attention ---------------------------------------------------------------------------
 *
 * CPU reference: attention_range (gpu/cpu/backend_cpu.c).
 * For token i (position *pos + i) and head h (kv head h / (n_heads / n_kv)):
 *   softmax(q_ih (hd) . K[0..*pos+i] (t, hd) * scale) @ V[0..*pos+i] (t, hd) -> out (n,
 * n_heads*hd)[i, h]; q is read from the rows of qkv (ld floats apart).
 *
 * att_block is the work of one block over keys [lo, hi): each warp runs an online softmax over
 * groups of U consecutive keys (warp w takes groups w, w + WARPS, ...), each lane holding hd/32
 * elements of q and of its running output. A group's K and V rows are all loaded before any of
 * its results is needed, so a warp has 2 * U rows in flight instead of waiting on one load after
 * another. The warps' partial results then meet in shared memory: the block's largest score M,
 * its sum L of exp(score - M) and its unnormalized output exp(score - M) @ V.
 *
 * attention_split_kernel (a single token): n_heads blocks alone would leave most of the GPU
 * idle while each waits on its keys one group after another, so the keys are split over
 * att_splits(n_heads) blocks per head (flash-decoding). Each block leaves its (M, L, output) in
 * part; the last block of a head to finish (a counter per head, which it resets) merges the
 * splits in order 0, 1, ... and writes the head's output. Every order is fixed, so a step
 * computes the same bits each time; the split count depends on the model only.
 * attention_tile_kernel (prompt chunks, below): a tile of tokens of one head a block, sharing
 * each key and value the cache gives among the tile's queries.
 * C is the cache's element type, float or __half (widened exactly as it is read: the float
 * arithmetic on the widened values, as on the CPU). hd <= ATT_MAX_HD */
/* blocks a single token's attention aims at, over all heads: one wave on an H100/H200 (132 SMs,
 * 3 blocks each) */
#define ATT_SPLIT_BLOCKS 256
#define ATT_MAX_SPLITS 16
static_assert(ATT_MAX_SPLITS <= 32, "the merge reads one split a lane of one warp");
__host__ __device__ __forceinline__ int att_splits(int n_heads)
{
    const int s = (ATT_SPLIT_BLOCKS + n_heads - 1) / n_heads;
    return s < 1 ? 1 : s > ATT_MAX_SPLITS ? ATT_MAX_SPLITS : s;
}

/* the block's shared memory for att_block */
template <int WARPS> struct att_smem {
    float m[WARPS], l[WARPS];
    float acc[WARPS][ATT_MAX_HD];
};

/* Keys [lo, hi) of head h against q: every thread gets the block's M and L; sm.acc[v] holds
 * warp v's output and sm.m[v] its largest score (merged by att_block_out). lo < hi. */
template <int WARPS, int U, typename C>
__device__ __forceinline__ void
att_block(const float *__restrict__ q, const C *__restrict__ K, const C *__restrict__ V, int kv_dim,
          int hd, float scale, int lo, int hi, att_smem<WARPS> &sm, float *M_out, float *L_out)
{
    constexpr int NK = ATT_MAX_HD / 32;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float qr[NK], acc[NK];
#pragma unroll
    for (int k = 0; k < NK; k++) {
        const int e = lane + 32 * k;
        qr[k] = e < hd ? q[e] : 0.0f;
        acc[k] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int t0 = lo + w * U; t0 < hi; t0 += WARPS * U) {
        float s[U], vv[U][NK];
#pragma unroll
        for (int u = 0; u < U; u++) {
            /* a key past the range is read from its last row (in bounds) and weighs 0 */
            const int t = t0 + u < hi ? t0 + u : hi - 1;
            const C *kr = K + (size_t)t * (size_t)kv_dim, *vr = V + (size_t)t * (size_t)kv_dim;
            float d = 0.0f;
#pragma unroll
            for (int k = 0; k < NK; k++) {
                const int e = lane + 32 * k;
                if (e < hd) {
                    d += qr[k] * to_f32(kr[e]);
                    vv[u][k] = to_f32(vr[e]);
                } else
                    vv[u][k] = 0.0f;
            }
            s[u] = d;
        }
        float mn = m;
#pragma unroll
        for (int u = 0; u < U; u++) {
            s[u] = t0 + u < hi ? warp_sum(s[u]) * scale : -INFINITY;
            mn = fmaxf(mn, s[u]);
        }
        const float corr = expf(m - mn); /* 0 for the first group (m = -inf; mn is finite) */
        float pr[U];
        l *= corr;
#pragma unroll
        for (int u = 0; u < U; u++) {
            pr[u] = expf(s[u] - mn); /* 0 for keys past the range */
            l += pr[u];
        }
#pragma unroll
        for (int k = 0; k < NK; k++) {
            float a = acc[k] * corr;
#pragma unroll
            for (int u = 0; u < U; u++)
                a += pr[u] * vv[u][k];
            acc[k] = a;
        }
        m = mn;
    }
    if (lane == 0) {
        sm.m[w] = m;
        sm.l[w] = l;
    }
#pragma unroll
    for (int k = 0; k < NK; k++) {
        const int e = lane + 32 * k;
        if (e < hd)
            sm.acc[w][e] = acc[k];
    }
    __syncthreads();
    /* warp 0 saw key lo, so M is finite; a warp that saw no key has m = -inf and contributes
     * exp(-inf) = 0 */
    float M = -INFINITY;
    for (int v = 0; v < WARPS; v++)
        M = fmaxf(M, sm.m[v]);
    float L = 0.0f;
    for (int v = 0; v < WARPS; v++)
        L += sm.l[v] * expf(sm.m[v] - M);
    *M_out = M;
    *L_out = L;
}

/* element e of the block's unnormalized output, after att_block */
template <int WARPS>
__device__ __forceinline__ float att_block_out(const att_smem<WARPS> &sm, float M, int e)
{
    float s = 0.0f;
    for (int v = 0; v < WARPS; v++)
        s += sm.acc[v][e] * expf(sm.m[v] - M);
    return s;
}

/* CPU reference: attention_range (gpu/cpu/backend_cpu.c), for a prompt chunk.
 * The prompt's attention, a tile of TQ consecutive tokens of one head per block (flash
 * attention on the CUDA cores): the block stages the tile's q rows once, then walks the keys in
 * chunks of KC, staging each chunk's K and V rows (widened to float) in shared memory, where
 * every query of the tile reads them: the cache is read once per tile rather than once per
 * token. Warp w takes the tile's queries w, w + ATT_TILE_WARPS, ...; for each, lane t scores
 * key c0 + t of the chunk (masked past the query's own position), the warp keeps the online
 * softmax's running max and sum, and lane l accumulates output elements l, l + 32, ... with each
 * key's weight taken from its lane by a shuffle. Rows of Qs and Ks are HDM + 1 floats apart so
 * that the 32 lanes reading 32 different keys' element e hit 32 different banks.
 * qkv (n, ld) rows [q | k | v], token i at position *pos + i; the cache holds positions up to
 * the chunk's last; out (n, n_heads * hd). grid (n_heads, ceil(n / TQ)), block ATT_TILE_WARPS *
 * 32; hd <= HDM, KC <= 32; shared memory (TQ + KC) (HDM + 1) + KC HDM floats (< 48 KB). */
#define ATT_TILE_WARPS 8
template <typename T, int TQ, int KC, int HDM, typename C>
__global__ void __launch_bounds__(ATT_TILE_WARPS * 32)
    attention_tile_kernel(const float *__restrict__ qkv, int ld, const C *__restrict__ kc,
                          const C *__restrict__ vc, const int *__restrict__ pos, int n, int n_heads,
                          int n_kv, int hd, float scale, T *__restrict__ out, int *__restrict__ ovf)
{
    static_assert(KC <= 32 && TQ % ATT_TILE_WARPS == 0 && HDM % 32 == 0, "tile shape");
    constexpr int QPW = TQ / ATT_TILE_WARPS, NE = HDM / 32; /* queries a warp, elements a lane */
    __shared__ float Qs[TQ][HDM + 1], Ks[KC][HDM + 1], Vs[KC][HDM];
    const int h = blockIdx.x, i0 = blockIdx.y * TQ, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int nq = n - i0 < TQ ? n - i0 : TQ, p0 = *pos + i0;
    const int kv_dim = n_kv * hd, kvh = h / (n_heads / n_kv), keys = p0 + nq;
    for (int j = threadIdx.x; j < nq * hd; j += blockDim.x)
        Qs[j / hd][j % hd] = qkv[(size_t)(i0 + j / hd) * (size_t)ld + (size_t)h * hd + j % hd];
    float m[QPW], l[QPW], o[QPW][NE];
#pragma unroll
    for (int a = 0; a < QPW; a++) {
        m[a] = -INFINITY;
        l[a] = 0.0f;
#pragma unroll
        for (int k = 0; k < NE; k++)
            o[a][k] = 0.0f;
    }
    for (int c0 = 0; c0 < keys; c0 += KC) {
        __syncthreads(); /* the chunk before is read by every warp (and Qs written, the first time)
                          */
        for (int j = threadIdx.x; j < KC * hd; j += blockDim.x) {
            const int t = j / hd, e = j % hd, key = c0 + t;
            const size_t at = (size_t)key * (size_t)kv_dim + (size_t)kvh * hd + e;
            Ks[t][e] = key < keys ? to_f32(kc[at]) : 0.0f;
            Vs[t][e] = key < keys ? to_f32(vc[at]) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int a = 0; a < QPW; a++) {
            const int q = w + a * ATT_TILE_WARPS, p = p0 + q; /* this query's position */
            if (q >= nq || c0 > p) /* warp-uniform: past the tile, or a chunk it does not see */
                continue;
            const int key = c0 + lane;
            float sc = -INFINITY;
            if (lane < KC && key <= p) {
                float d = 0.0f;
                for (int e = 0; e < hd; e++)
                    d += Qs[q][e] * Ks[lane][e];
                sc = d * scale;
            }
            float mc = sc;
#pragma unroll
            for (int off = 16; off > 0; off >>= 1)
                mc = fmaxf(mc, __shfl_xor_sync(0xffffffffu, mc, off));
            const float mn = fmaxf(m[a], mc);                       /* finite: key c0 <= p scored */
            const float corr = expf(m[a] - mn), pt = expf(sc - mn); /* 0 for masked keys */
            l[a] = l[a] * corr + warp_sum(pt);
#pragma unroll
            for (int k = 0; k < NE; k++)
                o[a][k] *= corr;
            for (int t = 0; t < KC; t++) {
                const float pw = __shfl_sync(0xffffffffu, pt, t);
#pragma unroll
                for (int k = 0; k < NE; k++)
                    if (lane + 32 * k < hd)
                        o[a][k] += pw * Vs[t][lane + 32 * k];
            }
            m[a] = mn;
        }
    }
#pragma unroll
    for (int a = 0; a < QPW; a++) {
        const int q = w + a * ATT_TILE_WARPS;
        if (q >= nq)
            continue;
        T *orow = out + (size_t)(i0 + q) * (size_t)n_heads * hd + (size_t)h * hd;
#pragma unroll
        for (int k = 0; k < NE; k++)
            if (lane + 32 * k < hd)
                orow[lane + 32 * k] = to_t_checked<T>(o[a][k] / l[a], ovf);
    }
}

/* One token (row 0 of qkv). part (n_heads, splits, 2 + hd): a split's M, L and unnormalized
 * output; count (n_heads): zero between launches. grid (n_heads, splits), splits <=
 * ATT_MAX_SPLITS (as att_splits gives), block WARPS * 32 */
template <typename T, int WARPS, int U, typename C>
__global__ void __launch_bounds__(WARPS * 32)
    attention_split_kernel(const float *__restrict__ qkv, const C *__restrict__ kc,
                           const C *__restrict__ vc, const int *__restrict__ pos, int n_heads,
                           int n_kv, int hd, float scale, float *__restrict__ part,
                           int *__restrict__ count, T *__restrict__ out, int *__restrict__ ovf)
{
    __shared__ att_smem<WARPS> sm;
    __shared__ int is_last;
    pdl_launch_dependents();
    pdl_wait(); /* q and the cache come from the kernel before */
    const int h = blockIdx.x, sp = blockIdx.y, splits = gridDim.y, keys = *pos + 1;
    const int kv_dim = n_kv * hd, kvh = h / (n_heads / n_kv);
    const int len = (keys + splits - 1) / splits, lo = sp * len;
    const int hi = lo + len < keys ? lo + len : keys;
    float *mine = part + ((size_t)h * splits + sp) * (size_t)(2 + hd);
    if (lo < hi) {
        float M, L;
        att_block<WARPS, U>(qkv + (size_t)h * hd, kc + (size_t)kvh * hd, vc + (size_t)kvh * hd,
                            kv_dim, hd, scale, lo, hi, sm, &M, &L);
        for (int e = threadIdx.x; e < hd; e += blockDim.x)
            mine[2 + e] = att_block_out(sm, M, e);
        if (threadIdx.x == 0) {
            mine[0] = M;
            mine[1] = L;
        }
    } else { /* no keys here (a short context): weighs nothing */
        for (int e = threadIdx.x; e < hd; e += blockDim.x)
            mine[2 + e] = 0.0f;
        if (threadIdx.x == 0) {
            mine[0] = -INFINITY;
            mine[1] = 0.0f;
        }
    }
    /* the last block of this head to get here merges: publish, then count */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        is_last = atomicAdd(&count[h], 1) == splits - 1;
    __syncthreads();
    if (!is_last)
        return; /* the whole block */
    __threadfence();
    /* each split's weight exp(M_v - M) (0 for an empty one) and share of L, read at once by
     * the first warp; then every thread adds them in split order */
    __shared__ float sw[ATT_MAX_SPLITS], sl[ATT_MAX_SPLITS];
    const float *ph = part + (size_t)h * splits * (size_t)(2 + hd);
    if (threadIdx.x < 32) {
        const int v = threadIdx.x;
        const float mv = v < splits ? __ldcg(ph + (size_t)v * (2 + hd)) : -INFINITY;
        const float lv = v < splits ? __ldcg(ph + (size_t)v * (2 + hd) + 1) : 0.0f;
        float M = mv; /* split 0 holds key 0: finite */
#pragma unroll
        for (int d = 16; d > 0; d >>= 1)
            M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, d));
        if (v < splits) {
            sw[v] = mv == -INFINITY ? 0.0f : expf(mv - M);
            sl[v] = lv * sw[v];
        }
    }
    __syncthreads();
    float L = 0.0f;
    for (int v = 0; v < splits; v++)
        L += sl[v];
    T *o = out + (size_t)h * hd;
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
        float s = 0.0f;
#pragma unroll
        for (int v = 0; v < ATT_MAX_SPLITS; v++)
            if (v < splits)
                s += __ldcg(ph + (size_t)v * (2 + hd) + 2 + e) * sw[v];
        o[e] = to_t_checked<T>(s / L, ovf);
    }
    if (threadIdx.x == 0)
        count[h] = 0; /* for the next step */
}

/* one element of swiglu_kernel, shared with the fused decode product (gemv_kernel) */
template <typename T> __device__ __forceinline__ T swiglu_elt(float g, float u, int *ovf)
{
    return to_t_checked<T>(g / (1.0f + expf(-g)) * u, ovf);
}

/* CPU reference: cairn__swiglu (gpu/cpu/kernels_cpu.c): g / (1 + exp(-g)) * u.
 * gu (n, 2*ff) rows [gate (ff) | up (ff)] f32 -> out (n, ff) T; grid-stride */
template <typename T>
__global__ void swiglu_kernel(const float *__restrict__ gu, int ff, int n, T *__restrict__ out,
                              int *__restrict__ ovf)
{
    const size_t total = (size_t)n * (size_t)ff;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const size_t i = idx / (size_t)ff, k = idx % (size_t)ff;
        out[idx] =
            swiglu_elt<T>(gu[i * 2 * (size_t)ff + k], gu[i * 2 * (size_t)ff + (size_t)ff + k], ovf);
    }
}

/* ---- the decode matrix-vector product -------------------------------------------------------
 *
 * A single token's products are matrix-vector products that read every weight once: their
 * speed is the memory's. cuBLAS serves them through its GEMM heuristics; this kernel is written
 * for exactly that case and folds in the small kernels around it, so a decode layer is five
 * launches instead of nine: rmsnorm + QKV + bias/rope/KV, attention, output, rmsnorm + gate/up +
 * SwiGLU, down. A prologue stages the input in shared memory as T:
 *   GV_PLAIN   in is T (cols): copied (the attention output before Wo, the SwiGLU before Wd);
 *   GV_NORM    in is the f32 residual x (cols): rmsnorm_row with weights nw, the code of
 *              rmsnorm_kernel at the same block size, so the same bits.
 *
 * The summation order. A row is cut into 16-byte pieces of V = 16 / sizeof(T) elements (the
 * last one zero-padded, in the staged input too) and the pieces into segments of GV_SEG = 32 *
 * GV_U. Lane l's sum of segment s is the chain over its pieces s GV_SEG + l + 32 u, u = 0 ..
 * GV_U - 1, each piece's products in element order (fmaf, in f32), starting from 0; the
 * segment's sum is warp_sum of the 32 lanes' (every lane gets the same bits); the row's sum is
 * 0 + seg 0 + seg 1 + ... in segment order. That order depends on the row's length only.
 *
 * The work. Each group of two rows is computed by SK warps of a block (SK = 1, 2, 4 or 8: the
 * split, a template parameter): warp `slice` of the group takes the slice-th of SK equal runs of
 * whole segments. With SK = 1 the warp adds its segment sums as it goes; otherwise each warp
 * leaves its segments' sums in shared memory and the group's first warp adds them all, in the
 * same order. So every split computes the same bits, and the host may pick whichever is
 * fastest on the device at hand (gv_tune in backend_cuda.cu times them): a matrix of few rows
 * (a layer's Q/K/V or down projection) has too few groups to keep the memory busy one warp a
 * group, and a split spreads each row over several. The grid takes no part either: every
 * decode step computes the same bits whatever the split and the number of blocks.
 *
 * A lane has GV_U pieces of each row in flight at once (a segment's loads are all issued before
 * their products are needed), and the warp sum of one segment is done after the loads of the
 * next are issued, while they are under way. `vec` says the rows can be read 16 bytes at a time
 * (cols a multiple of V and W 16-byte aligned); otherwise a piece is read element by element,
 * with the same sums. The epilogue, into out: GV_Y rows 2g, 2g+1 into y = W in (beta 0: y is not
 * read) or y = W in + beta y (beta 1: the residual), y = out (float); GV_QKV the two rows of qkv
 * item g (a rope pair, or two v elements; qkv_item_elems) through qkv_item_store, as
 * qkv_post_kernel stores them, out being the q row (float); GV_GLU rows g and rows / 2 + g (the
 * gate and up rows of the stacked gate/up matrix): out[g] = swiglu_elt(gate, up) in T, what
 * swiglu_kernel stores from GV_Y's output. The down product then reads its input as it is
 * (GV_PLAIN): the SwiGLU is computed once a token, not once in every block of the down product,
 * where it cost a third of the product's time on an H200.
 *
 * CPU reference: cairn__matvec (gpu/cpu/kernels_cpu.c) on the weights as the device holds them,
 * after cairn__rmsnorm, and before forward_chunk's bias/rope/cache steps or cairn__swiglu.
 * grid (any), block GV_WARPS * 32 = CK_THREADS, dynamic shared memory gv_smem_bytes(cols,
 * sizeof(T)); SK divides GV_WARPS */
#define GV_WARPS 8
#define GV_ROWS 2 /* rows a warp computes at once: a rope pair is one warp's */
/* 16-byte pieces of each row a lane has in flight. With 64 registers or fewer (every variant,
 * with nvcc 13 for sm_90) an SM holds 4 blocks; a compiler that needs more holds fewer
 * (__launch_bounds__ asking for 4 would make it spill instead): the host sizes each split's grid
 * from its own occupancy. */
#define GV_U 4
#define GV_SEG (32 * GV_U)          /* pieces a segment: the unit of the summation order */
enum { GV_PLAIN = 0, GV_NORM = 1 }; /* the prologue: what `in` is */
#define GV_SPLITS 4                 /* the splits: 1, 2, 4 and 8 warps a group */
__host__ __device__ constexpr int gv_split_index(int sk)
{
    return sk >= 8 ? 3 : sk >= 4 ? 2 : sk >= 2 ? 1 : 0;
}
enum { GV_Y = 0, GV_QKV = 1, GV_GLU = 2 }; /* the epilogue: where the rows go */
/* the row pairs of a product of rows rows (items: qkv_items, for GV_QKV) */
__host__ __device__ constexpr int gv_groups(int out, int rows, int items)
{
    return out == GV_QKV ? items : out == GV_GLU ? rows / 2 : (rows + 1) / 2;
}
static_assert(GV_WARPS * 32 == CK_THREADS,
              "the fused norm must run at rmsnorm_kernel's block size");
static_assert(GV_ROWS == 2, "a group is two rows: a qkv item");

/* a row of cols elements of elem bytes: its pieces and segments */
__host__ __device__ constexpr int gv_pieces(int cols, int elem)
{
    return (cols + 16 / elem - 1) / (16 / elem);
}
__host__ __device__ constexpr int gv_segs(int cols, int elem)
{
    return (gv_pieces(cols, elem) + GV_SEG - 1) / GV_SEG;
}
/* the dynamic shared memory: the staged input (whole pieces), then the segment sums of a
 * block's groups (at most GV_WARPS / 2 groups of two rows, when SK > 1) */
__host__ __device__ constexpr size_t gv_smem_bytes(int cols, int elem)
{
    return (size_t)gv_pieces(cols, elem) * 16 + (size_t)GV_WARPS * gv_segs(cols, elem) * 4;
}

/* acc + w . x over one 16-byte piece of each, in element order */
__device__ __forceinline__ float dot16(uint4 w, uint4 x, float acc, float)
{
    acc = fmaf(__uint_as_float(w.x), __uint_as_float(x.x), acc);
    acc = fmaf(__uint_as_float(w.y), __uint_as_float(x.y), acc);
    acc = fmaf(__uint_as_float(w.z), __uint_as_float(x.z), acc);
    return fmaf(__uint_as_float(w.w), __uint_as_float(x.w), acc);
}
__device__ __forceinline__ float2 to_f32x2(__half2 v) { return __half22float2(v); }
__device__ __forceinline__ float2 to_f32x2(__nv_bfloat162 v) { return __bfloat1622float2(v); }
/* the same for a piece of 16-bit pairs P (__half2, __nv_bfloat162) */
template <typename P> __device__ __forceinline__ float dot16_pairs(uint4 w, uint4 x, float acc)
{
    const P *a = (const P *)&w, *b = (const P *)&x;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 fa = to_f32x2(a[i]), fb = to_f32x2(b[i]);
        acc = fmaf(fa.x, fb.x, acc);
        acc = fmaf(fa.y, fb.y, acc);
    }
    return acc;
}
__device__ __forceinline__ float dot16(uint4 w, uint4 x, float acc, __half)
{
    return dot16_pairs<__half2>(w, x, acc);
}
__device__ __forceinline__ float dot16(uint4 w, uint4 x, float acc, __nv_bfloat16)
{
    return dot16_pairs<__nv_bfloat162>(w, x, acc);
}

/* piece c of the row wr (cols elements): one 16-byte load (vec), or element by element with
 * zeros past the row's end */
template <typename T>
__device__ __forceinline__ uint4 gv_piece(const T *__restrict__ wr, int c, int cols, int vec)
{
    if (vec)
        return __ldcs((const uint4 *)wr + c);
    constexpr int V = 16 / sizeof(T);
    uint4 u;
    T *t = (T *)&u;
#pragma unroll
    for (int k = 0; k < V; k++)
        t[k] = c * V + k < cols ? wr[c * V + k] : from_f32<T>(0.0f);
    return u;
}

/* the rows of group g: qkv item g's two elements, gate row g and its up row, or rows 2g and
 * 2g + 1 (2g again past the end: read, in bounds, and not stored) */
template <int OUT>
__device__ __forceinline__ void gv_group_rows(const qkv_args &qa, int rows, int g, int rr[GV_ROWS])
{
    if (OUT == GV_QKV)
        qkv_item_elems(qa, g, &rr[0], &rr[1]);
    else if (OUT == GV_GLU) {
        rr[0] = g;
        rr[1] = rows / 2 + g;
    } else {
        rr[0] = 2 * g;
        rr[1] = 2 * g + 1 < rows ? 2 * g + 1 : 2 * g;
    }
}

/* segment s's lane sums ls into the rows' sums: added to tot (SK 1), or left in part */
template <int SK>
__device__ __forceinline__ void gv_segment_done(float ls[GV_ROWS], float tot[GV_ROWS], float *part,
                                                int slot, int segs, int s)
{
#pragma unroll
    for (int r = 0; r < GV_ROWS; r++) {
        const float v = warp_sum(ls[r]);
        if (SK == 1)
            tot[r] += v;
        else if ((threadIdx.x & 31) == 0)
            part[(slot * GV_ROWS + r) * segs + s] = v;
    }
}

template <typename T, int IN, int OUT, int SK>
__global__ void __launch_bounds__(GV_WARPS * 32)
    gemv_kernel(const T *__restrict__ W, int rows, int cols, int vec, const void *__restrict__ in,
                const float *__restrict__ nw, float eps, float beta, void *__restrict__ out,
                int *__restrict__ ovf, qkv_args qa)
{
    extern __shared__ __align__(16) unsigned char gv_smem[];
    static_assert(GV_WARPS % SK == 0, "a block holds whole groups");
    constexpr int V = 16 / sizeof(T); /* elements per 16-byte piece */
    const int pieces = gv_pieces(cols, (int)sizeof(T)), segs = gv_segs(cols, (int)sizeof(T));
    T *xs = (T *)gv_smem;
    float *part = (float *)(gv_smem + (size_t)pieces * 16); /* [slot][row][segment], SK > 1 */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int groups = gv_groups(OUT, rows, OUT == GV_QKV ? qkv_items(qa) : 0);
    /* a block takes gpb groups at a time: warp w works on the slot-th, on its segments
     * [s_lo, s_hi) */
    const int gpb = GV_WARPS / SK, slot = w / SK, slice = w % SK;
    const int per = (segs + SK - 1) / SK, s_lo = slice * per;
    const int s_hi = s_lo + per < segs ? s_lo + per : segs;
    pdl_launch_dependents();
    /* The weights do not depend on the input: the pieces this lane reads first are sent for
     * (into L2) before the prologue, whose loads and barrier would otherwise delay them. */
    if (vec && s_lo < s_hi && (int)blockIdx.x * gpb + slot < groups) {
        int rr[GV_ROWS];
        gv_group_rows<OUT>(qa, rows, (int)blockIdx.x * gpb + slot, rr);
#pragma unroll
        for (int r = 0; r < GV_ROWS; r++)
#pragma unroll
            for (int u = 0; u < GV_U; u++)
                if (s_lo * GV_SEG + lane + 32 * u < pieces)
                    asm volatile("prefetch.global.L2 [%0];" ::"l"(
                        (const uint4 *)(W + (size_t)rr[r] * (size_t)cols) + s_lo * GV_SEG + lane +
                        32 * u));
    }
    pdl_wait(); /* from here on, the input and out: written by the kernels before */
    if (IN == GV_NORM)
        rmsnorm_row<T>((const float *)in, nw, cols, eps, xs, ovf);
    else if (cols % V == 0 && (uintptr_t)in % 16 == 0) { /* whole pieces, ROW_U at a time */
        const uint4 *src = (const uint4 *)in;
        uint4 *xp = (uint4 *)xs;
        const int B = blockDim.x;
        for (int k0 = threadIdx.x; k0 < pieces; k0 += ROW_U * B) {
            uint4 v[ROW_U];
#pragma unroll
            for (int j = 0; j < ROW_U; j++)
                v[j] = k0 + j * B < pieces ? src[k0 + j * B] : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int j = 0; j < ROW_U; j++)
                if (k0 + j * B < pieces)
                    xp[k0 + j * B] = v[j];
        }
    } else { /* element by element, in batches of ROW_U as rmsnorm_row */
        const T *src = (const T *)in;
        const int B = blockDim.x;
        for (int k0 = threadIdx.x; k0 < cols; k0 += ROW_U * B) {
            T v[ROW_U];
#pragma unroll
            for (int j = 0; j < ROW_U; j++)
                v[j] = k0 + j * B < cols ? src[k0 + j * B] : from_f32<T>(0.0f);
#pragma unroll
            for (int j = 0; j < ROW_U; j++)
                if (k0 + j * B < cols)
                    xs[k0 + j * B] = v[j];
        }
    }
    for (int k = cols + threadIdx.x; k < pieces * V; k += blockDim.x) /* the last piece's pad */
        xs[k] = from_f32<T>(0.0f);
    __syncthreads();

    /* g0 is the same in every warp of the block, so the barriers below are the whole block's */
    const uint4 *xv = (const uint4 *)xs;
    for (int g0 = blockIdx.x * gpb; g0 < groups; g0 += gridDim.x * gpb) {
        const int g = g0 + slot;
        int rr[GV_ROWS] = {0, 0};
        float tot[GV_ROWS] = {0.0f, 0.0f};
        float y0[GV_ROWS] = {0.0f, 0.0f}; /* the residual, read before the weights, not after */
        if (g < groups && s_lo < s_hi) {
            gv_group_rows<OUT>(qa, rows, g, rr);
            if (OUT == GV_Y && beta != 0.0f && lane == 0 && slice == 0)
#pragma unroll
                for (int r = 0; r < GV_ROWS; r++)
                    y0[r] = ((const float *)out)[rr[r]];
            const T *wr[GV_ROWS];
#pragma unroll
            for (int r = 0; r < GV_ROWS; r++)
                wr[r] = W + (size_t)rr[r] * (size_t)cols;
            float ls[GV_ROWS] = {0.0f, 0.0f}; /* the lane's sums of the segment before */
            for (int s = s_lo; s < s_hi; s++) {
                const int c0 = s * GV_SEG + lane;
                uint4 wv[GV_ROWS][GV_U];
#pragma unroll
                for (int u = 0; u < GV_U; u++)
#pragma unroll
                    for (int r = 0; r < GV_ROWS; r++)
                        wv[r][u] = c0 + 32 * u < pieces ? gv_piece(wr[r], c0 + 32 * u, cols, vec)
                                                        : make_uint4(0, 0, 0, 0);
                if (s > s_lo)
                    gv_segment_done<SK>(ls, tot, part, slot, segs, s - 1);
#pragma unroll
                for (int r = 0; r < GV_ROWS; r++)
                    ls[r] = 0.0f;
#pragma unroll
                for (int u = 0; u < GV_U; u++)
                    if (c0 + 32 * u < pieces) {
                        const uint4 x = xv[c0 + 32 * u];
#pragma unroll
                        for (int r = 0; r < GV_ROWS; r++)
                            ls[r] = dot16(wv[r][u], x, ls[r], T());
                    }
            }
            gv_segment_done<SK>(ls, tot, part, slot, segs, s_hi - 1);
        }
        if (SK > 1) { /* the group's segment sums, added in order by its first warp */
            __syncthreads();
            if (slice == 0 && lane == 0 && g < groups)
#pragma unroll
                for (int r = 0; r < GV_ROWS; r++) {
                    float t = 0.0f;
                    for (int s = 0; s < segs; s++)
                        t += part[(slot * GV_ROWS + r) * segs + s];
                    tot[r] = t;
                }
            __syncthreads(); /* part is written again in the next round */
        }
        if (lane == 0 && slice == 0 && g < groups) {
            float *y = (float *)out;
            if (OUT == GV_QKV)
                qkv_item_store(qa, g, rr[0], rr[1], tot[0], tot[1], y, 0);
            else if (OUT == GV_GLU)
                ((T *)out)[g] = swiglu_elt<T>(tot[0], tot[1], ovf);
            else
#pragma unroll
                for (int r = 0; r < GV_ROWS; r++)
                    if (r == 0 || 2 * g + 1 < rows) /* the last group of odd rows has one */
                        y[rr[r]] = beta != 0.0f ? tot[r] + beta * y0[r] : tot[r];
        }
    }
}

/* CPU reference: cairn__f32_to_f16 / cairn__f32_to_bf16 (gpu/quant.c), used at upload.
 * src (n) f32 -> dst (n) T; sets *overflow when a finite value rounds to infinity in T (only
 * possible for __half: |v| >= 65520). grid-stride */
template <typename T>
__global__ void convert_kernel(const float *__restrict__ src, T *__restrict__ dst, size_t n,
                               int *__restrict__ overflow)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += stride) {
        dst[idx] = to_t_checked<T>(src[idx], overflow);
    }
}

#endif
