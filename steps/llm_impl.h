/* steps/llm_impl.h - what the generate step's files share (internal to steps/): the parsed
 * configuration and the remote backend's entry points. llm.c reads the section, picks the
 * backend and runs the in-process engine; llm_openai.c calls an OpenAI-compatible server.
 * Nothing else includes this.
 */
#ifndef CAIRN_STEPS_LLM_IMPL_H
#define CAIRN_STEPS_LLM_IMPL_H

#include "common/config.h"
#include "gpu/engine.h"
#include "steps/llm.h"

/* the index of "openai" in llm.c's backends[] */
#define CAIRN__LLM_OPENAI 3
/* "endpoint" */
enum { CAIRN__LLM_COMPLETIONS = 0, CAIRN__LLM_CHAT = 1 };

struct cairn__llm_cfg {
    char *model, *prompt, *system, *context_source;
    int backend, cache_type; /* indexes into backends[] and cache_types[] */
    int chat, threads, ctx, max_tokens, progress_every, has_seed;
    cairn__sampler_params sp;
    char **stop;
    size_t n_stop;
    char digest[65];
    uint32_t version;
    /* "backend": "openai" */
    char *url, *url_safe; /* the base URL, and as messages show it (no query, no user) */
    int endpoint;         /* CAIRN__LLM_COMPLETIONS or CAIRN__LLM_CHAT */
    long request_timeout_s, connect_timeout_s;
    char *auth; /* "Authorization: Bearer <key>" from api_key_env/file; never in messages */
};

/* The rows only the openai backend reads (llm_openai.c), and what it derives after them: the
 * URL checked with curl's parser, the API key read (api_key_env or api_key_file, as notify's
 * secrets), the endpoint's default from "chat". 0 or an error through cairn__cfg_fail. */
extern const cairn__cfg_field cairn__llm_openai_fields[];
int cairn__llm_openai_setup(const cairn__cfg *r, cairn__llm_cfg *c);
/* Frees and wipes what setup made. */
void cairn__llm_openai_release(cairn__llm_cfg *c);

/* One invocation of the step against the server: `user` is the rendered user message, `seed`
 * the seed to send. Sets the output or the error itself. */
cairn_step_result cairn__llm_openai_step(cairn_ctx *ctx, const cairn__llm_cfg *c, const char *user,
                                         uint64_t seed);

#endif
