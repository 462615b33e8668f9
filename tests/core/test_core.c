/* test_core.c - the engine's pure parts: error table, state machine, graph validation,
 * execution order, fingerprint, the handles' lifecycle and retry backoff.
 *
 * Nothing here touches a store. The state machine is checked exhaustively (all 36 pairs, both
 * causes) against the table written out independently below from the contract in cairn.h, so a
 * change to runner/state.c that is not also a change to the documented contract fails here.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "runner/graph.h"
#include "runner/internal.h"
#include "tests/tap.h"

/* ------------------------------------------------------------------ error table */

typedef struct errdef {
    int value;
    const char *name, *text;
} errdef;

static const errdef errs[] = {
#define X(n, v, s) {v, "CAIRN_" #n, s},
    CAIRN_ERROR_TABLE(X)
#undef X
};
#define N_ERRS (sizeof errs / sizeof *errs)

static void test_errors(void)
{
    int names_ok = 1, texts_ok = 1, distinct = 1, dense = 1;
    for (size_t i = 0; i < N_ERRS; i++) {
        if (strcmp(cairn_errname(errs[i].value), errs[i].name) != 0) {
            diag("errname(%d) = %s, want %s", errs[i].value, cairn_errname(errs[i].value),
                 errs[i].name);
            names_ok = 0;
        }
        if (strcmp(cairn_strerror(errs[i].value), errs[i].text) != 0 || !errs[i].text[0])
            texts_ok = 0;
        /* codes are appended: -1, -2, ... with no gaps, so a number never changes meaning */
        if (errs[i].value != -(int)(i + 1))
            dense = 0;
        for (size_t j = 0; j < i; j++)
            if (errs[i].value == errs[j].value || strcmp(errs[i].name, errs[j].name) == 0 ||
                strcmp(cairn_strerror(errs[i].value), cairn_strerror(errs[j].value)) == 0) {
                diag("codes %d and %d collide", errs[i].value, errs[j].value);
                distinct = 0;
            }
    }
    ok(N_ERRS >= 30, "error table has %zu codes", N_ERRS);
    ok(names_ok, "cairn_errname gives CAIRN_<NAME> for every code");
    ok(texts_ok, "cairn_strerror gives the table text for every code");
    ok(distinct, "every code has a distinct value, name and text");
    ok(dense, "codes run -1..-%zu without gaps", N_ERRS);
    ok(strcmp(cairn_errname(0), "CAIRN_OK") == 0, "errname(0) is CAIRN_OK");
    ok(cairn_strerror(0) && cairn_strerror(0)[0], "strerror(0) is a text");
    static const int unknown[] = {1, 42, -(int)N_ERRS - 1, -1000, INT32_MIN, INT32_MAX};
    int unk_ok = 1;
    for (size_t i = 0; i < sizeof unknown / sizeof *unknown; i++) {
        const char *n = cairn_errname(unknown[i]), *t = cairn_strerror(unknown[i]);
        if (!n || !t || strcmp(n, "CAIRN_E?") != 0 || !t[0])
            unk_ok = 0;
        for (size_t j = 0; t && j < N_ERRS; j++)
            if (strcmp(t, errs[j].text) == 0)
                unk_ok = 0;
    }
    ok(unk_ok, "unknown codes: errname CAIRN_E?, strerror a non-NULL text of no real code");
    ok(CAIRN_EFORMAT == -22 && CAIRN_EFULL == -14 && CAIRN_ECORRUPT == -26,
       "released code numbers are stable (EFORMAT -22, EFULL -14, ECORRUPT -26)");
}

/* ------------------------------------------------------------------ state machine */

/* The contract from cairn.h, written out again here on purpose. */
static int expected_legal(int from, int to, int op)
{
    if (from == CAIRN_PENDING && to == CAIRN_RUNNING)
        return 1;
    if (from == CAIRN_FAILED && to == CAIRN_RUNNING)
        return 1;
    if (from == CAIRN_RUNNING &&
        (to == CAIRN_SUCCEEDED || to == CAIRN_FAILED || to == CAIRN_DEAD || to == CAIRN_IN_DOUBT))
        return 1;
    if (op && to == CAIRN_PENDING &&
        (from == CAIRN_SUCCEEDED || from == CAIRN_FAILED || from == CAIRN_DEAD ||
         from == CAIRN_IN_DOUBT))
        return 1;
    return 0;
}

static void test_states(void)
{
    int mism = 0, n_legal[2] = {0, 0};
    for (int op = 0; op <= 1; op++)
        for (int from = 0; from < CAIRN_STATE_COUNT; from++)
            for (int to = 0; to < CAIRN_STATE_COUNT; to++) {
                int got = cairn_state_transition_ok((cairn_state)from, (cairn_state)to, op);
                int want = expected_legal(from, to, op);
                n_legal[op] += got != 0;
                if ((got != 0) != want) {
                    diag("%s -> %s (operator %d): got %d, want %d",
                         cairn_state_name((cairn_state)from), cairn_state_name((cairn_state)to), op,
                         got, want);
                    mism++;
                }
            }
    ok(mism == 0, "all 72 (from, to, operator) cases match the documented table (%d mismatches)",
       mism);
    ok(n_legal[0] == 6 && n_legal[1] == 10,
       "6 legal transitions for runs, 10 with operator (%d, %d)", n_legal[0], n_legal[1]);
    ok(!cairn_state_transition_ok(CAIRN_SUCCEEDED, CAIRN_RUNNING, 1),
       "a succeeded task never runs again, not even by an operator");
    ok(!cairn_state_transition_ok((cairn_state)6, CAIRN_PENDING, 1) &&
           !cairn_state_transition_ok(CAIRN_PENDING, (cairn_state)6, 1) &&
           !cairn_state_transition_ok((cairn_state)-1, CAIRN_RUNNING, 0),
       "out-of-range states are refused");
    int names = 1;
    for (int s = 0; s < CAIRN_STATE_COUNT; s++) {
        cairn_state back = (cairn_state)99;
        if (cairn_state_parse(cairn_state_name((cairn_state)s), &back) != 0 || (int)back != s)
            names = 0;
    }
    ok(names, "state names parse back to their state");
    static const char *want_names[] = {"pending", "running", "succeeded",
                                       "failed",  "dead",    "in_doubt"};
    int exact = 1;
    for (int s = 0; s < CAIRN_STATE_COUNT; s++)
        exact &= strcmp(cairn_state_name((cairn_state)s), want_names[s]) == 0;
    ok(exact, "state names are pending, running, succeeded, failed, dead, in_doubt");
    cairn_state st;
    ok(cairn_state_parse("Running", &st) == CAIRN_EINVAL &&
           cairn_state_parse("", &st) == CAIRN_EINVAL &&
           cairn_state_parse(NULL, &st) == CAIRN_EINVAL,
       "unknown state names give CAIRN_EINVAL");
    ok(strcmp(cairn_state_name((cairn_state)6), "?") == 0 &&
           strcmp(cairn_state_name((cairn_state)-1), "?") == 0,
       "out-of-range state name is ?");
    ok(strcmp(cairn_step_state_name(CAIRN_STEP_INTENT), "intent") == 0 &&
           strcmp(cairn_step_state_name(CAIRN_STEP_IN_DOUBT), "in_doubt") == 0 &&
           strcmp(cairn_step_state_name((cairn_step_state)5), "?") == 0,
       "step state names");
}

/* ------------------------------------------------------------------ graphs */

static cairn_step_result nop(cairn_ctx *ctx, void *user)
{
    (void)ctx, (void)user;
    return CAIRN_STEP_OK;
}

/* Validates and checks the outcome: CAIRN_EGRAPH with a message holding every `needles` entry. */
static void expect_graph_error(cairn_graph *g, const char *what, const char *n1, const char *n2)
{
    int rc = cairn_graph_validate(g);
    const char *m = cairn_graph_errmsg(g);
    ok(rc == CAIRN_EGRAPH && m && strstr(m, n1) && (!n2 || strstr(m, n2)) &&
           cairn_graph_fingerprint(g) == NULL,
       "%s: CAIRN_EGRAPH naming '%s'%s%s%s (rc %d, \"%s\")", what, n1, n2 ? " and '" : "",
       n2 ? n2 : "", n2 ? "'" : "", rc, m ? m : "(null)");
}

static void test_graph_validation(void)
{
    cairn_graph *g = cairn_graph_new("empty", 1);
    expect_graph_error(g, "empty graph", "empty", "no steps");
    cairn_graph_free(g);

    g = cairn_graph_new("g", 1);
    cairn_graph_add_step(g, "a", nop, NULL);
    cairn_graph_add_step(g, "b", nop, "a,nosuch");
    expect_graph_error(g, "unknown dependency", "'b'", "'nosuch'");
    cairn_graph_free(g);

    g = cairn_graph_new("g", 1);
    cairn_graph_add_step(g, "a", nop, NULL);
    cairn_graph_add_step(g, "self", nop, "a,self");
    expect_graph_error(g, "self-dependency", "'self'", "itself");
    cairn_graph_free(g);

    g = cairn_graph_new("g", 1);
    cairn_graph_add_step(g, "a", nop, NULL);
    cairn_graph_add_step(g, "b", nop, "a,");
    expect_graph_error(g, "trailing comma in deps", "'b'", "empty");
    cairn_graph_free(g);

    g = cairn_graph_new("g", 1);
    cairn_graph_add_step(g, "a", nop, NULL);
    cairn_graph_add_step(g, "b", nop, "a,,a");
    expect_graph_error(g, "empty name in deps", "'b'", NULL);
    cairn_graph_free(g);

    g = cairn_graph_new("g", 1);
    cairn_graph_add_step(g, "start", nop, NULL);
    cairn_graph_add_step(g, "x", nop, "start,y");
    cairn_graph_add_step(g, "y", nop, "x");
    int rc = cairn_graph_validate(g);
    const char *m = cairn_graph_errmsg(g);
    ok(rc == CAIRN_EGRAPH && strstr(m, "cycle") && (strstr(m, "'x'") || strstr(m, "'y'")),
       "2-cycle: CAIRN_EGRAPH naming a step on the cycle (\"%s\")", m);
    cairn_graph_free(g);

    /* the first unplaced step ("down") is downstream of the cycle, not on it: the message must
     * still name a step that is on the cycle */
    g = cairn_graph_new("g", 1);
    cairn_graph_add_step(g, "down", nop, "p");
    cairn_graph_add_step(g, "p", nop, "r");
    cairn_graph_add_step(g, "q", nop, "p");
    cairn_graph_add_step(g, "r", nop, "q");
    rc = cairn_graph_validate(g);
    m = cairn_graph_errmsg(g);
    ok(rc == CAIRN_EGRAPH && strstr(m, "cycle") &&
           (strstr(m, "'p'") || strstr(m, "'q'") || strstr(m, "'r'")) && !strstr(m, "'down'"),
       "3-cycle behind a downstream step: the message names a step on the cycle (\"%s\")", m);
    cairn_graph_free(g);

    g = cairn_graph_new("g", 1);
    ok(cairn_graph_add_step(g, "a", nop, NULL) != NULL, "add step a");
    ok(cairn_graph_add_step(g, "a", nop, NULL) == NULL && strstr(cairn_graph_errmsg(g), "'a'") &&
           strstr(cairn_graph_errmsg(g), "duplicate"),
       "duplicate step name refused, message names it (\"%s\")", cairn_graph_errmsg(g));
    ok(cairn_graph_add_step(g, "bad name", nop, NULL) == NULL &&
           strstr(cairn_graph_errmsg(g), "'bad name'"),
       "step name with a space refused, message names it (\"%s\")", cairn_graph_errmsg(g));
    char longname[80];
    memset(longname, 'n', 65);
    longname[65] = 0;
    ok(cairn_graph_add_step(g, longname, nop, NULL) == NULL, "65-byte step name refused");
    longname[64] = 0;
    ok(cairn_graph_add_step(g, longname, nop, NULL) != NULL, "64-byte step name accepted");
    ok(cairn_graph_add_step(g, "", nop, NULL) == NULL &&
           cairn_graph_add_step(g, NULL, nop, NULL) == NULL &&
           cairn_graph_add_step(g, "s/x", nop, NULL) == NULL,
       "empty, NULL and '/' step names refused");
    ok(cairn_graph_add_step(g, "nofn", NULL, NULL) == NULL &&
           strstr(cairn_graph_errmsg(g), "'nofn'"),
       "step without a function refused");
    ok(cairn_graph_validate(g) == 0 && cairn_graph_errmsg(g)[0] == 0,
       "graph still valid after refused additions");
    cairn_graph_free(g);

    ok(cairn_graph_new("bad name", 1) == NULL && cairn_graph_new("", 1) == NULL &&
           cairn_graph_new(NULL, 1) == NULL && cairn_graph_new("ok", 0) == NULL,
       "bad graph names and version 0 refused");
    g = cairn_graph_new("A-z_0.9", 7);
    ok(g && strcmp(cairn_graph_name(g), "A-z_0.9") == 0, "graph name kept");
    cairn_graph_free(g);
    cairn_graph_free(NULL);
    ok(cairn_graph_validate(NULL) == CAIRN_EINVAL, "validate(NULL) is CAIRN_EINVAL");

    cairn_step *s;
    g = cairn_graph_new("g", 1);
    s = cairn_graph_add_step(g, "a", nop, NULL);
    ok(cairn_step_set_version(s, 0) == CAIRN_EINVAL &&
           cairn_step_set_delivery(s, (cairn_delivery)3) == CAIRN_EINVAL &&
           cairn_step_set_retry(s, 0, 1, 1) == CAIRN_EINVAL &&
           cairn_step_set_retry(s, 3, 100, 99) == CAIRN_EINVAL &&
           cairn_step_set_version(NULL, 1) == CAIRN_EINVAL,
       "step setters refuse bad values");
    ok(s->max_invocations == 3 && s->base_ms == 200 && s->cap_ms == 30000 && s->timeout_ms == 0 &&
           s->delivery == CAIRN_COMPUTE && s->version == 1,
       "step defaults: 3 invocations, 200 ms base, 30 s cap, no timeout, compute, version 1");
    cairn_graph_free(g);
}

static void test_topo_order(void)
{
    /* definition order: c, a(b), b, d(c,a), e; Kahn with the lowest ready index: c b a d e */
    cairn_graph *g = cairn_graph_new("topo", 1);
    cairn_graph_add_step(g, "c", nop, NULL);
    cairn_graph_add_step(g, "a", nop, "b");
    cairn_graph_add_step(g, "b", nop, NULL);
    cairn_graph_add_step(g, "d", nop, "c,a");
    cairn_graph_add_step(g, "e", nop, NULL);
    ok(cairn_graph_validate(g) == 0, "topo graph validates");
    char got[64] = "";
    for (size_t i = 0; i < g->n_steps; i++)
        strcat(got, g->steps[g->order[i]]->name);
    ok(strcmp(got, "cbade") == 0, "stable topological order cbade (got %s)", got);
    ok(strcmp(g->pin, "c@1,b@1,a@1,d@1,e@1") == 0, "pin lists steps in that order (%s)", g->pin);
    char fp[65];
    snprintf(fp, sizeof fp, "%s", cairn_graph_fingerprint(g));
    ok(cairn_graph_validate(g) == 0 && strcmp(fp, cairn_graph_fingerprint(g)) == 0,
       "validating twice gives the same fingerprint");
    got[0] = 0;
    for (size_t i = 0; i < g->n_steps; i++)
        strcat(got, g->steps[g->order[i]]->name);
    ok(strcmp(got, "cbade") == 0, "and the same order");
    /* every step comes after its dependencies */
    int after = 1;
    for (size_t i = 0; i < g->n_steps; i++) {
        const cairn_step *s = g->steps[g->order[i]];
        for (size_t d = 0; d < s->n_deps; d++) {
            size_t pos = 0;
            while (g->order[pos] != s->deps[d])
                pos++;
            if (pos >= i)
                after = 0;
        }
    }
    ok(after, "every step is ordered after its dependencies");
    cairn_graph_add_step(g, "f", nop, "e");
    ok(cairn_graph_fingerprint(g) == NULL, "adding a step invalidates the fingerprint");
    cairn_graph_free(g);

    /* a long chain defined backwards */
    g = cairn_graph_new("chain", 1);
    char name[16], dep[16];
    for (int i = 40; i >= 1; i--) {
        snprintf(name, sizeof name, "s%02d", i);
        snprintf(dep, sizeof dep, "s%02d", i - 1);
        cairn_graph_add_step(g, name, nop, i > 1 ? dep : NULL);
    }
    int inorder = cairn_graph_validate(g) == 0;
    for (size_t i = 0; inorder && i < g->n_steps; i++) {
        snprintf(name, sizeof name, "s%02zu", i + 1);
        inorder = strcmp(g->steps[g->order[i]]->name, name) == 0;
    }
    ok(inorder, "40-step chain defined backwards runs s01..s40");
    cairn_graph_free(g);
}

/* ------------------------------------------------------------------ fingerprint */

typedef struct fpvar {
    uint32_t gver, bver;
    cairn_delivery bdel;
    const char *cdeps;
    /* things that must NOT change the fingerprint */
    uint32_t retry_max, timeout;
    int expensive, user, probe;
} fpvar;

static cairn_probe_result probe_nop(cairn_ctx *ctx, void *user)
{
    (void)ctx, (void)user;
    return CAIRN_PROBE_UNKNOWN;
}

static cairn_step_result other_fn(cairn_ctx *ctx, void *user)
{
    (void)ctx, (void)user;
    return CAIRN_STEP_TRANSIENT;
}

static void fp_of(const fpvar *v, char out[65])
{
    static int dummy;
    cairn_graph *g = cairn_graph_new("fp", v->gver);
    cairn_graph_add_step(g, "a", nop, NULL);
    cairn_step *b = cairn_graph_add_step(g, "b", v->user ? other_fn : nop, "a");
    cairn_graph_add_step(g, "c", nop, v->cdeps);
    cairn_step_set_version(b, v->bver);
    cairn_step_set_delivery(b, v->bdel);
    cairn_step_set_retry(b, v->retry_max, 10, 1000);
    cairn_step_set_timeout(b, v->timeout);
    cairn_step_set_expensive(b, v->expensive);
    if (v->user)
        cairn_step_set_user(b, &dummy);
    if (v->probe)
        cairn_step_set_probe(b, probe_nop);
    out[0] = 0;
    if (cairn_graph_validate(g) == 0)
        snprintf(out, 65, "%s", cairn_graph_fingerprint(g));
    cairn_graph_free(g);
}

static void test_fingerprint(void)
{
    const fpvar base = {1, 1, CAIRN_COMPUTE, "b", 3, 0, 0, 0, 0};
    char f0[65], f1[65], f[65];
    fp_of(&base, f0);
    fp_of(&base, f1);
    size_t hex = strspn(f0, "0123456789abcdef");
    ok(strlen(f0) == 64 && hex == 64, "fingerprint is 64 lowercase hex digits (%s)", f0);
    ok(strcmp(f0, f1) == 0, "same definition, same fingerprint");

    fpvar v = base;
    v.bver = 2;
    fp_of(&v, f);
    ok(strcmp(f, f0) != 0, "step version change changes the fingerprint");
    v = base;
    v.gver = 2;
    fp_of(&v, f);
    ok(strcmp(f, f0) != 0, "graph version change changes the fingerprint");
    v = base;
    v.bdel = CAIRN_EFFECT;
    fp_of(&v, f);
    ok(strcmp(f, f0) != 0, "delivery change (compute -> effect) changes the fingerprint");
    char f2[65];
    v.bdel = CAIRN_EFFECT_AT_LEAST_ONCE;
    fp_of(&v, f2);
    ok(strcmp(f2, f0) != 0 && strcmp(f2, f) != 0, "effect -> at-least-once changes it too");
    v = base;
    v.cdeps = "a,b";
    fp_of(&v, f);
    ok(strcmp(f, f0) != 0, "dependency change changes the fingerprint");
    v.cdeps = NULL;
    fp_of(&v, f);
    ok(strcmp(f, f0) != 0, "dropping a dependency changes the fingerprint");

    v = base;
    v.retry_max = 9;
    v.timeout = 5000;
    v.expensive = 1;
    fp_of(&v, f);
    ok(strcmp(f, f0) == 0, "retry policy, timeout and expensive do not change the fingerprint");
    v = base;
    v.user = 1;
    v.probe = 1;
    fp_of(&v, f);
    ok(strcmp(f, f0) == 0, "function, user pointer and probe do not change the fingerprint");

    cairn_graph *g = cairn_graph_new("fp", 1);
    cairn_graph_add_step(g, "a", nop, NULL);
    ok(cairn_graph_fingerprint(g) == NULL, "no fingerprint before validate");
    cairn_graph_free(g);
    /* a different graph name */
    g = cairn_graph_new("fp2", 1);
    cairn_graph_add_step(g, "a", nop, NULL);
    cairn_graph_add_step(g, "b", nop, "a");
    cairn_graph_add_step(g, "c", nop, "b");
    cairn_graph_validate(g);
    ok(strcmp(cairn_graph_fingerprint(g), f0) != 0, "graph name is part of the fingerprint");
    cairn_graph_free(g);
}

/* ------------------------------------------------------------------ lifecycle */

/* The settings of a runner that open fixes, for comparing before and after a refused setter. */
typedef struct runner_conf {
    cairn_graph **graphs;
    size_t n_graphs;
    cairn_store *store;
    uint32_t max_attempts, lease_ms, inline_wait_ms, tenant_max;
    cairn_retry_report_fn report;
    void *report_user;
    char tenant_field[CAIRN__NAME_MAX + 1];
    int allow_graph_change;
    uint64_t retention_s, tombstone_s;
} runner_conf;

static runner_conf conf_of(const cairn_runner *r)
{
    runner_conf c;
    memset(&c, 0, sizeof c); /* padding too: the structs are compared with memcmp */
    c.graphs = r->graphs, c.n_graphs = r->n_graphs, c.store = r->store;
    c.max_attempts = r->max_attempts, c.lease_ms = r->lease_ms;
    c.inline_wait_ms = r->inline_wait_ms, c.tenant_max = r->tenant_max;
    c.report = r->report, c.report_user = r->report_user;
    memcpy(c.tenant_field, r->tenant_field, sizeof c.tenant_field);
    c.allow_graph_change = r->allow_graph_change;
    c.retention_s = r->retention_s, c.tombstone_s = r->tombstone_s;
    return c;
}

static void report_nop(const char *task_id, int rc, const char *message, void *user)
{
    (void)task_id, (void)rc, (void)message, (void)user;
}

static void test_runner_lifecycle(void)
{
    cairn_graph *g = cairn_graph_new("life", 1), *g2 = cairn_graph_new("life2", 1);
    cairn_graph_add_step(g, "a", nop, NULL);
    cairn_graph_add_step(g2, "a", nop, NULL);
    /* cairn_runner_open only records the store (it is opened by its own handle), so an unopened
     * store handle is enough here */
    cairn_store *st = cairn_store_new(), *st2 = cairn_store_new();
    cairn_runner *r = cairn_runner_new();
    ok(cairn_runner_open(r) == CAIRN_EINVAL && r->opened == 0, "open without a store: EINVAL");
    ok(cairn_runner_add_graph(r, g) == 0 && cairn_runner_set_store(r, st) == 0 &&
           cairn_runner_set_max_attempts(r, 5) == 0 && cairn_runner_open(r) == 0,
       "configured, then opened");
    runner_conf before = conf_of(r);
    int rcs[11] = {
        cairn_runner_add_graph(r, g2),
        cairn_runner_set_store(r, st2),
        cairn_runner_set_max_attempts(r, 9),
        cairn_runner_set_lease_ms(r, 5000),
        cairn_runner_set_inline_wait_ms(r, 7),
        cairn_runner_set_tenant_limit(r, "tenant", 2),
        cairn_runner_set_allow_graph_change(r, 1),
        cairn_runner_set_retention(r, 1, 2),
        cairn_runner_set_retry_report(r, report_nop, r),
        cairn_runner_open(r),
        cairn_runner_set_tenant_limit(r, NULL, 0),
    };
    static const char *const names[11] = {"add_graph",
                                          "set_store",
                                          "set_max_attempts",
                                          "set_lease_ms",
                                          "set_inline_wait_ms",
                                          "set_tenant_limit",
                                          "set_allow_graph_change",
                                          "set_retention",
                                          "set_retry_report",
                                          "open (a second time)",
                                          "set_tenant_limit(NULL)"};
    for (int i = 0; i < 11; i++)
        ok(rcs[i] == CAIRN_EBUSY, "after open, cairn_runner_%s is CAIRN_EBUSY (%s)", names[i],
           cairn_errname(rcs[i]));
    runner_conf after = conf_of(r);
    ok(memcmp(&before, &after, sizeof before) == 0 && r->max_attempts == 5 && r->n_graphs == 1,
       "and the runner's settings are unchanged");
    ok(strstr(cairn_runner_errmsg(r), "open") != NULL,
       "the message says the runner is open (\"%s\")", cairn_runner_errmsg(r));
    ok(cairn_runner_set_max_attempts(NULL, 1) == CAIRN_EINVAL, "a setter on NULL is EINVAL");
    cairn_runner_free(r);
    cairn_store_free(st);
    cairn_store_free(st2);
    cairn_graph_free(g);
    cairn_graph_free(g2);
}

static cairn_probe_result probe_nop(cairn_ctx *ctx, void *user);

static void test_graph_frozen(void)
{
    static int dummy;
    cairn_graph *g = cairn_graph_new("frz", 1);
    cairn_graph_add_step(g, "a", nop, NULL);
    cairn_step *b = cairn_graph_add_step(g, "b", nop, "a");

    /* before registration: a change undoes the validation, so no fingerprint is ever stale */
    ok(cairn_graph_validate(g) == 0 && cairn_graph_fingerprint(g), "validated");
    char fp1[65];
    snprintf(fp1, sizeof fp1, "%s", cairn_graph_fingerprint(g));
    ok(cairn_step_set_version(b, 2) == 0 && cairn_graph_fingerprint(g) == NULL,
       "a step setter after validate takes effect and withdraws the fingerprint");
    ok(cairn_graph_validate(g) == 0 && strcmp(cairn_graph_fingerprint(g), fp1) != 0 &&
           strstr(g->pin, "b@2"),
       "validating again gives the new fingerprint and pin (%s)", g->pin);

    cairn_runner *r = cairn_runner_new();
    ok(cairn_runner_add_graph(r, g) == 0 && g->frozen, "registering freezes the graph");
    char fp[65], pin[sizeof g->pin];
    snprintf(fp, sizeof fp, "%s", cairn_graph_fingerprint(g));
    snprintf(pin, sizeof pin, "%s", g->pin);
    cairn_step saved = *b;
    int rcs[8] = {
        cairn_step_set_version(b, 3),       cairn_step_set_delivery(b, CAIRN_EFFECT),
        cairn_step_set_probe(b, probe_nop), cairn_step_set_user(b, &dummy),
        cairn_step_set_retry(b, 9, 1, 2),   cairn_step_set_timeout(b, 1000),
        cairn_step_set_expensive(b, 1),     cairn_step_set_retry_budget(b, 60000),
    };
    static const char *const names[8] = {"version", "delivery", "probe",     "user",
                                         "retry",   "timeout",  "expensive", "retry_budget"};
    for (int i = 0; i < 8; i++)
        ok(rcs[i] == CAIRN_EBUSY, "after add_graph, cairn_step_set_%s is CAIRN_EBUSY (%s)",
           names[i], cairn_errname(rcs[i]));
    ok(memcmp(&saved, b, sizeof saved) == 0, "and the step is unchanged");
    ok(cairn_graph_add_step(g, "c", nop, "b") == NULL && g->n_steps == 2,
       "cairn_graph_add_step on a frozen graph: NULL, no step added");
    ok(strstr(cairn_graph_errmsg(g), "frozen") != NULL, "cairn_graph_errmsg says why (\"%s\")",
       cairn_graph_errmsg(g));
    ok(cairn_graph_validate(g) == 0 && strcmp(cairn_graph_fingerprint(g), fp) == 0 &&
           strcmp(g->pin, pin) == 0,
       "the fingerprint and pin are unchanged, validate too leaves them");
    cairn_runner *r2 = cairn_runner_new();
    ok(cairn_runner_add_graph(r2, g) == 0, "a frozen graph can be registered with another runner");
    cairn_runner_free(r2);
    cairn_runner_free(r);
    ok(cairn_step_set_version(b, 4) == CAIRN_EBUSY,
       "it stays frozen after its runners are freed (it may be registered elsewhere)");
    cairn_graph_free(g);
}

/* ------------------------------------------------------------------ backoff */

static void test_backoff(void)
{
    cairn_graph *g = cairn_graph_new("bo", 1);
    cairn_step *s = cairn_graph_add_step(g, "s", nop, NULL);
    cairn_step_set_retry(s, 20, 100, 5000);
    uint64_t rng = 12345;
    int bounds = 1, spread = 1, cap_seen = 1;
    enum { N = 4000 };
    for (uint32_t k = 1; k <= 12; k++) {
        uint64_t ceiling = 100ull << (k - 1);
        if (ceiling > 5000)
            ceiling = 5000;
        uint32_t lo = UINT32_MAX, hi = 0;
        double sum = 0;
        unsigned distinct_low = 0, distinct_high = 0;
        for (int i = 0; i < N; i++) {
            uint32_t d = cairn__backoff_ms(s, k, &rng);
            if (d > ceiling) {
                diag("k=%u: delay %u above ceiling %llu", k, d, (unsigned long long)ceiling);
                bounds = 0;
            }
            lo = d < lo ? d : lo;
            hi = d > hi ? d : hi;
            sum += d;
            distinct_low += d < ceiling / 2;
            distinct_high += d >= ceiling / 2;
        }
        double mean = sum / N;
        /* uniform on [0, c]: mean c/2, extremes close to both ends, both halves populated */
        if (lo > ceiling / 20 || hi < ceiling - ceiling / 20 || mean < ceiling * 0.45 ||
            mean > ceiling * 0.55 || distinct_low < N / 3 || distinct_high < N / 3) {
            diag("k=%u ceiling %llu: min %u max %u mean %.1f", k, (unsigned long long)ceiling, lo,
                 hi, mean);
            spread = 0;
        }
        if (k >= 7 && hi < 4500)
            cap_seen = 0;
    }
    ok(bounds, "full jitter: every delay in [0, min(cap, base*2^(k-1))] for k = 1..12");
    ok(spread, "delays spread uniformly over that range (min, max, mean, halves)");
    ok(cap_seen, "past the cap the range is [0, cap]");

    int huge_ok = 1;
    for (int i = 0; i < 1000; i++)
        huge_ok &= cairn__backoff_ms(s, UINT32_MAX, &rng) <= 5000;
    ok(huge_ok, "a huge invocation count still respects the cap (no overflow)");

    cairn_step_set_retry(s, 3, 0, 0);
    int zero = 1;
    for (int i = 0; i < 100; i++)
        zero &= cairn__backoff_ms(s, (uint32_t)i % 5, &rng) == 0;
    ok(zero, "base 0, cap 0: always 0");

    cairn_step_set_retry(s, 3, UINT32_MAX, UINT32_MAX);
    int big = 1;
    for (int i = 0; i < 100; i++)
        big &= cairn__backoff_ms(s, 3, &rng) <= UINT32_MAX;
    ok(big, "base = cap = UINT32_MAX does not overflow");

    cairn_step_set_retry(s, 3, 100, 5000);
    uint64_t r0 = 0;
    uint32_t first = cairn__backoff_ms(s, 3, &r0);
    int moved = r0 != 0, varies = 0;
    for (int i = 0; i < 50; i++)
        varies |= cairn__backoff_ms(s, 3, &r0) != first;
    ok(moved && varies, "a zero seed still gives a varying sequence");

    uint64_t a = 777, b = 777;
    int same = 1;
    for (int i = 0; i < 100; i++)
        same &= cairn__backoff_ms(s, 4, &a) == cairn__backoff_ms(s, 4, &b);
    uint64_t c = 778, d = 777;
    int differs = 0;
    for (int i = 0; i < 100; i++)
        differs |= cairn__backoff_ms(s, 4, &c) != cairn__backoff_ms(s, 4, &d);
    ok(same && differs,
       "the jitter is a function of the seed: same seed same delays, other seed other");
    cairn_graph_free(g);
}

/* ------------------------------------------------------------------ retry budget */

/* The budget's arithmetic (cairn__budget_wait): a step tried since `start` with a 60 s budget,
 * at several moments, backoffs and Retry-Afters. Times are plain numbers: nothing waits. */
static void test_budget(void)
{
    cairn_graph *g = cairn_graph_new("bu", 1);
    cairn_step *s = cairn_graph_add_step(g, "s", nop, NULL);
    ok(cairn_step_set_retry_budget(s, 60000) == 0 && s->budget_ms == 60000 &&
           cairn_step_set_retry_budget(NULL, 1) == CAIRN_EINVAL,
       "cairn_step_set_retry_budget sets the budget; NULL step is CAIRN_EINVAL");
    const int64_t t0 = 1700000000000;
    static const struct {
        int64_t now; /* since t0 */
        uint32_t backoff, retry_after;
        int want;
        uint32_t wait;
        const char *what;
    } cases[] = {
        {0, 800, 0, 0, 800, "the first failure: the backoff"},
        {10000, 4000, 0, 0, 4000, "well inside the budget: the backoff"},
        {10000, 1000, 5000, 0, 5000, "a Retry-After longer than the backoff is waited"},
        {57000, 8000, 0, 0, 3000, "a backoff past the end is cut: the last try at the end"},
        {59999, 8000, 0, 0, 1, "1 ms left: the last try in 1 ms"},
        {60000, 100, 0, 1, 0, "at the end: spent"},
        {3600000, 100, 0, 1, 0, "long after the end (a late cron run): spent"},
        {50000, 100, 10001, 2, 10000, "a Retry-After beyond the end ends it, with the time left"},
        {50000, 100, 10000, 0, 10000, "a Retry-After reaching exactly the end is waited"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint32_t wait = 12345;
        int rc = cairn__budget_wait(s, t0, t0 + cases[i].now, cases[i].backoff,
                                    cases[i].retry_after, &wait);
        ok(rc == cases[i].want && wait == cases[i].wait, "budget: %s (rc %d, wait %u ms)",
           cases[i].what, rc, wait);
    }
    uint32_t wait = 0;
    cairn_step_set_retry_budget(s, UINT32_MAX);
    int rc = cairn__budget_wait(s, t0, t0 + 1000, UINT32_MAX, 0, &wait);
    ok(rc == 0 && wait == UINT32_MAX - 1000,
       "a 49-day budget and a huge backoff: no overflow (wait %u)", wait);
    cairn_graph_free(g);
}

int main(void)
{
    test_errors();
    test_states();
    test_graph_validation();
    test_topo_order();
    test_fingerprint();
    test_runner_lifecycle();
    test_graph_frozen();
    test_backoff();
    test_budget();
    return tap_done();
}
