/* tests/model/test_model.c - loader errors, and the CPU backend against the float64 reference.
 *
 * Tolerances (max |got - ref| / max |ref| over all logits):
 *   1e-4 for F32/F16/BF16 on both paths, and for every type on the prompt (batched) path with
 *        cairn__cpu_prompt_int8 off: both multiply the same dequantized weights in float; only
 *        summation order differs.
 *   2e-2 for Q8_0/Q4_0 decode, and their prompt path as it runs by default (int8): those
 *        kernels round the activation vector to int8 per 32 values (as llama.cpp does) before
 *        the integer dot product, a ~0.4% error per element that the reference, working on
 *        exact activations, does not make.
 *   3e-2 for Q4_K/Q6_K, likewise: the same int8 activation, in models 4x wider (rows of 256);
 *        the largest error seen is 2.0e-2. test_kernels.c holds every quantized kernel to 1e-4 of
 *        a float64 product with the int8-rounded activation, which is what they compute.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h> /* strncasecmp */

#include "gpu/backend.h"
#include "gpu/cpu/blas.h"
#include "gpu/gguf.h"
#include "gpu/cpu/kernels_cpu.h"
#include "gpu/model.h"
#include "gpu/quant.h"
#include "tests/model/mkmodel.h"
#include "tests/model/ref_forward.h"
#include "tests/tap.h"

#include "cairn_errors.h"
static double rel_err_d(const float *got, const double *ref, size_t n)
{
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)got[i] - ref[i]));
        mr = fmax(mr, fabs(ref[i]));
    }
    return md / (mr > 0 ? mr : 1);
}

static double rel_err_f(const float *a, const float *b, size_t n)
{
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - b[i]));
        mr = fmax(mr, fabs((double)b[i]));
    }
    return md / (mr > 0 ? mr : 1);
}

/* F32, F16 and BF16 multiply in float; every other type with the int8 activation */
static int is_float_type(uint32_t t)
{
    return t == CAIRN__GGML_F32 || t == CAIRN__GGML_F16 || t == CAIRN__GGML_BF16;
}

static const int32_t PROMPT[] = {1, 17, 250, 3, 99, 42, 42, 7, 280, 5};
#define NP ((int)(sizeof PROMPT / sizeof *PROMPT))

/* Batched prompt logits of m on a fresh CPU backend, relative to ref; -1 on failure. In float
 * (cairn__cpu_prompt_int8 off): the callers tell a misread key by an error of 1e-2, which the
 * int8 products alone come near. */
static double prompt_err(const cairn__model *m, const double *ref, float *out)
{
    char err[256];
    cairn__backend *b = NULL;
    cairn__backend_opts o = {.n_ctx = 64, .n_threads = 2, .n_batch = 4};
    int rc = cairn__backend_new("cpu", m, &o, &b, err, sizeof err);
    cairn__cpu_prompt_int8 = 0;
    if (rc == 0)
        rc = cairn__backend_forward(b, PROMPT, NP, 0, out, 1);
    cairn__cpu_prompt_int8 = 1;
    cairn__backend_free(b);
    return rc ? -1.0 : rel_err_d(out, ref, NP * (size_t)m->n_vocab);
}

/* The reference takes rope base, rope dimensions and epsilon from the spec, so the comparison
 * only proves the loader read them if getting them wrong would show. It would: with each value
 * in turn replaced by what a loader that ignored its key would use (the defaults 10000,
 * head_dim, 1e-5), the engine's logits must leave the tolerance by far. */
static void check_hparams_matter(cairn__model *m, const char *arch, const char *tn,
                                 const double *ref, float *out)
{
    const float base = m->rope_base, eps = m->rms_eps;
    const int rdim = m->rope_dim;
    m->rope_base = 10000.0f;
    const double eb = prompt_err(m, ref, out);
    m->rope_base = base;
    m->rope_dim = m->head_dim;
    const float *ff = m->rope_freqs; /* holds rope_dim/2 factors: none past them to read */
    m->rope_freqs = NULL;
    const double ed = prompt_err(m, ref, out);
    m->rope_dim = rdim;
    m->rope_freqs = ff;
    m->rms_eps = 1e-5f;
    const double ee = prompt_err(m, ref, out);
    m->rms_eps = eps;
    ok(eb > 1e-2 && ed > 1e-2 && ee > 1e-2,
       "%s %s: the reference check would catch a misread key: rel err with freq_base 10000 "
       "%.3g, rope dims = head_dim %.3g, eps 1e-5 %.3g (all > 1e-2)",
       arch, tn, eb, ed, ee);
}

/* The reference takes the rope_freqs factors from the spec too: a backend that ignored them
 * (the tensor loaded but never applied, as before Llama 3 support) must leave the tolerance by
 * far, or the comparison would not prove they are applied. */
static void check_rope_freqs_matter(cairn__model *m, const char *arch, const char *tn,
                                    const double *ref, float *out)
{
    const float *f = m->rope_freqs;
    m->rope_freqs = NULL;
    const double e = prompt_err(m, ref, out);
    m->rope_freqs = f;
    ok(e > 1e-2,
       "%s %s: the reference check would catch ignored rope_freqs: rel err without them %.3g "
       "(> 1e-2)",
       arch, tn, e);
}

/* every layer's window (0 with swa NULL) and post-norms (NULL with pa NULL) from the arrays */
static void layers_set(cairn__model *m, const int *swa, const float **pa, const float **pf)
{
    for (int l = 0; l < m->n_layers; l++) {
        m->layers[l].swa = swa ? swa[l] : 0;
        m->layers[l].attn_post_norm = pa ? pa[l] : NULL;
        m->layers[l].ffn_post_norm = pf ? pf[l] : NULL;
    }
}

/* What the architectures add shows in the comparison with the reference: each feature in turn
 * turned off in the loaded model (the window, the caps, the embedding scale, gemma3's local rope
 * base, the post-norms, GELU for SiLU) must take the engine's logits far out of the tolerance.
 * (phi3's fused matrices need no such check: the reference splits them itself.) */
static void check_arch_matters(cairn__model *m, const char *arch, const char *tn, const double *ref,
                               float *out)
{
    char what[256] = "";
    size_t w = 0;
    int good = 1, any = 0;
#define TRY(cond, name, undo, redo)                                                                \
    if (cond) {                                                                                    \
        undo;                                                                                      \
        const double e = prompt_err(m, ref, out);                                                  \
        redo;                                                                                      \
        good &= e > 1e-2;                                                                          \
        any = 1;                                                                                   \
        w += (size_t)snprintf(what + w, w < sizeof what ? sizeof what - w : 0, " %s %.3g", name,   \
                              e);                                                                  \
    }
    int *swa = calloc((size_t)m->n_layers, sizeof *swa);
    const float **pa = calloc((size_t)m->n_layers, sizeof *pa),
                **pf = calloc((size_t)m->n_layers, sizeof *pf);
    if (!swa || !pa || !pf) {
        free(swa), free(pa), free(pf);
        ok(0, "%s %s: out of memory", arch, tn);
        return;
    }
    for (int l = 0; l < m->n_layers; l++)
        swa[l] = m->layers[l].swa, pa[l] = m->layers[l].attn_post_norm,
        pf[l] = m->layers[l].ffn_post_norm;
    const float acap = m->attn_softcap, fcap = m->final_softcap, es = m->embd_scale,
                lb = m->rope_base_local;
    const int act = m->ffn_act;
    TRY(m->n_swa, "no window", layers_set(m, NULL, pa, pf), layers_set(m, swa, pa, pf))
    TRY(acap > 0, "no attention cap", m->attn_softcap = 0, m->attn_softcap = acap)
    /* the final cap bends only logits near it: not those of alt_hp's tiny tied embeddings */
    double mr = 0;
    for (size_t i = 0; i < NP * (size_t)m->n_vocab; i++)
        mr = fmax(mr, fabs(ref[i]));
    TRY(fcap > 0 && mr > fcap / 10, "no final cap", m->final_softcap = 0, m->final_softcap = fcap)
    TRY(es != 1.0f, "no embedding scale", m->embd_scale = 1.0f, m->embd_scale = es)
    TRY(lb > 0, "local rope base = global", m->rope_base_local = m->rope_base,
        m->rope_base_local = lb)
    const float rs = m->rope_scale;
    TRY(rs != 1.0f, "no rope scaling", m->rope_scale = 1.0f, m->rope_scale = rs)
    TRY(pa[0], "no post-norms", layers_set(m, swa, NULL, NULL), layers_set(m, swa, pa, pf))
    TRY(act == CAIRN__FFN_GELU, "SiLU for GELU", m->ffn_act = CAIRN__FFN_SILU, m->ffn_act = act)
#undef TRY
    ok(any && good,
       "%s %s: the reference check would catch each feature missing: rel err%s "
       "(all > 1e-2)",
       arch, tn, what);
    free(swa), free(pa), free(pf);
}

/* The shapes check_model builds: mk_model's default (64 wide), rows of 256 for the K-quants,
 * and llama-quantize's Q4_K_M over an ff of 288: ffn_down's rows, 288 long, cannot be Q4_K and
 * fall back to Q5_0 as that tool writes them. */
enum { SHAPE_SMALL, SHAPE_K, SHAPE_K_M };

/* forward vs reference, prompt vs decode, for one model. alt_hp: rope freq_base 1e6, RMS eps
 * 1e-6 and rope over half of each head (the defaults of mk_model are 10000, 1e-5, all of it),
 * with small embeddings so that the first RMSNorm's eps is not negligible. rfreqs: a Llama 3
 * rope_freqs.weight of random factors in [1, 8]. */
static void check_model(const char *arch, uint32_t type, int tied, int kquant, int alt_hp,
                        int rfreqs)
{
    mk_spec s;
    mk_spec_default(&s);
    s.arch = arch;
    s.wtype = type;
    s.tied = tied;
    s.seed = 7 + type + (uint64_t)alt_hp * 100 + (uint64_t)rfreqs * 1000;
    s.rope_freqs = rfreqs;
    if (kquant != SHAPE_SMALL) { /* K-quants need rows of 256 */
        s.dim = 256;
        s.ff = kquant == SHAPE_K_M ? 288 : 512;
        s.n_layers = 2;
        s.wtype_fallback = kquant == SHAPE_K_M ? CAIRN__GGML_Q5_0 : 0;
    }
    if (alt_hp) {
        s.rope_base = 1e6f;
        s.rms_eps = 1e-6f;
        s.rope_dim = s.dim / s.n_heads / 2;
        s.embd_scale = 2e-3f;
    }
    /* the newer architectures' hyperparameters where they show in a prompt of 10: a window of
     * 4 ("mistral": a llama file with one), gemma2's caps low enough to bend scores and logits,
     * and gemma3's pattern whole (five sliding layers, then a global one) */
    const int plain = strcmp(arch, "llama") == 0 || strncmp(arch, "qwen", 4) == 0;
    if (strcmp(arch, "mistral") == 0)
        s.arch = "llama";
    if (!plain)
        s.swa = 4;
    if (strcmp(arch, "gemma2") == 0)
        s.attn_softcap = 2.0f, s.final_softcap = 10.0f;
    if (strcmp(arch, "gemma3") == 0)
        s.n_layers = 6;
    if (alt_hp && strncmp(arch, "gemma", 5) == 0) /* gemma's sqrt(dim) would hide eps again */
        s.embd_scale /= sqrtf((float)s.dim);
    /* Gemma 3 4B's global layers (on the Q8_0 model: with alt_hp's base of 1e6 as well the
     * scaled angles of 10 positions are too small to tell the base) */
    if (strcmp(arch, "gemma3") == 0 && type == CAIRN__GGML_Q8_0)
        s.rope_scaling = 8.0f;
    char tn[96];
    snprintf(tn, sizeof tn, "%s%s%s%s", cairn__ggml_type_name(type),
             kquant == SHAPE_K_M ? " + Q5_0 ffn_down (288 columns)" : "",
             alt_hp ? " (freq_base 1e6, eps 1e-6, rope dims head_dim/2)" : "",
             rfreqs ? " rope_freqs" : "");
    char err[256];
    mk_loaded L;
    int rc = mk_load(&s, &L, err, sizeof err);
    if (!ok(rc == 0, "%s %s%s: model loads (%s)", arch, tn, tied ? " tied" : "", rc ? err : "ok")) {
        mk_unload(&L);
        return;
    }
    const cairn__model *m = L.m;
    ok(m->tied_output == tied && m->n_kv_heads == 2 &&
           m->rope_mode == (strcmp(s.arch, "llama") == 0 ? 0 : 2) && m->n_swa == mk_swa(&s) &&
           m->rope_scale == (s.rope_scaling ? 1.0f / s.rope_scaling : 1.0f) &&
           m->rope_dim == mk_rope_dim(&s) && m->rope_base == (float)mk_rope_base(&s) &&
           m->rms_eps == (float)mk_rms_eps(&s),
       "%s %s: hyperparameters (tied %d, kv %d, rope mode %d, rope dims %d, base %g, eps %g)", arch,
       tn, m->tied_output, m->n_kv_heads, m->rope_mode, m->rope_dim, (double)m->rope_base,
       (double)m->rms_eps);
    /* the factors as the file holds them, or none */
    if (kquant == SHAPE_K_M)
        ok(m->layers[1].w_down.type == CAIRN__GGML_Q5_0 && m->layers[1].w_down.cols == 288 &&
               m->layers[1].w_up.type == CAIRN__GGML_Q4_K,
           "%s %s: ffn_down holds Q5_0 rows of 288, ffn_up Q4_K", arch, tn);
    int same_f = (m->rope_freqs != NULL) == (rfreqs != 0);
    for (int i = 0; same_f && rfreqs && i < m->rope_dim / 2; i++)
        same_f = (double)m->rope_freqs[i] == mk_rope_factor(&s, i);
    ok(same_f, "%s %s: rope_freqs %s", arch, tn,
       rfreqs ? "bound, with the file's factors" : "absent (NULL)");
    const size_t V = (size_t)m->n_vocab;
    double *ref = malloc(NP * V * sizeof *ref);
    float *bat = malloc(NP * V * sizeof *bat), *dec = malloc(NP * V * sizeof *dec);
    cairn__backend *b = NULL;
    cairn__backend_opts o = {
        .n_ctx = 64, .n_threads = 2, .n_batch = 4}; /* batch 4: chunked prompt */
    rc = cairn__backend_new("cpu", m, &o, &b, err, sizeof err);
    ok(rc == 0, "%s %s: cpu backend (%s)", arch, tn, rc ? err : "ok");
    if (rc || !ref || !bat || !dec || ref_forward(m, &s, PROMPT, NP, ref) != 0) {
        ok(0, "setup");
        goto out;
    }
    const int kq = cairn__quant_block_elems(type) == CAIRN__QK_K;
    const int int8 = !is_float_type(type);
    const double tol = kq ? 3e-2 : int8 ? 2e-2 : 1e-4;
    /* the prompt path as it runs (int8 products for the quantized types), then in float */
    rc = cairn__backend_forward(b, PROMPT, NP, 0, bat, 1);
    double e0 = rel_err_d(bat, ref, NP * V);
    ok(rc == 0 && e0 <= tol, "%s %s: batched prompt vs float64 reference: rel err %.3g <= %g", arch,
       tn, e0, tol);
    cairn__cpu_prompt_int8 = 0;
    rc = cairn__backend_forward(b, PROMPT, NP, 0, bat, 1);
    cairn__cpu_prompt_int8 = 1;
    double e1 = rel_err_d(bat, ref, NP * V);
    ok(rc == 0 && e1 <= 1e-4,
       "%s %s: batched prompt in float vs float64 reference: rel err %.3g <= 1e-4", arch, tn, e1);
    for (int i = 0; i < NP; i++)
        rc |= cairn__backend_forward(b, &PROMPT[i], 1, i, dec + (size_t)i * V, 0);
    double e2 = rel_err_d(dec, ref, NP * V);
    ok(rc == 0 && e2 <= tol, "%s %s: token-by-token decode vs reference: rel err %.3g <= %g", arch,
       tn, e2, tol);
    if (!int8) {
        double e3 = rel_err_f(dec, bat, NP * V);
        ok(e3 <= 1e-4, "%s %s: prompt path vs decode path: rel err %.3g <= 1e-4", arch, tn, e3);
    }
    /* rewriting the tail: decoding position 5 again from a cache truncated there */
    cairn__backend_truncate(b, 5);
    float *again = malloc(V * sizeof *again);
    rc = again ? cairn__backend_forward(b, &PROMPT[5], 1, 5, again, 0) : -1;
    ok(rc == 0 && memcmp(again, dec + 5 * V, V * sizeof *again) == 0 &&
           cairn__backend_n_past(b) == 6,
       "%s %s: truncate + re-decode reproduces the logits bit for bit", arch, tn);
    free(again);
    if (alt_hp)
        check_hparams_matter(L.m, arch, tn, ref, bat);
    if (rfreqs)
        check_rope_freqs_matter(L.m, arch, tn, ref, bat);
    if (!plain)
        check_arch_matters(L.m, arch, tn, ref, bat);
out:
    cairn__backend_free(b);
    free(ref);
    free(bat);
    free(dec);
    mk_unload(&L);
}

/* A half KV cache: the backend against the float64 reference that rounds keys and values
 * through halves, the decode path, truncation, thread counts, and a check that the option is
 * live (its logits differ from a float cache's, by about the half rounding). */
static void check_cache_f16(const char *arch, uint32_t type)
{
    mk_spec s;
    mk_spec_default(&s);
    s.arch = arch;
    s.wtype = type;
    s.seed = 4242 + type;
    const char *tn = cairn__ggml_type_name(type);
    char err[256];
    mk_loaded L;
    if (!ok(mk_load(&s, &L, err, sizeof err) == 0, "%s %s f16 cache: model loads", arch, tn)) {
        mk_unload(&L);
        return;
    }
    const cairn__model *m = L.m;
    const size_t V = (size_t)m->n_vocab;
    double *ref = malloc(NP * V * sizeof *ref);
    float *bat = malloc(NP * V * sizeof *bat), *dec = malloc(NP * V * sizeof *dec),
          *one = malloc(NP * V * sizeof *one), *f32 = malloc(NP * V * sizeof *f32);
    cairn__backend *b = NULL, *b1 = NULL, *bf = NULL;
    cairn__backend_opts o = {
        .n_ctx = 64, .n_threads = 2, .n_batch = 4, .cache_type = CAIRN__CACHE_F16};
    cairn__backend_opts o1 = o, of = o;
    o1.n_threads = 1;
    of.cache_type = CAIRN__CACHE_F32;
    int rc = cairn__backend_new("cpu", m, &o, &b, err, sizeof err);
    rc |= cairn__backend_new("cpu", m, &o1, &b1, err, sizeof err);
    rc |= cairn__backend_new("cpu", m, &of, &bf, err, sizeof err);
    if (!ok(rc == 0 && ref && bat && dec && one && f32 &&
                ref_forward_cache(m, &s, PROMPT, NP, 1, ref) == 0,
            "%s %s f16 cache: backends and reference (%s)", arch, tn, rc ? err : "ok"))
        goto out;
    rc = cairn__backend_forward(b, PROMPT, NP, 0, bat, 1);
    for (int i = 0; i < NP; i++) {
        rc |= cairn__backend_forward(b1, &PROMPT[i], 1, i, one + (size_t)i * V, 0);
        rc |= cairn__backend_forward(bf, &PROMPT[i], 1, i, f32 + (size_t)i * V, 0);
    }
    cairn__backend_truncate(b, 0);
    for (int i = 0; i < NP; i++)
        rc |= cairn__backend_forward(b, &PROMPT[i], 1, i, dec + (size_t)i * V, 0);
    const double e1 = rel_err_d(bat, ref, NP * V), e2 = rel_err_d(dec, ref, NP * V),
                 e3 = rel_err_f(dec, f32, NP * V);
    ok(rc == 0 && e1 <= 1e-4,
       "%s %s f16 cache: batched prompt vs the half-rounding reference: "
       "rel err %.3g <= 1e-4",
       arch, tn, e1);
    ok(rc == 0 && e2 <= 1e-4,
       "%s %s f16 cache: token-by-token decode vs that reference: rel err "
       "%.3g <= 1e-4",
       arch, tn, e2);
    ok(rc == 0 && memcmp(dec, one, NP * V * sizeof *dec) == 0,
       "%s %s f16 cache: 1 thread and 2 threads decode the same bits", arch, tn);
    ok(rc == 0 && e3 > 0 && e3 <= 1e-2,
       "%s %s f16 cache: differs from a float cache by the rounding: rel err %.3g in (0, 1e-2]",
       arch, tn, e3);
    cairn__backend_truncate(b, 5);
    rc = cairn__backend_forward(b, &PROMPT[5], 1, 5, one, 0);
    ok(rc == 0 && memcmp(one, dec + 5 * V, V * sizeof *one) == 0,
       "%s %s f16 cache: truncate + re-decode reproduces the logits bit for bit", arch, tn);
out:
    cairn__backend_free(b);
    cairn__backend_free(b1);
    cairn__backend_free(bf);
    free(ref), free(bat), free(dec), free(one), free(f32);
    mk_unload(&L);
}

/* A prompt in chunks of 64 (matrix-product attention in OpenBLAS builds, attention_gemm, in
 * blocks of 20 query rows: the score budget lowered to 20 rows of the 128-position context)
 * and of 8 (per-token attention): both against the float64 reference, and each other, over 100
 * tokens; with an f16 cache the chunks take the per-token kernel either way. */
static void check_long_prompt(const char *arch, uint32_t type, int cache_f16)
{
    mk_spec s;
    mk_spec_default(&s);
    s.arch = arch;
    s.wtype = type;
    s.seed = 515 + type;
    s.ctx = 256;
    const char *tn = cairn__ggml_type_name(type), *cn = cache_f16 ? " f16 cache" : "";
    char err[256];
    mk_loaded L;
    if (!ok(mk_load(&s, &L, err, sizeof err) == 0, "%s %s%s long prompt: model loads", arch, tn,
            cn)) {
        mk_unload(&L);
        return;
    }
    enum { N = 100 };
    const cairn__model *m = L.m;
    const size_t V = (size_t)m->n_vocab;
    int32_t toks[N];
    for (int i = 0; i < N; i++)
        toks[i] = (int32_t)((i * 37 + 11) % m->n_vocab);
    double *ref = malloc(N * V * sizeof *ref);
    float *big = malloc(N * V * sizeof *big), *small = malloc(N * V * sizeof *small);
    cairn__backend *b32 = NULL, *b8 = NULL;
    const int ct = cache_f16 ? CAIRN__CACHE_F16 : CAIRN__CACHE_F32;
    cairn__backend_opts o32 = {.n_ctx = 128, .n_threads = 2, .n_batch = 64, .cache_type = ct};
    cairn__backend_opts o8 = o32;
    o8.n_batch = 8;
    const size_t budget = cairn__cpu_att_bytes;
    cairn__cpu_att_bytes = 20 * 128 * sizeof(float);
    int rc = cairn__backend_new("cpu", m, &o32, &b32, err, sizeof err);
    cairn__cpu_att_bytes = budget;
    rc |= cairn__backend_new("cpu", m, &o8, &b8, err, sizeof err);
    if (!ok(rc == 0 && ref && big && small &&
                ref_forward_cache(m, &s, toks, N, cache_f16, ref) == 0,
            "%s %s%s long prompt: backends and reference", arch, tn, cn))
        goto out;
    rc = cairn__backend_forward(b32, toks, N, 0, big, 1);
    rc |= cairn__backend_forward(b8, toks, N, 0, small, 1);
    const double e32 = rel_err_d(big, ref, N * V), e8 = rel_err_d(small, ref, N * V),
                 ex = rel_err_f(big, small, N * V);
    ok(rc == 0 && e32 <= 1e-4 && e8 <= 1e-4 && ex <= 1e-4,
       "%s %s%s: %d-token prompt in chunks of 64 and of 8 vs float64 (blas=%s): rel err %.3g, "
       "%.3g (each other %.3g) <= 1e-4",
       arch, tn, cn, N, cairn__blas_desc(), e32, e8, ex);
out:
    cairn__backend_free(b32);
    cairn__backend_free(b8);
    free(ref), free(big), free(small);
    mk_unload(&L);
}

/* The path of the float products (F32/F16/BF16 weights, and the quantized ones' prompt in float;
 * the prompt's attention) that every check here holds to the float64 reference: OpenBLAS with
 * the core cairn picks for this CPU's features (tests/model/meson.build empties the caller's
 * OPENBLAS_CORETYPE for that), the core OPENBLAS_CORETYPE names where a test sets it, or
 * cairn's own loops under CAIRN_BLAS=cairn. Older OpenBLAS builds compute wrong results with
 * some cores forced on some CPUs; this is where that would show, on the machine at hand. */
static void check_blas_path(void)
{
    const char *d = cairn__blas_desc(), *mode = getenv("CAIRN_BLAS"),
               *user = getenv("OPENBLAS_CORETYPE"), *core = cairn__blas_core_for_cpu();
    if (mode && strcmp(mode, "cairn") == 0) {
        ok(strcmp(d, "cairn") == 0, "float products: CAIRN_BLAS=cairn runs cairn's loops (%s)", d);
        return;
    }
#ifdef CAIRN_HAVE_OPENBLAS
    if (user && *user)
        ok(strncmp(d, "openblas:", 9) == 0 && strstr(d, "(OPENBLAS_CORETYPE)"),
           "float products: %s, OPENBLAS_CORETYPE=%s as given", d, user);
    else
        ok(strncmp(d, "openblas:", 9) == 0 &&
               (!core || strncasecmp(d + 9, core, strlen(core)) == 0),
           "float products: %s, the core for this CPU (%s)", d, core ? core : "OpenBLAS's own");
#else
    (void)user, (void)core;
    ok(strcmp(d, "cairn") == 0, "float products: cairn's loops in a build without OpenBLAS (%s)",
       d);
#endif
}

/* Greedy generation against the float64 reference of the same weights, which recomputes every
 * step from scratch. tol 0: the very same token at every step. tol > 0 (the int8 products'
 * tolerance): the token picked must be one the reference ranks within tol * max |logit| of its
 * best, so that a near tie decided the other way by the int8 rounding is not a failure while a
 * wrong kernel (an error far past tol) is; both then go on with the engine's token. */
static void check_greedy_spec(const mk_spec *s, double tol, const char *what)
{
    char err[256];
    mk_loaded L;
    const int lrc = mk_load(s, &L, err, sizeof err);
    if (!ok(lrc == 0, "greedy %s: model loads (%s)", what, lrc ? err : "ok")) {
        mk_unload(&L);
        return;
    }
    const cairn__model *m = L.m;
    const int V = m->n_vocab, NG = 12;
    int32_t seq[64];
    memcpy(seq, PROMPT, sizeof PROMPT);
    double *ref = malloc((size_t)(NP + NG) * V * sizeof *ref);
    float *lg = malloc((size_t)V * sizeof *lg);
    cairn__backend *b = NULL;
    cairn__backend_opts o = {.n_ctx = 64, .n_threads = 2};
    int rc = cairn__backend_new("cpu", m, &o, &b, err, sizeof err);
    int good = rc == 0 && ref && lg, n = NP, same = 0;
    if (good)
        rc = cairn__backend_forward(b, seq, NP, 0, lg, 0);
    for (int t = 0; good && t < NG; t++) {
        /* reference: full recompute; argmax with ties to the lower id */
        ref_forward(m, s, seq, n, ref);
        const double *r = ref + (size_t)(n - 1) * V;
        int ra = 0, ca = 0;
        double mr = 0;
        for (int i = 1; i < V; i++) {
            if (r[i] > r[ra])
                ra = i;
            if (lg[i] > lg[ca])
                ca = i;
        }
        for (int i = 0; i < V; i++)
            mr = fmax(mr, fabs(r[i]));
        same += ra == ca;
        if (tol == 0 ? ra != ca : r[ca] < r[ra] - tol * mr) {
            diag("step %d: reference %d (%g), engine %d (%g)", t, ra, r[ra], ca, r[ca]);
            good = 0;
        }
        seq[n++] = ca;
        rc |= cairn__backend_forward(b, &seq[n - 1], 1, n - 1, lg, 0);
    }
    ok(good && rc == 0,
       "greedy generation of %d tokens (%s) matches the float64 reference (%d the very same "
       "token, the rest within %g of the best)",
       NG, what, same, tol);
    cairn__backend_free(b);
    free(ref);
    free(lg);
    mk_unload(&L);
}

static void check_greedy(void)
{
    mk_spec s;
    mk_spec_default(&s);
    s.seed = 99;
    check_greedy_spec(&s, 0, "F32");
    /* a Q4_K_M file as llama-quantize writes it where rows are not a multiple of 256: its
     * ffn_down (288 columns) in Q5_0, the rest in Q4_K; the K-quants' tolerance */
    s.dim = 256;
    s.ff = 288;
    s.wtype = CAIRN__GGML_Q4_K;
    s.wtype_fallback = CAIRN__GGML_Q5_0;
    check_greedy_spec(&s, 3e-2, "Q4_K + Q5_0 ffn_down");
}

static void check_threads_deterministic(void)
{
    mk_spec s;
    mk_spec_default(&s);
    s.wtype = CAIRN__GGML_Q8_0;
    s.dim = 128;
    s.ff = 256;
    char err[256];
    mk_loaded L;
    if (!ok(mk_load(&s, &L, err, sizeof err) == 0, "threads: model loads")) {
        mk_unload(&L);
        return;
    }
    const size_t V = (size_t)L.m->n_vocab;
    float *a = malloc(V * sizeof *a), *c = malloc(V * sizeof *c);
    int same = a && c;
    for (int nt = 1; same && nt <= 3; nt += 2) {
        cairn__backend *b = NULL;
        cairn__backend_opts o = {.n_ctx = 32, .n_threads = nt};
        int rc = cairn__backend_new("cpu", L.m, &o, &b, err, sizeof err);
        for (int i = 0; rc == 0 && i < NP; i++)
            rc = cairn__backend_forward(b, &PROMPT[i], 1, i, nt == 1 ? a : c, 0);
        same = rc == 0;
        cairn__backend_free(b);
    }
    ok(same && memcmp(a, c, V * sizeof *a) == 0, "decode logits identical with 1 and 3 threads");
    free(a);
    free(c);
    mk_unload(&L);
}

static void check_kernels_scalar_vs_simd(void)
{
    const uint32_t types[] = {CAIRN__GGML_F32,  CAIRN__GGML_F16,    CAIRN__GGML_BF16,
                              CAIRN__GGML_Q8_0, CAIRN__GGML_Q4_0,   CAIRN__GGML_Q4_1,
                              CAIRN__GGML_Q5_0, CAIRN__GGML_Q5_1,   CAIRN__GGML_Q4_K,
                              CAIRN__GGML_Q6_K, CAIRN__GGML_Q2_K,   CAIRN__GGML_Q3_K,
                              CAIRN__GGML_Q5_K, CAIRN__GGML_IQ4_NL, CAIRN__GGML_IQ4_XS};
    const int rows = 37, cols = 512;
    float *w = malloc((size_t)rows * cols * sizeof *w), x[512], y1[37], y2[37], yr[37];
    unsigned char *q = malloc((size_t)rows * cols * 4);
    cairn__pool *p = NULL;
    cairn__pool_new(2, &p);
    uint64_t r = 88172645463325252ull;
    for (int i = 0; i < rows * cols; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        w[i] = (float)((double)(r >> 11) * 0x1.0p-53 - 0.5);
    }
    for (int i = 0; i < cols; i++)
        x[i] = sinf((float)i * 0.37f);
    void *scratch = malloc(cairn__matvec_scratch_bytes(cols));
    diag("kernel ISA: %s", cairn__kernels_isa());
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        const uint32_t ty = types[t];
        const size_t rb =
            (size_t)(cols / cairn__quant_block_elems(ty) * cairn__quant_block_bytes(ty));
        for (int i = 0; i < rows; i++)
            cairn__quant_row(ty, w + (size_t)i * cols, q + (size_t)i * rb, cols);
        cairn__mat W = {ty, rows, cols, rb, q};
        cairn__kernels_force_scalar(1);
        cairn__matvec(p, &W, x, y1, scratch);
        cairn__kernels_force_scalar(0);
        cairn__matvec(p, &W, x, y2, scratch);
        /* exact dot with the dequantized weights */
        float row[512];
        for (int i = 0; i < rows; i++) {
            cairn__mat_row(&W, i, row);
            double s = 0;
            for (int c = 0; c < cols; c++)
                s += (double)row[c] * x[c];
            yr[i] = (float)s;
        }
        const int int8 = !is_float_type(ty);
        double es = rel_err_f(y1, yr, rows), ev = rel_err_f(y2, yr, rows),
               esv = rel_err_f(y2, y1, rows);
        ok(es <= (int8 ? 2e-2 : 1e-5) && ev <= (int8 ? 2e-2 : 1e-5) && esv <= 1e-5,
           "matvec %s: scalar %.2g, %s %.2g vs exact; simd vs scalar %.2g",
           cairn__ggml_type_name(ty), es, cairn__kernels_isa(), ev, esv);
        /* matmul (the prompt path) on 3 vectors equals exact (in float; int8 is test_kernels') */
        float X[3 * 512], OUT[3 * 37];
        for (int i = 0; i < 3 * cols; i++)
            X[i] = x[i % cols] * (float)(1 + i / cols);
        float *tile = malloc(cairn__matmul_scratch_bytes(&W));
        cairn__cpu_prompt_int8 = 0;
        cairn__matmul(p, &W, X, 3, OUT, tile);
        cairn__cpu_prompt_int8 = 1;
        free(tile);
        double em = 0;
        for (int i = 0; i < 3; i++)
            for (int k = 0; k < rows; k++)
                em = fmax(em, fabs(OUT[i * rows + k] - yr[k] * (float)(1 + i)) /
                                  (fabs(yr[k]) * (1 + i) + 1));
        ok(em <= 1e-5, "matmul %s: max err %.2g vs exact", cairn__ggml_type_name(ty), em);
    }
    free(scratch);
    cairn__pool_free(p);
    free(w);
    free(q);
}

static void check_errors(void)
{
    char err[256];
    mk_loaded L;
    mk_spec s;

    mk_spec_default(&s);
    s.omit = "blk.1.ffn_up.weight";
    int rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EFORMAT && strstr(err, "blk.1.ffn_up.weight"),
       "missing tensor -> EFORMAT naming it (%s)", err);
    mk_unload(&L);

    mk_spec_default(&s);
    s.misshape = "blk.0.attn_k.weight";
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EFORMAT && strstr(err, "blk.0.attn_k.weight"),
       "misshapen tensor -> EFORMAT naming it (%s)", err);
    mk_unload(&L);

    mk_spec_default(&s);
    s.tokenizer = 1;
    s.flatten = "token_embd.weight";
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EFORMAT && strstr(err, "token_embd.weight") && strstr(err, "expected [64, 300]"),
       "1-D token_embd -> the 2-D shape expected, vocabulary rows (%s)", err);
    mk_unload(&L);

    mk_spec_default(&s);
    s.no_rms_eps = 1;
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EFORMAT && strstr(err, "llama.attention.layer_norm_rms_epsilon"),
       "missing RMS epsilon -> EFORMAT naming the key (%s)", err);
    mk_unload(&L);

    mk_spec_default(&s);
    s.omit = "output_norm.weight";
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EFORMAT && strstr(err, "output_norm.weight"),
       "missing output_norm -> EFORMAT (%s)", err);
    mk_unload(&L);

    mk_spec_default(&s);
    s.arch = "qwen2";
    s.omit = "blk.0.attn_v.bias";
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EFORMAT && strstr(err, "blk.0.attn_v.bias"),
       "qwen2 without a V bias -> EFORMAT (%s)", err);
    mk_unload(&L);

    mk_spec_default(&s);
    s.arch = "mamba";
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EUNSUPPORTED && strstr(err, "mamba"),
       "unknown architecture -> EUNSUPPORTED naming it (%s)", err);
    mk_unload(&L);

    /* the newer architectures' own tensors */
    mk_spec_default(&s);
    s.arch = "phi3";
    s.misshape = "blk.1.attn_qkv.weight";
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EFORMAT && strstr(err, "blk.1.attn_qkv.weight") && strstr(err, "[64, 128]"),
       "phi3 with a misshapen fused attn_qkv -> EFORMAT naming it and its shape (%s)", err);
    mk_unload(&L);
    mk_spec_default(&s);
    s.arch = "phi3";
    s.omit = "blk.0.attn_qkv.weight";
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EFORMAT && strstr(err, "blk.0.attn_q.weight"),
       "phi3 without attn_qkv looks for separate attn_q/k/v -> EFORMAT naming one (%s)", err);
    mk_unload(&L);
    mk_spec_default(&s);
    s.arch = "phi3";
    s.misshape = "blk.0.ffn_up.weight";
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EFORMAT && strstr(err, "blk.0.ffn_up.weight") && strstr(err, "[64, 256]"),
       "phi3's ffn_up must hold gate and up (2 * ff rows) -> EFORMAT (%s)", err);
    mk_unload(&L);
    mk_spec_default(&s);
    s.arch = "gemma2";
    s.omit = "blk.1.post_ffw_norm.weight";
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EFORMAT && strstr(err, "blk.1.post_ffw_norm.weight"),
       "gemma2 without a post-ffw norm -> EFORMAT naming it (%s)", err);
    mk_unload(&L);
    mk_spec_default(&s);
    s.arch = "gemma2";
    s.extra = "output.weight"; /* llama.cpp never reads one for gemma */
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EUNSUPPORTED && strstr(err, "'output.weight'") && strstr(err, "gemma2"),
       "gemma2 with an output.weight -> EUNSUPPORTED naming it (%s)", err);
    mk_unload(&L);
    mk_spec_default(&s);
    s.arch = "gemma3";
    s.omit = "blk.0.attn_k_norm.weight";
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EFORMAT && strstr(err, "blk.0.attn_k_norm.weight"),
       "gemma3 without a k norm -> EFORMAT naming it (%s)", err);
    mk_unload(&L);

    mk_spec_default(&s);
    s.arch = "gemma3";
    s.rope_scaling = 4.0f;
    s.rope_scaling_type = "yarn";
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EUNSUPPORTED && strstr(err, "gemma3.rope.scaling.type") && strstr(err, "yarn"),
       "gemma3 with yarn rope scaling -> EUNSUPPORTED naming key and kind (%s)", err);
    mk_unload(&L);

    /* tensors the model would not use: blocks past block_count, or a feature not implemented */
    mk_spec_default(&s);
    s.meta_layers = 1;
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EFORMAT && strstr(err, "'blk.1.") && strstr(err, "llama.block_count is 1"),
       "block_count 1 with 2 blocks of tensors -> EFORMAT naming the tensor (%s)", err);
    mk_unload(&L);

    /* llama.cpp reads rope_freqs.weight for llama only; a well-formed one in qwen2 is left over */
    mk_spec_default(&s);
    s.arch = "qwen2";
    s.rope_freqs = 1;
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EUNSUPPORTED && strstr(err, "'rope_freqs.weight'") && strstr(err, "qwen2"),
       "a tensor the architecture does not use (qwen2 rope_freqs) -> EUNSUPPORTED naming it (%s)",
       err);
    mk_unload(&L);

    /* rope_freqs.weight (llama): F32, rope_dim/2 finite positive factors */

    mk_spec_default(&s);
    s.rope_freqs = 1;
    s.rope_freqs_len = 9; /* head dim 16: 8 factors */
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EFORMAT && strstr(err, "'rope_freqs.weight'") && strstr(err, "[9, 1, 1, 1]") &&
           strstr(err, "expected [8] (llama.rope.dimension_count 16 / 2)"),
       "rope_freqs of 9 factors for rope dims 16 -> EFORMAT naming the shapes (%s)", err);
    mk_unload(&L);

    mk_spec_default(&s);
    s.rope_dim = 8;
    s.rope_freqs = 1; /* 8 factors, as for the full head, where rope dims 8 take 4 */
    s.rope_freqs_len = 8;
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EFORMAT && strstr(err, "'rope_freqs.weight'") &&
           strstr(err, "expected [4] (llama.rope.dimension_count 8 / 2)"),
       "rope_freqs sized for head_dim with rope dims 8 -> EFORMAT (%s)", err);
    mk_unload(&L);

    mk_spec_default(&s);
    s.extra = "rope_freqs.weight"; /* dim (64) elements */
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EFORMAT && strstr(err, "'rope_freqs.weight'") && strstr(err, "[64, 1, 1, 1]"),
       "rope_freqs of 64 factors -> EFORMAT (%s)", err);
    mk_unload(&L);

    static const uint32_t bad_t[] = {CAIRN__GGML_F16, CAIRN__GGML_BF16, CAIRN__GGML_Q8_0};
    for (size_t i = 0; i < sizeof bad_t / sizeof *bad_t; i++) {
        mk_spec_default(&s);
        s.rope_freqs = 1;
        s.rope_freqs_type = bad_t[i];
        s.rope_dim = 64; /* dim 64, one head: 32 factors, a whole Q8_0 block */
        s.n_heads = 1;
        s.n_kv_heads = 1;
        char want[64];
        snprintf(want, sizeof want, "type %s", cairn__ggml_type_name(bad_t[i]));
        rc = mk_load(&s, &L, err, sizeof err);
        ok(rc == CAIRN_EUNSUPPORTED && strstr(err, "'rope_freqs.weight'") && strstr(err, want) &&
               strstr(err, "expected F32"),
           "rope_freqs stored as %s -> EUNSUPPORTED naming the type (%s)",
           cairn__ggml_type_name(bad_t[i]), err);
        mk_unload(&L);
    }

    static const struct {
        int at;
        float v;
        const char *want, *why;
    } bad_ff[] = {{3, 0.0f, "factor 3 is 0,", "not a finite positive number"},
                  {0, NAN, "factor 0 is nan", "not a finite positive number"},
                  {7, -2.0f, "factor 7 is -2,", "not a finite positive number"},
                  {5, INFINITY, "factor 5 is inf", "not a finite positive number"},
                  {1, -0.0f, "factor 1 is -0,", "not a finite positive number"},
                  {0, 1e-45f, "factor 0 is 1.4013e-45", "rotary frequency it divides overflows"}};
    for (size_t i = 0; i < sizeof bad_ff / sizeof *bad_ff; i++) {
        float f[8];
        for (int j = 0; j < 8; j++)
            f[j] = 1.0f + (float)j;
        f[bad_ff[i].at] = bad_ff[i].v;
        mk_spec_default(&s);
        s.rope_freqs = 1;
        s.rope_factors = f;
        rc = mk_load(&s, &L, err, sizeof err);
        ok(rc == CAIRN_EFORMAT && strstr(err, "'rope_freqs.weight'") &&
               strstr(err, bad_ff[i].want) && strstr(err, bad_ff[i].why),
           "rope_freqs factor %d = %g -> EFORMAT naming the index (%s)", bad_ff[i].at,
           (double)bad_ff[i].v, err);
        mk_unload(&L);
    }
    /* tiny but harmless: 1e-30 divides a frequency of at most 1 to 1e30, a float */
    float tiny[8] = {1e-30f, 1, 1, 1, 1, 1, 1, 1};
    mk_spec_default(&s);
    s.rope_freqs = 1;
    s.rope_factors = tiny;
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == 0 && L.m->rope_freqs && L.m->rope_freqs[0] == 1e-30f,
       "rope_freqs factor 0 = 1e-30 loads (%s)", rc ? err : "ok");
    mk_unload(&L);

    mk_spec_default(&s);
    s.extra = "blk.0.attn_output.bias";
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EUNSUPPORTED && strstr(err, "'blk.0.attn_output.bias'"),
       "an unused tensor inside a real block -> EUNSUPPORTED naming it (%s)", err);
    mk_unload(&L);

    /* embedding_length that disagrees with the tensors is reported as itself (with 32 the
     * derived head dimension, 8, would also fail the rope check if that came first) */
    mk_spec_default(&s);
    s.meta_dim = 32;
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EFORMAT && strstr(err, "llama.embedding_length") &&
           strstr(err, "token_embd.weight") && strstr(err, "[64, 300") && !strstr(err, "rope"),
       "embedding_length 32 for 64-wide tensors -> EFORMAT naming it and the shape (%s)", err);
    mk_unload(&L);

    mk_spec_default(&s);
    s.rope_dim = 18; /* head dim 16, derived from 64 / 4 */
    rc = mk_load(&s, &L, err, sizeof err);
    ok(rc == CAIRN_EFORMAT && strstr(err, "llama.rope.dimension_count 18") &&
           strstr(err, "head dimension 16 (llama.embedding_length 64 / head_count 4)"),
       "rope.dimension_count past the derived head dimension -> EFORMAT naming both (%s)", err);
    mk_unload(&L);

    /* epsilon and freq_base must be finite and positive */
    static const struct {
        int which; /* 0 eps, 1 freq_base */
        float v;
        const char *want;
    } bad_f[] = {{0, INFINITY, "is inf"}, {0, NAN, "is nan"},          {0, -1e-5f, "is -1e-05"},
                 {1, INFINITY, "is inf"}, {1, -10000.0f, "is -10000"}, {1, NAN, "is nan"}};
    for (size_t i = 0; i < sizeof bad_f / sizeof *bad_f; i++) {
        mk_spec_default(&s);
        if (bad_f[i].which)
            s.rope_base = bad_f[i].v;
        else
            s.rms_eps = bad_f[i].v;
        const char *key =
            bad_f[i].which ? "llama.rope.freq_base" : "llama.attention.layer_norm_rms_epsilon";
        rc = mk_load(&s, &L, err, sizeof err);
        ok(rc == CAIRN_EFORMAT && strstr(err, key) && strstr(err, bad_f[i].want) &&
               strstr(err, "not a finite positive number"),
           "%s %g -> EFORMAT naming the key (%s)", key, (double)bad_f[i].v, err);
        mk_unload(&L);
    }

    /* a reader opened to describe any tensor type still cannot make a model of one */
    mk_spec_default(&s);
    unsigned char *buf = NULL;
    size_t len = 0;
    rc = mk_model(&s, &buf, &len);
    const char *victim = "blk.0.attn_q.weight";
    size_t at = 0;
    for (size_t i = 8; rc == 0 && !at && i + strlen(victim) <= len; i++)
        if (memcmp(buf + i, victim, strlen(victim)) == 0)
            at = i + strlen(victim) + 4 + 2 * 8; /* past n_dims and ne[2]: the type */
    cairn__gguf *g = NULL;
    cairn__model *m = NULL;
    if (at) {
        buf[at] = 16; /* IQ2_XXS */
        rc = cairn__gguf_open_mem_ex(buf, len, CAIRN__GGUF_ANY_TYPE, &g, err, sizeof err);
        if (rc == 0)
            rc = cairn__model_load(g, &m, err, sizeof err);
    }
    ok(at && rc == CAIRN_EUNSUPPORTED && !m && strstr(err, victim) && strstr(err, "IQ2_XXS"),
       "model from an ANY_TYPE reader with an IQ2_XXS weight -> EUNSUPPORTED naming it (%s)", err);
    cairn__model_free(m);
    cairn__gguf_close(g);
    free(buf);

    rc = cairn__model_open("/nonexistent/model.gguf", &L.m, err, sizeof err);
    ok(rc == CAIRN_ENOENT && L.m == NULL, "missing file -> ENOENT (%d)", rc);

    /* context */
    mk_spec_default(&s);
    rc = mk_load(&s, &L, err, sizeof err);
    cairn__backend *b = NULL;
    cairn__backend_opts o = {.n_ctx = 8, .n_threads = 1};
    if (rc == 0)
        rc = cairn__backend_new("cpu", L.m, &o, &b, err, sizeof err);
    float *lg = malloc((size_t)s.vocab * sizeof *lg);
    ok(rc == 0 && cairn__backend_forward(b, PROMPT, 9, 0, lg, 0) == CAIRN_ECONTEXT,
       "9 tokens into a context of 8 -> ECONTEXT (%s)", cairn__backend_errmsg(b));
    ok(cairn__backend_forward(b, PROMPT, 8, 0, lg, 0) == 0, "8 tokens fit a context of 8");
    ok(cairn__backend_forward(b, PROMPT, 1, 8, lg, 0) == CAIRN_ECONTEXT,
       "a 9th position -> ECONTEXT");
    int32_t bad = 100000;
    ok(cairn__backend_forward(b, &bad, 1, 0, lg, 0) == CAIRN_EINVAL,
       "token outside the vocabulary -> EINVAL");
    ok(cairn__backend_forward(b, PROMPT, 1, 9, lg, 0) == CAIRN_EINVAL,
       "position past n_past -> EINVAL");
    cairn__backend *cb = NULL;
    rc = cairn__backend_new("tpu", L.m, &o, &cb, err, sizeof err);
    ok(rc == CAIRN_EINVAL && cb == NULL, "unknown backend name -> EINVAL (%s)", err);
    free(lg);
    cairn__backend_free(b);
    mk_unload(&L);
}

static void count_range(void *arg, int64_t i0, int64_t i1, int ith)
{
    int *c = arg;
    (void)ith;
    for (int64_t i = i0; i < i1; i++)
        c[i]++; /* each item belongs to exactly one claimed chunk: no race */
}

static void check_pool(void)
{
    cairn__pool *p = NULL;
    static int c[10007];
    int rc = cairn__pool_new(4, &p);
    for (int rep = 0; rc == 0 && rep < 300; rep++)
        cairn__pool_for(p, 10007, rep % 3 == 0 ? 0 : rep % 50 + 1, count_range, c);
    int good = rc == 0;
    for (int i = 0; i < 10007; i++)
        good &= c[i] == 300;
    ok(good && cairn__pool_size(p) == 4,
       "pool_for: 300 loops over 10007 items on 4 threads, each item once per loop");
    cairn__pool_free(p);
}

int main(void)
{
    check_pool();
    check_blas_path();
    const uint32_t flat[] = {CAIRN__GGML_F32,  CAIRN__GGML_F16,  CAIRN__GGML_BF16,
                             CAIRN__GGML_Q8_0, CAIRN__GGML_Q4_0, CAIRN__GGML_Q4_1,
                             CAIRN__GGML_Q5_0, CAIRN__GGML_Q5_1, CAIRN__GGML_IQ4_NL};
    for (size_t i = 0; i < sizeof flat / sizeof *flat; i++) {
        check_model("llama", flat[i], (int)(i % 2), 0, 0, 0);
        check_model("qwen2", flat[i], (int)((i + 1) % 2), 0, 0, 0);
    }
    check_model("llama", CAIRN__GGML_Q4_K, 0, 1, 0, 0);
    check_model("qwen2", CAIRN__GGML_Q6_K, 1, 1, 0, 0);
    check_model("llama", CAIRN__GGML_Q5_K, 1, 1, 0, 0);
    check_model("qwen2", CAIRN__GGML_Q3_K, 0, 1, 0, 0);
    check_model("llama", CAIRN__GGML_Q2_K, 0, 1, 0, 0);
    check_model("qwen2", CAIRN__GGML_IQ4_XS, 1, 1, 0, 0);
    /* a Q4_K_M file as llama-quantize writes one for an ff of 288 */
    check_model("llama", CAIRN__GGML_Q4_K, 0, SHAPE_K_M, 0, 0);
    check_model("qwen2", CAIRN__GGML_Q4_K, 1, SHAPE_K_M, 1, 0);
    /* qwen3: per-head q/k norms, no biases */
    check_model("qwen3", CAIRN__GGML_F32, 0, 0, 0, 0);
    check_model("qwen3", CAIRN__GGML_Q8_0, 1, 0, 0, 0);
    check_model("qwen3", CAIRN__GGML_Q4_K, 0, 1, 1, 0);
    /* phi3: fused attn_qkv and gate+up ffn_up; gemma2: scaled embeddings, post-norms, GELU,
     * caps, a window on even layers (gemma's output is always tied); gemma3: q/k norms, five
     * sliding layers of six with their own rope base; Mistral: llama with a window */
    static const char *const newer[] = {"phi3", "gemma2", "gemma3", "mistral"};
    for (size_t a = 0; a < sizeof newer / sizeof *newer; a++) {
        const int g = strncmp(newer[a], "gemma", 5) == 0;
        check_model(newer[a], CAIRN__GGML_F32, g, 0, 0, 0);
        check_model(newer[a], CAIRN__GGML_Q8_0, 1 - (a == 0), 0, 0, 0);
        check_model(newer[a], CAIRN__GGML_Q4_K, g, 1, 1, 0);
    }
    /* real files differ from mk_model's defaults: Qwen2 uses freq_base 1e6, many use eps 1e-6,
     * some rotate only part of each head */
    check_model("llama", CAIRN__GGML_F32, 0, 0, 1, 0);
    check_model("qwen2", CAIRN__GGML_F32, 1, 0, 1, 0);
    check_model("llama", CAIRN__GGML_Q4_K, 1, 1, 1, 0);
    check_model("qwen2", CAIRN__GGML_Q6_K, 0, 1, 1, 0);
    /* Llama 3.x: rope_freqs.weight divides the rotary frequencies (also with rope over half of
     * each head, where it has rope_dim/2 = head_dim/4 factors) */
    check_model("llama", CAIRN__GGML_F32, 0, 0, 0, 1);
    check_model("llama", CAIRN__GGML_Q8_0, 1, 0, 0, 1);
    check_model("llama", CAIRN__GGML_Q4_K, 0, 1, 1, 1);
    check_long_prompt("llama", CAIRN__GGML_F32, 0);
    check_long_prompt("qwen2", CAIRN__GGML_F16, 0);
    check_long_prompt("qwen2", CAIRN__GGML_F32, 1);
    check_cache_f16("llama", CAIRN__GGML_F32);
    check_cache_f16("qwen2", CAIRN__GGML_F16);
    check_cache_f16("gemma2", CAIRN__GGML_F32); /* the soft-capped kernel widens halves itself */
    check_greedy();
    check_threads_deterministic();
    check_kernels_scalar_vs_simd();
    check_errors();
    return tap_done();
}
