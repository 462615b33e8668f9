/* steps/bm25_impl.h - what the BM25 index's files share (internal to steps/): the handle, the
 * write batch's buffers, the block codec and the LMDB helpers. bm25.c opens and closes an index,
 * bm25_write.c fills it in batches, bm25_merge.c writes them in, bm25_search.c answers queries;
 * nothing else includes this
 * but tests/retrieve/test_bm25_build.c (the codec's edges, the tables' blocks).
 *
 * Layout (one LMDB environment, seven named databases; format 3):
 *   post  term \0 be32(last docno) -> a compact block of the term's postings in docno order,
 *         BLOCK_POSTINGS of them but where the list ends or deletions thinned it (see the codec
 *         below); the key is the block's last docno, so seeking term \0 be32(d) lands on the
 *         block holding d, and a whole block is one LMDB read
 *   lens  be32(chunk) -> LENS_CHUNK u32 document lengths, of docnos chunk*LENS_CHUNK.. (0 for
 *         a number never given out): every document's length stored once, read into a dense
 *         array at the first query after each commit (meta "generation" says which)
 *   df    term -> u32 number of documents holding it
 *   blocks term -> {u32 max_tf, u32 min_dl, u32 n, n * {u32 last_docno, u32 max_tf, u32 min_dl}}
 *         each block's last docno and the largest tf and smallest dl in it (the whole list's
 *         first), from which the pruned search bounds any score the block can give
 *   docs  be32(docno) -> {u32 id_len, u32 text_len, u32 extra_len, id, text, extra}
 *   ids   doc id -> u32 docno
 *   meta  "format", "tokenizer", "n_docs", "total_len", "next_docno", "generation", and
 *         "unfinished" while a batch too large for one transaction is being written
 *
 * A block: {u8 n-1, u8 bd, u8 bt, u32 first docno (little-endian)} then, bit-packed LSB first,
 * the n-1 gaps minus 1 in bd bits each and the n tfs minus 1 in bt bits each, bd and bt the
 * widths of the block's largest value (0..32: a gap of 2^32-1 or a tf of 2^32-1 still fits).
 * On the benchmark corpus that is about 0.8 bytes a posting, against 12 in format 2.
 */
#ifndef CAIRN_STEPS_BM25_IMPL_H
#define CAIRN_STEPS_BM25_IMPL_H

#include <lmdb.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "steps/bm25.h"

/* 3: compact blocks and the lens table. An index of an older format (1: a key per posting;
 * 2: raw {docno, tf, dl} blocks) is refused at open: rebuild it. */
#define FORMAT_VERSION 3u
/* Postings per block of the bounds table: small enough that a block's bound stays close to
 * its documents' scores, large enough that the table is ~0.1 byte a posting. */
#define BLOCK_POSTINGS 128u
/* Below this many postings in a query's terms the exhaustive path is as fast (measured with
 * bench-retrieve: the pruned one lost on queries under ~1k postings). */
#define PRUNE_MIN_POSTINGS (8u * BLOCK_POSTINGS)
/* Postings buffered before a batch writes them out (12 bytes each; a replaced document's old
 * postings are buffered too, as deletes: tf 0). */
#define FLUSH_POSTINGS (4u << 20)
/* Document lengths per lens record: 4064 bytes, one overflow page of 4 KB with its header. */
#define LENS_CHUNK 1016u
/* The largest encoded block: the header and two full 32-bit lanes. */
#define BLOCK_MAX_BYTES (7u + 8u * BLOCK_POSTINGS)

typedef struct term_ent {
    uint32_t off, len; /* in the pool */
    uint32_t hash;
    int32_t delta;     /* df change in this batch */
    uint32_t doc_mark; /* the document being tokenized when doc_tf was last reset */
    uint32_t doc_tf;
} term_ent;

typedef struct posting {
    uint32_t term, docno, tf;
} posting;

/* One change to a term's list in a write's final merge: tf 0 deletes the stored posting of
 * docno; seq orders changes to one docno (runs in the order written, then the buffer). */
typedef struct post_op {
    uint32_t docno, tf, seq;
} post_op;

struct cairn__bm25 {
    MDB_env *env;
    MDB_dbi meta, post, df, docs, ids, blocks, lens;
    int writable;
    int unfinished; /* meta "unfinished" was set when the handle opened */
    char dir[4096];
    char err[1024];

    /* searching */
    MDB_txn *rtxn; /* reset between searches, renewed for the next one */
    double *score;
    uint32_t *stamp, cur_stamp, *touched;
    size_t score_cap, n_touched;
    uint64_t postings_read; /* by the last search: what pruning saved */
    int exhaustive;         /* CAIRN_BM25_EXHAUSTIVE=1 at open: search scores everything */
    uint32_t *dl;           /* document lengths by docno (the lens table, or the batch's) */
    size_t n_dl, dl_cap;
    uint64_t dl_gen;   /* the generation ix->dl was read at; UINT64_MAX: not read */
    uint8_t *dl_dirty; /* bit per lens chunk changed by the open batch */
    size_t dl_dirty_cap;
    uint64_t prune_min; /* queries holding fewer postings are scored exhaustively */

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
    size_t flush_at; /* postings buffered before a run file */
    size_t mem_cap;  /* the batch's memory cap (cairn__bm25_set_memory) */
    size_t mem_peak; /* the largest estimate seen, for tests and `cairn index` */
    uint32_t *blk;   /* a term's bounds table being built */
    size_t blk_cap;
    uint32_t *merge; /* a term's postings being merged, {docno, tf} each */
    size_t merge_cap;
    uint32_t *dels; /* the last docnos of the blocks a merge replaces */
    size_t dels_cap;
    post_op *ops; /* a term's changes gathered from the runs and the buffer */
    size_t ops_cap;
    void *runs_v; /* FILE *[n_runs]: sorted runs a batch wrote out, merged at commit */
    size_t n_runs, runs_cap;
    uint64_t dirty;     /* bytes put since the transaction began (an estimate of its pages) */
    unsigned n_commits; /* transactions the open batch committed before its last */
    uint64_t generation;
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

/* Encodes n (1..BLOCK_POSTINGS) postings, docnos ascending, into out (BLOCK_MAX_BYTES);
 * returns the bytes used. */
size_t cairn__bm25_block_encode(const uint32_t *docno, const uint32_t *tf, uint32_t n,
                                unsigned char *out);
static inline uint64_t le64(const unsigned char *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 |
           (uint64_t)p[7] << 56;
}

/* A block's packed bits, copied with padding, so tfs can be read one at a time: the pruned
 * search needs only the few its candidates hold. */
typedef struct block_view {
    unsigned char buf[BLOCK_MAX_BYTES + 8];
    uint64_t tf_pos, tf_mask; /* the first tf's bit; its width's mask */
    unsigned bt;
} block_view;

/* The tf of posting i of a block decoded by cairn__bm25_block_docnos. */
static inline uint32_t block_tf(const block_view *bv, uint32_t i)
{
    uint64_t pos = bv->tf_pos + (uint64_t)i * bv->bt;
    return (uint32_t)((le64(bv->buf + (pos >> 3)) >> (pos & 7)) & bv->tf_mask) + 1;
}

/* Decodes a block's docnos into docno[] (BLOCK_POSTINGS) and keeps its tfs packed in *bv;
 * returns n, or 0 when the bytes are not a well-formed block. */
uint32_t cairn__bm25_block_docnos(const void *v, size_t len, uint32_t *docno, block_view *bv);
/* Decodes a block into docno[] and tf[] (BLOCK_POSTINGS each); returns n, or 0 when the bytes
 * are not a well-formed block. */
uint32_t cairn__bm25_block_decode(const void *v, size_t len, uint32_t *docno, uint32_t *tf);
/* The postings in an encoded block, from its first byte (0 if empty). */
static inline uint32_t block_count(const void *v, size_t len)
{
    return len >= 7 ? (uint32_t)((const unsigned char *)v)[0] + 1 : 0;
}
/* Reads the lens table into ix->dl if the generation txn holds is not the one read. Not while
 * the handle's batch is open (its lengths are ahead of the table's): a search then uses them
 * as they are, and begin reads them at the batch's start. */
int cairn__bm25_load_dl(cairn__bm25 *ix, MDB_txn *txn);

/* The message and code (CAIRN_ETRANSIENT) for an index marked unfinished. */
int cairn__bm25_unfinished_msg(const char *dir, char *err, size_t errlen);

/* Sets the handle's message; returns code. */
int cairn__bm25_fail(cairn__bm25 *ix, int code, const char *fmt, ...) CAIRN_PRINTF(3, 4);
/* Translates an LMDB code at the boundary, keeping LMDB's text in the message. */
int cairn__bm25_mdb_fail(cairn__bm25 *ix, int rc, const char *what);
/* A u64 of the meta table; LMDB codes (MDB_CORRUPTED when it is not 8 bytes). */
int cairn__bm25_meta_get(MDB_txn *txn, MDB_dbi dbi, const char *key, uint64_t *v);
int cairn__bm25_meta_put(MDB_txn *txn, MDB_dbi dbi, const char *key, uint64_t v);
/* Grows *p (of *cap elements of elem bytes) to hold need, doubling; 0 or -1 (out of memory). */
int cairn__bm25_grow(void **p, size_t *cap, size_t need, size_t elem);
/* bm25_merge.c, for bm25_write.c: the buffer sorted into a new run file (and emptied); the
 * runs and the buffer merged into the index; a transaction's lens chunks, counts and new
 * generation; the index map's pages given back; the batch's transaction committed and a new one
 * begun once it holds a quarter of the memory cap (*cur, if not NULL: a cursor on post,
 * reopened); the run files closed. 0 or a CAIRN_E* code with the handle's message set. */
int cairn__bm25_write_run(cairn__bm25 *ix);
int cairn__bm25_final_merge(cairn__bm25 *ix);
int cairn__bm25_write_tail(cairn__bm25 *ix);
void cairn__bm25_drop_map(cairn__bm25 *ix);
int cairn__bm25_maybe_split(cairn__bm25 *ix, MDB_cursor **cur);
void cairn__bm25_runs_close(cairn__bm25 *ix);
/* Empties the write batch's buffers, keeping their memory (bm25_write.c). */
void cairn__bm25_batch_reset(cairn__bm25 *ix);

#endif
