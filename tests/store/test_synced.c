/* test_synced.c - the power-loss protocol of sync stores (checkpoint/synced.c), white-box.
 *
 * A reboot is simulated with CAIRN_TEST_BOOT_ID (synced.c's test hook): a process that opens the
 * store under another boot id must return it to its last durable point, since relaxed commits after
 * it may be torn on a real disk. Here the file is whole (no page was lost), which makes the
 * effect exact to check: every durable write is there, every relaxed write after the last
 * durable point is gone, and the store reads whole. The marker file `synced` is damaged on
 * purpose to check its two slots: a torn newest slot falls back to the previous durable point,
 * a marker with no whole slot leaves the disk as it is. A data.mdb the marker does not describe
 * (put back from a backup, another store's, one newer than the marker everywhere) is left as it
 * is, and the marker set aside. The pin is observed from a child process through LMDB's reader
 * table. tests/crash/test_powercut.c tears pages for real.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cairn.h"
#include "checkpoint/store.h"
#include "tests/store/rawlmdb.h"
#include "tests/tap.h"

static char root[256];
static void newdir(char out[300], const char *tag) { tu_subdir(out, root, tag); }

static cairn_store *open_sync(const char *dir) { return tu_store_open(dir, CAIRN_SYNC, 0); }

static int put_txn(cairn__txn *t, void *arg)
{
    cairn__task_rec r;
    memset(&r, 0, sizeof r);
    snprintf(r.id, sizeof r.id, "%s", (const char *)arg);
    snprintf(r.graph, sizeof r.graph, "g");
    r.state = CAIRN_PENDING;
    r.generation = 1;
    r.created_ms = r.updated_ms = 1000;
    return cairn__task_put(t, &r);
}

/* Two tasks and a 64 KiB input in one transaction: a store shaped unlike one with a task. */
static int put2_txn(cairn__txn *t, void *arg)
{
    (void)arg;
    static unsigned char in[65536];
    memset(in, 0x90, sizeof in); /* (msgpack: an empty array, over and over) */
    int rc = cairn__input_put(t, "w", in, sizeof in);
    rc = rc ? rc : put_txn(t, "x");
    return rc ? rc : put_txn(t, "y");
}

static int put(cairn_store *s, const char *id, int durable)
{
    return cairn__store_write(s, durable, put_txn, (void *)id);
}

/* 1 if the task is there, 0 if not, -1 on error. */
static int has(cairn_store *s, const char *id)
{
    cairn__task_rec r;
    const int rc = tu_task_get(s, id, &r);
    return rc == 0 ? 1 : rc == CAIRN_ENOTFOUND ? 0 : -1;
}

/* Which of ids[] are present, as a string of 0/1 ("?" on error). */
static void presence(cairn_store *s, const char *const *ids, int n, char out[32])
{
    for (int i = 0; i < n; i++) {
        int h = has(s, ids[i]);
        out[i] = h == 1 ? '1' : h == 0 ? '0' : '?';
    }
    out[n] = 0;
}

/* The marker's slots: sequence numbers (0 if the slot is not there), from the header. */
enum {
    SLOT = 12288,   /* header 72 + two 4096-byte pages + root record 40 + SHA-256, rounded */
    ROOT_AT = 8264, /* version 2: the root record (page number u64 BE, SHA-256 of the page) */
    V1_BODY = 8264, /* version 1: what its SHA-256 covers */
    V2_BODY = 8304, /* version 2: the same */
};

static uint64_t slot_seq(const char *dir, int slot)
{
    char path[400];
    unsigned char h[24];
    snprintf(path, sizeof path, "%s/synced", dir);
    int fd = open(path, O_RDONLY);
    ssize_t n = fd >= 0 ? pread(fd, h, sizeof h, (off_t)slot * SLOT) : -1;
    if (fd >= 0)
        close(fd);
    if (n != (ssize_t)sizeof h || memcmp(h, "CAIRNSYN", 8) != 0)
        return 0;
    uint64_t v = 0;
    for (int i = 16; i < 24; i++)
        v = v << 8 | h[i];
    return v;
}

/* Flips one byte of the slot's saved meta pages (its SHA-256 then fails). */
static int damage_slot(const char *dir, int slot)
{
    char path[400];
    snprintf(path, sizeof path, "%s/synced", dir);
    int fd = open(path, O_RDWR);
    unsigned char b;
    off_t off = (off_t)slot * SLOT + 64 + 100;
    int ok_ = fd >= 0 && pread(fd, &b, 1, off) == 1;
    b ^= 0x5a;
    ok_ = ok_ && pwrite(fd, &b, 1, off) == 1;
    if (fd >= 0)
        close(fd);
    return ok_ ? 0 : -1;
}

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* What a power cut takes from a store's journal (checkpoint/journal.c) at worst: every entry
 * written after the last flush of it (its header's `flushed` mark, at byte 56 of journal-shm;
 * entries from byte 4096 of journal: magic "CJNL", length u32, nonce u64, transaction id u64).
 * The entry's magic is zeroed, so the replay stops there. */
static void lose_unflushed(const char *dir)
{
    char path[400];
    snprintf(path, sizeof path, "%s/journal-shm", dir);
    int hfd = open(path, O_RDONLY);
    snprintf(path, sizeof path, "%s/journal", dir);
    int fd = open(path, O_RDWR);
    unsigned char h[64], e[24];
    ssize_t hn = hfd >= 0 ? pread(hfd, h, 64, 0) : -1;
    if (hfd >= 0)
        close(hfd);
    if (fd < 0)
        return;
    if (hn == 64 && memcmp(h, "CAIRNJNL", 8) == 0) {
        uint64_t flushed = le64(h + 56);
        for (off_t off = 4096; pread(fd, e, 24, off) == 24 && memcmp(e, "CJNL", 4) == 0;) {
            uint32_t len = (uint32_t)le64(e + 4) & 0xffffffffu;
            if (le64(e + 16) > flushed) {
                static const unsigned char zero[24];
                if (pwrite(fd, zero, 24, off) != 24)
                    break;
            }
            if (len < 32)
                break;
            off += len;
        }
    }
    close(fd);
}

/* A reboot after a power cut: every store of the test loses its unflushed journal entries, and
 * the boot id changes (synced.c's test hook), which makes the next open recover. */
static void reboot(const char *id)
{
    DIR *d = opendir(root);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char dir[600];
        if (e->d_name[0] == '.')
            continue;
        snprintf(dir, sizeof dir, "%s/%s", root, e->d_name);
        lose_unflushed(dir);
    }
    if (d)
        closedir(d);
    setenv("CAIRN_TEST_BOOT_ID", id, 1);
}

/* The newest slot of the marker, whole (SHA-256 checked), read into buf (SLOT bytes): its
 * version (0: no whole slot). */
static int newest_slot(const char *dir, unsigned char buf[SLOT])
{
    char path[400];
    snprintf(path, sizeof path, "%s/synced", dir);
    int fd = open(path, O_RDONLY), best = 0;
    uint64_t best_seq = 0;
    unsigned char b[SLOT], md[SHA256_DIGEST_LENGTH];
    for (int k = 0; fd >= 0 && k < 2; k++) {
        if (pread(fd, b, SLOT, (off_t)k * SLOT) != SLOT || memcmp(b, "CAIRNSYN", 8) != 0)
            continue;
        int v = b[11];
        size_t body = v == 1 ? V1_BODY : V2_BODY;
        SHA256(b, body, md);
        uint64_t seq = 0;
        for (int i = 16; i < 24; i++)
            seq = seq << 8 | b[i];
        if ((v == 1 || v == 2) && memcmp(md, b + body, sizeof md) == 0 && seq > best_seq) {
            best_seq = seq, best = v;
            memcpy(buf, b, SLOT);
        }
    }
    if (fd >= 0)
        close(fd);
    return best;
}

static uint64_t be_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* The transaction id the newest whole slot records (0: none). */
static uint64_t marker_txn(const char *dir)
{
    unsigned char b[SLOT];
    return newest_slot(dir, b) ? be_u64(b + 24) : 0;
}

/* The transaction ids of data.mdb's two meta pages (LMDB 0.9 on a 64-bit machine: a 16-byte page
 * header, then MDB_meta, whose mm_txnid is at 128, little-endian). */
static int meta_txns(const char *dir, uint64_t t[2])
{
    char path[400];
    unsigned char p[2][4096];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    int fd = open(path, O_RDONLY);
    int n = fd >= 0 && pread(fd, p, sizeof p, 0) == (ssize_t)sizeof p;
    if (fd >= 0)
        close(fd);
    for (int k = 0; k < 2; k++) {
        t[k] = 0;
        for (int i = 7; n && i >= 0; i--)
            t[k] = t[k] << 8 | p[k][16 + 128 + i];
    }
    return n ? 0 : -1;
}

/* Rewrites each whole version-2 slot of the marker as version 1, as a cairn before the root
 * record wrote it: no root record, its SHA-256 over the header and the two pages. */
static int marker_to_v1(const char *dir)
{
    char path[400];
    snprintf(path, sizeof path, "%s/synced", dir);
    int fd = open(path, O_RDWR), n = 0;
    unsigned char b[SLOT];
    for (int k = 0; fd >= 0 && k < 2; k++) {
        if (pread(fd, b, SLOT, (off_t)k * SLOT) != SLOT || b[11] != 2)
            continue;
        b[11] = 1;
        memset(b + V1_BODY, 0, SLOT - V1_BODY);
        SHA256(b, V1_BODY, b + V1_BODY);
        n += pwrite(fd, b, SLOT, (off_t)k * SLOT) == SLOT;
    }
    if (fd >= 0)
        close(fd);
    return n == 2 ? 0 : -1;
}

/* 1 if the two files hold the same bytes, 0 if not, -1 if one cannot be read. */
static int same_bytes(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int r = fa && fb ? 1 : -1;
    while (r == 1) {
        int ca = getc(fa), cb = getc(fb);
        if (ca != cb)
            r = 0;
        if (ca == EOF)
            break;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return r;
}

static off_t file_size(const char *dir, const char *name)
{
    char path[400];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0 ? st.st_size : -1;
}

/* A new store in the first boot of a test ("boot-A"), opened. */
static cairn_store *fresh_store(char dir[300], const char *tag)
{
    newdir(dir, tag);
    reboot("boot-A");
    return open_sync(dir);
}

/* ------------------------------------------------------------------ tests */

static void test_reboot_returns_to_durable_point(void)
{
    char dir[300];
    cairn_store *s = fresh_store(dir, "reboot");
    int rc = put(s, "d1", CAIRN__DURABLE);
    for (int i = 0; i < 40 && rc == 0; i++) {
        char id[16];
        snprintf(id, sizeof id, "r%d", i);
        rc = put(s, id, CAIRN__RELAXED);
    }
    ok(rc == 0, "a sync store takes a durable write and 40 relaxed ones");
    cairn_store_free(s);

    /* the same boot: a process crash or exit keeps the page cache, nothing is undone */
    s = open_sync(dir);
    static const char *const ids[] = {"d1", "r0", "r39", "d2", "r40"};
    char got[32];
    presence(s, ids, 3, got);
    ok(s && strcmp(got, "111") == 0, "reopened in the same boot: every write is there (%s)", got);
    cairn_store_free(s);

    reboot("boot-B");
    s = open_sync(dir);
    presence(s, ids, 3, got);
    ok(s && strcmp(got, "100") == 0,
       "after a reboot: the durable write is there, the relaxed ones after it are undone (%s)",
       got);
    tu_dump d;
    ok(tu_raw_dump(dir, &d) == 0, "and raw LMDB reads every database whole");
    rc = put(s, "r40", CAIRN__RELAXED);
    rc = rc ? rc : put(s, "d2", CAIRN__DURABLE);
    ok(rc == 0, "the store takes writes again");
    cairn_store_free(s);
    s = open_sync(dir);
    presence(s, ids, 5, got);
    ok(s && strcmp(got, "10011") == 0,
       "a second open in the new boot restores nothing again: later writes stay (%s)", got);
    cairn_store_free(s);
    unsetenv("CAIRN_TEST_BOOT_ID");
}

/* Several processes write the marker, each at its own durable points: the newest state must be
 * the one a reboot returns to, whoever wrote it. */
static void test_marker_writers(void)
{
    char dir[300];
    cairn_store *s = fresh_store(dir, "writers");
    int rc = put(s, "p1", CAIRN__DURABLE);
    pid_t pid = fork();
    if (pid == 0) {
        cairn_store *c = open_sync(dir);
        int crc = c ? put(c, "c1", CAIRN__DURABLE) : -1;
        crc = crc ? crc : put(c, "c2", CAIRN__DURABLE);
        crc = crc ? crc : put(c, "c3", CAIRN__RELAXED);
        cairn_store_free(c);
        _exit(crc ? 1 : 0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    rc = rc ? rc : put(s, "p2", CAIRN__DURABLE);
    rc = rc ? rc : put(s, "p3", CAIRN__RELAXED);
    cairn_store_free(s);
    ok(rc == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
       "two processes take turns at durable points on one store");
    reboot("boot-B");
    s = open_sync(dir);
    static const char *const ids[] = {"p1", "c1", "c2", "p2", "c3", "p3"};
    char got[32];
    presence(s, ids, 6, got);
    ok(s && strncmp(got, "1111", 4) == 0 && got[5] == '0',
       "a reboot returns to the newest durable point, whichever process wrote it (%s)", got);
    cairn_store_free(s);
    unsetenv("CAIRN_TEST_BOOT_ID");
}

/* A store some process has open is never restored, whatever the boot id says (a stray
 * CAIRN_TEST_BOOT_ID must not roll back a live store), and the open that would restore it is
 * refused rather than going on over a tree that may be torn (that process is not cairn: every cairn
 * open recovers first). */
static void test_no_restore_under_live_process(void)
{
    char dir[300];
    cairn_store *s = fresh_store(dir, "live");
    int rc = put(s, "a", CAIRN__DURABLE);
    rc = rc ? rc : put(s, "b", CAIRN__RELAXED);
    int go[2], done[2];
    if (pipe(go) != 0 || pipe(done) != 0)
        return;
    pid_t pid = fork();
    if (pid == 0) { /* another process, in "another boot", opens it while we hold it */
        char c;
        if (read(go[0], &c, 1) != 1)
            _exit(2);
        setenv("CAIRN_TEST_BOOT_ID", "boot-B", 1);
        cairn_store *o = cairn_store_new();
        int orc = cairn_store_open(o, dir);
        c = (char)(orc == CAIRN_EBUSY && strstr(cairn_store_errmsg(o), "lock.mdb") ? 'y' : 'n');
        if (c == 'n')
            printf("# open: %s: %s\n", cairn_errname(orc), cairn_store_errmsg(o));
        cairn_store_free(o);
        if (write(done[1], &c, 1) != 1)
            _exit(2);
        _exit(0);
    }
    char c = 'g';
    if (write(go[1], &c, 1) != 1 || read(done[0], &c, 1) != 1)
        c = '?';
    waitpid(pid, NULL, 0);
    ok(rc == 0 && c == 'y' && has(s, "b") == 1,
       "another boot id while a process has the store open: the open is CAIRN_EBUSY naming "
       "lock.mdb, nothing is restored (%c)",
       c);
    cairn_store_free(s);
    close(go[0]), close(go[1]), close(done[0]), close(done[1]);
    unsetenv("CAIRN_TEST_BOOT_ID");
}

static void test_marker_slots(void)
{
    char dir[300];
    static const char *const ids[] = {"a", "b", "c"};
    char got[32];

    /* a torn newest slot: the store returns to the durable point before it */
    cairn_store *s = fresh_store(dir, "slots");
    int rc = put(s, "a", CAIRN__DURABLE);
    rc = rc ? rc : put(s, "b", CAIRN__RELAXED);
    rc = rc ? rc : put(s, "c", CAIRN__DURABLE);
    cairn_store_free(s);
    uint64_t s0 = slot_seq(dir, 0), s1 = slot_seq(dir, 1);
    ok(rc == 0 && s0 && s1 && (s0 > s1 ? s0 - s1 : s1 - s0) == 1,
       "the marker has two slots with consecutive sequence numbers (%llu, %llu)",
       (unsigned long long)s0, (unsigned long long)s1);
    ok(damage_slot(dir, s0 > s1 ? 0 : 1) == 0, "damage the newest slot");
    reboot("boot-B");
    s = open_sync(dir);
    presence(s, ids, 3, got);
    ok(s && strcmp(got, "100") == 0,
       "after a reboot a torn newest slot falls back to the durable point before (%s)", got);
    cairn_store_free(s);

    /* no whole slot: only the first marker write can be torn with nothing before it, and then
     * every commit was flushed the classic way: the disk is trusted */
    newdir(dir, "slots");
    reboot("boot-A");
    s = open_sync(dir);
    rc = put(s, "a", CAIRN__DURABLE);
    rc = rc ? rc : put(s, "b", CAIRN__RELAXED);
    cairn_store_free(s);
    ok(rc == 0 && damage_slot(dir, 0) == 0 && damage_slot(dir, 1) == 0, "damage both slots");
    reboot("boot-B");
    s = open_sync(dir);
    presence(s, ids, 2, got);
    ok(s && strcmp(got, "11") == 0, "no whole slot: nothing is restored (%s)", got);
    cairn_store_free(s);

    /* a store without the file (written before it existed) opens and gets one at its first
     * write */
    newdir(dir, "slots");
    s = open_sync(dir);
    rc = put(s, "a", CAIRN__RELAXED);
    cairn_store_free(s);
    char path[400];
    snprintf(path, sizeof path, "%s/synced", dir);
    ok(rc == 0 && unlink(path) == 0, "remove the marker of a store");
    reboot("boot-C");
    s = open_sync(dir);
    presence(s, ids, 1, got);
    rc = s ? put(s, "b", CAIRN__RELAXED) : -1;
    ok(s && strcmp(got, "1") == 0 && rc == 0 && (slot_seq(dir, 0) || slot_seq(dir, 1)),
       "without a marker the store opens as it is and its first write records one (%s)", got);
    cairn_store_free(s);
    unsetenv("CAIRN_TEST_BOOT_ID");
}

static int to_file(const char *msg, void *ctx) { return fputs(msg, ctx) < 0 ? -1 : 0; }

/* Readers of `pid` in the store's reader table that hold a snapshot, counted by a child (LMDB
 * must not open one environment twice in a process). */
static int pinned_readers(const char *dir, pid_t pid)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t c = fork();
    if (c == 0) {
        close(fds[0]);
        MDB_env *env = tu_raw_open(dir);
        int n = -1;
        if (env) {
            FILE *f = tmpfile();
            mdb_reader_list(env, to_file, f);
            rewind(f);
            char line[256];
            n = 0;
            while (f && fgets(line, sizeof line, f)) {
                int p;
                char th[64], txn[64];
                if (sscanf(line, "%d %63s %63s", &p, th, txn) == 3 && p == pid &&
                    strcmp(txn, "-") != 0)
                    n++;
            }
            mdb_env_close(env);
        }
        if (write(fds[1], &n, sizeof n) != (ssize_t)sizeof n)
            _exit(1);
        _exit(0);
    }
    close(fds[1]);
    int n = -1;
    if (read(fds[0], &n, sizeof n) != (ssize_t)sizeof n)
        n = -1;
    close(fds[0]);
    waitpid(c, NULL, 0);
    return n;
}

static void test_pin(void)
{
    char dir[300];
    newdir(dir, "pin");
    cairn_store *s = open_sync(dir); /* a new store's databases are created by a write */
    cairn_store_free(s);
    s = open_sync(dir);
    int before = pinned_readers(dir, getpid());
    int rc = put(s, "a", CAIRN__RELAXED);
    int during = pinned_readers(dir, getpid());
    ok(rc == 0 && before == 0 && during == 1,
       "no pin before the first write, one after it (%d, %d)", before, during);
    usleep(1600 * 1000);
    int after = pinned_readers(dir, getpid());
    ok(after == 0, "an idle pin is dropped after a second, so page reuse goes on (%d)", after);
    rc = put(s, "b", CAIRN__RELAXED);
    ok(rc == 0 && pinned_readers(dir, getpid()) == 1,
       "the next write takes a new one (after a durable point)");
    cairn_store_free(s);
}

static int read_only_txn(cairn__txn *t, void *arg)
{
    cairn__task_rec r;
    *(int *)arg = cairn__task_get(t, "a", &r);
    return 0;
}

/* The newest sequence number in the marker (by header: the tests above check the slots). */
static uint64_t marker_seq(const char *dir)
{
    uint64_t a = slot_seq(dir, 0), b = slot_seq(dir, 1);
    return a > b ? a : b;
}

static void test_no_write_no_flush(void)
{
    char dir[300];
    newdir(dir, "clean");
    cairn_store *s = open_sync(dir);
    int rc = put(s, "a", CAIRN__DURABLE);
    cairn_store_free(s);
    uint64_t seq = marker_seq(dir);

    /* a write transaction that only reads (a run of a finished task) needs no pin, no flush */
    s = open_sync(dir);
    int got = -1;
    rc = rc ? rc : cairn__store_write(s, CAIRN__RELAXED, read_only_txn, &got);
    ok(rc == 0 && got == 0 && pinned_readers(dir, getpid()) == 0 && marker_seq(dir) == seq,
       "a process's first write that writes nothing takes no pin and flushes nothing (seq %llu "
       "-> %llu)",
       (unsigned long long)seq, (unsigned long long)marker_seq(dir));
    ok(cairn__store_settle(s, 0) == 0 && marker_seq(dir) == seq,
       "settle when the last commit had its durable point: nothing to flush");

    /* another process commits without a durable point; settle here makes it durable */
    pid_t pid = fork();
    if (pid == 0) {
        cairn_store *c = open_sync(dir);
        int crc = c ? put(c, "b", CAIRN__RELAXED) : -1;
        uint64_t after_pin = marker_seq(dir);
        crc = crc ? crc : put(c, "c", CAIRN__RELAXED);
        cairn_store_free(c);
        _exit(crc || marker_seq(dir) != after_pin ? 1 : 0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    uint64_t before = marker_seq(dir);
    rc = cairn__store_settle(s, 0);
    ok(WIFEXITED(st) && WEXITSTATUS(st) == 0 && rc == 0 && marker_seq(dir) == before + 1,
       "a relaxed commit of another process: settle makes a durable point (seq %llu -> %llu)",
       (unsigned long long)before, (unsigned long long)marker_seq(dir));
    cairn_store_free(s);
    reboot("boot-Z");
    s = open_sync(dir);
    static const char *const ids[] = {"a", "b", "c"};
    char p3[32];
    presence(s, ids, 3, p3);
    ok(s && strcmp(p3, "111") == 0, "and a reboot keeps what was settled (%s)", p3);
    cairn_store_free(s);
    unsetenv("CAIRN_TEST_BOOT_ID");
}

/* ------------------------------------------------------------------ a map grown elsewhere */

#define BIG ((1 << 20) - 4096)

typedef struct big_arg {
    const char *id;
    int fill;
    size_t len;
    int bad, rc; /* check: a byte that is not `fill`; the read's result */
} big_arg;

static int big_put_txn(cairn__txn *t, void *arg)
{
    big_arg *a = arg;
    static unsigned char buf[BIG];
    memset(buf, a->fill, a->len);
    return cairn__input_put(t, a->id, buf, a->len);
}

static int big(cairn_store *s, const char *id, int fill, size_t len, int durable)
{
    big_arg a = {id, fill, len, 0, 0};
    return cairn__store_write(s, durable, big_put_txn, &a);
}

static int big_check_txn(cairn__txn *t, void *arg)
{
    big_arg *a = arg;
    const void *data;
    size_t len;
    a->rc = cairn__input_get(t, a->id, &data, &len);
    for (size_t i = 0; a->rc == 0 && i < len && !a->bad; i++)
        if (((const unsigned char *)data)[i] != a->fill)
            a->bad = ((const unsigned char *)data)[i];
    return 0;
}

/* Another process grows the map while this one holds a pin: LMDB remaps only with no
 * transaction open, so adopting the new size drops the pin, and the next write must begin with
 * a durable point rather than commit unpinned (it would reuse pages of the marker's snapshot). */
static void test_map_grown_elsewhere(void)
{
    char dir[300];
    setenv("CAIRN_TEST_SYNC_MAP", "8388608", 1); /* 8 MiB first maps, in both processes */
    cairn_store *s = fresh_store(dir, "grown");
    int rc = put(s, "a", CAIRN__DURABLE); /* pinned now */
    pid_t pid = fork();
    if (pid == 0) {
        cairn_store *c = open_sync(dir);
        int crc = 0;
        char id[16];
        for (int i = 0; i < 12 && !crc; i++) { /* 12 MiB: past the 8 MiB first map */
            snprintf(id, sizeof id, "big%02d", i);
            crc = big(c, id, 'B', BIG, CAIRN__RELAXED);
        }
        crc = crc ? crc : put(c, "d", CAIRN__DURABLE); /* the marker records this state */
        crc = crc ? crc : big(c, "big00", 'b', BIG, CAIRN__RELAXED); /* frees its pages */
        crc = crc ? crc : put(c, "x", CAIRN__RELAXED);
        cairn_store_free(c);
        _exit(crc ? 1 : 0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    uint64_t before = marker_seq(dir);
    rc = rc ? rc : big(s, "mine", 'A', BIG, CAIRN__RELAXED);
    ok(WIFEXITED(st) && WEXITSTATUS(st) == 0 && rc == 0 && marker_seq(dir) > before,
       "after another process grew the map, a relaxed write begins with a durable point (seq "
       "%llu -> %llu)",
       (unsigned long long)before, (unsigned long long)marker_seq(dir));
    cairn_store_free(s);
    reboot("boot-B");
    s = open_sync(dir);
    big_arg c = {"big00", 'b', 0, 0, 0};
    if (s)
        cairn__store_read(s, big_check_txn, &c);
    if (c.rc == 0 && c.bad == 'B') { /* the restored state may predate the rewrite */
        c.fill = 'B', c.bad = 0;
        cairn__store_read(s, big_check_txn, &c);
    }
    ok(s && c.rc == 0 && c.bad == 0,
       "and a reboot finds every value of the durable state whole (rc %d, stray byte %d)", c.rc,
       c.bad);
    cairn_store_free(s);
    unsetenv("CAIRN_TEST_BOOT_ID");
    unsetenv("CAIRN_TEST_SYNC_MAP");
}

static int copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char buf[65536];
    ssize_t n = 0;
    while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n)
            n = -1;
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    return in >= 0 && out >= 0 && n == 0 ? 0 : -1;
}

/* The marker describes one data.mdb: a file put back from an older copy, or removed, must not
 * get the marker's meta pages written over it after a reboot. */
static void test_marker_other_file(void)
{
    char dir[300], data[400], saved[400], path[400];
    static const char *const ids[] = {"a", "b"};
    char got[32];
    newdir(dir, "other");
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    snprintf(saved, sizeof saved, "%s.old", dir);
    reboot("boot-A");
    cairn_store *s = open_sync(dir);
    int rc = put(s, "a", CAIRN__DURABLE);
    cairn_store_free(s);
    rc = rc ? rc : copy_file(data, saved); /* a backup of the store with "a" */
    s = open_sync(dir);
    rc = rc ? rc : put(s, "b", CAIRN__DURABLE);
    cairn_store_free(s);
    rc = rc ? rc : copy_file(saved, data); /* put the backup back, the marker stays */
    reboot("boot-B");
    s = open_sync(dir);
    presence(s, ids, 2, got);
    tu_dump d;
    snprintf(path, sizeof path, "%s/synced", dir);
    struct stat st;
    ok(rc == 0 && s && strcmp(got, "10") == 0 && tu_raw_dump(dir, &d) == 0,
       "an older data.mdb put back beside a newer marker: after a reboot it opens as it is, "
       "whole (%s)",
       got);
    rc = s ? put(s, "b", CAIRN__DURABLE) : -1;
    ok(rc == 0 && stat(path, &st) == 0 && st.st_size > 0,
       "and the set-aside marker is written afresh at its next durable point");
    cairn_store_free(s);

    /* another store's data.mdb, as many commits old as the marker but not the same: its meta
     * page of the marker's commit is not the marker's copy */
    char x[300], y[300], xdata[400], ydata[400];
    newdir(x, "samex");
    newdir(y, "samey");
    snprintf(xdata, sizeof xdata, "%s/data.mdb", x);
    snprintf(ydata, sizeof ydata, "%s/data.mdb", y);
    reboot("boot-C");
    cairn_store *o = open_sync(x);
    int orc = o ? put(o, "a", CAIRN__DURABLE) : -1;
    cairn_store_free(o);
    o = open_sync(y);
    orc = orc ? orc : o ? cairn__store_write(o, CAIRN__DURABLE, put2_txn, NULL) : -1;
    cairn_store_free(o);
    orc = orc ? orc : copy_file(ydata, xdata);
    reboot("boot-D");
    o = open_sync(x);
    static const char *const two[] = {"a", "x", "y"};
    presence(o, two, 3, got);
    ok(orc == 0 && o && strcmp(got, "011") == 0 && tu_raw_dump(x, &d) == 0,
       "another store's data.mdb of the same age beside the marker: it opens as it is, whole "
       "(%s)",
       got);
    cairn_store_free(o);

    /* A store with commits whose data.mdb is gone is lost, not new (checkpoint/filecheck.c):
     * opening it empty would run every task, and its effects, again. */
    unlink(data);
    reboot("boot-E");
    s = cairn_store_new();
    rc = cairn_store_open(s, dir);
    ok(rc == CAIRN_ECORRUPT && strstr(cairn_store_errmsg(s), "data.mdb is missing") &&
           stat(data, &st) != 0,
       "data.mdb removed: after a reboot the store is refused, not opened empty, and no data.mdb "
       "is made (%s: %s)",
       cairn_errname(rc), cairn_store_errmsg(s));
    cairn_store_free(s);
    unlink(saved);
    unsetenv("CAIRN_TEST_BOOT_ID");
}

/* The root record: a durable point hashes the page the marker's meta page names as the main
 * database's root. That page belongs to the pinned snapshot, so relaxed commits after the
 * durable point leave it as it is in the file; the next durable point names another. */
static void test_root_record(void)
{
    char dir[300], path[400];
    cairn_store *s = fresh_store(dir, "root");
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    unsigned char m1[SLOT], m2[SLOT], page[4096], md[SHA256_DIGEST_LENGTH];
    int rc = put(s, "a", CAIRN__DURABLE);
    int v1 = newest_slot(dir, m1);
    rc = rc ? rc : put(s, "b", CAIRN__DURABLE);
    int v2 = newest_slot(dir, m2);
    uint64_t r1 = be_u64(m1 + ROOT_AT), r2 = be_u64(m2 + ROOT_AT);
    ok(rc == 0 && v1 == 2 && v2 == 2 && r1 != UINT64_MAX && r2 != UINT64_MAX &&
           memcmp(m1 + ROOT_AT, m2 + ROOT_AT, 40) != 0,
       "each durable point records the main database's root page, and its hash changes between "
       "durable points (version %d, page %llu; version %d, page %llu)",
       v1, (unsigned long long)r1, v2, (unsigned long long)r2);
    for (int i = 0; i < 5 && rc == 0; i++) {
        char id[16];
        snprintf(id, sizeof id, "r%d", i);
        rc = put(s, id, CAIRN__RELAXED);
    }
    int fd = open(path, O_RDONLY);
    int got = fd >= 0 && pread(fd, page, sizeof page, (off_t)(r2 * sizeof page)) == sizeof page;
    if (fd >= 0)
        close(fd);
    SHA256(page, sizeof page, md);
    ok(rc == 0 && got && memcmp(md, m2 + ROOT_AT + 8, sizeof md) == 0,
       "after 5 relaxed commits the file still holds the page the marker hashed (the pin)");
    cairn_store_free(s);
    unsetenv("CAIRN_TEST_BOOT_ID");
}

/* Checks the shape recovery cannot tell by the meta pages alone: both of data.mdb's meta pages
 * name commits newer than the marker's. */
static void ok_newer_everywhere(int rc, const char *dir, const char *what)
{
    uint64_t t[2] = {0, 0}, mt = marker_txn(dir);
    rc = rc ? rc : meta_txns(dir, t);
    ok(rc == 0 && mt && t[0] > mt && t[1] > mt,
       "%s: both meta pages newer than the marker (%llu, %llu > %llu)", what,
       (unsigned long long)t[0], (unsigned long long)t[1], (unsigned long long)mt);
}

/* A data.mdb newer than the marker everywhere (both meta pages name later commits) is what our
 * own file looks like after relaxed commits, and recovery must return that one to the durable
 * point. Another store's file of that shape, copied over ours while `synced` stayed, must be left
 * as it is: the marker's root page is not in it. */
static void test_marker_newer_file(void)
{
    static const char *const ids[] = {"a", "b", "c", "x", "y", "z"};
    char got[32];
    tu_dump d;

    /* our own file */
    char own[300];
    cairn_store *s = fresh_store(own, "ownnewer");
    int rc = put(s, "a", CAIRN__DURABLE);
    rc = rc ? rc : put(s, "b", CAIRN__RELAXED);
    rc = rc ? rc : put(s, "c", CAIRN__RELAXED);
    cairn_store_free(s);
    ok_newer_everywhere(rc, own, "our own data.mdb after two relaxed commits");
    reboot("boot-B");
    s = open_sync(own);
    presence(s, ids, 3, got);
    ok(s && strcmp(got, "100") == 0 && tu_raw_dump(own, &d) == 0,
       "after a reboot it returns to the durable point, whole (%s)", got);
    cairn_store_free(s);

    /* another store's file of the same shape: more commits than ours since. Its history differs
     * from ours (put2_txn): the root record tells files apart by the main database's root page,
     * which a store with our very history up to the marker's commit shares (synced.c) */
    char x[300], y[300], xdata[400], ydata[400], ref[400];
    newdir(x, "newerx");
    newdir(y, "newery");
    snprintf(xdata, sizeof xdata, "%s/data.mdb", x);
    snprintf(ydata, sizeof ydata, "%s/data.mdb", y);
    snprintf(ref, sizeof ref, "%s.ref", y);
    reboot("boot-C");
    s = open_sync(x);
    rc = s ? put(s, "a", CAIRN__DURABLE) : -1;
    cairn_store_free(s);
    s = open_sync(y);
    rc = rc ? rc : s ? cairn__store_write(s, CAIRN__DURABLE, put2_txn, NULL) : -1; /* x, y */
    rc = rc ? rc : put(s, "z", CAIRN__DURABLE);
    rc = rc ? rc : put(s, "q", CAIRN__RELAXED);
    cairn_store_free(s);
    rc = rc ? rc : copy_file(ydata, xdata); /* over ours; our marker stays */
    rc = rc ? rc : copy_file(ydata, ref);
    uint64_t mt = marker_txn(x);
    ok_newer_everywhere(rc, x, "another store's data.mdb over ours");
    reboot("boot-D");
    s = open_sync(x);
    int same = same_bytes(xdata, ref);
    off_t msize = file_size(x, "synced");
    presence(s, ids, 6, got);
    ok(s && same == 1 && msize == 0,
       "after a reboot the open leaves it byte for byte as it was (%d) and sets the marker aside "
       "(synced: %lld bytes)",
       same, (long long)msize);
    ok(s && strcmp(got, "000111") == 0 && tu_raw_dump(x, &d) == 0,
       "and the store opens as that file's own state, whole (%s)", got);
    rc = s ? put(s, "b", CAIRN__DURABLE) : -1;
    ok(rc == 0 && marker_txn(x) > mt, "its next durable point writes a marker afresh");
    cairn_store_free(s);
    unlink(ref);

    /* our own file cut short: the marker's root page is past its end. The restore is not made
     * (the open then fails or not, in a child: LMDB may fault on such a file) */
    char cut[300], cdata[400], cref[400];
    s = fresh_store(cut, "short");
    snprintf(cdata, sizeof cdata, "%s/data.mdb", cut);
    snprintf(cref, sizeof cref, "%s.ref", cut);
    rc = s ? put(s, "a", CAIRN__DURABLE) : -1;
    rc = rc ? rc : put(s, "b", CAIRN__RELAXED);
    rc = rc ? rc : put(s, "c", CAIRN__RELAXED);
    cairn_store_free(s);
    rc = rc ? rc : truncate(cdata, 2 * 4096);
    rc = rc ? rc : copy_file(cdata, cref);
    reboot("boot-B");
    pid_t pid = fork();
    if (pid == 0) {
        cairn_store *c = cairn_store_new();
        cairn_store_open(c, cut);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    same = same_bytes(cdata, cref);
    msize = file_size(cut, "synced");
    ok(rc == 0 && same == 1 && msize == 0,
       "a data.mdb too small to hold the marker's root page: left as it is (%d), the marker set "
       "aside (%lld bytes)",
       same, (long long)msize);
    unlink(cref);
    unsetenv("CAIRN_TEST_BOOT_ID");
}

/* A marker written before the root record (format version 1) is still honoured: a reboot returns
 * to it, without the root check, and the marker keeps its version until the next durable point. */
static void test_marker_v1(void)
{
    char dir[300];
    static const char *const ids[] = {"a", "b", "c"};
    char got[32];
    unsigned char m[SLOT];
    cairn_store *s = fresh_store(dir, "v1");
    int rc = put(s, "a", CAIRN__DURABLE);
    rc = rc ? rc : put(s, "b", CAIRN__RELAXED);
    cairn_store_free(s);
    ok(rc == 0 && marker_to_v1(dir) == 0 && newest_slot(dir, m) == 1,
       "the marker rewritten as version 1 (no root record)");
    reboot("boot-B");
    s = open_sync(dir);
    presence(s, ids, 2, got);
    int v = newest_slot(dir, m);
    ok(s && strcmp(got, "10") == 0 && v == 1,
       "after a reboot a version-1 marker returns the store to its durable point (%s), and stays "
       "version %d under the new boot id",
       got, v);
    rc = s ? put(s, "c", CAIRN__DURABLE) : -1;
    v = newest_slot(dir, m);
    ok(rc == 0 && v == 2, "the next durable point writes version %d", v);
    cairn_store_free(s);
    unsetenv("CAIRN_TEST_BOOT_ID");
}

/* A child forked with the store open frees its copy of the handle without waiting for the
 * parent's keeper thread and without releasing the parent's pin. */
static void test_fork_free(void)
{
    char dir[300];
    newdir(dir, "fork");
    cairn_store *s = open_sync(dir);
    int rc = put(s, "a", CAIRN__RELAXED);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(5);
        cairn_store_free(s);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    ok(rc == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
       "cairn_store_free in a forked child returns (status %d)", st);
    ok(pinned_readers(dir, getpid()) == 1, "and the parent's pin is still held");
    cairn_store_free(s);
}

static int stats_txn(cairn__txn *t, void *arg) { return cairn__store_stats_get(t, arg); }

/* A writer killed with SIGKILL leaves its pin in LMDB's reader table; a live process's keeper
 * clears it within a few seconds (page reuse would stop until the next open otherwise). */
static void test_killed_writers_pin(void)
{
    char dir[300];
    newdir(dir, "killed");
    cairn_store *s = open_sync(dir);
    int rc = put(s, "a", CAIRN__RELAXED); /* this process's keeper runs from here */
    int fds[2];
    if (pipe(fds) != 0)
        return;
    pid_t pid = fork();
    if (pid == 0) {
        cairn_store *c = open_sync(dir);
        char ok_ = c && put(c, "b", CAIRN__RELAXED) == 0 ? 'y' : 'n';
        if (write(fds[1], &ok_, 1) != 1)
            _exit(2);
        pause();
        _exit(0);
    }
    char c = '?';
    if (read(fds[0], &c, 1) != 1)
        c = '?';
    int before = pinned_readers(dir, pid);
    cairn__store_stats st = {0};
    cairn__store_read(s, stats_txn, &st);
    ok(st.readers == 1 && st.oldest_reader_pid == pid && st.oldest_reader_txn <= st.last_txn &&
           st.durable_txn && st.durable_txn <= st.last_txn,
       "stats: one other reader, the writer's pin (pid %d, commit %llu of %llu); durable up to "
       "commit %llu",
       st.oldest_reader_pid, (unsigned long long)st.oldest_reader_txn,
       (unsigned long long)st.last_txn, (unsigned long long)st.durable_txn);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    int after = -1;
    for (int i = 0; i < 40 && after != 0; i++) { /* up to 8 s; the keeper checks every 5 s */
        usleep(200 * 1000);
        after = pinned_readers(dir, pid);
    }
    ok(rc == 0 && c == 'y' && before == 1 && after == 0,
       "a killed writer's pin (%d) is cleared by a live process within seconds (%d left)", before,
       after);
    close(fds[0]), close(fds[1]);
    cairn_store_free(s);
}

/* The core rule: no page is written without a pin. A process that opens the store holds none;
 * its relaxed rewrites would reuse the pages of the last durable state (freed by its first
 * rewrite, reusable two commits later), and a reboot would then return to a tree of overwritten
 * pages. Its first write must begin with a durable point, whose pin keeps them. */
static void test_unpinned_rewrites(void)
{
    char dir[300];
    cairn_store *s = fresh_store(dir, "unpinned");
    int rc = big(s, "v", 'A', BIG, CAIRN__DURABLE);
    cairn_store_free(s);
    s = open_sync(dir); /* a new process: no pin */
    for (int i = 0; i < 6 && !rc; i++)
        rc = big(s, "v", 'B' + i, BIG, CAIRN__RELAXED);
    cairn_store_free(s);
    reboot("boot-B");
    s = open_sync(dir);
    big_arg c = {"v", 'A', 0, 0, 0};
    if (s)
        cairn__store_read(s, big_check_txn, &c);
    ok(rc == 0 && s && c.rc == 0 && c.bad == 0,
       "relaxed rewrites by a process that had no pin: a reboot finds the durable value whole "
       "(rc %d, stray byte %d)",
       c.rc, c.bad);
    cairn_store_free(s);
    unsetenv("CAIRN_TEST_BOOT_ID");
}

/* ------------------------------------------------------------------ states reported */

static cairn_step_result sleep_step(cairn_ctx *ctx, void *user)
{
    (void)ctx, (void)user;
    sleep(30); /* killed long before */
    return CAIRN_STEP_OK;
}

static cairn_runner *runner_on(cairn_store *s, cairn_graph *g)
{
    cairn_runner *r = cairn_runner_new();
    cairn_runner_add_graph(r, g);
    cairn_runner_set_store(r, s);
    cairn_runner_set_inline_wait_ms(r, 0);
    return r;
}

/* A state the runner reports from what it read, rather than wrote - a task given up (its last
 * acquire, a relaxed write, marked it dead), a task admitted but refused by the tenant limit
 * (kept pending for `retry`) - is made durable before it is reported: a reboot keeps it. */
static void test_reported_states_settled(void)
{
    char dir[300];
    int fds[2];
    if (pipe(fds) != 0)
        return;
    /* a run killed inside its step used the task's only attempt; the next run's acquire marks
     * the task dead (a relaxed write) and reports it */
    newdir(dir, "reported");
    reboot("boot-A");
    cairn_graph *g = cairn_graph_new("g", 1);
    cairn_graph_add_step(g, "s", sleep_step, NULL);
    pid_t pid = fork();
    if (pid == 0) {
        cairn_store *c = open_sync(dir);
        cairn_runner *cr = c ? runner_on(c, g) : NULL;
        if (!cr || cairn_runner_open(cr))
            _exit(2);
        cairn_runner_run(cr, "g", "t", NULL, "{}", 2, NULL, NULL, 0);
        _exit(0);
    }
    cairn_store *s = open_sync(dir);
    cairn__task_rec tr = {0};
    int trc = -1;
    for (int i = 0; i < 200 && (trc || tr.state != CAIRN_RUNNING); i++) {
        usleep(20 * 1000);
        trc = tu_task_get(s, "t", &tr);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    cairn_runner *r = runner_on(s, g);
    cairn_runner_set_max_attempts(r, 1);
    int rc2 =
        cairn_runner_open(r) ? -1 : cairn_runner_run(r, "g", "t", NULL, "{}", 2, NULL, NULL, 0);
    cairn_runner_free(r);
    cairn_store_free(s);
    reboot("boot-B");
    s = open_sync(dir);
    trc = s ? tu_task_get(s, "t", &tr) : -1;
    ok(rc2 == CAIRN_EDEAD && trc == 0 && tr.state == CAIRN_DEAD,
       "a task the runner gave up on is still dead after a reboot (%s; state %d)",
       cairn_errname(rc2), (int)tr.state);
    cairn_store_free(s);
    cairn_graph_free(g);

    /* the tenant limit: a child holds tenant x's only slot; our task of x is refused */
    newdir(dir, "tenant");
    reboot("boot-A");
    g = cairn_graph_new("g", 1);
    cairn_graph_add_step(g, "s", sleep_step, NULL);
    pid = fork();
    if (pid == 0) {
        cairn_store *c = open_sync(dir);
        cairn_runner *cr = c ? runner_on(c, g) : NULL;
        if (!cr || cairn_runner_set_tenant_limit(cr, "tenant", 1) || cairn_runner_open(cr))
            _exit(2);
        char one = 'r';
        if (write(fds[1], &one, 1) != 1) /* (sent just before the run: the parent waits more) */
            _exit(2);
        cairn_runner_run(cr, "g", "held", NULL, "{\"tenant\":\"x\"}", 14, NULL, NULL, 0);
        _exit(0);
    }
    char one = 0;
    int ready = read(fds[0], &one, 1) == 1;
    s = open_sync(dir);
    r = runner_on(s, g);
    cairn_runner_set_tenant_limit(r, "tenant", 1);
    int rc = cairn_runner_open(r);
    cairn__task_rec held = {0};
    int hrc = -1;
    for (int i = 0; i < 100 && !rc && (hrc || held.state != CAIRN_RUNNING); i++) {
        usleep(20 * 1000);
        hrc = tu_task_get(s, "held", &held);
    }
    rc = rc ? rc : cairn_runner_run(r, "g", "mine", NULL, "{\"tenant\":\"x\"}", 14, NULL, NULL, 0);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    cairn_runner_free(r);
    cairn_store_free(s);
    reboot("boot-B");
    s = open_sync(dir);
    trc = s ? tu_task_get(s, "mine", &tr) : -1;
    ok(ready && held.state == CAIRN_RUNNING && rc == CAIRN_ETENANT && trc == 0 &&
           tr.state == CAIRN_PENDING,
       "a task refused by the tenant limit is still pending for retry after a reboot (%s; found "
       "%s)",
       cairn_errname(rc), trc == 0 ? "it" : "nothing");
    cairn_store_free(s);
    cairn_graph_free(g);
    close(fds[0]), close(fds[1]);
    unsetenv("CAIRN_TEST_BOOT_ID");
}

static cairn_step_result ok_step(cairn_ctx *ctx, void *user)
{
    (void)ctx, (void)user;
    return CAIRN_STEP_OK;
}

/* A run of a task that succeeded earlier reports it without a flush when a durable point covers
 * the commit that finished it, even while another process's relaxed commits are not flushed
 * yet (a retry storm on a busy store costs no flushes). */
static void test_hit_on_busy_store(void)
{
    char dir[300];
    newdir(dir, "hit");
    cairn_graph *g = cairn_graph_new("g", 1);
    cairn_graph_add_step(g, "s", ok_step, NULL);
    cairn_store *s = open_sync(dir);
    cairn_runner *r = runner_on(s, g);
    int rc =
        cairn_runner_open(r) ? -1 : cairn_runner_run(r, "g", "t", NULL, "{}", 2, NULL, NULL, 0);
    pid_t pid = fork();
    if (pid == 0) { /* a busy neighbour: relaxed commits, no durable point after them */
        cairn_store *c = open_sync(dir);
        int crc = c ? put(c, "n1", CAIRN__RELAXED) : -1;
        crc = crc ? crc : put(c, "n2", CAIRN__RELAXED);
        _exit(crc ? 1 : 0); /* (no free: its pin and page cache stay as a live writer's) */
    }
    int st = 0;
    waitpid(pid, &st, 0);
    uint64_t before = marker_seq(dir);
    int hit = cairn_runner_run(r, "g", "t", NULL, "{}", 2, NULL, NULL, 0);
    ok(rc == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 && hit == 0 && marker_seq(dir) == before,
       "a run of a task that succeeded earlier flushes nothing while a neighbour's relaxed "
       "commits are pending (seq %llu -> %llu)",
       (unsigned long long)before, (unsigned long long)marker_seq(dir));
    cairn_runner_free(r);
    cairn_store_free(s);
    cairn_graph_free(g);
}

/* ------------------------------------------------------------------ a failed flush */

static void test_flush_failure(void)
{
    char dir[300], path[400];
    cairn_store *s = fresh_store(dir, "flushfail");
    int rc = put(s, "a", CAIRN__DURABLE);
    cairn__store_inject_flush_failure(s, EIO);
    int frc = put(s, "b", CAIRN__DURABLE);
    /* with the journal a durable point flushes it; without, data.mdb (a fold) */
    const char *what = getenv("CAIRN_TEST_NO_JOURNAL") ? "flushing data.mdb" : "flushing journal";
    ok(rc == 0 && frc == CAIRN_EIO && strstr(cairn_store_errmsg(s), what),
       "a failed flush at a durable point is CAIRN_EIO naming it (\"%s\")", cairn_store_errmsg(s));
    int later = put(s, "c", CAIRN__RELAXED);
    ok(later == CAIRN_EIO, "and the handle takes no more writes (%s)", cairn_errname(later));
    cairn_store_free(s);
    s = cairn_store_new();
    int orc = cairn_store_open(s, dir);
    snprintf(path, sizeof path, "%s/flush-failed", dir);
    ok(orc == CAIRN_EIO && strstr(cairn_store_errmsg(s), path),
       "no process opens it again in the same boot: CAIRN_EIO naming %s", path);
    cairn_store_free(s);
    reboot("boot-B");
    s = open_sync(dir);
    static const char *const ids[] = {"a", "b"};
    char got[32];
    presence(s, ids, 2, got);
    struct stat st;
    ok(s && strcmp(got, "10") == 0 && stat(path, &st) != 0,
       "after a reboot it opens at its last durable point, and the record is gone (%s)", got);
    cairn_store_free(s);
    unsetenv("CAIRN_TEST_BOOT_ID");
}

/* The journal's flush counter (its header in journal-shm, byte 64), 0 without one. */
static uint64_t journal_flushes(const char *dir)
{
    char path[400];
    unsigned char h[72];
    snprintf(path, sizeof path, "%s/journal-shm", dir);
    int fd = open(path, O_RDONLY);
    ssize_t n = fd >= 0 ? pread(fd, h, sizeof h, 0) : -1;
    if (fd >= 0)
        close(fd);
    return n == (ssize_t)sizeof h && memcmp(h, "CAIRNJNL", 8) == 0 ? le64(h + 64) : 0;
}

/* With the journal a durable point is one flush of it; the marker is written only by folds (a
 * process's first write, a pin a second old). */
static void test_journal_one_flush(void)
{
    char dir[300];
    cairn_store *s = fresh_store(dir, "jflush");
    int rc = put(s, "d0", CAIRN__DURABLE);
    uint64_t m0 = marker_seq(dir), f0 = journal_flushes(dir);
    for (int i = 1; i <= 10 && rc == 0; i++) {
        char id[16];
        snprintf(id, sizeof id, "d%d", i);
        rc = put(s, id, CAIRN__DURABLE);
    }
    uint64_t folds = marker_seq(dir) - m0, flushes = journal_flushes(dir) - f0;
    /* (a fold stands in for a flush when the pin grew a second old: a loaded machine) */
    ok(rc == 0 && m0 > 0 && flushes + folds == 10 && flushes >= 5,
       "ten durable points: %llu journal flushes, %llu folds (data.mdb and the marker)",
       (unsigned long long)flushes, (unsigned long long)folds);
    cairn_store_free(s);
    reboot("boot-B");
    s = open_sync(dir);
    static const char *const ids[] = {"d0", "d1", "d5", "d10"};
    char got[32];
    presence(s, ids, 4, got);
    tu_dump d;
    ok(s && strcmp(got, "1111") == 0 && tu_raw_dump(dir, &d) == 0,
       "after a reboot every durable write is back, replayed from the journal (%s)", got);
    rc = put(s, "e", CAIRN__DURABLE);
    cairn_store_free(s);
    reboot("boot-C");
    s = open_sync(dir);
    static const char *const ids2[] = {"d0", "d10", "e"};
    presence(s, ids2, 3, got);
    ok(rc == 0 && s && strcmp(got, "111") == 0,
       "and the store takes writes after the replay, which the next reboot keeps (%s)", got);
    cairn_store_free(s);
    unsetenv("CAIRN_TEST_BOOT_ID");
}

/* The journal's stamp (its first page: magic, version, pad, nonce) and the header's nonce
 * (journal-shm, byte 16). */
static int journal_stamp(const char *dir, uint32_t *version, uint64_t *nonce, uint64_t *hnonce)
{
    char path[400];
    unsigned char st[24], h[24];
    snprintf(path, sizeof path, "%s/journal", dir);
    int fd = open(path, O_RDONLY);
    ssize_t n = fd >= 0 ? pread(fd, st, sizeof st, 0) : -1;
    if (fd >= 0)
        close(fd);
    snprintf(path, sizeof path, "%s/journal-shm", dir);
    fd = open(path, O_RDONLY);
    ssize_t m = fd >= 0 ? pread(fd, h, sizeof h, 0) : -1;
    if (fd >= 0)
        close(fd);
    if (n != (ssize_t)sizeof st || m != (ssize_t)sizeof h || memcmp(st, "CAIRNJNL", 8) != 0)
        return -1;
    *version = (uint32_t)(le64(st + 8) & 0xffffffffu);
    *nonce = le64(st + 16), *hnonce = le64(h + 16);
    return 0;
}

/* A version-1 cairn keeps the journal's header in its first page. One that writes the store
 * beside this version (an upgrade while a server still runs) finds the stamp's version 2 there
 * and folds; its fold writes its own header over the stamp, and this version, meeting it, folds
 * before its next entry rather than append from a header that does not follow the other's
 * entries. Every durable write comes back after a reboot. */
static void test_journal_other_version(void)
{
    char dir[300];
    cairn_store *s = fresh_store(dir, "jversion");
    int rc = put(s, "v0", CAIRN__DURABLE);
    rc = rc ? rc : put(s, "v1", CAIRN__DURABLE);
    uint32_t version = 0;
    uint64_t nonce = 0, hnonce = 0;
    ok(rc == 0 && journal_stamp(dir, &version, &nonce, &hnonce) == 0 && version == 2 &&
           nonce == hnonce && nonce != 0,
       "the journal's first page is a version-2 stamp of the header's epoch");
    /* a version-1 process's fold: its header, a new epoch, over the stamp */
    char path[400];
    snprintf(path, sizeof path, "%s/journal", dir);
    unsigned char v1[72] = "CAIRNJNL";
    v1[8] = 1;
    for (int i = 0; i < 8; i++)
        v1[16 + i] = (unsigned char)(0x5a + i); /* its nonce */
    int fd = open(path, O_WRONLY);
    ok(fd >= 0 && pwrite(fd, v1, sizeof v1, 0) == (ssize_t)sizeof v1, "a version-1 header written");
    if (fd >= 0)
        close(fd);
    uint64_t m0 = marker_seq(dir);
    rc = put(s, "v2", CAIRN__DURABLE);
    uint64_t folds = marker_seq(dir) - m0, old = nonce;
    ok(rc == 0 && folds >= 1 && journal_stamp(dir, &version, &nonce, &hnonce) == 0 &&
           version == 2 && nonce == hnonce && nonce != old,
       "the next durable write folds first (%llu folds) and stamps a new epoch",
       (unsigned long long)folds);
    m0 = marker_seq(dir);
    uint64_t f0 = journal_flushes(dir);
    rc = put(s, "v3", CAIRN__DURABLE);
    ok(rc == 0 && journal_flushes(dir) - f0 + marker_seq(dir) - m0 == 1,
       "and the one after it is a journal flush again");
    cairn_store_free(s);
    reboot("boot-V");
    s = open_sync(dir);
    static const char *const ids[] = {"v0", "v1", "v2", "v3"};
    char got[32];
    presence(s, ids, 4, got);
    ok(s && strcmp(got, "1111") == 0, "after a reboot every durable write is back (%s)", got);
    cairn_store_free(s);
    unsetenv("CAIRN_TEST_BOOT_ID");
}

/* Group commit (store.c, cairn__store_write): threads writing on one handle at once share
 * transactions and flushes. A relaxed write in a durable batch returns at the commit, before its
 * batch's flush, and its request (on its asker's stack) may be gone from then on: a leader that
 * still touched it corrupted the asker's next frames (ASan, with detect_stack_use_after_return,
 * reports it in scripts/sanitize.sh). Every tenth write's callback writes and then fails: it
 * returns its error and leaves nothing, and the writes batched with it run alone and succeed.
 * Each thread's last write is durable, so after a reboot every other write is back. */
enum { GC_THREADS = 8, GC_WRITES = 150 };

typedef struct gc_arg {
    cairn_store *s;
    int k, bad;
} gc_arg;

static int put_then_fail_txn(cairn__txn *t, void *arg)
{
    int rc = put_txn(t, arg);
    return rc ? rc : CAIRN_ECONFLICT;
}

static void *gc_main(void *p)
{
    gc_arg *a = p;
    for (int i = 0; i < GC_WRITES; i++) {
        char id[32];
        snprintf(id, sizeof id, "g%d-%d", a->k, i);
        int durable = i % 2 ? CAIRN__DURABLE : CAIRN__RELAXED;
        if (i % 10 == 5 + a->k % 2)
            a->bad += cairn__store_write(a->s, durable, put_then_fail_txn, id) != CAIRN_ECONFLICT;
        else
            a->bad += put(a->s, id, durable) != 0;
    }
    return NULL;
}

static void test_group_commit_threads(void)
{
    char dir[300];
    cairn_store *s = fresh_store(dir, "gcommit");
    int rc = put(s, "g-first", CAIRN__DURABLE); /* the first write folds */
    gc_arg args[GC_THREADS];
    pthread_t th[GC_THREADS];
    int made = 0, bad = 0;
    for (int k = 0; k < GC_THREADS && rc == 0; k++) {
        args[k] = (gc_arg){.s = s, .k = k};
        made += pthread_create(&th[k], NULL, gc_main, &args[k]) == 0;
    }
    for (int k = 0; k < made; k++) {
        pthread_join(th[k], NULL);
        bad += args[k].bad;
    }
    uint64_t batches = 0, writes = 0;
    cairn__store_batches(s, &batches, &writes);
    ok(rc == 0 && made == GC_THREADS && bad == 0,
       "%d threads x %d writes, relaxed and durable in turn, a tenth of them failing: %d "
       "answered wrong",
       made, GC_WRITES, bad);
    ok(writes > batches, "they shared transactions: %llu writes in %llu",
       (unsigned long long)writes, (unsigned long long)batches);
    cairn_store_free(s);
    reboot("boot-G");
    s = open_sync(dir);
    int missing = s ? 0 : -1;
    for (int k = 0; k < GC_THREADS && s; k++)
        for (int i = 0; i < GC_WRITES; i++) {
            char id[32];
            snprintf(id, sizeof id, "g%d-%d", k, i);
            missing += has(s, id) != (i % 10 == 5 + k % 2 ? 0 : 1);
        }
    ok(missing == 0, "after a reboot every write is back, and no failed one (%d wrong)", missing);
    cairn_store_free(s);
    unsetenv("CAIRN_TEST_BOOT_ID");
}

/* A flush that fails under group commit fails the durable writes it was to cover, and breaks
 * the handle: no write after it succeeds (a later flush may succeed although the pages the
 * failed one lost never reach the disk), and every durable write that returned 0 is there after
 * a reboot. */
enum { GF_WRITES = 4000 };

typedef struct gf_arg {
    cairn_store *s;
    int k, done, first_err, bad; /* done: writes that returned 0 */
} gf_arg;

static void *gf_main(void *p)
{
    gf_arg *a = p;
    for (int i = 0; i < GF_WRITES; i++) {
        char id[32];
        snprintf(id, sizeof id, "f%d-%d", a->k, i);
        int rc = put(a->s, id, CAIRN__DURABLE);
        if (rc && !a->first_err)
            a->first_err = rc;
        if (!rc)
            a->bad += a->first_err != 0, a->done = i + 1;
        if (a->first_err && i >= a->done + 3)
            break; /* a few writes after the failure, all refused */
    }
    return NULL;
}

static void test_group_commit_flush_failure(void)
{
    char dir[300];
    cairn_store *s = fresh_store(dir, "gcfail");
    int rc = put(s, "f-first", CAIRN__DURABLE);
    gf_arg args[GC_THREADS];
    pthread_t th[GC_THREADS];
    int made = 0;
    for (int k = 0; k < GC_THREADS && rc == 0; k++) {
        args[k] = (gf_arg){.s = s, .k = k};
        made += pthread_create(&th[k], NULL, gf_main, &args[k]) == 0;
    }
    usleep(20 * 1000);
    cairn__store_inject_flush_failure(s, EIO);
    int eio = 0, bad = 0, done = 0;
    for (int k = 0; k < made; k++) {
        pthread_join(th[k], NULL);
        eio += args[k].first_err == CAIRN_EIO;
        bad += args[k].bad;
        done += args[k].done;
    }
    ok(rc == 0 && made == GC_THREADS && eio == made && bad == 0,
       "a flush fails under %d writing threads: each then fails with CAIRN_EIO (%d) and none "
       "succeeds after (%d did)",
       made, eio, bad);
    cairn_store_free(s);
    reboot("boot-F");
    s = open_sync(dir);
    int missing = s ? 0 : -1;
    for (int k = 0; k < made && s; k++)
        for (int i = 0; i < args[k].done; i++) {
            char id[32];
            snprintf(id, sizeof id, "f%d-%d", args[k].k, i);
            missing += has(s, id) != 1;
        }
    ok(missing == 0, "after a reboot each of the %d writes that returned 0 is there (%d missing)",
       done, missing);
    cairn_store_free(s);
    unsetenv("CAIRN_TEST_BOOT_ID");
}

/* An entry torn (or damaged) in the journal ends the replay there: the commits before it come
 * back, none after it, and the store reads whole. */
static void test_journal_torn_entry(void)
{
    char dir[300], path[400];
    cairn_store *s = fresh_store(dir, "jtorn");
    int rc = put(s, "a", CAIRN__DURABLE);
    rc = rc ? rc : put(s, "b", CAIRN__RELAXED);
    rc = rc ? rc : put(s, "c", CAIRN__RELAXED);
    rc = rc ? rc : put(s, "d", CAIRN__RELAXED);
    rc = rc ? rc : cairn__store_settle(s, 0); /* every entry flushed */
    cairn_store_free(s);
    /* the entries' offsets: c's is the second to last */
    snprintf(path, sizeof path, "%s/journal", dir);
    int fd = open(path, O_RDWR);
    off_t offs[64];
    int n = 0;
    unsigned char e[24];
    for (off_t off = 4096;
         fd >= 0 && n < 64 && pread(fd, e, 24, off) == 24 && memcmp(e, "CJNL", 4) == 0;) {
        uint32_t len = (uint32_t)(le64(e + 4) & 0xffffffffu);
        offs[n++] = off;
        if (len < 32)
            break;
        off += len;
    }
    unsigned char b = 0;
    int damaged = fd >= 0 && n >= 3 && pread(fd, &b, 1, offs[n - 2] + 30) == 1;
    b ^= 0x21;
    damaged = damaged && pwrite(fd, &b, 1, offs[n - 2] + 30) == 1;
    if (fd >= 0)
        close(fd);
    ok(rc == 0 && damaged, "a byte of the second-to-last journal entry flipped (%d entries)", n);
    reboot("boot-B");
    s = open_sync(dir);
    static const char *const ids[] = {"a", "b", "c", "d"};
    char got[32];
    presence(s, ids, 4, got);
    tu_dump d;
    ok(s && strcmp(got, "1100") == 0 && tu_raw_dump(dir, &d) == 0,
       "after a reboot the replay stops at the damaged entry: before it back, after it gone, "
       "the store whole (%s)",
       got);
    cairn_store_free(s);
    unsetenv("CAIRN_TEST_BOOT_ID");
}

static void test_schema_upgrade(void)
{
    char dir[300];
    newdir(dir, "upgrade");
    cairn_store *s = open_sync(dir);
    cairn_store_free(s);
    uint32_t v = 1;
    int rc = tu_raw_downgrade(dir, 1);
    s = open_sync(dir);
    v = 0;
    long n = tu_raw_get(dir, "meta", "schema", 6, &v, sizeof v);
    ok(rc == 0 && s && n == 4 && v == CAIRN__SCHEMA,
       "a store of schema 1 (before the durable-point protocol) is upgraded to %u when opened "
       "(%u)",
       CAIRN__SCHEMA, v);
    cairn_store_free(s);
}

/* Opens dir in a child with CAIRN_TEST_CUT_UPGRADE set: its exit status (86: it ended between
 * an upgrade's commit and the fold that makes it durable, as a power cut there would). */
static int open_cut(const char *dir)
{
    pid_t pid = fork();
    if (pid == 0) {
        setenv("CAIRN_TEST_CUT_UPGRADE", "1", 1);
        cairn_store *c = cairn_store_new();
        _exit(cairn_store_open(c, dir) == 0 ? 0 : 1);
    }
    int st = 0;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* An upgrade commits without a journal entry (store_impl.h: unjournaled), durable by the fold
 * after it. A power cut between the two must leave, after the reboot, the store as it was
 * before the upgrade (every record, schema 5), which the next writer upgrades again. */
static void test_upgrade_cut(void)
{
    char dir[300];
    cairn_store *s = fresh_store(dir, "upcut");
    int rc = put(s, "u1", 1);
    rc = rc ? rc : cairn__store_write(s, 1, put2_txn, NULL);
    cairn_store_free(s);
    ok(rc == 0 && tu_raw_to_schema5(dir) == 0 && tu_raw_schema(dir) == 5,
       "plant: a schema-5 store of tasks u1, x, y and an input");
    int ex = open_cut(dir);
    uint32_t live = tu_raw_schema(dir);
    ok(ex == 86 && live == CAIRN__SCHEMA,
       "the upgrade committed (the file's newest meta page says schema %u) and its process "
       "ended before the fold (exit %d)",
       live, ex);
    reboot("boot-B");
    ex = open_cut(dir);
    ok(ex == 86,
       "after a reboot the store is schema 5 again: the next open upgrades it anew "
       "(and ends before its fold: exit %d)",
       ex);
    reboot("boot-C");
    s = open_sync(dir);
    char got[32] = "";
    static const char *const ids[] = {"u1", "x", "y"};
    if (s)
        presence(s, ids, 3, got);
    ok(s && strcmp(got, "111") == 0 && tu_raw_schema(dir) == CAIRN__SCHEMA,
       "after another reboot a writer upgrades it for good: schema %u, tasks %s",
       tu_raw_schema(dir), s ? got : "?");
    cairn_store_free(s);
    unsetenv("CAIRN_TEST_BOOT_ID");
}

/* Split step records (checksum.c: the head in steps, the tail in tails) written at durable
 * points come back from the journal after a reboot, both halves: each reads byte for byte, a
 * tail deleted by a rewrite stays deleted, and `cairn check` finds nothing. */
typedef struct split_arg {
    const char *id;
    size_t len;
    unsigned seed;
} split_arg;

static void split_bytes(unsigned char *p, size_t n, unsigned seed)
{
    size_t len = n - 5;
    p[0] = 0xc6; /* msgpack bin 32 */
    p[1] = (unsigned char)(len >> 24), p[2] = (unsigned char)(len >> 16);
    p[3] = (unsigned char)(len >> 8), p[4] = (unsigned char)len;
    for (size_t i = 5; i < n; i++)
        p[i] = (unsigned char)(i * 131 + seed * 7);
}

static int split_put_txn(cairn__txn *t, void *arg)
{
    const split_arg *a = arg;
    static unsigned char out[16384];
    split_bytes(out, a->len, a->seed);
    int rc = put_txn(t, (void *)a->id);
    cairn__step_rec r = {
        .state = CAIRN_STEP_DONE, .generation = 1, .output = out, .output_len = a->len};
    return rc ? rc : cairn__step_put(t, a->id, "w", &r);
}

static int split_same_txn(cairn__txn *t, void *arg)
{
    const split_arg *a = arg;
    unsigned char want[16384];
    split_bytes(want, a->len, a->seed);
    cairn__step_rec r;
    int rc = cairn__step_get(t, a->id, "w", 1, &r);
    return rc ? rc : r.output_len == a->len && memcmp(r.output, want, a->len) == 0 ? 0 : -1;
}

static int split_check_cb(const char *db, const char *task, const char *msg, void *arg)
{
    (void)db, (void)task, (void)arg;
    diag("check: %s", msg);
    return 0;
}

static int split_check_txn(cairn__txn *t, void *arg)
{
    uint64_t records, problems;
    int rc = cairn__store_check(t, split_check_cb, NULL, &records, &problems);
    *(uint64_t *)arg = rc ? 1000 : problems;
    return 0;
}

static void test_split_replayed(void)
{
    char dir[300];
    cairn_store *s = fresh_store(dir, "split");
    int rc = put(s, "d0", CAIRN__DURABLE);
    uint64_t f0 = journal_flushes(dir);
    split_arg a[] = {
        {"s1", 8192, 1}, {"s2", 12300, 2}, {"s3", 8192, 3}, {"s3", 300, 4}, {"s4", 4200, 5}};
    for (size_t i = 0; i < sizeof a / sizeof *a && !rc; i++)
        rc = cairn__store_write(s, CAIRN__DURABLE, split_put_txn, &a[i]);
    uint64_t flushes = journal_flushes(dir) - f0;
    cairn_store_free(s);
    tu_dump before;
    tu_raw_dump(dir, &before);
    ok(rc == 0 && flushes > 0 && before.entries[12] == 3,
       "split records written at durable points (%llu journal flushes, %llu tails)",
       (unsigned long long)flushes, (unsigned long long)before.entries[12]);
    reboot("boot-B");
    s = open_sync(dir);
    int same = s != NULL;
    for (size_t i = 0; i < sizeof a / sizeof *a && same; i++)
        same = i == 2 || cairn__store_read(s, split_same_txn, &a[i]) == 0; /* 2: rewritten */
    uint64_t problems = 1000;
    if (s)
        cairn__store_read(s, split_check_txn, &problems);
    cairn_store_free(s);
    tu_dump after;
    tu_raw_dump(dir, &after);
    ok(same && problems == 0 && after.entries[12] == 3,
       "after a reboot each reads byte for byte, s3's old tail stays gone, check finds %llu "
       "problems (%llu tails)",
       (unsigned long long)problems, (unsigned long long)after.entries[12]);
    unsetenv("CAIRN_TEST_BOOT_ID");
}

int main(void)
{
    tu_tmpdir(root, "synced");
    test_reboot_returns_to_durable_point();
    test_marker_writers();
    test_no_restore_under_live_process();
    test_pin();
    test_schema_upgrade();
    test_upgrade_cut();
    test_map_grown_elsewhere();
    test_fork_free();
    test_killed_writers_pin();
    test_unpinned_rewrites();
    test_reported_states_settled();
    test_hit_on_busy_store();
    test_journal_one_flush();
    test_journal_torn_entry();
    test_journal_other_version();
    test_group_commit_threads();
    test_group_commit_flush_failure();
    test_split_replayed();
    test_flush_failure();
    /* the marker alone: every durable point a fold (no journal), as its tests expect */
    setenv("CAIRN_TEST_NO_JOURNAL", "1", 1);
    test_marker_slots();
    test_no_write_no_flush();
    test_marker_other_file();
    test_root_record();
    test_marker_newer_file();
    test_marker_v1();
    test_flush_failure();
    unsetenv("CAIRN_TEST_NO_JOURNAL");
    tu_rmtree(root);
    return tap_done();
}
