/* tests/pipeline/test_pipeline_retry.c - the built-in steps' retry budgets and hard timeouts
 * (steps/policy.h) end to end (suite integration): the real `cairn` binary, real receivers on
 * loopback that the test stops and starts, real stores.
 *
 * Outages. A webhook receiver is down for 60 s - first refusing connections (nothing listens
 * on its port), then, in a second store at the same time, up but answering 503 - and comes back
 * on the same port. The task is driven as cron would drive it: one `cairn run`, then `cairn
 * retry` calls, each a new process, every inline wait off so that every failure leaves the task
 * `failed` with a retry time. Checked: the task is never dead during the outage (the old budget,
 * 5 invocations, was spent in about 11 s), it succeeds once the receiver is back, the receiver
 * got exactly one delivery (the 503s aside, all with one webhook-id), and the step was tried
 * from before the outage to after it. A third store's receiver never comes back and its budget
 * is 4 s: the task dies, across processes, with a message naming the budget - so the budget is
 * measured from a point the store keeps, not from each process's start.
 *
 * Timeouts. Each built-in step with "timeout_s": 1 is made to hang for good (a search service
 * and a receiver that do not answer, a prompt the model needs far longer for, an outbox whose
 * temporary file is a FIFO no one reads): the run still ends, the step is stopped, and the task
 * is what the runner's timeout rule says - a compute step failed (due for `cairn retry`), an
 * effect in doubt (at most once) or failed and sent again with the same webhook-id (at least
 * once). They run while the receivers are down, to keep the test short.
 */
#include <netinet/in.h>
#include <sys/socket.h>

#include "pipeline_common.h"

#define OUTAGE_MS 60000
#define GIVE_UP_MS (OUTAGE_MS + 120000) /* the loop's own limit: only a broken build reaches it */

static char *g_model, *g_python;

/* ------------------------------------------------------------------ receivers */

/* A port on loopback that nothing listens on: bound but not listening, so connections are
 * refused and no other process can take the port until it is released. */
static int reserve_port(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &n) != 0) {
        printf("Bail out! cannot reserve a port\n");
        exit(1);
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* receiver.py LOG PORT [ACTION] (PORT 0: any); returns its pid and sets *port. */
static pid_t start_receiver(const char *log, int *port, const char *action, const char *tag)
{
    char *pf = tu_fmt("%s/%s.port", pl.tmp, tag), *ps = tu_fmt("%d", *port);
    const char *argv[] = {g_python, pl.receiver_py, log, ps, action, NULL};
    pid_t pid = tu_spawn(argv, NULL, pf, NULL);
    int got = 0;
    for (int64_t end = tu_now_ms() + 20000; pid > 0 && !got && tu_now_ms() < end;) {
        char *s = tu_read_file(pf, NULL);
        if (s && strchr(s, '\n'))
            got = atoi(s);
        free(s);
        if (!got && tu_poll_exit(pid, NULL))
            break;
        if (!got)
            tu_sleep_ms(20);
    }
    free(pf), free(ps);
    if (got <= 0 || (*port && got != *port)) {
        printf("Bail out! receiver %s did not start on port %d\n", tag, *port);
        exit(1);
    }
    *port = got;
    return pid;
}

/* ------------------------------------------------------------------ helpers */

static char *hook_url(int port, const char *path)
{
    return tu_fmt("http://127.0.0.1:%d%s", port, path);
}

static json_t *target(json_t *cfg) { return json_array_get(pl_section(cfg, "notify"), 0); }

/* `cairn retry` of a store as cron runs it (no inline waits); returns the exit code and sets
 * *ran to the number of tasks it ran. */
static int cron_retry(const char *store, const char *config, int *ran)
{
    tu_result r;
    int rc = pl_cairn(&r, "retry", "--store", store, "--config", config, "--max-attempts", "1000",
                      "--inline-wait-ms", "0", "--json", (const char *)NULL);
    json_t *j = json_loads(r.out, 0, NULL);
    *ran = j ? (int)json_integer_value(json_object_get(j, "ran")) : -1;
    if (!j)
        diag("retry --json does not parse (%d): %s %s", rc, r.out, pl_oneline(r.err));
    json_decref(j);
    tu_result_free(&r);
    return rc;
}

/* The audit trail's time of the first and last record of `step` whose reason starts with
 * `prefix` (0 when there is none). */
static void audit_times(const char *store, const char *step, const char *prefix, long long *first,
                        long long *last)
{
    tu_result r;
    *first = *last = 0;
    pl_cairn(&r, "audit", "--store", store, PL_TASK, "--json", (const char *)NULL);
    json_t *rows = json_loads(r.out, 0, NULL), *row;
    size_t i;
    json_array_foreach(rows, i, row)
    {
        if (strcmp(pl_str(row, "step"), step) ||
            strncmp(pl_str(row, "reason"), prefix, strlen(prefix)))
            continue;
        long long t = json_integer_value(json_object_get(row, "t_ms"));
        if (!*first)
            *first = t;
        *last = t;
    }
    json_decref(rows);
    tu_result_free(&r);
}

/* ------------------------------------------------------------------ timeouts */

/* A run with inline waits off; checks exit `want_rc` and that `step` stopped with the timeout's
 * message and the task in `want_state`. Returns the task (show --json) for more checks. */
static json_t *expect_timeout(const char *what, const char *store, const char *config,
                              const char *step, int want_rc, const char *want_state)
{
    tu_result r;
    int rc = pl_run(&r, store, config, "--inline-wait-ms", "0");
    ok(rc == want_rc && tu_contains(r.err, "timed out after 1000 ms (killed)"),
       "timeout (%s): the run ends, exit %d (want %d): %s", what, rc, want_rc, pl_oneline(r.err));
    tu_result_free(&r);
    json_t *t = pl_show(store, PL_TASK);
    ok(t && !strcmp(pl_str(t, "status"), want_state) && !strcmp(pl_str(t, "error_step"), step) &&
           tu_contains(pl_str(t, "error"), "timed out after 1000 ms (killed)"),
       "timeout (%s): the task is %s at %s (%s: %s)", what, want_state, step,
       t ? pl_str(t, "status") : "-", t ? pl_oneline(pl_str(t, "error")) : "-");
    if (!strcmp(want_state, "failed"))
        ok(t && json_is_integer(json_object_get(t, "next_retry_at_ms")),
           "timeout (%s): failed with a retry time, for cairn retry", what);
    return t;
}

static void t_timeout_retrieve(void)
{
    char *dir = pl_dir("to-retrieve"), *store = tu_fmt("%s/store", dir);
    char *outbox = pl_dir("to-retrieve/outbox");
    json_t *c = pl_config(g_model, outbox, "/to-retrieve/hook");
    char *url = hook_url(pl.rport, "/to-retrieve/_search/delay:600000");
    json_object_set_new(c, "retrieve",
                        json_pack("{s:s, s:s, s:[s], s:i, s:i}", "type", "http", "url", url,
                                  "query_fields", "title", "timeout_ms", 600000, "timeout_s", 1));
    char *config = pl_write_config(c, dir, "config.json");
    json_t *t = expect_timeout("retrieve", store, config, "retrieve", 75, "failed");
    ok(t && strcmp(pl_step_status(t, "generate"), "done") &&
           pl_hook_count("/to-retrieve/hook") == 0,
       "timeout (retrieve): nothing after it ran (generate %s)", pl_step_status(t, "generate"));
    json_decref(t);
    free(dir), free(store), free(outbox), free(url), free(config);
}

/* A prompt of some 14000 tokens on a model with a 16384-token context: seconds to minutes of
 * work even on a fast machine (42 s on a loaded 2-core one), never 1 s. */
static void t_timeout_generate(void)
{
    char *dir = pl_dir("to-generate"), *store = tu_fmt("%s/store", dir);
    char *outbox = pl_dir("to-generate/outbox");
    char *model = pl_model("slow.gguf", "--type", "f32", "--dim", "256", "--layers", "4", "--ff",
                           "512", "--ctx", "16384", (const char *)NULL);
    json_t *c = pl_config(model, outbox, "/to-generate/hook");
    char *prompt = malloc(2000 * 5 + sizeof "{{title}}");
    for (int i = 0; i < 2000; i++)
        memcpy(prompt + 5 * i, "word ", 5);
    strcpy(prompt + 2000 * 5, "{{title}}");
    json_t *g = pl_section(c, "generate");
    json_object_set_new(g, "prompt", json_string(prompt));
    json_object_set_new(g, "ctx", json_integer(16384));
    json_object_set_new(g, "timeout_s", json_integer(1));
    free(prompt);
    char *config = pl_write_config(c, dir, "config.json");
    json_t *t = expect_timeout("generate", store, config, "generate", 75, "failed");
    ok(t && !strcmp(pl_step_status(t, "retrieve"), "done") &&
           strcmp(pl_step_status(t, "postprocess"), "done") &&
           pl_hook_count("/to-generate/hook") == 0,
       "timeout (generate): retrieve done, nothing after generate ran");
    json_decref(t);
    free(dir), free(store), free(outbox), free(model), free(config);
}

/* The outbox's temporary file is a FIFO that no one reads: the publisher's open() blocks for
 * good, as on a hung file system. */
static void t_timeout_postprocess(void)
{
    char *dir = pl_dir("to-post"), *store = tu_fmt("%s/store", dir);
    char *outbox = pl_dir("to-post/outbox");
    char *fifo = tu_fmt("%s/.%s.json.tmp", outbox, PL_TASK);
    if (mkfifo(fifo, 0644) != 0)
        diag("mkfifo %s failed", fifo);
    json_t *c = pl_config(g_model, outbox, "/to-post/hook");
    json_object_set_new(pl_section(c, "postprocess"), "timeout_s", json_integer(1));
    char *config = pl_write_config(c, dir, "config.json");
    json_t *t = expect_timeout("postprocess", store, config, "postprocess", 75, "failed");
    char *final = tu_fmt("%s/%s.json", outbox, PL_TASK);
    struct stat st;
    ok(t && !strcmp(pl_step_status(t, "generate"), "done") && stat(final, &st) != 0 &&
           pl_hook_count("/to-post/hook") == 0,
       "timeout (postprocess): generate done, nothing published, nothing sent");
    json_decref(t);
    free(dir), free(store), free(outbox), free(fifo), free(final), free(config);
}

/* At most once: killed after the request went out, the effect is in doubt. */
static void t_timeout_notify_once(void)
{
    char *dir = pl_dir("to-once"), *store = tu_fmt("%s/store", dir);
    char *outbox = pl_dir("to-once/outbox");
    const char *path = "/to-once/delay:600000";
    json_t *c = pl_config(g_model, outbox, path);
    json_object_set_new(target(c), "timeout_ms", json_integer(600000));
    json_object_set_new(target(c), "timeout_s", json_integer(1));
    char *config = pl_write_config(c, dir, "config.json");
    json_t *t =
        expect_timeout("notify, at most once", store, config, "notify.shop", 69, "in_doubt");
    ok(!strcmp(pl_step_status(t, "notify.shop"), "in_doubt") && pl_hook_count(path) == 1,
       "timeout (notify, at most once): the step is in doubt, the receiver got 1 request (%zu)",
       pl_hook_count(path));
    json_decref(t);
    free(dir), free(store), free(outbox), free(config);
}

/* At least once: killed, the effect is sent again with the same webhook-id. The second run's
 * configuration has no timeout_s and another retry setting: no graph change. */
static void t_timeout_notify_again(void)
{
    char *dir = pl_dir("to-alo"), *store = tu_fmt("%s/store", dir);
    char *outbox = pl_dir("to-alo/outbox");
    const char *path = "/to-alo/delay:600000,ok";
    json_t *c = pl_config(g_model, outbox, path);
    json_object_set_new(target(c), "delivery", json_string("at_least_once"));
    json_object_set_new(target(c), "timeout_ms", json_integer(600000));
    json_t *c2 = json_deep_copy(c);
    json_object_set_new(target(c), "timeout_s", json_integer(1));
    json_object_set_new(target(c2), "retry", json_pack("{s:i}", "max_ms", 5000));
    char *config = pl_write_config(c, dir, "config.json");
    char *config2 = pl_write_config(c2, dir, "config2.json");
    json_t *t = expect_timeout("notify, at least once", store, config, "notify.shop", 75, "failed");
    json_decref(t);
    tu_result r;
    int rc = pl_run(&r, store, config2, NULL, NULL);
    ok(rc == 0,
       "timeout (notify, at least once): a run without timeout_s is no graph change and "
       "succeeds (%d: %s)",
       rc, pl_oneline(r.err));
    tu_result_free(&r);
    t = pl_show(store, PL_TASK);
    json_t *hooks = pl_log(pl.rlog, "path", path);
    const char *id0 = pl_str(json_object_get(json_array_get(hooks, 0), "headers"), "webhook-id");
    const char *id1 = pl_str(json_object_get(json_array_get(hooks, 1), "headers"), "webhook-id");
    ok(json_array_size(hooks) == 2 && !strcmp(id0, id1) &&
           !strcmp(id0, pl_out(t, "notify.shop", "delivery_id")),
       "timeout (notify, at least once): sent again with the same webhook-id (%zu requests)",
       json_array_size(hooks));
    json_decref(hooks);
    json_decref(t);
    free(dir), free(store), free(outbox), free(config), free(config2);
}

/* ------------------------------------------------------------------ outages */

typedef struct outage {
    const char *name;
    char *dir, *store, *config, *log, *path;
    int port, hold_fd, comes_back;
    pid_t pid;       /* the receiver now running on the port, if any */
    int up, done;    /* the receiver is back; the task left the loop (succeeded or dead) */
    int runs_down;   /* retry calls that ran the task while the receiver was down */
    int worst_down;  /* a retry call's exit code other than 0 and 75 while down (0: none) */
    int last_rc;     /* the exit code of the call that ended the loop for this task */
    int64_t down_ms; /* when the first run had failed: the receiver stays down OUTAGE_MS more */
} outage;

static void outage_init(outage *o, const char *name, const char *action, int comes_back,
                        json_t *retry)
{
    memset(o, 0, sizeof *o);
    o->name = name;
    o->comes_back = comes_back;
    o->dir = pl_dir("outage-%s", name);
    o->store = tu_fmt("%s/store", o->dir);
    o->log = tu_fmt("%s/receiver.jsonl", o->dir);
    o->path = tu_fmt("/outage-%s/hook", name);
    o->hold_fd = -1;
    if (action) /* up, but failing */
        o->pid = start_receiver(o->log, &o->port, action, name);
    else /* refused */
        o->hold_fd = reserve_port(&o->port);
    char *outbox = tu_fmt("%s/outbox", o->dir);
    mkdir(outbox, 0755);
    json_t *c = pl_config(g_model, outbox, o->path);
    char *url = hook_url(o->port, o->path);
    json_object_set_new(target(c), "url", json_string(url));
    json_object_set_new(target(c), "retry", retry);
    o->config = pl_write_config(c, o->dir, "config.json");
    free(url), free(outbox);
}

static void outage_bring_up(outage *o)
{
    if (o->pid > 0)
        tu_kill_wait(o->pid);
    if (o->hold_fd >= 0)
        close(o->hold_fd);
    o->hold_fd = -1;
    char *tag = tu_fmt("%s-up", o->name); /* a port file of its own: the old one is stale */
    o->pid = start_receiver(o->log, &o->port, NULL, tag);
    free(tag);
    o->up = 1;
}

static void outage_free(outage *o)
{
    if (o->pid > 0)
        tu_kill_wait(o->pid);
    if (o->hold_fd >= 0)
        close(o->hold_fd);
    free(o->dir), free(o->store), free(o->config), free(o->log), free(o->path);
}

/* One delivery arrived (2xx) and every request carried the step's delivery ID. */
static void check_delivered(outage *o)
{
    json_t *t = pl_show(o->store, PL_TASK);
    ok(t && !strcmp(pl_str(t, "status"), "succeeded"),
       "outage (%s): the task succeeded once the receiver was back (%s, last exit %d)", o->name,
       t ? pl_str(t, "status") : "-", o->last_rc);
    json_t *all = pl_log(o->log, "path", o->path), *rec;
    size_t i, delivered = 0, failed = 0, same_id = 1, signed_ok = 1;
    const char *dlv = pl_out(t, "notify.shop", "delivery_id");
    json_array_foreach(all, i, rec)
    {
        int ok200 = !strcmp(pl_str(rec, "action"), "ok");
        delivered += ok200;
        failed += !ok200;
        same_id &= !strcmp(pl_str(json_object_get(rec, "headers"), "webhook-id"), dlv);
        signed_ok &= json_is_true(json_object_get(rec, "sig_valid"));
    }
    ok(delivered == 1 && same_id && signed_ok,
       "outage (%s): exactly one delivery (%zu), signed, every request with webhook-id %s", o->name,
       delivered, dlv);
    long long first, last, done_first, done_last;
    audit_times(o->store, "notify.shop", "effect intent", &first, &last);
    audit_times(o->store, "notify.shop", "effect done", &done_first, &done_last);
    long long inv = json_integer_value(json_object_get(pl_step(t, "notify.shop"), "invocations"));
    ok(first && done_first - first >= OUTAGE_MS && inv > 5 && o->runs_down >= 5,
       "outage (%s): tried for %lld s, %lld invocations over %d retry runs while down (the old "
       "budget: 5 invocations)",
       o->name, (done_first - first) / 1000, inv, o->runs_down);
    if (failed)
        diag("outage (%s): %zu failing answers before the delivery", o->name, failed);
    json_decref(all);
    json_decref(t);
}

static void check_spent(outage *o)
{
    json_t *t = pl_show(o->store, PL_TASK);
    const char *err = t ? pl_str(t, "error") : "";
    ok(o->last_rc == 69 && t && !strcmp(pl_str(t, "status"), "dead") &&
           !strcmp(pl_str(t, "error_step"), "notify.shop") &&
           tu_contains(err, "the whole of its retry budget of 4 s") &&
           tu_contains(err, "Couldn't connect"),
       "budget spent: retry exits %d, the task is dead naming the budget: %s", o->last_rc,
       pl_oneline(err));
    long long first, last;
    audit_times(o->store, "notify.shop", "effect intent", &first, &last);
    long long inv = json_integer_value(json_object_get(pl_step(t, "notify.shop"), "invocations"));
    ok(o->runs_down >= 2 && last - first >= 4000 - 1000,
       "budget spent: %lld invocations over %d processes, the budget counted across them "
       "(%lld ms from the first try to the last)",
       inv, o->runs_down + 1, last - first);
    json_decref(t);
}

static void t_outages(void)
{
    outage os[3];
    outage_init(&os[0], "refused", NULL, 1, json_pack("{s:i}", "max_ms", 3000));
    outage_init(&os[1], "503", "503", 1, json_pack("{s:i}", "max_ms", 3000));
    outage_init(&os[2], "spent", NULL, 0,
                json_pack("{s:i, s:i, s:i}", "max_elapsed_s", 4, "base_ms", 200, "max_ms", 1000));
    int64_t t0 = tu_now_ms();
    for (int i = 0; i < 3; i++) {
        tu_result r;
        int rc = pl_run(&r, os[i].store, os[i].config, "--inline-wait-ms", "0");
        json_t *t = pl_show(os[i].store, PL_TASK);
        ok(rc == 75 && t && !strcmp(pl_str(t, "status"), "failed") &&
               json_is_integer(json_object_get(t, "next_retry_at_ms")),
           "outage (%s): the first run ends failed with a retry time, exit %d: %s", os[i].name, rc,
           pl_oneline(r.err));
        json_decref(t);
        tu_result_free(&r);
        os[i].down_ms = tu_now_ms();
    }
    void (*const during[])(void) = {t_timeout_retrieve, t_timeout_generate, t_timeout_postprocess,
                                    t_timeout_notify_once, t_timeout_notify_again};
    size_t n_during = sizeof during / sizeof *during, next = 0;
    int left = 3;
    while (left > 0 && tu_now_ms() - t0 < GIVE_UP_MS) {
        if (next < n_during)
            during[next++]();
        for (int i = 0; i < 3; i++) {
            outage *o = &os[i];
            if (o->done)
                continue;
            if (o->comes_back && !o->up && tu_now_ms() - o->down_ms >= OUTAGE_MS)
                outage_bring_up(o);
            int ran = 0, rc = cron_retry(o->store, o->config, &ran);
            o->runs_down += !o->up && ran > 0;
            if (!o->up && rc != 0 && rc != 75 && !(!o->comes_back && rc == 69))
                o->worst_down = rc;
            if ((o->up && ran > 0 && rc == 0) || rc == 69 || rc == 64 || rc == 65 || rc == 70) {
                o->done = 1, o->last_rc = rc;
                left--;
            }
        }
        tu_sleep_ms(300);
    }
    for (int i = 0; i < 2; i++) {
        ok(os[i].worst_down == 0 && os[i].up && os[i].done,
           "outage (%s): while the receiver was down every retry exited 0 or 75 (worst %d)",
           os[i].name, os[i].worst_down);
        check_delivered(&os[i]);
    }
    check_spent(&os[2]);
    for (int i = 0; i < 3; i++)
        outage_free(&os[i]);
}

int main(int argc, char **argv)
{
    pl_setup(argc, argv, "pipeline-retry");
    g_python = pl_which("python3");
    g_model = pl_model("f32.gguf", "--type", "f32", (const char *)NULL);
    t_outages();
    free(g_model), free(g_python);
    pl_teardown();
    return tap_done();
}
