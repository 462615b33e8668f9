// tests/gpu/emu/test_attention_emu.cpp - the attention kernels of gpu/cuda/kernels_attention.cuh
// run lane by lane on the CPU (the emulator of emu.hpp; suite 'unit': no GPU needed).
//
// attention_split_kernel (one token, the keys split over blocks, the last block of a head merging
// the splits) and attention_tile_kernel (a prompt chunk, tiles of tokens of one head sharing each
// chunk of keys in shared memory, causal within and across tiles) against a
// float64 softmax(q . K * scale) @ V over the same keys and values (the cache read as the kernel
// reads it: floats, or halves widened exactly), for element types f32, f16 and bf16, caches of
// floats and of halves, grouped-query heads (1:1 to 7:1), heads of 32 to 256 and contexts from
// one key to several hundred (a split with no keys, splits of one key, many groups a warp), and
// sliding windows (keys from the window's first only) and soft-capped scores (gemma2's).
// Also: the same bits whatever order the blocks run in (so whichever block comes last merges
// the same way), each head's counter back at zero for the next step, the range flag set when an
// output does not fit f16, and no shared-memory race, out-of-bounds or uninitialised read.
// `test_attention_emu` runs the short form (suite 'unit'): every shape, kernel, element type and
// cache type, over fewer positions and prompt chunks; `test_attention_emu long` every position at
// every shape (suite 'slow' runs it as `slow`, which skips unless CAIRN_SLOW is set).
#include "kernels_emu.cuh"

#include <algorithm>
#include <random>
#include <vector>

#include "emu_test.hpp"
#include "tests/tap.h"

long emu_report_count();

static std::mt19937_64 R(77);
static float urand(float a, float b) { return std::uniform_real_distribution<float>(a, b)(R); }

template <class C> static const char *cname();
template <> const char *cname<float>() { return "f32 cache"; }
template <> const char *cname<__half>() { return "f16 cache"; }

static float widen(float v) { return v; }
static float widen(__half v) { return __half2float(v); }

// one layer's cache (n_ctx, n_kv * hd) and the q rows of n tokens (ld floats apart)
template <class C> struct setup {
    int n_heads, n_kv, hd, n_ctx, ld;
    std::vector<C> kc, vc;
    std::vector<float> qkv;
    setup(int h, int kv, int d, int ctx, int n, float vscale)
        : n_heads(h), n_kv(kv), hd(d), n_ctx(ctx), ld((h + 2 * kv) * d), kc((size_t)ctx * kv * d),
          vc((size_t)ctx * kv * d), qkv((size_t)n * ld)
    {
        for (size_t i = 0; i < kc.size(); i++) {
            kc[i] = from(urand(-1, 1));
            vc[i] = from(urand(-vscale, vscale));
        }
        for (auto &x : qkv)
            x = urand(-2, 2);
    }
    static C from(float v);
};
template <> float setup<float>::from(float v) { return v; }
template <> __half setup<__half>::from(float v) { return __float2half_rn(v); }

// softmax(q_ih . K[lo..p] * scale) @ V[lo..p] in float64, lo the window's first key (swa > 0:
// the last swa positions, as the CPU's attention_range), else 0: out (n, n_heads * hd)
static float g_cap; // the scores' soft-cap of the next cases (gemma2's), 0: none

template <class C> static std::vector<double> reference(const setup<C> &s, int pos, int n, int swa)
{
    const int kv_dim = s.n_kv * s.hd, group = s.n_heads / s.n_kv;
    const double scale = 1.0 / std::sqrt((double)s.hd);
    std::vector<double> out((size_t)n * s.n_heads * s.hd);
    for (int i = 0; i < n; i++)
        for (int h = 0; h < s.n_heads; h++) {
            const float *q = &s.qkv[(size_t)i * s.ld + (size_t)h * s.hd];
            const int kvh = h / group, keys = pos + i + 1;
            const int lo = swa > 0 && pos + i >= swa ? pos + i - swa + 1 : 0;
            std::vector<double> w(keys);
            double mx = -INFINITY, sum = 0;
            for (int t = lo; t < keys; t++) {
                double d = 0;
                for (int e = 0; e < s.hd; e++)
                    d += (double)q[e] * widen(s.kc[(size_t)t * kv_dim + kvh * s.hd + e]);
                w[t] = g_cap > 0 ? g_cap * std::tanh(d * scale / g_cap) : d * scale;
                mx = std::max(mx, w[t]);
            }
            for (int t = lo; t < keys; t++)
                sum += (w[t] = std::exp(w[t] - mx));
            for (int e = 0; e < s.hd; e++) {
                double o = 0;
                for (int t = lo; t < keys; t++)
                    o += w[t] * widen(s.vc[(size_t)t * kv_dim + kvh * s.hd + e]);
                out[((size_t)i * s.n_heads + h) * s.hd + e] = o / sum;
            }
        }
    return out;
}

template <class T> static double tolerance();
template <> double tolerance<float>() { return 2e-6; }
template <> double tolerance<__half>() { return 1e-3; }        // the output rounded to 11 bits
template <> double tolerance<__nv_bfloat16>() { return 8e-3; } // to 8 bits

// max |got - ref| / max |ref|; NaN anywhere: infinite
template <class T> static double rel_err(const std::vector<T> &got, const std::vector<double> &ref)
{
    double md = 0, mr = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        const double d = std::fabs((double)to_f32(got[i]) - ref[i]);
        if (!(d == d))
            return INFINITY;
        md = std::max(md, d), mr = std::max(mr, std::fabs(ref[i]));
    }
    return md / (mr > 0 ? mr : 1);
}

static double g_worst[3]; // the largest error / tolerance seen, per element type

template <class T> static int tindex();
template <> int tindex<float>() { return 0; }
template <> int tindex<__half>() { return 1; }
template <> int tindex<__nv_bfloat16>() { return 2; }

// out within the type's tolerance of the float64 ref, and the range flag clear
template <class T>
static bool within(const std::vector<T> &out, const std::vector<double> &ref, int ovf,
                   const char *what)
{
    const double e = rel_err(out, ref);
    g_worst[tindex<T>()] = std::max(g_worst[tindex<T>()], e / tolerance<T>());
    if (e <= tolerance<T>() && !ovf)
        return true;
    diag("%s: error %.3g (tolerance %g), flag %d", what, e, tolerance<T>(), ovf);
    return false;
}

// one token at position pos through attention_split_kernel, in two block orders
template <class T, class C>
static bool decode_case(int n_heads, int n_kv, int hd, int pos, int swa = 0)
{
    setup<C> s(n_heads, n_kv, hd, pos + 3, 1, 1.0f);
    const std::vector<double> ref = reference(s, pos, 1, swa);
    const int splits = att_splits(n_heads);
    const float scale = 1.0f / sqrtf((float)hd);
    std::vector<T> first;
    bool good = true;
    for (int order : {0, 2}) { /* in order, shuffled */
        std::vector<float> part((size_t)n_heads * splits * (2 + hd), NAN);
        std::vector<int> count(n_heads, 0);
        std::vector<T> out((size_t)n_heads * hd, from_f32<T>(NAN)); /* every one written */
        int p = pos, ovf = 0;
        emu_order = order;
        emu_launch2("attention_split_kernel", n_heads, splits, ATT_DECODE_WARPS * 32, [&] {
            attention_split_kernel<T, ATT_DECODE_WARPS, ATT_DECODE_U, C>(
                s.qkv.data(), s.kc.data(), s.vc.data(), &p, n_heads, n_kv, hd, swa, scale, g_cap,
                part.data(), count.data(), out.data(), &ovf);
        });
        emu_order = 0;
        char what[112];
        snprintf(what, sizeof what, "%s %s heads %d/%d hd %d pos %d window %d order %d", tname<T>(),
                 cname<C>(), n_heads, n_kv, hd, pos, swa, order);
        good &= within(out, ref, ovf, what);
        for (int h = 0; h < n_heads; h++)
            if (count[h] != 0) {
                diag("%s heads %d pos %d: head %d's counter left at %d", tname<T>(), n_heads, pos,
                     h, count[h]);
                good = false;
                break;
            }
        if (order == 0)
            first = out;
        else
            for (size_t i = 0; i < out.size(); i++)
                if (bits(out[i]) != bits(first[i])) {
                    diag("%s heads %d pos %d: block order %d changes output %zu", tname<T>(),
                         n_heads, pos, order, i);
                    good = false;
                    break;
                }
    }
    return good;
}

// n tokens at positions pos.. through attention_tile_kernel, in the tiles the backend uses
template <class T, class C>
static bool prompt_case(int n_heads, int n_kv, int hd, int pos, int n, int swa = 0)
{
    setup<C> s(n_heads, n_kv, hd, pos + n, n, 1.0f);
    const std::vector<double> ref = reference(s, pos, n, swa);
    const float scale = 1.0f / sqrtf((float)hd);
    std::vector<T> out((size_t)n * n_heads * hd, from_f32<T>(NAN));
    int p = pos, ovf = 0;
    emu_order = 2;
    /* the backend's tiles: 16 tokens by chunks of 32 keys up to a head of 128, 8 by 16 past it */
    const auto run = [&](auto kernel, int tq) {
        emu_launch2("attention_tile_kernel", n_heads, (n + tq - 1) / tq, ATT_TILE_WARPS * 32, [&] {
            kernel(s.qkv.data(), s.ld, s.kc.data(), s.vc.data(), &p, n, n_heads, n_kv, hd, swa,
                   scale, g_cap, out.data(), &ovf);
        });
    };
    if (hd <= 64)
        run(attention_tile_kernel<T, 16, 32, 64, C>, 16);
    else if (hd <= 128)
        run(attention_tile_kernel<T, 16, 32, 128, C>, 16);
    else
        run(attention_tile_kernel<T, 8, 16, 256, C>, 8);
    emu_order = 0;
    char what[112];
    snprintf(what, sizeof what, "%s %s prompt heads %d/%d hd %d pos %d n %d window %d", tname<T>(),
             cname<C>(), n_heads, n_kv, hd, pos, n, swa);
    return within(out, ref, ovf, what);
}

// the (head, kv head, head dimension) shapes: plain, grouped 4:1 and 7:1 (Qwen2.5-0.5B), the
// 1.1B model's 32:8 (8 splits a head), heads of 128 and 256
static const int SHAPES[][3] = {{4, 4, 64},  {8, 2, 64},  {14, 2, 64}, {32, 8, 64},
                                {4, 1, 128}, {2, 2, 256}, {3, 1, 32}};

static bool G_LONG; // the long form: every position at every shape

// every shape for f32 on a float cache, five of them for the other types (the same code over
// other element types). The short form's positions: one key (every split but the first empty),
// two, a few, an uneven split of more keys than a warp's lanes, and the longest context; for
// the other types two of them.
template <class T, class C> static void all_for(bool every_shape)
{
    int cases = 0, bad = 0;
    const std::vector<int> positions = G_LONG ? std::vector<int>{0, 1, 6, 31, 32, 33, 127, 300}
                                       : every_shape ? std::vector<int>{0, 1, 6, 33, 300}
                                                     : std::vector<int>{1, 33};
    for (const auto &sh : SHAPES) {
        if (!every_shape && (sh[0] == 4 || sh[0] == 32))
            continue;
        for (int pos : positions) {
            if (pos > 127 && sh[0] != 8 && sh[0] != 3) // the longest context on two shapes
                continue;
            cases++;
            bad += !decode_case<T, C>(sh[0], sh[1], sh[2], pos);
        }
    }
    ok(bad == 0,
       "%s, %s: %d single-token cases (attention_split_kernel) within %g of float64, the same bits "
       "in any block order, counters reset",
       tname<T>(), cname<C>(), cases, tolerance<T>());
    cases = bad = 0;
    for (const auto &sh : SHAPES) {
        if (sh[2] > 128 || (!every_shape && sh[0] != 8 && sh[0] != 3))
            continue;
        for (const int *pn : {(const int[]){0, 5}, (const int[]){30, 3}, (const int[]){0, 40},
                              (const int[]){37, 33}}) {
            /* the other types, and the many-headed shapes: several tiles and chunks only; the
             * short form: one tile of one chunk, and several */
            if ((!every_shape || sh[0] >= 14) && pn[1] < 33)
                continue;
            if (!G_LONG && pn[1] != 5 && pn[1] != 33)
                continue;
            cases++;
            bad += !prompt_case<T, C>(sh[0], sh[1], sh[2], pn[0], pn[1]);
        }
    }
    if (every_shape) {
        bad += !prompt_case<T, C>(2, 2, 256, 2, 3);
        bad += !prompt_case<T, C>(2, 2, 256, 20, 20); /* tiles of 8, chunks of 16 */
        cases += 2;
    }
    ok(bad == 0,
       "%s, %s: %d prompt-chunk cases (attention_tile_kernel, causal) within %g of float64",
       tname<T>(), cname<C>(), cases, tolerance<T>());
    /* sliding windows (Mistral's; phi3's, gemma's layers): a window of one key, one shorter than
     * a warp, one ending inside a chunk, one longer than the context; single tokens (the split
     * of the window's keys) and prompt chunks (chunks before the tile's first window skipped,
     * a query's keys before its own masked) */
    cases = bad = 0;
    for (const auto &sh : SHAPES) {
        /* the window's logic is the same for every shape: two shapes (a third, of 128, for
         * f32), every shape in the long form */
        if (!G_LONG && sh[0] != 8 && sh[0] != 3 && !(every_shape && sh[2] == 128))
            continue;
        if (sh[2] > 128)
            continue;
        for (const int *c : {(const int[]){33, 20}, (const int[]){120, 64}, (const int[]){5, 1},
                             (const int[]){6, 100}}) {
            cases++;
            bad += !decode_case<T, C>(sh[0], sh[1], sh[2], c[0], c[1]);
        }
        for (const int *c : {(const int[]){37, 33, 20}, (const int[]){0, 40, 7},
                             (const int[]){100, 33, 64}, (const int[]){2, 5, 1}}) {
            if (!every_shape && c[1] < 33)
                continue;
            cases++;
            bad += !prompt_case<T, C>(sh[0], sh[1], sh[2], c[0], c[1], c[2]);
        }
    }
    if (every_shape) {
        bad += !decode_case<T, C>(2, 2, 256, 40, 9) + !prompt_case<T, C>(2, 2, 256, 20, 20, 9);
        cases += 2;
    }
    ok(bad == 0,
       "%s, %s: %d sliding-window cases (windows of 1 to 100 keys, single tokens and prompt "
       "chunks) within %g of float64 over the window's keys, the same bits in any block order",
       tname<T>(), cname<C>(), cases, tolerance<T>());
    /* soft-capped scores (gemma2: cap * tanh(s / cap) before the softmax), a cap of 0.5 that
     * changes every score, alone and with a window */
    cases = bad = 0;
    g_cap = 0.5f;
    for (const auto &sh : SHAPES) {
        if (sh[0] != 8 && sh[0] != 3 && !(every_shape && sh[2] == 128))
            continue;
        bad += !decode_case<T, C>(sh[0], sh[1], sh[2], 33) +
               !decode_case<T, C>(sh[0], sh[1], sh[2], 120, 64) +
               !prompt_case<T, C>(sh[0], sh[1], sh[2], 37, 33) +
               !prompt_case<T, C>(sh[0], sh[1], sh[2], 100, 33, 64);
        cases += 4;
    }
    g_cap = 0;
    ok(bad == 0,
       "%s, %s: %d soft-capped cases (single tokens and prompt chunks, with and without a window) "
       "within %g of float64",
       tname<T>(), cname<C>(), cases, tolerance<T>());
}

// values beyond f16's range set the flag: every value 1e5, so every output is 1e5
static void range_flag()
{
    setup<float> s(4, 2, 64, 8, 1, 1.0f);
    std::fill(s.vc.begin(), s.vc.end(), 1e5f);
    std::vector<float> part((size_t)4 * att_splits(4) * 66);
    std::vector<int> count(4, 0);
    std::vector<__half> out(4 * 64);
    int p = 5, ovf = 0;
    emu_launch2("attention_split_kernel", 4, att_splits(4), ATT_DECODE_WARPS * 32, [&] {
        attention_split_kernel<__half, ATT_DECODE_WARPS, ATT_DECODE_U, float>(
            s.qkv.data(), s.kc.data(), s.vc.data(), &p, 4, 2, 64, 0, 0.125f, 0.0f, part.data(),
            count.data(), out.data(), &ovf);
    });
    ok(ovf == 1, "an attention output beyond f16's range sets the range flag (%d)", ovf);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, nullptr, _IOLBF, 0);
    // no argument: the short form; `long`: the long form; `slow`: the long form if CAIRN_SLOW is
    // set, else a skip (how the suite 'slow' runs it, so a plain `meson test` does not)
    const char *a = argc > 1 ? argv[1] : nullptr;
    if (a && strcmp(a, "slow") == 0 && !getenv("CAIRN_SLOW"))
        tap_skip_all("the long form runs with CAIRN_SLOW=1 (meson test --suite slow)");
    G_LONG = a != nullptr;
    all_for<float, float>(true);
    all_for<__half, float>(false);
    all_for<__nv_bfloat16, float>(false);
    all_for<float, __half>(false);
    all_for<__half, __half>(false);
    range_flag();
    diag("largest error / tolerance: f32 %.3f, f16 %.3f, bf16 %.3f", g_worst[0], g_worst[1],
         g_worst[2]);
    ok(emu_report_count() == 0,
       "the emulator saw no shared-memory race, out-of-bounds or uninitialised read, barrier or "
       "shuffle divergence (%ld findings, on stderr)",
       emu_report_count());
    return tap_done();
}
