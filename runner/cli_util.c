/* runner/cli_util.c - what the CLI's command files share: option values, input reading, and
 * the tables the CLI prints for people.
 *
 * Tables are rendered from the same JSON documents that --json prints, so the two views can
 * never disagree about what a task holds.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cairn.h"
#include "runner/canon.h"
#include "runner/cli.h"

int cairn__cli_opt_value(int argc, char **argv, int *i, const char *lng, const char *shrt,
                         const char **val)
{
    const char *a = argv[*i];
    size_t l = strlen(lng);
    if (strncmp(a, lng, l) == 0 && a[l] == '=') {
        *val = a + l + 1;
        return 1;
    }
    if (strcmp(a, lng) != 0 && !(shrt && strcmp(a, shrt) == 0))
        return 0;
    if (*i + 1 >= argc)
        return -1;
    *val = argv[++*i];
    return 1;
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
    if (stat(data, &st) != 0 && errno == ENOENT) {
        snprintf(err, errlen, "no store at %s (the directory holds no data.mdb)", dir);
        return CAIRN_ENOENT;
    }
    return 0;
}

void cairn__fmt_bytes(unsigned long long n, char out[32])
{
    if (n >= (1ull << 30))
        snprintf(out, 32, "%.1f GiB", n / 1073741824.0);
    else if (n >= (1ull << 20))
        snprintf(out, 32, "%.1f MiB", n / 1048576.0);
    else if (n >= 1024)
        snprintf(out, 32, "%.1f KiB", n / 1024.0);
    else
        snprintf(out, 32, "%llu bytes", n);
}

static const char *str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static void when(const json_t *o, const char *k, char out[32])
{
    json_t *v = json_object_get(o, k);
    if (!json_is_integer(v)) {
        snprintf(out, 32, "-");
        return;
    }
    time_t t = (time_t)(json_integer_value(v) / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void cairn__print_task_table(const json_t *t)
{
    if (!t)
        return;
    char c[32], u[32], n[32];
    when(t, "created_ms", c);
    when(t, "updated_ms", u);
    when(t, "next_retry_at_ms", n);
    printf("task        %s\ngraph       %s\nstatus      %s%s\nattempt     %lld   generation %lld\n"
           "payload     %s\ncreated     %s   updated %s\n",
           str(t, "task"), str(t, "graph"), str(t, "status"),
           json_is_true(json_object_get(t, "tombstone")) ? " (tombstone: outputs dropped)" : "",
           (long long)json_integer_value(json_object_get(t, "attempt")),
           (long long)json_integer_value(json_object_get(t, "generation")), str(t, "payload_hash"),
           c, u);
    if (json_is_integer(json_object_get(t, "next_retry_at_ms")))
        printf("next retry  %s\n", n);
    if (*str(t, "error")) {
        /* the runner's messages often name the step already ("step 'work' failed ...") */
        char quoted[96];
        snprintf(quoted, sizeof quoted, "'%s'", str(t, "error_step"));
        int named = !*str(t, "error_step") || strstr(str(t, "error"), quoted);
        printf("error       %s%s%s\n", named ? "" : str(t, "error_step"), named ? "" : ": ",
               str(t, "error"));
    }
    printf("\n%-20s %-9s %4s  %s\n", "STEP", "STATUS", "INV", "OUTPUT");
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(t, "steps"), i, s)
    {
        char *out = json_dumps(json_object_get(s, "output"), JSON_COMPACT | JSON_ENCODE_ANY);
        const char *o = out ? out : "null";
        size_t shown = strlen(o) > 100 ? 100 : strlen(o);
        while (shown > 0 && shown < strlen(o) && ((unsigned char)o[shown] & 0xC0) == 0x80)
            shown--; /* never cut a UTF-8 character in half */
        printf("%-20s %-9s %4lld  %.*s%s\n", str(s, "name"), str(s, "status"),
               (long long)json_integer_value(json_object_get(s, "invocations")), (int)shown, o,
               shown < strlen(o) ? "..." : "");
        /* an operator's resolution is kept in the error field, but it is no error */
        if (*str(s, "error"))
            printf("%-20s %-9s %4s  %s: %s\n", "", "", "",
                   json_is_true(json_object_get(s, "resolved")) ? "note" : "error",
                   str(s, "error"));
        free(out);
    }
}

void cairn__print_list_table(const json_t *rows)
{
    printf("%-40s %-12s %-10s %7s  %s\n", "TASK", "GRAPH", "STATUS", "ATTEMPT", "UPDATED");
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r)
    {
        char u[32];
        when(r, "updated_ms", u);
        printf("%-40s %-12s %-10s %7lld  %s\n", str(r, "task"), str(r, "graph"), str(r, "status"),
               (long long)json_integer_value(json_object_get(r, "attempt")), u);
    }
}

void cairn__print_audit_table(const json_t *rows)
{
    printf("%-20s %-9s %-9s %3s %3s %-14s %s\n", "TIME", "FROM", "TO", "ATT", "GEN", "STEP",
           "REASON");
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r)
    {
        char t[32];
        when(r, "t_ms", t);
        printf("%-20s %-9s %-9s %3lld %3lld %-14s %s\n", t, str(r, "from"), str(r, "to"),
               (long long)json_integer_value(json_object_get(r, "attempt")),
               (long long)json_integer_value(json_object_get(r, "generation")), str(r, "step"),
               str(r, "reason"));
    }
}
