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
