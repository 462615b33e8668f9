/* test_damage.c - a store whose data.mdb was truncated, emptied, removed or put back from an
 * older copy is refused by every command, with exit 74 and a message naming the file: never a
 * signal (LMDB mapping a file shorter than its pages dies of SIGBUS), never an empty store in its
 * place (which would run every task, and its effects, again), and nothing written to it.
 *
 * Real processes on real stores: 30 tasks of cairn-ledger (each appends a line to a ledger file:
 * its effect), then the damage, then each command; the ledger must keep its 30 lines and the
 * damaged file its bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_common.h"

#define N_TASKS 30

static char *D;

/* The commands a user may run on the damaged store; all must refuse it alike. */
static const char *const cmds[][8] = {
    {"list", NULL},
    {"show", "t1", NULL},
    {"stats", NULL},
    {"audit", "t1", NULL},
    {"gc", NULL},
    {"retry", "--graph", "ledger", NULL},
    {"run", "--graph", "ledger", "--task", "t1", "--input", "@IN@", NULL},
    {"run", "--graph", "ledger", "--task", "new-task", "--input", "@IN@", NULL},
};
#define N_CMDS (sizeof cmds / sizeof *cmds)

static char *input_path(int i) { return tu_fmt("%s/in%d.json", D, i); }

/* A store of N_TASKS succeeded tasks; returns its directory (the ledger is <dir>.ledger). */
static char *populated(const char *name, int nosync)
{
    char *st = tu_fmt("%s/%s", D, name), *ledger = tu_fmt("%s.ledger", st);
    tu_result r;
    if (nosync) {
        cli(&r, LEDGER, st, "init", "--nosync", NULL);
        tu_result_free(&r);
    }
    int bad = 0;
    for (int i = 1; i <= N_TASKS; i++) {
        char *in = input_path(i);
        char *text =
            tu_fmt("{\"text\": \"item %d\", \"work_ms\": 0, \"ledger\": \"%s\"}", i, ledger);
        tu_write_file(in, text, strlen(text));
        char *id = tu_fmt("t%d", i);
        if (cli(&r, LEDGER, st, "run", "--graph", "ledger", "--task", id, "--input", in, NULL))
            bad++;
        tu_result_free(&r);
        free(id), free(text), free(in);
    }
    ok(bad == 0 && tu_count_lines(ledger, NULL) == N_TASKS, "%s: %d tasks done, %d effects", name,
       N_TASKS, tu_count_lines(ledger, NULL));
    free(ledger);
    return st;
}

static void copy(const char *from, const char *to)
{
    size_t n;
    char *b = tu_read_file(from, &n);
    if (b)
        tu_write_file(to, b, n);
    free(b);
}

/* Every command against the damaged store `st`: 74, no signal, a message naming data.mdb and
 * `expect`; the ledger and data.mdb unchanged. */
static void every_command_refuses(const char *st, const char *what, const char *expect)
{
    char *ledger = tu_fmt("%s.ledger", st), *data = tu_fmt("%s/data.mdb", st);
    size_t before_len = 0, after_len = 0;
    char *before = tu_read_file(data, &before_len);
    int refused = 0, signals = 0;
    char first[600] = "";
    for (size_t c = 0; c < N_CMDS; c++) {
        const char *argv[16];
        size_t n = 0;
        argv[n++] = LEDGER;
        char *in = input_path(1);
        for (size_t k = 0; cmds[c][k]; k++)
            argv[n++] = strcmp(cmds[c][k], "@IN@") ? cmds[c][k] : in;
        argv[n++] = "--store";
        argv[n++] = st;
        argv[n] = NULL;
        tu_result r;
        int rc = tu_run(&r, argv, NULL, NULL, 0, CMD_TIMEOUT_MS);
        if (rc == 74 && tu_contains(r.err, data) && tu_contains(r.err, expect))
            refused++;
        else if (!first[0])
            snprintf(first, sizeof first, "%s -> %d: %s", cmds[c][0], rc, r.err ? r.err : "");
        if (rc > 128)
            signals++;
        tu_result_free(&r);
        free(in);
    }
    char *after = tu_read_file(data, &after_len);
    int same = (before == NULL) == (after == NULL) && before_len == after_len &&
               (!before || memcmp(before, after, before_len) == 0);
    ok(refused == (int)N_CMDS && signals == 0,
       "%s: all %zu commands exit 74 naming %s and '%s', no signal (%d refused, %d signals%s%s)",
       what, N_CMDS, "data.mdb", expect, refused, signals, first[0] ? "; " : "", first);
    ok(same && tu_count_lines(ledger, NULL) == N_TASKS,
       "%s: data.mdb unchanged, the ledger still has %d lines (%d)", what, N_TASKS,
       tu_count_lines(ledger, NULL));
    free(before), free(after), free(ledger), free(data);
}

static void truncations(const char *name, int nosync)
{
    char *st = populated(name, nosync), *data = tu_fmt("%s/data.mdb", st);
    char *saved = tu_fmt("%s.saved", data);
    copy(data, saved);
    /* the issue's sizes: nothing, the two meta pages, one page more, a stretch of the tree
     * (160 KiB, or half the pages the store uses where that is less: a nosync file is longer
     * than its pages, and 30 tasks' records take only a few dozen) */
    tu_result r;
    long used = 0;
    if (cli(&r, LEDGER, st, "stats", "--json", NULL) == 0) {
        json_error_t e;
        json_t *j = json_loads(r.out, 0, &e);
        used = j ? (long)jint(j, "map_used") : 0;
        json_decref(j);
    }
    tu_result_free(&r);
    long stretch = used / 2 / 4096 * 4096;
    long sizes[] = {0, 8192, 12288, stretch > 12288 && stretch < 163840 ? stretch : 163840};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        copy(saved, data);
        if (truncate(data, sizes[i]) != 0)
            perror("truncate");
        char *what = tu_fmt("%s: data.mdb truncated to %ld bytes", name, sizes[i]);
        every_command_refuses(st, what, sizes[i] ? "truncated" : "empty");
        free(what);
    }
    copy(saved, data);
    unlink(data);
    char *what = tu_fmt("%s: data.mdb removed", name);
    every_command_refuses(st, what, "missing");
    free(what);
    /* put back whole, the store is what it was */
    copy(saved, data);
    char *in1 = input_path(1);
    int rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--task", "t1", "--input", in1, NULL);
    char *ledger = tu_fmt("%s.ledger", st);
    ok(rc == 0 && tu_count_lines(ledger, NULL) == N_TASKS,
       "%s: the file put back whole: t1 is done, not run again (%d, %d lines)", name, rc,
       tu_count_lines(ledger, NULL));
    tu_result_free(&r);
    free(ledger), free(saved), free(data), free(st), free(in1);
}

/* A sync store's marker records its last durable commit: an older copy of data.mdb put back (a
 * restored backup) would bring tasks back to before their effects. */
static void older_copy(void)
{
    char *st = tu_fmt("%s/older", D), *ledger = tu_fmt("%s.ledger", st);
    char *data = tu_fmt("%s/data.mdb", st), *old = tu_fmt("%s.old", data);
    char *in = tu_fmt("%s/older-in.json", D);
    char *text = tu_fmt("{\"text\": \"x\", \"work_ms\": 0, \"ledger\": \"%s\"}", ledger);
    tu_write_file(in, text, strlen(text));
    tu_result r;
    cli(&r, LEDGER, st, "init", NULL);
    tu_result_free(&r);
    copy(data, old);
    int rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--task", "o1", "--input", in, NULL);
    tu_result_free(&r);
    ok(rc == 0 && tu_count_lines(ledger, NULL) == 1, "older copy: o1 ran once (%d)", rc);
    copy(old, data);
    rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--task", "o1", "--input", in, NULL);
    ok(rc == 74 && tu_contains(r.err, "older than the last durable commit") &&
           tu_count_lines(ledger, NULL) == 1,
       "older copy: refused, 74, not run again (%d: %s)", rc, r.err ? r.err : "");
    tu_result_free(&r);
    free(st), free(ledger), free(data), free(old), free(in), free(text);
}

/* Flips bit `bit` of the first byte of `pat` found in the file at `at` bytes from its start;
 * 1 if found. */
static int flip_in_file(const char *path, const char *pat, size_t at, unsigned bit)
{
    size_t n = 0, pn = strlen(pat);
    char *b = tu_read_file(path, &n);
    int found = 0;
    for (size_t i = 0; b && i + pn <= n && !found; i++)
        if (memcmp(b + i, pat, pn) == 0) {
            b[i + at] ^= (char)bit;
            found = 1;
        }
    if (found)
        tu_write_file(path, b, n);
    free(b);
    return found;
}

/* `check` on a sound store, then on one whose task input lost a bit: the problem is listed
 * (text and --json) with exit 74, and every command that reads the record refuses it. */
static void check_command(void)
{
    char *st = populated("check", 0), *data = tu_fmt("%s/data.mdb", st);
    tu_result r;
    int code = cli(&r, LEDGER, st, "check", "--json", NULL);
    json_t *j = parse_out(&r);
    ok(code == 0 && j && json_is_true(json_object_get(j, "ok")) && jint(j, "records") > 0 &&
           json_array_size(json_object_get(j, "problems")) == 0,
       "check --json on a sound store: ok, %lld records, no problems (exit %d)", jint(j, "records"),
       code);
    json_decref(j);
    tu_result_free(&r);
    ok(flip_in_file(data, "item 7", 5, 0x01),
       "plant: one bit of the first record holding t7's text flipped");
    code = cli(&r, LEDGER, st, "check", "--json", NULL);
    j = parse_out(&r);
    json_t *p = j ? json_array_get(json_object_get(j, "problems"), 0) : NULL;
    ok(code == 74 && j && json_is_false(json_object_get(j, "ok")) &&
           json_array_size(json_object_get(j, "problems")) == 1 && p &&
           (strcmp(jstr(p, "database"), "inputs") == 0 ||
            strcmp(jstr(p, "database"), "steps") == 0) &&
           strcmp(jstr(p, "task"), "t7") == 0 && strstr(jstr(p, "message"), "checksum"),
       "check --json lists the damaged record: its database, task t7, its checksum (exit %d: "
       "%s)",
       code, p ? jstr(p, "message") : oneline(r.out));
    json_decref(j);
    tu_result_free(&r);
    code = cli(&r, LEDGER, st, "check", NULL);
    ok(code == 74 && tu_contains(r.out, "'t7'") && tu_contains(r.out, "1 problem"),
       "check prints the problem and the count (exit %d: %s)", code, oneline(r.out));
    tu_result_free(&r);
    code = cli(&r, LEDGER, st, "show", "t7", NULL);
    ok(code == 74 && tu_contains(r.err, "'t7'") && tu_contains(r.err, "checksum"),
       "show t7 refuses the damaged record with 74 naming the task (%s)", first_line(r.err));
    tu_result_free(&r);
    code = cli(&r, LEDGER, st, "show", "t8", NULL);
    ok(code == 0, "show t8 reads as before (exit %d)", code);
    tu_result_free(&r);
    free(st), free(data);
}

int main(void)
{
    cli_init();
    D = tu_mkdtemp("damage");
    truncations("sync", 0);
    truncations("nosync", 1);
    older_copy();
    check_command();
    tu_rm_rf(D);
    free(D);
    return tap_done();
}
