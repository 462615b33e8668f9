/* steps/pipeline.h - the built-in graph `default`: retrieve -> generate -> postprocess ->
 * notify.<target>..., built from a JSON configuration file. */
#ifndef CAIRN_STEPS_PIPELINE_H
#define CAIRN_STEPS_PIPELINE_H

#include <stddef.h>

#include "cairn.h"

typedef struct cairn__pipeline cairn__pipeline;

/* Reads and validates the configuration file and builds the graph. `store_dir` locates the
 * default retrieval index (<store>/index). Every section may also hold "retry" and "timeout_s"
 * (steps/policy.h), which set its step's retry budget and hard timeout. Errors name the file
 * and field ("pipeline.json: generate.temperature: must be a number from 0 to 100") or, for
 * malformed JSON, file:line:column. Returns 0, CAIRN_ENOENT, CAIRN_EJSON, CAIRN_ENOMEM. */
int cairn__pipeline_load(const char *config_path, const char *store_dir, cairn__pipeline **out,
                         char *err, size_t errlen);
void cairn__pipeline_free(cairn__pipeline *p);
/* Checks what the configuration names that must be there before a task may run, so that `run`
 * and `retry` refuse at their start instead of admitting tasks that die at attempt 1: the
 * retrieval index (CAIRN_ENOENT), the model file (CAIRN_ENOENT), a CUDA device for "backend":
 * "cuda" (CAIRN_ENODEVICE). The message names the file and the setting ("pipeline.json:
 * generate.model: /m/x.gguf: No such file or directory"). */
int cairn__pipeline_check(cairn__pipeline *p, char *err, size_t errlen);
cairn_graph *cairn__pipeline_graph(cairn__pipeline *p);

/* For the `cairn` executable: takes "--config FILE" (or CAIRN_CONFIG) out of argv, and if one is
 * given and `load` is set, loads the pipeline (commands that only read the store, such as show
 * or audit, need neither the graph nor the secrets the configuration names). *p stays NULL
 * otherwise. Returns 0 or an error as cairn__pipeline_load, or CAIRN_EINVAL for --config given
 * twice. */
int cairn__pipeline_from_args(int *argc, char **argv, int load, cairn__pipeline **p, char *err,
                              size_t errlen);

#endif
