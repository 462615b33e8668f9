/* bench/llm/bench_matvec.c - the decode kernels alone: matrix-vector products at the shapes of
 * a llama layer, against the bandwidth of reading memory, measured in the same run.
 *
 * bench-llm sees a whole token; this looks inside it. Decode is ~60 pool dispatches per token of
 * products of 0.3-1.8 MB each (110M shape, Q4_0), so three numbers decide whether it reaches
 * the roofline: how fast a kernel streams weights that are out of cache (GB/s, the matrices are
 * cycled through a ring far larger than the last-level cache, as a real decode does), how fast
 * it runs on weights already in cache (its arithmetic alone), and what one dispatch of the pool
 * costs with no work in it. The peers: a threaded read of the same ring (sum of all its bytes,
 * the most a kernel can do) and the threaded memcpy bench-llm uses for its roofline.
 *
 *   bench-matvec [--threads N] [--types F32,Q8_0,Q4_0] [--dim 768] [--ff 2048] [--isa LEVEL]
 *                [--prompt N]
 *
 * --isa caps the kernels' instruction set (scalar, avx2, avx512...), as cairn__kernels_set_isa.
 * --prompt N times the prompt's products instead: cairn__matmul of N tokens at each shape (the
 * path cairn__matmul_path names), in GFLOP/s, against OpenBLAS's sgemm on the same weights as
 * floats (the peer; its core is OpenBLAS's choice or OPENBLAS_CORETYPE), each the best of its
 * runs in half a second (at least 5): a shared machine's other users take a core for
 * milliseconds at a time.
 * Not a test: it never fails on a time.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/gguf.h"
#include "bench/llm/bench_util.h"
#include "gpu/cpu/blas.h"
#include "gpu/cpu/kernels_cpu.h"
#include "gpu/quant.h"
#include "gpu/cpu/threadpool.h"

#define RING_BYTES ((size_t)256 << 20) /* far beyond any L3 */

typedef struct {
    const uint8_t *src;
    char *dst;
    size_t n;
    double sums[64];
} rd_job;

/* 1 MiB pieces [i0, i1): sum of 8-byte words (reads only; the sum keeps it from being elided) */
static void read_range(void *arg, int64_t i0, int64_t i1, int ith)
{
    rd_job *j = arg;
    const size_t a = (size_t)i0 << 20, b = (size_t)i1 << 20 < j->n ? (size_t)i1 << 20 : j->n;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t k = a; k + 32 <= b; k += 32) {
        uint64_t v[4];
        memcpy(v, j->src + k, 32);
        s0 += v[0], s1 += v[1], s2 += v[2], s3 += v[3];
    }
    j->sums[ith & 63] += (double)(s0 ^ s1 ^ s2 ^ s3);
}

static void copy_range(void *arg, int64_t i0, int64_t i1, int ith)
{
    rd_job *j = arg;
    (void)ith;
    const size_t a = (size_t)i0 << 20, b = (size_t)i1 << 20 < j->n ? (size_t)i1 << 20 : j->n;
    memcpy(j->dst + a, j->src + a, b - a);
}

static void empty_range(void *arg, int64_t i0, int64_t i1, int ith)
{
    (void)arg, (void)i0, (void)i1, (void)ith;
}

/* bytes/s: best of 5 threaded passes; copy counts read + write as bench-llm does */
static double bandwidth(cairn__pool *p, uint8_t *a, char *b, size_t n, int copy)
{
    rd_job j;
    memset(&j, 0, sizeof j);
    j.src = a, j.dst = b, j.n = n;
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t = now_s();
        cairn__pool_for(p, (int64_t)(n >> 20), 0, copy ? copy_range : read_range, &j);
        t = now_s() - t;
        const double bw = (copy ? 2.0 : 1.0) * (double)n / t;
        best = bw > best ? bw : best;
    }
    return best;
}

/* One shape: a ring of copies of W (rows, cols) filling RING_BYTES; prints out-of-cache and
 * in-cache speed of cairn__matvec. */
/* cols weights in [-0.5, 0.5) from the xorshift state *r */
static void random_row(uint64_t *r, float *dst, int64_t cols)
{
    for (int64_t c = 0; c < cols; c++) {
        *r ^= *r << 13, *r ^= *r >> 7, *r ^= *r << 17;
        dst[c] = (float)((double)(*r >> 11) * 0x1.0p-53 - 0.5);
    }
}

static int bench_shape(cairn__pool *p, uint32_t ty, int64_t rows, int64_t cols, uint8_t *ring,
                       double read_bw)
{
    if (cols % (int64_t)cairn__quant_block_elems(ty) != 0) {
        printf("%-5s %5lld x %-5lld  (cols not a multiple of the block size; skipped)\n",
               cairn__ggml_type_name(ty), (long long)rows, (long long)cols);
        return 0;
    }
    const size_t rb = (size_t)(cols / (int64_t)cairn__quant_block_elems(ty) *
                               (int64_t)cairn__quant_block_bytes(ty));
    const size_t mb = rb * (size_t)rows;
    size_t copies = RING_BYTES / mb;
    if (copies < 2) {
        printf("%-5s %5lld x %-5lld  (larger than the ring; skipped)\n", cairn__ggml_type_name(ty),
               (long long)rows, (long long)cols);
        return 0;
    }
    float *wf = malloc((size_t)cols * sizeof *wf), *x = malloc((size_t)cols * sizeof *x);
    float *out = malloc((size_t)rows * sizeof *out);
    void *scratch = malloc(cairn__matvec_scratch_bytes(cols));
    if (!wf || !x || !out || !scratch) {
        free(wf), free(x), free(out), free(scratch);
        return -1;
    }
    uint64_t r = 0x9E3779B97F4A7C15ull;
    for (int64_t i = 0; i < rows; i++) {
        random_row(&r, wf, cols);
        cairn__quant_row(ty, wf, ring + (size_t)i * rb, (uint64_t)cols);
    }
    for (size_t k = 1; k < copies; k++)
        memcpy(ring + k * mb, ring, mb);
    for (int64_t c = 0; c < cols; c++)
        x[c] = sinf((float)c * 0.37f);

    /* out of cache: walk the ring (each copy read once per lap), best lap of 3 */
    double best_cold = 1e30;
    for (int lap = 0; lap < 3; lap++) {
        double t = now_s();
        for (size_t k = 0; k < copies; k++) {
            cairn__mat W = {ty, rows, cols, rb, ring + k * mb};
            cairn__matvec(p, &W, x, out, scratch);
        }
        t = (now_s() - t) / (double)copies;
        best_cold = t < best_cold ? t : best_cold;
    }
    /* in cache: the same copy again and again */
    cairn__mat W = {ty, rows, cols, rb, ring};
    const int reps = (int)(64e6 / (double)mb) + 10;
    double best_hot = 1e30;
    for (int lap = 0; lap < 3; lap++) {
        double t = now_s();
        for (int k = 0; k < reps; k++)
            cairn__matvec(p, &W, x, out, scratch);
        t = (now_s() - t) / reps;
        best_hot = t < best_hot ? t : best_hot;
    }
    printf("%-5s %5lld x %-5lld %8.0f %9.2f %9.1f %7.0f%% %9.2f %9.1f\n", cairn__ggml_type_name(ty),
           (long long)rows, (long long)cols, (double)mb / 1e3, best_cold * 1e6,
           (double)mb / best_cold / 1e9, 100.0 * (double)mb / best_cold / read_bw, best_hot * 1e6,
           (double)mb / best_hot / 1e9);
    fflush(stdout);
    free(wf), free(x), free(out), free(scratch);
    return 0;
}

/* the prompt's product W (rows, cols) @ X (n, cols)^T, cairn__matmul against sgemm on the same
 * weights in f32; each the best of half a second's runs */
static int bench_prompt(cairn__pool *p, uint32_t ty, int64_t rows, int64_t cols, int64_t n)
{
    if (cols % (int64_t)cairn__quant_block_elems(ty) != 0)
        return 0;
    const size_t rb = (size_t)(cols / (int64_t)cairn__quant_block_elems(ty) *
                               (int64_t)cairn__quant_block_bytes(ty));
    uint8_t *w = malloc(rb * (size_t)rows);
    float *wf = malloc((size_t)rows * (size_t)cols * sizeof *wf);
    float *x = malloc((size_t)n * (size_t)cols * sizeof *x);
    float *out = malloc((size_t)n * (size_t)rows * sizeof *out);
    float *ref = malloc((size_t)n * (size_t)rows * sizeof *ref);
    cairn__mat W = {ty, rows, cols, rb, NULL};
    float *scratch = malloc(cairn__matmul_scratch_bytes(&W));
    if (!w || !wf || !x || !out || !ref || !scratch) {
        free(w), free(wf), free(x), free(out), free(ref), free(scratch);
        return -1;
    }
    uint64_t r = 0x9E3779B97F4A7C15ull;
    for (int64_t i = 0; i < rows; i++) {
        float *row = wf + (size_t)i * (size_t)cols;
        random_row(&r, row, cols);
        cairn__quant_row(ty, row, w + (size_t)i * rb, (uint64_t)cols);
        cairn__dequant_row(ty, w + (size_t)i * rb, row, (uint64_t)cols); /* the same weights */
    }
    for (int64_t i = 0; i < n * cols; i++)
        x[i] = sinf((float)i * 0.37f);
    W.data = w;
    const int blas = cairn__blas_on();
    /* each side's reps after a pause: OpenBLAS's threads, and the pool's, spin for a while after
     * their work, and a product timed while the other side's do shares the cores with them
     * (half speed on 2 cores) */
    usleep(300 * 1000);
    double best = 1e30, best_peer = 1e30, t0 = now_s();
    for (int rep = 0; rep < 5 || now_s() - t0 < 0.5; rep++) {
        double t = now_s();
        cairn__matmul(p, &W, x, n, out, scratch);
        t = now_s() - t;
        best = t < best ? t : best;
    }
    if (blas)
        usleep(300 * 1000);
    t0 = now_s();
    for (int rep = 0; blas && (rep < 5 || now_s() - t0 < 0.5); rep++) {
        double t = now_s();
        cairn__sgemm(1, (int)n, (int)rows, (int)cols, 1.0f, x, (int)cols, wf, (int)cols, 0.0f, ref,
                     (int)rows);
        t = now_s() - t;
        best_peer = t < best_peer ? t : best_peer;
    }
    double err = 0; /* the largest difference from sgemm's result, relative to its scale */
    for (int64_t i = 0; blas && i < n * rows; i++) {
        const double d = fabs((double)out[i] - (double)ref[i]) / (1.0 + fabs((double)ref[i]));
        err = d > err ? d : err;
    }
    const double flop = 2.0 * (double)rows * (double)cols * (double)n;
    printf("%-5s %5lld x %-5lld %-12s %9.1f", cairn__ggml_type_name(ty), (long long)rows,
           (long long)cols, cairn__matmul_path(ty), flop / best / 1e9);
    if (blas)
        printf(" %9.1f %7.2fx %9.1e\n", flop / best_peer / 1e9, best_peer / best, err);
    else
        printf("  (no OpenBLAS: cairn alone)\n");
    fflush(stdout);
    free(w), free(wf), free(x), free(out), free(ref), free(scratch);
    return 0;
}

/* every type of the list at a layer's shapes (and the logits' where not --prompt), then the pool
 * freed; the exit status */
static int run_shapes(cairn__pool *p, char *types, int64_t dim, int64_t ff, int64_t prompt,
                      uint8_t *ring, double read_bw)
{
    int rc = 0;
    char *save = NULL;
    for (char *tn = strtok_r(types, ",", &save); tn && !rc; tn = strtok_r(NULL, ",", &save)) {
        uint32_t ty;
        if (parse_type(tn, &ty) != 0) {
            fprintf(stderr, "bench-matvec: unknown type '%s'\n", tn);
            rc = 64;
            break;
        }
        const int64_t shapes[4][2] = {{dim, dim}, {ff, dim}, {dim, ff}, {32000, dim}};
        for (int s = 0; s < (prompt > 0 ? 3 : 4) && !rc; s++)
            if ((prompt > 0 ? bench_prompt(p, ty, shapes[s][0], shapes[s][1], prompt)
                            : bench_shape(p, ty, shapes[s][0], shapes[s][1], ring, read_bw)) != 0) {
                fprintf(stderr, "bench-matvec: out of memory\n");
                rc = 70;
            }
    }
    cairn__pool_free(p);
    return rc;
}

int main(int argc, char **argv)
{
    int threads = 2;
    int64_t dim = 768, ff = 2048;
    char types[256] = "F32,Q8_0,Q4_0";
    const char *isa = NULL;
    int64_t prompt = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--types") == 0 && i + 1 < argc)
            snprintf(types, sizeof types, "%s", argv[++i]);
        else if (strcmp(argv[i], "--dim") == 0 && i + 1 < argc)
            dim = atoll(argv[++i]);
        else if (strcmp(argv[i], "--ff") == 0 && i + 1 < argc)
            ff = atoll(argv[++i]);
        else if (strcmp(argv[i], "--isa") == 0 && i + 1 < argc)
            isa = argv[++i];
        else if (strcmp(argv[i], "--prompt") == 0 && i + 1 < argc)
            prompt = atoll(argv[++i]);
        else {
            fprintf(stderr, "usage: bench-matvec [--threads N] [--types F32,Q8_0,Q4_0] [--dim N] "
                            "[--ff N] [--isa scalar|avx2|avx512] [--prompt N]\n");
            return 64;
        }
    }
    if (dim < 256 || ff < 256 || dim % 32 || ff % 32) {
        fprintf(stderr, "bench-matvec: --dim and --ff must be multiples of 32, at least 256\n");
        return 64;
    }
    if (isa && cairn__kernels_set_isa(isa) != 0) {
        fprintf(stderr, "bench-matvec: this CPU or build has no '%s' kernels\n", isa);
        return 64;
    }
    if (prompt < 0 || prompt > 4096) {
        fprintf(stderr, "bench-matvec: --prompt must be 1 to 4096 tokens\n");
        return 64;
    }
    /* OpenBLAS (the prompt's peer) loaded before the pool's threads start (blas.h) */
    const int blas = prompt > 0 && cairn__blas_on();
    if (blas)
        cairn__blas_set_threads(threads);
    cairn__pool *p = NULL;
    if (cairn__pool_new(threads, &p) != 0) {
        fprintf(stderr, "bench-matvec: cannot start threads\n");
        return 70;
    }
    if (prompt > 0) {
        printf("bench-matvec: %d threads, %s kernels, prompt of %lld tokens; peer: %s\n",
               cairn__pool_size(p), cairn__kernels_isa(), (long long)prompt,
               blas ? cairn__blas_desc() : "none");
        printf("%-5s %-13s %-12s %9s %9s %8s %9s\n", "type", "rows x cols", "path", "GFLOP/s",
               "sgemm", "ratio", "rel diff");
        return run_shapes(p, types, dim, ff, prompt, NULL, 0);
    }
    uint8_t *ring = malloc(RING_BYTES);
    char *dst = malloc(RING_BYTES);
    if (!ring || !dst) {
        fprintf(stderr, "bench-matvec: out of memory\n");
        return 70;
    }
    memset(ring, 1, RING_BYTES);
    memset(dst, 2, RING_BYTES);
    const double rd = bandwidth(p, ring, dst, RING_BYTES, 0);
    const double cp = bandwidth(p, ring, dst, RING_BYTES, 1);
    free(dst);

    /* dispatch cost: pool_for over 2 chunks of nothing, best of 5 batches */
    double disp = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        const int N = 20000;
        double t = now_s();
        for (int k = 0; k < N; k++)
            cairn__pool_for(p, 2 * cairn__pool_size(p), 1, empty_range, NULL);
        t = (now_s() - t) / N;
        disp = t < disp ? t : disp;
    }
    /* what a product costs beyond its arithmetic: a small in-cache one on the calling thread
     * alone, then on the pool (wake the workers, split, wait for the last share) */
    double small_inline = 0, small_pool = 0;
    {
        const int64_t rows = 128, cols = dim;
        const size_t rb = (size_t)cols / 32 * 18;
        float *wf = malloc((size_t)cols * sizeof *wf), *x = malloc((size_t)cols * sizeof *x);
        float *out = malloc((size_t)rows * sizeof *out);
        void *scratch = malloc(cairn__matvec_scratch_bytes(cols));
        if (!wf || !x || !out || !scratch) {
            fprintf(stderr, "bench-matvec: out of memory\n");
            return 70;
        }
        for (int64_t c = 0; c < cols; c++)
            wf[c] = x[c] = sinf((float)c);
        for (int64_t r = 0; r < rows; r++)
            cairn__quant_row(CAIRN__GGML_Q4_0, wf, ring + (size_t)r * rb, (uint64_t)cols);
        cairn__mat W = {CAIRN__GGML_Q4_0, rows, cols, rb, ring};
        for (int pass = 0; pass < 2; pass++) {
            double best = 1e30;
            for (int rep = 0; rep < 5; rep++) {
                const int N = 2000;
                double t = now_s();
                for (int k = 0; k < N; k++)
                    cairn__matvec(pass ? p : NULL, &W, x, out, scratch);
                t = (now_s() - t) / N;
                best = t < best ? t : best;
            }
            *(pass ? &small_pool : &small_inline) = best;
        }
        free(wf), free(x), free(out), free(scratch);
    }
    printf("bench-matvec: %d threads, %s kernels; read %.2f GB/s, memcpy %.2f GB/s (read+write); "
           "empty dispatch %.2f us; a %lld x 128 Q4_0 product in cache: %.2f us on the caller "
           "alone, %.2f us on the pool\n\n",
           cairn__pool_size(p), cairn__kernels_isa(), rd / 1e9, cp / 1e9, disp * 1e6,
           (long long)dim, small_inline * 1e6, small_pool * 1e6);
    printf("%-5s %-13s %8s %9s %9s %8s %9s %9s\n", "type", "rows x cols", "KB", "cold us",
           "cold GB/s", "of read", "hot us", "hot GB/s");
    const int rc = run_shapes(p, types, dim, ff, 0, ring, rd);
    free(ring);
    return rc;
}
