/* bench/llm/bench_util.h - what the LLM benchmarks share: the clock, weight-type names, the model
 * shapes and medians.
 * Header-only (static inline). */
#ifndef CAIRN_BENCH_LLM_UTIL_H
#define CAIRN_BENCH_LLM_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/gguf.h"
#include "gpu/quant.h"
#include "tests/model/mkmodel.h"

/* seconds on the monotonic clock */
static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "F32", "Q4_0", ... -> *t; 0, or -1 for a name no kernel handles */
static inline int parse_type(const char *s, uint32_t *t)
{
    static const struct {
        const char *n;
        uint32_t t;
    } T[] = {
        {"F32", CAIRN__GGML_F32},   {"F16", CAIRN__GGML_F16},       {"BF16", CAIRN__GGML_BF16},
        {"Q8_0", CAIRN__GGML_Q8_0}, {"Q4_0", CAIRN__GGML_Q4_0},     {"Q4_K", CAIRN__GGML_Q4_K},
        {"Q6_K", CAIRN__GGML_Q6_K}, {"Q2_K", CAIRN__GGML_Q2_K},     {"Q3_K", CAIRN__GGML_Q3_K},
        {"Q5_K", CAIRN__GGML_Q5_K}, {"Q4_1", CAIRN__GGML_Q4_1},     {"Q5_0", CAIRN__GGML_Q5_0},
        {"Q5_1", CAIRN__GGML_Q5_1}, {"IQ4_NL", CAIRN__GGML_IQ4_NL}, {"IQ4_XS", CAIRN__GGML_IQ4_XS}};
    for (size_t i = 0; i < sizeof T / sizeof *T; i++)
        if (strcmp(s, T[i].n) == 0) {
            *t = T[i].t;
            return 0;
        }
    return -1;
}

/* The llama shapes the LLM benchmarks build (random weights; see bench/README.md) */
typedef struct {
    const char *name;
    int dim, layers, heads, kv, ff, vocab;
} llm_shape;

static const llm_shape SHAPES[] = {
    {"15M", 288, 6, 6, 6, 768, 32000},
    {"110M", 768, 12, 12, 12, 2048, 32000},
    {"500M", 1280, 20, 20, 20, 3456, 32000},
    {"1B", 2048, 16, 32, 8, 8192, 32000}, /* 1.1B parameters: 2.2 GB in F16 */
    {"2B", 4096, 8, 32, 8, 11008, 32000}, /* 1.7B, few wide layers: 3.4 GB in F16 */
    /* Qwen2.5-0.5B's shape (as an untied llama): 0.63B parameters, 1.3 GB in F16, a vocabulary of
     * 151936, where the sampler's work per token shows */
    {"Q0.5B", 896, 24, 14, 2, 4864, 151936},
    /* Llama-3-8B's shape: 8.0B parameters, 16 GB in F16, what an H200 is bought to serve (the
     * per-kernel costs that small models pay weigh least here) */
    {"8B", 4096, 32, 32, 8, 14336, 128256},
};

/* The shape called `name`, or NULL. */
static inline const llm_shape *find_shape(const char *name)
{
    for (size_t i = 0; i < sizeof SHAPES / sizeof *SHAPES; i++)
        if (strcmp(SHAPES[i].name, name) == 0)
            return &SHAPES[i];
    return NULL;
}

/* The weight type named tn for shape sh, as a size x type loop of a bench takes it: 1 and *ty
 * set; 0 when the shape's dimensions are not whole blocks of the type (said on stderr: the pair
 * is skipped); -1 for a name that is no type (said: bad usage). */
static inline int shape_type(const char *prog, const llm_shape *sh, const char *tn, uint32_t *ty)
{
    if (parse_type(tn, ty) != 0) {
        fprintf(stderr, "%s: unknown type '%s'\n", prog, tn);
        return -1;
    }
    const int64_t be = (int64_t)cairn__quant_block_elems(*ty);
    if (be > 1 && (sh->dim % be || sh->ff % be)) {
        fprintf(stderr, "%s: %s needs dims that are multiples of %lld; skipping %s\n", prog, tn,
                (long long)be, sh->name);
        return 0;
    }
    return 1;
}

/* The model writer's spec of shape sh with every matrix of type ty (a 2048-position context,
 * the writer's defaults otherwise). */
static inline void shape_spec(const llm_shape *sh, uint32_t ty, mk_spec *s)
{
    mk_spec_default(s);
    s->dim = sh->dim;
    s->n_layers = sh->layers;
    s->n_heads = sh->heads;
    s->n_kv_heads = sh->kv;
    s->ff = sh->ff;
    s->vocab = sh->vocab;
    s->ctx = 2048;
    s->wtype = ty;
}

/* qsort's order of doubles, and the median of v[0..n) (n <= 16) */
static inline int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static inline double median(const double *v, int n)
{
    double s[16];
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

#endif
