/* tests/tokenizer/test_cmd_tokenize.c - `cairn tokenize` and `cairn model-info`, called directly
 * with argv arrays (not through the cairn binary), their stdout and stderr captured in files.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cairn.h"
#include "gpu/gguf.h"
#include "tap.h"
#include "tests/gguf_writer.h"

int cairn__cmd_tokenize(int argc, char **argv);
int cairn__cmd_model_info(int argc, char **argv);

static char out_buf[65536], err_buf[65536];

static void slurp_fp(FILE *f, char *buf, size_t cap)
{
    size_t n;
    rewind(f);
    n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
}

/* Runs fn(argv) with stdout/stderr redirected into out_buf/err_buf; returns its exit code. */
static int run(int (*fn)(int, char **), const char *const *args)
{
    char *argv[32];
    int argc = 0, so, se, rc;
    FILE *fo = tmpfile(), *fe = tmpfile();
    while (args[argc]) {
        argv[argc] = (char *)args[argc];
        argc++;
    }
    argv[argc] = NULL;
    fflush(stdout);
    fflush(stderr);
    so = dup(1);
    se = dup(2);
    dup2(fileno(fo), 1);
    dup2(fileno(fe), 2);
    rc = fn(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    slurp_fp(fo, out_buf, sizeof out_buf);
    slurp_fp(fe, err_buf, sizeof err_buf);
    fclose(fo);
    fclose(fe);
    return rc;
}

/* GPT-2 bytes_to_unicode, to spell the 256 byte tokens */
static void byte_token(int b, char *out)
{
    int i, n = 0;
    unsigned cp;
    for (i = 0; i < b; i++)
        if (!((i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE))
            n++;
    cp = ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) ? (unsigned)b
                                                                           : 256u + (unsigned)n;
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

/* A tiny gpt2 model file: ids 0..255 the bytes, 256 "hi", 257 <|endoftext|> (BOS, added). */
static int write_model(const char *path, int with_tokenizer)
{
    char *tok[258];
    char bytes[256][4];
    int32_t type[258];
    const char *merges[] = {"h i"};
    float emb[64 * 10], w4[64 * 4];
    uint64_t ne_e[2] = {64, 10}, ne_w[2] = {64, 4};
    int i, rc;
    cairn__gguf_writer *w = gw_new(3, 32);
    for (i = 0; i < 256; i++) {
        byte_token(i, bytes[i]);
        tok[i] = bytes[i];
        type[i] = 1;
    }
    tok[256] = "hi";
    type[256] = 1;
    tok[257] = "<|endoftext|>";
    type[257] = 3;
    for (i = 0; i < 640; i++)
        emb[i] = (float)i / 640.0f;
    for (i = 0; i < 256; i++)
        w4[i] = 0.5f;
    gw_kv_str(w, "general.architecture", "llama");
    gw_kv_str(w, "general.name", "tiny test");
    gw_kv_u32(w, "llama.context_length", 2048);
    gw_kv_u32(w, "llama.embedding_length", 64);
    gw_kv_u32(w, "llama.block_count", 2);
    gw_kv_u32(w, "llama.attention.head_count", 4);
    gw_kv_u32(w, "llama.attention.head_count_kv", 2);
    gw_kv_u32(w, "llama.feed_forward_length", 128);
    if (with_tokenizer) {
        gw_kv_str(w, "tokenizer.ggml.model", "gpt2");
        gw_kv_str(w, "tokenizer.ggml.pre", "gpt-2");
        gw_kv_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, 258);
        gw_kv_arr_i32(w, "tokenizer.ggml.token_type", type, 258);
        gw_kv_arr_str(w, "tokenizer.ggml.merges", merges, 1);
        gw_kv_u32(w, "tokenizer.ggml.bos_token_id", 257);
        gw_kv_u32(w, "tokenizer.ggml.eos_token_id", 257);
        gw_kv_bool(w, "tokenizer.ggml.add_bos_token", 1);
    }
    gw_tensor_f32(w, "token_embd.weight", CAIRN__GGML_F32, 2, ne_e, emb);
    gw_tensor_f32(w, "blk.0.attn_q.weight", CAIRN__GGML_F16, 2, ne_w, w4);
    rc = gw_write(w, path);
    gw_free(w);
    return rc;
}

static void write_file(const char *path, const void *s, size_t n)
{
    FILE *f = fopen(path, "wb");
    fwrite(s, 1, n, f);
    fclose(f);
}

/* diag() for text of several lines: every line gets its '#' */
static void diag_lines(const char *s)
{
    while (*s) {
        const char *nl = strchr(s, '\n');
        int n = nl ? (int)(nl - s) : (int)strlen(s);
        diag("%.*s", n, s);
        s += n + (nl != NULL);
    }
}

int main(void)
{
    char dir[] = "/tmp/cairn-tok-cmd-XXXXXX";
    char model[256], bare[256], junk[256], text[256], missing[256];
    if (!mkdtemp(dir))
        tap_skip_all("cannot make a temporary directory");
    snprintf(model, sizeof model, "%s/model.gguf", dir);
    snprintf(bare, sizeof bare, "%s/bare.gguf", dir);
    snprintf(junk, sizeof junk, "%s/junk.gguf", dir);
    snprintf(text, sizeof text, "%s/input.txt", dir);
    snprintf(missing, sizeof missing, "%s/nope.gguf", dir);
    ok(write_model(model, 1) == 0 && write_model(bare, 0) == 0, "test models written");
    {
        /* a v3 header that announces far more key/values than the file holds */
        static const unsigned char bad[] = {'G', 'G', 'U', 'F',  3,    0, 0, 0, 0, 0, 0, 0,   0,
                                            0,   0,   0,   0xff, 0xff, 0, 0, 0, 0, 0, 0, 'x', 'y'};
        write_file(junk, bad, sizeof bad);
    }
    write_file(text, "hi\nhi\n", 6);

    {
        const char *a[] = {"tokenize", "--model", model, "--text", "hi hi", NULL};
        ok(run(cairn__cmd_tokenize, a) == 0 && strcmp(out_buf, "256 32 256\n") == 0,
           "tokenize --text");
    }
    {
        const char *a[] = {"tokenize", "-m", model, "--text=hi hi", "--add-special", NULL};
        ok(run(cairn__cmd_tokenize, a) == 0 && strcmp(out_buf, "257 256 32 256\n") == 0,
           "--add-special adds BOS");
    }
    {
        const char *a[] = {"tokenize",        "--model",         model, "--text",
                           "hi<|endoftext|>", "--parse-special", NULL};
        ok(run(cairn__cmd_tokenize, a) == 0 && strcmp(out_buf, "256 257\n") == 0,
           "--parse-special");
    }
    {
        const char *a[] = {"tokenize", "--model", model, "--text", "hi<|endoftext|>", NULL};
        ok(run(cairn__cmd_tokenize, a) == 0 && !strstr(out_buf, "257"),
           "special text stays text by default");
    }
    {
        const char *a[] = {"tokenize", "--model", model, "--text", "", NULL};
        ok(run(cairn__cmd_tokenize, a) == 0 && strcmp(out_buf, "\n") == 0,
           "empty text: an empty line");
    }
    {
        const char *a[] = {"tokenize", "--model", model, "--file", text, NULL};
        ok(run(cairn__cmd_tokenize, a) == 0 && strcmp(out_buf, "256 10 256 10\n") == 0,
           "--file: one input");
    }
    {
        const char *a[] = {"tokenize", "--model", model, "--file", text, "--lines", NULL};
        ok(run(cairn__cmd_tokenize, a) == 0 && strcmp(out_buf, "256\n256\n") == 0,
           "--lines: a line per line");
    }
    {
        /* CRLF: the line end is "\r\n", not part of the line; a lone '\r' is text (13) */
        write_file(text, "hi\r\nhi\rhi\r\n\r\nhi\r", 16);
        const char *a[] = {"tokenize", "--model", model, "--file", text, "--lines", NULL};
        int rc = run(cairn__cmd_tokenize, a);
        ok(rc == 0 && strcmp(out_buf, "256\n256 13 256\n\n256 13\n") == 0,
           "--lines: CRLF line ends stripped, other '\\r' kept (%d)", rc);
        if (strcmp(out_buf, "256\n256 13 256\n\n256 13\n") != 0)
            diag_lines(out_buf);
        write_file(text, "hi\nhi\n", 6);
    }
    {
        /* one value per option, --text excepted */
        static const char *const twice[][8] = {
            {"tokenize", "--model", "M", "-m", "M", "--text", "hi", NULL},
            {"tokenize", "--model=M", "--model", "M", "--text", "hi", NULL, NULL},
            {"tokenize", "-m", "M", "--file", "T", "-f", "T", NULL},
        };
        static const char *const name[] = {"--model", "--model", "--file"};
        for (size_t i = 0; i < 3; i++) {
            const char *a[8];
            char arg[300];
            for (size_t j = 0; j < 8; j++) {
                a[j] = twice[i][j];
                if (a[j] && strcmp(a[j], "M") == 0)
                    a[j] = model;
                else if (a[j] && strcmp(a[j], "T") == 0)
                    a[j] = text;
                else if (a[j] && strcmp(a[j], "--model=M") == 0) {
                    snprintf(arg, sizeof arg, "--model=%s", model);
                    a[j] = arg;
                }
            }
            char want[64];
            snprintf(want, sizeof want, "%s given twice", name[i]);
            int rc = run(cairn__cmd_tokenize, a);
            ok(rc == 64 && strstr(err_buf, want), "%s twice: 64 naming it (%d)", name[i], rc);
        }
    }
    {
        const char *a[] = {"tokenize", "--model", model, "--text", "hi", "-p", "hi hi", NULL};
        ok(run(cairn__cmd_tokenize, a) == 0 && strcmp(out_buf, "256\n256 32 256\n") == 0,
           "repeated --text: one line per text, in order");
    }
    {
        /* -t is generate's --threads; here it is unknown rather than a second meaning */
        const char *a[] = {"tokenize", "--model", model, "-t", "hi", NULL};
        ok(run(cairn__cmd_tokenize, a) == 64 && strstr(err_buf, "unknown argument '-t'"),
           "-t is not a short --text");
    }
    {
        /* the same file with an unknown pre-tokenizer name: unsupported (69), as an unknown
         * tokenizer model or architecture is in `cairn generate` */
        char pre[256];
        FILE *f = fopen(model, "rb");
        static unsigned char img[1 << 16];
        size_t n = f ? fread(img, 1, sizeof img, f) : 0;
        if (f)
            fclose(f);
        unsigned char *at = memmem(img, n, "gpt-2", 5);
        if (at)
            memcpy(at, "gpt-9", 5);
        snprintf(pre, sizeof pre, "%s/pre.gguf", dir);
        write_file(pre, img, n);
        const char *a[] = {"tokenize", "--model", pre, "--text", "hi", NULL};
        int rc = run(cairn__cmd_tokenize, a);
        ok(at && rc == 69 && strstr(err_buf, "tokenizer.ggml.pre") && strstr(err_buf, pre),
           "unsupported pre-tokenizer: 69 naming key and file (%d)", rc);
        unlink(pre);
    }
    {
        const char *a[] = {"tokenize", "--model", "/dev/null", "--text", "hi", NULL};
        int rc = run(cairn__cmd_tokenize, a);
        ok(rc == 65 && strstr(err_buf, "/dev/null"), "a device as the model: 65 (%d)", rc);
    }
    {
        const char *a[] = {"tokenize", "--model", dir, "--text", "hi", NULL};
        int rc = run(cairn__cmd_tokenize, a);
        ok(rc == 66 && strstr(err_buf, "directory"), "a directory as the model: 66 (%d)", rc);
    }
    {
        const char *a[] = {"model-info", "--", model, NULL};
        ok(run(cairn__cmd_model_info, a) == 0, "model-info -- FILE");
    }
    {
        const char *a[] = {"tokenize", "--help", NULL};
        ok(run(cairn__cmd_tokenize, a) == 0 && strstr(out_buf, "usage: cairn tokenize"), "--help");
    }
    {
        const char *a[] = {"tokenize", "--text", "x", NULL};
        ok(run(cairn__cmd_tokenize, a) == 64 && strstr(err_buf, "--model"), "no --model: 64");
    }
    {
        const char *a[] = {"tokenize", "--model", model, NULL};
        ok(run(cairn__cmd_tokenize, a) == 64, "no input: 64");
    }
    {
        const char *a[] = {"tokenize", "--model", model, "--text", "x", "--file", text, NULL};
        ok(run(cairn__cmd_tokenize, a) == 64, "both --text and --file: 64");
    }
    {
        const char *a[] = {"tokenize", "--model", model, "--text", "x", "--lines", NULL};
        ok(run(cairn__cmd_tokenize, a) == 64, "--lines without --file: 64");
    }
    {
        const char *a[] = {"tokenize", "--model", model, "--bogus", NULL};
        ok(run(cairn__cmd_tokenize, a) == 64 && strstr(err_buf, "--bogus"), "unknown option: 64");
    }
    {
        const char *a[] = {"tokenize", "--model", model, "--text", NULL};
        ok(run(cairn__cmd_tokenize, a) == 64, "option without its value: 64");
    }
    {
        const char *a[] = {"tokenize", "--model", missing, "--text", "x", NULL};
        ok(run(cairn__cmd_tokenize, a) == 66 && strstr(err_buf, "nope.gguf"), "missing model: 66");
    }
    {
        const char *a[] = {"tokenize", "--model", model, "--file", missing, NULL};
        ok(run(cairn__cmd_tokenize, a) == 66, "missing input file: 66");
    }
    {
        const char *a[] = {"tokenize", "--model", junk, "--text", "x", NULL};
        ok(run(cairn__cmd_tokenize, a) == 65 && strlen(err_buf) > 20, "malformed model: 65");
        diag_lines(err_buf);
    }
    {
        const char *a[] = {"tokenize", "--model", bare, "--text", "x", NULL};
        ok(run(cairn__cmd_tokenize, a) == 65 && strstr(err_buf, "tokenizer.ggml.model"),
           "model without a tokenizer: 65 naming the key");
    }

    {
        const char *a[] = {"model-info", model, NULL};
        int rc = run(cairn__cmd_model_info, a);
        ok(rc == 0, "model-info exits 0");
        ok(strstr(out_buf, "architecture:   llama\n") && strstr(out_buf, "parameters:     896\n") &&
               strstr(out_buf, "context length: 2048\n") &&
               strstr(out_buf, "kv heads:       2\n") && strstr(out_buf, "layers:         2\n") &&
               strstr(out_buf, "feed-forward:   128\n") &&
               strstr(out_buf, "tokenizer:      gpt2 (pre gpt-2)\n") &&
               strstr(out_buf, "vocab size:     258\n") && strstr(out_buf, "F32 x1") &&
               strstr(out_buf, "F16 x1") && strstr(out_buf, "name:           tiny test"),
           "model-info text fields");
        /* 2 layers x 2 kv heads x head size 64/4 x (k, v) x 4 bytes; context 2048 */
        ok(strstr(out_buf, "kv cache:       512 bytes a token in f32, 256 bytes in f16; 1.00 MiB / "
                           "512.00 KiB at the default --ctx 2048\n") != NULL,
           "model-info: the KV cache's size");
        diag_lines(out_buf);
    }
    {
        const char *a[] = {"model-info", "--json", model, NULL};
        json_error_t je;
        json_t *o;
        int rc = run(cairn__cmd_model_info, a);
        o = json_loads(out_buf, 0, &je);
        ok(rc == 0 && o, "model-info --json parses");
        ok(o && json_integer_value(json_object_get(o, "parameters")) == 896 &&
               strcmp(json_string_value(json_object_get(o, "architecture")), "llama") == 0 &&
               json_integer_value(json_object_get(o, "head_count")) == 4 &&
               json_integer_value(json_object_get(o, "head_count_kv")) == 2 &&
               json_integer_value(json_object_get(o, "embedding_length")) == 64 &&
               json_integer_value(json_object_get(
                   json_object_get(json_object_get(o, "tensor_types"), "F16"), "count")) == 1 &&
               json_integer_value(json_object_get(json_object_get(o, "tokenizer"), "vocab_size")) ==
                   258 &&
               json_integer_value(json_object_get(o, "file_size")) > 0 &&
               json_integer_value(
                   json_object_get(json_object_get(o, "kv_cache"), "bytes_per_token_f32")) == 512 &&
               json_integer_value(
                   json_object_get(json_object_get(o, "kv_cache"), "bytes_per_token_f16")) == 256 &&
               json_integer_value(json_object_get(json_object_get(o, "kv_cache"), "default_ctx")) ==
                   2048,
           "model-info --json fields");
        json_decref(o);
    }
    {
        const char *a[] = {"model-info", "--json", bare, NULL};
        json_t *o = NULL;
        ok(run(cairn__cmd_model_info, a) == 0 && (o = json_loads(out_buf, 0, NULL)) &&
               json_is_null(json_object_get(json_object_get(o, "tokenizer"), "model")),
           "model-info without a tokenizer: null fields");
        json_decref(o);
    }
    {
        const char *a[] = {"model-info", NULL};
        ok(run(cairn__cmd_model_info, a) == 64, "model-info without a file: 64");
    }
    {
        const char *a[] = {"model-info", missing, NULL};
        ok(run(cairn__cmd_model_info, a) == 66, "model-info on a missing file: 66");
    }
    {
        const char *a[] = {"model-info", junk, NULL};
        ok(run(cairn__cmd_model_info, a) == 65 && strlen(err_buf) > 20,
           "model-info on a malformed file: 65");
    }
    {
        const char *a[] = {"model-info", "--frob", model, NULL};
        ok(run(cairn__cmd_model_info, a) == 64, "model-info unknown option: 64");
    }
    {
        const char *a[] = {"model-info", "--help", NULL};
        ok(run(cairn__cmd_model_info, a) == 0 && strstr(out_buf, "Exit status") &&
               strstr(out_buf, "66 model file missing") && strstr(out_buf, "74"),
           "model-info --help lists the exit status");
    }
    {
        const char *a[] = {"tokenize", "--help", NULL};
        ok(run(cairn__cmd_tokenize, a) == 0 && strstr(out_buf, "\\r\\n"),
           "tokenize --help says --lines strips CRLF");
    }

    unlink(model);
    unlink(bare);
    unlink(junk);
    unlink(text);
    rmdir(dir);
    return tap_done();
}
