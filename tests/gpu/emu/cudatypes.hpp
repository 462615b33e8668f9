// tests/gpu/emu/cudatypes.hpp - host stand-ins for the CUDA vector and half types and intrinsics
// that the gemv path of gpu/cuda/kernels_*.cuh uses: bit-exact IEEE conversions (round to nearest
// even, as __float2half_rn / __float2bfloat16_rn), plain C++ float arithmetic (built with
// -ffp-contract=off, so that only the kernel's own fmaf calls fuse), and __ldcs, which reports a
// misaligned 16-byte load where the GPU would fault.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include "emu.hpp"

struct uint4 {
    unsigned x, y, z, w;
};
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d)
{
    return uint4{a, b, c, d};
}
struct float2 {
    float x, y;
};

static inline uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t emu_f32_to_f16(float f)
{
    uint32_t x = f2u(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u)
        return 0x7fffu; // NaN: CUDA's canonical NaN
    if (x >= 0x477ff000u)
        return sign | 0x7c00u;         // >= 65520 (or inf): inf
    if (x < 0x38800000u) {             // below 2^-14: subnormal or zero
        const float a = u2f(x) + 0.5f; // ulp of 0.5 is 2^-24: the f16 subnormal step
        return sign | (uint16_t)(f2u(a) - f2u(0.5f));
    }
    const uint32_t odd = (x >> 13) & 1u;
    x += 0xc8000000u + 0xfffu + odd; // rebias (127 -> 15), round to nearest even
    return sign | (uint16_t)(x >> 13);
}
static inline float emu_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) {
        float v = std::ldexp((float)m, -24);
        return sign ? -v : v;
    }
    if (e == 31)
        return u2f(sign | 0x7f800000u | (m << 13));
    return u2f(sign | ((e + 112) << 23) | (m << 13));
}
static inline uint16_t emu_f32_to_bf16(float f)
{
    const uint32_t x = f2u(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return 0x7fffu;
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
static inline float emu_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

struct __half {
    uint16_t b;
};
struct __half2 {
    __half x, y;
};
struct __nv_bfloat16 {
    uint16_t b;
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};

static inline float __half2float(__half h) { return emu_f16_to_f32(h.b); }
static inline float __bfloat162float(__nv_bfloat16 h) { return emu_bf16_to_f32(h.b); }
static inline __half __float2half_rn(float f) { return __half{emu_f32_to_f16(f)}; }
static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    return __nv_bfloat16{emu_f32_to_bf16(f)};
}
static inline float2 __half22float2(__half2 h)
{
    return float2{__half2float(h.x), __half2float(h.y)};
}
static inline float2 __bfloat1622float2(__nv_bfloat162 h)
{
    return float2{__bfloat162float(h.x), __bfloat162float(h.y)};
}
static inline float __uint_as_float(unsigned u) { return u2f(u); }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
template <class P> static inline P __ldcs(const P *p)
{
    if ((uintptr_t)p % sizeof(P)) { // the GPU faults (misaligned address) on this
        char buf[160];
        snprintf(buf, sizeof buf, "%s: __ldcs of %zu bytes at misaligned global address %p",
                 emu_kernel, sizeof(P), (const void *)p);
        emu_report("GLOBAL-MISALIGNED", buf);
    }
    P v;
    memcpy(&v, p, sizeof v); // (a plain copy: the host tolerates the misalignment)
    return v;
}
// the attention kernels' global-memory synchronisation: blocks run one after another here, so an
// atomic is a plain update, a fence nothing, and a load that bypasses L1 a plain load
template <class P> static inline P __ldcg(const P *p) { return *p; }
static inline int atomicAdd(int *p, int v)
{
    const int old = *p;
    *p = old + v;
    return old;
}
static inline void __threadfence() {}
#define __restrict__
#define __align__(n)
