/* steps/bm25_merge.c - how a write batch reaches the index (see bm25_impl.h for the layout):
 * its buffer sorted into run files, every run and the buffer merged once at commit, and the
 * transactions a large batch commits as it goes. bm25_write.c fills the buffer.
 *
 * Why runs rather than merging each full buffer into LMDB: a second merge would insert into
 * the middle of every list the first wrote, splitting the full pages MDB_APPEND had made
 * (format 2 grew superlinearly that way: 4x Xapian's size at 1M documents); with one merge in
 * key order a first build appends every key, so it never splits a page whatever its size, and
 * a later batch rewrites only the blocks it changes (each touched term's last, when it only
 * adds documents) and appends after them. Keying chunks by (term, first docno) instead would
 * still insert every later chunk mid-tree.
 *
 * A docno's changes are applied in the order they were made: runs in the order written, the
 * buffer last, and in each a delete before an add (bm25_write.c turns the buffer into a run
 * before deleting a document whose postings it still holds). Every term the merge touches gets
 * its bounds table patched (merge_term), so the bounds the pruned search trusts always
 * describe the committed postings.
 *
 * Memory: LMDB keeps a transaction's dirty pages in malloc'd memory until it commits, so a
 * batch past a quarter of the memory cap commits and goes on in a new transaction, the index
 * marked unfinished until its last commit (cairn__bm25_maybe_split).
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
int cairn__bm25_write_run(cairn__bm25 *ix)
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

/* What a transaction of the batch ends with: the lens chunks it changed, the counts, a new
 * generation (readers reload the lengths). */
int cairn__bm25_write_tail(cairn__bm25 *ix)
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
void cairn__bm25_drop_map(cairn__bm25 *ix)
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
int cairn__bm25_maybe_split(cairn__bm25 *ix, MDB_cursor **cur)
{
    if (ix->dirty < ix->mem_cap / 4)
        return 0;
    int m = 0;
    if (ix->n_commits == 0)
        m = cairn__bm25_meta_put(ix->wtxn, ix->meta, "unfinished", 1);
    if (m)
        return cairn__bm25_mdb_fail(ix, m, "marking the index unfinished");
    int rc = cairn__bm25_write_tail(ix);
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
    cairn__bm25_drop_map(ix);
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
int cairn__bm25_final_merge(cairn__bm25 *ix)
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
            rc = cairn__bm25_maybe_split(ix, &cur);
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
