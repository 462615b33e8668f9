/* test_bad_input.c - bad input never changes the store and always names the place.
 *
 * Every case runs the real `cairn-ledger run` with something wrong (malformed JSON, a non-object,
 * an oversize file, a bad task ID, a conflicting payload, a missing file, an unusable store path,
 * a store at its map limit) and checks three things: the documented exit code, a message that
 * says where the problem is (file:line:column, the field, the path, both hashes), and that the
 * store is byte-for-byte unchanged in content: `mdb_dump -a` of the store before and after must
 * be identical, and so must `stats --json` and `list --json`.
 */
#include <regex.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_common.h"

static char *D, *ST, *TRACE, *LEDGERF;

/* Everything the store holds, as text: mdb_dump of all databases + stats + list. */
static char *snapshot(const char *store)
{
    tu_result r;
    const char *argv[] = {"/usr/bin/mdb_dump", "-a", store, NULL};
    char *dump = NULL;
    if (access(argv[0], X_OK) == 0) {
        tu_run(&r, argv, NULL, NULL, 0, CMD_TIMEOUT_MS);
        dump = tu_fmt("rc=%d\n%s", r.code, oneline(r.out));
        tu_result_free(&r);
    } else {
        dump = strdup("(no mdb_dump)");
    }
    cli(&r, LEDGER, store, "stats", "--json", NULL);
    char *stats = strdup(r.out);
    /* map_size/map_used describe the file, not the content; they are in the dump anyway */
    tu_result_free(&r);
    cli(&r, LEDGER, store, "list", "--json", NULL);
    char *s = tu_fmt("%s\n--stats--\n%s\n--list--\n%s", dump, stats, oneline(r.out));
    tu_result_free(&r);
    free(dump), free(stats);
    return s;
}

/* Runs `run` with the given extra args, checks the code, the message and an unchanged store. */
static void expect_rejected(const char *what, int want_code, const char *want_msg_re,
                            const char *store, const char *const *args)
{
    char *before = snapshot(store);
    const char *argv[40];
    int n = 0;
    argv[n++] = LEDGER;
    argv[n++] = "run";
    argv[n++] = "--graph";
    argv[n++] = "ledger";
    for (int i = 0; args[i] && n < 36; i++)
        argv[n++] = args[i];
    argv[n++] = "--store";
    argv[n++] = store;
    argv[n] = NULL;
    tu_result r;
    int rc = tu_run(&r, argv, NULL, NULL, 0, CMD_TIMEOUT_MS);
    ok(rc == want_code, "%s: exit %d (got %d)", what, want_code, rc);
    int msg_ok = 0;
    if (want_msg_re) {
        regex_t re;
        if (regcomp(&re, want_msg_re, REG_EXTENDED | REG_NOSUB) == 0) {
            msg_ok = regexec(&re, r.err, 0, NULL, 0) == 0;
            regfree(&re);
        }
        ok(msg_ok, "%s: message matches /%s/", what, want_msg_re);
        if (!msg_ok)
            diag("stderr: %s", oneline(r.err));
    }
    ok(!tu_contains(r.err, "Segmentation") && r.code < 128, "%s: no crash", what);
    char *after = snapshot(store);
    ok(strcmp(before, after) == 0, "%s: store unchanged (mdb_dump, stats, list)", what);
    if (strcmp(before, after) != 0) {
        diag_block("store before:", before);
        diag_block("store after:", after);
    }
    free(before), free(after);
    tu_result_free(&r);
}

static char *big_json(size_t total)
{
    /* {"ledger":LEDGERF,"text":"big","pad":"aaaa..."} padded to `total` bytes (the ledger
     * graph ignores "pad", so a task with this input can succeed) */
    char *head = tu_fmt("{\"ledger\":\"%s\",\"text\":\"big\",\"pad\":\"", LEDGERF);
    const char *tail = "\"}";
    size_t hl = strlen(head), tl = strlen(tail);
    char *b = malloc(total + 1);
    memcpy(b, head, hl);
    memset(b + hl, 'a', total - hl - tl);
    memcpy(b + total - tl, tail, tl);
    b[total] = 0;
    free(head);
    return b;
}

int main(void)
{
    cli_init();
    D = tu_mkdtemp("badin");
    ST = tu_fmt("%s/store", D);
    TRACE = tu_fmt("%s/trace", D);
    LEDGERF = tu_fmt("%s/ledger", D);
    diag("temp dir %s", D);

    /* a store with history: one succeeded task, one consumed message, one dead task */
    char *good = ledger_input("good", 0, TRACE, LEDGERF, NULL);
    char *fgood = write_input(D, "good.json", good);
    ok(cli_code(LEDGER, ST, "run", "--graph", "ledger", "--input", fgood, "--task", "existing",
                "--message-id", "q:1", NULL) == 0,
       "setup: a succeeded task");
    char *dead = ledger_input("dead", 0, TRACE, LEDGERF, "permanent");
    char *fdead = write_input(D, "dead.json", dead);
    ok(cli_code(LEDGER, ST, "run", "--graph", "ledger", "--input", fdead, "--task", "deadtask",
                NULL) == 69,
       "setup: a dead task");
    json_t *ex = show_json(LEDGER, ST, "existing", NULL);
    char *existing_hash = strdup(ex ? jstr(ex, "payload_hash") : "?");
    json_decref(ex);

    /* malformed JSON: file:line:column */
    struct {
        const char *name, *text, *where;
    } bad[] = {
        {"double comma", "{\"text\": \"x\",\n  \"ledger\": 1,,}", ":2:"},
        {"truncated", "{\"text\": \"x", ":1:"},
        {"trailing garbage", "{\"text\": \"x\"} {}", ":1:"},
        {"single quotes", "{'text': 'x'}", ":1:"},
        {"bare word", "{\"text\": nope}", ":1:"},
        {"empty file", "", ""},
        {"invalid UTF-8", "{\"text\": \"\xff\xfe\"}", ":1:"},
        {"control char in string", "{\"text\": \"a\tb\"}", ":1:"},
        {"deep nesting", NULL, ":1:"},
        {"duplicate key", "{\"text\": \"a\", \"text\": \"b\"}", ""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *text = bad[i].text ? strdup(bad[i].text) : NULL;
        if (!text) { /* 100000 nested arrays */
            size_t depth = 100000;
            text = malloc(2 * depth + 3);
            text[0] = '{';
            memset(text + 1, '[', depth);
            memset(text + 1 + depth, ']', depth);
            text[1 + 2 * depth] = '}';
            text[2 + 2 * depth] = 0;
        }
        char *name = tu_fmt("bad%zu.json", i);
        char *f = write_input(D, name, text);
        char *re =
            bad[i].where[0] ? tu_fmt("bad%zu\\.json:[0-9]+:[0-9]+", i) : tu_fmt("bad%zu\\.json", i);
        char *what = tu_fmt("malformed JSON (%s)", bad[i].name);
        const char *args[] = {"--input", f, NULL};
        expect_rejected(what, 65, re, ST, args);
        free(text), free(name), free(f), free(re), free(what);
    }

    /* not an object */
    static const char *nonobj[] = {"[1, 2]", "\"text\"", "42", "null", "true"};
    for (size_t i = 0; i < sizeof nonobj / sizeof *nonobj; i++) {
        char *f = write_input(D, "nonobj.json", nonobj[i]);
        char *what = tu_fmt("non-object input %s", nonobj[i]);
        const char *args[] = {"--input", f, NULL};
        expect_rejected(what, 65, "nonobj\\.json.*object", ST, args);
        free(f), free(what);
    }

    /* integers JSON numbers do not hold exactly (I-JSON): refused naming the field, never
     * rounded (2^53 + 1 was taken for 2^53: another input, the same task) and never turning the
     * other integers of the input into doubles (one beyond int64 did) */
    {
        char *t1 = tu_fmt("{\"ledger\":\"%s\",\"text\":\"x\",\"order\":{\"ids\":[7,"
                          "9007199254740993]}}",
                          LEDGERF);
        char *t2 = tu_fmt("{\"ledger\":\"%s\",\"text\":\"x\",\"n\":1,\n\"big\":"
                          "123456789012345678901234567890}",
                          LEDGERF);
        char *f1 = write_input(D, "bigint1.json", t1), *f2 = write_input(D, "bigint2.json", t2);
        const char *a1[] = {"--input", f1, NULL}, *a2[] = {"--input", f2, NULL};
        expect_rejected("integer 2^53 + 1", 65,
                        "bigint1\\.json: order\\.ids\\[1\\]: integer 9007199254740993 is "
                        "outside .*I-JSON",
                        ST, a1);
        expect_rejected("integer beyond int64 among small ones", 65,
                        "bigint2\\.json:2:36: integer 123456789012345678901234567890 is outside",
                        ST, a2);
        free(t1), free(t2), free(f1), free(f2);
    }

    /* oversize: 16 MiB + 1 byte of otherwise valid JSON, from a file and from stdin */
    char *huge = big_json((16u << 20) + 1);
    char *fh = tu_fmt("%s/huge.json", D);
    tu_write_file(fh, huge, strlen(huge));
    {
        const char *args[] = {"--input", fh, NULL};
        expect_rejected("input over 16 MiB", 65, "huge\\.json.*(limit|large)", ST, args);
        char *before = snapshot(ST);
        const char *argv[] = {LEDGER, "run", "--graph", "ledger", "--store", ST, NULL};
        tu_result r;
        int rc = tu_run(&r, argv, NULL, huge, strlen(huge), CMD_TIMEOUT_MS);
        ok(rc == 65 && (tu_contains(r.err, "limit") || tu_contains(r.err, "large")),
           "input over 16 MiB on stdin: 65 (rc %d: %s)", rc, oneline(r.err));
        char *after = snapshot(ST);
        ok(strcmp(before, after) == 0, "stdin oversize: store unchanged");
        free(before), free(after);
        tu_result_free(&r);
    }
    free(huge), free(fh);
    /* bad task IDs */
    char *long_id = malloc(130);
    memset(long_id, 'a', 129);
    long_id[129] = 0;
    struct {
        const char *name, *id, *re;
    } ids[] = {{"space", "a b", "task ID"},
               {"129 bytes", long_id, "129"},
               {"empty", "", "empty"},
               {"slash", "a/b", "task ID"},
               {"non-ASCII", "t\xc3\xa4sk", "task ID"},
               {"newline", "a\nb", "task ID"}};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        char *what = tu_fmt("bad task ID (%s)", ids[i].name);
        const char *args[] = {"--input", fgood, "--task", ids[i].id, NULL};
        expect_rejected(what, 65, ids[i].re, ST, args);
        free(what);
    }
    free(long_id);
    {
        char *f = write_input(D, "derive.json", "{\"order\": \"a b\", \"ledger\": \"/dev/null\"}");
        const char *args[] = {"--input", f, "--task-from", "order", NULL};
        expect_rejected("derived task ID with a space", 65, "task ID", ST, args);
        free(f);
    }

    /* conflicting payload for an existing ID: both hashes named */
    char *other = ledger_input("other", 0, TRACE, LEDGERF, NULL);
    char *fother = write_input(D, "other.json", other);
    {
        char *re = tu_fmt("%s.*[0-9a-f]{64}", existing_hash);
        const char *args[] = {"--input", fother, "--task", "existing", NULL};
        expect_rejected("conflicting payload", 76, re, ST, args);
        free(re);
        const char *args2[] = {"--input",      fother, "--task", "existing",
                               "--message-id", "q:2",  NULL};
        expect_rejected("conflicting payload with a new message id", 76, "existing", ST, args2);
    }

    /* missing input file */
    {
        char *missing = tu_fmt("%s/nope/missing.json", D);
        const char *args[] = {"--input", missing, NULL};
        expect_rejected("missing input file", 66, "missing\\.json", ST, args);
        free(missing);
    }

    /* unusable store paths: under a regular file; in a directory we may not write */
    {
        char *file = tu_fmt("%s/regular", D);
        tu_write_file(file, "x", 1);
        char *under = tu_fmt("%s/store", file);
        tu_result r;
        int rc = cli(&r, LEDGER, under, "run", "--graph", "ledger", "--input", fgood, NULL);
        ok(rc == 74 && tu_contains(r.err, under),
           "store under a regular file: 74 naming the path "
           "(rc %d: %s)",
           rc, oneline(r.err));
        tu_result_free(&r);
        rc = cli(&r, LEDGER, file, "stats", NULL);
        ok(rc == 74 && tu_contains(r.err, "not a directory"),
           "store path is a regular file: 74 "
           "(rc %d: %s)",
           rc, oneline(r.err));
        tu_result_free(&r);
        struct stat sb;
        ok(stat(file, &sb) == 0 && sb.st_size == 1, "the regular file is untouched");
        free(under), free(file);
        if (geteuid() == 0) {
            skip("unwritable parent dir: running as root");
        } else {
            char *locked = tu_fmt("%s/locked", D);
            mkdir(locked, 0700);
            chmod(locked, 0);
            char *inside = tu_fmt("%s/store", locked);
            rc = cli(&r, LEDGER, inside, "run", "--graph", "ledger", "--input", fgood, NULL);
            ok(rc == 74 && tu_contains(r.err, inside) && tu_contains(r.err, "ermission"),
               "store in an unwritable dir: 74 with the path and errno text (rc %d: %s)", rc,
               oneline(r.err));
            tu_result_free(&r);
            chmod(locked, 0700);
            struct stat sb2;
            ok(stat(inside, &sb2) != 0, "nothing was created");
            free(locked), free(inside);
        }
    }

    /* a store at its map limit: EFULL, nothing written, clear message */
    {
        char *bigtext = big_json(100 * 1024);
        char *fb = tu_fmt("%s/big100k.json", D);
        tu_write_file(fb, bigtext, strlen(bigtext));
        const char *args[] = {"--input", fb, "--map-max", "65536", NULL};
        expect_rejected("100 KB input, --map-max 65536 (existing store)", 74, "full.*(limit|65536)",
                        ST, args);
        /* only `run` creates a store; one whose first write does not fit leaves it empty */
        char *small = tu_fmt("%s/small-store", D);
        tu_result r0;
        ok(cli(&r0, LEDGER, small, "run", "--graph", "ledger", "--input", fb, "--map-max", "65536",
               NULL) == 74 &&
               cli_code(LEDGER, small, "stats", NULL) == 0,
           "a fresh store (created by a run that did not fit: 74, then stats reads it)");
        tu_result_free(&r0);
        expect_rejected("100 KB input, --map-max 65536 (fresh store)", 74, "full", small, args);
        tu_result r;
        int rc = cli(&r, LEDGER, ST, "run", "--graph", "ledger", "--input", fb, "--task", "big-ok",
                     NULL);
        ok(rc == 0, "the same input without the limit succeeds (rc %d: %s)", rc, oneline(r.err));
        tu_result_free(&r);
        free(small), free(bigtext), free(fb);
    }

    /* exactly at the limit is accepted (and grows the store past its initial map) */
    char *atlimit = big_json(16u << 20);
    char *fl = tu_fmt("%s/atlimit.json", D);
    tu_write_file(fl, atlimit, strlen(atlimit));
    {
        tu_result r;
        int rc = cli(&r, LEDGER, ST, "run", "--graph", "ledger", "--input", fl, "--task", "atlimit",
                     NULL);
        ok(rc == 0, "input of exactly 16 MiB is accepted and runs (rc %d: %s)", rc, oneline(r.err));
        tu_result_free(&r);
    }
    free(atlimit), free(fl);

    /* the store still works and holds what it held */
    json_t *j = show_json(LEDGER, ST, "existing", NULL);
    ok(j && strcmp(jstr(j, "status"), "succeeded") == 0 &&
           strcmp(jstr(j, "payload_hash"), existing_hash) == 0,
       "the existing task is intact");
    json_decref(j);
    ok(tu_count_lines(LEDGERF, "existing ") == 1, "its effect happened once");

    free(existing_hash), free(other), free(fother), free(good), free(fgood), free(dead),
        free(fdead);
    int rc = tap_done();
    if (rc == 0 && !getenv("CAIRN_TEST_KEEP"))
        tu_rm_rf(D);
    free(D), free(ST), free(TRACE), free(LEDGERF);
    return rc;
}
