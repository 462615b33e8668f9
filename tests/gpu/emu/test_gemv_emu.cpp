// tests/gpu/emu/test_gemv_emu.cpp - the decode product gemv_kernel (gpu/cuda/kernels_gemv.cuh) run
// lane by lane on the CPU, so that its logic is tested where there is no GPU (CI; suite 'unit').
//
// The kernel's own text (kernels_emu.cuh, made by gen.py) runs on the emulator of emu.hpp: every
// thread a fiber, __syncthreads a barrier, shuffles warp collectives, shared memory checked for
// races, out-of-bounds and uninitialised reads. For every element type (f32, f16, bf16) and
// prologue (plain, RMSNorm), over row counts and lengths that take every path (a row of one
// piece, of several segments, a partial last piece and segment, the element-by-element path for
// unaligned rows and inputs, NaN and infinite weights and inputs, values past f16's range):
//   - the output against a float64 reference, within the error bound of the kernel's order;
//   - the staged input equal, bit for bit, to what rmsnorm_kernel writes (or the input itself),
//     and the range flag set exactly when theirs is;
//   - the same bits over grids (one block, a few, more than needed) and block and thread orders;
//   - the same bits at every split (1, 2, 4 and 8 warps a row pair): the summation order depends
//     on the row length only, which is what lets the backend time the splits and keep any;
//   - the fused Q/K/V epilogue (bias, rope, the KV cache) storing what the product followed by
//     qkv_post_kernel stores, and the fused SwiGLU epilogue (GV_GLU) storing what the product
//     followed by gated_kernel stores, with the same range flag, at every split;
//   - the per-head q/k norms (qk_norm_kernel) and gemma's element kernels (the embedding's
//     scale, the post-norm, the GELU gate, the logits' soft-cap) against the CPU's arithmetic,
//     bit for bit.
// What it cannot show is speed, or that nvcc compiles the same meaning (the gpu suite does, on a
// device). `test_gemv_emu` runs the short form (suite 'unit'); `test_gemv_emu long` every length
// at every row count (suite 'slow', a few minutes), `test_gemv_emu 1` or `2` larger matrices too.
#include "kernels_emu.cuh"

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <random>
#include <string>
#include <vector>

#include "emu_test.hpp"
#include "tests/tap.h"

long emu_report_count();

static std::mt19937_64 R(2024);
static double urand(double a, double b) { return std::uniform_real_distribution<double>(a, b)(R); }

static const char *inname[] = {"PLAIN", "NORM"};

// exact-size heap buffer, optionally offset by `mis` bytes (a misaligned base)
template <class U> struct buf {
    char *raw = nullptr;
    U *p = nullptr;
    size_t n = 0;
    buf(size_t n_, size_t mis = 0) : n(n_)
    {
        raw = (char *)malloc(n * sizeof(U) + mis + 1); // +1: malloc(0)
        p = (U *)(raw + mis);
    }
    ~buf() { free(raw); }
    buf(const buf &) = delete;
    U &operator[](size_t i) { return p[i]; }
};

struct stats {
    long xsplit = 0, xsplit_runs = 0;
    long cases = 0, runs = 0, bad = 0, xs_mismatch = 0, ovf_mismatch = 0, nondet = 0,
         class_mismatch = 0, bound_fail = 0, guard_fail = 0, ovf1 = 0, vec1 = 0, vec0 = 0,
         nanrows = 0, infrows = 0, finrows = 0;
    double worst = 0, worst_task = 0;
    std::string worst_at;
} S;

enum { FILL_RANDOM, FILL_SPECIAL_W, FILL_SPECIAL_X, FILL_OVF };

struct gv_out {
    std::vector<float> y;
    int ovf;
    std::vector<unsigned char> xs; // the staged input of the first block run
    bool xs_same = true;           // every block staged the same bytes
};

static const int GV_BLOCKS = 4 * 132; // an H200 at 4 blocks an SM (<= 64 registers x 256 threads)
static int G_SK = 1;                  // the split of the runs below (a template parameter there)
static bool G_SHORT = false;          // the short form (the default; see all_for)
template <class T, int IN, int OUT, class... A> static void gemv_sk(A... a)
{
    switch (G_SK) {
    case 1:
        gemv_kernel<T, IN, OUT, 1>(a...);
        break;
    case 2:
        gemv_kernel<T, IN, OUT, 2>(a...);
        break;
    case 4:
        gemv_kernel<T, IN, OUT, 4>(a...);
        break;
    case 8:
        gemv_kernel<T, IN, OUT, 8>(a...);
        break;
    default:
        abort();
    }
}

template <class T, int IN>
static gv_out run_gemv(const T *W, int rows, int cols, int vec, const void *in, const float *nw,
                       float beta, const std::vector<float> &y0, int grid, int order)
{
    gv_out o;
#if EMU_ASAN
    buf<float> y(rows);
#else
    buf<float> y(rows + 8);
    for (int i = rows; i < rows + 8; i++)
        y[i] = 12345.0f;
#endif
    for (int i = 0; i < rows; i++)
        y[i] = y0[i];
    buf<int> ovf(1);
    ovf[0] = 0;
    emu_dyn.set_size(gv_smem_bytes(cols, (int)sizeof(T)));
    bool first = true;
    emu_block_end = [&](unsigned) {
        std::vector<unsigned char> cur(emu_dyn.mem,
                                       emu_dyn.mem + (size_t)cols * sizeof(T)); // the staged input
        if (first)
            o.xs = cur, first = false;
        else if (cur != o.xs)
            o.xs_same = false;
    };
    emu_order = order;
    emu_launch("gemv_kernel", grid, CK_THREADS, [&] {
        gemv_sk<T, IN, GV_Y>(W, rows, cols, vec, in, nw, 1e-5f, beta, y.p, ovf.p, qkv_args{});
    });
    emu_block_end = nullptr;
    emu_order = 0;
    o.y.assign(y.p, y.p + rows);
    o.ovf = ovf[0];
#if !EMU_ASAN
    for (int i = rows; i < rows + 8; i++)
        if (y[i] != 12345.0f)
            S.guard_fail++, diag("GUARD y[%d] overwritten", i);
#endif
    S.runs++;
    return o;
}

static int cls(double v) { return std::isnan(v) ? 3 : std::isinf(v) ? (v > 0 ? 1 : 2) : 0; }

template <class T, int IN>
static void one_case(int rows, int cols, float beta, int fill, size_t mis, int force_vec,
                     bool quick)
{
    S.cases++;
    buf<T> W((size_t)rows * cols, mis);
    for (size_t i = 0; i < (size_t)rows * cols; i++)
        W[i] = from_f32<T>((float)urand(-1, 1));
    buf<float> xf(cols), nw(cols);
    buf<T> xt(cols, mis); // a misaligned case: the plain input too (its element-by-element path)
    for (int i = 0; i < cols; i++)
        xf[i] = (float)urand(-3, 3);
    for (int i = 0; i < cols; i++)
        nw[i] = (float)urand(0.5, 1.5), xt[i] = from_f32<T>((float)urand(-2, 2));
    if (fill == FILL_SPECIAL_W && rows * (size_t)cols >= 3) {
        W[0] = from_f32<T>(NAN);                                         // row 0: NaN
        W[(size_t)(rows - 1) * cols + cols - 1] = from_f32<T>(INFINITY); // last row: +inf
        if (rows > 2)
            W[(size_t)1 * cols] = from_f32<T>(-INFINITY); // row 1: -inf
    }
    if (fill == FILL_SPECIAL_X) {
        if (IN == GV_PLAIN)
            xt[cols - 1] = from_f32<T>(INFINITY);
        else
            xf[cols / 2] = INFINITY; // norm: ss inf, scale 0, inf*0 NaN
    }
    if (fill == FILL_OVF && IN == GV_NORM)
        nw[cols - 1] = 2e5f; // normed value beyond f16's range (unless x is tiny there)
    const void *in = IN == GV_PLAIN ? (const void *)xt.p : (const void *)xf.p;
    // the staged input as the separate kernels make it
    std::vector<T> xs_ref(cols);
    int ovf_ref = 0;
    {
        buf<T> out(cols);
        buf<int> ov(1);
        ov[0] = 0;
        if (IN == GV_NORM)
            emu_launch("rmsnorm_kernel", 1, CK_THREADS,
                       [&] { rmsnorm_kernel<T>(xf.p, nw.p, cols, 1e-5f, out.p, ov.p); });
        else
            for (int i = 0; i < cols; i++)
                out[i] = xt[i];
        for (int i = 0; i < cols; i++)
            xs_ref[i] = out[i];
        ovf_ref = ov[0];
    }
    std::vector<float> y0(rows);
    for (int i = 0; i < rows; i++)
        y0[i] = beta == 0.0f ? NAN : (float)urand(-4, 4);
    const int host_vec = cols % (int)(16 / sizeof(T)) == 0 && (uintptr_t)W.p % 16 == 0;
    const int vec = force_vec >= 0 ? force_vec : host_vec;
    (vec ? S.vec1 : S.vec0)++;
    S.ovf1 += ovf_ref;
    const int groups = (rows + GV_ROWS - 1) / GV_ROWS;
    const int natural = std::min((groups * G_SK + GV_WARPS - 1) / GV_WARPS, GV_BLOCKS);
    struct gr {
        int grid, order;
    };
    std::vector<gr> runs = {{natural, 0}};
    if (!quick) {
        runs.push_back({natural, 1});
        runs.push_back({natural, 2});
        runs.push_back({1, 2});
        runs.push_back({3, 1});
        runs.push_back({natural + 5, 2}); // more blocks than groups need: idle warps
    } else if (natural > 1)
        runs.push_back({std::max(1, natural / 7), 2});
    const long rep0 = emu_report_count();
    std::vector<gv_out> outs;
    for (auto g : runs)
        outs.push_back(run_gemv<T, IN>(W.p, rows, cols, vec, in, nw.p, beta, y0, g.grid, g.order));
    char where[160];
    snprintf(where, sizeof where, "%s %s rows %d cols %d beta %g fill %d mis %zu vec %d",
             tname<T>(), inname[IN], rows, cols, beta, fill, mis, vec);
    bool fail = false;
    // staged input and the range flag
    for (auto &o : outs) {
        if (!o.xs_same || o.xs.size() != (size_t)cols * sizeof(T) ||
            memcmp(o.xs.data(), xs_ref.data(), o.xs.size()) != 0) {
            S.xs_mismatch++, fail = true;
            diag("XS mismatch (%s)%s", where, o.xs_same ? "" : " (blocks differ)");
            break;
        }
    }
    for (auto &o : outs)
        if (o.ovf != ovf_ref) {
            S.ovf_mismatch++, fail = true;
            diag("OVF %d vs reference %d (%s)", o.ovf, ovf_ref, where);
            break;
        }
    // determinism
    for (size_t k = 1; k < outs.size(); k++)
        for (int i = 0; i < rows; i++)
            if (bits(outs[k].y[i]) != bits(outs[0].y[i])) {
                S.nondet++, fail = true;
                diag("NONDET run %zu row %d: %a vs %a (%s)", k, i, outs[k].y[i], outs[0].y[i],
                     where);
                k = outs.size();
                break;
            }
    // every other split: the same bits (the order depends on the row length only)
    {
        const int sk0 = G_SK;
        for (int sk : {1, 2, 4, 8}) {
            if (sk == sk0)
                continue;
            G_SK = sk;
            const int grid = std::min((groups * sk + GV_WARPS - 1) / GV_WARPS, GV_BLOCKS);
            gv_out o = run_gemv<T, IN>(W.p, rows, cols, vec, in, nw.p, beta, y0,
                                       quick ? grid : std::max(1, grid / 3), 2);
            S.xsplit_runs++;
            for (int i = 0; i < rows; i++)
                if (bits(o.y[i]) != bits(outs[0].y[i])) {
                    S.xsplit++, fail = true;
                    diag("XSPLIT split %d row %d: %a vs split %d %a (%s)", sk, i, o.y[i], sk0,
                         outs[0].y[i], where);
                    break;
                }
        }
        G_SK = sk0;
    }
    // reference
    const int n_eff = (cols + 31) / 32 + 16 + 6; // per-lane terms (+ a piece), warp tree, beta add
    for (int i = 0; i < rows; i++) {
        double ref = 0, mag = 0;
        for (int k = 0; k < cols; k++) {
            const double p = (double)to_f32(W[(size_t)i * cols + k]) * (double)to_f32(xs_ref[k]);
            ref += p;
            mag += std::fabs(p);
        }
        if (beta != 0.0f)
            ref += (double)beta * y0[i], mag += std::fabs((double)beta * y0[i]);
        const double got = outs[0].y[i];
        if (cls(ref) != cls(got) && !(cls(ref) == 0 && std::fabs(ref) > 3e38)) {
            S.class_mismatch++, fail = true;
            diag("CLASS row %d: got %g ref %g (%s)", i, got, ref, where);
            continue;
        }
        (cls(ref) == 3 ? S.nanrows : cls(ref) ? S.infrows : S.finrows)++;
        if (cls(ref) != 0 || std::isnan(mag))
            continue;
        const double err = std::fabs(got - ref);
        const double bound = n_eff * std::ldexp(1.0, -24) * mag,
                     task = cols * std::ldexp(1.0, -23) * mag;
        const double ratio = bound > 0 ? err / bound : (err > 0 ? INFINITY : 0);
        if (ratio > S.worst)
            S.worst = ratio, S.worst_at = where;
        if (task > 0 && err / task > S.worst_task)
            S.worst_task = err / task;
        if (ratio > 1.0) {
            S.bound_fail++, fail = true;
            diag("BOUND row %d: err %g bound %g (%s)", i, err, bound, where);
        }
    }
    if (emu_report_count() > rep0)
        fail = true, diag("^ emulator findings in %s", where);
    if (fail)
        S.bad++;
}

template <class T, int IN>
static void sweep(const std::vector<int> &rowsv, const std::vector<int> &colsv, bool quick)
{
    for (int rows : rowsv)
        for (int cols : colsv)
            for (float beta : {0.0f, 1.0f})
                one_case<T, IN>(rows, cols, beta, FILL_RANDOM, 0, -1, quick);
}

template <class T, int IN>
static void specials(const std::vector<int> &rowsv, const std::vector<int> &colsv, bool quick)
{
    for (int cols : colsv)
        for (int rows : rowsv) {
            one_case<T, IN>(rows, cols, 1.0f, FILL_SPECIAL_W, 0, -1, quick);
            one_case<T, IN>(rows, cols, 0.0f, FILL_SPECIAL_X, 0, -1, quick);
            one_case<T, IN>(rows, cols, 0.0f, FILL_OVF, 0, -1, quick);
            one_case<T, IN>(rows, cols, 0.0f, FILL_RANDOM, sizeof(T), -1, quick); // misaligned W
            one_case<T, IN>(rows, cols, 1.0f, FILL_RANDOM, 0, 0, quick); // scalar path forced
        }
}

// level -1 is the short form (the default): every path once, each row count's kind (one row, a
// whole pair, a partial last pair past a whole block's 16) and each length's (below a piece, a
// piece, a partial last piece, one segment, a partial last segment, several); 0 and up, the long
// form (suite 'slow'), every length of the sweep at every row count.
template <class T, int IN> static void all_for(int level)
{
    const long b0 = S.bad, c0 = S.cases;
    if (level < 0) {
        sweep<T, IN>({1, 2, 17}, {1, 7, 8, 9, 32, 257, 1024 + 8, 2048}, false);
        specials<T, IN>({3, 17}, {7, 64, 1032}, false);
    } else {
        sweep<T, IN>({1, 2, 3, 15, 16, 17},
                     {1, 7, 8, 9, 31, 32, 255, 256, 257, 1024 + 8, 2048, 5632, 8192}, false);
        specials<T, IN>({1, 3, 17}, {7, 8, 64, 257, 1032}, false);
    }
    if (level >= 1)
        sweep<T, IN>({4097}, {7, 257, 1032, 2048}, true);
    if (level >= 2)
        sweep<T, IN>({4097}, {5632, 8192}, true);
    ok(S.bad == b0,
       "%s %s: %ld product cases, each against float64, the separate kernels' staged input and "
       "range flag, over grids, block and thread orders, and at every split bit for bit "
       "(%ld failing)",
       tname<T>(), inname[IN], S.cases - c0, S.bad - b0);
}

// the reference of the fused epilogues: W (rows, dim) @ rmsnorm(x; nw) -> y (rows) at split 1
// (GV_Y), the product the separate kernels then work on
template <class T>
static void normed_rows(const buf<T> &W, int rows, int dim, int vec, const buf<float> &x,
                        const buf<float> &nw, float *y, int *ovf)
{
    emu_dyn.set_size(gv_smem_bytes(dim, (int)sizeof(T)));
    const int sk = G_SK;
    G_SK = 1;
    emu_launch("gemv_kernel<GV_Y>", std::min(((rows + 1) / 2 + 7) / 8, GV_BLOCKS), CK_THREADS, [&] {
        gemv_sk<T, GV_NORM, GV_Y>(W.p, rows, dim, vec, x.p, nw.p, 1e-5f, 0.0f, y, ovf, qkv_args{});
    });
    G_SK = sk;
}

// GV_QKV at split G_SK: the fused epilogue must store what the product at split 1 (GV_Y) followed
// by qkv_post_kernel stores, bit for bit
static long qkv_cases = 0, qkv_bad = 0;
template <class T>
static void qkv_case(int n_heads, int n_kv, int hd, int rope_dim, int neox, bool bias, int dim)
{
    qkv_cases++;
    const int q_dim = n_heads * hd, kv_dim = n_kv * hd, rows = q_dim + 2 * kv_dim, n_ctx = 7, p = 5;
    buf<T> W((size_t)rows * dim);
    for (size_t i = 0; i < (size_t)rows * dim; i++)
        W[i] = from_f32<T>((float)urand(-1, 1));
    buf<float> x(dim), nw(dim), bs(rows), cs(rope_dim / 2 * 2 + 1);
    for (int i = 0; i < dim; i++)
        x[i] = (float)urand(-3, 3), nw[i] = (float)urand(0.5, 1.5);
    for (int i = 0; i < rows; i++)
        bs[i] = (float)urand(-0.5, 0.5);
    for (int j = 0; j < rope_dim / 2; j++) {
        const double th = urand(0, 6.28);
        cs[2 * j] = (float)cos(th), cs[2 * j + 1] = (float)sin(th);
    }
    buf<int> pos(1), ovf(1);
    pos[0] = p;
    ovf[0] = 0;
    const int vec = dim % (int)(16 / sizeof(T)) == 0;
    auto mk = [&](float *kc, float *vc) {
        qkv_args a{}; // cache_f16 0: a float cache
        a.bias = bias ? bs.p : nullptr;
        a.pos = pos.p;
        a.cs = cs.p;
        a.kc = kc, a.vc = vc;
        a.n_heads = n_heads, a.n_kv = n_kv, a.hd = hd, a.rope_dim = rope_dim, a.neox = neox;
        return a;
    };
    // reference: product into the whole row, then qkv_post_kernel
    buf<float> row(rows), kc1((size_t)n_ctx * kv_dim), vc1((size_t)n_ctx * kv_dim);
    for (size_t i = 0; i < (size_t)n_ctx * kv_dim; i++)
        kc1[i] = vc1[i] = -7.0f;
    normed_rows(W, rows, dim, vec, x, nw, row.p, ovf.p);
    const qkv_args a1 = mk(kc1.p, vc1.p);
    emu_launch("qkv_post_kernel", 1, CK_THREADS, [&] { qkv_post_kernel(row.p, rows, a1); });
    const int items = rows / 2;
    const long rep0 = emu_report_count();
    bool bad = false;
    std::vector<float> q0;
    for (int run = 0; run < 3; run++) {
        buf<float> q(q_dim), kc2((size_t)n_ctx * kv_dim), vc2((size_t)n_ctx * kv_dim);
        for (int i = 0; i < q_dim; i++)
            q[i] = NAN;
        for (size_t i = 0; i < (size_t)n_ctx * kv_dim; i++)
            kc2[i] = vc2[i] = -7.0f;
        const qkv_args a2 = mk(kc2.p, vc2.p);
        const int grid = run == 0   ? std::min((items * G_SK + 7) / 8, GV_BLOCKS)
                         : run == 1 ? 1
                                    : (items * G_SK + 7) / 8 + 3;
        emu_order = run;
        emu_launch("gemv_kernel<GV_QKV>", grid, CK_THREADS, [&] {
            gemv_sk<T, GV_NORM, GV_QKV>(W.p, rows, dim, vec, x.p, nw.p, 1e-5f, 0.0f, q.p, ovf.p,
                                        a2);
        });
        emu_order = 0;
        for (int i = 0; i < q_dim; i++)
            if (bits(q[i]) != bits(row[i])) {
                if (!bad)
                    diag("QKV q[%d] %a vs %a", i, q[i], row[i]);
                bad = true;
            }
        for (size_t i = 0; i < (size_t)n_ctx * kv_dim; i++)
            if (bits(kc2[i]) != bits(kc1[i]) || bits(vc2[i]) != bits(vc1[i])) {
                if (!bad)
                    diag("QKV cache[%zu] k %a/%a v %a/%a", i, kc2[i], kc1[i], vc2[i], vc1[i]);
                bad = true;
            }
        S.runs++;
    }
    if (emu_report_count() > rep0)
        bad = true;
    if (bad) {
        qkv_bad++;
        diag("QKV FAIL %s heads %d kv %d hd %d rope %d neox %d bias %d dim %d vec %d", tname<T>(),
             n_heads, n_kv, hd, rope_dim, neox, (int)bias, dim, vec);
    }
}
template <class T> static void qkv_all()
{
    const long c0 = qkv_cases, b0 = qkv_bad;
    /* the short form: the larger shapes at two of the four rope and bias pairs, the other
     * element types (other loads, the same epilogue) and splits (other warps a group, the same
     * loads) on the rows of several segments only, and the other splits on f32 only */
    const bool f32 = sizeof(T) == 4;
    for (int neox : {0, 1})
        for (bool bias : {false, true}) {
            qkv_case<T>(3, 1, 8, 4, neox, bias, 100);
            if (G_SHORT && (neox != (int)bias || (G_SK > 1 && !f32)))
                continue;
            qkv_case<T>(4, 2, 64, 64, neox, bias, 1032); /* rows of 2 or 3 segments */
            if (G_SK > 1 || (G_SHORT && !f32)) /* the other splits: the same epilogue, sums */
                continue;
            qkv_case<T>(4, 2, 64, 64, neox, bias, 64);
            qkv_case<T>(4, 2, 64, 32, neox, bias, 72);
            qkv_case<T>(2, 2, 128, 128, neox, bias, 257);
            qkv_case<T>(8, 1, 16, 0, neox, bias, 40);
            qkv_case<T>(32, 4, 16, 16, neox, bias, 64);
        }
    ok(qkv_bad == b0,
       "%s Q/K/V at split %d: %ld cases (NORMAL and NEOX rope, partial rope, bias, GQA) store the "
       "separate kernels' q, k and v bit for bit (%ld failing)",
       tname<T>(), G_SK, qkv_cases - c0, qkv_bad - b0);
}

// GV_GLU at split G_SK: the gate/up product with its SwiGLU must store what the product at split 1
// (GV_Y, into the stacked gate/up row) followed by gated_kernel stores, bit for bit, and set the
// range flag exactly when they do
static long glu_cases = 0, glu_bad = 0;
enum { GLU_RANDOM, GLU_SPECIAL, GLU_OVF };
template <class T> static void glu_case(int ff, int dim, int fill)
{
    glu_cases++;
    const int rows = 2 * ff;
    buf<T> W((size_t)rows * dim);
    for (size_t i = 0; i < (size_t)rows * dim; i++)
        W[i] = from_f32<T>((float)urand(-1, 1));
    buf<float> x(dim), nw(dim);
    for (int i = 0; i < dim; i++)
        x[i] = (float)urand(-3, 3), nw[i] = (float)urand(0.5, 1.5);
    if (fill == GLU_SPECIAL) { // a NaN gate, an infinite up row, a gate of -inf (silu: NaN)
        W[0] = from_f32<T>(NAN);
        W[(size_t)ff * dim + (size_t)(ff - 1) * dim] = from_f32<T>(INFINITY);
        if (ff > 2)
            W[(size_t)1 * dim] = from_f32<T>(-INFINITY);
    }
    if (fill == GLU_OVF) // gate and up rows of large weights: a SwiGLU beyond f16's range
        for (int k = 0; k < dim; k++) {
            const T big = from_f32<T>(x[k] > 0 ? 40.0f : -40.0f);
            W[(size_t)(ff / 2) * dim + k] = W[(size_t)(ff + ff / 2) * dim + k] = big;
        }
    const int vec = dim % (int)(16 / sizeof(T)) == 0;
    // reference: the product into the gate/up row, then gated_kernel
    buf<float> gu(rows);
    buf<T> h_ref(ff);
    buf<int> ovf_ref(1);
    ovf_ref[0] = 0;
    normed_rows(W, rows, dim, vec, x, nw, gu.p, ovf_ref.p);
    emu_launch("gated_kernel", 1, CK_THREADS,
               [&] { gated_kernel<T, 0>(gu.p, ff, 1, h_ref.p, ovf_ref.p); });
    const long rep0 = emu_report_count();
    bool bad = false;
    for (int run = 0; run < 3; run++) {
        buf<T> h(ff + 8);
        for (int i = 0; i < ff + 8; i++)
            h[i] = from_f32<T>(-7.0f);
        buf<int> ovf(1);
        ovf[0] = 0;
        const int natural = std::min((ff * G_SK + GV_WARPS - 1) / GV_WARPS, GV_BLOCKS);
        const int grid = run == 0 ? natural : run == 1 ? 1 : natural + 3;
        emu_order = run;
        emu_launch("gemv_kernel<GV_GLU>", grid, CK_THREADS, [&] {
            gemv_sk<T, GV_NORM, GV_GLU>(W.p, rows, dim, vec, x.p, nw.p, 1e-5f, 0.0f, h.p, ovf.p,
                                        qkv_args{});
        });
        emu_order = 0;
        for (int i = 0; i < ff && !bad; i++)
            if (bits(h[i]) != bits(h_ref[i]))
                bad = true,
                diag("GLU h[%d] %a vs %a", i, (double)to_f32(h[i]), (double)to_f32(h_ref[i]));
        for (int i = ff; i < ff + 8 && !bad; i++)
            if (bits(h[i]) != bits(from_f32<T>(-7.0f)))
                bad = true, diag("GLU h[%d] past the end written", i);
        if (ovf[0] != ovf_ref[0] && !bad)
            bad = true, diag("GLU range flag %d vs %d", ovf[0], ovf_ref[0]);
        S.runs++;
    }
    if (emu_report_count() > rep0)
        bad = true;
    if (bad) {
        glu_bad++;
        diag("GLU FAIL %s ff %d dim %d fill %d vec %d split %d", tname<T>(), ff, dim, fill, vec,
             G_SK);
    }
}
template <class T> static void glu_all()
{
    const long c0 = glu_cases, b0 = glu_bad;
    /* the short form: no 2056 or 40 (more of the same segments and items), the other splits on
     * f32 only */
    if (G_SHORT && G_SK > 1 && sizeof(T) != 4)
        return;
    for (int dim : {1, 7, 64, 257, 1032, 2056})
        for (int ff : {1, 2, 3, 17, 40}) {
            if (G_SK > 1 && dim < 257) /* the other splits: the rows of several segments */
                continue;
            if (G_SHORT && (dim == 2056 || ff == 40))
                continue;
            glu_case<T>(ff, dim, GLU_RANDOM);
            if (ff >= 3 && dim >= 7) {
                glu_case<T>(ff, dim, GLU_SPECIAL);
                glu_case<T>(ff, dim, GLU_OVF);
            }
        }
    ok(glu_bad == b0,
       "%s gate/up + SwiGLU at split %d: %ld cases (NaN and infinite rows, a SwiGLU past f16's "
       "range) store what the product and gated_kernel store, bit for bit, with the same range "
       "flag (%ld failing)",
       tname<T>(), G_SK, glu_cases - c0, glu_bad - b0);
}

// qk_norm_kernel (qwen3's per-head q/k norms): the bias, then each q and k head normed as the
// CPU's add_bias + qk_norm (sequential double sum of squares, x * scale * w), bit for bit; the v
// heads get their bias only; the other tokens' rows and the elements past ld are untouched
static long qkn_cases = 0, qkn_bad = 0;
static void qk_norm_case(int n_heads, int n_kv, int hd, bool bias, int n)
{
    qkn_cases++;
    const int q_dim = n_heads * hd, kv_dim = n_kv * hd, rows = q_dim + 2 * kv_dim, ld = rows + 3;
    const float eps = 1e-6f;
    buf<float> x((size_t)n * ld), ref((size_t)n * ld), bs(rows), qn(hd), kn(hd);
    for (size_t i = 0; i < (size_t)n * ld; i++)
        x[i] = ref[i] = (float)urand(-4, 4);
    for (int i = 0; i < rows; i++)
        bs[i] = (float)urand(-0.5, 0.5);
    for (int i = 0; i < hd; i++)
        qn[i] = (float)urand(0.5, 1.5), kn[i] = (float)urand(-1.5, 1.5);
    for (int t = 0; t < n; t++) { // the CPU's order (gpu/cpu/backend_cpu.c, rmsnorm_c)
        float *r = ref.p + (size_t)t * ld;
        for (int e = 0; bias && e < rows; e++)
            r[e] += bs[e];
        for (int h = 0; h < n_heads + n_kv; h++) {
            float *v = r + (size_t)h * hd;
            const float *w = h < n_heads ? qn.p : kn.p;
            double ss = 0.0;
            for (int k = 0; k < hd; k++)
                ss += (double)v[k] * v[k];
            const float scale = (float)(1.0 / sqrt(ss / (double)hd + eps));
            for (int k = 0; k < hd; k++)
                v[k] = v[k] * scale * w[k];
        }
    }
    const unsigned heads = (unsigned)(n_heads + n_kv * (bias ? 2 : 1));
    const long rep0 = emu_report_count();
    emu_launch2("qk_norm_kernel", (unsigned)n, heads, 32, [&] {
        qk_norm_kernel(x.p, ld, bias ? bs.p : nullptr, qn.p, kn.p, n_heads, n_kv, hd, eps);
    });
    bool bad = emu_report_count() > rep0;
    for (size_t i = 0; i < (size_t)n * ld && !bad; i++)
        if (bits(x[i]) != bits(ref[i])) {
            diag("q/k norm: element %zu of row %zu: %a vs %a", i % ld, i / ld, x[i], ref[i]);
            bad = true;
        }
    if (bad) {
        qkn_bad++;
        diag("q/k norm FAIL heads %d kv %d hd %d bias %d n %d", n_heads, n_kv, hd, (int)bias, n);
    }
}

// gemma's element kernels against the CPU backend's arithmetic (gpu/cpu/backend_cpu.c), bit for
// bit: the embedding times sqrt(dim) (embed), the norm after a sublayer added to the residual
// (post_norm, then x += y), the GELU gate in its tanh form (gated) and the logits' soft-cap
// (cap_logits); the emulator's tanhf is the host's, as the CPU's is
static void gemma_elt_checks()
{
    const int dim = 300, n = 3, ff = 77, V = 50;
    const float eps = 1e-6f, scale = sqrtf((float)dim), cap = 30.0f;
    buf<float> emb((size_t)V * dim), x((size_t)n * dim), ref((size_t)n * dim), y((size_t)n * dim),
        w(dim), gu((size_t)n * 2 * ff), hb((size_t)n * ff), lg((size_t)n * V), lref((size_t)n * V);
    buf<int> tok(n), ovf(1);
    for (size_t i = 0; i < (size_t)V * dim; i++)
        emb[i] = (float)urand(-1, 1);
    for (int i = 0; i < n; i++)
        tok[i] = (i * 17 + 3) % V;
    ovf[0] = 0;
    const long rep0 = emu_report_count();
    bool e_ok = true, p_ok = true, g_ok = true, c_ok = true;
    emu_launch("embed_kernel", n, CK_THREADS,
               [&] { embed_kernel<float>(emb.p, tok.p, dim, scale, x.p); });
    for (int i = 0; i < n; i++)
        for (int k = 0; k < dim; k++)
            e_ok &= bits(x[(size_t)i * dim + k]) == bits(emb[(size_t)tok[i] * dim + k] * scale);
    for (size_t i = 0; i < (size_t)n * dim; i++)
        ref[i] = x[i], y[i] = (float)urand(-20, 20);
    for (int k = 0; k < dim; k++)
        w[k] = (float)urand(0.5, 1.5);
    for (int i = 0; i < n; i++) { // rmsnorm_c, then the residual add
        const float *yr = y.p + (size_t)i * dim;
        double ss = 0.0;
        for (int k = 0; k < dim; k++)
            ss += (double)yr[k] * yr[k];
        const float sc = (float)(1.0 / sqrt(ss / (double)dim + eps));
        for (int k = 0; k < dim; k++)
            ref[(size_t)i * dim + k] += yr[k] * sc * w[k];
    }
    emu_launch("post_norm_add_kernel", n, CK_THREADS,
               [&] { post_norm_add_kernel(x.p, y.p, w.p, dim, eps); });
    for (size_t i = 0; i < (size_t)n * dim; i++)
        p_ok &= bits(x[i]) == bits(ref[i]);
    for (size_t i = 0; i < (size_t)n * 2 * ff; i++)
        gu[i] = (float)urand(-6, 6);
    gu[5] = 40.0f, gu[6] = -40.0f; // tanh saturated both ways
    emu_launch("gated_kernel<GELU>", 2, CK_THREADS,
               [&] { gated_kernel<float, 1>(gu.p, ff, n, hb.p, ovf.p); });
    for (int i = 0; i < n; i++)
        for (int k = 0; k < ff; k++) {
            const float g = gu[(size_t)i * 2 * ff + k], u = gu[(size_t)i * 2 * ff + ff + k];
            const float want =
                0.5f * g * (1.0f + tanhf(0.7978845608f * (g + 0.044715f * g * g * g))) * u;
            g_ok &= bits(hb[(size_t)i * ff + k]) == bits(want);
        }
    for (size_t i = 0; i < (size_t)n * V; i++)
        lg[i] = (float)urand(-200, 200), lref[i] = cap * tanhf(lg[i] / cap);
    emu_launch("softcap_kernel", 1, CK_THREADS, [&] { softcap_kernel(lg.p, (size_t)n * V, cap); });
    for (size_t i = 0; i < (size_t)n * V; i++)
        c_ok &= bits(lg[i]) == bits(lref[i]);
    ok(e_ok && p_ok && g_ok && c_ok && ovf[0] == 0 && emu_report_count() == rep0,
       "gemma's element kernels give the CPU's bits: the embedding times sqrt(dim) %d, the "
       "post-norm added to the residual %d, the GELU gate %d, the logits' soft-cap %d",
       (int)e_ok, (int)p_ok, (int)g_ok, (int)c_ok);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, nullptr, _IOLBF, 0);
    // no argument: the short form; `long` or a LEVEL: the long form; `slow`: the long form if
    // CAIRN_SLOW is set, else a skip (how the suite 'slow' runs it, so a plain `meson test` does
    // not)
    const char *a = argc > 1 ? argv[1] : nullptr;
    if (a && strcmp(a, "slow") == 0 && !getenv("CAIRN_SLOW"))
        tap_skip_all("the long form runs with CAIRN_SLOW=1 (meson test --suite slow)");
    const int level = !a ? -1 : isdigit((unsigned char)a[0]) ? atoi(a) : 0;
    G_SHORT = level < 0;
    all_for<float, GV_PLAIN>(level), all_for<float, GV_NORM>(level);
    all_for<__half, GV_PLAIN>(level), all_for<__half, GV_NORM>(level);
    all_for<__nv_bfloat16, GV_PLAIN>(level), all_for<__nv_bfloat16, GV_NORM>(level);
    diag("products: %ld cases, %ld runs (%ld at other splits); coverage: 16-byte path %ld cases, "
         "element "
         "path %ld, range flag set %ld, rows NaN %ld, inf %ld, finite %ld",
         S.cases, S.runs, S.xsplit_runs, S.vec1, S.vec0, S.ovf1, S.nanrows, S.infrows, S.finrows);
    diag("largest error / (n_eff 2^-24 sum|w x|) = %.4f at %s (the bound is 1)", S.worst,
         S.worst_at.c_str());
    for (int sk : {1, 2, 4, 8}) {
        G_SK = sk;
        qkv_all<float>(), qkv_all<__half>(), qkv_all<__nv_bfloat16>();
        glu_all<float>(), glu_all<__half>(), glu_all<__nv_bfloat16>();
    }
    for (bool bias : {false, true}) {
        qk_norm_case(4, 2, 64, bias, 3);  // qwen3's shape in small: GQA 2:1
        qk_norm_case(2, 2, 128, bias, 2); // a head of 128 (qwen3's)
        qk_norm_case(8, 1, 16, bias, 1);  // a head shorter than the warp
        qk_norm_case(3, 1, 256, bias, 2); // the largest head
        qk_norm_case(2, 1, 40, bias, 2);  // a head not a multiple of 32
    }
    gemma_elt_checks();
    ok(qkn_bad == 0,
       "q/k norm: %ld cases (heads of 16 to 256, GQA, with and without a bias) give the CPU's "
       "add_bias + qk_norm bit for bit, the v heads their bias only (%ld failing)",
       qkn_cases, qkn_bad);
    ok(emu_report_count() == 0,
       "the emulator saw no shared-memory race, out-of-bounds or uninitialised read, misaligned "
       "load, "
       "barrier or shuffle divergence (%ld findings, printed above)",
       emu_report_count());
    return tap_done();
}
