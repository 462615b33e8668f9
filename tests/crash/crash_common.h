/* crash_common.h - what every crash test checks about a task after it was killed (static helpers).
 *
 * The promises under test, for the ledger graph (parse -> work (expensive compute) -> append
 * (at-most-once effect)):
 *   1. once `work`'s output is committed it never changes and work never runs again;
 *   2. the effect happens at most once (the ledger has <= 1 line per task);
 *   3. resuming with the same command ends succeeded or in_doubt (never dead, never stuck);
 *      an in_doubt task resolved truthfully - `--done` when the ledger has its line, else
 *      `--not-done` - then succeeds with exactly one ledger line: the effect is not performed
 *      again after --done, and once more after --not-done.
 * A test observes a task after each kill (observe()) and settles it at the end (settle()).
 * Violations are counted and described, so a soak can report them all at once. A store_view
 * watches the store's commits from outside while a runner writes, to time kills against them.
 */
#ifndef CAIRN_TEST_CRASH_COMMON_H
#define CAIRN_TEST_CRASH_COMMON_H

#include <lmdb.h>

#include "cli_common.h"

typedef struct task_obs {
    char id[64];
    char *input;        /* path of the input file */
    char nonce[32];     /* work's nonce once seen committed */
    int work_at_commit; /* trace lines of work when its output was first seen committed */
    int seen_commit;
    int violations;
    int in_doubt_seen; /* the final resume found the task in doubt */
    int resolved_done; /* ... and the ledger had its line, so it was resolved --done */
    char landed[64];   /* where the last kill landed (from show --json) */
} task_obs;

/* A test's schedule: xorshift64*, deterministic for a seed (crash_seed), good enough for
 * choosing kill times and task shapes. */
static uint64_t crash_rng_state = 1;

static inline void crash_seed(const char *seed) { crash_rng_state = strtoull(seed, NULL, 10) | 1; }

static inline uint64_t rnd(void)
{
    crash_rng_state ^= crash_rng_state >> 12;
    crash_rng_state ^= crash_rng_state << 25;
    crash_rng_state ^= crash_rng_state >> 27;
    return crash_rng_state * 2685821657736338717ull;
}

static inline unsigned rnd_below(unsigned n) { return n ? (unsigned)(rnd() % n) : 0; }

static inline double rnd_unit(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

static inline void crash_violation(task_obs *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline void crash_violation(task_obs *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("# VIOLATION task %s: ", o->id);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    o->violations++;
}

/* A read-only view of the store's LMDB environment, to count audit and step records while the
 * runner writes (readers never wait for the writer); every commit adds at least one. The
 * records are counted where the store's schema keeps them (view_count). */
typedef struct store_view {
    MDB_env *env;
} store_view;

static inline int view_open(store_view *v, const char *store)
{
    memset(v, 0, sizeof *v);
    if (mdb_env_create(&v->env))
        return -1;
    mdb_env_set_maxdbs(v->env, 16);
    mdb_env_set_maxreaders(v->env, 256);
    mdb_env_set_mapsize(v->env, 8u << 20);
    int rc = mdb_env_open(v->env, store, MDB_NOTLS | MDB_RDONLY, 0600);
    if (rc) {
        diag("mdb_env_open %s: %s", store, mdb_strerror(rc));
        mdb_env_close(v->env);
        v->env = NULL;
        return -1;
    }
    return 0;
}

/* The audit and step records of schema 6's tasks database (dbi), counted by key: a task's own
 * records are keyed by its ID, a NUL and a kind byte, 'a' for audit, 's' for a step record (the
 * head of a split one: its tail, 't', is not counted). -1 on error. */
static inline long view_count_kinds(MDB_txn *txn, MDB_dbi dbi)
{
    MDB_cursor *c;
    MDB_val k, v;
    if (mdb_cursor_open(txn, dbi, &c))
        return -1;
    long n = 0;
    int rc;
    for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        const unsigned char *p = k.mv_data, *z = memchr(p, 0, k.mv_size);
        n += z && z + 1 < p + k.mv_size && (z[1] == 'a' || z[1] == 's');
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? n : -1;
}

/* Number of audit plus step records now (every commit adds at least one); -1 on error. A store
 * of schema 5 or before keeps them in databases of their own (counted by mdb_stat), one of
 * schema 6 in tasks (counted by key: view_count_kinds). */
static inline long view_count(store_view *v)
{
    MDB_txn *txn;
    int rc = mdb_txn_begin(v->env, NULL, MDB_RDONLY, &txn);
    if (rc == MDB_MAP_RESIZED) {
        mdb_env_set_mapsize(v->env, 0);
        rc = mdb_txn_begin(v->env, NULL, MDB_RDONLY, &txn);
    }
    if (rc)
        return -1;
    MDB_dbi dbi;
    MDB_stat s;
    long n = -1;
    if ((rc = mdb_dbi_open(txn, "audit", 0, &dbi)) == 0 && mdb_stat(txn, dbi, &s) == 0) {
        n = (long)s.ms_entries;
        if (mdb_dbi_open(txn, "steps", 0, &dbi) == 0 && mdb_stat(txn, dbi, &s) == 0)
            n += (long)s.ms_entries;
        else if (mdb_dbi_open(txn, "steps", 0, &dbi) != MDB_NOTFOUND)
            n = -1;
    } else if (rc == MDB_NOTFOUND && mdb_dbi_open(txn, "tasks", 0, &dbi) == 0) {
        n = view_count_kinds(txn, dbi); /* schema 6: no audit database */
    }
    mdb_txn_abort(txn);
    return n;
}

static inline void view_close(store_view *v)
{
    if (v->env)
        mdb_env_close(v->env);
    v->env = NULL;
}

static inline int work_lines(const char *trace, const char *id)
{
    char *l = tu_fmt("work %s", id);
    int n = tu_count_exact(trace, l);
    free(l);
    return n;
}

static inline int ledger_lines(const char *ledger, const char *id)
{
    char *l = tu_fmt("%s ", id);
    int n = tu_count_lines(ledger, l);
    free(l);
    return n;
}

/* Checks promises 1 and 2 against a show --json document `j` (NULL: the task could not be
 * shown; `code` is show's exit code). Records where the task stands in o->landed. */
static inline void observe_doc(task_obs *o, json_t *j, int code, const char *trace,
                               const char *ledger)
{
    if (!j) {
        snprintf(o->landed, sizeof o->landed, code == 66 ? "not admitted" : "show failed %d", code);
        if (code != 66)
            crash_violation(o, "show failed with %d after a kill", code);
        if (ledger_lines(ledger, o->id) > 0)
            crash_violation(o, "ledger line without a task");
        return;
    }
    const char *st[3];
    static const char *names[3] = {"parse", "work", "append"};
    for (int i = 0; i < 3; i++) {
        json_t *s = step_of(j, names[i]);
        st[i] = s ? jstr(s, "status") : "-";
    }
    snprintf(o->landed, sizeof o->landed, "%s p=%s w=%s a=%s", jstr(j, "status"), st[0], st[1],
             st[2]);
    json_t *w = step_of(j, "work");
    if (w && strcmp(jstr(w, "status"), "done") == 0) {
        const char *nonce = jstr(json_object_get(w, "output"), "nonce");
        if (!o->seen_commit) {
            o->seen_commit = 1;
            snprintf(o->nonce, sizeof o->nonce, "%s", nonce);
            o->work_at_commit = work_lines(trace, o->id);
        } else if (strcmp(nonce, o->nonce) != 0) {
            crash_violation(o, "work's committed nonce changed: %s -> %s", o->nonce, nonce);
        }
    }
    if (o->seen_commit && work_lines(trace, o->id) != o->work_at_commit)
        crash_violation(o, "work ran again after its output was committed (%d -> %d lines)",
                        o->work_at_commit, work_lines(trace, o->id));
    if (ledger_lines(ledger, o->id) > 1)
        crash_violation(o, "%d ledger lines", ledger_lines(ledger, o->id));
}

/* Reads the task after a kill and checks promises 1 and 2 so far. */
static inline void observe(task_obs *o, const char *store, const char *trace, const char *ledger)
{
    int code = 0;
    json_t *j = show_json(LEDGER, store, o->id, &code);
    observe_doc(o, j, code, trace, ledger);
    json_decref(j);
}

/* Resumes the task to the end, settling a doubt the way an operator who looked at the ledger
 * would, and checks all promises; with `rerun`, also that one more run of the finished task
 * does nothing. Returns the violations. */
static inline int settle_ex(task_obs *o, const char *store, const char *trace, const char *ledger,
                            int rerun)
{
    tu_result r;
    int rc = cli(&r, LEDGER, store, "run", "--graph", "ledger", "--input", o->input, "--task",
                 o->id, "--max-attempts", "1000", NULL);
    if (rc != 0 && rc != 69)
        crash_violation(o, "resume exited %d (want 0 or 69): %s", rc, oneline(r.err));
    if (rc == 69) {
        if (!tu_contains(r.err, "CAIRN_EINDOUBT"))
            crash_violation(o, "resume exited 69 but not in doubt: %s", oneline(r.err));
        tu_result_free(&r);
        o->in_doubt_seen = 1;
        int lines_before = ledger_lines(ledger, o->id);
        int happened = lines_before > 0; /* the receiving side knows */
        o->resolved_done = happened;
        rc = cli(&r, LEDGER, store, "resolve", o->id, "--step", "append",
                 happened ? "--done" : "--not-done", NULL);
        if (rc != 0)
            crash_violation(o, "resolve %s exited %d: %s", happened ? "--done" : "--not-done", rc,
                            oneline(r.err));
        tu_result_free(&r);
        rc = cli(&r, LEDGER, store, "run", "--graph", "ledger", "--input", o->input, "--task",
                 o->id, "--max-attempts", "1000", NULL);
        if (rc != 0)
            crash_violation(o, "run after resolve exited %d: %s", rc, oneline(r.err));
        tu_result_free(&r);
        if (happened && ledger_lines(ledger, o->id) != lines_before)
            crash_violation(o, "the effect ran after resolve --done");
        if (!happened && ledger_lines(ledger, o->id) != 1)
            crash_violation(o, "after resolve --not-done the effect ran %d times, not once",
                            ledger_lines(ledger, o->id));
    } else {
        tu_result_free(&r);
    }
    int code = 0;
    json_t *j = show_json(LEDGER, store, o->id, &code);
    observe_doc(o, j, code, trace, ledger);
    if (!j || strcmp(jstr(j, "status"), "succeeded") != 0)
        crash_violation(o, "final status %s", j ? jstr(j, "status") : "(none)");
    else if (ledger_lines(ledger, o->id) != 1)
        crash_violation(o, "succeeded%s but %d ledger lines",
                        o->in_doubt_seen ? " after a truthful resolve" : " without doubt",
                        ledger_lines(ledger, o->id));
    if (j && json_object_get(j, "lease"))
        crash_violation(o, "a finished task still holds a lease");
    json_decref(j);
    if (!rerun)
        return o->violations;
    /* running it once more changes nothing */
    int wl = work_lines(trace, o->id), ll = ledger_lines(ledger, o->id);
    rc = cli_code(LEDGER, store, "run", "--graph", "ledger", "--input", o->input, "--task", o->id,
                  NULL);
    if (rc != 0 || work_lines(trace, o->id) != wl || ledger_lines(ledger, o->id) != ll)
        crash_violation(o, "a run of the finished task did something (rc %d)", rc);
    return o->violations;
}

static inline int settle(task_obs *o, const char *store, const char *trace, const char *ledger)
{
    return settle_ex(o, store, trace, ledger, 1);
}

#endif
