/* common/utf8.c - strict UTF-8 (RFC 3629): one decoder that refuses every ill-formed sequence
 * (overlong forms, surrogates, values above U+10FFFF), so that what passes it is what jansson and
 * RFC 8785 accept, and its encoder. */
#include "common/utf8.h"

size_t cairn__utf8_get(const unsigned char *s, size_t n, uint32_t *cp)
{
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    size_t len, i;
    uint32_t c;
    if (n == 0)
        return 0;
    len = s[0] < 0x80   ? 1
          : s[0] < 0xC2 ? 0
          : s[0] < 0xE0 ? 2
          : s[0] < 0xF0 ? 3
          : s[0] < 0xF5 ? 4
                        : 0;
    if (len == 0 || n < len)
        return 0;
    c = len == 1 ? s[0] : s[0] & (0x7Fu >> len);
    for (i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    if (c < least[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    return len;
}

size_t cairn__utf8_put(uint32_t c, char *o)
{
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (char)(0xc0 | c >> 6);
        o[1] = (char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (char)(0xe0 | c >> 12);
        o[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        o[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | c >> 18);
    o[1] = (char)(0x80 | ((c >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3f));
    o[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}
