// tests/gpu/emu/emu.hpp - a cooperative-fiber emulation of one CUDA block at a time, enough to run
// a kernel's own text on the CPU: every thread is a fiber, __syncthreads a block barrier, warp
// shuffles warp collectives executed when all 32 lanes arrive; shared memory (static arrays, SHA,
// and the dynamic shared memory, emu_dyn) is an object whose every access is checked: a per-phase
// shadow finds races between barriers, reads of what the block never wrote, and accesses out of
// bounds or misaligned. Findings go to stderr once each (emu_report) and are counted.
#pragma once
#include <bitset>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>
#include <ucontext.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

struct emu_uint3 {
    unsigned x, y, z;
};
extern emu_uint3 threadIdx, blockIdx, blockDim, gridDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
static inline int min(int a, int b) { return a < b ? a : b; }

// ---- findings
void emu_report(const char *kind, const std::string &msg);
extern const char *emu_kernel;
extern long emu_phase;

// emu_report with a printf format
void emu_reportf(const char *kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// ---- shared memory shadow
enum { EMU_MAXT = 1024 };
struct emu_shadow {
    std::bitset<EMU_MAXT> rd, wr, at;
    bool init = false;
};
struct emu_shared_base {
    const char *name = "?";
    virtual void launch_reset() = 0; // a new block: uninitialised contents, no history
    virtual void phase_reset() = 0;  // a barrier passed
    virtual ~emu_shared_base() {}
};
void emu_register(emu_shared_base *s);
unsigned emu_tid();

inline void emu_access(emu_shadow &s, const char *name, int idx, char kind)
{
    const unsigned t = emu_tid();
    /* whether a thread other than t is in the set (no copy of the sets: this runs on every
     * access) */
    const auto other = [t](const std::bitset<EMU_MAXT> &b) {
        return b.test(t) ? b.count() > 1 : b.any();
    };
    const bool ow = other(s.wr), orr = other(s.rd), oa = other(s.at);
    if (kind == 'r') {
        if (!s.init) {
            emu_reportf("UNINIT-READ", "%s: thread %u reads %s[%d] never written in this block",
                        emu_kernel, t, name, idx);
        }
        if (s.init && !ow && !oa) {
            s.rd.set(t);
            return;
        }
        if (ow || oa) {
            emu_reportf(
                "RACE",
                "%s phase %ld: thread %u reads %s[%d] written by another thread in the same "
                "phase (no barrier between)",
                emu_kernel, emu_phase, t, name, idx);
        }
        s.rd.set(t);
    } else if (kind == 'w') {
        if (ow || orr || oa) {
            emu_reportf("RACE",
                        "%s phase %ld: thread %u writes %s[%d] also accessed by another thread in "
                        "the same phase (w%zu r%zu a%zu)",
                        emu_kernel, emu_phase, t, name, idx, (size_t)ow, (size_t)orr, (size_t)oa);
        }
        s.wr.set(t);
        s.init = true;
    } else { // atomic read-modify-write
        if (!s.init) {
            emu_reportf("UNINIT-READ", "%s: thread %u atomics on %s[%d] never written", emu_kernel,
                        t, name, idx);
        }
        if (ow || orr) {
            emu_reportf("RACE",
                        "%s phase %ld: thread %u atomically updates %s[%d] that another thread "
                        "plainly reads/writes in the same phase",
                        emu_kernel, emu_phase, t, name, idx);
        }
        s.at.set(t);
    }
}

template <class T> struct SH : emu_shared_base { // a __shared__ scalar
    T v;
    emu_shadow s;
    SH() { emu_register(this); }
    void launch_reset() override
    {
        memset(&v, 0xcd, sizeof v);
        s = emu_shadow();
    }
    void phase_reset() override { s.rd.reset(), s.wr.reset(), s.at.reset(); }
    operator T()
    {
        emu_access(s, "scalar", 0, 'r');
        return v;
    }
    SH &operator=(T x)
    {
        emu_access(s, "scalar", 0, 'w');
        v = x;
        return *this;
    }
};

// atomicMin on a __shared__ int (the device sampler's first index)
inline int atomicMin(SH<int> *p, int val)
{
    emu_access(p->s, "scalar(atomic)", 0, 'a');
    const int old = p->v;
    p->v = old < val ? old : val;
    return old;
}

template <class T, int N> struct SHA : emu_shared_base {
    T v[N];
    emu_shadow s[N];
    bool dirty = true; /* accessed since the last launch_reset: only such arrays need resetting */
    SHA() { emu_register(this); }
    void launch_reset() override
    {
        if (!dirty)
            return;
        memset(v, 0xcd, sizeof v);
        for (auto &x : s)
            x = emu_shadow();
        dirty = false;
    }
    void phase_reset() override
    {
        if (!dirty)
            return;
        for (auto &x : s)
            x.rd.reset(), x.wr.reset(), x.at.reset();
    }
    struct ref {
        SHA *a;
        long i;
        operator T() const
        {
            a->check(i);
            a->dirty = true;
            emu_access(a->s[i], "array", (int)i, 'r');
            return a->v[i];
        }
        ref &operator=(T x)
        {
            a->check(i);
            a->dirty = true;
            emu_access(a->s[i], "array", (int)i, 'w');
            a->v[i] = x;
            return *this;
        }
    };
    void check(long i)
    {
        if (i < 0 || i >= N) {
            char buf[128];
            snprintf(buf, sizeof buf, "%s: shared array index %ld outside [0,%d)", emu_kernel, i,
                     N);
            emu_report("SHARED-OOB", buf);
            abort();
        }
    }
    ref operator[](long i) { return ref{this, i}; }
};

// a __shared__ T a[N][M]: a[i][j] is element i * M + j of one checked array
template <class T, int N, int M> struct SHA2 {
    SHA<T, N * M> a;
    struct row {
        SHA<T, N * M> *a;
        long i;
        typename SHA<T, N * M>::ref operator[](long j) const
        {
            if (j < 0 || j >= M) {
                emu_report("SHARED-OOB", std::string(emu_kernel) + ": inner index out of range");
                abort();
            }
            return (*a)[i * M + j];
        }
    };
    row operator[](long i) { return row{&a, i}; }
};

// ---- barriers and warp collectives
void emu_sync(int line);
uint64_t emu_warp_coll(int op, unsigned mask, uint64_t bits, int off, int width, int line);
enum { EMU_XOR = 1, EMU_UP = 2, EMU_IDX = 3 };

template <class T> T emu_shfl(int op, unsigned mask, T v, int off, int width, int line)
{
    static_assert(sizeof(T) <= 8, "shuffle of at most 64 bits");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof v);
    b = emu_warp_coll(op, mask, b, off, width, line);
    T r;
    memcpy(&r, &b, sizeof r);
    return r;
}
#define __syncthreads() emu_sync(__LINE__)
#define __shfl_xor_sync(mask, v, o, ...) emu_shfl(EMU_XOR, (mask), (v), (o), 32, __LINE__)
#define __shfl_up_sync(mask, v, o, ...) emu_shfl(EMU_UP, (mask), (v), (o), 32, __LINE__)
#define __shfl_sync(mask, v, src, ...) emu_shfl(EMU_IDX, (mask), (v), (src), 32, __LINE__)

// ---- dynamic shared memory (extern __shared__): an exact-size heap buffer, a shadow per 2-byte
// unit (last writer and reader, with their phase), bounds and alignment checks on every access
struct emu_dyn_t : emu_shared_base {
    unsigned char *mem = nullptr;
    size_t bytes = 0;
    struct unit {
        long wp, rp;
        int wt, rt;
    };
    std::vector<unit> sh;
    emu_dyn_t()
    {
        name = "dynamic";
        emu_register(this);
    }
    void set_size(size_t n)
    {
        free(mem);
        mem = nullptr;
        if (n && posix_memalign((void **)&mem, 16, n) != 0)
            abort();
        bytes = n;
        sh.assign((n + 1) / 2, unit{-1, -1, -1, -1});
    }
    void launch_reset() override
    {
        if (mem)
            memset(mem, 0xcd, bytes);
        for (auto &u : sh)
            u = unit{-1, -1, -1, -1};
    }
    void phase_reset() override {}
    void access(size_t off, size_t len, char kind)
    {
        char buf[256];
        if (off + len > bytes) {
            snprintf(buf, sizeof buf,
                     "%s: thread %u %s %zu bytes at offset %zu of %zu-byte dynamic shared memory",
                     emu_kernel, emu_tid(), kind == 'r' ? "reads" : "writes", len, off, bytes);
            emu_report("SHARED-OOB", buf);
            return;
        }
        if (off % len) {
            snprintf(buf, sizeof buf, "%s: misaligned %zu-byte shared access at %zu", emu_kernel,
                     len, off);
            emu_report("SHARED-MISALIGNED", buf);
        }
        const int t = (int)emu_tid();
        for (size_t u0 = off / 2; u0 < (off + len + 1) / 2; u0++) {
            unit &u = sh[u0];
            if (kind == 'r') {
                if (u.wp < 0) {
                    snprintf(
                        buf, sizeof buf,
                        "%s: thread %d reads dynamic shared byte %zu never written in this block",
                        emu_kernel, t, 2 * u0);
                    emu_report("UNINIT-READ", buf);
                } else if (u.wp == emu_phase && u.wt != t) {
                    snprintf(buf, sizeof buf,
                             "%s phase %ld: thread %d reads dynamic shared byte %zu written by "
                             "thread %d in the same phase",
                             emu_kernel, emu_phase, t, 2 * u0, u.wt);
                    emu_report("RACE", buf);
                }
                if (u.rp != emu_phase)
                    u.rp = emu_phase, u.rt = t;
                else if (u.rt != t)
                    u.rt = -2; // several readers
            } else {
                if ((u.wp == emu_phase && u.wt != t) || (u.rp == emu_phase && u.rt != t)) {
                    snprintf(buf, sizeof buf,
                             "%s phase %ld: thread %d writes dynamic shared byte %zu accessed by "
                             "another thread in the same phase",
                             emu_kernel, emu_phase, t, 2 * u0);
                    emu_report("RACE", buf);
                }
                u.wp = emu_phase, u.wt = t;
            }
        }
    }
    template <class U> struct ptr;
    template <class U> ptr<U> as() { return ptr<U>{this, 0}; }
};
template <class U> struct emu_dyn_t::ptr {
    emu_dyn_t *d;
    size_t off;
    struct ref {
        emu_dyn_t *d;
        size_t o;
        operator U() const
        {
            d->access(o, sizeof(U), 'r');
            U v;
            if (o + sizeof(U) <= d->bytes)
                memcpy(&v, d->mem + o, sizeof v);
            else
                memset(&v, 0xee, sizeof v);
            return v;
        }
        ref &operator=(U v)
        {
            d->access(o, sizeof(U), 'w');
            if (o + sizeof(U) <= d->bytes)
                memcpy(d->mem + o, &v, sizeof v);
            return *this;
        }
    };
    ref operator[](long i) const
    {
        if (i < 0) {
            emu_report("SHARED-OOB", std::string(emu_kernel) + ": negative index");
            abort();
        }
        return ref{d, off + (size_t)i * sizeof(U)};
    }
    template <class V> emu_dyn_t::ptr<V> cast() const { return emu_dyn_t::ptr<V>{d, off}; }
};
extern emu_dyn_t emu_dyn;
extern std::function<void(unsigned)> emu_block_end; // after each block, with its linear index

// runs body on grid x block threads, block by block; order: 0 forward, 1 reverse, 2 shuffled
void emu_launch(const char *name, unsigned grid, unsigned block, std::function<void()> body);
// the same over a grid of gx x gy blocks (blockIdx.x fastest)
void emu_launch2(const char *name, unsigned gx, unsigned gy, unsigned block,
                 std::function<void()> body);
extern int emu_order;
template <class P> inline void emu_prefetch(P) {} // the L2 prefetch: a hint, no effect here
