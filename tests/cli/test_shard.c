/* test_shard.c - `shard` (issue 19 §5): which of N machines owns a task, and the filter that
 * hands each machine its share of one stream.
 *
 * The shard function is a contract (the same answer on every machine and version), so a few IDs
 * are pinned to their shards here: a change to the hash fails this test, as it would split a
 * fleet's tasks between the old and the new answer. Beyond that: the spread over N, the growth
 * from N to N + 1 (only the new shard takes tasks), the filter's lines byte for byte, the ID a
 * line derives as `run` derives it, bad lines and usage errors, and the whole use: one stream
 * sharded three ways into three stores by `shard | consume`, every task in exactly one store.
 */
#include <sys/stat.h>

#include "cli_common.h"

static char *D;

static int count_lines(const char *s)
{
    int n = 0;
    for (; s && *s; s++)
        n += *s == '\n';
    return n;
}

/* The shards `shard --of n` prints for the IDs (one per line of out). */
static int shard_ids(tu_result *r, const char *n, const char *const *ids)
{
    const char *argv[64] = {LEDGER, "shard", "--of", n};
    int k = 4;
    for (size_t i = 0; ids[i] && k < 62; i++)
        argv[k++] = ids[i];
    argv[k] = NULL;
    return tu_run(r, argv, NULL, NULL, 0, CMD_TIMEOUT_MS);
}

static void t_pinned(void)
{
    static const char *const ids[] = {"a", "b", "c", "order-1", "order-2", "acme_7", NULL};
    tu_result r;
    int rc = shard_ids(&r, "4", ids);
    ok(rc == 0 && !strcmp(r.out, "1\n2\n2\n3\n3\n1\n"),
       "shard --of 4 of six IDs gives the pinned shards 1 2 2 3 3 1 (got %s)", oneline(r.out));
    tu_result_free(&r);
    rc = shard_ids(&r, "1", ids);
    ok(rc == 0 && !strcmp(r.out, "0\n0\n0\n0\n0\n0\n"), "--of 1: every task is shard 0");
    tu_result_free(&r);
}

/* 2000 IDs: the spread over 4 and 5, and what moves from 4 to 5 */
static void t_spread(void)
{
    char *list = NULL;
    for (int i = 0; i < 2000; i++) {
        char *n = tu_fmt("%s{\"id\": \"t%d\"}\n", list ? list : "", i);
        free(list);
        list = n;
    }
    char *path = tu_fmt("%s/ids.jsonl", D);
    tu_write_file(path, list, strlen(list));
    int count4[4] = {0}, count5[5] = {0}, moved = 0, moved_elsewhere = 0;
    char *of4[4] = {0}, *of5[5] = {0};
    for (int i = 0; i < 5; i++) {
        char idx[8];
        snprintf(idx, sizeof idx, "%d", i);
        tu_result r;
        if (i < 4) {
            tu_runl(&r, CMD_TIMEOUT_MS, LEDGER, "shard", "--of", "4", "--index", idx, path, NULL);
            count4[i] = count_lines(r.out);
            of4[i] = strdup(r.out);
            tu_result_free(&r);
        }
        tu_runl(&r, CMD_TIMEOUT_MS, LEDGER, "shard", "--of", "5", "--index", idx, path, NULL);
        count5[i] = count_lines(r.out);
        of5[i] = strdup(r.out);
        tu_result_free(&r);
    }
    int spread_ok = 1, sum = 0;
    for (int i = 0; i < 4; i++) {
        spread_ok &= count4[i] > 400 && count4[i] < 600;
        sum += count4[i];
    }
    ok(spread_ok && sum == 2000, "2000 tasks over 4 shards: each 400-600 (%d %d %d %d), all once",
       count4[0], count4[1], count4[2], count4[3]);
    /* a task of shard i of 4 is, of 5, in shard i or in the new shard 4 */
    for (int i = 0; i < 4; i++)
        for (const char *p = of4[i]; *p;) {
            const char *nl = strchr(p, '\n');
            char line[64];
            snprintf(line, sizeof line, "%.*s\n", (int)(nl - p), p);
            if (!tu_contains(of5[i], line)) {
                moved++;
                moved_elsewhere += !tu_contains(of5[4], line);
            }
            p = nl + 1;
        }
    ok(moved == count5[4] && moved_elsewhere == 0 && moved > 300 && moved < 500,
       "growing to 5 shards moves only the new shard's %d tasks (%d moved, %d elsewhere)",
       count5[4], moved, moved_elsewhere);
    for (int i = 0; i < 5; i++)
        free(i < 4 ? of4[i] : NULL), free(of5[i]);
    free(list), free(path);
}

/* The filter: lines unchanged, the ID from "id" or derived as `run` derives it, bad lines. */
static void t_filter(void)
{
    const char *text = "{\"id\": \"order-1\", \"input\": {\"x\": 1}}\n"
                       "{\"tenant\": \"acme\", \"order\": 7,   \"note\": \"spaces kept\"}\n"
                       "\n"
                       "{not json\n"
                       "{\"id\": \"bad id!\"}\n"
                       "{\"id\": \"order-2\"}\n";
    char *path = tu_fmt("%s/mixed.jsonl", D);
    tu_write_file(path, text, strlen(text));
    char *all = calloc(1, 1);
    int codes = 0;
    for (int i = 0; i < 4; i++) {
        char idx[4];
        snprintf(idx, sizeof idx, "%d", i);
        tu_result r;
        int rc = tu_runl(&r, CMD_TIMEOUT_MS, LEDGER, "shard", "--of", "4", "--index", idx,
                         "--task-from", "tenant,order", path, NULL);
        codes += rc == 65;
        if (i == 0)
            ok(tu_contains(r.err, "mixed.jsonl:4: ") && tu_contains(r.err, "mixed.jsonl:5: "),
               "bad lines are named by file and line: 4 (not JSON) and 5 (a bad ID) (%s)",
               oneline(r.err));
        if (i == 1)
            ok(!strcmp(r.out,
                       "{\"tenant\": \"acme\", \"order\": 7,   \"note\": \"spaces kept\"}\n"),
               "shard 1 holds the acme/7 line (ID acme_7, as `run --task-from` derives it), "
               "byte for byte (%s)",
               oneline(r.out));
        if (i == 3)
            ok(!strcmp(r.out, "{\"id\": \"order-1\", \"input\": {\"x\": 1}}\n{\"id\": "
                              "\"order-2\"}\n"),
               "shard 3 holds order-1 and order-2, by their \"id\", in stream order");
        char *n = tu_fmt("%s%s", all, r.out);
        free(all);
        all = n;
        tu_result_free(&r);
    }
    ok(codes == 4 && count_lines(all) == 3,
       "over the 4 shards: the 3 good lines once each, and exit 65 for the bad ones");
    tu_result r;
    int rc = tu_runl(&r, CMD_TIMEOUT_MS, LEDGER, "shard", "--of", "4", "--index", "0", path, NULL);
    ok(rc == 65 && tu_contains(r.err, "pass --task-from or --graph"),
       "a line with no \"id\" and nothing to derive it from is named (%s)", first_line(r.err));
    tu_result_free(&r);
    free(all), free(path);
}

static void t_usage(void)
{
    tu_result r;
    int rc = tu_runl(&r, CMD_TIMEOUT_MS, LEDGER, "shard", "t1", NULL);
    ok(rc == 64 && tu_contains(r.err, "--of N is required"), "no --of: 64");
    tu_result_free(&r);
    rc = tu_runl(&r, CMD_TIMEOUT_MS, LEDGER, "shard", "--of", "0", "t1", NULL);
    ok(rc == 64, "--of 0: 64");
    tu_result_free(&r);
    rc = tu_runl(&r, CMD_TIMEOUT_MS, LEDGER, "shard", "--of", "4", "--index", "4", NULL);
    ok(rc == 64 && tu_contains(r.err, "--index must be 0 to 3"), "--index 4 of 4: 64");
    tu_result_free(&r);
    rc = tu_runl(&r, CMD_TIMEOUT_MS, LEDGER, "shard", "--of", "4", "no spaces", NULL);
    ok(rc == 64 && tu_contains(r.err, "'no spaces'"), "an invalid task ID: 64, named");
    tu_result_free(&r);
    rc = tu_runl(&r, CMD_TIMEOUT_MS, LEDGER, "shard", "--of", "4", NULL);
    ok(rc == 64 && tu_contains(r.err, "no task ID given"), "no ID and no --index: 64");
    tu_result_free(&r);
    char *missing = tu_fmt("%s/none.jsonl", D);
    rc = tu_runl(&r, CMD_TIMEOUT_MS, LEDGER, "shard", "--of", "4", "--index", "1", missing, NULL);
    ok(rc == 66 && tu_contains(r.err, "none.jsonl"), "a missing input file: 66, named");
    tu_result_free(&r);
    free(missing);
}

/* The use: one stream, three machines (stores), `shard | consume` on each. */
static void t_three_stores(void)
{
    char *dir = tu_fmt("%s/fleet", D);
    mkdir(dir, 0755);
    char *trace = tu_fmt("%s/trace", dir), *ledger = tu_fmt("%s/ledger", dir);
    char *path = tu_fmt("%s/stream.jsonl", dir);
    ledger_stream(path, "job-", 30, trace, ledger, 0, -1);
    long total = 0;
    int all_ok = 1;
    for (int i = 0; i < 3; i++) {
        char *store = tu_fmt("%s/store%d", dir, i);
        char *cmd = tu_fmt("'%s' shard --of 3 --index %d '%s' | '%s' consume --graph ledger "
                           "--store '%s' --jobs 2",
                           LEDGER, i, path, LEDGER, store);
        tu_result r;
        int rc = tu_runl(&r, CMD_TIMEOUT_MS, "/bin/sh", "-c", cmd, NULL);
        all_ok &= rc == 0;
        json_t *st = NULL;
        tu_result s;
        if (cli(&s, LEDGER, store, "stats", "--json", NULL) == 0)
            st = json_loads(s.out, 0, NULL);
        total += st ? jint(json_object_get(st, "by_status"), "succeeded") : 0;
        json_decref(st);
        tu_result_free(&s);
        tu_result_free(&r);
        free(store), free(cmd);
    }
    ok(all_ok && total == 30 && tu_count_lines(ledger, NULL) == 30,
       "30 tasks sharded over 3 stores by shard | consume: all succeeded, 30 in all, 30 effects");

    /* examples/sharding/slurm-array.sh, as three array tasks would run it (and one again: a
     * rerun after a failure runs nothing twice) */
    const char *src = getenv("CAIRN_SOURCE_ROOT");
    char *script = tu_fmt("%s/examples/sharding/slurm-array.sh", src ? src : ".");
    char *root = tu_fmt("%s/slurm", dir);
    int script_ok = 1;
    for (int i = 0; i < 4; i++) {
        char *id = tu_fmt("SLURM_ARRAY_TASK_ID=%d", i % 3), *cairn = tu_fmt("CAIRN=%s", LEDGER);
        char *sr = tu_fmt("STORE_ROOT=%s", root);
        const char *env[] = {id,  "SLURM_ARRAY_TASK_COUNT=3", cairn, "GRAPH=ledger", sr, "JOBS=2",
                             NULL};
        const char *argv[] = {"/bin/bash", script, path, NULL};
        tu_result r;
        int rc = tu_run(&r, argv, env, NULL, 0, CMD_TIMEOUT_MS);
        if (rc)
            diag("slurm-array.sh as array task %d: %d: %s", i % 3, rc, oneline(r.err));
        script_ok &= rc == 0;
        tu_result_free(&r);
        free(id), free(cairn), free(sr);
    }
    ok(script_ok && tu_count_lines(ledger, NULL) == 60,
       "slurm-array.sh as array tasks 0, 1, 2 (and 0 again): each task's effect once more, 60 "
       "in all (got %d)",
       tu_count_lines(ledger, NULL));
    free(script), free(root);
    free(dir), free(trace), free(ledger), free(path);
}

int main(void)
{
    cli_init();
    D = tu_mkdtemp("shard");
    t_pinned();
    t_spread();
    t_filter();
    t_usage();
    t_three_stores();
    tu_rm_rf(D);
    free(D);
    return tap_done();
}
