/* gpu/gguf_open.c - opening a GGUF v2/v3 file: validate everything once, then trust it.
 *
 * A GGUF file is: magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, then n_kv key/value
 * pairs, then n_tensors tensor infos (name, n_dims, ne[], type, offset relative to the data
 * section), then padding to general.alignment, then the tensor data. Everything is
 * little-endian and nothing is aligned, so every field is decoded byte by byte through one
 * cursor (struct rd) whose only way to advance is a bounds check against the file size. Every
 * count, length and offset comes from an untrusted file, so each is checked with
 * overflow-safe arithmetic *before* anything is allocated or read: a count that could not fit
 * in the bytes left is rejected outright (a 60-byte file cannot declare 2^60 tensors and make
 * us allocate for them).
 *
 * Open-time work buys O(1) access later: keys and tensor names are copied NUL-terminated and
 * hashed, and every array of strings gets an index of element offsets, because a vocabulary
 * holds 150k strings whose lengths are interleaved with their bytes. Values themselves are
 * never copied: getters decode them straight from the mapping, which is read-only and
 * MAP_PRIVATE so the file cannot be modified through us.
 *
 * Tensor data ranges are checked as a set, not one by one: sorted by start, each must end
 * before the next begins, so two tensors can never share bytes (a patched offset that points
 * one weight at another's data would otherwise load and run on garbage). The same sorted order
 * gives a tensor of a type the reader cannot size (open with CAIRN__GGUF_ANY_TYPE) its span: up
 * to the next tensor's data.
 *
 * This file is the only one that reads the file's structure; the lookups of gguf.c then work from
 * what it built (gguf_impl.h) and never meet an unchecked byte.
 */
#include "gpu/gguf.h"
#include "gpu/gguf_impl.h"

#include "cairn_errors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32u
/* Smallest encodings, for rejecting absurd counts: a KV is key length (8) + type (4) + at least
 * one value byte; a tensor info is name length (8) + n_dims (4) + one ne (8) + type (4) +
 * offset (8). An array element is at least 1 byte, a string element at least its length. */
#define GGUF_MIN_KV_BYTES 13u
#define GGUF_MIN_TENSOR_BYTES 32u

/* ---- errors -------------------------------------------------------------------------------- */

int cairn__errf(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* ---- the cursor ---------------------------------------------------------------------------- */

struct rd {
    const uint8_t *b;
    uint64_t size, off;
    char *err;
    size_t errlen;
    char ctx[160]; /* "key 7 'general.name'" or "tensor 3 'x'": prefixes every message */
};

static uint64_t left(const struct rd *r) { return r->size - r->off; }

/* Ensures n more bytes exist at the cursor, naming what was being read. */
static int need(struct rd *r, uint64_t n, const char *what)
{
    if (n > left(r))
        return cairn__errf(r->err, r->errlen, CAIRN_EFORMAT,
                           "offset %" PRIu64 ": %s: %s needs %" PRIu64
                           " bytes but the file ends at %" PRIu64,
                           r->off, r->ctx, what, n, r->size);
    return 0;
}

/* Reads a little-endian u32 (w = 4) or u64 (w = 8). */
static int rd_le(struct rd *r, unsigned w, uint64_t *v, const char *what)
{
    int rc = need(r, w, what);
    if (rc)
        return rc;
    *v = w == 4 ? le32(r->b + r->off) : le64(r->b + r->off);
    r->off += w;
    return 0;
}

static int rd_u32(struct rd *r, uint32_t *v, const char *what)
{
    uint64_t x = 0;
    int rc = rd_le(r, 4, &x, what);
    *v = (uint32_t)x;
    return rc;
}

static int rd_u64(struct rd *r, uint64_t *v, const char *what) { return rd_le(r, 8, v, what); }

/* A GGUF string: u64 length, then bytes (no terminator). */
static int rd_str(struct rd *r, const uint8_t **s, uint64_t *len, const char *what)
{
    uint64_t at = r->off;
    int rc = rd_u64(r, len, what);
    if (rc)
        return rc;
    if (*len > left(r))
        return cairn__errf(r->err, r->errlen, CAIRN_EFORMAT,
                           "offset %" PRIu64 ": %s: %s length %" PRIu64 " exceeds file (%" PRIu64
                           " bytes left)",
                           at, r->ctx, what, *len, left(r));
    *s = r->b + r->off;
    r->off += *len;
    return 0;
}

/* Copies a name (key or tensor name) NUL-terminated; a NUL inside would make it ambiguous. */
static int copy_name(struct rd *r, const uint8_t *s, uint64_t len, uint64_t at, const char *what,
                     char **out)
{
    if (memchr(s, 0, len))
        return cairn__errf(r->err, r->errlen, CAIRN_EFORMAT,
                           "offset %" PRIu64 ": %s: %s contains a NUL byte", at, r->ctx, what);
    if (len == 0)
        return cairn__errf(r->err, r->errlen, CAIRN_EFORMAT, "offset %" PRIu64 ": %s: empty %s", at,
                           r->ctx, what);
    char *c = malloc(len + 1);
    if (!c)
        return cairn__errf(r->err, r->errlen, CAIRN_ENOMEM, "%s: out of memory copying %s", r->ctx,
                           what);
    memcpy(c, s, len);
    c[len] = 0;
    *out = c;
    return 0;
}

/* Sets r->ctx to "<kind> <i> '<name>'", truncating long names for readability. */
static void set_ctx(struct rd *r, const char *kind, size_t i, const char *name)
{
    if (name)
        snprintf(r->ctx, sizeof r->ctx, "%s %zu '%.100s%s'", kind, i, name,
                 strlen(name) > 100 ? "..." : "");
    else
        snprintf(r->ctx, sizeof r->ctx, "%s %zu", kind, i);
}

/* ---- hash tables over keys and tensor names (probed by htab_lookup, gguf_impl.h) ----------- */

static int htab_init(struct htab *h, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n) /* n is bounded by the file size, so this cannot overflow */
        cap <<= 1;
    h->slot = calloc(cap, sizeof *h->slot);
    h->mask = cap - 1;
    return h->slot ? 0 : -1;
}

/* ---- parsing ------------------------------------------------------------------------------- */

static int parse_kv(cairn__gguf *g, struct rd *r, size_t i)
{
    struct kv *kv = &g->kv[i];
    const uint8_t *s;
    uint64_t len, at = r->off;
    int rc;

    set_ctx(r, "key", i, NULL);
    if ((rc = rd_str(r, &s, &len, "key string")) ||
        (rc = copy_name(r, s, len, at, "key", &kv->key)))
        return rc;
    set_ctx(r, "key", i, kv->key);
    size_t dup = htab_lookup(g, &g->kv_h, kv_name, kv->key, i);
    if (dup != SIZE_MAX)
        return cairn__errf(r->err, r->errlen, CAIRN_EFORMAT,
                           "offset %" PRIu64 ": %s: duplicate key (first seen as key %zu)", at,
                           r->ctx, dup);

    at = r->off;
    if ((rc = rd_u32(r, &kv->type, "value type")))
        return rc;
    if (kv->type >= GGUF_NVTYPES)
        return cairn__errf(r->err, r->errlen, CAIRN_EFORMAT,
                           "offset %" PRIu64 ": %s: unknown value type %" PRIu32, at, r->ctx,
                           kv->type);

    if (kv->type == CAIRN__GGUF_STRING) {
        if ((rc = rd_str(r, &kv->val, &kv->n, "string")))
            return rc;
        return 0;
    }
    if (kv->type != CAIRN__GGUF_ARRAY) {
        unsigned sz = cairn__gguf_vtype_size(kv->type);
        if ((rc = need(r, sz, cairn__gguf_vtype_name((int)kv->type))))
            return rc;
        kv->val = r->b + r->off;
        r->off += sz;
        return 0;
    }

    at = r->off;
    if ((rc = rd_u32(r, &kv->elem_type, "array element type")))
        return rc;
    if (kv->elem_type >= GGUF_NVTYPES)
        return cairn__errf(r->err, r->errlen, CAIRN_EFORMAT,
                           "offset %" PRIu64 ": %s: unknown array element type %" PRIu32, at,
                           r->ctx, kv->elem_type);
    if (kv->elem_type == CAIRN__GGUF_ARRAY)
        return cairn__errf(r->err, r->errlen, CAIRN_EUNSUPPORTED,
                           "offset %" PRIu64 ": %s: arrays of arrays are not supported", at,
                           r->ctx);
    at = r->off;
    if ((rc = rd_u64(r, &kv->n, "array length")))
        return rc;
    kv->val = r->b + r->off;

    if (kv->elem_type != CAIRN__GGUF_STRING) {
        unsigned sz = cairn__gguf_vtype_size(kv->elem_type);
        if (kv->n > left(r) / sz)
            return cairn__errf(r->err, r->errlen, CAIRN_EFORMAT,
                               "offset %" PRIu64 ": %s: array of %" PRIu64
                               " %s exceeds file (%" PRIu64 " bytes left)",
                               at, r->ctx, kv->n, cairn__gguf_vtype_name((int)kv->elem_type),
                               left(r));
        r->off += kv->n * sz;
        return 0;
    }

    /* Strings: every element takes at least its 8-byte length, which bounds the index size. */
    if (kv->n > left(r) / 8)
        return cairn__errf(r->err, r->errlen, CAIRN_EFORMAT,
                           "offset %" PRIu64 ": %s: array of %" PRIu64
                           " strings exceeds file (%" PRIu64 " bytes left)",
                           at, r->ctx, kv->n, left(r));
    kv->str_off = malloc((kv->n ? kv->n : 1) * sizeof *kv->str_off);
    if (!kv->str_off)
        return cairn__errf(r->err, r->errlen, CAIRN_ENOMEM,
                           "%s: out of memory indexing %" PRIu64 " strings", r->ctx, kv->n);
    for (uint64_t j = 0; j < kv->n; j++) {
        kv->str_off[j] = r->off;
        /* fast path for the 150k strings of a vocabulary; rd_str explains a failure */
        if (left(r) >= 8 && le64(r->b + r->off) <= left(r) - 8) {
            r->off += 8 + le64(r->b + r->off);
            continue;
        }
        char what[48];
        snprintf(what, sizeof what, "element %" PRIu64 " string", j);
        rc = rd_str(r, &s, &len, what);
        return rc ? rc : CAIRN_EFORMAT; /* rc is never 0 here: the fast path took every valid one */
    }
    return 0;
}

static int parse_tensor(cairn__gguf *g, struct rd *r, size_t i)
{
    cairn__gguf_tensor *t = &g->tensors[i];
    const uint8_t *s;
    uint64_t len, at = r->off;
    char *name = NULL;
    int rc;

    set_ctx(r, "tensor", i, NULL);
    if ((rc = rd_str(r, &s, &len, "name string")) || (rc = copy_name(r, s, len, at, "name", &name)))
        return rc;
    t->name = name;
    set_ctx(r, "tensor", i, name);
    size_t dup = htab_lookup(g, &g->tensor_h, tensor_name, name, i);
    if (dup != SIZE_MAX)
        return cairn__errf(r->err, r->errlen, CAIRN_EFORMAT,
                           "offset %" PRIu64
                           ": %s: duplicate tensor name (first seen as tensor %zu)",
                           at, r->ctx, dup);

    at = r->off;
    if ((rc = rd_u32(r, &t->n_dims, "n_dims")))
        return rc;
    if (t->n_dims < 1 || t->n_dims > 4)
        return cairn__errf(r->err, r->errlen, CAIRN_EFORMAT,
                           "offset %" PRIu64 ": %s: n_dims %" PRIu32 " outside 1..4", at, r->ctx,
                           t->n_dims);
    t->n_elements = 1;
    for (uint32_t d = 0; d < 4; d++) {
        t->ne[d] = 1;
        if (d >= t->n_dims)
            continue;
        at = r->off;
        if ((rc = rd_u64(r, &t->ne[d], "ne")))
            return rc;
        /* ggml holds shapes in int64_t; keep every product representable there too. */
        if (t->ne[d] < 1 || t->ne[d] > INT64_MAX)
            return cairn__errf(r->err, r->errlen, CAIRN_EFORMAT,
                               "offset %" PRIu64 ": %s: ne[%" PRIu32 "] = %" PRIu64
                               " is out of range",
                               at, r->ctx, d, t->ne[d]);
        if (__builtin_mul_overflow(t->n_elements, t->ne[d], &t->n_elements) ||
            t->n_elements > INT64_MAX)
            return cairn__errf(r->err, r->errlen, CAIRN_EFORMAT,
                               "offset %" PRIu64 ": %s: element count overflows", at, r->ctx);
    }

    at = r->off;
    if ((rc = rd_u32(r, &t->type, "type")))
        return rc;
    uint64_t be, bb;
    if (!cairn__ggml_type_block(t->type, &be, &bb)) {
        if (g->flags & CAIRN__GGUF_ANY_TYPE) { /* sized by place_tensors() */
            t->nbytes = 0;
            return rd_u64(r, &t->offset, "data offset");
        }
        return cairn__errf(r->err, r->errlen, CAIRN_EUNSUPPORTED,
                           "offset %" PRIu64 ": %s: tensor type %s (%" PRIu32 ") is not supported",
                           at, r->ctx, cairn__ggml_type_name(t->type), t->type);
    }
    if (t->ne[0] % be)
        return cairn__errf(r->err, r->errlen, CAIRN_EFORMAT,
                           "%s: ne[0] = %" PRIu64
                           " is not a multiple of the %s block size %" PRIu64,
                           r->ctx, t->ne[0], cairn__ggml_type_name(t->type), be);
    /* rows * row bytes; n_elements <= INT64_MAX bounds rows, the row size may still overflow */
    uint64_t rows = t->n_elements / t->ne[0];
    if (__builtin_mul_overflow(rows, cairn__ggml_row_size(t->type, t->ne[0]), &t->nbytes))
        return cairn__errf(r->err, r->errlen, CAIRN_EFORMAT, "%s: byte size overflows", r->ctx);

    if ((rc = rd_u64(r, &t->offset, "data offset"))) /* relative until the data section is known */
        return rc;
    return 0;
}

struct span {
    uint64_t start, end;
    size_t i;
};

static int span_cmp(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* The error for two overlapping data ranges, naming the tensors in file order. */
static int overlap(const cairn__gguf *g, const struct span *a, const struct span *b, char *err,
                   size_t errlen)
{
    if (a->i > b->i) {
        const struct span *x = a;
        a = b;
        b = x;
    }
    return cairn__errf(err, errlen, CAIRN_EFORMAT,
                       "tensor %zu '%s': data [%" PRIu64 ", %" PRIu64
                       ") overlaps tensor %zu '%s': data [%" PRIu64 ", %" PRIu64 ")",
                       b->i, g->tensors[b->i].name, b->start, b->end, a->i, g->tensors[a->i].name,
                       a->start, a->end);
}

/* Turns the tensors' relative offsets into absolute ones and checks each data range: aligned,
 * inside the file, and disjoint from every other (see the top of the file). */
static int place_tensors(cairn__gguf *g, char *err, size_t errlen)
{
    const size_t n = g->n_tensors;
    struct span *sp = malloc((n ? n : 1) * sizeof *sp);
    if (!sp)
        return cairn__errf(err, errlen, CAIRN_ENOMEM, "out of memory placing %zu tensors", n);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        cairn__gguf_tensor *t = &g->tensors[i];
        uint64_t start = 0, end = 0;
        if (t->offset % g->alignment)
            rc = cairn__errf(err, errlen, CAIRN_EFORMAT,
                             "tensor %zu '%s': data offset %" PRIu64
                             " is not a multiple of the alignment %" PRIu32,
                             i, t->name, t->offset, g->alignment);
        else if (__builtin_add_overflow(g->data_off, t->offset, &start) ||
                 __builtin_add_overflow(start, t->nbytes, &end))
            rc = cairn__errf(err, errlen, CAIRN_EFORMAT,
                             "tensor %zu '%s': data offset %" PRIu64 " + %" PRIu64
                             " bytes overflows",
                             i, t->name, t->offset, t->nbytes);
        else if (t->nbytes == 0 && start >= g->size) /* ANY_TYPE, a type of unknown size */
            rc = cairn__errf(err, errlen, CAIRN_EFORMAT,
                             "tensor '%s': data at %" PRIu64 " starts past end of file (%" PRIu64
                             " bytes)",
                             t->name, start, g->size);
        else if (end > g->size)
            rc = cairn__errf(err, errlen, CAIRN_EFORMAT,
                             "tensor '%s': data [%" PRIu64 ", %" PRIu64
                             ") ends past end of file (%" PRIu64 " bytes)",
                             t->name, start, end, g->size);
        sp[i] = (struct span){start, end, i};
    }
    if (!rc)
        qsort(sp, n, sizeof *sp, span_cmp);
    for (size_t k = 0; k < n && !rc; k++) {
        cairn__gguf_tensor *t = &g->tensors[sp[k].i];
        if (t->nbytes == 0) { /* a type of unknown size: its data runs up to the next tensor's */
            t->nbytes = (k + 1 < n ? sp[k + 1].start : g->size) - sp[k].start;
            sp[k].end = sp[k].start + t->nbytes;
            /* every tensor has at least one element: no room at all means a shared start */
            if (t->nbytes == 0)
                rc = overlap(g, &sp[k], &sp[k + 1], err, errlen);
        }
        if (!rc && k > 0 && sp[k].start < sp[k - 1].end)
            rc = overlap(g, &sp[k - 1], &sp[k], err, errlen);
    }
    for (size_t i = 0; i < n && !rc; i++) {
        g->tensors[i].offset += g->data_off;
        g->tensors[i].data = g->base + g->tensors[i].offset;
    }
    free(sp);
    return rc;
}

static int parse(cairn__gguf *g, char *err, size_t errlen)
{
    struct rd r = {.b = g->base, .size = g->size, .err = err, .errlen = errlen};
    int rc;

    snprintf(r.ctx, sizeof r.ctx, "header");
    if (g->size < 4 || memcmp(g->base, GGUF_MAGIC, 4) != 0) {
        if (g->size < 4)
            return cairn__errf(err, errlen, CAIRN_EFORMAT,
                               "offset 0: file is %" PRIu64 " byte%s, too short for a GGUF header",
                               g->size, g->size == 1 ? "" : "s");
        return cairn__errf(err, errlen, CAIRN_EFORMAT,
                           "offset 0: bad magic %02x %02x %02x %02x (not a GGUF file)", g->base[0],
                           g->base[1], g->base[2], g->base[3]);
    }
    r.off = 4;
    if ((rc = rd_u32(&r, &g->version, "version")))
        return rc;
    if (g->version != 2 && g->version != 3) {
        uint32_t sw = __builtin_bswap32(g->version);
        if (sw == 2 || sw == 3)
            return cairn__errf(err, errlen, CAIRN_EUNSUPPORTED,
                               "offset 4: big-endian GGUF (version %" PRIu32 ") is not supported",
                               sw);
        return cairn__errf(err, errlen, CAIRN_EUNSUPPORTED,
                           "offset 4: GGUF version %" PRIu32 " is not supported (only 2 and 3)",
                           g->version);
    }
    uint64_t n_tensors, n_kv;
    if ((rc = rd_u64(&r, &n_tensors, "tensor count")) || (rc = rd_u64(&r, &n_kv, "key count")))
        return rc;
    /* Reject counts the rest of the file could not hold before allocating for them. */
    uint64_t room = left(&r);
    if (n_kv > room / GGUF_MIN_KV_BYTES)
        return cairn__errf(err, errlen, CAIRN_EFORMAT,
                           "offset 16: key count %" PRIu64 " cannot fit in the %" PRIu64
                           " bytes left (truncated or corrupt file)",
                           n_kv, room);
    if (n_tensors > room / GGUF_MIN_TENSOR_BYTES ||
        n_kv * GGUF_MIN_KV_BYTES + n_tensors * GGUF_MIN_TENSOR_BYTES > room)
        return cairn__errf(err, errlen, CAIRN_EFORMAT,
                           "offset 8: tensor count %" PRIu64 " (with %" PRIu64
                           " keys) cannot fit in the %" PRIu64
                           " bytes left (truncated or corrupt file)",
                           n_tensors, n_kv, room);

    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors || htab_init(&g->kv_h, n_kv) || htab_init(&g->tensor_h, n_tensors))
        return cairn__errf(err, errlen, CAIRN_ENOMEM,
                           "out of memory for %" PRIu64 " keys and %" PRIu64 " tensors", n_kv,
                           n_tensors);

    for (size_t i = 0; i < n_kv; i++) {
        g->n_kv = i + 1; /* so close() frees what this KV allocated even if it fails */
        if ((rc = parse_kv(g, &r, i)))
            return rc;
    }

    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    size_t ai = htab_lookup(g, &g->kv_h, kv_name, "general.alignment", SIZE_MAX);
    if (ai != SIZE_MAX) {
        const struct kv *kv = &g->kv[ai];
        uint64_t v;
        int neg;
        if (!cairn__gguf_is_int_vtype(kv->type))
            return cairn__errf(err, errlen, CAIRN_EFORMAT,
                               "key %zu 'general.alignment': type %s, expected an integer", ai,
                               cairn__gguf_vtype_name((int)kv->type));
        cairn__gguf_read_int(kv->type, kv->val, &v, &neg);
        if (neg || v == 0 || v > UINT32_MAX || (v & (v - 1)))
            return cairn__errf(err, errlen, CAIRN_EFORMAT,
                               "key %zu 'general.alignment': %s%" PRIu64 " is not a power of two",
                               ai, neg ? "-" : "", v);
        g->alignment = (uint32_t)v;
    }

    for (size_t i = 0; i < n_tensors; i++) {
        g->n_tensors = i + 1;
        if ((rc = parse_tensor(g, &r, i)))
            return rc;
    }

    /* r.off <= size, alignment <= 2^31: cannot overflow */
    g->data_off = (r.off + g->alignment - 1) & ~(uint64_t)(g->alignment - 1);
    return place_tensors(g, err, errlen);
}

/* ---- open / close -------------------------------------------------------------------------- */

static int open_common(cairn__gguf *g, cairn__gguf **out, char *err, size_t errlen)
{
    int rc = parse(g, err, errlen);
    if (rc) {
        cairn__gguf_close(g);
        return rc;
    }
    if (err && errlen)
        err[0] = 0;
    *out = g;
    return 0;
}

int cairn__gguf_open_mem(const void *buf, size_t len, cairn__gguf **out, char *err, size_t errlen)
{
    return cairn__gguf_open_mem_ex(buf, len, 0, out, err, errlen);
}

int cairn__gguf_open(const char *path, cairn__gguf **out, char *err, size_t errlen)
{
    return cairn__gguf_open_ex(path, 0, out, err, errlen);
}

int cairn__gguf_open_mem_ex(const void *buf, size_t len, unsigned flags, cairn__gguf **out,
                            char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    if (!out)
        return cairn__errf(err, errlen, CAIRN_EINVAL, "NULL output handle");
    *out = NULL;
    if (!buf && len)
        return cairn__errf(err, errlen, CAIRN_EINVAL, "NULL buffer");
    cairn__gguf *g = calloc(1, sizeof *g);
    if (!g)
        return cairn__errf(err, errlen, CAIRN_ENOMEM, "out of memory");
    g->base = buf ? buf : (const uint8_t *)"";
    g->size = len;
    g->flags = flags;
    return open_common(g, out, err, errlen);
}

int cairn__gguf_open_ex(const char *path, unsigned flags, cairn__gguf **out, char *err,
                        size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    if (!out || !path)
        return cairn__errf(err, errlen, CAIRN_EINVAL, "NULL path or output handle");
    *out = NULL;
    /* Judge the path before opening it: open() on a FIFO would block, and a directory or a
     * device is the caller naming the wrong thing (an input problem), not a failing store.
     * A missing or unreadable path is CAIRN_ENOENT, as for any other input file. */
    struct stat st;
    if (stat(path, &st) != 0) {
        int e = errno;
        return cairn__errf(err, errlen, CAIRN_ENOENT, "%s: %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode))
        return cairn__errf(err, errlen, CAIRN_ENOENT, "%s: is a directory, not a model file", path);
    if (!S_ISREG(st.st_mode))
        return cairn__errf(err, errlen, CAIRN_EFORMAT,
                           "%s: not a regular file (a device, FIFO or socket), not a model file",
                           path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return cairn__errf(err, errlen, e == ENOENT || e == EACCES ? CAIRN_ENOENT : CAIRN_EIO,
                           "%s: %s", path, strerror(e));
    }
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return cairn__errf(err, errlen, CAIRN_EIO, "%s: stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) { /* replaced since the stat() above */
        close(fd);
        return cairn__errf(err, errlen, CAIRN_EFORMAT, "%s: not a regular file", path);
    }
    if (st.st_size == 0) { /* cannot be mapped; every other size is parse()'s to judge */
        close(fd);
        return cairn__errf(err, errlen, CAIRN_EFORMAT,
                           "%s: offset 0: file is empty, not a GGUF file", path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return cairn__errf(err, errlen, CAIRN_EIO, "%s: file too large to map", path);
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (m == MAP_FAILED)
        return cairn__errf(err, errlen, CAIRN_EIO, "%s: mmap: %s", path, strerror(e));
    cairn__gguf *g = calloc(1, sizeof *g);
    if (!g) {
        munmap(m, (size_t)st.st_size);
        return cairn__errf(err, errlen, CAIRN_ENOMEM, "out of memory");
    }
    g->base = m;
    g->size = (uint64_t)st.st_size;
    g->mapped = 1;
    g->flags = flags;
    int rc = open_common(g, out, err, errlen);
    if (rc && err && errlen) {
        /* prefix the path so the message stands alone in a log */
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s", err);
        snprintf(err, errlen, "%s: %s", path, tmp);
    }
    return rc;
}

void cairn__gguf_close(cairn__gguf *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].str_off);
    }
    for (size_t i = 0; i < g->n_tensors; i++)
        free((char *)g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    free(g->kv_h.slot);
    free(g->tensor_h.slot);
    if (g->mapped)
        munmap((void *)g->base, (size_t)g->size);
    free(g);
}
