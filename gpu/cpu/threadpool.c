/* gpu/cpu/threadpool.c - the persistent thread pool the CPU kernels run their loops on.
 *
 * A decode step issues ~100 small parallel loops (one per matrix-vector product), each a few
 * tens of microseconds, so the pool is built for latency: workers stay alive between jobs, spin
 * briefly on a generation counter before sleeping on a condition variable, and a job is
 * published by bumping that counter (under the mutex, so a worker about to sleep cannot miss
 * it). An idle pool sleeps and costs no CPU.
 *
 * The second idea: the caller never waits for a worker that has not started. Work is claimed in
 * chunks from a shared counter, the caller claims too, and a job is closed as soon as the
 * caller's own share returns (every chunk is then claimed); afterwards only workers already
 * inside are waited for. A worker whose core another process holds simply misses the job, so a
 * busy machine costs throughput, never a scheduler time slice per product.
 */
#include "gpu/cpu/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CAIRN__X86 1
#endif

#include "cairn_errors.h"
/* Pause iterations before a worker sleeps (~10-50 us): long enough to bridge the gaps between
 * the products of one decode step, short enough not to steal a shared core from other processes
 * for long. */
#define POOL_SPIN 4000

/* Laid out by who writes what: a worker starting a job reads one line (gen, open, fn, arg, all
 * written by the caller), and the counter the workers write (active) has a line of its own. When
 * the two vCPUs sit far apart (a round trip between them measured 290 ns on this VM at times,
 * against ~120 at others), every dependent cache miss on a worker's way into a job costs that
 * much again. */
struct cairn__pool {
    _Alignas(64) _Atomic uint64_t gen; /* bumped once per job; workers run when it moves */
    _Atomic uint64_t open; /* gen of the job workers may still join, 0 once it is closed */
    cairn__pool_fn fn;     /* published by the release store of gen */
    void *arg;
    _Atomic int stop;
    _Alignas(64) _Atomic int active; /* workers inside the current job */
    _Alignas(64) int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

typedef struct {
    cairn__pool *p;
    int ith;
} pool_worker_arg;

static void cpu_relax(void)
{
#ifdef CAIRN__X86
    _mm_pause();
#endif
}

static void *pool_worker(void *v)
{
    pool_worker_arg wa = *(pool_worker_arg *)v;
    free(v);
    cairn__pool *p = wa.p;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
            if (++spins < POOL_SPIN) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen)
                pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
            break;
        }
        seen = g;
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        /* join only while the job is open: the caller closes it once every chunk is claimed,
         * and then waits only for workers already inside (seq_cst on both sides: either the
         * caller sees our increment or we see its close) */
        atomic_fetch_add(&p->active, 1);
        if (atomic_load(&p->open) == g)
            p->fn(p->arg, wa.ith, p->n);
        atomic_fetch_sub(&p->active, 1);
    }
}

int cairn__pool_new(int n_threads, cairn__pool **out)
{
    *out = NULL;
    if (n_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (int)c : 1;
    }
    if (n_threads > 1024)
        return CAIRN_EINVAL;
    cairn__pool *p = aligned_alloc(64, sizeof *p); /* sizeof is a multiple of the alignment */
    if (!p)
        return CAIRN_ENOMEM;
    memset(p, 0, sizeof *p);
    p->n = n_threads;
    atomic_init(&p->gen, 0);
    atomic_init(&p->open, 0);
    atomic_init(&p->active, 0);
    atomic_init(&p->stop, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) {
        free(p);
        return CAIRN_ENOMEM;
    }
    for (int i = 1; i < n_threads; i++) {
        pool_worker_arg *wa = malloc(sizeof *wa);
        if (wa) {
            wa->p = p;
            wa->ith = i;
        }
        if (!wa || pthread_create(&p->threads[i], NULL, pool_worker, wa) != 0) {
            free(wa);
            p->n = i; /* only the started workers are joined */
            cairn__pool_free(p);
            return CAIRN_ENOMEM;
        }
    }
    *out = p;
    return 0;
}

void cairn__pool_free(cairn__pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->stop, 1, memory_order_release);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
}

int cairn__pool_size(const cairn__pool *p) { return p ? p->n : 1; }

/* Runs fn(arg, ith, nth) on the caller and on whichever workers join before the caller has
 * finished its own call. fn must therefore claim its work from shared state (as cairn__pool_for
 * does): the caller's call alone must be able to do all of it. This is what keeps a decode step
 * from stalling for a scheduler time slice whenever another process holds a worker's core. */
void cairn__pool_run(cairn__pool *p, cairn__pool_fn fn, void *arg)
{
    if (!p || p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    /* bump under the mutex so a worker between its check and its wait cannot miss it */
    pthread_mutex_lock(&p->mu);
    const uint64_t g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    atomic_store(&p->open, g);
    atomic_store_explicit(&p->gen, g, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->n);
    atomic_store(&p->open, 0);
    int spins = 0;
    while (atomic_load(&p->active) != 0) {
        if (++spins < POOL_SPIN)
            cpu_relax();
        else
            sched_yield(); /* a worker inside the job was descheduled: give it the core */
    }
}

typedef struct {
    cairn__range_fn fn;
    void *arg;
    int64_t n, chunk;
    _Atomic int64_t next;
} for_job;

static void for_worker(void *arg, int ith, int nth)
{
    for_job *j = arg;
    (void)nth;
    for (;;) {
        const int64_t i0 = atomic_fetch_add_explicit(&j->next, j->chunk, memory_order_relaxed);
        if (i0 >= j->n)
            return;
        j->fn(j->arg, i0, i0 + j->chunk < j->n ? i0 + j->chunk : j->n, ith);
    }
}

void cairn__pool_for(cairn__pool *p, int64_t n, int64_t chunk, cairn__range_fn fn, void *arg)
{
    if (n <= 0)
        return;
    if (chunk <= 0) { /* ~8 chunks per thread: claiming costs nothing, and shares even out */
        chunk = n / (8 * (int64_t)cairn__pool_size(p));
        chunk = chunk < 1 ? 1 : chunk;
    }
    if (chunk >= n) {
        fn(arg, 0, n, 0);
        return;
    }
    for_job j = {fn, arg, n, chunk, 0};
    atomic_init(&j.next, 0);
    cairn__pool_run(p, for_worker, &j);
}
