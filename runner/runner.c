/* runner/runner.c - runs tasks through their graph, one committed step at a time.
 *
 * How resume decides what to skip: a task's steps are walked in the graph's fixed topological
 * order; a step whose record in the current generation is `done` is skipped and its committed
 * output is handed to its dependents. Nothing else is trusted: not a log, not a cache, only the
 * record committed in the same transaction that checked the lease.
 *
 * Effects are the hard part. Before an effect step is called, its intent is committed and
 * flushed to disk. A run that later finds an intent without a recorded outcome cannot know
 * whether the effect happened (the crash may have come just after the email left), so it does
 * not call the step again: the step's probe is asked if it has one, and otherwise the task
 * becomes in_doubt until an operator resolves it. Effects opted into at-least-once are called
 * again instead, with the same delivery ID for the receiver to deduplicate. A graph change
 * (--allow-graph-change) redoes changed steps and what reads them, but never an effect already
 * done or begun: the promise is at most once per task, whatever the configuration became.
 *
 * Every write is a callback run by cairn__store_write() (see checkpoint/store.h): it may run
 * twice when the map grows, so the callbacks only compute from their argument and the txn.
 *
 * This file holds the runner's lifecycle, the helpers every task change goes through (audit,
 * transitions, generations), admission (a new task, its idempotency reservation and message
 * record) and acquiring the lease, both in one transaction; runner/step.c runs the steps of an
 * acquired task, runner/operator.c holds retry, resolve, invalidate and gc.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/json.h"
#include "common/taskid.h"
#include "runner/internal.h"

#define DAY_S (24ull * 3600)

int cairn__runner_fail(cairn_runner *r, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
    return err;
}

int cairn__runner_store_fail(cairn_runner *r, int err)
{
    snprintf(r->err, sizeof r->err, "%s", cairn_store_errmsg(r->store));
    return err;
}

/* A refusal that reports a state read from the store (dead, in doubt, a message consumed, an
 * ID taken by another payload):
 * another process may have committed it a moment ago without a flush yet, so it is made to
 * survive a power loss before it is reported (cairn__store_settle). Returns err, or the store's
 * error if that fails. */
static int reported(cairn_runner *r, int err, uint64_t upto)
{
    if (err == CAIRN_EDEAD || err == CAIRN_EINDOUBT || err == CAIRN_EMSGSEEN ||
        err == CAIRN_ECONFLICT) {
        char why[sizeof r->err];
        snprintf(why, sizeof why, "%s", cairn_store_errmsg(r->store));
        int rc = cairn__store_settle(r->store, upto);
        if (rc)
            return cairn__runner_store_fail(r, rc);
        if (err != CAIRN_EMSGSEEN) /* not an error: the caller reports it as a note */
            snprintf(r->err, sizeof r->err, "%s", why);
        return err;
    }
    return cairn__runner_store_fail(r, err);
}

/* ------------------------------------------------------------------ lifecycle */

cairn_runner *cairn_runner_new(void)
{
    cairn_runner *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->max_attempts = 3;
    r->lease_ms = 60000;
    r->inline_wait_ms = 2000;
    r->child_reuse = 1000;
    r->retention_s = 7 * DAY_S;
    r->tombstone_s = 30 * DAY_S;
    return r;
}

void cairn_runner_free(cairn_runner *r)
{
    if (!r)
        return;
    cairn__heartbeat_free(r);
    cairn__host_free(r);
    free(r->graphs);
    free(r);
}

const char *cairn_runner_errmsg(const cairn_runner *r)
{
    return r ? (r->err[0] ? r->err : r->note) : "no runner";
}

/* Settings are fixed by cairn_runner_open: a run must never see its lease, retry or tenant
 * policy change under it, nor a graph appear that a concurrent retry already missed. Every
 * setter (and cairn_runner_add_graph) starts here: CAIRN_EINVAL without a runner, CAIRN_EBUSY
 * (the runner unchanged) once it is open. */
static int configurable(cairn_runner *r, const char *what)
{
    if (!r)
        return CAIRN_EINVAL;
    if (r->opened)
        return cairn__runner_fail(r, CAIRN_EBUSY, "%s: the runner is open; its settings are fixed",
                                  what);
    return 0;
}

int cairn_runner_add_graph(cairn_runner *r, cairn_graph *g)
{
    int rc = configurable(r, "cairn_runner_add_graph");
    if (rc || !g)
        return rc ? rc : CAIRN_EINVAL;
    if ((rc = cairn_graph_validate(g)))
        return cairn__runner_fail(r, rc, "%s", cairn_graph_errmsg(g));
    for (size_t i = 0; i < r->n_graphs; i++)
        if (strcmp(r->graphs[i]->name, g->name) == 0)
            return cairn__runner_fail(r, CAIRN_EGRAPH, "graph '%s' registered twice", g->name);
    cairn_graph **gs = realloc(r->graphs, (r->n_graphs + 1) * sizeof *gs);
    if (!gs)
        return CAIRN_ENOMEM;
    r->graphs = gs;
    r->graphs[r->n_graphs++] = g;
    g->frozen = 1; /* its fingerprint and pin are what tasks are compared with from now on */
    return 0;
}

int cairn_runner_set_store(cairn_runner *r, cairn_store *s)
{
    int rc = configurable(r, "cairn_runner_set_store");
    if (rc || !s)
        return rc ? rc : CAIRN_EINVAL;
    r->store = s;
    return 0;
}

int cairn_runner_set_max_attempts(cairn_runner *r, uint32_t n)
{
    int rc = configurable(r, "cairn_runner_set_max_attempts");
    if (rc || n == 0)
        return rc ? rc : CAIRN_EINVAL;
    r->max_attempts = n;
    return 0;
}

int cairn_runner_set_lease_ms(cairn_runner *r, uint32_t ms)
{
    int rc = configurable(r, "cairn_runner_set_lease_ms");
    if (rc || ms < 100)
        return rc ? rc : CAIRN_EINVAL;
    r->lease_ms = ms;
    return 0;
}

int cairn_runner_set_inline_wait_ms(cairn_runner *r, uint32_t ms)
{
    int rc = configurable(r, "cairn_runner_set_inline_wait_ms");
    if (rc)
        return rc;
    r->inline_wait_ms = ms;
    return 0;
}

int cairn_runner_set_child_reuse(cairn_runner *r, uint32_t n)
{
    int rc = configurable(r, "cairn_runner_set_child_reuse");
    if (rc || n == 0)
        return rc ? rc : CAIRN_EINVAL;
    r->child_reuse = n;
    return 0;
}

int cairn_runner_set_retry_report(cairn_runner *r, cairn_retry_report_fn fn, void *user)
{
    int rc = configurable(r, "cairn_runner_set_retry_report");
    if (rc)
        return rc;
    r->report = fn;
    r->report_user = user;
    return 0;
}

int cairn_runner_set_events(cairn_runner *r, cairn_event_fn fn, void *user)
{
    int rc = configurable(r, "cairn_runner_set_events");
    if (rc)
        return rc;
    r->events = fn;
    r->events_user = user;
    return 0;
}

int cairn_runner_set_tenant_limit(cairn_runner *r, const char *field, uint32_t max_running)
{
    int rc = configurable(r, "cairn_runner_set_tenant_limit");
    if (rc || (field && strlen(field) > CAIRN__NAME_MAX))
        return rc ? rc : CAIRN_EINVAL;
    snprintf(r->tenant_field, sizeof r->tenant_field, "%s", field ? field : "");
    r->tenant_max = field ? max_running : 0;
    return 0;
}

int cairn_runner_set_allow_graph_change(cairn_runner *r, int allow)
{
    int rc = configurable(r, "cairn_runner_set_allow_graph_change");
    if (rc)
        return rc;
    r->allow_graph_change = !!allow;
    return 0;
}

int cairn_runner_set_retention(cairn_runner *r, uint64_t outputs_s, uint64_t tombstones_s)
{
    /* at most about 290 years, so that now - retention never wraps */
    const uint64_t max_s = (uint64_t)INT64_MAX / 1000 / 1024;
    int rc = configurable(r, "cairn_runner_set_retention");
    if (rc || tombstones_s < outputs_s)
        return rc ? rc : CAIRN_EINVAL;
    if (outputs_s > max_s)
        outputs_s = max_s;
    if (tombstones_s > max_s)
        tombstones_s = max_s;
    r->retention_s = outputs_s;
    r->tombstone_s = tombstones_s;
    return 0;
}

int cairn_runner_open(cairn_runner *r)
{
    int rc = configurable(r, "cairn_runner_open");
    if (rc)
        return rc;
    if (!r->store)
        return cairn__runner_fail(r, CAIRN_EINVAL, "no store set");
    cairn__owner_self(&r->me);
    r->rng = cairn__random_u64();
    r->opened = 1;
    return 0;
}

void cairn_runner_stop(cairn_runner *r)
{
    if (r)
        r->stop = 1;
}

cairn_graph *cairn__find_graph(cairn_runner *r, const char *name)
{
    for (size_t i = 0; i < r->n_graphs; i++)
        if (strcmp(r->graphs[i]->name, name) == 0)
            return r->graphs[i];
    return NULL;
}

/* ------------------------------------------------------------------ shared helpers
 * (also used by operator.c; declared in runner/internal.h) */

int cairn__audit(cairn__txn *t, cairn__task_rec *task, cairn_state from, cairn_state to,
                 const char *step, const char *fmt, ...)
{
    cairn__audit_rec a = {.t_ms = cairn__now_ms(),
                          .from = (uint8_t)from,
                          .to = (uint8_t)to,
                          .attempt = task->attempt,
                          .generation = task->generation};
    snprintf(a.step, sizeof a.step, "%s", step ? step : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a.reason, sizeof a.reason, fmt, ap);
    va_end(ap);
    return cairn__audit_append(t, task, &a);
}

/* Moves a task to `to` (checking the state machine) and audits it. */
int cairn__transition(cairn__txn *t, cairn__task_rec *task, cairn_state to, int operator_action,
                      const char *step, const char *reason)
{
    cairn_state from = (cairn_state)task->state;
    if (!cairn_state_transition_ok(from, to, operator_action))
        return cairn__store_fail(cairn__txn_store(t), CAIRN_ESTATE,
                                 "task '%s': illegal transition %s -> %s", task->id,
                                 cairn_state_name(from), cairn_state_name(to));
    task->state = (uint8_t)to;
    task->updated_ms = cairn__now_ms();
    if (to == CAIRN_SUCCEEDED || to == CAIRN_DEAD)
        task->finished_ms = task->updated_ms;
    else
        task->finished_ms = 0;
    return cairn__audit(t, task, from, to, step, "%s", reason);
}

void cairn__release_lease(cairn__task_rec *task)
{
    memset(&task->owner, 0, sizeof task->owner);
    task->lease_token = 0;
    task->lease_expires_ms = 0;
}

const cairn_step *cairn__first_changed(const cairn_graph *g, const char *pin)
{
    const char *p = pin;
    for (size_t i = 0; i < g->n_steps; i++) {
        const cairn_step *s = g->steps[g->order[i]];
        char want[96];
        int n = snprintf(want, sizeof want, "%s@%u", s->name, s->version);
        if (strncmp(p, want, (size_t)n) != 0 || (p[n] != ',' && p[n] != 0))
            return s;
        p += n + (p[n] == ',');
    }
    return *p ? g->steps[g->order[g->n_steps - 1]] : NULL;
}

/* Whether the pinned list "a@1,b@2" holds step s at its current version. */
static int pinned(const char *pin, const cairn_step *s)
{
    char want[96];
    size_t n = (size_t)snprintf(want, sizeof want, "%s@%u", s->name, s->version);
    for (const char *p = pin; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && memcmp(p, want, n) == 0)
            return 1;
        p += len + (e != NULL);
    }
    return 0;
}

/* Extends `redo` (by position in g->order) to everything downstream of the steps already in
 * it: a step runs again if any step it reads runs again, unless `keep` holds it. One pass
 * suffices in topological order. */
void cairn__mark_downstream(const cairn_graph *g, const unsigned char *keep, unsigned char *redo)
{
    for (size_t i = 0; i < g->n_steps; i++) {
        const cairn_step *s = g->steps[g->order[i]];
        for (size_t d = 0; d < s->n_deps && !redo[i] && !(keep && keep[i]); d++)
            for (size_t j = 0; j < i; j++)
                if (g->order[j] == s->deps[d] && redo[j])
                    redo[i] = 1;
    }
}

/* Starts generation gen+1 for the steps marked in `redo` (by position in g->order): they get
 * fresh pending records; the others keep applying from their older generations. */
int cairn__new_generation(cairn__txn *t, const cairn_graph *g, cairn__task_rec *task,
                          const unsigned char *redo)
{
    task->generation++;
    for (size_t i = 0; i < g->n_steps; i++) {
        if (!redo[i])
            continue;
        cairn__step_rec s = {.state = CAIRN_STEP_PENDING,
                             .generation = task->generation,
                             .updated_ms = cairn__now_ms()};
        int rc = cairn__step_put(t, task->id, g->steps[g->order[i]]->name, &s);
        if (rc)
            return rc;
    }
    return 0;
}

/* Marks the steps whose name@version is not in the task's pin (changed or new), and all that
 * is downstream of them, except what `keep` holds. Returns how many were marked. */
size_t cairn__mark_changed(const cairn_graph *g, const char *pin, const unsigned char *keep,
                           unsigned char *redo)
{
    size_t n = 0;
    for (size_t i = 0; i < g->n_steps; i++)
        if (!pinned(pin, g->steps[g->order[i]]) && !(keep && keep[i]))
            redo[i] = 1;
    cairn__mark_downstream(g, keep, redo);
    for (size_t i = 0; i < g->n_steps; i++)
        n += redo[i];
    return n;
}

/* The effects of a task that a graph change must not repeat (by position in g->order, into
 * keep): each one done, or begun (its intent committed, the outcome unknown), in the task's
 * current generation. A new generation would give it a fresh record and a new delivery ID and
 * call it again: a second email about the same task, which no receiver can tell from a new one.
 * The promise is at most once per task, not per configuration; `invalidate` is the explicit way
 * to send again. Returns 0 and the count in *n, or a store error. */
static int effects_begun(cairn__txn *t, const cairn_graph *g, const cairn__task_rec *task,
                         unsigned char *keep, size_t *n)
{
    *n = 0;
    for (size_t i = 0; i < g->n_steps; i++) {
        const cairn_step *s = g->steps[g->order[i]];
        cairn__step_rec rec;
        if (s->delivery == CAIRN_COMPUTE)
            continue;
        int rc = cairn__step_get(t, task->id, s->name, task->generation, &rec);
        if (rc == CAIRN_ENOTFOUND)
            continue;
        if (rc)
            return rc;
        if (rec.state != CAIRN_STEP_PENDING) {
            keep[i] = 1;
            ++*n;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ admission */

typedef struct admit_arg {
    cairn_runner *r;
    const cairn_graph *g;
    const char *id, *hash, *message_id, *tenant;
    const void *input;
    size_t input_len;
    char existing[65];
    char msg_task[CAIRN__ID_MAX + 1];
    acquire_arg *acq; /* acquired in the same transaction: one commit */
    int deferred;     /* admitted, but may not start now: CAIRN_ETENANT or CAIRN_EBUSY */
    int created;      /* this transaction made the task (it did not exist) */
    char deferred_msg[512];
} admit_arg;

static int acquire_txn(cairn__txn *t, void *arg);

static int admit_txn(cairn__txn *t, void *arg)
{
    admit_arg *a = arg;
    a->deferred = a->created = 0; /* the callback may run twice (map growth): start clean */
    if (a->acq)
        a->acq->created = NULL;
    if (a->message_id && cairn__msg_get(t, a->message_id, a->msg_task) == 0)
        return CAIRN_EMSGSEEN;
    int rc = cairn__idem_reserve(t, a->id, a->hash, a->existing);
    if (rc)
        return rc;
    cairn__task_rec task;
    rc = cairn__task_get(t, a->id, &task);
    if (rc == CAIRN_ENOTFOUND) {
        memset(&task, 0, sizeof task);
        snprintf(task.id, sizeof task.id, "%s", a->id);
        snprintf(task.graph, sizeof task.graph, "%s", a->g->name);
        snprintf(task.fingerprint, sizeof task.fingerprint, "%s", a->g->fingerprint);
        snprintf(task.steps_pin, sizeof task.steps_pin, "%s", a->g->pin);
        snprintf(task.payload_hash, sizeof task.payload_hash, "%s", a->hash);
        snprintf(task.tenant, sizeof task.tenant, "%s", a->tenant ? a->tenant : "");
        task.state = CAIRN_PENDING;
        task.generation = 1;
        task.created_ms = task.updated_ms = cairn__now_ms();
        rc = cairn__input_put(t, a->id, a->input, a->input_len);
        if (!rc)
            rc = cairn__audit(t, &task, CAIRN_PENDING, CAIRN_PENDING, NULL, "created%s%s",
                              a->message_id ? " from message " : "",
                              a->message_id ? a->message_id : "");
        if (!rc && a->acq) { /* acquired below: written once, running (or pending if refused) */
            a->acq->created = &task;
            a->acq->created_ms = task.created_ms;
        } else if (!rc)
            rc = cairn__task_put(t, &task);
        a->created = 1;
    } else if (rc == 0 && strcmp(task.graph, a->g->name) != 0) {
        rc = cairn__store_fail(cairn__txn_store(t), CAIRN_ECONFLICT,
                               "task '%s' belongs to graph '%s', not '%s'", a->id, task.graph,
                               a->g->name);
    }
    if (rc || !a->acq) /* admission only (cairn__runner_admit): a worker runs it later */
        return rc;
    /* A task that may not start now (tenant limit, running elsewhere) is still admitted: it is
     * recorded as pending for `retry`, and the run reports the refusal after the commit. The
     * acquire writes nothing before it refuses, and the message is not recorded as consumed,
     * so its redelivery runs the task. */
    rc = acquire_txn(t, a->acq);
    int unwritten = a->acq->created != NULL;
    a->acq->created = NULL;
    if (rc == CAIRN_ETENANT || rc == CAIRN_EBUSY) {
        a->deferred = rc;
        snprintf(a->deferred_msg, sizeof a->deferred_msg, "%s",
                 cairn_store_errmsg(cairn__txn_store(t)));
        return unwritten ? cairn__task_put(t, &task) : 0; /* refused before it wrote: pending */
    }
    if (!rc && a->message_id)
        rc = cairn__msg_put(t, a->message_id, a->id);
    return rc;
}

/* ------------------------------------------------------------------ acquire */

static int count_live(const char *id, void *arg)
{
    void **a = arg;
    cairn__txn *t = a[0];
    const char *self = a[1];
    cairn__task_rec task;
    if (strcmp(id, self) != 0 && cairn__task_get(t, id, &task) == 0 &&
        cairn__lease_live(&task, cairn__now_ms()))
        ++*(uint32_t *)a[2];
    return 0;
}

static int acquire_txn(cairn__txn *t, void *arg)
{
    acquire_arg *a = arg;
    cairn_runner *r = a->r;
    cairn_store *s = cairn__txn_store(t);
    cairn__task_rec task;
    int64_t now = cairn__now_ms();
    int rc = 0;
    if (a->created)
        task = *a->created;
    else
        rc = cairn__task_get(t, a->id, &task);
    if (rc == CAIRN_ENOTFOUND)
        return cairn__store_fail(s, rc, "no task '%s'", a->id);
    if (rc)
        return rc;
    a->finished = 0;
    a->state_txn = task.txn;
    if (a->listed && task.txn != *a->listed) {
        a->taken = 1; /* not ours: whoever rewrote it since the listing counts it */
        return 0;
    }
    switch (task.state) {
    case CAIRN_SUCCEEDED:
        a->finished = 1;
        snprintf(r->note, sizeof r->note, "task '%s' already succeeded%s", a->id,
                 task.tombstone ? " (outputs garbage-collected; tombstone kept)" : "");
        return 0;
    case CAIRN_DEAD:
        a->finished = 1;
        return cairn__store_fail(s, CAIRN_EDEAD, "task '%s' is dead: %s%s%s", a->id,
                                 task.error_step[0] ? task.error_step : "",
                                 task.error_step[0] ? ": " : "", task.error);
    case CAIRN_IN_DOUBT:
        a->finished = 1;
        return cairn__store_fail(s, CAIRN_EINDOUBT, "task '%s' is in doubt at step '%s': %s", a->id,
                                 task.error_step, task.error);
    default:
        break;
    }
    if (task.tombstone)
        return cairn__store_fail(s, CAIRN_ESTATE, "task '%s' was garbage-collected", a->id);
    if (task.state == CAIRN_RUNNING && cairn__lease_live(&task, now))
        return cairn__store_fail(s, CAIRN_EBUSY,
                                 "task '%s' is running in process %d on %s (its lease runs for "
                                 "another %lld s unless renewed)",
                                 a->id, task.owner.pid, task.owner.host,
                                 (long long)((task.lease_expires_ms - now + 999) / 1000));
    /* tenant limit, across processes: count live running tasks of this tenant */
    if (r->tenant_max && task.tenant[0]) {
        uint32_t n = 0;
        void *ca[3] = {t, (void *)a->id, &n};
        if ((rc = cairn__tenant_each(t, task.tenant, count_live, ca)))
            return rc;
        a->tenant_running = n;
        if (n >= r->tenant_max)
            return cairn__store_fail(s, CAIRN_ETENANT,
                                     "tenant '%s' already has %u running task(s) (limit %u)",
                                     task.tenant, n, r->tenant_max);
    }
    /* graph pinning (after the tenant check: a refused run writes nothing) */
    if (strcmp(task.fingerprint, a->g->fingerprint) != 0) {
        const cairn_step *ch = cairn__first_changed(a->g, task.steps_pin);
        if (!r->allow_graph_change)
            return cairn__store_fail(
                s, CAIRN_EGRAPHCHANGED,
                "task '%s' was started by another version of graph '%s' (pinned %s, now %s; "
                "first changed step: '%s')",
                a->id, a->g->name, task.steps_pin, a->g->pin, ch ? ch->name : "(graph header)");
        /* changed and new steps run again, with everything downstream of them, except the
         * effects already done or begun; a change of dependencies or delivery class alone
         * re-runs nothing */
        unsigned char *redo = calloc(2 * a->g->n_steps, 1), *keep = redo + a->g->n_steps;
        size_t n_redo = 0, n_kept = 0;
        if (!redo)
            return CAIRN_ENOMEM;
        if (!(rc = effects_begun(t, a->g, &task, keep, &n_kept)) &&
            (n_redo = cairn__mark_changed(a->g, task.steps_pin, keep, redo)))
            rc = cairn__new_generation(t, a->g, &task, redo);
        free(redo);
        if (rc)
            return rc;
        if ((rc = cairn__audit(t, &task, (cairn_state)task.state, (cairn_state)task.state,
                               ch ? ch->name : NULL,
                               "graph changed (%s -> %s): %zu step(s) to redo, %zu effect(s) "
                               "done or begun kept, generation %u",
                               task.steps_pin, a->g->pin, n_redo, n_kept, task.generation)))
            return rc;
        snprintf(task.fingerprint, sizeof task.fingerprint, "%s", a->g->fingerprint);
        snprintf(task.steps_pin, sizeof task.steps_pin, "%s", a->g->pin);
    }
    char reason[256];
    task.attempt++;
    if (task.state == CAIRN_RUNNING) {
        snprintf(reason, sizeof reason, "lease taken over from pid %d on %s (%s)", task.owner.pid,
                 task.owner.host, task.lease_expires_ms <= now ? "expired" : "owner gone");
        /* running -> running is no state change: record the takeover, count the attempt */
        if ((rc = cairn__audit(t, &task, CAIRN_RUNNING, CAIRN_RUNNING, NULL, "%s", reason)))
            return rc;
    } else {
        snprintf(reason, sizeof reason, "%s", task.state == CAIRN_FAILED ? "retry" : "run");
        if ((rc = cairn__transition(t, &task, CAIRN_RUNNING, 0, NULL, reason)))
            return rc;
    }
    if (task.attempt > r->max_attempts) {
        snprintf(task.error, sizeof task.error, "gave up after %u attempts", r->max_attempts);
        task.error_step[0] = 0;
        cairn__release_lease(&task);
        if ((rc = cairn__transition(t, &task, CAIRN_DEAD, 0, NULL, task.error)) ||
            (rc = cairn__task_put(t, &task)))
            return rc;
        a->finished = 2;
        return 0;
    }
    task.owner = r->me;
    task.lease_token = a->token;
    task.lease_expires_ms = now + r->lease_ms;
    a->attempt = task.attempt;
    a->generation = task.generation;
    return cairn__task_put(t, &task);
}

int cairn__execute(cairn_runner *r, const cairn_graph *g, const char *id, const uint64_t *listed,
                   int *taken)
{
    r->err[0] = r->note[0] = 0;
    if (taken)
        *taken = 0;
    if (r->stop)
        return cairn__runner_fail(r, CAIRN_EINTR, "stopped: task '%s' not started", id);
    acquire_arg a = {.r = r, .g = g, .id = id, .token = cairn__random_u64(), .listed = listed};
    int rc = cairn__store_write(r->store, CAIRN__RELAXED, acquire_txn, &a);
    if (rc)
        return reported(r, rc, a.finished ? a.state_txn : 0);
    if (a.taken) {
        *taken = 1;
        return 0;
    }
    return cairn__run_acquired(r, g, id, &a);
}

/* Checks and admits one task input, as cairn_runner_run does: parses it, resolves the task ID
 * (into task_id_out when not NULL) and, in one transaction, creates the task or finds it, with
 * `acq` (non-NULL) taking its lease in that same transaction. *created says whether it was made
 * now. 0: admitted (and, with acq, acquired); 1: nothing to run, 0 is the caller's answer (the
 * message was consumed already); else the error, with the runner's message. */
static int admit_input(cairn_runner *r, cairn_graph *g, const char *task_id, const char *id_fields,
                       const char *input_json, size_t input_len, const char *message_id,
                       char *task_id_out, size_t task_id_size, acquire_arg *acq, int *created)
{
    char err[512];
    json_t *input = NULL;
    *created = 0;
    int rc = cairn__json_parse(input_json, input_len, "input", &input, err, sizeof err);
    if (rc)
        return cairn__runner_fail(r, rc, "%s", err);
    if (!json_is_object(input)) {
        json_decref(input);
        return cairn__runner_fail(r, CAIRN_EJSON, "input: the task input must be a JSON object");
    }
    char id[CAIRN__ID_MAX + 1], hash[65];
    if (task_id) {
        rc = cairn__task_id_check(task_id, err, sizeof err);
        snprintf(id, sizeof id, "%s", task_id);
    } else {
        rc = cairn__task_id_derive(g->name, input, id_fields, id, sizeof id, err, sizeof err);
    }
    const char *tenant = NULL;
    if (!rc && r->tenant_field[0]) {
        json_t *tv = json_object_get(input, r->tenant_field);
        if (!json_is_string(tv) || !json_string_length(tv) ||
            json_string_length(tv) > CAIRN__ID_MAX) {
            snprintf(err, sizeof err,
                     "input: field '%s' (the tenant) must be a string of 1-%d bytes",
                     r->tenant_field, CAIRN__ID_MAX);
            rc = CAIRN_EJSON;
        } else
            tenant = json_string_value(tv);
    }
    if (!rc)
        rc = cairn__payload_hash(input, hash);
    if (rc) {
        json_decref(input);
        return cairn__runner_fail(r, rc, "%s", err);
    }
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
    rc = cairn__json_to_msgpack(input, &pk);
    if (task_id_out)
        snprintf(task_id_out, task_id_size, "%s", id);
    if (acq)
        acq->id = task_id_out; /* the caller's buffer outlives the run */
    if (!rc) {
        admit_arg aa = {.r = r,
                        .g = g,
                        .id = id,
                        .hash = hash,
                        .message_id = message_id,
                        .tenant = tenant,
                        .input = buf.data,
                        .input_len = buf.size,
                        .acq = acq};
        rc = cairn__store_write(r->store, CAIRN__RELAXED, admit_txn, &aa);
        *created = aa.created;
        if (rc == CAIRN_ECONFLICT && aa.existing[0] && strcmp(aa.existing, hash) != 0) {
            if ((rc = reported(r, rc, 0)) == CAIRN_ECONFLICT) /* else: it could not be flushed */
                rc = cairn__runner_fail(r, rc,
                                        "task '%s' exists with payload hash %s; this input hashes "
                                        "to %s (nothing changed)",
                                        id, aa.existing, hash);
        } else if (rc == CAIRN_EMSGSEEN) {
            if ((rc = reported(r, rc, 0)) == CAIRN_EMSGSEEN) { /* else: it could not be flushed */
                snprintf(r->note, sizeof r->note, "message '%s' was already consumed by task '%s'",
                         message_id, aa.msg_task);
                if (task_id_out)
                    snprintf(task_id_out, task_id_size, "%s", aa.msg_task);
                rc = 1;
            }
        } else if (rc)
            rc = reported(r, rc, acq && acq->finished ? acq->state_txn : 0);
        else if ((aa.deferred || !acq) && (rc = cairn__store_settle(r->store, 0)) != 0)
            rc = cairn__runner_store_fail(r, rc); /* the task is kept for `retry`: durably */
        else if (aa.deferred)
            rc = cairn__runner_fail(r, aa.deferred, "%s", aa.deferred_msg);
        if (!rc && acq && aa.created) { /* the run need not read back what it just wrote */
            acq->input_len = buf.size;
            acq->input = msgpack_sbuffer_release(&buf);
            memcpy(acq->payload_hash, hash, sizeof acq->payload_hash);
        }
    }
    json_decref(input);
    msgpack_sbuffer_destroy(&buf);
    return rc;
}

int cairn_runner_run(cairn_runner *r, const char *graph, const char *task_id, const char *id_fields,
                     const char *input_json, size_t input_len, const char *message_id,
                     char *task_id_out, size_t task_id_size)
{
    if (!r || !r->opened || !graph || !input_json ||
        (task_id_out && task_id_size < CAIRN_TASK_ID_MAX + 1))
        return CAIRN_EINVAL;
    r->err[0] = r->note[0] = 0;
    if (r->stop)
        return cairn__runner_fail(r, CAIRN_EINTR, "stopped: no new task is admitted");
    if (message_id && (!*message_id || strlen(message_id) > CAIRN__ID_MAX))
        return cairn__runner_fail(r, CAIRN_EINVAL, "message ID must be 1-%d bytes", CAIRN__ID_MAX);
    cairn_graph *g = cairn__find_graph(r, graph);
    if (!g)
        return cairn__runner_fail(r, CAIRN_ENOGRAPH, "no graph named '%s'", graph);
    char id[CAIRN__ID_MAX + 1] = "";
    acquire_arg acq = {.r = r, .g = g, .token = cairn__random_u64()};
    int created, rc = admit_input(r, g, task_id, id_fields, input_json, input_len, message_id, id,
                                  sizeof id, &acq, &created);
    if (task_id_out && id[0])
        snprintf(task_id_out, task_id_size, "%s", id);
    if (rc)
        return rc == 1 ? 0 : rc;
    acq.fresh = created;
    return cairn__run_acquired(r, g, id, &acq);
}

int cairn__runner_admit(cairn_runner *r, const char *graph, const char *task_id,
                        const char *input_json, size_t input_len, int *created)
{
    if (!r || !r->opened || !graph || !task_id || !input_json || !created)
        return CAIRN_EINVAL;
    r->err[0] = r->note[0] = 0;
    if (r->stop)
        return cairn__runner_fail(r, CAIRN_EINTR, "stopped: no new task is admitted");
    cairn_graph *g = cairn__find_graph(r, graph);
    if (!g)
        return cairn__runner_fail(r, CAIRN_ENOGRAPH, "no graph named '%s'", graph);
    char id[CAIRN__ID_MAX + 1];
    return admit_input(r, g, task_id, NULL, input_json, input_len, NULL, id, sizeof id, NULL,
                       created);
}

static int graph_of_txn(cairn__txn *t, void *arg)
{
    char *graph = arg;
    cairn__task_rec task;
    int rc = cairn__task_get(t, graph, &task); /* arg holds the id on entry */
    if (rc == CAIRN_ENOTFOUND)
        return cairn__store_fail(cairn__txn_store(t), rc, "no task '%s'", graph);
    if (!rc)
        snprintf(graph, CAIRN__NAME_MAX + 1, "%s", task.graph);
    return rc;
}

/* The graph a stored task belongs to. */
int cairn__task_graph(cairn_runner *r, const char *id, const cairn_graph **g)
{
    char buf[CAIRN__ID_MAX + 1];
    snprintf(buf, sizeof buf, "%s", id);
    int rc = cairn__store_read(r->store, graph_of_txn, buf);
    if (rc)
        return cairn__runner_store_fail(r, rc);
    *g = cairn__find_graph(r, buf);
    if (!*g)
        return cairn__runner_fail(r, CAIRN_ENOGRAPH,
                                  "task '%s' belongs to graph '%s', which this "
                                  "program does not define",
                                  id, buf);
    return 0;
}

int cairn_runner_resume(cairn_runner *r, const char *task_id)
{
    if (!r || !r->opened || !task_id)
        return CAIRN_EINVAL;
    r->err[0] = r->note[0] = 0;
    const cairn_graph *g;
    int rc = cairn__task_graph(r, task_id, &g);
    return rc ? rc : cairn__execute(r, g, task_id, NULL, NULL);
}
