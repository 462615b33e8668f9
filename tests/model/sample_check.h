/* tests/model/sample_check.h - what the sampler tests share: awkward logits, and the rule by
 * which a device pick may differ from the host's (only within rounding of a boundary). */
#ifndef CAIRN_TESTS_SAMPLE_CHECK_H
#define CAIRN_TESTS_SAMPLE_CHECK_H

#include <stdint.h>

#include "gpu/backend.h"
#include "gpu/sampler.h"

/* kind 0: smooth in [-8, 8); 1: five distinct values (long runs of ties); 2: a smooth field
 * with -0.0, +0.0, NaN, -inf and 1e-30 sprinkled in; 3: a smooth field with -inf and a few
 * +inf. Deterministic in seed. */
void mk_awkward_logits(float *lg, int n, uint64_t seed, int kind);

/* Whether got is an acceptable pick for already-penalized logits lg (n) and draw r: the host's
 * cairn__sampler_pick, or (then *near is counted) a kept token of positive weight whose span of
 * the running sum (in long double) comes within 1e-12 of the kept total of the point r * total:
 * what another summation order can pick. */
int mk_pick_agrees(cairn__sampler *s, const float *lg, int n, double r, int32_t got, int *near);
/* The second half of that: whether got is a kept token of positive weight whose span comes
 * within rounding of the draw's point (long double running sums over the full sorted order). */
int mk_pick_near(const cairn__sampler_params *p, const float *lg, int n, double r, int32_t got);

/* The device sampler in C, for stand-ins of a device: q's penalty on lg (in place), then
 * cairn__sampler_pick_runs with 1024 runs, as the kernel's threads. keys: n_vocab scratch.
 * -1 when out of memory. */
int32_t mk_standin_pick(const cairn__sample_req *q, float *lg, int n_vocab, uint64_t *keys);

#endif
