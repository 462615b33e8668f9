/* gpu/model.h - a decoder-only transformer's hyperparameters and weights, read from GGUF.
 *
 * Supported architectures (general.architecture):
 *   llama  RMSNorm, rotary embedding on adjacent pairs (ggml's "normal" mode), grouped-query
 *          attention, SwiGLU feed-forward; output.weight optional (tied to token_embd.weight);
 *          rope_freqs.weight optional (Llama 3.x: divides each rotary frequency by a factor).
 *          A llama file that sets llama.attention.sliding_window (Mistral's) attends over the
 *          last that many positions on every layer.
 *   qwen2  the same (but no rope_freqs) plus biases on Q, K and V, and rotary embedding on
 *          half-split pairs (NEOX).
 *   qwen3  qwen2 without the biases, with an RMSNorm over each head of q and of k.
 *   phi3   llama with NEOX rope, q, k and v fused in one attn_qkv matrix (rows: q, then k, then
 *          v) and gate and up in one ffn_up of 2*ff rows (gate first), both bound as row views
 *          of the fused tensor; phi3.attention.sliding_window on every layer.
 *   gemma2 NEOX rope, embeddings scaled by sqrt(dim), an RMSNorm after attention and after the
 *          feed-forward (before each residual add), GELU(tanh)-gated feed-forward, attention
 *          scores soft-capped (c * tanh(s / c)) and so are the logits, sliding-window attention
 *          on the even layers, output tied to the embeddings. The norm weights are used as
 *          stored: llama.cpp's converter has already added gemma's 1 to them.
 *   gemma3 gemma2 without the soft-capping, with qwen3's per-head q/k norms, the window on five
 *          layers of every six (layer l with l % 6 < 5) and, on those, a rope base of 10000
 *          (the file's rope.freq_base, and its linear rope.scaling.factor, are the global
 *          layers').
 *
 * The model borrows its weights from the GGUF mapping (no copies; 1-D norm/bias vectors stored
 * in a non-F32 type are the only thing converted, to f32, at load). The reader must stay open
 * for the model's lifetime: cairn__model_open owns its reader, cairn__model_load borrows one.
 */
#ifndef CAIRN_GPU_MODEL_H
#define CAIRN_GPU_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/gguf.h"
#include "gpu/quant.h" /* cairn__mat */

#ifdef __cplusplus
extern "C" {
#endif

enum cairn__arch {
    CAIRN__ARCH_LLAMA = 0,
    CAIRN__ARCH_QWEN2 = 1,
    CAIRN__ARCH_QWEN3 = 2,
    CAIRN__ARCH_PHI3 = 3,
    CAIRN__ARCH_GEMMA2 = 4,
    CAIRN__ARCH_GEMMA3 = 5
};
enum cairn__ffn_act { CAIRN__FFN_SILU = 0, CAIRN__FFN_GELU = 1 };       /* the gate's activation */
enum cairn__rope_mode { CAIRN__ROPE_NORMAL = 0, CAIRN__ROPE_NEOX = 2 }; /* ggml's numbering */

typedef struct {
    cairn__mat wq, wk, wv,
        wo; /* (n_heads*head_dim, dim), (n_kv*head_dim, dim) x2, (dim, n_heads*head_dim) */
    cairn__mat w_gate, w_up;   /* (ff, dim) */
    cairn__mat w_down;         /* (dim, ff) */
    const float *attn_norm;    /* dim */
    const float *ffn_norm;     /* dim */
    const float *bq, *bk, *bv; /* qwen2 only (NULL for llama unless present) */
    /* qwen3: (head_dim) RMSNorm weights applied to each head of q and of k after the
     * projections, before rope; NULL elsewhere */
    const float *q_norm, *k_norm;
    /* gemma2/3: (dim) RMSNorm weights applied to the attention's and the feed-forward's output
     * before each is added to the residual stream; NULL elsewhere */
    const float *attn_post_norm, *ffn_post_norm;
    int swa;        /* sliding window: a position attends to the last swa positions (itself
                       included) only; 0: to every earlier one */
    int rope_local; /* gemma3's sliding layers: rotary angles from rope_base_local */
} cairn__layer;

typedef struct cairn__model {
    int arch; /* enum cairn__arch */
    const char *arch_name;
    int n_vocab, dim, n_layers, n_heads, n_kv_heads, head_dim, ff_dim;
    int n_ctx_train; /* <arch>.context_length */
    int rope_dim;    /* dimensions rotated per head (<= head_dim, even) */
    int rope_mode;   /* enum cairn__rope_mode */
    float rope_base;
    const float *rope_freqs; /* (rope_dim/2) divisors of the rope frequencies (rope_freqs.weight,
                                Llama 3), or NULL */
    float rms_eps;
    float rope_base_local; /* gemma3: the sliding layers' rope base (rope_local); else 0 */
    float rope_scale;      /* linear rope scaling: positions multiplied by it (1: none); not
                              applied on rope_local layers */
    float embd_scale;      /* token embeddings multiplied by it (gemma: sqrt(dim); else 1) */
    float attn_scale;      /* query . key multiplied by it (1/sqrt(head_dim), but see model.c) */
    float attn_softcap;    /* gemma2: scores capped to c * tanh(s / c) before softmax; 0: none */
    float final_softcap;   /* gemma2: logits capped the same way; 0: none */
    int ffn_act;           /* enum cairn__ffn_act */
    int n_swa;             /* the file's sliding window (0: none); which layers: swa */
    int tied_output;       /* output.weight absent: logits use token_embd.weight */
    cairn__mat tok_embd;   /* (n_vocab, dim) */
    cairn__mat output;     /* (n_vocab, dim) */
    const float *output_norm;
    cairn__layer *layers;
    uint32_t wtype; /* most common storage type of the matrices (for display) */
    uint64_t n_params;
    uint64_t weight_bytes; /* bytes of all weights as stored */
    /* private */
    cairn__gguf *gguf;
    int owns_gguf;
    float **owned; /* converted vectors */
    size_t n_owned;
} cairn__model;

/* Reads the hyperparameters and binds every tensor of a model from an open GGUF reader, which
 * the model borrows (keep it open until cairn__model_free). Returns 0 and *out, or:
 *   CAIRN_EUNSUPPORTED  general.architecture is not llama/qwen2/qwen3/phi3/gemma2/gemma3, or a
 *                       weight type is unsupported
 *                       (the message names it)
 *   CAIRN_EFORMAT       a missing or misshapen tensor or hyperparameter (the message names it)
 *   CAIRN_ENOMEM / CAIRN_EINVAL
 * err receives a NUL-terminated message (if errlen > 0). */
int cairn__model_load(cairn__gguf *g, cairn__model **out, char *err, size_t errlen);
/* Opens path with cairn__gguf_open and loads it; the model owns the reader. Errors as
 * cairn__gguf_open (CAIRN_ENOENT, CAIRN_EIO, CAIRN_EFORMAT, ...) and cairn__model_load. */
int cairn__model_open(const char *path, cairn__model **out, char *err, size_t errlen);
/* Makes err "PATH: msg", so a message stands alone in a log; one that already starts with
 * "PATH:" (the reader's own) is left as it is. */
void cairn__prefix_path(char *err, size_t errlen, const char *path);
void cairn__model_free(cairn__model *m); /* NULL is a no-op */
/* The reader the model was loaded from (for the tokenizer, model-info). */
const cairn__gguf *cairn__model_gguf(const cairn__model *m);

#ifdef __cplusplus
}
#endif

#endif
