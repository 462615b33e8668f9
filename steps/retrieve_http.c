/* steps/retrieve_http.c - the remote retriever: top-k hits from an Elasticsearch-compatible
 * endpoint, one POST of {"size": k, "query": {"match": {text_field: query}}} per query.
 *
 * What matters is telling transient failures (a server restarting, a timeout, 429/5xx) from
 * permanent ones (a 4xx, a response of the wrong shape): the first are retried with backoff,
 * the second make the task dead at once with a message saying what to fix. Credentials never
 * sit in the URL, which messages quote and the store keeps: the Authorization header comes from
 * the environment variable auth_env names, and is wiped when the configuration is freed.
 */
#include "steps/retrieve_impl.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RESPONSE_MAX (32u << 20)

#define AT(m) CAIRN__CFG_AT(cairn__retrieve_cfg, m)
static const cairn__cfg_field fields[] = {
    {"url", CAIRN__CFG_STR, AT(url), .nonempty = 1, .required = "required for \"type\": \"http\""},
    {"text_field", CAIRN__CFG_STR, AT(text_field), .nonempty = 1, .sdef = "text"},
    {"timeout_ms", CAIRN__CFG_INT, AT(timeout_ms), .lo = 1, .hi = 600000, .def = 5000,
     .unit = "(milliseconds)", .tuning = 1},
    {"auth_env", CAIRN__CFG_STR, AT(auth_env), .nonempty = 1},
    {NULL},
};
#undef AT

static int once_rc;
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { once_rc = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; }

/* The URL as messages show it: scheme://host[:port]/path, a query only as "?...". It is parsed
 * with curl's own parser, so exactly what curl will use is checked. */
static int check_url(const cairn__cfg *r, cairn__retrieve_cfg *c)
{
    if (strncmp(c->url, "http://", 7) && strncmp(c->url, "https://", 8))
        return cairn__cfg_fail(r, CAIRN_EJSON, "url", "must start with http:// or https://");
    CURLU *u = curl_url();
    char *user = NULL, *host = NULL, *path = NULL, *port = NULL, *scheme = NULL, *q = NULL;
    int rc = 0;
    if (!u || curl_url_set(u, CURLUPART_URL, c->url, 0) != CURLUE_OK)
        rc = cairn__cfg_fail(r, CAIRN_EJSON, "url", "not a valid URL");
    else if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK)
        rc = cairn__cfg_fail(r, CAIRN_EJSON, "url",
                             "must not carry credentials; put the Authorization header value in "
                             "an environment variable named by auth_env");
    else {
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
        curl_url_get(u, CURLUPART_HOST, &host, 0);
        curl_url_get(u, CURLUPART_PORT, &port, 0);
        curl_url_get(u, CURLUPART_PATH, &path, 0);
        curl_url_get(u, CURLUPART_QUERY, &q, 0);
        size_t n =
            32 + strlen(scheme ? scheme : "") + strlen(host ? host : "") + strlen(path ? path : "");
        c->url_safe = malloc(n);
        if (!c->url_safe)
            rc = cairn__cfg_fail(r, CAIRN_ENOMEM, "url", "out of memory");
        else
            snprintf(c->url_safe, n, "%s://%s%s%s%s%s", scheme ? scheme : "", host ? host : "",
                     port ? ":" : "", port ? port : "", path ? path : "", q ? "?..." : "");
    }
    curl_free(user), curl_free(host), curl_free(path), curl_free(port);
    curl_free(scheme), curl_free(q);
    curl_url_cleanup(u);
    return rc;
}

static int setup(const cairn__cfg *r, cairn__retrieve_cfg *c, const char *store_dir)
{
    (void)store_dir;
    int rc = check_url(r, c);
    if (rc)
        return rc;
    if (c->auth_env) {
        const char *v = getenv(c->auth_env);
        if (!v || !*v)
            return cairn__cfg_fail(r, CAIRN_EJSON, "auth_env",
                                   "environment variable %s is not set or empty", c->auth_env);
        size_t n = strlen(v) + 16;
        if (!(c->auth = malloc(n)))
            return cairn__cfg_fail(r, CAIRN_ENOMEM, "auth_env", "out of memory");
        snprintf(c->auth, n, "Authorization: %s", v);
    }
    pthread_once(&curl_once, curl_init_once);
    return once_rc ? 0 : cairn__cfg_fail(r, CAIRN_EJSON, NULL, "libcurl failed to initialize");
}

static void release(cairn__retrieve_cfg *c)
{
    free(c->url_safe);
    c->url_safe = NULL;
    if (c->auth) {
        memset(c->auth, 0, strlen(c->auth)); /* a secret: do not leave it in freed memory */
        free(c->auth);
        c->auth = NULL;
    }
}

/* ------------------------------------------------------------------ the request */

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

static int search(cairn__retrieve_cfg *c, const char *query, cairn__bm25_hit **hits, size_t *n,
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

const cairn__retriever cairn__retriever_http = {"http", fields, setup, search, NULL, release};
