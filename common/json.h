/* common/json.h - task inputs as data: strict JSON parsing (json.c), the RFC 8785 (JCS) canonical
 * form and the payload hash (canon.c), and the conversion between jansson and msgpack
 * (jsonmp.c).
 *
 * Internal to libcairn (hidden `cairn__` symbols). Every fallible call returns 0 or a negative
 * CAIRN_E* code; where a call takes `err`/`errlen`, it writes a one-line, NUL-terminated message
 * there on failure (common/str.h: cairn__seterr's convention).
 */
#ifndef CAIRN_COMMON_JSON_H
#define CAIRN_COMMON_JSON_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <msgpack.h>

#include "cairn.h"

/* The documented limit on one task input document: 16 MiB. */
#define CAIRN__MAX_INPUT (16u << 20)

/* The deepest nesting of arrays/objects a task input may have. msgpack-c's unpacker refuses
 * more than 32 open containers (MSGPACK_EMBED_STACK_SIZE), and task inputs travel as msgpack,
 * so a deeper document would be accepted now and be unreadable later. */
#define CAIRN__MAX_DEPTH 32

/* Parses one JSON document of `len` bytes (need not be NUL-terminated; may contain NUL
 * bytes only inside strings as \u0000). Strict, per I-JSON (RFC 7493):
 * rejects duplicate object keys, invalid UTF-8, lone surrogates (\ud800), NaN/Infinity,
 * numbers that overflow a double, a byte-order mark, trailing garbage, nesting deeper than
 * CAIRN__MAX_DEPTH, \u0000 inside an object key (jansson cannot hold one), and an integer
 * outside [-(2^53-1), 2^53-1] (I-JSON 2.2: the payload hash, like any JavaScript reader, reads
 * numbers as doubles, which do not hold it exactly; a real such as 1e30 is a double already and
 * is accepted). Any JSON value is accepted at the top; task inputs must also pass
 * cairn__json_check_object(). `source` names the input in messages ("input.json", "<stdin>");
 * NULL means "<input>". On success *out is a new reference the caller json_decref()s. Returns:
 *   CAIRN_EJSON    err = "<source>:<line>:<column>: <what>" (1-based; the column is where
 *                  jansson stopped reading, i.e. the end of the offending token); for an
 *                  integer beyond 2^53-1 that int64 holds, "<source>: <path>: integer N is
 *                  outside [-(2^53-1), 2^53-1], ..." with the path of the first one in document
 *                  order ("order.ids[2]", ["odd key"] for a name that is not a plain word, none
 *                  for the document itself); beyond int64, "<source>:<line>:<column>: integer N
 *                  is outside ..."
 *   CAIRN_ETOOBIG  len > CAIRN__MAX_INPUT; err = "<source>: input is N bytes, limit is 16777216"
 *   CAIRN_EINVAL   buf or out is NULL
 *   CAIRN_ENOMEM */
int cairn__json_parse(const char *buf, size_t len, const char *source, json_t **out, char *err,
                      size_t errlen);

/* Reads the file at `path` ("-" = standard input, named "<stdin>" in messages) fully, never
 * more than CAIRN__MAX_INPUT + 1 bytes, then parses it as cairn__json_parse() does.
 * Returns what cairn__json_parse() returns, and:
 *   CAIRN_ENOENT   no such file ("<path>: No such file or directory")
 *   CAIRN_EINVAL   path is a directory
 *   CAIRN_EIO      the file exists but cannot be opened or read (message has strerror)
 *   CAIRN_ETOOBIG  the file (or stdin) holds more than CAIRN__MAX_INPUT bytes */
int cairn__json_load(const char *path, json_t **out, char *err, size_t errlen);

/* Checks that a parsed task input is a JSON object.
 * CAIRN_EJSON with err = "<source>: task input must be a JSON object, not an array". */
int cairn__json_check_object(const json_t *v, const char *source, char *err, size_t errlen);

/* "an object", "an array", "a string", "an integer", "a number", "true", "false", "null": the
 * type of v as a message names it. */
const char *cairn__json_type_name(const json_t *v);

/* RFC 8785 (JCS) canonical serialization of `v`: object members sorted by the UTF-16 code
 * units of their names, no whitespace, strings with the minimal JCS escapes (\" \\ \b \f \n
 * \r \t, other controls as \u00xx, everything else literal UTF-8), numbers as ECMAScript's
 * Number.prototype.toString() of the IEEE double: shortest round-trip digits, plain notation
 * for 1e-7 < |x| < 1e21, otherwise exponent form (1e+21, 1.5e-7); -0 is "0". Integers are
 * first converted to the nearest double, as JCS requires (2^53 + 1 -> 9007199254740992; a parsed
 * document holds none beyond 2^53 - 1, a tree built in code may).
 * On success *out is a malloc'd buffer of *len bytes (plus a NUL not counted in *len) that
 * the caller free()s. Returns CAIRN_EINVAL (NULL argument, nesting deeper than 2048, a
 * non-finite real), CAIRN_EJSON (a string or key that is not valid UTF-8: possible only in
 * trees built with jansson's *_nocheck calls), CAIRN_ENOMEM. */
int cairn__canon_json(const json_t *v, char **out, size_t *len);

/* The payload hash of a task input: SHA-256 hex of its RFC 8785 canonical form.
 * Returns what cairn__canon_json() returns. */
int cairn__payload_hash(const json_t *input, char out[65]);

/* Packs a JSON value as msgpack: object -> map (keys as str, in RFC 8785 order so equal
 * inputs give equal bytes), array -> array, string -> str, integer -> the smallest int/uint
 * encoding, real -> float64, true/false -> bool, null -> nil.
 * Returns CAIRN_EINVAL (NULL argument, nesting deeper than CAIRN__MAX_DEPTH, which msgpack-c
 * could not unpack), CAIRN_ENOMEM (also when the packer's write callback fails). */
int cairn__json_to_msgpack(const json_t *v, msgpack_packer *pk);

/* Converts a msgpack object to a new jansson value the caller json_decref()s; `o` is only
 * borrowed. nil/bool/int/float/str/array/map map back naturally. Beyond that:
 *   - a str that is not valid UTF-8 has each bad byte replaced by U+FFFD;
 *   - bin and ext become the base64 (RFC 4648, padded) string of their bytes;
 *   - a uint above INT64_MAX becomes a real (nearest double);
 *   - a NaN or infinite float becomes null (JSON has no such numbers);
 *   - a map key that is not a str becomes the canonical JSON text of the key (1 -> "1");
 *     a bin key its base64; when keys collide, the last one wins.
 * Returns NULL when out of memory or nested deeper than 1024. */
json_t *cairn__msgpack_to_json(const msgpack_object *o);

#endif
