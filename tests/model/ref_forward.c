/* tests/model/ref_forward.c - the float64 reference of the forward pass of every architecture
 * mkmodel writes (llama, qwen2, qwen3, phi3, gemma2, gemma3).
 *
 * Deliberately naive: every weight matrix is dequantized (the only code it shares with the
 * engine is cairn__dequant_row, tested on its own) into doubles, every position recomputes
 * attention over all earlier positions from scratch, and rotary angles are computed directly
 * from the formula. Everything the loader derives from metadata rather than from tensor shapes
 * (rotation pairing, rope base, rotated dimensions, RMS epsilon), and the rope frequency
 * factors of rope_freqs.weight, are taken from the mk_spec the file was written from, so a
 * loader that misreads a key or the factors fails the comparison. The same holds for what the
 * architectures add: the sliding window and which layers have it, the soft-caps, gemma3's local
 * rope base and the embedding scale come from the spec and the architecture's name, and phi3's
 * fused matrices and gemma's post-norms are read from the file's tensors by name and split here,
 * not taken from the loader's views. With cache_f16 it rounds
 * keys and values through IEEE halves (gpu/quant.h's conversions) as an f16 KV cache does.
 */
#include "tests/model/ref_forward.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gguf.h"
#include "gpu/quant.h"

/* W (rows, cols) dequantized to double */
static double *deq(const cairn__mat *W)
{
    double *d = malloc((size_t)W->rows * (size_t)W->cols * sizeof *d);
    float *row = malloc((size_t)W->cols * sizeof *row);
    if (!d || !row) {
        free(d);
        free(row);
        return NULL;
    }
    for (int64_t r = 0; r < W->rows; r++) {
        cairn__dequant_row(W->type, W->data + (size_t)r * W->row_bytes, row, (uint64_t)W->cols);
        for (int64_t c = 0; c < W->cols; c++)
            d[(size_t)r * (size_t)W->cols + (size_t)c] = row[c];
    }
    free(row);
    return d;
}

/* W (rows, cols) @ x (cols) -> y (rows) */
static void mv(const double *W, int64_t rows, int64_t cols, const double *x, double *y)
{
    for (int64_t r = 0; r < rows; r++) {
        double s = 0;
        for (int64_t c = 0; c < cols; c++)
            s += W[r * cols + c] * x[c];
        y[r] = s;
    }
}

static void rmsnorm(double *o, const double *x, const float *w, int n, double eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    const double sc = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        o[i] = x[i] * sc * w[i];
}

/* ff: rope_dim/2 divisors of the frequencies (rope_freqs.weight; all 1 without it) */
static void rope(double *v, int hd, int rope_dim, int neox, double pos, double base,
                 const double *ff)
{
    for (int i = 0; i < rope_dim / 2; i++) {
        const double th = pos * pow(base, -2.0 * i / rope_dim) / ff[i];
        const int a = neox ? i : 2 * i, b = neox ? i + rope_dim / 2 : 2 * i + 1;
        const double x0 = v[a], x1 = v[b];
        v[a] = x0 * cos(th) - x1 * sin(th);
        v[b] = x0 * sin(th) + x1 * cos(th);
    }
    (void)hd;
}

/* the file's tensor name as a matrix (ne = [cols, rows]); rows 0 if absent */
static cairn__mat file_mat(const cairn__model *m, const char *name)
{
    cairn__mat W = {0};
    const cairn__gguf_tensor *t = cairn__gguf_tensor_find(cairn__model_gguf(m), name);
    if (!t)
        return W;
    W.type = t->type;
    W.cols = (int64_t)t->ne[0];
    W.rows = (int64_t)(t->ne[1] ? t->ne[1] : 1);
    W.row_bytes =
        (size_t)(t->ne[0] / cairn__quant_block_elems(t->type) * cairn__quant_block_bytes(t->type));
    W.data = t->data;
    return W;
}

/* an F32 vector of the file (mkmodel writes every norm as F32), NULL if absent */
static const float *file_vec(const cairn__model *m, const char *name)
{
    const cairn__gguf_tensor *t = cairn__gguf_tensor_find(cairn__model_gguf(m), name);
    return t && t->type == CAIRN__GGML_F32 ? (const float *)t->data : NULL;
}

/* llama.cpp's sliding layers: all (llama, phi3), the even ones (gemma2), l % 6 < 5 (gemma3) */
static int sliding(const mk_spec *s, int l)
{
    if (strcmp(s->arch, "gemma2") == 0)
        return l % 2 == 0;
    if (strcmp(s->arch, "gemma3") == 0)
        return l % 6 < 5;
    return strcmp(s->arch, "qwen2") != 0 && strcmp(s->arch, "qwen3") != 0;
}

int ref_forward(const cairn__model *m, const mk_spec *s, const int32_t *tokens, int n,
                double *logits)
{
    return ref_forward_cache(m, s, tokens, n, 0, logits);
}

int ref_forward_cache(const cairn__model *m, const mk_spec *s, const int32_t *tokens, int n,
                      int cache_f16, double *logits)
{
    const int D = m->dim, H = m->n_heads, KV = m->n_kv_heads, hd = m->head_dim, F = m->ff_dim,
              V = m->n_vocab;
    const int qd = H * hd, kvd = KV * hd;
    const int gemma = strcmp(s->arch, "gemma2") == 0 || strcmp(s->arch, "gemma3") == 0,
              phi3 = strcmp(s->arch, "phi3") == 0;
    const int neox = strcmp(s->arch, "llama") != 0, rope_dim = mk_rope_dim(s);
    const double acap = mk_attn_softcap(s), fcap = mk_final_softcap(s);
    const double rope_base = mk_rope_base(s), eps = mk_rms_eps(s);
    double *x = calloc((size_t)n * D, sizeof *x),
           *xb = calloc((size_t)D > (size_t)qd ? (size_t)D : (size_t)qd, sizeof *xb);
    double *q = calloc((size_t)n * qd, sizeof *q), *k = calloc((size_t)n * kvd, sizeof *k),
           *v = calloc((size_t)n * kvd, sizeof *v);
    double *att = calloc((size_t)qd, sizeof *att),
           *tmp = calloc((size_t)(D > F ? D : F), sizeof *tmp);
    double *g = calloc((size_t)F, sizeof *g), *u = calloc((size_t)F, sizeof *u),
           *sc = calloc((size_t)n, sizeof *sc);
    double *ff = calloc((size_t)rope_dim / 2 + 1, sizeof *ff);
    double *E = deq(&m->tok_embd);
    int rc = -1;
    if (!x || !xb || !q || !k || !v || !att || !tmp || !g || !u || !sc || !ff || !E)
        goto out;
    for (int i = 0; i < rope_dim / 2; i++)
        ff[i] = mk_rope_factor(s, i);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < D; c++)
            x[(size_t)i * D + c] = E[(size_t)tokens[i] * D + c] * (gemma ? sqrt((double)D) : 1.0);
    for (int l = 0; l < m->n_layers; l++) {
        const cairn__layer *ly = &m->layers[l];
        char nm[96];
#define NAME(x) (snprintf(nm, sizeof nm, "blk.%d." x, l), nm)
        double *Wq, *Wk, *Wv, *Wg, *Wu;
        if (phi3) { /* the fused matrices, split by rows: q k v, and gate up */
            const cairn__mat qkv = file_mat(m, NAME("attn_qkv.weight")),
                             gu = file_mat(m, NAME("ffn_up.weight"));
            double *A = qkv.rows == qd + 2 * kvd ? deq(&qkv) : NULL,
                   *B = gu.rows == 2 * F ? deq(&gu) : NULL;
            Wq = A;
            Wk = A ? A + (size_t)qd * D : NULL;
            Wv = A ? A + (size_t)(qd + kvd) * D : NULL;
            Wg = B;
            Wu = B ? B + (size_t)F * D : NULL;
        } else {
            Wq = deq(&ly->wq), Wk = deq(&ly->wk), Wv = deq(&ly->wv);
            Wg = deq(&ly->w_gate), Wu = deq(&ly->w_up);
        }
        double *Wo = deq(&ly->wo), *Wd = deq(&ly->w_down);
        const float *post_a = file_vec(m, NAME("post_attention_norm.weight")),
                    *post_f = file_vec(m, NAME("post_ffw_norm.weight"));
#undef NAME
        const int win = sliding(s, l) ? mk_swa(s) : 0;
        /* gemma3's sliding layers: base 10000 and no scaling; the others the file's */
        const int local = strcmp(s->arch, "gemma3") == 0 && win;
        const double lbase = local ? 10000.0 : rope_base,
                     pscale = local || s->rope_scaling == 0 ? 1.0 : 1.0 / (double)s->rope_scaling;
        if (!Wq || !Wk || !Wv || !Wo || !Wg || !Wu || !Wd || (gemma && (!post_a || !post_f))) {
            if (phi3)
                free(Wq), free(Wg);
            else
                free(Wq), free(Wk), free(Wv), free(Wg), free(Wu);
            free(Wo), free(Wd);
            goto out;
        }
        for (int i = 0; i < n; i++) {
            rmsnorm(xb, x + (size_t)i * D, ly->attn_norm, D, eps);
            mv(Wq, qd, D, xb, q + (size_t)i * qd);
            mv(Wk, kvd, D, xb, k + (size_t)i * kvd);
            mv(Wv, kvd, D, xb, v + (size_t)i * kvd);
            for (int c = 0; c < qd; c++)
                q[(size_t)i * qd + c] += ly->bq ? ly->bq[c] : 0.0;
            for (int c = 0; c < kvd; c++) {
                k[(size_t)i * kvd + c] += ly->bk ? ly->bk[c] : 0.0;
                v[(size_t)i * kvd + c] += ly->bv ? ly->bv[c] : 0.0;
            }
            for (int h = 0; ly->q_norm && h < H; h++) { /* qwen3: each head normalized */
                double *qh = q + (size_t)i * qd + (size_t)h * hd;
                rmsnorm(qh, qh, ly->q_norm, hd, eps);
            }
            for (int h = 0; ly->k_norm && h < KV; h++) {
                double *kh = k + (size_t)i * kvd + (size_t)h * hd;
                rmsnorm(kh, kh, ly->k_norm, hd, eps);
            }
            for (int h = 0; h < H; h++)
                rope(q + (size_t)i * qd + (size_t)h * hd, hd, rope_dim, neox, i * pscale, lbase,
                     ff);
            for (int h = 0; h < KV; h++)
                rope(k + (size_t)i * kvd + (size_t)h * hd, hd, rope_dim, neox, i * pscale, lbase,
                     ff);
            for (int c = 0; cache_f16 && c < kvd; c++) { /* what a half cache keeps */
                double *kc = k + (size_t)i * kvd + c, *vc = v + (size_t)i * kvd + c;
                *kc = cairn__f16_to_f32(cairn__f32_to_f16((float)*kc));
                *vc = cairn__f16_to_f32(cairn__f32_to_f16((float)*vc));
            }
        }
        for (int i = 0; i < n; i++) {
            for (int h = 0; h < H; h++) {
                const int kh = h / (H / KV);
                const double *qi = q + (size_t)i * qd + (size_t)h * hd;
                double mx = -INFINITY, sum = 0;
                const int t0 = win && i >= win ? i - win + 1 : 0; /* the last win positions */
                for (int t = t0; t <= i; t++) {
                    double s = 0;
                    for (int c = 0; c < hd; c++)
                        s += qi[c] * k[(size_t)t * kvd + (size_t)kh * hd + c];
                    sc[t] = s / sqrt((double)hd);
                    if (acap > 0)
                        sc[t] = acap * tanh(sc[t] / acap);
                    mx = sc[t] > mx ? sc[t] : mx;
                }
                for (int t = t0; t <= i; t++)
                    sum += (sc[t] = exp(sc[t] - mx));
                for (int c = 0; c < hd; c++) {
                    double o = 0;
                    for (int t = t0; t <= i; t++)
                        o += sc[t] / sum * v[(size_t)t * kvd + (size_t)kh * hd + c];
                    att[(size_t)h * hd + c] = o;
                }
            }
            mv(Wo, D, qd, att, tmp);
            if (gemma)
                rmsnorm(tmp, tmp, post_a, D, eps);
            for (int c = 0; c < D; c++)
                x[(size_t)i * D + c] += tmp[c];
        }
        for (int i = 0; i < n; i++) {
            rmsnorm(xb, x + (size_t)i * D, ly->ffn_norm, D, eps);
            mv(Wg, F, D, xb, g);
            mv(Wu, F, D, xb, u);
            for (int c = 0; c < F; c++)
                g[c] = (gemma ? 0.5 * g[c] *
                                    (1.0 + tanh(sqrt(2.0 / M_PI) *
                                                (g[c] + 0.044715 * g[c] * g[c] * g[c])))
                              : g[c] / (1.0 + exp(-g[c]))) *
                       u[c];
            mv(Wd, D, F, g, tmp);
            if (gemma)
                rmsnorm(tmp, tmp, post_f, D, eps);
            for (int c = 0; c < D; c++)
                x[(size_t)i * D + c] += tmp[c];
        }
        if (phi3)
            free(Wq), free(Wg);
        else
            free(Wq), free(Wk), free(Wv), free(Wg), free(Wu);
        free(Wo), free(Wd);
    }
    double *Wout = deq(&m->output);
    if (!Wout)
        goto out;
    for (int i = 0; i < n; i++) {
        rmsnorm(xb, x + (size_t)i * D, m->output_norm, D, eps);
        mv(Wout, V, D, xb, logits + (size_t)i * V);
        for (int c = 0; fcap > 0 && c < V; c++)
            logits[(size_t)i * V + c] = fcap * tanh(logits[(size_t)i * V + c] / fcap);
    }
    free(Wout);
    rc = 0;
out:
    free(x), free(xb), free(q), free(k), free(v), free(att), free(tmp), free(g), free(u), free(sc),
        free(ff), free(E);
    return rc;
}
