/* common/lock.c - writers-first read-write locks (see lock.h for why). */
#include "common/lock.h"

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
