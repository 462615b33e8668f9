/* tests/pipeline/test_pipeline_crash.c - the built-in pipeline killed with SIGKILL at every step
 * boundary and inside the steps, then resumed (suite crash).
 *
 * Aiming the kill: the runner is stepped. It runs for a short slice, is stopped with SIGSTOP,
 * and while it stands still the test looks at what is durable: the store (read through a
 * read-only LMDB handle of its own: which step records and which generation progress exist,
 * by key only), the outbox folder and the receiver's log. If the chosen point is reached, the
 * stopped runner gets SIGKILL, so the state it dies in is exactly the state that was seen;
 * otherwise SIGCONT and the next slice. Nothing depends on how fast the machine is; a point
 * that is only microseconds wide (between the postprocess commit and the notify intent) may
 * be stepped over, so such scenarios try again with a fresh store, and report a skip (not a
 * pass) if they never land. The key layout read here is the store's: "<task>\0<step>\0<gen:be32>"
 * in the `steps` and `progress` databases up to schema 5; from schema 6 step records are
 * "<task>\0s<step>\0<gen:be32>" in `tasks` (a kind byte after the task's NUL); if
 * it changes, the aiming breaks loudly (the wide windows are asserted), the invariants do not
 * depend on it.
 *
 * After each kill the task is resumed with the same command (--max-attempts 100). Checked per
 * task: the committed generate output (text, model_sha256) never changes and generate never
 * runs again once committed; after a kill mid-generation the final output has resumed_tokens >
 * 0 and generated_tokens < completion_tokens, and its text equals an uninterrupted run of the
 * same task ID under the same generate settings on a fresh store (same seed, exact resume); the
 * receiver sees at most one delivery per task and target at most once, and the same webhook-id
 * on every attempt at least once; the outbox holds exactly one complete <task>.json (a killed
 * publisher may leave a `.<task>.json.tmp` file (reused by the next publish), which is tolerated
 * because nothing ever reads it; any other file is an error); the task ends succeeded, or in doubt
 * where the kill fell inside the POST (then `resolve` settles it and a run finishes it without
 * sending again).
 */
#include <errno.h>
#include <lmdb.h>

#include "pipeline_common.h"

/* ------------------------------------------------------------------ looking at the store */

typedef struct peek_env {
    MDB_env *env;
    MDB_txn *txn; /* a reset read transaction: renewed per look, so no lock is ever taken */
    MDB_dbi tasks, steps, progress; /* schema 6: steps is tasks */
    int kinds; /* schema 6: a kind byte ('s') follows the task's NUL in a step record's key */
} peek_env;

typedef struct peek {
    int task, retrieve, generate, postprocess, notify;
    size_t progress_len; /* size of generate's progress record (grows with the tokens) */
    int outbox_file;     /* <task>.json exists */
    size_t hooks;        /* receiver requests on the scenario's path */
} peek;

static int peek_open(peek_env *pe, const char *store)
{
    memset(pe, 0, sizeof *pe);
    MDB_txn *t = NULL;
    int rc = 0;
    if (mdb_env_create(&pe->env) || mdb_env_set_maxdbs(pe->env, 16) ||
        mdb_env_open(pe->env, store, MDB_RDONLY | MDB_NOTLS, 0600) ||
        mdb_txn_begin(pe->env, NULL, MDB_RDONLY, &t) || mdb_dbi_open(t, "tasks", 0, &pe->tasks) ||
        mdb_dbi_open(t, "progress", 0, &pe->progress) ||
        ((rc = mdb_dbi_open(t, "steps", 0, &pe->steps)) != 0 && rc != MDB_NOTFOUND) ||
        mdb_txn_commit(t)) {
        diag("cannot open %s read-only", store);
        return -1;
    }
    if (rc == MDB_NOTFOUND) { /* schema 6: a task's step records are in tasks */
        pe->kinds = 1;
        pe->steps = pe->tasks;
    }
    if (mdb_txn_begin(pe->env, NULL, MDB_RDONLY, &pe->txn))
        return -1;
    mdb_txn_reset(pe->txn);
    return 0;
}

static void peek_close(peek_env *pe)
{
    if (pe->txn)
        mdb_txn_abort(pe->txn);
    if (pe->env)
        mdb_env_close(pe->env);
    memset(pe, 0, sizeof *pe);
}

static void peek_store(peek_env *pe, peek *p)
{
    if (mdb_txn_renew(pe->txn))
        return;
    MDB_val k = {strlen(PL_TASK), (void *)PL_TASK}, v;
    p->task = mdb_get(pe->txn, pe->tasks, &k, &v) == 0;
    char prefix[64]; /* "<task>\0", then 's' in schema 6 */
    size_t pl_len =
        (size_t)snprintf(prefix, sizeof prefix, "%s%c%s", PL_TASK, 0, pe->kinds ? "s" : "");
    MDB_cursor *c;
    if (mdb_cursor_open(pe->txn, pe->steps, &c) == 0) {
        k = (MDB_val){pl_len, prefix};
        for (int rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE); rc == 0;
             rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
            if (k.mv_size < pl_len + 5 || memcmp(k.mv_data, prefix, pl_len) != 0)
                break;
            const char *name = (const char *)k.mv_data + pl_len;
            size_t n = k.mv_size - pl_len - 5;
            p->retrieve |= n == 8 && !memcmp(name, "retrieve", 8);
            p->generate |= n == 8 && !memcmp(name, "generate", 8);
            p->postprocess |= n == 11 && !memcmp(name, "postprocess", 11);
            p->notify |= n == 11 && !memcmp(name, "notify.shop", 11);
        }
        mdb_cursor_close(c);
    }
    if (mdb_cursor_open(pe->txn, pe->progress, &c) == 0) {
        char gp[80];
        size_t gl = (size_t)snprintf(gp, sizeof gp, "%s%cgenerate", PL_TASK, 0) + 1;
        k = (MDB_val){gl, gp};
        for (int rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE); rc == 0;
             rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
            if (k.mv_size < gl || memcmp(k.mv_data, gp, gl) != 0)
                break;
            p->progress_len = v.mv_size;
        }
        mdb_cursor_close(c);
    }
    mdb_txn_reset(pe->txn);
}

/* ------------------------------------------------------------------ scenarios */

typedef struct scen scen;
typedef int (*pred_fn)(const scen *s, const peek *p);

struct scen {
    const char *name;
    int big;              /* the big model (generation takes about a second or more) */
    const char *plan;     /* last path segment on the receiver */
    const char *delivery; /* of notify.shop */
    pred_fn pred;         /* where to kill */
    long slice_us;
    int tries;            /* attempts to land in the window */
    int required;         /* the window is wide: missing it is a failure, not a skip */
    int kills;            /* kills in a row (each aimed by pred, resuming in between) */
    size_t progress_gap;  /* mid-generation: kill once progress grew by more than this */
    size_t last_progress; /* progress size at the previous kill */
};

static int at_admitted(const scen *s, const peek *p) { return (void)s, p->task && !p->retrieve; }
static int at_retrieved(const scen *s, const peek *p)
{
    return (void)s, p->retrieve && !p->progress_len && !p->generate;
}
static int at_mid_generation(const scen *s, const peek *p)
{
    /* a progress record is ~150 bytes plus ~2 per token: the gap sets how deep the kill is */
    return p->progress_len > s->last_progress + s->progress_gap && !p->generate;
}
static int at_generated(const scen *s, const peek *p)
{
    return (void)s, p->generate && !p->outbox_file && !p->postprocess;
}
static int at_published(const scen *s, const peek *p)
{
    return (void)s, p->outbox_file && !p->postprocess;
}
static int at_postprocessed(const scen *s, const peek *p)
{
    return (void)s, p->postprocess && !p->notify;
}
static int at_intent(const scen *s, const peek *p) { return (void)s, p->notify && !p->hooks; }
static int at_in_flight(const scen *s, const peek *p) { return (void)s, p->hooks > 0; }

static char *g_small, *g_big;
static char *g_base_text[2], *g_base_sha[2];
static int g_violations;

static void violation(const char *scen_name, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void violation(const char *scen_name, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("# VIOLATION %s: ", scen_name);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    g_violations++;
}

/* The configuration of a scenario: the sample pipeline on the small or the big model, no stop
 * sequence (every run generates max_tokens), progress every 4 tokens. */
static json_t *crash_config(int big, const char *outbox, const char *path, const char *delivery)
{
    json_t *c = pl_config(big ? g_big : g_small, outbox, path);
    json_t *g = pl_section(c, "generate");
    json_object_del(g, "stop");
    json_object_set_new(g, "max_tokens", json_integer(big ? 256 : 48));
    json_object_set_new(g, "progress_every", json_integer(4));
    json_object_set_new(g, "ctx", json_integer(1024));
    json_t *t = json_array_get(pl_section(c, "notify"), 0);
    json_object_set_new(t, "delivery", json_string(delivery));
    json_object_set_new(t, "timeout_ms", json_integer(20000));
    return c;
}

/* An uninterrupted run of the task on a fresh store: the text every interrupted run must end
 * with. */
static void baseline(int big)
{
    char *dir = pl_dir("baseline-%d", big), *store = tu_fmt("%s/store", dir);
    char *outbox = pl_dir("baseline-%d/outbox", big), *path = tu_fmt("/baseline-%d/hook", big);
    char *config =
        pl_write_config(crash_config(big, outbox, path, "at_most_once"), dir, "config.json");
    tu_result r;
    int rc = pl_run(&r, store, config, NULL, NULL);
    json_t *t = pl_show(store, PL_TASK);
    long long ct = pl_out_int(t, "generate", "completion_tokens");
    /* the random model may draw its end-of-text token before max_tokens: enough tokens for
     * the mid-generation kills (~48 in) is what matters */
    ok(rc == 0 && ct >= (big ? 96 : 8) && ct <= (big ? 256 : 48),
       "baseline (%s model): uninterrupted run succeeds with "
       "%lld tokens (%d: %s)",
       big ? "big" : "small", ct, rc, pl_oneline(r.err));
    tu_result_free(&r);
    g_base_text[big] = strdup(pl_out(t, "generate", "text"));
    g_base_sha[big] = strdup(pl_out(t, "generate", "model_sha256"));
    json_decref(t);
    free(dir), free(store), free(outbox), free(path), free(config);
}

typedef struct run_ctx {
    const scen *s;
    char *dir, *store, *outbox, *path, *config, *ofile;
    peek_env pe;
    json_t *gen; /* generate's step record when first seen committed */
    int attempt_runs;
} run_ctx;

/* Starts `cairn run` of the task in the background (own process group). */
static pid_t spawn_run(run_ctx *rc)
{
    const char *argv[] = {
        pl.cairn,   "run",        "--store",        rc->store,     "--config",
        rc->config, "--graph",    "default",        "--task-from", "tenant,product_id",
        "--input",  pl.task_json, "--max-attempts", "100",         NULL};
    const char *env[] = {"CAIRN_WEBHOOK_SECRET=" PL_SECRET, NULL};
    char *out = tu_fmt("%s/run.out", rc->dir), *err = tu_fmt("%s/run.err", rc->dir);
    pid_t pid = tu_spawn(argv, env, out, err);
    free(out), free(err);
    rc->attempt_runs++;
    return pid;
}

static void look(run_ctx *rc, peek *p)
{
    memset(p, 0, sizeof *p);
    peek_store(&rc->pe, p);
    struct stat st;
    p->outbox_file = stat(rc->ofile, &st) == 0;
    p->hooks = pl_hook_count(rc->path);
}

/* Steps the runner until s->pred holds, then kills it. 1: killed there (*at = what was seen);
 * 0: the run ended first (*code); -1: gave up after a long time. */
static int step_and_kill(run_ctx *rc, pid_t pid, peek *at, int *code)
{
    int64_t end = tu_now_ms() + 150000;
    for (;;) {
        tu_sleep_us(rc->s->slice_us);
        kill(-pid, SIGSTOP);
        int st;
        pid_t w;
        while ((w = waitpid(pid, &st, WUNTRACED)) < 0 && errno == EINTR)
            ;
        if (w == pid && (WIFEXITED(st) || WIFSIGNALED(st))) {
            *code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            return 0;
        }
        look(rc, at);
        if (rc->s->pred(rc->s, at)) {
            kill(-pid, SIGKILL);
            kill(-pid, SIGCONT);
            while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
                ;
            return 1;
        }
        kill(-pid, SIGCONT);
        if (tu_now_ms() > end) {
            tu_kill_wait(pid);
            return -1;
        }
    }
}

static const char *describe(const peek *p)
{
    static char b[160];
    snprintf(b, sizeof b,
             "task=%d retrieve=%d progress=%zuB generate=%d outbox=%d post=%d "
             "notify=%d requests=%zu",
             p->task, p->retrieve, p->progress_len, p->generate, p->outbox_file, p->postprocess,
             p->notify, p->hooks);
    return b;
}

/* After a kill: generate's committed output must never change once seen. */
static void observe(run_ctx *rc)
{
    json_t *t = pl_show(rc->store, PL_TASK);
    json_t *g = t ? pl_step(t, "generate") : NULL;
    if (g && !strcmp(pl_str(g, "status"), "done")) {
        if (!rc->gen)
            rc->gen = json_deep_copy(g);
        else if (!json_equal(rc->gen, g))
            violation(rc->s->name, "generate's committed record changed (text %s -> %s)",
                      pl_oneline(pl_str(json_object_get(rc->gen, "output"), "text")),
                      pl_oneline(pl_str(json_object_get(g, "output"), "text")));
    }
    json_decref(t);
}

/* Runs one attempt of a scenario; returns 1 if every kill landed where aimed, 0 if the run went
 * past the window (nothing is checked then: the caller tries again). */
static int scenario_attempt(const scen *s0, int k)
{
    scen s = *s0;
    run_ctx rc = {.s = &s};
    rc.dir = pl_dir("%s-%d", s.name, k);
    rc.store = tu_fmt("%s/store", rc.dir);
    rc.outbox = pl_dir("%s-%d/outbox", s.name, k);
    rc.path = tu_fmt("/%s-%d/%s", s.name, k, s.plan);
    rc.ofile = tu_fmt("%s/%s.json", rc.outbox, PL_TASK);
    rc.config =
        pl_write_config(crash_config(s.big, rc.outbox, rc.path, s.delivery), rc.dir, "config.json");
    tu_result r;
    /* create the store (and its databases) so the read-only handle can open it */
    if (pl_cairn(&r, "init", "--store", rc.store, (const char *)NULL) != 0 ||
        peek_open(&rc.pe, rc.store) != 0) {
        ok(0, "%s: cannot prepare the store: %s", s.name, pl_oneline(r.err));
        tu_result_free(&r);
        return 1;
    }
    tu_result_free(&r);

    int landed = 1;
    peek at, first_at;
    memset(&first_at, 0, sizeof first_at);
    for (int i = 0; i < s.kills && landed; i++) {
        int code = 0;
        pid_t pid = spawn_run(&rc);
        int hit = step_and_kill(&rc, pid, &at, &code);
        if (hit != 1) {
            diag("%s try %d: kill %d missed the window (run ended with %d; %s)", s.name, k, i + 1,
                 code, hit < 0 ? "gave up" : "went past it");
            landed = 0;
            break;
        }
        if (i == 0)
            first_at = at;
        diag("%s try %d: killed at %s", s.name, k, describe(&at));
        s.last_progress = at.progress_len;
        observe(&rc);
    }
    if (!landed) {
        peek_close(&rc.pe);
        json_decref(rc.gen);
        free(rc.dir), free(rc.store), free(rc.outbox), free(rc.path), free(rc.ofile),
            free(rc.config);
        return 0;
    }
    int v0 = g_violations;
    /* resume with the same command */
    int code = pl_run(&r, rc.store, rc.config, NULL, NULL);
    int in_doubt = 0;
    char doubt_dlv[64] = "";
    if (code == 69 && tu_contains(r.err, "CAIRN_EINDOUBT")) {
        in_doubt = 1;
        /* a step settled by `resolve --done` has no output: its delivery ID is in the message */
        const char *d = strstr(r.err, "dlv_");
        if (d)
            snprintf(doubt_dlv, sizeof doubt_dlv, "%.*s", (int)strspn(d, "dlv_0123456789abcdef"),
                     d);
        if (strcmp(s.delivery, "at_most_once") != 0)
            violation(s.name, "in doubt although the target is at least once: %s",
                      pl_oneline(r.err));
        /* the operator looks at the receiver and settles the doubt accordingly */
        size_t got = pl_hook_count(rc.path);
        tu_result r2;
        int rrc = pl_cairn(&r2, "resolve", "--store", rc.store, PL_TASK, "--step", "notify.shop",
                           got ? "--done" : "--not-done", (const char *)NULL);
        if (rrc != 0)
            violation(s.name, "resolve exited %d: %s", rrc, pl_oneline(r2.err));
        tu_result_free(&r2);
        tu_result_free(&r);
        code = pl_run(&r, rc.store, rc.config, NULL, NULL);
        if (pl_hook_count(rc.path) != (got ? got : 1))
            violation(s.name, "after resolve: %zu deliveries (had %zu)", pl_hook_count(rc.path),
                      got);
    }
    if (code != 0)
        violation(s.name, "resume exited %d: %s", code, pl_oneline(r.err));
    tu_result_free(&r);
    observe(&rc);

    json_t *t = pl_show(rc.store, PL_TASK);
    if (!t || strcmp(pl_str(t, "status"), "succeeded") != 0)
        violation(s.name, "final status %s", t ? pl_str(t, "status") : "(none)");
    const char *text = pl_out(t, "generate", "text");
    if (strcmp(text, g_base_text[s.big]) != 0 ||
        strcmp(pl_out(t, "generate", "model_sha256"), g_base_sha[s.big]) != 0)
        violation(s.name, "the final text differs from the uninterrupted run's:\n  %s\n  %s",
                  pl_oneline(text), pl_oneline(g_base_text[s.big]));
    long long resumed = pl_out_int(t, "generate", "resumed_tokens");
    long long generated = pl_out_int(t, "generate", "generated_tokens");
    long long total = pl_out_int(t, "generate", "completion_tokens");
    if (s.pred == at_mid_generation) {
        ok(resumed > 0 && generated < total && resumed + generated == total,
           "%s: generation resumed: %lld tokens resumed, %lld generated, %lld in all", s.name,
           resumed, generated, total);
    } else if (!first_at.progress_len && resumed != 0 && rc.gen == NULL) {
        violation(s.name, "killed before any progress, yet %lld tokens were resumed", resumed);
    }
    if (rc.gen && json_integer_value(json_object_get(pl_step(t, "generate"), "invocations")) !=
                      json_integer_value(json_object_get(rc.gen, "invocations")))
        violation(s.name, "generate ran again after it was committed");

    /* what the receiver got */
    json_t *hooks = pl_log(pl.rlog, "path", rc.path);
    size_t n = json_array_size(hooks);
    const char *dlv = pl_out(t, "notify.shop", "delivery_id");
    if (!*dlv)
        dlv = doubt_dlv;
    if (!*dlv)
        violation(s.name, "no delivery ID in the notify output or the in-doubt message");
    int at_least = !strcmp(s.delivery, "at_least_once");
    if (!at_least && n > 1)
        violation(s.name, "%zu deliveries at most once", n);
    if (n < 1)
        violation(s.name, "no delivery at all");
    size_t i;
    json_t *h;
    json_array_foreach(hooks, i, h)
    {
        if (strcmp(pl_str(json_object_get(h, "headers"), "webhook-id"), dlv) != 0)
            violation(s.name, "request %zu has webhook-id %s, the step's delivery ID is %s", i,
                      pl_str(json_object_get(h, "headers"), "webhook-id"), dlv);
        if (!json_is_true(json_object_get(h, "sig_valid")))
            violation(s.name, "request %zu: signature not valid (%s)", i, pl_str(h, "sig_reason"));
        json_t *b = json_loads(pl_str(h, "body"), 0, NULL);
        if (!b || strcmp(pl_str(json_object_get(b, "result"), "text"),
                         pl_out(t, "postprocess", "text")) != 0)
            violation(s.name, "request %zu does not carry the postprocess text", i);
        json_decref(b);
    }
    json_decref(hooks);
    if (pl_check_outbox(rc.outbox, PL_TASK, pl_out(t, "postprocess", "text"), 1, s.name) != 0)
        violation(s.name, "outbox check failed");

    /* once more: nothing changes, nothing is sent */
    code = pl_run(&r, rc.store, rc.config, NULL, NULL);
    json_t *t2 = pl_show(rc.store, PL_TASK);
    if (code != 0 || !t2 || !json_equal(pl_step(t, "generate"), pl_step(t2, "generate")) ||
        pl_hook_count(rc.path) != n)
        violation(s.name, "a run of the finished task changed something (exit %d)", code);
    tu_result_free(&r);

    ok(g_violations == v0,
       "%s: killed %d time(s) (first at %s), resumed%s: %s, %zu "
       "request(s) with webhook-id %s, outbox complete",
       s.name, s.kills, describe(&first_at), in_doubt ? " (in doubt, settled)" : "",
       t ? pl_str(t, "status") : "-", n, dlv);
    if (s.pred == at_in_flight)
        ok(at_least ? (!in_doubt && n == 2) : (in_doubt && n == 1), "%s: %s", s.name,
           at_least ? "at least once: sent again with the same webhook-id, no doubt"
                    : "at most once: in doubt on resume, settled done, one delivery");
    json_decref(t), json_decref(t2);
    peek_close(&rc.pe);
    json_decref(rc.gen);
    free(rc.dir), free(rc.store), free(rc.outbox), free(rc.path), free(rc.ofile), free(rc.config);
    return 1;
}

static void scenario(const scen *s)
{
    for (int k = 1; k <= s->tries; k++)
        if (scenario_attempt(s, k))
            return;
    if (s->required)
        ok(0, "%s: the kill never landed in its window in %d tries", s->name, s->tries);
    else
        skip("%s: the window (microseconds wide) was stepped over in %d tries", s->name, s->tries);
}

int main(int argc, char **argv)
{
    pl_setup(argc, argv, "pipeline-crash");
    g_small = pl_model("small.gguf", "--type", "f32", (const char *)NULL);
    g_big = pl_model("big.gguf", "--dim", "512", "--layers", "8", "--vocab", "512", "--ctx", "1024",
                     "--type", "f32", (const char *)NULL);
    baseline(0);
    baseline(1);
    const scen list[] = {
        /* name, big, plan, delivery, where, slice_us, tries, required, kills, progress_gap */
        {"admitted", 0, "hook", "at_most_once", at_admitted, 100, 12, 0, 1, 0, 0},
        {"retrieved", 1, "hook", "at_most_once", at_retrieved, 1000, 3, 1, 1, 0, 0},
        {"mid-generation", 1, "hook", "at_most_once", at_mid_generation, 3000, 3, 1, 1, 250, 0},
        {"mid-generation-twice", 1, "hook", "at_most_once", at_mid_generation, 3000, 3, 1, 2, 100,
         0},
        {"generated", 0, "hook", "at_most_once", at_generated, 100, 12, 0, 1, 0, 0},
        {"published", 0, "hook", "at_most_once", at_published, 100, 12, 0, 1, 0, 0},
        {"postprocessed", 0, "hook", "at_most_once", at_postprocessed, 100, 12, 0, 1, 0, 0},
        {"intent", 0, "hook", "at_most_once", at_intent, 100, 12, 0, 1, 0, 0},
        {"in-flight", 0, "delay:3000,ok", "at_most_once", at_in_flight, 2000, 3, 1, 1, 0, 0},
        {"in-flight-alo", 0, "delay:3000,ok", "at_least_once", at_in_flight, 2000, 3, 1, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof list / sizeof *list; i++)
        scenario(&list[i]);
    ok(g_violations == 0, "no invariant violated (%d violations)", g_violations);
    free(g_small), free(g_big);
    for (int i = 0; i < 2; i++)
        free(g_base_text[i]), free(g_base_sha[i]);
    pl_teardown();
    return tap_done();
}
