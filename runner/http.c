/* runner/http.c - the JSON-over-HTTP layer of `serve`, on libmicrohttpd (see http.h).
 *
 * libmicrohttpd does the HTTP: parsing, keep-alive, chunked bodies, the thread pool. This file
 * adds the three decisions every route shares, taken from the headers alone so that a request
 * refused there is answered before its body is read: the bearer token (401), the route and
 * method (404, 405), and a declared Content-Length over the limit (413). A body sent without a
 * length (chunked) is gathered up to the limit and the rest dropped, then refused the same way.
 * These refusals are the task API's error shape unless the server shapes them itself
 * (cairn__http_conf.refusal: `serve --model` answers OpenAI's, which its clients parse).
 * The token is compared in constant time (CRYPTO_memcmp), so its bytes cannot be guessed one at
 * a time from response times.
 *
 * Streams (Server-Sent Events for `serve --model`) are libmicrohttpd's callback responses sent
 * chunked: the handler hands over a read function, and the server (per_connection: a thread per
 * connection, so a read may wait) asks it for each next chunk. Whether the client is still there
 * is seen without writing to it, by peeking at its socket (cairn__http_client_gone), so a request
 * whose client left is given up at once, streamed or not.
 *
 * libmicrohttpd is loaded (dlopen) when a server starts, not linked: Debian builds it with
 * GnuTLS, whose loading and initialisation (p11-kit and its modules) doubled the start-up time
 * of every command of every program on libcairn - `run` in a cron job, `show` - for a library
 * only `serve` uses. The headers still give every call its type (MHD_FN below).
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/str.h"
#include "runner/cli.h"
#include "runner/http.h"

/* The library's entry points this file calls, typed by its own declarations. */
#define MHD_FN(name) __typeof__(name) *name
static struct {
    MHD_FN(MHD_start_daemon);
    MHD_FN(MHD_stop_daemon);
    MHD_FN(MHD_lookup_connection_value);
    MHD_FN(MHD_create_response_from_buffer);
    MHD_FN(MHD_add_response_header);
    MHD_FN(MHD_queue_response);
    MHD_FN(MHD_destroy_response);
    MHD_FN(MHD_create_response_from_callback);
    MHD_FN(MHD_get_connection_info);
} mhd;
#undef MHD_FN
static pthread_once_t mhd_once = PTHREAD_ONCE_INIT;
static char mhd_err[512]; /* why it could not be loaded; "" when loaded */

#define MHD_SONAME "libmicrohttpd.so.12" /* the ABI of 0.9.x and 1.x */

static void mhd_load(void)
{
    void *h = dlopen(MHD_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        snprintf(mhd_err, sizeof mhd_err, "cannot load %s (install libmicrohttpd12): %s",
                 MHD_SONAME, why ? why : "not found");
        return;
    }
    static const char *const names[] = {"MHD_start_daemon",
                                        "MHD_stop_daemon",
                                        "MHD_lookup_connection_value",
                                        "MHD_create_response_from_buffer",
                                        "MHD_add_response_header",
                                        "MHD_queue_response",
                                        "MHD_destroy_response",
                                        "MHD_create_response_from_callback",
                                        "MHD_get_connection_info"};
    void *syms[sizeof names / sizeof *names];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!(syms[i] = dlsym(h, names[i]))) {
            snprintf(mhd_err, sizeof mhd_err, "%s has no %s", MHD_SONAME, names[i]);
            dlclose(h);
            return;
        }
    /* object to function pointer: POSIX guarantees it works (as gpu/backend_plugin.c) */
    memcpy(&mhd.MHD_start_daemon, &syms[0], sizeof mhd.MHD_start_daemon);
    memcpy(&mhd.MHD_stop_daemon, &syms[1], sizeof mhd.MHD_stop_daemon);
    memcpy(&mhd.MHD_lookup_connection_value, &syms[2], sizeof mhd.MHD_lookup_connection_value);
    memcpy(&mhd.MHD_create_response_from_buffer, &syms[3],
           sizeof mhd.MHD_create_response_from_buffer);
    memcpy(&mhd.MHD_add_response_header, &syms[4], sizeof mhd.MHD_add_response_header);
    memcpy(&mhd.MHD_queue_response, &syms[5], sizeof mhd.MHD_queue_response);
    memcpy(&mhd.MHD_destroy_response, &syms[6], sizeof mhd.MHD_destroy_response);
    memcpy(&mhd.MHD_create_response_from_callback, &syms[7],
           sizeof mhd.MHD_create_response_from_callback);
    memcpy(&mhd.MHD_get_connection_info, &syms[8], sizeof mhd.MHD_get_connection_info);
}

struct cairn__http {
    struct MHD_Daemon *d;
    cairn__http_conf c;
    char token[512];
    size_t token_len;
    char address[sizeof(((struct sockaddr_un *)0)->sun_path) + 8];
    char unix_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    pthread_mutex_t mu; /* in_flight: routed requests not yet answered whole (on_done) */
    pthread_cond_t idle;
    int in_flight;
};

/* One request's state across the handler's calls. */
typedef struct req_state {
    const cairn__http_route *route;
    struct cairn__sbuf body;
    int too_big;
} req_state;

const char *cairn__http_header(const cairn__http_req *q, const char *name)
{
    return mhd.MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, name);
}

const char *cairn__http_query(const cairn__http_req *q, const char *name)
{
    return mhd.MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, name);
}

json_t *cairn__http_error(const char *type, const char *field, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *e = json_object();
    json_object_set_new(e, "type", json_string(type));
    json_object_set_new(e, "message", json_string(msg));
    if (field)
        json_object_set_new(e, "field", json_string(field));
    json_t *j = json_object();
    json_object_set_new(j, "error", e);
    return j;
}

/* The client's socket of a connection, -1 when libmicrohttpd cannot say. */
static int conn_fd(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        mhd.MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* Whether the peer has closed its end: a read that would block is a client still there, an
 * end of file (or a reset) one that went away. Peeked, so nothing is taken from the stream. */
static int fd_gone(int fd)
{
    if (fd < 0)
        return 0;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

int cairn__http_client_gone(const cairn__http_req *q) { return fd_gone(conn_fd(q->conn)); }

/* A streamed body (cairn__http_resp.stream): libmicrohttpd calls sse_read on the connection's
 * thread for the next bytes and sends each answer as one chunk. The producer's read waits a
 * little itself when it has nothing; between two empty reads the socket is looked at, so a
 * client that went away ends the response even while nothing is being written to it. */
typedef struct stream_state {
    cairn__http_stream_fn read;
    cairn__http_stream_done_fn done;
    void *user;
    int fd, ended;
} stream_state;

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream_state *ss = cls;
    for (;;) {
        ssize_t n = ss->read(ss->user, buf, max);
        if (n > 0)
            return n;
        if (n < 0) {
            ss->ended = 1;
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (fd_gone(ss->fd))
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

/* The response is over: sent whole, or cut (a write failed, the client left, the server stops). */
static void sse_free(void *cls)
{
    stream_state *ss = cls;
    ss->done(ss->user, ss->ended);
    free(ss);
}

static enum MHD_Result answer_stream(struct MHD_Connection *conn, cairn__http_resp *r)
{
    stream_state *ss = calloc(1, sizeof *ss);
    if (!ss) {
        r->stream_done(r->stream_user, 0);
        return MHD_NO;
    }
    *ss = (stream_state){r->stream, r->stream_done, r->stream_user, conn_fd(conn), 0};
    struct MHD_Response *resp =
        mhd.MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, ss, sse_free);
    if (!resp) {
        sse_free(ss);
        return MHD_NO;
    }
    mhd.MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                                r->content_type ? r->content_type : "text/event-stream");
    mhd.MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ok = mhd.MHD_queue_response(conn, r->status, resp);
    mhd.MHD_destroy_response(resp); /* a response never queued frees ss here (sse_free) */
    return ok;
}

/* Queues r on the connection (the body as one compact JSON line) and releases it. */
static enum MHD_Result answer(struct MHD_Connection *conn, cairn__http_resp *r, const char *allow,
                              int auth)
{
    if (r->stream) {
        json_decref(r->body);
        free(r->text);
        return answer_stream(conn, r);
    }
    char *text = r->body ? json_dumps(r->body, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(r->body);
    r->body = NULL;
    struct cairn__sbuf sb = {0};
    if (text) {
        cairn__sb_put(&sb, text, strlen(text));
        cairn__sb_put(&sb, "\n", 1);
        free(text);
    } else if (r->text) {
        cairn__sb_put(&sb, r->text, strlen(r->text));
    }
    free(r->text);
    r->text = NULL;
    struct MHD_Response *resp = mhd.MHD_create_response_from_buffer(
        sb.len, sb.p ? sb.p : (void *)"", MHD_RESPMEM_MUST_COPY);
    free(sb.p);
    if (!resp)
        return MHD_NO;
    if (sb.len)
        mhd.MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                                    r->content_type ? r->content_type : "application/json");
    if (r->location[0])
        mhd.MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, r->location);
    if (allow)
        mhd.MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    if (r->retry_after_s) {
        char secs[16];
        snprintf(secs, sizeof secs, "%u", r->retry_after_s);
        mhd.MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, secs);
    }
    if (auth)
        mhd.MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result ok = mhd.MHD_queue_response(conn, r->status, resp);
    mhd.MHD_destroy_response(resp);
    return ok;
}

static enum MHD_Result refuse(const cairn__http *h, struct MHD_Connection *conn, unsigned status,
                              const char *type, const char *msg, const char *allow)
{
    cairn__http_resp r = {.status = status,
                          .body = h->c.refusal ? h->c.refusal(h->c.user, status, type, msg)
                                               : cairn__http_error(type, NULL, "%s", msg)};
    return answer(conn, &r, allow, status == MHD_HTTP_UNAUTHORIZED);
}

static int path_matches(const cairn__http_route *rt, const char *path)
{
    size_t n = strlen(rt->path);
    return rt->prefix ? strncmp(path, rt->path, n) == 0 && path[n] : strcmp(path, rt->path) == 0;
}

static int token_ok(const cairn__http *h, struct MHD_Connection *conn)
{
    if (!h->token_len)
        return 1;
    const char *a = mhd.MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (!a || strncmp(a, "Bearer ", 7) != 0)
        return 0;
    a += 7;
    return strlen(a) == h->token_len && CRYPTO_memcmp(a, h->token, h->token_len) == 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    cairn__http *h = cls;
    req_state *st = *con_cls;
    if (!st) { /* the headers are in: what can be decided without the body is decided now */
        if (!token_ok(h, conn))
            return refuse(h, conn, MHD_HTTP_UNAUTHORIZED, "unauthorized",
                          "a valid 'Authorization: Bearer <token>' header is required", NULL);
        const cairn__http_route *route = NULL;
        char allow[128] = "";
        for (size_t i = 0; i < h->c.n_routes; i++) {
            const cairn__http_route *rt = &h->c.routes[i];
            if (!path_matches(rt, url))
                continue;
            if (!strcmp(rt->method, method))
                route = rt;
            else if (!strstr(allow, rt->method))
                snprintf(allow + strlen(allow), sizeof allow - strlen(allow), "%s%s",
                         allow[0] ? ", " : "", rt->method);
        }
        if (!route && allow[0]) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s is not allowed on %s (allowed: %s)", method, url, allow);
            return refuse(h, conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed", msg, allow);
        }
        if (!route) {
            char msg[300];
            snprintf(msg, sizeof msg, "no such resource: %s", url);
            return refuse(h, conn, MHD_HTTP_NOT_FOUND, "not_found", msg, NULL);
        }
        const char *cl = mhd.MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > h->c.body_max) {
            char msg[200];
            snprintf(msg, sizeof msg, "the body is %s bytes; the limit is %zu", cl, h->c.body_max);
            return refuse(h, conn, MHD_HTTP_CONTENT_TOO_LARGE, "too_large", msg, NULL);
        }
        if (!(st = calloc(1, sizeof *st)))
            return MHD_NO;
        st->route = route;
        *con_cls = st;
        pthread_mutex_lock(&h->mu);
        h->in_flight++;
        pthread_mutex_unlock(&h->mu);
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!st->route->body || st->body.len + *upload_data_size > h->c.body_max)
            st->too_big = st->route->body != 0; /* a body where none is read is ignored */
        else
            cairn__sb_put(&st->body, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (st->too_big) {
        char msg[100];
        snprintf(msg, sizeof msg, "the body is longer than the limit of %zu bytes", h->c.body_max);
        return refuse(h, conn, MHD_HTTP_CONTENT_TOO_LARGE, "too_large", msg, NULL);
    }
    cairn__sb_put(&st->body, "", 1); /* the NUL: body text is a C string for the handler */
    cairn__http_req q = {.method = method,
                         .path = url,
                         .body = st->body.p ? st->body.p : "",
                         .body_len = st->body.len ? st->body.len - 1 : 0,
                         .conn = conn};
    cairn__http_resp r = {.status = 500};
    st->route->fn(h->c.user, &q, &r);
    return answer(conn, &r, NULL, 0);
}

static void on_done(void *cls, struct MHD_Connection *conn, void **con_cls,
                    enum MHD_RequestTerminationCode toe)
{
    (void)conn, (void)toe;
    cairn__http *h = cls;
    req_state *st = *con_cls;
    if (st) {
        free(st->body.p);
        free(st);
        *con_cls = NULL;
        pthread_mutex_lock(&h->mu);
        if (--h->in_flight == 0)
            pthread_cond_broadcast(&h->idle);
        pthread_mutex_unlock(&h->mu);
    }
}

int cairn__http_is_local(const char *listen)
{
    return !strncmp(listen, "unix:", 5) || !strncmp(listen, "127.", 4) ||
           !strncmp(listen, "[::1]:", 6) || !strncmp(listen, "localhost:", 10);
}

static int read_token(cairn__http *h, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, errlen, "token file %s: %s", path, strerror(errno));
        return CAIRN_ENOENT;
    }
    size_t n = fread(h->token, 1, sizeof h->token - 1, f);
    int big = n == sizeof h->token - 1 && fgetc(f) != EOF;
    fclose(f);
    while (n && strchr(" \t\r\n", h->token[n - 1]))
        n--; /* `echo secret > file` leaves a newline that is no part of the token */
    h->token[n] = 0;
    if (!n || big || strlen(h->token) != n || strpbrk(h->token, " \t\r\n")) {
        snprintf(err, errlen, "token file %s: must hold one token of 1-%zu bytes, no spaces", path,
                 sizeof h->token - 2);
        return CAIRN_EINVAL;
    }
    h->token_len = n;
    return 0;
}

/* A listening socket for "ADDR:PORT" or "unix:PATH" (port 0: the kernel picks); -1 with err. */
static int listen_on(cairn__http *h, const char *spec, char *err, size_t errlen)
{
    int fd;
    if (!strncmp(spec, "unix:", 5)) {
        struct sockaddr_un un = {.sun_family = AF_UNIX};
        const char *path = spec + 5;
        struct stat sb;
        if (!*path || strlen(path) >= sizeof un.sun_path) {
            snprintf(err, errlen, "--listen %s: a Unix socket path of 1-%zu bytes", spec,
                     sizeof un.sun_path - 1);
            return -1;
        }
        if (lstat(path, &sb) == 0 && S_ISSOCK(sb.st_mode))
            unlink(path); /* a previous server's: a live one would be refused by nothing else */
        memcpy(un.sun_path, path, strlen(path) + 1);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&un, sizeof un) || listen(fd, 128)) {
            snprintf(err, errlen, "--listen %s: %s", spec, strerror(errno));
            if (fd >= 0)
                close(fd);
            return -1;
        }
        snprintf(h->unix_path, sizeof h->unix_path, "%s", path);
        snprintf(h->address, sizeof h->address, "unix:%s", path);
        return fd;
    }
    /* ADDR:PORT with a numeric IPv4 address, [ADDR]:PORT with an IPv6 one, or localhost:PORT */
    const char *colon = strrchr(spec, ':');
    char host[64];
    long port = -1;
    int v6 = spec[0] == '[';
    size_t hl = colon ? (size_t)(colon - spec) : 0;
    if (!colon || hl >= sizeof host || cairn__cli_parse_long(colon + 1, 0, 65535, &port) ||
        (v6 && (hl < 3 || spec[hl - 1] != ']'))) {
        snprintf(err, errlen,
                 "--listen %s: want ADDR:PORT (IPv4), [ADDR]:PORT (IPv6), localhost:PORT (port "
                 "0-65535) or unix:PATH",
                 spec);
        return -1;
    }
    memcpy(host, spec + v6, hl - 2 * (size_t)v6);
    host[hl - 2 * (size_t)v6] = 0;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    socklen_t len;
    if (v6) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        len = sizeof *in6;
        if (inet_pton(AF_INET6, host, &in6->sin6_addr) != 1) {
            snprintf(err, errlen, "--listen %s: '%s' is not an IPv6 address", spec, host);
            return -1;
        }
    } else {
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)port);
        len = sizeof *in;
        if (inet_pton(AF_INET, strcmp(host, "localhost") ? host : "127.0.0.1", &in->sin_addr) !=
            1) {
            snprintf(err, errlen, "--listen %s: '%s' is not an IPv4 address", spec, host);
            return -1;
        }
    }
    int one = 1;
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && v6) /* this address only, not IPv4 too */
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(fd, (struct sockaddr *)&ss, len) || listen(fd, 128) ||
        getsockname(fd, (struct sockaddr *)&ss, &len)) {
        snprintf(err, errlen, "--listen %s: %s", spec, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    unsigned bound = ntohs(v6 ? in6->sin6_port : in->sin_port);
    snprintf(h->address, sizeof h->address, v6 ? "[%s]:%u" : "%s:%u", host, bound);
    return fd;
}

int cairn__http_start(const cairn__http_conf *c, cairn__http **out, char *err, size_t errlen)
{
    pthread_once(&mhd_once, mhd_load);
    if (mhd_err[0]) {
        snprintf(err, errlen, "%s", mhd_err);
        return CAIRN_EIO;
    }
    cairn__http *h = calloc(1, sizeof *h);
    if (!h)
        return CAIRN_ENOMEM;
    h->c = *c;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->idle, NULL);
    int rc = c->token_file ? read_token(h, c->token_file, err, errlen) : 0;
    if (rc) {
        free(h);
        return rc;
    }
    errno = 0; /* stays 0 for an address that cannot be read: EINVAL, not EIO */
    int fd = listen_on(h, c->listen, err, errlen);
    if (fd < 0) {
        free(h);
        return errno == 0 ? CAIRN_EINVAL : CAIRN_EIO;
    }
    /* the socket is ours, so a Unix socket and the port chosen for 0 are one code path */
    if (c->per_connection) /* handlers and streams may block: a thread each */
        h->d = mhd.MHD_start_daemon(
            MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                MHD_USE_ERROR_LOG,
            0, NULL, NULL, on_request, h, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_NOTIFY_COMPLETED,
            on_done, h, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60, MHD_OPTION_END);
    else
        h->d = mhd.MHD_start_daemon(
            MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, h,
            MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_THREAD_POOL_SIZE,
            (unsigned)(c->threads ? c->threads : 1), MHD_OPTION_NOTIFY_COMPLETED, on_done, h,
            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60, MHD_OPTION_END);
    if (!h->d) {
        snprintf(err, errlen, "cannot start the HTTP server on %s", h->address);
        close(fd);
        if (h->unix_path[0])
            unlink(h->unix_path);
        free(h);
        return CAIRN_EIO;
    }
    *out = h;
    return 0;
}

const char *cairn__http_address(const cairn__http *h) { return h->address; }

void cairn__http_stop(cairn__http *h, double drain_s)
{
    if (!h)
        return;
    /* libmicrohttpd's stop shuts every connection's socket down at once, cutting what a
     * response has not yet written (a stream's last event, a plain answer just queued): the
     * requests being answered get drain_s to be sent whole first */
    struct timespec end;
    clock_gettime(CLOCK_REALTIME, &end);
    end.tv_sec += (time_t)drain_s;
    end.tv_nsec += (long)((drain_s - (double)(time_t)drain_s) * 1e9);
    end.tv_sec += end.tv_nsec / 1000000000L;
    end.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&h->mu);
    while (h->in_flight > 0 && pthread_cond_timedwait(&h->idle, &h->mu, &end) == 0)
        ;
    pthread_mutex_unlock(&h->mu);
    mhd.MHD_stop_daemon(h->d); /* closes the listening socket too */
    if (h->unix_path[0])
        unlink(h->unix_path);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->idle);
    free(h);
}

int cairn__http_cmd_check(const char *cmd, const char *help, const char *listen,
                          const char *key_file, const char *key_opt)
{
    if (!cairn__http_is_local(listen) && !key_file)
        return cairn__cli_usage_error(cmd, help, "--listen %s is not loopback: %s F is required",
                                      listen, key_opt);
    return 0;
}

int cairn__http_cmd_start(const cairn__http_conf *c, const char *cmd, const char *what,
                          cairn__http **out)
{
    char err[1024];
    int rc = cairn__http_start(c, out, err, sizeof err);
    if (rc) {
        cairn__log(CAIRN__LOG_ERROR, cmd, "listen", NULL, NULL, "%s", err);
        return rc == CAIRN_ENOENT ? CAIRN__EX_NOINPUT
               : rc == CAIRN_EIO  ? CAIRN__EX_UNAVAILABLE
                                  : CAIRN__EX_USAGE;
    }
    printf("listening %s\n", (*out)->address);
    fflush(stdout);
    cairn__log(CAIRN__LOG_NOTE, cmd, "listening", NULL, NULL, "%s, listening on %s", what,
               (*out)->address);
    return 0;
}
