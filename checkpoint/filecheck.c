/* checkpoint/filecheck.c - data.mdb checked against what the store knows of itself, before LMDB
 * maps it.
 *
 * LMDB trusts its file. Truncated to nothing it is a new, empty store, so every task would run
 * again, its effects too; truncated part way it is mapped as it is, and the first read of a page
 * past the end kills the process with SIGBUS. So every open, before mdb_env_open and under the
 * map lock (no process grows the map meanwhile), compares the file with two witnesses that live
 * beside it:
 *   - the file `created`, written once the store's databases exist (cairn__file_mark_created):
 *     from then on a data.mdb that is missing or empty is a lost store, never a new one;
 *   - the newest meta page of data.mdb itself: the file must hold every page up to the meta
 *     page's last page;
 *   - in a sync store, the marker (synced.c): the file must not be older than the last durable
 *     point it records.
 * A store that fails is refused with CAIRN_ECORRUPT naming the file and what was expected;
 * nothing is written to it. A file that is not an LMDB file at all is left to LMDB, which refuses
 * it without mapping it (MDB_INVALID).
 *
 * The meta pages are read before the file's size, and the file never shrinks while the store is
 * in use (map.c), so a commit racing the check can only make the file look longer than its meta
 * page says, never shorter. A meta page read while another process writes it could still be
 * torn; a failing check is therefore read again once before the store is refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/lmdb_meta.h"
#include "checkpoint/store_impl.h"

#define CREATED "created"

static int exists(const char *dir, const char *name)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* What the store's witnesses say it has: a reason it must have a data.mdb with commits (into why),
 * or 0 for a store that may be new. */
static int must_have_commits(cairn_store *s, const char *dir, char *why, size_t cap)
{
    uint64_t marker = s->synced ? cairn__synced_durable_commit(s) : 0;
    if (marker) {
        snprintf(why, cap, "its marker %s/synced records a durable commit (transaction %llu)", dir,
                 (unsigned long long)marker);
        return 1;
    }
    if (exists(dir, CREATED)) {
        snprintf(why, cap, "%s/%s says its databases were created", dir, CREATED);
        return 1;
    }
    return 0;
}

/* One look at data.mdb. 0: fine (or for LMDB to judge); CAIRN_ECORRUPT with the reason in msg;
 * CAIRN_EIO when it cannot be read. */
static int look(cairn_store *s, const char *dir, char *msg, size_t cap)
{
    char path[4200], why[512];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT)
            return cairn__store_fail(s, CAIRN_EIO, "cannot read %s: %s", path, strerror(errno));
        if (!must_have_commits(s, dir, why, sizeof why))
            return 0;
        snprintf(msg, cap, "%s is missing, but %s: the store's data is lost, not new", path, why);
        return CAIRN_ECORRUPT;
    }
    unsigned char page0[CAIRN__LMDB_META_END], page1[CAIRN__LMDB_META_END];
    ssize_t got0 = pread(fd, page0, sizeof page0, 0);
    cairn__lmdb_meta m0, m1;
    int ok0 = got0 == (ssize_t)sizeof page0 && cairn__lmdb_meta_get(page0, &m0);
    uint32_t psize = ok0 ? m0.dbs[CAIRN__LMDB_FREE_DBI].pad : 0;
    int ok1 = 0;
    if (ok0 && psize >= sizeof page1 && psize <= (1u << 16) && !(psize & (psize - 1)))
        ok1 = pread(fd, page1, sizeof page1, psize) == (ssize_t)sizeof page1 &&
              cairn__lmdb_meta_get(page1, &m1);
    struct stat st;
    int rc = fstat(fd, &st); /* after the meta pages: see the design comment */
    int e = errno;
    close(fd);
    if (got0 < 0 || rc != 0)
        return cairn__store_fail(s, CAIRN_EIO, "cannot read %s: %s", path,
                                 strerror(got0 < 0 ? EIO : e));
    uint64_t size = (uint64_t)st.st_size;
    if (size == 0) {
        if (!must_have_commits(s, dir, why, sizeof why))
            return 0; /* a first open killed before LMDB wrote its meta pages */
        snprintf(msg, cap, "%s is empty, but %s: the file was truncated", path, why);
        return CAIRN_ECORRUPT;
    }
    if (!ok0)
        return 0; /* not a meta page LMDB wrote: LMDB refuses the file itself */
    if (size < 2ull * psize) {
        snprintf(msg, cap,
                 "%s is %llu bytes, less than its two meta pages of %u bytes: the file was "
                 "truncated",
                 path, (unsigned long long)size, psize);
        return CAIRN_ECORRUPT;
    }
    const cairn__lmdb_meta *m = ok1 && m1.txnid > m0.txnid ? &m1 : &m0;
    uint64_t need = ((uint64_t)m->last_pg + 1) * psize;
    if (size < need) {
        snprintf(msg, cap,
                 "%s is %llu bytes, but its newest meta page (transaction %llu) uses %llu pages "
                 "of %u bytes, %llu bytes: the file was truncated",
                 path, (unsigned long long)size, (unsigned long long)m->txnid,
                 (unsigned long long)m->last_pg + 1, psize, (unsigned long long)need);
        return CAIRN_ECORRUPT;
    }
    uint64_t marker = s->synced ? cairn__synced_durable_commit(s) : 0;
    if (marker > m->txnid) {
        snprintf(msg, cap,
                 "%s ends at transaction %llu, older than the last durable commit its marker "
                 "%s/synced or its journal records (transaction %llu): an older copy of the "
                 "file was put back",
                 path, (unsigned long long)m->txnid, dir, (unsigned long long)marker);
        return CAIRN_ECORRUPT;
    }
    return 0;
}

int cairn__file_check(cairn_store *s, const char *dir)
{
    char msg[1200];
    int rc = look(s, dir, msg, sizeof msg);
    if (rc == CAIRN_ECORRUPT) { /* once more, past a meta page torn by a concurrent commit */
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
        rc = look(s, dir, msg, sizeof msg);
    }
    return rc == CAIRN_ECORRUPT ? cairn__store_fail(s, rc, "store %s refused: %s", dir, msg) : rc;
}

int cairn__store_was_created(const char *dir)
{
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/synced", dir);
    return exists(dir, CREATED) || (stat(path, &st) == 0 && st.st_size > 0);
}

void cairn__file_mark_created(cairn_store *s, const char *dir)
{
    (void)s;
    if (exists(dir, CREATED))
        return;
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/%s", dir, CREATED);
    snprintf(tmp, sizeof tmp, "%s/.%s.XXXXXX", dir, CREATED);
    /* a store that may only be read (EACCES, EROFS) stays unmarked: it was made by a cairn before
     * this file existed, and its marker, if any, still witnesses its commits */
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return;
    static const char text[] = "cairn store: its databases exist; data.mdb must not be empty\n";
    int ok = write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1) && fdatasync(fd) == 0;
    close(fd);
    if (ok && link(tmp, path) == 0) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) { /* the new name survives a power cut */
            fsync(dfd);
            close(dfd);
        }
    }
    unlink(tmp);
}
