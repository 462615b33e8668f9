/* steps/retrieve_bm25.c - the local retriever: top-k hits from the BM25 index `cairn index`
 * built (steps/bm25.h).
 *
 * The index is opened on first use, not at configuration time, so a pipeline can be set up
 * before `cairn index` has run. A step with a timeout runs in a forked child, and an LMDB
 * environment must not be used across fork(): the handle remembers the pid that opened it and
 * a child opens its own.
 */
#include "steps/retrieve_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const cairn__cfg_field fields[] = {
    {"index", CAIRN__CFG_STR, CAIRN__CFG_AT(cairn__retrieve_cfg, index), .nonempty = 1},
    {NULL},
};

static int setup(const cairn__cfg *r, cairn__retrieve_cfg *c, const char *store_dir)
{
    if (c->index)
        return 0;
    if (!store_dir || !*store_dir)
        return cairn__cfg_fail(r, CAIRN_EJSON, "index",
                               "required when no store directory is given");
    size_t n = strlen(store_dir) + 7;
    if (!(c->index = malloc(n)))
        return cairn__cfg_fail(r, CAIRN_ENOMEM, "index", "out of memory");
    snprintf(c->index, n, "%s/index", store_dir);
    return 0;
}

static int search(cairn__retrieve_cfg *c, const char *query, cairn__bm25_hit **hits, size_t *n,
                  char *err, size_t errlen)
{
    if (c->ix && c->ix_pid != getpid())
        c->ix = NULL; /* inherited across fork(): the parent's to close, not ours to use */
    if (!c->ix) {
        int rc = cairn__bm25_open(c->index, 0, &c->ix, err, errlen);
        if (rc)
            return rc == CAIRN_ENOMEM || rc == CAIRN_EIO ? CAIRN_ETRANSIENT : CAIRN_EPERMANENT;
        c->ix_pid = getpid();
    }
    int rc = cairn__bm25_search(c->ix, query, c->top_k, hits, n);
    if (rc) {
        snprintf(err, errlen, "%s", cairn__bm25_errmsg(c->ix));
        return rc == CAIRN_ECORRUPT ? CAIRN_EPERMANENT : CAIRN_ETRANSIENT;
    }
    return 0;
}

/* Opens the index and closes it again: the step opens its own in the process that runs it. */
static int check(cairn__retrieve_cfg *c, char *err, size_t errlen)
{
    cairn__bm25 *ix = NULL;
    char why[1024];
    int rc = cairn__bm25_open(c->index, 0, &ix, why, sizeof why);
    if (rc)
        snprintf(err, errlen, "retrieve.index: %s", why);
    cairn__bm25_close(ix);
    return rc;
}

static void release(cairn__retrieve_cfg *c)
{
    if (c->ix && c->ix_pid == getpid())
        cairn__bm25_close(c->ix);
    c->ix = NULL;
}

const cairn__retriever cairn__retriever_bm25 = {"bm25", fields, setup, search, check, release};
