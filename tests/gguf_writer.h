/* tests/gguf_writer.h - writes valid GGUF v2/v3 files of any shape and tensor type, for tests.
 *
 * Build a file in memory with gw_kv_* and gw_tensor_f32 (in the order they should appear in
 * the file), then gw_write() it. Keys, strings and values are copied. Tensor data is given as
 * floats and quantized by the writer to the requested type with gpu/quant.h's reference
 * quantizers. Misuse (NULL writer, unsupported type, ne[0] not a multiple of the block size,
 * out of memory) is remembered and makes gw_write() fail with a message on stderr, so a test
 * only has to check gw_write's result.
 *
 * gw_write_mem / gw_raw_* exist so tests can build deliberately broken files.
 */
#ifndef CAIRN_TESTS_GGUF_WRITER_H
#define CAIRN_TESTS_GGUF_WRITER_H

#include <stddef.h>
#include <stdint.h>

typedef struct cairn__gguf_writer cairn__gguf_writer;

cairn__gguf_writer *gw_new(uint32_t version /* 2 or 3 */,
                           uint32_t alignment /* 32 default; 0 means 32 */);
/* scalars */
void gw_kv_u8(cairn__gguf_writer *w, const char *key, uint8_t v);
void gw_kv_i8(cairn__gguf_writer *w, const char *key, int8_t v);
void gw_kv_u16(cairn__gguf_writer *w, const char *key, uint16_t v);
void gw_kv_i16(cairn__gguf_writer *w, const char *key, int16_t v);
void gw_kv_u32(cairn__gguf_writer *w, const char *key, uint32_t v);
void gw_kv_i32(cairn__gguf_writer *w, const char *key, int32_t v);
void gw_kv_f32(cairn__gguf_writer *w, const char *key, float v);
void gw_kv_bool(cairn__gguf_writer *w, const char *key, int v);
void gw_kv_u64(cairn__gguf_writer *w, const char *key, uint64_t v);
void gw_kv_i64(cairn__gguf_writer *w, const char *key, int64_t v);
void gw_kv_f64(cairn__gguf_writer *w, const char *key, double v);
void gw_kv_str(cairn__gguf_writer *w, const char *key, const char *v);
/* string with explicit length (may contain NUL bytes) */
void gw_kv_strn(cairn__gguf_writer *w, const char *key, const char *v, size_t len);
/* arrays */
void gw_kv_arr_str(cairn__gguf_writer *w, const char *key, const char *const *v, size_t n);
void gw_kv_arr_f32(cairn__gguf_writer *w, const char *key, const float *v, size_t n);
void gw_kv_arr_i32(cairn__gguf_writer *w, const char *key, const int32_t *v, size_t n);
/* any numeric element type (enum cairn__gguf_vtype, not STRING/ARRAY): n elements of
 * elem_size bytes each, host (little-endian) layout */
void gw_kv_arr_raw(cairn__gguf_writer *w, const char *key, int elem_type, const void *v, size_t n);

/* Adds a tensor; data given as float values (n = product of ne), quantized by the writer to
 * `type` (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K) using the reference
 * quantizers.
 * values may be NULL: the data is then zero bytes. */
void gw_tensor_f32(cairn__gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                   const uint64_t *ne, const float *values);
/* Adds a tensor with caller-supplied raw bytes and type number, unchecked (for bad-file tests;
 * nbytes of data are written, padded to the alignment). */
void gw_tensor_raw(cairn__gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                   const uint64_t *ne, const void *data, size_t nbytes);

/* Serializes to a malloc'd buffer (*out, *len; caller frees). 0 or -1. */
int gw_write_mem(cairn__gguf_writer *w, unsigned char **out, size_t *len);
int gw_write(cairn__gguf_writer *w, const char *path); /* 0 or -1 */
void gw_free(cairn__gguf_writer *w);                   /* NULL is a no-op */

#endif
