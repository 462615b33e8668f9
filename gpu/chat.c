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

static void put_n(struct buf *b, const char *s, size_t l)
{
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

/* The formats: a name, the markers that must be special tokens of a vocabulary for the format
 * to mean anything to its model (cairn__chat_markers), every special-token text a content could
 * spell (cairn__chat_has_special), and what in a model's tokenizer.chat_template gives it away
 * (cairn__chat_format_detect, tried in this order). */
static const struct format {
    const char *name;
    const char *const *markers, *const *specials;
    const char *sniff, *sniff2;
} formats[] = {
    [CAIRN__CHAT_RAW] = {"raw", NULL, NULL, NULL, NULL},
    [CAIRN__CHAT_CHATML] = {"chatml", (const char *const[]){"<|im_start|>", "<|im_end|>", NULL},
                            (const char *const[]){"<|im_start|>", "<|im_end|>", "<|endoftext|>",
                                                  NULL},
                            "<|im_start|>", NULL},
    [CAIRN__CHAT_LLAMA3] = {"llama3",
                            (const char *const[]){"<|begin_of_text|>", "<|start_header_id|>",
                                                  "<|end_header_id|>", "<|eot_id|>", NULL},
                            (const char *const[]){"<|begin_of_text|>", "<|start_header_id|>",
                                                  "<|end_header_id|>", "<|eot_id|>",
                                                  "<|end_of_text|>", "<|eom_id|>", NULL},
                            "<|start_header_id|>", NULL},
    [CAIRN__CHAT_GEMMA] = {"gemma", (const char *const[]){"<start_of_turn>", "<end_of_turn>", NULL},
                           (const char *const[]){"<start_of_turn>", "<end_of_turn>", "<bos>",
                                                 "<eos>", NULL},
                           "<start_of_turn>", NULL},
    [CAIRN__CHAT_PHI3] = {"phi3",
                          (const char *const[]){"<|user|>", "<|assistant|>", "<|end|>", NULL},
                          (const char *const[]){"<|system|>", "<|user|>", "<|assistant|>",
                                                "<|end|>", "<|endoftext|>", NULL},
                          "<|assistant|>", "<|end|>"},
    /* [INST] is plain text in Mistral's first vocabularies and a control token in later ones:
     * both work, so the format requires no marker */
    [CAIRN__CHAT_MISTRAL] = {"mistral", NULL,
                             (const char *const[]){"[INST]", "[/INST]", "</s>", NULL}, "[INST]",
                             NULL},
};
#define N_FORMATS (sizeof formats / sizeof *formats)

int cairn__chat_format_parse(const char *name, int *fmt)
{
    if (!name || !fmt)
        return CAIRN_EINVAL;
    for (size_t i = 0; i < N_FORMATS; i++)
        if (strcmp(name, formats[i].name) == 0) {
            *fmt = (int)i;
            return 0;
        }
    return CAIRN_EINVAL;
}

const char *cairn__chat_format_name(int fmt)
{
    return fmt > 0 && (size_t)fmt < N_FORMATS ? formats[fmt].name : "raw";
}

const char *const *cairn__chat_markers(int fmt)
{
    static const char *const none[] = {NULL};
    return fmt > 0 && (size_t)fmt < N_FORMATS && formats[fmt].markers ? formats[fmt].markers : none;
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
    for (size_t i = 1; i < N_FORMATS; i++)
        if (contains(s, n, formats[i].sniff) &&
            (!formats[i].sniff2 || contains(s, n, formats[i].sniff2)))
            return (int)i;
    return CAIRN__CHAT_RAW;
}

int cairn__chat_add_special(int fmt) { return fmt != CAIRN__CHAT_LLAMA3; }

/* One walk over a format, shared by rendering and encoding: it hands out the prompt as pieces,
 * each either a marker of the format (may become a special token) or ordinary text (roles,
 * separators, contents). The receivers keep a sticky error, so the walk itself cannot fail. */
typedef void (*emit_fn)(void *arg, const char *s, size_t n, int marker);

static void emit_s(emit_fn emit, void *arg, const char *s, int marker)
{
    emit(arg, s ? s : "", s ? strlen(s) : 0, marker);
}

/* s without its leading and trailing white space, as gemma's template trims each message */
static void emit_trim(emit_fn emit, void *arg, const char *s)
{
    const char *e;
    if (!s)
        return;
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
        e--;
    emit(arg, s, (size_t)(e - s), 0);
}

/* gemma: no system turn; its text opens the next user turn, then a blank line (llama.cpp's and
 * the models' templates); "assistant" is "model" */
static void walk_gemma(const cairn__chat_msg *msgs, size_t n, int add_assistant, emit_fn emit,
                       void *arg)
{
    const char *sys = NULL;
    for (size_t i = 0; i < n; i++) {
        const char *role = msgs[i].role;
        if (strcmp(role, "system") == 0) {
            sys = msgs[i].content;
            continue;
        }
        int model = strcmp(role, "assistant") == 0 || strcmp(role, "model") == 0;
        emit_s(emit, arg, "<start_of_turn>", 1);
        emit_s(emit, arg, model ? "model" : role, 0);
        emit_s(emit, arg, "\n", 0);
        if (sys && !model) {
            emit_trim(emit, arg, sys);
            emit_s(emit, arg, "\n\n", 0);
            sys = NULL;
        }
        emit_trim(emit, arg, msgs[i].content);
        emit_s(emit, arg, "<end_of_turn>", 1);
        emit_s(emit, arg, "\n", 0);
    }
    if (add_assistant) {
        emit_s(emit, arg, "<start_of_turn>", 1);
        emit_s(emit, arg, "model\n", 0);
    }
}

/* Mistral's v1 format (llama.cpp's mistral-v1): " [INST] system\n\nuser [/INST] answer</s>" */
static void walk_mistral(const cairn__chat_msg *msgs, size_t n, emit_fn emit, void *arg)
{
    int in_turn = 0;
    for (size_t i = 0; i < n; i++) {
        const char *role = msgs[i].role;
        if (!in_turn) {
            emit_s(emit, arg, " ", 0);
            emit_s(emit, arg, "[INST]", 1);
            emit_s(emit, arg, " ", 0);
            in_turn = 1;
        }
        if (strcmp(role, "system") == 0) {
            emit_s(emit, arg, msgs[i].content, 0);
            emit_s(emit, arg, "\n\n", 0);
        } else if (strcmp(role, "assistant") == 0) {
            emit_s(emit, arg, " ", 0);
            emit_s(emit, arg, msgs[i].content, 0);
            emit_s(emit, arg, "</s>", 1);
            in_turn = 0;
        } else {
            emit_s(emit, arg, msgs[i].content, 0);
            emit_s(emit, arg, " ", 0);
            emit_s(emit, arg, "[/INST]", 1);
        }
    }
}

static void walk(int fmt, const cairn__chat_msg *msgs, size_t n, int add_assistant, emit_fn emit,
                 void *arg)
{
    size_t i;
    if (fmt == CAIRN__CHAT_GEMMA) {
        walk_gemma(msgs, n, add_assistant, emit, arg);
        return;
    }
    if (fmt == CAIRN__CHAT_MISTRAL) { /* the user turn's [/INST] is what asks for the answer */
        walk_mistral(msgs, n, emit, arg);
        return;
    }
    if (fmt == CAIRN__CHAT_LLAMA3)
        emit_s(emit, arg, "<|begin_of_text|>", 1);
    for (i = 0; i < n; i++) {
        switch (fmt) {
        case CAIRN__CHAT_CHATML:
            emit_s(emit, arg, "<|im_start|>", 1);
            emit_s(emit, arg, msgs[i].role, 0);
            emit_s(emit, arg, "\n", 0);
            emit_s(emit, arg, msgs[i].content, 0);
            emit_s(emit, arg, "<|im_end|>", 1);
            emit_s(emit, arg, "\n", 0);
            break;
        case CAIRN__CHAT_LLAMA3:
            emit_s(emit, arg, "<|start_header_id|>", 1);
            emit_s(emit, arg, msgs[i].role, 0);
            emit_s(emit, arg, "<|end_header_id|>", 1);
            emit_s(emit, arg, "\n\n", 0);
            emit_s(emit, arg, msgs[i].content, 0);
            emit_s(emit, arg, "<|eot_id|>", 1);
            break;
        case CAIRN__CHAT_PHI3: /* the role is the marker: check_args allows phi-3's three */
            emit_s(emit, arg,
                   !strcmp(msgs[i].role, "system") ? "<|system|>"
                   : !strcmp(msgs[i].role, "user") ? "<|user|>"
                                                   : "<|assistant|>",
                   1);
            emit_s(emit, arg, "\n", 0);
            emit_s(emit, arg, msgs[i].content, 0);
            emit_s(emit, arg, "<|end|>", 1);
            emit_s(emit, arg, "\n", 0);
            break;
        default:
            if (i)
                emit_s(emit, arg, "\n", 0);
            emit_s(emit, arg, msgs[i].content, 0);
            break;
        }
    }
    if (add_assistant && fmt == CAIRN__CHAT_CHATML) {
        emit_s(emit, arg, "<|im_start|>", 1);
        emit_s(emit, arg, "assistant\n", 0);
    }
    if (add_assistant && fmt == CAIRN__CHAT_LLAMA3) {
        emit_s(emit, arg, "<|start_header_id|>", 1);
        emit_s(emit, arg, "assistant", 0);
        emit_s(emit, arg, "<|end_header_id|>", 1);
        emit_s(emit, arg, "\n\n", 0);
    }
    if (add_assistant && fmt == CAIRN__CHAT_PHI3) {
        emit_s(emit, arg, "<|assistant|>", 1);
        emit_s(emit, arg, "\n", 0);
    }
}

static int check_args(int fmt, const cairn__chat_msg *msgs, size_t n)
{
    size_t i;
    if ((n && !msgs) || fmt < CAIRN__CHAT_RAW || (size_t)fmt >= N_FORMATS)
        return CAIRN_EINVAL;
    for (i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!r || (fmt == CAIRN__CHAT_PHI3 && strcmp(r, "system") && strcmp(r, "user") &&
                   strcmp(r, "assistant")))
            return CAIRN_EINVAL;
    }
    return 0;
}

static void render_piece(void *arg, const char *s, size_t n, int marker)
{
    (void)marker;
    put_n(arg, s, n);
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

static void encode_piece(void *arg, const char *s, size_t n, int marker)
{
    struct enc *e = arg;
    if (e->err)
        return;
    if (marker) { /* markers are the format's own literals: NUL-terminated */
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
    put_n(&e->text, s, n);
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
    if (!s || fmt <= CAIRN__CHAT_RAW || (size_t)fmt >= N_FORMATS)
        return 0;
    for (const char *const *k = formats[fmt].specials; *k; k++)
        if (strstr(s, *k))
            return 1;
    return 0;
}
