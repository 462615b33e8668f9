/* tests/model/test_sampler.c - determinism, greedy, top-k, top-p, penalty, save/restore; the
 * parts a device sampler uses (penalty set, draw, pick) and the device algorithm in plain C
 * (cairn__sampler_pick_runs) against the host sampler on awkward logits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/sample_core.h"
#include "gpu/sampler.h"
#include "tests/model/sample_check.h"
#include "tests/tap.h"

#include "cairn_errors.h"
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

static uint64_t xs(uint64_t *x)
{
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return *x;
}

static void test_device_algorithm(void)
{
    /* keys: descending key order is (logit desc, NaN last, id asc) */
    ok(cairn__sample_key(1.0f, 5) > cairn__sample_key(0.5f, 1) &&
           cairn__sample_key(0.5f, 1) > cairn__sample_key(0.5f, 2) &&
           cairn__sample_key(-0.0f, 3) > cairn__sample_key(0.0f, 4) &&
           cairn__sample_key(0.0f, 4) > cairn__sample_key(-1e-30f, 0) &&
           cairn__sample_key(-INFINITY, 0) > cairn__sample_key(NAN, 0) &&
           cairn__sample_key(-NAN, 0) > cairn__sample_key(NAN, 1) &&
           cairn__sample_key(INFINITY, 9) > cairn__sample_key(3e38f, 0),
       "sample keys order as the host's candidates (zeros equal, NaN last, ties by id)");
    const float vals[] = {1.5f, -2.25f, 0.0f, -0.0f, INFINITY, -INFINITY, 1e-38f, -3e38f};
    int round = 1;
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        const uint64_t k = cairn__sample_key(vals[i], (int32_t)i * 1000);
        round &=
            cairn__sample_key_logit(k) == vals[i] && cairn__sample_key_id(k) == (int32_t)i * 1000;
    }
    const uint64_t kn = cairn__sample_key(NAN, 77);
    ok(round && isnan(cairn__sample_key_logit(kn)) && cairn__sample_key_id(kn) == 77 &&
           cairn__sample_key_nan(kn) && !cairn__sample_key_nan(cairn__sample_key(-INFINITY, 0)),
       "a key gives back its logit and id");

    /* the parts add up to sample(): penalty + draw + pick, token for token and state for state */
    cairn__sampler_params p;
    cairn__sampler_params_default(&p);
    p.seed = 5;
    p.repeat_penalty = 1.3f;
    p.repeat_last_n = 8;
    cairn__sampler *a = NULL, *b = NULL;
    cairn__sampler_new(&p, V, &a);
    cairn__sampler_new(&p, V, &b);
    int32_t hist[64], pen[16];
    int same = 1;
    for (int i = 0; i < 64; i++) {
        float l1[V], l2[V];
        fill(l1, 300 + (uint64_t)i);
        memcpy(l2, l1, sizeof l1);
        const int32_t t1 = cairn__sampler_sample(a, l1, hist, (size_t)i);
        const size_t np = cairn__sampler_penalty_ids(b, hist, (size_t)i, pen, 16);
        for (size_t j = 0; j < np; j++)
            l2[pen[j]] = cairn__sample_penalize(l2[pen[j]], p.repeat_penalty);
        const int32_t t2 = cairn__sampler_pick(b, l2, cairn__sampler_draw(b));
        same &= t1 == t2 && np <= 8;
        hist[i] = t1 % 12; /* a small alphabet, so the window repeats */
    }
    uint8_t sa[CAIRN__SAMPLER_STATE_BYTES], sb[CAIRN__SAMPLER_STATE_BYTES];
    cairn__sampler_state_save(a, sa, sizeof sa);
    cairn__sampler_state_save(b, sb, sizeof sb);
    ok(same && memcmp(sa, sb, sizeof sa) == 0,
       "penalty_ids + draw + pick = sample: 64 tokens and the saved state");
    int32_t h3[] = {4, 4, 7, -1, V, 4, 9, 7};
    size_t np = cairn__sampler_penalty_ids(a, h3, 8, pen, 2);
    ok(np == 3 && pen[0] == 4 && pen[1] == 7,
       "penalty_ids: distinct, in range, first seen first, "
       "counted past cap (%zu)",
       np);
    np = cairn__sampler_penalty_ids(a, h3, 8, pen, 16);
    ok(np == 3 && pen[2] == 9 && cairn__sampler_penalty_ids(a, h3, 8, pen, 16) == 3,
       "penalty_ids leaves no marks behind");
    cairn__sampler_free(a);
    cairn__sampler_free(b);
    p.repeat_penalty = 1.0f;
    cairn__sampler_new(&p, V, &a);
    ok(cairn__sampler_penalty_ids(a, h3, 8, pen, 16) == 0, "penalty 1: no penalty set");
    cairn__sampler_free(a);

    /* the device algorithm against the host on every kind of logits and parameters */
    enum { NV = 3001 };
    static float lg[NV];
    static uint64_t keys[NV];
    static double wts[NV];
    const float temps[] = {0.0f, 0.05f, 0.8f, 1.0f, 7.0f};
    const int topks[] = {0, 1, 2, 40, 1000, NV - 1, NV, NV + 5};
    const float topps[] = {1.0f, 0.95f, 0.5f, 1e-6f};
    const int runs[] = {1, 3, 256, 1024, 4000};
    int cases = 0, fails = 0, near = 0;
    uint64_t seed = 99;
    for (int kind = 0; kind < 4; kind++)
        for (size_t ti = 0; ti < sizeof temps / sizeof *temps; ti++)
            for (size_t ki = 0; ki < sizeof topks / sizeof *topks; ki++)
                for (size_t pi = 0; pi < sizeof topps / sizeof *topps; pi++) {
                    cairn__sampler_params_default(&p);
                    p.temperature = temps[ti];
                    p.top_k = topks[ki];
                    p.top_p = topps[pi];
                    cairn__sampler_new(&p, NV, &a);
                    mk_awkward_logits(lg, NV, xs(&seed), kind);
                    for (size_t ri = 0; ri < sizeof runs / sizeof *runs; ri++) {
                        const double r = (double)(xs(&seed) >> 11) * 0x1.0p-53;
                        const int32_t got =
                            cairn__sampler_pick_runs(&p, lg, NV, r, runs[ri], keys, wts);
                        if (!mk_pick_agrees(a, lg, NV, r, got, &near)) {
                            diag("runs %d: token %d, host %d (r %.17g, t %g, k %d, p %g)", runs[ri],
                                 got, cairn__sampler_pick(a, lg, r), r, (double)p.temperature,
                                 p.top_k, (double)p.top_p);
                            fails++;
                        }
                        cases++;
                    }
                    cairn__sampler_free(a);
                }
    ok(fails == 0, "device algorithm = host pick in %d cases (%d within rounding of a boundary)",
       cases, near);
    /* draws just below 1, in 7, 100 and 1024 runs: the runs' sums
     * round differently from one running sum, and no draw may land on a token that weighs 0
     * (-inf, or exp underflow) */
    {
        enum { NZ = 1024 };
        static float lz[NZ];
        int zcases = 0, zbad = 0, znear = 0;
        const double edge[] = {1.0 - 0x1.0p-53, 1.0 - 0x1.0p-52, 1.0 - 0x1.0p-51};
        for (int seedz = 1; seedz <= 150; seedz++)
            for (int kind = 0; kind < 3; kind += 2)
                for (int tk = 0; tk < 2; tk++) {
                    cairn__sampler_params_default(&p);
                    p.temperature = tk ? 7.0f : 0.3f;
                    p.top_k = tk ? NZ - 1 : 0;
                    p.top_p = 1.0f;
                    cairn__sampler_new(&p, NZ, &a);
                    mk_awkward_logits(lz, NZ, (uint64_t)seedz * 7919u, kind);
                    for (size_t ei = 0; ei < 3 * sizeof edge / sizeof *edge; ei++) {
                        const int runs = ei % 3 == 0 ? 7 : ei % 3 == 1 ? 100 : NZ;
                        const int32_t got =
                            cairn__sampler_pick_runs(&p, lz, NZ, edge[ei / 3], runs, keys, wts);
                        const float lg_got = lz[got];
                        const int bad = !mk_pick_agrees(a, lz, NZ, edge[ei / 3], got, &znear) ||
                                        isnan(lg_got) || isinf(lg_got);
                        if (bad && zbad < 5)
                            diag("seed %d kind %d t %g k %d r 1-%g runs %d: token %d (logit %g), "
                                 "host %d (logit %g)",
                                 seedz, kind, (double)p.temperature, p.top_k,
                                 (1.0 - edge[ei / 3]) * 0x1.0p53, runs, got, (double)lg_got,
                                 cairn__sampler_pick(a, lz, edge[ei / 3]),
                                 (double)lz[cairn__sampler_pick(a, lz, edge[ei / 3])]);
                        zbad += bad;
                        zcases++;
                    }
                    cairn__sampler_free(a);
                }
        ok(zbad == 0,
           "draws within 2^-51 of 1: never a token of weight 0, always the host's "
           "(%d cases, %d within rounding)",
           zcases, znear);
    }
    /* draws at the edges: 0, just below 1, and exactly at a cumulative boundary */
    cairn__sampler_params_default(&p);
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    float four[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* 4 equal weights: boundaries at 0.25, 0.5, 0.75 */
    cairn__sampler_new(&p, 4, &a);
    const double edges[] = {0.0, 0.25, 0.5, 0.75, 1.0 - 0x1.0p-53};
    const int32_t want[] = {0, 1, 2, 3, 3};
    int edge_ok = 1;
    for (int i = 0; i < 5; i++)
        for (int rr = 1; rr <= 4; rr++)
            edge_ok &= cairn__sampler_pick_runs(&p, four, 4, edges[i], rr, keys, wts) == want[i] &&
                       cairn__sampler_pick(a, four, edges[i]) == want[i];
    ok(edge_ok, "draws on exact boundaries go up (u < cum), the same in 1-4 runs");
    /* infinite logits: the +inf ones share the mass (a -inf one is never drawn); nothing but
     * -inf: all alike */
    const float inf_a[4] = {1.0f, INFINITY, -INFINITY, -INFINITY};
    const float inf_b[4] = {INFINITY, 0.0f, INFINITY, 2.0f};
    const float inf_c[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int inf_ok = 1, seen[4] = {0};
    cairn__sampler_free(a);
    cairn__sampler_new(&p, 4, &a);
    for (int i = 0; i < 64; i++) {
        const double r = (i + 0.5) / 64.0;
        const int32_t ta = cairn__sampler_pick(a, inf_a, r), tb = cairn__sampler_pick(a, inf_b, r);
        const int32_t tc = cairn__sampler_pick(a, inf_c, r);
        inf_ok &= ta == 1 && (tb == 0 || tb == 2) && tc >= 0 && tc < 4 &&
                  cairn__sampler_pick_runs(&p, inf_a, 4, r, 2, keys, wts) == ta &&
                  cairn__sampler_pick_runs(&p, inf_b, 4, r, 3, keys, wts) == tb &&
                  cairn__sampler_pick_runs(&p, inf_c, 4, r, 2, keys, wts) == tc;
        seen[tb]++;
        seen[3] |= tc == 3;
    }
    ok(inf_ok && seen[0] == 32 && seen[2] == 32 && seen[3],
       "+inf logits share the draw (%d/%d), a -inf one is never picked, all -inf: any; the same in "
       "runs",
       seen[0], seen[2]);
    float nan4[4] = {NAN, NAN, NAN, NAN};
    ok(cairn__sampler_pick_runs(&p, nan4, 4, 0.7, 2, keys, wts) ==
           cairn__sampler_pick(a, nan4, 0.7),
       "all NaN: both pick the same (%d)", cairn__sampler_pick(a, nan4, 0.7));
    cairn__sampler_free(a);
}

/* Without top-k the host sorts only the top of the order (pick_prefix in gpu/sampler.c): on
 * peaked logits over a large vocabulary, as a language model's are, every pick must be the one
 * sorting everything gives (cairn__sampler_pick_runs in one run walks the fully sorted order),
 * or itself within rounding of a boundary (checked in long double over the full order). */
static void test_prefix_pick(void)
{
    enum { NV = 50000 };
    static float lg[NV];
    static uint64_t keys[NV];
    static double wts[NV];
    const float temps[] = {0.05f, 0.3f, 0.7f, 1.5f};
    const float topps[] = {1.0f, 0.95f, 0.5f, 1e-6f};
    int cases = 0, fails = 0, near = 0;
    uint64_t seed = 4242;
    for (int shape = 0; shape < 3; shape++) {
        /* roughly normal logits (spread 1, 3, 6) with a few far above the rest */
        for (int i = 0; i < NV; i++) {
            double g = 0;
            for (int k = 0; k < 4; k++)
                g += (double)(xs(&seed) >> 11) * 0x1.0p-53 - 0.5;
            lg[i] = (float)(g * (shape == 0 ? 1.7 : shape == 1 ? 5.2 : 10.4));
        }
        for (int i = 0; i < 12; i++)
            lg[(size_t)(xs(&seed) % NV)] = (float)(8 + 2 * shape) + 0.25f * (float)i;
        lg[77] = lg[78] = lg[(size_t)(xs(&seed) % NV)]; /* ties */
        for (size_t ti = 0; ti < sizeof temps / sizeof *temps; ti++)
            for (size_t pi = 0; pi < sizeof topps / sizeof *topps; pi++) {
                cairn__sampler_params p;
                cairn__sampler_params_default(&p);
                p.temperature = temps[ti];
                p.top_k = 0;
                p.top_p = topps[pi];
                cairn__sampler *a = NULL;
                cairn__sampler_new(&p, NV, &a);
                for (int d = 0; d < 12; d++) {
                    const double r = d == 0   ? 0.0
                                     : d == 1 ? 1.0 - 0x1.0p-53
                                              : (double)(xs(&seed) >> 11) * 0x1.0p-53;
                    const int32_t full = cairn__sampler_pick_runs(&p, lg, NV, r, 1, keys, wts);
                    const int32_t host = cairn__sampler_pick(a, lg, r);
                    const int nearby = host != full && mk_pick_near(&p, lg, NV, r, host);
                    near += nearby;
                    if (host != full && !nearby) {
                        if (fails < 5)
                            diag("shape %d t %g p %g r %.17g: full sort %d, host %d", shape,
                                 (double)p.temperature, (double)p.top_p, r, full,
                                 cairn__sampler_pick(a, lg, r));
                        fails++;
                    }
                    cases++;
                }
                cairn__sampler_free(a);
            }
    }
    ok(fails == 0,
       "no top-k, %d tokens of peaked logits: the host's pick is the full sort's in %d cases (%d "
       "within rounding of a boundary)",
       NV, cases, near);
}

int main(void)
{
    test_device_algorithm();
    test_prefix_pick();

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
