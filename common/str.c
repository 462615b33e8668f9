/* common/str.c - the growable string buffer and bounded messages (common/str.h).
 *
 * Messages are deliberately bounded: a caller hands a fixed buffer, and a message that does not
 * fit is cut, never an error, so reporting an error cannot itself fail.
 */
#include "common/str.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cairn__seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int cairn__sb_put(struct cairn__sbuf *b, const void *s, size_t n)
{
    if (b->oom)
        return -1;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *np;
        while (cap < b->len + n + 1)
            cap *= 2;
        if (!(np = realloc(b->p, cap))) {
            b->oom = 1;
            return -1;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

int cairn__sb_puts(struct cairn__sbuf *b, const char *s) { return cairn__sb_put(b, s, strlen(s)); }
