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
 *
 * The CUDA backend lives in a module loaded at run time; the contract between the program and
 * that module (ABI number, host and module tables, layout fingerprint) is gpu/backend_plugin.h.
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

/* The paged KV cache (gpu/batch.c, the PagedAttention idea): keys and values for many
 * sequences in blocks of CAIRN__KV_BLOCK positions from one pool the backend allocates
 * (kv_pool), so memory follows the sequences' actual lengths. A sequence's block table names
 * the block of each run of CAIRN__KV_BLOCK positions; which blocks are free is the caller's
 * bookkeeping, the backend only stores and reads. 16 positions: a block of the 1B shape's
 * 16 layers x 8 kv heads x 64 is 1 MiB in f32 (both K and V), small enough that a sequence
 * wastes under one block, large enough that a head's run of a block (16 rows) is one stream. */
#define CAIRN__KV_BLOCK 16

/* One sequence's part of a paged forward step (cairn__backend_forward_paged). */
typedef struct {
    const int32_t *tokens; /* tokens[0..n) at positions pos..pos+n-1 */
    int n;                 /* 1 (a decode step) .. the backend's n_batch (a prompt chunk) */
    int pos;               /* the sequence's positions 0..pos-1 are in its blocks already */
    const int32_t *blocks; /* block table: position p lives in block blocks[p / CAIRN__KV_BLOCK];
                              entries up to (pos + n - 1) / CAIRN__KV_BLOCK, each < n_blocks */
    float *logits;         /* NULL (no output head), or n_vocab floats for the last token */
} cairn__kv_seq;

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
    /* Optional, both or neither (NULL: no paged cache; gpu/batch.c then runs each sequence on a
     * solo backend of its own). See cairn__backend_kv_pool and cairn__backend_forward_paged;
     * arguments validated. */
    int (*kv_pool)(cairn__backend *b, int n_blocks);
    int (*forward_paged)(cairn__backend *b, const cairn__kv_seq *s, int n_seqs);
} cairn__backend_ops;

/* Every implementation's handle starts with this header. */
struct cairn__backend {
    const cairn__backend_ops *ops;
    const cairn__model *model;
    int n_ctx;  /* KV positions */
    int n_past; /* positions 0..n_past-1 of the cache hold valid keys/values */
    char err[256];
    int n_batch; /* most tokens forward() runs in one internal chunk (0: not known) */
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
 * interface (see cairn__cuda_plugin_load in gpu/backend_plugin.h). */
int cairn__backend_new(const char *kind, const cairn__model *m, const cairn__backend_opts *o,
                       cairn__backend **out, char *err, size_t errlen);
/* Whether "cuda" could run here: the CUDA module loads and the driver reports a device. Asked
 * in a child process, so this one stays as it was (no module mapped, CUDA not initialized: CUDA
 * initialized before a fork() cannot be used after it, in the child, and callers such as the
 * task runner fork). Returns 0, or with a message in err: CAIRN_EUNSUPPORTED (the build has no
 * CUDA backend, or the module is for another interface) or CAIRN_ENODEVICE (no module, no
 * driver, no device). */
int cairn__cuda_device_check(char *err, size_t errlen);
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
/* Whether b has the paged cache's ops (kv_pool, forward_paged). */
int cairn__backend_can_page(const cairn__backend *b);
/* (Re)allocates b's paged KV pool for n_blocks blocks of CAIRN__KV_BLOCK positions (0: frees
 * it), beside the positional cache, in the cache type b was created with; what the blocks held
 * before is lost. Returns 0, CAIRN_ENOMEM (then b has no pool), CAIRN_EINVAL (n_blocks < 0) or
 * CAIRN_EUNSUPPORTED (no paged ops). */
int cairn__backend_kv_pool(cairn__backend *b, int n_blocks);
/* One step over the paged pool for the sequences s[0..n_seqs): every entry with n == 1 joins one
 * batch of decode steps (each weight matrix read once for all of them), every longer entry runs
 * on its own as a prompt chunk. Writes each sequence's keys and values for its new positions
 * into its blocks and its last token's logits where asked. Batch invariance: each sequence's
 * keys, values and logits are bit for bit what forward() on a solo backend of the same
 * configuration gives it for the same tokens at the same positions in the same chunks,
 * whichever other sequences share the step (no reduction of one row depends on another).
 * Entries must name distinct blocks for the positions they write. Returns 0, CAIRN_EINVAL (a
 * token outside the vocabulary, bad n or pos, a block out of range, more decode entries than
 * n_batch), CAIRN_ECONTEXT (pos + n > n_ctx), CAIRN_EUNSUPPORTED (no paged ops or no pool). */
int cairn__backend_forward_paged(cairn__backend *b, const cairn__kv_seq *s, int n_seqs);
/* The backend's n_batch (0 when it does not say). */
int cairn__backend_n_batch(const cairn__backend *b);
/* Whether b has a device sampler (forward_sample). */
int cairn__backend_can_sample(const cairn__backend *b);
/* Forgets every position >= n_keep (n_keep <= n_past). */
void cairn__backend_truncate(cairn__backend *b, int n_keep);
int cairn__backend_n_past(const cairn__backend *b);
int cairn__backend_n_ctx(const cairn__backend *b);
/* Message of the last failed call on b. */
const char *cairn__backend_errmsg(const cairn__backend *b);

#ifdef __cplusplus
}
#endif

#endif
