/* bench/store/bench_store.c - cairn's checkpoint store against SQLite, measured in one run.
 *
 * Three questions, each answered against a peer measured on the same filesystem in the same run
 * (numbers from another machine or another day say nothing about this one):
 *   1. How many step checkpoints per second, and how long one commit takes (p50/p99), at the two
 *      durability levels a user can pick: survive power loss (cairn `sync` vs SQLite WAL with
 *      synchronous=FULL) and survive a process crash (cairn `nosync` vs SQLite WAL with
 *      synchronous=NORMAL), with small (256 B) and larger (8 KB) step outputs.
 *   2. How long the read takes that a resume does before each step (task record, the step's own
 *      record, its dependency's output, progress).
 *   3. How long `cairn run` takes on a task that has already succeeded (an idempotent hit):
 *      the real example binary, spawned as a user would.
 * Throughput is taken from whole tasks: cairn's real runner on fresh tasks (admission, acquire,
 * N steps each with its resume read and commit, final commit), against the SQLite peer doing the
 * same transactions. Latency percentiles come from a direct loop over one step commit: for cairn
 * a callback that does exactly what runner.c's commit_txn does for a finished step (fenced read,
 * audit append, step put, task put), for SQLite the equivalent transaction (sqlite_peer.c).
 * A benchmark never fails on a time: misses are reported, the exit status is 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <lmdb.h>
#include <math.h>
#include <msgpack.h>
#include <spawn.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/store/bench.h"
#include "checkpoint/store.h"

extern char **environ;

enum { STEPS_PER_TASK = 10, RESUME_STEPS = 4, RESUME_TASKS = 200, LEASE_MS = 60000 };

/* Targets from the project's performance goals (see bench/README.md). */
#define TARGET_POWER_LOSS 1.0   /* cairn sync steps/s / SQLite FULL steps/s */
#define TARGET_CRASH 5.0        /* cairn nosync steps/s / SQLite NORMAL steps/s */
#define TARGET_RESUME_US 2.0    /* p50 of one step's resume read */
#define TARGET_HIT_MS 5.0       /* p50 of `cairn run` on a succeeded task */

typedef struct opts {
    int quick, json;
    const char *only; /* comma-separated sections, or NULL for all */
    const char *ledger, *dir;
    uint32_t tasks_sync, tasks_nosync, reads, spawns, inproc_hits;
} opts;

/* One measured configuration of one store. */
typedef struct tput {
    int done;
    double steps_s;
    double p50_us, p99_us; /* per commit (commit loops) or per task (whole tasks) */
    uint64_t steps;
    double seconds;
} tput;

typedef struct config {
    const char *durability; /* "power-loss" | "process-crash" */
    size_t size;
    tput sqlite_task, sqlite_commit, cairn_task, cairn_commit;
    tput durable_task, durable_commit; /* power-loss only: every commit DURABLE */
} config;

typedef struct lat {
    int done;
    double p50, p99; /* microseconds */
    uint64_t n;
} lat;

typedef struct results {
    config cfg[4];
    lat cairn_read_step, cairn_read_task, sqlite_read_step, sqlite_read_task;
    lat spawn_true, spawn_help, spawn_hit, inproc_hit;
    char ledger_note[PATH_MAX + 256];
    uint64_t ledger_effects;
} results;

/* Whether section `name` runs (--only). */
static int wanted(const opts *o, const char *name)
{
    if (!o->only)
        return 1;
    size_t n = strlen(name);
    for (const char *p = o->only; *p;) {
        size_t m = strcspn(p, ",");
        if (m == n && strncmp(p, name, n) == 0)
            return 1;
        p += m + (p[m] == ',');
    }
    return 0;
}

static int g_verbose; /* progress lines on stderr when it is a terminal */
static char g_tmp[PATH_MAX];

static void progress(const char *fmt, ...) CAIRN_PRINTF(1, 2);
static void progress(const char *fmt, ...)
{
    if (!g_verbose)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("bench-store: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ------------------------------------------------------------------ timing and samples */

int64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int bench_samples_add(bench_samples *s, double ns)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        double *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return -1;
        s->v = v, s->cap = cap;
    }
    s->v[s->n++] = ns;
    s->sorted = 0;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_samples_pct(bench_samples *s, double p)
{
    if (!s->n)
        return 0;
    if (!s->sorted) {
        qsort(s->v, s->n, sizeof *s->v, cmp_double);
        s->sorted = 1;
    }
    size_t rank = (size_t)ceil(p / 100.0 * (double)s->n);
    return s->v[rank ? rank - 1 : 0];
}

void bench_samples_free(bench_samples *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}

static lat to_lat(bench_samples *s, double scale)
{
    lat l = {.done = s->n > 0, .n = s->n};
    l.p50 = bench_samples_pct(s, 50) / scale;
    l.p99 = bench_samples_pct(s, 99) / scale;
    return l;
}

/* ------------------------------------------------------------------ scratch directories */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

static void rm_tree(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* A fresh directory under the run's scratch directory. */
static int scratch(const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", g_tmp, name);
    rm_tree(out);
    if (mkdir(out, 0700) != 0) {
        fprintf(stderr, "bench-store: cannot create %s: %s\n", out, strerror(errno));
        return -1;
    }
    /* Flush what earlier runs left dirty (and the deletes), untimed: otherwise their writeback
     * competes with this run's fsyncs and the order of runs decides the numbers. */
    int fd = open(out, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        syncfs(fd);
        close(fd);
    }
    return 0;
}

/* ------------------------------------------------------------------ payloads */

/* A msgpack bin object of exactly `size` bytes (header included) with random contents, so
 * neither store can gain from compressible data. */
static void *make_output(size_t size)
{
    unsigned char *b = malloc(size);
    if (!b)
        return NULL;
    size_t hdr = size - 2 <= 0xff ? 2 : 3, body = size - hdr;
    if (hdr == 2) {
        b[0] = 0xc4, b[1] = (unsigned char)body;
    } else {
        b[0] = 0xc5, b[1] = (unsigned char)(body >> 8), b[2] = (unsigned char)body;
    }
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = hdr; i < size; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        b[i] = (unsigned char)x;
    }
    return b;
}

/* The task input: JSON for cairn's runner, the same map as msgpack for the direct loops and
 * the SQLite peer (which is spared cairn's JSON parse and canonical hash). */
static const char input_fmt[] =
    "{\"text\": \"benchmark task %06u: a short product description of sixty bytes\", \"n\": %u}";

static void input_msgpack(uint32_t n, msgpack_sbuffer *sb)
{
    char text[128];
    int len = snprintf(text, sizeof text,
                       "benchmark task %06u: a short product description of sixty bytes", n);
    msgpack_sbuffer_clear(sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str(&pk, 4), msgpack_pack_str_body(&pk, "text", 4);
    msgpack_pack_str(&pk, (size_t)len), msgpack_pack_str_body(&pk, text, (size_t)len);
    msgpack_pack_str(&pk, 1), msgpack_pack_str_body(&pk, "n", 1);
    msgpack_pack_uint32(&pk, n);
}

/* ------------------------------------------------------------------ cairn: the runner */

typedef struct step_out {
    const void *bytes;
    size_t len;
} step_out;

/* A trivial compute step: it outputs the prepared blob. */
static cairn_step_result emit(cairn_ctx *ctx, void *user)
{
    const step_out *o = user;
    return cairn_ctx_set_output(ctx, o->bytes, o->len) == 0 ? CAIRN_STEP_OK
                                                            : CAIRN_STEP_PERMANENT;
}

/* A chain s0 -> s1 -> ... of n trivial steps (each reads its predecessor's output). */
static cairn_graph *chain_graph(const char *name, uint32_t n, step_out *out, int expensive)
{
    cairn_graph *g = cairn_graph_new(name, 1);
    for (uint32_t i = 0; g && i < n; i++) {
        char step[16], dep[16];
        snprintf(step, sizeof step, "s%u", i);
        snprintf(dep, sizeof dep, "s%u", i ? i - 1 : 0);
        cairn_step *s = cairn_graph_add_step(g, step, emit, i ? dep : NULL);
        if (!s || cairn_step_set_user(s, out) || cairn_step_set_expensive(s, expensive)) {
            cairn_graph_free(g);
            return NULL;
        }
    }
    return g;
}

typedef struct cairn_env {
    cairn_store *store;
    cairn_runner *runner;
    cairn_graph *graph;
} cairn_env;

static void cairn_env_close(cairn_env *e)
{
    cairn_runner_free(e->runner);
    cairn_store_free(e->store);
    cairn_graph_free(e->graph);
    memset(e, 0, sizeof *e);
}

static int cairn_env_open(cairn_env *e, const char *dir, cairn_durability d, cairn_graph *g)
{
    memset(e, 0, sizeof *e);
    e->graph = g;
    e->store = cairn_store_new();
    e->runner = cairn_runner_new();
    if (!g || !e->store || !e->runner) {
        fprintf(stderr, "bench-store: out of memory\n");
        return -1;
    }
    int rc = cairn_store_set_durability(e->store, d);
    if (!rc && (rc = cairn_store_open(e->store, dir)))
        fprintf(stderr, "bench-store: %s\n", cairn_store_errmsg(e->store));
    if (!rc && ((rc = cairn_runner_set_store(e->runner, e->store)) ||
                (rc = cairn_runner_add_graph(e->runner, g)) || (rc = cairn_runner_open(e->runner))))
        fprintf(stderr, "bench-store: runner: %s\n", cairn_runner_errmsg(e->runner));
    return rc ? -1 : 0;
}

static int run_one(cairn_env *e, const char *prefix, uint32_t i)
{
    char id[64], input[256];
    snprintf(id, sizeof id, "%s%06u", prefix, i);
    int n = snprintf(input, sizeof input, input_fmt, i, i);
    int rc = cairn_runner_run(e->runner, cairn_graph_name(e->graph), id, NULL, input, (size_t)n,
                              NULL, NULL);
    if (rc)
        fprintf(stderr, "bench-store: cairn task %s: %s (%s)\n", id, cairn_runner_errmsg(e->runner),
                cairn_errname(rc));
    return rc;
}

/* Whole tasks through cairn_runner_run: steps/s, and per-task p50/p99. */
static int cairn_tasks(const char *dir, cairn_durability d, int expensive, size_t size,
                       uint32_t tasks, tput *out)
{
    step_out so = {make_output(size), size};
    cairn_env e;
    int rc = cairn_env_open(&e, dir, d, chain_graph("bench", STEPS_PER_TASK, &so, expensive));
    bench_samples s = {0};
    uint32_t warm = tasks / 20 + 1;
    for (uint32_t i = 0; !rc && i < warm; i++)
        rc = run_one(&e, "warm", i);
    int64_t t0 = bench_now_ns();
    for (uint32_t i = 0; !rc && i < tasks; i++) {
        int64_t a = bench_now_ns();
        rc = run_one(&e, "task", i);
        bench_samples_add(&s, (double)(bench_now_ns() - a));
    }
    int64_t t1 = bench_now_ns();
    if (!rc) {
        out->done = 1;
        out->steps = (uint64_t)tasks * STEPS_PER_TASK;
        out->seconds = (double)(t1 - t0) / 1e9;
        out->steps_s = (double)out->steps / out->seconds;
        out->p50_us = bench_samples_pct(&s, 50) / 1e3;
        out->p99_us = bench_samples_pct(&s, 99) / 1e3;
    }
    bench_samples_free(&s);
    cairn_env_close(&e);
    free((void *)so.bytes);
    return rc ? -1 : 0;
}

/* ------------------------------------------------------------------ cairn: the commit loop */

typedef struct loop_arg {
    const char *task, *step;
    uint64_t token;
    const void *out;
    size_t len;
    /* setup */
    uint32_t first, count;
    msgpack_sbuffer *input;
} loop_arg;

/* Mirrors runner.c's commit_txn for a finished step (kind C_DONE), including fenced(). */
static int commit_done_txn(cairn__txn *t, void *arg)
{
    loop_arg *a = arg;
    cairn__task_rec task;
    int rc = cairn__task_get(t, a->task, &task);
    if (rc)
        return rc;
    if (task.state != CAIRN_RUNNING || task.lease_token != a->token)
        return cairn__store_fail(cairn__txn_store(t), CAIRN_EBUSY, "task '%s': lease lost",
                                 a->task);
    task.lease_expires_ms = cairn__now_ms() + LEASE_MS;
    cairn__step_rec s = {.generation = task.generation, .invocations = 1,
                         .updated_ms = cairn__now_ms()};
    snprintf(s.error, sizeof s.error, "%s", "");
    s.state = CAIRN_STEP_DONE;
    s.output = a->out;
    s.output_len = a->len;
    cairn__audit_rec au = {.t_ms = cairn__now_ms(), .from = CAIRN_RUNNING, .to = CAIRN_RUNNING,
                           .attempt = task.attempt, .generation = task.generation};
    snprintf(au.step, sizeof au.step, "%s", a->step);
    snprintf(au.reason, sizeof au.reason, "step done (invocation %u)", 1u);
    if ((rc = cairn__audit_append(t, &task, &au)) ||
        (rc = cairn__step_put(t, a->task, a->step, &s)))
        return rc;
    return cairn__task_put(t, &task);
}

static void fill_running(cairn__task_rec *r, const char *id, uint64_t token, const void *input,
                         size_t input_len)
{
    memset(r, 0, sizeof *r);
    snprintf(r->id, sizeof r->id, "%s", id);
    snprintf(r->graph, sizeof r->graph, "bench");
    snprintf(r->fingerprint, sizeof r->fingerprint, "%064d", 7);
    snprintf(r->payload_hash, sizeof r->payload_hash, "%064d", 9);
    snprintf(r->steps_pin, sizeof r->steps_pin,
             "s0@1,s1@1,s2@1,s3@1,s4@1,s5@1,s6@1,s7@1,s8@1,s9@1");
    r->state = CAIRN_RUNNING;
    r->attempt = 1;
    r->generation = 1;
    r->created_ms = r->updated_ms = cairn__now_ms();
    gethostname(r->owner.host, sizeof r->owner.host - 1);
    r->owner.pid = (int32_t)getpid();
    r->lease_token = token;
    r->lease_expires_ms = r->created_ms + LEASE_MS;
    r->input = input;
    r->input_len = input_len;
}

/* Setup (untimed): tasks first..first+count-1, running under a lease, as acquire leaves them. */
static int create_running_txn(cairn__txn *t, void *arg)
{
    loop_arg *a = arg;
    for (uint32_t i = a->first; i < a->first + a->count; i++) {
        char id[64];
        snprintf(id, sizeof id, "loop%06u", i);
        input_msgpack(i, a->input);
        cairn__task_rec r;
        fill_running(&r, id, a->token, a->input->data, a->input->size);
        int rc = cairn__task_put(t, &r);
        if (rc)
            return rc;
    }
    return 0;
}

static int cairn_commits(const char *dir, cairn_durability d, int durable, size_t size,
                         uint32_t tasks, tput *out)
{
    cairn_store *s = cairn_store_new();
    void *blob = make_output(size);
    msgpack_sbuffer input;
    msgpack_sbuffer_init(&input);
    int rc = s && blob ? cairn_store_set_durability(s, d) : CAIRN_ENOMEM;
    if (!rc)
        rc = cairn_store_open(s, dir);
    loop_arg a = {.token = 0x5eed5eedull, .out = blob, .len = size, .input = &input};
    uint32_t warm = tasks / 20 + 1;
    for (uint32_t first = 0; !rc && first < tasks + warm; first += a.count) {
        a.first = first;
        a.count = tasks + warm - first < 256 ? tasks + warm - first : 256;
        rc = cairn__store_write(s, CAIRN__RELAXED, create_running_txn, &a);
    }
    bench_samples lat = {0};
    int64_t busy = 0;
    for (uint32_t i = 0; !rc && i < tasks + warm; i++) {
        char id[64];
        snprintf(id, sizeof id, "loop%06u", i);
        a.task = id;
        for (uint32_t k = 0; !rc && k < STEPS_PER_TASK; k++) {
            char step[16];
            snprintf(step, sizeof step, "s%u", k);
            a.step = step;
            int64_t t0 = bench_now_ns();
            rc = cairn__store_write(s, durable, commit_done_txn, &a);
            int64_t dt = bench_now_ns() - t0;
            if (i >= warm) {
                busy += dt;
                bench_samples_add(&lat, (double)dt);
            }
        }
    }
    if (rc)
        fprintf(stderr, "bench-store: cairn commit loop: %s (%s)\n",
                s ? cairn_store_errmsg(s) : "out of memory", cairn_errname(rc));
    else {
        out->done = 1;
        out->steps = lat.n;
        out->seconds = (double)busy / 1e9;
        out->steps_s = (double)lat.n / out->seconds;
        out->p50_us = bench_samples_pct(&lat, 50) / 1e3;
        out->p99_us = bench_samples_pct(&lat, 99) / 1e3;
    }
    bench_samples_free(&lat);
    msgpack_sbuffer_destroy(&input);
    cairn_store_free(s);
    free(blob);
    return rc ? -1 : 0;
}

/* ------------------------------------------------------------------ SQLite */

static int sqlite_tasks(const char *dir, int full, size_t size, uint32_t tasks, tput *out)
{
    char err[512];
    bench_peer *p = bench_peer_open(dir, full, err, sizeof err);
    if (!p) {
        fprintf(stderr, "bench-store: %s\n", err);
        return -1;
    }
    void *blob = make_output(size);
    msgpack_sbuffer input;
    msgpack_sbuffer_init(&input);
    bench_samples s = {0};
    uint32_t warm = tasks / 20 + 1;
    int rc = blob ? 0 : -1;
    int64_t t0 = 0;
    for (uint32_t i = 0; !rc && i < warm + tasks; i++) {
        if (i == warm)
            t0 = bench_now_ns();
        char id[64];
        snprintf(id, sizeof id, "%s%06u", i < warm ? "warm" : "task", i);
        input_msgpack(i, &input);
        int64_t a = bench_now_ns();
        rc = bench_peer_run_task(p, id, input.data, input.size, STEPS_PER_TASK, blob, size);
        if (i >= warm)
            bench_samples_add(&s, (double)(bench_now_ns() - a));
    }
    int64_t t1 = bench_now_ns();
    if (rc)
        fprintf(stderr, "bench-store: sqlite task: %s\n", bench_peer_errmsg(p));
    else {
        out->done = 1;
        out->steps = (uint64_t)tasks * STEPS_PER_TASK;
        out->seconds = (double)(t1 - t0) / 1e9;
        out->steps_s = (double)out->steps / out->seconds;
        out->p50_us = bench_samples_pct(&s, 50) / 1e3;
        out->p99_us = bench_samples_pct(&s, 99) / 1e3;
    }
    bench_samples_free(&s);
    msgpack_sbuffer_destroy(&input);
    free(blob);
    bench_peer_close(p);
    return rc ? -1 : 0;
}

static int sqlite_commits(const char *dir, int full, size_t size, uint32_t tasks, tput *out)
{
    char err[512];
    bench_peer *p = bench_peer_open(dir, full, err, sizeof err);
    if (!p) {
        fprintf(stderr, "bench-store: %s\n", err);
        return -1;
    }
    void *blob = make_output(size);
    msgpack_sbuffer input;
    msgpack_sbuffer_init(&input);
    const uint64_t token = 0x5eed5eedull;
    uint32_t warm = tasks / 20 + 1;
    int rc = blob ? 0 : -1;
    for (uint32_t i = 0; !rc && i < tasks + warm; i++) {
        char id[64];
        snprintf(id, sizeof id, "loop%06u", i);
        input_msgpack(i, &input);
        rc = bench_peer_create_running(p, id, input.data, input.size, token);
    }
    bench_samples lat = {0};
    int64_t busy = 0;
    for (uint32_t i = 0; !rc && i < tasks + warm; i++) {
        char id[64];
        snprintf(id, sizeof id, "loop%06u", i);
        for (uint32_t k = 0; !rc && k < STEPS_PER_TASK; k++) {
            char step[16];
            snprintf(step, sizeof step, "s%u", k);
            int64_t t0 = bench_now_ns();
            rc = bench_peer_commit_step(p, id, step, token, blob, size);
            int64_t dt = bench_now_ns() - t0;
            if (i >= warm) {
                busy += dt;
                bench_samples_add(&lat, (double)dt);
            }
        }
    }
    if (rc)
        fprintf(stderr, "bench-store: sqlite commit loop: %s\n", bench_peer_errmsg(p));
    else {
        out->done = 1;
        out->steps = lat.n;
        out->seconds = (double)busy / 1e9;
        out->steps_s = (double)lat.n / out->seconds;
        out->p50_us = bench_samples_pct(&lat, 50) / 1e3;
        out->p99_us = bench_samples_pct(&lat, 99) / 1e3;
    }
    bench_samples_free(&lat);
    msgpack_sbuffer_destroy(&input);
    free(blob);
    bench_peer_close(p);
    return rc ? -1 : 0;
}

/* ------------------------------------------------------------------ 1. checkpoint throughput */

static int measure_config(const opts *o, config *c, int power_loss)
{
    uint32_t tasks = power_loss ? o->tasks_sync : o->tasks_nosync;
    cairn_durability d = power_loss ? CAIRN_SYNC : CAIRN_NOSYNC;
    char dir[PATH_MAX];
    const char *what = c->durability;
    progress("%s, %zu B outputs: SQLite tasks", what, c->size);
    if (scratch("sqlite-tasks", dir, sizeof dir) || sqlite_tasks(dir, power_loss, c->size, tasks,
                                                                 &c->sqlite_task))
        return -1;
    rm_tree(dir);
    progress("%s, %zu B outputs: cairn runner", what, c->size);
    if (scratch("cairn-tasks", dir, sizeof dir) ||
        cairn_tasks(dir, d, 0, c->size, tasks, &c->cairn_task))
        return -1;
    rm_tree(dir);
    progress("%s, %zu B outputs: SQLite commit loop", what, c->size);
    if (scratch("sqlite-commits", dir, sizeof dir) ||
        sqlite_commits(dir, power_loss, c->size, tasks, &c->sqlite_commit))
        return -1;
    rm_tree(dir);
    progress("%s, %zu B outputs: cairn commit loop", what, c->size);
    if (scratch("cairn-commits", dir, sizeof dir) ||
        cairn_commits(dir, d, CAIRN__RELAXED, c->size, tasks, &c->cairn_commit))
        return -1;
    rm_tree(dir);
    if (!power_loss)
        return 0;
    /* Honesty row: sync mode's relaxed commits may lose the last commit to a power cut; this
     * is what flushing the meta page at every commit would cost (steps marked expensive). */
    progress("%s, %zu B outputs: cairn every commit DURABLE", what, c->size);
    if (scratch("cairn-durable-tasks", dir, sizeof dir) ||
        cairn_tasks(dir, d, 1, c->size, tasks, &c->durable_task))
        return -1;
    rm_tree(dir);
    if (scratch("cairn-durable-commits", dir, sizeof dir) ||
        cairn_commits(dir, d, CAIRN__DURABLE, c->size, tasks, &c->durable_commit))
        return -1;
    rm_tree(dir);
    return 0;
}

/* ------------------------------------------------------------------ 2. resume reads */

typedef struct read_arg {
    const char *task, *step, *dep;
    int copy_input;
    void *input_bytes, *dep_bytes, *progress_bytes;
    msgpack_unpacked input, dep_u, progress_u;
    cairn__step_rec rec;
    int has_rec;
} read_arg;

static int unpack_copy(const void *p, size_t n, void **bytes, msgpack_unpacked *u)
{
    size_t off = 0;
    *bytes = malloc(n ? n : 1);
    if (!*bytes)
        return CAIRN_ENOMEM;
    memcpy(*bytes, p, n);
    msgpack_unpacked_init(u);
    return msgpack_unpack_next(u, *bytes, n, &off) == MSGPACK_UNPACK_SUCCESS ? 0 : CAIRN_ECORRUPT;
}

/* Mirrors runner.c's load_txn: the task record (its input copied once per run), the step's own
 * record, the dependency's committed output (copied and unpacked) and the step's progress. */
static int load_step_txn(cairn__txn *t, void *arg)
{
    read_arg *a = arg;
    cairn__task_rec task;
    int rc = cairn__task_get(t, a->task, &task);
    if (rc)
        return rc;
    if (a->copy_input && (rc = unpack_copy(task.input, task.input_len, &a->input_bytes,
                                           &a->input)))
        return rc;
    cairn__step_rec s;
    rc = cairn__step_get(t, a->task, a->step, task.generation, &s);
    a->has_rec = rc == 0;
    if (rc == 0) {
        a->rec = s;
        a->rec.output = NULL;
    } else if (rc != CAIRN_ENOTFOUND)
        return rc;
    if (a->dep) {
        rc = cairn__step_get(t, a->task, a->dep, task.generation, &s);
        if (rc == 0 && s.state == CAIRN_STEP_DONE && s.output) {
            if ((rc = unpack_copy(s.output, s.output_len, &a->dep_bytes, &a->dep_u)))
                return rc;
        } else if (rc && rc != CAIRN_ENOTFOUND)
            return rc;
    }
    const void *p;
    size_t n;
    rc = cairn__progress_get(t, a->task, a->step, task.generation, &p, &n);
    if (rc == 0)
        return unpack_copy(p, n, &a->progress_bytes, &a->progress_u);
    return rc == CAIRN_ENOTFOUND ? 0 : rc;
}

static void read_arg_free(read_arg *a)
{
    if (a->input_bytes)
        msgpack_unpacked_destroy(&a->input), free(a->input_bytes);
    if (a->dep_bytes)
        msgpack_unpacked_destroy(&a->dep_u), free(a->dep_bytes);
    if (a->progress_bytes)
        msgpack_unpacked_destroy(&a->progress_u), free(a->progress_bytes);
    a->input_bytes = a->dep_bytes = a->progress_bytes = NULL;
}

/* Step reads of succeeded 4-step tasks (256 B outputs) spread over RESUME_TASKS tasks, in a
 * scrambled order so consecutive reads do not hit the same pages. */
static int measure_resume(const opts *o, results *res)
{
    char dir[PATH_MAX];
    size_t size = 256;
    step_out so = {make_output(size), size};
    progress("resume reads: cairn");
    cairn_env e;
    memset(&e, 0, sizeof e);
    int rc = scratch("cairn-resume", dir, sizeof dir);
    if (!rc)
        rc = cairn_env_open(&e, dir, CAIRN_NOSYNC, chain_graph("resume", RESUME_STEPS, &so, 0));
    for (uint32_t i = 0; !rc && i < RESUME_TASKS; i++)
        rc = run_one(&e, "resume", i);
    bench_samples step = {0}, task = {0};
    for (uint32_t i = 0, x = 1; !rc && i < o->reads; i++) {
        x = x * 1103515245u + 12345u;
        char id[64];
        snprintf(id, sizeof id, "resume%06u", (x >> 8) % RESUME_TASKS);
        int64_t whole = 0;
        for (uint32_t k = 0; !rc && k < RESUME_STEPS; k++) {
            char sname[16], dname[16];
            snprintf(sname, sizeof sname, "s%u", k);
            snprintf(dname, sizeof dname, "s%u", k ? k - 1 : 0);
            read_arg a = {.task = id, .step = sname, .dep = k ? dname : NULL, .copy_input = k == 0};
            int64_t t0 = bench_now_ns();
            rc = cairn__store_read(e.store, load_step_txn, &a);
            int64_t dt = bench_now_ns() - t0;
            read_arg_free(&a);
            if (!rc && (!a.has_rec || a.rec.state != CAIRN_STEP_DONE))
                rc = CAIRN_ECORRUPT; /* the bench would measure nothing */
            whole += dt;
            bench_samples_add(&step, (double)dt);
        }
        bench_samples_add(&task, (double)whole);
    }
    if (rc)
        fprintf(stderr, "bench-store: cairn resume read: %s (%s)\n",
                e.store ? cairn_store_errmsg(e.store) : "?", cairn_errname(rc));
    res->cairn_read_step = to_lat(&step, 1e3);
    res->cairn_read_task = to_lat(&task, 1e3);
    bench_samples_free(&step), bench_samples_free(&task);
    if (!rc) {
        /* the same task again through the runner: an idempotent hit, in process */
        progress("idempotent hit: in process");
        bench_samples hit = {0};
        for (uint32_t i = 0; !rc && i < o->inproc_hits; i++) {
            int64_t t0 = bench_now_ns();
            rc = run_one(&e, "resume", i % RESUME_TASKS);
            bench_samples_add(&hit, (double)(bench_now_ns() - t0));
        }
        res->inproc_hit = to_lat(&hit, 1e3);
        bench_samples_free(&hit);
    }
    cairn_env_close(&e);
    rm_tree(dir);
    if (rc) {
        free((void *)so.bytes);
        return -1;
    }

    progress("resume reads: SQLite");
    char err[512];
    bench_peer *p = NULL;
    if (scratch("sqlite-resume", dir, sizeof dir) || !(p = bench_peer_open(dir, 0, err, sizeof err))) {
        if (!p)
            fprintf(stderr, "bench-store: %s\n", err);
        free((void *)so.bytes);
        return -1;
    }
    msgpack_sbuffer input;
    msgpack_sbuffer_init(&input);
    for (uint32_t i = 0; !rc && i < RESUME_TASKS; i++) {
        char id[64];
        snprintf(id, sizeof id, "resume%06u", i);
        input_msgpack(i, &input);
        rc = bench_peer_run_task(p, id, input.data, input.size, RESUME_STEPS, so.bytes, so.len);
    }
    for (uint32_t i = 0, x = 1; !rc && i < o->reads; i++) {
        x = x * 1103515245u + 12345u;
        char id[64];
        snprintf(id, sizeof id, "resume%06u", (x >> 8) % RESUME_TASKS);
        int64_t whole = 0;
        for (uint32_t k = 0; !rc && k < RESUME_STEPS; k++) {
            char sname[16], dname[16];
            snprintf(sname, sizeof sname, "s%u", k);
            snprintf(dname, sizeof dname, "s%u", k ? k - 1 : 0);
            int64_t t0 = bench_now_ns();
            rc = bench_peer_load_step(p, id, sname, k ? dname : NULL, k == 0);
            int64_t dt = bench_now_ns() - t0;
            whole += dt;
            bench_samples_add(&step, (double)dt);
        }
        bench_samples_add(&task, (double)whole);
    }
    if (rc)
        fprintf(stderr, "bench-store: sqlite resume read: %s\n", bench_peer_errmsg(p));
    res->sqlite_read_step = to_lat(&step, 1e3);
    res->sqlite_read_task = to_lat(&task, 1e3);
    bench_samples_free(&step), bench_samples_free(&task);
    msgpack_sbuffer_destroy(&input);
    bench_peer_close(p);
    rm_tree(dir);
    free((void *)so.bytes);
    return rc ? -1 : 0;
}

/* ------------------------------------------------------------------ 3. idempotent hit */

/* Spawns argv with stdio on /dev/null; returns the exit status (-1 if it did not exit) and
 * the wall time in *ns. */
static int spawn_wait(char *const argv[], int64_t *ns)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int64_t t0 = bench_now_ns();
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    *ns = bench_now_ns() - t0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int spawn_many(char *const argv[], uint32_t n, lat *out, int want_status)
{
    bench_samples s = {0};
    int64_t ns;
    int st = spawn_wait(argv, &ns); /* warm the page cache */
    for (uint32_t i = 0; st == want_status && i < n; i++) {
        st = spawn_wait(argv, &ns);
        bench_samples_add(&s, (double)ns);
    }
    if (st != want_status)
        fprintf(stderr, "bench-store: %s %s exited with %d (expected %d)\n", argv[0],
                argv[1] ? argv[1] : "", st, want_status);
    else
        *out = to_lat(&s, 1e6);
    bench_samples_free(&s);
    return st == want_status ? 0 : -1;
}

static const char *find_ledger(const char *given, char *buf, size_t cap)
{
    if (given)
        return given;
    const char *env = getenv("CAIRN_LEDGER");
    if (env && *env)
        return env;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return NULL;
    self[n] = 0;
    snprintf(buf, cap, "%s/../../examples/ledger/cairn-ledger", dirname(self));
    return buf;
}

static uint64_t count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    uint64_t n = 0;
    int c;
    while (f && (c = fgetc(f)) != EOF)
        n += c == '\n';
    if (f)
        fclose(f);
    return n;
}

static int measure_hit(const opts *o, results *res)
{
    char buf[PATH_MAX], dir[PATH_MAX];
    const char *ledger = find_ledger(o->ledger, buf, sizeof buf);
    if (!ledger || access(ledger, X_OK) != 0) {
        snprintf(res->ledger_note, sizeof res->ledger_note,
                 "skipped: no cairn-ledger binary at %s (pass --ledger PATH or set CAIRN_LEDGER)",
                 ledger ? ledger : "?");
        return 0;
    }
    if (scratch("ledger", dir, sizeof dir))
        return -1;
    char store[PATH_MAX + 16], input[PATH_MAX + 16], trace[PATH_MAX + 16], book[PATH_MAX + 16];
    snprintf(store, sizeof store, "%s/store", dir);
    snprintf(input, sizeof input, "%s/input.json", dir);
    snprintf(trace, sizeof trace, "%s/trace.txt", dir);
    snprintf(book, sizeof book, "%s/ledger.txt", dir);
    FILE *f = fopen(input, "w");
    if (!f) {
        fprintf(stderr, "bench-store: cannot write %s: %s\n", input, strerror(errno));
        return -1;
    }
    fprintf(f, "{\"text\": \"idempotent hit\", \"work_ms\": 0, \"trace\": \"%s\", \"ledger\": \"%s\"}\n",
            trace, book);
    fclose(f);
    progress("idempotent hit: spawning %s", ledger);
    char *run[] = {(char *)ledger, "run", "--store", store, "--graph", "ledger", "--task",
                   "bench-hit", "--input", input, NULL};
    char *help[] = {(char *)ledger, "run", "--help", NULL};
    char *tru[] = {"/bin/true", NULL};
    int64_t ns;
    int st = spawn_wait(run, &ns); /* the first run does the work (and the effect) */
    if (st != 0) {
        snprintf(res->ledger_note, sizeof res->ledger_note,
                 "failed: the first `%s run` exited with %d", ledger, st);
        fprintf(stderr, "bench-store: %s\n", res->ledger_note);
        rm_tree(dir);
        return -1;
    }
    if (access(tru[0], X_OK) == 0)
        spawn_many(tru, o->spawns, &res->spawn_true, 0);
    int rc = spawn_many(help, o->spawns, &res->spawn_help, 0);
    if (!rc)
        rc = spawn_many(run, o->spawns, &res->spawn_hit, 0);
    res->ledger_effects = count_lines(book);
    snprintf(res->ledger_note, sizeof res->ledger_note, "%s (%llu effect line%s after %u+1 runs)",
             ledger, (unsigned long long)res->ledger_effects, res->ledger_effects == 1 ? "" : "s",
             o->spawns + 1);
    rm_tree(dir);
    return rc;
}

/* ------------------------------------------------------------------ reporting */

static const char *fs_name(long type)
{
    switch ((unsigned long)type) {
    case 0xEF53: return "ext2/ext3/ext4";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x01021994: return "tmpfs";
    case 0x794C7630: return "overlayfs";
    case 0x2FC12FC1: return "zfs";
    case 0x6969: return "nfs";
    case 0xF2F52010: return "f2fs";
    case 0x65735546: return "fuse";
    default: return "unknown";
    }
}

static void cpu_model(char *out, size_t cap)
{
    snprintf(out, cap, "?");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *p = strchr(line, ':');
            if (p) {
                p += 1 + (p[1] == ' ');
                p[strcspn(p, "\n")] = 0;
                snprintf(out, cap, "%s", p);
            }
            break;
        }
    }
    if (f)
        fclose(f);
}

static double ratio(const tput *c, const tput *s)
{
    return c->done && s->done && s->steps_s > 0 ? c->steps_s / s->steps_s : 0;
}

static const char *verdict(double r, double target) { return r >= target ? "PASS" : "MISS"; }

static const char *const notes[] = {
    "steps/s of `runner` rows: whole fresh tasks of 10 steps through cairn_runner_run (admission, "
    "acquire, per step a resume read and a commit, final DURABLE commit), divided by 10; the "
    "SQLite `tasks` rows do the same transactions (without cairn's JSON parse and hashing)",
    "p50/p99 of `commits` rows: one step commit (fenced read, step upsert with output, lease "
    "renewal, audit append) in a direct loop; of `runner`/`tasks` rows: one whole 10-step task",
    "cairn sync mode commits compute steps RELAXED (one fdatasync: data pages on disk, meta page "
    "written but flushed by the next commit); the meta page is flushed at once (DURABLE) only for "
    "effect intents, expensive steps and the task's final state, so a power cut can undo the last "
    "relaxed commit (the step then runs again) but never corrupts the store; the `every commit "
    "DURABLE` rows (all steps marked expensive) show what flushing every commit costs",
    "SQLite WAL synchronous=FULL fsyncs the WAL at every commit (power-loss safe); NORMAL fsyncs "
    "only at checkpoints (process-crash safe), like cairn nosync",
};

static void print_tput_row(const char *store, const char *how, const tput *t, int per_commit)
{
    if (!t->done) {
        printf("  %-34s %-8s %10s\n", store, how, "-");
        return;
    }
    if (per_commit)
        printf("  %-34s %-8s %10.0f %10.1f %10.1f\n", store, how, t->steps_s, t->p50_us, t->p99_us);
    else
        printf("  %-34s %-8s %10.0f %10.2f %10.2f\n", store, how, t->steps_s, t->p50_us / 1e3,
               t->p99_us / 1e3);
}

static void print_lat(const char *what, const lat *l, const char *unit)
{
    if (l->done)
        printf("  %-52s %10.2f %10.2f  (%s, n=%llu)\n", what, l->p50, l->p99, unit,
               (unsigned long long)l->n);
    else
        printf("  %-52s %10s\n", what, "-");
}

static void print_text(const opts *o, const results *r, const char *when, const char *fs,
                       long fs_type, const char *cpu, const struct utsname *un)
{
    printf("cairn checkpoint store benchmark (%s run), %s\n", o->quick ? "quick" : "full", when);
    printf("  host %s, %s %s, %ld CPUs (%s)\n", un->nodename, un->sysname, un->release,
           sysconf(_SC_NPROCESSORS_ONLN), cpu);
    printf("  scratch %s on %s (statfs type 0x%lx); SQLite %s; LMDB %s\n", g_tmp, fs,
           (unsigned long)fs_type, sqlite3_libversion(), mdb_version(NULL, NULL, NULL));
    printf("  %u tasks x %d steps per power-loss configuration, %u per process-crash one\n\n",
           o->tasks_sync, STEPS_PER_TASK, o->tasks_nosync);

    printf("1. Step checkpoints\n");
    printf("  %-34s %-8s %10s %10s %10s\n", "store", "measure", "steps/s", "p50", "p99");
    printf("  %-34s %-8s %10s %10s %10s\n", "", "", "", "(us|ms)", "(us|ms)");
    for (int i = 0; i < 4; i++) {
        const config *c = &r->cfg[i];
        int pl = i < 2;
        printf(" %s, %zu B outputs (commits: us per commit; tasks/runner: ms per 10-step task)\n",
               c->durability, c->size);
        print_tput_row(pl ? "SQLite WAL synchronous=FULL" : "SQLite WAL synchronous=NORMAL",
                       "tasks", &c->sqlite_task, 0);
        print_tput_row(pl ? "cairn sync (relaxed commits)" : "cairn nosync", "runner",
                       &c->cairn_task, 0);
        print_tput_row(pl ? "SQLite WAL synchronous=FULL" : "SQLite WAL synchronous=NORMAL",
                       "commits", &c->sqlite_commit, 1);
        print_tput_row(pl ? "cairn sync (relaxed commits)" : "cairn nosync", "commits",
                       &c->cairn_commit, 1);
        if (pl) {
            print_tput_row("cairn sync, every commit DURABLE", "runner", &c->durable_task, 0);
            print_tput_row("cairn sync, every commit DURABLE", "commits", &c->durable_commit, 1);
        }
    }

    printf("\n   Ratios: cairn steps/s / SQLite steps/s\n");
    printf("  %-14s %-7s %-30s %8s %8s  %s\n", "durability", "output", "compared", "ratio",
           "target", "result");
    for (int i = 0; i < 4; i++) {
        const config *c = &r->cfg[i];
        int pl = i < 2;
        double target = pl ? TARGET_POWER_LOSS : TARGET_CRASH;
        char sz[16];
        snprintf(sz, sizeof sz, "%zu B", c->size);
        double rt = ratio(&c->cairn_task, &c->sqlite_task);
        double rc = ratio(&c->cairn_commit, &c->sqlite_commit);
        printf("  %-14s %-7s %-30s %7.2fx %7.1fx  %s\n", c->durability, sz,
               "runner vs tasks (headline)", rt, target, verdict(rt, target));
        printf("  %-14s %-7s %-30s %7.2fx %7.1fx  %s\n", c->durability, sz, "commit loop vs loop",
               rc, target, verdict(rc, target));
        if (pl) {
            double rd = ratio(&c->durable_task, &c->sqlite_task);
            printf("  %-14s %-7s %-30s %7.2fx %8s  %s\n", c->durability, sz,
                   "DURABLE runner vs tasks", rd, "-", "(info)");
        }
    }

    printf("\n2. Resume read of a 4-step task (task record + own step + dependency output + "
           "progress)\n");
    printf("  %-52s %10s %10s\n", "", "p50", "p99");
    print_lat("cairn, one step's read", &r->cairn_read_step, "us");
    print_lat("cairn, all 4 steps", &r->cairn_read_task, "us");
    print_lat("SQLite, one step's read", &r->sqlite_read_step, "us");
    print_lat("SQLite, all 4 steps", &r->sqlite_read_task, "us");
    if (r->cairn_read_step.done)
        printf("  target: cairn p50 per step read <= %.1f us: %s (%.2f us); SQLite / cairn p50: "
               "%.1fx\n",
               TARGET_RESUME_US, verdict(TARGET_RESUME_US, r->cairn_read_step.p50),
               r->cairn_read_step.p50,
               r->cairn_read_step.p50 > 0 ? r->sqlite_read_step.p50 / r->cairn_read_step.p50 : 0);

    printf("\n3. `cairn run` on an already-succeeded task (idempotent hit)\n");
    printf("  %-52s %10s %10s\n", "", "p50", "p99");
    print_lat("spawn /bin/true (process start baseline)", &r->spawn_true, "ms");
    print_lat("cairn-ledger run --help (start, no store)", &r->spawn_help, "ms");
    print_lat("cairn-ledger run on a succeeded task", &r->spawn_hit, "ms");
    print_lat("cairn_runner_run on a succeeded task, in process", &r->inproc_hit, "us");
    if (r->spawn_hit.done)
        printf("  target: p50 <= %.0f ms: %s (%.2f ms)\n", TARGET_HIT_MS,
               verdict(TARGET_HIT_MS, r->spawn_hit.p50), r->spawn_hit.p50);
    printf("  binary: %s\n", r->ledger_note);

    printf("\nNotes:\n");
    for (size_t i = 0; i < sizeof notes / sizeof *notes; i++)
        printf("  - %s\n", notes[i]);
}

static json_t *tput_json(const char *store, const char *measure, const tput *t)
{
    if (!t->done)
        return json_pack("{s:s, s:s, s:n}", "store", store, "measure", measure, "steps_per_s");
    int commit = strcmp(measure, "commits") == 0;
    return json_pack("{s:s, s:s, s:f, s:I, s:f, s:s, s:f, s:f}", "store", store, "measure",
                     measure, "steps_per_s", t->steps_s, "steps", (json_int_t)t->steps, "seconds",
                     t->seconds, "latency_of", commit ? "one commit" : "one 10-step task",
                     "p50_us", t->p50_us, "p99_us", t->p99_us);
}

static json_t *lat_json(const lat *l, const char *unit)
{
    if (!l->done)
        return json_null();
    char k50[16], k99[16];
    snprintf(k50, sizeof k50, "p50_%s", unit);
    snprintf(k99, sizeof k99, "p99_%s", unit);
    return json_pack("{s:f, s:f, s:I}", k50, l->p50, k99, l->p99, "n", (json_int_t)l->n);
}

static void print_json(const opts *o, const results *r, const char *when, const char *fs,
                       long fs_type, const char *cpu, const struct utsname *un)
{
    json_t *doc = json_object();
    char magic[32];
    snprintf(magic, sizeof magic, "0x%lx", (unsigned long)fs_type);
    json_object_set_new(
        doc, "meta",
        json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:I}",
                  "benchmark", "cairn-store", "mode", o->quick ? "quick" : "full", "date", when,
                  "host", un->nodename, "kernel", un->release, "cpus",
                  (json_int_t)sysconf(_SC_NPROCESSORS_ONLN), "cpu", cpu, "scratch_dir", g_tmp,
                  "filesystem", fs, "statfs_type", magic, "sqlite", sqlite3_libversion(),
                  "steps_per_task", (json_int_t)STEPS_PER_TASK, "tasks_power_loss",
                  (json_int_t)o->tasks_sync, "tasks_process_crash", (json_int_t)o->tasks_nosync));
    json_object_set_new(json_object_get(doc, "meta"), "lmdb",
                        json_string(mdb_version(NULL, NULL, NULL)));
    json_t *cks = json_array(), *ratios = json_array();
    for (int i = 0; i < 4; i++) {
        const config *c = &r->cfg[i];
        int pl = i < 2;
        json_t *rows = json_array();
        const char *sq = pl ? "sqlite WAL synchronous=FULL" : "sqlite WAL synchronous=NORMAL";
        const char *ca = pl ? "cairn sync (relaxed commits)" : "cairn nosync";
        json_array_append_new(rows, tput_json(sq, "tasks", &c->sqlite_task));
        json_array_append_new(rows, tput_json(ca, "runner", &c->cairn_task));
        json_array_append_new(rows, tput_json(sq, "commits", &c->sqlite_commit));
        json_array_append_new(rows, tput_json(ca, "commits", &c->cairn_commit));
        if (pl) {
            json_array_append_new(rows, tput_json("cairn sync, every commit DURABLE", "runner",
                                                  &c->durable_task));
            json_array_append_new(rows, tput_json("cairn sync, every commit DURABLE", "commits",
                                                  &c->durable_commit));
        }
        json_array_append_new(cks, json_pack("{s:s, s:I, s:o}", "durability", c->durability,
                                             "output_bytes", (json_int_t)c->size, "rows", rows));
        double target = pl ? TARGET_POWER_LOSS : TARGET_CRASH;
        double rt = ratio(&c->cairn_task, &c->sqlite_task);
        double rc = ratio(&c->cairn_commit, &c->sqlite_commit);
        json_array_append_new(ratios, json_pack("{s:s, s:I, s:s, s:f, s:f, s:s}", "durability",
                                                c->durability, "output_bytes", (json_int_t)c->size,
                                                "compared", "runner vs tasks", "ratio", rt,
                                                "target", target, "result", verdict(rt, target)));
        json_array_append_new(ratios, json_pack("{s:s, s:I, s:s, s:f, s:f, s:s}", "durability",
                                                c->durability, "output_bytes", (json_int_t)c->size,
                                                "compared", "commit loop vs loop", "ratio", rc,
                                                "target", target, "result", verdict(rc, target)));
        if (pl)
            json_array_append_new(
                ratios, json_pack("{s:s, s:I, s:s, s:f, s:n, s:s}", "durability", c->durability,
                                  "output_bytes", (json_int_t)c->size, "compared",
                                  "DURABLE runner vs tasks", "ratio",
                                  ratio(&c->durable_task, &c->sqlite_task), "target", "result",
                                  "info"));
    }
    json_object_set_new(doc, "checkpoints", cks);
    json_object_set_new(doc, "ratios", ratios);
    json_object_set_new(
        doc, "resume_read",
        json_pack("{s:o, s:o, s:o, s:o, s:f, s:s}", "cairn_step", lat_json(&r->cairn_read_step, "us"),
                  "cairn_task", lat_json(&r->cairn_read_task, "us"), "sqlite_step",
                  lat_json(&r->sqlite_read_step, "us"), "sqlite_task",
                  lat_json(&r->sqlite_read_task, "us"), "target_p50_us", TARGET_RESUME_US,
                  "result",
                  r->cairn_read_step.done ? verdict(TARGET_RESUME_US, r->cairn_read_step.p50)
                                          : "n/a"));
    json_object_set_new(
        doc, "idempotent_hit",
        json_pack("{s:o, s:o, s:o, s:o, s:f, s:s, s:s, s:I}", "spawn_true",
                  lat_json(&r->spawn_true, "ms"), "spawn_help", lat_json(&r->spawn_help, "ms"),
                  "cairn_run", lat_json(&r->spawn_hit, "ms"), "in_process",
                  lat_json(&r->inproc_hit, "us"), "target_p50_ms", TARGET_HIT_MS, "result",
                  r->spawn_hit.done ? verdict(TARGET_HIT_MS, r->spawn_hit.p50) : "n/a", "binary",
                  r->ledger_note, "effects", (json_int_t)r->ledger_effects));
    json_t *jn = json_array();
    for (size_t i = 0; i < sizeof notes / sizeof *notes; i++)
        json_array_append_new(jn, json_string(notes[i]));
    json_object_set_new(doc, "notes", jn);
    char *s = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    if (s)
        printf("%s\n", s);
    free(s);
    json_decref(doc);
}

/* ------------------------------------------------------------------ main */

static const char usage[] =
    "usage: bench-store [--quick] [--json] [--ledger PATH] [--dir DIR] [--only SECTIONS]\n"
    "Measures cairn's checkpoint store against SQLite on the same filesystem, in one run:\n"
    "step checkpoints/s and commit latency at power-loss and process-crash durability,\n"
    "the resume read, and `cairn run` on an already-succeeded task.\n"
    "  --quick        fewer iterations (about 20 s)\n"
    "  --json         one JSON document on stdout instead of the table\n"
    "  --ledger PATH  the cairn-ledger binary (default: $CAIRN_LEDGER, else\n"
    "                 ../../examples/ledger/cairn-ledger next to this binary)\n"
    "  --dir DIR      where the scratch stores go (default: $TMPDIR or /tmp)\n"
    "  --only LIST    run only these sections (comma-separated): power-loss,\n"
    "                 process-crash, resume, hit (for profiling one of them)\n"
    "Exit status: 0 (a missed target is reported, never an error), 1 if a store failed,\n"
    "64 on bad usage.\n";

int main(int argc, char **argv)
{
    opts o = {0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            o.quick = 1;
        else if (strcmp(argv[i], "--json") == 0)
            o.json = 1;
        else if (strcmp(argv[i], "--ledger") == 0 && i + 1 < argc)
            o.ledger = argv[++i];
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            o.dir = argv[++i];
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            o.only = argv[++i];
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        } else {
            fprintf(stderr, "bench-store: unknown or incomplete option '%s'\n%s", argv[i], usage);
            return 64;
        }
    }
    o.tasks_sync = o.quick ? 100 : 400;
    o.tasks_nosync = o.quick ? 300 : 1500;
    o.reads = o.quick ? 50000 : 200000;
    o.spawns = o.quick ? 20 : 50;
    o.inproc_hits = o.quick ? 2000 : 10000;
    g_verbose = isatty(2);

    if (!o.dir)
        o.dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(g_tmp, sizeof g_tmp, "%s/cairn-bench-XXXXXX", o.dir);
    if (!mkdtemp(g_tmp)) {
        fprintf(stderr, "bench-store: cannot create a scratch directory in %s: %s\n", o.dir,
                strerror(errno));
        return 1;
    }
    struct statfs sf;
    long fs_type = statfs(g_tmp, &sf) == 0 ? (long)sf.f_type : 0;
    const char *fs = fs_name(fs_type);
    if (fs_type == 0x01021994)
        fprintf(stderr, "bench-store: warning: %s is on tmpfs, where fsync costs nothing; "
                        "use --dir on a disk-backed filesystem for meaningful numbers\n", g_tmp);

    results r;
    memset(&r, 0, sizeof r);
    static const size_t sizes[2] = {256, 8192};
    int rc = 0;
    for (int i = 0; i < 4 && !rc; i++) {
        r.cfg[i].durability = i < 2 ? "power-loss" : "process-crash";
        r.cfg[i].size = sizes[i % 2];
        if (wanted(&o, r.cfg[i].durability))
            rc = measure_config(&o, &r.cfg[i], i < 2);
    }
    if (!rc && wanted(&o, "resume"))
        rc = measure_resume(&o, &r);
    rm_tree(g_tmp);
    if (rc) {
        fprintf(stderr, "bench-store: a measurement failed (see above); no report\n");
        return 1;
    }
    /* the spawned binary failing still leaves sections 1 and 2 worth printing */
    if (wanted(&o, "hit") && (mkdir(g_tmp, 0700) == 0 || errno == EEXIST)) {
        rc = measure_hit(&o, &r);
        rm_tree(g_tmp);
    }

    char when[64], cpu[256];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
    cpu_model(cpu, sizeof cpu);
    struct utsname un;
    if (uname(&un) != 0)
        memset(&un, 0, sizeof un);
    if (o.json)
        print_json(&o, &r, when, fs, fs_type, cpu, &un);
    else
        print_text(&o, &r, when, fs, fs_type, cpu, &un);
    return rc ? 1 : 0;
}
