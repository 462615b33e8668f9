/* steps/bm25_write.c - filling the BM25 index: batches of added or replaced documents, written
 * in one LMDB transaction each (see bm25_impl.h for the layout).
 *
 * Adding documents one at a time would insert postings at random places in the B-tree (each
 * document touches ~100 terms). Instead a batch buffers postings and document-frequency deltas
 * in memory (terms interned in a pool, found through an open-addressing table), then writes them
 * sorted by key, so consecutive puts land on the same, hot pages. A replaced document's old
 * postings are found by re-tokenizing its stored text (the tokenizer version is recorded in
 * meta, so this stays exact); if they are still in the buffer, the buffer is flushed first.
 * Every term a flush touches gets its bounds table (bm25_impl.h) rebuilt from its postings
 * then, so the bounds the pruned search trusts always describe the committed postings.
 */
#include "steps/bm25.h"
#include "steps/bm25_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Term order = LMDB's key order for term\0...: bytes, then the shorter first. */
static int cmp_term(const void *a, const void *b, void *arg)
{
    const cairn__bm25 *ix = arg;
    const term_ent *x = &ix->terms[*(const uint32_t *)a], *y = &ix->terms[*(const uint32_t *)b];
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(ix->pool + x->off, ix->pool + y->off, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* docno order; of the same docno, the delete (tf 0) before the add */
static int cmp_docno(const void *a, const void *b)
{
    const posting *x = a, *y = b;
    if (x->docno != y->docno)
        return (x->docno > y->docno) - (x->docno < y->docno);
    return (x->tf > y->tf) - (x->tf < y->tf);
}

/* The postings in a stored block, 0 if it is malformed. */
static uint32_t block_len(const MDB_val *d)
{
    uint32_t n = d->mv_size >= 4 ? get32(d->mv_data) : 0;
    return n && d->mv_size == 4 + 12 * (size_t)n ? n : 0;
}

static int bad_block(cairn__bm25 *ix, const unsigned char *key, size_t tl)
{
    return cairn__bm25_fail(ix, CAIRN_ECORRUPT, "index %s: malformed block of '%.*s'", ix->dir,
                            (int)tl, (const char *)key);
}

/* Rewrites the bounds table of the term key[0..tl) from its blocks as the transaction holds
 * them now (scan: another cursor than the one writing). Rebuilt whole rather than patched:
 * cheap next to the merge (no B-tree writes), and exact whatever the merge did. */
static int write_bounds(cairn__bm25 *ix, MDB_cursor *scan, unsigned char *key, size_t tl)
{
    key[tl] = 0;
    MDB_val k = {tl + 1, key}, d;
    uint32_t max_tf = 0, min_dl = UINT32_MAX;
    size_t nb = 0;
    int m = mdb_cursor_get(scan, &k, &d, MDB_SET_RANGE);
    for (; m == 0; m = mdb_cursor_get(scan, &k, &d, MDB_NEXT)) {
        if (k.mv_size != tl + 5 || memcmp(k.mv_data, key, tl + 1))
            break;
        const unsigned char *v = d.mv_data;
        uint32_t n = block_len(&d);
        if (n == 0)
            return bad_block(ix, key, tl);
        if (cairn__bm25_grow((void **)&ix->blk, &ix->blk_cap, 3 + 3 * (nb + 1), 4))
            return cairn__bm25_fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir);
        uint32_t *b = ix->blk + 3 + 3 * nb++;
        b[0] = get32(v + 4 + 12 * (size_t)(n - 1)), b[1] = 0, b[2] = UINT32_MAX;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t tf = get32(v + 8 + 12 * (size_t)i), dl = get32(v + 12 + 12 * (size_t)i);
            b[1] = tf > b[1] ? tf : b[1];
            b[2] = dl < b[2] ? dl : b[2];
        }
        max_tf = b[1] > max_tf ? b[1] : max_tf;
        min_dl = b[2] < min_dl ? b[2] : min_dl;
    }
    if (m && m != MDB_NOTFOUND)
        return cairn__bm25_mdb_fail(ix, m, "reading postings");
    MDB_val bk = {tl, key};
    if (nb == 0) {
        m = mdb_del(ix->wtxn, ix->blocks, &bk, NULL);
        m = m == MDB_NOTFOUND ? 0 : m;
    } else {
        ix->blk[0] = max_tf, ix->blk[1] = min_dl, ix->blk[2] = (uint32_t)nb;
        MDB_val bv = {(3 + 3 * nb) * 4, ix->blk};
        m = mdb_put(ix->wtxn, ix->blocks, &bk, &bv, 0);
    }
    return m ? cairn__bm25_mdb_fail(ix, m, "writing a bounds table") : 0;
}

/* Where a flush's puts may append: a key beyond the largest one stored when it began is put
 * with MDB_APPEND (LMDB then fills pages instead of splitting them in half, which makes a
 * first build about half the size); the sorted flush crosses that point at most once. */
typedef struct append_state {
    unsigned char last[CAIRN__BM25_MAX_TOKEN + 5];
    size_t last_len;
    int appending;
} append_state;

/* Merges one term's buffered changes p[0..np) (docno order; tf 0 deletes the stored posting
 * of that docno, and comes before an add of the same docno) into its stored blocks. Blocks
 * before the first changed docno stay as they are; from the block holding it (or the term's
 * last block, when that one is not full) to the end of the list, blocks are read, deleted
 * and written anew, full: appending new documents rewrites only the last block. */
static int merge_term(cairn__bm25 *ix, MDB_cursor *cur, unsigned char *key, size_t tl,
                      const posting *p, size_t np, append_state *ap)
{
    key[tl] = 0;
    be32(p[0].docno, key + tl + 1);
    MDB_val k = {tl + 5, key}, d;
    int m = mdb_cursor_get(cur, &k, &d, MDB_SET_RANGE);
    if (m != 0 && m != MDB_NOTFOUND)
        return cairn__bm25_mdb_fail(ix, m, "reading postings");
    int at_term = m == 0 && k.mv_size == tl + 5 && !memcmp(k.mv_data, key, tl + 1);
    /* the block before, if it is this term's and not full, is refilled too */
    int p2 = mdb_cursor_get(cur, &k, &d, m == MDB_NOTFOUND ? MDB_LAST : MDB_PREV);
    if (p2 == 0 && k.mv_size == tl + 5 && !memcmp(k.mv_data, key, tl + 1) && d.mv_size >= 4 &&
        get32(d.mv_data) < BLOCK_POSTINGS) {
        at_term = 1;
    } else if (p2 != 0 && p2 != MDB_NOTFOUND) {
        return cairn__bm25_mdb_fail(ix, p2, "reading postings");
    } else if (at_term) {
        k = (MDB_val){tl + 5, key};
        if ((m = mdb_cursor_get(cur, &k, &d, MDB_SET_RANGE)) != 0)
            return cairn__bm25_mdb_fail(ix, m, "reading postings");
    }
    /* the old postings from there on; their blocks' last docnos, to delete them after */
    size_t nold = 0, ndel = 0;
    for (m = 0; at_term && m == 0; m = mdb_cursor_get(cur, &k, &d, MDB_NEXT)) {
        if (k.mv_size != tl + 5 || memcmp(k.mv_data, key, tl + 1))
            break;
        const unsigned char *v = d.mv_data;
        uint32_t n = block_len(&d);
        if (n == 0)
            return bad_block(ix, key, tl);
        if (cairn__bm25_grow((void **)&ix->merge, &ix->merge_cap, 3 * (nold + n), 4) ||
            cairn__bm25_grow((void **)&ix->dels, &ix->dels_cap, ndel + 1, 4))
            return cairn__bm25_fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir);
        memcpy(ix->merge + 3 * nold, v + 4, 12 * (size_t)n);
        nold += n;
        ix->dels[ndel++] = get32(v + 4 + 12 * (size_t)(n - 1));
    }
    if (m != 0 && m != MDB_NOTFOUND)
        return cairn__bm25_mdb_fail(ix, m, "reading postings");
    for (size_t i = 0; i < ndel; i++) {
        be32(ix->dels[i], key + tl + 1);
        MDB_val dk = {tl + 5, key};
        if ((m = mdb_del(ix->wtxn, ix->post, &dk, NULL)) != 0)
            return cairn__bm25_mdb_fail(ix, m, "deleting a block");
    }
    /* merged into the space after the old ones, then written out in full blocks */
    if (cairn__bm25_grow((void **)&ix->merge, &ix->merge_cap, 3 * (2 * nold + np) + 1, 4))
        return cairn__bm25_fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir);
    uint32_t *old = ix->merge, *out = ix->merge + 3 * nold;
    size_t i = 0, j = 0, n = 0;
    while (i < nold || j < np) {
        uint32_t od = i < nold ? get32(old + 3 * i) : 0;
        if (j == np || (i < nold && od < p[j].docno)) {
            memcpy(out + 3 * n++, old + 3 * i++, 12);
            continue;
        }
        if (p[j].tf == 0) { /* a delete: the stored posting must be there */
            if (i == nold || od != p[j].docno)
                return cairn__bm25_fail(ix, CAIRN_ECORRUPT,
                                        "index %s: posting of '%.*s' for document %u is missing "
                                        "(was the index written by another tokenizer?)",
                                        ix->dir, (int)tl, (const char *)key, p[j].docno);
            i++, j++;
            continue;
        }
        if (i < nold && od == p[j].docno)
            return cairn__bm25_fail(ix, CAIRN_ECORRUPT,
                                    "index %s: document %u already has a posting of '%.*s'",
                                    ix->dir, p[j].docno, (int)tl, (const char *)key);
        uint32_t *o = out + 3 * n++;
        o[0] = p[j].docno, o[1] = p[j].tf, o[2] = p[j].dl;
        j++;
    }
    for (size_t b = 0; b < n; b += BLOCK_POSTINGS) {
        size_t c = n - b < BLOCK_POSTINGS ? n - b : BLOCK_POSTINGS;
        be32(out[3 * (b + c - 1)], key + tl + 1);
        MDB_val bk = {tl + 5, key}, bv = {4 + 12 * c, NULL};
        if (!ap->appending) {
            size_t kl = tl + 5, l = kl < ap->last_len ? kl : ap->last_len;
            int cmp = memcmp(key, ap->last, l);
            ap->appending = cmp > 0 || (cmp == 0 && kl > ap->last_len);
        }
        if ((m = mdb_cursor_put(cur, &bk, &bv, MDB_RESERVE | (ap->appending ? MDB_APPEND : 0))))
            return cairn__bm25_mdb_fail(ix, m, "writing a block");
        uint32_t cc = (uint32_t)c;
        memcpy(bv.mv_data, &cc, 4);
        memcpy((char *)bv.mv_data + 4, out + 3 * b, 12 * c);
    }
    return 0;
}

/* Writes the buffered postings, df deltas and the touched terms' bounds in key order, then
 * empties the buffer. */
static int flush(cairn__bm25 *ix)
{
    int rc = 0;
    size_t nt = ix->n_terms;
    uint32_t *order = malloc((nt + 1) * sizeof *order), *start = calloc(nt + 1, sizeof *start);
    posting *sorted = malloc((ix->n_posts + 1) * sizeof *sorted);
    if (!order || !start || !sorted) {
        free(order), free(start), free(sorted);
        return cairn__bm25_fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir);
    }
    for (size_t i = 0; i < nt; i++)
        order[i] = (uint32_t)i;
    qsort_r(order, nt, sizeof *order, cmp_term, ix);
    /* counting sort of the postings by term rank; within a term they keep insertion order,
     * which is docno order unless a replaced (older) document came in between */
    uint32_t *rank = malloc((nt + 1) * sizeof *rank);
    if (!rank) {
        free(order), free(start), free(sorted);
        return cairn__bm25_fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir);
    }
    for (size_t i = 0; i < nt; i++)
        rank[order[i]] = (uint32_t)i;
    for (size_t i = 0; i < ix->n_posts; i++)
        start[rank[ix->posts[i].term]]++;
    uint32_t sum = 0;
    for (size_t r = 0; r < nt; r++) {
        uint32_t c = start[r];
        start[r] = sum;
        sum += c;
    }
    start[nt] = sum;
    {
        uint32_t *fill = malloc((nt + 1) * sizeof *fill);
        if (!fill) {
            free(order), free(start), free(sorted), free(rank);
            return cairn__bm25_fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir);
        }
        memcpy(fill, start, (nt + 1) * sizeof *fill);
        for (size_t i = 0; i < ix->n_posts; i++)
            sorted[fill[rank[ix->posts[i].term]]++] = ix->posts[i];
        free(fill);
    }
    free(rank);

    MDB_cursor *cur = NULL, *scan = NULL;
    if ((rc = mdb_cursor_open(ix->wtxn, ix->post, &cur)) != 0 ||
        (rc = mdb_cursor_open(ix->wtxn, ix->post, &scan)) != 0) {
        if (cur)
            mdb_cursor_close(cur);
        rc = cairn__bm25_mdb_fail(ix, rc, "mdb_cursor_open");
        goto out;
    }
    append_state ap = {.last_len = 0};
    {
        MDB_val lk, ld;
        int m = mdb_cursor_get(cur, &lk, &ld, MDB_LAST);
        if (m == MDB_NOTFOUND)
            ap.appending = 1;
        else if (m == 0 && lk.mv_size <= sizeof ap.last) {
            memcpy(ap.last, lk.mv_data, lk.mv_size);
            ap.last_len = lk.mv_size;
        } else {
            rc = m ? cairn__bm25_mdb_fail(ix, m, "reading the last posting")
                   : cairn__bm25_fail(ix, CAIRN_ECORRUPT, "index %s: oversized posting key",
                                      ix->dir);
            mdb_cursor_close(cur), mdb_cursor_close(scan);
            goto out;
        }
    }
    unsigned char key[CAIRN__BM25_MAX_TOKEN + 5];
    for (size_t r = 0; r < nt && !rc; r++) {
        const term_ent *e = &ix->terms[order[r]];
        posting *p = sorted + start[r];
        size_t np = start[r + 1] - start[r];
        for (size_t i = 1; i < np; i++)
            if (p[i].docno < p[i - 1].docno ||
                (p[i].docno == p[i - 1].docno && p[i].tf < p[i - 1].tf)) {
                qsort(p, np, sizeof *p, cmp_docno);
                break;
            }
        memcpy(key, ix->pool + e->off, e->len);
        if (np == 0)
            continue;
        rc = merge_term(ix, cur, key, e->len, p, np, &ap);
        if (!rc)
            rc = write_bounds(ix, scan, key, e->len);
        if (rc || !e->delta)
            continue;
        MDB_val k = {e->len, key}, d;
        int m = mdb_get(ix->wtxn, ix->df, &k, &d);
        int64_t df = 0;
        if (m == 0 && d.mv_size == 4)
            df = get32(d.mv_data);
        else if (m == 0 || m != MDB_NOTFOUND) {
            rc = m ? cairn__bm25_mdb_fail(ix, m, "reading a document frequency")
                   : cairn__bm25_fail(ix, CAIRN_ECORRUPT, "index %s: bad document frequency record",
                                      ix->dir);
            break;
        }
        df += e->delta;
        if (df < 0) {
            rc = cairn__bm25_fail(ix, CAIRN_ECORRUPT,
                                  "index %s: document frequency of '%.*s' below zero", ix->dir,
                                  (int)e->len, (const char *)key);
            break;
        }
        if (df == 0) {
            m = mdb_del(ix->wtxn, ix->df, &k, NULL);
            if (m == MDB_NOTFOUND)
                m = 0;
        } else {
            uint32_t v = (uint32_t)df;
            d = (MDB_val){4, &v};
            m = mdb_put(ix->wtxn, ix->df, &k, &d, 0);
        }
        if (m)
            rc = cairn__bm25_mdb_fail(ix, m, "writing a document frequency");
    }
    mdb_cursor_close(cur), mdb_cursor_close(scan);
out:
    free(order), free(start), free(sorted);
    if (!rc)
        cairn__bm25_batch_reset(ix);
    return rc;
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
    cairn__bm25_batch_reset(ix);
    ix->err[0] = 0;
    return 0;
}

void cairn__bm25_abort(cairn__bm25 *ix)
{
    if (!ix || !ix->wtxn)
        return;
    mdb_txn_abort(ix->wtxn);
    ix->wtxn = NULL;
    cairn__bm25_batch_reset(ix);
}

/* The postings buffer may take this many postings under the memory cap: 16 bytes each and as
 * many again for the flush's sorted copy, 40% of the cap in all, the rest left to the terms. */
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

/* What the batch's buffers hold, in bytes, and what its next flush will add: the postings
 * buffer at its allocated size (it grows by doubling), the flush's sorted copy of it, the terms
 * (entry, pool bytes, hash slots, and the flush's order/start/rank/fill arrays), the document
 * bitset. Checked after each document: a cap a document's worth above the estimate at the last
 * check is never exceeded by more than one document's postings. */
static size_t batch_bytes(const cairn__bm25 *ix)
{
    return ix->posts_cap * sizeof(posting) + ix->n_posts * sizeof(posting) +
           ix->terms_cap * sizeof(term_ent) + ix->pool_cap + ix->slot_cap * sizeof(uint32_t) +
           ix->n_terms * 4 * sizeof(uint32_t) + ix->pending_cap + ix->doc_terms_cap * 4 +
           ix->merge_cap * 4 + ix->blk_cap * 4;
}

/* Removes a stored document's postings (re-tokenizing its text) and its length. */
static int unindex_old(cairn__bm25 *ix, uint32_t docno, const MDB_val *rec)
{
    if (rec->mv_size < 16)
        return cairn__bm25_fail(ix, CAIRN_ECORRUPT, "index %s: document record %u is truncated",
                                ix->dir, docno);
    const char *r = rec->mv_data;
    uint32_t dl = get32(r), il = get32(r + 4), tl = get32(r + 8), el = get32(r + 12);
    if ((uint64_t)16 + il + tl + el != rec->mv_size)
        return cairn__bm25_fail(ix, CAIRN_ECORRUPT, "index %s: document record %u has bad lengths",
                                ix->dir, docno);
    /* rec points into the map: copy the text before any write can move pages */
    char *text = malloc(tl + 1);
    if (!text)
        return cairn__bm25_fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir);
    memcpy(text, r + 16 + il, tl);
    if (docno / 8 < ix->pending_cap && (ix->pending[docno / 8] >> (docno % 8) & 1)) {
        int rc = flush(ix); /* its postings are still in the buffer: write them, then delete */
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
        ix->posts[ix->n_posts++] = (posting){ix->doc_terms[i], docno, 0, 0};
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
    if (grow_posts(ix, ix->n_posts + ix->n_doc_terms) || grow_pending(ix, docno)) {
        rc = cairn__bm25_fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir);
        goto poison;
    }
    for (size_t i = 0; i < ix->n_doc_terms; i++) {
        term_ent *e = &ix->terms[ix->doc_terms[i]];
        ix->posts[ix->n_posts++] = (posting){ix->doc_terms[i], docno, e->doc_tf, (uint32_t)dl};
        e->delta++;
    }
    if (ix->n_doc_terms)
        ix->pending[docno / 8] |= (uint8_t)(1u << (docno % 8));
    ix->total_len += (uint64_t)dl;

    /* the record: {dl, id_len, text_len, extra_len} id text extra */
    MDB_val rk = {4, dk}, rec = {16 + il + text_len + el, NULL};
    /* a new document has the largest number yet: append (full pages, no search) */
    m = mdb_put(ix->wtxn, ix->docs, &rk, &rec, MDB_RESERVE | (is_replace ? 0 : MDB_APPEND));
    if (m) {
        rc = cairn__bm25_mdb_fail(ix, m, "writing a document");
        goto poison;
    }
    uint32_t hdr[4] = {(uint32_t)dl, (uint32_t)il, (uint32_t)text_len, (uint32_t)el};
    char *w = rec.mv_data;
    memcpy(w, hdr, 16);
    memcpy(w + 16, id, il);
    if (text_len)
        memcpy(w + 16 + il, text, text_len);
    if (el)
        memcpy(w + 16 + il + text_len, extra_json, el);

    size_t mem = batch_bytes(ix);
    ix->mem_peak = mem > ix->mem_peak ? mem : ix->mem_peak;
    if ((ix->n_posts >= ix->flush_at || ix->n_posts >= posts_limit(ix) * 15 / 16 ||
         mem >= ix->mem_cap) &&
        (rc = flush(ix)) != 0)
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
    int rc = flush(ix), m;
    if (!rc && ((m = cairn__bm25_meta_put(ix->wtxn, ix->meta, "n_docs", ix->n_docs)) != 0 ||
                (m = cairn__bm25_meta_put(ix->wtxn, ix->meta, "total_len", ix->total_len)) != 0 ||
                (m = cairn__bm25_meta_put(ix->wtxn, ix->meta, "next_docno", ix->next_docno)) != 0))
        rc = cairn__bm25_mdb_fail(ix, m, "writing the counts");
    if (rc) {
        cairn__bm25_abort(ix);
        return rc;
    }
    m = mdb_txn_commit(ix->wtxn);
    ix->wtxn = NULL;
    cairn__bm25_batch_reset(ix);
    return m ? cairn__bm25_mdb_fail(ix, m, "mdb_txn_commit") : 0;
}
