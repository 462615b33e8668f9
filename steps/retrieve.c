/* steps/retrieve.c - the `retrieve` step: a query from input fields, top-k documents from the
 * local BM25 index or an Elasticsearch-compatible endpoint.
 *
 * The step is a compute step, so the runner may call it again after a crash or a transient
 * failure; both retrievers only read, so that is harmless. What matters is telling transient
 * failures (a server restarting, a timeout, 429/5xx, an index being written) from permanent
 * ones (a 4xx, a response of the wrong shape, no index at all): the first are retried with
 * backoff, the second make the task dead at once with a message saying what to fix.
 *
 * The local index is opened on first use, not at configuration time, so a pipeline can be set
 * up before `cairn index` has run. A step with a timeout runs in a forked child, and an LMDB
 * environment must not be used across fork(): the handle remembers the pid that opened it and
 * a child opens its own.
 */
#include "steps/retrieve.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/str.h"
#include "steps/template.h"

#define TOP_K_MAX 1000
#define RESPONSE_MAX (32u << 20)

enum { RETRIEVE_BM25, RETRIEVE_HTTP };

struct cairn__retrieve_cfg {
    int type;
    char *index; /* bm25 */
    char *url, *url_safe, *text_field;
    char *auth; /* Authorization header value, from auth_env; never in messages */
    long timeout_ms;
    char **fields;
    size_t n_fields;
    size_t top_k;
    pthread_mutex_t mu;
    cairn__bm25 *ix;
    pid_t ix_pid;
};

/* ------------------------------------------------------------------ config */

static int cfg_fail(char *err, size_t errlen, const char *fmt, ...) CAIRN_PRINTF(3, 4);
static int cfg_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return CAIRN_EJSON;
}

static int get_string(const json_t *cfg, const char *key, const char *def, char **out, char *err,
                      size_t errlen)
{
    json_t *v = json_object_get(cfg, key);
    *out = NULL;
    if (v && (!json_is_string(v) || json_string_length(v) == 0))
        return cfg_fail(err, errlen, "retrieve.%s: must be a non-empty string", key);
    const char *s = v ? json_string_value(v) : def;
    if (s && !(*out = strdup(s)))
        return CAIRN_ENOMEM;
    return 0;
}

static int get_int(const json_t *cfg, const char *key, long def, long lo, long hi, long *out,
                   char *err, size_t errlen)
{
    json_t *v = json_object_get(cfg, key);
    *out = def;
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return cfg_fail(err, errlen, "retrieve.%s: must be an integer from %ld to %ld", key, lo,
                        hi);
    *out = (long)json_integer_value(v);
    return 0;
}

static int once_rc;
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { once_rc = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; }

int cairn__retrieve_cfg_parse(const json_t *cfg, const char *store_dir, cairn__retrieve_cfg **out,
                              char *err, size_t errlen)
{
    static const char *const common[] = {"type", "query_fields", "top_k"};
    static const char *const bm25_only[] = {"index"};
    static const char *const http_only[] = {"url", "text_field", "timeout_ms", "auth_env"};
    *out = NULL;
    if (!json_is_object(cfg))
        return cfg_fail(err, errlen, "retrieve: must be an object");
    json_t *tv = json_object_get(cfg, "type");
    if (tv && !json_is_string(tv))
        return cfg_fail(err, errlen, "retrieve.type: must be \"bm25\" or \"http\"");
    const char *type = tv ? json_string_value(tv) : "bm25";
    int is_http = strcmp(type, "http") == 0;
    if (!is_http && strcmp(type, "bm25") != 0)
        return cfg_fail(err, errlen, "retrieve.type: must be \"bm25\" or \"http\", not \"%s\"",
                        type);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)cfg, k, v)
    {
        int known = 0, other = 0;
        for (size_t i = 0; i < sizeof common / sizeof *common; i++)
            known |= !strcmp(k, common[i]);
        for (size_t i = 0; i < sizeof bm25_only / sizeof *bm25_only; i++)
            is_http ? (other |= !strcmp(k, bm25_only[i])) : (known |= !strcmp(k, bm25_only[i]));
        for (size_t i = 0; i < sizeof http_only / sizeof *http_only; i++)
            is_http ? (known |= !strcmp(k, http_only[i])) : (other |= !strcmp(k, http_only[i]));
        if (other)
            return cfg_fail(err, errlen, "retrieve.%s: only for \"type\": \"%s\"", k,
                            is_http ? "bm25" : "http");
        if (!known)
            return cfg_fail(err, errlen, "retrieve.%s: unknown setting", k);
    }

    cairn__retrieve_cfg *c = calloc(1, sizeof *c);
    if (!c)
        return CAIRN_ENOMEM;
    pthread_mutex_init(&c->mu, NULL);
    c->type = is_http ? RETRIEVE_HTTP : RETRIEVE_BM25;
    int rc = 0;
    long top_k = 5;

    json_t *qf = json_object_get(cfg, "query_fields");
    if (!qf)
        rc = cfg_fail(err, errlen,
                      "retrieve.query_fields: required (the input fields the query is made of, "
                      "e.g. [\"title\", \"keywords\"])");
    else if (!json_is_array(qf) || json_array_size(qf) == 0)
        rc = cfg_fail(err, errlen, "retrieve.query_fields: must be a non-empty array of strings");
    if (!rc && !(c->fields = calloc(json_array_size(qf), sizeof *c->fields)))
        rc = CAIRN_ENOMEM;
    for (size_t i = 0; !rc && i < json_array_size(qf); i++) {
        json_t *f = json_array_get(qf, i);
        if (!json_is_string(f) || json_string_length(f) == 0)
            rc = cfg_fail(err, errlen, "retrieve.query_fields[%zu]: must be a non-empty string", i);
        else if (!(c->fields[c->n_fields++] = strdup(json_string_value(f))))
            rc = CAIRN_ENOMEM;
    }
    if (!rc)
        rc = get_int(cfg, "top_k", 5, 1, TOP_K_MAX, &top_k, err, errlen);
    c->top_k = (size_t)top_k;
    if (!rc && is_http) {
        rc = get_string(cfg, "url", NULL, &c->url, err, errlen);
        if (!rc && !c->url)
            rc = cfg_fail(err, errlen, "retrieve.url: required for \"type\": \"http\"");
        if (!rc && strncmp(c->url, "http://", 7) && strncmp(c->url, "https://", 8))
            rc = cfg_fail(err, errlen, "retrieve.url: must start with http:// or https://");
        /* credentials never sit in the URL (it is quoted in messages, which the store keeps):
         * the Authorization header comes from an environment variable instead */
        if (!rc) {
            CURLU *u = curl_url();
            char *user = NULL, *host = NULL, *path = NULL, *port = NULL, *scheme = NULL, *q = NULL;
            if (!u || curl_url_set(u, CURLUPART_URL, c->url, 0) != CURLUE_OK)
                rc = cfg_fail(err, errlen, "retrieve.url: not a valid URL");
            else if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK)
                rc = cfg_fail(err, errlen,
                              "retrieve.url: must not carry credentials; put the Authorization "
                              "header value in an environment variable named by auth_env");
            else {
                curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
                curl_url_get(u, CURLUPART_HOST, &host, 0);
                curl_url_get(u, CURLUPART_PORT, &port, 0);
                curl_url_get(u, CURLUPART_PATH, &path, 0);
                curl_url_get(u, CURLUPART_QUERY, &q, 0);
                size_t n = 32 + strlen(scheme ? scheme : "") + strlen(host ? host : "") +
                           strlen(path ? path : "");
                c->url_safe = malloc(n);
                if (!c->url_safe)
                    rc = CAIRN_ENOMEM;
                else
                    snprintf(c->url_safe, n, "%s://%s%s%s%s%s", scheme ? scheme : "",
                             host ? host : "", port ? ":" : "", port ? port : "", path ? path : "",
                             q ? "?..." : "");
            }
            curl_free(user), curl_free(host), curl_free(path), curl_free(port);
            curl_free(scheme), curl_free(q);
            curl_url_cleanup(u);
        }
        char *auth_env = NULL;
        if (!rc)
            rc = get_string(cfg, "auth_env", NULL, &auth_env, err, errlen);
        if (!rc && auth_env) {
            const char *v = getenv(auth_env);
            if (!v || !*v)
                rc = cfg_fail(err, errlen,
                              "retrieve.auth_env: environment variable %s is not set or empty",
                              auth_env);
            else if (!(c->auth = malloc(strlen(v) + 16)))
                rc = CAIRN_ENOMEM;
            else
                sprintf(c->auth, "Authorization: %s", v);
        }
        free(auth_env);
        if (!rc)
            rc = get_string(cfg, "text_field", "text", &c->text_field, err, errlen);
        if (!rc)
            rc = get_int(cfg, "timeout_ms", 5000, 1, 600000, &c->timeout_ms, err, errlen);
        if (!rc) {
            pthread_once(&curl_once, curl_init_once);
            if (!once_rc)
                rc = cfg_fail(err, errlen, "retrieve: libcurl failed to initialize");
        }
    } else if (!rc) {
        rc = get_string(cfg, "index", NULL, &c->index, err, errlen);
        if (!rc && !c->index) {
            if (!store_dir || !*store_dir)
                rc = cfg_fail(err, errlen,
                              "retrieve.index: required when no store directory is given");
            else if (!(c->index = malloc(strlen(store_dir) + 7)))
                rc = CAIRN_ENOMEM;
            else
                sprintf(c->index, "%s/index", store_dir);
        }
    }
    if (rc == CAIRN_ENOMEM)
        snprintf(err, errlen, "retrieve: out of memory");
    if (rc) {
        cairn__retrieve_cfg_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void cairn__retrieve_cfg_free(cairn__retrieve_cfg *c)
{
    if (!c)
        return;
    if (c->ix && c->ix_pid == getpid())
        cairn__bm25_close(c->ix);
    for (size_t i = 0; i < c->n_fields; i++)
        free(c->fields[i]);
    free(c->fields);
    free(c->index), free(c->url), free(c->url_safe), free(c->text_field);
    if (c->auth) {
        memset(c->auth, 0, strlen(c->auth)); /* a secret: do not leave it in freed memory */
        free(c->auth);
    }
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

/* ------------------------------------------------------------------ bm25 */

static int bm25_search(cairn__retrieve_cfg *c, const char *query, cairn__bm25_hit **hits, size_t *n,
                       char *err, size_t errlen)
{
    if (c->ix && c->ix_pid != getpid())
        c->ix = NULL; /* inherited across fork(): the parent's to close, not ours to use */
    if (!c->ix) {
        int rc = cairn__bm25_open(c->index, 0, &c->ix, err, errlen);
        if (rc)
            return rc == CAIRN_ENOMEM || rc == CAIRN_EIO ? CAIRN_ETRANSIENT : CAIRN_EPERMANENT;
        c->ix_pid = getpid();
    }
    int rc = cairn__bm25_search(c->ix, query, c->top_k, hits, n);
    if (rc) {
        snprintf(err, errlen, "%s", cairn__bm25_errmsg(c->ix));
        return rc == CAIRN_ECORRUPT ? CAIRN_EPERMANENT : CAIRN_ETRANSIENT;
    }
    return 0;
}

/* ------------------------------------------------------------------ http */

typedef struct resp {
    char *p;
    size_t n, cap;
    int too_big;
} resp;

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    resp *r = arg;
    size_t len = size * nmemb;
    if (r->n + len > RESPONSE_MAX) {
        r->too_big = 1;
        return 0; /* makes curl fail with CURLE_WRITE_ERROR */
    }
    if (r->n + len + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 16384;
        while (cap < r->n + len + 1)
            cap *= 2;
        char *p = realloc(r->p, cap);
        if (!p)
            return 0;
        r->p = p, r->cap = cap;
    }
    memcpy(r->p + r->n, data, len);
    r->n += len;
    r->p[r->n] = 0;
    return len;
}

static int curl_transient(CURLcode cc)
{
    switch (cc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_AGAIN:
    case CURLE_OUT_OF_MEMORY:
        return 1;
    default:
        return 0;
    }
}

/* A short, printable excerpt of a response body for error messages. */
static void excerpt(const resp *r, char *out, size_t outlen)
{
    size_t j = 0;
    for (size_t i = 0; r->p && i < r->n && j + 4 < outlen && i < 200; i++)
        out[j++] = (unsigned char)r->p[i] < 0x20 ? ' ' : r->p[i];
    if (r->n > 200 && j + 4 < outlen)
        out[j++] = '.', out[j++] = '.', out[j++] = '.';
    out[j] = 0;
}

/* Reads hits.hits[] of an Elasticsearch response into *hits. */
static int parse_hits(const cairn__retrieve_cfg *c, const resp *r, cairn__bm25_hit **hits,
                      size_t *n, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(r->p ? r->p : "", r->n, 0, &je);
    if (!root) {
        char ex[256];
        excerpt(r, ex, sizeof ex);
        snprintf(err, errlen, "malformed response from %s: %s at line %d, column %d: '%s'",
                 c->url_safe, je.text, je.line, je.column, ex);
        return CAIRN_EPERMANENT;
    }
    json_t *arr = json_object_get(json_object_get(root, "hits"), "hits");
    if (!json_is_array(arr)) {
        snprintf(err, errlen, "malformed response from %s: no hits.hits array", c->url_safe);
        json_decref(root);
        return CAIRN_EPERMANENT;
    }
    size_t total = json_array_size(arr) < c->top_k ? json_array_size(arr) : c->top_k;
    cairn__bm25_hit *out = calloc(total + 1, sizeof *out);
    if (!out) {
        json_decref(root);
        snprintf(err, errlen, "out of memory");
        return CAIRN_ETRANSIENT;
    }
    int rc = 0;
    size_t i;
    for (i = 0; i < total && !rc; i++) {
        json_t *h = json_array_get(arr, i), *id = json_object_get(h, "_id"),
               *score = json_object_get(h, "_score");
        json_t *text = json_object_get(json_object_get(h, "_source"), c->text_field);
        json_t *src = json_object_get(h, "_source");
        char bad[160] = "";
        if (!json_is_object(h))
            snprintf(bad, sizeof bad, " is not an object");
        else if (!json_is_string(id) && !json_is_integer(id))
            snprintf(bad, sizeof bad, "._id is %s", id ? "not a string" : "missing");
        else if (!json_is_number(score))
            snprintf(bad, sizeof bad, "._score is %s", score ? "not a number" : "missing");
        else if (!json_is_object(src))
            snprintf(bad, sizeof bad, "._source is %s", src ? "not an object" : "missing");
        else if (!json_is_string(text))
            snprintf(bad, sizeof bad, "._source.%s is %s", c->text_field,
                     text ? "not a string" : "missing");
        if (bad[0]) {
            snprintf(err, errlen, "malformed response from %s: hits.hits[%zu]%s", c->url_safe, i,
                     bad);
            rc = CAIRN_EPERMANENT;
            break;
        }
        char num[32];
        if (json_is_integer(id))
            snprintf(num, sizeof num, "%lld", (long long)json_integer_value(id));
        out[i].id = strdup(json_is_string(id) ? json_string_value(id) : num);
        out[i].text = strndup(json_string_value(text), json_string_length(text));
        out[i].score = json_number_value(score);
        if (!out[i].id || !out[i].text) {
            snprintf(err, errlen, "out of memory");
            rc = CAIRN_ETRANSIENT;
            i++;
            break;
        }
    }
    json_decref(root);
    if (rc) {
        cairn__bm25_hits_free(out, i);
        return rc;
    }
    *hits = out;
    *n = total;
    return 0;
}

static int http_search(cairn__retrieve_cfg *c, const char *query, cairn__bm25_hit **hits, size_t *n,
                       char *err, size_t errlen)
{
    json_t *req = json_pack("{s:I, s:{s:{s:s}}}", "size", (json_int_t)c->top_k, "query", "match",
                            c->text_field, query);
    if (!req) { /* jansson refuses a string that is not UTF-8 (a msgpack str may be any bytes) */
        json_t *probe = json_string(query);
        json_decref(probe);
        if (!probe) {
            snprintf(err, errlen, "the query is not valid UTF-8");
            return CAIRN_EPERMANENT;
        }
    }
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    CURL *h = body ? curl_easy_init() : NULL;
    struct curl_slist *hdr = NULL, *h2 = NULL;
    if (h) {
        hdr = curl_slist_append(NULL, "Content-Type: application/json");
        h2 = hdr ? curl_slist_append(hdr, "Accept: application/json") : NULL;
        if (h2 && c->auth)
            h2 = curl_slist_append(h2, c->auth);
    }
    if (!h2) {
        curl_slist_free_all(hdr);
        if (h)
            curl_easy_cleanup(h);
        free(body);
        snprintf(err, errlen, "out of memory");
        return CAIRN_ETRANSIENT;
    }
    hdr = h2;
    resp r = {0};
    char cerr[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_URL, c->url);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->timeout_ms);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L); /* timeouts without SIGALRM: we may be a thread */
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "cairn-retrieve/1");
    CURLcode cc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    curl_slist_free_all(hdr);
    free(body);

    int rc;
    char ex[256];
    if (cc != CURLE_OK) {
        if (r.too_big) {
            snprintf(err, errlen, "response from %s is larger than %u bytes", c->url_safe,
                     RESPONSE_MAX);
            rc = CAIRN_EPERMANENT;
        } else {
            snprintf(err, errlen, "POST %s: %s%s%s", c->url_safe, curl_easy_strerror(cc),
                     cerr[0] ? ": " : "", cerr);
            rc = curl_transient(cc) ? CAIRN_ETRANSIENT : CAIRN_EPERMANENT;
        }
    } else if (status == 408 || status == 429 || (status >= 500 && status <= 599)) {
        excerpt(&r, ex, sizeof ex);
        snprintf(err, errlen, "POST %s: HTTP %ld (will retry): %s", c->url_safe, status, ex);
        rc = CAIRN_ETRANSIENT;
    } else if (status < 200 || status > 299) {
        excerpt(&r, ex, sizeof ex);
        snprintf(err, errlen, "POST %s: HTTP %ld: %s", c->url_safe, status, ex);
        rc = CAIRN_EPERMANENT;
    } else {
        rc = parse_hits(c, &r, hits, n, err, errlen);
    }
    free(r.p);
    return rc;
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
    int rc = c->type == RETRIEVE_HTTP ? http_search(c, query, hits, n, err, errlen)
                                      : bm25_search(c, query, hits, n, err, errlen);
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
