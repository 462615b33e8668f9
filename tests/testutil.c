/* testutil.c - process and file helpers for tests that drive real binaries (see testutil.h).
 *
 * Children are started with fork + execve in their own process group so that a test can kill a
 * runner together with the child it forked for an isolated step. Output is captured through
 * pipes drained with poll() while the child runs (a child writing more than a pipe buffer must
 * never block on a test that only reads after exit).
 */
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static void die(const char *what)
{
    fprintf(stdout, "Bail out! testutil: %s: %s\n", what, strerror(errno));
    fflush(stdout);
    _exit(99);
}

char *tu_fmt(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0)
        die("vasprintf");
    return s;
}

int64_t tu_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void tu_sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

void tu_sleep_ms(int ms) { tu_sleep_us((long)ms * 1000); }

const char *tu_env(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

int tu_contains(const char *s, const char *needle) { return s && needle && strstr(s, needle); }

void tu_result_free(tu_result *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

/* environ plus the extra "K=V" entries (which override same-named ones). */
static char **make_env(const char *const *extra)
{
    size_t n = 0, m = 0;
    while (environ[n])
        n++;
    while (extra && extra[m])
        m++;
    char **e = calloc(n + m + 1, sizeof *e);
    if (!e)
        die("calloc");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int overridden = 0;
        const char *eq = strchr(environ[i], '=');
        size_t klen = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        for (size_t j = 0; j < m && !overridden; j++)
            overridden = strncmp(extra[j], environ[i], klen) == 0 && extra[j][klen] == '=';
        if (!overridden)
            e[k++] = environ[i];
    }
    for (size_t j = 0; j < m; j++)
        e[k++] = (char *)extra[j];
    return e;
}

static int status_code(int st)
{
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return -1;
}

/* fork + exec in a new process group with the given fds on 0/1/2 (closing the others). */
static pid_t start(const char *const *argv, const char *const *env_extra, int in, int out, int err)
{
    char **env = make_env(env_extra);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        setpgid(0, 0);
        signal(SIGPIPE, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
            _exit(127);
        long maxfd = sysconf(_SC_OPEN_MAX);
        for (int fd = 3; fd < (maxfd > 0 && maxfd < 4096 ? maxfd : 4096); fd++)
            close(fd);
        execve(argv[0], (char *const *)argv, env);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid); /* also from the parent: no race with a kill right after */
    free(env);
    return pid;
}

typedef struct sink {
    char *buf;
    size_t len, cap;
} sink;

static void sink_add(sink *s, const char *p, size_t n)
{
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 4096;
        while (cap < s->len + n + 1)
            cap *= 2;
        char *b = realloc(s->buf, cap);
        if (!b)
            die("realloc");
        s->buf = b, s->cap = cap;
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
    s->buf[s->len] = 0;
}

int tu_run(tu_result *r, const char *const *argv, const char *const *env_extra,
           const char *stdin_data, size_t stdin_len, int timeout_ms)
{
    memset(r, 0, sizeof *r);
    int po[2], pe[2], pi[2];
    if (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC) || pipe2(pi, O_CLOEXEC))
        die("pipe");
    pid_t pid = start(argv, env_extra, pi[0], po[1], pe[1]);
    close(pi[0]), close(po[1]), close(pe[1]);
    sink so = {0}, se = {0};
    sink_add(&so, "", 0), sink_add(&se, "", 0);
    size_t in_off = 0;
    int in_fd = pi[1];
    if (!stdin_data || stdin_len == 0) {
        close(in_fd);
        in_fd = -1;
    } else {
        fcntl(in_fd, F_SETFL, O_NONBLOCK);
    }
    void (*old_pipe)(int) = signal(SIGPIPE, SIG_IGN);
    int64_t deadline = tu_now_ms() + timeout_ms;
    int open_fds = 2;
    while (open_fds > 0 || in_fd >= 0) {
        struct pollfd pf[3];
        int n = 0, io = -1, ie = -1, ii = -1;
        if (po[0] >= 0)
            io = n, pf[n++] = (struct pollfd){.fd = po[0], .events = POLLIN};
        if (pe[0] >= 0)
            ie = n, pf[n++] = (struct pollfd){.fd = pe[0], .events = POLLIN};
        if (in_fd >= 0)
            ii = n, pf[n++] = (struct pollfd){.fd = in_fd, .events = POLLOUT};
        int64_t left = deadline - tu_now_ms();
        if (left <= 0) {
            r->timed_out = 1;
            tu_kill_group(pid, SIGKILL);
            break;
        }
        int pr = poll(pf, (nfds_t)n, (int)(left > 200 ? 200 : left));
        if (pr < 0 && errno != EINTR)
            die("poll");
        if (pr <= 0)
            continue;
        char buf[65536];
        if (io >= 0 && pf[io].revents) {
            ssize_t k = read(po[0], buf, sizeof buf);
            if (k > 0)
                sink_add(&so, buf, (size_t)k);
            else if (k == 0 || errno != EINTR)
                close(po[0]), po[0] = -1, open_fds--;
        }
        if (ie >= 0 && pf[ie].revents) {
            ssize_t k = read(pe[0], buf, sizeof buf);
            if (k > 0)
                sink_add(&se, buf, (size_t)k);
            else if (k == 0 || errno != EINTR)
                close(pe[0]), pe[0] = -1, open_fds--;
        }
        if (ii >= 0 && pf[ii].revents) {
            ssize_t k = write(in_fd, stdin_data + in_off, stdin_len - in_off);
            if (k > 0)
                in_off += (size_t)k;
            if ((k < 0 && errno != EAGAIN && errno != EINTR) || in_off == stdin_len) {
                close(in_fd);
                in_fd = -1;
            }
        }
    }
    if (in_fd >= 0)
        close(in_fd);
    if (po[0] >= 0)
        close(po[0]);
    if (pe[0] >= 0)
        close(pe[0]);
    signal(SIGPIPE, old_pipe);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    r->code = status_code(st);
    r->out = so.buf, r->out_len = so.len;
    r->err = se.buf, r->err_len = se.len;
    return r->code;
}

int tu_runl(tu_result *r, int timeout_ms, const char *arg0, ...)
{
    const char *argv[64];
    int n = 0;
    argv[n++] = arg0;
    va_list ap;
    va_start(ap, arg0);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && n < 63)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    return tu_run(r, argv, NULL, NULL, 0, timeout_ms);
}

pid_t tu_spawn(const char *const *argv, const char *const *env_extra, const char *out_path,
               const char *err_path)
{
    int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int out =
        open(out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int err =
        open(err_path ? err_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (in < 0 || out < 0 || err < 0)
        die("open for spawn");
    pid_t pid = start(argv, env_extra, in, out, err);
    close(in), close(out), close(err);
    return pid;
}

int tu_poll_exit(pid_t pid, int *code)
{
    int st;
    pid_t w;
    while ((w = waitpid(pid, &st, WNOHANG)) < 0 && errno == EINTR)
        ;
    if (w == pid) {
        if (code)
            *code = status_code(st);
        return 1;
    }
    return 0;
}

int tu_wait(pid_t pid, int timeout_ms)
{
    int64_t deadline = tu_now_ms() + timeout_ms;
    int code;
    for (;;) {
        if (tu_poll_exit(pid, &code))
            return code;
        if (timeout_ms >= 0 && tu_now_ms() >= deadline)
            return -2;
        tu_sleep_ms(2);
    }
}

void tu_kill_group(pid_t pid, int sig)
{
    if (pid <= 0)
        return;
    kill(-pid, sig);
    kill(pid, sig);
}

void tu_kill_wait(pid_t pid)
{
    tu_kill_group(pid, SIGKILL);
    tu_wait(pid, -1);
}

char *tu_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    sink s = {0};
    sink_add(&s, "", 0);
    char buf[65536];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0)
        sink_add(&s, buf, k);
    fclose(f);
    if (len)
        *len = s.len;
    return s.buf;
}

int tu_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Calls fn for each line (without its newline); returns the count of lines fn accepted. */
static int count_matching(const char *path, const char *s, int exact)
{
    char *b = tu_read_file(path, NULL);
    if (!b)
        return 0;
    int n = 0;
    size_t sl = s ? strlen(s) : 0;
    for (char *p = b; *p;) {
        char *nl = strchr(p, '\n');
        size_t ll = nl ? (size_t)(nl - p) : strlen(p);
        if (!s || (exact ? ll == sl && memcmp(p, s, sl) == 0 : ll >= sl && memcmp(p, s, sl) == 0))
            n++;
        p += ll + (nl ? 1 : 0);
    }
    free(b);
    return n;
}

int tu_count_lines(const char *path, const char *prefix) { return count_matching(path, prefix, 0); }

int tu_count_exact(const char *path, const char *line) { return count_matching(path, line, 1); }

char *tu_mkdtemp(const char *tag)
{
    char *t = tu_fmt("%s/cairn-%s-XXXXXX", tu_env("TMPDIR", "/tmp"), tag);
    if (!mkdtemp(t))
        die("mkdtemp");
    return t;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)ftw;
    if (flag == FTW_DP || flag == FTW_D)
        rmdir(p);
    else
        unlink(p);
    return 0;
}

static int chmod_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)ftw;
    if (flag == FTW_D || flag == FTW_DNR)
        chmod(p, 0700);
    return 0;
}

void tu_rm_rf(const char *path)
{
    if (!path)
        return;
    chmod(path, 0700);
    nftw(path, chmod_cb, 16, FTW_PHYS);
    nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

tu_scene tu_scene_new(const char *root, const char *name)
{
    tu_scene s;
    s.dir = tu_fmt("%s/%s", root, name);
    mkdir(s.dir, 0755);
    s.store = tu_fmt("%s/store", s.dir);
    s.trace = tu_fmt("%s/trace", s.dir);
    s.ledger = tu_fmt("%s/ledger", s.dir);
    return s;
}

void tu_scene_free(tu_scene *s)
{
    free(s->dir), free(s->store), free(s->trace), free(s->ledger);
    memset(s, 0, sizeof *s);
}
