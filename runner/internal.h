/* runner/internal.h - structures shared by the runner's files (not public). */
#ifndef CAIRN_RUNNER_INTERNAL_H
#define CAIRN_RUNNER_INTERNAL_H

#include <signal.h>

#include "cairn.h"
#include "checkpoint/store.h"
#include "runner/graph.h"

struct cairn_runner {
    cairn_graph **graphs;
    size_t n_graphs;
    cairn_store *store;
    uint32_t max_attempts, lease_ms, inline_wait_ms, tenant_max;
    char tenant_field[CAIRN__NAME_MAX + 1];
    int allow_graph_change, opened;
    uint64_t retention_s, tombstone_s;
    cairn__owner me;
    uint64_t rng;
    volatile sig_atomic_t stop;
    char note[512]; /* informational message of the last successful call (e.g. "already succeeded")
                     */
    char err[1024];
};

/* One dependency output handed to a step. */
typedef struct cairn__dep {
    const char *name;
    void *bytes;
    msgpack_unpacked u;
    int present;
} cairn__dep;

struct cairn_ctx {
    cairn_runner *r;
    const char *task_id;
    const cairn_step *step;
    uint32_t generation, invocation, attempt;
    uint64_t lease_token;
    char delivery_id[40];
    void *input_bytes;
    msgpack_unpacked input;
    cairn__dep *deps;
    size_t n_deps;
    void *progress_bytes;
    msgpack_unpacked progress;
    int has_progress;
    msgpack_sbuffer out;
    msgpack_packer pk;
    int out_set;
    int child_fd;  /* >= 0 when the step runs in an isolated child: progress goes to the parent */
    int last_step; /* the graph's last step: its commit also marks the task succeeded */
    int finished;  /* that commit happened */
    char err[CAIRN__ERR_MAX];
};

/* The outcome of one invocation. */
typedef struct cairn__outcome {
    cairn_step_result result;
    int timed_out, crashed;
    char *out;
    size_t out_len;
    char err[CAIRN__ERR_MAX];
} cairn__outcome;

/* lease.c */
void cairn__owner_self(cairn__owner *o);
int cairn__owner_alive(const cairn__owner *o);
int cairn__lease_live(const cairn__task_rec *t, int64_t now_ms);
uint64_t cairn__random_u64(void);

/* exec.c: runs a step (in-process, or in a child killed at its deadline) */
void cairn__outcome_free(cairn__outcome *o);
int cairn__exec_step(cairn_ctx *ctx, int probe, cairn__outcome *out);
/* Commits progress for ctx (checks the lease, renews it). */
int cairn__commit_progress(cairn_ctx *ctx, const void *data, size_t len);
/* Renews ctx's lease (used while an isolated step runs). */
int cairn__renew_lease(cairn_ctx *ctx);

int cairn__runner_fail(cairn_runner *r, int err, const char *fmt, ...) CAIRN_PRINTF(3, 4);
int cairn__runner_store_fail(cairn_runner *r, int err);

#endif
