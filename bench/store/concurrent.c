/* bench/store/concurrent.c - K processes finishing tasks on one store at once: group commit.
 *
 * A batch of `cairn run` processes, or the workers of one intake process, share one store. At
 * power-loss durability each task's end is a durable point; with the journal
 * (checkpoint/journal.c) a process whose commit an in-progress flush of another process already
 * covers waits for that flush instead of making its own, so K processes need fewer than K
 * flushes. SQLite (WAL, synchronous=NORMAL with FULL at each task's end: the same promise) is
 * measured beside it with the same K processes, each its own connection. Each K runs in rounds
 * that alternate the stores; the parent times from releasing all K children to the last one's
 * exit, and a ratio is the median of the rounds' ratios.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define MAX_K 16

/* The journal's flush counter: its header (journal-shm), byte 64, little-endian
 * (docs/ARCHITECTURE.md). */
uint64_t bench_journal_flushes(const char *dir)
{
    char path[4200];
    unsigned char h[72];
    snprintf(path, sizeof path, "%s/journal-shm", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? pread(fd, h, sizeof h, 0) : -1;
    if (fd >= 0)
        close(fd);
    if (n != (ssize_t)sizeof h || memcmp(h, "CAIRNJNL", 8) != 0)
        return 0;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | h[64 + i];
    return v;
}

/* One child: opens the store, waits for the start, runs `tasks` fresh tasks. Exit status 0 or
 * 1 (the reason on stderr). */
static void child(const char *dir, int peer, int me, int round, uint32_t tasks, int go)
{
    char err[512] = "";
    bench_cairn *c = NULL;
    bench_peer *p = NULL;
    if (peer)
        p = bench_peer_open(dir, PEER_SPLIT, 256, err, sizeof err);
    else
        c = bench_cairn_open(dir, CAIRN_SYNC, 0, BENCH_STEPS, 256, err, sizeof err);
    char b;
    if ((!c && !p) || read(go, &b, 1) != 1) {
        fprintf(stderr, "bench-store: concurrent: %s\n", err[0] ? err : "no start");
        _exit(1);
    }
    int rc = 0;
    for (uint32_t k = 0; !rc && k < tasks; k++) {
        char id[48];
        uint32_t n = (uint32_t)me * 100000u + (uint32_t)round * 1000u + k;
        snprintf(id, sizeof id, "k%02d-r%02d-%04u", me, round, k);
        rc = p ? bench_peer_run_task(p, id, n, BENCH_STEPS) : bench_cairn_run_task(c, id, n);
    }
    if (rc)
        fprintf(stderr, "bench-store: concurrent: %s\n",
                p ? bench_peer_errmsg(p) : bench_cairn_errmsg(c));
    if (p)
        bench_peer_close(p);
    if (c)
        bench_cairn_close(c);
    _exit(rc ? 1 : 0);
}

/* K children on `dir`, each running `tasks` tasks: steps/s over the wall time, 0 on failure. */
static double run_k(const char *dir, int peer, int k, int round, uint32_t tasks)
{
    int go[2];
    if (pipe(go) != 0)
        return 0;
    pid_t pids[MAX_K];
    int n = 0;
    fflush(stdout), fflush(stderr);
    for (; n < k; n++) {
        pid_t pid = fork();
        if (pid < 0)
            break;
        if (pid == 0) {
            close(go[1]);
            child(dir, peer, n, round, tasks, go[0]);
        }
        pids[n] = pid;
    }
    close(go[0]);
    usleep(200 * 1000); /* let every child open its store before the clock starts */
    int64_t t0 = bench_now_ns();
    for (int i = 0; i < n; i++)
        if (write(go[1], "g", 1) != 1)
            break;
    close(go[1]);
    int bad = n < k;
    for (int i = 0; i < n; i++) {
        int st = 0;
        while (waitpid(pids[i], &st, 0) < 0 && errno == EINTR)
            ;
        bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    double s = (double)(bench_now_ns() - t0) / 1e9;
    return bad || s <= 0 ? 0 : (double)k * tasks * BENCH_STEPS / s;
}

int bench_concurrent(const char *tmp, int quick, int rounds)
{
    static const int ks[] = {1, 4, 16};
    uint32_t tasks = quick ? 20 : 60;
    printf("\n6. Concurrent processes on one store, power-loss durability, 256 B outputs "
           "(%u tasks x %d steps per process, %d rounds)\n",
           tasks, BENCH_STEPS, rounds);
    printf("  %-4s %16s %16s %8s %20s\n", "K", "cairn steps/s", "SQLite steps/s", "ratio",
           "cairn flushes/task");
    int failed = 0;
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
        int k = ks[i];
        char cdir[4200], pdir[4200];
        snprintf(cdir, sizeof cdir, "%s/conc-cairn-%d", tmp, k);
        snprintf(pdir, sizeof pdir, "%s/conc-sqlite-%d", tmp, k);
        char err[512] = "";
        mkdir(cdir, 0700), mkdir(pdir, 0700);
        bench_cairn *c = bench_cairn_open(cdir, CAIRN_SYNC, 0, BENCH_STEPS, 256, err, sizeof err);
        bench_peer *p = c ? bench_peer_open(pdir, PEER_SPLIT, 256, err, sizeof err) : NULL;
        bench_cairn_close(c);
        bench_peer_close(p);
        if (!c || !p) {
            fprintf(stderr, "bench-store: concurrent: %s\n", err);
            return -1;
        }
        double cr[BENCH_MAX_ROUNDS], pr[BENCH_MAX_ROUNDS], ratio[BENCH_MAX_ROUNDS];
        uint64_t f0 = bench_journal_flushes(cdir);
        int n = 0;
        for (int r = 0; r < rounds && r < BENCH_MAX_ROUNDS && !failed; r++, n++) {
            /* alternate which store goes first, so a trend in the machine's load is shared */
            if (r % 2) {
                pr[n] = run_k(pdir, 1, k, r, tasks);
                cr[n] = run_k(cdir, 0, k, r, tasks);
            } else {
                cr[n] = run_k(cdir, 0, k, r, tasks);
                pr[n] = run_k(pdir, 1, k, r, tasks);
            }
            failed = cr[n] <= 0 || pr[n] <= 0;
            ratio[n] = failed ? 0 : cr[n] / pr[n];
        }
        if (failed)
            break;
        double flushes = (double)(bench_journal_flushes(cdir) - f0) / ((double)n * k * tasks);
        printf("  %-4d %16.0f %16.0f %7.2fx %20.2f\n", k, bench_median(cr, n), bench_median(pr, n),
               bench_median(ratio, n), flushes);
    }
    if (!failed)
        printf("  (SQLite: WAL, synchronous=NORMAL with FULL at each task's end, one connection "
               "per process, busy timeout 10 s; cairn flushes/task: journal flushes made, "
               "below 1 when processes share them)\n");
    return failed ? -1 : 0;
}
