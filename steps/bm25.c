/* steps/bm25.c - the BM25 index behind the `retrieve` step: opening and closing it, and the
 * helpers its other files share. bm25_write.c fills the index in batches, bm25_search.c answers
 * queries, textsplit.c holds the tokenizer both use; the LMDB layout is in bm25_impl.h.
 *
 * Opening is where an index written by another cairn is caught: meta records the format and
 * the tokenizer version, and a mismatch is CAIRN_ESCHEMA with a message to rebuild, because
 * replacing a document re-tokenizes its stored text to find its old postings and would remove
 * the wrong ones under another tokenizer, and because format 2's block bounds (which the pruned
 * search needs) cannot be derived from a format-1 index without rewriting it. The map is reserved
 * address space only, tried from large to small so a limited address space still opens.
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
            (rc = cairn__bm25_meta_put(txn, ix->meta, "next_docno", 0)) != 0)
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
    /* opened only now, so that an index of format 1 hears "format", not "no table" */
    what = "mdb_dbi_open";
    if ((rc = mdb_dbi_open(txn, "blocks", writable ? MDB_CREATE : 0, &ix->blocks)) != 0) {
        if (rc != MDB_NOTFOUND)
            goto lmdb_fail;
        mdb_txn_abort(txn);
        mdb_env_close(ix->env);
        snprintf(err, errlen,
                 "index %s: not a retrieval index (no 'blocks' table); rebuild it with `cairn "
                 "index`",
                 dir);
        free(ix);
        return CAIRN_ESCHEMA;
    }
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
    free(ix->doc_terms), free(ix->blk), free(ix->merge), free(ix->dels);
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
