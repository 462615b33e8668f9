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
 * again instead, with the same delivery ID for the receiver to deduplicate.
 *
 * Every write is a callback run by cairn__store_write() (see checkpoint/store.h): it may run
 * twice when the map grows, so the callbacks only compute from their argument and the txn.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runner/canon.h"
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

/* ------------------------------------------------------------------ lifecycle */

cairn_runner *cairn_runner_new(void)
{
    cairn_runner *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->max_attempts = 3;
    r->lease_ms = 60000;
    r->inline_wait_ms = 2000;
    r->retention_s = 7 * DAY_S;
    r->tombstone_s = 30 * DAY_S;
    return r;
}

void cairn_runner_free(cairn_runner *r)
{
    if (!r)
        return;
    free(r->graphs);
    free(r);
}

const char *cairn_runner_errmsg(const cairn_runner *r)
{
    return r ? (r->err[0] ? r->err : r->note) : "no runner";
}

int cairn_runner_add_graph(cairn_runner *r, cairn_graph *g)
{
    if (!r || !g)
        return CAIRN_EINVAL;
    int rc = cairn_graph_validate(g);
    if (rc)
        return cairn__runner_fail(r, rc, "%s", cairn_graph_errmsg(g));
    for (size_t i = 0; i < r->n_graphs; i++)
        if (strcmp(r->graphs[i]->name, g->name) == 0)
            return cairn__runner_fail(r, CAIRN_EGRAPH, "graph '%s' registered twice", g->name);
    cairn_graph **gs = realloc(r->graphs, (r->n_graphs + 1) * sizeof *gs);
    if (!gs)
        return CAIRN_ENOMEM;
    r->graphs = gs;
    r->graphs[r->n_graphs++] = g;
    return 0;
}

int cairn_runner_set_store(cairn_runner *r, cairn_store *s)
{
    if (!r || !s)
        return CAIRN_EINVAL;
    r->store = s;
    return 0;
}

int cairn_runner_set_max_attempts(cairn_runner *r, uint32_t n)
{
    if (!r || n == 0)
        return CAIRN_EINVAL;
    r->max_attempts = n;
    return 0;
}

int cairn_runner_set_lease_ms(cairn_runner *r, uint32_t ms)
{
    if (!r || ms < 100)
        return CAIRN_EINVAL;
    r->lease_ms = ms;
    return 0;
}

int cairn_runner_set_inline_wait_ms(cairn_runner *r, uint32_t ms)
{
    if (!r)
        return CAIRN_EINVAL;
    r->inline_wait_ms = ms;
    return 0;
}

int cairn_runner_set_retry_report(cairn_runner *r, cairn_retry_report_fn fn, void *user)
{
    if (!r)
        return CAIRN_EINVAL;
    r->report = fn;
    r->report_user = user;
    return 0;
}

int cairn_runner_set_tenant_limit(cairn_runner *r, const char *field, uint32_t max_running)
{
    if (!r || (field && strlen(field) > CAIRN__NAME_MAX))
        return CAIRN_EINVAL;
    snprintf(r->tenant_field, sizeof r->tenant_field, "%s", field ? field : "");
    r->tenant_max = field ? max_running : 0;
    return 0;
}

int cairn_runner_set_allow_graph_change(cairn_runner *r, int allow)
{
    if (!r)
        return CAIRN_EINVAL;
    r->allow_graph_change = !!allow;
    return 0;
}

int cairn_runner_set_retention(cairn_runner *r, uint64_t outputs_s, uint64_t tombstones_s)
{
    /* at most about 290 years, so that now - retention never wraps */
    const uint64_t max_s = (uint64_t)INT64_MAX / 1000 / 1024;
    if (!r || tombstones_s < outputs_s)
        return CAIRN_EINVAL;
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
    if (!r || !r->store)
        return r ? cairn__runner_fail(r, CAIRN_EINVAL, "no store set") : CAIRN_EINVAL;
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
 * it: a step runs again if any step it reads runs again. One pass suffices in topological
 * order. */
void cairn__mark_downstream(const cairn_graph *g, unsigned char *redo)
{
    for (size_t i = 0; i < g->n_steps; i++) {
        const cairn_step *s = g->steps[g->order[i]];
        for (size_t d = 0; d < s->n_deps && !redo[i]; d++)
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
 * is downstream of them. Returns how many were marked. */
size_t cairn__mark_changed(const cairn_graph *g, const char *pin, unsigned char *redo)
{
    size_t n = 0;
    for (size_t i = 0; i < g->n_steps; i++)
        if (!pinned(pin, g->steps[g->order[i]]))
            redo[i] = 1;
    cairn__mark_downstream(g, redo);
    for (size_t i = 0; i < g->n_steps; i++)
        n += redo[i];
    return n;
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
    struct acquire_arg *acq; /* acquired in the same transaction: one commit, one flush */
    int deferred;            /* admitted, but may not start now: CAIRN_ETENANT or CAIRN_EBUSY */
    char deferred_msg[512];
} admit_arg;

static int acquire_txn(cairn__txn *t, void *arg);

static int admit_txn(cairn__txn *t, void *arg)
{
    admit_arg *a = arg;
    a->deferred = 0; /* the callback may run twice (map growth): start clean */
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
        if (!rc)
            rc = cairn__task_put(t, &task);
    } else if (rc == 0 && strcmp(task.graph, a->g->name) != 0) {
        rc = cairn__store_fail(cairn__txn_store(t), CAIRN_ECONFLICT,
                               "task '%s' belongs to graph '%s', not '%s'", a->id, task.graph,
                               a->g->name);
    }
    if (rc)
        return rc;
    /* A task that may not start now (tenant limit, running elsewhere) is still admitted: it is
     * recorded as pending for `retry`, and the run reports the refusal after the commit. The
     * acquire writes nothing before it refuses, and the message is not recorded as consumed,
     * so its redelivery runs the task. */
    rc = acquire_txn(t, a->acq);
    if (rc == CAIRN_ETENANT || rc == CAIRN_EBUSY) {
        a->deferred = rc;
        snprintf(a->deferred_msg, sizeof a->deferred_msg, "%s",
                 cairn_store_errmsg(cairn__txn_store(t)));
        return 0;
    }
    if (!rc && a->message_id)
        rc = cairn__msg_put(t, a->message_id, a->id);
    return rc;
}

/* ------------------------------------------------------------------ acquire */

struct acquire_arg {
    cairn_runner *r;
    const cairn_graph *g;
    const char *id;
    uint64_t token;
    uint32_t attempt, generation;
    int finished; /* 0 running now; else the final code to return (0 succeeded) */
    uint32_t tenant_running;
};
typedef struct acquire_arg acquire_arg;

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
    int rc = cairn__task_get(t, a->id, &task);
    if (rc == CAIRN_ENOTFOUND)
        return cairn__store_fail(s, rc, "no task '%s'", a->id);
    if (rc)
        return rc;
    a->finished = 0;
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
        return cairn__store_fail(s, CAIRN_EINDOUBT,
                                 "task '%s' is in doubt at step '%s': %s; settle it with "
                                 "`cairn resolve %s --step %s --done|--not-done`",
                                 a->id, task.error_step, task.error, a->id, task.error_step);
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
                "first changed step: '%s'); rerun with --allow-graph-change to redo from it",
                a->id, a->g->name, task.steps_pin, a->g->pin, ch ? ch->name : "(graph header)");
        /* changed and new steps run again, with everything downstream of them; a change of
         * dependencies or delivery class alone re-runs nothing */
        unsigned char *redo = calloc(a->g->n_steps, 1);
        if (!redo)
            return CAIRN_ENOMEM;
        size_t n_redo = cairn__mark_changed(a->g, task.steps_pin, redo);
        rc = n_redo ? cairn__new_generation(t, a->g, &task, redo) : 0;
        free(redo);
        if (rc)
            return rc;
        if ((rc = cairn__audit(t, &task, (cairn_state)task.state, (cairn_state)task.state,
                               ch ? ch->name : NULL,
                               "graph changed (%s -> %s): %zu step(s) to redo, generation %u",
                               task.steps_pin, a->g->pin, n_redo, task.generation)))
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

/* ------------------------------------------------------------------ step commits */

/* C_DONE_LAST commits the last step's output and the task's success in one transaction. */
typedef enum {
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
    const void *out;
    size_t out_len;
    const char *err;
    int64_t next_retry_ms;
    uint32_t invocations; /* the step's invocation count to record */
} commit_arg;

/* Loads the task and checks we still hold its lease (fencing). Renews the lease once less than
 * half of it is left; *renewed says whether the task record must be written back (a step
 * commit that neither renews nor changes state leaves the task record alone, which keeps the
 * commit to the step and audit databases). */
static int fenced(cairn__txn *t, cairn_ctx *c, cairn__task_rec *task, int *renewed)
{
    int rc = cairn__task_get(t, c->task_id, task);
    if (rc)
        return rc;
    if (task->state != CAIRN_RUNNING || task->lease_token != c->lease_token)
        return cairn__store_fail(cairn__txn_store(t), CAIRN_EBUSY,
                                 "task '%s': lease lost to pid %d on %s; not committing step '%s'",
                                 c->task_id, task->owner.pid, task->owner.host, c->step->name);
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
    cairn__step_rec s = {
        .generation = c->generation, .invocations = a->invocations, .updated_ms = cairn__now_ms()};
    snprintf(s.error, sizeof s.error, "%s", a->err ? a->err : "");
    const char *step = c->step->name;
    switch (a->kind) {
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
         * it cut short is not counted, so restarts never use up a healthy task's attempts. */
        if (task.attempt > 0)
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
        return rc; /* the step record is left as it was */
    case C_SUCCEEDED:
        task.error[0] = task.error_step[0] = 0;
        cairn__release_lease(&task);
        rc = cairn__transition(t, &task, CAIRN_SUCCEEDED, 0, NULL, "all steps done");
        if (!rc)
            rc = cairn__task_put(t, &task);
        return rc;
    }
    if (!rc)
        rc = cairn__step_put(t, c->task_id, step, &s);
    if (!rc && (renewed || task.state != CAIRN_RUNNING))
        rc = cairn__task_put(t, &task);
    return rc;
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
    int rc = cairn__store_write(c->r->store, durable, commit_txn, &a);
    return rc ? cairn__runner_store_fail(c->r, rc) : 0;
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

static int unpack_copy(const void *p, size_t n, void **bytes, msgpack_unpacked *u)
{
    size_t off = 0;
    *bytes = dup_bytes(p, n);
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
    if (!c->input_bytes) {
        const void *in;
        size_t in_len;
        rc = cairn__input_get(t, c->task_id, &in, &in_len);
        if (rc == CAIRN_ENOTFOUND)
            return cairn__store_fail(cairn__txn_store(t), CAIRN_ECORRUPT,
                                     "task '%s' has no stored input", c->task_id);
        if (rc || (rc = unpack_copy(in, in_len, &c->input_bytes, &c->input)))
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
            if ((rc = unpack_copy(s.output, s.output_len, &d->bytes, &d->u)))
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
        if ((rc = unpack_copy(p, n, &c->progress_bytes, &c->progress)))
            return rc;
        c->has_progress = 1;
    } else if (rc != CAIRN_ENOTFOUND)
        return rc;
    return 0;
}

static void ctx_clear(cairn_ctx *c)
{
    for (size_t i = 0; i < c->n_deps; i++) {
        if (c->deps[i].bytes) {
            msgpack_unpacked_destroy(&c->deps[i].u);
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
    for (;;) {
        load_arg la = {.ctx = c, .g = g};
        rc = cairn__store_read(r->store, load_txn, &la);
        if (rc)
            return cairn__runner_store_fail(r, rc);
        uint32_t inv = la.has_rec ? la.rec.invocations : 0;
        cairn_step_state st = la.has_rec ? (cairn_step_state)la.rec.state : CAIRN_STEP_PENDING;
        if (st == CAIRN_STEP_DONE)
            return 0;
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
                          : cairn__runner_fail(r, CAIRN_EINDOUBT,
                                               "task '%s': %s; settle it with `cairn resolve %s "
                                               "--step %s --done|--not-done`",
                                               c->task_id, why, c->task_id, s->name);
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
            } else
                rc = commit(c, C_DONE, durable, o.out, o.out_len, NULL, inv, 0);
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
                                        "task '%s' is in doubt: effect '%s' (delivery %s): %s; "
                                        "settle it with `cairn resolve %s --step %s "
                                        "--done|--not-done`",
                                        c->task_id, s->name, cairn__delivery_id(c), o.err,
                                        c->task_id, s->name);
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
        if (inv >= s->max_invocations) {
            char why[CAIRN__ERR_MAX];
            snprintf(why, sizeof why, "step '%s' failed on all %u invocations; last: %s", s->name,
                     inv, o.err);
            rc = commit(c, C_DEAD, CAIRN__DURABLE, NULL, 0, why, inv, 0);
            cairn__outcome_free(&o);
            return rc ? rc
                      : cairn__runner_fail(r, CAIRN_EDEAD, "task '%s' is dead: %s", c->task_id,
                                           why);
        }
        if (delay <= r->inline_wait_ms && !r->stop) {
            rc = commit(c, C_FAILED, CAIRN__RELAXED, NULL, 0, o.err, inv, 0);
            cairn__outcome_free(&o);
            if (rc)
                return rc;
            sleep_ms(r, delay);
            continue;
        }
        int64_t next = cairn__now_ms() + delay;
        if (c->attempt >= r->max_attempts) {
            char why[CAIRN__ERR_MAX];
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
static int run_acquired(cairn_runner *r, const cairn_graph *g, const char *id, const acquire_arg *a)
{
    int rc = 0;
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
    msgpack_sbuffer_init(&c.out);
    msgpack_packer_init(&c.pk, &c.out, msgpack_sbuffer_write);
    for (size_t i = 0; i < g->n_steps && rc == 0; i++) {
        c.step = g->steps[g->order[i]];
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
         * behind a process that lives on; it is due again at once */
        char keep[sizeof r->err];
        snprintf(keep, sizeof keep, "%s", r->err);
        commit(&c, C_STOPPED, CAIRN__DURABLE, NULL, 0, keep, 0, 0);
        snprintf(r->err, sizeof r->err, "%s", keep);
    }
    if (c.input_bytes) {
        msgpack_unpacked_destroy(&c.input);
        free(c.input_bytes);
    }
    msgpack_sbuffer_destroy(&c.out);
    return rc;
}

int cairn__execute(cairn_runner *r, const cairn_graph *g, const char *id)
{
    r->err[0] = r->note[0] = 0;
    if (r->stop)
        return cairn__runner_fail(r, CAIRN_EINTR, "stopped: task '%s' not started", id);
    acquire_arg a = {.r = r, .g = g, .id = id, .token = cairn__random_u64()};
    int rc = cairn__store_write(r->store, CAIRN__RELAXED, acquire_txn, &a);
    if (rc)
        return cairn__runner_store_fail(r, rc);
    return run_acquired(r, g, id, &a);
}

int cairn_runner_run(cairn_runner *r, const char *graph, const char *task_id, const char *id_fields,
                     const char *input_json, size_t input_len, const char *message_id,
                     char *task_id_out)
{
    if (!r || !r->opened || !graph || !input_json)
        return CAIRN_EINVAL;
    r->err[0] = r->note[0] = 0;
    if (r->stop)
        return cairn__runner_fail(r, CAIRN_EINTR, "stopped: no new task is admitted");
    if (message_id && (!*message_id || strlen(message_id) > CAIRN__ID_MAX))
        return cairn__runner_fail(r, CAIRN_EINVAL, "message ID must be 1-%d bytes", CAIRN__ID_MAX);
    cairn_graph *g = cairn__find_graph(r, graph);
    if (!g)
        return cairn__runner_fail(r, CAIRN_ENOGRAPH, "no graph named '%s'", graph);
    char err[512];
    json_t *input = NULL;
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
        rc = cairn__task_id_derive(graph, input, id_fields, id, sizeof id, err, sizeof err);
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
        snprintf(task_id_out, CAIRN__ID_MAX + 1, "%s", id);
    acquire_arg acq = {.r = r, .g = g, .id = id, .token = cairn__random_u64()};
    if (!rc) {
        admit_arg aa = {.r = r,
                        .g = g,
                        .id = id,
                        .hash = hash,
                        .message_id = message_id,
                        .tenant = tenant,
                        .input = buf.data,
                        .input_len = buf.size,
                        .acq = &acq};
        rc = cairn__store_write(r->store, CAIRN__RELAXED, admit_txn, &aa);
        if (rc == CAIRN_ECONFLICT && aa.existing[0] && strcmp(aa.existing, hash) != 0)
            rc = cairn__runner_fail(r, rc,
                                    "task '%s' exists with payload hash %s; this input hashes to "
                                    "%s (nothing changed)",
                                    id, aa.existing, hash);
        else if (rc == CAIRN_EMSGSEEN) {
            snprintf(r->note, sizeof r->note, "message '%s' was already consumed by task '%s'",
                     message_id, aa.msg_task);
            if (task_id_out)
                snprintf(task_id_out, CAIRN__ID_MAX + 1, "%s", aa.msg_task);
            rc = 0;
            json_decref(input);
            msgpack_sbuffer_destroy(&buf);
            return 0;
        } else if (rc)
            rc = cairn__runner_store_fail(r, rc);
        else if (aa.deferred)
            rc = cairn__runner_fail(r, aa.deferred, "%s", aa.deferred_msg);
    }
    json_decref(input);
    msgpack_sbuffer_destroy(&buf);
    if (rc)
        return rc;
    return run_acquired(r, g, id, &acq);
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
    return rc ? rc : cairn__execute(r, g, task_id);
}
