/* gpu/cuda/backend_ops.cuh - the forward pass as launches: cuBLAS GEMMs, the decode product
 * (gemv_kernel) at each product's split, the small kernels between them, attention over the
 * cache, and the whole pass of a chunk of tokens (enqueue). Everything here only enqueues on
 * the backend's stream; backend_forward.cuh decides when it runs (a captured graph, or eagerly)
 * and synchronises.
 *
 * A part of backend_cuda.cu's one translation unit (a unity build, gpu/meson.build): included
 * there only, after backend_profile.cuh, so it has no include guard and includes nothing itself.
 */

/* ==== launches
 * ===================================================================================== */

/* f(T()) for the device type T of the backend's weights: the one switch from b->dt to the
 * templates */
template <typename F> static int by_dtype(const cuda_backend *b, F f)
{
    switch (b->dt) {
    case DT_F32:
        return f(float());
    case DT_F16:
        return f(__half());
    default:
        return f(__nv_bfloat16());
    }
}

static unsigned grid_for(size_t n)
{
    const size_t g = (n + CK_THREADS - 1) / CK_THREADS;
    return (unsigned)(g < 1 ? 1 : g > 8192 ? 8192 : g);
}

/* W (rows, cols) @ X^T: X (n, cols) -> C (n, rows) row-major with row stride ldc, C = W X + beta C.
 * Column-major view for cuBLAS: C^T (rows, n) = op(W^T (cols, rows))^T @ X^T (cols, n). */
static int gemm(cuda_backend *b, const void *W, int rows, int cols, const void *X, int n, float *C,
                int ldc, float beta, const char *what)
{
    const float one = 1.0f;
    const cudaDataType_t t = DT_CUDA[b->dt];
    BL(b,
       cublasGemmEx(b->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, cols, &one, W, t, cols, X, t, cols,
                    &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
       what);
    prof_mark(b, what);
    return 0;
}

/* Launches kernel k on the stream; with dep (and b->pdl) as a programmatic dependent launch:
 * it may start while the kernel before it drains, and waits for it in pdl_wait()
 * (kernels_common.cuh says which kernels are written for that). */
template <typename... P, typename... A>
static cudaError_t launch(cuda_backend *b, int dep, void (*k)(P...), dim3 grid, dim3 block,
                          size_t smem, A &&...args)
{
    cudaLaunchConfig_t c = {};
    c.gridDim = grid;
    c.blockDim = block;
    c.dynamicSmemBytes = smem;
    c.stream = b->stream;
    cudaLaunchAttribute at[1];
    if (dep && b->pdl) {
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        c.attrs = at;
        c.numAttrs = 1;
    }
    return cudaLaunchKernelEx(&c, k, std::forward<A>(args)...);
}

/* C (rows) = W (rows, cols) @ in, or + C (beta 1), for a single token: gemv_kernel with the
 * prologue IN and the epilogue OUT (kernels_gemv.cuh; GV_GLU: C is the SwiGLU, rows / 2 T), at
 * product prod's split */
template <typename T, int IN, int OUT>
static int gemv(cuda_backend *b, int prod, const void *W, int rows, int cols, const void *in,
                const float *nw, float beta, void *C, const qkv_args &qa, const char *what)
{
    const int groups = gv_groups(OUT, rows, b->qkv_items);
    const int sk = b->gv_sk[prod];
    int blocks = (groups * sk + GV_WARPS - 1) / GV_WARPS;
    if (blocks > b->gv_blocks[gv_split_index(sk)])
        blocks = b->gv_blocks[gv_split_index(sk)];
    const int vec = cols % (int)(16 / sizeof(T)) == 0 && (uintptr_t)W % 16 == 0;
    void (*const k[GV_SPLITS])(const T *, int, int, int, const void *, const float *, float, float,
                               void *, int *,
                               qkv_args) = {gemv_kernel<T, IN, OUT, 1>, gemv_kernel<T, IN, OUT, 2>,
                                            gemv_kernel<T, IN, OUT, 4>, gemv_kernel<T, IN, OUT, 8>};
    CU(b,
       launch(b, 1, k[gv_split_index(sk)], dim3((unsigned)blocks), dim3(CK_THREADS),
              gv_smem_bytes(cols, (int)sizeof(T)), (const T *)W, rows, cols, vec, in, nw,
              b->base.model->rms_eps, beta, C, (int *)b->d_overflow, qa),
       what);
    if (b->prof_n >= 0) { /* a profiled step: the profile names each product's split and grid */
        int j = 0;
        while (j < b->prof_gv_n && strcmp(b->prof_gv[j], what) != 0)
            j++;
        if (j == b->prof_gv_n && j < PROF_BINS) {
            b->prof_gv[j] = what;
            b->prof_gv_sk[j] = sk;
            b->prof_gv_grid[j] = blocks;
            b->prof_gv_n++;
        }
    }
    LAUNCHED(b, what);
    return 0;
}

/* bytes of one cache element */
static size_t kv_elem(const cuda_backend *b)
{
    return b->cache_f16 ? sizeof(__half) : sizeof(float);
}

/* the bias/rope/KV parameters of layer l (qkv_args, kernels_rope.cuh) */
static qkv_args qkv_of(const cuda_backend *b, int l)
{
    const cairn__model *m = b->base.model;
    const size_t layer_kv = (size_t)b->base.n_ctx * (size_t)b->kv_dim;
    qkv_args a;
    a.bias = b->layers[l].bqkv;
    a.pos = b->d_pos;
    a.cs = m->layers[l].rope_local ? b->rope_cs_l : b->rope_cs;
    a.kc = (char *)b->kc + (size_t)l * layer_kv * kv_elem(b);
    a.vc = (char *)b->vc + (size_t)l * layer_kv * kv_elem(b);
    a.cache_f16 = b->cache_f16;
    a.n_heads = m->n_heads;
    a.n_kv = m->n_kv_heads;
    a.hd = m->head_dim;
    a.rope_dim = m->rope_dim;
    a.neox = m->rope_mode == CAIRN__ROPE_NEOX;
    return a;
}

/* The three kinds of product of a layer, each with the small kernel before it. A single token
 * (n 1) runs them fused (gemv_kernel) unless CAIRN_CUDA_GEMV=cublas; a prompt chunk, or that
 * setting, runs the small kernel into its T buffer and then cuBLAS. */

/* C (n, rows) = W (rows, dim) @ rmsnorm(x (n, dim); nw) */
template <typename T>
static int normed_product(cuda_backend *b, int prod, int n, const float *x, const float *nw,
                          const void *W, int rows, float *C, const char *fused, const char *blas)
{
    const cairn__model *m = b->base.model;
    if (n == 1 && b->gv)
        return gemv<T, GV_NORM, GV_Y>(b, prod, W, rows, m->dim, x, nw, 0.0f, C, qkv_args(), fused);
    rmsnorm_kernel<T>
        <<<n, CK_THREADS, 0, b->stream>>>(x, nw, m->dim, m->rms_eps, (T *)b->xn, b->d_overflow);
    LAUNCHED(b, "rmsnorm kernel");
    return gemm(b, W, rows, m->dim, b->xn, n, C, rows, 0.0f, blas);
}

/* A layer with per-head q/k norms (qwen3): the n rows of b->qkv get their bias and the norms
 * (qk_norm_kernel); qa's bias is then cleared for the bias/rope/KV step after it. */
static int qk_norm(cuda_backend *b, int n, const dlayer *ly, qkv_args *qa)
{
    const cairn__model *m = b->base.model;
    const unsigned heads = (unsigned)(m->n_heads + m->n_kv_heads * (qa->bias ? 2 : 1));
    qk_norm_kernel<<<dim3((unsigned)n, heads), 32, 0, b->stream>>>(
        b->qkv, b->qkv_dim, qa->bias, ly->q_norm, ly->k_norm, m->n_heads, m->n_kv_heads,
        m->head_dim, m->rms_eps);
    LAUNCHED(b, "q/k norm kernel");
    qa->bias = NULL;
    return 0;
}

/* the Q/K/V projection of layer l and its bias/rope/KV step: qkv (n, qkv_dim) = Wqkv @
 * rmsnorm(x), then (with q/k norms, after them) q rotated in place and k, v into the cache */
template <typename T> static int qkv_product(cuda_backend *b, int n, int l)
{
    const dlayer *ly = &b->layers[l];
    qkv_args qa = qkv_of(b, l);
    int rc;
    if (n == 1 && b->gv && !ly->q_norm)
        return gemv<T, GV_NORM, GV_QKV>(b, GVP_QKV, ly->wqkv, b->qkv_dim, b->base.model->dim, b->x,
                                        ly->attn_norm, 0.0f, b->qkv, qa,
                                        "rmsnorm + QKV + bias/rope/KV (gemv)");
    /* (with q/k norms a single token's product stores its row too: the norms need whole heads) */
    rc = normed_product<T>(b, GVP_QKV, n, b->x, ly->attn_norm, ly->wqkv, b->qkv_dim, b->qkv,
                           "rmsnorm + QKV (gemv)", "cublasGemmEx (QKV)");
    if (!rc && ly->q_norm)
        rc = qk_norm(b, n, ly, &qa);
    if (rc)
        return rc;
    qkv_post_kernel<<<dim3((unsigned)n, b->qkv_blocks), CK_THREADS, 0, b->stream>>>(b->qkv,
                                                                                    b->qkv_dim, qa);
    LAUNCHED(b, "bias/rope/KV kernel");
    return 0;
}

/* x (n, dim) += rmsnorm(xt (n, dim); w): gemma's norm after a sublayer, then the residual add */
static int post_norm_add(cuda_backend *b, int n, const float *w)
{
    const cairn__model *m = b->base.model;
    post_norm_add_kernel<<<n, CK_THREADS, 0, b->stream>>>(b->x, b->xt, w, m->dim, m->rms_eps);
    LAUNCHED(b, "post-norm kernel");
    return 0;
}

/* C (n, rows) += W (rows, cols) @ in (n, cols), in already in T (product prod); with post (the
 * layer's norm after the sublayer; C is then the residual x), the product goes to xt and x +=
 * rmsnorm(xt; post) */
template <typename T>
static int added_product(cuda_backend *b, int prod, int n, const void *W, int rows, int cols,
                         const void *in, float *C, const float *post, const char *fused,
                         const char *blas)
{
    float *y = post ? b->xt : C;
    const float beta = post ? 0.0f : 1.0f;
    const int rc = n == 1 && b->gv ? gemv<T, GV_PLAIN, GV_Y>(b, prod, W, rows, cols, in, NULL, beta,
                                                             y, qkv_args(), fused)
                                   : gemm(b, W, rows, cols, in, n, y, rows, beta, blas);
    return rc || !post ? rc : post_norm_add(b, n, post);
}

/* hb (n, ff) = act(gate) * up of gu's n rows in T: SwiGLU, or gemma's GELU (tanh form) */
template <typename T> static int gated(cuda_backend *b, int n)
{
    const cairn__model *m = b->base.model;
    const int ff = m->ff_dim;
    if (m->ffn_act == CAIRN__FFN_GELU)
        gated_kernel<T, 1><<<grid_for((size_t)n * ff), CK_THREADS, 0, b->stream>>>(
            b->gu, ff, n, (T *)b->hb, b->d_overflow);
    else
        gated_kernel<T, 0><<<grid_for((size_t)n * ff), CK_THREADS, 0, b->stream>>>(
            b->gu, ff, n, (T *)b->hb, b->d_overflow);
    LAUNCHED(b, "gated activation kernel");
    return 0;
}

/* logits (n, n_vocab) soft-capped in place (gemma2's final_softcap), if the model has it */
static int cap_logits(cuda_backend *b, int n)
{
    const cairn__model *m = b->base.model;
    if (!(m->final_softcap > 0))
        return 0;
    const size_t total = (size_t)n * (size_t)m->n_vocab;
    softcap_kernel<<<grid_for(total), CK_THREADS, 0, b->stream>>>(b->logits, total,
                                                                  m->final_softcap);
    LAUNCHED(b, "soft-cap kernel");
    return 0;
}

/* gu (n, 2 ff) = Wgu (2 ff, dim) @ rmsnorm(x), and hb (n, ff) = swiglu(gu) (gemma: geglu) in T;
 * a single token's fused product stores hb alone (GV_GLU, SwiGLU only) */
template <typename T> static int gate_up_product(cuda_backend *b, int n, const dlayer *ly)
{
    const cairn__model *m = b->base.model;
    const int ff = m->ff_dim;
    if (n == 1 && b->gv && m->ffn_act != CAIRN__FFN_GELU)
        return gemv<T, GV_NORM, GV_GLU>(b, GVP_GU, ly->wgu, 2 * ff, m->dim, b->x, ly->ffn_norm,
                                        0.0f, b->hb, qkv_args(),
                                        "rmsnorm + gate/up + swiglu (gemv)");
    int rc = normed_product<T>(b, GVP_GU, n, b->x, ly->ffn_norm, ly->wgu, 2 * ff, b->gu,
                               "rmsnorm + gate/up (gemv)", "cublasGemmEx (gate/up)");
    if (rc)
        return rc;
    return gated<T>(b, n);
}

/* softmax(q . K) @ V for n tokens into att, over layer l's cache kc, vc (C: its type), within
 * the layer's sliding window if it has one */
template <typename T, typename C>
static int attend(cuda_backend *b, int n, int l, const C *kc, const C *vc)
{
    const cairn__model *m = b->base.model;
    const int hd = m->head_dim, swa = m->layers[l].swa;
    const float scale = m->attn_scale, cap = m->attn_softcap; /* cap 0: none */
    T *att = (T *)b->att;
    if (n == 1) /* one token: the keys split over blocks; between decode products */
        CU(b,
           launch(b, 1, attention_split_kernel<T, ATT_DECODE_WARPS, ATT_DECODE_U, C>,
                  dim3((unsigned)m->n_heads, (unsigned)att_splits(m->n_heads)),
                  dim3(ATT_DECODE_WARPS * 32), 0, (const float *)b->qkv, kc, vc,
                  (const int *)b->d_pos, m->n_heads, m->n_kv_heads, hd, swa, scale, cap,
                  b->att_part, b->att_count, att, (int *)b->d_overflow),
           "attention kernel");
    else { /* a prompt chunk: tiles of tokens, sized by the head (hd <= ATT_MAX_HD = 256) */
        const dim3 blk(ATT_TILE_WARPS * 32);
#define ATT_TILE(TQ, KC, HDM)                                                                      \
    attention_tile_kernel<T, TQ, KC, HDM, C>                                                       \
        <<<dim3((unsigned)m->n_heads, (unsigned)((n + TQ - 1) / TQ)), blk, 0, b->stream>>>(        \
            b->qkv, b->qkv_dim, kc, vc, b->d_pos, n, m->n_heads, m->n_kv_heads, hd, swa, scale,    \
            cap, att, b->d_overflow)
        if (hd <= 64)
            ATT_TILE(16, 32, 64);
        else if (hd <= 128)
            ATT_TILE(16, 32, 128);
        else
            ATT_TILE(8, 16, 256);
#undef ATT_TILE
    }
    LAUNCHED(b, "attention kernel");
    return 0;
}

/* Product prod (enum gv_prod) of layer l for the n tokens of a chunk, with the small kernels
 * folded into it; the output head's input is the last head_rows of them. */
template <typename T>
static int layer_product(cuda_backend *b, int prod, int l, int n, int head_rows)
{
    const cairn__model *m = b->base.model;
    const dlayer *ly = &b->layers[l];
    const int dim = m->dim, ff = m->ff_dim;
    switch (prod) {
    case GVP_QKV:
        return qkv_product<T>(b, n, l);
    case GVP_WO: /* Wo (dim, q_dim) @ att (n, q_dim) + x -> x (n, dim) */
        return added_product<T>(b, GVP_WO, n, ly->wo, dim, b->q_dim, b->att, b->x, ly->attn_post,
                                "attention output (gemv)", "cublasGemmEx (attention output)");
    case GVP_GU: /* swiglu(Wgu (2 ff, dim) @ rmsnorm(x)) -> hb (n, ff) */
        return gate_up_product<T>(b, n, ly);
    case GVP_DOWN: /* Wd (dim, ff) @ hb + x -> x (n, dim) */
        return added_product<T>(b, GVP_DOWN, n, ly->wd, dim, ff, b->hb, b->x, ly->ffn_post,
                                "down (gemv)", "cublasGemmEx (down)");
    default: { /* Wout (n_vocab, dim) @ rmsnorm(x) -> logits (head_rows, n_vocab), capped */
        const int rc = normed_product<T>(
            b, GVP_OUT, head_rows, b->x + (size_t)(n - head_rows) * dim, b->output_norm, b->output,
            m->n_vocab, b->logits, "rmsnorm + output (gemv)", "cublasGemmEx (output)");
        return rc ? rc : cap_logits(b, head_rows);
    }
    }
}

template <typename T> static int enqueue_t(cuda_backend *b, int n, int head_rows)
{
    const cairn__model *m = b->base.model;
    const int dim = m->dim;
    const size_t layer_kv = (size_t)b->base.n_ctx * (size_t)b->kv_dim;
    int rc;

    /* x (n, dim) = tok_embd[tokens] */
    embed_kernel<T><<<n, CK_THREADS, 0, b->stream>>>((const T *)b->tok_embd, b->d_tokens, dim,
                                                     m->embd_scale, b->x);
    LAUNCHED(b, "embedding kernel");
    /* the rope angles of these positions, once for every layer and head (and for gemma3's
     * sliding layers, from their base) */
    if (m->rope_dim >= 2) {
        rope_table_kernel<<<n, 128, 0, b->stream>>>(b->d_pos, b->inv_freq, m->rope_dim / 2,
                                                    b->rope_cs);
        LAUNCHED(b, "rope table kernel");
        if (b->rope_cs_l) {
            rope_table_kernel<<<n, 128, 0, b->stream>>>(b->d_pos, b->inv_freq_l, m->rope_dim / 2,
                                                        b->rope_cs_l);
            LAUNCHED(b, "rope table kernel (local)");
        }
    }
    for (int l = 0; l < m->n_layers; l++) {
        /* Wqkv (qkv_dim, dim) @ rmsnorm(x) -> qkv (n, qkv_dim); bias, rope, k/v into the cache */
        if ((rc = layer_product<T>(b, GVP_QKV, l, n, 0)))
            return rc;
        const size_t at = (size_t)l * layer_kv * kv_elem(b);
        if (b->cache_f16)
            rc = attend<T, __half>(b, n, l, (const __half *)((const char *)b->kc + at),
                                   (const __half *)((const char *)b->vc + at));
        else
            rc = attend<T, float>(b, n, l, (const float *)((const char *)b->kc + at),
                                  (const float *)((const char *)b->vc + at));
        if (rc)
            return rc;
        if ((rc = layer_product<T>(b, GVP_WO, l, n, 0)) ||
            (rc = layer_product<T>(b, GVP_GU, l, n, 0)) ||
            (rc = layer_product<T>(b, GVP_DOWN, l, n, 0)))
            return rc;
    }
    return head_rows ? layer_product<T>(b, GVP_OUT, 0, n, head_rows) : 0;
}

/* Enqueues the pass of n tokens (already in d_tokens, position in d_pos) on the stream, and the
 * output head for the last head_rows of them (0: none). */
static int enqueue(cuda_backend *b, int n, int head_rows)
{
    return by_dtype(b, [&](auto t) { return enqueue_t<decltype(t)>(b, n, head_rows); });
}
