/* runner/inspect.c - the store's read-only views in the public API: cairn_store_list,
 * cairn_store_audit and cairn_store_stats (what `cairn list`, `audit` and `stats` print).
 *
 * One style for all three, LMDB's callbacks rather than cursors: each call runs in one read
 * transaction (a consistent snapshot, whatever other processes commit meanwhile) and lends the
 * caller's callback one row at a time, a struct this file fills on its stack. Because the library
 * always owns the rows, new fields can be appended to them without breaking a program built
 * against an older cairn.h. A cursor handle would keep the snapshot open between the caller's
 * calls, for as long as the caller likes, and a long-held snapshot stops LMDB from reusing pages
 * (the file grows): with a callback the snapshot lives exactly as long as the call.
 *
 * A record that cannot be read is never skipped silently: `list` hands it over as a row with
 * `err` set, so the caller can name it.
 */
#include <string.h>

#include "runner/internal.h"

_Static_assert(CAIRN_STATE_COUNT <=
                   sizeof((cairn_stats *)0)->by_state / sizeof((cairn_stats *)0)->by_state[0],
               "cairn_stats.by_state has room for every state");

/* What the caller's callback said: 0 go on, 1 stop (the call returns 0), < 0 stop with that. */
static int verdict(int rc) { return rc > 0 ? 1 : rc; }

/* The user's row functions run outside the store's fault guard (store.h): a fault in them is
 * theirs. */

/* ------------------------------------------------------------------ list */

typedef struct list_arg {
    cairn__txn *t;
    const char *graph;
    uint32_t limit, n;
    int stopped; /* the callback asked to stop: no further state is scanned */
    cairn_task_row_fn fn;
    void *user;
} list_arg;

static int list_cb(const char *id, void *arg)
{
    list_arg *a = arg;
    cairn__task_rec r;
    if (a->limit && a->n >= a->limit) {
        a->stopped = 1; /* the later states need not be scanned either */
        return 1;
    }
    int rc = cairn__task_get(a->t, id, &r);
    if (rc == CAIRN_ENOMEM || rc == CAIRN_EIO)
        return rc; /* the store failed, not this record */
    cairn_task_row row = {.task_id = id,
                          .err = rc,
                          .message = "",
                          .graph = "",
                          .error = "",
                          .error_step = "",
                          .tenant = ""};
    if (rc) {
        /* a corrupt record, or one of a newer schema: never hidden, reported by name */
        row.message = rc == CAIRN_ENOTFOUND ? "listed in the status index but has no record"
                                            : cairn_store_errmsg(cairn__txn_store(a->t));
    } else {
        if (a->graph && strcmp(a->graph, r.graph) != 0)
            return 0;
        row.graph = r.graph;
        row.state = (cairn_state)r.state;
        row.attempt = r.attempt;
        row.generation = r.generation;
        row.created_ms = r.created_ms;
        row.updated_ms = r.updated_ms;
        row.finished_ms = r.finished_ms;
        row.next_retry_ms = r.state == CAIRN_FAILED ? r.next_retry_ms : 0;
        row.tombstone = r.tombstone;
        row.error = r.error;
        row.error_step = r.error_step;
        row.tenant = r.tenant;
        a->n++;
    }
    void *g = cairn__guard_suspend();
    rc = verdict(a->fn(&row, a->user));
    cairn__guard_resume(g);
    if (rc == 1)
        a->stopped = 1;
    return rc;
}

static int list_txn(cairn__txn *t, void *arg)
{
    void **p = arg;
    list_arg *a = p[0];
    const cairn_state *only = p[1];
    a->t = t;
    int rc = 0;
    for (int s = 0; s < CAIRN_STATE_COUNT && !rc && !a->stopped; s++)
        if (!only || *only == (cairn_state)s)
            rc = cairn__due_each(t, (cairn_state)s, INT64_MAX, list_cb, a);
    return rc;
}

int cairn_store_list(cairn_store *s, const cairn_state *state, const char *graph, uint32_t limit,
                     cairn_task_row_fn fn, void *user)
{
    if (!s || !fn || (state && (unsigned)*state >= CAIRN_STATE_COUNT))
        return CAIRN_EINVAL;
    list_arg a = {.graph = graph, .limit = limit, .fn = fn, .user = user};
    void *p[2] = {&a, (void *)state};
    return cairn__store_read(s, list_txn, p);
}

/* ------------------------------------------------------------------ audit */

typedef struct audit_arg {
    const char *id;
    cairn_audit_row_fn fn;
    void *user;
} audit_arg;

static int audit_cb(const cairn__audit_rec *rec, void *arg)
{
    audit_arg *a = arg;
    cairn_audit_row row = {.t_ms = rec->t_ms,
                           .from = (cairn_state)rec->from,
                           .to = (cairn_state)rec->to,
                           .attempt = rec->attempt,
                           .generation = rec->generation,
                           .step = rec->step,
                           .reason = rec->reason};
    void *g = cairn__guard_suspend();
    int rc = verdict(a->fn(&row, a->user));
    cairn__guard_resume(g);
    return rc;
}

static int audit_txn(cairn__txn *t, void *arg)
{
    audit_arg *a = arg;
    cairn__task_rec r;
    int rc = cairn__task_get(t, a->id, &r);
    if (rc == CAIRN_ENOTFOUND)
        return cairn__store_fail(cairn__txn_store(t), rc, "no task '%s'", a->id);
    if (rc)
        return rc;
    rc = cairn__audit_each(t, a->id, audit_cb, a);
    return rc == 1 ? 0 : rc;
}

int cairn_store_audit(cairn_store *s, const char *task_id, cairn_audit_row_fn fn, void *user)
{
    if (!s || !task_id || !fn || strlen(task_id) > CAIRN_TASK_ID_MAX)
        return CAIRN_EINVAL;
    audit_arg a = {.id = task_id, .fn = fn, .user = user};
    return cairn__store_read(s, audit_txn, &a);
}

/* ------------------------------------------------------------------ stats */

static int stats_txn(cairn__txn *t, void *arg) { return cairn__store_stats_get(t, arg); }

int cairn_store_stats(cairn_store *s, cairn_stats_fn fn, void *user)
{
    if (!s || !fn)
        return CAIRN_EINVAL;
    cairn__store_stats st;
    int rc = cairn__store_read(s, stats_txn, &st);
    if (rc)
        return rc;
    /* one row, handed over after the transaction: this callback may use the store */
    cairn_stats row = {.tombstones = st.tombstones,
                       .messages = st.messages,
                       .step_records = st.step_records,
                       .audit_records = st.audit_records,
                       .map_size = st.map_size,
                       .map_used = st.map_used,
                       .page_size = st.page_size,
                       .durability = st.durability,
                       .last_commit = st.last_txn,
                       .durable_commit = st.durable_txn,
                       .readers = st.readers,
                       .oldest_reader_commit = st.oldest_reader_txn,
                       .oldest_reader_pid = st.oldest_reader_pid,
                       .oldest_in_doubt_ms = st.oldest_in_doubt_ms,
                       .next_retry_ms = st.next_retry_ms,
                       .retry_due = st.retry_due};
    for (int i = 0; i < CAIRN_STATE_COUNT; i++)
        row.by_state[i] = st.by_state[i];
    rc = verdict(fn(&row, user));
    return rc == 1 ? 0 : rc;
}

/* ------------------------------------------------------------------ check */

typedef struct check_arg {
    cairn_check_row_fn fn;
    void *user;
    uint64_t records, problems;
} check_arg;

static int check_cb(const char *database, const char *task, const char *message, void *arg)
{
    check_arg *a = arg;
    cairn_check_row row = {.database = database, .task_id = task, .message = message};
    void *g = cairn__guard_suspend();
    int rc = verdict(a->fn(&row, a->user));
    cairn__guard_resume(g);
    return rc;
}

static int check_txn(cairn__txn *t, void *arg)
{
    check_arg *a = arg;
    return cairn__store_check(t, check_cb, a, &a->records, &a->problems);
}

int cairn_store_check(cairn_store *s, cairn_check_row_fn fn, void *user, uint64_t *records)
{
    if (!s || !fn)
        return CAIRN_EINVAL;
    check_arg a = {.fn = fn, .user = user};
    int rc = cairn__store_read(s, check_txn, &a);
    if (records)
        *records = a.records;
    if (rc)
        return rc == 1 ? 0 : rc;
    if (a.problems)
        return cairn__store_fail(s, CAIRN_ECORRUPT, "%llu problem%s in %llu records",
                                 (unsigned long long)a.problems, a.problems == 1 ? "" : "s",
                                 (unsigned long long)a.records);
    return 0;
}
