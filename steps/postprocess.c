/* steps/postprocess.c - cleaning the generated text, and publishing it atomically.
 *
 * The rules work on code points, not bytes, so a length limit never splits a character and
 * Chinese sentence ends (。！？) count as boundaries like ". ! ?". The step is a pure function of
 * its dependency's committed output, so re-running it after a crash produces the same file:
 * the outbox write (temporary file, fsync, rename, fsync of the folder) can be repeated safely
 * and a reader only ever sees a complete file.
 */
#include "steps/postprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"
#include "common/json.h"
#include "common/str.h"
#include "common/utf8.h"
#include "steps/template.h"

struct cairn__post_cfg {
    int strip_control, collapse;
    size_t max_chars;
    char **banned;
    size_t n_banned;
    int redact; /* banned_action: the index of "redact" */
    char *redact_with;
    int extract_json;
    char **required;
    size_t n_required;
    char *outbox;
    char *source, *field;
    uint32_t version;
};

/* ------------------------------------------------------------------ config */

static const char *const actions[] = {"reject", "redact", NULL};

#define AT(m) CAIRN__CFG_AT(cairn__post_cfg, m)
/* Every setting of the "postprocess" section; what each means is in postprocess.h. */
static const cairn__cfg_field fields[] = {
    {"strip_control", CAIRN__CFG_BOOL, AT(strip_control), .def = 1},
    {"collapse_whitespace", CAIRN__CFG_BOOL, AT(collapse), .def = 1},
    {"extract_json", CAIRN__CFG_BOOL, AT(extract_json)},
    {"max_chars", CAIRN__CFG_INT, AT(max_chars), .lo = 0, .hi = CAIRN__CFG_NO_MAX},
    {"banned", CAIRN__CFG_STRS, AT(banned), CAIRN__CFG_COUNT(cairn__post_cfg, n_banned)},
    {"required_keys", CAIRN__CFG_STRS, AT(required), CAIRN__CFG_COUNT(cairn__post_cfg, n_required)},
    {"banned_action", CAIRN__CFG_ENUM, AT(redact), .choices = actions, .sdef = "reject"},
    {"redact_with", CAIRN__CFG_STR, AT(redact_with), .sdef = "***"},
    {"outbox", CAIRN__CFG_PATH, AT(outbox)},
    {"source", CAIRN__CFG_STR, AT(source), .sdef = "generate"},
    {"field", CAIRN__CFG_STR, AT(field), .sdef = "text"},
    {NULL},
};
#undef AT

static int finish(const cairn__cfg *r, void *base)
{
    cairn__post_cfg *c = base;
    int rc = cairn__cfg_version(r, (const cairn__cfg_field *const[]){fields, NULL}, &c->version);
    if (rc)
        return rc;
    if (c->outbox && mkdir(c->outbox, 0755) != 0 && errno != EEXIST)
        return cairn__cfg_fail(r, CAIRN_EIO, "outbox", "cannot create %s: %s", c->outbox,
                               strerror(errno));
    if (c->n_required && !c->extract_json)
        return cairn__cfg_fail(r, CAIRN_EJSON, "required_keys", "needs \"extract_json\": true");
    return 0;
}

static const cairn__cfg_section section = {"postprocess", fields, sizeof(cairn__post_cfg), finish};

int cairn__post_cfg_parse(const json_t *cfg, const char *base_dir, cairn__post_cfg **out, char *err,
                          size_t errlen)
{
    return cairn__cfg_parse(&section, cfg, base_dir, out, err, errlen);
}

const char *cairn__post_cfg_source(const cairn__post_cfg *c) { return c->source; }

uint32_t cairn__post_cfg_version(const cairn__post_cfg *c) { return c->version; }

void cairn__post_cfg_free(cairn__post_cfg *c)
{
    if (!c)
        return;
    cairn__cfg_release(fields, c);
    free(c);
}

/* ------------------------------------------------------------------ text rules */

static int is_space(unsigned cp)
{
    return cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r' || cp == '\v' || cp == '\f' ||
           cp == 0xa0 || cp == 0x3000;
}

/* Control characters, invalid bytes (as U+FFFD) and whitespace runs. */
static int clean(const cairn__post_cfg *c, const char *in, size_t len, struct cairn__sbuf *out)
{
    const unsigned char *s = (const unsigned char *)in;
    int pending_space = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t l = cairn__utf8_get(s + i, len - i, &cp);
        if (!l) {
            cp = 0xfffd;
            l = 1;
        }
        const char *bytes = (const char *)s + i;
        size_t nb = l;
        i += l;
        if (cp == 0xfffd && nb == 1)
            bytes = "\xef\xbf\xbd", nb = 3;
        int control = (cp < 0x20 && !is_space(cp)) || cp == 0x7f || (cp >= 0x80 && cp < 0xa0);
        if (control && c->strip_control)
            continue;
        if (c->collapse && is_space(cp)) {
            pending_space = out->len > 0;
            continue;
        }
        if (pending_space && cairn__sb_put(out, " ", 1))
            return CAIRN_ENOMEM;
        pending_space = 0;
        if (cairn__sb_put(out, bytes, nb))
            return CAIRN_ENOMEM;
    }
    return 0;
}

static int ascii_ieq(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
        if (x >= 'A' && x <= 'Z')
            x += 32;
        if (y >= 'A' && y <= 'Z')
            y += 32;
        if (x != y)
            return 0;
    }
    return 1;
}

static size_t chars_before(const char *s, size_t off)
{
    size_t n = 0;
    for (size_t i = 0; i < off; i++)
        n += ((unsigned char)s[i] & 0xc0) != 0x80;
    return n;
}

/* Banned terms, ASCII case-insensitively. */
static int banned(const cairn__post_cfg *c, struct cairn__sbuf *b, unsigned *redactions, char *err,
                  size_t errlen)
{
    for (size_t t = 0; t < c->n_banned; t++) {
        const char *term = c->banned[t];
        size_t tl = strlen(term);
        struct cairn__sbuf out = {0};
        for (size_t i = 0; i < b->len;) {
            if (i + tl <= b->len && ascii_ieq(b->p + i, term, tl)) {
                if (!c->redact) {
                    free(out.p);
                    snprintf(err, errlen, "banned term '%s' at character %zu", term,
                             chars_before(b->p, i));
                    return CAIRN_EPERMANENT;
                }
                if (cairn__sb_put(&out, c->redact_with, strlen(c->redact_with)))
                    return CAIRN_ENOMEM;
                ++*redactions;
                i += tl;
            } else {
                if (cairn__sb_put(&out, b->p + i, 1))
                    return CAIRN_ENOMEM;
                i++;
            }
        }
        free(b->p);
        *b = out;
        if (!b->p && cairn__sb_put(b, "", 0))
            return CAIRN_ENOMEM;
    }
    return 0;
}

/* Cuts to at most max code points, at the last sentence end that fits, else the last space. */
static void cut(struct cairn__sbuf *b, size_t max)
{
    const unsigned char *s = (const unsigned char *)b->p;
    size_t chars = 0, i = 0, sentence = 0, space = 0;
    while (i < b->len) {
        uint32_t cp;
        size_t l = cairn__utf8_get(s + i, b->len - i, &cp);
        if (!l)
            l = 1, cp = 0;
        if (chars == max) {
            if (cp == ' ' || s[i] == ' ')
                space = i; /* the limit falls on a word boundary */
            break;
        }
        chars++;
        i += l;
        int next_space = i >= b->len || s[i] == ' ';
        if (((cp == '.' || cp == '!' || cp == '?') && next_space) || cp == 0x3002 || cp == 0xff01 ||
            cp == 0xff1f)
            sentence = i;
        if (cp == ' ')
            space = i - 1;
    }
    if (i >= b->len)
        return;
    size_t end = sentence ? sentence : space ? space : i;
    while (end > 0 && b->p[end - 1] == ' ')
        end--;
    b->len = end;
    b->p[end] = 0;
}

static int extract(const cairn__post_cfg *c, const struct cairn__sbuf *b, json_t **out, char *err,
                   size_t errlen)
{
    const char *start = memchr(b->p, '{', b->len);
    if (!start) {
        snprintf(err, errlen, "no JSON object in the generated text");
        return CAIRN_EPERMANENT;
    }
    json_error_t je;
    json_t *j = json_loadb(start, b->len - (size_t)(start - b->p),
                           JSON_DISABLE_EOF_CHECK | JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        snprintf(err, errlen,
                 "malformed JSON object starting at character %zu: %s (line %d, column %d of "
                 "the object)",
                 chars_before(b->p, (size_t)(start - b->p)), je.text, je.line, je.column);
        return CAIRN_EPERMANENT;
    }
    for (size_t i = 0; i < c->n_required; i++)
        if (!json_object_get(j, c->required[i])) {
            snprintf(err, errlen, "extracted JSON object lacks required key '%s'", c->required[i]);
            json_decref(j);
            return CAIRN_EPERMANENT;
        }
    *out = j;
    return 0;
}

int cairn__postprocess_text(const cairn__post_cfg *c, const char *in, size_t len, char **out,
                            size_t *out_len, json_t **json_out, unsigned *redactions, char *err,
                            size_t errlen)
{
    struct cairn__sbuf b = {0};
    *out = NULL;
    *out_len = 0;
    if (json_out)
        *json_out = NULL;
    *redactions = 0;
    int rc = cairn__sb_put(&b, "", 0) ? CAIRN_ENOMEM : clean(c, in, len, &b);
    while (!rc && b.len && b.p[b.len - 1] == ' ')
        b.p[--b.len] = 0;
    if (!rc)
        rc = banned(c, &b, redactions, err, errlen);
    if (!rc && c->max_chars)
        cut(&b, c->max_chars);
    if (!rc && c->extract_json && json_out)
        rc = extract(c, &b, json_out, err, errlen);
    if (rc) {
        free(b.p);
        if (rc == CAIRN_ENOMEM)
            snprintf(err, errlen, "out of memory");
        return rc;
    }
    *out = b.p;
    *out_len = b.len;
    return 0;
}

/* ------------------------------------------------------------------ atomic publish */

int cairn__publish_atomic(const char *dir, const char *name, const void *data, size_t len,
                          char *err, size_t errlen)
{
    char tmp[4096], dst[4096];
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    /* one fixed temporary name per file: a publisher killed half-way leaves it behind, and the
     * next publish of the same file (the task's rerun; runs of one task never overlap) truncates
     * and reuses it */
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        goto fail;
    for (size_t off = 0; off < len;) {
        ssize_t w = write(fd, (const char *)data + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            close(fd);
            goto fail_unlink;
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0) {
        close(fd);
        goto fail_unlink;
    }
    if (close(fd) != 0)
        goto fail_unlink;
    if (rename(tmp, dst) != 0)
        goto fail_unlink;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0) {
        if (dfd >= 0)
            close(dfd);
        goto fail;
    }
    close(dfd);
    return 0;
fail_unlink : {
    int e = errno;
    unlink(tmp);
    errno = e;
}
fail : {
    int e = errno;
    snprintf(err, errlen, "outbox %s: %s", dst, strerror(e));
    return e == ENOSPC || e == EDQUOT ? CAIRN_EFULL : CAIRN_EIO;
}
}

/* ------------------------------------------------------------------ the step */

static void pk_str(msgpack_packer *pk, const char *s, size_t n)
{
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

cairn_step_result cairn__postprocess_step(cairn_ctx *ctx, void *user)
{
    const cairn__post_cfg *c = user;
    const msgpack_object *src = cairn_ctx_dep(ctx, c->source);
    const msgpack_object *text = cairn__mp_get(src, c->field, strlen(c->field));
    if (!text || text->type != MSGPACK_OBJECT_STR) {
        cairn_ctx_set_error(ctx, "postprocess: dependency '%s' has no string field '%s'", c->source,
                            c->field);
        return CAIRN_STEP_PERMANENT;
    }
    char err[512], *out = NULL;
    size_t out_len = 0;
    json_t *j = NULL;
    unsigned red = 0;
    int rc = cairn__postprocess_text(c, text->via.str.ptr, text->via.str.size, &out, &out_len, &j,
                                     &red, err, sizeof err);
    if (rc) {
        cairn_ctx_set_error(ctx, "postprocess: %s", err);
        return rc == CAIRN_ENOMEM ? CAIRN_STEP_TRANSIENT : CAIRN_STEP_PERMANENT;
    }
    char file[4200] = "";
    if (c->outbox) {
        json_t *doc = json_object();
        json_object_set_new(doc, "task", json_string(cairn_ctx_task_id(ctx)));
        json_object_set_new(doc, "text", json_stringn(out, out_len));
        if (j)
            json_object_set(doc, "json", j);
        char *body = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(doc);
        char name[200];
        snprintf(name, sizeof name, "%s.json", cairn_ctx_task_id(ctx));
        rc = body ? cairn__publish_atomic(c->outbox, name, body, strlen(body), err, sizeof err)
                  : CAIRN_ENOMEM;
        free(body);
        if (rc) {
            cairn_ctx_set_error(ctx, "postprocess: %s", err);
            free(out);
            json_decref(j);
            return CAIRN_STEP_TRANSIENT;
        }
        snprintf(file, sizeof file, "%s/%s", c->outbox, name);
    }
    msgpack_packer *pk = cairn_ctx_packer(ctx);
    msgpack_pack_map(pk, 3 + (j != NULL) + (file[0] != 0));
    pk_str(pk, "text", 4), pk_str(pk, out, out_len);
    pk_str(pk, "chars", 5), msgpack_pack_uint64(pk, chars_before(out, out_len));
    pk_str(pk, "redactions", 10), msgpack_pack_uint32(pk, red);
    if (j) {
        pk_str(pk, "json", 4);
        cairn__json_to_msgpack(j, pk);
    }
    if (file[0])
        pk_str(pk, "outbox_file", 11), pk_str(pk, file, strlen(file));
    free(out);
    json_decref(j);
    return CAIRN_STEP_OK;
}
