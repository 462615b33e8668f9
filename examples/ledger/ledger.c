/* examples/ledger/ledger.c - the smallest complete custom graph, as a C developer writes one.
 *
 * Graph `ledger`: parse (compute) -> work (compute, stands for the LLM call) -> append (effect).
 * Input: {"text": "...", "work_ms": 0, "trace": "/path", "ledger": "/path", "fail": "..."}
 *   work    appends "work <task>" to `trace` when it starts (so tests can count executions),
 *           sleeps work_ms, and outputs the SHA-256 of `text` with a random 64-bit nonce (so a
 *           re-run would be visible); "fail": "transient:K" fails its first K invocations,
 *           "fail": "permanent" fails for good.
 *   append  appends "<task> <digest>" to `ledger`: the side effect cairn runs at most once.
 * The whole CLI comes from one call: cairn_cli_main(argc, argv, graphs, n).
 *
 * cairn guarantees at most once for the call, not that the call is atomic: a process killed
 * inside an effect can leave it half done (here, a line cut at a page boundary, which the
 * operator then resolves). Whatever receives an effect must cope with a partial record; this
 * one keeps the next record from being glued onto it (append_line).
 */
#include <cairn.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Finds key `k` in a msgpack map, or NULL. */
static const msgpack_object *field(const msgpack_object *map, const char *k)
{
    if (!map || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    size_t n = strlen(k);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *key = &map->via.map.ptr[i].key;
        if (key->type == MSGPACK_OBJECT_STR && key->via.str.size == n &&
            memcmp(key->via.str.ptr, k, n) == 0)
            return &map->via.map.ptr[i].val;
    }
    return NULL;
}

/* Copies a string field into buf ("" if absent); -1 if present but not a string or too long. */
static int str_field(const msgpack_object *map, const char *k, char *buf, size_t cap)
{
    const msgpack_object *o = field(map, k);
    buf[0] = 0;
    if (!o || o->type == MSGPACK_OBJECT_NIL)
        return 0;
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size >= cap)
        return -1;
    memcpy(buf, o->via.str.ptr, o->via.str.size);
    buf[o->via.str.size] = 0;
    return 0;
}

static void pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

/* Appends one line to a file and flushes it to disk. A write killed part-way (SIGKILL stops a
 * regular-file write at a page boundary) leaves a line with no newline; the next line must not
 * be glued onto it, so a file that does not end in '\n' gets one first, in the same write and
 * under an exclusive flock (released when the holder exits, however it exits). */
static int append_line(const char *path, const char *line)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    char buf[1400], last = '\n';
    struct stat sb;
    int ok = flock(fd, LOCK_EX) == 0 && fstat(fd, &sb) == 0;
    if (ok && S_ISREG(sb.st_mode) && sb.st_size > 0) {
        int rfd = open(path, O_RDONLY | O_CLOEXEC);
        ok = rfd >= 0 && pread(rfd, &last, 1, sb.st_size - 1) == 1;
        if (rfd >= 0)
            close(rfd);
    }
    int n = snprintf(buf, sizeof buf, "%s%s", last == '\n' ? "" : "\n", line);
    ok = ok && n > 0 && (size_t)n < sizeof buf && write(fd, buf, (size_t)n) == (ssize_t)n &&
         fsync(fd) == 0;
    close(fd);
    return ok ? 0 : -1;
}

/* parse: validates the input once, so later steps can trust it. */
static cairn_step_result parse(cairn_ctx *ctx, void *user)
{
    (void)user;
    const msgpack_object *in = cairn_ctx_input(ctx);
    char text[4096], trace[1024], ledger[1024], fail[64];
    if (str_field(in, "text", text, sizeof text) || !field(in, "text")) {
        cairn_ctx_set_error(ctx, "input field 'text' must be a string of < 4096 bytes");
        return CAIRN_STEP_PERMANENT;
    }
    if (str_field(in, "ledger", ledger, sizeof ledger) || !ledger[0]) {
        cairn_ctx_set_error(ctx, "input field 'ledger' must be a file path");
        return CAIRN_STEP_PERMANENT;
    }
    if (str_field(in, "trace", trace, sizeof trace) || str_field(in, "fail", fail, sizeof fail)) {
        cairn_ctx_set_error(ctx, "input fields 'trace' and 'fail' must be strings");
        return CAIRN_STEP_PERMANENT;
    }
    const msgpack_object *ms = field(in, "work_ms");
    uint64_t work_ms = 0;
    if (ms && ms->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        work_ms = ms->via.u64;
    else if (ms && ms->type != MSGPACK_OBJECT_NIL) {
        cairn_ctx_set_error(ctx, "input field 'work_ms' must be a non-negative integer");
        return CAIRN_STEP_PERMANENT;
    }
    if (fail[0] && strcmp(fail, "permanent") != 0 && strncmp(fail, "transient:", 10) != 0) {
        cairn_ctx_set_error(ctx, "input field 'fail' must be \"permanent\" or \"transient:K\"");
        return CAIRN_STEP_PERMANENT;
    }
    msgpack_packer *pk = cairn_ctx_packer(ctx);
    msgpack_pack_map(pk, 5);
    pack_str(pk, "text"), pack_str(pk, text);
    pack_str(pk, "work_ms"), msgpack_pack_uint64(pk, work_ms);
    pack_str(pk, "trace"), pack_str(pk, trace);
    pack_str(pk, "ledger"), pack_str(pk, ledger);
    pack_str(pk, "fail"), pack_str(pk, fail);
    return CAIRN_STEP_OK;
}

/* work: the expensive, non-deterministic step (think: the LLM call). */
static cairn_step_result work(cairn_ctx *ctx, void *user)
{
    (void)user;
    const msgpack_object *p = cairn_ctx_dep(ctx, "parse");
    char text[4096], trace[1024], fail[64], line[1200];
    str_field(p, "text", text, sizeof text);
    str_field(p, "trace", trace, sizeof trace);
    str_field(p, "fail", fail, sizeof fail);
    if (trace[0]) {
        snprintf(line, sizeof line, "work %s\n", cairn_ctx_task_id(ctx));
        if (append_line(trace, line) != 0) {
            cairn_ctx_set_error(ctx, "cannot append to trace %s: %s", trace, strerror(errno));
            return CAIRN_STEP_TRANSIENT;
        }
    }
    const msgpack_object *ms = field(p, "work_ms");
    uint64_t left = ms && ms->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? ms->via.u64 : 0;
    while (left > 0 && !cairn_ctx_stopping(ctx)) {
        uint64_t chunk = left > 20 ? 20 : left;
        struct timespec ts = {0, (long)chunk * 1000000L};
        nanosleep(&ts, NULL);
        left -= chunk;
    }
    if (strcmp(fail, "permanent") == 0) {
        cairn_ctx_set_error(ctx, "asked to fail permanently");
        return CAIRN_STEP_PERMANENT;
    }
    if (strncmp(fail, "transient:", 10) == 0 &&
        cairn_ctx_invocation(ctx) <= (uint32_t)strtoul(fail + 10, NULL, 10)) {
        cairn_ctx_set_error(ctx, "asked to fail transiently (invocation %u)",
                            cairn_ctx_invocation(ctx));
        return CAIRN_STEP_TRANSIENT;
    }
    unsigned char h[32];
    unsigned hl = 0;
    char hex[65];
    EVP_Digest(text, strlen(text), h, &hl, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", h[i]);
    unsigned char nonce[8];
    char nonce_hex[17];
    RAND_bytes(nonce, sizeof nonce);
    for (int i = 0; i < 8; i++)
        snprintf(nonce_hex + 2 * i, 3, "%02x", nonce[i]);
    msgpack_packer *pk = cairn_ctx_packer(ctx);
    msgpack_pack_map(pk, 2);
    pack_str(pk, "digest"), pack_str(pk, hex);
    pack_str(pk, "nonce"), pack_str(pk, nonce_hex); /* 64 random bits, as hex */
    return CAIRN_STEP_OK;
}

/* append: the side effect. cairn commits (and flushes) an intent before calling it, so after a
 * crash it is never called twice: the task becomes in_doubt instead. */
static cairn_step_result append(cairn_ctx *ctx, void *user)
{
    (void)user;
    char ledger[1024], digest[65], line[1300];
    str_field(cairn_ctx_dep(ctx, "parse"), "ledger", ledger, sizeof ledger);
    str_field(cairn_ctx_dep(ctx, "work"), "digest", digest, sizeof digest);
    snprintf(line, sizeof line, "%s %s\n", cairn_ctx_task_id(ctx), digest);
    if (append_line(ledger, line) != 0) {
        /* open() failing means nothing was written: safe to retry */
        cairn_ctx_set_error(ctx, "cannot append to ledger %s: %s", ledger, strerror(errno));
        return CAIRN_STEP_TRANSIENT;
    }
    msgpack_packer *pk = cairn_ctx_packer(ctx);
    msgpack_pack_map(pk, 1);
    pack_str(pk, "line"), pack_str(pk, line);
    return CAIRN_STEP_OK;
}

int main(int argc, char **argv)
{
    cairn_graph *g = cairn_graph_new("ledger", 1);
    if (!g)
        return 70;
    cairn_graph_add_step(g, "parse", parse, NULL);
    cairn_step *w = cairn_graph_add_step(g, "work", work, "parse");
    cairn_step_set_expensive(w, 1);   /* flush its output at once: it is costly to redo */
    cairn_step_set_timeout(w, 60000); /* hard timeout: runs in a child killed at 60 s */
    cairn_step_set_retry(w, 3, 50, 2000);
    cairn_step *a = cairn_graph_add_step(g, "append", append, "parse,work");
    cairn_step_set_delivery(a, CAIRN_EFFECT); /* at most once */
    int rc = cairn_cli_main(argc, argv, &g, 1);
    cairn_graph_free(g);
    return rc;
}
