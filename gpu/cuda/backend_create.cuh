/* gpu/cuda/backend_create.cuh - a backend's life: the device check and the environment
 * (CAIRN_CUDA_DTYPE, _GEMV, _GV_SPLIT, _PDL, _PROFILE) read at creation, the allocations that
 * are not weights (setup), the order of creation (setup, gemv_setup, the upload, gv_tune; an
 * f16 model with a weight beyond f16's range created again as bf16), and destruction.
 *
 * A part of backend_cuda.cu's one translation unit (a unity build, gpu/meson.build): included
 * there only, after backend_tune.cuh, so it has no include guard and includes nothing itself.
 */

/* ==== creation
 * ===================================================================================== */

static void cuda_destroy(cairn__backend *bb)
{
    cuda_backend *b = (cuda_backend *)bb;
    if (!b)
        return;
    /* nothing here can be reported: free what exists and clear any error it raises */
    cudaSetDevice(b->device);
    if (b->stream)
        cudaStreamSynchronize(b->stream);
    for (int k = 0; k < STEP_KINDS; k++)
        if (b->graphs[k])
            cudaGraphExecDestroy(b->graphs[k]);
    if (b->prof_ev) {
        prof_print(b);
        for (int i = 0; i < PROF_MAX; i++)
            if (b->prof_ev[i])
                cudaEventDestroy(b->prof_ev[i]);
        free(b->prof_ev);
        free(b->prof_at);
    }
    pool_free(b);
    if (b->layers) {
        for (int l = 0; l < b->base.model->n_layers; l++) {
            dlayer *d = &b->layers[l];
            cudaFree(d->wqkv);
            cudaFree(d->wo);
            cudaFree(d->wgu);
            cudaFree(d->wd);
            cudaFree(d->attn_norm);
            cudaFree(d->ffn_norm);
            cudaFree(d->bqkv);
            cudaFree(d->q_norm);
            cudaFree(d->k_norm);
            cudaFree(d->attn_post);
            cudaFree(d->ffn_post);
        }
        free(b->layers);
    }
    if (b->output != b->tok_embd)
        cudaFree(b->output);
    cudaFree(b->tok_embd);
    cudaFree(b->output_norm);
    void *dev[] = {b->kc,       b->vc,       b->x,           b->xn,         b->qkv,
                   b->att,      b->gu,       b->hb,          b->logits,     b->inv_freq,
                   b->d_tokens, b->d_pos,    b->d_overflow,  b->workspace,  b->d_sin,
                   b->d_next,   b->keys,     b->keys_sorted, b->sort_temp,  b->rope_cs,
                   b->weights,  b->att_part, b->att_count,   b->inv_freq_l, b->rope_cs_l,
                   b->xt};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        cudaFree(dev[i]);
    cudaFreeHost(b->h_tokens);
    cudaFreeHost(b->h_pos);
    cudaFreeHost(b->h_logits);
    cudaFreeHost(b->h_sin);
    cudaFreeHost(b->h_next);
    cudaFreeHost(b->h_overflow);
    if (b->blas)
        cublasDestroy(b->blas);
    if (b->stream)
        cudaStreamDestroy(b->stream);
    (void)cudaGetLastError();
    free(b);
}

static int host_alloc(cuda_backend *b, void **p, size_t bytes, const char *what)
{
    if (cudaMallocHost(p, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        *p = NULL;
        return host.errf(b->e, b->elen, CAIRN_ENOMEM,
                         "cannot allocate %zu bytes of pinned host memory for %s", bytes, what);
    }
    return 0;
}

/* everything but the weights */
static int setup(cuda_backend *b)
{
    const cairn__model *m = b->base.model;
    const size_t nb = (size_t)b->n_batch, es = DT_SIZE[b->dt];
    const size_t kv = (size_t)m->n_layers * (size_t)b->base.n_ctx * (size_t)b->kv_dim * kv_elem(b);
    int rc;
    CU(b, cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    BL(b, cublasCreate(&b->blas), "cublasCreate");
    BL(b, cublasSetStream(b->blas, b->stream), "cublasSetStream");
    /* no TF32 for the f32 path; f16/bf16 products accumulate in f32 by the compute type */
    BL(b, cublasSetMathMode(b->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    if ((rc = dmalloc(b, &b->workspace, WORKSPACE_BYTES, "the cuBLAS workspace")))
        return rc;
    BL(b, cublasSetWorkspace(b->blas, b->workspace, WORKSPACE_BYTES), "cublasSetWorkspace");
    if ((rc = dmalloc(b, (void **)&b->kc, kv, "the key cache")) ||
        (rc = dmalloc(b, (void **)&b->vc, kv, "the value cache")) ||
        (rc = dmalloc(b, (void **)&b->x, nb * (size_t)m->dim * sizeof(float), "activations")) ||
        (rc = dmalloc(b, &b->xn, nb * (size_t)m->dim * es, "activations")) ||
        (rc = dmalloc(b, (void **)&b->qkv, nb * (size_t)b->qkv_dim * sizeof(float),
                      "activations")) ||
        (rc = dmalloc(b, &b->att, nb * (size_t)b->q_dim * es, "activations")) ||
        (rc = dmalloc(b, (void **)&b->gu, nb * 2 * (size_t)m->ff_dim * sizeof(float),
                      "activations")) ||
        (rc = dmalloc(b, &b->hb, nb * (size_t)m->ff_dim * es, "activations")) ||
        (rc = dmalloc(b, (void **)&b->logits, nb * (size_t)m->n_vocab * sizeof(float), "logits")) ||
        (rc = dmalloc(b, (void **)&b->inv_freq, (size_t)(m->rope_dim / 2 + 1) * sizeof(float),
                      "rope")) ||
        (rc = dmalloc(b, (void **)&b->rope_cs,
                      nb * (size_t)(m->rope_dim / 2 + 1) * 2 * sizeof(float), "rope")) ||
        (rc = dmalloc(b, (void **)&b->d_tokens, nb * sizeof(int), "tokens")) ||
        (rc = dmalloc(b, (void **)&b->d_pos, sizeof(int), "position")) ||
        (rc = dmalloc(b, (void **)&b->d_overflow, sizeof(int), "flags")) ||
        (rc = dmalloc(b, (void **)&b->att_part,
                      (size_t)m->n_heads * (size_t)att_splits(m->n_heads) *
                          (size_t)(2 + m->head_dim) * sizeof(float),
                      "attention splits")) ||
        (rc = dmalloc(b, (void **)&b->att_count, (size_t)m->n_heads * sizeof(int),
                      "attention splits")))
        return rc;
    const size_t half1 = (size_t)(m->rope_dim / 2 + 1);
    if (m->rope_base_local > 0 &&
        ((rc = dmalloc(b, (void **)&b->inv_freq_l, half1 * sizeof(float), "rope")) ||
         (rc = dmalloc(b, (void **)&b->rope_cs_l, nb * half1 * 2 * sizeof(float), "rope"))))
        return rc;
    if (m->n_layers && m->layers[0].attn_post_norm &&
        (rc = dmalloc(b, (void **)&b->xt, nb * (size_t)m->dim * sizeof(float), "activations")))
        return rc;
    if ((rc = host_alloc(b, (void **)&b->h_tokens, nb * sizeof(int), "tokens")) ||
        (rc = host_alloc(b, (void **)&b->h_pos, sizeof(int), "the position")) ||
        (rc = host_alloc(b, (void **)&b->h_logits, (size_t)m->n_vocab * sizeof(float), "logits")) ||
        (rc = host_alloc(b, (void **)&b->h_sin, sizeof(sample_in), "sampling parameters")) ||
        (rc = host_alloc(b, (void **)&b->h_next, sizeof(int), "the sampled token")) ||
        (rc = host_alloc(b, (void **)&b->h_overflow, sizeof(int), "flags")))
        return rc;
    /* the device sampler: its scratch is sized once, for the vocabulary, so that a captured
     * step allocates nothing */
    const size_t nvk = (size_t)m->n_vocab * sizeof(uint64_t);
    CU(b,
       cub::DeviceRadixSort::SortKeysDescending(NULL, b->sort_temp_bytes, (const uint64_t *)NULL,
                                                (uint64_t *)NULL, m->n_vocab, 32, 64, b->stream),
       "cub::DeviceRadixSort (scratch size)");
    if ((rc = dmalloc(b, (void **)&b->d_sin, sizeof(sample_in), "sampling parameters")) ||
        (rc = dmalloc(b, (void **)&b->d_next, sizeof(int), "the sampled token")) ||
        (rc = dmalloc(b, (void **)&b->keys, nvk, "sort keys")) ||
        (rc = dmalloc(b, (void **)&b->keys_sorted, nvk, "sort keys")) ||
        (rc = dmalloc(b, (void **)&b->weights, (size_t)m->n_vocab * sizeof(double),
                      "sampling weights")) ||
        (rc = dmalloc(b, &b->sort_temp, b->sort_temp_bytes, "the sort's scratch")))
        return rc;
    memset(b->h_sin, 0, sizeof(sample_in));
    if (b->prof) {
        b->prof_ev = (cudaEvent_t *)calloc(PROF_MAX, sizeof *b->prof_ev);
        b->prof_at = (const char **)calloc(PROF_MAX, sizeof *b->prof_at);
        if (!b->prof_ev || !b->prof_at)
            return host.errf(b->e, b->elen, CAIRN_ENOMEM, "out of memory");
        for (int i = 0; i < PROF_MAX; i++)
            CU(b, cudaEventCreate(&b->prof_ev[i]), "cudaEventCreate (profile)");
    }
    /* never read before written, but a cache of zeros makes any indexing bug reproducible */
    CU(b, cudaMemset(b->kc, 0, kv), "cudaMemset");
    CU(b, cudaMemset(b->vc, 0, kv), "cudaMemset");
    CU(b, cudaMemset(b->d_overflow, 0, sizeof(int)), "cudaMemset");
    CU(b, cudaMemset(b->att_count, 0, (size_t)m->n_heads * sizeof(int)), "cudaMemset");
    /* theta_i = pos * base^(-2i/rope_dim) / rope_freqs[i] * rope_scale (Llama 3's factors, when
     * the file has them; gemma3's linear scaling): the CPU backend's table, computed the same
     * way; gemma3's sliding layers' from their own base, unscaled */
    float inv[ATT_MAX_HD / 2 + 1], inv_l[ATT_MAX_HD / 2 + 1]; /* rope_dim <= head_dim <= 256 */
    const int half = m->rope_dim / 2;
    if (half > (int)(sizeof inv / sizeof *inv))
        return host.errf(b->e, b->elen, CAIRN_EUNSUPPORTED, "rope dimension %d is too large",
                         m->rope_dim);
    for (int i = 0; i < half; i++) {
        inv[i] = (float)(pow((double)m->rope_base, -2.0 * i / (double)m->rope_dim) /
                         (m->rope_freqs ? (double)m->rope_freqs[i] : 1.0) * (double)m->rope_scale);
        inv_l[i] = m->rope_base_local > 0
                       ? (float)pow((double)m->rope_base_local, -2.0 * i / (double)m->rope_dim)
                       : 0.0f;
    }
    if (half > 0)
        CU(b, cudaMemcpy(b->inv_freq, inv, (size_t)half * sizeof(float), cudaMemcpyHostToDevice),
           "cudaMemcpy (rope)");
    if (half > 0 && b->inv_freq_l)
        CU(b,
           cudaMemcpy(b->inv_freq_l, inv_l, (size_t)half * sizeof(float), cudaMemcpyHostToDevice),
           "cudaMemcpy (rope)");
    b->layers = (dlayer *)calloc((size_t)m->n_layers, sizeof *b->layers);
    if (!b->layers)
        return host.errf(b->e, b->elen, CAIRN_ENOMEM, "out of memory");
    return 0;
}

/* device type when CAIRN_CUDA_DTYPE does not say: f32 only for an all-F32 model */
static int default_dtype(const cairn__model *m)
{
    const cairn__mat *ms[] = {&m->tok_embd, &m->output};
    for (size_t i = 0; i < sizeof ms / sizeof *ms; i++)
        if (ms[i]->type != CAIRN__GGML_F32)
            return DT_F16;
    for (int l = 0; l < m->n_layers; l++) {
        const cairn__layer *ly = &m->layers[l];
        const cairn__mat *w[] = {&ly->wq,     &ly->wk,   &ly->wv,    &ly->wo,
                                 &ly->w_gate, &ly->w_up, &ly->w_down};
        for (size_t i = 0; i < sizeof w / sizeof *w; i++)
            if (w[i]->type != CAIRN__GGML_F32)
                return DT_F16;
    }
    return DT_F32;
}

static int create_as(const cairn__model *m, const cairn__backend_opts *o, int device, int dt,
                     int gv, int gv_force, int pdl, cairn__backend **out, int *overflow, char *err,
                     size_t errlen)
{
    *overflow = 0;
    cuda_backend *b = (cuda_backend *)calloc(1, sizeof *b);
    if (!b)
        return host.errf(err, errlen, CAIRN_ENOMEM, "out of memory");
    b->base.ops = &cairn__backend_cuda_ops;
    b->base.model = m;
    b->base.n_ctx = o->n_ctx > 0 ? o->n_ctx : (m->n_ctx_train < 4096 ? m->n_ctx_train : 4096);
    b->device = device;
    b->cache_f16 = o->cache_type == CAIRN__CACHE_F16;
    b->dt = dt;
    b->gv = gv;
    b->gv_force = gv_force;
    b->pdl = gv && pdl;
    b->n_batch = o->n_batch > 0 ? o->n_batch : 256;
    if (b->n_batch > MAX_BATCH)
        b->n_batch = MAX_BATCH;
    if (b->n_batch > b->base.n_ctx)
        b->n_batch = b->base.n_ctx;
    b->q_dim = m->n_heads * m->head_dim;
    b->kv_dim = m->n_kv_heads * m->head_dim;
    b->qkv_dim = b->q_dim + 2 * b->kv_dim;
    b->qkv_items = (m->n_heads + m->n_kv_heads) * (m->head_dim / 2) + b->kv_dim / 2;
    b->qkv_blocks = grid_for((size_t)b->qkv_items) < 64 ? grid_for((size_t)b->qkv_items) : 64;
    b->e = err;
    b->elen = errlen;
    b->prof_n = -1;
    const char *pe = getenv("CAIRN_CUDA_PROFILE");
    if (pe && *pe && strcmp(pe, "0") != 0) {
        b->prof = 1;
        b->no_graph = 1; /* events between the operations: run them as launched */
        snprintf(b->graph_err, sizeof b->graph_err, "eager: CAIRN_CUDA_PROFILE is set");
    }
    int rc = setup(b);
    if (!rc)
        rc = gemv_setup(b);
    if (!rc)
        rc = upload_weights(b);
    if (!rc) {
        int flag = 0;
        cudaError_t e = cudaMemcpy(&flag, b->d_overflow, sizeof flag, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess)
            rc = cuda_err(err, errlen, e, "weight upload");
        else if (flag) {
            *overflow = 1;
            rc = host.errf(err, errlen, CAIRN_EUNSUPPORTED, "a weight is beyond the range of f16");
        }
    }
    if (!rc) { /* pageable-memory copies may still be in flight: finish before the stream starts */
        cudaError_t e = cudaDeviceSynchronize();
        if (e != cudaSuccess)
            rc = cuda_err(err, errlen, e, "weight upload");
    }
    if (!rc)
        rc = gv_tune(b);
    if (rc) {
        cuda_destroy(&b->base);
        return rc;
    }
    b->e = b->base.err;
    b->elen = sizeof b->base.err;
    *out = &b->base;
    return 0;
}

static int cuda_create(const cairn__model *m, const cairn__backend_opts *o, cairn__backend **out,
                       char *err, size_t errlen)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return host.errf(err, errlen, CAIRN_ENODEVICE, "no CUDA device: %s (%s)",
                         cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (count <= 0)
        return host.errf(err, errlen, CAIRN_ENODEVICE, "no CUDA device: none found");
    if (o->device < 0 || o->device >= count)
        return host.errf(err, errlen, CAIRN_ENODEVICE,
                         "no CUDA device: device %d requested, %d present", o->device, count);
    if ((e = cudaSetDevice(o->device)) != cudaSuccess)
        return cuda_err(err, errlen, e, "cudaSetDevice");
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, o->device)) != cudaSuccess)
        return cuda_err(err, errlen, e, "cudaGetDeviceProperties");
    if (prop.major < 8)
        return host.errf(
            err, errlen, CAIRN_ENODEVICE,
            "no CUDA device: %s has compute capability %d.%d, this build needs 8.0 or newer",
            prop.name, prop.major, prop.minor);
    /* (phi3's fused tensors are row views, uploaded as separate matrices are; windows, gemma's
     * post-norms, GELU, soft-caps and local rope are in the kernels) */
    if (m->head_dim > ATT_MAX_HD)
        return host.errf(err, errlen, CAIRN_EUNSUPPORTED,
                         "head dimension %d exceeds the CUDA backend's %d", m->head_dim,
                         ATT_MAX_HD);
    int dt = default_dtype(m);
    const char *env = getenv("CAIRN_CUDA_DTYPE");
    if (env && *env) {
        if (strcmp(env, "f16") == 0)
            dt = DT_F16;
        else if (strcmp(env, "bf16") == 0)
            dt = DT_BF16;
        else if (strcmp(env, "f32") == 0)
            dt = DT_F32;
        else
            return host.errf(err, errlen, CAIRN_EINVAL,
                             "CAIRN_CUDA_DTYPE='%s': expected f16, bf16 or f32", env);
    }
    int gv = 1;
    env = getenv("CAIRN_CUDA_GEMV");
    if (env && *env) {
        if (strcmp(env, "kernel") == 0)
            gv = 1;
        else if (strcmp(env, "cublas") == 0)
            gv = 0;
        else
            return host.errf(err, errlen, CAIRN_EINVAL,
                             "CAIRN_CUDA_GEMV='%s': expected kernel or cublas", env);
    }
    /* every decode product's split (gemv_kernel), instead of the timed choice (gv_tune): for
     * the benchmark's sweep and the tests */
    int gv_force = 0;
    env = getenv("CAIRN_CUDA_GV_SPLIT");
    if (env && *env) {
        if (strcmp(env, "1") == 0 || strcmp(env, "2") == 0 || strcmp(env, "4") == 0 ||
            strcmp(env, "8") == 0)
            gv_force = atoi(env);
        else if (strcmp(env, "auto") != 0)
            return host.errf(err, errlen, CAIRN_EINVAL,
                             "CAIRN_CUDA_GV_SPLIT='%s': expected auto, 1, 2, 4 or 8", env);
    }
    /* programmatic dependent launches: 9.x only (the module's sm_90 code has the waits, its
     * compute_80 PTX, which other GPUs compile, does not) */
    int pdl = prop.major == 9;
    env = getenv("CAIRN_CUDA_PDL");
    if (env && *env) {
        if (strcmp(env, "0") == 0)
            pdl = 0;
        else if (strcmp(env, "1") != 0)
            return host.errf(err, errlen, CAIRN_EINVAL, "CAIRN_CUDA_PDL='%s': expected 0 or 1",
                             env);
    }
    int overflow = 0;
    int rc = create_as(m, o, o->device, dt, gv, gv_force, pdl, out, &overflow, err, errlen);
    if (rc && overflow) /* f16 cannot hold this model: bf16 can */
        rc = create_as(m, o, o->device, DT_BF16, gv, gv_force, pdl, out, &overflow, err, errlen);
    return rc;
}
