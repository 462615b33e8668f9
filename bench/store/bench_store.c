/* bench/store/bench_store.c - cairn's checkpoint store against SQLite, measured in one run.
 *
 * Three questions, each answered against a peer measured on the same filesystem in the same run
 * (numbers from another machine or another day say nothing about this one):
 *   1. How many step checkpoints per second, and how long one commit takes (p50/p99), at the two
 *      durability levels a user can pick: survive power loss (cairn `sync` vs SQLite WAL with
 *      synchronous=FULL) and survive a process crash (cairn `nosync` vs SQLite WAL with
 *      synchronous=NORMAL), with small (256 B) and larger (8 KB) step outputs.
 *   2. How long the read takes that a resume does before each step.
 *   3. How long `cairn run` takes on a task that has already succeeded (an idempotent hit):
 *      the real example binary, spawned as a user would.
 * Throughput comes from whole tasks (cairn's real runner on fresh tasks, against the SQLite peer
 * doing the same transactions), commit percentiles from direct loops over one step commit
 * (cairn_side.c, sqlite_peer.c).
 *
 * The machine this runs on is rarely quiet, so the stores of one configuration are measured in
 * rounds: each round gives every store the same number of tasks, in a rotating order, after
 * flushing what earlier rounds left dirty. Background load then falls on all stores alike and
 * the ratios stay meaningful even when the absolute numbers wander.
 * A benchmark never fails on a time: misses are reported, the exit status stays 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/store/bench.h"
#include "checkpoint/store.h"

extern char **environ;

enum { RESUME_TASKS = 200 };

typedef struct opts {
    int quick, json;
    const char *ledger, *dir, *only;
    uint32_t scale_max;     /* --only scale: the tasks the store is filled to */
    uint32_t consume_tasks; /* --only consume: tasks a run */
    uint32_t tasks_sync, tasks_nosync, rounds, reads, spawns, inproc_hits;
} opts;

static int g_verbose; /* progress lines on stderr when it is a terminal */
static char g_tmp[PATH_MAX];

static void progress(const char *fmt, ...) CAIRN_PRINTF(1, 2);
static void progress(const char *fmt, ...)
{
    if (!g_verbose)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("bench-store: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Whether section `name` runs (--only). */
static int wanted(const opts *o, const char *name)
{
    if (!o->only)
        return 1;
    size_t n = strlen(name);
    for (const char *p = o->only; *p;) {
        size_t m = strcspn(p, ",");
        if (m == n && strncmp(p, name, n) == 0)
            return 1;
        p += m + (p[m] == ',');
    }
    return 0;
}

/* ------------------------------------------------------------------ timing and samples */

int64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int bench_samples_add(bench_samples *s, double ns)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        double *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return -1;
        s->v = v, s->cap = cap;
    }
    s->v[s->n++] = ns;
    s->sorted = 0;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(const double *v, int n)
{
    double t[BENCH_MAX_ROUNDS];
    if (n <= 0 || n > BENCH_MAX_ROUNDS)
        return 0;
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

double bench_samples_pct(bench_samples *s, double p)
{
    if (!s->n)
        return 0;
    if (!s->sorted) {
        qsort(s->v, s->n, sizeof *s->v, cmp_double);
        s->sorted = 1;
    }
    size_t rank = (size_t)ceil(p / 100.0 * (double)s->n);
    return s->v[rank ? rank - 1 : 0];
}

void bench_samples_free(bench_samples *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}

static bench_lat to_lat(bench_samples *s, double ns_per_unit)
{
    bench_lat l = {.done = s->n > 0, .n = s->n};
    l.p50 = bench_samples_pct(s, 50) / ns_per_unit;
    l.p99 = bench_samples_pct(s, 99) / ns_per_unit;
    return l;
}

/* ------------------------------------------------------------------ payloads */

void *bench_output(size_t size)
{
    if (size < 3 || size > 0xffff + 3)
        return NULL;
    unsigned char *b = malloc(size);
    if (!b)
        return NULL;
    size_t hdr = size - 2 <= 0xff ? 2 : 3, body = size - hdr;
    if (hdr == 2) {
        b[0] = 0xc4, b[1] = (unsigned char)body; /* bin 8 */
    } else {
        b[0] = 0xc5, b[1] = (unsigned char)(body >> 8), b[2] = (unsigned char)body; /* bin 16 */
    }
    uint64_t x = 0x9e3779b97f4a7c15ull; /* xorshift: incompressible, and the same every run */
    for (size_t i = hdr; i < size; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        b[i] = (unsigned char)x;
    }
    return b;
}

#define INPUT_TEXT "benchmark task %06u: a short product description of sixty bytes"

int bench_input_json(uint32_t n, char *buf, size_t cap)
{
    return snprintf(buf, cap, "{\"text\": \"" INPUT_TEXT "\", \"n\": %u}", n, n);
}

void bench_input_msgpack(uint32_t n, msgpack_sbuffer *sb)
{
    char text[128];
    int len = snprintf(text, sizeof text, INPUT_TEXT, n);
    msgpack_sbuffer_clear(sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str(&pk, 4), msgpack_pack_str_body(&pk, "text", 4);
    msgpack_pack_str(&pk, (size_t)len), msgpack_pack_str_body(&pk, text, (size_t)len);
    msgpack_pack_str(&pk, 1), msgpack_pack_str_body(&pk, "n", 1);
    msgpack_pack_uint32(&pk, n);
}

/* ------------------------------------------------------------------ scratch directories */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

void bench_rm_tree(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

void bench_sync_fs(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        syncfs(fd);
        close(fd);
    }
}

static void flush_fs(void) { bench_sync_fs(g_tmp); }

/* A fresh directory under the run's scratch directory. */
static int scratch(const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", g_tmp, name);
    bench_rm_tree(out);
    if (mkdir(out, 0700) != 0) {
        fprintf(stderr, "bench-store: cannot create %s: %s\n", out, strerror(errno));
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ 1. step checkpoints */

typedef enum { M_SQLITE_TASKS, M_CAIRN_TASKS, M_SQLITE_COMMITS, M_CAIRN_COMMITS } meter_kind;

/* One store under measurement in one configuration. */
typedef struct meter {
    meter_kind kind;
    int durable; /* cairn commit loop: CAIRN__DURABLE */
    bench_peer *peer;
    bench_cairn *cairn;
    bench_tput *out;
    uint32_t next; /* the next task number */
    bench_samples lat;
    int64_t busy_ns;
    uint64_t steps;
    double rate[BENCH_MAX_ROUNDS]; /* steps/s of each timed round */
    int n_rate;
    char dir[PATH_MAX];
} meter;

static int meter_open(meter *m, meter_kind kind, const char *name, int power_loss, int durable,
                      size_t size, bench_tput *out)
{
    memset(m, 0, sizeof *m);
    m->kind = kind;
    m->durable = durable;
    m->out = out;
    if (scratch(name, m->dir, sizeof m->dir))
        return -1;
    char err[1024];
    if (kind == M_SQLITE_TASKS || kind == M_SQLITE_COMMITS)
        m->peer = bench_peer_open(m->dir,
                                  power_loss == 2 ? PEER_SPLIT
                                  : power_loss    ? PEER_FULL
                                                  : PEER_NORMAL,
                                  size, err, sizeof err);
    else
        m->cairn =
            bench_cairn_open(m->dir, power_loss ? CAIRN_SYNC : CAIRN_NOSYNC,
                             kind == M_CAIRN_TASKS && durable, BENCH_STEPS, size, err, sizeof err);
    if (!m->peer && !m->cairn) {
        fprintf(stderr, "bench-store: %s\n", err);
        return -1;
    }
    return 0;
}

static const char *meter_err(const meter *m)
{
    return m->peer ? bench_peer_errmsg(m->peer) : bench_cairn_errmsg(m->cairn);
}

/* Runs `tasks` more tasks; `timed` adds them to the measurement (else it is a warm-up). */
static int meter_run(meter *m, uint32_t tasks, int timed)
{
    int rc = 0;
    int64_t busy0 = m->busy_ns;
    uint64_t steps0 = m->steps;
    if (m->kind == M_SQLITE_TASKS || m->kind == M_CAIRN_TASKS) {
        for (uint32_t k = 0; !rc && k < tasks; k++, m->next++) {
            char id[32];
            snprintf(id, sizeof id, "t%06u", m->next);
            int64_t t0 = bench_now_ns();
            rc = m->peer ? bench_peer_run_task(m->peer, id, m->next, BENCH_STEPS)
                         : bench_cairn_run_task(m->cairn, id, m->next);
            int64_t dt = bench_now_ns() - t0;
            if (timed) {
                m->busy_ns += dt;
                m->steps += BENCH_STEPS;
                bench_samples_add(&m->lat, (double)dt);
            }
        }
    } else {
        /* the tasks are set up running, untimed; then each step commit is timed alone */
        rc = m->peer ? bench_peer_create_running(m->peer, "c", m->next, tasks)
                     : bench_cairn_create_running(m->cairn, "c", m->next, tasks);
        for (uint32_t k = 0; !rc && k < tasks; k++, m->next++) {
            char id[32];
            snprintf(id, sizeof id, "c%06u", m->next);
            for (uint32_t s = 0; !rc && s < BENCH_STEPS; s++) {
                char step[16];
                snprintf(step, sizeof step, "s%u", s);
                int64_t t0 = bench_now_ns();
                rc = m->peer ? bench_peer_commit_step(m->peer, id, step)
                             : bench_cairn_commit_step(m->cairn, id, step, m->durable);
                int64_t dt = bench_now_ns() - t0;
                if (timed) {
                    m->busy_ns += dt;
                    m->steps++;
                    bench_samples_add(&m->lat, (double)dt);
                }
            }
        }
    }
    if (rc)
        fprintf(stderr, "bench-store: %s\n", meter_err(m));
    else if (timed && m->busy_ns > busy0 && m->n_rate < BENCH_MAX_ROUNDS)
        m->rate[m->n_rate++] = (double)(m->steps - steps0) / ((double)(m->busy_ns - busy0) / 1e9);
    return rc ? -1 : 0;
}

static void meter_close(meter *m, int ok)
{
    if (ok && m->steps) {
        bench_tput *t = m->out;
        t->done = 1;
        t->steps = m->steps;
        t->seconds = (double)m->busy_ns / 1e9;
        memcpy(t->rate, m->rate, sizeof t->rate);
        t->n_rate = m->n_rate;
        t->steps_s = bench_median(m->rate, m->n_rate);
        t->p50_us = bench_samples_pct(&m->lat, 50) / 1e3;
        t->p99_us = bench_samples_pct(&m->lat, 99) / 1e3;
    }
    bench_samples_free(&m->lat);
    bench_peer_close(m->peer);
    bench_cairn_close(m->cairn);
    if (m->dir[0])
        bench_rm_tree(m->dir);
    m->peer = NULL, m->cairn = NULL;
}

static int measure_config(const opts *o, bench_config *c, int power_loss)
{
    uint32_t tasks = power_loss ? o->tasks_sync : o->tasks_nosync;
    meter ms[7];
    int n = 0, rc = 0;
    progress("%s, %zu B outputs: %u tasks per store in %u rounds", c->durability, c->size, tasks,
             o->rounds);
    rc = meter_open(&ms[n++], M_SQLITE_TASKS, "sqlite-tasks", power_loss, 0, c->size,
                    &c->sqlite_task);
    if (!rc)
        rc = meter_open(&ms[n++], M_CAIRN_TASKS, "cairn-tasks", power_loss, 0, c->size,
                        &c->cairn_task);
    if (!rc)
        rc = meter_open(&ms[n++], M_SQLITE_COMMITS, "sqlite-commits", power_loss, 0, c->size,
                        &c->sqlite_commit);
    if (!rc)
        rc = meter_open(&ms[n++], M_CAIRN_COMMITS, "cairn-commits", power_loss, CAIRN__RELAXED,
                        c->size, &c->cairn_commit);
    /* Honesty rows: sync mode's relaxed commits may be undone by a power cut back to the last
     * durable point; this is what a durable point at every commit costs (every step marked
     * expensive). */
    if (!rc && power_loss)
        rc = meter_open(&ms[n++], M_CAIRN_TASKS, "cairn-durable-tasks", 1, 1, c->size,
                        &c->durable_task);
    if (!rc && power_loss)
        rc = meter_open(&ms[n++], M_CAIRN_COMMITS, "cairn-durable-commits", 1, CAIRN__DURABLE,
                        c->size, &c->durable_commit);
    /* And the peer making cairn sync's own promise: steps not flushed, each task's end flushed. */
    if (!rc && power_loss)
        rc = meter_open(&ms[n++], M_SQLITE_TASKS, "sqlite-split-tasks", 2, 0, c->size,
                        &c->split_task);
    uint32_t warm = tasks / 20 + 2;
    for (int i = 0; !rc && i < n; i++)
        rc = meter_run(&ms[i], warm, 0);
    for (uint32_t r = 0; !rc && r < o->rounds; r++) {
        uint32_t chunk = tasks / o->rounds + (r < tasks % o->rounds);
        for (int k = 0; !rc && k < n; k++) {
            flush_fs();
            rc = meter_run(&ms[(k + (int)r) % n], chunk, 1);
        }
    }
    for (int i = 0; i < n; i++)
        meter_close(&ms[i], !rc);
    return rc;
}

/* ------------------------------------------------------------------ 2. resume reads */

/* Reads `count` tasks' steps (in a scrambled order over RESUME_TASKS tasks, so consecutive reads
 * do not hit the same pages), timing each step's read and each task's four. */
static int resume_reads(bench_cairn *c, bench_peer *p, uint32_t *x, uint32_t count,
                        bench_samples *step, bench_samples *task)
{
    for (uint32_t i = 0; i < count; i++) {
        *x = *x * 1103515245u + 12345u;
        char id[32];
        snprintf(id, sizeof id, "r%06u", (*x >> 8) % RESUME_TASKS);
        int64_t whole = 0;
        for (uint32_t k = 0; k < BENCH_RESUME_STEPS; k++) {
            char sname[16], dname[16];
            snprintf(sname, sizeof sname, "s%u", k);
            snprintf(dname, sizeof dname, "s%u", k ? k - 1 : 0);
            const char *dep = k ? dname : NULL;
            int64_t t0 = bench_now_ns();
            int rc = c ? bench_cairn_load_step(c, id, sname, dep, k == 0)
                       : bench_peer_load_step(p, id, sname, dep, k == 0);
            int64_t dt = bench_now_ns() - t0;
            if (rc) {
                fprintf(stderr, "bench-store: %s\n",
                        c ? bench_cairn_errmsg(c) : bench_peer_errmsg(p));
                return -1;
            }
            whole += dt;
            bench_samples_add(step, (double)dt);
        }
        bench_samples_add(task, (double)whole);
    }
    return 0;
}

/* The same tasks (3 steps, 64-byte outputs, as small `ledger` tasks) in both stores: the
 * bytes their pages take, a task each. */
static int measure_size(const opts *o, bench_results *res)
{
    char cdir[PATH_MAX] = "", sdir[PATH_MAX] = "", err[1024];
    bench_size *z = &res->size;
    z->tasks = o->quick ? 2000 : 10000;
    z->steps = 3;
    z->out = 64;
    bench_cairn *c = NULL;
    bench_peer *p = NULL;
    int rc = -1;
    progress("size: %u tasks of %u steps per store", z->tasks, z->steps);
    if (scratch("cairn-size", cdir, sizeof cdir) || scratch("sqlite-size", sdir, sizeof sdir))
        goto out;
    if (!(c = bench_cairn_open(cdir, CAIRN_NOSYNC, 0, z->steps, z->out, err, sizeof err)) ||
        !(p = bench_peer_open(sdir, PEER_NORMAL, z->out, err, sizeof err))) {
        fprintf(stderr, "bench-store: %s\n", err);
        goto out;
    }
    for (uint32_t i = 0; i < z->tasks; i++) {
        char id[32];
        snprintf(id, sizeof id, "z%07u", i);
        if (bench_cairn_run_task(c, id, i) || bench_peer_run_task(p, id, i, z->steps)) {
            fprintf(stderr, "bench-store: %s%s\n", bench_cairn_errmsg(c), bench_peer_errmsg(p));
            goto out;
        }
    }
    z->cairn_bytes = bench_cairn_bytes(c);
    z->sqlite_bytes = bench_peer_bytes(p);
    z->n_db = bench_cairn_db_pages(c, z->db, (int)(sizeof z->db / sizeof *z->db));
    z->done = z->cairn_bytes && z->sqlite_bytes;
    rc = z->done ? 0 : -1;
out:
    bench_cairn_close(c);
    bench_peer_close(p);
    if (*cdir)
        bench_rm_tree(cdir);
    if (*sdir)
        bench_rm_tree(sdir);
    return rc;
}

static int measure_resume(const opts *o, bench_results *res)
{
    char cdir[PATH_MAX] = "", sdir[PATH_MAX] = "", err[1024];
    bench_cairn *c = NULL;
    bench_peer *p = NULL;
    int rc = -1;
    progress("resume reads: setting up %d succeeded 4-step tasks per store", RESUME_TASKS);
    if (scratch("cairn-resume", cdir, sizeof cdir) || scratch("sqlite-resume", sdir, sizeof sdir))
        goto out;
    if (!(c = bench_cairn_open(cdir, CAIRN_NOSYNC, 0, BENCH_RESUME_STEPS, 256, err, sizeof err)) ||
        !(p = bench_peer_open(sdir, PEER_NORMAL, 256, err, sizeof err))) {
        fprintf(stderr, "bench-store: %s\n", err);
        goto out;
    }
    for (uint32_t i = 0; i < RESUME_TASKS; i++) {
        char id[32];
        snprintf(id, sizeof id, "r%06u", i);
        if (bench_cairn_run_task(c, id, i) || bench_peer_run_task(p, id, i, BENCH_RESUME_STEPS)) {
            fprintf(stderr, "bench-store: %s%s\n", bench_cairn_errmsg(c), bench_peer_errmsg(p));
            goto out;
        }
    }
    progress("resume reads: %u tasks per store", o->reads);
    bench_samples cs = {0}, ct = {0}, ss = {0}, st = {0};
    uint32_t xc = 1, xs = 1;
    rc = 0;
    for (uint32_t r = 0; !rc && r < o->rounds; r++) {
        uint32_t chunk = o->reads / o->rounds + (r < o->reads % o->rounds);
        rc = resume_reads(c, NULL, &xc, chunk, &cs, &ct);
        if (!rc)
            rc = resume_reads(NULL, p, &xs, chunk, &ss, &st);
    }
    res->cairn_read_step = to_lat(&cs, 1e3);
    res->cairn_read_task = to_lat(&ct, 1e3);
    res->sqlite_read_step = to_lat(&ss, 1e3);
    res->sqlite_read_task = to_lat(&st, 1e3);
    bench_samples_free(&cs), bench_samples_free(&ct);
    bench_samples_free(&ss), bench_samples_free(&st);

    /* the same tasks again through the runner: idempotent hits, in process */
    progress("idempotent hit: %u in process", o->inproc_hits);
    bench_samples hit = {0};
    for (uint32_t i = 0; !rc && i < o->inproc_hits; i++) {
        char id[32];
        snprintf(id, sizeof id, "r%06u", i % RESUME_TASKS);
        int64_t t0 = bench_now_ns();
        if ((rc = bench_cairn_run_task(c, id, i % RESUME_TASKS)))
            fprintf(stderr, "bench-store: %s\n", bench_cairn_errmsg(c));
        bench_samples_add(&hit, (double)(bench_now_ns() - t0));
    }
    res->inproc_hit = to_lat(&hit, 1e3);
    bench_samples_free(&hit);
out:
    bench_cairn_close(c);
    bench_peer_close(p);
    if (cdir[0])
        bench_rm_tree(cdir);
    if (sdir[0])
        bench_rm_tree(sdir);
    return rc ? -1 : 0;
}

/* ------------------------------------------------------------------ 3. idempotent hit */

/* Spawns argv with stdio on /dev/null; returns its exit status (-1 if it did not exit) and the
 * wall time from spawn to reaped in *ns. */
static int spawn_wait(char *const argv[], int64_t *ns)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int64_t t0 = bench_now_ns();
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return -1;
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    *ns = bench_now_ns() - t0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Runs the commands in turn, `n` times each (after one untimed run that warms the page cache),
 * so that load on the machine falls on all of them alike. */
static int spawn_rounds(char *const *cmds[], bench_lat *outs[], int n_cmds, uint32_t n)
{
    bench_samples s[4] = {{0}};
    int64_t ns;
    int rc = 0;
    for (int c = 0; !rc && c < n_cmds; c++)
        if (spawn_wait(cmds[c], &ns) != 0) {
            fprintf(stderr, "bench-store: `%s %s` failed\n", cmds[c][0], cmds[c][1]);
            rc = -1;
        }
    for (uint32_t i = 0; !rc && i < n; i++)
        for (int c = 0; !rc && c < n_cmds; c++) {
            int st = spawn_wait(cmds[c], &ns);
            if (st != 0) {
                fprintf(stderr, "bench-store: `%s %s` exited with %d\n", cmds[c][0], cmds[c][1],
                        st);
                rc = -1;
            }
            bench_samples_add(&s[c], (double)ns);
        }
    for (int c = 0; c < n_cmds; c++) {
        if (!rc)
            *outs[c] = to_lat(&s[c], 1e6);
        bench_samples_free(&s[c]);
    }
    return rc;
}

static const char *find_ledger(const char *given, char *buf, size_t cap)
{
    if (given)
        return given;
    const char *env = getenv("CAIRN_LEDGER");
    if (env && *env)
        return env;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return NULL;
    self[n] = 0;
    snprintf(buf, cap, "%s/../../examples/ledger/cairn-ledger", dirname(self));
    return buf;
}

static uint64_t count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    uint64_t n = 0;
    int ch;
    while (f && (ch = fgetc(f)) != EOF)
        n += ch == '\n';
    if (f)
        fclose(f);
    return n;
}

static int measure_hit(const opts *o, bench_results *res)
{
    char buf[PATH_MAX], dir[PATH_MAX];
    const char *ledger = find_ledger(o->ledger, buf, sizeof buf);
    if (!ledger || access(ledger, X_OK) != 0) {
        snprintf(res->ledger_note, sizeof res->ledger_note,
                 "skipped: no cairn-ledger binary at %s (pass --ledger PATH or set CAIRN_LEDGER)",
                 ledger ? ledger : "?");
        return 0;
    }
    if (scratch("ledger", dir, sizeof dir))
        return -1;
    char store[PATH_MAX + 16], input[PATH_MAX + 16], trace[PATH_MAX + 16], book[PATH_MAX + 16];
    snprintf(store, sizeof store, "%s/store", dir);
    snprintf(input, sizeof input, "%s/input.json", dir);
    snprintf(trace, sizeof trace, "%s/trace.txt", dir);
    snprintf(book, sizeof book, "%s/ledger.txt", dir);
    FILE *f = fopen(input, "w");
    if (!f) {
        fprintf(stderr, "bench-store: cannot write %s: %s\n", input, strerror(errno));
        return -1;
    }
    fprintf(f,
            "{\"text\": \"idempotent hit\", \"work_ms\": 0, \"trace\": \"%s\", "
            "\"ledger\": \"%s\"}\n",
            trace, book);
    fclose(f);
    progress("idempotent hit: spawning %s %u times", ledger, o->spawns);
    char *run[] = {(char *)ledger, "run",       "--store", store, "--graph", "ledger",
                   "--task",       "bench-hit", "--input", input, NULL};
    char *help[] = {(char *)ledger, "run", "--help", NULL};
    char *tru[] = {"/bin/true", NULL};
    int64_t ns;
    int st = spawn_wait(run, &ns); /* the first run does the work, and the effect */
    int rc = 0;
    if (st != 0) {
        snprintf(res->ledger_note, sizeof res->ledger_note,
                 "failed: the first `%s run` exited with %d", ledger, st);
        fprintf(stderr, "bench-store: %s\n", res->ledger_note);
        rc = -1;
    } else {
        flush_fs();
        char *const *cmds[3] = {tru, help, run};
        bench_lat *outs[3] = {&res->spawn_true, &res->spawn_help, &res->spawn_hit};
        int has_true = access(tru[0], X_OK) == 0;
        rc = spawn_rounds(cmds + !has_true, outs + !has_true, 3 - !has_true, o->spawns);
        res->ledger_effects = count_lines(book);
        snprintf(res->ledger_note, sizeof res->ledger_note,
                 "%s (%llu effect line%s in its ledger after %u+1 runs of the task)", ledger,
                 (unsigned long long)res->ledger_effects, res->ledger_effects == 1 ? "" : "s",
                 o->spawns);
    }
    bench_rm_tree(dir);
    return rc;
}

/* ------------------------------------------------------------------ the machine */

static const char *fs_name(long type)
{
    switch ((unsigned long)type) {
    case 0xEF53:
        return "ext2/ext3/ext4";
    case 0x58465342:
        return "xfs";
    case 0x9123683E:
        return "btrfs";
    case 0x01021994:
        return "tmpfs";
    case 0x794C7630:
        return "overlayfs";
    case 0x2FC12FC1:
        return "zfs";
    case 0x6969:
        return "nfs";
    case 0xF2F52010:
        return "f2fs";
    case 0x65735546:
        return "fuse";
    default:
        return "unknown";
    }
}

static double load_average(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f && fscanf(f, "%lf", &l) != 1)
        l = -1;
    if (f)
        fclose(f);
    return l;
}

static void describe_machine(bench_results *r)
{
    r->load_start = load_average();
    time_t now = time(NULL);
    strftime(r->when, sizeof r->when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
    struct utsname un;
    if (uname(&un) == 0) {
        snprintf(r->host, sizeof r->host, "%s", un.nodename);
        snprintf(r->kernel, sizeof r->kernel, "%s", un.release);
    }
    r->cpus = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(r->cpu, sizeof r->cpu, "?");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char *p = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && p) {
            p += 1 + (p[1] == ' ');
            p[strcspn(p, "\n")] = 0;
            snprintf(r->cpu, sizeof r->cpu, "%s", p);
            break;
        }
    }
    if (f)
        fclose(f);
    snprintf(r->scratch, sizeof r->scratch, "%s", g_tmp);
    struct statfs sf;
    r->fs_type = statfs(g_tmp, &sf) == 0 ? (long)sf.f_type : 0;
    snprintf(r->fs, sizeof r->fs, "%s", fs_name(r->fs_type));
}

/* ------------------------------------------------------------------ main */

static const char usage[] =
    "usage: bench-store [--quick] [--json] [--ledger PATH] [--dir DIR] [--only SECTIONS]\n"
    "                   [--scale-max N]\n"
    "Measures cairn's checkpoint store against SQLite on the same filesystem, in one run:\n"
    "step checkpoints/s and commit latency at power-loss and process-crash durability,\n"
    "the resume read, and `cairn run` on an already-succeeded task.\n"
    "  --quick          fewer iterations (about 20 s)\n"
    "  --json           one JSON document on stdout instead of the table\n"
    "  --ledger PATH    the cairn-ledger binary (default: $CAIRN_LEDGER, else\n"
    "                   ../../examples/ledger/cairn-ledger next to this binary)\n"
    "  --dir DIR        where the scratch stores go (default: $TMPDIR, else /tmp)\n"
    "  --only SECTIONS  comma-separated: power-loss, process-crash, resume, hit, size,\n"
    "                   scale, concurrent, consume (these three run only when named; scale:\n"
    "                   one store filled to --scale-max tasks, each operation's cost at 10k,\n"
    "                   100k, 1M and the end; concurrent: K = 1, 4, 16 processes on one\n"
    "                   store; consume: `cairn-ledger consume --jobs K` against SQLite\n"
    "                   running the ledger graph with K processes; text only)\n"
    "  --scale-max N    the scale section's tasks (default 1000000; --quick: 20000)\n"
    "  --consume-tasks N  the consume section's tasks a run (default 800; --quick: 200)\n"
    "Exit status: 0 (a missed target is reported, never an error), 1 if a measurement\n"
    "failed, 64 on bad usage.\n";

int main(int argc, char **argv)
{
    opts o = {0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            o.quick = 1;
        else if (strcmp(argv[i], "--json") == 0)
            o.json = 1;
        else if (strcmp(argv[i], "--ledger") == 0 && i + 1 < argc)
            o.ledger = argv[++i];
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            o.dir = argv[++i];
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            o.only = argv[++i];
        else if (strcmp(argv[i], "--scale-max") == 0 && i + 1 < argc) {
            char *end;
            errno = 0;
            unsigned long n = strtoul(argv[++i], &end, 10);
            if (errno || *end || end == argv[i] || n > UINT32_MAX || n < 10000) {
                fprintf(stderr, "bench-store: --scale-max '%s': a task count from 10000 to %u\n%s",
                        argv[i], UINT32_MAX, usage);
                return 64;
            }
            o.scale_max = (uint32_t)n;
        } else if (strcmp(argv[i], "--consume-tasks") == 0 && i + 1 < argc) {
            char *end;
            errno = 0;
            unsigned long n = strtoul(argv[++i], &end, 10);
            if (errno || *end || end == argv[i] || n < 1 || n > 1000000) {
                fprintf(stderr,
                        "bench-store: --consume-tasks '%s': a task count from 1 to "
                        "1000000\n%s",
                        argv[i], usage);
                return 64;
            }
            o.consume_tasks = (uint32_t)n;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        } else {
            fprintf(stderr, "bench-store: unknown or incomplete option '%s'\n%s", argv[i], usage);
            return 64;
        }
    }
    static const char *const sections[] = {"power-loss", "process-crash", "resume",     "hit",
                                           "size",       "scale",         "concurrent", "consume"};
    enum { N_SECTIONS = sizeof sections / sizeof *sections };
    /* only sections that print their own tables (scale, concurrent, consume): no peer report */
    int only_own = o.only != NULL;
    for (const char *p = o.only; p && *p;) {
        size_t m = strcspn(p, ","), k = 0;
        while (k < N_SECTIONS && !(strlen(sections[k]) == m && strncmp(p, sections[k], m) == 0))
            k++;
        only_own &= k >= N_SECTIONS - 3;
        if (k == N_SECTIONS) {
            fprintf(stderr, "bench-store: --only: unknown section '%.*s'\n%s", (int)m, p, usage);
            return 64;
        }
        p += m + (p[m] == ',');
    }
    /* quick: about 20 s on a 2-CPU VM with a ~150 us fdatasync; full: about a minute */
    o.tasks_sync = o.quick ? 300 : 800;
    o.tasks_nosync = o.quick ? 1200 : 3000;
    /* many short rounds: each store's turn is close in time to the others', so a burst of load
     * from elsewhere on the machine hits them alike; odd, so the median is one round's value */
    o.rounds = 15;
    o.reads = o.quick ? 50000 : 200000;
    o.spawns = o.quick ? 30 : 50;
    o.inproc_hits = o.quick ? 2000 : 10000;
    if (!o.scale_max)
        o.scale_max = o.quick ? 20000 : 1000000;
    g_verbose = isatty(2);

    if (!o.dir)
        o.dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(g_tmp, sizeof g_tmp, "%s/cairn-bench-XXXXXX", o.dir);
    if (!mkdtemp(g_tmp)) {
        fprintf(stderr, "bench-store: cannot create a scratch directory in %s: %s\n", o.dir,
                strerror(errno));
        return 1;
    }
    static bench_results r; /* large (paths); static keeps it off the stack */
    r.quick = o.quick;
    r.tasks_sync = o.tasks_sync;
    r.tasks_nosync = o.tasks_nosync;
    r.rounds = o.rounds;
    describe_machine(&r);
    if (r.fs_type == 0x01021994)
        fprintf(stderr,
                "bench-store: warning: %s is on tmpfs, where fsync costs nothing; use "
                "--dir on a disk-backed filesystem for meaningful numbers\n",
                g_tmp);

    static const size_t sizes[2] = {256, 8192};
    int rc = 0;
    for (int i = 0; i < 4 && !rc; i++) {
        r.cfg[i].durability = i < 2 ? "power-loss" : "process-crash";
        r.cfg[i].size = sizes[i % 2];
        if (wanted(&o, r.cfg[i].durability))
            rc = measure_config(&o, &r.cfg[i], i < 2);
    }
    if (!rc && wanted(&o, "resume"))
        rc = measure_resume(&o, &r);
    if (!rc && wanted(&o, "size"))
        rc = measure_size(&o, &r);
    /* a failing example binary still leaves sections 1 and 2 worth printing */
    int hit_rc = !rc && wanted(&o, "hit") ? measure_hit(&o, &r) : 0;
    /* minutes, not seconds: only when asked for by name */
    if (!rc && o.only && wanted(&o, "scale"))
        rc = bench_scale(g_tmp, o.scale_max, g_verbose);
    r.load_end = load_average();
    if (rc) {
        bench_rm_tree(g_tmp);
        fprintf(stderr, "bench-store: a measurement failed (see above); no report\n");
        return 1;
    }
    if (only_own)
        ; /* scale, concurrent, consume print their own tables; the peer report would be empty */
    else if (o.json)
        bench_report_json(&r);
    else
        bench_report_text(&r);
    /* K processes: only when asked for by name (it takes minutes), after the report */
    int conc_rc = o.only && !o.json && wanted(&o, "concurrent")
                      ? bench_concurrent(g_tmp, o.quick, o.quick ? 3 : 5)
                      : 0;
    /* the real consume against the peer running the ledger graph: only when asked for */
    int consume_rc = 0;
    if (o.only && !o.json && wanted(&o, "consume")) {
        char buf[PATH_MAX];
        const char *ledger = find_ledger(o.ledger, buf, sizeof buf);
        if (!ledger || access(ledger, X_OK) != 0) {
            fprintf(stderr,
                    "bench-store: consume: no cairn-ledger binary at %s (pass --ledger "
                    "PATH or set CAIRN_LEDGER)\n",
                    ledger ? ledger : "?");
            consume_rc = 1;
        } else {
            uint32_t n = o.consume_tasks ? o.consume_tasks : o.quick ? 200 : 800;
            consume_rc = bench_consume(g_tmp, ledger, n, o.quick ? 3 : 5) != 0;
        }
    }
    bench_rm_tree(g_tmp);
    return hit_rc || conc_rc || consume_rc ? 1 : 0;
}
