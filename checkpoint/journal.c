/* checkpoint/journal.c - one flush per durable point: a redo journal in front of a sync store.
 *
 * A durable point of synced.c's protocol alone costs two flushes: data.mdb's scattered pages,
 * then the marker that vouches for them. The journal makes the common one cost a single flush of
 * pages appended in order, as a database's write-ahead log does. Every write transaction of a
 * sync store appends, before its commit and under LMDB's writer lock, one entry to the file
 * `journal`: its transaction id and every put (the sealed record, checksum included) and delete
 * it made. A durable point is then fdatasync(journal). data.mdb is flushed only at a fold
 * (synced.c's cairn__synced_point, now and then), which also writes the marker, and the journal
 * starts over after it. After a power cut, recovery returns data.mdb to the marker's snapshot as
 * before and then applies the journal's entries that follow that snapshot, in order, stopping
 * at the first that is missing, torn or does not follow: everything a durable point covered is
 * back, and a relaxed commit is back or gone as a whole (never half).
 *
 * Two ideas make the entries trustworthy:
 *   1. Entries chain. Each carries the id of its transaction, and LMDB numbers commits without a
 *      gap, so the entries after the marker's commit M are exactly M+1, M+2, ... up to the last
 *      one whose bytes reached the disk. An entry is written before its commit: a process that
 *      dies between the two leaves an entry for a commit that never happened (a phantom), and
 *      the next transaction, which gets the same id, writes its own over it (the shared header
 *      says where the last entry began). A phantom that a power cut keeps is replayed: a commit
 *      whose caller never heard back, which is one of the outcomes it had to expect.
 *   2. Entries belong to an epoch. Each fold draws a random nonce that its marker records and
 *      every entry written after it carries, so entries of an earlier epoch (the bytes under the
 *      new ones, or a timeline a power cut ended) never pass for a continuation. A fold records
 *      the nonce it replaces too: a writer that reached the journal between the marker's flush
 *      and the header's reset (a fold killed in between) still wrote under the old nonce.
 *
 * The header says where the next entry goes, where the last began and which transaction it
 * holds, and how far a flush has covered; it is only written under LMDB's writer lock (the flush
 * fields excepted: maxima and counters, updated atomically) and never trusted after a reboot. It
 * lives in a file of its own, `journal-shm`, mapped shared by every process and never flushed:
 * were it a page of the journal, as in version 1, every flush would write it back too, and the
 * kernel would write-protect it in every process's mapping first (a TLB shootdown across the
 * CPUs) and take a write fault at the next entry. The journal's first page holds only a stamp
 * (magic, version 2, the epoch's nonce), written at each new epoch: an append needs the stamp
 * and the header to agree, and a version-1 cairn, which takes that page for its header, finds
 * a version it does not know. So a process of either version that sees the other's epoch folds
 * before it appends; no two of them ever write entries from two headers into one epoch.
 * Layouts are in docs/ARCHITECTURE.md ("The journal").
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/store_impl.h"
#include "common/lock.h"
#include "common/xxh.h"

#define J_MAGIC "CAIRNJNL"
#define J_VERSION 2u /* 2: the header in journal-shm, a stamp in the journal; 1: header there */
#define J_HDR 4096u  /* the stamp's page (the header's size too); entries start after it */
#define E_MAGIC 0x4c4e4a43u /* "CJNL" little-endian: the start of an entry */
#define E_HDR 24            /* magic 4, length 4, nonce 8, transaction id 8 */
#define E_SUM 8             /* XXH3-64 of everything before it */
#define J_FOLD (32u << 20)  /* a journal this long asks for a fold at the next write */
#define J_GROW (1u << 20)   /* the file grows in steps of this much */
#define OP_PUT 1
#define OP_DEL 2

typedef struct jhdr {
    char magic[8];
    uint32_t version, pad;
    uint64_t nonce;      /* the epoch entries are written in now */
    uint64_t base;       /* the commit of the fold that began it */
    uint64_t end;        /* where the next entry goes */
    uint64_t last_txnid; /* the transaction of the last entry written (base: none yet) */
    uint64_t last_off;   /* where that entry begins */
    uint64_t flushed;    /* every entry up to this transaction is on disk */
    uint64_t flushes;    /* flushes of the journal made (statistics, tests) */
    uint64_t flushing;   /* the commit the flush in progress covers (0: none known) */
    uint32_t fseq;       /* bumped at the end of each flush: the futex a waiter sleeps on */
    int32_t flusher;     /* the process making the flush in progress */
} jhdr;

/* The journal's first page: which epoch its entries are written in (version 1's header began
 * the same way, so a version-1 cairn reads this version and refuses it) */
typedef struct jstamp {
    char magic[8];
    uint32_t version, pad;
    uint64_t nonce;
} jstamp;

struct cairn__journal {
    int fd;
    jhdr *h;             /* the mapped header (journal-shm) */
    const jstamp *stamp; /* the journal's first page, mapped read-only */
    uint64_t size;       /* the file's size as this process last saw it */
    int inflight;        /* this process's threads making a flush now (atomic) */
    /* the entry a failed commit must take back */
    uint64_t undo_txnid, undo_off, undo_end, undo_last_txnid, undo_last_off;
};

static void le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> 8 * i);
}
static void le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> 8 * i);
}
static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const unsigned char *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

/* A failed system call on the file `name` (errno says why) */
static int file_fail(cairn_store *s, const char *what, const char *name)
{
    int err = errno;
    return cairn__store_fail(s, err == ENOSPC || err == EDQUOT ? CAIRN_EFULL : CAIRN_EIO,
                             "store %s: cannot %s its %s: %s", s->dir, what, name, strerror(err));
}

static int jfail(cairn_store *s, const char *what) { return file_fail(s, what, "journal"); }

/* Opens `name` in dir, at least J_HDR bytes long, and maps its first J_HDR bytes (prot) in *map;
 * the descriptor stays open in *fd when fd is given, else it is closed. */
static int open_mapped(cairn_store *s, const char *dir, const char *name, int prot, void **map,
                       int *fd, uint64_t *size)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    struct stat st;
    const char *what = "open";
    void *m = MAP_FAILED;
    if (f >= 0 && fstat(f, &st) == 0) {
        what = "size";
        if (st.st_size >= (off_t)J_HDR || ftruncate(f, J_HDR) == 0) {
            what = "map";
            m = mmap(NULL, J_HDR, prot, MAP_SHARED, f, 0);
        }
    }
    if (m == MAP_FAILED) {
        int rc = file_fail(s, what, name);
        if (f >= 0)
            close(f);
        return rc;
    }
    if (size)
        *size = st.st_size < (off_t)J_HDR ? J_HDR : (uint64_t)st.st_size;
    if (fd)
        *fd = f;
    else
        close(f);
    *map = m;
    return 0;
}

int cairn__journal_open(cairn_store *s, const char *dir)
{
    cairn__journal *j = calloc(1, sizeof *j);
    if (!j)
        return CAIRN_ENOMEM;
    void *stamp = NULL, *h = NULL;
    int rc = open_mapped(s, dir, "journal", PROT_READ, &stamp, &j->fd, &j->size);
    if (!rc && (rc = open_mapped(s, dir, "journal-shm", PROT_READ | PROT_WRITE, &h, NULL, NULL))) {
        munmap(stamp, J_HDR);
        close(j->fd);
    }
    if (rc) {
        free(j);
        return rc;
    }
    j->stamp = stamp, j->h = h;
    s->journal = j;
    return 0;
}

void cairn__journal_close(cairn_store *s)
{
    cairn__journal *j = s->journal;
    if (!j)
        return;
    munmap(j->h, J_HDR);
    munmap((void *)j->stamp, J_HDR);
    close(j->fd);
    free(j);
    s->journal = NULL;
}

/* ------------------------------------------------------------------ a transaction's entry */

static int reserve(cairn__txn *t, size_t more)
{
    if (t->jlen + more <= t->jcap)
        return 0;
    size_t cap = t->jcap ? t->jcap : 4096;
    while (cap < t->jlen + more)
        cap *= 2;
    unsigned char *b = realloc(t->jb, cap);
    if (!b)
        return -1;
    t->jb = b, t->jcap = cap;
    return 0;
}

static void note(cairn__txn *t, int op, MDB_dbi dbi, const MDB_val *k, const MDB_val *v)
{
    if (!t->s->journal || t->jfail || t->unjournaled)
        return;
    int db = cairn__db_index(t->s, dbi);
    size_t vlen = v ? v->mv_size : 0, need = (t->jlen ? 0 : E_HDR) + 8 + k->mv_size + vlen;
    if (db < 0 || k->mv_size > UINT16_MAX || vlen > UINT32_MAX || reserve(t, need)) {
        t->jfail = 1; /* the commit is refused (cairn__journal_append) */
        return;
    }
    if (!t->jlen)
        t->jlen = E_HDR; /* filled in at append */
    unsigned char *p = t->jb + t->jlen;
    p[0] = (unsigned char)op, p[1] = (unsigned char)db;
    p[2] = (unsigned char)k->mv_size, p[3] = (unsigned char)(k->mv_size >> 8);
    le32(p + 4, (uint32_t)vlen);
    memcpy(p + 8, k->mv_data, k->mv_size);
    if (vlen)
        memcpy(p + 8 + k->mv_size, v->mv_data, vlen);
    t->jlen += 8 + k->mv_size + vlen;
}

void cairn__journal_note_put(cairn__txn *t, MDB_dbi dbi, const MDB_val *k, const MDB_val *sealed)
{
    note(t, OP_PUT, dbi, k, sealed);
}

void cairn__journal_note_del(cairn__txn *t, MDB_dbi dbi, const MDB_val *k)
{
    note(t, OP_DEL, dbi, k, NULL);
}

int cairn__journal_usable(cairn_store *s)
{
    cairn__journal *j = s->journal;
    return j && memcmp(j->h->magic, J_MAGIC, 8) == 0 && j->h->version == J_VERSION &&
           j->h->end >= J_HDR && j->h->end < J_FOLD && memcmp(j->stamp->magic, J_MAGIC, 8) == 0 &&
           j->stamp->version == J_VERSION && j->stamp->nonce == j->h->nonce;
}

int cairn__journal_append(cairn__txn *t)
{
    cairn_store *s = t->s;
    cairn__journal *j = s->journal;
    jhdr *h = j->h;
    uint64_t txnid = (uint64_t)mdb_txn_id(t->txn);
    if (t->jfail)
        return cairn__store_fail(s, CAIRN_ENOMEM,
                                 "store %s: cannot record a change in the journal (out of memory "
                                 "or a key over 65535 bytes)",
                                 s->dir);
    /* the journal must chain: its last entry is the commit before this one, or a phantom of
     * this very transaction id (written by a process that died before its commit) */
    if (!cairn__journal_usable(s) || txnid <= h->base ||
        (h->last_txnid != txnid - 1 && h->last_txnid != txnid))
        return 1;
    uint64_t pos = h->last_txnid == txnid ? h->last_off : h->end;
    if (!t->jlen) { /* a commit that wrote only LMDB's directory (databases created) */
        if (reserve(t, E_HDR))
            return CAIRN_ENOMEM;
        t->jlen = E_HDR;
    }
    if (reserve(t, E_SUM))
        return CAIRN_ENOMEM;
    size_t len = t->jlen + E_SUM;
    unsigned char *e = t->jb;
    le32(e, E_MAGIC);
    le32(e + 4, (uint32_t)len);
    le64(e + 8, h->nonce);
    le64(e + 16, txnid);
    le64(e + t->jlen, XXH3_64bits(e, t->jlen));
    if (len > UINT32_MAX)
        return cairn__store_fail(s, CAIRN_EFULL,
                                 "store %s: one transaction changes over 4 GiB, more than a "
                                 "journal entry holds",
                                 s->dir);
    if (pos + len >= J_FOLD && pos > J_HDR)
        return 1; /* time for a fold, which starts the journal over (an entry bigger than a
                   * whole journal goes first in one, and the next write folds) */
    if (pos + len > j->size) {
        struct stat st;
        uint64_t want = (pos + len + J_GROW - 1) / J_GROW * J_GROW;
        if (fstat(j->fd, &st) == 0 && (uint64_t)st.st_size >= want)
            j->size = (uint64_t)st.st_size;
        else if (ftruncate(j->fd, (off_t)want) != 0)
            return jfail(s, "grow");
        else
            j->size = want;
    }
    ssize_t w = pwrite(j->fd, e, len, (off_t)pos);
    if (w != (ssize_t)len) {
        if (w >= 0)
            errno = ENOSPC;
        return jfail(s, "write");
    }
    j->undo_txnid = txnid, j->undo_off = pos, j->undo_end = h->end;
    j->undo_last_txnid = h->last_txnid == txnid ? txnid - 1 : h->last_txnid;
    j->undo_last_off = h->last_off;
    h->last_txnid = txnid, h->last_off = pos, h->end = pos + len;
    return 0;
}

void cairn__journal_undo(cairn__txn *t)
{
    cairn__journal *j = t->s->journal;
    jhdr *h = j->h;
    if (h->last_txnid != j->undo_txnid)
        return;
    static const unsigned char zero[4];
    if (pwrite(j->fd, zero, sizeof zero, (off_t)j->undo_off) != sizeof zero)
        return; /* the entry stays a phantom, which the next commit writes over */
    h->last_txnid = j->undo_last_txnid, h->last_off = j->undo_last_off;
    h->end = j->undo_off;
}

/* ------------------------------------------------------------------ durable points */

void cairn__journal_bounds(cairn_store *s, uint64_t *base, uint64_t *last)
{
    jhdr *h = s->journal->h;
    *base = __atomic_load_n(&h->base, __ATOMIC_ACQUIRE);
    *last = __atomic_load_n(&h->last_txnid, __ATOMIC_ACQUIRE);
}

int cairn__journal_flush(cairn_store *s, uint64_t upto)
{
    cairn__journal *j = s->journal;
    jhdr *h = j->h;
    /* Group commit: one flush at a time per journal. A thread or process that finds one in
     * progress waits for it to end (it covers this commit, or the next one will), and of those
     * that waited one leads the next flush for all of them. A flusher that died (its pid gone)
     * or hangs is waited for a few times at most, then overtaken: any flush is correct. */
    for (int waits = 0;; waits++) {
        if (upto && upto <= __atomic_load_n(&h->flushed, __ATOMIC_ACQUIRE))
            return 0; /* a flush covered it */
        uint32_t seen = __atomic_load_n(&h->fseq, __ATOMIC_ACQUIRE);
        uint64_t going = __atomic_load_n(&h->flushing, __ATOMIC_ACQUIRE);
        if (going && waits < 8) {
            int32_t who = __atomic_load_n(&h->flusher, __ATOMIC_RELAXED);
            int alive = who == getpid() ? __atomic_load_n(&j->inflight, __ATOMIC_ACQUIRE) > 0
                                        : who > 0 && (kill(who, 0) == 0 || errno == EPERM);
            if (alive) { /* another thread of this process, or another live process */
                cairn__futex_wait(&h->fseq, seen, 50, 1); /* the shared page: across processes */
                continue;
            }
        }
        /* what this flush covers: the entries of commits made by now (the last entry may be a
         * phantom, whose commit never happened: it must not count as a durable commit) */
        MDB_envinfo info;
        uint64_t committed = mdb_env_info(s->env, &info) == 0 ? info.me_last_txnid : 0;
        uint64_t last = __atomic_load_n(&h->last_txnid, __ATOMIC_ACQUIRE);
        if (last > committed)
            last = committed;
        if (last == 0)
            last = 1; /* (flushing 0 means none) */
        if (!__atomic_compare_exchange_n(&h->flushing, &going, last, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_RELAXED))
            continue; /* another process began one just now */
        __atomic_store_n(&h->flusher, (int32_t)getpid(), __ATOMIC_RELAXED);
        __atomic_add_fetch(&j->inflight, 1, __ATOMIC_ACQ_REL);
        int fr = fdatasync(j->fd), ferr = errno;
        __atomic_sub_fetch(&j->inflight, 1, __ATOMIC_ACQ_REL);
        if (fr != 0)
            return cairn__synced_flush_failed(s, "journal", ferr);
        uint64_t f = __atomic_load_n(&h->flushed, __ATOMIC_RELAXED);
        while (f < last && !__atomic_compare_exchange_n(&h->flushed, &f, last, 1, __ATOMIC_RELEASE,
                                                        __ATOMIC_RELAXED))
            ;
        __atomic_add_fetch(&h->flushes, 1, __ATOMIC_RELAXED);
        uint64_t mine = last;
        __atomic_compare_exchange_n(&h->flushing, &mine, 0, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
        __atomic_add_fetch(&h->fseq, 1, __ATOMIC_RELEASE);
        cairn__futex_wake(&h->fseq, INT32_MAX, 1);
        return 0;
    }
}

uint64_t cairn__journal_nonce(cairn_store *s)
{
    cairn__journal *j = s->journal;
    return j && memcmp(j->h->magic, J_MAGIC, 8) == 0 ? j->h->nonce : 0;
}

uint64_t cairn__journal_new_nonce(void)
{
    uint64_t n = 0;
    while (n == 0)
        if (getrandom(&n, sizeof n, 0) != (ssize_t)sizeof n)
            n = XXH3_64bits(&n, sizeof n) ^ (uint64_t)getpid() ^ (uint64_t)time(NULL);
    return n;
}

uint64_t cairn__journal_flushes(cairn_store *s)
{
    return s->journal && cairn__journal_usable(s) ? s->journal->h->flushes : 0;
}

uint64_t cairn__journal_flushed(cairn_store *s)
{
    return s->journal && cairn__journal_usable(s) ? s->journal->h->flushed : 0;
}

void cairn__journal_reset(cairn_store *s, uint64_t nonce, uint64_t base)
{
    jhdr *h = s->journal->h;
    int whole = memcmp(h->magic, J_MAGIC, 8) == 0;
    uint64_t flushes = whole ? h->flushes : 0;
    uint32_t fseq = whole ? h->fseq : 0;
    memset(h, 0, sizeof *h);
    h->fseq = fseq;
    h->version = J_VERSION;
    h->nonce = nonce, h->base = base;
    h->end = J_HDR, h->last_txnid = base, h->last_off = J_HDR, h->flushed = base;
    h->flushes = flushes;
    memcpy(h->magic, J_MAGIC, 8); /* last: a header is whole once it has its magic */
    jstamp st = {.version = J_VERSION, .nonce = nonce};
    memcpy(st.magic, J_MAGIC, 8);
    ssize_t w = pwrite(s->journal->fd, &st, sizeof st, 0);
    (void)w; /* not written: no append agrees with the header, and the next write folds again */
}

int cairn__journal_truncate(cairn_store *s)
{
    cairn__journal *j = s->journal;
    memset(j->h, 0, sizeof *j->h);
    if (ftruncate(j->fd, J_HDR) != 0 || fdatasync(j->fd) != 0)
        return jfail(s, "empty");
    j->size = J_HDR;
    return 0;
}

/* ------------------------------------------------------------------ replay after a reboot */

/* Applies one entry's operations in txn, the databases opened by index in dbis. Every database
 * is created (a commit that created them may be among those replayed) but schema 5's, opened only
 * when an entry names them: a journal of schema 6 never does, and they must not come back empty;
 * one written before an upgrade does, and the upgrade's moves are replayed with it (the next
 * writer then drops them: store.c). */
static int apply(cairn_store *s, MDB_txn *txn, MDB_dbi *dbis, unsigned char *opened, size_t ndb,
                 const unsigned char *p, const unsigned char *end)
{
    while (p < end) {
        if (end - p < 8)
            return CAIRN_ECORRUPT;
        int op = p[0], db = p[1];
        size_t klen = (size_t)p[2] | (size_t)p[3] << 8, vlen = rd32(p + 4);
        if ((op != OP_PUT && op != OP_DEL) || (size_t)db >= ndb ||
            (size_t)(end - p - 8) < klen + vlen)
            return CAIRN_ECORRUPT;
        MDB_val k = {klen, (void *)(p + 8)}, v = {vlen, (void *)(p + 8 + klen)};
        int rc = opened[db] ? 0 : mdb_dbi_open(txn, cairn__db_name_at(db), MDB_CREATE, &dbis[db]);
        if (rc)
            return cairn__mdb_fail(NULL, s, rc, "open a database to replay the journal");
        opened[db] = 1;
        rc = op == OP_PUT ? mdb_put(txn, dbis[db], &k, &v, 0) : mdb_del(txn, dbis[db], &k, NULL);
        if (rc && !(op == OP_DEL && rc == MDB_NOTFOUND))
            return cairn__mdb_fail(NULL, s, rc, "replay the journal");
        p += 8 + klen + vlen;
    }
    return 0;
}

int cairn__journal_replay(cairn_store *s, uint64_t nonce, uint64_t prev, uint64_t base,
                          uint64_t *applied)
{
    cairn__journal *j = s->journal;
    *applied = 0;
    struct stat st;
    if (fstat(j->fd, &st) != 0)
        return jfail(s, "read");
    uint64_t size = (uint64_t)st.st_size;
    MDB_txn *txn;
    int rc = cairn__store_begin(s, 0, &txn);
    if (rc)
        return rc;
    size_t ndb = cairn__db_count();
    MDB_dbi dbis[32];
    unsigned char opened[32] = {0};
    for (size_t i = 0; i < ndb && !rc; i++)
        if (!cairn__db_retired(i) &&
            (rc = mdb_dbi_open(txn, cairn__db_name_at(i), MDB_CREATE, &dbis[i])) == 0)
            opened[i] = 1;
        else if (rc)
            rc = cairn__mdb_fail(NULL, s, rc, "open a database to replay the journal");
    unsigned char hdr[E_HDR], *buf = NULL;
    uint64_t off = J_HDR, expect = 0; /* the transaction the next entry must hold (0: any) */
    while (!rc && off + E_HDR + E_SUM <= size) {
        if (pread(j->fd, hdr, E_HDR, (off_t)off) != E_HDR || rd32(hdr) != E_MAGIC)
            break;
        uint64_t len = rd32(hdr + 4), en = rd64(hdr + 8), tx = rd64(hdr + 16);
        if (len < E_HDR + E_SUM || off + len > size || (en != nonce && (!prev || en != prev)) ||
            (expect && tx != expect))
            break;
        unsigned char *b = realloc(buf, len);
        if (!b) {
            rc = CAIRN_ENOMEM;
            break;
        }
        buf = b;
        if (pread(j->fd, buf, len, (off_t)off) != (ssize_t)len ||
            XXH3_64bits(buf, len - E_SUM) != rd64(buf + len - E_SUM))
            break; /* torn: the commits from here on never reached the disk whole */
        if (tx > base) {
            if (tx != base + 1 + *applied)
                break; /* a gap after the snapshot: nothing past it follows from it */
            if ((rc = apply(s, txn, dbis, opened, ndb, buf + E_HDR, buf + len - E_SUM)) ==
                CAIRN_ECORRUPT)
                rc = cairn__store_fail(s, CAIRN_ECORRUPT,
                                       "store %s: the journal entry of transaction %llu passes "
                                       "its checksum but does not decode",
                                       s->dir, (unsigned long long)tx);
            if (!rc)
                ++*applied;
        }
        expect = tx + 1;
        off += len;
    }
    free(buf);
    if (!rc && *applied && (rc = mdb_txn_commit(txn)) != 0)
        return cairn__mdb_fail(NULL, s, rc, "commit the replayed journal");
    if (rc || !*applied)
        mdb_txn_abort(txn);
    return rc;
}
