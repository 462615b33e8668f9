#!/usr/bin/env bash
# examples/sharding/slurm-array.sh - one stream of tasks spread over a Slurm job array: array
# task I owns the tasks `cairn shard` gives to shard I of N, in a store of its own.
#
#   sbatch --array=0-7 examples/sharding/slurm-array.sh tasks.jsonl   (0-based: the shards)
#
# Each array task filters its share of the input and runs it with `consume` (K at once). A task
# always lands in the same shard, so rerunning one array task (after a node failure, a
# preemption) resumes its tasks from their checkpoints and skips what succeeded: nothing is
# generated or sent twice. Outside Slurm it runs as shard $SLURM_ARRAY_TASK_ID of
# $SLURM_ARRAY_TASK_COUNT from the environment (tests/cli/test_shard.c does that).
#
# Settings (environment): CAIRN (the program: cairn, or your own built on cairn_cli_main),
# GRAPH (default: default), STORE_ROOT (a store per shard under it), JOBS (consume --jobs),
# CAIRN_CONFIG (the pipeline configuration, for graph default).
#SBATCH --job-name=cairn
#SBATCH --cpus-per-task=8
#SBATCH --output=cairn-%A_%a.out
set -euo pipefail
tasks=${1:?usage: slurm-array.sh TASKS.jsonl}
: "${SLURM_ARRAY_TASK_ID:?not in a job array (sbatch --array=0-N)}"
: "${SLURM_ARRAY_TASK_COUNT:?not in a job array (sbatch --array=0-N)}"
cairn=${CAIRN:-cairn}
store="${STORE_ROOT:-$PWD/stores}/shard-$SLURM_ARRAY_TASK_ID-of-$SLURM_ARRAY_TASK_COUNT"
mkdir -p "$(dirname "$store")"
# consume's exit code is the job's: 0 all succeeded, 75 some will be retried (rerun the array
# task, or `cairn retry --store` it), 69 some need an operator (`cairn list --status dead`)
"$cairn" shard --of "$SLURM_ARRAY_TASK_COUNT" --index "$SLURM_ARRAY_TASK_ID" "$tasks" |
  "$cairn" consume --graph "${GRAPH:-default}" --jobs "${JOBS:-${SLURM_CPUS_PER_TASK:-4}}" \
    --store "$store" --log-format json
