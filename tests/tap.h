/* tap.h - a tiny TAP harness for meson's `protocol: 'tap'`.
 *
 * ok(cond, fmt, ...) prints "ok N - name" or "not ok N - name" with the file and
 * line of a failure; tap_done() prints the plan and returns the exit status.
 * tap_skip_all(why) prints the TAP "skip all" plan and exits 0: with `protocol: 'tap'` meson
 * (1.0, Debian 12) counts that plan as skipped, while an exit status of 77 would be an ERROR
 * there (77 means "skipped" only for meson's exitcode protocol).
 */
#ifndef CAIRN_TAP_H
#define CAIRN_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int tap__n, tap__failed;

static inline int tap__ok(int cond, const char *file, int line, const char *fmt, ...)
{
    char name[2048];
    va_list ap;
    tap__n++;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    for (char *p = name; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' '; /* a test name is one TAP line */
    printf("%sok %d - %s\n", cond ? "" : "not ", tap__n, name);
    if (!cond) {
        tap__failed++;
        printf("#   failed at %s:%d\n", file, line);
    }
    fflush(stdout);
    return cond;
}

#define ok(cond, ...) tap__ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
/* A diagnostic line; embedded newlines get their own "# " so the TAP stream stays valid. */
static inline void tap__diag(const char *fmt, ...)
{
    char buf[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    printf("# ");
    for (const char *p = buf; *p; p++) {
        putchar(*p);
        if (*p == '\n' && p[1])
            printf("# ");
    }
    printf("\n");
    fflush(stdout);
}
#define diag(...) tap__diag(__VA_ARGS__)

/* A test that cannot run here (no SMTP server, running as root, ...): "ok N # SKIP why". */
static inline void tap__skip(const char *fmt, ...)
{
    char why[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    for (char *p = why; *p; p++)
        if (*p == '\n')
            *p = ' ';
    printf("ok %d # SKIP %s\n", ++tap__n, why);
    fflush(stdout);
}
#define skip(...) tap__skip(__VA_ARGS__)

static inline int tap_done(void)
{
    printf("1..%d\n", tap__n);
    return tap__failed ? 1 : 0;
}

static inline void tap_skip_all(const char *why)
{
    printf("1..0 # SKIP %s\n", why);
    fflush(stdout);
    exit(0);
}

#endif
