/* runner/internal.h - structures shared by the runner's files (not public). */
#ifndef CAIRN_RUNNER_INTERNAL_H
#define CAIRN_RUNNER_INTERNAL_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "cairn.h"
#include "checkpoint/store.h"
#include "runner/graph.h"

struct cairn_runner {
    cairn_graph **graphs;
    size_t n_graphs;
    cairn_store *store;
    uint32_t max_attempts, lease_ms, inline_wait_ms, tenant_max;
    cairn_retry_report_fn report; /* cairn_runner_set_retry_report */
    void *report_user;
    cairn_event_fn events; /* cairn_runner_set_events */
    void *events_user;
    char tenant_field[CAIRN__NAME_MAX + 1];
    int allow_graph_change, opened;
    uint64_t retention_s, tombstone_s;
    cairn__owner me;
    uint64_t rng;
    volatile sig_atomic_t stop;
    struct cairn__heartbeat *hb; /* exec.c, made at the first step that needs one */
    struct cairn__host *host;    /* exec.c, forked at the first step with a timeout */
    uint32_t child_reuse;        /* cairn_runner_set_child_reuse */
    char note[512]; /* informational message of the last successful call (e.g. "already succeeded")
                     */
    char err[1024];
};

void cairn__heartbeat_free(cairn_runner *r); /* exec.c: at cairn_runner_free */
void cairn__host_free(cairn_runner *r);      /* exec.c: at cairn_runner_free */

/* One dependency output handed to a step. */
typedef struct cairn__dep {
    const char *name;
    void *bytes;
    size_t len;
    msgpack_unpacked u;
    int present;
    int borrowed; /* bytes are the run's kept output (step.c), not the dep's own copy */
} cairn__dep;

/* exec.c: the lease heartbeat of in-process steps that may run long: one thread per runner,
 * started at the first such step and kept, idle between steps, until the runner is freed */
typedef struct cairn__heartbeat {
    struct cairn_ctx *ctx; /* the step it beats for; NULL while idle */
    pthread_t th;
    pthread_mutex_t mu; /* the store handle, between the step's progress saves and the beat */
    pthread_cond_t cv;
    int started, quit;
    int idle;           /* the thread sleeps untimed: a start must wake it */
    uint32_t period_ms; /* between ticks: a third of the runner's lease */
    pid_t pid;          /* the process the thread runs in */
    uint64_t turn;      /* bumped at each start: a tick that saw none goes idle */
    atomic_int lost;    /* a renewal found another owner */
} cairn__heartbeat;

struct cairn_ctx {
    cairn_runner *r;
    const char *task_id;
    const cairn_step *step;
    uint32_t generation, invocation, attempt;
    uint64_t lease_token;
    char delivery_id[40]; /* "" until cairn__delivery_id() derives it */
    /* what the delivery ID is derived from besides task, step and generation (load_txn) */
    unsigned char store_id[16];
    char payload_hash[65];
    int64_t created_ms;
    void *input_bytes;
    size_t input_len;
    msgpack_unpacked input;
    cairn__dep *deps;
    size_t n_deps;
    void *progress_bytes;
    size_t progress_len;
    msgpack_unpacked progress;
    int has_progress;
    msgpack_sbuffer out;
    msgpack_packer pk;
    int out_set;
    int child_fd;  /* >= 0 when the step runs in an isolated child: progress goes to the parent */
    int last_step; /* the graph's last step: its commit also marks the task succeeded */
    int finished;  /* that commit happened */
    int owed;      /* an expensive output was committed relaxed: the next durable point covers it */
    /* known: the run created the task, and every record of it since is this run's own commit
     * (done steps only), so a step's resume read is known without reading (step.c, known_load);
     * kept: those done steps' outputs, by index in the graph */
    int known;
    size_t step_ix, kept_bytes;
    struct cairn__kept {
        char *bytes; /* NULL: the step committed no output */
        size_t len;
        int done;
    } * kept;
    /* carry: a done compute step whose commit rides with the next one (step.c, "Carried
     * commits"): its output is kept[ix], nothing is written for it until then */
    struct cairn__carry {
        int pending;
        const cairn_step *step;
        size_t ix; /* its index in the graph (kept[ix]) */
        uint32_t invocations;
        int64_t updated_ms, took_ms;
    } carry;
    uint32_t retry_after_ms;
    int64_t call_ms;      /* when the step's current call began (its events' durations) */
    cairn__heartbeat *hb; /* non-NULL while an in-process step has a heartbeat */
    char err[CAIRN__ERR_MAX];
};

/* The outcome of one invocation. */
typedef struct cairn__outcome {
    cairn_step_result result;
    int timed_out, crashed;
    uint32_t retry_after_ms; /* the step's cairn_ctx_set_retry_after, 0 if none */
    char *out;
    size_t out_len;
    char err[CAIRN__ERR_MAX];
} cairn__outcome;

/* runner.c: a task whose lease this process now holds (or why it does not run) */
typedef struct acquire_arg {
    cairn_runner *r;
    const cairn_graph *g;
    const char *id;
    uint64_t token;
    uint32_t attempt, generation;
    int finished;       /* 0 running now; else the final code to return (0 succeeded) */
    uint64_t state_txn; /* finished: the transaction that wrote the state found (0: unknown) */
    uint32_t tenant_running;
    const uint64_t *listed; /* retry: the record's txn when it was listed as due (or NULL) */
    int taken;              /* the record changed since: another process took the task up */
    int fresh;              /* the admission that took the lease created the task */
    /* admit_txn: the task it is creating in this transaction, not written yet: the acquire
     * starts from it and writes it once, running, instead of reading it back */
    const cairn__task_rec *created;
    /* fresh: the input the admission wrote (msgpack, malloc'd; cairn__run_acquired takes it),
     * and the payload hash and creation time it recorded: the first step's read is known too */
    void *input;
    size_t input_len;
    char payload_hash[65];
    int64_t created_ms;
} acquire_arg;

/* step.c: runs the steps of a task whose lease `a` holds, committing each. */
int cairn__run_acquired(cairn_runner *r, const cairn_graph *g, const char *id,
                        const acquire_arg *a);

/* exec.c: the step's stable delivery ID (derived on first use, kept in c->delivery_id) */
const char *cairn__delivery_id(cairn_ctx *c);

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

/* runner.c, shared with operator.c */
cairn_graph *cairn__find_graph(cairn_runner *r, const char *name);
/* The registered graph a stored task belongs to (CAIRN_ENOTFOUND, CAIRN_ENOGRAPH). */
int cairn__task_graph(cairn_runner *r, const char *id, const cairn_graph **g);
/* Takes the task's lease and runs its remaining steps (what resume and retry do). With
 * `listed` (retry: the txn of the task record it listed as due), a task whose record was
 * rewritten since - another process took it up - is left alone: *taken = 1, and 0 is returned
 * with nothing written, so that only the process that claimed a task counts it. */
int cairn__execute(cairn_runner *r, const cairn_graph *g, const char *id, const uint64_t *listed,
                   int *taken);
int cairn__audit(cairn__txn *t, cairn__task_rec *task, cairn_state from, cairn_state to,
                 const char *step, const char *fmt, ...) CAIRN_PRINTF(6, 7);
/* Moves a task to `to` if the state machine allows it (operator actions may reopen a finished
 * task), and audits it; CAIRN_ESTATE otherwise. */
int cairn__transition(cairn__txn *t, cairn__task_rec *task, cairn_state to, int operator_action,
                      const char *step, const char *reason);
void cairn__release_lease(cairn__task_rec *task);
/* Generations: `redo` marks steps by position in g->order. mark_downstream extends the marks
 * to every step that reads a marked one; mark_changed marks steps whose name@version is not in
 * the task's pin (and their downstream) and returns the count; `keep` (by position too; NULL:
 * none) holds steps that are never marked there and pass no mark on (a graph change never
 * repeats an effect: effects_begun in runner.c); new_generation bumps the task's generation and
 * gives the marked steps fresh pending records. */
void cairn__mark_downstream(const cairn_graph *g, const unsigned char *keep, unsigned char *redo);
size_t cairn__mark_changed(const cairn_graph *g, const char *pin, const unsigned char *keep,
                           unsigned char *redo);
/* The first step (in g's order) whose name@version differs from the pinned list, or NULL. */
const cairn_step *cairn__first_changed(const cairn_graph *g, const char *pin);
int cairn__new_generation(cairn__txn *t, const cairn_graph *g, cairn__task_rec *task,
                          const unsigned char *redo);
int cairn__runner_store_fail(cairn_runner *r, int err);
/* Admits a task as cairn_runner_run does (the same checks, idempotency and conflicts, one
 * transaction, made durable before it returns) without running it: the task is left pending for
 * cairn_runner_retry. *created: 1 when this call made it, 0 when it existed with this payload.
 * The returns of cairn_runner_run's admission: CAIRN_EJSON, CAIRN_ETOOBIG, CAIRN_ETASKID,
 * CAIRN_ECONFLICT (the message names both payload hashes), CAIRN_EINTR, store errors. */
int cairn__runner_admit(cairn_runner *r, const char *graph, const char *task_id,
                        const char *input_json, size_t input_len, int *created);

#endif
