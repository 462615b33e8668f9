/* gpu/cuda/backend_diag.cuh - the module's diagnostics for the gpu test and bench-llm (members
 * of cairn__cuda_plugin, gpu/backend_plugin.h): the device's copy bandwidth, and a backend's
 * weight bytes per step, device type and how its decode steps run.
 *
 * A part of backend_cuda.cu's one translation unit (a unity build, gpu/meson.build): included
 * there only, after backend_create.cuh, so it has no include guard and includes nothing itself.
 */

/* ==== diagnostics, for the gpu test and the benchmark
 * ============================================== */

static int cuda_bandwidth(int device, double *bytes_per_s, char *name, size_t name_len, char *err,
                          size_t errlen)
{
    *bytes_per_s = 0;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= device || device < 0) {
        (void)cudaGetLastError();
        return host.errf(err, errlen, CAIRN_ENODEVICE, "no CUDA device: %s",
                         e != cudaSuccess ? cudaGetErrorString(e) : "none at that index");
    }
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(device)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess)
        return cuda_err(err, errlen, e, "device query");
    if (name && name_len)
        snprintf(name, name_len, "%s", prop.name);
    /* 2 x 2 GiB: far beyond any L2, so every byte crosses HBM (read once, written once) */
    const size_t n = (size_t)2 << 30;
    void *a = NULL, *c = NULL;
    cudaEvent_t t0 = NULL, t1 = NULL;
    float best = 0.0f;
    int rc = 0;
    if ((e = cudaMalloc(&a, n)) != cudaSuccess || (e = cudaMalloc(&c, n)) != cudaSuccess) {
        rc = e == cudaErrorMemoryAllocation
                 ? host.errf(err, errlen, CAIRN_ENOMEM,
                             "out of device memory allocating 2 x %zu bytes", n)
                 : cuda_err(err, errlen, e, "cudaMalloc");
        goto out;
    }
    if ((e = cudaMemset(a, 1, n)) != cudaSuccess || (e = cudaMemset(c, 2, n)) != cudaSuccess ||
        (e = cudaEventCreate(&t0)) != cudaSuccess || (e = cudaEventCreate(&t1)) != cudaSuccess) {
        rc = cuda_err(err, errlen, e, "bandwidth setup");
        goto out;
    }
    for (int rep = 0; rep < 12; rep++) { /* the first two are warm-up */
        float ms = 0.0f;
        if ((e = cudaEventRecord(t0, 0)) != cudaSuccess ||
            (e = cudaMemcpyAsync(c, a, n, cudaMemcpyDeviceToDevice, 0)) != cudaSuccess ||
            (e = cudaEventRecord(t1, 0)) != cudaSuccess ||
            (e = cudaEventSynchronize(t1)) != cudaSuccess ||
            (e = cudaEventElapsedTime(&ms, t0, t1)) != cudaSuccess) {
            rc = cuda_err(err, errlen, e, "device-to-device copy");
            goto out;
        }
        if (rep >= 2 && ms > 0.0f && (best == 0.0f || ms < best))
            best = ms;
    }
    *bytes_per_s = best > 0.0f ? 2.0 * (double)n / ((double)best * 1e-3) : 0.0;
out:
    if (t0)
        cudaEventDestroy(t0);
    if (t1)
        cudaEventDestroy(t1);
    cudaFree(a);
    cudaFree(c);
    (void)cudaGetLastError();
    return rc;
}

static uint64_t cuda_weight_bytes(const cairn__backend *b)
{
    return b && b->ops == &cairn__backend_cuda_ops ? ((const cuda_backend *)b)->weight_bytes : 0;
}

static const char *cuda_dtype(const cairn__backend *b)
{
    return b && b->ops == &cairn__backend_cuda_ops ? DT_NAME[((const cuda_backend *)b)->dt]
                                                   : "none";
}

static const char *cuda_graph_status(const cairn__backend *bb)
{
    if (!bb || bb->ops != &cairn__backend_cuda_ops)
        return "none";
    const cuda_backend *b = (const cuda_backend *)bb;
    if (b->no_graph)
        return b->graph_err;
    if (b->pdl_err[0])
        return b->pdl_err;
    for (int k = 0; k < STEP_KINDS; k++)
        if (b->graphs[k])
            return "graph";
    return "not yet";
}
