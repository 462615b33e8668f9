/* bench/llm/bench_llm.c - prompt and decode speed against the memory roofline, CPU and CUDA.
 *
 * Decoding one token reads every weight matrix once, so its speed is bounded by memory
 * bandwidth: roofline tok/s = bandwidth / bytes of weights per token. The peer measured in the
 * same run is a multithreaded memcpy of a buffer far larger than any cache (bandwidth counted as
 * bytes read + bytes written, since a copy does both). On a shared machine that bandwidth moves
 * by 2x within minutes, so each model is measured in 5 rounds, each a copy right before a decode
 * of --gen tokens; a round's fraction is its decode bytes/s over its copy's, and the table gives
 * the median fraction, the range, and the median token's fraction (the mean also pays for the
 * time slices other processes take; the median token mostly does not). Models are
 * random-weight llama shapes generated in memory (the speed of a forward pass does not depend on
 * the values).
 *
 * With --backend cuda (or both) the same model runs on the GPU; its peer is a device-to-device
 * cudaMemcpy of 2 x 2 GiB measured in the same run (HBM bandwidth, read + write), and its bytes
 * per token are those of the weights as the device holds them (f16 for quantized types, so a
 * Q4_0 model reads 2 bytes per weight there, not 0.56). Decoding is greedy, as the engine runs
 * it: on the GPU the device sampler picks the token and only the token comes back (decode
 * tok/s); the column "via logits" is the same decode with the logits copied back and the pick
 * made on the host, what the device sampler saves; the column "sampled" is the same decode
 * sampled on the device at temperature 0.7 and top-p 0.95 (the example pipeline's settings).
 * Each CUDA row is followed by a "cublas" row:
 * the same backend with CAIRN_CUDA_GEMV=cublas, whose decode products run through cuBLAS instead
 * of cairn's decode kernel; the line after it gives the ratio of the two decode speeds.
 *
 * --cache f32,f16 measures every row with a KV cache of floats and again with one of halves
 * (column kv; the cublas row with floats only), and after each half row prints its decode
 * speed over the float row's: what halving the bytes attention reads gains at that position
 * (--prompt 1024 puts the decode where the cache outweighs small models' weights).
 *
 *   bench-llm [--sizes 15M,110M,500M,1B,2B,Q0.5B,8B] [--types F32,Q8_0,Q4_0,Q4_K,Q6_K,...]
 *             [--threads N] [--prompt N] [--gen N] [--backend cpu|cuda|both]
 *             [--cache f32|f16|f32,f16] [--json]
 *
 * Not a test: it never fails on a time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu/backend.h"
#include "gpu/backend_plugin.h"
#include "gpu/gguf.h"
#include "bench/llm/bench_util.h"
#include "gpu/cpu/kernels_cpu.h"
#include "gpu/model.h"
#include "tests/model/mkmodel.h"

typedef struct {
    char *dst;
    const char *src;
    size_t n;
} copy_job;

/* 1 MiB pieces [i0, i1) */
static void copy_range(void *arg, int64_t i0, int64_t i1, int ith)
{
    const copy_job *j = arg;
    (void)ith;
    const size_t a = (size_t)i0 << 20, b = (size_t)i1 << 20 < j->n ? (size_t)i1 << 20 : j->n;
    memcpy(j->dst + a, j->src + a, b - a);
}

/* The CPU peer: a threaded memcpy of 512 MiB, far larger than any cache. */
typedef struct copy_peer {
    cairn__pool *pool;
    char *a, *b;
    size_t n;
} copy_peer;

static int copy_peer_open(copy_peer *c, int threads)
{
    c->n = (size_t)512 << 20;
    c->a = malloc(c->n);
    c->b = malloc(c->n);
    if (!c->a || !c->b || cairn__pool_new(threads, &c->pool) != 0)
        return -1;
    memset(c->a, 1, c->n); /* first touch now, not inside a timed copy */
    memset(c->b, 2, c->n);
    return 0;
}

static void copy_peer_close(copy_peer *c)
{
    cairn__pool_free(c->pool);
    free(c->a);
    free(c->b);
}

/* bytes/s of read + write of one copy, the better of two (a page-cache or scheduler hiccup in
 * one pass is not the machine's bandwidth) */
static double copy_bandwidth(copy_peer *c)
{
    copy_job j = {c->b, c->a, c->n};
    double best = 0;
    for (int rep = 0; rep < 2; rep++) {
        double t = now_s();
        cairn__pool_for(c->pool, (int64_t)(c->n >> 20), 0, copy_range, &j);
        t = now_s() - t;
        if (2.0 * (double)c->n / t > best)
            best = 2.0 * (double)c->n / t;
    }
    return best;
}

static double min_of(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

static double max_of(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

/* The greedy pick of the next token: the index of the largest of v[0..n) (the first of equals;
 * NaN never wins). Two passes: the maximum, in eight independent lanes, then its first index. A
 * single running "best" chains every comparison through the load of the best value so far:
 * ~110 us over 32000 logits on this machine, a third of a 15M model's decode step. */
static int32_t argmax(const float *v, int n)
{
    float m[8];
    for (int k = 0; k < 8; k++)
        m[k] = v[0];
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            m[k] = v[i + k] > m[k] ? v[i + k] : m[k];
    for (; i < n; i++)
        m[0] = v[i] > m[0] ? v[i] : m[0];
    for (int k = 1; k < 8; k++)
        m[0] = m[k] > m[0] ? m[k] : m[0];
    for (i = 0; i < n; i++)
        if (v[i] == m[0])
            return i;
    return 0;
}

static uint64_t mat_bytes(const cairn__mat *m) { return (uint64_t)m->rows * m->row_bytes; }

int main(int argc, char **argv)
{
    char sizes[256] = "15M,110M", types[256] = "F32,Q8_0,Q4_0";
    int threads = 0, n_prompt = 128, n_gen = 64, json = 0;
    char backends[64] = "cpu";
    int caches[2] = {CAIRN__CACHE_F32, 0}, n_caches = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc)
            snprintf(sizes, sizeof sizes, "%s", argv[++i]);
        else if (strcmp(argv[i], "--types") == 0 && i + 1 < argc)
            snprintf(types, sizeof types, "%s", argv[++i]);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--prompt") == 0 && i + 1 < argc)
            n_prompt = atoi(argv[++i]);
        else if (strcmp(argv[i], "--gen") == 0 && i + 1 < argc)
            n_gen = atoi(argv[++i]);
        else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
            const char *v = argv[++i];
            if (strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0 && strcmp(v, "both") != 0) {
                fprintf(stderr, "bench-llm: --backend is cpu, cuda or both\n");
                return 64;
            }
            snprintf(backends, sizeof backends, "%s", strcmp(v, "both") == 0 ? "cpu,cuda" : v);
        } else if (strcmp(argv[i], "--cache") == 0 && i + 1 < argc) {
            const char *v = argv[++i];
            n_caches = 0;
            if (strcmp(v, "f32") == 0 || strcmp(v, "f32,f16") == 0)
                caches[n_caches++] = CAIRN__CACHE_F32;
            if (strcmp(v, "f16") == 0 || strcmp(v, "f32,f16") == 0)
                caches[n_caches++] = CAIRN__CACHE_F16;
            if (!n_caches) {
                fprintf(stderr, "bench-llm: --cache is f32, f16 or f32,f16\n");
                return 64;
            }
        } else {
            fprintf(stderr, "usage: bench-llm [--sizes 15M,110M,500M,1B,2B,Q0.5B,8B] [--types "
                            "F32,Q8_0,Q4_0,...] [--threads N] "
                            "[--prompt N] [--gen N] [--backend cpu|cuda|both] "
                            "[--cache f32|f16|f32,f16] [--json]\n");
            return 64;
        }
    }
    if (n_prompt < 1 || n_gen < 1) {
        fprintf(stderr, "bench-llm: --prompt and --gen must be >= 1\n");
        return 64;
    }
    copy_peer cp = {0};
    if (copy_peer_open(&cp, threads) != 0) {
        fprintf(stderr, "bench-llm: cannot start threads or allocate the copy buffers\n");
        return 70;
    }
    threads = cairn__pool_size(cp.pool);
    const int want_cpu = strstr(backends, "cpu") != NULL,
              want_cuda = strstr(backends, "cuda") != NULL;
    const double bw = want_cpu ? copy_bandwidth(&cp) : 0.0;
    double dev_bw = 0.0;
    char dev_name[256] = "none";
    const cairn__cuda_plugin *cuda = NULL; /* the CUDA module: its diagnostics */
    if (want_cuda) {
        char err[512];
        if (cairn__cuda_plugin_load(&cuda, err, sizeof err) != 0 ||
            cuda->bandwidth(0, &dev_bw, dev_name, sizeof dev_name, err, sizeof err) != 0) {
            fprintf(stderr, "bench-llm: %s\n", err);
            return 69;
        }
    }
    if (json)
        printf(
            "{\"threads\": %d, \"isa\": \"%s\", \"memcpy_bytes_per_s\": %.0f, \"device\": \"%s\", "
            "\"device_copy_bytes_per_s\": %.0f, \"results\": [",
            threads, cairn__kernels_isa(), bw, dev_name, dev_bw);
    else {
        if (want_cpu)
            printf(
                "bench-llm: cpu: %d threads, %s kernels, memcpy bandwidth %.2f GB/s (read+write)\n",
                threads, cairn__kernels_isa(), bw / 1e9);
        if (want_cuda)
            printf("bench-llm: cuda: %s, device-to-device copy %.0f GB/s (read+write)\n", dev_name,
                   dev_bw / 1e9);
        printf("\n%-6s %-5s %-5s %-4s %-3s %8s %9s %12s %12s %9s %10s %7s %9s %8s %10s %9s\n",
               "back", "size", "type", "dev", "kv", "params", "MB/token", "prompt tok/s",
               "decode tok/s", "copy GB/s", "roofline", "frac", "range", "med.tok", "via logits",
               "sampled");
    }
    int first = 1;
    char *ssave = NULL;
    for (char *sz = strtok_r(sizes, ",", &ssave); sz; sz = strtok_r(NULL, ",", &ssave)) {
        const llm_shape *sh = find_shape(sz);
        if (!sh) {
            fprintf(stderr, "bench-llm: unknown size '%s' (15M, 110M, 500M, 1B, 2B, Q0.5B, 8B)\n",
                    sz);
            return 64;
        }
        char tcopy[256];
        snprintf(tcopy, sizeof tcopy, "%s", types);
        char *tsave = NULL;
        for (char *tn = strtok_r(tcopy, ",", &tsave); tn; tn = strtok_r(NULL, ",", &tsave)) {
            uint32_t ty;
            const int ok = shape_type("bench-llm", sh, tn, &ty);
            if (ok < 0)
                return 64;
            if (ok == 0)
                continue;
            mk_spec s;
            shape_spec(sh, ty, &s);
            unsigned char *buf = NULL;
            size_t len = 0;
            char err[256];
            cairn__gguf *g = NULL;
            cairn__model *m = NULL;
            cairn__backend *b = NULL;
            if (mk_model(&s, &buf, &len) != 0 ||
                cairn__gguf_open_mem(buf, len, &g, err, sizeof err) != 0 ||
                cairn__model_load(g, &m, err, sizeof err) != 0) {
                fprintf(stderr, "bench-llm: cannot build the %s %s model\n", sz, tn);
                return 70;
            }
            /* rows: cpu; cuda (decode products in cairn's kernel); cublas (the same CUDA
             * backend with CAIRN_CUDA_GEMV=cublas: the kernel's peer, measured next to it) */
            double kernel_tps = 0.0; /* the cuda row's decode tok/s, for the ratio */
            double f32_tps[3] = {0}; /* each backend's float-cache decode tok/s, for the ratio */
            for (int ri = 0; ri < 3 * n_caches; ri++) {
                static const char *const row[] = {"cpu", "cuda", "cublas"};
                const int bi = ri % 3, ct = caches[ri / 3];
                const char *bname = bi == 0 ? "cpu" : "cuda";
                if (!(bi == 0 ? want_cpu : want_cuda) || (bi == 2 && ct == CAIRN__CACHE_F16))
                    continue;
                cairn__backend_opts bo = {.n_ctx = n_prompt + n_gen + 1,
                                          .n_threads = threads,
                                          .n_batch = n_prompt,
                                          .cache_type = ct};
                if (bi == 2)
                    setenv("CAIRN_CUDA_GEMV", "cublas", 1);
                const int brc = cairn__backend_new(bname, m, &bo, &b, err, sizeof err);
                if (bi == 2)
                    unsetenv("CAIRN_CUDA_GEMV");
                if (brc != 0) {
                    fprintf(stderr, "bench-llm: %s backend: %s\n", bname, err);
                    return 70;
                }
                uint64_t per_tok = mat_bytes(&m->output);
                for (int l = 0; l < m->n_layers; l++) {
                    const cairn__layer *y = &m->layers[l];
                    per_tok += mat_bytes(&y->wq) + mat_bytes(&y->wk) + mat_bytes(&y->wv) +
                               mat_bytes(&y->wo) + mat_bytes(&y->w_gate) + mat_bytes(&y->w_up) +
                               mat_bytes(&y->w_down);
                }
                int32_t *toks = malloc((size_t)n_prompt * sizeof *toks);
                float *logits = malloc((size_t)m->n_vocab * sizeof *logits);
                for (int i = 0; i < n_prompt; i++)
                    toks[i] = (int32_t)((i * 7919 + 13) % m->n_vocab);
                const char *dev = "-";
                double peer = bw;
                if (bi >= 1) { /* the device reads its own layout: f16 for quantized weights */
                    per_tok = cuda->weight_bytes(b);
                    dev = cuda->dtype(b);
                    peer = dev_bw;
                }
                /* warm-up: touch the weights, load the kernels, capture the decode graph (page
                 * faults, module loading and capture are not what we measure); every call is
                 * checked here */
                int rc = cairn__backend_forward(b, toks, n_prompt, 0, logits, 0);
                int32_t first_tok = 0;
                if (rc == 0)
                    rc = cairn__backend_forward(b, &first_tok, 1, n_prompt, logits, 0);
                if (rc != 0) {
                    fprintf(stderr, "bench-llm: %s backend: %s\n", bname, cairn__backend_errmsg(b));
                    return 70;
                }
                if (bi >= 1 && strcmp(cuda->graph_status(b), "graph") != 0)
                    fprintf(stderr, "bench-llm: cuda decode without a graph: %s\n",
                            cuda->graph_status(b));
                double t = now_s();
                rc |= cairn__backend_forward(b, toks, n_prompt, 0, logits, 0);
                const double prompt_tps = n_prompt / (now_s() - t);
                double *tok_s = malloc((size_t)n_gen * sizeof *tok_s);
                if (!tok_s) {
                    fprintf(stderr, "bench-llm: out of memory\n");
                    return 70;
                }
                /* ROUNDS rounds, each the peer's copy right before n_gen decoded tokens: the
                 * bandwidth a shared machine gives moves by 2x within minutes, so each round's
                 * fraction compares the decode with the copy measured next to it, and the
                 * result is the median of the rounds' fractions */
                enum { ROUNDS = 5 };
                double r_tps[ROUNDS], r_bw[ROUNDS], r_frac[ROUNDS], r_med[ROUNDS];
                /* greedy decoding as the engine does it: where the backend has a device
                 * sampler, the pick happens there and only the token comes back */
                const int dev_pick = cairn__backend_can_sample(b);
                const cairn__sample_req greedy = {
                    .temperature = 0.0f, .top_p = 1.0f, .repeat_penalty = 1.0f};
                int32_t next = argmax(logits, m->n_vocab);
                if (dev_pick) { /* capture its graph too, outside the timed rounds */
                    int32_t ignored = 0;
                    rc |= cairn__backend_forward_sample(b, first_tok, n_prompt, &greedy, &ignored);
                }
                for (int r = 0; r < ROUNDS; r++) {
                    r_bw[r] = bi == 0 ? copy_bandwidth(&cp) : peer;
                    t = now_s();
                    for (int i = 0; i < n_gen; i++) {
                        const double t0 = now_s();
                        const int32_t cur = next;
                        if (dev_pick)
                            rc |=
                                cairn__backend_forward_sample(b, cur, n_prompt + i, &greedy, &next);
                        else {
                            rc |= cairn__backend_forward(b, &cur, 1, n_prompt + i, logits, 0);
                            next = argmax(logits, m->n_vocab);
                        }
                        tok_s[i] = now_s() - t0;
                    }
                    r_tps[r] = n_gen / (now_s() - t);
                    r_frac[r] = r_tps[r] * (double)per_tok / r_bw[r];
                    /* the median token: on a shared machine the mean also counts the time
                     * slices other processes took, the median mostly does not */
                    qsort(tok_s, (size_t)n_gen, sizeof *tok_s, cmp_double);
                    r_med[r] = 1.0 / tok_s[n_gen / 2] * (double)per_tok / r_bw[r];
                }
                /* the same steps with the logits copied back and picked on the host: what
                 * the device sampler saves */
                double logits_tps = 0.0;
                if (dev_pick) {
                    t = now_s();
                    for (int i = 0; i < n_gen; i++) {
                        const int32_t cur = next;
                        rc |= cairn__backend_forward(b, &cur, 1, n_prompt + i, logits, 0);
                        next = argmax(logits, m->n_vocab);
                    }
                    logits_tps = n_gen / (now_s() - t);
                }
                /* the same steps sampled as the pipeline's example configuration samples
                 * (temperature 0.7, top-p 0.95: a sort, the weights and the draw on the device);
                 * a random-weight model's flat distribution keeps most of the vocabulary in the
                 * top-p set, the sampler's worst case */
                double sampled_tps = 0.0;
                if (dev_pick) {
                    const cairn__sample_req sq = {
                        .temperature = 0.7f, .top_p = 0.95f, .repeat_penalty = 1.0f};
                    cairn__sample_req q = sq;
                    t = now_s();
                    for (int i = 0; i < n_gen; i++) {
                        const int32_t cur = next;
                        q.r = (double)((i * 7919) % 1000) / 1000.0;
                        rc |= cairn__backend_forward_sample(b, cur, n_prompt + i, &q, &next);
                    }
                    sampled_tps = n_gen / (now_s() - t);
                }
                free(tok_s);
                if (rc != 0) {
                    fprintf(stderr, "bench-llm: %s backend: %s\n", bname, cairn__backend_errmsg(b));
                    return 70;
                }
                const double frac_lo = min_of(r_frac, ROUNDS), frac_hi = max_of(r_frac, ROUNDS);
                const double dec_tps = median(r_tps, ROUNDS), round_bw = median(r_bw, ROUNDS);
                const double frac = median(r_frac, ROUNDS), med_frac = median(r_med, ROUNDS);
                const double roof = round_bw / (double)per_tok;
                if (json)
                    printf("%s\n  {\"backend\": \"%s\", \"size\": \"%s\", \"type\": \"%s\", "
                           "\"device_type\": \"%s\", \"cache_type\": \"%s\", "
                           "\"params\": %llu, \"bytes_per_token\": %llu, \"prompt_tok_s\": %.2f, "
                           "\"decode_tok_s\": %.2f, \"copy_bytes_per_s\": %.0f, "
                           "\"roofline_tok_s\": %.2f, \"fraction\": %.3f, "
                           "\"fraction_min\": %.3f, \"fraction_max\": %.3f, "
                           "\"median_token_fraction\": %.3f, \"decode_via_logits_tok_s\": %.2f, "
                           "\"decode_sampled_tok_s\": %.2f}",
                           first ? "" : ",", row[bi], sz, tn, dev, cairn__cache_type_name(ct),
                           (unsigned long long)m->n_params, (unsigned long long)per_tok, prompt_tps,
                           dec_tps, round_bw, roof, frac, frac_lo, frac_hi, med_frac, logits_tps,
                           sampled_tps);
                else {
                    char range[32];
                    snprintf(range, sizeof range, "%.0f-%.0f%%", 100.0 * frac_lo, 100.0 * frac_hi);
                    char via[32] = "-", smp[32] = "-";
                    if (dev_pick) {
                        snprintf(via, sizeof via, "%.1f", logits_tps);
                        snprintf(smp, sizeof smp, "%.1f", sampled_tps);
                    }
                    printf(
                        "%-6s %-5s %-5s %-4s %-3s %7.1fM %9.1f %12.1f %12.1f %9.1f %10.1f %6.0f%% "
                        "%9s %7.0f%% %10s %9s\n",
                        row[bi], sz, tn, dev, cairn__cache_type_name(ct), (double)m->n_params / 1e6,
                        (double)per_tok / 1e6, prompt_tps, dec_tps, round_bw / 1e9, roof,
                        100.0 * frac, range, 100.0 * med_frac, via, smp);
                }
                if (bi == 1 && ct == CAIRN__CACHE_F32)
                    kernel_tps = dec_tps;
                else if (bi == 2 && !json && dec_tps > 0)
                    printf("%-6s decode: cairn's kernel / cuBLAS = %.2fx\n", "",
                           kernel_tps / dec_tps);
                if (ct == CAIRN__CACHE_F32)
                    f32_tps[bi] = dec_tps;
                else if (!json && f32_tps[bi] > 0)
                    printf("%-6s decode at position %d: f16 cache / f32 cache = %.2fx\n", "",
                           n_prompt, dec_tps / f32_tps[bi]);
                fflush(stdout);
                first = 0;
                free(toks);
                free(logits);
                cairn__backend_free(b);
                b = NULL;
            }
            cairn__model_free(m);
            cairn__gguf_close(g);
            free(buf);
        }
    }
    if (json)
        printf("\n]}\n");
    copy_peer_close(&cp);
    return 0;
}
