/* common/version.c - what a program asks of the library as a whole rather than of a handle: its
 * version, and the one deallocator for the strings it hands over.
 *
 * The version numbers come from cairn.h, which the build checks against meson's project version
 * (meson.build) and tests/header compares with what the library reports, so the header, the
 * library and `cairn --version` always say the same. cairn_free exists so that a program never
 * frees our memory with its own allocator (a different C runtime, a malloc wrapper).
 */
#include <stdlib.h>

#include "cairn.h"

const char *cairn_version(int *major, int *minor, int *patch)
{
    if (major)
        *major = CAIRN_VERSION_MAJOR;
    if (minor)
        *minor = CAIRN_VERSION_MINOR;
    if (patch)
        *patch = CAIRN_VERSION_PATCH;
    return CAIRN_VERSION_STRING;
}

void cairn_free(void *p) { free(p); }
