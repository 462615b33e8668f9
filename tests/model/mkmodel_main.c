/* tests/model/mkmodel_main.c - `cairn-mkmodel`: writes a small random-weight GGUF model.
 *
 * For the demo and for trying the pipeline without downloading a model. Its weights are random,
 * so the text it generates is noise; point the configuration's "model" at a real GGUF file
 * (a SmolLM2 or Qwen2.5 instruct model, say) for real text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gguf.h"
#include "tests/model/mkmodel.h"

static int type_of(const char *s, uint32_t *t)
{
    static const struct {
        const char *name;
        uint32_t type;
    } types[] = {
        {"f32", CAIRN__GGML_F32},   {"f16", CAIRN__GGML_F16},       {"bf16", CAIRN__GGML_BF16},
        {"q8_0", CAIRN__GGML_Q8_0}, {"q4_0", CAIRN__GGML_Q4_0},     {"q4_1", CAIRN__GGML_Q4_1},
        {"q5_0", CAIRN__GGML_Q5_0}, {"q5_1", CAIRN__GGML_Q5_1},     {"q2_k", CAIRN__GGML_Q2_K},
        {"q3_k", CAIRN__GGML_Q3_K}, {"q4_k", CAIRN__GGML_Q4_K},     {"q5_k", CAIRN__GGML_Q5_K},
        {"q6_k", CAIRN__GGML_Q6_K}, {"iq4_nl", CAIRN__GGML_IQ4_NL}, {"iq4_xs", CAIRN__GGML_IQ4_XS}};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (!strcmp(s, types[i].name)) {
            *t = types[i].type;
            return 0;
        }
    return -1;
}

int main(int argc, char **argv)
{
    mk_spec s;
    mk_spec_default(&s);
    s.tokenizer = 1;
    s.vocab = 512;
    s.dim = 128;
    s.ff = 256;
    s.ctx = 1024;
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = 1;
        if (!strcmp(a, "--dim") && v)
            s.dim = atoi(v);
        else if (!strcmp(a, "--layers") && v)
            s.n_layers = atoi(v);
        else if (!strcmp(a, "--heads") && v)
            s.n_heads = atoi(v);
        else if (!strcmp(a, "--kv-heads") && v)
            s.n_kv_heads = atoi(v);
        else if (!strcmp(a, "--ff") && v)
            s.ff = atoi(v);
        else if (!strcmp(a, "--vocab") && v)
            s.vocab = atoi(v);
        else if (!strcmp(a, "--ctx") && v)
            s.ctx = atoi(v);
        else if (!strcmp(a, "--seed") && v)
            s.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--rope-base") && v)
            s.rope_base = strtof(v, NULL);
        else if (!strcmp(a, "--rope-dim") && v)
            s.rope_dim = atoi(v);
        else if (!strcmp(a, "--rms-eps") && v)
            s.rms_eps = strtof(v, NULL);
        else if (!strcmp(a, "--embd-scale") && v)
            s.embd_scale = strtof(v, NULL);
        else if (!strcmp(a, "--swa") && v)
            s.swa = atoi(v);
        else if (!strcmp(a, "--rope-freqs")) {
            s.rope_freqs = 1; /* a flag: takes no value */
            used = 0;
        } else if (!strcmp(a, "--arch") && v)
            s.arch = v;
        else if ((!strcmp(a, "--type") || !strcmp(a, "--fallback")) && v) {
            if (type_of(v, !strcmp(a, "--type") ? &s.wtype : &s.wtype_fallback)) {
                fprintf(stderr, "cairn-mkmodel: unknown type '%s'\n", v);
                return 64;
            }
        } else {
            used = 0;
            int help = !strcmp(a, "--help") || !strcmp(a, "-h");
            if (help || a[0] == '-' || out) {
                fprintf(help ? stdout : stderr,
                        "usage: cairn-mkmodel OUT.gguf [--dim N] [--layers N] [--heads N] "
                        "[--kv-heads N] [--ff N] [--vocab N] [--ctx N] [--seed S] "
                        "[--arch llama|qwen2|qwen3|phi3|gemma2|gemma3] [--type T] [--fallback T] "
                        "[--rope-base F] [--rope-dim N] [--rms-eps F] [--rope-freqs] [--swa N] "
                        "[--embd-scale F]\n"
                        "Writes a random-weight model (for tests and demos: its text is noise).\n"
                        "T: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl "
                        "iq4_xs. "
                        "--fallback: "
                        "the type "
                        "of matrices whose rows --type's blocks do not divide (llama-quantize's "
                        "Q4_K_M: --type q4_k --fallback q5_0).\n"
                        "--rope-freqs adds a Llama 3 style rope_freqs.weight (llama only): "
                        "random frequency divisors in [1, 8].\n"
                        "--swa N: the sliding window (default 4096 for phi3 and gemma, none "
                        "otherwise; a llama file with one is Mistral's). --embd-scale F: token "
                        "embeddings uniform in +-F (default 1; gemma multiplies them by "
                        "sqrt(dim), so they drown its layers' outputs unless F is small).\n");
                return help ? 0 : 64;
            }
            out = a;
        }
        i += used;
    }
    if (!out) {
        fprintf(stderr, "cairn-mkmodel: no output file (see --help)\n");
        return 64;
    }
    unsigned char *buf;
    size_t len;
    if (mk_model(&s, &buf, &len) != 0) {
        fprintf(stderr, "cairn-mkmodel: cannot build a model of that shape\n");
        return 65;
    }
    FILE *f = fopen(out, "wb");
    int ok = f && fwrite(buf, 1, len, f) == len;
    if (f && fclose(f) != 0)
        ok = 0;
    free(buf);
    if (!ok) {
        perror(out);
        return 74;
    }
    printf("%s: random-weight %s model, dim %d, %d layers, vocab %d%s, %zu bytes\n", out, s.arch,
           s.dim, s.n_layers, s.vocab, s.rope_freqs ? ", rope_freqs" : "", len);
    return 0;
}
