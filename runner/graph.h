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

#endif
