/* test_postprocess.c - the postprocess rules and the atomic outbox publish. */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "steps/postprocess.h"
#include "tests/tap.h"

static cairn__post_cfg *cfg(const char *json)
{
    json_error_t je;
    json_t *j = json_loads(json, 0, &je);
    cairn__post_cfg *c = NULL;
    char err[256];
    int rc = cairn__post_cfg_parse(j, NULL, &c, err, sizeof err);
    if (rc)
        diag("config error: %s", err);
    json_decref(j);
    return c;
}

static char *run(const cairn__post_cfg *c, const char *in, int *rc, char *err, json_t **j,
                 unsigned *red)
{
    char *out = NULL;
    size_t n;
    unsigned r = 0;
    *rc = cairn__postprocess_text(c, in, strlen(in), &out, &n, j, red ? red : &r, err, 256);
    return out;
}

static void config_errors(void)
{
    static const struct {
        const char *json, *want;
    } cases[] = {
        {"{\"max_chars\": -1}", "postprocess.max_chars"},
        {"{\"max_chars\": \"9\"}", "postprocess.max_chars"},
        {"{\"banned\": \"x\"}", "postprocess.banned"},
        {"{\"banned\": [\"ok\", 3]}", "postprocess.banned[1]"},
        {"{\"banned_action\": \"shout\"}", "postprocess.banned_action"},
        {"{\"required_keys\": [\"a\"]}", "postprocess.required_keys"},
        {"{\"strip_control\": 1}", "postprocess.strip_control"},
        {"{\"colour\": true}", "postprocess.colour"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *j = json_loads(cases[i].json, 0, NULL);
        cairn__post_cfg *c = NULL;
        char err[256] = "";
        int rc = cairn__post_cfg_parse(j, NULL, &c, err, sizeof err);
        ok(rc == CAIRN_EJSON && strstr(err, cases[i].want), "config %s -> error naming %s (%s)",
           cases[i].json, cases[i].want, err);
        cairn__post_cfg_free(c);
        json_decref(j);
    }
}

static void text_rules(void)
{
    char err[256];
    int rc;
    cairn__post_cfg *c = cfg("{}");
    char *o = run(c, "  Hello\t\tworld \n\n again\x01\x7f  ", &rc, err, NULL, NULL);
    ok(rc == 0 && strcmp(o, "Hello world again") == 0, "trim, collapse, strip control: '%s'", o);
    free(o);
    o = run(c, "bad \xff byte", &rc, err, NULL, NULL);
    ok(rc == 0 && strcmp(o, "bad \xef\xbf\xbd byte") == 0, "invalid UTF-8 becomes U+FFFD");
    free(o);
    cairn__post_cfg_free(c);

    c = cfg("{\"max_chars\": 20}");
    o = run(c, "First sentence. Second sentence is long.", &rc, err, NULL, NULL);
    ok(rc == 0 && strcmp(o, "First sentence.") == 0, "cut at a sentence end: '%s'", o);
    free(o);
    o = run(c, "no sentence end here at all in this text", &rc, err, NULL, NULL);
    ok(rc == 0 && strcmp(o, "no sentence end here") == 0, "cut at a space: '%s'", o);
    free(o);
    o = run(c, "short.", &rc, err, NULL, NULL);
    ok(rc == 0 && strcmp(o, "short.") == 0, "short text untouched");
    free(o);
    cairn__post_cfg_free(c);

    c = cfg("{\"max_chars\": 8}");
    /* 这是第一句。这是第二句。 : 6 characters per sentence */
    o = run(c, "这是第一句。这是第二句。", &rc, err, NULL, NULL);
    ok(rc == 0 && strcmp(o, "这是第一句。") == 0, "cut at 。 counting characters: '%s'", o);
    free(o);
    o = run(c, "一二三四五六七八九十", &rc, err, NULL, NULL);
    ok(rc == 0 && strcmp(o, "一二三四五六七八") == 0, "hard cut on a character boundary: '%s'", o);
    free(o);
    o = run(c, "好！很好？", &rc, err, NULL, NULL);
    ok(rc == 0 && strcmp(o, "好！很好？") == 0, "！ and ？ fit: unchanged");
    free(o);
    cairn__post_cfg_free(c);

    c = cfg("{\"banned\": [\"Cheap\", \"guarantee\"]}");
    o = run(c, "A really cheap mug.", &rc, err, NULL, NULL);
    ok(rc == CAIRN_EPERMANENT && !o && strstr(err, "'Cheap'") && strstr(err, "character 9"),
       "banned term rejected, naming term and position: %s", err);
    cairn__post_cfg_free(c);

    unsigned red = 0;
    c = cfg("{\"banned\": [\"cheap\"], \"banned_action\": \"redact\", \"redact_with\": \"[x]\"}");
    o = run(c, "Cheap and CHEAP.", &rc, err, NULL, &red);
    ok(rc == 0 && strcmp(o, "[x] and [x].") == 0 && red == 2, "banned term redacted twice: '%s'",
       o);
    free(o);
    cairn__post_cfg_free(c);
}

static void json_extraction(void)
{
    char err[256];
    int rc;
    json_t *j = NULL;
    cairn__post_cfg *c = cfg("{\"extract_json\": true, \"required_keys\": [\"title\"]}");
    char *o =
        run(c, "Here you go: {\"title\": \"Mug\", \"n\": 2} hope it helps", &rc, err, &j, NULL);
    ok(rc == 0 && j && strcmp(json_string_value(json_object_get(j, "title")), "Mug") == 0,
       "first JSON object extracted");
    free(o);
    json_decref(j);
    j = NULL;
    o = run(c, "{\"name\": \"Mug\"}", &rc, err, &j, NULL);
    ok(rc == CAIRN_EPERMANENT && strstr(err, "'title'"), "missing required key named: %s", err);
    free(o);
    o = run(c, "text {\"title\": \"Mug\",\n \"n\": } more", &rc, err, &j, NULL);
    ok(rc == CAIRN_EPERMANENT && strstr(err, "column 23") && strstr(err, "character 5"),
       "malformed JSON names the place: %s", err);
    free(o);
    o = run(c, "no object", &rc, err, &j, NULL);
    ok(rc == CAIRN_EPERMANENT && strstr(err, "no JSON object"), "no object: %s", err);
    free(o);
    cairn__post_cfg_free(c);
}

static void publish(void)
{
    char dir[] = "/tmp/cairn-outbox-XXXXXX", err[512];
    ok(mkdtemp(dir) != NULL, "temp outbox");
    int rc = cairn__publish_atomic(dir, "t1.json", "{\"a\":1}", 7, err, sizeof err);
    char path[600];
    snprintf(path, sizeof path, "%s/t1.json", dir);
    FILE *f = fopen(path, "r");
    char buf[32] = "";
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        fclose(f);
    }
    ok(rc == 0 && strcmp(buf, "{\"a\":1}") == 0, "published file complete");
    rc = cairn__publish_atomic(dir, "t1.json", "{\"a\":2}", 7, err, sizeof err);
    int files = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        files += e->d_name[0] != '.' || strncmp(e->d_name, ".t1", 3) == 0;
    if (d)
        closedir(d);
    ok(rc == 0 && files == 1, "republishing leaves exactly one file, no temporaries (%d)", files);
    rc = cairn__publish_atomic("/nonexistent/outbox", "t.json", "x", 1, err, sizeof err);
    ok(rc == CAIRN_EIO && strstr(err, "/nonexistent/outbox/t.json"), "error names the path: %s",
       err);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    config_errors();
    text_rules();
    json_extraction();
    publish();
    return tap_done();
}
