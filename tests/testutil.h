/* testutil.h - process and file helpers for tests that drive real binaries.
 *
 * Integration and crash tests run the real CLI as child processes against real stores in temp
 * dirs: they need to spawn a command with argv and extra environment, capture its stdout,
 * stderr and exit code, kill it (its whole process group: a step with a timeout runs in a
 * forked child of the runner), wait with a timeout, and read files line by line. Everything
 * here aborts the test with a diagnostic on an impossible system error (fork failing), since a
 * test cannot continue meaningfully; ordinary failures are returned for the test to assert on.
 */
#ifndef CAIRN_TESTUTIL_H
#define CAIRN_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Result of tu_run(). `code` is the exit status, or 128+signal if the child was killed by a
 * signal (like a shell's $?), or -1 if it could not be started. out/err are NUL-terminated
 * malloc'd copies of everything the child wrote (never NULL after tu_run). */
typedef struct tu_result {
    int code;
    int timed_out; /* the child ran past the timeout and was SIGKILLed */
    char *out, *err;
    size_t out_len, err_len;
} tu_result;

void tu_result_free(tu_result *r);

/* Runs argv (argv[0] a path) to completion with `env_extra` ("K=V" strings, NULL-terminated,
 * may be NULL) added to the environment, `stdin_data` (may be NULL: /dev/null) on stdin.
 * Kills the process group after timeout_ms. Returns r->code. */
int tu_run(tu_result *r, const char *const *argv, const char *const *env_extra,
           const char *stdin_data, size_t stdin_len, int timeout_ms);

/* Convenience: tu_run with a NULL-terminated list of arguments, no extra env, no stdin. */
int tu_runl(tu_result *r, int timeout_ms, const char *arg0, ...);

/* Starts argv in the background in a new process group (pgid = pid), stdout/stderr to the
 * given files (NULL: /dev/null), stdin from /dev/null. Returns the pid or -1. */
pid_t tu_spawn(const char *const *argv, const char *const *env_extra, const char *out_path,
               const char *err_path);

/* Waits for pid up to timeout_ms (< 0: forever). Returns the exit status in the tu_result
 * convention (code or 128+signal), or -2 on timeout (the child still runs). */
int tu_wait(pid_t pid, int timeout_ms);

/* 1 if pid has exited (reaps it, storing the status in *code if not NULL), 0 if it runs. */
int tu_poll_exit(pid_t pid, int *code);

/* Sends sig to the whole process group of a tu_spawn'ed child (and to the pid itself). */
void tu_kill_group(pid_t pid, int sig);

/* Kills the group with SIGKILL and reaps the child. */
void tu_kill_wait(pid_t pid);

/* Whole file, NUL-terminated, malloc'd; NULL if it cannot be read (errno set). */
/* A test scenario's files under root/name (the directory is made): a store, and the ledger
 * example's trace and ledger files (examples/ledger: "work <task>" a run of its expensive step,
 * "<task> <digest>" an effect that happened). Free with tu_scene_free. */
typedef struct tu_scene {
    char *dir, *store, *trace, *ledger;
} tu_scene;
tu_scene tu_scene_new(const char *root, const char *name);
void tu_scene_free(tu_scene *s);

char *tu_read_file(const char *path, size_t *len);
/* Writes (creates/truncates) a file; 0 or -1. */
int tu_write_file(const char *path, const void *data, size_t len);
/* Number of lines of the file (0 if missing); with prefix, only lines starting with it. */
int tu_count_lines(const char *path, const char *prefix);
/* Number of lines equal to `line` exactly (without the newline). */
int tu_count_exact(const char *path, const char *line);

/* A fresh temp directory (under $TMPDIR or /tmp), malloc'd path; aborts on failure. */
char *tu_mkdtemp(const char *tag);
/* rm -rf path (restores permissions on the way, so chmod 000 dirs go too). */
void tu_rm_rf(const char *path);

/* malloc'd printf; aborts on ENOMEM. */
char *tu_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

int64_t tu_now_ms(void);
void tu_sleep_ms(int ms);
/* Sleeps a number of microseconds. */
void tu_sleep_us(long us);

/* Environment variable or a default. */
const char *tu_env(const char *name, const char *dflt);

/* 1 if s contains needle (NULL-safe). */
int tu_contains(const char *s, const char *needle);

#endif
