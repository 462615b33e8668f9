/* common/str.h - the two string tools every layer above gpu/ shares: a growable string buffer
 * and a bounded error message.
 *
 * Internal to libcairn (hidden `cairn__` symbols).
 */
#ifndef CAIRN_COMMON_STR_H
#define CAIRN_COMMON_STR_H

#include <stddef.h>

#include "cairn.h"

/* A NUL-terminated string that grows by doubling. A failed allocation sets `oom` and makes every
 * later put a no-op, so a writer may check once, at the end, or stop at the first put that returns
 * -1. Start from {0}; the owner free()s p (NULL until the first put; put "" to get an empty
 * string). */
struct cairn__sbuf {
    char *p;
    size_t len, cap;
    int oom;
};

/* Appends n bytes of s (which need not be NUL-terminated). Returns 0, or -1 if out of memory now
 * or before. */
int cairn__sb_put(struct cairn__sbuf *b, const void *s, size_t n);

/* Appends the NUL-terminated string s; returns as cairn__sb_put does. */
int cairn__sb_puts(struct cairn__sbuf *b, const char *s);

/* Formats a one-line message into err[0..errlen) (truncated to fit, always NUL-terminated). The
 * calling convention of every `char *err, size_t errlen` pair: err may be NULL (or errlen 0),
 * then nothing is written. */
void cairn__seterr(char *err, size_t errlen, const char *fmt, ...) CAIRN_PRINTF(3, 4);

#endif
