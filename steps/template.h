/* steps/template.h - what the built-in steps share: "{{name}}" placeholders, msgpack lookups,
 * and the check that a configuration section holds only known settings. */
#ifndef CAIRN_STEPS_TEMPLATE_H
#define CAIRN_STEPS_TEMPLATE_H

#include <stddef.h>

#include <jansson.h>
#include <msgpack.h>

/* Returns the text for placeholder `name` (malloc'd), or NULL if there is none. */
typedef char *(*cairn__template_lookup)(const char *name, void *arg);

/* Renders tpl, replacing each {{name}} (name: letters, digits, '_', '.', '-'; spaces inside the
 * braces ignored) with lookup(name). *out is malloc'd. Returns 0, CAIRN_EINVAL with err naming
 * the placeholder and its character offset when lookup has no value or a brace is unclosed,
 * or CAIRN_ENOMEM. */
int cairn__template_render(const char *tpl, cairn__template_lookup lookup, void *arg, char **out,
                           char *err, size_t errlen);

/* The text form of a msgpack value for a template: strings as they are, numbers and booleans in
 * decimal, arrays of scalars joined by ", ", nil as "". NULL for maps and nested arrays. */
char *cairn__template_value(const msgpack_object *o);

/* The value of the str key key[0..n) in msgpack map m (the first, if the key repeats); NULL if
 * m is NULL or not a map, or has no such key. The key is taken whole: a '.' in it is no path. */
const msgpack_object *cairn__mp_get(const msgpack_object *m, const char *key, size_t n);

/* Looks up a dotted path ("result.text") in nested msgpack maps; NULL if absent. */
const msgpack_object *cairn__mp_path(const msgpack_object *o, const char *path);

/* Refuses a setting of the configuration section `cfg` (an object) that is not in known[0..n):
 * CAIRN_EJSON with err "SECTION.KEY: unknown setting" (a typo never silently drops a setting).
 * Returns 0 when every key is known. */
int cairn__cfg_known_keys(const json_t *cfg, const char *section, const char *const *known,
                          size_t n, char *err, size_t errlen);

#endif
