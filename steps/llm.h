/* steps/llm.h - the `generate` built-in step (compute, expensive): calls the gpu/ engine. */
#ifndef CAIRN_STEPS_LLM_H
#define CAIRN_STEPS_LLM_H

#include <jansson.h>
#include <stddef.h>

#include "cairn.h"
#include "gpu/tokenizer.h"

typedef struct cairn__llm_cfg cairn__llm_cfg;

/* Reads the "generate" section of the configuration. Its settings, with their types, ranges
 * and defaults, are the table `fields` in llm.c (read by common/config.h, which refuses any
 * other key); "model" and "prompt" are required, "seed" defaults to one derived from the task
 * ID. A relative model path is taken relative to `base_dir` (the config file's folder) if not
 * NULL. Errors: CAIRN_EJSON with err naming the field ("generate.temperature: must be a number
 * from 0 to 100"), CAIRN_ENOMEM ("...: out of memory"). */
int cairn__llm_cfg_parse(const json_t *cfg, const char *base_dir, cairn__llm_cfg **out, char *err,
                         size_t errlen);
void cairn__llm_cfg_free(cairn__llm_cfg *c);
/* What must be there before a task may reach this step, checked when `run` or `retry` starts
 * (cairn__pipeline_check), so that a task is not admitted only to die at its first attempt: the
 * model file, readable and not a directory (CAIRN_ENOENT), and for "backend": "cuda" a CUDA
 * device (CAIRN_ENODEVICE; asked in a child process, gpu/backend.h). The model's contents are
 * the step's to judge. err names the setting ("generate.model: /m/x.gguf: No such file or
 * directory", "generate.backend: \"cuda\" needs a CUDA device: ..."). */
int cairn__llm_cfg_check(const cairn__llm_cfg *c, char *err, size_t errlen);
/* A short text that changes whenever the output could (model path, prompt, options). */
const char *cairn__llm_cfg_digest(const cairn__llm_cfg *c);
/* The step version: the section without its tuning settings ("threads", "progress_every"), so a
 * change of those is no graph change (common/config.h, cairn__cfg_version). */
uint32_t cairn__llm_cfg_version(const cairn__llm_cfg *c);

/* The step (user = the cairn__llm_cfg). Renders the prompt from the task input and the
 * retrieval output, loads the model once per process, generates, and saves progress (tokens so
 * far + sampler state) every progress_every tokens, so a crash resumes from the saved tokens.
 * Output: {"text", "finish_reason", "prompt_tokens", "completion_tokens", "resumed_tokens",
 *          "generated_tokens", "model", "model_sha256", "sampler": {...}, "seed", "tokens_per_s"};
 * finish_reason is "eos" (the model ended), "stop" (a stop string), "length" (max_tokens),
 * "context" (the context filled first) or "cancel".
 */
cairn_step_result cairn__llm_step(cairn_ctx *ctx, void *cfg);
/* The prompt's token ids for the rendered user message `user` (the template with the task's
 * values filled in): wrapped in the configured chat format with the system message, if any.
 * Only the format's markers become special tokens; the system and user texts are tokenized as
 * plain text, so a task input that spells "<|im_end|>" stays those characters. *ids malloc'd.
 * 0, CAIRN_EINVAL or CAIRN_ENOMEM. The step uses it; exposed for tests. */
int cairn__llm_prompt_ids(const cairn__llm_cfg *c, const cairn__tok *tok, const char *user,
                          int32_t **ids, size_t *n);
/* The key of the saved progress (hex SHA-256 into out): the model file's SHA-256 (64 hex
 * characters), the backend's name, the KV cache type and the prompt's ids. Tokens drawn by
 * another model, by the GPU when the CPU resumes, or over a cache of halves would not continue
 * the same text, so progress saved under any other key is not resumed. 0 or CAIRN_ENOMEM. The
 * step uses it; exposed for tests. */
int cairn__llm_progress_key(const char *model_sha, const char *backend, const char *cache_type,
                            const int32_t *ids, size_t n_ids, char out[65]);
/* The step whose "docs" fill {{context}} ("retrieve" by default), and whether the prompt
 * template uses {{context}} at all (the pipeline checks both when it loads the config). */
const char *cairn__llm_cfg_context_source(const cairn__llm_cfg *c);
int cairn__llm_cfg_uses_context(const cairn__llm_cfg *c);

#endif
