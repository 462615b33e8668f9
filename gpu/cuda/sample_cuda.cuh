/* gpu/cuda/sample_cuda.cuh - the device sampler: picks the next token from the logits without
 * copying them to the host. Included by backend_cuda.cu only.
 *
 * CPU reference: cairn__sampler_pick_runs (gpu/sampler.c), the host sampler's pick split the way
 * these kernels split it, built on the same inline functions (gpu/sample_core.h):
 *
 *   penalty_kernel   the repetition penalty on the distinct ids the host listed
 *   argmax_kernel    greedy (and top-k 1): the largest sort key
 *   keys_kernel      one 64-bit sort key per token, then cub::DeviceRadixSort (descending)
 *   weights_kernel   every sorted candidate's weight in double, once, over the whole grid
 *   finish_kernel    the first top_k, those of weight 0 cut, summed in one contiguous run per
 *                    thread; a block scan gives each run the sum before it; the top-p cut and
 *                    the draw are the first index whose running sum reaches its target
 *
 * The step's parameters (sample_in) live in device memory, copied from pinned host memory at
 * the start of each step, so one captured CUDA graph serves every step and every generation.
 * Every kernel here runs on one block except keys_kernel: the work per token is one pass over
 * the vocabulary (and a sort of it), small next to the weights a decode step reads.
 */
#ifndef CAIRN_GPU_SAMPLE_CUDA_CUH
#define CAIRN_GPU_SAMPLE_CUDA_CUH

#include <limits.h>
#include <stdint.h>

#include "gpu/sample_core.h"

#define SAMPLE_THREADS 1024 /* threads of the one-block kernels */
/* block_exclusive_scan and the warp reductions take whole warps */
static_assert(SAMPLE_THREADS % 32 == 0 && SAMPLE_THREADS <= 1024, "whole warps, one block");

/* one step's sampling parameters, in device memory (filled from cairn__sample_req) */
typedef struct {
    float temperature, top_p, penalty;
    int top_k;
    double r;
    int n_pen, pad_;
    int pen[CAIRN__SAMPLE_MAX_PEN];
} sample_in;

/* CPU reference: penalize (gpu/sampler.c). ids are distinct: no two threads touch one logit.
 * grid 1, block CK_THREADS */
__global__ void penalty_kernel(float *__restrict__ logits, const sample_in *__restrict__ in)
{
    for (int i = threadIdx.x; i < in->n_pen; i += blockDim.x) {
        const int t = in->pen[i];
        logits[t] = cairn__sample_penalize(logits[t], in->penalty);
    }
}

__device__ __forceinline__ uint64_t warp_max_u64(uint64_t v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const uint64_t w = __shfl_xor_sync(0xffffffffu, (unsigned long long)v, o);
        v = w > v ? w : v;
    }
    return v;
}

/* CPU reference: the greedy branch of cairn__sampler_pick_runs (the host's argmax by the same
 * order). logits (n) -> *next; grid 1, block SAMPLE_THREADS */
__global__ void __launch_bounds__(SAMPLE_THREADS)
    argmax_kernel(const float *__restrict__ logits, int n, int *__restrict__ next)
{
    __shared__ uint64_t part[SAMPLE_THREADS / 32];
    uint64_t best = 0; /* below every key: a key's low half is 0xffffffff - id > 0 */
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const uint64_t k = cairn__sample_key(logits[i], i);
        best = k > best ? k : best;
    }
    best = warp_max_u64(best);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = best;
    __syncthreads();
    if (threadIdx.x < 32) {
        best = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0;
        best = warp_max_u64(best);
        if (threadIdx.x == 0)
            *next = cairn__sample_key_id(best);
    }
}

/* CPU reference: the key loop of cairn__sampler_pick_runs. logits (n) -> keys (n); grid-stride */
__global__ void keys_kernel(const float *__restrict__ logits, int n, uint64_t *__restrict__ keys)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        keys[i] = cairn__sample_key(logits[i], i);
}

/* CPU reference: the weight loop of cairn__sampler_pick_runs. keys (n) sorted descending ->
 * w (n) = exp((logit - max) / t) in double, max the first key's logit; grid-stride (every
 * block reads keys[0] for max) */
__global__ void weights_kernel(const uint64_t *__restrict__ keys, int n,
                               const sample_in *__restrict__ in, double *__restrict__ w)
{
    const double max =
        cairn__sample_key_nan(keys[0]) ? 0.0 : (double)cairn__sample_key_logit(keys[0]);
    const double t = (double)in->temperature;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        w[i] = cairn__sample_weight(keys[i], max, t);
}

/* Exclusive prefix sum of v over the block in a fixed order (the same result every run);
 * *total gets the sum of all. blockDim.x a multiple of 32; once per kernel (its shared
 * memory is reused without a barrier at the end). */
__device__ double block_exclusive_scan(double v, double *total)
{
    __shared__ double warp_tot[32];
    __shared__ double all;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    double incl = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const double y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o)
            incl += y;
    }
    if (lane == 31)
        warp_tot[w] = incl;
    __syncthreads();
    if (threadIdx.x == 0) { /* nw <= 32 sums in a row: cheap, and plainly ordered */
        double run = 0.0;
        for (int i = 0; i < nw; i++) {
            const double t = warp_tot[i];
            warp_tot[i] = run;
            run += t;
        }
        all = run;
    }
    double ex = __shfl_up_sync(0xffffffffu, incl, 1); /* the sum before this lane, in its warp */
    if (lane == 0)
        ex = 0.0;
    __syncthreads();
    *total = all;
    return warp_tot[w] + ex;
}

/* CPU reference: the sampling branch of cairn__sampler_pick_runs, with one run per thread.
 * keys (n) sorted descending, w (n) their weights -> *next; grid 1, block SAMPLE_THREADS */
__global__ void __launch_bounds__(SAMPLE_THREADS)
    finish_kernel(const uint64_t *__restrict__ keys, const double *__restrict__ w, int n,
                  const sample_in *__restrict__ in, int *__restrict__ next)
{
    __shared__ int first;
    __shared__ double at_first;
    int k = in->top_k > 0 && in->top_k < n ? in->top_k : n;
    /* the candidates that weigh 0 (NaN, -inf, underflow) are a tail of the order: cut it unless
     * nothing else is left (see cairn__sampler_pick_runs) */
    if (threadIdx.x == 0)
        first = INT_MAX;
    __syncthreads();
    /* each thread's first zero, its loads CAIRN__SAMPLE_AHEAD at a time (see sample_core.h) */
    for (int i0 = threadIdx.x; i0 < k; i0 += blockDim.x * CAIRN__SAMPLE_AHEAD) {
        double v[CAIRN__SAMPLE_AHEAD];
#pragma unroll
        for (int u = 0; u < CAIRN__SAMPLE_AHEAD; u++) {
            const int i = i0 + u * (int)blockDim.x;
            v[u] = i < k ? w[i] : 1.0;
        }
        int z = -1;
#pragma unroll
        for (int u = CAIRN__SAMPLE_AHEAD - 1; u >= 0; u--)
            if (v[u] == 0.0)
                z = i0 + u * (int)blockDim.x;
        if (z >= 0) {
            atomicMin(&first, z);
            break;
        }
    }
    __syncthreads();
    if (first < k)
        k = first > 1 ? first : 1;
    const int len = (k + (int)blockDim.x - 1) / (int)blockDim.x;
    const int lo = min((int)threadIdx.x * len, k), hi = min(lo + len, k);
    double total;
    const double before = block_exclusive_scan(cairn__sample_run_sum(w, lo, hi), &total);
    int keep = k;
    if (in->top_p < 1.0f) {
        __syncthreads(); /* every thread has read `first` above */
        if (threadIdx.x == 0)
            first = INT_MAX;
        __syncthreads();
        double at = 0.0;
        const int i = cairn__sample_run_find(w, lo, hi, before, (double)in->top_p * total, 1, &at);
        if (i >= 0)
            atomicMin(&first, i);
        __syncthreads();
        if (i >= 0 && i == first)
            at_first = at;
        __syncthreads();
        if (first != INT_MAX) {
            keep = first + 1;
            total = at_first;
        }
    }
    const double u = in->r * total;
    __syncthreads(); /* every thread has read `first` and `at_first` */
    if (threadIdx.x == 0)
        first = INT_MAX;
    __syncthreads();
    double at = 0.0;
    const int i = cairn__sample_run_find(w, min(lo, keep), min(hi, keep), before, u, 0, &at);
    if (i >= 0)
        atomicMin(&first, i);
    __syncthreads();
    if (threadIdx.x == 0)
        *next = cairn__sample_key_id(keys[first != INT_MAX ? first : keep - 1]);
}

#endif
