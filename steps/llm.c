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
#include "steps/llm_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"
#include "common/hash.h"
#include "common/json.h"
#include "common/str.h"
#include "gpu/chat.h"
#include "gpu/engine.h"
#include "steps/template.h"

/* ------------------------------------------------------------------ config */

/* "openai" last, at CAIRN__LLM_OPENAI: the others are the in-process engine's */
static const char *const backends[] = {"auto", "cpu", "cuda", "openai", NULL};
_Static_assert(CAIRN__LLM_OPENAI == 3, "backends[] puts \"openai\" at CAIRN__LLM_OPENAI");
static const char *const cache_types[] = {"f32", "f16", NULL};
/* in the order of enum cairn__chat_format, so a choice's index is the format */
static const char *const chats[] = {"raw", "chatml", "llama3", "gemma", "phi3", "mistral", NULL};
_Static_assert(CAIRN__CHAT_RAW == 0 && CAIRN__CHAT_CHATML == 1 && CAIRN__CHAT_LLAMA3 == 2 &&
                   CAIRN__CHAT_GEMMA == 3 && CAIRN__CHAT_PHI3 == 4 && CAIRN__CHAT_MISTRAL == 5,
               "chats[] follows enum cairn__chat_format");

#define AT(m) CAIRN__CFG_AT(cairn__llm_cfg, m)
/* The settings of the "generate" section that every backend has; what each means is in llm.h.
 * The backend comes first: it picks the table of the rest (local_fields or the openai
 * backend's). The sampler's defaults are the step's own (temperature 0.7), not the engine's. */
static const cairn__cfg_field common_fields[] = {
    {"backend", CAIRN__CFG_ENUM, AT(backend), .choices = backends, .sdef = "auto"},
    {"prompt", CAIRN__CFG_STR, AT(prompt),
     .required = "required (a template such as \"Describe {{title}}. Facts: {{context}}\")"},
    {"system", CAIRN__CFG_STR, AT(system)},
    {"context_source", CAIRN__CFG_STR, AT(context_source), .sdef = "retrieve"},
    {"chat", CAIRN__CFG_ENUM, AT(chat), .choices = chats, .sdef = "raw"},
    {"max_tokens", CAIRN__CFG_INT, AT(max_tokens), .lo = 1, .hi = 1 << 20, .def = 256},
    /* tuning: how often progress is saved changes how fast, not what */
    {"progress_every", CAIRN__CFG_INT, AT(progress_every), .lo = 0, .hi = 1 << 20, .def = 16,
     .tuning = 1},
    {"temperature", CAIRN__CFG_NUM, AT(sp.temperature), .lo = 0, .hi = 100, .def = 0.7},
    {"top_p", CAIRN__CFG_NUM, AT(sp.top_p), .lo = 1e-9, .hi = 1, .def = 0.95},
    {"repeat_penalty", CAIRN__CFG_NUM, AT(sp.repeat_penalty), .lo = 1e-9, .hi = 100, .def = 1},
    /* absent: derived from the task ID, so each task draws differently (has_seed) */
    {"seed", CAIRN__CFG_INT, AT(sp.seed), .lo = 0, .hi = CAIRN__CFG_NO_MAX},
    {"stop", CAIRN__CFG_STRS, AT(stop), CAIRN__CFG_COUNT(cairn__llm_cfg, n_stop)},
    {NULL},
};
/* ... and those of the in-process engine */
static const cairn__cfg_field local_fields[] = {
    {"model", CAIRN__CFG_PATH, AT(model), .required = "required (path to a GGUF file)"},
    {"cache_type", CAIRN__CFG_ENUM, AT(cache_type), .choices = cache_types, .sdef = "f32"},
    /* tuning: a thread count changes how fast, not what; the backend is not tuning (the GPU's
     * f16 weights give other bits than the CPU) */
    {"threads", CAIRN__CFG_INT, AT(threads), .lo = 0, .hi = 1024, .tuning = 1},
    {"ctx", CAIRN__CFG_INT, AT(ctx), .lo = 0, .hi = 1 << 20},
    {"top_k", CAIRN__CFG_INT, AT(sp.top_k), .lo = 0, .hi = 1 << 20, .def = 40},
    {NULL},
};
#undef AT

/* What the output depends on, pinned through the step version: the SHA-256 of the section's
 * canonical form, so no setting may be left out of it. */
static int digest_of(const cairn__cfg *r, char digest[65])
{
    char *canon = NULL;
    size_t clen = 0;
    int rc = cairn__canon_json(r->obj, &canon, &clen);
    if (rc)
        return cairn__cfg_fail(r, rc, NULL, "%s",
                               rc == CAIRN_ENOMEM ? "out of memory"
                                                  : "cannot canonicalize the settings");
    cairn__sha256_hex(canon, clen, digest);
    free(canon);
    return digest[0] ? 0 : cairn__cfg_fail(r, CAIRN_ENOMEM, NULL, "out of memory"); /* OpenSSL */
}

static void release(cairn__llm_cfg *c)
{
    cairn__cfg_release(common_fields, c);
    cairn__cfg_release(c->backend == CAIRN__LLM_OPENAI ? cairn__llm_openai_fields : local_fields,
                       c);
    cairn__llm_openai_release(c);
}

/* common/config.h's cairn__cfg_parse, over two tables: the common one, then the backend's. */
static int parse(const cairn__cfg *r, cairn__llm_cfg *c)
{
    int rc = cairn__cfg_read_field(r, &common_fields[0], c);
    if (rc)
        return rc;
    const int remote = c->backend == CAIRN__LLM_OPENAI;
    const cairn__cfg_field *const tables[] = {
        common_fields, remote ? cairn__llm_openai_fields : local_fields, NULL};
    if ((rc = cairn__cfg_check_keys(r, tables, NULL)) || (rc = cairn__cfg_read(r, tables[0], c)) ||
        (rc = cairn__cfg_read(r, tables[1], c)))
        return rc;
    if (remote && (rc = cairn__llm_openai_setup(r, c)))
        return rc;
    cairn__sampler_params d; /* the engine's value of what the table does not read */
    cairn__sampler_params_default(&d);
    c->sp.repeat_last_n = d.repeat_last_n;
    c->has_seed = json_object_get(r->obj, "seed") != NULL;
    rc = cairn__cfg_version(r, tables, &c->version);
    return rc ? rc : digest_of(r, c->digest);
}

int cairn__llm_cfg_parse(const json_t *cfg, const char *base_dir, cairn__llm_cfg **out, char *err,
                         size_t errlen)
{
    *out = NULL;
    cairn__cfg r;
    int rc = cairn__cfg_open(&r, cfg, "generate", base_dir, err, errlen);
    if (rc)
        return rc;
    cairn__llm_cfg *c = calloc(1, sizeof *c);
    if (!c)
        return cairn__cfg_fail(&r, CAIRN_ENOMEM, NULL, "out of memory");
    if ((rc = parse(&r, c))) {
        release(c);
        free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void cairn__llm_cfg_free(cairn__llm_cfg *c)
{
    if (!c)
        return;
    release(c);
    free(c);
}

int cairn__llm_cfg_check(const cairn__llm_cfg *c, char *err, size_t errlen)
{
    if (c->backend == CAIRN__LLM_OPENAI)
        return 0; /* a server that is down now is a transient failure of the step, not a refusal */
    struct stat st;
    int fd = open(c->model, O_RDONLY | O_CLOEXEC), e = errno;
    if (fd < 0) {
        cairn__seterr(err, errlen, "generate.model: %s: %s", c->model, strerror(e));
        return CAIRN_ENOENT;
    }
    int dir = fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
    close(fd);
    if (dir) {
        cairn__seterr(err, errlen, "generate.model: %s: is a directory, not a GGUF file", c->model);
        return CAIRN_ENOENT;
    }
    if (strcmp(backends[c->backend], "cuda") == 0) {
        char why[1024];
        if (cairn__cuda_device_check(why, sizeof why) != 0) {
            cairn__seterr(err, errlen, "generate.backend: \"cuda\" needs a CUDA device: %s", why);
            return CAIRN_ENODEVICE;
        }
    }
    return 0;
}

const char *cairn__llm_cfg_digest(const cairn__llm_cfg *c) { return c->digest; }

uint32_t cairn__llm_cfg_version(const cairn__llm_cfg *c) { return c->version; }

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
static pthread_mutex_t loaded_mu = PTHREAD_MUTEX_INITIALIZER;

static int engine_for(const cairn__llm_cfg *c, char *err, size_t errlen)
{
    char key[sizeof loaded.key];
    snprintf(key, sizeof key, "%s|%s|%d|%d|%s", c->model, backends[c->backend], c->threads, c->ctx,
             cache_types[c->cache_type]);
    if (loaded.e && strcmp(key, loaded.key) == 0)
        return 0;
    cairn__engine_free(loaded.e);
    loaded.e = NULL;
    cairn__engine_opts o = {.backend = backends[c->backend],
                            .n_ctx = c->ctx,
                            .n_threads = c->threads,
                            .cache_type = cache_types[c->cache_type]};
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

static int on_progress(void *user, const int32_t *gen, size_t n, const uint8_t *state,
                       size_t state_len)
{
    gen_arg *a = user;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    const cairn__mp_kv kv[] = {
        CAIRN__MP_U("v", 1),
        CAIRN__MP_S("prompt_sha", a->prompt_sha, 64),
        {"tokens", CAIRN__MP_I32S, .p = gen, .n = n},
        {"state", CAIRN__MP_BIN, .p = state, .n = state_len},
    };
    CAIRN__MP_PACK(&pk, kv);
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
    /* the cause in words: the runner and the CLI add the task's own code, and two names in one
     * line ("(CAIRN_ECONTEXT) (CAIRN_EDEAD)") read as two failures */
    cairn_ctx_set_error(ctx, "generate: %s", err && *err ? err : cairn_strerror(rc));
    switch (rc) {
    case CAIRN_ENOMEM:
    case CAIRN_ECUDA:
    case CAIRN_EIO:
        return CAIRN_STEP_TRANSIENT;
    default:
        return CAIRN_STEP_PERMANENT; /* bad model file, bad template, prompt too long, ... */
    }
}

/* The local engine's part (text: the rendered user message, freed here); under loaded_mu. */
static cairn_step_result local_step(cairn_ctx *ctx, const cairn__llm_cfg *c, char *text)
{
    char err[512] = "";
    int rc;
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
                                cache_types[c->cache_type], ids, n_ids, ga.prompt_sha)) {
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
    const char *fin = cairn__finish_name(r.finish);
    const cairn__mp_kv sampler[] = {
        CAIRN__MP_D("temperature", o.sampling.temperature),
        CAIRN__MP_D("top_p", o.sampling.top_p),
        CAIRN__MP_I("top_k", o.sampling.top_k),
        CAIRN__MP_D("repeat_penalty", o.sampling.repeat_penalty),
    };
    const cairn__mp_kv kv[] = {
        CAIRN__MP_S("text", r.text, r.text_len),
        CAIRN__MP_S("finish_reason", fin, strlen(fin)),
        CAIRN__MP_U("prompt_tokens", r.n_prompt),
        CAIRN__MP_U("completion_tokens", r.n_tokens),
        CAIRN__MP_U("resumed_tokens", n_saved),
        CAIRN__MP_U("generated_tokens", r.n_tokens - n_saved),
        CAIRN__MP_S("model", c->model, strlen(c->model)),
        CAIRN__MP_S("model_sha256", loaded.sha, 64),
        CAIRN__MP_M("sampler", sampler),
        CAIRN__MP_U("seed", o.sampling.seed),
        CAIRN__MP_D("tokens_per_s", r.gen_tps),
    };
    CAIRN__MP_PACK(cairn_ctx_packer(ctx), kv);
    cairn__gen_result_free(&r);
    return CAIRN_STEP_OK;
}

cairn_step_result cairn__llm_step(cairn_ctx *ctx, void *user)
{
    const cairn__llm_cfg *c = user;
    char err[512] = "";
    char *text = NULL;
    int rc = render_user(ctx, c, &text, err, sizeof err);
    if (rc)
        return fail(ctx, rc, err);
    if (c->backend == CAIRN__LLM_OPENAI) {
        cairn_step_result res = cairn__llm_openai_step(
            ctx, c, text, c->has_seed ? c->sp.seed : seed_of(cairn_ctx_task_id(ctx)));
        free(text);
        return res;
    }
    /* One engine per process: runners on threads of one process (consume) take turns on it,
     * each generation using the engine's own threads. */
    pthread_mutex_lock(&loaded_mu);
    cairn_step_result res = local_step(ctx, c, text);
    pthread_mutex_unlock(&loaded_mu);
    return res;
}
