/* gpu/cuda/kernels_elt.cuh - the row and element-wise kernels of a layer: the embedding
 * lookup, RMSNorm (also the fused decode product's prologue, rmsnorm_row), SwiGLU (also its
 * epilogue, swiglu_elt), and the f32 -> f16/bf16 conversion of the weights at upload. Each is
 * bound by memory and follows its CPU reference operation for operation (kernels_common.cuh).
 */
#ifndef CAIRN_GPU_CUDA_KERNELS_ELT_CUH
#define CAIRN_GPU_CUDA_KERNELS_ELT_CUH

#include <stddef.h>

#include "gpu/cuda/kernels_common.cuh"

/* CPU reference: embed (gpu/cpu/backend_cpu.c: cairn__mat_row, then times embd_scale when it
 * is not 1: gemma's sqrt(dim)), per token in forward_chunk.
 * emb (n_vocab, dim)[tokens[i]] * scale -> x (n, dim); grid (n), block CK_THREADS */
template <typename T>
__global__ void embed_kernel(const T *__restrict__ emb, const int *__restrict__ tokens, int dim,
                             float scale, float *__restrict__ x)
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
                o[k0 + j * B] = scale != 1.0f ? __fmul_rn(v[j], scale) : v[j];
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

/* CPU reference: cairn__rmsnorm (gpu/cpu/kernels_cpu_elt.c): sum of squares in double, then
 * out = x * scale * w in that order.
 * x (rows, dim) f32, w (dim) -> out (rows, dim) T; grid (rows), block CK_THREADS */
template <typename T>
__global__ void rmsnorm_kernel(const float *__restrict__ x, const float *__restrict__ w, int dim,
                               float eps, T *__restrict__ out, int *__restrict__ ovf)
{
    rmsnorm_row<T>(x + (size_t)blockIdx.x * (size_t)dim, w, dim, eps,
                   out + (size_t)blockIdx.x * (size_t)dim, ovf);
}

/* one element of gated_kernel's SwiGLU, shared with the fused decode product (gemv_kernel) */
template <typename T> __device__ __forceinline__ T swiglu_elt(float g, float u, int *ovf)
{
    return to_t_checked<T>(g / (1.0f + expf(-g)) * u, ovf);
}

/* CPU reference: post_norm, then the residual add, in forward_chunk (gpu/cpu/backend_cpu.c):
 * gemma's norms after attention and after the feed-forward. Row i of y (n, dim), a product's
 * output, RMS-normalized with w as rmsnorm_row does it (squares summed in double, y * scale *
 * w), and added to row i of the residual x. grid (n), block CK_THREADS */
__global__ void post_norm_add_kernel(float *__restrict__ x, const float *__restrict__ y,
                                     const float *__restrict__ w, int dim, float eps)
{
    const float *yr = y + (size_t)blockIdx.x * (size_t)dim;
    float *xr = x + (size_t)blockIdx.x * (size_t)dim;
    double ss = 0.0;
    for (int k = threadIdx.x; k < dim; k += blockDim.x)
        ss += (double)yr[k] * (double)yr[k];
    ss = block_sum(ss);
    const float scale = (float)(1.0 / sqrt(ss / (double)dim + (double)eps));
    for (int k = threadIdx.x; k < dim; k += blockDim.x)
        xr[k] = __fadd_rn(xr[k], __fmul_rn(__fmul_rn(yr[k], scale), w[k]));
}

/* one element of gated_kernel's GELU: gated (gpu/cpu/backend_cpu.c) with gemma's GELU, in its
 * tanh form as ggml_gelu: 0.5 g (1 + tanh(0.7978845608 (g + 0.044715 g^3))) u, each product
 * rounded in the CPU's order (tanhf is the device's, within an ulp or two of the host's) */
template <typename T> __device__ __forceinline__ T geglu_elt(float g, float u, int *ovf)
{
    const float g3 = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, g), g), g);
    const float t = tanhf(__fmul_rn(0.7978845608f, __fadd_rn(g, g3)));
    return to_t_checked<T>(__fmul_rn(__fmul_rn(__fmul_rn(0.5f, g), __fadd_rn(1.0f, t)), u), ovf);
}

/* CPU reference: gated (gpu/cpu/backend_cpu.c): act(g) * u, act SiLU (cairn__swiglu,
 * gpu/cpu/kernels_cpu_elt.c: g / (1 + exp(-g)) * u) or, with GELU, gemma's (geglu_elt).
 * gu (n, 2*ff) rows [gate (ff) | up (ff)] f32 -> out (n, ff) T; grid-stride */
template <typename T, int GELU>
__global__ void gated_kernel(const float *__restrict__ gu, int ff, int n, T *__restrict__ out,
                             int *__restrict__ ovf)
{
    const size_t total = (size_t)n * (size_t)ff;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const size_t i = idx / (size_t)ff, k = idx % (size_t)ff;
        const float g = gu[i * 2 * (size_t)ff + k], u = gu[i * 2 * (size_t)ff + (size_t)ff + k];
        out[idx] = GELU ? geglu_elt<T>(g, u, ovf) : swiglu_elt<T>(g, u, ovf);
    }
}

/* CPU reference: cap_logits (gpu/cpu/backend_cpu.c): gemma2's final soft-capping, each of the
 * n logits to c * tanh(l / c) in place. grid-stride */
__global__ void softcap_kernel(float *__restrict__ lg, size_t n, float c)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride)
        lg[k] = __fmul_rn(c, tanhf(__fdiv_rn(lg[k], c)));
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

#endif /* CAIRN_GPU_CUDA_KERNELS_ELT_CUH */
