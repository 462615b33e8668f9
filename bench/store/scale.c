/* bench/store/scale.c - bench-store's scale mode: one store filled to many tasks, in process,
 * and what each operation costs as it grows.
 *
 * A store's everyday operations should cost the same at a million tasks as at ten thousand:
 * a commit, a resume read, `retry` over what is due, a filtered `list --limit`, `stats`. Only a
 * full `list` (and gc, which walks what it drops) may grow with the store. This fills ONE
 * nosync store through the public runner (no process per task, so a million tasks take minutes)
 * with a ledger-like graph, parse -> work -> append (an effect, counted on the receiving side),
 * and at 10k, 100k and 1M tasks (those below the fill's size, then the size itself) stops to
 * measure each operation against the same store.
 * The printed growth (last/first) is the result: a ratio in one run, not an absolute time. The
 * commit rate also moves with the machine's load over the minutes of the fill, so at each
 * checkpoint it is measured against a nearly empty store too, in alternating rounds.
 *
 * The mix makes the indexes realistic: of every 100 tasks 96 succeed, 3 fail with a retry due
 * in a day (so `failed` grows with the store, as it does in production) and 1 dies; at each
 * checkpoint 1000 more fail with a retry due at once and a `retry` runs exactly those, three
 * times. gc needs tasks older than its retention, whose unit is a second: a slice of 1000 tasks
 * per checkpoint is run first, the slices 1.5 s apart, and checkpoint k sets the retention so that
 * slice k (and the already pruned slices before it) is what gc finds.
 */
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "bench/store/bench.h"

enum {
    MAX_POINTS = 4, /* 10k, 100k, 1M, and the fill's size above them */
    FIRST_POINT = 10000,
    DUE = 1000,          /* tasks due for each retry pass */
    RETRIES = 3,         /* retry passes over DUE tasks at each checkpoint */
    SLICE = 1000,        /* tasks gc prunes at each checkpoint */
    SLICE_GAP_MS = 1500, /* between slices: more than gc's one-second retention unit */
    ROUNDS = 5,          /* commit rounds against a fresh store at each checkpoint */
    ROUND_TASKS = 400,
    READS = 3000,         /* resume reads (of one step each) per checkpoint */
    REPEAT = 15,          /* runs of each quick read-only operation; the median is printed */
    BYTES_PER_TASK = 4096 /* a generous bound for the disk check (measured: see README) */
};

typedef enum { K_OK, K_LATER, K_DEAD, K_DUE } kind;
static const char *const kind_name[] = {"ok", "later", "dead", "due"};

typedef struct scale {
    cairn_store *store;
    cairn_runner *runner;
    cairn_graph *graph;
    uint32_t next;       /* the next task number; tasks "t0000000".. */
    uint64_t effects;    /* appends the effect performed: the receiving side's count */
    uint64_t by_kind[4]; /* tasks run of each kind */
    int64_t slice_end_ms[MAX_POINTS];
    int n_points;
    char err[1024];
} scale;

/* One checkpoint's measurements. */
typedef struct row {
    uint32_t tasks;
    double commit_tps, commit_vs_fresh, resume_us, retry_ms, retry_none_ms, list_failed_ms,
        list_all_ms, stats_ms, gc_ms, gc_again_ms;
    uint64_t list_all_rows, map_used, file_bytes;
    double bytes_per_task, file_mb; /* pages in use over tasks; the files on disk */
} row;

static int64_t wall_ms(void) /* the clock the store stamps its records with */
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static double ms_since(int64_t t0) { return (double)(bench_now_ns() - t0) / 1e6; }

/* ------------------------------------------------------------------ the graph */

static const msgpack_object *input_field(const cairn_ctx *ctx, const char *k)
{
    const msgpack_object *m = cairn_ctx_input(ctx);
    size_t n = strlen(k);
    for (uint32_t i = 0; m && m->type == MSGPACK_OBJECT_MAP && i < m->via.map.size; i++) {
        const msgpack_object *key = &m->via.map.ptr[i].key;
        if (key->type == MSGPACK_OBJECT_STR && key->via.str.size == n &&
            memcmp(key->via.str.ptr, k, n) == 0)
            return &m->via.map.ptr[i].val;
    }
    return NULL;
}

static int input_is(const cairn_ctx *ctx, const char *k, const char *want)
{
    const msgpack_object *o = input_field(ctx, k);
    return o && o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(want) &&
           memcmp(o->via.str.ptr, want, o->via.str.size) == 0;
}

static cairn_step_result parse(cairn_ctx *ctx, void *user)
{
    (void)user;
    const msgpack_object *text = input_field(ctx, "text");
    msgpack_packer *pk = cairn_ctx_packer(ctx);
    msgpack_pack_map(pk, 1);
    msgpack_pack_str(pk, 5), msgpack_pack_str_body(pk, "bytes", 5);
    msgpack_pack_uint32(pk, text && text->type == MSGPACK_OBJECT_STR ? text->via.str.size : 0);
    return CAIRN_STEP_OK;
}

/* Stands for the costly call: a digest-sized output, or the failure the task's kind asks for. */
static cairn_step_result work(cairn_ctx *ctx, void *user)
{
    (void)user;
    if (input_is(ctx, "kind", "dead")) {
        cairn_ctx_set_error(ctx, "scale: a task that dies");
        return CAIRN_STEP_PERMANENT;
    }
    if (input_is(ctx, "kind", "later")) {
        cairn_ctx_set_retry_after(ctx, 24u * 3600 * 1000);
        cairn_ctx_set_error(ctx, "scale: retry in a day");
        return CAIRN_STEP_TRANSIENT;
    }
    if (input_is(ctx, "kind", "due") && cairn_ctx_invocation(ctx) == 1) {
        cairn_ctx_set_error(ctx, "scale: retry at once");
        return CAIRN_STEP_TRANSIENT; /* the retry policy's 1 ms backoff makes it due at once */
    }
    unsigned char digest[32];
    const char *id = cairn_ctx_task_id(ctx);
    for (size_t i = 0; i < sizeof digest; i++)
        digest[i] = (unsigned char)(id[i % strlen(id)] * 31u + i);
    msgpack_packer *pk = cairn_ctx_packer(ctx);
    msgpack_pack_bin(pk, sizeof digest), msgpack_pack_bin_body(pk, digest, sizeof digest);
    return CAIRN_STEP_OK;
}

static cairn_step_result append(cairn_ctx *ctx, void *user)
{
    scale *s = user;
    s->effects++;
    msgpack_pack_true(cairn_ctx_packer(ctx));
    return CAIRN_STEP_OK;
}

static cairn_graph *ledger_graph(scale *s)
{
    cairn_graph *g = cairn_graph_new("ledger", 1);
    if (!g)
        return NULL;
    cairn_step *p = cairn_graph_add_step(g, "parse", parse, NULL);
    cairn_step *w = cairn_graph_add_step(g, "work", work, "parse");
    cairn_step *a = cairn_graph_add_step(g, "append", append, "parse,work");
    /* as examples/ledger, but in process (no timeout: no child per task) */
    if (!p || !w || !a || cairn_step_set_expensive(w, 1) || cairn_step_set_retry(w, 3, 1, 1) ||
        cairn_step_set_delivery(a, CAIRN_EFFECT) || cairn_step_set_user(a, s)) {
        cairn_graph_free(g);
        return NULL;
    }
    return g;
}

/* A runner on the scale store; `retention_s` 0 keeps the default. */
static cairn_runner *open_runner(scale *s, uint64_t retention_s)
{
    cairn_runner *r = cairn_runner_new();
    int rc = r ? 0 : CAIRN_ENOMEM;
    if (!rc && retention_s)
        rc = cairn_runner_set_retention(r, retention_s, 30u * 24 * 3600);
    /* a transient failure ends the run as failed with next_retry_at, as in production */
    if (!rc && !(rc = cairn_runner_set_store(r, s->store)) &&
        !(rc = cairn_runner_set_inline_wait_ms(r, 0)) &&
        !(rc = cairn_runner_add_graph(r, s->graph)))
        rc = cairn_runner_open(r);
    if (rc) {
        snprintf(s->err, sizeof s->err, "runner: %s (%s)", r ? cairn_runner_errmsg(r) : "",
                 cairn_errname(rc));
        cairn_runner_free(r);
        return NULL;
    }
    return r;
}

/* Runs the next task as `k`; its expected outcome is not an error. */
static int run_task(scale *s, kind k)
{
    char id[32], input[256];
    uint32_t n = s->next++;
    snprintf(id, sizeof id, "t%07u", n);
    int len = snprintf(input, sizeof input,
                       "{\"text\": \"scale task %07u: a short product description\", \"n\": %u, "
                       "\"kind\": \"%s\"}",
                       n, n, kind_name[k]);
    int rc = cairn_runner_run(s->runner, "ledger", id, NULL, input, (size_t)len, NULL, NULL, 0);
    int want = k == K_OK ? 0 : k == K_DEAD ? CAIRN_EDEAD : CAIRN_ETRANSIENT;
    if (rc != want) {
        snprintf(s->err, sizeof s->err, "task %s (%s): %s, expected %s: %s", id, kind_name[k],
                 cairn_errname(rc), cairn_errname(want), cairn_runner_errmsg(s->runner));
        return -1;
    }
    s->by_kind[k]++;
    return 0;
}

/* Task n of the fill's mix: of every 100, 96 succeed, 3 fail for a day, 1 dies (so that even
 * the first checkpoint has more than 100 failed tasks to list). */
static kind mix(uint32_t n)
{
    uint32_t m = (n * 37u) % 100; /* spread the failures over the id range */
    return m < 3 ? K_LATER : m == 3 ? K_DEAD : K_OK;
}

/* ------------------------------------------------------------------ the measurements */

static int count_row(const cairn_task_row *r, void *user)
{
    uint64_t *n = user;
    (*n)++;
    return r->err; /* an unreadable row would make the count meaningless */
}

static int keep_stats(const cairn_stats *st, void *user)
{
    *(cairn_stats *)user = *st;
    return 0;
}

static double median(double *v, int n) { return bench_median(v, n); }

/* Resume reads of random succeeded tasks, each of its three steps as a resume reads it. */
static int measure_resume(scale *s, row *out)
{
    bench_samples smp = {0};
    uint32_t x = s->next;
    static const char *const steps[] = {"parse", "work", "append"};
    static const char *const deps[] = {NULL, "parse", "work"};
    int rc = 0;
    for (uint32_t i = 0; !rc && i < READS / 3;) {
        x = x * 1103515245u + 12345u;
        uint32_t n = (x >> 4) % s->next;
        if (mix(n) != K_OK || n < (uint32_t)s->n_points * SLICE)
            continue; /* failed ones, and the gc slices (outputs dropped), lack done steps */
        char id[32];
        snprintf(id, sizeof id, "t%07u", n);
        for (int k = 0; !rc && k < 3; k++) {
            int64_t t0 = bench_now_ns();
            rc = bench_store_load_step(s->store, id, steps[k], deps[k], k == 0, s->err,
                                       sizeof s->err);
            bench_samples_add(&smp, (double)(bench_now_ns() - t0));
        }
        i++;
    }
    out->resume_us = bench_samples_pct(&smp, 50) / 1e3;
    bench_samples_free(&smp);
    return rc ? -1 : 0;
}

/* Makes DUE tasks due now, then times `retry` over them (RETRIES times, the median), and over
 * nothing due. */
static int measure_retry(scale *s, row *out)
{
    double due[RETRIES];
    uint32_t ran = 0, ok = 0, bad = 0;
    int64_t t0;
    int rc;
    for (int i = 0; i < RETRIES; i++) {
        for (uint32_t k = 0; k < DUE; k++)
            if (run_task(s, K_DUE))
                return -1;
        usleep(20 * 1000); /* past the 1 ms backoff */
        t0 = bench_now_ns();
        rc = cairn_runner_retry(s->runner, "ledger", 0, 0, &ran, &ok, &bad);
        due[i] = ms_since(t0);
        if (rc || ran != DUE || ok != DUE) {
            snprintf(s->err, sizeof s->err, "retry: %s; ran %u, succeeded %u, expected %u: %s",
                     cairn_errname(rc), ran, ok, DUE, cairn_runner_errmsg(s->runner));
            return -1;
        }
    }
    out->retry_ms = median(due, RETRIES);
    double v[REPEAT];
    for (int i = 0; i < REPEAT; i++) {
        t0 = bench_now_ns();
        rc = cairn_runner_retry(s->runner, "ledger", 0, 0, &ran, &ok, &bad);
        v[i] = ms_since(t0);
        if (rc || ran) {
            snprintf(s->err, sizeof s->err, "retry with nothing due: %s, ran %u", cairn_errname(rc),
                     ran);
            return -1;
        }
    }
    out->retry_none_ms = median(v, REPEAT);
    return 0;
}

static int measure_views(scale *s, row *out)
{
    double v[REPEAT];
    cairn_state failed = CAIRN_FAILED;
    int rc = 0;
    for (int i = 0; !rc && i < REPEAT; i++) {
        uint64_t n = 0;
        int64_t t0 = bench_now_ns();
        rc = cairn_store_list(s->store, &failed, NULL, 100, count_row, &n);
        v[i] = ms_since(t0);
        if (!rc && n != 100) {
            snprintf(s->err, sizeof s->err, "list --status failed --limit 100 listed %" PRIu64, n);
            return -1;
        }
    }
    out->list_failed_ms = median(v, REPEAT);
    cairn_stats st = {0};
    for (int i = 0; !rc && i < REPEAT; i++) {
        int64_t t0 = bench_now_ns();
        rc = cairn_store_stats(s->store, keep_stats, &st);
        v[i] = ms_since(t0);
    }
    out->stats_ms = median(v, REPEAT);
    out->map_used = st.map_used;
    out->bytes_per_task = (double)st.map_used / out->tasks;
    uint64_t total = 0;
    for (int k = 0; k < CAIRN_STATE_COUNT; k++)
        total += st.by_state[k];
    if (!rc && total != out->tasks) {
        snprintf(s->err, sizeof s->err, "stats count %" PRIu64 " tasks, %u were run", total,
                 out->tasks);
        return -1;
    }
    /* full list: the one view that reads every task, so it may grow; three runs, the median */
    for (int i = 0; !rc && i < 3; i++) {
        out->list_all_rows = 0;
        int64_t t0 = bench_now_ns();
        rc = cairn_store_list(s->store, NULL, NULL, 0, count_row, &out->list_all_rows);
        v[i] = ms_since(t0);
    }
    out->list_all_ms = median(v, 3);
    if (!rc && out->list_all_rows != out->tasks) {
        snprintf(s->err, sizeof s->err, "list listed %" PRIu64 " tasks, %u were run",
                 out->list_all_rows, out->tasks);
        return -1;
    }
    if (rc)
        snprintf(s->err, sizeof s->err, "store views: %s (%s)", cairn_store_errmsg(s->store),
                 cairn_errname(rc));
    return rc ? -1 : 0;
}

/* gc with a retention that reaches exactly slice k (see the top of the file). */
static int measure_gc(scale *s, int k, row *out)
{
    uint64_t retention_s = (uint64_t)(wall_ms() - s->slice_end_ms[k]) / 1000;
    cairn_runner *r = open_runner(s, retention_s ? retention_s : 1);
    if (!r)
        return -1;
    uint32_t pruned = 0, removed = 0;
    int64_t t0 = bench_now_ns();
    int rc = cairn_runner_gc(r, &pruned, &removed);
    out->gc_ms = ms_since(t0);
    if (rc || pruned != SLICE || removed)
        snprintf(s->err, sizeof s->err, "gc: %s; pruned %u, removed %u, expected %u and 0: %s",
                 cairn_errname(rc), pruned, removed, SLICE, cairn_runner_errmsg(r));
    if (!rc && pruned == SLICE && !removed) {
        /* what every gc pays before it finds work: the walk over the tombstones kept */
        t0 = bench_now_ns();
        rc = cairn_runner_gc(r, &pruned, &removed);
        out->gc_again_ms = ms_since(t0);
        if (rc || pruned || removed)
            snprintf(s->err, sizeof s->err, "gc again: %s; pruned %u, removed %u, expected none",
                     cairn_errname(rc), pruned, removed);
        pruned = rc || pruned || removed ? 0 : SLICE;
    }
    cairn_runner_free(r);
    return rc || pruned != SLICE || removed ? -1 : 0;
}

/* The commit rate at this size against a store that is nearly empty, in alternating rounds:
 * load from elsewhere on the machine falls on both alike, so the ratio shows what the size
 * costs, where the fill's own rate also moves with the machine. */
static int measure_commit(scale *s, scale *fresh, row *out)
{
    double ratio[ROUNDS];
    for (int i = 0; i < ROUNDS; i++) {
        double rate[2];
        for (int j = 0; j < 2; j++) {
            int w = (i + j) % 2; /* who goes first alternates */
            scale *x = w ? fresh : s;
            int64_t t0 = bench_now_ns();
            for (uint32_t k = 0; k < ROUND_TASKS; k++)
                if (run_task(x, mix(x->next))) {
                    if (x != s)
                        snprintf(s->err, sizeof s->err, "fresh store: %s", x->err);
                    return -1;
                }
            rate[w] = ROUND_TASKS / ((double)(bench_now_ns() - t0) / 1e9);
        }
        ratio[i] = rate[0] / rate[1];
    }
    out->commit_vs_fresh = median(ratio, ROUNDS);
    return 0;
}

static uint64_t g_dir_bytes;
static int add_size(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)path, (void)ftw;
    if (flag == FTW_F)
        g_dir_bytes += (uint64_t)st->st_blocks * 512; /* what the disk holds, not the map */
    return 0;
}

/* ------------------------------------------------------------------ the run */

static void print_table(const row *rows, int n, uint32_t max, const scale *s)
{
    printf("\n== scale: one store filled to %u tasks in process\n", max);
    printf("store: nosync (survives a process crash, not a power cut; commits never flush)\n");
    printf("graph: parse -> work -> append (effect), in process; of every 100 tasks 96 succeed, "
           "3 fail with a retry due in a day, 1 dies; at each checkpoint %d x %u more due at "
           "once, each batch run by one retry\n",
           RETRIES, DUE);
    printf("tasks run: %" PRIu64 " ok, %" PRIu64 " failed for a day, %" PRIu64 " dead, %" PRIu64
           " due (retried); effects performed: %" PRIu64 "\n",
           s->by_kind[K_OK], s->by_kind[K_LATER], s->by_kind[K_DEAD], s->by_kind[K_DUE],
           s->effects);
    printf("%-34s", "tasks in the store");
    for (int i = 0; i < n; i++)
        printf(" %12u", rows[i].tasks);
    printf(" %10s\n", "growth");
#define LINE(label, field, fmt)                                                                    \
    do {                                                                                           \
        printf("%-34s", label);                                                                    \
        for (int i = 0; i < n; i++)                                                                \
            printf(" %12" fmt, (double)rows[i].field);                                             \
        printf(" %9.2fx\n",                                                                        \
               rows[0].field > 0 ? (double)rows[n - 1].field / (double)rows[0].field : 0.0);       \
    } while (0)
    LINE("commit rate (tasks/s, interval)", commit_tps, ".0f");
    LINE("commit rate / a fresh store's", commit_vs_fresh, ".2f");
    LINE("resume read (us/step, p50)", resume_us, ".2f");
    LINE("retry, 1000 due (ms)", retry_ms, ".1f");
    LINE("retry, nothing due (ms)", retry_none_ms, ".3f");
    LINE("list --status failed --limit 100", list_failed_ms, ".3f");
    LINE("list, all tasks (ms)", list_all_ms, ".1f");
    LINE("stats (ms)", stats_ms, ".3f");
    LINE("gc of a 1000-task slice (ms)", gc_ms, ".1f");
    LINE("gc again, nothing new (ms)", gc_again_ms, ".1f");
    LINE("file size (MB, allocated)", file_mb, ".1f");
    LINE("bytes/task (pages in use)", bytes_per_task, ".0f");
#undef LINE
    printf("growth: the last column over the first (%ux the tasks); flat is ~1x. Expected to "
           "grow: the full list (it reads every task) and gc (it walks the tombstones it "
           "keeps). Times are medians of %d runs (full list: 3; retry with %u due: %d; gc: "
           "1).\n",
           rows[n - 1].tasks / rows[0].tasks, REPEAT, DUE, RETRIES);
}

static int scale_open(scale *s, const char *path)
{
    s->store = cairn_store_new();
    s->graph = ledger_graph(s);
    if (!s->store || !s->graph) {
        snprintf(s->err, sizeof s->err, "out of memory");
        return -1;
    }
    if (cairn_store_set_durability(s->store, CAIRN_NOSYNC) || cairn_store_open(s->store, path)) {
        snprintf(s->err, sizeof s->err, "store %s: %s", path, cairn_store_errmsg(s->store));
        return -1;
    }
    return (s->runner = open_runner(s, 0)) ? 0 : -1;
}

static void scale_close(scale *s)
{
    cairn_runner_free(s->runner);
    cairn_store_free(s->store);
    cairn_graph_free(s->graph);
}

int bench_scale(const char *dir, uint32_t max, int verbose)
{
    uint32_t points[MAX_POINTS];
    int n_points = 0;
    for (uint32_t p = FIRST_POINT; p < max && n_points < MAX_POINTS - 1; p *= 10)
        points[n_points++] = p;
    points[n_points++] = max;
    char path[4096];
    snprintf(path, sizeof path, "%s/scale", dir);
    if (mkdir(path, 0700) != 0) {
        fprintf(stderr, "bench-store: cannot create %s: %s\n", path, strerror(errno));
        return -1;
    }
    struct statvfs vf;
    uint64_t need = (uint64_t)max * BYTES_PER_TASK;
    if (statvfs(path, &vf) == 0 && (uint64_t)vf.f_bavail * vf.f_frsize < need) {
        fprintf(stderr,
                "bench-store: scale: %s has %.1f GB free, and %u tasks need up to %.1f GB; "
                "pass a smaller --scale-max or a --dir with room\n",
                path, (double)vf.f_bavail * vf.f_frsize / 1e9, max, (double)need / 1e9);
        return -1;
    }
    char fresh_path[4200];
    snprintf(fresh_path, sizeof fresh_path, "%s-fresh", path);
    if (mkdir(fresh_path, 0700) != 0) {
        fprintf(stderr, "bench-store: cannot create %s: %s\n", fresh_path, strerror(errno));
        return -1;
    }
    scale s = {.n_points = n_points}, fresh = {0};
    int rc = -1;
    if (scale_open(&s, path) || scale_open(&fresh, fresh_path))
        goto fail;
    /* past its first map growths, so that the peer is not slower for being new */
    for (uint32_t i = 0; i < 3 * ROUNDS * ROUND_TASKS; i++)
        if (run_task(&fresh, mix(fresh.next)))
            goto fail;
    /* the gc slices first: they must be the oldest finished tasks */
    for (int k = 0; k < n_points; k++) {
        if (k)
            usleep(SLICE_GAP_MS * 1000);
        for (uint32_t i = 0; i < SLICE; i++)
            if (run_task(&s, K_OK))
                goto fail;
        s.slice_end_ms[k] = wall_ms();
    }
    usleep(SLICE_GAP_MS * 1000);
    row rows[MAX_POINTS] = {{0}};
    for (int k = 0; k < n_points; k++) {
        uint32_t at = points[k];
        uint32_t fill_to = at - RETRIES * DUE - ROUNDS * ROUND_TASKS, from = s.next;
        if (verbose)
            fprintf(stderr, "bench-store: scale: filling to %u tasks\n", at);
        int64_t t0 = bench_now_ns();
        while (s.next < fill_to)
            if (run_task(&s, mix(s.next)))
                goto fail;
        row *r = &rows[k];
        r->commit_tps = (double)(s.next - from) / ((double)(bench_now_ns() - t0) / 1e9);
        if (measure_commit(&s, &fresh, r) || measure_retry(&s, r))
            goto fail;
        r->tasks = s.next;
        if (verbose)
            fprintf(stderr, "bench-store: scale: measuring at %u tasks\n", at);
        if (measure_resume(&s, r) || measure_views(&s, r) || measure_gc(&s, k, r))
            goto fail;
        g_dir_bytes = 0;
        nftw(path, add_size, 8, FTW_PHYS);
        r->file_bytes = g_dir_bytes;
        r->file_mb = (double)g_dir_bytes / 1e6;
    }
    if (s.effects != s.by_kind[K_OK] + s.by_kind[K_DUE] || fresh.effects != fresh.by_kind[K_OK]) {
        snprintf(s.err, sizeof s.err, "%" PRIu64 " effects for %" PRIu64 " succeeded tasks",
                 s.effects, s.by_kind[K_OK] + s.by_kind[K_DUE]);
        goto fail;
    }
    print_table(rows, n_points, max, &s);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "bench-store: scale: %s\n", s.err[0] ? s.err : fresh.err);
out:
    scale_close(&s);
    scale_close(&fresh);
    return rc;
}
