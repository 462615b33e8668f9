/* test_semantics.c - operator actions and stop requests through the C API: invalidate re-runs
 * only what depends on the step, resolve starts the attempt count again, a stopped runner starts
 * nothing, a deferred run does not consume its message, gc with "forever" keeps everything. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cairn.h"
#include "tests/tap.h"

static int calls[8];

/* step i counts its calls; user = index */
static cairn_step_result counted(cairn_ctx *c, void *user)
{
    (void)c;
    calls[(intptr_t)user]++;
    return CAIRN_STEP_OK;
}

static cairn_runner *g_stop_me;

static cairn_step_result stopper(cairn_ctx *c, void *user)
{
    (void)c;
    calls[(intptr_t)user]++;
    cairn_runner_stop(g_stop_me);
    return CAIRN_STEP_OK;
}

static cairn_step_result unknown_effect(cairn_ctx *c, void *user)
{
    (void)c;
    calls[(intptr_t)user]++;
    return calls[(intptr_t)user] == 1 ? CAIRN_STEP_UNKNOWN : CAIRN_STEP_OK;
}

static char dir[256];

static cairn_store *store(const char *name)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    cairn_store *s = cairn_store_new();
    cairn_store_set_durability(s, CAIRN_NOSYNC);
    if (cairn_store_open(s, path))
        diag("store: %s", cairn_store_errmsg(s));
    return s;
}

/* A runner on s for g, not yet open: settings are taken only before cairn_runner_open. */
static cairn_runner *runner_config(cairn_store *s, cairn_graph *g)
{
    cairn_runner *r = cairn_runner_new();
    cairn_runner_set_store(r, s);
    cairn_runner_add_graph(r, g);
    return r;
}

static cairn_runner *opened(cairn_runner *r)
{
    cairn_runner_open(r);
    return r;
}

static cairn_runner *runner(cairn_store *s, cairn_graph *g) { return opened(runner_config(s, g)); }

static int run(cairn_runner *r, const char *graph, const char *id, const char *in, const char *msg)
{
    return cairn_runner_run(r, graph, id, NULL, in, strlen(in), msg, NULL, 0);
}

static void invalidate_downstream_only(void)
{
    /* a -> b, and c on its own (an effect that must not be repeated by invalidating a) */
    cairn_graph *g = cairn_graph_new("inv", 1);
    cairn_step_set_user(cairn_graph_add_step(g, "a", counted, NULL), (void *)0);
    cairn_step_set_user(cairn_graph_add_step(g, "b", counted, "a"), (void *)1);
    cairn_step *c = cairn_graph_add_step(g, "c", counted, NULL);
    cairn_step_set_user(c, (void *)2);
    cairn_step_set_delivery(c, CAIRN_EFFECT);
    cairn_store *s = store("inv");
    cairn_runner *r = runner(s, g);
    memset(calls, 0, sizeof calls);
    ok(run(r, "inv", "t1", "{}", NULL) == 0 && calls[0] == 1 && calls[1] == 1 && calls[2] == 1,
       "first run: each step once");
    ok(cairn_runner_invalidate(r, "t1", "a") == 0, "invalidate from a");
    ok(cairn_runner_resume(r, "t1") == 0 && calls[0] == 2 && calls[1] == 2 && calls[2] == 1,
       "a and b (downstream) ran again, the independent effect c did not (a %d b %d c %d)",
       calls[0], calls[1], calls[2]);
    ok(cairn_runner_invalidate(r, "t1", NULL) == 0 && cairn_runner_resume(r, "t1") == 0 &&
           calls[0] == 3 && calls[1] == 3 && calls[2] == 2,
       "invalidate without a step: everything runs again");
    ok(cairn_runner_invalidate(r, "t1", "nosuch") == CAIRN_ENOTFOUND, "unknown step: ENOTFOUND");
    cairn_runner_free(r);
    cairn_store_free(s);
    cairn_graph_free(g);
}

/* a -> b -> c. The task ran with b@1; the program now has b@2. Invalidating from c would also
 * redo b (changed) — the paid step, upstream of c: refused unless the graph change is allowed. */
static void invalidate_respects_pinning(void)
{
    cairn_graph *g1 = cairn_graph_new("pin", 1), *g2 = cairn_graph_new("pin", 1);
    cairn_graph *gs[2] = {g1, g2};
    for (int i = 0; i < 2; i++) {
        cairn_step_set_user(cairn_graph_add_step(gs[i], "a", counted, NULL), (void *)0);
        cairn_step *b = cairn_graph_add_step(gs[i], "b", counted, "a");
        cairn_step_set_user(b, (void *)1);
        cairn_step_set_version(b, (uint32_t)i + 1);
        cairn_step_set_user(cairn_graph_add_step(gs[i], "c", counted, "b"), (void *)2);
    }
    cairn_store *s = store("pin");
    cairn_runner *r1 = runner(s, g1);
    memset(calls, 0, sizeof calls);
    ok(run(r1, "pin", "t1", "{}", NULL) == 0, "the task ran with b@1");
    cairn_runner_free(r1);
    cairn_runner *r2 = runner(s, g2);
    int rc = cairn_runner_invalidate(r2, "t1", "c");
    const char *m = cairn_runner_errmsg(r2);
    ok(rc == CAIRN_EGRAPHCHANGED && strstr(m, "'b'") && !strstr(m, "--allow-graph-change"),
       "invalidate from c under b@2: CAIRN_EGRAPHCHANGED naming b, without the CLI's "
       "--allow-graph-change (\"%s\")",
       m);
    cairn_task *t = NULL;
    ok(cairn_task_load(s, "t1", &t) == 0 && cairn_task_state(t) == CAIRN_SUCCEEDED,
       "and the task is left as it was");
    cairn_task_free(t);
    cairn_runner_free(r2);
    r2 = runner_config(s, g2);
    cairn_runner_set_allow_graph_change(r2, 1);
    opened(r2);
    rc = cairn_runner_invalidate(r2, "t1", "c");
    if (rc == 0)
        rc = cairn_runner_resume(r2, "t1");
    ok(rc == 0 && calls[0] == 1 && calls[1] == 2 && calls[2] == 2,
       "allowed: b (changed) and c run again, a does not (a %d b %d c %d)", calls[0], calls[1],
       calls[2]);
    cairn_runner_free(r2);
    cairn_store_free(s);
    cairn_graph_free(g1);
    cairn_graph_free(g2);
}

static void resolve_resets_attempts(void)
{
    cairn_graph *g = cairn_graph_new("res", 1);
    cairn_step_set_user(cairn_graph_add_step(g, "a", counted, NULL), (void *)0);
    cairn_step *e = cairn_graph_add_step(g, "e", unknown_effect, "a");
    cairn_step_set_user(e, (void *)1);
    cairn_step_set_delivery(e, CAIRN_EFFECT);
    cairn_step_set_user(cairn_graph_add_step(g, "z", counted, "e"), (void *)2);
    cairn_store *s = store("res");
    cairn_runner *r = runner_config(s, g);
    cairn_runner_set_max_attempts(r, 1);
    opened(r);
    memset(calls, 0, sizeof calls);
    ok(run(r, "res", "t1", "{}", NULL) == CAIRN_EINDOUBT, "effect outcome unknown: in doubt");
    const char *m = cairn_runner_errmsg(r);
    ok(strstr(m, "in doubt") && strstr(m, "'e'") && !strstr(m, "cairn ") && !strstr(m, "--"),
       "the library's message states the situation, with no `cairn ...` advice (\"%s\")", m);
    char long_name[300];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = 0;
    ok(cairn_runner_resolve(r, "t1", long_name, 1) == CAIRN_EINVAL,
       "resolve with a 299-byte step name: CAIRN_EINVAL, no overflow");
    ok(cairn_runner_resolve(r, "t1", "e", 1) == 0, "resolved as done");
    ok(cairn_runner_resume(r, "t1") == 0 && calls[2] == 1,
       "on its last allowed attempt, the resolved task still finishes (attempts start again)");
    cairn_runner_free(r);
    cairn_store_free(s);
    cairn_graph_free(g);
}

static void stop_is_final(void)
{
    cairn_graph *g = cairn_graph_new("st", 1);
    cairn_step_set_user(cairn_graph_add_step(g, "a", stopper, NULL), (void *)0);
    cairn_step_set_user(cairn_graph_add_step(g, "b", counted, "a"), (void *)1);
    cairn_store *s = store("st");
    cairn_runner *r = runner(s, g);
    g_stop_me = r;
    memset(calls, 0, sizeof calls);
    ok(run(r, "st", "t1", "{}", NULL) == CAIRN_EINTR && calls[1] == 0,
       "stop inside a: the run ends with EINTR, b never starts");
    ok(run(r, "st", "t2", "{}", NULL) == CAIRN_EINTR && calls[0] == 1,
       "a stopped runner admits nothing new");
    uint32_t n = 9;
    ok(cairn_runner_retry(r, NULL, 0, 1, &n, NULL, NULL) == CAIRN_EINTR && n == 0,
       "nor does retry run anything (EINTR)");
    cairn_runner_free(r);
    cairn_runner *r2 = runner(s, g);
    g_stop_me = NULL;
    cairn_task *t = NULL;
    ok(cairn_task_load(s, "t1", &t) == 0 && cairn_task_state(t) == CAIRN_FAILED,
       "the stopped task is failed (due now)");
    cairn_task_free(t);
    cairn_runner_free(r2);
    cairn_store_free(s);
    cairn_graph_free(g);
}

static cairn_runner *g_inner;
static int g_inner_rc;

/* runs x2 from message p0:1 through the inner runner while this task (x1) holds its lease;
 * counts its own calls in calls[1] when it runs as x2 */
static cairn_step_result nested(cairn_ctx *c, void *user)
{
    (void)user;
    if (strcmp(cairn_ctx_task_id(c), "x1") == 0) {
        static const char in[] = "{\"tenant\":\"acme\"}";
        g_inner_rc =
            cairn_runner_run(g_inner, "ten", "x2", NULL, in, sizeof in - 1, "p0:1", NULL, 0);
        calls[0]++;
    } else
        calls[1]++;
    return CAIRN_STEP_OK;
}

static void deferred_message_not_consumed(void)
{
    cairn_graph *g = cairn_graph_new("ten", 1);
    cairn_graph_add_step(g, "a", nested, NULL);
    cairn_store *s = store("ten");
    cairn_runner *r = runner_config(s, g);
    cairn_runner_set_tenant_limit(r, "tenant", 1);
    opened(r);
    ok(cairn_runner_run(r, "ten", "x1", NULL, "{\"tenant\":\"acme\"}", 17, "", NULL, 0) ==
           CAIRN_EINVAL,
       "an empty message ID is refused (EINVAL)");
    /* while x1 of tenant acme runs (its step is below), x2 of acme arrives from message p0:1 */
    g_inner = runner_config(s, g);
    cairn_runner_set_tenant_limit(g_inner, "tenant", 1);
    opened(g_inner);
    memset(calls, 0, sizeof calls);
    ok(run(r, "ten", "x1", "{\"tenant\":\"acme\",\"nested\":1}", NULL) == 0 &&
           g_inner_rc == CAIRN_ETENANT,
       "a second acme task while the first runs: CAIRN_ETENANT (%s)", cairn_errname(g_inner_rc));
    ok(run(g_inner, "ten", "x2", "{\"tenant\":\"acme\"}", "p0:1") == 0 && calls[1] == 1,
       "the redelivered message runs it: the refused run did not consume p0:1");
    ok(run(g_inner, "ten", "x2", "{\"tenant\":\"acme\"}", "p0:1") == 0 && calls[1] == 1,
       "a third delivery of p0:1 does nothing");
    cairn_runner_free(g_inner);
    g_inner = runner_config(s, g);
    cairn_runner_set_tenant_limit(g_inner, "tenant", 1);
    cairn_runner_set_retention(g_inner, 0, 0);
    opened(g_inner);
    uint32_t pruned = 0, removed = 0;
    ok(cairn_runner_gc(g_inner, &pruned, &removed) == 0 && removed == 2,
       "gc with no dedupe window removes both tasks (%u)", removed);
    ok(run(g_inner, "ten", "x2", "{\"tenant\":\"acme\"}", "p0:1") == 0 && calls[1] == 2,
       "and forgets message p0:1: past the window, its redelivery is a new message");
    cairn_runner_free(g_inner);
    g_inner = NULL;
    cairn_runner_free(r);
    cairn_store_free(s);
    cairn_graph_free(g);
}

static void gc_forever_keeps_everything(void)
{
    cairn_graph *g = cairn_graph_new("gc", 1);
    cairn_step_set_user(cairn_graph_add_step(g, "a", counted, NULL), (void *)0);
    cairn_store *s = store("gc");
    cairn_runner *r = runner(s, g);
    memset(calls, 0, sizeof calls);
    ok(run(r, "gc", "t1", "{}", NULL) == 0, "a task succeeded");
    cairn_runner_free(r);
    r = runner_config(s, g);
    ok(cairn_runner_set_retention(r, UINT64_MAX, UINT64_MAX) == 0, "retention 'forever'");
    opened(r);
    uint32_t pruned = 9, removed = 9;
    ok(cairn_runner_gc(r, &pruned, &removed) == 0 && pruned == 0 && removed == 0,
       "gc drops nothing (pruned %u, removed %u)", pruned, removed);
    ok(run(r, "gc", "t1", "{}", NULL) == 0 && calls[0] == 1, "the duplicate still does not run");
    cairn_runner_free(r);
    cairn_store_free(s);
    cairn_graph_free(g);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/cairn-semantics-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    invalidate_downstream_only();
    invalidate_respects_pinning();
    resolve_resets_attempts();
    stop_is_final();
    deferred_message_not_consumed();
    gc_forever_keeps_everything();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        diag("could not remove %s", dir);
    return tap_done();
}
