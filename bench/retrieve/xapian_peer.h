/* bench/retrieve/xapian_peer.h - Xapian as bench-retrieve's peer, behind a small C interface
 * (xapian_peer.cc is the only C++ in the bench; it is built only where xapian-core is found,
 * and then HAVE_XAPIAN is defined for bench_retrieve.c).
 *
 * The bench feeds Xapian the terms cairn's tokenizer produced, with their counts as wdf, so
 * both engines index the same tokens and Xapian's document length (the sum of wdf) is cairn's
 * dl. Every call catches Xapian's exceptions and returns -1 with the message in err.
 */
#ifndef CAIRN_BENCH_RETRIEVE_XAPIAN_PEER_H
#define CAIRN_BENCH_RETRIEVE_XAPIAN_PEER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct xpeer xpeer;

/* A new database at dir (overwriting one there), for xpeer_add; NULL on failure. */
xpeer *xpeer_create(const char *dir, char *err, size_t errlen);
/* Adds one document: n terms (not NUL-terminated: term[i] of len[i] bytes) with their counts;
 * data (dlen bytes) is stored and returned by searches. */
int xpeer_add(xpeer *x, const char *const *term, const size_t *len, const uint32_t *wdf, size_t n,
              const char *data, size_t dlen, char *err, size_t errlen);
/* Commits and closes the writable database. */
int xpeer_commit(xpeer *x, char *err, size_t errlen);
/* Writes a compacted copy of the database at src into dst (Xapian::Database::compact). */
int xpeer_compact(const char *src, const char *dst, char *err, size_t errlen);
/* Opens a database for searching, with BM25Weight(k1, 0, 1, b, 0) (see bench_retrieve.c for
 * how its formula compares with cairn's); NULL on failure. */
xpeer *xpeer_open(const char *dir, double k1, double b, char *err, size_t errlen);

typedef struct xpeer_hit {
    uint32_t docid; /* Xapian's, from 1 in the order added */
    double score;
    const char *data; /* valid until the next search on this handle */
    size_t dlen;
} xpeer_hit;

/* Top k of the OR of the n unique query terms; *n_hits <= k. */
int xpeer_search(xpeer *x, const char *const *term, const size_t *len, size_t n, size_t k,
                 xpeer_hit *hits, size_t *n_hits, char *err, size_t errlen);
void xpeer_free(xpeer *x);

#ifdef __cplusplus
}
#endif

#endif
