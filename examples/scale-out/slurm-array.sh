#!/usr/bin/env bash
# One weir shard per Slurm array task; SLURM_ARRAY_TASK_ID is the shard.
# Submit with `sbatch slurm-array.sh pipeline.yaml`, then the merge once the
# array is done:
#   jobid=$(sbatch --parsable slurm-array.sh pipeline.yaml)
#   sbatch --dependency=afterok:$jobid --wrap "weir merge pipeline.yaml --shards 4"
# A task requeued after a node failure carries its shard on (`--resume`).
# A throttled array (`--array=0-99%10`) runs 10 tasks at once: add
# `--shards-at-once 10`, and a requests_per_minute the tasks share is divided
# among those 10 rather than all 100.
#SBATCH --job-name=weir
#SBATCH --array=0-3
#SBATCH --cpus-per-task=2
#SBATCH --requeue
set -u
pipeline=${1:?give the pipeline file}
weir run "$pipeline" --shard "$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT" --resume
code=$?
# 2: the shard finished with rows set aside (on_error); that is done too.
[ "$code" -eq 0 ] || [ "$code" -eq 2 ]
