/* common/fdio.c - whole reads and writes on a descriptor (see fdio.h). */
#include "common/fdio.h"

#include <errno.h>
#include <sys/types.h>
#include <unistd.h>

int cairn__write_all(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        b += w, n -= (size_t)w;
    }
    return 0;
}

int cairn__writev_all(int fd, struct iovec *iov, int n)
{
    while (n > 0 && iov->iov_len == 0)
        iov++, n--;
    while (n > 0) {
        ssize_t w = writev(fd, iov, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        for (size_t left = (size_t)w; n > 0 && (left || iov->iov_len == 0);) {
            size_t m = left < iov->iov_len ? left : iov->iov_len;
            iov->iov_base = (char *)iov->iov_base + m;
            iov->iov_len -= m;
            left -= m;
            if (iov->iov_len == 0)
                iov++, n--;
        }
    }
    return 0;
}

int cairn__read_all(int fd, void *p, size_t n)
{
    char *b = p;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, b + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r == 0 && got == 0 ? 0 : -1;
        got += (size_t)r;
    }
    return 1;
}
