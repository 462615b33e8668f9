/* gpu/model.c - binds a GGUF file's tensors to a transformer description, and picks backends.
 *
 * Loading validates everything a forward pass will rely on, so the backends never check a
 * shape: each tensor must exist with exactly the ggml shape the hyperparameters imply (ne[0] is
 * the input dimension, ne[1] the output one) and a type the kernels implement. Errors name the
 * tensor or key. Nothing is copied: matrices point into the reader's mapping, and only the small
 * norm/bias vectors that are not already f32 get converted.
 *
 * The converse holds too: every tensor in the file must be one the forward pass uses. A tensor
 * left over means the metadata and the tensors disagree (blk.N.* past block_count: a file
 * whose block_count was damaged would otherwise run with layers silently dropped) or the model
 * needs something this engine does not implement (an output bias, rope_freqs.weight in a
 * qwen2 file); either way its output would be wrong without a word, so loading refuses and
 * names the tensor.
 *
 * Llama 3.x files carry rope_freqs.weight: one global F32 vector of rope_dim/2 factors (llama.cpp
 * binds the same tensor to every layer) by which the rotary frequency of each pair is divided,
 * stretching the low frequencies for long contexts. llama.cpp's converter always writes it as
 * F32 and its rope kernels read it only as F32, so no other type is accepted. A factor that is
 * zero, negative, not finite, or so tiny that the frequency it divides overflows a float would
 * turn every rotation into nonsense, so it is refused here, naming its index.
 */
#include "gpu/model.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/backend.h"
#include "gpu/backend_plugin.h" /* the CUDA module, for "cuda" and "auto" */
#include "gpu/quant.h"
#include "gpu/sample_core.h"

#include "cairn_errors.h"
/* errors: cairn__errf (gpu/gguf.h) formats the message and returns the code */

typedef struct {
    cairn__model *m;
    char *err;
    size_t errlen;
    uint64_t type_bytes[64]; /* bytes per storage type, to name the dominant one */
    unsigned char *used;     /* per file tensor: bound by the model */
} loader;

/* Finds a tensor and marks it as used by the model. */
static const cairn__gguf_tensor *find_tensor(loader *L, const char *name)
{
    const cairn__gguf_tensor *t = cairn__gguf_tensor_find(L->m->gguf, name);
    if (t)
        L->used[t - cairn__gguf_tensor_at(L->m->gguf, 0)] = 1;
    return t;
}

static void account(loader *L, const cairn__gguf_tensor *t)
{
    L->m->n_params += t->n_elements;
    L->m->weight_bytes += t->nbytes;
    if (t->type < 64)
        L->type_bytes[t->type] += t->nbytes;
}

/* A matrix with ggml ne = [cols, rows]. */
static int bind_mat(loader *L, const char *name, int64_t cols, int64_t rows, cairn__mat *out,
                    int required)
{
    const cairn__gguf_tensor *t = find_tensor(L, name);
    if (!t) {
        if (!required) {
            memset(out, 0, sizeof *out);
            return 0;
        }
        return cairn__errf(L->err, L->errlen, CAIRN_EFORMAT, "missing tensor '%s'", name);
    }
    if (t->ne[0] != (uint64_t)cols || t->ne[1] != (uint64_t)rows || t->ne[2] != 1 || t->ne[3] != 1)
        return cairn__errf(L->err, L->errlen, CAIRN_EFORMAT,
                           "tensor '%s' has shape [%llu, %llu, %llu, %llu], expected [%lld, %lld]",
                           name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                           (unsigned long long)t->ne[2], (unsigned long long)t->ne[3],
                           (long long)cols, (long long)rows);
    if (!cairn__quant_supported(t->type))
        return cairn__errf(L->err, L->errlen, CAIRN_EUNSUPPORTED,
                           "tensor '%s' has unsupported type %s (%u)", name,
                           cairn__ggml_type_name(t->type), t->type);
    const uint64_t be = cairn__quant_block_elems(t->type);
    if ((uint64_t)cols % be != 0)
        return cairn__errf(L->err, L->errlen, CAIRN_EFORMAT,
                           "tensor '%s': row of %lld is not a whole number of %s blocks", name,
                           (long long)cols, cairn__ggml_type_name(t->type));
    /* the kernels read blocks through their structs (f16 members) and f32 rows as floats */
    if ((uintptr_t)t->data % (t->type == CAIRN__GGML_F32 ? 4 : 2) != 0)
        return cairn__errf(L->err, L->errlen, CAIRN_EINVAL,
                           "tensor '%s': data misaligned in memory", name);
    out->type = t->type;
    out->rows = rows;
    out->cols = cols;
    out->row_bytes = (size_t)((uint64_t)cols / be * cairn__quant_block_bytes(t->type));
    out->data = t->data;
    account(L, t);
    return 0;
}

/* A vector of n floats, converted to f32 if stored otherwise. *out NULL if absent and optional. */
static int bind_vec(loader *L, const char *name, int64_t n, const float **out, int required)
{
    *out = NULL;
    const cairn__gguf_tensor *t = find_tensor(L, name);
    if (!t)
        return required ? cairn__errf(L->err, L->errlen, CAIRN_EFORMAT, "missing tensor '%s'", name)
                        : 0;
    if (t->n_elements != (uint64_t)n || t->ne[0] != (uint64_t)n)
        return cairn__errf(
            L->err, L->errlen, CAIRN_EFORMAT, "tensor '%s' has shape [%llu, %llu], expected [%lld]",
            name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (long long)n);
    if (!cairn__quant_supported(t->type) || (uint64_t)n % cairn__quant_block_elems(t->type) != 0)
        return cairn__errf(L->err, L->errlen, CAIRN_EUNSUPPORTED,
                           "tensor '%s' has unsupported type %s for a vector", name,
                           cairn__ggml_type_name(t->type));
    account(L, t);
    if (t->type == CAIRN__GGML_F32 && (uintptr_t)t->data % 4 == 0) {
        *out = t->data;
        return 0;
    }
    cairn__model *m = L->m;
    float **owned = realloc(m->owned, (m->n_owned + 1) * sizeof *owned);
    if (!owned)
        return cairn__errf(L->err, L->errlen, CAIRN_ENOMEM, "out of memory");
    m->owned = owned;
    float *v = malloc((size_t)n * sizeof(float));
    if (!v)
        return cairn__errf(L->err, L->errlen, CAIRN_ENOMEM, "out of memory");
    m->owned[m->n_owned++] = v;
    if (t->type == CAIRN__GGML_F32) {
        memcpy(v, t->data, (size_t)n * sizeof(float));
    } else {
        /* block types need their struct alignment: copy the raw bytes first */
        void *raw = malloc(t->nbytes);
        if (!raw)
            return cairn__errf(L->err, L->errlen, CAIRN_ENOMEM, "out of memory");
        memcpy(raw, t->data, t->nbytes);
        cairn__dequant_row(t->type, raw, v, (uint64_t)n);
        free(raw);
    }
    *out = v;
    return 0;
}

/* rope_freqs.weight, optional: F32, exactly rope_dim/2 finite positive factors. */
static int bind_rope_freqs(loader *L)
{
    cairn__model *m = L->m;
    static const char name[] = "rope_freqs.weight";
    const cairn__gguf_tensor *t = find_tensor(L, name);
    m->rope_freqs = NULL;
    if (!t)
        return 0;
    const int64_t n = m->rope_dim / 2;
    if (t->type != CAIRN__GGML_F32)
        return cairn__errf(L->err, L->errlen, CAIRN_EUNSUPPORTED,
                           "tensor '%s' has type %s (%u), expected F32", name,
                           cairn__ggml_type_name(t->type), t->type);
    if (t->n_elements != (uint64_t)n || t->ne[0] != (uint64_t)n)
        return cairn__errf(L->err, L->errlen, CAIRN_EFORMAT,
                           "tensor '%s' has shape [%llu, %llu, %llu, %llu], expected [%lld] "
                           "(%s.rope.dimension_count %d / 2)",
                           name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                           (unsigned long long)t->ne[2], (unsigned long long)t->ne[3], (long long)n,
                           m->arch_name, m->rope_dim);
    int rc = bind_vec(L, name, n, &m->rope_freqs, 1);
    if (rc)
        return rc;
    for (int64_t i = 0; i < n; i++) {
        const float f = m->rope_freqs[i];
        if (!isfinite(f) || !(f > 0.0f))
            return cairn__errf(L->err, L->errlen, CAIRN_EFORMAT,
                               "tensor '%s': factor %lld is %g, not a finite positive number", name,
                               (long long)i, (double)f);
        /* the backends keep the frequency base^(-2i/rope_dim) / f as a float: a factor so tiny
         * that it overflows would give infinite angles, hence NaN rotations */
        if (!(pow((double)m->rope_base, -2.0 * (double)i / (double)m->rope_dim) / (double)f <=
              (double)FLT_MAX))
            return cairn__errf(L->err, L->errlen, CAIRN_EFORMAT,
                               "tensor '%s': factor %lld is %g, so small that the rotary "
                               "frequency it divides overflows",
                               name, (long long)i, (double)f);
    }
    return 0;
}

/* A matrix view of rows [r0, r0 + rows) of W: phi3's fused tensors split into the matrices
 * the forward pass multiplies by (a block row is whole, so each view starts on a row) */
static cairn__mat row_view(const cairn__mat *W, int64_t r0, int64_t rows)
{
    cairn__mat v = *W;
    v.rows = rows;
    v.data = W->data + (size_t)r0 * W->row_bytes;
    return v;
}

/* <arch>.<key> as a positive int; required or default */
static int get_hp(loader *L, const char *key, int *out, int dflt, int required)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", L->m->arch_name, key);
    uint32_t v;
    int rc = cairn__gguf_get_u32(L->m->gguf, full, &v);
    if (rc == CAIRN_ENOTFOUND) {
        if (required)
            return cairn__errf(L->err, L->errlen, CAIRN_EFORMAT, "missing key '%s'", full);
        *out = dflt;
        return 0;
    }
    if (rc != 0)
        return cairn__errf(L->err, L->errlen, CAIRN_EFORMAT,
                           "key '%s' is not an unsigned integer (%s)", full,
                           cairn__gguf_kv_type(L->m->gguf, full) == CAIRN__GGUF_ARRAY
                               ? "per-layer arrays are not supported"
                               : "wrong type");
    if (v == 0 || v > (1u << 30))
        return cairn__errf(L->err, L->errlen, CAIRN_EFORMAT, "key '%s' has out-of-range value %u",
                           full, v);
    *out = (int)v;
    return 0;
}

/* <arch>.<key> as a finite positive float; required (dflt ignored) or default. An infinite
 * epsilon would zero every activation and an infinite base freeze every rotation: the forward
 * pass would run and produce garbage, so both are refused here. */
static int get_hpf(loader *L, const char *key, float *out, float dflt, int required)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", L->m->arch_name, key);
    int rc = cairn__gguf_get_f32(L->m->gguf, full, out);
    if (rc == CAIRN_ENOTFOUND) {
        if (required)
            return cairn__errf(L->err, L->errlen, CAIRN_EFORMAT, "missing key '%s'", full);
        *out = dflt;
        return 0;
    }
    if (rc != 0)
        return cairn__errf(L->err, L->errlen, CAIRN_EFORMAT, "key '%s' is not a number (%s)", full,
                           cairn__gguf_vtype_name(cairn__gguf_kv_type(L->m->gguf, full)));
    if (!isfinite(*out) || !(*out > 0.0f))
        return cairn__errf(L->err, L->errlen, CAIRN_EFORMAT,
                           "key '%s' is %g, not a finite positive number", full, (double)*out);
    return 0;
}

/* The first file tensor the model did not bind, as an error naming it; 0 if there is none. */
static int check_unused(loader *L)
{
    const cairn__model *m = L->m;
    const size_t nt = cairn__gguf_n_tensors(m->gguf);
    for (size_t i = 0; i < nt; i++) {
        if (L->used[i])
            continue;
        const char *name = cairn__gguf_tensor_at(m->gguf, i)->name;
        char *end;
        if (strncmp(name, "blk.", 4) == 0 && name[4] >= '0' && name[4] <= '9') {
            unsigned long blk = strtoul(name + 4, &end, 10);
            if (*end == '.' && blk >= (unsigned long)m->n_layers)
                return cairn__errf(L->err, L->errlen, CAIRN_EFORMAT,
                                   "tensor '%s' is for block %lu, but %s.block_count is %d "
                                   "(wrong number of tensors: the metadata and the tensors "
                                   "disagree)",
                                   name, blk, m->arch_name, m->n_layers);
        }
        return cairn__errf(L->err, L->errlen, CAIRN_EUNSUPPORTED,
                           "tensor '%s' is not used by the %s architecture as cairn "
                           "implements it; ignoring it would give wrong output",
                           name, m->arch_name);
    }
    return 0;
}

/* What the architectures differ in besides their tensors, as llama.cpp's hyperparameter loader
 * and graphs have it: the window and which layers have it, the scales and the caps. */
static int arch_hparams(loader *L)
{
    cairn__model *m = L->m;
    const int a = m->arch, gemma = a == CAIRN__ARCH_GEMMA2 || a == CAIRN__ARCH_GEMMA3;
    int rc;
    m->embd_scale = gemma ? sqrtf((float)m->dim) : 1.0f;
    m->rope_scale = 1.0f;
    /* gemma's 27B models scale queries by (dim / heads)^-0.5, not head_dim^-0.5 (gemma_pytorch's
     * query_pre_attn_scalar); llama.cpp tells them by their layer count, and so does this */
    const int g27 = (a == CAIRN__ARCH_GEMMA2 && m->n_layers == 46) ||
                    (a == CAIRN__ARCH_GEMMA3 && m->n_layers == 62);
    m->attn_scale = 1.0f / sqrtf((float)(g27 ? m->dim / m->n_heads : m->head_dim));
    m->ffn_act = gemma ? CAIRN__FFN_GELU : CAIRN__FFN_SILU;
    if (a == CAIRN__ARCH_QWEN2 || a == CAIRN__ARCH_QWEN3)
        return 0; /* their files' window is off in every released model; llama.cpp ignores it */
    int dflt = 0;
    if (a == CAIRN__ARCH_PHI3) { /* llama.cpp's values for files written before the key */
        if ((m->n_layers == 32 || m->n_layers == 40) && m->n_ctx_train == 4096)
            dflt = 2047; /* Phi-3-mini/medium-4k */
        else if (m->n_layers == 32 && m->n_kv_heads == 32 && m->n_ctx_train == 131072)
            dflt = 262144;
        else if (m->n_layers == 40 && m->n_ctx_train == 131072)
            dflt = 131072;
    } else if (a == CAIRN__ARCH_GEMMA2)
        dflt = 4096;
    if ((rc = get_hp(L, "attention.sliding_window", &m->n_swa, dflt, a == CAIRN__ARCH_GEMMA3)))
        return rc;
    if (a == CAIRN__ARCH_GEMMA2 &&
        ((rc = get_hpf(L, "attn_logit_softcapping", &m->attn_softcap, 50.0f, 0)) ||
         (rc = get_hpf(L, "final_logit_softcapping", &m->final_softcap, 30.0f, 0))))
        return rc;
    if (a == CAIRN__ARCH_GEMMA3) {
        m->rope_base_local = 10000.0f;
        /* the global layers' linear scaling (Gemma 3 4B and up: 8); other kinds refused */
        char key[128];
        const char *t;
        size_t tl;
        snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch_name);
        if (cairn__gguf_get_str(m->gguf, key, &t, &tl) == 0 &&
            !(tl == 6 && memcmp(t, "linear", 6) == 0) && !(tl == 4 && memcmp(t, "none", 4) == 0))
            return cairn__errf(L->err, L->errlen, CAIRN_EUNSUPPORTED,
                               "%s: rope scaling '%.*s' is not supported (linear, none)", key,
                               (int)(tl > 32 ? 32 : tl), t);
        float f;
        if ((rc = get_hpf(L, "rope.scaling.factor", &f, 1.0f, 0)))
            return rc;
        m->rope_scale = 1.0f / f;
    }
    return 0;
}

/* layer l's window and rope: every layer for llama and phi3, even ones for gemma2 (llama.cpp's
 * swa pattern 2), l % 6 < 5 for gemma3 (pattern 6, with the local rope base) */
static void layer_window(const cairn__model *m, int l, cairn__layer *ly)
{
    const int slide = m->arch == CAIRN__ARCH_GEMMA2   ? l % 2 == 0
                      : m->arch == CAIRN__ARCH_GEMMA3 ? l % 6 < 5
                                                      : 1;
    ly->swa = slide ? m->n_swa : 0;
    ly->rope_local = m->arch == CAIRN__ARCH_GEMMA3 && slide;
}

static int load(loader *L)
{
    cairn__model *m = L->m;
    const char *arch;
    size_t alen;
    int rc = cairn__gguf_get_str(m->gguf, "general.architecture", &arch, &alen);
    if (rc == CAIRN_ENOTFOUND)
        return cairn__errf(L->err, L->errlen, CAIRN_EFORMAT, "missing key 'general.architecture'");
    if (rc != 0)
        return cairn__errf(L->err, L->errlen, CAIRN_EFORMAT,
                           "key 'general.architecture' is not a string");
    /* rotation pairing as llama.cpp's llama_model_rope_type gives it for each */
    static const struct {
        const char *name;
        int arch, rope_mode;
    } archs[] = {
        {"llama", CAIRN__ARCH_LLAMA, CAIRN__ROPE_NORMAL},
        {"qwen2", CAIRN__ARCH_QWEN2, CAIRN__ROPE_NEOX},
        {"qwen3", CAIRN__ARCH_QWEN3, CAIRN__ROPE_NEOX}, /* qwen2 without biases, q/k norms */
        {"phi3", CAIRN__ARCH_PHI3, CAIRN__ROPE_NEOX},
        {"gemma2", CAIRN__ARCH_GEMMA2, CAIRN__ROPE_NEOX},
        {"gemma3", CAIRN__ARCH_GEMMA3, CAIRN__ROPE_NEOX},
    };
    m->arch_name = NULL;
    for (size_t i = 0; i < sizeof archs / sizeof *archs; i++)
        if (alen == strlen(archs[i].name) && memcmp(arch, archs[i].name, alen) == 0) {
            m->arch = archs[i].arch;
            m->arch_name = archs[i].name;
            m->rope_mode = archs[i].rope_mode;
        }
    if (!m->arch_name)
        return cairn__errf(L->err, L->errlen, CAIRN_EUNSUPPORTED,
                           "general.architecture: unsupported architecture '%.*s' (supported: "
                           "llama, qwen2, qwen3, phi3, gemma2, gemma3)",
                           (int)(alen > 64 ? 64 : alen), arch);

    if ((rc = get_hp(L, "embedding_length", &m->dim, 0, 1)) ||
        (rc = get_hp(L, "block_count", &m->n_layers, 0, 1)) ||
        (rc = get_hp(L, "attention.head_count", &m->n_heads, 0, 1)) ||
        (rc = get_hp(L, "feed_forward_length", &m->ff_dim, 0, 1)) ||
        (rc = get_hp(L, "attention.head_count_kv", &m->n_kv_heads, m->n_heads, 0)) ||
        (rc = get_hp(L, "context_length", &m->n_ctx_train, 4096, 0)))
        return rc;
    if (m->n_heads % m->n_kv_heads != 0)
        return cairn__errf(L->err, L->errlen, CAIRN_EFORMAT,
                           "%s.attention.head_count (%d) is not a multiple of head_count_kv (%d)",
                           m->arch_name, m->n_heads, m->n_kv_heads);
    /* token_embd's width is embedding_length as the weights see it: check it before anything
     * derived from embedding_length (the head dimension, the rope checks), so a damaged
     * embedding_length is reported as itself rather than as a rope dimension that no longer fits */
    const cairn__gguf_tensor *te = find_tensor(L, "token_embd.weight");
    if (!te)
        return cairn__errf(L->err, L->errlen, CAIRN_EFORMAT, "missing tensor 'token_embd.weight'");
    if (te->ne[1] == 0 || te->ne[1] > (1u << 30))
        return cairn__errf(L->err, L->errlen, CAIRN_EFORMAT,
                           "tensor 'token_embd.weight' has a bad vocabulary size");
    m->n_vocab = (int)te->ne[1];
    if (te->ne[0] != (uint64_t)m->dim || te->ne[2] != 1 || te->ne[3] != 1) {
        /* name the shape the file should have had: the row count is the vocabulary's size,
         * which only the tokenizer knows when the tensor itself is malformed */
        int et;
        uint64_t nv;
        char rows[32] = "n_vocab";
        if (cairn__gguf_get_arr(m->gguf, "tokenizer.ggml.tokens", &et, &nv) == 0)
            snprintf(rows, sizeof rows, "%llu", (unsigned long long)nv);
        return cairn__errf(L->err, L->errlen, CAIRN_EFORMAT,
                           "tensor 'token_embd.weight' has shape [%llu, %llu, %llu, %llu], "
                           "expected [%d, %s] (%s.embedding_length, vocabulary size)",
                           (unsigned long long)te->ne[0], (unsigned long long)te->ne[1],
                           (unsigned long long)te->ne[2], (unsigned long long)te->ne[3], m->dim,
                           rows, m->arch_name);
    }

    if ((rc = get_hp(L, "attention.key_length", &m->head_dim, m->dim / m->n_heads, 0)))
        return rc;
    int vlen;
    if ((rc = get_hp(L, "attention.value_length", &vlen, m->head_dim, 0)))
        return rc;
    if (vlen != m->head_dim)
        return cairn__errf(L->err, L->errlen, CAIRN_EUNSUPPORTED,
                           "%s.attention.value_length %d differs from key_length %d", m->arch_name,
                           vlen, m->head_dim);
    if (m->head_dim < 2 || m->head_dim % 2 != 0)
        return cairn__errf(L->err, L->errlen, CAIRN_EFORMAT, "head dimension %d is not even",
                           m->head_dim);
    if ((rc = get_hp(L, "rope.dimension_count", &m->rope_dim, m->head_dim, 0)))
        return rc;
    if (m->rope_dim > m->head_dim || m->rope_dim % 2 != 0) {
        /* name where the head dimension came from when it was derived, not read */
        char why[96] = "", kl[96];
        snprintf(kl, sizeof kl, "%s.attention.key_length", m->arch_name);
        if (cairn__gguf_kv_type(m->gguf, kl) == CAIRN_ENOTFOUND)
            snprintf(why, sizeof why, " (%s.embedding_length %d / head_count %d)", m->arch_name,
                     m->dim, m->n_heads);
        return cairn__errf(L->err, L->errlen, CAIRN_EFORMAT,
                           "%s.rope.dimension_count %d must be even and <= the head dimension "
                           "%d%s",
                           m->arch_name, m->rope_dim, m->head_dim, why);
    }
    /* the epsilon is part of what the weights were trained with (1e-5 and 1e-6 are both common),
     * so there is no safe default: llama.cpp requires the key too */
    if ((rc = get_hpf(L, "rope.freq_base", &m->rope_base, 10000.0f, 0)) ||
        (rc = get_hpf(L, "attention.layer_norm_rms_epsilon", &m->rms_eps, 0.0f, 1)))
        return rc;

    if ((rc = arch_hparams(L)))
        return rc;

    const int gemma = m->arch == CAIRN__ARCH_GEMMA2 || m->arch == CAIRN__ARCH_GEMMA3;
    const int64_t dim = m->dim, qd = (int64_t)m->n_heads * m->head_dim,
                  kvd = (int64_t)m->n_kv_heads * m->head_dim;
    if ((rc = bind_mat(L, "token_embd.weight", dim, m->n_vocab, &m->tok_embd, 1)) ||
        (rc = bind_vec(L, "output_norm.weight", dim, &m->output_norm, 1)) ||
        /* gemma's output is the embeddings (llama.cpp does not look for output.weight there:
         * one in the file is left over, refused below) */
        (!gemma && (rc = bind_mat(L, "output.weight", dim, m->n_vocab, &m->output, 0))))
        return rc;
    if (!m->output.data) {
        m->output = m->tok_embd;
        m->tied_output = 1;
    }
    /* llama.cpp reads rope_freqs for llama only: in a qwen2 file it is left over, refused below */
    if (m->arch == CAIRN__ARCH_LLAMA && (rc = bind_rope_freqs(L)))
        return rc;
    m->layers = calloc((size_t)m->n_layers, sizeof *m->layers);
    if (!m->layers)
        return cairn__errf(L->err, L->errlen, CAIRN_ENOMEM, "out of memory");
    const int need_bias = m->arch == CAIRN__ARCH_QWEN2,
              qk_norm = m->arch == CAIRN__ARCH_QWEN3 || m->arch == CAIRN__ARCH_GEMMA3,
              phi3 = m->arch == CAIRN__ARCH_PHI3;
    for (int l = 0; l < m->n_layers; l++) {
        cairn__layer *ly = &m->layers[l];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, l), n)
        layer_window(m, l, ly);
        cairn__mat fused;
        /* phi3: q, k, v as rows of attn_qkv when the file fuses them (llama.cpp's converter
         * does; separate attn_q/k/v are read otherwise) */
        if (phi3 && (rc = bind_mat(L, NAME("attn_qkv.weight"), dim, qd + 2 * kvd, &fused, 0)))
            return rc;
        if (phi3 && fused.data) {
            ly->wq = row_view(&fused, 0, qd);
            ly->wk = row_view(&fused, qd, kvd);
            ly->wv = row_view(&fused, qd + kvd, kvd);
        } else if ((rc = bind_mat(L, NAME("attn_q.weight"), dim, qd, &ly->wq, 1)) ||
                   (rc = bind_mat(L, NAME("attn_k.weight"), dim, kvd, &ly->wk, 1)) ||
                   (rc = bind_mat(L, NAME("attn_v.weight"), dim, kvd, &ly->wv, 1)))
            return rc;
        if ((rc = bind_vec(L, NAME("attn_norm.weight"), dim, &ly->attn_norm, 1)) ||
            (rc = bind_mat(L, NAME("attn_output.weight"), qd, dim, &ly->wo, 1)) ||
            (rc = bind_vec(L, NAME("attn_q.bias"), qd, &ly->bq, need_bias)) ||
            (rc = bind_vec(L, NAME("attn_k.bias"), kvd, &ly->bk, need_bias)) ||
            (rc = bind_vec(L, NAME("attn_v.bias"), kvd, &ly->bv, need_bias)) ||
            (qk_norm &&
             ((rc = bind_vec(L, NAME("attn_q_norm.weight"), m->head_dim, &ly->q_norm, 1)) ||
              (rc = bind_vec(L, NAME("attn_k_norm.weight"), m->head_dim, &ly->k_norm, 1)))) ||
            (gemma &&
             ((rc = bind_vec(L, NAME("post_attention_norm.weight"), dim, &ly->attn_post_norm, 1)) ||
              (rc = bind_vec(L, NAME("post_ffw_norm.weight"), dim, &ly->ffn_post_norm, 1)))) ||
            (rc = bind_vec(L, NAME("ffn_norm.weight"), dim, &ly->ffn_norm, 1)) ||
            (rc = bind_mat(L, NAME("ffn_down.weight"), m->ff_dim, dim, &ly->w_down, 1)))
            return rc;
        /* phi3: one ffn_up of 2*ff rows, the gate's first (llama.cpp's LLM_FFN_SWIGLU halves) */
        if (phi3) {
            if ((rc = bind_mat(L, NAME("ffn_up.weight"), dim, 2 * (int64_t)m->ff_dim, &fused, 1)))
                return rc;
            ly->w_gate = row_view(&fused, 0, m->ff_dim);
            ly->w_up = row_view(&fused, m->ff_dim, m->ff_dim);
        } else if ((rc = bind_mat(L, NAME("ffn_gate.weight"), dim, m->ff_dim, &ly->w_gate, 1)) ||
                   (rc = bind_mat(L, NAME("ffn_up.weight"), dim, m->ff_dim, &ly->w_up, 1)))
            return rc;
#undef NAME
    }
    if ((rc = check_unused(L)))
        return rc;
    uint64_t best = 0;
    for (uint32_t t = 0; t < 64; t++)
        if (L->type_bytes[t] > best) {
            best = L->type_bytes[t];
            m->wtype = t;
        }
    return 0;
}

int cairn__model_load(cairn__gguf *g, cairn__model **out, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!out)
        return cairn__errf(err, errlen, CAIRN_EINVAL, "no output pointer");
    *out = NULL;
    if (!g)
        return cairn__errf(err, errlen, CAIRN_EINVAL, "no GGUF reader");
    cairn__model *m = calloc(1, sizeof *m);
    if (!m)
        return cairn__errf(err, errlen, CAIRN_ENOMEM, "out of memory");
    m->gguf = g;
    loader L = {.m = m, .err = err, .errlen = errlen};
    L.used = calloc(cairn__gguf_n_tensors(g) + 1, 1);
    int rc = L.used ? load(&L) : cairn__errf(err, errlen, CAIRN_ENOMEM, "out of memory");
    free(L.used);
    if (rc != 0) {
        cairn__model_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

void cairn__prefix_path(char *err, size_t errlen, const char *path)
{
    if (!err || !errlen || !err[0] || !path)
        return;
    size_t pl = strlen(path);
    if (strncmp(err, path, pl) == 0 && err[pl] == ':')
        return;
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s", err);
    snprintf(err, errlen, "%s: %s", path, tmp);
}

int cairn__model_open(const char *path, cairn__model **out, char *err, size_t errlen)
{
    if (!out)
        return cairn__errf(err, errlen, CAIRN_EINVAL, "no output pointer");
    *out = NULL;
    cairn__gguf *g;
    int rc = cairn__gguf_open(path, &g, err, errlen);
    if (rc != 0)
        return rc;
    rc = cairn__model_load(g, out, err, errlen);
    if (rc != 0) {
        cairn__gguf_close(g);
        cairn__prefix_path(err, errlen, path);
        return rc;
    }
    (*out)->owns_gguf = 1;
    return 0;
}

void cairn__model_free(cairn__model *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    if (m->owns_gguf)
        cairn__gguf_close(m->gguf);
    free(m);
}

const cairn__gguf *cairn__model_gguf(const cairn__model *m) { return m ? m->gguf : NULL; }

/* ==== backend selection and the checks every backend relies on
 * ==================================== */

const char *cairn__cache_type_name(int cache_type)
{
    return cache_type == CAIRN__CACHE_F32 ? "f32" : cache_type == CAIRN__CACHE_F16 ? "f16" : "?";
}

int cairn__cache_type_parse(const char *name)
{
    if (!name || strcmp(name, "f32") == 0)
        return CAIRN__CACHE_F32;
    return strcmp(name, "f16") == 0 ? CAIRN__CACHE_F16 : -1;
}

int cairn__backend_new(const char *kind, const cairn__model *m, const cairn__backend_opts *o,
                       cairn__backend **out, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!out)
        return cairn__errf(err, errlen, CAIRN_EINVAL, "no output pointer");
    *out = NULL;
    if (!m)
        return cairn__errf(err, errlen, CAIRN_EINVAL, "no model");
    cairn__backend_opts dflt = {0};
    if (!o)
        o = &dflt;
    if (o->n_ctx < 0 || o->n_threads < 0 || o->n_batch < 0)
        return cairn__errf(err, errlen, CAIRN_EINVAL, "negative backend option");
    if (o->cache_type != CAIRN__CACHE_F32 && o->cache_type != CAIRN__CACHE_F16)
        return cairn__errf(err, errlen, CAIRN_EINVAL, "unknown KV cache type %d (f32, f16)",
                           o->cache_type);
    /* The CUDA backend is a module loaded on first use (gpu/backend_plugin.c); "auto" takes the
     * CPU, silently, when the module cannot be loaded, finds no device, or cannot run this model
     * (EUNSUPPORTED: e.g. a head dimension beyond its attention kernel's). */
    const cairn__cuda_plugin *cuda = NULL;
    if (!kind || strcmp(kind, "auto") == 0) {
        if (cairn__cuda_plugin_load(&cuda, NULL, 0) == 0) {
            int rc = cuda->ops->create(m, o, out, err, errlen);
            if (rc != CAIRN_ENODEVICE && rc != CAIRN_EUNSUPPORTED)
                return rc;
            if (err && errlen)
                err[0] = '\0';
        }
        return cairn__backend_cpu_ops.create(m, o, out, err, errlen);
    }
    if (strcmp(kind, "cpu") == 0)
        return cairn__backend_cpu_ops.create(m, o, out, err, errlen);
    if (strcmp(kind, "cuda") == 0) {
        int rc = cairn__cuda_plugin_load(&cuda, err, errlen);
        return rc ? rc : cuda->ops->create(m, o, out, err, errlen);
    }
    return cairn__errf(err, errlen, CAIRN_EINVAL, "unknown backend '%s' (cpu, cuda, auto)", kind);
}

void cairn__backend_free(cairn__backend *b)
{
    if (b)
        b->ops->destroy(b);
}

const char *cairn__backend_name(const cairn__backend *b) { return b ? b->ops->name : "none"; }

int cairn__backend_forward(cairn__backend *b, const int32_t *tokens, int n, int pos, float *logits,
                           int all_logits)
{
    if (!b || !tokens || n < 1 || pos < 0 || pos > b->n_past)
        return cairn__errf(b ? b->err : NULL, b ? sizeof b->err : 0, CAIRN_EINVAL,
                           "bad forward arguments (n %d, pos %d, n_past %d)", n, pos,
                           b ? b->n_past : 0);
    if ((int64_t)pos + n > b->n_ctx)
        return cairn__errf(b->err, sizeof b->err, CAIRN_ECONTEXT,
                           "%d tokens at position %d exceed the context of %d", n, pos, b->n_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= b->model->n_vocab)
            return cairn__errf(b->err, sizeof b->err, CAIRN_EINVAL,
                               "token %d at index %d is outside the vocabulary (%d)", tokens[i], i,
                               b->model->n_vocab);
    if (pos < b->n_past)
        b->n_past = pos; /* the tail is about to be rewritten */
    int rc = b->ops->forward(b, tokens, n, pos, logits, all_logits);
    if (rc == 0)
        b->n_past = pos + n;
    return rc;
}

int cairn__backend_forward_sample(cairn__backend *b, int32_t token, int pos,
                                  const cairn__sample_req *q, int32_t *next)
{
    if (!b || !q || !next || pos < 0 || pos > b->n_past || q->n_pen < 0 || (q->n_pen && !q->pen))
        return cairn__errf(b ? b->err : NULL, b ? sizeof b->err : 0, CAIRN_EINVAL,
                           "bad forward arguments (pos %d, n_past %d)", pos, b ? b->n_past : 0);
    if (!b->ops->forward_sample || q->n_pen > CAIRN__SAMPLE_MAX_PEN)
        return cairn__errf(b->err, sizeof b->err, CAIRN_EUNSUPPORTED,
                           "the %s backend cannot sample this step on its device", b->ops->name);
    if ((int64_t)pos + 1 > b->n_ctx)
        return cairn__errf(b->err, sizeof b->err, CAIRN_ECONTEXT,
                           "1 token at position %d exceeds the context of %d", pos, b->n_ctx);
    const int nv = b->model->n_vocab;
    if (token < 0 || token >= nv)
        return cairn__errf(b->err, sizeof b->err, CAIRN_EINVAL,
                           "token %d is outside the vocabulary (%d)", token, nv);
    for (int i = 0; i < q->n_pen; i++)
        if (q->pen[i] < 0 || q->pen[i] >= nv)
            return cairn__errf(b->err, sizeof b->err, CAIRN_EINVAL,
                               "penalized token %d is outside the vocabulary (%d)", q->pen[i], nv);
    if (pos < b->n_past)
        b->n_past = pos;
    int rc = b->ops->forward_sample(b, token, pos, q, next);
    if (rc == 0 && (*next < 0 || *next >= nv))
        rc = cairn__errf(b->err, sizeof b->err, CAIRN_ECUDA,
                         "the device sampler returned token %d, outside the vocabulary (%d)", *next,
                         nv);
    if (rc == 0)
        b->n_past = pos + 1;
    return rc;
}

int cairn__backend_can_page(const cairn__backend *b)
{
    return b && b->ops->kv_pool && b->ops->forward_paged;
}

int cairn__backend_n_batch(const cairn__backend *b) { return b ? b->n_batch : 0; }

int cairn__backend_kv_pool(cairn__backend *b, int n_blocks)
{
    if (!b || n_blocks < 0)
        return cairn__errf(b ? b->err : NULL, b ? sizeof b->err : 0, CAIRN_EINVAL,
                           "bad KV pool size %d", n_blocks);
    if (!cairn__backend_can_page(b))
        return cairn__errf(b->err, sizeof b->err, CAIRN_EUNSUPPORTED,
                           "the %s backend has no paged KV cache", b->ops->name);
    return b->ops->kv_pool(b, n_blocks);
}

int cairn__backend_forward_paged(cairn__backend *b, const cairn__kv_seq *s, int n_seqs)
{
    if (!b || (n_seqs && !s) || n_seqs < 0)
        return cairn__errf(b ? b->err : NULL, b ? sizeof b->err : 0, CAIRN_EINVAL,
                           "bad paged forward arguments");
    if (!cairn__backend_can_page(b))
        return cairn__errf(b->err, sizeof b->err, CAIRN_EUNSUPPORTED,
                           "the %s backend has no paged KV cache", b->ops->name);
    int n_dec = 0;
    for (int k = 0; k < n_seqs; k++) {
        const cairn__kv_seq *q = &s[k];
        if (!q->tokens || !q->blocks || q->n < 1 || q->pos < 0 ||
            (b->n_batch > 0 && q->n > b->n_batch))
            return cairn__errf(b->err, sizeof b->err, CAIRN_EINVAL,
                               "bad paged entry %d (n %d, pos %d)", k, q->n, q->pos);
        if ((int64_t)q->pos + q->n > b->n_ctx)
            return cairn__errf(b->err, sizeof b->err, CAIRN_ECONTEXT,
                               "%d tokens at position %d exceed the context of %d", q->n, q->pos,
                               b->n_ctx);
        for (int i = 0; i < q->n; i++)
            if (q->tokens[i] < 0 || q->tokens[i] >= b->model->n_vocab)
                return cairn__errf(b->err, sizeof b->err, CAIRN_EINVAL,
                                   "entry %d: token %d is outside the vocabulary (%d)", k,
                                   q->tokens[i], b->model->n_vocab);
        n_dec += q->n == 1;
    }
    if (b->n_batch > 0 && n_dec > b->n_batch)
        return cairn__errf(b->err, sizeof b->err, CAIRN_EINVAL,
                           "%d decode entries in one step (at most n_batch, %d)", n_dec,
                           b->n_batch);
    return b->ops->forward_paged(b, s, n_seqs);
}

int cairn__backend_can_sample(const cairn__backend *b)
{
    return b && b->ops->forward_sample != NULL;
}

void cairn__backend_truncate(cairn__backend *b, int n_keep)
{
    if (b && n_keep >= 0 && n_keep < b->n_past)
        b->n_past = n_keep;
}

int cairn__backend_n_past(const cairn__backend *b) { return b ? b->n_past : 0; }

int cairn__backend_n_ctx(const cairn__backend *b) { return b ? b->n_ctx : 0; }

const char *cairn__backend_errmsg(const cairn__backend *b) { return b ? b->err : "no backend"; }
