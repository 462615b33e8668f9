/* tests/pipeline/test_pipeline.c - the built-in pipeline `default` end to end (suite integration).
 *
 * The real `cairn` binary with --config runs the sample task (retrieve -> generate ->
 * postprocess -> notify) against a generated model (F32 and Q8_0), the real webhook receiver
 * (which checks the signature itself) and the real SMTP sink, and the test counts what arrived:
 * one delivery per target carrying the notify step's delivery ID, one outbox file equal to the
 * postprocess output, nothing again on a second run. Then the ways a configuration or a task can
 * be wrong: config errors name the field and write nothing, a prompt placeholder without a
 * value and a banned term in reject mode kill the task, and a changed prompt is refused unless
 * --allow-graph-change, which regenerates and notifies again under a new delivery ID.
 */
#include <openssl/evp.h>

#include "pipeline_common.h"

static char *g_model_f32, *g_model_q8;
static char *g_f32_text; /* postprocess text of the F32 full run (for the banned-term test) */

static void sha256_file(const char *path, char out[65])
{
    size_t n = 0;
    char *data = tu_read_file(path, &n);
    unsigned char h[32];
    unsigned hl = 0;
    out[0] = 0;
    if (!data)
        return;
    EVP_Digest(data, n, h, &hl, EVP_sha256(), NULL);
    free(data);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", h[i]);
}

/* ------------------------------------------------------------------ a full run */

/* cache_type: generate's KV cache type, NULL for the default */
static void t_full(const char *type, const char *model, const char *cache_type)
{
    char *dir = pl_dir("full-%s", type);
    char *store = tu_fmt("%s/store", dir), *outbox = pl_dir("full-%s/outbox", type);
    char *path = tu_fmt("/full-%s/hook", type), *rcpt = tu_fmt("full-%s@example.com", type);
    json_t *cfg = pl_config(model, outbox, path);
    if (cache_type)
        json_object_set_new(pl_section(cfg, "generate"), "cache_type", json_string(cache_type));
    if (pl.smtp_python)
        pl_add_email(cfg, rcpt);
    char *config = pl_write_config(cfg, dir, "config.json");

    tu_result r;
    int rc = pl_run(&r, store, config, NULL, NULL);
    ok(rc == 0, "%s: run exits 0 (got %d: %s)", type, rc, pl_oneline(r.err));
    tu_result_free(&r);

    json_t *t = pl_show(store, PL_TASK);
    ok(t && !strcmp(pl_str(t, "status"), "succeeded"), "%s: task succeeded (%s)", type,
       t ? pl_str(t, "status") : "no task");
    const char *names[] = {"retrieve", "generate", "postprocess", "notify.shop", "notify.ops"};
    size_t want = pl.smtp_python ? 5 : 4, done = 0;
    for (size_t i = 0; i < want; i++)
        done += !strcmp(pl_step_status(t, names[i]), "done");
    ok(done == want && json_array_size(json_object_get(t, "steps")) == want,
       "%s: all %zu steps done (%zu done, %zu listed)", type, want, done,
       json_array_size(json_object_get(t, "steps")));

    char sha[65];
    sha256_file(model, sha);
    ok(!strcmp(pl_out(t, "generate", "model_sha256"), sha),
       "%s: generate records the model's "
       "SHA-256",
       type);
    long long ct = pl_out_int(t, "generate", "completion_tokens");
    ok(ct > 0 && pl_out_int(t, "generate", "resumed_tokens") == 0 &&
           pl_out_int(t, "generate", "generated_tokens") == ct,
       "%s: %lld tokens generated, none resumed", type, ct);
    ok(strlen(pl_out(t, "retrieve", "query")) > 0 &&
           json_array_size(
               json_object_get(json_object_get(pl_step(t, "retrieve"), "output"), "docs")) == 3,
       "%s: retrieve found the top 3 documents", type);
    const char *text = pl_out(t, "postprocess", "text");
    if (!strcmp(type, "f32"))
        g_f32_text = strdup(text);

    /* the webhook: one delivery, signed, webhook-id = the step's delivery ID */
    const char *dlv = pl_out(t, "notify.shop", "delivery_id");
    json_t *hooks = pl_log(pl.rlog, "path", path);
    ok(json_array_size(hooks) == 1, "%s: the receiver got exactly 1 delivery (%zu)", type,
       json_array_size(hooks));
    json_t *h = json_array_get(hooks, 0);
    json_t *hd = json_object_get(h, "headers");
    ok(h && json_is_true(json_object_get(h, "sig_valid")),
       "%s: the receiver verified the "
       "signature (%s)",
       type, pl_str(h, "sig_reason"));
    ok(!strncmp(dlv, "dlv_", 4) && !strcmp(pl_str(hd, "webhook-id"), dlv),
       "%s: webhook-id %s = the notify step's delivery ID %s", type, pl_str(hd, "webhook-id"), dlv);
    json_t *body = json_loads(pl_str(h, "body"), 0, NULL);
    ok(body && !strcmp(pl_str(body, "type"), "cairn.task.completed") &&
           !strcmp(pl_str(body, "task"), PL_TASK) && !strcmp(pl_str(body, "delivery_id"), dlv) &&
           !strcmp(pl_str(json_object_get(body, "result"), "text"), text),
       "%s: the body carries the task, the delivery ID and the postprocess text", type);
    json_decref(body);
    json_decref(hooks);

    /* the email: one message whose Message-ID comes from the delivery ID */
    if (pl.smtp_python) {
        const char *edlv = pl_out(t, "notify.ops", "delivery_id");
        char *mid = tu_fmt("<%s@cairn>", edlv);
        json_t *mails = pl_log(pl.slog, "rcpt_tos", rcpt);
        ok(json_array_size(mails) == 1, "%s: the SMTP sink got exactly 1 message (%zu)", type,
           json_array_size(mails));
        const char *got = pl_mail_header(pl_str(json_array_get(mails, 0), "data"), "Message-ID");
        ok(!strncmp(edlv, "dlv_", 4) && strcmp(edlv, dlv) != 0 && !strcmp(got, mid) &&
               !strcmp(pl_out(t, "notify.ops", "message_id"), mid),
           "%s: Message-ID %s derived from the email step's delivery ID", type, got);
        free(mid);
        json_decref(mails);
    } else {
        skip("%s: email (python3-aiosmtpd is not installed)", type);
    }

    /* the outbox: one complete file whose text is the postprocess output */
    ok(pl_check_outbox(outbox, PL_TASK, text, 0, type) == 0,
       "%s: the outbox holds exactly "
       "%s.json with the postprocess text",
       type, PL_TASK);
    char *ofile = tu_fmt("%s/%s.json", outbox, PL_TASK);
    char *before = tu_read_file(ofile, NULL);

    /* a second run: nothing is generated or sent again */
    json_t *gen = json_deep_copy(pl_step(t, "generate"));
    rc = pl_run(&r, store, config, NULL, NULL);
    ok(rc == 0, "%s: a second run exits 0 (%d: %s)", type, rc, pl_oneline(r.err));
    tu_result_free(&r);
    json_t *t2 = pl_show(store, PL_TASK);
    ok(t2 && json_equal(gen, pl_step(t2, "generate")),
       "%s: the second run did not touch "
       "generate",
       type);
    ok(pl_hook_count(path) == 1, "%s: no second webhook delivery", type);
    if (pl.smtp_python) {
        json_t *mails = pl_log(pl.slog, "rcpt_tos", rcpt);
        ok(json_array_size(mails) == 1, "%s: no second email", type);
        json_decref(mails);
    }
    char *after = tu_read_file(ofile, NULL);
    ok(before && after && !strcmp(before, after), "%s: the outbox file is unchanged", type);
    free(before), free(after), free(ofile);
    json_decref(gen);
    json_decref(t2);
    json_decref(t);
    free(dir), free(store), free(outbox), free(path), free(rcpt), free(config);
}

/* ------------------------------------------------------------------ configuration errors */

static void expect_config_error(const char *what, json_t *cfg, int want_rc, const char *needle,
                                const char *needle2)
{
    static int k;
    char *dir = pl_dir("cfgerr-%d", ++k);
    char *store = tu_fmt("%s/store", dir);
    char *config = pl_write_config(cfg, dir, "config.json");
    tu_result r;
    int rc = pl_run(&r, store, config, NULL, NULL);
    ok(rc == want_rc && tu_contains(r.err, needle) && (!needle2 || tu_contains(r.err, needle2)),
       "config error (%s): exit %d (want %d), names '%s': %s", what, rc, want_rc, needle,
       pl_oneline(r.err));
    struct stat st;
    ok(stat(store, &st) != 0, "config error (%s): nothing written (no store created)", what);
    tu_result_free(&r);
    free(dir), free(store), free(config);
}

static void t_config_errors(void)
{
    char *outbox = pl_dir("cfgerr-outbox");
    json_t *c;

    c = pl_config(g_model_f32, outbox, "/cfgerr/hook");
    json_object_set_new(pl_section(c, "generate"), "temperature", json_real(250));
    expect_config_error("temperature 250", c, 65, "generate.temperature", NULL);

    c = pl_config(g_model_f32, outbox, "/cfgerr/hook");
    json_object_set_new(pl_section(c, "generate"), "temperature", json_string("hot"));
    expect_config_error("temperature \"hot\"", c, 65, "generate.temperature", NULL);

    c = pl_config(g_model_f32, outbox, "/cfgerr/hook");
    json_object_set_new(c, "summarize", json_object());
    expect_config_error("unknown section", c, 65, "summarize", "unknown section");

    c = pl_config(g_model_f32, outbox, "/cfgerr/hook");
    json_object_del(pl_section(c, "generate"), "prompt");
    expect_config_error("missing prompt", c, 65, "generate.prompt", "required");

    c = pl_config(g_model_f32, outbox, "/cfgerr/hook");
    json_object_set_new(pl_section(c, "generate"), "cache_type", json_string("q4"));
    expect_config_error("cache type q4", c, 65, "generate.cache_type", "\"f16\"");

    c = pl_config(g_model_f32, outbox, "/cfgerr/hook");
    json_object_set_new(pl_section(c, "generate"), "max_token", json_integer(10));
    expect_config_error("misspelt setting", c, 65, "generate.max_token", "unknown");

    c = pl_config(g_model_f32, outbox, "/cfgerr/hook");
    json_object_set_new(json_array_get(pl_section(c, "notify"), 0), "secret_env",
                        json_string("CAIRN_TEST_PIPELINE_NO_SUCH_SECRET"));
    expect_config_error("secret env unset", c, 64, "notify[0].secret_env",
                        "CAIRN_TEST_PIPELINE_NO_SUCH_SECRET");

    c = pl_config(g_model_f32, outbox, "/cfgerr/hook");
    json_object_set_new(json_array_get(pl_section(c, "notify"), 0), "secret",
                        json_string("whsec_inline"));
    expect_config_error("inline secret refused", c, 65, "notify[0].secret", NULL);

    /* malformed JSON: file:line:column */
    char *dir = pl_dir("cfgerr-json"), *store = tu_fmt("%s/store", dir);
    char *config = tu_fmt("%s/config.json", dir);
    const char *bad = "{\n  \"generate\": {\"model\": \"m.gguf\",,}\n}\n";
    tu_write_file(config, bad, strlen(bad));
    tu_result r;
    int rc = pl_run(&r, store, config, NULL, NULL);
    char *where = tu_fmt("%s:2:", config);
    ok(rc == 65 && tu_contains(r.err, where),
       "config error (malformed JSON): exit %d, names "
       "file:line:column: %s",
       rc, pl_oneline(r.err));
    tu_result_free(&r);
    free(where);
    char *missing = tu_fmt("%s/nonexistent.json", dir);
    rc = pl_run(&r, store, missing, NULL, NULL);
    ok(rc == 66 && tu_contains(r.err, "nonexistent.json"),
       "config error (missing file): exit "
       "%d: %s",
       rc, pl_oneline(r.err));
    tu_result_free(&r);
    struct stat st;
    ok(stat(store, &st) != 0, "config errors (JSON, missing file): no store created");
    ok(pl_hook_count("/cfgerr/hook") == 0, "config errors: nothing was sent");
    free(missing), free(dir), free(store), free(config), free(outbox);
}

/* ------------------------------------------------------------------ refused at the start */

/* What a task will need that the configuration names (the model file, the retrieval index, a
 * CUDA device for "backend": "cuda") is checked when `run` and `retry` start: a missing one is
 * refused there, naming the file or the backend (66; 69 for the device), before any task is
 * admitted, instead of tasks admitted only to die at attempt 1. */
static void t_refused_at_start(void)
{
    char *outbox = pl_dir("start-outbox");
    char *no_model = tu_fmt("%s/no-such-model.gguf", pl.tmp);
    char *no_index = tu_fmt("%s/no-such-index", pl.tmp);
    json_t *c;

    /* run: no store is created, so no task */
    c = pl_config(no_model, outbox, "/start/hook");
    expect_config_error("model file missing", c, 66, "generate.model", no_model);
    c = pl_config(g_model_f32, outbox, "/start/hook");
    json_object_set_new(pl_section(c, "retrieve"), "index", json_string(no_index));
    expect_config_error("retrieval index absent", c, 66, "retrieve.index", no_index);
    /* a device is there when a real generation on it works */
    tu_result r;
    int gpu = pl_cairn(&r, "generate", "--model", g_model_f32, "--backend", "cuda", "--prompt", "x",
                       "--max-tokens", "1", (const char *)NULL) == 0;
    tu_result_free(&r);
    json_t *cuda = pl_config(g_model_f32, outbox, "/start/503");
    json_object_set_new(pl_section(cuda, "generate"), "backend", json_string("cuda"));
    if (gpu)
        skip("backend cuda without a device: this machine has a CUDA device");
    else
        expect_config_error("backend cuda without a device", json_incref(cuda), 69,
                            "generate.backend", "cuda");

    /* retry and run of a task the store has: refused before it is touched (with
     * --allow-graph-change, which these configurations need, it would be run, and die) */
    char *dir = pl_dir("start"), *store = tu_fmt("%s/store", dir);
    char *good = pl_write_config(pl_config(g_model_f32, outbox, "/start/503"), dir, "good.json");
    c = pl_config(no_model, outbox, "/start/503");
    char *bad_model = pl_write_config(c, dir, "bad-model.json");
    c = pl_config(g_model_f32, outbox, "/start/503");
    json_object_set_new(pl_section(c, "retrieve"), "index", json_string(no_index));
    char *bad_index = pl_write_config(c, dir, "bad-index.json");
    char *bad_cuda = pl_write_config(cuda, dir, "bad-cuda.json");
    int rc = pl_run(&r, store, good, "--inline-wait-ms", "0");
    ok(rc == 75, "refused at start: setup, a task failed at its notification (%d: %s)", rc,
       pl_oneline(r.err));
    tu_result_free(&r);
    json_t *t0 = pl_show(store, PL_TASK);
    struct {
        const char *what, *config, *needle;
        int want;
    } cases[] = {
        {"model file missing", bad_model, no_model, 66},
        {"retrieval index absent", bad_index, no_index, 66},
        {"backend cuda without a device", bad_cuda, "cuda", 69},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases - (size_t)gpu; i++) {
        rc = pl_cairn(&r, "retry", "--store", store, "--config", cases[i].config, "--now",
                      "--allow-graph-change", (const char *)NULL);
        ok(rc == cases[i].want && tu_contains(r.err, cases[i].needle),
           "refused at start (%s): retry exits %d, names %s (%d: %s)", cases[i].what, cases[i].want,
           cases[i].needle, rc, pl_oneline(r.err));
        tu_result_free(&r);
        rc = pl_run(&r, store, cases[i].config, "--allow-graph-change", NULL);
        ok(rc == cases[i].want && tu_contains(r.err, cases[i].needle),
           "refused at start (%s): run of the existing task exits %d (%d: %s)", cases[i].what,
           cases[i].want, rc, pl_oneline(r.err));
        tu_result_free(&r);
    }
    json_t *t1 = pl_show(store, PL_TASK);
    ok(t0 && t1 && !strcmp(pl_str(t1, "status"), "failed") &&
           json_equal(json_object_get(t0, "attempt"), json_object_get(t1, "attempt")) &&
           json_equal(json_object_get(t0, "steps"), json_object_get(t1, "steps")) &&
           pl_hook_count("/start/503") == 1,
       "refused at start: the task is as it was (failed, attempt %lld, same steps, 1 request)",
       (long long)json_integer_value(json_object_get(t1, "attempt")));
    json_decref(t0), json_decref(t1);
    free(outbox), free(no_model), free(no_index), free(dir), free(store), free(good);
    free(bad_model), free(bad_index), free(bad_cuda);
}

/* ------------------------------------------------------------------ dead tasks */

static void expect_dead(const char *what, json_t *cfg, const char *hook_path, const char *outbox,
                        const char *step, const char *needle)
{
    static int k;
    char *dir = pl_dir("dead-%d", ++k);
    char *store = tu_fmt("%s/store", dir);
    char *config = pl_write_config(cfg, dir, "config.json");
    tu_result r;
    int rc = pl_run(&r, store, config, NULL, NULL);
    ok(rc == 69 && tu_contains(r.err, "CAIRN_EDEAD") && tu_contains(r.err, needle),
       "%s: exit 69 (dead), names '%s' (got %d: %s)", what, needle, rc, pl_oneline(r.err));
    const char *line = pl_oneline(r.err), *first = strstr(line, "(CAIRN_E");
    ok(first && !strstr(first + 1, "(CAIRN_E"), "%s: one error name in the message (%s)", what,
       line);
    tu_result_free(&r);
    json_t *t = pl_show(store, PL_TASK);
    ok(t && !strcmp(pl_str(t, "status"), "dead") && !strcmp(pl_str(t, "error_step"), step) &&
           tu_contains(pl_str(t, "error"), needle),
       "%s: show says dead at '%s': %s", what, step, t ? pl_str(t, "error") : "(no task)");
    ok(pl_hook_count(hook_path) == 0, "%s: nothing was sent", what);
    DIR *d = opendir(outbox);
    int files = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        files += e->d_name[0] != '.';
    if (d)
        closedir(d);
    ok(files == 0, "%s: nothing in the outbox (%d files)", what, files);
    /* dead is final: another run changes nothing */
    rc = pl_run(&r, store, config, NULL, NULL);
    ok(rc == 69 && pl_hook_count(hook_path) == 0, "%s: a second run still exits 69 (%d)", what, rc);
    tu_result_free(&r);
    json_decref(t);
    free(dir), free(store), free(config);
}

static void t_template_missing_field(void)
{
    char *outbox = pl_dir("tpl-outbox");
    json_t *c = pl_config(g_model_f32, outbox, "/tpl/hook");
    json_object_set_new(pl_section(c, "generate"), "prompt",
                        json_string("Describe the {{colour}} {{title}}.\n{{context}}\n"));
    expect_dead("template placeholder without a value", c, "/tpl/hook", outbox, "generate",
                "colour");
    free(outbox);
}

/* A banned term taken from the text this task generates (same task ID, same generate section,
 * so the same text: the seed is derived from the task ID). */
static void t_banned_reject(void)
{
    char term[8] = "";
    for (const char *p = g_f32_text ? g_f32_text : ""; *p && !term[0]; p++)
        if (strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") >= 3)
            snprintf(term, sizeof term, "%.3s", p);
    if (!term[0]) {
        skip("banned term: the generated text has no 3 alphanumeric characters in a row");
        return;
    }
    char *outbox = pl_dir("banned-outbox");
    json_t *c = pl_config(g_model_f32, outbox, "/banned/hook");
    json_t *pp = pl_section(c, "postprocess");
    json_object_set_new(pp, "banned", json_pack("[s]", term));
    json_object_set_new(pp, "banned_action", json_string("reject"));
    char *needle = tu_fmt("banned term '%s'", term);
    expect_dead("banned term in reject mode", c, "/banned/hook", outbox, "postprocess", needle);
    free(needle);
    free(outbox);
}

/* ------------------------------------------------------------------ graph change */

/* Settings of how a step runs, not of what it produces (generate.threads and progress_every, a
 * target's timeouts) are no graph change: an unfinished task run again after they changed is
 * not refused, and nothing it committed runs again (the LLM is not paid twice, the delivered
 * notification is not sent twice). */
static void t_tuning_knobs(void)
{
    char *dir = pl_dir("knobs"), *store = tu_fmt("%s/store", dir), *outbox = pl_dir("knobs/out");
    const char *shop = "/knobs/shop", *audit = "/knobs/audit/503,ok";
    json_t *c = pl_config(g_model_f32, outbox, shop);
    pl_add_hook(c, "audit", audit, "at_most_once", 5000);
    json_t *c2 = json_deep_copy(c);
    json_object_set_new(pl_section(c, "generate"), "threads", json_integer(1));
    json_t *g2 = pl_section(c2, "generate");
    json_object_set_new(g2, "threads", json_integer(2));
    json_object_set_new(g2, "progress_every", json_integer(3));
    json_object_set_new(json_array_get(pl_section(c2, "notify"), 0), "timeout_ms",
                        json_integer(4000));
    json_object_set_new(json_array_get(pl_section(c2, "notify"), 1), "connect_timeout_ms",
                        json_integer(3000));
    char *config = pl_write_config(c, dir, "config.json");
    char *config2 = pl_write_config(c2, dir, "config2.json");

    tu_result r;
    int rc = pl_run(&r, store, config, "--inline-wait-ms", "0");
    ok(rc == 75, "tuning: first run fails at notify.audit (503), shop delivered (%d: %s)", rc,
       pl_oneline(r.err));
    tu_result_free(&r);
    json_t *t1 = pl_show(store, PL_TASK);
    rc = pl_run(&r, store, config2, NULL, NULL);
    ok(rc == 0 && !tu_contains(r.err, "graph"),
       "tuning: threads, progress_every and timeouts changed: no graph change, the task "
       "finishes (%d: %s)",
       rc, pl_oneline(r.err));
    tu_result_free(&r);
    json_t *t2 = pl_show(store, PL_TASK);
    ok(t1 && t2 && !strcmp(pl_str(t2, "status"), "succeeded") &&
           json_integer_value(json_object_get(t2, "generation")) == 1 &&
           json_equal(pl_step(t1, "retrieve"), pl_step(t2, "retrieve")) &&
           json_equal(pl_step(t1, "generate"), pl_step(t2, "generate")) &&
           json_equal(pl_step(t1, "postprocess"), pl_step(t2, "postprocess")) &&
           json_equal(pl_step(t1, "notify.shop"), pl_step(t2, "notify.shop")),
       "tuning: nothing committed ran again (generation 1, the same generate record)");
    ok(pl_hook_count(shop) == 1 && pl_hook_count(audit) == 2,
       "tuning: shop got 1 delivery, audit its retry (%zu, %zu)", pl_hook_count(shop),
       pl_hook_count(audit));
    json_decref(t1), json_decref(t2);
    free(dir), free(store), free(outbox), free(config), free(config2);
}

/* The intended semantics of --allow-graph-change, pinned down here: a task started under one
 * configuration is never silently finished under another. An unfinished task whose prompt
 * changed is refused (exit 65, CAIRN_EGRAPHCHANGED) until the operator passes
 * --allow-graph-change; then a new generation starts at the first changed step (generate), and
 * everything after it runs again, except the effects already done: a notification that was
 * delivered is not delivered again (at most once per task, whatever the configuration became),
 * while one not yet delivered carries the new text. To send the new text where the old one went,
 * the operator says so: `invalidate --from notify.shop`, a new delivery with a NEW delivery ID
 * (derived from the generation), which a receiver deduplicating by webhook-id must see, not drop
 * as a retry of the old one. (A task that already succeeded is final: running it again under a
 * changed configuration returns its result, exit 0.)
 *
 * To have an unfinished task that has already notified, the second target ("audit") times out
 * after the receiver got its request (at most once: the task is in doubt) and is settled as
 * not done, which leaves the task pending. */
static void t_graph_change(void)
{
    char *dir = pl_dir("gc"), *store = tu_fmt("%s/store", dir), *outbox = pl_dir("gc/outbox");
    const char *shop = "/gc/shop", *audit = "/gc/audit/delay:4000,ok";
    json_t *c = pl_config(g_model_f32, outbox, shop);
    pl_add_hook(c, "audit", audit, "at_most_once", 1500);
    json_t *c2 = json_deep_copy(c);
    char *config = pl_write_config(c, dir, "config.json");
    json_object_set_new(pl_section(c2, "generate"), "prompt",
                        json_string("Write a long, warm product description for {{title}}, "
                                    "for a catalogue.\nFacts:\n{{context}}\nDescription:"));
    char *config2 = pl_write_config(c2, dir, "config2.json");

    tu_result r;
    int rc = pl_run(&r, store, config, NULL, NULL);
    ok(rc == 69 && tu_contains(r.err, "CAIRN_EINDOUBT"),
       "graph change: first run ends in doubt "
       "at notify.audit (timeout) (%d: %s)",
       rc, pl_oneline(r.err));
    tu_result_free(&r);
    json_t *t1 = pl_show(store, PL_TASK);
    ok(t1 && !strcmp(pl_step_status(t1, "notify.shop"), "done") && pl_hook_count(shop) == 1,
       "graph change: notify.shop delivered once before the doubt (%s, %zu)",
       pl_step_status(t1, "notify.shop"), pl_hook_count(shop));
    char *dlv1 = strdup(pl_out(t1, "notify.shop", "delivery_id"));
    char *text1 = strdup(pl_out(t1, "generate", "text"));
    long long pt1 = pl_out_int(t1, "generate", "prompt_tokens");
    rc = pl_cairn(&r, "resolve", "--store", store, PL_TASK, "--step", "notify.audit", "--not-done",
                  (const char *)NULL);
    ok(rc == 0, "graph change: resolve --not-done (%d: %s)", rc, pl_oneline(r.err));
    tu_result_free(&r);

    rc = pl_run(&r, store, config2, NULL, NULL);
    ok(rc == 65 && tu_contains(r.err, "--allow-graph-change") && tu_contains(r.err, "generate"),
       "graph change: refused without --allow-graph-change, exit %d, names the first changed "
       "step: %s",
       rc, pl_oneline(r.err));
    tu_result_free(&r);
    json_t *t2 = pl_show(store, PL_TASK);
    ok(t2 && json_equal(pl_step(t1, "generate"), pl_step(t2, "generate")) &&
           pl_hook_count(shop) == 1 && pl_hook_count(audit) == 1,
       "graph change: the refused run changed and sent nothing");

    rc = pl_run(&r, store, config2, "--allow-graph-change", NULL);
    ok(rc == 0, "graph change: --allow-graph-change runs to the end (%d: %s)", rc,
       pl_oneline(r.err));
    tu_result_free(&r);
    json_t *t3 = pl_show(store, PL_TASK);
    ok(t3 && !strcmp(pl_str(t3, "status"), "succeeded") &&
           json_integer_value(json_object_get(t3, "generation")) == 2 &&
           json_integer_value(json_object_get(pl_step(t3, "generate"), "generation")) == 2,
       "graph change: succeeded in generation 2");
    ok(pl_out_int(t3, "generate", "prompt_tokens") != pt1 &&
           pl_out_int(t3, "generate", "resumed_tokens") == 0,
       "graph change: generate ran again on the new prompt (%lld -> %lld prompt tokens)", pt1,
       pl_out_int(t3, "generate", "prompt_tokens"));
    int old_kept = 0;
    size_t i;
    json_t *hs;
    json_array_foreach(json_object_get(t3, "history"), i, hs)
    {
        if (!strcmp(pl_str(hs, "name"), "generate") &&
            !strcmp(pl_str(json_object_get(hs, "output"), "text"), text1))
            old_kept = 1;
    }
    ok(old_kept, "graph change: the old generation's output stays in the history");
    json_t *hooks = pl_log(pl.rlog, "path", shop);
    ok(json_array_size(hooks) == 1 && !strcmp(pl_out(t3, "notify.shop", "delivery_id"), dlv1) &&
           json_integer_value(json_object_get(pl_step(t3, "notify.shop"), "generation")) == 1,
       "graph change: the delivered notify.shop is not sent again (%zu deliveries; its record of "
       "generation 1 stays)",
       json_array_size(hooks));
    json_decref(hooks);
    hooks = pl_log(pl.rlog, "path", audit);
    json_t *body = json_loads(pl_str(json_array_get(hooks, 1), "body"), 0, NULL);
    ok(json_array_size(hooks) == 2 &&
           !strcmp(pl_str(json_object_get(json_array_get(hooks, 1), "headers"), "webhook-id"),
                   pl_out(t3, "notify.audit", "delivery_id")),
       "graph change: notify.audit (settled as not done) delivered in the new generation (%zu "
       "requests)",
       json_array_size(hooks));
    ok(body && !strcmp(pl_str(json_object_get(body, "result"), "text"),
                       pl_out(t3, "postprocess", "text")),
       "graph change: that delivery carries the new text");
    json_decref(body);
    json_decref(hooks);
    ok(pl_check_outbox(outbox, PL_TASK, pl_out(t3, "postprocess", "text"), 0, "graph change") == 0,
       "graph change: the outbox holds the new text");

    /* sending the new text to shop too is the operator's explicit act */
    rc = pl_cairn(&r, "invalidate", "--store", store, "--config", config2, PL_TASK, "--from",
                  "notify.shop", (const char *)NULL);
    ok(rc == 0, "graph change: invalidate --from notify.shop (%d: %s)", rc, pl_oneline(r.err));
    tu_result_free(&r);
    rc = pl_run(&r, store, config2, NULL, NULL);
    tu_result_free(&r);
    json_t *t4 = pl_show(store, PL_TASK);
    const char *dlv2 = pl_out(t4, "notify.shop", "delivery_id");
    hooks = pl_log(pl.rlog, "path", shop);
    const char *id0 = pl_str(json_object_get(json_array_get(hooks, 0), "headers"), "webhook-id");
    const char *id1 = pl_str(json_object_get(json_array_get(hooks, 1), "headers"), "webhook-id");
    body = json_loads(pl_str(json_array_get(hooks, 1), "body"), 0, NULL);
    ok(rc == 0 && json_array_size(hooks) == 2 && !strcmp(id0, dlv1) && !strcmp(id1, dlv2) &&
           strcmp(dlv1, dlv2) != 0 &&
           json_is_true(json_object_get(json_array_get(hooks, 1), "sig_valid")) &&
           pl_hook_count(audit) == 2,
       "graph change: after invalidate, notify.shop sent again with a NEW delivery ID (%s -> %s), "
       "notify.audit not",
       id0, id1);
    ok(body && !strcmp(pl_str(json_object_get(body, "result"), "text"),
                       pl_out(t4, "postprocess", "text")),
       "graph change: the new delivery carries the new text");
    json_decref(body);
    json_decref(hooks);
    json_decref(t4);

    /* finished: a run under either configuration returns the result, sends nothing */
    rc = pl_run(&r, store, config, NULL, NULL);
    tu_result_free(&r);
    int rc2 = pl_run(&r, store, config2, NULL, NULL);
    tu_result_free(&r);
    ok(rc == 0 && rc2 == 0 && pl_hook_count(shop) == 2 && pl_hook_count(audit) == 2,
       "graph change: a succeeded task is final under any configuration (%d, %d)", rc, rc2);
    json_decref(t1), json_decref(t2), json_decref(t3);
    free(dlv1), free(text1);
    free(dir), free(store), free(outbox), free(config), free(config2);
}

int main(int argc, char **argv)
{
    pl_setup(argc, argv, "pipeline");
    if (!pl.smtp_python)
        diag("python3-aiosmtpd not found (tried $CAIRN_PYTHON, python3, /usr/bin/python3): email "
             "parts skipped");
    g_model_f32 = pl_model("f32.gguf", "--type", "f32", (const char *)NULL);
    g_model_q8 = pl_model("q8_0.gguf", "--type", "q8_0", (const char *)NULL);
    t_full("f32", g_model_f32, NULL);
    t_full("q8_0", g_model_q8, NULL);
    t_full("q8_0-cache-f16", g_model_q8, "f16");
    t_config_errors();
    t_refused_at_start();
    t_template_missing_field();
    t_banned_reject();
    t_graph_change();
    t_tuning_knobs();
    free(g_model_f32), free(g_model_q8), free(g_f32_text);
    pl_teardown();
    return tap_done();
}
