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

typedef struct {
    int n_ctx;     /* KV cache positions; 0: min(model's context_length, 4096) */
    int n_threads; /* CPU threads; 0: online CPUs */
    int n_batch;   /* most tokens per internal forward chunk (bounds scratch memory); 0: 256 */
    int device;    /* device index (CUDA) */
} cairn__backend_opts;

typedef struct cairn__backend_ops {
    const char *name; /* "cpu", "cuda" */
    /* Creates a backend for m (which must outlive it). Returns 0 or CAIRN_ENOMEM, CAIRN_EINVAL,
     * CAIRN_ENODEVICE, CAIRN_ECUDA, with a message in err. */
    int (*create)(const cairn__model *m, const cairn__backend_opts *o, cairn__backend **out, char *err,
                  size_t errlen);
    /* See cairn__backend_forward. Implementations may assume the arguments were validated. */
    int (*forward)(cairn__backend *b, const int32_t *tokens, int n, int pos, float *logits, int all_logits);
    void (*destroy)(cairn__backend *b);
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

/* Creates a backend by name: "cpu", "cuda" (CAIRN_EUNSUPPORTED when not built with CUDA), or
 * "auto" (cuda when built with it and a device is present, else cpu). o may be NULL (defaults).
 * Returns 0 and *out, or a negative code with a message in err. */
int cairn__backend_new(const char *kind, const cairn__model *m, const cairn__backend_opts *o, cairn__backend **out,
                       char *err, size_t errlen);
void cairn__backend_free(cairn__backend *b); /* NULL is a no-op */
const char *cairn__backend_name(const cairn__backend *b);

/* Runs tokens[0..n) at positions pos..pos+n-1 (0 <= pos <= n_past, 1 <= n) and sets
 * n_past = pos + n. logits: NULL (only fill the KV cache: no output head is computed), n_vocab
 * floats for the last token, or, when all_logits, n * n_vocab floats (row i for token i).
 * Returns 0, CAIRN_ECONTEXT (pos + n > n_ctx), CAIRN_EINVAL (a token id outside the vocabulary,
 * bad pos/n), or a device error; on error n_past is unchanged or smaller, never garbage. */
int cairn__backend_forward(cairn__backend *b, const int32_t *tokens, int n, int pos, float *logits, int all_logits);
/* Forgets every position >= n_keep (n_keep <= n_past). */
void cairn__backend_truncate(cairn__backend *b, int n_keep);
int cairn__backend_n_past(const cairn__backend *b);
int cairn__backend_n_ctx(const cairn__backend *b);
/* Message of the last failed call on b. */
const char *cairn__backend_errmsg(const cairn__backend *b);

#ifdef CAIRN_HAVE_CUDA
/* Diagnostics of the CUDA backend (gpu/backend_cuda.cu), for its test and benchmark:
 * device-to-device copy bandwidth, bytes of weights read per decoded token, the device
 * weight type ("f16", "bf16", "f32"), and whether decode runs as a captured graph ("graph"). */
int cairn__cuda_bandwidth(int device, double *bytes_per_s, char *name, size_t name_len, char *err,
                          size_t errlen);
uint64_t cairn__cuda_weight_bytes(const cairn__backend *b);
const char *cairn__cuda_dtype(const cairn__backend *b);
const char *cairn__cuda_graph_status(const cairn__backend *b);
#endif

#ifdef __cplusplus
}
#endif

#endif
