/* test_race.c - many processes on the same tasks at once: each step still runs exactly once.
 *
 *   same task   8 processes `run` one task together (work_ms 300): exactly one executes work
 *               and the effect; the others exit 75 (running elsewhere) or 0 (already done);
 *   many tasks  8 processes run 8 different tasks in one store at once: all succeed;
 *   retries     overlapping `retry --now` processes over ~20 failed tasks: no task's work is
 *               executed by two of them.
 */
#include <signal.h>
#include <unistd.h>

#include "crash_common.h"

#define NPROC 8

static int run_all(const char *argvs[][16], int n, int *codes, char **errs, const char *D)
{
    pid_t pids[NPROC * 2];
    char *errp[NPROC * 2];
    for (int i = 0; i < n; i++) {
        errp[i] = tu_fmt("%s/race-%d.stderr", D, i);
        unlink(errp[i]);
        pids[i] = tu_spawn(argvs[i], NULL, NULL, errp[i]);
    }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        codes[i] = tu_wait(pids[i], 120000);
        if (codes[i] == -2) {
            tu_kill_wait(pids[i]);
            bad++;
        }
        if (errs)
            errs[i] = tu_read_file(errp[i], NULL);
        unlink(errp[i]);
        free(errp[i]);
    }
    return bad;
}

static void same_task(const char *D, const char *st, const char *trace, const char *ledger,
                      int round)
{
    char id[32], text[32];
    snprintf(id, sizeof id, "race-%d", round);
    snprintf(text, sizeof text, "race text %d", round);
    char *in = ledger_input(text, 300, trace, ledger, NULL);
    char *name = tu_fmt("%s.json", id);
    char *f = write_input(D, name, in);
    const char *argvs[NPROC][16];
    for (int i = 0; i < NPROC; i++) {
        const char *a[] = {LEDGER,   "run", "--graph", "ledger", "--input", f,
                           "--task", id,    "--store", st,       NULL};
        memcpy(argvs[i], a, sizeof a);
    }
    int codes[NPROC];
    char *errs[NPROC];
    run_all(argvs, NPROC, codes, errs, D);
    int n0 = 0, n75 = 0, other = 0, busy_msg = 1;
    for (int i = 0; i < NPROC; i++) {
        if (codes[i] == 0)
            n0++;
        else if (codes[i] == 75) {
            n75++;
            busy_msg &= tu_contains(errs[i], "CAIRN_EBUSY") && tu_contains(errs[i], "running");
        } else {
            other++;
            diag("process %d exited %d: %s", i, codes[i], oneline(errs[i]));
        }
        free(errs[i]);
    }
    ok(other == 0 && n0 >= 1, "%s: %d processes: %d exit 0, %d exit 75, %d other", id, NPROC, n0,
       n75, other);
    ok(busy_msg, "%s: every 75 is EBUSY naming the running owner", id);
    ok(work_lines(trace, id) == 1, "%s: work executed once (%d)", id, work_lines(trace, id));
    ok(ledger_lines(ledger, id) == 1, "%s: one ledger line (%d)", id, ledger_lines(ledger, id));
    char *s = task_status(LEDGER, st, id);
    ok(strcmp(s, "succeeded") == 0, "%s: succeeded", id);
    free(s), free(in), free(name), free(f);
}

static void many_tasks(const char *D, const char *st, const char *trace, const char *ledger)
{
    const char *argvs[NPROC][16];
    char *files[NPROC], ids[NPROC][32];
    for (int i = 0; i < NPROC; i++) {
        snprintf(ids[i], sizeof ids[i], "par-%d", i);
        char *in = ledger_input(ids[i], 100, trace, ledger, NULL);
        char *name = tu_fmt("%s.json", ids[i]);
        files[i] = write_input(D, name, in);
        free(in), free(name);
        const char *a[] = {LEDGER,   "run",  "--graph", "ledger", "--input", files[i],
                           "--task", ids[i], "--store", st,       NULL};
        memcpy(argvs[i], a, sizeof a);
    }
    int codes[NPROC];
    run_all(argvs, NPROC, codes, NULL, D);
    int all0 = 1, once = 1;
    for (int i = 0; i < NPROC; i++) {
        all0 &= codes[i] == 0;
        once &= work_lines(trace, ids[i]) == 1 && ledger_lines(ledger, ids[i]) == 1;
        free(files[i]);
    }
    ok(all0, "%d different tasks in one store at once: all exit 0", NPROC);
    ok(once, "each ran work once and has one ledger line");
}

static void overlapping_retries(const char *D)
{
    if (!GRAPHS) {
        skip("overlapping retries: CAIRN_TEST_GRAPHS not set");
        return;
    }
    char *st = tu_fmt("%s/store-retry", D), *trace = tu_fmt("%s/retry.trace", D);
    const int n = 20;
    int failed = 0;
    for (int i = 0; i < n; i++) {
        char *id = tu_fmt("fl-%02d", i);
        char *in = tu_fmt("{\"fail\": 1, \"sleep_ms\": 40, \"trace\": \"%s\"}", trace);
        char *name = tu_fmt("%s.json", id);
        char *f = write_input(D, name, in);
        failed +=
            cli_code(GRAPHS, st, "run", "--graph", "flaky", "--input", f, "--task", id, NULL) == 75;
        free(id), free(in), free(name), free(f);
    }
    ok(failed >= n - 1, "%d of %d tasks are failed with a future retry time", failed, n);
    const int nr = 3;
    const char *argvs[NPROC][16];
    for (int i = 0; i < nr; i++) {
        const char *a[] = {GRAPHS, "retry", "--now", "--store", st, NULL};
        memcpy(argvs[i], a, sizeof a);
    }
    int codes[NPROC];
    char *errs[NPROC];
    run_all(argvs, nr, codes, errs, D);
    int all0 = 1;
    for (int i = 0; i < nr; i++) {
        all0 &= codes[i] == 0;
        if (codes[i] != 0)
            diag("retry %d exited %d: %s", i, codes[i], oneline(errs[i]));
        free(errs[i]);
    }
    ok(all0, "%d overlapping `retry --now`: all exit 0", nr);
    int twice = 0, done = 0;
    for (int i = 0; i < n; i++) {
        char *id = tu_fmt("fl-%02d", i);
        char *l = tu_fmt("work %s g1 i2", id);
        int c = tu_count_exact(trace, l);
        twice += c > 1;
        char *s = task_status(GRAPHS, st, id);
        done += strcmp(s, "succeeded") == 0;
        free(s), free(l), free(id);
    }
    ok(twice == 0, "no task's retried work was executed twice (%d were)", twice);
    ok(done == n, "all %d tasks succeeded (%d)", n, done);
    ok(tu_count_lines(trace, "work ") == 2 * n, "exactly 2 executions per task in total (%d)",
       tu_count_lines(trace, "work "));
    free(st), free(trace);
}

int main(void)
{
    cli_init();
    char *D = tu_mkdtemp("race");
    char *st = tu_fmt("%s/store", D), *trace = tu_fmt("%s/trace", D),
         *ledger = tu_fmt("%s/ledger", D);
    diag("temp dir %s", D);
    for (int round = 1; round <= 5; round++)
        same_task(D, st, trace, ledger, round);
    many_tasks(D, st, trace, ledger);
    overlapping_retries(D);
    int rc = tap_done();
    if (rc == 0 && !getenv("CAIRN_TEST_KEEP"))
        tu_rm_rf(D);
    free(D), free(st), free(trace), free(ledger);
    return rc;
}
