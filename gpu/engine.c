/* gpu/engine.c - the generation loop.
 *
 * Exact resume is the design constraint. A token's logits depend on how the KV cache was
 * filled (a batched sgemm rounds differently from a matrix-vector product, and the quantized
 * types' decode even rounds the activations to int8), so resume re-creates the cache the way the
 * first run did: the prompt in one forward call (chunked identically by the backend), then each
 * generated token in its own single-token call. The sampler state saved with each checkpoint
 * holds the only other input. Replayed tokens also go through the same text/stop-string logic
 * (silently), so held-back bytes and stop matches straddling the checkpoint behave as if the run
 * had never stopped.
 *
 * Sampling: on a backend with a device sampler (CUDA) each decode step returns the next token
 * instead of the logits (cairn__backend_forward_sample): the host's sampler still lists the
 * penalized ids and makes the draw, so its state and its saving are unchanged. The logits of the
 * prompt's last token come back to the host and are sampled there, in the first run and in any
 * resume alike; every later token is picked where its step ran (device or host, decided by the
 * options and the history alone), so a resume repeats the original's choices.
 *
 * Text, stop strings, callbacks and the finish rules are gpu/genseq.c's, shared with the batch
 * (gpu/batch.c), so a sequence ends the same way alone or batched.
 */
#include "gpu/engine.h"

#include "gpu/genseq.h"

#include "gpu/sample_core.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cairn_errors.h"
struct cairn__engine {
    const cairn__model *model;
    const cairn__tok *tok;
    cairn__backend *backend;
    int owns; /* loaded by cairn__engine_open */
    int32_t eos_extra;
    char err[256];
};

static int efail(cairn__engine *e, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, sizeof e->err, fmt, ap);
    va_end(ap);
    return code;
}

int cairn__engine_new(const cairn__model *m, const cairn__tok *tok, cairn__backend *b,
                      cairn__engine **out)
{
    if (!out)
        return CAIRN_EINVAL;
    *out = NULL;
    if (!m || !b)
        return CAIRN_EINVAL;
    cairn__engine *e = calloc(1, sizeof *e);
    if (!e)
        return CAIRN_ENOMEM;
    e->model = m;
    e->tok = tok;
    e->backend = b;
    e->eos_extra = -1;
    *out = e;
    return 0;
}

int cairn__engine_open(const char *path, const cairn__engine_opts *o, cairn__engine **out,
                       char *err, size_t errlen)
{
    if (!out)
        return CAIRN_EINVAL;
    *out = NULL;
    cairn__engine_opts dflt = {0};
    if (!o)
        o = &dflt;
    const int cache_type = cairn__cache_type_parse(o->cache_type);
    if (cache_type < 0) {
        snprintf(err, errlen, "unknown KV cache type '%s' (f32, f16)", o->cache_type);
        return CAIRN_EINVAL;
    }
    cairn__model *m = NULL;
    cairn__tok *tok = NULL;
    cairn__backend *b = NULL;
    int file_stage = 1;
    int rc = cairn__model_open(path, &m, err, errlen);
    if (rc != 0)
        return rc;
    if ((rc = cairn__tok_load(cairn__model_gguf(m), &tok, err, errlen)) != 0)
        goto fail;
    if (cairn__tok_n_vocab(tok) > (size_t)m->n_vocab) {
        rc = CAIRN_EFORMAT;
        snprintf(err, errlen, "tokenizer has %zu tokens but token_embd.weight only %d rows",
                 cairn__tok_n_vocab(tok), m->n_vocab);
        goto fail;
    }
    file_stage = 0; /* from here on errors are the backend's, not the file's */
    cairn__backend_opts bo = {o->n_ctx, o->n_threads, o->n_batch, 0, cache_type};
    if ((rc = cairn__backend_new(o->backend, m, &bo, &b, err, errlen)) != 0)
        goto fail;
    if ((rc = cairn__engine_new(m, tok, b, out)) != 0)
        goto fail;
    (*out)->owns = 1;
    return 0;
fail:
    cairn__backend_free(b);
    cairn__tok_free(tok);
    cairn__model_free(m);
    if (file_stage)
        cairn__prefix_path(err, errlen, path);
    return rc;
}

void cairn__engine_free(cairn__engine *e)
{
    if (!e)
        return;
    if (e->owns) {
        cairn__backend_free(e->backend);
        cairn__tok_free((cairn__tok *)e->tok);
        cairn__model_free((cairn__model *)e->model);
    }
    free(e);
}

const cairn__model *cairn__engine_model(const cairn__engine *e) { return e->model; }

const cairn__tok *cairn__engine_tok(const cairn__engine *e) { return e->tok; }

cairn__backend *cairn__engine_backend(const cairn__engine *e) { return e->backend; }

void cairn__engine_set_eos(cairn__engine *e, int32_t eos) { e->eos_extra = eos; }

int32_t cairn__engine_eos(const cairn__engine *e) { return e->eos_extra; }

const char *cairn__engine_errmsg(const cairn__engine *e) { return e ? e->err : "no engine"; }

const char *cairn__finish_name(int finish)
{
    switch (finish) {
    case CAIRN__FINISH_LENGTH:
        return "length";
    case CAIRN__FINISH_STOP:
        return "stop";
    case CAIRN__FINISH_EOS:
        return "eos";
    case CAIRN__FINISH_CANCEL:
        return "cancel";
    case CAIRN__FINISH_CONTEXT:
        return "context";
    default:
        return "none";
    }
}

void cairn__gen_opts_default(cairn__gen_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_tokens = 256;
    cairn__sampler_params_default(&o->sampling);
}

void cairn__gen_result_free(cairn__gen_result *r)
{
    if (!r)
        return;
    free(r->tokens);
    free(r->text);
    r->tokens = NULL;
    r->text = NULL;
    r->n_tokens = r->text_len = 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The token after tok (at position pos; the history already ends with it): one decode step,
 * sampled on the device where the backend can, else from the logits on the host. Either way
 * the sampler lists the penalty set and draws first, so its state advances the same. */
static int step(cairn__engine *e, cairn__sampler *smp, const cairn__genseq *g, int32_t tok, int pos,
                float *logits, int32_t *pen, int32_t *next)
{
    const size_t n_pen =
        cairn__sampler_penalty_ids(smp, g->hist, g->n_hist, pen, CAIRN__SAMPLE_MAX_PEN);
    const double r = cairn__sampler_greedy(smp) ? 0.0 : cairn__sampler_draw(smp);
    if (!g->o->host_sampling && n_pen <= CAIRN__SAMPLE_MAX_PEN &&
        cairn__backend_can_sample(e->backend)) {
        const cairn__sampler_params *p = cairn__sampler_get_params(smp);
        const cairn__sample_req q = {.temperature = p->temperature,
                                     .top_k = p->top_k,
                                     .top_p = p->top_p,
                                     .repeat_penalty = p->repeat_penalty,
                                     .r = r,
                                     .pen = pen,
                                     .n_pen = (int)n_pen};
        const int rc = cairn__backend_forward_sample(e->backend, tok, pos, &q, next);
        if (rc != CAIRN_EUNSUPPORTED)
            return rc;
    }
    const int rc = cairn__backend_forward(e->backend, &tok, 1, pos, logits, 0);
    if (rc)
        return rc;
    cairn__sampler_penalize(smp, logits, g->hist, g->n_hist);
    *next = cairn__sampler_pick(smp, logits, r);
    return 0;
}

static int run(cairn__engine *e, const int32_t *prompt, size_t n_prompt, const int32_t *prev,
               size_t n_prev, const uint8_t *state, size_t state_len, const cairn__gen_opts *o,
               cairn__gen_result *r)
{
    cairn__gen_opts dflt;
    if (!o) {
        cairn__gen_opts_default(&dflt);
        o = &dflt;
    }
    memset(r, 0, sizeof *r);
    e->err[0] = '\0';
    if (!prompt || n_prompt == 0)
        return efail(e, CAIRN_EINVAL, "empty prompt");
    if (n_prev && !prev)
        return efail(e, CAIRN_EINVAL, "no generated tokens given");
    const int n_ctx = cairn__backend_n_ctx(e->backend);
    if (n_prompt > (size_t)n_ctx)
        return efail(e, CAIRN_ECONTEXT, "prompt of %zu tokens is longer than the context of %d",
                     n_prompt, n_ctx);
    if (n_prompt + n_prev > (size_t)n_ctx + 1)
        return efail(e, CAIRN_ECONTEXT,
                     "prompt and generated tokens (%zu) exceed the context of %d",
                     n_prompt + n_prev, n_ctx);
    const int nv = e->model->n_vocab;
    cairn__sampler *smp = NULL;
    int rc = cairn__sampler_new(&o->sampling, nv, &smp);
    if (rc)
        return efail(e, rc, "bad sampling parameters");
    if (state && (rc = cairn__sampler_state_restore(smp, state, state_len)) != 0) {
        cairn__sampler_free(smp);
        return efail(e, rc, "bad sampler state (%zu bytes)", state_len);
    }
    cairn__genseq g;
    const int grc = cairn__genseq_init(&g, e->tok, e->eos_extra, o, prompt, n_prompt, n_prev);
    float *logits = malloc((size_t)nv * sizeof(float));
    int32_t *pen = malloc(CAIRN__SAMPLE_MAX_PEN * sizeof *pen);
    if (!logits || !pen || grc) {
        rc = efail(e, CAIRN_ENOMEM, "out of memory");
        goto done;
    }
    r->n_prompt = n_prompt;

    int fin = 0;
    int32_t tok = 0; /* the next token to accept */
    double t0 = now_s();
    rc = cairn__backend_forward(e->backend, prompt, (int)n_prompt, 0, n_prev ? NULL : logits, 0);
    if (rc == 0 && n_prev == 0)
        tok = cairn__sampler_sample(smp, logits, g.hist, g.n_hist);
    for (size_t j = 0; rc == 0 && j < n_prev && !fin; j++) {
        fin = cairn__genseq_accept(&g, prev[j]);
        if (fin < 0) {
            rc = fin;
            break;
        }
        if (!fin && o->max_tokens > 0 && g.n_hist - n_prompt >= (size_t)o->max_tokens)
            fin = CAIRN__FINISH_LENGTH;
        if (!fin && g.n_hist > (size_t)n_ctx)
            fin = CAIRN__FINISH_CONTEXT;
        if (!fin && j + 1 < n_prev)
            rc = cairn__backend_forward(e->backend, &prev[j], 1, (int)(n_prompt + j), NULL, 0);
        else if (!fin) /* the newest: its step picks the next token, as it did the first time */
            rc = step(e, smp, &g, prev[j], (int)(n_prompt + j), logits, pen, &tok);
    }
    if (rc) {
        efail(e, rc, "%s", cairn__backend_errmsg(e->backend));
        goto done;
    }
    r->prompt_seconds = now_s() - t0;
    r->prompt_tps = r->prompt_seconds > 0 ? (double)(n_prompt + n_prev) / r->prompt_seconds : 0;

    g.live = 1;
    t0 = now_s();
    size_t n_steps = 0; /* decode steps: the first token came from the prefill's logits */
    if (!fin && o->max_tokens > 0 && n_prev >= (size_t)o->max_tokens)
        fin = CAIRN__FINISH_LENGTH;
    while (!fin) {
        fin = cairn__genseq_take(&g, smp, tok, n_ctx);
        if (fin < 0) {
            rc = efail(e, fin, "out of memory");
            goto done;
        }
        if (fin)
            break;
        if ((rc = step(e, smp, &g, tok, (int)(g.n_hist - 1), logits, pen, &tok)) != 0) {
            efail(e, rc, "%s", cairn__backend_errmsg(e->backend));
            goto done;
        }
        n_steps++;
    }
    r->gen_seconds = now_s() - t0;
    r->gen_tps = r->gen_seconds > 0 ? (double)n_steps / r->gen_seconds : 0;
    if ((rc = cairn__genseq_end(&g, fin, smp, r)) != 0) {
        efail(e, rc, "out of memory");
        goto done;
    }
done:
    if (rc)
        cairn__gen_result_free(r);
    cairn__genseq_free(&g);
    free(pen);
    free(logits);
    cairn__sampler_free(smp);
    return rc;
}

int cairn__engine_generate_tokens(cairn__engine *e, const int32_t *prompt, size_t n_prompt,
                                  const cairn__gen_opts *o, cairn__gen_result *r)
{
    if (!e || !r)
        return CAIRN_EINVAL;
    return run(e, prompt, n_prompt, NULL, 0, NULL, 0, o, r);
}

int cairn__engine_resume(cairn__engine *e, const int32_t *prompt, size_t n_prompt,
                         const int32_t *generated, size_t n_generated, const uint8_t *state,
                         size_t state_len, const cairn__gen_opts *o, cairn__gen_result *r)
{
    if (!e || !r)
        return CAIRN_EINVAL;
    if (!state)
        return efail(e, CAIRN_EFORMAT, "no sampler state");
    return run(e, prompt, n_prompt, generated, n_generated, state, state_len, o, r);
}

int cairn__engine_generate(cairn__engine *e, const char *prompt, size_t len,
                           const cairn__gen_opts *o, cairn__gen_result *r)
{
    if (!e || !r || (!prompt && len))
        return CAIRN_EINVAL;
    if (!e->tok)
        return efail(e, CAIRN_EINVAL, "engine has no tokenizer");
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = cairn__tok_encode(e->tok, prompt ? prompt : "", len, 1, 1, &ids, &n);
    if (rc)
        return efail(e, rc, "cannot tokenize the prompt");
    rc = run(e, ids, n, NULL, 0, NULL, 0, o, r);
    free(ids);
    return rc;
}
