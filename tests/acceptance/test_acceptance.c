/* test_acceptance.c - the acceptance suite of the HTTP task API: the five faults of the second
 * seed, each against real `serve --tasks` processes and a real store, each held to the one
 * standard - every business action yields at most one effective result, counted at the
 * receiver (the ledger file, where each append that happened leaves a line):
 *   1. the client disconnects (mid-body, or right after sending) or times out, then retries
 *      with the same key;
 *   2. 16 clients race one key, over two servers on one store;
 *   3. the same key with changed parameters;
 *   4. the server SIGKILLed mid-task, then restarted;
 *   5. the notification redelivered: the upstream that posts the task delivers it again (while
 *      it runs, after it finished, to a restarted server) - a duplicate callback.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "serve_common.h"

static char *D;

/* Sends raw bytes to the server over a fresh TCP connection and closes it without reading: a
 * client that went away. */
static void send_and_vanish(const srv *s, const char *bytes, size_t n)
{
    char host[64];
    int port = 0;
    sscanf(s->addr, "%63[^:]:%d", host, &port);
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &in.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&in, sizeof in) == 0) {
        ssize_t w = write(fd, bytes, n);
        (void)w;
    }
    if (fd >= 0)
        close(fd);
}

static char *raw_post(const char *key, const char *body, size_t declared)
{
    return tu_fmt("POST /v1/tasks HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\n"
                  "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                  key, declared, body);
}

/* 1: a client that vanishes mid-body, one that vanishes after sending, one that times out, and
 * then the retry that waits for the answer. */
static void fault_disconnect(void)
{
    tu_scene sc = tu_scene_new(D, "disconnect");
    srv s;
    if (srv_start(&s, sc.dir, sc.store, 1, NULL)) {
        ok(0, "1: the server starts");
        return;
    }
    char *body = ledger_body(sc.dir, "disconnect", 300, NULL);
    char *half = raw_post("dc-1", body, strlen(body) + 50); /* promises more than it sends */
    send_and_vanish(&s, half, strlen(half));
    char *whole = raw_post("dc-1", body, strlen(body));
    send_and_vanish(&s, whole, strlen(whole));
    resp r;
    http(&r, &s, "POST", "/v1/tasks", "dc-1", NULL, body, strlen(body), 1);
    /* 409: the vanished client's request is still in admission; else nothing, or the task */
    ok(r.status == 0 || r.status == 200 || r.status == 202 || r.status == 409,
       "1: a client that times out at 1 ms gets nothing or a consistent answer (%ld)", r.status);
    resp_free(&r);
    /* the timed-out request may still be in admission: 409 says retry, as a client does */
    int n409 = 0;
    for (int64_t end = tu_now_ms() + 30000;; tu_sleep_ms(20)) {
        post(&r, &s, "dc-1", body);
        if (r.status != 409 || tu_now_ms() > end)
            break;
        n409++;
        resp_free(&r);
    }
    ok(r.status == 200 || r.status == 202,
       "1: the retry with the same key is 200/202 (%ld, after %d 409s: %s)", r.status, n409,
       r.body);
    resp_free(&r);
    char got[32];
    ok(wait_status(&s, "dc-1", "succeeded", got, sizeof got), "1: the task succeeds (%s)", got);
    post(&r, &s, "dc-1", body);
    ok(r.status == 200, "1: a later retry is 200 with the result (%ld)", r.status);
    resp_free(&r);
    ok(tu_count_lines(sc.ledger, NULL) == 1, "1: exactly one effect at the receiver (%d)",
       tu_count_lines(sc.ledger, NULL));
    ok(tu_count_lines(sc.trace, "work ") == 1, "1: and the work ran once (%d)",
       tu_count_lines(sc.trace, "work "));
    ok(srv_stop(&s, 0) == 0, "1: the server stops");
    free(body), free(half), free(whole);
    tu_scene_free(&sc);
}

typedef struct racer {
    const srv *s;
    const char *body;
    pthread_barrier_t *go;
    long status;
    char task[140], hash[80];
} racer;

static void *race(void *arg)
{
    racer *c = arg;
    pthread_barrier_wait(c->go);
    resp r;
    post(&r, c->s, "race-1", c->body);
    c->status = r.status;
    snprintf(c->task, sizeof c->task, "%s", jstr_at(r.json, "task"));
    snprintf(c->hash, sizeof c->hash, "%s", jstr_at(r.json, "payload_hash"));
    resp_free(&r);
    return NULL;
}

/* 2: 16 clients, one key, two servers on one store: one task, one 202, one effect. */
static void fault_race(void)
{
    tu_scene sc = tu_scene_new(D, "race");
    srv a, b;
    if (srv_start(&a, sc.dir, sc.store, 2, NULL) || srv_start(&b, sc.dir, sc.store, 1, NULL)) {
        ok(0, "2: two servers start on one store");
        return;
    }
    char *body = ledger_body(sc.dir, "race", 200, NULL);
    enum { N = 16 };
    racer cs[N];
    pthread_t th[N];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, N);
    for (int i = 0; i < N; i++) {
        cs[i] = (racer){.s = i % 2 ? &b : &a, .body = body, .go = &go};
        pthread_create(&th[i], NULL, race, &cs[i]);
    }
    int n202 = 0, n200 = 0, n409 = 0, other = 0, same = 1;
    const char *hash = NULL;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        n202 += cs[i].status == 202, n200 += cs[i].status == 200, n409 += cs[i].status == 409;
        other += cs[i].status != 202 && cs[i].status != 200 && cs[i].status != 409;
        if (cs[i].status == 200 || cs[i].status == 202) {
            same &= !strcmp(cs[i].task, "race-1");
            if (hash)
                same &= !strcmp(hash, cs[i].hash);
            hash = cs[i].hash;
        }
    }
    pthread_barrier_destroy(&go);
    ok(n202 == 1 && other == 0,
       "2: one 202, the rest 200 or 409 (202: %d, 200: %d, 409: %d, "
       "other: %d)",
       n202, n200, n409, other);
    ok(same, "2: every 200/202 is the same task with the same payload hash");
    char got[32];
    ok(wait_status(&a, "race-1", "succeeded", got, sizeof got), "2: the task succeeds (%s)", got);
    ok(tu_count_lines(sc.ledger, NULL) == 1, "2: exactly one effect at the receiver (%d)",
       tu_count_lines(sc.ledger, NULL));
    ok(tu_count_lines(sc.trace, "work ") == 1, "2: the work ran once (%d)",
       tu_count_lines(sc.trace, "work "));
    ok(srv_stop(&a, 0) == 0 && srv_stop(&b, 0) == 0, "2: both servers stop");
    free(body);
    tu_scene_free(&sc);
}

/* 3: the same key with changed parameters is refused and has no effect. */
static void fault_changed(void)
{
    tu_scene sc = tu_scene_new(D, "changed");
    srv s;
    if (srv_start(&s, sc.dir, sc.store, 1, NULL)) {
        ok(0, "3: the server starts");
        return;
    }
    char *body = ledger_body(sc.dir, "pay 10", 200, NULL);
    char *changed = ledger_body(sc.dir, "pay 1000", 0, NULL);
    resp r;
    post(&r, &s, "pay-1", body);
    char hash[80];
    snprintf(hash, sizeof hash, "%s", jstr_at(r.json, "payload_hash"));
    ok(r.status == 202, "3: the first is 202 (%ld)", r.status);
    resp_free(&r);
    post(&r, &s, "pay-1", changed);
    ok(r.status == 422 && tu_contains(err_of(&r, "message"), hash),
       "3: the changed one, while the first runs, is 422 naming the first's hash (%ld)", r.status);
    resp_free(&r);
    char got[32];
    ok(wait_status(&s, "pay-1", "succeeded", got, sizeof got), "3: the first succeeds (%s)", got);
    post(&r, &s, "pay-1", changed);
    ok(r.status == 422, "3: and after it finished, still 422 (%ld)", r.status);
    resp_free(&r);
    char *ledger = tu_read_file(sc.ledger, NULL);
    ok(tu_count_lines(sc.ledger, NULL) == 1, "3: exactly one effect at the receiver (%d)",
       tu_count_lines(sc.ledger, NULL));
    http(&r, &s, "GET", "/v1/tasks/pay-1", NULL, NULL, NULL, 0, 10000);
    ok(!strcmp(jstr_at(r.json, "payload_hash"), hash) &&
           !strcmp(jstr_at(json_object_get(r.json, "input"), "text"), "pay 10"),
       "3: the task kept the first's payload");
    resp_free(&r);
    free(ledger);
    ok(srv_stop(&s, 0) == 0, "3: the server stops");
    free(body), free(changed);
    tu_scene_free(&sc);
}

/* 4: the server (its workers too) SIGKILLed while the task's work runs; a new server finishes
 * it, with one effect. */
static void fault_kill(void)
{
    tu_scene sc = tu_scene_new(D, "kill");
    srv s;
    if (srv_start(&s, sc.dir, sc.store, 1, NULL)) {
        ok(0, "4: the server starts");
        return;
    }
    char *body = ledger_body(sc.dir, "killed", 2000, NULL);
    resp r;
    post(&r, &s, "kill-1", body);
    ok(r.status == 202, "4: accepted (%ld)", r.status);
    resp_free(&r);
    ok(wait_lines(sc.trace, "work ", 1, 30000), "4: the work started");
    ok(srv_stop(&s, 1) == 128 + SIGKILL, "4: the server is SIGKILLed mid-task");
    ok(tu_count_lines(sc.ledger, NULL) == 0, "4: no effect yet");
    if (srv_start(&s, sc.dir, sc.store, 1, NULL)) {
        ok(0, "4: a new server starts");
        return;
    }
    char got[32];
    ok(wait_status(&s, "kill-1", "succeeded", got, sizeof got),
       "4: the new server finishes the task (%s)", got);
    ok(tu_count_lines(sc.ledger, NULL) == 1, "4: exactly one effect at the receiver (%d)",
       tu_count_lines(sc.ledger, NULL));
    http(&r, &s, "GET", "/v1/tasks/kill-1/audit", NULL, NULL, NULL, 0, 10000);
    ok(tu_contains(r.body, "lease taken over"), "4: the audit shows the takeover");
    resp_free(&r);
    post(&r, &s, "kill-1", body);
    ok(r.status == 200, "4: the client's retry is 200 (%ld)", r.status);
    resp_free(&r);
    ok(srv_stop(&s, 0) == 0, "4: the server stops");
    free(body);
    tu_scene_free(&sc);
}

/* 5: the upstream's notification (the POST that creates the task) delivered again and again. */
static void fault_redelivery(void)
{
    tu_scene sc = tu_scene_new(D, "redelivery");
    srv s;
    if (srv_start(&s, sc.dir, sc.store, 2, NULL)) {
        ok(0, "5: the server starts");
        return;
    }
    char *body = ledger_body(sc.dir, "webhook event 7", 300, NULL);
    resp r;
    post(&r, &s, "evt-7", body);
    ok(r.status == 202, "5: the first delivery is 202 (%ld)", r.status);
    resp_free(&r);
    post(&r, &s, "evt-7", body);
    ok(r.status == 200, "5: a redelivery while it runs is 200 (%ld)", r.status);
    resp_free(&r);
    char got[32];
    ok(wait_status(&s, "evt-7", "succeeded", got, sizeof got), "5: the task succeeds (%s)", got);
    post(&r, &s, "evt-7", body);
    char line[200];
    snprintf(line, sizeof line, "%s", jstr_at(json_object_get(r.json, "result"), "line"));
    ok(r.status == 200 && line[0], "5: a redelivery after it is 200 with the result (%ld)",
       r.status);
    resp_free(&r);
    ok(srv_stop(&s, 0) == 0, "5: the server stops");
    if (srv_start(&s, sc.dir, sc.store, 1, NULL)) {
        ok(0, "5: a new server starts");
        return;
    }
    post(&r, &s, "evt-7", body);
    ok(r.status == 200 && !strcmp(jstr_at(json_object_get(r.json, "result"), "line"), line),
       "5: a redelivery to a restarted server is 200 with the same result");
    resp_free(&r);
    ok(tu_count_lines(sc.ledger, NULL) == 1, "5: exactly one effect at the receiver (%d)",
       tu_count_lines(sc.ledger, NULL));
    ok(tu_count_lines(sc.trace, "work ") == 1, "5: the work ran once (%d)",
       tu_count_lines(sc.trace, "work "));
    ok(srv_stop(&s, 0) == 0, "5: the server stops");
    free(body);
    tu_scene_free(&sc);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    D = tu_mkdtemp("acceptance");
    fault_disconnect();
    fault_race();
    fault_changed();
    fault_kill();
    fault_redelivery();
    tu_rm_rf(D);
    free(D);
    curl_global_cleanup();
    return tap_done();
}
