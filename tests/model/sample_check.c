/* tests/model/sample_check.c - see sample_check.h. */
#include "tests/model/sample_check.h"

#include <math.h>
#include <stdlib.h>

#include "gpu/sample_core.h"

static uint64_t xs(uint64_t *x)
{
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return *x;
}

void mk_awkward_logits(float *lg, int n, uint64_t seed, int kind)
{
    seed |= 1; /* xorshift's one forbidden state is 0 */
    for (int i = 0; i < n; i++) {
        const uint64_t r = xs(&seed);
        if (kind == 0)
            lg[i] = (float)((double)(r >> 11) * 0x1.0p-53 * 16.0 - 8.0);
        else if (kind == 1)
            lg[i] = (float)((int)(r % 5) - 2);
        else if (kind == 3) { /* a few +inf among -inf and a smooth field */
            const int c = (int)(r % 97);
            lg[i] = c == 0  ? INFINITY
                    : c < 4 ? -INFINITY
                            : (float)((double)(r >> 11) * 0x1.0p-53 * 6.0 - 3.0);
        } else {
            const int c = (int)(r % 23);
            lg[i] = c == 0   ? -0.0f
                    : c == 1 ? 0.0f
                    : c == 2 ? NAN
                    : c == 3 ? -INFINITY
                    : c == 4 ? 1e-30f
                             : (float)((double)(r >> 11) * 0x1.0p-53 * 6.0 - 3.0);
        }
    }
}

static int key_desc(const void *x, const void *y)
{
    const uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a > b ? -1 : a < b;
}

int mk_pick_agrees(cairn__sampler *s, const float *lg, int n, double r, int32_t got, int *near)
{
    if (cairn__sampler_pick(s, lg, r) == got)
        return 1;
    const int found = mk_pick_near(cairn__sampler_get_params(s), lg, n, r, got);
    if (found)
        (*near)++;
    return found;
}

int mk_pick_near(const cairn__sampler_params *p, const float *lg, int n, double r, int32_t got)
{
    if (p->temperature <= 0.0f || got < 0 || got >= n)
        return 0; /* greedy has no rounding to allow for */
    /* the host's candidates and weights as cairn__sampler_pick makes them, summed in long double so
     * that the tail's tiny weights keep their spans (in double they vanish into the sum, and a
     * sum in another order, as the device's, can land on them) */
    uint64_t *keys = malloc((size_t)n * sizeof *keys);
    long double *cum = malloc((size_t)n * sizeof *cum); /* long: tail weights must not vanish */
    int found = 0;
    if (keys && cum) {
        for (int i = 0; i < n; i++)
            keys[i] = cairn__sample_key(lg[i], i);
        qsort(keys, (size_t)n, sizeof *keys, key_desc);
        int k = p->top_k > 0 && p->top_k < n ? p->top_k : n;
        while (k > 1 && cairn__sample_key_nan(keys[k - 1]))
            k--;
        const double max =
            cairn__sample_key_nan(keys[0]) ? 0.0 : (double)cairn__sample_key_logit(keys[0]);
        long double total = 0.0L;
        for (int i = 0; i < k; i++)
            cum[i] = total +=
                (long double)cairn__sample_weight(keys[i], max, (double)p->temperature);
        int keep = k;
        if (p->top_p < 1.0f)
            for (int i = 0; i < k; i++)
                if (cum[i] >= (long double)p->top_p * total) {
                    keep = i + 1;
                    break;
                }
        const long double kept = cum[keep - 1], u = (long double)r * kept, tol = 1e-12L * kept;
        for (int j = 0; j < keep && !found; j++)
            if (cairn__sample_key_id(keys[j]) == got) {
                const long double lo = j ? cum[j - 1] : 0.0L, hi = cum[j];
                found = cairn__sample_weight(keys[j], max, (double)p->temperature) > 0.0 &&
                        u >= lo - tol && u < hi + tol;
            }
    }
    free(keys);
    free(cum);
    return found;
}

int32_t mk_standin_pick(const cairn__sample_req *q, float *lg, int n_vocab, uint64_t *keys)
{
    for (int i = 0; i < q->n_pen; i++)
        lg[q->pen[i]] = cairn__sample_penalize(lg[q->pen[i]], q->repeat_penalty);
    const cairn__sampler_params p = {.temperature = q->temperature,
                                     .top_k = q->top_k,
                                     .top_p = q->top_p,
                                     .repeat_penalty = q->repeat_penalty};
    double *w = malloc((size_t)n_vocab * sizeof *w);
    const int32_t t = w ? cairn__sampler_pick_runs(&p, lg, n_vocab, q->r, 1024, keys, w) : -1;
    free(w);
    return t;
}
