/* tests/model/mkmodel.h - random-weight GGUF models of any shape (llama, qwen2, qwen3, phi3,
 * gemma2, gemma3, in the tensor layout llama.cpp's converter writes), for the model tests and
 * the LLM benchmark. */
#ifndef CAIRN_TESTS_MKMODEL_H
#define CAIRN_TESTS_MKMODEL_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    /* "llama", "qwen2", "qwen3", "phi3" (fused attn_qkv and gate+up ffn_up), "gemma2" (post
     * norms, caps, no output.weight) or "gemma3" (also q/k norms); anything else is written
     * as given, with llama's tensors */
    const char *arch;
    int dim, n_layers, n_heads, n_kv_heads, ff, vocab, ctx;
    uint32_t wtype; /* storage type of every matrix (norms and biases stay F32) */
    /* storage type of a matrix whose rows wtype's blocks do not divide, as llama-quantize
     * falls back (its Q4_K_M writes such rows as Q5_0); 0: wtype all the same (the write
     * then fails) */
    uint32_t wtype_fallback;
    int tied; /* no output.weight */
    uint64_t seed;
    /* Hyperparameters written to the metadata; 0 picks the default shown. Any other value,
     * invalid ones included, is written as given (error tests). The float64 reference takes
     * these from the spec (mk_rope_base & co.), never from the loaded model, so a loader that
     * misreads a key disagrees with it. */
    float rope_base;  /* 0: 10000 (gemma3: 1e6, its global layers'; the local ones use 10000) */
    int rope_dim;     /* rope.dimension_count; 0: head_dim */
    float rms_eps;    /* attention.layer_norm_rms_epsilon; 0: 1e-5 */
    float embd_scale; /* token embeddings uniform in +-embd_scale; 0: 1. A small scale makes the
                         first RMSNorm's sum of squares comparable to eps, so eps shows */
    int meta_dim;     /* embedding_length written (error tests); 0: dim */
    int meta_layers;  /* block_count written (error tests); 0: n_layers */
    int tokenizer;    /* write a llama (SentencePiece) byte-fallback vocabulary of `vocab` tokens
                         (<unk> <s> </s>, 256 byte tokens, then words) */
    const char *omit; /* tensor name to leave out (error tests) */
    const char *misshape; /* tensor name to write with a wrong shape */
    const char *flatten;  /* tensor name to write as one dimension of all its elements */
    const char *extra;    /* an extra F32 tensor of dim elements with this name (error tests) */
    /* rope_freqs.weight (Llama 3.x): written when rope_freqs is set, as rope_factors[0..len)
     * or, when rope_factors is NULL, pseudo-random factors in [1, 8] (llama3's scaling divides
     * frequencies by 1 to 8) drawn from the seed apart from the weights, which stay the same as
     * without the tensor. The reference takes the factors from the spec (mk_rope_factor). */
    int rope_freqs;
    const float *rope_factors; /* rope_freqs_len values; NULL: random in [1, 8] */
    int rope_freqs_len;        /* elements written; 0: rope_dim/2 (any other: error tests) */
    uint32_t rope_freqs_type;  /* storage type; 0: F32 (any other: error tests) */
    int no_rms_eps;            /* leave out <arch>.attention.layer_norm_rms_epsilon (error tests) */
    int no_bos;                /* write tokenizer.ggml.add_bos_token = false */
    /* <arch>.attention.sliding_window; 0: 4096 for phi3, gemma2 and gemma3, none (not
     * written) for the others (a llama file with one is Mistral's) */
    int swa;
    float attn_softcap, final_softcap; /* gemma2's caps; 0: 50 and 30 (llama.cpp's defaults) */
    /* <arch>.rope.scaling.factor with rope.scaling.type "linear" (Gemma 3 4B and up: 8; the
     * global layers' positions divided by it); 0: not written */
    float rope_scaling;
    const char *rope_scaling_type; /* the type written with it; NULL: "linear" */
    int bad_bos;                   /* write a bos_token_id past the vocabulary (error tests) */
} mk_spec;

/* Fills defaults: llama, dim 64, 2 layers, 4 heads, 2 kv heads, ff 128, vocab 300, ctx 256, F32. */
void mk_spec_default(mk_spec *s);
/* The values mk_model writes for the spec's defaulted hyperparameters. */
double mk_rope_base(const mk_spec *s);
int mk_rope_dim(const mk_spec *s);
double mk_rms_eps(const mk_spec *s);
int mk_swa(const mk_spec *s);             /* the window, 0 for none */
double mk_attn_softcap(const mk_spec *s); /* gemma2's caps as written; 0 for the others */
double mk_final_softcap(const mk_spec *s);
/* Factor i of rope_freqs.weight as the file holds it (an f32), 1 without the tensor. */
double mk_rope_factor(const mk_spec *s, int i);
/* Writes the model as a GGUF file image into *buf (malloc'd, *len bytes). 0 or -1. */
int mk_model(const mk_spec *s, unsigned char **buf, size_t *len);

/* A generated model opened in memory: the file image, its GGUF reader and the model. */
typedef struct cairn__gguf cairn__gguf;
typedef struct cairn__model cairn__model;
typedef struct {
    unsigned char *buf;
    cairn__gguf *g;
    cairn__model *m;
} mk_loaded;
/* Builds the model of spec s and loads it: 0, a CAIRN_E* code (err says why) or -1000 when the
 * spec cannot be built. Free with mk_unload (also after a failure). */
int mk_load(const mk_spec *s, mk_loaded *L, char *err, size_t errlen);
void mk_unload(mk_loaded *L);

#endif
