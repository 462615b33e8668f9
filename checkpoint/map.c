/* checkpoint/map.c - the store's memory map: its durability, its size, its disk space, and who
 * may change them.
 *
 * LMDB maps data.mdb into every process that opens the store. A nosync store maps it writable
 * (MDB_WRITEMAP), and then LMDB keeps the file exactly as long as the process's map: opening,
 * growing, and adopting a size another process set all call ftruncate. Two rules keep that
 * safe with many processes on one store:
 *   - The file never gets shorter. Every call that can set a map size runs under an exclusive
 *     lock on `map.lock` and asks for at least the file's current size: a process whose map
 *     reaches past the end of the file dies of SIGBUS on its next write there.
 *   - Every page has disk space behind it before LMDB can write it. The stretch a growth adds is
 *     reserved first (fallocate; where the filesystem has none, zeros written past the old end,
 *     which no process can be using), so a full disk is CAIRN_EFULL here, never a SIGBUS in the
 *     middle of a transaction. (Copy-on-write filesystems cannot promise space for overwrites:
 *     on btrfs or ZFS a full disk can still stop a nosync writer.)
 * A sync store maps the file read-only and LMDB never truncates it: it reserves nothing, and its
 * sizes are computed by the same code. It takes the map lock at open, where a store whose
 * machine rebooted returns to its last durable state before LMDB reads it (synced.c), and
 * around remaps, which first drop the process's pin (LMDB remaps only with no transaction open).
 *
 * The durability itself is the store's, fixed when it is created and recorded in the file
 * `durability` (settle_durability): LMDB forbids mixing processes that map the file writable
 * with ones that do not.
 *
 * This process's map address is kept (locate): a forked step child seals the map read-only with
 * one mprotect, calling nothing else after fork. A failed remap leaves LMDB without a map; the
 * handle is then marked broken rather than used again.
 */
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/store_impl.h"

#define INITIAL_MAP (8ull << 20)
#define SYNC_INITIAL_MAP (1ull << 30)

/* A map's first size. A nosync store reserves disk space for all of its map, so it starts
 * small. A sync store maps the file read-only and reserves nothing: its map costs address
 * space only, so it starts at SYNC_INITIAL_MAP. A growth remaps every process's view, and each
 * process then faults in again every page it reads: K consume workers on a fresh store paid
 * that at 8, 16, 32 and 64 MiB (64k page faults for 2,000 ledger tasks at K = 16, 50k with
 * the large first map; bench/README.md). Test hook: CAIRN_TEST_SYNC_MAP (bytes) sets a sync
 * store's, for the tests of a growth. */
static uint64_t first_map(const cairn_store *s)
{
    if (s->durability != CAIRN_SYNC)
        return INITIAL_MAP;
    const char *env = getenv("CAIRN_TEST_SYNC_MAP");
    unsigned long long v = env && *env ? strtoull(env, NULL, 10) : 0;
    return v ? (uint64_t)v : SYNC_INITIAL_MAP;
}

static const char *durability_name(cairn_durability d)
{
    return d == CAIRN_NOSYNC ? "nosync" : "sync";
}

/* ------------------------------------------------------------------ durability */

/* Reads `path`: 1 and *d set if it says sync or nosync, 0 if it does not exist, <0 on error. */
static int read_durability(cairn_store *s, const char *path, cairn_durability *d)
{
    char buf[16];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT
                   ? 0
                   : cairn__store_fail(s, CAIRN_EIO, "cannot read %s: %s", path, strerror(errno));
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    if (strcmp(buf, "sync\n") == 0 || strcmp(buf, "nosync\n") == 0) {
        *d = buf[0] == 'n' ? CAIRN_NOSYNC : CAIRN_SYNC;
        return 1;
    }
    return cairn__store_fail(
        s, CAIRN_ECORRUPT, "%s: expected \"sync\" or \"nosync\", found %zd bytes that are neither",
        path, n);
}

/* Settles s->durability from the store's file `durability`, creating it for a new store with
 * what was asked (else sync). The file appears whole or not at all: it is written and flushed
 * under a temporary name and link()ed into place (EEXIST: another process created the store
 * first; its choice stands). A store made before the file existed has data.mdb and no file: it
 * is sync. */
int cairn__map_settle_durability(cairn_store *s, const char *dir)
{
    char path[4096], tmp[4200], data[4096];
    snprintf(path, sizeof path, "%s/durability", dir);
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    cairn_durability want = s->durability_asked ? s->durability : CAIRN_SYNC, have = want;
    int rc = read_durability(s, path, &have);
    struct stat st;
    if (rc == 0 && stat(data, &st) == 0) {
        have = CAIRN_SYNC;
    } else if (rc == 0) {
        snprintf(tmp, sizeof tmp, "%s/.durability.XXXXXX", dir);
        int fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
            return cairn__store_fail(s, errno == ENOSPC ? CAIRN_EFULL : CAIRN_EIO,
                                     "cannot create %s: %s", tmp, strerror(errno));
        const char *text = want == CAIRN_NOSYNC ? "nosync\n" : "sync\n";
        size_t len = strlen(text);
        int err = 0;
        if (write(fd, text, len) != (ssize_t)len)
            err = errno ? errno : EIO;
        else if (fdatasync(fd) != 0)
            err = errno;
        close(fd);
        if (!err && link(tmp, path) != 0 && errno != EEXIST)
            err = errno;
        unlink(tmp);
        if (err)
            return cairn__store_fail(s, err == ENOSPC ? CAIRN_EFULL : CAIRN_EIO,
                                     "cannot write %s: %s", path, strerror(err));
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) { /* the new name survives a power cut */
            fsync(dfd);
            close(dfd);
        }
        rc = read_durability(s, path, &have); /* ours, or the one that won */
        if (rc == 0)
            rc = cairn__store_fail(s, CAIRN_EIO, "%s vanished while the store was created", path);
    }
    if (rc < 0)
        return rc;
    if (s->durability_asked && have != s->durability)
        return cairn__store_fail(s, CAIRN_EINVAL,
                                 "store %s is a %s store and %s was asked for: a store's "
                                 "durability is fixed when it is created",
                                 dir, durability_name(have), durability_name(s->durability));
    s->durability = have;
    return 0;
}

/* ------------------------------------------------------------------ the lock, the space */

/* The map lock: a POSIX record lock on map.lock (per process, so a forked child never holds
 * it, and gone when the process dies). A nosync store takes it around every map size change
 * (LMDB truncates a writable map to its size); a sync store at open, for recovery (synced.c),
 * and around remaps. A holder keeps it for a few system calls; one that keeps it a minute
 * (stopped, say) makes the others give up with CAIRN_EBUSY rather than wait for ever. */
static int map_lock(cairn_store *s)
{
    /* a read-only handle changes no map: it only keeps the size from changing while it opens */
    struct flock fl = {
        .l_type = s->readonly ? F_RDLCK : F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    if (s->map_lock_fd < 0)
        return 0;
    for (int waited_ms = 0;; waited_ms += 5) {
        if (fcntl(s->map_lock_fd, F_SETLK, &fl) == 0)
            return 0;
        if (errno != EACCES && errno != EAGAIN && errno != EINTR)
            return cairn__store_fail(s, CAIRN_EIO, "cannot lock %s/map.lock: %s", s->dir,
                                     strerror(errno));
        if (waited_ms >= 60000)
            return cairn__store_fail(s, CAIRN_EBUSY,
                                     "store %s: another process has held its map lock (map.lock) "
                                     "for a minute; try later",
                                     s->dir);
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
}

static void map_unlock(cairn_store *s)
{
    struct flock fl = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    if (s->map_lock_fd >= 0)
        fcntl(s->map_lock_fd, F_SETLK, &fl);
}

static uint64_t file_size(cairn_store *s)
{
    int fd;
    struct stat st;
    if (mdb_env_get_fd(s->env, &fd) || fstat(fd, &st))
        return 0;
    return (uint64_t)st.st_size;
}

/* Gives data.mdb disk space for [from, to) (nosync stores), under the map lock. Where the
 * filesystem has no fallocate, zeros are written instead, but only if `zeros_ok`: the range
 * is past the end of every process's map (or a store nobody else has opened yet), so the zeros
 * overwrite nothing anyone uses; otherwise the range is left as it is. */
static int reserve(cairn_store *s, uint64_t from, uint64_t to, int zeros_ok)
{
    enum { CHUNK = 1 << 16 };
    static const char zeros[CHUNK];
    int fd;
    if (s->durability != CAIRN_NOSYNC || to <= from || mdb_env_get_fd(s->env, &fd))
        return 0;
    int err = 0;
    if (fallocate(fd, 0, (off_t)from, (off_t)(to - from)) != 0) {
        err = errno;
        if ((err == EOPNOTSUPP || err == ENOSYS) && !zeros_ok) {
            err = 0; /* no fallocate, and zeros could overwrite a page in use: leave it */
        } else if (err == EOPNOTSUPP || err == ENOSYS) { /* no fallocate: write the zeros */
            err = 0;
            for (uint64_t off = from; off < to && !err;) {
                size_t n = to - off < CHUNK ? (size_t)(to - off) : CHUNK;
                ssize_t w = pwrite(fd, zeros, n, (off_t)off);
                if (w <= 0)
                    err = w < 0 ? errno : EIO;
                else
                    off += (uint64_t)w;
            }
        }
    }
    if (!err)
        return 0;
    return cairn__store_fail(s, err == ENOSPC || err == EDQUOT ? CAIRN_EFULL : CAIRN_EIO,
                             "store %s: cannot reserve %llu bytes on disk for the map: %s (nothing "
                             "was written)",
                             s->dir, (unsigned long long)(to - from), strerror(err));
}

/* LMDB without a map: mdb_env_set_mapsize unmaps first, and if the new map fails it is left
 * with none (and a later set_mapsize only records a size, it maps nothing). Only closing and
 * reopening the environment maps it again, so the handle is marked broken: every later call
 * says so instead of touching the missing map. */
static int remap_failed(cairn_store *s, int rc, const char *what)
{
    s->broken = 1;
    s->map_addr = NULL;
    int err = cairn__mdb_fail(NULL, s, rc, what);
    char msg[sizeof s->errmsg];
    snprintf(msg, sizeof msg, "%s", cairn_store_errmsg(s));
    return cairn__store_fail(s, err, "%s; this store handle has no map left: reopen the store",
                             msg);
}

/* Another process grew the map: take its size. Sync: the size the newest meta page records
 * (LMDB does not truncate read-only maps); nosync: the file's, which is at least every
 * process's map, under the map lock. */
static int adopt_size(cairn_store *s)
{
    cairn__synced_unpin(s); /* LMDB remaps only with no transaction open in this process */
    int rc = map_lock(s);
    if (rc)
        return rc;
    uint64_t old = s->map_size;
    size_t size = s->durability == CAIRN_NOSYNC ? (size_t)file_size(s) : 0;
    if (size && size < old)
        size = (size_t)old;
    rc = mdb_env_set_mapsize(s->env, size);
    if (rc)
        rc = remap_failed(s, rc, "adopt the map size another process set");
    map_unlock(s);
    MDB_envinfo info;
    if (!rc && mdb_env_info(s->env, &info) == 0)
        s->map_size = info.me_mapsize;
    return rc;
}

/* Finds this process's map from a pointer into it (a key of the main database), so that it is
 * this handle's map even if the file is mapped twice. Nosync stores only (sync maps are
 * read-only already, and prepare_ahead does not need the address there). */
static void locate(cairn_store *s)
{
    s->map_addr = NULL;
    s->map_len = 0;
    s->ready = 0;
    MDB_txn *txn;
    MDB_dbi main;
    MDB_cursor *c;
    MDB_val k, v;
    if (s->durability != CAIRN_NOSYNC)
        return;
    int rc = MDB_MAP_RESIZED;
    for (int tries = 0; tries < 3 && rc == MDB_MAP_RESIZED; tries++)
        if ((rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn)) == MDB_MAP_RESIZED &&
            adopt_size(s) != 0)
            return;
    if (rc)
        return;
    unsigned long p = 0;
    if (mdb_dbi_open(txn, NULL, 0, &main) == 0 && mdb_cursor_open(txn, main, &c) == 0) {
        if (mdb_cursor_get(c, &k, &v, MDB_FIRST) == 0)
            p = (unsigned long)k.mv_data;
        mdb_cursor_close(c);
    }
    mdb_txn_abort(txn);
    FILE *f = p ? fopen("/proc/self/maps", "re") : NULL;
    if (!f)
        return;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo <= p && p < hi) {
            MDB_envinfo info;
            if (mdb_env_info(s->env, &info) == 0 && hi - lo >= info.me_mapsize) {
                s->map_addr = (void *)lo;
                s->map_len = info.me_mapsize;
            }
            break;
        }
    }
    fclose(f);
}

void cairn__store_seal(cairn_store *s)
{
    if (s && s->map_addr) /* only a system call: this runs in a child after fork */
        mprotect(s->map_addr, s->map_len, PROT_READ);
}

void cairn__map_note(cairn_store *s)
{
    MDB_envinfo info;
    if (mdb_env_info(s->env, &info) == 0)
        s->map_size = info.me_mapsize;
    locate(s);
}

/* ------------------------------------------------------------------ open, grow, adopt */

int cairn__map_open(cairn_store *s, const char *dir, unsigned flags)
{
    char path[4096];
    int rc;
    if (s->durability == CAIRN_SYNC && (rc = cairn__synced_open(s, dir)))
        return rc;
    snprintf(path, sizeof path, "%s/map.lock", dir);
    s->map_lock_fd = s->readonly ? open(path, O_RDONLY | O_CLOEXEC)
                                 : open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (s->map_lock_fd < 0 && !(s->readonly && errno == ENOENT))
        return cairn__store_fail(s, errno == ENOSPC ? CAIRN_EFULL : CAIRN_EIO, "cannot open %s: %s",
                                 path, strerror(errno));
    if ((rc = map_lock(s)))
        return rc;
    /* A sync store returns to its last durable state if the machine rebooted since (synced.c),
     * before LMDB reads the file, and no other process can be opening it meanwhile. */
    if (s->durability == CAIRN_SYNC && (rc = cairn__synced_recover(s, dir))) {
        map_unlock(s);
        return rc;
    }
    /* A data.mdb shorter than its pages, emptied or lost is refused before LMDB maps it. */
    if ((rc = cairn__file_check(s, dir))) {
        map_unlock(s);
        return rc;
    }
    /* The file's size if it is bigger than the first map, at most map_max (LMDB never maps less
     * than the used pages); a nosync store never less than its file (the rule above: its map
     * limit stops growth, it does not shrink the store). */
    struct stat st;
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    uint64_t file = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0, want = first_map(s);
    int fresh = file == 0;
    if (file > want)
        want = file;
    if (want > s->map_max)
        want = s->map_max;
    if (s->durability == CAIRN_NOSYNC && file > want)
        want = file;
    mdb_env_set_mapsize(s->env, (size_t)want);
    rc = mdb_env_open(s->env, dir, flags, 0600);
    if (rc) {
        map_unlock(s);
        return cairn__mdb_fail(NULL, s, rc, "open store");
    }
    /* a recovered sync store's journal is applied before any other process may open it */
    if (s->synced && (rc = cairn__synced_replay(s))) {
        map_unlock(s);
        return rc;
    }
    MDB_envinfo info;
    MDB_stat est;
    if (s->durability == CAIRN_NOSYNC && !s->readonly && mdb_env_info(s->env, &info) == 0 &&
        mdb_env_stat(s->env, &est) == 0) {
        /* Every open makes sure the whole map has space (fallocate over allocated blocks costs
         * next to nothing): a new store's file is a hole after its two meta pages, and a store
         * whose first open failed or was killed here may still have holes. Zeros instead of
         * fallocate only for a store nobody else can have written yet. */
        rc = reserve(s, fresh ? 2ull * est.ms_psize : 0, info.me_mapsize, fresh);
        if (rc && fresh)
            unlink(path); /* nothing of it was used: "nothing was written" stays true */
    }
    map_unlock(s);
    if (!rc && mdb_env_info(s->env, &info) == 0)
        s->map_size = info.me_mapsize;
    return rc; /* the caller locates the map once its databases exist (cairn__map_note) */
}

static int map_grow(cairn_store *s)
{
    cairn__synced_unpin(s); /* LMDB remaps only with no transaction open in this process */
    int rc = map_lock(s);
    if (rc)
        return rc;
    /* Another process may have grown it already: adopt the file's size if it is bigger (that is
     * not our growth, whatever our limit says). */
    uint64_t old = s->map_size, file = file_size(s), next;
    if (file > old && s->durability == CAIRN_NOSYNC) {
        next = file;
    } else if (old >= s->map_max) {
        map_unlock(s);
        return cairn__store_fail(s, CAIRN_EFULL,
                                 "store %s is full: map limit of %llu bytes reached", s->dir,
                                 (unsigned long long)s->map_max);
    } else {
        /* double while small; past 1 GiB grow by 1 GiB (a nosync store reserves all of it) */
        next = old < (1ull << 30) ? old * 2 : old + (1ull << 30);
        if (next > s->map_max)
            next = s->map_max;
        if ((rc = reserve(s, file > old ? file : old, next, 1))) {
            map_unlock(s);
            return rc;
        }
    }
    rc = mdb_env_set_mapsize(s->env, (size_t)next);
    if (rc)
        rc = remap_failed(s, rc, "grow map");
    map_unlock(s);
    if (!rc)
        cairn__map_note(s);
    return rc;
}

/* Both remap: no other thread of the process may be inside a transaction meanwhile. */
int cairn__map_grow(cairn_store *s)
{
    int held = cairn__use_alone(s);
    int rc = map_grow(s);
    cairn__use_back(s, held);
    return rc;
}

int cairn__map_adopt(cairn_store *s)
{
    int held = cairn__use_alone(s);
    int rc = adopt_size(s);
    if (!rc)
        cairn__map_note(s);
    cairn__use_back(s, held);
    return rc;
}

/* ------------------------------------------------------------------ ahead of use */

/* Prepares the space just past the used pages by writing zeros there, in both modes:
 *   sync:   keeps data.mdb's size ahead of use. A commit that grows the file makes its
 *           fdatasync flush the file's size and extent metadata too; writing into space that
 *           already exists flushes only the pages.
 *   nosync: LMDB writes new pages straight into the map, and a page not yet in the page cache
 *           costs a fault that reads it in and zero-fills it (three per 8 KB output). Writing
 *           whole pages of zeros creates them at a fraction of that cost (a fault then only
 *           maps a page that is there). Mapping the stretch writable ahead as well
 *           (MADV_POPULATE_WRITE) was measured slower: 8 KB steps/s 74-87k with it, 77-107k
 *           without, alternating. The space is reserved already, so nothing here can fail
 *           for it.
 * Runs right after a write transaction begins: we hold the writer lock and have written
 * nothing, and no snapshot references a page past the last used one (LMDB never lowers it).
 * Failures are harmless: the commit then does this work itself. */
void cairn__map_prepare_ahead(cairn_store *s)
{
    enum { MIN_AHEAD = 1 << 20, AHEAD = 4 << 20, CHUNK = 1 << 16 };
    static const char zeros[CHUNK];
    int fd;
    MDB_envinfo info;
    MDB_stat est;
    if (mdb_env_get_fd(s->env, &fd) || mdb_env_info(s->env, &info) || mdb_env_stat(s->env, &est))
        return;
    uint64_t used = (uint64_t)(info.me_last_pgno + 1) * est.ms_psize, ready;
    if (s->durability == CAIRN_SYNC) {
        struct stat st;
        if (fstat(fd, &st))
            return;
        ready = (uint64_t)st.st_size;
    } else {
        ready = s->ready > used ? s->ready : used;
    }
    uint64_t want = used + AHEAD;
    if (want > info.me_mapsize)
        want = info.me_mapsize;
    if (ready >= used + MIN_AHEAD || ready >= want)
        return;
    uint64_t off = ready;
    while (off < want) {
        size_t n = want - off < CHUNK ? (size_t)(want - off) : CHUNK;
        ssize_t w = pwrite(fd, zeros, n, (off_t)off);
        if (w <= 0)
            break;
        off += (uint64_t)w;
    }
    if (s->durability == CAIRN_NOSYNC)
        s->ready = off;
}
