/* runner/cli_log.c - what every command says on stderr, in one of two formats, and the
 * progress line.
 *
 * Every message for people goes through cairn__log: a level, the command, an event name, and
 * the task and step it concerns where there is one. The text format (the default) is what cairn
 * has always printed, "PROG CMD: message"; `--log-format json` (or CAIRN_LOG_FORMAT=json) makes
 * each message one JSON object on one line, with the same fields a log shipper indexes:
 *   {"time": "2026-12-02T17:09:05.123Z", "level": "error", "prog": "cairn", "cmd": "run",
 *    "event": "store_open", "task": "t1", "step": "generate", "message": "..."}
 * (task and step only when known). `-q` keeps the errors only; `-v` adds the info events (each
 * task's steps as they commit, each finished task), `-vv` the debug ones.
 *
 * A line is formatted whole and written with one write(2): the workers of `consume` and `serve`
 * share the parent's stderr, and their lines must not interleave inside one another.
 *
 * The progress line (cairn__progress_*) is for a person watching a terminal: it is drawn on
 * stderr only when stderr is a TTY, the format is text, and neither -q nor --no-progress was
 * given; it is redrawn at most five times a second with "\r" and erased before any message is
 * logged and at the end, so it never lands in a log or between a message's bytes.
 */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runner/cli.h"

static struct {
    int json;        /* --log-format json */
    int level;       /* the most verbose level shown */
    int no_progress; /* --no-progress */
    int progress_on; /* a progress line is drawn now (its width, to erase it) */
} g_log = {0, CAIRN__LOG_NOTE, 0, 0};

void cairn__log_reset(void)
{
    const char *f = getenv("CAIRN_LOG_FORMAT");
    g_log.json = f && strcmp(f, "json") == 0;
    g_log.level = CAIRN__LOG_NOTE;
    g_log.no_progress = 0;
    g_log.progress_on = 0;
}

int cairn__log_option(const char *name, const char *val, char *err, size_t errlen)
{
    if (!strcmp(name, "log-format")) {
        if (strcmp(val, "text") && strcmp(val, "json")) {
            snprintf(err, errlen, "--log-format must be text or json, not '%s'", val);
            return -1;
        }
        g_log.json = val[0] == 'j';
    } else if (!strcmp(name, "quiet")) {
        g_log.level = CAIRN__LOG_ERROR;
    } else if (!strcmp(name, "verbose")) {
        if (g_log.level < CAIRN__LOG_INFO)
            g_log.level = CAIRN__LOG_INFO;
        else
            g_log.level = CAIRN__LOG_DEBUG;
    } else if (!strcmp(name, "no-progress")) {
        g_log.no_progress = 1;
    } else {
        return 1;
    }
    return 0;
}

int cairn__log_enabled(int level) { return level <= g_log.level; }
int cairn__log_json(void) { return g_log.json; }

static const char *level_name(int level)
{
    static const char *const names[] = {"error", "warn", "note", "info", "debug"};
    return level >= 0 && level <= CAIRN__LOG_DEBUG ? names[level] : "info";
}

/* Writes all of s with as few write(2) calls as the kernel allows (one, for a line on a pipe
 * or a terminal); EINTR is retried. A stderr that is gone is not the program's problem. */
static void put_line(const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(STDERR_FILENO, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        s += w, n -= (size_t)w;
    }
}

static void progress_erase(void)
{
    if (!g_log.progress_on)
        return;
    put_line("\r\033[K", 4);
    g_log.progress_on = 0;
}

static void iso_time(char *buf, size_t n)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t k = strftime(buf, n, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + k, n - k, ".%03ldZ", ts.tv_nsec / 1000000);
}

void cairn__logv(int level, const char *cmd, const char *event, const char *task, const char *step,
                 const char *fmt, va_list ap)
{
    if (!cairn__log_enabled(level))
        return;
    char msg[4096];
    vsnprintf(msg, sizeof msg, fmt, ap);
    progress_erase();
    if (!g_log.json) {
        char line[4300];
        int n = snprintf(line, sizeof line, "%s%s%s: %s\n", cairn__cli_prog, cmd ? " " : "",
                         cmd ? cmd : "", msg);
        if (n >= (int)sizeof line) { /* cut: keep the newline */
            n = (int)sizeof line - 1;
            line[n - 1] = '\n';
        }
        put_line(line, (size_t)n);
        return;
    }
    char when[40];
    iso_time(when, sizeof when);
    json_t *j = json_object();
    if (!j)
        return;
    json_object_set_new(j, "time", json_string(when));
    json_object_set_new(j, "level", json_string(level_name(level)));
    json_object_set_new(j, "prog", json_string(cairn__cli_prog));
    if (cmd)
        json_object_set_new(j, "cmd", json_string(cmd));
    json_object_set_new(j, "event", json_string(event ? event : "message"));
    if (task && *task)
        json_object_set_new(j, "task", json_string(task));
    if (step && *step)
        json_object_set_new(j, "step", json_string(step));
    /* a message may hold bytes a task input brought: jansson refuses invalid UTF-8, so such a
     * message is kept as its bytes' escape-free approximation rather than dropped */
    json_t *m = json_string(msg);
    if (!m) {
        for (char *p = msg; *p; p++)
            if ((unsigned char)*p >= 0x80)
                *p = '?';
        m = json_string(msg);
    }
    json_object_set_new(j, "message", m ? m : json_string(""));
    char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    json_decref(j);
    if (!s)
        return;
    size_t n = strlen(s);
    char *line = malloc(n + 2);
    if (line) {
        memcpy(line, s, n);
        line[n] = '\n';
        put_line(line, n + 1);
        free(line);
    }
    free(s);
}

void cairn__log(int level, const char *cmd, const char *event, const char *task, const char *step,
                const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cairn__logv(level, cmd, event, task, step, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------ the progress line */

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void cairn__progress_start(cairn__progress *p, const char *what, const char *unit)
{
    memset(p, 0, sizeof *p);
    p->what = what;
    p->unit = unit;
    p->on = !g_log.no_progress && !g_log.json && g_log.level >= CAIRN__LOG_NOTE &&
            isatty(STDERR_FILENO);
    p->t0 = mono_s();
}

static void fmt_duration(char *buf, size_t n, double s)
{
    if (s < 0 || s > 99 * 3600.0) {
        snprintf(buf, n, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

void cairn__progress_line(const cairn__progress *p, double now, char *buf, size_t n)
{
    double el = now - p->t0;
    uint64_t fin = p->done + p->failed + p->in_doubt;
    double rate = el > 0 ? (double)fin / el : 0;
    /* "retry: 12 of 40 done, 1 failed, 0 in doubt, 3.1/s, ETA 0:09" or, with a unit,
     * "generate: 120 of 256 tokens, 30.2/s, ETA 0:04" */
    int k = snprintf(buf, n, "%s: %llu", p->what, (unsigned long long)p->done);
    if (p->total)
        k += snprintf(buf + k, n - (size_t)k, " of %llu", (unsigned long long)p->total);
    if (p->unit == NULL) /* tasks: the three outcomes */
        k += snprintf(buf + k, n - (size_t)k, " done, %llu failed, %llu in doubt",
                      (unsigned long long)p->failed, (unsigned long long)p->in_doubt);
    else
        k += snprintf(buf + k, n - (size_t)k, " %s", p->unit);
    k += snprintf(buf + k, n - (size_t)k, ", %.1f/s", rate);
    /* the ETA from the finished share: of the count when the total is known, else of the
     * bytes read when the input's size is (a file of tasks) */
    double share = p->total         ? (double)fin / (double)p->total
                   : p->bytes_total ? (double)p->bytes_done / (double)p->bytes_total
                                    : -1;
    if (share > 0 && share <= 1 && el > 1) {
        char eta[32];
        fmt_duration(eta, sizeof eta, el / share - el);
        snprintf(buf + k, n - (size_t)k, ", ETA %s", eta);
    }
}

void cairn__progress_tick(cairn__progress *p, int force)
{
    if (!p->on)
        return;
    double now = mono_s();
    if (!force && now - p->last < 0.2)
        return;
    p->last = now;
    char line[256];
    line[0] = '\r';
    cairn__progress_line(p, now, line + 1, sizeof line - 8);
    size_t n = strlen(line);
    memcpy(line + n, "\033[K", 4); /* erase what a longer line before left */
    put_line(line, n + 3);
    g_log.progress_on = 1;
}

void cairn__progress_end(cairn__progress *p)
{
    if (p->on)
        progress_erase();
    p->on = 0;
}
