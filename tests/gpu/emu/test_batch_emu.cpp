// tests/gpu/emu/test_batch_emu.cpp - the batched decode kernels (gpu/cuda/kernels_gemv.cuh:
// gemv_batch_kernel; kernels_attention.cuh: attention_paged_kernel) run lane by lane on the CPU by
// the emulator of emu.hpp (suite 'unit': no GPU needed), against the solo kernels they must equal.
//
// Batch invariance is what these kernels are for (gpu/backend.h, cairn__backend_forward_paged): a
// sequence's bits may not depend on which others share its step. So:
//   - gemv_batch_kernel's output for each input row equals, bit for bit, gemv_kernel's (the solo
//     decode product) on that row alone, for f32, f16 and bf16 weights, batches of 1..16 (past
//     GVB_MAX as the backend runs them: several launches), every split, odd shapes (one piece, a
//     partial last piece and segment, several segments, the element-by-element paths for
//     unaligned rows and inputs), beta 0 and 1, in shuffled block order; and within a float64
//     bound; nothing outside the output rows written;
//   - attention_paged_kernel over a shuffled block table of a pool (unused rows NaN, so a wrong
//     row shows) equals, bit for bit, attention_split_kernel over the same keys in a contiguous
//     cache, for each of several sequences of different lengths sharing one launch, for f32 and
//     f16 caches and outputs, and is within tolerance of float64; counters back at zero.
// `test_batch_emu` runs the short form; `test_batch_emu long` every batch size at every split.
#include "kernels_emu.cuh"

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "emu_test.hpp"
#include "tests/tap.h"

long emu_report_count();

static std::mt19937_64 R(1717);
static float urand(float a, float b) { return std::uniform_real_distribution<float>(a, b)(R); }
static bool G_LONG = false;

// ---- the batched product

template <class T, class... A> static void gemv_batch_sk(int sk, A... a)
{
    switch (sk) {
    case 1:
        gemv_batch_kernel<T, 1>(a...);
        break;
    case 2:
        gemv_batch_kernel<T, 2>(a...);
        break;
    case 4:
        gemv_batch_kernel<T, 4>(a...);
        break;
    default:
        gemv_batch_kernel<T, 8>(a...);
        break;
    }
}

// gemv_kernel (split 1: every split has its bits, test_gemv_emu shows) on one input row
template <class T>
static std::vector<float> solo(const std::vector<T> &W, int rows, int cols, int vec, const T *x,
                               float beta, const float *y0)
{
    std::vector<T> xs(x, x + cols); // the solo kernel's own copy: its alignment
    std::vector<float> y(y0, y0 + rows);
    int ovf = 0;
    emu_dyn.set_size(gv_smem_bytes(cols, (int)sizeof(T)));
    const int grid = (rows + 1) / 2 < GV_WARPS ? 1 : ((rows + 1) / 2 + GV_WARPS - 1) / GV_WARPS;
    emu_launch("gemv_kernel", grid, CK_THREADS, [&] {
        gemv_kernel<T, GV_PLAIN, GV_Y, 1>(W.data(), rows, cols, vec, xs.data(), nullptr, 1e-5f,
                                          beta, y.data(), &ovf, qkv_args{});
    });
    return y;
}

// Y (B, ldy) over X (B, ldx) as the backend runs it: launches of at most GVB_MAX inputs
template <class T>
static void batched(const std::vector<T> &W, int rows, int cols, int vec, const T *X, int ldx,
                    int xvec, int B, float beta, float *Y, int ldy, int sk, int grid, int order)
{
    emu_dyn.set_size(gvb_smem_bytes(cols, (int)sizeof(T)));
    emu_order = order;
    for (int b0 = 0; b0 < B; b0 += GVB_MAX) {
        const int nb = std::min(GVB_MAX, B - b0);
        emu_launch("gemv_batch_kernel", grid, CK_THREADS, [&] {
            gemv_batch_sk<T>(sk, W.data(), rows, cols, vec, X + (size_t)b0 * ldx, ldx, xvec, nb,
                             beta, Y + (size_t)b0 * ldy, ldy);
        });
    }
    emu_order = 0;
}

template <class T> static void gemv_for()
{
    // rows, cols: one piece, a partial piece, odd rows, several segments at every element size
    // (a segment is 128 pieces: 512 f32 or 1024 f16/bf16 elements), unaligned rows
    static const int SHAPES[][2] = {{1, 3}, {5, 37}, {18, 300}, {7, 1030}, {3, 2100}, {4, 64}};
    const int BMAX = 16;
    long cases = 0, bad = 0, bound_bad = 0, guard_bad = 0;
    double worst = 0;
    for (const auto &sh : SHAPES) {
        const int rows = sh[0], cols = sh[1];
        std::vector<T> W((size_t)rows * cols);
        for (auto &w : W)
            w = from_f32<T>(urand(-1, 1));
        // X rows ldx apart: cols (aligned rows when cols is a multiple of a piece), or cols + 1
        for (const int pad : {0, 1}) {
            const int ldx = cols + pad, ldy = rows + 3;
            std::vector<T> X((size_t)BMAX * ldx + 8);
            for (auto &v : X)
                v = from_f32<T>(urand(-2, 2));
            const int V = 16 / (int)sizeof(T);
            const int vec = cols % V == 0 && (uintptr_t)W.data() % 16 == 0;
            const int xvec = cols % V == 0 && ldx % V == 0 && (uintptr_t)X.data() % 16 == 0;
            for (const float beta : {0.0f, 1.0f}) {
                std::vector<float> y0((size_t)BMAX * ldy);
                for (auto &v : y0)
                    v = urand(-4, 4);
                std::vector<std::vector<float>> want(BMAX);
                for (int b = 0; b < BMAX; b++)
                    want[b] =
                        solo(W, rows, cols, vec, &X[(size_t)b * ldx], beta, &y0[(size_t)b * ldy]);
                // the float64 bound: |y - ref| within 1e-5 of sum |w x| (+ |y0|)
                for (int b = 0; b < BMAX; b++)
                    for (int r = 0; r < rows; r++) {
                        double ref = beta != 0.0f ? (double)y0[(size_t)b * ldy + r] : 0.0,
                               mag = std::fabs(ref);
                        for (int c = 0; c < cols; c++) {
                            const double p = (double)to_f32(W[(size_t)r * cols + c]) *
                                             (double)to_f32(X[(size_t)b * ldx + c]);
                            ref += p, mag += std::fabs(p);
                        }
                        const double e = std::fabs((double)want[b][r] - ref) / (mag > 0 ? mag : 1);
                        worst = std::max(worst, e);
                        if (!(e <= 1e-5))
                            bound_bad++;
                    }
                for (int B = 1; B <= BMAX; B++) {
                    const bool full = G_LONG || B == 1 || B == 3 || B == 8 || B == 9 || B == 16;
                    for (const int sk : {1, 2, 4, 8}) {
                        if (!full && sk != 1 << (B % 4))
                            continue;
                        const int groups = (rows + 1) / 2;
                        const int natural = std::max(1, (groups * sk + GV_WARPS - 1) / GV_WARPS);
                        std::vector<float> Y(y0);
                        batched(W, rows, cols, vec, X.data(), ldx, xvec, B, beta, Y.data(), ldy, sk,
                                natural, B % 3 == 0 ? 2 : 0);
                        cases++;
                        bool same = true;
                        for (int b = 0; b < B && same; b++)
                            for (int r = 0; r < rows; r++)
                                if (bits(Y[(size_t)b * ldy + r]) != bits(want[b][r])) {
                                    diag("%s %dx%d ldx %d beta %g B %d split %d: input %d row %d "
                                         "%a, solo %a",
                                         tname<T>(), rows, cols, ldx, beta, B, sk, b, r,
                                         Y[(size_t)b * ldy + r], want[b][r]);
                                    same = false;
                                    break;
                                }
                        bad += !same;
                        // the padding between output rows and the rows past B: untouched
                        for (size_t i = 0; i < Y.size(); i++) {
                            const size_t b = i / ldy, r = i % ldy;
                            if ((b >= (size_t)B || r >= (size_t)rows) && bits(Y[i]) != bits(y0[i]))
                                guard_bad++;
                        }
                    }
                }
            }
        }
    }
    ok(bad == 0 && guard_bad == 0,
       "%s: gemv_batch_kernel row for row bit for bit gemv_kernel's, B 1..16, every split, %ld "
       "cases (%ld differ, %ld stray writes)",
       tname<T>(), cases, bad, guard_bad);
    ok(bound_bad == 0, "%s: the products within 1e-5 of float64's sum |w x| (worst %.3g)",
       tname<T>(), worst);
}

// ---- paged attention

template <class C> static C cfrom(float v);
template <> float cfrom<float>(float v) { return v; }
template <> __half cfrom<__half>(float v) { return __float2half_rn(v); }
static double widen(float v) { return v; }
static double widen(__half v) { return __half2float(v); }
template <class C> static const char *cname();
template <> const char *cname<float>() { return "f32 cache"; }
template <> const char *cname<__half>() { return "f16 cache"; }
template <class T> static double tolerance();
template <> double tolerance<float>() { return 2e-6; }
template <> double tolerance<__half>() { return 1e-3; }

template <class T, class C> static void paged_for()
{
    // n_heads, n_kv, head_dim
    static const int SHAPES[][3] = {{4, 2, 64}, {3, 3, 40}, {8, 1, 128}, {2, 1, 256}};
    // each launch's sequences: their positions (keys 0..pos)
    static const std::vector<std::vector<int>> SETS = {{0}, {15, 16, 17}, {37, 0, 100, 5}};
    long cases = 0, bad = 0, tol_bad = 0, count_bad = 0;
    double worst = 0;
    /* no window, one that cuts the longer sequences' keys, and soft-capped scores (gemma2) */
    for (const auto &wc : {std::pair<int, float>{0, 0.0f}, {20, 0.0f}, {0, 0.5f}}) {
        const int swa = wc.first;
        const float cap = wc.second;
        for (const auto &sh : SHAPES) {
            /* the window and the cap change which keys and scores, not where rows are: two
             * shapes each (every shape in the long form) */
            if ((swa || cap > 0) && !G_LONG && (sh[2] == 128 || sh[2] == 256))
                continue;
            const int n_heads = sh[0], n_kv = sh[1], hd = sh[2], kv_dim = n_kv * hd;
            const int ld = (n_heads + 2 * n_kv) * hd, splits = att_splits(n_heads);
            const float scale = 1.0f / sqrtf((float)hd);
            for (const auto &pos : SETS) {
                const int n = (int)pos.size();
                // the pool: every sequence's blocks, shuffled, and two spare blocks; rows NaN
                int n_blocks = 2;
                std::vector<int> nbk(n);
                for (int s = 0; s < n; s++)
                    n_blocks += nbk[s] = pos[s] / ATT_KV_BLOCK + 1;
                std::vector<int> perm(n_blocks);
                std::iota(perm.begin(), perm.end(), 0);
                std::shuffle(perm.begin(), perm.end(), R);
                const int bt_ld = 8; // (100 + 1 + 15) / 16 blocks at most
                std::vector<int> bt((size_t)n * bt_ld, -1);
                std::vector<C> kp((size_t)n_blocks * ATT_KV_BLOCK * kv_dim, cfrom<C>(NAN));
                std::vector<C> vp(kp);
                std::vector<float> qkv((size_t)n * ld);
                for (auto &x : qkv)
                    x = urand(-2, 2);
                std::vector<std::vector<C>> kc(n), vc(n); // each sequence's contiguous cache
                for (int s = 0, next = 0; s < n; s++) {
                    for (int j = 0; j < nbk[s]; j++)
                        bt[(size_t)s * bt_ld + j] = perm[next++];
                    kc[s].resize((size_t)(pos[s] + 1) * kv_dim);
                    vc[s].resize(kc[s].size());
                    for (int t = 0; t <= pos[s]; t++) {
                        const size_t row =
                            (size_t)bt[(size_t)s * bt_ld + t / ATT_KV_BLOCK] * ATT_KV_BLOCK +
                            t % ATT_KV_BLOCK;
                        for (int e = 0; e < kv_dim; e++) {
                            kc[s][(size_t)t * kv_dim + e] = kp[row * kv_dim + e] =
                                cfrom<C>(urand(-1, 1));
                            vc[s][(size_t)t * kv_dim + e] = vp[row * kv_dim + e] =
                                cfrom<C>(urand(-1, 1));
                        }
                    }
                }
                // the solo kernel, one sequence at a time, over its contiguous cache
                std::vector<std::vector<T>> want(n);
                for (int s = 0; s < n; s++) {
                    std::vector<float> part((size_t)n_heads * splits * (2 + hd), NAN);
                    std::vector<int> count(n_heads, 0);
                    want[s].assign((size_t)n_heads * hd, from_f32<T>(NAN));
                    int p = pos[s], ovf = 0;
                    emu_launch2("attention_split_kernel", n_heads, splits, ATT_DECODE_WARPS * 32,
                                [&] {
                                    attention_split_kernel<T, ATT_DECODE_WARPS, ATT_DECODE_U, C>(
                                        &qkv[(size_t)s * ld], kc[s].data(), vc[s].data(), &p,
                                        n_heads, n_kv, hd, swa, scale, cap, part.data(),
                                        count.data(), want[s].data(), &ovf);
                                });
                }
                // every sequence in one paged launch, blocks in shuffled order
                std::vector<float> part((size_t)n * n_heads * splits * (2 + hd), NAN);
                std::vector<int> count((size_t)n * n_heads, 0);
                std::vector<T> out((size_t)n * n_heads * hd, from_f32<T>(NAN));
                int ovf = 0;
                emu_order = 2;
                emu_launch2("attention_paged_kernel", n * n_heads, splits, ATT_DECODE_WARPS * 32,
                            [&] {
                                attention_paged_kernel<T, ATT_DECODE_WARPS, ATT_DECODE_U, C>(
                                    qkv.data(), ld, kp.data(), vp.data(), pos.data(), bt.data(),
                                    bt_ld, n_heads, n_kv, hd, swa, scale, cap, part.data(),
                                    count.data(), out.data(), &ovf);
                            });
                emu_order = 0;
                for (int c : count)
                    count_bad += c != 0;
                for (int s = 0; s < n; s++) {
                    cases++;
                    bool same = true;
                    for (int i = 0; i < n_heads * hd && same; i++)
                        if (bits(out[(size_t)s * n_heads * hd + i]) != bits(want[s][i])) {
                            diag("%s %s heads %d/%d hd %d: sequence %d (pos %d) element %d: %a, "
                                 "solo %a",
                                 tname<T>(), cname<C>(), n_heads, n_kv, hd, s, pos[s], i,
                                 (double)to_f32(out[(size_t)s * n_heads * hd + i]),
                                 (double)to_f32(want[s][i]));
                            same = false;
                        }
                    bad += !same;
                    // float64: softmax(q . K * scale) @ V over the sequence's keys
                    double md = 0, mr = 0;
                    for (int h = 0; h < n_heads; h++) {
                        const float *q = &qkv[(size_t)s * ld + (size_t)h * hd];
                        const int kvh = h / (n_heads / n_kv), keys = pos[s] + 1;
                        const int lo = swa && pos[s] >= swa ? pos[s] - swa + 1 : 0;
                        std::vector<double> w(keys);
                        double mx = -INFINITY, sum = 0;
                        for (int t = lo; t < keys; t++) {
                            double d = 0;
                            for (int e = 0; e < hd; e++)
                                d += (double)q[e] * widen(kc[s][(size_t)t * kv_dim + kvh * hd + e]);
                            const double sc = d / std::sqrt((double)hd);
                            mx = std::max(mx, w[t] = cap > 0 ? cap * std::tanh(sc / cap) : sc);
                        }
                        for (int t = lo; t < keys; t++)
                            sum += (w[t] = std::exp(w[t] - mx));
                        for (int e = 0; e < hd; e++) {
                            double o = 0;
                            for (int t = lo; t < keys; t++)
                                o += w[t] * widen(vc[s][(size_t)t * kv_dim + kvh * hd + e]);
                            o /= sum;
                            const double d = std::fabs(
                                (double)to_f32(out[((size_t)s * n_heads + h) * hd + e]) - o);
                            md = d == d ? std::max(md, d) : INFINITY;
                            mr = std::max(mr, std::fabs(o));
                        }
                    }
                    const double e = md / (mr > 0 ? mr : 1);
                    worst = std::max(worst, e);
                    tol_bad += !(e <= tolerance<T>()) || ovf;
                }
            }
        }
    }
    ok(bad == 0 && count_bad == 0,
       "%s, %s: attention_paged_kernel bit for bit attention_split_kernel over the same keys, %ld "
       "sequences in shared launches, with and without a sliding window and a soft-cap (%ld "
       "differ, %ld counters left set)",
       tname<T>(), cname<C>(), cases, bad, count_bad);
    ok(tol_bad == 0, "%s, %s: paged attention within %g of float64 (worst %.3g)", tname<T>(),
       cname<C>(), tolerance<T>(), worst);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, nullptr, _IOLBF, 0);
    const char *a = argc > 1 ? argv[1] : nullptr;
    if (a && strcmp(a, "slow") == 0 && !getenv("CAIRN_SLOW"))
        tap_skip_all("the long form runs with CAIRN_SLOW=1 (meson test --suite slow)");
    G_LONG = a != nullptr;
    gemv_for<float>();
    gemv_for<__half>();
    gemv_for<__nv_bfloat16>();
    paged_for<float, float>();
    paged_for<__half, float>();
    paged_for<float, __half>();
    paged_for<__half, __half>();
    ok(emu_report_count() == 0,
       "the emulator saw no shared-memory race, out-of-bounds or uninitialised read, barrier or "
       "shuffle divergence (%ld findings, on stderr)",
       emu_report_count());
    return tap_done();
}
