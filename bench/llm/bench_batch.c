/* bench/llm/bench_batch.c - batched decoding (gpu/batch.h): aggregate decode tokens/s at 1, 2, 4,
 * 8, 16 and 32 concurrent sequences, each as a ratio to one sequence in the same batch code, and
 * prompt tokens/s.
 *
 * A decode step of one sequence reads every weight once for one token; a batched step reads them
 * once for all its sequences, so the aggregate speed grows with the batch until the arithmetic,
 * not the memory, bounds it. The peer, measured in the same run on the same model, is the engine's
 * own solo decode (one token per forward call on the positional cache): the batch of one should
 * match it, which shows what the paged path costs by itself. Each row: B sequences with prompts
 * of --prompt tokens are added and their prompts run (not timed), then --gen steps are timed,
 * each advancing all B, in 3 rounds; aggregate tok/s = B * gen / the median round's seconds.
 * Random-weight llama shapes generated in memory, as bench-llm's.
 *
 *   bench-batch [--sizes 15M,110M,1B] [--types Q4_0,Q8_0,Q4_K] [--threads N] [--prompt N]
 *               [--gen N] [--max-seqs 32] [--backend cpu|cuda]
 *
 * --backend cuda (tests/gpu/device-check.sh's sweep) runs the same rows on the GPU: the batch
 * then goes through the CUDA backend's paged step (gpu/cuda/backend_paged.cuh).
 *
 * Not a test: it never fails on a time; the target (8 sequences >= 3x one, 1B shape) is
 * printed as MET or MISS.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/llm/bench_util.h"
#include "gpu/batch.h"
#include "gpu/cpu/kernels_cpu.h"
#include "gpu/engine.h"
#include "gpu/gguf.h"
#include "gpu/model.h"
#include "gpu/quant.h"
#include "tests/model/mkmodel.h"

static int32_t tok_of(int s, int i, int nv)
{
    return 3 + (int32_t)((s * 7919 + i * 104729) % (nv - 3));
}

/* rounds of --gen steps per row; the row gives the median round (the machine is shared) */
#define ROUNDS 3

static double median3(const double *v)
{
    const double a = v[0], b = v[1], c = v[2];
    return a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
}

/* B sequences' prompts run, then gen timed steps: aggregate tok/s; *prompt_tps: the prompt
 * tokens/s of the B = 1 prefill (chunks of n_batch) */
static double run_batch(cairn__engine *e, int B, int n_prompt, int gen, double *prompt_tps)
{
    const int nv = cairn__engine_model(e)->n_vocab;
    cairn__batch_opts bo = {.max_seqs = B,
                            .prompt_chunks = B,
                            .n_blocks = B * ((n_prompt + ROUNDS * gen + 2) / CAIRN__KV_BLOCK + 1)};
    cairn__batch *b = NULL;
    char err[256];
    if (cairn__batch_new(e, &bo, &b, err, sizeof err) != 0) {
        fprintf(stderr, "bench-batch: %s\n", err);
        return 0.0;
    }
    cairn__gen_opts o;
    cairn__gen_opts_default(&o);
    o.max_tokens = 0;
    o.ignore_eos = 1;
    o.sampling.temperature = 0.0f; /* greedy: the sampler's cost is not what is measured */
    int32_t *p = malloc((size_t)n_prompt * sizeof *p);
    int ok = p != NULL;
    for (int s = 0; ok && s < B; s++) {
        int id;
        for (int i = 0; i < n_prompt; i++)
            p[i] = tok_of(s, i, nv);
        o.sampling.seed = (uint64_t)s;
        ok = cairn__batch_add(b, p, (size_t)n_prompt, &o, &id) == 0;
    }
    double t0 = now_s();
    while (ok) { /* until every prompt has run */
        int all = 1;
        for (int s = 0; s < B; s++)
            all &= cairn__batch_seq_state(b, s) == CAIRN__SEQ_DECODE;
        if (all)
            break;
        ok = cairn__batch_step(b) > 0;
    }
    if (prompt_tps)
        *prompt_tps = (double)n_prompt * B / (now_s() - t0);
    double dt[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        t0 = now_s();
        for (int k = 0; ok && k < gen; k++)
            ok = cairn__batch_step(b) == B;
        dt[r] = now_s() - t0;
    }
    if (!ok)
        fprintf(stderr, "bench-batch: %s\n", cairn__batch_errmsg(b));
    free(p);
    cairn__batch_free(b);
    return ok ? (double)B * gen / median3(dt) : 0.0;
}

/* the engine's solo decode: gen single-token forward calls after the prompt */
static double run_solo(cairn__engine *e, int n_prompt, int gen)
{
    cairn__backend *be = cairn__engine_backend(e);
    const int nv = cairn__engine_model(e)->n_vocab;
    float *lg = malloc((size_t)nv * sizeof *lg);
    int32_t *p = malloc((size_t)n_prompt * sizeof *p);
    for (int i = 0; p && i < n_prompt; i++)
        p[i] = tok_of(0, i, nv);
    int rc = lg && p ? cairn__backend_forward(be, p, n_prompt, 0, lg, 0) : -1;
    double dt[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        const double t0 = now_s();
        for (int k = 0; rc == 0 && k < gen; k++) {
            const int32_t t = tok_of(1, k, nv);
            rc = cairn__backend_forward(be, &t, 1, n_prompt + r * gen + k, lg, 0);
        }
        dt[r] = now_s() - t0;
    }
    free(lg);
    free(p);
    return rc == 0 ? gen / median3(dt) : 0.0;
}

int main(int argc, char **argv)
{
    char sizes[128] = "1B", types[128] = "Q4_0,Q8_0,Q4_K";
    const char *backend = "cpu";
    int threads = 2, n_prompt = 16, gen = 8, max_seqs = 32;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc)
            snprintf(sizes, sizeof sizes, "%s", argv[++i]);
        else if (strcmp(argv[i], "--types") == 0 && i + 1 < argc)
            snprintf(types, sizeof types, "%s", argv[++i]);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--prompt") == 0 && i + 1 < argc)
            n_prompt = atoi(argv[++i]);
        else if (strcmp(argv[i], "--gen") == 0 && i + 1 < argc)
            gen = atoi(argv[++i]);
        else if (strcmp(argv[i], "--max-seqs") == 0 && i + 1 < argc)
            max_seqs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc)
            backend = argv[++i];
        else {
            fprintf(stderr, "usage: bench-batch [--sizes 15M,110M,1B] [--types Q4_0,Q8_0,Q4_K] "
                            "[--threads N] [--prompt N] [--gen N] [--max-seqs 32] "
                            "[--backend cpu|cuda]\n");
            return 64;
        }
    }
    if (n_prompt < 1 || gen < 1 || max_seqs < 1) {
        fprintf(stderr, "bench-batch: --prompt, --gen and --max-seqs must be >= 1\n");
        return 64;
    }
    printf("bench-batch: %s backend, %d threads, %s kernels, prompts of %d tokens, %d timed "
           "steps\n\n",
           backend, threads, cairn__kernels_isa(), n_prompt, gen);
    printf("%-5s %-5s %11s %11s %11s", "size", "type", "solo tok/s", "batch1/solo", "prompt t/s");
    for (int B = 1; B <= max_seqs; B *= 2)
        printf(" %9s%-2d", "B=", B);
    printf("  target\n");
    char *ss = NULL;
    for (char *sz = strtok_r(sizes, ",", &ss); sz; sz = strtok_r(NULL, ",", &ss)) {
        const llm_shape *sh = find_shape(sz);
        if (!sh) {
            fprintf(stderr, "bench-batch: unknown size '%s' (15M, 110M, 500M, 1B, 2B, Q0.5B, 8B)\n",
                    sz);
            return 64;
        }
        char tc[128];
        snprintf(tc, sizeof tc, "%s", types);
        char *ts = NULL;
        for (char *tn = strtok_r(tc, ",", &ts); tn; tn = strtok_r(NULL, ",", &ts)) {
            uint32_t ty;
            if (parse_type(tn, &ty) != 0) {
                fprintf(stderr, "bench-batch: unknown type '%s'\n", tn);
                return 64;
            }
            mk_spec s;
            shape_spec(sh, ty, &s);
            mk_loaded L;
            memset(&L, 0, sizeof L);
            char err[256] = "";
            cairn__backend *be = NULL;
            cairn__engine *e = NULL;
            /* room for the prompt and the steps; n_batch (capped at n_ctx) bounds a step's rows */
            const int need = n_prompt + ROUNDS * gen + 8, n_ctx = need > max_seqs ? need : max_seqs;
            cairn__backend_opts bo = {.n_ctx = n_ctx, .n_threads = threads};
            if (mk_load(&s, &L, err, sizeof err) != 0 ||
                cairn__backend_new(backend, L.m, &bo, &be, err, sizeof err) != 0 ||
                cairn__engine_new(L.m, NULL, be, &e) != 0) {
                fprintf(stderr, "bench-batch: cannot build the %s %s model on %s (%s)\n", sz, tn,
                        backend, err);
                return 70;
            }
            const double solo = run_solo(e, n_prompt, gen);
            double ptps = 0.0, agg[16] = {0};
            int nb = 0;
            for (int B = 1; B <= max_seqs && nb < 16; B *= 2)
                agg[nb++] = run_batch(e, B, n_prompt, gen, B == 1 ? &ptps : NULL);
            printf("%-5s %-5s %11.2f %11.2f %11.1f", sz, tn, solo, solo > 0 ? agg[0] / solo : 0,
                   ptps);
            for (int k = 0; k < nb; k++)
                printf(" %5.1f %4.2fx", agg[k], agg[0] > 0 ? agg[k] / agg[0] : 0);
            if (nb > 3)
                printf("  8 seqs %.2fx: %s", agg[3] / agg[0],
                       agg[3] >= 3 * agg[0] ? "MET" : "MISS");
            printf("\n");
            fflush(stdout);
            cairn__engine_free(e);
            cairn__backend_free(be);
            mk_unload(&L);
        }
    }
    return 0;
}
