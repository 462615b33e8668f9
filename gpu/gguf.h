/* gpu/gguf.h - memory-mapped, bounds-checked GGUF v2/v3 reader (internal to gpu/).
 *
 * A reader validates the whole file at open time: header, every metadata key/value, every
 * tensor info (shape, type, alignment, data range). After a successful open every accessor is
 * a lookup that cannot read outside the file. All returned pointers (tensor names, keys,
 * strings, tensor data, array data) borrow from the reader and stay valid until
 * cairn__gguf_close().
 *
 * Error codes are the negative CAIRN_E* values of include/cairn_errors.h.
 */
#ifndef CAIRN_GPU_GGUF_H
#define CAIRN_GPU_GGUF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum cairn__ggml_type { /* numbering as in GGUF files */
                        CAIRN__GGML_F32 = 0,
                        CAIRN__GGML_F16 = 1,
                        CAIRN__GGML_Q4_0 = 2,
                        CAIRN__GGML_Q4_1 = 3,
                        CAIRN__GGML_Q5_0 = 6,
                        CAIRN__GGML_Q5_1 = 7,
                        CAIRN__GGML_Q8_0 = 8,
                        CAIRN__GGML_Q2_K = 10,
                        CAIRN__GGML_Q3_K = 11,
                        CAIRN__GGML_Q4_K = 12,
                        CAIRN__GGML_Q5_K = 13,
                        CAIRN__GGML_Q6_K = 14,
                        CAIRN__GGML_IQ4_NL = 20,
                        CAIRN__GGML_IQ4_XS = 23,
                        CAIRN__GGML_BF16 = 30,
};

enum cairn__gguf_vtype { /* GGUF metadata value types */
                         CAIRN__GGUF_U8 = 0,
                         CAIRN__GGUF_I8,
                         CAIRN__GGUF_U16,
                         CAIRN__GGUF_I16,
                         CAIRN__GGUF_U32,
                         CAIRN__GGUF_I32,
                         CAIRN__GGUF_F32,
                         CAIRN__GGUF_BOOL,
                         CAIRN__GGUF_STRING,
                         CAIRN__GGUF_ARRAY,
                         CAIRN__GGUF_U64,
                         CAIRN__GGUF_I64,
                         CAIRN__GGUF_F64,
};

typedef struct cairn__gguf cairn__gguf;

typedef struct {
    const char *name; /* NUL-terminated copy owned by the reader */
    uint32_t type;    /* enum cairn__ggml_type */
    uint32_t n_dims;  /* 1..4 */
    uint64_t ne[4];   /* ne[0] is the contiguous (row) dimension, as in ggml; unused dims = 1 */
    uint64_t n_elements;
    uint64_t offset; /* absolute file offset of the data */
    uint64_t nbytes;
    const void *data; /* points into the mapping; valid until cairn__gguf_close. Aligned to
                         general.alignment relative to the file start (so, for a mapped file,
                         in memory too); from open_mem, only as aligned as the buffer allows */
} cairn__gguf_tensor;

/* Open flags. CAIRN__GGUF_ANY_TYPE accepts tensor types the engine cannot compute with (for
 * describing a file, as `cairn model-info` does): such a tensor is still checked for alignment,
 * a start inside the file and no overlap, but its size is not known to the reader, so its
 * nbytes is the span up to the next tensor's data (or the end of the file) and its data is
 * only that span; cairn__ggml_block_size(type) == 0 tells it apart. Never load a model from
 * such a reader's unsupported tensors (cairn__model_load refuses their types). */
#define CAIRN__GGUF_ANY_TYPE 1u

/* Opens and validates the whole file (header, every KV, every tensor info: sizes, types,
 * alignment, data range inside the file, no two data ranges overlapping). On error returns a
 * negative CAIRN_E* code (CAIRN_ENOENT missing file, CAIRN_EIO read/mmap failure, CAIRN_EFORMAT
 * malformed/truncated, CAIRN_EUNSUPPORTED unsupported version or tensor type, CAIRN_ENOMEM) and
 * writes a message naming the key, tensor or byte offset into err (always NUL-terminated; err may
 * be NULL if errlen is 0). *out is set to NULL on error. The file is mapped read-only
 * (MAP_PRIVATE). */
int cairn__gguf_open(const char *path, cairn__gguf **out, char *err, size_t errlen);
/* Same, from a caller-owned buffer (for fuzzing and tests); buf must outlive the reader.
 * The buffer needs no particular alignment. */
int cairn__gguf_open_mem(const void *buf, size_t len, cairn__gguf **out, char *err, size_t errlen);
/* The same two with CAIRN__GGUF_* flags (0 is the plain open). */
int cairn__gguf_open_ex(const char *path, unsigned flags, cairn__gguf **out, char *err,
                        size_t errlen);
int cairn__gguf_open_mem_ex(const void *buf, size_t len, unsigned flags, cairn__gguf **out,
                            char *err, size_t errlen);
void cairn__gguf_close(cairn__gguf *g); /* NULL is a no-op */
uint32_t cairn__gguf_version(const cairn__gguf *g);
uint64_t cairn__gguf_file_size(const cairn__gguf *g);
uint32_t cairn__gguf_alignment(const cairn__gguf *g);   /* general.alignment, default 32 */
uint64_t cairn__gguf_data_offset(const cairn__gguf *g); /* file offset of the data section */
size_t cairn__gguf_n_tensors(const cairn__gguf *g);
const cairn__gguf_tensor *cairn__gguf_tensor_at(const cairn__gguf *g,
                                                size_t i); /* NULL if i out of range */
const cairn__gguf_tensor *cairn__gguf_tensor_find(const cairn__gguf *g,
                                                  const char *name); /* NULL if absent */
const char *cairn__ggml_type_name(uint32_t type);                    /* "Q4_K", or "?" */
/* bytes for n elements of type (n must be a multiple of the block size), 0 if unsupported */
uint64_t cairn__ggml_row_size(uint32_t type, uint64_t n);
/* elements per block (1 for F32/F16/BF16, 32 for Q8_0/Q4_0/Q4_1/Q5_0/Q5_1, 256 for Q4_K/Q6_K),
 * 0 if unsupported */
uint64_t cairn__ggml_block_size(uint32_t type);
const char *cairn__gguf_vtype_name(int vtype); /* "u32", "string", ... or "?" */

/* Metadata. Each getter returns 0, CAIRN_ENOTFOUND if the key is absent, or CAIRN_EFORMAT if the
 * value has an incompatible type (integers of any width convert when the value fits).
 * get_f32 also accepts F64 (narrowed) and integers; get_bool accepts BOOL only. */
size_t cairn__gguf_n_kv(const cairn__gguf *g);
const char *cairn__gguf_kv_key(const cairn__gguf *g,
                               size_t i); /* NUL-terminated; NULL if out of range */
int cairn__gguf_kv_type(const cairn__gguf *g, const char *key); /* vtype, or CAIRN_ENOTFOUND */
int cairn__gguf_get_u32(const cairn__gguf *g, const char *key, uint32_t *out);
int cairn__gguf_get_u64(const cairn__gguf *g, const char *key, uint64_t *out);
int cairn__gguf_get_i64(const cairn__gguf *g, const char *key, int64_t *out);
int cairn__gguf_get_f32(const cairn__gguf *g, const char *key, float *out);
int cairn__gguf_get_bool(const cairn__gguf *g, const char *key, int *out);
/* strings are NOT NUL-terminated in GGUF: returns pointer into the mapping and its length */
int cairn__gguf_get_str(const cairn__gguf *g, const char *key, const char **s, size_t *len);
/* arrays: element type and count; then element access (bounds-checked, CAIRN_EINVAL on bad index,
 * CAIRN_EFORMAT if the key is not an array of a compatible element type) */
int cairn__gguf_get_arr(const cairn__gguf *g, const char *key, int *elem_type, uint64_t *n);
int cairn__gguf_arr_str(const cairn__gguf *g, const char *key, uint64_t i, const char **s,
                        size_t *len);
int cairn__gguf_arr_f32(const cairn__gguf *g, const char *key, uint64_t i, float *out);
int cairn__gguf_arr_i64(const cairn__gguf *g, const char *key, uint64_t i,
                        int64_t *out); /* any int type */
/* fast path for large numeric arrays: pointer to the raw little-endian elements in the mapping
 * (possibly unaligned: read with memcpy). NULL if absent, not an array, or an array of strings. */
const void *cairn__gguf_arr_data(const cairn__gguf *g, const char *key);

/* The (err, errlen) convention of gpu/: formats the message into err when err && errlen
 * (always NUL-terminated, truncated to fit) and returns code, so a failure is one statement:
 *   return cairn__errf(err, errlen, CAIRN_EFORMAT, "tensor '%s': ...", name); */
int cairn__errf(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#ifdef __cplusplus
}
#endif

#endif
