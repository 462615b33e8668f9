/* runner/cli_opt.c - the one option parser of every command: the task commands' and tools/'s.
 *
 * A command describes its options as a table (cairn__opt); this file builds getopt_long's
 * `struct option[]` and optstring from it, so every command takes the same forms (--name VALUE,
 * --name=VALUE, -x VALUE, -xVALUE, options after operands, "--" before an operand that starts
 * with '-') and fails the same way: an unknown option, a missing value or an option given twice
 * is said on stderr as "PROG CMD: ...", followed by the command's usage, exit 64. Every command
 * takes -h and --help (its help on stdout, exit 0) without listing them.
 *
 * getopt_long keeps its position in globals; each parse starts with optind = 0, which makes glibc
 * forget the previous argv entirely (its permutation state too), so one process can parse several
 * command lines (the tests call the commands in-process). getopt_long's own messages are off
 * (opterr = 0) and the optstring starts with ':' so that a missing value (':') is told apart from
 * an unknown option ('?').
 */
#include <getopt.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "runner/cli.h"

/* getopt_long returns FIRST + i for the long form of opts[i], the character for the short one */
#define FIRST 256
#define MAX_OPTS 64

/* Every table gets --help and the logging options (runner/cli_log.c) after its own: their
 * indexes are n (help) and n + 1 + i (log_opts[i]). */
static const struct {
    const char *name;
    int shrt, has_arg;
} log_opts[] = {
    {"log-format", 0, 1}, {"quiet", 'q', 0}, {"verbose", 'v', 0}, {"no-progress", 0, 0}};
#define N_LOG_OPTS (sizeof log_opts / sizeof *log_opts)

/* Whether the command's own table uses the short option c (then a logging option's is left out). */
static int own_short(const cairn__opt *opts, size_t n, int c)
{
    for (size_t i = 0; i < n; i++)
        if (opts[i].shrt == c)
            return 1;
    return 0;
}

/* The index of the option getopt_long reported as c (a return value or optopt), or -1. */
static int find(const cairn__opt *opts, size_t n, int c)
{
    if (c >= FIRST && c < FIRST + (int)(n + 1 + N_LOG_OPTS))
        return c - FIRST;
    for (size_t i = 0; i < n; i++)
        if (opts[i].shrt && opts[i].shrt == c)
            return (int)i;
    for (size_t i = 0; i < N_LOG_OPTS; i++)
        if (log_opts[i].shrt && log_opts[i].shrt == c)
            return (int)(n + 1 + i);
    return c == 'h' ? (int)n : -1; /* n: --help, added to every table */
}

int cairn__opt_parse(int argc, char **argv, const cairn__opt_cmd *cmd, cairn__opt_fn fn, void *user,
                     int *optind_out)
{
    const cairn__opt *opts = cmd->opts;
    struct option lo[MAX_OPTS + 2 + N_LOG_OPTS];
    char shorts[3 * MAX_OPTS + 4 + 2 * N_LOG_OPTS];
    unsigned seen[MAX_OPTS] = {0};
    size_t n = 0, k = 0;
    shorts[k++] = ':';
    for (; opts[n].name; n++) {
        if (n == MAX_OPTS) {
            cairn__log(CAIRN__LOG_ERROR, cmd->name, "internal", NULL, NULL, "more than %d options",
                       MAX_OPTS);
            return CAIRN__EX_SOFTWARE;
        }
        lo[n] = (struct option){opts[n].name, opts[n].has_arg ? required_argument : no_argument,
                                NULL, FIRST + (int)n};
        if (opts[n].shrt) {
            shorts[k++] = (char)opts[n].shrt;
            if (opts[n].has_arg)
                shorts[k++] = ':';
        }
    }
    lo[n] = (struct option){"help", no_argument, NULL, FIRST + (int)n};
    shorts[k++] = 'h';
    for (size_t i = 0; i < N_LOG_OPTS; i++) {
        lo[n + 1 + i] =
            (struct option){log_opts[i].name, log_opts[i].has_arg ? required_argument : no_argument,
                            NULL, FIRST + (int)(n + 1 + i)};
        if (log_opts[i].shrt && !own_short(opts, n, log_opts[i].shrt))
            shorts[k++] = (char)log_opts[i].shrt;
    }
    lo[n + 1 + N_LOG_OPTS] = (struct option){0, 0, 0, 0};
    shorts[k] = 0;
    /* --log-format first, wherever it stands: an error about an earlier option is to be said
     * in the format asked for (a bad value is reported by the parse below) */
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        const char *v = !strncmp(argv[i], "--log-format=", 13)             ? argv[i] + 13
                        : !strcmp(argv[i], "--log-format") && i + 1 < argc ? argv[i + 1]
                                                                           : NULL;
        char ignored[160];
        if (v)
            cairn__log_option("log-format", v, ignored, sizeof ignored);
    }
    optind = 0;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
        int i = find(opts, n, c == '?' || c == ':' ? optopt : c);
        if (c == ':')
            return cairn__cli_usage_error(cmd->name, cmd->help, "option --%s needs a value",
                                          lo[i].name);
        if (c == '?' && i >= 0 && optopt >= FIRST) /* --json=1 */
            return cairn__cli_usage_error(cmd->name, cmd->help, "option --%s takes no value",
                                          lo[i].name);
        if (c == '?' && optopt) /* an unknown short option, perhaps inside "-xy" */
            return cairn__cli_usage_error(cmd->name, cmd->help, "unknown argument '-%c'", optopt);
        if (c == '?') /* an unknown or ambiguous long option; getopt_long moved past it */
            return cairn__cli_usage_error(cmd->name, cmd->help, "unknown argument '%s'",
                                          argv[optind - 1]);
        if ((size_t)i == n) {
            cairn__cli_print_help(stdout, cmd->help, cmd->config_help);
            return 0;
        }
        if ((size_t)i > n) { /* a logging option: the same for every command */
            char err[160];
            if (cairn__log_option(lo[i].name, optarg, err, sizeof err) < 0)
                return cairn__cli_usage_error(cmd->name, cmd->help, "%s", err);
            continue;
        }
        /* one value per option: a second would silently replace the first */
        if (seen[i]++ && !opts[i].repeatable)
            return cairn__cli_usage_error(cmd->name, cmd->help, "--%s given twice", opts[i].name);
        int rc = fn(user, &opts[i], opts[i].has_arg ? optarg : NULL);
        if (rc)
            return rc;
    }
    if (cmd->max_operands >= 0 && argc - optind > cmd->max_operands)
        return cairn__cli_usage_error(cmd->name, cmd->help, "unexpected argument '%s'",
                                      argv[optind + cmd->max_operands]);
    *optind_out = optind;
    return -1;
}

int cairn__opt_slot(void *user, const cairn__opt *opt, const char *val)
{
    char *field = (char *)user + opt->at;
    if (opt->has_arg)
        *(const char **)field = val;
    else
        *(int *)field = 1;
    return 0;
}
