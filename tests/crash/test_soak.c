/* test_soak.c - hundreds of SIGKILLs at random times, spread over every phase of a ledger run.
 *
 * A kill at a uniformly random time lands where a run spends its time - starting the process and
 * inside `work` - and almost never in the short windows that matter most: the commits between
 * steps, the effect's intent/perform/outcome window, the final commit. So the soak aims. A run
 * is a sequence of events, each ending one phase:
 *
 *   phase    ends with            seen live as        a kill there leaves
 *   startup  admission committed  store records +1/2  attempt unchanged (or no task yet)
 *   parse    parse committed      store records +1    admitted, parse not done
 *   fork     work started         trace file grows    parse done, no new "work" trace line
 *   work     work committed       store records +1    a new trace line, work not done
 *   gap      intent committed     store records +2    work done, append has no record
 *            (a run that creates its task has none: work's output commits with the intent)
 *   intent   effect performed     ledger file grows   append intent, no ledger line
 *   effect   outcome committed    store records +2    append intent and a ledger line
 *   exit     process exit         (pidfd)             task succeeded / in_doubt
 *
 * (a resumed run skips the events already past). For each kill the soak picks a phase the task
 * can still reach - the least hit ones most often - waits for the event that starts it (the
 * store's audit+step record count, polled with LMDB read transactions that never wait for the
 * writer; the trace and ledger files' sizes) and kills the process group a random time into the
 * phase: uniform over the phase's length, learnt as the median of recent runs (store
 * timestamps from show/audit, file mtimes, exit times). Aiming from the spawn instead fails: the
 * jitter of starting a process (milliseconds on a loaded machine) swamps phases a tenth of a
 * millisecond long. Where the kill really landed is read back from the store and the receiving
 * files (classify()), counted in a histogram, and shifts that phase's aim if it missed. A test
 * asserts every phase got a floor of kills, so the soak cannot silently degenerate; past the
 * wanted count it keeps killing (up to twice as many) while a phase is short.
 *
 * Tasks get varied work_ms (often 0) and are killed 1-6 times each with `run` or, sometimes,
 * `retry --now` (cron), then settled (crash_common.h) before the next task starts, so a retry
 * sees only the task under test. Every 40 kills a "retry storm" parks several tasks half-done
 * and kills `retry --now` runs over all of them at random times. Every run is observed: a
 * committed nonce never changes, work never starts again once committed (trace lines), the
 * ledger has at most one line per task, and each task ends succeeded, or in doubt and then -
 * resolved truthfully - succeeded with exactly one ledger line.
 *
 * With CAIRN_SOAK_NOSYNC set the store is created nosync (a writable map) and every run uses it.
 * Schedule: seeded PRNG (CAIRN_SOAK_SEED); CAIRN_SOAK_KILLS sets the number of kills (default
 * 300), CAIRN_SOAK_MIN_PER_PHASE the floor. With the argument `long` this is the `soak-long`
 * suite: it skips unless CAIRN_SOAK_LONG_KILLS is set (scripts/soak.sh sets it).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "crash_common.h"

/* ------------------------------------------------------------------ phases and their timing */

enum { PH_START, PH_PARSE, PH_FORK, PH_WORK, PH_GAP, PH_INTENT, PH_EFFECT, PH_EXIT, N_PH };

static const char *ph_name[N_PH] = {"startup", "parse",  "fork",   "work",
                                    "gap",     "intent", "effect", "exit"};
static const char *ph_what[N_PH] = {"before admission committed",
                                    "admitted, parse not committed",
                                    "parse done, work not started",
                                    "work started, not committed",
                                    "work committed, no effect intent",
                                    "intent committed, effect not performed",
                                    "effect performed, outcome not committed",
                                    "final state committed, process alive"};

/* Estimators of the stretch before each event (indexed like the phase it ends), plus two that
 * differ: admission by `retry` (it scans the store first) and, for a task whose intent is
 * committed, admission -> in_doubt. Microseconds. */
enum { K_ADMIT_RETRY = N_PH, K_DOUBT, N_KEYS };

#define RING 24

typedef struct est {
    double v[RING];
    int n, next;
} est;

static est durs[N_KEYS];

static void est_add(est *e, double us)
{
    if (!(us >= 0) || us > 60e6)
        return; /* a clock step or a timestamp from another run: not a sample */
    e->v[e->next] = us;
    e->next = (e->next + 1) % RING;
    if (e->n < RING)
        e->n++;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double est_get(int key)
{
    const est *e = &durs[key];
    if (e->n == 0) {
        if (key == K_ADMIT_RETRY)
            return est_get(PH_START) + 1000;
        return key == PH_START ? 8000 : 1000;
    }
    double v[RING];
    memcpy(v, e->v, sizeof v);
    qsort(v, (size_t)e->n, sizeof *v, cmp_dbl);
    return v[e->n / 2];
}

/* ------------------------------------------------------------------ a task's state */

typedef struct snap {
    int exists, attempt, finished; /* finished: succeeded, in_doubt, failed or dead */
    int parse_done, work_done, intent;
    int trace_n, ledger_n;
    char status[16];
} snap;

typedef struct soak_task {
    task_obs o;
    int work_ms;
    snap s; /* as last observed */
} soak_task;

static char *D, *ST, *TRACE, *LEDGER_FILE;

static int step_is(json_t *j, const char *step, const char *status)
{
    json_t *s = step_of(j, step);
    return s && strcmp(jstr(s, "status"), status) == 0;
}

/* Fills *s from a show --json document (NULL: the task does not exist). */
static void snap_of(soak_task *t, json_t *j, snap *s)
{
    memset(s, 0, sizeof *s);
    s->trace_n = work_lines(TRACE, t->o.id);
    s->ledger_n = ledger_lines(LEDGER_FILE, t->o.id);
    if (!j)
        return;
    s->exists = 1;
    s->attempt = (int)jint(j, "attempt");
    snprintf(s->status, sizeof s->status, "%s", jstr(j, "status"));
    s->finished = strcmp(s->status, "running") != 0 && strcmp(s->status, "pending") != 0;
    s->parse_done = step_is(j, "parse", "done");
    s->work_done = step_is(j, "work", "done");
    s->intent = step_is(j, "append", "intent");
}

/* Where a kill landed, from the state before and after the killed run. */
static int classify(const snap *before, const snap *after)
{
    if (!after->exists || after->attempt == before->attempt)
        return PH_START;
    if (after->finished)
        return PH_EXIT;
    if (after->intent)
        return after->ledger_n > 0 ? PH_EFFECT : PH_INTENT;
    if (after->work_done)
        return PH_GAP;
    if (after->trace_n > before->trace_n)
        return PH_WORK;
    return after->parse_done ? PH_FORK : PH_PARSE;
}

/* How the event that ends a plan entry shows itself while the run goes on. */
enum { SEEN_STORE, SEEN_TRACE, SEEN_LEDGER, SEEN_EXIT };

/* The events a run from state `s` goes through: entry i ends phase label[i], lasts about
 * est_get(key[i]) (+ work_ms for work), and ends with an event seen as seen[i]: for a commit,
 * the store then holds recs[i] more audit+step records than at the spawn. */
typedef struct plan {
    int n;
    int label[N_PH], key[N_PH], seen[N_PH];
    long recs[N_PH];
    double end[N_PH]; /* predicted time of the event after the spawn, us */
} plan;

static void plan_add(plan *p, int label, int key, double extra_us, int seen, long recs)
{
    int i = p->n++;
    p->label[i] = label;
    p->key[i] = key;
    p->seen[i] = seen;
    p->recs[i] = (i ? p->recs[i - 1] : 0) + recs;
    p->end[i] = (i ? p->end[i - 1] : 0) + est_get(key) + extra_us;
}

static void plan_of(const snap *s, int work_ms, int retry, plan *p)
{
    p->n = 0;
    /* admission: "created" and "run" audit records for a new task, one takeover record else */
    plan_add(p, PH_START, retry ? K_ADMIT_RETRY : PH_START, 0, SEEN_STORE, s->exists ? 1 : 2);
    if (s->intent) { /* the resume finds the effect in doubt: one transition record */
        plan_add(p, s->ledger_n > 0 ? PH_EFFECT : PH_INTENT, K_DOUBT, 0, SEEN_STORE, 1);
    } else {
        if (!s->parse_done)
            plan_add(p, PH_PARSE, PH_PARSE, 0, SEEN_STORE, 1); /* its step record */
        /* a run that creates the task carries work's output into the intent's commit
         * (runner/step.c, "Carried commits"): work ends with all three records, no gap */
        const int carried = !s->exists && !retry;
        if (!s->work_done) {
            plan_add(p, PH_FORK, PH_FORK, 0, SEEN_TRACE, 0);
            plan_add(p, PH_WORK, PH_WORK, work_ms * 1000.0, SEEN_STORE, carried ? 3 : 1);
        }
        if (!carried || s->work_done)
            plan_add(p, PH_GAP, PH_GAP, 0, SEEN_STORE, 2); /* intent: audit + step record */
        plan_add(p, PH_INTENT, PH_INTENT, 0, SEEN_LEDGER, 0);
        plan_add(p, PH_EFFECT, PH_EFFECT, 0, SEEN_STORE, 2); /* effect done + succeeded */
    }
    plan_add(p, PH_EXIT, PH_EXIT, 0, SEEN_EXIT, 0);
}

/* ------------------------------------------------------------------ statistics */

typedef struct stats {
    int hits[N_PH], hits_retry[N_PH], hits_storm[N_PH], aimed[N_PH], on_target[N_PH];
    int landed_at[N_PH][N_PH]; /* [aimed][landed] */
    int ended_first[N_PH];     /* aimed here, but the run ended before the kill */
    double window[N_PH];       /* kills are aimed at this share of each phase (from its start) */
    int kills, via_retry, storm_kills, exited_first, late, calib_runs, tasks, in_doubt,
        resolved_not_done, violations;
} stats;

static stats S;
static int TARGET, FLOOR, RETRY_FLOOR; /* kills wanted; at least FLOOR per phase, RETRY_FLOOR
                                          during retry runs */

/* Whether to kill again: until TARGET kills, and past it (up to twice as many) while a phase or
 * retry is short of its floor - a loaded machine makes the narrow phases harder to hit, and the
 * aim then spends more kills on them rather than failing. */
static int want_more(void)
{
    if (S.kills < TARGET)
        return 1;
    if (S.kills >= 2 * TARGET)
        return 0;
    int thin = S.via_retry < RETRY_FLOOR;
    for (int p = 0; p < N_PH; p++)
        thin |= S.hits[p] < FLOOR;
    return thin;
}

/* Picks a plan entry to aim at: phases hit least are picked most (weight 1/(1+hits)^3; parse
 * is only reachable by a task's first kill, so it needs the pull). */
static int pick_entry(const plan *p)
{
    double w[N_PH], sum = 0;
    for (int i = 0; i < p->n; i++) {
        double h = 1.0 + S.hits[p->label[i]];
        w[i] = 1.0 / (h * h * h);
        sum += w[i];
    }
    double x = rnd_unit() * sum;
    for (int i = 0; i < p->n; i++) {
        if (x < w[i])
            return i;
        x -= w[i];
    }
    return p->n - 1;
}

/* ------------------------------------------------------------------ running and killing */

static int64_t real_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A file's mtime in us since the epoch, 0 if it cannot be read. (On kernels with coarse file
 * timestamps this is up to a tick early: noise in the estimate, nothing worse.) */
static int64_t mtime_us(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return 0;
    return (int64_t)sb.st_mtim.tv_sec * 1000000 + sb.st_mtim.tv_nsec / 1000;
}

static off_t file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? sb.st_size : 0;
}

static store_view VIEW; /* the store, watched while a runner writes it */

typedef struct outcome {
    int killed;     /* SIGKILL landed while it ran */
    int code;       /* exit code when it exited by itself */
    int64_t t0;     /* realtime of the spawn, us */
    double exit_us; /* when it exited by itself (after t0), or -1 if not seen */
    int late;       /* the event to aim from was not seen in time: killed anyway */
} outcome;

/* Waits up to `us` for the child to exit, without reaping it; 1 if it has. A short wait spins
 * (`spin`), since a timed sleep oversleeps by the timer slack and scheduling: more than the
 * narrowest phases last. */
static int wait_exit(pid_t pid, int pfd, int64_t us, int spin)
{
    if (us < 0)
        us = 0;
    if (pfd >= 0) {
        struct pollfd pf = {.fd = pfd, .events = POLLIN};
        if (spin && us < 150) {
            int64_t until = mono_us() + us;
            do {
                struct timespec now = {0, 0};
                if (ppoll(&pf, 1, &now, NULL) > 0)
                    return 1;
            } while (mono_us() < until);
            return 0;
        }
        struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
        return ppoll(&pf, 1, &ts, NULL) > 0;
    }
    tu_sleep_us((long)us); /* no pidfd (an old kernel): sleep, then look */
    siginfo_t si = {0};
    return waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid;
}

/* Spawns argv and SIGKILLs its process group `offset_us` after the event that ends entry
 * `from` of plan `p` was seen (p NULL or from < 0: after the spawn; offset < 0: never, it
 * gets two minutes). Commits are seen by polling the store's record count, work's start and
 * the effect by the trace and ledger files growing; a run that exits first is seen at once
 * (pidfd), and its exit time is a sample too. */
static outcome spawn_kill(const char *const *argv, const plan *p, int from, double offset_us)
{
    outcome oc = {.code = -1, .exit_us = -1};
    char *errp = tu_fmt("%s/last.stderr", D);
    unlink(errp);
    long base = VIEW.env ? view_count(&VIEW) : -1;
    off_t trace0 = file_size(TRACE), ledger0 = file_size(LEDGER_FILE);
    int64_t m0 = mono_us();
    oc.t0 = real_us();
    pid_t pid = tu_spawn(argv, NULL, NULL, errp);
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    int exited = 0;
    if (p && from >= 0) {
        /* a run this slow has stalled somewhere: aim from wherever it is */
        int64_t give_up = m0 + (int64_t)(4 * p->end[p->n - 1]) + 200000;
        for (;;) {
            int seen = 0;
            if (p->seen[from] == SEEN_STORE) {
                long c = base >= 0 ? view_count(&VIEW) : -1;
                seen = c >= 0 && c - base >= p->recs[from];
            } else if (p->seen[from] == SEEN_TRACE) {
                seen = file_size(TRACE) > trace0;
            } else if (p->seen[from] == SEEN_LEDGER) {
                seen = file_size(LEDGER_FILE) > ledger0;
            }
            if (seen)
                break;
            if (mono_us() > give_up) {
                oc.late = 1;
                break;
            }
            if ((exited = wait_exit(pid, pfd, 25, 0)) != 0)
                break;
        }
    }
    if (!exited) {
        int64_t until = mono_us() + (int64_t)(offset_us < 0 ? 120e6 : offset_us);
        do
            exited = wait_exit(pid, pfd, until - mono_us(), 1);
        while (!exited && mono_us() < until);
    }
    if (exited)
        oc.exit_us = (double)(real_us() - oc.t0);
    if (pfd >= 0)
        close(pfd);
    int st = 0;
    if (!exited) {
        tu_kill_group(pid, SIGKILL);
        if (offset_us < 0)
            diag("a run did not finish in two minutes: killed");
    }
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    oc.killed = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
    if (!oc.killed)
        oc.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    if (!oc.killed && oc.code != 0 && oc.code != 69 && oc.code != 75) {
        char *e = tu_read_file(errp, NULL);
        if (e && *e)
            diag("exit %d: %s", oc.code, oneline(e));
        free(e);
    }
    free(errp);
    return oc;
}

/* Shows the task, checks the promises so far (observe_doc) and fills *now. */
static void look(soak_task *t, snap *now, json_t **doc)
{
    int code = 0;
    json_t *j = show_json(LEDGER, ST, t->o.id, &code);
    observe_doc(&t->o, j, code, TRACE, LEDGER_FILE);
    snap_of(t, j, now);
    if (doc)
        *doc = j;
    else
        json_decref(j);
}

static double ms_to_run_us(long long ms, int64_t t0)
{
    /* store timestamps are whole milliseconds, truncated: take the middle of the millisecond */
    return (double)ms * 1000.0 + 500.0 - (double)t0;
}

/* Learns phase durations from what a run (killed or not) committed: the events it went
 * through, timed from the store, the files and the exit; consecutive known events give one
 * sample each. `single`: no other task ran, so the files' mtimes are this task's. */
static void learn(soak_task *t, const snap *before, const snap *after, json_t *doc,
                  const outcome *oc, int retry, int single)
{
    if (!doc || after->attempt == before->attempt)
        return;
    double at[N_PH];
    for (int i = 0; i < N_PH; i++)
        at[i] = -1;
    tu_result r;
    json_t *audit = NULL;
    if (cli(&r, LEDGER, ST, "audit", t->o.id, "--json", NULL) == 0)
        audit = parse_out(&r);
    tu_result_free(&r);
    size_t i;
    json_t *row;
    json_array_foreach(audit, i, row)
    {
        if (jint(row, "attempt") != after->attempt)
            continue;
        double x = ms_to_run_us(jint(row, "t_ms"), oc->t0);
        const char *why = jstr(row, "reason"), *to = jstr(row, "to");
        if (!strcmp(why, "run") || !strcmp(why, "retry") || !strncmp(why, "lease taken over", 16))
            at[PH_START] = x;
        else if (!strncmp(why, "effect intent", 13))
            at[PH_GAP] = x;
        else if (!strcmp(to, "succeeded") || !strcmp(to, "in_doubt"))
            at[PH_EFFECT] = x;
    }
    json_decref(audit);
    if (after->parse_done && !before->parse_done)
        at[PH_PARSE] = ms_to_run_us(jint(step_of(doc, "parse"), "updated_ms"), oc->t0);
    if (single && after->trace_n > before->trace_n)
        at[PH_FORK] = (double)(mtime_us(TRACE) - oc->t0);
    if (after->work_done && !before->work_done)
        at[PH_WORK] = ms_to_run_us(jint(step_of(doc, "work"), "updated_ms"), oc->t0);
    if (single && after->ledger_n > before->ledger_n)
        at[PH_INTENT] = (double)(mtime_us(LEDGER_FILE) - oc->t0);
    if (after->finished)
        at[PH_EXIT] = oc->exit_us;
    plan p;
    plan_of(before, t->work_ms, retry, &p);
    double prev = 0; /* the spawn */
    for (int k = 0; k < p.n; k++) {
        /* the stretch of entry k ends with the event that ends its phase; for the doubt entry
         * that is the in_doubt commit */
        int ev = p.key[k] == K_DOUBT ? PH_EFFECT : p.label[k];
        double x = at[ev];
        if (x < 0)
            break;
        est_add(&durs[p.key[k]], x - prev - (p.label[k] == PH_WORK ? t->work_ms * 1000.0 : 0));
        prev = x;
    }
}

static const char *const *run_argv(soak_task *t)
{
    static const char *argv[16];
    const char *a[] = {LEDGER,           "run",    "--graph", "ledger",  "--input",
                       t->o.input,       "--task", t->o.id,   "--store", ST,
                       "--max-attempts", "1000",   NULL};
    memcpy(argv, a, sizeof a);
    return argv;
}

static const char *const *retry_argv(void)
{
    static const char *argv[] = {NULL,   "retry",   "--now", "--max-attempts",
                                 "1000", "--store", NULL,    NULL};
    argv[0] = LEDGER;
    argv[6] = ST;
    return argv;
}

static soak_task *new_task(const char *prefix, int n, int work_ms)
{
    soak_task *t = calloc(1, sizeof *t);
    if (!t)
        tap_skip_all("out of memory");
    snprintf(t->o.id, sizeof t->o.id, "%s-%04d", prefix, n);
    t->work_ms = work_ms;
    char *text = tu_fmt("soak text %s", t->o.id);
    char *in = ledger_input(text, work_ms, TRACE, LEDGER_FILE, NULL);
    char *name = tu_fmt("%s.json", t->o.id);
    t->o.input = write_input(D, name, in);
    free(text), free(in), free(name);
    snap_of(t, NULL, &t->s);
    return t;
}

/* Frees a task done with, folding every violation seen on it into the total. */
static void free_task(soak_task *t)
{
    if (!t)
        return;
    S.violations += t->o.violations;
    free(t->o.input);
    free(t);
}

/* Settles a task (crash_common.h) and folds its result into the totals. */
static void settle_task(soak_task *t, int rerun)
{
    settle_ex(&t->o, ST, TRACE, LEDGER_FILE, rerun);
    S.in_doubt += t->o.in_doubt_seen;
    S.resolved_not_done += t->o.in_doubt_seen && !t->o.resolved_done;
}

/* An unkilled run of a fresh task: keeps the estimates current as the machine's load changes,
 * and checks the plain path. */
static void calibrate(int n, int work_ms)
{
    soak_task *t = new_task("calib", n, work_ms);
    snap before = t->s, after;
    outcome oc = spawn_kill(run_argv(t), NULL, -1, -1);
    json_t *doc;
    look(t, &after, &doc);
    if (oc.killed || oc.code != 0 || strcmp(after.status, "succeeded") != 0 ||
        after.ledger_n != 1 || after.trace_n != 1)
        crash_violation(&t->o, "an unkilled run: exit %d, %s, %d ledger / %d trace lines", oc.code,
                        after.status, after.ledger_n, after.trace_n);
    learn(t, &before, &after, doc, &oc, 0, 1);
    json_decref(doc);
    S.calib_runs++;
    free_task(t);
}

static void count_kill(int landed, int retry, int storm)
{
    S.kills++;
    S.hits[landed]++;
    S.hits_retry[landed] += retry;
    S.hits_storm[landed] += storm;
    S.via_retry += retry;
    S.storm_kills += storm;
}

/* Narrows (by 30%: a late miss is the common one, as the kill comes some time after the event
 * that starts the phase was seen) or widens (by 10%) the share of a phase that kills are aimed
 * at, within 4% and 200% of its length: the offset stays random, only its range learns. */
static void narrow_aim(int aim, int by)
{
    S.window[aim] *= by > 0 ? 0.7 : 1.1;
    if (S.window[aim] < 0.04)
        S.window[aim] = 0.04;
    if (S.window[aim] > 2)
        S.window[aim] = 2;
}

/* One aimed kill of task t (with `retry --now` if `retry`): at entry `e` of its plan (-1: the
 * least hit phases most often), a random time into that phase after the event that starts it.
 * Observes the task, learns from the run and counts the kill. Returns where it landed, or -1
 * if the run ended first. */
static int kill_aimed(soak_task *t, int retry, int e)
{
    plan p;
    plan_of(&t->s, t->work_ms, retry, &p);
    if (e < 0)
        e = pick_entry(&p);
    int aim = p.label[e];
    double len = p.end[e] - (e ? p.end[e - 1] : 0);
    double offset = rnd_unit() * len * S.window[aim];
    snap before = t->s, after;
    outcome oc = spawn_kill(retry ? retry_argv() : run_argv(t), &p, e - 1, offset);
    json_t *doc;
    look(t, &after, &doc);
    learn(t, &before, &after, doc, &oc, retry, 1);
    json_decref(doc);
    t->s = after;
    S.late += oc.late;
    if (!oc.killed) {
        /* succeeded: 0; in doubt: 69 (needs an operator; retry said 75 before it told the two
         * apart) */
        int doubt = strcmp(after.status, "in_doubt") == 0;
        int good = strcmp(after.status, "succeeded") == 0 ? oc.code == 0
                   : doubt ? oc.code == 69 || (retry && oc.code == 75)
                           : 0;
        if (!good)
            crash_violation(&t->o, "%s exited %d before its kill, task %s", retry ? "retry" : "run",
                            oc.code, after.status);
        S.exited_first++;
        S.ended_first[aim]++;
        narrow_aim(aim, 1); /* aimed past the end of the run */
        return -1;
    }
    int landed = classify(&before, &after);
    count_kill(landed, retry, 0);
    S.aimed[aim]++;
    S.landed_at[aim][landed]++;
    if (landed == aim)
        S.on_target[aim]++;
    else
        narrow_aim(aim, landed > aim ? 1 : -1);
    return landed;
}

/* One task: killed up to `budget` times at aimed moments, then settled. */
static void soak_one(int n, int budget)
{
    static const int work_choices[] = {0, 0, 0, 2, 5, 20, 60};
    soak_task *t = new_task("soak", n, work_choices[rnd_below(7)]);
    for (int k = 0; k < budget && want_more() && !t->s.finished; k++)
        if (kill_aimed(t, t->s.exists && rnd_below(5) == 0, -1) < 0)
            break;
    settle_task(t, rnd_below(4) == 0);
    S.tasks++;
    free_task(t);
}

/* A retry storm: `n` tasks left half-done (each killed once, aimed at a random phase from
 * parse to effect), then `retry --now` runs over all of them, each killed at a random time
 * within the predicted length of the whole retry, until one finishes or `max_kills` were spent.
 * A kill lands in the task that retry was working on: the one it admitted (its attempt went
 * up) and left unfinished. */
static void storm(int first_n, int n, int max_kills)
{
    soak_task *ts[16];
    if (n > 16)
        n = 16;
    for (int i = 0; i < n; i++) {
        ts[i] = new_task("storm", first_n + i, (int)rnd_below(3) * 5);
        plan p;
        plan_of(&ts[i]->s, ts[i]->work_ms, 0, &p);
        kill_aimed(ts[i], 0, 1 + (int)rnd_below((unsigned)p.n - 2));
    }
    for (int k = 0; k < max_kills && want_more(); k++) {
        snap before[16];
        /* one process start and exit; each task adds what its run does after admission */
        double total = est_get(K_ADMIT_RETRY) + est_get(PH_EXIT);
        for (int i = 0; i < n; i++) {
            before[i] = ts[i]->s;
            if (!ts[i]->s.finished) {
                plan p;
                plan_of(&ts[i]->s, ts[i]->work_ms, 1, &p);
                total += p.end[p.n - 2] - p.end[0] + 300;
            }
        }
        outcome oc = spawn_kill(retry_argv(), NULL, -1, rnd_unit() * total);
        int landed = -1, changed = 0;
        for (int i = 0; i < n; i++) {
            if (before[i].finished)
                continue;
            snap after;
            look(ts[i], &after, NULL);
            ts[i]->s = after;
            if (after.attempt != before[i].attempt) {
                changed++;
                if (!after.finished)
                    landed = classify(&before[i], &after);
            }
        }
        if (!oc.killed) {
            if (oc.code != 0 && oc.code != 69 && oc.code != 75) {
                diag("VIOLATION: retry --now over a storm exited %d", oc.code);
                S.violations++;
            }
            for (int i = 0; i < n; i++)
                if (ts[i]->s.exists && !ts[i]->s.finished)
                    crash_violation(&ts[i]->o, "a retry --now that ran to its end left it %s",
                                    ts[i]->s.status);
            break;
        }
        if (landed < 0) /* nothing admitted yet, or killed between tasks / after the last */
            landed = changed ? PH_EXIT : PH_START;
        count_kill(landed, 1, 1);
    }
    for (int i = 0; i < n; i++) {
        settle_task(ts[i], 0);
        S.tasks++;
        free_task(ts[i]);
    }
}

/* Lines that name a task ("<id> ...", as ledger_lines counts them). A kill can cut the effect's
 * write short (at a page boundary); a fragment too short to name its task is not a line of any
 * task (its task was resolved --not-done and wrote its line again). */
static int ledger_task_lines(const char *path)
{
    char *b = tu_read_file(path, NULL);
    int n = 0;
    for (char *p = b; p && *p;) {
        size_t len = strcspn(p, "\n");
        n += memchr(p, ' ', len) != NULL;
        p += len + (p[len] == '\n');
    }
    free(b);
    return n;
}

/* ------------------------------------------------------------------ main */

static void report(int64_t took_ms)
{
    diag("%d kills in %.1f s: %d during `retry --now` (%d in retry storms); %d runs exited "
         "before their kill; %d aimed from a stalled run; %d calibration runs; %d tasks",
         S.kills, (double)took_ms / 1000, S.via_retry, S.storm_kills, S.exited_first, S.late,
         S.calib_runs, S.tasks);
    diag("%-8s %-40s %5s %6s %6s %6s %7s %6s %8s", "phase", "(what the store shows after the kill)",
         "kills", "retry", "storm", "aimed", "on aim", "ended", "len(ms)");
    for (int p = 0; p < N_PH; p++)
        diag("%-8s %-40s %5d %6d %6d %6d %6.0f%% %6d %8.2f", ph_name[p], ph_what[p], S.hits[p],
             S.hits_retry[p], S.hits_storm[p], S.aimed[p],
             S.aimed[p] ? 100.0 * S.on_target[p] / S.aimed[p] : 0.0, S.ended_first[p],
             est_get(p) / 1000.0);
    diag("aimed: kills aimed there that landed somewhere; ended: aimed there, but the run ended "
         "first; len: median of the recent runs (work: beyond work_ms); retry admission %.2f ms, "
         "in-doubt resume %.2f ms",
         est_get(K_ADMIT_RETRY) / 1000.0, est_get(K_DOUBT) / 1000.0);
    diag("aimed at -> landed in (st pa fo wo ga in ef ex), aimed window (of the phase's length):");
    for (int a = 0; a < N_PH; a++) {
        char row[128];
        int o = 0;
        for (int l = 0; l < N_PH; l++)
            o += snprintf(row + o, sizeof row - (size_t)o, " %3d", S.landed_at[a][l]);
        diag("  %-7s%s  %3.0f%%", ph_name[a], row, 100 * S.window[a]);
    }
    int thin = 0;
    for (int p = 0; p < N_PH; p++)
        if (S.hits[p] < FLOOR) {
            diag("phase %s got %d kills (want >= %d)", ph_name[p], S.hits[p], FLOOR);
            thin++;
        }
    ok(thin == 0, "every one of the %d phases got >= %d kills", N_PH, FLOOR);
}

int main(int argc, char **argv)
{
    int long_mode = argc > 1 && strcmp(argv[1], "long") == 0;
    if (long_mode && !getenv("CAIRN_SOAK_LONG_KILLS"))
        tap_skip_all("the long soak runs only with CAIRN_SOAK_LONG_KILLS=N (scripts/soak.sh)");
    cli_init();
    const char *seed = tu_env("CAIRN_SOAK_SEED", "20240611");
    const char *kills_var = long_mode ? "CAIRN_SOAK_LONG_KILLS" : "CAIRN_SOAK_KILLS";
    char *end;
    long target = strtol(tu_env(kills_var, "300"), &end, 10);
    if (*end || target < 1 || target > 1000000) {
        printf("Bail out! %s must be a number of kills from 1 to 1000000, not '%s'\n", kills_var,
               tu_env(kills_var, ""));
        return 1;
    }
    TARGET = (int)target;
    /* 1 us of timer slack, not 50: the store is polled every 25 us while a runner is watched
     * (the runners inherit it; their sleeps only get more exact) */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    for (int p = 0; p < N_PH; p++)
        S.window[p] = 1;
    crash_seed(seed);
    /* floors: 1/40 of the kills per phase (a fifth of an even share), at least 4 - or half an
     * even share for a very short soak; a twentieth of the kills during retry runs */
    FLOOR = atoi(tu_env("CAIRN_SOAK_MIN_PER_PHASE", "0"));
    if (FLOOR <= 0) {
        int least = TARGET / (2 * N_PH) < 4 ? TARGET / (2 * N_PH) : 4;
        FLOOR = TARGET / 40 > least ? TARGET / 40 : least;
        if (FLOOR < 1)
            FLOOR = 1;
    }
    RETRY_FLOOR = TARGET / 20 > 3 ? TARGET / 20 : 3;
    D = tu_mkdtemp("soak");
    ST = tu_fmt("%s/store", D);
    TRACE = tu_fmt("%s/trace", D);
    LEDGER_FILE = tu_fmt("%s/ledger", D);
    diag("temp dir %s, %d kills (%s), seed %s", D, TARGET, kills_var, seed);
    if (getenv("CAIRN_SOAK_NOSYNC")) { /* the store is nosync for life: every run follows it */
        int irc = cli_code(LEDGER, ST, "init", "--nosync", NULL);
        ok(irc == 0, "a nosync store for the soak (init: %d)", irc);
    }
    int64_t t_start = tu_now_ms();

    static const int calib_work[] = {0, 0, 0, 5, 20};
    for (int i = 0; i < 5; i++) {
        calibrate(i, calib_work[i]);
        if (i == 0 && view_open(&VIEW, ST) != 0)
            diag("cannot watch the store: kills are aimed from the spawn only");
    }
    diag("after %d calibration runs: startup %.2f ms, parse %.2f, fork %.2f, work %.2f + work_ms, "
         "gap %.2f, intent %.2f, effect %.2f, exit %.2f",
         S.calib_runs, est_get(PH_START) / 1000, est_get(PH_PARSE) / 1000, est_get(PH_FORK) / 1000,
         est_get(PH_WORK) / 1000, est_get(PH_GAP) / 1000, est_get(PH_INTENT) / 1000,
         est_get(PH_EFFECT) / 1000, est_get(PH_EXIT) / 1000);

    int n = 0, n_storm = 0, next_calib = 20, next_storm = 40;
    while (want_more()) {
        if (S.kills >= next_storm) {
            int k = 3 + (int)rnd_below(4);
            storm(n_storm, k, 8);
            n_storm += k;
            next_storm += 40;
            continue;
        }
        if (S.kills >= next_calib) {
            calibrate(S.calib_runs, (int)rnd_below(3) * 10);
            next_calib += 20;
        }
        soak_one(n++, 1 + (int)rnd_below(6));
    }
    int64_t took = tu_now_ms() - t_start;
    report(took);
    ok(S.kills >= TARGET, "%d SIGKILLs delivered (wanted %d; more fill thin phases)", S.kills,
       TARGET);
    ok(S.via_retry >= RETRY_FLOOR, "%d kills hit `retry --now` runs (want >= %d)", S.via_retry,
       RETRY_FLOOR);
    diag("%d tasks ended in doubt and were resolved truthfully (%d --not-done)", S.in_doubt,
         S.resolved_not_done);
    ok(S.violations == 0,
       "every task: succeeded, or in doubt and resolved; work never re-ran after its commit, "
       "nonce stable, exactly one ledger line in the end (%d violations)",
       S.violations);

    int total = S.tasks + S.calib_runs;
    ok(ledger_task_lines(LEDGER_FILE) == total, "ledger: %d lines for %d tasks",
       ledger_task_lines(LEDGER_FILE), total);
    tu_result r;
    int rc = cli(&r, LEDGER, ST, "stats", "--json", NULL);
    json_t *j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && jint(j, "tasks") == total &&
           jint(json_object_get(j, "by_status"), "succeeded") == total,
       "stats: all %d tasks succeeded", total);
    json_decref(j);
    tu_result_free(&r);
    rc = cli(&r, LEDGER, ST, "list", "--status", "running", "--json", NULL);
    j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && json_array_size(j) == 0, "no task is left running");
    json_decref(j);
    tu_result_free(&r);
    const char *dump[] = {"/usr/bin/mdb_dump", "-a", ST, NULL};
    if (access(dump[0], X_OK) == 0) {
        rc = tu_run(&r, dump, NULL, NULL, 0, CMD_TIMEOUT_MS);
        ok(rc == 0 && r.out_len > 0, "mdb_dump reads the whole store after %d kills", S.kills);
        tu_result_free(&r);
    }
    rc = cli(&r, LEDGER, ST, "retry", "--now", "--json", NULL);
    j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && jint(j, "ran") == 0, "retry --now finds nothing left to do");
    json_decref(j);
    tu_result_free(&r);

    view_close(&VIEW);
    rc = tap_done();
    if (rc == 0 && !getenv("CAIRN_TEST_KEEP"))
        tu_rm_rf(D);
    free(D), free(ST), free(TRACE), free(LEDGER_FILE);
    return rc;
}
