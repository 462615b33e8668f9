/* common/lock.c - writers-first read-write locks and futexes (see lock.h for why). */
#include "common/lock.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int cairn__rwlock_init_writers_first(pthread_rwlock_t *l)
{
    pthread_rwlockattr_t a;
    int rc = pthread_rwlockattr_init(&a);
    if (rc)
        return rc;
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    rc = pthread_rwlock_init(l, &a);
    pthread_rwlockattr_destroy(&a);
    return rc;
}

void cairn__futex_wait(uint32_t *word, uint32_t seen, long ms, int shared)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    syscall(SYS_futex, word, shared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE, seen, ms < 0 ? NULL : &ts,
            NULL, 0);
}

void cairn__futex_wake(uint32_t *word, int n, int shared)
{
    syscall(SYS_futex, word, shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}
