/* gpu/cpu/backend_cpu.c - the forward pass on the CPU.
 *
 * One pass runs a chunk of up to n_batch tokens through every layer. A chunk of one token
 * (decode) multiplies by the weights with the quantized matrix-vector kernels; a longer chunk
 * (the prompt) with the same integer kernels on each token over rows kept in cache (Q8_0, Q4_0,
 * Q4_K, Q6_K), or with dequantize+sgemm (F32, F16, BF16; up to 16 tokens: dequantize a row, dot
 * it with each token), all in cairn__matmul. Activations are row-major (token, feature) buffers
 * sized for n_batch tokens at creation, so a forward pass allocates nothing.
 *
 * The KV cache holds floats or IEEE halves (cairn__backend_opts.cache_type), laid out
 * [layer][kv_head][position][head_dim]: one head's keys for every position are one contiguous
 * run, which is what attention reads, one head at a time, from the first position to the last.
 * (With a row per position holding every head, a head read head_dim elements every kv_dim: at
 * 1024 positions of the 110M bench model that stride cost a quarter of the decode speed, and it
 * kept a half cache from reading faster than a float one.) A half cache rounds each key and value
 * once, as it is stored (cairn__f32_to_f16_row), and attention widens them exactly as it reads.
 * The cache is calloc'ed for n_ctx positions up front; the kernel maps the pages only as
 * positions are first written, so a large context costs address space, not memory, until it is
 * used.
 *
 * The paged pool (cairn__backend_kv_pool, for gpu/batch.c) holds many sequences' keys and values
 * in blocks of CAIRN__KV_BLOCK positions, each laid out [layer][kv_head][16][head_dim]: a head's
 * run of a block is one contiguous stream. Batch invariance is the design constraint there: a
 * sequence's bits must not depend on which others share its step. So a paged step runs each
 * sequence through exactly the arithmetic of the solo path: its decode entries go through the
 * weights together with cairn__matmul_rows (each row cairn__matvec's, bit for bit), and attention
 * gathers the sequence's blocks of one head into a contiguous run (per thread) and calls the
 * same head kernel over it as the solo path calls over the positional cache; a prompt chunk
 * gathers its sequence's blocks of a layer into a positional layout and runs the solo chunk code
 * on it. The gather costs a copy of what attention then reads (the keys and values once more):
 * small beside the weights at the lengths a batch runs, and what buys kernels shared with the
 * solo path instead of paged variants at every ISA level.
 *
 * Attention is computed per (token, head) pair, those pairs split over the thread pool; each
 * pair scores its query against keys 0..pos (causal) with a softmax in float and a running
 * weighted sum of values. A prompt chunk of 16 tokens or more over a float cache that sees at
 * most 2048 positions instead takes two sgemm per head (attention_gemm, with OpenBLAS), up to
 * 20 % faster there; at longer contexts the per-token kernel, which streams a head's keys from
 * cache, is the faster (ATT_GEMM_MAX_CTX).
 *
 * What the newer architectures add stays out of the kernels: a layer's sliding window (ly->swa:
 * Mistral, phi3, gemma) starts a query's keys at last - swa + 1, soft-capped scores (gemma2) take
 * attn_softcap, the head kernel's steps with c * tanh(s / c) between the scores and the softmax,
 * and either keeps a chunk off the sgemm path. Both are decided in attn_one, which the solo path
 * and the batched decode step both call, so a sequence's bits stay those of the solo path. The
 * rest is element-wise on the rows: the embedding scale, gemma's post-norms and GELU, the final
 * cap, and gemma3's second rotary table for its sliding layers.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/backend.h"
#include "gpu/cpu/kernels_cpu.h"
#include "gpu/model.h"
#include "gpu/quant.h"

#include "gpu/cpu/blas.h"

/* prompt chunks of at least this many tokens, over a float cache, that see at most
 * ATT_GEMM_MAX_CTX positions take attention_gemm (with OpenBLAS). Beyond that the per-token
 * kernel (cairn__attn_head, streaming each head's keys from cache) is the faster: at 4064
 * positions of the 110M bench model, 2 threads, 559-563 tok/s against 490-534 (at 1024: 842
 * against 1014; at 2048 they tie). Over a half cache the per-token kernel reads half the bytes
 * and is never slower (widened for sgemm: 1000 against 983 at 1024, 485-524 against 704-712 at
 * 4064), so a half cache always takes it. */
#define ATT_GEMM_MIN 16
#define ATT_GEMM_MAX_CTX 2048

/* The bytes a block of attention_gemm's scores may take; a chunk's query rows go in blocks that
 * fit (each block reads every key and value once more, so as few blocks as fit: blocks of 32
 * rows instead of one of 256 took a 4064-token prompt from 531-558 to 434-447 tok/s). Read at
 * backend creation; tests lower it to reach the blocks. */
size_t cairn__cpu_att_bytes = (size_t)64 << 20;

/* output rows the batched decode step's head computes at a time (its scratch: DEC_LOGIT_ROWS
 * logits rows, 16 MiB at a 128k vocabulary) */
#define DEC_LOGIT_ROWS 32

#include "cairn_errors.h"
typedef struct {
    cairn__backend base;
    cairn__pool *pool;
    int n_batch;
    int64_t q_dim, kv_dim;
    void *kcache, *vcache; /* [layer][n_kv_heads][n_ctx][head_dim] floats, or uint16_t halves */
    int f16;               /* cache_type == CAIRN__CACHE_F16 */
    /* activations for up to n_batch tokens */
    float *x;        /* (nb, dim) residual stream */
    float *xb;       /* (nb, dim) normed input / projection output */
    float *q;        /* (nb, q_dim) */
    float *k, *v;    /* (nb, kv_dim) */
    float *att;      /* (nb, q_dim) attention output */
    float *hb, *hb2; /* (nb, ff) */
    float *rope;     /* (nb, rope_dim/2, 2) cos, sin */
    float *rope_l;   /* the same from rope_base_local (gemma3's sliding layers), or NULL */
    float *scores;   /* (n_threads, n_ctx + head_dim): a thread's scores, then a widened row */
    float *chunk_s;  /* (att_rows, min(n_ctx, ATT_GEMM_MAX_CTX)): a block of a prompt chunk's
                      * scores, or NULL */
    int att_rows;    /* query rows attention_gemm takes at a time */
    void *mv_scratch;
    float *mm_scratch;
    float *inv_freq;   /* rope_dim/2 */
    float *inv_freq_l; /* rope_dim/2 from rope_base_local, or NULL */
    /* the paged pool (kv_pool): n_blocks blocks of [n_layers][n_kv_heads][KV_BLOCK][head_dim]
     * floats or halves, and its gather buffers */
    void *kpool, *vpool;
    int n_blocks;
    void *gk, *gv; /* one layer of one sequence, [n_kv_heads][n_ctx][head_dim] (a prompt chunk) */
    void *gth;     /* (n_threads, 2, n_ctx, head_dim): a thread's gathered head, K then V */
    float *dec_logits; /* (DEC_LOGIT_ROWS, n_vocab): the batched decode step's output rows */
} cpu_backend;

static void cpu_destroy(cairn__backend *bb)
{
    cpu_backend *b = (cpu_backend *)bb;
    cairn__pool_free(b->pool);
    free(b->kcache);
    free(b->vcache);
    free(b->x);
    free(b->xb);
    free(b->q);
    free(b->k);
    free(b->v);
    free(b->att);
    free(b->hb);
    free(b->hb2);
    free(b->rope);
    free(b->rope_l);
    free(b->scores);
    free(b->chunk_s);
    free(b->mv_scratch);
    free(b->mm_scratch);
    free(b->inv_freq);
    free(b->inv_freq_l);
    free(b->kpool);
    free(b->vpool);
    free(b->gk);
    free(b->gv);
    free(b->gth);
    free(b->dec_logits);
    free(b);
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

static int cpu_create(const cairn__model *m, const cairn__backend_opts *o, cairn__backend **out,
                      char *err, size_t errlen)
{
    cpu_backend *b = calloc(1, sizeof *b);
    if (!b)
        return cairn__errf(err, errlen, CAIRN_ENOMEM, "out of memory");
    b->base.ops = &cairn__backend_cpu_ops;
    b->base.model = m;
    int n_ctx = o->n_ctx > 0 ? o->n_ctx : (m->n_ctx_train < 4096 ? m->n_ctx_train : 4096);
    b->base.n_ctx = n_ctx;
    b->n_batch = o->n_batch > 0 ? o->n_batch : 256;
    if (b->n_batch > n_ctx)
        b->n_batch = n_ctx;
    b->base.n_batch = b->n_batch;
    b->q_dim = (int64_t)m->n_heads * m->head_dim;
    b->kv_dim = (int64_t)m->n_kv_heads * m->head_dim;
    int rc = cairn__pool_new(o->n_threads, &b->pool);
    if (rc != 0) {
        free(b);
        return cairn__errf(err, errlen, rc, "cannot start %d threads", o->n_threads);
    }
    const size_t nb = (size_t)b->n_batch, nth = (size_t)cairn__pool_size(b->pool);
    /* The prompt's sgemm runs on OpenBLAS's threads (loaded here, the first time, with the core
     * chosen for this CPU: gpu/cpu/blas.c), by default one per core whatever the pool has;
     * bound them by the pool's count. sgemm and the pool never run at once, so the process then
     * computes on nth threads at any moment. (OpenBLAS's count is process-wide: the backend
     * created last sets it.) */
    const int blas = cairn__blas_on();
    cairn__blas_set_threads((int)nth);
    const size_t kv = (size_t)m->n_layers * (size_t)n_ctx * (size_t)b->kv_dim;
    b->f16 = o->cache_type == CAIRN__CACHE_F16;
    b->kcache = calloc(kv, b->f16 ? sizeof(uint16_t) : sizeof(float));
    b->vcache = calloc(kv, b->f16 ? sizeof(uint16_t) : sizeof(float));
    b->x = malloc(nb * (size_t)m->dim * sizeof(float));
    b->xb = malloc(nb * (size_t)m->dim * sizeof(float));
    b->q = malloc(nb * (size_t)b->q_dim * sizeof(float));
    b->k = malloc(nb * (size_t)b->kv_dim * sizeof(float));
    b->v = malloc(nb * (size_t)b->kv_dim * sizeof(float));
    b->att = malloc(nb * (size_t)b->q_dim * sizeof(float));
    b->hb = malloc(nb * (size_t)m->ff_dim * sizeof(float));
    b->hb2 = malloc(nb * (size_t)m->ff_dim * sizeof(float));
    b->rope = malloc(nb * (size_t)m->rope_dim * sizeof(float));
    b->scores = malloc(nth * ((size_t)n_ctx + (size_t)m->head_dim) * sizeof(float));
    /* with OpenBLAS, a prompt chunk's attention over a float cache as matrix products
     * (attention_gemm), its query rows in blocks whose scores fit in cairn__cpu_att_bytes; a
     * context too long for a block of ATT_GEMM_MIN rows (over a million positions at 64 MiB), a
     * half cache (see ATT_GEMM_MAX_CTX), or a failed allocation take the per-token kernel */
    const size_t s_ctx = n_ctx < ATT_GEMM_MAX_CTX ? (size_t)n_ctx : (size_t)ATT_GEMM_MAX_CTX;
    const size_t fit = cairn__cpu_att_bytes / sizeof(float) / s_ctx;
    b->att_rows = (int)(fit < nb ? fit : nb);
    if (blas && !b->f16 && nb >= ATT_GEMM_MIN && b->att_rows >= ATT_GEMM_MIN)
        b->chunk_s = malloc((size_t)b->att_rows * s_ctx * sizeof(float));
    b->inv_freq = malloc((size_t)m->rope_dim / 2 * sizeof(float) + sizeof(float));
    const int local = m->rope_base_local > 0;
    if (local) {
        b->rope_l = malloc(nb * (size_t)m->rope_dim * sizeof(float));
        b->inv_freq_l = malloc((size_t)m->rope_dim / 2 * sizeof(float) + sizeof(float));
    }
    /* scratch sized for the widest input and the largest weight tile of any product */
    size_t mv = cairn__matvec_scratch_bytes(
        max_sz((size_t)m->dim, max_sz((size_t)b->q_dim, (size_t)m->ff_dim)));
    size_t mm = cairn__matmul_scratch_bytes(&m->output);
    for (int l = 0; l < m->n_layers; l++) {
        const cairn__layer *ly = &m->layers[l];
        const cairn__mat *ms[] = {&ly->wq,     &ly->wk,   &ly->wv,    &ly->wo,
                                  &ly->w_gate, &ly->w_up, &ly->w_down};
        for (size_t i = 0; i < sizeof ms / sizeof *ms; i++)
            mm = max_sz(mm, cairn__matmul_scratch_bytes(ms[i]));
    }
    b->mv_scratch = malloc(mv);
    b->mm_scratch = malloc(mm);
    if (!b->kcache || !b->vcache || !b->x || !b->xb || !b->q || !b->k || !b->v || !b->att ||
        !b->hb || !b->hb2 || !b->rope || !b->scores || !b->inv_freq || !b->mv_scratch ||
        !b->mm_scratch || (local && (!b->rope_l || !b->inv_freq_l))) {
        cpu_destroy(&b->base);
        return cairn__errf(err, errlen, CAIRN_ENOMEM, "out of memory for a context of %d tokens",
                           n_ctx);
    }
    /* theta_i = pos * base^(-2i/rope_dim) / rope_freqs[i], as ggml (Llama 3's factors divide
     * the frequency); computed in double then rounded, exactly as the CUDA backend does */
    for (int i = 0; i < m->rope_dim / 2; i++) {
        b->inv_freq[i] =
            (float)(pow((double)m->rope_base, -2.0 * i / (double)m->rope_dim) /
                    (m->rope_freqs ? (double)m->rope_freqs[i] : 1.0) * (double)m->rope_scale);
        if (local) /* unscaled: llama.cpp's rope_freq_scale_train_swa is 1 */
            b->inv_freq_l[i] =
                (float)pow((double)m->rope_base_local, -2.0 * i / (double)m->rope_dim);
    }
    *out = &b->base;
    return 0;
}

/* W (rows, cols) @ X^T: X (n, cols) -> OUT (n, rows) */
static void linear(cpu_backend *b, const cairn__mat *W, const float *X, int n, float *OUT)
{
    if (n == 1)
        cairn__matvec(b->pool, W, X, OUT, b->mv_scratch);
    else
        cairn__matmul(b->pool, W, X, n, OUT, b->mm_scratch);
}

/* x (n_heads, head_dim) rotated in place by the angles cs (rope_dim/2 of cos, sin) */
static void rope(const cairn__model *m, float *x, int n_heads, const float *cs)
{
    const int hd = m->head_dim, half = m->rope_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * hd;
        for (int i = 0; i < half; i++) {
            const float c = cs[2 * i], s = cs[2 * i + 1];
            /* NORMAL rotates adjacent pairs; NEOX pairs element i with i + rope_dim/2 */
            const int a = m->rope_mode == CAIRN__ROPE_NEOX ? i : 2 * i;
            const int z = m->rope_mode == CAIRN__ROPE_NEOX ? i + half : 2 * i + 1;
            const float x0 = v[a], x1 = v[z];
            v[a] = x0 * c - x1 * s;
            v[z] = x0 * s + x1 * c;
        }
    }
}

/* bytes of a cached key or value element */
static size_t elt(const cpu_backend *b) { return b->f16 ? sizeof(uint16_t) : sizeof(float); }

/* one head's query q against the keys and values of softcapped attention (gemma2): the kernel's
 * steps (scores, softmax, weighted sum of values) with c * tanh(s / c) on each score between
 * the first and the second; halves widened a row at a time into w (head_dim floats) */
static void attn_softcap(const cpu_backend *b, const float *q, const void *K, const void *V, int L,
                         float *sc, float *w, float *out)
{
    const cairn__model *m = b->base.model;
    const int hd = m->head_dim;
    const float c = m->attn_softcap;
    for (int t = 0; t < L; t++) {
        const float *k = (const float *)K + (size_t)t * (size_t)hd;
        if (b->f16) {
            for (int e = 0; e < hd; e++)
                w[e] = cairn__f16_to_f32(((const uint16_t *)K)[(size_t)t * (size_t)hd + (size_t)e]);
            k = w;
        }
        sc[t] = c * tanhf(cairn__dot_f32(q, k, hd) * m->attn_scale / c);
    }
    cairn__softmax(sc, L);
    memset(out, 0, (size_t)hd * sizeof *out);
    for (int t = 0; t < L; t++) {
        const float *v = (const float *)V + (size_t)t * (size_t)hd;
        if (b->f16) {
            for (int e = 0; e < hd; e++)
                w[e] = cairn__f16_to_f32(((const uint16_t *)V)[(size_t)t * (size_t)hd + (size_t)e]);
            v = w;
        }
        cairn__axpy(out, sc[t], v, hd);
    }
}

/* one head's query q, at position last, of layer ly against its keys and values K, V (rows
 * 0..last, head_dim apart, floats or halves as the cache) -> out (head_dim); sc: the thread's
 * scores (n_ctx + head_dim floats). A sliding window (ly->swa) starts the rows at last - swa + 1:
 * the solo and the batched paths both come here, so they cut the same rows. */
static void attn_one(const cpu_backend *b, const cairn__layer *ly, const float *q, const void *K,
                     const void *V, int last, float *sc, float *out)
{
    const cairn__model *m = b->base.model;
    const int hd = m->head_dim;
    const int lo = ly->swa && last >= ly->swa ? last - ly->swa + 1 : 0, L = last + 1 - lo;
    const size_t skip = (size_t)lo * (size_t)hd * elt(b);
    K = (const char *)K + skip;
    V = (const char *)V + skip;
    if (m->attn_softcap > 0)
        attn_softcap(b, q, K, V, L, sc, sc + b->base.n_ctx, out);
    else if (b->f16)
        cairn__attn_head_f16(q, K, V, (size_t)hd, L, hd, m->attn_scale, sc, sc + b->base.n_ctx,
                             out);
    else
        cairn__attn_head(q, K, V, (size_t)hd, L, hd, m->attn_scale, sc, out);
}

typedef struct {
    cpu_backend *b;
    const cairn__layer *ly;
    const void *K, *V; /* the layer's keys and values, [n_kv_heads][n_ctx][head_dim] */
    int n, pos;
} att_job;

/* for each (token i, head h): softmax(q_ih . K[lo..pos+i] * attn_scale) @ V -> att (i, h*hd),
 * lo the window's first position (0 without one) */
static void attention_range(void *arg, int64_t i0, int64_t i1, int ith)
{
    const att_job *j = arg;
    cpu_backend *b = j->b;
    const cairn__model *m = b->base.model;
    const int hd = m->head_dim, group = m->n_heads / m->n_kv_heads;
    float *sc = b->scores + (size_t)ith * ((size_t)b->base.n_ctx + (size_t)hd);
    for (int64_t it = i0; it < i1; it++) {
        const int i = (int)(it / m->n_heads), h = (int)(it % m->n_heads);
        const int kvh = h / group, last = j->pos + i;
        const float *q = b->q + (size_t)i * (size_t)b->q_dim + (size_t)h * hd;
        float *o = b->att + (size_t)i * (size_t)b->q_dim + (size_t)h * hd;
        const size_t at = (size_t)kvh * (size_t)b->base.n_ctx * (size_t)hd * elt(b);
        attn_one(b, j->ly, q, (const char *)j->K + at, (const char *)j->V + at, last, sc, o);
    }
}

typedef struct {
    float *S;
    int L, pos; /* row i of S is the query at position pos + i, against keys 0..L-1 */
} softmax_job;

/* rows [i0, i1) of a block of scores: row i softmaxed over its keys 0..pos+i, the later ones
 * (the chunk's future tokens) zeroed so that the product with V skips them */
static void chunk_softmax_range(void *arg, int64_t i0, int64_t i1, int ith)
{
    const softmax_job *j = arg;
    (void)ith;
    for (int64_t i = i0; i < i1; i++) {
        float *row = j->S + i * (int64_t)j->L;
        const int len = j->pos + (int)i + 1;
        cairn__softmax(row, len);
        memset(row + len, 0, (size_t)(j->L - len) * sizeof(float));
    }
}

/* A prompt chunk's attention (n tokens at positions pos..) over a float cache, as two products
 * per query head and block of up to att_rows query rows r0..r0+m-1 over the L = pos + r0 + m
 * keys they see: S (m, L) = Q_h K^T * scale, each row softmaxed over its own causal length,
 * att_h (m, hd) = S V. Per token, the kernel of attention_range re-reads
 * every earlier key and value from memory (a 4096-token prompt of the 110M model moved ~300 GB
 * that way); here each is read once per chunk, and sgemm does the arithmetic. The same function
 * of the cache as attention_range to float rounding (tests/model checks both against
 * float64). */
static void attention_gemm(cpu_backend *b, const float *Kl, const float *Vl, int n, int pos)
{
    const cairn__model *m = b->base.model;
    const int hd = m->head_dim, group = m->n_heads / m->n_kv_heads;
    const size_t n_ctx = (size_t)b->base.n_ctx, qd = (size_t)b->q_dim;
    const float scale = m->attn_scale;
    for (int g = 0; g < m->n_kv_heads; g++) {
        const size_t at = (size_t)g * n_ctx * (size_t)hd;
        const float *K = Kl + at, *V = Vl + at;
        for (int h = g * group; h < (g + 1) * group; h++)
            for (int r0 = 0; r0 < n; r0 += b->att_rows) {
                const int rows = n - r0 < b->att_rows ? n - r0 : b->att_rows, L = pos + r0 + rows;
                const float *Q = b->q + (size_t)r0 * qd + (size_t)h * hd;
                float *O = b->att + (size_t)r0 * qd + (size_t)h * hd;
                softmax_job sj = {b->chunk_s, L, pos + r0};
                /* S (rows, L) = Q_h (rows, hd; q_dim apart) @ K (L, hd)^T * scale */
                cairn__sgemm(1, rows, L, hd, scale, Q, (int)qd, K, hd, 0.0f, b->chunk_s, L);
                if ((int64_t)rows * L < 65536)
                    chunk_softmax_range(&sj, 0, rows, 0);
                else
                    cairn__pool_for(b->pool, rows, 0, chunk_softmax_range, &sj);
                /* att_h (rows, hd; q_dim apart) = S (rows, L) @ V (L, hd) */
                cairn__sgemm(0, rows, hd, L, 1.0f, b->chunk_s, L, V, hd, 0.0f, O, (int)qd);
            }
    }
}

/* layer ly's attention for the chunk into att, over its keys and values K, V
 * ([n_kv_heads][n_ctx][head_dim]): a prompt chunk as matrix products where OpenBLAS is there
 * (chunk_s), else per (token, head). Soft-capped scores, and a window that cuts keys off the
 * chunk's first query already, take the per-token kernel. */
static void attend(cpu_backend *b, const cairn__layer *ly, const void *K, const void *V, int n,
                   int pos)
{
    if (b->chunk_s && n >= ATT_GEMM_MIN && pos + n <= ATT_GEMM_MAX_CTX &&
        !(b->base.model->attn_softcap > 0) && !(ly->swa && pos + n > ly->swa)) {
        attention_gemm(b, K, V, n, pos);
        return;
    }
    const cairn__model *m = b->base.model;
    att_job aj = {b, ly, K, V, n, pos};
    /* a few thousand multiply-adds are cheaper than waking the workers (~0.5 us); beyond that
     * the heads go to the pool (15M shape, 6 heads of 48 at 160 positions: 5.8 us a layer on
     * the caller alone while the workers spin, ~3.5 us on 2 threads) */
    if ((int64_t)n * m->n_heads * (pos + n) * m->head_dim < 8192)
        attention_range(&aj, 0, (int64_t)n * m->n_heads, 0);
    else
        cairn__pool_for(b->pool, (int64_t)n * m->n_heads, 1, attention_range, &aj);
}

/* ---- the paged pool -------------------------------------------------------------------------- */

/* elements from one block's start to the next */
static size_t block_elts(const cpu_backend *b)
{
    return (size_t)b->base.model->n_layers * (size_t)b->kv_dim * CAIRN__KV_BLOCK;
}

/* the element offset in the pool of layer l, kv head g, position p of the table's sequence */
static size_t pool_at(const cpu_backend *b, const int32_t *blocks, int l, int g, int p)
{
    const cairn__model *m = b->base.model;
    return (size_t)blocks[p / CAIRN__KV_BLOCK] * block_elts(b) +
           (((size_t)l * (size_t)m->n_kv_heads + (size_t)g) * CAIRN__KV_BLOCK +
            (size_t)(p % CAIRN__KV_BLOCK)) *
               (size_t)m->head_dim;
}

/* positions [0, L) of layer l, kv head g of the table's sequence -> K, V (L rows of head_dim,
 * contiguous): a block's run of a head is one copy */
static void gather_head(const cpu_backend *b, const int32_t *blocks, int l, int g, int L, void *K,
                        void *V)
{
    const size_t hd = (size_t)b->base.model->head_dim, e = elt(b);
    for (int p = 0; p < L; p += CAIRN__KV_BLOCK) {
        const size_t rows = (size_t)(L - p < CAIRN__KV_BLOCK ? L - p : CAIRN__KV_BLOCK);
        const size_t at = pool_at(b, blocks, l, g, p);
        memcpy((char *)K + (size_t)p * hd * e, (const char *)b->kpool + at * e, rows * hd * e);
        memcpy((char *)V + (size_t)p * hd * e, (const char *)b->vpool + at * e, rows * hd * e);
    }
}

static int cpu_kv_pool(cairn__backend *bb, int n_blocks)
{
    cpu_backend *b = (cpu_backend *)bb;
    const cairn__model *m = b->base.model;
    free(b->kpool);
    free(b->vpool);
    free(b->gk);
    free(b->gv);
    free(b->gth);
    free(b->dec_logits);
    b->kpool = b->vpool = b->gk = b->gv = b->gth = NULL;
    b->dec_logits = NULL;
    b->n_blocks = 0;
    if (n_blocks == 0)
        return 0;
    const size_t e = elt(b), n_ctx = (size_t)b->base.n_ctx, hd = (size_t)m->head_dim;
    const size_t nth = (size_t)cairn__pool_size(b->pool);
    b->kpool = malloc((size_t)n_blocks * block_elts(b) * e);
    b->vpool = malloc((size_t)n_blocks * block_elts(b) * e);
    b->gk = malloc(n_ctx * (size_t)b->kv_dim * e);
    b->gv = malloc(n_ctx * (size_t)b->kv_dim * e);
    b->gth = malloc(nth * 2 * n_ctx * hd * e);
    b->dec_logits = malloc((size_t)DEC_LOGIT_ROWS * (size_t)m->n_vocab * sizeof(float));
    if (!b->kpool || !b->vpool || !b->gk || !b->gv || !b->gth || !b->dec_logits) {
        cpu_kv_pool(bb, 0);
        return cairn__errf(b->base.err, sizeof b->base.err, CAIRN_ENOMEM,
                           "out of memory for a KV pool of %d blocks", n_blocks);
    }
    b->n_blocks = n_blocks;
    return 0;
}

/* kv head g's key and value rows of position p (in k, v: a token's kv_dim projections) into
 * layer l of the positional cache, or of pg's blocks */
static void store_kv(cpu_backend *b, const cairn__kv_seq *pg, int l, int g, int p, const float *k,
                     const float *v)
{
    const size_t hd = (size_t)b->base.model->head_dim;
    const size_t at =
        pg ? pool_at(b, pg->blocks, l, g, p)
           : (((size_t)l * (size_t)b->base.model->n_kv_heads + (size_t)g) * (size_t)b->base.n_ctx +
              (size_t)p) *
                 hd;
    void *kd = pg ? b->kpool : b->kcache, *vd = pg ? b->vpool : b->vcache;
    if (b->f16) {
        cairn__f32_to_f16_row((uint16_t *)kd + at, k + (size_t)g * hd, (int64_t)hd);
        cairn__f32_to_f16_row((uint16_t *)vd + at, v + (size_t)g * hd, (int64_t)hd);
    } else {
        memcpy((float *)kd + at, k + (size_t)g * hd, hd * sizeof(float));
        memcpy((float *)vd + at, v + (size_t)g * hd, hd * sizeof(float));
    }
}

static void add_bias(float *x, const float *bias, int n, int64_t d)
{
    if (!bias)
        return;
    for (int i = 0; i < n; i++)
        for (int64_t k = 0; k < d; k++)
            x[(size_t)i * (size_t)d + (size_t)k] += bias[k];
}

/* qwen3: each head of q (n, q_dim) and of k (n, kv_dim) RMS-normalized with the layer's
 * weights, in place, after the projections and before rope (as llama.cpp's qwen3 graph) */
static void qk_norm(const cairn__model *m, const cairn__layer *ly, float *q, float *k, int n,
                    int64_t q_dim, int64_t kv_dim)
{
    if (!ly->q_norm)
        return;
    const int64_t hd = m->head_dim;
    for (int i = 0; i < n; i++) {
        for (int h = 0; h < m->n_heads; h++) {
            float *x = q + (size_t)i * (size_t)q_dim + (size_t)h * (size_t)hd;
            cairn__rmsnorm(x, x, ly->q_norm, hd, m->rms_eps);
        }
        for (int h = 0; h < m->n_kv_heads; h++) {
            float *x = k + (size_t)i * (size_t)kv_dim + (size_t)h * (size_t)hd;
            cairn__rmsnorm(x, x, ly->k_norm, hd, m->rms_eps);
        }
    }
}

/* token t's embedding -> x (dim), times embd_scale (gemma's sqrt(dim)) */
static void embed(const cairn__model *m, int32_t t, float *x)
{
    cairn__mat_row(&m->tok_embd, t, x);
    if (m->embd_scale != 1.0f)
        for (int64_t k = 0; k < m->dim; k++)
            x[k] *= m->embd_scale;
}

/* row i of the rotary tables: the angles of position p (and those of the local base) */
static void rope_row(cpu_backend *b, int i, int p)
{
    const cairn__model *m = b->base.model;
    for (int64_t k = 0; k < m->rope_dim / 2; k++) {
        const size_t at = (size_t)i * (size_t)m->rope_dim + 2 * (size_t)k;
        const double th = (double)p * (double)b->inv_freq[k];
        b->rope[at] = (float)cos(th);
        b->rope[at + 1] = (float)sin(th);
        if (b->rope_l) {
            const double tl = (double)p * (double)b->inv_freq_l[k];
            b->rope_l[at] = (float)cos(tl);
            b->rope_l[at + 1] = (float)sin(tl);
        }
    }
}

/* x (n, dim) RMS-normalized in place with w (gemma's post-norms), if the layer has it */
static void post_norm(const cairn__model *m, const float *w, float *x, int n)
{
    for (int i = 0; w && i < n; i++)
        cairn__rmsnorm(x + (size_t)i * (size_t)m->dim, x + (size_t)i * (size_t)m->dim, w, m->dim,
                       m->rms_eps);
}

/* g (n) = act(g) * u: SiLU, or gemma's GELU in its tanh form (what ggml_gelu computes) */
static void gated(const cairn__model *m, float *g, const float *u, int64_t n)
{
    if (m->ffn_act != CAIRN__FFN_GELU) {
        cairn__swiglu(g, u, n);
        return;
    }
    for (int64_t k = 0; k < n; k++) {
        const float x = g[k];
        g[k] = 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x))) * u[k];
    }
}

/* logits (n) capped in place to c * tanh(l / c) (gemma2's final soft-capping), if set */
static void cap_logits(const cairn__model *m, float *lg, size_t n)
{
    const float c = m->final_softcap;
    for (size_t k = 0; c > 0 && k < n; k++)
        lg[k] = c * tanhf(lg[k] / c);
}

/* A prompt chunk's per-token steps between the products, over the pool: each token's rows are
 * its own (and each its own cache positions), so which thread runs a token changes nothing. Run
 * on the caller alone, these left the other threads waiting (rope and SwiGLU were ~3 % of a 110M
 * prompt's samples on the caller, as much again in the workers' waits). */
typedef struct {
    cpu_backend *b;
    const cairn__kv_seq *pg;
    const cairn__layer *ly;
    int l, pos;
} tok_job;

/* tokens [i0, i1): q and k rotated, then k and v stored at positions pos + i */
static void rope_store_range(void *arg, int64_t i0, int64_t i1, int ith)
{
    const tok_job *j = arg;
    cpu_backend *b = j->b;
    const cairn__model *m = b->base.model;
    (void)ith;
    for (int64_t i = i0; i < i1; i++) {
        const float *cs =
            (j->ly->rope_local ? b->rope_l : b->rope) + (size_t)i * (size_t)m->rope_dim;
        rope(m, b->q + (size_t)i * b->q_dim, m->n_heads, cs);
        rope(m, b->k + (size_t)i * b->kv_dim, m->n_kv_heads, cs);
        for (int g = 0; g < m->n_kv_heads; g++) /* head g's row of position pos + i */
            store_kv(b, j->pg, j->l, g, j->pos + (int)i, b->k + (size_t)i * b->kv_dim,
                     b->v + (size_t)i * b->kv_dim);
    }
}

/* tokens [i0, i1): hb = act(hb) * hb2 */
static void gated_range(void *arg, int64_t i0, int64_t i1, int ith)
{
    const tok_job *j = arg;
    const cairn__model *m = j->b->base.model;
    (void)ith;
    for (int64_t i = i0; i < i1; i++)
        gated(m, j->b->hb + (size_t)i * (size_t)m->ff_dim,
              j->b->hb2 + (size_t)i * (size_t)m->ff_dim, m->ff_dim);
}

/* fn over tokens [0, n): on the pool for a chunk of several tokens, else on the caller */
static void per_token(cpu_backend *b, int n, cairn__range_fn fn, tok_job *j)
{
    if (n >= 4)
        cairn__pool_for(b->pool, n, 1, fn, j);
    else
        fn(j, 0, n, 0);
}

/* tokens[0..n) (n <= n_batch) at positions pos.. through the whole model; keys and values in
 * the positional cache, or, with pg, in pg's blocks of the pool */
static void forward_chunk(cpu_backend *b, const cairn__kv_seq *pg, const int32_t *tokens, int n,
                          int pos, float *logits, int all_logits)
{
    const cairn__model *m = b->base.model;
    const int64_t dim = m->dim;
    for (int i = 0; i < n; i++) {
        embed(m, tokens[i], b->x + (size_t)i * (size_t)dim);
        rope_row(b, i, pos + i);
    }
    for (int l = 0; l < m->n_layers; l++) {
        const cairn__layer *ly = &m->layers[l];
        for (int i = 0; i < n; i++)
            cairn__rmsnorm(b->xb + (size_t)i * dim, b->x + (size_t)i * dim, ly->attn_norm, dim,
                           m->rms_eps);
        if (n == 1) { /* decode: the three projections in one pass of the pool */
            const cairn__mat *W[3] = {&ly->wq, &ly->wk, &ly->wv};
            float *const O[3] = {b->q, b->k, b->v};
            cairn__matvec_n(b->pool, W, 3, b->xb, O, b->mv_scratch);
        } else {
            linear(b, &ly->wq, b->xb, n, b->q);
            linear(b, &ly->wk, b->xb, n, b->k);
            linear(b, &ly->wv, b->xb, n, b->v);
        }
        add_bias(b->q, ly->bq, n, b->q_dim);
        add_bias(b->k, ly->bk, n, b->kv_dim);
        add_bias(b->v, ly->bv, n, b->kv_dim);
        qk_norm(m, ly, b->q, b->k, n, b->q_dim, b->kv_dim);
        const size_t layer_off = (size_t)l * (size_t)b->base.n_ctx * (size_t)b->kv_dim;
        tok_job tj = {b, pg, ly, l, pos};
        per_token(b, n, rope_store_range, &tj);
        if (pg) { /* the sequence's keys and values of this layer, laid out as the cache's */
            for (int g = 0; g < m->n_kv_heads; g++) {
                const size_t at = (size_t)g * (size_t)b->base.n_ctx * (size_t)m->head_dim * elt(b);
                gather_head(b, pg->blocks, l, g, pos + n, (char *)b->gk + at, (char *)b->gv + at);
            }
            attend(b, ly, b->gk, b->gv, n, pos);
        } else
            attend(b, ly, (const char *)b->kcache + layer_off * elt(b),
                   (const char *)b->vcache + layer_off * elt(b), n, pos);
        linear(b, &ly->wo, b->att, n, b->xb);
        post_norm(m, ly->attn_post_norm, b->xb, n);
        for (size_t k = 0; k < (size_t)n * (size_t)dim; k++)
            b->x[k] += b->xb[k];
        for (int i = 0; i < n; i++)
            cairn__rmsnorm(b->xb + (size_t)i * dim, b->x + (size_t)i * dim, ly->ffn_norm, dim,
                           m->rms_eps);
        if (n == 1) {
            const cairn__mat *W[2] = {&ly->w_gate, &ly->w_up};
            float *const O[2] = {b->hb, b->hb2};
            cairn__matvec_n(b->pool, W, 2, b->xb, O, b->mv_scratch);
        } else {
            linear(b, &ly->w_gate, b->xb, n, b->hb);
            linear(b, &ly->w_up, b->xb, n, b->hb2);
        }
        per_token(b, n, gated_range, &tj);
        linear(b, &ly->w_down, b->hb, n, b->xb);
        post_norm(m, ly->ffn_post_norm, b->xb, n);
        for (size_t k = 0; k < (size_t)n * (size_t)dim; k++)
            b->x[k] += b->xb[k];
    }
    if (!logits)
        return;
    const int first = all_logits ? 0 : n - 1, cnt = n - first;
    for (int i = first; i < n; i++)
        cairn__rmsnorm(b->xb + (size_t)(i - first) * dim, b->x + (size_t)i * dim, m->output_norm,
                       dim, m->rms_eps);
    linear(b, &m->output, b->xb, cnt, logits);
    cap_logits(m, logits, (size_t)cnt * (size_t)m->n_vocab);
}

typedef struct {
    cpu_backend *b;
    const cairn__kv_seq *const *d;
    int layer;
    const cairn__layer *ly;
} dec_att_job;

/* for each (entry i, kv head g): the entry's keys and values of head g gathered into the
 * thread's run, then each query head of the group against them with the solo path's kernel and
 * arguments (attention_range with n 1) */
static void dec_attention_range(void *arg, int64_t i0, int64_t i1, int ith)
{
    const dec_att_job *j = arg;
    cpu_backend *b = j->b;
    const cairn__model *m = b->base.model;
    const int hd = m->head_dim, group = m->n_heads / m->n_kv_heads;
    const size_t n_ctx = (size_t)b->base.n_ctx, run = n_ctx * (size_t)hd * elt(b);
    float *sc = b->scores + (size_t)ith * (n_ctx + (size_t)hd);
    char *K = (char *)b->gth + (size_t)ith * 2 * run, *V = K + run;
    for (int64_t it = i0; it < i1; it++) {
        const int i = (int)(it / m->n_kv_heads), g = (int)(it % m->n_kv_heads);
        const int L = j->d[i]->pos + 1;
        gather_head(b, j->d[i]->blocks, j->layer, g, L, K, V);
        for (int h = g * group; h < (g + 1) * group; h++) {
            const float *q = b->q + (size_t)i * (size_t)b->q_dim + (size_t)h * hd;
            float *o = b->att + (size_t)i * (size_t)b->q_dim + (size_t)h * hd;
            attn_one(b, j->ly, q, K, V, L - 1, sc, o);
        }
    }
}

/* d[0..nd) (nd <= n_batch) one decode step each, over their blocks: forward_chunk's n == 1 path
 * on nd rows at once, every product cairn__matmul_rows (each row cairn__matvec's), every
 * element-wise operation the same call on each row, each row's attention over its own blocks */
static void forward_decode(cpu_backend *b, const cairn__kv_seq *const *d, int nd)
{
    const cairn__model *m = b->base.model;
    const int64_t dim = m->dim, ff = m->ff_dim;
    float *sc = b->mm_scratch;
    for (int i = 0; i < nd; i++) {
        embed(m, d[i]->tokens[0], b->x + (size_t)i * (size_t)dim);
        rope_row(b, i, d[i]->pos);
    }
    for (int l = 0; l < m->n_layers; l++) {
        const cairn__layer *ly = &m->layers[l];
        for (int i = 0; i < nd; i++)
            cairn__rmsnorm(b->xb + (size_t)i * dim, b->x + (size_t)i * dim, ly->attn_norm, dim,
                           m->rms_eps);
        if (nd == 1) { /* one row: the solo step's fused pass (the same dot products) */
            const cairn__mat *W[3] = {&ly->wq, &ly->wk, &ly->wv};
            float *const O[3] = {b->q, b->k, b->v};
            cairn__matvec_n(b->pool, W, 3, b->xb, O, sc);
        } else {
            cairn__matmul_rows(b->pool, &ly->wq, b->xb, nd, b->q, sc);
            cairn__matmul_rows(b->pool, &ly->wk, b->xb, nd, b->k, sc);
            cairn__matmul_rows(b->pool, &ly->wv, b->xb, nd, b->v, sc);
        }
        add_bias(b->q, ly->bq, nd, b->q_dim);
        add_bias(b->k, ly->bk, nd, b->kv_dim);
        add_bias(b->v, ly->bv, nd, b->kv_dim);
        qk_norm(m, ly, b->q, b->k, nd, b->q_dim, b->kv_dim);
        for (int i = 0; i < nd; i++) {
            const float *cs =
                (ly->rope_local ? b->rope_l : b->rope) + (size_t)i * (size_t)m->rope_dim;
            rope(m, b->q + (size_t)i * b->q_dim, m->n_heads, cs);
            rope(m, b->k + (size_t)i * b->kv_dim, m->n_kv_heads, cs);
            for (int g = 0; g < m->n_kv_heads; g++)
                store_kv(b, d[i], l, g, d[i]->pos, b->k + (size_t)i * b->kv_dim,
                         b->v + (size_t)i * b->kv_dim);
        }
        dec_att_job aj = {b, d, l, ly};
        cairn__pool_for(b->pool, (int64_t)nd * m->n_kv_heads, 1, dec_attention_range, &aj);
        cairn__matmul_rows(b->pool, &ly->wo, b->att, nd, b->xb, sc);
        post_norm(m, ly->attn_post_norm, b->xb, nd);
        for (size_t k = 0; k < (size_t)nd * (size_t)dim; k++)
            b->x[k] += b->xb[k];
        for (int i = 0; i < nd; i++)
            cairn__rmsnorm(b->xb + (size_t)i * dim, b->x + (size_t)i * dim, ly->ffn_norm, dim,
                           m->rms_eps);
        if (nd == 1) {
            const cairn__mat *W[2] = {&ly->w_gate, &ly->w_up};
            float *const O[2] = {b->hb, b->hb2};
            cairn__matvec_n(b->pool, W, 2, b->xb, O, sc);
        } else {
            cairn__matmul_rows(b->pool, &ly->w_gate, b->xb, nd, b->hb, sc);
            cairn__matmul_rows(b->pool, &ly->w_up, b->xb, nd, b->hb2, sc);
        }
        for (int i = 0; i < nd; i++)
            gated(m, b->hb + (size_t)i * ff, b->hb2 + (size_t)i * ff, ff);
        cairn__matmul_rows(b->pool, &ly->w_down, b->hb, nd, b->xb, sc);
        post_norm(m, ly->ffn_post_norm, b->xb, nd);
        for (size_t k = 0; k < (size_t)nd * (size_t)dim; k++)
            b->x[k] += b->xb[k];
    }
    /* the output head for the rows that want logits, DEC_LOGIT_ROWS at a time */
    const size_t nv = (size_t)m->n_vocab;
    int i = 0;
    while (i < nd) {
        int rows = 0, idx[DEC_LOGIT_ROWS];
        for (; i < nd && rows < DEC_LOGIT_ROWS; i++)
            if (d[i]->logits) {
                cairn__rmsnorm(b->xb + (size_t)rows * dim, b->x + (size_t)i * dim, m->output_norm,
                               dim, m->rms_eps);
                idx[rows++] = i;
            }
        if (rows == 0)
            break;
        cairn__matmul_rows(b->pool, &m->output, b->xb, rows, b->dec_logits, sc);
        cap_logits(m, b->dec_logits, (size_t)rows * nv);
        for (int r = 0; r < rows; r++)
            memcpy(d[idx[r]]->logits, b->dec_logits + (size_t)r * nv, nv * sizeof(float));
    }
}

static int cpu_forward_paged(cairn__backend *bb, const cairn__kv_seq *s, int n_seqs)
{
    cpu_backend *b = (cpu_backend *)bb;
    if (!b->kpool)
        return cairn__errf(b->base.err, sizeof b->base.err, CAIRN_EUNSUPPORTED,
                           "no KV pool (cairn__backend_kv_pool)");
    for (int k = 0; k < n_seqs; k++)
        for (int p = s[k].pos; p < s[k].pos + s[k].n; p += CAIRN__KV_BLOCK - p % CAIRN__KV_BLOCK)
            if (s[k].blocks[p / CAIRN__KV_BLOCK] < 0 ||
                s[k].blocks[p / CAIRN__KV_BLOCK] >= b->n_blocks)
                return cairn__errf(b->base.err, sizeof b->base.err, CAIRN_EINVAL,
                                   "entry %d: block %d of position %d outside the pool (%d)", k,
                                   s[k].blocks[p / CAIRN__KV_BLOCK], p, b->n_blocks);
    const cairn__kv_seq *dec[256];
    int nd = 0;
    for (int k = 0; k < n_seqs; k++)
        if (s[k].n == 1) {
            dec[nd++] = &s[k];
            if (nd == (int)(sizeof dec / sizeof *dec)) {
                forward_decode(b, dec, nd);
                nd = 0;
            }
        } else
            forward_chunk(b, &s[k], s[k].tokens, s[k].n, s[k].pos, s[k].logits, 0);
    if (nd)
        forward_decode(b, dec, nd);
    return 0;
}

static int cpu_forward(cairn__backend *bb, const int32_t *tokens, int n, int pos, float *logits,
                       int all_logits)
{
    cpu_backend *b = (cpu_backend *)bb;
    const int64_t nv = b->base.model->n_vocab;
    for (int c0 = 0; c0 < n; c0 += b->n_batch) {
        const int nc = n - c0 < b->n_batch ? n - c0 : b->n_batch;
        const int last = c0 + nc == n;
        float *lg = NULL;
        if (logits && all_logits)
            lg = logits + (size_t)c0 * (size_t)nv;
        else if (logits && last)
            lg = logits;
        forward_chunk(b, NULL, tokens + c0, nc, pos + c0, lg, all_logits);
    }
    return 0;
}

const cairn__backend_ops cairn__backend_cpu_ops = {.name = "cpu",
                                                   .create = cpu_create,
                                                   .forward = cpu_forward,
                                                   .destroy = cpu_destroy,
                                                   .kv_pool = cpu_kv_pool,
                                                   .forward_paged = cpu_forward_paged};
