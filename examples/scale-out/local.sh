#!/usr/bin/env bash
# Runs a pipeline as N shards on this machine, all at once, then merges them:
#   examples/scale-out/local.sh PIPELINE N
# What the schedulers' scripts here do, without a scheduler.
set -u
pipeline=${1:?give the pipeline file}
shards=${2:?give the number of shards}
weir=${WEIR:-weir}
pids=()
for ((i = 0; i < shards; i++)); do
  "$weir" run "$pipeline" --shard "$i/$shards" --resume --no-progress &
  pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do
  wait "$pid"
  code=$?
  [ "$code" -eq 0 ] || [ "$code" -eq 2 ] || failed=1
done
[ "$failed" -eq 0 ] || { echo "a shard failed; run this again to resume it" >&2; exit 1; }
"$weir" merge "$pipeline" --shards "$shards"
