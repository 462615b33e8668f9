/* common/utf8.h - the strict UTF-8 decoder and the encoder that canonical JSON, JSON<->msgpack and
 * the retrieval tokenizer share (gpu/ has its own: it includes nothing of ours).
 *
 * Internal to libcairn (hidden `cairn__` symbols).
 */
#ifndef CAIRN_COMMON_UTF8_H
#define CAIRN_COMMON_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length (1..4) of the well-formed UTF-8 sequence at s[0..n), storing its code point in *cp, or
 * 0 (and *cp untouched) if the bytes there are not one: n == 0, a stray continuation byte, a
 * truncated sequence, an overlong form, a surrogate or a value above U+10FFFF. */
size_t cairn__utf8_get(const unsigned char *s, size_t n, uint32_t *cp);

/* Writes code point c (a scalar value, at most U+10FFFF) as UTF-8 at o (room for 4 bytes);
 * returns the number of bytes written. */
size_t cairn__utf8_put(uint32_t c, char *o);

#endif
