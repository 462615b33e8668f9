/* steps/policy.h - what every built-in step's section may say about how the runner treats the
 * step, beside what the step itself does: its retry budget and its hard timeout.
 *
 *   "retry": {"max_elapsed_s": 86400, "base_ms": 1000, "max_ms": 3600000},   (each optional)
 *   "timeout_s": 120                                                        (optional; 0: none)
 *
 * A transient failure is retried with exponential backoff from base_ms, capped at max_ms, with
 * full jitter, until max_elapsed_s have passed since the step was first tried without success
 * (cairn_step_set_retry_budget); then the task is dead. timeout_s runs the step in a child that
 * is killed at the deadline (cairn_step_set_timeout). Neither changes what the step computes, so
 * neither is part of the step's version: retuning them never counts as a graph change.
 */
#ifndef CAIRN_STEPS_POLICY_H
#define CAIRN_STEPS_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cairn.h"

typedef struct cairn__policy {
    uint32_t max_elapsed_s, base_ms, max_ms; /* the retry budget */
    uint32_t timeout_s;                      /* 0: no hard timeout */
} cairn__policy;

/* Reads "retry" and "timeout_s" of `section` (borrowed; NULL: an absent section) into *p, whose
 * values on entry are the step's defaults, and sets *rest to the section without those two keys
 * (a new reference; NULL for NULL): what the step's own reader and its version see. A section
 * that is not an object is handed on as it is, for the step's reader to refuse. `path` names
 * the section in messages ("notify[1]": "notify[1].retry.max_ms: must be at least base_ms
 * (5000)"). Returns 0, CAIRN_EJSON or CAIRN_ENOMEM, with the message in err. */
int cairn__policy_read(const json_t *section, const char *path, cairn__policy *p, json_t **rest,
                       char *err, size_t errlen);

/* Gives step `s` the policy: backoff and budget (no invocation limit: the budget ends it) and
 * the timeout. 0 or what the cairn_step setters return. */
int cairn__policy_apply(const cairn__policy *p, cairn_step *s);

#endif
