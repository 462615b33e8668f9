/* gpu/cuda/backend_paged.cuh - the paged KV pool on the device (kv_pool) and the batched step
 * over it (forward_paged), for gpu/batch.c's continuous batching; the contract is
 * cairn__backend_forward_paged's in gpu/backend.h.
 *
 * The pool: for each layer, n_blocks * CAIRN__KV_BLOCK rows of kv_dim keys (and as many values),
 * in the cache type, laid out [layer][block][position in block][kv_head * head_dim] like the
 * positional cache's [layer][position][...], so a block is a run of 16 of the positional
 * cache's rows and attention over a block table differs from attention over the cache only in
 * the address of each row (att_rows_paged, kernels_attention.cuh).
 *
 * A step: every decode entry (n 1) joins one batched pass of all of them (enqueue_batch): the
 * embedding, rope angles and RMSNorms one row a sequence, each product through
 * gemv_batch_kernel (each weight read once for GVB_MAX sequences), the bias/rope/KV step into
 * the sequences' blocks (qkv_post_paged_kernel), attention over their block tables
 * (attention_paged_kernel), the SwiGLU. Each of those computes a row exactly as the solo decode
 * step computes its one row (the fused gemv_kernel's prologue and epilogues are these same
 * kernels' arithmetic; tests/gpu/emu checks every equality), so a sequence's logits are bit for
 * bit its solo backend's, whichever sequences share the step. Without the decode kernel
 * (CAIRN_CUDA_GEMV=cublas, or rows too long for it) the solo step's products are cuBLAS GEMMs of
 * one column; the batch then runs one such GEMM a sequence, the same call, so the same bits.
 * CAIRN_CUDA_BATCH_GEMM=N is the opt-in fast path: a batch of N or more sequences runs each
 * product as one cuBLAS GEMM of all of them, whose reduction order cuBLAS picks by shape, so a
 * sequence's bits then depend on the batch; off by default (tests/gpu/device-check.sh measures
 * what it gains).
 *
 * Prompt chunks (n > 1) run one at a time through the solo prompt path (prompt_chunk): the
 * sequence's earlier positions are first copied from its blocks into the positional cache,
 * which the chunk then extends exactly as a solo backend's forward() would, and the chunk's new
 * positions are copied back into its blocks. So a chunk's keys, values and logits are the solo
 * path's bits too; the positional cache is the paged step's scratch (n_past is 0 after one).
 *
 * Decode batches run as plain launches, not a captured graph: the solo graph machinery is
 * keyed by kind of step and reads one position; a graph per batch size would need a capture per
 * size seen (up to n_batch of them) and the block tables' device copy inside it. The launches
 * of a batch cost the same whatever its size, so their share falls as the batch grows; a graph
 * per batch-size bucket is the next step if device-check's sweep shows them at small sizes.
 *
 * A part of backend_cuda.cu's one translation unit (a unity build, gpu/meson.build): included
 * there only, after backend_forward.cuh, so it has no include guard and includes nothing itself.
 */

static_assert(ATT_KV_BLOCK == CAIRN__KV_BLOCK, "the kernels' block is the interface's");

/* rows [lo, hi) of a sequence between the positional cache (row p) and the pool (row
 * blocks[p / 16] * 16 + p % 16), words 4-byte words a row, every layer (blockIdx.y): to_pool
 * copies cache -> pool, else pool -> cache. grid (any, n_layers) */
__global__ void kv_page_kernel(unsigned *__restrict__ pool, unsigned *__restrict__ cache,
                               const int *__restrict__ blocks, int lo, int hi, int words,
                               size_t pool_layer, size_t cache_layer, int to_pool)
{
    const size_t n = (size_t)(hi - lo) * (size_t)words;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const int p = lo + (int)(i / (size_t)words), w = (int)(i % (size_t)words);
        const size_t pr = (size_t)blocks[p / ATT_KV_BLOCK] * ATT_KV_BLOCK + p % ATT_KV_BLOCK;
        unsigned *pp = pool + blockIdx.y * pool_layer + pr * (size_t)words + w;
        unsigned *cp = cache + blockIdx.y * cache_layer + (size_t)p * (size_t)words + w;
        if (to_pool)
            *pp = *cp;
        else
            *cp = *pp;
    }
}

/* bytes of one layer of the pool (keys or values) */
static size_t pool_layer_bytes(const cuda_backend *b)
{
    return (size_t)b->n_blocks * CAIRN__KV_BLOCK * (size_t)b->kv_dim * kv_elem(b);
}

static void pool_free(cuda_backend *b)
{
    cudaFree(b->kpool);
    cudaFree(b->vpool);
    cudaFree(b->d_bin);
    cudaFree(b->bpart);
    cudaFree(b->bcount);
    cudaFreeHost(b->h_bin);
    b->kpool = b->vpool = NULL;
    b->d_bin = b->h_bin = b->bcount = NULL;
    b->bpart = NULL;
    b->n_blocks = 0;
}

static int cuda_kv_pool(cairn__backend *bb, int n_blocks)
{
    cuda_backend *b = (cuda_backend *)bb;
    const cairn__model *m = b->base.model;
    b->e = b->base.err;
    b->elen = sizeof b->base.err;
    CU(b, cudaSetDevice(b->device), "cudaSetDevice");
    CU(b, cudaStreamSynchronize(b->stream), "cudaStreamSynchronize");
    pool_free(b);
    if (n_blocks == 0)
        return 0;
    const char *ev = getenv("CAIRN_CUDA_BATCH_GEMM");
    b->batch_gemm = ev && atoi(ev) > 0 ? atoi(ev) : 0;
    b->bt_ld = (b->base.n_ctx + CAIRN__KV_BLOCK - 1) / CAIRN__KV_BLOCK;
    b->n_blocks = n_blocks;
    const size_t bytes = (size_t)m->n_layers * pool_layer_bytes(b), nb = (size_t)b->n_batch;
    const size_t bin = nb * (size_t)(2 + b->bt_ld) * sizeof(int);
    const size_t heads = nb * (size_t)m->n_heads;
    char what[96];
    snprintf(what, sizeof what, "a KV pool of %d blocks of %d positions", n_blocks,
             CAIRN__KV_BLOCK);
    int rc;
    if ((rc = dmalloc(b, &b->kpool, bytes, what)) || (rc = dmalloc(b, &b->vpool, bytes, what)) ||
        (rc = dmalloc(b, (void **)&b->d_bin, bin, "the batch's block tables")) ||
        (rc = dmalloc(b, (void **)&b->bpart,
                      heads * (size_t)att_splits(m->n_heads) * (size_t)(2 + m->head_dim) *
                          sizeof(float),
                      "the batch's attention splits")) ||
        (rc = dmalloc(b, (void **)&b->bcount, heads * sizeof(int),
                      "the batch's attention splits"))) {
        pool_free(b);
        return rc; /* dmalloc's message: the sizes, and what the device has free */
    }
    if (cudaMallocHost((void **)&b->h_bin, bin) != cudaSuccess) {
        (void)cudaGetLastError();
        b->h_bin = NULL;
        pool_free(b);
        return host.errf(b->e, b->elen, CAIRN_ENOMEM,
                         "out of pinned host memory (%zu bytes) for the batch's block tables", bin);
    }
    CU(b, cudaMemset(b->bcount, 0, heads * sizeof(int)), "cudaMemset");
    return 0;
}

/* Y (n, rows) = W (rows, cols) @ X (n, cols) (+ Y, beta 1): gemv_batch_kernel at product prod's
 * split, GVB_MAX sequences a launch; without the decode kernel one cuBLAS GEMM a sequence (the
 * solo step's call); the CAIRN_CUDA_BATCH_GEMM opt-in one GEMM for all of them */
template <typename T>
static int bproduct(cuda_backend *b, int prod, const void *W, int rows, int cols, const void *X,
                    int n, float *Y, int ldy, float beta, const char *what)
{
    if (b->batch_gemm && n >= b->batch_gemm)
        return gemm(b, W, rows, cols, X, n, Y, ldy, beta, what);
    if (!b->gv) {
        for (int i = 0; i < n; i++) {
            const int rc = gemm(b, W, rows, cols, (const T *)X + (size_t)i * cols, 1,
                                Y + (size_t)i * ldy, ldy, beta, what);
            if (rc)
                return rc;
        }
        return 0;
    }
    constexpr int V = 16 / sizeof(T);
    const int sk = b->gv_sk[prod], groups = (rows + 1) / 2;
    int blocks = (groups * sk + GV_WARPS - 1) / GV_WARPS;
    if (blocks > b->gv_blocks[gv_split_index(sk)])
        blocks = b->gv_blocks[gv_split_index(sk)];
    const int vec = cols % V == 0 && (uintptr_t)W % 16 == 0;
    const int xvec = cols % V == 0 && (uintptr_t)X % 16 == 0;
    void (*const k[GV_SPLITS])(const T *, int, int, int, const T *, int, int, int, float, float *,
                               int) = {gemv_batch_kernel<T, 1>, gemv_batch_kernel<T, 2>,
                                       gemv_batch_kernel<T, 4>, gemv_batch_kernel<T, 8>};
    for (int b0 = 0; b0 < n; b0 += GVB_MAX) {
        const int nb = n - b0 < GVB_MAX ? n - b0 : GVB_MAX;
        CU(b,
           launch(b, 0, k[gv_split_index(sk)], dim3((unsigned)blocks), dim3(CK_THREADS),
                  gvb_smem_bytes(cols, (int)sizeof(T)), (const T *)W, rows, cols, vec,
                  (const T *)X + (size_t)b0 * cols, cols, xvec, nb, beta, Y + (size_t)b0 * ldy,
                  ldy),
           what);
        LAUNCHED(b, what);
    }
    return 0;
}

/* the pass of n decode entries (tokens in d_tokens, positions, pool rows and block tables in
 * d_bin) and the output head for all of them */
template <typename T> static int enqueue_batch_t(cuda_backend *b, int n)
{
    const cairn__model *m = b->base.model;
    const int dim = m->dim, ff = m->ff_dim, hd = m->head_dim;
    const int *pos = b->d_bin, *rows = b->d_bin + n, *tables = b->d_bin + 2 * n;
    const float scale = m->attn_scale; /* 1 / sqrt(hd), but see gpu/model.c */
    T *xn = (T *)b->xn;
    int rc;
    embed_kernel<T><<<n, CK_THREADS, 0, b->stream>>>((const T *)b->tok_embd, b->d_tokens, dim,
                                                     m->embd_scale, b->x);
    LAUNCHED(b, "embedding kernel");
    if (m->rope_dim >= 2) {
        rope_table_seqs_kernel<<<n, 128, 0, b->stream>>>(pos, b->inv_freq, m->rope_dim / 2,
                                                         b->rope_cs);
        LAUNCHED(b, "rope table kernel");
        if (b->rope_cs_l) {
            rope_table_seqs_kernel<<<n, 128, 0, b->stream>>>(pos, b->inv_freq_l, m->rope_dim / 2,
                                                             b->rope_cs_l);
            LAUNCHED(b, "rope table kernel (local)");
        }
    }
    for (int l = 0; l < m->n_layers; l++) {
        const dlayer *ly = &b->layers[l];
        rmsnorm_kernel<T><<<n, CK_THREADS, 0, b->stream>>>(b->x, ly->attn_norm, dim, m->rms_eps, xn,
                                                           b->d_overflow);
        LAUNCHED(b, "rmsnorm kernel");
        if ((rc = bproduct<T>(b, GVP_QKV, ly->wqkv, b->qkv_dim, dim, xn, n, b->qkv, b->qkv_dim,
                              0.0f, "QKV (batched gemv)")))
            return rc;
        qkv_args qa = qkv_of(b, l);
        if (ly->q_norm && (rc = qk_norm(b, n, ly, &qa)))
            return rc;
        const size_t at = (size_t)l * pool_layer_bytes(b);
        qa.kc = (char *)b->kpool + at;
        qa.vc = (char *)b->vpool + at;
        qkv_post_paged_kernel<<<dim3((unsigned)n, b->qkv_blocks), CK_THREADS, 0, b->stream>>>(
            b->qkv, b->qkv_dim, qa, rows);
        LAUNCHED(b, "bias/rope/KV kernel (paged)");
        const dim3 grid((unsigned)(n * m->n_heads), (unsigned)att_splits(m->n_heads));
        cudaError_t e;
        if (b->cache_f16)
            e = launch(b, 0, attention_paged_kernel<T, ATT_DECODE_WARPS, ATT_DECODE_U, __half>,
                       grid, dim3(ATT_DECODE_WARPS * 32), 0, (const float *)b->qkv, b->qkv_dim,
                       (const __half *)qa.kc, (const __half *)qa.vc, pos, tables, b->bt_ld,
                       m->n_heads, m->n_kv_heads, hd, m->layers[l].swa, scale, m->attn_softcap,
                       b->bpart, b->bcount, (T *)b->att, (int *)b->d_overflow);
        else
            e = launch(b, 0, attention_paged_kernel<T, ATT_DECODE_WARPS, ATT_DECODE_U, float>, grid,
                       dim3(ATT_DECODE_WARPS * 32), 0, (const float *)b->qkv, b->qkv_dim,
                       (const float *)qa.kc, (const float *)qa.vc, pos, tables, b->bt_ld,
                       m->n_heads, m->n_kv_heads, hd, m->layers[l].swa, scale, m->attn_softcap,
                       b->bpart, b->bcount, (T *)b->att, (int *)b->d_overflow);
        CU(b, e, "attention kernel (paged)");
        LAUNCHED(b, "attention kernel (paged)");
        /* (gemma: the product to xt, then its post-norm added to x) */
        if ((rc = bproduct<T>(b, GVP_WO, ly->wo, dim, b->q_dim, b->att, n,
                              ly->attn_post ? b->xt : b->x, dim, ly->attn_post ? 0.0f : 1.0f,
                              "attention output (batched gemv)")) ||
            (ly->attn_post && (rc = post_norm_add(b, n, ly->attn_post))))
            return rc;
        rmsnorm_kernel<T><<<n, CK_THREADS, 0, b->stream>>>(b->x, ly->ffn_norm, dim, m->rms_eps, xn,
                                                           b->d_overflow);
        LAUNCHED(b, "rmsnorm kernel");
        if ((rc = bproduct<T>(b, GVP_GU, ly->wgu, 2 * ff, dim, xn, n, b->gu, 2 * ff, 0.0f,
                              "gate/up (batched gemv)")))
            return rc;
        if ((rc = gated<T>(b, n)) ||
            (rc = bproduct<T>(b, GVP_DOWN, ly->wd, dim, ff, b->hb, n, ly->ffn_post ? b->xt : b->x,
                              dim, ly->ffn_post ? 0.0f : 1.0f, "down (batched gemv)")) ||
            (ly->ffn_post && (rc = post_norm_add(b, n, ly->ffn_post))))
            return rc;
    }
    rmsnorm_kernel<T>
        <<<n, CK_THREADS, 0, b->stream>>>(b->x, b->output_norm, dim, m->rms_eps, xn, b->d_overflow);
    LAUNCHED(b, "rmsnorm kernel");
    rc = bproduct<T>(b, GVP_OUT, b->output, m->n_vocab, dim, xn, n, b->logits, m->n_vocab, 0.0f,
                     "output (batched gemv)");
    return rc ? rc : cap_logits(b, n);
}

/* one batch of n (1..n_batch) decode entries */
static int paged_decode(cuda_backend *b, const cairn__kv_seq *const *d, int n)
{
    const size_t nv = (size_t)b->base.model->n_vocab;
    int *hp = b->h_bin, *hr = b->h_bin + n, *ht = b->h_bin + 2 * n;
    for (int i = 0; i < n; i++) { /* the stream is idle: the staging is free */
        const int p = d[i]->pos;
        b->h_tokens[i] = d[i]->tokens[0];
        hp[i] = p;
        hr[i] = d[i]->blocks[p / CAIRN__KV_BLOCK] * CAIRN__KV_BLOCK + p % CAIRN__KV_BLOCK;
        memcpy(ht + (size_t)i * b->bt_ld, d[i]->blocks,
               (size_t)(p / CAIRN__KV_BLOCK + 1) * sizeof(int));
    }
    prof_begin(b);
    CU(b,
       cudaMemcpyAsync(b->d_tokens, b->h_tokens, (size_t)n * sizeof(int), cudaMemcpyHostToDevice,
                       b->stream),
       "cudaMemcpyAsync (tokens)");
    CU(b,
       cudaMemcpyAsync(b->d_bin, b->h_bin, (size_t)n * (2 + b->bt_ld) * sizeof(int),
                       cudaMemcpyHostToDevice, b->stream),
       "cudaMemcpyAsync (block tables)");
    int rc = by_dtype(b, [&](auto t) { return enqueue_batch_t<decltype(t)>(b, n); });
    if (rc)
        return rc;
    CU(b,
       cudaMemcpyAsync(b->h_overflow, b->d_overflow, sizeof(int), cudaMemcpyDeviceToHost,
                       b->stream),
       "cudaMemcpyAsync (flags)");
    for (int i = 0; i < n; i++)
        if (d[i]->logits)
            CU(b,
               cudaMemcpyAsync(d[i]->logits, b->logits + (size_t)i * nv, nv * sizeof(float),
                               cudaMemcpyDeviceToHost, b->stream),
               "cudaMemcpyAsync (logits)");
    CU(b, cudaStreamSynchronize(b->stream), "batched decode step");
    prof_end(b, 0);
    return check_range(b);
}

/* one prompt chunk (n > 1) of a sequence, through the solo prompt path over the positional
 * cache, its blocks copied in before and its new positions copied back after */
static int paged_prompt(cuda_backend *b, const cairn__kv_seq *q)
{
    const cairn__model *m = b->base.model;
    const int words = (int)((size_t)b->kv_dim * kv_elem(b) / 4); /* kv_dim is even */
    const size_t pl = pool_layer_bytes(b) / 4;
    const size_t cl = (size_t)b->base.n_ctx * (size_t)b->kv_dim * kv_elem(b) / 4;
    const int nbk = (q->pos + q->n - 1) / CAIRN__KV_BLOCK + 1;
    /* the table into the batch's staging (the stream is idle), then to the device */
    memcpy(b->h_bin, q->blocks, (size_t)nbk * sizeof(int));
    CU(b,
       cudaMemcpyAsync(b->d_bin, b->h_bin, (size_t)nbk * sizeof(int), cudaMemcpyHostToDevice,
                       b->stream),
       "cudaMemcpyAsync (block table)");
    const auto copy = [&](int lo, int hi, int to_pool) -> int {
        if (lo >= hi)
            return 0;
        const dim3 grid(grid_for((size_t)(hi - lo) * (size_t)words), (unsigned)m->n_layers);
        kv_page_kernel<<<grid, CK_THREADS, 0, b->stream>>>(
            (unsigned *)b->kpool, (unsigned *)b->kc, b->d_bin, lo, hi, words, pl, cl, to_pool);
        LAUNCHED(b, "KV block copy");
        kv_page_kernel<<<grid, CK_THREADS, 0, b->stream>>>(
            (unsigned *)b->vpool, (unsigned *)b->vc, b->d_bin, lo, hi, words, pl, cl, to_pool);
        LAUNCHED(b, "KV block copy");
        return 0;
    };
    int rc = copy(0, q->pos, 0);
    if (rc)
        return rc;
    b->base.n_past = 0; /* the positional cache is scratch now */
    /* prompt_chunk synchronises: the table's staging is free again after it */
    if ((rc = prompt_chunk(b, q->tokens, q->n, q->pos, q->logits, 0)))
        return rc;
    memcpy(b->h_bin, q->blocks, (size_t)nbk * sizeof(int));
    CU(b,
       cudaMemcpyAsync(b->d_bin, b->h_bin, (size_t)nbk * sizeof(int), cudaMemcpyHostToDevice,
                       b->stream),
       "cudaMemcpyAsync (block table)");
    if ((rc = copy(q->pos, q->pos + q->n, 1)))
        return rc;
    CU(b, cudaStreamSynchronize(b->stream), "KV block copy");
    return 0;
}

static int cuda_forward_paged(cairn__backend *bb, const cairn__kv_seq *s, int n_seqs)
{
    cuda_backend *b = (cuda_backend *)bb;
    b->e = b->base.err;
    b->elen = sizeof b->base.err;
    if (!b->kpool)
        return host.errf(b->e, b->elen, CAIRN_EUNSUPPORTED, "no KV pool (cairn__backend_kv_pool)");
    for (int k = 0; k < n_seqs; k++)
        for (int p = 0; p < s[k].pos + s[k].n; p += CAIRN__KV_BLOCK) /* read, or written */
            if (s[k].blocks[p / CAIRN__KV_BLOCK] < 0 ||
                s[k].blocks[p / CAIRN__KV_BLOCK] >= b->n_blocks)
                return host.errf(b->e, b->elen, CAIRN_EINVAL,
                                 "entry %d: block %d of position %d outside the pool (%d)", k,
                                 s[k].blocks[p / CAIRN__KV_BLOCK], p, b->n_blocks);
    CU(b, cudaSetDevice(b->device), "cudaSetDevice");
    const cairn__kv_seq **dec =
        (const cairn__kv_seq **)malloc((n_seqs > 0 ? (size_t)n_seqs : 1) * sizeof *dec);
    if (!dec)
        return host.errf(b->e, b->elen, CAIRN_ENOMEM, "out of memory");
    int nd = 0, rc = 0;
    for (int k = 0; k < n_seqs && !rc; k++) {
        if (s[k].n == 1)
            dec[nd++] = &s[k];
        else
            rc = paged_prompt(b, &s[k]);
    }
    /* at most n_batch decode entries (validated): the activations hold that many rows */
    if (!rc && nd)
        rc = paged_decode(b, dec, nd);
    free(dec);
    return rc;
}
