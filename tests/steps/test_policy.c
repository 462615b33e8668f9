/* test_policy.c - "retry" and "timeout_s", the settings every built-in step's section takes
 * (steps/policy.h): their defaults, each error with its full path, that the step's reader gets
 * the section without them, and, through the real pipeline loader, that every section accepts
 * them, that they reach the graph's steps and that they are no part of any step's version (the
 * graph's fingerprint is the same with and without them).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "runner/graph.h"
#include "steps/pipeline.h"
#include "steps/policy.h"
#include "tests/model/mkmodel.h"
#include "tests/tap.h"
#include "tests/testutil.h"

static const cairn__policy defaults = {.max_elapsed_s = 3600, .base_ms = 500, .max_ms = 60000};

/* Reads `js` (NULL: an absent section) as section `path`; the code, the message and the rest. */
static int read_policy(const char *js, const char *path, cairn__policy *p, json_t **rest, char *err,
                       size_t errlen)
{
    json_error_t je;
    json_t *o = js ? json_loads(js, JSON_DECODE_ANY, &je) : NULL;
    if (js && !o) {
        snprintf(err, errlen, "test bug: %s: %s", js, je.text);
        return -9999;
    }
    *p = defaults;
    int rc = cairn__policy_read(o, path, p, rest, err, errlen);
    json_decref(o);
    return rc;
}

static void expect_error(const char *js, const char *path, const char *want)
{
    cairn__policy p;
    json_t *rest = (json_t *)1;
    char err[512] = "";
    int rc = read_policy(js, path, &p, &rest, err, sizeof err);
    ok(rc == CAIRN_EJSON && strcmp(err, want) == 0 && rest == NULL, "%s -> \"%s\" (got %d \"%s\")",
       js, want, rc, err);
}

static void test_read(void)
{
    cairn__policy p;
    json_t *rest = NULL;
    char err[512];
    ok(read_policy(NULL, "postprocess", &p, &rest, err, sizeof err) == 0 && rest == NULL &&
           p.max_elapsed_s == 3600 && p.base_ms == 500 && p.max_ms == 60000 && p.timeout_s == 0,
       "an absent section: the step's defaults, no timeout");
    ok(read_policy("{\"model\": \"m.gguf\"}", "generate", &p, &rest, err, sizeof err) == 0 &&
           p.max_elapsed_s == 3600 && p.max_ms == 60000 && p.timeout_s == 0 &&
           json_object_size(rest) == 1 &&
           !strcmp(json_string_value(json_object_get(rest, "model")), "m.gguf"),
       "a section without the keys: defaults, and the section handed on as it is");
    json_decref(rest);
    ok(read_policy("{\"url\": \"u\", \"retry\": {\"max_elapsed_s\": 60, \"max_ms\": 2000}, "
                   "\"timeout_s\": 30, \"name\": \"n\"}",
                   "notify[0]", &p, &rest, err, sizeof err) == 0 &&
           p.max_elapsed_s == 60 && p.base_ms == 500 && p.max_ms == 2000 && p.timeout_s == 30,
       "given keys are read, the others keep the step's defaults");
    ok(rest && json_object_size(rest) == 2 && json_object_get(rest, "url") &&
           json_object_get(rest, "name") && !json_object_get(rest, "retry") &&
           !json_object_get(rest, "timeout_s"),
       "the rest is the section without retry and timeout_s");
    json_decref(rest);
    ok(read_policy("{\"retry\": {}, \"timeout_s\": 0}", "retrieve", &p, &rest, err, sizeof err) ==
               0 &&
           p.max_elapsed_s == 3600 && p.timeout_s == 0 && json_object_size(rest) == 0,
       "\"retry\": {} and \"timeout_s\": 0 are the defaults");
    json_decref(rest);
    ok(read_policy("[1]", "generate", &p, &rest, err, sizeof err) == 0 && json_is_array(rest),
       "a section that is not an object is handed on, for the step's reader to refuse");
    json_decref(rest);

    expect_error("{\"retry\": 5}", "generate", "generate.retry: must be an object");
    expect_error("{\"retry\": {\"max_elapsed\": 5}}", "notify[1]",
                 "notify[1].retry.max_elapsed: unknown field");
    expect_error("{\"retry\": {\"max_elapsed_s\": 0}}", "retrieve",
                 "retrieve.retry.max_elapsed_s: must be an integer from 1 to 2592000 (seconds)");
    expect_error("{\"retry\": {\"max_elapsed_s\": 2592001}}", "retrieve",
                 "retrieve.retry.max_elapsed_s: must be an integer from 1 to 2592000 (seconds)");
    expect_error("{\"retry\": {\"max_elapsed_s\": \"1h\"}}", "retrieve",
                 "retrieve.retry.max_elapsed_s: must be an integer from 1 to 2592000 (seconds)");
    expect_error("{\"retry\": {\"base_ms\": 1.5}}", "postprocess",
                 "postprocess.retry.base_ms: must be an integer from 1 to 3600000 (milliseconds)");
    expect_error("{\"retry\": {\"max_ms\": 0}}", "notify[0]",
                 "notify[0].retry.max_ms: must be an integer from 1 to 86400000 (milliseconds)");
    expect_error("{\"retry\": {\"base_ms\": 5000, \"max_ms\": 4000}}", "notify[0]",
                 "notify[0].retry.max_ms: must be at least base_ms (5000)");
    expect_error("{\"retry\": {\"base_ms\": 70000}}", "generate",
                 "generate.retry.base_ms: must be at most max_ms (60000)");
    expect_error("{\"timeout_s\": -1}", "generate",
                 "generate.timeout_s: must be an integer from 0 to 604800 (seconds; 0: none)");
    expect_error("{\"timeout_s\": true}", "postprocess",
                 "postprocess.timeout_s: must be an integer from 0 to 604800 (seconds; 0: none)");
}

/* ------------------------------------------------------------------ through the pipeline */

static char *g_dir, *g_model;

/* Loads {"retrieve", "generate", "postprocess", "notify": [2 targets]} with `extra` merged into
 * every section (NULL: nothing); the pipeline or NULL, with the message in err. */
static cairn__pipeline *load(const char *extra, char *err, size_t errlen)
{
    json_t *x = extra ? json_loads(extra, 0, NULL) : json_object();
    json_t *cfg = json_pack(
        "{s:{s:s, s:s, s:[s]}, s:{s:s, s:s}, s:{s:i}, s:[{s:s, s:s, s:s, s:s}, {s:s, s:s, s:s, "
        "s:s, s:s}]}",
        "retrieve", "type", "http", "url", "http://127.0.0.1:9/_search", "query_fields", "title",
        "generate", "model", g_model, "prompt", "Describe {{title}}.", "postprocess", "max_chars",
        100, "notify", "type", "webhook", "name", "shop", "url", "http://127.0.0.1:9/hook",
        "secret_env", "CAIRN_TEST_POLICY_SECRET", "type", "webhook", "name", "audit", "url",
        "http://127.0.0.1:9/audit", "secret_env", "CAIRN_TEST_POLICY_SECRET", "delivery",
        "at_least_once");
    const char *sections[] = {"retrieve", "generate", "postprocess"};
    for (size_t i = 0; i < 3; i++)
        json_object_update(json_object_get(cfg, sections[i]), x);
    json_object_update(json_array_get(json_object_get(cfg, "notify"), 0), x);
    json_object_update(json_array_get(json_object_get(cfg, "notify"), 1), x);
    json_decref(x);
    char *path = tu_fmt("%s/config.json", g_dir);
    json_dump_file(cfg, path, 0);
    json_decref(cfg);
    cairn__pipeline *p = NULL;
    if (cairn__pipeline_load(path, g_dir, &p, err, errlen) != 0)
        p = NULL;
    free(path);
    return p;
}

static void test_pipeline(void)
{
    mk_spec s;
    unsigned char *buf = NULL;
    size_t len = 0;
    mk_spec_default(&s);
    g_dir = tu_mkdtemp("policy");
    g_model = tu_fmt("%s/m.gguf", g_dir);
    if (mk_model(&s, &buf, &len) != 0 || tu_write_file(g_model, buf, len) != 0)
        diag("cannot write the model");
    free(buf);
    setenv("CAIRN_TEST_POLICY_SECRET", "whsec_Y2Fpcm4tcG9saWN5LXRlc3Qtc2VjcmV0LTEyMzQ1Ng==", 1);

    char err[768] = "";
    cairn__pipeline *plain = load(NULL, err, sizeof err);
    ok(plain != NULL, "the pipeline loads without the keys (%s)", err);
    cairn__pipeline *tuned = load("{\"retry\": {\"max_elapsed_s\": 120, \"base_ms\": 50, "
                                  "\"max_ms\": 700}, \"timeout_s\": 9}",
                                  err, sizeof err);
    ok(tuned != NULL, "every section accepts retry and timeout_s (%s)", err);
    cairn_graph *gp = cairn__pipeline_graph(plain), *gt = cairn__pipeline_graph(tuned);
    ok(gp && gt && !strcmp(cairn_graph_fingerprint(gp), cairn_graph_fingerprint(gt)) &&
           !strcmp(gp->pin, gt->pin),
       "the graph's fingerprint and step versions are the same with and without them (%s)",
       gt ? gt->pin : "-");
    int applied = gt != NULL, defaulted = gp != NULL;
    for (size_t i = 0; gt && i < gt->n_steps; i++) {
        const cairn_step *st = gt->steps[i];
        applied &= st->budget_ms == 120000 && st->base_ms == 50 && st->cap_ms == 700 &&
                   st->timeout_ms == 9000 && st->max_invocations == UINT32_MAX;
    }
    for (size_t i = 0; gp && i < gp->n_steps; i++) {
        const cairn_step *st = gp->steps[i];
        int notify = !strncmp(st->name, "notify.", 7);
        defaulted &= st->budget_ms == (notify ? 86400000u : 3600000u) && st->timeout_ms == 0 &&
                     st->cap_ms == (notify                          ? 3600000u
                                    : !strcmp(st->name, "generate") ? 300000u
                                                                    : 60000u);
    }
    ok(applied, "each step has the section's budget, backoff and timeout, no invocation limit");
    ok(defaulted, "without them: notify retries for 24 h (cap 1 h), the compute steps for 1 h");
    cairn__pipeline_free(plain);
    cairn__pipeline_free(tuned);

    cairn__pipeline *bad = load("{\"retry\": {\"max_ms\": 0}}", err, sizeof err);
    ok(!bad && strstr(err, "config.json: retrieve.retry.max_ms: must be an integer"),
       "the loader's message names the file and the field (%s)", err);
    cairn__pipeline_free(bad);
    bad = load("{\"timeout_s\": \"soon\"}", err, sizeof err);
    ok(!bad && strstr(err, "config.json: retrieve.timeout_s: must be an integer"),
       "timeout_s too (%s)", err);
    cairn__pipeline_free(bad);
    tu_rm_rf(g_dir);
    free(g_dir), free(g_model);
}

int main(void)
{
    test_read();
    test_pipeline();
    return tap_done();
}
