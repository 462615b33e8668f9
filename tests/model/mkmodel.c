/* tests/model/mkmodel.c - random-weight transformer GGUF files.
 *
 * Weights are uniform in +-1/sqrt(fan_in) so activations keep a sensible scale through the
 * layers (and softmax/SiLU see values of order one, where bugs show); norm weights are near 1.
 * A fixed xorshift generator makes every model a pure function of its spec.
 */
#include "tests/model/mkmodel.h"

#include "gpu/gguf.h"
#include "gpu/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gguf.h"
#include "gpu/quant.h"
#include "tests/gguf_writer.h"

void mk_spec_default(mk_spec *s)
{
    memset(s, 0, sizeof *s);
    s->arch = "llama";
    s->dim = 64;
    s->n_layers = 2;
    s->n_heads = 4;
    s->n_kv_heads = 2;
    s->ff = 128;
    s->vocab = 300;
    s->ctx = 256;
    s->wtype = CAIRN__GGML_F32;
    s->seed = 1;
}

double mk_rope_base(const mk_spec *s)
{
    return s->rope_base != 0                ? (double)s->rope_base
           : strcmp(s->arch, "gemma3") == 0 ? 1e6
                                            : 10000.0;
}

static int is_gemma(const mk_spec *s)
{
    return strcmp(s->arch, "gemma2") == 0 || strcmp(s->arch, "gemma3") == 0;
}

int mk_swa(const mk_spec *s)
{
    if (s->swa)
        return s->swa;
    return strcmp(s->arch, "phi3") == 0 || is_gemma(s) ? 4096 : 0;
}

/* as the f32 the file holds */
double mk_attn_softcap(const mk_spec *s)
{
    if (strcmp(s->arch, "gemma2") != 0)
        return 0;
    return s->attn_softcap != 0 ? (double)s->attn_softcap : 50.0;
}

double mk_final_softcap(const mk_spec *s)
{
    if (strcmp(s->arch, "gemma2") != 0)
        return 0;
    return s->final_softcap != 0 ? (double)s->final_softcap : 30.0;
}

int mk_rope_dim(const mk_spec *s) { return s->rope_dim ? s->rope_dim : s->dim / s->n_heads; }

/* as the f32 the file holds, so the reference uses exactly what a correct loader reads */
double mk_rms_eps(const mk_spec *s) { return s->rms_eps != 0 ? (double)s->rms_eps : (double)1e-5f; }

static uint64_t rnd_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int rope_freqs_len(const mk_spec *s)
{
    return s->rope_freqs_len ? s->rope_freqs_len : mk_rope_dim(s) / 2;
}

/* a function of (seed, i) alone, so the reference can ask for any factor without the writer's
 * generator state; the weights' generator never sees these draws */
static float random_factor(const mk_spec *s, int i)
{
    uint64_t r = (s->seed + 0x5bd1e995ull) * 0x9e3779b97f4a7c15ull ^
                 ((uint64_t)i + 1) * 0xbf58476d1ce4e5b9ull;
    for (int k = 0; k < 4; k++)
        rnd_next(&r);
    return (float)(1.0 + 7.0 * (double)(rnd_next(&r) >> 11) * 0x1.0p-53);
}

double mk_rope_factor(const mk_spec *s, int i)
{
    if (!s->rope_freqs)
        return 1.0;
    return s->rope_factors ? (double)s->rope_factors[i] : (double)random_factor(s, i);
}

static float rnd_uniform(uint64_t *s) /* [-1, 1) */
{
    return (float)((double)(rnd_next(s) >> 11) * 0x1.0p-52 - 1.0);
}

static void tensor(cairn__gguf_writer *w, const mk_spec *s, uint64_t *rng, const char *name,
                   uint32_t type, uint64_t n0, uint64_t n1, float scale, float offset)
{
    if (s->omit && strcmp(s->omit, name) == 0)
        return;
    uint64_t ne[2] = {n0, n1};
    int flat = s->flatten && strcmp(s->flatten, name) == 0;
    if (s->misshape && strcmp(s->misshape, name) == 0)
        ne[1] = n1 + 1;
    const size_t n = (size_t)(ne[0] * ne[1]);
    if (flat) {
        ne[0] = n;
        ne[1] = 1;
    }
    float *v = malloc(n * sizeof *v);
    if (!v) {
        gw_tensor_f32(w, name, 999, 0, ne, NULL); /* latches a failure in the writer */
        return;
    }
    for (size_t i = 0; i < n; i++)
        v[i] = offset + scale * rnd_uniform(rng);
    gw_tensor_f32(w, name, type,
                  flat || (n1 == 1 && !(s->misshape && strcmp(s->misshape, name) == 0)) ? 1 : 2, ne,
                  v);
    free(v);
}

static void vocab(cairn__gguf_writer *w, int n, uint32_t bos)
{
    char **tok = calloc((size_t)n, sizeof *tok);
    float *scores = calloc((size_t)n, sizeof *scores);
    int32_t *types = calloc((size_t)n, sizeof *types);
    static const char *words[] = {"\xe2\x96\x81"
                                  "the",
                                  "\xe2\x96\x81"
                                  "a",
                                  "in",
                                  "er",
                                  "\xe2\x96\x81"
                                  "and",
                                  "on",
                                  "ing",
                                  "\xe2\x96\x81"
                                  "of",
                                  "es",
                                  "\xe2\x96\x81"
                                  "to"};
    if (!tok || !scores || !types)
        goto out;
    for (int i = 0; i < n; i++) {
        char b[64];
        if (i == 0)
            snprintf(b, sizeof b, "<unk>"), types[i] = 2;
        else if (i == 1)
            snprintf(b, sizeof b, "<s>"), types[i] = 3;
        else if (i == 2)
            snprintf(b, sizeof b, "</s>"), types[i] = 3;
        else if (i < 259)
            snprintf(b, sizeof b, "<0x%02X>", i - 3), types[i] = 6;
        else if (i - 259 < 10)
            snprintf(b, sizeof b, "%s", words[i - 259]), types[i] = 1,
                                                         scores[i] = -(float)(i - 259);
        else
            snprintf(b, sizeof b, "w%d", i), types[i] = 1, scores[i] = -100.0f - (float)i;
        tok[i] = strdup(b);
        if (!tok[i])
            goto out;
    }
    gw_kv_str(w, "tokenizer.ggml.model", "llama");
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, (size_t)n);
    gw_kv_arr_f32(w, "tokenizer.ggml.scores", scores, (size_t)n);
    gw_kv_arr_i32(w, "tokenizer.ggml.token_type", types, (size_t)n);
    gw_kv_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gw_kv_u32(w, "tokenizer.ggml.bos_token_id", bos);
    gw_kv_u32(w, "tokenizer.ggml.eos_token_id", 2);
out:
    if (tok)
        for (int i = 0; i < n; i++)
            free(tok[i]);
    free(tok);
    free(scores);
    free(types);
}

/* the storage type of a matrix with rows of n0 elements */
static uint32_t mat_type(const mk_spec *s, uint64_t n0)
{
    const uint64_t be = cairn__quant_block_elems(s->wtype);
    return s->wtype_fallback && be && n0 % be ? s->wtype_fallback : s->wtype;
}

int mk_model(const mk_spec *s, unsigned char **buf, size_t *len)
{
    cairn__gguf_writer *w = gw_new(3, 32);
    if (!w)
        return -1;
    uint64_t rng = s->seed * 0x9e3779b97f4a7c15ull + 12345;
    char k[128];
    const int hd = s->dim / s->n_heads;
    const uint64_t qd = (uint64_t)s->n_heads * hd, kvd = (uint64_t)s->n_kv_heads * hd;
    gw_kv_str(w, "general.architecture", s->arch);
    gw_kv_str(w, "general.name", "cairn-test-model");
#define KU(key, v) (snprintf(k, sizeof k, "%s." key, s->arch), gw_kv_u32(w, k, (uint32_t)(v)))
#define KF(key, v) (snprintf(k, sizeof k, "%s." key, s->arch), gw_kv_f32(w, k, (v)))
    KU("context_length", s->ctx);
    KU("embedding_length", s->meta_dim ? s->meta_dim : s->dim);
    KU("block_count", s->meta_layers ? s->meta_layers : s->n_layers);
    KU("feed_forward_length", s->ff);
    KU("attention.head_count", s->n_heads);
    KU("attention.head_count_kv", s->n_kv_heads);
    KU("rope.dimension_count", mk_rope_dim(s));
    KF("rope.freq_base", (float)mk_rope_base(s));
    if (!s->no_rms_eps)
        KF("attention.layer_norm_rms_epsilon", (float)mk_rms_eps(s));
    if (mk_swa(s))
        KU("attention.sliding_window", mk_swa(s));
    if (s->rope_scaling != 0) {
        snprintf(k, sizeof k, "%s.rope.scaling.type", s->arch);
        gw_kv_str(w, k, s->rope_scaling_type ? s->rope_scaling_type : "linear");
        KF("rope.scaling.factor", s->rope_scaling);
    }
    if (mk_attn_softcap(s) != 0) {
        KF("attn_logit_softcapping", (float)mk_attn_softcap(s));
        KF("final_logit_softcapping", (float)mk_final_softcap(s));
    }
#undef KU
#undef KF
    if (s->tokenizer) {
        vocab(w, s->vocab, s->bad_bos ? (uint32_t)s->vocab + 100 : 1);
        if (s->no_bos)
            gw_kv_bool(w, "tokenizer.ggml.add_bos_token", 0);
    }
    const float e_in = 1.0f / sqrtf((float)s->dim), e_ff = 1.0f / sqrtf((float)s->ff);
    tensor(w, s, &rng, "token_embd.weight", mat_type(s, (uint64_t)s->dim), (uint64_t)s->dim,
           (uint64_t)s->vocab, s->embd_scale != 0 ? s->embd_scale : 1.0f, 0.0f);
    if (s->rope_freqs) {
        const int nf = rope_freqs_len(s);
        float *f = malloc((size_t)(nf > 0 ? nf : 1) * sizeof *f);
        for (int i = 0; f && i < nf; i++)
            f[i] = s->rope_factors ? s->rope_factors[i] : random_factor(s, i);
        const uint64_t ne[1] = {(uint64_t)nf};
        /* type 999 latches a failure in the writer when out of memory */
        gw_tensor_f32(w, "rope_freqs.weight",
                      !f                   ? 999
                      : s->rope_freqs_type ? s->rope_freqs_type
                                           : CAIRN__GGML_F32,
                      1, ne, f);
        free(f);
    }
    for (int l = 0; l < s->n_layers; l++) {
        char n[96];
#define N(x) (snprintf(n, sizeof n, "blk.%d." x, l), n)
        tensor(w, s, &rng, N("attn_norm.weight"), CAIRN__GGML_F32, (uint64_t)s->dim, 1, 0.2f, 1.0f);
        const int phi3 = strcmp(s->arch, "phi3") == 0;
        if (phi3) /* rows of q, then k, then v, as llama.cpp's converter fuses them */
            tensor(w, s, &rng, N("attn_qkv.weight"), mat_type(s, (uint64_t)s->dim),
                   (uint64_t)s->dim, qd + 2 * kvd, e_in * 2.0f, 0.0f);
        else {
            tensor(w, s, &rng, N("attn_q.weight"), mat_type(s, (uint64_t)s->dim), (uint64_t)s->dim,
                   qd, e_in * 2.0f, 0.0f);
            tensor(w, s, &rng, N("attn_k.weight"), mat_type(s, (uint64_t)s->dim), (uint64_t)s->dim,
                   kvd, e_in * 2.0f, 0.0f);
            tensor(w, s, &rng, N("attn_v.weight"), mat_type(s, (uint64_t)s->dim), (uint64_t)s->dim,
                   kvd, e_in, 0.0f);
        }
        if (strcmp(s->arch, "qwen2") == 0) {
            tensor(w, s, &rng, N("attn_q.bias"), CAIRN__GGML_F32, qd, 1, 0.1f, 0.0f);
            tensor(w, s, &rng, N("attn_k.bias"), CAIRN__GGML_F32, kvd, 1, 0.1f, 0.0f);
            tensor(w, s, &rng, N("attn_v.bias"), CAIRN__GGML_F32, kvd, 1, 0.1f, 0.0f);
        }
        if (strcmp(s->arch, "qwen3") == 0 || strcmp(s->arch, "gemma3") == 0) {
            /* per-head q/k norms, as attn_norm's scale */
            tensor(w, s, &rng, N("attn_q_norm.weight"), CAIRN__GGML_F32, (uint64_t)hd, 1, 0.2f,
                   1.0f);
            tensor(w, s, &rng, N("attn_k_norm.weight"), CAIRN__GGML_F32, (uint64_t)hd, 1, 0.2f,
                   1.0f);
        }
        tensor(w, s, &rng, N("attn_output.weight"), mat_type(s, qd), qd, (uint64_t)s->dim, e_in,
               0.0f);
        if (is_gemma(s)) /* the norms as the converter writes them: gemma's 1 already added */
            tensor(w, s, &rng, N("post_attention_norm.weight"), CAIRN__GGML_F32, (uint64_t)s->dim,
                   1, 0.2f, 1.0f);
        tensor(w, s, &rng, N("ffn_norm.weight"), CAIRN__GGML_F32, (uint64_t)s->dim, 1, 0.2f, 1.0f);
        if (phi3) /* gate rows, then up rows */
            tensor(w, s, &rng, N("ffn_up.weight"), mat_type(s, (uint64_t)s->dim), (uint64_t)s->dim,
                   2 * (uint64_t)s->ff, e_in, 0.0f);
        else {
            tensor(w, s, &rng, N("ffn_gate.weight"), mat_type(s, (uint64_t)s->dim),
                   (uint64_t)s->dim, (uint64_t)s->ff, e_in, 0.0f);
            tensor(w, s, &rng, N("ffn_up.weight"), mat_type(s, (uint64_t)s->dim), (uint64_t)s->dim,
                   (uint64_t)s->ff, e_in, 0.0f);
        }
        tensor(w, s, &rng, N("ffn_down.weight"), mat_type(s, (uint64_t)s->ff), (uint64_t)s->ff,
               (uint64_t)s->dim, e_ff, 0.0f);
        if (is_gemma(s))
            tensor(w, s, &rng, N("post_ffw_norm.weight"), CAIRN__GGML_F32, (uint64_t)s->dim, 1,
                   0.2f, 1.0f);
#undef N
    }
    tensor(w, s, &rng, "output_norm.weight", CAIRN__GGML_F32, (uint64_t)s->dim, 1, 0.2f, 1.0f);
    if (!s->tied && !is_gemma(s)) /* gemma's output is always its embeddings */
        tensor(w, s, &rng, "output.weight", mat_type(s, (uint64_t)s->dim), (uint64_t)s->dim,
               (uint64_t)s->vocab, e_in * 4.0f, 0.0f);
    if (s->extra)
        tensor(w, s, &rng, s->extra, CAIRN__GGML_F32, (uint64_t)s->dim, 1, 1.0f, 0.0f);
    int rc = gw_write_mem(w, buf, len);
    gw_free(w);
    return rc;
}

int mk_load(const mk_spec *s, mk_loaded *L, char *err, size_t errlen)
{
    memset(L, 0, sizeof *L);
    size_t len;
    if (mk_model(s, &L->buf, &len) != 0) {
        snprintf(err, errlen, "mk_model failed");
        return -1000;
    }
    int rc = cairn__gguf_open_mem(L->buf, len, &L->g, err, errlen);
    if (rc)
        return rc;
    return cairn__model_load(L->g, &L->m, err, errlen);
}

void mk_unload(mk_loaded *L)
{
    cairn__model_free(L->m);
    cairn__gguf_close(L->g);
    free(L->buf);
}
