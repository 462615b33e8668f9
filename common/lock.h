/* common/lock.h - what cairn's threads wait with: writers-first read-write locks and futexes.
 *
 * glibc's default rwlock prefers readers, so a steady stream of short readers (transactions
 * on a store handle, steps running in-process) can keep a writer (a remap, a step host's fork)
 * waiting for ever. Writers first means a waiting writer stops new readers; a reader must not
 * take the lock again while it holds it (a waiting writer would then deadlock it), so callers
 * count their own nesting.
 *
 * A futex is the wait for one word to change, with no mutex to take on waking: the store's
 * group commit wakes each waiting writer alone, and the journal's flush waiters sleep on its
 * shared header across processes. A wake may reach a word whose waiter has already seen the
 * change and gone (the word is then someone else's, or nobody's): waiters always recheck.
 *
 * Internal to libcairn (hidden `cairn__` symbols).
 */
#ifndef CAIRN_COMMON_LOCK_H
#define CAIRN_COMMON_LOCK_H

#include <pthread.h>
#include <stdint.h>

/* Initialises *l as a writers-first rwlock: 0, or pthread_rwlock_init's error number. */
int cairn__rwlock_init_writers_first(pthread_rwlock_t *l);

/* Sleeps while *word is `seen`, at most ms milliseconds (ms < 0: no limit); it may also return
 * early. shared: the word lies in memory other processes map too. */
void cairn__futex_wait(uint32_t *word, uint32_t seen, long ms, int shared);
/* Wakes at most n of the word's waiters. */
void cairn__futex_wake(uint32_t *word, int n, int shared);

#endif
