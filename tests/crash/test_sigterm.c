/* test_sigterm.c - SIGTERM/SIGINT/SIGHUP during a step: a clean stop, not a crash.
 *
 * While `work` runs (in its forked child) the runner gets SIGTERM - alone, as `kill PID` sends
 * it, or with its whole process group, as a terminal or a service manager does. It must exit 75
 * promptly, leave the task `failed` and due at once, with work's output not committed and the
 * lease released, so the next run completes without waiting for a lease to expire.
 */
#include <signal.h>
#include <unistd.h>

#include "crash_common.h"

static void one(const char *D, const char *tag, int sig, int group)
{
    char *st = tu_fmt("%s/store-%s", D, tag), *trace = tu_fmt("%s/%s.trace", D, tag),
         *ledger = tu_fmt("%s/%s.ledger", D, tag);
    char *in = ledger_input(tag, 3000, trace, ledger, NULL);
    task_obs o;
    memset(&o, 0, sizeof o);
    snprintf(o.id, sizeof o.id, "%s", tag);
    char *name = tu_fmt("%s.json", tag);
    o.input = write_input(D, name, in);
    char *errp = tu_fmt("%s/%s.stderr", D, tag);
    const char *argv[] = {LEDGER,   "run", "--graph", "ledger", "--input", o.input,
                          "--task", o.id,  "--store", st,       NULL};
    pid_t pid = tu_spawn(argv, NULL, NULL, errp);
    int64_t until = tu_now_ms() + 60000;
    while (work_lines(trace, o.id) == 0 && tu_now_ms() < until && !tu_poll_exit(pid, NULL))
        tu_sleep_ms(5);
    ok(work_lines(trace, o.id) == 1, "%s: work is running", tag);
    if (group)
        tu_kill_group(pid, sig);
    else
        kill(pid, sig);
    /* a runner that ignored the signal would finish work and exit 0: the code tells */
    int rc = tu_wait(pid, 60000);
    if (rc == -2)
        tu_kill_wait(pid);
    char *err = tu_read_file(errp, NULL);
    ok(rc == 75, "%s: exit 75 (got %d)", tag, rc);
    ok(tu_contains(err, "CAIRN_EINTR") && tu_contains(err, "work"),
       "%s: says it was interrupted during work: %s", tag, oneline(err));
    free(err);
    json_t *j = show_json(LEDGER, st, o.id, NULL);
    json_t *w = j ? step_of(j, "work") : NULL;
    ok(j && strcmp(jstr(j, "status"), "failed") == 0, "%s: task failed", tag);
    ok(j && (!w || strcmp(jstr(w, "status"), "done") != 0) &&
           (!w || json_is_null(json_object_get(w, "output"))),
       "%s: work's output not committed", tag);
    ok(j && !json_object_get(j, "lease"), "%s: lease released", tag);
    ok(j && json_is_integer(json_object_get(j, "next_retry_at_ms")) &&
           tu_contains(jstr(j, "error"), "interrupted"),
       "%s: due for retry, error says interrupted", tag);
    json_decref(j);
    ok(ledger_lines(ledger, o.id) == 0, "%s: no effect", tag);
    /* the task is due at once: a plain `retry` (not --now) must pick it up and finish it */
    const char *argv2[] = {LEDGER, "retry", "--store", st, NULL};
    tu_result r;
    rc = tu_run(&r, argv2, NULL, NULL, 0, CMD_TIMEOUT_MS);
    ok(rc == 0 && tu_contains(r.out, "succeeded 1"),
       "%s: `retry` (not --now) runs it at once "
       "and it succeeds (rc %d: %s)",
       tag, rc, oneline(r.out));
    tu_result_free(&r);
    ok(work_lines(trace, o.id) == 2 && ledger_lines(ledger, o.id) == 1,
       "%s: work ran again (2 lines), one effect", tag);
    ok(settle(&o, st, trace, ledger) == 0, "%s: promises hold", tag);
    free(in), free(o.input), free(name), free(errp), free(st), free(trace), free(ledger);
}

int main(void)
{
    cli_init();
    char *D = tu_mkdtemp("sigterm");
    diag("temp dir %s", D);
    one(D, "term-pid", SIGTERM, 0);
    one(D, "term-group", SIGTERM, 1);
    one(D, "int-pid", SIGINT, 0);
    /* a hang-up (terminal or ssh session closed) stops the run as SIGTERM does, instead of
     * leaving the task `running` until its lease expires */
    one(D, "hup-pid", SIGHUP, 0);
    one(D, "hup-group", SIGHUP, 1);
    int rc = tap_done();
    if (rc == 0 && !getenv("CAIRN_TEST_KEEP"))
        tu_rm_rf(D);
    free(D);
    return rc;
}
