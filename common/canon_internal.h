/* common/canon_internal.h - what canon.c shares with jsonmp.c (private to common/): the members of
 * a JSON object in RFC 8785 (JCS) order, so that the msgpack packer writes map keys in the same
 * order as the canonical form the payload hash is taken over. */
#ifndef CAIRN_CANON_INTERNAL_H
#define CAIRN_CANON_INTERNAL_H

#include <stddef.h>

#include <jansson.h>

/* One member of a JSON object, borrowed from it. */
struct cairn__member {
    const char *key;
    size_t klen;
    json_t *val;
};

/* The members of an object in JCS order (by the UTF-16 code units of their names; invalid UTF-8,
 * possible only in trees built with jansson's *_nocheck calls, sorts last). *out is malloc'd
 * (NULL for an empty object); keys and values are borrowed from obj. Returns the count, or -1
 * when out of memory. */
long cairn__sorted_members(const json_t *obj, struct cairn__member **out);

#endif
