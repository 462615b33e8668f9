/* tests/model/sample_check.c - see sample_check.h. */
#include "tests/model/sample_check.h"

#include <math.h>

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
        else {
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

int mk_pick_agrees(cairn__sampler *s, const float *lg, double r, int32_t got, int *near)
{
    if (cairn__sampler_pick(s, lg, r) == got)
        return 1;
    const double lo = r - 1e-12 > 0 ? r - 1e-12 : 0, hi = r + 1e-12 < 1 ? r + 1e-12 : r;
    if (cairn__sampler_pick(s, lg, lo) == got || cairn__sampler_pick(s, lg, hi) == got) {
        (*near)++;
        return 1;
    }
    return 0;
}

int32_t mk_standin_pick(const cairn__sample_req *q, float *lg, int n_vocab, uint64_t *keys)
{
    for (int i = 0; i < q->n_pen; i++)
        lg[q->pen[i]] = cairn__sample_penalize(lg[q->pen[i]], q->repeat_penalty);
    const cairn__sampler_params p = {.temperature = q->temperature,
                                     .top_k = q->top_k,
                                     .top_p = q->top_p,
                                     .repeat_penalty = q->repeat_penalty};
    return cairn__sampler_pick_runs(&p, lg, n_vocab, q->r, 1024, keys);
}
