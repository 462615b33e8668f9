/* steps/postprocess.h - the `postprocess` built-in step (compute).
 *
 * Cleans the generated text by configurable rules, in this order: strip control characters,
 * trim and collapse whitespace, banned terms (reject or redact), cut to a maximum length at a
 * sentence boundary, optional JSON extraction with required keys. Then publishes the result
 * to an outbox folder as <task>.json atomically.
 */
#ifndef CAIRN_STEPS_POSTPROCESS_H
#define CAIRN_STEPS_POSTPROCESS_H

#include <jansson.h>
#include <stddef.h>

#include "cairn.h"

typedef struct cairn__post_cfg cairn__post_cfg;

/* Reads the "postprocess" section (NULL: every default). Its settings, with their types and
 * defaults, are the table `fields` in postprocess.c ("banned_action" "reject" or "redact",
 * "max_chars" 0 for no limit, "source" "generate", "field" "text"); "required_keys" needs
 * "extract_json": true. A relative outbox is taken relative to `base_dir` (the config file's
 * folder) if not NULL, and created (0755) if missing. Errors: CAIRN_EJSON with err naming the
 * field ("postprocess.max_chars: must be ..."), CAIRN_EIO when the outbox cannot be created,
 * CAIRN_ENOMEM. */
int cairn__post_cfg_parse(const json_t *cfg, const char *base_dir, cairn__post_cfg **out, char *err,
                          size_t errlen);
void cairn__post_cfg_free(cairn__post_cfg *c);
/* The step whose output field is cleaned ("generate" by default). */
const char *cairn__post_cfg_source(const cairn__post_cfg *c);
/* The step version: the section without its tuning settings (common/config.h). */
uint32_t cairn__post_cfg_version(const cairn__post_cfg *c);

/* The text rules alone (no I/O): *out is malloc'd; *json_out (if extraction is on) is the
 * extracted object (new reference). Returns 0, or CAIRN_EPERMANENT with err saying what is
 * wrong (a banned term in reject mode, no JSON object, malformed JSON at line/column, a missing
 * required key). `redactions` counts redacted occurrences. */
int cairn__postprocess_text(const cairn__post_cfg *c, const char *in, size_t len, char **out,
                            size_t *out_len, json_t **json_out, unsigned *redactions, char *err,
                            size_t errlen);

/* Writes dir/name atomically: a temporary file in the same folder, fsync, rename, fsync of the
 * folder. A reader sees the old file or the whole new one, never half of it. 0 or CAIRN_EIO /
 * CAIRN_EFULL with err naming the path. */
int cairn__publish_atomic(const char *dir, const char *name, const void *data, size_t len,
                          char *err, size_t errlen);

/* The step (user = the cairn__post_cfg). Reads field `field` of dependency `source`. Output:
 * {"text", "chars", "redactions", "json"?, "outbox_file"?}. */
cairn_step_result cairn__postprocess_step(cairn_ctx *ctx, void *cfg);

#endif
