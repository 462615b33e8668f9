/* tools/serve_model.c - `cairn serve --model`: one loaded model served as an OpenAI-compatible
 * HTTP service (completions and chat completions, streamed or not), batched.
 *
 * This file is the command: its options, the engine and the batch it opens, the listener, and
 * the stop. The rest is three files (tools/serve_model.h lists them): the scheduler thread that
 * owns the batch (serve_sched.c), a request's fields (serve_request.c), and the routes and what
 * they answer (serve_api.c).
 *
 * The stop is in two halves so that no client is cut short without being told: at SIGTERM,
 * SIGINT or SIGHUP new requests get 503 while the running ones have --grace seconds to finish;
 * then what is left is cancelled, each stream with an error event, and the HTTP server gives
 * those last events time to go out before it stops.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "gpu/chat.h"
#include "runner/cli.h"
#include "runner/http.h"
#include "tools/serve_model.h"
#include "tools/tools.h"

static const char usage[] =
    "usage: cairn serve --model FILE.gguf [--listen ADDR:PORT | --socket PATH] [options]\n"
    "\n"
    "Loads the model once (on the GPU when there is one: --backend auto) and serves it over an\n"
    "OpenAI-compatible HTTP API, batching the requests that run at once:\n"
    "  POST /v1/completions        {\"prompt\": TEXT, ...}\n"
    "  POST /v1/chat/completions   {\"messages\": [{\"role\", \"content\"}...]} (the model's chat\n"
    "                              template, or --chat)\n"
    "  GET /v1/models, GET /health, GET /metrics (Prometheus text)\n"
    "Request fields: max_tokens (default 256), temperature (0.8), top_p (0.95), top_k (40; 0:\n"
    "off), seed (default: random), stop (a string or up to 16), repetition_penalty or\n"
    "repeat_penalty (1: off), repeat_last_n (64), ignore_eos, stream (server-sent events\n"
    "ending in `data: [DONE]`); other fields are ignored. A bad value is 400 with an OpenAI error "
    "naming\n"
    "the field. The \"cairn\" field (progress_every, resume) makes a generation resumable\n"
    "exactly: see README, Scaling generation.\n"
    "\n"
    "      --listen ADDR:PORT  where to listen (default 127.0.0.1:8080; port 0: any free port);\n"
    "                          prints `listening ADDRESS` on stdout once it does\n"
    "      --socket PATH       listen on a Unix socket instead\n"
    "      --api-key-file F    every request needs 'Authorization: Bearer <the file's key>'\n"
    "                          (required for an address other than loopback)\n"
    "      --max-seqs N        sequences generated at once (default 8)\n"
    "      --queue N           requests waiting beyond those (default 32); more is 429\n"
    "      --model-name NAME   the model's id in /v1/models and responses (default: the file's\n"
    "                          name without .gguf)\n"
    "      --chat FORMAT       chat template: auto (default, from the model), chatml, llama3,\n"
    "                          gemma, phi3, mistral, raw\n"
    "      --backend NAME      cpu, cuda or auto (default auto)\n"
    "  -t, --threads N         CPU threads (default: all online CPUs)\n"
    "  -c, --ctx N             context length per sequence (default: min(model's, 4096))\n"
    "      --prompt-chunks N   prompt chunks run per batch step beside the decodes (default 1:\n"
    "                          long steps delay every stream; more may suit a GPU)\n"
    "      --kv-blocks N       KV cache blocks of 16 positions shared by all sequences\n"
    "                          (default: --max-seqs full contexts)\n"
    "      --grace S           on SIGTERM: seconds the running requests get to finish before\n"
    "                          they are cancelled (default 30)\n"
    "      --step-delay-ms MS  sleep before each batch step (for tests: a slow server)\n"
    "\n"
    "SIGTERM, SIGINT and SIGHUP stop it: new requests get 503, the running ones finish (or are\n"
    "cancelled after --grace), then it exits 0. Exit: 64 usage; 65/66/69 the model cannot be\n"
    "loaded (as `cairn generate`); 66 key file unreadable; 69 cannot listen.\n";

#define bad_usage(...) cairn__cli_usage_error("serve", usage, __VA_ARGS__)

typedef struct {
    const char *model, *listen, *socket, *key_file, *name, *chat, *backend;
    const char *max_seqs, *queue, *threads, *ctx, *kv_blocks, *grace, *delay, *chunks;
} options;

#define AT(f) offsetof(options, f)
static const cairn__opt opts[] = {
    {"model", 'm', 1, 0, 0, AT(model)},
    {"listen", 0, 1, 0, 0, AT(listen)},
    {"socket", 0, 1, 0, 0, AT(socket)},
    {"api-key-file", 0, 1, 0, 0, AT(key_file)},
    {"model-name", 0, 1, 0, 0, AT(name)},
    {"chat", 0, 1, 0, 0, AT(chat)},
    {"backend", 0, 1, 0, 0, AT(backend)},
    {"max-seqs", 0, 1, 0, 0, AT(max_seqs)},
    {"queue", 0, 1, 0, 0, AT(queue)},
    {"threads", 't', 1, 0, 0, AT(threads)},
    {"ctx", 'c', 1, 0, 0, AT(ctx)},
    {"kv-blocks", 0, 1, 0, 0, AT(kv_blocks)},
    {"prompt-chunks", 0, 1, 0, 0, AT(chunks)},
    {"grace", 0, 1, 0, 0, AT(grace)},
    {"step-delay-ms", 0, 1, 0, 0, AT(delay)},
    {NULL, 0, 0, 0, 0, 0},
};
#undef AT
static const cairn__opt_cmd cmd = {"serve", usage, 0, 0, opts};

/* A number option (absent: dflt) into *out; 64 after a usage error, else 0. */
static int num_opt(const char *name, const char *v, long lo, long hi, long dflt, long *out)
{
    *out = dflt;
    if (v && cairn__cli_parse_long(v, lo, hi, out))
        return bad_usage("bad --%s '%s' (%ld to %ld)", name, v, lo, hi);
    return 0;
}

static char *default_name(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".gguf"))
        n -= 5;
    return strndup(base, n);
}

int cairn__cmd_serve_model(int argc, char **argv)
{
    options o = {0};
    int oi, rc = cairn__opt_parse(argc, argv, &cmd, cairn__opt_slot, &o, &oi);
    if (rc >= 0)
        return rc;
    long max_seqs, queue, threads, ctx, kv_blocks, grace, delay, chunks;
    if (!o.model)
        return bad_usage("--model is required");
    if (o.listen && o.socket)
        return bad_usage("give one of --listen and --socket");
    if ((rc = num_opt("max-seqs", o.max_seqs, 1, 256, 8, &max_seqs)) ||
        (rc = num_opt("queue", o.queue, 0, 1 << 16, 32, &queue)) ||
        (rc = num_opt("threads", o.threads, 0, 1024, 0, &threads)) ||
        (rc = num_opt("ctx", o.ctx, 0, 1 << 24, 0, &ctx)) ||
        (rc = num_opt("kv-blocks", o.kv_blocks, 0, 1 << 24, 0, &kv_blocks)) ||
        (rc = num_opt("prompt-chunks", o.chunks, 1, 256, 1, &chunks)) ||
        (rc = num_opt("grace", o.grace, 0, 86400, 30, &grace)) ||
        (rc = num_opt("step-delay-ms", o.delay, 0, 60000, 0, &delay)))
        return rc;
    const char *backend = o.backend ? o.backend : "auto";
    if (strcmp(backend, "cpu") && strcmp(backend, "cuda") && strcmp(backend, "auto"))
        return bad_usage("unknown --backend '%s' (cpu, cuda, auto)", backend);
    int fmt = -1;
    if (o.chat && strcmp(o.chat, "auto") && cairn__chat_format_parse(o.chat, &fmt))
        return bad_usage("unknown --chat format '%s' (auto, chatml, llama3, gemma, phi3, mistral, "
                         "raw)",
                         o.chat);
    char listen[4200];
    if (o.socket)
        snprintf(listen, sizeof listen, "unix:%s", o.socket);
    else
        snprintf(listen, sizeof listen, "%s", o.listen ? o.listen : CAIRN__HTTP_LISTEN_DEFAULT);
    if ((rc = cairn__http_cmd_check("serve", usage, listen, o.key_file, "--api-key-file")))
        return rc;

    server sv = {
        .max_seqs = (int)max_seqs, .queue_max = (int)queue, .step_delay_ms = (unsigned)delay};
    char err[1024] = "";
    cairn__engine_opts eo = {.backend = backend, .n_ctx = (int)ctx, .n_threads = (int)threads};
    if ((rc = cairn__engine_open(o.model, &eo, &sv.e, err, sizeof err)))
        return cairn__model_open_failed("serve", o.model, rc, err);
    cairn__backend *be = cairn__engine_backend(sv.e);
    sv.n_ctx = cairn__backend_n_ctx(be);
    if (sv.max_seqs > cairn__backend_n_batch(be))
        sv.max_seqs = cairn__backend_n_batch(be);
    sv.chat_fmt =
        fmt >= 0 ? fmt : cairn__chat_format_detect(cairn__model_gguf(cairn__engine_model(sv.e)));
    char *name = o.name ? strdup(o.name) : default_name(o.model);
    sv.name = name;
    const int per_seq = (sv.n_ctx + CAIRN__KV_BLOCK - 1) / CAIRN__KV_BLOCK;
    cairn__batch_opts bo = {.max_seqs = sv.max_seqs,
                            .n_blocks = kv_blocks ? (int)kv_blocks : per_seq * sv.max_seqs,
                            .prompt_chunks = (int)chunks};
    int x = CAIRN__EX_SOFTWARE, stop_fd = -1;
    cairn__http *http = NULL;
    if (cairn__serve_init(&sv) || !name) {
        cairn__log(CAIRN__LOG_ERROR, "serve", "error", NULL, NULL, "out of memory");
        goto out;
    }
    if ((rc = cairn__batch_new(sv.e, &bo, &sv.b, err, sizeof err))) {
        cairn__log(CAIRN__LOG_ERROR, "serve", "batch", NULL, NULL, "%s", err);
        x = cairn__exit_code_engine(rc);
        goto out;
    }
    if ((stop_fd = cairn__cli_stops_catch()) < 0 || cairn__serve_start(&sv)) {
        cairn__log(CAIRN__LOG_ERROR, "serve", "error", NULL, NULL, "%s", strerror(errno));
        goto out;
    }
    cairn__http_conf hc = {.listen = listen,
                           .token_file = o.key_file,
                           .body_max = 16u << 20,
                           .per_connection = 1,
                           .routes = cairn__serve_routes,
                           .n_routes = cairn__serve_n_routes,
                           .user = &sv,
                           .refusal = cairn__serve_refusal_body};
    char what[1024];
    snprintf(what, sizeof what, "model %s (%s backend, context %d, %d sequences at once, %s batch)",
             sv.name, cairn__backend_name(be), sv.n_ctx, sv.max_seqs,
             cairn__batch_paged(sv.b) ? "paged" : "solo");
    if ((x = cairn__http_cmd_start(&hc, "serve", what, &http)))
        goto out;
    x = cairn__cli_stops_wait(stop_fd, 0, NULL, NULL); /* no tick: 0, at a stop */
    cairn__serve_drain(&sv, grace);
out:
    cairn__serve_cancel(&sv);
    cairn__http_stop(http, 10.0); /* every stream has its end now: it goes out whole */
    if (stop_fd >= 0) {
        cairn__cli_stops_default();
        cairn__cli_stops_close();
    }
    if (x == CAIRN__EX_OK)
        cairn__log(CAIRN__LOG_NOTE, "serve", "stopped", NULL, NULL, "stopped");
    cairn__batch_free(sv.b);
    cairn__engine_free(sv.e);
    cairn__serve_free(&sv);
    free(name);
    return x;
}
