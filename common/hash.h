/* common/hash.h - SHA-256 helpers over OpenSSL's EVP interface: digests of buffers and files,
 * and their lowercase hex.
 *
 * Internal to libcairn (hidden `cairn__` symbols).
 */
#ifndef CAIRN_COMMON_HASH_H
#define CAIRN_COMMON_HASH_H

#include <stddef.h>

/* Lowercase hex of n bytes into out (2n + 1 chars, NUL-terminated). */
void cairn__hex(const unsigned char *bytes, size_t n, char *out);

/* SHA-256 of len bytes at data into out. Returns 0, or CAIRN_ENOMEM if OpenSSL fails (out is
 * then all zero). */
int cairn__sha256(const void *data, size_t len, unsigned char out[32]);

/* SHA-256 of `len` bytes at `data` as 64 lowercase hex digits plus NUL. If OpenSSL fails (out of
 * memory), `out` is the empty string. */
void cairn__sha256_hex(const void *data, size_t len, char out[65]);

/* SHA-256 hex of the whole file at path. Returns 0, CAIRN_ENOENT (cannot be opened), CAIRN_EIO (a
 * read failed) or CAIRN_ENOMEM. */
int cairn__sha256_file(const char *path, char out[65]);

#endif
