/* tests/gguf_writer.c - builds GGUF files for tests, byte for byte as the format describes.
 *
 * Key/value pairs are serialized the moment they are added (into w->kvs), so the writer keeps
 * no per-type state; tensors keep their info and quantized bytes until gw_write_mem lays out
 * the file: header, KVs, tensor infos with offsets relative to the data section, padding to
 * the alignment, then each tensor's data padded to the alignment (as ggml does, so files load
 * in llama.cpp too).
 *
 * Errors in use (unsupported type, bad shape, out of memory) are latched in w->failed and
 * reported on stderr, so gw_write is the only call a test has to check.
 *
 * Quantization goes through gpu/quant.h's reference quantizers when gpu/quant.c is built
 * (GW_HAVE_QUANT); without it only F32, F16 and BF16 can be written.
 */
#include "tests/gguf_writer.h"

#include "gpu/gguf.h"
#ifdef GW_HAVE_QUANT
#include "gpu/quant.h"
#endif

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct buf {
    unsigned char *p;
    size_t n, cap;
};

struct gw_tensor {
    char *name;
    uint32_t type, n_dims;
    uint64_t ne[4];
    unsigned char *data;
    size_t nbytes;
};

struct cairn__gguf_writer {
    uint32_t version, alignment;
    uint64_t n_kv;
    struct buf kvs;
    struct gw_tensor *t;
    size_t n_t, cap_t;
    int failed;
};

static void gw_fail(cairn__gguf_writer *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void gw_fail(cairn__gguf_writer *w, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "gguf_writer: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    if (w)
        w->failed = 1;
}

static int buf_put(cairn__gguf_writer *w, struct buf *b, const void *src, size_t n)
{
    if (n > SIZE_MAX - b->n) {
        gw_fail(w, "buffer overflow");
        return -1;
    }
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) {
            gw_fail(w, "out of memory");
            return -1;
        }
        b->p = p;
        b->cap = cap;
    }
    if (src)
        memcpy(b->p + b->n, src, n);
    else
        memset(b->p + b->n, 0, n);
    b->n += n;
    return 0;
}

/* little-endian fixed-width writers (the host is assumed little-endian only through memcpy of
 * float bits; integers are written byte by byte) */
static void put_le(cairn__gguf_writer *w, struct buf *b, uint64_t v, unsigned bytes)
{
    unsigned char tmp[8];
    for (unsigned i = 0; i < bytes; i++)
        tmp[i] = (unsigned char)(v >> (8 * i));
    buf_put(w, b, tmp, bytes);
}

static void put_str(cairn__gguf_writer *w, struct buf *b, const char *s, size_t len)
{
    put_le(w, b, len, 8);
    buf_put(w, b, s, len);
}

cairn__gguf_writer *gw_new(uint32_t version, uint32_t alignment)
{
    cairn__gguf_writer *w = calloc(1, sizeof *w);
    if (!w) {
        gw_fail(NULL, "out of memory");
        return NULL;
    }
    w->version = version;
    w->alignment = alignment ? alignment : 32;
    if (version != 2 && version != 3)
        gw_fail(w, "version %u: only 2 and 3 can be written", (unsigned)version);
    if (w->alignment & (w->alignment - 1))
        gw_fail(w, "alignment %u is not a power of two", (unsigned)w->alignment);
    if (w->alignment != 32)
        gw_kv_u32(w, "general.alignment", w->alignment);
    return w;
}

/* key + type, then the caller appends the value */
static int kv_head(cairn__gguf_writer *w, const char *key, int type)
{
    if (!w)
        return -1;
    if (!key) {
        gw_fail(w, "NULL key");
        return -1;
    }
    put_str(w, &w->kvs, key, strlen(key));
    put_le(w, &w->kvs, (uint64_t)type, 4);
    w->n_kv++;
    return 0;
}

static void kv_scalar(cairn__gguf_writer *w, const char *key, int type, uint64_t bits,
                      unsigned bytes)
{
    if (kv_head(w, key, type) == 0)
        put_le(w, &w->kvs, bits, bytes);
}

/* A power-of-two general.alignment set by hand also governs this writer's padding. */
static void note_alignment(cairn__gguf_writer *w, const char *key, uint64_t v)
{
    if (w && key && strcmp(key, "general.alignment") == 0 && v && v <= UINT32_MAX && !(v & (v - 1)))
        w->alignment = (uint32_t)v;
}

void gw_kv_u8(cairn__gguf_writer *w, const char *key, uint8_t v)
{
    kv_scalar(w, key, CAIRN__GGUF_U8, v, 1);
}
void gw_kv_i8(cairn__gguf_writer *w, const char *key, int8_t v)
{
    kv_scalar(w, key, CAIRN__GGUF_I8, (uint8_t)v, 1);
}
void gw_kv_u16(cairn__gguf_writer *w, const char *key, uint16_t v)
{
    kv_scalar(w, key, CAIRN__GGUF_U16, v, 2);
}
void gw_kv_i16(cairn__gguf_writer *w, const char *key, int16_t v)
{
    kv_scalar(w, key, CAIRN__GGUF_I16, (uint16_t)v, 2);
}
void gw_kv_u32(cairn__gguf_writer *w, const char *key, uint32_t v)
{
    note_alignment(w, key, v);
    kv_scalar(w, key, CAIRN__GGUF_U32, v, 4);
}
void gw_kv_i32(cairn__gguf_writer *w, const char *key, int32_t v)
{
    kv_scalar(w, key, CAIRN__GGUF_I32, (uint32_t)v, 4);
}
void gw_kv_u64(cairn__gguf_writer *w, const char *key, uint64_t v)
{
    kv_scalar(w, key, CAIRN__GGUF_U64, v, 8);
}
void gw_kv_i64(cairn__gguf_writer *w, const char *key, int64_t v)
{
    kv_scalar(w, key, CAIRN__GGUF_I64, (uint64_t)v, 8);
}
void gw_kv_bool(cairn__gguf_writer *w, const char *key, int v)
{
    kv_scalar(w, key, CAIRN__GGUF_BOOL, v ? 1 : 0, 1);
}

void gw_kv_f32(cairn__gguf_writer *w, const char *key, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    kv_scalar(w, key, CAIRN__GGUF_F32, u, 4);
}

void gw_kv_f64(cairn__gguf_writer *w, const char *key, double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    kv_scalar(w, key, CAIRN__GGUF_F64, u, 8);
}

void gw_kv_strn(cairn__gguf_writer *w, const char *key, const char *v, size_t len)
{
    if (kv_head(w, key, CAIRN__GGUF_STRING) == 0)
        put_str(w, &w->kvs, v, len);
}

void gw_kv_str(cairn__gguf_writer *w, const char *key, const char *v)
{
    gw_kv_strn(w, key, v ? v : "", v ? strlen(v) : 0);
}

void gw_kv_arr_str(cairn__gguf_writer *w, const char *key, const char *const *v, size_t n)
{
    if (kv_head(w, key, CAIRN__GGUF_ARRAY))
        return;
    put_le(w, &w->kvs, CAIRN__GGUF_STRING, 4);
    put_le(w, &w->kvs, n, 8);
    for (size_t i = 0; i < n; i++)
        put_str(w, &w->kvs, v[i] ? v[i] : "", v[i] ? strlen(v[i]) : 0);
}

static unsigned elem_bytes(int t)
{
    switch (t) {
    case CAIRN__GGUF_U8:
    case CAIRN__GGUF_I8:
    case CAIRN__GGUF_BOOL:
        return 1;
    case CAIRN__GGUF_U16:
    case CAIRN__GGUF_I16:
        return 2;
    case CAIRN__GGUF_U32:
    case CAIRN__GGUF_I32:
    case CAIRN__GGUF_F32:
        return 4;
    case CAIRN__GGUF_U64:
    case CAIRN__GGUF_I64:
    case CAIRN__GGUF_F64:
        return 8;
    default:
        return 0;
    }
}

void gw_kv_arr_raw(cairn__gguf_writer *w, const char *key, int elem_type, const void *v, size_t n)
{
    unsigned sz = elem_bytes(elem_type);
    if (!w)
        return;
    if (!sz) {
        gw_fail(w, "key '%s': array element type %d is not numeric", key ? key : "?", elem_type);
        return;
    }
    if (kv_head(w, key, CAIRN__GGUF_ARRAY))
        return;
    put_le(w, &w->kvs, (uint64_t)elem_type, 4);
    put_le(w, &w->kvs, n, 8);
    /* elements are host layout; cairn only runs on little-endian hosts, as GGUF itself assumes */
    if (n)
        buf_put(w, &w->kvs, v, n * sz);
}

void gw_kv_arr_f32(cairn__gguf_writer *w, const char *key, const float *v, size_t n)
{
    gw_kv_arr_raw(w, key, CAIRN__GGUF_F32, v, n);
}

void gw_kv_arr_i32(cairn__gguf_writer *w, const char *key, const int32_t *v, size_t n)
{
    gw_kv_arr_raw(w, key, CAIRN__GGUF_I32, v, n);
}

/* ---- tensors ------------------------------------------------------------------------------- */

#ifndef GW_HAVE_QUANT
/* Round-to-nearest-even float -> IEEE half, used only when gpu/quant.c is not built. */
static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, e = (x >> 23) & 0xff, m = x & 0x7fffff;
    if (e == 0xff)
        return (uint16_t)(sign | 0x7c00 | (m ? 0x200 : 0));
    int ex = (int)e - 127 + 15;
    if (ex >= 31)
        return (uint16_t)(sign | 0x7c00);
    if (ex <= 0) {
        if (ex < -10)
            return (uint16_t)sign;
        m |= 0x800000;
        unsigned shift = (unsigned)(14 - ex);
        uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)ex << 10) | (m >> 13), rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++; /* may carry into the exponent, which is the correct rounding to infinity */
    return (uint16_t)(sign | h);
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}
#endif

/* Quantizes one row of n floats into dst (row_size bytes). */
static int quant_row(uint32_t type, const float *src, unsigned char *dst, uint64_t n)
{
#ifdef GW_HAVE_QUANT
    return cairn__quant_row(type, src, dst, n);
#else
    for (uint64_t i = 0; i < n; i++) {
        if (type == CAIRN__GGML_F32) {
            memcpy(dst + 4 * i, &src[i], 4);
        } else if (type == CAIRN__GGML_F16 || type == CAIRN__GGML_BF16) {
            uint16_t h = type == CAIRN__GGML_F16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
            memcpy(dst + 2 * i, &h, 2);
        } else {
            return -1;
        }
    }
    return 0;
#endif
}

static struct gw_tensor *add_tensor(cairn__gguf_writer *w, const char *name, uint32_t type,
                                    uint32_t n_dims, const uint64_t *ne)
{
    if (!w)
        return NULL;
    if (!name || (n_dims && !ne)) {
        gw_fail(w, "tensor: NULL name or shape");
        return NULL;
    }
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 16;
        struct gw_tensor *t = realloc(w->t, cap * sizeof *t);
        if (!t) {
            gw_fail(w, "out of memory");
            return NULL;
        }
        w->t = t;
        w->cap_t = cap;
    }
    struct gw_tensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) {
        gw_fail(w, "out of memory");
        return NULL;
    }
    w->n_t++;
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < 4; d++)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    return t;
}

void gw_tensor_f32(cairn__gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                   const uint64_t *ne, const float *values)
{
    if (!w)
        return;
    if (n_dims < 1 || n_dims > 4) {
        gw_fail(w, "tensor '%s': n_dims %u outside 1..4", name ? name : "?", (unsigned)n_dims);
        return;
    }
    struct gw_tensor *t = add_tensor(w, name, type, n_dims, ne);
    if (!t)
        return;
    uint64_t row = cairn__ggml_row_size(type, t->ne[0]);
    if (!row) {
        gw_fail(w, "tensor '%s': type %s (%u) with ne[0] = %llu cannot be written", name,
                cairn__ggml_type_name(type), (unsigned)type, (unsigned long long)t->ne[0]);
        return;
    }
    uint64_t rows, total;
    if (__builtin_mul_overflow(t->ne[1], t->ne[2], &rows) ||
        __builtin_mul_overflow(rows, t->ne[3], &rows) ||
        __builtin_mul_overflow(rows, row, &total) || total > SIZE_MAX) {
        gw_fail(w, "tensor '%s': too large", name);
        return;
    }
    t->nbytes = (size_t)total;
    t->data = calloc(t->nbytes ? t->nbytes : 1, 1);
    if (!t->data) {
        gw_fail(w, "tensor '%s': out of memory for %zu bytes", name, t->nbytes);
        return;
    }
    if (!values)
        return;
    for (uint64_t r = 0; r < rows; r++)
        if (quant_row(type, values + r * t->ne[0], t->data + r * row, t->ne[0]) != 0) {
            gw_fail(w, "tensor '%s': cannot quantize to %s", name, cairn__ggml_type_name(type));
            return;
        }
}

void gw_tensor_raw(cairn__gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                   const uint64_t *ne, const void *data, size_t nbytes)
{
    if (n_dims > 4) { /* keep the shape we store bounded; write extra dims as given */
        gw_fail(w, "tensor '%s': gw_tensor_raw holds at most 4 dims", name ? name : "?");
        return;
    }
    struct gw_tensor *t = add_tensor(w, name, type, n_dims, ne);
    if (!t)
        return;
    t->nbytes = nbytes;
    t->data = calloc(nbytes ? nbytes : 1, 1);
    if (!t->data) {
        gw_fail(w, "tensor '%s': out of memory", name);
        return;
    }
    if (data && nbytes)
        memcpy(t->data, data, nbytes);
}

/* ---- output -------------------------------------------------------------------------------- */

static size_t pad_to(size_t n, uint32_t a) { return (n + a - 1) / a * a; }

int gw_write_mem(cairn__gguf_writer *w, unsigned char **out, size_t *len)
{
    if (!w || !out || !len)
        return -1;
    *out = NULL;
    *len = 0;
    if (w->failed)
        return -1;
    /* the whole file in one allocation (a model of many GB is otherwise copied as it grows):
     * the header and metadata, each tensor's record, and the data, padded */
    size_t need = 24 + w->kvs.n + w->alignment;
    for (size_t i = 0; i < w->n_t; i++)
        need += 8 + strlen(w->t[i].name) + 4 + 8 * (size_t)w->t[i].n_dims + 12 +
                pad_to(w->t[i].nbytes, w->alignment);
    struct buf b = {0};
    if ((b.p = malloc(need)) != NULL)
        b.cap = need;
    buf_put(w, &b, "GGUF", 4);
    put_le(w, &b, w->version, 4);
    put_le(w, &b, w->n_t, 8);
    put_le(w, &b, w->n_kv, 8);
    buf_put(w, &b, w->kvs.p, w->kvs.n);
    size_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const struct gw_tensor *t = &w->t[i];
        put_str(w, &b, t->name, strlen(t->name));
        put_le(w, &b, t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++)
            put_le(w, &b, t->ne[d], 8);
        put_le(w, &b, t->type, 4);
        put_le(w, &b, off, 8);
        off += pad_to(t->nbytes, w->alignment);
    }
    buf_put(w, &b, NULL, pad_to(b.n, w->alignment) - b.n);
    for (size_t i = 0; i < w->n_t; i++) {
        const struct gw_tensor *t = &w->t[i];
        buf_put(w, &b, t->data, t->nbytes);
        buf_put(w, &b, NULL, pad_to(t->nbytes, w->alignment) - t->nbytes);
    }
    if (w->failed) {
        free(b.p);
        return -1;
    }
    *out = b.p;
    *len = b.n;
    return 0;
}

int gw_write(cairn__gguf_writer *w, const char *path)
{
    unsigned char *p;
    size_t n;
    if (!path || gw_write_mem(w, &p, &n) != 0)
        return -1;
    FILE *f = fopen(path, "wb");
    if (!f) {
        gw_fail(w, "%s: cannot create", path);
        free(p);
        return -1;
    }
    int ok = fwrite(p, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    free(p);
    if (!ok) {
        gw_fail(w, "%s: write failed", path);
        return -1;
    }
    return 0;
}

void gw_free(cairn__gguf_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->t);
    free(w->kvs.p);
    free(w);
}
