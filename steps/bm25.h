/* steps/bm25.h - a BM25 full-text index in its own LMDB environment (owned by the retrieve
 * step; read-only while tasks run).
 *
 * The index lives in a directory of its own (by convention <store>/index/, next to the
 * checkpoint store's data.mdb, never inside it). Writers are `cairn index` (one process at a
 * time: LMDB serializes write transactions); readers (the retrieve step, `cairn search`) see a
 * consistent snapshot per query, so an index rebuilt while pipelines run is picked up by the
 * next query without a restart.
 *
 * Not thread-safe: one handle is used by one thread at a time (the retrieve step serializes
 * its calls). Every fallible call returns 0 or a negative CAIRN_E* code; cairn__bm25_errmsg()
 * then says what failed, naming the index path and, for LMDB errors, LMDB's own text.
 */
#ifndef CAIRN_STEPS_BM25_H
#define CAIRN_STEPS_BM25_H

#include <stddef.h>
#include <stdint.h>

#include "cairn.h"

#define CAIRN__BM25_K1 1.2
#define CAIRN__BM25_B 0.75

/* Longest token in bytes: a longer word is cut at the last whole character that fits (URLs and
 * base64 blobs would otherwise make keys beyond LMDB's 511-byte limit). */
#define CAIRN__BM25_MAX_TOKEN 128
/* Longest document ID in bytes (it is an LMDB key). */
#define CAIRN__BM25_MAX_ID 480

typedef struct cairn__bm25 cairn__bm25;

/* Opens the index at `dir`. writable: creates `dir` (and missing parents, mode 0700) and the
 * environment if needed. Read-only: the index must exist. *out is NULL on failure. Returns
 *   CAIRN_ENOENT   read-only and there is no index at dir (err says to run `cairn index`)
 *   CAIRN_ESCHEMA  the index was written in another format/tokenizer version (rebuild it)
 *   CAIRN_EIO      cannot create or open (err has the path and the OS/LMDB text)
 *   CAIRN_ENOMEM */
int cairn__bm25_open(const char *dir, int writable, cairn__bm25 **out, char *err, size_t errlen);
/* Whether the index was marked unfinished when the (writable) handle opened: a batch too large
 * for one transaction was cut short (a crash, a full disk) and left part of itself committed.
 * A read-only open of such an index fails with CAIRN_ETRANSIENT; `cairn index` rebuilds it
 * (cairn__bm25_clear, then the corpus). */
int cairn__bm25_is_unfinished(const cairn__bm25 *ix);
/* Empties the index (every document, posting and count) in one transaction, and clears the
 * unfinished mark. A writable handle without an open batch; CAIRN_EINVAL otherwise. */
int cairn__bm25_clear(cairn__bm25 *ix);
/* Test hook: called after each transaction a batch commits before its last one (n counts
 * them from 1), in whatever process writes; NULL removes it. For crash tests (SIGKILL there). */
void cairn__bm25_set_commit_hook(void (*fn)(unsigned n));
/* Closes the handle (aborting an open write batch). NULL is a no-op. */
void cairn__bm25_close(cairn__bm25 *ix);

/* The version of cairn__bm25_tokenize's output, recorded in every index. Bump it whenever the
 * tokens change: replacing a document re-tokenizes its stored text to find the old postings,
 * so an index must be rebuilt when the tokenizer changes (opening it then says so). */
#define CAIRN__BM25_TOKENIZER_VERSION 1u

/* Tokenizes UTF-8 text, the same way for documents and queries: fullwidth ASCII (U+FF01..FF5E)
 * folded to ASCII; lower-cased (ASCII, Latin-1, Latin Extended-A/B and Additional, Greek with
 * final sigma folded to sigma, Cyrillic, Armenian); split on whitespace, ASCII/Latin-1/general
 * Unicode punctuation, symbols, CJK punctuation (U+3000..303F), fullwidth punctuation and
 * control characters; runs of CJK characters (Han incl. extension A..G and compatibility,
 * Hiragana, Katakana, Hangul syllables) become overlapping bigrams, a lone CJK character
 * itself. Invalid UTF-8 bytes separate tokens. Calls cb for each token (bytes, length; not
 * NUL-terminated, valid during the call); cb may be NULL. Returns the token count.
 * Defined in steps/textsplit.c. */
typedef void (*cairn__bm25_token_cb)(const char *tok, size_t len, void *arg);
size_t cairn__bm25_tokenize(const char *text, size_t len, cairn__bm25_token_cb cb, void *arg);

/* Adds or replaces documents in a batch: begin, add..., commit (or abort). Readers see all of
 * a batch or none of it, when it fits in one transaction (cairn__bm25_set_memory); a larger one
 * is marked unfinished until it commits. A writable handle only; CAIRN_EINVAL otherwise or
 * when a batch is already open (begin) / not open (add, commit). */
int cairn__bm25_begin(cairn__bm25 *ix);
/* Indexes one document. `id`: 1..CAIRN__BM25_MAX_ID bytes; `extra_json`: the document's other
 * fields as a JSON object text (kept and returned by searches), or NULL. If a document with
 * this id exists (in the index or earlier in this batch) it is replaced: its old postings are
 * removed, document frequencies and the total length adjusted; it keeps its internal number
 * and N does not change. *replaced (if not NULL) says which. All strings are copied.
 * Returns 0, CAIRN_EINVAL (bad id), CAIRN_EFULL, CAIRN_EIO, CAIRN_ECORRUPT, CAIRN_ENOMEM; after
 * an error the batch can only be aborted. */
int cairn__bm25_add(cairn__bm25 *ix, const char *id, const char *text, size_t text_len,
                    const char *extra_json, int *replaced);
/* Writes the batch's remaining postings, the document frequencies and N/total length, and
 * commits (durably: fsync). CAIRN_EFULL / CAIRN_EIO (the batch is then aborted). */
int cairn__bm25_commit(cairn__bm25 *ix);
/* Test hook: how many postings a batch buffers in memory before writing them to a run file
 * (default 4M, 0 = default). Small values exercise the runs and their merge. */
void cairn__bm25_set_flush_postings(cairn__bm25 *ix, size_t n);
/* Default cap on a write batch's memory (cairn__bm25_set_memory). */
#define CAIRN__BM25_DEFAULT_MEMORY ((size_t)256 << 20)
/* Caps the memory a write batch holds at about `bytes` whatever the corpus size. Its buffers
 * (postings and deletes, the batch's terms, the sorted copy a flush makes) take up to 5/8 of
 * it: past that the buffer is sorted and written to a temporary run file, and commit merges
 * the runs in key order, so the index is the same whatever the cap. LMDB's dirty pages take up
 * to 1/4: past that the batch commits its transaction and goes on in a new one, having marked
 * the index unfinished until its last commit (readers then see CAIRN_ETRANSIENT rather than a
 * part of the batch). 0 = the default, CAIRN__BM25_DEFAULT_MEMORY (256 MB). */
void cairn__bm25_set_memory(cairn__bm25 *ix, size_t bytes);
/* The peak of the batch buffers' estimate (bytes) since the handle opened. */
size_t cairn__bm25_batch_peak(const cairn__bm25 *ix);
/* Drops the open batch, if any: nothing of it is written. */
void cairn__bm25_abort(cairn__bm25 *ix);
/* The message of the last error on this handle ("" if none). */
const char *cairn__bm25_errmsg(const cairn__bm25 *ix);

typedef struct cairn__bm25_hit {
    char *id;    /* malloc'd */
    char *text;  /* malloc'd */
    char *extra; /* malloc'd JSON object text of the document's other fields, or NULL */
    double score;
} cairn__bm25_hit;

/* Top-k documents for a free-text query, best first (ties: lower internal number, i.e. the
 * earlier indexed document, first). Exact: documents are skipped only where stored per-block
 * bounds prove they cannot enter the top k (block-max MaxScore). Over the unique query tokens t
 * (the same tokenizer): score = sum_t idf(t) * tf*(k1+1) / (tf + k1*(1 - b + b*dl/avgdl)), idf(t) =
 * ln(1 + (N - n_t + 0.5)/(n_t + 0.5))   (Lucene/Elasticsearch; never negative) with k1 = 1.2, b =
 * 0.75, tf the token's count in the document, dl the document's token count, avgdl = total tokens /
 * N, n_t the number of documents containing t. Documents that match no query token are not
 * returned. *hits is malloc'd (NULL when *n is 0); free with cairn__bm25_hits_free. Returns 0,
 * CAIRN_EIO, CAIRN_ECORRUPT, CAIRN_ENOMEM. */
int cairn__bm25_search(cairn__bm25 *ix, const char *query, size_t k, cairn__bm25_hit **hits,
                       size_t *n);
/* The same results, bit for bit (ids, order, scores), by scoring every posting of every query
 * term: the reference the pruned search is tested against. cairn__bm25_search takes this path
 * when CAIRN_BM25_EXHAUSTIVE=1 was set at open (benchmarks, and a way to rule pruning out). */
int cairn__bm25_search_exhaustive(cairn__bm25 *ix, const char *query, size_t k,
                                  cairn__bm25_hit **hits, size_t *n);
/* Test hook: queries whose terms hold fewer postings than n are scored exhaustively, where
 * pruning cannot pay (default 1024; 0 = always prune, so tests reach the pruned path with
 * small queries too). */
void cairn__bm25_set_prune_min(cairn__bm25 *ix, uint64_t n);
/* Postings the last search read from the index (the exhaustive path: all of its terms'). */
uint64_t cairn__bm25_postings_read(const cairn__bm25 *ix);
void cairn__bm25_hits_free(cairn__bm25_hit *hits, size_t n);

typedef struct cairn__bm25_info {
    uint64_t n_docs;    /* N */
    uint64_t total_len; /* sum of document lengths in tokens */
    uint64_t n_terms;   /* distinct tokens */
    double avgdl;       /* total_len / N, 0 if empty */
} cairn__bm25_info;

/* Counts of the committed index (a writable handle with an open batch: of the batch so far). */
int cairn__bm25_info_get(cairn__bm25 *ix, cairn__bm25_info *info);
/* Number of documents and average length (tokens). */
int cairn__bm25_stats(cairn__bm25 *ix, uint64_t *n_docs, double *avgdl);

#endif
