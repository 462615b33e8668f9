// tests/gpu/emu/emu.cpp - the scheduler of emu.hpp: one block at a time, every thread a ucontext
// fiber run until it reaches a barrier, a warp collective or its end; a barrier releases when every
// live thread waits at it, a collective when all 32 lanes of the warp have arrived at the same one.
#include "emu.hpp"

#include <algorithm>
#include <cstdarg>
#include <map>
#include <random>

emu_uint3 threadIdx, blockIdx, blockDim, gridDim;
const char *emu_kernel = "";
long emu_phase = 0;
int emu_order = 0;
emu_dyn_t emu_dyn;
std::function<void(unsigned)> emu_block_end;

static std::map<std::string, long> g_reports;
void emu_report(const char *kind, const std::string &msg)
{
    const std::string k = std::string(kind) + ": " + msg;
    if (g_reports[k]++ == 0)
        fprintf(stderr, "[emu] %s\n", k.c_str());
}
long emu_report_count() { return (long)g_reports.size(); }
void emu_reportf(const char *kind, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    emu_report(kind, buf);
}

static std::vector<emu_shared_base *> &registry()
{
    static std::vector<emu_shared_base *> r;
    return r;
}
void emu_register(emu_shared_base *s) { registry().push_back(s); }

enum st { RUN, BAR, WARP, DONE };
struct fiber {
    ucontext_t ctx;
    char *stack;
    int state, line, op, off, width;
    unsigned mask;
    uint64_t in, out;
};
static const size_t STACK = 256 * 1024;
static std::vector<fiber> F;
static struct stacks_free { // the fibers' stacks, kept from launch to launch, freed at exit
    ~stacks_free()
    {
        for (auto &f : F)
            free(f.stack);
    }
} stacks_free_at_exit;
static ucontext_t sched;
static unsigned cur;
static std::function<void()> *g_body;
#if EMU_ASAN
static void *fake_stack_sched;
#endif

unsigned emu_tid() { return cur; }

static void to_sched()
{
#if EMU_ASAN
    void *fs = nullptr;
    __sanitizer_start_switch_fiber(&fs, nullptr, 0);
    swapcontext(&F[cur].ctx, &sched);
    __sanitizer_finish_switch_fiber(fs, nullptr, nullptr);
#else
    swapcontext(&F[cur].ctx, &sched);
#endif
}

static void trampoline()
{
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
    (*g_body)();
    F[cur].state = DONE;
#if EMU_ASAN
    __sanitizer_start_switch_fiber(nullptr, nullptr, 0); // this fiber ends
#endif
    setcontext(&sched);
}

void emu_sync(int line)
{
    F[cur].state = BAR;
    F[cur].line = line;
    to_sched();
}

uint64_t emu_warp_coll(int op, unsigned mask, uint64_t bits, int off, int width, int line)
{
    fiber &f = F[cur];
    f.state = WARP, f.op = op, f.mask = mask, f.in = bits, f.off = off, f.width = width,
    f.line = line;
    to_sched();
    return F[cur].out;
}

static void run_fiber(unsigned t)
{
    cur = t;
    threadIdx = {t, 0, 0};
#if EMU_ASAN
    __sanitizer_start_switch_fiber(&fake_stack_sched, F[t].stack, STACK);
    swapcontext(&sched, &F[t].ctx);
    __sanitizer_finish_switch_fiber(fake_stack_sched, nullptr, nullptr);
#else
    swapcontext(&sched, &F[t].ctx);
#endif
}

static std::mt19937 rng(12345);

void emu_launch(const char *name, unsigned grid, unsigned block, std::function<void()> body)
{
    emu_launch2(name, grid, 1, block, body);
}

void emu_launch2(const char *name, unsigned gx, unsigned gy, unsigned block,
                 std::function<void()> body)
{
    const unsigned grid = gx * gy;
    emu_kernel = name;
    g_body = &body;
    gridDim = {gx, gy, 1};
    blockDim = {block, 1, 1};
    if (F.size() < block) {
        size_t old = F.size();
        F.resize(block);
        for (size_t i = old; i < block; i++)
            F[i].stack = (char *)malloc(STACK);
    }
    std::vector<unsigned> order(block), border(grid);
    for (unsigned b = 0; b < grid; b++)
        border[b] = emu_order == 1 ? grid - 1 - b : b;
    if (emu_order == 2)
        std::shuffle(border.begin(), border.end(), rng);
    for (unsigned bi = 0; bi < grid; bi++) {
        const unsigned b = border[bi];
        blockIdx = {b % gx, b / gx, 0};
        for (auto *s : registry())
            s->launch_reset();
        emu_phase = 0;
        for (unsigned t = 0; t < block; t++) {
            fiber &f = F[t];
            getcontext(&f.ctx);
            f.ctx.uc_stack.ss_sp = f.stack;
            f.ctx.uc_stack.ss_size = STACK;
            f.ctx.uc_link = nullptr;
            makecontext(&f.ctx, trampoline, 0);
            f.state = RUN;
        }
        for (;;) {
            for (unsigned t = 0; t < block; t++)
                order[t] = emu_order == 1 ? block - 1 - t : t;
            if (emu_order == 2)
                std::shuffle(order.begin(), order.end(), rng);
            for (unsigned t : order)
                if (F[t].state == RUN)
                    run_fiber(t);
            // warp collectives: complete when every lane of the warp has arrived
            bool released = false;
            for (unsigned w0 = 0; w0 < block; w0 += 32) {
                const unsigned w1 = std::min(block, w0 + 32);
                unsigned nwarp = 0;
                for (unsigned t = w0; t < w1; t++)
                    nwarp += F[t].state == WARP;
                if (nwarp == 0)
                    continue;
                if (w1 - w0 < 32) {
                    emu_report("PARTIAL-WARP",
                               std::string(name) + ": full-mask shuffle in a partial warp");
                }
                if (nwarp != w1 - w0)
                    continue; // others not there yet (or never: checked below)
                const fiber &a = F[w0];
                for (unsigned t = w0; t < w1; t++)
                    if (F[t].line != a.line || F[t].op != a.op ||
                        (F[t].off != a.off && a.op != EMU_IDX) || F[t].mask != 0xffffffffu)
                        emu_report("WARP-DIVERGENCE",
                                   std::string(name) + ": lanes of one warp at different shuffles");
                for (unsigned t = w0; t < w1; t++) {
                    const int lane = (int)(t - w0), off = F[t].off;
                    int src = lane;
                    if (F[t].op == EMU_XOR)
                        src = lane ^ off;
                    else if (F[t].op == EMU_UP)
                        src = lane - off >= 0 ? lane - off : lane; // lanes < delta keep their own
                    else if (F[t].op == EMU_IDX)
                        src = off & 31; // the lane named
                    if (src >= (int)(w1 - w0))
                        src = lane;
                    F[t].out = F[w0 + src].in;
                    F[t].state = RUN;
                }
                released = true;
            }
            if (released)
                continue;
            unsigned live = 0, bar = 0, done = 0, warp = 0;
            int line = -1;
            bool lines_differ = false;
            for (unsigned t = 0; t < block; t++) {
                if (F[t].state == DONE)
                    done++;
                else {
                    live++;
                    if (F[t].state == BAR) {
                        bar++;
                        if (line >= 0 && F[t].line != line)
                            lines_differ = true;
                        line = F[t].line;
                    } else if (F[t].state == WARP)
                        warp++;
                }
            }
            if (live == 0)
                break;
            if (bar == live) {
                if (done)
                    emu_report("BARRIER-DIVERGENCE",
                               std::string(name) + ": __syncthreads at line " +
                                   std::to_string(line) + " reached while " + std::to_string(done) +
                                   " threads have exited");
                if (lines_differ)
                    emu_report("BARRIER-DIVERGENCE",
                               std::string(name) + ": threads wait at different __syncthreads");
                for (unsigned t = 0; t < block; t++)
                    if (F[t].state == BAR)
                        F[t].state = RUN;
                for (auto *s : registry())
                    s->phase_reset();
                emu_phase++;
                continue;
            }
            emu_report("DEADLOCK", std::string(name) + ": warp collective never completes (" +
                                       std::to_string(warp) + " lanes waiting)");
            abort();
        }
        if (emu_block_end)
            emu_block_end(b);
    }
}
