/* gpu/backend.h - the one interface between the model and the hardware that runs it.
 *
 * A backend owns everything a forward pass needs on its device: the weights in the device's
 * preferred layout (uploaded once, at creation), the KV cache (n_ctx positions for every layer),
 * and scratch buffers. The model (gpu/model.h) only describes; a backend computes. forward()
 * takes a run of tokens at consecutive positions and returns logits; how it gets there (per-layer
 * host synchronisation or none, one kernel per op or fused) is its own business, so a CUDA
 * backend can keep the whole pass on the device and copy back only the logits.
 *
 * The KV cache is positional: forward(tokens, n, pos) writes positions pos..pos+n-1 and attends
 * to 0..pos+i, so calling it with pos < n_past simply rewrites the tail (truncate is implied).
 */
#ifndef CAIRN_GPU_BACKEND_H
#define CAIRN_GPU_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cairn__backend cairn__backend;

/* What the KV cache holds. F32 keeps keys and values as the projections computed them; F16
 * rounds each to an IEEE half as it is stored (to nearest even), which halves the cache's
 * memory and the bytes attention reads a token (at long contexts, more than the weights), for
 * a small change in the logits (1-2e-4 relative in tests/model's models). A key or value beyond
 * the half's range (|x| >= 65520) is stored as infinity, as in llama.cpp's f16 cache; models'
 * keys and values sit far inside it, but f32 is the choice for one that does not. Attention widens
 * the halves exactly and computes in f32 either way. Deterministic like F32: the same inputs round
 * to the same halves. */
enum cairn__cache_type { CAIRN__CACHE_F32 = 0, CAIRN__CACHE_F16 = 1 };
/* "f32", "f16"; "?" for anything else */
const char *cairn__cache_type_name(int cache_type);
/* CAIRN__CACHE_* for "f32" / "f16" (NULL: f32), or -1 */
int cairn__cache_type_parse(const char *name);

typedef struct {
    int n_ctx;      /* KV cache positions; 0: min(model's context_length, 4096) */
    int n_threads;  /* CPU threads; 0: online CPUs */
    int n_batch;    /* most tokens per internal forward chunk (bounds scratch memory); 0: 256 */
    int device;     /* device index (CUDA) */
    int cache_type; /* enum cairn__cache_type (0: f32) */
} cairn__backend_opts;

/* What forward_sample needs to pick the next token on the device: the sampler's parameters, the
 * penalty set and the draw, both made by the host's sampler (gpu/sampler.h), which keeps the
 * generator and its saved state. The device follows cairn__sampler_pick_runs. */
typedef struct {
    float temperature; /* <= 0: greedy */
    int top_k;         /* <= 0: all */
    float top_p;       /* >= 1: all */
    float repeat_penalty;
    double r;           /* cairn__sampler_draw's number in [0, 1); unused when greedy */
    const int32_t *pen; /* the distinct ids to penalize (cairn__sampler_penalty_ids), in range */
    int n_pen;          /* 0..CAIRN__SAMPLE_MAX_PEN (gpu/sample_core.h) */
} cairn__sample_req;

typedef struct cairn__backend_ops {
    const char *name; /* "cpu", "cuda" */
    /* Creates a backend for m (which must outlive it). Returns 0 or CAIRN_ENOMEM, CAIRN_EINVAL,
     * CAIRN_ENODEVICE, CAIRN_ECUDA, with a message in err. */
    int (*create)(const cairn__model *m, const cairn__backend_opts *o, cairn__backend **out,
                  char *err, size_t errlen);
    /* See cairn__backend_forward. Implementations may assume the arguments were validated. */
    int (*forward)(cairn__backend *b, const int32_t *tokens, int n, int pos, float *logits,
                   int all_logits);
    void (*destroy)(cairn__backend *b);
    /* Optional (NULL: the backend returns logits only). See cairn__backend_forward_sample;
     * arguments validated. */
    int (*forward_sample)(cairn__backend *b, int32_t token, int pos, const cairn__sample_req *q,
                          int32_t *next);
} cairn__backend_ops;

/* Every implementation's handle starts with this header. */
struct cairn__backend {
    const cairn__backend_ops *ops;
    const cairn__model *model;
    int n_ctx;  /* KV positions */
    int n_past; /* positions 0..n_past-1 of the cache hold valid keys/values */
    char err[256];
};

extern const cairn__backend_ops cairn__backend_cpu_ops;
/* The CPU backend's budget for a block of a prompt chunk's attention scores (64 MiB), read when a
 * backend is created; tests lower it to reach the blocks. */
extern size_t cairn__cpu_att_bytes;

/* Creates a backend by name: "cpu", "cuda", or "auto" (cuda when the CUDA module loads, a
 * device is present and the CUDA backend can run the model, else cpu, silently). o may be NULL
 * (defaults). Returns 0 and *out, or a negative code with a message in err; for "cuda" also
 * CAIRN_ENODEVICE when the module cannot be loaded (the loader's text in err) and
 * CAIRN_EUNSUPPORTED when the build has no CUDA backend or the module was built for another
 * interface (see cairn__cuda_plugin_load). */
int cairn__backend_new(const char *kind, const cairn__model *m, const cairn__backend_opts *o,
                       cairn__backend **out, char *err, size_t errlen);
void cairn__backend_free(cairn__backend *b); /* NULL is a no-op */
const char *cairn__backend_name(const cairn__backend *b);

/* Runs tokens[0..n) at positions pos..pos+n-1 (0 <= pos <= n_past, 1 <= n) and sets
 * n_past = pos + n. logits: NULL (only fill the KV cache: no output head is computed), n_vocab
 * floats for the last token, or, when all_logits, n * n_vocab floats (row i for token i).
 * Returns 0, CAIRN_ECONTEXT (pos + n > n_ctx), CAIRN_EINVAL (a token id outside the vocabulary,
 * bad pos/n), or a device error; on error n_past is unchanged or smaller, never garbage. */
int cairn__backend_forward(cairn__backend *b, const int32_t *tokens, int n, int pos, float *logits,
                           int all_logits);
/* One decode step that samples on the device: runs token at pos like cairn__backend_forward
 * (&token, 1, pos, ...) and, instead of returning logits, picks the next token from them by q
 * (the penalty applied, then greedy or the draw) into *next. The same logits as forward's, so
 * the same KV cache; the pick equals cairn__sampler_pick's on those logits except when the draw
 * lands within rounding of a boundary between two candidates. Returns 0, the errors of forward,
 * or CAIRN_EUNSUPPORTED (the backend has no device sampler, or q has more than
 * CAIRN__SAMPLE_MAX_PEN penalized ids) with nothing run. */
int cairn__backend_forward_sample(cairn__backend *b, int32_t token, int pos,
                                  const cairn__sample_req *q, int32_t *next);
/* Whether b has a device sampler (forward_sample). */
int cairn__backend_can_sample(const cairn__backend *b);
/* Forgets every position >= n_keep (n_keep <= n_past). */
void cairn__backend_truncate(cairn__backend *b, int n_keep);
int cairn__backend_n_past(const cairn__backend *b);
int cairn__backend_n_ctx(const cairn__backend *b);
/* Message of the last failed call on b. */
const char *cairn__backend_errmsg(const cairn__backend *b);

/* ==== the CUDA backend module ====================================================================
 *
 * The CUDA backend (gpu/backend_cuda.cu) is a shared module of its own, libcairn-cuda.so, the
 * only thing that links cudart and cuBLAS: loading those costs a process ~70 ms, so the program
 * dlopen()s the module the first time a "cuda" or "auto" backend is asked for, and a process that
 * never runs a model on the GPU never maps them. The module exports one C function,
 * CAIRN__CUDA_PLUGIN_ENTRY; everything else crosses in the two tables below. The module calls
 * nothing of the program by symbol (it is linked with --no-undefined): what it needs of the
 * program comes as function pointers in cairn__cuda_host. */

/* bump on any change to cairn__cuda_host, cairn__cuda_plugin or the entry point's type */
#define CAIRN__CUDA_PLUGIN_ABI 2u
#define CAIRN__CUDA_PLUGIN_ENTRY "cairn_cuda_plugin"

/* What the program lends the module for its lifetime (the module keeps a copy). */
typedef struct {
    uint32_t layout; /* cairn__cuda_plugin_layout() as the program was compiled */
    /* gpu/quant.h's cairn__dequant_row: quantized blocks are expanded on the host, exactly as the
     * CPU does */
    void (*dequant_row)(uint32_t type, const void *src, float *dst, uint64_t n);
    /* gpu/gguf.h's cairn__errf: the (err, errlen) convention of every message */
    int (*errf)(char *err, size_t errlen, int code, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
} cairn__cuda_host;

/* What the module offers. abi is the first member in every version, so a program can always
 * read it; the other members are valid only when abi and layout equal the program's. */
typedef struct {
    uint32_t abi;    /* the module's CAIRN__CUDA_PLUGIN_ABI */
    uint32_t layout; /* the module's cairn__cuda_plugin_layout() */
    /* the "cuda" backend; NULL when the module refused the program */
    const cairn__backend_ops *ops;
    /* Diagnostics, for the gpu test and bench-llm. bandwidth: device-to-device copy bandwidth
     * (bytes read + written per second) of `device` and its name; 0, CAIRN_ENODEVICE,
     * CAIRN_ENOMEM or CAIRN_ECUDA. The others take a "cuda" backend (anything else gives 0 or
     * "none"): bytes of weights one decode step reads; the device weight type ("f32", "f16",
     * "bf16"); how decode steps run ("graph", "not yet", "eager: <why the capture failed>", or
     * "graph, without programmatic dependent launch: <why the capture with them failed>"). */
    int (*bandwidth)(int device, double *bytes_per_s, char *name, size_t name_len, char *err,
                     size_t errlen);
    uint64_t (*weight_bytes)(const cairn__backend *b);
    const char *(*dtype)(const cairn__backend *b);
    const char *(*graph_status)(const cairn__backend *b);
    /* The device sampler alone, for the gpu test: logits (n_vocab floats, host) go to the
     * device, and *next is what forward_sample would pick from them. 0 or a device error. */
    int (*sample_logits)(cairn__backend *b, const float *logits, const cairn__sample_req *q,
                         int32_t *next);
} cairn__cuda_plugin;

/* The entry point's type. Given the program's ABI version and host table, it returns the
 * module's table (never NULL; static). When abi or host->layout differ from its own, it keeps
 * nothing of host (whose layout it cannot trust) and returns ops = NULL. */
typedef const cairn__cuda_plugin *cairn__cuda_plugin_fn(uint32_t abi, const cairn__cuda_host *host);

/* A fingerprint of what the module reads directly: the layouts of the model and its matrices,
 * of the backend header, options and operations, and the weight type numbers. Both sides compute
 * it with their own compiler; a module built against other headers than the program's is refused
 * instead of misread. */
static inline uint32_t cairn__cuda_plugin_layout(void)
{
    const size_t v[] = {
        /* grouped by struct */
        /* clang-format off */
        sizeof(cairn__mat), offsetof(cairn__mat, type), offsetof(cairn__mat, rows),
        offsetof(cairn__mat, cols), offsetof(cairn__mat, row_bytes), offsetof(cairn__mat, data),
        sizeof(cairn__layer), offsetof(cairn__layer, wq), offsetof(cairn__layer, wk),
        offsetof(cairn__layer, wv), offsetof(cairn__layer, wo), offsetof(cairn__layer, w_gate),
        offsetof(cairn__layer, w_up), offsetof(cairn__layer, w_down),
        offsetof(cairn__layer, attn_norm), offsetof(cairn__layer, ffn_norm),
        offsetof(cairn__layer, bq), offsetof(cairn__layer, bk), offsetof(cairn__layer, bv),
        sizeof(cairn__model), offsetof(cairn__model, n_vocab), offsetof(cairn__model, dim),
        offsetof(cairn__model, n_layers), offsetof(cairn__model, n_heads),
        offsetof(cairn__model, n_kv_heads), offsetof(cairn__model, head_dim),
        offsetof(cairn__model, ff_dim), offsetof(cairn__model, n_ctx_train),
        offsetof(cairn__model, rope_dim), offsetof(cairn__model, rope_mode),
        offsetof(cairn__model, rope_base), offsetof(cairn__model, rope_freqs),
        offsetof(cairn__model, rms_eps),
        offsetof(cairn__model, tied_output), offsetof(cairn__model, tok_embd),
        offsetof(cairn__model, output), offsetof(cairn__model, output_norm),
        offsetof(cairn__model, layers),
        sizeof(cairn__backend), offsetof(cairn__backend, ops), offsetof(cairn__backend, model),
        offsetof(cairn__backend, n_ctx), offsetof(cairn__backend, n_past),
        offsetof(cairn__backend, err),
        sizeof(cairn__backend_opts), offsetof(cairn__backend_opts, n_ctx),
        offsetof(cairn__backend_opts, n_threads), offsetof(cairn__backend_opts, n_batch),
        offsetof(cairn__backend_opts, device), offsetof(cairn__backend_opts, cache_type),
        CAIRN__CACHE_F32, CAIRN__CACHE_F16,
        sizeof(cairn__backend_ops), offsetof(cairn__backend_ops, name),
        offsetof(cairn__backend_ops, create), offsetof(cairn__backend_ops, forward),
        offsetof(cairn__backend_ops, destroy), offsetof(cairn__backend_ops, forward_sample),
        sizeof(cairn__sample_req), offsetof(cairn__sample_req, top_k),
        offsetof(cairn__sample_req, top_p), offsetof(cairn__sample_req, repeat_penalty),
        offsetof(cairn__sample_req, r), offsetof(cairn__sample_req, pen),
        offsetof(cairn__sample_req, n_pen),
        CAIRN__GGML_F32, CAIRN__GGML_F16, CAIRN__GGML_BF16, /* the types the module tests for */
        sizeof(cairn__cuda_host), sizeof(cairn__cuda_plugin), /* in case an ABI bump is forgotten */
        /* clang-format on */
    };
    uint32_t h = 2166136261u; /* FNV-1a, one step per value */
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        h ^= (uint32_t)v[i];
        h *= 16777619u;
    }
    return h;
}

/* The process's CUDA module, loaded on the first call (thread-safe) from the first of:
 *   $CAIRN_CUDA_PLUGIN (a full path; when set, the only candidate),
 *   the module in this program's build tree (CAIRN_CUDA_PLUGIN_BUILD_PATH),
 *   the installed one (<libdir>/cairn/libcairn-cuda.so);
 * the outcome, success or failure, is kept for the life of the process (the module is never
 * unloaded: backends point into it). Returns 0 and *out, or:
 *   CAIRN_EUNSUPPORTED  the build has no CUDA backend, or the module is for another ABI/layout
 *   CAIRN_ENODEVICE     no module could be loaded (each path with dlerror()'s text in err)
 * err may be NULL. */
int cairn__cuda_plugin_load(const cairn__cuda_plugin **out, char *err, size_t errlen);
/* Loads the module at path, uncached (for the loader's tests); the same codes. */
int cairn__cuda_plugin_open(const char *path, const cairn__cuda_plugin **out, char *err,
                            size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
