/* test_ggml_peer.c - cairn's GGUF block formats against ggml itself, the library that defines
 * them: llama.cpp's libggml-base.so, loaded at run time from the peer build (the directory in
 * CAIRN_PEER_LLAMA_CPP; the test is skipped when it is absent).
 *
 * test_quant.c checks each format against values restated from ggml's source by hand; here
 * ggml's own dequantize_row_<type> and quantize_row_<type>_ref run beside cairn's code on the
 * same bytes:
 *   - random blocks (any byte anywhere, so any half as a scale, NaN and infinity included):
 *     cairn__dequant_row gives ggml's floats bit for bit (NaN for NaN);
 *   - blocks ggml's reference quantizer writes (the bytes a real file holds): the same, and
 *     cairn's int8 dot product of each row (scalar level) agrees with a float64 dot product of
 *     ggml's dequantized weights and the int8-rounded activation;
 *   - cairn__quant_row's blocks, which ggml dequantizes to cairn's floats (files written by
 *     cairn-mkmodel read the same in llama.cpp), and whose error against the source is
 *     reported beside ggml's own quantizer's and must stay within a few times it.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cpu/kernels_cpu.h"
#include "gpu/gguf.h"
#include "gpu/quant.h"
#include "tests/tap.h"

typedef void dequant_fn(const void *x, float *y, int64_t k);
typedef void quant_fn(const float *x, void *y, int64_t k);

/* the types and the suffix of their ggml function names; the bound on cairn's quantizer error
 * as a multiple of ggml's reference quantizer's */
static const struct {
    uint32_t type;
    const char *name;
    double worse;
} types[] = {
    {CAIRN__GGML_Q2_K, "q2_K", 1.5},     {CAIRN__GGML_Q3_K, "q3_K", 1.5},
    {CAIRN__GGML_Q4_K, "q4_K", 1.5},     {CAIRN__GGML_Q5_K, "q5_K", 1.5},
    {CAIRN__GGML_Q6_K, "q6_K", 1.5},     {CAIRN__GGML_IQ4_NL, "iq4_nl", 1.5},
    {CAIRN__GGML_IQ4_XS, "iq4_xs", 1.5},
};

static uint64_t seed = 0x853c49e6748fea9bull;
static uint64_t next(void)
{
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    return seed;
}

static int same_float(float a, float b)
{
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    return x == y || (a != a && b != b);
}

/* q (n values of ty) dequantized by ggml into a and by cairn into b: the values that differ */
static long both_dequant(dequant_fn *gdq, uint32_t ty, const uint8_t *q, float *a, float *b, int n)
{
    gdq(q, a, n);
    cairn__dequant_row(ty, q, b, (uint64_t)n);
    long bad = 0;
    for (int i = 0; i < n; i++)
        bad += !same_float(a[i], b[i]);
    return bad;
}

static double rel_rms(const float *y, const float *x, int n)
{
    double e = 0, s = 0;
    for (int i = 0; i < n; i++) {
        e += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        s += (double)x[i] * x[i];
    }
    return sqrt(e / s);
}

/* float64 dot of w (n) with x rounded to int8 per 32 as the kernels round it */
static double ref_dot(const float *w, const float *x, int n)
{
    double sum = 0;
    for (int b = 0; b < n; b += 32) {
        float amax = 0;
        for (int i = 0; i < 32; i++)
            amax = fmaxf(amax, fabsf(x[b + i]));
        const float d = amax / 127.0f;
        for (int i = 0; i < 32; i++)
            sum += (double)w[b + i] * (double)((d != 0 ? nearbyintf(x[b + i] / d) : 0) * d);
    }
    return sum;
}

/* dlsym's object pointer into a function pointer (POSIX guarantees that this works) */
static int bind(void *lib, const char *name, void *fn, size_t size)
{
    void *s = dlsym(lib, name);
    memcpy(fn, &s, size);
    return s != NULL;
}

static void check_type(void *lib, size_t t, cairn__pool *pool)
{
    char dn[64], qn[64];
    snprintf(dn, sizeof dn, "dequantize_row_%s", types[t].name);
    snprintf(qn, sizeof qn, "quantize_row_%s_ref", types[t].name);
    dequant_fn *gdq;
    quant_fn *gq;
    const int have = bind(lib, dn, &gdq, sizeof gdq) & bind(lib, qn, &gq, sizeof gq);
    const uint32_t ty = types[t].type;
    const char *tn = cairn__ggml_type_name(ty);
    if (!have) {
        skip("%s: the peer has no %s / %s", tn, dn, qn);
        skip("%s", tn);
        skip("%s", tn);
        return;
    }
    enum { N = 4096, ROWS = 8 };
    const uint64_t be = cairn__quant_block_elems(ty), bb = cairn__quant_block_bytes(ty);
    const size_t bytes = (size_t)(N / be * bb);
    uint8_t *q = malloc(bytes);
    float *x = malloc(sizeof(float) * N), *a = malloc(sizeof(float) * N),
          *b = malloc(sizeof(float) * N);

    /* random bytes */
    long bad = 0;
    for (int rep = 0; rep < 20; rep++) {
        for (size_t i = 0; i < bytes; i++)
            q[i] = (uint8_t)(next() >> 24);
        bad += both_dequant(gdq, ty, q, a, b, N);
    }
    ok(bad == 0, "%s: 20 rows of random blocks dequantize to ggml's floats bit for bit (%ld off)",
       tn, bad);

    /* ggml's own quantizer's blocks, and cairn's dot product on them */
    for (int i = 0; i < N; i++)
        x[i] = (float)((double)(next() >> 11) * 0x1.0p-53 - 0.5) * (float)(1 + i / 512);
    gq(x, q, N);
    bad = both_dequant(gdq, ty, q, a, b, N);
    const double e_ggml = rel_rms(a, x, N);
    /* rows of 512 of those blocks against an activation */
    const int cols = N / ROWS;
    float act[512], out[ROWS];
    for (int i = 0; i < cols; i++)
        act[i] = sinf((float)i * 0.37f) * (float)(1 + i % 5);
    const cairn__mat W = {ty, ROWS, cols, bytes / ROWS, q};
    void *s = malloc(cairn__matvec_scratch_bytes(cols));
    cairn__kernels_set_isa("scalar");
    cairn__matvec(pool, &W, act, out, s);
    cairn__kernels_set_isa(NULL);
    double worst = 0;
    for (int r = 0; r < ROWS; r++) {
        const double ref = ref_dot(a + r * cols, act, cols);
        const double e = fabs(out[r] - ref) / (1 + fabs(ref));
        worst = e > worst ? e : worst;
    }
    free(s);
    ok(bad == 0 && worst < 1e-4,
       "%s: ggml-quantized rows dequantize as ggml does (%ld off); the int8 dot product of "
       "each agrees with float64 on ggml's weights (worst %.2g)",
       tn, bad, worst);

    /* cairn's quantizer, read back by ggml */
    int rc = cairn__quant_row(ty, x, q, N);
    bad = both_dequant(gdq, ty, q, a, b, N);
    const double e_cairn = rel_rms(b, x, N);
    ok(rc == 0 && bad == 0 && e_cairn <= types[t].worse * e_ggml,
       "%s: cairn__quant_row's blocks read the same in ggml (%ld off); rel rms error %.3g, "
       "ggml's reference quantizer %.3g (bound %.1fx)",
       tn, bad, e_cairn, e_ggml, types[t].worse);
    free(q), free(x), free(a), free(b);
}

int main(void)
{
    const char *dir = getenv("CAIRN_PEER_LLAMA_CPP");
    char path[4096];
    snprintf(path, sizeof path, "%s/libggml-base.so", dir ? dir : ".");
    void *lib = dir ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!lib)
        tap_skip_all("no llama.cpp peer (libggml-base.so in CAIRN_PEER_LLAMA_CPP)");
    /* ggml fills its half -> float table in ggml_init */
    struct {
        size_t mem_size;
        void *mem_buffer;
        _Bool no_alloc;
    } params = {1024, NULL, 1};
    void *(*init)(__typeof__(params));
    void (*fini)(void *);
    void *ctx = bind(lib, "ggml_init", &init, sizeof init) ? init(params) : NULL;
    cairn__pool *pool = NULL;
    if (cairn__pool_new(1, &pool) != 0)
        tap_skip_all("no thread pool");
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        check_type(lib, t, pool);
    if (ctx && bind(lib, "ggml_free", &fini, sizeof fini))
        fini(ctx);
    cairn__pool_free(pool);
    dlclose(lib);
    return tap_done();
}
