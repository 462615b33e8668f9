/* steps/bm25_write.c - filling the BM25 index: batches of added or replaced documents (see
 * bm25_impl.h for the layout; bm25_merge.c writes them into it).
 *
 * Adding documents one at a time would insert postings at random places in the B-tree (each
 * document touches ~100 terms). Instead a batch buffers postings in memory (terms interned in a
 * pool, found through an open-addressing table); when the buffer reaches its share of the
 * memory cap (5/8) it becomes a sorted run file, and commit merges the runs and the buffer once,
 * in key order (bm25_merge.c says why). Document records and ids go in as they come: a new
 * document has the largest docno yet, so its record is appended.
 *
 * A replaced document's old postings are found by re-tokenizing its stored text (the tokenizer
 * version is recorded in meta, so this stays exact) and buffered as deletes; if its postings
 * are still in the buffer, the buffer becomes a run first. Document lengths are kept in a dense
 * array (ix->dl), written out by chunk at each commit.
 */
#include "steps/bm25.h"
#include "steps/bm25_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int oom(cairn__bm25 *ix)
{
    return cairn__bm25_fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir);
}

/* ------------------------------------------------------------------ the write batch */

void cairn__bm25_batch_reset(cairn__bm25 *ix)
{
    ix->pool_n = ix->n_terms = ix->n_posts = ix->n_doc_terms = 0;
    if (ix->slots)
        memset(ix->slots, 0, ix->slot_cap * sizeof *ix->slots);
    if (ix->pending)
        memset(ix->pending, 0, ix->pending_cap);
}

static uint32_t hash_bytes(const char *s, size_t n)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static int rehash(cairn__bm25 *ix, size_t cap)
{
    uint32_t *s = calloc(cap, sizeof *s);
    if (!s)
        return -1;
    for (size_t i = 0; i < ix->n_terms; i++) {
        size_t j = ix->terms[i].hash & (cap - 1);
        while (s[j])
            j = (j + 1) & (cap - 1);
        s[j] = (uint32_t)i + 1;
    }
    free(ix->slots);
    ix->slots = s;
    ix->slot_cap = cap;
    return 0;
}

/* The batch's entry for a term, created if new; -1 on ENOMEM. */
static long intern(cairn__bm25 *ix, const char *tok, size_t len)
{
    if ((ix->n_terms + 1) * 2 > ix->slot_cap && rehash(ix, ix->slot_cap ? ix->slot_cap * 2 : 4096))
        return -1;
    uint32_t h = hash_bytes(tok, len);
    size_t j = h & (ix->slot_cap - 1);
    while (ix->slots[j]) {
        term_ent *e = &ix->terms[ix->slots[j] - 1];
        if (e->hash == h && e->len == len && !memcmp(ix->pool + e->off, tok, len))
            return (long)ix->slots[j] - 1;
        j = (j + 1) & (ix->slot_cap - 1);
    }
    if (cairn__bm25_grow((void **)&ix->pool, &ix->pool_cap, ix->pool_n + len, 1) ||
        cairn__bm25_grow((void **)&ix->terms, &ix->terms_cap, ix->n_terms + 1, sizeof *ix->terms))
        return -1;
    memcpy(ix->pool + ix->pool_n, tok, len);
    ix->terms[ix->n_terms] =
        (term_ent){.off = (uint32_t)ix->pool_n, .len = (uint32_t)len, .hash = h};
    ix->pool_n += len;
    ix->slots[j] = (uint32_t)ix->n_terms + 1;
    return (long)ix->n_terms++;
}

/* Grows the bitset of documents with buffered postings to hold `docno` (new bytes zeroed). */
static int grow_pending(cairn__bm25 *ix, uint32_t docno)
{
    size_t old = ix->pending_cap;
    if (cairn__bm25_grow((void **)&ix->pending, &ix->pending_cap, (size_t)docno / 8 + 1, 1))
        return -1;
    memset(ix->pending + old, 0, ix->pending_cap - old);
    return 0;
}

typedef struct collect {
    cairn__bm25 *ix;
    int oom;
} collect;

/* Token callback: counts tf per term of the current document. */
static void collect_tok(const char *tok, size_t len, void *arg)
{
    collect *c = arg;
    cairn__bm25 *ix = c->ix;
    if (c->oom)
        return;
    long t = intern(ix, tok, len);
    if (t < 0 || cairn__bm25_grow((void **)&ix->doc_terms, &ix->doc_terms_cap, ix->n_doc_terms + 1,
                                  sizeof *ix->doc_terms)) {
        c->oom = 1;
        return;
    }
    term_ent *e = &ix->terms[t];
    if (e->doc_mark != ix->doc_mark) {
        e->doc_mark = ix->doc_mark;
        e->doc_tf = 0;
        ix->doc_terms[ix->n_doc_terms++] = (uint32_t)t;
    }
    e->doc_tf++;
}

/* Tokenizes a document into ix->doc_terms (unique terms, tf in the entries); returns the
 * token count, or -1 on ENOMEM. */
static int64_t doc_terms(cairn__bm25 *ix, const char *text, size_t len)
{
    collect c = {ix, 0};
    ix->n_doc_terms = 0;
    if (++ix->doc_mark == 0) { /* wrapped: marks of old entries could collide */
        for (size_t i = 0; i < ix->n_terms; i++)
            ix->terms[i].doc_mark = 0;
        ix->doc_mark = 1;
    }
    size_t n = cairn__bm25_tokenize(text, len, collect_tok, &c);
    return c.oom ? -1 : (int64_t)n;
}

static void dl_mark(cairn__bm25 *ix, uint32_t docno)
{
    size_t c = docno / LENS_CHUNK;
    ix->dl_dirty[c / 8] |= (uint8_t)(1u << (c % 8));
}

/* Sets a document's length in the dense array, growing it (new entries 0). */
static int dl_set(cairn__bm25 *ix, uint32_t docno, uint32_t dl)
{
    size_t need = ((size_t)docno / LENS_CHUNK + 1) * LENS_CHUNK, old = ix->n_dl;
    if (need > old) {
        size_t oc = ix->dl_dirty_cap;
        if (cairn__bm25_grow((void **)&ix->dl, &ix->dl_cap, need, 4) ||
            cairn__bm25_grow((void **)&ix->dl_dirty, &ix->dl_dirty_cap, need / LENS_CHUNK / 8 + 1,
                             1))
            return -1;
        memset(ix->dl + old, 0, (need - old) * 4);
        memset(ix->dl_dirty + oc, 0, ix->dl_dirty_cap - oc);
        ix->n_dl = need;
    }
    ix->dl[docno] = dl;
    dl_mark(ix, docno);
    return 0;
}

int cairn__bm25_begin(cairn__bm25 *ix)
{
    if (!ix->writable || ix->wtxn)
        return cairn__bm25_fail(ix, CAIRN_EINVAL, "index %s: %s", ix->dir,
                                ix->wtxn ? "a batch is already open" : "opened read-only");
    /* slots of reader processes that died (a killed step) would keep old pages from being
     * reused, and the index growing with every rebuild */
    int dead = 0;
    mdb_reader_check(ix->env, &dead);
    int rc = mdb_txn_begin(ix->env, NULL, 0, &ix->wtxn);
    if (rc) {
        ix->wtxn = NULL;
        return cairn__bm25_mdb_fail(ix, rc, "mdb_txn_begin");
    }
    uint64_t next = 0;
    if ((rc = cairn__bm25_meta_get(ix->wtxn, ix->meta, "n_docs", &ix->n_docs)) ||
        (rc = cairn__bm25_meta_get(ix->wtxn, ix->meta, "total_len", &ix->total_len)) ||
        (rc = cairn__bm25_meta_get(ix->wtxn, ix->meta, "next_docno", &next))) {
        mdb_txn_abort(ix->wtxn);
        ix->wtxn = NULL;
        return cairn__bm25_mdb_fail(ix, rc == MDB_NOTFOUND ? MDB_CORRUPTED : rc,
                                    "reading the counts");
    }
    ix->next_docno = (uint32_t)next;
    ix->poisoned = 0;
    ix->dirty = 0;
    ix->n_commits = 0;
    if ((rc = cairn__bm25_load_dl(ix, ix->wtxn)) != 0) {
        mdb_txn_abort(ix->wtxn);
        ix->wtxn = NULL;
        return rc;
    }
    ix->generation = ix->dl_gen;
    size_t need = ix->n_dl / LENS_CHUNK / 8 + 1;
    if (cairn__bm25_grow((void **)&ix->dl_dirty, &ix->dl_dirty_cap, need, 1)) {
        mdb_txn_abort(ix->wtxn);
        ix->wtxn = NULL;
        return oom(ix);
    }
    memset(ix->dl_dirty, 0, ix->dl_dirty_cap);
    cairn__bm25_batch_reset(ix);
    ix->err[0] = 0;
    return 0;
}

void cairn__bm25_abort(cairn__bm25 *ix)
{
    if (!ix)
        return;
    cairn__bm25_runs_close(ix);
    if (!ix->wtxn)
        return;
    mdb_txn_abort(ix->wtxn);
    ix->wtxn = NULL;
    ix->dl_gen = UINT64_MAX; /* the lengths may hold the batch's: read them again */
    cairn__bm25_batch_reset(ix);
}

/* The postings buffer may take this many postings under the memory cap: 12 bytes each and as
 * many again for the run's sorted copy, 40% of the cap in all; the terms take some of the rest
 * of the buffers' 5/8, and LMDB's dirty pages the last quarter (cairn__bm25_maybe_split). */
static size_t posts_limit(const cairn__bm25 *ix)
{
    size_t n = ix->mem_cap / 5 / sizeof(posting);
    return n > 1024 ? n : 1024;
}

/* Grows the postings buffer to hold need, doubling but not past posts_limit (unless one
 * document needs more): doubling alone would jump past the cap by half of it. */
static int grow_posts(cairn__bm25 *ix, size_t need)
{
    if (need <= ix->posts_cap)
        return 0;
    size_t lim = posts_limit(ix), c = ix->posts_cap ? ix->posts_cap : 64;
    while (c < need)
        c *= 2;
    c = c > lim && need <= lim ? lim : c < need ? need : c;
    posting *p = realloc(ix->posts, c * sizeof *p);
    if (!p)
        return -1;
    ix->posts = p, ix->posts_cap = c;
    return 0;
}

/* What the batch's buffers hold, in bytes, and what its next run will add: the postings
 * buffer at its allocated size (it grows by doubling), the run's sorted copy of it, the terms
 * (entry, pool bytes, hash slots, and the run's order/start/rank/fill arrays), the document
 * bitset. Checked after each document: a cap a document's worth above the estimate at the last
 * check is never exceeded by more than one document's postings. */
static size_t batch_bytes(const cairn__bm25 *ix)
{
    return ix->posts_cap * sizeof(posting) + ix->n_posts * sizeof(posting) +
           ix->terms_cap * sizeof(term_ent) + ix->pool_cap + ix->slot_cap * sizeof(uint32_t) +
           ix->n_terms * 4 * sizeof(uint32_t) + ix->pending_cap + ix->doc_terms_cap * 4 +
           ix->merge_cap * 4 + ix->blk_cap * 4 + ix->ops_cap * sizeof(post_op) + ix->dl_cap * 4;
}

/* Removes a stored document's postings (re-tokenizing its text) and its length. */
static int unindex_old(cairn__bm25 *ix, uint32_t docno, const MDB_val *rec)
{
    if (rec->mv_size < 12)
        return cairn__bm25_fail(ix, CAIRN_ECORRUPT, "index %s: document record %u is truncated",
                                ix->dir, docno);
    const char *r = rec->mv_data;
    uint32_t dl = docno < ix->n_dl ? ix->dl[docno] : 0, il = get32(r), tl = get32(r + 4),
             el = get32(r + 8);
    if ((uint64_t)12 + il + tl + el != rec->mv_size)
        return cairn__bm25_fail(ix, CAIRN_ECORRUPT, "index %s: document record %u has bad lengths",
                                ix->dir, docno);
    /* rec points into the map: copy the text before any write can move pages */
    char *text = malloc(tl + 1);
    if (!text)
        return cairn__bm25_fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir);
    memcpy(text, r + 12 + il, tl);
    if (docno / 8 < ix->pending_cap && (ix->pending[docno / 8] >> (docno % 8) & 1)) {
        /* its postings are still in the buffer: a run, then delete */
        int rc = cairn__bm25_write_run(ix);
        if (rc) {
            free(text);
            return rc;
        }
    }
    int64_t n = doc_terms(ix, text, tl);
    free(text);
    if (n < 0)
        return cairn__bm25_fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir);
    /* deletes go into the buffer (tf 0), to be merged into the blocks with the adds */
    if (grow_posts(ix, ix->n_posts + ix->n_doc_terms))
        return cairn__bm25_fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir);
    for (size_t i = 0; i < ix->n_doc_terms; i++) {
        ix->posts[ix->n_posts++] = (posting){ix->doc_terms[i], docno, 0};
        ix->terms[ix->doc_terms[i]].delta--;
    }
    ix->total_len -= dl;
    return 0;
}

int cairn__bm25_add(cairn__bm25 *ix, const char *id, const char *text, size_t text_len,
                    const char *extra_json, int *replaced)
{
    if (replaced)
        *replaced = 0;
    if (!ix->wtxn)
        return cairn__bm25_fail(ix, CAIRN_EINVAL, "index %s: no open batch (call begin first)",
                                ix->dir);
    if (ix->poisoned)
        return cairn__bm25_fail(ix, CAIRN_EINVAL, "index %s: an earlier error spoiled this batch",
                                ix->dir);
    size_t il = id ? strlen(id) : 0, el = extra_json ? strlen(extra_json) : 0;
    if (il == 0 || il > CAIRN__BM25_MAX_ID)
        return cairn__bm25_fail(ix, CAIRN_EINVAL, "document id must be 1..%d bytes, not %zu",
                                CAIRN__BM25_MAX_ID, il);
    if (text_len > UINT32_MAX / 2 || el > UINT32_MAX / 2)
        return cairn__bm25_fail(ix, CAIRN_ETOOBIG, "document '%s' is too large", id);
    int rc, is_replace = 0;
    uint32_t docno;
    unsigned char dk[4];
    MDB_val k = {il, (void *)id}, d;
    int m = mdb_get(ix->wtxn, ix->ids, &k, &d);
    if (m == 0) {
        if (d.mv_size != 4) {
            rc = cairn__bm25_fail(ix, CAIRN_ECORRUPT, "index %s: id record of '%s' is malformed",
                                  ix->dir, id);
            goto poison;
        }
        docno = get32(d.mv_data);
        be32(docno, dk);
        MDB_val rk = {4, dk}, rec;
        m = mdb_get(ix->wtxn, ix->docs, &rk, &rec);
        if (m) {
            rc = m == MDB_NOTFOUND ? cairn__bm25_fail(ix, CAIRN_ECORRUPT,
                                                      "index %s: document %u ('%s') has no record",
                                                      ix->dir, docno, id)
                                   : cairn__bm25_mdb_fail(ix, m, "reading a document");
            goto poison;
        }
        if ((rc = unindex_old(ix, docno, &rec)) != 0)
            goto poison;
        is_replace = 1;
        if (replaced)
            *replaced = 1;
    } else if (m == MDB_NOTFOUND) {
        if (ix->next_docno == UINT32_MAX) {
            rc = cairn__bm25_fail(ix, CAIRN_EFULL, "index %s: 2^32-1 documents is the limit",
                                  ix->dir);
            goto poison;
        }
        docno = ix->next_docno++;
        uint32_t v = docno;
        d = (MDB_val){4, &v};
        if ((m = mdb_put(ix->wtxn, ix->ids, &k, &d, 0)) != 0) {
            rc = cairn__bm25_mdb_fail(ix, m, "writing an id");
            goto poison;
        }
        ix->dirty += 512; /* ids come in no order: most puts dirty a page of their own */
        ix->n_docs++;
        be32(docno, dk);
    } else {
        rc = cairn__bm25_mdb_fail(ix, m, "looking up an id");
        goto poison;
    }

    int64_t dl = doc_terms(ix, text, text_len);
    if (dl < 0 || dl > UINT32_MAX) {
        rc = dl < 0 ? cairn__bm25_fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir)
                    : cairn__bm25_fail(ix, CAIRN_ETOOBIG, "document '%s' has too many tokens", id);
        goto poison;
    }
    if (grow_posts(ix, ix->n_posts + ix->n_doc_terms) || grow_pending(ix, docno) ||
        dl_set(ix, docno, (uint32_t)dl)) {
        rc = cairn__bm25_fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir);
        goto poison;
    }
    for (size_t i = 0; i < ix->n_doc_terms; i++) {
        term_ent *e = &ix->terms[ix->doc_terms[i]];
        ix->posts[ix->n_posts++] = (posting){ix->doc_terms[i], docno, e->doc_tf};
        e->delta++;
    }
    if (ix->n_doc_terms)
        ix->pending[docno / 8] |= (uint8_t)(1u << (docno % 8));
    ix->total_len += (uint64_t)dl;

    /* the record: {id_len, text_len, extra_len} id text extra */
    MDB_val rk = {4, dk}, rec = {12 + il + text_len + el, NULL};
    /* a new document has the largest number yet: append (full pages, no search) */
    m = mdb_put(ix->wtxn, ix->docs, &rk, &rec, MDB_RESERVE | (is_replace ? 0 : MDB_APPEND));
    if (m) {
        rc = cairn__bm25_mdb_fail(ix, m, "writing a document");
        goto poison;
    }
    uint32_t hdr[3] = {(uint32_t)il, (uint32_t)text_len, (uint32_t)el};
    char *w = rec.mv_data;
    memcpy(w, hdr, 12);
    memcpy(w + 12, id, il);
    if (text_len)
        memcpy(w + 12 + il, text, text_len);
    if (el)
        memcpy(w + 12 + il + text_len, extra_json, el);
    ix->dirty += rec.mv_size + 16;

    size_t mem = batch_bytes(ix);
    ix->mem_peak = mem > ix->mem_peak ? mem : ix->mem_peak;
    if ((ix->n_posts >= ix->flush_at || ix->n_posts >= posts_limit(ix) * 15 / 16 ||
         mem >= ix->mem_cap / 8 * 5) &&
        (rc = cairn__bm25_write_run(ix)) != 0)
        goto poison;
    if ((rc = cairn__bm25_maybe_split(ix, NULL)) != 0)
        goto poison;
    return 0;
poison:
    ix->poisoned = 1;
    return rc;
}

int cairn__bm25_commit(cairn__bm25 *ix)
{
    if (!ix->wtxn)
        return cairn__bm25_fail(ix, CAIRN_EINVAL, "index %s: no open batch", ix->dir);
    if (ix->poisoned) {
        cairn__bm25_abort(ix);
        return cairn__bm25_fail(ix, CAIRN_EINVAL, "index %s: an earlier error spoiled this batch",
                                ix->dir);
    }
    int rc = cairn__bm25_final_merge(ix), m = 0;
    if (!rc)
        rc = cairn__bm25_write_tail(ix);
    if (!rc && ix->n_commits &&
        (m = mdb_del(ix->wtxn, ix->meta, &(MDB_val){10, "unfinished"}, NULL)) != 0 &&
        m != MDB_NOTFOUND)
        rc = cairn__bm25_mdb_fail(ix, m, "clearing the unfinished mark");
    if (rc) {
        cairn__bm25_abort(ix);
        return rc;
    }
    m = mdb_txn_commit(ix->wtxn);
    ix->wtxn = NULL;
    cairn__bm25_batch_reset(ix);
    if (m) {
        ix->dl_gen = UINT64_MAX;
        return cairn__bm25_mdb_fail(ix, m, "mdb_txn_commit");
    }
    ix->dl_gen = ix->generation; /* the lengths in memory are the ones just written */
    ix->unfinished = 0;
    if (ix->n_commits)
        cairn__bm25_drop_map(ix);
    return 0;
}

int cairn__bm25_clear(cairn__bm25 *ix)
{
    if (!ix->writable || ix->wtxn)
        return cairn__bm25_fail(ix, CAIRN_EINVAL, "index %s: %s", ix->dir,
                                ix->wtxn ? "a batch is open" : "opened read-only");
    MDB_txn *txn;
    int m = mdb_txn_begin(ix->env, NULL, 0, &txn);
    if (m)
        return cairn__bm25_mdb_fail(ix, m, "mdb_txn_begin");
    uint64_t gen = 0;
    MDB_dbi all[] = {ix->post, ix->df, ix->docs, ix->ids, ix->blocks, ix->lens};
    for (size_t i = 0; !m && i < sizeof all / sizeof *all; i++)
        m = mdb_drop(txn, all[i], 0);
    if (!m && (m = cairn__bm25_meta_get(txn, ix->meta, "generation", &gen)) == MDB_NOTFOUND)
        m = 0;
    if (!m && (m = mdb_del(txn, ix->meta, &(MDB_val){10, "unfinished"}, NULL)) == MDB_NOTFOUND)
        m = 0;
    if (m || (m = cairn__bm25_meta_put(txn, ix->meta, "n_docs", 0)) != 0 ||
        (m = cairn__bm25_meta_put(txn, ix->meta, "total_len", 0)) != 0 ||
        (m = cairn__bm25_meta_put(txn, ix->meta, "next_docno", 0)) != 0 ||
        (m = cairn__bm25_meta_put(txn, ix->meta, "generation", gen + 1)) != 0) {
        mdb_txn_abort(txn);
        return cairn__bm25_mdb_fail(ix, m, "emptying the index");
    }
    if ((m = mdb_txn_commit(txn)) != 0)
        return cairn__bm25_mdb_fail(ix, m, "mdb_txn_commit");
    ix->dl_gen = UINT64_MAX;
    ix->unfinished = 0;
    return 0;
}
