/* runner/lease.c - who owns a task, and whether that owner still lives.
 *
 * A lease names its owner by (host, pid, process start time) and has an expiry. It ends when it
 * expires, whoever holds it (a hung or stopped owner must not keep its task for ever), or
 * earlier when the owner is seen to be gone: on the same host a dead pid, or a pid now used by
 * a process with another start time, frees the task at once. Leases are renewed in the same
 * transaction that commits each step, with each progress record, and by the runner while it
 * waits for a step that runs in a child (every step with a timeout), so a working owner keeps
 * its lease. An in-process step that runs longer than the lease without saving progress can be
 * taken over; that is what timeouts are for. Every commit checks the lease token: a process
 * that lost its lease can never commit.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "runner/internal.h"

/* Field 22 of /proc/PID/stat: start time in clock ticks since boot (0 if unreadable). */
static uint64_t proc_start(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command name may contain spaces and parentheses */
    if (!p)
        return 0;
    unsigned long long v = 0;
    int field = 2;
    for (p++; *p && field < 22; p++)
        if (*p == ' ')
            field++;
    if (field == 22)
        sscanf(p, "%llu", &v);
    return v;
}

void cairn__owner_self(cairn__owner *o)
{
    memset(o, 0, sizeof *o);
    gethostname(o->host, sizeof o->host - 1);
    o->pid = (int32_t)getpid();
    o->start = proc_start(o->pid);
}

int cairn__owner_alive(const cairn__owner *o)
{
    char host[64] = {0};
    gethostname(host, sizeof host - 1);
    if (strcmp(host, o->host) != 0)
        return 1; /* cannot tell from here: the expiry decides */
    if (o->pid <= 0)
        return 0;
    if (kill(o->pid, 0) != 0 && errno == ESRCH)
        return 0;
    uint64_t start = proc_start(o->pid);
    return start == 0 || o->start == 0 || start == o->start;
}

/* Live: held, not expired, and its owner not seen to be gone (which only this host can see). */
int cairn__lease_live(const cairn__task_rec *t, int64_t now_ms)
{
    return t->lease_token != 0 && t->lease_expires_ms > now_ms && cairn__owner_alive(&t->owner);
}

uint64_t cairn__random_u64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        v = (uint64_t)ts.tv_nsec * 6364136223846793005ull ^ (uint64_t)getpid() << 32;
    }
    return v ? v : 1;
}
