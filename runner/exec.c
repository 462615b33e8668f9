/* runner/exec.c - what a step sees (cairn_ctx) and how it is run.
 *
 * A step runs either in-process or, when it has a hard timeout, in a forked child that the
 * runner kills with SIGKILL at the deadline: a step that hangs in a system call or a GPU kernel
 * cannot be asked to stop, only stopped. The child never touches the store (LMDB forbids using
 * an environment across fork); it sends frames to the parent over a pipe:
 *     'P' len bytes     save this progress record (the parent commits it)
 *     'R' result retry_after errlen err outlen out   the step's result
 * The parent commits progress as it arrives and renews the lease while it waits, so a long
 * isolated step keeps its lease however long it runs.
 *
 * An in-process step that may run long (one marked expensive, or an effect) gets a heartbeat: the
 * runner's one heartbeat thread (made at the first such step, idle between steps) renews the
 * lease every lease_ms/3 while the step runs, so a healthy owner keeps
 * its task and a stopped or hung process (whose threads all stop) loses it at expiry. The step's
 * own progress saves and the heartbeat share the store handle under the heartbeat's mutex. Other
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/fdio.h"
#include "common/hash.h"
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
        uint32_t n = (uint32_t)len;
        if (cairn__write_all(c->child_fd, "P", 1) || cairn__write_all(c->child_fd, &n, 4) ||
            cairn__write_all(c->child_fd, bytes, len))
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

static void *heartbeat_main(void *arg)
{
    cairn__heartbeat *hb = arg;
    pthread_mutex_lock(&hb->mu);
    while (!hb->quit) {
        if (!hb->ctx) { /* idle between steps */
            pthread_cond_wait(&hb->cv, &hb->mu);
            continue;
        }
        cairn_ctx *c = hb->ctx;
        uint64_t turn = hb->turn;
        uint32_t period = c->r->lease_ms / 3 ? c->r->lease_ms / 3 : 1;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += period / 1000;
        until.tv_nsec += (long)(period % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L)
            until.tv_sec++, until.tv_nsec -= 1000000000L;
        int w = 0;
        while (!hb->quit && hb->ctx == c && hb->turn == turn && w != ETIMEDOUT)
            w = pthread_cond_timedwait(&hb->cv, &hb->mu, &until);
        if (hb->quit || hb->ctx != c || hb->turn != turn)
            continue; /* the step ended (or another began) before its beat was due */
        if (cairn__renew_lease(c) == CAIRN_EBUSY) /* someone else owns the task now */
            atomic_store(&hb->lost, 1);
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
    atomic_store(&hb->lost, 0);
    pthread_cond_signal(&hb->cv);
    pthread_mutex_unlock(&hb->mu);
    c->hb = hb;
    return 1;
}

/* Ends the step's heartbeat: once the mutex is ours no renewal is under way, and the thread
 * goes idle. */
static void heartbeat_stop(cairn_ctx *c)
{
    cairn__heartbeat *hb = c->hb;
    pthread_mutex_lock(&hb->mu);
    hb->ctx = NULL;
    pthread_cond_signal(&hb->cv);
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
    if (c->out_set && c->out.size) {
        o->out = malloc(c->out.size);
        if (!o->out) /* never commit a step as done without its output */
            return cairn__runner_fail(c->r, CAIRN_ENOMEM, "step '%s': no memory for its output",
                                      c->step->name);
        memcpy(o->out, c->out.data, c->out.size);
        o->out_len = c->out.size;
    }
    return 0;
}

static cairn_step_result call(cairn_ctx *c, int probe)
{
    cairn_step *s = (cairn_step *)c->step;
    if (probe) {
        switch (s->probe(c, s->user)) {
        case CAIRN_PROBE_DONE:
            return CAIRN_STEP_OK;
        case CAIRN_PROBE_NOT_DONE:
            return CAIRN_STEP_TRANSIENT;
        default:
            return CAIRN_STEP_UNKNOWN;
        }
    }
    cairn_step_result res = s->fn(c, s->user);
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

static void run_child(cairn_ctx *c, int probe, int fd, pid_t parent)
{
    /* the step dies with its runner: a SIGKILLed runner leaves no step running behind it */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(4);
    cairn__store_seal(c->r->store); /* the child never writes the store; now it cannot */
    /* a compute step dies with a SIGTERM to the process group (the runner decides anyway); an
     * effect runs to its end, so that its outcome is known rather than in doubt */
    signal(SIGTERM, c->step->delivery == CAIRN_COMPUTE ? SIG_DFL : SIG_IGN);
    signal(SIGHUP, c->step->delivery == CAIRN_COMPUTE ? SIG_DFL : SIG_IGN); /* as SIGTERM */
    signal(SIGINT, SIG_IGN); /* the parent decides; a terminal ^C reaches the whole group */
    c->child_fd = fd;
    cairn_step_result res = call(c, probe);
    uint32_t r = (uint32_t)res, el = (uint32_t)strlen(c->err),
             ol = c->out_set ? (uint32_t)c->out.size : 0;
    if (cairn__write_all(fd, "R", 1) || cairn__write_all(fd, &r, 4) ||
        cairn__write_all(fd, &c->retry_after_ms, 4) || cairn__write_all(fd, &el, 4) ||
        cairn__write_all(fd, c->err, el) || cairn__write_all(fd, &ol, 4) ||
        (ol && cairn__write_all(fd, c->out.data, ol)))
        _exit(3);
    _exit(0);
}

/* Reads one frame from the child; 1 when the result arrived, 0 for progress, -1 on EOF. */
static int read_frame(cairn_ctx *c, int fd, cairn__outcome *o, int *commit_err)
{
    char type;
    uint32_t n;
    if (cairn__read_all(fd, &type, 1) != 1 || cairn__read_all(fd, &n, 4) != 1)
        return -1;
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
    uint32_t el, ol;
    if (cairn__read_all(fd, &o->retry_after_ms, 4) != 1 || cairn__read_all(fd, &el, 4) != 1 ||
        el >= sizeof o->err || cairn__read_all(fd, o->err, el) != 1)
        return -1;
    o->err[el] = 0;
    if (cairn__read_all(fd, &ol, 4) != 1)
        return -1;
    if (ol) {
        o->out = malloc(ol);
        if (!o->out || cairn__read_all(fd, o->out, ol) != 1)
            return -1;
        o->out_len = ol;
    }
    return 1;
}

/* A step child is a fork of the runner, so whatever a library sets up on first use a child sets
 * up again, at every step, and throws away. OpenSSL's random generator is the costly one: its
 * first draw instantiates the DRBG chain (fetching the DRBG and cipher implementations from the
 * provider), about a millisecond of CPU, which a step drawing a nonce (examples/ledger's work)
 * paid in every child: most of a consumed ledger task's CPU. Drawn once in the runner's process,
 * before its first fork, the generator is inherited instead; OpenSSL 3 reseeds an inherited
 * generator before its first output in a new process (it compares the fork id), so children
 * never draw the same bytes. */
static void warm_before_fork(void)
{
    static pid_t warmed;
    unsigned char b;
    if (warmed != getpid() && RAND_bytes(&b, 1) == 1)
        warmed = getpid();
}

static int exec_isolated(cairn_ctx *c, int probe, cairn__outcome *o)
{
    int p[2];
    if (pipe(p) != 0)
        return cairn__runner_fail(c->r, CAIRN_EIO, "pipe: %s", strerror(errno));
    fflush(NULL);
    warm_before_fork();
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]), close(p[1]);
        return cairn__runner_fail(c->r, CAIRN_ENOMEM, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        close(p[0]);
        run_child(c, probe, p[1], parent);
    }
    close(p[1]);
    int64_t deadline = mono_ms() + c->step->timeout_ms;
    int64_t renew_every = c->r->lease_ms / 3 ? c->r->lease_ms / 3 : 1;
    int64_t next_renew = mono_ms() + renew_every;
    int got = 0, commit_err = 0, killed = 0, stop_seen = 0;
    while (!got) {
        int64_t now = mono_ms();
        if (now >= deadline) {
            kill(pid, SIGKILL);
            o->timed_out = killed = 1;
            break;
        }
        if (c->r->stop && !stop_seen) {
            stop_seen = 1;
            /* a compute step is simply abandoned; an effect is let finish (up to its deadline)
             * so that its outcome is known rather than in doubt */
            if (c->step->delivery == CAIRN_COMPUTE) {
                kill(pid, SIGKILL);
                killed = 1;
                break;
            }
        }
        if (now >= next_renew) {
            int rc = cairn__renew_lease(c);
            if (rc && (!commit_err || rc == CAIRN_EBUSY)) /* a lost lease outranks the rest */
                commit_err = rc;
            next_renew = now + renew_every;
            if (rc == CAIRN_EBUSY && c->step->delivery == CAIRN_COMPUTE) {
                /* another process owns the task now (this one stalled past the lease): its
                 * result could never be committed, so stop paying for it */
                kill(pid, SIGKILL);
                killed = 1;
                break;
            }
        }
        int64_t wait = deadline - now;
        if (next_renew - now < wait)
            wait = next_renew - now;
        if (wait > 100)
            wait = 100; /* notice a stop request promptly */
        struct pollfd pf = {.fd = p[0], .events = POLLIN};
        int pr = poll(&pf, 1, (int)wait);
        if (pr > 0) {
            int fr = read_frame(c, p[0], o, &commit_err);
            if (fr < 0)
                break;
            got = fr;
            if (!got && commit_err == CAIRN_EBUSY && c->step->delivery == CAIRN_COMPUTE) {
                kill(pid, SIGKILL); /* a progress save found the lease lost */
                killed = 1;
                break;
            }
        }
    }
    close(p[0]);
    if (!got)
        kill(pid, SIGKILL); /* no result (EOF or a broken frame): it must not live on */
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
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
