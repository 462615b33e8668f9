/* cairn_errors.h - the one error table. Self-contained: cairn.h includes it, and gpu/ (which
 * knows nothing of tasks or msgpack) includes only this header.
 *
 * Every fallible cairn call returns 0 or one of these negative codes. The X-macro
 * produces the enum, cairn_strerror() and cairn_errname(). Codes are only ever
 * appended: a code's number never changes once released.
 *
 *   X(NAME, number, "message")
 */
#ifndef CAIRN_ERRORS_H
#define CAIRN_ERRORS_H

#define CAIRN_ERROR_TABLE(X)                                                                       \
    X(EINVAL, -1, "invalid argument")                                                              \
    X(ENOMEM, -2, "out of memory")                                                                 \
    X(EIO, -3, "store I/O error")                                                                  \
    X(ENOTFOUND, -4, "not found")                                                                  \
    X(EJSON, -5, "malformed JSON input")                                                           \
    X(ETASKID, -6, "invalid task ID")                                                              \
    X(ECONFLICT, -7, "idempotency conflict: same task ID, different payload")                      \
    X(EBUSY, -8, "task is running in another process")                                             \
    X(ETENANT, -9, "tenant running-task limit reached")                                            \
    X(EGRAPH, -10, "invalid graph definition")                                                     \
    X(EGRAPHCHANGED, -11, "graph changed since the task started")                                  \
    X(ESTATE, -12, "illegal task state transition")                                                \
    X(ESCHEMA, -13, "store written by a newer schema")                                             \
    X(EFULL, -14, "store full (map limit or disk full)")                                           \
    X(ETRANSIENT, -15, "step failed transiently; retry later")                                     \
    X(EDEAD, -16, "task is dead")                                                                  \
    X(EINDOUBT, -17, "task is in doubt: an effect may or may not have happened")                   \
    X(ETIMEOUT, -18, "step timed out")                                                             \
    X(EINTR, -19, "interrupted by a signal")                                                       \
    X(ETOOBIG, -20, "input too large")                                                             \
    X(ENOENT, -21, "file not found")                                                               \
    X(EFORMAT, -22, "malformed file")                                                              \
    X(EUNSUPPORTED, -23, "unsupported feature")                                                    \
    X(ECUDA, -24, "CUDA error")                                                                    \
    X(ECONTEXT, -25, "prompt longer than the context")                                             \
    X(ECORRUPT, -26, "corrupt store record")                                                       \
    X(ENOGRAPH, -27, "no such graph")                                                              \
    X(EPERMANENT, -28, "step failed permanently")                                                  \
    X(EMSGSEEN, -29, "message already consumed")                                                   \
    X(ENODEVICE, -30, "no GPU device available")

enum cairn_error {
    CAIRN_OK = 0,
#define CAIRN__X(name, value, text) CAIRN_##name = value,
    CAIRN_ERROR_TABLE(CAIRN__X)
#undef CAIRN__X
        CAIRN__ERROR_LAST_PLUS_ONE_ /* not a code; keeps the enum list well-formed */
};

#endif
