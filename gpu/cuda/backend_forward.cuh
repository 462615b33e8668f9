/* gpu/cuda/backend_forward.cuh - the backend's forward operations: a decode step through its
 * CUDA graph (captured once per kind of step, replayed for every token; the design is in
 * backend_cuda.cu's comment, "Decode"), the device sampler's step, and a prompt chunk launched
 * directly on the stream.
 *
 * A part of backend_cuda.cu's one translation unit (a unity build, gpu/meson.build): included
 * there only, after backend_ops.cuh, so it has no include guard and includes nothing itself.
 */

/* ==== decode graph
 * ================================================================================= */

/* The device sampler on the logits of row 0 (penalty, then argmax or keys, sort and draw),
 * parameters in d_sin; the token lands in h_next when the stream reaches it. */
static int enqueue_sampling(cuda_backend *b, int kind)
{
    const int nv = b->base.model->n_vocab;
    penalty_kernel<<<1, CK_THREADS, 0, b->stream>>>(b->logits, b->d_sin);
    LAUNCHED(b, "penalty kernel");
    if (kind == STEP_GREEDY) {
        argmax_kernel<<<1, SAMPLE_THREADS, 0, b->stream>>>(b->logits, nv, b->d_next);
        LAUNCHED(b, "argmax kernel");
    } else {
        keys_kernel<<<grid_for((size_t)nv), CK_THREADS, 0, b->stream>>>(b->logits, nv, b->keys);
        LAUNCHED(b, "sort key kernel");
        size_t bytes = b->sort_temp_bytes;
        /* bits 32..63 only (the logit): the sort is stable and the keys are made in id order,
         * so equal logits stay in ascending id, the order the low half encodes */
        CU(b,
           cub::DeviceRadixSort::SortKeysDescending(b->sort_temp, bytes, b->keys, b->keys_sorted,
                                                    nv, 32, 64, b->stream),
           "cub::DeviceRadixSort::SortKeysDescending");
        prof_mark(b, "cub::DeviceRadixSort");
        weights_kernel<<<grid_for((size_t)nv), CK_THREADS, 0, b->stream>>>(b->keys_sorted, nv,
                                                                           b->d_sin, b->weights);
        LAUNCHED(b, "sample weights kernel");
        finish_kernel<<<1, SAMPLE_THREADS, 0, b->stream>>>(b->keys_sorted, b->weights, nv, b->d_sin,
                                                           b->d_next);
        LAUNCHED(b, "sampling kernel");
    }
    CU(b, cudaMemcpyAsync(b->h_next, b->d_next, sizeof(int), cudaMemcpyDeviceToHost, b->stream),
       "cudaMemcpyAsync (token)");
    return 0;
}

/* the whole graph body of a decode step: inputs in, the pass, then logits or a token out */
static int enqueue_decode(cuda_backend *b, int kind)
{
    prof_begin(b);
    CU(b, cudaMemcpyAsync(b->d_tokens, b->h_tokens, sizeof(int), cudaMemcpyHostToDevice, b->stream),
       "cudaMemcpyAsync (token)");
    CU(b, cudaMemcpyAsync(b->d_pos, b->h_pos, sizeof(int), cudaMemcpyHostToDevice, b->stream),
       "cudaMemcpyAsync (position)");
    if (kind >= STEP_GREEDY)
        CU(b,
           cudaMemcpyAsync(b->d_sin, b->h_sin, sizeof(sample_in), cudaMemcpyHostToDevice,
                           b->stream),
           "cudaMemcpyAsync (sampling parameters)");
    int rc = enqueue(b, 1, kind != STEP_NOHEAD);
    if (rc)
        return rc;
    CU(b,
       cudaMemcpyAsync(b->h_overflow, b->d_overflow, sizeof(int), cudaMemcpyDeviceToHost,
                       b->stream),
       "cudaMemcpyAsync (flags)");
    if (kind == STEP_LOGITS)
        CU(b,
           cudaMemcpyAsync(b->h_logits, b->logits, (size_t)b->base.model->n_vocab * sizeof(float),
                           cudaMemcpyDeviceToHost, b->stream),
           "cudaMemcpyAsync (logits)");
    else if (kind >= STEP_GREEDY)
        return enqueue_sampling(b, kind);
    return 0;
}

/* Captures the decode graph of a kind (once). The first time, the same step runs eagerly before
 * the capture so that every kernel module and cuBLAS's heuristics are loaded outside of it (lazy
 * loading inside a capture is not allowed everywhere); the graph then recomputes the same
 * position, writing the same values. */
static int capture(cuda_backend *b, int kind, cudaGraphExec_t *out)
{
    int rc = enqueue_decode(b, kind);
    if (rc)
        return rc;
    CU(b, cudaStreamSynchronize(b->stream), "warm-up decode step");
    cudaGraph_t g = NULL;
    CU(b, cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal),
       "cudaStreamBeginCapture");
    rc = enqueue_decode(b, kind);
    cudaError_t e =
        cudaStreamEndCapture(b->stream, &g); /* always end, or the stream stays capturing */
    if (rc) {
        if (g)
            cudaGraphDestroy(g);
        (void)cudaGetLastError();
        return rc;
    }
    /* on failure, clear the error too: the eager fallback's first launch check would read it */
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return cuda_err(b->e, b->elen, e, "cudaStreamEndCapture");
    }
    e = cudaGraphInstantiate(out, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *out = NULL;
        return cuda_err(b->e, b->elen, e, "cudaGraphInstantiate");
    }
    return 0;
}

/* one token at position pos, as kind; the inputs of a sampling kind are already in h_sin */
static int decode_step(cuda_backend *b, int32_t token, int pos, int kind)
{
    cudaGraphExec_t *ge = &b->graphs[kind];
    b->h_tokens[0] = token; /* the previous step has completed: the staging is free */
    b->h_pos[0] = pos;
    if (!*ge && !b->no_graph) {
        int rc = capture(b, kind, ge);
        if (rc && rc != CAIRN_ENOMEM && b->pdl) {
            /* programmatic dependent launches are the newest thing in the graph: without them
             * the step computes the same bits, so try that before giving up on graphs */
            (void)cudaGetLastError();
            snprintf(b->pdl_err, sizeof b->pdl_err,
                     "graph, without programmatic dependent launch: %s", b->base.err);
            b->base.err[0] = '\0';
            b->pdl = 0;
            const cudaError_t se = cudaStreamSynchronize(b->stream);
            if (se != cudaSuccess)
                return cuda_err(b->e, b->elen, se, "decode step");
            rc = capture(b, kind, ge);
        }
        if (rc == CAIRN_ENOMEM)
            return rc;
        if (rc) { /* run without graphs from now on (every kind: the cache they write must agree) */
            b->no_graph = 1;
            (void)cudaGetLastError();
            snprintf(b->graph_err, sizeof b->graph_err, "eager: %s", b->base.err);
            b->base.err[0] = '\0';
            const cudaError_t se = cudaStreamSynchronize(b->stream);
            if (se != cudaSuccess) /* a fault, not a capture problem */
                return cuda_err(b->e, b->elen, se, "decode step");
        }
    }
    if (b->no_graph) {
        int rc = enqueue_decode(b, kind);
        if (rc)
            return rc;
    } else {
        CU(b, cudaGraphLaunch(*ge, b->stream), "cudaGraphLaunch");
    }
    CU(b, cudaStreamSynchronize(b->stream), "decode step");
    prof_end(b, 0);
    return check_range(b);
}

/* the host's request into the pinned parameters the next step copies to the device */
static void set_sample_in(cuda_backend *b, const cairn__sample_req *q)
{
    sample_in *s = b->h_sin;
    s->temperature = q->temperature;
    s->top_p = q->top_p;
    s->penalty = q->repeat_penalty;
    s->top_k = q->top_k;
    s->r = q->r;
    s->n_pen = q->n_pen;
    if (q->n_pen > 0)
        memcpy(s->pen, q->pen, (size_t)q->n_pen * sizeof *q->pen);
}

/* greedy and top-k 1 pick the largest key: no sort */
static int sample_kind(const cairn__sample_req *q)
{
    return q->temperature <= 0.0f || q->top_k == 1 ? STEP_GREEDY : STEP_SAMPLE;
}

static int cuda_forward_sample(cairn__backend *bb, int32_t token, int pos,
                               const cairn__sample_req *q, int32_t *next)
{
    cuda_backend *b = (cuda_backend *)bb;
    b->e = b->base.err;
    b->elen = sizeof b->base.err;
    CU(b, cudaSetDevice(b->device), "cudaSetDevice");
    set_sample_in(b, q);
    const int rc = decode_step(b, token, pos, sample_kind(q));
    if (rc)
        return rc;
    *next = b->h_next[0];
    return 0;
}

/* the sampler alone on given logits (eager, not a graph): the gpu test's view of it */
static int cuda_sample_logits(cairn__backend *bb, const float *logits, const cairn__sample_req *q,
                              int32_t *next)
{
    if (!bb || bb->ops != &cairn__backend_cuda_ops)
        return CAIRN_EINVAL;
    cuda_backend *b = (cuda_backend *)bb;
    b->e = b->base.err;
    b->elen = sizeof b->base.err;
    if (q->n_pen < 0 || q->n_pen > CAIRN__SAMPLE_MAX_PEN)
        return host.errf(b->e, b->elen, CAIRN_EUNSUPPORTED, "%d penalized ids", q->n_pen);
    for (int i = 0; i < q->n_pen; i++)
        if (q->pen[i] < 0 || q->pen[i] >= b->base.model->n_vocab)
            return host.errf(b->e, b->elen, CAIRN_EINVAL,
                             "penalized id %d is outside the vocabulary", q->pen[i]);
    CU(b, cudaSetDevice(b->device), "cudaSetDevice");
    set_sample_in(b, q);
    CU(b,
       cudaMemcpyAsync(b->logits, logits, (size_t)b->base.model->n_vocab * sizeof(float),
                       cudaMemcpyHostToDevice, b->stream),
       "cudaMemcpyAsync (logits)");
    CU(b, cudaMemcpyAsync(b->d_sin, b->h_sin, sizeof(sample_in), cudaMemcpyHostToDevice, b->stream),
       "cudaMemcpyAsync (sampling parameters)");
    const int rc = enqueue_sampling(b, sample_kind(q));
    if (rc)
        return rc;
    CU(b, cudaStreamSynchronize(b->stream), "sampling");
    *next = b->h_next[0];
    return 0;
}

/* n (2..n_batch) tokens at pos..; logits: NULL, the last row, or all n rows (all_logits) */
static int prompt_chunk(cuda_backend *b, const int32_t *tokens, int n, int pos, float *logits,
                        int all_logits)
{
    const size_t nv = (size_t)b->base.model->n_vocab;
    const int head = logits ? (all_logits ? n : 1) : 0;
    for (int i = 0; i < n; i++)
        b->h_tokens[i] = tokens[i];
    b->h_pos[0] = pos;
    prof_begin(b);
    CU(b,
       cudaMemcpyAsync(b->d_tokens, b->h_tokens, (size_t)n * sizeof(int), cudaMemcpyHostToDevice,
                       b->stream),
       "cudaMemcpyAsync (tokens)");
    CU(b, cudaMemcpyAsync(b->d_pos, b->h_pos, sizeof(int), cudaMemcpyHostToDevice, b->stream),
       "cudaMemcpyAsync (position)");
    int rc = enqueue(b, n, head);
    if (rc)
        return rc;
    if (head)
        CU(b,
           cudaMemcpyAsync(logits, b->logits, (size_t)head * nv * sizeof(float),
                           cudaMemcpyDeviceToHost, b->stream),
           "cudaMemcpyAsync (logits)");
    CU(b,
       cudaMemcpyAsync(b->h_overflow, b->d_overflow, sizeof(int), cudaMemcpyDeviceToHost,
                       b->stream),
       "cudaMemcpyAsync (flags)");
    /* once per chunk: the pinned token staging is reused by the next one */
    CU(b, cudaStreamSynchronize(b->stream), "prompt chunk");
    prof_end(b, 1);
    return check_range(b);
}

static int cuda_forward(cairn__backend *bb, const int32_t *tokens, int n, int pos, float *logits,
                        int all_logits)
{
    cuda_backend *b = (cuda_backend *)bb;
    const size_t nv = (size_t)b->base.model->n_vocab;
    b->e = b->base.err;
    b->elen = sizeof b->base.err;
    CU(b, cudaSetDevice(b->device), "cudaSetDevice");
    for (int c0 = 0; c0 < n; c0 += b->n_batch) {
        const int nc = n - c0 < b->n_batch ? n - c0 : b->n_batch;
        const int last = c0 + nc == n;
        float *lg = NULL;
        if (logits && all_logits)
            lg = logits + (size_t)c0 * nv;
        else if (logits && last)
            lg = logits;
        if (nc == 1) {
            const int rc = decode_step(b, tokens[c0], pos + c0, lg ? STEP_LOGITS : STEP_NOHEAD);
            if (rc)
                return rc;
            if (lg)
                memcpy(lg, b->h_logits, nv * sizeof(float));
            continue;
        }
        const int rc = prompt_chunk(b, tokens + c0, nc, pos + c0, lg, all_logits);
        if (rc)
            return rc;
    }
    return 0;
}
