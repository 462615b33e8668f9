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
    ok(rc == 0 && strncmp(first, out, (size_t)(strstr(first, "\n[") - first)) == 0,
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
