/* test_config.c - the configuration reader every step uses (common/config.h): each row type's
 * default and each of its errors, and that every message names the full field path
 * ("<section>.<key>: ...", "<section>.<key>[i]: ..."), whatever the section's path is.
 *
 * One struct with a member of every kind a step has (int, size_t, int64, float, double, an
 * owned string, a string list) is read by one table; each case is a JSON document and the exact
 * message (or, for a valid one, the values it must leave).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "common/config.h"
#include "common/hash.h"
#include "tests/tap.h"

typedef struct demo {
    char *name, *note, *dir;
    int on, small, pick;
    size_t big;
    int64_t huge;
    float f;
    double d;
    char **list;
    size_t n_list;
} demo;

static const char *const picks[] = {"a", "b", "c", NULL};

#define AT(m) CAIRN__CFG_AT(demo, m)
static const cairn__cfg_field fields[] = {
    {"name", CAIRN__CFG_STR, AT(name), .nonempty = 1, .required = "is required"},
    {"note", CAIRN__CFG_STR, AT(note), .sdef = "n/a"},
    {"dir", CAIRN__CFG_PATH, AT(dir)},
    {"on", CAIRN__CFG_BOOL, AT(on), .def = 1},
    {"small", CAIRN__CFG_INT, AT(small), .lo = 1, .hi = 10, .def = 3, .unit = "(tries)"},
    {"big", CAIRN__CFG_INT, AT(big), .lo = 0, .hi = CAIRN__CFG_NO_MAX, .def = 7},
    {"huge", CAIRN__CFG_INT, AT(huge), .lo = -5, .hi = 1e15},
    {"f", CAIRN__CFG_NUM, AT(f), .lo = 0, .hi = 1, .def = 0.5},
    {"d", CAIRN__CFG_NUM, AT(d), .lo = -1, .hi = 1e-3, .def = -0.25},
    {"pick", CAIRN__CFG_ENUM, AT(pick), .choices = picks, .sdef = "b"},
    {"list", CAIRN__CFG_STRS, AT(list), CAIRN__CFG_COUNT(demo, n_list), .nonempty = 1},
    CAIRN__CFG_KNOWN("custom"),
    {NULL},
};
#undef AT
static const cairn__cfg_field *const tables[] = {fields, NULL};
/* a second table with a tuning row, for cairn__cfg_version */
static const cairn__cfg_field tuned[] = {
    {"threads", CAIRN__CFG_INT, .size = sizeof(int), .lo = 0, .hi = 64, .tuning = 1},
    {NULL},
};
static const cairn__cfg_field *const both[] = {fields, tuned, NULL};

/* Reads `js` as section `path` (keys checked first, as the steps do); the code, and the message
 * in err. */
static int read_demo(const char *js, const char *path, demo *d, char *err, size_t errlen)
{
    json_error_t je;
    json_t *o = json_loads(js, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!o) {
        snprintf(err, errlen, "test bug: %s: %s", js, je.text);
        return -9999;
    }
    memset(d, 0, sizeof *d);
    cairn__cfg r;
    int rc = cairn__cfg_open(&r, o, path, "/base", err, errlen);
    if (!rc)
        rc = cairn__cfg_check_keys(&r, tables, NULL);
    if (!rc)
        rc = cairn__cfg_read(&r, fields, d);
    json_decref(o);
    return rc;
}

static void expect_err(const char *js, const char *path, const char *want)
{
    demo d;
    char err[512] = "";
    int rc = read_demo(js, path, &d, err, sizeof err);
    ok(rc == CAIRN_EJSON && strcmp(err, want) == 0, "%s -> \"%s\"", js, want);
    if (rc != CAIRN_EJSON || strcmp(err, want) != 0)
        diag("got %s: \"%s\"", cairn_errname(rc), err);
    cairn__cfg_release(fields, &d);
    ok(!d.name && !d.note && !d.dir && !d.list && !d.n_list, "... release leaves nothing (%s)", js);
}

static void defaults(void)
{
    demo d;
    char err[512] = "";
    int rc = read_demo("{\"name\": \"x\"}", "demo", &d, err, sizeof err);
    ok(rc == 0 && !strcmp(d.name, "x") && !strcmp(d.note, "n/a") && !d.dir && d.on == 1 &&
           d.small == 3 && d.big == 7 && d.huge == 0 && d.f == 0.5f && d.d == -0.25 &&
           d.pick == 1 && !d.list && d.n_list == 0,
       "absent keys take their defaults (%s)", rc ? err : "ok");
    cairn__cfg_release(fields, &d);

    rc = read_demo("{\"name\": \"x\", \"note\": \"\", \"dir\": \"rel/d\", \"on\": false, "
                   "\"small\": 10, \"big\": 9007199254740993, \"huge\": -5, \"f\": 1, "
                   "\"d\": 0.001, \"pick\": \"c\", \"list\": [\"p\", \"q\"], \"custom\": [1]}",
                   "demo", &d, err, sizeof err);
    ok(rc == 0 && !strcmp(d.note, "") && !strcmp(d.dir, "/base/rel/d") && d.on == 0 &&
           d.small == 10 && d.big == 9007199254740993u && d.huge == -5 && d.f == 1.0f &&
           d.d == 0.001 && d.pick == 2 && d.n_list == 2 && !strcmp(d.list[0], "p") &&
           !strcmp(d.list[1], "q") && d.list[2] == NULL,
       "given values fill members of every width; a relative path joins the base folder; "
       "bounds are inclusive (%s)",
       rc ? err : "ok");
    cairn__cfg_release(fields, &d);

    rc = read_demo("{\"name\": \"x\", \"dir\": \"/abs\"}", "demo", &d, err, sizeof err);
    ok(rc == 0 && !strcmp(d.dir, "/abs"), "an absolute path stays as it is");
    cairn__cfg_release(fields, &d);

    cairn__cfg r;
    ok(cairn__cfg_open(&r, NULL, "demo", NULL, err, sizeof err) == 0 &&
           cairn__cfg_read(&r, fields, &d) == CAIRN_EJSON && !strcmp(err, "demo.name: is required"),
       "a NULL section is an absent one: defaults, and a required key missing (%s)", err);
    cairn__cfg_release(fields, &d);
}

static void errors(void)
{
    static const struct {
        const char *json, *path, *want;
    } cases[] = {
        {"[1]", "demo", "demo: must be an object"},
        {"{}", "demo", "demo.name: is required"},
        {"{}", "notify[1]", "notify[1].name: is required"},
        {"{\"name\": 5}", "demo", "demo.name: must be a string"},
        {"{\"name\": \"\"}", "demo", "demo.name: must not be empty"},
        {"{\"name\": \"a\\u0000b\"}", "demo", "demo.name: must not contain NUL characters"},
        {"{\"name\": \"x\", \"dir\": null}", "demo", "demo.dir: must be a string"},
        {"{\"name\": \"x\", \"on\": 1}", "demo", "demo.on: must be true or false"},
        {"{\"name\": \"x\", \"small\": 11}", "demo",
         "demo.small: must be an integer from 1 to 10 (tries)"},
        {"{\"name\": \"x\", \"small\": 2.5}", "demo",
         "demo.small: must be an integer from 1 to 10 (tries)"},
        {"{\"name\": \"x\", \"small\": \"2\"}", "demo",
         "demo.small: must be an integer from 1 to 10 (tries)"},
        {"{\"name\": \"x\", \"big\": -1}", "demo", "demo.big: must be a non-negative integer"},
        {"{\"name\": \"x\", \"huge\": 1000000000000001}", "demo",
         "demo.huge: must be an integer from -5 to 1000000000000000"},
        {"{\"name\": \"x\", \"f\": 1.5}", "demo", "demo.f: must be a number from 0 to 1"},
        {"{\"name\": \"x\", \"f\": true}", "demo", "demo.f: must be a number from 0 to 1"},
        {"{\"name\": \"x\", \"d\": 0.002}", "demo", "demo.d: must be a number from -1 to 0.001"},
        {"{\"name\": \"x\", \"pick\": \"d\"}", "demo",
         "demo.pick: must be \"a\", \"b\" or \"c\", not \"d\""},
        {"{\"name\": \"x\", \"pick\": 1}", "demo", "demo.pick: must be \"a\", \"b\" or \"c\""},
        {"{\"name\": \"x\", \"list\": \"p\"}", "demo",
         "demo.list: must be a non-empty array of strings"},
        {"{\"name\": \"x\", \"list\": []}", "demo",
         "demo.list: must be a non-empty array of strings"},
        {"{\"name\": \"x\", \"list\": [\"p\", 3]}", "demo",
         "demo.list[1]: must be a non-empty string"},
        {"{\"name\": \"x\", \"list\": [\"p\", \"q\", \"\"]}", "notify[1]",
         "notify[1].list[2]: must be a non-empty string"},
        {"{\"name\": \"x\", \"lsit\": [\"p\"]}", "demo", "demo.lsit: unknown field"},
        {"{\"name\": \"x\", \"lsit\": 1}", "", "lsit: unknown field"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        expect_err(cases[i].json, cases[i].path, cases[i].want);
}

/* The rest of the API: the message form for custom checks, a custom unknown-key text, a NULL
 * err buffer, the row lookup, and a whole section through cairn__cfg_parse. */
static int finish_fails(const cairn__cfg *r, void *base)
{
    const demo *d = base;
    return d->small > 5
               ? cairn__cfg_fail(r, CAIRN_EJSON, "small", "is %d; at most 5 here", d->small)
               : 0;
}

static const cairn__cfg_field some[] = {
    {"name", CAIRN__CFG_STR, CAIRN__CFG_AT(demo, name)},
    {"small", CAIRN__CFG_INT, CAIRN__CFG_AT(demo, small), .lo = 1, .hi = 10, .def = 3},
    {NULL},
};

/* cairn__cfg_parse of {"name": "x", key: v} as section "sec" of the table `some`. */
static int parse_sec(const char *key, int v, demo **d, char *err, size_t errlen)
{
    static const cairn__cfg_section sec = {"sec", some, sizeof(demo), finish_fails};
    json_t *o = json_pack("{s:s, s:i}", "name", "x", key, v);
    *d = (demo *)1;
    int rc = cairn__cfg_parse(&sec, o, NULL, d, err, errlen);
    json_decref(o);
    return rc;
}

static void api(void)
{
    char err[128];
    json_t *o = json_pack("{s:s, s:i}", "name", "x", "zz", 1);
    cairn__cfg r;
    cairn__cfg_open(&r, o, "sec", NULL, err, sizeof err);
    ok(cairn__cfg_fail(&r, CAIRN_EINVAL, "name", "odd %d", 7) == CAIRN_EINVAL &&
           !strcmp(err, "sec.name: odd 7"),
       "cairn__cfg_fail: <path>.<field>: <text> (%s)", err);
    ok(cairn__cfg_fail(&r, CAIRN_EJSON, NULL, "whole") == CAIRN_EJSON && !strcmp(err, "sec: whole"),
       "... and <path>: <text> without a field (%s)", err);
    ok(cairn__cfg_check_keys(&r, tables, "unknown section") == CAIRN_EJSON &&
           !strcmp(err, "sec.zz: unknown section"),
       "a custom text for an unknown key (%s)", err);
    ok(cairn__cfg_declared(tables, "custom") == &fields[11] && !cairn__cfg_declared(tables, "zz"),
       "cairn__cfg_declared finds the row of a key");
    cairn__cfg_open(&r, o, "sec", NULL, NULL, 0);
    ok(cairn__cfg_check_keys(&r, tables, NULL) == CAIRN_EJSON, "a NULL err buffer is allowed");
    json_decref(o);

    demo *d = NULL;
    int rc = parse_sec("small", 4, &d, err, sizeof err);
    ok(rc == 0 && d && !strcmp(d->name, "x") && d->small == 4,
       "cairn__cfg_parse allocates and reads a section (%s)", rc ? err : "ok");
    if (d)
        cairn__cfg_release(some, d), free(d);
    ok(parse_sec("small", 6, &d, err, sizeof err) == CAIRN_EJSON && d == NULL &&
           !strcmp(err, "sec.small: is 6; at most 5 here"),
       "... and a failing finish leaves no struct (%s)", err);
    ok(parse_sec("other", 6, &d, err, sizeof err) == CAIRN_EJSON && d == NULL &&
           !strcmp(err, "sec.other: unknown field"),
       "... refusing a key its table does not declare (%s)", err);
}

static uint32_t version_of(const json_t *o, const cairn__cfg_field *const *t)
{
    cairn__cfg r;
    uint32_t v = 0;
    char err[128];
    if (cairn__cfg_open(&r, o, "sec", NULL, err, sizeof err) || cairn__cfg_version(&r, t, &v))
        return 0;
    return v;
}

/* The step version: what the section says the step produces, not how it runs. */
static void version(void)
{
    json_t *a = json_pack("{s:s, s:i}", "name", "x", "small", 2);
    json_t *a1 = json_pack("{s:s, s:i, s:i}", "name", "x", "small", 2, "threads", 1);
    json_t *a8 = json_pack("{s:i, s:s, s:i}", "threads", 8, "name", "x", "small", 2);
    json_t *b = json_pack("{s:s, s:i}", "name", "x", "small", 3);
    json_t *c = json_pack("{s:s, s:i, s:i}", "name", "x", "small", 2, "custom", 1);
    uint32_t va = version_of(a, both);
    ok(va >= 1 && version_of(a1, both) == va && version_of(a8, both) == va,
       "a tuning setting, set or not, changes no version (%u)", va);
    ok(version_of(b, both) != va && version_of(c, both) != va && version_of(a1, tables) != va,
       "any other setting does, and so does a key whose row is not tuning");
    /* the formula the pipeline always used, so a section without tuning keys keeps its version:
     * the first 32 bits of SHA-256 of {"name":"x","small":2}, mod 2^31-1, plus 1 */
    char hex[65], first[9];
    const char *canon = "{\"name\":\"x\",\"small\":2}";
    cairn__sha256_hex(canon, strlen(canon), hex);
    snprintf(first, sizeof first, "%.8s", hex);
    ok(va == (uint32_t)(strtoul(first, NULL, 16) % 0x7fffffffu) + 1,
       "a section without tuning keys keeps the version it had (%u)", va);
    ok(version_of(NULL, both) == 1, "an absent section is version 1");
    json_decref(a), json_decref(a1), json_decref(a8), json_decref(b), json_decref(c);
}

int main(void)
{
    defaults();
    errors();
    api();
    version();
    return tap_done();
}
