/* steps/retrieve_impl.h - what the retrieve step's files share (internal to steps/): the parsed
 * configuration and the interface of a retriever. retrieve.c reads the settings every retriever
 * has, picks the retriever by "type", builds the query and runs the step; retrieve_bm25.c and
 * retrieve_http.c are one retriever each. Nothing else includes this.
 */
#ifndef CAIRN_STEPS_RETRIEVE_IMPL_H
#define CAIRN_STEPS_RETRIEVE_IMPL_H

#include <pthread.h>
#include <sys/types.h>

#include "common/config.h"
#include "steps/retrieve.h"

typedef struct cairn__retriever cairn__retriever;

struct cairn__retrieve_cfg {
    const cairn__retriever *kind;
    char **fields; /* query_fields */
    size_t n_fields;
    size_t top_k;
    pthread_mutex_t mu; /* one query at a time per configuration */
    /* bm25 */
    char *index;
    cairn__bm25 *ix;
    pid_t ix_pid; /* the process that opened ix: an LMDB handle is not used across fork() */
    /* http */
    char *url, *url_safe, *text_field, *auth_env;
    char *auth; /* Authorization header value, from auth_env; never in messages */
    long timeout_ms;
    uint32_t version; /* cairn__retrieve_cfg_version */
};

/* One retriever: the value of "type" that picks it, the settings only it has (a table over
 * cairn__retrieve_cfg), and what it does with them. */
struct cairn__retriever {
    const char *type;
    const cairn__cfg_field *fields;
    /* After its fields are read: checks and derives what the table cannot (0, or an error
     * written through cairn__cfg_fail). */
    int (*setup)(const cairn__cfg *r, cairn__retrieve_cfg *c, const char *store_dir);
    /* At most top_k hits for a query with tokens; as cairn__retrieve_search() returns. */
    int (*search)(cairn__retrieve_cfg *c, const char *query, cairn__bm25_hit **hits, size_t *n,
                  char *err, size_t errlen);
    /* Whether what the retriever reads is there (cairn__retrieve_cfg_check); NULL: nothing to
     * check before a run. */
    int (*check)(cairn__retrieve_cfg *c, char *err, size_t errlen);
    /* Frees what setup and search made beyond the table's members. */
    void (*release)(cairn__retrieve_cfg *c);
};

extern const cairn__retriever cairn__retriever_bm25; /* retrieve_bm25.c */
extern const cairn__retriever cairn__retriever_http; /* retrieve_http.c */

#endif
