/* tests/gguf/test_gguf.c - the GGUF reader against files from the test writer, hand-broken
 * files, and the real vocabulary files in $CAIRN_TESTDATA/tokenizers.
 *
 * Bad files are made by writing a valid file and patching one field, located by searching for
 * a key or tensor name in the bytes, so each case breaks exactly one thing and the test can
 * check that the message names that place.
 */
#include "gpu/gguf.h"
#include "tests/gguf_writer.h"
#include "tests/tap.h"
#ifdef GW_HAVE_QUANT
#include "gpu/quant.h"
#endif

#include "cairn.h"

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char errbuf[512];

static unsigned char *build(cairn__gguf_writer *w, size_t *len)
{
    unsigned char *p = NULL;
    if (gw_write_mem(w, &p, len) != 0)
        p = NULL;
    gw_free(w);
    return p;
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Offset of the first byte after the GGUF string holding s (its u64 length precedes it). */
static size_t after_str(const unsigned char *buf, size_t len, const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 8; i + n <= len; i++) {
        if (memcmp(buf + i, s, n) == 0) {
            uint64_t l = 0;
            for (int k = 0; k < 8; k++)
                l |= (uint64_t)buf[i - 8 + k] << (8 * k);
            if (l == n)
                return i + n;
        }
    }
    return 0;
}

/* Opens buf and checks the code and that the message contains want. */
static void expect(const unsigned char *buf, size_t len, int code, const char *want,
                   const char *name)
{
    cairn__gguf *g = (cairn__gguf *)1;
    errbuf[0] = 0;
    int rc = cairn__gguf_open_mem(buf, len, &g, errbuf, sizeof errbuf);
    ok(rc == code && g == NULL, "%s: code %d (want %d)", name, rc, code);
    ok(strstr(errbuf, want) != NULL, "%s: message names '%s': %s", name, want, errbuf);
    if (rc == 0)
        cairn__gguf_close(g);
}

/* Builds w's file, drops its last `cut` bytes, and expects that to fail as described. */
static void expect_built(cairn__gguf_writer *w, size_t cut, int code, const char *want,
                         const char *name)
{
    size_t n = 0;
    unsigned char *d = build(w, &n);
    ok(d != NULL && cut <= n, "%s: writer built the file", name);
    if (d && cut <= n)
        expect(d, n - cut, code, want, name);
    free(d);
}

/* ---- round trips --------------------------------------------------------------------------- */

static const uint32_t all_types[] = {CAIRN__GGML_F32,  CAIRN__GGML_F16,    CAIRN__GGML_BF16,
                                     CAIRN__GGML_Q8_0, CAIRN__GGML_Q4_0,   CAIRN__GGML_Q4_K,
                                     CAIRN__GGML_Q5_K, CAIRN__GGML_Q6_K,   CAIRN__GGML_Q3_K,
                                     CAIRN__GGML_Q2_K, CAIRN__GGML_IQ4_NL, CAIRN__GGML_IQ4_XS};

static int type_writable(uint32_t t)
{
#ifdef GW_HAVE_QUANT
    (void)t;
    return 1;
#else
    return t == CAIRN__GGML_F32 || t == CAIRN__GGML_F16 || t == CAIRN__GGML_BF16;
#endif
}

/* error bound of a round trip through type, relative to the row's max |x| */
static float tolerance(uint32_t t)
{
    switch (t) {
    case CAIRN__GGML_F32:
        return 0.0f;
    case CAIRN__GGML_F16:
        return 1e-3f;
    case CAIRN__GGML_BF16:
        return 8e-3f;
    case CAIRN__GGML_Q8_0:
        return 1.0f / 100;
    case CAIRN__GGML_Q6_K:
        return 1.0f / 20;
    case CAIRN__GGML_Q3_K: /* half a step of 8 over a sub-block's extreme, and the 6-bit scale */
        return 0.3f;
    case CAIRN__GGML_Q2_K: /* half a step of 4 over the range, and the 4-bit scale and min */
        return 0.45f;
    default:
        return 1.0f / 6; /* 4-bit */
    }
}

static void test_roundtrip(uint32_t version, uint32_t alignment)
{
    diag("round trip: version %u, alignment %u", (unsigned)version, (unsigned)alignment);
    cairn__gguf_writer *w = gw_new(version, alignment);
    gw_kv_str(w, "general.architecture", "llama");
    gw_kv_u8(w, "t.u8", 200);
    gw_kv_i8(w, "t.i8", -100);
    gw_kv_u16(w, "t.u16", 60000);
    gw_kv_i16(w, "t.i16", -30000);
    gw_kv_u32(w, "t.u32", 4000000000u);
    gw_kv_i32(w, "t.i32", -2000000000);
    gw_kv_f32(w, "t.f32", 1.5f);
    gw_kv_bool(w, "t.bool", 1);
    gw_kv_bool(w, "t.false", 0);
    gw_kv_u64(w, "t.u64", 0xfedcba9876543210ull);
    gw_kv_i64(w, "t.i64", INT64_MIN);
    gw_kv_f64(w, "t.f64", 3.25);
    gw_kv_strn(w, "t.strn", "a\0b", 3);
    gw_kv_str(w, "t.empty", "");
    static const char *const toks[] = {"<s>", "", "hello", "\xe2\x96\x81world"};
    gw_kv_arr_str(w, "t.arr_str", toks, 4);
    gw_kv_arr_str(w, "t.arr_str0", NULL, 0);
    static const float fa[] = {0.5f, -2.0f, 1e30f};
    gw_kv_arr_f32(w, "t.arr_f32", fa, 3);
    static const int32_t ia[] = {1, -1, INT32_MAX, INT32_MIN};
    gw_kv_arr_i32(w, "t.arr_i32", ia, 4);
    static const uint8_t u8a[] = {0, 255};
    static const int8_t i8a[] = {-128, 127};
    static const uint16_t u16a[] = {65535};
    static const int16_t i16a[] = {-32768};
    static const uint32_t u32a[] = {4294967295u};
    static const uint64_t u64a[] = {1, UINT64_MAX};
    static const int64_t i64a[] = {INT64_MIN, INT64_MAX};
    static const double f64a[] = {-0.25};
    static const uint8_t boola[] = {1, 0, 1};
    gw_kv_arr_raw(w, "a.u8", CAIRN__GGUF_U8, u8a, 2);
    gw_kv_arr_raw(w, "a.i8", CAIRN__GGUF_I8, i8a, 2);
    gw_kv_arr_raw(w, "a.u16", CAIRN__GGUF_U16, u16a, 1);
    gw_kv_arr_raw(w, "a.i16", CAIRN__GGUF_I16, i16a, 1);
    gw_kv_arr_raw(w, "a.u32", CAIRN__GGUF_U32, u32a, 1);
    gw_kv_arr_raw(w, "a.u64", CAIRN__GGUF_U64, u64a, 2);
    gw_kv_arr_raw(w, "a.i64", CAIRN__GGUF_I64, i64a, 2);
    gw_kv_arr_raw(w, "a.f64", CAIRN__GGUF_F64, f64a, 1);
    gw_kv_arr_raw(w, "a.bool", CAIRN__GGUF_BOOL, boola, 3);

    /* one tensor per type, shapes of 1..4 dims, values with some spread */
    enum { NT = sizeof all_types / sizeof all_types[0] };
    uint64_t shapes[NT][4];
    uint32_t ndims[NT];
    float *vals[NT];
    char names[NT][64];
    for (int k = 0; k < NT; k++) {
        uint64_t bs = cairn__ggml_block_size(all_types[k]);
        ndims[k] = (uint32_t)(k % 4) + 1;
        shapes[k][0] = bs == 1 ? 7 + (uint64_t)k : 2 * bs;
        shapes[k][1] = 3;
        shapes[k][2] = 2;
        shapes[k][3] = 2;
        uint64_t n = 1;
        for (uint32_t d = 0; d < ndims[k]; d++)
            n *= shapes[k][d];
        vals[k] = malloc(n * sizeof(float));
        for (uint64_t i = 0; i < n; i++)
            vals[k][i] = sinf((float)i * 0.37f + (float)k) * (1.0f + (float)(i % 5));
        snprintf(names[k], sizeof names[k], "blk.%d.%s.weight", k,
                 cairn__ggml_type_name(all_types[k]));
        if (type_writable(all_types[k]))
            gw_tensor_f32(w, names[k], all_types[k], ndims[k], shapes[k], vals[k]);
    }

    size_t len;
    unsigned char *buf = build(w, &len);
    ok(buf != NULL, "writer produced %zu bytes", len);
    if (!buf)
        return;

    /* through a file too, so the mmap path is covered */
    char path[] = "/tmp/cairn-gguf-test-XXXXXX";
    int fd = mkstemp(path);
    ok(fd >= 0 && write(fd, buf, len) == (ssize_t)len, "temp file written");
    if (fd >= 0)
        close(fd);

    for (int pass = 0; pass < 2; pass++) {
        cairn__gguf *g = NULL;
        int rc = pass == 0 ? cairn__gguf_open_mem(buf, len, &g, errbuf, sizeof errbuf)
                           : cairn__gguf_open(path, &g, errbuf, sizeof errbuf);
        ok(rc == 0 && g, "%s opens: %s", pass ? "file" : "buffer", errbuf);
        if (!g)
            continue;
        ok(cairn__gguf_version(g) == version, "version %u", (unsigned)cairn__gguf_version(g));
        ok(cairn__gguf_file_size(g) == len, "file size");
        ok(cairn__gguf_alignment(g) == (alignment ? alignment : 32), "alignment %u",
           (unsigned)cairn__gguf_alignment(g));
        ok(cairn__gguf_data_offset(g) % cairn__gguf_alignment(g) == 0, "data section aligned");

        const char *s;
        size_t sl;
        uint32_t u32;
        uint64_t u64;
        int64_t i64;
        float f;
        int b, et;

        ok(cairn__gguf_get_str(g, "general.architecture", &s, &sl) == 0 && sl == 5 &&
               memcmp(s, "llama", 5) == 0,
           "string");
        ok(cairn__gguf_get_str(g, "t.strn", &s, &sl) == 0 && sl == 3 && memcmp(s, "a\0b", 3) == 0,
           "string with NUL");
        ok(cairn__gguf_get_str(g, "t.empty", &s, &sl) == 0 && sl == 0, "empty string");
        ok(cairn__gguf_get_u32(g, "t.u8", &u32) == 0 && u32 == 200, "u8 as u32");
        ok(cairn__gguf_get_i64(g, "t.i8", &i64) == 0 && i64 == -100, "i8 as i64");
        ok(cairn__gguf_get_u32(g, "t.u16", &u32) == 0 && u32 == 60000, "u16 as u32");
        ok(cairn__gguf_get_i64(g, "t.i16", &i64) == 0 && i64 == -30000, "i16 as i64");
        ok(cairn__gguf_get_u32(g, "t.u32", &u32) == 0 && u32 == 4000000000u, "u32");
        ok(cairn__gguf_get_i64(g, "t.i32", &i64) == 0 && i64 == -2000000000, "i32 as i64");
        ok(cairn__gguf_get_f32(g, "t.f32", &f) == 0 && f == 1.5f, "f32");
        ok(cairn__gguf_get_bool(g, "t.bool", &b) == 0 && b == 1, "bool true");
        ok(cairn__gguf_get_bool(g, "t.false", &b) == 0 && b == 0, "bool false");
        ok(cairn__gguf_get_u64(g, "t.u64", &u64) == 0 && u64 == 0xfedcba9876543210ull, "u64");
        ok(cairn__gguf_get_i64(g, "t.i64", &i64) == 0 && i64 == INT64_MIN, "i64 min");
        ok(cairn__gguf_get_f32(g, "t.f64", &f) == 0 && f == 3.25f, "f64 as f32");
        ok(cairn__gguf_get_f32(g, "t.u16", &f) == 0 && f == 60000.0f, "u16 as f32");
        ok(cairn__gguf_get_f32(g, "t.i8", &f) == 0 && f == -100.0f, "i8 as f32");

        /* kv enumeration and types */
        ok(cairn__gguf_n_kv(g) == (size_t)28 + (alignment && alignment != 32), "n_kv %zu",
           cairn__gguf_n_kv(g));
        int types_ok = 1;
        for (size_t i = 0; i < cairn__gguf_n_kv(g); i++) {
            const char *k = cairn__gguf_kv_key(g, i);
            if (!k || cairn__gguf_kv_type(g, k) < 0)
                types_ok = 0;
        }
        ok(types_ok, "every key enumerates and has a type");
        ok(cairn__gguf_kv_key(g, cairn__gguf_n_kv(g)) == NULL, "kv_key out of range -> NULL");
        ok(cairn__gguf_kv_type(g, "t.u8") == CAIRN__GGUF_U8 &&
               cairn__gguf_kv_type(g, "t.f64") == CAIRN__GGUF_F64 &&
               cairn__gguf_kv_type(g, "t.arr_str") == CAIRN__GGUF_ARRAY &&
               cairn__gguf_kv_type(g, "t.strn") == CAIRN__GGUF_STRING &&
               cairn__gguf_kv_type(g, "t.bool") == CAIRN__GGUF_BOOL,
           "kv_type");
        ok(cairn__gguf_kv_type(g, "nope") == CAIRN_ENOTFOUND, "kv_type absent");

        /* integer conversions that must fail */
        ok(cairn__gguf_get_u32(g, "t.i8", &u32) == CAIRN_EFORMAT, "negative i8 as u32 -> EFORMAT");
        ok(cairn__gguf_get_u64(g, "t.i64", &u64) == CAIRN_EFORMAT,
           "negative i64 as u64 -> EFORMAT");
        ok(cairn__gguf_get_u32(g, "t.u64", &u32) == CAIRN_EFORMAT, "big u64 as u32 -> EFORMAT");
        ok(cairn__gguf_get_i64(g, "t.u64", &i64) == CAIRN_EFORMAT,
           "u64 > INT64_MAX as i64 -> EFORMAT");
        ok(cairn__gguf_get_u64(g, "t.u32", &u64) == 0 && u64 == 4000000000u, "u32 as u64");
        /* type mismatches */
        ok(cairn__gguf_get_u32(g, "t.f32", &u32) == CAIRN_EFORMAT, "f32 as u32 -> EFORMAT");
        ok(cairn__gguf_get_u32(g, "general.architecture", &u32) == CAIRN_EFORMAT,
           "string as u32 -> EFORMAT");
        ok(cairn__gguf_get_u32(g, "t.bool", &u32) == CAIRN_EFORMAT, "bool as u32 -> EFORMAT");
        ok(cairn__gguf_get_f32(g, "t.strn", &f) == CAIRN_EFORMAT, "string as f32 -> EFORMAT");
        ok(cairn__gguf_get_f32(g, "t.bool", &f) == CAIRN_EFORMAT, "bool as f32 -> EFORMAT");
        ok(cairn__gguf_get_bool(g, "t.u8", &b) == CAIRN_EFORMAT, "u8 as bool -> EFORMAT");
        ok(cairn__gguf_get_str(g, "t.u8", &s, &sl) == CAIRN_EFORMAT, "u8 as string -> EFORMAT");
        ok(cairn__gguf_get_str(g, "t.arr_str", &s, &sl) == CAIRN_EFORMAT,
           "array as string -> EFORMAT");
        ok(cairn__gguf_get_arr(g, "t.u8", &et, &u64) == CAIRN_EFORMAT,
           "scalar as array -> EFORMAT");
        ok(cairn__gguf_get_u32(g, "missing", &u32) == CAIRN_ENOTFOUND &&
               cairn__gguf_get_u64(g, "missing", &u64) == CAIRN_ENOTFOUND &&
               cairn__gguf_get_i64(g, "missing", &i64) == CAIRN_ENOTFOUND &&
               cairn__gguf_get_f32(g, "missing", &f) == CAIRN_ENOTFOUND &&
               cairn__gguf_get_bool(g, "missing", &b) == CAIRN_ENOTFOUND &&
               cairn__gguf_get_str(g, "missing", &s, &sl) == CAIRN_ENOTFOUND &&
               cairn__gguf_get_arr(g, "missing", &et, &u64) == CAIRN_ENOTFOUND &&
               cairn__gguf_arr_str(g, "missing", 0, &s, &sl) == CAIRN_ENOTFOUND &&
               cairn__gguf_arr_f32(g, "missing", 0, &f) == CAIRN_ENOTFOUND &&
               cairn__gguf_arr_i64(g, "missing", 0, &i64) == CAIRN_ENOTFOUND &&
               cairn__gguf_arr_data(g, "missing") == NULL,
           "every getter: absent key -> ENOTFOUND");

        /* arrays */
        ok(cairn__gguf_get_arr(g, "t.arr_str", &et, &u64) == 0 && et == CAIRN__GGUF_STRING &&
               u64 == 4,
           "array of strings: type and count");
        int strs_ok = 1;
        for (uint64_t i = 0; i < 4; i++)
            if (cairn__gguf_arr_str(g, "t.arr_str", i, &s, &sl) != 0 || sl != strlen(toks[i]) ||
                memcmp(s, toks[i], sl) != 0)
                strs_ok = 0;
        ok(strs_ok, "array of strings: every element");
        ok(cairn__gguf_arr_str(g, "t.arr_str", 4, &s, &sl) == CAIRN_EINVAL,
           "arr_str index past end -> EINVAL");
        ok(cairn__gguf_arr_str(g, "t.arr_str", UINT64_MAX, &s, &sl) == CAIRN_EINVAL,
           "arr_str huge index -> EINVAL");
        ok(cairn__gguf_get_arr(g, "t.arr_str0", &et, &u64) == 0 && u64 == 0, "empty string array");
        ok(cairn__gguf_arr_str(g, "t.arr_str0", 0, &s, &sl) == CAIRN_EINVAL,
           "empty array index 0 -> EINVAL");
        ok(cairn__gguf_arr_data(g, "t.arr_str") == NULL, "arr_data of strings -> NULL");
        ok(cairn__gguf_arr_str(g, "t.arr_f32", 0, &s, &sl) == CAIRN_EFORMAT,
           "arr_str on f32 array -> EFORMAT");
        ok(cairn__gguf_arr_f32(g, "t.arr_str", 0, &f) == CAIRN_EFORMAT,
           "arr_f32 on string array -> EFORMAT");
        ok(cairn__gguf_arr_i64(g, "t.arr_f32", 0, &i64) == CAIRN_EFORMAT,
           "arr_i64 on f32 array -> EFORMAT");
        ok(cairn__gguf_arr_f32(g, "t.u8", 0, &f) == CAIRN_EFORMAT, "arr_f32 on scalar -> EFORMAT");
        ok(cairn__gguf_arr_f32(g, "t.arr_f32", 2, &f) == 0 && f == 1e30f, "arr_f32");
        ok(cairn__gguf_arr_f32(g, "t.arr_f32", 3, &f) == CAIRN_EINVAL,
           "arr_f32 past end -> EINVAL");
        ok(cairn__gguf_arr_f32(g, "a.f64", 0, &f) == 0 && f == -0.25f, "arr_f32 of f64");
        ok(cairn__gguf_arr_f32(g, "t.arr_i32", 1, &f) == 0 && f == -1.0f, "arr_f32 of i32");
        const void *raw = cairn__gguf_arr_data(g, "t.arr_f32");
        float fr[3];
        if (raw)
            memcpy(fr, raw, sizeof fr);
        ok(raw && memcmp(fr, fa, sizeof fa) == 0, "arr_data of f32");
        raw = cairn__gguf_arr_data(g, "t.arr_i32");
        int32_t ir[4];
        if (raw)
            memcpy(ir, raw, sizeof ir);
        ok(raw && memcmp(ir, ia, sizeof ia) == 0, "arr_data of i32");
        ok(cairn__gguf_arr_i64(g, "t.arr_i32", 3, &i64) == 0 && i64 == INT32_MIN, "arr_i64 of i32");
        ok(cairn__gguf_arr_i64(g, "a.u8", 1, &i64) == 0 && i64 == 255, "arr_i64 of u8");
        ok(cairn__gguf_arr_i64(g, "a.i8", 0, &i64) == 0 && i64 == -128, "arr_i64 of i8");
        ok(cairn__gguf_arr_i64(g, "a.u16", 0, &i64) == 0 && i64 == 65535, "arr_i64 of u16");
        ok(cairn__gguf_arr_i64(g, "a.i16", 0, &i64) == 0 && i64 == -32768, "arr_i64 of i16");
        ok(cairn__gguf_arr_i64(g, "a.u32", 0, &i64) == 0 && i64 == 4294967295ll, "arr_i64 of u32");
        ok(cairn__gguf_arr_i64(g, "a.u64", 0, &i64) == 0 && i64 == 1, "arr_i64 of u64");
        ok(cairn__gguf_arr_i64(g, "a.u64", 1, &i64) == CAIRN_EFORMAT,
           "arr_i64 of u64 max -> EFORMAT");
        ok(cairn__gguf_arr_i64(g, "a.i64", 0, &i64) == 0 && i64 == INT64_MIN, "arr_i64 of i64 min");
        ok(cairn__gguf_arr_i64(g, "a.bool", 0, &i64) == CAIRN_EFORMAT,
           "arr_i64 of bool -> EFORMAT");
        ok(cairn__gguf_get_arr(g, "a.bool", &et, &u64) == 0 && et == CAIRN__GGUF_BOOL && u64 == 3,
           "bool array");
        raw = cairn__gguf_arr_data(g, "a.bool");
        ok(raw && memcmp(raw, boola, 3) == 0, "arr_data of bool");

        /* tensors */
        size_t expect_n = 0;
        for (int k = 0; k < NT; k++)
            expect_n += (size_t)type_writable(all_types[k]);
        ok(cairn__gguf_n_tensors(g) == expect_n, "n_tensors %zu", cairn__gguf_n_tensors(g));
        ok(cairn__gguf_tensor_at(g, expect_n) == NULL, "tensor_at out of range -> NULL");
        ok(cairn__gguf_tensor_find(g, "nope") == NULL, "tensor_find absent -> NULL");
        for (int k = 0; k < NT; k++) {
            uint32_t ty = all_types[k];
            if (!type_writable(ty))
                continue;
            const cairn__gguf_tensor *t = cairn__gguf_tensor_find(g, names[k]);
            ok(t != NULL && strcmp(t->name, names[k]) == 0, "%s: found", names[k]);
            if (!t)
                continue;
            uint64_t n = 1;
            int shape_ok = t->type == ty && t->n_dims == ndims[k];
            for (uint32_t d = 0; d < 4; d++) {
                uint64_t want = d < ndims[k] ? shapes[k][d] : 1;
                shape_ok = shape_ok && t->ne[d] == want;
                n *= want;
            }
            ok(shape_ok && t->n_elements == n, "%s: type, n_dims, ne, n_elements", names[k]);
            uint64_t rows = n / shapes[k][0];
            ok(t->nbytes == rows * cairn__ggml_row_size(ty, shapes[k][0]), "%s: nbytes %llu",
               names[k], (unsigned long long)t->nbytes);
            ok(t->offset % cairn__gguf_alignment(g) == 0 &&
                   t->offset >= cairn__gguf_data_offset(g) && t->offset + t->nbytes <= len,
               "%s: offset %llu aligned and inside", names[k], (unsigned long long)t->offset);
            ok(pass == 1 || (const unsigned char *)t->data == buf + t->offset, "%s: data pointer",
               names[k]);
#ifdef GW_HAVE_QUANT
            /* the bytes are exactly the reference quantization; dequantized they come back close */
            size_t rb = (size_t)cairn__ggml_row_size(ty, shapes[k][0]);
            unsigned char *q = malloc(rb);
            float *back = malloc(shapes[k][0] * sizeof(float));
            int bytes_ok = 1;
            float worst = 0;
            for (uint64_t r = 0; r < rows; r++) {
                const float *src = vals[k] + r * shapes[k][0];
                cairn__quant_row(ty, src, q, shapes[k][0]);
                if (memcmp(q, (const unsigned char *)t->data + r * rb, rb) != 0)
                    bytes_ok = 0;
                cairn__dequant_row(ty, (const unsigned char *)t->data + r * rb, back, shapes[k][0]);
                float amax = 0, emax = 0;
                for (uint64_t i = 0; i < shapes[k][0]; i++) {
                    amax = fmaxf(amax, fabsf(src[i]));
                    emax = fmaxf(emax, fabsf(back[i] - src[i]));
                }
                worst = fmaxf(worst, emax / amax);
            }
            ok(bytes_ok, "%s: data bytes are the reference quantization", names[k]);
            ok(worst <= tolerance(ty), "%s: round trip max relative error %g <= %g", names[k],
               (double)worst, (double)tolerance(ty));
            free(q);
            free(back);
#else
            (void)tolerance;
#endif
        }
        cairn__gguf_close(g);
    }
    unlink(path);
    free(buf);
    for (int k = 0; k < NT; k++)
        free(vals[k]);
}

/* ---- bad files ----------------------------------------------------------------------------- */

/* A small valid file with every kind of section, for truncation and patching. */
static unsigned char *small_file(size_t *len, uint64_t *data_end)
{
    cairn__gguf_writer *w = gw_new(3, 32);
    gw_kv_str(w, "general.name", "tiny");
    gw_kv_u32(w, "x.count", 7);
    static const char *const v[] = {"a", "bc", "def"};
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", v, 3);
    static const float s[] = {1, 2};
    gw_kv_arr_f32(w, "tokenizer.ggml.scores", s, 2);
    static const uint64_t ne1[] = {4, 2}, ne2[] = {3};
    static const float vals[] = {1, 2, 3, 4, 5, 6, 7, 8};
    gw_tensor_f32(w, "a.weight", CAIRN__GGML_F32, 2, ne1, vals);
    gw_tensor_f32(w, "b.bias", CAIRN__GGML_F16, 1, ne2, vals);
    unsigned char *p = build(w, len);
    /* the last tensor's data ends 6 bytes into its aligned slot */
    cairn__gguf *g = NULL;
    *data_end = 0;
    if (p && cairn__gguf_open_mem(p, *len, &g, errbuf, sizeof errbuf) == 0) {
        for (size_t i = 0; i < cairn__gguf_n_tensors(g); i++) {
            const cairn__gguf_tensor *t = cairn__gguf_tensor_at(g, i);
            if (t->offset + t->nbytes > *data_end)
                *data_end = t->offset + t->nbytes;
        }
        cairn__gguf_close(g);
    }
    return p;
}

static void test_truncation(void)
{
    size_t len;
    uint64_t data_end;
    unsigned char *full = small_file(&len, &data_end);
    ok(full && data_end > 0 && data_end <= len, "small file: %zu bytes, data ends at %llu", len,
       (unsigned long long)data_end);
    if (!full)
        return;
    /* every prefix, each in its own exact-size heap copy so valgrind/ASan see any overread */
    int bad = 0, msg_bad = 0;
    for (size_t n = 0; n < len; n++) {
        unsigned char *p = malloc(n ? n : 1);
        memcpy(p, full, n);
        cairn__gguf *g = NULL;
        errbuf[0] = 0;
        int rc = cairn__gguf_open_mem(p, n, &g, errbuf, sizeof errbuf);
        int want = n < data_end ? CAIRN_EFORMAT : 0;
        if (rc != want || (rc == 0) != (g != NULL)) {
            if (bad++ < 5)
                diag("prefix %zu: rc %d (want %d): %s", n, rc, want, errbuf);
        }
        if (rc && !strstr(errbuf, "offset") && !strstr(errbuf, "past end of file")) {
            if (msg_bad++ < 5)
                diag("prefix %zu: message names no place: %s", n, errbuf);
        }
        cairn__gguf_close(g);
        free(p);
    }
    ok(bad == 0, "every truncation before the end of the data fails with EFORMAT, after it opens");
    ok(msg_bad == 0, "every truncation message names an offset or the data range");

    /* spot checks of the message at a few places */
    expect(full, 10, CAIRN_EFORMAT, "offset 8", "truncated in tensor count");
    size_t k = after_str(full, len, "general.name");
    expect(full, k + 4 + 3, CAIRN_EFORMAT, "offset 16: key count 4",
           "truncated so far the counts cannot fit");
    k = after_str(full, len, "def");
    expect(full, k - 1, CAIRN_EFORMAT,
           "key 2 'tokenizer.ggml.tokens': element 2 string length 3 exceeds file",
           "truncated inside a string array element");
    k = after_str(full, len, "b.bias");
    expect(full, k + 2, CAIRN_EFORMAT, "tensor 1 'b.bias'", "truncated in n_dims");

    /* the mmap path: a truncated file on disk */
    char path[] = "/tmp/cairn-gguf-trunc-XXXXXX";
    int fd = mkstemp(path);
    ok(fd >= 0 && write(fd, full, (size_t)data_end - 1) == (ssize_t)data_end - 1,
       "truncated file written");
    if (fd >= 0)
        close(fd);
    cairn__gguf *g = NULL;
    int rc = cairn__gguf_open(path, &g, errbuf, sizeof errbuf);
    ok(rc == CAIRN_EFORMAT && !g && strstr(errbuf, "b.bias") && strstr(errbuf, path),
       "truncated file: EFORMAT naming the path and tensor: %s", errbuf);
    unlink(path);
    free(full);
}

static void test_bad_files(void)
{
    size_t len;
    uint64_t de;
    unsigned char *full = small_file(&len, &de);
    unsigned char *p = malloc(len);
    if (!full || !p) {
        ok(0, "small file");
        return;
    }
    /* One field patched per case. The field is at `delta` bytes after the end of the string
     * `anchor` (or at absolute offset delta when anchor is NULL). A "%zu" in want is replaced
     * by the patched offset. Layouts: a KV is u64 len, key, u32 type, value (array: u32 elem
     * type, u64 n, elems); a tensor info is u64 len, name, u32 n_dims, u64 ne[], u32 type,
     * u64 offset. The small file's "b.bias" has n_dims 1, "a.weight" n_dims 2. */
    static const struct {
        const char *anchor;
        long delta;
        unsigned width; /* 1, 4 or 8 */
        uint64_t value;
        long delta2; /* a second field set to the same value, 0 for none */
        int code;
        const char *want, *name;
    } cases[] = {
        {NULL, 0, 1, 'X', 0, CAIRN_EFORMAT, "offset 0: bad magic 58", "wrong magic"},
        {NULL, 4, 4, 1, 0, CAIRN_EUNSUPPORTED, "offset 4: GGUF version 1", "version 1"},
        {NULL, 4, 4, 4, 0, CAIRN_EUNSUPPORTED, "offset 4: GGUF version 4", "version 4"},
        {NULL, 4, 4, 0x03000000, 0, CAIRN_EUNSUPPORTED, "big-endian", "big-endian file"},
        {NULL, 16, 8, 1ull << 60, 0, CAIRN_EFORMAT, "offset 16: key count", "absurd n_kv"},
        {NULL, 16, 8, UINT64_MAX, 0, CAIRN_EFORMAT, "offset 16: key count", "n_kv = UINT64_MAX"},
        {NULL, 8, 8, 1ull << 40, 0, CAIRN_EFORMAT, "offset 8: tensor count", "absurd n_tensors"},
        {NULL, 8, 8, UINT64_MAX, 0, CAIRN_EFORMAT, "offset 8: tensor count",
         "n_tensors = UINT64_MAX"},
        /* one more tensor than the infos hold: the third info is read from the padding */
        {NULL, 8, 8, 3, 0, CAIRN_EFORMAT, "tensor 2", "n_tensors one too many"},
        {"general.name", 4, 8, 9999999, 0, CAIRN_EFORMAT,
         "offset %zu: key 0 'general.name': string length 9999999 exceeds file",
         "string length past EOF"},
        {"x.count", -15, 8, UINT64_MAX, 0, CAIRN_EFORMAT, "offset %zu: key 1: key string length",
         "key length UINT64_MAX"},
        {"x.count", -3, 1, 0, 0, CAIRN_EFORMAT, "key 1: key contains a NUL byte",
         "key with a NUL byte"},
        {"bc", -10, 8, 1ull << 62, 0, CAIRN_EFORMAT,
         "offset %zu: key 2 'tokenizer.ggml.tokens': element 1 string length",
         "array element string past EOF"},
        {"tokenizer.ggml.tokens", 8, 8, 1ull << 61, 0, CAIRN_EFORMAT,
         "'tokenizer.ggml.tokens': array of 2305843009213693952 strings exceeds file",
         "absurd string array count"},
        {"tokenizer.ggml.scores", 8, 8, UINT64_MAX / 2, 0, CAIRN_EFORMAT,
         "'tokenizer.ggml.scores': array of 9223372036854775807 f32 exceeds file",
         "absurd f32 array count"},
        {"tokenizer.ggml.scores", 4, 4, 9, 0, CAIRN_EUNSUPPORTED,
         "key 3 'tokenizer.ggml.scores': arrays of arrays are not supported", "nested array"},
        {"tokenizer.ggml.scores", 4, 4, 13, 0, CAIRN_EFORMAT,
         "offset %zu: key 3 'tokenizer.ggml.scores': unknown array element type 13",
         "bad array element type"},
        {"tokenizer.ggml.scores", 0, 4, 13, 0, CAIRN_EFORMAT,
         "offset %zu: key 3 'tokenizer.ggml.scores': unknown value type 13", "bad value type"},
        {"b.bias", 16, 8, 1ull << 20, 0, CAIRN_EFORMAT, "tensor 'b.bias': data [",
         "tensor offset past EOF"},
        {"b.bias", 16, 8, UINT64_MAX - 31, 0, CAIRN_EFORMAT,
         "tensor 1 'b.bias': data offset 18446744073709551584", "tensor offset overflows"},
        {"b.bias", 16, 8, 33, 0, CAIRN_EFORMAT,
         "tensor 1 'b.bias': data offset 33 is not a multiple of the alignment 32",
         "misaligned tensor offset"},
        {"b.bias", 12, 4, 16, 0, CAIRN_EUNSUPPORTED,
         "offset %zu: tensor 1 'b.bias': tensor type IQ2_XXS (16)",
         "unsupported tensor type IQ2_XXS"},
        {"b.bias", 12, 4, 1000, 0, CAIRN_EUNSUPPORTED, "tensor type ? (1000) is not supported",
         "unknown tensor type number"},
        {"b.bias", 0, 4, 0, 0, CAIRN_EFORMAT,
         "offset %zu: tensor 1 'b.bias': n_dims 0 outside 1..4", "n_dims 0"},
        {"b.bias", 0, 4, 5, 0, CAIRN_EFORMAT,
         "offset %zu: tensor 1 'b.bias': n_dims 5 outside 1..4", "n_dims 5"},
        {"b.bias", 4, 8, 0, 0, CAIRN_EFORMAT,
         "offset %zu: tensor 1 'b.bias': ne[0] = 0 is out of range", "ne 0"},
        {"b.bias", 4, 8, UINT64_MAX, 0, CAIRN_EFORMAT, "'b.bias': ne[0] = 18446744073709551615",
         "ne UINT64_MAX"},
        {"a.weight", 4, 8, 1ull << 62, 12, CAIRN_EFORMAT,
         "tensor 0 'a.weight': element count overflows", "element count overflow"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memcpy(p, full, len);
        size_t at = (size_t)cases[c].delta;
        if (cases[c].anchor)
            at = after_str(full, len, cases[c].anchor) + (size_t)cases[c].delta;
        for (int twice = 0; twice < (cases[c].delta2 ? 2 : 1); twice++) {
            size_t f = at + (twice ? (size_t)(cases[c].delta2 - cases[c].delta) : 0);
            if (cases[c].width == 1)
                p[f] = (unsigned char)cases[c].value;
            else if (cases[c].width == 4)
                put32(p + f, (uint32_t)cases[c].value);
            else
                put64(p + f, cases[c].value);
        }
        char want[160];
        if (strstr(cases[c].want, "%zu"))
            snprintf(want, sizeof want, cases[c].want, at);
        else
            snprintf(want, sizeof want, "%s", cases[c].want);
        expect(p, len, cases[c].code, want, cases[c].name);
    }

    {
        cairn__gguf_writer *w = gw_new(3, 32);
        static const uint64_t ne[] = {4};
        gw_tensor_f32(w, "dup", CAIRN__GGML_F32, 1, ne, NULL);
        gw_tensor_f32(w, "other", CAIRN__GGML_F32, 1, ne, NULL);
        gw_tensor_f32(w, "dup", CAIRN__GGML_F32, 1, ne, NULL);
        expect_built(w, 0, CAIRN_EFORMAT,
                     "tensor 2 'dup': duplicate tensor name (first seen as tensor 0)",
                     "duplicate tensor name");
    }
    {
        cairn__gguf_writer *w = gw_new(2, 32);
        gw_kv_u32(w, "k", 1);
        gw_kv_str(w, "k", "again");
        expect_built(w, 0, CAIRN_EFORMAT, "key 1 'k': duplicate key", "duplicate key");
    }
    {
        cairn__gguf_writer *w = gw_new(3, 32);
        static const uint64_t ne[] = {48, 2};
        gw_tensor_raw(w, "q.weight", CAIRN__GGML_Q8_0, 2, ne, NULL, 34 * 3);
        expect_built(w, 0, CAIRN_EFORMAT,
                     "'q.weight': ne[0] = 48 is not a multiple of the Q8_0 block size 32",
                     "ne[0] not a multiple of the block size");
    }
    {
        cairn__gguf_writer *w = gw_new(3, 32);
        static const uint64_t ne[] = {256};
        gw_tensor_raw(w, "k.weight", CAIRN__GGML_Q4_K, 1, ne, NULL, 143); /* one byte short */
        /* the writer pads to 32, so drop the padding to make the data really short */
        expect_built(w, (32 - 143 % 32), CAIRN_EFORMAT, "'k.weight': data [",
                     "Q4_K data one byte short");
    }
    /* alignment */
    static const struct {
        int kind; /* 0 u32, 1 string, 2 i32 */
        uint32_t v;
        const char *want;
    } al[] = {{0, 48, "48 is not a power of two"},
              {0, 0, "0 is not a power of two"},
              {1, 0, "type string"},
              {2, (uint32_t)-64, "-64 is not a power of two"}};
    for (size_t i = 0; i < sizeof al / sizeof al[0]; i++) {
        cairn__gguf_writer *w = gw_new(3, 0);
        if (al[i].kind == 0)
            gw_kv_u32(w, "general.alignment", al[i].v);
        else if (al[i].kind == 1)
            gw_kv_str(w, "general.alignment", "64");
        else
            gw_kv_i32(w, "general.alignment", (int32_t)al[i].v);
        static const uint64_t ne[] = {8};
        gw_tensor_f32(w, "t", CAIRN__GGML_F32, 1, ne, NULL);
        char name[64];
        snprintf(name, sizeof name, "bad general.alignment #%zu", i);
        expect_built(w, 0, CAIRN_EFORMAT, al[i].want, name);
        ok(strstr(errbuf, "general.alignment") != NULL, "...names the key: %s", errbuf);
    }
    /* valid odd alignments: 1 (no padding at all) and a large one */
    uint32_t good_al[] = {1, 8, 4096};
    for (size_t i = 0; i < 3; i++) {
        cairn__gguf_writer *w = gw_new(3, good_al[i]);
        static const uint64_t ne[] = {3};
        static const float v[] = {1, 2, 3};
        gw_tensor_f32(w, "t0", CAIRN__GGML_F32, 1, ne, v);
        gw_tensor_f32(w, "t1", CAIRN__GGML_F16, 1, ne, v);
        size_t n;
        unsigned char *d = build(w, &n);
        cairn__gguf *g = NULL;
        int rc = cairn__gguf_open_mem(d, n, &g, errbuf, sizeof errbuf);
        const cairn__gguf_tensor *t = g ? cairn__gguf_tensor_find(g, "t1") : NULL;
        ok(rc == 0 && t && cairn__gguf_alignment(g) == good_al[i] && t->offset % good_al[i] == 0,
           "alignment %u opens: %s", (unsigned)good_al[i], errbuf);
        cairn__gguf_close(g);
        free(d);
    }

    /* an empty file, a file with nothing but a header, a missing file, a directory */
    expect(p, 0, CAIRN_EFORMAT, "offset 0", "empty buffer");
    {
        cairn__gguf_writer *w = gw_new(2, 32);
        size_t n;
        unsigned char *d = build(w, &n);
        cairn__gguf *g = NULL;
        ok(n == 32 && cairn__gguf_open_mem(d, 24, &g, errbuf, sizeof errbuf) == 0 &&
               cairn__gguf_n_kv(g) == 0 && cairn__gguf_n_tensors(g) == 0,
           "header-only file opens: %s", errbuf);
        cairn__gguf_close(g);
        free(d);
    }
    cairn__gguf *g = (cairn__gguf *)1;
    int rc = cairn__gguf_open("/nonexistent/cairn.gguf", &g, errbuf, sizeof errbuf);
    ok(rc == CAIRN_ENOENT && !g && strstr(errbuf, "/nonexistent/cairn.gguf"),
       "missing file -> ENOENT: %s", errbuf);
    rc = cairn__gguf_open("/tmp", &g, errbuf, sizeof errbuf);
    ok(rc == CAIRN_ENOENT && !g && strstr(errbuf, "directory"),
       "directory -> ENOENT (not a model file): %s", errbuf);
    char path[] = "/tmp/cairn-gguf-empty-XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0)
        close(fd);
    rc = cairn__gguf_open(path, &g, errbuf, sizeof errbuf);
    ok(rc == CAIRN_EFORMAT && !g && strstr(errbuf, "empty"), "empty file -> EFORMAT: %s", errbuf);
    unlink(path);
    /* err may be NULL with errlen 0; tiny errlen truncates but terminates */
    rc = cairn__gguf_open_mem(full, 3, &g, NULL, 0);
    ok(rc == CAIRN_EFORMAT && !g, "NULL err buffer is fine");
    char tiny[4] = "xxx";
    rc = cairn__gguf_open_mem(full, 3, &g, tiny, sizeof tiny);
    ok(rc == CAIRN_EFORMAT && strlen(tiny) == 3, "short err buffer is NUL-terminated");
    ok(cairn__gguf_open_mem(full, len, NULL, NULL, 0) == CAIRN_EINVAL, "NULL out -> EINVAL");
    cairn__gguf_close(NULL);
    ok(cairn__gguf_n_kv(NULL) == 0 && cairn__gguf_n_tensors(NULL) == 0 &&
           cairn__gguf_tensor_find(NULL, "x") == NULL,
       "NULL reader accessors are safe");
    free(p);
    free(full);
}

/* Offset of the u64 data offset in the tensor info of name (the info is u64 len, name, u32
 * n_dims, u64 ne[n_dims], u32 type, u64 offset), and of its type. */
static size_t tensor_field(const unsigned char *buf, size_t len, const char *name, int type)
{
    size_t k = after_str(buf, len, name);
    uint32_t nd = buf[k] | buf[k + 1] << 8;
    return k + 4 + 8 * (size_t)nd + (type ? 0 : 4);
}

/* Four 16-float tensors, each in its own 64-byte slot: t0 @0, t1 @64, t2 @128, t3 @192. */
static unsigned char *four_tensors(size_t *len)
{
    cairn__gguf_writer *w = gw_new(3, 32);
    static const uint64_t ne[] = {16};
    static float v[16];
    for (int i = 0; i < 16; i++)
        v[i] = (float)i;
    gw_tensor_f32(w, "t0", CAIRN__GGML_F32, 1, ne, v);
    gw_tensor_f32(w, "t1", CAIRN__GGML_F32, 1, ne, v);
    gw_tensor_f32(w, "t2", CAIRN__GGML_F32, 1, ne, v);
    gw_tensor_f32(w, "t3", CAIRN__GGML_F32, 1, ne, v);
    return build(w, len);
}

/* Tensor data ranges must be disjoint; their order in the file is free. */
static void test_overlaps(void)
{
    size_t len;
    unsigned char *f = four_tensors(&len);
    if (!ok(f != NULL, "four-tensor file"))
        return;
    const size_t o1 = tensor_field(f, len, "t1", 0), o2 = tensor_field(f, len, "t2", 0),
                 o3 = tensor_field(f, len, "t3", 0);
    static const struct {
        uint64_t off1, off2, off3; /* new offsets of t1, t2, t3 */
        const char *want;          /* NULL: opens */
        const char *name;
    } cases[] = {
        {0, 128, 192, "tensor 1 't1': data [", "t1 at t0's offset"},
        {32, 128, 192, "overlaps tensor 0 't0': data [", "t1 starting inside t0"},
        {64, 160, 192, "tensor 3 't3': data [", "t2 running into t3"},
        {64, 128, 128, "overlaps tensor 2 't2'", "t3 at t2's offset"},
        {192, 128, 64, NULL, "t1 and t3 swapped (out of file order, disjoint)"},
        {128, 64, 192, NULL, "t1 and t2 swapped"},
    };
    unsigned char *p = malloc(len);
    for (size_t c = 0; p && c < sizeof cases / sizeof *cases; c++) {
        memcpy(p, f, len);
        put64(p + o1, cases[c].off1);
        put64(p + o2, cases[c].off2);
        put64(p + o3, cases[c].off3);
        cairn__gguf *g = NULL;
        errbuf[0] = 0;
        int rc = cairn__gguf_open_mem(p, len, &g, errbuf, sizeof errbuf);
        if (!cases[c].want) {
            const cairn__gguf_tensor *t = g ? cairn__gguf_tensor_find(g, "t1") : NULL;
            ok(rc == 0 && t && t->offset == cairn__gguf_data_offset(g) + cases[c].off1 &&
                   ((const float *)t->data)[5] == 5.0f,
               "%s: opens (%s)", cases[c].name, errbuf);
        } else {
            ok(rc == CAIRN_EFORMAT && !g && strstr(errbuf, cases[c].want) &&
                   strstr(errbuf, "overlaps"),
               "%s: EFORMAT naming both tensors: %s", cases[c].name, errbuf);
        }
        cairn__gguf_close(g);
    }
    /* both names, whichever comes first in the file */
    memcpy(p, f, len);
    put64(p + o1, 0);
    cairn__gguf *g = NULL;
    int rc = cairn__gguf_open_mem(p, len, &g, errbuf, sizeof errbuf);
    ok(rc == CAIRN_EFORMAT && strstr(errbuf, "'t0'") && strstr(errbuf, "'t1'"),
       "the overlap message names both tensors: %s", errbuf);
    free(p);
    free(f);
}

/* CAIRN__GGUF_ANY_TYPE: describing a file with types the engine cannot compute with. */
static void test_any_type(void)
{
    size_t len;
    unsigned char *f = four_tensors(&len);
    unsigned char *p = f ? malloc(len) : NULL;
    if (!ok(p != NULL, "four-tensor file"))
        goto out;
    memcpy(p, f, len);
    put32(p + tensor_field(f, len, "t1", 1), 16);  /* IQ2_XXS */
    put32(p + tensor_field(f, len, "t3", 1), 999); /* no such type */
    cairn__gguf *g = NULL;
    int rc = cairn__gguf_open_mem(p, len, &g, errbuf, sizeof errbuf);
    ok(rc == CAIRN_EUNSUPPORTED && !g && strstr(errbuf, "'t1'") && strstr(errbuf, "IQ2_XXS"),
       "plain open of an IQ2_XXS tensor -> EUNSUPPORTED naming it: %s", errbuf);
    rc = cairn__gguf_open_mem_ex(p, len, CAIRN__GGUF_ANY_TYPE, &g, errbuf, sizeof errbuf);
    ok(rc == 0 && g, "ANY_TYPE open describes it: %s", errbuf);
    if (g) {
        const cairn__gguf_tensor *t0 = cairn__gguf_tensor_find(g, "t0"),
                                 *t1 = cairn__gguf_tensor_find(g, "t1"),
                                 *t3 = cairn__gguf_tensor_find(g, "t3");
        const uint64_t d = cairn__gguf_data_offset(g);
        ok(t0 && t0->type == CAIRN__GGML_F32 && t0->nbytes == 64 && t0->offset == d,
           "ANY_TYPE: supported tensors are as before");
        ok(t1 && t1->type == 16 && cairn__ggml_block_size(t1->type) == 0 && t1->nbytes == 64 &&
               t1->offset == d + 64 && t1->data == (const void *)(p + d + 64) && t1->ne[0] == 16,
           "ANY_TYPE: an IQ2_XXS tensor spans up to the next tensor's data (%llu bytes)",
           t1 ? (unsigned long long)t1->nbytes : 0ull);
        ok(t3 && t3->type == 999 && t3->nbytes == len - (d + 192),
           "ANY_TYPE: the last unknown tensor spans to the end of the file (%llu bytes)",
           t3 ? (unsigned long long)t3->nbytes : 0ull);
        cairn__gguf_close(g);
    }
    /* an unknown tensor sharing a start with a known one, and starting past the end */
    put64(p + tensor_field(f, len, "t1", 0), 0);
    rc = cairn__gguf_open_mem_ex(p, len, CAIRN__GGUF_ANY_TYPE, &g, errbuf, sizeof errbuf);
    ok(rc == CAIRN_EFORMAT && !g && strstr(errbuf, "'t0'") && strstr(errbuf, "'t1'") &&
           strstr(errbuf, "overlaps"),
       "ANY_TYPE: an unknown tensor at another's offset -> EFORMAT naming both: %s", errbuf);
    memcpy(p, f, len);
    put32(p + tensor_field(f, len, "t0", 1), 999);
    put64(p + tensor_field(f, len, "t1", 0), 0);
    rc = cairn__gguf_open_mem_ex(p, len, CAIRN__GGUF_ANY_TYPE, &g, errbuf, sizeof errbuf);
    ok(rc == CAIRN_EFORMAT && !g && strstr(errbuf, "'t0'") && strstr(errbuf, "'t1'") &&
           strstr(errbuf, "overlaps"),
       "ANY_TYPE: a known tensor at an earlier unknown one's offset -> EFORMAT: %s", errbuf);
    memcpy(p, f, len);
    put32(p + tensor_field(f, len, "t3", 1), 999);
    put64(p + tensor_field(f, len, "t3", 0), 1u << 20);
    rc = cairn__gguf_open_mem_ex(p, len, CAIRN__GGUF_ANY_TYPE, &g, errbuf, sizeof errbuf);
    ok(rc == CAIRN_EFORMAT && !g && strstr(errbuf, "'t3'") && strstr(errbuf, "past end of file"),
       "ANY_TYPE: an unknown tensor starting past the end -> EFORMAT naming it: %s", errbuf);
    /* the flag does not relax anything else: a misaligned offset is still refused */
    put64(p + tensor_field(f, len, "t3", 0), 200);
    rc = cairn__gguf_open_mem_ex(p, len, CAIRN__GGUF_ANY_TYPE, &g, errbuf, sizeof errbuf);
    ok(rc == CAIRN_EFORMAT && !g && strstr(errbuf, "'t3'") && strstr(errbuf, "alignment"),
       "ANY_TYPE: a misaligned unknown tensor -> EFORMAT: %s", errbuf);
    /* the path variant */
    char path[] = "/tmp/cairn-gguf-any-XXXXXX";
    int fd = mkstemp(path);
    memcpy(p, f, len);
    put32(p + tensor_field(f, len, "t2", 1), 18); /* IQ3_XXS */
    ok(fd >= 0 && write(fd, p, len) == (ssize_t)len, "IQ3_XXS file written");
    if (fd >= 0)
        close(fd);
    rc = cairn__gguf_open(path, &g, errbuf, sizeof errbuf);
    ok(rc == CAIRN_EUNSUPPORTED && !g && strstr(errbuf, "IQ3_XXS"), "plain open: %s", errbuf);
    rc = cairn__gguf_open_ex(path, CAIRN__GGUF_ANY_TYPE, &g, errbuf, sizeof errbuf);
    ok(rc == 0 && g && cairn__gguf_tensor_find(g, "t2")->nbytes == 64,
       "ANY_TYPE open of the file: %s", errbuf);
    cairn__gguf_close(g);
    unlink(path);
out:
    free(p);
    free(f);
}

static void test_type_helpers(void)
{
    ok(strcmp(cairn__ggml_type_name(CAIRN__GGML_Q4_K), "Q4_K") == 0 &&
           strcmp(cairn__ggml_type_name(13), "Q5_K") == 0 &&
           strcmp(cairn__ggml_type_name(9999), "?") == 0,
       "type names");
    ok(cairn__ggml_row_size(CAIRN__GGML_F32, 10) == 40 &&
           cairn__ggml_row_size(CAIRN__GGML_F16, 10) == 20 &&
           cairn__ggml_row_size(CAIRN__GGML_BF16, 10) == 20 &&
           cairn__ggml_row_size(CAIRN__GGML_Q8_0, 64) == 68 &&
           cairn__ggml_row_size(CAIRN__GGML_Q4_0, 64) == 36 &&
           cairn__ggml_row_size(CAIRN__GGML_Q4_K, 512) == 288 &&
           cairn__ggml_row_size(CAIRN__GGML_Q6_K, 256) == 210,
       "row sizes");
    ok(cairn__ggml_row_size(CAIRN__GGML_Q8_0, 33) == 0 && cairn__ggml_row_size(16, 256) == 0 &&
           cairn__ggml_row_size(CAIRN__GGML_F32, UINT64_MAX) == 0,
       "row size 0 for partial blocks, unsupported types, overflow");
#ifdef GW_HAVE_QUANT
    int same = 1;
    for (size_t i = 0; i < sizeof all_types / sizeof all_types[0]; i++)
        if (cairn__ggml_block_size(all_types[i]) != cairn__quant_block_elems(all_types[i]) ||
            cairn__ggml_row_size(all_types[i], cairn__ggml_block_size(all_types[i])) !=
                cairn__quant_block_bytes(all_types[i]))
            same = 0;
    ok(same, "block sizes agree with gpu/quant.h");
#endif
    ok(strcmp(cairn__gguf_vtype_name(CAIRN__GGUF_STRING), "string") == 0 &&
           strcmp(cairn__gguf_vtype_name(99), "?") == 0,
       "vtype names");
}

/* The writer's misuse is latched and reported by gw_write, never a broken file. */
static void test_writer_errors(void)
{
    static const uint64_t ne48[] = {48}, ne4[] = {4};
    struct {
        int what;
        const char *name;
    } cases[] = {{0, "unsupported tensor type"},
                 {1, "ne[0] not a multiple of the block size"},
                 {2, "n_dims 0"},
                 {3, "version 1"},
                 {4, "alignment 48"},
                 {5, "path in a missing directory"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        cairn__gguf_writer *w = gw_new(cases[c].what == 3 ? 1 : 3, cases[c].what == 4 ? 48 : 32);
        if (cases[c].what == 0)
            gw_tensor_f32(w, "t", 13, 1, ne4, NULL);
        else if (cases[c].what == 1)
            gw_tensor_f32(w, "t", CAIRN__GGML_Q8_0, 1, ne48, NULL);
        else if (cases[c].what == 2)
            gw_tensor_f32(w, "t", CAIRN__GGML_F32, 0, ne4, NULL);
        const char *path =
            cases[c].what == 5 ? "/nonexistent/dir/x.gguf" : "/tmp/cairn-gw-never.gguf";
        ok(gw_write(w, path) == -1, "writer refuses: %s", cases[c].name);
        gw_free(w);
    }
    gw_free(NULL);
    ok(access("/tmp/cairn-gw-never.gguf", F_OK) != 0, "no file left behind by a refused write");
}

/* ---- the real vocabulary files ------------------------------------------------------------- */

static void test_vocab_files(void)
{
    const char *td = getenv("CAIRN_TESTDATA");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tokenizers", td ? td : "");
    DIR *d = td ? opendir(dir) : NULL;
    if (!d) {
        skip("no $CAIRN_TESTDATA/tokenizers");
        return;
    }
    int seen = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t nl = strlen(e->d_name);
        if (nl < 5 || strcmp(e->d_name + nl - 5, ".gguf") != 0)
            continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        seen++;
        cairn__gguf *g = NULL;
        int rc = cairn__gguf_open(path, &g, errbuf, sizeof errbuf);
        ok(rc == 0 && g, "%s opens: %s", e->d_name, errbuf);
        if (!g)
            continue;
        const char *s;
        size_t sl;
        int et;
        uint64_t n = 0;
        s = "";
        sl = 0;
        rc = cairn__gguf_get_str(g, "tokenizer.ggml.model", &s, &sl);
        ok(rc == 0 && sl > 0, "%s: tokenizer.ggml.model = %.*s", e->d_name, (int)sl, s);
        et = -1;
        rc = cairn__gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n);
        ok(rc == 0 && et == CAIRN__GGUF_STRING && n > 100,
           "%s: tokenizer.ggml.tokens holds %llu strings", e->d_name, (unsigned long long)n);
        uint64_t total = 0;
        int all = 1;
        for (uint64_t i = 0; i < n; i++) {
            if (cairn__gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s, &sl) != 0)
                all = 0;
            total += sl;
        }
        ok(all && total > 0, "%s: every token readable (%llu bytes)", e->d_name,
           (unsigned long long)total);
        ok(cairn__gguf_arr_str(g, "tokenizer.ggml.tokens", n, &s, &sl) == CAIRN_EINVAL,
           "%s: token %llu -> EINVAL", e->d_name, (unsigned long long)n);
        /* every tensor (vocab files usually have none) lies inside the file */
        int inside = 1;
        for (size_t i = 0; i < cairn__gguf_n_tensors(g); i++) {
            const cairn__gguf_tensor *t = cairn__gguf_tensor_at(g, i);
            if (t->offset + t->nbytes > cairn__gguf_file_size(g))
                inside = 0;
        }
        ok(inside, "%s: %zu keys, %zu tensors", e->d_name, cairn__gguf_n_kv(g),
           cairn__gguf_n_tensors(g));
        cairn__gguf_close(g);
    }
    closedir(d);
    if (!seen)
        skip("no .gguf files in %s", dir);
}

int main(void)
{
    test_type_helpers();
    test_roundtrip(3, 0);
    test_roundtrip(2, 32);
    test_roundtrip(3, 64);
    test_roundtrip(3, 1);
    test_truncation();
    test_bad_files();
    test_overlaps();
    test_any_type();
    test_writer_errors();
    test_vocab_files();
    return tap_done();
}
