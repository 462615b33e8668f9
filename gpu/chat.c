/* gpu/chat.c - the built-in chat formats.
 *
 * A format is a handful of literal strings around each message, so rendering is string
 * concatenation into one growing buffer; no template engine. The model's own Jinja template
 * (tokenizer.chat_template) is only sniffed for marker tokens to pick a built-in format.
 *
 * Rendering and tokenizing share one walk that tags every piece as marker or text. Tokenizing
 * from the tags, not from the joined string, is what keeps a message's content from ever
 * becoming a control token: only a piece tagged marker is looked up as one.
 */
#include "gpu/chat.h"

#include <stdlib.h>
#include <string.h>

#include "cairn_errors.h"

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

/* One walk over a format, shared by rendering and encoding: it hands out the prompt as pieces,
 * each either a marker of the format (may become a special token) or ordinary text (roles,
 * separators, contents). The receivers keep a sticky error, so the walk itself cannot fail. */
typedef void (*emit_fn)(void *arg, const char *s, int marker);

static void walk(int fmt, const cairn__chat_msg *msgs, size_t n, int add_assistant, emit_fn emit,
                 void *arg)
{
    size_t i;
    if (fmt == CAIRN__CHAT_LLAMA3)
        emit(arg, "<|begin_of_text|>", 1);
    for (i = 0; i < n; i++) {
        switch (fmt) {
        case CAIRN__CHAT_CHATML:
            emit(arg, "<|im_start|>", 1);
            emit(arg, msgs[i].role, 0);
            emit(arg, "\n", 0);
            emit(arg, msgs[i].content, 0);
            emit(arg, "<|im_end|>", 1);
            emit(arg, "\n", 0);
            break;
        case CAIRN__CHAT_LLAMA3:
            emit(arg, "<|start_header_id|>", 1);
            emit(arg, msgs[i].role, 0);
            emit(arg, "<|end_header_id|>", 1);
            emit(arg, "\n\n", 0);
            emit(arg, msgs[i].content, 0);
            emit(arg, "<|eot_id|>", 1);
            break;
        default:
            if (i)
                emit(arg, "\n", 0);
            emit(arg, msgs[i].content, 0);
            break;
        }
    }
    if (add_assistant && fmt == CAIRN__CHAT_CHATML) {
        emit(arg, "<|im_start|>", 1);
        emit(arg, "assistant\n", 0);
    }
    if (add_assistant && fmt == CAIRN__CHAT_LLAMA3) {
        emit(arg, "<|start_header_id|>", 1);
        emit(arg, "assistant", 0);
        emit(arg, "<|end_header_id|>", 1);
        emit(arg, "\n\n", 0);
    }
}

static int check_args(int fmt, const cairn__chat_msg *msgs, size_t n)
{
    size_t i;
    if ((n && !msgs) || fmt < CAIRN__CHAT_RAW || fmt > CAIRN__CHAT_LLAMA3)
        return CAIRN_EINVAL;
    for (i = 0; i < n; i++)
        if (!msgs[i].role)
            return CAIRN_EINVAL;
    return 0;
}

static void render_piece(void *arg, const char *s, int marker)
{
    (void)marker;
    put(arg, s);
}

int cairn__chat_render(int fmt, const cairn__chat_msg *msgs, size_t n, int add_assistant,
                       char **out, size_t *len)
{
    struct buf b = {NULL, 0, 0, 0};
    if (out)
        *out = NULL;
    if (len)
        *len = 0;
    if (!out || check_args(fmt, msgs, n))
        return CAIRN_EINVAL;
    walk(fmt, msgs, n, add_assistant, render_piece, &b);
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

/* Encoding state: the ordinary text since the last special token is gathered in `text` and
 * tokenized as one stretch when a special token (or the end) closes it, which is exactly how
 * cairn__tok_encode with parse_special cuts a string into stretches, so the ids come out the
 * same for benign content (SentencePiece's space prefix included). */
struct enc {
    const cairn__tok *t;
    int parse_text; /* parse_special for the text stretches */
    struct buf text;
    int32_t *v;
    size_t n, cap;
    int err;
};

static void push_ids(struct enc *e, const int32_t *ids, size_t k)
{
    if (e->err)
        return;
    if (e->n + k > e->cap) {
        size_t cap = (e->n + k) * 2 + 16;
        int32_t *v = realloc(e->v, cap * sizeof *v);
        if (!v) {
            e->err = CAIRN_ENOMEM;
            return;
        }
        e->v = v;
        e->cap = cap;
    }
    memcpy(e->v + e->n, ids, k * sizeof *ids);
    e->n += k;
}

static void flush_text(struct enc *e)
{
    int32_t *ids;
    size_t k;
    if (!e->err)
        e->err = e->text.err;
    if (e->err || !e->text.n)
        return;
    e->err = cairn__tok_encode(e->t, e->text.p, e->text.n, 0, e->parse_text, &ids, &k);
    if (e->err)
        return;
    push_ids(e, ids, k);
    free(ids);
    e->text.n = 0;
}

static void encode_piece(void *arg, const char *s, int marker)
{
    struct enc *e = arg;
    if (e->err)
        return;
    if (marker) {
        /* the marker alone, parsed as the tokenizer would: one special token, or (a vocabulary
         * without it) ordinary text that joins the stretch around it */
        int32_t *ids;
        size_t k;
        int ty;
        if ((e->err = cairn__tok_encode(e->t, s, strlen(s), 0, 1, &ids, &k)))
            return;
        ty = k == 1 ? cairn__tok_type(e->t, ids[0]) : -1;
        if (ty == CAIRN__TOK_CONTROL || ty == CAIRN__TOK_USER_DEFINED || ty == CAIRN__TOK_UNKNOWN) {
            flush_text(e);
            push_ids(e, ids, 1);
            free(ids);
            return;
        }
        free(ids);
    }
    put(&e->text, s);
}

int cairn__chat_encode(const cairn__tok *t, int fmt, const cairn__chat_msg *msgs, size_t n,
                       int add_assistant, unsigned flags, int32_t **ids, size_t *n_ids)
{
    struct enc e = {t, (flags & CAIRN__CHAT_CONTENT_SPECIAL) != 0, {NULL, 0, 0, 0}, NULL, 0, 0, 0};
    int add = cairn__chat_add_special(fmt);
    int32_t bos, eos;
    if (ids)
        *ids = NULL;
    if (n_ids)
        *n_ids = 0;
    if (!t || !ids || !n_ids || check_args(fmt, msgs, n))
        return CAIRN_EINVAL;
    bos = cairn__tok_bos(t);
    eos = cairn__tok_eos(t);
    if (add && cairn__tok_add_bos(t) && bos >= 0)
        push_ids(&e, &bos, 1);
    walk(fmt, msgs, n, add_assistant, encode_piece, &e);
    flush_text(&e);
    if (add && cairn__tok_add_eos(t) && eos >= 0)
        push_ids(&e, &eos, 1);
    if (!e.err && !e.v && !(e.v = malloc(sizeof *e.v)))
        e.err = CAIRN_ENOMEM;
    free(e.text.p);
    if (e.err) {
        free(e.v);
        return e.err;
    }
    *ids = e.v;
    *n_ids = e.n;
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
