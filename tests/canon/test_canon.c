/* test_canon.c - strict JSON parsing, RFC 8785 canonical form, task IDs, JSON <-> msgpack.
 *
 * The canonical-form vectors live in vectors/ (argv[1]): numbers.txt holds IEEE bit patterns
 * with their ECMAScript text (RFC 8785 Appendix B first), and each NAME.json has its
 * expected canonical bytes in NAME.canon. Everything else is inline below.
 *
 * Two vector files (values, bigint) hold integers beyond 2^53-1, to pin how RFC 8785 writes
 * them; cairn's strict parser refuses those (I-JSON), so they are read the way RFC 8785 reads
 * every number, as a double (load_jcs), and the refusal itself is tested inline.
 */
#include "common/hash.h"
#include "common/json.h"
#include "common/taskid.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/tap.h"

static const char *vecdir = "tests/canon/vectors";
static char tmpdir[256];

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = '\0';
        *len = (size_t)n;
    } else {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

#define INEXACT                                                                                    \
    "is outside [-(2^53-1), 2^53-1], where JSON numbers stay exact (I-JSON, RFC 7493); send it "   \
    "as a string"

/* A JSON text as RFC 8785 reads it: strictly (cairn__json_parse), or, where only an integer
 * beyond 2^53-1 is refused, with every number a double (what JCS does with any number). */
static int parse_jcs(const char *text, size_t len, json_t **v, char *err, size_t errlen)
{
    int rc = cairn__json_parse(text, len, "t", v, err, errlen);
    if (rc == CAIRN_EJSON && strstr(err, INEXACT)) {
        json_error_t je;
        *v = json_loadb(text, len,
                        JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL |
                            JSON_DECODE_INT_AS_REAL,
                        &je);
        rc = *v ? 0 : CAIRN_EJSON;
    }
    return rc;
}

static int load_jcs(const char *path, json_t **v, char *err, size_t errlen)
{
    size_t n = 0;
    char *text = slurp(path, &n);
    int rc = text ? parse_jcs(text, n, v, err, errlen) : CAIRN_ENOENT;
    free(text);
    return rc;
}

/* Canonical text of a JSON text, or NULL with the error in err. */
static char *canon_of(const char *text, char *err, size_t errlen)
{
    json_t *v;
    char *out = NULL;
    size_t n;
    if (cairn__json_parse(text, strlen(text), "t", &v, err, errlen))
        return NULL;
    if (cairn__canon_json(v, &out, &n))
        snprintf(err, errlen, "canon failed");
    json_decref(v);
    return out;
}

static void check_canon(const char *in, const char *want)
{
    char err[256] = "";
    char *got = canon_of(in, err, sizeof err);
    ok(got && strcmp(got, want) == 0, "canon %s -> %s", in, want);
    if (!got || strcmp(got, want))
        diag("got %s (%s)", got ? got : "(null)", err);
    free(got);
}

static void test_numbers(void)
{
    char path[512], line[256];
    FILE *f;
    int n = 0, bad = 0;
    snprintf(path, sizeof path, "%s/numbers.txt", vecdir);
    if (!(f = fopen(path, "r"))) {
        ok(0, "open %s", path);
        return;
    }
    while (fgets(line, sizeof line, f)) {
        unsigned long long bits;
        char want[64], *got = NULL;
        double d;
        size_t len;
        json_t *j;
        if (line[0] == '#' || line[0] == '\n')
            continue;
        if (sscanf(line, "%llx %63s", &bits, want) != 2) {
            ok(0, "numbers.txt line parses: %s", line);
            continue;
        }
        memcpy(&d, &bits, sizeof d);
        j = json_real(d);
        if (!j || cairn__canon_json(j, &got, &len) || strcmp(got, want) || len != strlen(want)) {
            if (bad++ < 10)
                diag("%016llx: want %s, got %s", bits, want, got ? got : "(error)");
        }
        n++;
        free(got);
        json_decref(j);
    }
    fclose(f);
    ok(n >= 280 && bad == 0, "numbers.txt: %d doubles serialize as ECMAScript does (%d bad)", n,
       bad);
}

static void test_vector_files(void)
{
    static const char *names[] = {"rfc_example", "rfc_sorting", "structures", "unicode",
                                  "values",      "bigint",      "controls",   "whitespace"};
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[512], err[256] = "";
        size_t wlen = 0, glen = 0;
        char *want, *got = NULL, *again = NULL;
        json_t *v = NULL, *v2 = NULL;
        int rc;
        snprintf(path, sizeof path, "%s/%s.canon", vecdir, names[i]);
        want = slurp(path, &wlen);
        snprintf(path, sizeof path, "%s/%s.json", vecdir, names[i]);
        rc = load_jcs(path, &v, err, sizeof err);
        ok(rc == 0 && want, "load %s.json (%s)", names[i], err);
        if (rc == 0 && cairn__canon_json(v, &got, &glen) == 0) {
            ok(want && glen == wlen && memcmp(got, want, wlen) == 0, "%s: canonical bytes",
               names[i]);
            if (!want || glen != wlen || memcmp(got, want, wlen))
                diag("got  %s\n# want %s", got, want ? want : "(none)");
            /* The canonical form is a fixed point. */
            ok(parse_jcs(got, glen, &v2, err, sizeof err) == 0 &&
                   cairn__canon_json(v2, &again, &wlen) == 0 && strcmp(again, got) == 0,
               "%s: canonical form is a fixed point", names[i]);
        } else {
            ok(0, "%s: canonicalizes", names[i]);
        }
        free(want);
        free(got);
        free(again);
        json_decref(v);
        json_decref(v2);
    }
}

static void test_canon_inline(void)
{
    /* RFC 8785 3.2.3: sorted by UTF-16 code units, so U+1F600 comes before U+FB33. */
    check_canon("{\"\\u20ac\":1,\"\\r\":2,\"\\ufb33\":3,\"1\":4,\"\\ud83d\\ude00\":5,"
                "\"\\u0080\":6,\"\\u00f6\":7}",
                "{\"\\r\":2,\"1\":4,\"\xc2\x80\":6,\"\xc3\xb6\":7,\"\xe2\x82\xac\":1,"
                "\"\xf0\x9f\x98\x80\":5,\"\xef\xac\xb3\":3}");
    /* RFC 8785 3.2.2.2 string escaping. */
    check_canon("\"\\u20ac$\\u000F\\u000aA'\\u0042\\u0022\\u005c\\\\\\\"\\/\"",
                "\"\xe2\x82\xac$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"");
    check_canon("-0", "0");
    check_canon("-0.0", "0");
    check_canon("1000000000000000000000.0", "1e+21");
    check_canon("1e20", "100000000000000000000");
    check_canon("18446744073709551616.0", "18446744073709552000");
    check_canon("9007199254740991", "9007199254740991");
    /* an integer beyond 2^53 in a tree built in code (parsing refuses one): the nearest double,
     * as JCS says */
    {
        const json_int_t ints[] = {9007199254740993LL, INT64_MAX, -9007199254740993LL};
        const char *wants[] = {"9007199254740992", "9223372036854776000", "-9007199254740992"};
        for (size_t i = 0; i < 3; i++) {
            json_t *v = json_integer(ints[i]);
            char *got = NULL;
            size_t n = 0;
            ok(v && cairn__canon_json(v, &got, &n) == 0 && strcmp(got, wants[i]) == 0,
               "canon of the built integer %lld -> %s (%s)", (long long)ints[i], wants[i],
               got ? got : "failed");
            free(got);
            json_decref(v);
        }
    }
    check_canon("[1.0,1E2,0.1e1,-1.50]", "[1,100,1,-1.5]");
    check_canon("[1e-7,0.000001,12e-8]", "[1e-7,0.000001,1.2e-7]");
    check_canon("\"\\u007f\\u2028\"", "\"\x7f\xe2\x80\xa8\"");
    check_canon("\"a\\u0000b\"", "\"a\\u0000b\"");
    check_canon("{\"b\":{\"d\":[],\"c\":{}},\"a\":[{\"y\":1,\"x\":2}]}",
                "{\"a\":[{\"x\":2,\"y\":1}],\"b\":{\"c\":{},\"d\":[]}}");
}

static void expect_parse_error(const char *text, size_t len, int code, const char *want)
{
    char err[256] = "";
    json_t *v = (json_t *)1;
    int rc = cairn__json_parse(text, len, "in.json", &v, err, sizeof err);
    ok(rc == code && v == NULL && strcmp(err, want) == 0, "parse error: %s", want);
    if (rc != code || strcmp(err, want))
        diag("rc %d, err \"%s\"", rc, err);
    if (rc == 0)
        json_decref(v);
}

#define PERR(lit, want) expect_parse_error(lit, sizeof(lit) - 1, CAIRN_EJSON, want)

static void test_parse_errors(void)
{
    char err[256];
    json_t *v;
    PERR("{\n  \"a\": x}", "in.json:2:8: invalid token near 'x'");
    PERR("{\"a\":1", "in.json:1:6: '}' expected near end of file");
    PERR("", "in.json:1:1: unexpected token near end of file");
    PERR("[1,]", "in.json:1:4: unexpected token near ']'");
    PERR("{\"a\":\n\n  [1,\n 2,,]}", "in.json:4:4: unexpected token near ','");
    PERR("[1] x", "in.json:1:5: end of file expected near 'x'");
    /* I-JSON: duplicate keys, also when spelled differently or nested. */
    PERR("{\"a\":1,\"a\":2}", "in.json:1:10: duplicate object key near '\"a\"'");
    PERR("{\"a\":1,\"\\u0061\":2}", "in.json:1:15: duplicate object key near '\"\\u0061\"'");
    PERR("{\"x\":{\"k\":1,\n\"k\":2}}", "in.json:2:3: duplicate object key near '\"k\"'");
    /* Lone surrogates, bad UTF-8 (the raw bytes are not echoed), non-finite numbers. */
    PERR("\"\\ud800\"", "in.json:1:8: invalid Unicode '\\uD800' near '\"\\ud800\"'");
    PERR("\"\\udc00x\"", "in.json:1:9: invalid Unicode '\\uDC00' near '\"\\udc00x\"'");
    PERR("\"\xff\"", "in.json:1:1: unable to decode byte 0xff near '\"'");
    PERR("\"\xed\xa0\x80\"", "in.json:1:1: unable to decode byte 0xed near '\"'");
    PERR("\"\xc0\xaf\"", "in.json:1:1: unable to decode byte 0xc0 near '\"'");
    PERR("NaN", "in.json:1:3: invalid token near 'NaN'");
    PERR("[Infinity]", "in.json:1:9: invalid token near 'Infinity'");
    PERR("1e400", "in.json:1:5: real number overflow near '1e400'");
    PERR("[\"tab\there\"]", "in.json:1:5: control character 0x9 near '\"tab'");
    PERR("\xef\xbb\xbf{}", "in.json:1:1: byte-order mark (U+FEFF) at the start; JSON text must not "
                           "begin with one");
    PERR("[\"\xe2\x80\xae\" x]", "in.json:1:6: ']' expected near 'x'");
    PERR("[\xe2\x80\xae]", "in.json:1:2: invalid token near '?'");
    PERR("[\xc2\x85]", "in.json:1:2: invalid token near '?'");
    PERR("{\"k\\u0000\":1}", "in.json:1:10: NUL byte in object key not supported near "
                             "'\"k\\u0000\"'");
    /* Nesting: 32 levels pass (msgpack-c unpacks them), 33 do not. */
    {
        char deep[80];
        memset(deep, '[', 32);
        memset(deep + 32, ']', 32);
        ok(cairn__json_parse(deep, 64, "d", &v, err, sizeof err) == 0, "32 nested arrays parse");
        json_decref(v);
        memset(deep, '[', 33);
        memset(deep + 33, ']', 33);
        expect_parse_error(deep, 66, CAIRN_EJSON,
                           "in.json:1:33: arrays/objects nested more than 32 deep");
        /* Deep inside an object, on line 2: {[{ then 30 '[' -> the 30th is level 33. */
        {
            char doc[128];
            size_t n = 0;
            n += (size_t)sprintf(doc, "{\"a\":\n[{\"b\":");
            memset(doc + n, '[', 30);
            n += 30;
            memset(doc + n, ']', 30);
            n += 30;
            n += (size_t)sprintf(doc + n, "}]}");
            expect_parse_error(doc, n, CAIRN_EJSON,
                               "in.json:2:36: arrays/objects nested more than 32 deep");
        }
    }
    /* Brackets inside strings do not count. */
    ok(cairn__json_parse("[\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\\"[[[[\"]", 47, "s", &v, err,
                         sizeof err) == 0,
       "brackets in strings are not nesting (%s)", err);
    json_decref(v);
    ok(cairn__json_parse(NULL, 0, "n", &v, err, sizeof err) == CAIRN_EJSON, "NULL,0 is empty");
    ok(cairn__json_parse("{}", 2, "n", NULL, err, sizeof err) == CAIRN_EINVAL, "NULL out");
    ok(cairn__json_parse("{}", 2, NULL, &v, NULL, 0) == 0, "NULL source and err are fine");
    json_decref(v);
    ok(cairn__json_parse("x", 1, NULL, &v, err, sizeof err) == CAIRN_EJSON &&
           strncmp(err, "<input>:1:1:", 12) == 0,
       "NULL source is <input> (%s)", err);
    ok(cairn__json_parse("[1]", 3, "t", &v, err, 5) == 0, "tiny err buffer is fine");
    json_decref(v);
    ok(cairn__json_parse("x", 1, "t", &v, err, 5) == CAIRN_EJSON && strlen(err) == 4,
       "message truncated to the buffer");
}

/* I-JSON (RFC 7493 2.2): an integer beyond +-(2^53-1) is refused, never rounded; the message
 * names the field (its path) or, beyond int64, the line and column. */
static void test_inexact_integers(void)
{
    char err[256];
    json_t *v;
    PERR("{\"a\":9007199254740993}", "in.json: a: integer 9007199254740993 " INEXACT);
    PERR("{\"order\":{\"ids\":[1,2,-9007199254740992]}}",
         "in.json: order.ids[2]: integer -9007199254740992 " INEXACT);
    PERR("{\"we ird\":[{\"k_1\":9223372036854775807}]}",
         "in.json: [\"we ird\"][0].k_1: integer 9223372036854775807 " INEXACT);
    PERR("9007199254740992", "in.json: integer 9007199254740992 " INEXACT);
    /* the first in document order, not in key order */
    PERR("{\"b\":9007199254740992,\"a\":9007199254740993}",
         "in.json: b: integer 9007199254740992 " INEXACT);
    /* beyond int64, jansson stops: line and column, and the literal */
    PERR("{\"n\":1,\n \"big\":123456789012345678901234567890}",
         "in.json:2:37: integer 123456789012345678901234567890 " INEXACT);
    PERR("[-18446744073709551617]", "in.json:1:22: integer -18446744073709551617 " INEXACT);
    /* the limits themselves and reals are numbers JSON holds: accepted as they are */
    const char *limits = "[9007199254740991,-9007199254740991,1e30,9007199254740993.0]";
    ok(cairn__json_parse(limits, strlen(limits), "t", &v, err, sizeof err) == 0 &&
           json_integer_value(json_array_get(v, 0)) == 9007199254740991LL &&
           json_integer_value(json_array_get(v, 1)) == -9007199254740991LL &&
           json_is_real(json_array_get(v, 2)) && json_is_real(json_array_get(v, 3)),
       "+-(2^53-1) stay integers, 1e30 and 9007199254740993.0 are reals (%s)", err);
    json_decref(v);
    /* 2^53 + 1 and 2^53 used to be one task: the payload hash rounded both to 2^53 */
    v = (json_t *)1;
    ok(cairn__json_parse("{\"id\":9007199254740993}", 22, "t", &v, err, sizeof err) ==
               CAIRN_EJSON &&
           v == NULL,
       "2^53 + 1 is not taken for 2^53 (%s)", err);
}

static void test_object_check(void)
{
    char err[256];
    json_t *v;
    static const char *docs[] = {"[]", "\"s\"", "1", "1.5", "true", "null"};
    static const char *names[] = {"an array", "a string", "an integer", "a number", "true", "null"};
    size_t i;
    for (i = 0; i < 6; i++) {
        char want[128];
        cairn__json_parse(docs[i], strlen(docs[i]), "in.json", &v, err, sizeof err);
        snprintf(want, sizeof want, "in.json: task input must be a JSON object, not %s", names[i]);
        ok(cairn__json_check_object(v, "in.json", err, sizeof err) == CAIRN_EJSON &&
               strcmp(err, want) == 0,
           "check_object refuses %s (%s)", docs[i], err);
        json_decref(v);
    }
    cairn__json_parse("{}", 2, "in.json", &v, err, sizeof err);
    ok(cairn__json_check_object(v, "in.json", err, sizeof err) == 0, "check_object takes {}");
    json_decref(v);
}

static void test_size_limit(void)
{
    char err[256];
    json_t *v = NULL;
    size_t n = CAIRN__MAX_INPUT;
    char *big = malloc(n + 1);
    int rc;
    if (!big) {
        ok(0, "malloc 16 MiB");
        return;
    }
    /* Exactly the limit: one string filling 16 MiB. */
    memset(big, 'a', n + 1);
    big[0] = '"';
    big[n - 1] = '"';
    rc = cairn__json_parse(big, n, "big", &v, err, sizeof err);
    ok(rc == 0 && json_string_length(v) == n - 2, "a document of exactly 16 MiB parses (%s)",
       rc ? err : "ok");
    json_decref(v);
    big[n - 1] = 'a';
    big[n] = '"';
    rc = cairn__json_parse(big, n + 1, "big", &v, err, sizeof err);
    ok(rc == CAIRN_ETOOBIG && strcmp(err, "big: input is 16777217 bytes, limit is 16777216") == 0,
       "16 MiB + 1 byte is refused: %s", err);
    free(big);
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

static void test_load(void)
{
    char path[512], err[256], want[600];
    json_t *v = NULL;
    int rc, fd, saved;

    snprintf(path, sizeof path, "%s/missing.json", tmpdir);
    rc = cairn__json_load(path, &v, err, sizeof err);
    snprintf(want, sizeof want, "%s: No such file or directory", path);
    ok(rc == CAIRN_ENOENT && strcmp(err, want) == 0, "missing file: %s", err);

    rc = cairn__json_load(tmpdir, &v, err, sizeof err);
    ok(rc == CAIRN_EINVAL && strstr(err, "is a directory"), "directory: %s", err);

    snprintf(path, sizeof path, "%s/bad.json", tmpdir);
    write_file(path, "{\n \"a\": 1,\n \"b\": tru }\n");
    rc = cairn__json_load(path, &v, err, sizeof err);
    snprintf(want, sizeof want, "%s:3:9: invalid token near 'tru'", path);
    ok(rc == CAIRN_EJSON && strcmp(err, want) == 0, "error names file:line:column: %s", err);

    snprintf(path, sizeof path, "%s/big.json", tmpdir);
    fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    ok(fd >= 0 && ftruncate(fd, (off_t)CAIRN__MAX_INPUT + 1) == 0, "sparse big file");
    close(fd);
    rc = cairn__json_load(path, &v, err, sizeof err);
    snprintf(want, sizeof want, "%s: input is 16777217 bytes, limit is 16777216", path);
    ok(rc == CAIRN_ETOOBIG && strcmp(err, want) == 0, "big file refused unread: %s", err);

    /* "-" reads standard input: a file... */
    snprintf(path, sizeof path, "%s/in.json", tmpdir);
    write_file(path, "{\"b\": [1, 2], \"a\": \"x\"}");
    saved = dup(0);
    fd = open(path, O_RDONLY);
    dup2(fd, 0);
    close(fd);
    rc = cairn__json_load("-", &v, err, sizeof err);
    ok(rc == 0 && json_is_object(v) && json_object_size(v) == 2, "load - from a file on stdin");
    json_decref(v);
    v = NULL;

    /* ...and a pipe carrying more than the limit, whose size nobody knows in advance. */
    {
        int p[2];
        pid_t pid;
        if (pipe(p) == 0 && (pid = fork()) == 0) {
            static char chunk[65536];
            size_t left = (size_t)CAIRN__MAX_INPUT + 100000;
            close(p[0]);
            memset(chunk, ' ', sizeof chunk);
            while (left) {
                size_t m = left < sizeof chunk ? left : sizeof chunk;
                ssize_t w = write(p[1], chunk, m);
                if (w <= 0)
                    _exit(0); /* the reader stopped early: that is the point */
                left -= (size_t)w;
            }
            _exit(0);
        }
        close(p[1]);
        dup2(p[0], 0);
        close(p[0]);
        rc = cairn__json_load("-", &v, err, sizeof err);
        ok(rc == CAIRN_ETOOBIG &&
               strcmp(err, "<stdin>: input is more than 16777216 bytes, limit is 16777216") == 0,
           "endless stdin stops at the limit: %s", err);
        dup2(saved, 0);
        while (wait(NULL) > 0)
            ;
    }
    {
        int p[2];
        if (pipe(p) == 0) {
            ok(write(p[1], "[1,\n\"x\" 2]", 10) == 10, "pipe write");
            close(p[1]);
            dup2(p[0], 0);
            close(p[0]);
            rc = cairn__json_load("-", &v, err, sizeof err);
            ok(rc == CAIRN_EJSON && strcmp(err, "<stdin>:2:5: ']' expected near '2'") == 0,
               "stdin errors say <stdin>: %s", err);
        }
    }
    dup2(saved, 0);
    close(saved);
}

static void test_sha(void)
{
    char h[65], err[256];
    json_t *v;
    cairn__sha256_hex("abc", 3, h);
    ok(strcmp(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0,
       "sha256(abc)");
    cairn__sha256_hex("", 0, h);
    ok(strcmp(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") == 0,
       "sha256('')");
    cairn__json_parse("{ \"b\" : 2.0, \"a\" : 1 }", 22, "t", &v, err, sizeof err);
    ok(cairn__payload_hash(v, h) == 0 &&
           strcmp(h, "43258cff783fe7036d8a43033f830adfc60ec037382473548ac742b888292777") == 0,
       "payload hash is sha256 of {\"a\":1,\"b\":2}");
    json_decref(v);
}

static void test_task_id_check(void)
{
    char id[200], err[256];
    int c, wrong = 0;
    /* Every byte value as a one-byte ID (byte 0 makes the empty string). */
    for (c = 1; c < 256; c++) {
        int allowed = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == ':' || c == '-';
        int rc;
        id[0] = (char)c;
        id[1] = '\0';
        rc = cairn__task_id_check(id, err, sizeof err);
        if ((rc == 0) != allowed || (rc != 0 && rc != CAIRN_ETASKID) ||
            (rc && !strstr(err, "task ID byte 0 is ")))
            wrong++;
    }
    ok(wrong == 0, "each byte value: allowed iff in [A-Za-z0-9._:-] (%d wrong)", wrong);
    ok(cairn__task_id_check("", err, sizeof err) == CAIRN_ETASKID &&
           strcmp(err, "task ID is empty") == 0,
       "length 0: %s", err);
    ok(cairn__task_id_check("a", err, sizeof err) == 0, "length 1");
    memset(id, 'x', 129);
    id[128] = '\0';
    ok(cairn__task_id_check(id, err, sizeof err) == 0, "length 128");
    id[128] = 'x';
    id[129] = '\0';
    ok(cairn__task_id_check(id, err, sizeof err) == CAIRN_ETASKID &&
           strcmp(err, "task ID is 129 bytes, limit is 128") == 0,
       "length 129: %s", err);
    ok(cairn__task_id_check("ord er", err, sizeof err) == CAIRN_ETASKID &&
           strcmp(err, "task ID byte 3 is 0x20; allowed are A-Z a-z 0-9 . _ : -") == 0,
       "space: %s", err);
    ok(cairn__task_id_check("a/b", err, sizeof err) == CAIRN_ETASKID &&
           strcmp(err, "task ID byte 1 is '/' (0x2f); allowed are A-Z a-z 0-9 . _ : -") == 0,
       "slash: %s", err);
    ok(cairn__task_id_check("caf\xc3\xa9", err, sizeof err) == CAIRN_ETASKID &&
           strstr(err, "byte 3 is 0xc3"),
       "non-ASCII: %s", err);
    ok(cairn__task_id_check("A-z_0.9:x", err, sizeof err) == 0, "all classes");
    ok(cairn__task_id_check(NULL, err, sizeof err) == CAIRN_EINVAL, "NULL");
}

static void test_derive(void)
{
    char out[200], err[256], want[160];
    json_t *v, *w;
    int rc;
    cairn__json_parse("{\"b\":2,\"a\":1}", 13, "t", &v, err, sizeof err);
    cairn__json_parse("{ \"a\" : 1.0,\n \"b\" : 2e0 }", 25, "t", &w, err, sizeof err);
    rc = cairn__task_id_derive("orders", v, NULL, out, sizeof out, err, sizeof err);
    ok(rc == 0 && strcmp(out, "orders_43258cff783fe703") == 0, "default: %s", out);
    rc = cairn__task_id_derive("orders", w, NULL, out, sizeof out, err, sizeof err);
    ok(rc == 0 && strcmp(out, "orders_43258cff783fe703") == 0, "same default for a respelling");
    rc = cairn__task_id_derive("bad graph", v, NULL, out, sizeof out, err, sizeof err);
    ok(rc == CAIRN_ETASKID &&
           strcmp(err, "derived task ID (from the graph name) byte 3 is 0x20; allowed are A-Z "
                       "a-z 0-9 . _ : -") == 0,
       "graph name with a space: %s", err);
    ok(cairn__task_id_derive("orders", v, NULL, out, 24, err, sizeof err) == 0, "exact buffer");
    ok(cairn__task_id_derive("orders", v, NULL, out, 23, err, sizeof err) == CAIRN_EINVAL,
       "buffer one short: %s", err);
    json_decref(v);
    json_decref(w);

    cairn__json_parse("{\"tenant\":\"acme\",\"order_id\":42,\"neg\":-7,\"f\":7.0,\"g\":7.5,"
                      "\"arr\":[1],\"sp\":\"a b\",\"e\":\"\",\"n\":null,\"big\":9007199254740994.0,"
                      "\"long\":\""
                      "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                      "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}",
                      strlen("{\"tenant\":\"acme\",\"order_id\":42,\"neg\":-7,\"f\":7.0,\"g\":7.5,"
                             "\"arr\":[1],\"sp\":\"a b\",\"e\":\"\",\"n\":null,\"big\":"
                             "9007199254740994.0,\"long\":\"") +
                          128 + 2,
                      "t", &v, err, sizeof err);
    ok(v != NULL, "derive input parses (%s)", err);
    rc = cairn__task_id_derive("g", v, "tenant,order_id", out, sizeof out, err, sizeof err);
    ok(rc == 0 && strcmp(out, "acme_42") == 0, "tenant,order_id -> %s", out);
    rc = cairn__task_id_derive("g", v, "order_id", out, sizeof out, err, sizeof err);
    ok(rc == 0 && strcmp(out, "42") == 0, "one integer field -> %s", out);
    rc = cairn__task_id_derive("g", v, "neg,f,tenant", out, sizeof out, err, sizeof err);
    ok(rc == 0 && strcmp(out, "-7_7_acme") == 0, "negative and integral real -> %s", out);
    rc = cairn__task_id_derive("g", v, "tenant,missing", out, sizeof out, err, sizeof err);
    ok(rc == CAIRN_EJSON &&
           strcmp(err, "input has no field \"missing\" (named in the task-ID fields)") == 0,
       "missing field: %s", err);
    rc = cairn__task_id_derive("g", v, "arr", out, sizeof out, err, sizeof err);
    ok(rc == CAIRN_EJSON &&
           strcmp(err, "task-ID field \"arr\" is an array; only strings and integers can form "
                       "a task ID") == 0,
       "array field: %s", err);
    rc = cairn__task_id_derive("g", v, "g", out, sizeof out, err, sizeof err);
    ok(rc == CAIRN_EJSON && strstr(err, "\"g\" is a number that is not an integer"),
       "fractional field: %s", err);
    rc = cairn__task_id_derive("g", v, "big", out, sizeof out, err, sizeof err);
    ok(rc == CAIRN_EJSON, "real beyond 2^53 refused: %s", err);
    rc = cairn__task_id_derive("g", v, "n", out, sizeof out, err, sizeof err);
    ok(rc == CAIRN_EJSON && strstr(err, "\"n\" is null"), "null field: %s", err);
    rc = cairn__task_id_derive("g", v, "tenant,sp", out, sizeof out, err, sizeof err);
    ok(rc == CAIRN_ETASKID &&
           strcmp(err, "derived task ID (from field \"sp\") byte 6 is 0x20; allowed are A-Z a-z "
                       "0-9 . _ : -") == 0,
       "bad byte blamed on its field: %s", err);
    rc = cairn__task_id_derive("g", v, "e", out, sizeof out, err, sizeof err);
    ok(rc == CAIRN_ETASKID && strcmp(err, "task-ID field \"e\" is an empty string") == 0,
       "empty value: %s", err);
    rc = cairn__task_id_derive("g", v, "tenant,e", out, sizeof out, err, sizeof err);
    ok(rc == CAIRN_ETASKID && strstr(err, "\"e\" is an empty string"),
       "an empty value beside others is refused too (no \"acme_\"): %s", err);
    rc = cairn__task_id_derive("g", v, "long", out, sizeof out, err, sizeof err);
    ok(rc == 0 && strlen(out) == 128, "128-byte value fits");
    rc = cairn__task_id_derive("g", v, "long,order_id", out, sizeof out, err, sizeof err);
    ok(rc == CAIRN_ETASKID && strcmp(err, "derived task ID is 131 bytes, limit is 128") == 0,
       "131 bytes: %s", err);
    rc = cairn__task_id_derive("g", v, "tenant,,order_id", out, sizeof out, err, sizeof err);
    snprintf(want, sizeof want, "empty field name in the task-ID field list \"tenant,,order_id\"");
    ok(rc == CAIRN_EINVAL && strcmp(err, want) == 0, "empty name: %s", err);
    ok(cairn__task_id_derive("g", v, "tenant,", out, sizeof out, err, sizeof err) == CAIRN_EINVAL,
       "trailing comma");
    ok(cairn__task_id_derive("g", v, "", out, sizeof out, err, sizeof err) == CAIRN_EINVAL,
       "empty list");
    json_decref(v);

    cairn__json_parse("[1]", 3, "t", &v, err, sizeof err);
    ok(cairn__task_id_derive("g", v, NULL, out, sizeof out, err, sizeof err) == CAIRN_EJSON,
       "array input: %s", err);
    json_decref(v);
    /* An integer beyond int64 no longer makes every number a double: the input is refused. */
    {
        const char *doc = "{\"id\":12,\"x\":123456789012345678901234567890}";
        v = (json_t *)1;
        rc = cairn__json_parse(doc, strlen(doc), "t", &v, err, sizeof err);
        ok(rc == CAIRN_EJSON && v == NULL && strstr(err, INEXACT),
           "huge integer elsewhere: refused, not read as doubles (%s)", err);
    }
}

/* JSON -> msgpack bytes -> msgpack_object -> JSON. */
static json_t *round_trip(const json_t *v, msgpack_sbuffer *sb, int *rc)
{
    msgpack_packer pk;
    msgpack_unpacked up;
    json_t *back = NULL;
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    *rc = cairn__json_to_msgpack(v, &pk);
    if (*rc)
        return NULL;
    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, sb->data, sb->size, NULL) == MSGPACK_UNPACK_SUCCESS)
        back = cairn__msgpack_to_json(&up.data);
    msgpack_unpacked_destroy(&up);
    return back;
}

static void test_msgpack(void)
{
    static const char *names[] = {"rfc_example", "rfc_sorting", "structures", "unicode",
                                  "values",      "bigint",      "controls",   "whitespace"};
    char path[512], err[256];
    size_t i;
    int rc;
    json_t *v, *w, *back;
    msgpack_sbuffer sb, sb2;

    for (i = 0; i < sizeof names / sizeof names[0]; i++) {
        char *c1 = NULL, *c2 = NULL;
        size_t n1, n2;
        snprintf(path, sizeof path, "%s/%s.json", vecdir, names[i]);
        v = NULL;
        load_jcs(path, &v, err, sizeof err);
        back = v ? round_trip(v, &sb, &rc) : NULL;
        ok(back && json_equal(v, back) && cairn__canon_json(v, &c1, &n1) == 0 &&
               cairn__canon_json(back, &c2, &n2) == 0 && n1 == n2 && !memcmp(c1, c2, n1),
           "msgpack round trip %s", names[i]);
        free(c1);
        free(c2);
        json_decref(v);
        json_decref(back);
        msgpack_sbuffer_destroy(&sb);
    }

    /* Types survive: integers stay integers, reals stay reals; the int64 extremes (which only a
     * tree built in code holds: parsing refuses them) too. */
    {
        const char *doc =
            "[1,-1,1.0,4294967296,-9007199254740991,9007199254740991,\"\\u0000\",0,0]";
        cairn__json_parse(doc, strlen(doc), "t", &v, err, sizeof err);
    }
    if (v) {
        json_array_set_new(v, 7, json_integer(INT64_MIN));
        json_array_set_new(v, 8, json_integer(INT64_MAX));
    }
    back = v ? round_trip(v, &sb, &rc) : NULL;
    ok(back && json_is_integer(json_array_get(back, 0)) && json_is_real(json_array_get(back, 2)) &&
           json_integer_value(json_array_get(back, 4)) == -9007199254740991LL &&
           json_integer_value(json_array_get(back, 5)) == 9007199254740991LL &&
           json_string_length(json_array_get(back, 6)) == 1 &&
           json_integer_value(json_array_get(back, 7)) == INT64_MIN &&
           json_integer_value(json_array_get(back, 8)) == INT64_MAX,
       "integer/real/NUL-string types survive");
    json_decref(v);
    json_decref(back);
    msgpack_sbuffer_destroy(&sb);

    /* Equal objects in any key order pack to equal bytes. */
    cairn__json_parse("{\"b\":1,\"a\":{\"y\":2,\"x\":3}}", 25, "t", &v, err, sizeof err);
    cairn__json_parse("{\"a\":{\"x\":3,\"y\":2},\"b\":1}", 25, "t", &w, err, sizeof err);
    json_decref(round_trip(v, &sb, &rc));
    json_decref(round_trip(w, &sb2, &rc));
    ok(sb.size == sb2.size && memcmp(sb.data, sb2.data, sb.size) == 0 && sb.size > 3 &&
           (unsigned char)sb.data[0] == 0x82 && sb.data[2] == 'a',
       "map keys packed in canonical order");
    json_decref(v);
    json_decref(w);
    msgpack_sbuffer_destroy(&sb);
    msgpack_sbuffer_destroy(&sb2);

    /* 32 levels round-trip; 33 (built in code) are refused before msgpack-c would choke. */
    {
        json_t *deep = json_array(), *cur = deep;
        int d;
        for (d = 1; d < 32; d++) {
            json_t *n = json_array();
            json_array_append_new(cur, n);
            cur = n;
        }
        back = round_trip(deep, &sb, &rc);
        ok(rc == 0 && back && json_equal(deep, back), "32 levels round-trip");
        json_decref(back);
        msgpack_sbuffer_destroy(&sb);
        json_array_append_new(cur, json_object());
        back = round_trip(deep, &sb, &rc);
        ok(rc == CAIRN_EINVAL && !back, "33 levels refused");
        msgpack_sbuffer_destroy(&sb);
        json_decref(deep);
    }

    /* msgpack that JSON cannot say directly. */
    {
        msgpack_packer pk;
        msgpack_unpacked up;
        char *c = NULL;
        size_t n;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 7);
        msgpack_pack_int(&pk, 1); /* int key */
        msgpack_pack_bin(&pk, 3);
        msgpack_pack_bin_body(&pk, "\x00\xff\x10", 3);
        msgpack_pack_str(&pk, 3);
        msgpack_pack_str_body(&pk, "bad", 3);
        msgpack_pack_str(&pk, 4);
        msgpack_pack_str_body(&pk, "a\xffz\xc3", 4); /* invalid UTF-8 */
        msgpack_pack_str(&pk, 1);
        msgpack_pack_str_body(&pk, "u", 1);
        msgpack_pack_uint64(&pk, UINT64_MAX);
        msgpack_pack_str(&pk, 1);
        msgpack_pack_str_body(&pk, "n", 1);
        msgpack_pack_double(&pk, 0.0 / 0.0);
        msgpack_pack_true(&pk); /* bool key */
        msgpack_pack_float(&pk, 1.5f);
        msgpack_pack_array(&pk, 1); /* array key */
        msgpack_pack_nil(&pk);
        msgpack_pack_ext(&pk, 2, 7);
        msgpack_pack_ext_body(&pk, "hi", 2);
        msgpack_pack_str(&pk, 1);
        msgpack_pack_str_body(&pk, "e", 1);
        msgpack_pack_bin(&pk, 0);
        msgpack_unpacked_init(&up);
        rc = msgpack_unpack_next(&up, sb.data, sb.size, NULL);
        back = rc == MSGPACK_UNPACK_SUCCESS ? cairn__msgpack_to_json(&up.data) : NULL;
        ok(back && cairn__canon_json(back, &c, &n) == 0 &&
               strcmp(c,
                      "{\"1\":\"AP8Q\",\"[null]\":\"aGk=\",\"bad\":\"a\xef\xbf\xbdz\xef\xbf\xbd\","
                      "\"e\":\"\",\"n\":null,\"true\":1.5,\"u\":18446744073709552000}") == 0,
           "msgpack extras: %s", c ? c : "(null)");
        free(c);
        json_decref(back);
        msgpack_unpacked_destroy(&up);
        msgpack_sbuffer_destroy(&sb);
    }
    ok(cairn__msgpack_to_json(NULL) == NULL, "msgpack_to_json(NULL)");
    ok(cairn__json_to_msgpack(NULL, NULL) == CAIRN_EINVAL, "json_to_msgpack(NULL)");
}

static void test_canon_misc(void)
{
    char *out = (char *)1;
    size_t n;
    json_t *s = json_stringn_nocheck("\xff", 1), *o = json_object();
    ok(cairn__canon_json(s, &out, &n) == CAIRN_EJSON && out == NULL,
       "invalid UTF-8 from a _nocheck string is refused");
    json_object_set_new_nocheck(o, "\xc0\x80", json_true());
    ok(cairn__canon_json(o, &out, &n) == CAIRN_EJSON, "invalid UTF-8 key is refused");
    ok(cairn__canon_json(NULL, &out, &n) == CAIRN_EINVAL, "canon(NULL)");
    json_decref(s);
    json_decref(o);
    /* NULL len is allowed. */
    s = json_integer(5);
    ok(cairn__canon_json(s, &out, NULL) == 0 && strcmp(out, "5") == 0, "len may be NULL");
    free(out);
    json_decref(s);
}

int main(int argc, char **argv)
{
    const char *t = getenv("TMPDIR");
    if (argc > 1)
        vecdir = argv[1];
    snprintf(tmpdir, sizeof tmpdir, "%s/cairn-canon-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir)) {
        ok(0, "mkdtemp");
        return tap_done();
    }
    test_numbers();
    test_vector_files();
    test_canon_inline();
    test_parse_errors();
    test_inexact_integers();
    test_object_check();
    test_size_limit();
    test_load();
    test_sha();
    test_task_id_check();
    test_derive();
    test_msgpack();
    test_canon_misc();
    {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0)
            diag("could not remove %s", tmpdir);
    }
    return tap_done();
}
