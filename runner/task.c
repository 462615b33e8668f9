/* runner/task.c - read-only task snapshots for `show`, `list` and the C API.
 *
 * A snapshot copies what it needs out of one read transaction (the task record, the step records
 * that apply in the current generation in the pinned step order, and older generations' records
 * as history), so it stays valid after the transaction and the store are gone. Its JSON lists
 * every step the task's pin names, a step without a record yet as `pending`: the pin is the
 * graph the task runs under, so `show` needs no graph to say what is still to come.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "runner/internal.h"

typedef struct snap_step {
    char name[CAIRN__NAME_MAX + 1];
    cairn__step_rec rec; /* output points to `out` */
    void *out;
    int current; /* applies in the task's generation */
} snap_step;

struct cairn_task {
    cairn__task_rec rec;
    void *input; /* msgpack; NULL once gc dropped it */
    size_t input_len;
    snap_step *steps;
    size_t n_steps;
};

static void *dup_bytes(const void *p, size_t n)
{
    void *d = malloc(n ? n : 1);
    if (d && n)
        memcpy(d, p, n);
    return d;
}

static int step_cb(const char *name, const cairn__step_rec *rec, void *arg)
{
    cairn_task *t = arg;
    snap_step *s = realloc(t->steps, (t->n_steps + 1) * sizeof *s);
    if (!s)
        return CAIRN_ENOMEM;
    t->steps = s;
    s = &t->steps[t->n_steps++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->rec = *rec;
    s->rec.output = NULL;
    if (rec->output) {
        s->out = dup_bytes(rec->output, rec->output_len);
        if (!s->out)
            return CAIRN_ENOMEM;
        s->rec.output = s->out;
    }
    return 0;
}

static int load_txn(cairn__txn *txn, void *arg)
{
    cairn_task *t = arg;
    int rc = cairn__task_get(txn, t->rec.id, &t->rec);
    if (rc == CAIRN_ENOTFOUND)
        return cairn__store_fail(cairn__txn_store(txn), rc, "no task '%s'", t->rec.id);
    if (rc)
        return rc;
    const void *in;
    rc = cairn__input_get(txn, t->rec.id, &in, &t->input_len);
    if (rc == 0) {
        t->input = dup_bytes(in, t->input_len);
        if (!t->input)
            return CAIRN_ENOMEM;
    } else if (rc != CAIRN_ENOTFOUND)
        return rc;
    return cairn__step_each(txn, t->rec.id, step_cb, t);
}

/* 1 if the pin ("a@1,b@2") names step `name` */
static int pin_names(const char *pin, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = pin; *p;) {
        size_t len = strcspn(p, "@,");
        if (len == n && memcmp(p, name, n) == 0)
            return 1;
        p += strcspn(p, ",");
        p += *p == ',';
    }
    return 0;
}

int cairn_task_load(cairn_store *s, const char *task_id, cairn_task **out)
{
    if (!s || !task_id || !out || strlen(task_id) > CAIRN__ID_MAX)
        return CAIRN_EINVAL;
    cairn_task *t = calloc(1, sizeof *t);
    if (!t)
        return CAIRN_ENOMEM;
    snprintf(t->rec.id, sizeof t->rec.id, "%s", task_id);
    int rc = cairn__store_read(s, load_txn, t);
    if (rc) {
        cairn_task_free(t);
        return rc;
    }
    /* the record that applies per step: the latest generation <= the task's */
    for (size_t i = 0; i < t->n_steps; i++) {
        if (t->steps[i].rec.generation > t->rec.generation)
            continue;
        int latest = 1;
        for (size_t j = i + 1; j < t->n_steps; j++)
            if (strcmp(t->steps[j].name, t->steps[i].name) == 0 &&
                t->steps[j].rec.generation <= t->rec.generation)
                latest = 0;
        t->steps[i].current = latest;
    }
    /* A task that succeeded (outputs kept) has a current done record of every pinned step: a
     * tree read from an older root (damage to LMDB's directory, which no checksum covers) lacks
     * some, and is refused rather than shown as pending steps. */
    for (const char *p = t->rec.steps_pin;
         t->rec.state == CAIRN_SUCCEEDED && !t->rec.tombstone && *p;) {
        size_t len = strcspn(p, "@,"), i = 0;
        while (i < t->n_steps &&
               !(t->steps[i].current && strlen(t->steps[i].name) == len &&
                 memcmp(t->steps[i].name, p, len) == 0 && t->steps[i].rec.state == CAIRN_STEP_DONE))
            i++;
        if (i == t->n_steps) {
            rc = cairn__store_fail(s, CAIRN_ECORRUPT,
                                   "task '%s' succeeded, but its step '%.*s' has no done record: "
                                   "the store is damaged (run `cairn check`)",
                                   task_id, (int)len, p);
            cairn_task_free(t);
            return rc;
        }
        p += strcspn(p, ",");
        p += *p == ',';
    }
    /* A record written in the task's generation is of a step of the graph the task is pinned to
     * (a graph change starts a new generation): one of another step is a damaged record that
     * its checksum did not catch, and is refused like one. */
    for (size_t i = 0; i < t->n_steps; i++)
        if (t->steps[i].rec.generation == t->rec.generation && t->rec.steps_pin[0] &&
            !pin_names(t->rec.steps_pin, t->steps[i].name)) {
            rc = cairn__store_fail(s, CAIRN_ECORRUPT,
                                   "task '%s' has a record of step '%s' in generation %u, which "
                                   "its graph does not define: the store is damaged (run `cairn "
                                   "check`)",
                                   task_id, t->steps[i].name, t->rec.generation);
            cairn_task_free(t);
            return rc;
        }
    *out = t;
    return 0;
}

void cairn_task_free(cairn_task *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_steps; i++)
        free(t->steps[i].out);
    free(t->steps);
    free(t->input);
    free(t);
}

const char *cairn_task_id(const cairn_task *t) { return t->rec.id; }
const char *cairn_task_graph(const cairn_task *t) { return t->rec.graph; }
cairn_state cairn_task_state(const cairn_task *t) { return (cairn_state)t->rec.state; }
uint32_t cairn_task_attempt(const cairn_task *t) { return t->rec.attempt; }
uint32_t cairn_task_generation(const cairn_task *t) { return t->rec.generation; }
const char *cairn_task_payload_hash(const cairn_task *t) { return t->rec.payload_hash; }
const char *cairn_task_error(const cairn_task *t) { return t->rec.error; }
const char *cairn_task_error_step(const cairn_task *t) { return t->rec.error_step; }
int cairn_task_is_tombstone(const cairn_task *t) { return t->rec.tombstone; }

static json_t *bytes_json(const void *p, size_t n)
{
    msgpack_unpacked u;
    size_t off = 0;
    msgpack_unpacked_init(&u);
    json_t *j = NULL;
    if (msgpack_unpack_next(&u, p, n, &off) == MSGPACK_UNPACK_SUCCESS)
        j = cairn__msgpack_to_json(&u.data);
    msgpack_unpacked_destroy(&u);
    return j ? j : json_null();
}

static json_t *time_json(int64_t ms) { return ms ? json_integer(ms) : json_null(); }

static json_t *step_json(const snap_step *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(s->name));
    json_object_set_new(o, "status",
                        json_string(cairn_step_state_name((cairn_step_state)s->rec.state)));
    json_object_set_new(o, "generation", json_integer(s->rec.generation));
    json_object_set_new(o, "invocations", json_integer(s->rec.invocations));
    json_object_set_new(o, "updated_ms", time_json(s->rec.updated_ms));
    if (s->rec.intent_ms)
        json_object_set_new(o, "intent_ms", json_integer(s->rec.intent_ms));
    if (s->rec.resolved)
        json_object_set_new(o, "resolved", json_true());
    if (s->rec.error[0])
        json_object_set_new(o, "error", json_string(s->rec.error));
    json_object_set_new(o, "output",
                        s->rec.output ? bytes_json(s->rec.output, s->rec.output_len) : json_null());
    return o;
}

/* A step of the graph with no record yet: it has not run in this task. */
static json_t *pending_json(const char *name, size_t len, uint32_t generation)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", json_stringn(name, len));
    json_object_set_new(o, "status", json_string(cairn_step_state_name(CAIRN_STEP_PENDING)));
    json_object_set_new(o, "generation", json_integer(generation));
    json_object_set_new(o, "invocations", json_integer(0));
    json_object_set_new(o, "updated_ms", json_null());
    json_object_set_new(o, "output", json_null());
    return o;
}

json_t *cairn__task_to_json(const cairn_task *t)
{
    const cairn__task_rec *r = &t->rec;
    json_t *o = json_object();
    json_object_set_new(o, "task", json_string(r->id));
    json_object_set_new(o, "graph", json_string(r->graph));
    json_object_set_new(o, "status", json_string(cairn_state_name((cairn_state)r->state)));
    json_object_set_new(o, "attempt", json_integer(r->attempt));
    json_object_set_new(o, "generation", json_integer(r->generation));
    json_object_set_new(o, "payload_hash", json_string(r->payload_hash));
    json_object_set_new(o, "graph_fingerprint", json_string(r->fingerprint));
    json_object_set_new(o, "tombstone", json_boolean(r->tombstone));
    json_object_set_new(o, "created_ms", time_json(r->created_ms));
    json_object_set_new(o, "updated_ms", time_json(r->updated_ms));
    json_object_set_new(o, "finished_ms", time_json(r->finished_ms));
    json_object_set_new(o, "next_retry_at_ms",
                        r->state == CAIRN_FAILED ? time_json(r->next_retry_ms) : json_null());
    if (r->tenant[0])
        json_object_set_new(o, "tenant", json_string(r->tenant));
    if (r->error[0])
        json_object_set_new(o, "error", json_string(r->error));
    if (r->error_step[0])
        json_object_set_new(o, "error_step", json_string(r->error_step));
    if (r->lease_token) {
        json_t *l = json_object();
        json_object_set_new(l, "host", json_string(r->owner.host));
        json_object_set_new(l, "pid", json_integer(r->owner.pid));
        json_object_set_new(l, "expires_ms", json_integer(r->lease_expires_ms));
        json_object_set_new(o, "lease", l);
    }
    json_object_set_new(o, "input", t->input ? bytes_json(t->input, t->input_len) : json_null());
    json_t *steps = json_array(), *hist = json_array();
    /* Every step of the graph the task is pinned to ("a@1,b@2", in the graph's order): its
     * current record, or `pending` while it has none. A tombstone's records were dropped by
     * gc, so none is made up for it. Current records of steps the pin does not name follow. */
    size_t n = t->n_steps;
    unsigned char *used = calloc(n ? n : 1, 1);
    for (const char *p = r->steps_pin; used && *p;) {
        size_t len = strcspn(p, "@,");
        size_t i = 0;
        while (i < n && !(t->steps[i].current && strlen(t->steps[i].name) == len &&
                          memcmp(t->steps[i].name, p, len) == 0))
            i++;
        if (i < n) {
            used[i] = 1;
            json_array_append_new(steps, step_json(&t->steps[i]));
        } else if (!r->tombstone) {
            json_array_append_new(steps, pending_json(p, len, r->generation));
        }
        p += strcspn(p, ",");
        p += *p == ',';
    }
    for (size_t i = 0; used && i < n; i++)
        if (!used[i] && t->steps[i].current)
            json_array_append_new(steps, step_json(&t->steps[i]));
    for (size_t i = 0; i < n; i++)
        if (!t->steps[i].current)
            json_array_append_new(hist, step_json(&t->steps[i]));
    free(used);
    json_object_set_new(o, "steps", steps);
    json_object_set_new(o, "history", hist);
    return o;
}

char *cairn_task_json(const cairn_task *t)
{
    json_t *o = cairn__task_to_json(t);
    char *s = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    return s;
}
