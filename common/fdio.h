/* common/fdio.h - whole reads and writes on a pipe or file descriptor, past EINTR and short
 * transfers: what the runner's step children and consume's workers speak over their pipes.
 *
 * Internal to libcairn (hidden `cairn__` symbols).
 */
#ifndef CAIRN_COMMON_FDIO_H
#define CAIRN_COMMON_FDIO_H

#include <stddef.h>
#include <sys/uio.h>

/* Writes all n bytes: 0, or -1 (errno set; a write of 0 bytes counts as an error). */
int cairn__write_all(int fd, const void *p, size_t n);

/* Writes all the bytes of iov[0..n) in order, in as few system calls as the descriptor takes:
 * 0, or -1 (errno set). iov is changed. */
int cairn__writev_all(int fd, struct iovec *iov, int n);

/* Reads exactly n bytes: 1, or 0 at the end of input before any byte, or -1 on an error or an
 * end in the middle. */
int cairn__read_all(int fd, void *p, size_t n);

#endif
