/* steps/llm.c - the generation step: prompt template -> gpu/ engine -> text.
 *
 * Two ideas carry it. First, the model is loaded once per process and kept (a batch of tasks,
 * or `cairn retry`, pays for loading once). Second, generation is resumable: every
 * progress_every tokens the step saves (hash of the prompt tokens, tokens so far, sampler
 * state) through the runner's progress checkpoint. After a crash the next invocation re-feeds
 * the prompt and the saved tokens and continues with the restored sampler, so the text is the
 * one the interrupted run would have produced and the tokens already paid for are not drawn
 * again. The runner commits the final output in an expensive (flushed) commit; once committed
 * it is never generated again.
 *
 * The prompt holds task input, so it is tokenized through cairn__chat_encode: only the chat
 * format's own markers become special tokens, and a task whose text spells "<|im_end|>" gets
 * those characters, not a forged end of turn.
 */
#include "steps/llm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/hash.h"
#include "common/json.h"
#include "gpu/chat.h"
#include "gpu/engine.h"
#include "steps/template.h"

struct cairn__llm_cfg {
    char *model, *backend, *prompt, *system, *context_source, *cache_type;
    int chat, threads, ctx, max_tokens, progress_every, has_seed;
    cairn__sampler_params sp;
    char **stop;
    size_t n_stop;
    char digest[65];
};

/* ------------------------------------------------------------------ config */

static int cfg_str(const json_t *c, const char *k, const char *def, char **out, char *err,
                   size_t errlen)
{
    json_t *v = json_object_get(c, k);
    if (v && !json_is_string(v)) {
        snprintf(err, errlen, "generate.%s: must be a string", k);
        return CAIRN_EJSON;
    }
    const char *src = v ? json_string_value(v) : def;
    *out = src ? strdup(src) : NULL;
    if (src && !*out) {
        snprintf(err, errlen, "generate.%s: out of memory", k);
        return CAIRN_ENOMEM;
    }
    return 0;
}

static int cfg_num(const json_t *c, const char *k, double def, double lo, double hi, double *out,
                   char *err, size_t errlen)
{
    json_t *v = json_object_get(c, k);
    *out = def;
    if (!v)
        return 0;
    if (!json_is_number(v) || json_number_value(v) < lo || json_number_value(v) > hi) {
        snprintf(err, errlen, "generate.%s: must be a number in [%g, %g]", k, lo, hi);
        return CAIRN_EJSON;
    }
    *out = json_number_value(v);
    return 0;
}

/* An integer setting in [lo, hi] (a fraction is an error, not silently truncated). */
static int cfg_int(const json_t *c, const char *k, int def, int lo, int hi, int *out, char *err,
                   size_t errlen)
{
    json_t *v = json_object_get(c, k);
    *out = def;
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        snprintf(err, errlen, "generate.%s: must be an integer in [%d, %d]", k, lo, hi);
        return CAIRN_EJSON;
    }
    *out = (int)json_integer_value(v);
    return 0;
}

int cairn__llm_cfg_parse(const json_t *cfg, const char *base_dir, cairn__llm_cfg **out, char *err,
                         size_t errlen)
{
    static const char *const known[] = {
        "model",          "backend",        "threads",    "ctx",         "prompt",
        "system",         "chat",           "max_tokens", "temperature", "top_p",
        "top_k",          "repeat_penalty", "seed",       "stop",        "progress_every",
        "context_source", "cache_type"};
    *out = NULL;
    if (!json_is_object(cfg)) {
        snprintf(err, errlen, "generate: must be an object");
        return CAIRN_EJSON;
    }
    int krc =
        cairn__cfg_known_keys(cfg, "generate", known, sizeof known / sizeof *known, err, errlen);
    if (krc)
        return krc;
    cairn__llm_cfg *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "generate: out of memory");
        return CAIRN_ENOMEM;
    }
    cairn__sampler_params_default(&c->sp);
    char *chat = NULL, *model = NULL;
    double d;
    int rc = cfg_str(cfg, "model", NULL, &model, err, errlen);
    if (!rc && !model) {
        snprintf(err, errlen, "generate.model: required (path to a GGUF file)");
        rc = CAIRN_EJSON;
    }
    if (!rc) {
        if (model[0] != '/' && base_dir) {
            size_t n = strlen(base_dir) + strlen(model) + 2;
            c->model = malloc(n);
            if (c->model)
                snprintf(c->model, n, "%s/%s", base_dir, model);
        } else
            c->model = strdup(model);
        if (!c->model) {
            snprintf(err, errlen, "generate.model: out of memory");
            rc = CAIRN_ENOMEM;
        }
    }
    free(model);
    if (!rc)
        rc = cfg_str(cfg, "backend", "auto", &c->backend, err, errlen);
    if (!rc && strcmp(c->backend, "auto") && strcmp(c->backend, "cpu") &&
        strcmp(c->backend, "cuda")) {
        snprintf(err, errlen, "generate.backend: must be \"auto\", \"cpu\" or \"cuda\"");
        rc = CAIRN_EJSON;
    }
    if (!rc)
        rc = cfg_str(cfg, "cache_type", "f32", &c->cache_type, err, errlen);
    if (!rc && cairn__cache_type_parse(c->cache_type) < 0) {
        snprintf(err, errlen, "generate.cache_type: must be \"f32\" or \"f16\", not \"%.40s\"",
                 c->cache_type);
        rc = CAIRN_EJSON;
    }
    if (!rc)
        rc = cfg_str(cfg, "prompt", NULL, &c->prompt, err, errlen);
    if (!rc && !c->prompt) {
        snprintf(err, errlen,
                 "generate.prompt: required (a template such as \"Describe "
                 "{{title}}. Facts: {{context}}\")");
        rc = CAIRN_EJSON;
    }
    if (!rc)
        rc = cfg_str(cfg, "system", NULL, &c->system, err, errlen);
    if (!rc)
        rc = cfg_str(cfg, "context_source", "retrieve", &c->context_source, err, errlen);
    if (!rc)
        rc = cfg_str(cfg, "chat", "raw", &chat, err, errlen);
    if (!rc && cairn__chat_format_parse(chat, &c->chat)) {
        snprintf(err, errlen, "generate.chat: must be \"raw\", \"chatml\" or \"llama3\"");
        rc = CAIRN_EJSON;
    }
    free(chat);
    if (!rc)
        rc = cfg_int(cfg, "threads", 0, 0, 1024, &c->threads, err, errlen);
    if (!rc)
        rc = cfg_int(cfg, "ctx", 0, 0, 1 << 20, &c->ctx, err, errlen);
    if (!rc)
        rc = cfg_int(cfg, "max_tokens", 256, 1, 1 << 20, &c->max_tokens, err, errlen);
    if (!rc)
        rc = cfg_int(cfg, "progress_every", 16, 0, 1 << 20, &c->progress_every, err, errlen);
    if (!rc && !(rc = cfg_num(cfg, "temperature", 0.7, 0, 100, &d, err, errlen)))
        c->sp.temperature = (float)d;
    if (!rc && !(rc = cfg_num(cfg, "top_p", 0.95, 1e-9, 1, &d, err, errlen)))
        c->sp.top_p = (float)d;
    if (!rc)
        rc = cfg_int(cfg, "top_k", 40, 0, 1 << 20, &c->sp.top_k, err, errlen);
    if (!rc && !(rc = cfg_num(cfg, "repeat_penalty", 1.0, 1e-9, 100, &d, err, errlen)))
        c->sp.repeat_penalty = (float)d;
    json_t *seed = json_object_get(cfg, "seed");
    if (!rc && seed) {
        if (!json_is_integer(seed) || json_integer_value(seed) < 0) {
            snprintf(err, errlen, "generate.seed: must be a non-negative integer");
            rc = CAIRN_EJSON;
        } else {
            c->sp.seed = (uint64_t)json_integer_value(seed);
            c->has_seed = 1;
        }
    }
    json_t *stop = json_object_get(cfg, "stop");
    if (!rc && stop) {
        if (!json_is_array(stop)) {
            snprintf(err, errlen, "generate.stop: must be an array of strings");
            rc = CAIRN_EJSON;
        } else {
            c->stop = calloc(json_array_size(stop) + 1, sizeof *c->stop);
            size_t i;
            json_t *v;
            if (!c->stop) {
                snprintf(err, errlen, "generate.stop: out of memory");
                rc = CAIRN_ENOMEM;
            }
            json_array_foreach(stop, i, v)
            {
                if (rc)
                    break;
                if (!json_is_string(v) || !json_string_length(v)) {
                    snprintf(err, errlen, "generate.stop[%zu]: must be a non-empty string", i);
                    rc = CAIRN_EJSON;
                    break;
                }
                if (!(c->stop[c->n_stop] = strdup(json_string_value(v)))) {
                    snprintf(err, errlen, "generate.stop[%zu]: out of memory", i);
                    rc = CAIRN_ENOMEM;
                    break;
                }
                c->n_stop++;
            }
        }
    }
    if (rc) {
        cairn__llm_cfg_free(c);
        return rc;
    }
    /* what the output depends on: pinned through the step version, so it may not be left out */
    char *canon = NULL;
    size_t clen = 0;
    if ((rc = cairn__canon_json(cfg, &canon, &clen))) {
        snprintf(err, errlen, "generate: %s",
                 rc == CAIRN_ENOMEM ? "out of memory" : "cannot canonicalize the settings");
        cairn__llm_cfg_free(c);
        return rc;
    }
    cairn__sha256_hex(canon, clen, c->digest);
    free(canon);
    if (!c->digest[0]) { /* OpenSSL could not allocate */
        snprintf(err, errlen, "generate: out of memory");
        cairn__llm_cfg_free(c);
        return CAIRN_ENOMEM;
    }
    *out = c;
    return 0;
}

void cairn__llm_cfg_free(cairn__llm_cfg *c)
{
    if (!c)
        return;
    free(c->model), free(c->backend), free(c->prompt), free(c->system), free(c->context_source);
    free(c->cache_type);
    for (size_t i = 0; i < c->n_stop; i++)
        free(c->stop[i]);
    free(c->stop);
    free(c);
}

const char *cairn__llm_cfg_digest(const cairn__llm_cfg *c) { return c->digest; }

const char *cairn__llm_cfg_context_source(const cairn__llm_cfg *c) { return c->context_source; }

int cairn__llm_cfg_uses_context(const cairn__llm_cfg *c)
{
    for (const char *p = strstr(c->prompt, "{{"); p; p = strstr(p + 2, "{{")) {
        const char *q = p + 2;
        while (*q == ' ')
            q++;
        if (strncmp(q, "context", 7) == 0) {
            q += 7;
            while (*q == ' ')
                q++;
            if (strncmp(q, "}}", 2) == 0)
                return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ the loaded model */

/* One engine per process, reloaded only when the model or backend settings change. */
static struct {
    char key[4200];
    cairn__engine *e;
    char sha[65];
} loaded;

static int engine_for(const cairn__llm_cfg *c, char *err, size_t errlen)
{
    char key[sizeof loaded.key];
    snprintf(key, sizeof key, "%s|%s|%d|%d|%s", c->model, c->backend, c->threads, c->ctx,
             c->cache_type);
    if (loaded.e && strcmp(key, loaded.key) == 0)
        return 0;
    cairn__engine_free(loaded.e);
    loaded.e = NULL;
    cairn__engine_opts o = {.backend = c->backend,
                            .n_ctx = c->ctx,
                            .n_threads = c->threads,
                            .cache_type = c->cache_type};
    int rc = cairn__engine_open(c->model, &o, &loaded.e, err, errlen);
    if (rc)
        return rc;
    if ((rc = cairn__sha256_file(c->model, loaded.sha))) {
        snprintf(err, errlen, "%s: %s", c->model,
                 rc == CAIRN_ENOMEM ? "out of memory for hashing" : "cannot read for hashing");
        cairn__engine_free(loaded.e);
        loaded.e = NULL;
        return rc;
    }
    snprintf(loaded.key, sizeof loaded.key, "%s", key);
    return 0;
}

/* ------------------------------------------------------------------ prompt */

int cairn__llm_progress_key(const char *model_sha, const char *backend, const char *cache_type,
                            const int32_t *ids, size_t n_ids, char out[65])
{
    /* "cpu", "cuda"; "cpu:f16", "cuda:f16" (an f32 cache adds nothing: the keys saved before
     * the option existed stay valid) */
    char bk[48];
    snprintf(bk, sizeof bk, "%s%s", backend, strcmp(cache_type, "f16") == 0 ? ":f16" : "");
    const size_t bl = strlen(bk), kl = 64 + bl + n_ids * sizeof *ids;
    unsigned char *key = malloc(kl);
    if (!key)
        return CAIRN_ENOMEM;
    memcpy(key, model_sha, 64);
    memcpy(key + 64, bk, bl);
    if (n_ids)
        memcpy(key + 64 + bl, ids, n_ids * sizeof *ids);
    cairn__sha256_hex(key, kl, out);
    free(key);
    return 0;
}

typedef struct lookup_arg {
    cairn_ctx *ctx;
    const cairn__llm_cfg *c;
} lookup_arg;

static char *lookup(const char *name, void *arg)
{
    lookup_arg *a = arg;
    if (strcmp(name, "context") == 0) {
        const msgpack_object *src = cairn_ctx_dep(a->ctx, a->c->context_source);
        if (!src)
            return NULL; /* not a dependency of this step: the template fails, naming it */
        const msgpack_object *docs = cairn__mp_path(src, "docs");
        size_t cap = 1, n = 0;
        char *s = calloc(1, 1);
        for (uint32_t i = 0;
             s && docs && docs->type == MSGPACK_OBJECT_ARRAY && i < docs->via.array.size; i++) {
            char *t = cairn__template_value(cairn__mp_path(&docs->via.array.ptr[i], "text"));
            if (!t)
                continue;
            size_t tl = strlen(t);
            char *ns = realloc(s, cap + tl + 3);
            if (!ns) { /* no value rather than a context that silently lacks documents */
                free(t);
                free(s);
                return NULL;
            }
            s = ns;
            n += (size_t)sprintf(s + n, "- %s\n", t);
            cap += tl + 3;
            free(t);
        }
        if (s && n)
            s[n - 1] = 0; /* no trailing newline */
        return s;
    }
    if (strcmp(name, "task") == 0)
        return strdup(cairn_ctx_task_id(a->ctx));
    return cairn__template_value(cairn__mp_path(cairn_ctx_input(a->ctx), name));
}

/* The user message: the prompt template with the task's values filled in. */
static int render_user(cairn_ctx *ctx, const cairn__llm_cfg *c, char **out, char *err,
                       size_t errlen)
{
    lookup_arg la = {ctx, c};
    return cairn__template_render(c->prompt, lookup, &la, out, err, errlen);
}

int cairn__llm_prompt_ids(const cairn__llm_cfg *c, const cairn__tok *tok, const char *user,
                          int32_t **ids, size_t *n)
{
    cairn__chat_msg msgs[2];
    size_t nm = 0;
    if (c->system)
        msgs[nm++] = (cairn__chat_msg){"system", c->system};
    msgs[nm++] = (cairn__chat_msg){"user", user};
    /* flags 0: the message texts carry task input, so none of it may spell a control token;
     * only the chat format's own markers become special tokens */
    return cairn__chat_encode(tok, c->chat, msgs, nm, 1, 0, ids, n);
}

/* ------------------------------------------------------------------ progress */

typedef struct gen_arg {
    cairn_ctx *ctx;
    char prompt_sha[65]; /* SHA-256 of (model file SHA-256, backend, prompt tokens) */
    int save_failed;
} gen_arg;

static void pk_key(msgpack_packer *pk, const char *k)
{
    msgpack_pack_str(pk, strlen(k));
    msgpack_pack_str_body(pk, k, strlen(k));
}

static int on_progress(void *user, const int32_t *gen, size_t n, const uint8_t *state,
                       size_t state_len)
{
    gen_arg *a = user;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    pk_key(&pk, "v"), msgpack_pack_uint32(&pk, 1);
    pk_key(&pk, "prompt_sha"), msgpack_pack_str(&pk, 64),
        msgpack_pack_str_body(&pk, a->prompt_sha, 64);
    pk_key(&pk, "tokens"), msgpack_pack_array(&pk, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_int32(&pk, gen[i]);
    pk_key(&pk, "state"), msgpack_pack_bin(&pk, state_len),
        msgpack_pack_bin_body(&pk, state, state_len);
    int rc = cairn_ctx_save_progress(a->ctx, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    if (rc == CAIRN_EINTR)
        return 1; /* stopping: cancel, the step returns transient */
    if (rc)
        a->save_failed = 1; /* progress is an optimisation: keep generating */
    return 0;
}

static int on_token(void *user, int32_t token, const char *bytes, size_t len)
{
    (void)token, (void)bytes, (void)len;
    gen_arg *a = user;
    return cairn_ctx_stopping(a->ctx);
}

/* Reads saved progress if it belongs to this prompt: tokens (malloc'd) and sampler state. */
static size_t saved_tokens(const msgpack_object *p, const char *prompt_sha, int32_t **tokens,
                           const uint8_t **state, size_t *state_len)
{
    const msgpack_object *sha = cairn__mp_path(p, "prompt_sha");
    const msgpack_object *toks = cairn__mp_path(p, "tokens");
    const msgpack_object *st = cairn__mp_path(p, "state");
    *tokens = NULL;
    if (!sha || sha->type != MSGPACK_OBJECT_STR || sha->via.str.size != 64 ||
        memcmp(sha->via.str.ptr, prompt_sha, 64) != 0 || !toks ||
        toks->type != MSGPACK_OBJECT_ARRAY || !st || st->type != MSGPACK_OBJECT_BIN)
        return 0;
    size_t n = toks->via.array.size;
    *tokens = malloc((n ? n : 1) * sizeof **tokens);
    if (!*tokens)
        return 0;
    for (size_t i = 0; i < n; i++) {
        const msgpack_object *t = &toks->via.array.ptr[i];
        if (t->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
            free(*tokens);
            *tokens = NULL;
            return 0;
        }
        (*tokens)[i] = (int32_t)t->via.u64;
    }
    *state = (const uint8_t *)st->via.bin.ptr;
    *state_len = st->via.bin.size;
    return n;
}

/* ------------------------------------------------------------------ the step */

static uint64_t seed_of(const char *task)
{
    unsigned char h[32];
    cairn__sha256(task, strlen(task), h);
    uint64_t s = 0;
    for (int i = 0; i < 8; i++)
        s = s << 8 | h[i];
    return s >> 1; /* 63 bits: it stays an exact integer in JSON (show --json) */
}

static cairn_step_result fail(cairn_ctx *ctx, int rc, const char *err)
{
    cairn_ctx_set_error(ctx, "generate: %s (%s)", err, cairn_errname(rc));
    switch (rc) {
    case CAIRN_ENOMEM:
    case CAIRN_ECUDA:
    case CAIRN_EIO:
        return CAIRN_STEP_TRANSIENT;
    default:
        return CAIRN_STEP_PERMANENT; /* bad model file, bad template, prompt too long, ... */
    }
}

cairn_step_result cairn__llm_step(cairn_ctx *ctx, void *user)
{
    const cairn__llm_cfg *c = user;
    char err[512] = "";
    char *text = NULL;
    int rc = render_user(ctx, c, &text, err, sizeof err);
    if (rc)
        return fail(ctx, rc, err);
    if ((rc = engine_for(c, err, sizeof err))) {
        free(text);
        return fail(ctx, rc, err);
    }
    int32_t *ids = NULL;
    size_t n_ids = 0;
    rc = cairn__llm_prompt_ids(c, cairn__engine_tok(loaded.e), text, &ids, &n_ids);
    free(text);
    if (rc)
        return fail(ctx, rc, "cannot tokenize the prompt");
    gen_arg ga = {.ctx = ctx};
    if (cairn__llm_progress_key(loaded.sha, cairn__backend_name(cairn__engine_backend(loaded.e)),
                                c->cache_type, ids, n_ids, ga.prompt_sha)) {
        free(ids);
        return fail(ctx, CAIRN_ENOMEM, "out of memory");
    }
    cairn__gen_opts o;
    cairn__gen_opts_default(&o);
    o.max_tokens = c->max_tokens;
    o.stop = (const char *const *)c->stop;
    o.n_stop = c->n_stop;
    o.sampling = c->sp;
    if (!c->has_seed)
        o.sampling.seed = seed_of(cairn_ctx_task_id(ctx));
    o.on_token = on_token;
    o.on_progress = on_progress;
    o.progress_every = c->progress_every;
    o.user = &ga;
    int32_t *saved = NULL;
    const uint8_t *state = NULL;
    size_t state_len = 0, n_saved = 0;
    const msgpack_object *p = cairn_ctx_progress(ctx);
    if (p)
        n_saved = saved_tokens(p, ga.prompt_sha, &saved, &state, &state_len);
    cairn__gen_result r;
    memset(&r, 0, sizeof r);
    if (n_saved)
        rc = cairn__engine_resume(loaded.e, ids, n_ids, saved, n_saved, state, state_len, &o, &r);
    else
        rc = cairn__engine_generate_tokens(loaded.e, ids, n_ids, &o, &r);
    free(saved);
    free(ids);
    if (rc) {
        snprintf(err, sizeof err, "%s", cairn__engine_errmsg(loaded.e));
        return fail(ctx, rc, err[0] ? err : cairn_strerror(rc));
    }
    if (r.finish == CAIRN__FINISH_CANCEL) {
        size_t n_done = r.n_tokens;
        cairn__gen_result_free(&r);
        cairn_ctx_set_error(ctx, "generate: stopped after %zu tokens (progress saved)", n_done);
        return CAIRN_STEP_TRANSIENT;
    }
    msgpack_packer *pk = cairn_ctx_packer(ctx);
    msgpack_pack_map(pk, 11);
    pk_key(pk, "text"), msgpack_pack_str(pk, r.text_len),
        msgpack_pack_str_body(pk, r.text, r.text_len);
    const char *fin = cairn__finish_name(r.finish);
    pk_key(pk, "finish_reason"), msgpack_pack_str(pk, strlen(fin)),
        msgpack_pack_str_body(pk, fin, strlen(fin));
    pk_key(pk, "prompt_tokens"), msgpack_pack_uint64(pk, r.n_prompt);
    pk_key(pk, "completion_tokens"), msgpack_pack_uint64(pk, r.n_tokens);
    pk_key(pk, "resumed_tokens"), msgpack_pack_uint64(pk, n_saved);
    pk_key(pk, "generated_tokens"), msgpack_pack_uint64(pk, r.n_tokens - n_saved);
    pk_key(pk, "model"), msgpack_pack_str(pk, strlen(c->model)),
        msgpack_pack_str_body(pk, c->model, strlen(c->model));
    pk_key(pk, "model_sha256"), msgpack_pack_str(pk, 64), msgpack_pack_str_body(pk, loaded.sha, 64);
    pk_key(pk, "sampler");
    msgpack_pack_map(pk, 4);
    pk_key(pk, "temperature"), msgpack_pack_double(pk, o.sampling.temperature);
    pk_key(pk, "top_p"), msgpack_pack_double(pk, o.sampling.top_p);
    pk_key(pk, "top_k"), msgpack_pack_int32(pk, o.sampling.top_k);
    pk_key(pk, "repeat_penalty"), msgpack_pack_double(pk, o.sampling.repeat_penalty);
    pk_key(pk, "seed"), msgpack_pack_uint64(pk, o.sampling.seed);
    pk_key(pk, "tokens_per_s"), msgpack_pack_double(pk, r.gen_tps);
    cairn__gen_result_free(&r);
    return CAIRN_STEP_OK;
}
