/* steps/pipeline.c - the built-in graph `default`, built from the user's configuration.
 *
 *   retrieve (compute) -> generate (compute, expensive) -> postprocess (compute)
 *                      -> notify.<name> (effect) for each target
 *
 * Each step's version is derived from the canonical JSON of its own configuration section, less
 * its tuning settings (threads, timeouts: how the step runs, not what it produces;
 * common/config.h), so a task started under one prompt template or model is never silently
 * finished under another: the runner's graph pinning sees the change and refuses (or, with
 * --allow-graph-change, regenerates from the first changed step), while a retuned step is no
 * change at all. Secrets are never in the file: targets name the
 * environment variables or files that hold them.
 */
#include "steps/pipeline.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/json.h"
#include "common/str.h"
#include "steps/llm.h"
#include "steps/notify.h"
#include "steps/policy.h"
#include "steps/postprocess.h"
#include "steps/retrieve.h"

#define MAX_TARGETS 16

/* Each step's retry budget and timeout unless its section says otherwise ("retry",
 * "timeout_s": steps/policy.h). A receiver or a search service may be down for hours, and a
 * webhook sender people trust keeps trying for a day or more, so notify's budget is a day; the
 * compute steps fail transiently on a lack of memory, a busy GPU, a full outbox disk or an
 * index being rebuilt, which an hour outlasts. Caps keep a retry within reach of the recovery
 * (a generation, which may redo a whole timeout's work, waits longer between tries). */
static const cairn__policy default_policy[] = {
    {.max_elapsed_s = 3600, .base_ms = 500, .max_ms = 60000},     /* retrieve */
    {.max_elapsed_s = 3600, .base_ms = 1000, .max_ms = 300000},   /* generate */
    {.max_elapsed_s = 3600, .base_ms = 500, .max_ms = 60000},     /* postprocess */
    {.max_elapsed_s = 86400, .base_ms = 1000, .max_ms = 3600000}, /* notify.<target> */
};
enum { P_RETRIEVE, P_GENERATE, P_POST, P_NOTIFY };

/* A step's configuration as the pipeline holds it beside the step's own: its policy
 * (steps/policy.h). */
typedef struct step_cfg {
    cairn__policy policy;
} step_cfg;

struct cairn__pipeline {
    char *path; /* of the configuration file, for messages */
    cairn_graph *g;
    cairn__retrieve_cfg *retrieve;
    cairn__llm_cfg *llm;
    cairn__post_cfg *post;
    cairn__notify_target *targets[MAX_TARGETS];
    size_t n_targets;
    step_cfg cfg_retrieve, cfg_generate, cfg_post, cfg_targets[MAX_TARGETS];
};

void cairn__pipeline_free(cairn__pipeline *p)
{
    if (!p)
        return;
    free(p->path);
    cairn_graph_free(p->g);
    cairn__retrieve_cfg_free(p->retrieve);
    cairn__llm_cfg_free(p->llm);
    cairn__post_cfg_free(p->post);
    for (size_t i = 0; i < p->n_targets; i++)
        cairn__notify_target_free(p->targets[i]);
    free(p);
}

cairn_graph *cairn__pipeline_graph(cairn__pipeline *p) { return p ? p->g : NULL; }

int cairn__pipeline_check(cairn__pipeline *p, char *err, size_t errlen)
{
    char e[1536];
    int rc = p->retrieve ? cairn__retrieve_cfg_check(p->retrieve, e, sizeof e) : 0;
    if (!rc)
        rc = cairn__llm_cfg_check(p->llm, e, sizeof e);
    if (rc)
        cairn__seterr(err, errlen, "%s: %s", p->path, e);
    return rc;
}

/* Takes a section's policy (over the step's defaults); *rest is what the step's own reader gets
 * (a new reference; NULL for an absent section), so the step's version leaves the policy out. */
static int split(const json_t *section, const char *path, int kind, step_cfg *c, json_t **rest,
                 char *err, size_t errlen)
{
    c->policy = default_policy[kind];
    return cairn__policy_read(section, path, &c->policy, rest, err, errlen);
}

/* A step of the graph with its configuration and version. */
static cairn_step *add_step(cairn__pipeline *p, const char *name, cairn_step_fn fn,
                            const char *deps, void *user, const step_cfg *c, uint32_t version)
{
    cairn_step *s = cairn_graph_add_step(p->g, name, fn, deps);
    if (s && (cairn_step_set_user(s, user) || cairn_step_set_version(s, version) ||
              cairn__policy_apply(&c->policy, s)))
        return NULL;
    return s;
}

static int build(cairn__pipeline *p, const json_t *cfg, const char *store_dir, const char *base,
                 char *err, size_t errlen)
{
    static const cairn__cfg_field sections[] = {CAIRN__CFG_KNOWN("retrieve"),
                                                CAIRN__CFG_KNOWN("generate"),
                                                CAIRN__CFG_KNOWN("postprocess"),
                                                CAIRN__CFG_KNOWN("notify"),
                                                {NULL}};
    static const cairn__cfg_field *const tables[] = {sections, NULL};
    cairn__cfg top;
    int rc = cairn__cfg_open(&top, cfg, "", NULL, err, errlen);
    if (!rc)
        rc = cairn__cfg_check_keys(
            &top, tables, "unknown section (expected retrieve, generate, postprocess, notify)");
    if (rc)
        return rc;
    json_t *r = json_object_get(cfg, "retrieve"), *g = json_object_get(cfg, "generate"),
           *pp = json_object_get(cfg, "postprocess"), *nt = json_object_get(cfg, "notify");
    if (!g) {
        snprintf(err, errlen, "generate: required section (the model and the prompt template)");
        return CAIRN_EJSON;
    }
    /* each step's reader gets its section without the policy (rest) */
    json_t *rest = NULL;
    if (r && !(rc = split(r, "retrieve", P_RETRIEVE, &p->cfg_retrieve, &rest, err, errlen)))
        rc = cairn__retrieve_cfg_parse(rest, store_dir, &p->retrieve, err, errlen);
    json_decref(rest), rest = NULL;
    if (!rc && !(rc = split(g, "generate", P_GENERATE, &p->cfg_generate, &rest, err, errlen)))
        rc = cairn__llm_cfg_parse(rest, base, &p->llm, err, errlen);
    json_decref(rest), rest = NULL;
    if (!rc && !(rc = split(pp, "postprocess", P_POST, &p->cfg_post, &rest, err, errlen))) {
        json_t *empty = rest ? NULL : json_object();
        rc = cairn__post_cfg_parse(rest ? rest : empty, base, &p->post, err, errlen);
        json_decref(empty);
    }
    json_decref(rest), rest = NULL;
    if (rc)
        return rc;
    if (nt && !json_is_array(nt)) {
        snprintf(err, errlen, "notify: must be an array of targets");
        return CAIRN_EJSON;
    }
    size_t i;
    json_t *t;
    json_array_foreach(nt, i, t)
    {
        char where[32];
        snprintf(where, sizeof where, "notify[%zu]", i);
        if (i >= MAX_TARGETS) {
            snprintf(err, errlen, "%s: at most %d targets", where, MAX_TARGETS);
            return CAIRN_EJSON;
        }
        if (!(rc = split(t, where, P_NOTIFY, &p->cfg_targets[i], &rest, err, errlen)))
            rc = cairn__notify_target_parse(rest, where, &p->targets[i], err, errlen);
        json_decref(rest), rest = NULL;
        if (rc)
            return rc;
        p->n_targets++;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(cairn__notify_target_name(p->targets[j]),
                        cairn__notify_target_name(p->targets[i]))) {
                snprintf(err, errlen, "%s.name: '%s' is used by notify[%zu] too", where,
                         cairn__notify_target_name(p->targets[i]), j);
                return CAIRN_EJSON;
            }
    }
    /* Which step feeds which is configurable; the graph's edges must agree, or a task would
     * pay for a generation and then fail on a missing input. Checked here, naming the field. */
    if (cairn__llm_cfg_uses_context(p->llm) && !p->retrieve) {
        snprintf(err, errlen, "generate.prompt: uses {{context}} but there is no retrieve section");
        return CAIRN_EJSON;
    }
    if (strcmp(cairn__llm_cfg_context_source(p->llm), "retrieve") != 0) {
        snprintf(err, errlen, "generate.context_source: must be \"retrieve\"");
        return CAIRN_EJSON;
    }
    if (strcmp(cairn__post_cfg_source(p->post), "generate") != 0) {
        snprintf(err, errlen, "postprocess.source: must be \"generate\"");
        return CAIRN_EJSON;
    }
    for (i = 0; i < p->n_targets; i++) {
        const char *src = cairn__notify_target_source(p->targets[i]);
        if (strcmp(src, "postprocess") != 0 && strcmp(src, "generate") != 0 &&
            !(p->retrieve && strcmp(src, "retrieve") == 0)) {
            snprintf(err, errlen,
                     "notify[%zu].source: '%s' is not a step of this pipeline (retrieve, "
                     "generate, postprocess)",
                     i, src);
            return CAIRN_EJSON;
        }
    }
    p->g = cairn_graph_new("default", 1);
    if (!p->g)
        return CAIRN_ENOMEM;
    cairn_step *s;
    if (p->retrieve && !add_step(p, "retrieve", cairn__retrieve_step, NULL, p->retrieve,
                                 &p->cfg_retrieve, cairn__retrieve_cfg_version(p->retrieve)))
        return CAIRN_ENOMEM;
    s = add_step(p, "generate", cairn__llm_step, p->retrieve ? "retrieve" : NULL, p->llm,
                 &p->cfg_generate, cairn__llm_cfg_version(p->llm));
    /* an absent postprocess section is version 1, as it always was */
    if (!s || cairn_step_set_expensive(s, 1) ||
        !add_step(p, "postprocess", cairn__postprocess_step, "generate", p->post, &p->cfg_post,
                  pp ? cairn__post_cfg_version(p->post) : 1))
        return CAIRN_ENOMEM;
    for (i = 0; i < p->n_targets; i++) {
        char name[80];
        snprintf(name, sizeof name, "notify.%s", cairn__notify_target_name(p->targets[i]));
        /* after postprocess in any case: a notification goes out once the result is final */
        const char *src = cairn__notify_target_source(p->targets[i]);
        char deps[80];
        snprintf(deps, sizeof deps, "postprocess%s%s", strcmp(src, "postprocess") ? "," : "",
                 strcmp(src, "postprocess") ? src : "");
        s = add_step(p, name, cairn__notify_step, deps, p->targets[i], &p->cfg_targets[i],
                     cairn__notify_target_version(p->targets[i]));
        if (!s) {
            snprintf(err, errlen, "notify[%zu].name: %s", i, cairn_graph_errmsg(p->g));
            return CAIRN_EJSON;
        }
        cairn_step_set_delivery(s, cairn__notify_target_delivery(p->targets[i]));
    }
    rc = cairn_graph_validate(p->g);
    if (rc)
        snprintf(err, errlen, "%s", cairn_graph_errmsg(p->g));
    return rc;
}

int cairn__pipeline_load(const char *path, const char *store_dir, cairn__pipeline **out, char *err,
                         size_t errlen)
{
    *out = NULL;
    json_t *cfg = NULL;
    char e[768];
    int rc = cairn__json_load(path, &cfg, e, sizeof e);
    if (rc) {
        snprintf(err, errlen, "%s", e);
        return rc;
    }
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        snprintf(err, errlen, "%s: the configuration must be a JSON object", path);
        return CAIRN_EJSON;
    }
    cairn__pipeline *p = calloc(1, sizeof *p);
    if (!p) {
        json_decref(cfg);
        return CAIRN_ENOMEM;
    }
    char *dir = strdup(path);
    p->path = strdup(path);
    rc = dir && p->path ? build(p, cfg, store_dir, dirname(dir), e, sizeof e) : CAIRN_ENOMEM;
    free(dir);
    json_decref(cfg);
    if (rc) {
        snprintf(err, errlen, "%s: %s", path, e);
        cairn__pipeline_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

int cairn__pipeline_from_args(int *argc, char **argv, int load, cairn__pipeline **p, char *err,
                              size_t errlen)
{
    const char *config = getenv("CAIRN_CONFIG"), *store = getenv("CAIRN_STORE");
    int w = 0, configs = 0;
    for (int i = 0; i < *argc; i++) {
        int sep = !strcmp(argv[i], "--config") && i + 1 < *argc;
        if (sep || !strncmp(argv[i], "--config=", 9)) {
            /* the CLI refuses every other option given twice; this one never reaches it */
            if (configs++) {
                cairn__seterr(err, errlen, "%s: --config given twice", argv[1]);
                return CAIRN_EINVAL;
            }
            config = sep ? argv[++i] : argv[i] + 9;
            continue;
        }
        if (!strcmp(argv[i], "--store") && i + 1 < *argc)
            store = argv[i + 1];
        else if (!strncmp(argv[i], "--store=", 8))
            store = argv[i] + 8;
        argv[w++] = argv[i];
    }
    *argc = w;
    argv[w] = NULL;
    *p = NULL;
    if (!load || !config || !*config)
        return 0;
    return cairn__pipeline_load(config, store, p, err, errlen);
}
