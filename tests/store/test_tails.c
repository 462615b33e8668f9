/* test_tails.c - split step records (schema 5, checkpoint/checksum.c's design comment).
 *
 * A step record whose last LMDB page would hold at most a quarter page keeps those bytes in the
 * database `tails`, under the same key and the record's one checksum. Checked against real
 * stores on disk, read back through the store and raw LMDB:
 *   - every output size from 1 byte to 64 KiB that crosses a page boundary reads back byte for
 *     byte, and each record is split exactly when the rule says (the raw sizes prove it);
 *   - 8 KiB outputs take two pages each, not three;
 *   - a record written whole over a split one (and the reverse) leaves no stale tail; deleting a
 *     task or its outputs deletes its tails;
 *   - damage to the head, to the tail, or a lost tail is CAIRN_ECORRUPT naming the step record,
 *     and `cairn check` reports it; a tail whose head is gone is reported too;
 *   - a schema-4 store (no `tails`) is upgraded when opened: its records read as before.
 * The journal's replay of split records after a reboot is test_synced.c's test_split_replayed.
 */
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/store.h"
#include "tests/store/rawlmdb.h"
#include "tests/tap.h"

#define PAGE_HEADER 16
#define TAILS_DB 12 /* tu_dbs[12]: tu_raw_dump counts the tails in either layout */

static char root[256];
static unsigned page; /* the store's page size */

/* ------------------------------------------------------------------ raw LMDB and the store */

/* The raw value of the record schema 5 keeps in db under k (in a schema-6 store: tasks' record
 * under its schema-6 key, tu_raw_where) copied into buf (at most cap bytes): its size, or -1. */
static long raw_bytes(const char *dir, const char *db, const void *k, size_t klen, void *buf,
                      size_t cap)
{
    MDB_env *env = tu_raw_open(dir);
    MDB_txn *txn;
    MDB_dbi dbi;
    long n = -1;
    if (env && mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) == 0) {
        tu_rawkey rk;
        MDB_val kk, vv;
        if (tu_raw_where(tu_raw_schema_txn(txn), db, k, klen, &rk) == 0 &&
            mdb_dbi_open(txn, rk.db, 0, &dbi) == 0 &&
            (kk = (MDB_val){rk.n, rk.k}, mdb_get(txn, dbi, &kk, &vv) == 0)) {
            n = (long)vv.mv_size;
            if (buf)
                memcpy(buf, vv.mv_data, vv.mv_size < cap ? vv.mv_size : cap);
        }
        mdb_txn_abort(txn);
    }
    if (env)
        mdb_env_close(env);
    return n;
}

static int stats_txn(cairn__txn *t, void *arg) { return cairn__store_stats_get(t, arg); }
static int stats_of(cairn_store *s, cairn__store_stats *st)
{
    return cairn__store_read(s, stats_txn, st);
}

static int del_txn(cairn__txn *t, void *arg) { return cairn__task_del(t, arg); }
static int drop_txn(cairn__txn *t, void *arg) { return cairn__task_drop_outputs(t, arg); }

static void task_of(cairn__task_rec *r, const char *id)
{
    memset(r, 0, sizeof *r);
    snprintf(r->id, sizeof r->id, "%s", id);
    snprintf(r->graph, sizeof r->graph, "g");
    snprintf(r->steps_pin, sizeof r->steps_pin, "w@1");
    r->state = CAIRN_SUCCEEDED;
    r->generation = 1;
    r->created_ms = r->updated_ms = r->finished_ms = 1000;
}

typedef struct wr {
    const char *id;
    const unsigned char *out;
    size_t len;
    int with_task;
} wr;

static int write_txn(cairn__txn *t, void *arg)
{
    const wr *w = arg;
    cairn__task_rec r;
    task_of(&r, w->id);
    int rc = w->with_task ? cairn__task_put(t, &r) : 0;
    cairn__step_rec s = {
        .state = CAIRN_STEP_DONE, .generation = 1, .output = w->out, .output_len = w->len};
    return rc ? rc : cairn__step_put(t, w->id, "w", &s);
}

static int put_step(cairn_store *s, const char *id, const unsigned char *out, size_t len)
{
    wr w = {id, out, len, 1};
    return cairn__store_write(s, 0, write_txn, &w);
}

typedef struct rd {
    const char *id;
    unsigned char *got;
    size_t len;
    int rc;
} rd;

static int read_txn(cairn__txn *t, void *arg)
{
    rd *r = arg;
    cairn__step_rec s;
    r->rc = cairn__step_get(t, r->id, "w", 1, &s);
    free(r->got);
    r->got = NULL;
    r->len = 0;
    if (r->rc == 0 && s.output) {
        r->got = malloc(s.output_len);
        memcpy(r->got, s.output, s.output_len);
        r->len = s.output_len;
    }
    return 0;
}

/* 1 if step w of id reads back as exactly (out, len) */
static int reads_back(cairn_store *s, const char *id, const unsigned char *out, size_t len)
{
    rd r = {.id = id};
    int ok_ = cairn__store_read(s, read_txn, &r) == 0 && r.rc == 0 && r.len == len &&
              memcmp(r.got, out, len) == 0;
    free(r.got);
    return ok_;
}

static int read_rc(cairn_store *s, const char *id)
{
    rd r = {.id = id};
    int rc = cairn__store_read(s, read_txn, &r);
    free(r.got);
    return rc ? rc : r.rc;
}

static void step_key(const char *id, unsigned char *k, size_t *klen)
{
    size_t n = strlen(id);
    memcpy(k, id, n + 1);
    memcpy(k + n + 1, "w", 2);
    memcpy(k + n + 3, "\0\0\0\1", 4);
    *klen = n + 7;
}

/* The raw sizes of id's steps value and tails value (-1: none). */
static void raw_sizes(const char *dir, const char *id, long *head, long *tail)
{
    unsigned char k[200];
    size_t kl;
    step_key(id, k, &kl);
    *head = raw_bytes(dir, "steps", k, kl, NULL, 0);
    *tail = raw_bytes(dir, "tails", k, kl, NULL, 0);
}

typedef struct chk {
    uint64_t records, problems;
    char first[1200], all[4000];
    int steps_seen, tails_seen;
} chk;

static int check_cb(const char *db, const char *task, const char *msg, void *arg)
{
    chk *c = arg;
    (void)task;
    if (!c->first[0])
        snprintf(c->first, sizeof c->first, "%s: %s", db, msg);
    size_t n = strlen(c->all);
    snprintf(c->all + n, sizeof c->all - n, "%s: %s | ", db, msg);
    c->steps_seen |= strcmp(db, "steps") == 0;
    c->tails_seen |= strcmp(db, "tails") == 0;
    return 0;
}

static int check_txn(cairn__txn *t, void *arg)
{
    chk *c = arg;
    return cairn__store_check(t, check_cb, c, &c->records, &c->problems);
}

static chk check(cairn_store *s)
{
    chk c;
    memset(&c, 0, sizeof c);
    if (cairn__store_read(s, check_txn, &c))
        c.problems = 1000;
    return c;
}

/* ------------------------------------------------------------------ tests */

/* Sizes around each page boundary up to four pages, and some up to 64 KiB. */
static void test_sizes(void)
{
    char dir[300];
    tu_subdir(dir, root, "sizes");
    cairn_store *s = tu_store_open(dir, CAIRN_NOSYNC, 0);
    ok(s != NULL, "a new store opens");
    if (!s)
        return;
    size_t sizes[2000];
    int n = 0;
    for (unsigned p = 1; p <= 4; p++)
        for (size_t d = 0; d < 1100; d += p == 2 ? 1 : 7)
            sizes[n++] = p * page - 120 + d;
    for (size_t z = 16384; z <= 65536; z += 4093)
        sizes[n++] = z;
    sizes[n++] = 65536;
    int bad = -1, split = 0, rule_bad = -1;
    for (int i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof id, "z%zu", sizes[i]);
        unsigned char *o = tu_make_output(sizes[i], (unsigned)i);
        if (put_step(s, id, o, sizes[i]) || !reads_back(s, id, o, sizes[i])) {
            if (bad < 0)
                bad = i;
        }
        free(o);
        long h, t;
        cairn_store_free(s);
        raw_sizes(dir, id, &h, &t);
        s = tu_store_open(dir, CAIRN_NOSYNC, 0);
        if (!s)
            break;
        long total = h + (t > 0 ? t : 0), used = total + PAGE_HEADER;
        long last = used % page;
        /* the rule: split iff the record is on overflow pages and its last would hold at most a
         * quarter page; then the head fills its pages exactly */
        int want = total > page / 2 && used > (long)page && last != 0 && last <= (long)page / 4;
        int is = t >= 0;
        split += is;
        if ((want != is || (is && (h + PAGE_HEADER) % page != 0)) && rule_bad < 0)
            rule_bad = i;
    }
    ok(bad < 0, "%d outputs of 1 byte to 64 KiB around page boundaries read back byte for byte%s",
       n, bad < 0 ? "" : " (one did not)");
    if (bad >= 0)
        diag("first bad size %zu", sizes[bad]);
    ok(rule_bad < 0 && split > 100, "each record is split exactly when the rule says (%d split)",
       split);
    if (rule_bad >= 0)
        diag("first size off the rule: %zu", sizes[rule_bad]);
    chk c = check(s);
    ok(c.problems == 0 && c.records > (uint64_t)(2 * n), "check: %llu records, no problem (%s)",
       (unsigned long long)c.records, c.first);
    cairn_store_free(s);
}

/* 8 KiB outputs take two pages each. */
static void test_two_pages(void)
{
    char dir[300];
    tu_subdir(dir, root, "pages");
    cairn_store *s = tu_store_open(dir, CAIRN_NOSYNC, 0);
    cairn__store_stats a, b;
    int rc = s ? stats_of(s, &a) : -1;
    const int N = 300;
    for (int i = 0; i < N && !rc; i++) {
        char id[32];
        snprintf(id, sizeof id, "p%04d", i);
        unsigned char *o = tu_make_output(8192, (unsigned)i);
        rc = put_step(s, id, o, 8192);
        free(o);
    }
    rc = rc ? rc : stats_of(s, &b);
    double per = rc ? 0 : (double)(b.map_used - a.map_used) / N / page;
    ok(rc == 0 && per > 1.9 && per < 2.4,
       "%d tasks with 8 KiB outputs take %.2f pages each (3 whole records would take 3)", N, per);
    cairn_store_free(s);
}

/* Rewrites, deletes and drops keep tails exactly where heads are. */
static void test_rewrite_delete(void)
{
    char dir[300];
    tu_subdir(dir, root, "rewrite");
    cairn_store *s = tu_store_open(dir, CAIRN_NOSYNC, 0);
    unsigned char *big = tu_make_output(8192, 7), *small = tu_make_output(100, 8),
                  *big2 = tu_make_output(2 * page + 100, 9);
    long h, t;
    int rc = put_step(s, "r1", big, 8192);
    cairn_store_free(s);
    raw_sizes(dir, "r1", &h, &t);
    ok(rc == 0 && t > 0 && (h + PAGE_HEADER) % page == 0, "an 8 KiB output is split (%ld + %ld)", h,
       t);
    s = tu_store_open(dir, CAIRN_NOSYNC, 0);
    rc = put_step(s, "r1", small, 100);
    ok(rc == 0 && reads_back(s, "r1", small, 100), "written whole over it, it reads the new bytes");
    cairn_store_free(s);
    raw_sizes(dir, "r1", &h, &t);
    ok(t < 0, "and the old tail is gone (%ld)", t);
    s = tu_store_open(dir, CAIRN_NOSYNC, 0);
    rc = put_step(s, "r1", big, 8192);
    rc = rc ? rc : put_step(s, "r1", big2, 2 * page + 100);
    ok(rc == 0 && reads_back(s, "r1", big2, 2 * page + 100),
       "a split record written over a split one reads the new bytes");
    rc = put_step(s, "r2", big, 8192);
    rc = rc ? rc : put_step(s, "r3", big, 8192);
    chk c = check(s);
    ok(rc == 0 && c.problems == 0, "check finds no problem (%s)", c.first);
    cairn_store_free(s);
    tu_dump d;
    tu_raw_dump(dir, &d);
    ok(d.entries[TAILS_DB] == 3, "three split records, three tails (%llu)",
       (unsigned long long)d.entries[TAILS_DB]);

    s = tu_store_open(dir, CAIRN_NOSYNC, 0);
    rc = cairn__store_write(s, 0, del_txn, "r2");
    c = check(s);
    ok(rc == 0 && c.problems == 0, "a task deleted: check finds no problem (%s)", c.first);
    rc = cairn__store_write(s, 0, drop_txn, "r3");
    ok(rc == 0 && read_rc(s, "r2") == CAIRN_ENOTFOUND && read_rc(s, "r3") == CAIRN_ENOTFOUND &&
           reads_back(s, "r1", big2, 2 * page + 100),
       "a task deleted and a task's outputs dropped: their steps are gone, the others stay");
    c = check(s); /* r3 is no tombstone here: its pinned step is missing, and only that */
    ok(c.problems == 1 && strstr(c.first, "'r3'") && strstr(c.first, "has no record"),
       "check finds only r3's dropped step missing (%s)", c.first);
    cairn_store_free(s);
    tu_raw_dump(dir, &d);
    ok(d.entries[TAILS_DB] == 1, "and their tails went with them (%llu left)",
       (unsigned long long)d.entries[TAILS_DB]);
    free(big), free(small), free(big2);
}

/* Damage to either half, a lost tail, a tail without its head. */
static void test_damage(void)
{
    char dir[300];
    tu_subdir(dir, root, "damage");
    cairn_store *s = tu_store_open(dir, CAIRN_NOSYNC, 0);
    unsigned char *big = tu_make_output(8192, 11);
    int rc = put_step(s, "d1", big, 8192);
    rc = rc ? rc : put_step(s, "d2", big, 8192);
    rc = rc ? rc : put_step(s, "d3", big, 8192);
    cairn_store_free(s);
    ok(rc == 0, "three split records written");
    unsigned char k[200], *buf = malloc(3 * page);
    size_t kl;

    tu_dump before, after;
    tu_raw_dump(dir, &before);
    /* d1: a byte of the tail flipped */
    step_key("d1", k, &kl);
    long tn = raw_bytes(dir, "tails", k, kl, buf, 3 * page);
    buf[0] ^= 1;
    rc = tn > 0 ? tu_raw_put_bare(dir, "tails", k, kl, buf, (size_t)tn) : -1;
    /* d2: a byte of the head flipped */
    step_key("d2", k, &kl);
    long hn = raw_bytes(dir, "steps", k, kl, buf, 3 * page);
    buf[5000] ^= 0x40;
    rc = rc ? rc : hn > 5000 ? tu_raw_put_bare(dir, "steps", k, kl, buf, (size_t)hn) : -1;
    /* d3: its tail lost */
    step_key("d3", k, &kl);
    rc = rc ? rc : tu_raw_put_bare(dir, "tails", k, kl, NULL, 0);
    ok(rc == 0, "damage planted with raw LMDB");
    tu_raw_dump(dir, &before);

    s = tu_store_open(dir, CAIRN_NOSYNC, 0);
    int r1 = read_rc(s, "d1");
    const char *m = cairn_store_errmsg(s);
    ok(r1 == CAIRN_ECORRUPT && strstr(m, "steps record of task 'd1' (step 'w', generation 1)") &&
           strstr(m, "tail"),
       "a damaged tail: CAIRN_ECORRUPT naming the step record (%s)", m);
    int r2 = read_rc(s, "d2");
    m = cairn_store_errmsg(s);
    ok(r2 == CAIRN_ECORRUPT && strstr(m, "task 'd2'"), "a damaged head: CAIRN_ECORRUPT (%s)", m);
    int r3 = read_rc(s, "d3");
    m = cairn_store_errmsg(s);
    ok(r3 == CAIRN_ECORRUPT && strstr(m, "task 'd3'") && strstr(m, "checksum"),
       "a lost tail: CAIRN_ECORRUPT, never a shorter output (%s)", m);
    chk c = check(s);
    ok(c.problems == 5 && c.steps_seen && c.tails_seen,
       "check reports the three heads and the two tails that no longer complete them (%llu: "
       "%s)",
       (unsigned long long)c.problems, c.first);
    cairn_store_free(s);
    tu_raw_dump(dir, &after);
    ok(tu_dump_eq(&before, &after), "reading and checking changed nothing in the store");

    /* a tail whose head is gone */
    tu_subdir(dir, root, "orphan");
    s = tu_store_open(dir, CAIRN_NOSYNC, 0);
    rc = put_step(s, "o1", big, 8192);
    cairn_store_free(s);
    step_key("o1", k, &kl);
    rc = rc ? rc : tu_raw_put_bare(dir, "steps", k, kl, NULL, 0);
    s = tu_store_open(dir, CAIRN_NOSYNC, 0);
    c = check(s);
    ok(rc == 0 && c.tails_seen && strstr(c.all, "tails record of task 'o1'") &&
           strstr(c.all, "is the tail of no split step record"),
       "a tail without its head is reported (%s)", c.all);
    cairn_store_free(s);
    free(buf), free(big);
}

/* A store of schema 4 has no `tails`: opening it upgrades it to the current schema. */
static void test_upgrade(void)
{
    char dir[300];
    tu_subdir(dir, root, "upgrade");
    cairn_store *s = tu_store_open(dir, CAIRN_NOSYNC, 0);
    unsigned char *mid = tu_make_output(3000, 3);
    int rc = put_step(s, "u1", mid, 3000);
    cairn_store_free(s);
    uint32_t four = 4, v = 0;
    rc = rc ? rc : tu_raw_to_schema5(dir); /* a schema-6 store laid out as schema 5's first */
    rc = rc ? rc : tu_raw_drop(dir, "tails");
    rc = rc ? rc : tu_raw_put(dir, "meta", "schema", 6, &four, sizeof four);
    ok(rc == 0, "made a schema-4 store (tails dropped)");
    s = tu_store_open(dir, CAIRN_NOSYNC, 0);
    ok(s && reads_back(s, "u1", mid, 3000), "it opens, and its records read as before");
    unsigned char *big = tu_make_output(8192, 4);
    rc = s ? put_step(s, "u2", big, 8192) : -1;
    ok(rc == 0 && reads_back(s, "u2", big, 8192), "a split record is written to it");
    chk c = s ? check(s) : (chk){.problems = 1};
    ok(c.problems == 0, "check finds no problem (%s)", c.first);
    cairn_store_free(s);
    long vn = tu_raw_get(dir, "meta", "schema", 6, &v, sizeof v);
    ok(vn == 4 && v == CAIRN__SCHEMA, "the store records schema %u (%u)", CAIRN__SCHEMA, v);
    free(mid), free(big);
}

int main(void)
{
    tu_tmpdir(root, "tails");
    char dir[300];
    tu_subdir(dir, root, "probe");
    cairn_store *s = tu_store_open(dir, CAIRN_NOSYNC, 0);
    cairn__store_stats st;
    page = s && stats_of(s, &st) == 0 ? (unsigned)st.page_size : 4096;
    cairn_store_free(s);
    test_sizes();
    test_two_pages();
    test_rewrite_delete();
    test_damage();
    test_upgrade();
    tu_rmtree(root);
    return tap_done();
}
