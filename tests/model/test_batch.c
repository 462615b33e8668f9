/* tests/model/test_batch.c - the batch (gpu/batch.h) against the engine alone, bit for bit.
 *
 * For every weight type mkmodel writes: five sequences with different prompts (some longer than
 * a prompt chunk, one a chunk plus one token), lengths, seeds, temperatures and stop strings,
 * joining at different steps and leaving when they finish, run as one batch; then each alone
 * through cairn__engine_generate_tokens on the same engine. Tokens, text, finish reason and
 * sampler state must be identical, and the batch's last logits of each sequence must equal (memcmp)
 * those of the same forward calls on the solo backend (the prompt, then each generated token but
 * the last, one at a time: what the engine ran), and one sequence's stream and newest checkpoint
 * must be its text and resume exactly through the engine alone, and in the batch
 * (cairn__batch_add_resume) beside another sequence. Also: an f16 cache; the pool's
 * policy (a prompt that does not fit is refused, decoding sequences wait, a step where all wait
 * returns ENOMEM, removal gives the blocks back and the rest finish unchanged); and the fallback
 * for a backend without paged ops (solo backends per sequence).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/batch.h"
#include "gpu/engine.h"
#include "gpu/gguf.h"
#include "tests/model/mkmodel.h"
#include "tests/tap.h"

#include "cairn_errors.h"

#define N_SEQ 5

typedef struct {
    int n_prompt, max_tokens, join;
    float temp;
    uint64_t seed;
    const char *stop;
} seq_spec;

static const seq_spec specs[N_SEQ] = {
    {5, 12, 0, 0.0f, 1, NULL}, {17, 9, 0, 0.9f, 2, NULL}, {33, 14, 2, 1.2f, 3, "e"},
    {40, 6, 5, 0.7f, 4, NULL}, {1, 18, 9, 1.0f, 5, NULL},
};

/* what one sequence's callbacks saw: the streamed text and the newest checkpoint */
typedef struct {
    char text[4096];
    size_t len;
    int32_t ck[64];
    size_t n_ck;
    uint8_t state[CAIRN__SAMPLER_STATE_BYTES];
    int n_calls;
} sink;

static int on_token(void *u, int32_t tok, const char *bytes, size_t n)
{
    sink *k = u;
    (void)tok;
    if (k->len + n < sizeof k->text) {
        memcpy(k->text + k->len, bytes, n);
        k->len += n;
    }
    return 0;
}

static int on_progress(void *u, const int32_t *gen, size_t n, const uint8_t *st, size_t sl)
{
    sink *k = u;
    if (n <= 64 && sl == sizeof k->state) {
        memcpy(k->ck, gen, n * sizeof *gen);
        k->n_ck = n;
        memcpy(k->state, st, sl);
        k->n_calls++;
    }
    return 0;
}

typedef struct {
    const cairn__model *m;
    const cairn__tok *tok;
    cairn__backend *b;
    cairn__engine *e;
} rig;

static void make_prompt(int k, int32_t *p, int n, int nv)
{
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(k + 1);
    for (int i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = 3 + (int32_t)(x % (uint64_t)(nv - 3));
    }
}

static void make_opts(int k, cairn__gen_opts *o, const char **stop)
{
    cairn__gen_opts_default(o);
    o->max_tokens = specs[k].max_tokens;
    o->sampling.temperature = specs[k].temp;
    o->sampling.seed = specs[k].seed;
    o->sampling.top_k = 40;
    o->sampling.repeat_penalty = k % 2 ? 1.1f : 1.0f;
    o->ignore_eos = 1;
    o->host_sampling = 1;
    if (specs[k].stop) {
        stop[0] = specs[k].stop;
        o->stop = stop;
        o->n_stop = 1;
    }
}

/* the logits the engine's last forward call gave: the prompt, then generated tokens 0..T-2 */
static int solo_logits(rig *R, const int32_t *p, int np, const cairn__gen_result *r, float *lg)
{
    int rc = cairn__backend_forward(R->b, p, np, 0, lg, 0);
    for (size_t j = 0; rc == 0 && j + 1 < r->n_tokens; j++)
        rc = cairn__backend_forward(R->b, &r->tokens[j], 1, np + (int)j, lg, 0);
    return rc;
}

/* runs the five sequences batched and alone; returns the subtests' verdict */
static int check_batch(rig *R, const cairn__batch_opts *bo, const char *what)
{
    const int nv = R->m->n_vocab;
    int32_t prompts[N_SEQ][64];
    cairn__gen_opts opts[N_SEQ];
    const char *stops[N_SEQ][1];
    int ids[N_SEQ], added = 0, steps = 0, good = 1;
    float *lg[N_SEQ];
    static sink sk; /* sequence 1's callbacks (it has no stop string: 9 tokens) */
    memset(&sk, 0, sizeof sk);
    for (int k = 0; k < N_SEQ; k++) {
        make_prompt(k, prompts[k], specs[k].n_prompt, nv);
        make_opts(k, &opts[k], stops[k]);
        if (k == 1) {
            opts[k].on_token = on_token;
            opts[k].on_progress = on_progress;
            opts[k].progress_every = 4;
            opts[k].user = &sk;
        }
        lg[k] = malloc((size_t)nv * sizeof(float));
        ids[k] = -1;
    }
    cairn__batch *B = NULL;
    char err[256];
    int rc = cairn__batch_new(R->e, bo, &B, err, sizeof err);
    if (!ok(rc == 0, "%s: a batch (%s)", what, rc ? err : "ok"))
        goto out;
    const int full = cairn__batch_free_blocks(B);
    while (added < N_SEQ || cairn__batch_n_active(B) > 0) {
        for (int k = 0; k < N_SEQ; k++)
            if (ids[k] < 0 && specs[k].join <= steps) {
                rc = cairn__batch_add(B, prompts[k], (size_t)specs[k].n_prompt, &opts[k], &ids[k]);
                good &= rc == 0;
                added++;
            }
        rc = cairn__batch_step(B);
        if (rc < 0 || ++steps > 500) {
            good = 0;
            diag("step %d: %s", steps, cairn__batch_errmsg(B));
            break;
        }
        for (int k = 0; k < N_SEQ; k++) /* keep each one's newest logits */
            if (ids[k] >= 0 && cairn__batch_logits(B, ids[k]))
                memcpy(lg[k], cairn__batch_logits(B, ids[k]), (size_t)nv * sizeof(float));
    }
    int same_tok = 1, same_logits = 1, n_tok = 0, same_ck = 0, same_resume = 0;
    float *sl = malloc((size_t)nv * sizeof(float));
    for (int k = 0; k < N_SEQ && good; k++) {
        cairn__gen_result rb, rs;
        memset(&rb, 0, sizeof rb);
        memset(&rs, 0, sizeof rs);
        rc = cairn__batch_result(B, ids[k], &rb);
        cairn__gen_opts so = opts[k]; /* alone without the callbacks: the batch's sink stays */
        so.on_token = NULL;
        so.on_progress = NULL;
        int rc2 =
            cairn__engine_generate_tokens(R->e, prompts[k], (size_t)specs[k].n_prompt, &so, &rs);
        if (k == 1 && rc == 0 && rc2 == 0) {
            /* the batch's stream and newest checkpoint: the text, and an exact resume alone */
            cairn__gen_result rr;
            const int rc3 = cairn__engine_resume(R->e, prompts[k], (size_t)specs[k].n_prompt, sk.ck,
                                                 sk.n_ck, sk.state, sizeof sk.state, &so, &rr);
            same_ck = sk.len == rb.text_len && memcmp(sk.text, rb.text, rb.text_len) == 0 &&
                      sk.n_calls > 0 && rc3 == 0 && rr.n_tokens == rs.n_tokens &&
                      memcmp(rr.tokens, rs.tokens, rs.n_tokens * sizeof *rs.tokens) == 0 &&
                      memcmp(rr.state, rs.state, sizeof rs.state) == 0;
            if (rc3 == 0)
                cairn__gen_result_free(&rr);
            /* the same checkpoint resumed in the batch, beside a fresh sequence: as alone */
            int rid = -1, fid = -1, n = 0;
            cairn__gen_opts fo = opts[0];
            int rc4 = cairn__batch_add_resume(B, prompts[k], (size_t)specs[k].n_prompt, sk.ck,
                                              sk.n_ck, sk.state, sizeof sk.state, &so, &rid);
            if (rc4 == 0)
                rc4 = cairn__batch_add(B, prompts[0], (size_t)specs[0].n_prompt, &fo, &fid);
            while (rc4 == 0 && cairn__batch_n_active(B) > 0 && n++ < 500)
                rc4 = cairn__batch_step(B) < 0;
            cairn__gen_result rq;
            memset(&rq, 0, sizeof rq);
            same_resume = rc4 == 0 && cairn__batch_result(B, rid, &rq) == 0 &&
                          rq.n_tokens == rs.n_tokens && rq.finish == rs.finish &&
                          memcmp(rq.tokens, rs.tokens, rs.n_tokens * sizeof *rs.tokens) == 0 &&
                          rq.text_len == rs.text_len &&
                          memcmp(rq.text, rs.text, rs.text_len) == 0 &&
                          memcmp(rq.state, rs.state, sizeof rs.state) == 0;
            cairn__gen_result_free(&rq);
            cairn__batch_remove(B, rid);
            cairn__batch_remove(B, fid);
        }
        if (rc || rc2) {
            same_tok = 0;
            continue;
        }
        n_tok += (int)rb.n_tokens;
        const int same = rb.finish == rs.finish && rb.n_tokens == rs.n_tokens &&
                         memcmp(rb.tokens, rs.tokens, rs.n_tokens * sizeof *rs.tokens) == 0 &&
                         rb.text_len == rs.text_len && memcmp(rb.text, rs.text, rs.text_len) == 0 &&
                         memcmp(rb.state, rs.state, sizeof rs.state) == 0;
        if (!same)
            diag("%s: sequence %d: %zu/%zu tokens, finish %s/%s", what, k, rb.n_tokens, rs.n_tokens,
                 cairn__finish_name(rb.finish), cairn__finish_name(rs.finish));
        same_tok &= same;
        if (solo_logits(R, prompts[k], specs[k].n_prompt, &rs, sl) != 0 ||
            memcmp(sl, lg[k], (size_t)nv * sizeof(float)) != 0) {
            same_logits = 0;
            diag("%s: sequence %d: logits differ", what, k);
        }
        cairn__gen_result_free(&rb);
        cairn__gen_result_free(&rs);
    }
    free(sl);
    good &= ok(good && same_tok,
               "%s: %d sequences joining at steps 0-9: tokens, text, finish and sampler state "
               "as alone (%d tokens, %d steps)",
               what, N_SEQ, n_tok, steps);
    good &= ok(good && same_logits, "%s: every sequence's last logits bit for bit the solo path's",
               what);
    good &= ok(good && same_ck,
               "%s: a batched sequence's stream is its text, and its checkpoint (%zu tokens) "
               "resumes exactly through the engine alone",
               what, sk.n_ck);
    good &= ok(good && same_resume,
               "%s: that checkpoint resumed in the batch (cairn__batch_add_resume, beside a fresh "
               "sequence) gives the tokens, text, finish and state of the uninterrupted run",
               what);
    for (int k = 0; k < N_SEQ; k++)
        cairn__batch_remove(B, ids[k]);
    good &= ok(cairn__batch_free_blocks(B) == full && cairn__batch_n_active(B) == 0,
               "%s: removed, the pool is back to full (%d of %d)", what,
               cairn__batch_free_blocks(B), cairn__batch_n_blocks(B));
out:
    cairn__batch_free(B);
    for (int k = 0; k < N_SEQ; k++)
        free(lg[k]);
    return good;
}

static int rig_open_arch(rig *R, mk_loaded *L, const char *arch, uint32_t type, int cache_type,
                         char *err, size_t errlen)
{
    memset(R, 0, sizeof *R);
    mk_spec s;
    mk_spec_default(&s);
    /* a window of 8, which the prompts of 17 to 40 tokens and their decode steps pass, on every
     * architecture but llama ("mistral": llama with one); gemma3 with its six-layer pattern */
    if (strcmp(arch, "llama") != 0)
        s.swa = 8;
    s.arch = strcmp(arch, "mistral") == 0 ? "llama" : arch;
    s.tokenizer = 1;
    s.vocab = 300;
    s.wtype = type;
    s.seed = 11 + type;
    s.dim = 256; /* the K-quants' rows of 256 */
    s.ff = 512;
    s.n_layers = strcmp(arch, "gemma3") == 0 ? 6 : 2;
    s.ctx = 128;
    int rc = mk_load(&s, L, err, errlen);
    cairn__tok *tok = NULL;
    if (!rc)
        rc = cairn__tok_load(L->g, &tok, err, errlen);
    R->m = L->m;
    R->tok = tok;
    /* chunks of 16: the prompts of 17, 33 and 40 tokens take several, some through the chunk's
     * matrix-product attention */
    cairn__backend_opts bo = {
        .n_ctx = 128, .n_threads = 2, .n_batch = 16, .cache_type = cache_type};
    if (!rc)
        rc = cairn__backend_new("cpu", L->m, &bo, &R->b, err, errlen);
    if (!rc)
        rc = cairn__engine_new(L->m, tok, R->b, &R->e);
    return rc;
}

static int rig_open(rig *R, mk_loaded *L, uint32_t type, int cache_type, char *err, size_t errlen)
{
    return rig_open_arch(R, L, "llama", type, cache_type, err, errlen);
}

static void rig_close(rig *R, mk_loaded *L)
{
    cairn__engine_free(R->e);
    cairn__backend_free(R->b);
    cairn__tok_free((cairn__tok *)R->tok);
    mk_unload(L);
}

/* the pool's policy on a pool of 5 blocks (80 positions) */
static void check_pool(rig *R)
{
    cairn__batch_opts bo = {.n_blocks = 5};
    cairn__batch *B = NULL;
    char err[256];
    if (!ok(cairn__batch_new(R->e, &bo, &B, err, sizeof err) == 0, "a batch of 5 blocks"))
        return;
    int32_t p[96];
    make_prompt(7, p, 96, R->m->n_vocab);
    int id = -1, a = -1, c = -1;
    int rc = cairn__batch_add(B, p, 96, NULL, &id);
    ok(rc == CAIRN_ENOMEM && id < 0 && cairn__batch_free_blocks(B) == 5,
       "a prompt of 96 tokens (6 blocks) is refused with ENOMEM, nothing taken (%s)",
       cairn__batch_errmsg(B));
    cairn__gen_opts o;
    cairn__gen_opts_default(&o);
    o.max_tokens = 40;
    o.ignore_eos = 1;
    o.sampling.seed = 9;
    rc = cairn__batch_add(B, p, 32, &o, &a);
    if (!rc)
        rc = cairn__batch_add(B, p + 32, 40, &o, &c);
    ok(rc == 0 && cairn__batch_free_blocks(B) == 0, "two prompts of 32 and 40 take all 5 blocks");
    int32_t q[8];
    int d = -1;
    ok(cairn__batch_add(B, q, 0, NULL, &d) == CAIRN_EINVAL && d < 0, "an empty prompt: EINVAL");
    make_prompt(8, q, 8, R->m->n_vocab);
    ok(cairn__batch_add(B, q, 8, NULL, &d) == CAIRN_ENOMEM, "a third, with no block free: ENOMEM");
    /* a's 33rd position needs a block; c fills its last at position 79 */
    int steps = 0;
    while ((rc = cairn__batch_step(B)) > 0 && steps < 200)
        steps++;
    ok(rc == CAIRN_ENOMEM && cairn__batch_seq_state(B, a) == CAIRN__SEQ_WAITING &&
           cairn__batch_seq_state(B, c) == CAIRN__SEQ_WAITING,
       "when every sequence waits for a block, the step says ENOMEM (%s)", cairn__batch_errmsg(B));
    rc = cairn__batch_remove(B, a);
    ok(rc == 0 && cairn__batch_free_blocks(B) == 2,
       "removing one gives its 2 blocks back (%d free)", cairn__batch_free_blocks(B));
    while ((rc = cairn__batch_step(B)) > 0 && steps < 400)
        steps++;
    cairn__gen_result rb, rs;
    memset(&rb, 0, sizeof rb);
    memset(&rs, 0, sizeof rs);
    int rc1 = cairn__batch_result(B, c, &rb);
    int rc2 = cairn__engine_generate_tokens(R->e, p + 32, 40, &o, &rs);
    ok(rc == 0 && rc1 == 0 && rc2 == 0 && rb.n_tokens == rs.n_tokens && rb.finish == rs.finish &&
           memcmp(rb.tokens, rs.tokens, rs.n_tokens * sizeof *rs.tokens) == 0 &&
           memcmp(rb.state, rs.state, sizeof rs.state) == 0,
       "the one that waited finishes as it would alone (%zu tokens, %s)", rb.n_tokens,
       cairn__finish_name(rb.finish));
    ok(cairn__batch_result(B, c, &rb) == CAIRN_ESTATE &&
           cairn__batch_result(B, a, &rb) == CAIRN_ENOTFOUND,
       "a result is taken once; a removed sequence has none");
    cairn__gen_result_free(&rb);
    cairn__gen_result_free(&rs);
    cairn__batch_remove(B, c);
    ok(cairn__batch_free_blocks(B) == 5, "all removed: the pool is full again");
    cairn__batch_free(B);
}

int main(void)
{
    const uint32_t types[] = {CAIRN__GGML_F32,  CAIRN__GGML_F16,    CAIRN__GGML_BF16,
                              CAIRN__GGML_Q8_0, CAIRN__GGML_Q4_0,   CAIRN__GGML_Q4_1,
                              CAIRN__GGML_Q5_0, CAIRN__GGML_Q5_1,   CAIRN__GGML_Q4_K,
                              CAIRN__GGML_Q6_K, CAIRN__GGML_Q2_K,   CAIRN__GGML_Q3_K,
                              CAIRN__GGML_Q5_K, CAIRN__GGML_IQ4_NL, CAIRN__GGML_IQ4_XS};
    char err[256], what[64];
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        rig R;
        mk_loaded L;
        memset(&L, 0, sizeof L);
        const int rc = rig_open(&R, &L, types[t], CAIRN__CACHE_F32, err, sizeof err);
        snprintf(what, sizeof what, "%s", cairn__ggml_type_name(types[t]));
        if (ok(rc == 0, "%s: model and engine (%s)", what, rc ? err : "ok"))
            check_batch(&R, NULL, what);
        if (rc == 0 && types[t] == CAIRN__GGML_Q8_0) {
            check_pool(&R);
            /* a backend without the paged ops: each sequence on a solo backend of its own */
            cairn__backend_ops plain = *R.b->ops;
            const cairn__backend_ops *cpu = R.b->ops;
            plain.kv_pool = NULL;
            plain.forward_paged = NULL;
            R.b->ops = &plain;
            cairn__batch_opts bo = {.solo = {.n_ctx = 128, .n_threads = 2, .n_batch = 16}};
            cairn__batch *B = NULL;
            ok(cairn__batch_new(R.e, &bo, &B, err, sizeof err) == 0 && !cairn__batch_paged(B),
               "without paged ops the batch runs solo backends");
            cairn__batch_free(B);
            check_batch(&R, &bo, "Q8_0 solo fallback");
            R.b->ops = cpu;
        }
        rig_close(&R, &L);
    }
    rig R;
    mk_loaded L;
    memset(&L, 0, sizeof L);
    int rc = rig_open(&R, &L, CAIRN__GGML_Q4_0, CAIRN__CACHE_F16, err, sizeof err);
    if (ok(rc == 0, "Q4_0, f16 cache: model and engine (%s)", rc ? err : "ok"))
        check_batch(&R, NULL, "Q4_0 f16 cache");
    rig_close(&R, &L);
    /* the newer architectures: windows, caps, post-norms, fused weights, the local rope; the
     * caps' own attention kernel also over a half cache */
    static const struct {
        const char *arch;
        uint32_t type;
        int cache;
    } newer[] = {{"phi3", CAIRN__GGML_Q8_0, CAIRN__CACHE_F32},
                 {"gemma2", CAIRN__GGML_Q8_0, CAIRN__CACHE_F32},
                 {"gemma2", CAIRN__GGML_F16, CAIRN__CACHE_F16},
                 {"gemma3", CAIRN__GGML_Q4_K, CAIRN__CACHE_F32},
                 {"mistral", CAIRN__GGML_Q8_0, CAIRN__CACHE_F32}};
    for (size_t a = 0; a < sizeof newer / sizeof *newer; a++) {
        memset(&L, 0, sizeof L);
        snprintf(what, sizeof what, "%s %s%s", newer[a].arch, cairn__ggml_type_name(newer[a].type),
                 newer[a].cache == CAIRN__CACHE_F16 ? " f16 cache" : "");
        rc = rig_open_arch(&R, &L, newer[a].arch, newer[a].type, newer[a].cache, err, sizeof err);
        if (ok(rc == 0, "%s: model and engine (%s)", what, rc ? err : "ok"))
            check_batch(&R, NULL, what);
        rig_close(&R, &L);
    }
    return tap_done();
}
