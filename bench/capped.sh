#!/usr/bin/env bash
# One run against the test LLM server (a test tool) capped at CAPACITY
# requests at once, weir not told the cap: wall time against the ideal
# (ROWS x LATENCY_MS / CAPACITY), calls per row from the audit database, and
# the limit's decisions. Small caps are where probing the edge costs most:
# each refused probe is a call, and a cap of 4 serves few rows between
# probes. SERVER_ARGS adds flags of the test server (`--retry-after 1` by
# default); WEIR runs another build; RUNS repeats the run; KEEP_WORK=1
# keeps the pipeline, logs and audit database.
#   bench/capped.sh [ROWS] [CAPACITY] [LATENCY_MS] [POOL_SIZE]
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${1:-300}
capacity=${2:-4}
latency=${3:-200}
pool=${4:-64}
# shellcheck source=bench/common.sh
source bench/common.sh
build_weir_and_test_server
make_work_dir
port=18310
write_rows_and_pipelines "$work" "$rows" "$port" "$pool" pipeline
# shellcheck disable=SC2206 # SERVER_ARGS is a list of flags, split on purpose
server_args=(--port "$port" --latency-ms "$latency" --capacity "$capacity" ${SERVER_ARGS:---retry-after 1})
ideal=$(python3 -c "print(f'{$rows * $latency / 1000 / $capacity:.2f}')")
echo "capped server ($capacity at once, ${latency} ms, ${server_args[*]:6}), $rows rows, pool_size $pool, ideal ${ideal} s"
for ((run = 1; run <= ${RUNS:-1}; run++)); do
  start_server
  rm -rf "$work"/pipeline
  start=$(date +%s.%N)
  (cd "$work" && "$weir" run pipeline.yaml --no-progress 2>run.log)
  end=$(date +%s.%N)
  stop_server
  python3 - "$work" "$rows" "$start" "$end" "$ideal" <<'PY'
import sqlite3, sys
work, rows, start, end, ideal = sys.argv[1], int(sys.argv[2]), *map(float, sys.argv[3:])
calls = sqlite3.connect(f"file:{work}/pipeline/weir-audit.sqlite?mode=ro", uri=True).execute("select count(*) from calls").fetchone()[0]
wall = end - start
print(f"  {wall:6.2f} s  goodput {ideal / wall:5.1%}  {calls / rows:.3f} calls per row ({calls - rows} refused)")
PY
  (cd "$work" && "$weir" runs 1 --audit pipeline/weir-audit.sqlite | grep -E 'concurrency limit|last limit decision' | sed 's/^ */    /')
done
