#!/usr/bin/env bash
# Goodput of one run against N shards run at once on one endpoint (the
# test LLM server, a test tool), neither told its limits. By default the
# server is capped: it answers 429 beyond CAPACITY requests at once, with
# `Retry-After: 0`. SERVER_ARGS adds flags of the test server
# (`--retry-after 1`; `--requests-per-minute 6000` for a provider's rate
# limit, with CAPACITY 0 for no cap). Prints rows/s of each and their ratio.
# STAGGER_MS starts the shards that far apart, as a scheduler starting pods
# one after another does; WEIR runs another build; KEEP_WORK=1 keeps the
# pipelines, logs and audit databases.
#   bench/shards.sh [ROWS] [SHARDS] [CAPACITY] [LATENCY_MS] [STAGGER_MS]
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${1:-4000}
shards=${2:-4}
capacity=${3:-32}
latency=${4:-100}
stagger=${5:-0}
# shellcheck source=bench/common.sh
source bench/common.sh
build_weir_and_test_server
make_work_dir
port=18300
server_args=(--port "$port" --latency-ms "$latency")
if ((capacity > 0)); then server_args+=(--capacity "$capacity"); fi
# shellcheck disable=SC2206 # SERVER_ARGS is a list of flags, split on purpose
server_args+=(${SERVER_ARGS:-})
# Each of the two runs gets a server of its own, started afresh: a rate
# window the one run spent would otherwise leave the shards none of the
# room it began with.
start_server
write_rows_and_pipelines "$work" "$rows" "$port" 256 single sharded
export OPENAI_API_KEY=test
start=$(date +%s.%N)
"$weir" run "$work/single.yaml" --no-progress 2>"$work/single.log"
single=$(python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$start" "$(date +%s.%N)")
stop_server
start_server
start=$(date +%s.%N)
pids=()
for ((i = 0; i < shards; i++)); do
  "$weir" run "$work/sharded.yaml" --shard "$i/$shards" --no-progress 2>"$work/shard-$i.log" &
  pids+=($!)
  if ((stagger > 0)); then sleep "$((stagger / 1000)).$(printf %03d $((stagger % 1000)))"; fi
done
for pid in "${pids[@]}"; do wait "$pid"; done
"$weir" merge "$work/sharded.yaml" --shards "$shards" >/dev/null
sharded=$(python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$start" "$(date +%s.%N)")
cmp "$work/single/out.csv" "$work/sharded/out.csv"
python3 - "$rows" "$single" "$sharded" "$shards" "$capacity" "$latency" "${SERVER_ARGS:-}" <<'PY'
import sys
rows, single, sharded = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
shards, capacity, latency, extra = sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
if capacity > 0:
    ideal = rows * latency / 1000 / capacity
    print(f"capped server ({capacity}) {extra}, {rows} rows, ideal {ideal:.1f} s")
    goodput = lambda wall: f"  goodput {ideal / wall:5.1%}"
else:
    print(f"server {extra}, {rows} rows")
    goodput = lambda wall: ""
print(f"  one run      {single:6.1f} s  {rows / single:7.1f} rows/s{goodput(single)}")
print(f"  {shards} shards     {sharded:6.1f} s  {rows / sharded:7.1f} rows/s{goodput(sharded)}  (merge included; outputs identical)")
print(f"  shards / one run: {single / sharded:.2f}x throughput")
PY
# Each run's own account: requests sent and 429s met, its adaptive limit's
# peak, and its wall time from its own start (the spread is the shards' tail).
for log in "$work"/single.log "$work"/shard-*.log; do
  printf '  %-12s' "$(basename "$log" .log)"
  grep -E '^(run|shard) .* in [0-9.]+ s|endpoint llm:|concurrency limit' "$log" \
    | sed -E 's/^ +//; s/\(([0-9.]+) rows\/s\)//' | tr '\n' ' ' | cut -c1-230
  echo
done
