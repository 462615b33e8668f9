/* runner/cli_shard.c - `shard`: which of N machines owns a task, so tasks can be spread over
 * machines that each own a store (Slurm job arrays, Kubernetes Indexed Jobs, Kafka partitions
 * keyed by task ID).
 *
 * The shard of a task is cairn_shard_of(): a jump consistent hash (Lamping and Veach, 2014) of
 * the XXH3-64 hash of the task ID's bytes. Two properties make it fit: it is stable (the same ID
 * and N give the same shard on every machine and in every cairn version: the function is part of
 * the public header's contract), and growing N to N+1 moves only the 1/(N+1) of the tasks that
 * the new shard takes, so a store keeps almost all of its tasks when a machine is added.
 *
 * Two forms: `shard --of N ID...` prints each ID's shard; `shard --of N --index I [FILE|-]`
 * filters a stream of task lines (what `consume` reads: an input object, or {"id", "input"})
 * to the ones shard I owns, so each array task feeds its share of one input to its own consume.
 */
#include <errno.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/taskid.h"
#include "common/xxh.h"
#include "runner/cli.h"

uint32_t cairn_shard_of(const char *task_id, uint32_t n_shards)
{
    if (!task_id || n_shards == 0)
        return 0;
    uint64_t key = XXH3_64bits(task_id, strlen(task_id));
    /* jump consistent hash: the bucket the key lands in after jumping forward through 0..n-1 */
    int64_t b = -1, j = 0;
    while (j < (int64_t)n_shards) {
        b = j;
        key = key * 2862933555777941757ULL + 1;
        j = (int64_t)((double)(b + 1) * ((double)(1LL << 31) / (double)((key >> 33) + 1)));
    }
    return (uint32_t)b;
}

static const char shard_help[] =
    "usage: %P shard --of N TASK_ID...\n"
    "       %P shard --of N --index I [--graph G] [--task-from F1,F2] [FILE|-]\n"
    "Which of N shards (machines, each with its own store) owns a task: a stable hash of the\n"
    "task ID (cairn_shard_of: the same answer on every machine and version; growing N moves\n"
    "only the tasks the new shard takes). The first form prints each ID's shard, 0..N-1, one\n"
    "a line. The second reads task lines as `consume` does (an input object, or {\"id\",\n"
    "\"input\"}) and prints the lines shard I owns, unchanged: the ID is the line's \"id\", else\n"
    "derived from the input as `run` derives it (--task-from, or the payload hash and --graph).\n"
    "For a Slurm array: `%P shard --of $SLURM_ARRAY_TASK_COUNT --index $SLURM_ARRAY_TASK_ID\n"
    "tasks.jsonl | %P consume ...`; for a Kubernetes Indexed Job: --index $JOB_COMPLETION_INDEX.\n"
    "Exit: 0; 64 usage; 65 some line had no task ID (named on stderr; the others are printed);\n"
    "66 the file cannot be read.\n";

typedef struct shard_args {
    const char *of, *index, *graph, *task_from;
} shard_args;

static const cairn__opt shard_opts[] = {{"of", 0, 1, 0, 0, offsetof(shard_args, of)},
                                        {"index", 0, 1, 0, 0, offsetof(shard_args, index)},
                                        {"graph", 0, 1, 0, 0, offsetof(shard_args, graph)},
                                        {"task-from", 0, 1, 0, 0, offsetof(shard_args, task_from)},
                                        {NULL, 0, 0, 0, 0, 0}};
static const cairn__opt_cmd shard_cmd = {"shard", shard_help, 0, -1, shard_opts};

/* The task ID of one stream line into id; 0 or a CAIRN_E* code with err. */
static int line_id(const shard_args *a, const char *line, size_t n, char *id, size_t idlen,
                   char *err, size_t errlen)
{
    json_error_t je;
    json_t *j = json_loadb(line, n, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(j)) {
        snprintf(err, errlen, "not a JSON object%s%s", j ? "" : ": ", j ? "" : je.text);
        json_decref(j);
        return CAIRN_EJSON;
    }
    int rc = 0;
    json_t *given = json_object_get(j, "id"), *in = json_object_get(j, "input");
    if (json_is_string(given)) {
        snprintf(id, idlen, "%s", json_string_value(given));
        rc = cairn__task_id_check(id, err, errlen);
    } else if (given && !json_is_null(given)) {
        snprintf(err, errlen, "\"id\" must be a string");
        rc = CAIRN_EJSON;
    } else if (!a->task_from && !a->graph) {
        snprintf(err, errlen, "the line has no \"id\": pass --task-from or --graph to derive it");
        rc = CAIRN_EJSON;
    } else {
        rc = cairn__task_id_derive(a->graph ? a->graph : "", in ? in : j, a->task_from, id, idlen,
                                   err, errlen);
    }
    json_decref(j);
    return rc;
}

/* Line by line (a stream of any length: only one line is held) */
static int filter(const shard_args *a, uint32_t n, uint32_t index, const char *path)
{
    const char *name = path && strcmp(path, "-") ? path : "<stdin>";
    FILE *f = path && strcmp(path, "-") ? fopen(path, "re") : stdin;
    if (!f) {
        cairn__log(CAIRN__LOG_ERROR, "shard", "input", NULL, NULL, "%s: %s", name, strerror(errno));
        return CAIRN__EX_NOINPUT;
    }
    char *line = NULL, err[600];
    size_t cap = 0;
    ssize_t l;
    long line_no = 0;
    int bad = 0;
    while ((l = getline(&line, &cap, f)) >= 0) {
        line_no++;
        size_t t = (size_t)l;
        while (t && (line[t - 1] == '\n' || line[t - 1] == '\r' || line[t - 1] == ' ' ||
                     line[t - 1] == '\t'))
            t--;
        if (t == 0)
            continue;
        char id[CAIRN_TASK_ID_MAX + 1];
        if (line_id(a, line, t, id, sizeof id, err, sizeof err)) {
            cairn__log(CAIRN__LOG_ERROR, "shard", "bad_line", NULL, NULL, "%s:%ld: %s", name,
                       line_no, err);
            bad = 1;
            continue;
        }
        if (cairn_shard_of(id, n) == index) {
            fwrite(line, 1, t, stdout);
            fputc('\n', stdout);
        }
    }
    int read_err = ferror(f);
    free(line);
    if (f != stdin)
        fclose(f);
    if (read_err) {
        cairn__log(CAIRN__LOG_ERROR, "shard", "input", NULL, NULL, "%s: read error", name);
        return CAIRN__EX_NOINPUT;
    }
    if (fflush(stdout) != 0) {
        cairn__log(CAIRN__LOG_ERROR, "shard", "write", NULL, NULL, "cannot write the output: %s",
                   strerror(errno));
        return CAIRN__EX_IOERR;
    }
    return bad ? CAIRN__EX_DATAERR : 0;
}

int cairn__cmd_shard(int argc, char **argv)
{
    shard_args a = {0};
    int oi, rc = cairn__opt_parse(argc, argv, &shard_cmd, cairn__opt_slot, &a, &oi);
    if (rc >= 0)
        return rc;
    long n, index = -1;
    if (!a.of || cairn__cli_parse_long(a.of, 1, 1L << 20, &n))
        return cairn__cli_usage_error("shard", shard_help,
                                      "--of N is required: the number of shards, 1 to 1048576");
    if (a.index && (cairn__cli_parse_long(a.index, 0, n - 1, &index)))
        return cairn__cli_usage_error("shard", shard_help, "--index must be 0 to %ld", n - 1);
    if (index >= 0) {
        if (argc - oi > 1)
            return cairn__cli_usage_error("shard", shard_help,
                                          "with --index, at most one input file");
        return filter(&a, (uint32_t)n, (uint32_t)index, oi < argc ? argv[oi] : NULL);
    }
    if (a.graph || a.task_from)
        return cairn__cli_usage_error("shard", shard_help,
                                      "--graph and --task-from go with --index");
    if (oi == argc)
        return cairn__cli_usage_error("shard", shard_help, "no task ID given");
    char err[300];
    for (int i = oi; i < argc; i++)
        if (cairn__task_id_check(argv[i], err, sizeof err))
            return cairn__cli_usage_error("shard", shard_help, "'%s': %s", argv[i], err);
    for (int i = oi; i < argc; i++)
        printf("%u\n", cairn_shard_of(argv[i], (uint32_t)n));
    return fflush(stdout) == 0 ? 0 : CAIRN__EX_IOERR;
}
