/* tests/model/test_cli.c - `cairn generate` as a user runs it: output, exit codes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

int main(void)
{
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
