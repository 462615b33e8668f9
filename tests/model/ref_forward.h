/* tests/model/ref_forward.h - a float64 reference forward pass for checking the backends. */
#ifndef CAIRN_TESTS_REF_FORWARD_H
#define CAIRN_TESTS_REF_FORWARD_H

#include <stdint.h>

#include "gpu/model.h"
#include "tests/model/mkmodel.h"

/* logits (n, n_vocab) of tokens[0..n) at positions 0..n-1, computed in double from the
 * dequantized weights with no KV cache and no shortcuts. The rotary base, the rotated
 * dimension count, the RMS epsilon, the rope frequency factors (rope_freqs.weight) and the
 * rotation pairing (from the architecture) come from the spec m was built from, not from m, so
 * a loader that misreads them fails the comparison;
 * shapes and weights come from m (a misread shape fails at load). 0 or -1 (out of memory). */
int ref_forward(const cairn__model *m, const mk_spec *s, const int32_t *tokens, int n,
                double *logits);
/* The same with every key (after rope) and value rounded to an IEEE half and back when
 * cache_f16 is set: what a backend with an f16 KV cache attends to. */
int ref_forward_cache(const cairn__model *m, const mk_spec *s, const int32_t *tokens, int n,
                      int cache_f16, double *logits);

#endif
