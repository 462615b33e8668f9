/* steps/bm25.c - the BM25 index behind the `retrieve` step: opening and closing it, and the
 * helpers its other files share. bm25_write.c fills the index in batches, bm25_search.c answers
 * queries, textsplit.c holds the tokenizer both use; the LMDB layout is in bm25_impl.h.
 *
 * Opening is where an index written by another cairn is caught: meta records the format and
 * the tokenizer version, and a mismatch is CAIRN_ESCHEMA with a message to rebuild, because
 * replacing a document re-tokenizes its stored text to find its old postings and would remove
 * the wrong ones under another tokenizer, and because format 2's block bounds (which the pruned
 * search needs) cannot be derived from a format-1 index without rewriting it, nor format 3's
 * compact blocks from format 2's raw ones. The map is reserved address space only, tried from
 * large to small so a limited address space still opens.
 *
 * The block codec lives here too: both the writer and the searcher use it. Bit-packing with
 * one width per block (rather than a varint per value) keeps decoding a branch-free loop over
 * 128 values, which the pruned search runs once per block it enters.
 */
#include "steps/bm25.h"
#include "steps/bm25_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/mdb.h"

/* ------------------------------------------------------------------ helpers */

int cairn__bm25_fail(cairn__bm25 *ix, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ix->err, sizeof ix->err, fmt, ap);
    va_end(ap);
    return code;
}

/* Translates an LMDB code at the boundary, keeping LMDB's text in the message. */
int cairn__bm25_mdb_fail(cairn__bm25 *ix, int rc, const char *what)
{
    return cairn__bm25_fail(ix, cairn__mdb_code(rc), "index %s: %s: %s", ix->dir, what,
                            mdb_strerror(rc));
}

static int mkdir_p(const char *dir)
{
    char p[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof p) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0)
            continue;
        char c = p[i];
        p[i] = 0;
        if (mkdir(p, 0700) != 0 && errno != EEXIST)
            return -1;
        p[i] = c;
    }
    struct stat st;
    if (stat(dir, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

int cairn__bm25_meta_get(MDB_txn *txn, MDB_dbi dbi, const char *key, uint64_t *v)
{
    MDB_val k = {strlen(key), (void *)key}, d;
    int rc = mdb_get(txn, dbi, &k, &d);
    if (rc)
        return rc;
    if (d.mv_size != 8)
        return MDB_CORRUPTED;
    memcpy(v, d.mv_data, 8);
    return 0;
}

int cairn__bm25_meta_put(MDB_txn *txn, MDB_dbi dbi, const char *key, uint64_t v)
{
    MDB_val k = {strlen(key), (void *)key}, d = {8, &v};
    return mdb_put(txn, dbi, &k, &d, 0);
}

int cairn__bm25_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* ------------------------------------------------------------------ block codec */

static unsigned bits_of(uint32_t v)
{
    unsigned b = 0;
    while (v)
        b++, v >>= 1;
    return b;
}

/* ORs v (b <= 32 bits) in at bit pos of a zeroed buffer with 8 bytes of slack. */
static inline void put_bits(unsigned char *p, uint64_t pos, unsigned b, uint32_t v)
{
    if (!b)
        return;
    uint64_t w = (uint64_t)v << (pos & 7);
    unsigned char *q = p + (pos >> 3);
    for (unsigned i = 0; i < 5 && w; i++, w >>= 8)
        q[i] |= (unsigned char)w;
}

size_t cairn__bm25_block_encode(const uint32_t *docno, const uint32_t *tf, uint32_t n,
                                unsigned char *out)
{
    uint32_t maxg = 0, maxt = 0;
    for (uint32_t i = 1; i < n; i++) {
        uint32_t g = docno[i] - docno[i - 1] - 1;
        maxg = g > maxg ? g : maxg;
    }
    for (uint32_t i = 0; i < n; i++)
        maxt = tf[i] - 1 > maxt ? tf[i] - 1 : maxt;
    unsigned bd = bits_of(maxg), bt = bits_of(maxt);
    size_t bytes = ((uint64_t)(n - 1) * bd + (uint64_t)n * bt + 7) / 8;
    memset(out, 0, 7 + bytes + 8 > BLOCK_MAX_BYTES + 8 ? BLOCK_MAX_BYTES + 8 : 7 + bytes + 8);
    out[0] = (unsigned char)(n - 1), out[1] = (unsigned char)bd, out[2] = (unsigned char)bt;
    for (int i = 0; i < 4; i++)
        out[3 + i] = (unsigned char)(docno[0] >> (8 * i));
    uint64_t pos = 0;
    for (uint32_t i = 1; i < n; i++, pos += bd)
        put_bits(out + 7, pos, bd, docno[i] - docno[i - 1] - 1);
    for (uint32_t i = 0; i < n; i++, pos += bt)
        put_bits(out + 7, pos, bt, tf[i] - 1);
    return 7 + bytes;
}

/* n values of b bits from bit pos of p (padded: 8 readable bytes past the data), plus add. */
static void unpack(const unsigned char *p, uint64_t pos, unsigned b, uint32_t n, uint32_t *out,
                   uint32_t add)
{
    const uint64_t mask = b == 32 ? 0xffffffffu : ((uint64_t)1 << b) - 1;
    for (uint32_t i = 0; i < n; i++, pos += b)
        out[i] = (uint32_t)((le64(p + (pos >> 3)) >> (pos & 7)) & mask) + add;
}

uint32_t cairn__bm25_block_docnos(const void *v, size_t len, uint32_t *docno, block_view *bv)
{
    const unsigned char *p = v;
    if (len < 7 || len > BLOCK_MAX_BYTES || p[1] > 32 || p[2] > 32)
        return 0;
    uint32_t n = (uint32_t)p[0] + 1;
    unsigned bd = p[1], bt = p[2];
    if (n > BLOCK_POSTINGS || 7 + ((uint64_t)(n - 1) * bd + (uint64_t)n * bt + 7) / 8 != len)
        return 0;
    memcpy(bv->buf, p + 7, len - 7); /* padded for 8-byte loads */
    memset(bv->buf + len - 7, 0, 8);
    bv->tf_pos = (uint64_t)(n - 1) * bd, bv->bt = bt;
    bv->tf_mask = bt == 32 ? 0xffffffffu : ((uint64_t)1 << bt) - 1;
    uint64_t d = (uint32_t)p[3] | (uint32_t)p[4] << 8 | (uint32_t)p[5] << 16 | (uint32_t)p[6] << 24;
    const uint64_t mask = bd == 32 ? 0xffffffffu : ((uint64_t)1 << bd) - 1;
    docno[0] = (uint32_t)d;
    uint64_t pos = 0;
    for (uint32_t i = 1; i < n; i++, pos += bd) { /* a sum past 2^32 is not a block */
        d += ((le64(bv->buf + (pos >> 3)) >> (pos & 7)) & mask) + 1;
        docno[i] = (uint32_t)d;
    }
    return d > UINT32_MAX ? 0 : n;
}

uint32_t cairn__bm25_block_decode(const void *v, size_t len, uint32_t *docno, uint32_t *tf)
{
    block_view bv;
    uint32_t n = cairn__bm25_block_docnos(v, len, docno, &bv);
    if (n)
        unpack(bv.buf, bv.tf_pos, bv.bt, n, tf, 1);
    for (uint32_t i = 0; i < n; i++)
        if (tf[i] == 0) /* tf-1 of 2^32-1 wrapped */
            return 0;
    return n;
}

/* ------------------------------------------------------------------ document lengths */

int cairn__bm25_load_dl(cairn__bm25 *ix, MDB_txn *txn)
{
    uint64_t gen = 0;
    int m = cairn__bm25_meta_get(txn, ix->meta, "generation", &gen);
    if (m)
        return cairn__bm25_mdb_fail(ix, m == MDB_NOTFOUND ? MDB_CORRUPTED : m,
                                    "reading the generation");
    if (gen == ix->dl_gen)
        return 0;
    MDB_cursor *cur;
    if ((m = mdb_cursor_open(txn, ix->lens, &cur)) != 0)
        return cairn__bm25_mdb_fail(ix, m, "mdb_cursor_open");
    MDB_val k, d;
    ix->n_dl = 0;
    int rc = 0;
    for (m = mdb_cursor_get(cur, &k, &d, MDB_FIRST); m == 0;
         m = mdb_cursor_get(cur, &k, &d, MDB_NEXT)) {
        const unsigned char *kb = k.mv_data;
        size_t c = k.mv_size == 4
                       ? (size_t)kb[0] << 24 | (size_t)kb[1] << 16 | (size_t)kb[2] << 8 | kb[3]
                       : 0;
        if (k.mv_size != 4 || d.mv_size != 4 * LENS_CHUNK || c * LENS_CHUNK < ix->n_dl) {
            rc = cairn__bm25_fail(ix, CAIRN_ECORRUPT, "index %s: malformed lens record", ix->dir);
            break;
        }
        size_t end = (c + 1) * LENS_CHUNK;
        if (cairn__bm25_grow((void **)&ix->dl, &ix->dl_cap, end, 4)) {
            rc = cairn__bm25_fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir);
            break;
        }
        memset(ix->dl + ix->n_dl, 0, (c * LENS_CHUNK - ix->n_dl) * 4);
        memcpy(ix->dl + c * LENS_CHUNK, d.mv_data, 4 * LENS_CHUNK);
        ix->n_dl = end;
    }
    mdb_cursor_close(cur);
    if (!rc && m != MDB_NOTFOUND)
        rc = cairn__bm25_mdb_fail(ix, m, "reading the document lengths");
    ix->dl_gen = rc ? UINT64_MAX : gen;
    return rc;
}

int cairn__bm25_unfinished_msg(const char *dir, char *err, size_t errlen)
{
    snprintf(err, errlen,
             "index %s: a build is writing it, or one was interrupted before it finished: wait "
             "for it, or run `cairn index` again (it rebuilds the index)",
             dir);
    return CAIRN_ETRANSIENT;
}

/* ------------------------------------------------------------------ open / close */

int cairn__bm25_open(const char *dir, int writable, cairn__bm25 **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!dir || !*dir) {
        snprintf(err, errlen, "index: empty directory name");
        return CAIRN_EINVAL;
    }
    cairn__bm25 *ix = calloc(1, sizeof *ix);
    if (!ix) {
        snprintf(err, errlen, "index %s: out of memory", dir);
        return CAIRN_ENOMEM;
    }
    snprintf(ix->dir, sizeof ix->dir, "%s", dir);
    ix->writable = writable;
    ix->flush_at = FLUSH_POSTINGS;
    ix->mem_cap = CAIRN__BM25_DEFAULT_MEMORY;
    ix->prune_min = PRUNE_MIN_POSTINGS;
    ix->dl_gen = UINT64_MAX;
    const char *ex = getenv("CAIRN_BM25_EXHAUSTIVE");
    ix->exhaustive = ex && !strcmp(ex, "1");
    int rc;
    char data[4200];
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    if (writable) {
        if (mkdir_p(dir) != 0) {
            snprintf(err, errlen, "index %s: cannot create the directory: %s", dir,
                     strerror(errno));
            free(ix);
            return CAIRN_EIO;
        }
    } else if (access(data, F_OK) != 0) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR)
            snprintf(err, errlen,
                     "no retrieval index at %s: build it with `cairn index --store DIR --corpus "
                     "FILE.jsonl` (the index lives in DIR/index)",
                     dir);
        else
            snprintf(err, errlen, "index %s: %s", data, strerror(e));
        free(ix);
        return e == ENOENT || e == ENOTDIR ? CAIRN_ENOENT : CAIRN_EIO;
    }
    MDB_txn *txn = NULL;
    const char *what = "mdb_env_open";
    /* The map is only reserved address space; the file grows as pages are written. 64 GiB
     * holds corpora far beyond what one machine would index with this engine; where the
     * address space is limited (ulimit -v, valgrind, 32-bit) smaller maps are tried. LMDB
     * raises a map below the data already written to fit it. */
    static const unsigned map_gib[] = {64, 16, 4, 1};
    for (size_t i = 0; i < sizeof map_gib / sizeof *map_gib; i++) {
        if (sizeof(size_t) < 8 && map_gib[i] > 1)
            continue;
        if ((rc = mdb_env_create(&ix->env)) != 0) {
            what = "mdb_env_create";
            goto lmdb_fail;
        }
        mdb_env_set_maxdbs(ix->env, 8);
        mdb_env_set_mapsize(ix->env, (size_t)map_gib[i] << 30);
        rc = mdb_env_open(ix->env, dir, MDB_NOTLS | MDB_NORDAHEAD | (writable ? 0 : MDB_RDONLY),
                          0600);
        if (rc == 0)
            break;
        mdb_env_close(ix->env); /* a failed open leaves the handle unusable */
        ix->env = NULL;
        if (rc != ENOMEM && rc != EINVAL)
            break;
    }
    if (rc)
        goto lmdb_fail;
    what = "mdb_txn_begin";
    if ((rc = mdb_txn_begin(ix->env, NULL, writable ? 0 : MDB_RDONLY, &txn)) != 0)
        goto lmdb_fail;
    struct {
        const char *name;
        MDB_dbi *dbi;
    } dbs[] = {{"meta", &ix->meta},
               {"post", &ix->post},
               {"df", &ix->df},
               {"docs", &ix->docs},
               {"ids", &ix->ids}};
    what = "mdb_dbi_open";
    for (size_t i = 0; i < sizeof dbs / sizeof *dbs; i++) {
        rc = mdb_dbi_open(txn, dbs[i].name, writable ? MDB_CREATE : 0, dbs[i].dbi);
        if (rc == MDB_NOTFOUND) {
            mdb_txn_abort(txn);
            mdb_env_close(ix->env);
            snprintf(err, errlen,
                     "index %s: not a retrieval index (no '%s' table); rebuild it with `cairn "
                     "index`",
                     dir, dbs[i].name);
            free(ix);
            return CAIRN_ESCHEMA;
        }
        if (rc)
            goto lmdb_fail;
    }
    uint64_t fmt = 0, tok = 0;
    rc = cairn__bm25_meta_get(txn, ix->meta, "format", &fmt);
    if (rc == MDB_NOTFOUND && writable) {
        what = "writing the format";
        if ((rc = cairn__bm25_meta_put(txn, ix->meta, "format", FORMAT_VERSION)) != 0 ||
            (rc = cairn__bm25_meta_put(txn, ix->meta, "tokenizer",
                                       CAIRN__BM25_TOKENIZER_VERSION)) != 0 ||
            (rc = cairn__bm25_meta_put(txn, ix->meta, "n_docs", 0)) != 0 ||
            (rc = cairn__bm25_meta_put(txn, ix->meta, "total_len", 0)) != 0 ||
            (rc = cairn__bm25_meta_put(txn, ix->meta, "next_docno", 0)) != 0 ||
            (rc = cairn__bm25_meta_put(txn, ix->meta, "generation", 0)) != 0)
            goto lmdb_fail;
        fmt = FORMAT_VERSION, tok = CAIRN__BM25_TOKENIZER_VERSION;
    } else if (rc == 0) {
        rc = cairn__bm25_meta_get(txn, ix->meta, "tokenizer", &tok);
    }
    if (rc && rc != MDB_NOTFOUND) {
        what = "reading the format";
        goto lmdb_fail;
    }
    if (fmt != FORMAT_VERSION || tok != CAIRN__BM25_TOKENIZER_VERSION) {
        mdb_txn_abort(txn);
        mdb_env_close(ix->env);
        snprintf(err, errlen,
                 "index %s: written in format %llu with tokenizer %llu; this cairn reads format "
                 "%u with tokenizer %u: rebuild it with `cairn index` into an empty directory",
                 dir, (unsigned long long)fmt, (unsigned long long)tok, FORMAT_VERSION,
                 CAIRN__BM25_TOKENIZER_VERSION);
        free(ix);
        return CAIRN_ESCHEMA;
    }
    /* opened only now, so that an index of an older format hears "format", not "no table" */
    what = "mdb_dbi_open";
    static const char *const late[] = {"blocks", "lens"};
    MDB_dbi *late_dbi[] = {&ix->blocks, &ix->lens};
    for (size_t i = 0; i < 2; i++) {
        if ((rc = mdb_dbi_open(txn, late[i], writable ? MDB_CREATE : 0, late_dbi[i])) == 0)
            continue;
        if (rc != MDB_NOTFOUND)
            goto lmdb_fail;
        mdb_txn_abort(txn);
        mdb_env_close(ix->env);
        snprintf(err, errlen,
                 "index %s: not a retrieval index (no '%s' table); rebuild it with `cairn "
                 "index`",
                 dir, late[i]);
        free(ix);
        return CAIRN_ESCHEMA;
    }
    /* a batch too large for one transaction marks the index while it writes; a reader then
     * has nothing whole to read (a writer may: `cairn index` rebuilds it) */
    uint64_t unfinished = 0;
    rc = cairn__bm25_meta_get(txn, ix->meta, "unfinished", &unfinished);
    if (rc && rc != MDB_NOTFOUND) {
        what = "reading the meta table";
        goto lmdb_fail;
    }
    if (!writable && unfinished) {
        mdb_txn_abort(txn);
        mdb_env_close(ix->env);
        free(ix);
        return cairn__bm25_unfinished_msg(dir, err, errlen);
    }
    ix->unfinished = unfinished != 0;
    what = "mdb_txn_commit";
    rc = mdb_txn_commit(txn); /* also read-only: an aborted txn would close the dbi handles */
    txn = NULL;
    if (rc)
        goto lmdb_fail;
    *out = ix;
    return 0;

lmdb_fail:
    if (txn)
        mdb_txn_abort(txn);
    if (ix->env)
        mdb_env_close(ix->env);
    snprintf(err, errlen, "index %s: %s: %s", dir, what, mdb_strerror(rc));
    free(ix);
    return rc == ENOMEM                                      ? CAIRN_ENOMEM
           : rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH ? CAIRN_ESCHEMA
                                                             : CAIRN_EIO;
}

void cairn__bm25_close(cairn__bm25 *ix)
{
    if (!ix)
        return;
    cairn__bm25_abort(ix);
    if (ix->rtxn)
        mdb_txn_abort(ix->rtxn);
    mdb_env_close(ix->env);
    free(ix->score), free(ix->stamp), free(ix->touched);
    free(ix->pool), free(ix->terms), free(ix->slots), free(ix->posts), free(ix->pending);
    free(ix->doc_terms), free(ix->blk), free(ix->merge), free(ix->dels), free(ix->ops);
    free(ix->dl), free(ix->dl_dirty), free(ix->runs_v);
    free(ix);
}

const char *cairn__bm25_errmsg(const cairn__bm25 *ix) { return ix ? ix->err : ""; }

void cairn__bm25_set_prune_min(cairn__bm25 *ix, uint64_t n) { ix->prune_min = n; }

void cairn__bm25_set_flush_postings(cairn__bm25 *ix, size_t n)
{
    ix->flush_at = n ? n : FLUSH_POSTINGS;
}

void cairn__bm25_set_memory(cairn__bm25 *ix, size_t bytes)
{
    ix->mem_cap = bytes ? bytes : CAIRN__BM25_DEFAULT_MEMORY;
}

size_t cairn__bm25_batch_peak(const cairn__bm25 *ix) { return ix->mem_peak; }

int cairn__bm25_is_unfinished(const cairn__bm25 *ix) { return ix->unfinished; }
