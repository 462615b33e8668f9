/* gpu/batch.c - continuous batching over the paged KV cache (gpu/batch.h).
 *
 * A step gathers one entry per runnable sequence (a decode step, or the next chunk of a prompt)
 * and hands them to the backend in one cairn__backend_forward_paged call; then each sequence
 * samples and takes its token exactly as the engine's loop does (gpu/genseq.h: text, stop
 * strings, callbacks, finish rules). Invariance rests on three things: the backend's rows are
 * independent (each row the solo path's arithmetic), a prompt is run in the solo backend's chunks
 * (n_batch tokens from position 0, so attention and the products see the same shapes), and the
 * sampler makes the same calls in the same order as the engine's host-sampling path (the draw,
 * the penalty on a copy of the logits, the pick).
 *
 * The pool's bookkeeping is here, the memory in the backend: a stack of free block ids, a block
 * table per sequence. Which blocks a sequence gets never changes its bits (attention gathers them
 * in position order), so the order of the stack does not matter.
 */
#include "gpu/batch.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn_errors.h"
#include "gpu/genseq.h"

typedef struct {
    int id, state;
    int32_t *prompt;
    size_t n_prompt, n_fed; /* prompt tokens already run */
    cairn__gen_opts o;      /* its stop array and strings are this sequence's copies */
    char **stop;
    cairn__genseq g;
    cairn__sampler *smp;
    int32_t *blocks; /* block table */
    int n_blk, cap_blk;
    int32_t tok; /* decode: the token to run next (the newest of the history) */
    int has_logits;
    float *logits; /* n_vocab, raw */
    float *work;   /* n_vocab, penalized for the pick */
    int fin, taken;
    int32_t *prev; /* a resumed sequence's generated tokens, replayed one decode step each */
    size_t n_prev, n_rep;
    cairn__gen_result res;
    cairn__backend *solo; /* without paged ops */
} seq;

struct cairn__batch {
    cairn__engine *e;
    cairn__backend *be;
    const cairn__model *m;
    cairn__batch_opts o;
    int paged, n_ctx, chunk;
    seq **seqs; /* max_seqs slots, NULL where free */
    int next_id;
    int32_t *free_blk;
    int n_free, n_blocks;
    cairn__kv_seq *ent;
    seq **ent_seq;
    char err[256];
};

static int bfail(cairn__batch *b, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err, sizeof b->err, fmt, ap);
    va_end(ap);
    return code;
}

int cairn__batch_new(cairn__engine *e, const cairn__batch_opts *o, cairn__batch **out, char *err,
                     size_t errlen)
{
    if (!out || !e)
        return CAIRN_EINVAL;
    *out = NULL;
    cairn__batch_opts d;
    memset(&d, 0, sizeof d);
    if (o)
        d = *o;
    cairn__backend *be = cairn__engine_backend(e);
    const int nb = cairn__backend_n_batch(be);
    if (d.max_seqs < 0 || d.n_blocks < 0 || d.prompt_chunks < 0 || (nb > 0 && d.max_seqs > nb)) {
        snprintf(err, errlen, "bad batch options (max_seqs %d with n_batch %d, n_blocks %d)",
                 d.max_seqs, nb, d.n_blocks);
        return CAIRN_EINVAL;
    }
    cairn__batch *b = calloc(1, sizeof *b);
    if (!b)
        return CAIRN_ENOMEM;
    b->e = e;
    b->be = be;
    b->m = cairn__engine_model(e);
    b->paged = cairn__backend_can_page(be);
    b->n_ctx = cairn__backend_n_ctx(be);
    if (!b->paged && d.solo.n_ctx > 0)
        b->n_ctx = d.solo.n_ctx;
    if (d.max_seqs == 0)
        d.max_seqs = nb > 0 && nb < 64 ? nb : 64;
    if (d.n_blocks == 0)
        d.n_blocks = 4 * ((b->n_ctx + CAIRN__KV_BLOCK - 1) / CAIRN__KV_BLOCK);
    if (d.prompt_chunks == 0)
        d.prompt_chunks = 1;
    b->o = d;
    /* the solo backend's chunks (cpu_forward's), so a prompt's arithmetic is the same */
    b->chunk = b->paged ? nb : (d.solo.n_batch > 0 ? d.solo.n_batch : nb);
    b->n_blocks = b->n_free = d.n_blocks;
    b->seqs = calloc((size_t)d.max_seqs, sizeof *b->seqs);
    b->free_blk = malloc((size_t)d.n_blocks * sizeof *b->free_blk);
    b->ent = malloc((size_t)d.max_seqs * sizeof *b->ent);
    b->ent_seq = malloc((size_t)d.max_seqs * sizeof *b->ent_seq);
    int rc = b->seqs && b->free_blk && b->ent && b->ent_seq ? 0 : CAIRN_ENOMEM;
    if (rc)
        snprintf(err, errlen, "out of memory");
    else if (b->paged && (rc = cairn__backend_kv_pool(be, d.n_blocks)) != 0)
        snprintf(err, errlen, "%s", cairn__backend_errmsg(be));
    if (rc) {
        b->paged = 0; /* no pool to free */
        cairn__batch_free(b);
        return rc;
    }
    for (int i = 0; i < d.n_blocks; i++) /* popped from the end: block 0 first */
        b->free_blk[i] = d.n_blocks - 1 - i;
    *out = b;
    return 0;
}

static void seq_free(cairn__batch *b, seq *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n_blk; i++)
        b->free_blk[b->n_free++] = s->blocks[i];
    free(s->blocks);
    free(s->prompt);
    free(s->prev);
    for (size_t i = 0; s->stop && i < s->o.n_stop; i++)
        free(s->stop[i]);
    free(s->stop);
    cairn__genseq_free(&s->g);
    cairn__sampler_free(s->smp);
    free(s->logits);
    free(s->work);
    cairn__gen_result_free(&s->res);
    cairn__backend_free(s->solo);
    free(s);
}

void cairn__batch_free(cairn__batch *b)
{
    if (!b)
        return;
    for (int i = 0; b->seqs && i < b->o.max_seqs; i++)
        seq_free(b, b->seqs[i]);
    if (b->paged)
        (void)cairn__backend_kv_pool(b->be, 0);
    free(b->seqs);
    free(b->free_blk);
    free(b->ent);
    free(b->ent_seq);
    free(b);
}

/* blocks for positions [0, upto) in s's table, from the pool; 0 or CAIRN_ENOMEM (none taken) */
static int take_blocks(cairn__batch *b, seq *s, int upto)
{
    const int need = (upto + CAIRN__KV_BLOCK - 1) / CAIRN__KV_BLOCK - s->n_blk;
    if (need <= 0)
        return 0;
    if (need > b->n_free)
        return CAIRN_ENOMEM;
    if (s->n_blk + need > s->cap_blk) {
        const int cap = s->n_blk + need + 8;
        int32_t *t = realloc(s->blocks, (size_t)cap * sizeof *t);
        if (!t)
            return CAIRN_ENOMEM;
        s->blocks = t;
        s->cap_blk = cap;
    }
    for (int i = 0; i < need; i++)
        s->blocks[s->n_blk++] = b->free_blk[--b->n_free];
    return 0;
}

static seq *find(const cairn__batch *b, int id)
{
    for (int i = 0; id >= 0 && i < b->o.max_seqs; i++)
        if (b->seqs[i] && b->seqs[i]->id == id)
            return b->seqs[i];
    return NULL;
}

int cairn__batch_add(cairn__batch *b, const int32_t *prompt, size_t n_prompt,
                     const cairn__gen_opts *o, int *id)
{
    return cairn__batch_add_resume(b, prompt, n_prompt, NULL, 0, NULL, 0, o, id);
}

int cairn__batch_add_resume(cairn__batch *b, const int32_t *prompt, size_t n_prompt,
                            const int32_t *prev, size_t n_prev, const uint8_t *state,
                            size_t state_len, const cairn__gen_opts *o, int *id)
{
    if (!b || !id)
        return CAIRN_EINVAL;
    *id = -1;
    b->err[0] = '\0';
    if (!prompt || n_prompt == 0)
        return bfail(b, CAIRN_EINVAL, "empty prompt");
    if (n_prev && (!prev || !state))
        return bfail(b, CAIRN_EINVAL, "a resume needs the generated tokens and the sampler state");
    const int nv = b->m->n_vocab;
    for (size_t i = 0; i < n_prompt + n_prev; i++) {
        const int32_t t = i < n_prompt ? prompt[i] : prev[i - n_prompt];
        if (t < 0 || t >= nv)
            return bfail(b, CAIRN_EINVAL, "token %d at %zu is outside the vocabulary (%d)", t, i,
                         nv);
    }
    if (n_prompt > (size_t)b->n_ctx)
        return bfail(b, CAIRN_ECONTEXT, "prompt of %zu tokens is longer than the context of %d",
                     n_prompt, b->n_ctx);
    if (n_prompt + n_prev > (size_t)b->n_ctx + 1)
        return bfail(b, CAIRN_ECONTEXT,
                     "prompt and generated tokens (%zu) exceed the context of %d",
                     n_prompt + n_prev, b->n_ctx);
    int slot = -1;
    for (int i = 0; i < b->o.max_seqs && slot < 0; i++)
        if (!b->seqs[i])
            slot = i;
    if (slot < 0)
        return bfail(b, CAIRN_EBUSY, "the batch holds %d sequences already", b->o.max_seqs);
    seq *s = calloc(1, sizeof *s);
    if (!s)
        return bfail(b, CAIRN_ENOMEM, "out of memory");
    if (o)
        s->o = *o;
    else
        cairn__gen_opts_default(&s->o);
    s->o.host_sampling = 1;
    int rc = 0;
    if (s->o.n_stop) {
        s->stop = calloc(s->o.n_stop, sizeof *s->stop);
        for (size_t i = 0; s->stop && i < s->o.n_stop && rc == 0; i++)
            if (s->o.stop[i] && !(s->stop[i] = strdup(s->o.stop[i])))
                rc = CAIRN_ENOMEM;
        if (!s->stop)
            rc = CAIRN_ENOMEM;
        s->o.stop = (const char *const *)s->stop;
    }
    s->prompt = malloc(n_prompt * sizeof *prompt);
    s->logits = malloc((size_t)nv * sizeof(float));
    s->work = malloc((size_t)nv * sizeof(float));
    if (!s->prompt || !s->logits || !s->work)
        rc = CAIRN_ENOMEM;
    if (rc == 0 && n_prev && !(s->prev = malloc(n_prev * sizeof *prev)))
        rc = CAIRN_ENOMEM;
    if (rc == 0)
        rc = cairn__genseq_init(&s->g, cairn__engine_tok(b->e), cairn__engine_eos(b->e), &s->o,
                                prompt, n_prompt, n_prev);
    if (rc) {
        seq_free(b, s);
        return bfail(b, rc, "out of memory");
    }
    if ((rc = cairn__sampler_new(&s->o.sampling, nv, &s->smp)) != 0) {
        seq_free(b, s);
        return bfail(b, rc, "bad sampling parameters");
    }
    if (n_prev && (rc = cairn__sampler_state_restore(s->smp, state, state_len)) != 0) {
        seq_free(b, s);
        return bfail(b, rc, "bad sampler state (%zu bytes)", state_len);
    }
    if (n_prev)
        memcpy(s->prev, prev, n_prev * sizeof *prev);
    s->n_prev = n_prev;
    memcpy(s->prompt, prompt, n_prompt * sizeof *prompt);
    s->n_prompt = n_prompt;
    if ((rc = take_blocks(b, s, (int)n_prompt)) != 0) {
        const int need = ((int)n_prompt + CAIRN__KV_BLOCK - 1) / CAIRN__KV_BLOCK;
        seq_free(b, s);
        return bfail(b, rc, "KV pool: the prompt needs %d blocks, %d of %d free", need, b->n_free,
                     b->n_blocks);
    }
    if (!b->paged) {
        cairn__backend_opts so = b->o.solo;
        if (so.n_ctx <= 0)
            so.n_ctx = b->n_ctx;
        if (so.n_batch <= 0)
            so.n_batch = b->chunk;
        char err[256];
        if ((rc = cairn__backend_new(cairn__backend_name(b->be), b->m, &so, &s->solo, err,
                                     sizeof err)) != 0) {
            seq_free(b, s);
            return bfail(b, rc, "%s", err);
        }
    }
    s->id = b->next_id++;
    s->state = CAIRN__SEQ_PROMPT;
    b->seqs[slot] = s;
    *id = s->id;
    return 0;
}

/* the sequence ends with finish fin: its result made, its blocks back in the pool */
static int finish(cairn__batch *b, seq *s, int fin)
{
    s->fin = fin;
    s->state = CAIRN__SEQ_DONE;
    for (int i = 0; i < s->n_blk; i++)
        b->free_blk[b->n_free++] = s->blocks[i];
    s->n_blk = 0;
    const int rc = cairn__genseq_end(&s->g, fin, s->smp, &s->res);
    return rc ? bfail(b, rc, "out of memory") : 0;
}

/* A resumed sequence's next replayed token, as the engine's resume takes it (run() in
 * gpu/engine.c): into the history and the text without callbacks, the length and context rules,
 * then one decode step for it (its logits only for the newest, which picks the next token). */
static int replay(cairn__batch *b, seq *s)
{
    const int32_t t = s->prev[s->n_rep++];
    int fin = cairn__genseq_accept(&s->g, t);
    if (fin < 0)
        return bfail(b, fin, "out of memory");
    if (!fin && s->o.max_tokens > 0 && s->g.n_hist - s->n_prompt >= (size_t)s->o.max_tokens)
        fin = CAIRN__FINISH_LENGTH;
    if (!fin && s->g.n_hist > (size_t)b->n_ctx)
        fin = CAIRN__FINISH_CONTEXT;
    if (fin) {
        s->g.live = 1; /* as the engine's: the end releases held-back bytes through on_token */
        return finish(b, s, fin);
    }
    s->tok = t;
    s->state = CAIRN__SEQ_DECODE;
    return 0;
}

/* after s's entry ran: the engine's loop for one token (run() and step() in gpu/engine.c) */
static int after(cairn__batch *b, seq *s, int was_prompt)
{
    const size_t nv = (size_t)b->m->n_vocab;
    int32_t tok;
    if (s->n_rep < s->n_prev && (was_prompt || s->n_rep > 0)) /* still replaying */
        return s->n_fed < s->n_prompt ? 0 : replay(b, s);
    memcpy(s->work, s->logits, nv * sizeof(float));
    s->has_logits = 1;
    s->g.live = 1;
    if (was_prompt) {
        if (s->n_fed < s->n_prompt)
            return 0;
        tok = cairn__sampler_sample(s->smp, s->work, s->g.hist, s->g.n_hist);
        s->g.live = 1;
    } else {
        const double r = cairn__sampler_greedy(s->smp) ? 0.0 : cairn__sampler_draw(s->smp);
        cairn__sampler_penalize(s->smp, s->work, s->g.hist, s->g.n_hist);
        tok = cairn__sampler_pick(s->smp, s->work, r);
    }
    const int fin = cairn__genseq_take(&s->g, s->smp, tok, b->n_ctx);
    if (fin < 0)
        return bfail(b, fin, "out of memory");
    if (fin)
        return finish(b, s, fin);
    s->tok = tok;
    s->state = CAIRN__SEQ_DECODE;
    return 0;
}

int cairn__batch_step(cairn__batch *b)
{
    if (!b)
        return CAIRN_EINVAL;
    b->err[0] = '\0';
    int n = 0, chunks = 0, waiting = 0;
    for (int i = 0; i < b->o.max_seqs; i++) {
        seq *s = b->seqs[i];
        if (!s || s->state == CAIRN__SEQ_DONE)
            continue;
        cairn__kv_seq *q = &b->ent[n];
        q->logits = NULL;
        if (s->state == CAIRN__SEQ_PROMPT) {
            if (chunks == b->o.prompt_chunks)
                continue;
            chunks++;
            size_t c = s->n_prompt - s->n_fed;
            if (b->chunk > 0 && c > (size_t)b->chunk)
                c = (size_t)b->chunk;
            q->tokens = s->prompt + s->n_fed;
            q->n = (int)c;
            q->pos = (int)s->n_fed;
            if (s->n_fed + c == s->n_prompt)
                q->logits = s->logits;
        } else {
            const int pos = (int)s->g.n_hist - 1;
            if (take_blocks(b, s, pos + 1) != 0) {
                s->state = CAIRN__SEQ_WAITING;
                waiting++;
                continue;
            }
            s->state = CAIRN__SEQ_DECODE;
            q->tokens = &s->tok;
            q->n = 1;
            q->pos = pos;
            /* a replayed token but the newest computes nothing to sample from (the engine's) */
            q->logits = s->n_rep < s->n_prev ? NULL : s->logits;
        }
        q->blocks = s->blocks;
        b->ent_seq[n++] = s;
    }
    if (n == 0 && waiting)
        return bfail(b, CAIRN_ENOMEM,
                     "KV pool exhausted: all %d active sequences wait for a block (%d blocks); "
                     "remove one",
                     waiting, b->n_blocks);
    int rc = 0;
    if (b->paged && n) {
        rc = cairn__backend_forward_paged(b->be, b->ent, n);
        if (rc)
            return bfail(b, rc, "%s", cairn__backend_errmsg(b->be));
    }
    for (int k = 0; k < n; k++) {
        seq *s = b->ent_seq[k];
        const cairn__kv_seq *q = &b->ent[k];
        if (!b->paged &&
            (rc = cairn__backend_forward(s->solo, q->tokens, q->n, q->pos, q->logits, 0)) != 0)
            return bfail(b, rc, "%s", cairn__backend_errmsg(s->solo));
        const int was_prompt = s->state == CAIRN__SEQ_PROMPT;
        if (was_prompt)
            s->n_fed += (size_t)q->n;
        const int replaying = s->n_rep < s->n_prev;
        if ((was_prompt && s->n_fed < s->n_prompt) || (!q->logits && !replaying))
            continue;
        if ((rc = after(b, s, was_prompt)) != 0)
            return rc;
    }
    return cairn__batch_n_active(b);
}

int cairn__batch_seq_state(const cairn__batch *b, int id)
{
    const seq *s = b ? find(b, id) : NULL;
    return s ? s->state : CAIRN__SEQ_NONE;
}

int cairn__batch_result(cairn__batch *b, int id, cairn__gen_result *r)
{
    seq *s = b && r ? find(b, id) : NULL;
    if (!s)
        return CAIRN_ENOTFOUND;
    if (s->state != CAIRN__SEQ_DONE)
        return CAIRN_EBUSY;
    if (s->taken)
        return CAIRN_ESTATE;
    *r = s->res;
    memset(&s->res, 0, sizeof s->res);
    s->taken = 1;
    return 0;
}

const float *cairn__batch_logits(const cairn__batch *b, int id)
{
    const seq *s = b ? find(b, id) : NULL;
    return s && s->has_logits ? s->logits : NULL;
}

int cairn__batch_remove(cairn__batch *b, int id)
{
    for (int i = 0; b && id >= 0 && i < b->o.max_seqs; i++)
        if (b->seqs[i] && b->seqs[i]->id == id) {
            seq_free(b, b->seqs[i]);
            b->seqs[i] = NULL;
            return 0;
        }
    return CAIRN_ENOTFOUND;
}

int cairn__batch_n_active(const cairn__batch *b)
{
    int n = 0;
    for (int i = 0; b && i < b->o.max_seqs; i++)
        n += b->seqs[i] && b->seqs[i]->state != CAIRN__SEQ_DONE;
    return n;
}

int cairn__batch_n_blocks(const cairn__batch *b) { return b ? b->n_blocks : 0; }

int cairn__batch_free_blocks(const cairn__batch *b) { return b ? b->n_free : 0; }

int cairn__batch_paged(const cairn__batch *b) { return b ? b->paged : 0; }

const char *cairn__batch_errmsg(const cairn__batch *b) { return b ? b->err : "no batch"; }
