/* test_soak.c - hundreds of SIGKILLs at random times across many ledger tasks in one store.
 *
 * Deterministic schedule (seeded PRNG; CAIRN_SOAK_SEED and CAIRN_SOAK_KILLS override): tasks
 * with small work_ms are started, killed (process group: runner and step child) after a random
 * delay, observed, restarted with the same command - usually `run`, sometimes `retry --now`,
 * which picks up every orphaned task of the store - and killed again, until each task has used
 * its kill budget or finished. The kills land anywhere: inside steps, between commits, inside a
 * commit holding LMDB's writer lock, inside fsync. At the end every task is resumed and the
 * promises of crash_common.h are checked, and the store must still read cleanly.
 */
#include <signal.h>
#include <unistd.h>

#include "crash_common.h"

static uint64_t rng_state;

static uint64_t rnd(void)
{
    /* xorshift64*: deterministic for a seed, good enough for a schedule */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

static unsigned rnd_below(unsigned n) { return n ? (unsigned)(rnd() % n) : 0; }

#define MAX_TASKS 400

int main(void)
{
    cli_init();
    int target = atoi(tu_env("CAIRN_SOAK_KILLS", "200"));
    rng_state = strtoull(tu_env("CAIRN_SOAK_SEED", "20240611"), NULL, 10) | 1;
    char *D = tu_mkdtemp("soak");
    char *st = tu_fmt("%s/store", D), *trace = tu_fmt("%s/trace", D),
         *ledger = tu_fmt("%s/ledger", D);
    diag("temp dir %s, %d kills, seed %s", D, target, tu_env("CAIRN_SOAK_SEED", "20240611"));

    static task_obs tasks[MAX_TASKS];
    int n_tasks = 0, kills = 0, finished_early = 0, via_retry = 0;
    int landed_hist[8] = {0}; /* not admitted, pending, running/no step, parse, work, intent,
                                 append done, finished */
    static const char *land_names[8] = {"not admitted", "pending",   "running, no step done",
                                        "parse done",   "work done", "append intent",
                                        "append done",  "finished"};
    /* The kill delay follows the machine's speed: T estimates one whole run (process start
     * included, which dominates on a loaded machine); delays are uniform in [0.1 T, 0.9 T].
     * A kill that came before admission stretches T, one that came after the end shrinks it. */
    double T;
    {
        char *in = ledger_input("calibration", 0, trace, ledger, NULL);
        char *f = write_input(D, "calib.json", in);
        int64_t t0 = tu_now_ms();
        ok(cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", f, "--task", "calib",
                    NULL) == 0,
           "calibration run");
        T = (double)(tu_now_ms() - t0);
        diag("one run takes about %.0f ms here", T);
        free(in), free(f);
    }
    while (kills < target && n_tasks < MAX_TASKS) {
        task_obs *o = &tasks[n_tasks++];
        memset(o, 0, sizeof *o);
        snprintf(o->id, sizeof o->id, "soak-%03d", n_tasks);
        static const int work_ms[] = {0, 0, 5, 20, 50};
        char *text = tu_fmt("soak text %d", n_tasks);
        char *in = ledger_input(text, work_ms[rnd_below(5)], trace, ledger, NULL);
        char *name = tu_fmt("%s.json", o->id);
        o->input = write_input(D, name, in);
        free(text), free(in), free(name);
        int budget = 2 + (int)rnd_below(9);
        for (int k = 0; k < budget && kills < target; k++) {
            int use_retry = k > 0 && rnd_below(6) == 0;
            const char *run_argv[] = {LEDGER,    "run",    "--graph", "ledger",         "--input",
                                      o->input,  "--task", o->id,     "--max-attempts", "1000",
                                      "--store", st,       NULL};
            const char *retry_argv[] = {LEDGER, "retry",   "--now", "--max-attempts",
                                        "1000", "--store", st,      NULL};
            pid_t pid = tu_spawn(use_retry ? retry_argv : run_argv, NULL, NULL, NULL);
            via_retry += use_retry;
            tu_sleep_us((long)(T * 1000 * (0.1 + 0.8 * (double)rnd_below(1000) / 1000.0)));
            int code = -1;
            if (tu_poll_exit(pid, &code)) {
                if (!use_retry && code != 0 && code != 69)
                    crash_violation(o, "run exited %d before the kill", code);
                if (T > 20)
                    T *= 0.9;
                if (!use_retry && (code == 0 || code == 69)) {
                    finished_early++;
                    observe(o, st, trace, ledger);
                    landed_hist[7]++;
                    break;
                }
            } else {
                tu_kill_wait(pid);
                kills++;
            }
            observe(o, st, trace, ledger);
            int bucket = 0;
            if (strncmp(o->landed, "not admitted", 12) == 0)
                bucket = 0;
            else if (strncmp(o->landed, "succeeded", 9) == 0 ||
                     strncmp(o->landed, "in_doubt", 8) == 0)
                bucket = 7;
            else if (strncmp(o->landed, "pending", 7) == 0)
                bucket = 1;
            else if (tu_contains(o->landed, "a=done"))
                bucket = 6;
            else if (tu_contains(o->landed, "a=intent"))
                bucket = 5;
            else if (tu_contains(o->landed, "w=done"))
                bucket = 4;
            else if (tu_contains(o->landed, "p=done"))
                bucket = 3;
            else if (strncmp(o->landed, "running", 7) == 0)
                bucket = 2;
            else
                bucket = 7;
            landed_hist[bucket]++;
            if (bucket == 0 && T < 30000)
                T *= 1.15;
            else if (bucket == 7 && T > 20)
                T *= 0.9;
        }
    }
    diag("%d kills over %d tasks (%d via retry --now), %d runs finished before their kill; "
         "final T %.0f ms",
         kills, n_tasks, via_retry, finished_early, T);
    for (int i = 0; i < 8; i++)
        diag("  kills observed at '%s': %d", land_names[i], landed_hist[i]);
    ok(kills >= target, "%d SIGKILLs delivered (wanted %d)", kills, target);

    int violations = 0, in_doubt = 0, reran_ok = 0;
    for (int i = 0; i < n_tasks; i++) {
        violations += settle_ex(&tasks[i], st, trace, ledger, 0);
        in_doubt += tasks[i].in_doubt_seen;
        reran_ok += tasks[i].seen_commit;
    }
    diag("%d tasks ended in doubt and were resolved as done; %d had work committed", in_doubt,
         reran_ok);
    ok(violations == 0,
       "every task: succeeded or in_doubt->resolved, work never re-ran after its "
       "commit, nonce stable, <= 1 effect (%d violations)",
       violations);
    int over = 0;
    for (int i = 0; i < n_tasks; i++)
        over += ledger_lines(ledger, tasks[i].id) > 1;
    ok(over == 0, "ledger: no task has two lines");
    ok(tu_count_lines(ledger, NULL) <= n_tasks + 1, "ledger: %d lines for %d tasks",
       tu_count_lines(ledger, NULL), n_tasks + 1);

    tu_result r;
    int rc = cli(&r, LEDGER, st, "stats", "--json", NULL);
    json_t *j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && jint(j, "tasks") == n_tasks + 1 &&
           jint(json_object_get(j, "by_status"), "succeeded") == n_tasks + 1,
       "stats: all %d tasks succeeded", n_tasks + 1);
    json_decref(j);
    tu_result_free(&r);
    rc = cli(&r, LEDGER, st, "list", "--status", "running", "--json", NULL);
    j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && json_array_size(j) == 0, "no task is left running");
    json_decref(j);
    tu_result_free(&r);
    const char *dump[] = {"/usr/bin/mdb_dump", "-a", st, NULL};
    if (access(dump[0], X_OK) == 0) {
        rc = tu_run(&r, dump, NULL, NULL, 0, CMD_TIMEOUT_MS);
        ok(rc == 0 && r.out_len > 0, "mdb_dump reads the whole store after %d kills", kills);
        tu_result_free(&r);
    }
    rc = cli(&r, LEDGER, st, "retry", "--now", "--json", NULL);
    j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && jint(j, "ran") == 0, "retry --now finds nothing left to do");
    json_decref(j);
    tu_result_free(&r);

    for (int i = 0; i < n_tasks; i++)
        free(tasks[i].input);
    rc = tap_done();
    if (rc == 0 && !getenv("CAIRN_TEST_KEEP"))
        tu_rm_rf(D);
    free(D), free(st), free(trace), free(ledger);
    return rc;
}
