/* runner/graph.h - graph internals shared by the runner (not public). */
#ifndef CAIRN_RUNNER_GRAPH_H
#define CAIRN_RUNNER_GRAPH_H

#include "cairn.h"

struct cairn_step {
    char name[65];
    uint32_t version;
    cairn_step_fn fn;
    cairn_probe_fn probe;
    void *user;
    cairn_delivery delivery;
    uint32_t max_invocations, base_ms, cap_ms, timeout_ms;
    uint32_t budget_ms; /* cairn_step_set_retry_budget; 0: none */
    int expensive;
    char *deps_text;
    size_t n_deps;
    size_t *deps; /* indexes into graph->steps, filled by validate */
    size_t index;
    /* the graph it belongs to: the step's setters check that it is not frozen */
    struct cairn_graph *graph;
};

struct cairn_graph {
    char name[65];
    uint32_t version;
    cairn_step **steps;
    size_t n_steps, cap;
    size_t *order; /* topological order (ties: definition order), filled by validate */
    int validated;
    int frozen; /* registered with a runner (cairn_runner_add_graph): read-only from then on */
    char fingerprint[65];
    char pin[1024]; /* "name@version,..." in topological order */
    char err[512];
};

int cairn__name_ok(const char *name);
cairn_step *cairn__graph_step(const cairn_graph *g, const char *name);
/* Delay before the next invocation after `invocations` failed ones (full jitter). */
uint32_t cairn__backoff_ms(const cairn_step *s, uint32_t invocations, uint64_t *rng);
/* A time budget's arithmetic, for a step that has been tried since start_ms (its budget ends at
 * start_ms + s->budget_ms) and failed transiently at now_ms: the wait before its next try is the
 * backoff, at least the step's Retry-After, and never past the budget's end. Returns 0 with the
 * wait in *wait_ms; 1 when the budget is spent (now at or past its end); 2 when the Retry-After
 * asked for reaches past its end (*wait_ms then holds the time left). */
int cairn__budget_wait(const cairn_step *s, int64_t start_ms, int64_t now_ms, uint32_t backoff_ms,
                       uint32_t retry_after_ms, uint32_t *wait_ms);

#endif
