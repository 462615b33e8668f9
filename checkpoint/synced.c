/* checkpoint/synced.c - how a sync store survives a power loss at no flush per relaxed commit.
 *
 * (Since the journal, checkpoint/journal.c, what is described here as a durable point is a
 * fold: the common durable point flushes only the journal, and a fold comes at a process's
 * first write, when its pin is a second old, or when the journal is full; recovery then also
 * replays the journal after the marker's snapshot.)
 *
 * The promise of a `sync` store: after a power cut the store opens whole, and everything a
 * DURABLE write covered is there; RELAXED writes (work that can be done again) may be lost back
 * to the last durable point, and cost no flush (LMDB commits them with MDB_NOSYNC).
 *
 * Two ideas make the last durable state recoverable when unflushed pages reached the disk in any
 * order:
 *   1. The marker: at every durable point, after fdatasync(data.mdb), the two meta pages as they
 *      are on disk then are copied into the file `synced` (two slots, alternately, each hashed),
 *      with the boot id and the SHA-256 of the main database's root page.
 *   2. The pin: no commit that writes pages happens without a read transaction on a snapshot no
 *      newer than the marker's, so LMDB reuses no page of the marker's tree until the next
 *      durable point.
 * After a reboot (the boot id differs from the marker's), the first open writes the marker's
 * meta pages back under the map lock, before LMDB reads the file: the store is exactly the
 * marker's snapshot. A marker that does not describe the data.mdb beside it is set aside, never
 * written over a file it does not describe.
 *
 * docs/ARCHITECTURE.md ("The sync store's marker") has the whole argument: when a marker does
 * not describe its file, the slot format, the durable point's order of flushes, settling, the
 * pin keeper, forked children and the test hook CAIRN_TEST_BOOT_ID.
 */
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/lmdb_meta.h"
#include "checkpoint/store_impl.h"

#define PIN_MAX_MS 1000
#define KEEPER_TICK_MS 250
#define READER_CHECK_TICKS 20 /* every 5 s */
#define MARKER_MAGIC "CAIRNSYN"
#define MARKER_VERSION 3u /* 3: with the journal record; 2: the root record; 1, 2 still read */
#define HDR 72 /* magic 8, version 4, page size 4, sequence 8, transaction id 8, boot id 40 */
#define BOOT_AT 32
#define BOOT_LEN 40
#define ROOT_LEN (8 + SHA256_DIGEST_LENGTH) /* root page number, SHA-256 of that page */
#define NO_ROOT UINT64_MAX                  /* the root record of an empty main database */
#define JREC_LEN 16 /* the journal record: the epoch's nonce, the one it replaced (journal.c) */
#define SLOT_MAX (HDR + 2 * 65536 + ROOT_LEN + JREC_LEN + SHA256_DIGEST_LENGTH) /* largest body */

struct cairn__synced {
    pthread_mutex_t mu; /* recursive: a write holds it while a remap inside drops the pin */
    pthread_cond_t cv;
    pthread_t keeper;
    int keeper_started, stop;
    int fd;         /* the marker file */
    unsigned psize; /* LMDB's page size */
    char boot[BOOT_LEN];
    pid_t owner;          /* the process that opened it (a forked child must not touch the pin) */
    int dir_synced;       /* this handle flushed the store directory (the files' names) once */
    uint64_t known_txnid; /* the newest marker's transaction id this handle wrote or read */
    MDB_env *env;         /* for the keeper's reader checks */
    MDB_txn *pin;         /* a read transaction, reset when not pinned */
    int pinned;
    int64_t pin_ms;                   /* monotonic time the pin was taken */
    unsigned char *slot, *pages, *rd; /* buffers: a marker slot, the two meta pages, two slots */
    /* recovery restored a version-3 marker's snapshot: its journal is replayed once LMDB has
     * the file open (cairn__synced_replay), and only then is the marker rewritten */
    int replay;
    uint64_t replay_nonce, replay_prev, replay_txnid;
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The root record adds 40 bytes, which rounds to the same size as a version-1 slot for every
 * page size (2 * psize is a multiple of 1024, and HDR + 72 bytes stay within the 4096 that
 * rounding adds): slot 1 is where either version puts it. */
static size_t slot_size(unsigned psize)
{
    size_t n = HDR + 2 * (size_t)psize + ROOT_LEN + JREC_LEN + SHA256_DIGEST_LENGTH;
    return (n + 4095) & ~(size_t)4095;
}

/* The boot id, NUL-padded to BOOT_LEN; CAIRN_TEST_BOOT_ID replaces it (tests). */
static int read_boot(cairn_store *s, char boot[BOOT_LEN])
{
    memset(boot, 0, BOOT_LEN);
    const char *env = getenv("CAIRN_TEST_BOOT_ID");
    if (env && *env) {
        strncpy(boot, env, BOOT_LEN - 1);
        return 0;
    }
    static const char path[] = "/proc/sys/kernel/random/boot_id";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, boot, BOOT_LEN - 1) : -1;
    int err = errno;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return cairn__store_fail(s, CAIRN_EIO,
                                 "cannot read %s (%s): a sync store needs the boot id to tell a "
                                 "power loss from a process crash",
                                 path, n < 0 ? strerror(err) : "empty");
    boot[n] = 0;
    if (n > 0 && boot[n - 1] == '\n')
        boot[n - 1] = 0;
    return 0;
}

static void be64w(unsigned char *p, uint64_t v) { be64(p, v); }
static void be32w(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}
static uint32_t rd_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* A whole slot read at `off` into buf: its version (1 to 3; *seq, *psize set), 0 if not whole. */
static int slot_read(int fd, off_t off, unsigned char *buf, size_t cap, uint64_t *seq,
                     unsigned *psize)
{
    unsigned char hdr[HDR];
    unsigned v = 0;
    if (pread(fd, hdr, HDR, off) != HDR || memcmp(hdr, MARKER_MAGIC, 8) != 0 ||
        ((v = rd_be32(hdr + 8)) < 1 || v > MARKER_VERSION))
        return 0;
    unsigned p = rd_be32(hdr + 12);
    if (p < 512 || p > 65536 || (p & (p - 1)))
        return 0;
    size_t body = HDR + 2 * (size_t)p + (v >= 2 ? ROOT_LEN : 0) + (v >= 3 ? JREC_LEN : 0);
    if (body + SHA256_DIGEST_LENGTH > cap ||
        pread(fd, buf, body + SHA256_DIGEST_LENGTH, off) != (ssize_t)(body + SHA256_DIGEST_LENGTH))
        return 0;
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256(buf, body, md);
    if (memcmp(md, buf + body, sizeof md) != 0)
        return 0;
    *seq = rd_be64(buf + 16);
    *psize = p;
    return (int)v;
}

static int fail_errno(cairn_store *s, const char *what, const char *path)
{
    int err = errno;
    return cairn__store_fail(s, err == ENOSPC || err == EDQUOT ? CAIRN_EFULL : CAIRN_EIO,
                             "store %s: cannot %s %s: %s", s->dir, what, path, strerror(err));
}

/* A flush that failed ends the handle: Linux reports a lost write-back once, so a later flush
 * could succeed over pages that never reached the disk (and a marker could then record them). */
static int flush_failed(cairn_store *s, const char *what, int err)
{
    /* The page cache may have dropped the writes that failed, and no later flush in this boot
     * would say so: every process is stopped until a reboot, when recovery returns to the last
     * durable point, which a flush that succeeded made. The file `flush-failed` says so (best
     * effort: the disk is failing). */
    char path[4200];
    snprintf(path, sizeof path, "%s/flush-failed", s->dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
        if (write(fd, s->synced->boot, strlen(s->synced->boot)) > 0)
            fsync(fd);
        close(fd);
    }
    s->broken = 1;
    return cairn__store_fail(s, err == ENOSPC || err == EDQUOT ? CAIRN_EFULL : CAIRN_EIO,
                             "store %s: flushing %s to disk failed: %s; what is on disk is not "
                             "known until the machine restarts (the store then returns to its "
                             "last durable point): it is closed for use until then",
                             s->dir, what, strerror(err));
}

int cairn__synced_flush_failed(cairn_store *s, const char *what, int err)
{
    return flush_failed(s, what, err);
}

/* Refuses the store in the boot where a flush of it failed (flush_failed); after a reboot the
 * record goes (the caller then recovers). */
static int check_flush_failed(cairn_store *s, const char *dir, int *after_reboot)
{
    char path[4200], boot[BOOT_LEN + 1] = {0};
    snprintf(path, sizeof path, "%s/flush-failed", dir);
    *after_reboot = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : fail_errno(s, "read", path);
    ssize_t n = read(fd, boot, BOOT_LEN);
    close(fd);
    if (n > 0 && strncmp(boot, s->synced->boot, BOOT_LEN) == 0)
        return cairn__store_fail(s, CAIRN_EIO,
                                 "store %s: a flush of it to disk failed earlier in this boot (see "
                                 "%s): what is on disk is not known until the machine restarts; "
                                 "remove that file only if you know the disk is sound",
                                 dir, path);
    *after_reboot = 1;
    return 0;
}

/* Writes the marker `seq` into slot `slot` with the meta pages in `pages`, the root record
 * `root` (ROOT_LEN bytes; NULL: a version-1 slot, which has none) and the journal record `jrec`
 * (JREC_LEN bytes; NULL: none, a version-2 slot), and flushes it. */
static int slot_write(cairn_store *s, cairn__synced *y, int slot, uint64_t seq, uint64_t txnid,
                      const unsigned char *pages, const unsigned char *root,
                      const unsigned char *jrec)
{
    if (!root)
        jrec = NULL;
    size_t body = HDR + 2 * (size_t)y->psize + (root ? ROOT_LEN : 0) + (jrec ? JREC_LEN : 0),
           size = slot_size(y->psize);
    unsigned char *b = y->slot;
    memset(b, 0, size);
    memcpy(b, MARKER_MAGIC, 8);
    be32w(b + 8, jrec ? 3u : root ? 2u : 1u);
    be32w(b + 12, y->psize);
    be64w(b + 16, seq);
    be64w(b + 24, txnid);
    memcpy(b + BOOT_AT, y->boot, BOOT_LEN);
    memcpy(b + HDR, pages, 2 * (size_t)y->psize);
    if (root)
        memcpy(b + HDR + 2 * (size_t)y->psize, root, ROOT_LEN);
    if (jrec)
        memcpy(b + HDR + 2 * (size_t)y->psize + ROOT_LEN, jrec, JREC_LEN);
    SHA256(b, body, b + body);
    ssize_t w = pwrite(y->fd, b, size, (off_t)slot * (off_t)size);
    int err = w == (ssize_t)size ? 0 : w < 0 ? errno : EIO;
    if (err)
        return cairn__store_fail(s, err == ENOSPC || err == EDQUOT ? CAIRN_EFULL : CAIRN_EIO,
                                 "store %s: cannot write the file synced: %s", s->dir,
                                 strerror(err));
    if (fdatasync(y->fd) != 0)
        return flush_failed(s, "synced", errno);
    if (!y->dir_synced) { /* a new file's name is durable only once its directory is flushed:
                           * whoever created `synced` or data.mdb, each handle does it once */
        int dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int bad = dfd < 0 || fsync(dfd) != 0;
        err = errno;
        if (dfd >= 0)
            close(dfd);
        if (bad)
            return flush_failed(s, "its directory", err);
        y->dir_synced = 1;
    }
    y->known_txnid = txnid;
    return 0;
}

/* The newest whole slot of the marker: its index (0 or 1), or -1 if neither is whole. Several
 * processes write the marker (each under LMDB's writer lock), so it is read every time, never
 * remembered: the next marker goes into the other slot with the next sequence number. a and b
 * hold cap bytes; *seq, *psize, *pages and *root (if root is not NULL; set to NULL for a
 * version-1 slot) describe the newest. Slot 1 sits after slot 0, whose size depends on the page
 * size: slot 0 says it, else each possible one is tried. */
static int newest_j(int fd, unsigned char *a, unsigned char *b, size_t cap, uint64_t *seq,
                    uint64_t *txnid, unsigned *psize, const unsigned char **pages,
                    const unsigned char **root, const unsigned char **jrec)
{
    uint64_t sa = 0, sb = 0;
    unsigned pa = 0, pb = 0;
    int ha = slot_read(fd, 0, a, cap, &sa, &pa), hb = 0;
    for (unsigned p = ha ? pa : 4096; p <= 65536 && !hb; p *= 2) {
        hb = slot_read(fd, (off_t)slot_size(p), b, cap, &sb, &pb);
        if (pb != p)
            hb = 0;
        if (ha)
            break;
    }
    if (!ha && !hb)
        return -1;
    int one = hb && (!ha || sb > sa);
    *seq = one ? sb : sa;
    *psize = one ? pb : pa;
    *pages = (one ? b : a) + HDR;
    *txnid = rd_be64(*pages - HDR + 24);
    if (root)
        *root = (one ? hb : ha) >= 2 ? *pages + 2 * (size_t)*psize : NULL;
    if (jrec)
        *jrec = (one ? hb : ha) >= 3 ? *pages + 2 * (size_t)*psize + ROOT_LEN : NULL;
    return one;
}

static int newest(int fd, unsigned char *a, unsigned char *b, size_t cap, uint64_t *seq,
                  uint64_t *txnid, unsigned *psize, const unsigned char **pages,
                  const unsigned char **root)
{
    return newest_j(fd, a, b, cap, seq, txnid, psize, pages, root, NULL);
}

/* ------------------------------------------------------------------ open and recovery */

/* 1 and *txnid (and *root, the main database's root page, NO_ROOT when empty, if root is not
 * NULL) if `page` is a meta page, else 0. */
static int meta_read(const unsigned char *page, uint64_t *txnid, uint64_t *root)
{
    cairn__lmdb_meta m;
    if (!cairn__lmdb_meta_get(page, &m))
        return 0;
    *txnid = m.txnid;
    if (root)
        *root = m.dbs[CAIRN__LMDB_MAIN_DBI].root == (size_t)-1 ? NO_ROOT
                                                               : m.dbs[CAIRN__LMDB_MAIN_DBI].root;
    return 1;
}

/* The page `pgno` of data.mdb (fd), psize bytes into buf: 1, 0 if the file is too small to hold
 * it, -1 on a read error (errno set). */
static int read_page(int fd, uint64_t pgno, unsigned psize, unsigned char *buf)
{
    if (pgno > (uint64_t)(INT64_MAX - psize) / psize)
        return 0;
    ssize_t got = pread(fd, buf, psize, (off_t)(pgno * psize));
    return got < 0 ? -1 : got == (ssize_t)psize;
}

/* The root record of a durable point (see the marker's layout above) into rec: the main
 * database's root page as the meta page of commit `txnid` among `pages` (pages 0 and 1 just read
 * back) names it, and that page's SHA-256, read from data.mdb (fd) into buf. The page belongs to
 * the snapshot the pin is about to keep, so it stays as it is until the next durable point.
 * CAIRN_EIO if no meta page names the commit (data.mdb is not the file LMDB has open). */
static int root_record(cairn_store *s, int fd, const unsigned char *pages, unsigned psize,
                       uint64_t txnid, unsigned char *buf, unsigned char rec[ROOT_LEN])
{
    uint64_t t, root = NO_ROOT;
    int found = 0;
    for (int p = 0; p < 2 && !found; p++)
        found = meta_read(pages + (size_t)p * psize, &t, &root) && t == txnid;
    if (!found)
        return cairn__store_fail(s, CAIRN_EIO,
                                 "store %s: no meta page of data.mdb names commit %llu after it "
                                 "was flushed: the file was replaced under the store",
                                 s->dir, (unsigned long long)txnid);
    memset(rec, 0, ROOT_LEN);
    be64w(rec, root);
    if (root == NO_ROOT)
        return 0;
    int r = read_page(fd, root, psize, buf);
    if (r <= 0) {
        if (r == 0)
            errno = EIO;
        return fail_errno(s, "read the root page of", "data.mdb");
    }
    SHA256(buf, psize, rec + 8);
    return 0;
}

/* Whether data.mdb (fd) holds the page the root record `rec` hashed: 1 yes (or the record is
 * of an empty database), 0 no (another page there, or the file too small to hold it), -1 on a
 * read error (errno set). buf holds psize bytes. */
static int root_matches(int fd, const unsigned char *rec, unsigned psize, unsigned char *buf)
{
    uint64_t root = rd_be64(rec);
    if (root == NO_ROOT)
        return 1;
    int r = read_page(fd, root, psize, buf);
    if (r <= 0)
        return r;
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256(buf, psize, md);
    return memcmp(md, rec + 8, sizeof md) == 0;
}

/* Whether data.mdb (its first two pages in `file`, n bytes read) is the file the marker of
 * `txnid`, with its copy `saved` of the two pages, describes. Every page write is taken to be
 * whole (LMDB assumes the same of its meta pages), so each meta page of the right file is the
 * marker's version or a later one: if both are meta pages and both older, the file was replaced
 * (an older copy, a new store); and a meta page of the marker's very commit is the marker's copy
 * byte for byte, or the file is another store's. A page that is not a meta page tells nothing,
 * and the restore goes ahead. (A foreign file that is newer everywhere passes here: the root
 * record tells it, root_matches.) */
static int describes(const unsigned char *file, ssize_t n, const unsigned char *saved,
                     unsigned psize, uint64_t txnid)
{
    uint64_t t[2];
    int meta[2];
    if (n < 2 * (ssize_t)psize)
        return 0;
    for (int p = 0; p < 2; p++) {
        meta[p] = meta_read(file + (size_t)p * psize, &t[p], NULL);
        if (meta[p] && t[p] == txnid &&
            memcmp(file + (size_t)p * psize, saved + (size_t)p * psize, psize) != 0)
            return 0;
    }
    return !(meta[0] && meta[1] && t[0] < txnid && t[1] < txnid);
}

int cairn__synced_open(cairn_store *s, const char *dir)
{
    cairn__synced *y = calloc(1, sizeof *y);
    if (!y)
        return CAIRN_ENOMEM;
    y->fd = -1;
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    int ok = pthread_mutex_init(&y->mu, &ma) == 0;
    pthread_mutexattr_destroy(&ma);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (ok && pthread_cond_init(&y->cv, &ca) != 0) {
        pthread_mutex_destroy(&y->mu);
        ok = 0;
    }
    pthread_condattr_destroy(&ca);
    if (!ok) {
        free(y);
        return CAIRN_ENOMEM;
    }
    s->synced = y;
    int rc = read_boot(s, y->boot);
    if (rc)
        return rc;
    char path[4200];
    snprintf(path, sizeof path, "%s/synced", dir);
    y->owner = getpid();
    y->fd = s->readonly ? open(path, O_RDONLY | O_CLOEXEC)
                        : open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (y->fd < 0)
        return fail_errno(s, "open", path);
    /* CAIRN_TEST_NO_JOURNAL: every durable point a fold, as before the journal (the marker's
     * own tests); a store written so is read by either mode */
    const char *nj = getenv("CAIRN_TEST_NO_JOURNAL");
    return s->readonly || (nj && *nj == '1') ? 0 : cairn__journal_open(s, dir);
}

/* Whether some process has the store's LMDB environment open: each holds a shared lock on the
 * first byte of lock.mdb (LMDB's own test for the first opener). Only a store nobody has open
 * is ever restored, whatever the boot id says. Called before this process opens it, so closing
 * the descriptor drops no lock of ours. */
static int open_elsewhere(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/lock.mdb", dir);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    int busy = fcntl(fd, F_SETLK, &fl) != 0 && (errno == EACCES || errno == EAGAIN);
    close(fd);
    return busy;
}

/* Called under the map lock before LMDB opens data.mdb (see the design comment). */
int cairn__synced_recover(cairn_store *s, const char *dir)
{
    cairn__synced *y = s->synced;
    unsigned char *a = malloc(SLOT_MAX), *b = malloc(SLOT_MAX);
    if (!a || !b) {
        free(a);
        free(b);
        return CAIRN_ENOMEM;
    }
    uint64_t seq = 0, txnid = 0;
    const unsigned char *pages = NULL, *root = NULL, *jrec = NULL;
    int after_failure = 0, rc = check_flush_failed(s, dir, &after_failure);
    int slot =
        rc ? -1 : newest_j(y->fd, a, b, SLOT_MAX, &seq, &txnid, &y->psize, &pages, &root, &jrec);
    if (slot >= 0)
        y->known_txnid = txnid;
    if (slot >= 0 && memcmp(pages - HDR + BOOT_AT, y->boot, BOOT_LEN) != 0) {
        /* The machine rebooted since the last durable point: return to it. Not while another
         * process has the store open (a program other than cairn, since every cairn open comes
         * here first): it could be reading a torn tree, and going on over it would make the
         * damage permanent. */
        if (s->readonly) {
            free(a);
            free(b);
            return cairn__store_fail(s, CAIRN_EIO,
                                     "store %s must return to its last durable state after a "
                                     "restart, which takes write access to it: run any command "
                                     "on it once as a user who may write it",
                                     dir);
        }
        if (open_elsewhere(dir)) {
            free(a);
            free(b);
            return cairn__store_fail(s, CAIRN_EBUSY,
                                     "store %s must return to its last durable state after a "
                                     "restart, but another program has it open (%s/lock.mdb is "
                                     "locked); close it and try again",
                                     dir, dir);
        }
        char path[4200];
        snprintf(path, sizeof path, "%s/data.mdb", dir);
        size_t n = 2 * (size_t)y->psize;
        int fd = open(path, O_RDWR | O_CLOEXEC), ours = 0;
        if (fd < 0 && errno != ENOENT) {
            rc = fail_errno(s, "open", path);
        } else if (fd >= 0) {
            unsigned char *file = b; /* slot b is not needed any more: the newest is in hand */
            if (pages == b + HDR)
                file = a;
            ssize_t got = pread(fd, file, n, 0);
            if (got < 0) /* no answer: keep the marker, and the store closed */
                rc = fail_errno(s, "read the meta pages of", path);
            else
                ours = describes(file, got, pages, y->psize, txnid);
            if (!rc && ours && root) { /* a version-1 marker has no root record: not checked */
                int same = root_matches(fd, root, y->psize, file);
                if (same < 0) /* as above: the question stays open, the marker stays */
                    rc = fail_errno(s, "read the root page of", path);
                ours = same > 0;
            }
        }
        if (!rc && !ours) {
            /* data.mdb is gone or is not the file the marker describes: set the marker aside
             * (an empty file: no marker) rather than write its pages over another file */
            y->known_txnid = 0;
            if (ftruncate(y->fd, 0) != 0 || fdatasync(y->fd) != 0)
                rc = fail_errno(s, "reset", "synced");
            if (fd >= 0)
                close(fd);
            free(a);
            free(b);
            return rc;
        }
        if (!rc) {
            ssize_t w = pwrite(fd, pages, n, 0);
            if (w != (ssize_t)n || fdatasync(fd) != 0) {
                if (w >= 0 && w != (ssize_t)n)
                    errno = EIO;
                rc = fail_errno(s, "restore the last durable state of", path);
            }
        }
        if (fd >= 0)
            close(fd);
        if (!rc && !(y->slot = malloc(slot_size(y->psize))))
            rc = CAIRN_ENOMEM;
        if (!rc && jrec && s->journal) {
            /* the journal's entries after the snapshot come back once LMDB has the file open
             * (cairn__synced_replay, still under the map lock); the marker is rewritten under
             * this boot's id only then, so an open killed before that replays them again */
            y->replay = 1;
            y->replay_nonce = rd_be64(jrec), y->replay_prev = rd_be64(jrec + 8);
            y->replay_txnid = txnid;
        } else if (!rc) { /* the same state, under this boot's id: later openers restore nothing */
            rc = slot_write(s, y, 1 - slot, seq + 1, txnid, pages, root, NULL);
            if (!rc && s->journal) /* its header speaks of the boot that ended */
                rc = cairn__journal_truncate(s);
        }
    }
    if (!rc && after_failure) { /* a flush failed in an earlier boot: recovered, it is history */
        char path[4200];
        snprintf(path, sizeof path, "%s/flush-failed", dir);
        unlink(path);
    }
    free(a);
    free(b);
    return rc;
}

/* ------------------------------------------------------------------ pins */

static void *keeper_main(void *arg)
{
    cairn__synced *y = arg;
    unsigned ticks = 0;
    pthread_mutex_lock(&y->mu);
    while (!y->stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += KEEPER_TICK_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&y->cv, &y->mu, &until);
        if (y->pinned && mono_ms() - y->pin_ms > PIN_MAX_MS) {
            mdb_txn_reset(y->pin);
            y->pinned = 0;
        }
        if (++ticks % READER_CHECK_TICKS == 0 && !y->stop) {
            /* a writer killed with SIGKILL leaves its pin in the reader table, where it stops
             * page reuse until some process clears it: do it now and then, not only at open */
            int dead;
            pthread_mutex_unlock(&y->mu);
            mdb_reader_check(y->env, &dead);
            pthread_mutex_lock(&y->mu);
        }
    }
    pthread_mutex_unlock(&y->mu);
    return NULL;
}

void cairn__synced_lock(cairn_store *s)
{
    if (s->synced)
        pthread_mutex_lock(&s->synced->mu);
}

void cairn__synced_unlock(cairn_store *s)
{
    if (s->synced)
        pthread_mutex_unlock(&s->synced->mu);
}

int cairn__synced_pinned(cairn_store *s) { return !s->synced || s->synced->pinned; }

void cairn__synced_unpin(cairn_store *s)
{
    cairn__synced *y = s->synced;
    if (!y)
        return;
    pthread_mutex_lock(&y->mu);
    if (y->pinned)
        mdb_txn_reset(y->pin);
    y->pinned = 0;
    pthread_mutex_unlock(&y->mu);
}

/* Moves the pin to the latest snapshot; the caller holds a write transaction. */
static int pin_latest(cairn_store *s, cairn__synced *y)
{
    int rc;
    if (y->pin) {
        if (y->pinned)
            mdb_txn_reset(y->pin);
        y->pinned = 0;
        rc = mdb_txn_renew(y->pin);
    } else {
        rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &y->pin);
        if (rc)
            y->pin = NULL;
    }
    if (rc)
        return cairn__mdb_fail(NULL, s, rc, "pin the durable snapshot");
    y->pinned = 1;
    y->pin_ms = mono_ms();
    y->env = s->env;
    if (!y->keeper_started) { /* signals stay with the process's own threads */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        if (pthread_create(&y->keeper, NULL, keeper_main, y) == 0)
            y->keeper_started = 1;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    return 0;
}

/* A fold: the durable point that flushes data.mdb and writes the marker (see the design
 * comment), then starts the journal over in a new epoch and moves the pin to the snapshot it
 * recorded. After a recovery's replay (`recovery`) the marker names no earlier epoch, and the
 * journal is emptied once it has: entries of the timeline the reboot ended are never read. */
static int fold(cairn_store *s, int recovery)
{
    cairn__synced *y = s->synced;
    MDB_txn *w;
    int fd, rc;
    pthread_mutex_lock(&y->mu);
    rc = cairn__store_begin(s, 0, &w); /* no other process commits while we record the state */
    if (rc) {
        pthread_mutex_unlock(&y->mu);
        return rc;
    }
    if (!y->psize) {
        MDB_stat st;
        if (mdb_env_stat(s->env, &st) == 0)
            y->psize = st.ms_psize;
        if (y->psize < 512 || y->psize > 65536)
            rc = cairn__store_fail(s, CAIRN_EIO, "store %s: unexpected page size %u", s->dir,
                                   y->psize);
    }
    if (!rc && !y->slot && !(y->slot = malloc(slot_size(y->psize))))
        rc = CAIRN_ENOMEM;
    if (!rc && !y->pages && !(y->pages = malloc(3 * (size_t)y->psize))) /* and the root page */
        rc = CAIRN_ENOMEM;
    if (!rc && !y->rd && !(y->rd = malloc(2 * slot_size(y->psize))))
        rc = CAIRN_ENOMEM;
    if (!rc && s->inject_flush_err) { /* tests */
        rc = flush_failed(s, "data.mdb", s->inject_flush_err);
        s->inject_flush_err = 0;
    } else if (!rc && (rc = mdb_env_sync(s->env, 1)) != 0) {
        rc = flush_failed(s, "data.mdb", rc);
    }
    if (!rc && (rc = mdb_env_get_fd(s->env, &fd)) != 0)
        rc = cairn__mdb_fail(NULL, s, rc, "flush to disk");
    uint64_t txnid = (uint64_t)mdb_txn_id(w) - 1, nonce = cairn__journal_new_nonce();
    if (!rc) { /* pages 0 and 1 as they are on disk now */
        size_t n = 2 * (size_t)y->psize;
        ssize_t r = pread(fd, y->pages, n, 0);
        if (r != (ssize_t)n) {
            if (r >= 0)
                errno = EIO;
            rc = fail_errno(s, "read the meta pages of", "data.mdb");
        }
        uint64_t seq = 0, prev_txnid;
        unsigned psize = 0;
        const unsigned char *prev;
        unsigned char rec[ROOT_LEN], jrec[JREC_LEN];
        /* the state it records is the last commit, since we hold the writer lock */
        if (!rc)
            rc =
                root_record(s, fd, y->pages, y->psize, txnid, y->pages + 2 * (size_t)y->psize, rec);
        /* the new epoch, and the one writers may still be using until the header says so */
        be64w(jrec, nonce);
        be64w(jrec + 8, recovery ? 0 : cairn__journal_nonce(s));
        int slot = newest(y->fd, y->rd, y->rd + slot_size(y->psize), slot_size(y->psize), &seq,
                          &prev_txnid, &psize, &prev, NULL);
        /* into the slot that does not hold the newest whole marker */
        if (!rc)
            rc = slot_write(s, y, slot == 0 ? 1 : 0, seq + 1, txnid, y->pages, rec,
                            s->journal ? jrec : NULL);
    }
    if (!rc && s->journal && recovery)
        rc = cairn__journal_truncate(s);
    if (!rc && s->journal)
        cairn__journal_reset(s, nonce, txnid);
    if (!rc)
        rc = pin_latest(s, y);
    else if (y->pinned) { /* the next write starts with a durable point again */
        mdb_txn_reset(y->pin);
        y->pinned = 0;
    }
    mdb_txn_abort(w);
    pthread_mutex_unlock(&y->mu);
    return rc;
}

int cairn__synced_point(cairn_store *s) { return fold(s, 0); }

int cairn__synced_replay(cairn_store *s)
{
    cairn__synced *y = s->synced;
    if (!y || !y->replay)
        return 0;
    uint64_t applied = 0;
    int rc = cairn__journal_replay(s, y->replay_nonce, y->replay_prev, y->replay_txnid, &applied);
    if (!rc)
        rc = fold(s, 1); /* the replayed state, under this boot's id: later openers do nothing */
    if (!rc)
        y->replay = 0;
    return rc;
}

/* Whether every commit up to `upto` is covered: by a marker (0), by the journal once it is
 * flushed (1), or neither (-1: a fold makes it durable). */
static int covered_by(cairn_store *s, uint64_t upto)
{
    cairn__synced *y = s->synced;
    if (upto <= y->known_txnid)
        return 0;
    if (!s->journal || !cairn__journal_usable(s))
        return -1;
    uint64_t base = 0, last = 0;
    cairn__journal_bounds(s, &base, &last);
    if (upto <= base)
        return 0; /* a fold's marker (it is reset only after its marker is flushed) */
    return upto <= last ? 1 : -1;
}

int cairn__synced_flush(cairn_store *s, uint64_t upto)
{
    MDB_envinfo info;
    if (mdb_env_info(s->env, &info) != 0)
        return cairn__synced_point(s);
    if (!upto || upto > info.me_last_txnid)
        upto = info.me_last_txnid;
    int c = covered_by(s, upto);
    if (c < 0)
        return cairn__synced_point(s);
    if (c == 0)
        return 0;
    if (s->inject_flush_err) { /* tests */
        int err = s->inject_flush_err;
        s->inject_flush_err = 0;
        return flush_failed(s, "journal", err);
    }
    return cairn__journal_flush(s, upto);
}

int cairn__synced_settle(cairn_store *s, uint64_t upto)
{
    cairn__synced *y = s->synced;
    MDB_envinfo info;
    int rc = 0;
    pthread_mutex_lock(&y->mu);
    if (s->journal) {
        rc = cairn__synced_flush(s, upto);
        pthread_mutex_unlock(&y->mu);
        return rc;
    }
    int have = mdb_env_info(s->env, &info) == 0;
    if (have && upto && upto < info.me_last_txnid)
        info.me_last_txnid = upto; /* only what the caller read must be on disk */
    uint64_t seq, txnid = 0;
    unsigned psize;
    const unsigned char *pages;
    size_t size = slot_size(y->psize ? y->psize : 4096);
    if (!y->rd && y->psize && !(y->rd = malloc(2 * size)))
        rc = CAIRN_ENOMEM;
    else if (have && info.me_last_txnid <= y->known_txnid)
        rc = 0; /* a marker this handle wrote or read covers it already */
    else if (!have || !y->rd ||
             newest(y->fd, y->rd, y->rd + size, size, &seq, &txnid, &psize, &pages, NULL) < 0 ||
             info.me_last_txnid > txnid)
        rc = cairn__synced_point(s); /* what was read may not be on disk yet: flush it */
    pthread_mutex_unlock(&y->mu);
    return rc;
}

uint64_t cairn__synced_durable_commit(cairn_store *s)
{
    uint64_t m = cairn__synced_durable_txn(s), j = 0;
    if (s->journal && !s->synced->replay) /* (a header awaiting its replay is the last boot's) */
        j = cairn__journal_flushed(s);
    return j > m ? j : m;
}

uint64_t cairn__synced_durable_txn(cairn_store *s)
{
    cairn__synced *y = s->synced;
    unsigned char *a = malloc(SLOT_MAX), *b = malloc(SLOT_MAX);
    uint64_t seq, txnid = 0;
    unsigned psize;
    const unsigned char *pages;
    if (!a || !b || newest(y->fd, a, b, SLOT_MAX, &seq, &txnid, &psize, &pages, NULL) < 0)
        txnid = 0;
    free(a);
    free(b);
    return txnid;
}

void cairn__synced_close(cairn_store *s)
{
    cairn__synced *y = s->synced;
    cairn__journal_close(s);
    if (!y)
        return;
    if (y->owner != getpid()) { /* a forked child: the pin's slot and the thread are the parent's */
        if (y->fd >= 0)
            close(y->fd);
        free(y->slot);
        free(y->pages);
        free(y->rd);
        free(y);
        s->synced = NULL;
        return;
    }
    if (y->keeper_started) {
        pthread_mutex_lock(&y->mu);
        y->stop = 1;
        pthread_cond_signal(&y->cv);
        pthread_mutex_unlock(&y->mu);
        pthread_join(y->keeper, NULL);
    }
    if (y->pin)
        mdb_txn_abort(y->pin);
    if (y->fd >= 0)
        close(y->fd);
    pthread_cond_destroy(&y->cv);
    pthread_mutex_destroy(&y->mu);
    free(y->slot);
    free(y->pages);
    free(y->rd);
    free(y);
    s->synced = NULL;
}
