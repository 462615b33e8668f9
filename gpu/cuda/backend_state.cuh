/* gpu/cuda/backend_state.cuh - the CUDA backend's state (cuda_backend: weights, KV cache,
 * activations, pinned staging, the decode graphs, the profile's and the split tuner's
 * bookkeeping), its constants, and the error and allocation helpers every other part uses.
 *
 * Errors: every CUDA and cuBLAS call is checked; cudaError_t / cublasStatus_t become
 * CAIRN_ECUDA with the original name and text in the message, allocation failures
 * CAIRN_ENOMEM with the sizes, and the absence of a usable device CAIRN_ENODEVICE.
 *
 * A part of backend_cuda.cu's one translation unit (a unity build, gpu/meson.build): included
 * there only, after the kernel headers, so it has no include guard and includes nothing itself.
 */

enum dtype { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2 };
static const char *const DT_NAME[] = {"f32", "f16", "bf16"};
static const size_t DT_SIZE[] = {4, 2, 2};
static const cudaDataType_t DT_CUDA[] = {CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF};

#define PROF_MAX 4096 /* events per profiled step */
#define PROF_BINS 48  /* distinct operation names */
#define MAX_BATCH 512 /* tokens per prompt chunk: bounds the activations and the logits buffer */
#define STAGE_FLOATS ((size_t)8 << 20) /* rows dequantized per upload step: 32 MiB of f32 */
#define WORKSPACE_BYTES                                                                            \
    ((size_t)32 << 20) /* cuBLAS workspace (fixed, so graph capture allocates nothing) */

typedef struct {
    void *wqkv, *wo, *wgu,
        *wd; /* (q+2kv, dim), (dim, q), (2ff, dim), (dim, ff) in the device type */
    float *attn_norm, *ffn_norm; /* (dim) */
    float *bqkv;                 /* (q+2kv) or NULL */
    float *q_norm, *k_norm;      /* (head_dim) each, or NULL: qwen3's per-head norms */
    float *attn_post, *ffn_post; /* (dim) each, or NULL: gemma's norms after each sublayer */
} dlayer;

/* The products of a decode step: a layer's four, then the output head (gv_sk) */
enum gv_prod { GVP_QKV, GVP_WO, GVP_GU, GVP_DOWN, GVP_OUT, GVP_N };
static const char *const GVP_NAME[GVP_N] = {"Q/K/V", "attention output", "gate/up", "down",
                                            "output"};

/* The decode graphs, one per kind of step; all run the same layer kernels, so the KV cache they
 * write is the same bit for bit whichever ran. */
enum step_kind {
    STEP_NOHEAD, /* fill the cache only */
    STEP_LOGITS, /* logits to the host */
    STEP_GREEDY, /* the device sampler's argmax (greedy, top-k 1): the token to the host */
    STEP_SAMPLE, /* the device sampler's sort and draw: the token to the host */
    STEP_KINDS
};

typedef struct {
    cairn__backend base;
    int device;
    int dt; /* enum dtype */
    int n_batch;
    int q_dim, kv_dim, qkv_dim;
    char *e; /* where errors go: the caller's buffer during create, then base.err */
    size_t elen;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *workspace;
    /* weights */
    dlayer *layers;
    void *tok_embd, *output; /* output == tok_embd when tied */
    float *output_norm;
    uint64_t weight_bytes; /* read per decode step */
    /* state and activations */
    void *kc, *vc;   /* (n_layers, n_ctx, kv_dim) floats, or __half when cache_f16 */
    int cache_f16;   /* cache_type == CAIRN__CACHE_F16 */
    float *x;        /* (nb, dim) residual stream */
    void *xn;        /* (nb, dim) T: normed input of the next product */
    float *qkv;      /* (nb, qkv_dim) */
    void *att;       /* (nb, q_dim) T */
    float *gu;       /* (nb, 2 ff) */
    void *hb;        /* (nb, ff) T */
    float *logits;   /* (nb, n_vocab) */
    float *inv_freq; /* (rope_dim / 2) */
    float *rope_cs;  /* (nb, rope_dim / 2, 2): cos, sin of the chunk's positions */
    /* gemma3's sliding layers (rope_local): their own base's frequencies and table; else NULL */
    float *inv_freq_l, *rope_cs_l;
    float *xt; /* (nb, dim): a sublayer's output before its post-norm (gemma), else NULL */
    int *d_tokens, *d_pos;
    int *d_overflow;
    /* pinned host staging: the graph reads tokens/pos from here and writes logits here */
    int *h_tokens, *h_pos;
    float *h_logits;
    /* the device sampler: its parameters (pinned -> device at each step), sort keys, the token */
    sample_in *h_sin, *d_sin;
    int *h_next, *d_next;
    int *h_overflow;              /* d_overflow copied back at the end of every step and chunk */
    uint64_t *keys, *keys_sorted; /* (n_vocab) */
    double *weights;              /* (n_vocab) the sorted candidates' weights */
    void *sort_temp;              /* cub::DeviceRadixSort's scratch */
    size_t sort_temp_bytes;
    cudaGraphExec_t graphs[STEP_KINDS];
    /* CAIRN_CUDA_PROFILE=1: every step runs eagerly with an event after each operation; the
     * time per operation name is summed (prompt chunks and decode steps apart) and printed to
     * stderr when the backend is destroyed. prof_n is -1 outside a profiled step. */
    int prof, prof_n, prof_steps[2], prof_bins;
    cudaEvent_t *prof_ev;
    const char **prof_at; /* (PROF_MAX) the operation each event ends */
    const char *prof_name[PROF_BINS];
    double prof_ms[2][PROF_BINS];
    const char *prof_gv[PROF_BINS]; /* the decode products seen, with their split and grid */
    int prof_gv_sk[PROF_BINS], prof_gv_grid[PROF_BINS], prof_gv_n;
    /* single-token products: gemv_kernel (1) or cuBLAS (0, CAIRN_CUDA_GEMV=cublas, or a model
     * whose rows do not fit the kernel's shared memory); its grid is at most gv_blocks */
    int gv, gv_blocks[GV_SPLITS]; /* the grid resident at once, for each split */
    int gv_force;     /* CAIRN_CUDA_GV_SPLIT: every product's split, 0 to time them (gv_tune) */
    int gv_sk[GVP_N]; /* each product's split */
    float gv_us[GVP_N][GV_SPLITS]; /* gv_tune's times, microseconds a product (0: not tried) */
    int pdl;             /* decode kernels as programmatic dependent launches (launch()) */
    int qkv_items;       /* a token's bias/rope/KV items (qkv_items in kernels_rope.cuh) */
    float *att_part;     /* (n_heads, att_splits, 2 + head_dim): a single token's attention */
    int *att_count;      /* (n_heads) splits done, zero between steps */
    unsigned qkv_blocks; /* qkv_post_kernel's blocks per token */
    /* the paged KV pool and its batched step (backend_paged.cuh) */
    void *kpool, *vpool; /* (n_layers, n_blocks * CAIRN__KV_BLOCK, kv_dim) in the cache type */
    int n_blocks;        /* 0: no pool */
    int bt_ld;           /* block-table entries a sequence: ceil(n_ctx / CAIRN__KV_BLOCK) */
    int *d_bin, *h_bin;  /* a batch of n: positions (n), pool rows (n), tables (n, bt_ld) */
    float *bpart;        /* (n_batch, n_heads, att_splits, 2 + head_dim): paged attention */
    int *bcount;         /* (n_batch, n_heads) splits done, zero between steps */
    int batch_gemm;      /* CAIRN_CUDA_BATCH_GEMM: batches this large use one GEMM (0: never) */
    int no_graph;        /* a capture failed: decode steps are launched directly */
    char graph_err[256]; /* why */
    char pdl_err[320];   /* a capture with programmatic dependent launches failed: why */
} cuda_backend;

/* ==== errors
 * ======================================================================================= */

static int cuda_err(char *err, size_t errlen, cudaError_t e, const char *what)
{
    if (e == cudaErrorMemoryAllocation)
        return host.errf(err, errlen, CAIRN_ENOMEM, "out of device memory in %s (%s: %s)", what,
                         cudaGetErrorName(e), cudaGetErrorString(e));
    return host.errf(err, errlen, CAIRN_ECUDA, "%s: %s (%s)", what, cudaGetErrorName(e),
                     cudaGetErrorString(e));
}

static int blas_err(char *err, size_t errlen, cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_ALLOC_FAILED)
        return host.errf(err, errlen, CAIRN_ENOMEM, "out of device memory in %s (%s: %s)", what,
                         cublasGetStatusName(s), cublasGetStatusString(s));
    return host.errf(err, errlen, CAIRN_ECUDA, "%s: %s (%s)", what, cublasGetStatusName(s),
                     cublasGetStatusString(s));
}

#define CU(b, call, what)                                                                          \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return cuda_err((b)->e, (b)->elen, e_, what);                                          \
    } while (0)

#define BL(b, call, what)                                                                          \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return blas_err((b)->e, (b)->elen, s_, what);                                          \
    } while (0)

static int dmalloc(cuda_backend *b, void **p, size_t bytes, const char *what)
{
    *p = NULL;
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e == cudaSuccess)
        return 0;
    *p = NULL;
    (void)cudaGetLastError(); /* allocation failures are not sticky: clear it */
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    if (e == cudaErrorMemoryAllocation)
        return host.errf(
            b->e, b->elen, CAIRN_ENOMEM,
            "out of device memory allocating %zu bytes for %s (%zu of %zu bytes free on device %d)",
            bytes, what, fr, tot, b->device);
    return cuda_err(b->e, b->elen, e, what);
}

/* The range flag, read after a step or chunk has completed: an activation (a matrix-product
 * input: normed x, attention output, SwiGLU) that the device type cannot hold. Silent infinities
 * would become NaN logits; f16 is the type at risk, and bf16 has float's range. */
static int check_range(cuda_backend *b)
{
    if (!*b->h_overflow)
        return 0;
    /* ECUDA, not EUNSUPPORTED: the step ran (the engine reads EUNSUPPORTED as "nothing run") */
    return host.errf(b->e, b->elen, CAIRN_ECUDA,
                     "an activation went beyond the range of %s on the GPU%s", DT_NAME[b->dt],
                     b->dt == DT_F16 ? "; run this model with CAIRN_CUDA_DTYPE=bf16" : "");
}
