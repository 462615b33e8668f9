/* steps/policy.c - the retry budget and hard timeout every built-in step's section may set
 * (policy.h).
 *
 * The two keys are the runner's, not the step's: they are read here, through the same table
 * reader and with the same messages as every other setting, and taken out of the section before
 * the step's own reader sees it. So no step has to declare them, and what a step's version and
 * digest are computed from stays what the step computes with: a task is never refused as
 * "graph changed" because its retries were retuned. Defaults differ per step (the pipeline
 * passes them in), so the table's defaults are filled in per call.
 */
#include "steps/policy.h"

#include <stdio.h>
#include <string.h>

#include "common/config.h"

#define AT(m) CAIRN__CFG_AT(cairn__policy, m)
static const cairn__cfg_field retry_fields[] = {
    /* 30 days: what a budget in ms can hold is 49 */
    {"max_elapsed_s", CAIRN__CFG_INT, AT(max_elapsed_s), .lo = 1, .hi = 2592000,
     .unit = "(seconds)"},
    {"base_ms", CAIRN__CFG_INT, AT(base_ms), .lo = 1, .hi = 3600000, .unit = "(milliseconds)"},
    {"max_ms", CAIRN__CFG_INT, AT(max_ms), .lo = 1, .hi = 86400000, .unit = "(milliseconds)"},
    {NULL},
};
static const cairn__cfg_field timeout_field = {"timeout_s",   CAIRN__CFG_INT,
                                               AT(timeout_s), .lo = 0,
                                               .hi = 604800,  .unit = "(seconds; 0: none)"};
#undef AT

int cairn__policy_read(const json_t *section, const char *path, cairn__policy *p, json_t **rest,
                       char *err, size_t errlen)
{
    *rest = NULL;
    if (err && errlen)
        err[0] = 0;
    if (section && !json_is_object(section)) {
        *rest = json_incref((json_t *)section);
        return 0;
    }
    cairn__cfg_field rows[sizeof retry_fields / sizeof *retry_fields], timeout = timeout_field;
    memcpy(rows, retry_fields, sizeof rows);
    rows[0].def = p->max_elapsed_s, rows[1].def = p->base_ms, rows[2].def = p->max_ms;
    timeout.def = p->timeout_s;
    const cairn__cfg_field *const tables[] = {rows, NULL};
    const json_t *retry = json_object_get(section, "retry");
    char where[96];
    snprintf(where, sizeof where, "%s%sretry", path, *path ? "." : "");
    cairn__cfg sec, r;
    int rc = cairn__cfg_open(&sec, section, path, NULL, err, errlen);
    if (!rc)
        rc = cairn__cfg_read_field(&sec, &timeout, p);
    if (!rc)
        rc = cairn__cfg_open(&r, retry, where, NULL, err, errlen);
    if (!rc)
        rc = cairn__cfg_check_keys(&r, tables, NULL);
    if (!rc)
        rc = cairn__cfg_read(&r, rows, p);
    if (!rc && p->max_ms < p->base_ms)
        rc = json_object_get(retry, "max_ms")
                 ? cairn__cfg_fail(&r, CAIRN_EJSON, "max_ms", "must be at least base_ms (%u)",
                                   p->base_ms)
                 : cairn__cfg_fail(&r, CAIRN_EJSON, "base_ms", "must be at most max_ms (%u)",
                                   p->max_ms);
    if (rc || !section)
        return rc;
    json_t *copy = json_copy((json_t *)section); /* shallow: the values are shared */
    if (!copy)
        return cairn__cfg_fail(&sec, CAIRN_ENOMEM, NULL, "out of memory");
    json_object_del(copy, "retry");
    json_object_del(copy, "timeout_s");
    *rest = copy;
    return 0;
}

int cairn__policy_apply(const cairn__policy *p, cairn_step *s)
{
    int rc = cairn_step_set_retry(s, UINT32_MAX, p->base_ms, p->max_ms);
    if (!rc)
        rc = cairn_step_set_retry_budget(s, p->max_elapsed_s * 1000u);
    if (!rc)
        rc = cairn_step_set_timeout(s, p->timeout_s * 1000u);
    return rc;
}
