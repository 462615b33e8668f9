/* graphs.c - a CLI built from test graphs, for the integration tests (binary cairn-test-graphs).
 *
 * The ledger example has one graph at one version and steps that retry inline; some CLI
 * behaviours need more control, so this program defines three graphs through the public API and
 * hands them to cairn_cli_main() exactly as an application would:
 *
 *   pipe    prep -> work -> emit(effect). Its version comes from CAIRN_TEST_GRAPH_VERSION
 *           (default 1); version 2 bumps the `work` step's version, which is how a changed graph
 *           is tested (pinning, --allow-graph-change). work fails transiently with a one-hour
 *           backoff in version V while input "fail_vV" is true, so a task can be left `failed`
 *           by version 1 and then resumed by version 2. Its output carries input "work_bytes"
 *           bytes more (a store whose map cannot hold it).
 *   flaky   work: fails its first `fail` invocations with a one-hour backoff, so the run ends
 *           `failed` with a retry time in the future (`retry` skips it, `retry --now` runs it);
 *           a successful invocation sleeps input "sleep_ms" first (overlapping retries).
 *   doubt   prep -> send(effect): returns UNKNOWN (outcome unknown) the first time, i.e. while
 *           the marker file named by input "marker" does not exist; creates it. Makes a task
 *           in_doubt deterministically.
 *
 * Every step appends "<step> <task> g<generation> i<invocation>" to the file named by input
 * "trace" (if any), so tests count executions.
 */
#include <cairn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* String field copied into buf ("" if absent or not a string). */
static void str_field(const msgpack_object *map, const char *k, char *buf, size_t cap)
{
    const msgpack_object *o = field(map, k);
    buf[0] = 0;
    if (o && o->type == MSGPACK_OBJECT_STR && o->via.str.size < cap) {
        memcpy(buf, o->via.str.ptr, o->via.str.size);
        buf[o->via.str.size] = 0;
    }
}

static uint64_t uint_field(const msgpack_object *map, const char *k)
{
    const msgpack_object *o = field(map, k);
    return o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : 0;
}

static int bool_field(const msgpack_object *map, const char *k)
{
    const msgpack_object *o = field(map, k);
    return o && o->type == MSGPACK_OBJECT_BOOLEAN && o->via.boolean;
}

/* Appends the execution line to the trace file; 0 or -1. */
static int trace(cairn_ctx *ctx)
{
    char path[1024], line[512];
    str_field(cairn_ctx_input(ctx), "trace", path, sizeof path);
    if (!path[0])
        return 0;
    int n = snprintf(line, sizeof line, "%s %s g%u i%u\n", cairn_ctx_step_name(ctx),
                     cairn_ctx_task_id(ctx), cairn_ctx_generation(ctx), cairn_ctx_invocation(ctx));
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    int ok = write(fd, line, (size_t)n) == n;
    close(fd);
    return ok ? 0 : -1;
}

/* Sets the standard output {step, generation}; the caller has traced already. */
static cairn_step_result output(cairn_ctx *ctx, const char *what)
{
    msgpack_packer *pk = cairn_ctx_packer(ctx);
    msgpack_pack_map(pk, 2);
    msgpack_pack_str_with_body(pk, "step", 4);
    msgpack_pack_str_with_body(pk, what, strlen(what));
    msgpack_pack_str_with_body(pk, "generation", 10);
    msgpack_pack_uint32(pk, cairn_ctx_generation(ctx));
    return CAIRN_STEP_OK;
}

static cairn_step_result traced_output(cairn_ctx *ctx, const char *what)
{
    if (trace(ctx)) {
        cairn_ctx_set_error(ctx, "cannot write the trace file");
        return CAIRN_STEP_TRANSIENT;
    }
    return output(ctx, what);
}

static cairn_step_result prep(cairn_ctx *ctx, void *user)
{
    (void)user;
    return traced_output(ctx, "prep");
}

static cairn_step_result pipe_work(cairn_ctx *ctx, void *user)
{
    const char *version = user;
    if (trace(ctx))
        return CAIRN_STEP_TRANSIENT;
    char key[16];
    snprintf(key, sizeof key, "fail_v%s", version);
    if (bool_field(cairn_ctx_input(ctx), key)) {
        cairn_ctx_set_error(ctx, "work v%s asked to fail (invocation %u)", version,
                            cairn_ctx_invocation(ctx));
        return CAIRN_STEP_TRANSIENT;
    }
    uint64_t pad = uint_field(cairn_ctx_input(ctx), "work_bytes");
    msgpack_packer *pk = cairn_ctx_packer(ctx);
    msgpack_pack_map(pk, pad ? 2 : 1);
    msgpack_pack_str_with_body(pk, "version", 7);
    msgpack_pack_str_with_body(pk, version, strlen(version));
    if (pad) { /* an output as large as asked: a store that cannot hold it */
        msgpack_pack_str_with_body(pk, "pad", 3);
        msgpack_pack_str(pk, (size_t)pad);
        for (uint64_t i = 0; i < pad; i++)
            msgpack_pack_str_body(pk, "x", 1);
    }
    return CAIRN_STEP_OK;
}

static cairn_step_result emit(cairn_ctx *ctx, void *user)
{
    (void)user;
    return traced_output(ctx, "emit");
}

static cairn_step_result flaky_work(cairn_ctx *ctx, void *user)
{
    (void)user;
    if (trace(ctx))
        return CAIRN_STEP_TRANSIENT;
    if (cairn_ctx_invocation(ctx) <= uint_field(cairn_ctx_input(ctx), "fail")) {
        cairn_ctx_set_error(ctx, "flaky: failing invocation %u", cairn_ctx_invocation(ctx));
        return CAIRN_STEP_TRANSIENT;
    }
    uint64_t ms = uint_field(cairn_ctx_input(ctx), "sleep_ms");
    if (ms > 0)
        usleep((useconds_t)(ms * 1000));
    return output(ctx, "flaky");
}

static cairn_step_result send_step(cairn_ctx *ctx, void *user)
{
    (void)user;
    if (trace(ctx))
        return CAIRN_STEP_TRANSIENT;
    char marker[1024];
    str_field(cairn_ctx_input(ctx), "marker", marker, sizeof marker);
    struct stat st;
    if (marker[0] && stat(marker, &st) != 0) {
        int fd = open(marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0)
            close(fd);
        cairn_ctx_set_error(ctx, "send: no answer from the receiver (timeout after sending)");
        return CAIRN_STEP_UNKNOWN;
    }
    return output(ctx, "send");
}

int main(int argc, char **argv)
{
    const char *v = getenv("CAIRN_TEST_GRAPH_VERSION");
    int version = v && atoi(v) == 2 ? 2 : 1;
    static char vs[8];
    snprintf(vs, sizeof vs, "%d", version);

    cairn_graph *pipe = cairn_graph_new("pipe", 1);
    cairn_graph *flaky = cairn_graph_new("flaky", 1);
    cairn_graph *doubt = cairn_graph_new("doubt", 1);
    if (!pipe || !flaky || !doubt)
        return 70;

    cairn_graph_add_step(pipe, "prep", prep, NULL);
    cairn_step *w = cairn_graph_add_step(pipe, "work", pipe_work, "prep");
    cairn_step_set_user(w, vs);
    cairn_step_set_version(w, (uint32_t)version);
    cairn_step_set_retry(w, 5, 3600000, 3600000);
    cairn_step *e = cairn_graph_add_step(pipe, "emit", emit, "work");
    cairn_step_set_delivery(e, CAIRN_EFFECT);

    cairn_step *f = cairn_graph_add_step(flaky, "work", flaky_work, NULL);
    cairn_step_set_retry(f, 10, 3600000, 3600000);

    cairn_graph_add_step(doubt, "prep", prep, NULL);
    cairn_step *s = cairn_graph_add_step(doubt, "send", send_step, "prep");
    cairn_step_set_delivery(s, CAIRN_EFFECT);

    cairn_graph *graphs[] = {pipe, flaky, doubt};
    int rc = cairn_cli_main(argc, argv, graphs, 3);
    cairn_graph_free(pipe);
    cairn_graph_free(flaky);
    cairn_graph_free(doubt);
    return rc;
}
