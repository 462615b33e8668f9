/* test_readonly.c - a user who may only read a store can show, list, audit, stats and check it,
 * and a command that writes is refused (74, saying so) with the store unchanged.
 *
 * Real processes on real stores (a sync and a nosync one of cairn-ledger). As root the commands
 * run as the user nobody (uid 65534) against files the owner made readable to all; otherwise the
 * store's files and directory lose their write bits. Before the store learned to open read-only,
 * every command failed to open the `synced` marker (or LMDB's lock file) for writing.
 */
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_common.h"

static char *D;

/* Runs `cairn-ledger args... --store st` as a user who may only read st; its stdout and stderr
 * go to out/err files. Returns the exit code (128 + signal). */
static int run_reader(const char *st, const char *stdin_text, char **out, char **err,
                      const char *const *args)
{
    char *o = tu_fmt("%s/out", D), *e = tu_fmt("%s/err", D), *in = tu_fmt("%s/in", D);
    tu_write_file(in, stdin_text ? stdin_text : "", stdin_text ? strlen(stdin_text) : 0);
    chmod(in, 0644);
    pid_t pid = fork();
    if (pid == 0) {
        int fo = open(o, O_WRONLY | O_CREAT | O_TRUNC, 0666),
            fe = open(e, O_WRONLY | O_CREAT | O_TRUNC, 0666), fi = open(in, O_RDONLY);
        dup2(fi, 0), dup2(fo, 1), dup2(fe, 2);
        if (geteuid() == 0 && (setgroups(0, NULL) || setgid(65534) || setuid(65534)))
            _exit(120);
        const char *argv[24];
        int n = 0;
        argv[n++] = LEDGER;
        for (int i = 0; args[i] && n < 20; i++)
            argv[n++] = args[i];
        argv[n++] = "--store";
        argv[n++] = st;
        argv[n] = NULL;
        execv(LEDGER, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    *out = tu_read_file(o, NULL);
    *err = tu_read_file(e, NULL);
    free(o), free(e), free(in);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Makes the store readable, not writable, by the reader. */
static void read_only(const char *st)
{
    const char *names[] = {"data.mdb", "lock.mdb", "synced", "durability", "created", "map.lock"};
    int root = geteuid() == 0;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char *p = tu_fmt("%s/%s", st, names[i]);
        chmod(p, root ? 0644 : 0444);
        free(p);
    }
    chmod(st, root ? 0755 : 0555);
}

static char *digest(const char *st)
{
    char *p = tu_fmt("%s/data.mdb", st);
    size_t n = 0;
    char *b = tu_read_file(p, &n);
    unsigned long long h = 1469598103934665603ull;
    for (size_t i = 0; b && i < n; i++)
        h = (h ^ (unsigned char)b[i]) * 1099511628211ull;
    free(b), free(p);
    return tu_fmt("%zu:%llx", n, h);
}

static void one_store(const char *name, int nosync)
{
    char *st = tu_fmt("%s/%s", D, name), *ledger = tu_fmt("%s/%s.ledger", D, name);
    tu_result r;
    if (nosync) {
        cli(&r, LEDGER, st, "init", "--nosync", NULL);
        tu_result_free(&r);
    }
    int bad = 0;
    for (int i = 1; i <= 3; i++) {
        char *in = tu_fmt("{\"text\": \"item %d\", \"ledger\": \"%s\"}", i, ledger);
        char *path = write_input(D, "in.json", in);
        char *id = tu_fmt("t%d", i);
        bad += cli(&r, LEDGER, st, "run", "--graph", "ledger", "--task", id, "--input", path,
                   NULL) != 0;
        tu_result_free(&r);
        free(in), free(path), free(id);
    }
    /* what the owner sees, to compare with */
    tu_result own;
    cli(&own, LEDGER, st, "show", "t2", "--json", NULL);
    ok(bad == 0 && own.code == 0, "%s: 3 tasks done by the owner", name);
    read_only(st);
    char *before = digest(st);

    static const char *const reads[][4] = {{"show", "t2", "--json", NULL},
                                           {"list", NULL},
                                           {"audit", "t1", NULL},
                                           {"stats", NULL},
                                           {"check", NULL}};
    for (size_t i = 0; i < sizeof reads / sizeof *reads; i++) {
        char *out, *err;
        int code = run_reader(st, NULL, &out, &err, reads[i]);
        int same = i != 0 || (out && own.out && strcmp(out, own.out) == 0);
        ok(code == 0 && same, "%s: `%s` works for a user who may only read the store (%d: %s)",
           name, reads[i][0], code, first_line(err ? err : ""));
        free(out), free(err);
    }
    static const char *const run[] = {"run", "--graph", "ledger", "--task", "t9", NULL};
    char *out, *err;
    int code = run_reader(st, "{\"text\": \"new\"}", &out, &err, run);
    ok(code == 74 && err && strstr(err, "read-only") && strstr(err, st),
       "%s: a run is refused with 74, saying the store is read-only (%s)", name,
       first_line(err ? err : ""));
    free(out), free(err);
    char *after = digest(st);
    ok(strcmp(before, after) == 0 && tu_count_lines(ledger, NULL) == 3,
       "%s: data.mdb unchanged (%s), 3 effects", name, after);
    free(before), free(after);
    tu_result_free(&own);
    chmod(st, 0700);
    free(st), free(ledger);
}

int main(void)
{
    cli_init();
    D = tu_mkdtemp("readonly");
    chmod(D, 0755); /* the reader must reach the store, and write its output files */
    char *o = tu_fmt("%s/out", D), *e = tu_fmt("%s/err", D);
    tu_write_file(o, "", 0), tu_write_file(e, "", 0);
    chmod(o, 0666), chmod(e, 0666);
    free(o), free(e);
    one_store("sync", 0);
    one_store("nosync", 1);
    if (!getenv("CAIRN_KEEP_TMP"))
        tu_rm_rf(D);
    return tap_done();
}
