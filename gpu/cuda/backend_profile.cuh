/* gpu/cuda/backend_profile.cuh - the profile (CAIRN_CUDA_PROFILE=1): every step runs eagerly
 * with an event after each operation, and the time per operation (summed over the layers) goes
 * to stderr when the backend is freed: where a decode step's time goes, from one run (the
 * graph's own speed is bench-llm's). LAUNCHED, the check after every kernel launch, marks the
 * operation's end here.
 *
 * A part of backend_cuda.cu's one translation unit (a unity build, gpu/meson.build): included
 * there only, after backend_state.cuh, so it has no include guard and includes nothing itself.
 */

/* ---- the profile (CAIRN_CUDA_PROFILE) ---- */

static void prof_mark(cuda_backend *b, const char *what)
{
    if (b->prof_n < 0 || b->prof_n >= PROF_MAX)
        return;
    if (cudaEventRecord(b->prof_ev[b->prof_n], b->stream) == cudaSuccess)
        b->prof_at[b->prof_n++] = what;
}

static void prof_begin(cuda_backend *b)
{
    if (!b->prof)
        return;
    b->prof_n = 0;
    prof_mark(b, "start");
}

/* after the step's synchronisation: its events into the bins */
static void prof_end(cuda_backend *b, int prompt)
{
    if (b->prof_n < 0)
        return;
    for (int i = 1; i < b->prof_n; i++) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, b->prof_ev[i - 1], b->prof_ev[i]) != cudaSuccess)
            continue;
        int k = 0;
        while (k < b->prof_bins && strcmp(b->prof_name[k], b->prof_at[i]) != 0)
            k++;
        if (k == b->prof_bins) {
            if (k == PROF_BINS)
                continue;
            b->prof_name[b->prof_bins++] = b->prof_at[i];
        }
        b->prof_ms[prompt][k] += ms;
    }
    b->prof_steps[prompt]++;
    b->prof_n = -1;
    (void)cudaGetLastError();
}

static void prof_print(const cuda_backend *b)
{
    static const char *const what[2] = {"decode step", "prompt chunk"};
    for (int p = 0; p < 2; p++) {
        if (!b->prof_steps[p])
            continue;
        double total = 0.0;
        for (int k = 0; k < b->prof_bins; k++)
            total += b->prof_ms[p][k];
        fprintf(stderr, "cuda profile: %d %ss (eager, %s): %.1f us each\n", b->prof_steps[p],
                what[p], DT_NAME[b->dt], 1e3 * total / b->prof_steps[p]);
        for (int k = 0; k < b->prof_bins; k++) {
            if (b->prof_ms[p][k] <= 0.0)
                continue;
            char note[48] = "";
            for (int j = 0; j < b->prof_gv_n; j++)
                if (p == 0 && strcmp(b->prof_gv[j], b->prof_name[k]) == 0)
                    snprintf(note, sizeof note, "   split %d, %d blocks", b->prof_gv_sk[j],
                             b->prof_gv_grid[j]);
            fprintf(stderr, "  %-34s %9.1f us %5.1f%%%s\n", b->prof_name[k],
                    1e3 * b->prof_ms[p][k] / b->prof_steps[p], 100.0 * b->prof_ms[p][k] / total,
                    note);
        }
    }
}

/* after a kernel launch: launch-configuration errors surface here, execution errors at the
 * next synchronisation; a profiled step marks the operation's end */
#define LAUNCHED(b, what)                                                                          \
    do {                                                                                           \
        CU(b, cudaGetLastError(), what);                                                           \
        prof_mark(b, what);                                                                        \
    } while (0)
