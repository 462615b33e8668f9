/* gpu/cuda/backend_tune.cuh - the decode product's launch limits and its split tuner: the
 * shared memory and resident grid of each split (gemv_setup), and each product's split timed on
 * the device at creation (gv_tune). Every split computes the same bits, so the tuner picks a
 * speed, never a result.
 *
 * A part of backend_cuda.cu's one translation unit (a unity build, gpu/meson.build): included
 * there only, after backend_upload.cuh, so it has no include guard and includes nothing itself.
 */

/* The single-token product's launch limits: shared memory for the longest input it stages
 * (dim, q_dim or ff elements of T, and its segment sums), and the grid of each split that is
 * resident at once. Without the shared memory (an f32 model of very wide layers) the products
 * stay cuBLAS's. */
template <typename T> static int gemv_setup_t(cuda_backend *b)
{
    const cairn__model *m = b->base.model;
    int cols = m->dim > b->q_dim ? m->dim : b->q_dim;
    if (m->ff_dim > cols)
        cols = m->ff_dim;
    const size_t smem = gv_smem_bytes(cols, (int)sizeof(T));
    int optin = 0, sms = 0;
    CU(b, cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, b->device),
       "cudaDeviceGetAttribute");
    CU(b, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, b->device),
       "cudaDeviceGetAttribute");
#define GV_VARIANTS(S)                                                                             \
    (const void *)gemv_kernel<T, GV_PLAIN, GV_Y, S>,                                               \
        (const void *)gemv_kernel<T, GV_NORM, GV_Y, S>,                                            \
        (const void *)gemv_kernel<T, GV_NORM, GV_QKV, S>,                                          \
        (const void *)gemv_kernel<T, GV_NORM, GV_GLU, S>
    const void *k[] = {GV_VARIANTS(1), GV_VARIANTS(2), GV_VARIANTS(4), GV_VARIANTS(8)};
#undef GV_VARIANTS
    int per_sm[GV_SPLITS] = {0};
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        /* the cap is the kernel's, shared by every backend of the process: set it to what the
         * device allows, the same value each time, never to this model's need (a backend for a
         * smaller model created later would lower it under this one) */
        const size_t si = i / 4; /* the split's four variants share its grid */
        cudaFuncAttributes fa;
        CU(b, cudaFuncGetAttributes(&fa, k[i]), "cudaFuncGetAttributes (gemv)");
        if (smem + fa.sharedSizeBytes > (size_t)optin) { /* the input does not fit: cuBLAS */
            b->gv = b->pdl = 0;
            return 0;
        }
        CU(b,
           cudaFuncSetAttribute(k[i], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                optin - (int)fa.sharedSizeBytes),
           "cudaFuncSetAttribute (gemv)");
        int nb = 0;
        CU(b, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k[i], CK_THREADS, smem),
           "cudaOccupancyMaxActiveBlocksPerMultiprocessor (gemv)");
        if (i % 4 == 0 || nb < per_sm[si])
            per_sm[si] = nb;
    }
    for (int si = 0; si < GV_SPLITS; si++)
        b->gv_blocks[si] = (per_sm[si] > 0 ? per_sm[si] : 1) * (sms > 0 ? sms : 1);
    for (int p = 0; p < GVP_N; p++)
        b->gv_sk[p] = b->gv_force ? b->gv_force : 1;
    return 0;
}

/* The rows and input columns of product p (enum gv_prod) */
static int gv_rows(const cuda_backend *b, int p)
{
    const cairn__model *m = b->base.model;
    return p == GVP_QKV   ? b->qkv_dim
           : p == GVP_GU  ? 2 * m->ff_dim
           : p == GVP_OUT ? m->n_vocab
                          : m->dim;
}
static int gv_cols(const cuda_backend *b, int p)
{
    const cairn__model *m = b->base.model;
    return p == GVP_WO ? b->q_dim : p == GVP_DOWN ? m->ff_dim : m->dim;
}

/* Keeps the stream busy for about `cycles` clock cycles (one thread): gv_tune queues its timed
 * launches behind it, so that they run back to back on the device and the host's launch rate
 * takes no part in their times. A wait, not a computation: no CPU reference. */
__global__ void spin_kernel(long long cycles)
{
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

/* Each decode product's split, timed (CAIRN_CUDA_GV_SPLIT unset or auto). Every split computes
 * the same bits (gemv_kernel's order depends on the row length only), so this picks a speed,
 * never a result. For each product, GV_TUNE_ROUNDS rounds (after one to warm up) queue behind
 * a spin kernel, for each split in turn, GV_TUNE_REPS launches as the decode step launches them,
 * each on the next layer's matrix (so that the weights come from memory, not from L2), between
 * two events; a split's time is its best round, and a larger split must beat the best smaller
 * one by 2 %. A split of more warps than the row has segments leaves some idle and is not tried.
 * Inputs are zeros; what the products write (x, att, hb, the position and the rope angles are
 * zeroed before and after; q, every layer's key and value at position 0 and the logits are written
 * again before any step reads them) changes nothing a forward pass computes. About 2 ms a
 * product and round: tens of milliseconds at load. */
#define GV_TUNE_REPS 10
#define GV_TUNE_ROUNDS 3
#define GV_TUNE_SPIN_MS 2
template <typename T> static int gv_tune_t(cuda_backend *b)
{
    const cairn__model *m = b->base.model;
    cudaEvent_t ev[2 * GV_SPLITS] = {};
    int rc = 0, khz = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, b->device) != cudaSuccess || khz <= 0) {
        (void)cudaGetLastError(); /* the spin's length only: assume 2 GHz */
        khz = 2000000;
    }
    for (int i = 0; i < 2 * GV_SPLITS && !rc; i++)
        if (cudaEventCreate(&ev[i]) != cudaSuccess)
            rc = cuda_err(b->e, b->elen, cudaGetLastError(), "cudaEventCreate (gemv tuning)");
    const struct {
        void *p;
        size_t bytes;
    } zero[] = {{b->x, (size_t)m->dim * sizeof(float)},
                {b->att, (size_t)b->q_dim * sizeof(T)},
                {b->hb, (size_t)m->ff_dim * sizeof(T)},
                {b->d_pos, sizeof(int)},
                {b->rope_cs, (size_t)(m->rope_dim / 2 + 1) * 2 * sizeof(float)},
                {b->rope_cs_l ? b->rope_cs_l : b->rope_cs,
                 (size_t)(m->rope_dim / 2 + 1) * 2 * sizeof(float)}};
    for (size_t i = 0; i < sizeof zero / sizeof *zero && !rc; i++)
        if (cudaMemsetAsync(zero[i].p, 0, zero[i].bytes, b->stream) != cudaSuccess)
            rc = cuda_err(b->e, b->elen, cudaGetLastError(), "cudaMemsetAsync (gemv tuning)");
    for (int p = 0; p < GVP_N && !rc; p++) {
        const int segs = gv_segs(gv_cols(b, p), (int)sizeof(T));
        for (int r = 0; r <= GV_TUNE_ROUNDS && !rc; r++) { /* round 0 warms up */
            spin_kernel<<<1, 1, 0, b->stream>>>((long long)khz * GV_TUNE_SPIN_MS);
            cudaError_t e = cudaGetLastError();
            int last = 0;
            for (int sk = 1; sk <= GV_WARPS && sk <= segs && !rc && e == cudaSuccess; sk *= 2) {
                b->gv_sk[p] = sk;
                last = gv_split_index(sk);
                e = cudaEventRecord(ev[2 * last], b->stream);
                for (int i = 0; i < GV_TUNE_REPS && !rc && e == cudaSuccess; i++)
                    rc = layer_product<T>(b, p, i % m->n_layers, 1, 1);
                if (!rc && e == cudaSuccess)
                    e = cudaEventRecord(ev[2 * last + 1], b->stream);
            }
            if (!rc && e == cudaSuccess)
                e = cudaEventSynchronize(ev[2 * last + 1]);
            for (int si = 0; si <= last && !rc && e == cudaSuccess && r > 0; si++) {
                float ms = 0.0f;
                e = cudaEventElapsedTime(&ms, ev[2 * si], ev[2 * si + 1]);
                const float us = 1e3f * ms / GV_TUNE_REPS;
                if (e == cudaSuccess && (b->gv_us[p][si] == 0.0f || us < b->gv_us[p][si]))
                    b->gv_us[p][si] = us;
            }
            if (!rc && e != cudaSuccess)
                rc = cuda_err(b->e, b->elen, e, "gemv tuning");
        }
        int best = 1;
        for (int sk = 2; sk <= GV_WARPS && sk <= segs; sk *= 2)
            if (b->gv_us[p][gv_split_index(sk)] < 0.98f * b->gv_us[p][gv_split_index(best)])
                best = sk;
        b->gv_sk[p] = best;
    }
    for (size_t i = 0; i < sizeof zero / sizeof *zero && !rc; i++)
        if (cudaMemsetAsync(zero[i].p, 0, zero[i].bytes, b->stream) != cudaSuccess)
            rc = cuda_err(b->e, b->elen, cudaGetLastError(), "cudaMemsetAsync (gemv tuning)");
    for (int i = 0; i < 2 * GV_SPLITS; i++)
        if (ev[i])
            cudaEventDestroy(ev[i]);
    if (!rc && b->prof) { /* the profile shows what was measured */
        fprintf(stderr, "cuda gemv splits, timed at load (us a product, * chosen; weights read "
                        "at the chosen one's speed):\n");
        for (int p = 0; p < GVP_N; p++) {
            const double bytes = (double)gv_rows(b, p) * gv_cols(b, p) * sizeof(T);
            fprintf(stderr, "  %-17s %7.1f MB", GVP_NAME[p], bytes / 1e6);
            for (int si = 0; si < GV_SPLITS; si++)
                if (b->gv_us[p][si] > 0.0f)
                    fprintf(stderr, "  split %d %8.2f%s", 1 << si, b->gv_us[p][si],
                            gv_split_index(b->gv_sk[p]) == si ? "*" : " ");
            fprintf(stderr, "  %6.0f GB/s\n",
                    bytes / (1e3 * b->gv_us[p][gv_split_index(b->gv_sk[p])]));
        }
    }
    return rc;
}

/* The timed splits (gv_tune_t), or, when the timing cannot run, split 1 everywhere: slower
 * perhaps, the same bits. A launch refused with programmatic dependent launch is retried without
 * it (as decode_step does); a fault that leaves the device unusable is an error. The range flag
 * is cleared afterwards: the products ran on zeros, not on the model's activations. */
static int gv_tune(cuda_backend *b)
{
    if (!b->gv || b->gv_force)
        return 0;
    for (int attempt = 0;; attempt++) {
        memset(b->gv_us, 0, sizeof b->gv_us);
        const int rc = by_dtype(b, [&](auto t) { return gv_tune_t<decltype(t)>(b); });
        (void)cudaGetLastError();
        const cudaError_t e = cudaStreamSynchronize(b->stream);
        if (e != cudaSuccess)
            return cuda_err(b->e, b->elen, e, "gemv tuning");
        if (!rc)
            break;
        if (attempt == 0 && b->pdl) {
            snprintf(b->pdl_err, sizeof b->pdl_err,
                     "graph, without programmatic dependent launch (refused when timing the "
                     "decode products): %s",
                     b->e);
            b->e[0] = '\0';
            b->pdl = 0;
            continue;
        }
        b->e[0] = '\0';
        for (int p = 0; p < GVP_N; p++)
            b->gv_sk[p] = 1;
        memset(b->gv_us, 0, sizeof b->gv_us);
        break;
    }
    CU(b, cudaMemset(b->d_overflow, 0, sizeof(int)), "cudaMemset");
    return 0;
}

static int gemv_setup(cuda_backend *b)
{
    if (!b->gv)
        return 0;
    return by_dtype(b, [&](auto t) { return gemv_setup_t<decltype(t)>(b); });
}
