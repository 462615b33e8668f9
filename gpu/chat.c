/* gpu/chat.c - the built-in chat formats.
 *
 * A format is a handful of literal strings around each message, so rendering is string
 * concatenation into one growing buffer; no template engine. The model's own Jinja template
 * (tokenizer.chat_template) is only sniffed for marker tokens to pick a built-in format.
 */
#include "gpu/chat.h"

#include <stdlib.h>
#include <string.h>

#include "cairn.h"

struct buf {
    char *p;
    size_t n, cap;
    int err;
};

static void put(struct buf *b, const char *s)
{
    size_t l = s ? strlen(s) : 0;
    if (b->err || !l)
        return;
    if (b->n + l + 1 > b->cap) {
        size_t cap = (b->n + l + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->err = CAIRN_ENOMEM;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, l);
    b->n += l;
}

int cairn__chat_format_parse(const char *name, int *fmt)
{
    if (!name || !fmt)
        return CAIRN_EINVAL;
    if (strcmp(name, "raw") == 0)
        *fmt = CAIRN__CHAT_RAW;
    else if (strcmp(name, "chatml") == 0)
        *fmt = CAIRN__CHAT_CHATML;
    else if (strcmp(name, "llama3") == 0)
        *fmt = CAIRN__CHAT_LLAMA3;
    else
        return CAIRN_EINVAL;
    return 0;
}

const char *cairn__chat_format_name(int fmt)
{
    return fmt == CAIRN__CHAT_CHATML ? "chatml" : fmt == CAIRN__CHAT_LLAMA3 ? "llama3" : "raw";
}

static int contains(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle), i;
    for (i = 0; i + k <= n; i++)
        if (memcmp(s + i, needle, k) == 0)
            return 1;
    return 0;
}

int cairn__chat_format_detect(const cairn__gguf *g)
{
    const char *s;
    size_t n;
    if (!g || cairn__gguf_get_str(g, "tokenizer.chat_template", &s, &n) != 0)
        return CAIRN__CHAT_RAW;
    if (contains(s, n, "<|im_start|>"))
        return CAIRN__CHAT_CHATML;
    if (contains(s, n, "<|start_header_id|>"))
        return CAIRN__CHAT_LLAMA3;
    return CAIRN__CHAT_RAW;
}

int cairn__chat_add_special(int fmt) { return fmt != CAIRN__CHAT_LLAMA3; }

int cairn__chat_render(int fmt, const cairn__chat_msg *msgs, size_t n, int add_assistant,
                       char **out, size_t *len)
{
    struct buf b = {NULL, 0, 0, 0};
    size_t i;
    if (out)
        *out = NULL;
    if (len)
        *len = 0;
    if (!out || (n && !msgs) || fmt < CAIRN__CHAT_RAW || fmt > CAIRN__CHAT_LLAMA3)
        return CAIRN_EINVAL;
    for (i = 0; i < n; i++)
        if (!msgs[i].role)
            return CAIRN_EINVAL;
    if (fmt == CAIRN__CHAT_LLAMA3)
        put(&b, "<|begin_of_text|>");
    for (i = 0; i < n; i++) {
        switch (fmt) {
        case CAIRN__CHAT_CHATML:
            put(&b, "<|im_start|>");
            put(&b, msgs[i].role);
            put(&b, "\n");
            put(&b, msgs[i].content);
            put(&b, "<|im_end|>\n");
            break;
        case CAIRN__CHAT_LLAMA3:
            put(&b, "<|start_header_id|>");
            put(&b, msgs[i].role);
            put(&b, "<|end_header_id|>\n\n");
            put(&b, msgs[i].content);
            put(&b, "<|eot_id|>");
            break;
        default:
            if (i)
                put(&b, "\n");
            put(&b, msgs[i].content);
            break;
        }
    }
    if (add_assistant && fmt == CAIRN__CHAT_CHATML)
        put(&b, "<|im_start|>assistant\n");
    if (add_assistant && fmt == CAIRN__CHAT_LLAMA3)
        put(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    if (!b.err && !b.p) /* nothing written: still hand back an empty string */
        b.p = malloc(1);
    if (b.err || !b.p) {
        free(b.p);
        return CAIRN_ENOMEM;
    }
    b.p[b.n] = 0;
    *out = b.p;
    if (len)
        *len = b.n;
    return 0;
}

int cairn__chat_has_special(int fmt, const char *s)
{
    static const char *const chatml[] = {"<|im_start|>", "<|im_end|>", "<|endoftext|>"};
    static const char *const llama3[] = {"<|begin_of_text|>", "<|start_header_id|>",
                                         "<|end_header_id|>", "<|eot_id|>",
                                         "<|end_of_text|>",   "<|eom_id|>"};
    const char *const *list = fmt == CAIRN__CHAT_CHATML ? chatml : llama3;
    size_t k, cnt = fmt == CAIRN__CHAT_CHATML ? 3 : 6;
    if (!s || fmt == CAIRN__CHAT_RAW)
        return 0;
    for (k = 0; k < cnt; k++)
        if (strstr(s, list[k]))
            return 1;
    return 0;
}
