/* tests/model/test_cli.c - `cairn generate` as a user runs it: output, exit codes, the BLAS its
 * stats name; and the engine behaviours the command shows (hidden control tokens, OpenBLAS's
 * thread count and core) checked in-process, where they can be seen exactly. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h> /* strncasecmp */
#include <sys/wait.h>
#include <unistd.h>

#include "gpu/cpu/blas.h"
#include "gpu/cpu/kernels_cpu.h" /* cairn__matmul_path */
#include "gpu/gguf.h"
#include "gpu/engine.h"
#include "gpu/gguf.h"
#include "gpu/tokenizer.h"
#include "tests/gguf_writer.h"
#include "tests/model/mkmodel.h"
#include "tests/tap.h"

static char out[65536];

/* runs a shell command, captures stdout+stderr into out, returns the exit status */
static int sh(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int write_model(const mk_spec *s, const char *path)
{
    unsigned char *buf;
    size_t len;
    if (mk_model(s, &buf, &len) != 0)
        return -1;
    FILE *f = fopen(path, "wb");
    int rc = f && fwrite(buf, 1, len, f) == len ? 0 : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    free(buf);
    return rc;
}

/* Runs `bin generate -m model -p hi ...` with stdout a pipe whose reader is already gone and
 * SIGPIPE ignored, so its first write fails with EPIPE (what `| head` gives a program that
 * ignores SIGPIPE); stderr goes to errpath. Returns the exit status, -1 if it did not exit. */
static int generate_into_closed_pipe(const char *bin, const char *model, const char *errpath)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    close(fds[0]);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        signal(SIGPIPE, SIG_IGN); /* kept across exec */
        if (fd < 0 || dup2(fds[1], 1) < 0 || dup2(fd, 2) < 0)
            _exit(126);
        execl(bin, bin, "generate", "-m", model, "-p", "hi", "-n", "8", "--temperature", "0",
              (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int hidden_type(const cairn__tok *t, int32_t id)
{
    const int ty = cairn__tok_type(t, id);
    return ty == CAIRN__TOK_CONTROL || ty == CAIRN__TOK_UNKNOWN;
}

/* Control and unknown tokens are markup: the engine's text leaves them out, exactly (the text
 * is the pieces of the other tokens), and a stop string that is one's whole text stops on it.
 * Returns the seed whose 200 tokens from BOS (temperature 50, top-k 0, top-p 1, --ignore-eos)
 * hold such tokens, for the same run through the command; 0 if none was found. */
static unsigned long long check_hidden_tokens(const char *path)
{
    cairn__engine_opts eo = {.backend = "cpu", .n_threads = 1};
    cairn__engine *e = NULL;
    char err[512] = "";
    if (cairn__engine_open(path, &eo, &e, err, sizeof err) != 0) {
        ok(0, "engine opened (%s)", err);
        return 0;
    }
    const cairn__tok *t = cairn__engine_tok(e);
    const int32_t bos = cairn__tok_bos(t);
    cairn__gen_opts go;
    cairn__gen_result r;
    memset(&r, 0, sizeof r);
    size_t n_hidden = 0;
    int same = 0;
    unsigned long long seed = 0;
    /* near-uniform sampling, so control tokens come up; seeds until some did */
    while (seed < 8 && n_hidden == 0) {
        seed++;
        cairn__gen_result_free(&r);
        cairn__gen_opts_default(&go);
        go.max_tokens = 200;
        go.ignore_eos = 1;
        go.sampling.temperature = 50.0f;
        go.sampling.top_k = 0;
        go.sampling.top_p = 1.0f;
        go.sampling.seed = seed;
        if (cairn__engine_generate_tokens(e, &bos, 1, &go, &r) != 0)
            break;
        char expect[200 * 64];
        size_t n = 0;
        n_hidden = 0;
        for (size_t i = 0; i < r.n_tokens; i++) {
            const char *p;
            size_t l;
            if (hidden_type(t, r.tokens[i])) {
                n_hidden++;
            } else if (cairn__tok_piece(t, r.tokens[i], &p, &l) == 0 && n + l <= sizeof expect) {
                memcpy(expect + n, p, l);
                n += l;
            }
        }
        same = r.text && r.text_len == n && memcmp(r.text, expect, n) == 0;
    }
    ok(n_hidden > 0, "sampling drew control/unknown tokens (%zu of %zu)", n_hidden, r.n_tokens);
    ok(same && !memmem(r.text, r.text_len, "<s>", 3) && !memmem(r.text, r.text_len, "<unk>", 5) &&
           !memmem(r.text, r.text_len, "</s>", 4),
       "the text is exactly the other tokens' pieces: no <s>, </s>, <unk>");

    /* the same run with a stop on "<s>" (BOS, a control token) ends on that token */
    size_t first = r.n_tokens;
    for (size_t i = 0; i < r.n_tokens; i++)
        if (r.tokens[i] == bos) {
            first = i;
            break;
        }
    if (first < r.n_tokens) {
        const char *stop[] = {"<s>"};
        cairn__gen_result r2;
        go.stop = stop;
        go.n_stop = 1;
        int rc = cairn__engine_generate_tokens(e, &bos, 1, &go, &r2);
        ok(rc == 0 && r2.finish == CAIRN__FINISH_STOP && r2.n_tokens == first + 1 &&
               r2.tokens[first] == bos,
           "--stop '<s>' stops on the <s> token (%d tokens, expected %zu)",
           rc ? -1 : (int)r2.n_tokens, first + 1);
        if (rc == 0)
            cairn__gen_result_free(&r2);
    } else {
        skip("no <s> among the sampled tokens");
    }
    cairn__gen_result_free(&r);
    cairn__engine_free(e);
    return n_hidden ? seed : 0;
}

/* --threads bounds OpenBLAS (the prompt's sgemm) as well as the pool: the CPU backend sets
 * OpenBLAS's count to its own, whatever the machine's core count (OpenBLAS's default). */
static void check_blas_threads(const char *path)
{
#ifdef CAIRN_HAVE_OPENBLAS
    for (int n = 1; n <= 3; n++) {
        cairn__engine_opts eo = {.backend = "cpu", .n_threads = n};
        cairn__engine *e = NULL;
        char err[512] = "";
        int rc = cairn__engine_open(path, &eo, &e, err, sizeof err);
        int got = rc == 0 ? cairn__blas_threads() : -1;
        ok(rc == 0 && got == n, "--threads %d: OpenBLAS uses %d threads (%s)", n, got, err);
        cairn__engine_free(e);
    }
    /* OpenBLAS was loaded with the core for this CPU (main unset the variable), which then
     * left the environment as it was */
    const char *core = cairn__blas_core_for_cpu(), *d = cairn__blas_desc();
    ok(strncmp(d, "openblas:", 9) == 0 && (!core || strncasecmp(d + 9, core, strlen(core)) == 0),
       "in-process: %s for a CPU whose core is %s", d, core ? core : "OpenBLAS's own");
    ok(getenv("OPENBLAS_CORETYPE") == NULL, "OPENBLAS_CORETYPE is not left set in the process");
#else
    (void)path;
    skip("built without OpenBLAS: no OpenBLAS threads to bound");
    skip("built without OpenBLAS: no core to choose");
    skip("built without OpenBLAS: no environment to restore");
#endif
}

/* The stats line names the path the float products take (OpenBLAS, whose core cairn picks for
 * this CPU's features: Debian's 0.3.21 runs its SSE3 kernels on a CPU it does not know), and a
 * user's own OPENBLAS_CORETYPE is taken as given, and named so. The prompt is long enough for
 * the prompt's attention to take sgemm (16 tokens and more). */
static void check_blas_stats(const char *bin, const char *path)
{
    char cmd[1024];
    const char *run = "generate -m %s -p 'one two three four five six seven eight nine ten "
                      "eleven twelve' -n 2 --temperature 0 --backend cpu 2>&1 >/dev/null";
    char tail[256];
    snprintf(tail, sizeof tail, run, path);
#ifdef CAIRN_HAVE_OPENBLAS
    const char *core = cairn__blas_core_for_cpu();
    snprintf(cmd, sizeof cmd, "env -u OPENBLAS_CORETYPE -u CAIRN_BLAS %s %s", bin, tail);
    int rc = sh(cmd);
    const char *at = strstr(out, "blas=openblas:");
    /* OpenBLAS names its cores in mixed case (SkylakeX, Haswell) */
    ok(rc == 0 && at && (!core || strncasecmp(at + 14, core, strlen(core)) == 0) &&
           !strstr(out, "(OPENBLAS_CORETYPE)"),
       "stats: blas=openblas with the core for this CPU's features (%s): %.200s",
       core ? core : "OpenBLAS's own", out);
    snprintf(cmd, sizeof cmd, "env -u CAIRN_BLAS OPENBLAS_CORETYPE=PRESCOTT %s %s", bin, tail);
    rc = sh(cmd);
    ok(rc == 0 && strstr(out, "blas=openblas:Prescott(OPENBLAS_CORETYPE)"),
       "stats: OPENBLAS_CORETYPE=PRESCOTT is not overridden, and named: %.200s", out);
#else
    skip("built without OpenBLAS: no core to choose");
    skip("built without OpenBLAS: no OPENBLAS_CORETYPE to respect");
#endif
    snprintf(cmd, sizeof cmd, "CAIRN_BLAS=cairn %s %s", bin, tail);
    int rc2 = sh(cmd);
    ok(rc2 == 0 && strstr(out, "cpu backend, blas=cairn, matmul="),
       "stats: CAIRN_BLAS=cairn runs cairn's own loops: %.200s", out);
    /* the weights' path for this file's type at this CPU's level, as the engine takes it */
    char want[64];
    snprintf(want, sizeof want, "matmul=%s, llama", cairn__matmul_path(CAIRN__GGML_Q8_0));
    ok(rc2 == 0 && strstr(out, want), "stats: the prompt's weight products named (%s): %.200s",
       want, out);
}

int main(void)
{
    /* the in-process checks see cairn's own choice of OpenBLAS core, whatever the caller's
     * environment holds (set before the first backend loads OpenBLAS) */
    unsetenv("OPENBLAS_CORETYPE");
    const char *bin = getenv("CAIRN_BIN");
    if (!bin || access(bin, X_OK) != 0)
        tap_skip_all("CAIRN_BIN not set");
    char dir[] = "/tmp/cairn-gen-XXXXXX";
    if (!mkdtemp(dir))
        tap_skip_all("no temp dir");
    char path[256], bad[256], cmd[1024];
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    snprintf(bad, sizeof bad, "%s/bad.gguf", dir);
    mk_spec s;
    mk_spec_default(&s);
    s.tokenizer = 1;
    s.wtype = 8; /* Q8_0 */
    unsigned char *buf;
    size_t len;
    FILE *f = fopen(path, "wb");
    ok(f && mk_model(&s, &buf, &len) == 0 && fwrite(buf, 1, len, f) == len && fclose(f) == 0,
       "model file written");
    f = fopen(bad, "wb");
    fwrite(buf, 1, len / 3, f); /* truncated */
    fclose(f);
    free(buf);

    snprintf(cmd, sizeof cmd,
             "%s generate --model %s --prompt 'hello' --temperature 0 -n 12 --threads 2 2>&1", bin,
             path);
    int rc = sh(cmd);
    ok(rc == 0 && strstr(out, "[length, 12 tokens"), "greedy generation of 12 tokens exits 0 (%d)",
       rc);
    char first[65536];
    memcpy(first, out, sizeof out);
    rc = sh(cmd);
    ok(rc == 0 && strncmp(first, out, (size_t)(strstr(first, "[length, 12") - first)) == 0,
       "same command, same text");
    snprintf(
        cmd, sizeof cmd,
        "%s generate -m %s -p 'hello there' --chat chatml --seed 3 -n 5 --top-k 5 --top-p 0.9 2>&1",
        bin, path);
    rc = sh(cmd);
    ok(rc == 0 && strstr(out, "5 tokens"), "chatml-wrapped sampling run exits 0 (%d)", rc);
    /* an f16 KV cache: runs, and is as deterministic as the default */
    snprintf(cmd, sizeof cmd,
             "%s generate --model %s --prompt 'hello' --temperature 0 -n 12 --threads 2 "
             "--cache-type f16 2>&1",
             bin, path);
    rc = sh(cmd);
    ok(rc == 0 && strstr(out, "[length, 12 tokens"), "--cache-type f16: 12 greedy tokens (%d)", rc);
    memcpy(first, out, sizeof out);
    const char *stats = strstr(first, "[length, 12");
    rc = sh(cmd);
    ok(rc == 0 && stats && strncmp(first, out, (size_t)(stats - first)) == 0,
       "--cache-type f16: same command, same text");
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi --cache-type q8 2>&1", bin, path);
    rc = sh(cmd);
    ok(rc == 64 && strstr(out, "unknown --cache-type 'q8' (f32, f16)"),
       "unknown --cache-type exits 64 naming it (%d)", rc);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p 'a rather long prompt here' --ctx 8 2>&1", bin,
             path);
    rc = sh(cmd);
    ok(rc == 65 && strstr(out, "context"), "prompt longer than --ctx exits 65 (%d: %.80s)", rc,
       out);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi 2>&1", bin, bad);
    rc = sh(cmd);
    ok(rc == 65, "truncated model exits 65 (%d)", rc);
    snprintf(cmd, sizeof cmd, "%s generate -m %s/none.gguf -p hi 2>&1", bin, dir);
    rc = sh(cmd);
    ok(rc == 66, "missing model exits 66 (%d)", rc);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi --temperature hot 2>&1", bin, path);
    rc = sh(cmd);
    ok(rc == 64 && strstr(out, "--temperature"), "bad option value exits 64 (%d)", rc);
    snprintf(cmd, sizeof cmd, "%s generate -p hi 2>&1", bin);
    ok(sh(cmd) == 64, "missing --model exits 64");
    snprintf(cmd, sizeof cmd, "%s generate --help", bin);
    ok(sh(cmd) == 0 && strstr(out, "--max-tokens"), "--help exits 0 and lists options");
    ok(strstr(out, "Exit status") && strstr(out, "69 unsupported"),
       "--help documents the exit codes");

    /* F1: an empty prompt on a vocabulary that adds no BOS is an input error, not internal */
    char alt[256];
    snprintf(alt, sizeof alt, "%s/alt.gguf", dir);
    mk_spec a = s;
    a.no_bos = 1;
    ok(write_model(&a, alt) == 0, "no-BOS model written");
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p '' -n 3 2>&1", bin, alt);
    rc = sh(cmd);
    ok(rc == 65 && strstr(out, "prompt is empty"), "empty prompt without BOS exits 65 (%d: %.100s)",
       rc, out);
    snprintf(cmd, sizeof cmd, "printf '' | %s generate -m %s -f - -n 3 2>&1", bin, alt);
    rc = sh(cmd);
    ok(rc == 65 && strstr(out, "prompt is empty"), "empty --file - without BOS exits 65 (%d)", rc);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p '' -n 2 --temperature 0 2>&1", bin, path);
    ok(sh(cmd) == 0, "empty prompt with BOS runs on BOS alone");

    /* F7: an out-of-vocabulary BOS id and a missing RMS epsilon name their key */
    a = s;
    a.bad_bos = 1;
    ok(write_model(&a, alt) == 0, "bad-BOS model written");
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi 2>&1", bin, alt);
    rc = sh(cmd);
    ok(rc == 65 && strstr(out, "tokenizer.ggml.bos_token_id") && strstr(out, alt),
       "BOS id outside the vocabulary exits 65 naming key and file (%d: %.120s)", rc, out);
    a = s;
    a.no_rms_eps = 1;
    ok(write_model(&a, alt) == 0, "model without RMS epsilon written");
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi 2>&1", bin, alt);
    rc = sh(cmd);
    ok(rc == 65 && strstr(out, "llama.attention.layer_norm_rms_epsilon") && strstr(out, alt),
       "missing RMS epsilon exits 65 naming key and file (%d: %.120s)", rc, out);

    /* F5: a model error names the file; F6: a 1-D token_embd reports the 2-D shape expected */
    a = s;
    a.omit = "blk.1.ffn_up.weight";
    ok(write_model(&a, alt) == 0, "model without a tensor written");
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi 2>&1", bin, alt);
    rc = sh(cmd);
    ok(rc == 65 && strstr(out, alt) && strstr(out, "blk.1.ffn_up.weight"),
       "missing tensor names file and tensor (%d: %.120s)", rc, out);
    a = s;
    a.arch = "llxma";
    ok(write_model(&a, alt) == 0, "model of an unknown architecture written");
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi 2>&1", bin, alt);
    rc = sh(cmd);
    ok(rc == 69 && strstr(out, alt) && strstr(out, "general.architecture"),
       "unsupported architecture exits 69 naming file and key (%d: %.120s)", rc, out);
    unlink(alt);

    /* F2: a directory or a device as the model is an input error naming the path */
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi 2>&1", bin, dir);
    rc = sh(cmd);
    ok(rc == 66 && strstr(out, dir), "directory as model exits 66 (%d: %.100s)", rc, out);
    snprintf(cmd, sizeof cmd, "%s generate -m /dev/null -p hi 2>&1", bin);
    rc = sh(cmd);
    ok(rc == 65 && strstr(out, "/dev/null"), "/dev/null as model exits 65 (%d: %.100s)", rc, out);
    snprintf(cmd, sizeof cmd, "%s model-info %s 2>&1", bin, dir);
    ok(sh(cmd) == 66, "model-info on a directory exits 66");

    /* F8, F9: questionable but workable requests warn on stderr */
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi --chat chatml -n 1 2>&1 >/dev/null", bin,
             path);
    rc = sh(cmd);
    ok(rc == 0 && strstr(out, "warning:") && strstr(out, "<|im_start|>"),
       "--chat chatml on a vocabulary without its tokens warns (%d: %.120s)", rc, out);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi --ctx %d -n 1 2>&1 >/dev/null", bin, path,
             s.ctx * 2);
    rc = sh(cmd);
    ok(rc == 0 && strstr(out, "warning:") && strstr(out, "trained context"),
       "--ctx beyond the trained context warns (%d: %.120s)", rc, out);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi -n 1 2>&1 >/dev/null", bin, path);
    rc = sh(cmd);
    ok(rc == 0 && !strstr(out, "warning:") && out[0] == '[',
       "plain run: no warning, stats line without a leading blank line (%.80s)", out);

    /* F10: the context filling up first is reported as such */
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi -n 50 --ctx 8 2>&1 >/dev/null", bin, path);
    rc = sh(cmd);
    ok(rc == 0 && strncmp(out, "[context,", 9) == 0, "full context: finish 'context' (%.60s)", out);

    /* F11 */
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi --system be brief 2>&1", bin, path);
    rc = sh(cmd);
    ok(rc == 64 && strstr(out, "--system"), "--system without --chat exits 64 (%d)", rc);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi --threads 5000 2>&1", bin, path);
    rc = sh(cmd);
    ok(rc == 64 && strstr(out, "1024"), "--threads error states the limit (%d)", rc);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi --stop '' 2>&1", bin, path);
    ok(sh(cmd) == 64, "empty --stop exits 64");

    /* output errors: a full disk is exit 74 naming the error; a reader that went away (EPIPE)
     * is a quiet cancel */
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi -n 8 --temperature 0 2>&1 >/dev/full", bin,
             path);
    rc = sh(cmd);
    ok(rc == 74 && strstr(out, "cannot write the output: No space left on device"),
       "stdout on /dev/full: exit 74 naming the error (%d: %.100s)", rc, out);
    snprintf(alt, sizeof alt, "%s/err.txt", dir);
    rc = generate_into_closed_pipe(bin, path, alt);
    snprintf(cmd, sizeof cmd, "cat %s", alt);
    sh(cmd);
    ok(rc == 0 && strncmp(out, "[cancel,", 8) == 0 && !strstr(out, "cannot write"),
       "stdout a closed pipe (EPIPE): quiet cancel, exit 0 (%d: %.100s)", rc, out);
    unlink(alt);

    /* each option takes one value, --stop excepted */
    static const char *const twice[][2] = {
        {"--prompt", "-p hi --prompt ho"},
        {"--model", "-p hi --model %s"},
        {"--max-tokens", "-p hi -n 3 --max-tokens 5"},
        {"--file", "-f /dev/null --file /dev/null"},
        {"--temperature", "-p hi --temperature 0 --temperature=1"},
        {"--threads", "-p hi -t 1 -t 2"},
    };
    for (size_t i = 0; i < sizeof twice / sizeof twice[0]; i++) {
        char args[256], want[64];
        snprintf(args, sizeof args, twice[i][1], path);
        snprintf(cmd, sizeof cmd, "%s generate -m %s %s 2>&1 >/dev/null", bin, path, args);
        snprintf(want, sizeof want, "%s given twice", twice[i][0]);
        rc = sh(cmd);
        ok(rc == 64 && strstr(out, want), "%s twice: exit 64 naming it (%d: %.80s)", twice[i][0],
           rc, out);
    }
    snprintf(cmd, sizeof cmd,
             "%s generate -m %s -p hi -n 3 --stop zzz --stop yyy --temperature 0 2>&1 >/dev/null",
             bin, path);
    ok(sh(cmd) == 0, "--stop may be repeated");

    /* control tokens stay out of the text: in the engine exactly, and so on stdout */
    unsigned long long seed = check_hidden_tokens(path);
    snprintf(cmd, sizeof cmd,
             "%s generate -m %s -p '' -n 200 --ignore-eos --temperature 50 --top-k 0 --top-p 1 "
             "--seed %llu --backend cpu 2>/dev/null",
             bin, path, seed);
    rc = sh(cmd);
    ok(seed && rc == 0 && !strstr(out, "<s>") && !strstr(out, "</s>") && !strstr(out, "<unk>"),
       "the same run on stdout: no <s>, </s>, <unk> (seed %llu, exit %d)", seed, rc);
    check_blas_threads(path);
    check_blas_stats(bin, path);

    /* --help: the repeat penalty's window is --repeat-last-n's, not a number in the text */
    snprintf(cmd, sizeof cmd, "%s generate --help", bin);
    sh(cmd);
    const char *rp = strstr(out, "--repeat-penalty R");
    const char *rp_end = rp ? strchr(rp, '\n') : NULL,
               *rn = rp ? strstr(rp, "--repeat-last-n") : NULL;
    ok(rn && rn < rp_end && !strstr(out, "last 64"),
       "--help: --repeat-penalty names --repeat-last-n, not a number");
    snprintf(cmd, sizeof cmd, "%s model-info --help", bin);
    ok(sh(cmd) == 0 && strstr(out, "Exit status") && strstr(out, "74"),
       "model-info --help lists the exit status");

    /* the rope line: base, dimensions, and Llama 3's frequency factors when the file has them */
    {
        char l3[600];
        snprintf(l3, sizeof l3, "%s/l3.gguf", dir);
        mk_spec s3;
        mk_spec_default(&s3);
        s3.rope_freqs = 1;
        s3.rope_base = 500000.0f;
        const int wrc = write_model(&s3, l3);
        snprintf(cmd, sizeof cmd, "%s model-info %s 2>&1", bin, l3);
        rc = sh(cmd);
        ok(wrc == 0 && rc == 0 &&
               strstr(out, "rope:           base 500000, 16 dimensions, 8 frequency factors"),
           "model-info shows the rope base, dimensions and rope_freqs factors (%d)", rc);
        snprintf(cmd, sizeof cmd, "%s model-info --json %s 2>&1", bin, l3);
        rc = sh(cmd);
        ok(rc == 0 && strstr(out, "\"freq_factors\": 8") && strstr(out, "\"freq_base\": 500000"),
           "model-info --json: rope.freq_factors and freq_base (%d)", rc);
        unlink(l3);
        snprintf(cmd, sizeof cmd, "%s model-info %s 2>&1", bin, path);
        rc = sh(cmd);
        ok(rc == 0 && strstr(out, "rope:           base 10000") && !strstr(out, "rope_freqs"),
           "a file without factors: base 10000 and no factors (%d)", rc);
    }

    /* a Q4_K_M file as llama-quantize writes one where rows are not a multiple of 256: the
     * ffn_down matrices (288 columns) in Q5_0, the rest in Q4_K, written by cairn-mkmodel;
     * described as supported, and it generates */
    const char *mk = getenv("CAIRN_MKMODEL");
    if (!mk || access(mk, X_OK) != 0)
        skip("CAIRN_MKMODEL not set: no Q4_K_M file to write");
    else {
        char km[600];
        snprintf(km, sizeof km, "%s/q4km.gguf", dir);
        snprintf(cmd, sizeof cmd, "%s %s --dim 256 --ff 288 --type q4_k --fallback q5_0 2>&1", mk,
                 km);
        const int wrc = sh(cmd);
        snprintf(cmd, sizeof cmd, "%s model-info %s 2>&1", bin, km);
        rc = sh(cmd);
        ok(wrc == 0 && rc == 0 && strstr(out, "Q5_0 x2") && strstr(out, "Q4_K x") &&
               !strstr(out, "not supported"),
           "model-info on a Q4_K_M-style file: Q4_K and 2 Q5_0 tensors, all supported (%d, %d)",
           wrc, rc);
        snprintf(cmd, sizeof cmd,
                 "%s generate -m %s -p 'hello' --temperature 0 -n 8 --threads 2 2>&1", bin, km);
        rc = sh(cmd);
        ok(rc == 0 && strstr(out, "[length, 8 tokens"),
           "generate on it: 8 greedy tokens, exit 0 (%d: %.200s)", rc, out);
        snprintf(cmd, sizeof cmd, "%s %s --type iq2_xxs 2>&1", mk, km);
        rc = sh(cmd);
        ok(rc == 64 && strstr(out, "unknown type 'iq2_xxs'"),
           "cairn-mkmodel refuses a type it cannot write: exit 64 naming it (%d)", rc);
        unlink(km);
    }

    /* a tensor type the engine cannot run (IQ2_XXS): described, flagged, then exit 69 */
    {
        char q5[600];
        snprintf(q5, sizeof q5, "%s/iq2xxs.gguf", dir);
        cairn__gguf_writer *w = gw_new(3, 32);
        gw_kv_str(w, "general.architecture", "llama");
        const char *vocab[] = {"<unk>", "<s>", "</s>",
                               "\xe2\x96\x81"
                               "a",
                               "b"};
        const float scores[] = {0, 0, 0, -1, -2};
        const int32_t types[] = {2, 3, 3, 1, 1};
        gw_kv_str(w, "tokenizer.ggml.model", "llama");
        gw_kv_arr_str(w, "tokenizer.ggml.tokens", vocab, 5);
        gw_kv_arr_f32(w, "tokenizer.ggml.scores", scores, 5);
        gw_kv_arr_i32(w, "tokenizer.ggml.token_type", types, 5);
        const uint64_t ne_f[2] = {8, 4}, ne_q[2] = {256, 2};
        gw_tensor_f32(w, "token_embd.weight", CAIRN__GGML_F32, 2, ne_f, NULL);
        static unsigned char blocks[2 * 66]; /* two IQ2_XXS blocks of 66 bytes */
        gw_tensor_raw(w, "blk.0.ffn_down.weight", 16, 2, ne_q, blocks, sizeof blocks);
        const int wrc = gw_write(w, q5);
        gw_free(w);
        snprintf(cmd, sizeof cmd, "%s model-info %s 2>&1", bin, q5);
        rc = sh(cmd);
        ok(wrc == 0 && rc == 69 && strstr(out, "F32 x1, IQ2_XXS x1 (not supported)") &&
               strstr(out, "architecture:   llama") && strstr(out, "'blk.0.ffn_down.weight'") &&
               strstr(out, "does not support"),
           "model-info on an IQ2_XXS tensor: described, the type flagged, the tensor named, exit "
           "69 "
           "(%d)",
           rc);
        snprintf(cmd, sizeof cmd, "%s model-info --json %s 2>/dev/null", bin, q5);
        rc = sh(cmd);
        const char *qk = strstr(out, "\"IQ2_XXS\"");
        ok(rc == 69 && qk && strstr(qk, "\"supported\": false") &&
               strstr(out, "\"supported\": true"),
           "model-info --json: \"supported\": false for IQ2_XXS, true for F32 (%d)", rc);
        snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi 2>&1", bin, q5);
        rc = sh(cmd);
        ok(rc == 69 && strstr(out, "IQ2_XXS"), "generate on it still exits 69 naming the type (%d)",
           rc);
        snprintf(cmd, sizeof cmd, "%s tokenize --model %s --text ab 2>&1", bin, q5);
        rc = sh(cmd);
        ok(rc == 0 && strcmp(out, "3 4\n") == 0,
           "tokenize reads its vocabulary all the same (%d: %s)", rc, out);
        unlink(q5);
    }

#ifndef CAIRN_HAVE_CUDA
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi --backend cuda 2>&1", bin, path);
    rc = sh(cmd);
    ok(rc == 69 && strstr(out, "CUDA"), "--backend cuda without CUDA exits 69 (%d)", rc);
#endif
    unlink(path);
    unlink(bad);
    rmdir(dir);
    return tap_done();
}
