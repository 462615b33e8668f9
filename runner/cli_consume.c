/* runner/cli_consume.c - `consume`: a stream of tasks (JSON lines, or the lines kcat prints for a
 * Kafka topic), up to K at once, each with exactly `run`'s semantics.
 *
 * The design: K runners, on threads of P worker processes (--processes P, default 1), fed task
 * lines by this process over pipes. The threads of a worker share its one store handle, whose
 * writes that overlap commit in one transaction with one flush (group commit: store.c), which is
 * what makes K at once cheaper than K one after another; a worker's threads take whole jobs from
 * one pipe and answer on another. Every promise of `run` (idempotency, conflicts, message dedupe,
 * leases, tenant limits, retries) holds between runners of one process as between processes;
 * each task goes through cairn__cli_run_input, the very code of `run`. Steps run in-process on
 * those threads at once unless they have a timeout (then in each runner's step host, a process):
 * a custom graph whose untimed steps are not thread-safe takes --processes K, one runner each.
 * The parent opens the store once before forking (to create it, and to refuse a broken one before
 * anything is read), closes it, and never opens it again: a child forked while a store is open
 * must not use it. A worker lives for the whole stream, so what a step keeps per process (the llm
 * step's loaded model) is loaded once per worker, not once per task.
 *
 * Backpressure: the parent reads a line only when a worker is idle, so at most K lines are read
 * and unfinished. From a pipe it never reads past the line it wants (a buffered read would take
 * whatever the producer has written, beyond K lines): it peeks with tee(2) into a pipe of its
 * own, finds the newline there, and reads exactly that far; from another kind of stream (a
 * terminal, a socket) one byte at a time; from a regular file, where no producer waits, in large
 * chunks. Results are printed in completion order, one JSON line each, as each worker
 * sends it. A stop (SIGTERM, SIGINT, SIGHUP) ends the reading, is passed on to the workers
 * (their runners stop as `run`'s does: the running step ends, the lease is released, EINTR),
 * and the parent waits for every worker's last result. The lines not read yet are left to the
 * next start; those read again are deduped by the store (task IDs, message IDs).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fdio.h"
#include "common/json.h"
#include "common/str.h"
#include "runner/cli.h"

static const char consume_help[] =
    "usage: %P consume --graph G [--jobs K] [--processes P] [--format jsonl|kcat]\n"
    "         [--task-from F1,F2]\n"
    "         [--store DIR] [--tenant-field F --max-running-per-tenant N]\n"
    "         [--allow-graph-change] [--max-attempts N] [--lease-ms MS] [--inline-wait-ms MS]\n"
    "         [--nosync] [--map-max BYTES] [FILE|-]\n"
    "Reads a stream of tasks (FILE, or standard input) and runs up to K (default 1) at once,\n"
    "each exactly as `%P run` would, on K threads of P (default 1) worker processes that live\n"
    "for the whole stream; the writes of a worker's threads commit together (group commit).\n"
    "Steps without a timeout run on those threads at once: a graph whose untimed steps are not\n"
    "thread-safe needs --processes K (one runner a process).\n"
    "--format jsonl (default): each line is a task input, or {\"id\": ID, \"message_id\": M,\n"
    "\"input\": {...}} (an object with an object \"input\" and no keys but these three).\n"
    "--format kcat: the lines `kcat -C -f '%%t:%%p:%%o\\t%%s\\n'` prints: topic:partition:offset\n"
    "is the message ID, the payload the input; a redelivered message does not run again.\n"
    "The task ID is the line's \"id\", else derived as `%P run` derives it (--task-from, or\n"
    "the graph and the input's hash). Blank lines are skipped. At most K lines are read ahead.\n"
    "Prints one JSON line per line on stdout as its task ends: {line, message_id, task,\n"
    "status, attempt, exit, error, message}, exit as `%P run` would give it; a bad line\n"
    "(malformed JSON, bad ID) gets its own line with 65 and the stream goes on. A summary\n"
    "goes to stderr. SIGTERM/SIGINT stop the reading; running tasks stop as `run`'s do; a\n"
    "restart with the same stream finishes the rest (what ran is not run again).\n"
    "Exit: 0 every task succeeded; 75 some will succeed later (transient, busy, over the\n"
    "tenant limit, or the stream was interrupted); 69 some need an operator or a change\n"
    "(dead, in doubt, bad line, conflict 76); 74 store error; 64 usage; 66 FILE missing or\n"
    "unreadable.\n";

/* The longest line: a whole task input, with room for kcat's key or the envelope around it. */
#define LINE_MAX_BYTES (CAIRN__MAX_INPUT + 4096)

/* ------------------------------------------------------------------ reading lines */

/* Lines from a file descriptor; `chunk` bytes a read (1 for a stream: see the top), peek a pipe
 * of our own that tee(2) copies a pipe's unread bytes into (-1: none). */
typedef struct reader {
    int fd;
    size_t chunk;
    int peek[2];
    char *buf;
    size_t start, len, cap; /* the unread bytes are buf[start, len) */
    int eof;
    int skipping; /* inside a line that was too long: drop up to its newline */
} reader;

#define PEEK_MAX 65536 /* a pipe's default capacity: what one tee(2) copies at most */

/* One read(2). 1: bytes came (or EINTR: try again), 0: end of input, -1: error (errno). */
static int reader_fill(reader *r)
{
    size_t need = r->peek[0] >= 0 ? PEEK_MAX : r->chunk;
    if (r->start > 0 && r->start == r->len)
        r->start = r->len = 0;
    if (r->cap - r->len < need) {
        if (r->start > 0) {
            memmove(r->buf, r->buf + r->start, r->len - r->start);
            r->len -= r->start;
            r->start = 0;
        }
        if (r->cap - r->len < need) {
            size_t cap = r->cap ? r->cap * 2 : 65536;
            while (cap - r->len < need)
                cap *= 2;
            char *b = realloc(r->buf, cap);
            if (!b) {
                errno = ENOMEM;
                return -1;
            }
            r->buf = b;
            r->cap = cap;
        }
    }
    size_t want = r->chunk;
    if (r->peek[0] >= 0 && r->cap - r->len >= PEEK_MAX) {
        /* the unread bytes, copied but not taken: take them up to the first newline */
        ssize_t t = tee(r->fd, r->peek[1], PEEK_MAX, 0);
        if (t > 0) {
            ssize_t got = read(r->peek[0], r->buf + r->len, (size_t)t);
            if (got != t) { /* cannot happen (the pipe was empty and holds t bytes) */
                errno = EIO;
                return -1;
            }
            char *nl = memchr(r->buf + r->len, '\n', (size_t)t);
            want = nl ? (size_t)(nl - (r->buf + r->len)) + 1 : (size_t)t;
        } else if (t < 0 && errno != EINTR) {
            close(r->peek[0]), close(r->peek[1]); /* (not a pipe after all): byte by byte */
            r->peek[0] = r->peek[1] = -1;
        } else if (t < 0) {
            return 1;
        }
    }
    ssize_t n = read(r->fd, r->buf + r->len, want);
    if (n < 0)
        return errno == EINTR ? 1 : -1;
    if (n == 0) {
        r->eof = 1;
        return 0;
    }
    r->len += (size_t)n;
    return 1;
}

/* The next whole line (without its newline; the last one may lack it) into *line and *n, valid
 * until the next reader call: 1, or 2 for a line longer than LINE_MAX_BYTES (dropped), or 0
 * when the buffer holds no whole line yet. */
static int reader_line(reader *r, char **line, size_t *n)
{
    for (;;) {
        char *p = r->buf + r->start;
        size_t avail = r->len - r->start;
        char *nl = avail ? memchr(p, '\n', avail) : NULL;
        if (r->skipping) {
            r->start = nl ? (size_t)(nl + 1 - r->buf) : r->len;
            if (!nl)
                return 0;
            r->skipping = 0;
            continue;
        }
        if (!nl && avail > LINE_MAX_BYTES) {
            r->skipping = 1;
            return 2;
        }
        if (!nl && !(r->eof && avail))
            return 0;
        size_t l = nl ? (size_t)(nl - p) : avail;
        r->start += l + (nl ? 1 : 0);
        *line = p;
        *n = l;
        if (l > LINE_MAX_BYTES)
            return 2;
        return 1;
    }
}

/* ------------------------------------------------------------------ the workers */

/* A job on the pipe to a worker: this header, then the task ID, the message ID and the input
 * (the lengths say; 0 = none for the IDs). */
typedef struct job_head {
    long line;
    uint32_t task_len, mid_len, input_len;
} job_head;

/* A worker process: its threads share the store handle (whose writes then commit together:
 * group commit), the job pipe they take jobs from and the result pipe they answer on, one
 * whole job or line at a time. */
typedef struct pool {
    int job_fd, res_fd;
    pthread_mutex_t job_mu, res_mu;
    const cairn__cli_opts *o;
    cairn_store *store;
} pool;

typedef struct slot {
    pool *p;
    cairn_runner *runner;
    pthread_t th;
    int started, failed;
} slot;

/* The next job, whole, into h and the buffers (input malloc'd): 1, 0 at the pipe's end, -1. */
static int take_job(pool *p, job_head *h, char *task, size_t tcap, char *mid, size_t mcap,
                    char **input)
{
    *input = NULL;
    pthread_mutex_lock(&p->job_mu);
    int rc = cairn__read_all(p->job_fd, h, sizeof *h);
    if (rc == 1) {
        *input = malloc((size_t)h->input_len + 1);
        if (!*input || h->task_len >= tcap || h->mid_len >= mcap ||
            cairn__read_all(p->job_fd, task, h->task_len) < 0 ||
            cairn__read_all(p->job_fd, mid, h->mid_len) < 0 ||
            cairn__read_all(p->job_fd, *input, h->input_len) < 0)
            rc = -1;
    }
    pthread_mutex_unlock(&p->job_mu);
    if (rc != 1) {
        free(*input);
        *input = NULL;
        return rc < 0 ? -1 : 0;
    }
    task[h->task_len] = mid[h->mid_len] = (*input)[h->input_len] = 0;
    return 1;
}

/* A worker thread: runs each job it takes through `run`'s code, on its own runner, and sends
 * back one JSON line, until the job pipe ends. */
static void *slot_main(void *arg)
{
    slot *sl = arg;
    pool *p = sl->p;
    cairn__cli_session s = {.store = p->store, .runner = sl->runner};
    job_head h;
    char task[CAIRN_TASK_ID_MAX + 1], mid[CAIRN_TASK_ID_MAX + 1], *input;
    int got;
    while ((got = take_job(p, &h, task, sizeof task, mid, sizeof mid, &input)) == 1) {
        char id[CAIRN_TASK_ID_MAX + 1], msg[1200];
        int rc = cairn__cli_run_input(&s, p->o->graph, h.task_len ? task : NULL, p->o->task_from,
                                      input, h.input_len, h.mid_len ? mid : NULL, id, sizeof id,
                                      msg, sizeof msg);
        free(input);
        json_t *j = json_object();
        json_object_set_new(j, "line", json_integer(h.line));
        json_object_set_new(j, "message_id", h.mid_len ? json_string(mid) : json_null());
        char *out = json_dumps(cairn__cli_run_doc(j, s.store, id, rc, msg),
                               JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(j);
        pthread_mutex_lock(&p->res_mu);
        int bad = !out || cairn__write_all(p->res_fd, out, strlen(out)) ||
                  cairn__write_all(p->res_fd, "\n", 1);
        pthread_mutex_unlock(&p->res_mu);
        free(out);
        if (bad) {
            got = -1;
            break;
        }
    }
    sl->failed = got < 0;
    return NULL;
}

/* A worker process's life: `threads` runners on one store handle, each on a thread of its own
 * taking jobs from the pipe, until it ends. Never returns. */
static void worker_main(int job_fd, int res_fd, const cairn__cli_opts *o,
                        cairn_graph *const *graphs, size_t n, size_t threads)
{
    cairn__cli_session s;
    int rc = cairn__cli_session_open(&s, "consume", o, graphs, n, 1, 1);
    if (!rc && threads > 1)
        rc = cairn__cli_session_more(&s, "consume", o, graphs, n, threads - 1);
    slot *sl = rc ? NULL : calloc(threads, sizeof *sl);
    if (rc || !sl) {
        cairn__cli_session_close(&s);
        _exit(cairn__exit_code(rc ? rc : CAIRN_ENOMEM));
    }
    pool p = {.job_fd = job_fd, .res_fd = res_fd, .o = o, .store = s.store};
    pthread_mutex_init(&p.job_mu, NULL);
    pthread_mutex_init(&p.res_mu, NULL);
    int failed = 0;
    for (size_t i = 0; i < threads; i++) {
        sl[i] = (slot){.p = &p, .runner = i ? s.more[i - 1] : s.runner};
        int terr = pthread_create(&sl[i].th, NULL, slot_main, &sl[i]); /* its own code, no errno */
        sl[i].started = terr == 0;
        if (!sl[i].started) {
            cairn__log(CAIRN__LOG_ERROR, "consume", "worker_start", NULL, NULL,
                       "cannot start a worker thread: %s", strerror(terr));
            failed = 1;
            break;
        }
    }
    for (size_t i = 0; i < threads; i++)
        if (sl[i].started) {
            pthread_join(sl[i].th, NULL);
            failed |= sl[i].failed;
        }
    free(sl);
    cairn__cli_session_close(&s);
    _exit(failed ? CAIRN__EX_SOFTWARE : 0);
}

/* A line a worker runs (line 0: a free place). */
typedef struct running {
    long line;
    char mid[CAIRN_TASK_ID_MAX + 1];
} running;

typedef struct worker {
    pid_t pid;
    int job_fd, res_fd;     /* this side's ends; -1 once closed */
    size_t cap, busy;       /* its threads, and the lines they run */
    running *runs;          /* cap places */
    struct cairn__sbuf res; /* a result line not yet whole */
} worker;

/* Forks worker ws[i] (of n_ws), with ws[i].cap threads; the other workers' ends and the
 * parent's own descriptors are closed in it, so a job pipe's end is seen (EOF) when the parent
 * closes it. 0 or -1 (errno). */
static int spawn(worker *ws, size_t n_ws, size_t i, int in_fd, const cairn__cli_opts *o,
                 cairn_graph *const *graphs, size_t n)
{
    int jp[2], rp[2];
    if (!ws[i].runs && !(ws[i].runs = calloc(ws[i].cap, sizeof *ws[i].runs)))
        return -1;
    if (pipe(jp))
        return -1;
    if (pipe(rp)) {
        close(jp[0]);
        close(jp[1]);
        return -1;
    }
    fflush(NULL); /* nothing buffered is written twice */
    pid_t pid = fork();
    if (pid < 0) {
        close(jp[0]), close(jp[1]), close(rp[0]), close(rp[1]);
        return -1;
    }
    if (pid == 0) {
        cairn__cli_stops_default(); /* as `run`'s, until its session sets the stops */
        cairn__cli_stops_close();
        close(jp[1]);
        close(rp[0]);
        for (size_t k = 0; k < n_ws; k++) {
            if (k == i)
                continue;
            if (ws[k].job_fd >= 0)
                close(ws[k].job_fd);
            if (ws[k].res_fd >= 0)
                close(ws[k].res_fd);
        }
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) {
            dup2(devnull, STDIN_FILENO); /* the stream is the parent's */
            close(devnull);
        }
        if (in_fd != STDIN_FILENO)
            close(in_fd);
        worker_main(jp[0], rp[1], o, graphs, n, ws[i].cap);
    }
    close(jp[0]);
    close(rp[1]);
    fcntl(jp[1], F_SETFD, FD_CLOEXEC);
    fcntl(rp[0], F_SETFD, FD_CLOEXEC);
    ws[i].pid = pid;
    ws[i].job_fd = jp[1];
    ws[i].res_fd = rp[0];
    ws[i].busy = 0;
    memset(ws[i].runs, 0, ws[i].cap * sizeof *ws[i].runs);
    return 0;
}

/* ------------------------------------------------------------------ the stream */

/* What became of the lines, by the exit code each got. */
typedef struct tally {
    unsigned long lines, ok, later, operator_, bad, store;
} tally;

static void count(tally *t, int x)
{
    switch (x) {
    case CAIRN__EX_OK:
        t->ok++;
        break;
    case CAIRN__EX_TEMPFAIL:
        t->later++;
        break;
    case CAIRN__EX_IOERR:
        t->store++;
        break;
    case CAIRN__EX_DATAERR:
        t->bad++;
        t->operator_++;
        break;
    default:
        t->operator_++; /* dead, in doubt, a conflict: waiting will not help */
        break;
    }
}

/* Prints a result line (jansson's compact form has no newline in it) and flushes it, so a
 * reader of the stream sees each task as it ends. -1 when stdout is gone. */
static int put_result(const char *line, size_t n)
{
    fwrite(line, 1, n, stdout);
    fputc('\n', stdout);
    return fflush(stdout) ? -1 : 0;
}

/* A line that is not a task: its own result line, 65 (or what `code` maps to), and a word on
 * stderr. */
static int put_bad(tally *t, long line, const char *mid, int code, const char *msg)
{
    json_t *j = json_object();
    json_object_set_new(j, "line", json_integer(line));
    json_object_set_new(j, "message_id", mid && *mid ? json_string(mid) : json_null());
    char *s =
        json_dumps(cairn__cli_run_doc(j, NULL, "", code, msg), JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(j);
    cairn__log(CAIRN__LOG_ERROR, "consume", "bad_line", NULL, NULL, "%s (%s)", msg,
               cairn_errname(code));
    count(t, cairn__exit_code(code));
    int rc = s ? put_result(s, strlen(s)) : -1;
    free(s);
    return rc;
}

/* A job made from one line: the task ID ("" = derive), the message ID ("" = none) and the input
 * text, which is either the line's own bytes (`input` borrows them) or `owned`. */
typedef struct line_job {
    char task[CAIRN_TASK_ID_MAX + 1], mid[CAIRN_TASK_ID_MAX + 1];
    const char *input;
    size_t input_len;
    char *owned;
} line_job;

/* A string member of the envelope into buf (1..max bytes); -1 with err set otherwise. */
static int envelope_str(const json_t *env, const char *key, char *buf, size_t size, long line,
                        char *err, size_t errlen)
{
    const json_t *v = json_object_get(env, key);
    if (!v)
        return 0;
    if (!json_is_string(v) || !json_string_length(v) || json_string_length(v) >= size ||
        strlen(json_string_value(v)) != json_string_length(v)) {
        snprintf(err, errlen, "line %ld: \"%s\" must be a string of 1-%zu bytes", line, key,
                 size - 1);
        return -1;
    }
    memcpy(buf, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

/* Makes a job of a jsonl line: the input itself, or the envelope {id, message_id, input}.
 * 0, or a CAIRN_E* code with err naming the line. */
static int parse_jsonl(const char *p, size_t n, long line, line_job *job, char *err, size_t errlen)
{
    char src[48];
    snprintf(src, sizeof src, "line %ld", line);
    json_t *j = NULL;
    int rc = cairn__json_parse(p, n, src, &j, err, errlen);
    if (!rc)
        rc = cairn__json_check_object(j, src, err, errlen);
    if (rc) {
        json_decref(j);
        return rc;
    }
    const json_t *in = json_object_get(j, "input");
    size_t known = !!in + !!json_object_get(j, "id") + !!json_object_get(j, "message_id");
    if (!json_is_object(in) || known != json_object_size(j)) { /* not an envelope: the input */
        json_decref(j);
        job->input = p;
        job->input_len = n;
        return 0;
    }
    if (envelope_str(j, "id", job->task, sizeof job->task, line, err, errlen) ||
        envelope_str(j, "message_id", job->mid, sizeof job->mid, line, err, errlen)) {
        json_decref(j);
        return CAIRN_EJSON;
    }
    /* jansson writes a real with the 17 digits that give back the same double, so the task's
     * payload hash (RFC 8785, over the parsed values) is the one the line's own text gives */
    job->owned = json_dumps(in, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
    json_decref(j);
    if (!job->owned) {
        snprintf(err, errlen, "line %ld: out of memory", line);
        return CAIRN_ENOMEM;
    }
    job->input = job->owned;
    job->input_len = strlen(job->owned);
    return 0;
}

/* Makes a job of a kcat line, "topic:partition:offset<TAB>payload". */
static int parse_kcat(const char *p, size_t n, long line, line_job *job, char *err, size_t errlen)
{
    const char *tab = memchr(p, '\t', n);
    size_t klen = tab ? (size_t)(tab - p) : 0;
    /* the key: a topic (Kafka's names have no ':'), then two decimal numbers */
    size_t colons = 0, digits = 0;
    int shape = tab && klen < sizeof job->mid;
    for (size_t i = 0; shape && i < klen; i++) {
        if (p[i] == ':') {
            shape = colons == 0 ? i > 0 : digits > 0;
            colons++, digits = 0;
        } else if (colons > 0) {
            shape = p[i] >= '0' && p[i] <= '9';
            digits++;
        }
    }
    if (!shape || colons != 2 || !digits) {
        snprintf(err, errlen,
                 "line %ld: not kcat's 'topic:partition:offset<TAB>payload' "
                 "(-f '%%t:%%p:%%o\\t%%s\\n')",
                 line);
        return CAIRN_EJSON;
    }
    memcpy(job->mid, p, klen);
    job->mid[klen] = 0;
    job->input = tab + 1;
    job->input_len = n - klen - 1;
    return 0;
}

/* Sends a job to a worker with a thread free. -1 when that worker cannot take it (it died). */
static int send_job(worker *w, long line, const line_job *job)
{
    job_head h = {line, (uint32_t)strlen(job->task), (uint32_t)strlen(job->mid),
                  (uint32_t)job->input_len};
    if (cairn__write_all(w->job_fd, &h, sizeof h) ||
        cairn__write_all(w->job_fd, job->task, h.task_len) ||
        cairn__write_all(w->job_fd, job->mid, h.mid_len) ||
        cairn__write_all(w->job_fd, job->input, job->input_len))
        return -1;
    for (size_t i = 0; i < w->cap; i++)
        if (!w->runs[i].line) {
            w->runs[i].line = line;
            snprintf(w->runs[i].mid, sizeof w->runs[i].mid, "%s", job->mid);
            break;
        }
    w->busy++;
    return 0;
}

/* Everything the stream loop keeps. */
typedef struct stream {
    const cairn__cli_opts *o;
    cairn_graph *const *graphs;
    size_t n_graphs;
    int kcat;
    worker *ws;
    size_t n_ws, alive, busy;
    reader in;
    long line_no;
    int stopping, out_gone, read_err;
    int stop_fd; /* cairn__cli_stops_catch's */
    tally t;
    cairn__progress progress; /* on a terminal: the tally as it grows */
} stream;

/* The progress line from the tally; the bytes of a regular file read so far give the ETA. */
static void progress_tick(stream *st, int in_doubt)
{
    cairn__progress *p = &st->progress;
    if (!p->on)
        return;
    p->in_doubt += (uint64_t)in_doubt;
    p->done = st->t.ok;
    uint64_t failed = st->t.later + st->t.operator_ + st->t.store;
    p->failed = failed > p->in_doubt ? failed - p->in_doubt : 0;
    off_t at = p->bytes_total ? lseek(st->in.fd, 0, SEEK_CUR) : -1;
    if (at >= 0)
        p->bytes_done = (uint64_t)at;
    cairn__progress_tick(p, 0);
}

static worker *idle_worker(stream *st)
{
    for (size_t i = 0; i < st->n_ws; i++)
        if (st->ws[i].job_fd >= 0 && st->ws[i].busy < st->ws[i].cap)
            return &st->ws[i];
    return NULL;
}

/* Takes one line from the reader and hands it to a worker, or reports it: 1 a line was taken,
 * 0 none is whole yet. */
static int take_line(stream *st, worker *w)
{
    char *p;
    size_t n;
    int got = reader_line(&st->in, &p, &n);
    if (!got)
        return 0;
    st->line_no++;
    char err[1400];
    if (got == 2) {
        snprintf(err, sizeof err, "line %ld: longer than %u bytes", st->line_no,
                 (unsigned)LINE_MAX_BYTES);
        st->t.lines++;
        st->out_gone |= put_bad(&st->t, st->line_no, NULL, CAIRN_ETOOBIG, err) != 0;
        return 1;
    }
    if (n && p[n - 1] == '\r') /* a CRLF file */
        n--;
    size_t blank = 0;
    while (blank < n && strchr(" \t", p[blank]))
        blank++;
    if (blank == n)
        return 1;
    st->t.lines++;
    line_job job = {.input = NULL};
    int rc = st->kcat ? parse_kcat(p, n, st->line_no, &job, err, sizeof err)
                      : parse_jsonl(p, n, st->line_no, &job, err, sizeof err);
    if (!rc && send_job(w, st->line_no, &job)) {
        snprintf(err, sizeof err, "line %ld: the worker (pid %ld) is gone; not run", st->line_no,
                 (long)w->pid);
        rc = CAIRN_EINTR;
    }
    if (rc)
        st->out_gone |= put_bad(&st->t, st->line_no, job.mid, rc, err) != 0;
    else
        st->busy++;
    free(job.owned);
    return 1;
}

/* A worker whose result pipe ended: reaped, and the lines it ran (if any) reported as ended
 * without a result: their tasks, if they started, are left to `retry` (a dead owner's lease is
 * taken over at once). One that died in a task (a step that crashed it, the OOM killer) is
 * replaced, so a long-lived consumer keeps its K; one that ended with no task could not start,
 * and would not start again. */
static void worker_ended(stream *st, worker *w)
{
    int status = 0;
    if (w->job_fd >= 0)
        close(w->job_fd);
    close(w->res_fd);
    w->job_fd = w->res_fd = -1;
    while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR)
        ;
    st->alive--;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    free(w->res.p);
    w->res = (struct cairn__sbuf){0};
    if (w->busy) {
        for (size_t i = 0; i < w->cap; i++) {
            running *r = &w->runs[i];
            if (!r->line)
                continue;
            char err[300];
            snprintf(err, sizeof err,
                     "line %ld: the worker (pid %ld) ended (%d) before its task did; `%s retry` "
                     "takes the task up",
                     r->line, (long)w->pid, code, cairn__cli_prog);
            st->out_gone |= put_bad(&st->t, r->line, r->mid, CAIRN_EINTR, err) != 0;
            r->line = 0;
        }
        st->busy -= w->busy;
        w->busy = 0;
        if (!st->stopping && !st->out_gone && !st->in.eof) {
            if (spawn(st->ws, st->n_ws, (size_t)(w - st->ws), st->in.fd, st->o, st->graphs,
                      st->n_graphs) == 0)
                st->alive++;
            else
                cairn__log(CAIRN__LOG_ERROR, "consume", "worker_start", NULL, NULL,
                           "cannot start a worker: %s", strerror(errno));
        }
    } else if (code && !st->stopping && !st->in.eof) {
        /* it could not start (its reason is on stderr): the stream is not consumed */
        cairn__log(CAIRN__LOG_ERROR, "consume", "worker_exit", NULL, NULL,
                   "worker %ld ended with %d before the stream did", (long)w->pid, code);
        count(&st->t, code == CAIRN__EX_IOERR ? code : CAIRN__EX_TEMPFAIL);
    }
}

/* Reads what worker w sent: each whole line is a result, printed as it is, and frees the place
 * of the line it names. */
static void worker_read(stream *st, worker *w)
{
    char buf[65536];
    ssize_t n = read(w->res_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
        return;
    if (n <= 0) {
        worker_ended(st, w);
        return;
    }
    cairn__sb_put(&w->res, buf, (size_t)n);
    char *nl;
    while (w->res.p && (nl = memchr(w->res.p, '\n', w->res.len))) {
        size_t l = (size_t)(nl - w->res.p);
        json_t *j = json_loadb(w->res.p, l, 0, NULL);
        int x = j ? (int)json_integer_value(json_object_get(j, "exit")) : CAIRN__EX_SOFTWARE;
        long line = j ? (long)json_integer_value(json_object_get(j, "line")) : 0;
        const char *error = json_string_value(json_object_get(j, "error"));
        if (x && j) {
            const char *task = json_string_value(json_object_get(j, "task"));
            cairn__log(CAIRN__LOG_ERROR, "consume", "task_error", task, NULL,
                       "line %ld: %s%s%s (%s)", line, task ? task : "", task ? ": " : "",
                       json_string_value(json_object_get(j, "message")), error);
        }
        int in_doubt = error && !strcmp(error, "CAIRN_EINDOUBT");
        json_decref(j);
        count(&st->t, x);
        progress_tick(st, in_doubt);
        st->out_gone |= put_result(w->res.p, l) != 0;
        memmove(w->res.p, nl + 1, w->res.len - l - 1);
        w->res.len -= l + 1;
        size_t k = 0; /* the place of its line (a line not found: a place, so the count holds) */
        while (k + 1 < w->cap && w->runs[k].line != line)
            k++;
        if (w->runs[k].line != line)
            for (k = 0; k + 1 < w->cap && !w->runs[k].line; k++)
                ;
        w->runs[k].line = 0;
        if (w->busy) {
            w->busy--;
            st->busy--;
        }
    }
}

/* Ends the reading: no worker gets another job; those running finish theirs and exit. */
static void close_jobs(stream *st)
{
    for (size_t i = 0; i < st->n_ws; i++)
        if (st->ws[i].job_fd >= 0) {
            close(st->ws[i].job_fd);
            st->ws[i].job_fd = -1;
        }
}

static void stream_loop(stream *st)
{
    for (;;) {
        worker *w;
        while (!st->stopping && !st->out_gone && (w = idle_worker(st)) && take_line(st, w))
            ;
        /* the reading is over at a stop, or once every byte read is a line taken */
        int over = st->stopping || st->out_gone || !st->alive ||
                   (st->in.eof && st->in.start == st->in.len);
        int reading = !over && !st->in.eof && idle_worker(st) != NULL;
        if (over)
            close_jobs(st);
        if (over && st->alive == 0)
            return;
        struct pollfd pf[2 + CAIRN__JOBS_MAX];
        size_t np = 0, widx[CAIRN__JOBS_MAX];
        pf[np++] = (struct pollfd){.fd = st->stop_fd, .events = POLLIN};
        if (reading)
            pf[np++] = (struct pollfd){.fd = st->in.fd, .events = POLLIN};
        size_t first_w = np;
        for (size_t i = 0; i < st->n_ws; i++)
            if (st->ws[i].res_fd >= 0) {
                widx[np - first_w] = i;
                pf[np++] = (struct pollfd){.fd = st->ws[i].res_fd, .events = POLLIN};
            }
        if (poll(pf, np, -1) < 0) {
            if (errno == EINTR)
                continue;
            cairn__log(CAIRN__LOG_ERROR, "consume", "error", NULL, NULL, "poll: %s",
                       strerror(errno));
            st->stopping = 1;
            continue;
        }
        if (pf[0].revents) {
            char b[64];
            ssize_t r = read(st->stop_fd, b, sizeof b);
            (void)r;
            if (!st->stopping)
                for (size_t i = 0; i < st->n_ws; i++)
                    if (st->ws[i].res_fd >= 0)
                        kill(st->ws[i].pid, SIGTERM); /* their runners stop as `run`'s does */
            st->stopping = 1;
        }
        if (reading && pf[1].revents && reader_fill(&st->in) < 0) {
            cairn__log(CAIRN__LOG_ERROR, "consume", "read_error", NULL, NULL,
                       "reading the stream: %s", strerror(errno));
            st->in.eof = 1;
            st->read_err = 1; /* the user's stream, not the store: 66 */
        }
        for (size_t k = first_w; k < np; k++)
            if (pf[k].revents)
                worker_read(st, &st->ws[widx[k - first_w]]);
    }
}

static int consume_main(const cairn__cli_opts *o, cairn_graph *const *graphs, size_t n)
{
    int rc;
    if (!o->graph)
        return cairn__cli_usage_error("consume", consume_help, "--graph G is required");
    if ((rc = cairn__cli_tenant_usage("consume", consume_help, o)))
        return rc;
    const char *fmt = o->format ? o->format : "jsonl";
    if (strcmp(fmt, "jsonl") && strcmp(fmt, "kcat"))
        return cairn__cli_usage_error("consume", consume_help,
                                      "invalid value '%s' for --format (jsonl or kcat)", fmt);
    char err[4200];
    if ((rc = cairn__cli_check_graph(graphs, n, o->graph, err, sizeof err)) ||
        (rc = cairn__cli_preflight(o->graph, err, sizeof err)))
        return cairn__cli_fail("consume", rc, err);
    const char *path = o->input && strcmp(o->input, "-") ? o->input : NULL;
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : STDIN_FILENO;
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) || S_ISDIR(sb.st_mode)) {
        snprintf(err, sizeof err, "%s: %s", path ? path : "<stdin>",
                 fd < 0 ? strerror(errno) : "is a directory");
        if (fd >= 0 && fd != STDIN_FILENO)
            close(fd);
        return cairn__cli_fail("consume", CAIRN_ENOENT, err);
    }
    /* the store is opened (created) and closed here, before any fork: see the top */
    cairn__cli_session s;
    rc = cairn__cli_session_open(&s, "consume", o, graphs, n, 0, 0);
    cairn__cli_session_close(&s);
    if (rc) {
        if (fd != STDIN_FILENO)
            close(fd);
        return cairn__exit_code(rc);
    }

    stream st = {.o = o, .graphs = graphs, .n_graphs = n, .kcat = !strcmp(fmt, "kcat")};
    st.in = (reader){.fd = fd, .chunk = S_ISREG(sb.st_mode) ? 65536 : 1, .peek = {-1, -1}};
    if (S_ISFIFO(sb.st_mode) && pipe2(st.in.peek, O_CLOEXEC) != 0)
        st.in.peek[0] = st.in.peek[1] = -1; /* byte by byte, then */
    st.n_ws = cairn__cli_workers(o);
    st.ws = calloc(st.n_ws, sizeof *st.ws);
    for (size_t i = 0; st.ws && i < st.n_ws; i++)
        st.ws[i].cap = cairn__cli_worker_runners(o, i);
    int x = CAIRN__EX_SOFTWARE;
    /* a worker gone is seen on its pipe, stdout on fflush */
    if (!st.ws || (st.stop_fd = cairn__cli_stops_catch()) < 0) {
        cairn__log(CAIRN__LOG_ERROR, "consume", "error", NULL, NULL, "%s", strerror(errno));
        goto out;
    }
    for (size_t i = 0; i < st.n_ws; i++)
        st.ws[i].job_fd = st.ws[i].res_fd = -1;
    for (size_t i = 0; i < st.n_ws; i++, st.alive++)
        if (spawn(st.ws, st.n_ws, i, fd, o, graphs, n)) {
            cairn__log(CAIRN__LOG_ERROR, "consume", "worker_start", NULL, NULL,
                       "cannot start a worker: %s", strerror(errno));
            st.stopping = 1;
            break;
        }

    cairn__progress_start(&st.progress, "consume", NULL);
    if (S_ISREG(sb.st_mode))
        st.progress.bytes_total = (uint64_t)sb.st_size;
    stream_loop(&st);
    cairn__progress_end(&st.progress);

    const tally *t = &st.t;
    int interrupted = st.stopping || st.out_gone || st.read_err || (!st.in.eof && !st.alive);
    if (st.out_gone)
        cairn__log(CAIRN__LOG_ERROR, "consume", "stdout_gone", NULL, NULL,
                   "standard output is gone: stopped");
    cairn__log(CAIRN__LOG_NOTE, "consume", "summary", NULL, NULL,
               "%lu line(s): %lu succeeded, %lu to retry later, %lu need an operator or a change "
               "(%lu bad line(s)), %lu store error(s)%s",
               t->lines, t->ok, t->later, t->operator_, t->bad, t->store,
               interrupted ? "; stopped before the end of the stream" : "");
    x = t->store                  ? CAIRN__EX_IOERR
        : st.read_err             ? CAIRN__EX_NOINPUT
        : t->operator_            ? CAIRN__EX_UNAVAILABLE
        : t->later || interrupted ? CAIRN__EX_TEMPFAIL
                                  : CAIRN__EX_OK;
    cairn__cli_stops_default();
out:
    cairn__cli_stops_close();
    for (size_t i = 0; st.ws && i < st.n_ws; i++) {
        free(st.ws[i].res.p);
        free(st.ws[i].runs);
    }
    free(st.ws);
    free(st.in.buf);
    if (st.in.peek[0] >= 0)
        close(st.in.peek[0]), close(st.in.peek[1]);
    if (fd != STDIN_FILENO)
        close(fd);
    return x;
}

static const int consume_allowed[] = {CAIRN__O_GRAPH,
                                      CAIRN__O_TASK_FROM,
                                      CAIRN__O_JOBS,
                                      CAIRN__O_PROCESSES,
                                      CAIRN__O_FORMAT,
                                      CAIRN__O_WORKER_RUNNER,
                                      0};
const cairn__cli_task cairn__task_consume = {
    "consume", consume_help, consume_allowed, CAIRN__TAKES_FILE, 1, consume_main};
