/* gpu/cpu/threadpool.h - a persistent thread pool for the CPU kernels' parallel loops (internal to
 * the CPU backend, gpu/cpu/).
 *
 * n threads in all: the caller of cairn__pool_for works as thread 0, n-1 workers wait for jobs
 * (spinning briefly, then sleeping on a condition variable, so a decode step that issues ~100
 * small jobs does not pay a wake-up for each while an idle pool costs no CPU).
 *
 * Errors are the negative CAIRN_E* codes of include/cairn_errors.h.
 */
#ifndef CAIRN_GPU_THREADPOOL_H
#define CAIRN_GPU_THREADPOOL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cairn__pool cairn__pool;
typedef void (*cairn__pool_fn)(void *arg, int ith, int nth);
/* One share of a parallel loop: items [i0, i1), run by thread ith (0..n_threads-1; for
 * per-thread scratch). */
typedef void (*cairn__range_fn)(void *arg, int64_t i0, int64_t i1, int ith);

/* n_threads <= 0 means the number of online CPUs. Returns 0, CAIRN_ENOMEM, CAIRN_EINVAL. */
int cairn__pool_new(int n_threads, cairn__pool **out);
void cairn__pool_free(cairn__pool *p); /* NULL is a no-op; joins the workers */
int cairn__pool_size(const cairn__pool *p);
/* Parallel for over items 0..n-1 in chunks (chunk <= 0: about 8 per thread) that the threads
 * claim from a shared counter; returns when all are done. The caller works too and never waits
 * for a worker that has not started (one whose core another process holds): it just claims
 * more chunks itself. Which thread runs a chunk varies from call to call, so fn must give the
 * same result whichever does. Not reentrant: one loop at a time per pool, from one thread. */
void cairn__pool_for(cairn__pool *p, int64_t n, int64_t chunk, cairn__range_fn fn, void *arg);
/* The pool's own job, under cairn__pool_for: fn(arg, ith, nth) runs on the caller (ith 0) and
 * on each worker that joins before the caller's call returns (nth = cairn__pool_size). fn must
 * take its work from shared state (atomic counters) so that the caller's call alone can do all
 * of it; late workers simply find nothing left. One indirection less than cairn__pool_for for a
 * caller that splits its own work (the decode products). Same rules: one job at a time. */
void cairn__pool_run(cairn__pool *p, cairn__pool_fn fn, void *arg);

#ifdef __cplusplus
}
#endif

#endif
