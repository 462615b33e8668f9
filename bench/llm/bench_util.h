/* bench/llm/bench_util.h - what bench-llm and bench-matvec share: the clock and weight-type names.
 * Header-only (static inline), for these two programs. */
#ifndef CAIRN_BENCH_LLM_UTIL_H
#define CAIRN_BENCH_LLM_UTIL_H

#include <stdint.h>
#include <string.h>
#include <time.h>

#include "gpu/gguf.h"

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

#endif
