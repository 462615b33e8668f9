/* bench/store/report.c - prints the benchmark's results: a table for people, or one JSON
 * document (--json) for scripts that track the numbers over time.
 *
 * The headline is a ratio against the SQLite peer measured in the same run, never an absolute
 * time: absolute numbers move with the disk, the filesystem and whatever else the machine is
 * doing, while both stores see the same of all three. A ratio below its target is a MISS in
 * the report, not an error.
 */
#include <jansson.h>
#include <lmdb.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/store/bench.h"

static const char *const notes[] = {
    "steps/s of `runner` rows: fresh tasks of 10 steps through cairn_runner_run (JSON parse and "
    "payload hash, admission, acquire, per step a resume read and a commit, final DURABLE "
    "commit), divided by 10; the SQLite `tasks` rows do the same transactions (minus the JSON "
    "parse and hash)",
    "p50/p99 of `commits` rows: one step commit (fenced task read, step upsert with the output, "
    "the task record rewritten only when the lease is renewed) in a direct loop; of "
    "`runner`/`tasks` rows: one whole 10-step task",
    "cairn nosync stores map their file writable (MDB_WRITEMAP, the map reserved on disk "
    "first): a commit is memory writes, no system call",
    "cairn sync mode flushes only at durable points: an effect's intent, an expensive step's "
    "output, a task's end (one flush of the journal, to which every commit appends; data.mdb and "
    "the marker `synced` are flushed at folds, about once a second); other commits are "
    "RELAXED, not flushed, so a power cut can undo them back to the last durable point (those "
    "steps run again) but never corrupts the store (checkpoint/synced.c, journal.c); the `every "
    "commit "
    "DURABLE` rows (every step marked expensive) show what flushing every commit costs, and "
    "`SQLite NORMAL, FULL at task end` is the peer making the same promise",
    "SQLite WAL synchronous=FULL fsyncs the WAL at every commit (power-loss safe); NORMAL fsyncs "
    "only at checkpoints (process-crash safe), the same promise as cairn nosync",
    "each configuration runs in rounds that alternate the stores, so background load on the "
    "machine falls on all of them alike (dirty pages are flushed, untimed, before each store's "
    "turn); steps/s is the median of the rounds' rates and a ratio the median of the rounds' "
    "ratios, so a burst of load during one round moves one value, not the result",
};

/* The median over rounds of cairn's rate / the peer's rate in the same round: a burst of load
 * that hits one round moves one ratio, not the result. Truncated (not rounded) to two decimals,
 * so that a printed ratio never reads as reaching a target that the measured one missed. */
static double ratio(const bench_tput *c, const bench_tput *s)
{
    if (!c->done || !s->done || c->n_rate != s->n_rate || !c->n_rate)
        return 0;
    double r[BENCH_MAX_ROUNDS];
    for (int i = 0; i < c->n_rate; i++)
        r[i] = s->rate[i] > 0 ? c->rate[i] / s->rate[i] : 0;
    return floor(bench_median(r, c->n_rate) * 100.0) / 100.0;
}

static const char *verdict(double got, double target) { return got >= target ? "PASS" : "MISS"; }

static const char *sqlite_name(int power_loss)
{
    return power_loss ? "SQLite WAL synchronous=FULL" : "SQLite WAL synchronous=NORMAL";
}

static const char *cairn_name(int power_loss)
{
    return power_loss ? "cairn sync (relaxed commits)" : "cairn nosync";
}

/* ------------------------------------------------------------------ text */

static void tput_row(const char *store, const char *how, const bench_tput *t)
{
    if (!t->done) {
        printf("  %-34s %-8s %10s\n", store, how, "-");
        return;
    }
    if (strcmp(how, "commits") == 0)
        printf("  %-34s %-8s %10.0f %9.1f us %9.1f us\n", store, how, t->steps_s, t->p50_us,
               t->p99_us);
    else
        printf("  %-34s %-8s %10.0f %9.2f ms %9.2f ms\n", store, how, t->steps_s, t->p50_us / 1e3,
               t->p99_us / 1e3);
}

static void lat_row(const char *what, const bench_lat *l, const char *unit)
{
    if (l->done)
        printf("  %-50s %9.2f %-2s %9.2f %-2s (n=%llu)\n", what, l->p50, unit, l->p99, unit,
               (unsigned long long)l->n);
    else
        printf("  %-50s %12s\n", what, "-");
}

void bench_report_text(const bench_results *r)
{
    printf("cairn checkpoint store benchmark (%s run), %s\n", r->quick ? "quick" : "full", r->when);
    printf("  host %s, Linux %s, %ld CPUs (%s), load average %.2f at start, %.2f at end\n", r->host,
           r->kernel, r->cpus, r->cpu, r->load_start, r->load_end);
    printf("  scratch %s on %s (statfs type 0x%lx); SQLite %s; %s\n", r->scratch, r->fs,
           (unsigned long)r->fs_type, sqlite3_libversion(), mdb_version(NULL, NULL, NULL));
    printf("  %u tasks x %d steps per power-loss store, %u per process-crash store, in %u "
           "rounds\n\n",
           r->tasks_sync, BENCH_STEPS, r->tasks_nosync, r->rounds);

    int any = 0;
    for (int i = 0; i < 4; i++)
        any |= r->cfg[i].cairn_task.done;
    if (any) {
        printf("1. Step checkpoints (p50/p99: per commit for `commits`, per 10-step task "
               "otherwise)\n");
        printf("  %-34s %-8s %10s %12s %12s\n", "store", "measure", "steps/s", "p50", "p99");
        for (int i = 0; i < 4; i++) {
            const bench_config *c = &r->cfg[i];
            int pl = i < 2;
            if (!c->cairn_task.done && !c->cairn_commit.done)
                continue;
            printf(" %s, %zu B outputs\n", c->durability, c->size);
            tput_row(sqlite_name(pl), "tasks", &c->sqlite_task);
            tput_row(cairn_name(pl), "runner", &c->cairn_task);
            tput_row(sqlite_name(pl), "commits", &c->sqlite_commit);
            tput_row(cairn_name(pl), "commits", &c->cairn_commit);
            if (pl) {
                tput_row("cairn sync, every commit DURABLE", "runner", &c->durable_task);
                tput_row("cairn sync, every commit DURABLE", "commits", &c->durable_commit);
                tput_row("SQLite NORMAL, FULL at task end", "tasks", &c->split_task);
            }
        }
        printf("\n  Ratios: cairn steps/s / SQLite steps/s\n");
        printf("  %-14s %-7s %-28s %8s %8s  %s\n", "durability", "output", "compared", "ratio",
               "target", "result");
        for (int i = 0; i < 4; i++) {
            const bench_config *c = &r->cfg[i];
            if (!c->cairn_task.done && !c->cairn_commit.done)
                continue;
            int pl = i < 2;
            double target = pl ? BENCH_TARGET_POWER_LOSS : BENCH_TARGET_CRASH;
            char sz[16];
            snprintf(sz, sizeof sz, "%zu B", c->size);
            double rt = ratio(&c->cairn_task, &c->sqlite_task);
            double rc = ratio(&c->cairn_commit, &c->sqlite_commit);
            printf("  %-14s %-7s %-28s %7.2fx %7.1fx  %s\n", c->durability, sz,
                   "runner vs tasks (headline)", rt, target, verdict(rt, target));
            printf("  %-14s %-7s %-28s %7.2fx %7.1fx  %s\n", c->durability, sz,
                   "commit loop vs commit loop", rc, target, verdict(rc, target));
            if (pl) {
                printf("  %-14s %-7s %-28s %7.2fx %8s  (info)\n", c->durability, sz,
                       "DURABLE runner vs tasks", ratio(&c->durable_task, &c->sqlite_task), "-");
                double sp = ratio(&c->cairn_task, &c->split_task);
                printf("  %-14s %-7s %-28s %7.2fx %7.1fx  %s\n", c->durability, sz,
                       "runner vs same-promise SQL", sp, BENCH_TARGET_SAME_PROMISE,
                       verdict(sp, BENCH_TARGET_SAME_PROMISE));
            }
        }
        printf("\n");
    }

    if (r->cairn_read_step.done) {
        printf("2. Resume read of a 4-step task (task record, own step record, dependency "
               "output, progress)\n");
        printf("  %-50s %12s %12s\n", "", "p50", "p99");
        lat_row("cairn, one step's read", &r->cairn_read_step, "us");
        lat_row("cairn, all 4 steps", &r->cairn_read_task, "us");
        lat_row("SQLite, one step's read", &r->sqlite_read_step, "us");
        lat_row("SQLite, all 4 steps", &r->sqlite_read_task, "us");
        double x =
            r->cairn_read_step.p50 > 0 ? r->sqlite_read_step.p50 / r->cairn_read_step.p50 : 0;
        printf("  target: cairn p50 per step read <= %.1f us: %s; SQLite p50 / cairn p50 = "
               "%.1fx, target %.1fx: %s\n\n",
               BENCH_TARGET_RESUME_US, verdict(BENCH_TARGET_RESUME_US, r->cairn_read_step.p50), x,
               BENCH_TARGET_RESUME_X, verdict(x, BENCH_TARGET_RESUME_X));
    }

    if (r->ledger_note[0]) {
        printf("3. `cairn run` on an already-succeeded task (idempotent hit)\n");
        printf("  %-50s %12s %12s\n", "", "p50", "p99");
        lat_row("spawn /bin/true (process start baseline)", &r->spawn_true, "ms");
        lat_row("cairn-ledger run --help (start, no store)", &r->spawn_help, "ms");
        lat_row("cairn-ledger run on a succeeded task", &r->spawn_hit, "ms");
        lat_row("cairn_runner_run on a succeeded task, in process", &r->inproc_hit, "us");
        if (r->spawn_hit.done)
            printf("  target: p50 <= %.0f ms: %s\n", BENCH_TARGET_HIT_MS,
                   verdict(BENCH_TARGET_HIT_MS, r->spawn_hit.p50));
        printf("  binary: %s\n\n", r->ledger_note);
    }

    if (r->size.done) {
        const bench_size *z = &r->size;
        double c = (double)z->cairn_bytes / z->tasks, s = (double)z->sqlite_bytes / z->tasks;
        printf("4. Size: %u tasks of %u steps (%zu-byte outputs), their records and indexes\n",
               z->tasks, z->steps, z->out);
        printf("  %-50s %12.0f bytes a task (%llu in all)\n", "cairn (the pages in use)", c,
               (unsigned long long)z->cairn_bytes);
        printf("  %-50s %12.0f bytes a task (%llu in all)\n", "SQLite (page_count * page_size)", s,
               (unsigned long long)z->sqlite_bytes);
        printf("  target: SQLite bytes / cairn bytes >= %.1f: %s (%.2fx)\n", BENCH_TARGET_SIZE,
               verdict(s / c, BENCH_TARGET_SIZE), s / c);
        printf("  cairn's databases:");
        for (int i = 0; i < z->n_db; i++)
            if (z->db[i].pages)
                printf("\n    %-10s %8llu pages %8llu records, leaf pages %3.0f%% full",
                       z->db[i].name, (unsigned long long)z->db[i].pages,
                       (unsigned long long)z->db[i].records, 100 * z->db[i].fill);
        printf("\n\n");
    }

    printf("Notes:\n");
    for (size_t i = 0; i < sizeof notes / sizeof *notes; i++)
        printf("  - %s\n", notes[i]);
}

/* ------------------------------------------------------------------ JSON */

static json_t *tput_json(const char *store, const char *measure, const bench_tput *t)
{
    if (!t->done)
        return json_pack("{s:s, s:s, s:n}", "store", store, "measure", measure, "steps_per_s");
    json_t *rates = json_array();
    for (int i = 0; i < t->n_rate; i++)
        json_array_append_new(rates, json_real(t->rate[i]));
    return json_pack("{s:s, s:s, s:f, s:o, s:I, s:f, s:s, s:f, s:f}", "store", store, "measure",
                     measure, "steps_per_s", t->steps_s, "round_steps_per_s", rates, "steps",
                     (json_int_t)t->steps, "seconds", t->seconds, "latency_of",
                     strcmp(measure, "commits") == 0 ? "one commit" : "one 10-step task", "p50_us",
                     t->p50_us, "p99_us", t->p99_us);
}

static json_t *lat_json(const bench_lat *l, const char *unit)
{
    if (!l->done)
        return json_null();
    char k50[16], k99[16];
    snprintf(k50, sizeof k50, "p50_%s", unit);
    snprintf(k99, sizeof k99, "p99_%s", unit);
    return json_pack("{s:f, s:f, s:I}", k50, l->p50, k99, l->p99, "n", (json_int_t)l->n);
}

static json_t *ratio_json(const bench_config *c, const char *compared, double got, double target)
{
    return json_pack("{s:s, s:I, s:s, s:f, s:f, s:s}", "durability", c->durability, "output_bytes",
                     (json_int_t)c->size, "compared", compared, "ratio", got, "target", target,
                     "result", verdict(got, target));
}

/* A ratio shown for information: no target, no verdict. */
static json_t *info_ratio_json(const bench_config *c, const char *compared, double got)
{
    return json_pack("{s:s, s:I, s:s, s:f, s:n, s:s}", "durability", c->durability, "output_bytes",
                     (json_int_t)c->size, "compared", compared, "ratio", got, "target", "result",
                     "info");
}

void bench_report_json(const bench_results *r)
{
    json_t *doc = json_object();
    char magic[32];
    snprintf(magic, sizeof magic, "0x%lx", (unsigned long)r->fs_type);
    json_t *meta = json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:I, s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I}",
        "benchmark", "cairn-store", "mode", r->quick ? "quick" : "full", "date", r->when, "host",
        r->host, "kernel", r->kernel, "cpus", (json_int_t)r->cpus, "cpu", r->cpu, "scratch_dir",
        r->scratch, "filesystem", r->fs, "statfs_type", magic, "sqlite", sqlite3_libversion(),
        "lmdb", mdb_version(NULL, NULL, NULL), "steps_per_task", (json_int_t)BENCH_STEPS,
        "tasks_power_loss", (json_int_t)r->tasks_sync, "tasks_process_crash",
        (json_int_t)r->tasks_nosync, "rounds", (json_int_t)r->rounds);
    json_object_set_new(meta, "load_average_start", json_real(r->load_start));
    json_object_set_new(meta, "load_average_end", json_real(r->load_end));
    json_object_set_new(doc, "meta", meta);
    json_t *cks = json_array(), *ratios = json_array();
    for (int i = 0; i < 4; i++) {
        const bench_config *c = &r->cfg[i];
        if (!c->cairn_task.done && !c->cairn_commit.done)
            continue;
        int pl = i < 2;
        json_t *rows = json_array();
        json_array_append_new(rows, tput_json(sqlite_name(pl), "tasks", &c->sqlite_task));
        json_array_append_new(rows, tput_json(cairn_name(pl), "runner", &c->cairn_task));
        json_array_append_new(rows, tput_json(sqlite_name(pl), "commits", &c->sqlite_commit));
        json_array_append_new(rows, tput_json(cairn_name(pl), "commits", &c->cairn_commit));
        if (pl) {
            json_array_append_new(
                rows, tput_json("cairn sync, every commit DURABLE", "runner", &c->durable_task));
            json_array_append_new(
                rows, tput_json("cairn sync, every commit DURABLE", "commits", &c->durable_commit));
            json_array_append_new(
                rows, tput_json("SQLite NORMAL, FULL at task end", "tasks", &c->split_task));
        }
        json_array_append_new(cks, json_pack("{s:s, s:I, s:o}", "durability", c->durability,
                                             "output_bytes", (json_int_t)c->size, "rows", rows));
        double target = pl ? BENCH_TARGET_POWER_LOSS : BENCH_TARGET_CRASH;
        json_array_append_new(ratios, ratio_json(c, "runner vs tasks",
                                                 ratio(&c->cairn_task, &c->sqlite_task), target));
        json_array_append_new(ratios,
                              ratio_json(c, "commit loop vs commit loop",
                                         ratio(&c->cairn_commit, &c->sqlite_commit), target));
        if (pl) {
            json_array_append_new(ratios,
                                  info_ratio_json(c, "DURABLE runner vs tasks",
                                                  ratio(&c->durable_task, &c->sqlite_task)));
            json_array_append_new(ratios, ratio_json(c, "runner vs same-promise SQLite",
                                                     ratio(&c->cairn_task, &c->split_task),
                                                     BENCH_TARGET_SAME_PROMISE));
        }
    }
    json_object_set_new(doc, "checkpoints", cks);
    json_object_set_new(doc, "ratios", ratios);
    json_object_set_new(
        doc, "resume_read",
        json_pack(
            "{s:o, s:o, s:o, s:o, s:f, s:s}", "cairn_step", lat_json(&r->cairn_read_step, "us"),
            "cairn_task", lat_json(&r->cairn_read_task, "us"), "sqlite_step",
            lat_json(&r->sqlite_read_step, "us"), "sqlite_task",
            lat_json(&r->sqlite_read_task, "us"), "target_p50_us", BENCH_TARGET_RESUME_US, "result",
            r->cairn_read_step.done ? verdict(BENCH_TARGET_RESUME_US, r->cairn_read_step.p50)
                                    : "n/a"));
    json_object_set_new(
        doc, "idempotent_hit",
        json_pack("{s:o, s:o, s:o, s:o, s:f, s:s, s:s, s:I}", "spawn_true",
                  lat_json(&r->spawn_true, "ms"), "spawn_help", lat_json(&r->spawn_help, "ms"),
                  "cairn_run", lat_json(&r->spawn_hit, "ms"), "in_process",
                  lat_json(&r->inproc_hit, "us"), "target_p50_ms", BENCH_TARGET_HIT_MS, "result",
                  r->spawn_hit.done ? verdict(BENCH_TARGET_HIT_MS, r->spawn_hit.p50) : "n/a",
                  "binary", r->ledger_note, "effects", (json_int_t)r->ledger_effects));
    if (r->size.done) {
        const bench_size *z = &r->size;
        double ratio = (double)z->sqlite_bytes / (double)z->cairn_bytes;
        json_object_set_new(
            doc, "size",
            json_pack("{s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:s}", "tasks", (json_int_t)z->tasks,
                      "steps", (json_int_t)z->steps, "output_bytes", (json_int_t)z->out,
                      "cairn_bytes", (json_int_t)z->cairn_bytes, "sqlite_bytes",
                      (json_int_t)z->sqlite_bytes, "sqlite_over_cairn", ratio, "target",
                      BENCH_TARGET_SIZE, "result", verdict(ratio, BENCH_TARGET_SIZE)));
        json_t *dbs = json_array();
        for (int i = 0; i < z->n_db; i++)
            json_array_append_new(dbs, json_pack("{s:s, s:I, s:I, s:f}", "name", z->db[i].name,
                                                 "pages", (json_int_t)z->db[i].pages, "records",
                                                 (json_int_t)z->db[i].records, "leaf_fill",
                                                 z->db[i].fill));
        json_object_set_new(json_object_get(doc, "size"), "cairn_databases", dbs);
    }
    json_t *jn = json_array();
    for (size_t i = 0; i < sizeof notes / sizeof *notes; i++)
        json_array_append_new(jn, json_string(notes[i]));
    json_object_set_new(doc, "notes", jn);
    char *s = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    if (s)
        printf("%s\n", s);
    free(s);
    json_decref(doc);
}
