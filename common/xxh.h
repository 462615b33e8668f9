/* common/xxh.h - libxxhash, with XXH3 run by the fastest code this CPU has.
 *
 * Debian builds libxxhash's plain XXH3 functions for the baseline x86-64 (8 KB hashes in about
 * 2 us here); the same library's dispatch functions pick AVX2 or AVX-512 at run time (0.13 us).
 * The hashes are the same bits either way, so stores written by either read under both.
 * xxh_x86dispatch.h turns every XXH3 call below it into the dispatch one. Every file of
 * cairn's that hashes with XXH3 includes this header instead of <xxhash.h>.
 */
#ifndef CAIRN_COMMON_XXH_H
#define CAIRN_COMMON_XXH_H

#include <xxhash.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xxh_x86dispatch.h>
#endif

#endif
