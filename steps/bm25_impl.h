/* steps/bm25_impl.h - what the BM25 index's files share (internal to steps/): the handle, the
 * write batch's buffers, and the LMDB helpers. bm25.c opens and closes an index, bm25_write.c
 * fills it in batches, bm25_search.c answers queries; nothing else includes this.
 *
 * Layout (one LMDB environment, six named databases):
 *   post  term \0 be32(last docno) -> {u32 n, n * {u32 docno, u32 tf, u32 dl}}
 *         a block of the term's postings in docno order, BLOCK_POSTINGS of them but where the
 *         list ends or deletions thinned it; the key is the block's last docno, so seeking
 *         term \0 be32(d) lands on the block holding d. dl rides along so scoring a posting
 *         needs no second lookup, and a whole block is one LMDB read
 *   df    term -> u32 number of documents holding it
 *   blocks term -> {u32 max_tf, u32 min_dl, u32 n, n * {u32 last_docno, u32 max_tf, u32 min_dl}}
 *         the term's postings cut in docno order into blocks of BLOCK_POSTINGS: each block's
 *         last docno and the largest tf and smallest dl in it (the whole list's first), from
 *         which the pruned search bounds any score the block can give (format 2)
 *   docs  be32(docno) -> {u32 dl, u32 id_len, u32 text_len, u32 extra_len, id, text, extra}
 *   ids   doc id -> u32 docno
 *   meta  "format", "tokenizer", "n_docs", "total_len", "next_docno"
 */
#ifndef CAIRN_STEPS_BM25_IMPL_H
#define CAIRN_STEPS_BM25_IMPL_H

#include <lmdb.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "steps/bm25.h"

/* 2: postings in blocks, and the blocks table. A format-1 index (a key per posting, no
 * bounds) is refused at open: rebuild it. */
#define FORMAT_VERSION 2u
/* Postings per block of the bounds table: small enough that a block's bound stays close to
 * its documents' scores, large enough that the table is ~0.1 byte a posting. */
#define BLOCK_POSTINGS 128u
/* Below this many postings in a query's terms the exhaustive path is as fast (measured with
 * bench-retrieve: the pruned one lost on queries under ~1k postings). */
#define PRUNE_MIN_POSTINGS (8u * BLOCK_POSTINGS)
/* Postings buffered before a batch writes them out (16 bytes each; a replaced document's old
 * postings are buffered too, as deletes: tf 0). */
#define FLUSH_POSTINGS (4u << 20)

typedef struct term_ent {
    uint32_t off, len; /* in the pool */
    uint32_t hash;
    int32_t delta;     /* df change in this batch */
    uint32_t doc_mark; /* the document being tokenized when doc_tf was last reset */
    uint32_t doc_tf;
} term_ent;

typedef struct posting {
    uint32_t term, docno, tf, dl;
} posting;

struct cairn__bm25 {
    MDB_env *env;
    MDB_dbi meta, post, df, docs, ids, blocks;
    int writable;
    char dir[4096];
    char err[1024];

    /* searching */
    MDB_txn *rtxn; /* reset between searches, renewed for the next one */
    double *score;
    uint32_t *stamp, cur_stamp, *touched;
    size_t score_cap, n_touched;
    uint64_t postings_read; /* by the last search: what pruning saved */
    int exhaustive;         /* CAIRN_BM25_EXHAUSTIVE=1 at open: search scores everything */
    uint64_t prune_min;     /* queries holding fewer postings are scored exhaustively */

    /* writing */
    MDB_txn *wtxn;
    int poisoned;
    uint64_t n_docs, total_len;
    uint32_t next_docno;
    char *pool;
    size_t pool_n, pool_cap;
    term_ent *terms;
    size_t n_terms, terms_cap;
    uint32_t *slots; /* open addressing: term index + 1, 0 = empty */
    size_t slot_cap;
    posting *posts;
    size_t n_posts, posts_cap;
    uint8_t *pending; /* bit per docno: has postings in the buffer */
    size_t pending_cap;
    uint32_t *doc_terms; /* terms of the document being added */
    size_t n_doc_terms, doc_terms_cap;
    uint32_t doc_mark;
    size_t flush_at; /* postings buffered before a flush */
    size_t mem_cap;  /* bytes the buffers may hold before a flush (cairn__bm25_set_memory) */
    size_t mem_peak; /* the largest estimate seen, for tests and `cairn index` */
    uint32_t *blk;   /* a term's bounds table being built */
    size_t blk_cap;
    uint32_t *merge; /* a term's postings being merged, {docno, tf, dl} each */
    size_t merge_cap;
    uint32_t *dels; /* the last docnos of the blocks a merge replaces */
    size_t dels_cap;
};

/* Big-endian docnos in keys, so LMDB's byte order is docno order. */
static inline void be32(uint32_t v, unsigned char *o)
{
    o[0] = (unsigned char)(v >> 24), o[1] = (unsigned char)(v >> 16);
    o[2] = (unsigned char)(v >> 8), o[3] = (unsigned char)v;
}

/* A native u32 from a possibly unaligned LMDB value. */
static inline uint32_t get32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Sets the handle's message; returns code. */
int cairn__bm25_fail(cairn__bm25 *ix, int code, const char *fmt, ...) CAIRN_PRINTF(3, 4);
/* Translates an LMDB code at the boundary, keeping LMDB's text in the message. */
int cairn__bm25_mdb_fail(cairn__bm25 *ix, int rc, const char *what);
/* A u64 of the meta table; LMDB codes (MDB_CORRUPTED when it is not 8 bytes). */
int cairn__bm25_meta_get(MDB_txn *txn, MDB_dbi dbi, const char *key, uint64_t *v);
int cairn__bm25_meta_put(MDB_txn *txn, MDB_dbi dbi, const char *key, uint64_t v);
/* Grows *p (of *cap elements of elem bytes) to hold need, doubling; 0 or -1 (out of memory). */
int cairn__bm25_grow(void **p, size_t *cap, size_t need, size_t elem);
/* Empties the write batch's buffers, keeping their memory (bm25_write.c). */
void cairn__bm25_batch_reset(cairn__bm25 *ix);

#endif
