/* gpu/cuda/backend_upload.cuh - the weights' upload at creation, once: each matrix into the
 * device type (copied as stored when its type is the device type, else dequantized on the host
 * a slab of rows at a time over up to 16 threads, with the program's cairn__dequant_row, and
 * rounded on the device), Q/K/V and gate/up stacked into one matrix each.
 *
 * A part of backend_cuda.cu's one translation unit (a unity build, gpu/meson.build): included
 * there only, after backend_forward.cuh, so it has no include guard and includes nothing itself.
 */

/* ==== creation: weights
 * ============================================================================ */

/* Rows of W converted to the device type at dst (rows * cols elements). Same-type F32/F16/BF16
 * are copied as stored; anything else is dequantized on the host (cairn__dequant_row, the CPU
 * path's own function) a slab of rows at a time and rounded on the device. */
/* Rows [r0, r1) of W dequantized into out (row r0 first): one thread's share of a slab. */
typedef struct {
    const cairn__mat *W;
    size_t r0, r1;
    float *out;
} dequant_share;

static void *dequant_rows(void *arg)
{
    const dequant_share *j = (const dequant_share *)arg;
    const size_t cols = (size_t)j->W->cols;
    for (size_t r = j->r0; r < j->r1; r++)
        host.dequant_row(j->W->type, j->W->data + r * j->W->row_bytes, j->out + (r - j->r0) * cols,
                         (uint64_t)cols);
    return NULL;
}

/* Rows [r0, r0 + nr) of W into stage, split over up to DEQUANT_THREADS threads: loading a
 * quantized model is bound by this host work (a 7B Q4_K file is ~28 GB of f32 to produce), and
 * every row is independent. A thread that cannot be started leaves its share to the caller. */
#define DEQUANT_THREADS 16
static void dequant_slab(const cairn__mat *W, size_t r0, size_t nr, float *stage)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t nt = cpus > 1 ? (size_t)cpus : 1;
    if (nt > DEQUANT_THREADS)
        nt = DEQUANT_THREADS;
    if (nt > nr)
        nt = nr;
    dequant_share job[DEQUANT_THREADS];
    pthread_t tid[DEQUANT_THREADS];
    int started[DEQUANT_THREADS] = {0};
    for (size_t t = 0; t < nt; t++) {
        job[t].W = W;
        job[t].r0 = r0 + nr * t / nt;
        job[t].r1 = r0 + nr * (t + 1) / nt;
        job[t].out = stage + (job[t].r0 - r0) * (size_t)W->cols;
    }
    for (size_t t = 1; t < nt; t++)
        started[t] = pthread_create(&tid[t], NULL, dequant_rows, &job[t]) == 0;
    dequant_rows(&job[0]);
    for (size_t t = 1; t < nt; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            dequant_rows(&job[t]);
    }
}

static int upload_mat(cuda_backend *b, const cairn__mat *W, void *dst, float *h_stage,
                      float *d_stage)
{
    const size_t cols = (size_t)W->cols, rows = (size_t)W->rows, es = DT_SIZE[b->dt];
    const int same = (b->dt == DT_F32 && W->type == CAIRN__GGML_F32) ||
                     (b->dt == DT_F16 && W->type == CAIRN__GGML_F16) ||
                     (b->dt == DT_BF16 && W->type == CAIRN__GGML_BF16);
    if (same) {
        CU(b, cudaMemcpy(dst, W->data, rows * W->row_bytes, cudaMemcpyHostToDevice),
           "cudaMemcpy (weights)");
        return 0;
    }
    const size_t slab = STAGE_FLOATS / cols > 0 ? STAGE_FLOATS / cols : 1;
    for (size_t r0 = 0; r0 < rows; r0 += slab) {
        const size_t nr = rows - r0 < slab ? rows - r0 : slab;
        dequant_slab(W, r0, nr, h_stage);
        char *d = (char *)dst + r0 * cols * es;
        if (b->dt == DT_F32) {
            CU(b, cudaMemcpy(d, h_stage, nr * cols * sizeof(float), cudaMemcpyHostToDevice),
               "cudaMemcpy (weights)");
            continue;
        }
        CU(b, cudaMemcpy(d_stage, h_stage, nr * cols * sizeof(float), cudaMemcpyHostToDevice),
           "cudaMemcpy (weights)");
        if (b->dt == DT_F16)
            convert_kernel<__half><<<grid_for(nr * cols), CK_THREADS, 0, 0>>>(
                d_stage, (__half *)d, nr * cols, b->d_overflow);
        else
            convert_kernel<__nv_bfloat16><<<grid_for(nr * cols), CK_THREADS, 0, 0>>>(
                d_stage, (__nv_bfloat16 *)d, nr * cols, b->d_overflow);
        LAUNCHED(b, "weight conversion kernel");
        CU(b, cudaDeviceSynchronize(),
           "weight conversion"); /* d_stage and h_stage are reused next */
    }
    return 0;
}

/* Matrices stacked by rows (all with the same cols) into one new device matrix *out. */
static int upload_stack(cuda_backend *b, const cairn__mat *const *mats, int nm, void **out,
                        float *h_stage, float *d_stage, const char *what, int count)
{
    size_t rows = 0;
    for (int i = 0; i < nm; i++)
        rows += (size_t)mats[i]->rows;
    const size_t cols = (size_t)mats[0]->cols, es = DT_SIZE[b->dt];
    int rc = dmalloc(b, out, rows * cols * es, what);
    if (rc)
        return rc;
    size_t r0 = 0;
    for (int i = 0; i < nm; i++) {
        if ((rc = upload_mat(b, mats[i], (char *)*out + r0 * cols * es, h_stage, d_stage)))
            return rc;
        r0 += (size_t)mats[i]->rows;
    }
    if (count)
        b->weight_bytes += rows * cols * es;
    return 0;
}

static int upload_vec(cuda_backend *b, const float *v, size_t n, float **out, const char *what)
{
    int rc = dmalloc(b, (void **)out, n * sizeof(float), what);
    if (rc)
        return rc;
    CU(b, cudaMemcpy(*out, v, n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy (vectors)");
    return 0;
}

static int upload_weights(cuda_backend *b)
{
    const cairn__model *m = b->base.model;
    size_t max_cols = (size_t)m->dim > (size_t)m->ff_dim ? (size_t)m->dim : (size_t)m->ff_dim;
    if ((size_t)b->q_dim > max_cols)
        max_cols = (size_t)b->q_dim;
    const size_t stage = STAGE_FLOATS > max_cols ? STAGE_FLOATS : max_cols;
    float *h_stage = NULL, *d_stage = NULL;
    int rc = 0;
    if (cudaMallocHost((void **)&h_stage, stage * sizeof(float)) != cudaSuccess) {
        (void)cudaGetLastError();
        h_stage = NULL;
        return host.errf(b->e, b->elen, CAIRN_ENOMEM,
                         "cannot allocate %zu bytes of pinned host memory", stage * sizeof(float));
    }
    if ((rc = dmalloc(b, (void **)&d_stage, stage * sizeof(float), "weight staging")))
        goto out;
    {
        const cairn__mat *e[1] = {&m->tok_embd};
        if ((rc = upload_stack(b, e, 1, &b->tok_embd, h_stage, d_stage, "token_embd.weight",
                               m->tied_output)))
            goto out;
    }
    if (m->tied_output) {
        b->output = b->tok_embd;
    } else {
        const cairn__mat *o[1] = {&m->output};
        if ((rc = upload_stack(b, o, 1, &b->output, h_stage, d_stage, "output.weight", 1)))
            goto out;
    }
    if ((rc = upload_vec(b, m->output_norm, (size_t)m->dim, &b->output_norm, "output_norm.weight")))
        goto out;
    for (int l = 0; l < m->n_layers; l++) {
        const cairn__layer *ly = &m->layers[l];
        dlayer *d = &b->layers[l];
        const cairn__mat *qkv[3] = {&ly->wq, &ly->wk, &ly->wv}, *gu[2] = {&ly->w_gate, &ly->w_up};
        const cairn__mat *wo[1] = {&ly->wo}, *wd[1] = {&ly->w_down};
        if ((rc = upload_stack(b, qkv, 3, &d->wqkv, h_stage, d_stage, "attention Q/K/V weights",
                               1)) ||
            (rc =
                 upload_stack(b, wo, 1, &d->wo, h_stage, d_stage, "attention output weights", 1)) ||
            (rc = upload_stack(b, gu, 2, &d->wgu, h_stage, d_stage, "gate/up weights", 1)) ||
            (rc = upload_stack(b, wd, 1, &d->wd, h_stage, d_stage, "down weights", 1)) ||
            (rc = upload_vec(b, ly->attn_norm, (size_t)m->dim, &d->attn_norm, "attention norm")) ||
            (rc = upload_vec(b, ly->ffn_norm, (size_t)m->dim, &d->ffn_norm, "feed-forward norm")))
            goto out;
        if (ly->q_norm &&
            ((rc = upload_vec(b, ly->q_norm, (size_t)m->head_dim, &d->q_norm, "q norm")) ||
             (rc = upload_vec(b, ly->k_norm, (size_t)m->head_dim, &d->k_norm, "k norm"))))
            goto out;
        if (ly->attn_post_norm && ((rc = upload_vec(b, ly->attn_post_norm, (size_t)m->dim,
                                                    &d->attn_post, "post-attention norm")) ||
                                   (rc = upload_vec(b, ly->ffn_post_norm, (size_t)m->dim,
                                                    &d->ffn_post, "post-feed-forward norm"))))
            goto out;
        if (ly->bq || ly->bk || ly->bv) { /* absent ones are zero */
            float *bias = (float *)calloc((size_t)b->qkv_dim, sizeof(float));
            if (!bias) {
                rc = host.errf(b->e, b->elen, CAIRN_ENOMEM, "out of memory");
                goto out;
            }
            if (ly->bq)
                memcpy(bias, ly->bq, (size_t)b->q_dim * sizeof(float));
            if (ly->bk)
                memcpy(bias + b->q_dim, ly->bk, (size_t)b->kv_dim * sizeof(float));
            if (ly->bv)
                memcpy(bias + b->q_dim + b->kv_dim, ly->bv, (size_t)b->kv_dim * sizeof(float));
            rc = upload_vec(b, bias, (size_t)b->qkv_dim, &d->bqkv, "Q/K/V biases");
            free(bias);
            if (rc)
                goto out;
        }
    }
out:
    cudaFree(d_stage);
    cudaFreeHost(h_stage);
    return rc;
}
