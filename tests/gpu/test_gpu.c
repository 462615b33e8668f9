/* tests/gpu/test_gpu.c - the CUDA backend against the CPU backend (suite 'gpu').
 *
 * Skips (a SKIP plan, see skip_all) when the build has no CUDA backend, its module
 * (libcairn-cuda.so, mk_loaded at run time) cannot be mk_loaded, or no usable device is present.
 * With one, random llama/qwen2 models of every weight type (GQA, tied and untied output), and
 * qwen3 (per-head q/k norms), phi3 (fused tensors), gemma2/gemma3 and windowed llama ones of a
 * few, are run
 * through both backends and compared: the reference is the CPU's batched prompt path (dequantize +
 * f32 GEMM: exact float arithmetic on the exact dequantized weights, for every type; the CPU's
 * decode path rounds activations to int8 for Q8_0/Q4_0 and is not a reference for that).
 *
 * (cairn__cpu_prompt_int8 is turned off for that: by default the CPU multiplies quantized
 * weights in int8 on the prompt path too.)
 * Error metric: max |got - ref| / max |ref| over all logits of all positions. Tolerances:
 *   1e-3 for the default device types (f32 for all-F32 models, f16 otherwise): the f16 path
 *        rounds each weight and each matrix-product input to 11 significant bits;
 *   1e-2 for bf16 (CAIRN_CUDA_DTYPE=bf16, 8 significant bits).
 * Prompt (matrix-matrix, chunked) and decode (one token, CUDA graph) paths are each checked,
 * plus: truncate + re-decode bit for bit, greedy tokens equal to the CPU's wherever the CPU's
 * top two logits are well separated, exact resume through the engine, and the error codes.
 * Decode products run in cairn's kernel by default; cases marked gemv=cublas run them through
 * cuBLAS, and dims 44/100 take the kernel's element-wise path; cases marked "split N" share
 * each row pair of a decode product among N warps (CAIRN_CUDA_GV_SPLIT); every split, and the split
 * timed at load, decodes the same logits bit for bit (check_split_bits). Decoding with programmatic
 * dependent launches and without (CAIRN_CUDA_PDL=0), and three times over, gives the same
 * logits bit for bit. Cases marked "cache f16" keep f16 KV caches on both backends.
 * The device sampler is checked alone (the module's sample_logits on awkward logits against the
 * host's cairn__sampler_pick: the same token, or one within rounding of the draw's boundary) and
 * through the engine (device sampling gives the tokens host sampling gives).
 *
 * CAIRN_TEST_QUICK=1 runs three of the cases only (for compute-sanitizer).
 * CAIRN_TEST_BACKEND=cpu runs the same program with the CPU backend in place of CUDA (CPU
 * against CPU): a check of this harness on a machine without a GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/backend.h"
#include "gpu/backend_plugin.h"
#include "gpu/engine.h"
#include "gpu/gguf.h"
#include "gpu/cpu/kernels_cpu.h" /* cairn__cpu_prompt_int8 */
#include "gpu/model.h"
#include "gpu/sample_core.h"
#include "gpu/tokenizer.h"
#include "tests/model/mkmodel.h"
#include "tests/model/sample_check.h"
#include "tests/tap.h"

#include "cairn_errors.h"
/* Without a device: "1..0 # SKIP why" and exit status 77, the skip status of the project's GPU
 * tests (meson runs this one with protocol 'exitcode', which reads 77 as skipped; its TAP lines
 * still go to the log, where tests/gpu/device-check.sh counts them). */
static int skip_all(const char *why)
{
    printf("1..0 # SKIP %s\n", why);
    fflush(stdout);
    return 77;
}

static const char *BK = "cuda"; /* the backend under test */
static int is_cuda = 1;
static const cairn__cuda_plugin *cuda; /* the CUDA module's diagnostics (when is_cuda) */

/* max |a - ref| / max |ref|; NaN anywhere counts as infinitely wrong */
static double rel_err(const float *a, const float *ref, size_t n)
{
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (double)ref[i]);
        if (d != d)
            return INFINITY;
        md = fmax(md, d);
        mr = fmax(mr, fabs((double)ref[i]));
    }
    return md / (mr > 0 ? mr : 1);
}

/* sets or clears CAIRN_CUDA_DTYPE for the next backend created */
static void set_dtype(const char *dt)
{
    if (dt)
        setenv("CAIRN_CUDA_DTYPE", dt, 1);
    else
        unsetenv("CAIRN_CUDA_DTYPE");
}

static const char *dtype_of(const cairn__backend *b) { return cuda ? cuda->dtype(b) : "cpu"; }

static const int32_t PROMPT[] = {1, 17, 250, 3, 99, 42, 42, 7, 280, 5, 61, 200, 13};
#define NP ((int)(sizeof PROMPT / sizeof *PROMPT))

typedef struct {
    const char *arch;
    uint32_t type;
    int tied;
    int dim, heads, kv, ff; /* 0: mkmodel's defaults (64, 4, 2, 128) */
    const char *dtype;      /* CAIRN_CUDA_DTYPE, NULL: default */
    const char *want;       /* expected device type */
    double tol;
    int n_batch;      /* of the backend under test */
    int llama3;       /* rope_freqs factors, rope base 1e6 over half the head, eps 1e-6 */
    const char *gemv; /* CAIRN_CUDA_GEMV, NULL: default (the decode kernel) */
} gcase;

/* CAIRN_CUDA_GV_SPLIT for the next cases (warps that share a decode row pair), NULL: the
 * backend's choice */
static const char *g_split;
/* mk_spec.wtype_fallback for the next cases: the type of the rows theirs cannot hold (0: none) */
static uint32_t g_fallback;
/* mk_spec.swa for the next cases, long runs and paged checks: a sliding window on every layer
 * (a llama file with Mistral's attention.sliding_window), 0: none */
static int g_swa;
/* gemma's settings for the next cases and paged checks: layers (0: mkmodel's), soft-caps of the
 * scores and the logits (0: the defaults, 50 and 30), the global layers' linear rope scaling (0:
 * none) */
static int g_layers;
static float g_attn_cap, g_final_cap, g_rope_scaling;

static void gemma_spec(mk_spec *s)
{
    if (g_layers)
        s->n_layers = g_layers;
    s->attn_softcap = g_attn_cap;
    s->final_softcap = g_final_cap;
    s->rope_scaling = g_rope_scaling;
}

/* one model: CPU batched logits as reference; tested prompt and decode paths against it. With
 * cache_f16 both backends keep an f16 KV cache (they round the same keys and values to the same
 * halves, up to the products' own differences). */
static void check_case_cache(const gcase *c, int cache_f16)
{
    mk_spec s;
    mk_spec_default(&s);
    s.arch = c->arch;
    s.wtype = c->type;
    s.tied = c->tied;
    s.seed = 11 + c->type * 3 + (uint64_t)c->tied;
    s.wtype_fallback = g_fallback;
    s.swa = g_swa;
    gemma_spec(&s);
    if (c->dim) {
        s.dim = c->dim;
        s.n_heads = c->heads;
        s.n_kv_heads = c->kv;
        s.ff = c->ff;
    }
    if (c->llama3) {
        s.rope_freqs = 1;
        s.rope_base = 1e6f;
        s.rope_dim = s.dim / s.n_heads / 2;
        s.rms_eps = 1e-6f;
    }
    char name[176], err[256], win[24] = "";
    if (g_swa)
        snprintf(win, sizeof win, " window %d", g_swa);
    snprintf(name, sizeof name, "%s %s%s%s%s%s%s%s%s%s%s%s%s hd %d gqa %d:%d dim %d ff %d", c->arch,
             cairn__ggml_type_name(c->type), g_fallback ? "+" : "",
             g_fallback ? cairn__ggml_type_name(g_fallback) : "", c->tied ? " tied" : "",
             c->dtype ? " as " : "", c->dtype ? c->dtype : "", c->llama3 ? " rope_freqs" : "",
             c->gemv ? " gemv=cublas" : "", g_split ? " split " : "", g_split ? g_split : "",
             cache_f16 ? " cache f16" : "", win, s.dim / s.n_heads, s.n_heads, s.n_kv_heads, s.dim,
             s.ff);
    mk_loaded L;
    int rc = mk_load(&s, &L, err, sizeof err);
    if (!ok(rc == 0, "%s: model loads (%s)", name, rc ? err : "ok")) {
        mk_unload(&L);
        return;
    }
    const size_t V = (size_t)L.m->n_vocab;
    float *ref = malloc(NP * V * sizeof *ref), *bat = malloc(NP * V * sizeof *bat);
    float *dec = malloc(NP * V * sizeof *dec), *again = malloc(V * sizeof *again);
    cairn__backend *cpu = NULL, *b = NULL;
    const int ct = cache_f16 ? CAIRN__CACHE_F16 : CAIRN__CACHE_F32;
    cairn__backend_opts oc = {.n_ctx = 64, .n_threads = 2, .n_batch = 64, .cache_type = ct};
    cairn__backend_opts ot = {.n_ctx = 64, .n_threads = 2, .n_batch = c->n_batch, .cache_type = ct};
    rc = cairn__backend_new("cpu", L.m, &oc, &cpu, err, sizeof err);
    if (rc == 0)
        rc = cairn__backend_forward(cpu, PROMPT, NP, 0, ref, 1);
    set_dtype(c->dtype);
    if (c->gemv)
        setenv("CAIRN_CUDA_GEMV", c->gemv, 1);
    if (g_split)
        setenv("CAIRN_CUDA_GV_SPLIT", g_split, 1);
    int rt = rc == 0 ? cairn__backend_new(BK, L.m, &ot, &b, err, sizeof err) : -1;
    set_dtype(NULL);
    unsetenv("CAIRN_CUDA_GEMV");
    unsetenv("CAIRN_CUDA_GV_SPLIT");
    if (!ok(rc == 0 && rt == 0 && ref && bat && dec && again, "%s: cpu and %s backends (%s)", name,
            BK, rt ? err : "ok"))
        goto out;
    if (is_cuda && c->want)
        ok(strcmp(dtype_of(b), c->want) == 0, "%s: device type %s (want %s)", name, dtype_of(b),
           c->want);
    /* prompt: chunks of n_batch (a final chunk of one token takes the decode graph) */
    for (size_t i = 0; i < NP * V; i++)
        bat[i] = dec[i] = NAN; /* every logit must be written */
    rc = cairn__backend_forward(b, PROMPT, NP, 0, bat, 1);
    const double e1 = rel_err(bat, ref, NP * V);
    diag("%s: prompt max rel diff %.3g, n_batch %d", name, e1, c->n_batch);
    /* the CPU backend in place of CUDA (CAIRN_TEST_BACKEND=cpu) multiplies quantized weights
     * by int8 activations: test_model's bound for that, not the device's */
    const double tol = !is_cuda && c->type != CAIRN__GGML_F32 && c->type != CAIRN__GGML_F16 &&
                               c->type != CAIRN__GGML_BF16
                           ? 3e-2
                           : c->tol;
    ok(rc == 0 && e1 <= tol, "%s: prompt path vs cpu: %.3g <= %g (%s)", name, e1, tol,
       rc ? cairn__backend_errmsg(b) : "ok");
    /* decode: one token at a time over the same positions (rewrites the cache from 0) */
    rc = 0;
    for (int i = 0; i < NP && rc == 0; i++)
        rc = cairn__backend_forward(b, &PROMPT[i], 1, i, dec + (size_t)i * V, 0);
    const double e2 = rel_err(dec, ref, NP * V), e3 = rel_err(dec, bat, NP * V);
    diag("%s: decode max rel diff %.3g (vs own prompt path %.3g)", name, e2, e3);
    ok(rc == 0 && e2 <= tol, "%s: decode path vs cpu: %.3g <= %g (%s)", name, e2, tol,
       rc ? cairn__backend_errmsg(b) : "ok");
    ok(e3 <= tol, "%s: decode vs prompt path: %.3g <= %g", name, e3, tol);
    if (cuda)
        ok(strncmp(cuda->graph_status(b), "graph", 5) == 0,
           "%s: decode steps run as a CUDA graph (%s)", name, cuda->graph_status(b));
    /* the decode graph replays bit for bit after a truncation */
    cairn__backend_truncate(b, 5);
    rc = cairn__backend_forward(b, &PROMPT[5], 1, 5, again, 0);
    ok(rc == 0 && memcmp(again, dec + 5 * V, V * sizeof *again) == 0 &&
           cairn__backend_n_past(b) == 6,
       "%s: truncate + re-decode reproduces the logits bit for bit", name);
    /* logits NULL (cache only), then the last position with logits: same as the decode run */
    cairn__backend_truncate(b, 0);
    rc = 0;
    for (int i = 0; i < NP - 1 && rc == 0; i++)
        rc = cairn__backend_forward(b, &PROMPT[i], 1, i, NULL, 0);
    if (rc == 0)
        rc = cairn__backend_forward(b, &PROMPT[NP - 1], 1, NP - 1, again, 0);
    ok(rc == 0 && memcmp(again, dec + (size_t)(NP - 1) * V, V * sizeof *again) == 0,
       "%s: logit-less steps write the same cache as logit steps (last logits bit for bit)", name);
out:
    cairn__backend_free(b);
    cairn__backend_free(cpu);
    free(ref);
    free(bat);
    free(dec);
    free(again);
    mk_unload(&L);
}

static void check_case(const gcase *c) { check_case_cache(c, 0); }

/* mkmodel's defaults with this architecture, weight type and shape */
static void shape_spec(mk_spec *s, const char *arch, uint32_t type, int dim, int heads, int kv,
                       int ff)
{
    mk_spec_default(s);
    s->arch = arch;
    s->wtype = type;
    s->dim = dim;
    s->n_heads = heads;
    s->n_kv_heads = kv;
    s->ff = ff;
}

/* The decode products' split changes their speed, never a bit (gemv_kernel sums a row in an
 * order fixed by its length; the backend times the splits at load and keeps the fastest): the
 * prompt decoded token by token at splits 1, 2, 4 and 8 and at the timed choice gives the same
 * logits, bit for bit. The shapes give rows of one segment (128 pieces of 16 bytes) and of several,
 * with a partial last segment and piece, read 16 bytes at a time and element by element; a
 * vocabulary of 9001 (0: the default) makes an output head of an odd number of rows that takes
 * the blocks several rounds, so the segment sums' shared memory is reused between rounds. */
static void check_split_bits(const char *arch, uint32_t type, int dim, int heads, int kv, int ff,
                             int vocab, const char *dtype)
{
    mk_spec s;
    shape_spec(&s, arch, type, dim, heads, kv, ff);
    if (vocab)
        s.vocab = vocab;
    s.seed = 77 + (uint64_t)dim;
    char name[128], err[256];
    snprintf(name, sizeof name, "split bits: %s %s%s%s dim %d ff %d vocab %d", arch,
             cairn__ggml_type_name(type), dtype ? " as " : "", dtype ? dtype : "", dim, ff,
             s.vocab);
    mk_loaded L;
    int rc = mk_load(&s, &L, err, sizeof err);
    const size_t V = (size_t)s.vocab;
    float *ref = malloc(NP * V * sizeof *ref), *got = malloc(NP * V * sizeof *got);
    if (!ok(rc == 0 && ref && got, "%s: model loads (%s)", name, rc ? err : "ok"))
        goto out;
    static const char *const splits[] = {"1", "2", "4", "8", "auto"};
    for (size_t k = 0; k < sizeof splits / sizeof *splits; k++) {
        cairn__backend *b = NULL;
        cairn__backend_opts o = {.n_ctx = 64, .n_threads = 2, .n_batch = 4};
        float *out = k == 0 ? ref : got;
        set_dtype(dtype);
        setenv("CAIRN_CUDA_GV_SPLIT", splits[k], 1);
        rc = cairn__backend_new(BK, L.m, &o, &b, err, sizeof err);
        set_dtype(NULL);
        unsetenv("CAIRN_CUDA_GV_SPLIT");
        for (size_t i = 0; i < NP * V; i++)
            out[i] = NAN;
        for (int i = 0; i < NP && rc == 0; i++)
            rc = cairn__backend_forward(b, &PROMPT[i], 1, i, out + (size_t)i * V, 0);
        if (k == 0)
            ok(rc == 0, "%s: split 1 decodes (%s)", name,
               rc ? (b ? cairn__backend_errmsg(b) : err) : "ok");
        else
            ok(rc == 0 && memcmp(got, ref, NP * V * sizeof *got) == 0,
               "%s: split %s decodes the logits of split 1, bit for bit (%s)", name, splits[k],
               rc ? (b ? cairn__backend_errmsg(b) : err) : "ok");
        cairn__backend_free(b);
    }
out:
    free(ref);
    free(got);
    mk_unload(&L);
}

/* A prompt longer than the attention kernel's warps and one chunk, with a wider head; with
 * cache_f16, both backends keep f16 caches. */
static void check_long(int dim, int heads, int kv, const char *arch, int cache_f16)
{
    mk_spec s;
    shape_spec(&s, arch, CAIRN__GGML_F16, dim, heads, kv, 2 * dim);
    s.ctx = 512;
    s.seed = 31 + (uint64_t)dim;
    s.swa = g_swa;
    char err[256];
    mk_loaded L;
    int rc = mk_load(&s, &L, err, sizeof err);
    const int n = 300;
    int32_t *toks = malloc(n * sizeof *toks);
    const size_t V = (size_t)s.vocab;
    float *ref = malloc(n * V * sizeof *ref), *got = malloc(n * V * sizeof *got),
          *last = malloc(V * sizeof *last);
    cairn__backend *cpu = NULL, *b = NULL;
    const int ct = cache_f16 ? CAIRN__CACHE_F16 : CAIRN__CACHE_F32;
    cairn__backend_opts oc = {.n_ctx = 320, .n_threads = 2, .n_batch = 320, .cache_type = ct};
    cairn__backend_opts ot = {.n_ctx = 320, .n_threads = 2, .n_batch = 128, .cache_type = ct};
    const char *cn = cache_f16 ? (g_swa ? " cache f16, window" : " cache f16")
                     : g_swa   ? " window"
                               : "";
    uint64_t r = 12345;
    for (int i = 0; toks && i < n; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        toks[i] = (int32_t)(r % V);
    }
    if (rc == 0)
        rc = cairn__backend_new("cpu", L.m, &oc, &cpu, err, sizeof err);
    if (rc == 0)
        rc = cairn__backend_new(BK, L.m, &ot, &b, err, sizeof err);
    if (!ok(rc == 0 && toks && ref && got && last, "long %s hd %d%s: setup (%s)", arch, dim / heads,
            cn, rc ? err : "ok"))
        goto out;
    rc = cairn__backend_forward(cpu, toks, n, 0, ref, 1);
    rc |= cairn__backend_forward(b, toks, n, 0, got, 1);
    const double e = rel_err(got, ref, n * V);
    diag("long %s hd %d%s: %d-token prompt in chunks of 128, max rel diff %.3g", arch, dim / heads,
         cn, n, e);
    ok(rc == 0 && e <= 1e-3, "long %s hd %d%s: %d-token prompt vs cpu: %.3g <= 1e-3", arch,
       dim / heads, cn, n, e);
    /* decode at a long position: re-decode the last token */
    rc = cairn__backend_forward(b, &toks[n - 1], 1, n - 1, last, 0);
    const double e2 = rel_err(last, ref + (size_t)(n - 1) * V, V);
    ok(rc == 0 && e2 <= 1e-3, "long %s hd %d%s: decode at position %d vs cpu: %.3g <= 1e-3", arch,
       dim / heads, cn, n - 1, e2);
out:
    cairn__backend_free(b);
    cairn__backend_free(cpu);
    free(toks);
    free(ref);
    free(got);
    free(last);
    mk_unload(&L);
}

/* Decode launch settings must not change a bit: the same model decoded as one-token steps
 * (graphs) with programmatic dependent launches (the default on 9.x) and without
 * (CAIRN_CUDA_PDL=0), and the first three times over (a missing wait would show as a run that
 * differs). 60 positions of a qwen2 (NEOX, biases) model with four layers. */
static void check_launch_modes(void)
{
    if (!is_cuda)
        return;
    mk_spec s;
    mk_spec_default(&s);
    s.arch = "qwen2";
    s.dim = 256;
    s.n_heads = 4;
    s.n_kv_heads = 2;
    s.ff = 512;
    s.n_layers = 4;
    s.wtype = CAIRN__GGML_F16;
    s.ctx = 64;
    s.seed = 77;
    char err[256];
    mk_loaded L;
    int rc = mk_load(&s, &L, err, sizeof err);
    const int n = 60;
    const size_t V = (size_t)s.vocab;
    float *run[4] = {0};
    cairn__backend *b[2] = {NULL, NULL};
    cairn__backend_opts o = {.n_ctx = 64, .n_batch = 8};
    for (int k = 0; k < 4; k++)
        run[k] = malloc((size_t)n * V * sizeof(float));
    if (rc == 0)
        rc = cairn__backend_new("cuda", L.m, &o, &b[0], err, sizeof err);
    setenv("CAIRN_CUDA_PDL", "0", 1);
    if (rc == 0)
        rc = cairn__backend_new("cuda", L.m, &o, &b[1], err, sizeof err);
    unsetenv("CAIRN_CUDA_PDL");
    if (!ok(rc == 0 && run[0] && run[1] && run[2] && run[3], "launch modes: setup (%s)",
            rc ? err : "ok"))
        goto out;
    for (int k = 0; k < 4 && rc == 0; k++) { /* runs 0-2: default, 3: PDL off */
        cairn__backend *bk = b[k == 3];
        cairn__backend_truncate(bk, 0);
        for (int i = 0; i < n && rc == 0; i++) {
            const int32_t t = (int32_t)((i * 7919 + 11) % (int)V);
            rc = cairn__backend_forward(bk, &t, 1, i, run[k] + (size_t)i * V, 0);
        }
    }
    ok(rc == 0 && memcmp(run[0], run[1], (size_t)n * V * sizeof(float)) == 0 &&
           memcmp(run[0], run[2], (size_t)n * V * sizeof(float)) == 0,
       "launch modes: three decode runs give the same logits bit for bit (%s)",
       rc ? cairn__backend_errmsg(b[0]) : "ok");
    ok(rc == 0 && memcmp(run[0], run[3], (size_t)n * V * sizeof(float)) == 0,
       "launch modes: CAIRN_CUDA_PDL=0 gives the same logits bit for bit (%s)",
       rc ? cairn__backend_errmsg(b[1]) : "ok");
    /* exactly "graph": a capture with programmatic dependent launches that failed (and fell
     * back to a graph without them) shows here and only here */
    ok(strcmp(cuda->graph_status(b[0]), "graph") == 0 &&
           strcmp(cuda->graph_status(b[1]), "graph") == 0,
       "launch modes: both decode as CUDA graphs, as launched (%s; %s)", cuda->graph_status(b[0]),
       cuda->graph_status(b[1]));
out:
    cairn__backend_free(b[0]);
    cairn__backend_free(b[1]);
    for (int k = 0; k < 4; k++)
        free(run[k]);
    mk_unload(&L);
}

/* Two backends in one process: the decode kernel's launch limits are per kernel, not per
 * backend, so a backend created for a small model must not break one made before it for a model
 * of wider rows (f32, ff 1536: 6 KiB of staged input). */
static void check_two_backends(void)
{
    if (!is_cuda)
        return;
    mk_spec big, small;
    mk_spec_default(&big);
    mk_spec_default(&small);
    big.dim = 512;
    big.n_heads = 4;
    big.n_kv_heads = 2;
    big.ff = 1536;
    big.wtype = CAIRN__GGML_F32;
    big.seed = 91;
    small.seed = 92;
    char err[256];
    mk_loaded LB, LS;
    int rc = mk_load(&big, &LB, err, sizeof err);
    int rs = mk_load(&small, &LS, err, sizeof err);
    const size_t V = (size_t)big.vocab;
    float *first = malloc(V * sizeof *first), *again = malloc(V * sizeof *again),
          *sl = malloc((size_t)small.vocab * sizeof *sl);
    cairn__backend *bb = NULL, *bs = NULL;
    cairn__backend_opts o = {.n_ctx = 16, .n_batch = 4};
    const int32_t t[2] = {5, 77};
    if (rc == 0 && rs == 0)
        rc = cairn__backend_new("cuda", LB.m, &o, &bb, err, sizeof err);
    if (rc == 0)
        rc = cairn__backend_forward(bb, &t[0], 1, 0, NULL, 0);
    if (rc == 0)
        rc = cairn__backend_forward(bb, &t[1], 1, 1, first, 0);
    if (rc == 0 && rs == 0)
        rc = cairn__backend_new("cuda", LS.m, &o, &bs, err, sizeof err);
    if (rc == 0)
        rc = cairn__backend_forward(bs, &t[0], 1, 0, sl, 0);
    if (rc == 0) {
        cairn__backend_truncate(bb, 1);
        rc = cairn__backend_forward(bb, &t[1], 1, 1, again, 0);
    }
    ok(rc == 0 && rs == 0 && first && again && memcmp(first, again, V * sizeof *first) == 0,
       "two backends: a backend for a smaller model leaves the first one decoding, bit for bit "
       "(%s)",
       rc ? (bb && *cairn__backend_errmsg(bb) ? cairn__backend_errmsg(bb) : err) : "ok");
    cairn__backend_free(bs);
    cairn__backend_free(bb);
    free(first);
    free(again);
    free(sl);
    mk_unload(&LB);
    mk_unload(&LS);
}

static int argmax(const float *x, size_t n)
{
    size_t a = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[a])
            a = i;
    return (int)a;
}

/* Greedy decoding, teacher-forced with the CPU's choice so that one near-tie does not derail the
 * rest: the tested backend must pick the CPU's token wherever the CPU's top two logits are more
 * than 5e-3 * max |logit| apart (five times what the 1e-3 tolerance can move them). */
static void check_greedy(uint32_t type)
{
    mk_spec s;
    mk_spec_default(&s);
    s.dim = 128;
    s.ff = 256;
    s.wtype = type;
    s.seed = 99;
    char err[256];
    mk_loaded L;
    int rc = mk_load(&s, &L, err, sizeof err);
    const size_t V = (size_t)s.vocab;
    float *lc = malloc(V * sizeof *lc), *lt = malloc(V * sizeof *lt);
    cairn__backend *cpu = NULL, *b = NULL;
    cairn__backend_opts o = {.n_ctx = 96, .n_threads = 2};
    if (rc == 0)
        rc = cairn__backend_new("cpu", L.m, &o, &cpu, err, sizeof err);
    if (rc == 0)
        rc = cairn__backend_new(BK, L.m, &o, &b, err, sizeof err);
    if (rc == 0)
        rc = cairn__backend_forward(cpu, PROMPT, NP, 0, lc, 0);
    if (rc == 0)
        rc = cairn__backend_forward(b, PROMPT, NP, 0, lt, 0);
    int compared = 0, differ = 0, pos = NP;
    for (int t = 0; rc == 0 && t < 48; t++) {
        const int ac = argmax(lc, V), at = argmax(lt, V);
        float top = lc[ac], second = -INFINITY, mx = 0;
        for (size_t i = 0; i < V; i++) {
            if ((int)i != ac && lc[i] > second)
                second = lc[i];
            mx = fmaxf(mx, fabsf(lc[i]));
        }
        if (top - second > 5e-3f * mx) {
            compared++;
            if (ac != at) {
                diag("greedy %s step %d: cpu %d (gap %.3g), %s %d", cairn__ggml_type_name(type), t,
                     ac, (double)(top - second), BK, at);
                differ++;
            }
        }
        int32_t tok = ac;
        rc = cairn__backend_forward(cpu, &tok, 1, pos, lc, 0);
        if (rc == 0)
            rc = cairn__backend_forward(b, &tok, 1, pos, lt, 0);
        pos++;
    }
    ok(rc == 0 && differ == 0 && compared >= 24,
       "greedy %s: same token as the cpu at all %d well-separated steps of 48 (%d differ)",
       cairn__ggml_type_name(type), compared, differ);
    cairn__backend_free(b);
    cairn__backend_free(cpu);
    free(lc);
    free(lt);
    mk_unload(&L);
}

typedef struct {
    int32_t tokens[40][40];
    size_t n[40];
    uint8_t state[40][CAIRN__SAMPLER_STATE_BYTES];
    int count;
} checkpoints;

static int on_progress(void *u, const int32_t *gen, size_t n, const uint8_t *st, size_t sl)
{
    checkpoints *c = u;
    if (c->count < 40 && n <= 40 && sl == CAIRN__SAMPLER_STATE_BYTES) {
        memcpy(c->tokens[c->count], gen, n * sizeof *gen);
        c->n[c->count] = n;
        memcpy(c->state[c->count], st, sl);
        c->count++;
    }
    return 0;
}

static int same_result(const cairn__gen_result *a, const cairn__gen_result *b)
{
    return a->finish == b->finish && a->n_tokens == b->n_tokens &&
           memcmp(a->tokens, b->tokens, a->n_tokens * sizeof *a->tokens) == 0 &&
           a->text_len == b->text_len && memcmp(a->text, b->text, a->text_len) == 0;
}

/* an engine over a generated model with a vocabulary, on the backend under test */
typedef struct {
    mk_loaded L;
    cairn__tok *tok;
    cairn__backend *b;
    cairn__engine *e;
    char err[256];
} gen_env;

static int gen_env_open(gen_env *v, uint32_t wtype, uint64_t seed, int n_ctx, int n_batch)
{
    memset(v, 0, sizeof *v);
    mk_spec s;
    mk_spec_default(&s);
    s.tokenizer = 1;
    s.wtype = wtype;
    s.seed = seed;
    int rc = mk_load(&s, &v->L, v->err, sizeof v->err);
    if (rc == 0)
        rc = cairn__tok_load(v->L.g, &v->tok, v->err, sizeof v->err);
    cairn__backend_opts bo = {.n_ctx = n_ctx, .n_threads = 2, .n_batch = n_batch};
    if (rc == 0)
        rc = cairn__backend_new(BK, v->L.m, &bo, &v->b, v->err, sizeof v->err);
    if (rc == 0)
        rc = cairn__engine_new(v->L.m, v->tok, v->b, &v->e);
    return rc;
}

static void gen_env_close(gen_env *v)
{
    cairn__engine_free(v->e);
    cairn__backend_free(v->b);
    cairn__tok_free(v->tok);
    mk_unload(&v->L);
}

/* sampling with temperature through the engine; resuming from every checkpoint must give the
 * uninterrupted result exactly (prompt as one batch, generated tokens one at a time, the
 * earlier ones without logits: the second decode graph) */
static void check_resume(void)
{
    gen_env v;
    int rc = gen_env_open(&v, CAIRN__GGML_Q4_0, 5, 160, 8);
    cairn__engine *e = v.e;
    cairn__tok *tok = v.tok;
    if (!ok(rc == 0, "engine on %s (%s)", BK, rc ? v.err : "ok"))
        goto out;
    const char *prompt = "the cat sat on the mat and the dog sat on the log";
    cairn__gen_opts o;
    cairn__gen_opts_default(&o);
    o.max_tokens = 36;
    o.sampling.seed = 4321;
    o.sampling.temperature = 0.9f;
    o.sampling.top_k = 50;
    o.sampling.top_p = 0.95f;
    o.ignore_eos = 1;
    checkpoints ck;
    memset(&ck, 0, sizeof ck);
    o.on_progress = on_progress;
    o.progress_every = 3;
    o.user = &ck;
    cairn__gen_result r1, r2;
    rc = cairn__engine_generate(e, prompt, strlen(prompt), &o, &r1);
    if (!ok(rc == 0 && r1.n_tokens == 36,
            "engine on %s generates 36 tokens (%s: %zu tokens, finish %s)", BK,
            rc ? cairn__engine_errmsg(e) : "ok", rc ? 0 : r1.n_tokens,
            rc ? "-" : cairn__finish_name(r1.finish))) {
        if (rc == 0)
            cairn__gen_result_free(&r1);
        goto out;
    }
    diag("engine on %s: %zu prompt tokens, %.0f tok/s prompt, %.0f tok/s decode", BK, r1.n_prompt,
         r1.prompt_tps, r1.gen_tps);
    o.on_progress = NULL;
    rc = cairn__engine_generate(e, prompt, strlen(prompt), &o, &r2);
    ok(rc == 0 && same_result(&r1, &r2), "engine on %s: same inputs -> same tokens", BK);
    cairn__gen_result_free(&r2);
    int32_t *ptoks = NULL;
    size_t np = 0;
    int all =
        cairn__tok_encode(tok, prompt, strlen(prompt), 1, 1, &ptoks, &np) == 0 && ck.count == 12;
    for (int c = 0; all && c < ck.count; c++) {
        rc = cairn__engine_resume(e, ptoks, np, ck.tokens[c], ck.n[c], ck.state[c],
                                  CAIRN__SAMPLER_STATE_BYTES, &o, &r2);
        if (rc != 0 || !same_result(&r1, &r2)) {
            diag("checkpoint %d (%zu tokens): rc %d, %zu tokens", c, ck.n[c], rc,
                 rc ? 0 : r2.n_tokens);
            all = 0;
        }
        if (rc == 0)
            cairn__gen_result_free(&r2);
    }
    ok(all,
       "engine on %s: resume from each of %d checkpoints gives exactly the uninterrupted result",
       BK, ck.count);
    free(ptoks);
    cairn__gen_result_free(&r1);
out:
    gen_env_close(&v);
}

/* The device sampler alone: awkward logits over a large vocabulary, every kind of parameters,
 * penalties; each pick must be the host's (or within rounding of a boundary from it). */
/* In place of the module's sample_logits on a backend without a device sampler (the harness
 * check, CAIRN_TEST_BACKEND=cpu): the device algorithm in C. */
static int standin_sample_logits(cairn__backend *b, const float *logits, const cairn__sample_req *q,
                                 int32_t *next)
{
    const int nv = b->model->n_vocab;
    float *lg = malloc((size_t)nv * sizeof *lg);
    uint64_t *keys = malloc((size_t)nv * sizeof *keys);
    if (!lg || !keys) {
        free(lg);
        free(keys);
        return CAIRN_ENOMEM;
    }
    memcpy(lg, logits, (size_t)nv * sizeof *lg);
    *next = mk_standin_pick(q, lg, nv, keys);
    free(lg);
    free(keys);
    return 0;
}

static void check_sampler(void)
{
    int (*sample_logits)(cairn__backend *, const float *, const cairn__sample_req *, int32_t *) =
        cuda ? cuda->sample_logits : standin_sample_logits;
    mk_spec s;
    mk_spec_default(&s);
    s.vocab = 50021; /* past CUB's single-tile sort sizes, and odd */
    s.dim = 64;
    s.n_layers = 1;
    char err[256];
    mk_loaded L;
    cairn__backend *b = NULL;
    int rc = mk_load(&s, &L, err, sizeof err);
    cairn__backend_opts bo = {.n_ctx = 8};
    if (rc == 0)
        rc = cairn__backend_new(BK, L.m, &bo, &b, err, sizeof err);
    const int nv = s.vocab;
    float *lg = malloc((size_t)nv * sizeof *lg), *pl = malloc((size_t)nv * sizeof *pl);
    if (!ok(rc == 0 && lg && pl && (cairn__backend_can_sample(b) || !cuda),
            "device sampler: backend (%s)", rc ? err : "ok"))
        goto out;
    const float temps[] = {0.0f, 0.3f, 1.0f, 4.0f};
    const int topks[] = {0, 1, 40, 1000, nv};
    const float topps[] = {1.0f, 0.9f, 1e-4f};
    const float pens[] = {1.0f, 1.3f};
    int32_t pen[300];
    for (int i = 0; i < 300; i++)
        pen[i] = (int32_t)((i * 7919) % nv); /* distinct: the prime 7919 does not divide nv */
    int cases = 0, fails = 0, near = 0, errors = 0;
    uint64_t seed = 7;
    for (int kind = 0; kind < 4; kind++)
        for (size_t ti = 0; ti < sizeof temps / sizeof *temps; ti++)
            for (size_t ki = 0; ki < sizeof topks / sizeof *topks; ki++)
                for (size_t pi = 0; pi < sizeof topps / sizeof *topps; pi++)
                    for (size_t qi = 0; qi < sizeof pens / sizeof *pens; qi++) {
                        cairn__sampler_params p;
                        cairn__sampler_params_default(&p);
                        p.temperature = temps[ti];
                        p.top_k = topks[ki];
                        p.top_p = topps[pi];
                        p.repeat_penalty = pens[qi];
                        cairn__sampler *hs = NULL;
                        if (cairn__sampler_new(&p, nv, &hs) != 0) {
                            errors++;
                            continue;
                        }
                        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                        mk_awkward_logits(lg, nv, seed, kind);
                        const int np = pens[qi] != 1.0f ? 300 : 0;
                        memcpy(pl, lg, (size_t)nv * sizeof *pl);
                        for (int i = 0; i < np; i++)
                            pl[pen[i]] = cairn__sample_penalize(pl[pen[i]], p.repeat_penalty);
                        /* a random draw, and one just below 1 (the tail, where the sums'
                         * rounding matters most) */
                        for (int d = 0; d < 2; d++) {
                            const double r = d ? 1.0 - 0x1.0p-53 : (double)(seed >> 11) * 0x1.0p-53;
                            const cairn__sample_req q = {.temperature = p.temperature,
                                                         .top_k = p.top_k,
                                                         .top_p = p.top_p,
                                                         .repeat_penalty = p.repeat_penalty,
                                                         .r = r,
                                                         .pen = pen,
                                                         .n_pen = np};
                            int32_t got = -1;
                            if (sample_logits(b, lg, &q, &got) != 0) {
                                if (errors++ == 0)
                                    diag("sample_logits: %s", cairn__backend_errmsg(b));
                            } else if (!mk_pick_agrees(hs, pl, nv, r, got, &near)) {
                                if (fails++ < 5)
                                    diag("kind %d t %g k %d p %g pen %g r %.17g: device %d, host "
                                         "%d",
                                         kind, (double)p.temperature, p.top_k, (double)p.top_p,
                                         (double)p.repeat_penalty, r, got,
                                         cairn__sampler_pick(hs, pl, r));
                            }
                            cases++;
                        }
                        cairn__sampler_free(hs);
                    }
    ok(errors == 0 && fails == 0,
       "device sampler = host pick in %d cases over %d tokens (%d within rounding; %d errors)",
       cases, nv, near, errors);
out:
    free(lg);
    free(pl);
    cairn__backend_free(b);
    mk_unload(&L);
}

/* The engine with the device sampler against the engine sampling on the host, on the same
 * backend: the same tokens, stochastic and greedy, with a penalty. */
static void check_engine_sampling(void)
{
    gen_env v;
    int rc = gen_env_open(&v, CAIRN__GGML_F16, 11, 128, 0);
    cairn__engine *e = v.e;
    if (!ok(rc == 0, "engine sampling on %s (%s)", BK, rc ? v.err : "ok"))
        goto out;
    const char *prompt = "a quick brown fox jumps over the lazy dog";
    const float temps[] = {0.0f, 0.7f, 1.5f};
    const int topks[] = {40, 0, 1};
    for (int c = 0; c < 3; c++) {
        cairn__gen_opts o;
        cairn__gen_opts_default(&o);
        o.max_tokens = 48;
        o.ignore_eos = 1;
        o.sampling.seed = 99 + (uint64_t)c;
        o.sampling.temperature = temps[c];
        o.sampling.top_k = topks[c];
        o.sampling.top_p = 0.9f;
        o.sampling.repeat_penalty = 1.15f;
        cairn__gen_result dev, hst;
        const int r1 = cairn__engine_generate(e, prompt, strlen(prompt), &o, &dev);
        o.host_sampling = 1;
        const int r2 = cairn__engine_generate(e, prompt, strlen(prompt), &o, &hst);
        ok(r1 == 0 && r2 == 0 && same_result(&dev, &hst) &&
               memcmp(dev.state, hst.state, sizeof dev.state) == 0,
           "engine on %s, t %g top-k %d: device sampling = host sampling (%zu tokens; %.0f vs %.0f "
           "tok/s)",
           BK, (double)temps[c], topks[c], r1 ? 0 : dev.n_tokens, r1 ? 0 : dev.gen_tps,
           r2 ? 0 : hst.gen_tps);
        if (r1 == 0)
            cairn__gen_result_free(&dev);
        if (r2 == 0)
            cairn__gen_result_free(&hst);
    }
out:
    gen_env_close(&v);
}

/* Batch invariance on the device (gpu/backend.h, cairn__backend_forward_paged): PG_SEQS
 * sequences of different prompt lengths, joining at different steps, run together over one
 * paged pool (the prompts in the solo backend's chunks, the decode steps batched: more than
 * GVB_MAX of them, so several launches a product), against each run alone on a solo backend of
 * the same configuration: every logit bit for bit; and the solo runs against the CPU. Then the
 * pool's exhaustion: a pool too large for the device is CAIRN_ENOMEM, and a smaller one after it
 * works. gemv: CAIRN_CUDA_GEMV (NULL: the decode kernel; "cublas": one GEMM a sequence). */
#define PG_SEQS 20
#define PG_GEN 12
/* the architecture of the next check_paged calls (NULL: mkmodel's default, llama) */
static const char *g_paged_arch;

static void check_paged(uint32_t wtype, const char *dtype, const char *gemv, int cache_type)
{
    if (!is_cuda)
        return;
    mk_spec s;
    mk_spec_default(&s);
    if (g_paged_arch)
        s.arch = g_paged_arch;
    s.swa = g_swa;
    gemma_spec(&s);
    s.dim = 128;
    s.n_heads = 4;
    s.n_kv_heads = 2;
    s.ff = 256;
    s.wtype = wtype;
    s.seed = 4242 + wtype;
    char err[256];
    mk_loaded L;
    int rc = mk_load(&s, &L, err, sizeof err);
    const size_t V = (size_t)s.vocab;
    const int nb = 24, n_ctx = 96;
    cairn__backend_opts o = {
        .n_ctx = n_ctx, .n_threads = 2, .n_batch = nb, .cache_type = cache_type};
    cairn__backend *solo = NULL, *pg = NULL, *cpu = NULL;
    int32_t *prompt[PG_SEQS] = {0}, *blocks[PG_SEQS] = {0};
    int len[PG_SEQS], fed[PG_SEQS], done[PG_SEQS], n_blk[PG_SEQS];
    float *want = malloc((size_t)PG_SEQS * (PG_GEN + 1) * V * sizeof(float));
    float *got = malloc((size_t)PG_SEQS * (PG_GEN + 1) * V * sizeof(float));
    float *ref = malloc(V * sizeof(float));
    char what[96];
    snprintf(what, sizeof what, "paged: %s%s%s%s%s%s%s", g_paged_arch ? g_paged_arch : "",
             g_paged_arch ? " " : "", g_swa ? "window " : "", cairn__ggml_type_name(wtype),
             dtype ? " as " : "", dtype ? dtype : "", gemv ? ", gemv cublas" : "");
    set_dtype(dtype);
    if (gemv)
        setenv("CAIRN_CUDA_GEMV", gemv, 1);
    if (rc == 0)
        rc = cairn__backend_new("cuda", L.m, &o, &solo, err, sizeof err);
    if (rc == 0)
        rc = cairn__backend_new("cuda", L.m, &o, &pg, err, sizeof err);
    if (rc == 0)
        rc = cairn__backend_new("cpu", L.m, &o, &cpu, err, sizeof err);
    unsetenv("CAIRN_CUDA_GEMV");
    set_dtype(NULL);
    if (!ok(rc == 0 && want && got && ref && cairn__backend_can_page(pg),
            "%s, %s cache: setup (%s)", what, cairn__cache_type_name(cache_type), rc ? err : "ok"))
        goto out;
    int n_blocks = 0;
    for (int k = 0; k < PG_SEQS; k++) {
        len[k] = 1 + (k * 7) % 40; /* 1 .. 40: one token, a chunk and one, several chunks */
        prompt[k] = malloc((size_t)len[k] * sizeof(int32_t));
        blocks[k] = malloc((size_t)(n_ctx / CAIRN__KV_BLOCK) * sizeof(int32_t));
        for (int i = 0; i < len[k]; i++)
            prompt[k][i] = (int32_t)((k * 31 + i * 977 + 3) % (int)V);
        n_blocks += (len[k] + PG_GEN) / CAIRN__KV_BLOCK + 1;
        fed[k] = done[k] = n_blk[k] = 0;
    }
    /* alone: the prompt through forward() (its chunks), then PG_GEN decode steps */
    double worst = 0;
    for (int k = 0; k < PG_SEQS && rc == 0; k++) {
        float *w = want + (size_t)k * (PG_GEN + 1) * V;
        cairn__backend_truncate(solo, 0);
        cairn__backend_truncate(cpu, 0);
        rc = cairn__backend_forward(solo, prompt[k], len[k], 0, w, 0);
        if (rc == 0)
            rc = cairn__backend_forward(cpu, prompt[k], len[k], 0, ref, 0);
        if (rc == 0)
            worst = fmax(worst, rel_err(w, ref, V));
        for (int j = 0; j < PG_GEN && rc == 0; j++) {
            const int32_t t = (int32_t)((k * 131 + j * 7919 + 5) % (int)V);
            rc = cairn__backend_forward(solo, &t, 1, len[k] + j, w + (size_t)(j + 1) * V, 0);
            if (rc == 0 && j == PG_GEN - 1 &&
                (rc = cairn__backend_forward(cpu, &t, 1, len[k] + j, ref, 0)) == 0)
                worst = fmax(worst, rel_err(w + (size_t)(j + 1) * V, ref, V));
        }
    }
    if (!ok(rc == 0, "%s: solo runs (%s)", what, rc ? cairn__backend_errmsg(solo) : "ok"))
        goto out;
    /* check_case's tolerances (1e-3, bf16 1e-2) with a margin: this is the sanity check, the
     * bits below are the point */
    const double tol = dtype && strcmp(dtype, "bf16") == 0 ? 2e-2 : 2e-3;
    ok(worst < tol, "%s: solo cuda within %g of cpu (max rel diff %.3g)", what, tol, worst);
    /* together: sequence k joins at step k % 5; blocks handed out as the sequences grow, so
     * every table interleaves with the others */
    rc = cairn__backend_kv_pool(pg, n_blocks);
    int next_block = 0, steps = 0, max_dec = 0;
    for (int step = 0; rc == 0; step++) {
        cairn__kv_seq e[PG_SEQS];
        int32_t tok[PG_SEQS];
        int n = 0, n_dec = 0;
        for (int k = 0; k < PG_SEQS; k++) {
            if (step < k % 5 || done[k] == PG_GEN + 1)
                continue;
            float *g = got + (size_t)k * (PG_GEN + 1) * V;
            cairn__kv_seq *q = &e[n++];
            if (fed[k] < len[k]) { /* the next chunk of the prompt */
                q->n = len[k] - fed[k] < nb ? len[k] - fed[k] : nb;
                q->tokens = prompt[k] + fed[k];
                q->pos = fed[k];
                q->logits = fed[k] + q->n == len[k] ? g : NULL;
            } else {
                const int j = done[k] - 1;
                tok[k] = (int32_t)((k * 131 + j * 7919 + 5) % (int)V);
                q->n = 1;
                q->tokens = &tok[k];
                q->pos = len[k] + j;
                q->logits = g + (size_t)(j + 1) * V;
            }
            n_dec += q->n == 1;
            while (n_blk[k] * CAIRN__KV_BLOCK < q->pos + q->n)
                blocks[k][n_blk[k]++] = next_block++;
            q->blocks = blocks[k];
        }
        if (n == 0)
            break;
        max_dec = n_dec > max_dec ? n_dec : max_dec;
        rc = cairn__backend_forward_paged(pg, e, n);
        for (int k = 0; k < PG_SEQS && rc == 0; k++) {
            if (step < k % 5 || done[k] == PG_GEN + 1)
                continue;
            if (fed[k] < len[k]) {
                fed[k] += len[k] - fed[k] < nb ? len[k] - fed[k] : nb;
                if (fed[k] == len[k])
                    done[k] = 1;
            } else
                done[k]++;
        }
        steps++;
    }
    size_t diff = 0;
    for (size_t i = 0; rc == 0 && i < (size_t)PG_SEQS * (PG_GEN + 1) * V; i++)
        diff += memcmp(&got[i], &want[i], sizeof(float)) != 0;
    ok(rc == 0 && diff == 0,
       "%s, %s cache: %d sequences batched (up to %d decode entries a step, %d steps) give their "
       "solo logits bit for bit (%zu of %zu differ; %s)",
       what, cairn__cache_type_name(cache_type), PG_SEQS, max_dec, steps, diff,
       (size_t)PG_SEQS * (PG_GEN + 1) * V, rc ? cairn__backend_errmsg(pg) : "ok");
    /* the pool's exhaustion: clear, recoverable */
    if (!gemv && cache_type == CAIRN__CACHE_F32 && wtype == CAIRN__GGML_F16) {
        const int r1 = cairn__backend_kv_pool(pg, 1 << 30);
        diag("a pool of 2^30 blocks: %s", cairn__backend_errmsg(pg));
        const int r2 = cairn__backend_kv_pool(pg, 8);
        ok(r1 == CAIRN_ENOMEM && r2 == 0,
           "paged: a pool larger than the device is CAIRN_ENOMEM (%d), a smaller one then works "
           "(%d)",
           r1, r2);
    }
out:
    for (int k = 0; k < PG_SEQS; k++) {
        free(prompt[k]);
        free(blocks[k]);
    }
    free(want);
    free(got);
    free(ref);
    cairn__backend_free(solo);
    cairn__backend_free(pg);
    cairn__backend_free(cpu);
    mk_unload(&L);
}

static void check_errors(void)
{
    mk_spec s;
    mk_spec_default(&s);
    char err[256];
    mk_loaded L;
    int rc = mk_load(&s, &L, err, sizeof err);
    cairn__backend *b = NULL;
    cairn__backend_opts o = {.n_ctx = 8, .n_threads = 1};
    if (rc == 0)
        rc = cairn__backend_new(BK, L.m, &o, &b, err, sizeof err);
    float *lg = malloc((size_t)s.vocab * sizeof *lg);
    ok(rc == 0 && lg && cairn__backend_forward(b, PROMPT, 9, 0, lg, 0) == CAIRN_ECONTEXT,
       "9 tokens into a context of 8 -> ECONTEXT (%s)", cairn__backend_errmsg(b));
    ok(cairn__backend_forward(b, PROMPT, 8, 0, lg, 0) == 0, "8 tokens fit a context of 8");
    ok(cairn__backend_forward(b, PROMPT, 1, 8, lg, 0) == CAIRN_ECONTEXT,
       "a 9th position -> ECONTEXT");
    int32_t bad = 100000;
    ok(cairn__backend_forward(b, &bad, 1, 0, lg, 0) == CAIRN_EINVAL,
       "token outside the vocabulary -> EINVAL");
    cairn__backend_free(b);
    b = NULL;
    if (is_cuda) {
        cairn__backend_opts od = {.n_ctx = 8, .device = 999};
        rc = cairn__backend_new("cuda", L.m, &od, &b, err, sizeof err);
        ok(rc == CAIRN_ENODEVICE && b == NULL && strstr(err, "no CUDA device"),
           "device 999 -> ENODEVICE (%s)", err);
        set_dtype("fp8");
        rc = cairn__backend_new("cuda", L.m, &o, &b, err, sizeof err);
        set_dtype(NULL);
        ok(rc == CAIRN_EINVAL && b == NULL && strstr(err, "CAIRN_CUDA_DTYPE"),
           "CAIRN_CUDA_DTYPE=fp8 -> EINVAL (%s)", err);
        setenv("CAIRN_CUDA_GEMV", "cutlass", 1);
        rc = cairn__backend_new("cuda", L.m, &o, &b, err, sizeof err);
        unsetenv("CAIRN_CUDA_GEMV");
        ok(rc == CAIRN_EINVAL && b == NULL && strstr(err, "CAIRN_CUDA_GEMV"),
           "CAIRN_CUDA_GEMV=cutlass -> EINVAL (%s)", err);
        setenv("CAIRN_CUDA_GV_SPLIT", "3", 1);
        rc = cairn__backend_new("cuda", L.m, &o, &b, err, sizeof err);
        unsetenv("CAIRN_CUDA_GV_SPLIT");
        ok(rc == CAIRN_EINVAL && b == NULL && strstr(err, "CAIRN_CUDA_GV_SPLIT"),
           "CAIRN_CUDA_GV_SPLIT=3 -> EINVAL (%s)", err);
        setenv("CAIRN_CUDA_PDL", "yes", 1);
        rc = cairn__backend_new("cuda", L.m, &o, &b, err, sizeof err);
        unsetenv("CAIRN_CUDA_PDL");
        ok(rc == CAIRN_EINVAL && b == NULL && strstr(err, "CAIRN_CUDA_PDL"),
           "CAIRN_CUDA_PDL=yes -> EINVAL (%s)", err);
        rc = cairn__backend_new("auto", L.m, &o, &b, err, sizeof err);
        ok(rc == 0 && strcmp(cairn__backend_name(b), "cuda") == 0,
           "auto picks cuda when a device is present (%s)", rc ? err : cairn__backend_name(b));
        cairn__backend_free(b);
    }
    free(lg);
    mk_unload(&L);
}

int main(void)
{
    /* the reference: the CPU's prompt path in float (dequantize + sgemm), not its default int8
     * products on quantized weights, which round the activations as decode does */
    cairn__cpu_prompt_int8 = 0;
    const char *env = getenv("CAIRN_TEST_BACKEND");
    if (env && *env) {
        BK = env;
        is_cuda = strcmp(env, "cuda") == 0;
    }
    /* probe: is there a backend to test? */
    {
        mk_spec s;
        mk_spec_default(&s);
        char err[256];
        mk_loaded L;
        int rc = mk_load(&s, &L, err, sizeof err);
        if (rc != 0) {
            mk_unload(&L);
            return skip_all("cannot build the probe model");
        }
        cairn__backend *b = NULL;
        cairn__backend_opts o = {.n_ctx = 8};
        rc = cairn__backend_new(BK, L.m, &o, &b, err, sizeof err);
        cairn__backend_free(b);
        mk_unload(&L);
        if (rc == CAIRN_ENODEVICE || rc == CAIRN_EUNSUPPORTED)
            return skip_all(err);
        if (!ok(rc == 0, "%s backend starts (%s)", BK, rc ? err : "ok"))
            return tap_done();
        /* the backend came from the module, so this only fetches what is already mk_loaded */
        if (is_cuda) {
            rc = cairn__cuda_plugin_load(&cuda, err, sizeof err);
            if (!ok(rc == 0, "CUDA module's diagnostics (%s)", rc ? err : "ok"))
                return tap_done();
        }
    }
    if (getenv("CAIRN_TEST_QUICK")) { /* a few cases, e.g. under compute-sanitizer */
        const gcase a = {"llama", CAIRN__GGML_Q8_0, 0, 0, 0, 0, 0, NULL, "f16", 1e-3, 4, 0, NULL};
        const gcase q = {"qwen2", CAIRN__GGML_BF16, 1,    0,  0, 0,   0,
                         "bf16",  "bf16",           1e-2, 64, 0, NULL};
        const gcase sq = {"qwen2", CAIRN__GGML_F16, 0,    256, 4, 2,   512,
                          NULL,    "f16",           1e-3, 4,   0, NULL};
        const gcase w = {"qwen3", CAIRN__GGML_F16, 0, 0, 0, 0, 0, NULL, "f16", 1e-3, 4, 0, NULL};
        check_case(&a);
        check_case(&q);
        check_case(&w);
        g_split = "8";
        check_case(&sq);
        g_split = NULL;
        check_long(512, 2, 1, "llama", 0);
        check_long(512, 4, 2, "qwen2", 1);
        check_launch_modes();
        check_paged(CAIRN__GGML_F16, NULL, NULL, CAIRN__CACHE_F32);
        check_sampler();
        return tap_done();
    }
    const uint32_t flat[] = {CAIRN__GGML_F32,  CAIRN__GGML_F16,  CAIRN__GGML_BF16,
                             CAIRN__GGML_Q8_0, CAIRN__GGML_Q4_0, CAIRN__GGML_Q4_1,
                             CAIRN__GGML_Q5_0, CAIRN__GGML_Q5_1, CAIRN__GGML_IQ4_NL};
    for (size_t i = 0; i < sizeof flat / sizeof *flat; i++) {
        const char *want = flat[i] == CAIRN__GGML_F32 ? "f32" : "f16";
        /* n_batch 4: chunks 4,4,4,1 (the last through the decode graph); 64: one chunk */
        const gcase a = {"llama", flat[i], (int)(i % 2), 0, 0, 0, 0, NULL, want, 1e-3, 4, 0, NULL};
        const gcase q = {"qwen2", flat[i], (int)((i + 1) % 2), 0, 0, 0, 0, NULL, want, 1e-3, 64,
                         0,       NULL};
        check_case(&a);
        check_case(&q);
    }
    /* K-quants need rows of 256; heads of 64 and 128, GQA 4:1 and none */
    const gcase k1 = {"llama", CAIRN__GGML_Q4_K, 0, 256, 4, 1, 512, NULL, "f16", 1e-3, 5, 0, NULL};
    const gcase a_w = {"llama", CAIRN__GGML_F16, 0, 0, 0, 0, 0, NULL, "f16", 1e-3, 4, 0, NULL};
    const gcase k2 = {"qwen2", CAIRN__GGML_Q6_K, 1, 256, 2, 2, 512, NULL, "f16", 1e-3, 64, 0, NULL};
    check_case(&k1);
    check_case(&k2);
    /* qwen3: per-head q/k norms between the Q/K/V product and rope (qk_norm_kernel), in prompt
     * chunks, in the decode graph (whose Q/K/V product then stores its row), through cuBLAS */
    const gcase w1 = {"qwen3", CAIRN__GGML_F16, 0, 0, 0, 0, 0, NULL, "f16", 1e-3, 4, 0, NULL};
    const gcase w2 = {"qwen3", CAIRN__GGML_Q8_0, 1, 256, 4, 2, 512, NULL, "f16", 1e-3, 64, 0, NULL};
    const gcase w3 = {"qwen3", CAIRN__GGML_F32, 1, 0, 0, 0, 0, NULL, "f32", 1e-3, 4, 0, "cublas"};
    check_case(&w1);
    check_case(&w2);
    check_case(&w3);
    check_case_cache(&w1, 1);
    /* a sliding window on every layer (Mistral's llama files): 5 positions of the 13-token
     * prompt, in chunks of 4 and one of 64 and through the decode graph; 100 of a 300-token
     * prompt in chunks of 128 (the tiles skip the chunks before their window) */
    g_swa = 5;
    check_case(&a_w);
    check_case(&k1);
    /* phi3: q/k/v and gate/up as row views of fused tensors, NEOX rope, its window */
    const gcase p3 = {"phi3", CAIRN__GGML_Q8_0, 0, 0, 0, 0, 0, NULL, "f16", 1e-3, 4, 0, NULL};
    check_case(&p3);
    g_swa = 0;
    check_case(&p3);
    /* gemma2: the embedding's scale, post-norms, the GELU gate, soft-capped scores and logits
     * (caps of 1 and 3 that change them all, then the defaults), the window on even layers;
     * gemma3: q/k norms,
     * five sliding layers of six with their own rope base, linear scaling on the global ones */
    const gcase g2 = {"gemma2", CAIRN__GGML_F16, 1, 0, 0, 0, 0, NULL, "f16", 1e-3, 4, 0, NULL};
    const gcase g2q = {"gemma2", CAIRN__GGML_Q8_0, 1, 256, 4, 2, 512, NULL, "f16", 1e-3, 64, 0,
                       NULL};
    const gcase g3 = {"gemma3", CAIRN__GGML_F16, 1, 0, 0, 0, 0, NULL, "f16", 1e-3, 4, 0, NULL};
    const gcase g3c = {"gemma3", CAIRN__GGML_F32, 1,    0,  0, 0,       0,
                       NULL,     "f32",           1e-3, 64, 0, "cublas"};
    g_attn_cap = 1.0f, g_final_cap = 3.0f;
    g_swa = 5;
    check_case(&g2);
    g_swa = 0;
    g_attn_cap = g_final_cap = 0; /* the files' caps, 50 and 30 */
    check_case(&g2q);
    g_layers = 7;
    g_swa = 5;
    check_case(&g3);
    check_case_cache(&g3, 1);
    g_swa = 0;
    g_rope_scaling = 8.0f;
    check_case(&g3c);
    g_rope_scaling = 0;
    g_layers = 0;
    g_swa = 100;
    check_long(512, 4, 2, "llama", 0);
    check_long(512, 4, 2, "llama", 1);
    g_swa = 0;
    /* the other 256-weight types (dequantized on the host as the rest) */
    static const uint32_t k256[] = {CAIRN__GGML_Q2_K, CAIRN__GGML_Q3_K, CAIRN__GGML_Q5_K,
                                    CAIRN__GGML_IQ4_XS};
    for (size_t i = 0; i < sizeof k256 / sizeof *k256; i++) {
        const gcase k = {i % 2 ? "qwen2" : "llama",
                         k256[i],
                         (int)(i % 2),
                         256,
                         4,
                         1,
                         512,
                         NULL,
                         "f16",
                         1e-3,
                         5,
                         0,
                         NULL};
        check_case(&k);
    }
    /* llama-quantize's Q4_K_M where rows are not a multiple of 256: ffn_down (ff 288) in Q5_0 */
    const gcase km = {"llama", CAIRN__GGML_Q4_K, 0, 256, 4, 2, 288, NULL, "f16", 1e-3, 4, 0, NULL};
    g_fallback = CAIRN__GGML_Q5_0;
    check_case(&km);
    g_fallback = 0;
    /* Llama 3.x: rope frequency factors, base 1e6 over half of a head of 64, eps 1e-6 */
    const gcase l3 = {"llama", CAIRN__GGML_F16, 0, 256, 4, 2, 512, NULL, "f16", 1e-3, 4, 1, NULL};
    check_case(&l3);
    /* bf16 on request, and f32 forced on a quantized model */
    const gcase b1 = {"llama", CAIRN__GGML_Q8_0, 0, 0, 0, 0, 0, "bf16", "bf16", 1e-2, 4, 0, NULL};
    const gcase b2 = {"qwen2", CAIRN__GGML_BF16, 1, 0, 0, 0, 0, "bf16", "bf16", 1e-2, 64, 0, NULL};
    const gcase b3 = {"llama", CAIRN__GGML_F32, 1, 0, 0, 0, 0, "bf16", "bf16", 1e-2, 64, 0, NULL};
    const gcase f1 = {"qwen2", CAIRN__GGML_Q4_0, 0, 0, 0, 0, 0, "f32", "f32", 1e-3, 4, 0, NULL};
    const gcase f2 = {"llama", CAIRN__GGML_F16, 0, 0, 0, 0, 0, "f16", "f16", 1e-3, 64, 0, NULL};
    check_case(&b1);
    check_case(&b2);
    check_case(&b3);
    check_case(&f1);
    check_case(&f2);
    /* the decode product's element-wise path: rows of 44 and 100 elements are not whole 16-byte
     * pieces of f16 (dim 44 is of f32); 3 rows of 8 warps: a block with idle warps */
    const gcase o1 = {"llama", CAIRN__GGML_F16, 0, 44, 2, 1, 100, NULL, "f16", 1e-3, 4, 0, NULL};
    const gcase o2 = {"qwen2", CAIRN__GGML_F32, 1, 44, 2, 1, 100, NULL, "f32", 1e-3, 64, 0, NULL};
    const gcase o3 = {"llama", CAIRN__GGML_BF16, 1,    44, 2, 1,   100,
                      "bf16",  "bf16",           1e-2, 4,  0, NULL};
    check_case(&o1);
    check_case(&o2);
    check_case(&o3);
    /* decode products through cuBLAS (CAIRN_CUDA_GEMV=cublas), the decode kernel's peer */
    const gcase c1 = {"llama", CAIRN__GGML_Q8_0, 0, 256, 4, 2, 512, NULL, "f16", 1e-3, 4,
                      0,       "cublas"};
    const gcase c2 = {"qwen2", CAIRN__GGML_F32, 1,    44, 2, 1,       100,
                      NULL,    "f32",           1e-3, 4,  0, "cublas"};
    check_case(&c1);
    check_case(&c2);
    /* an f16 KV cache on both sides: f16 and f32 devices, the decode kernel and cuBLAS */
    check_case_cache(&l3, 1);
    check_case_cache(&o2, 1);
    check_case_cache(&c1, 1);
    /* a decode row pair shared by 2, 4 or 8 warps (CAIRN_CUDA_GV_SPLIT; the backend picks the
     * split for the model and the GPU, and these small models get 1): every prologue and
     * epilogue, rows of 16-byte pieces and element by element, slices with nothing to do
     * (dim 44 over 4 warps: elements 0-31 and 32-43), and slices long enough for the unrolled
     * loop, of unequal length and starting part-way into the row (ff 2000 over 2 warps: the
     * down product's 250 pieces as 128 and 122) */
    const gcase s1 = {"qwen2", CAIRN__GGML_F32, 1, 0, 0, 0, 0, NULL, "f32", 1e-3, 4, 0, NULL};
    const gcase s2 = {"qwen2", CAIRN__GGML_BF16, 1,    256, 4, 2,   512,
                      "bf16",  "bf16",           1e-2, 64,  0, NULL};
    const gcase s3 = {"llama", CAIRN__GGML_F16, 0, 512, 8, 2, 2000, NULL, "f16", 1e-3, 4, 0, NULL};
    g_split = "2";
    check_case(&s1);
    check_case(&s3);
    g_split = "4";
    check_case(&o1);
    g_split = "8";
    check_case(&k1);
    check_case(&s2);
    check_case_cache(&k1, 1);
    g_split = NULL;
    check_split_bits("llama", CAIRN__GGML_F16, 256, 4, 2, 4104, 0, NULL); /* down: 5 segments */
    check_split_bits("qwen2", CAIRN__GGML_F32, 1032, 12, 4, 1100, 9001, NULL); /* 3 each */
    check_split_bits("llama", CAIRN__GGML_F16, 100, 2, 1, 2052, 0, NULL); /* element by element */
    check_split_bits("llama", CAIRN__GGML_BF16, 512, 8, 2, 2048, 0, "bf16");
    /* long prompts: head 128 with GQA 2:1 (NEOX), head 256 (the attention kernel's limit); the
     * first also over f16 caches (many keys per split) */
    check_long(512, 4, 2, "qwen2", 0);
    check_long(512, 2, 1, "llama", 0);
    check_long(512, 4, 2, "qwen2", 1);
    check_long(512, 2, 1, "llama", 1);
    check_launch_modes();
    /* batch invariance over the paged pool: f16 and f32 devices, quantized weights, an f16
     * cache, bf16, and products through cuBLAS */
    check_paged(CAIRN__GGML_F16, NULL, NULL, CAIRN__CACHE_F32);
    check_paged(CAIRN__GGML_F32, NULL, NULL, CAIRN__CACHE_F32);
    check_paged(CAIRN__GGML_Q8_0, NULL, NULL, CAIRN__CACHE_F16);
    check_paged(CAIRN__GGML_BF16, "bf16", NULL, CAIRN__CACHE_F32);
    check_paged(CAIRN__GGML_F16, NULL, "cublas", CAIRN__CACHE_F32);
    g_paged_arch = "qwen3"; /* the q/k norms before the paged bias/rope/KV step */
    check_paged(CAIRN__GGML_F16, NULL, NULL, CAIRN__CACHE_F32);
    g_paged_arch = NULL;
    g_swa = 9; /* a window shorter than the sequences: the paged split of its keys */
    check_paged(CAIRN__GGML_F16, NULL, NULL, CAIRN__CACHE_F32);
    g_paged_arch = "gemma2"; /* post-norms, GELU, soft-caps, the window on alternate layers */
    g_attn_cap = 1.0f, g_final_cap = 3.0f;
    check_paged(CAIRN__GGML_F16, NULL, NULL, CAIRN__CACHE_F32);
    g_attn_cap = g_final_cap = 0;
    g_paged_arch = "gemma3"; /* and q/k norms, the local layers' rope */
    g_layers = 7;
    check_paged(CAIRN__GGML_F16, NULL, NULL, CAIRN__CACHE_F32);
    g_layers = 0;
    g_paged_arch = NULL;
    g_swa = 0;
    check_two_backends();
    check_greedy(CAIRN__GGML_F16);
    check_greedy(CAIRN__GGML_Q8_0);
    check_resume();
    check_sampler();
    check_engine_sampling();
    check_errors();
    return tap_done();
}
