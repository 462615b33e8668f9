/* gpu/cuda/kernels_common.cuh - what every CUDA kernel of the forward pass builds on: the block
 * size of the row kernels, element conversions, programmatic dependent launch, reductions.
 * Included by the kernel headers beside it, which hold the kernels by op family (everything but
 * the matrix products, which are cuBLAS's or gemv_kernel's):
 *   kernels_elt.cuh        embedding, RMSNorm, SwiGLU, the weights' conversion at upload
 *   kernels_rope.cuh       the rope angle table; bias, rope and the KV cache after Q/K/V
 *   kernels_attention.cuh  attention: a single token's split over the keys (over the positional
 *                          cache or a paged pool's block tables), a prompt's tiles
 *   kernels_gemv.cuh       the decode matrix-vector product and its fused prologue/epilogues;
 *                          the batched product of several sequences' decode steps
 * and by backend_cuda.cu, the one translation unit of the CUDA module. tests/gpu/emu/gen.py
 * copies parts of these files verbatim to run them on a CPU emulator (its rules name the text
 * they rewrite: a change here may need one there).
 *
 * The rules they all follow:
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
#ifndef CAIRN_GPU_CUDA_KERNELS_COMMON_CUH
#define CAIRN_GPU_CUDA_KERNELS_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define CK_THREADS 256 /* threads per block of the row kernels */

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
 * launched as programmatic dependents (backend_ops.cuh, launch()): a kernel may start while the
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

/* Elements a thread loads at once in the loops over a row (embed_kernel, rmsnorm_row,
 * gemv_kernel's prologues): thread t takes elements t, t + B, t + 2B, ... (B = blockDim.x) in
 * batches of ROW_U, every load of a batch issued before the first is used. A loop that loaded one
 * element, used it and went on waited a whole memory latency per element (56 of them for
 * Llama-3-8B's 14336-wide SwiGLU input), which on an H200 cost the small decode products as much
 * time as their weights. The order in which a thread's elements are used is the same either
 * way. */
#define ROW_U 8

#endif /* CAIRN_GPU_CUDA_KERNELS_COMMON_CUH */
