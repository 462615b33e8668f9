/* gpu/cuda/backend_cuda.cu - the forward pass on an NVIDIA GPU: cuBLAS for the matrix products,
 * small kernels (gpu/cuda/kernels_*.cuh) for everything between them.
 *
 * Weights are uploaded once, at creation, in one device element type for the whole model: f32
 * when every matrix is stored F32 (products then run as plain f32 GEMMs, no TF32), else f16 (or
 * bf16 when CAIRN_CUDA_DTYPE=bf16; f32 can be forced the same way). Quantized blocks are expanded
 * on the host with the program's cairn__dequant_row (bit-exact with the CPU path; rows split
 * over up to 16 threads) into f32 and rounded to the device type by a kernel; F16/BF16 weights
 * whose type is the device type are copied as they are. f16 has the precision (the tests hold it to
 * 1e-3 of the CPU) but not the range of bf16, so a model with a weight beyond +-65504 is reloaded
 * as bf16 automatically. Q, K and V are stored as one (q_dim + 2 kv_dim, dim) matrix and gate/up as
 * one (2 ff, dim) matrix, so a layer is four GEMMs; the output projections accumulate straight into
 * the f32 residual stream (beta = 1), so there are no separate residual-add kernels. Every GEMM
 * reads half-precision inputs with f32 accumulation and writes f32 (cublasGemmEx,
 * CUBLAS_COMPUTE_32F); the kernel before each GEMM writes its input directly in the device type
 * (RMSNorm, attention, SwiGLU), so nothing is converted separately.
 *
 * A single token's products (every decode step) are matrix-vector products bound by the memory,
 * where cuBLAS's GEMM heuristics are not at their best and where the small kernels between the
 * products cost as much as a product of a small layer. They run as gemv_kernel
 * (kernels_gemv.cuh), which streams the weights 16 bytes per lane, folds the RMSNorm before it
 * into its prologue, and the bias/rope/KV step after the Q/K/V product and the SwiGLU after the
 * gate/up product into its epilogue (same code, same bits): five launches per layer instead of
 * nine. A product of few
 * rows (a layer's Q/K/V, output or down projection: 2048-4096 rows on a 132-SM GPU) may spread
 * each row pair over 2, 4 or 8 warps so that enough loads are in flight (the first H200 run
 * measured those products at a third of the wide ones' bandwidth with one warp a pair). Every
 * split computes the same bits, so the split of each of a layer's products and of the output
 * head is simply timed on the device when the backend is created (gv_tune: tens of milliseconds)
 * and the fastest kept; CAIRN_CUDA_GV_SPLIT=1|2|4|8 forces one.
 * CAIRN_CUDA_GEMV=cublas runs them through cuBLAS as above, the peer bench-llm measures it
 * against. Prompt chunks of more than one token always use cuBLAS. A single token's attention
 * is split over the keys (attention_split_kernel: flash-decoding), so that a model of few heads
 * does not leave most of the GPU idle while its context grows. On compute capability 9.x
 * the decode products and attention are programmatic dependent launches (launch(); the rules
 * are in kernels_common.cuh): each may start while the one before it drains and sends for its
 * first weights meanwhile; CAIRN_CUDA_PDL=0 launches them the ordinary way (same results, bit
 * for bit: the test checks it).
 *
 * The KV cache holds floats or IEEE halves (cairn__backend_opts.cache_type), laid out
 * [layer][position][kv_head * head_dim] (the CPU keeps each head's positions together instead:
 * its attention streams one head at a time, where a warp here reads a 128-byte piece of a row in
 * one go; a cache never crosses backends). The bias/rope/KV step rounds k and v to nearest even
 * as it stores them, and attention (templated on the element type) widens them exactly as it
 * reads.
 *
 * Decode: one CUDA graph per kind of step, captured once and replayed for every token. The token
 * id and the position are not baked into it: the graph begins with a copy of both from pinned
 * host memory into device memory, and every kernel reads the position from there. So the host
 * writes two ints, launches the graph, and waits once per token; no per-layer synchronisation,
 * no re-instantiation, no cudaGraphExecUpdate. The kinds (enum step_kind) differ only in their
 * end: nothing (the engine's catch-up steps on resume), the logits copied to pinned host memory,
 * or the device sampler (gpu/cuda/sample_cuda.cuh: penalty, then argmax, or sort keys, a CUB radix
 * sort and the draw) with only the token copied back; its parameters (the host sampler's penalty
 * set and draw) are copied in at the start like the token. Every kind runs identical kernels for
 * the layers, so the KV cache they write is the same bit for bit, which is what exact resume
 * needs. A prompt chunk of more than one token is launched directly on the stream (its kernels
 * are large) and synchronised once per chunk.
 *
 * Parts: this file is the module's one translation unit; it includes the kernel headers and then
 * its parts, each one concern, in the order they build on each other:
 *   backend_state.cuh    the backend's state and constants; error and allocation helpers
 *   backend_profile.cuh  CAIRN_CUDA_PROFILE's events and table; LAUNCHED
 *   backend_ops.cuh      the launches: GEMMs, decode products, small kernels, a chunk's pass
 *   backend_forward.cuh  decode steps through their graphs, the device sampler, prompt chunks
 *   backend_paged.cuh    the paged KV pool and the batched decode step over it (gpu/batch.c)
 *   backend_upload.cuh   the weights into the device type, once
 *   backend_tune.cuh     the decode product's launch limits and the timed splits
 *   backend_create.cuh   creation (device, environment, order of set-up) and destruction
 *   backend_diag.cuh     the diagnostics the module offers beside its operations
 * and ends with the operations' table and the module's entry point.
 *
 * Packaging: this file is the shared module libcairn-cuda.so (gpu/meson.build), the only part of
 * cairn linked against cudart and cuBLAS; the program dlopen()s it on first use of the "cuda" or
 * "auto" backend (gpu/backend_plugin.c) through its one exported function, cairn_cuda_plugin. It
 * calls nothing of the program by name: cairn__dequant_row and cairn__errf come as pointers in
 * the host table. CUB (the sort) includes <iostream>, so the module links libstdc++.
 */
#include <cub/device/device_radix_sort.cuh>
#include <utility>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/backend.h"
#include "gpu/backend_plugin.h"
#include "gpu/gguf.h"
#include "gpu/model.h"

#include "gpu/cuda/kernels_attention.cuh"
#include "gpu/cuda/kernels_elt.cuh"
#include "gpu/cuda/kernels_gemv.cuh"
#include "gpu/cuda/kernels_rope.cuh"
#include "gpu/cuda/sample_cuda.cuh"

#include "cairn_errors.h"
extern "C" {
extern const cairn__backend_ops
    cairn__backend_cuda_ops; /* hidden: reached through cairn_cuda_plugin */
/* the module's one exported symbol; declared through the type the program calls it by */
__attribute__((visibility("default"))) cairn__cuda_plugin_fn cairn_cuda_plugin;
}

static cairn__cuda_host
    host; /* the program's functions (errf, dequant_row), lent by cairn_cuda_plugin */

/* The parts, in the order they build on each other (one translation unit: see gpu/meson.build). */
#include "gpu/cuda/backend_state.cuh"
#include "gpu/cuda/backend_profile.cuh"
#include "gpu/cuda/backend_ops.cuh"
#include "gpu/cuda/backend_forward.cuh"
#include "gpu/cuda/backend_paged.cuh"
#include "gpu/cuda/backend_upload.cuh"
#include "gpu/cuda/backend_tune.cuh"
#include "gpu/cuda/backend_create.cuh"
#include "gpu/cuda/backend_diag.cuh"

const cairn__backend_ops cairn__backend_cuda_ops = {.name = "cuda",
                                                    .create = cuda_create,
                                                    .forward = cuda_forward,
                                                    .destroy = cuda_destroy,
                                                    .forward_sample = cuda_forward_sample,
                                                    .kv_pool = cuda_kv_pool,
                                                    .forward_paged = cuda_forward_paged};

/* ==== the entry point
 * ============================================================================== */

const cairn__cuda_plugin *cairn_cuda_plugin(uint32_t abi, const cairn__cuda_host *h)
{
    static cairn__cuda_plugin table; /* filled on every call: the same values each time */
    table.abi = CAIRN__CUDA_PLUGIN_ABI;
    table.layout = cairn__cuda_plugin_layout();
    /* h's own layout is known only when abi matches: check that first */
    if (abi != CAIRN__CUDA_PLUGIN_ABI || !h || h->layout != table.layout || !h->dequant_row ||
        !h->errf) {
        table.ops = NULL;
        return &table;
    }
    host = *h;
    table.ops = &cairn__backend_cuda_ops;
    table.bandwidth = cuda_bandwidth;
    table.weight_bytes = cuda_weight_bytes;
    table.dtype = cuda_dtype;
    table.graph_status = cuda_graph_status;
    table.sample_logits = cuda_sample_logits;
    return &table;
}
