/* gpu/genseq.h - one generation's bookkeeping, shared by the engine's loop (gpu/engine.c) and
 * the batch (gpu/batch.c): the history (prompt, then the generated tokens), the text with its
 * stop strings and held-back bytes, the streaming and checkpoint callbacks of cairn__gen_opts,
 * and the rules that end a generation (end of turn, stop string, max_tokens, context, cancel).
 * No forward passes and no sampling: the caller runs those and hands each new token to
 * cairn__genseq_take, which says whether to run a step for it.
 */
#ifndef CAIRN_GPU_GENSEQ_H
#define CAIRN_GPU_GENSEQ_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/engine.h"
#include "gpu/sampler.h"
#include "gpu/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char *p;
    size_t len, cap;
} cairn__gbuf;

typedef struct {
    const cairn__tok *tok;    /* NULL: no text */
    int32_t eos_extra;        /* another end-of-turn id (-1: none) */
    const cairn__gen_opts *o; /* borrowed for the generation's lifetime */
    cairn__gbuf text, pend;
    cairn__gbuf vis; /* per byte of pend: 1 text, 0 the text of a control token (matched, never
                        shown) */
    cairn__gbuf out; /* scratch: the shown bytes of a release */
    int32_t *hist;   /* prompt then generated tokens */
    size_t n_hist, cap_hist, n_prompt;
    int live; /* 0 while replaying a checkpoint: no callbacks */
} cairn__genseq;

/* Starts g over the prompt (copied; room for n_more tokens reserved). o and tok are borrowed
 * until cairn__genseq_free. live starts 0: set it to 1 where the callbacks should run. Returns 0
 * or CAIRN_ENOMEM (freeing g is harmless either way). */
int cairn__genseq_init(cairn__genseq *g, const cairn__tok *tok, int32_t eos_extra,
                       const cairn__gen_opts *o, const int32_t *prompt, size_t n_prompt,
                       size_t n_more);
/* Takes one generated token into the history and the text (stop strings, hold-back, the
 * streaming callback when live): 0 to go on, a CAIRN__FINISH_* to end (EOS, STOP, CANCEL), or
 * CAIRN_ENOMEM. */
int cairn__genseq_accept(cairn__genseq *g, int32_t tok);
/* The engine's rule for each new token: cairn__genseq_accept, then the checkpoint callback
 * (every progress_every tokens, with smp's state after drawing tok), then max_tokens and the
 * context (n_ctx positions). 0: run tok at position n_hist - 1 for the next one; a
 * CAIRN__FINISH_*; or CAIRN_ENOMEM. */
int cairn__genseq_take(cairn__genseq *g, const cairn__sampler *smp, int32_t tok, int n_ctx);
/* Ends the generation with finish fin: releases held-back bytes (unless a stop string matched)
 * and fills r's finish, n_prompt, tokens, text (moved out of g) and state (smp's), leaving r's
 * other fields alone. Returns 0 or CAIRN_ENOMEM (r's tokens and text then unset). */
int cairn__genseq_end(cairn__genseq *g, int fin, const cairn__sampler *smp, cairn__gen_result *r);
void cairn__genseq_free(cairn__genseq *g); /* NULL is a no-op */

#ifdef __cplusplus
}
#endif

#endif
