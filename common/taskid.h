/* common/taskid.h - task IDs: the rule every ID must pass, and IDs derived from a task's input.
 *
 * Internal to libcairn (hidden `cairn__` symbols).
 */
#ifndef CAIRN_COMMON_TASKID_H
#define CAIRN_COMMON_TASKID_H

#include <stddef.h>

#include <jansson.h>

#include "cairn.h"

/* Longest task ID in bytes (a buffer for one needs CAIRN__TASK_ID_MAX + 1): the public limit. */
#define CAIRN__TASK_ID_MAX CAIRN_TASK_ID_MAX

/* Checks a task ID: 1..CAIRN__TASK_ID_MAX bytes, each one of A-Z a-z 0-9 . _ : -
 * CAIRN_ETASKID with err naming the offending byte offset and character, e.g.
 * "task ID byte 3 is ' ' (0x20); allowed are A-Z a-z 0-9 . _ : -", or the length.
 * CAIRN_EINVAL if id is NULL. */
int cairn__task_id_check(const char *id, char *err, size_t errlen);

/* Derives a task ID into `out` (outlen >= CAIRN__TASK_ID_MAX + 1 always suffices).
 *   fields == NULL: "<graph>_<first 16 hex digits of the payload hash>".
 *   fields == "tenant,order_id": the values of those top-level fields of `input`, joined
 *     with '_'. Strings are used as-is, integers in decimal. A real with an integral value
 *     of magnitude <= 2^53 counts as that integer, because 7 and 7.0 are the same number to
 *     JCS (and so to the payload hash); any other type is refused.
 * The result is checked with cairn__task_id_check().
 * Returns:
 *   CAIRN_EJSON    input is not an object; a field is missing ("input has no field
 *                  \"order_id\" (named in the task-ID fields)"), or has an unusable type
 *   CAIRN_ETASKID  the result is not a valid task ID (the message names the field whose
 *                  value holds the offending byte)
 *   CAIRN_EINVAL   NULL graph/input/out, an empty name in `fields`, out too small
 *   CAIRN_ENOMEM */
int cairn__task_id_derive(const char *graph, const json_t *input, const char *fields, char *out,
                          size_t outlen, char *err, size_t errlen);

#endif
