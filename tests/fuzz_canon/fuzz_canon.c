/* fuzz_canon.c - properties of strict JSON parsing and the RFC 8785 canonical form.
 *
 * For any bytes: cairn__json_parse() either refuses them with a one-line printable message,
 * or the canonical form C of what it read (1) parses again, as RFC 8785 reads it (every number
 * a double: C writes a double of 2^53 or more in integer digits, which the strict parser refuses
 * as an integer it cannot hold exactly), (2) canonicalizes to exactly C again, (3) holds no
 * integer beyond 2^53-1, and (4) survives JSON -> msgpack -> JSON unchanged (json_equal, and
 * the same C).
 *
 * Built two ways from this one file:
 *   - with -DCAIRN_LIBFUZZER by scripts/fuzz-canon.sh (clang -fsanitize=fuzzer,address):
 *     only LLVMFuzzerTestOneInput(), a violated property abort()s for libFuzzer to report;
 *   - otherwise (gcc, meson suite 'fuzz'): a main() that feeds a deterministic stream of
 *     generated JSON texts and byte-level mutations of them for a couple of seconds and
 *     reports through TAP. `fuzz_canon --emit N` prints N generated documents, one per line,
 *     for differential checks against another JCS implementation.
 */
#include "common/json.h"
#include "common/taskid.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Whether a parsed tree holds an integer beyond +-(2^53-1), which the parser must refuse. */
static int inexact(const json_t *v)
{
    const char *k;
    const json_t *e;
    size_t i;
    if (json_is_integer(v))
        return json_integer_value(v) > 9007199254740991LL ||
               json_integer_value(v) < -9007199254740991LL;
    json_array_foreach(v, i, e) if (inexact(e)) return 1;
    json_object_foreach((json_t *)v, k, e) if (inexact(e)) return 1;
    return 0;
}

/* Checks every property for one input; NULL when all hold, else which one failed.
 * *parsed says whether the input was JSON. */
static const char *check_one(const uint8_t *data, size_t size, int *parsed)
{
    char err[512], h[65], id[CAIRN__TASK_ID_MAX + 1];
    json_t *v = NULL, *v2 = NULL, *back = NULL;
    char *c1 = NULL, *c2 = NULL, *c3 = NULL;
    size_t n1, n2, n3, i;
    const char *bad = NULL;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_unpacked up;
    int rc;

    *parsed = 0;
    err[0] = '\0';
    rc = cairn__json_parse((const char *)data, size, "fuzz", &v, err, sizeof err);
    if (rc) {
        if (rc != CAIRN_EJSON && rc != CAIRN_ETOOBIG)
            return "parse failed with a code other than EJSON/ETOOBIG";
        if (strncmp(err, "fuzz:", 5) != 0)
            return "parse error message does not start with the source name";
        for (i = 0; err[i]; i++)
            if ((unsigned char)err[i] < 0x20 || err[i] == 0x7F)
                return "parse error message holds a control character";
        return NULL;
    }
    *parsed = 1;
    if (cairn__canon_json(v, &c1, &n1)) {
        bad = "canonicalizing a parsed document failed";
        goto out;
    }
    if (strlen(c1) != n1 && !memchr(c1, '\0', n1)) {
        bad = "canonical length is wrong";
        goto out;
    }
    if (inexact(v)) {
        bad = "a parsed document holds an integer beyond 2^53-1";
        goto out;
    }
    {
        json_error_t je;
        v2 = json_loadb(c1, n1,
                        JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL |
                            JSON_DECODE_INT_AS_REAL,
                        &je);
    }
    if (!v2) {
        bad = "the canonical form does not parse";
        goto out;
    }
    if (cairn__canon_json(v2, &c2, &n2) || n2 != n1 || memcmp(c1, c2, n1)) {
        bad = "the canonical form is not a fixed point";
        goto out;
    }
    if (cairn__payload_hash(v, h) || strlen(h) != 64) {
        bad = "payload hash failed";
        goto out;
    }
    if (json_is_object(v)) {
        rc = cairn__task_id_derive("g", v, NULL, id, sizeof id, err, sizeof err);
        if (rc || strncmp(id, "g_", 2) || strncmp(id + 2, h, 16)) {
            bad = "default task ID is not g_<hash16>";
            goto out;
        }
    }

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_unpacked_init(&up);
    if (cairn__json_to_msgpack(v, &pk))
        bad = "packing a parsed document failed";
    else if (msgpack_unpack_next(&up, sb.data, sb.size, NULL) != MSGPACK_UNPACK_SUCCESS)
        bad = "msgpack-c cannot unpack what we packed";
    else if (!(back = cairn__msgpack_to_json(&up.data)))
        bad = "msgpack -> JSON failed";
    else if (!json_equal(v, back))
        bad = "JSON -> msgpack -> JSON changed the value";
    else if (cairn__canon_json(back, &c3, &n3) || n3 != n1 || memcmp(c1, c3, n1))
        bad = "JSON -> msgpack -> JSON changed the canonical form";
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&sb);
out:
    free(c1);
    free(c2);
    free(c3);
    json_decref(v);
    json_decref(v2);
    json_decref(back);
    return bad;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int parsed;
    const char *bad = check_one(data, size, &parsed);
    if (bad) {
        fprintf(stderr, "property violated: %s\n", bad);
        abort(); /* a test harness, not library code: libFuzzer wants a crash */
    }
    return 0;
}

#ifndef CAIRN_LIBFUZZER
#include "tests/tap.h"

/* xorshift64*: deterministic, so a failure reproduces from its iteration number. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}
static unsigned rn(unsigned n) { return (unsigned)(rnd() % n); }

struct text {
    char *p;
    size_t len, cap;
};

static void put(struct text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        while (cap < t->len + n + 1)
            cap *= 2;
        if (!(t->p = realloc(t->p, cap))) {
            fprintf(stderr, "out of memory\n");
            exit(99);
        }
        t->cap = cap;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}
static void puts_(struct text *t, const char *s) { put(t, s, strlen(s)); }

static void ws(struct text *t)
{
    static const char *w[] = {"", "", "", " ", "\n", "\t", "\r\n  ", "  "};
    puts_(t, w[rn(8)]);
}

static void gen_string(struct text *t)
{
    static const char *pieces[] = {
        "a",
        "Z",
        "0",
        " ",
        "/",
        "\\/",
        "\\\"",
        "\\\\",
        "\\b",
        "\\f",
        "\\n",
        "\\r",
        "\\t",
        "\\u0000",
        "\\u001f",
        "\\u007F",
        "\\u00e9",
        "\xc3\xa9",
        "\\u20AC",
        "\xe2\x82\xac",
        "\\ud83d\\ude00",
        "\xf0\x9f\x98\x80",
        "\\uFB33",
        "\\uffff",
        "\\ue000",
        "\\u2028",
        "\xef\xbf\xbf",
        "\\uDBFF\\uDFFF",
        "\xf4\x8f\xbf\xbf",
        "\x7f",
        "k",
        "key",
        "_:-.",
    };
    unsigned n = rn(6), i;
    char u[8];
    put(t, "\"", 1);
    for (i = 0; i < n; i++) {
        if (rn(8) == 0) { /* any BMP non-surrogate code unit, escaped */
            unsigned c = rn(0xF800);
            snprintf(u, sizeof u, "\\u%04x", c >= 0xD800 ? c + 0x800 : c);
            puts_(t, u);
        } else {
            puts_(t, pieces[rn(sizeof pieces / sizeof pieces[0])]);
        }
    }
    put(t, "\"", 1);
}

static void gen_number(struct text *t)
{
    static const char *fixed[] = {
        "0",
        "-0",
        "0.0",
        "-0.0",
        "1",
        "-1",
        "1e21",
        "1e-7",
        "1E+2",
        "0.000001",
        "5e-324",
        "1.7976931348623157e308",
        "9007199254740993",
        "-9223372036854775808",
        "9223372036854775807",
        "9223372036854775808",
        "123456789012345678901234567890",
        "333333333.33333329",
        "4.50",
        "2e-3",
        "1e-400",
        "0.1",
        "100e-2",
    };
    char buf[64];
    double d;
    uint64_t bits;
    switch (rn(4)) {
    case 0:
        puts_(t, fixed[rn(sizeof fixed / sizeof fixed[0])]);
        return;
    case 1:
        snprintf(buf, sizeof buf, "%lld", (long long)(rnd() >> rn(64)));
        break;
    case 2:
        snprintf(buf, sizeof buf, "%s%u.%ue%s%u", rn(2) ? "-" : "", rn(1000), rn(100000),
                 rn(2) ? "-" : "+", rn(30));
        break;
    default: /* a random finite double, printed with up to 17 digits */
        do {
            bits = rnd();
            memcpy(&d, &bits, sizeof d);
        } while (d != d || d - d != 0);
        snprintf(buf, sizeof buf, "%.*g", 1 + (int)rn(17), d);
    }
    puts_(t, buf);
}

static void gen_value(struct text *t, int depth)
{
    unsigned k = depth >= 34 ? 3 + rn(5) : rn(depth < 4 ? 8 : 10);
    unsigned n, i;
    switch (k) {
    case 0:
    case 1:
    case 2:
        n = rn(5);
        if (k == 0) {
            put(t, "[", 1);
            for (i = 0; i < n; i++) {
                ws(t);
                if (i)
                    put(t, ",", 1);
                gen_value(t, depth + 1);
            }
            ws(t);
            put(t, "]", 1);
        } else {
            put(t, "{", 1);
            for (i = 0; i < n; i++) {
                ws(t);
                if (i)
                    put(t, ",", 1);
                gen_string(t);
                ws(t);
                put(t, ":", 1);
                ws(t);
                gen_value(t, depth + 1);
            }
            ws(t);
            put(t, "}", 1);
        }
        break;
    case 3:
    case 4:
        gen_string(t);
        break;
    case 5:
    case 6:
        gen_number(t);
        break;
    case 7:
        puts_(t, "true");
        break;
    case 8:
        puts_(t, rn(2) ? "false" : "null");
        break;
    default: { /* now and then a deep chain, across the 32-level limit */
        char closers[40];
        if (rn(3)) {
            gen_number(t);
            break;
        }
        n = 25 + rn(12);
        for (i = 0; i < n; i++) {
            if (rn(2)) {
                put(t, "[", 1);
                closers[i] = ']';
            } else {
                puts_(t, "{\"d\":");
                closers[i] = '}';
            }
        }
        gen_number(t);
        while (n--)
            put(t, &closers[n], 1);
    }
    }
}

static void mutate(struct text *t)
{
    unsigned m = 1 + rn(4), i;
    static const char tokens[] = "{}[],:\"\\0123456789eE+-.tfnu \n\x00\x80\xc3\xed\xff";
    for (i = 0; i < m && t->len; i++) {
        size_t at = rn((unsigned)t->len);
        switch (rn(4)) {
        case 0:
            t->p[at] = tokens[rn(sizeof tokens - 1)];
            break;
        case 1:
            t->p[at] ^= (char)(1u << rn(8));
            break;
        case 2:
            memmove(t->p + at, t->p + at + 1, t->len - at - 1);
            t->len--;
            break;
        default: /* insert: grow by one, then shift the tail right */
            put(t, " ", 1);
            memmove(t->p + at + 1, t->p + at, t->len - 1 - at);
            t->p[at] = tokens[rn(sizeof tokens - 1)];
        }
    }
}

int main(int argc, char **argv)
{
    double seconds = 2.0;
    struct timespec t0, now;
    long gen = 0, gen_ok = 0, mut = 0, mut_ok = 0, emit = -1;
    const char *bad = NULL;
    struct text t = {0};
    int parsed;

    if (argc > 2 && strcmp(argv[1], "--emit") == 0)
        emit = atol(argv[2]);
    else if (argc > 1)
        seconds = atof(argv[1]);
    if (emit >= 0) {
        long i;
        for (i = 0; i < emit; i++) {
            t.len = 0;
            gen_value(&t, 0);
            for (size_t j = 0; j < t.len; j++) /* one document per line */
                if (t.p[j] == '\n' || t.p[j] == '\r')
                    t.p[j] = ' ';
            printf("%s\n", t.p);
        }
        free(t.p);
        return 0;
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9 > seconds)
            break;
        t.len = 0;
        gen_value(&t, 0);
        gen++;
        if ((bad = check_one((const uint8_t *)t.p, t.len, &parsed)))
            break;
        gen_ok += parsed;
        mutate(&t);
        mut++;
        if ((bad = check_one((const uint8_t *)t.p, t.len, &parsed)))
            break;
        mut_ok += parsed;
    }
    ok(bad == NULL, "%ld generated and %ld mutated inputs hold every property", gen, mut);
    if (bad) {
        size_t j;
        diag("%s, for this input (%zu bytes):", bad, t.len);
        printf("# ");
        for (j = 0; j < t.len; j++)
            printf("%02x", (unsigned char)t.p[j]);
        printf("\n");
    }
    /* The run must have exercised both sides, or it proved nothing. */
    ok(gen > 1000 && gen_ok > gen / 2, "most generated texts are JSON (%ld of %ld)", gen_ok, gen);
    ok(mut > 1000 && mut_ok < mut && mut_ok > 0, "mutations hit both sides (%ld of %ld parse)",
       mut_ok, mut);
    free(t.p);
    return tap_done();
}
#endif
