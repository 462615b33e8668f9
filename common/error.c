/* common/error.c - the error table turned into cairn_strerror() and cairn_errname().
 *
 * The table itself lives in include/cairn_errors.h (one X-macro); this file only expands it,
 * so a new code is added in exactly one place.
 */
#include "cairn.h"

const char *cairn_strerror(int err)
{
    switch (err) {
    case CAIRN_OK:
        return "success";
#define CAIRN__X(name, value, text)                                                                \
    case value:                                                                                    \
        return text;
        CAIRN_ERROR_TABLE(CAIRN__X)
#undef CAIRN__X
    default:
        return "unknown error";
    }
}

const char *cairn_errname(int err)
{
    switch (err) {
    case CAIRN_OK:
        return "CAIRN_OK";
#define CAIRN__X(name, value, text)                                                                \
    case value:                                                                                    \
        return "CAIRN_" #name;
        CAIRN_ERROR_TABLE(CAIRN__X)
#undef CAIRN__X
    default:
        return "CAIRN_E?";
    }
}
