/* checkpoint/guard.c - a damaged page that makes LMDB fault is CAIRN_ECORRUPT, not a dead
 * process.
 *
 * LMDB trusts its pages: a flipped byte in a branch page's child number or a node's offset
 * sends it to an address outside the map or past the file's end, and the process dies of
 * SIGSEGV or SIGBUS, or LMDB's own assertion aborts it. Record checksums (checksum.c) are verified
 * only once LMDB has handed a record over, and the file's size is checked against its meta pages
 * before it is mapped (filecheck.c); what lies between - the B-tree's own pages - LMDB reads
 * unchecked. So every transaction of the store runs under a guard: a fault while it is pushed jumps
 * back to the store function that pushed it (store.c), which closes the handle for use and returns
 * CAIRN_ECORRUPT. The transaction is abandoned, not aborted (LMDB's state is not to be trusted
 * any more): its reader slot or writer lock is released when the process exits, which a CLI
 * command then does with exit 74; a long-lived program should free the handle and open the
 * store again once it is repaired. A fault while no guard is pushed, in this thread, is not the
 * store's: it goes to the handler that was there before (the default: the process dies).
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "checkpoint/store_impl.h"

static _Thread_local cairn__guard *current;
static struct sigaction old_segv, old_bus;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void on_fault(int sig, siginfo_t *si, void *ctx)
{
    cairn__guard *g = current;
    if (g) {
        current = g->prev;
        g->sig = sig;
        siglongjmp(g->jb, 1);
    }
    struct sigaction *old = sig == SIGSEGV ? &old_segv : &old_bus;
    if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction) {
        old->sa_sigaction(sig, si, ctx);
        return;
    }
    if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
        old->sa_handler(sig);
        return;
    }
    /* the default: put it back; the faulting access runs again and the process dies of it */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, NULL);
}

static void install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);
}

/* LMDB's own consistency checks (mdb_assert: "root > 1" on a damaged directory record) call
 * this before they abort: under a guard it is the same damaged page as a fault. */
void cairn__guard_lmdb_assert(MDB_env *env, const char *msg)
{
    (void)env;
    cairn__guard *g = current;
    if (g) {
        current = g->prev;
        g->sig = SIGABRT;
        snprintf(g->what, sizeof g->what, "%s", msg ? msg : "");
        siglongjmp(g->jb, 1);
    }
}

void cairn__guard_push(cairn__guard *g)
{
    pthread_once(&once, install);
    g->prev = current;
    g->sig = 0;
    g->what[0] = 0;
    current = g;
}

void cairn__guard_pop(cairn__guard *g) { current = g->prev; }

void *cairn__guard_suspend(void)
{
    cairn__guard *g = current;
    current = NULL;
    return g;
}

void cairn__guard_resume(void *saved) { current = saved; }

int cairn__guard_fault(cairn_store *s, cairn__guard *g)
{
    s->broken = 2; /* cairn_store_free then leaves LMDB alone */
    if (g->sig == SIGABRT)
        return cairn__store_fail(s, CAIRN_ECORRUPT,
                                 "store %s: LMDB found a damaged page (%s): the store is damaged "
                                 "(run `cairn check`)",
                                 s->dir, g->what);
    return cairn__store_fail(s, CAIRN_ECORRUPT,
                             "store %s: reading it touched a damaged page (%s): the store is "
                             "damaged (run `cairn check`)",
                             s->dir, g->sig == SIGBUS ? "SIGBUS" : "SIGSEGV");
}
