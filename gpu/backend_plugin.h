/* gpu/backend_plugin.h - the CUDA backend module's ABI: what the program (the loader,
 * gpu/backend_plugin.c) and libcairn-cuda.so (its entry point in gpu/cuda/backend_cuda.cu) share.
 *
 * Apart from gpu/backend.h because it is a different contract: backend.h is the interface the
 * model and the engine call, in-process and compiled together; this header is the boundary
 * between two separately built objects, versioned (CAIRN__CUDA_PLUGIN_ABI) and fingerprinted
 * (cairn__cuda_plugin_layout) so that a module built against other headers is refused. Only
 * the loader, the module and their tests (tests/gpu: the stand-in modules, the gpu test's
 * diagnostics, bench-llm) include it.
 */
#ifndef CAIRN_GPU_BACKEND_PLUGIN_H
#define CAIRN_GPU_BACKEND_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/backend.h"
#include "gpu/gguf.h" /* CAIRN__GGML_* in the layout fingerprint */

#ifdef __cplusplus
extern "C" {
#endif

/* ==== the CUDA backend module ====================================================================
 *
 * The CUDA backend (gpu/cuda/backend_cuda.cu) is a shared module of its own, libcairn-cuda.so, the
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
        offsetof(cairn__layer, q_norm), offsetof(cairn__layer, k_norm),
        offsetof(cairn__layer, attn_post_norm), offsetof(cairn__layer, ffn_post_norm),
        offsetof(cairn__layer, swa), offsetof(cairn__layer, rope_local),
        sizeof(cairn__model), offsetof(cairn__model, n_vocab), offsetof(cairn__model, dim),
        offsetof(cairn__model, n_layers), offsetof(cairn__model, n_heads),
        offsetof(cairn__model, n_kv_heads), offsetof(cairn__model, head_dim),
        offsetof(cairn__model, ff_dim), offsetof(cairn__model, n_ctx_train),
        offsetof(cairn__model, rope_dim), offsetof(cairn__model, rope_mode),
        offsetof(cairn__model, rope_base), offsetof(cairn__model, rope_freqs),
        offsetof(cairn__model, rms_eps), offsetof(cairn__model, rope_base_local),
        offsetof(cairn__model, rope_scale), offsetof(cairn__model, embd_scale),
        offsetof(cairn__model, attn_scale), offsetof(cairn__model, attn_softcap),
        offsetof(cairn__model, final_softcap), offsetof(cairn__model, ffn_act),
        offsetof(cairn__model, n_swa),
        offsetof(cairn__model, tied_output), offsetof(cairn__model, tok_embd),
        offsetof(cairn__model, output), offsetof(cairn__model, output_norm),
        offsetof(cairn__model, layers),
        sizeof(cairn__backend), offsetof(cairn__backend, ops), offsetof(cairn__backend, model),
        offsetof(cairn__backend, n_ctx), offsetof(cairn__backend, n_past),
        offsetof(cairn__backend, err), offsetof(cairn__backend, n_batch),
        sizeof(cairn__backend_opts), offsetof(cairn__backend_opts, n_ctx),
        offsetof(cairn__backend_opts, n_threads), offsetof(cairn__backend_opts, n_batch),
        offsetof(cairn__backend_opts, device), offsetof(cairn__backend_opts, cache_type),
        CAIRN__CACHE_F32, CAIRN__CACHE_F16,
        sizeof(cairn__backend_ops), offsetof(cairn__backend_ops, name),
        offsetof(cairn__backend_ops, create), offsetof(cairn__backend_ops, forward),
        offsetof(cairn__backend_ops, destroy), offsetof(cairn__backend_ops, forward_sample),
        offsetof(cairn__backend_ops, kv_pool), offsetof(cairn__backend_ops, forward_paged),
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
