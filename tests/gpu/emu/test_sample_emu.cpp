// tests/gpu/emu/test_sample_emu.cpp - the device sampler (gpu/cuda/sample_cuda.cuh) run lane by
// lane on the CPU (the emulator of emu.hpp; suite 'unit': no GPU needed).
//
// The step the backend launches after the output head (enqueue_sampling in
// gpu/cuda/backend_forward.cuh): penalty_kernel, then argmax_kernel (greedy, top-k 1), or
// keys_kernel, the descending radix sort of the keys (here std::sort of the same 64-bit keys: the
// order CUB gives, ties in ascending id), weights_kernel and finish_kernel. Over awkward logits
// (smooth, long runs of ties, NaN, -inf, +inf, signed zeros: tests/model/sample_check.h),
// temperatures, top-k, top-p, penalties and two draws (one at the very tail), each pick must be the
// host sampler's, or within rounding of the draw's boundary (mk_pick_agrees, as the gpu test holds
// the device to). Also: no shared-memory race, out-of-bounds or uninitialised read, barrier or
// shuffle divergence. `test_sample_emu` runs the short form (suite 'unit': a vocabulary of 5003
// tokens); `test_sample_emu long` also real vocabularies' sizes, Llama 2's 32000 and Qwen2.5's
// 151936 (suite 'slow' runs it as `slow`, which skips unless CAIRN_SLOW is set).
#include "sample_emu.cuh"

#include <algorithm>
#include <functional>
#include <vector>

#include "tests/tap.h"
extern "C" {
#include "tests/model/sample_check.h"
}

long emu_report_count();

// the device's pick for q over logits lg (n), as enqueue_sampling runs it
static int32_t device_pick(const cairn__sample_req *q, const float *lg, int n)
{
    std::vector<float> logits(lg, lg + n);
    sample_in in = {};
    in.temperature = q->temperature;
    in.top_p = q->top_p;
    in.penalty = q->repeat_penalty;
    in.top_k = q->top_k;
    in.r = q->r;
    in.n_pen = q->n_pen;
    std::copy(q->pen, q->pen + q->n_pen, in.pen);
    int next = -1;
    emu_launch("penalty_kernel", 1, 256, [&] { penalty_kernel(logits.data(), &in); });
    if (q->temperature <= 0.0f || q->top_k == 1) { /* sample_kind: STEP_GREEDY */
        emu_launch("argmax_kernel", 1, SAMPLE_THREADS,
                   [&] { argmax_kernel(logits.data(), n, &next); });
        return next;
    }
    std::vector<uint64_t> keys(n);
    std::vector<double> w(n);
    const unsigned grid = (unsigned)std::min((n + 255) / 256, 8); /* grid-stride: a few blocks */
    emu_launch("keys_kernel", grid, 256, [&] { keys_kernel(logits.data(), n, keys.data()); });
    std::sort(keys.begin(), keys.end(), std::greater<uint64_t>());
    emu_launch("weights_kernel", grid, 256, [&] { weights_kernel(keys.data(), n, &in, w.data()); });
    emu_launch("finish_kernel", 1, SAMPLE_THREADS,
               [&] { finish_kernel(keys.data(), w.data(), n, &in, &next); });
    return next;
}

/* every setting over nv tokens */
static void vocabulary(int nv)
{
    const float temps[] = {0.0f, 0.7f, 4.0f};
    const int topks[] = {0, 1, 40, nv};
    const float topps[] = {1.0f, 0.9f, 1e-4f};
    const float pens[] = {1.0f, 1.3f};
    std::vector<int32_t> pen(300);
    for (int i = 0; i < 300; i++)
        pen[i] = (int32_t)((i * 7919) % nv); /* distinct: 7919 does not divide nv */
    std::vector<float> lg(nv), pl(nv);
    int cases = 0, fails = 0, near = 0, errors = 0;
    uint64_t seed = 11;
    for (int kind = 0; kind < 4; kind++) {
        const int fails0 = fails;
        for (float t : temps)
            for (int k : topks)
                for (float tp : topps)
                    for (float pe : pens) {
                        cairn__sampler_params p;
                        cairn__sampler_params_default(&p);
                        p.temperature = t;
                        p.top_k = k;
                        p.top_p = tp;
                        p.repeat_penalty = pe;
                        cairn__sampler *hs = NULL;
                        if (cairn__sampler_new(&p, nv, &hs) != 0) {
                            errors++;
                            continue;
                        }
                        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                        mk_awkward_logits(lg.data(), nv, seed, kind);
                        const int np = pe != 1.0f ? 300 : 0;
                        pl = lg;
                        for (int i = 0; i < np; i++)
                            pl[pen[i]] = cairn__sample_penalize(pl[pen[i]], pe);
                        for (int d = 0; d < 2; d++) { /* a random draw, and the very tail */
                            const double r = d ? 1.0 - 0x1.0p-53 : (double)(seed >> 11) * 0x1.0p-53;
                            cairn__sample_req q = {};
                            q.temperature = t;
                            q.top_k = k;
                            q.top_p = tp;
                            q.repeat_penalty = pe;
                            q.r = r;
                            q.pen = pen.data();
                            q.n_pen = np;
                            const int32_t got = device_pick(&q, lg.data(), nv);
                            if (!mk_pick_agrees(hs, pl.data(), nv, r, got, &near) && fails++ < 5)
                                diag("kind %d t %g k %d p %g pen %g r %.17g: device %d, host %d",
                                     kind, (double)t, k, (double)tp, (double)pe, r, got,
                                     cairn__sampler_pick(hs, pl.data(), r));
                            cases++;
                        }
                        cairn__sampler_free(hs);
                    }
        ok(fails == fails0,
           "%d tokens, logits of kind %d: every pick of the device sampler is the host's, or "
           "within rounding of the draw (%d failing)",
           nv, kind, fails - fails0);
    }
    diag("%d cases over %d tokens, %d within rounding, %d errors", cases, nv, near, errors);
    ok(errors == 0, "%d tokens: every host sampler was made (%d errors)", nv, errors);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, nullptr, _IOLBF, 0);
    // no argument: the short form; `long`: the long form; `slow`: the long form if CAIRN_SLOW is
    // set, else a skip (how the suite 'slow' runs it, so a plain `meson test` does not)
    const char *a = argc > 1 ? argv[1] : nullptr;
    if (a && strcmp(a, "slow") == 0 && !getenv("CAIRN_SLOW"))
        tap_skip_all("the long form runs with CAIRN_SLOW=1 (meson test --suite slow)");
    vocabulary(5003); /* odd, and more than SAMPLE_THREADS * CAIRN__SAMPLE_AHEAD */
    if (a) {
        vocabulary(32000);
        vocabulary(151936);
    }
    ok(emu_report_count() == 0,
       "the emulator saw no shared-memory race, out-of-bounds or uninitialised read, barrier or "
       "shuffle divergence (%ld findings, on stderr)",
       emu_report_count());
    return tap_done();
}
