/* gpu/batch.h - many generations at once over one engine: continuous batching over a paged KV
 * cache, batch-invariant.
 *
 * A batch holds sequences, each with its own prompt, options (sampler parameters and seed, stop
 * strings, callbacks: cairn__gen_opts), position, sampler state and KV blocks. cairn__batch_step
 * advances every active sequence by one token, or by one chunk of its prompt: the decode steps of
 * all of them go through the weights together (each matrix read once for the whole batch), and
 * sequences join (cairn__batch_add) and leave (finish, cairn__batch_remove) between steps.
 *
 * The contract is batch invariance: a sequence's tokens, text, finish reason, final sampler state
 * and the bits of its logits are what cairn__engine_generate_tokens gives it alone on the same
 * engine with host sampling, whichever sequences share its steps and whichever step it joined
 * at. So its checkpoints (on_progress) resume exactly with cairn__engine_resume, batched or not.
 * The backend makes each row's arithmetic independent of the others (gpu/backend.h,
 * cairn__backend_forward_paged); the batch feeds a prompt in the chunks the solo backend uses (its
 * n_batch tokens), samples on the host, and ends a sequence with the engine's own rules
 * (gpu/genseq.h).
 *
 * Memory: keys and values live in blocks of CAIRN__KV_BLOCK positions from one pool of n_blocks
 * (a setting), so memory follows the sequences' actual lengths. The pool's policy:
 *   - cairn__batch_add takes the blocks of the whole prompt at once, or refuses the sequence
 *     (CAIRN_ENOMEM, nothing kept) when that many are not free now: the caller may add it again
 *     after others have finished or been removed;
 *   - a decoding sequence that needs a new block when none is free waits (it is skipped, its
 *     state untouched, and runs on a later step once a block is free: its results are the same);
 *   - a step in which every active sequence waits returns CAIRN_ENOMEM and changes nothing: the
 *     caller removes a sequence (or some finish) and steps again. Never a crash.
 *   - a sequence's blocks go back to the pool as soon as it finishes or is removed.
 *
 * A backend without the paged ops (the CUDA backend today) still works: each sequence then runs
 * on a solo backend of its own (created at add with opts.backend, "cpu" or the engine backend's
 * kind), one after another, the pool counted the same way; correct and invariant, not faster.
 *
 * Threads: a batch is used from one thread at a time; callbacks run inside cairn__batch_step.
 */
#ifndef CAIRN_GPU_BATCH_H
#define CAIRN_GPU_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/backend.h"
#include "gpu/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cairn__batch cairn__batch;

typedef struct {
    int max_seqs; /* sequences held at once, finished ones included until removed (0: 64, capped
                     at the backend's n_batch, which bounds one step's decode rows) */
    int n_blocks; /* KV pool blocks of CAIRN__KV_BLOCK positions (0: enough for 4 full contexts) */
    int prompt_chunks; /* prompt chunks run per step, beside the decode steps (0: 1) */
    /* for the solo backends of a backend without paged ops: their n_ctx (0: the engine
     * backend's), n_threads, n_batch (0: the engine backend's) and cache type */
    cairn__backend_opts solo;
} cairn__batch_opts;

/* A batch over e's model, tokenizer, extra eos id and backend (borrowed: e must outlive the
 * batch; the engine may still generate on its own between steps, its positional cache is apart
 * from the pool). o may be NULL (defaults). Allocates the pool (cairn__backend_kv_pool). Returns
 * 0 and *out, CAIRN_EINVAL (a bad option: max_seqs beyond n_batch, negative sizes) or
 * CAIRN_ENOMEM, with a message in err. */
int cairn__batch_new(cairn__engine *e, const cairn__batch_opts *o, cairn__batch **out, char *err,
                     size_t errlen);
/* Frees every sequence (no callbacks) and the pool. NULL is a no-op. */
void cairn__batch_free(cairn__batch *b);

/* Adds a sequence that will generate from prompt[0..n_prompt) with options o (NULL: defaults;
 * host_sampling is implied). The prompt, o and its stop strings are copied; o's user pointer and
 * callbacks must stay valid while the sequence is active. Its first prompt chunk runs at the next
 * step. Returns 0 and *id (>= 0, never reused), or CAIRN_EINVAL (empty prompt, a token outside
 * the vocabulary, bad sampling parameters), CAIRN_ECONTEXT (the prompt does not fit the
 * context), CAIRN_EBUSY (max_seqs held; remove one), CAIRN_ENOMEM (not enough free blocks for the
 * prompt now, or memory; nothing kept: add it again later). */
int cairn__batch_add(cairn__batch *b, const int32_t *prompt, size_t n_prompt,
                     const cairn__gen_opts *o, int *id);
/* Adds a sequence that continues a generation from its checkpoint (cairn__engine_resume's
 * arguments: the generated tokens so far and the sampler state after the newest, from
 * on_progress or a result; o the original options). Its prompt runs in chunks, then each
 * generated token is replayed as one decode step without callbacks, and it goes on from there:
 * the rest is what the interrupted generation, batched or solo, would have produced. Returns as
 * cairn__batch_add, plus CAIRN_EFORMAT (a bad state). n_prev 0: cairn__batch_add. */
int cairn__batch_add_resume(cairn__batch *b, const int32_t *prompt, size_t n_prompt,
                            const int32_t *prev, size_t n_prev, const uint8_t *state,
                            size_t state_len, const cairn__gen_opts *o, int *id);
/* Runs one step: every active sequence advances by one decode step or one prompt chunk (at
 * most prompt_chunks of those), sampling, streaming and checkpointing as the engine would; those
 * that end become finished. Returns the number of sequences still active (0: nothing left to
 * do), CAIRN_ENOMEM when every active sequence waits for a block (nothing changed; see the pool's
 * policy above), or a backend error (the step may be retried). */
int cairn__batch_step(cairn__batch *b);

enum cairn__seq_state {
    CAIRN__SEQ_NONE = 0,    /* no such sequence (never added, or removed) */
    CAIRN__SEQ_PROMPT = 1,  /* its prompt is being run */
    CAIRN__SEQ_DECODE = 2,  /* generating */
    CAIRN__SEQ_WAITING = 3, /* generating, but skipped last step: no free block */
    CAIRN__SEQ_DONE = 4,    /* finished: its result is ready */
};
int cairn__batch_seq_state(const cairn__batch *b, int id);
/* A finished sequence's result, moved into *r (free with cairn__gen_result_free; its timing
 * fields are 0: steps are shared). Returns 0, CAIRN_ENOTFOUND (no such sequence), CAIRN_EBUSY
 * (not finished yet) or CAIRN_ESTATE (taken already). */
int cairn__batch_result(cairn__batch *b, int id, cairn__gen_result *r);
/* The logits (n_vocab floats, before the penalty) of the sequence's newest step: the last prompt
 * token's, then each decode step's. Valid until the next step or the sequence's removal; NULL
 * before its prompt has run, or for no such sequence. */
const float *cairn__batch_logits(const cairn__batch *b, int id);
/* Removes a sequence, active (cancelled, no callbacks, no result) or finished, and gives its
 * blocks back. Returns 0 or CAIRN_ENOTFOUND. */
int cairn__batch_remove(cairn__batch *b, int id);

int cairn__batch_n_active(const cairn__batch *b); /* prompt, decode or waiting */
int cairn__batch_n_blocks(const cairn__batch *b); /* the pool's size */
int cairn__batch_free_blocks(const cairn__batch *b);
/* Whether the backend runs the batch through its paged ops (1) or solo backends (0). */
int cairn__batch_paged(const cairn__batch *b);
const char *cairn__batch_errmsg(const cairn__batch *b);

#ifdef __cplusplus
}
#endif

#endif
