/* test_llama_peer.c - the files cairn-mkmodel writes, in every quantized type, generate the same
 * greedy text in cairn and in llama.cpp's llama-cli (the peer build in CAIRN_PEER_LLAMA_CPP; the
 * test is skipped without it).
 *
 * test_ggml_peer.c checks the block formats against ggml's functions; this runs the whole path
 * on both sides: a random-weight llama model of each type (the same seed, so the same weights
 * before quantization), 24 greedy tokens from one prompt in `cairn generate` and `llama-cli
 * --temp 0`, and the two texts compared. They need not agree to the end: llama.cpp rounds the
 * K-quants' activation to int8 per 256 values (Q8_K) where cairn rounds per 32, so a near tie
 * between two tokens can fall either way and the texts part there. What must hold is that they
 * start the same (a wrong layout or scale changes the first token already), so each type is
 * checked for a common start of MIN_COMMON bytes (at least two of this vocabulary's tokens), and
 * the length of the common start is reported, with the F32 model's text beside it. The qwen2,
 * qwen3, phi3, gemma2 and gemma3 architectures are checked the same way, in F32 and Q8_0 (with
 * mkmodel's default window of 4096, past these contexts: the window itself is judged by the
 * float64 reference of tests/model, as Mistral's is, which llama.cpp does not apply to llama
 * files).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "testutil.h"

#define MIN_COMMON 8

static size_t common_start(const char *a, const char *b)
{
    size_t n = 0;
    while (a[n] && a[n] == b[n])
        n++;
    return n;
}

/* Writes a model with cairn-mkmodel (--arch arch --type type, the same seed and shape always:
 * 2 layers 256 wide, but 26 of 128 for gemma2, whose query scale llama.cpp picks by the layer
 * count of a released model and aborts on any other; gemma's embeddings small, or, scaled by
 * sqrt(dim), they drown the layers and both sides repeat the last prompt token),
 * and generates 24 greedy tokens from it with `cairn generate` (c) and `llama-cli` (l); the
 * trailing newlines llama-cli adds are cut. w: mkmodel's result. */
static void run_both(const char *mk, const char *bin, const char *cli, const char *const *env,
                     const char *model, const char *arch, const char *type, tu_result *w,
                     tu_result *c, tu_result *l)
{
    const int g2 = strcmp(arch, "gemma2") == 0, gemma = strncmp(arch, "gemma", 5) == 0;
    tu_runl(w, 60000, mk, model, "--arch", arch, "--type", type, "--seed", "7", "--dim",
            g2 ? "128" : "256", "--ff", g2 ? "256" : "512", "--layers", g2 ? "26" : "2",
            "--embd-scale", gemma ? "0.1" : "1", (char *)NULL);
    tu_runl(c, 60000, bin, "generate", "-m", model, "-p", "a b a b", "--temperature", "0", "-n",
            "24", "-t", "2", (char *)NULL);
    const char *argv[] = {
        cli,      "-m", model,     "-p", "a b a b", "-n",          "24",
        "--temp", "0",  "-no-cnv", "-t", "2",       "--no-warmup", "--no-display-prompt",
        NULL};
    tu_run(l, argv, env, NULL, 0, 120000);
    while (l->out_len && l->out[l->out_len - 1] == '\n')
        l->out[--l->out_len] = '\0';
}

int main(void)
{
    const char *peer = getenv("CAIRN_PEER_LLAMA_CPP"), *bin = getenv("CAIRN_BIN"),
               *mk = getenv("CAIRN_MKMODEL");
    char *cli = peer ? tu_fmt("%s/llama-cli", peer) : NULL;
    FILE *probe = cli ? fopen(cli, "rb") : NULL;
    if (!probe || !bin || !mk)
        tap_skip_all("no llama.cpp peer (llama-cli in CAIRN_PEER_LLAMA_CPP), or no CAIRN_BIN / "
                     "CAIRN_MKMODEL");
    fclose(probe);
    char *dir = tu_mkdtemp("llama-peer");
    char *ld = tu_fmt("LD_LIBRARY_PATH=%s", peer);
    const char *env[] = {ld, NULL};
    static const char *const types[] = {"f32",  "q8_0", "q4_0", "q4_1", "q5_0",   "q5_1",  "q2_k",
                                        "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs"};
    char *f32_text = NULL;
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        char *model = tu_fmt("%s/%s.gguf", dir, types[t]);
        tu_result w, c, l;
        run_both(mk, bin, cli, env, model, "llama", types[t], &w, &c, &l);
        const size_t n = common_start(c.out, l.out);
        if (t == 0)
            f32_text = strdup(c.out);
        ok(w.code == 0 && c.code == 0 && l.code == 0 && n >= MIN_COMMON,
           "%s: cairn and llama-cli start alike (%zu of %zu / %zu bytes%s; %zu in common with "
           "the F32 model's text) (exits %d %d %d)",
           types[t], n, strlen(c.out), strlen(l.out),
           strcmp(c.out, l.out) == 0 ? ", all 24 tokens" : "", common_start(c.out, f32_text),
           w.code, c.code, l.code);
        if (c.code != 0 || l.code != 0)
            diag("cairn: %.300s | llama-cli: %.300s", c.err, l.err);
        tu_result_free(&w), tu_result_free(&c), tu_result_free(&l);
        free(model);
    }
    /* the other architectures, in F32 and Q8_0: a wrong rope layout, bias or head norm changes
     * the first token already */
    static const char *const archs[][2] = {{"qwen2", "f32"},  {"qwen2", "q8_0"},  {"qwen3", "f32"},
                                           {"qwen3", "q8_0"}, {"phi3", "f32"},    {"phi3", "q8_0"},
                                           {"gemma2", "f32"}, {"gemma2", "q8_0"}, {"gemma3", "f32"},
                                           {"gemma3", "q8_0"}};
    for (size_t a = 0; a < sizeof archs / sizeof *archs; a++) {
        char *model = tu_fmt("%s/%s-%s.gguf", dir, archs[a][0], archs[a][1]);
        tu_result w, c, l;
        run_both(mk, bin, cli, env, model, archs[a][0], archs[a][1], &w, &c, &l);
        const size_t n = common_start(c.out, l.out);
        if (l.code != 0 && tu_contains(l.err, "unknown model architecture")) {
            /* qwen3 and gemma3 came to llama.cpp after this peer's build (b4748): the float64
             * reference of tests/model is then the only judge */
            skip("%s: this llama.cpp build does not know the architecture", archs[a][0]);
            tu_result_free(&w), tu_result_free(&c), tu_result_free(&l);
            free(model);
            continue;
        }
        ok(w.code == 0 && c.code == 0 && l.code == 0 && n >= MIN_COMMON,
           "%s %s: cairn and llama-cli start alike (%zu of %zu / %zu bytes%s) (exits %d %d %d)",
           archs[a][0], archs[a][1], n, strlen(c.out), strlen(l.out),
           strcmp(c.out, l.out) == 0 ? ", all 24 tokens" : "", w.code, c.code, l.code);
        if (w.code != 0 || c.code != 0 || l.code != 0)
            diag("mkmodel: %.200s | cairn: %.300s | llama-cli: %.300s", w.err, c.err, l.err);
        tu_result_free(&w), tu_result_free(&c), tu_result_free(&l);
        free(model);
    }
    free(f32_text);
    tu_rm_rf(dir);
    free(dir), free(ld), free(cli);
    return tap_done();
}
