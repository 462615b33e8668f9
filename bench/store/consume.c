/* bench/store/consume.c - `cairn consume` on the ledger graph against SQLite doing the same work
 * with the same concurrency (issue 19, group commit).
 *
 * cairn's side is the real program a user runs: `cairn-ledger consume --graph ledger --jobs K`
 * over a file of N task lines, on a fresh sync store, timed from its spawn to its exit; every
 * result line must say succeeded, the store must hold N succeeded tasks and the ledgers N effect
 * lines. A ledger task is parse (compute) -> work (expensive) -> append (an effect), so at
 * power-loss durability each task makes two durable points: append's intent (flushed before the
 * effect runs), whose transaction also writes work's output (a carried commit, runner/step.c:
 * nothing runs between the two), and the task's end, which also records append's output. The
 * effect itself appends a line to a ledger file and fsyncs it (examples/ledger/ledger.c). With
 * the journal, K workers reaching durable points at once share flushes (group commit).
 *
 * The peer is what a careful author would write with SQLite for the same graph: K processes,
 * each its own connection to one WAL database of cairn's schema (sqlite_peer.c), taking lines
 * from one shared counter as consume's workers take them from its queue, and running per task
 * the transactions cairn's runner runs, in its order: admission and lease in one transaction,
 * then per step the resume read and the step's commit, work's carried into append's intent.
 * Its durable points are cairn's, made with the same promise: synchronous=NORMAL everywhere except
 * append's intent and the last commit (append's output and the task's success), which are FULL. A
 * FULL commit flushes the WAL, and with it every commit before it, so a power cut loses at most the
 * compute steps and the admission since the last durable point: exactly what cairn's sync store may
 * lose. The step work is the same too: the line parsed as JSON (jansson), the input's SHA-256 for
 * the task ID, parse's validated output packed as msgpack, work's SHA-256 of the text and random
 * nonce, append's line appended to the same ledger file under flock and fsynced.
 *
 * What the peer does not do, in its favour: it runs work in the process (cairn runs a step with
 * a hard timeout, as ledger's work has, in a forked child it can kill), it pipes no line through
 * a parent, and it writes its result line straight to the output file.
 *
 * The tasks spread their effects over 16 ledger files (line i appends to ledger i % 16): with
 * one, every effect of every worker would queue behind one flock and one file's fsync on either
 * side, and that shared cost would hide what the stores themselves cost.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

extern char **environ;

#define MAX_K 16
#define N_LEDGERS 16
#define TARGET_K16 3.0 /* issue 19: cairn tasks/s / SQLite tasks/s at K = 16 */

/* ------------------------------------------------------------------ the tasks */

/* Writes n task lines to dir/tasks.jsonl, their ledgers under dir. 0 or -1. */
static int write_tasks(const char *dir, uint32_t n, int round)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/tasks.jsonl", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "bench-store: consume: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    for (uint32_t i = 0; i < n; i++)
        fprintf(f,
                "{\"text\": \"consume round %d task %u: a line of the stream\", \"work_ms\": 0, "
                "\"ledger\": \"%s/ledger-%02u.txt\"}\n",
                round, i, dir, i % N_LEDGERS);
    return fclose(f) == 0 ? 0 : -1;
}

/* A whole file, NUL-terminated (malloc'd), or NULL. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "r");
    char *p = NULL;
    size_t n = 0, cap = 0;
    for (int more = f != NULL; more;) {
        if (cap - n < 65536) {
            char *q = realloc(p, cap + 65536 + 1);
            if (!q)
                break;
            p = q, cap += 65536;
        }
        size_t got = fread(p + n, 1, cap - n, f);
        n += got;
        more = got > 0;
    }
    int bad = !f || ferror(f) || !p;
    if (f)
        fclose(f);
    if (bad) {
        free(p);
        return NULL;
    }
    p[n] = 0;
    *len = n;
    return p;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The result lines in dir/out.jsonl: n of them, each {"task": ID, "status": "succeeded"}, with
 * n distinct task IDs. 0, or -1 with the reason on stderr. */
static int check_results(const char *dir, const char *side, uint32_t n)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/out.jsonl", dir);
    size_t len = 0;
    char *text = slurp(path, &len);
    char **ids = calloc(n ? n : 1, sizeof *ids);
    uint32_t got = 0;
    int bad = !text || !ids;
    for (char *line = text, *nl; !bad && line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        json_t *j = json_loadb(line, nl ? (size_t)(nl - line) : strlen(line), 0, NULL);
        const char *st = json_string_value(json_object_get(j, "status"));
        const char *id = json_string_value(json_object_get(j, "task"));
        if (got == n) {
            fprintf(stderr, "bench-store: consume: %s: more result lines than %u tasks\n", side, n);
            bad = 1;
        } else if (!st || strcmp(st, "succeeded") != 0 || !id || !*id) {
            fprintf(stderr, "bench-store: consume: %s: result %u is not a success: %.*s\n", side,
                    got + 1, nl ? (int)(nl - line) : (int)strlen(line), line);
            bad = 1;
        } else if (!(ids[got++] = strdup(id)))
            bad = 1;
        json_decref(j);
    }
    if (!bad && got != n) {
        fprintf(stderr, "bench-store: consume: %s: %u result lines for %u tasks\n", side, got, n);
        bad = 1;
    }
    if (!bad) {
        qsort(ids, got, sizeof *ids, cmp_str);
        for (uint32_t i = 1; !bad && i < got; i++)
            if (strcmp(ids[i - 1], ids[i]) == 0) {
                fprintf(stderr, "bench-store: consume: %s: task %s reported twice\n", side, ids[i]);
                bad = 1;
            }
    }
    for (uint32_t i = 0; ids && i < got; i++)
        free(ids[i]);
    free(ids);
    free(text);
    return bad ? -1 : 0;
}

/* The effects both sides made: lines in dir's ledgers, n expected. */
static int check_ledgers(const char *dir, const char *side, uint32_t n)
{
    uint64_t lines = 0;
    for (int i = 0; i < N_LEDGERS; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/ledger-%02d.txt", dir, i);
        FILE *f = fopen(path, "r");
        for (int ch; f && (ch = fgetc(f)) != EOF;)
            lines += ch == '\n';
        if (f)
            fclose(f);
    }
    if (lines == n)
        return 0;
    fprintf(stderr, "bench-store: consume: %s: %llu effect lines in the ledgers for %u tasks\n",
            side, (unsigned long long)lines, n);
    return -1;
}

/* ------------------------------------------------------------------ cairn: the real program */

static int count_succeeded(const cairn_stats *st, void *user)
{
    *(uint64_t *)user = st->by_state[CAIRN_SUCCEEDED];
    return 0;
}

/* Runs `ledger consume --jobs k` over dir/tasks.jsonl on a fresh store dir/store: tasks/s from
 * its spawn to its exit, 0 on failure; *flushes gets the journal flushes it made. */
static double cairn_run(const char *ledger, const char *dir, int k, uint32_t n, uint64_t *flushes)
{
    char store[4200], in[4200], out[4200], err[4200], jobs[16];
    snprintf(store, sizeof store, "%s/store", dir);
    snprintf(in, sizeof in, "%s/tasks.jsonl", dir);
    snprintf(out, sizeof out, "%s/out.jsonl", dir);
    snprintf(err, sizeof err, "%s/err.txt", dir);
    snprintf(jobs, sizeof jobs, "%d", k);
    char *argv[] = {(char *)ledger, "consume", "--graph", "ledger", "--jobs",
                    jobs,           "--store", store,     in,       NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    fflush(stdout), fflush(stderr);
    pid_t pid;
    int64_t t0 = bench_now_ns();
    int rc = posix_spawn(&pid, ledger, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        fprintf(stderr, "bench-store: consume: cannot start %s: %s\n", ledger, strerror(rc));
        return 0;
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    double s = (double)(bench_now_ns() - t0) / 1e9;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        size_t len = 0;
        char *msg = slurp(err, &len);
        fprintf(stderr, "bench-store: consume: `%s consume --jobs %d` exited with %d:\n%s", ledger,
                k, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), msg ? msg : "");
        free(msg);
        return 0;
    }
    if (check_results(dir, "cairn", n) || check_ledgers(dir, "cairn", n))
        return 0;
    cairn_store *cs = cairn_store_new();
    uint64_t ok = 0;
    rc = cs ? cairn_store_open(cs, store) : CAIRN_ENOMEM;
    if (!rc)
        rc = cairn_store_stats(cs, count_succeeded, &ok);
    if (rc || ok != n)
        fprintf(stderr,
                "bench-store: consume: cairn: the store holds %llu succeeded tasks of %u%s%s\n",
                (unsigned long long)ok, n, rc ? ": " : "", rc ? cairn_store_errmsg(cs) : "");
    cairn_store_free(cs);
    *flushes = bench_journal_flushes(store);
    return rc || ok != n || s <= 0 ? 0 : (double)n / s;
}

/* ------------------------------------------------------------------ the SQLite peer */

/* A string field of a flat JSON object, into buf: -1 when absent or not a string that fits. */
static int json_str(const json_t *o, const char *k, char *buf, size_t cap)
{
    const char *v = json_string_value(json_object_get(o, k));
    if (!v || strlen(v) >= cap)
        return -1;
    memcpy(buf, v, strlen(v) + 1);
    return 0;
}

static void pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static void hex(const unsigned char *b, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++)
        out[2 * i] = digits[b[i] >> 4], out[2 * i + 1] = digits[b[i] & 15];
    out[2 * n] = 0;
}

/* The example's effect (examples/ledger/ledger.c, append_line): one line appended under an
 * exclusive flock, after a newline if a killed write left the file without one, and fsynced. */
static int append_line(const char *path, const char *line)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    char buf[1400], last = '\n';
    struct stat sb;
    int ok = flock(fd, LOCK_EX) == 0 && fstat(fd, &sb) == 0;
    if (ok && S_ISREG(sb.st_mode) && sb.st_size > 0) {
        int rfd = open(path, O_RDONLY | O_CLOEXEC);
        ok = rfd >= 0 && pread(rfd, &last, 1, sb.st_size - 1) == 1;
        if (rfd >= 0)
            close(rfd);
    }
    int n = snprintf(buf, sizeof buf, "%s%s", last == '\n' ? "" : "\n", line);
    ok = ok && n > 0 && (size_t)n < sizeof buf && write(fd, buf, (size_t)n) == (ssize_t)n &&
         fsync(fd) == 0;
    close(fd);
    return ok ? 0 : -1;
}

/* One ledger task from one line, every transaction cairn's runner makes for it (see the top).
 * Writes the task ID into id. 0 or -1 (the reason in bench_peer_errmsg or on stderr). */
static int peer_task(bench_peer *p, const char *line, size_t len, char *id, size_t idcap)
{
    json_t *in = json_loadb(line, len, 0, NULL);
    char text[4096], ledger[1024];
    if (!json_is_object(in) || json_str(in, "text", text, sizeof text) ||
        json_str(in, "ledger", ledger, sizeof ledger)) {
        fprintf(stderr, "bench-store: consume: sqlite: a bad line: %.*s\n", (int)len, line);
        json_decref(in);
        return -1;
    }
    json_int_t work_ms = json_integer_value(json_object_get(in, "work_ms"));
    json_decref(in);
    /* the ID from the input's hash, as `run` derives one when the line names none */
    unsigned char h[32];
    char hx[65];
    EVP_Digest(line, len, h, NULL, EVP_sha256(), NULL);
    hex(h, 32, hx);
    snprintf(id, idcap, "ledger_%.16s", hx);
    /* the input as both stores keep it: msgpack */
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    pack_str(&pk, "text"), pack_str(&pk, text);
    pack_str(&pk, "work_ms"), msgpack_pack_int64(&pk, work_ms);
    pack_str(&pk, "ledger"), pack_str(&pk, ledger);
    uint64_t token = (uint64_t)bench_now_ns() | 1;
    int rc = bench_peer_begin(p, id, sb.data, sb.size, token);
    /* parse (compute, relaxed): its validated fields */
    if (!rc)
        rc = bench_peer_load(p, id, "parse", NULL, 0, 1) < 0;
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 5);
    pack_str(&pk, "text"), pack_str(&pk, text);
    pack_str(&pk, "work_ms"), msgpack_pack_uint64(&pk, (uint64_t)work_ms);
    pack_str(&pk, "trace"), pack_str(&pk, "");
    pack_str(&pk, "ledger"), pack_str(&pk, ledger);
    pack_str(&pk, "fail"), pack_str(&pk, "");
    if (!rc)
        rc = bench_peer_commit_ex(p, id, "parse", token, PEER_DONE, 0, sb.data, sb.size, 0);
    /* work (expensive): the text's digest and a nonce; its output is written and made durable
     * by append's intent, the next commit, as cairn carries it (runner/step.c) */
    static const char *const work_deps[] = {"parse"};
    if (!rc)
        rc = bench_peer_load(p, id, "work", work_deps, 1, 0) < 0;
    char digest[65], nonce[17];
    unsigned char nb[8];
    EVP_Digest(text, strlen(text), h, NULL, EVP_sha256(), NULL);
    hex(h, 32, digest);
    RAND_bytes(nb, sizeof nb);
    hex(nb, sizeof nb, nonce);
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 2);
    pack_str(&pk, "digest"), pack_str(&pk, digest);
    pack_str(&pk, "nonce"), pack_str(&pk, nonce);
    /* append (an effect): its resume read (work's output is the one just made), the intent
     * with work's output, flushed, the effect, then its output and the task's end, flushed */
    if (!rc)
        rc = bench_peer_load(p, id, "append", work_deps, 1, 0) < 0;
    if (!rc) /* (sb holds it until the intent has committed) */
        bench_peer_carry(p, "work", sb.data, sb.size);
    char dlv[40], row[1300];
    snprintf(row, sizeof row, "%s\1append", id);
    EVP_Digest(row, strlen(row), h, NULL, EVP_sha256(), NULL);
    memcpy(dlv, "dlv_", 4);
    hex(h, 16, dlv + 4);
    if (!rc)
        rc = bench_peer_commit_ex(p, id, "append", token, PEER_INTENT, 1, dlv, strlen(dlv), 1);
    snprintf(row, sizeof row, "%s %s\n", id, digest);
    if (!rc && append_line(ledger, row) != 0) {
        fprintf(stderr, "bench-store: consume: sqlite: cannot append to %s: %s\n", ledger,
                strerror(errno));
        rc = -1;
    }
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 1);
    pack_str(&pk, "line"), pack_str(&pk, row);
    if (!rc)
        rc = bench_peer_commit_ex(p, id, "append", token, PEER_DONE_LAST, 1, sb.data, sb.size, 1);
    msgpack_sbuffer_destroy(&sb);
    return rc ? -1 : 0;
}

/* One peer process: its own connection; takes line numbers from the shared counter until none
 * is left, and appends a result line per task to the output. Never returns. */
static void peer_child(const char *dir, char **lines, size_t *lens, uint32_t n, uint32_t *next,
                       int out)
{
    char err[512] = "";
    bench_peer *p = bench_peer_open(dir, PEER_SPLIT, 16, err, sizeof err);
    if (!p) {
        fprintf(stderr, "bench-store: consume: %s\n", err);
        _exit(1);
    }
    int rc = 0;
    for (uint32_t i; !rc && (i = __atomic_fetch_add(next, 1, __ATOMIC_RELAXED)) < n;) {
        char id[64], res[160];
        rc = peer_task(p, lines[i], lens[i], id, sizeof id);
        if (rc) {
            fprintf(stderr, "bench-store: consume: %s\n", bench_peer_errmsg(p));
            break;
        }
        int m = snprintf(res, sizeof res,
                         "{\"line\":%u,\"task\":\"%s\",\"status\":\"succeeded\",\"exit\":0}\n",
                         i + 1, id);
        rc = write(out, res, (size_t)m) != m;
    }
    bench_peer_close(p);
    _exit(rc ? 1 : 0);
}

/* K peer processes over dir/tasks.jsonl on a fresh dir/store.db: tasks/s from reading the file
 * to the last process's exit, 0 on failure. */
static double peer_run(const char *dir, int k, uint32_t n)
{
    char in[4200], out[4200], err[512] = "";
    snprintf(in, sizeof in, "%s/tasks.jsonl", dir);
    snprintf(out, sizeof out, "%s/out.jsonl", dir);
    fflush(stdout), fflush(stderr);
    int64_t t0 = bench_now_ns();
    size_t len = 0;
    char *text = slurp(in, &len);
    char **lines = calloc(n ? n : 1, sizeof *lines);
    size_t *lens = calloc(n ? n : 1, sizeof *lens);
    uint32_t got = 0;
    for (char *l = text, *nl; text && lines && lens && got < n && *l; l = nl + 1, got++) {
        if (!(nl = strchr(l, '\n')))
            break;
        lines[got] = l, lens[got] = (size_t)(nl - l);
    }
    /* consume's parent creates the store before its workers open it; so does this */
    bench_peer *p = got == n ? bench_peer_open(dir, PEER_SPLIT, 16, err, sizeof err) : NULL;
    bench_peer_close(p);
    uint32_t *next =
        mmap(NULL, sizeof *next, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int ofd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    pid_t pids[MAX_K];
    int started = 0, bad = !p || next == MAP_FAILED || ofd < 0;
    if (got != n)
        fprintf(stderr, "bench-store: consume: sqlite: %u lines in %s, %u expected\n", got, in, n);
    else if (!p)
        fprintf(stderr, "bench-store: consume: %s\n", err);
    if (!bad)
        *next = 0;
    for (; !bad && started < k; started++) {
        pid_t pid = fork();
        if (pid < 0) {
            bad = 1;
            break;
        }
        if (pid == 0)
            peer_child(dir, lines, lens, n, next, ofd);
        pids[started] = pid;
    }
    for (int i = 0; i < started; i++) {
        int st = 0;
        while (waitpid(pids[i], &st, 0) < 0 && errno == EINTR)
            ;
        bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    double s = (double)(bench_now_ns() - t0) / 1e9;
    if (ofd >= 0)
        close(ofd);
    if (next != MAP_FAILED)
        munmap(next, sizeof *next);
    free(lines), free(lens), free(text);
    if (bad || check_results(dir, "sqlite", n) || check_ledgers(dir, "sqlite", n))
        return 0;
    bench_peer *q = bench_peer_open(dir, PEER_NORMAL, 16, err, sizeof err);
    int64_t ok = q ? bench_peer_count_state(q, CAIRN_SUCCEEDED) : -1;
    if (ok != (int64_t)n)
        fprintf(stderr,
                "bench-store: consume: sqlite: the store holds %lld succeeded tasks of %u%s%s\n",
                (long long)ok, n, q ? " " : ": ", q ? bench_peer_errmsg(q) : err);
    bench_peer_close(q);
    return ok != (int64_t)n || s <= 0 ? 0 : (double)n / s;
}

/* ------------------------------------------------------------------ the section */

/* A fresh scratch directory for one run, with its task file. */
static int run_dir(const char *tmp, const char *side, int k, int round, uint32_t n, char *out,
                   size_t cap)
{
    snprintf(out, cap, "%s/consume-%s-k%02d-r%02d", tmp, side, k, round);
    bench_rm_tree(out);
    if (mkdir(out, 0700) != 0) {
        fprintf(stderr, "bench-store: consume: cannot create %s: %s\n", out, strerror(errno));
        return -1;
    }
    return write_tasks(out, n, round);
}

/* One side's run in one round: its scratch directory made, the filesystem flushed (untimed), the
 * run, the directory removed. tasks/s, 0 on failure. */
static double one_run(const char *tmp, const char *ledger, int peer, int k, int round, uint32_t n,
                      uint64_t *flushes)
{
    char dir[4200];
    if (run_dir(tmp, peer ? "sqlite" : "cairn", k, round, n, dir, sizeof dir))
        return 0;
    bench_sync_fs(tmp);
    double r = peer ? peer_run(dir, k, n) : cairn_run(ledger, dir, k, n, flushes);
    bench_rm_tree(dir);
    return r;
}

int bench_consume(const char *tmp, const char *ledger, uint32_t tasks, int rounds)
{
    static const int ks[] = {1, 4, 16};
    if (rounds > BENCH_MAX_ROUNDS)
        rounds = BENCH_MAX_ROUNDS;
    printf("\n7. consume on the ledger graph, power-loss durability (%u tasks a run, a fresh "
           "store each, %d rounds)\n",
           tasks, rounds);
    printf("  %-4s %16s %16s %8s %20s\n", "K", "cairn tasks/s", "SQLite tasks/s", "ratio",
           "cairn flushes/task");
    double at16 = 0;
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
        int k = ks[i];
        double cr[BENCH_MAX_ROUNDS], pr[BENCH_MAX_ROUNDS], ratio[BENCH_MAX_ROUNDS];
        uint64_t flushes = 0;
        for (int r = 0; r < rounds; r++) {
            uint64_t f = 0;
            /* alternate which store goes first, so a trend in the machine's load is shared */
            if (r % 2) {
                pr[r] = one_run(tmp, ledger, 1, k, r, tasks, NULL);
                cr[r] = pr[r] > 0 ? one_run(tmp, ledger, 0, k, r, tasks, &f) : 0;
            } else {
                cr[r] = one_run(tmp, ledger, 0, k, r, tasks, &f);
                pr[r] = cr[r] > 0 ? one_run(tmp, ledger, 1, k, r, tasks, NULL) : 0;
            }
            if (cr[r] <= 0 || pr[r] <= 0)
                return -1;
            ratio[r] = cr[r] / pr[r];
            flushes += f;
        }
        double med = bench_median(ratio, rounds);
        if (k == 16)
            at16 = med;
        printf("  %-4d %16.0f %16.0f %7.2fx %20.2f\n", k, bench_median(cr, rounds),
               bench_median(pr, rounds), med, (double)flushes / ((double)rounds * tasks));
    }
    printf("  target: cairn / SQLite at K = 16 >= %.1fx: %.2fx %s\n", TARGET_K16, at16,
           at16 >= TARGET_K16 ? "PASS" : "MISS");
    printf("  (cairn: `cairn-ledger consume --jobs K`, spawn to exit; SQLite: K processes, WAL, "
           "synchronous=NORMAL with FULL at cairn's 2 durable points a task, one connection "
           "each; both: 1 fsync'd effect a task; cairn flushes/task: journal flushes made, "
           "below 2 when workers share them)\n");
    return 0;
}
