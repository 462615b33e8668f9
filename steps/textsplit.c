/* steps/textsplit.c - the text tokenizer of the BM25 index (cairn__bm25_tokenize, bm25.h).
 *
 * One pass over UTF-8 with no tables and no allocation: each code point is classified by a few
 * range tests (separator, CJK, or part of a word) and lower-cased by the regular patterns of
 * the alphabetic scripts' case pairs (Latin blocks alternate capital/small, Greek and Cyrillic
 * sit at fixed offsets), which covers the languages a support corpus holds without a Unicode
 * database. Words are built in a fixed buffer of CAIRN__BM25_MAX_TOKEN bytes; a longer word
 * keeps its head. CJK text has no spaces to split on, so a run of CJK characters becomes
 * overlapping bigrams (the usual dictionary-free choice: "東京都" -> "東京", "京都"), and a lone
 * character stands for itself.
 *
 * Documents and queries go through the same function, and the index re-tokenizes stored text to
 * remove a replaced document's postings, so any change to what this emits must bump
 * CAIRN__BM25_TOKENIZER_VERSION (bm25.h): indexes built by the old version are then refused
 * with a message to rebuild them, instead of silently missing matches.
 */
#include "steps/bm25.h"

#include <stdint.h>
#include <string.h>

#include "common/utf8.h"

/* Simple lower-case mapping (plus two foldings search wants: final sigma and dotted capital I)
 * for the scripts whose case pairs follow a pattern; other characters are returned as is. */
static uint32_t lower(uint32_t c)
{
    if (c < 0x80)
        return c >= 'A' && c <= 'Z' ? c + 32 : c;
    if (c < 0x100)
        return c >= 0xc0 && c <= 0xde && c != 0xd7 ? c + 32 : c;
    if (c < 0x180) { /* Latin Extended-A */
        if (c == 0x130)
            return 'i';
        if (c == 0x178)
            return 0xff;
        if ((c <= 0x137) || (c >= 0x14a && c <= 0x177))
            return c | 1; /* even = capital */
        if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e))
            return c & 1 ? c + 1 : c; /* odd = capital */
        return c;
    }
    if (c < 0x250) { /* Latin Extended-B: the regular runs */
        if (c >= 0x1cd && c <= 0x1dc)
            return c & 1 ? c + 1 : c;
        if ((c >= 0x1de && c <= 0x1ef) || (c >= 0x1f8 && c <= 0x21f) ||
            (c >= 0x222 && c <= 0x233) || (c >= 0x246 && c <= 0x24f))
            return c | 1;
        return c;
    }
    if (c >= 0x370 && c < 0x400) { /* Greek */
        if (c == 0x386)
            return 0x3ac;
        if (c >= 0x388 && c <= 0x38a)
            return c + 37;
        if (c == 0x38c)
            return 0x3cc;
        if (c == 0x38e || c == 0x38f)
            return c + 63;
        if ((c >= 0x391 && c <= 0x3a1) || (c >= 0x3a3 && c <= 0x3ab))
            return c + 32;
        if (c == 0x3c2)
            return 0x3c3; /* final sigma: "ΟΔΟΣ" and "οδος" must match */
        if (c >= 0x3d8 && c <= 0x3ef)
            return c | 1;
        return c;
    }
    if (c >= 0x400 && c < 0x530) { /* Cyrillic and its supplement */
        if (c <= 0x40f)
            return c + 0x50;
        if (c <= 0x42f)
            return c + 0x20;
        if ((c >= 0x460 && c <= 0x481) || (c >= 0x48a && c <= 0x4bf) || (c >= 0x4d0 && c <= 0x52f))
            return c | 1;
        if (c == 0x4c0)
            return 0x4cf;
        if (c >= 0x4c1 && c <= 0x4ce)
            return c & 1 ? c + 1 : c;
        return c;
    }
    if (c >= 0x531 && c <= 0x556) /* Armenian */
        return c + 0x30;
    if ((c >= 0x1e00 && c <= 0x1e95) || (c >= 0x1ea0 && c <= 0x1eff)) /* Latin Ext. Additional */
        return c | 1;
    if (c == 0x1e9e)
        return 0xdf;
    return c;
}

static int is_cjk(uint32_t c)
{
    return (c >= 0x4e00 && c <= 0x9fff) ||   /* CJK unified ideographs */
           (c >= 0x3400 && c <= 0x4dbf) ||   /* extension A */
           (c >= 0xf900 && c <= 0xfaff) ||   /* compatibility ideographs */
           (c >= 0x20000 && c <= 0x3134f) || /* extensions B..G, compatibility supplement */
           (c >= 0x3005 && c <= 0x3007) ||   /* 々 〆 〇 */
           (c >= 0x3041 && c <= 0x309f) ||   /* Hiragana */
           (c >= 0x30a0 && c <= 0x30ff && c != 0x30fb) || /* Katakana, not the middle dot */
           (c >= 0x31f0 && c <= 0x31ff) ||                /* Katakana phonetic extensions */
           (c >= 0xff66 && c <= 0xff9f) ||                /* halfwidth Katakana */
           (c >= 0xac00 && c <= 0xd7af);                  /* Hangul syllables */
}

/* Whitespace, punctuation, symbols and controls: everything that ends a token. */
static int is_sep(uint32_t c)
{
    if (c < 0x80)
        return !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'));
    if (c < 0xc0) /* C1 controls, NBSP, Latin-1 punctuation; keep ª ² ³ µ ¹ º */
        return !(c == 0xaa || c == 0xb2 || c == 0xb3 || c == 0xb5 || c == 0xb9 || c == 0xba);
    if (c == 0xd7 || c == 0xf7)
        return 1;
    if (c < 0x370)
        return 0;
    if (c == 0x37e || c == 0x387 || (c >= 0x55a && c <= 0x55f) || c == 0x589 || c == 0x5be ||
        c == 0x5c0 || c == 0x5c3 || c == 0x5c6 || c == 0x5f3 || c == 0x5f4 || c == 0x60c ||
        c == 0x61b || c == 0x61f || (c >= 0x66a && c <= 0x66d) || c == 0x6d4 || c == 0x964 ||
        c == 0x965 || c == 0xe4f || c == 0xe5a || c == 0xe5b || c == 0x1680 || c == 0x180e)
        return 1;
    if (c >= 0x2000 && c <= 0x2bff) /* general punctuation, currency, letterlike, arrows, math,
                                       technical, boxes, shapes, dingbats */
        return 1;
    if (c >= 0x2e00 && c <= 0x2e7f) /* supplemental punctuation */
        return 1;
    if (c >= 0x3000 && c <= 0x303f) /* CJK symbols and punctuation */
        return !(c >= 0x3005 && c <= 0x3007);
    if (c == 0x30fb) /* katakana middle dot */
        return 1;
    if ((c >= 0xfe10 && c <= 0xfe1f) || (c >= 0xfe30 && c <= 0xfe6f) || c == 0xfeff)
        return 1;
    if ((c >= 0xff00 && c <= 0xff0f) || (c >= 0xff1a && c <= 0xff20) ||
        (c >= 0xff3b && c <= 0xff40) || (c >= 0xff5b && c <= 0xff65) ||
        (c >= 0xffe0 && c <= 0xffff))
        return 1;
    if ((c >= 0x1f000 && c <= 0x1faff) || (c >= 0xe0000 && c <= 0xe007f)) /* emoji, tags */
        return 1;
    return 0;
}

typedef struct tokenizer {
    char word[CAIRN__BM25_MAX_TOKEN];
    size_t wn;
    uint32_t cjk_prev;
    size_t cjk_run;
    size_t count;
    cairn__bm25_token_cb cb;
    void *arg;
} tokenizer;

static void emit(tokenizer *t, const char *s, size_t n)
{
    t->count++;
    if (t->cb)
        t->cb(s, n, t->arg);
}

static void end_word(tokenizer *t)
{
    if (t->wn)
        emit(t, t->word, t->wn);
    t->wn = 0;
}

static void end_cjk(tokenizer *t)
{
    if (t->cjk_run == 1) {
        char b[4];
        emit(t, b, cairn__utf8_put(t->cjk_prev, b));
    }
    t->cjk_run = 0;
}

size_t cairn__bm25_tokenize(const char *text, size_t len, cairn__bm25_token_cb cb, void *arg)
{
    tokenizer t = {.cb = cb, .arg = arg};
    const unsigned char *s = (const unsigned char *)text;
    int word_full = 0; /* the current word reached CAIRN__BM25_MAX_TOKEN: drop its tail */
    for (size_t i = 0; i < len;) {
        uint32_t c;
        size_t l = cairn__utf8_get(s + i, len - i, &c);
        i += l ? l : 1;
        if (!l) {
            end_word(&t), end_cjk(&t), word_full = 0;
            continue;
        }
        if (c >= 0xff01 && c <= 0xff5e) /* fullwidth ASCII */
            c -= 0xfee0;
        if (is_cjk(c)) {
            end_word(&t), word_full = 0;
            if (t.cjk_run) {
                char b[8];
                size_t n = cairn__utf8_put(t.cjk_prev, b);
                emit(&t, b, n + cairn__utf8_put(c, b + n));
            }
            t.cjk_prev = c;
            t.cjk_run++;
            continue;
        }
        end_cjk(&t);
        if (is_sep(c)) {
            end_word(&t), word_full = 0;
            continue;
        }
        char b[4];
        size_t n = cairn__utf8_put(lower(c), b);
        if (word_full || t.wn + n > sizeof t.word) {
            word_full = 1;
            continue;
        }
        memcpy(t.word + t.wn, b, n);
        t.wn += n;
    }
    end_word(&t);
    end_cjk(&t);
    return t.count;
}
