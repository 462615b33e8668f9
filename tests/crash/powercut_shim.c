/* tests/crash/powercut_shim.c - an LD_PRELOAD model of what a disk surely holds, for test_powercut.
 *
 * A power cut keeps what a flush made durable and, of everything written since, an arbitrary
 * subset (page by page, in no particular order). The test needs the first half - the state the
 * disk surely holds - at the moment of the cut; the page cache alone cannot say, since a SIGKILL
 * keeps every write. So this module, preloaded into every process of the workload, wraps the
 * calls that make data durable and records their result:
 *   fdatasync, fsync  after the real call succeeds on a file of the store,
 *   msync             same, for the file the range maps (a nosync store's writable map),
 *   write, writev, pwrite, pwrite64  only on a descriptor opened O_DSYNC/O_SYNC, where the
 *                     write itself is durable when it returns (LMDB's meta descriptor),
 * by copying the whole file to $CAIRN_POWERCUT_DIR/<basename>.disk. "A file of the store" is
 * data.mdb, synced (cairn's flush marker) or journal (its redo journal) in the directory
 * $CAIRN_POWERCUT_STORE, found by the
 * descriptor's /proc/self/fd link. The copy is written to a temporary name and renamed, so a
 * SIGKILL in the middle leaves the previous copy: the flush then counts as not returned, which is
 * true from the program's side, since it never saw the call return. Several processes flush at
 * once, so copies are made under an flock on $CAIRN_POWERCUT_DIR/lock, each reading the file
 * after its own flush: the last copy is always at least as new as every flush that returned.
 * A copy may also hold writes that another process made after that flush and has not flushed:
 * that is a state the disk can also be in (unflushed pages may reach it at any time), so the
 * model stays honest. The store reserves space ahead of use, so most of data.mdb is unwritten:
 * the copy skips holes (SEEK_DATA/SEEK_HOLE) and zero blocks (unwritten extents may read as
 * data), and stays small and sparse.
 *
 * When a copy fails, the wrapped call fails with EIO, as a flush that did not happen would: the
 * program sees it (and exits with a store error) instead of the model silently lagging behind,
 * and a line naming the file goes to $CAIRN_POWERCUT_DIR/shim-errors for the test to report.
 * Everything here uses system calls on stack buffers: no stdio, no allocation; calls the module
 * makes itself go to the real functions, never back into its wrappers.
 */
/* The wrappers define pwrite and pwrite64 separately; with _FILE_OFFSET_BITS=64 (which meson
 * sets) the headers would rename pwrite to pwrite64 and the two would clash. */
#undef _FILE_OFFSET_BITS
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h> /* rename */
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

typedef int (*sync_fn)(int);
typedef int (*msync_fn)(void *, size_t, int);
typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef ssize_t (*writev_fn)(int, const struct iovec *, int);
typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*pwrite64_fn)(int, const void *, size_t, off64_t);

static sync_fn real_fdatasync, real_fsync;
static msync_fn real_msync;
static write_fn real_write;
static writev_fn real_writev;
static pwrite_fn real_pwrite;
static pwrite64_fn real_pwrite64;

/* The next definition of `name` (libc's) into the function pointer `fn`: through memcpy,
 * since ISO C has no conversion from dlsym's object pointer to a function pointer (POSIX
 * guarantees the two have one representation). */
static void lookup(void *fn, size_t size, const char *name)
{
    void *p = dlsym(RTLD_NEXT, name);
    if (p && size == sizeof p)
        memcpy(fn, &p, sizeof p);
}

/* dlsym is thread-safe and returns the same pointer each time, so a race here only repeats the
 * lookup. A symbol that cannot be found leaves its wrapper failing with ENOSYS, loudly. */
static void resolve(void)
{
    if (real_pwrite64)
        return;
    lookup(&real_fdatasync, sizeof real_fdatasync, "fdatasync");
    lookup(&real_fsync, sizeof real_fsync, "fsync");
    lookup(&real_msync, sizeof real_msync, "msync");
    lookup(&real_write, sizeof real_write, "write");
    lookup(&real_writev, sizeof real_writev, "writev");
    lookup(&real_pwrite, sizeof real_pwrite, "pwrite");
    lookup(&real_pwrite64, sizeof real_pwrite64, "pwrite64");
}

__attribute__((constructor)) static void shim_init(void) { resolve(); }

/* ------------------------------------------------------------------ small helpers */

/* Writes all of buf with the real write (for the error log). */
static void write_all(int fd, const char *buf, size_t n)
{
    while (n > 0 && real_write) {
        ssize_t w = real_write(fd, buf, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        buf += w;
        n -= (size_t)w;
    }
}

/* dst = a + b (+ c), truncated to cap; returns 0 if it fit, -1 if not. */
static int join(char *dst, size_t cap, const char *a, const char *b, const char *c)
{
    size_t la = strlen(a), lb = strlen(b), lc = c ? strlen(c) : 0;
    if (la + lb + lc + 1 > cap)
        return -1;
    memcpy(dst, a, la);
    memcpy(dst + la, b, lb);
    if (c)
        memcpy(dst + la + lb, c, lc);
    dst[la + lb + lc] = 0;
    return 0;
}

static void u64_to_dec(char *out, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do
        tmp[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    for (int i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    out[n] = 0;
}

/* Appends "powercut shim: <what> <path>: <errno text>\n" to $CAIRN_POWERCUT_DIR/shim-errors
 * and to stderr. */
static void report(const char *what, const char *path, int err)
{
    char line[PATH_MAX + 256];
    const char *dir = getenv("CAIRN_POWERCUT_DIR");
    char e[24];
    u64_to_dec(e, (uint64_t)err);
    if (join(line, sizeof line, "powercut shim: ", what, " ") != 0)
        return;
    size_t n = strlen(line);
    if (join(line + n, sizeof line - n, path, ": errno ", e) != 0)
        return;
    n = strlen(line);
    line[n++] = '\n';
    write_all(2, line, n);
    char log[PATH_MAX];
    if (dir && join(log, sizeof log, dir, "/shim-errors", NULL) == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd >= 0) {
            write_all(fd, line, n);
            close(fd);
        }
    }
}

/* If `path` is data.mdb, synced or journal in $CAIRN_POWERCUT_STORE, returns its basename (pointing
 * into path), else NULL. */
static const char *store_file(const char *path)
{
    const char *store = getenv("CAIRN_POWERCUT_STORE");
    if (!store || !*store || !getenv("CAIRN_POWERCUT_DIR"))
        return NULL;
    const char *slash = strrchr(path, '/');
    if (!slash)
        return NULL;
    const char *base = slash + 1;
    if (strcmp(base, "data.mdb") != 0 && strcmp(base, "synced") != 0 &&
        strcmp(base, "journal") != 0)
        return NULL;
    size_t dl = (size_t)(slash - path), sl = strlen(store);
    while (sl > 1 && store[sl - 1] == '/')
        sl--;
    if (dl == sl && memcmp(path, store, dl) == 0)
        return base;
    /* the variable may name the directory another way (a symlink, a relative path) */
    char real[PATH_MAX], dir[PATH_MAX];
    if (dl >= sizeof dir || !realpath(store, real))
        return NULL;
    memcpy(dir, path, dl);
    dir[dl] = 0;
    return strcmp(dir, real) == 0 ? base : NULL;
}

/* The file behind descriptor fd, if it is one of the store's; path filled in. */
static const char *fd_store_file(int fd, char *path, size_t cap)
{
    char link[64] = "/proc/self/fd/";
    u64_to_dec(link + strlen(link), (uint64_t)fd);
    ssize_t n = readlink(link, path, cap - 1);
    if (n <= 0 || (size_t)n >= cap - 1)
        return NULL;
    path[n] = 0;
    return store_file(path);
}

static int all_zero(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* Copies src's data ranges [0, size) into dst (which is `size` long and all zero). */
static int copy_data(int src, int dst, off_t size)
{
    char buf[16384];
    off_t off = 0;
    while (off < size) {
        off_t d = lseek(src, off, SEEK_DATA), h;
        if (d < 0 && errno == ENXIO)
            return 0; /* no data past off */
        if (d < 0) {
            if (errno != EINVAL && errno != EOPNOTSUPP)
                return -1;
            d = off, h = size; /* no SEEK_DATA here: copy everything */
        } else if ((h = lseek(src, d, SEEK_HOLE)) < 0) {
            return -1;
        }
        if (h > size)
            h = size;
        for (off = d; off < h;) {
            size_t want = (size_t)(h - off) < sizeof buf ? (size_t)(h - off) : sizeof buf;
            ssize_t r = pread(src, buf, want, off);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0)
                return -1;
            if (r == 0)
                return 0; /* shrank meanwhile: the rest stays zero */
            if (all_zero(buf, (size_t)r)) {
                off += r; /* dst is zero there already: leave it a hole */
                continue;
            }
            for (ssize_t done = 0; done < r;) {
                ssize_t w = real_pwrite64(dst, buf + done, (size_t)(r - done), off + done);
                if (w < 0 && errno == EINTR)
                    continue;
                if (w <= 0)
                    return -1;
                done += w;
            }
            off += r;
        }
    }
    return 0;
}

/* Records that the disk now holds `path` (base: its basename) as it is: copies it to
 * $CAIRN_POWERCUT_DIR/<base>.disk under the directory's lock. 0, or -1 with errno set (the
 * failure already reported). */
static int snapshot(const char *path, const char *base)
{
    const char *dir = getenv("CAIRN_POWERCUT_DIR");
    char lockp[PATH_MAX], dst[PATH_MAX], tmp[PATH_MAX], id[48];
    if (join(lockp, sizeof lockp, dir, "/lock", NULL) || join(dst, sizeof dst, dir, "/", base) ||
        strlen(dst) + 6 > sizeof dst) {
        report("path too long for", path, ENAMETOOLONG);
        errno = EIO;
        return -1;
    }
    memcpy(dst + strlen(dst), ".disk", 6);
    /* a temporary name of this thread's own: another thread of the process may flush at once */
    u64_to_dec(id, (uint64_t)getpid());
    size_t il = strlen(id);
    id[il++] = '.';
    u64_to_dec(id + il, (uint64_t)syscall(SYS_gettid));
    if (join(tmp, sizeof tmp, dst, ".tmp.", id)) {
        report("path too long for", path, ENAMETOOLONG);
        errno = EIO;
        return -1;
    }
    int lk = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lk < 0) {
        int e = errno;
        report("cannot open the lock", lockp, e);
        errno = EIO;
        return -1;
    }
    while (flock(lk, LOCK_EX) != 0) {
        if (errno != EINTR) {
            int e = errno;
            report("cannot lock", lockp, e);
            close(lk);
            errno = EIO;
            return -1;
        }
    }
    int rc = -1, e = 0;
    const char *what = "cannot read";
    int src = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (src >= 0 && fstat(src, &st) == 0) {
        what = "cannot write the copy of";
        int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (out >= 0) {
            if (ftruncate(out, st.st_size) == 0 && copy_data(src, out, st.st_size) == 0) {
                what = "cannot rename the copy of";
                if (close(out) == 0 && rename(tmp, dst) == 0)
                    rc = 0;
                else
                    e = errno;
            } else {
                e = errno;
                close(out);
            }
            if (rc != 0)
                unlink(tmp);
        } else {
            e = errno;
        }
    } else {
        e = errno;
    }
    if (src >= 0)
        close(src);
    close(lk); /* releases the lock */
    if (rc != 0) {
        report(what, path, e);
        errno = EIO;
    }
    return rc;
}

/* After a successful durable operation on fd: snapshot its file if it is the store's. */
static int after_sync(int fd)
{
    char path[PATH_MAX];
    const char *base = fd_store_file(fd, path, sizeof path);
    return base ? snapshot(path, base) : 0;
}

/* A write on a descriptor opened O_DSYNC or O_SYNC is durable when it returns. */
static int is_dsync(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && (fl & (O_DSYNC | O_SYNC)) != 0;
}

/* ------------------------------------------------------------------ the wrappers */

/* The project builds with hidden visibility; these must be seen to interpose libc's. */
#define SHIM_EXPORT __attribute__((visibility("default")))

/* fdatasync or fsync (*real, once resolved), then the record of what it made durable. */
static int sync_and_record(const sync_fn *real, int fd)
{
    resolve();
    if (!*real) {
        errno = ENOSYS;
        return -1;
    }
    int rc = (*real)(fd);
    if (rc != 0)
        return rc;
    int saved = errno;
    if (after_sync(fd) != 0)
        return -1;
    errno = saved;
    return 0;
}

SHIM_EXPORT int fdatasync(int fd) { return sync_and_record(&real_fdatasync, fd); }

SHIM_EXPORT int fsync(int fd) { return sync_and_record(&real_fsync, fd); }

/* The file that maps `addr`, from /proc/self/maps, into path; 0 if found. Lines look like
 * "7f0c2a000000-7f0c2a400000 r--s 00000000 fd:01 1234     /path/to/file". */
static int mapped_file(const void *addr, char *path, size_t cap)
{
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char buf[PATH_MAX + 512];
    size_t have = 0;
    int found = -1, eof = 0;
    uintptr_t a = (uintptr_t)addr;
    while (found < 0) {
        if (!eof && have < sizeof buf - 1) {
            ssize_t r = read(fd, buf + have, sizeof buf - 1 - have);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                eof = 1;
            else
                have += (size_t)r;
        }
        buf[have] = 0;
        char *nl = strchr(buf, '\n');
        if (!nl) {
            if (eof || have == sizeof buf - 1)
                break; /* the end, or a line longer than any path: give up */
            continue;
        }
        *nl = 0;
        char *end;
        uintptr_t lo = (uintptr_t)strtoull(buf, &end, 16), hi = 0;
        if (*end == '-')
            hi = (uintptr_t)strtoull(end + 1, &end, 16);
        if (a >= lo && a < hi) {
            char *p = strchr(end, '/');
            size_t n = p ? strlen(p) : 0;
            if (p && n < cap) {
                memcpy(path, p, n + 1);
                found = 0;
            } else {
                break;
            }
        }
        size_t used = (size_t)(nl + 1 - buf);
        memmove(buf, nl + 1, have - used);
        have -= used;
    }
    close(fd);
    return found;
}

SHIM_EXPORT int msync(void *addr, size_t len, int flags)
{
    resolve();
    if (!real_msync) {
        errno = ENOSYS;
        return -1;
    }
    int rc = real_msync(addr, len, flags);
    if (rc != 0 || !(flags & MS_SYNC))
        return rc; /* MS_ASYNC only schedules the write-back: nothing is durable yet */
    int saved = errno;
    char path[PATH_MAX];
    const char *base = mapped_file(addr, path, sizeof path) == 0 ? store_file(path) : NULL;
    if (base && snapshot(path, base) != 0)
        return -1;
    errno = saved;
    return 0;
}

/* After a successful write on fd: if the descriptor writes through, the disk holds it now. */
static ssize_t after_write(int fd, ssize_t rc)
{
    if (rc <= 0)
        return rc;
    int saved = errno;
    if (is_dsync(fd) && after_sync(fd) != 0)
        return -1; /* EIO: what reached the disk is unknown, as after a failed O_DSYNC write */
    errno = saved;
    return rc;
}

SHIM_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
    resolve();
    if (!real_write) {
        errno = ENOSYS;
        return -1;
    }
    return after_write(fd, real_write(fd, buf, n));
}

SHIM_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    resolve();
    if (!real_writev) {
        errno = ENOSYS;
        return -1;
    }
    return after_write(fd, real_writev(fd, iov, cnt));
}

SHIM_EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    resolve();
    if (!real_pwrite) {
        errno = ENOSYS;
        return -1;
    }
    return after_write(fd, real_pwrite(fd, buf, n, off));
}

SHIM_EXPORT ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off)
{
    resolve();
    if (!real_pwrite64) {
        errno = ENOSYS;
        return -1;
    }
    return after_write(fd, real_pwrite64(fd, buf, n, off));
}
