/* steps/bm25_search.c - answering queries from the BM25 index (see bm25_impl.h for the
 * layout), and its counts.
 *
 * Terms never contain a NUL byte, so the postings of one term are exactly the keys starting
 * with "term\0": a query walks them with one cursor, in docno order, and accumulates scores into
 * a dense array indexed by docno (touched entries are tracked by a stamp, so nothing is cleared
 * between queries); a k-sized heap then picks the top k. Each query reads one snapshot (a read
 * transaction renewed per query), so an index rebuilt meanwhile is seen whole or not at all.
 */
#include "steps/bm25.h"
#include "steps/bm25_impl.h"

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

/* Scores every posting of every unique query term into ix->score; fills ix->touched. */
static int accumulate(cairn__bm25 *ix, MDB_txn *txn, const qterms *q, uint64_t n_docs,
                      uint64_t total_len)
{
    const double k1 = CAIRN__BM25_K1, b = CAIRN__BM25_B;
    const double avgdl = n_docs ? (double)total_len / (double)n_docs : 0.0;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, ix->post, &cur);
    if (rc)
        return cairn__bm25_mdb_fail(ix, rc, "mdb_cursor_open");
    unsigned char key[CAIRN__BM25_MAX_TOKEN + 5];
    for (size_t t = 0; t < q->nt && !rc; t++) {
        size_t tl = q->t[t].len;
        memcpy(key, q->buf + q->t[t].off, tl);
        MDB_val k = {tl, key}, d;
        int m = mdb_get(txn, ix->df, &k, &d);
        if (m == MDB_NOTFOUND)
            continue;
        if (m || d.mv_size != 4) {
            rc = m ? cairn__bm25_mdb_fail(ix, m, "reading a document frequency")
                   : cairn__bm25_fail(ix, CAIRN_ECORRUPT, "index %s: bad document frequency record",
                                      ix->dir);
            break;
        }
        double nt = get32(d.mv_data);
        double idf = log(1.0 + ((double)n_docs - nt + 0.5) / (nt + 0.5));
        /* tf*(k1+1) / (tf + k1*(1-b) + k1*b*dl/avgdl): the two constants hoisted */
        const double c0 = k1 * (1.0 - b), c1 = avgdl > 0 ? k1 * b / avgdl : 0.0;
        key[tl] = 0;
        k = (MDB_val){tl + 1, key};
        m = mdb_cursor_get(cur, &k, &d, MDB_SET_RANGE);
        while (m == 0) {
            if (k.mv_size != tl + 5 || memcmp(k.mv_data, key, tl + 1))
                break;
            if (d.mv_size != 8) {
                m = MDB_CORRUPTED;
                break;
            }
            const unsigned char *kp = (const unsigned char *)k.mv_data + tl + 1;
            uint32_t docno =
                (uint32_t)kp[0] << 24 | (uint32_t)kp[1] << 16 | (uint32_t)kp[2] << 8 | kp[3];
            uint32_t v[2];
            memcpy(v, d.mv_data, 8);
            if (docno >= ix->score_cap) {
                m = MDB_CORRUPTED;
                break;
            }
            double tf = v[0];
            double s = idf * tf * (k1 + 1.0) / (tf + c0 + c1 * (double)v[1]);
            if (ix->stamp[docno] != ix->cur_stamp) {
                ix->stamp[docno] = ix->cur_stamp;
                ix->score[docno] = s;
                ix->touched[ix->n_touched++] = docno;
            } else {
                ix->score[docno] += s;
            }
            m = mdb_cursor_get(cur, &k, &d, MDB_NEXT);
        }
        if (m && m != MDB_NOTFOUND)
            rc = cairn__bm25_mdb_fail(ix, m, "reading postings");
    }
    mdb_cursor_close(cur);
    return rc;
}

int cairn__bm25_search(cairn__bm25 *ix, const char *query, size_t k, cairn__bm25_hit **hits,
                       size_t *n)
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
    if ((rc = read_counts(ix, txn, &n_docs, &total_len, &next)) != 0)
        goto done;
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
        if (!s || !st || !tc) {
            rc = cairn__bm25_fail(ix, CAIRN_ENOMEM, "out of memory");
            goto done;
        }
        memset(ix->stamp + ix->score_cap, 0, (cap - ix->score_cap) * sizeof *st);
        ix->score_cap = cap;
    }
    if (++ix->cur_stamp == 0) {
        memset(ix->stamp, 0, ix->score_cap * sizeof *ix->stamp);
        ix->cur_stamp = 1;
    }
    ix->n_touched = 0;
    if ((rc = accumulate(ix, txn, &q, n_docs, total_len)) != 0)
        goto done;

    /* top k: a min-heap whose root is the worst of the best k so far */
    size_t cap = k < ix->n_touched ? k : ix->n_touched;
    heap = malloc((cap + 1) * sizeof *heap);
    if (!heap) {
        rc = cairn__bm25_fail(ix, CAIRN_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < ix->n_touched; i++) {
        heap_ent e = {ix->score[ix->touched[i]], ix->touched[i]};
        if (nh < cap) {
            heap[nh] = e;
            sift_up(heap, nh++);
        } else if (worse(heap[0], e)) {
            heap[0] = e;
            sift_down(heap, nh, 0);
        }
    }
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
        uint32_t il = rec.mv_size >= 16 ? get32(r + 4) : 0,
                 tl = rec.mv_size >= 16 ? get32(r + 8) : 0,
                 el = rec.mv_size >= 16 ? get32(r + 12) : 0;
        if (rec.mv_size < 16 || (uint64_t)16 + il + tl + el != rec.mv_size) {
            rc = cairn__bm25_fail(ix, CAIRN_ECORRUPT, "index %s: document record %u is malformed",
                                  ix->dir, e.docno);
            goto done;
        }
        out[i].score = e.score;
        out[i].id = dup_n(r + 16, il);
        out[i].text = dup_n(r + 16 + il, tl);
        out[i].extra = el ? dup_n(r + 16 + il + tl, el) : NULL;
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
