/* runner/operator.c - what cron and operators do to tasks: retry, resolve, invalidate, gc.
 *
 * Each action is one write transaction through the store, checked against the state machine
 * (only resolve and invalidate may move a finished task back to pending) and audited. retry
 * reads the status index for what is due, then runs each task through the same path as
 * `cairn run`; a task another process holds is simply skipped, so overlapping retries never run
 * one task twice. A task whose record was rewritten after the listing (its txn differs) was
 * taken up by another process meanwhile - finished, even: it is left to that process and not
 * counted, so each task is counted by the one retry that claimed it. gc keeps tombstones (ID,
 * payload hash, final state) past the outputs so a late duplicate still does not run, and
 * forgets consumed messages with them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xxh.h"
#include "runner/internal.h"

/* ------------------------------------------------------------------ retry */

/* The tasks one retry call has listed, as XXH3-64 hashes of their IDs, so that a call that lists
 * in pages (--limit) takes each task up at most once: sorted up to n_sorted, the current page's
 * after. A collision (2^-64 a pair) only leaves a task for the next call. */
typedef struct seen_set {
    uint64_t *h;
    size_t n, n_sorted, cap;
} seen_set;

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int seen_has(const seen_set *s, uint64_t h)
{
    return s->n_sorted && bsearch(&h, s->h, s->n_sorted, sizeof h, u64_cmp) != NULL;
}

static int seen_add(seen_set *s, uint64_t h)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        uint64_t *p = realloc(s->h, cap * sizeof *p);
        if (!p)
            return CAIRN_ENOMEM;
        s->h = p, s->cap = cap;
    }
    s->h[s->n++] = h;
    return 0;
}

static void seen_sort(seen_set *s)
{
    if (s->n) /* (an empty set has no array: qsort's pointer must not be NULL) */
        qsort(s->h, s->n, sizeof *s->h, u64_cmp);
    s->n_sorted = s->n;
}

/* A page of a limited retry lists this many tasks beyond what is left of the limit: tasks that
 * another process takes up meanwhile, or that are deferred, are not counted. */
#define RETRY_SLACK 64

typedef struct due_arg {
    cairn_runner *r;
    cairn__txn *t;
    const char *graph;
    int64_t now;
    int running;    /* scanning running tasks: keep only those whose lease is dead */
    size_t want;    /* stop listing at this many (0: list every due task) */
    seen_set *seen; /* with want: the tasks earlier pages listed (skipped) and this one's */
    size_t n, cap;
    char (*ids)[CAIRN__ID_MAX + 1];
    uint64_t *txns;        /* the txn of each listed task's record: who claims it since counts it */
    size_t n_bad, cap_bad; /* due tasks whose record cannot be read: reported, not skipped */
    struct unreadable {
        char id[CAIRN__ID_MAX + 1];
        int rc;
        char msg[512];
    } * bad;
} due_arg;

static int due_cb(const char *id, void *arg)
{
    due_arg *a = arg;
    if (a->want && a->n + a->n_bad >= a->want)
        return 1;
    uint64_t h = XXH3_64bits(id, strlen(id));
    if (a->want && seen_has(a->seen, h))
        return 0;
    if (a->want && seen_add(a->seen, h))
        return CAIRN_ENOMEM;
    cairn__task_rec task;
    int grc = cairn__task_get(a->t, id, &task);
    if (grc == CAIRN_ENOTFOUND)
        return 0;
    if (grc) { /* corrupt, or written by a newer cairn: the operator must hear of it */
        if (a->n_bad == a->cap_bad) {
            size_t cap = a->cap_bad ? a->cap_bad * 2 : 8;
            void *p = realloc(a->bad, cap * sizeof *a->bad);
            if (!p)
                return CAIRN_ENOMEM;
            a->bad = p, a->cap_bad = cap;
        }
        struct unreadable *b = &a->bad[a->n_bad++];
        snprintf(b->id, sizeof b->id, "%s", id);
        b->rc = grc;
        snprintf(b->msg, sizeof b->msg, "%s", cairn_store_errmsg(cairn__txn_store(a->t)));
        return 0;
    }
    if (a->graph && strcmp(task.graph, a->graph) != 0)
        return 0;
    if (a->running && cairn__lease_live(&task, a->now))
        return 0;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        void *p = realloc(a->ids, cap * sizeof *a->ids),
             *q = realloc(a->txns, cap * sizeof *a->txns);
        if (p)
            a->ids = p;
        if (q)
            a->txns = q;
        if (!p || !q)
            return CAIRN_ENOMEM;
        a->cap = cap;
    }
    a->txns[a->n] = task.txn;
    snprintf(a->ids[a->n++], CAIRN__ID_MAX + 1, "%s", id);
    return 0;
}

static int due_txn(cairn__txn *t, void *arg)
{
    due_arg *a = arg;
    a->t = t;
    int64_t upto = a->now;
    a->n = a->n_bad = 0; /* the read may run again (a retried transaction) */
    a->running = 0;
    if (a->seen)
        a->seen->n = a->seen->n_sorted;
    int rc = cairn__due_each(t, CAIRN_FAILED, upto, due_cb, a);
    if (!rc)
        rc = cairn__due_each(t, CAIRN_PENDING, INT64_MAX, due_cb, a);
    if (!rc) {
        a->running = 1;
        rc = cairn__due_each(t, CAIRN_RUNNING, INT64_MAX, due_cb, a);
    }
    return rc;
}

/* Lists one page of due tasks and runs them; *more: the page was full, so more may be due. */
static int retry_page(cairn_runner *r, const char *graph, uint32_t limit, int now, seen_set *seen,
                      uint32_t *ran, uint32_t *ok, uint32_t *bad, int *more)
{
    due_arg a = {.r = r,
                 .graph = graph,
                 .now = now ? INT64_MAX : cairn__now_ms(),
                 .want = limit ? (size_t)(limit - *ran) + RETRY_SLACK : 0,
                 .seen = limit ? seen : NULL};
    int rc = cairn__store_read(r->store, due_txn, &a);
    if (rc) {
        free(a.ids);
        free(a.txns);
        free(a.bad);
        return cairn__runner_store_fail(r, rc);
    }
    if (limit)
        seen_sort(seen);
    *more = a.want && a.n + a.n_bad >= a.want;
    for (size_t i = 0; i < a.n_bad; i++) {
        ++*bad;
        if (r->report)
            r->report(a.bad[i].id, a.bad[i].rc, a.bad[i].msg, r->report_user);
    }
    free(a.bad);
    for (size_t i = 0; i < a.n && (!limit || *ran < limit) && !r->stop; i++) {
        const cairn_graph *g = cairn__find_graph(r, graph ? graph : "");
        int x = 0, taken = 0;
        if (!g)
            x = cairn__task_graph(r, a.ids[i], &g);
        if (!x) {
            r->err[0] = r->note[0] = 0;
            x = cairn__execute(r, g, a.ids[i], &a.txns[i], &taken);
        }
        if (taken)
            continue; /* another process took it up since the listing: its count, not ours */
        if (r->report)
            r->report(a.ids[i], x, x ? r->err : "", r->report_user);
        if (x == CAIRN_EBUSY || x == CAIRN_ETENANT)
            continue; /* someone else has it (an overlapping retry): not ours to count */
        ++*ran;
        if (x == 0)
            ++*ok;
        else
            ++*bad;
        /* a store that cannot be written ends the retry; a record of one task that cannot be
         * read (ECORRUPT, ESCHEMA) is that task's failure, reported, and the others still run */
        if (x == CAIRN_EIO || x == CAIRN_EFULL || x == CAIRN_ENOMEM) {
            rc = x;
            break;
        }
    }
    free(a.ids);
    free(a.txns);
    return rc;
}

int cairn_runner_retry(cairn_runner *r, const char *graph, uint32_t limit, int now, uint32_t *n_run,
                       uint32_t *n_succeeded, uint32_t *n_failed)
{
    if (!r || !r->opened)
        return CAIRN_EINVAL;
    /* Without a limit, one listing of every due task. With one, pages of what is left of the
     * limit (plus a slack), so a cron job's `retry --limit 100` on a store with a million due
     * tasks reads about a hundred of them, not the million. */
    seen_set seen = {0};
    uint32_t ran = 0, ok = 0, bad = 0;
    int rc, more;
    do
        rc = retry_page(r, graph, limit, now, &seen, &ran, &ok, &bad, &more);
    while (!rc && more && !r->stop && ran < limit);
    free(seen.h);
    if (!rc && r->stop)
        rc = cairn__runner_fail(r, CAIRN_EINTR, "stopped after %u task(s)", ran);
    if (n_run)
        *n_run = ran;
    if (n_succeeded)
        *n_succeeded = ok;
    if (n_failed)
        *n_failed = bad;
    return rc;
}

/* ------------------------------------------------------------------ operator actions */

typedef struct op_arg {
    cairn_runner *r;
    const cairn_graph *g;
    const char *id, *step;
    int done;
} op_arg;

static int resolve_txn(cairn__txn *t, void *arg)
{
    op_arg *a = arg;
    cairn_store *s = cairn__txn_store(t);
    cairn__task_rec task;
    int rc = cairn__task_get(t, a->id, &task);
    if (rc == CAIRN_ENOTFOUND)
        return cairn__store_fail(s, rc, "no task '%s'", a->id);
    if (rc)
        return rc;
    if (task.state != CAIRN_IN_DOUBT) /* before the step lookup: a running task may have none */
        return cairn__store_fail(s, CAIRN_ESTATE,
                                 "task '%s' is %s: only a task in doubt can be resolved", a->id,
                                 cairn_state_name((cairn_state)task.state));
    cairn__step_rec st;
    rc = cairn__step_get(t, a->id, a->step, task.generation, &st);
    if (rc == CAIRN_ENOTFOUND)
        return cairn__store_fail(s, rc, "task '%s' has no record of step '%s'", a->id, a->step);
    if (rc)
        return rc;
    if (task.state != CAIRN_IN_DOUBT ||
        (st.state != CAIRN_STEP_IN_DOUBT && st.state != CAIRN_STEP_INTENT))
        return cairn__store_fail(s, CAIRN_ESTATE,
                                 "task '%s' is %s and step '%s' is %s: only an in-doubt step can "
                                 "be resolved",
                                 a->id, cairn_state_name((cairn_state)task.state), a->step,
                                 cairn_step_state_name((cairn_step_state)st.state));
    st.state = a->done ? CAIRN_STEP_DONE : CAIRN_STEP_PENDING;
    st.resolved = 1;
    st.output = NULL;
    st.output_len = 0;
    st.generation = task.generation;
    st.updated_ms = cairn__now_ms();
    snprintf(st.error, sizeof st.error, "resolved by operator: %s", a->done ? "done" : "not done");
    if (!a->done && st.invocations > 0)
        st.invocations--; /* the invocation that never happened does not count */
    task.error[0] = task.error_step[0] = 0;
    task.next_retry_ms = 0;
    task.attempt = 0; /* the operator's decision starts the count again, as invalidate does */
    if ((rc = cairn__transition(t, &task, CAIRN_PENDING, 1, a->step, st.error)) ||
        (rc = cairn__step_put(t, a->id, a->step, &st)))
        return rc;
    return cairn__task_put(t, &task);
}

int cairn_runner_resolve(cairn_runner *r, const char *task_id, const char *step, int done)
{
    if (!r || !r->opened || !task_id || !step)
        return CAIRN_EINVAL;
    r->err[0] = 0;
    if (!cairn__name_ok(step))
        return cairn__runner_fail(
            r, CAIRN_EINVAL, "step name '%.80s' is not 1-64 characters of [A-Za-z0-9._-]", step);
    op_arg a = {.r = r, .id = task_id, .step = step, .done = done};
    int rc = cairn__store_write(r->store, CAIRN__DURABLE, resolve_txn, &a);
    return rc ? cairn__runner_store_fail(r, rc) : 0;
}

static int invalidate_txn(cairn__txn *t, void *arg)
{
    op_arg *a = arg;
    cairn_store *s = cairn__txn_store(t);
    cairn__task_rec task;
    int rc = cairn__task_get(t, a->id, &task);
    if (rc)
        return rc == CAIRN_ENOTFOUND ? cairn__store_fail(s, rc, "no task '%s'", a->id) : rc;
    if (task.state == CAIRN_RUNNING && cairn__lease_live(&task, cairn__now_ms()))
        return cairn__store_fail(s, CAIRN_EBUSY, "task '%s' is running in process %d on %s", a->id,
                                 task.owner.pid, task.owner.host);
    if (task.tombstone)
        return cairn__store_fail(s, CAIRN_ESTATE,
                                 "task '%s' was garbage-collected (its input is gone)", a->id);
    size_t from = 0;
    if (a->step) {
        while (from < a->g->n_steps && strcmp(a->g->steps[a->g->order[from]]->name, a->step))
            from++;
        if (from == a->g->n_steps)
            return cairn__store_fail(s, CAIRN_ENOTFOUND, "graph '%s' has no step '%s'", a->g->name,
                                     a->step);
    }
    /* Graph pinning holds here too: under a changed graph, invalidating would also redo the
     * changed steps (which may be the paid LLM step, upstream of the one named), so that needs
     * the same explicit consent as a run does. */
    const cairn_step *ch = NULL;
    if (strcmp(task.fingerprint, a->g->fingerprint) != 0) {
        ch = cairn__first_changed(a->g, task.steps_pin);
        if (!a->r->allow_graph_change)
            return cairn__store_fail(
                s, CAIRN_EGRAPHCHANGED,
                "task '%s' was started by another version of graph '%s' (pinned %s, now %s; "
                "first changed step: '%s'): invalidating it would redo that step too",
                a->id, a->g->name, task.steps_pin, a->g->pin, ch ? ch->name : "(graph header)");
    }
    if (task.state == CAIRN_RUNNING) { /* owner gone: the stale run is abandoned */
        cairn__release_lease(&task);
        if ((rc = cairn__transition(t, &task, CAIRN_FAILED, 0, NULL, "owner gone; invalidated")))
            return rc;
    }
    /* without --from, every step; with it, that step and everything downstream of it; in both
     * cases also any step the code changed since the task was pinned (and its downstream), so
     * the new generation never mixes an old step's output with new code */
    unsigned char *redo = calloc(a->g->n_steps, 1);
    if (!redo)
        return CAIRN_ENOMEM;
    for (size_t i = 0; i < a->g->n_steps; i++)
        redo[i] = !a->step || i == from;
    cairn__mark_downstream(a->g, NULL, redo);
    cairn__mark_changed(a->g, task.steps_pin, NULL, redo);
    rc = cairn__new_generation(t, a->g, &task, redo);
    free(redo);
    if (rc)
        return rc;
    char why[512];
    int n =
        snprintf(why, sizeof why, "invalidated %s '%s' (and what depends on it)",
                 a->step ? "from step" : "all steps, from", a->g->steps[a->g->order[from]]->name);
    if (ch && n < (int)sizeof why)
        n += snprintf(why + n, sizeof why - (size_t)n, ", and from changed step '%s'", ch->name);
    if (n < (int)sizeof why)
        snprintf(why + n, sizeof why - (size_t)n, ": generation %u", task.generation);
    if (task.state != CAIRN_PENDING) {
        if ((rc = cairn__transition(t, &task, CAIRN_PENDING, 1, NULL, why)))
            return rc;
    } else if ((rc = cairn__audit(t, &task, CAIRN_PENDING, CAIRN_PENDING, NULL, "%s", why))) {
        return rc; /* already pending: audited once, not twice */
    }
    task.attempt = 0;
    task.error[0] = task.error_step[0] = 0;
    snprintf(task.fingerprint, sizeof task.fingerprint, "%s", a->g->fingerprint);
    snprintf(task.steps_pin, sizeof task.steps_pin, "%s", a->g->pin);
    return cairn__task_put(t, &task);
}

int cairn_runner_invalidate(cairn_runner *r, const char *task_id, const char *from_step)
{
    if (!r || !r->opened || !task_id)
        return CAIRN_EINVAL;
    r->err[0] = 0;
    const cairn_graph *g;
    int rc = cairn__task_graph(r, task_id, &g);
    if (rc)
        return rc;
    op_arg a = {.r = r, .g = g, .id = task_id, .step = from_step};
    rc = cairn__store_write(r->store, CAIRN__DURABLE, invalidate_txn, &a);
    return rc ? cairn__runner_store_fail(r, rc) : 0;
}

/* ------------------------------------------------------------------ gc */

typedef struct gc_arg {
    cairn_runner *r;
    int64_t prune_before, remove_before;
    uint32_t pruned, removed, batch; /* of this transaction only (it may run twice) */
    int64_t last_ms;                 /* the finish time of the last task looked at */
} gc_arg;

static int gc_cb(const char *id, void *arg)
{
    void **p = arg;
    cairn__txn *t = p[0];
    gc_arg *a = p[1];
    if (a->batch >= 512)
        return 1; /* keep transactions small; the caller loops */
    cairn__task_rec task;
    int rc = cairn__task_get(t, id, &task);
    if (rc)
        return rc == CAIRN_ENOTFOUND ? 0 : rc;
    a->last_ms = task.finished_ms;
    if (task.finished_ms <= a->remove_before) {
        if ((rc = cairn__task_del(t, id)) || (rc = cairn__idem_del(t, id)))
            return rc;
        a->removed++, a->batch++;
    } else if (!task.tombstone && task.finished_ms <= a->prune_before) {
        /* keep the tombstone: id, payload hash, final state, times, audit */
        task.tombstone = 1;
        if ((rc = cairn__task_drop_outputs(t, id)) ||
            (rc = cairn__audit(t, &task, (cairn_state)task.state, (cairn_state)task.state, NULL,
                               "gc: outputs dropped, tombstone kept")) ||
            (rc = cairn__task_put(t, &task)))
            return rc;
        a->pruned++, a->batch++;
    }
    return 0;
}

/* Removes what is older than the tombstone retention, then prunes what is older than the
 * output retention, from gc's mark on: the tombstones before it are not walked again. The mark
 * moves up to where this transaction's pruning got (all of it, when the batch did not fill). */
static int gc_txn(cairn__txn *t, void *arg)
{
    gc_arg *a = arg;
    a->batch = a->pruned = a->removed = 0;
    void *p[2] = {t, a};
    int rc = cairn__finished_each(t, 0, a->remove_before, gc_cb, p);
    if (rc || a->batch >= 512 || a->prune_before <= a->remove_before)
        return rc;
    int64_t mark;
    if ((rc = cairn__gc_mark_get(t, &mark)))
        return rc;
    int64_t from = mark > a->remove_before ? mark : a->remove_before + 1;
    a->last_ms = from;
    rc = cairn__finished_each(t, from, a->prune_before, gc_cb, p);
    int64_t reached = a->batch >= 512 ? a->last_ms : a->prune_before + 1;
    if (!rc && reached > mark)
        rc = cairn__gc_mark_put(t, reached);
    return rc;
}

typedef struct msg_expire_arg {
    int64_t upto;
    uint32_t n;
} msg_expire_arg;

static int msg_expire_txn(cairn__txn *t, void *arg)
{
    msg_expire_arg *m = arg;
    return cairn__msg_expire(t, m->upto, 4096, &m->n);
}

int cairn_runner_gc(cairn_runner *r, uint32_t *n_pruned, uint32_t *n_removed)
{
    if (!r || !r->opened)
        return CAIRN_EINVAL;
    int64_t now = cairn__now_ms();
    gc_arg a = {.r = r,
                .prune_before = now - (int64_t)r->retention_s * 1000,
                .remove_before = now - (int64_t)r->tombstone_s * 1000};
    uint32_t pruned = 0, removed = 0;
    int rc;
    do {
        rc = cairn__store_write(r->store, CAIRN__RELAXED, gc_txn, &a);
        if (rc)
            break;
        pruned += a.pruned, removed += a.removed;
    } while (a.batch >= 512);
    /* consumed-message records live as long as tombstones: a redelivery within the dedupe
     * window does nothing, a later one is a new message */
    for (uint32_t n = 1; !rc && n;) {
        msg_expire_arg m = {.upto = a.remove_before};
        rc = cairn__store_write(r->store, CAIRN__RELAXED, msg_expire_txn, &m);
        n = m.n;
    }
    if (n_pruned)
        *n_pruned = pruned;
    if (n_removed)
        *n_removed = removed;
    return rc ? cairn__runner_store_fail(r, rc) : 0;
}
