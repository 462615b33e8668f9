/* tools/serve_sched.c - `serve --model`'s scheduler thread and the life of a job.
 *
 * One scheduler thread owns the engine and its batch (gpu/batch.h, batch-invariant) and loops:
 * admit queued jobs while fewer than --max-seqs are active, run one cairn__batch_step, and move
 * each finished sequence's result to its job (serve_api.c shapes what the client gets). The
 * engine's callbacks run inside that step, on this thread, and take the server mutex only to
 * hand a token over; the mutex is not held across a step. A job whose client went away is
 * marked cancelled by its connection, and the token callback's answer removes it from the
 * batch at the next step. Admission is counted, not timed: at most --max-seqs active and
 * --queue waiting, and beyond that 429, so a client backs off rather than piling up. When every
 * active sequence waits for a free KV block, the newest gives its blocks back (503, retry).
 *
 * A queued job has two references, the scheduler's and its connection's: whichever is done with
 * it last frees it, so a client that leaves mid-generation and a sequence that ends while its
 * stream is being sent need no other agreement.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "runner/cli.h"
#include "tools/serve_model.h"

double cairn__serve_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void cairn__serve_job_free(job *j)
{
    free(j->ids);
    free(j->prev);
    for (size_t i = 0; i < MAX_STOP; i++)
        free(j->stop[i]);
    free(j->out.p);
    free(j->utf.p);
    free(j->text.p);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void cairn__serve_unref(job *j)
{
    if (--j->refs == 0)
        cairn__serve_job_free(j);
}

/* The client went away: the job ends with nothing to send. Under mu. */
static void job_cancelled(job *j)
{
    j->sv->cancelled++;
    j->st = J_DONE;
    pthread_cond_broadcast(&j->cv);
}

unsigned cairn__serve_refusal(server *sv)
{
    if (sv->stopping) {
        sv->rejected_stopping++;
        return 503;
    }
    if (sv->n_active + sv->q_len >= sv->max_seqs + sv->queue_max) {
        sv->rejected_full++;
        return 429;
    }
    return 0;
}

void cairn__serve_enqueue(server *sv, job *j)
{
    j->t_queued = cairn__serve_now();
    j->refs = 2;
    sv->tokens_in += j->n_ids;
    sv->queue[(sv->q_head + sv->q_len++) % sv->q_cap] = j;
    pthread_cond_signal(&sv->work);
}

/* Queued requests into the batch while there is room. Under mu. */
static void admit(server *sv)
{
    while (sv->q_len && sv->n_active < sv->max_seqs) {
        job *j = sv->queue[sv->q_head];
        if (j->cancelled || sv->cancel_all) {
            sv->q_head = (sv->q_head + 1) % sv->q_cap, sv->q_len--;
            if (sv->cancel_all)
                cairn__serve_job_fail(j, 503, "the server is stopping");
            else
                job_cancelled(j);
            cairn__serve_unref(j);
            continue;
        }
        int rc = j->n_prev ? cairn__batch_add_resume(sv->b, j->ids, j->n_ids, j->prev, j->n_prev,
                                                     j->state, sizeof j->state, &j->o, &j->bid)
                           : cairn__batch_add(sv->b, j->ids, j->n_ids, &j->o, &j->bid);
        if (rc == CAIRN_ENOMEM && sv->n_active)
            break; /* not enough free KV blocks now: it waits for some to come back */
        sv->q_head = (sv->q_head + 1) % sv->q_cap, sv->q_len--;
        if (rc) {
            cairn__serve_job_fail(j, rc == CAIRN_ENOMEM ? 503 : 500,
                                  "cannot start the generation: %s", cairn__batch_errmsg(sv->b));
            cairn__serve_unref(j);
            continue;
        }
        j->st = J_ACTIVE;
        sv->active[sv->n_active++] = j;
    }
}

/* Finished, cancelled and failed sequences leave the batch. Under mu. */
static void reap(server *sv, int step_rc)
{
    int k = 0;
    for (int i = 0; i < sv->n_active; i++) {
        job *j = sv->active[i];
        cairn__gen_result r;
        int state = cairn__batch_seq_state(sv->b, j->bid);
        if (state == CAIRN__SEQ_DONE && cairn__batch_result(sv->b, j->bid, &r) == 0) {
            if (r.finish == CAIRN__FINISH_CANCEL && sv->cancel_all)
                cairn__serve_job_fail(j, 503, "the server is stopping: cancelled after %zu tokens",
                                      j->n_new);
            else if (r.finish == CAIRN__FINISH_CANCEL)
                job_cancelled(j);
            else
                cairn__serve_job_done(j, &r);
            cairn__gen_result_free(&r);
        } else if (j->cancelled || sv->cancel_all || step_rc < 0) {
            if (step_rc < 0 && !j->cancelled)
                cairn__serve_job_fail(j, step_rc == CAIRN_ENOMEM ? 503 : 500,
                                      "generation failed: %s", cairn__batch_errmsg(sv->b));
            else if (sv->cancel_all && !j->cancelled)
                cairn__serve_job_fail(j, 503, "the server is stopping: cancelled after %zu tokens",
                                      j->n_new);
            else
                job_cancelled(j);
        } else {
            sv->active[k++] = j;
            continue;
        }
        cairn__batch_remove(sv->b, j->bid);
        cairn__serve_unref(j);
    }
    sv->n_active = k;
}

static void *scheduler(void *arg)
{
    server *sv = arg;
    pthread_mutex_lock(&sv->mu);
    for (;;) {
        reap(sv, 0);
        admit(sv);
        if (sv->quit && !sv->n_active && !sv->q_len)
            break;
        if (!sv->n_active) {
            pthread_cond_wait(&sv->work, &sv->mu);
            continue;
        }
        sv->last_batch = sv->n_active;
        pthread_mutex_unlock(&sv->mu);
        if (sv->step_delay_ms)
            usleep(sv->step_delay_ms * 1000u);
        const unsigned long long before = sv->tokens_out; /* read racily: a rate, not a count */
        const double t0 = cairn__serve_now();
        int rc = cairn__batch_step(sv->b);
        const double dt = cairn__serve_now() - t0;
        pthread_mutex_lock(&sv->mu);
        sv->step_seconds += dt;
        sv->step_tokens += sv->tokens_out - before;
        if (rc == CAIRN_ENOMEM) {
            /* every sequence waits for a KV block: the newest gives its blocks back */
            job *j = sv->active[sv->n_active - 1];
            cairn__serve_job_fail(j, 503, "the KV cache is full (raise --kv-blocks); retry");
            cairn__batch_remove(sv->b, j->bid);
            cairn__serve_unref(j);
            sv->n_active--;
            rc = 0;
        }
        reap(sv, rc < 0 ? rc : 0);
    }
    pthread_mutex_unlock(&sv->mu);
    return NULL;
}

int cairn__serve_init(server *sv)
{
    pthread_mutex_init(&sv->mu, NULL);
    pthread_cond_init(&sv->work, NULL);
    sv->q_cap = sv->queue_max + sv->max_seqs;
    sv->queue = calloc((size_t)sv->q_cap, sizeof *sv->queue);
    sv->active = calloc((size_t)sv->max_seqs, sizeof *sv->active);
    return sv->queue && sv->active ? 0 : -1;
}

int cairn__serve_start(server *sv)
{
    int rc = pthread_create(&sv->th, NULL, scheduler, sv);
    if (rc) {
        errno = rc;
        return -1;
    }
    sv->running = 1;
    return 0;
}

void cairn__serve_drain(server *sv, long grace_s)
{
    pthread_mutex_lock(&sv->mu);
    sv->stopping = 1;
    int busy = sv->n_active + sv->q_len;
    pthread_mutex_unlock(&sv->mu);
    cairn__log(CAIRN__LOG_NOTE, "serve", "stopping", NULL, NULL,
               "stopping: %d request(s) in flight get %ld s to finish", busy, grace_s);
    for (double end = cairn__serve_now() + (double)grace_s; busy && cairn__serve_now() < end;) {
        usleep(20000);
        pthread_mutex_lock(&sv->mu);
        busy = sv->n_active + sv->q_len;
        pthread_mutex_unlock(&sv->mu);
    }
}

void cairn__serve_cancel(server *sv)
{
    if (!sv->running)
        return;
    pthread_mutex_lock(&sv->mu);
    sv->stopping = sv->cancel_all = sv->quit = 1;
    pthread_cond_signal(&sv->work);
    pthread_mutex_unlock(&sv->mu);
    pthread_join(sv->th, NULL);
    sv->running = 0;
}

void cairn__serve_free(server *sv)
{
    pthread_mutex_destroy(&sv->mu);
    pthread_cond_destroy(&sv->work);
    free(sv->queue);
    free(sv->active);
}
