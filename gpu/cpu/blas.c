/* gpu/cpu/blas.c - loads OpenBLAS at run time, with the core chosen for this CPU.
 *
 * OpenBLAS as Debian ships it (DYNAMIC_ARCH) picks its kernels from a table of CPU models it knew
 * when it was built, and 0.3.21 falls back to its SSE3 kernels (core Prescott) on a CPU it does
 * not know: on a Xeon with AVX-512 and AMX the 110M F32 prompt ran at ~240 tok/s instead of
 * ~1000 with OPENBLAS_CORETYPE=SKYLAKEX. So cairn picks the core from the CPU's features itself:
 * SKYLAKEX where AVX-512 F, CD, BW, DQ and VL are usable (the instructions and the OS's state
 * for them: __builtin_cpu_supports checks both), HASWELL where AVX2 and FMA are, else OpenBLAS's
 * own choice. For the products cairn runs (sgemm) the newer AVX-512 cores (Cooperlake, Sapphire
 * Rapids, and Zen 4 in later OpenBLAS) run SkylakeX's kernels anyway. A user's own
 * OPENBLAS_CORETYPE is never overridden, and the stats line says that it chose (blas_desc).
 *
 * OpenBLAS reads OPENBLAS_CORETYPE once, in the constructor that runs when the library is
 * loaded, so the variable must be set before that. Of the ways to do it:
 *   - linking OpenBLAS and re-executing the program with the variable set restarts a process
 *     that may be a user's program or `cairn serve` midway, and doubles every start;
 *   - a constructor of ours cannot run first: the dynamic loader runs a library's constructors
 *     before those of everything that depends on it, the program included (only LD_PRELOAD
 *     would come earlier);
 *   - not linking OpenBLAS at all, and loading it with dlopen() after setting the variable,
 *     is what this file does. Its header gives the types at build time; the library comes at
 *     the first float product's backend creation (pthread_once), so a process that never
 *     multiplies a prompt never starts OpenBLAS's threads either. The variable is put back as it
 *     was (unset, or empty) right after loading, so the environment (and that of the step
 * processes, hooks and children cairn starts) stays what the user gave. setenv() is not safe
 * against a getenv() running at the same moment in another thread, so the load happens once, at the
 * first CPU backend's creation (before its thread pool starts); a program with threads of its own
 *     that read the environment creates its first backend before starting them.
 * A process that has OpenBLAS loaded already (a program linked with it) keeps the core it has;
 * the description says which one that is.
 *
 * Older OpenBLAS builds are known to compute wrong results with a core forced on some CPUs:
 * tests/model runs the forward pass on the path chosen here against a float64 reference, and
 * a user with such a build sets OPENBLAS_CORETYPE, or CAIRN_BLAS=cairn for cairn's own loops.
 */
#include "gpu/cpu/blas.h"

#include <stdlib.h>
#include <string.h>

#ifdef CAIRN_HAVE_OPENBLAS
#include <cblas.h> /* the types; the library is loaded, not linked */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#endif

const char *cairn__blas_core_for_cpu(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        return "SKYLAKEX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "HASWELL";
#endif
    return NULL;
}

#ifdef CAIRN_HAVE_OPENBLAS
/* The soname every OpenBLAS release has on Linux, found as the dynamic loader finds it
 * (LD_LIBRARY_PATH, the system's alternatives), then the build's own library (CAIRN_OPENBLAS_PATH,
 * from meson: an OpenBLAS outside the loader's path). */
#define OPENBLAS_SONAME "libopenblas.so.0"

static struct {
    void (*sgemm)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint,
                  blasint, float, const float *, blasint, const float *, blasint, float, float *,
                  blasint);
    void (*set_num_threads)(int);
    int (*get_num_threads)(void);
    char *(*get_corename)(void);
} lib;
static int loaded;
static char desc[96] = "cairn";
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* dlsym's object pointer into a function pointer (POSIX guarantees that this works) */
static int bind(void *h, const char *name, void *fn, size_t size)
{
    void *s = dlsym(h, name);
    memcpy(fn, &s, size);
    return s != NULL;
}

static void load(void)
{
    const char *mode = getenv("CAIRN_BLAS");
    if (mode && strcmp(mode, "cairn") == 0)
        return;
    /* an empty variable is no choice (OpenBLAS would detect the core itself) */
    const char *user = getenv("OPENBLAS_CORETYPE");
    const int by_user = user && *user, was_empty = user && !*user;
    const char *core = by_user ? NULL : cairn__blas_core_for_cpu();
    if (core && setenv("OPENBLAS_CORETYPE", core, 1) != 0)
        core = NULL;
    void *h = dlopen(OPENBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
#ifdef CAIRN_OPENBLAS_PATH
    if (!h)
        h = dlopen(CAIRN_OPENBLAS_PATH, RTLD_NOW | RTLD_LOCAL);
#endif
    if (core && was_empty)
        setenv("OPENBLAS_CORETYPE", "", 1);
    else if (core)
        unsetenv("OPENBLAS_CORETYPE");
    /* a library without these is not an OpenBLAS cairn can use: it stays loaded (its
     * constructor has run) and unused */
    if (!h || !bind(h, "cblas_sgemm", &lib.sgemm, sizeof lib.sgemm) ||
        !bind(h, "openblas_set_num_threads", &lib.set_num_threads, sizeof lib.set_num_threads) ||
        !bind(h, "openblas_get_num_threads", &lib.get_num_threads, sizeof lib.get_num_threads) ||
        !bind(h, "openblas_get_corename", &lib.get_corename, sizeof lib.get_corename))
        return;
    const char *name = lib.get_corename();
    snprintf(desc, sizeof desc, "openblas:%s%s", name && *name ? name : "?",
             by_user ? "(OPENBLAS_CORETYPE)" : "");
    loaded = 1;
}

int cairn__blas_on(void)
{
    pthread_once(&once, load);
    return loaded;
}

void cairn__sgemm(int trans_b, int m, int n, int k, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc)
{
    lib.sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, A,
              lda, B, ldb, beta, C, ldc);
}

void cairn__blas_set_threads(int n)
{
    if (cairn__blas_on())
        lib.set_num_threads(n);
}

int cairn__blas_threads(void) { return cairn__blas_on() ? lib.get_num_threads() : 0; }

const char *cairn__blas_desc(void)
{
    cairn__blas_on();
    return desc;
}
#else
int cairn__blas_on(void) { return 0; }

void cairn__sgemm(int trans_b, int m, int n, int k, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc)
{
    /* callers ask cairn__blas_on() first, so this never runs; it computes the product anyway */
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = 0;
            for (int p = 0; p < k; p++)
                s += A[(size_t)i * lda + p] *
                     (trans_b ? B[(size_t)j * ldb + p] : B[(size_t)p * ldb + j]);
            C[(size_t)i * ldc + j] = alpha * s + (beta != 0 ? beta * C[(size_t)i * ldc + j] : 0);
        }
}

void cairn__blas_set_threads(int n) { (void)n; }
int cairn__blas_threads(void) { return 0; }
const char *cairn__blas_desc(void) { return "cairn"; }
#endif
