/* fuzz_store.c - arbitrary bytes as stored records must never crash the engine.
 *
 * One input is planted with raw LMDB as the value of a task record (tasks["fz"]), a step record
 * (steps["fz\0a\0" gen 1]), an audit record (audit["fz\0" seq 1]) and a progress record, with
 * index entries pointing at the task, into a store whose other records were wiped. The records
 * are named as schema 5 kept them; in a store of schema 6 they are planted in tasks under the
 * keys with a kind byte after the task's NUL (tests/store/rawlmdb.h's tu_raw_where). Then every
 * reader is run over it: cairn__task_get, cairn__step_get/_each, cairn__audit_each,
 * cairn__progress_get, stats, cairn_task_load + cairn_task_json, and a runner resume/retry/gc
 * that goes on to decode the input and the dependency outputs the records carry. The property:
 * no crash, and the record readers answer only 0, CAIRN_ECORRUPT or CAIRN_ESCHEMA (ECORRUPT
 * with a message naming the task).
 *
 * Built two ways from this one file:
 *   - with -DCAIRN_LIBFUZZER by scripts/fuzz-store.sh (clang -fsanitize=fuzzer,address): only
 *     LLVMFuzzerTestOneInput(); a violated property abort()s for libFuzzer to report;
 *   - otherwise (meson suite 'fuzz'): a main() that runs for N seconds (default 2) over a
 *     deterministic stream of random bytes, valid records taken from a real run, byte-level
 *     mutations of them, and generated msgpack maps with the record's field names and values of
 *     every type, and reports through TAP. `fuzz_store --seeds DIR` writes the valid records as
 *     a seed corpus for the libFuzzer binary.
 */
#include <errno.h>
#include <lmdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <msgpack.h>

#include "checkpoint/store.h"
#include "tests/store/rawlmdb.h"

#define TASK "fz"

static char g_dir[300];
static cairn_graph *g_graph;
static int g_ready;

/* ------------------------------------------------------------------ the graph */

static cairn_step_result step_a(cairn_ctx *c, void *user)
{
    (void)user;
    const msgpack_object *in = cairn_ctx_input(c);
    msgpack_pack_uint32(cairn_ctx_packer(c), in ? (uint32_t)in->type : 99);
    return CAIRN_STEP_OK;
}

static cairn_step_result step_b(cairn_ctx *c, void *user)
{
    (void)user;
    const msgpack_object *a = cairn_ctx_dep(c, "a"), *p = cairn_ctx_progress(c);
    msgpack_packer *pk = cairn_ctx_packer(c);
    msgpack_pack_array(pk, 2);
    msgpack_pack_object(pk, a ? *a : (msgpack_object){.type = MSGPACK_OBJECT_NIL});
    msgpack_pack_object(pk, p ? *p : (msgpack_object){.type = MSGPACK_OBJECT_NIL});
    return CAIRN_STEP_OK;
}

static void setup(void)
{
    if (g_ready)
        return;
    const char *base = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/cairn-fuzz-store-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        abort();
    }
    cairn_store *s = cairn_store_new();
    if (cairn_store_open(s, g_dir)) {
        fprintf(stderr, "fuzz_store: cannot create a store in %s\n", g_dir);
        abort();
    }
    cairn_store_free(s);
    g_graph = cairn_graph_new("g", 1);
    cairn_graph_add_step(g_graph, "a", step_a, NULL);
    cairn_graph_add_step(g_graph, "b", step_b, "a");
    if (cairn_graph_validate(g_graph))
        abort();
    g_ready = 1;
}

/* ------------------------------------------------------------------ planting */

static void be(unsigned char *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
}

/* Wipes every database but meta and plants `data` as the records of task TASK. */
static int plant(const uint8_t *data, size_t size)
{
    MDB_env *env = tu_raw_open(g_dir);
    MDB_txn *txn;
    if (!env)
        return -1;
    int rc = mdb_txn_begin(env, NULL, 0, &txn);
    const uint32_t schema = rc ? 0 : tu_raw_schema_txn(txn);
    for (size_t i = 1; !rc && i < TU_NDBS; i++) {
        MDB_dbi dbi;
        rc = mdb_dbi_open(txn, tu_dbs[i], 0, &dbi);
        if (rc == MDB_NOTFOUND)
            rc = 0; /* a database schema 6 retired */
        else if (!rc)
            rc = mdb_drop(txn, dbi, 0);
    }
    unsigned char skey[16] = TASK "\0a\0", akey[16] = TASK "\0", due[16] = {0}, fin[16];
    be(skey + 5, 1, 4);
    be(akey + 3, 1, 8);
    be(due + 1, 0, 8), memcpy(due + 9, TASK, 2);
    be(fin, 0, 8), memcpy(fin + 8, TASK, 2);
    due[0] = (unsigned char)(size ? data[0] % CAIRN_STATE_COUNT : 0);
    struct {
        const char *db; /* and the key, as schema 5 kept them */
        const void *k;
        size_t klen;
        const void *v;
        size_t vlen;
    } puts[] = {
        {"tasks", TASK, 2, data, size},
        {"steps", skey, 9, data, size},
        {"audit", akey, 11, data, size},
        {"progress", skey, 9, data, size},
        {"due", due, 11, "", 0},
        {"finished", fin, 10, "", 0},
        {"idem", TASK, 2, "0000000000000000000000000000000000000000000000000000000000000000", 64},
    };
    for (size_t i = 0; !rc && i < sizeof puts / sizeof *puts; i++) {
        /* where the store's schema keeps the record, sealed with a valid checksum for that
         * database and key, so that the bytes reach the decoders behind it */
        tu_rawkey rk;
        MDB_dbi dbi;
        if ((rc = tu_raw_where(schema, puts[i].db, puts[i].k, puts[i].klen, &rk)) ||
            (rc = mdb_dbi_open(txn, rk.db, 0, &dbi)))
            break;
        unsigned char *sealed = malloc(puts[i].vlen + 8);
        if (!sealed) {
            rc = ENOMEM;
            break;
        }
        memcpy(sealed, puts[i].v, puts[i].vlen);
        tu_sum(rk.db, rk.k, rk.n, puts[i].v, puts[i].vlen, sealed + puts[i].vlen);
        MDB_val k = {rk.n, rk.k}, v = {puts[i].vlen + 8, sealed};
        rc = mdb_put(txn, dbi, &k, &v, 0);
        free(sealed);
    }
    if (rc)
        mdb_txn_abort(txn);
    else
        rc = mdb_txn_commit(txn);
    mdb_env_close(env);
    return rc;
}

/* ------------------------------------------------------------------ the property */

typedef struct stats {
    unsigned long inputs, task_ok, task_corrupt, task_schema, step_ok, audit_ok, loaded, ran_ok;
} stats;
static stats g_stats;

typedef struct probe {
    const char *bad;
    int task_rc, step_rc, audit_rc;
    char msg[1100];
} probe;

static int audit_cb(const cairn__audit_rec *r, void *arg)
{
    (void)arg;
    return r->reason[sizeof r->reason - 1] != 0 ? -1000 : 0; /* strings stay terminated */
}

static int step_cb(const char *step, const cairn__step_rec *r, void *arg)
{
    (void)arg;
    return strlen(step) > CAIRN__NAME_MAX || r->error[sizeof r->error - 1] ? -1000 : 0;
}

static int id_cb(const char *id, void *arg)
{
    (void)id, (void)arg;
    return 0;
}

static int rc_ok(int rc) { return rc == 0 || rc == CAIRN_ECORRUPT || rc == CAIRN_ESCHEMA; }

static int read_all(cairn__txn *t, void *arg)
{
    probe *p = arg;
    cairn_store *s = cairn__txn_store(t);
    cairn__task_rec task;
    p->task_rc = cairn__task_get(t, TASK, &task);
    if (!rc_ok(p->task_rc))
        p->bad = "task_get returned a code other than 0/ECORRUPT/ESCHEMA";
    else if (p->task_rc == CAIRN_ECORRUPT && !strstr(cairn_store_errmsg(s), "'" TASK "'"))
        p->bad = "ECORRUPT for a task without naming it";
    else if (p->task_rc == 0 &&
             (strlen(task.id) > CAIRN__ID_MAX || task.state >= CAIRN_STATE_COUNT))
        p->bad = "task_get accepted an impossible record";
    snprintf(p->msg, sizeof p->msg, "%s", cairn_store_errmsg(s));
    cairn__step_rec sr;
    p->step_rc = cairn__step_get(t, TASK, "a", 1, &sr);
    int rc2 = cairn__step_get(t, TASK, "a", 77, &sr);
    if (!p->bad && (!rc_ok(p->step_rc) || !rc_ok(rc2)))
        p->bad = "step_get returned a code other than 0/ECORRUPT/ESCHEMA";
    if (!p->bad && p->step_rc == 0 && sr.output && sr.output_len > 1u << 30)
        p->bad = "step output length absurd";
    int rc3 = cairn__step_each(t, TASK, step_cb, NULL);
    if (!p->bad && !rc_ok(rc3))
        p->bad = "step_each returned a code other than 0/ECORRUPT/ESCHEMA";
    p->audit_rc = cairn__audit_each(t, TASK, audit_cb, NULL);
    if (!p->bad && !rc_ok(p->audit_rc))
        p->bad = "audit_each returned a code other than 0/ECORRUPT/ESCHEMA";
    const void *d;
    size_t n;
    int rc4 = cairn__progress_get(t, TASK, "a", 1, &d, &n);
    if (!p->bad && rc4 != 0 && rc4 != CAIRN_ECORRUPT)
        p->bad = "progress_get of a planted record: neither 0 nor ECORRUPT";
    cairn__store_stats st;
    cairn__store_stats_get(t, &st);
    cairn__due_each(t, CAIRN_FAILED, INT64_MAX, id_cb, NULL);
    cairn__tenant_each(t, "", id_cb, NULL);
    return 0;
}

/* Checks one input; NULL when the property holds, else what broke. */
static const char *check_one(const uint8_t *data, size_t size)
{
    setup();
    g_stats.inputs++;
    if (plant(data, size))
        return NULL; /* LMDB refused it (a key/value LMDB itself cannot hold): nothing to read */
    cairn_store *s = cairn_store_new(); /* planted with raw LMDB: the store's durability is sync */
    if (cairn_store_open(s, g_dir)) {
        cairn_store_free(s);
        return "the store did not reopen";
    }
    probe p = {0};
    int rc = cairn__store_read(s, read_all, &p);
    if (rc && !p.bad)
        p.bad = "a read transaction failed";
    g_stats.task_ok += p.task_rc == 0;
    g_stats.task_corrupt += p.task_rc == CAIRN_ECORRUPT;
    g_stats.task_schema += p.task_rc == CAIRN_ESCHEMA;
    g_stats.step_ok += p.step_rc == 0;
    g_stats.audit_ok += p.audit_rc == 0;

    cairn_task *snap = NULL;
    rc = cairn_task_load(s, TASK, &snap);
    if (!p.bad && !rc_ok(rc))
        p.bad = "cairn_task_load returned a code other than 0/ECORRUPT/ESCHEMA";
    if (!p.bad && rc == 0) {
        g_stats.loaded++;
        char *json = cairn_task_json(snap);
        if (!json)
            p.bad = "cairn_task_json of a loaded task returned NULL";
        else if (cairn_task_state(snap) >= CAIRN_STATE_COUNT)
            p.bad = "a loaded task has an impossible state";
        cairn_free(json);
        (void)cairn_task_id(snap), (void)cairn_task_error(snap),
            (void)cairn_task_payload_hash(snap);
    }
    cairn_task_free(snap);

    /* the runner reads the same records, decodes the input and the step outputs, writes */
    if (!p.bad) {
        cairn_runner *r = cairn_runner_new();
        cairn_runner_add_graph(r, g_graph);
        cairn_runner_set_store(r, s);
        cairn_runner_set_inline_wait_ms(r, 0);
        cairn_runner_set_allow_graph_change(r, size && data[size - 1] & 1);
        cairn_runner_set_tenant_limit(r, size && data[0] & 2 ? "t" : NULL, 1);
        cairn_runner_set_retention(r, 0, size & 1 ? 0 : 3600); /* for the gc below */
        cairn_runner_open(r);
        rc = cairn_runner_resume(r, TASK);
        g_stats.ran_ok += rc == 0;
        if (rc > 0 || !cairn_runner_errmsg(r))
            p.bad = "resume returned a positive code or no message";
        uint32_t a, b, c;
        cairn_runner_retry(r, NULL, 4, 1, &a, &b, &c);
        cairn_runner_gc(r, &a, &b);
        cairn_runner_free(r);
    }
    cairn_store_free(s);
    return p.bad;
}

#ifdef CAIRN_LIBFUZZER

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *bad = check_one(data, size);
    if (bad) {
        fprintf(stderr, "fuzz_store: property violated: %s\n", bad);
        abort();
    }
    return 0;
}

#else /* the standalone driver */

#include "tests/tap.h"

static uint64_t rng = 0x853c49e6748fea9bull;

static uint64_t rnd(void)
{
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1dull;
}

static uint32_t below(uint32_t n) { return n ? (uint32_t)(rnd() % n) : 0; }

/* ------------------------------------------------------------------ seeds from a real run */

typedef struct buf {
    unsigned char *p;
    size_t n;
} buf;

static buf seeds[16];
static size_t n_seeds;

static cairn_step_result seed_fail(cairn_ctx *c, void *user)
{
    (void)user;
    static const char prog[] = "\x82\xa1i\x07\xa1s\xa3xyz";
    cairn_ctx_save_progress(c, prog, sizeof prog - 1);
    cairn_ctx_set_error(c, "transient once");
    return cairn_ctx_invocation(c) == 1 ? CAIRN_STEP_TRANSIENT : CAIRN_STEP_OK;
}

static void add_seed(const void *p, size_t n)
{
    if (n_seeds < sizeof seeds / sizeof *seeds && (seeds[n_seeds].p = malloc(n ? n : 1))) {
        memcpy(seeds[n_seeds].p, p, n);
        seeds[n_seeds++].n = n;
    }
}

/* Runs the graph on a real store (one task succeeds, one fails with a retry time and progress)
 * and keeps the bytes of its task, step and audit records. */
static void make_seeds(void)
{
    char dir[300];
    snprintf(dir, sizeof dir, "%s.seed", g_dir);
    cairn_store *s = cairn_store_new();
    cairn_store_set_durability(s, CAIRN_NOSYNC);
    cairn_store_open(s, dir);
    cairn_graph *g2 = cairn_graph_new("g", 1);
    cairn_graph_add_step(g2, "a", step_a, NULL);
    cairn_step *b = cairn_graph_add_step(g2, "b", seed_fail, "a");
    cairn_step_set_retry(b, 3, 1000000, 1000000);
    cairn_runner *r = cairn_runner_new();
    cairn_runner_add_graph(r, g_graph);
    cairn_runner_set_store(r, s);
    cairn_runner_set_tenant_limit(r, "t", 4);
    cairn_runner_open(r);
    const char *in = "{\"t\":\"acme\",\"text\":\"h\\u00e9llo\",\"n\":[1,2.5,-3,null,true],"
                     "\"o\":{\"k\":\"v\"}}";
    cairn_runner_run(r, "g", TASK, NULL, in, strlen(in), "m1", NULL, 0);
    cairn_runner_free(r);
    r = cairn_runner_new();
    cairn_runner_add_graph(r, g2);
    cairn_runner_set_store(r, s);
    cairn_runner_set_inline_wait_ms(r, 0);
    cairn_runner_open(r);
    cairn_runner_run(r, "g", "f2", NULL, "{\"x\":1}", 7, NULL, NULL, 0);
    cairn_runner_free(r);
    cairn_store_free(s);
    cairn_graph_free(g2);

    MDB_env *env = tu_raw_open(dir);
    MDB_txn *txn;
    if (env && mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) == 0) {
        /* up to 4 records of each (schema 6: tasks' records of that kind, tu_raw_home5) */
        static const char *const dbs[] = {"tasks", "steps", "audit", "progress"};
        const int schema6 = tu_raw_schema_txn(txn) >= 6;
        for (size_t i = 0; i < 4; i++) {
            MDB_dbi dbi;
            MDB_cursor *c;
            MDB_val k, v;
            tu_rawkey where; /* the database schema 6 keeps dbs[i]'s records in */
            const int kinds = schema6 && tu_raw_where(6, dbs[i], "", 0, &where) == 0 &&
                              strcmp(where.db, dbs[i]) != 0;
            if (mdb_dbi_open(txn, kinds ? "tasks" : dbs[i], 0, &dbi) ||
                mdb_cursor_open(txn, dbi, &c))
                continue;
            int per = 0;
            for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0 && per < 4;
                 rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
                const char *home = (schema6 && strcmp(dbs[i], "tasks") == 0) || kinds
                                       ? tu_raw_home5(k.mv_data, k.mv_size, NULL, NULL)
                                       : dbs[i];
                if (!home || strcmp(home, dbs[i]) != 0)
                    continue;
                add_seed(v.mv_data, v.mv_size >= 8 ? v.mv_size - 8 : 0); /* no checksum */
                per++;
            }
            mdb_cursor_close(c);
        }
        mdb_txn_abort(txn);
    }
    if (env)
        mdb_env_close(env);
    tu_rmtree(dir);
}

/* ------------------------------------------------------------------ generators */

static size_t gen_random(unsigned char *out, size_t cap)
{
    size_t n = below(below(8) == 0 ? (uint32_t)cap : 64);
    for (size_t i = 0; i < n; i++)
        out[i] = (unsigned char)rnd();
    return n;
}

static size_t mutate(unsigned char *out, size_t cap)
{
    const buf *s = &seeds[below((uint32_t)n_seeds)];
    size_t n = s->n < cap ? s->n : cap;
    memcpy(out, s->p, n);
    static const unsigned char special[] = {0x00, 0x01, 0x7f, 0x80, 0xc0, 0xc1, 0xc2, 0xc4,
                                            0xca, 0xcb, 0xcf, 0xd3, 0xd9, 0xdb, 0xdc, 0xdd,
                                            0xde, 0xdf, 0xe0, 0xff, 0x90, 0x8f, 0xa0, 0xbf};
    int rounds = 1 + (int)below(4);
    for (int k = 0; k < rounds; k++) {
        switch (below(7)) {
        case 0: /* flip a bit */
            if (n)
                out[below((uint32_t)n)] ^= (unsigned char)(1u << below(8));
            break;
        case 1: /* an interesting byte */
            if (n)
                out[below((uint32_t)n)] = special[below(sizeof special)];
            break;
        case 2: /* truncate */
            n = below((uint32_t)n + 1);
            break;
        case 3: /* insert random bytes */
        {
            size_t at = below((uint32_t)n + 1), m = 1 + below(8);
            if (n + m <= cap) {
                memmove(out + at + m, out + at, n - at);
                for (size_t i = 0; i < m; i++)
                    out[at + i] = (unsigned char)rnd();
                n += m;
            }
            break;
        }
        case 4: /* delete a range */
        {
            if (!n)
                break;
            size_t at = below((uint32_t)n), m = 1 + below(8);
            if (at + m > n)
                m = n - at;
            memmove(out + at, out + at + m, n - at - m);
            n -= m;
            break;
        }
        case 5: /* splice another seed's tail */
        {
            const buf *o = &seeds[below((uint32_t)n_seeds)];
            size_t at = below((uint32_t)n + 1), from = below((uint32_t)o->n + 1);
            size_t m = o->n - from;
            if (at + m > cap)
                m = cap - at;
            memcpy(out + at, o->p + from, m);
            n = at + m;
            break;
        }
        default: /* a big-endian length field set to something huge */
            if (n >= 5) {
                size_t at = below((uint32_t)n - 4);
                out[at] = special[below(sizeof special)];
                be(out + at + 1, below(4) ? 0xffffffffu : rnd(), 4);
            }
        }
    }
    return n;
}

static const char *const fields[] = {
    "v",     "id",   "graph",   "fp",     "hash", "pin",     "tenant",   "err",      "err_step",
    "state", "tomb", "attempt", "gen",    "aseq", "created", "updated",  "finished", "next_retry",
    "lhost", "lpid", "lstart",  "ltoken", "lexp", "input",   "resolved", "inv",      "intent",
    "out",   "t",    "from",    "to",     "step", "reason"};

static void pack_value(msgpack_packer *pk, int depth);

static void pack_random_msgpack_bin(msgpack_packer *pk)
{
    /* a bin holding msgpack (valid or not): the input, a step output */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer in;
    msgpack_packer_init(&in, &sb, msgpack_sbuffer_write);
    pack_value(&in, 0);
    if (below(4) == 0 && sb.size)
        sb.data[below((uint32_t)sb.size)] ^= (char)(1u << below(8));
    if (below(6) == 0 && sb.size)
        sb.size = below((uint32_t)sb.size);
    msgpack_pack_bin(pk, sb.size);
    msgpack_pack_bin_body(pk, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

static void pack_value(msgpack_packer *pk, int depth)
{
    static const int64_t ints[] = {0,         1,          2,         5,         6,
                                   255,       256,        65535,     -1,        -128,
                                   INT32_MAX, UINT32_MAX, INT64_MAX, INT64_MIN, 1700000000000};
    char s[200];
    size_t n;
    switch (below(depth > 3 ? 7 : 9)) {
    case 0:
        msgpack_pack_nil(pk);
        break;
    case 1:
        msgpack_pack_int64(pk, ints[below(sizeof ints / sizeof *ints)]);
        break;
    case 2:
        msgpack_pack_uint64(pk, rnd());
        break;
    case 3:
        msgpack_pack_double(pk, (double)(int64_t)rnd() / 1e3);
        break;
    case 4:
        n = below(below(8) ? 12 : sizeof s);
        for (size_t i = 0; i < n; i++)
            s[i] = below(4) ? (char)('a' + below(26)) : (char)rnd();
        msgpack_pack_str_with_body(pk, s, n);
        break;
    case 5:
        pack_random_msgpack_bin(pk);
        break;
    case 6:
        msgpack_pack_true(pk);
        break;
    case 7:
        n = below(4);
        msgpack_pack_array(pk, n);
        while (n--)
            pack_value(pk, depth + 1);
        break;
    default:
        n = below(4);
        msgpack_pack_map(pk, n);
        while (n--) {
            pack_value(pk, depth + 1);
            pack_value(pk, depth + 1);
        }
    }
}

/* A map with record field names and values of every type; often a plausible record. */
static size_t gen_structured(unsigned char *out, size_t cap)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int plausible = below(3) != 0;
    size_t n = plausible ? 6 + below(12) : below(40);
    msgpack_pack_map(&pk, n + (plausible ? 4 : 0));
    if (plausible) {
        msgpack_pack_str_with_body(&pk, "v", 1);
        msgpack_pack_uint8(&pk, below(8) ? 1 : (uint8_t)below(4));
        msgpack_pack_str_with_body(&pk, "id", 2);
        msgpack_pack_str_with_body(&pk, TASK, 2);
        msgpack_pack_str_with_body(&pk, "graph", 5);
        msgpack_pack_str_with_body(&pk, "g", 1);
        msgpack_pack_str_with_body(&pk, "state", 5);
        msgpack_pack_uint8(&pk, (uint8_t)below(7));
    }
    for (size_t i = 0; i < n; i++) {
        const char *f = fields[below(sizeof fields / sizeof *fields)];
        if (below(10))
            msgpack_pack_str_with_body(&pk, f, strlen(f));
        else
            pack_value(&pk, 2);
        if (strcmp(f, "input") == 0 || strcmp(f, "out") == 0)
            below(3) ? pack_random_msgpack_bin(&pk) : pack_value(&pk, 0);
        else if (strcmp(f, "pin") == 0 && below(2)) {
            const char *pin = below(2) ? "a@1,b@1" : "a@1,b@2,c";
            msgpack_pack_str_with_body(&pk, pin, strlen(pin));
        } else
            pack_value(&pk, 0);
    }
    size_t len = sb.size < cap ? sb.size : cap;
    memcpy(out, sb.data, len);
    msgpack_sbuffer_destroy(&sb);
    return len;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void write_seeds(const char *dir)
{
    mkdir(dir, 0755);
    for (size_t i = 0; i < n_seeds; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/seed-%02zu", dir, i);
        FILE *f = fopen(path, "wb");
        if (f) {
            fwrite(seeds[i].p, 1, seeds[i].n, f);
            fclose(f);
        }
    }
}

int main(int argc, char **argv)
{
    double secs = 2;
    setup();
    make_seeds();
    if (argc > 2 && strcmp(argv[1], "--seeds") == 0) {
        write_seeds(argv[2]);
        tu_rmtree(g_dir);
        return n_seeds ? 0 : 1;
    }
    if (argc > 1)
        secs = atof(argv[1]);
    ok(n_seeds >= 8, "%zu valid records taken from a real run as seeds", n_seeds);

    /* the seeds themselves: valid task records read back */
    const char *bad = NULL;
    unsigned long task_ok0 = g_stats.task_ok;
    for (size_t i = 0; i < n_seeds && !bad; i++)
        bad = check_one(seeds[i].p, seeds[i].n);
    ok(!bad && g_stats.task_ok > task_ok0, "seeds: no violation, valid task records decode%s%s",
       bad ? ": " : "", bad ? bad : "");

    static unsigned char in[1 << 16];
    const char *names[3] = {"random bytes", "mutated valid records", "generated record maps"};
    unsigned long count[3] = {0, 0, 0};
    const char *first_bad[3] = {NULL, NULL, NULL};
    int64_t t0 = now_ms(), budget = (int64_t)(secs * 1000);
    for (unsigned long i = 0; now_ms() - t0 < budget || i < 60; i++) {
        int kind = (int)(i % 3);
        size_t n = kind == 0   ? gen_random(in, sizeof in)
                   : kind == 1 ? mutate(in, sizeof in)
                               : gen_structured(in, sizeof in);
        const char *b = check_one(in, n);
        count[kind]++;
        if (b && !first_bad[kind]) {
            first_bad[kind] = b;
            char hex[3 * 64 + 1] = "";
            for (size_t k = 0; k < n && k < 64; k++)
                snprintf(hex + 3 * k, 4, "%02x ", in[k]);
            diag("%s: input of %zu bytes: %s", b, n, hex);
        }
    }
    for (int k = 0; k < 3; k++)
        ok(!first_bad[k], "%lu %s: no crash, only 0/ECORRUPT/ESCHEMA%s%s", count[k], names[k],
           first_bad[k] ? ": " : "", first_bad[k] ? first_bad[k] : "");
    diag("%lu inputs: task records decoded %lu, corrupt %lu, newer schema %lu; step records "
         "decoded %lu; snapshots %lu; runs that succeeded %lu",
         g_stats.inputs, g_stats.task_ok, g_stats.task_corrupt, g_stats.task_schema,
         g_stats.step_ok, g_stats.loaded, g_stats.ran_ok);
    ok(g_stats.task_ok > 0 && g_stats.task_corrupt > 0 && g_stats.task_schema > 0 &&
           g_stats.ran_ok > 0,
       "the inputs reached every outcome: decoded, corrupt, newer schema, a successful run");
    for (size_t i = 0; i < n_seeds; i++)
        free(seeds[i].p);
    cairn_graph_free(g_graph);
    if (!getenv("CAIRN_KEEP_TMP"))
        tu_rmtree(g_dir);
    return tap_done();
}

#endif
