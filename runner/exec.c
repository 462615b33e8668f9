/* runner/exec.c - what a step sees (cairn_ctx) and how it is run.
 *
 * A step runs either in-process or, when it has a hard timeout, in a child process that the
 * runner kills with SIGKILL at the deadline: a step that hangs in a system call or a GPU kernel
 * cannot be asked to stop, only stopped. The child is the runner's step host, forked once and
 * sent one invocation after another (below, "the step host"). It never touches the store (LMDB
 * forbids using an environment across fork); it sends frames to the parent over a socket:
 *     'P' len bytes     save this progress record (the parent commits it)
 *     'R' result retry_after errlen outlen err out   the step's result
 * (u32 fields; each frame is one writev, its fixed fields read at once)
 * The parent commits progress as it arrives and renews the lease while it waits, so a long
 * isolated step keeps its lease however long it runs.
 *
 * An in-process step that may run long (one marked expensive, or an effect) gets a heartbeat: the
 * runner's one heartbeat thread (made at the first such step) ticks every lease_ms/3 while such
 * steps come and renews the lease of the one running at a tick, so a healthy owner keeps its task
 * and a stopped or hung process (whose threads all stop) loses it at expiry. The step's own
 * progress saves and the heartbeat share the store handle under the heartbeat's mutex. Other
 * in-process steps get none (a thread per step would cost more than a fast step): one of those
 * that runs past the lease without saving progress can be taken over.
 */
#include <errno.h>
#include <openssl/rand.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/fdio.h"
#include "common/hash.h"
#include "common/lock.h"
#include "runner/internal.h"

/* ------------------------------------------------------------------ ctx accessors */

const char *cairn_ctx_task_id(const cairn_ctx *c) { return c->task_id; }
const char *cairn_ctx_step_name(const cairn_ctx *c) { return c->step->name; }
uint32_t cairn_ctx_generation(const cairn_ctx *c) { return c->generation; }
uint32_t cairn_ctx_invocation(const cairn_ctx *c) { return c->invocation; }
uint32_t cairn_ctx_attempt(const cairn_ctx *c) { return c->attempt; }
const char *cairn_ctx_delivery_id(const cairn_ctx *c) { return cairn__delivery_id((cairn_ctx *)c); }

/* "dlv_" + the first 16 bytes, in hex, of SHA-256 over what names the delivery intent: the
 * store's random ID, the task (ID, payload hash, creation time), the step and the generation,
 * each ended by \0. A redelivery of the same intent (another attempt, a call again after a
 * crash) gets the same ID, so a receiver that deduplicates drops it; the same task ID in
 * another store, or made again after gc (whatever its payload), gets another, so a receiver
 * never drops a different message as a repeat. Derived on first use: compute steps rarely ask,
 * and hashing costs more than their commit. */
const char *cairn__delivery_id(cairn_ctx *c)
{
    if (c->delivery_id[0])
        return c->delivery_id;
    char buf[sizeof c->store_id + sizeof c->payload_hash + 24 + CAIRN__ID_MAX + CAIRN__NAME_MAX +
             16];
    size_t tl = strlen(c->task_id), sl = strlen(c->step->name), n = 0;
    memcpy(buf, c->store_id, sizeof c->store_id), n += sizeof c->store_id, buf[n++] = 0;
    n += (size_t)snprintf(buf + n, sizeof buf - n, "%s", c->payload_hash), buf[n++] = 0;
    n += (size_t)snprintf(buf + n, sizeof buf - n, "%lld", (long long)c->created_ms), buf[n++] = 0;
    memcpy(buf + n, c->task_id, tl), n += tl, buf[n++] = 0;
    memcpy(buf + n, c->step->name, sl), n += sl, buf[n++] = 0;
    n += (size_t)snprintf(buf + n, sizeof buf - n, "%u", c->generation);
    unsigned char h[32];
    char *out = c->delivery_id;
    memcpy(out, "dlv_", 4);
    cairn__sha256(buf, n, h); /* zero on failure, as before */
    cairn__hex(h, 16, out + 4);
    return out;
}
const msgpack_object *cairn_ctx_input(const cairn_ctx *c) { return &c->input.data; }
int cairn_ctx_stopping(const cairn_ctx *c)
{
    return c->r->stop != 0 || (c->hb && atomic_load(&c->hb->lost));
}
void cairn_ctx_set_retry_after(cairn_ctx *c, uint32_t ms)
{
    if (c)
        c->retry_after_ms = ms;
}

const msgpack_object *cairn_ctx_dep(const cairn_ctx *c, const char *step)
{
    static const msgpack_object nil = {.type = MSGPACK_OBJECT_NIL};
    for (size_t i = 0; step && i < c->n_deps; i++)
        if (strcmp(c->deps[i].name, step) == 0)
            return c->deps[i].present ? &c->deps[i].u.data : &nil;
    return NULL;
}

const msgpack_object *cairn_ctx_progress(const cairn_ctx *c)
{
    return c->has_progress ? &c->progress.data : NULL;
}

/* Checks that `bytes` hold exactly one msgpack object. */
static int one_object(const void *bytes, size_t len)
{
    msgpack_unpacked u;
    size_t off = 0;
    msgpack_unpacked_init(&u);
    int ok = msgpack_unpack_next(&u, bytes, len, &off) == MSGPACK_UNPACK_SUCCESS && off == len;
    msgpack_unpacked_destroy(&u);
    return ok;
}

int cairn_ctx_set_output(cairn_ctx *c, const void *bytes, size_t len)
{
    if (!c || (len && !bytes) || (len && !one_object(bytes, len)))
        return CAIRN_EINVAL;
    msgpack_sbuffer_clear(&c->out);
    if (len && msgpack_sbuffer_write(&c->out, bytes, len) != 0)
        return CAIRN_ENOMEM;
    c->out_set = 1;
    return 0;
}

msgpack_packer *cairn_ctx_packer(cairn_ctx *c)
{
    msgpack_sbuffer_clear(&c->out);
    c->out_set = 1;
    return &c->pk;
}

void cairn_ctx_set_error(cairn_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
}

int cairn_ctx_save_progress(cairn_ctx *c, const void *bytes, size_t len)
{
    if (!c || !bytes || len == 0 || !one_object(bytes, len))
        return CAIRN_EINVAL;
    if (len > (1u << 20))
        return CAIRN_ETOOBIG;
    if (c->r->stop)
        return CAIRN_EINTR;
    if (c->child_fd >= 0) {
        unsigned char hdr[5] = {'P'};
        uint32_t n = (uint32_t)len;
        memcpy(hdr + 1, &n, 4);
        struct iovec iov[2] = {{hdr, sizeof hdr}, {(void *)bytes, len}};
        if (cairn__writev_all(c->child_fd, iov, 2))
            return CAIRN_EIO;
        return 0;
    }
    if (c->hb)
        pthread_mutex_lock(&c->hb->mu);
    int rc = cairn__commit_progress(c, bytes, len);
    if (c->hb)
        pthread_mutex_unlock(&c->hb->mu);
    return rc;
}

/* ------------------------------------------------------------------ heartbeat */

/* The thread ticks once a third of the lease while steps come, renewing the lease of the one
 * running at a tick (a step that began since the last tick has at least that third left), and
 * sleeps untimed once a whole tick passed with no step. So a stream of short steps never wakes
 * it: a wake at each step's start and end cost two context switches a step. */
static void *heartbeat_main(void *arg)
{
    cairn__heartbeat *hb = arg;
    uint64_t seen = 0; /* hb->turn at the last tick */
    pthread_mutex_lock(&hb->mu);
    while (!hb->quit) {
        if (!hb->ctx && hb->turn == seen) { /* no step since the last tick */
            hb->idle = 1;
            pthread_cond_wait(&hb->cv, &hb->mu);
            hb->idle = 0;
            continue;
        }
        seen = hb->turn;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += hb->period_ms / 1000;
        until.tv_nsec += (long)(hb->period_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L)
            until.tv_sec++, until.tv_nsec -= 1000000000L;
        int w = 0;
        while (!hb->quit && w != ETIMEDOUT)
            w = pthread_cond_timedwait(&hb->cv, &hb->mu, &until);
        if (!hb->quit && hb->ctx && cairn__renew_lease(hb->ctx) == CAIRN_EBUSY)
            atomic_store(&hb->lost, 1); /* someone else owns the task now */
    }
    pthread_mutex_unlock(&hb->mu);
    return NULL;
}

/* Starts the heartbeat for an in-process step; 0 if it could not (the step then runs without,
 * as any in-process step would). The runner's one heartbeat thread is made the first time
 * (a thread per step cost two clone(2)s a task); signals stay with the runner's thread. */
static int heartbeat_start(cairn_ctx *c)
{
    cairn_runner *r = c->r;
    if (!r->hb) {
        cairn__heartbeat *hb = calloc(1, sizeof *hb);
        pthread_condattr_t ca;
        if (!hb || pthread_condattr_init(&ca) != 0) {
            free(hb);
            return 0;
        }
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        int ok = pthread_mutex_init(&hb->mu, NULL) == 0;
        if (ok && pthread_cond_init(&hb->cv, &ca) != 0) {
            pthread_mutex_destroy(&hb->mu);
            ok = 0;
        }
        pthread_condattr_destroy(&ca);
        if (!ok) {
            free(hb);
            return 0;
        }
        r->hb = hb;
    }
    cairn__heartbeat *hb = r->hb;
    if (hb->started && hb->pid != getpid())
        return 0; /* a forked child: the thread is its parent's */
    if (!hb->started) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        hb->started = pthread_create(&hb->th, NULL, heartbeat_main, hb) == 0;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        hb->pid = getpid();
        if (!hb->started)
            return 0;
    }
    pthread_mutex_lock(&hb->mu);
    hb->ctx = c;
    hb->turn++;
    hb->period_ms = r->lease_ms / 3 ? r->lease_ms / 3 : 1;
    atomic_store(&hb->lost, 0);
    if (hb->idle) /* else it is ticking already */
        pthread_cond_signal(&hb->cv);
    pthread_mutex_unlock(&hb->mu);
    c->hb = hb;
    return 1;
}

/* Ends the step's heartbeat: once the mutex is ours no renewal is under way (the thread is not
 * woken: its next tick finds no step). */
static void heartbeat_stop(cairn_ctx *c)
{
    cairn__heartbeat *hb = c->hb;
    pthread_mutex_lock(&hb->mu);
    hb->ctx = NULL;
    pthread_mutex_unlock(&hb->mu);
    c->hb = NULL;
}

void cairn__heartbeat_free(cairn_runner *r)
{
    cairn__heartbeat *hb = r->hb;
    if (!hb)
        return;
    if (hb->started && hb->pid == getpid()) {
        pthread_mutex_lock(&hb->mu);
        hb->quit = 1;
        pthread_cond_signal(&hb->cv);
        pthread_mutex_unlock(&hb->mu);
        pthread_join(hb->th, NULL);
    }
    pthread_cond_destroy(&hb->cv);
    pthread_mutex_destroy(&hb->mu);
    free(hb);
    r->hb = NULL;
}

/* ------------------------------------------------------------------ execution */

void cairn__outcome_free(cairn__outcome *o)
{
    free(o->out);
    o->out = NULL;
}

static int take_output(cairn_ctx *c, cairn__outcome *o)
{
    o->out = NULL;
    o->out_len = 0;
    o->retry_after_ms = c->retry_after_ms;
    snprintf(o->err, sizeof o->err, "%s", c->err);
    if (c->out_set && c->out.size) { /* the buffer moves to the outcome, uncopied */
        o->out_len = c->out.size;
        o->out = msgpack_sbuffer_release(&c->out);
    }
    return 0;
}

/* Forks and in-process step calls exclude each other across the threads of a process: a step
 * host forked while another thread's step has a file open would inherit that open file, and
 * with it any flock() the step holds, keeping the lock after the step closes its copy (every
 * other taker of the lock then waits for a host that never lets go). So a fork waits for the
 * steps running in-process to return, and new ones wait for the fork, just as when one thread
 * ran them all. Writers first, so a stream of fast steps cannot starve a spawn; a step that
 * itself runs a task on another runner (and so may fork) is already inside and does not wait. */
static pthread_rwlock_t fork_rw;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static _Thread_local int in_step;

static void fork_rw_init(void) { cairn__rwlock_init_writers_first(&fork_rw); }

static void step_enter(void)
{
    pthread_once(&fork_once, fork_rw_init);
    if (in_step++ == 0)
        pthread_rwlock_rdlock(&fork_rw);
}

static void step_leave(void)
{
    if (--in_step == 0)
        pthread_rwlock_unlock(&fork_rw);
}

static cairn_step_result call(cairn_ctx *c, int probe)
{
    cairn_step *s = (cairn_step *)c->step;
    if (probe) {
        step_enter();
        cairn_probe_result p = s->probe(c, s->user);
        step_leave();
        switch (p) {
        case CAIRN_PROBE_DONE:
            return CAIRN_STEP_OK;
        case CAIRN_PROBE_NOT_DONE:
            return CAIRN_STEP_TRANSIENT;
        default:
            return CAIRN_STEP_UNKNOWN;
        }
    }
    step_enter();
    cairn_step_result res = s->fn(c, s->user);
    step_leave();
    if (res == CAIRN_STEP_OK && c->out_set && c->out.size &&
        !one_object(c->out.data, c->out.size)) {
        snprintf(c->err, sizeof c->err, "step '%s' produced output that is not one msgpack object",
                 s->name);
        res = CAIRN_STEP_PERMANENT;
    }
    if ((unsigned)res > CAIRN_STEP_UNKNOWN) {
        snprintf(c->err, sizeof c->err, "step '%s' returned invalid result %d", s->name, (int)res);
        res = CAIRN_STEP_PERMANENT;
    }
    return res;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------------ the step host
 *
 * Forking a child for every invocation cost more than the steps it isolated: fork(2) copies the
 * page tables of a process that maps the whole store, and the child then set up again whatever
 * a library builds on first use. So the runner forks one child, its step host, at its first
 * step with a timeout, and sends it every later invocation over a socket pair:
 *     'S' len   probe graph step generation invocation attempt created_ms store_id
 *               payload_hash task input has_progress progress {present dep}*
 * (u32 fields, byte strings as u32 length + bytes; the deps in the step's order). The host
 * answers with the frames above ('P' progress, 'R' the result) and waits for the next. It finds
 * the step by the graph's index in the runner and the step's index in the graph: graphs are
 * registered before the runner opens and frozen, so the host's copy of them is the runner's.
 * Whatever stops a step (its deadline, a stop, a lost lease) stops its host: SIGKILL, reaped,
 * and the next invocation forks another; so does a host that crashed or exited, and one that
 * has run child_reuse invocations. An idle host ignores SIGTERM, SIGHUP and SIGINT (the runner
 * decides); during a step it takes them as the step's delivery says, as a child per step did.
 * It dies with the thread that forked it (PR_SET_PDEATHSIG), so a runner used from another
 * thread forks its own first. */
typedef struct cairn__host {
    pid_t pid;     /* 0: none */
    pid_t owner;   /* the process that forked it */
    pid_t tid;     /* the thread that forked it */
    int fd;        /* the runner's end of the socket pair */
    uint32_t uses; /* invocations sent to it */
} cairn__host;

typedef struct {
    const char *p;
    size_t n;
} host_rd;

static int rd_take(host_rd *r, void *dst, size_t n)
{
    if (r->n < n)
        return -1;
    memcpy(dst, r->p, n);
    r->p += n, r->n -= n;
    return 0;
}

static int rd_bytes(host_rd *r, const char **p, uint32_t *n)
{
    if (rd_take(r, n, 4) || r->n < *n)
        return -1;
    *p = r->p;
    r->p += *n, r->n -= *n;
    return 0;
}

static int rd_object(host_rd *r, msgpack_unpacked *u)
{
    const char *p;
    uint32_t n;
    size_t off = 0;
    msgpack_unpacked_init(u);
    return rd_bytes(r, &p, &n) || msgpack_unpack_next(u, p, n, &off) != MSGPACK_UNPACK_SUCCESS ? -1
                                                                                               : 0;
}

static int put_u32(msgpack_sbuffer *b, uint32_t v)
{
    return msgpack_sbuffer_write(b, (const char *)&v, 4);
}

static int put_bytes(msgpack_sbuffer *b, const void *p, size_t n)
{
    return put_u32(b, (uint32_t)n) || (n && msgpack_sbuffer_write(b, p, n));
}

/* The request for c's invocation, after its 'S' and length. */
static int host_request(const cairn_ctx *c, int probe, msgpack_sbuffer *b)
{
    cairn_runner *r = c->r;
    uint32_t gi = 0;
    while (gi < r->n_graphs && r->graphs[gi] != c->step->graph)
        gi++;
    if (gi == r->n_graphs)
        return CAIRN_EINVAL; /* a step of no registered graph: cannot be */
    int rc = msgpack_sbuffer_write(b, "S", 1) || put_u32(b, 0) || put_u32(b, (uint32_t)probe) ||
             put_u32(b, gi) || put_u32(b, (uint32_t)c->step->index) || put_u32(b, c->generation) ||
             put_u32(b, c->invocation) || put_u32(b, c->attempt) ||
             msgpack_sbuffer_write(b, (const char *)&c->created_ms, 8) ||
             msgpack_sbuffer_write(b, (const char *)c->store_id, sizeof c->store_id) ||
             msgpack_sbuffer_write(b, c->payload_hash, sizeof c->payload_hash) ||
             put_bytes(b, c->task_id, strlen(c->task_id) + 1) ||
             put_bytes(b, c->input_bytes, c->input_len) || put_u32(b, (uint32_t)c->has_progress) ||
             put_bytes(b, c->has_progress ? c->progress_bytes : NULL,
                       c->has_progress ? c->progress_len : 0);
    for (size_t i = 0; !rc && i < c->n_deps; i++)
        rc = put_u32(b, (uint32_t)c->deps[i].present) ||
             put_bytes(b, c->deps[i].present ? c->deps[i].bytes : NULL,
                       c->deps[i].present ? c->deps[i].len : 0);
    if (rc)
        return CAIRN_ENOMEM;
    uint32_t len = (uint32_t)(b->size - 5);
    memcpy(b->data + 1, &len, 4);
    return 0;
}

/* In the host: runs the invocation `req` asks for and sends its result; -1 if the request is
 * malformed or the result cannot be sent (the host then exits: the runner sees a crash). */
static int host_step(cairn_runner *r, int fd, const char *req, size_t len)
{
    host_rd rd = {req, len};
    uint32_t probe, gi, si, has_progress;
    cairn_ctx c = {.r = r, .child_fd = fd};
    const char *task;
    uint32_t tl;
    if (rd_take(&rd, &probe, 4) || rd_take(&rd, &gi, 4) || rd_take(&rd, &si, 4) ||
        gi >= r->n_graphs || si >= r->graphs[gi]->n_steps)
        return -1;
    const cairn_graph *g = r->graphs[gi];
    c.step = g->steps[si];
    if (rd_take(&rd, &c.generation, 4) || rd_take(&rd, &c.invocation, 4) ||
        rd_take(&rd, &c.attempt, 4) || rd_take(&rd, &c.created_ms, 8) ||
        rd_take(&rd, c.store_id, sizeof c.store_id) ||
        rd_take(&rd, c.payload_hash, sizeof c.payload_hash) || rd_bytes(&rd, &task, &tl) ||
        tl == 0 || task[tl - 1] != 0)
        return -1;
    c.task_id = task;
    int bad = rd_object(&rd, &c.input) != 0;
    bad = bad || rd_take(&rd, &has_progress, 4);
    if (!bad) {
        if (has_progress) {
            bad = rd_object(&rd, &c.progress) != 0;
            c.has_progress = 1;
        } else {
            const char *p;
            uint32_t n;
            bad = rd_bytes(&rd, &p, &n);
        }
    }
    cairn__dep deps[c.step->n_deps ? c.step->n_deps : 1];
    memset(deps, 0, sizeof deps);
    c.deps = deps;
    for (size_t i = 0; !bad && i < c.step->n_deps; i++) {
        uint32_t present;
        deps[i].name = g->steps[c.step->deps[i]]->name;
        bad = rd_take(&rd, &present, 4);
        if (!bad && present) {
            bad = rd_object(&rd, &deps[i].u) != 0;
            deps[i].present = 1;
        } else if (!bad) {
            const char *p;
            uint32_t n;
            bad = rd_bytes(&rd, &p, &n);
        }
        c.n_deps = i + 1;
    }
    msgpack_sbuffer_init(&c.out);
    msgpack_packer_init(&c.pk, &c.out, msgpack_sbuffer_write);
    int rc = -1;
    if (!bad) {
        /* a compute step dies with a SIGTERM to the process group (the runner decides anyway);
         * an effect runs to its end, so that its outcome is known rather than in doubt */
        void (*term)(int) = c.step->delivery == CAIRN_COMPUTE ? SIG_DFL : SIG_IGN;
        signal(SIGTERM, term);
        signal(SIGHUP, term);
        cairn_step_result res = call(&c, (int)probe);
        signal(SIGTERM, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        fflush(NULL); /* what the step printed, before its result (a child per step lost it) */
        uint32_t code = (uint32_t)res, el = (uint32_t)strlen(c.err),
                 ol = c.out_set ? (uint32_t)c.out.size : 0;
        unsigned char hdr[17] = {'R'};
        memcpy(hdr + 1, &code, 4);
        memcpy(hdr + 5, &c.retry_after_ms, 4);
        memcpy(hdr + 9, &el, 4);
        memcpy(hdr + 13, &ol, 4);
        struct iovec iov[3] = {{hdr, sizeof hdr}, {c.err, el}, {c.out.data, ol}};
        rc = cairn__writev_all(fd, iov, 3) ? -1 : 0;
    }
    msgpack_sbuffer_destroy(&c.out);
    msgpack_unpacked_destroy(&c.input);
    if (c.has_progress)
        msgpack_unpacked_destroy(&c.progress);
    for (size_t i = 0; i < c.n_deps; i++)
        if (deps[i].present)
            msgpack_unpacked_destroy(&deps[i].u);
    return rc;
}

static void host_main(cairn_runner *r, int fd, pid_t parent)
{
    /* the host dies with its runner: a SIGKILLed runner leaves no step running behind it */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(4);
    cairn__store_seal(r->store); /* the host never writes the store; now it cannot */
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGINT, SIG_IGN); /* the parent decides; a terminal ^C reaches the whole group */
    for (;;) {
        unsigned char hdr[5];
        uint32_t n;
        /* Wait in poll, not in read: a reader blocked on a unix socket is woken by every wake-up
         * of the socket, which includes the runner's read of the last result (buffer space came
         * back), and each such wake-up is a context switch that finds nothing to read. poll
         * wakes for input only. */
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        while (poll(&pf, 1, -1) < 0 && errno == EINTR)
            ;
        int got = cairn__read_all(fd, hdr, sizeof hdr);
        if (got == 0)
            _exit(0); /* the runner closed its end */
        memcpy(&n, hdr + 1, 4);
        char *req = NULL;
        if (got != 1 || hdr[0] != 'S' || !(req = malloc(n ? n : 1)) ||
            cairn__read_all(fd, req, n) != 1 || host_step(r, fd, req, n))
            _exit(3);
        free(req);
    }
}

/* Reads one frame from the child; 1 when the result arrived, 0 for progress, -1 on EOF. */
static int read_frame(cairn_ctx *c, int fd, cairn__outcome *o, int *commit_err)
{
    unsigned char hdr[5];
    uint32_t n;
    if (cairn__read_all(fd, hdr, sizeof hdr) != 1)
        return -1;
    char type = (char)hdr[0];
    memcpy(&n, hdr + 1, 4);
    if (type == 'P') {
        char *buf = malloc(n ? n : 1);
        if (!buf || cairn__read_all(fd, buf, n) != 1) {
            free(buf);
            return -1;
        }
        int rc = cairn__commit_progress(c, buf, n);
        if (rc && !*commit_err)
            *commit_err = rc;
        free(buf);
        return 0;
    }
    if (type != 'R')
        return -1;
    o->result = (cairn_step_result)n;
    unsigned char rest[12];
    uint32_t el, ol;
    if (cairn__read_all(fd, rest, sizeof rest) != 1)
        return -1;
    memcpy(&o->retry_after_ms, rest, 4);
    memcpy(&el, rest + 4, 4);
    memcpy(&ol, rest + 8, 4);
    if (el >= sizeof o->err || (el && cairn__read_all(fd, o->err, el) != 1))
        return -1;
    o->err[el] = 0;
    if (ol) {
        o->out = malloc(ol);
        if (!o->out || cairn__read_all(fd, o->out, ol) != 1)
            return -1;
        o->out_len = ol;
    }
    return 1;
}

/* A host is a fork of the runner, so whatever a library sets up on first use a host sets up
 * again. OpenSSL's random generator is the costly one: its first draw instantiates the DRBG
 * chain (fetching the DRBG and cipher implementations from the provider), about a millisecond
 * of CPU. Drawn once in the runner's process, before its first fork, the generator is inherited
 * instead; OpenSSL 3 reseeds an inherited generator before its first output in a new process
 * (it compares the fork id), so hosts never draw the same bytes. */
static void warm_before_fork(void)
{
    static pid_t warmed;
    unsigned char b;
    if (warmed != getpid() && RAND_bytes(&b, 1) == 1)
        warmed = getpid();
}

/* Stops the host (SIGKILL unless it is known to have exited) and reaps it; its wait status in
 * *status when asked. */
static void host_stop(cairn__host *h, int reaped, int *status)
{
    int st = 0;
    if (h->pid > 0 && !reaped) {
        kill(h->pid, SIGKILL);
        while (waitpid(h->pid, &st, 0) < 0 && errno == EINTR)
            ;
    }
    if (status && !reaped)
        *status = st;
    if (h->fd >= 0)
        close(h->fd);
    h->pid = 0, h->fd = -1;
}

void cairn__host_free(cairn_runner *r)
{
    cairn__host *h = r->host;
    if (!h)
        return;
    if (h->pid > 0 && h->owner == getpid())
        host_stop(h, 0, NULL);
    else if (h->fd >= 0)
        close(h->fd); /* a copy of a runner in a forked process: the host is not its child */
    free(h);
    r->host = NULL;
}

/* Forks while no other runner of this process is between its socketpair and closing the host's
 * end there, so no host inherits another's end and keeps it from seeing its runner go. */
static pthread_mutex_t spawn_mu = PTHREAD_MUTEX_INITIALIZER;

static int host_spawn(cairn_runner *r)
{
    cairn__host *h = r->host;
    if (!h) {
        if (!(h = calloc(1, sizeof *h)))
            return cairn__runner_fail(r, CAIRN_ENOMEM, "no memory for the step host");
        h->fd = -1;
        r->host = h;
    }
    int sv[2];
    pthread_once(&fork_once, fork_rw_init);
    int excl = !in_step;
    if (excl)
        pthread_rwlock_wrlock(&fork_rw);
    pthread_mutex_lock(&spawn_mu);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        pthread_mutex_unlock(&spawn_mu);
        if (excl)
            pthread_rwlock_unlock(&fork_rw);
        return cairn__runner_fail(r, CAIRN_EIO, "socketpair: %s", strerror(errno));
    }
    fflush(NULL);
    warm_before_fork();
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        /* The child's one thread counts as inside a step, so it never takes its copy of
         * fork_rw (which still shows this thread writing, and may show the parent's other
         * threads waiting, forever). */
        in_step = 1;
        host_main(r, sv[1], parent);
    }
    close(sv[1]);
    pthread_mutex_unlock(&spawn_mu);
    if (excl)
        pthread_rwlock_unlock(&fork_rw);
    if (pid < 0) {
        close(sv[0]);
        return cairn__runner_fail(r, CAIRN_ENOMEM, "fork: %s", strerror(errno));
    }
    h->pid = pid, h->owner = parent, h->tid = gettid(), h->fd = sv[0], h->uses = 0;
    return 0;
}

/* Sends the request to a live host of this thread's, forking one first where there is none. */
static int host_send(cairn_runner *r, const msgpack_sbuffer *req)
{
    cairn__host *h = r->host;
    if (h && h->pid > 0) {
        int st;
        if (h->owner != getpid()) /* a copy of a runner in a forked process: not its child */
            host_stop(h, 1, NULL);
        else if (waitpid(h->pid, &st, WNOHANG) == h->pid) /* it exited while idle */
            host_stop(h, 1, NULL);
        else if (h->tid != gettid()) /* it would die with a thread that may end */
            host_stop(h, 0, NULL);
    }
    for (int tries = 0;; tries++) {
        if (!r->host || r->host->pid <= 0) {
            int rc = host_spawn(r);
            if (rc)
                return rc;
        }
        h = r->host;
        size_t off = 0;
        ssize_t n = 0;
        while (off < req->size &&
               ((n = send(h->fd, req->data + off, req->size - off, MSG_NOSIGNAL)) > 0 ||
                (n < 0 && errno == EINTR)))
            off += n > 0 ? (size_t)n : 0;
        if (off == req->size) {
            h->uses++;
            return 0;
        }
        int err = errno;
        host_stop(h, 0, NULL); /* it died while idle: a fresh one */
        if (tries)
            return cairn__runner_fail(r, CAIRN_EIO, "step host: send: %s", strerror(err));
    }
}

static int exec_isolated(cairn_ctx *c, int probe, cairn__outcome *o)
{
    msgpack_sbuffer req;
    msgpack_sbuffer_init(&req);
    int rc = host_request(c, probe, &req);
    if (rc == 0)
        rc = host_send(c->r, &req);
    else
        rc = cairn__runner_fail(c->r, rc, "step '%s': no memory for its request", c->step->name);
    msgpack_sbuffer_destroy(&req);
    if (rc)
        return rc;
    cairn__host *h = c->r->host;
    pid_t pid = h->pid;
    int fd = h->fd;
    int64_t deadline = mono_ms() + c->step->timeout_ms;
    int64_t renew_every = c->r->lease_ms / 3 ? c->r->lease_ms / 3 : 1;
    int64_t next_renew = mono_ms() + renew_every;
    int got = 0, commit_err = 0, killed = 0, stop_seen = 0, reaped = 0, status = 0;
    while (!got) {
        int64_t now = mono_ms();
        if (now >= deadline) {
            o->timed_out = killed = 1;
            break;
        }
        if (c->r->stop && !stop_seen) {
            stop_seen = 1;
            /* a compute step is simply abandoned; an effect is let finish (up to its deadline)
             * so that its outcome is known rather than in doubt */
            if (c->step->delivery == CAIRN_COMPUTE) {
                killed = 1;
                break;
            }
        }
        if (now >= next_renew) {
            int lrc = cairn__renew_lease(c);
            if (lrc && (!commit_err || lrc == CAIRN_EBUSY)) /* a lost lease outranks the rest */
                commit_err = lrc;
            next_renew = now + renew_every;
            if (lrc == CAIRN_EBUSY && c->step->delivery == CAIRN_COMPUTE) {
                /* another process owns the task now (this one stalled past the lease): its
                 * result could never be committed, so stop paying for it */
                killed = 1;
                break;
            }
        }
        int64_t wait = deadline - now;
        if (next_renew - now < wait)
            wait = next_renew - now;
        if (wait > 100)
            wait = 100; /* notice a stop request promptly */
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int pr = poll(&pf, 1, (int)wait);
        if (pr > 0) {
            int fr = read_frame(c, fd, o, &commit_err);
            if (fr < 0)
                break;
            got = fr;
            if (!got && commit_err == CAIRN_EBUSY && c->step->delivery == CAIRN_COMPUTE) {
                killed = 1; /* a progress save found the lease lost */
                break;
            }
        } else if (pr == 0 && waitpid(pid, &status, WNOHANG) == pid) {
            reaped = 1; /* gone, while another process holds a copy of its socket */
            break;
        }
    }
    /* a host without a result (EOF, a broken frame, killed) must not live on; one that has run
     * its share is replaced */
    if (!got || h->uses >= c->r->child_reuse)
        host_stop(h, reaped, &status);
    if (!got) {
        if (o->timed_out)
            snprintf(o->err, sizeof o->err, "step '%s' timed out after %u ms (killed)",
                     c->step->name, c->step->timeout_ms);
        else if (killed && commit_err == CAIRN_EBUSY)
            snprintf(o->err, sizeof o->err, "step '%s' stopped: the task's lease was lost",
                     c->step->name);
        else if (killed)
            snprintf(o->err, sizeof o->err, "step '%s' stopped by a signal", c->step->name);
        else {
            o->crashed = 1;
            if (WIFSIGNALED(status))
                snprintf(o->err, sizeof o->err, "step '%s' crashed with signal %d", c->step->name,
                         WTERMSIG(status));
            else
                snprintf(o->err, sizeof o->err, "step '%s' exited with status %d", c->step->name,
                         WEXITSTATUS(status));
        }
        o->result = c->step->delivery == CAIRN_COMPUTE ? CAIRN_STEP_TRANSIENT : CAIRN_STEP_UNKNOWN;
        if (killed && c->r->stop)
            return CAIRN_EINTR;
    }
    /* A renewal or progress save that failed for another reason (a full disk, say) does not
     * throw away a result that arrived: committing it is tried next, and says what is wrong. */
    return got && commit_err != CAIRN_EBUSY ? 0 : commit_err;
}

int cairn__exec_step(cairn_ctx *c, int probe, cairn__outcome *o)
{
    memset(o, 0, sizeof *o);
    c->err[0] = 0;
    c->out_set = 0;
    c->retry_after_ms = 0;
    msgpack_sbuffer_clear(&c->out);
    c->child_fd = -1;
    if (c->step->timeout_ms > 0)
        return exec_isolated(c, probe, o);
    int beat = (c->step->expensive || c->step->delivery != CAIRN_COMPUTE) && heartbeat_start(c);
    o->result = call(c, probe);
    int lost = beat && atomic_load(&c->hb->lost);
    if (beat)
        heartbeat_stop(c);
    if (lost && c->step->delivery == CAIRN_COMPUTE) { /* its output could never be committed */
        snprintf(o->err, sizeof o->err, "step '%s': the task's lease was lost while it ran",
                 c->step->name);
        return cairn__runner_fail(c->r, CAIRN_EBUSY, "task '%s': lease lost during step '%s'",
                                  c->task_id, c->step->name);
    }
    return take_output(c, o);
}
