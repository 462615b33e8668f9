/* bench/store/bench.h - what the checkpoint benchmark's files share: timing, samples, and the
 * SQLite peer store that cairn's LMDB store is measured against in the same run. */
#ifndef CAIRN_BENCH_STORE_H
#define CAIRN_BENCH_STORE_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ timing and samples */

int64_t bench_now_ns(void); /* CLOCK_MONOTONIC */

/* A growing list of latencies in nanoseconds. */
typedef struct bench_samples {
    double *v;
    size_t n, cap;
    int sorted;
} bench_samples;

int bench_samples_add(bench_samples *s, double ns);
/* Nearest-rank percentile (p in 0..100) in nanoseconds; 0 when empty. Sorts in place. */
double bench_samples_pct(bench_samples *s, double p);
void bench_samples_free(bench_samples *s);

/* ------------------------------------------------------------------ the SQLite peer */

/* An SQLite store of cairn's schema (tasks, steps, progress, idempotency, audit, a status/due
 * index), in WAL mode, driven by prepared statements in one transaction per operation, the way
 * a careful author would write the same checkpoint store on SQLite. */
typedef struct bench_peer bench_peer;

/* Opens (creating) `dir`/store.db with journal_mode=WAL and synchronous=FULL (`full`) or
 * NORMAL. NULL on failure with the reason in err. */
bench_peer *bench_peer_open(const char *dir, int full, char *err, size_t cap);
void bench_peer_close(bench_peer *p);
const char *bench_peer_errmsg(const bench_peer *p);

/* Runs one fresh task the way cairn's runner does, as separate transactions: admission
 * (idempotency reservation + task row + audit), acquire (lease + attempt + audit), then for each
 * of `n_steps` steps a resume read (task row, own step row, the previous step's output, progress)
 * and a step commit, and finally the succeeded transition. Step i outputs `out` (len bytes) and
 * depends on step i-1. 0 or -1 (see bench_peer_errmsg). */
int bench_peer_run_task(bench_peer *p, const char *id, const void *input, size_t input_len,
                        uint32_t n_steps, const void *out, size_t len);

/* Creates a task already running under lease `token` (setup for the commit loop; untimed). */
int bench_peer_create_running(bench_peer *p, const char *id, const void *input, size_t input_len,
                              uint64_t token);

/* One step commit: in one transaction (a) read the task row and check the lease token, (b) upsert
 * the step row with its output, (c) renew the lease on the task row (moving its due-index entry),
 * (d) append an audit row. Exactly the work of cairn's commit_txn for a finished step. */
int bench_peer_commit_step(bench_peer *p, const char *task, const char *step, uint64_t token,
                           const void *out, size_t len);

/* The read a resume does before step `step` (dependency `dep` or NULL), in one read
 * transaction: the task row, the step's own row, the dependency's output (copied and unpacked,
 * as a step receives it) and progress. `copy_input` also copies the task input, which the runner
 * does once per run, before its first step. */
int bench_peer_load_step(bench_peer *p, const char *task, const char *step, const char *dep,
                         int copy_input);

#endif
