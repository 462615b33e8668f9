/* common/lock.h - the one kind of read-write lock cairn's threads share: writers first.
 *
 * glibc's default rwlock prefers readers, so a steady stream of short readers (transactions
 * on a store handle, steps running in-process) can keep a writer (a remap, a step host's fork)
 * waiting for ever. Writers first means a waiting writer stops new readers; a reader must not
 * take the lock again while it holds it (a waiting writer would then deadlock it), so callers
 * count their own nesting.
 *
 * Internal to libcairn (hidden `cairn__` symbols).
 */
#ifndef CAIRN_COMMON_LOCK_H
#define CAIRN_COMMON_LOCK_H

#include <pthread.h>

/* Initialises *l as a writers-first rwlock: 0, or pthread_rwlock_init's error number. */
int cairn__rwlock_init_writers_first(pthread_rwlock_t *l);

#endif
