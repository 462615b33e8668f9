/* tests/fuzz_tokenizer/fuzz_tokenizer.c - fuzz target for the tokenizer, and a deterministic
 * driver.
 *
 * LLVMFuzzerTestOneInput encodes the input with one of five generated tokenizers (SentencePiece,
 * and byte-level BPE with each pre-tokenizer: gpt-2, llama-bpe, qwen2, smollm), chosen with the
 * special-token flags by the first input byte, and checks what must hold for any bytes:
 *   - every id is inside the vocabulary;
 *   - byte-level BPE round-trips exactly (decoded with special tokens rendered);
 *   - SentencePiece decodes to " " + the input with U+2581 read as a space (without
 *     parse_special, where no extra space prefixes appear);
 *   - streaming decode, id by id plus flush, yields the same bytes as one-shot decode.
 * The vocabularies are built once from arrays (no GGUF): all 256 byte tokens, merges that build
 * common words (including multi-byte characters, and merge results that are not tokens),
 * and special tokens, so both the merge paths and the fallbacks are reached.
 *
 * Built with -DCAIRN_LIBFUZZER and clang -fsanitize=fuzzer,address, libFuzzer drives it (for
 * 20 s in the test suite, longer with scripts/fuzz-tokenizer.sh); a failed property aborts there.
 * Otherwise main() runs about two seconds of inputs from a fixed-seed generator (random bytes, and
 * text assembled from words, digits, spaces, newlines, apostrophes, multi-byte characters and
 * special-token text) and prints TAP; the same run always tests the same inputs in the same order.
 * `--write-corpus DIR` writes the libFuzzer target's seed corpus instead.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/tokenizer.h"

#ifndef CAIRN_LIBFUZZER
static int fuzz_failures; /* the driver counts failures and keeps the first */
static char fuzz_first_failure[256];
#endif

static void fail(const char *what, const uint8_t *data, size_t len)
{
#ifdef CAIRN_LIBFUZZER
    (void)data;
    (void)len;
    fprintf(stderr, "fuzz_tokenizer: property violated: %s\n", what);
    abort();
#else
    if (!fuzz_failures++) {
        size_t i, at;
        at = (size_t)snprintf(fuzz_first_failure, sizeof fuzz_first_failure, "%s; input", what);
        for (i = 0; i < len && at + 4 < sizeof fuzz_first_failure; i++)
            at += (size_t)snprintf(fuzz_first_failure + at, sizeof fuzz_first_failure - at, " %02x",
                                   data[i]);
    }
#endif
}

/* ---- vocabularies ------------------------------------------------------------------------ */

struct list {
    char **v;
    size_t n, cap;
};

static void list_add(struct list *l, const char *s)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 512;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        if (!l->v)
            abort();
    }
    l->v[l->n] = strdup(s);
    if (!l->v[l->n])
        abort();
    l->n++;
}

static int list_has(const struct list *l, const char *s)
{
    size_t i;
    for (i = 0; i < l->n; i++)
        if (strcmp(l->v[i], s) == 0)
            return 1;
    return 0;
}

static void map_byte(unsigned b, char *out)
{
    unsigned i, n = 0, cp;
    for (i = 0; i < b; i++)
        if (!((i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE))
            n++;
    cp = ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) ? b : 256 + n;
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

static const char *const words[] = {
    " the", "the",  " and", "ing", "tion",   " of",    "123",   "00",      " 1",     "'s",    "'t",
    "'re",  "\n\n", "  ",   "   ", " Hello", " world", "Hello", " привет", "日本語", " 日本", "...",
    " ==",  "\t\t", "\r\n", "<|",  "|>",     " ✅",     "😀",     "don",     "ll",
};

static cairn__tok *tok_spm, *tok_bpe[4];
static const char *const bpe_pres[4] = {"gpt-2", "llama-bpe", "qwen2", "smollm"};

static void build_bpe(void)
{
    struct list tok = {0}, merges = {0};
    int32_t *types;
    size_t i, k;
    char a[512], b[8], m[600];
    cairn__tok_spec sp;
    char err[256];
    for (i = 0; i < 256; i++) {
        map_byte((unsigned)i, a);
        list_add(&tok, a);
    }
    for (k = 0; k < sizeof words / sizeof words[0]; k++) {
        const char *w = words[k];
        map_byte((unsigned char)w[0], a);
        for (i = 1; w[i]; i++) {
            map_byte((unsigned char)w[i], b);
            snprintf(m, sizeof m, "%s %s", a, b);
            if (!list_has(&merges, m))
                list_add(&merges, m);
            strcat(a, b);
            /* every third word keeps its intermediate merge results out of the vocabulary,
             * so merges through strings that are not tokens are exercised */
            if (!list_has(&tok, a) && (k % 3 != 0 || !w[i + 1]))
                list_add(&tok, a);
        }
    }
    list_add(&tok, "<|endoftext|>");
    list_add(&tok, "<|im_start|>");
    list_add(&tok, "<|im_end|>");
    list_add(&tok, "<|im");
    list_add(&tok, "<tool>");
    types = malloc(tok.n * sizeof *types);
    for (i = 0; i < tok.n; i++)
        types[i] = i + 5 < tok.n   ? CAIRN__TOK_NORMAL
                   : i + 2 < tok.n ? CAIRN__TOK_CONTROL
                                   : CAIRN__TOK_USER_DEFINED;
    for (k = 0; k < 4; k++) {
        cairn__tok_spec_init(&sp);
        sp.model = "gpt2";
        sp.pre = bpe_pres[k];
        sp.n_vocab = tok.n;
        sp.tokens = (const char *const *)tok.v;
        sp.types = types;
        sp.n_merges = merges.n;
        sp.merges = (const char *const *)merges.v;
        sp.bos = sp.eos = (int32_t)tok.n - 5;
        sp.add_bos = k & 1;
        if (cairn__tok_new(&sp, &tok_bpe[k], err, sizeof err) != 0) {
            fprintf(stderr, "fuzz_tokenizer: cannot build the %s vocabulary: %s\n", bpe_pres[k],
                    err);
            abort();
        }
    }
    for (i = 0; i < tok.n; i++)
        free(tok.v[i]);
    for (i = 0; i < merges.n; i++)
        free(merges.v[i]);
    free(tok.v);
    free(merges.v);
    free(types);
}

static void build_spm(void)
{
    struct list tok = {0};
    float *scores;
    int32_t *types;
    size_t i, k, j;
    char buf[512];
    cairn__tok_spec sp;
    char err[256];
    list_add(&tok, "<unk>");
    list_add(&tok, "<s>");
    list_add(&tok, "</s>");
    list_add(&tok, "<|im_end|>");
    for (i = 0; i < 256; i++) {
        snprintf(buf, sizeof buf, "<0x%02X>", (unsigned)i);
        list_add(&tok, buf);
    }
    /* every substring of every word (spaces written as U+2581) is a piece */
    for (k = 0; k < sizeof words / sizeof words[0]; k++) {
        const char *w = words[k];
        size_t n = strlen(w);
        for (i = 0; i < n; i++)
            for (j = i + 1; j <= n; j++) {
                size_t at = 0, x;
                for (x = i; x < j; x++) {
                    if (w[x] == ' ') {
                        memcpy(buf + at, "\xe2\x96\x81", 3);
                        at += 3;
                    } else {
                        buf[at++] = w[x];
                    }
                }
                buf[at] = 0;
                if (!list_has(&tok, buf))
                    list_add(&tok, buf);
            }
    }
    scores = malloc(tok.n * sizeof *scores);
    types = malloc(tok.n * sizeof *types);
    for (i = 0; i < tok.n; i++) {
        /* longer pieces score higher, with a pseudo-random tie-breaker */
        scores[i] = (float)strlen(tok.v[i]) - (float)((i * 2654435761u) % 1000) / 1000.0f;
        types[i] = i == 0    ? CAIRN__TOK_UNKNOWN
                   : i < 3   ? CAIRN__TOK_CONTROL
                   : i == 3  ? CAIRN__TOK_USER_DEFINED
                   : i < 260 ? CAIRN__TOK_BYTE
                             : CAIRN__TOK_NORMAL;
    }
    cairn__tok_spec_init(&sp);
    sp.model = "llama";
    sp.n_vocab = tok.n;
    sp.tokens = (const char *const *)tok.v;
    sp.scores = scores;
    sp.types = types;
    sp.unk = 0;
    sp.bos = 1;
    sp.eos = 2;
    sp.add_eos = 1;
    if (cairn__tok_new(&sp, &tok_spm, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_tokenizer: cannot build the SPM vocabulary: %s\n", err);
        abort();
    }
    for (i = 0; i < tok.n; i++)
        free(tok.v[i]);
    free(tok.v);
    free(scores);
    free(types);
}

static void init_once(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    build_bpe();
    build_spm();
}

/* ---- the target ---------------------------------------------------------------------------- */

/* Streams ids and checks the result equals the one-shot decode want[0..wlen). */
static void check_stream(const cairn__tok *t, const int32_t *ids, size_t n, unsigned flags,
                         const char *want, size_t wlen, const uint8_t *data, size_t len)
{
    cairn__tok_stream *s = cairn__tok_stream_new(t, flags);
    size_t i, at = 0, l;
    const char *o;
    char *acc = malloc(wlen + 1);
    int bad = !s || !acc;
    for (i = 0; i < n && !bad; i++) {
        if (cairn__tok_stream_push(s, ids[i], &o, &l) != 0 || at + l > wlen) {
            bad = 1;
            break;
        }
        memcpy(acc + at, o, l);
        at += l;
    }
    if (!bad && cairn__tok_stream_flush(s, &o, &l) == 0 && at + l <= wlen) {
        memcpy(acc + at, o, l);
        at += l;
    } else {
        bad = 1;
    }
    if (bad || at != wlen || memcmp(acc, want, wlen) != 0)
        fail("streaming decode differs from one-shot decode", data, len);
    free(acc);
    cairn__tok_stream_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const cairn__tok *t;
    const char *text;
    size_t len, n, i, dl;
    int32_t *ids;
    char *dec;
    unsigned sel, flags;
    int add_special, parse_special, spm;

    init_once();
    if (size == 0)
        return 0;
    sel = data[0];
    text = (const char *)data + 1;
    len = size - 1;
    spm = sel % 5 == 4;
    t = spm ? tok_spm : tok_bpe[sel % 5];
    add_special = (sel >> 3) & 1;
    parse_special = (sel >> 4) & 1;

    if (cairn__tok_encode(t, text, len, add_special, parse_special, &ids, &n) != 0) {
        fail("encode failed", data, size);
        return 0;
    }
    for (i = 0; i < n; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= cairn__tok_n_vocab(t)) {
            fail("id out of range", data, size);
            free(ids);
            return 0;
        }
    flags = spm ? 0 : CAIRN__TOK_DECODE_SPECIAL;
    if (cairn__tok_decode(t, ids, n, flags, &dec, &dl) != 0) {
        fail("decode failed", data, size);
        free(ids);
        return 0;
    }
    if (!spm && !add_special && (dl != len || memcmp(dec, text, len) != 0))
        fail("byte-level BPE does not round-trip", data, size);
    if (spm && !parse_special && !add_special) {
        /* " " + text with U+2581 read as a space */
        char *want = malloc(len + 2);
        size_t wl = 0;
        if (len)
            want[wl++] = ' ';
        for (i = 0; i < len; i++) {
            if (i + 2 < len && memcmp(text + i, "\xe2\x96\x81", 3) == 0) {
                want[wl++] = ' ';
                i += 2;
            } else {
                want[wl++] = text[i];
            }
        }
        if (dl != wl || memcmp(dec, want, wl) != 0)
            fail("SentencePiece decode differs from the input", data, size);
        free(want);
    }
    check_stream(t, ids, n, flags, dec, dl, data, size);
    free(dec);
    free(ids);
    return 0;
}

#ifndef CAIRN_LIBFUZZER

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>

/* ---- standalone driver ----------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    /* splitmix64: fixed seed, so every run tests the same inputs */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static const char *const parts[] = {
    " ",
    "  ",
    "\n",
    "\r\n",
    "\t",
    "'",
    "'s",
    "'S",
    "'ll",
    "'Re",
    "the",
    " the",
    "Hello",
    " world",
    "123",
    "4567",
    "0",
    " 1",
    "²",
    "Ⅻ",
    "...",
    "!?",
    "日本語",
    "привет",
    "😀",
    "✅",
    "\xe2\x96\x81",
    "<|im_end|>",
    "<|im_start|>",
    "<|im",
    "<tool>",
    "<s>",
    "</s>",
    "<|endoftext|>",
    "\xff",
    "\xc3",
    "\xe2\x82",
    "\xf0\x9f\x98",
    "\x80",
    "\0",
    "ing",
    "tion",
    "don't",
    "A",
    "z",
};

static size_t gen(uint8_t *buf, size_t cap)
{
    size_t n = 1, target = (size_t)(rnd() % (cap - 1)), k;
    buf[0] = (uint8_t)rnd();
    if (rnd() % 4 == 0) { /* raw random bytes */
        for (k = 1; k <= target; k++)
            buf[k] = (uint8_t)rnd();
        return target + 1;
    }
    while (n < target) {
        const char *p = parts[rnd() % (sizeof parts / sizeof parts[0])];
        size_t l = p[0] ? strlen(p) : 1; /* "\0" is one NUL byte */
        if (n + l > cap)
            break;
        memcpy(buf + n, p, l);
        n += l;
    }
    return n;
}

/* Seeds for the libFuzzer target (scripts/fuzz-run.sh, scripts/fuzz-tokenizer.sh): a few texts
 * under each of several selector bytes (every tokenizer, with and without special tokens), and
 * the reference test texts of $CAIRN_TESTDATA/tokenizers (*.inp) under the gpt-2 and the
 * SentencePiece selector. */
static int put_seed(const char *dir, const char *name, uint8_t sel, const char *text, size_t len)
{
    char path[4096];
    FILE *f;
    int bad;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return 1;
    }
    bad = fputc(sel, f) == EOF || fwrite(text, 1, len, f) != len;
    bad |= fclose(f) != 0;
    if (bad)
        perror(path);
    return bad;
}

static int write_corpus(const char *dir)
{
    static const char *const texts[] = {"Hello world", "don't stop 12345",
                                        "<|im_start|>user\nhi<|im_end|>", "  日本語 😀 ✅",
                                        "x'S 'll \t\t\r\n\n"};
    static const uint8_t sels[] = {0, 1, 2, 3, 4, 20, 28};
    const char *td = getenv("CAIRN_TESTDATA");
    char name[512], tdir[2048];
    size_t i, k, n = 0;
    DIR *d;
    struct dirent *e;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        perror(dir);
        return 1;
    }
    for (i = 0; i < sizeof texts / sizeof texts[0]; i++)
        for (k = 0; k < sizeof sels; k++) {
            snprintf(name, sizeof name, "seed-%zu-%u", i, (unsigned)sels[k]);
            if (put_seed(dir, name, sels[k], texts[i], strlen(texts[i])))
                return 1;
            n++;
        }
    snprintf(tdir, sizeof tdir, "%s/tokenizers", td ? td : "");
    d = td ? opendir(tdir) : NULL;
    while (d && (e = readdir(d))) {
        size_t nl = strlen(e->d_name);
        char path[4096], text[4096];
        FILE *f;
        size_t len;
        if (nl < 4 || strcmp(e->d_name + nl - 4, ".inp") != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", tdir, e->d_name);
        f = fopen(path, "rb");
        if (!f)
            continue;
        len = fread(text, 1, sizeof text, f); /* the reference texts are ~2 KB */
        fclose(f);
        for (k = 0; k < 2; k++) {
            snprintf(name, sizeof name, "ref-%s-%u", e->d_name, k ? 4u : 0u);
            if (put_seed(dir, name, k ? 4 : 0, text, len)) {
                closedir(d);
                return 1;
            }
            n++;
        }
    }
    if (d)
        closedir(d);
    printf("%zu seeds written to %s\n", n, dir);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    double secs, t0;
    uint8_t buf[2048];
    size_t runs = 0, k;
    int j;
    if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0)
        return write_corpus(argv[2]);
    secs = argc > 1 ? atof(argv[1]) : 2.0;
    t0 = now_s();
    /* fixed inputs first: empty, every selector byte on a sample, a long word */
    LLVMFuzzerTestOneInput((const uint8_t *)"", 0);
    for (j = 0; j < 256; j++) {
        static const char sample[] =
            "Hello world, don't 12345 <|im_end|>\n\n  日本語 😀 \xff\xe2\x96\x81x";
        buf[0] = (uint8_t)j;
        memcpy(buf + 1, sample, sizeof sample - 1);
        LLVMFuzzerTestOneInput(buf, sizeof sample);
        runs++;
    }
    for (k = 0; k < 5; k++) {
        buf[0] = (uint8_t)k;
        memset(buf + 1, 'a', sizeof buf - 1);
        LLVMFuzzerTestOneInput(buf, sizeof buf);
        runs++;
    }
    /* then generated inputs until the time is up (at least 2000, so short runs still cover) */
    while (runs < 2000 || now_s() - t0 < secs) {
        size_t n = gen(buf, sizeof buf);
        LLVMFuzzerTestOneInput(buf, n);
        runs++;
        if (fuzz_failures)
            break;
    }
    printf("%sok 1 - %zu inputs, every property held\n", fuzz_failures ? "not " : "", runs);
    if (fuzz_failures)
        printf("# first failure (run %zu): %s\n", runs, fuzz_first_failure);
    printf("1..1\n");
    for (k = 0; k < 4; k++)
        cairn__tok_free(tok_bpe[k]);
    cairn__tok_free(tok_spm);
    return fuzz_failures ? 1 : 0;
}

#endif
