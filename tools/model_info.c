/* tools/model_info.c - the `cairn model-info` command: a GGUF model described without loading it.
 *
 * It reads the file's metadata and tensor table only (never the weights), so it answers in
 * milliseconds for any model size: architecture, parameters, tensor types, layer sizes, the KV
 * cache a token takes in f32 and f16, and the tokenizer. Exit codes as `cairn tokenize`
 * (cairn__exit_code_engine): 64 usage, 65 malformed model file, 66 missing or unreadable model, 69
 * unsupported, 70 internal error, 74 the output cannot be written.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "gpu/gguf.h"
#include "gpu/tokenizer.h"
#include "runner/cli.h"
#include "tools/tools.h"

static const char model_info_usage[] =
    "usage: cairn model-info [--json] [--] FILE.gguf\n"
    "\n"
    "Describes a GGUF model: architecture, parameter count, file size, tensor types, context\n"
    "length, layer sizes, the KV cache's size (a token's keys and values, as f32 and as f16\n"
    "with --cache-type f16, and at the default --ctx of cairn generate) and tokenizer.\n"
    "\n"
    "      --json   print one JSON object instead of text\n"
    "  -h, --help   show this help\n"
    "\n"
    "Exit status: 0 success; 64 bad usage; 65 bad model file (corrupt or truncated GGUF);\n"
    "66 model file missing, unreadable or a directory; 69 unsupported (a tensor type this\n"
    "engine does not implement); 70 internal error; 74 the output cannot be written.\n";

/* An <arch>.<suffix> size: a scalar, or for per-layer arrays the largest entry. -1 if absent. */
static int64_t arch_value(const cairn__gguf *g, const char *arch, const char *suffix)
{
    char key[256];
    uint64_t v, n, i;
    int et;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (cairn__gguf_get_u64(g, key, &v) == 0)
        return v > INT64_MAX ? INT64_MAX : (int64_t)v;
    if (cairn__gguf_get_arr(g, key, &et, &n) == 0 && n > 0) {
        int64_t best = -1, x;
        for (i = 0; i < n; i++)
            if (cairn__gguf_arr_i64(g, key, i, &x) == 0 && x > best)
                best = x;
        return best;
    }
    return -1;
}

/* Copies a metadata string into a NUL-terminated buffer; "" if absent or not a string. */
static const char *meta_str(const cairn__gguf *g, const char *key, char *buf, size_t cap)
{
    const char *s;
    size_t n;
    buf[0] = 0;
    if (cairn__gguf_get_str(g, key, &s, &n) == 0) {
        if (n >= cap)
            n = cap - 1;
        memcpy(buf, s, n);
        buf[n] = 0; /* a NUL inside the value ends it early: fine for display */
    }
    return buf;
}

static void human(double v, const char *const *units, double step, char *out, size_t cap)
{
    size_t u = 0;
    while (v >= step && units[u + 1]) {
        v /= step;
        u++;
    }
    snprintf(out, cap, u ? "%.2f %s" : "%.0f%s", v, units[u]);
}

static int json_put(json_t *o, const char *k, json_t *v)
{
    return json_object_set_new(o, k, v ? v : json_null());
}

static json_t *json_size(int64_t v) { return v >= 0 ? json_integer((json_int_t)v) : json_null(); }

static const cairn__opt model_info_opts[] = {{"json", 0, 0, 0, 0, 0}, {NULL, 0, 0, 0, 0, 0}};
static const cairn__opt_cmd model_info_cmd = {"model-info", model_info_usage, 0, -1,
                                              model_info_opts};

int cairn__model_open_failed(const char *cmd, const char *path, int rc, const char *err)
{
    /* the reader's message usually names the file already */
    if (err[0] && strstr(err, path))
        cairn__log(CAIRN__LOG_ERROR, cmd, "model_open", NULL, NULL, "%s", err);
    else
        cairn__log(CAIRN__LOG_ERROR, cmd, "model_open", NULL, NULL, "%s: %s", path,
                   err[0] ? err : "cannot open");
    return cairn__exit_code_engine(rc);
}

int cairn__cmd_model_info(int argc, char **argv)
{
    static const char *const count_units[] = {"", "K", "M", "B", "T", NULL};
    static const char *const byte_units[] = {" bytes", "KiB", "MiB", "GiB", "TiB", NULL};
    static const struct {
        const char *suffix, *label, *json;
    } sizes[] = {
        {"context_length", "context length", "context_length"},
        {"embedding_length", "embedding", "embedding_length"},
        {"block_count", "layers", "block_count"},
        {"attention.head_count", "heads", "head_count"},
        {"attention.head_count_kv", "kv heads", "head_count_kv"},
        {"feed_forward_length", "feed-forward", "feed_forward_length"},
    };
    const char *path = NULL;
    int json, i, rc, et;
    char err[512], arch[128], name[256], tmodel[64], tpre[64], h1[64], h2[64];
    cairn__gguf *g = NULL;
    uint64_t params = 0, counts[64] = {0}, bytes[64] = {0}, other_count = 0, other_bytes = 0,
             vocab = 0;
    size_t k, nt;
    int64_t vals[sizeof sizes / sizeof sizes[0]];

    json = 0; /* --json, the one option: its int at offset 0 */
    if ((rc = cairn__opt_parse(argc, argv, &model_info_cmd, cairn__opt_slot, &json, &i)) >= 0)
        return rc;
    if (argc - i != 1)
        return cairn__cli_usage_error("model-info", model_info_usage, "%s",
                                      i == argc ? "no model file given" : "one model file only");
    path = argv[i];
    /* a tensor type the engine cannot compute with is still described (then exit 69) */
    rc = cairn__gguf_open_ex(path, CAIRN__GGUF_ANY_TYPE, &g, err, sizeof err);
    if (rc)
        return cairn__model_open_failed("model-info", path, rc, err);

    nt = cairn__gguf_n_tensors(g);
    for (k = 0; k < nt; k++) {
        const cairn__gguf_tensor *te = cairn__gguf_tensor_at(g, k);
        params += te->n_elements;
        if (te->type < 64) {
            counts[te->type]++;
            bytes[te->type] += te->nbytes;
        } else {
            other_count++;
            other_bytes += te->nbytes;
        }
    }
    meta_str(g, "general.architecture", arch, sizeof arch);
    meta_str(g, "general.name", name, sizeof name);
    meta_str(g, "tokenizer.ggml.model", tmodel, sizeof tmodel);
    meta_str(g, "tokenizer.ggml.pre", tpre, sizeof tpre);
    if (cairn__gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &vocab) != 0)
        vocab = 0;
    for (k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        vals[k] = arch[0] ? arch_value(g, arch, sizes[k].suffix) : -1;
    if (vals[4] < 0) /* GGUF convention: no head_count_kv means as many as query heads */
        vals[4] = vals[3];
    /* rope: its base, the dimensions it turns, and Llama 3's frequency factors if present */
    char key[192];
    float rope_base = 0.0f;
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    const int have_base = arch[0] && cairn__gguf_get_f32(g, key, &rope_base) == 0;
    const int64_t rope_dims = arch[0] ? arch_value(g, arch, "rope.dimension_count") : -1;
    const cairn__gguf_tensor *rope_ff = cairn__gguf_tensor_find(g, "rope_freqs.weight");
    /* the KV cache a token takes: keys and values of every layer's kv heads, f32 (f16 half) */
    int64_t head_dim = arch[0] ? arch_value(g, arch, "attention.key_length") : -1;
    if (head_dim < 0 && vals[1] > 0 && vals[3] > 0)
        head_dim = vals[1] / vals[3];
    int64_t kv_tok = -1, kv_ctx = -1; /* bytes a token (f32); the default context (tokens) */
    if (vals[2] > 0 && vals[4] > 0 && head_dim > 0 && vals[2] <= 1 << 16 && vals[4] <= 1 << 16 &&
        head_dim <= 1 << 16) {
        kv_tok = 2 * vals[2] * vals[4] * head_dim * (int64_t)sizeof(float);
        if (vals[0] > 0)
            kv_ctx = vals[0] < 4096 ? vals[0] : 4096; /* cairn__backend_opts.n_ctx 0 */
    }

    if (json) {
        json_t *o = json_object(), *types = json_object(), *tok = json_object();
        char *s;
        json_put(o, "file", json_string(path));
        json_put(o, "file_size", json_integer((json_int_t)cairn__gguf_file_size(g)));
        json_put(o, "gguf_version", json_integer((json_int_t)cairn__gguf_version(g)));
        json_put(o, "architecture", arch[0] ? json_string(arch) : NULL);
        json_put(o, "name", name[0] ? json_string(name) : NULL);
        json_put(o, "parameters", json_integer((json_int_t)params));
        json_put(o, "tensors", json_integer((json_int_t)nt));
        for (k = 0; k < 64; k++)
            if (counts[k]) {
                json_t *e = json_object();
                json_put(e, "count", json_integer((json_int_t)counts[k]));
                json_put(e, "bytes", json_integer((json_int_t)bytes[k]));
                json_put(e, "supported", json_boolean(cairn__ggml_block_size((uint32_t)k) != 0));
                json_put(types, cairn__ggml_type_name((uint32_t)k), e);
            }
        if (other_count) {
            json_t *e = json_object();
            json_put(e, "count", json_integer((json_int_t)other_count));
            json_put(e, "bytes", json_integer((json_int_t)other_bytes));
            json_put(e, "supported", json_false());
            json_put(types, "?", e);
        }
        json_put(o, "tensor_types", types);
        for (k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
            json_put(o, sizes[k].json, json_size(vals[k]));
        json_put(tok, "model", tmodel[0] ? json_string(tmodel) : NULL);
        json_put(tok, "pre", tpre[0] ? json_string(tpre) : NULL);
        json_put(tok, "vocab_size", vocab ? json_integer((json_int_t)vocab) : NULL);
        json_put(o, "tokenizer", tok);
        json_t *rope = json_object();
        json_put(rope, "freq_base", have_base ? json_real(rope_base) : NULL);
        json_put(rope, "dimension_count", json_size(rope_dims));
        json_put(rope, "freq_factors",
                 rope_ff ? json_integer((json_int_t)rope_ff->n_elements) : NULL);
        json_put(o, "rope", rope);
        json_t *kv = NULL;
        if (kv_tok > 0) {
            kv = json_object();
            json_put(kv, "bytes_per_token_f32", json_integer((json_int_t)kv_tok));
            json_put(kv, "bytes_per_token_f16", json_integer((json_int_t)(kv_tok / 2)));
            json_put(kv, "default_ctx", json_size(kv_ctx));
        }
        json_put(o, "kv_cache", kv);
        s = json_dumps(o, JSON_INDENT(2) | JSON_ENSURE_ASCII);
        json_decref(o);
        if (!s) {
            cairn__gguf_close(g);
            cairn__log(CAIRN__LOG_ERROR, "model-info", "error", NULL, NULL, "out of memory");
            return CAIRN__EX_SOFTWARE;
        }
        puts(s);
        free(s);
    } else {
        int first = 1;
        human((double)cairn__gguf_file_size(g), byte_units, 1024.0, h1, sizeof h1);
        human((double)params, count_units, 1000.0, h2, sizeof h2);
        printf("file:           %s\n", path);
        printf("file size:      %" PRIu64 " bytes (%s)\n", cairn__gguf_file_size(g), h1);
        printf("gguf version:   %" PRIu32 "\n", cairn__gguf_version(g));
        printf("architecture:   %s\n", arch[0] ? arch : "-");
        if (name[0])
            printf("name:           %s\n", name);
        printf("parameters:     %" PRIu64, params);
        printf(params >= 1000 ? " (%s)\n" : "\n", h2);
        printf("tensors:        %zu\n", nt);
        printf("tensor types:  ");
        for (k = 0; k < 64; k++)
            if (counts[k]) {
                printf("%s %s x%" PRIu64 "%s", first ? "" : ",", cairn__ggml_type_name((uint32_t)k),
                       counts[k], cairn__ggml_block_size((uint32_t)k) ? "" : " (not supported)");
                first = 0;
            }
        if (other_count)
            printf("%s ? x%" PRIu64 " (not supported)", first ? "" : ",", other_count);
        printf("%s\n", nt ? "" : " -");
        for (k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            printf("%s:%*s", sizes[k].label, (int)(15 - strlen(sizes[k].label)), "");
            if (vals[k] >= 0)
                printf("%" PRId64 "\n", vals[k]);
            else
                printf("-\n");
        }
        printf("kv cache:       ");
        if (kv_tok > 0) {
            human((double)kv_tok, byte_units, 1024.0, h1, sizeof h1);
            human((double)kv_tok / 2, byte_units, 1024.0, h2, sizeof h2);
            printf("%s a token in f32, %s in f16", h1, h2);
            if (kv_ctx > 0) {
                human((double)kv_tok * (double)kv_ctx, byte_units, 1024.0, h1, sizeof h1);
                human((double)kv_tok * (double)kv_ctx / 2, byte_units, 1024.0, h2, sizeof h2);
                printf("; %s / %s at the default --ctx %" PRId64, h1, h2, kv_ctx);
            }
            printf("\n");
        } else
            printf("-\n");
        printf("tokenizer:      %s", tmodel[0] ? tmodel : "-");
        if (tpre[0])
            printf(" (pre %s)", tpre);
        printf("\n");
        printf("rope:           ");
        if (have_base)
            printf("base %g", (double)rope_base);
        else
            printf("base -");
        if (rope_dims >= 0)
            printf(", %" PRId64 " dimensions", rope_dims);
        if (rope_ff)
            printf(", %" PRIu64 " frequency factors (rope_freqs)", rope_ff->n_elements);
        printf("\n");
        printf("vocab size:     ");
        if (vocab)
            printf("%" PRIu64 "\n", vocab);
        else
            printf("-\n");
    }
    /* the first tensor of a type the engine cannot run, if any: described above, refused here */
    const cairn__gguf_tensor *bad = NULL;
    for (k = 0; k < nt && !bad; k++)
        if (cairn__ggml_block_size(cairn__gguf_tensor_at(g, k)->type) == 0)
            bad = cairn__gguf_tensor_at(g, k);
    if (bad)
        snprintf(err, sizeof err,
                 "tensor '%s' has type %s (%" PRIu32 "), which this engine does not support",
                 bad->name, cairn__ggml_type_name(bad->type), bad->type);
    cairn__gguf_close(g);
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cairn__log(CAIRN__LOG_ERROR, "model-info", "write", NULL, NULL,
                   "cannot write the output: %s", strerror(errno ? errno : EIO));
        return CAIRN__EX_IOERR;
    }
    if (bad) {
        cairn__log(CAIRN__LOG_ERROR, "model-info", "error", NULL, NULL, "%s: %s", path, err);
        return CAIRN__EX_UNAVAILABLE;
    }
    return CAIRN__EX_OK;
}
