/* test_layout.c - schema 6: a task's records in one tree (checkpoint/store.c's design comment).
 *
 * A task's input, reservation (idem), step and audit records and split tails live in the tasks
 * database next to its task record (its progress records keep a database of their own), each under
 * the ID, a NUL and a kind byte. Checked against real stores on disk, through the store's API and
 * raw LMDB:
 *   - a populated store has no other database for them, and reads back what was written;
 *   - the step and audit record counts `stats` shows are kept exactly through writes, rewrites,
 *     deletes and dropped outputs, and `cairn check` compares them with the records;
 *   - a store of schema 5 (tu_raw_to_schema5: what schema 5 wrote; sync and nosync) is
 *     upgraded when a writer opens it: every record reads as before, the counts are right,
 *     check finds nothing, the old databases are gone; a damaged record is moved as it is and
 *     still reported;
 *   - schema 5's databases left beside a schema-6 store (a power cut in the upgrade) are dropped
 *     by the next writer;
 *   - a record of the tasks tree whose kind byte is none of the kinds is reported by check.
 */
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/store.h"
#include "tests/store/rawlmdb.h"
#include "tests/tap.h"

#define N_TASKS 12
#define BIG 8192 /* an output that splits (checkpoint/checksum.c) */

static char root[256];

/* ------------------------------------------------------------------ writing and reading */

static void task_of(cairn__task_rec *r, const char *id)
{
    memset(r, 0, sizeof *r);
    snprintf(r->id, sizeof r->id, "%s", id);
    snprintf(r->graph, sizeof r->graph, "g");
    snprintf(r->steps_pin, sizeof r->steps_pin, "a@1,b@1");
    r->state = CAIRN_RUNNING;
    r->generation = 1;
    r->created_ms = r->updated_ms = 1000;
}

/* Task i: its input, steps a (small) and b (8 KiB for even i: split), a's progress, 3 audit
 * records. */
static int populate_txn(cairn__txn *t, void *arg)
{
    int i = *(int *)arg, rc;
    char id[32];
    snprintf(id, sizeof id, "task-%02d", i);
    cairn__task_rec r;
    task_of(&r, id);
    if ((rc = cairn__task_put(t, &r)))
        return rc;
    unsigned char in[16] = {0xa5, 'i', 'n', 'p', 'u', 't'};
    if ((rc = cairn__input_put(t, id, in, 6)))
        return rc;
    unsigned char *a = tu_make_output(40, (unsigned)i),
                  *b = tu_make_output(i % 2 ? 300 : BIG, 7u + i);
    cairn__step_rec sa = {.state = CAIRN_STEP_DONE, .generation = 1, .output = a, .output_len = 40};
    cairn__step_rec sb = {
        .state = CAIRN_STEP_DONE, .generation = 1, .output = b, .output_len = i % 2 ? 300 : BIG};
    rc = cairn__step_put(t, id, "a", &sa);
    rc = rc ? rc : cairn__step_put(t, id, "b", &sb);
    rc = rc ? rc : cairn__step_put(t, id, "a", &sa); /* a rewrite: no new record */
    free(a), free(b);
    unsigned char pg[3] = {0x92, 0x01, 0x02};
    rc = rc ? rc : cairn__progress_put(t, id, "a", 1, pg, 3);
    for (int k = 0; k < 3 && !rc; k++) {
        cairn__audit_rec au = {.t_ms = 1000 + k, .from = CAIRN_PENDING, .to = CAIRN_RUNNING};
        snprintf(au.reason, sizeof au.reason, "event %d", k);
        rc = cairn__audit_append(t, &r, &au);
    }
    return rc ? rc : cairn__task_put(t, &r);
}

/* A digest of everything the API reads of every task (FNV-1a over the fields). */
typedef struct dig {
    uint64_t h;
    int steps, audit, inputs, progress;
} dig;

static void mix(dig *d, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        d->h = (d->h ^ b[i]) * 1099511628211ull;
    d->h = (d->h ^ n) * 1099511628211ull;
}

static int step_cb(const char *step, const cairn__step_rec *r, void *arg)
{
    dig *d = arg;
    d->steps++;
    mix(d, step, strlen(step));
    mix(d, &r->state, 1);
    mix(d, &r->generation, 4);
    if (r->output)
        mix(d, r->output, r->output_len);
    return 0;
}

static int audit_cb(const cairn__audit_rec *a, void *arg)
{
    dig *d = arg;
    d->audit++;
    mix(d, &a->t_ms, 8);
    mix(d, a->reason, strlen(a->reason));
    return 0;
}

static int digest_txn(cairn__txn *t, void *arg)
{
    dig *d = arg;
    d->h = 1469598103934665603ull;
    for (int i = 0; i < N_TASKS; i++) {
        char id[32];
        snprintf(id, sizeof id, "task-%02d", i);
        cairn__task_rec r;
        int rc = cairn__task_get(t, id, &r);
        if (rc == CAIRN_ENOTFOUND)
            continue;
        if (rc)
            return rc;
        mix(d, r.id, strlen(r.id));
        mix(d, &r.state, 1);
        const void *data;
        size_t len;
        if ((rc = cairn__input_get(t, id, &data, &len)) == 0)
            d->inputs++, mix(d, data, len);
        else if (rc != CAIRN_ENOTFOUND)
            return rc;
        if ((rc = cairn__progress_get(t, id, "a", 1, &data, &len)) == 0)
            d->progress++, mix(d, data, len);
        else if (rc != CAIRN_ENOTFOUND)
            return rc;
        if ((rc = cairn__step_each(t, id, step_cb, d)) ||
            (rc = cairn__audit_each(t, id, audit_cb, d)))
            return rc;
    }
    return 0;
}

static int digest(cairn_store *s, dig *d)
{
    memset(d, 0, sizeof *d);
    return cairn__store_read(s, digest_txn, d);
}

static int stats_txn(cairn__txn *t, void *arg) { return cairn__store_stats_get(t, arg); }

static int check_cb(const char *db, const char *task, const char *msg, void *arg)
{
    char *out = arg;
    if (!out[0])
        snprintf(out, 600, "%s/%s: %s", db, task, msg);
    return 0;
}

typedef struct chk {
    uint64_t records, problems;
    char first[600];
} chk;

static int check_txn(cairn__txn *t, void *arg)
{
    chk *c = arg;
    c->first[0] = 0;
    return cairn__store_check(t, check_cb, c->first, &c->records, &c->problems);
}

static uint64_t problems_of(cairn_store *s, chk *c)
{
    memset(c, 0, sizeof *c);
    int rc = cairn__store_read(s, check_txn, c);
    return rc ? 1000 + (uint64_t)-rc : c->problems;
}

/* Whether database db is in the store's file (raw LMDB). */
static int raw_has_db(const char *dir, const char *db)
{
    MDB_env *env = tu_raw_open(dir);
    MDB_txn *txn;
    MDB_dbi dbi;
    int has = 0;
    if (env && mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) == 0) {
        has = mdb_dbi_open(txn, db, 0, &dbi) == 0;
        mdb_txn_abort(txn);
    }
    if (env)
        mdb_env_close(env);
    return has;
}

static int any_old_db(const char *dir)
{
    static const char *const old[] = {"inputs", "steps", "idem", "audit", "tails"};
    int n = 0;
    for (size_t i = 0; i < sizeof old / sizeof *old; i++)
        n += raw_has_db(dir, old[i]);
    return n;
}

static uint32_t raw_schema(const char *dir)
{
    uint32_t v = 0;
    return tu_raw_get(dir, "meta", "schema", 6, &v, sizeof v) == 4 ? v : 0;
}

/* ------------------------------------------------------------------ the cases */

static int del_txn(cairn__txn *t, void *arg) { return cairn__task_del(t, arg); }
static int drop_txn(cairn__txn *t, void *arg) { return cairn__task_drop_outputs(t, arg); }

static void test_one_tree_and_counts(void)
{
    char dir[300];
    tu_subdir(dir, root, "tree");
    cairn_store *s = tu_store_open(dir, CAIRN_SYNC, 0);
    int rc = 0;
    for (int i = 0; i < N_TASKS && !rc; i++)
        rc = cairn__store_write(s, 0, populate_txn, &i);
    ok(rc == 0, "populated: %d tasks with inputs, steps, progress and audit records", N_TASKS);
    dig d;
    ok(digest(s, &d) == 0 && d.steps == 2 * N_TASKS && d.audit == 3 * N_TASKS &&
           d.inputs == N_TASKS && d.progress == N_TASKS,
       "every record reads back (%d steps, %d audit, %d inputs, %d progress)", d.steps, d.audit,
       d.inputs, d.progress);
    cairn__store_stats st;
    ok(cairn__store_read(s, stats_txn, &st) == 0 && st.step_records == 2 * N_TASKS &&
           st.audit_records == 3 * N_TASKS,
       "stats counts %llu step records and %llu audit records (a rewrite adds none)",
       (unsigned long long)st.step_records, (unsigned long long)st.audit_records);
    chk c;
    ok(problems_of(s, &c) == 0, "cairn check: no problem in %llu records (%s)",
       (unsigned long long)c.records, c.first);
    cairn_store_free(s);
    ok(any_old_db(dir) == 0 && raw_schema(dir) == CAIRN__SCHEMA,
       "schema %u: no inputs, steps, idem, audit or tails database in the file", raw_schema(dir));
    /* the records' keys in the tasks tree: input, step, its tail, progress, audit */
    char k[64];
    unsigned char buf[64];
    int n = snprintf(k, sizeof k, "task-00%ci", 0);
    long in = tu_raw_get(dir, "tasks", k, (size_t)n, buf, sizeof buf);
    ok(in == 6, "the input is tasks' record under 'task-00\\0i' (%ld bytes)", in);

    s = tu_store_open(dir, CAIRN_SYNC, 0);
    ok(cairn__store_write(s, 0, del_txn, "task-03") == 0 &&
           cairn__store_write(s, 0, drop_txn, "task-04") == 0,
       "task-03 deleted, task-04's outputs dropped");
    ok(cairn__store_read(s, stats_txn, &st) == 0 && st.step_records == 2 * N_TASKS - 4 &&
           st.audit_records == 3 * N_TASKS - 3,
       "the counts follow: %llu step records, %llu audit records",
       (unsigned long long)st.step_records, (unsigned long long)st.audit_records);
    ok(digest(s, &d) == 0 && d.steps == 2 * N_TASKS - 4 && d.inputs == N_TASKS - 2 &&
           d.progress == N_TASKS - 2 && d.audit == 3 * N_TASKS - 3,
       "and the records are gone (%d steps, %d inputs, %d progress, %d audit left)", d.steps,
       d.inputs, d.progress, d.audit);
    ok(problems_of(s, &c) == 0, "cairn check: no problem (%s)", c.first);
    cairn_store_free(s);

    /* a record of no kind: reported */
    n = snprintf(k, sizeof k, "task-01%cz", 0);
    ok(tu_raw_put(dir, "tasks", k, (size_t)n, "\x90", 1) == 0,
       "plant: a sealed record under 'task-01\\0z'");
    s = tu_store_open(dir, CAIRN_SYNC, 0);
    ok(problems_of(s, &c) == 1 && strstr(c.first, "no kind") && strstr(c.first, "task-01"),
       "cairn check reports it (\"%s\")", c.first);
    cairn_store_free(s);
    tu_raw_put_bare(dir, "tasks", k, (size_t)n, NULL, 0);

    /* the counts record against the records */
    uint64_t counts[CAIRN_STATE_COUNT + 3];
    long cn = tu_raw_get(dir, "meta", "counts", 6, counts, sizeof counts);
    counts[CAIRN_STATE_COUNT + 1] += 5;
    ok(cn == (long)sizeof counts &&
           tu_raw_put(dir, "meta", "counts", 6, counts, sizeof counts) == 0,
       "plant: the counts record says 5 step records more (%ld bytes)", cn);
    s = tu_store_open(dir, CAIRN_SYNC, 0);
    ok(problems_of(s, &c) == 1 && strstr(c.first, "step records"),
       "cairn check reports the difference (\"%s\")", c.first);
    cairn_store_free(s);
}

static void test_upgrade_from_5(cairn_durability d)
{
    char dir[300];
    tu_subdir(dir, root, d == CAIRN_SYNC ? "up-sync" : "up-nosync");
    diag("a %s store", d == CAIRN_SYNC ? "sync" : "nosync");
    cairn_store *s = tu_store_open(dir, d, 0);
    int rc = 0;
    for (int i = 0; i < N_TASKS && !rc; i++)
        rc = cairn__store_write(s, 0, populate_txn, &i);
    dig before, after;
    ok(rc == 0 && digest(s, &before) == 0, "plant: %d tasks in schema %u", N_TASKS, CAIRN__SCHEMA);
    cairn_store_free(s);
    ok(tu_raw_to_schema5(dir) == 0 && raw_schema(dir) == 5 && any_old_db(dir) == 5,
       "plant: the store as schema 5 wrote it (five databases more)");
    /* a damaged step record in schema 5's layout: moved as it is */
    char k[64];
    int n = snprintf(k, sizeof k, "task-05%ca%c", 0, 0);
    memcpy(k + n, "\0\0\0\1", 4);
    n += 4;
    unsigned char v[128];
    long vn = tu_raw_get(dir, "steps", k, (size_t)n, v, sizeof v);
    ok(vn > 12 && tu_raw_put_bare(dir, "steps", k, (size_t)n, v, (size_t)vn) == 0,
       "plant: task-05's step 'a' without its checksum (%ld bytes)", vn);

    s = tu_store_open(dir, d, 0);
    ok(s != NULL, "a writer opens the schema-5 store");
    cairn_store_free(s);
    ok(raw_schema(dir) == CAIRN__SCHEMA && any_old_db(dir) == 0,
       "it is schema %u now, without schema 5's databases (%d left)", raw_schema(dir),
       any_old_db(dir));
    s = tu_store_open(dir, d, 0);
    chk c;
    uint64_t p = problems_of(s, &c);
    ok(p == 1 && strstr(c.first, "steps/task-05") && strstr(c.first, "step 'a'"),
       "cairn check finds the one damaged record, moved as it was (%llu: \"%s\")",
       (unsigned long long)p, c.first);
    cairn__store_stats st;
    ok(cairn__store_read(s, stats_txn, &st) == 0 && st.step_records == 2 * N_TASKS &&
           st.audit_records == 3 * N_TASKS,
       "the counts record has the records moved: %llu steps, %llu audit",
       (unsigned long long)st.step_records, (unsigned long long)st.audit_records);
    cairn_store_free(s);
    /* put the damaged record back whole (sealed under its schema-6 key) and compare everything */
    tu_raw_put(dir, "steps", k, (size_t)n, v, (size_t)vn);
    s = tu_store_open(dir, d, 0);
    ok(digest(s, &after) == 0 && after.h == before.h && after.steps == before.steps &&
           after.audit == before.audit && after.inputs == before.inputs &&
           after.progress == before.progress,
       "every record reads as before the upgrade (8 KiB outputs split again, in the one tree)");
    ok(problems_of(s, &c) == 0, "cairn check: no problem in %llu records (%s)",
       (unsigned long long)c.records, c.first);
    cairn_store_free(s);
}

/* Schema 5's databases in a schema-6 store: a writer drops them, records untouched. */
static void test_leftover(void)
{
    char dir[300];
    tu_subdir(dir, root, "left");
    cairn_store *s = tu_store_open(dir, CAIRN_SYNC, 0);
    int i = 0, rc = cairn__store_write(s, 0, populate_txn, &i);
    dig before, after;
    ok(rc == 0 && digest(s, &before) == 0, "plant: one task in schema %u", CAIRN__SCHEMA);
    cairn_store_free(s);
    MDB_env *env = tu_raw_open(dir);
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = {9, "task-00\0a"}, v = {3, "old"};
    rc = !env || mdb_txn_begin(env, NULL, 0, &txn) ||
         mdb_dbi_open(txn, "steps", MDB_CREATE, &dbi) || mdb_put(txn, dbi, &k, &v, 0) ||
         mdb_txn_commit(txn);
    if (env)
        mdb_env_close(env);
    ok(rc == 0 && raw_has_db(dir, "steps"), "plant: a 'steps' database beside the records");
    s = tu_store_open(dir, CAIRN_SYNC, 0);
    ok(s && digest(s, &after) == 0 && after.h == before.h,
       "the store opens, its records as they were");
    cairn_store_free(s);
    ok(!raw_has_db(dir, "steps"), "and the writer dropped the leftover database");
}

int main(void)
{
    tu_tmpdir(root, "layout");
    test_one_tree_and_counts();
    test_upgrade_from_5(CAIRN_SYNC);
    test_upgrade_from_5(CAIRN_NOSYNC);
    test_leftover();
    tu_rmtree(root);
    return tap_done();
}
