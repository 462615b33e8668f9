/* runner/graph.c - graph definition, validation, fingerprint, backoff and retry budgets.
 *
 * A graph is checked once, when it is registered: every dependency must name a step, there must
 * be no cycle, and names must be unique. Validation also fixes the execution order (a
 * topological order that keeps definition order among independent steps) and the fingerprint a
 * task pins, so that resuming under changed code is detected instead of silently mixing old and
 * new steps.
 *
 * Registration also freezes the graph: from then on nothing in it changes (add_step is refused,
 * every step setter returns CAIRN_EBUSY, validate does nothing), so the fingerprint and pin a
 * runner compares with tasks can never go stale, and runners in several threads may share one
 * graph without locks. Before that, any change undoes a validation: the fingerprint of a graph is
 * either absent or the fingerprint of what the graph holds now.
 */
#include "runner/graph.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cairn__name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

cairn_graph *cairn_graph_new(const char *name, uint32_t version)
{
    if (!cairn__name_ok(name) || version == 0)
        return NULL;
    cairn_graph *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    strcpy(g->name, name);
    g->version = version;
    return g;
}

void cairn_graph_free(cairn_graph *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < g->n_steps; i++) {
        free(g->steps[i]->deps_text);
        free(g->steps[i]->deps);
        free(g->steps[i]);
    }
    free(g->steps);
    free(g->order);
    free(g);
}

const char *cairn_graph_name(const cairn_graph *g) { return g ? g->name : NULL; }
const char *cairn_graph_errmsg(const cairn_graph *g)
{
    if (!g)
        return "no graph";
    /* a frozen graph is never written (other threads may read it), so its refusals have no
     * message of their own: this one says why */
    if (!g->err[0] && g->frozen)
        return "the graph is frozen: it was registered with a runner and no longer changes";
    return g->err;
}
const char *cairn_graph_fingerprint(const cairn_graph *g)
{
    return g && g->validated ? g->fingerprint : NULL;
}

cairn_step *cairn__graph_step(const cairn_graph *g, const char *name)
{
    for (size_t i = 0; i < g->n_steps; i++)
        if (strcmp(g->steps[i]->name, name) == 0)
            return g->steps[i];
    return NULL;
}

cairn_step *cairn_graph_add_step(cairn_graph *g, const char *name, cairn_step_fn fn,
                                 const char *deps)
{
    if (!g || g->frozen)
        return NULL;
    if (!cairn__name_ok(name)) {
        snprintf(g->err, sizeof g->err,
                 "graph '%s': step name '%s' is not 1-64 characters of [A-Za-z0-9._-]", g->name,
                 name ? name : "(null)");
        return NULL;
    }
    if (!fn) {
        snprintf(g->err, sizeof g->err, "graph '%s': step '%s' has no function", g->name, name);
        return NULL;
    }
    if (cairn__graph_step(g, name)) {
        snprintf(g->err, sizeof g->err, "graph '%s': duplicate step name '%s'", g->name, name);
        return NULL;
    }
    if (g->n_steps == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 8;
        cairn_step **steps = realloc(g->steps, cap * sizeof *steps);
        if (!steps)
            return NULL;
        g->steps = steps, g->cap = cap;
    }
    cairn_step *s = calloc(1, sizeof *s);
    if (!s || (deps && !(s->deps_text = strdup(deps)))) {
        free(s);
        snprintf(g->err, sizeof g->err, "out of memory");
        return NULL;
    }
    strcpy(s->name, name);
    s->version = 1;
    s->fn = fn;
    s->delivery = CAIRN_COMPUTE;
    s->max_invocations = 3;
    s->base_ms = 200;
    s->cap_ms = 30000;
    s->index = g->n_steps;
    s->graph = g;
    g->steps[g->n_steps++] = s;
    g->validated = 0;
    return s;
}

/* Whether step `s` may change now: CAIRN_EINVAL without a step, CAIRN_EBUSY once its graph is
 * frozen. Each setter checks its argument after this and changes the step only when both pass. */
static int step_mutable(const cairn_step *s)
{
    if (!s)
        return CAIRN_EINVAL;
    return s->graph->frozen ? CAIRN_EBUSY : 0;
}

/* A change to a step makes the graph's validation (order, fingerprint, pin) stale. */
static void step_changed(cairn_step *s) { s->graph->validated = 0; }

int cairn_step_set_version(cairn_step *s, uint32_t v)
{
    int rc = step_mutable(s);
    if (rc || v == 0)
        return rc ? rc : CAIRN_EINVAL;
    s->version = v;
    step_changed(s);
    return 0;
}
int cairn_step_set_delivery(cairn_step *s, cairn_delivery d)
{
    int rc = step_mutable(s);
    if (rc || (unsigned)d > CAIRN_EFFECT_AT_LEAST_ONCE)
        return rc ? rc : CAIRN_EINVAL;
    s->delivery = d;
    step_changed(s);
    return 0;
}
int cairn_step_set_probe(cairn_step *s, cairn_probe_fn probe)
{
    int rc = step_mutable(s);
    if (rc)
        return rc;
    s->probe = probe;
    step_changed(s);
    return 0;
}
int cairn_step_set_user(cairn_step *s, void *user)
{
    int rc = step_mutable(s);
    if (rc)
        return rc;
    s->user = user;
    step_changed(s);
    return 0;
}
int cairn_step_set_retry(cairn_step *s, uint32_t max_inv, uint32_t base_ms, uint32_t cap_ms)
{
    int rc = step_mutable(s);
    if (rc || max_inv == 0 || cap_ms < base_ms)
        return rc ? rc : CAIRN_EINVAL;
    s->max_invocations = max_inv, s->base_ms = base_ms, s->cap_ms = cap_ms;
    step_changed(s);
    return 0;
}
int cairn_step_set_retry_budget(cairn_step *s, uint32_t max_elapsed_ms)
{
    int rc = step_mutable(s);
    if (rc)
        return rc;
    s->budget_ms = max_elapsed_ms;
    step_changed(s);
    return 0;
}
int cairn_step_set_timeout(cairn_step *s, uint32_t timeout_ms)
{
    int rc = step_mutable(s);
    if (rc)
        return rc;
    s->timeout_ms = timeout_ms;
    step_changed(s);
    return 0;
}
int cairn_step_set_expensive(cairn_step *s, int expensive)
{
    int rc = step_mutable(s);
    if (rc)
        return rc;
    s->expensive = !!expensive;
    step_changed(s);
    return 0;
}

/* Splits deps_text on commas into step indexes. */
static int resolve_deps(cairn_graph *g, cairn_step *s)
{
    free(s->deps);
    s->deps = NULL;
    s->n_deps = 0;
    if (!s->deps_text || !*s->deps_text)
        return 0;
    size_t cap = 1;
    for (const char *p = s->deps_text; *p; p++)
        cap += *p == ',';
    s->deps = calloc(cap, sizeof *s->deps);
    if (!s->deps)
        return CAIRN_ENOMEM;
    const char *p = s->deps_text;
    for (;;) { /* every comma-separated item must be a name: "a," and "a,,b" are refused */
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char name[65];
        if (n == 0 || n > 64) {
            snprintf(g->err, sizeof g->err,
                     "graph '%s': step '%s' has an empty or overlong "
                     "dependency name in \"%s\"",
                     g->name, s->name, s->deps_text);
            return CAIRN_EGRAPH;
        }
        memcpy(name, p, n);
        name[n] = 0;
        cairn_step *d = cairn__graph_step(g, name);
        if (!d) {
            snprintf(g->err, sizeof g->err, "graph '%s': step '%s' depends on unknown step '%s'",
                     g->name, s->name, name);
            return CAIRN_EGRAPH;
        }
        if (d == s) {
            snprintf(g->err, sizeof g->err, "graph '%s': step '%s' depends on itself", g->name,
                     s->name);
            return CAIRN_EGRAPH;
        }
        for (size_t i = 0; i < s->n_deps; i++)
            if (s->deps[i] == d->index) {
                snprintf(g->err, sizeof g->err, "graph '%s': step '%s' lists dependency '%s' twice",
                         g->name, s->name, name);
                return CAIRN_EGRAPH;
            }
        s->deps[s->n_deps++] = d->index;
        if (!e)
            break;
        p = e + 1;
    }
    return 0;
}

/* Kahn's algorithm, always taking the lowest-index ready step: a stable topological order. */
static int topo_order(cairn_graph *g)
{
    size_t n = g->n_steps, done = 0;
    unsigned char *placed = calloc(n, 1);
    free(g->order);
    g->order = calloc(n, sizeof *g->order);
    if (!placed || !g->order) {
        free(placed);
        return CAIRN_ENOMEM;
    }
    while (done < n) {
        size_t pick = n;
        for (size_t i = 0; i < n && pick == n; i++) {
            if (placed[i])
                continue;
            int ready = 1;
            for (size_t d = 0; d < g->steps[i]->n_deps; d++)
                ready &= placed[g->steps[i]->deps[d]];
            if (ready)
                pick = i;
        }
        if (pick == n) {
            /* every unplaced step has an unplaced dependency, so following them n times from
             * any unplaced step ends on the cycle (not on a step merely downstream of it) */
            size_t at = 0;
            while (placed[at])
                at++;
            for (size_t k = 0; k < n; k++) {
                const cairn_step *s = g->steps[at];
                for (size_t d = 0; d < s->n_deps; d++)
                    if (!placed[s->deps[d]]) {
                        at = s->deps[d];
                        break;
                    }
            }
            snprintf(g->err, sizeof g->err, "graph '%s': dependency cycle through step '%s'",
                     g->name, g->steps[at]->name);
            free(placed);
            return CAIRN_EGRAPH;
        }
        placed[pick] = 1;
        g->order[done++] = pick;
    }
    free(placed);
    return 0;
}

static void fingerprint(cairn_graph *g)
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned char h[32];
    unsigned hl = 0;
    char line[512];
    size_t pl = 0;
    EVP_DigestInit_ex(md, EVP_sha256(), NULL);
    int n = snprintf(line, sizeof line, "%s@%u\n", g->name, g->version);
    EVP_DigestUpdate(md, line, (size_t)n);
    g->pin[0] = 0;
    for (size_t i = 0; i < g->n_steps; i++) {
        const cairn_step *s = g->steps[g->order[i]];
        n = snprintf(line, sizeof line, "%s@%u:%d:%s\n", s->name, s->version, (int)s->delivery,
                     s->deps_text ? s->deps_text : "");
        EVP_DigestUpdate(md, line, (size_t)n);
        n = snprintf(g->pin + pl, sizeof g->pin - pl, "%s%s@%u", i ? "," : "", s->name, s->version);
        if (n > 0 && pl + (size_t)n < sizeof g->pin)
            pl += (size_t)n;
    }
    EVP_DigestFinal_ex(md, h, &hl);
    EVP_MD_CTX_free(md);
    for (unsigned i = 0; i < 32; i++)
        snprintf(g->fingerprint + 2 * i, 3, "%02x", h[i]);
}

int cairn_graph_validate(cairn_graph *g)
{
    if (!g)
        return CAIRN_EINVAL;
    if (g->frozen) /* validated when it was frozen, and unchanged since */
        return 0;
    if (g->n_steps == 0) {
        snprintf(g->err, sizeof g->err, "graph '%s' has no steps", g->name);
        return CAIRN_EGRAPH;
    }
    for (size_t i = 0; i < g->n_steps; i++) {
        int rc = resolve_deps(g, g->steps[i]);
        if (rc)
            return rc;
    }
    int rc = topo_order(g);
    if (rc)
        return rc;
    fingerprint(g);
    g->err[0] = 0;
    g->validated = 1;
    return 0;
}

/* xorshift64*: the jitter needs no cryptographic quality, only independence between processes
 * (the caller seeds it from the pid and clock). */
static uint64_t next_rand(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

uint32_t cairn__backoff_ms(const cairn_step *s, uint32_t invocations, uint64_t *rng)
{
    uint64_t ceiling = s->base_ms;
    for (uint32_t i = 1; i < invocations && ceiling < s->cap_ms; i++)
        ceiling *= 2;
    if (ceiling > s->cap_ms)
        ceiling = s->cap_ms;
    return (uint32_t)(next_rand(rng) % (ceiling + 1));
}

int cairn__budget_wait(const cairn_step *s, int64_t start_ms, int64_t now_ms, uint32_t backoff_ms,
                       uint32_t retry_after_ms, uint32_t *wait_ms)
{
    int64_t left = start_ms + (int64_t)s->budget_ms - now_ms;
    *wait_ms = 0;
    if (left <= 0)
        return 1;
    *wait_ms = (uint32_t)(left < UINT32_MAX ? left : UINT32_MAX);
    if (retry_after_ms > left) /* the receiver would refuse a try before then */
        return 2;
    uint32_t wait = backoff_ms > retry_after_ms ? backoff_ms : retry_after_ms;
    if (wait < *wait_ms) /* else the last try comes at the budget's end */
        *wait_ms = wait;
    return 0;
}
