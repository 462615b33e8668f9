/* gpu/sampler.h - picks the next token from logits: greedy, or temperature with top-k / top-p,
 * with a repetition penalty; deterministic, and resumable from a few saved bytes.
 *
 * All randomness comes from one xoshiro256** generator seeded from params.seed. Its state (plus
 * a draw counter) is what cairn__sampler_state_save writes, so (history so far, saved state)
 * continues a generation exactly as if it had never stopped. Ties between equal logits always
 * go to the lower token id, so results do not depend on sort stability.
 */
#ifndef CAIRN_GPU_SAMPLER_H
#define CAIRN_GPU_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float temperature;    /* <= 0: greedy (argmax, no randomness) */
    int top_k;            /* keep the k most likely tokens; <= 0: all */
    float top_p;          /* keep the smallest set whose probability reaches p; >= 1: all */
    float repeat_penalty; /* > 1 discourages tokens seen in the last repeat_last_n; 1: off */
    int repeat_last_n;    /* window of history the penalty looks at; 0: off, -1: all of it */
    uint64_t seed;
} cairn__sampler_params;

/* temperature 0.8, top_k 40, top_p 0.95, repeat_penalty 1.0 (off), repeat_last_n 64, seed 0 */
void cairn__sampler_params_default(cairn__sampler_params *p);

typedef struct cairn__sampler cairn__sampler;

/* Returns 0 and *out, CAIRN_EINVAL (n_vocab < 1, a NaN or negative parameter, top_p <= 0,
 * repeat_penalty <= 0), or CAIRN_ENOMEM. */
int cairn__sampler_new(const cairn__sampler_params *p, int n_vocab, cairn__sampler **out);
void cairn__sampler_free(cairn__sampler *s); /* NULL is a no-op */

/* Picks a token from logits (n_vocab floats; modified in place by the penalty) given the
 * tokens so far (history[0..n_hist), prompt included; may be NULL when n_hist is 0). Advances
 * the generator once per call unless greedy. NaN logits are never picked while any other is
 * finite. */
int32_t cairn__sampler_sample(cairn__sampler *s, float *logits, const int32_t *history,
                              size_t n_hist);

/* ---- the parts of cairn__sampler_sample, for a backend that samples on its device ----------
 * sample = penalty on the logits, then greedy ? pick(0) : pick(draw()). A device sampler takes
 * the penalty set and the draw from the host (so the generator state and its saving stay here)
 * and does the rest, by the algorithm of cairn__sampler_pick_runs (gpu/sample_core.h). */

/* The distinct token ids the penalty applies to given this history, in first-seen order: writes
 * at most cap of them to out and returns how many there are (0 when the penalty is off). */
size_t cairn__sampler_penalty_ids(cairn__sampler *s, const int32_t *history, size_t n_hist,
                                  int32_t *out, size_t cap);
/* The repetition penalty of cairn__sampler_sample alone, on logits in place. */
void cairn__sampler_penalize(cairn__sampler *s, float *logits, const int32_t *history,
                             size_t n_hist);
const cairn__sampler_params *cairn__sampler_get_params(const cairn__sampler *s);
/* temperature <= 0: no draw, argmax */
int cairn__sampler_greedy(const cairn__sampler *s);
/* The next uniform number in [0, 1) (53 bits), advancing the generator and the draw count. */
double cairn__sampler_draw(cairn__sampler *s);
/* The token for already-penalized logits and the draw r (ignored when greedy). */
int32_t cairn__sampler_pick(cairn__sampler *s, const float *logits, double r);
/* The device sampler's algorithm in plain C: keys (n_vocab scratch) sorted, weighed into w
 * (n_vocab scratch), the first top_k of them summed in n_runs contiguous runs as the kernel's
 * threads do. Gives the token cairn__sampler_pick gives, except when r lands within rounding of
 * a boundary between two candidates (the runs sum in another order). */
int32_t cairn__sampler_pick_runs(const cairn__sampler_params *p, const float *logits, int n_vocab,
                                 double r, int n_runs, uint64_t *keys, double *w);

/* Number of sample calls that drew a random number since creation (or the restored state). */
uint64_t cairn__sampler_draws(const cairn__sampler *s);

#define CAIRN__SAMPLER_STATE_BYTES 48

/* Writes the generator state (CAIRN__SAMPLER_STATE_BYTES bytes: magic "CSMP", version, draws,
 * xoshiro state; little-endian) to buf. Returns the number of bytes written, or CAIRN_EINVAL if
 * len is too small. */
int cairn__sampler_state_save(const cairn__sampler *s, uint8_t *buf, size_t len);
/* Restores a state written by cairn__sampler_state_save. 0, or CAIRN_EFORMAT (wrong size,
 * magic or version, or an all-zero generator state) leaving s unchanged. */
int cairn__sampler_state_restore(cairn__sampler *s, const uint8_t *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
