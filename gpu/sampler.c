/* gpu/sampler.c - token sampling.
 *
 * Order of operations (as llama.cpp's common sampler chain): repetition penalty on the raw
 * logits, then greedy if temperature <= 0; otherwise keep the top-k logits (a bounded min-heap,
 * O(V log k), since vocabularies run to 150k and this runs per token), sort them, softmax at the
 * temperature in double, cut to the top-p nucleus, and draw one uniform number in [0, 1) scaled
 * to the kept mass. Candidates are ordered by (logit desc, id asc), a total order, so the same
 * logits always give the same token on every platform and thread count. Without top-k, only
 * the top of that order is sorted (pick_prefix).
 */
#include "gpu/sampler.h"

#include "gpu/sample_core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cairn_errors.h"
typedef struct {
    float logit;
    int32_t id;
} cand;

struct cairn__sampler {
    cairn__sampler_params p;
    int n_vocab;
    uint64_t rng[4];
    uint64_t draws;
    uint8_t *seen; /* n_vocab bits: tokens already penalized in this call */
    cand *cands;   /* n_vocab */
    double *probs; /* n_vocab */
    int32_t *pen;  /* n_vocab: the distinct tokens a call penalizes */
};

void cairn__sampler_params_default(cairn__sampler_params *p)
{
    p->temperature = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->seed = 0;
}

/* ---- xoshiro256** seeded by splitmix64 ------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4])
{
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* ---- lifecycle --------------------------------------------------------------------------------
 */

int cairn__sampler_new(const cairn__sampler_params *p, int n_vocab, cairn__sampler **out)
{
    if (!out)
        return CAIRN_EINVAL;
    *out = NULL;
    if (!p || n_vocab < 1 || isnan(p->temperature) || !(p->top_p > 0.0f) ||
        !(p->repeat_penalty > 0.0f) || p->repeat_last_n < -1)
        return CAIRN_EINVAL;
    cairn__sampler *s = calloc(1, sizeof *s);
    if (!s)
        return CAIRN_ENOMEM;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->seen = calloc(((size_t)n_vocab + 7) / 8, 1);
    s->cands = malloc((size_t)n_vocab * sizeof *s->cands);
    s->probs = malloc((size_t)n_vocab * sizeof *s->probs);
    s->pen = malloc((size_t)n_vocab * sizeof *s->pen);
    if (!s->seen || !s->cands || !s->probs || !s->pen) {
        cairn__sampler_free(s);
        return CAIRN_ENOMEM;
    }
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
    *out = s;
    return 0;
}

void cairn__sampler_free(cairn__sampler *s)
{
    if (!s)
        return;
    free(s->seen);
    free(s->cands);
    free(s->probs);
    free(s->pen);
    free(s);
}

uint64_t cairn__sampler_draws(const cairn__sampler *s) { return s->draws; }

/* ---- sampling -----------------------------------------------------------------------------------
 */

/* a ranks before b: larger logit first, NaN last, then lower id */
static int before(const cand *a, const cand *b)
{
    const int an = isnan(a->logit), bn = isnan(b->logit);
    if (an != bn)
        return bn;
    if (!an && a->logit != b->logit)
        return a->logit > b->logit;
    return a->id < b->id;
}

static int cand_cmp(const void *x, const void *y)
{
    const cand *a = x, *b = y;
    return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

/* min-heap (by rank: the root is the worst kept candidate) */
static void heap_down(cand *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && before(&h[w], &h[l]))
            w = l;
        if (r < n && before(&h[w], &h[r]))
            w = r;
        if (w == i)
            return;
        cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

size_t cairn__sampler_penalty_ids(cairn__sampler *s, const int32_t *hist, size_t n_hist,
                                  int32_t *out, size_t cap)
{
    if (s->p.repeat_penalty == 1.0f || s->p.repeat_last_n == 0 || !hist || n_hist == 0)
        return 0;
    size_t from = 0, n = 0;
    if (s->p.repeat_last_n > 0 && n_hist > (size_t)s->p.repeat_last_n)
        from = n_hist - (size_t)s->p.repeat_last_n;
    for (size_t i = from; i < n_hist; i++) {
        const int32_t t = hist[i];
        if (t < 0 || t >= s->n_vocab || (s->seen[t >> 3] & (1u << (t & 7))))
            continue;
        s->seen[t >> 3] |= (uint8_t)(1u << (t & 7));
        if (n < cap)
            out[n] = t;
        n++;
    }
    for (size_t i = from; i < n_hist; i++) {
        const int32_t t = hist[i];
        if (t >= 0 && t < s->n_vocab)
            s->seen[t >> 3] = 0;
    }
    return n;
}

const cairn__sampler_params *cairn__sampler_get_params(const cairn__sampler *s) { return &s->p; }

int cairn__sampler_greedy(const cairn__sampler *s) { return s->p.temperature <= 0.0f; }

double cairn__sampler_draw(cairn__sampler *s)
{
    s->draws++;
    return (double)(xoshiro_next(s->rng) >> 11) * 0x1.0p-53;
}

/* Without top-k, sorting the whole vocabulary is what top-p and the draw would cost (18 ms a
 * token at 152k tokens on one core, more than a small model's forward pass), yet both only walk
 * the sorted order from the top until they reach a share of the total: top_p of it, or with
 * top-p off the draw's point r * total. So: every token's weight and their total (in index
 * order), then the tokens within d * temperature of the largest logit, which are a prefix of the
 * sorted order, sorted alone and walked; d doubles until the walk ends inside the prefix. Logits
 * that are not all finite, or a walk that needs nearly the whole vocabulary, go to the full sort
 * (returns -1). The token is the full sort's but where the draw or the top-p cut lands within
 * rounding of a boundary (the total is summed in another order). */
static int32_t pick_prefix(cairn__sampler *s, const float *logits, double r)
{
    const int nv = s->n_vocab;
    float mx = -INFINITY;
    for (int i = 0; i < nv; i++) {
        if (!isfinite(logits[i]))
            return -1;
        mx = logits[i] > mx ? logits[i] : mx;
    }
    const double max = (double)mx, t = (double)s->p.temperature;
    double *w = s->probs, total = 0.0;
    for (int i = 0; i < nv; i++)
        total += w[i] = cairn__sample_weight_of(logits[i], max, t);
    const int top_p = s->p.top_p < 1.0f;
    const double target = top_p ? (double)s->p.top_p * total : r * total;
    cand *c = s->cands;
    for (double d = 4.0; d <= 64.0; d *= 2.0) {
        const double cut = max - d * t;
        size_t k = 0;
        for (int i = 0; i < nv; i++)
            if ((double)logits[i] >= cut)
                c[k++] = (cand){logits[i], (int32_t)i};
        if (k > (size_t)nv / 2)
            return -1; /* most of it: the full sort costs little more */
        qsort(c, k, sizeof *c, cand_cmp);
        double cum = 0.0;
        size_t keep = 0;
        for (size_t i = 0; i < k && !keep; i++) {
            cum += w[c[i].id];
            if (top_p ? cum >= target : target < cum)
                keep = i + 1;
        }
        if (!keep)
            continue; /* the walk goes past this prefix */
        if (!top_p)
            return c[keep - 1].id;
        const double u = r * cum;
        double run = 0.0;
        for (size_t i = 0; i < keep; i++) {
            run += w[c[i].id];
            if (u < run)
                return c[i].id;
        }
        return c[keep - 1].id; /* u within rounding of the kept total */
    }
    return -1;
}

int32_t cairn__sampler_pick(cairn__sampler *s, const float *logits, double r)
{
    const int nv = s->n_vocab;
    if (s->p.temperature <= 0.0f) {
        cand best = {logits[0], 0};
        for (int i = 1; i < nv; i++) {
            cand c = {logits[i], i};
            if (before(&c, &best))
                best = c;
        }
        return best.id;
    }
    size_t k = s->p.top_k > 0 && s->p.top_k < nv ? (size_t)s->p.top_k : (size_t)nv;
    if (k == (size_t)nv) {
        const int32_t id = pick_prefix(s, logits, r);
        if (id >= 0)
            return id;
    }
    cand *c = s->cands;
    if (k < (size_t)nv) {
        for (size_t i = 0; i < k; i++)
            c[i] = (cand){logits[i], (int32_t)i};
        for (size_t i = k / 2; i-- > 0;)
            heap_down(c, k, i);
        for (int i = (int)k; i < nv; i++) {
            cand x = {logits[i], i};
            if (before(&x, &c[0])) {
                c[0] = x;
                heap_down(c, k, 0);
            }
        }
    } else {
        for (int i = 0; i < nv; i++)
            c[i] = (cand){logits[i], i};
    }
    qsort(c, k, sizeof *c, cand_cmp);
    /* drop NaNs (sorted last) unless nothing else is left */
    while (k > 1 && isnan(c[k - 1].logit))
        k--;
    double *pr = s->probs, total = 0.0;
    const double max = isnan(c[0].logit) ? 0.0 : (double)c[0].logit, t = (double)s->p.temperature;
    for (size_t i = 0; i < k; i++) {
        pr[i] = cairn__sample_weight_of(c[i].logit, max, t);
        total += pr[i];
    }
    size_t keep = k;
    if (s->p.top_p < 1.0f) {
        double cum = 0.0;
        for (size_t i = 0; i < k; i++) {
            cum += pr[i];
            if (cum >= (double)s->p.top_p * total) {
                keep = i + 1;
                break;
            }
        }
        total = cum;
    }
    const double u = r * total;
    double cum = 0.0;
    for (size_t i = 0; i < keep; i++) {
        cum += pr[i];
        if (u < cum)
            return c[i].id;
    }
    return c[keep - 1].id; /* u within rounding of the total */
}

void cairn__sampler_penalize(cairn__sampler *s, float *logits, const int32_t *hist, size_t n_hist)
{
    const size_t n = cairn__sampler_penalty_ids(s, hist, n_hist, s->pen, (size_t)s->n_vocab);
    for (size_t i = 0; i < n; i++)
        logits[s->pen[i]] = cairn__sample_penalize(logits[s->pen[i]], s->p.repeat_penalty);
}

int32_t cairn__sampler_sample(cairn__sampler *s, float *logits, const int32_t *hist, size_t n_hist)
{
    cairn__sampler_penalize(s, logits, hist, n_hist);
    if (cairn__sampler_greedy(s))
        return cairn__sampler_pick(s, logits, 0.0);
    return cairn__sampler_pick(s, logits, cairn__sampler_draw(s));
}

/* ---- the device sampler's algorithm, in plain C -------------------------------------------- */

static int key_desc(const void *x, const void *y)
{
    const uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a > b ? -1 : a < b;
}

int32_t cairn__sampler_pick_runs(const cairn__sampler_params *p, const float *logits, int n_vocab,
                                 double r, int n_runs, uint64_t *keys, double *w)
{
    for (int i = 0; i < n_vocab; i++)
        keys[i] = cairn__sample_key(logits[i], i);
    if (p->temperature <= 0.0f) { /* the largest key */
        uint64_t best = keys[0];
        for (int i = 1; i < n_vocab; i++)
            best = keys[i] > best ? keys[i] : best;
        return cairn__sample_key_id(best);
    }
    qsort(keys, (size_t)n_vocab, sizeof *keys, key_desc); /* the device's radix sort */
    int k = p->top_k > 0 && p->top_k < n_vocab ? p->top_k : n_vocab;
    const double max =
        cairn__sample_key_nan(keys[0]) ? 0.0 : (double)cairn__sample_key_logit(keys[0]);
    const double t = (double)p->temperature;
    for (int i = 0; i < n_vocab; i++) /* the device's weights kernel */
        w[i] = cairn__sample_weight(keys[i], max, t);
    /* Weights never grow along the order and NaN weighs 0, so the candidates that weigh 0 (NaN,
     * -inf, underflow) are a tail: cut it unless nothing else is left. The host keeps them but
     * can never draw them; here the runs' sums round differently from one running sum, and a
     * draw within that rounding could otherwise land on one. */
    for (int i = 0; i < k; i++)
        if (w[i] == 0.0) {
            k = i > 1 ? i : 1;
            break;
        }
    /* run j of the kernel's thread j: [j * len, (j + 1) * len) of the first k */
    if (n_runs < 1)
        n_runs = 1;
    const int len = (k + n_runs - 1) / n_runs;
    double before[n_runs > 0 ? n_runs : 1], total = 0.0;
    for (int j = 0; j < n_runs; j++) {
        const int lo = j * len < k ? j * len : k, hi = lo + len < k ? lo + len : k;
        before[j] = total;
        total += cairn__sample_run_sum(w, lo, hi);
    }
    int keep = k;
    if (p->top_p < 1.0f) { /* the first index whose running sum reaches top_p of the total */
        for (int j = 0; j < n_runs; j++) {
            const int lo = j * len < k ? j * len : k, hi = lo + len < k ? lo + len : k;
            double at = 0.0;
            const int i =
                cairn__sample_run_find(w, lo, hi, before[j], (double)p->top_p * total, 1, &at);
            if (i >= 0) {
                keep = i + 1;
                total = at;
                break;
            }
        }
    }
    const double u = r * total;
    for (int j = 0; j < n_runs; j++) {
        const int lo = j * len < keep ? j * len : keep, hi = lo + len < keep ? lo + len : keep;
        double at = 0.0;
        const int i = cairn__sample_run_find(w, lo, hi, before[j], u, 0, &at);
        if (i >= 0)
            return cairn__sample_key_id(keys[i]);
    }
    return cairn__sample_key_id(keys[keep - 1]); /* u within rounding of the total */
}

/* ---- state
 * ---------------------------------------------------------------------------------------- */

static const uint8_t STATE_MAGIC[4] = {'C', 'S', 'M', 'P'};
#define STATE_VERSION 1u

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int cairn__sampler_state_save(const cairn__sampler *s, uint8_t *buf, size_t len)
{
    if (!s || !buf || len < CAIRN__SAMPLER_STATE_BYTES)
        return CAIRN_EINVAL;
    memcpy(buf, STATE_MAGIC, 4);
    buf[4] = STATE_VERSION & 0xff;
    buf[5] = buf[6] = buf[7] = 0;
    put64(buf + 8, s->draws);
    for (int i = 0; i < 4; i++)
        put64(buf + 16 + 8 * i, s->rng[i]);
    return CAIRN__SAMPLER_STATE_BYTES;
}

int cairn__sampler_state_restore(cairn__sampler *s, const uint8_t *buf, size_t len)
{
    if (!s || !buf || len != CAIRN__SAMPLER_STATE_BYTES || memcmp(buf, STATE_MAGIC, 4) != 0 ||
        buf[4] != STATE_VERSION || buf[5] || buf[6] || buf[7])
        return CAIRN_EFORMAT;
    uint64_t rng[4];
    for (int i = 0; i < 4; i++)
        rng[i] = get64(buf + 16 + 8 * i);
    if ((rng[0] | rng[1] | rng[2] | rng[3]) == 0) /* xoshiro's one forbidden state */
        return CAIRN_EFORMAT;
    s->draws = get64(buf + 8);
    memcpy(s->rng, rng, sizeof rng);
    return 0;
}
