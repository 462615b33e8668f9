/* cairn.h - the public API of cairn, a checkpointed multi-step pipeline runner.
 *
 * This header is the specification. A task runs through a graph of steps; after
 * each step its output (msgpack bytes) is committed to an LMDB checkpoint store
 * under the task ID. A crashed, killed or retried task resumes after its last
 * committed step: a committed `compute` step never runs again, and an `effect`
 * step runs at most once (or, opted in, at least once with a stable delivery ID).
 *
 * Handles (all opaque):
 *   cairn_graph   a named, versioned DAG of steps, defined in code
 *   cairn_store   an LMDB checkpoint store (a directory)
 *   cairn_runner  executes tasks of registered graphs against a store
 *   cairn_task    a read-only snapshot of one task, for inspection (and, across tasks, the
 *                 store views: cairn_store_list, cairn_store_audit, cairn_store_stats)
 *   cairn_ctx     what a step function sees while it runs
 *
 * Conventions:
 *   - Every fallible call returns 0 or a negative CAIRN_E* code (cairn_errors.h); the handle's
 *     own errmsg function (cairn_graph_errmsg, cairn_store_errmsg, cairn_runner_errmsg) gives
 *     the detail of its last error. That string belongs to the handle and is valid until the
 *     next call on it. Messages state the situation ("task 'x' is in doubt at step 'send'");
 *     what to do about it is the caller's to say (the CLI adds its own commands).
 *   - Strings passed in are copied unless a function says otherwise. Strings returned as
 *     `const char *` belong to the library (the handle, or static); the few returned as
 *     `char *` are the caller's, freed with cairn_free().
 *   - `_free(NULL)` is a no-op.
 *   - The library never calls exit() or abort() on bad input.
 *
 * Threads: each handle says what it allows; in short, a runner is used by one thread at a time,
 * runners on threads of their own may share one store handle (their writes commit together), a
 * frozen graph and a task snapshot are read-only and may be shared, a step's context belongs to the
 * call of the step, and the functions that take no handle (cairn_strerror, cairn_version, ...) may
 * be called from any thread at any time.
 *
 * Lifecycle reads like LMDB: cairn_runner_new() -> typed setters -> cairn_runner_open()
 * -> cairn_runner_run() ... -> cairn_runner_free(). The lifecycle is enforced: a runner's
 * setters (and cairn_runner_add_graph) return CAIRN_EBUSY once it is open, and a graph is
 * frozen when it is registered with a runner: from then on its step setters return CAIRN_EBUSY
 * and cairn_graph_add_step returns NULL, so what a runner compares tasks with never changes.
 * A refused call changes nothing.
 */
#ifndef CAIRN_H
#define CAIRN_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "cairn_errors.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && !defined(CAIRN_NO_VISIBILITY)
#define CAIRN_API __attribute__((visibility("default")))
#else
#define CAIRN_API
#endif

#if defined(__GNUC__)
#define CAIRN_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define CAIRN_PRINTF(f, a)
#endif

/* ------------------------------------------------------------------ version */

/* The version of this header; cairn_version() says which library a program runs with. The build
 * checks these against meson's project version (meson.build), so they cannot drift apart. */
#define CAIRN_VERSION_MAJOR 0
#define CAIRN_VERSION_MINOR 1
#define CAIRN_VERSION_PATCH 0
#define CAIRN_VERSION_STRING "0.1.0"

/* The library's version as "MAJOR.MINOR.PATCH" (static; never NULL); each number is also written
 * to the pointers that are not NULL (LMDB's mdb_version). */
CAIRN_API const char *cairn_version(int *major, int *minor, int *patch);

/* ------------------------------------------------------------------ memory */

/* Frees a `char *` the library returned to the caller (cairn_task_json); NULL is a no-op. Use it
 * rather than free(): the library and the program may not share one allocator. */
CAIRN_API void cairn_free(void *p);

/* ------------------------------------------------------------------ errors */

/* enum cairn_error (CAIRN_OK and the CAIRN_E* codes) is defined in cairn_errors.h. */

/* Text of an error code ("store full (map limit or disk full)"); never NULL, static. */
CAIRN_API const char *cairn_strerror(int err);
/* Name of an error code ("CAIRN_EFULL"); never NULL ("CAIRN_E?" for unknown codes). */
CAIRN_API const char *cairn_errname(int err);

/* ------------------------------------------------------------------ states */

/* Task states. Legal transitions (anything else is rejected with CAIRN_ESTATE):
 *   pending -> running                      a run starts
 *   failed  -> running                      retry
 *   running -> succeeded|failed|dead|in_doubt
 *   in_doubt -> pending                     operator settled the doubtful effect (resolve)
 *   succeeded|failed|dead|in_doubt -> pending   operator started a new generation (invalidate)
 */
typedef enum cairn_state {
    CAIRN_PENDING = 0,
    CAIRN_RUNNING = 1,
    CAIRN_SUCCEEDED = 2,
    CAIRN_FAILED = 3,
    CAIRN_DEAD = 4,
    CAIRN_IN_DOUBT = 5
} cairn_state;
#define CAIRN_STATE_COUNT 6

/* "pending", "running", ...; "?" for out-of-range values. */
CAIRN_API const char *cairn_state_name(cairn_state s);
/* Parses a state name; CAIRN_EINVAL if unknown. */
CAIRN_API int cairn_state_parse(const char *name, cairn_state *out);
/* 1 if from -> to is legal for the given cause, 0 otherwise. `operator_action` is 1 for
 * resolve/invalidate (the only causes allowed to move a finished task back to pending). */
CAIRN_API int cairn_state_transition_ok(cairn_state from, cairn_state to, int operator_action);

/* Step states, as shown by `cairn show`. */
typedef enum cairn_step_state {
    CAIRN_STEP_PENDING = 0, /* not yet committed in this generation */
    CAIRN_STEP_INTENT = 1,  /* effect: intent committed, outcome not (yet) recorded */
    CAIRN_STEP_DONE = 2,    /* output committed */
    CAIRN_STEP_FAILED = 3,  /* last invocation failed (transiently or permanently) */
    CAIRN_STEP_IN_DOUBT = 4 /* effect whose outcome is unknown; needs `resolve` */
} cairn_step_state;
CAIRN_API const char *cairn_step_state_name(cairn_step_state s);

/* ------------------------------------------------------------------ steps */

typedef struct cairn_ctx cairn_ctx;

/* What a step function returns. */
typedef enum cairn_step_result {
    CAIRN_STEP_OK = 0,        /* output set (or empty = nil); commit it */
    CAIRN_STEP_TRANSIENT = 1, /* retry later with backoff; for effects: nothing happened */
    CAIRN_STEP_PERMANENT = 2, /* never retry; the task becomes dead */
    CAIRN_STEP_UNKNOWN = 3    /* effects only: the outcome is unknown (timeout after sending) */
} cairn_step_result;

/* A step function. Inputs are read through `ctx`; the output is set with
 * cairn_ctx_set_output() or written with cairn_ctx_packer(). Must not touch the store.
 * `user` is the pointer given to cairn_step_set_user(). */
typedef cairn_step_result (*cairn_step_fn)(cairn_ctx *ctx, void *user);

/* What a probe (for effects) answers about an intent whose outcome was never recorded. */
typedef enum cairn_probe_result {
    CAIRN_PROBE_DONE = 0,     /* the effect happened; its output may be set on ctx */
    CAIRN_PROBE_NOT_DONE = 1, /* it did not happen: safe to perform it now */
    CAIRN_PROBE_UNKNOWN = 2   /* cannot tell: the step becomes in_doubt */
} cairn_probe_result;
typedef cairn_probe_result (*cairn_probe_fn)(cairn_ctx *ctx, void *user);

typedef enum cairn_delivery {
    CAIRN_COMPUTE = 0, /* re-runnable until committed; never again after */
    CAIRN_EFFECT = 1,  /* at most once: an intent is committed and flushed before the call */
    CAIRN_EFFECT_AT_LEAST_ONCE = 2 /* called again after a crash, with the same delivery ID */
} cairn_delivery;

/* ------------------------------------------------------------------ graph */

/* A graph is built by one thread (new, add_step, step setters) and frozen when a runner
 * registers it; from then on it is read-only, and runners in any number of threads may share
 * it. Free it after the last runner using it is freed. */
typedef struct cairn_graph cairn_graph;
typedef struct cairn_step cairn_step; /* owned by its graph; valid until cairn_graph_free */

/* Creates an empty graph. `name`: 1..64 bytes of [A-Za-z0-9._-]; version >= 1. NULL on ENOMEM
 * or a bad name (then no graph is created). */
CAIRN_API cairn_graph *cairn_graph_new(const char *name, uint32_t version);
CAIRN_API void cairn_graph_free(cairn_graph *g);
CAIRN_API const char *cairn_graph_name(const cairn_graph *g);

/* Adds a step (name: 1..64 bytes of [A-Za-z0-9._-], unique in the graph). `deps` is a
 * comma-separated list of step names this step reads (may name steps added later), or NULL.
 * Returns the step (owned by the graph) or NULL; then cairn_graph_errmsg(g) says why (a
 * duplicate or bad name, no function, out of memory, or a frozen graph: one registered with a
 * runner). Defaults: version 1, compute, no probe, retry max 3 invocations, base 200 ms, cap
 * 30 s, no time budget, no timeout. Adding a step undoes a validation (cairn_graph_fingerprint
 * is NULL again). */
CAIRN_API cairn_step *cairn_graph_add_step(cairn_graph *g, const char *name, cairn_step_fn fn,
                                           const char *deps);
/* Step setters. Each returns 0, CAIRN_EINVAL (no step, or a bad value: version 0, an unknown
 * delivery class, max_invocations 0 or cap_ms < base_ms) or CAIRN_EBUSY (the step's graph is
 * frozen: registered with a runner); a refused call changes nothing. A change undoes the graph's
 * validation, so its fingerprint is never that of an older definition. */
CAIRN_API int cairn_step_set_version(cairn_step *s, uint32_t version);
CAIRN_API int cairn_step_set_delivery(cairn_step *s, cairn_delivery d);
CAIRN_API int cairn_step_set_probe(cairn_step *s, cairn_probe_fn probe);
CAIRN_API int cairn_step_set_user(cairn_step *s, void *user); /* borrowed; caller keeps it alive */
/* Retry policy: at most `max_invocations` calls of this step per generation; after k failed
 * invocations the delay is a uniform random in [0, min(cap_ms, base_ms * 2^(k-1))] (full
 * jitter), so the first retry waits at most base_ms. */
CAIRN_API int cairn_step_set_retry(cairn_step *s, uint32_t max_invocations, uint32_t base_ms,
                                   uint32_t cap_ms);
/* Time-based retry budget: with max_elapsed_ms > 0, a step that fails transiently is retried
 * (with the backoff above) only until max_elapsed_ms have passed since it was first tried
 * without success in this generation, as the task's audit trail records it: an effect's first
 * intent, a compute step's first failure (an operator's resolve of the step starts the budget
 * again; a new generation has its own). It measures time across processes, so a task retried
 * by `cairn retry` has the same budget as one retried inside a run. No wait reaches past the
 * budget's end (the last try comes at the end at the latest), and a Retry-After
 * (cairn_ctx_set_retry_after) longer than what is left ends it at once; a spent budget makes
 * the task dead, with a message naming the budget and how long the step was tried. The
 * invocation limit of cairn_step_set_retry still applies (UINT32_MAX: none), and so does the
 * runner's attempt limit (cairn_runner_set_max_attempts), which counts runs. 0 (default): no
 * time limit. */
CAIRN_API int cairn_step_set_retry_budget(cairn_step *s, uint32_t max_elapsed_ms);
/* Hard timeout: with timeout_ms > 0 the step runs in a child process that is killed with
 * SIGKILL at the deadline (the step is then a transient failure; an effect becomes in doubt).
 * The child is the runner's step host, kept for its steps with a timeout (see
 * cairn_runner_set_child_reuse). 0 (default): runs in-process, no timeout. */
CAIRN_API int cairn_step_set_timeout(cairn_step *s, uint32_t timeout_ms);
/* Marks the step expensive (an LLM call): its output is committed at a durable point, flushed
 * to disk before any later step runs, so a power loss after that never loses it. When the next
 * step is an effect, the commit of that effect's intent is the one (in a run that created the
 * task, one transaction writes both; it is flushed before the effect runs): one flush where there
 * were two. A compute step that is not
 * expensive commits without a flush: a power loss can undo it back to the last durable point,
 * and it then runs again. */
CAIRN_API int cairn_step_set_expensive(cairn_step *s, int expensive);

/* Validates the whole graph: non-empty, every dependency exists, no cycle. Returns 0,
 * CAIRN_EINVAL (NULL), CAIRN_ENOMEM or CAIRN_EGRAPH with a message naming the step (see
 * cairn_graph_errmsg). Called by the runner when the graph is registered; on a frozen graph it
 * does nothing and returns 0. */
CAIRN_API int cairn_graph_validate(cairn_graph *g);
CAIRN_API const char *cairn_graph_errmsg(const cairn_graph *g);
/* Fingerprint: hex SHA-256 over the graph name, version, and each step's name, version,
 * delivery class and dependencies. Valid after a successful validate; NULL before. */
CAIRN_API const char *cairn_graph_fingerprint(const cairn_graph *g);

/* ------------------------------------------------------------------ step context */

/* A cairn_ctx is valid only during the call of the step (or probe) it was passed to, and only
 * on that call's thread; so is everything read through it, unless a function says otherwise. */

/* Task ID, step name, generation (starts at 1), invocation number of this step (1-based) and
 * task attempt (1-based). Strings valid until the step returns. */
CAIRN_API const char *cairn_ctx_task_id(const cairn_ctx *ctx);
CAIRN_API const char *cairn_ctx_step_name(const cairn_ctx *ctx);
CAIRN_API uint32_t cairn_ctx_generation(const cairn_ctx *ctx);
CAIRN_API uint32_t cairn_ctx_invocation(const cairn_ctx *ctx);
CAIRN_API uint32_t cairn_ctx_attempt(const cairn_ctx *ctx);
/* Stable delivery ID of this step in this generation: "dlv_" and 32 hex digits of SHA-256 over
 * the store's random ID, the task (ID, payload hash, creation time), the step and the
 * generation. The same on every attempt and redelivery of this step in this generation;
 * different for each step and generation, for the same task ID in another store, and for a task
 * made again after gc. Effects pass it to receivers (webhook-id, Message-ID) for deduplication. */
CAIRN_API const char *cairn_ctx_delivery_id(const cairn_ctx *ctx);
/* The task input (a msgpack map decoded from the input JSON). Valid until the step returns. */
CAIRN_API const msgpack_object *cairn_ctx_input(const cairn_ctx *ctx);
/* The committed output of dependency `step` (nil if it produced none), or NULL if `step` is not
 * a declared dependency. Valid until the step returns. */
CAIRN_API const msgpack_object *cairn_ctx_dep(const cairn_ctx *ctx, const char *step);
/* Output: either set whole msgpack bytes (copied) ... */
CAIRN_API int cairn_ctx_set_output(cairn_ctx *ctx, const void *msgpack_bytes, size_t len);
/* ... or pack into the output buffer (reset on each call to this function). The packer is
 * valid until the step returns. Exactly one msgpack object must be packed. */
CAIRN_API msgpack_packer *cairn_ctx_packer(cairn_ctx *ctx);
/* Error message stored with a failed invocation (and shown by `cairn show`). */
CAIRN_API void cairn_ctx_set_error(cairn_ctx *ctx, const char *fmt, ...) CAIRN_PRINTF(2, 3);
/* Progress of a long step: a small msgpack record (<= 1 MiB) committed at once; after a crash
 * the next invocation of this step gets it back from cairn_ctx_progress(). Returns 0,
 * CAIRN_ETOOBIG, CAIRN_EINTR (the run is being stopped: return TRANSIENT soon) or a store error. */
CAIRN_API int cairn_ctx_save_progress(cairn_ctx *ctx, const void *msgpack_bytes, size_t len);
/* The last saved progress of this step in this generation, or NULL if none. Valid until the
 * step returns. */
CAIRN_API const msgpack_object *cairn_ctx_progress(const cairn_ctx *ctx);
/* 1 once the run was asked to stop (SIGTERM/SIGINT): a long step should return TRANSIENT. */
CAIRN_API int cairn_ctx_stopping(const cairn_ctx *ctx);
/* With a TRANSIENT result: wait at least `ms` before the next invocation of this step (a rate
 * limit's Retry-After). The runner waits max(its backoff, ms): inside the run if that is short,
 * otherwise the task becomes failed with next_retry_at that far ahead. */
CAIRN_API void cairn_ctx_set_retry_after(cairn_ctx *ctx, uint32_t ms);

/* ------------------------------------------------------------------ store */

typedef struct cairn_store cairn_store;

typedef enum cairn_durability {
    CAIRN_SYNC = 0,  /* survives power loss (default); flushes at durable points only */
    CAIRN_NOSYNC = 1 /* survives process crashes only */
} cairn_durability;

/* Open a store once per process (LMDB's rule: a second handle on the same store in one process
 * breaks its locks). Runners on several threads may share the handle and run at once: writes
 * that overlap commit in one transaction, with one flush for the durable ones among them (group
 * commit), and cairn_store_errmsg gives each thread the message of its own last failure. Other
 * calls on the handle (cairn_store_* below) are made by one thread at a time.
 * Several processes may share a store. A child forked while a store is open must not use it
 * (exec or _exit).
 * A CAIRN_SYNC store survives power loss: an effect's intent, an expensive step's output, a
 * task's end and operator commands are flushed before the call goes on (a durable point); other
 * commits are not flushed, and a power cut may undo them back to the last durable point, never
 * further and never leaving the store torn. A handle that has written keeps a read snapshot of
 * the last durable point and one background thread that lets it go after a second of idleness
 * (checkpoint/synced.c explains why). */
CAIRN_API cairn_store *cairn_store_new(void);
/* A store's durability is fixed when it is created and recorded in it (the file `durability`
 * in the store directory); every later open uses the store's own. Called before
 * cairn_store_open: for a new store it chooses (default CAIRN_SYNC); for an existing store of
 * the other durability, cairn_store_open fails with CAIRN_EINVAL and changes nothing.
 * A CAIRN_NOSYNC store maps its file writable (LMDB's MDB_WRITEMAP: a commit is a memory
 * write, no system call), with the whole map reserved on disk beforehand so that a full disk is
 * CAIRN_EFULL, never a crash. A step that runs in the runner's process could write into that
 * map through a wild pointer; steps with a timeout run in a child that cannot. */
CAIRN_API int cairn_store_set_durability(cairn_store *s, cairn_durability d);
/* Upper bound for the memory map (and so the store's size); 0 = default (64 GiB). The map starts
 * small and grows by itself; past this bound writes fail with CAIRN_EFULL. */
CAIRN_API int cairn_store_set_map_max(cairn_store *s, uint64_t bytes);
/* Opens (creating if needed, mode 0700 dir / 0600 files) the store at `dir`.
 * CAIRN_EIO (cannot create/open, message has the path and errno text), CAIRN_ESCHEMA. */
CAIRN_API int cairn_store_open(cairn_store *s, const char *dir);
CAIRN_API void cairn_store_free(cairn_store *s);
CAIRN_API const char *cairn_store_errmsg(const cairn_store *s);

/* ------------------------------------------------------------------ runner */

/* A runner is used by one thread at a time, except cairn_runner_stop, which any thread or a
 * signal handler may call at any time. Several runners, on threads of their own, may share one
 * store handle and one graph; their in-process steps then run at once, so a step without a
 * timeout shared by them must be thread-safe (one with a timeout runs in the runner's own step
 * host process). */
typedef struct cairn_runner cairn_runner;

CAIRN_API cairn_runner *cairn_runner_new(void);
/* Registers a graph: validates it (CAIRN_EGRAPH, with the graph's message; also for a second
 * graph of the same name) and freezes it (see the lifecycle above). The graph is borrowed and
 * must outlive the runner; it may be registered with several runners, and stays frozen after
 * they are freed. CAIRN_EBUSY once the runner is open, CAIRN_EINVAL, CAIRN_ENOMEM. */
CAIRN_API int cairn_runner_add_graph(cairn_runner *r, cairn_graph *g);
/* The store the runner works on (borrowed; must be open and outlive the runner). */
CAIRN_API int cairn_runner_set_store(cairn_runner *r, cairn_store *s);
/* Every cairn_runner_set_* below returns 0, CAIRN_EINVAL (no runner, or a value out of range) or
 * CAIRN_EBUSY (the runner is open: settings are fixed then; the runner is unchanged). */
/* Max attempts (runs) per task before it is dead; default 3. */
CAIRN_API int cairn_runner_set_max_attempts(cairn_runner *r, uint32_t n);
/* Lease time-to-live; default 60 s. Renewed at every commit, with each progress record, and
 * periodically while a step with a timeout runs (in a child). An expired lease may be taken
 * over by another process, whoever held it; on this host a dead owner's lease is taken over at
 * once. An in-process step (no timeout) that is marked expensive or is an effect has a
 * heartbeat thread renewing it while it runs; any other in-process step that runs longer than
 * the lease without saving progress can be run twice (only one result is ever committed). */
CAIRN_API int cairn_runner_set_lease_ms(cairn_runner *r, uint32_t ms);
/* Longest backoff a run waits in-process before retrying a transient step itself; longer
 * waits end the run as `failed` with next_retry_at (for `cairn retry`). Default 2000 ms;
 * 0 = never wait: every transient failure ends the run. */
CAIRN_API int cairn_runner_set_inline_wait_ms(cairn_runner *r, uint32_t ms);
/* Tenant limit: `field` names a top-level string field of the input; at most `max_running`
 * tasks of one tenant run at once across processes. NULL/0 = no limit. */
CAIRN_API int cairn_runner_set_tenant_limit(cairn_runner *r, const char *field,
                                            uint32_t max_running);
/* How many invocations of steps with a timeout one child process runs. The runner forks its
 * step host at the first such invocation and sends it every later one; a host that is killed
 * (a timeout, a lost lease, a stop) or dies is replaced at the next, and one that has run
 * `n` is replaced too, which bounds what a leaking step can pile up. A host holds the
 * runner's process as it was when it was forked, changed since only by the steps it ran: a
 * step that reads state its program changes between tasks (a global set after the first
 * task) needs 1, a fresh child for every invocation, as before this setting existed.
 * Default 1000; 0 is CAIRN_EINVAL. */
CAIRN_API int cairn_runner_set_child_reuse(cairn_runner *r, uint32_t n);
/* Resume with a changed graph by starting a new generation from the first changed step. */
CAIRN_API int cairn_runner_set_allow_graph_change(cairn_runner *r, int allow);
/* Retention of outputs of finished tasks (default 7 days) and of tombstones (30 days). */
CAIRN_API int cairn_runner_set_retention(cairn_runner *r, uint64_t outputs_s,
                                         uint64_t tombstones_s);
/* Fixes the settings and makes the runner usable: CAIRN_EINVAL (no store set), CAIRN_EBUSY
 * (open already). */
CAIRN_API int cairn_runner_open(cairn_runner *r);
CAIRN_API void cairn_runner_free(cairn_runner *r);
CAIRN_API const char *cairn_runner_errmsg(const cairn_runner *r);

/* Asks running work to stop (async-signal-safe): the current step's output is not committed,
 * the lease is released, the run returns CAIRN_EINTR. The request is final: every later run,
 * resume or retry on this runner also returns CAIRN_EINTR at once (a stopping process should
 * start no new work); create a new runner to run again. */
CAIRN_API void cairn_runner_stop(cairn_runner *r);

/* Task IDs: 1..CAIRN_TASK_ID_MAX bytes of A-Z a-z 0-9 . _ : -; a buffer for one holds
 * CAIRN_TASK_ID_MAX + 1 bytes. */
#define CAIRN_TASK_ID_MAX 128

/* Runs one task. `input_json` is the task input (a JSON object, copied). `task_id` may be NULL
 * to derive it: from `id_fields` (comma-separated top-level fields, joined with '_') or, if NULL,
 * "<graph>_<first 16 hex of SHA-256 of the RFC 8785 canonical input>". `message_id` (optional)
 * records the consumed queue message. The resolved task ID is written, NUL-terminated, to
 * `task_id_out` if it is not NULL: a buffer of `task_id_size` >= CAIRN_TASK_ID_MAX + 1 bytes
 * (a smaller one is CAIRN_EINVAL before anything is done; the size is ignored with NULL). It is
 * written as soon as the ID is known, so it is there for most failures too.
 * Returns 0 when the task has succeeded (now or earlier) or the message was already consumed
 * (then CAIRN_EMSGSEEN is not an error: 0 and cairn_runner_errmsg() says so), or:
 *   CAIRN_EJSON, CAIRN_ETOOBIG, CAIRN_ETASKID  bad input; nothing written
 *   CAIRN_ECONFLICT   same task ID, different payload hash; nothing written
 *   CAIRN_EBUSY       a live process holds the lease; no step runs
 *   CAIRN_ETENANT     tenant limit reached; no step runs
 *                     (for both, a new task is recorded as pending so that cairn_runner_retry
 *                     runs it later, and `message_id` is not recorded: its redelivery runs it)
 *   CAIRN_EINVAL      bad arguments, or a message ID that is not 1-128 bytes
 *   CAIRN_ETRANSIENT  a step failed transiently; the task is failed with next_retry_at
 *   CAIRN_EDEAD       the task is (now) dead
 *   CAIRN_EINDOUBT    an effect's outcome is unknown; needs cairn_runner_resolve()
 *   CAIRN_EGRAPHCHANGED  the task was started by another version of the graph
 *   CAIRN_EINTR       stopped by cairn_runner_stop()
 *   CAIRN_EIO, CAIRN_EFULL, CAIRN_ESCHEMA, CAIRN_ECORRUPT   store errors
 *   CAIRN_ENOGRAPH    no such graph */
CAIRN_API int cairn_runner_run(cairn_runner *r, const char *graph, const char *task_id,
                               const char *id_fields, const char *input_json, size_t input_len,
                               const char *message_id, char *task_id_out, size_t task_id_size);
/* Resumes an existing task (its input is in the store). Same returns as cairn_runner_run. */
CAIRN_API int cairn_runner_resume(cairn_runner *r, const char *task_id);
/* Runs due tasks: failed ones whose next_retry_at has passed (all failed ones if `now` is set),
 * pending ones, and running ones whose owner is gone. `graph` may be NULL (all graphs); at most
 * `limit` tasks (0 = no limit). Counts are written if not NULL. A task that another process
 * took up after this call listed it (an overlapping retry, a run) is left to that process and
 * neither counted nor reported here, so overlapping retries count each task once, in the one
 * that claimed it. Returns 0 or a store error. */
CAIRN_API int cairn_runner_retry(cairn_runner *r, const char *graph, uint32_t limit, int now,
                                 uint32_t *n_run, uint32_t *n_succeeded, uint32_t *n_failed);
/* Called by cairn_runner_retry for each due task it took up, once that task's run ended: the
 * task ID, what cairn_runner_run would have returned for it (CAIRN_EBUSY and CAIRN_ETENANT: it
 * did not run, and is not counted) and the runner's message ("" on success). A due task whose
 * record cannot be read (CAIRN_ECORRUPT, CAIRN_ESCHEMA) is reported too, and counted as failed.
 * This is how a cron job says which tasks failed and why. NULL turns it off. A setting like the
 * others: before cairn_runner_open (CAIRN_EBUSY after). */
typedef void (*cairn_retry_report_fn)(const char *task_id, int rc, const char *message, void *user);
CAIRN_API int cairn_runner_set_retry_report(cairn_runner *r, cairn_retry_report_fn fn, void *user);
/* What a runner tells as it works, for logs and progress: one event per change of a task it
 * committed, delivered after the transaction committed (an event never describes a change that
 * did not happen), in the thread that ran the task, before the call that ran it returns. The
 * event and its strings are valid during the call only. */
typedef struct cairn_event {
    const char *task_id;
    const char *step; /* the step it concerns; "" for "task_started" and "task_succeeded" */
    /* "task_started" (a run took the lease), "step_done", "step_intent" (an effect's intent is
     * durable: the effect is called next), "step_failed" (to be retried in this run),
     * "step_reset" (a probe said the effect did not happen), and the run's end: "task_succeeded",
     * "task_failed" (due for `retry`), "task_dead", "task_in_doubt", "task_stopped" */
    const char *event;
    cairn_state state; /* the task's state after the event */
    uint32_t attempt;
    uint32_t invocation;  /* the step's invocation (step events), else 0 */
    uint64_t duration_ms; /* the step's call (step_done, step_failed, the end it caused) */
    const char *message;  /* the error for failures, else "" */
} cairn_event;
typedef void (*cairn_event_fn)(const cairn_event *ev, void *user);
/* Sets (NULL: clears) the event callback. A setting: before cairn_runner_open (CAIRN_EBUSY
 * after). The callback must not call into this runner. */
CAIRN_API int cairn_runner_set_events(cairn_runner *r, cairn_event_fn fn, void *user);
/* Settles an in-doubt effect: done (the effect happened: record it, continue after it) or not
 * done (run it again). The task becomes pending. CAIRN_ENOTFOUND, CAIRN_ESTATE if the step is
 * not in doubt. */
CAIRN_API int cairn_runner_resolve(cairn_runner *r, const char *task_id, const char *step,
                                   int done);
/* Starts a new generation of `from_step` and every step downstream of it (NULL = all steps),
 * plus any step whose version changed since the task was pinned; the other steps keep their
 * committed results (an independent effect is not repeated). The task becomes pending with its
 * attempt count reset; old outputs and the audit trail stay readable. CAIRN_ENOTFOUND,
 * CAIRN_EBUSY (running elsewhere), CAIRN_ESTATE (garbage-collected). */
CAIRN_API int cairn_runner_invalidate(cairn_runner *r, const char *task_id, const char *from_step);
/* Drops outputs of tasks finished longer ago than the output retention (keeping a tombstone),
 * tombstones older than the tombstone retention, and consumed-message records older than it
 * (a redelivery after that window is a new message). */
CAIRN_API int cairn_runner_gc(cairn_runner *r, uint32_t *n_pruned, uint32_t *n_removed);

/* ------------------------------------------------------------------ sharding */

/* The shard, 0..n_shards-1, that owns `task_id` when tasks are spread over n_shards machines
 * that each own a store (what `cairn shard` prints): a jump consistent hash (Lamping and Veach)
 * of the XXH3-64 hash of the ID's bytes. Stable: the same answer on every machine and in every
 * version of cairn. Growing n_shards to n_shards + 1 moves only the tasks the new shard takes
 * (about 1 in n_shards + 1). 0 when task_id is NULL or n_shards is 0. */
CAIRN_API uint32_t cairn_shard_of(const char *task_id, uint32_t n_shards);

/* ------------------------------------------------------------------ inspection */

/* A task snapshot is immutable and independent of the store: any number of threads may read
 * one at once; free it once, after the last reader. Its strings live as long as it does. */
typedef struct cairn_task cairn_task;

/* Loads a snapshot of a task: 0, CAIRN_EINVAL (NULL argument, or an ID longer than
 * CAIRN_TASK_ID_MAX), CAIRN_ENOTFOUND, CAIRN_ENOMEM or a store error (cairn_store_errmsg). */
CAIRN_API int cairn_task_load(cairn_store *s, const char *task_id, cairn_task **out);
CAIRN_API void cairn_task_free(cairn_task *t);
CAIRN_API const char *cairn_task_id(const cairn_task *t);
CAIRN_API const char *cairn_task_graph(const cairn_task *t);
CAIRN_API cairn_state cairn_task_state(const cairn_task *t);
CAIRN_API uint32_t cairn_task_attempt(const cairn_task *t);
CAIRN_API uint32_t cairn_task_generation(const cairn_task *t);
CAIRN_API const char *cairn_task_payload_hash(const cairn_task *t);
CAIRN_API const char *cairn_task_error(const cairn_task *t); /* last error text or "" */
/* The step that error belongs to ("" for the task as a whole): for a task in doubt, the effect
 * that cairn_runner_resolve settles. */
CAIRN_API const char *cairn_task_error_step(const cairn_task *t);
CAIRN_API int cairn_task_is_tombstone(const cairn_task *t);
/* The whole snapshot as a JSON document (task, status, attempt, payload_hash, steps with name,
 * status, invocations, output as JSON, ...). `steps` holds every step of the task's graph in
 * the graph's order, one that has not run yet as "pending" with no output (a tombstone lists
 * none: gc dropped its step records). The caller's: free it with cairn_free(). NULL on
 * ENOMEM. */
CAIRN_API char *cairn_task_json(const cairn_task *t);

/* ------------------------------------------------------------------ store views
 *
 * cairn_store_list, cairn_store_audit, cairn_store_stats and cairn_store_check share one style
 * (LMDB's callbacks, not cursors). A call reads one snapshot of the store (one read transaction: a
 * consistent view, whatever other processes commit meanwhile) and calls `fn` once per row, on the
 * caller's thread, before it returns. A row is a struct the library fills and lends to `fn` for
 * that call only: copy what you keep, strings included. Because rows are always the library's,
 * fields are only ever appended to them, so a program built against an older cairn.h reads a newer
 * library's rows correctly; never copy a row by value (its size may grow).
 * `fn` returns 0 to go on, a positive value to stop early (the call then returns 0), or a
 * negative CAIRN_E* code to stop with it (the call returns that code). While `fn` runs for
 * list and audit the snapshot is open: `fn` must not call functions on the same store (LMDB
 * allows one transaction per thread) and should be quick (a snapshot held long stops the store
 * from reusing pages freed after it). The stats row is handed over after the snapshot is closed.
 * Errors: CAIRN_EINVAL (NULL store or callback, a bad argument) and the store's errors
 * (CAIRN_EIO, CAIRN_ECORRUPT, CAIRN_ESCHEMA, CAIRN_ENOMEM), with cairn_store_errmsg. */

/* One task in cairn_store_list. With `err` 0 every field is set. Otherwise the task's record
 * cannot be read and only `task_id`, `err` and `message` say anything (the other strings are "",
 * the numbers 0): CAIRN_ECORRUPT (damaged),
 * CAIRN_ESCHEMA (written by a newer cairn) or CAIRN_ENOTFOUND (listed in the store's status
 * index without a record); such a task is always reported, never skipped, so that it can be
 * named (and `cairn show` says more). Times are ms since the Unix epoch, 0 = not (yet). */
typedef struct cairn_task_row {
    const char *task_id;
    int err;             /* 0, or why the record cannot be read */
    const char *message; /* with err: what the store said; "" otherwise */
    const char *graph;
    cairn_state state;
    uint32_t attempt, generation;
    int64_t created_ms, updated_ms, finished_ms;
    int64_t next_retry_ms; /* a failed task's retry time; 0 in every other state */
    int tombstone;         /* gc dropped its outputs */
    const char *error, *error_step, *tenant; /* "" if none */
} cairn_task_row;
typedef int (*cairn_task_row_fn)(const cairn_task_row *row, void *user);

/* Lists tasks: those in `*state` (NULL: every state) of `graph` (NULL: every graph), state by
 * state in cairn_state order and, within one, by due time (a failed task's retry time, else its
 * last change). At most `limit` readable tasks are listed (0: all); unreadable ones are listed
 * as they are met, whatever their graph, and do not count. */
CAIRN_API int cairn_store_list(cairn_store *s, const cairn_state *state, const char *graph,
                               uint32_t limit, cairn_task_row_fn fn, void *user);

/* One transition (or, with from == to, an event within a state: a lease taken over, a step
 * done, a graph change) in a task's audit trail. */
typedef struct cairn_audit_row {
    int64_t t_ms; /* ms since the Unix epoch */
    cairn_state from, to;
    uint32_t attempt, generation;
    const char *step;   /* the step it concerns; "" for the task as a whole */
    const char *reason; /* "run", "retry", a step's error, an operator's action, ... */
} cairn_audit_row;
typedef int (*cairn_audit_row_fn)(const cairn_audit_row *row, void *user);

/* A task's audit trail, oldest first. CAIRN_ENOTFOUND for no such task (also a task gc has
 * removed: a tombstone keeps its trail). */
CAIRN_API int cairn_store_audit(cairn_store *s, const char *task_id, cairn_audit_row_fn fn,
                                void *user);

/* The store's counts and size, in one row. */
typedef struct cairn_stats {
    uint64_t by_state[16]; /* tasks per state, indexed by cairn_state (room for more states) */
    uint64_t tombstones, messages, step_records, audit_records; /* consumed queue messages */
    uint64_t map_size, map_used, page_size; /* bytes: the current map, what is in use, a page */
    cairn_durability durability;            /* the store's own, fixed at its creation */
    /* commits: the last one, and (sync stores) the last durable point's (0: none recorded yet);
     * a restart of the machine undoes the commits between the two */
    uint64_t last_commit, durable_commit;
    /* other processes' read snapshots (a sync store's writers hold one each), and the oldest one,
     * with its process: pages freed after it are not reused while it is held */
    uint32_t readers;
    uint64_t oldest_reader_commit;
    int oldest_reader_pid;
    /* What an operator alerts on, read from the status index's first keys (no scan):
     * when the task longest in doubt became so (0: none in doubt), and the earliest retry time
     * of a failed task (0: none failed); and the failed tasks due for `retry` now, counted up
     * to CAIRN_STATS_DUE_MAX (that value means "at least"), so the cost stays bounded at any
     * store size. Times are milliseconds since the Unix epoch. */
    int64_t oldest_in_doubt_ms, next_retry_ms;
    uint64_t retry_due;
} cairn_stats;
#define CAIRN_STATS_DUE_MAX 10000
typedef int (*cairn_stats_fn)(const cairn_stats *stats, void *user);

/* Reads the store's counts and size and calls `fn` once with them (after the snapshot closed:
 * `fn` may use the store). */
CAIRN_API int cairn_store_stats(cairn_store *s, cairn_stats_fn fn, void *user);

/* One problem cairn_store_check found. */
typedef struct cairn_check_row {
    const char *database; /* "tasks", "steps", "due", ... (the store's LMDB databases) */
    const char *task_id;  /* the task it concerns, as far as the key can be read; "" if none */
    const char *message;  /* what is wrong, naming the record */
} cairn_check_row;
typedef int (*cairn_check_row_fn)(const cairn_check_row *row, void *user);

/* Reads and verifies every record of the store, as `PRAGMA integrity_check` does for SQLite:
 * each record's checksum, the order of each database's keys, that every task record decodes
 * and has its index entries, that every index entry is its task's, and that every step,
 * progress, input and audit record belongs to a task. (That data.mdb matches its witnesses -
 * its size, its meta pages, a sync store's marker - is checked by every open: a store that
 * fails it does not open.) Calls `fn` once per problem, within the snapshot. *records (may be
 * NULL) counts the records read. 0: the store is sound; CAIRN_ECORRUPT: problems were found
 * (cairn_store_errmsg says how many); else the error that stopped the check. */
CAIRN_API int cairn_store_check(cairn_store *s, cairn_check_row_fn fn, void *user,
                                uint64_t *records);

/* ------------------------------------------------------------------ CLI */

/* The whole `cairn` command line for these graphs: run, show, list, retry, resolve, invalidate,
 * gc, audit, stats (and, when built with the engine, generate, tokenize, model-info).
 * Returns the process exit code (sysexits, see README). */
CAIRN_API int cairn_cli_main(int argc, char **argv, cairn_graph *const *graphs, size_t n_graphs);

#ifdef __cplusplus
}
#endif

#endif /* CAIRN_H */
