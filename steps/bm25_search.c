/* steps/bm25_search.c - answering queries from the BM25 index (see bm25_impl.h for the
 * layout), and its counts.
 *
 * Terms never contain a NUL byte, so the postings of one term are exactly the keys starting
 * with "term\0", in docno order. Two paths give the same top k, bit for bit:
 *   - the exhaustive one (the reference) walks every posting of every query term with one
 *     cursor and accumulates scores into a dense array indexed by docno (touched entries are
 *     tracked by a stamp, so nothing is cleared between queries); a k-sized heap picks the top k;
 *   - the pruned one (the default) walks the terms' lists side by side in docno order with
 *     block-max MaxScore (pruned_topk): documents and whole blocks that the per-block bounds
 *     show cannot reach the k-th best score are skipped unscored. Each query reads one snapshot (a
 * read transaction renewed per query), so an index rebuilt meanwhile is seen whole or not at all.
 */
#include "steps/bm25.h"
#include "steps/bm25_impl.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ reading */

/* A read transaction for one query: the handle's own, renewed (cheaper than a new one), or,
 * while this handle has a write batch open, that batch's transaction. */
static int read_txn(cairn__bm25 *ix, MDB_txn **txn)
{
    if (ix->wtxn) {
        *txn = ix->wtxn;
        return 0;
    }
    int rc =
        ix->rtxn ? mdb_txn_renew(ix->rtxn) : mdb_txn_begin(ix->env, NULL, MDB_RDONLY, &ix->rtxn);
    if (rc == MDB_MAP_RESIZED) { /* a writer grew the map beyond ours: adopt its size */
        if (ix->rtxn)
            mdb_txn_abort(ix->rtxn);
        ix->rtxn = NULL;
        rc = mdb_env_set_mapsize(ix->env, 0);
        if (!rc)
            rc = mdb_txn_begin(ix->env, NULL, MDB_RDONLY, &ix->rtxn);
    }
    if (rc) {
        if (ix->rtxn)
            mdb_txn_abort(ix->rtxn);
        ix->rtxn = NULL;
        return cairn__bm25_mdb_fail(ix, rc, "starting a read transaction");
    }
    *txn = ix->rtxn;
    return 0;
}

static void read_done(cairn__bm25 *ix, MDB_txn *txn)
{
    if (txn == ix->rtxn)
        mdb_txn_reset(ix->rtxn);
}

static int read_counts(cairn__bm25 *ix, MDB_txn *txn, uint64_t *n, uint64_t *total, uint64_t *next)
{
    if (ix->wtxn) {
        *n = ix->n_docs, *total = ix->total_len, *next = ix->next_docno;
        return 0;
    }
    int rc;
    uint64_t unfinished = 0;
    rc = cairn__bm25_meta_get(txn, ix->meta, "unfinished", &unfinished);
    if (rc != MDB_NOTFOUND)
        return rc ? cairn__bm25_mdb_fail(ix, rc, "reading the counts")
                  : cairn__bm25_unfinished_msg(ix->dir, ix->err, sizeof ix->err);
    if ((rc = cairn__bm25_meta_get(txn, ix->meta, "n_docs", n)) ||
        (rc = cairn__bm25_meta_get(txn, ix->meta, "total_len", total)) ||
        (rc = cairn__bm25_meta_get(txn, ix->meta, "next_docno", next)))
        return cairn__bm25_mdb_fail(ix, rc == MDB_NOTFOUND ? MDB_CORRUPTED : rc,
                                    "reading the counts");
    return 0;
}

int cairn__bm25_info_get(cairn__bm25 *ix, cairn__bm25_info *info)
{
    memset(info, 0, sizeof *info);
    MDB_txn *txn;
    int rc = read_txn(ix, &txn);
    if (rc)
        return rc;
    uint64_t next;
    rc = read_counts(ix, txn, &info->n_docs, &info->total_len, &next);
    MDB_stat st;
    int m;
    if (!rc && (m = mdb_stat(txn, ix->df, &st)) != 0)
        rc = cairn__bm25_mdb_fail(ix, m, "mdb_stat");
    else if (!rc)
        info->n_terms = st.ms_entries;
    if (ix->wtxn) /* the batch's df deltas are not written yet: count terms new to the index */
        for (size_t i = 0; !rc && i < ix->n_terms; i++) {
            MDB_val k = {ix->terms[i].len, ix->pool + ix->terms[i].off}, d;
            int present = mdb_get(txn, ix->df, &k, &d) == 0;
            info->n_terms += !present && ix->terms[i].delta > 0;
            info->n_terms -=
                present && d.mv_size == 4 && (int64_t)get32(d.mv_data) + ix->terms[i].delta == 0;
        }
    read_done(ix, txn);
    info->avgdl = info->n_docs ? (double)info->total_len / (double)info->n_docs : 0.0;
    return rc;
}

int cairn__bm25_stats(cairn__bm25 *ix, uint64_t *n_docs, double *avgdl)
{
    cairn__bm25_info info;
    int rc = cairn__bm25_info_get(ix, &info);
    if (n_docs)
        *n_docs = info.n_docs;
    if (avgdl)
        *avgdl = info.avgdl;
    return rc;
}

typedef struct qterm {
    size_t off, len;
} qterm;

typedef struct qterms {
    char *buf;
    size_t n, cap;
    qterm *t;
    size_t nt, tcap;
    int oom;
} qterms;

/* Token callback for queries: keeps the unique tokens in order of first appearance (queries
 * are short: a linear scan beats a hash here). */
static void query_tok(const char *tok, size_t len, void *arg)
{
    qterms *q = arg;
    for (size_t i = 0; i < q->nt; i++)
        if (q->t[i].len == len && !memcmp(q->buf + q->t[i].off, tok, len))
            return;
    if (cairn__bm25_grow((void **)&q->buf, &q->cap, q->n + len, 1) ||
        cairn__bm25_grow((void **)&q->t, &q->tcap, q->nt + 1, sizeof *q->t)) {
        q->oom = 1;
        return;
    }
    memcpy(q->buf + q->n, tok, len);
    q->t[q->nt++] = (qterm){q->n, len};
    q->n += len;
}

typedef struct heap_ent {
    double score;
    uint32_t docno;
} heap_ent;

/* a ranks below b: lower score, or equal score and later document */
static int worse(heap_ent a, heap_ent b)
{
    return a.score < b.score || (a.score == b.score && a.docno > b.docno);
}

static void sift_down(heap_ent *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < n && worse(h[l], h[m]))
            m = l;
        if (l + 1 < n && worse(h[l + 1], h[m]))
            m = l + 1;
        if (m == i)
            return;
        heap_ent t = h[i];
        h[i] = h[m], h[m] = t;
        i = m;
    }
}

static void sift_up(heap_ent *h, size_t i)
{
    while (i && worse(h[i], h[(i - 1) / 2])) {
        heap_ent t = h[i];
        h[i] = h[(i - 1) / 2], h[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

/* One term's contribution. Both paths call this one function, so a document's score is the
 * same double whichever path computed it. tf*(k1+1) / (tf + k1*(1-b) + k1*b*dl/avgdl): c0 and
 * c1 are the two hoisted constants. */
static inline double term_score(double idf, double c0, double c1, uint32_t tf, uint32_t dl)
{
    const double k1 = CAIRN__BM25_K1;
    double t = tf;
    return idf * t * (k1 + 1.0) / (t + c0 + c1 * (double)dl);
}

/* A query term's idf from its df record; MDB_NOTFOUND when the index does not hold it. */
static int term_idf(cairn__bm25 *ix, MDB_txn *txn, const char *term, size_t tl, uint64_t n_docs,
                    double *idf)
{
    MDB_val k = {tl, (void *)term}, d;
    int m = mdb_get(txn, ix->df, &k, &d);
    if (m == MDB_NOTFOUND)
        return m;
    if (m || d.mv_size != 4)
        return m ? cairn__bm25_mdb_fail(ix, m, "reading a document frequency")
                 : cairn__bm25_fail(ix, CAIRN_ECORRUPT, "index %s: bad document frequency record",
                                    ix->dir);
    double nt = get32(d.mv_data);
    *idf = log(1.0 + ((double)n_docs - nt + 0.5) / (nt + 0.5));
    return 0;
}

/* Scores every posting of every unique query term into ix->score; fills ix->touched. */
static int accumulate(cairn__bm25 *ix, MDB_txn *txn, const qterms *q, uint64_t n_docs,
                      uint64_t total_len)
{
    const double k1 = CAIRN__BM25_K1, b = CAIRN__BM25_B;
    const double avgdl = n_docs ? (double)total_len / (double)n_docs : 0.0;
    const double c0 = k1 * (1.0 - b), c1 = avgdl > 0 ? k1 * b / avgdl : 0.0;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, ix->post, &cur);
    if (rc)
        return cairn__bm25_mdb_fail(ix, rc, "mdb_cursor_open");
    unsigned char key[CAIRN__BM25_MAX_TOKEN + 5];
    uint32_t dn[BLOCK_POSTINGS], tfs[BLOCK_POSTINGS];
    for (size_t t = 0; t < q->nt && !rc; t++) {
        size_t tl = q->t[t].len;
        memcpy(key, q->buf + q->t[t].off, tl);
        double idf;
        int m = term_idf(ix, txn, (const char *)key, tl, n_docs, &idf);
        if (m == MDB_NOTFOUND)
            continue;
        if (m) {
            rc = m;
            break;
        }
        key[tl] = 0;
        MDB_val k = {tl + 1, key}, d;
        m = mdb_cursor_get(cur, &k, &d, MDB_SET_RANGE);
        while (m == 0) {
            if (k.mv_size != tl + 5 || memcmp(k.mv_data, key, tl + 1))
                break;
            uint32_t nb = cairn__bm25_block_decode(d.mv_data, d.mv_size, dn, tfs);
            if (nb == 0 || dn[nb - 1] >= ix->score_cap || dn[nb - 1] >= ix->n_dl) {
                m = MDB_CORRUPTED;
                break;
            }
            for (uint32_t j = 0; j < nb; j++) {
                uint32_t docno = dn[j];
                double s = term_score(idf, c0, c1, tfs[j], ix->dl[docno]);
                if (ix->stamp[docno] != ix->cur_stamp) {
                    ix->stamp[docno] = ix->cur_stamp;
                    ix->score[docno] = s;
                    ix->touched[ix->n_touched++] = docno;
                } else {
                    ix->score[docno] += s;
                }
            }
            if (m)
                break;
            ix->postings_read += nb;
            m = mdb_cursor_get(cur, &k, &d, MDB_NEXT);
        }
        if (m && m != MDB_NOTFOUND)
            rc = cairn__bm25_mdb_fail(ix, m, "reading postings");
    }
    mdb_cursor_close(cur);
    return rc;
}

static void heap_offer(heap_ent *heap, size_t *nh, size_t cap, heap_ent e)
{
    if (*nh < cap) {
        heap[*nh] = e;
        sift_up(heap, (*nh)++);
    } else if (worse(heap[0], e)) {
        heap[0] = e;
        sift_down(heap, *nh, 0);
    }
}

/* The dense score array, its stamps and the touched list, for docnos below next. */
static int ensure_dense(cairn__bm25 *ix, uint64_t next)
{
    if (next > ix->score_cap) {
        size_t cap = (size_t)next + next / 4 + 64;
        double *s = realloc(ix->score, cap * sizeof *s);
        if (s)
            ix->score = s;
        uint32_t *st = realloc(ix->stamp, cap * sizeof *st);
        if (st)
            ix->stamp = st;
        uint32_t *tc = realloc(ix->touched, cap * sizeof *tc);
        if (tc)
            ix->touched = tc;
        if (!s || !st || !tc)
            return cairn__bm25_fail(ix, CAIRN_ENOMEM, "out of memory");
        memset(ix->stamp + ix->score_cap, 0, (cap - ix->score_cap) * sizeof *st);
        ix->score_cap = cap;
    }
    return 0;
}

/* The reference: every posting of every query term scored into the dense array, then the top
 * k by a min-heap whose root is the worst of the best k so far. *heap is malloc'd. */
static int exhaustive_topk(cairn__bm25 *ix, MDB_txn *txn, const qterms *q, uint64_t n_docs,
                           uint64_t total_len, uint64_t next, size_t k, heap_ent **heap_out,
                           size_t *nh_out)
{
    int rc;
    size_t nh = 0;
    if ((rc = ensure_dense(ix, next)) != 0)
        return rc;
    if (++ix->cur_stamp == 0) {
        memset(ix->stamp, 0, ix->score_cap * sizeof *ix->stamp);
        ix->cur_stamp = 1;
    }
    ix->n_touched = 0;
    if ((rc = accumulate(ix, txn, q, n_docs, total_len)) != 0)
        return rc;

    size_t cap = k < ix->n_touched ? k : ix->n_touched;
    heap_ent *heap = malloc((cap + 1) * sizeof *heap);
    if (!heap)
        return cairn__bm25_fail(ix, CAIRN_ENOMEM, "out of memory");
    for (size_t i = 0; i < ix->n_touched; i++)
        heap_offer(heap, &nh, cap, (heap_ent){ix->score[ix->touched[i]], ix->touched[i]});
    *heap_out = heap;
    *nh_out = nh;
    return 0;
}

/* ------------------------------------------------------------------ pruned top k */

/* One query term's walk through its postings, for the pruned search (pt[] keeps the query's
 * order). The docnos of the block the cursor is on are decoded once, when it is entered; its
 * tfs are read from the packed bits as postings are scored. */
typedef struct pterm {
    MDB_cursor *cur;
    size_t tl; /* key = term \0 be32(docno) */
    unsigned char key[CAIRN__BM25_MAX_TOKEN + 5];
    double idf;
    const unsigned char *blk;    /* the bounds records, 12 bytes each, in the map */
    uint32_t nblk, bi;           /* block count; the block holding the docno asked last */
    uint32_t dn[BLOCK_POSTINGS]; /* the block the cursor is on: docnos decoded, tfs packed */
    block_view bv;
    uint32_t pn, pi; /* its length; the current posting in it */
    uint32_t plast;  /* its last docno (from its key) */
    uint32_t cb;     /* its index in the bounds table (one entry per block) */
    double bub;      /* bound of block bi */
    uint32_t docno;  /* the current posting */
    int done;        /* no postings left */
} pterm;

static uint32_t blk_get(const pterm *t, uint32_t i, int field)
{
    return get32(t->blk + 12 * i + 4 * field);
}

/* The first of dn[lo..hi) that is >= d (hi if none). */
static uint32_t blk_find(const uint32_t *dn, uint32_t lo, uint32_t hi, uint32_t d)
{
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (dn[mid] < d)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void pt_entry(pterm *t) { t->docno = t->dn[t->pi]; }

/* Takes in what a cursor move returned: a block of the term (its key read, *d kept for
 * decoding), or the list's end (t->done). 1 = a block. */
static int pt_key(cairn__bm25 *ix, pterm *t, int m, const MDB_val *k, int *rc)
{
    *rc = 0;
    if (m == MDB_NOTFOUND ||
        (m == 0 && (k->mv_size != t->tl + 5 || memcmp(k->mv_data, t->key, t->tl + 1)))) {
        t->done = 1;
        return 0;
    }
    if (m) {
        *rc = cairn__bm25_mdb_fail(ix, m, "reading postings");
        return 0;
    }
    const unsigned char *kb = (const unsigned char *)k->mv_data + t->tl + 1;
    t->plast = (uint32_t)kb[0] << 24 | (uint32_t)kb[1] << 16 | (uint32_t)kb[2] << 8 | kb[3];
    return 1;
}

/* Takes in what a cursor move returned and decodes the block: its first posting current. */
static int pt_load(cairn__bm25 *ix, pterm *t, int m, const MDB_val *k, const MDB_val *d)
{
    int rc;
    if (!pt_key(ix, t, m, k, &rc))
        return rc;
    uint32_t n = cairn__bm25_block_docnos(d->mv_data, d->mv_size, t->dn, &t->bv);
    if (n == 0 || t->dn[n - 1] != t->plast || t->plast >= ix->n_dl)
        return cairn__bm25_mdb_fail(ix, MDB_CORRUPTED, "reading postings");
    t->pn = n, t->pi = 0;
    pt_entry(t);
    ix->postings_read++;
    return 0;
}

static int pt_next(cairn__bm25 *ix, pterm *t)
{
    if (++t->pi < t->pn) {
        pt_entry(t);
        ix->postings_read++;
        return 0;
    }
    MDB_val k, d;
    t->cb++;
    return pt_load(ix, t, mdb_cursor_get(t->cur, &k, &d, MDB_NEXT), &k, &d);
}

/* Moves to the first posting at or after docno `to` (> the current one). The bounds table
 * says which block holds it: a block a few ahead is reached by stepping the cursor (the next
 * blocks mostly sit on the page it holds; the blocks stepped over are not decoded), a farther
 * one by a seek (a B-tree descent, as costly as stepping over several blocks), as the block's
 * key is its last docno. Then a binary search in the decoded block. */
static int pt_advance(cairn__bm25 *ix, pterm *t, uint32_t to)
{
    if (t->plast < to) {
        uint32_t tb = t->cb;
        while (tb < t->nblk && blk_get(t, tb, 0) < to)
            tb++;
        if (tb == t->nblk) {
            t->done = 1;
            return 0;
        }
        int rc = 0, on = 1;
        MDB_val k, d;
        while (on && t->cb < tb && tb - t->cb <= 8) {
            t->cb++;
            on = pt_key(ix, t, mdb_cursor_get(t->cur, &k, &d, MDB_NEXT), &k, &rc);
        }
        if (rc)
            return rc;
        if (on && t->cb == tb && t->plast >= to) {
            if ((rc = pt_load(ix, t, 0, &k, &d)) != 0)
                return rc;
        } else {
            be32(to, t->key + t->tl + 1);
            k = (MDB_val){t->tl + 5, t->key};
            t->done = 0;
            t->cb = tb;
            if ((rc = pt_load(ix, t, mdb_cursor_get(t->cur, &k, &d, MDB_SET_RANGE), &k, &d)) != 0)
                return rc;
        }
        if (t->done || t->docno >= to)
            return 0;
    }
    t->pi = blk_find(t->dn, t->pi + 1, t->pn - 1, to); /* the block's last docno is >= to */
    pt_entry(t);
    ix->postings_read++;
    return 0;
}

/* Makes bi the first block whose last docno is >= d (blocks only move forward: so do the
 * documents asked); 0 when the term has no posting at or after d. */
static int pt_block(pterm *t, uint32_t d, double c0, double c1)
{
    uint32_t bi = t->bi;
    while (bi < t->nblk && blk_get(t, bi, 0) < d)
        bi++;
    if (bi != t->bi && bi < t->nblk)
        t->bub = term_score(t->idf, c0, c1, blk_get(t, bi, 1), blk_get(t, bi, 2));
    t->bi = bi;
    return bi < t->nblk;
}

/* Block-max MaxScore over windows of documents. A window runs from the next docno not yet
 * decided to the first end of a block among the terms' current blocks, so within it each term
 * has one block and one bound. The terms' window bounds sorted ascending, the longest prefix
 * summing to at most the k-th best score so far (theta) is "non-essential": a document only
 * they hold cannot enter. A window whose terms are all non-essential is skipped unread;
 * otherwise the essential terms' postings in it mark the candidates, and every term then adds,
 * in query order, its contribution to the marked documents in a dense array, as the exhaustive
 * path does (both use the same term_score and 0 + s == s): scores are the same bits.
 *
 * Exactness. Windows come in docno order and the heap holds only earlier documents, so one
 * tying with theta ranks after it (a later document) and cannot enter: a document is dropped
 * only when a bound B of its score S has B <= theta. B is a floating-point sum of block bounds,
 * each term_score at the block's largest tf and smallest dl - within 12 ulps of a bound on
 * every score in the block, since term_score is monotone in tf and dl and rounds 6 times -
 * added in another order than S. With n terms, B * (1 + (2n+16) eps) >= S covers both (each of
 * the n-1 additions of either sum moves it by at most half an ulp), so every comparison with
 * theta carries that slack. */
static int pruned_topk(cairn__bm25 *ix, MDB_txn *txn, const qterms *q, uint64_t n_docs,
                       uint64_t total_len, uint64_t next, size_t k, heap_ent **heap_out,
                       size_t *nh_out)
{
    const double k1 = CAIRN__BM25_K1, b = CAIRN__BM25_B;
    const double avgdl = n_docs ? (double)total_len / (double)n_docs : 0.0;
    const double c0 = k1 * (1.0 - b), c1 = avgdl > 0 ? k1 * b / avgdl : 0.0;
    size_t cap = k < next ? k : (size_t)next, nt = q->nt, n = 0, nh = 0;
    pterm *pt = calloc(nt, sizeof *pt);
    size_t *ord = calloc(nt, sizeof *ord);
    double *wb = calloc(nt, sizeof *wb);
    unsigned char *ess = calloc(nt, 1);
    heap_ent *heap = malloc((cap + 1) * sizeof *heap);
    int rc = 0;
    if (!pt || !ord || !wb || !ess || !heap) {
        rc = cairn__bm25_fail(ix, CAIRN_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = ensure_dense(ix, next)) != 0)
        goto out;
    for (size_t i = 0; i < nt; i++) {
        pterm *t = &pt[n];
        t->tl = q->t[i].len;
        memcpy(t->key, q->buf + q->t[i].off, t->tl);
        int m = term_idf(ix, txn, (const char *)t->key, t->tl, n_docs, &t->idf);
        if (m == MDB_NOTFOUND)
            continue;
        if (m) {
            rc = m;
            goto out;
        }
        MDB_val bk = {t->tl, t->key}, bv;
        if ((m = mdb_get(txn, ix->blocks, &bk, &bv)) != 0) {
            rc = m == MDB_NOTFOUND ? cairn__bm25_fail(ix, CAIRN_ECORRUPT,
                                                      "index %s: term '%.*s' has a document "
                                                      "frequency but no bounds table",
                                                      ix->dir, (int)t->tl, (const char *)t->key)
                                   : cairn__bm25_mdb_fail(ix, m, "reading a bounds table");
            goto out;
        }
        const unsigned char *v = bv.mv_data;
        if (bv.mv_size < 24 || bv.mv_size != 12 + 12 * (size_t)get32(v + 8)) {
            rc = cairn__bm25_fail(ix, CAIRN_ECORRUPT, "index %s: malformed bounds table of '%.*s'",
                                  ix->dir, (int)t->tl, (const char *)t->key);
            goto out;
        }
        t->blk = v + 12;
        t->nblk = get32(v + 8);
        t->bub = term_score(t->idf, c0, c1, blk_get(t, 0, 1), blk_get(t, 0, 2));
        t->key[t->tl] = 0;
        if ((m = mdb_cursor_open(txn, ix->post, &t->cur)) != 0) {
            rc = cairn__bm25_mdb_fail(ix, m, "mdb_cursor_open");
            goto out;
        }
        n++;
        MDB_val k = {t->tl + 1, t->key}, d;
        if ((rc = pt_load(ix, t, mdb_cursor_get(t->cur, &k, &d, MDB_SET_RANGE), &k, &d)) != 0)
            goto out;
    }
    const double slack = 1.0 + (2.0 * (double)n + 16.0) * DBL_EPSILON;
    double theta = -INFINITY;
    uint32_t pos = 0;
    while (cap > 0) {
        uint32_t end = UINT32_MAX;
        int any = 0;
        for (size_t i = 0; i < n; i++) {
            pterm *t = &pt[i];
            if (!pt_block(t, pos, c0, c1))
                continue;
            uint32_t last = blk_get(t, t->bi, 0);
            end = last < end ? last : end;
            any = 1;
        }
        if (!any)
            break;
        /* a term's block counts if it starts within the window */
        for (size_t i = 0; i < n; i++) {
            const pterm *t = &pt[i];
            wb[i] = t->bi < t->nblk && (t->bi == 0 || blk_get(t, t->bi - 1, 0) < end) ? t->bub : 0;
        }
        for (size_t i = 0; i < n; i++) { /* by window bound, ascending; n is a query's length */
            size_t j = i;
            for (; j > 0 && wb[ord[j - 1]] > wb[i]; j--)
                ord[j] = ord[j - 1];
            ord[j] = i;
        }
        size_t ne = 0;
        for (double acc = 0; ne < n && (acc + wb[ord[ne]]) * slack <= theta; ne++)
            acc += wb[ord[ne]];
        for (size_t j = 0; j < n; j++)
            ess[ord[j]] = j >= ne;
        if (ne < n) {
            if (++ix->cur_stamp == 0) {
                memset(ix->stamp, 0, ix->score_cap * sizeof *ix->stamp);
                ix->cur_stamp = 1;
            }
            ix->n_touched = 0;
            /* the candidates: what the essential terms hold in the window (one block each) */
            for (size_t j = ne; j < n; j++) {
                pterm *t = &pt[ord[j]];
                if (wb[ord[j]] == 0)
                    continue;
                if (!t->done && t->docno < pos && (rc = pt_advance(ix, t, pos)) != 0)
                    goto out;
                for (uint32_t p = t->pi; !t->done && p < t->pn; p++) {
                    uint32_t d = t->dn[p];
                    if (d > end)
                        break;
                    if (d >= ix->score_cap) {
                        rc = cairn__bm25_mdb_fail(ix, MDB_CORRUPTED, "reading postings");
                        goto out;
                    }
                    if (ix->stamp[d] != ix->cur_stamp) {
                        ix->stamp[d] = ix->cur_stamp;
                        ix->score[d] = 0;
                        ix->touched[ix->n_touched++] = d;
                    }
                }
            }
            /* their scores, summed in query order; a non-essential term looks the few
             * candidates up in its block rather than reading all of it */
            for (size_t i = 0; i < n && ix->n_touched; i++) {
                pterm *t = &pt[i];
                if (wb[i] == 0)
                    continue;
                if (!t->done && t->docno < pos && (rc = pt_advance(ix, t, pos)) != 0)
                    goto out;
                if (t->done || t->docno > end)
                    continue;
                if (!ess[i] && ix->n_touched * 8 < t->pn - t->pi) {
                    for (size_t c = 0; c < ix->n_touched; c++) {
                        uint32_t d = ix->touched[c], lo = blk_find(t->dn, t->pi, t->pn, d);
                        if (lo < t->pn && t->dn[lo] == d)
                            ix->score[d] +=
                                term_score(t->idf, c0, c1, block_tf(&t->bv, lo), ix->dl[d]);
                    }
                    ix->postings_read += ix->n_touched;
                    continue;
                }
                while (!t->done && t->docno <= end) {
                    if (t->docno < ix->score_cap && ix->stamp[t->docno] == ix->cur_stamp)
                        ix->score[t->docno] +=
                            term_score(t->idf, c0, c1, block_tf(&t->bv, t->pi), ix->dl[t->docno]);
                    if ((rc = pt_next(ix, t)) != 0)
                        goto out;
                }
            }
            for (size_t i = 0; i < ix->n_touched; i++)
                heap_offer(heap, &nh, cap, (heap_ent){ix->score[ix->touched[i]], ix->touched[i]});
            if (nh == cap)
                theta = heap[0].score;
        }
        if (end == UINT32_MAX)
            break;
        pos = end + 1;
    }
out:
    for (size_t i = 0; i < n; i++)
        mdb_cursor_close(pt[i].cur);
    free(pt), free(ord), free(wb), free(ess);
    if (rc) {
        free(heap);
        return rc;
    }
    *heap_out = heap;
    *nh_out = nh;
    return 0;
}

/* The postings the query's terms hold (their document frequencies), to pick the path: below
 * ix->prune_min there is too little to skip for pruning's bookkeeping (a cursor and a bounds
 * table per term, window by window) to pay. A record it cannot read counts 0: the path that
 * runs reports it. */
static uint64_t query_postings(cairn__bm25 *ix, MDB_txn *txn, const qterms *q)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < q->nt; i++) {
        MDB_val k = {q->t[i].len, q->buf + q->t[i].off}, d;
        if (mdb_get(txn, ix->df, &k, &d) == 0 && d.mv_size == 4)
            sum += get32(d.mv_data);
    }
    return sum;
}

static int search(cairn__bm25 *ix, const char *query, size_t k, cairn__bm25_hit **hits, size_t *n,
                  int exhaustive)
{
    *hits = NULL;
    *n = 0;
    qterms q = {0};
    cairn__bm25_tokenize(query, strlen(query), query_tok, &q);
    if (q.oom) {
        free(q.buf), free(q.t);
        return cairn__bm25_fail(ix, CAIRN_ENOMEM, "out of memory");
    }
    if (q.nt == 0 || k == 0) {
        free(q.buf), free(q.t);
        return 0;
    }
    MDB_txn *txn;
    int rc = read_txn(ix, &txn);
    if (rc) {
        free(q.buf), free(q.t);
        return rc;
    }
    uint64_t n_docs, total_len, next;
    heap_ent *heap = NULL;
    cairn__bm25_hit *out = NULL;
    size_t nh = 0;
    if ((rc = read_counts(ix, txn, &n_docs, &total_len, &next)) != 0 ||
        (!ix->wtxn && (rc = cairn__bm25_load_dl(ix, txn)) != 0))
        goto done;
    ix->postings_read = 0;
    exhaustive = exhaustive || query_postings(ix, txn, &q) < ix->prune_min;
    rc = exhaustive ? exhaustive_topk(ix, txn, &q, n_docs, total_len, next, k, &heap, &nh)
                    : pruned_topk(ix, txn, &q, n_docs, total_len, next, k, &heap, &nh);
    if (rc)
        goto done;
    out = calloc(nh + 1, sizeof *out);
    if (!out) {
        rc = cairn__bm25_fail(ix, CAIRN_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = nh; i-- > 0;) { /* pop worst first into the back */
        heap_ent e = heap[0];
        heap[0] = heap[i];
        sift_down(heap, i, 0);
        unsigned char dk[4];
        be32(e.docno, dk);
        MDB_val kk = {4, dk}, rec;
        int m = mdb_get(txn, ix->docs, &kk, &rec);
        if (m) {
            rc = m == MDB_NOTFOUND ? cairn__bm25_fail(ix, CAIRN_ECORRUPT,
                                                      "index %s: document %u has postings "
                                                      "but no record",
                                                      ix->dir, e.docno)
                                   : cairn__bm25_mdb_fail(ix, m, "reading a document");
            goto done;
        }
        const char *r = rec.mv_data;
        uint32_t il = rec.mv_size >= 12 ? get32(r) : 0, tl = rec.mv_size >= 12 ? get32(r + 4) : 0,
                 el = rec.mv_size >= 12 ? get32(r + 8) : 0;
        if (rec.mv_size < 12 || (uint64_t)12 + il + tl + el != rec.mv_size) {
            rc = cairn__bm25_fail(ix, CAIRN_ECORRUPT, "index %s: document record %u is malformed",
                                  ix->dir, e.docno);
            goto done;
        }
        out[i].score = e.score;
        out[i].id = dup_n(r + 12, il);
        out[i].text = dup_n(r + 12 + il, tl);
        out[i].extra = el ? dup_n(r + 12 + il + tl, el) : NULL;
        if (!out[i].id || !out[i].text || (el && !out[i].extra)) {
            rc = cairn__bm25_fail(ix, CAIRN_ENOMEM, "out of memory");
            goto done;
        }
    }
done:
    read_done(ix, txn);
    free(q.buf), free(q.t);
    free(heap);
    if (rc) {
        cairn__bm25_hits_free(out, nh);
        return rc;
    }
    if (nh == 0) {
        free(out);
        out = NULL;
    }
    *hits = out;
    *n = nh;
    return 0;
}

int cairn__bm25_search(cairn__bm25 *ix, const char *query, size_t k, cairn__bm25_hit **hits,
                       size_t *n)
{
    return search(ix, query, k, hits, n, ix->exhaustive);
}

int cairn__bm25_search_exhaustive(cairn__bm25 *ix, const char *query, size_t k,
                                  cairn__bm25_hit **hits, size_t *n)
{
    return search(ix, query, k, hits, n, 1);
}

uint64_t cairn__bm25_postings_read(const cairn__bm25 *ix) { return ix->postings_read; }

void cairn__bm25_hits_free(cairn__bm25_hit *hits, size_t n)
{
    if (!hits)
        return;
    for (size_t i = 0; i < n; i++) {
        free(hits[i].id);
        free(hits[i].text);
        free(hits[i].extra);
    }
    free(hits);
}
