/* steps/bm25_write.c - filling the BM25 index: batches of added or replaced documents (see
 * bm25_impl.h for the layout).
 *
 * Adding documents one at a time would insert postings at random places in the B-tree (each
 * document touches ~100 terms). Instead a batch buffers postings in memory (terms interned in a
 * pool, found through an open-addressing table); when the buffer reaches its share of the
 * memory cap it is sorted by key and written to a temporary run file, and commit merges every
 * run and the buffer once, term by term in key order, into the stored lists. Why runs rather
 * than merging each full buffer into LMDB: a second merge would insert into the middle of every
 * list the first wrote, splitting the full pages MDB_APPEND had made (format 2 grew
 * superlinearly that way: 4x Xapian's size at 1M documents); with one merge in key order a
 * first build appends every key, so it never splits a page whatever its size, and a later
 * batch rewrites only each touched term's last block and appends after it. Keying chunks by
 * (term, first docno) instead would still insert every later chunk mid-tree.
 *
 * A replaced document's old postings are found by re-tokenizing its stored text (the tokenizer
 * version is recorded in meta, so this stays exact) and buffered as deletes; if its postings
 * are still in the buffer, the buffer becomes a run first, so a run never holds two changes of
 * one kind to a posting, and the merge applies a docno's changes in the order they were made.
 * Every term the merge touches gets its bounds table patched then (merge_term), so the bounds
 * the pruned search trusts always describe the committed postings.
 *
 * Memory: the buffers stay under 5/8 of the cap, and LMDB's dirty pages (malloc'd until the
 * transaction commits) under a quarter: a batch past that commits and goes on in a new
 * transaction, the index marked unfinished until its last commit (maybe_split).
 */
#include "steps/bm25.h"
#include "steps/bm25_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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
static int cmp_bytes(const char *a, size_t al, const char *b, size_t bl)
{
    size_t n = al < bl ? al : bl;
    int c = memcmp(a, b, n);
    return c ? c : (al > bl) - (al < bl);
}

static int cmp_term(const void *a, const void *b, void *arg)
{
    const cairn__bm25 *ix = arg;
    const term_ent *x = &ix->terms[*(const uint32_t *)a], *y = &ix->terms[*(const uint32_t *)b];
    return cmp_bytes(ix->pool + x->off, x->len, ix->pool + y->off, y->len);
}

/* docno order; of the same docno, the delete (tf 0) before the add */
static int cmp_docno(const void *a, const void *b)
{
    const posting *x = a, *y = b;
    if (x->docno != y->docno)
        return (x->docno > y->docno) - (x->docno < y->docno);
    return (x->tf > y->tf) - (x->tf < y->tf);
}

/* changes to one docno in the order they were made: earlier runs first, in a run the delete */
static int cmp_op(const void *a, const void *b)
{
    const post_op *x = a, *y = b;
    if (x->docno != y->docno)
        return (x->docno > y->docno) - (x->docno < y->docno);
    if (x->seq != y->seq)
        return (x->seq > y->seq) - (x->seq < y->seq);
    return (x->tf > y->tf) - (x->tf < y->tf);
}

static int oom(cairn__bm25 *ix)
{
    return cairn__bm25_fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir);
}

/* The buffer sorted: order[] the terms by key, sorted[start[r]..start[r+1]) the postings of
 * the r-th, in docno order. malloc'd, freed by the caller (also on failure). */
typedef struct sorted_buf {
    uint32_t *order, *start;
    posting *sorted;
} sorted_buf;

static int sort_buffer(cairn__bm25 *ix, sorted_buf *sb)
{
    size_t nt = ix->n_terms;
    sb->order = malloc((nt + 1) * sizeof *sb->order);
    sb->start = calloc(nt + 1, sizeof *sb->start);
    sb->sorted = malloc((ix->n_posts + 1) * sizeof *sb->sorted);
    uint32_t *rank = malloc((nt + 1) * sizeof *rank);
    if (!sb->order || !sb->start || !sb->sorted || !rank) {
        free(rank);
        return oom(ix);
    }
    for (size_t i = 0; i < nt; i++)
        sb->order[i] = (uint32_t)i;
    qsort_r(sb->order, nt, sizeof *sb->order, cmp_term, ix);
    /* counting sort of the postings by term rank; within a term they keep insertion order,
     * which is docno order unless a replaced (older) document came in between */
    for (size_t i = 0; i < nt; i++)
        rank[sb->order[i]] = (uint32_t)i;
    for (size_t i = 0; i < ix->n_posts; i++)
        sb->start[rank[ix->posts[i].term]]++;
    uint32_t sum = 0;
    for (size_t r = 0; r < nt; r++) {
        uint32_t c = sb->start[r];
        sb->start[r] = sum;
        sum += c;
    }
    sb->start[nt] = sum;
    uint32_t *fill = malloc((nt + 1) * sizeof *fill);
    if (!fill) {
        free(rank);
        return oom(ix);
    }
    for (size_t i = 0; i < nt; i++)
        fill[i] = sb->start[rank[i]];
    for (size_t i = 0; i < ix->n_posts; i++)
        sb->sorted[fill[ix->posts[i].term]++] = ix->posts[i];
    free(fill), free(rank);
    for (size_t r = 0; r < nt; r++) {
        posting *p = sb->sorted + sb->start[r];
        size_t np = sb->start[r + 1] - sb->start[r];
        for (size_t i = 1; i < np; i++)
            if (cmp_docno(&p[i - 1], &p[i]) > 0) {
                qsort(p, np, sizeof *p, cmp_docno);
                break;
            }
    }
    return 0;
}

static void sorted_free(sorted_buf *sb) { free(sb->order), free(sb->start), free(sb->sorted); }

/* ------------------------------------------------------------------ runs */

/* A run is the buffer sorted and written to an unlinked temporary file in the index's
 * directory: per term {u32 len, bytes, u32 n, n * {u32 docno, u32 tf}}, terms in key order.
 * Commit merges every run and the buffer once, in key order, so the index is written
 * append-only however many times the buffer filled (see the top of this file). */
static int write_run(cairn__bm25 *ix)
{
    sorted_buf sb = {0};
    int rc = sort_buffer(ix, &sb);
    char path[4200];
    snprintf(path, sizeof path, "%s/run-XXXXXX", ix->dir);
    int fd = rc ? -1 : mkstemp(path);
    FILE *f = NULL;
    if (!rc && fd < 0)
        rc = cairn__bm25_fail(ix, CAIRN_EIO, "index %s: creating a run file: %s", ix->dir,
                              strerror(errno));
    if (fd >= 0) {
        unlink(path); /* gone with the process, whatever ends it */
        if (!(f = fdopen(fd, "w+b"))) {
            close(fd);
            rc = oom(ix);
        }
    }
    if (!rc && cairn__bm25_grow(&ix->runs_v, &ix->runs_cap, ix->n_runs + 1, sizeof(FILE *)))
        rc = oom(ix);
    if (!rc)
        setvbuf(f, NULL, _IOFBF, 1 << 16); /* a buffer per run while they merge */
    for (size_t r = 0; !rc && r < ix->n_terms; r++) {
        const term_ent *e = &ix->terms[sb.order[r]];
        uint32_t hdr[2] = {e->len, sb.start[r + 1] - sb.start[r]};
        if (hdr[1] == 0)
            continue;
        int bad = fwrite(hdr, 4, 1, f) != 1 || fwrite(ix->pool + e->off, 1, e->len, f) != e->len ||
                  fwrite(hdr + 1, 4, 1, f) != 1;
        for (uint32_t i = 0; !bad && i < hdr[1]; i++) {
            const posting *p = &sb.sorted[sb.start[r] + i];
            uint32_t v[2] = {p->docno, p->tf};
            bad = fwrite(v, 4, 2, f) != 2;
        }
        if (bad)
            rc = cairn__bm25_fail(ix, errno == ENOSPC ? CAIRN_EFULL : CAIRN_EIO,
                                  "index %s: writing a run file: %s", ix->dir, strerror(errno));
    }
    if (!rc && fflush(f) != 0)
        rc = cairn__bm25_fail(ix, errno == ENOSPC ? CAIRN_EFULL : CAIRN_EIO,
                              "index %s: writing a run file: %s", ix->dir, strerror(errno));
    sorted_free(&sb);
    if (rc) {
        if (f)
            fclose(f);
        return rc;
    }
    ((FILE **)ix->runs_v)[ix->n_runs++] = f;
    cairn__bm25_batch_reset(ix);
    return 0;
}

void cairn__bm25_runs_close(cairn__bm25 *ix)
{
    for (size_t i = 0; i < ix->n_runs; i++)
        fclose(((FILE **)ix->runs_v)[i]);
    ix->n_runs = 0;
}

typedef struct run_rd {
    FILE *f;
    uint32_t tl, np;
    char term[CAIRN__BM25_MAX_TOKEN + 1];
    int done;
} run_rd;

static int run_head(cairn__bm25 *ix, run_rd *r)
{
    uint32_t tl;
    if (fread(&tl, 4, 1, r->f) != 1) {
        r->done = 1;
        return ferror(r->f)
                   ? cairn__bm25_fail(ix, CAIRN_EIO, "index %s: reading a run file", ix->dir)
                   : 0;
    }
    if (tl == 0 || tl > CAIRN__BM25_MAX_TOKEN || fread(r->term, 1, tl, r->f) != tl ||
        fread(&r->np, 4, 1, r->f) != 1)
        return cairn__bm25_fail(ix, CAIRN_EIO, "index %s: reading a run file", ix->dir);
    r->tl = tl;
    return 0;
}

/* ------------------------------------------------------------------ merging into the index */

static int bad_block(cairn__bm25 *ix, const unsigned char *key, size_t tl)
{
    return cairn__bm25_fail(ix, CAIRN_ECORRUPT, "index %s: malformed block of '%.*s'", ix->dir,
                            (int)tl, (const char *)key);
}

/* Where a merge's puts may append: a key beyond the largest one stored when it began is put
 * with MDB_APPEND (LMDB then fills pages instead of splitting them in half); the merge goes in
 * key order, so it crosses that point at most once. first_build: the tables were empty, so
 * every df and bounds put appends too. */
typedef struct append_state {
    unsigned char last[CAIRN__BM25_MAX_TOKEN + 5];
    size_t last_len;
    int appending, first_build;
} append_state;

static uint32_t dl_of(const cairn__bm25 *ix, uint32_t docno)
{
    return docno < ix->n_dl ? ix->dl[docno] : 0;
}

/* Applies one term's changes p[0..np) (sorted by cmp_op; tf 0 deletes the stored posting of
 * that docno, an add needs none there) to its stored blocks. Only blocks from the one holding
 * the first changed docno to the one holding the last (or the list's end) are read, deleted
 * and written anew, full; the block before them joins when it is not full, so thinned blocks
 * fill up again and appending new documents rewrites only the last block. The bounds table is
 * patched: the entries of the blocks kept stay (no document in them changed, so neither did
 * their bounds: a replaced document changes every term it had or has), the rewritten ones'
 * are computed here. df moves by adds minus deletes. */
static int merge_term(cairn__bm25 *ix, MDB_cursor *cur, unsigned char *key, size_t tl,
                      const post_op *p, size_t np, append_state *ap)
{
    uint32_t dn[BLOCK_POSTINGS], tfs[BLOCK_POSTINGS];
    /* the old bounds table, copied: puts below may move the pages it is on */
    MDB_val bk = {tl, key}, bv;
    size_t nbo = 0;
    int m = mdb_get(ix->wtxn, ix->blocks, &bk, &bv);
    if (m == 0) {
        const unsigned char *v = bv.mv_data;
        if (bv.mv_size < 12 || bv.mv_size != 12 + 12 * (size_t)get32(v + 8))
            return bad_block(ix, key, tl);
        nbo = get32(v + 8);
        if (cairn__bm25_grow((void **)&ix->blk, &ix->blk_cap, 3 * nbo + 3 * (np + 2) + 3, 4))
            return oom(ix);
        memcpy(ix->blk, v + 12, 12 * nbo);
    } else if (m != MDB_NOTFOUND) {
        return cairn__bm25_mdb_fail(ix, m, "reading a bounds table");
    }
    /* the old blocks rewritten, [a, z): from the one holding p[0] (or the first after it) to
     * the one holding p[np-1] (or the list's end); the one before a joins if not full */
    size_t a = 0;
    while (a < nbo && ix->blk[3 * a] < p[0].docno)
        a++;
    size_t z = a;
    while (z < nbo && ix->blk[3 * z] < p[np - 1].docno)
        z++;
    z = z < nbo ? z + 1 : nbo;
    uint32_t nold = 0;
    size_t ndel = 0;
    key[tl] = 0;
    if (a > 0) {
        be32(ix->blk[3 * (a - 1)], key + tl + 1);
        MDB_val k = {tl + 5, key}, d;
        if ((m = mdb_get(ix->wtxn, ix->post, &k, &d)) != 0)
            return m == MDB_NOTFOUND ? bad_block(ix, key, tl)
                                     : cairn__bm25_mdb_fail(ix, m, "reading postings");
        if (block_count(d.mv_data, d.mv_size) < BLOCK_POSTINGS)
            a--;
    }
    if (cairn__bm25_grow((void **)&ix->dels, &ix->dels_cap, z - a + 1, 4))
        return oom(ix);
    for (size_t b = a; b < z; b++) {
        be32(ix->blk[3 * b], key + tl + 1);
        MDB_val k = {tl + 5, key}, d;
        if ((m = mdb_get(ix->wtxn, ix->post, &k, &d)) != 0)
            return m == MDB_NOTFOUND ? bad_block(ix, key, tl)
                                     : cairn__bm25_mdb_fail(ix, m, "reading postings");
        uint32_t n = cairn__bm25_block_decode(d.mv_data, d.mv_size, dn, tfs);
        if (n == 0 || dn[n - 1] != ix->blk[3 * b])
            return bad_block(ix, key, tl);
        if (cairn__bm25_grow((void **)&ix->merge, &ix->merge_cap, 2 * ((size_t)nold + n), 4))
            return oom(ix);
        for (uint32_t i = 0; i < n; i++)
            ix->merge[2 * (nold + i)] = dn[i], ix->merge[2 * (nold + i) + 1] = tfs[i];
        nold += n;
        ix->dels[ndel++] = ix->blk[3 * b];
    }
    for (size_t i = 0; i < ndel; i++) {
        be32(ix->dels[i], key + tl + 1);
        MDB_val dk = {tl + 5, key};
        if ((m = mdb_del(ix->wtxn, ix->post, &dk, NULL)) != 0)
            return cairn__bm25_mdb_fail(ix, m, "deleting a block");
    }
    /* merged after the old ones: out[] {docno, tf} */
    if (cairn__bm25_grow((void **)&ix->merge, &ix->merge_cap, 2 * (2 * (size_t)nold + np) + 2, 4))
        return oom(ix);
    uint32_t *old = ix->merge, *out = ix->merge + 2 * (size_t)nold;
    size_t i = 0, j = 0, n = 0;
    int64_t delta = 0;
    while (i < nold || j < np) {
        uint32_t od = i < nold ? old[2 * i] : 0;
        if (j == np || (i < nold && od < p[j].docno)) {
            out[2 * n] = old[2 * i], out[2 * n + 1] = old[2 * i + 1];
            n++, i++;
            continue;
        }
        /* every change to this docno, in order, from what is stored */
        uint32_t d = p[j].docno, tf = 0;
        int present = i < nold && od == d;
        if (present)
            tf = old[2 * i + 1], i++;
        for (; j < np && p[j].docno == d; j++) {
            if (p[j].tf == 0 && !present)
                return cairn__bm25_fail(ix, CAIRN_ECORRUPT,
                                        "index %s: posting of '%.*s' for document %u is missing "
                                        "(was the index written by another tokenizer?)",
                                        ix->dir, (int)tl, (const char *)key, d);
            if (p[j].tf && present)
                return cairn__bm25_fail(ix, CAIRN_ECORRUPT,
                                        "index %s: document %u already has a posting of '%.*s'",
                                        ix->dir, d, (int)tl, (const char *)key);
            present = p[j].tf != 0, tf = p[j].tf;
            delta += present ? 1 : -1;
        }
        if (present)
            out[2 * n] = d, out[2 * n + 1] = tf, n++;
    }
    /* the new blocks and their bounds entries, after the kept prefix [0, a) */
    size_t nkept_after = nbo - z, nnew = (n + BLOCK_POSTINGS - 1) / BLOCK_POSTINGS;
    if (cairn__bm25_grow((void **)&ix->blk, &ix->blk_cap, 3 * (a + nnew + nkept_after + nbo) + 3,
                         4))
        return oom(ix);
    /* the kept suffix's entries move to make room for the new ones */
    memmove(ix->blk + 3 * (a + nnew), ix->blk + 3 * z, 12 * nkept_after);
    unsigned char enc[BLOCK_MAX_BYTES + 8];
    for (size_t b = 0; b < n; b += BLOCK_POSTINGS) {
        uint32_t c = (uint32_t)(n - b < BLOCK_POSTINGS ? n - b : BLOCK_POSTINGS);
        uint32_t *e = ix->blk + 3 * (a + b / BLOCK_POSTINGS);
        e[0] = out[2 * (b + c - 1)], e[1] = 0, e[2] = UINT32_MAX;
        for (uint32_t q = 0; q < c; q++) {
            dn[q] = out[2 * (b + q)], tfs[q] = out[2 * (b + q) + 1];
            uint32_t dl = dl_of(ix, dn[q]);
            e[1] = tfs[q] > e[1] ? tfs[q] : e[1];
            e[2] = dl < e[2] ? dl : e[2];
        }
        size_t len = cairn__bm25_block_encode(dn, tfs, c, enc);
        be32(e[0], key + tl + 1);
        MDB_val k = {tl + 5, key}, v = {len, enc};
        if (!ap->appending) {
            size_t kl = tl + 5, l = kl < ap->last_len ? kl : ap->last_len;
            int cmp = memcmp(key, ap->last, l);
            ap->appending = cmp > 0 || (cmp == 0 && kl > ap->last_len);
        }
        if ((m = mdb_cursor_put(cur, &k, &v, ap->appending ? MDB_APPEND : 0)))
            return cairn__bm25_mdb_fail(ix, m, "writing a block");
        ix->dirty += tl + 5 + len + 16;
    }
    size_t nb = a + nnew + nkept_after;
    unsigned put_flags = ap->first_build ? MDB_APPEND : 0;
    if (nb == 0) {
        m = mdb_del(ix->wtxn, ix->blocks, &bk, NULL);
        m = m == MDB_NOTFOUND ? 0 : m;
    } else {
        uint32_t max_tf = 0, min_dl = UINT32_MAX;
        for (size_t b = 0; b < nb; b++) {
            max_tf = ix->blk[3 * b + 1] > max_tf ? ix->blk[3 * b + 1] : max_tf;
            min_dl = ix->blk[3 * b + 2] < min_dl ? ix->blk[3 * b + 2] : min_dl;
        }
        MDB_val v = {(3 + 3 * nb) * 4, NULL};
        if ((m = mdb_put(ix->wtxn, ix->blocks, &bk, &v, MDB_RESERVE | put_flags)) == 0) {
            uint32_t h[3] = {max_tf, min_dl, (uint32_t)nb};
            memcpy(v.mv_data, h, 12);
            memcpy((char *)v.mv_data + 12, ix->blk, 12 * nb);
            ix->dirty += tl + v.mv_size + 16;
        }
    }
    if (m)
        return cairn__bm25_mdb_fail(ix, m, "writing a bounds table");
    if (!delta)
        return 0;
    MDB_val k = {tl, key}, d;
    int64_t df = 0;
    m = mdb_get(ix->wtxn, ix->df, &k, &d);
    if (m == 0 && d.mv_size == 4)
        df = get32(d.mv_data);
    else if (m == 0 || m != MDB_NOTFOUND)
        return m ? cairn__bm25_mdb_fail(ix, m, "reading a document frequency")
                 : cairn__bm25_fail(ix, CAIRN_ECORRUPT, "index %s: bad document frequency record",
                                    ix->dir);
    df += delta;
    if (df < 0)
        return cairn__bm25_fail(ix, CAIRN_ECORRUPT,
                                "index %s: document frequency of '%.*s' below zero", ix->dir,
                                (int)tl, (const char *)key);
    if (df == 0) {
        m = mdb_del(ix->wtxn, ix->df, &k, NULL);
        m = m == MDB_NOTFOUND ? 0 : m;
    } else {
        uint32_t v = (uint32_t)df;
        d = (MDB_val){4, &v};
        m = mdb_put(ix->wtxn, ix->df, &k, &d, put_flags);
        ix->dirty += tl + 4 + 16;
    }
    return m ? cairn__bm25_mdb_fail(ix, m, "writing a document frequency") : 0;
}

/* ------------------------------------------------------------------ transactions */

static void (*commit_hook)(unsigned n);

void cairn__bm25_set_commit_hook(void (*fn)(unsigned n)) { commit_hook = fn; }

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

/* What a transaction of the batch ends with: the lens chunks it changed, the counts, a new
 * generation (readers reload the lengths). */
static int write_tail(cairn__bm25 *ix)
{
    int m = 0;
    for (size_t c = 0; !m && c < ix->n_dl / LENS_CHUNK; c++) {
        if (!(ix->dl_dirty[c / 8] >> (c % 8) & 1))
            continue;
        unsigned char k4[4];
        be32((uint32_t)c, k4);
        MDB_val k = {4, k4}, v = {4 * LENS_CHUNK, ix->dl + c * LENS_CHUNK};
        m = mdb_put(ix->wtxn, ix->lens, &k, &v, 0);
    }
    if (!m && ix->dl_dirty)
        memset(ix->dl_dirty, 0, ix->dl_dirty_cap);
    ix->generation++;
    if (m || (m = cairn__bm25_meta_put(ix->wtxn, ix->meta, "n_docs", ix->n_docs)) != 0 ||
        (m = cairn__bm25_meta_put(ix->wtxn, ix->meta, "total_len", ix->total_len)) != 0 ||
        (m = cairn__bm25_meta_put(ix->wtxn, ix->meta, "next_docno", ix->next_docno)) != 0 ||
        (m = cairn__bm25_meta_put(ix->wtxn, ix->meta, "generation", ix->generation)) != 0)
        return cairn__bm25_mdb_fail(ix, m, "writing the counts");
    return 0;
}

/* Clean pages of the map this process has touched count in its RSS though the kernel could
 * drop them: let it, after a commit (nothing of this handle points into the map then). LMDB
 * does not say where its map is (mdb_env_info's address is only that of a fixed map), so the
 * mapping of data.mdb is found in /proc/self/maps by its inode; elsewhere nothing is dropped. */
static void drop_map(cairn__bm25 *ix)
{
    char path[4200], line[4400];
    struct stat st;
    snprintf(path, sizeof path, "%s/data.mdb", ix->dir);
    FILE *f = stat(path, &st) == 0 ? fopen("/proc/self/maps", "r") : NULL;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi, ino;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %lu", &lo, &hi, &ino) == 3 &&
            ino == (unsigned long)st.st_ino && ino != 0)
            madvise((void *)lo, hi - lo, MADV_DONTNEED);
    }
    if (f)
        fclose(f);
}

/* Commits the transaction and opens the next one of the same batch once it holds about a
 * quarter of the memory cap (LMDB keeps a transaction's dirty pages in malloc'd memory until
 * it commits); the first such commit marks the index unfinished. *cur, if not NULL, is a
 * cursor on post, reopened. */
static int maybe_split(cairn__bm25 *ix, MDB_cursor **cur)
{
    if (ix->dirty < ix->mem_cap / 4)
        return 0;
    int m = 0;
    if (ix->n_commits == 0)
        m = cairn__bm25_meta_put(ix->wtxn, ix->meta, "unfinished", 1);
    if (m)
        return cairn__bm25_mdb_fail(ix, m, "marking the index unfinished");
    int rc = write_tail(ix);
    if (rc)
        return rc;
    if (cur && *cur)
        mdb_cursor_close(*cur), *cur = NULL;
    m = mdb_txn_commit(ix->wtxn);
    ix->wtxn = NULL;
    if (m)
        return cairn__bm25_mdb_fail(ix, m, "mdb_txn_commit");
    ix->n_commits++;
    ix->dirty = 0;
    ix->unfinished = 1;
    drop_map(ix);
    if (commit_hook)
        commit_hook(ix->n_commits);
    if ((m = mdb_txn_begin(ix->env, NULL, 0, &ix->wtxn)) != 0) {
        ix->wtxn = NULL;
        return cairn__bm25_mdb_fail(ix, m, "mdb_txn_begin");
    }
    if (cur && (m = mdb_cursor_open(ix->wtxn, ix->post, cur)) != 0) {
        *cur = NULL;
        return cairn__bm25_mdb_fail(ix, m, "mdb_cursor_open");
    }
    return 0;
}

/* The merge of a batch's runs and buffer into the index, term by term in key order: each
 * term's changes gathered from every source (runs in the order written, the buffer last) and
 * applied to its stored blocks by merge_term. */
static int final_merge(cairn__bm25 *ix)
{
    sorted_buf sb = {0};
    size_t nr = ix->n_runs;
    run_rd *rd = calloc(nr + 1, sizeof *rd);
    int rc = rd ? sort_buffer(ix, &sb) : oom(ix);
    for (size_t s = 0; !rc && s < nr; s++) {
        rd[s].f = ((FILE **)ix->runs_v)[s];
        if (fseek(rd[s].f, 0, SEEK_SET) != 0)
            rc = cairn__bm25_fail(ix, CAIRN_EIO, "index %s: rewinding a run file", ix->dir);
        else
            rc = run_head(ix, &rd[s]);
    }
    MDB_cursor *cur = NULL;
    int m;
    if (!rc && (m = mdb_cursor_open(ix->wtxn, ix->post, &cur)) != 0)
        rc = cairn__bm25_mdb_fail(ix, m, "mdb_cursor_open");
    append_state ap = {.last_len = 0};
    if (!rc) {
        MDB_val lk, ld;
        m = mdb_cursor_get(cur, &lk, &ld, MDB_LAST);
        if (m == MDB_NOTFOUND)
            ap.appending = ap.first_build = 1;
        else if (m == 0 && lk.mv_size <= sizeof ap.last) {
            memcpy(ap.last, lk.mv_data, lk.mv_size);
            ap.last_len = lk.mv_size;
        } else {
            rc = m ? cairn__bm25_mdb_fail(ix, m, "reading the last posting")
                   : cairn__bm25_fail(ix, CAIRN_ECORRUPT, "index %s: oversized posting key",
                                      ix->dir);
        }
    }
    unsigned char key[CAIRN__BM25_MAX_TOKEN + 5];
    size_t r = 0, nt = ix->n_terms;
    while (!rc) {
        while (r < nt && sb.start[r + 1] == sb.start[r])
            r++;
        /* the smallest term among the sources */
        const char *t = NULL;
        size_t tl = 0;
        if (r < nt) {
            const term_ent *e = &ix->terms[sb.order[r]];
            t = ix->pool + e->off, tl = e->len;
        }
        for (size_t s = 0; s < nr; s++)
            if (!rd[s].done && (!t || cmp_bytes(rd[s].term, rd[s].tl, t, tl) < 0))
                t = rd[s].term, tl = rd[s].tl;
        if (!t)
            break;
        memcpy(key, t, tl);
        size_t nops = 0;
        for (size_t s = 0; !rc && s < nr; s++) {
            if (rd[s].done || cmp_bytes(rd[s].term, rd[s].tl, (char *)key, tl) != 0)
                continue;
            if (cairn__bm25_grow((void **)&ix->ops, &ix->ops_cap, nops + rd[s].np,
                                 sizeof *ix->ops)) {
                rc = oom(ix);
                break;
            }
            for (uint32_t i = 0; i < rd[s].np; i++) {
                uint32_t v[2];
                if (fread(v, 4, 2, rd[s].f) != 2) {
                    rc = cairn__bm25_fail(ix, CAIRN_EIO, "index %s: reading a run file", ix->dir);
                    break;
                }
                ix->ops[nops++] = (post_op){v[0], v[1], (uint32_t)s};
            }
            if (!rc)
                rc = run_head(ix, &rd[s]);
        }
        if (!rc && r < nt) {
            const term_ent *e = &ix->terms[sb.order[r]];
            if (cmp_bytes(ix->pool + e->off, e->len, (char *)key, tl) == 0) {
                size_t np = sb.start[r + 1] - sb.start[r];
                if (cairn__bm25_grow((void **)&ix->ops, &ix->ops_cap, nops + np, sizeof *ix->ops))
                    rc = oom(ix);
                for (size_t i = 0; !rc && i < np; i++) {
                    const posting *p = &sb.sorted[sb.start[r] + i];
                    ix->ops[nops++] = (post_op){p->docno, p->tf, (uint32_t)nr};
                }
                r++;
            }
        }
        if (rc)
            break;
        for (size_t i = 1; i < nops; i++)
            if (cmp_op(&ix->ops[i - 1], &ix->ops[i]) > 0) {
                qsort(ix->ops, nops, sizeof *ix->ops, cmp_op);
                break;
            }
        rc = merge_term(ix, cur, key, tl, ix->ops, nops, &ap);
        if (!rc)
            rc = maybe_split(ix, &cur);
    }
    if (cur)
        mdb_cursor_close(cur);
    free(rd);
    sorted_free(&sb);
    if (!rc) {
        cairn__bm25_runs_close(ix);
        cairn__bm25_batch_reset(ix);
    }
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
 * of the buffers' 5/8, and LMDB's dirty pages the last quarter (maybe_split). */
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
        int rc = write_run(ix); /* its postings are still in the buffer: a run, then delete */
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
        (rc = write_run(ix)) != 0)
        goto poison;
    if ((rc = maybe_split(ix, NULL)) != 0)
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
    int rc = final_merge(ix), m = 0;
    if (!rc)
        rc = write_tail(ix);
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
        drop_map(ix);
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
