/* runner/step.c - one step at a time: what a step's run commits, and what it is given.
 *
 * Each step of an acquired task is run by run_step: it loads the step's record, its
 * dependencies' committed outputs and its saved progress in one read transaction (load_txn),
 * calls the step (runner/exec.c), and commits the outcome in one write transaction
 * (commit_txn) that first checks the lease token (fencing: a process that lost the task never
 * commits). A run that created its task knows that read without making it, as long as each of
 * its commits is a done step whose output it keeps (known_load); what the first step would read
 * of the task (its input, payload hash and creation time) the admission hands over, so the
 * first run of a task reads nothing back. An effect's intent is committed and flushed before the
 * step is called. The kinds of commit (done, intent, failed, dead, in doubt, stopped...) are one
 * switch, so every path a step can end on is visible in one place. Admission and the lease are
 * runner/runner.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runner/internal.h"

/* ------------------------------------------------------------------ step commits */

/* C_DONE_LAST commits the last step's output and the task's success in one transaction;
 * C_CARRIED only a carried done step (see "Carried commits" below). */
typedef enum {
    C_CARRIED,
    C_DONE,
    C_DONE_LAST,
    C_INTENT,
    C_FAILED,
    C_DEAD,
    C_IN_DOUBT,
    C_RETRY_LATER,
    C_SUCCEEDED,
    C_STOPPED,
    C_RESET
} commit_kind;

typedef struct commit_arg {
    cairn_ctx *ctx;
    commit_kind kind;
    cairn_state state; /* the task's after the commit (for its event) */
    uint32_t attempt;
    const void *out;
    size_t out_len;
    const char *err;
    int64_t next_retry_ms;
    uint32_t invocations; /* the step's invocation count to record */
} commit_arg;

/* Loads the task and checks we still hold its lease (fencing). Renews the lease once less than
 * half of it is left; *renewed says whether the task record must be written back (a step
 * commit that neither renews nor changes state leaves the task record alone: fewer bytes
 * copied into the commit's pages). */
static int fenced(cairn__txn *t, cairn_ctx *c, cairn__task_rec *task, int *renewed)
{
    int rc = cairn__task_get(t, c->task_id, task);
    if (rc)
        return rc;
    /* Lost: another run holds the lease now, or the task left `running` (released, so its
     * owner fields are empty) - finished by the run that took it over, or reset by an
     * operator (only resolve and invalidate move a task to pending). */
    if (task->state == CAIRN_RUNNING && task->lease_token != c->lease_token)
        return cairn__store_fail(cairn__txn_store(t), CAIRN_EBUSY,
                                 "task '%s': lease lost, taken over by pid %d on %s; not "
                                 "committing step '%s'",
                                 c->task_id, task->owner.pid, task->owner.host, c->step->name);
    if (task->state != CAIRN_RUNNING)
        return cairn__store_fail(cairn__txn_store(t), CAIRN_EBUSY,
                                 "task '%s': lease lost: the task is %s now (%s); not "
                                 "committing step '%s'",
                                 c->task_id, cairn_state_name((cairn_state)task->state),
                                 task->state == CAIRN_PENDING
                                     ? "reset by an operator"
                                     : "left so by the run that took its lease over",
                                 c->step->name);
    int64_t now = cairn__now_ms();
    *renewed = task->lease_expires_ms - now < (int64_t)c->r->lease_ms / 2;
    if (*renewed)
        task->lease_expires_ms = now + c->r->lease_ms;
    return 0;
}

static int commit_txn(cairn__txn *t, void *arg)
{
    commit_arg *a = arg;
    cairn_ctx *c = a->ctx;
    cairn__task_rec task;
    int renewed = 0;
    int rc = fenced(t, c, &task, &renewed);
    if (rc)
        return rc;
    if (c->carry.pending) { /* the done step before this commit's, carried to it */
        const struct cairn__kept *k = &c->kept[c->carry.ix];
        cairn__step_rec d = {.state = CAIRN_STEP_DONE,
                             .generation = c->generation,
                             .invocations = c->carry.invocations,
                             .updated_ms = c->carry.updated_ms,
                             .output = k->bytes,
                             .output_len = k->len};
        if ((rc = cairn__step_put(t, c->task_id, c->carry.step->name, &d)))
            return rc;
    }
    cairn__step_rec s = {
        .generation = c->generation, .invocations = a->invocations, .updated_ms = cairn__now_ms()};
    if (a->err && a->err[0]) /* a done step has none: no snprintf (1.4 % of its instructions) */
        snprintf(s.error, sizeof s.error, "%s", a->err);
    const char *step = c->step->name;
    switch (a->kind) {
    case C_CARRIED: /* the carried step's record alone (above) */
        if (renewed)
            rc = cairn__task_put(t, &task);
        a->state = (cairn_state)task.state;
        a->attempt = task.attempt;
        return rc;
    case C_DONE:
    case C_DONE_LAST:
        s.state = CAIRN_STEP_DONE;
        s.output = a->out;
        s.output_len = a->out_len;
        /* The audit trail holds transitions, effects, failures and operator actions; a compute
         * step's completion is its step record (time, invocations), so its commit writes one
         * record, not two (a quarter of a nosync commit's cost). */
        if (c->step->delivery != CAIRN_COMPUTE)
            rc = cairn__audit(t, &task, CAIRN_RUNNING, CAIRN_RUNNING, step,
                              "effect done (invocation %u)", a->invocations);
        if (!rc && a->kind == C_DONE_LAST) {
            task.error[0] = task.error_step[0] = 0;
            cairn__release_lease(&task);
            rc = cairn__transition(t, &task, CAIRN_SUCCEEDED, 0, NULL, "all steps done");
        }
        break;
    case C_INTENT:
        s.state = CAIRN_STEP_INTENT;
        s.intent_ms = s.updated_ms;
        rc = cairn__audit(t, &task, CAIRN_RUNNING, CAIRN_RUNNING, step, "effect intent %s",
                          cairn__delivery_id(c));
        break;
    case C_FAILED:
        s.state = CAIRN_STEP_FAILED;
        rc = cairn__audit(t, &task, CAIRN_RUNNING, CAIRN_RUNNING, step, "step failed: %s", s.error);
        break;
    case C_RESET: /* a probe said the effect did not happen: clear the intent */
        s.state = CAIRN_STEP_PENDING;
        rc = cairn__audit(t, &task, CAIRN_RUNNING, CAIRN_RUNNING, step,
                          "probe: effect did not happen");
        break;
    case C_RETRY_LATER:
        s.state = CAIRN_STEP_FAILED;
        task.next_retry_ms = a->next_retry_ms;
        snprintf(task.error, sizeof task.error, "%s", s.error);
        snprintf(task.error_step, sizeof task.error_step, "%s", step);
        cairn__release_lease(&task);
        rc = cairn__transition(t, &task, CAIRN_FAILED, 0, step, s.error);
        break;
    case C_DEAD:
        s.state = CAIRN_STEP_FAILED;
        snprintf(task.error, sizeof task.error, "%s", s.error);
        snprintf(task.error_step, sizeof task.error_step, "%s", step);
        cairn__release_lease(&task);
        rc = cairn__transition(t, &task, CAIRN_DEAD, 0, step, s.error);
        break;
    case C_IN_DOUBT:
        s.state = CAIRN_STEP_IN_DOUBT;
        snprintf(task.error, sizeof task.error, "%s", s.error);
        snprintf(task.error_step, sizeof task.error_step, "%s", step);
        cairn__release_lease(&task);
        rc = cairn__transition(t, &task, CAIRN_IN_DOUBT, 0, step, s.error);
        break;
    case C_STOPPED: /* interrupted: the step's output is dropped, the task is due at once */
        /* A stop is the operator's (a deploy, a shutdown), not the task's failure: the attempt
         * it cut short is not counted, so restarts never use up a healthy task's attempts. A
         * run abandoned for an unexpected error (a corrupt record, no memory) keeps its
         * attempt: such a task must still die after max_attempts. */
        if (c->r->stop && task.attempt > 0)
            task.attempt--;
        task.next_retry_ms = cairn__now_ms();
        if (a->err)
            snprintf(task.error, sizeof task.error, "%s", a->err);
        else
            snprintf(task.error, sizeof task.error, "interrupted by a signal during step '%s'",
                     step);
        snprintf(task.error_step, sizeof task.error_step, "%s", step);
        cairn__release_lease(&task);
        rc = cairn__transition(t, &task, CAIRN_FAILED, 0, step, task.error);
        if (!rc)
            rc = cairn__task_put(t, &task);
        a->state = (cairn_state)task.state;
        a->attempt = task.attempt;
        return rc; /* the step record is left as it was */
    case C_SUCCEEDED:
        task.error[0] = task.error_step[0] = 0;
        cairn__release_lease(&task);
        rc = cairn__transition(t, &task, CAIRN_SUCCEEDED, 0, NULL, "all steps done");
        if (!rc)
            rc = cairn__task_put(t, &task);
        a->state = (cairn_state)task.state;
        a->attempt = task.attempt;
        return rc;
    }
    if (!rc)
        rc = cairn__step_put(t, c->task_id, step, &s);
    if (!rc && (renewed || task.state != CAIRN_RUNNING))
        rc = cairn__task_put(t, &task);
    a->state = (cairn_state)task.state;
    a->attempt = task.attempt;
    return rc;
}

/* The runner's events (cairn_runner_set_events) for a commit that happened: what it did to the
 * step, then what it did to the task. */
static void emit(cairn_ctx *c, const char *event, const char *step, const commit_arg *a,
                 int64_t duration_ms)
{
    cairn_event ev = {.task_id = c->task_id,
                      .step = step,
                      .event = event,
                      .state = a->state,
                      .attempt = a->attempt,
                      .invocation = *step ? a->invocations : 0,
                      .duration_ms = duration_ms > 0 ? (uint64_t)duration_ms : 0,
                      .message = a->err ? a->err : ""};
    c->r->events(&ev, c->r->events_user);
}

static void commit_events(cairn_ctx *c, const commit_arg *a)
{
    static const char *const step_event[] = {
        [C_DONE] = "step_done",     [C_DONE_LAST] = "step_done", [C_INTENT] = "step_intent",
        [C_FAILED] = "step_failed", [C_RESET] = "step_reset",
    };
    static const char *const task_event[] = {
        [C_DONE_LAST] = "task_succeeded", [C_SUCCEEDED] = "task_succeeded",
        [C_RETRY_LATER] = "task_failed",  [C_DEAD] = "task_dead",
        [C_IN_DOUBT] = "task_in_doubt",   [C_STOPPED] = "task_stopped",
    };
    int64_t took = a->kind != C_INTENT && c->call_ms ? cairn__now_ms() - c->call_ms : 0;
    if (c->carry.pending) { /* the carried step's completion came first */
        commit_arg d = *a;
        d.kind = C_DONE, d.invocations = c->carry.invocations, d.err = NULL;
        emit(c, "step_done", c->carry.step->name, &d, c->carry.took_ms);
    }
    if (a->kind == C_CARRIED)
        return;
    const char *step = c->step ? c->step->name : "";
    if (step_event[a->kind])
        emit(c, step_event[a->kind], step, a, took);
    if (task_event[a->kind])
        emit(c, task_event[a->kind], a->kind == C_DONE_LAST || a->kind == C_SUCCEEDED ? "" : step,
             a, took);
}

static int commit(cairn_ctx *c, commit_kind kind, int durable, const void *out, size_t out_len,
                  const char *err, uint32_t invocations, int64_t next_retry_ms)
{
    commit_arg a = {.ctx = c,
                    .kind = kind,
                    .out = out,
                    .out_len = out_len,
                    .err = err,
                    .invocations = invocations,
                    .next_retry_ms = next_retry_ms};
    /* a record other than a done step's (or the intent before it) ends what the run knows */
    if (kind != C_CARRIED && kind != C_DONE && kind != C_DONE_LAST && kind != C_INTENT)
        c->known = 0;
    int rc = cairn__store_write(c->r->store, durable, commit_txn, &a);
    if (rc)
        return cairn__runner_store_fail(c->r, rc);
    if (durable) /* a durable point flushes every commit before it */
        c->owed = 0;
    if (c->r->events)
        commit_events(c, &a);
    c->carry.pending = 0;
    return 0;
}

/* Carried commits. An expensive compute step's output followed by an effect is not committed
 * on its own: nothing runs between it and the effect's intent but the effect's resume read,
 * which the run knows without reading (known_load), so the intent's transaction writes both.
 * One write transaction a task fewer (a fifth of a ledger task's), and the same promise: the
 * output is on disk before the world can change, and a crash before the intent loses it as a
 * crash during the step would. Whatever commit comes next carries it (the intent, a stop, a
 * release after an error); a resume read that has to read flushes it first (carry_flush). */
static int carry_flush(cairn_ctx *c)
{
    return c->carry.pending ? commit(c, C_CARRIED, CAIRN__RELAXED, NULL, 0, NULL, 0, 0) : 0;
}

typedef struct progress_arg {
    cairn_ctx *ctx;
    const void *data;
    size_t len;
} progress_arg;

static int progress_txn(cairn__txn *t, void *arg)
{
    progress_arg *a = arg;
    cairn__task_rec task;
    int renewed = 0;
    int rc = fenced(t, a->ctx, &task, &renewed);
    if (!rc && a->data)
        rc = cairn__progress_put(t, a->ctx->task_id, a->ctx->step->name, a->ctx->generation,
                                 a->data, a->len);
    if (!rc && renewed)
        rc = cairn__task_put(t, &task);
    return rc;
}

int cairn__commit_progress(cairn_ctx *c, const void *data, size_t len)
{
    progress_arg a = {c, data, len};
    int rc = cairn__store_write(c->r->store, CAIRN__RELAXED, progress_txn, &a);
    return rc ? cairn__runner_store_fail(c->r, rc) : 0;
}

int cairn__renew_lease(cairn_ctx *c) { return cairn__commit_progress(c, NULL, 0); }

/* ------------------------------------------------------------------ loading a step's inputs */

typedef struct load_arg {
    cairn_ctx *ctx;
    const cairn_graph *g;
    cairn__step_rec rec; /* the step's own record (state copied; pointers not kept) */
    int has_rec;
} load_arg;

static void *dup_bytes(const void *p, size_t n)
{
    void *d = malloc(n ? n : 1);
    if (d && n)
        memcpy(d, p, n);
    return d;
}

static int unpack_copy(const void *p, size_t n, void **bytes, size_t *len, msgpack_unpacked *u)
{
    size_t off = 0;
    *bytes = dup_bytes(p, n);
    *len = n;
    if (!*bytes)
        return CAIRN_ENOMEM;
    msgpack_unpacked_init(u);
    if (msgpack_unpack_next(u, *bytes, n, &off) != MSGPACK_UNPACK_SUCCESS)
        return CAIRN_ECORRUPT;
    return 0;
}

static int load_txn(cairn__txn *t, void *arg)
{
    load_arg *a = arg;
    cairn_ctx *c = a->ctx;
    cairn__task_rec task;
    int rc = cairn__task_get(t, c->task_id, &task);
    if (rc)
        return rc;
    memcpy(c->payload_hash, task.payload_hash, sizeof c->payload_hash);
    c->created_ms = task.created_ms;
    if (!c->input_bytes) {
        const void *in;
        size_t in_len;
        rc = cairn__input_get(t, c->task_id, &in, &in_len);
        if (rc == CAIRN_ENOTFOUND)
            return cairn__store_fail(cairn__txn_store(t), CAIRN_ECORRUPT,
                                     "task '%s' has no stored input", c->task_id);
        if (rc || (rc = unpack_copy(in, in_len, &c->input_bytes, &c->input_len, &c->input)))
            return rc;
    }
    cairn__step_rec s;
    rc = cairn__step_get(t, c->task_id, c->step->name, c->generation, &s);
    a->has_rec = rc == 0;
    if (rc == 0) {
        a->rec = s;
        a->rec.output = NULL;
    } else if (rc != CAIRN_ENOTFOUND)
        return rc;
    /* dependencies' committed outputs */
    for (size_t i = 0; i < c->n_deps; i++) {
        cairn__dep *d = &c->deps[i];
        if (d->present || d->bytes)
            continue;
        rc = cairn__step_get(t, c->task_id, d->name, c->generation, &s);
        if (rc == 0 && s.state == CAIRN_STEP_DONE && s.output) {
            if ((rc = unpack_copy(s.output, s.output_len, &d->bytes, &d->len, &d->u)))
                return rc;
            d->present = 1;
        } else if (rc && rc != CAIRN_ENOTFOUND)
            return rc;
    }
    const void *p;
    size_t n;
    if (c->has_progress) {
        msgpack_unpacked_destroy(&c->progress);
        free(c->progress_bytes);
        c->progress_bytes = NULL;
        c->has_progress = 0;
    }
    rc = cairn__progress_get(t, c->task_id, c->step->name, c->generation, &p, &n);
    if (rc == 0) {
        if ((rc = unpack_copy(p, n, &c->progress_bytes, &c->progress_len, &c->progress)))
            return rc;
        c->has_progress = 1;
    } else if (rc != CAIRN_ENOTFOUND)
        return rc;
    return 0;
}

/* The resume read of a step, known without reading: the run created the task (admission), and
 * every record of it since is this run's commit of a done step, each with its output kept here.
 * So the step has no record and no progress, and its dependencies' outputs are the ones kept;
 * the task's fields load_txn reads (payload hash, creation time, input) came with the
 * admission (cairn__run_acquired), else from the first step's load. A lost lease changes nothing
 * here: the commit's fence refuses it, as it refuses a read one. 1 if `a` is filled, 0 if the step
 * must be read (nothing known, or no memory). */
static int known_load(cairn_ctx *c, load_arg *a)
{
    if (!c->known || !c->input_bytes)
        return 0;
    const cairn_step *s = c->step;
    for (size_t i = 0; i < c->n_deps; i++)
        if (!c->kept[s->deps[i]].done)
            return 0;
    for (size_t i = 0; i < c->n_deps; i++) {
        const struct cairn__kept *k = &c->kept[s->deps[i]];
        cairn__dep *d = &c->deps[i];
        if (!k->bytes || d->bytes)
            continue;
        size_t off = 0; /* unpacked in place: the kept bytes outlive the step */
        msgpack_unpacked_init(&d->u);
        if (msgpack_unpack_next(&d->u, k->bytes, k->len, &off) != MSGPACK_UNPACK_SUCCESS) {
            msgpack_unpacked_destroy(&d->u);
            return 0; /* load_txn reads what is not present yet */
        }
        d->bytes = k->bytes, d->len = k->len, d->borrowed = 1, d->present = 1;
    }
    a->has_rec = 0;
    if (c->has_progress) {
        msgpack_unpacked_destroy(&c->progress);
        free(c->progress_bytes);
        c->progress_bytes = NULL;
        c->has_progress = 0;
    }
    return 1;
}

/* A done step's output, kept for the steps after it that depend on it (known_load); past
 * KEEP_MAX bytes in all, the run stops keeping and the later steps read theirs. Takes o->out. */
#define KEEP_MAX (4u << 20)
static void keep_output(cairn_ctx *c, cairn__outcome *o)
{
    if (!c->known)
        return;
    if (c->kept_bytes + o->out_len > KEEP_MAX) {
        c->known = 0;
        return;
    }
    struct cairn__kept *k = &c->kept[c->step_ix];
    k->bytes = o->out, k->len = o->out_len, k->done = 1;
    c->kept_bytes += o->out_len;
    o->out = NULL, o->out_len = 0;
}

static void ctx_clear(cairn_ctx *c)
{
    for (size_t i = 0; i < c->n_deps; i++) {
        if (c->deps[i].bytes) {
            msgpack_unpacked_destroy(&c->deps[i].u);
            if (!c->deps[i].borrowed)
                free(c->deps[i].bytes);
        }
    }
    free(c->deps);
    c->deps = NULL;
    c->n_deps = 0;
    if (c->has_progress) {
        msgpack_unpacked_destroy(&c->progress);
        free(c->progress_bytes);
    }
    c->has_progress = 0;
    c->progress_bytes = NULL;
}

/* ------------------------------------------------------------------ retry budgets */

/* When a step's time budget began: the first record of its audit trail in this generation that
 * a run wrote (an effect's first intent, a compute step's first failure), after the last time
 * an operator sent it back to pending (resolve). The trail is the store's own record of the
 * step, so the budget holds across processes with no field of its own. */
typedef struct budget_arg {
    cairn_ctx *ctx;
    int64_t start_ms; /* 0: none yet */
} budget_arg;

static int budget_rec(const cairn__audit_rec *rec, void *arg)
{
    budget_arg *a = arg;
    if (rec->generation != a->ctx->generation || strcmp(rec->step, a->ctx->step->name) != 0)
        return 0;
    if (rec->to == CAIRN_PENDING)
        a->start_ms = 0;
    else if (rec->from == CAIRN_RUNNING && !a->start_ms)
        a->start_ms = rec->t_ms;
    return 0;
}

static int budget_txn(cairn__txn *t, void *arg)
{
    budget_arg *a = arg;
    a->start_ms = 0;
    return cairn__audit_each(t, a->ctx->task_id, budget_rec, a);
}

/* "45 s", "12 min", "24 h": a duration as a message states it (rounded down). */
static const char *span(char buf[24], int64_t ms)
{
    int64_t s = ms / 1000;
    if (s < 600)
        snprintf(buf, 24, "%lld s", (long long)s);
    else if (s < 7200)
        snprintf(buf, 24, "%lld min", (long long)(s / 60));
    else
        snprintf(buf, 24, "%lld h %lld min", (long long)(s / 3600), (long long)(s / 60 % 60));
    return buf;
}

/* For a step with a time budget that failed transiently: 0 with the wait before its next try
 * in *delay (the backoff and Retry-After already in it, cut to the budget's end), or, when the
 * budget is spent, 1 with the reason in why. */
static int budget_check(cairn_ctx *c, uint32_t inv, const cairn__outcome *o, uint32_t *delay,
                        char *why, size_t whylen)
{
    budget_arg a = {.ctx = c};
    int rc = cairn__store_read(c->r->store, budget_txn, &a);
    if (rc)
        return cairn__runner_store_fail(c->r, rc);
    int64_t now = cairn__now_ms(), start = a.start_ms && a.start_ms < now ? a.start_ms : now;
    uint32_t wait;
    int spent = cairn__budget_wait(c->step, start, now, *delay, o->retry_after_ms, &wait);
    char tried[24], budget[24], left[24], asked[24];
    span(tried, now - start), span(budget, c->step->budget_ms);
    if (spent == 1)
        snprintf(why, whylen,
                 "step '%s' failed for %s, the whole of its retry budget of %s (%u "
                 "invocations); last error: %s",
                 c->step->name, tried, budget, inv, o->err);
    else if (spent == 2)
        snprintf(why, whylen,
                 "step '%s' was asked to wait %s (Retry-After), more than the %s left of its "
                 "retry budget of %s (tried for %s, %u invocations); last error: %s",
                 c->step->name, span(asked, o->retry_after_ms), span(left, wait), budget, tried,
                 inv, o->err);
    *delay = wait;
    return spent ? 1 : 0;
}

/* ------------------------------------------------------------------ one step */

static void sleep_ms(cairn_runner *r, uint32_t ms)
{
    while (ms && !r->stop) {
        uint32_t chunk = ms > 50 ? 50 : ms;
        struct timespec ts = {0, (long)chunk * 1000000L};
        nanosleep(&ts, NULL);
        ms -= chunk;
    }
}

/* Whether the step after s in g's order is an effect. */
static int effect_next(const cairn_graph *g, const cairn_step *s)
{
    for (size_t i = 0; i + 1 < g->n_steps; i++)
        if (g->order[i] == s->index)
            return g->steps[g->order[i + 1]]->delivery != CAIRN_COMPUTE;
    return 0;
}

/* Runs step `s` until it is done or the task leaves `running`. Returns 0 when the step is done
 * (or was already), else the code the run ends with. */
static int run_step(cairn_ctx *c, const cairn_graph *g)
{
    cairn_runner *r = c->r;
    const cairn_step *s = c->step;
    c->deps = calloc(s->n_deps ? s->n_deps : 1, sizeof *c->deps);
    if (!c->deps)
        return CAIRN_ENOMEM;
    c->n_deps = s->n_deps;
    for (size_t i = 0; i < s->n_deps; i++)
        c->deps[i].name = g->steps[s->deps[i]]->name;
    c->delivery_id[0] = 0; /* derived on first use (effects, or a step that asks) */
    int rc;
    for (int first = 1;; first = 0) {
        load_arg la = {.ctx = c, .g = g};
        if (!(first && known_load(c, &la))) {
            if ((rc = carry_flush(c))) /* (commit reported it) */
                return rc;
            if ((rc = cairn__store_read(r->store, load_txn, &la)))
                return cairn__runner_store_fail(r, rc);
        }
        uint32_t inv = la.has_rec ? la.rec.invocations : 0;
        cairn_step_state st = la.has_rec ? (cairn_step_state)la.rec.state : CAIRN_STEP_PENDING;
        if (st == CAIRN_STEP_DONE) {
            if (c->owed) { /* no intent of this step's will flush the output owed */
                if ((rc = cairn__store_settle(r->store, 0)))
                    return cairn__runner_store_fail(r, rc);
                c->owed = 0;
            }
            return 0;
        }
        if (r->stop) { /* asked to stop (also during a backoff wait): start nothing new */
            int crc = commit(c, C_STOPPED, CAIRN__DURABLE, NULL, 0, NULL, inv, 0);
            return crc ? crc
                       : cairn__runner_fail(r, CAIRN_EINTR, "task '%s': stopped before step '%s'",
                                            c->task_id, s->name);
        }
        int probe = 0;
        if (st == CAIRN_STEP_INTENT || st == CAIRN_STEP_IN_DOUBT) {
            /* an effect was (maybe) performed by a run that died before recording it */
            if (s->delivery == CAIRN_EFFECT_AT_LEAST_ONCE) {
                /* call again with the same delivery ID */
            } else if (s->probe && st == CAIRN_STEP_INTENT) {
                probe = 1;
            } else {
                char why[CAIRN__ERR_MAX];
                snprintf(why, sizeof why,
                         "effect '%s' (delivery %s) was started but its outcome was never "
                         "recorded",
                         s->name, cairn__delivery_id(c));
                rc = commit(c, C_IN_DOUBT, CAIRN__DURABLE, NULL, 0, why, inv, 0);
                return rc ? rc
                          : cairn__runner_fail(r, CAIRN_EINDOUBT, "task '%s': %s", c->task_id, why);
            }
        }
        if (!probe && inv >= s->max_invocations) {
            char why[CAIRN__ERR_MAX];
            snprintf(why, sizeof why, "step '%s' used all %u invocations; last error: %s", s->name,
                     s->max_invocations, la.has_rec ? la.rec.error : "");
            rc = commit(c, C_DEAD, CAIRN__DURABLE, NULL, 0, why, inv, 0);
            return rc ? rc : cairn__runner_fail(r, CAIRN_EDEAD, "task '%s': %s", c->task_id, why);
        }
        if (!probe)
            inv++;
        c->invocation = inv;
        if (!probe && s->delivery != CAIRN_COMPUTE) {
            /* the intent must be on disk before the world can change */
            rc = commit(c, C_INTENT, CAIRN__DURABLE, NULL, 0, NULL, inv, 0);
            if (rc)
                return rc;
        }
        cairn__outcome o;
        c->call_ms = cairn__now_ms();
        rc = cairn__exec_step(c, probe, &o);
        if (rc == CAIRN_EINTR || (r->stop && s->delivery == CAIRN_COMPUTE)) {
            cairn__outcome_free(&o);
            int crc = commit(c, C_STOPPED, CAIRN__DURABLE, NULL, 0, NULL, inv, 0);
            return crc ? crc
                       : cairn__runner_fail(r, CAIRN_EINTR,
                                            "task '%s': stopped during step '%s'; output not "
                                            "committed",
                                            c->task_id, s->name);
        }
        if (rc) {
            cairn__outcome_free(&o);
            return rc;
        }
        cairn_step_result res = o.result;
        if (probe && res == CAIRN_STEP_TRANSIENT) {
            /* the probe says it never happened: clear the intent and perform it now */
            cairn__outcome_free(&o);
            rc = commit(c, C_RESET, CAIRN__RELAXED, NULL, 0, NULL, inv, 0);
            if (rc)
                return rc;
            continue;
        }
        if (res == CAIRN_STEP_UNKNOWN && s->delivery == CAIRN_COMPUTE)
            res = CAIRN_STEP_TRANSIENT;
        if (res == CAIRN_STEP_UNKNOWN && s->delivery == CAIRN_EFFECT_AT_LEAST_ONCE)
            res = CAIRN_STEP_TRANSIENT; /* sent again later with the same delivery ID */
        if (!o.err[0] && res != CAIRN_STEP_OK)
            snprintf(o.err, sizeof o.err, "step '%s' failed", s->name);
        int durable = s->expensive || s->delivery != CAIRN_COMPUTE;
        switch (res) {
        case CAIRN_STEP_OK:
            if (c->last_step) {
                rc = commit(c, C_DONE_LAST, CAIRN__DURABLE, o.out, o.out_len, NULL, inv, 0);
                c->finished = rc == 0;
                c->known = 0; /* nothing runs after it */
            } else {
                /* An expensive step's output followed by an effect is flushed by that effect's
                 * intent, the durable point that comes next (nothing but its resume read runs
                 * between), rather than by a flush of its own: one flush, not two, before the
                 * effect, and the same promise (the output is on disk before the world can
                 * change; a power cut in between may lose it, as it may during the step). */
                int defer = durable && s->delivery == CAIRN_COMPUTE && effect_next(g, s);
                if (defer && c->known) {
                    keep_output(c, &o);
                    if (c->known) { /* kept: carried to the intent (see "Carried commits") */
                        int64_t now = cairn__now_ms();
                        c->carry = (struct cairn__carry){.pending = 1,
                                                         .step = s,
                                                         .ix = c->step_ix,
                                                         .invocations = inv,
                                                         .updated_ms = now,
                                                         .took_ms = now - c->call_ms};
                        c->owed = 1;
                        cairn__outcome_free(&o);
                        return 0;
                    }
                }
                rc = commit(c, C_DONE, durable && !defer, o.out, o.out_len, NULL, inv, 0);
                c->owed |= rc == 0 && defer;
                if (rc == 0)
                    keep_output(c, &o);
            }
            cairn__outcome_free(&o);
            return rc;
        case CAIRN_STEP_PERMANENT:
            rc = commit(c, C_DEAD, CAIRN__DURABLE, NULL, 0, o.err, inv, 0);
            if (!rc)
                rc = cairn__runner_fail(r, CAIRN_EDEAD, "task '%s' is dead: step '%s': %s",
                                        c->task_id, s->name, o.err);
            cairn__outcome_free(&o);
            return rc;
        case CAIRN_STEP_UNKNOWN:
            rc = commit(c, C_IN_DOUBT, CAIRN__DURABLE, NULL, 0, o.err, inv, 0);
            if (!rc)
                rc = cairn__runner_fail(r, CAIRN_EINDOUBT,
                                        "task '%s' is in doubt: effect '%s' (delivery %s): %s",
                                        c->task_id, s->name, cairn__delivery_id(c), o.err);
            cairn__outcome_free(&o);
            return rc;
        case CAIRN_STEP_TRANSIENT:
        default:
            break;
        }
        /* transient: retry inline if the backoff is short, else leave it to `cairn retry` */
        uint32_t delay = cairn__backoff_ms(s, inv, &r->rng);
        if (o.retry_after_ms > delay) /* the receiver asked for more time (Retry-After) */
            delay = o.retry_after_ms;
        char why[CAIRN__ERR_MAX];
        int spent = 0;
        if (inv >= s->max_invocations) {
            snprintf(why, sizeof why, "step '%s' failed on all %u invocations; last: %s", s->name,
                     inv, o.err);
            spent = 1;
        } else if (s->budget_ms &&
                   (spent = budget_check(c, inv, &o, &delay, why, sizeof why)) < 0) {
            cairn__outcome_free(&o);
            return spent;
        }
        if (spent) {
            rc = commit(c, C_DEAD, CAIRN__DURABLE, NULL, 0, why, inv, 0);
            cairn__outcome_free(&o);
            return rc ? rc
                      : cairn__runner_fail(r, CAIRN_EDEAD, "task '%s' is dead: %s", c->task_id,
                                           why);
        }
        if (r->inline_wait_ms && delay <= r->inline_wait_ms && !r->stop) {
            rc = commit(c, C_FAILED, CAIRN__RELAXED, NULL, 0, o.err, inv, 0);
            cairn__outcome_free(&o);
            if (rc)
                return rc;
            sleep_ms(r, delay);
            continue;
        }
        int64_t next = cairn__now_ms() + delay;
        if (c->attempt >= r->max_attempts) {
            snprintf(why, sizeof why, "step '%s' failed and the task used all %u attempts: %s",
                     s->name, r->max_attempts, o.err);
            rc = commit(c, C_DEAD, CAIRN__DURABLE, NULL, 0, why, inv, 0);
            cairn__outcome_free(&o);
            return rc ? rc
                      : cairn__runner_fail(r, CAIRN_EDEAD, "task '%s' is dead: %s", c->task_id,
                                           why);
        }
        rc = commit(c, C_RETRY_LATER, CAIRN__DURABLE, NULL, 0, o.err, inv, next);
        if (!rc)
            rc = cairn__runner_fail(r, CAIRN_ETRANSIENT,
                                    "task '%s' failed transiently at step '%s': %s; next retry in "
                                    "%u ms",
                                    c->task_id, s->name, o.err, delay);
        cairn__outcome_free(&o);
        return rc;
    }
}

/* ------------------------------------------------------------------ running a task */

/* Runs the steps of a task whose lease `a` holds (or reports why it does not run). */
int cairn__run_acquired(cairn_runner *r, const cairn_graph *g, const char *id, const acquire_arg *a)
{
    int rc = 0;
    void *input = a->fresh ? a->input : NULL; /* the admitted input: this run's to free */
    /* a finished task is reported as the store has it: make sure that survives a power loss
     * (another process may have just committed it; `dead` was a relaxed acquire) */
    if (a->finished && (rc = cairn__store_settle(r->store, a->finished == 1 ? a->state_txn : 0))) {
        free(input);
        return cairn__runner_store_fail(r, rc);
    }
    if (a->finished)
        free(input);
    if (a->finished == 1)
        return 0;
    if (a->finished == 2)
        return cairn__runner_fail(r, CAIRN_EDEAD, "task '%s' is dead: gave up after %u attempts",
                                  id, r->max_attempts);
    cairn_ctx c;
    memset(&c, 0, sizeof c);
    c.r = r;
    c.task_id = id;
    c.generation = a->generation;
    c.attempt = a->attempt;
    c.lease_token = a->token;
    c.child_fd = -1;
    if ((rc = cairn__store_id(r->store, c.store_id))) { /* before a child may be forked */
        free(input);
        return cairn__runner_store_fail(r, rc);
    }
    msgpack_sbuffer_init(&c.out);
    msgpack_packer_init(&c.pk, &c.out, msgpack_sbuffer_write);
    if (a->fresh && (c.kept = calloc(g->n_steps, sizeof *c.kept)))
        c.known = 1;
    if (input) { /* what the first step's load would read: the input, its hash, its time */
        size_t off = 0;
        msgpack_unpacked_init(&c.input);
        if (msgpack_unpack_next(&c.input, input, a->input_len, &off) == MSGPACK_UNPACK_SUCCESS) {
            c.input_bytes = input, c.input_len = a->input_len;
            memcpy(c.payload_hash, a->payload_hash, sizeof c.payload_hash);
            c.created_ms = a->created_ms;
        } else {
            msgpack_unpacked_destroy(&c.input);
            free(input); /* the first step reads it, as a resumed task does */
        }
    }
    if (r->events) { /* the acquire that took the lease has committed */
        commit_arg started = {.state = CAIRN_RUNNING, .attempt = c.attempt};
        emit(&c, "task_started", "", &started, 0);
    }
    for (size_t i = 0; i < g->n_steps && rc == 0; i++) {
        c.step = g->steps[g->order[i]];
        c.step_ix = g->order[i];
        c.last_step = i + 1 == g->n_steps;
        rc = run_step(&c, g);
        ctx_clear(&c);
        if (rc == 0 && r->stop && !c.finished) {
            rc = commit(&c, C_STOPPED, CAIRN__DURABLE, NULL, 0, NULL, 0, 0);
            if (!rc)
                rc = cairn__runner_fail(r, CAIRN_EINTR, "task '%s': stopped after step '%s'", id,
                                        c.step->name);
        }
    }
    if (rc == 0 && !c.finished) /* the last step was done already (a crash came before) */
        rc = commit(&c, C_SUCCEEDED, CAIRN__DURABLE, NULL, 0, NULL, 0, 0);
    else if (rc != 0 && rc != CAIRN_ETRANSIENT && rc != CAIRN_EDEAD && rc != CAIRN_EINDOUBT &&
             rc != CAIRN_EINTR && rc != CAIRN_EBUSY) {
        /* an unexpected error (memory, store): give the lease back so the task is not stuck
         * behind a process that lives on; it is due again at once. The store's message is
         * about the one write that failed ("nothing was written" of a full map is true of
         * that commit only): the run's admission and earlier steps are committed, so the
         * message says what the task is left as, whether the release fitted or not. */
        char keep[sizeof r->err];
        snprintf(keep, sizeof keep, "%s", r->err);
        if (commit(&c, C_STOPPED, CAIRN__DURABLE, NULL, 0, keep, 0, 0) == 0)
            cairn__runner_fail(r, rc,
                               "task '%s': step '%s' not committed: %s; the task is failed and "
                               "due again, attempt %u of %u used, the steps before it kept",
                               id, c.step->name, keep, c.attempt, r->max_attempts);
        else
            cairn__runner_fail(r, rc,
                               "task '%s': step '%s' not committed: %s; nor could the task be "
                               "released: it stays running, attempt %u of %u used, the steps "
                               "before it kept, until `retry` takes it over (on this host once "
                               "this process has exited, elsewhere when its lease expires)",
                               id, c.step->name, keep, c.attempt, r->max_attempts);
    }
    if (c.input_bytes) {
        msgpack_unpacked_destroy(&c.input);
        free(c.input_bytes);
    }
    for (size_t i = 0; c.kept && i < g->n_steps; i++)
        free(c.kept[i].bytes);
    free(c.kept);
    msgpack_sbuffer_destroy(&c.out);
    return rc;
}
