/* tests/model/test_sampler.c - determinism, greedy, top-k, top-p, penalty, save/restore. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/sampler.h"
#include "tests/tap.h"

#include "cairn_errors.h"
enum {
#define CAIRN__X(n, v, s) CAIRN_##n = v,
    CAIRN_ERROR_TABLE(CAIRN__X)
#undef CAIRN__X
};

#define V 1000

static void fill(float *lg, uint64_t seed)
{
    for (int i = 0; i < V; i++) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        lg[i] = (float)((double)(seed >> 11) * 0x1.0p-53 * 8.0 - 4.0);
    }
}

static int draw(cairn__sampler *s, uint64_t lseed)
{
    float lg[V];
    fill(lg, lseed);
    return cairn__sampler_sample(s, lg, NULL, 0);
}

int main(void)
{
    cairn__sampler_params p;
    cairn__sampler_params_default(&p);
    p.seed = 42;
    cairn__sampler *a = NULL, *b = NULL;
    ok(cairn__sampler_new(&p, V, &a) == 0 && cairn__sampler_new(&p, V, &b) == 0,
       "create two samplers");
    int same = 1;
    for (int i = 0; i < 200; i++)
        same &= draw(a, 1000 + (uint64_t)i) == draw(b, 1000 + (uint64_t)i);
    ok(same, "same seed and logits -> same 200 tokens");
    cairn__sampler_free(b);
    p.seed = 43;
    cairn__sampler_new(&p, V, &b);
    int diff = 0;
    for (int i = 0; i < 200; i++)
        diff += draw(a, 5000 + (uint64_t)i) != draw(b, 5000 + (uint64_t)i);
    ok(diff > 10, "a different seed gives different tokens (%d of 200 differ)", diff);
    cairn__sampler_free(a);
    cairn__sampler_free(b);

    /* greedy */
    p.temperature = 0;
    cairn__sampler_new(&p, V, &a);
    float lg[V];
    fill(lg, 7);
    int am = 0;
    for (int i = 1; i < V; i++)
        if (lg[i] > lg[am])
            am = i;
    ok(cairn__sampler_sample(a, lg, NULL, 0) == am && cairn__sampler_draws(a) == 0,
       "greedy = argmax, no draws");
    for (int i = 0; i < V; i++)
        lg[i] = 1.0f;
    lg[500] = lg[300] = 2.0f;
    ok(cairn__sampler_sample(a, lg, NULL, 0) == 300, "greedy ties go to the lower id");
    lg[100] = NAN;
    ok(cairn__sampler_sample(a, lg, NULL, 0) == 300, "greedy ignores NaN");
    cairn__sampler_free(a);

    /* top-k: only the k best ever come out */
    cairn__sampler_params_default(&p);
    p.temperature = 5.0f; /* flat, so all k get drawn */
    p.top_k = 5;
    p.top_p = 1.0f;
    cairn__sampler_new(&p, V, &a);
    fill(lg, 11);
    int order[V];
    for (int i = 0; i < V; i++)
        order[i] = i;
    for (int i = 0; i < V; i++) /* selection sort of indices by logit desc (small V) */
        for (int j = i + 1; j < V; j++)
            if (lg[order[j]] > lg[order[i]]) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    int counts[V] = {0}, outside = 0;
    for (int i = 0; i < 4000; i++) {
        float l2[V];
        memcpy(l2, lg, sizeof l2);
        counts[cairn__sampler_sample(a, l2, NULL, 0)]++;
    }
    int hit = 0;
    for (int i = 0; i < V; i++) {
        int in = 0;
        for (int k = 0; k < 5; k++)
            in |= order[k] == i;
        if (!in)
            outside += counts[i];
        else
            hit += counts[i] > 0;
    }
    ok(outside == 0 && hit == 5, "top-k 5: only the 5 best appear (%d outside, %d of 5 seen)",
       outside, hit);
    cairn__sampler_free(a);

    /* top-p with known probabilities: logits log(0.5), log(0.3), log(0.15), log(0.05) */
    float small[4] = {logf(0.15f), logf(0.5f), logf(0.05f), logf(0.3f)};
    cairn__sampler_params_default(&p);
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 0.75f; /* 0.5 + 0.3 = 0.8 >= 0.75: nucleus {1, 3} */
    p.seed = 9;
    cairn__sampler_new(&p, 4, &a);
    int c4[4] = {0};
    for (int i = 0; i < 10000; i++) {
        float l2[4];
        memcpy(l2, small, sizeof l2);
        c4[cairn__sampler_sample(a, l2, NULL, 0)]++;
    }
    const double f1 = c4[1] / 10000.0;
    ok(c4[0] == 0 && c4[2] == 0 && fabs(f1 - 0.625) < 0.03,
       "top-p 0.75: nucleus {0.5, 0.3} renormalized (p1 %.3f ~ 0.625; %d %d outside)", f1, c4[0],
       c4[2]);
    cairn__sampler_free(a);
    p.top_p = 1.0f;
    cairn__sampler_new(&p, 4, &a);
    memset(c4, 0, sizeof c4);
    for (int i = 0; i < 20000; i++) {
        float l2[4];
        memcpy(l2, small, sizeof l2);
        c4[cairn__sampler_sample(a, l2, NULL, 0)]++;
    }
    ok(fabs(c4[0] / 20000.0 - 0.15) < 0.02 && fabs(c4[2] / 20000.0 - 0.05) < 0.01 &&
           fabs(c4[1] / 20000.0 - 0.5) < 0.02,
       "temperature 1 samples the softmax (%.3f %.3f %.3f %.3f)", c4[0] / 2e4, c4[1] / 2e4,
       c4[2] / 2e4, c4[3] / 2e4);
    cairn__sampler_free(a);

    /* repetition penalty */
    cairn__sampler_params_default(&p);
    p.temperature = 0;
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 2;
    cairn__sampler_new(&p, 4, &a);
    float pl[4] = {3.0f, 2.0f, -1.0f, 1.9f};
    int32_t hist[] = {0, 0, 1, 0};
    /* window = last 2 = {1, 0}: 3 -> 1.5, 2 -> 1.0 (each once, though 0 repeats); 1.9 wins */
    ok(cairn__sampler_sample(a, pl, hist, 4) == 3 && pl[0] == 1.5f && pl[1] == 1.0f &&
           pl[2] == -1.0f,
       "repeat penalty divides positive logits once per distinct token in the window");
    float nl[4] = {-1.0f, -2.0f, -3.0f, -1.5f};
    int32_t h2[] = {0};
    ok(cairn__sampler_sample(a, nl, h2, 1) == 3 && nl[0] == -2.0f,
       "repeat penalty multiplies negative logits");
    cairn__sampler_free(a);

    /* save / restore */
    cairn__sampler_params_default(&p);
    p.seed = 77;
    cairn__sampler_new(&p, V, &a);
    for (int i = 0; i < 37; i++)
        draw(a, (uint64_t)i + 1);
    uint8_t st[CAIRN__SAMPLER_STATE_BYTES];
    ok(cairn__sampler_state_save(a, st, sizeof st) == CAIRN__SAMPLER_STATE_BYTES,
       "state saved (%d bytes)", CAIRN__SAMPLER_STATE_BYTES);
    ok(cairn__sampler_state_save(a, st, 10) == CAIRN_EINVAL, "short buffer -> EINVAL");
    int ref[50];
    for (int i = 0; i < 50; i++)
        ref[i] = draw(a, 100 + (uint64_t)i);
    cairn__sampler_new(&p, V, &b);
    ok(cairn__sampler_state_restore(b, st, sizeof st) == 0 && cairn__sampler_draws(b) == 37,
       "state restored");
    same = 1;
    for (int i = 0; i < 50; i++)
        same &= draw(b, 100 + (uint64_t)i) == ref[i];
    ok(same, "a restored sampler continues with the same 50 tokens");
    uint8_t badst[CAIRN__SAMPLER_STATE_BYTES];
    memcpy(badst, st, sizeof st);
    badst[0] ^= 1;
    ok(cairn__sampler_state_restore(b, badst, sizeof badst) == CAIRN_EFORMAT,
       "bad magic -> EFORMAT");
    ok(cairn__sampler_state_restore(b, st, sizeof st - 1) == CAIRN_EFORMAT,
       "short state -> EFORMAT");
    memset(badst + 16, 0, 32);
    ok(cairn__sampler_state_restore(b, badst, sizeof badst) == CAIRN_EFORMAT,
       "all-zero generator -> EFORMAT");
    cairn__sampler_free(a);
    cairn__sampler_free(b);

    cairn__sampler_params_default(&p);
    p.top_p = 0;
    ok(cairn__sampler_new(&p, V, &a) == CAIRN_EINVAL && a == NULL, "top_p 0 -> EINVAL");
    cairn__sampler_params_default(&p);
    ok(cairn__sampler_new(&p, 0, &a) == CAIRN_EINVAL, "empty vocabulary -> EINVAL");
    cairn__sampler_free(NULL);
    return tap_done();
}
