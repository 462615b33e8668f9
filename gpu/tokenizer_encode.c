/* gpu/tokenizer_encode.c - text to token ids: the merge algorithms and the pre-tokenizers.
 *
 * Both families are "merge adjacent symbols until nothing merges" over a doubly linked list of
 * symbols, driven by a binary heap of candidate pairs, so a long word (or an SPM prompt, which
 * has no pre-tokenization at all) costs O(n log n) rather than a rescan per merge:
 *   - llama (SPM): symbols start as UTF-8 characters; a pair is a candidate if its concatenated
 *     text is a vocabulary token, and the pair whose token has the highest score merges first
 *     (ties: leftmost). Symbols left that are not tokens fall back to <0xXX> byte tokens.
 *   - gpt2: the text is first cut into words by a hand-written matcher equivalent to the
 *     pre-tokenizer regex; each word's bytes are mapped to GPT-2's printable code points and
 *     pairs merge in merges-list order (lowest rank first, ties: leftmost).
 * A heap entry remembers what it was built from and is skipped when popped stale (a side merged
 * away or changed), instead of being removed eagerly. Stale-entry checks compare string ids
 * (interned by tokenizer.c, see tokenizer_impl.h).
 *
 * Added tokens cut the text first (by the reference's rules, see cut_specials and
 * tokenizer_special.c); the stretches between them are encoded alone.
 */
#include "gpu/tokenizer.h"
#include "gpu/tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>

#include "cairn_errors.h"
#include "gpu/unicode.h"

/* ---- output vector ---------------------------------------------------------------------- */

struct ids {
    int32_t *v;
    size_t n, cap;
    int err;
};

static void push(struct ids *o, int32_t id)
{
    if (o->err)
        return;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        int32_t *v = realloc(o->v, cap * sizeof *v);
        if (!v) {
            o->err = CAIRN_ENOMEM;
            return;
        }
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = id;
}

/* ---- candidate-pair heap ----------------------------------------------------------------- */

/* One entry serves both families: SPM orders by score (higher first), BPE by rank (lower
 * first, stored negated in score's place as key); ties go to the leftmost pair. */
struct cand {
    double key; /* larger merges first */
    size_t left, right;
    int32_t a, b; /* SPM: byte length of the pair; BPE: ids of the two sides when pushed */
};

struct heap {
    struct cand *v;
    size_t n, cap;
};

static int cand_before(const struct cand *x, const struct cand *y)
{
    return x->key > y->key || (x->key == y->key && x->left < y->left);
}

static int heap_push(struct heap *h, struct cand c)
{
    size_t i;
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        struct cand *v = realloc(h->v, cap * sizeof *v);
        if (!v)
            return CAIRN_ENOMEM;
        h->v = v;
        h->cap = cap;
    }
    i = h->n++;
    while (i > 0 && cand_before(&c, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = c;
    return 0;
}

static struct cand heap_pop(struct heap *h)
{
    struct cand top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && cand_before(&h->v[c + 1], &h->v[c]))
            c++;
        if (!cand_before(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

/* Symbols of the merge list: a byte span of the work text, linked to its live neighbours. */
struct sym {
    size_t start, len;
    size_t prev, next; /* NONE at the ends */
    int32_t id;        /* BPE: string id of the span (token, synthetic, or -1) */
};
#define NONE ((size_t)-1)

struct work {
    struct sym *s;
    size_t cap;
    struct heap h;
    unsigned char *m; /* a word in mapped form, for ignore_merges */
    size_t mcap;
};

static int work_reserve(struct work *w, size_t n)
{
    if (n > w->cap) {
        struct sym *s = realloc(w->s, n * sizeof *s);
        if (!s)
            return CAIRN_ENOMEM;
        w->s = s;
        w->cap = n;
    }
    w->h.n = 0;
    return 0;
}

/* ---- llama (SPM) ---------------------------------------------------------------------- */

static int spm_try_pair(const cairn__tok *t, struct work *w, const char *text, size_t l, size_t r)
{
    int32_t id;
    struct cand c;
    if (l == NONE || r == NONE)
        return 0;
    id = cairn__tok_find_str(t, text + w->s[l].start, w->s[l].len + w->s[r].len);
    if (id < 0 || (size_t)id >= t->n_vocab)
        return 0;
    c.key = t->scores[id];
    c.left = l;
    c.right = r;
    c.a = (int32_t)(w->s[l].len + w->s[r].len);
    c.b = id;
    return heap_push(&w->h, c);
}

/* Tokenizes one stretch of text, with spaces already written as U+2581. */
static int spm_fragment(const cairn__tok *t, struct work *w, const char *text, size_t len,
                        struct ids *o)
{
    size_t n = 0, pos = 0, i;
    int rc;
    if ((rc = work_reserve(w, len)))
        return rc;
    while (pos < len) {
        uint32_t cp;
        size_t k = cairn__utf8_decode((const unsigned char *)text + pos, len - pos, &cp);
        w->s[n].start = pos;
        w->s[n].len = k;
        w->s[n].prev = n ? n - 1 : NONE;
        w->s[n].next = pos + k < len ? n + 1 : NONE;
        n++;
        pos += k;
    }
    for (i = 1; i < n; i++)
        if ((rc = spm_try_pair(t, w, text, i - 1, i)))
            return rc;
    while (w->h.n) {
        struct cand c = heap_pop(&w->h);
        struct sym *L = &w->s[c.left], *R = &w->s[c.right];
        /* stale: a side was merged away, or grew, since this pair was proposed */
        if (L->len == 0 || R->len == 0 || L->len + R->len != (size_t)c.a)
            continue;
        L->len += R->len;
        R->len = 0;
        L->next = R->next;
        if (R->next != NONE)
            w->s[R->next].prev = c.left;
        if ((rc = spm_try_pair(t, w, text, L->prev, c.left)) ||
            (rc = spm_try_pair(t, w, text, c.left, L->next)))
            return rc;
    }
    for (i = n ? 0 : NONE; i != NONE; i = w->s[i].next) {
        const struct sym *s = &w->s[i];
        int32_t id = cairn__tok_find_str(t, text + s->start, s->len);
        if (id >= 0 && (size_t)id < t->n_vocab) {
            push(o, id);
        } else { /* not a piece of the vocabulary: spell it in byte tokens */
            size_t j;
            for (j = 0; j < s->len; j++) {
                int32_t b = t->byte_tok[(unsigned char)text[s->start + j]];
                if (b < 0)
                    b = t->unk;
                if (b >= 0)
                    push(o, b);
            }
        }
    }
    return o->err;
}

static int spm_encode(const cairn__tok *t, struct work *w, const char *text, size_t len, int prefix,
                      struct ids *o, char **buf, size_t *bufcap)
{
    size_t need = (len + 1) * 3, i, n = 0;
    if (need > *bufcap) {
        char *p = realloc(*buf, need);
        if (!p)
            return CAIRN_ENOMEM;
        *buf = p;
        *bufcap = need;
    }
    if (prefix) {
        memcpy(*buf, "\xe2\x96\x81", 3);
        n = 3;
    }
    for (i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(*buf + n, "\xe2\x96\x81", 3);
            n += 3;
        } else {
            (*buf)[n++] = text[i];
        }
    }
    return spm_fragment(t, w, *buf, n, o);
}

/* ---- gpt2 (byte-level BPE) ------------------------------------------------------------ */

static int bpe_try_pair(const cairn__tok *t, struct work *w, size_t l, size_t r)
{
    const struct cairn__tok_pair *p;
    struct cand c;
    if (l == NONE || r == NONE)
        return 0;
    p = cairn__tok_find_pair(t, w->s[l].id, w->s[r].id);
    if (!p)
        return 0;
    c.key = -(double)p->rank;
    c.left = l;
    c.right = r;
    c.a = w->s[l].id;
    c.b = w->s[r].id;
    return heap_push(&w->h, c);
}

/* Emits the tokens of one pre-tokenized word (raw bytes). */
static int bpe_word(const cairn__tok *t, struct work *w, const unsigned char *word, size_t len,
                    struct ids *o)
{
    size_t i;
    int rc;
    if (len == 0)
        return 0;
    if (t->ignore_merges) {
        /* llama3-style vocabularies take a whole word that is itself a token as is */
        size_t n = 0;
        int32_t id;
        if (2 * len > w->mcap) {
            unsigned char *m = realloc(w->m, 2 * len);
            if (!m)
                return CAIRN_ENOMEM;
            w->m = m;
            w->mcap = 2 * len;
        }
        for (i = 0; i < len; i++) {
            memcpy(w->m + n, t->bmap[word[i]], t->bmap_len[word[i]]);
            n += t->bmap_len[word[i]];
        }
        id = cairn__tok_find_str(t, (const char *)w->m, n);
        if (id >= 0 && (size_t)id < t->n_vocab) {
            push(o, id);
            return o->err;
        }
    }
    if ((rc = work_reserve(w, len)))
        return rc;
    for (i = 0; i < len; i++) {
        w->s[i].start = i;
        w->s[i].len = 1;
        w->s[i].prev = i ? i - 1 : NONE;
        w->s[i].next = i + 1 < len ? i + 1 : NONE;
        w->s[i].id = t->byte_tok[word[i]];
    }
    for (i = 1; i < len; i++)
        if ((rc = bpe_try_pair(t, w, i - 1, i)))
            return rc;
    while (w->h.n) {
        struct cand c = heap_pop(&w->h);
        struct sym *L = &w->s[c.left], *R = &w->s[c.right];
        const struct cairn__tok_pair *p;
        if (L->len == 0 || R->len == 0 || L->id != c.a || R->id != c.b || L->next != c.right)
            continue;
        p = cairn__tok_find_pair(t, L->id, R->id);
        L->id = p->merged;
        L->len += R->len;
        R->len = 0;
        L->next = R->next;
        if (R->next != NONE)
            w->s[R->next].prev = c.left;
        if ((rc = bpe_try_pair(t, w, L->prev, c.left)) ||
            (rc = bpe_try_pair(t, w, c.left, L->next)))
            return rc;
    }
    for (i = 0; i != NONE; i = w->s[i].next) {
        const struct sym *s = &w->s[i];
        if (s->id >= 0 && (size_t)s->id < t->n_vocab) {
            push(o, s->id);
        } else { /* merged into a string that is no token: fall back to its bytes */
            size_t j;
            for (j = s->start; j < s->start + s->len; j++) {
                int32_t b = t->byte_tok[word[j]];
                if (b < 0 || (size_t)b >= t->n_vocab)
                    b = t->unk;
                if (b >= 0)
                    push(o, b);
            }
        }
    }
    return o->err;
}

/* Pre-tokenizer state: the fragment decoded into code point units. */
struct units {
    const unsigned char *text;
    uint32_t *cp;
    unsigned char *cls;
    size_t *off; /* n + 1 byte offsets */
    size_t n;
};

#define END_CLASS 4 /* "no character": beyond the segment */

static int emit_word(const cairn__tok *t, struct work *w, const struct units *u, size_t a, size_t b,
                     struct ids *o)
{
    return bpe_word(t, w, u->text + u->off[a], u->off[b] - u->off[a], o);
}

static int cls_at(const struct units *u, size_t i, size_t hi)
{
    return i < hi ? u->cls[i] : END_CLASS;
}

static uint32_t ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* Length of a contraction ('s 't 're 've 'm 'll 'd) at i, or 0. fold: case-insensitive. */
static size_t contraction(const struct units *u, size_t i, size_t hi, int fold)
{
    uint32_t a, b;
    if (u->cp[i] != '\'' || i + 1 >= hi)
        return 0;
    a = fold ? ascii_lower(u->cp[i + 1]) : u->cp[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if (i + 2 >= hi)
        return 0;
    b = fold ? ascii_lower(u->cp[i + 2]) : u->cp[i + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return 3;
    return 0;
}

/* Shared tail of both regexes: \s+(?!\S)|\s+ (llama3 first tries \s*[\r\n]+). Returns the end. */
static size_t match_space(const struct units *u, size_t pos, size_t hi, int newline_rule)
{
    size_t n = 0, last_nl = 0;
    while (pos + n < hi && u->cls[pos + n] == CAIRN__UC_SPACE) {
        if (u->cp[pos + n] == '\r' || u->cp[pos + n] == '\n')
            last_nl = pos + n + 1;
        n++;
    }
    if (newline_rule && last_nl)
        return last_nl;
    if (n > 1 && pos + n < hi) /* leave the last space to prefix the next word */
        return pos + n - 1;
    return n ? pos + n : pos + 1;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ over units
 * [lo, hi); the segment's ends act as the ends of the text. */
static int pre_gpt2(const cairn__tok *t, struct work *w, const struct units *u, size_t lo,
                    size_t hi, struct ids *o)
{
    size_t pos = lo;
    int rc;
    while (pos < hi) {
        size_t start = pos, k = contraction(u, pos, hi, 0);
        int sp = u->cp[pos] == ' ', c2 = sp ? cls_at(u, pos + 1, hi) : u->cls[pos];
        if (k) {
            pos += k;
        } else if (c2 == CAIRN__UC_LETTER || c2 == CAIRN__UC_NUMBER || c2 == CAIRN__UC_OTHER) {
            pos += (size_t)sp;
            while (pos < hi && u->cls[pos] == c2)
                pos++;
        } else {
            pos = match_space(u, pos, hi, 0);
        }
        if ((rc = emit_word(t, w, u, start, pos, o)))
            return rc;
    }
    return 0;
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static int pre_llama3(const cairn__tok *t, struct work *w, const struct units *u, size_t lo,
                      size_t hi, size_t max_digits, struct ids *o)
{
    size_t pos = lo;
    int rc;
    while (pos < hi) {
        size_t start = pos, k = contraction(u, pos, hi, 1);
        uint32_t c = u->cp[pos];
        int cl = u->cls[pos], sp = c == ' ', c2 = sp ? cls_at(u, pos + 1, hi) : cl;
        if (k) {
            pos += k;
        } else if (c != '\r' && c != '\n' && cl != CAIRN__UC_NUMBER &&
                   (cl == CAIRN__UC_LETTER || cls_at(u, pos + 1, hi) == CAIRN__UC_LETTER)) {
            pos++;
            while (pos < hi && u->cls[pos] == CAIRN__UC_LETTER)
                pos++;
        } else if (cl == CAIRN__UC_NUMBER) {
            while (pos < hi && u->cls[pos] == CAIRN__UC_NUMBER && pos - start < max_digits)
                pos++;
        } else if (c2 == CAIRN__UC_OTHER) {
            pos += (size_t)sp;
            while (pos < hi && u->cls[pos] == CAIRN__UC_OTHER)
                pos++;
            while (pos < hi && (u->cp[pos] == '\r' || u->cp[pos] == '\n'))
                pos++;
        } else {
            pos = match_space(u, pos, hi, 1);
        }
        if ((rc = emit_word(t, w, u, start, pos, o)))
            return rc;
    }
    return 0;
}

static int bpe_encode(const cairn__tok *t, struct work *w, const char *text, size_t len,
                      struct ids *o)
{
    struct units u;
    size_t pos = 0, i;
    int rc = 0;
    if (len == 0)
        return 0;
    u.text = (const unsigned char *)text;
    u.cp = malloc(len * sizeof *u.cp);
    u.cls = malloc(len);
    u.off = malloc((len + 1) * sizeof *u.off);
    if (!u.cp || !u.cls || !u.off) {
        rc = CAIRN_ENOMEM;
        goto done;
    }
    for (u.n = 0; pos < len; u.n++) {
        size_t k = cairn__utf8_decode(u.text + pos, len - pos, &u.cp[u.n]);
        u.cls[u.n] = (unsigned char)cairn__uc_class(u.cp[u.n]);
        u.off[u.n] = pos;
        pos += k;
    }
    u.off[u.n] = len;
    switch (t->pre) {
    case CAIRN__PRE_LLAMA3:
        rc = pre_llama3(t, w, &u, 0, u.n, 3, o);
        break;
    case CAIRN__PRE_QWEN2:
        rc = pre_llama3(t, w, &u, 0, u.n, 1, o);
        break;
    case CAIRN__PRE_DIGITS: /* \p{N} first splits the text; the GPT-2 regex runs on every piece */
        for (pos = 0, i = 0; i <= u.n && !rc; i++) {
            if (i == u.n || u.cls[i] == CAIRN__UC_NUMBER) {
                if (i > pos)
                    rc = pre_gpt2(t, w, &u, pos, i, o);
                if (!rc && i < u.n)
                    rc = emit_word(t, w, &u, i, i + 1, o);
                pos = i + 1;
            }
        }
        break;
    default:
        rc = pre_gpt2(t, w, &u, 0, u.n, o);
        break;
    }
done:
    free(u.cp);
    free(u.cls);
    free(u.off);
    return rc;
}

/* ---- encode ---------------------------------------------------------------------------- */

/* The text cut at added tokens: raw text [off, off + len) where id < 0, else token id; linked
 * in text order from segment 0. */
struct seg {
    size_t off, len, next;
    int32_t id;
};

struct segs {
    struct seg *v;
    size_t n, cap;
};

/* Links a new segment after segment `after` (NONE: the first one); its index, or NONE when out
 * of memory. */
static size_t seg_insert(struct segs *s, size_t after, size_t off, size_t len, int32_t id)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        struct seg *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return NONE;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n] = (struct seg){off, len, after == NONE ? NONE : s->v[after].next, id};
    if (after != NONE)
        s->v[after].next = s->n;
    return s->n++;
}

/* isspace() of the C locale, whatever the process's locale */
static int c_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* Cuts every added token that applies out of text, one token at a time in the table's order
 * (longest first), each at every place it occurs in what is still raw text: the reference's
 * rule, which differs from a left-to-right longest match where added tokens overlap. */
static int cut_specials(const cairn__tok *t, const char *text, size_t len, int parse_special,
                        struct segs *s)
{
    size_t k, i;
    s->n = 0;
    if (len == 0)
        return 0;
    if (seg_insert(s, NONE, 0, len, -1) == NONE)
        return CAIRN_ENOMEM;
    for (k = 0; k < t->n_special; k++) {
        const struct cairn__tok_special *sp = &t->special[k];
        const char *tx = t->str + t->str_off[sp->id];
        if (!parse_special && !(sp->flags & CAIRN__SPECIAL_PLAIN))
            continue;
        for (i = 0; i != NONE; i = s->v[i].next) {
            while (s->v[i].id < 0) {
                size_t off = s->v[i].off, end = off + s->v[i].len, at;
                const char *m = memmem(text + off, end - off, tx, sp->len);
                if (!m)
                    break;
                at = (size_t)(m - text);
                if (at > off) { /* i keeps the text left of the match */
                    s->v[i].len = at - off;
                    if ((i = seg_insert(s, i, at, sp->len, sp->id)) == NONE)
                        return CAIRN_ENOMEM;
                } else {
                    s->v[i].len = sp->len;
                    s->v[i].id = sp->id;
                }
                at += sp->len;
                if (sp->flags & CAIRN__SPECIAL_RSTRIP)
                    while (at < end && c_space(text[at]))
                        at++;
                if (at < end && (i = seg_insert(s, i, at, end - at, -1)) == NONE)
                    return CAIRN_ENOMEM;
            }
        }
    }
    return 0;
}

int cairn__tok_encode(const cairn__tok *t, const char *text, size_t len, int add_special,
                      int parse_special, int32_t **ids, size_t *n)
{
    struct ids o = {NULL, 0, 0, 0};
    struct work w = {NULL, 0, {NULL, 0, 0}, NULL, 0};
    struct segs sg = {NULL, 0, 0};
    char *buf = NULL;
    size_t bufcap = 0, i;
    int rc = 0, prev_special = 1;

    if (ids)
        *ids = NULL;
    if (n)
        *n = 0;
    if (!t || !ids || !n || (!text && len))
        return CAIRN_EINVAL;
    if (add_special && t->add_bos && t->bos >= 0)
        push(&o, t->bos);
    /* Every stretch of text between added tokens is encoded alone. SentencePiece prefixes a
     * space to the first stretch and to any stretch right after an added token. */
    rc = cut_specials(t, text, len, parse_special, &sg);
    for (i = sg.n ? 0 : NONE; !rc && i != NONE; i = sg.v[i].next) {
        const struct seg *g = &sg.v[i];
        if (g->id >= 0) {
            push(&o, g->id);
            prev_special = 1;
            continue;
        }
        if (t->kind == CAIRN__TOK_SPM)
            rc = spm_encode(t, &w, text + g->off, g->len, t->add_space_prefix && prev_special, &o,
                            &buf, &bufcap);
        else
            rc = bpe_encode(t, &w, text + g->off, g->len, &o);
        prev_special = 0;
    }
    if (!rc && add_special && t->add_eos && t->eos >= 0)
        push(&o, t->eos);
    if (!rc)
        rc = o.err;
    if (!rc && !o.v) { /* promise a non-NULL array even when empty */
        o.v = malloc(sizeof *o.v);
        if (!o.v)
            rc = CAIRN_ENOMEM;
    }
    free(sg.v);
    free(buf);
    free(w.s);
    free(w.h.v);
    free(w.m);
    if (rc) {
        free(o.v);
        return rc;
    }
    *ids = o.v;
    *n = o.n;
    return 0;
}
