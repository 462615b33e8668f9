/* runner/cli_serve.c - `serve --tasks`: the HTTP task API, with the Idempotency-Key header
 * (IETF httpapi draft) as the task's identity.
 *
 * The key is the task ID itself (checked by the task-ID rules), so a key and its task are one
 * record and the store's own idempotency answers every repeat: the same key with the same
 * payload hash is the same task (200, its state and result), another payload is the store's
 * conflict, which names both hashes (422). Admission is one store transaction, made durable
 * before the 202 goes out (cairn__runner_admit: run's admission without the run), so a task the
 * client was told about survives any crash. Running is left to K runners on threads of P worker
 * processes (--processes P, default 1), as consume's (cli_consume.c): the threads of a worker
 * share its one store handle, so their writes that overlap commit in one transaction with one
 * flush (group commit). A runner takes pending tasks through cairn_runner_retry - the takeover
 * `retry` does, so a task that a killed server left running (its owner dead) or pending is
 * taken up by the next server's workers, and a task that failed transiently is run again when
 * its backoff is over. Each admission writes a byte to every worker's pipe; a worker's reader
 * thread turns each byte into one wake-up of one idle runner (a semaphore: the others sleep
 * on), and every runner looks for due tasks every half second anyway.
 *
 * Worker processes, apart from this one, so that a step that crashes takes its worker down
 * and not the server. The workers are forked before this process opens the store (a child
 * forked while a store is open must not use it); they die with it (PR_SET_PDEATHSIG), so a
 * killed server is a killed server, workers included. A worker that ends (a crashed step, an
 * OOM kill) is replaced: the server closes its store under the store mutex, forks, and opens it
 * again, so the rule holds for the new one too. The HTTP threads share this process's handle
 * under one mutex; admissions are short.
 *
 * Two requests with one key in this server: the second, while the first is still being
 * admitted, is 409 (keys in admission are kept in memory); across servers on one store the
 * admission transaction decides.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/json.h"
#include "common/taskid.h"
#include "runner/cli.h"
#include "runner/http.h"
#include "runner/internal.h"

static const char serve_help[] =
    "usage: %P serve --tasks --graph G [--jobs K] [--processes P]\n"
    "         [--listen ADDR:PORT|unix:PATH]\n"
    "         [--token-file F] [--store DIR] [--max-attempts N] [--lease-ms MS]\n"
    "         [--inline-wait-ms MS] [--tenant-field F --max-running-per-tenant N]\n"
    "         [--allow-graph-change] [--nosync] [--map-max BYTES]\n"
    "Serves the HTTP task API for graph G. K (default 1) runners run the tasks with\n"
    "`%P run`'s semantics, on threads of P (default 1) worker processes whose threads'\n"
    "writes commit together (group commit); a graph whose untimed steps are not\n"
    "thread-safe needs --processes K.\n"
    "Listens on --listen (default 127.0.0.1:8080; port 0: any free port;\n"
    "[ADDR]:PORT for IPv6, localhost:PORT) and exposes GET /metrics (OpenMetrics) and /health;\n"
    "and prints `listening ADDRESS` on stdout once it does. An address other than loopback\n"
    "or a Unix socket needs --token-file: every request then carries 'Authorization: Bearer\n"
    "<the file's token>' (401 otherwise).\n"
    "  POST /v1/tasks          body: the task input (a JSON object); header Idempotency-Key:\n"
    "                          the task ID (1-128 bytes of A-Z a-z 0-9 . _ : -). 202 + Location\n"
    "                          for a new task; 200 with its state (and result) for the same key\n"
    "                          and payload; 422 for the same key with another payload (both\n"
    "                          hashes named); 409 while that key is being admitted; 400 no key,\n"
    "                          a bad key or bad JSON (line and column); 413 over 16 MiB.\n"
    "  GET /v1/tasks/ID        state, steps, result, audit link; GET /v1/tasks/ID/audit\n"
    "  GET /v1/tasks?status=S  the tasks in status S (pending, running, succeeded, failed,\n"
    "                          dead, in_doubt); &limit=N\n"
    "Errors are {\"error\": {\"type\", \"message\", \"field\"}}. SIGTERM, SIGINT and SIGHUP\n"
    "stop it: running tasks stop as `run`'s do; the next start (or `%P retry`) resumes them.\n"
    "Exit: 0 stopped; 64 usage; 66 token file unreadable; 74 store error; 69 cannot listen.\n"
    "(In the cairn executable, `serve --model M.gguf` serves a model instead, as an\n"
    "OpenAI-compatible API: `cairn serve --model M --help`.)\n";

#define KEYS_MAX 1024 /* keys in admission at once: more is 503, try again */

typedef struct server {
    const cairn__cli_opts *o;
    cairn__cli_session s;
    pthread_mutex_t store_mu; /* the store handle and runner: one thread at a time */
    pthread_mutex_t keys_mu;
    char (*keys)[CAIRN_TASK_ID_MAX + 1];            /* in admission now; "" = a free slot */
    int *nudge;                                     /* the workers' wake-up pipes (write ends) */
    size_t n_workers;                               /* worker processes */
    size_t jobs;                                    /* runners, spread over them */
    atomic_ullong n_created, n_existing, n_refused; /* POST /v1/tasks answers, for /metrics */
    int closed; /* under store_mu: the session could not be reopened after a respawn */
} server;

/* Takes store_mu for a handler: 0, or (the store is closed: the server is stopping) the mutex
 * released and r answered 503. */
static int store_lock(server *sv, cairn__http_resp *r)
{
    pthread_mutex_lock(&sv->store_mu);
    if (!sv->closed)
        return 0;
    pthread_mutex_unlock(&sv->store_mu);
    r->status = 503;
    r->retry_after_s = 1;
    r->body = cairn__http_error("shutting_down", NULL, "the server is stopping");
    return 1;
}

/* ------------------------------------------------------------------ run's codes as HTTP */

/* What each outcome of admission is to the client. One table: the codes not in it are 500. */
static const struct {
    int code;
    unsigned status;
    const char *type, *field;
} http_of[] = {
    {CAIRN_EJSON, 400, "invalid_json", "body"},
    {CAIRN_ETASKID, 400, "invalid_idempotency_key", "Idempotency-Key"},
    {CAIRN_ETOOBIG, 413, "too_large", "body"},
    {CAIRN_ECONFLICT, 422, "idempotency_key_reused", "Idempotency-Key"},
    {CAIRN_EINTR, 503, "shutting_down", NULL},
    {CAIRN_EFULL, 507, "store_full", NULL},
};

static void fail_with(cairn__http_resp *r, int code, const char *msg)
{
    for (size_t i = 0; i < sizeof http_of / sizeof *http_of; i++)
        if (http_of[i].code == code) {
            r->status = http_of[i].status;
            r->body = cairn__http_error(http_of[i].type, http_of[i].field, "%s", msg);
            return;
        }
    r->status = 500;
    r->body = cairn__http_error("store_error", NULL, "%s (%s)", msg, cairn_errname(code));
}

/* ------------------------------------------------------------------ the routes */

/* The task's document: `show --json`'s, with its location, audit link and, once it succeeded,
 * "result" (the last step's output). NULL: no such task, with *code the reason. Under store_mu. */
static json_t *task_doc(server *sv, const char *id, int *code)
{
    cairn_task *t = NULL;
    *code = cairn_task_load(sv->s.store, id, &t);
    if (*code)
        return NULL;
    json_t *j = cairn__task_to_json(t);
    cairn_task_free(t);
    if (!j) {
        *code = CAIRN_ENOMEM;
        return NULL;
    }
    char loc[CAIRN_TASK_ID_MAX + 32];
    snprintf(loc, sizeof loc, "/v1/tasks/%s", id);
    json_object_set_new(j, "location", json_string(loc));
    strcat(loc, "/audit");
    json_object_set_new(j, "audit", json_string(loc));
    json_t *steps = json_object_get(j, "steps");
    size_t n = json_array_size(steps);
    const char *status = json_string_value(json_object_get(j, "status"));
    if (n && status && !strcmp(status, "succeeded"))
        json_object_set(j, "result", json_object_get(json_array_get(steps, n - 1), "output"));
    return j;
}

static int key_claim(server *sv, const char *key)
{
    int rc = 1;
    size_t free_slot = KEYS_MAX;
    pthread_mutex_lock(&sv->keys_mu);
    for (size_t i = 0; i < KEYS_MAX && rc; i++) {
        if (!sv->keys[i][0] && free_slot == KEYS_MAX)
            free_slot = i;
        else if (!strcmp(sv->keys[i], key))
            rc = 0;
    }
    if (rc && free_slot == KEYS_MAX)
        rc = -1;
    else if (rc)
        snprintf(sv->keys[free_slot], sizeof sv->keys[free_slot], "%s", key);
    pthread_mutex_unlock(&sv->keys_mu);
    return rc;
}

static void key_release(server *sv, const char *key)
{
    pthread_mutex_lock(&sv->keys_mu);
    for (size_t i = 0; i < KEYS_MAX; i++)
        if (!strcmp(sv->keys[i], key)) {
            sv->keys[i][0] = 0;
            break;
        }
    pthread_mutex_unlock(&sv->keys_mu);
}

static void nudge_workers(server *sv)
{
    /* a full pipe (EAGAIN) is a worker already woken; one gone leaves the task to the others */
    for (size_t i = 0; i < sv->n_workers; i++)
        if (sv->nudge[i] >= 0) {
            ssize_t w = write(sv->nudge[i], "t", 1);
            (void)w;
        }
}

static void admit(server *sv, const cairn__http_req *q, cairn__http_resp *r);

static void post_task(void *user, const cairn__http_req *q, cairn__http_resp *r)
{
    server *sv = user;
    admit(sv, q, r);
    atomic_fetch_add(r->status == 202   ? &sv->n_created
                     : r->status == 200 ? &sv->n_existing
                                        : &sv->n_refused,
                     1);
}

/* POST /v1/tasks: the Idempotency-Key is the task ID; the body its input */
static void admit(server *sv, const cairn__http_req *q, cairn__http_resp *r)
{
    const char *key = cairn__http_header(q, "Idempotency-Key");
    char err[1024];
    if (!key) {
        r->status = 400;
        r->body = cairn__http_error("missing_idempotency_key", "Idempotency-Key",
                                    "the Idempotency-Key header is required: it is the task ID");
        return;
    }
    if (cairn__task_id_check(key, err, sizeof err)) {
        fail_with(r, CAIRN_ETASKID, err);
        return;
    }
    json_t *in = NULL;
    int rc = cairn__json_parse(q->body, q->body_len, "body", &in, err, sizeof err);
    if (!rc && !json_is_object(in)) {
        rc = CAIRN_EJSON;
        snprintf(err, sizeof err, "body: the task input must be a JSON object");
    }
    json_decref(in);
    if (rc) {
        fail_with(r, rc, err);
        return;
    }
    int claim = key_claim(sv, key);
    if (claim <= 0) {
        r->status = claim ? 503 : 409;
        r->retry_after_s = 1; /* an admission takes milliseconds */
        r->body = claim ? cairn__http_error("busy", NULL, "too many admissions at once; retry")
                        : cairn__http_error("idempotency_key_in_use", "Idempotency-Key",
                                            "a request with Idempotency-Key '%s' is still being "
                                            "admitted; retry it",
                                            key);
        return;
    }
    int created = 0;
    if (store_lock(sv, r)) {
        key_release(sv, key);
        return;
    }
    rc = cairn__runner_admit(sv->s.runner, sv->o->graph, key, q->body, q->body_len, &created);
    if (rc)
        snprintf(err, sizeof err, "%s", cairn_runner_errmsg(sv->s.runner));
    json_t *doc = rc ? NULL : task_doc(sv, key, &rc);
    if (rc && doc == NULL && !err[0])
        snprintf(err, sizeof err, "%s", cairn_store_errmsg(sv->s.store));
    pthread_mutex_unlock(&sv->store_mu);
    key_release(sv, key);
    if (rc) {
        fail_with(r, rc, err);
        return;
    }
    nudge_workers(sv);
    r->status = created ? 202 : 200;
    snprintf(r->location, sizeof r->location, "/v1/tasks/%s", key);
    r->body = doc;
}

static int audit_row(const cairn_audit_row *a, void *arg)
{
    json_array_append_new(arg, json_pack("{s:I, s:s, s:s, s:i, s:i, s:s, s:s}", "t_ms",
                                         (json_int_t)a->t_ms, "from", cairn_state_name(a->from),
                                         "to", cairn_state_name(a->to), "attempt", (int)a->attempt,
                                         "generation", (int)a->generation, "step", a->step,
                                         "reason", a->reason));
    return 0;
}

static void get_task(void *user, const cairn__http_req *q, cairn__http_resp *r)
{
    server *sv = user;
    char id[CAIRN_TASK_ID_MAX + 8], err[512];
    const char *rest = q->path + strlen("/v1/tasks/");
    size_t n = strcspn(rest, "/");
    int audit = !strcmp(rest + n, "/audit");
    if (n > CAIRN_TASK_ID_MAX || (rest[n] && !audit)) {
        r->status = 404;
        r->body = cairn__http_error("not_found", NULL, "no such resource: %s", q->path);
        return;
    }
    memcpy(id, rest, n);
    id[n] = 0;
    if (cairn__task_id_check(id, err, sizeof err)) {
        r->status = 404;
        r->body = cairn__http_error("not_found", NULL, "no task '%s': %s", id, err);
        return;
    }
    int rc;
    json_t *doc;
    if (store_lock(sv, r))
        return;
    if (audit) {
        doc = json_array();
        rc = cairn_store_audit(sv->s.store, id, audit_row, doc);
        if (rc) {
            json_decref(doc);
            doc = NULL;
        } else
            doc = json_pack("{s:s, s:o}", "task", id, "audit", doc);
    } else
        doc = task_doc(sv, id, &rc);
    snprintf(err, sizeof err, "%s", rc ? cairn_store_errmsg(sv->s.store) : "");
    pthread_mutex_unlock(&sv->store_mu);
    if (rc == CAIRN_ENOTFOUND) {
        r->status = 404;
        r->body = cairn__http_error("not_found", NULL, "no task '%s'", id);
    } else if (rc)
        fail_with(r, rc, err);
    else {
        r->status = 200;
        r->body = doc;
    }
}

static int list_row(const cairn_task_row *t, void *arg)
{
    json_t *o = t->err ? json_pack("{s:s, s:s, s:s}", "task", t->task_id, "error",
                                   cairn_errname(t->err), "message", t->message)
                       : json_pack("{s:s, s:s, s:i, s:I}", "task", t->task_id, "status",
                                   cairn_state_name(t->state), "attempt", (int)t->attempt,
                                   "updated_ms", (json_int_t)t->updated_ms);
    if (!t->err && t->error[0])
        json_object_set_new(o, "error", json_string(t->error));
    json_array_append_new(arg, o);
    return 0;
}

static void list_tasks(void *user, const cairn__http_req *q, cairn__http_resp *r)
{
    server *sv = user;
    const char *status = cairn__http_query(q, "status"), *lim = cairn__http_query(q, "limit");
    cairn_state st;
    long limit = 0;
    if (status && cairn_state_parse(status, &st)) {
        r->status = 400;
        r->body = cairn__http_error("invalid_request", "status",
                                    "unknown status '%s' (pending, running, succeeded, failed, "
                                    "dead, in_doubt)",
                                    status);
        return;
    }
    if (lim && cairn__cli_parse_long(lim, 0, UINT32_MAX, &limit)) {
        r->status = 400;
        r->body = cairn__http_error("invalid_request", "limit",
                                    "limit must be a whole number; 0 = no limit");
        return;
    }
    json_t *rows = json_array();
    char err[512] = "";
    if (store_lock(sv, r)) {
        json_decref(rows);
        return;
    }
    int rc = cairn_store_list(sv->s.store, status ? &st : NULL, sv->o->graph, (uint32_t)limit,
                              list_row, rows);
    if (rc)
        snprintf(err, sizeof err, "%s", cairn_store_errmsg(sv->s.store));
    pthread_mutex_unlock(&sv->store_mu);
    if (rc) {
        json_decref(rows);
        fail_with(r, rc, err);
        return;
    }
    r->status = 200;
    r->body = json_pack("{s:o}", "tasks", rows);
}

/* GET /metrics: the store's metrics (`stats --prometheus`'s) and the server's own counters */
static void get_metrics(void *user, const cairn__http_req *q, cairn__http_resp *r)
{
    (void)q;
    server *sv = user;
    char extra[1024];
    snprintf(extra, sizeof extra,
             "# TYPE cairn_serve_admitted gauge\n# HELP cairn_serve_admitted Tasks this server "
             "created (202) and requests that found their task (200), since it started.\n"
             "cairn_serve_admitted{result=\"created\"} %llu\n"
             "cairn_serve_admitted{result=\"existing\"} %llu\n"
             "# TYPE cairn_serve_refused gauge\n# HELP cairn_serve_refused Task requests "
             "answered with an error status, since the server started.\n"
             "cairn_serve_refused %llu\n"
             "# TYPE cairn_serve_workers gauge\n# HELP cairn_serve_workers The server's "
             "task runners (threads of its worker processes).\ncairn_serve_workers %zu\n"
             "# TYPE cairn_serve_worker_processes gauge\n# HELP cairn_serve_worker_processes "
             "The server's worker processes.\ncairn_serve_worker_processes %zu\n",
             (unsigned long long)atomic_load(&sv->n_created),
             (unsigned long long)atomic_load(&sv->n_existing),
             (unsigned long long)atomic_load(&sv->n_refused), sv->jobs, sv->n_workers);
    int rc;
    if (store_lock(sv, r))
        return;
    r->text = cairn__cli_metrics(sv->s.store, sv->o->map_max, extra, &rc);
    char err[512];
    snprintf(err, sizeof err, "%s", rc ? cairn_store_errmsg(sv->s.store) : "");
    pthread_mutex_unlock(&sv->store_mu);
    if (!r->text) {
        fail_with(r, rc, err);
        return;
    }
    r->status = 200;
    r->content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
}

static void get_health(void *user, const cairn__http_req *q, cairn__http_resp *r)
{
    (void)user, (void)q;
    r->status = 200;
    r->body = json_pack("{s:s}", "status", "ok");
}

static const cairn__http_route routes[] = {
    {"GET", "/metrics", 0, 0, get_metrics}, {"GET", "/health", 0, 0, get_health},
    {"POST", "/v1/tasks", 0, 1, post_task}, {"GET", "/v1/tasks", 0, 0, list_tasks},
    {"GET", "/v1/tasks/", 1, 0, get_task},
};

/* ------------------------------------------------------------------ the workers */

/* A worker process: its runners' threads and what wakes them. */
typedef struct wpool {
    const char *graph;
    sem_t wake; /* posted once per byte on the pipe, and once per runner at its end */
    atomic_int stop;
} wpool;

typedef struct wslot {
    wpool *p;
    cairn_runner *runner;
    pthread_t th;
    int started;
} wslot;

/* A runner's thread: runs due tasks of the graph until a stop, then sleeps until woken or half
 * a second has passed. */
static void *wslot_main(void *arg)
{
    wslot *w = arg;
    while (!atomic_load(&w->p->stop)) {
        uint32_t ran;
        int rc;
        do {
            ran = 0;
            rc = cairn_runner_retry(w->runner, w->p->graph, 1, 0, &ran, NULL, NULL);
        } while (!rc && ran);
        if (rc == CAIRN_EINTR) { /* a SIGTERM stopped every runner of the process */
            atomic_store(&w->p->stop, 1);
            break;
        }
        if (rc)
            cairn__log(CAIRN__LOG_ERROR, "serve", "worker_error", NULL, NULL, "worker %ld: %s (%s)",
                       (long)getpid(), cairn_runner_errmsg(w->runner), cairn_errname(rc));
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += 500000000L;
        if (until.tv_nsec >= 1000000000L)
            until.tv_sec++, until.tv_nsec -= 1000000000L;
        while (sem_clockwait(&w->p->wake, CLOCK_MONOTONIC, &until) != 0 && errno == EINTR)
            ;
    }
    return NULL;
}

/* A worker's life: `threads` runners on one store handle, each on a thread of its own, until
 * its pipe closes or a stop (a SIGTERM to this process alone, too: its runners say so). This
 * thread reads the pipe. Never returns. */
static void worker_main(int wake_fd, const cairn__cli_opts *o, cairn_graph *const *graphs, size_t n,
                        size_t threads)
{
    cairn__cli_session s;
    int rc = cairn__cli_session_open(&s, "serve", o, graphs, n, 1, 1);
    if (!rc && threads > 1)
        rc = cairn__cli_session_more(&s, "serve", o, graphs, n, threads - 1);
    wslot *sl = rc ? NULL : calloc(threads, sizeof *sl);
    wpool p = {.graph = o->graph};
    if (rc || !sl || sem_init(&p.wake, 0, 0) != 0) {
        cairn__cli_session_close(&s);
        _exit(cairn__exit_code(rc ? rc : CAIRN_ENOMEM));
    }
    size_t started = 0;
    for (size_t i = 0; i < threads; i++) {
        sl[i] = (wslot){.p = &p, .runner = i ? s.more[i - 1] : s.runner};
        int terr = pthread_create(&sl[i].th, NULL, wslot_main, &sl[i]); /* no errno of its own */
        sl[i].started = terr == 0;
        if (!sl[i].started) {
            cairn__log(CAIRN__LOG_ERROR, "serve", "worker_start", NULL, NULL,
                       "cannot start a worker thread: %s", strerror(terr));
            break;
        }
        started++;
    }
    for (char b[256]; started == threads && !atomic_load(&p.stop);) {
        struct pollfd pf = {.fd = wake_fd, .events = POLLIN};
        if (poll(&pf, 1, 500) <= 0) /* a timeout, or EINTR: is it a stop? */
            continue;
        ssize_t got = read(wake_fd, b, sizeof b);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break; /* the server closed it: stopping */
        for (ssize_t i = 0; i < got; i++)
            sem_post(&p.wake);
    }
    atomic_store(&p.stop, 1);
    for (size_t i = 0; i < threads; i++) {
        cairn_runner_stop(sl[i].runner); /* a running task stops as at a SIGTERM */
        sem_post(&p.wake);
    }
    for (size_t i = 0; i < threads; i++)
        if (sl[i].started)
            pthread_join(sl[i].th, NULL);
    free(sl);
    cairn__cli_session_close(&s);
    _exit(started == threads ? 0 : CAIRN__EX_SOFTWARE);
}

/* Closes every descriptor above stderr but keep (in a forked worker). */
static void close_others(int keep)
{
    if ((keep == 3 || close_range(3, (unsigned)keep - 1, 0) == 0) &&
        close_range((unsigned)keep + 1, ~0u, 0) == 0)
        return;
    long max = sysconf(_SC_OPEN_MAX); /* a kernel before 5.9: one by one */
    for (long fd = 3; fd < (max > 0 ? max : 1024); fd++)
        if (fd != keep)
            close((int)fd);
}

/* Forks worker i: pids[i] and the write end of its wake-up pipe. 0 or -1. The store must not be
 * open in this process (see the top): at start-up it is not yet, and a respawn closes it first. */
static int spawn_worker(server *sv, pid_t *pids, size_t i, const cairn__cli_opts *o,
                        cairn_graph *const *graphs, size_t n)
{
    pid_t parent = getpid();
    int p[2];
    if (pipe(p))
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]), close(p[1]);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a killed server takes its workers along */
        if (getppid() != parent)
            _exit(0);
        cairn__cli_stops_default(); /* as `run`'s, until its session sets the stops */
        cairn__cli_stops_close();
        /* nothing of the server but the wake-up pipe: a worker forked in place of one that ended
         * would otherwise hold the listening socket and the clients' connections open (their
         * close would not reach the client until this worker exited) */
        close_others(p[0]);
        worker_main(p[0], o, graphs, n, cairn__cli_worker_runners(o, i));
    }
    close(p[0]);
    fcntl(p[1], F_SETFD, FD_CLOEXEC);
    fcntl(p[1], F_SETFL, O_NONBLOCK);
    sv->nudge[i] = p[1];
    pids[i] = pid;
    return 0;
}

/* A worker that ended is replaced (a crashed step, an OOM kill): with the store closed for the
 * fork and opened again, under store_mu so no request sees it closed. A slot is refilled at
 * most once a second, so a worker that cannot start does not spin. 0, or the store's error
 * on reopening (the server must stop: the handlers answer 503 meanwhile). */
static int respawn(server *sv, pid_t *pids, double *last, const cairn__cli_opts *o,
                   cairn_graph *const *graphs, size_t n)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec + ts.tv_nsec / 1e9;
    int rc = 0, locked = 0;
    for (size_t i = 0; i < sv->n_workers && !rc; i++) {
        if (pids[i] > 0 || now - last[i] < 1.0)
            continue;
        if (!locked) {
            pthread_mutex_lock(&sv->store_mu);
            cairn__cli_session_close(&sv->s);
            locked = 1;
        }
        last[i] = now;
        if (spawn_worker(sv, pids, i, o, graphs, n))
            cairn__log(CAIRN__LOG_ERROR, "serve", "worker_start", NULL, NULL,
                       "cannot start a worker: %s", strerror(errno));
        else
            cairn__log(CAIRN__LOG_NOTE, "serve", "worker_start", NULL, NULL,
                       "worker %ld started in place of the one that ended", (long)pids[i]);
    }
    if (locked) {
        rc = cairn__cli_session_open(&sv->s, "serve", o, graphs, n, 1, 1);
        cairn__cli_stops_catch(); /* the session's handlers stop its runner; ours the server */
        sv->closed = rc != 0;
        pthread_mutex_unlock(&sv->store_mu);
    }
    return rc;
}

/* What the server looks after while it waits for a stop (cairn__cli_stops_wait's tick). */
typedef struct workers {
    server *sv;
    pid_t *pids;
    double *last;
    const cairn__cli_opts *o;
    cairn_graph *const *graphs;
    size_t n;
} workers;

/* Each second: the workers that ended are replaced. 0, or the exit code when the store cannot
 * be opened again (the server stops). */
static int look_after(void *arg)
{
    workers *w = arg;
    server *sv = w->sv;
    int status;
    pid_t dead;
    while ((dead = waitpid(-1, &status, WNOHANG)) > 0)
        for (size_t i = 0; i < sv->n_workers; i++)
            if (w->pids[i] == dead) {
                cairn__log(CAIRN__LOG_WARN, "serve", "worker_exit", NULL, NULL,
                           "worker %ld ended (%d); its replacement takes up its task", (long)dead,
                           WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
                w->pids[i] = 0;
                close(sv->nudge[i]);
                sv->nudge[i] = -1;
            }
    int rc = respawn(sv, w->pids, w->last, w->o, w->graphs, w->n);
    return rc ? cairn__exit_code(rc) : 0;
}

static int serve_main(const cairn__cli_opts *o, cairn_graph *const *graphs, size_t n)
{
    int rc;
    if (!o->tasks)
        return cairn__cli_usage_error("serve", serve_help,
                                      "--tasks is required (the task API is what serve serves)");
    if (!o->graph)
        return cairn__cli_usage_error("serve", serve_help, "--graph G is required");
    if ((rc = cairn__cli_tenant_usage("serve", serve_help, o)))
        return rc;
    const char *listen = o->listen ? o->listen : CAIRN__HTTP_LISTEN_DEFAULT;
    if ((rc = cairn__http_cmd_check("serve", serve_help, listen, o->token_file, "--token-file")))
        return rc;
    char err[4200];
    if ((rc = cairn__cli_check_graph(graphs, n, o->graph, err, sizeof err)) ||
        (rc = cairn__cli_preflight(o->graph, err, sizeof err)))
        return cairn__cli_fail("serve", rc, err);
    /* the store is created (or refused) before any fork, as consume does */
    server sv = {.o = o, .jobs = o->jobs ? o->jobs : 1, .n_workers = cairn__cli_workers(o)};
    rc = cairn__cli_session_open(&sv.s, "serve", o, graphs, n, 0, 0);
    cairn__cli_session_close(&sv.s);
    if (rc)
        return cairn__exit_code(rc);

    int x = CAIRN__EX_SOFTWARE;
    pid_t *pids = calloc(sv.n_workers, sizeof *pids);
    double *last = calloc(sv.n_workers, sizeof *last); /* each slot's last respawn */
    sv.nudge = malloc(sv.n_workers * sizeof *sv.nudge);
    sv.keys = calloc(KEYS_MAX, sizeof *sv.keys);
    cairn__http *http = NULL;
    pthread_mutex_init(&sv.store_mu, NULL);
    pthread_mutex_init(&sv.keys_mu, NULL);
    /* SIGPIPE ignored too: a client gone mid-response is libmicrohttpd's to see */
    int stop_fd = -1;
    if (!pids || !last || !sv.nudge || !sv.keys || (stop_fd = cairn__cli_stops_catch()) < 0) {
        cairn__log(CAIRN__LOG_ERROR, "serve", "error", NULL, NULL, "%s", strerror(errno));
        goto out;
    }
    for (size_t i = 0; i < sv.n_workers; i++)
        sv.nudge[i] = -1;
    for (size_t i = 0; i < sv.n_workers; i++)
        if (spawn_worker(&sv, pids, i, o, graphs, n)) {
            cairn__log(CAIRN__LOG_ERROR, "serve", "worker_start", NULL, NULL,
                       "cannot start a worker: %s", strerror(errno));
            goto stop;
        }
    if ((rc = cairn__cli_session_open(&sv.s, "serve", o, graphs, n, 1, 1))) {
        x = cairn__exit_code(rc);
        goto stop;
    }
    cairn__cli_stops_catch(); /* the session's handlers stop its runner; ours stop the server */
    cairn__http_conf hc = {.listen = listen,
                           .token_file = o->token_file,
                           .body_max = CAIRN__MAX_INPUT,
                           .threads = 4,
                           .routes = routes,
                           .n_routes = sizeof routes / sizeof *routes,
                           .user = &sv};
    char what[CAIRN_TASK_ID_MAX + 64];
    snprintf(what, sizeof what, "graph %s, %zu runner(s) in %zu worker process(es)", o->graph,
             sv.jobs, sv.n_workers);
    if ((x = cairn__http_cmd_start(&hc, "serve", what, &http)))
        goto stop;
    workers w = {&sv, pids, last, o, graphs, n};
    x = cairn__cli_stops_wait(stop_fd, 1000, look_after, &w); /* 0 at a stop */
stop:
    cairn__http_stop(http, 5.0); /* the answers being sent go out whole; none runs after */
    for (size_t i = 0; i < sv.n_workers; i++) {
        if (sv.nudge && sv.nudge[i] >= 0)
            close(sv.nudge[i]);
        if (pids && pids[i] > 0)
            kill(pids[i], SIGTERM); /* their runners stop as `run`'s does */
    }
    for (size_t i = 0; pids && i < sv.n_workers; i++)
        while (pids[i] > 0 && waitpid(pids[i], NULL, 0) < 0 && errno == EINTR)
            ;
    cairn__cli_session_close(&sv.s);
    cairn__cli_stops_default();
    cairn__log(CAIRN__LOG_NOTE, "serve", "stopped", NULL, NULL, "stopped");
out:
    cairn__cli_stops_close();
    pthread_mutex_destroy(&sv.store_mu);
    pthread_mutex_destroy(&sv.keys_mu);
    free(pids);
    free(last);
    free(sv.nudge);
    free(sv.keys);
    return x;
}

static const int serve_allowed[] = {
    CAIRN__O_TASKS,  CAIRN__O_GRAPH,      CAIRN__O_JOBS,          CAIRN__O_PROCESSES,
    CAIRN__O_LISTEN, CAIRN__O_TOKEN_FILE, CAIRN__O_WORKER_RUNNER, 0};
const cairn__cli_task cairn__task_serve = {"serve", serve_help, serve_allowed, 0, 1, serve_main};
