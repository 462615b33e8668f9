/* gpu/tokenizer_decode.c - token ids back to bytes: the piece table, whole and streaming decode.
 *
 * Decoding is precomputed: every token's bytes (<0xXX> byte tokens as the byte, U+2581 as a
 * space, GPT-2's mapped code points back to raw bytes) are built once into one array, so
 * decoding is a copy per id. The stream decoder holds back an incomplete UTF-8 tail so that a
 * caller printing token by token never prints half a character.
 */
#include "gpu/tokenizer.h"
#include "gpu/tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>

#include "cairn_errors.h"
#include "gpu/unicode.h"

/* Inverse of gpt2_byte_cp: byte for a code point, or -1. */
static int gpt2_cp_byte(uint32_t cp)
{
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return (int)cp;
    if (cp >= 256 && cp < 256 + 68) {
        unsigned b;
        for (b = 0; b < 256; b++)
            if (cairn__tok_gpt2_byte_cp(b) == cp)
                return (int)b;
    }
    return -1;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* "<0xXX>" -> XX, else -1 */
static int byte_token_value(const char *s, size_t len)
{
    int hi, lo;
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    hi = hexval(s[3]);
    lo = hexval(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* Computes the decoded bytes of every token (what cairn__tok_piece returns). */
int cairn__tok_build_pieces(cairn__tok *t)
{
    size_t total = 0, i, at = 0;
    /* a decoded piece is never longer than its text */
    for (i = 0; i < t->n_vocab; i++)
        total += t->str_off[i + 1] - t->str_off[i];
    t->piece = malloc(total + 1);
    t->piece_off = malloc((t->n_vocab + 1) * sizeof *t->piece_off);
    if (!t->piece || !t->piece_off)
        return CAIRN_ENOMEM;
    for (i = 0; i < t->n_vocab; i++) {
        size_t len, j = 0;
        const unsigned char *s = (const unsigned char *)cairn__tok_str(t, (int32_t)i, &len);
        int type = t->types[i], bv = byte_token_value((const char *)s, len);
        unsigned char *out = (unsigned char *)t->piece + at;
        t->piece_off[i] = at;
        if (type == CAIRN__TOK_BYTE && bv >= 0) {
            out[0] = (unsigned char)bv;
            at += 1;
            continue;
        }
        if (type == CAIRN__TOK_CONTROL || type == CAIRN__TOK_USER_DEFINED ||
            type == CAIRN__TOK_UNKNOWN) {
            memcpy(out, s, len);
            at += len;
            continue;
        }
        while (j < len) {
            uint32_t cp;
            size_t n = cairn__utf8_decode(s + j, len - j, &cp);
            int b;
            if (t->kind == CAIRN__TOK_SPM && cp == 0x2581 && n == 3) {
                *out++ = ' ';
            } else if (t->kind == CAIRN__TOK_BPE && n == (size_t)(s[j] < 0x80 ? 1 : 2) &&
                       (b = gpt2_cp_byte(cp)) >= 0) {
                *out++ = (unsigned char)b;
            } else { /* not part of the encoding: keep the text's own bytes */
                memcpy(out, s + j, n);
                out += n;
            }
            j += n;
        }
        at = (size_t)(out - (unsigned char *)t->piece);
    }
    t->piece_off[t->n_vocab] = at;
    return 0;
}

/* ---- decode ---------------------------------------------------------------------------- */

int cairn__tok_piece(const cairn__tok *t, int32_t id, const char **bytes, size_t *len)
{
    if (!t || id < 0 || (size_t)id >= t->n_vocab || !bytes || !len)
        return CAIRN_EINVAL;
    *bytes = t->piece + t->piece_off[id];
    *len = t->piece_off[id + 1] - t->piece_off[id];
    return 0;
}

/* The bytes of id as decoding renders them: nothing for CONTROL/UNKNOWN unless asked. */
static void rendered(const cairn__tok *t, int32_t id, unsigned flags, const char **s, size_t *len)
{
    int ty = t->types[id];
    *s = t->piece + t->piece_off[id];
    *len = t->piece_off[id + 1] - t->piece_off[id];
    if ((ty == CAIRN__TOK_CONTROL || ty == CAIRN__TOK_UNKNOWN) &&
        !(flags & CAIRN__TOK_DECODE_SPECIAL))
        *len = 0;
}

int cairn__tok_decode(const cairn__tok *t, const int32_t *ids, size_t n, unsigned flags, char **out,
                      size_t *len)
{
    size_t total = 0, i, at = 0;
    int strip = (flags & CAIRN__TOK_DECODE_STRIP_SPACE) && t && t->add_space_prefix;
    char *p;
    if (out)
        *out = NULL;
    if (len)
        *len = 0;
    if (!t || !out || !len || (!ids && n))
        return CAIRN_EINVAL;
    for (i = 0; i < n; i++) {
        if (ids[i] < 0 || (size_t)ids[i] >= t->n_vocab)
            return CAIRN_EINVAL;
        total += t->piece_off[ids[i] + 1] - t->piece_off[ids[i]];
    }
    if (!(p = malloc(total + 1)))
        return CAIRN_ENOMEM;
    for (i = 0; i < n; i++) {
        const char *s;
        size_t l;
        rendered(t, ids[i], flags, &s, &l);
        if (strip && l) {
            if (s[0] == ' ') {
                s++;
                l--;
            }
            strip = 0;
        }
        memcpy(p + at, s, l);
        at += l;
    }
    p[at] = 0;
    *out = p;
    *len = at;
    return 0;
}

struct cairn__tok_stream {
    const cairn__tok *t;
    unsigned flags;
    int strip;
    char *buf;
    size_t held, cap, out_len; /* buf[out_len .. out_len + held) is the held-back tail */
};

cairn__tok_stream *cairn__tok_stream_new(const cairn__tok *t, unsigned flags)
{
    cairn__tok_stream *s;
    if (!t)
        return NULL;
    s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->t = t;
    s->flags = flags;
    s->strip = (flags & CAIRN__TOK_DECODE_STRIP_SPACE) && t->add_space_prefix;
    return s;
}

int cairn__tok_stream_push(cairn__tok_stream *s, int32_t id, const char **out, size_t *len)
{
    const char *p;
    size_t l, n, tail;
    if (!s || !out || !len || id < 0 || (size_t)id >= s->t->n_vocab)
        return CAIRN_EINVAL;
    rendered(s->t, id, s->flags, &p, &l);
    if (s->strip && l) {
        if (p[0] == ' ') {
            p++;
            l--;
        }
        s->strip = 0;
    }
    /* move the held tail to the front, then append the new piece */
    if (s->held)
        memmove(s->buf, s->buf + s->out_len, s->held);
    n = s->held + l;
    if (n > s->cap) {
        size_t cap = n < 64 ? 64 : n * 2;
        char *b = realloc(s->buf, cap);
        if (!b)
            return CAIRN_ENOMEM;
        s->buf = b;
        s->cap = cap;
    }
    if (l)
        memcpy(s->buf + s->held, p, l);
    tail = cairn__utf8_incomplete_tail((const unsigned char *)s->buf, n);
    s->out_len = n - tail;
    s->held = tail;
    *out = s->buf ? s->buf : "";
    *len = s->out_len;
    return 0;
}

int cairn__tok_stream_flush(cairn__tok_stream *s, const char **out, size_t *len)
{
    if (!s || !out || !len)
        return CAIRN_EINVAL;
    *out = s->buf ? s->buf + s->out_len : "";
    *len = s->held;
    s->out_len += s->held;
    s->held = 0;
    return 0;
}

void cairn__tok_stream_free(cairn__tok_stream *s)
{
    if (!s)
        return;
    free(s->buf);
    free(s);
}
