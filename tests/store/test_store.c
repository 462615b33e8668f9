/* test_store.c - the LMDB checkpoint store (checkpoint/store.c) through its internal API.
 *
 * Each check opens a fresh store in a scratch directory. Where a test must prove that a failed
 * write changed nothing (map limit, injected failure, conflicting reservation), it compares a
 * digest of every key and value of every database taken with raw LMDB before and after; raw
 * LMDB is also how a schema bump or a corrupt record is planted. Concurrency is checked with
 * real processes: four writers at once, and a reader SIGKILLed inside its read transaction.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <msgpack.h>

#include "checkpoint/store.h"
#include "tests/store/rawlmdb.h"
#include "tests/tap.h"

static char root[256];
/* A new empty directory path (not created) under the scratch root. */
static void newdir(char out[300], const char *tag) { tu_subdir(out, root, tag); }

static cairn_store *open_store(const char *dir, uint64_t map_max)
{
    return tu_store_open(dir, CAIRN_NOSYNC, map_max);
}

static void fill_task(cairn__task_rec *r, const char *id, cairn_state st, int64_t due)
{
    memset(r, 0, sizeof *r);
    snprintf(r->id, sizeof r->id, "%s", id);
    snprintf(r->graph, sizeof r->graph, "g");
    r->state = (uint8_t)st;
    r->generation = 1;
    r->created_ms = r->updated_ms = due;
    if (st == CAIRN_FAILED)
        r->next_retry_ms = due;
    if (st == CAIRN_RUNNING) {
        r->lease_expires_ms = due;
        r->lease_token = 7;
    }
    if (st == CAIRN_SUCCEEDED || st == CAIRN_DEAD)
        r->finished_ms = due;
}

/* ------------------------------------------------------------------ open */

static void test_open(void)
{
    char dir[300], path[400];
    newdir(dir, "open");
    mode_t old = umask(0);
    cairn_store *s = open_store(dir, 0);
    umask(old);
    struct stat st;
    ok(s && stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0700,
       "open creates the directory with mode 0700 (%o)", (unsigned)(st.st_mode & 07777));
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    int data_ok = stat(path, &st) == 0 && (st.st_mode & 07777) == 0600;
    snprintf(path, sizeof path, "%s/lock.mdb", dir);
    int lock_ok = stat(path, &st) == 0 && (st.st_mode & 07777) == 0600;
    ok(data_ok && lock_ok, "data.mdb and lock.mdb have mode 0600");
    ok(cairn_store_open(s, dir) == CAIRN_EINVAL, "opening an open store is CAIRN_EINVAL");
    ok(cairn_store_set_map_max(s, 1 << 20) == CAIRN_EINVAL &&
           cairn_store_set_durability(s, CAIRN_SYNC) == CAIRN_EINVAL,
       "setters after open are CAIRN_EINVAL");
    cairn_store_free(s);
    cairn_store_free(NULL);

    s = cairn_store_new();
    ok(cairn_store_set_durability(s, (cairn_durability)7) == CAIRN_EINVAL,
       "unknown durability refused");
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    int rc = cairn_store_open(s, path);
    ok(rc == CAIRN_EIO && strstr(cairn_store_errmsg(s), path),
       "a file as store path: CAIRN_EIO naming it (\"%s\")", cairn_store_errmsg(s));
    cairn_store_free(s);

    s = cairn_store_new();
    snprintf(path, sizeof path, "%s/no/such/parent", dir);
    rc = cairn_store_open(s, path);
    ok(rc == CAIRN_EIO && strstr(cairn_store_errmsg(s), path) &&
           strstr(cairn_store_errmsg(s), "No such file"),
       "missing parent: CAIRN_EIO with path and errno text (\"%s\")", cairn_store_errmsg(s));
    cairn_store_free(s);

    /* reopen of an existing store keeps its data */
    s = open_store(dir, 0);
    ok(s != NULL, "an existing store reopens");
    cairn_store_free(s);
}

/* ------------------------------------------------------------------ schema */

static int put_txn(cairn__txn *t, void *arg) { return cairn__task_put(t, arg); }

static void test_schema(void)
{
    char dir[300];
    newdir(dir, "schema");
    cairn_store *s = open_store(dir, 0);
    cairn_store_free(s);
    uint32_t v = 0;
    long n = tu_raw_get(dir, "meta", "schema", 6, &v, sizeof v);
    ok(n == 4 && v == CAIRN__SCHEMA, "a new store records schema %u (got %ld bytes, %u)",
       CAIRN__SCHEMA, n, v);

    v = CAIRN__SCHEMA + 1;
    ok(tu_raw_put(dir, "meta", "schema", 6, &v, sizeof v) == 0, "bump the schema with raw LMDB");
    s = cairn_store_new();
    int rc = cairn_store_open(s, dir);
    const char *m = cairn_store_errmsg(s);
    char want[32];
    snprintf(want, sizeof want, "schema version %u", CAIRN__SCHEMA + 1);
    ok(rc == CAIRN_ESCHEMA && strstr(m, want) && strstr(m, dir) && strstr(m, "upgrade"),
       "a newer schema is refused with CAIRN_ESCHEMA and a clear message (\"%s\")", m);
    ok(cairn__store_write(s, 0, put_txn, NULL) == CAIRN_EINVAL,
       "a store that failed to open refuses writes (CAIRN_EINVAL)");
    cairn_store_free(s);

    v = CAIRN__SCHEMA;
    tu_raw_put(dir, "meta", "schema", 6, &v, sizeof v);
    s = open_store(dir, 0);
    ok(s != NULL, "back at the current schema it opens");

    /* a record written by a newer schema: ESCHEMA naming the task */
    cairn__task_rec r;
    fill_task(&r, "newer", CAIRN_PENDING, 1000);
    cairn__store_write(s, 0, put_txn, &r);
    cairn_store_free(s);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "v", 1);
    msgpack_pack_uint32(&pk, CAIRN__SCHEMA + 5);
    msgpack_pack_str_with_body(&pk, "id", 2);
    msgpack_pack_str_with_body(&pk, "newer", 5);
    tu_raw_put(dir, "tasks", "newer", 5, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    s = open_store(dir, 0);
    cairn__task_rec rec;
    ok(tu_task_get(s, "newer", &rec) == CAIRN_ESCHEMA && strstr(cairn_store_errmsg(s), "'newer'"),
       "a task record of a newer schema: CAIRN_ESCHEMA naming the task (\"%s\")",
       cairn_store_errmsg(s));
    cairn_store_free(s);
}

/* ------------------------------------------------------------------ round trips */

static int steps_write(cairn__txn *t, void *arg)
{
    (void)arg;
    static const char out1[] = {(char)0xa2, 'g', '1'}, out3[] = {(char)0xa2, 'g', '3'},
                      outab[] = {(char)0xa2, 'a', 'b'};
    cairn__step_rec r = {.state = CAIRN_STEP_DONE,
                         .generation = 1,
                         .invocations = 2,
                         .updated_ms = 11,
                         .output = out1,
                         .output_len = 3};
    snprintf(r.error, sizeof r.error, "first");
    int rc = cairn__step_put(t, "t", "a", &r);
    r.generation = 3, r.output = out3, r.invocations = 1, r.intent_ms = 33;
    snprintf(r.error, sizeof r.error, "third");
    if (!rc)
        rc = cairn__step_put(t, "t", "a", &r);
    /* neighbours that must not leak into "t"/"a": another step with a longer name, another
     * task whose ID extends "t", and a step without output */
    r.generation = 2, r.output = outab;
    if (!rc)
        rc = cairn__step_put(t, "t", "ab", &r);
    r.generation = 1;
    if (!rc)
        rc = cairn__step_put(t, "t2", "a", &r);
    cairn__step_rec none = {.state = CAIRN_STEP_PENDING, .generation = 5};
    if (!rc)
        rc = cairn__step_put(t, "t", "b", &none);
    return rc;
}

typedef struct each_arg {
    int n;
    char seen[256];
} each_arg;

static int step_each_cb(const char *step, const cairn__step_rec *rec, void *arg)
{
    each_arg *a = arg;
    char buf[32];
    snprintf(buf, sizeof buf, "%s%u ", step, rec->generation);
    strncat(a->seen, buf, sizeof a->seen - strlen(a->seen) - 1);
    a->n++;
    return 0;
}

static int out_is(const cairn__step_rec *r, const char *s)
{
    return r->output && r->output_len == 3 && memcmp((const char *)r->output + 1, s, 2) == 0;
}

static int steps_read(cairn__txn *t, void *arg)
{
    (void)arg;
    cairn__step_rec r;
    int rc = cairn__step_get(t, "t", "a", 1, &r);
    ok(rc == 0 && r.generation == 1 && out_is(&r, "g1") && r.invocations == 2 &&
           r.state == CAIRN_STEP_DONE && r.updated_ms == 11 && strcmp(r.error, "first") == 0,
       "step record round-trips (generation 1)");
    rc = cairn__step_get(t, "t", "a", 2, &r);
    ok(rc == 0 && r.generation == 1 && out_is(&r, "g1"),
       "generation 2 sees the generation-1 record (latest <= gen)");
    rc = cairn__step_get(t, "t", "a", 3, &r);
    ok(rc == 0 && r.generation == 3 && out_is(&r, "g3") && r.intent_ms == 33 &&
           strcmp(r.error, "third") == 0,
       "generation 3 sees its own record");
    rc = cairn__step_get(t, "t", "a", 1000, &r);
    ok(rc == 0 && r.generation == 3, "generation 1000 sees generation 3");
    rc = cairn__step_get(t, "t", "a", 0, &r);
    ok(rc == CAIRN_ENOTFOUND, "generation 0: CAIRN_ENOTFOUND");
    rc = cairn__step_get(t, "t", "ab", 1, &r);
    ok(rc == CAIRN_ENOTFOUND, "step 'ab' has nothing at generation 1 (no leak from 'a')");
    rc = cairn__step_get(t, "t", "ab", 9, &r);
    ok(rc == 0 && out_is(&r, "ab"), "step 'ab' at generation 9 is its own record");
    rc = cairn__step_get(t, "t", "b", 9, &r);
    ok(rc == 0 && r.output == NULL && r.output_len == 0 && r.state == CAIRN_STEP_PENDING,
       "a record without output reads back with output NULL");
    rc = cairn__step_get(t, "t", "c", 9, &r);
    ok(rc == CAIRN_ENOTFOUND, "unknown step: CAIRN_ENOTFOUND");
    rc = cairn__step_get(t, "t2", "a", 1, &r);
    ok(rc == 0 && out_is(&r, "ab"), "task 't2' has its own records");
    rc = cairn__step_get(t, "", "a", 1, &r);
    ok(rc == CAIRN_ENOTFOUND, "empty task ID: CAIRN_ENOTFOUND");
    each_arg ea = {0};
    rc = cairn__step_each(t, "t", step_each_cb, &ea);
    ok(rc == 0 && ea.n == 4 && strcmp(ea.seen, "a1 a3 ab2 b5 ") == 0,
       "step_each lists the task's records oldest first (%s)", ea.seen);
    return 0;
}

static void test_step_records(cairn_store *s)
{
    ok(cairn__store_write(s, 0, steps_write, NULL) == 0, "write step records");
    cairn__store_read(s, steps_read, NULL);
}

static const char task_input[] = "\x81\xa1x\xcd\x01\x00"; /* {"x": 256} */

static int task_rt_read(cairn__txn *t, void *arg)
{
    const cairn__task_rec *w = arg;
    cairn__task_rec r;
    int rc = cairn__task_get(t, w->id, &r);
    int same = rc == 0 && strcmp(r.id, w->id) == 0 && strcmp(r.graph, w->graph) == 0 &&
               strcmp(r.fingerprint, w->fingerprint) == 0 &&
               strcmp(r.payload_hash, w->payload_hash) == 0 &&
               strcmp(r.steps_pin, w->steps_pin) == 0 && strcmp(r.tenant, w->tenant) == 0 &&
               strcmp(r.error, w->error) == 0 && strcmp(r.error_step, w->error_step) == 0 &&
               r.state == w->state && r.tombstone == w->tombstone && r.attempt == w->attempt &&
               r.generation == w->generation && r.audit_seq == w->audit_seq &&
               r.created_ms == w->created_ms && r.updated_ms == w->updated_ms &&
               r.finished_ms == w->finished_ms && r.next_retry_ms == w->next_retry_ms &&
               strcmp(r.owner.host, w->owner.host) == 0 && r.owner.pid == w->owner.pid &&
               r.owner.start == w->owner.start && r.lease_token == w->lease_token &&
               r.lease_expires_ms == w->lease_expires_ms;
    ok(same, "task record round-trips every field (rc %d)", rc);
    const void *in = NULL;
    size_t in_len = 0;
    rc = cairn__input_get(t, w->id, &in, &in_len);
    ok(rc == 0 && in_len == sizeof task_input - 1 && memcmp(in, task_input, in_len) == 0,
       "task input round-trips apart from the record (rc %d)", rc);
    ok(cairn__task_get(t, "nosuch", &r) == CAIRN_ENOTFOUND, "unknown task: CAIRN_ENOTFOUND");
    return 0;
}

static int put_input_txn(cairn__txn *t, void *arg)
{
    const cairn__task_rec *w = arg;
    int rc = cairn__task_put(t, w);
    return rc ? rc : cairn__input_put(t, w->id, task_input, sizeof task_input - 1);
}

static void test_task_record(cairn_store *s)
{
    cairn__task_rec w;
    fill_task(&w, "task:1_a.b-c", CAIRN_RUNNING, 5000);
    snprintf(w.fingerprint, sizeof w.fingerprint, "%064d", 7);
    snprintf(w.payload_hash, sizeof w.payload_hash, "%064d", 9);
    snprintf(w.steps_pin, sizeof w.steps_pin, "a@1,b@2");
    snprintf(w.tenant, sizeof w.tenant, "acme");
    snprintf(w.error, sizeof w.error, "an error with \"quotes\" and üñí");
    snprintf(w.error_step, sizeof w.error_step, "b");
    w.attempt = 4, w.generation = 3, w.audit_seq = 1ull << 40;
    w.created_ms = -5, w.finished_ms = 0, w.next_retry_ms = INT64_MAX;
    snprintf(w.owner.host, sizeof w.owner.host, "host.example");
    w.owner.pid = 4242, w.owner.start = 1ull << 50, w.lease_token = UINT64_MAX;
    ok(cairn__store_write(s, 0, put_input_txn, &w) == 0, "write a task record and its input");
    cairn__store_read(s, task_rt_read, &w);
}

typedef struct misc_arg {
    cairn__task_rec task;
    int pass;
} misc_arg;

static int misc_write(cairn__txn *t, void *arg)
{
    misc_arg *a = arg;
    fill_task(&a->task, "aud", CAIRN_PENDING, 10);
    a->task.audit_seq = 0;
    int rc = 0;
    for (int i = 0; i < 300 && !rc; i++) {
        cairn__audit_rec r = {.t_ms = 1000 + i,
                              .from = (uint8_t)(i % 6),
                              .to = (uint8_t)((i + 1) % 6),
                              .attempt = (uint32_t)i,
                              .generation = 1};
        snprintf(r.step, sizeof r.step, "s%d", i);
        snprintf(r.reason, sizeof r.reason, "reason %d", i);
        rc = cairn__audit_append(t, &a->task, &r);
    }
    if (!rc)
        rc = cairn__task_put(t, &a->task);
    /* a neighbour task whose ID extends "aud" must not show up in its trail */
    cairn__task_rec other;
    fill_task(&other, "aud2", CAIRN_PENDING, 10);
    cairn__audit_rec r = {.t_ms = 1, .step = "x", .reason = "other"};
    if (!rc)
        rc = cairn__audit_append(t, &other, &r);
    static const char prog[] = "\x92\x01\x02";
    if (!rc)
        rc = cairn__progress_put(t, "aud", "s", 2, prog, 3);
    if (!rc)
        rc = cairn__msg_put(t, "msg-1", "aud");
    return rc;
}

typedef struct audit_check {
    int n, in_order;
} audit_check;

static int audit_cb(const cairn__audit_rec *r, void *arg)
{
    audit_check *a = arg;
    char want[32];
    snprintf(want, sizeof want, "reason %d", a->n);
    if (r->t_ms != 1000 + a->n || strcmp(r->reason, want) != 0 || r->attempt != (uint32_t)a->n ||
        r->from != a->n % 6 || r->to != (a->n + 1) % 6)
        a->in_order = 0;
    a->n++;
    return 0;
}

static int stop_after_one(const cairn__audit_rec *r, void *arg)
{
    (void)r;
    ++*(int *)arg;
    return 1;
}

static int misc_read(cairn__txn *t, void *arg)
{
    (void)arg;
    audit_check ac = {0, 1};
    int rc = cairn__audit_each(t, "aud", audit_cb, &ac);
    ok(rc == 0 && ac.n == 300 && ac.in_order,
       "300 audit records read back in append order (across the 255/256 key boundary) (%d)", ac.n);
    int one = 0;
    ok(cairn__audit_each(t, "aud", stop_after_one, &one) == 0 && one == 1,
       "an audit callback returning 1 stops the walk");
    cairn__task_rec r;
    ok(cairn__task_get(t, "aud", &r) == 0 && r.audit_seq == 300, "audit_seq persisted (300)");
    const void *p;
    size_t n;
    ok(cairn__progress_get(t, "aud", "s", 2, &p, &n) == 0 && n == 3 &&
           memcmp(p, "\x92\x01\x02", 3) == 0,
       "progress round-trips");
    ok(cairn__progress_get(t, "aud", "s", 1, &p, &n) == CAIRN_ENOTFOUND,
       "progress is per generation (none at 1)");
    char task[CAIRN__ID_MAX + 1];
    ok(cairn__msg_get(t, "msg-1", task) == 0 && strcmp(task, "aud") == 0,
       "message record round-trips");
    ok(cairn__msg_get(t, "msg-2", task) == CAIRN_ENOTFOUND, "unknown message: CAIRN_ENOTFOUND");
    return 0;
}

static int progress_del(cairn__txn *t, void *arg)
{
    (void)arg;
    return cairn__progress_put(t, "aud", "s", 2, NULL, 0);
}

static int progress_gone(cairn__txn *t, void *arg)
{
    const void *p;
    size_t n;
    *(int *)arg = cairn__progress_get(t, "aud", "s", 2, &p, &n);
    return 0;
}

static void test_misc_records(cairn_store *s)
{
    misc_arg a = {0};
    ok(cairn__store_write(s, 0, misc_write, &a) == 0, "write audit, progress, message");
    cairn__store_read(s, misc_read, NULL);
    int gone = 0;
    cairn__store_write(s, 0, progress_del, NULL);
    cairn__store_read(s, progress_gone, &gone);
    ok(gone == CAIRN_ENOTFOUND, "progress put with NULL deletes it");
}

/* ------------------------------------------------------------------ idempotency */

typedef struct idem_arg {
    const char *id, *hash;
    char existing[65];
    int rc;
} idem_arg;

static int idem_txn(cairn__txn *t, void *arg)
{
    idem_arg *a = arg;
    a->existing[0] = 0;
    a->rc = cairn__idem_reserve(t, a->id, a->hash, a->existing);
    return a->rc;
}

static void test_idem(const char *dir)
{
    char h1[65], h2[65];
    memset(h1, 'a', 64), h1[64] = 0;
    memset(h2, 'b', 64), h2[64] = 0;
    cairn_store *s = open_store(dir, 0);
    idem_arg a = {.id = "order-1", .hash = h1};
    ok(cairn__store_write(s, 0, idem_txn, &a) == 0, "reserve a new task ID");
    ok(cairn__store_write(s, 0, idem_txn, &a) == 0, "reserving it again with the same hash: 0");
    cairn_store_free(s);
    tu_dump before, after;
    tu_raw_dump(dir, &before);
    s = open_store(dir, 0);
    a.hash = h2;
    int rc = cairn__store_write(s, 0, idem_txn, &a);
    ok(rc == CAIRN_ECONFLICT && strcmp(a.existing, h1) == 0,
       "another hash: CAIRN_ECONFLICT with the existing hash reported");
    cairn_store_free(s);
    tu_raw_dump(dir, &after);
    ok(tu_dump_eq(&before, &after), "the conflicting reservation changed nothing in the store");
    s = open_store(dir, 0);
    a.hash = h1;
    ok(cairn__store_write(s, 0, idem_txn, &a) == 0, "the original hash still holds the ID");
    cairn_store_free(s);
}

/* ------------------------------------------------------------------ indexes */

typedef struct idx_arg {
    int64_t now;
    int step;
} idx_arg;

static int idx_write(cairn__txn *t, void *arg)
{
    idx_arg *a = arg;
    cairn__task_rec r;
    int rc = 0;
    if (a->step == 0) {
        /* failed ones, due in the past (out of ID order) and one in the future */
        fill_task(&r, "f-late", CAIRN_FAILED, a->now - 100);
        rc = rc ? rc : cairn__task_put(t, &r);
        fill_task(&r, "f-early", CAIRN_FAILED, a->now - 5000);
        rc = rc ? rc : cairn__task_put(t, &r);
        fill_task(&r, "f-future", CAIRN_FAILED, a->now + 3600000);
        rc = rc ? rc : cairn__task_put(t, &r);
        fill_task(&r, "p1", CAIRN_PENDING, a->now - 10);
        rc = rc ? rc : cairn__task_put(t, &r);
        fill_task(&r, "run-acme-1", CAIRN_RUNNING, a->now + 60000);
        snprintf(r.tenant, sizeof r.tenant, "acme");
        rc = rc ? rc : cairn__task_put(t, &r);
        fill_task(&r, "run-acme-2", CAIRN_RUNNING, a->now + 60000);
        snprintf(r.tenant, sizeof r.tenant, "acme");
        rc = rc ? rc : cairn__task_put(t, &r);
        fill_task(&r, "run-acm", CAIRN_RUNNING, a->now + 60000);
        snprintf(r.tenant, sizeof r.tenant, "acm"); /* a prefix of "acme": must not mix */
        rc = rc ? rc : cairn__task_put(t, &r);
        fill_task(&r, "done-2", CAIRN_SUCCEEDED, 2000);
        rc = rc ? rc : cairn__task_put(t, &r);
        fill_task(&r, "done-1", CAIRN_DEAD, 1000);
        rc = rc ? rc : cairn__task_put(t, &r);
        fill_task(&r, "done-3", CAIRN_SUCCEEDED, 3000);
        rc = rc ? rc : cairn__task_put(t, &r);
    } else {
        /* state changes: the index entries must move with them */
        rc = cairn__task_get(t, "f-early", &r);
        r.state = CAIRN_RUNNING, r.lease_expires_ms = a->now + 1000, r.lease_token = 1;
        rc = rc ? rc : cairn__task_put(t, &r);
        rc = rc ? rc : cairn__task_get(t, "run-acme-1", &r);
        r.state = CAIRN_SUCCEEDED, r.finished_ms = 500;
        rc = rc ? rc : cairn__task_put(t, &r);
        rc = rc ? rc : cairn__task_get(t, "f-late", &r);
        r.next_retry_ms = a->now - 10000; /* due earlier now: moves to the front */
        rc = rc ? rc : cairn__task_put(t, &r);
        for (int i = 0; i < 50 && !rc; i++) { /* many rewrites of one task: no stale entries */
            rc = cairn__task_get(t, "p1", &r);
            r.updated_ms += 1;
            rc = rc ? rc : cairn__task_put(t, &r);
        }
    }
    return rc;
}

typedef struct ids {
    char s[512];
    int n;
} ids;

static int collect(const char *id, void *arg)
{
    ids *l = arg;
    strncat(l->s, id, sizeof l->s - strlen(l->s) - 2);
    strcat(l->s, " ");
    l->n++;
    return 0;
}

static int idx_read(cairn__txn *t, void *arg)
{
    idx_arg *a = arg;
    ids l = {"", 0};
    cairn__store_stats st;
    if (a->step == 0) {
        cairn__due_each(t, CAIRN_FAILED, a->now, collect, &l);
        ok(strcmp(l.s, "f-early f-late ") == 0,
           "due index: failed tasks due <= now in due order, not future ones (%s)", l.s);
        l = (ids){"", 0};
        cairn__due_each(t, CAIRN_FAILED, INT64_MAX, collect, &l);
        ok(strcmp(l.s, "f-early f-late f-future ") == 0, "with no bound all three (%s)", l.s);
        l = (ids){"", 0};
        cairn__tenant_each(t, "acme", collect, &l);
        ok(strcmp(l.s, "run-acme-1 run-acme-2 ") == 0,
           "tenant index: running tasks of 'acme' only (%s)", l.s);
        l = (ids){"", 0};
        cairn__finished_each(t, 0, 2500, collect, &l);
        ok(strcmp(l.s, "done-1 done-2 ") == 0,
           "finished index: finished <= bound, oldest first (%s)", l.s);
        cairn__store_stats_get(t, &st);
        ok(st.by_state[CAIRN_FAILED] == 3 && st.by_state[CAIRN_PENDING] == 1 &&
               st.by_state[CAIRN_RUNNING] == 3 && st.by_state[CAIRN_SUCCEEDED] == 2 &&
               st.by_state[CAIRN_DEAD] == 1,
           "stats count index entries per state");
    } else {
        cairn__due_each(t, CAIRN_FAILED, a->now, collect, &l);
        ok(strcmp(l.s, "f-late ") == 0, "after changes: only f-late is due (%s)", l.s);
        l = (ids){"", 0};
        cairn__due_each(t, CAIRN_RUNNING, INT64_MAX, collect, &l);
        ok(strcmp(l.s, "f-early run-acm run-acme-2 ") == 0,
           "running index follows the change, in due order (%s)", l.s);
        l = (ids){"", 0};
        cairn__tenant_each(t, "acme", collect, &l);
        ok(strcmp(l.s, "run-acme-2 ") == 0, "tenant index drops a finished task (%s)", l.s);
        l = (ids){"", 0};
        cairn__finished_each(t, 0, INT64_MAX, collect, &l);
        ok(strcmp(l.s, "run-acme-1 done-1 done-2 done-3 ") == 0,
           "finished index gains it in time order (%s)", l.s);
        cairn__store_stats_get(t, &st);
        uint64_t total = 0;
        for (int i = 0; i < CAIRN_STATE_COUNT; i++)
            total += st.by_state[i];
        ok(total == 10 && st.by_state[CAIRN_PENDING] == 1 && st.by_state[CAIRN_FAILED] == 2 &&
               st.by_state[CAIRN_RUNNING] == 3 && st.by_state[CAIRN_SUCCEEDED] == 3,
           "no stale index entries: 10 entries for 10 tasks after 53 rewrites (%llu)",
           (unsigned long long)total);
    }
    return 0;
}

static int stop_first(const char *id, void *arg)
{
    (void)id;
    ++*(int *)arg;
    return 1;
}

static int del_txn(cairn__txn *t, void *arg)
{
    (void)arg;
    int rc = cairn__task_del(t, "done-2");
    return rc ? rc : cairn__task_del(t, "run-acme-2");
}

static int del_read(cairn__txn *t, void *arg)
{
    (void)arg;
    cairn__task_rec r;
    ids l = {"", 0};
    cairn__finished_each(t, 0, INT64_MAX, collect, &l);
    int fin = strstr(l.s, "done-2") == NULL;
    l = (ids){"", 0};
    cairn__tenant_each(t, "acme", collect, &l);
    int ten = l.n == 0;
    cairn__store_stats st;
    cairn__store_stats_get(t, &st);
    uint64_t total = 0;
    for (int i = 0; i < CAIRN_STATE_COUNT; i++)
        total += st.by_state[i];
    ok(cairn__task_get(t, "done-2", &r) == CAIRN_ENOTFOUND && fin && ten && total == 8,
       "task_del removes the record and all its index entries");
    int n = 0;
    ok(cairn__due_each(t, CAIRN_FAILED, INT64_MAX, stop_first, &n) == 0 && n == 1,
       "an index callback returning 1 stops the scan");
    ok(cairn__task_del(t, "nosuch") == CAIRN_ENOTFOUND, "deleting an unknown task: ENOTFOUND");
    return 0;
}

static void test_indexes(const char *dir)
{
    cairn_store *s = open_store(dir, 0);
    idx_arg a = {.now = cairn__now_ms(), .step = 0};
    ok(cairn__store_write(s, 0, idx_write, &a) == 0, "write ten tasks");
    cairn__store_read(s, idx_read, &a);
    a.step = 1;
    ok(cairn__store_write(s, 0, idx_write, &a) == 0, "change their states");
    cairn__store_read(s, idx_read, &a);
    cairn__store_write(s, 0, del_txn, NULL);
    cairn__store_read(s, del_read, NULL);
    cairn_store_free(s);
}

/* Index scans read a batch of ids at a time (index.c), so a scan stopped early costs what it
 * returns. These tasks span several batches, which must join without a gap or a repeat, even
 * when the callbacks delete what the scan has met or is about to meet. */
enum { MANY = 1000 };

typedef struct many_arg {
    int n, in_order, deletes; /* deletes: 1 each task met, 2 task m0700 at the first call */
    char last[32];
    cairn__txn *t;
} many_arg;

static int many_write(cairn__txn *t, void *arg)
{
    (void)arg;
    cairn__task_rec r;
    int rc = 0;
    for (int i = 0; i < MANY && !rc; i++) {
        int k = (i * 7919) % MANY; /* written out of due order */
        char id[32];
        snprintf(id, sizeof id, "m%04d", k);
        fill_task(&r, id, CAIRN_FAILED, 1000 + k);
        rc = cairn__task_put(t, &r);
    }
    return rc;
}

static int many_cb(const char *id, void *arg)
{
    many_arg *a = arg;
    if (a->n && strcmp(id, a->last) <= 0)
        a->in_order = 0;
    snprintf(a->last, sizeof a->last, "%s", id);
    a->n++;
    if (a->deletes == 1)
        return cairn__task_del(a->t, id);
    if (a->deletes == 2 && a->n == 1)
        return cairn__task_del(a->t, "m0700");
    return strcmp(id, "m0700") == 0 ? CAIRN_ECORRUPT : 0; /* deleted: must not be met */
}

static int many_scan(cairn__txn *t, void *arg)
{
    many_arg *a = arg;
    a->t = t;
    a->in_order = 1;
    return cairn__due_each(t, CAIRN_FAILED, INT64_MAX, many_cb, a);
}

static int many_bounded(cairn__txn *t, void *arg)
{
    many_arg *a = arg;
    a->in_order = 1;
    return cairn__due_each(t, CAIRN_FAILED, 1000 + 599, many_cb, a);
}

static void test_index_batches(const char *dir)
{
    cairn_store *s = open_store(dir, 0);
    ok(cairn__store_write(s, 0, many_write, NULL) == 0, "write %d failed tasks", MANY);
    many_arg a = {.deletes = 3}; /* none: m0700 is still there */
    int rc = cairn__store_read(s, many_bounded, &a);
    ok(rc == 0 && a.n == 600 && a.in_order,
       "a bounded scan across batches: the 600 due by the bound, in due order (%d)", a.n);
    a = (many_arg){.deletes = 2};
    rc = cairn__store_write(s, 0, many_scan, &a);
    ok(rc == 0 && a.n == MANY - 1 && a.in_order,
       "a task a callback deletes ahead of the scan is not met: %d of %d, in order", a.n, MANY - 1);
    a = (many_arg){.deletes = 1};
    rc = cairn__store_write(s, 0, many_scan, &a);
    ok(rc == 0 && a.n == MANY - 1 && a.in_order,
       "callbacks deleting each task met: the scan goes on after each batch's deleted last key "
       "(%d)",
       a.n);
    a = (many_arg){0};
    rc = cairn__store_read(s, many_scan, &a);
    ok(rc == 0 && a.n == 0, "and the index is empty (%d)", a.n);
    cairn_store_free(s);
}

/* ------------------------------------------------------------------ map growth and limit */

typedef struct big_arg {
    int i;
    size_t size;
    int calls;
} big_arg;

static int big_write(cairn__txn *t, void *arg)
{
    big_arg *a = arg;
    a->calls++;
    static char buf[1 << 20];
    memset(buf, 'a' + a->i % 26, a->size);
    char name[32];
    snprintf(name, sizeof name, "big%d", a->i);
    return cairn__progress_put(t, "big", name, 1, buf, a->size);
}

/* big_write, then SIGKILL before the transaction commits */
static int big_write_then_die(cairn__txn *t, void *arg)
{
    big_write(t, arg);
    raise(SIGKILL);
    return 0;
}

static int big_read(cairn__txn *t, void *arg)
{
    int n = *(int *)arg, good = 0;
    for (int i = 0; i < n; i++) {
        char name[32];
        const void *p;
        size_t len;
        snprintf(name, sizeof name, "big%d", i);
        if (cairn__progress_get(t, "big", name, 1, &p, &len) == 0 && len == 1 << 20 &&
            ((const char *)p)[len - 1] == 'a' + i % 26)
            good++;
    }
    *(int *)arg = good;
    return 0;
}

static int stats_txn(cairn__txn *t, void *arg) { return cairn__store_stats_get(t, arg); }

static void test_map_growth(void)
{
    char dir[300];
    newdir(dir, "grow");
    cairn_store *s = open_store(dir, 0);
    cairn__store_stats st0, st1;
    cairn__store_read(s, stats_txn, &st0);
    int failed = 0, regrown = 0;
    for (int i = 0; i < 24; i++) { /* 24 MiB of values into an 8 MiB map */
        big_arg a = {.i = i, .size = 1 << 20};
        if (cairn__store_write(s, 0, big_write, &a))
            failed++;
        regrown += a.calls > 1;
    }
    cairn__store_read(s, stats_txn, &st1);
    ok(st0.map_size == 8u << 20, "a new store starts with an 8 MiB map (%llu)",
       (unsigned long long)st0.map_size);
    ok(failed == 0 && st1.map_size > 24u << 20 && regrown > 0,
       "24 MiB written: the map grew by itself to %llu bytes (callbacks re-run %d times)",
       (unsigned long long)st1.map_size, regrown);
    cairn_store_free(s);
    s = open_store(dir, 0);
    int n = 24;
    cairn__store_read(s, big_read, &n);
    ok(n == 24, "after reopening all 24 values read back (%d)", n);
    cairn_store_free(s);
}

static void test_map_limit(void)
{
    char dir[300];
    newdir(dir, "limit");
    const uint64_t max = 12u << 20;
    cairn_store *s = open_store(dir, max);
    int i, rc = 0;
    for (i = 0; i < 64; i++) {
        big_arg a = {.i = i, .size = 1 << 20};
        if ((rc = cairn__store_write(s, 0, big_write, &a)))
            break;
    }
    const char *m = cairn_store_errmsg(s);
    ok(rc == CAIRN_EFULL && i >= 4 && i < 12,
       "with a 12 MiB map limit the write of value %d fails with CAIRN_EFULL", i);
    ok(strstr(m, "full") && strstr(m, "12582912") && strstr(m, dir),
       "the message says full, the limit and the store (\"%s\")", m);
    cairn_store_free(s);
    tu_dump before, after;
    tu_raw_dump(dir, &before);
    s = open_store(dir, max);
    big_arg a = {.i = 99, .size = 1 << 20};
    rc = cairn__store_write(s, 0, big_write, &a);
    ok(rc == CAIRN_EFULL, "a further write is refused too");
    /* small writes still fit */
    big_arg small = {.i = 100, .size = 100};
    ok(cairn__store_write(s, 0, big_write, &small) == 0, "a small write still fits");
    cairn_store_free(s);
    tu_raw_dump(dir, &after);
    ok(before.entries[3] + 1 == after.entries[3], "exactly the small write landed");
    /* undo the small write's effect on the comparison by checking the big one is absent */
    s = open_store(dir, max);
    int n = i;
    cairn__store_read(s, big_read, &n);
    ok(n == i, "the %d values written before the limit are intact", i);
    cairn_store_free(s);

    /* the dump comparison proper: a failed write changes nothing */
    tu_raw_dump(dir, &before);
    s = open_store(dir, max);
    a.i = 101;
    rc = cairn__store_write(s, 0, big_write, &a);
    cairn_store_free(s);
    tu_raw_dump(dir, &after);
    ok(rc == CAIRN_EFULL && tu_dump_eq(&before, &after),
       "a write refused for the map limit leaves every database byte-identical");
}

/* ------------------------------------------------------------------ durability */

static int read_file(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    return (int)n;
}

/* Points *arg at the first byte of value 0 of big_write, inside the map. */
static int value_ptr(cairn__txn *t, void *arg)
{
    const void *p;
    size_t len;
    if (cairn__progress_get(t, "big", "big0", 1, &p, &len) == 0)
        *(const void **)arg = p;
    return 0;
}

static cairn_store *open_as(const char *dir, int ask, cairn_durability d, int *rc)
{
    cairn_store *s = cairn_store_new();
    if (ask)
        cairn_store_set_durability(s, d);
    *rc = cairn_store_open(s, dir);
    return s;
}

static void test_durability(void)
{
    char dir[300], path[400], buf[64];
    int rc;
    /* a nosync store records it, keeps it, and refuses to become sync */
    newdir(dir, "dur");
    cairn_store *s = open_as(dir, 1, CAIRN_NOSYNC, &rc);
    ok(rc == 0, "a new store opens nosync (%s)", cairn_store_errmsg(s));
    big_arg a = {.i = 0, .size = 1 << 20};
    ok(cairn__store_write(s, 0, big_write, &a) == 0, "and takes a write");
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    struct stat st;
    cairn__store_stats stats = {0};
    cairn__store_read(s, stats_txn, &stats);
    int st_rc = stat(path, &st);
    ok(st_rc == 0 && (uint64_t)st.st_blocks * 512 >= stats.map_size,
       "its whole map is reserved on disk (%llu of %llu bytes allocated)",
       (unsigned long long)st.st_blocks * 512, (unsigned long long)stats.map_size);
    cairn_store_free(s);
    snprintf(path, sizeof path, "%s/durability", dir);
    ok(read_file(path, buf, sizeof buf) > 0 && strcmp(buf, "nosync\n") == 0,
       "the store directory records \"nosync\" (%s)", buf);
    tu_dump before, after;
    tu_raw_dump(dir, &before);
    s = open_as(dir, 1, CAIRN_SYNC, &rc);
    const char *m = cairn_store_errmsg(s);
    ok(rc == CAIRN_EINVAL && strstr(m, "nosync store") && strstr(m, dir),
       "asking it for sync is refused with CAIRN_EINVAL, naming the store (\"%s\")", m);
    cairn_store_free(s);
    tu_raw_dump(dir, &after);
    ok(tu_dump_eq(&before, &after), "and the store is unchanged");
    s = open_as(dir, 0, CAIRN_SYNC, &rc);
    int n = 1;
    cairn__store_read(s, big_read, &n);
    ok(rc == 0 && n == 1, "opened without asking, it is used as it is (value read back)");

    /* a child that must not touch the store cannot write its map: a byte of a stored value,
     * written back unchanged by a child with and without the seal */
    volatile char *p = NULL;
    cairn__store_read(s, value_ptr, (void *)&p);
    int status[2] = {0, 0};
    for (int sealed = 0; sealed < 2 && p; sealed++) {
        pid_t pid = fork();
        if (pid == 0) {
            if (sealed)
                cairn__store_seal(s);
            signal(SIGSEGV, SIG_DFL); /* the fault kills the child, under ASan too */
            p[0] = p[0];              /* a wild write */
            _exit(0);
        }
        waitpid(pid, &status[sealed], 0);
    }
    ok(p && WIFEXITED(status[0]) && WEXITSTATUS(status[0]) == 0,
       "a nosync store's map is writable in a child (status %d)", status[0]);
    ok(p && WIFSIGNALED(status[1]) && WTERMSIG(status[1]) == SIGSEGV,
       "after cairn__store_seal the same write faults (status %d)", status[1]);
    cairn_store_free(s);

    /* process-crash durability of the writable map: a writer SIGKILLed inside its 7th write
     * transaction leaves the six committed values and nothing of the seventh */
    newdir(dir, "dur");
    pid_t pid = fork();
    if (pid == 0) {
        cairn_store *w = open_as(dir, 1, CAIRN_NOSYNC, &rc);
        for (int i = 0; i < 7 && rc == 0; i++) {
            big_arg b = {.i = i, .size = 1 << 20};
            rc = cairn__store_write(w, 0, i == 6 ? big_write_then_die : big_write, &b);
        }
        _exit(1);
    }
    int st_kill = 0;
    waitpid(pid, &st_kill, 0);
    s = open_as(dir, 0, CAIRN_SYNC, &rc);
    n = 7;
    cairn__store_read(s, big_read, &n);
    int n6 = 6;
    cairn__store_read(s, big_read, &n6);
    big_arg more = {.i = 7, .size = 100};
    ok(WIFSIGNALED(st_kill) && rc == 0 && n == 6 && n6 == 6 &&
           cairn__store_write(s, 0, big_write, &more) == 0,
       "a nosync writer killed inside a transaction: its 6 commits read back, the 7th is "
       "absent, the store takes writes (%d of 7)",
       n);
    cairn_store_free(s);

    /* a later open with a smaller map limit must not shrink a nosync store under a process
     * that uses it: its next write past the new end of the file would be a SIGBUS */
    newdir(dir, "dur");
    s = open_store(dir, 0);
    int wrote = 0;
    for (int i = 0; i < 12; i++) {
        big_arg b = {.i = i, .size = 1 << 20};
        wrote += cairn__store_write(s, 0, big_write, &b) == 0;
    }
    pid = fork();
    if (pid == 0) {
        cairn_store *c = open_store(dir, 8u << 20);
        int wrc = 0;
        for (int i = 20; c && i < 40 && wrc == 0; i++) {
            big_arg b = {.i = i, .size = 1 << 20};
            wrc = cairn__store_write(c, 0, big_write, &b);
        }
        _exit(wrc == CAIRN_EFULL ? 0 : 1);
    }
    int st_small = 0;
    waitpid(pid, &st_small, 0);
    big_arg after12 = {.i = 12, .size = 1 << 20};
    rc = cairn__store_write(s, 0, big_write, &after12);
    n = 13;
    cairn__store_read(s, big_read, &n);
    ok(wrote == 12 && WIFEXITED(st_small) && WEXITSTATUS(st_small) == 0 && rc == 0 && n == 13,
       "a second process with an 8 MiB limit on a 16 MiB nosync store: it fills the map but "
       "never grows it, the store is not shrunk, the first process writes on (%d of 13 values)",
       n);
    cairn_store_free(s);

    /* a sync store refuses to become nosync */
    newdir(dir, "dur");
    s = open_as(dir, 0, CAIRN_SYNC, &rc);
    cairn_store_free(s);
    snprintf(path, sizeof path, "%s/durability", dir);
    ok(rc == 0 && read_file(path, buf, sizeof buf) > 0 && strcmp(buf, "sync\n") == 0,
       "a new store is sync by default and records it");
    s = open_as(dir, 1, CAIRN_NOSYNC, &rc);
    ok(rc == CAIRN_EINVAL && strstr(cairn_store_errmsg(s), "sync store"),
       "asking a sync store for nosync is refused (\"%s\")", cairn_store_errmsg(s));
    cairn_store_free(s);

    /* a damaged record of the durability is an error naming the file */
    FILE *f = fopen(path, "w");
    fputs("fast\n", f);
    fclose(f);
    s = open_as(dir, 0, CAIRN_SYNC, &rc);
    ok(rc == CAIRN_ECORRUPT && strstr(cairn_store_errmsg(s), path),
       "a durability file that says neither is CAIRN_ECORRUPT naming it (\"%s\")",
       cairn_store_errmsg(s));
    cairn_store_free(s);
}

/* ------------------------------------------------------------------ injected failure */

static int inject_txn(cairn__txn *t, void *arg)
{
    int *calls = arg;
    ++*calls;
    cairn__task_rec r;
    fill_task(&r, "inj", CAIRN_PENDING, 77);
    return cairn__task_put(t, &r);
}

static void test_inject(void)
{
    char dir[300];
    newdir(dir, "inject");
    cairn_store *s = open_store(dir, 0);
    cairn_store_free(s);
    tu_dump before, after;
    tu_raw_dump(dir, &before);
    s = open_store(dir, 0);
    int calls = 0;
    cairn__store_inject_write_failure(s, 1, CAIRN_EIO);
    int rc = cairn__store_write(s, 0, inject_txn, &calls);
    ok(rc == CAIRN_EIO && calls == 0 && strstr(cairn_store_errmsg(s), "injected"),
       "injected failure of the next write: CAIRN_EIO, callback not run");
    cairn_store_free(s);
    tu_raw_dump(dir, &after);
    ok(tu_dump_eq(&before, &after), "nothing was committed");

    s = open_store(dir, 0);
    cairn__store_inject_write_failure(s, 2, CAIRN_EFULL);
    int rc1 = cairn__store_write(s, 0, inject_txn, &calls);
    int rc2 = cairn__store_write(s, 0, inject_txn, &calls);
    int rc3 = cairn__store_write(s, 0, inject_txn, &calls);
    ok(rc1 == 0 && rc2 == CAIRN_EFULL && rc3 == 0,
       "nth = 2 fails exactly the second write (%d %d %d)", rc1, rc2, rc3);
    cairn__task_rec rec;
    ok(tu_task_get(s, "inj", &rec) == 0 && rec.created_ms == 77, "the other writes committed");
    cairn_store_free(s);
}

/* ------------------------------------------------------------------ corrupt records */

typedef struct corrupt_arg {
    int task_rc, step_rc, audit_rc, each_rc;
    char task_msg[1024], step_msg[1024];
} corrupt_arg;

static int noop_audit(const cairn__audit_rec *r, void *arg)
{
    (void)r, (void)arg;
    return 0;
}

static int noop_step(const char *s, const cairn__step_rec *r, void *arg)
{
    (void)s, (void)r, (void)arg;
    return 0;
}

static int corrupt_read(cairn__txn *t, void *arg)
{
    corrupt_arg *a = arg;
    cairn__task_rec r;
    a->task_rc = cairn__task_get(t, "victim", &r);
    snprintf(a->task_msg, sizeof a->task_msg, "%s", cairn_store_errmsg(cairn__txn_store(t)));
    cairn__step_rec sr;
    a->step_rc = cairn__step_get(t, "victim", "s", 1, &sr);
    snprintf(a->step_msg, sizeof a->step_msg, "%s", cairn_store_errmsg(cairn__txn_store(t)));
    a->each_rc = cairn__step_each(t, "victim", noop_step, NULL);
    a->audit_rc = cairn__audit_each(t, "victim", noop_audit, NULL);
    return 0;
}

static int corrupt_write(cairn__txn *t, void *arg)
{
    cairn__task_rec r;
    fill_task(&r, "victim", CAIRN_PENDING, 5);
    r.state = *(int *)arg ? CAIRN_FAILED : CAIRN_PENDING;
    return cairn__task_put(t, &r);
}

static int seed_victim(cairn__txn *t, void *arg)
{
    (void)arg;
    cairn__task_rec r;
    fill_task(&r, "victim", CAIRN_PENDING, 5);
    cairn__step_rec s = {.state = CAIRN_STEP_DONE, .generation = 1};
    cairn__audit_rec a = {.t_ms = 1, .reason = "x"};
    int rc = cairn__audit_append(t, &r, &a);
    rc = rc ? rc : cairn__task_put(t, &r);
    return rc ? rc : cairn__step_put(t, "victim", "s", &s);
}

static int victim_progress(cairn__txn *t, void *arg)
{
    const void *p;
    size_t n;
    *(int *)arg = cairn__progress_get(t, "victim", "s", 1, &p, &n);
    return 0;
}

static void test_corrupt(void)
{
    char dir[300];
    newdir(dir, "corrupt");
    cairn_store *s = open_store(dir, 0);
    cairn__store_write(s, 0, seed_victim, NULL);
    cairn_store_free(s);
    static const char garbage[] = "\xc1garbage\xff\x00\x13";
    unsigned char skey[16] = "victim\0s\0";
    skey[9] = skey[10] = skey[11] = 0, skey[12] = 1;
    unsigned char akey[15] = "victim\0";
    memset(akey + 7, 0, 8), akey[14] = 1;
    ok(tu_raw_put(dir, "tasks", "victim", 6, garbage, sizeof garbage) == 0 &&
           tu_raw_put(dir, "steps", skey, 13, "\x93\x01\x02", 3) == 0 &&
           tu_raw_put(dir, "audit", akey, 15, "", 0) == 0,
       "plant garbage task, step and audit values with raw LMDB");
    s = open_store(dir, 0);
    corrupt_arg a = {0};
    cairn__store_read(s, corrupt_read, &a);
    ok(a.task_rc == CAIRN_ECORRUPT && strstr(a.task_msg, "'victim'") && strstr(a.task_msg, "task"),
       "garbage task record: CAIRN_ECORRUPT naming the task (\"%s\")", a.task_msg);
    ok(a.step_rc == CAIRN_ECORRUPT && a.each_rc == CAIRN_ECORRUPT,
       "a step record that is an array, not a map: CAIRN_ECORRUPT from get and each");
    ok(a.audit_rc == CAIRN_ECORRUPT, "an empty audit value: CAIRN_ECORRUPT");
    int failed = 0;
    int rc = cairn__store_write(s, 0, corrupt_write, &failed);
    ok(rc == CAIRN_ECORRUPT, "overwriting a corrupt task through task_put: CAIRN_ECORRUPT "
                             "(its old index entries cannot be found)");
    cairn_store_free(s);

    /* declared lengths far beyond the bytes: refused before msgpack-c sizes an allocation by
     * them (a map of 2^32-1 pairs would be a 200 GB request) */
    tu_raw_put(dir, "tasks", "victim", 6, "\xdf\xff\xff\xff\xff", 5);
    tu_raw_put(dir, "steps", skey, 13, "\x81\xa3out\xc4\x05\xdd\x0f\xff\xff\xff", 12);
    tu_raw_put(dir, "progress", skey, 13, "\xdc\xff\xff\x01", 4);
    s = open_store(dir, 0);
    cairn__store_read(s, corrupt_read, &a);
    ok(a.task_rc == CAIRN_ECORRUPT && strstr(a.task_msg, "'victim'"),
       "a 5-byte task record declaring 2^32-1 map pairs: CAIRN_ECORRUPT (\"%s\")", a.task_msg);
    ok(a.step_rc == CAIRN_ECORRUPT && strstr(a.step_msg, "'s'") && strstr(a.step_msg, "output"),
       "a step record whose output declares a 268M-element array: CAIRN_ECORRUPT (\"%s\")",
       a.step_msg);
    cairn_store_free(s);
    int prc = -1;
    s = open_store(dir, 0);
    cairn__store_read(s, victim_progress, &prc);
    ok(prc == CAIRN_ECORRUPT && strstr(cairn_store_errmsg(s), "progress"),
       "a progress record declaring 65535 elements in 3 bytes: CAIRN_ECORRUPT");
    cairn_store_free(s);

    /* a well-formed record with an impossible state */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    msgpack_pack_str_with_body(&pk, "v", 1);
    msgpack_pack_uint32(&pk, 1);
    msgpack_pack_str_with_body(&pk, "id", 2);
    msgpack_pack_str_with_body(&pk, "victim", 6);
    msgpack_pack_str_with_body(&pk, "state", 5);
    msgpack_pack_uint32(&pk, 9);
    tu_raw_put(dir, "tasks", "victim", 6, sb.data, sb.size);
    s = open_store(dir, 0);
    cairn__store_read(s, corrupt_read, &a);
    ok(a.task_rc == CAIRN_ECORRUPT && strstr(a.task_msg, "'victim'") && strstr(a.task_msg, "state"),
       "a task record with state 9: CAIRN_ECORRUPT naming task and field (\"%s\")", a.task_msg);
    cairn_store_free(s);

    /* a record stored under one key but naming another task */
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 3);
    msgpack_pack_str_with_body(&pk, "v", 1);
    msgpack_pack_uint32(&pk, 1);
    msgpack_pack_str_with_body(&pk, "id", 2);
    msgpack_pack_str_with_body(&pk, "", 0);
    msgpack_pack_str_with_body(&pk, "state", 5);
    msgpack_pack_uint32(&pk, 0);
    tu_raw_put(dir, "tasks", "victim", 6, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    s = open_store(dir, 0);
    cairn__store_read(s, corrupt_read, &a);
    ok(a.task_rc == CAIRN_ECORRUPT && strstr(a.task_msg, "'victim'"),
       "a task record whose id field is not its key: CAIRN_ECORRUPT (\"%s\")", a.task_msg);
    cairn_store_free(s);
}

/* ------------------------------------------------------------------ processes */

typedef struct proc_arg {
    char id[32];
    int i;
} proc_arg;

static int proc_step(cairn__txn *t, void *arg)
{
    proc_arg *a = arg;
    cairn__task_rec r;
    int rc = cairn__task_get(t, a->id, &r);
    if (rc == CAIRN_ENOTFOUND) {
        fill_task(&r, a->id, CAIRN_RUNNING, cairn__now_ms() + 60000);
        rc = 0;
    }
    if (rc)
        return rc;
    char step[16];
    snprintf(step, sizeof step, "s%03d", a->i);
    cairn__step_rec s = {.state = CAIRN_STEP_DONE,
                         .generation = 1,
                         .invocations = 1,
                         .output = "\x01",
                         .output_len = 1};
    r.updated_ms = cairn__now_ms();
    r.lease_expires_ms = r.updated_ms + 60000;
    rc = cairn__step_put(t, a->id, step, &s);
    return rc ? rc : cairn__task_put(t, &r);
}

static int count_steps(const char *step, const cairn__step_rec *r, void *arg)
{
    (void)step;
    if (r->state == CAIRN_STEP_DONE)
        ++*(int *)arg;
    return 0;
}

typedef struct proc_check {
    int per[4];
    uint64_t running;
} proc_check;

static int proc_read(cairn__txn *t, void *arg)
{
    proc_check *c = arg;
    for (int k = 0; k < 4; k++) {
        char id[32];
        snprintf(id, sizeof id, "proc-%d", k);
        cairn__step_each(t, id, count_steps, &c->per[k]);
    }
    cairn__store_stats st;
    cairn__store_stats_get(t, &st);
    c->running = st.by_state[CAIRN_RUNNING];
    return 0;
}

/* One process grows a nosync store from 8 to 64 MiB while two others open it, read and close
 * it as fast as they can (what `cairn list` beside a busy runner does). Every map-size change
 * happens under map.lock and never below the file's size, so no process ever has its file
 * shortened under its map (which would be a SIGBUS on its next write). */
static void test_grow_while_opening(void)
{
    char dir[300];
    newdir(dir, "growopen");
    cairn_store *s = open_store(dir, 0);
    cairn_store_free(s);
    fflush(NULL);
    pid_t writer = fork();
    if (writer == 0) {
        cairn_store *w = open_store(dir, 0);
        int bad = !w;
        for (int i = 0; i < 56 && !bad; i++) {
            big_arg b = {.i = i, .size = 1 << 20};
            bad = cairn__store_write(w, 0, big_write, &b) != 0;
        }
        _exit(bad);
    }
    pid_t readers[2];
    for (int k = 0; k < 2; k++) {
        readers[k] = fork();
        if (readers[k] == 0) {
            int bad = 0;
            for (int n = 0; n < 400 && !bad && kill(writer, 0) == 0; n++) {
                cairn_store *r = open_store(dir, 0);
                int one = 1;
                bad = !r || cairn__store_read(r, big_read, &one) != 0;
                cairn_store_free(r);
            }
            _exit(bad);
        }
    }
    int st_w = 0, st_r[2] = {0, 0};
    waitpid(writer, &st_w, 0);
    for (int k = 0; k < 2; k++)
        waitpid(readers[k], &st_r[k], 0);
    s = open_store(dir, 0);
    int n = 56;
    cairn__store_read(s, big_read, &n);
    cairn_store_free(s);
    ok(WIFEXITED(st_w) && WEXITSTATUS(st_w) == 0 && WIFEXITED(st_r[0]) &&
           WEXITSTATUS(st_r[0]) == 0 && WIFEXITED(st_r[1]) && WEXITSTATUS(st_r[1]) == 0 && n == 56,
       "a nosync store grown to 64 MiB while two processes open and close it: nobody dies "
       "(writer status %d, readers %d %d), 56 values read back (%d)",
       st_w, st_r[0], st_r[1], n);
}

static void test_processes(void)
{
    char dir[300];
    newdir(dir, "procs");
    cairn_store *s = open_store(dir, 0);
    cairn_store_free(s);
    pid_t kids[4];
    for (int k = 0; k < 4; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            cairn_store *cs = open_store(dir, 0);
            if (!cs)
                _exit(2);
            proc_arg a;
            snprintf(a.id, sizeof a.id, "proc-%d", k);
            for (a.i = 0; a.i < 200; a.i++)
                if (cairn__store_write(cs, a.i % 50 == 0, proc_step, &a))
                    _exit(3);
            cairn_store_free(cs);
            _exit(0);
        }
    }
    int all_ok = 1;
    for (int k = 0; k < 4; k++) {
        int st = 0;
        waitpid(kids[k], &st, 0);
        all_ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    ok(all_ok, "4 processes each committed 200 steps to their own task at once");
    s = open_store(dir, 0);
    proc_check c = {{0}, 0};
    cairn__store_read(s, proc_read, &c);
    ok(c.per[0] == 200 && c.per[1] == 200 && c.per[2] == 200 && c.per[3] == 200 && c.running == 4,
       "all 800 step records present, 4 index entries (%d %d %d %d, %llu)", c.per[0], c.per[1],
       c.per[2], c.per[3], (unsigned long long)c.running);
    cairn_store_free(s);
}

static int hold_read(cairn__txn *t, void *arg)
{
    (void)t;
    int fd = *(int *)arg;
    if (write(fd, "r", 1) != 1)
        _exit(5);
    for (;;)
        pause();
    return 0;
}

typedef struct churn_arg {
    int i;
} churn_arg;

static int churn(cairn__txn *t, void *arg)
{
    churn_arg *a = arg;
    static char buf[16384];
    memset(buf, 'a' + a->i % 26, sizeof buf);
    return cairn__progress_put(t, "churn", "s", 1, buf, sizeof buf);
}

static void test_stale_reader(void)
{
    char dir[300];
    newdir(dir, "stale");
    cairn_store *s = open_store(dir, 0);
    churn_arg ca = {0};
    cairn__store_write(s, 0, churn, &ca);
    cairn_store_free(s);
    int p[2];
    if (pipe(p) != 0)
        return;
    pid_t kid = fork();
    if (kid == 0) {
        close(p[0]);
        cairn_store *cs = open_store(dir, 0);
        if (cs)
            cairn__store_read(cs, hold_read, &p[1]);
        _exit(1);
    }
    close(p[1]);
    char c = 0;
    ssize_t got = read(p[0], &c, 1);
    close(p[0]);
    ok(got == 1 && c == 'r', "a child holds a read transaction");
    kill(kid, SIGKILL);
    int st;
    waitpid(kid, &st, 0);
    ok(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "and is SIGKILLed inside it");

    s = open_store(dir, 0);
    cairn__store_stats st0, st1;
    cairn__store_read(s, stats_txn, &st0);
    int fails = 0;
    for (ca.i = 0; ca.i < 2000; ca.i++)
        fails += cairn__store_write(s, 0, churn, &ca) != 0;
    cairn__store_read(s, stats_txn, &st1);
    ok(fails == 0, "2000 write transactions after the kill all commit");
    /* a stale reader would pin its snapshot and stop page reuse: 2000 x 16 KiB = 31 MiB */
    ok(st1.map_used < st0.map_used + (4u << 20),
       "pages are reused: the stale reader slot was cleared (used %llu -> %llu bytes)",
       (unsigned long long)st0.map_used, (unsigned long long)st1.map_used);
    cairn_store_free(s);
    s = open_store(dir, 0);
    ok(s != NULL, "the store reopens");
    cairn_store_free(s);

    /* the same while this process keeps the store open across the kill (a long-lived worker):
     * the slot is not cleared by an open, so the store must notice when the map fills */
    s = open_store(dir, 0);
    if (pipe(p) != 0)
        return;
    fflush(NULL);
    kid = fork();
    if (kid == 0) {
        close(p[0]);
        cairn_store *cs = open_store(dir, 0);
        if (cs)
            cairn__store_read(cs, hold_read, &p[1]);
        _exit(1);
    }
    close(p[1]);
    got = read(p[0], &c, 1);
    close(p[0]);
    kill(kid, SIGKILL);
    waitpid(kid, &st, 0);
    cairn__store_read(s, stats_txn, &st0);
    fails = 0;
    for (ca.i = 0; ca.i < 2000; ca.i++)
        fails += cairn__store_write(s, 0, churn, &ca) != 0;
    cairn__store_read(s, stats_txn, &st1);
    ok(got == 1 && fails == 0 && st1.map_size <= 16u << 20,
       "with the store open across the kill, 2000 writes (31 MiB of churn) stay within a 16 MiB "
       "map: the stale slot is cleared when the map fills (map %llu bytes, used %llu)",
       (unsigned long long)st1.map_size, (unsigned long long)st1.map_used);
    cairn_store_free(s);
}

int main(void)
{
    tu_tmpdir(root, "store");
    test_open();
    test_schema();
    char dir[300];
    newdir(dir, "records");
    cairn_store *s = open_store(dir, 0);
    test_task_record(s);
    test_step_records(s);
    test_misc_records(s);
    cairn_store_free(s);
    newdir(dir, "idem");
    test_idem(dir);
    newdir(dir, "index");
    test_indexes(dir);
    newdir(dir, "batches");
    test_index_batches(dir);
    test_map_growth();
    test_map_limit();
    test_durability();
    test_inject();
    test_corrupt();
    test_processes();
    test_grow_while_opening();
    test_stale_reader();
    if (!getenv("CAIRN_KEEP_TMP"))
        tu_rmtree(root);
    return tap_done();
}
