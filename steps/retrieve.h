/* steps/retrieve.h - the `retrieve` built-in step (compute).
 *
 * Builds a query from fields of the task input and fetches the top-k documents from a local
 * BM25 index (steps/bm25.h, built with `cairn index`) or from an Elasticsearch-compatible HTTP
 * endpoint. Output (msgpack): {"query": "...", "docs": [{"id", "score", "text"}, ...]}, best
 * first. The step only reads: re-running it after a crash is harmless.
 */
#ifndef CAIRN_STEPS_RETRIEVE_H
#define CAIRN_STEPS_RETRIEVE_H

#include <jansson.h>
#include <msgpack.h>
#include <stddef.h>

#include "cairn.h"
#include "steps/bm25.h"

typedef struct cairn__retrieve_cfg cairn__retrieve_cfg;

/* Parses the "retrieve" object of the configuration; one of
 *   {"type": "bm25", "index": "DIR/index", "query_fields": ["title", "keywords"], "top_k": 5}
 *   {"type": "http", "url": "http://127.0.0.1:9200/products/_search",
 *    "query_fields": [...], "top_k": 5, "text_field": "text", "timeout_ms": 5000}
 * "type" defaults to "bm25"; "index" to <store_dir>/index (store_dir may be NULL only when
 * "index" is given); "query_fields" is required (a non-empty array of field names); "top_k"
 * 1..1000 (default 5); "text_field" default "text"; "timeout_ms" 1..600000 (default 5000).
 * Unknown settings, and settings of the other type, are errors. The index is not opened here
 * (it may be built after the pipeline is configured); the first step call opens it.
 * Returns 0, CAIRN_EJSON with err naming the field ("retrieve.top_k: must be ..."),
 * CAIRN_ENOMEM. *out is NULL on failure. */
int cairn__retrieve_cfg_parse(const json_t *cfg, const char *store_dir, cairn__retrieve_cfg **out,
                              char *err, size_t errlen);
/* What must be there before a task may reach the step, checked when `run` or `retry` starts
 * (cairn__pipeline_check): for "bm25", the index, opened once (CAIRN_ENOENT "retrieve.index: no
 * retrieval index at DIR: build it with `cairn index ...`", or the index's own error); an
 * "http" service is the step's to reach (it may be down for a while: transient). */
int cairn__retrieve_cfg_check(cairn__retrieve_cfg *c, char *err, size_t errlen);
/* The step version: the section without its tuning settings (http's "timeout_ms"; see
 * common/config.h). */
uint32_t cairn__retrieve_cfg_version(const cairn__retrieve_cfg *c);
/* Frees the configuration and closes its index. NULL is a no-op. */
void cairn__retrieve_cfg_free(cairn__retrieve_cfg *c);

/* The query text: the input's query_fields values joined by single spaces, in the configured
 * order. A string field is used as is, an array contributes its strings (joined by spaces);
 * absent and nil fields (and nil elements) are skipped. *query is malloc'd (possibly "").
 * Returns 0, CAIRN_EPERMANENT with err naming the field ("input field 'keywords[1]' must be a
 * string"), CAIRN_ENOMEM. */
int cairn__retrieve_query(const cairn__retrieve_cfg *c, const msgpack_object *input, char **query,
                          char *err, size_t errlen);

/* Runs the query against the configured retriever: at most top_k hits, best first (free with
 * cairn__bm25_hits_free; `extra` is always NULL for HTTP hits). A query without tokens returns no
 * hits without asking the backend. Returns 0, or
 *   CAIRN_ETRANSIENT  worth retrying: connection refused, timeout, HTTP 408/429/5xx, an index
 *                     I/O error, out of memory
 *   CAIRN_EPERMANENT  not: the index is missing (err names the path and says to run `cairn
 *                     index`) or corrupt, HTTP 4xx, a malformed response (err says what is
 *                     wrong, e.g. "hits.hits[1]._source.text is not a string")
 * Serialized internally (one query at a time per configuration); safe after fork(). */
int cairn__retrieve_search(cairn__retrieve_cfg *c, const char *query, cairn__bm25_hit **hits,
                           size_t *n, char *err, size_t errlen);

/* The step (user = the cairn__retrieve_cfg): cairn__retrieve_query on the task input, then
 * cairn__retrieve_search; packs {"query", "docs": [{"id", "score", "text"}]}. A bad input
 * field or a permanent search error -> CAIRN_STEP_PERMANENT, a transient one ->
 * CAIRN_STEP_TRANSIENT, each with the message set on ctx ("retrieve: ..."). */
cairn_step_result cairn__retrieve_step(cairn_ctx *ctx, void *cfg);

#endif
