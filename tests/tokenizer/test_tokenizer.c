/* tests/tokenizer/test_tokenizer.c - the tokenizer against hand-built vocabularies (always) and
 * against the reference test vectors in $CAIRN_TESTDATA/tokenizers (when present).
 *
 * The small vocabularies are written as real GGUF files with the test writer and loaded through
 * cairn__tok_load, so the metadata path is what is tested. For pre-tokenizer checks a gpt2
 * vocabulary is built whose merges spell out each expected word completely: the tokens then
 * show exactly where the pre-tokenizer cut the text.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cairn.h"
#include "gpu/chat.h"
#include "gpu/gguf.h"
#include "gpu/tokenizer.h"
#include "tap.h"
#include "tests/gguf_writer.h"

/* ---- helpers ----------------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Serializes w, opens and loads it. Returns rc; err receives the loader's message. */
static int load_w(cairn__gguf_writer *w, cairn__tok **t, char *err, size_t errlen)
{
    unsigned char *buf = NULL;
    size_t len = 0;
    cairn__gguf *g = NULL;
    int rc;
    *t = NULL;
    err[0] = 0;
    if (gw_write_mem(w, &buf, &len) != 0) {
        gw_free(w);
        snprintf(err, errlen, "writer failed");
        return -1000;
    }
    gw_free(w);
    rc = cairn__gguf_open_mem(buf, len, &g, err, errlen);
    if (rc == 0) {
        rc = cairn__tok_load(g, t, err, errlen);
        cairn__gguf_close(g);
    }
    free(buf);
    return rc;
}

/* "piece|piece|..." of the encoding of s: shows the token boundaries. Caller frees. */
static char *pieces(const cairn__tok *t, const char *s, int parse_special)
{
    int32_t *ids = NULL;
    size_t n = 0, i, at = 0;
    char *out = malloc(4 * strlen(s) + 64);
    if (cairn__tok_encode(t, s, strlen(s), 0, parse_special, &ids, &n) != 0) {
        strcpy(out, "<encode failed>");
        return out;
    }
    out[0] = 0;
    for (i = 0; i < n; i++) {
        const char *p;
        size_t l;
        cairn__tok_piece(t, ids[i], &p, &l);
        if (i)
            out[at++] = '|';
        memcpy(out + at, p, l);
        at += l;
    }
    out[at] = 0;
    free(ids);
    return out;
}

static int ids_eq(const cairn__tok *t, const char *s, int add_special, int parse_special,
                  const int32_t *want, size_t nwant)
{
    int32_t *ids;
    size_t n, i;
    int same;
    if (cairn__tok_encode(t, s, strlen(s), add_special, parse_special, &ids, &n) != 0)
        return 0;
    same = n == nwant;
    for (i = 0; same && i < n; i++)
        same = ids[i] == want[i];
    if (!same) {
        printf("#   got:");
        for (i = 0; i < n; i++)
            printf(" %d", ids[i]);
        printf("\n#   want:");
        for (i = 0; i < nwant; i++)
            printf(" %d", want[i]);
        printf("\n");
    }
    free(ids);
    return same;
}

static int roundtrip(const cairn__tok *t, const char *s, size_t len, unsigned flags,
                     int parse_special)
{
    int32_t *ids;
    size_t n, dl;
    char *d;
    int same;
    if (cairn__tok_encode(t, s, len, 0, parse_special, &ids, &n) != 0)
        return 0;
    if (cairn__tok_decode(t, ids, n, flags, &d, &dl) != 0) {
        free(ids);
        return 0;
    }
    same = dl == len && memcmp(d, s, len) == 0;
    free(ids);
    free(d);
    return same;
}

/* ---- GPT-2's byte <-> code point map, written independently of the tokenizer's ------------- */

static unsigned gpt2_cp[256];

static void init_gpt2_map(void)
{
    int b, n = 0;
    for (b = 0; b < 256; b++) {
        int printable =
            (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        gpt2_cp[b] = printable ? (unsigned)b : 256u + (unsigned)n++;
    }
}

/* Appends the mapped UTF-8 form of raw bytes s[0..n) to out (NUL-terminated). */
static void map_bytes(const char *s, size_t n, char *out)
{
    size_t i, at = strlen(out);
    for (i = 0; i < n; i++) {
        unsigned cp = gpt2_cp[(unsigned char)s[i]];
        if (cp < 0x80) {
            out[at++] = (char)cp;
        } else {
            out[at++] = (char)(0xC0 | cp >> 6);
            out[at++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    out[at] = 0;
}

/* ---- the small gpt2 vocabulary ------------------------------------------------------------ */

struct vocab {
    char **tok;
    int32_t *type;
    size_t n, cap;
    char **merge;
    size_t nm, mcap;
};

static int vocab_find(struct vocab *v, const char *s)
{
    size_t i;
    for (i = 0; i < v->n; i++)
        if (strcmp(v->tok[i], s) == 0)
            return (int)i;
    return -1;
}

static int vocab_add(struct vocab *v, const char *s, int type)
{
    int i = vocab_find(v, s);
    if (i >= 0)
        return i;
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 512;
        v->tok = realloc(v->tok, v->cap * sizeof *v->tok);
        v->type = realloc(v->type, v->cap * sizeof *v->type);
    }
    v->tok[v->n] = strdup(s);
    v->type[v->n] = type;
    return (int)v->n++;
}

static void vocab_merge(struct vocab *v, const char *l, const char *r)
{
    char buf[1100];
    size_t i;
    snprintf(buf, sizeof buf, "%s %s", l, r);
    for (i = 0; i < v->nm; i++)
        if (strcmp(v->merge[i], buf) == 0)
            return;
    if (v->nm == v->mcap) {
        v->mcap = v->mcap ? v->mcap * 2 : 256;
        v->merge = realloc(v->merge, v->mcap * sizeof *v->merge);
    }
    v->merge[v->nm++] = strdup(buf);
    snprintf(buf, sizeof buf, "%s%s", l, r);
    vocab_add(v, buf, CAIRN__TOK_NORMAL);
}

/* Adds merges that build the raw word byte by byte, left to right: ((w0 w1) w2) ... */
static void vocab_chain(struct vocab *v, const char *word)
{
    size_t i, n = strlen(word);
    char left[512], right[8];
    left[0] = 0;
    map_bytes(word, 1, left);
    for (i = 1; i < n; i++) {
        right[0] = 0;
        map_bytes(word + i, 1, right);
        vocab_merge(v, left, right);
        map_bytes(word + i, 1, left);
    }
}

static void vocab_free(struct vocab *v)
{
    size_t i;
    for (i = 0; i < v->n; i++)
        free(v->tok[i]);
    for (i = 0; i < v->nm; i++)
        free(v->merge[i]);
    free(v->tok);
    free(v->type);
    free(v->merge);
}

/* Words the pre-tokenizer tests expect to see whole; order matters where chains share pairs
 * (a chain listed earlier gets the lower, i.e. stronger, ranks). */
static const char *const chain_words[] = {
    " 12345", "123",   "45",    "$abc", "abc",  "Hello",  " world", "'m",   "'s", "'M",
    "'S",     " here", " HERE", "it",   "!!!",  "!!\n\n", "\n\n",   "  ",   " b", " ok",
    " hi",    "end",   " 1",    "\r\n", "  \n", "\tit",   "Привет", " мир",
};

static void build_gpt2_vocab(struct vocab *v)
{
    int b;
    size_t i;
    memset(v, 0, sizeof *v);
    for (b = 0; b < 256; b++) {
        char s[4] = {0};
        char raw = (char)b;
        map_bytes(&raw, 1, s);
        vocab_add(v, s, CAIRN__TOK_NORMAL);
    }
    for (i = 0; i < sizeof chain_words / sizeof chain_words[0]; i++)
        vocab_chain(v, chain_words[i]);
    vocab_add(v, "<|endoftext|>", CAIRN__TOK_CONTROL);
    vocab_add(v, "<|im_start|>", CAIRN__TOK_CONTROL);
    vocab_add(v, "<|im_end|>", CAIRN__TOK_CONTROL);
    vocab_add(v, "<|im", CAIRN__TOK_USER_DEFINED);
    vocab_add(v, "<tool>", CAIRN__TOK_USER_DEFINED);
    /* a whole-word token no merge produces: only ignore_merges (llama-bpe) finds it */
    vocab_add(v, "Ġxyz", CAIRN__TOK_NORMAL);
}

static cairn__gguf_writer *gpt2_writer(const struct vocab *v, const char *pre)
{
    cairn__gguf_writer *w = gw_new(3, 32);
    gw_kv_str(w, "general.architecture", "gpt2");
    gw_kv_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre)
        gw_kv_str(w, "tokenizer.ggml.pre", pre);
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tok, v->n);
    gw_kv_arr_i32(w, "tokenizer.ggml.token_type", v->type, v->n);
    gw_kv_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merge, v->nm);
    return w;
}

static cairn__tok *load_gpt2(const struct vocab *v, const char *pre)
{
    cairn__tok *t = NULL;
    char err[256];
    int rc = load_w(gpt2_writer(v, pre), &t, err, sizeof err);
    if (rc)
        diag("load gpt2/%s: %d %s", pre ? pre : "(none)", rc, err);
    return t;
}

/* s with control characters escaped, for a one-line test name */
static const char *esc(const char *s)
{
    static char buf[256];
    size_t at = 0;
    for (; *s && at + 4 < sizeof buf; s++) {
        if (*s == '\n' || *s == '\r' || *s == '\t') {
            buf[at++] = '\\';
            buf[at++] = *s == '\n' ? 'n' : *s == '\r' ? 'r' : 't';
        } else {
            buf[at++] = *s;
        }
    }
    buf[at] = 0;
    return buf;
}

static void check_pieces(const cairn__tok *t, const char *pre, const char *text, const char *want)
{
    char *got = pieces(t, text, 0);
    if (!ok(strcmp(got, want) == 0, "%s: pre-tokenizes \"%s\"", pre, esc(text))) {
        diag("got  [%s]", esc(got));
        diag("want [%s]", esc(want));
    }
    free(got);
}

static void test_gpt2_pretokenizers(void)
{
    struct vocab v;
    cairn__tok *t;
    build_gpt2_vocab(&v);

    t = load_gpt2(&v, "gpt-2");
    ok(t != NULL, "gpt2 vocabulary (%zu tokens, %zu merges) loads", v.n, v.nm);
    if (t) {
        ok(strcmp(cairn__tok_kind(t), "gpt2") == 0 && strcmp(cairn__tok_pre(t), "gpt-2") == 0,
           "kind gpt2, pre gpt-2");
        check_pieces(t, "gpt-2", "Hello world", "Hello| world");
        check_pieces(t, "gpt-2", "I'm here's", "I|'m| here|'s");
        check_pieces(t, "gpt-2", "it'S", "it|'|S"); /* contractions are case-sensitive */
        check_pieces(t, "gpt-2", "abc 12345", "abc| 12345");
        check_pieces(t, "gpt-2", "a  b", "a| | b");
        check_pieces(t, "gpt-2", "x\n\ny", "x|\n|\n|y");
        check_pieces(t, "gpt-2", "end  ", "end|  ");
        check_pieces(t, "gpt-2", "!!! ok", "!!!| ok");
        check_pieces(t, "gpt-2", " 1", " 1");
        check_pieces(t, "gpt-2", "Привет мир", "Привет| мир");
        check_pieces(t, "gpt-2", " xyz", " |x|y|z");
        cairn__tok_free(t);
    }

    t = load_gpt2(&v, NULL);
    ok(t && strcmp(cairn__tok_pre(t), "default") == 0,
       "no tokenizer.ggml.pre: default (GPT-2 regex)");
    if (t)
        check_pieces(t, "default", "I'm here's", "I|'m| here|'s");
    cairn__tok_free(t);

    t = load_gpt2(&v, "llama-bpe");
    ok(t != NULL, "llama-bpe loads");
    if (t) {
        check_pieces(t, "llama-bpe", "I'M HERE'S", "I|'M| HERE|'S"); /* case-insensitive */
        check_pieces(t, "llama-bpe", "abc 12345", "abc| |123|45");
        check_pieces(t, "llama-bpe", "x\n\ny", "x|\n\n|y");
        check_pieces(t, "llama-bpe", "  hi", " | hi");
        check_pieces(t, "llama-bpe", "$abc", "$abc");
        check_pieces(t, "llama-bpe", "a!!\n\nb", "a|!!\n\n|b");
        check_pieces(t, "llama-bpe", "a  \nb", "a|  \n|b");
        check_pieces(t, "llama-bpe", "\tit", "\tit"); /* one non-letter may lead a word */
        check_pieces(t, "llama-bpe", "12345", "123|45");
        check_pieces(t, "llama-bpe", " xyz", " xyz"); /* ignore_merges: the word is a token */
        cairn__tok_free(t);
    }

    t = load_gpt2(&v, "qwen2");
    ok(t != NULL, "qwen2 loads");
    if (t) {
        check_pieces(t, "qwen2", "abc 12345", "abc| |1|2|3|4|5");
        check_pieces(t, "qwen2", "I'M", "I|'M");
        check_pieces(t, "qwen2", " xyz", " |x|y|z"); /* no ignore_merges */
        cairn__tok_free(t);
    }

    t = load_gpt2(&v, "smollm");
    ok(t != NULL, "smollm loads");
    if (t) {
        check_pieces(t, "smollm", "abc 12345", "abc| |1|2|3|4|5");
        check_pieces(t, "smollm", " 1", " |1");
        check_pieces(t, "smollm", "a1b", "a|1|b");
        check_pieces(t, "smollm", "I'm here's", "I|'m| here|'s");
        cairn__tok_free(t);
    }
    t = load_gpt2(&v, "starcoder");
    ok(t != NULL, "starcoder loads");
    if (t) {
        check_pieces(t, "starcoder", "12 45", "1|2| |4|5");
        cairn__tok_free(t);
    }
    vocab_free(&v);
}

static void test_gpt2_special_and_decode(void)
{
    struct vocab v;
    cairn__tok *t;
    int32_t im_start, im_end, eot, im, tool, a, b;
    build_gpt2_vocab(&v);
    t = load_gpt2(&v, "gpt-2");
    if (!t) {
        ok(0, "gpt2 vocabulary loads");
        vocab_free(&v);
        return;
    }
    im_start = cairn__tok_find(t, "<|im_start|>", 12);
    im_end = cairn__tok_find(t, "<|im_end|>", 10);
    eot = cairn__tok_find(t, "<|endoftext|>", 13);
    im = cairn__tok_find(t, "<|im", 4);
    tool = cairn__tok_find(t, "<tool>", 6);
    a = cairn__tok_find(t, "a", 1);
    b = cairn__tok_find(t, "b", 1);
    ok(im_start >= 0 && im_end >= 0 && eot >= 0 && im >= 0 && tool >= 0 && a >= 0 && b >= 0,
       "special tokens are in the vocabulary");
    {
        int32_t want[] = {a, im_end, b};
        ok(ids_eq(t, "a<|im_end|>b", 0, 1, want, 3), "parse_special: <|im_end|> becomes one token");
    }
    {
        int32_t want[] = {im_start, a};
        ok(ids_eq(t, "<|im_start|>a", 0, 1, want, 2),
           "longest special wins (<|im_start|> over <|im)");
    }
    {
        int32_t want[] = {im, a};
        ok(ids_eq(t, "<|ima", 0, 1, want, 2), "a user-defined token is matched too");
    }
    {
        int32_t want[] = {tool, tool};
        ok(ids_eq(t, "<tool><tool>", 0, 1, want, 2), "adjacent specials");
    }
    {
        int32_t *ids;
        size_t n, i;
        int found = 0;
        cairn__tok_encode(t, "a<|im_end|>b", 12, 0, 0, &ids, &n);
        for (i = 0; i < n; i++)
            found |= ids[i] == im_end;
        ok(!found && n > 3, "without parse_special the text stays text (%zu tokens)", n);
        free(ids);
    }
    {
        int32_t none[1];
        ok(ids_eq(t, "", 1, 1, none, 0), "gpt2 adds no BOS by default; empty text -> no ids");
    }
    ok(cairn__tok_is_eog(t, im_end) && cairn__tok_is_eog(t, eot) &&
           !cairn__tok_is_eog(t, im_start) && !cairn__tok_is_eog(t, a),
       "end-of-generation: <|im_end|> and <|endoftext|>, not <|im_start|> or text");
    ok(cairn__tok_type(t, im_end) == CAIRN__TOK_CONTROL &&
           cairn__tok_type(t, tool) == CAIRN__TOK_USER_DEFINED && cairn__tok_type(t, -1) == -1,
       "token types");

    /* decoding */
    {
        const char *s = "a<|im_end|>b";
        int32_t *ids;
        size_t n, dl;
        char *d;
        cairn__tok_encode(t, s, strlen(s), 0, 1, &ids, &n);
        cairn__tok_decode(t, ids, n, 0, &d, &dl);
        ok(dl == 2 && memcmp(d, "ab", 2) == 0, "control tokens vanish from decoded text");
        free(d);
        cairn__tok_decode(t, ids, n, CAIRN__TOK_DECODE_SPECIAL, &d, &dl);
        ok(dl == strlen(s) && memcmp(d, s, dl) == 0, "DECODE_SPECIAL renders them");
        free(d);
        free(ids);
    }
    {
        const char *s =
            "Hello world, I'm here!\n\tПривет мир 😀 \xff\xfe invalid \xe2\x82 bytes\r\n";
        ok(roundtrip(t, s, strlen(s), 0, 0), "byte-exact round trip incl. emoji and invalid UTF-8");
    }
    {
        unsigned char all[256];
        int i;
        for (i = 0; i < 256; i++)
            all[i] = (unsigned char)i;
        ok(roundtrip(t, (const char *)all, 256, 0, 0), "all 256 byte values round-trip");
    }
    {
        int32_t bad = (int32_t)cairn__tok_n_vocab(t);
        char *d;
        size_t dl;
        const char *p;
        ok(cairn__tok_decode(t, &bad, 1, 0, &d, &dl) == CAIRN_EINVAL && d == NULL,
           "decode rejects an id out of range");
        ok(cairn__tok_piece(t, bad, &p, &dl) == CAIRN_EINVAL &&
               cairn__tok_piece(t, -1, &p, &dl) == CAIRN_EINVAL,
           "piece rejects ids out of range");
    }

    /* streaming: an emoji spread over four byte tokens comes out whole */
    {
        const char *emoji = "\xf0\x9f\x98\x80";
        int32_t *ids;
        size_t n, i, l, total = 0, early = 0;
        const char *o;
        char acc[64];
        cairn__tok_stream *s = cairn__tok_stream_new(t, 0);
        cairn__tok_encode(t, emoji, 4, 0, 0, &ids, &n);
        ok(n == 4, "an unmerged emoji is four byte tokens");
        for (i = 0; i < n; i++) {
            cairn__tok_stream_push(s, ids[i], &o, &l);
            if (i + 1 < n)
                early += l;
            memcpy(acc + total, o, l);
            total += l;
        }
        ok(early == 0 && total == 4 && memcmp(acc, emoji, 4) == 0,
           "stream holds partial UTF-8 until the character completes");
        cairn__tok_stream_flush(s, &o, &l);
        ok(l == 0, "nothing left to flush");
        free(ids);

        /* a truncated character followed by ASCII is passed through, not swallowed */
        cairn__tok_encode(t, "\xe2\x82", 2, 0, 0, &ids, &n);
        total = 0;
        for (i = 0; i < n; i++) {
            cairn__tok_stream_push(s, ids[i], &o, &l);
            total += l;
        }
        ok(total == 0, "a started character is held back");
        free(ids);
        cairn__tok_stream_push(s, a, &o, &l);
        ok(l == 3 && memcmp(o,
                            "\xe2\x82"
                            "a",
                            3) == 0,
           "and released as-is when it cannot complete");
        cairn__tok_encode(t, "\xf0\x9f", 2, 0, 0, &ids, &n);
        for (i = 0; i < n; i++)
            cairn__tok_stream_push(s, ids[i], &o, &l);
        cairn__tok_stream_flush(s, &o, &l);
        ok(l == 2 && memcmp(o, "\xf0\x9f", 2) == 0,
           "flush returns an unfinished character at the end");
        free(ids);
        ok(cairn__tok_stream_push(s, -5, &o, &l) == CAIRN_EINVAL, "stream rejects a bad id");
        cairn__tok_stream_free(s);
    }
    cairn__tok_free(t);
    vocab_free(&v);
}

/* ---- the small SentencePiece vocabulary ---------------------------------------------------- */

struct spm_entry {
    const char *text;
    float score;
};

static const struct spm_entry spm_pieces[] = {
    {"\xe2\x96\x81", -20},
    {"h", -30},
    {"e", -30},
    {"l", -30},
    {"o", -30},
    {"w", -30},
    {"r", -30},
    {"d", -30},
    {"a", -30},
    {"b", -30},
    {"c", -30},
    {"x", -30},
    {"y", -30},
    {"z", -30},
    {"he", -5},
    {"ll", -3},
    {"llo", -4},
    {"hello", -2},
    {"\xe2\x96\x81hello", -1},
    {"\xe2\x96\x81w", -8},
    {"or", -7},
    {"ld", -6.5f},
    {"orld", -6.8f},
    {"world", -2.5f},
    {"\xe2\x96\x81world", -1.5f},
    {"wor", -9},
    {"ab", -1},
    {"bc", -0.5f},
    {"xy", -2},
    {"yz", -2},
    {"aa", -10},
    {"aaaa", -11},
    {"aaaaaaaa", -12},
};

/* ids: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then spm_pieces in order */
#define SPM_PIECE(i) (259 + (i))
#define SPM_BYTE(b) (3 + (b))

/* eos_type: the type of </s> (CONTROL in most files, USER_DEFINED in phi-3's); name: general.name
 * or NULL */
static cairn__gguf_writer *spm_writer(int space_prefix, int add_eos, int eos_type, const char *name)
{
    size_t n = 259 + sizeof spm_pieces / sizeof spm_pieces[0], i;
    char **tok = malloc(n * sizeof *tok);
    float *score = malloc(n * sizeof *score);
    int32_t *type = malloc(n * sizeof *type);
    cairn__gguf_writer *w = gw_new(3, 32);
    tok[0] = strdup("<unk>");
    tok[1] = strdup("<s>");
    tok[2] = strdup("</s>");
    type[0] = CAIRN__TOK_UNKNOWN;
    type[1] = CAIRN__TOK_CONTROL;
    type[2] = eos_type;
    score[0] = score[1] = score[2] = 0;
    for (i = 0; i < 256; i++) {
        char b[8];
        snprintf(b, sizeof b, "<0x%02X>", (unsigned)i);
        tok[3 + i] = strdup(b);
        type[3 + i] = CAIRN__TOK_BYTE;
        score[3 + i] = 0;
    }
    for (i = 0; i < sizeof spm_pieces / sizeof spm_pieces[0]; i++) {
        tok[259 + i] = strdup(spm_pieces[i].text);
        type[259 + i] = CAIRN__TOK_NORMAL;
        score[259 + i] = spm_pieces[i].score;
    }
    gw_kv_str(w, "general.architecture", "llama");
    if (name)
        gw_kv_str(w, "general.name", name);
    gw_kv_str(w, "tokenizer.ggml.model", "llama");
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, n);
    gw_kv_arr_f32(w, "tokenizer.ggml.scores", score, n);
    gw_kv_arr_i32(w, "tokenizer.ggml.token_type", type, n);
    gw_kv_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gw_kv_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gw_kv_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    if (space_prefix >= 0)
        gw_kv_bool(w, "tokenizer.ggml.add_space_prefix", space_prefix);
    if (add_eos >= 0)
        gw_kv_bool(w, "tokenizer.ggml.add_eos_token", add_eos);
    for (i = 0; i < n; i++)
        free(tok[i]);
    free(tok);
    free(score);
    free(type);
    return w;
}

static int spm_piece_id(const char *text)
{
    size_t i;
    for (i = 0; i < sizeof spm_pieces / sizeof spm_pieces[0]; i++)
        if (strcmp(spm_pieces[i].text, text) == 0)
            return SPM_PIECE((int)i);
    return -1;
}

static void test_spm(void)
{
    cairn__tok *t;
    char err[256];
    int rc = load_w(spm_writer(-1, -1, CAIRN__TOK_CONTROL, NULL), &t, err, sizeof err);
    int32_t sp = spm_piece_id("\xe2\x96\x81"), hello = spm_piece_id("\xe2\x96\x81hello"),
            world = spm_piece_id("\xe2\x96\x81world");
    ok(rc == 0, "SPM vocabulary loads (%d %s)", rc, err);
    if (rc)
        return;
    ok(strcmp(cairn__tok_kind(t), "llama") == 0 && cairn__tok_bos(t) == 1 &&
           cairn__tok_eos(t) == 2 && cairn__tok_unk(t) == 0 && cairn__tok_add_bos(t) &&
           !cairn__tok_add_eos(t),
       "SPM defaults: BOS added, EOS not; ids from metadata");
    {
        int32_t want[] = {hello, world};
        ok(ids_eq(t, "hello world", 0, 0, want, 2),
           "score-ordered merges: hello world -> ▁hello ▁world");
    }
    {
        int32_t want[] = {1, hello, world};
        ok(ids_eq(t, "hello world", 1, 0, want, 3), "add_special adds BOS");
    }
    {
        int32_t want[] = {sp, spm_piece_id("a"), spm_piece_id("bc")};
        ok(ids_eq(t, "abc", 0, 0, want, 3), "the higher-scoring pair merges first (bc over ab)");
    }
    {
        int32_t want[] = {sp, spm_piece_id("xy"), spm_piece_id("z")};
        ok(ids_eq(t, "xyz", 0, 0, want, 3), "equal scores: the leftmost pair merges first");
    }
    {
        int32_t want[] = {sp, SPM_BYTE(0xC3), SPM_BYTE(0xA9), SPM_BYTE('\n')};
        ok(ids_eq(t, "\xc3\xa9\n", 0, 0, want, 4),
           "byte fallback for characters not in the vocabulary");
    }
    {
        int32_t want[] = {1, sp, SPM_BYTE(0xFF), SPM_BYTE('A')};
        ok(ids_eq(t,
                  "<s>\xff"
                  "A",
                  0, 1, want, 4),
           "invalid UTF-8 byte falls back; <s> parsed, prefix after it");
    }
    {
        int32_t want[] = {hello, 2, sp, spm_piece_id("a")};
        ok(ids_eq(t, "hello</s>a", 0, 1, want, 4),
           "text after a special gets the space prefix again");
    }
    {
        int32_t none[1];
        int32_t bos[] = {1};
        ok(ids_eq(t, "", 0, 0, none, 0), "empty text: no ids");
        ok(ids_eq(t, "", 1, 0, bos, 1), "empty text with add_special: just BOS");
    }
    {
        int32_t ids[] = {1, hello, world, 2};
        char *d;
        size_t dl;
        cairn__tok_decode(t, ids, 4, 0, &d, &dl);
        ok(strcmp(d, " hello world") == 0, "decode: ▁ becomes a space, control tokens vanish");
        free(d);
        cairn__tok_decode(t, ids, 4, CAIRN__TOK_DECODE_STRIP_SPACE, &d, &dl);
        ok(strcmp(d, "hello world") == 0, "decode STRIP_SPACE drops the prefix space");
        free(d);
        cairn__tok_decode(t, ids, 4, CAIRN__TOK_DECODE_SPECIAL, &d, &dl);
        ok(strcmp(d, "<s> hello world</s>") == 0, "decode SPECIAL shows control tokens");
        free(d);
    }
    {
        const char *s = "hello world \xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80 \xff\tabc  xyz\n";
        ok(roundtrip(t, s, strlen(s), CAIRN__TOK_DECODE_STRIP_SPACE, 0),
           "SPM round trip with byte fallback");
    }
    {
        cairn__tok_stream *s = cairn__tok_stream_new(t, CAIRN__TOK_DECODE_STRIP_SPACE);
        const char *o;
        size_t l;
        char acc[64];
        size_t at = 0;
        int32_t ids[] = {1, hello, SPM_BYTE(0xC3), SPM_BYTE(0xA9), world};
        size_t i, lens[5];
        for (i = 0; i < 5; i++) {
            cairn__tok_stream_push(s, ids[i], &o, &l);
            lens[i] = l;
            memcpy(acc + at, o, l);
            at += l;
        }
        acc[at] = 0;
        ok(strcmp(acc, "hello\xc3\xa9 world") == 0 && lens[0] == 0 && lens[2] == 0 && lens[3] == 2,
           "SPM streaming: BOS silent, prefix stripped once, é held until complete");
        cairn__tok_stream_free(s);
    }
    /* a long input without spaces: the heap keeps this near-linear */
    {
        size_t n = 200000;
        char *big = malloc(n);
        int32_t *ids;
        size_t nids;
        double t0;
        int good;
        memset(big, 'a', n);
        t0 = now_s();
        good = cairn__tok_encode(t, big, n, 0, 0, &ids, &nids) == 0;
        t0 = now_s() - t0;
        diag("SPM: %zu bytes without spaces -> %zu tokens in %.1f ms", n, nids, t0 * 1e3);
        ok(good && nids > n / 8 && nids < n / 4, "long SPM input tokenizes into 8-byte pieces");
        /* the time is reported, not asserted (no timed tests): a quadratic merge would show
         * here as minutes */
        free(ids);
        free(big);
    }
    cairn__tok_free(t);

    rc = load_w(spm_writer(0, 1, CAIRN__TOK_CONTROL, NULL), &t, err, sizeof err);
    ok(rc == 0, "SPM without space prefix, with EOS loads");
    if (rc == 0) {
        int32_t want[] = {1, spm_piece_id("hello"), 2};
        ok(ids_eq(t, "hello", 1, 0, want, 3),
           "add_space_prefix=false: no ▁; add_eos_token: EOS appended");
        cairn__tok_free(t);
    }
}

/* ---- added tokens: llama.cpp's rules ------------------------------------------------------ */

/* The gpt2 vocabulary plus added tokens as mpt's has them (runs of spaces, USER_DEFINED, raw
 * text), overlapping USER_DEFINED tokens, and control-looking tokens the file calls USER_DEFINED.
 */
static void test_added_gpt2(void)
{
    struct vocab v;
    cairn__tok *t;
    int32_t sp2, sp3, ab, bcd, tool, fim, eot, a, b, hello, *ids;
    size_t n;
    build_gpt2_vocab(&v);
    sp2 = vocab_add(&v, "  ", CAIRN__TOK_USER_DEFINED);
    sp3 = vocab_add(&v, "   ", CAIRN__TOK_USER_DEFINED);
    ab = vocab_add(&v, "xab", CAIRN__TOK_USER_DEFINED);
    bcd = vocab_add(&v, "abcd", CAIRN__TOK_USER_DEFINED);
    fim = vocab_add(&v, "<|fim_prefix|>", CAIRN__TOK_USER_DEFINED);
    eot = vocab_add(&v, "<|eot_id|>", CAIRN__TOK_USER_DEFINED);
    t = load_gpt2(&v, "mpt");
    if (!ok(t != NULL, "gpt2 vocabulary with added tokens loads")) {
        vocab_free(&v);
        return;
    }
    tool = cairn__tok_find(t, "<tool>", 6);
    a = cairn__tok_find(t, "a", 1);
    b = cairn__tok_find(t, "b", 1);
    hello = cairn__tok_find(t, "Hello", 5);
    {
        int32_t want[] = {sp3, hello};
        ok(ids_eq(t, "   Hello", 0, 0, want, 2),
           "plain text: a USER_DEFINED run of spaces is one token (mpt's '   Hello')");
    }
    {
        int32_t want[] = {sp3, sp2, hello};
        ok(ids_eq(t, "     Hello", 0, 0, want, 3), "the longest run first, the rest after it");
    }
    {
        int32_t want[] = {a, tool, b};
        ok(ids_eq(t, "a<tool>b", 0, 0, want, 3), "plain text: a USER_DEFINED tag is one token");
    }
    {
        /* "xab" matches first from the left, but the longer "abcd" is cut out first */
        int32_t want[] = {cairn__tok_find(t, "x", 1), bcd};
        ok(ids_eq(t, "xabcd", 0, 0, want, 2) && ids_eq(t, "xabcd", 0, 1, want, 2),
           "overlapping added tokens: the longer one wins, not the leftmost");
        (void)ab;
    }
    ok(cairn__tok_type(t, fim) == CAIRN__TOK_CONTROL &&
           cairn__tok_type(t, eot) == CAIRN__TOK_CONTROL &&
           cairn__tok_type(t, tool) == CAIRN__TOK_USER_DEFINED,
       "control-looking USER_DEFINED tokens (<|fim_prefix|>, <|eot_id|>) become CONTROL");
    ok(cairn__tok_is_eog(t, eot) && !cairn__tok_is_eog(t, fim), "<|eot_id|> ends a generation");
    {
        int32_t want[] = {a, fim, eot};
        size_t i;
        int found = 0;
        cairn__tok_encode(t, "a<|fim_prefix|><|eot_id|>", 25, 0, 0, &ids, &n);
        for (i = 0; i < n; i++)
            found |= ids[i] == fim || ids[i] == eot;
        free(ids);
        ok(!found && n > 3, "so their text stays text without parse_special (%zu tokens)", n);
        ok(ids_eq(t, "a<|fim_prefix|><|eot_id|>", 0, 1, want, 3), "and is parsed with it");
    }
    {
        const char *s = "a   b<tool>  xabcd\n";
        ok(roundtrip(t, s, strlen(s), 0, 0), "added tokens decode back to their text");
    }
    cairn__tok_free(t);
    vocab_free(&v);
}

/* phi-3: "</s>" is USER_DEFINED, and general.name makes added tokens eat the spaces right of
 * them. The vocabulary is the small SPM one, which has ▁ and a but no ▁a. */
static void test_added_phi3(void)
{
    cairn__tok *t;
    char err[256];
    int32_t sp = spm_piece_id("\xe2\x96\x81"), a = spm_piece_id("a"),
            hello = spm_piece_id("\xe2\x96\x81hello");
    int rc = load_w(spm_writer(-1, -1, CAIRN__TOK_USER_DEFINED, "Phi3-Mini-4K-Instruct"), &t, err,
                    sizeof err);
    if (!ok(rc == 0, "SPM vocabulary named phi3 loads (%d %s)", rc, err))
        return;
    {
        int32_t want[] = {sp, a, sp, 2, sp, a};
        ok(ids_eq(t, "a </s> a", 0, 0, want, 6),
           "phi-3: plain-text </s> is the token and takes the spaces right of it");
    }
    {
        int32_t want[] = {hello, 2, sp, a};
        ok(ids_eq(t, "hello</s> \t a", 0, 0, want, 4), "tabs too (C isspace)");
    }
    {
        int32_t want[] = {1, sp, sp, a};
        ok(ids_eq(t, "<s> a", 0, 1, want, 4), "phi-3: <s> keeps the space right of it");
    }
    cairn__tok_free(t);

    rc = load_w(spm_writer(-1, -1, CAIRN__TOK_USER_DEFINED, "Llama-2-7b"), &t, err, sizeof err);
    if (!ok(rc == 0, "the same vocabulary under another name loads (%d %s)", rc, err))
        return;
    {
        int32_t want[] = {sp, a, sp, 2, sp, sp, a};
        ok(ids_eq(t, "a </s> a", 0, 0, want, 7),
           "another model: </s> is still matched, the space after it kept");
    }
    cairn__tok_free(t);

    rc = load_w(spm_writer(-1, -1, CAIRN__TOK_CONTROL, "phi-3"), &t, err, sizeof err);
    if (!ok(rc == 0, "phi-3 with a CONTROL </s> loads (%d %s)", rc, err))
        return;
    {
        int32_t want[] = {hello, 2, sp, a};
        ok(ids_eq(t, "hello</s> a", 0, 1, want, 4),
           "phi-3: a parsed control token takes the space right of it too");
        ok(!ids_eq(t, "hello</s> a", 0, 0, want, 4), "an unparsed control token is text");
    }
    cairn__tok_free(t);
}

/* ---- metadata errors ---------------------------------------------------------------------- */

static void expect_load_error(cairn__gguf_writer *w, int want_rc, const char *want_in_msg,
                              const char *what)
{
    cairn__tok *t;
    char err[256];
    int rc = load_w(w, &t, err, sizeof err);
    if (!ok(rc == want_rc && t == NULL && strstr(err, want_in_msg), "%s -> %d naming '%s'", what,
            want_rc, want_in_msg))
        diag("got rc %d, message '%s'", rc, err);
    cairn__tok_free(t);
}

static void test_errors(void)
{
    static const char *const toks[] = {"a", "b", "ab"};
    static const char *const merges[] = {"a b"};
    static const char *const bad_merges[] = {"ab"};
    float scores2[2] = {0, 0};
    int32_t types_bad[3] = {1, 9, 1};
    cairn__gguf_writer *w;

    w = gw_new(3, 32);
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    expect_load_error(w, CAIRN_EFORMAT, "tokenizer.ggml.model", "no tokenizer model");

    w = gw_new(3, 32);
    gw_kv_str(w, "tokenizer.ggml.model", "bert");
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    expect_load_error(w, CAIRN_EUNSUPPORTED, "bert", "unsupported model");

    w = gw_new(3, 32);
    gw_kv_str(w, "tokenizer.ggml.model", "gpt2");
    gw_kv_str(w, "tokenizer.ggml.pre", "made-up");
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    gw_kv_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    expect_load_error(w, CAIRN_EUNSUPPORTED, "made-up", "unsupported pre-tokenizer");

    {
        /* pre-tokenizers llama.cpp has and cairn does not (yet) */
        static const char *const refused[] = {"deepseek-coder", "deepseek-llm", "falcon"};
        size_t i;
        for (i = 0; i < sizeof refused / sizeof refused[0]; i++) {
            w = gw_new(3, 32);
            gw_kv_str(w, "tokenizer.ggml.model", "gpt2");
            gw_kv_str(w, "tokenizer.ggml.pre", refused[i]);
            gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
            gw_kv_arr_str(w, "tokenizer.ggml.merges", merges, 1);
            expect_load_error(w, CAIRN_EUNSUPPORTED, refused[i], "refused pre-tokenizer");
        }
    }

    w = gw_new(3, 32);
    gw_kv_u32(w, "general.name", 3);
    gw_kv_str(w, "tokenizer.ggml.model", "gpt2");
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    gw_kv_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    expect_load_error(w, CAIRN_EFORMAT, "general.name", "general.name not a string");

    w = gw_new(3, 32);
    gw_kv_str(w, "tokenizer.ggml.model", "llama");
    gw_kv_arr_f32(w, "tokenizer.ggml.tokens", scores2, 2);
    expect_load_error(w, CAIRN_EFORMAT, "tokenizer.ggml.tokens", "tokens not strings");

    w = gw_new(3, 32);
    gw_kv_str(w, "tokenizer.ggml.model", "llama");
    expect_load_error(w, CAIRN_EFORMAT, "tokenizer.ggml.tokens", "tokens missing");

    w = gw_new(3, 32);
    gw_kv_str(w, "tokenizer.ggml.model", "llama");
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    gw_kv_arr_f32(w, "tokenizer.ggml.scores", scores2, 2);
    expect_load_error(w, CAIRN_EFORMAT, "tokenizer.ggml.scores", "scores of the wrong length");

    w = gw_new(3, 32);
    gw_kv_str(w, "tokenizer.ggml.model", "llama");
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    gw_kv_arr_i32(w, "tokenizer.ggml.token_type", types_bad, 3);
    expect_load_error(w, CAIRN_EFORMAT, "tokenizer.ggml.token_type[1]", "invalid token type");

    w = gw_new(3, 32);
    gw_kv_str(w, "tokenizer.ggml.model", "gpt2");
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    expect_load_error(w, CAIRN_EFORMAT, "tokenizer.ggml.merges", "gpt2 without merges");

    w = gw_new(3, 32);
    gw_kv_str(w, "tokenizer.ggml.model", "gpt2");
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    gw_kv_arr_str(w, "tokenizer.ggml.merges", bad_merges, 1);
    expect_load_error(w, CAIRN_EFORMAT, "tokenizer.ggml.merges[0]", "merge without a space");

    w = gw_new(3, 32);
    gw_kv_str(w, "tokenizer.ggml.model", "llama");
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    gw_kv_str(w, "tokenizer.ggml.bos_token_id", "1");
    expect_load_error(w, CAIRN_EFORMAT, "tokenizer.ggml.bos_token_id", "BOS id as a string");

    w = gw_new(3, 32);
    gw_kv_str(w, "tokenizer.ggml.model", "llama");
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    gw_kv_u32(w, "tokenizer.ggml.add_bos_token", 1);
    expect_load_error(w, CAIRN_EFORMAT, "tokenizer.ggml.add_bos_token", "add_bos_token not a bool");

    /* a BOS/EOS/UNK id outside the vocabulary would silently drop BOS or never end a
     * generation: an error naming the key */
    w = gw_new(3, 32);
    gw_kv_str(w, "tokenizer.ggml.model", "llama");
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    gw_kv_u32(w, "tokenizer.ggml.eos_token_id", 77);
    expect_load_error(w, CAIRN_EFORMAT, "tokenizer.ggml.eos_token_id",
                      "EOS id past the vocabulary");
    w = gw_new(3, 32);
    gw_kv_str(w, "tokenizer.ggml.model", "llama");
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    gw_kv_u32(w, "tokenizer.ggml.bos_token_id", 3);
    expect_load_error(w, CAIRN_EFORMAT, "tokenizer.ggml.bos_token_id",
                      "BOS id past the vocabulary");
    w = gw_new(3, 32);
    gw_kv_str(w, "tokenizer.ggml.model", "llama");
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    gw_kv_u32(w, "tokenizer.ggml.unknown_token_id", 1000);
    expect_load_error(w, CAIRN_EFORMAT, "tokenizer.ggml.unknown_token_id",
                      "UNK id past the vocabulary");

    /* other out-of-range ids (padding, as files in the wild have) mean none, not fatal */
    {
        cairn__tok *t;
        char err[256];
        int rc;
        w = gw_new(3, 32);
        gw_kv_str(w, "tokenizer.ggml.model", "llama");
        gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
        gw_kv_u32(w, "tokenizer.ggml.padding_token_id", 77);
        rc = load_w(w, &t, err, sizeof err);
        ok(rc == 0, "a padding id beyond the vocabulary means none (%s)", rc ? err : "");
        /* and a vocabulary without byte tokens or unk drops what it cannot spell, no crash */
        if (t) {
            int32_t *ids;
            size_t n;
            ok(cairn__tok_encode(t, "ab\xc3\xa9", 4, 1, 1, &ids, &n) == 0,
               "encode with a degenerate vocabulary");
            free(ids);
        }
        cairn__tok_free(t);
    }
    {
        cairn__tok_spec sp;
        cairn__tok *t = (cairn__tok *)1;
        char err[128];
        cairn__tok_spec_init(&sp);
        ok(cairn__tok_new(&sp, &t, err, sizeof err) == CAIRN_EINVAL && t == NULL,
           "tok_new rejects an empty spec");
        ok(cairn__tok_load(NULL, &t, err, sizeof err) == CAIRN_EINVAL, "tok_load rejects NULL");
        cairn__tok_free(NULL);
    }
}

/* A tokenizer built from plain arrays, without any GGUF. */
static void test_from_arrays(void)
{
    static const char *const toks[] = {"<unk>",
                                       "\xe2\x96\x81",
                                       "a",
                                       "b",
                                       ("\xe2\x96\x81"
                                        "ab"),
                                       "ab"};
    static const float scores[] = {0, -1, -1, -1, -0.5f, -0.7f};
    static const int32_t types[] = {2, 1, 1, 1, 1, 1};
    cairn__tok_spec sp;
    cairn__tok *t;
    char err[128];
    int rc;
    cairn__tok_spec_init(&sp);
    sp.model = "llama";
    sp.n_vocab = 6;
    sp.tokens = toks;
    sp.scores = scores;
    sp.types = types;
    sp.unk = 0;
    rc = cairn__tok_new(&sp, &t, err, sizeof err);
    ok(rc == 0, "tok_new from arrays");
    if (rc == 0) {
        int32_t want[] = {4};
        int32_t want_unk[] = {1, 0};
        ok(ids_eq(t, "ab", 0, 0, want, 1), "array-built SPM encodes");
        ok(ids_eq(t, "c", 0, 0, want_unk, 2), "no byte tokens: unknown token instead");
        ok(!cairn__tok_add_bos(t) || cairn__tok_bos(t) == -1, "no BOS id: none added");
        cairn__tok_free(t);
    }
}

/* ---- chat formats ------------------------------------------------------------------------ */

static void test_chat(void)
{
    cairn__chat_msg m[] = {{"system", "Be brief."}, {"user", "Hi"}};
    char *s;
    size_t n;
    int fmt = -1;
    ok(cairn__chat_render(CAIRN__CHAT_CHATML, m, 2, 1, &s, &n) == 0 &&
           strcmp(s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                     "<|im_start|>assistant\n") == 0 &&
           n == strlen(s),
       "chatml rendering");
    free(s);
    ok(cairn__chat_render(CAIRN__CHAT_LLAMA3, m, 2, 1, &s, &n) == 0 &&
           strcmp(
               s,
               "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
               "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
               "<|start_header_id|>assistant<|end_header_id|>\n\n") == 0,
       "llama3 rendering");
    free(s);
    ok(cairn__chat_render(CAIRN__CHAT_RAW, m, 2, 1, &s, &n) == 0 && strcmp(s, "Be brief.\nHi") == 0,
       "raw: contents only");
    free(s);
    ok(cairn__chat_render(CAIRN__CHAT_CHATML, NULL, 0, 0, &s, &n) == 0 && n == 0 && s && s[0] == 0,
       "no messages: empty prompt");
    free(s);
    m[0].role = NULL;
    ok(cairn__chat_render(CAIRN__CHAT_CHATML, m, 2, 1, &s, &n) == CAIRN_EINVAL && s == NULL,
       "NULL role rejected");
    ok(cairn__chat_render(7, m + 1, 1, 1, &s, &n) == CAIRN_EINVAL, "unknown format rejected");
    ok(cairn__chat_format_parse("llama3", &fmt) == 0 && fmt == CAIRN__CHAT_LLAMA3 &&
           cairn__chat_format_parse("nope", &fmt) == CAIRN_EINVAL &&
           strcmp(cairn__chat_format_name(CAIRN__CHAT_CHATML), "chatml") == 0,
       "format names");
    ok(cairn__chat_has_special(CAIRN__CHAT_CHATML, "x<|im_end|>y") &&
           !cairn__chat_has_special(CAIRN__CHAT_CHATML, "x"),
       "has_special spots injected markup");
    ok(!cairn__chat_add_special(CAIRN__CHAT_LLAMA3) && cairn__chat_add_special(CAIRN__CHAT_CHATML),
       "llama3 prompts carry their own BOS");

    /* gemma, phi-3, mistral: the strings llama.cpp's llm_chat_apply_template makes */
    cairn__chat_msg conv[] = {
        {"system", " Be brief. "}, {"user", "Hi\n"}, {"assistant", "Hello."}, {"user", "Bye"}};
    ok(cairn__chat_render(CAIRN__CHAT_GEMMA, conv, 4, 1, &s, &n) == 0 &&
           strcmp(s, "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
                     "<start_of_turn>model\nHello.<end_of_turn>\n"
                     "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n") == 0,
       "gemma: the system text opens the first user turn, contents trimmed, assistant is model");
    free(s);
    conv[0].content = "Be brief.";
    conv[1].content = "Hi";
    ok(cairn__chat_render(CAIRN__CHAT_PHI3, conv, 4, 1, &s, &n) == 0 &&
           strcmp(s, "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello."
                     "<|end|>\n<|user|>\nBye<|end|>\n<|assistant|>\n") == 0,
       "phi3 rendering");
    free(s);
    ok(cairn__chat_render(CAIRN__CHAT_MISTRAL, conv, 4, 1, &s, &n) == 0 &&
           strcmp(s, " [INST] Be brief.\n\nHi [/INST] Hello.</s> [INST] Bye [/INST]") == 0,
       "mistral (v1) rendering");
    free(s);
    cairn__chat_msg tool[] = {{"tool", "x"}};
    ok(cairn__chat_render(CAIRN__CHAT_PHI3, tool, 1, 1, &s, &n) == CAIRN_EINVAL &&
           cairn__chat_render(CAIRN__CHAT_GEMMA, tool, 1, 0, &s, &n) == 0 &&
           strcmp(s, "<start_of_turn>tool\nx<end_of_turn>\n") == 0,
       "phi3 takes only its three roles (its roles are markers); gemma writes any role");
    free(s);
    int gemma = -1, phi3 = -1, mistral = -1;
    ok(cairn__chat_format_parse("gemma", &gemma) == 0 && gemma == CAIRN__CHAT_GEMMA &&
           cairn__chat_format_parse("phi3", &phi3) == 0 && phi3 == CAIRN__CHAT_PHI3 &&
           cairn__chat_format_parse("mistral", &mistral) == 0 && mistral == CAIRN__CHAT_MISTRAL &&
           !strcmp(cairn__chat_format_name(CAIRN__CHAT_MISTRAL), "mistral"),
       "gemma, phi3 and mistral by name");
    ok(cairn__chat_has_special(CAIRN__CHAT_GEMMA, "a<end_of_turn>b") &&
           cairn__chat_has_special(CAIRN__CHAT_PHI3, "<|end|>") &&
           cairn__chat_has_special(CAIRN__CHAT_MISTRAL, "x [/INST] y") &&
           !cairn__chat_has_special(CAIRN__CHAT_GEMMA, "<|end|>"),
       "has_special knows each format's markup");
    ok(!strcmp(cairn__chat_markers(CAIRN__CHAT_GEMMA)[0], "<start_of_turn>") &&
           cairn__chat_markers(CAIRN__CHAT_MISTRAL)[0] == NULL &&
           cairn__chat_markers(CAIRN__CHAT_RAW)[0] == NULL,
       "the markers a vocabulary must have: gemma's turns; none for mistral ([INST] works as "
       "text) or raw");

    /* a rendered chatml prompt tokenizes into the format's special tokens */
    {
        struct vocab v;
        cairn__tok *t;
        build_gpt2_vocab(&v);
        t = load_gpt2(&v, "gpt-2");
        if (t) {
            cairn__chat_msg u[] = {{"user", "Hello world"}};
            int32_t *ids;
            size_t k, cnt = 0;
            cairn__chat_render(CAIRN__CHAT_CHATML, u, 1, 1, &s, &n);
            cairn__tok_encode(t, s, n, 1, 1, &ids, &k);
            for (n = 0; n < k; n++)
                cnt += cairn__tok_type(t, ids[n]) == CAIRN__TOK_CONTROL;
            ok(cnt == 3 && ids[0] == cairn__tok_find(t, "<|im_start|>", 12),
               "chatml prompt has 3 control tokens");
            free(ids);
            free(s);
            cairn__tok_free(t);
        }
        vocab_free(&v);
    }
    {
        cairn__gguf_writer *w = gw_new(3, 32);
        unsigned char *buf;
        size_t len;
        cairn__gguf *g;
        char err[128];
        gw_kv_str(w, "tokenizer.chat_template",
                  "{% for m in messages %}<|start_header_id|>{{ m.role }}");
        gw_write_mem(w, &buf, &len);
        gw_free(w);
        ok(cairn__gguf_open_mem(buf, len, &g, err, sizeof err) == 0 &&
               cairn__chat_format_detect(g) == CAIRN__CHAT_LLAMA3 &&
               cairn__chat_format_detect(NULL) == CAIRN__CHAT_RAW,
           "format detected from tokenizer.chat_template");
        cairn__gguf_close(g);
        free(buf);
    }
    /* pieces of the models' own templates */
    static const struct {
        const char *tmpl;
        int fmt;
    } tmpls[] = {
        {"{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + role + '\n' + "
         "message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}",
         CAIRN__CHAT_GEMMA},
        {"{% for message in messages %}{% if message['role'] == 'user' %}{{'<|user|>' + '\n' + "
         "message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% endif %}",
         CAIRN__CHAT_PHI3},
        {"{{ bos_token }}{% for message in messages %}{{ '[INST] ' + message['content'] + ' "
         "[/INST]' }}{% endfor %}",
         CAIRN__CHAT_MISTRAL},
        {"{% for m in messages %}{{ m.content }}{% endfor %}", CAIRN__CHAT_RAW},
    };
    for (size_t i = 0; i < sizeof tmpls / sizeof *tmpls; i++) {
        cairn__gguf_writer *w = gw_new(3, 32);
        unsigned char *buf;
        size_t len;
        cairn__gguf *g = NULL;
        char err[128];
        gw_kv_str(w, "tokenizer.chat_template", tmpls[i].tmpl);
        gw_write_mem(w, &buf, &len);
        gw_free(w);
        int got = cairn__gguf_open_mem(buf, len, &g, err, sizeof err) == 0
                      ? cairn__chat_format_detect(g)
                      : -1;
        ok(got == tmpls[i].fmt, "--chat auto: template %zu is %s (got %s)", i,
           cairn__chat_format_name(tmpls[i].fmt), cairn__chat_format_name(got));
        cairn__gguf_close(g);
        free(buf);
    }
}

/* ---- reference vectors -------------------------------------------------------------------- */

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *p;
    long n;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    p = malloc((size_t)n + 1);
    *len = fread(p, 1, (size_t)n, f);
    p[*len] = 0;
    fclose(f);
    return p;
}

/* One vocabulary's vectors: NAME.gguf with NAME.gguf.inp and NAME.gguf.out beside it. A
 * vocabulary cairn refuses (tokenizer model or pre-tokenizer it does not implement) is skipped
 * with the reason, so a new file dropped into the folder shows up either way. */
static void test_reference(const char *dir, const char *name)
{
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char path[1024], err[256];
    char *inp, *out, *p, *o;
    size_t ni, no, count = 0, pass = 0, rt = 0;
    cairn__gguf *g;
    cairn__tok *t;
    double t0, t_load;
    int rc, exact_roundtrip;

    snprintf(path, sizeof path, "%s/%s", dir, name);
    t0 = now_s();
    rc = cairn__gguf_open(path, &g, err, sizeof err);
    if (rc == 0) {
        rc = cairn__tok_load(g, &t, err, sizeof err);
        cairn__gguf_close(g);
    }
    t_load = now_s() - t0;
    if (rc == CAIRN_EUNSUPPORTED) {
        skip("%s: %s", name, err);
        return;
    }
    if (!ok(rc == 0, "%s loads (%.1f ms)", name, t_load * 1e3)) {
        diag("%d %s", rc, err);
        return;
    }
    exact_roundtrip = strcmp(cairn__tok_kind(t), "llama") != 0; /* SPM adds a space prefix */
    snprintf(path, sizeof path, "%s/%s.inp", dir, name);
    inp = slurp(path, &ni);
    snprintf(path, sizeof path, "%s/%s.out", dir, name);
    out = slurp(path, &no);
    if (!inp || !out) {
        skip("%s: no %s.inp and .out beside it", name, name);
        free(inp);
        free(out);
        cairn__tok_free(t);
        return;
    }
    for (p = inp, o = out; *p;) {
        char *e = strstr(p, sep), *nl, got[16384];
        size_t len, n, i, at = 0;
        int32_t *ids;
        if (!e)
            break;
        len = (size_t)(e - p);
        nl = strchr(o, '\n');
        if (!nl)
            break;
        *nl = 0;
        got[0] = 0;
        if (cairn__tok_encode(t, p, len, 0, 0, &ids, &n) == 0) {
            for (i = 0; i < n && at + 16 < sizeof got; i++)
                at += (size_t)snprintf(got + at, sizeof got - at, " %d", ids[i]);
            free(ids);
        }
        count++;
        if (strcmp(got, o) == 0)
            pass++;
        else
            diag("%s mismatch for [%.*s]\n#  want%s\n#  got %s", name, (int)len, p, o, got);
        rt += roundtrip(t, p, len, exact_roundtrip ? 0 : CAIRN__TOK_DECODE_STRIP_SPACE, 0);
        o = nl + 1;
        p = e + strlen(sep);
    }
    ok(count > 0 && pass == count, "%s: %zu/%zu reference strings give the expected ids", name,
       pass, count);
    ok(rt == count, "%s: %zu/%zu strings decode back to the same bytes", name, rt, count);

    /* speed: a few KB of mixed text */
    {
        size_t n = 0, nids = 0, k;
        char *big = malloc(ni * 4 + 1);
        int32_t *ids;
        for (k = 0; k < 4; k++) {
            memcpy(big + n, inp, ni);
            n += ni;
        }
        t0 = now_s();
        for (k = 0; k < 10; k++) {
            cairn__tok_encode(t, big, n, 1, 0, &ids, &nids);
            free(ids);
        }
        t0 = (now_s() - t0) / 10;
        diag("%s: %zu bytes -> %zu tokens in %.2f ms (reported, not asserted)", name, n, nids,
             t0 * 1e3);
        free(big);
    }
    free(inp);
    free(out);
    cairn__tok_free(t);
}

/* scandir filter: ggml-vocab-*.gguf (the vectors' own files end in .inp and .out) */
static int is_vector_vocab(const struct dirent *d)
{
    size_t l = strlen(d->d_name);
    return strncmp(d->d_name, "ggml-vocab-", 11) == 0 && l > 16 &&
           strcmp(d->d_name + l - 5, ".gguf") == 0;
}

int main(void)
{
    const char *td = getenv("CAIRN_TESTDATA");
    char dir[1024];
    struct dirent **ents = NULL;
    int n, i;

    init_gpt2_map();
    test_gpt2_pretokenizers();
    test_gpt2_special_and_decode();
    test_spm();
    test_added_gpt2();
    test_added_phi3();
    test_errors();
    test_from_arrays();
    test_chat();

    /* every vocabulary with vectors in the folder, in name order */
    snprintf(dir, sizeof dir, "%s/tokenizers", td ? td : "");
    n = td ? scandir(dir, &ents, is_vector_vocab, alphasort) : -1;
    if (n <= 0)
        diag("reference vectors not found under $CAIRN_TESTDATA/tokenizers: parity checks skipped");
    for (i = 0; i < n; i++) {
        test_reference(dir, ents[i]->d_name);
        free(ents[i]);
    }
    free(ents);
    return tap_done();
}
