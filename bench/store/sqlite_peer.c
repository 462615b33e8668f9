/* bench/store/sqlite_peer.c - the peer cairn's checkpoint store is measured against: the same
 * store written on SQLite, as a careful author would write it.
 *
 * Same schema (tasks with a status/due index and a finished index, steps keyed by
 * task/step/generation holding the output blob, progress, idempotency, audit) and the same
 * transactions as cairn's runner: admission and lease in one transaction; a step commit reads
 * the task row, checks the lease token and upserts the step row with its output (renewing the
 * lease only at half-life, and auditing effects and transitions, not compute completions, as
 * cairn does); the last step's commit also finishes the task. One BEGIN IMMEDIATE each.
 * Every statement is prepared once and reused, WAL mode is on, and durability is chosen with
 * synchronous=FULL (survives power loss: the WAL is fsynced at every commit) or NORMAL
 * (survives process crashes: fsync only at checkpoints), or NORMAL with FULL for the commit that
 * finishes a task (PEER_SPLIT: cairn sync's own promise, for an info row). Ordinary rowid tables
 * are used because SQLite advises them for rows with large blobs (8 KB outputs).
 */
#include <msgpack.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/store/bench.h"

enum {
    ST_RUNNING = 1, /* the same numbering as cairn_state */
    ST_SUCCEEDED = 2,
    LEASE_MS = 60000
};

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS tasks("
    " id TEXT PRIMARY KEY, graph TEXT NOT NULL, fingerprint TEXT NOT NULL,"
    " payload_hash TEXT NOT NULL, steps_pin TEXT NOT NULL, tenant TEXT NOT NULL DEFAULT '',"
    " error TEXT NOT NULL DEFAULT '', error_step TEXT NOT NULL DEFAULT '',"
    " state INTEGER NOT NULL, tombstone INTEGER NOT NULL DEFAULT 0,"
    " attempt INTEGER NOT NULL DEFAULT 0, generation INTEGER NOT NULL,"
    " audit_seq INTEGER NOT NULL DEFAULT 0, created_ms INTEGER NOT NULL,"
    " updated_ms INTEGER NOT NULL, finished_ms INTEGER NOT NULL DEFAULT 0,"
    " next_retry_ms INTEGER NOT NULL DEFAULT 0, owner_host TEXT NOT NULL DEFAULT '',"
    " owner_pid INTEGER NOT NULL DEFAULT 0, owner_start INTEGER NOT NULL DEFAULT 0,"
    " lease_token INTEGER NOT NULL DEFAULT 0, lease_expires_ms INTEGER NOT NULL DEFAULT 0,"
    " due_ms INTEGER NOT NULL, input BLOB);"
    "CREATE INDEX IF NOT EXISTS tasks_due ON tasks(state, due_ms);"
    "CREATE INDEX IF NOT EXISTS tasks_finished ON tasks(finished_ms) WHERE state IN (2, 4);"
    "CREATE TABLE IF NOT EXISTS steps("
    " task TEXT NOT NULL, step TEXT NOT NULL, generation INTEGER NOT NULL,"
    " state INTEGER NOT NULL, resolved INTEGER NOT NULL DEFAULT 0,"
    " invocations INTEGER NOT NULL, updated_ms INTEGER NOT NULL,"
    " intent_ms INTEGER NOT NULL DEFAULT 0, error TEXT NOT NULL DEFAULT '', output BLOB,"
    " PRIMARY KEY(task, step, generation));"
    "CREATE TABLE IF NOT EXISTS progress("
    " task TEXT NOT NULL, step TEXT NOT NULL, generation INTEGER NOT NULL, data BLOB NOT NULL,"
    " PRIMARY KEY(task, step, generation));"
    "CREATE TABLE IF NOT EXISTS idempotency(task TEXT PRIMARY KEY, payload_hash TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS audit("
    " task TEXT NOT NULL, seq INTEGER NOT NULL, t_ms INTEGER NOT NULL,"
    " from_state INTEGER NOT NULL, to_state INTEGER NOT NULL, attempt INTEGER NOT NULL,"
    " generation INTEGER NOT NULL, step TEXT NOT NULL, reason TEXT NOT NULL,"
    " PRIMARY KEY(task, seq));";

enum stmt_id {
    Q_BEGIN_W,
    Q_BEGIN_R,
    Q_COMMIT,
    Q_ROLLBACK,
    Q_IDEM,
    Q_IDEM_GET,
    Q_TASK_NEW,
    Q_TASK_GET,
    Q_ACQUIRE,
    Q_RENEW,
    Q_FINISH,
    Q_STEP_PUT,
    Q_AUDIT,
    Q_LOAD_TASK,
    Q_LOAD_STEP,
    Q_LOAD_PROGRESS,
    Q_AUDIT_LAST,
    Q_COUNT
};

static const char *const sql[Q_COUNT] = {
    [Q_BEGIN_W] = "BEGIN IMMEDIATE",
    [Q_BEGIN_R] = "BEGIN",
    [Q_COMMIT] = "COMMIT",
    [Q_ROLLBACK] = "ROLLBACK",
    [Q_IDEM] = "INSERT INTO idempotency(task, payload_hash) VALUES(?1, ?2) "
               "ON CONFLICT(task) DO NOTHING",
    [Q_IDEM_GET] = "SELECT payload_hash FROM idempotency WHERE task = ?1",
    [Q_TASK_NEW] = "INSERT INTO tasks(id, graph, fingerprint, payload_hash, steps_pin, state,"
                   " generation, audit_seq, created_ms, updated_ms, due_ms, input,"
                   " owner_host, owner_pid, lease_token, lease_expires_ms)"
                   " VALUES(?1, 'bench', ?2, ?3, ?4, ?5, 1, 1, ?6, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    [Q_TASK_GET] = "SELECT state, lease_token, audit_seq, attempt, generation FROM tasks "
                   "WHERE id = ?1",
    [Q_ACQUIRE] = "UPDATE tasks SET state = 1, attempt = attempt + 1, owner_host = ?2,"
                  " owner_pid = ?3, owner_start = 0, lease_token = ?4, lease_expires_ms = ?5,"
                  " due_ms = ?5, updated_ms = ?6, audit_seq = ?7 WHERE id = ?1",
    [Q_RENEW] = "UPDATE tasks SET lease_expires_ms = ?2, due_ms = ?2, audit_seq = ?3 WHERE id = ?1",
    [Q_FINISH] = "UPDATE tasks SET state = 2, finished_ms = ?2, updated_ms = ?2, due_ms = ?2,"
                 " owner_host = '', owner_pid = 0, owner_start = 0, lease_token = 0,"
                 " lease_expires_ms = 0, error = '', error_step = '', audit_seq = ?3 WHERE id = ?1",
    [Q_STEP_PUT] = "INSERT INTO steps(task, step, generation, state, invocations, updated_ms,"
                   " error, output) VALUES(?1, ?2, ?3, ?4, ?5, ?6, '', ?7) "
                   "ON CONFLICT(task, step, generation) DO UPDATE SET state = excluded.state,"
                   " invocations = excluded.invocations, updated_ms = excluded.updated_ms,"
                   " error = excluded.error, output = excluded.output",
    [Q_AUDIT] = "INSERT INTO audit(task, seq, t_ms, from_state, to_state, attempt, generation,"
                " step, reason) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    [Q_LOAD_TASK] = "SELECT input, state, generation FROM tasks WHERE id = ?1",
    /* the record applying in a generation is the latest one at or below it, as in cairn */
    [Q_LOAD_STEP] = "SELECT state, invocations, error, output FROM steps"
                    " WHERE task = ?1 AND step = ?2 AND generation <= ?3"
                    " ORDER BY generation DESC LIMIT 1",
    [Q_LOAD_PROGRESS] =
        "SELECT data FROM progress WHERE task = ?1 AND step = ?2 AND generation = ?3",
    /* an audit row that does not rewrite the task row takes the next number after the task's
     * last one, as cairn's cairn__audit_append does */
    [Q_AUDIT_LAST] = "SELECT coalesce(max(seq), 0) FROM audit WHERE task = ?1",
};

struct bench_peer {
    sqlite3 *db;
    sqlite3_stmt *q[Q_COUNT];
    void *out; /* the blob every step outputs */
    size_t out_len;
    msgpack_sbuffer input;
    char host[64];
    int pid;
    int split;         /* PEER_SPLIT: FULL only for a task's last commit */
    char delivery[40]; /* the effect's delivery ID, for its intent's audit row */
    /* a done step's output that the next commit writes too (bench_peer_carry) */
    const char *carry_step;
    const void *carry_out;
    size_t carry_len;
    char err[512];
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int fail(bench_peer *p, const char *what)
{
    snprintf(p->err, sizeof p->err, "sqlite: %s: %s", what, sqlite3_errmsg(p->db));
    return -1;
}

/* Steps a statement that returns no row (or whose row is ignored) and resets it. */
static int exec(bench_peer *p, enum stmt_id id)
{
    sqlite3_stmt *s = p->q[id];
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : fail(p, sql[id]);
}

static void text(sqlite3_stmt *s, int i, const char *v)
{
    sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC);
}

static int rollback(bench_peer *p)
{
    sqlite3_reset(p->q[Q_ROLLBACK]);
    sqlite3_step(p->q[Q_ROLLBACK]);
    sqlite3_reset(p->q[Q_ROLLBACK]);
    return -1;
}

bench_peer *bench_peer_open(const char *dir, bench_peer_sync sync, size_t out_size, char *err,
                            size_t cap)
{
    bench_peer *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, cap, "out of memory");
        return NULL;
    }
    msgpack_sbuffer_init(&p->input);
    p->out_len = out_size;
    if (!(p->out = bench_output(out_size))) {
        snprintf(err, cap, "out of memory");
        bench_peer_close(p);
        return NULL;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/store.db", dir);
    if (sqlite3_open_v2(path, &p->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK) {
        snprintf(err, cap, "sqlite: cannot open %s: %s", path,
                 p->db ? sqlite3_errmsg(p->db) : "out of memory");
        bench_peer_close(p);
        return NULL;
    }
    sqlite3_busy_timeout(p->db, 10000); /* several processes share a store (concurrent) */
    char pragmas[256];
    snprintf(pragmas, sizeof pragmas, "PRAGMA journal_mode=WAL; PRAGMA synchronous=%s;",
             sync == PEER_FULL ? "FULL" : "NORMAL");
    char *msg = NULL;
    if (sqlite3_exec(p->db, pragmas, NULL, NULL, &msg) != SQLITE_OK ||
        sqlite3_exec(p->db, schema, NULL, NULL, &msg) != SQLITE_OK) {
        snprintf(err, cap, "sqlite: schema of %s: %s", path, msg ? msg : "?");
        sqlite3_free(msg);
        bench_peer_close(p);
        return NULL;
    }
    for (int i = 0; i < Q_COUNT; i++) {
        if (sqlite3_prepare_v3(p->db, sql[i], -1, SQLITE_PREPARE_PERSISTENT, &p->q[i], NULL) !=
            SQLITE_OK) {
            snprintf(err, cap, "sqlite: prepare \"%s\": %s", sql[i], sqlite3_errmsg(p->db));
            bench_peer_close(p);
            return NULL;
        }
    }
    p->split = sync == PEER_SPLIT;
    gethostname(p->host, sizeof p->host - 1);
    p->pid = (int)getpid();
    return p;
}

uint64_t bench_peer_bytes(bench_peer *p)
{
    sqlite3_stmt *q = NULL;
    int64_t pages = 0, size = 0;
    if (sqlite3_exec(p->db, "PRAGMA wal_checkpoint(TRUNCATE)", 0, 0, 0) != SQLITE_OK)
        return 0;
    if (sqlite3_prepare_v2(p->db, "PRAGMA page_count", -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW)
        pages = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    if (sqlite3_prepare_v2(p->db, "PRAGMA page_size", -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW)
        size = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return (uint64_t)(pages * size);
}

void bench_peer_close(bench_peer *p)
{
    if (!p)
        return;
    for (int i = 0; i < Q_COUNT; i++)
        sqlite3_finalize(p->q[i]);
    sqlite3_close(p->db);
    msgpack_sbuffer_destroy(&p->input);
    free(p->out);
    free(p);
}

const char *bench_peer_errmsg(const bench_peer *p) { return p ? p->err : "no peer"; }

/* ------------------------------------------------------------------ pieces of transactions */

typedef struct task_row {
    int state, attempt, generation;
    int64_t lease_token, audit_seq;
} task_row;

/* 0 found, 1 not found, -1 error */
static int task_get(bench_peer *p, const char *id, task_row *t)
{
    sqlite3_stmt *s = p->q[Q_TASK_GET];
    text(s, 1, id);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        t->state = sqlite3_column_int(s, 0);
        t->lease_token = sqlite3_column_int64(s, 1);
        t->audit_seq = sqlite3_column_int64(s, 2);
        t->attempt = sqlite3_column_int(s, 3);
        t->generation = sqlite3_column_int(s, 4);
    }
    sqlite3_reset(s);
    if (rc == SQLITE_ROW)
        return 0;
    return rc == SQLITE_DONE ? 1 : fail(p, "read task");
}

static int audit(bench_peer *p, const char *task, int64_t seq, int from, int to, const task_row *t,
                 const char *step, const char *fmt, ...)
{
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    sqlite3_stmt *s = p->q[Q_AUDIT];
    text(s, 1, task);
    sqlite3_bind_int64(s, 2, seq);
    sqlite3_bind_int64(s, 3, now_ms());
    sqlite3_bind_int(s, 4, from);
    sqlite3_bind_int(s, 5, to);
    sqlite3_bind_int(s, 6, t->attempt);
    sqlite3_bind_int(s, 7, t->generation);
    text(s, 8, step ? step : "");
    text(s, 9, reason);
    return exec(p, Q_AUDIT);
}

static int task_new(bench_peer *p, const char *id, const void *input, size_t input_len, int state,
                    uint64_t token)
{
    sqlite3_stmt *s = p->q[Q_TASK_NEW];
    int64_t now = now_ms();
    text(s, 1, id);
    text(s, 2, "0f3c5b9d2e8a41f6b7c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5");
    text(s, 3, "6a1f0e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff");
    text(s, 4, "s0@1,s1@1,s2@1,s3@1,s4@1,s5@1,s6@1,s7@1,s8@1,s9@1");
    sqlite3_bind_int(s, 5, state);
    sqlite3_bind_int64(s, 6, now);
    sqlite3_bind_int64(s, 7, state == ST_RUNNING ? now + LEASE_MS : now);
    sqlite3_bind_blob(s, 8, input, (int)input_len, SQLITE_STATIC);
    text(s, 9, state == ST_RUNNING ? p->host : "");
    sqlite3_bind_int(s, 10, state == ST_RUNNING ? p->pid : 0);
    sqlite3_bind_int64(s, 11, (int64_t)token);
    sqlite3_bind_int64(s, 12, state == ST_RUNNING ? now + LEASE_MS : 0);
    return exec(p, Q_TASK_NEW);
}

/* state: cairn_step_state's numbering (1 intent, 2 done) */
static int step_put_state(bench_peer *p, const char *task, const char *step, int generation,
                          int state, const void *out, size_t len)
{
    sqlite3_stmt *s = p->q[Q_STEP_PUT];
    text(s, 1, task);
    text(s, 2, step);
    sqlite3_bind_int(s, 3, generation);
    sqlite3_bind_int(s, 4, state);
    sqlite3_bind_int(s, 5, 1);
    sqlite3_bind_int64(s, 6, now_ms());
    if (out)
        sqlite3_bind_blob(s, 7, out, (int)len, SQLITE_STATIC);
    else
        sqlite3_bind_null(s, 7);
    return exec(p, Q_STEP_PUT);
}

static int step_put(bench_peer *p, const char *task, const char *step, int generation,
                    const void *out, size_t len)
{
    return step_put_state(p, task, step, generation, 2, out, len);
}

/* ------------------------------------------------------------------ transactions */

/* Inside an open transaction: reserve the id, create the task (as cairn's admit_txn). */
static int admit_body(bench_peer *p, const char *id, const void *input, size_t input_len)
{
    static const char hash[] = "6a1f0e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff";
    sqlite3_stmt *s = p->q[Q_IDEM];
    text(s, 1, id);
    text(s, 2, hash);
    if (exec(p, Q_IDEM))
        return -1;
    if (sqlite3_changes(p->db) == 0) { /* reserved before: the hash must match */
        s = p->q[Q_IDEM_GET];
        text(s, 1, id);
        int same = sqlite3_step(s) == SQLITE_ROW &&
                   strcmp((const char *)sqlite3_column_text(s, 0), hash) == 0;
        sqlite3_reset(s);
        if (!same) {
            snprintf(p->err, sizeof p->err, "task '%s' exists with another payload", id);
            return -1;
        }
    }
    task_row t = {.generation = 1};
    int rc = task_get(p, id, &t);
    if (rc < 0)
        return -1;
    if (rc == 1 &&
        (audit(p, id, 1, 0, 0, &t, NULL, "created") || task_new(p, id, input, input_len, 0, 0)))
        return -1;
    return 0;
}

/* Inside an open transaction: take the lease (as cairn's acquire_txn). */
static int acquire_body(bench_peer *p, const char *id, uint64_t token)
{
    task_row t;
    int rc = task_get(p, id, &t);
    if (rc) {
        if (rc == 1)
            snprintf(p->err, sizeof p->err, "no task '%s'", id);
        return -1;
    }
    t.attempt++;
    int64_t now = now_ms();
    if (audit(p, id, ++t.audit_seq, t.state, ST_RUNNING, &t, NULL, "run"))
        return -1;
    sqlite3_stmt *s = p->q[Q_ACQUIRE];
    text(s, 1, id);
    text(s, 2, p->host);
    sqlite3_bind_int(s, 3, p->pid);
    sqlite3_bind_int64(s, 4, (int64_t)token);
    sqlite3_bind_int64(s, 5, now + LEASE_MS);
    sqlite3_bind_int64(s, 6, now);
    sqlite3_bind_int64(s, 7, t.audit_seq);
    return exec(p, Q_ACQUIRE);
}

/* Admission and lease in one transaction, as cairn_runner_run does them. */
static int admit_acquire(bench_peer *p, const char *id, const void *input, size_t input_len,
                         uint64_t token)
{
    if (exec(p, Q_BEGIN_W))
        return -1;
    if (admit_body(p, id, input, input_len) || acquire_body(p, id, token))
        return rollback(p);
    return exec(p, Q_COMMIT) ? rollback(p) : 0;
}

/* (a) read the task and check the lease; the caller goes on inside the same transaction */
static int fenced(bench_peer *p, const char *task, uint64_t token, task_row *t)
{
    int rc = task_get(p, task, t);
    if (rc == 0 && (t->state != ST_RUNNING || t->lease_token != (int64_t)token)) {
        snprintf(p->err, sizeof p->err, "task '%s': lease lost", task);
        return -1;
    }
    if (rc == 1)
        snprintf(p->err, sizeof p->err, "no task '%s'", task);
    return rc ? -1 : 0;
}

/* A step commit, as cairn's commit_txn: (a) read the task row and check the lease, (b) upsert
 * the step row with its output. The lease is renewed only once less than half of it is left
 * (never within these millisecond tasks), and a compute step's completion is no audit row; an
 * effect's completion is one ("effect done"), and so is its intent (PEER_INTENT: the step row
 * in state intent, no output). The last step's commit also finishes the task: audit "all steps
 * done", state succeeded, lease released, in the same transaction. */
static int commit_ex(bench_peer *p, const char *task, const char *step, uint64_t token,
                     bench_peer_commit kind, int effect, const void *out, size_t len)
{
    if (exec(p, Q_BEGIN_W))
        return -1;
    task_row t;
    if (fenced(p, task, token, &t)) /* (a) */
        return rollback(p);
    if (p->carry_step) { /* a carried done step (bench_peer_carry) */
        const char *cs = p->carry_step;
        p->carry_step = NULL;
        if (step_put(p, task, cs, t.generation, p->carry_out, p->carry_len))
            return rollback(p);
    }
    int rc = kind == PEER_INTENT ? step_put_state(p, task, step, t.generation, 1, NULL, 0)
                                 : step_put(p, task, step, t.generation, out, len); /* (b) */
    if (!rc && (kind == PEER_INTENT || effect)) {
        sqlite3_stmt *s = p->q[Q_AUDIT_LAST];
        text(s, 1, task);
        rc = sqlite3_step(s) == SQLITE_ROW ? 0 : fail(p, "last audit row");
        if (!rc && sqlite3_column_int64(s, 0) > t.audit_seq)
            t.audit_seq = sqlite3_column_int64(s, 0);
        sqlite3_reset(s);
    }
    if (!rc && kind == PEER_INTENT)
        rc = audit(p, task, ++t.audit_seq, ST_RUNNING, ST_RUNNING, &t, step, "effect intent %s",
                   p->delivery);
    else if (!rc && effect)
        rc = audit(p, task, ++t.audit_seq, ST_RUNNING, ST_RUNNING, &t, step,
                   "effect done (invocation 1)");
    if (rc)
        return rollback(p);
    if (kind == PEER_DONE_LAST) {
        if (audit(p, task, ++t.audit_seq, ST_RUNNING, ST_SUCCEEDED, &t, NULL, "all steps done"))
            return rollback(p);
        sqlite3_stmt *s = p->q[Q_FINISH];
        text(s, 1, task);
        sqlite3_bind_int64(s, 2, now_ms());
        sqlite3_bind_int64(s, 3, t.audit_seq);
        if (exec(p, Q_FINISH))
            return rollback(p);
    }
    return exec(p, Q_COMMIT) ? rollback(p) : 0;
}

static int commit_step(bench_peer *p, const char *task, const char *step, uint64_t token, int last)
{
    return commit_ex(p, task, step, token, last ? PEER_DONE_LAST : PEER_DONE, 0, p->out,
                     p->out_len);
}

/* Copies a blob and unpacks it, as cairn's runner hands dependency outputs to a step. */
static int hand_over(const void *blob, size_t n)
{
    void *copy = malloc(n ? n : 1);
    if (!copy)
        return -1;
    memcpy(copy, blob, n);
    msgpack_unpacked u;
    size_t off = 0;
    msgpack_unpacked_init(&u);
    int ok = n == 0 || msgpack_unpack_next(&u, copy, n, &off) == MSGPACK_UNPACK_SUCCESS;
    msgpack_unpacked_destroy(&u);
    free(copy);
    return ok ? 0 : -1;
}

int bench_peer_load_step(bench_peer *p, const char *task, const char *step, const char *dep,
                         int copy_input)
{
    return bench_peer_load(p, task, step, &dep, dep ? 1 : 0, copy_input);
}

int bench_peer_load(bench_peer *p, const char *task, const char *step, const char *const *deps,
                    int n_deps, int copy_input)
{
    if (exec(p, Q_BEGIN_R))
        return -1;
    sqlite3_stmt *s = p->q[Q_LOAD_TASK];
    text(s, 1, task);
    int rc = sqlite3_step(s), gen = 1, ok = rc == SQLITE_ROW, missing = 0;
    if (ok) {
        gen = sqlite3_column_int(s, 2);
        if (copy_input && hand_over(sqlite3_column_blob(s, 0), (size_t)sqlite3_column_bytes(s, 0)))
            ok = 0;
    }
    sqlite3_reset(s);
    for (int i = 0; ok && i <= n_deps; i++) {
        s = p->q[Q_LOAD_STEP];
        text(s, 1, task);
        text(s, 2, i ? deps[i - 1] : step);
        sqlite3_bind_int(s, 3, gen);
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW && i > 0 && sqlite3_column_int(s, 0) == 2 /* done */ &&
            hand_over(sqlite3_column_blob(s, 3), (size_t)sqlite3_column_bytes(s, 3)))
            ok = 0;
        else if (rc == SQLITE_DONE)
            missing = 1;
        else if (rc != SQLITE_ROW)
            ok = 0;
        sqlite3_reset(s);
    }
    if (ok) {
        s = p->q[Q_LOAD_PROGRESS];
        text(s, 1, task);
        text(s, 2, step);
        sqlite3_bind_int(s, 3, gen);
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW)
            ok = hand_over(sqlite3_column_blob(s, 0), (size_t)sqlite3_column_bytes(s, 0)) == 0;
        else
            ok = rc == SQLITE_DONE;
        sqlite3_reset(s);
    }
    if (!ok) {
        fail(p, "resume read");
        return rollback(p);
    }
    if (exec(p, Q_COMMIT))
        return rollback(p);
    if (missing)
        snprintf(p->err, sizeof p->err, "task '%s': no record of step '%s' or a dependency", task,
                 step);
    return missing;
}

static const uint64_t TOKEN = 0x5eed5eedull; /* the commit loop's lease token */

int bench_peer_commit_step(bench_peer *p, const char *task, const char *step)
{
    return commit_step(p, task, step, TOKEN, 0);
}

int bench_peer_create_running(bench_peer *p, const char *prefix, uint32_t first, uint32_t count)
{
    if (exec(p, Q_BEGIN_W))
        return -1;
    for (uint32_t i = first; i < first + count; i++) {
        char id[64];
        snprintf(id, sizeof id, "%s%06u", prefix, i);
        bench_input_msgpack(i, &p->input);
        if (task_new(p, id, p->input.data, p->input.size, ST_RUNNING, TOKEN))
            return rollback(p);
    }
    return exec(p, Q_COMMIT) ? rollback(p) : 0;
}

int bench_peer_run_task(bench_peer *p, const char *id, uint32_t n, uint32_t n_steps)
{
    uint64_t token = (uint64_t)bench_now_ns() | 1; /* a fresh lease token per run */
    bench_input_msgpack(n, &p->input);
    if (admit_acquire(p, id, p->input.data, p->input.size, token))
        return -1;
    for (uint32_t i = 0; i < n_steps; i++) {
        char step[16], dep[16];
        snprintf(step, sizeof step, "s%u", i);
        snprintf(dep, sizeof dep, "s%u", i ? i - 1 : 0);
        int last = i + 1 == n_steps;
        if (bench_peer_load_step(p, id, step, i ? dep : NULL, i == 0) < 0) /* fresh: 1 */
            return -1;
        if (last && p->split && sqlite3_exec(p->db, "PRAGMA synchronous=FULL", 0, 0, 0))
            return fail(p, "synchronous=FULL");
        int rc = commit_step(p, id, step, token, last);
        if (last && p->split && sqlite3_exec(p->db, "PRAGMA synchronous=NORMAL", 0, 0, 0))
            return fail(p, "synchronous=NORMAL");
        if (rc)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ the ledger graph's */

int bench_peer_begin(bench_peer *p, const char *id, const void *input, size_t input_len,
                     uint64_t token)
{
    return admit_acquire(p, id, input, input_len, token);
}

void bench_peer_carry(bench_peer *p, const char *step, const void *out, size_t len)
{
    p->carry_step = step, p->carry_out = out, p->carry_len = len;
}

int bench_peer_commit_ex(bench_peer *p, const char *task, const char *step, uint64_t token,
                         bench_peer_commit kind, int effect, const void *out, size_t len, int full)
{
    if (kind == PEER_INTENT)
        snprintf(p->delivery, sizeof p->delivery, "%.*s", (int)len, (const char *)out);
    if (full && p->split && sqlite3_exec(p->db, "PRAGMA synchronous=FULL", 0, 0, 0))
        return fail(p, "synchronous=FULL");
    int rc = commit_ex(p, task, step, token, kind, effect, out, len);
    if (full && p->split && sqlite3_exec(p->db, "PRAGMA synchronous=NORMAL", 0, 0, 0))
        return fail(p, "synchronous=NORMAL");
    return rc;
}

int64_t bench_peer_count_state(bench_peer *p, int state)
{
    sqlite3_stmt *q = NULL;
    int64_t n = -1;
    if (sqlite3_prepare_v2(p->db, "SELECT count(*) FROM tasks WHERE state = ?1", -1, &q, NULL) ==
        SQLITE_OK) {
        sqlite3_bind_int(q, 1, state);
        if (sqlite3_step(q) == SQLITE_ROW)
            n = sqlite3_column_int64(q, 0);
    }
    if (n < 0)
        fail(p, "count tasks");
    sqlite3_finalize(q);
    return n;
}
