/* bench/store/cairn_side.c - cairn's side of the benchmark: its real runner, and direct loops
 * over the store that do exactly what the runner's transactions do.
 *
 * Throughput is measured through cairn_runner_run on fresh tasks, so everything a user pays is
 * in it (JSON parse and payload hash, admission, acquire, per step the resume read and the
 * commit, the final DURABLE commit). For per-commit percentiles the runner is too coarse, so
 * commit_done_txn() below repeats runner/step.c's commit_txn for a finished compute step (kind
 * C_DONE) line for line: fenced() reads the task and checks the lease token (renewing it, and
 * so rewriting the task record, only once less than half of it is left), then the step record
 * with its output; a compute step's completion is not an audit record. load_step_txn()
 * likewise repeats load_txn. If step.c changes those transactions, change these with it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/store/bench.h"
#include "checkpoint/store_impl.h"

struct bench_cairn {
    cairn_store *store;
    cairn_runner *runner;
    cairn_graph *graph;
    void *out; /* the blob every step outputs */
    size_t out_len;
    msgpack_sbuffer input;
    char err[1024];
};

static const uint64_t TOKEN = 0x5eed5eedull; /* the commit loop's lease token */

static int used_copy(const cairn_stats *st, void *arg)
{
    *(uint64_t *)arg = st->map_used;
    return 0;
}

uint64_t bench_cairn_bytes(bench_cairn *c)
{
    uint64_t used = 0;
    return cairn_store_stats(c->store, used_copy, &used) == 0 ? used : 0;
}

typedef struct pages_arg {
    bench_db_pages *out;
    int cap, n;
} pages_arg;

static int pages_txn(cairn__txn *t, void *arg)
{
    pages_arg *a = arg;
    cairn_store *s = cairn__txn_store(t);
    const MDB_dbi dbis[] = {s->meta,    s->tasks,    s->progress, s->due,
                            s->tenants, s->finished, s->msgs,     s->msgtime};
    for (size_t i = 0; i < sizeof dbis / sizeof *dbis && a->n < a->cap; i++) {
        MDB_stat st;
        if (mdb_stat(t->txn, dbis[i], &st))
            return CAIRN_EIO;
        bench_db_pages *d = &a->out[a->n++];
        snprintf(d->name, sizeof d->name, "%s", cairn__db_name(s, dbis[i]));
        d->pages = st.ms_leaf_pages + st.ms_branch_pages + st.ms_overflow_pages;
        d->records = st.ms_entries;
        MDB_cursor *cur;
        if (mdb_cursor_open(t->txn, dbis[i], &cur))
            return CAIRN_EIO;
        MDB_val k, v;
        double used = 0;
        for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
             rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
            used += 8 + 2 + k.mv_size + v.mv_size; /* node header, pointer, key, value */
        mdb_cursor_close(cur);
        d->fill = st.ms_leaf_pages ? used / ((double)st.ms_leaf_pages * (st.ms_psize - 16)) : 0;
    }
    return 0;
}

int bench_cairn_db_pages(bench_cairn *c, bench_db_pages *out, int cap)
{
    pages_arg a = {.out = out, .cap = cap};
    return cairn__store_read(c->store, pages_txn, &a) ? 0 : a.n;
}

/* A trivial compute step: it outputs the prepared blob. */
static cairn_step_result emit(cairn_ctx *ctx, void *user)
{
    const bench_cairn *c = user;
    return cairn_ctx_set_output(ctx, c->out, c->out_len) == 0 ? CAIRN_STEP_OK
                                                              : CAIRN_STEP_PERMANENT;
}

bench_cairn *bench_cairn_open(const char *dir, cairn_durability d, int every_durable,
                              uint32_t n_steps, size_t out_size, char *err, size_t cap)
{
    bench_cairn *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, cap, "out of memory");
        return NULL;
    }
    msgpack_sbuffer_init(&c->input);
    c->out = bench_output(out_size);
    c->out_len = out_size;
    c->store = cairn_store_new();
    c->runner = cairn_runner_new();
    c->graph = cairn_graph_new("bench", 1);
    int rc = c->out && c->store && c->runner && c->graph ? 0 : CAIRN_ENOMEM;
    for (uint32_t i = 0; !rc && i < n_steps; i++) {
        char step[16], dep[16];
        snprintf(step, sizeof step, "s%u", i);
        snprintf(dep, sizeof dep, "s%u", i ? i - 1 : 0);
        cairn_step *s = cairn_graph_add_step(c->graph, step, emit, i ? dep : NULL);
        if (!s || cairn_step_set_user(s, c) || cairn_step_set_expensive(s, every_durable))
            rc = CAIRN_ENOMEM;
    }
    if (!rc &&
        ((rc = cairn_store_set_durability(c->store, d)) || (rc = cairn_store_open(c->store, dir))))
        snprintf(err, cap, "cairn store: %s", cairn_store_errmsg(c->store));
    else if (!rc && ((rc = cairn_runner_set_store(c->runner, c->store)) ||
                     (rc = cairn_runner_add_graph(c->runner, c->graph)) ||
                     (rc = cairn_runner_open(c->runner))))
        snprintf(err, cap, "cairn runner: %s", cairn_runner_errmsg(c->runner));
    else if (rc)
        snprintf(err, cap, "cairn: %s", cairn_strerror(rc));
    if (rc) {
        bench_cairn_close(c);
        return NULL;
    }
    return c;
}

void bench_cairn_close(bench_cairn *c)
{
    if (!c)
        return;
    cairn_runner_free(c->runner);
    cairn_store_free(c->store);
    cairn_graph_free(c->graph);
    msgpack_sbuffer_destroy(&c->input);
    free(c->out);
    free(c);
}

const char *bench_cairn_errmsg(const bench_cairn *c) { return c ? c->err : "no store"; }

int bench_cairn_run_task(bench_cairn *c, const char *id, uint32_t n)
{
    char input[256];
    int len = bench_input_json(n, input, sizeof input);
    int rc = cairn_runner_run(c->runner, "bench", id, NULL, input, (size_t)len, NULL, NULL, 0);
    if (rc)
        snprintf(c->err, sizeof c->err, "cairn task %s: %s (%s)", id,
                 cairn_runner_errmsg(c->runner), cairn_errname(rc));
    return rc;
}

/* ------------------------------------------------------------------ the commit loop */

typedef struct loop_arg {
    bench_cairn *c;
    const char *task, *step, *prefix;
    uint32_t first, count;
} loop_arg;

static int commit_done_txn(cairn__txn *t, void *arg)
{
    loop_arg *a = arg;
    cairn__task_rec task;
    int rc = cairn__task_get(t, a->task, &task); /* fenced() */
    if (rc)
        return rc;
    if (task.state != CAIRN_RUNNING || task.lease_token != TOKEN)
        return cairn__store_fail(cairn__txn_store(t), CAIRN_EBUSY, "task '%s': lease lost",
                                 a->task);
    int64_t now = cairn__now_ms();
    int renewed = task.lease_expires_ms - now < BENCH_LEASE_MS / 2;
    if (renewed)
        task.lease_expires_ms = now + BENCH_LEASE_MS;
    cairn__step_rec s = {.generation = task.generation, .invocations = 1, .updated_ms = now};
    snprintf(s.error, sizeof s.error, "%s", "");
    s.state = CAIRN_STEP_DONE;
    s.output = a->c->out;
    s.output_len = a->c->out_len;
    if ((rc = cairn__step_put(t, a->task, a->step, &s)))
        return rc;
    return renewed ? cairn__task_put(t, &task) : 0;
}

int bench_cairn_commit_step(bench_cairn *c, const char *task, const char *step, int durable)
{
    loop_arg a = {.c = c, .task = task, .step = step};
    int rc = cairn__store_write(c->store, durable, commit_done_txn, &a);
    if (rc)
        snprintf(c->err, sizeof c->err, "cairn commit: %s (%s)", cairn_store_errmsg(c->store),
                 cairn_errname(rc));
    return rc;
}

/* Tasks as acquire_txn leaves them: running, attempt 1, leased to this process. */
static int create_running_txn(cairn__txn *t, void *arg)
{
    loop_arg *a = arg;
    for (uint32_t i = a->first; i < a->first + a->count; i++) {
        cairn__task_rec r;
        memset(&r, 0, sizeof r);
        snprintf(r.id, sizeof r.id, "%s%06u", a->prefix, i);
        snprintf(r.graph, sizeof r.graph, "bench");
        snprintf(r.fingerprint, sizeof r.fingerprint, "%064d", 7);
        snprintf(r.payload_hash, sizeof r.payload_hash, "%064d", 9);
        snprintf(r.steps_pin, sizeof r.steps_pin,
                 "s0@1,s1@1,s2@1,s3@1,s4@1,s5@1,s6@1,s7@1,s8@1,s9@1");
        r.state = CAIRN_RUNNING;
        r.attempt = r.generation = 1;
        r.created_ms = r.updated_ms = cairn__now_ms();
        gethostname(r.owner.host, sizeof r.owner.host - 1);
        r.owner.pid = (int32_t)getpid();
        r.lease_token = TOKEN;
        r.lease_expires_ms = r.created_ms + BENCH_LEASE_MS;
        bench_input_msgpack(i, &a->c->input);
        int rc = cairn__task_put(t, &r);
        if (!rc)
            rc = cairn__input_put(t, r.id, a->c->input.data, a->c->input.size);
        if (rc)
            return rc;
    }
    return 0;
}

int bench_cairn_create_running(bench_cairn *c, const char *prefix, uint32_t first, uint32_t count)
{
    loop_arg a = {.c = c, .prefix = prefix, .first = first, .count = count};
    int rc = cairn__store_write(c->store, CAIRN__RELAXED, create_running_txn, &a);
    if (rc)
        snprintf(c->err, sizeof c->err, "cairn setup: %s (%s)", cairn_store_errmsg(c->store),
                 cairn_errname(rc));
    return rc;
}

/* ------------------------------------------------------------------ the resume read */

typedef struct read_arg {
    const char *task, *step, *dep;
    int copy_input, has_rec;
    cairn__step_rec rec;
    void *input_bytes, *dep_bytes, *progress_bytes;
    msgpack_unpacked input, dep_u, progress_u;
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

static int load_step_txn(cairn__txn *t, void *arg)
{
    read_arg *a = arg;
    cairn__task_rec task;
    int rc = cairn__task_get(t, a->task, &task);
    if (rc)
        return rc;
    if (a->copy_input) {
        const void *in;
        size_t in_len;
        if ((rc = cairn__input_get(t, a->task, &in, &in_len)) ||
            (rc = unpack_copy(in, in_len, &a->input_bytes, &a->input)))
            return rc;
    }
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

int bench_store_load_step(cairn_store *s, const char *task, const char *step, const char *dep,
                          int copy_input, char *err, size_t cap)
{
    read_arg a = {.task = task, .step = step, .dep = dep, .copy_input = copy_input};
    int rc = cairn__store_read(s, load_step_txn, &a);
    /* the runner frees these after the step; outside the read, as here */
    if (a.input_bytes)
        msgpack_unpacked_destroy(&a.input), free(a.input_bytes);
    if (a.dep_bytes)
        msgpack_unpacked_destroy(&a.dep_u), free(a.dep_bytes);
    if (a.progress_bytes)
        msgpack_unpacked_destroy(&a.progress_u), free(a.progress_bytes);
    if (!rc && (!a.has_rec || a.rec.state != CAIRN_STEP_DONE || (dep && !a.dep_bytes)))
        rc = CAIRN_ECORRUPT; /* a read that found nothing would measure nothing */
    if (rc)
        snprintf(err, cap, "cairn resume read of %s/%s: %s (%s)", task, step, cairn_store_errmsg(s),
                 cairn_errname(rc));
    return rc;
}

int bench_cairn_load_step(bench_cairn *c, const char *task, const char *step, const char *dep,
                          int copy_input)
{
    return bench_store_load_step(c->store, task, step, dep, copy_input, c->err, sizeof c->err);
}
