/* steps/retrieve.c - the `retrieve` step: a query from input fields, top-k documents from the
 * retriever the "type" setting picks (retrieve_bm25.c: the local BM25 index, retrieve_http.c: an
 * Elasticsearch-compatible endpoint).
 *
 * This file holds what every retriever shares: the settings they all have, the dispatch by
 * type (a table of retrievers, each with its own settings, so a setting of the other type is
 * named as such), the query built from the input, and the step. The step is a compute step, so
 * the runner may call it again after a crash or a transient failure; the retrievers only read,
 * so that is harmless. What they must get right is telling transient failures from permanent
 * ones (cairn__retrieve_search in retrieve.h).
 */
#include "steps/retrieve_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/str.h"
#include "steps/template.h"

#define TOP_K_MAX 1000

/* In the order of the "type" choices: the index read is the retriever. */
static const cairn__retriever *const retrievers[] = {&cairn__retriever_bm25,
                                                     &cairn__retriever_http};
static const char *const types[] = {"bm25", "http", NULL};

/* The settings every retriever has; "type" is read first, into a local, to pick the rest. */
#define AT(m) CAIRN__CFG_AT(cairn__retrieve_cfg, m)
static const cairn__cfg_field common[] = {
    CAIRN__CFG_KNOWN("type"),
    {"query_fields", CAIRN__CFG_STRS, AT(fields), CAIRN__CFG_COUNT(cairn__retrieve_cfg, n_fields),
     .nonempty = 1,
     .required = "required (the input fields the query is made of, e.g. [\"title\", "
                 "\"keywords\"])"},
    {"top_k", CAIRN__CFG_INT, AT(top_k), .lo = 1, .hi = TOP_K_MAX, .def = 5},
    {NULL},
};
#undef AT
static const cairn__cfg_field type_field = {"type", CAIRN__CFG_ENUM, .size = sizeof(int),
                                            .choices = types, .sdef = "bm25"};

/* ------------------------------------------------------------------ config */

/* Refuses a setting no table declares, and names the type a setting of the other one is for. */
static int check_keys(const cairn__cfg *r, const cairn__retriever *kind)
{
    const cairn__cfg_field *const mine[] = {common, kind->fields, NULL};
    for (size_t i = 0; i < sizeof retrievers / sizeof *retrievers; i++)
        for (const cairn__cfg_field *f = retrievers[i]->fields; f->key; f++)
            if (retrievers[i] != kind && json_object_get(r->obj, f->key) &&
                !cairn__cfg_declared(mine, f->key))
                return cairn__cfg_fail(r, CAIRN_EJSON, f->key, "only for \"type\": \"%s\"",
                                       retrievers[i]->type);
    return cairn__cfg_check_keys(r, mine, NULL);
}

int cairn__retrieve_cfg_parse(const json_t *cfg, const char *store_dir, cairn__retrieve_cfg **out,
                              char *err, size_t errlen)
{
    cairn__cfg r;
    int type = 0;
    *out = NULL;
    int rc = cairn__cfg_open(&r, cfg, "retrieve", NULL, err, errlen);
    if (!rc)
        rc = cairn__cfg_read_field(&r, &type_field, &type);
    if (!rc)
        rc = check_keys(&r, retrievers[type]);
    if (rc)
        return rc;
    cairn__retrieve_cfg *c = calloc(1, sizeof *c);
    if (!c)
        return cairn__cfg_fail(&r, CAIRN_ENOMEM, NULL, "out of memory");
    pthread_mutex_init(&c->mu, NULL);
    c->kind = retrievers[type];
    rc = cairn__cfg_read(&r, common, c);
    if (!rc)
        rc = cairn__cfg_read(&r, c->kind->fields, c);
    if (!rc)
        rc = c->kind->setup(&r, c, store_dir);
    if (!rc)
        rc = cairn__cfg_version(
            &r, (const cairn__cfg_field *const[]){common, c->kind->fields, NULL}, &c->version);
    if (rc)
        cairn__retrieve_cfg_free(c);
    *out = rc ? NULL : c;
    return rc;
}

uint32_t cairn__retrieve_cfg_version(const cairn__retrieve_cfg *c) { return c->version; }

int cairn__retrieve_cfg_check(cairn__retrieve_cfg *c, char *err, size_t errlen)
{
    return c->kind->check ? c->kind->check(c, err, errlen) : 0;
}

void cairn__retrieve_cfg_free(cairn__retrieve_cfg *c)
{
    if (!c)
        return;
    c->kind->release(c);
    cairn__cfg_release(common, c);
    cairn__cfg_release(c->kind->fields, c);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* ------------------------------------------------------------------ the query */

/* Appends a string, a space before it unless it is the first. */
static int sb_word(struct cairn__sbuf *b, const char *s, size_t n)
{
    if (n == 0)
        return 0;
    if (b->len && cairn__sb_put(b, " ", 1))
        return -1;
    return cairn__sb_put(b, s, n);
}

static const char *type_name(msgpack_object_type t)
{
    switch (t) {
    case MSGPACK_OBJECT_BOOLEAN:
        return "a boolean";
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return "an integer";
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return "a number";
    case MSGPACK_OBJECT_MAP:
        return "an object";
    case MSGPACK_OBJECT_ARRAY:
        return "an array";
    case MSGPACK_OBJECT_BIN:
    case MSGPACK_OBJECT_EXT:
        return "binary";
    default:
        return "a string";
    }
}

int cairn__retrieve_query(const cairn__retrieve_cfg *c, const msgpack_object *input, char **query,
                          char *err, size_t errlen)
{
    *query = NULL;
    if (!input || input->type != MSGPACK_OBJECT_MAP) {
        snprintf(err, errlen, "the task input must be an object");
        return CAIRN_EPERMANENT;
    }
    struct cairn__sbuf b = {0};
    if (cairn__sb_put(&b, "", 0))
        goto oom;
    for (size_t f = 0; f < c->n_fields; f++) {
        const msgpack_object *v = cairn__mp_get(input, c->fields[f], strlen(c->fields[f]));
        if (!v || v->type == MSGPACK_OBJECT_NIL)
            continue;
        if (v->type == MSGPACK_OBJECT_STR) {
            if (sb_word(&b, v->via.str.ptr, v->via.str.size))
                goto oom;
            continue;
        }
        if (v->type != MSGPACK_OBJECT_ARRAY) {
            snprintf(err, errlen,
                     "input field '%s' must be a string or an array of strings, not %s",
                     c->fields[f], type_name(v->type));
            free(b.p);
            return CAIRN_EPERMANENT;
        }
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            const msgpack_object *e = &v->via.array.ptr[i];
            if (e->type == MSGPACK_OBJECT_NIL)
                continue;
            if (e->type != MSGPACK_OBJECT_STR) {
                snprintf(err, errlen, "input field '%s[%u]' must be a string, not %s", c->fields[f],
                         i, type_name(e->type));
                free(b.p);
                return CAIRN_EPERMANENT;
            }
            if (sb_word(&b, e->via.str.ptr, e->via.str.size))
                goto oom;
        }
    }
    *query = b.p;
    return 0;
oom:
    free(b.p);
    snprintf(err, errlen, "out of memory");
    return CAIRN_ENOMEM;
}

/* ------------------------------------------------------------------ search and step */

static int has_tokens(const char *q) { return cairn__bm25_tokenize(q, strlen(q), NULL, NULL) > 0; }

int cairn__retrieve_search(cairn__retrieve_cfg *c, const char *query, cairn__bm25_hit **hits,
                           size_t *n, char *err, size_t errlen)
{
    *hits = NULL;
    *n = 0;
    if (!has_tokens(query))
        return 0;
    pthread_mutex_lock(&c->mu);
    int rc = c->kind->search(c, query, hits, n, err, errlen);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void pk_str(msgpack_packer *pk, const char *s, size_t n)
{
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

cairn_step_result cairn__retrieve_step(cairn_ctx *ctx, void *user)
{
    cairn__retrieve_cfg *c = user;
    char err[1024] = "", *query = NULL;
    int rc = cairn__retrieve_query(c, cairn_ctx_input(ctx), &query, err, sizeof err);
    if (rc) {
        cairn_ctx_set_error(ctx, "retrieve: %s", err);
        return rc == CAIRN_ENOMEM ? CAIRN_STEP_TRANSIENT : CAIRN_STEP_PERMANENT;
    }
    cairn__bm25_hit *hits = NULL;
    size_t n = 0;
    rc = cairn__retrieve_search(c, query, &hits, &n, err, sizeof err);
    if (rc) {
        cairn_ctx_set_error(ctx, "retrieve: %s", err);
        free(query);
        return rc == CAIRN_ETRANSIENT ? CAIRN_STEP_TRANSIENT : CAIRN_STEP_PERMANENT;
    }
    msgpack_packer *pk = cairn_ctx_packer(ctx);
    msgpack_pack_map(pk, 2);
    pk_str(pk, "query", 5), pk_str(pk, query, strlen(query));
    pk_str(pk, "docs", 4);
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++) {
        msgpack_pack_map(pk, 3);
        pk_str(pk, "id", 2), pk_str(pk, hits[i].id, strlen(hits[i].id));
        pk_str(pk, "score", 5), msgpack_pack_double(pk, hits[i].score);
        pk_str(pk, "text", 4), pk_str(pk, hits[i].text, strlen(hits[i].text));
    }
    cairn__bm25_hits_free(hits, n);
    free(query);
    return CAIRN_STEP_OK;
}
