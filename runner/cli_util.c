/* runner/cli_util.c - what all the CLI's command files share, the engine's commands included:
 * numeric option values, input reading, the store-exists check, and the one table from CAIRN_E*
 * codes to exit codes (the options themselves: runner/cli_opt.c).
 *
 * Exit codes follow sysexits(3) so that cron, systemd and shell scripts can tell "fix the command
 * line" (64) from "fix the input" (65, 66), "an operator must look" (69), "the store is broken"
 * (74) and "try again later" (75); every command maps its result through cairn__exit_code, so one
 * error code means one exit code everywhere.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cairn.h"
#include "checkpoint/store.h"
#include "common/json.h"
#include "runner/cli.h"

int cairn__exit_code(int err)
{
    switch (err) {
    case 0:
        return CAIRN__EX_OK;
    case CAIRN_EJSON:
    case CAIRN_ETASKID:
    case CAIRN_ETOOBIG:
    case CAIRN_EGRAPHCHANGED:
    case CAIRN_ESTATE:
    case CAIRN_EFORMAT:
    case CAIRN_EUNSUPPORTED:
    case CAIRN_ECONTEXT:
        return CAIRN__EX_DATAERR;
    case CAIRN_ENOENT:
    case CAIRN_ENOTFOUND:
        return CAIRN__EX_NOINPUT;
    case CAIRN_EDEAD:
    case CAIRN_EINDOUBT:
    case CAIRN_ENODEVICE:
        return CAIRN__EX_UNAVAILABLE;
    case CAIRN_EIO:
    case CAIRN_EFULL:
    case CAIRN_ECORRUPT:
    case CAIRN_ESCHEMA:
        return CAIRN__EX_IOERR;
    case CAIRN_ETRANSIENT:
    case CAIRN_EBUSY:
    case CAIRN_ETENANT:
    case CAIRN_EINTR:
    case CAIRN_ETIMEOUT:
        return CAIRN__EX_TEMPFAIL;
    case CAIRN_ECONFLICT:
        return CAIRN__EX_CONFLICT;
    case CAIRN_ENOGRAPH:
    case CAIRN_EINVAL:
        return CAIRN__EX_USAGE;
    default:
        return CAIRN__EX_SOFTWARE;
    }
}

int cairn__exit_code_engine(int err)
{
    switch (err) {
    case CAIRN_EUNSUPPORTED: /* the file is valid, the feature missing */
    case CAIRN_ECUDA:
        return CAIRN__EX_UNAVAILABLE;
    case CAIRN_EINVAL: /* from the engine, a caller's bug: usage errors are caught before */
        return CAIRN__EX_SOFTWARE;
    default:
        return cairn__exit_code(err);
    }
}

int cairn__cli_parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int cairn__read_input(const char *path, char **buf, size_t *len, char *err, size_t errlen)
{
    int is_stdin = strcmp(path, "-") == 0;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    *buf = NULL;
    *len = 0;
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return CAIRN_ENOENT;
    }
    /* fopen() opens a directory for reading on Linux; say what it is rather than "read error" */
    struct stat st;
    if (!is_stdin && fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        snprintf(err, errlen, "%s: is a directory, not an input file", path);
        return CAIRN_ENOENT;
    }
    size_t cap = 4096, n = 0;
    char *b = malloc(cap + 1);
    int rc = 0, read_errno = 0;
    while (b) {
        if (n == cap) {
            if (cap > CAIRN__MAX_INPUT) {
                rc = CAIRN_ETOOBIG;
                break;
            }
            cap *= 2;
            char *nb = realloc(b, cap + 1);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
        }
        size_t r = fread(b + n, 1, cap - n, f);
        n += r;
        if (r == 0) {
            if (ferror(f)) {
                read_errno = errno;
                rc = CAIRN_ENOENT;
            }
            break;
        }
    }
    if (!is_stdin)
        fclose(f);
    if (!b) {
        snprintf(err, errlen, "%s: out of memory", path);
        return CAIRN_ENOMEM;
    }
    if (!rc && n > CAIRN__MAX_INPUT)
        rc = CAIRN_ETOOBIG;
    if (rc) {
        if (rc == CAIRN_ETOOBIG)
            snprintf(err, errlen, "%s: input is larger than the limit of %u bytes", path,
                     CAIRN__MAX_INPUT);
        else
            snprintf(err, errlen, "%s: read error: %s", path, strerror(read_errno));
        free(b);
        return rc;
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return 0;
}

int cairn__cli_store_exists(const char *dir, char *err, size_t errlen)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno != ENOENT)
            return 0; /* ENOTDIR, EACCES: cairn_store_open names those */
        snprintf(err, errlen, "no store at %s (nothing there; `run` creates a store)", dir);
        return CAIRN_ENOENT;
    }
    if (!S_ISDIR(st.st_mode))
        return 0;
    char data[4096];
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    if (stat(data, &st) != 0 && errno == ENOENT && !cairn__store_was_created(dir)) {
        snprintf(err, errlen, "no store at %s (the directory holds no data.mdb)", dir);
        return CAIRN_ENOENT;
    }
    return 0;
}

/* ------------------------------------------------------------------ stops into a self-pipe */

static int g_stop_pipe[2] = {-1, -1};

static void on_stop(int sig)
{
    (void)sig;
    int e = errno;
    ssize_t w = write(g_stop_pipe[1], "s", 1);
    (void)w;
    errno = e;
}

static void set_stops(void (*stop)(int), void (*broken_pipe)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = stop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = broken_pipe;
    sigaction(SIGPIPE, &sa, NULL);
}

int cairn__cli_stops_catch(void)
{
    if (g_stop_pipe[0] < 0) {
        if (pipe(g_stop_pipe))
            return -1;
        fcntl(g_stop_pipe[0], F_SETFD, FD_CLOEXEC);
        fcntl(g_stop_pipe[1], F_SETFD, FD_CLOEXEC);
        fcntl(g_stop_pipe[1], F_SETFL, O_NONBLOCK);
    }
    set_stops(on_stop, SIG_IGN);
    return g_stop_pipe[0];
}

int cairn__cli_stops_wait(int fd, int tick_ms, int (*tick)(void *arg), void *arg)
{
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, tick ? tick_ms : -1) > 0)
            return 0;
        int rc = tick ? tick(arg) : 0;
        if (rc)
            return rc;
    }
}

void cairn__cli_stops_default(void) { set_stops(SIG_DFL, SIG_DFL); }

void cairn__cli_stops_close(void)
{
    for (int i = 0; i < 2; i++)
        if (g_stop_pipe[i] >= 0) {
            close(g_stop_pipe[i]);
            g_stop_pipe[i] = -1;
        }
}
