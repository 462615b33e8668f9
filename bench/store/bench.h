/* bench/store/bench.h - what the checkpoint benchmark's files share: timing and samples, the two
 * stores under measurement (cairn's, through its runner and its store internals, and the SQLite
 * peer written for the comparison), and the results the report prints. */
#ifndef CAIRN_BENCH_STORE_H
#define CAIRN_BENCH_STORE_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "cairn.h"

enum {
    BENCH_STEPS = 10,       /* steps per task in the throughput runs */
    BENCH_RESUME_STEPS = 4, /* steps of the task whose resume read is measured */
    BENCH_LEASE_MS = 60000  /* the runner's default lease */
};

/* Targets from the project's performance goals (see bench/README.md). */
#define BENCH_TARGET_POWER_LOSS 1.0   /* cairn sync steps/s / SQLite FULL steps/s */
#define BENCH_TARGET_CRASH 10.0       /* cairn nosync steps/s / SQLite NORMAL steps/s */
#define BENCH_TARGET_SAME_PROMISE 1.0 /* cairn sync / SQLite NORMAL flushed at each task's end */
#define BENCH_TARGET_RESUME_US 2.0    /* p50 of one step's resume read */
#define BENCH_TARGET_RESUME_X 5.0     /* SQLite's p50 resume read / cairn's */
#define BENCH_TARGET_HIT_MS 5.0       /* p50 of `cairn run` on a succeeded task */
#define BENCH_TARGET_SIZE 1.0         /* SQLite bytes / cairn bytes for the same tasks */

/* ------------------------------------------------------------------ timing and samples */

int64_t bench_now_ns(void); /* CLOCK_MONOTONIC */
/* Removes a scratch tree. */
void bench_rm_tree(const char *path);
/* Flushes what earlier work left dirty on the filesystem of `path` (and its deletes), untimed:
 * otherwise that writeback competes with the next measurement's fsyncs and the order of runs
 * decides the numbers. */
void bench_sync_fs(const char *path);

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

/* ------------------------------------------------------------------ payloads */

/* A msgpack bin object of exactly `size` bytes (header included, size >= 3) with random
 * contents, so neither store gains from compressible data. malloc'd. */
void *bench_output(size_t size);
/* Task n's input: {"text": "...", "n": n} as JSON (for cairn's runner, which parses and hashes
 * it) or as msgpack (what both stores keep). */
int bench_input_json(uint32_t n, char *buf, size_t cap);
void bench_input_msgpack(uint32_t n, msgpack_sbuffer *sb);

/* ------------------------------------------------------------------ cairn (cairn_side.c) */

/* A cairn store with a runner and a graph s0 -> s1 -> ... of trivial compute steps, each
 * outputting the same blob. */
typedef struct bench_cairn bench_cairn;

/* `every_durable` marks the steps expensive, so that every step commit is DURABLE. NULL on
 * failure, with the reason in err. */
bench_cairn *bench_cairn_open(const char *dir, cairn_durability d, int every_durable,
                              uint32_t n_steps, size_t out_size, char *err, size_t cap);
void bench_cairn_close(bench_cairn *c);
/* The bytes the store's pages in use take (cairn_store_stats' map_used). */
uint64_t bench_cairn_bytes(bench_cairn *c);
/* Each database's pages and records, into out[0..cap): how many were filled (0 on failure). */
struct bench_db_pages;
int bench_cairn_db_pages(bench_cairn *c, struct bench_db_pages *out, int cap);
const char *bench_cairn_errmsg(const bench_cairn *c);
/* Runs task `id` (input n) through cairn_runner_run: a fresh task runs all its steps, a
 * succeeded one is an idempotent hit. 0 or a CAIRN_E* code. */
int bench_cairn_run_task(bench_cairn *c, const char *id, uint32_t n);
/* Setup for the commit loop (untimed): tasks "<prefix><first>".. running under a lease. */
int bench_cairn_create_running(bench_cairn *c, const char *prefix, uint32_t first, uint32_t count);
/* One step commit, doing exactly what runner.c's commit_txn does for a finished step. `durable`
 * is CAIRN__RELAXED (what the runner uses for compute steps) or CAIRN__DURABLE. */
int bench_cairn_commit_step(bench_cairn *c, const char *task, const char *step, int durable);
/* The read a resume does before `step` (dependency `dep` or NULL): what runner.c's load_txn
 * does. `copy_input` also copies the task input (the runner does it before the first step). */
int bench_cairn_load_step(bench_cairn *c, const char *task, const char *step, const char *dep,
                          int copy_input);
/* The same read on any store whose tasks ran through a runner; the reason for a failure goes to
 * err. */
int bench_store_load_step(cairn_store *s, const char *task, const char *step, const char *dep,
                          int copy_input, char *err, size_t cap);

/* ------------------------------------------------------------------ scale (scale.c) */

/* Fills one nosync store under `dir` to `max` (>= 10000: main checks) tasks in process and prints,
 * at 10k, 100k and 1M tasks (those below max) and at max, what each operation costs and how it
 * grew. 0, or -1 with the reason on stderr. */
int bench_scale(const char *dir, uint32_t max, int verbose);

/* ------------------------------------------------------------------ SQLite (sqlite_peer.c) */

/* An SQLite store of cairn's schema (tasks, steps, progress, idempotency, audit, a status/due
 * index), in WAL mode, driven by prepared statements in one transaction per operation. */
typedef struct bench_peer bench_peer;

/* How the SQLite peer flushes: NORMAL (never at a commit: process-crash safe), FULL (the WAL at
 * every commit), or SPLIT: NORMAL, with FULL for the commit that finishes a task, which flushes
 * the WAL and so every commit before it - the promise cairn's sync mode makes (relaxed steps,
 * a durable end). */
typedef enum { PEER_NORMAL = 0, PEER_FULL = 1, PEER_SPLIT = 2 } bench_peer_sync;

/* Opens (creating) `dir`/store.db with journal_mode=WAL and the given flushing; steps output a
 * blob of out_size bytes. NULL on failure with the reason in err. */
bench_peer *bench_peer_open(const char *dir, bench_peer_sync sync, size_t out_size, char *err,
                            size_t cap);
void bench_peer_close(bench_peer *p);
/* The bytes the database takes once its WAL is folded in (a TRUNCATE checkpoint): page_count *
 * page_size. 0 on failure. */
uint64_t bench_peer_bytes(bench_peer *p);
const char *bench_peer_errmsg(const bench_peer *p);
/* Runs one fresh task the way cairn's runner does, as separate transactions: admission
 * (idempotency reservation + task row + audit), acquire (lease + attempt + audit), then for each
 * of `n_steps` steps a resume read and a step commit, and finally the succeeded transition. Step
 * i depends on step i-1. 0 or -1 (see bench_peer_errmsg). */
int bench_peer_run_task(bench_peer *p, const char *id, uint32_t n, uint32_t n_steps);
/* Setup for the commit loop (untimed, one transaction): tasks "<prefix><first>".. running. */
int bench_peer_create_running(bench_peer *p, const char *prefix, uint32_t first, uint32_t count);
/* One step commit: in one transaction (a) read the task row and check the lease token, (b) upsert
 * the step row with its output, (c) renew the lease on the task row (moving its due-index entry),
 * (d) append an audit row. */
int bench_peer_commit_step(bench_peer *p, const char *task, const char *step);
/* The read a resume does before `step`, in one read transaction: the task row, the step's own
 * row, the dependency's output (copied and unpacked, as a step receives it) and progress;
 * `copy_input` also copies the task input. 0, 1 when the step or dependency has no row yet, -1
 * on error. */
int bench_peer_load_step(bench_peer *p, const char *task, const char *step, const char *dep,
                         int copy_input);

/* The ledger graph's transactions, for consume.c's peer (a task of steps with their own
 * outputs, some of them effects, some commits flushed): */
/* Admission and lease in one transaction, as cairn_runner_run does them. 0 or -1. */
int bench_peer_begin(bench_peer *p, const char *id, const void *input, size_t input_len,
                     uint64_t token);
/* The resume read before `step`, with its n_deps dependencies' outputs (bench_peer_load_step's
 * read). 0, 1 when a record is missing, -1 on error. */
int bench_peer_load(bench_peer *p, const char *task, const char *step, const char *const *deps,
                    int n_deps, int copy_input);
typedef enum { PEER_DONE, PEER_INTENT, PEER_DONE_LAST } bench_peer_commit;
/* One step commit of `kind`, in one transaction (bench_peer_commit_step's, with the output
 * given): PEER_DONE stores out/len as the step's output, PEER_DONE_LAST also finishes the task;
 * PEER_INTENT stores the step in state intent with no output and audits the intent of delivery
 * out/len (the delivery ID). `effect` audits a completion ("effect done"). `full` makes this
 * commit synchronous=FULL on a PEER_SPLIT peer (a durable point: it flushes the WAL, so every
 * commit before it too). 0 or -1. */
int bench_peer_commit_ex(bench_peer *p, const char *task, const char *step, uint64_t token,
                         bench_peer_commit kind, int effect, const void *out, size_t len, int full);
/* A done step's output (kept by the caller until then) that the next bench_peer_commit_ex
 * writes in its own transaction, before its own step: cairn's carried commit (runner/step.c,
 * an expensive step's output written with the next effect's intent). */
void bench_peer_carry(bench_peer *p, const char *step, const void *out, size_t len);
/* How many tasks are in `state` (cairn_state's numbering); -1 on error. */
int64_t bench_peer_count_state(bench_peer *p, int state);

/* ------------------------------------------------------------------ concurrent.c */
/* K = 1, 4, 16 processes finishing tasks on one sync store and on the SQLite peer (SPLIT), in
 * `rounds` alternating rounds; prints its table on stdout. 0, or -1 (the reason on stderr). */
int bench_concurrent(const char *tmp, int quick, int rounds);
/* The journal's count of flushes made (its header) of the sync store in `dir`; 0 without one. */
uint64_t bench_journal_flushes(const char *dir);

/* ------------------------------------------------------------------ consume.c */
/* `ledger consume --jobs K` (K = 1, 4, 16) over `tasks` ledger tasks on a fresh sync store, and
 * the SQLite peer running the same graph with K processes, in `rounds` alternating rounds;
 * prints its table on stdout. `ledger` is the cairn-ledger binary. 0, or -1 (the reason on
 * stderr: a measurement failed, or a task did not succeed). */
int bench_consume(const char *tmp, const char *ledger, uint32_t tasks, int rounds);

/* ------------------------------------------------------------------ results (report.c) */

#define BENCH_MAX_ROUNDS 32

/* Throughput of one store in one configuration. */
typedef struct bench_tput {
    int done;
    double steps_s;        /* the median of the rounds' rates */
    double p50_us, p99_us; /* per commit (commit loops) or per whole task (task runs) */
    uint64_t steps;
    double seconds;                /* time inside the measured calls, all rounds */
    double rate[BENCH_MAX_ROUNDS]; /* steps/s of each round, in round order */
    int n_rate;
} bench_tput;

/* The median of n values (n <= BENCH_MAX_ROUNDS); 0 when n is 0. */
double bench_median(const double *v, int n);

typedef struct bench_config {
    const char *durability; /* "power-loss" | "process-crash" */
    size_t size;
    bench_tput sqlite_task, cairn_task, sqlite_commit, cairn_commit;
    bench_tput durable_task, durable_commit; /* power-loss only: every commit DURABLE */
    bench_tput split_task; /* power-loss only: SQLite NORMAL with FULL at each task's end */
} bench_config;

typedef struct bench_lat {
    int done;
    double p50, p99; /* in the unit the report names */
    uint64_t n;
} bench_lat;

/* Bytes per task of the same tasks in both stores, and where cairn's go: each database's pages
 * (leaf, branch and overflow) and records. */
typedef struct bench_db_pages {
    char name[16];
    uint64_t pages, records;
    double fill; /* of the leaf pages: the bytes their records take (LMDB's node headers and
                    pointers included) over the room the pages have */
} bench_db_pages;

typedef struct bench_size {
    int done;
    uint32_t tasks, steps;
    size_t out;
    uint64_t cairn_bytes, sqlite_bytes;
    bench_db_pages db[16];
    int n_db;
} bench_size;

typedef struct bench_results {
    int quick;
    uint32_t tasks_sync, tasks_nosync, rounds;
    bench_config cfg[4]; /* power-loss 256, 8192; process-crash 256, 8192 */
    bench_lat cairn_read_step, cairn_read_task, sqlite_read_step, sqlite_read_task; /* us */
    bench_lat spawn_true, spawn_help, spawn_hit;                                    /* ms */
    bench_lat inproc_hit;                                                           /* us */
    bench_size size;
    char ledger_note[4352];
    uint64_t ledger_effects;
    /* the machine */
    char when[64], host[128], kernel[128], cpu[256], scratch[4096], fs[32];
    long fs_type, cpus;
    double load_start, load_end; /* 1-minute load average: how busy the machine was */
} bench_results;

void bench_report_text(const bench_results *r);
void bench_report_json(const bench_results *r);

#endif
