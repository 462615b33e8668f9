/* gpu/cuda/kernels_rope.cuh - rotary position embedding: the angle table of a step's positions
 * (rope_table_kernel), and the step after the Q/K/V product that adds the bias, rotates q and k
 * and stores k and v into the KV cache (qkv_post_kernel; its per-item store is shared with the
 * fused decode product, kernels_gemv.cuh, so both write the same bits).
 */
#ifndef CAIRN_GPU_CUDA_KERNELS_ROPE_CUH
#define CAIRN_GPU_CUDA_KERNELS_ROPE_CUH

#include <stddef.h>

#include "gpu/cuda/kernels_common.cuh"

/* position p's row of the angle table, csr (half, 2), by the block */
__device__ __forceinline__ void rope_row(int p, const float *__restrict__ inv_freq, int half,
                                         float *__restrict__ csr)
{
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
        const double th = (double)p * (double)inv_freq[j];
        csr[(size_t)j * 2] = (float)cos(th);
        csr[(size_t)j * 2 + 1] = (float)sin(th);
    }
}

/* CPU reference: the rope angle table of forward_chunk (gpu/cpu/backend_cpu.c), once per step for
 * all layers and heads: cs (n, half, 2) = cos, sin of (*pos + i) * inv_freq[j], computed in
 * double and rounded to float as the CPU does. grid (n), block 128 */
__global__ void rope_table_kernel(const int *__restrict__ pos, const float *__restrict__ inv_freq,
                                  int half, float *__restrict__ cs)
{
    pdl_launch_dependents(); /* the first Q/K/V product may start (and wait for this one) */
    const int i = blockIdx.x;
    rope_row(*pos + i, inv_freq, half, cs + (size_t)i * half * 2);
}

/* the same for the decode steps of a batch of sequences: row i for position pos[i] (the same
 * bits as rope_table_kernel's row for that position). grid (n), block 128 */
__global__ void rope_table_seqs_kernel(const int *__restrict__ pos,
                                       const float *__restrict__ inv_freq, int half,
                                       float *__restrict__ cs)
{
    const int i = blockIdx.x;
    rope_row(pos[i], inv_freq, half, cs + (size_t)i * half * 2);
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

/* The decode steps of a batch over the paged pool (gpu/batch.c): row i of qkv is one
 * sequence's token, its rope angles row i of a.cs (rope_table_seqs_kernel), and its k and v
 * go to row rows[i] of this layer's pool a.kc, a.vc (n_blocks * 16 rows: the row of its
 * position in its block). Each row is exactly qkv_post_kernel's one-token row (i 0): a.pos is
 * pointed at rows[i], which qkv_item_store uses only to place the k and v, so the stored
 * values are the same bits. grid (n, any) */
__global__ void qkv_post_paged_kernel(float *__restrict__ qkv, int ld, qkv_args a,
                                      const int *__restrict__ rows)
{
    const int i = blockIdx.x, items = qkv_items(a);
    float *row = qkv + (size_t)i * (size_t)ld;
    qkv_args ai = a;
    ai.pos = rows + i;
    ai.cs = a.cs + (size_t)i * (size_t)(a.rope_dim / 2) * 2;
    const int stride = (int)(gridDim.y * blockDim.x);
    for (int it = (int)(blockIdx.y * blockDim.x + threadIdx.x); it < items; it += stride) {
        int ea, ez;
        qkv_item_elems(ai, it, &ea, &ez);
        qkv_item_store(ai, it, ea, ez, row[ea], row[ez], row, 0);
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

/* ---- per-head q/k RMSNorm (qwen3, gemma3) ----------------------------------------------------
 *
 * CPU reference: add_bias then qk_norm in forward_chunk (gpu/cpu/backend_cpu.c). Token i's row of
 * the Q/K/V product gets its bias (if any); then each q head and each k head (hd elements) is
 * RMS-normalized in place with the layer's weights qn, kn (hd each, shared by the heads), before
 * rope: cairn__rmsnorm's arithmetic, squares of the floats summed in double, scale =
 * (float)(1 / sqrt(ss / hd + eps)), then x * scale * w rounded at each product. The bias is
 * added here, for v too, so qkv_post_kernel or qkv_post_paged_kernel runs after it with none:
 * the fused decode epilogue (GV_QKV), which rotates each pair as its product ends, cannot run
 * after a norm over the whole head, and such a layer's decode product stores its row (GV_Y).
 * grid (n, n_heads + n_kv, plus n_kv when there is a bias), block 32: one warp a head. */
__global__ void qk_norm_kernel(float *qkv, int ld, const float *bias, const float *qn,
                               const float *kn, int n_heads, int n_kv, int hd, float eps)
{
    const int h = (int)blockIdx.y;
    float *x = qkv + (size_t)blockIdx.x * (size_t)ld + (size_t)h * (size_t)hd;
    const float *bh = bias ? bias + (size_t)h * (size_t)hd : NULL;
    double ss = 0.0;
    for (int k = (int)threadIdx.x; k < hd; k += 32) {
        float v = x[k];
        if (bh) {
            v = __fadd_rn(v, bh[k]);
            x[k] = v;
        }
        ss += (double)v * (double)v;
    }
    if (h >= n_heads + n_kv) /* a v head: its bias only (the whole block returns) */
        return;
    ss = warp_sum(ss);
    const float scale = (float)(1.0 / sqrt(ss / (double)hd + (double)eps));
    const float *w = h < n_heads ? qn : kn;
    for (int k = (int)threadIdx.x; k < hd; k += 32)
        x[k] = __fmul_rn(__fmul_rn(x[k], scale), w[k]);
}

#endif /* CAIRN_GPU_CUDA_KERNELS_ROPE_CUH */
