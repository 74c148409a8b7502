# Shared by the scripts in bench/ that run the `weir` binary against the
# test LLM server (a test tool, not a model); sourced, not run.

# Builds both; sets `target` and `weir` (WEIR runs another build).
build_weir_and_test_server() {
  cargo build --release -q -p weir
  cargo build --release -q -p weir-test-llm-server
  target=${CARGO_TARGET_DIR:-$PWD/target}
  weir=${WEIR:-$target/release/weir}
}

# Sets `work` to a new directory, removed at exit unless KEEP_WORK is set
# (then its path is said), and stops the test server at exit.
make_work_dir() {
  work=$(mktemp -d)
  trap 'kill $server 2>/dev/null || true; if [[ -n ${KEEP_WORK:-} ]]; then echo "work files in $work"; else rm -rf "$work"; fi' EXIT
}

# Starts the test server with `server_args` (which must hold `--port
# "$port"`), sets `server` to its pid and waits until it listens.
start_server() {
  "$target/release/weir-test-llm-server" "${server_args[@]}" >/dev/null &
  server=$!
  for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
}

# Stops the test server `start_server` started.
stop_server() {
  kill "$server"
  wait "$server" 2>/dev/null || true
}

# Writes DIR/in.csv (id,text; ROWS rows) and, for each NAME after POOL,
# DIR/NAME.yaml: a one-node `llm` pipeline over it against the test server
# on PORT, `pool_size: POOL`, written to NAME/out.csv.
#   write_rows_and_pipelines DIR ROWS PORT POOL NAME...
write_rows_and_pipelines() {
  python3 - "$@" <<'PY'
import sys
work, rows, port, pool, names = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
with open(f"{work}/in.csv", "w") as f:
    f.write("id,text\n")
    for i in range(rows):
        f.write(f"{i},review {i}: it was fine\n")
for name in names:
    with open(f"{work}/{name}.yaml", "w") as f:
        f.write(f"""source:
  path: in.csv
endpoints:
  llm:
    base_url: http://127.0.0.1:{port}/v1
    api_key: test
    pool_size: {pool}
transforms:
  - name: ask
    component: llm
    endpoints: [llm]
    options:
      template: "{{{{ row.text }}}}"
sinks:
  - path: {name}/out.csv
""")
PY
}
