/* gpu/gguf_impl.h - the GGUF reader's inside, shared by its three files (internal to gpu/):
 * gguf_open.c maps and validates a file and builds the structures below, gguf.c answers lookups
 * from them, gguf_types.c knows what the type numbers in a file mean. Nothing else includes this.
 *
 * After a successful open every struct kv points at a value already checked to lie inside the
 * file, and the two hash tables index keys and tensor names, so a lookup is a hash probe and a
 * decode with no bounds check left to do. The byte-by-byte little-endian decoders (the mapping
 * has no alignment to rely on) and the probe are small and used by every file: static inline.
 */
#ifndef CAIRN_GPU_GGUF_IMPL_H
#define CAIRN_GPU_GGUF_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gpu/gguf.h"

#define GGUF_NVTYPES 13

struct kv {
    char *key;          /* NUL-terminated copy */
    uint32_t type;      /* enum cairn__gguf_vtype */
    uint32_t elem_type; /* arrays only */
    uint64_t n;         /* arrays: element count; strings: byte length */
    const uint8_t *val; /* scalar value, string bytes, or first array element, in the mapping */
    uint64_t *str_off;  /* arrays of strings: file offset of each element's u64 length */
};

struct htab {
    size_t *slot; /* index + 1, 0 = empty */
    size_t mask;
};

struct cairn__gguf {
    const uint8_t *base;
    uint64_t size;
    int mapped;     /* base is our mmap (munmap on close) */
    unsigned flags; /* CAIRN__GGUF_* open flags */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_off;
    size_t n_kv;
    struct kv *kv;
    size_t n_tensors;
    cairn__gguf_tensor *tensors;
    struct htab kv_h, tensor_h;
};

/* ---- little-endian decoding (the mapping has no alignment guarantees) ---------------------- */

static inline uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}
static inline float lef32(const uint8_t *p)
{
    uint32_t u = le32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline double lef64(const uint8_t *p)
{
    uint64_t u = le64(p);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* ---- hash tables over keys and tensor names (filled by gguf_open.c) ---------------------- */

static inline uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

typedef const char *(*name_fn)(const cairn__gguf *g, size_t i);
static inline const char *kv_name(const cairn__gguf *g, size_t i) { return g->kv[i].key; }
static inline const char *tensor_name(const cairn__gguf *g, size_t i) { return g->tensors[i].name; }

/* Returns the index of name, or SIZE_MAX; with insert, adds idx if absent. */
static inline size_t htab_lookup(const cairn__gguf *g, const struct htab *h, name_fn fn,
                                 const char *name, size_t insert_idx)
{
    if (!h->slot)
        return SIZE_MAX;
    size_t i = (size_t)hash_str(name) & h->mask;
    for (;; i = (i + 1) & h->mask) {
        size_t s = h->slot[i];
        if (!s) {
            if (insert_idx != SIZE_MAX)
                h->slot[i] = insert_idx + 1;
            return SIZE_MAX;
        }
        if (strcmp(fn(g, s - 1), name) == 0)
            return s - 1;
    }
}

/* ---- gguf_types.c ------------------------------------------------------------------------ */

/* Elements and bytes per block of a supported tensor type; 0 if the type is unsupported. */
int cairn__ggml_type_block(uint32_t type, uint64_t *elems, uint64_t *bytes);
/* Encoded size of a scalar value type; 0 for string and array (variable). */
unsigned cairn__gguf_vtype_size(uint32_t t);
/* Whether value type t is an integer (of any width and sign). */
int cairn__gguf_is_int_vtype(uint32_t t);
/* Decodes an integer value of any width; *neg set for negative signed values. */
void cairn__gguf_read_int(uint32_t t, const uint8_t *p, uint64_t *mag, int *neg);

#endif
