/* test_records.c - the records of schema 4 (checkpoint/records.c) and the upgrade from schema 3.
 *
 * Round trips of every record kind through a real store, extreme values included; malformed
 * bytes planted with raw LMDB under a valid checksum, so that they reach the decoder: each is
 * CAIRN_ECORRUPT naming its record, never a crash (every truncation of a real task record, every
 * byte of it replaced). And a store of schema 3, its records written here in schema 3's form (maps
 * keyed by field name, hashes as hex), opened by a writer: every record is converted, and every
 * task, step, audit record and ID reservation reads back as it was.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "checkpoint/store.h"
#include "tests/store/rawlmdb.h"
#include "tests/tap.h"

static char root[256];

static cairn_store *open_store(const char *dir) { return tu_store_open(dir, CAIRN_NOSYNC, 0); }

#define N_TASKS 5

static const char HASH_A[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
static const char HASH_B[] = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

/* ------------------------------------------------------------------ fixtures */

/* Task i of the fixture: each differs in what it exercises (empty fields, a lease, an error, a
 * hash that is not hex, times far from the creation time). */
static void fixture_task(cairn__task_rec *r, int i)
{
    memset(r, 0, sizeof *r);
    snprintf(r->id, sizeof r->id, "task-%d", i);
    snprintf(r->graph, sizeof r->graph, "ledger");
    snprintf(r->fingerprint, sizeof r->fingerprint, "%s", i == 2 ? "not hex at all" : HASH_A);
    snprintf(r->payload_hash, sizeof r->payload_hash, "%s", i == 3 ? "" : HASH_B);
    snprintf(r->steps_pin, sizeof r->steps_pin, "validate@1,charge@2,notify@1");
    static const cairn_state states[N_TASKS] = {CAIRN_PENDING, CAIRN_RUNNING, CAIRN_FAILED,
                                                CAIRN_IN_DOUBT, CAIRN_DEAD};
    r->state = (uint8_t)states[i];
    r->attempt = (uint32_t)i;
    r->generation = (uint32_t)(i + 1);
    r->audit_seq = (uint64_t)i * 3;
    r->created_ms = 1764000000000 + i;
    r->updated_ms = r->created_ms + 1500;
    if (i == 1) { /* running under a lease, of a tenant */
        snprintf(r->tenant, sizeof r->tenant, "acme");
        snprintf(r->owner.host, sizeof r->owner.host, "worker-7.example");
        r->owner.pid = 4242;
        r->owner.start = 987654321;
        r->lease_token = UINT64_MAX;
        r->lease_expires_ms = r->created_ms + 60000;
    }
    if (i == 2) { /* failed, due again */
        snprintf(r->error, sizeof r->error, "charge: \"card declined\" (%d)", 402);
        snprintf(r->error_step, sizeof r->error_step, "charge");
        r->next_retry_ms = r->created_ms + 3600000;
    }
    if (i == 4) { /* finished, a tombstone, times at the ends of their range */
        r->tombstone = 1;
        r->created_ms = INT64_MIN + 5;
        r->updated_ms = INT64_MAX;
        r->finished_ms = -1;
    }
}

static int task_eq(const cairn__task_rec *a, const cairn__task_rec *b, int with_txn)
{
    return !strcmp(a->id, b->id) && !strcmp(a->graph, b->graph) &&
           !strcmp(a->fingerprint, b->fingerprint) && !strcmp(a->payload_hash, b->payload_hash) &&
           !strcmp(a->steps_pin, b->steps_pin) && !strcmp(a->tenant, b->tenant) &&
           !strcmp(a->error, b->error) && !strcmp(a->error_step, b->error_step) &&
           a->state == b->state && a->tombstone == b->tombstone && a->attempt == b->attempt &&
           a->generation == b->generation && a->audit_seq == b->audit_seq &&
           a->created_ms == b->created_ms && a->updated_ms == b->updated_ms &&
           a->finished_ms == b->finished_ms && a->next_retry_ms == b->next_retry_ms &&
           !strcmp(a->owner.host, b->owner.host) && a->owner.pid == b->owner.pid &&
           a->owner.start == b->owner.start && a->lease_token == b->lease_token &&
           a->lease_expires_ms == b->lease_expires_ms && (!with_txn || a->txn == b->txn);
}

static const unsigned char OUT[] = {0x82, 0xa2, 'o', 'k', 0xc3, 0xa1, 'n', 0x2a}; /* {ok:1,n:42} */

/* Step j of a task: generations 1 and 3 of "charge", with and without output. */
static void fixture_step(cairn__step_rec *s, int j)
{
    memset(s, 0, sizeof *s);
    s->state = (uint8_t)(j == 0 ? CAIRN_STEP_DONE : CAIRN_STEP_FAILED);
    s->resolved = (uint8_t)(j == 1);
    s->generation = j == 0 ? 1 : 3;
    s->invocations = (uint32_t)(j + 2);
    s->updated_ms = 1764000000123 + j;
    s->intent_ms = j ? 1764000000100 : 0;
    snprintf(s->error, sizeof s->error, "%s", j ? "timeout after 30 s" : "");
    if (j == 0)
        s->output = OUT, s->output_len = sizeof OUT;
}

static int step_eq(const cairn__step_rec *a, const cairn__step_rec *b)
{
    return a->state == b->state && a->resolved == b->resolved && a->generation == b->generation &&
           a->invocations == b->invocations && a->updated_ms == b->updated_ms &&
           a->intent_ms == b->intent_ms && !strcmp(a->error, b->error) &&
           a->output_len == b->output_len && !a->output == !b->output &&
           (!a->output || !memcmp(a->output, b->output, a->output_len));
}

static void fixture_audit(cairn__audit_rec *a, int k)
{
    memset(a, 0, sizeof *a);
    a->t_ms = 1764000000000 + 10 * k;
    a->from = (uint8_t)k;
    a->to = (uint8_t)(k + 1);
    a->attempt = (uint32_t)k;
    a->generation = 1;
    snprintf(a->step, sizeof a->step, "%s", k == 1 ? "charge" : "");
    snprintf(a->reason, sizeof a->reason, "reason %d: lease taken over from pid 17", k);
}

static int audit_eq(const cairn__audit_rec *a, const cairn__audit_rec *b)
{
    return a->t_ms == b->t_ms && a->from == b->from && a->to == b->to && a->attempt == b->attempt &&
           a->generation == b->generation && !strcmp(a->step, b->step) &&
           !strcmp(a->reason, b->reason);
}
#define N_AUDIT 3

static int populate_txn(cairn__txn *t, void *arg)
{
    (void)arg;
    for (int i = 0; i < N_TASKS; i++) {
        cairn__task_rec r;
        fixture_task(&r, i);
        char existing[65];
        int rc = cairn__task_put(t, &r);
        if (!rc)
            rc = cairn__idem_reserve(t, r.id, i == 2 ? HASH_B : HASH_A, existing);
        for (int j = 0; j < 2 && !rc; j++) {
            cairn__step_rec s;
            fixture_step(&s, j);
            rc = cairn__step_put(t, r.id, "charge", &s);
        }
        for (int k = 0; k < N_AUDIT && !rc; k++) {
            cairn__audit_rec a;
            fixture_audit(&a, k);
            rc = cairn__audit_append(t, &r, &a);
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* ------------------------------------------------------------------ reading it all back */

typedef struct readback {
    cairn__task_rec task[N_TASKS];
    int task_rc[N_TASKS];
    int tasks_ok, steps_ok, audit_ok, idem_ok, gen_ok;
} readback;

typedef struct each_arg {
    int n, bad;
} each_arg;

static int step_cb(const char *step, const cairn__step_rec *rec, void *arg)
{
    each_arg *e = arg;
    cairn__step_rec want;
    fixture_step(&want, e->n);
    e->bad |= e->n >= 2 || strcmp(step, "charge") != 0 || !step_eq(rec, &want);
    e->n++;
    return 0;
}

static int audit_cb(const cairn__audit_rec *rec, void *arg)
{
    each_arg *e = arg;
    cairn__audit_rec want;
    fixture_audit(&want, e->n);
    e->bad |= e->n >= N_AUDIT || !audit_eq(rec, &want);
    e->n++;
    return 0;
}

static int readback_txn(cairn__txn *t, void *arg)
{
    readback *b = arg;
    b->tasks_ok = b->steps_ok = b->audit_ok = b->idem_ok = b->gen_ok = 1;
    for (int i = 0; i < N_TASKS; i++) {
        cairn__task_rec want;
        fixture_task(&want, i);
        b->task_rc[i] = cairn__task_get(t, want.id, &b->task[i]);
        b->tasks_ok &= b->task_rc[i] == 0 && task_eq(&b->task[i], &want, 0);
        each_arg e = {0};
        int rc = cairn__step_each(t, want.id, step_cb, &e);
        b->steps_ok &= rc == 0 && e.n == 2 && !e.bad;
        /* the record applying in a generation: the latest at or before it */
        cairn__step_rec s, s1, s3;
        fixture_step(&s1, 0), fixture_step(&s3, 1);
        b->gen_ok &= cairn__step_get(t, want.id, "charge", 1, &s) == 0 && step_eq(&s, &s1);
        b->gen_ok &= cairn__step_get(t, want.id, "charge", 2, &s) == 0 && step_eq(&s, &s1);
        b->gen_ok &= cairn__step_get(t, want.id, "charge", 3, &s) == 0 && step_eq(&s, &s3);
        b->gen_ok &= cairn__step_get(t, want.id, "charge", 9, &s) == 0 && step_eq(&s, &s3);
        b->gen_ok &= cairn__step_get(t, want.id, "charge", 0, &s) == CAIRN_ENOTFOUND;
        b->gen_ok &= cairn__step_get(t, want.id, "notify", 3, &s) == CAIRN_ENOTFOUND;
        e = (each_arg){0};
        rc = cairn__audit_each(t, want.id, audit_cb, &e);
        b->audit_ok &= rc == 0 && e.n == N_AUDIT && !e.bad;
    }
    return 0;
}

/* The ID reservations in a write (reserving again is how they are read). */
static int idem_txn(cairn__txn *t, void *arg)
{
    readback *b = arg;
    for (int i = 0; i < N_TASKS; i++) {
        char id[32], existing[65] = "";
        snprintf(id, sizeof id, "task-%d", i);
        const char *mine = i == 2 ? HASH_B : HASH_A, *other = i == 2 ? HASH_A : HASH_B;
        b->idem_ok &= cairn__idem_reserve(t, id, mine, existing) == 0;
        b->idem_ok &= cairn__idem_reserve(t, id, other, existing) == CAIRN_ECONFLICT &&
                      strcmp(existing, mine) == 0;
    }
    return 0;
}

static void read_all(cairn_store *s, readback *b)
{
    memset(b, 0, sizeof *b);
    if (cairn__store_read(s, readback_txn, b) || cairn__store_write(s, 0, idem_txn, b))
        b->tasks_ok = 0;
}

/* ------------------------------------------------------------------ round trips */

static void test_round_trip(void)
{
    char dir[300];
    tu_subdir(dir, root, "trip");
    cairn_store *s = open_store(dir);
    ok(s && cairn__store_write(s, 0, populate_txn, NULL) == 0, "write the fixture's records");
    readback b;
    read_all(s, &b);
    ok(b.tasks_ok, "every task record reads back as written (empty fields, a lease, an error, a "
                   "hash that is not hex, times at the ends of int64)");
    ok(b.steps_ok && b.gen_ok,
       "step records read back, and a generation finds the latest record at or before it");
    ok(b.audit_ok, "audit records read back in order");
    ok(b.idem_ok, "an ID reservation holds its hash: the same is 0, another a conflict");
    cairn_store_free(s);

    unsigned char raw[600];
    long n = tu_raw_get(dir, "tasks", "task-1", 6, raw, sizeof raw);
    ok(n > 3 && raw[0] == 0xdc && raw[1] == 0 && raw[2] == 22,
       "a task record is an array of 22 fields (%ld bytes)", n);
    n = tu_raw_get(dir, "idem", "task-0", 6, raw, sizeof raw);
    ok(n == 32, "an ID reservation keeps the hash's 32 bytes (%ld)", n);
    n = tu_raw_get(dir, "idem", "task-2", 6, raw, sizeof raw);
    ok(n == 32, "and a non-hex fingerprint does not matter to it (%ld)", n);
}

/* ------------------------------------------------------------------ malformed records */

typedef struct probe {
    const char *task;
    int task_rc, step_rc, audit_rc;
    char msg[3][1024];
} probe;

static int audit_nop(const cairn__audit_rec *rec, void *arg)
{
    (void)rec, (void)arg;
    return 0;
}

static int probe_txn(cairn__txn *t, void *arg)
{
    probe *p = arg;
    cairn_store *s = cairn__txn_store(t);
    cairn__task_rec r;
    p->task_rc = cairn__task_get(t, p->task, &r);
    snprintf(p->msg[0], sizeof p->msg[0], "%s", cairn_store_errmsg(s));
    cairn__step_rec st;
    p->step_rc = cairn__step_get(t, p->task, "charge", 1, &st);
    snprintf(p->msg[1], sizeof p->msg[1], "%s", cairn_store_errmsg(s));
    p->audit_rc = cairn__audit_each(t, p->task, audit_nop, NULL);
    snprintf(p->msg[2], sizeof p->msg[2], "%s", cairn_store_errmsg(s));
    return 0;
}

static probe look(const char *dir, const char *task)
{
    probe p = {.task = task, .task_rc = -1, .step_rc = -1, .audit_rc = -1};
    cairn_store *s = open_store(dir);
    if (s)
        cairn__store_read(s, probe_txn, &p);
    cairn_store_free(s);
    return p;
}

static void step_key(char *k, size_t *n, const char *task, const char *step, uint32_t gen)
{
    size_t a = strlen(task), b = strlen(step);
    memcpy(k, task, a + 1);
    memcpy(k + a + 1, step, b + 1);
    unsigned char *g = (unsigned char *)k + a + b + 2;
    g[0] = (unsigned char)(gen >> 24), g[1] = (unsigned char)(gen >> 16);
    g[2] = (unsigned char)(gen >> 8), g[3] = (unsigned char)gen;
    *n = a + b + 6;
}

static void test_malformed(void)
{
    char dir[300];
    tu_subdir(dir, root, "bad");
    cairn_store *s = open_store(dir);
    ok(s && cairn__store_write(s, 0, populate_txn, NULL) == 0, "plant: the fixture");
    cairn_store_free(s);
    unsigned char good[600];
    long gn = tu_raw_get(dir, "tasks", "task-1", 6, good, sizeof good);

    /* hand-made task records */
    struct {
        const char *what;
        unsigned char b[48];
        size_t n;
    } cases[] = {
        {"an empty value", {0}, 0},
        {"an empty array", {0x90}, 1},
        {"an array of 22 fields and no field", {0xdc, 0, 22}, 3},
        {"an array claiming 65535 fields", {0xdc, 0xff, 0xff, 0xa1, 'g'}, 5},
        {"a string longer than the record", {0xdc, 0, 22, 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'}, 9},
        {"an integer where the graph name goes", {0xdc, 0, 22, 0x05, 0xc4, 0x01, 0x00}, 7},
        {"a hash of 31 bytes", {0xdc, 0, 22, 0xa1, 'g', 0xc4, 31, 1, 2, 3}, 10},
        {"the byte msgpack never uses", {0xc1}, 1},
        {"a bare integer", {0x2a}, 1},
    };
    int all = 1;
    char first[1024] = "";
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tu_raw_put(dir, "tasks", "task-1", 6, cases[i].b, cases[i].n);
        probe p = look(dir, "task-1");
        int good_case = p.task_rc == CAIRN_ECORRUPT && strstr(p.msg[0], "'task-1'");
        if (!good_case)
            diag("%s: %s (\"%s\")", cases[i].what, cairn_errname(p.task_rc), p.msg[0]);
        if (!first[0])
            snprintf(first, sizeof first, "%s", p.msg[0]);
        all &= good_case;
    }
    ok(all, "each malformed task record is CAIRN_ECORRUPT naming the task (\"%s\")", first);

    /* every truncation of a real record, and the record with a trailing byte */
    int trunc_ok = gn > 0;
    for (long n = 0; n < gn && trunc_ok; n++) {
        tu_raw_put(dir, "tasks", "task-1", 6, good, (size_t)n);
        probe p = look(dir, "task-1");
        trunc_ok = p.task_rc == CAIRN_ECORRUPT;
        if (!trunc_ok)
            diag("cut to %ld bytes: %s", n, cairn_errname(p.task_rc));
    }
    ok(trunc_ok, "every truncation of a %ld-byte task record is CAIRN_ECORRUPT", gn);
    good[gn] = 0xc0;
    tu_raw_put(dir, "tasks", "task-1", 6, good, (size_t)gn + 1);
    ok(look(dir, "task-1").task_rc == CAIRN_ECORRUPT,
       "a task record with a byte after its last field is CAIRN_ECORRUPT");

    /* every byte replaced (a valid checksum over it): decoded or refused, never a crash */
    int never = 1, refused = 0, read = 0;
    for (long at = 0; at < gn; at++) {
        unsigned char b[600];
        memcpy(b, good, (size_t)gn);
        b[at] = (unsigned char)(at * 37 + 0x5b);
        if (b[at] == good[at])
            b[at] ^= 0x80;
        tu_raw_put(dir, "tasks", "task-1", 6, b, (size_t)gn);
        probe p = look(dir, "task-1");
        never &= p.task_rc == 0 || p.task_rc == CAIRN_ECORRUPT;
        refused += p.task_rc == CAIRN_ECORRUPT, read += p.task_rc == 0;
    }
    ok(never && refused > 0,
       "each byte of the record replaced: read or CAIRN_ECORRUPT, never a "
       "crash (%d read, %d refused)",
       read, refused);
    tu_raw_put(dir, "tasks", "task-1", 6, good, (size_t)gn);
    ok(look(dir, "task-1").task_rc == 0, "the record put back reads again");

    /* steps and audit records */
    char k[64];
    size_t kn;
    step_key(k, &kn, "task-1", "charge", 1);
    unsigned char sb[64];
    long sn = tu_raw_get(dir, "steps", k, kn, sb, sizeof sb);
    tu_raw_put(dir, "steps", k, kn, sb, sn > 2 ? (size_t)sn - 2 : 0);
    probe p = look(dir, "task-1");
    ok(p.step_rc == CAIRN_ECORRUPT && strstr(p.msg[1], "'charge'"),
       "a truncated step record is CAIRN_ECORRUPT naming the step (\"%s\")", p.msg[1]);
    const unsigned char bad_out[] = {0x97, 1, 0, 1, 0x05, 0, 0xa0, 0xc4, 3, 0xdf, 0xff, 0xff};
    tu_raw_put(dir, "steps", k, kn, bad_out, sizeof bad_out);
    p = look(dir, "task-1");
    ok(p.step_rc == CAIRN_ECORRUPT && strstr(p.msg[1], "output"),
       "a step output whose msgpack claims more than it holds is CAIRN_ECORRUPT (\"%s\")",
       p.msg[1]);
    const unsigned char wrong_n[] = {0x96, 1, 0, 1, 0x05, 0, 0xa0};
    tu_raw_put(dir, "steps", k, kn, wrong_n, sizeof wrong_n);
    ok(look(dir, "task-1").step_rc == CAIRN_ECORRUPT,
       "a step record of 6 fields, not 7, is CAIRN_ECORRUPT");
    char ak[32] = "task-1";
    memset(ak + 7, 0, 8);
    ak[14] = 5; /* task-1's second audit record (its seq starts after the fixture's 3) */
    const unsigned char cut[] = {0x97, 0xcf, 1, 2};
    tu_raw_put(dir, "audit", ak, 15, cut, sizeof cut);
    p = look(dir, "task-1");
    ok(p.audit_rc == CAIRN_ECORRUPT && strstr(p.msg[2], "'task-1'"),
       "a truncated audit record is CAIRN_ECORRUPT naming the task (\"%s\")", p.msg[2]);
}

/* ------------------------------------------------------------------ schema 3 */

/* Schema 3's encoders, as cairn wrote them before schema 4 (maps keyed by field name, every
 * record with its version, hashes as hex text). */
static void mk(msgpack_packer *pk, const char *k) { msgpack_pack_str_with_body(pk, k, strlen(k)); }
static void ms(msgpack_packer *pk, const char *k, const char *v)
{
    mk(pk, k), msgpack_pack_str_with_body(pk, v, strlen(v));
}
static void mi(msgpack_packer *pk, const char *k, int64_t v)
{
    mk(pk, k), msgpack_pack_int64(pk, v);
}
static void mu(msgpack_packer *pk, const char *k, uint64_t v)
{
    mk(pk, k), msgpack_pack_uint64(pk, v);
}

static void map_begin(msgpack_sbuffer *sb, msgpack_packer *pk, uint32_t pairs)
{
    msgpack_sbuffer_clear(sb);
    msgpack_packer_init(pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(pk, pairs);
}

static void task3(msgpack_sbuffer *sb, const cairn__task_rec *r)
{
    msgpack_packer pk;
    map_begin(sb, &pk, 24);
    mu(&pk, "v", 3), ms(&pk, "id", r->id), ms(&pk, "graph", r->graph);
    ms(&pk, "fp", r->fingerprint), ms(&pk, "hash", r->payload_hash);
    ms(&pk, "pin", r->steps_pin), ms(&pk, "tenant", r->tenant), ms(&pk, "err", r->error);
    ms(&pk, "err_step", r->error_step), mu(&pk, "state", r->state), mu(&pk, "tomb", r->tombstone);
    mu(&pk, "attempt", r->attempt), mu(&pk, "gen", r->generation), mu(&pk, "aseq", r->audit_seq);
    mi(&pk, "created", r->created_ms), mi(&pk, "updated", r->updated_ms);
    mi(&pk, "finished", r->finished_ms), mi(&pk, "next_retry", r->next_retry_ms);
    ms(&pk, "lhost", r->owner.host), mi(&pk, "lpid", r->owner.pid);
    mu(&pk, "lstart", r->owner.start), mu(&pk, "ltoken", r->lease_token);
    mi(&pk, "lexp", r->lease_expires_ms), mu(&pk, "txn", r->txn);
}

static void step3(msgpack_sbuffer *sb, const cairn__step_rec *r)
{
    msgpack_packer pk;
    map_begin(sb, &pk, 9);
    mu(&pk, "v", 3), mu(&pk, "state", r->state), mu(&pk, "resolved", r->resolved);
    mu(&pk, "gen", r->generation), mu(&pk, "inv", r->invocations);
    mi(&pk, "updated", r->updated_ms), mi(&pk, "intent", r->intent_ms), ms(&pk, "err", r->error);
    mk(&pk, "out");
    if (r->output)
        msgpack_pack_bin_with_body(&pk, r->output, r->output_len);
    else
        msgpack_pack_nil(&pk);
}

static void audit3(msgpack_sbuffer *sb, const cairn__audit_rec *a)
{
    msgpack_packer pk;
    map_begin(sb, &pk, 8);
    mu(&pk, "v", 3), mi(&pk, "t", a->t_ms), mu(&pk, "from", a->from), mu(&pk, "to", a->to);
    mu(&pk, "attempt", a->attempt), mu(&pk, "gen", a->generation), ms(&pk, "step", a->step);
    ms(&pk, "reason", a->reason);
}

/* Rewrites the fixture's records of dir in schema 3's form and marks the store schema 3; the
 * tasks keep the transaction ids they were written in (txn[]). */
static int downgrade_to_3(const char *dir, const uint64_t txn[N_TASKS])
{
    /* schema 3 kept a task's steps and audit in databases of their own, as schema 5 did */
    int rc = tu_raw_to_schema5(dir);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    for (int i = 0; i < N_TASKS && !rc; i++) {
        cairn__task_rec r;
        fixture_task(&r, i);
        r.txn = txn[i];
        task3(&sb, &r);
        rc = tu_raw_put(dir, "tasks", r.id, strlen(r.id), sb.data, sb.size);
        const char *h = i == 2 ? HASH_B : HASH_A;
        if (!rc)
            rc = tu_raw_put(dir, "idem", r.id, strlen(r.id), h, 64);
        for (int j = 0; j < 2 && !rc; j++) {
            cairn__step_rec s;
            fixture_step(&s, j);
            char k[64];
            size_t kn;
            step_key(k, &kn, r.id, "charge", s.generation);
            step3(&sb, &s);
            rc = tu_raw_put(dir, "steps", k, kn, sb.data, sb.size);
        }
        for (int k = 0; k < N_AUDIT && !rc; k++) {
            cairn__audit_rec a;
            fixture_audit(&a, k);
            char ak[64];
            size_t an = strlen(r.id) + 1;
            memcpy(ak, r.id, an);
            for (int b = 0; b < 8; b++)
                ak[an + b] = (char)(b == 7 ? i * 3 + k + 1 : 0); /* as populate_txn's appends */
            audit3(&sb, &a);
            rc = tu_raw_put(dir, "audit", ak, an + 8, sb.data, sb.size);
        }
    }
    msgpack_sbuffer_destroy(&sb);
    uint32_t v = 3;
    return rc ? rc : tu_raw_put(dir, "meta", "schema", 6, &v, sizeof v);
}

static int count_problem(const cairn_check_row *row, void *arg)
{
    diag("check: %s: %s", row->database, row->message);
    ++*(int *)arg;
    return 0;
}

static void test_upgrade(void)
{
    char dir[300];
    tu_subdir(dir, root, "up");
    cairn_store *s = open_store(dir);
    ok(s && cairn__store_write(s, 0, populate_txn, NULL) == 0, "plant: the fixture, in schema 4");
    readback before;
    memset(&before, 0, sizeof before);
    cairn__store_read(s, readback_txn, &before);
    cairn_store_free(s);
    uint64_t txn[N_TASKS];
    for (int i = 0; i < N_TASKS; i++)
        txn[i] = before.task[i].txn;

    ok(downgrade_to_3(dir, txn) == 0, "plant: every record rewritten as schema 3 wrote it");
    unsigned char raw[600];
    uint32_t v = 0;
    long tn = tu_raw_get(dir, "tasks", "task-1", 6, raw, sizeof raw);
    long in = tu_raw_get(dir, "idem", "task-1", 6, raw + 300, 100);
    ok(tu_raw_get(dir, "meta", "schema", 6, &v, sizeof v) == 4 && v == 3 && tn > 0 &&
           raw[0] == 0xde && in == 64,
       "the store is schema 3: a task record is a map (0x%02x), a reservation 64 hex digits",
       raw[0]);
    /* a schema-3 record that does not decode: left as it is, reported where it is read */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    cairn__task_rec bad;
    fixture_task(&bad, 0);
    snprintf(bad.id, sizeof bad.id, "broken");
    bad.state = 99;
    task3(&sb, &bad);
    tu_raw_put(dir, "tasks", "broken", 6, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);

    s = open_store(dir);
    ok(s != NULL, "a writer opens it (%s)", s ? "upgraded" : "refused");
    v = 0;
    tn = tu_raw_get(dir, "tasks", "task-1", 6, raw, sizeof raw);
    in = tu_raw_get(dir, "idem", "task-1", 6, raw + 300, 100);
    ok(tu_raw_get(dir, "meta", "schema", 6, &v, sizeof v) == 4 && v == CAIRN__SCHEMA &&
           raw[0] == 0xdc && in == 32,
       "now schema %u: the task record an array (0x%02x), the reservation 32 bytes (%ld)",
       CAIRN__SCHEMA, raw[0], in);
    readback after;
    if (s)
        read_all(s, &after);
    int same = s != NULL;
    for (int i = 0; i < N_TASKS && s; i++)
        same &= after.task_rc[i] == 0 && task_eq(&after.task[i], &before.task[i], 1);
    ok(same && after.tasks_ok, "every task reads back as it was, its transaction id too");
    ok(s && after.steps_ok && after.gen_ok, "every step record reads back as it was");
    ok(s && after.audit_ok, "every audit record reads back as it was");
    ok(s && after.idem_ok, "every ID reservation holds its hash");
    cairn__task_rec r;
    int brc = s ? tu_task_get(s, "broken", &r) : -1;
    ok(brc == CAIRN_ECORRUPT, "the record that did not decode is still refused: %s (\"%s\")",
       cairn_errname(brc), s ? cairn_store_errmsg(s) : "");
    int problems = 0;
    uint64_t records = 0;
    int crc = s ? cairn_store_check(s, count_problem, &problems, &records) : -1;
    ok(crc == CAIRN_ECORRUPT && problems == 1,
       "cairn check finds that one record and nothing else (%d problems in %llu records)", problems,
       (unsigned long long)records);
    cairn_store_free(s);
}

int main(void)
{
    tu_tmpdir(root, "records");
    test_round_trip();
    test_malformed();
    test_upgrade();
    if (!getenv("CAIRN_KEEP_TMP"))
        tu_rmtree(root);
    return tap_done();
}
