/* tests/fuzz_gguf/fuzz_gguf.c - fuzz target for the GGUF reader, and a deterministic driver.
 *
 * LLVMFuzzerTestOneInput opens the input with cairn__gguf_open_mem and, if it opens, reads
 * every key through every getter that could apply, every array element, and the bytes of
 * every tensor (dequantizing a bounded prefix of its first row), so a bounds check that the
 * reader skipped at open time turns into an out-of-bounds read that ASan or valgrind reports.
 *
 * Built with -DCAIRN_LIBFUZZER and clang -fsanitize=fuzzer,address, libFuzzer drives it (for
 * 20 s in the test suite, longer with scripts/fuzz-gguf.sh); `--write-corpus DIR` makes the
 * driver below write its seeds as that target's corpus. Otherwise main() below is a standalone
 * driver for the gcc build: it makes a seed corpus with the test writer (every KV type, every
 * tensor type, v2/v3, several alignments), adds the real vocabulary files, and runs the target over
 * the seeds and a fixed number of pseudo-random mutations from a fixed seed, each in an exact-size
 * heap buffer. The same run always tests the same inputs, so a failure reproduces by its number.
 * Each input is also opened describe-only (CAIRN__GGUF_ANY_TYPE, see any_type_open).
 */
#include "gpu/gguf.h"
#ifdef GW_HAVE_QUANT
#include "gpu/quant.h"
#endif

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Dequantizing every tensor of a large input would make each run slow; a row prefix of this
 * many elements is enough to touch data through quant.c. */
#define FUZZ_MAX_DEQUANT 4096

static volatile unsigned fuzz_sink; /* keeps reads from being optimized away */

static void walk_kv(const cairn__gguf *g, const char *key)
{
    uint32_t u32;
    uint64_t u64, n;
    int64_t i64;
    float f;
    int b, et;
    const char *s;
    size_t sl;
    /* every getter on every key: mismatches must fail cleanly, never read out of bounds */
    (void)cairn__gguf_get_u32(g, key, &u32);
    (void)cairn__gguf_get_u64(g, key, &u64);
    (void)cairn__gguf_get_i64(g, key, &i64);
    (void)cairn__gguf_get_f32(g, key, &f);
    (void)cairn__gguf_get_bool(g, key, &b);
    if (cairn__gguf_get_str(g, key, &s, &sl) == 0 && sl)
        fuzz_sink += (unsigned char)s[0] + (unsigned char)s[sl - 1];
    if (cairn__gguf_get_arr(g, key, &et, &n) != 0)
        return;
    const unsigned char *raw = cairn__gguf_arr_data(g, key);
    for (uint64_t i = 0; i < n; i++) {
        if (et == CAIRN__GGUF_STRING) {
            if (cairn__gguf_arr_str(g, key, i, &s, &sl) == 0 && sl)
                fuzz_sink += (unsigned char)s[0] + (unsigned char)s[sl - 1];
        } else {
            (void)cairn__gguf_arr_f32(g, key, i, &f);
            (void)cairn__gguf_arr_i64(g, key, i, &i64);
        }
    }
    if (raw && n)
        fuzz_sink += raw[0];
    (void)cairn__gguf_arr_str(g, key, n, &s, &sl); /* one past the end */
}

static void walk_tensor(const cairn__gguf_tensor *t)
{
    const unsigned char *d = t->data;
    if (t->nbytes) {
        fuzz_sink += d[0] + d[t->nbytes - 1];
    }
#ifdef GW_HAVE_QUANT
    uint64_t bs = cairn__ggml_block_size(t->type);
    uint64_t n = t->ne[0] < FUZZ_MAX_DEQUANT ? t->ne[0] : FUZZ_MAX_DEQUANT / bs * bs;
    static float buf[FUZZ_MAX_DEQUANT];
    static uint64_t blocks[FUZZ_MAX_DEQUANT]; /* >= the bytes of FUZZ_MAX_DEQUANT elements */
    uint64_t rb = cairn__ggml_row_size(t->type, n);
    if (n && rb <= t->nbytes && rb <= sizeof blocks) {
        /* quant.c reads blocks through struct pointers (2-byte aligned); a file with
         * general.alignment 1 may place data at an odd address, so copy first */
        memcpy(blocks, d, rb);
        cairn__dequant_row(t->type, blocks, buf, n);
        fuzz_sink += (unsigned)(buf[0] != buf[0]);
    }
#endif
}

/* The describe-only open (CAIRN__GGUF_ANY_TYPE, what `cairn model-info` uses on any file):
 * every tensor, known type or not, must lie inside the input, start where its offset says and
 * overlap no other; its bytes are read (first and last) so ASan checks the span; tensors of a
 * known type are walked as in the plain open. Returns whether it opened. */
static int any_type_open(const uint8_t *data, size_t size)
{
    cairn__gguf *g = NULL;
    char err[256];
    if (cairn__gguf_open_mem_ex(data, size, CAIRN__GGUF_ANY_TYPE, &g, err, sizeof err) != 0) {
        if (!err[0] || strlen(err) >= sizeof err)
            __builtin_trap();
        return 0;
    }
    const size_t n = cairn__gguf_n_tensors(g);
    for (size_t i = 0; i < n; i++) {
        const cairn__gguf_tensor *t = cairn__gguf_tensor_at(g, i);
        if (!t || t->nbytes == 0 || t->offset > size || t->nbytes > size - t->offset)
            __builtin_trap();
        const unsigned char *d = t->data;
        fuzz_sink += d[0] + d[t->nbytes - 1];
        for (size_t j = i + 1; j < n && j < i + 64; j++) { /* neighbours in table order */
            const cairn__gguf_tensor *u = cairn__gguf_tensor_at(g, j);
            if (u->offset < t->offset + t->nbytes && t->offset < u->offset + u->nbytes)
                __builtin_trap();
        }
        if (cairn__ggml_block_size(t->type))
            walk_tensor(t);
    }
    cairn__gguf_close(g);
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cairn__gguf *g = NULL;
    char err[256];
    const int any = any_type_open(data, size);
    if (cairn__gguf_open_mem(data, size, &g, err, sizeof err) != 0) {
        if (!err[0] || strlen(err) >= sizeof err)
            __builtin_trap(); /* every failure must explain itself */
        return 0;
    }
    if (!any) /* what opens strictly opens when describing too */
        __builtin_trap();
    for (size_t i = 0; i < cairn__gguf_n_kv(g); i++) {
        const char *k = cairn__gguf_kv_key(g, i);
        if (!k || cairn__gguf_kv_type(g, k) < 0)
            __builtin_trap();
        walk_kv(g, k);
    }
    for (size_t i = 0; i < cairn__gguf_n_tensors(g); i++) {
        const cairn__gguf_tensor *t = cairn__gguf_tensor_at(g, i);
        if (!t || cairn__gguf_tensor_find(g, t->name) != t || t->offset + t->nbytes > size)
            __builtin_trap();
        walk_tensor(t);
    }
    (void)cairn__gguf_tensor_find(g, "");
    cairn__gguf_close(g);
    return 0;
}

#ifndef CAIRN_LIBFUZZER
/* ---- standalone driver --------------------------------------------------------------------- */

#include "tests/gguf_writer.h"
#include "tests/tap.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>

struct seed {
    unsigned char *p;
    size_t n;
};
static struct seed seeds[64];
static size_t n_seeds;

static void add_seed(unsigned char *p, size_t n)
{
    if (p && n_seeds < sizeof seeds / sizeof seeds[0]) {
        seeds[n_seeds].p = p;
        seeds[n_seeds++].n = n;
    } else {
        free(p);
    }
}

static void add_written(cairn__gguf_writer *w)
{
    unsigned char *p = NULL;
    size_t n = 0;
    if (gw_write_mem(w, &p, &n) == 0)
        add_seed(p, n);
    gw_free(w);
}

static void make_seeds(void)
{
    static const uint32_t types[] = {CAIRN__GGML_F32,  CAIRN__GGML_F16,  CAIRN__GGML_BF16,
#ifdef GW_HAVE_QUANT
                                     CAIRN__GGML_Q8_0, CAIRN__GGML_Q4_0, CAIRN__GGML_Q4_K,
                                     CAIRN__GGML_Q6_K
#endif
    };
    static const uint32_t aligns[] = {32, 1, 64, 8};
    float vals[512];
    for (int i = 0; i < 512; i++)
        vals[i] = (float)((i * 37) % 101) / 13.0f - 3.0f;
    for (int v = 0; v < 4; v++) {
        cairn__gguf_writer *w = gw_new(v % 2 ? 2 : 3, aligns[v]);
        gw_kv_str(w, "general.architecture", "llama");
        gw_kv_u8(w, "a", 1);
        gw_kv_i8(w, "b", -1);
        gw_kv_u16(w, "c", 2);
        gw_kv_i16(w, "d", -2);
        gw_kv_u32(w, "e", 3);
        gw_kv_i32(w, "f", -3);
        gw_kv_f32(w, "g", 0.5f);
        gw_kv_bool(w, "h", 1);
        gw_kv_u64(w, "i", 4);
        gw_kv_i64(w, "j", -4);
        gw_kv_f64(w, "k", 0.25);
        static const char *const toks[] = {"x", "", "yz"};
        gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
        static const float sc[] = {1, 2, 3};
        gw_kv_arr_f32(w, "tokenizer.ggml.scores", sc, 3);
        static const int32_t tt[] = {1, 2, 3};
        gw_kv_arr_i32(w, "tokenizer.ggml.token_type", tt, 3);
        static const uint64_t u64a[] = {1, 2};
        gw_kv_arr_raw(w, "u64s", CAIRN__GGUF_U64, u64a, 2);
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            uint64_t bs = cairn__ggml_block_size(types[t]);
            uint64_t ne[2] = {bs == 1 ? 4 + (uint64_t)v : bs, 2};
            char name[32];
            snprintf(name, sizeof name, "t%zu.weight", t);
            gw_tensor_f32(w, name, types[t], 1 + (uint32_t)(t % 2), ne, vals);
        }
        add_written(w);
    }
    /* small ones: header only, one tensor, one key */
    add_written(gw_new(3, 32));
    cairn__gguf_writer *w = gw_new(3, 32);
    uint64_t ne[1] = {2};
    gw_tensor_f32(w, "w", CAIRN__GGML_F32, 1, ne, vals);
    add_written(w);
    w = gw_new(2, 32);
    gw_kv_str(w, "k", "v");
    add_written(w);
}

/* the real vocabulary files, run once each (too large to mutate cheaply) */
static int run_vocab_files(void)
{
    const char *td = getenv("CAIRN_TESTDATA");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tokenizers", td ? td : "");
    DIR *d = td ? opendir(dir) : NULL;
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t nl = strlen(e->d_name);
        if (nl < 5 || strcmp(e->d_name + nl - 5, ".gguf") != 0)
            continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f)
            continue;
        struct stat st;
        unsigned char *p = NULL;
        if (fstat(fileno(f), &st) == 0 && (p = malloc((size_t)st.st_size + 1)) &&
            fread(p, 1, (size_t)st.st_size, f) == (size_t)st.st_size) {
            LLVMFuzzerTestOneInput(p, (size_t)st.st_size);
            n++;
        }
        free(p);
        fclose(f);
    }
    if (d)
        closedir(d);
    return n;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) /* xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

/* Values that sit on the edges the reader checks. */
static uint64_t interesting(size_t len)
{
    static const uint64_t v[] = {
        0,           1,          2,          3,          4,         5,          7,
        8,           9,          12,         13,         14,        30,         31,
        32,          33,         255,        256,        65535,     0x7fffffff, 0x80000000u,
        0xffffffffu, 1ull << 32, 1ull << 62, 1ull << 63, INT64_MAX, UINT64_MAX, UINT64_MAX - 31};
    uint64_t r = rnd() % (sizeof v / sizeof v[0] + 3);
    if (r < sizeof v / sizeof v[0])
        return v[r];
    return len + (r - sizeof v / sizeof v[0]) - 1; /* around the file size */
}

/* Applies 1..4 random mutations to a copy of seed; returns a fresh exact-size buffer. */
static unsigned char *mutate(const struct seed *s, size_t *out_n)
{
    size_t n = s->n, cap = s->n + 64;
    unsigned char *p = malloc(cap);
    memcpy(p, s->p, n);
    int k = 1 + (int)(rnd() % 4);
    for (int m = 0; m < k; m++) {
        size_t at = n ? (size_t)(rnd() % n) : 0;
        unsigned op = (unsigned)(rnd() % 7);
        switch (op) {
        case 0: /* bit flip */
            if (n)
                p[at] ^= (unsigned char)(1u << (rnd() % 8));
            break;
        case 1: /* random byte */
            if (n)
                p[at] = (unsigned char)rnd();
            break;
        case 2: /* interesting u32 */
        case 3: /* interesting u64, the width of every count and length */
        {
            unsigned w = op == 2 ? 4 : 8;
            uint64_t v = interesting(n);
            /* aim at 4-byte boundaries half the time: most fields start there in small files */
            if (rnd() % 2)
                at &= ~(size_t)3;
            for (unsigned b = 0; b < w && at + b < n; b++)
                p[at + b] = (unsigned char)(v >> (8 * b));
            break;
        }
        case 4: /* truncate */
            n = at;
            break;
        case 5: /* insert up to 16 random bytes */
        {
            size_t ins = 1 + (size_t)(rnd() % 16);
            if (n + ins <= cap) {
                memmove(p + at + ins, p + at, n - at);
                for (size_t b = 0; b < ins; b++)
                    p[at + b] = (unsigned char)rnd();
                n += ins;
            }
            break;
        }
        default: /* delete up to 16 bytes */
        {
            size_t del = 1 + (size_t)(rnd() % 16);
            if (at + del <= n) {
                memmove(p + at, p + at + del, n - at - del);
                n -= del;
            }
            break;
        }
        }
    }
    /* exact-size copy, so reading one byte past the input is an ASan/valgrind error */
    unsigned char *q = malloc(n ? n : 1);
    memcpy(q, p, n);
    free(p);
    *out_n = n;
    return q;
}

static int write_corpus(const char *dir)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        perror(dir);
        return 1;
    }
    for (size_t i = 0; i < n_seeds; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/seed-%02zu.gguf", dir, i);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(seeds[i].p, 1, seeds[i].n, f) != seeds[i].n) {
            perror(path);
            if (f)
                fclose(f);
            return 1;
        }
        fclose(f);
    }
    printf("%zu seeds written to %s\n", n_seeds, dir);
    return 0;
}

int main(int argc, char **argv)
{
    make_seeds();
    if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0) {
        int rc = write_corpus(argv[2]);
        for (size_t i = 0; i < n_seeds; i++)
            free(seeds[i].p);
        return rc;
    }
    /* FUZZ_GGUF_ITERS overrides the count (e.g. a long soak under valgrind); the time cap
     * only guards against a pathologically slow machine. */
    long iters = 60000;
    const char *ev = getenv("FUZZ_GGUF_ITERS");
    if (ev && atol(ev) > 0)
        iters = atol(ev);

    size_t opened = 0;
    for (size_t i = 0; i < n_seeds; i++) {
        cairn__gguf *g = NULL;
        char err[256];
        if (cairn__gguf_open_mem(seeds[i].p, seeds[i].n, &g, err, sizeof err) == 0)
            opened++;
        else
            diag("seed %zu: %s", i, err);
        cairn__gguf_close(g);
        LLVMFuzzerTestOneInput(seeds[i].p, seeds[i].n);
    }
    ok(n_seeds >= 7 && opened == n_seeds, "%zu of %zu seeds open", opened, n_seeds);
    int nv = run_vocab_files();
    const char *td = getenv("CAIRN_TESTDATA");
    char vdir[1024];
    snprintf(vdir, sizeof vdir, "%s/tokenizers", td ? td : "");
    struct stat vst;
    if (td && stat(vdir, &vst) == 0)
        ok(nv >= 2, "%d vocabulary files of %s walked", nv, vdir);
    else
        skip("no $CAIRN_TESTDATA/tokenizers: real vocabularies not walked");

    clock_t start = clock();
    long done = 0, valid = 0;
    for (; done < iters; done++) {
        if (done % 1024 == 0 && (double)(clock() - start) / CLOCKS_PER_SEC > 20.0)
            break;
        size_t n;
        unsigned char *p = mutate(&seeds[rnd() % n_seeds], &n);
        cairn__gguf *g = NULL;
        if (cairn__gguf_open_mem(p, n, &g, NULL, 0) == 0)
            valid++;
        cairn__gguf_close(g);
        LLVMFuzzerTestOneInput(p, n);
        free(p);
    }
    ok(done > 0, "%ld mutated inputs ran without a crash (%ld still valid, %.2fs)", done, valid,
       (double)(clock() - start) / CLOCKS_PER_SEC);
    for (size_t i = 0; i < n_seeds; i++)
        free(seeds[i].p);
    return tap_done();
}
#endif
