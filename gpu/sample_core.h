/* gpu/sample_core.h - the arithmetic the device sampler shares with its C reference.
 *
 * The host sampler (gpu/sampler.c) orders candidates by (logit descending, NaN last, id
 * ascending). The device sampler (gpu/cuda/sample_cuda.cuh) sorts 64-bit keys instead, one per
 * token, built so that sorting them in descending order is exactly that order:
 *
 *     key = ordered(logit) << 32 | (0xffffffff - id)
 *
 * where ordered() maps a float's bits to an unsigned integer in the same order as the values
 * (-0.0 first becomes +0.0, since the host compares them equal and breaks the tie by id), and
 * every NaN maps to 0, below -inf's 0x007fffff. So no two tokens share a key, the order is
 * total, and a radix sort reproduces the host's order bit for bit.
 *
 * After the sort, both sides weigh the candidates once, as exp((logit - max) / t) in double
 * (cairn__sample_weight, into an array), and walk the running sum of the first k; the device splits
 * the walk into one contiguous run per thread (a different summation order, so the cumulative sums
 * may differ in the last bits: a draw that lands within rounding of a boundary may pick the
 * neighbour, which the tests allow for). cairn__sampler_pick_runs in gpu/sampler.c is that split,
 * in plain C, checked against the host sampler on the CPU; the kernel follows it with these same
 * functions, except that it adds the runs' sums in a tree (a block scan) where the C version adds
 * them in a row, so the two also differ in the last bits (the same tolerance covers it).
 *
 * Everything here is inline, compiled as C11 by the program and as CUDA by the module.
 */
#ifndef CAIRN_GPU_SAMPLE_CORE_H
#define CAIRN_GPU_SAMPLE_CORE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define CAIRN__HD __host__ __device__ __forceinline__
#else
#define CAIRN__HD static inline
#endif

/* the most distinct penalized tokens the device sampler takes in one step (more: the host
 * samples that step) */
#define CAIRN__SAMPLE_MAX_PEN 1024

CAIRN__HD uint32_t cairn__sample_f32_bits(float v)
{
#ifdef __CUDA_ARCH__
    return (uint32_t)__float_as_uint(v);
#else
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
#endif
}

CAIRN__HD float cairn__sample_bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
#endif
}

/* the candidate's sort key: descending key order = the host sampler's candidate order */
CAIRN__HD uint64_t cairn__sample_key(float logit, int32_t id)
{
    uint32_t hi;
    if (logit != logit)
        hi = 0; /* NaN: after everything, -inf included */
    else {
        const uint32_t b = cairn__sample_f32_bits(logit == 0.0f ? 0.0f : logit); /* -0 -> +0 */
        hi = (b & 0x80000000u) ? ~b : b | 0x80000000u;
    }
    return (uint64_t)hi << 32 | (uint64_t)(0xffffffffu - (uint32_t)id);
}

CAIRN__HD int32_t cairn__sample_key_id(uint64_t key)
{
    return (int32_t)(0xffffffffu - (uint32_t)key);
}

CAIRN__HD int cairn__sample_key_nan(uint64_t key) { return (key >> 32) == 0; }

/* the logit a key was made from (NaN for NaN; +0.0 for either zero) */
CAIRN__HD float cairn__sample_key_logit(uint64_t key)
{
    const uint32_t hi = (uint32_t)(key >> 32);
    if (hi == 0)
        return cairn__sample_bits_f32(0x7fc00000u);
    return cairn__sample_bits_f32((hi & 0x80000000u) ? hi & 0x7fffffffu : ~hi);
}

/* the repetition penalty of one logit, as the host's penalize() */
CAIRN__HD float cairn__sample_penalize(float logit, float penalty)
{
    return logit > 0.0f ? logit / penalty : logit * penalty;
}

/* The unnormalized probability of a logit, the largest being max: exp((logit - max) / t) in
 * double; 0 for NaN. When max is infinite (a +inf logit, or nothing but -inf ones) the tokens
 * whose logit is max share the mass equally (weight 1) and the others get none: the formula
 * would give NaN (inf - inf). The host's pick and the device's use this same function. */
CAIRN__HD double cairn__sample_weight_of(float logit, double max, double t)
{
    if (logit != logit)
        return 0.0;
    if (isinf(max))
        return (double)logit == max ? 1.0 : 0.0;
    return exp(((double)logit - max) / t);
}

/* the same for a sort key */
CAIRN__HD double cairn__sample_weight(uint64_t key, double max, double t)
{
    return cairn__sample_key_nan(key)
               ? 0.0
               : cairn__sample_weight_of(cairn__sample_key_logit(key), max, t);
}

/* The walks below read CAIRN__SAMPLE_AHEAD weights before adding them, in the same order as a
 * plain loop would (so the same sums to the bit): on the device each thread walks a long stretch
 * of memory that no other thread of its warp shares, and a loop that waits for each load before
 * the next (the early return stops the compiler from running ahead) spends the step on latency. */
#define CAIRN__SAMPLE_AHEAD 8

/* Sum of the weights w[lo..hi), in index order from 0. */
CAIRN__HD double cairn__sample_run_sum(const double *w, int lo, int hi)
{
    double s = 0.0;
    for (int i = lo; i < hi; i += CAIRN__SAMPLE_AHEAD) {
        double v[CAIRN__SAMPLE_AHEAD];
        const int m = hi - i < CAIRN__SAMPLE_AHEAD ? hi - i : CAIRN__SAMPLE_AHEAD;
        for (int u = 0; u < CAIRN__SAMPLE_AHEAD; u++)
            v[u] = u < m ? w[i + u] : 0.0;
        for (int u = 0; u < m; u++)
            s += v[u];
    }
    return s;
}

/* Walks w[lo..hi) adding weights to the running sum cum (the sum of everything before lo).
 * Returns the first index whose running sum reaches target (cum >= target when inclusive, else
 * cum > target) and sets *at to that sum; -1 when none does. */
CAIRN__HD int cairn__sample_run_find(const double *w, int lo, int hi, double cum, double target,
                                     int inclusive, double *at)
{
    for (int i = lo; i < hi; i += CAIRN__SAMPLE_AHEAD) {
        double v[CAIRN__SAMPLE_AHEAD];
        const int m = hi - i < CAIRN__SAMPLE_AHEAD ? hi - i : CAIRN__SAMPLE_AHEAD;
        for (int u = 0; u < CAIRN__SAMPLE_AHEAD; u++)
            v[u] = u < m ? w[i + u] : 0.0;
        for (int u = 0; u < m; u++) {
            cum += v[u];
            if (inclusive ? cum >= target : cum > target) {
                *at = cum;
                return i + u;
            }
        }
    }
    return -1;
}

#endif
