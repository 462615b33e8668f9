/* gpu/chat.h - rendering chat messages into a prompt string (internal to gpu/).
 *
 * A rendered prompt contains the format's special-token text (e.g. "<|im_start|>") and is meant to
 * be tokenized with parse_special = 1. Message contents are pasted in as they are: a content that
 * itself spells a special token will be read as that token, so untrusted content should be
 * checked (cairn__chat_has_special) or the raw format used.
 */
#ifndef CAIRN_GPU_CHAT_H
#define CAIRN_GPU_CHAT_H

#include <stddef.h>

#include "gpu/gguf.h"

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
};

/* "raw", "chatml" or "llama3" -> *fmt. 0 or CAIRN_EINVAL (unknown name; *fmt untouched). */
int cairn__chat_format_parse(const char *name, int *fmt);
/* The name of a format ("raw" for anything unknown). */
const char *cairn__chat_format_name(int fmt);
/* The format a model's tokenizer.chat_template (a Jinja template) looks like: CHATML if it uses
 * <|im_start|>, LLAMA3 if it uses <|start_header_id|>, else RAW (also when the key is absent). */
int cairn__chat_format_detect(const cairn__gguf *g);
/* Whether the caller should let the tokenizer add BOS/EOS (add_special) when tokenizing a prompt
 * of this format: 0 for LLAMA3, whose text already starts with <|begin_of_text|>. */
int cairn__chat_add_special(int fmt);

/* Renders n messages (n may be 0) into a malloc'd NUL-terminated string (*out, caller frees;
 * *len excludes the NUL; len may be NULL). add_assistant: end with the header that asks the model
 * for the assistant's turn (ignored for RAW). 0, CAIRN_EINVAL (unknown format, NULL role or
 * out) or CAIRN_ENOMEM. */
int cairn__chat_render(int fmt, const cairn__chat_msg *msgs, size_t n, int add_assistant,
                       char **out, size_t *len);

/* Whether s contains the text of a special token of format fmt (a content that would break out
 * of its message when the prompt is tokenized with parse_special). */
int cairn__chat_has_special(int fmt, const char *s);

#ifdef __cplusplus
}
#endif

#endif
