/* runner/http.h - a small JSON-over-HTTP server on libmicrohttpd (not public).
 *
 * What `serve --tasks` (and, later, `serve --model`) needs and nothing more: a listener on a
 * TCP address (loopback unless told otherwise) or a Unix socket, a route table, request bodies
 * gathered up to a size limit, JSON responses, an optional bearer token read from a file, and a
 * stop that waits for the requests in flight. Handlers run on libmicrohttpd's thread pool, so
 * they must be thread-safe.
 */
#ifndef CAIRN_RUNNER_HTTP_H
#define CAIRN_RUNNER_HTTP_H

#include <jansson.h>
#include <stddef.h>
#include <sys/types.h>

#include "cairn.h"

typedef struct cairn__http cairn__http;

/* A request as a handler sees it; everything borrowed for the handler's call only. */
typedef struct cairn__http_req {
    const char *method, *path; /* path: the URL without its query */
    const char *body;          /* NUL-terminated ("" when none) */
    size_t body_len;
    void *conn; /* libmicrohttpd's connection, for the two lookups below */
} cairn__http_req;

/* A request header (case-insensitive name) or query argument; NULL when absent. */
const char *cairn__http_header(const cairn__http_req *q, const char *name);
const char *cairn__http_query(const cairn__http_req *q, const char *name);

/* A streamed body's producer: up to max next bytes into buf, their count; 0 when it has none
 * yet (it should wait a little first, tens of milliseconds: between two empty reads the server
 * checks that the client is still there); -1 at the end. Runs on the connection's thread. */
typedef ssize_t (*cairn__http_stream_fn)(void *user, char *buf, size_t max);
/* Called once when a stream is over: complete 1 when the producer's end was reached, 0 when it
 * was cut (the client went away, a write failed, the server stopped). */
typedef void (*cairn__http_stream_done_fn)(void *user, int complete);

/* What a handler answers: a status, a JSON body (the response takes the reference; NULL: no
 * body), when not empty a Location header, when not 0 a Retry-After header (seconds). */
typedef struct cairn__http_resp {
    unsigned status;
    json_t *body;
    char location[320];
    unsigned retry_after_s;
    /* instead of body: a malloc'd text the response takes (freed after sending), with its
     * Content-Type (e.g. /metrics' OpenMetrics text) */
    char *text;
    const char *content_type;
    /* instead of both: a body streamed chunked (Content-Type text/event-stream unless
     * content_type says otherwise), with no length; done is always called, once */
    cairn__http_stream_fn stream;
    cairn__http_stream_done_fn stream_done;
    void *stream_user;
} cairn__http_resp;

typedef void (*cairn__http_fn)(void *user, const cairn__http_req *q, cairn__http_resp *r);

/* A route: `path` is matched whole, or as a prefix when `prefix` is set ("/v1/tasks/" + an ID).
 * A path that some route matches under another method is 405 with an Allow header; one no route
 * matches is 404. `body`: the handler wants the request body (others are answered at once). */
typedef struct cairn__http_route {
    const char *method, *path;
    int prefix, body;
    cairn__http_fn fn;
} cairn__http_route;

/* The body of a request the server refuses itself, before any route runs: 401 (no valid bearer
 * token), 404 (no route has the path), 405 (the path's routes take other methods: the Allow
 * header says which), 413 (the body is over body_max). type is the task API's name for the
 * refusal (unauthorized, not_found, method_not_allowed, too_large), message says why, for a
 * person. Returns a new JSON body (the response takes it); runs on a connection's thread. */
typedef json_t *(*cairn__http_refusal_fn)(void *user, unsigned status, const char *type,
                                          const char *message);

typedef struct cairn__http_conf {
    const char *listen;     /* "ADDR:PORT" (IPv4, port 0: any free one) or "unix:PATH" */
    const char *token_file; /* NULL: no token; else every request needs "Bearer <token>" */
    size_t body_max;        /* a longer body is 413 */
    unsigned threads;       /* libmicrohttpd's thread pool */
    int per_connection;     /* instead: a thread per connection (handlers may block, streams) */
    const cairn__http_route *routes;
    size_t n_routes;
    void *user; /* handed to every handler */
    /* the refusals' bodies (an API with an error shape of its own, as OpenAI's); NULL:
     * cairn__http_error(type, NULL, message), the task API's */
    cairn__http_refusal_fn refusal;
} cairn__http_conf;

/* Starts listening (the table and user are borrowed until cairn__http_stop). 0, or
 * CAIRN_EINVAL (a listen address that cannot be read, an empty token file), CAIRN_ENOENT (the
 * token file cannot be read), CAIRN_EIO (cannot listen), with err saying why. */
int cairn__http_start(const cairn__http_conf *c, cairn__http **out, char *err, size_t errlen);
/* Where it listens, "127.0.0.1:PORT" (the port chosen for 0) or "unix:PATH". */
const char *cairn__http_address(const cairn__http *h);
/* Whether the client of a request has closed its connection (a blocking handler's check). */
int cairn__http_client_gone(const cairn__http_req *q);
/* Whether `listen` names a loopback address or a Unix socket. */
int cairn__http_is_local(const char *listen);
/* Stops: the requests being answered get up to drain_s seconds to be sent whole, then the
 * server stops accepting, waits for the handlers running, frees; NULL is a no-op. */
void cairn__http_stop(cairn__http *h, double drain_s);

/* The error body {"error": {"type", "message", "field"?}} (field NULL: none). */
json_t *cairn__http_error(const char *type, const char *field, const char *fmt, ...)
    CAIRN_PRINTF(3, 4);

/* ------------------------------------------------------------------ a command's server
 *
 * What `serve --tasks` (runner/cli_serve.c) and `serve --model` (tools/) do alike around the
 * server: the listen address and its key, the start with its `listening` line, the exit codes.
 * The wait for a stop is cairn__cli_stops_wait (runner/cli.h). */

#define CAIRN__HTTP_LISTEN_DEFAULT "127.0.0.1:8080"

/* Whether a command may listen on `listen`: an address other than loopback or a Unix socket
 * needs a key file (key_file, given by the option key_opt, e.g. "--token-file"). 0, or 64 after
 * the usage error (cmd's, with its help). */
int cairn__http_cmd_check(const char *cmd, const char *help, const char *listen,
                          const char *key_file, const char *key_opt);
/* Starts c's server for the command cmd: 0, having printed `listening ADDRESS` on stdout
 * (flushed: whoever started the command waits for that line) and logged cmd's note "WHAT,
 * listening on ADDRESS"; else the exit code after logging why not: 66 (the token file cannot
 * be read), 69 (cannot listen), 64 (an address or token file that is wrong). */
int cairn__http_cmd_start(const cairn__http_conf *c, const char *cmd, const char *what,
                          cairn__http **out);

#endif
