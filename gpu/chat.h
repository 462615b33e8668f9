/* gpu/chat.h - chat messages -> prompt text or prompt tokens (internal to gpu/).
 *
 * Trust boundary: a format's own markers (e.g. "<|im_start|>") are the only text that may become
 * special (control) tokens. Message contents are data: a content that spells "<|im_end|>" is
 * tokenized as those characters, never as the control token, so task input cannot close its
 * turn and open a forged system turn. cairn__chat_encode enforces this by tokenizing the markers
 * and the text between them separately; a prompt must therefore be tokenized through it, not by
 * handing cairn__chat_render's string to cairn__tok_encode with parse_special (the string no
 * longer records which bytes were markers).
 */
#ifndef CAIRN_GPU_CHAT_H
#define CAIRN_GPU_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/gguf.h"
#include "gpu/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *role;    /* "system", "user", "assistant", ... (NUL-terminated, required) */
    const char *content; /* NUL-terminated; NULL means empty */
} cairn__chat_msg;

enum cairn__chat_format {
    CAIRN__CHAT_RAW = 0,    /* the contents joined by "\n", no roles: a plain prompt */
    CAIRN__CHAT_CHATML = 1, /* <|im_start|>role\ncontent<|im_end|>\n ... <|im_start|>assistant\n */
    CAIRN__CHAT_LLAMA3 =
        2, /* <|begin_of_text|><|start_header_id|>role<|end_header_id|>\n\n
              content<|eot_id|> ... <|start_header_id|>assistant<|end_header_id|>\n\n */
    /* gemma, gemma2, gemma3: <start_of_turn>user\ncontent<end_of_turn>\n ... <start_of_turn>model\n
     * (contents trimmed; "assistant" is "model"; a system message opens the next user turn,
     * then a blank line: gemma has no system turn) */
    CAIRN__CHAT_GEMMA = 3,
    /* phi-3: <|system|>\ncontent<|end|>\n<|user|>\ncontent<|end|>\n ... <|assistant|>\n (roles:
     * system, user, assistant only) */
    CAIRN__CHAT_PHI3 = 4,
    /* Mistral v1 (llama.cpp's mistral-v1): " [INST] system\n\nuser [/INST] answer</s> [INST] ...";
     * the user turn's [/INST] asks for the answer */
    CAIRN__CHAT_MISTRAL = 5,
};

/* Flags for cairn__chat_encode. */
enum {
    /* Let message contents and roles spell special tokens too (parse_special on the text between
     * markers). Only for text the operator wrote and trusts, e.g. `cairn generate
     * --parse-special`; never for anything that came from a task's input. */
    CAIRN__CHAT_CONTENT_SPECIAL = 1,
};

/* "raw", "chatml", "llama3", "gemma", "phi3" or "mistral" -> *fmt. 0 or CAIRN_EINVAL (unknown
 * name; *fmt untouched). */
int cairn__chat_format_parse(const char *name, int *fmt);
/* The name of a format ("raw" for anything unknown). */
const char *cairn__chat_format_name(int fmt);
/* The format a model's tokenizer.chat_template (a Jinja template) looks like: CHATML if it uses
 * <|im_start|>, LLAMA3 <|start_header_id|>, GEMMA <start_of_turn>, PHI3 <|assistant|> and
 * <|end|>, MISTRAL [INST]; else RAW (also when the key is absent). */
int cairn__chat_format_detect(const cairn__gguf *g);
/* The markers a vocabulary must hold as special tokens for fmt to mean anything to its model
 * (NULL-ended; empty for RAW and MISTRAL, whose [INST] works as plain text too). Static. */
const char *const *cairn__chat_markers(int fmt);
/* Whether the tokenizer should add BOS/EOS (add_special) to a prompt of this format: 0 for
 * LLAMA3, whose text already starts with <|begin_of_text|>. cairn__chat_encode applies it. */
int cairn__chat_add_special(int fmt);

/* Renders n messages (n may be 0) into a malloc'd NUL-terminated string (*out, caller frees;
 * *len excludes the NUL; len may be NULL), for display and logs. add_assistant: end with the
 * header that asks the model for the assistant's turn (ignored for RAW). 0, CAIRN_EINVAL
 * (unknown format, NULL role or out) or CAIRN_ENOMEM. */
int cairn__chat_render(int fmt, const cairn__chat_msg *msgs, size_t n, int add_assistant,
                       char **out, size_t *len);

/* Tokenizes the prompt cairn__chat_render would produce, with t. Each marker of the format
 * becomes its special token when t's vocabulary has it as one (else it is ordinary text, as
 * parse_special would have left it); the text between markers (roles, "\n", contents) is
 * tokenized with parse_special = 0 unless flags has CAIRN__CHAT_CONTENT_SPECIAL. BOS/EOS are
 * added as cairn__chat_add_special(fmt) says. For content free of special-token text the ids
 * equal those of tokenizing the rendered string with parse_special = 1. *ids is malloc'd
 * (non-NULL even when *n_ids is 0; caller frees). 0, CAIRN_EINVAL (NULL t, ids or n_ids,
 * unknown format, NULL role) or CAIRN_ENOMEM; on error *ids is NULL. */
int cairn__chat_encode(const cairn__tok *t, int fmt, const cairn__chat_msg *msgs, size_t n,
                       int add_assistant, unsigned flags, int32_t **ids, size_t *n_ids);

/* Whether s contains the text of a special token of format fmt (a content that would break out
 * of its message if the rendered prompt were tokenized with parse_special). Diagnostic only:
 * cairn__chat_encode needs no such check. */
int cairn__chat_has_special(int fmt, const char *s);

#ifdef __cplusplus
}
#endif

#endif
