/* test_checksum.c - every record of the store carries a checksum (checkpoint/checksum.c).
 *
 * Damage is planted with raw LMDB, as a flipped byte on disk would leave it: a changed value, a
 * changed task key, a step key `work` read as `vork`, an index entry moved. Each read of the
 * damaged record, and each lookup that would have missed because of it, is CAIRN_ECORRUPT naming
 * the record; a lookup elsewhere is unaffected. A store of schema 2 (records without checksums)
 * is upgraded when opened, and every record then verifies.
 */
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/store.h"
#include "tests/store/rawlmdb.h"
#include "tests/tap.h"
#include "tests/testutil.h"

static char root[256];
static void newdir(char out[300], const char *tag) { tu_subdir(out, root, tag); }
static cairn_store *open_store(const char *dir) { return tu_store_open(dir, CAIRN_NOSYNC, 0); }

static void fill_task(cairn__task_rec *r, const char *id)
{
    memset(r, 0, sizeof *r);
    snprintf(r->id, sizeof r->id, "%s", id);
    snprintf(r->graph, sizeof r->graph, "g");
    snprintf(r->steps_pin, sizeof r->steps_pin, "a@1,work@1");
    r->state = CAIRN_SUCCEEDED;
    r->generation = 1;
    r->created_ms = r->updated_ms = r->finished_ms = 1000;
}

/* Tasks t1..t5, each with steps "a" and "work" (generation 1, outputs "A"/"W"). */
static int populate_txn(cairn__txn *t, void *arg)
{
    (void)arg;
    for (int i = 1; i <= 5; i++) {
        cairn__task_rec r;
        char id[8];
        snprintf(id, sizeof id, "t%d", i);
        fill_task(&r, id);
        cairn__step_rec s = {.state = CAIRN_STEP_DONE, .generation = 1, .output_len = 1};
        int rc = cairn__task_put(t, &r);
        s.output = "\xa1"
                   "A";
        s.output_len = 2;
        if (!rc)
            rc = cairn__step_put(t, id, "a", &s);
        s.output = "\xa1"
                   "W";
        if (!rc)
            rc = cairn__step_put(t, id, "work", &s);
        if (rc)
            return rc;
    }
    return 0;
}

typedef struct probe {
    const char *task, *step;
    int task_rc, step_rc, each_rc, nsteps;
} probe;

static int count_cb(const char *step, const cairn__step_rec *r, void *arg)
{
    (void)step, (void)r;
    ((probe *)arg)->nsteps++;
    return 0;
}

static int probe_txn(cairn__txn *t, void *arg)
{
    probe *p = arg;
    cairn__task_rec r;
    cairn__step_rec s;
    p->task_rc = cairn__task_get(t, p->task, &r);
    p->step_rc = p->step ? cairn__step_get(t, p->task, p->step, 1, &s) : 0;
    p->nsteps = 0;
    p->each_rc = cairn__step_each(t, p->task, count_cb, p);
    return 0;
}

static probe look(const char *dir, const char *task, const char *step, char *msg, size_t cap)
{
    probe p = {.task = task, .step = step, .task_rc = -99};
    cairn_store *s = open_store(dir);
    if (!s)
        return p;
    cairn__store_read(s, probe_txn, &p);
    snprintf(msg, cap, "%s", cairn_store_errmsg(s));
    cairn_store_free(s);
    return p;
}

static void step_key(char *k, size_t *n, const char *task, const char *step)
{
    size_t a = strlen(task), b = strlen(step);
    memcpy(k, task, a + 1);
    memcpy(k + a + 1, step, b + 1);
    memcpy(k + a + 1 + b + 1, "\0\0\0\1", 4);
    *n = a + b + 6;
}

/* Flips one bit of the value of a record in place (named as schema 5 kept it: tu_raw_where). */
static int flip_raw(const char *dir, const char *db, const void *key, size_t kn, size_t at)
{
    unsigned char buf[4096];
    MDB_env *env = tu_raw_open(dir);
    MDB_txn *txn = NULL;
    MDB_dbi dbi;
    tu_rawkey rk;
    MDB_val k = {0, rk.k}, v;
    int rc = mdb_txn_begin(env, NULL, 0, &txn);
    rc = rc ? rc : tu_raw_where(tu_raw_schema_txn(txn), db, key, kn, &rk);
    k.mv_size = rc ? 0 : rk.n;
    if (!rc && !(rc = mdb_dbi_open(txn, rk.db, 0, &dbi)) && !(rc = mdb_get(txn, dbi, &k, &v))) {
        size_t n = v.mv_size < sizeof buf ? v.mv_size : sizeof buf;
        memcpy(buf, v.mv_data, n);
        buf[at % n] ^= 0x10;
        MDB_val nv = {n, buf};
        rc = mdb_put(txn, dbi, &k, &nv, 0);
    }
    rc = rc ? (mdb_txn_abort(txn), rc) : mdb_txn_commit(txn);
    mdb_env_close(env);
    return rc;
}

static void fresh(char dir[300], const char *tag)
{
    newdir(dir, tag);
    cairn_store *s = open_store(dir);
    if (!s || cairn__store_write(s, 0, populate_txn, NULL)) {
        printf("Bail out! cannot populate %s\n", dir);
        exit(1);
    }
    cairn_store_free(s);
}

static void test_clean(void)
{
    char dir[300], m[1024];
    fresh(dir, "clean");
    probe p = look(dir, "t3", "work", m, sizeof m);
    ok(p.task_rc == 0 && p.step_rc == 0 && p.each_rc == 0 && p.nsteps == 2,
       "an undamaged store reads every record (task %d, step %d, scan %d: %d steps)", p.task_rc,
       p.step_rc, p.each_rc, p.nsteps);
    p = look(dir, "t9", "work", m, sizeof m);
    ok(p.task_rc == CAIRN_ENOTFOUND && p.step_rc == CAIRN_ENOTFOUND && p.each_rc == 0 &&
           p.nsteps == 0,
       "a task that is not there is absent, not damaged (%d %d)", p.task_rc, p.step_rc);
    unsigned char v[64];
    long n = tu_raw_get(dir, "tasks", "t3", 2, v, sizeof v);
    unsigned char raw[4096];
    MDB_env *env = tu_raw_open(dir);
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = {2, "t3"}, vv = {0, NULL};
    size_t rawn = 0;
    if (!mdb_txn_begin(env, NULL, MDB_RDONLY, &txn)) {
        if (!mdb_dbi_open(txn, "tasks", 0, &dbi) && !mdb_get(txn, dbi, &k, &vv))
            memcpy(raw, vv.mv_data, rawn = vv.mv_size < sizeof raw ? vv.mv_size : sizeof raw);
        mdb_txn_abort(txn);
    }
    mdb_env_close(env);
    unsigned char sum[8];
    tu_sum("tasks", "t3", 2, raw, rawn >= 8 ? rawn - 8 : 0, sum);
    ok(n > 0 && rawn == (size_t)n + 8 && memcmp(sum, raw + rawn - 8, 8) == 0,
       "a task record on disk is its value and 8 bytes of XXH3-64 over key and value");
}

static void test_value_flip(void)
{
    char dir[300], m[1024];
    fresh(dir, "value");
    ok(flip_raw(dir, "tasks", "t2", 2, 20) == 0, "plant: one bit of task t2's record flipped");
    probe p = look(dir, "t2", NULL, m, sizeof m);
    ok(p.task_rc == CAIRN_ECORRUPT && strstr(m, "task 't2'") && strstr(m, "checksum"),
       "reading it is CAIRN_ECORRUPT naming the task and the checksum (\"%s\")", m);
    p = look(dir, "t4", "work", m, sizeof m);
    ok(p.task_rc == 0 && p.step_rc == 0, "the other tasks read as before");

    char k[64];
    size_t kn;
    step_key(k, &kn, "t4", "work");
    ok(flip_raw(dir, "steps", k, kn, 30) == 0, "plant: one bit of t4's step 'work' flipped");
    p = look(dir, "t4", "work", m, sizeof m);
    ok(p.step_rc == CAIRN_ECORRUPT && p.each_rc == CAIRN_ECORRUPT && strstr(m, "'t4'") &&
           strstr(m, "'work'"),
       "the step record is CAIRN_ECORRUPT by lookup and by scan, naming task and step (\"%s\")", m);
}

/* Flips `bit` of byte `at` of every copy of pattern in data.mdb (LMDB keeps old copies of
 * pages: each is flipped, as the damage to the live one is what counts). The copies found. */
static int flip_file(const char *dir, const void *pat, size_t pn, size_t at, unsigned bit)
{
    char path[400];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    FILE *f = fopen(path, "r+b");
    if (!f)
        return 0;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    unsigned char *b = malloc((size_t)size);
    rewind(f);
    int n = 0;
    if (b && fread(b, 1, (size_t)size, f) == (size_t)size)
        for (long i = 0; i + (long)pn <= size; i++)
            if (memcmp(b + i, pat, pn) == 0) {
                unsigned char c = b[i + at] ^ (unsigned char)bit;
                fseek(f, i + (long)at, SEEK_SET);
                fputc(c, f);
                n++;
            }
    free(b);
    fclose(f);
    return n;
}

/* t3's step key 'work' as data.mdb holds it: "t3\0work" in schema 5's steps, "t3\0swork" (a kind
 * byte after the ID's NUL) in schema 6's tasks; *name: where the step name starts. */
static const char *t3_work(const char *dir, size_t *n, size_t *name)
{
    const int kind = tu_raw_schema(dir) >= 6;
    *n = 7 + kind, *name = 3 + kind;
    return kind ? "t3\0swork" : "t3\0work";
}

static void test_key_flip(void)
{
    char dir[300], m[1024];
    size_t pn, name;
    fresh(dir, "stepkey");
    const char *pat = t3_work(dir, &pn, &name);
    ok(flip_file(dir, pat, pn, name, 0x01) > 0,
       "plant: in data.mdb, t3's step key 'work' now reads 'vork' (its value unchanged)");
    probe p = look(dir, "t3", "work", m, sizeof m);
    ok(p.step_rc == CAIRN_ECORRUPT && strstr(m, "'t3'"),
       "looking up step 'work' is CAIRN_ECORRUPT, never absent (a committed step would run "
       "again) (\"%s\")",
       m);
    ok(p.each_rc == CAIRN_ECORRUPT, "scanning t3's steps is CAIRN_ECORRUPT");
    p = look(dir, "t2", "work", m, sizeof m);
    ok(p.step_rc == 0 && p.each_rc == 0 && p.nsteps == 2, "task t2's steps read as before");

    fresh(dir, "steptask");
    pat = t3_work(dir, &pn, &name);
    ok(flip_file(dir, pat, pn, 1, 0x05) > 0,
       "plant: in data.mdb, the task part of t3's step key now reads 't6'");
    p = look(dir, "t3", "work", m, sizeof m);
    ok(p.step_rc == CAIRN_ECORRUPT, "t3's step 'work' is CAIRN_ECORRUPT, not absent (\"%s\")", m);

    fresh(dir, "taskkey");
    /* LMDB's node: the key's size (2 bytes), the key, then the task record (an array16) */
    ok(flip_file(dir, "\x02\0t4\xdc", 5, 3, 0x08) > 0,
       "plant: in data.mdb, task key 't4' now reads 't<'");
    p = look(dir, "t4", NULL, m, sizeof m);
    ok(p.task_rc == CAIRN_ECORRUPT && strstr(m, "task"),
       "task t4 is CAIRN_ECORRUPT, not absent (a run would create it again) (\"%s\")", m);
}

/* A record of a step the task's graph does not define, in the task's generation, with a valid
 * checksum (damage its checksum cannot see, as a record written under a wrong key would be). */
static void test_undefined_step(void)
{
    char dir[300];
    fresh(dir, "undefined");
    char k[64];
    size_t kn;
    step_key(k, &kn, "t2", "zzz");
    unsigned char v[64];
    char wk[64];
    size_t wkn;
    step_key(wk, &wkn, "t2", "work");
    long n = tu_raw_get(dir, "steps", wk, wkn, v, sizeof v);
    ok(n > 0 && tu_raw_put(dir, "steps", k, kn, v, (size_t)n) == 0,
       "plant: t2 gains a sealed record of step 'zzz' in its generation");
    cairn_store *s = open_store(dir);
    cairn_task *t = NULL;
    int rc = s ? cairn_task_load(s, "t2", &t) : -1;
    const char *m = s ? cairn_store_errmsg(s) : "";
    ok(rc == CAIRN_ECORRUPT && t == NULL && strstr(m, "'zzz'") && strstr(m, "does not define"),
       "loading t2 is CAIRN_ECORRUPT naming the step (\"%s\")", m);
    rc = s ? cairn_task_load(s, "t3", &t) : -1;
    ok(rc == 0 && t, "t3 loads as before");
    cairn_task_free(t);
    cairn_store_free(s);
}

static int stats_copy(const cairn_stats *st, void *arg)
{
    *(cairn_stats *)arg = *st;
    return 0;
}

static int check_count(const cairn_check_row *row, void *arg)
{
    (void)row;
    ++*(int *)arg;
    return 0;
}

/* Counts the rows whose callback ran under the store's fault guard (none should: a fault in a
 * user's callback is the user's to crash with, not a damaged page). */
static int guarded_row(const cairn_task_row *row, void *arg)
{
    (void)row;
    void *g = cairn__guard_suspend();
    cairn__guard_resume(g);
    ((int *)arg)[0]++;
    ((int *)arg)[1] += g != NULL;
    return 0;
}

/* The task counts the store keeps (stats reads them, never scans): right after writes, after an
 * upgrade that counts them once, and checked by cairn check. */
static void test_counts(void)
{
    char dir[300];
    fresh(dir, "counts");
    cairn_store *s = open_store(dir);
    cairn_stats st = {0};
    int src = s ? cairn_store_stats(s, stats_copy, &st) : -1;
    ok(src == 0 && st.by_state[CAIRN_SUCCEEDED] == 5 && st.by_state[CAIRN_PENDING] == 0,
       "stats reads the kept counts: 5 succeeded (%llu)",
       (unsigned long long)st.by_state[CAIRN_SUCCEEDED]);
    int seen[2] = {0, 0};
    int lrc = s ? cairn_store_list(s, NULL, NULL, 0, guarded_row, seen) : -1;
    ok(lrc == 0 && seen[0] == 5 && seen[1] == 0,
       "a user's row function runs outside the fault guard (%d rows, %d guarded)", seen[0],
       seen[1]);
    cairn_store_free(s);

    /* the record as the store wrote it (schema 5: by state, tombstones; schema 6: then the step
     * and audit records), but for the count of succeeded tasks */
    uint64_t wrong[CAIRN_STATE_COUNT + 8] = {0};
    long wn = tu_raw_get(dir, "meta", "counts", 6, wrong, sizeof wrong);
    wrong[CAIRN_SUCCEEDED] = 4;
    ok(wn >= (long)((CAIRN_STATE_COUNT + 1) * sizeof *wrong) && wn < (long)sizeof wrong &&
           tu_raw_put(dir, "meta", "counts", 6, wrong, (size_t)wn) == 0,
       "plant: a sealed counts record that says 4 succeeded");
    s = open_store(dir);
    int problems = 0;
    uint64_t records = 0;
    int rc = s ? cairn_store_check(s, check_count, &problems, &records) : -1;
    ok(rc == CAIRN_ECORRUPT && problems == 1,
       "cairn check finds the counts record against the task records (%d problem: %s)", problems,
       s ? cairn_store_errmsg(s) : "");
    cairn_store_free(s);

    fresh(dir, "counts-upgrade");
    ok(tu_raw_downgrade(dir, 2) == 0 && tu_raw_put_bare(dir, "meta", "counts", 6, NULL, 0) == 0,
       "plant: a schema-2 store (no checksums, no counts record)");
    s = open_store(dir);
    memset(&st, 0, sizeof st);
    src = s ? cairn_store_stats(s, stats_copy, &st) : -1;
    ok(src == 0 && st.by_state[CAIRN_SUCCEEDED] == 5,
       "the upgrade counts its tasks once (%llu succeeded)",
       (unsigned long long)st.by_state[CAIRN_SUCCEEDED]);
    problems = 0;
    ok(s && cairn_store_check(s, check_count, &problems, &records) == 0 && problems == 0,
       "and the upgraded store checks clean (%llu records)", (unsigned long long)records);
    cairn_store_free(s);
}

/* A steps database read from an older root (damage to LMDB's own directory, which no record's
 * checksum covers) is a consistent tree that lacks records: a succeeded task without the done
 * record of a pinned step is refused by show's load and reported by cairn check. Planted as the
 * record gone. */
static void test_succeeded_lacks_step(void)
{
    char dir[300];
    fresh(dir, "lacks");
    char k[64];
    size_t kn;
    step_key(k, &kn, "t4", "work");
    /* in schema 6 the counts record counts step records: it says one fewer, as it would of a
     * tree that never had the record */
    ok(tu_raw_put_bare(dir, "steps", k, kn, NULL, 0) == 0 &&
           (tu_raw_schema(dir) < 6 || tu_raw_counts_add(dir, CAIRN_STATE_COUNT + 1, -1) == 0),
       "plant: succeeded task t4's record of step 'work' is gone");
    cairn_store *s = open_store(dir);
    cairn_task *t = NULL;
    int rc = s ? cairn_task_load(s, "t4", &t) : -1;
    const char *m = s ? cairn_store_errmsg(s) : "";
    ok(rc == CAIRN_ECORRUPT && !t && strstr(m, "'work'") && strstr(m, "succeeded"),
       "loading t4 is CAIRN_ECORRUPT, not a succeeded task with a pending step (\"%s\")", m);
    int problems = 0;
    uint64_t records = 0;
    rc = s ? cairn_store_check(s, check_count, &problems, &records) : -1;
    ok(rc == CAIRN_ECORRUPT && problems == 1, "cairn check reports it (%d problem)", problems);
    cairn_store_free(s);
}

/* The page number of the main database's root, from the newer of data.mdb's two meta pages
 * (LMDB's layout: at 16 + 24 the free and main databases' records, 48 bytes each, md_root
 * their last 8; the transaction id at 16 + 128). 0 if unreadable. */
static long main_root(const unsigned char *b, size_t n)
{
    uint64_t best = 0, root = 0;
    for (int m = 0; m < 2 && (size_t)(m + 1) * 4096 <= n; m++) {
        const unsigned char *p = b + m * 4096;
        uint64_t r, txn;
        memcpy(&r, p + 16 + 24 + 48 + 40, 8);
        memcpy(&txn, p + 16 + 128, 8);
        if (txn >= best)
            best = txn, root = r;
    }
    return (long)root;
}

/* LMDB's directory (the main database's records: each database's root and entry count) has no
 * checksum of cairn's: a flipped entry count is what `stats` shows, and cairn check catches it
 * against its scan; a record read through another database's pages fails its checksum, which
 * covers the database's name. */
static void test_directory(void)
{
    char dir[300], path[400];
    fresh(dir, "directory");
    /* schema 5's steps database, or schema 6's tasks, which holds the step records (both names
     * 5 bytes long, so that the database's record follows at the same distance) */
    const char *db = tu_raw_schema(dir) >= 6 ? "tasks" : "steps";
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    size_t n = 0;
    unsigned char *b = (unsigned char *)tu_read_file(path, &n);
    long root = b ? main_root(b, n) : 0;
    unsigned char *page = root > 1 && (size_t)(root + 1) * 4096 <= n ? b + root * 4096 : NULL;
    unsigned char *at = page ? memmem(page, 4096, db, 5) : NULL;
    ok(at != NULL, "found the %s database's record in LMDB's directory (page %ld)", db, root);
    if (at) {
        at[5 + 32] ^= 0x01; /* md_entries */
        tu_write_file(path, b, n);
    }
    free(b);
    cairn_store *s = open_store(dir);
    int problems = 0;
    uint64_t records = 0;
    int rc = s ? cairn_store_check(s, check_count, &problems, &records) : -1;
    ok(rc == CAIRN_ECORRUPT && problems == 1,
       "a flipped entry count in the directory: cairn check reports it (%d problem)", problems);
    cairn_store_free(s);

    fresh(dir, "crossdb");
    /* a database whose keys may be task IDs, as tasks': schema 5's inputs; schema 6 keeps inputs
     * (and idem) in tasks, so msgs there, whose keys are any string (the record then differs
     * from the task record only in its database) */
    const char *other = tu_raw_schema(dir) >= 6 ? "msgs" : "inputs";
    unsigned char v[512];
    long vn = tu_raw_get(dir, "tasks", "t2", 2, v, sizeof v);
    unsigned char sealed[520];
    if (vn > 0) {
        memcpy(sealed, v, (size_t)vn);
        tu_sum("tasks", "t2", 2, v, (size_t)vn, sealed + vn);
    }
    ok(vn > 0 && tu_raw_put_bare(dir, other, "t2", 2, sealed, (size_t)vn + 8) == 0,
       "plant: t2's task record, sealed as a tasks record, in the %s database", other);
    s = open_store(dir);
    problems = 0;
    rc = s ? cairn_store_check(s, check_count, &problems, &records) : -1;
    ok(rc == CAIRN_ECORRUPT && problems >= 1 && s && strstr(cairn_store_errmsg(s), "problem"),
       "a record of another database fails its checksum (%d problem)", problems);
    cairn_store_free(s);
}

static void test_upgrade(void)
{
    char dir[300], m[1024];
    fresh(dir, "upgrade");
    ok(tu_raw_downgrade(dir, 2) == 0, "plant: the store as schema 2 wrote it (no checksums)");
    uint32_t v = 0;
    long n = tu_raw_get(dir, "meta", "schema", 6, &v, sizeof v);
    probe p = look(dir, "t5", "work", m, sizeof m);
    ok(n == 4 && p.task_rc == 0 && p.step_rc == 0 && p.each_rc == 0 && p.nsteps == 2,
       "opening it upgrades it, and every record reads (%d %d %d)", p.task_rc, p.step_rc,
       p.each_rc);
    n = tu_raw_get(dir, "meta", "schema", 6, &v, sizeof v);
    ok(n == 4 && v == CAIRN__SCHEMA, "the store is now schema %u (%u)", CAIRN__SCHEMA, v);
    char k[64];
    size_t kn;
    step_key(k, &kn, "t5", "work");
    ok(flip_raw(dir, "steps", k, kn, 3) == 0, "plant: a bit of an upgraded record flipped");
    p = look(dir, "t5", "work", m, sizeof m);
    ok(p.step_rc == CAIRN_ECORRUPT, "an upgraded record is checked like a new one (\"%s\")", m);
}

int main(void)
{
    tu_tmpdir(root, "checksum");
    test_clean();
    test_value_flip();
    test_key_flip();
    test_undefined_step();
    test_counts();
    test_succeeded_lacks_step();
    test_directory();
    test_upgrade();
    if (!getenv("CAIRN_KEEP_TMP"))
        tu_rmtree(root);
    return tap_done();
}
