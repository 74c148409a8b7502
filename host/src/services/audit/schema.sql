-- weir audit database. One file holds many runs; every table is keyed by run.
-- Tables written once per row or call are WITHOUT ROWID: one B-tree each
-- instead of a table and its key's index. Payloads are the exception: their
-- bodies are large and their keys random, which suits a rowid table.
-- Hashes are SHA-256, over RFC 8785 canonical JSON where the data is JSON: hex
-- text in the tables written once per run or segment, 32 bytes (BLOB) in the
-- ones written per row (since schema 7; `hex()` shows them, `x'…'` matches
-- them), where they were most of the size. What is not a SHA-256 in
-- lowercase hex stays text.
-- Times are milliseconds since the Unix epoch. Secrets are never stored: an
-- endpoint's API key appears only as a fingerprint. AUDIT.md describes it all.

CREATE TABLE IF NOT EXISTS runs (
    run_id          INTEGER PRIMARY KEY,
    pipeline_path   TEXT NOT NULL,      -- absolute
    config_sha256   TEXT NOT NULL,      -- of the pipeline file as written (before ${VAR} interpolation)
    -- Absolute since schema 5; a run recorded before may name them relative
    -- to the directory it was started from.
    source_path     TEXT NOT NULL,
    sinks_json      TEXT NOT NULL,      -- {"sinks": [paths], "on_error": [paths]}
    weir_version    TEXT NOT NULL,
    started_at_ms   INTEGER NOT NULL,
    finished_at_ms  INTEGER,
    status          TEXT NOT NULL,      -- running | completed | completed_with_failures | interrupted | incomplete | failed_to_start
    rows_total      INTEGER,
    rows_completed  INTEGER,
    rows_failed     INTEGER,
    outcomes_json   TEXT,               -- rows per terminal outcome
    summary_json    TEXT,               -- per-endpoint statistics (calls, retries, limit over time, …)
    cost_usd        REAL,               -- what the run's calls cost, all segments, by the endpoints' prices
    shard           TEXT,               -- `I/N` for one shard of a sharded run; `merged N` for their merge
    shards_at_once  INTEGER             -- with `shard`: how many shards the scheduler runs at once (`--shards-at-once`), which sets the shard's share of the rate limits
);

-- One per process that worked on the run: the first `weir run`, then each
-- resume. A segment left `running` was killed.
CREATE TABLE IF NOT EXISTS segments (
    run_id          INTEGER NOT NULL REFERENCES runs(run_id),
    segment         INTEGER NOT NULL,   -- 1 for the first process
    started_at_ms   INTEGER NOT NULL,
    finished_at_ms  INTEGER,
    status          TEXT NOT NULL,      -- running | finished
    rows_skipped    INTEGER NOT NULL,   -- rows earlier segments had already ended
    calls_replayed  INTEGER,            -- answers taken from payloads instead of the network
    -- The source as this segment found it, so a resume can tell whether it
    -- changed since. NULL when the segment was refused for a changed row.
    source_size      INTEGER,           -- bytes, when the segment opened it
    source_mtime_ns  INTEGER,           -- modification time then, in nanoseconds since the epoch
    source_sha256    TEXT,              -- of the whole file; set once the segment read it to the end
    PRIMARY KEY (run_id, segment)
);

CREATE TABLE IF NOT EXISTS nodes (
    run_id            INTEGER NOT NULL REFERENCES runs(run_id),
    node_id           INTEGER NOT NULL,   -- position in `transforms:`
    name              TEXT NOT NULL,
    component         TEXT NOT NULL,      -- built-in name or path
    component_sha256  TEXT NOT NULL,
    wit_version       TEXT NOT NULL,
    options_sha256    TEXT NOT NULL,
    output_fields     TEXT NOT NULL,      -- JSON array
    PRIMARY KEY (run_id, node_id)
);

CREATE TABLE IF NOT EXISTS endpoints (
    run_id              INTEGER NOT NULL REFERENCES runs(run_id),
    name                TEXT NOT NULL,
    kind                TEXT NOT NULL,
    url                 TEXT NOT NULL,
    secret_fingerprint  TEXT,             -- identifies the API key without revealing it
    settings_json       TEXT NOT NULL,    -- pool size, timeouts, retry budget
    PRIMARY KEY (run_id, name)
);

CREATE TABLE IF NOT EXISTS rows (
    run_id          INTEGER NOT NULL REFERENCES runs(run_id),
    row_index       INTEGER NOT NULL,     -- 0-based order in the source
    source_line     INTEGER NOT NULL,     -- 1-based line where the row starts
    content_sha256  BLOB NOT NULL,
    PRIMARY KEY (run_id, row_index)
) WITHOUT ROWID;

-- One per row per node attempt: a row that a killed segment left unfinished
-- gets another state in the segment that resumes it.
CREATE TABLE IF NOT EXISTS node_states (
    run_id          INTEGER NOT NULL REFERENCES runs(run_id),
    state_id        INTEGER NOT NULL,
    row_index       INTEGER NOT NULL,
    node_id         INTEGER NOT NULL,
    segment         INTEGER NOT NULL,
    attempt         INTEGER NOT NULL,
    status          TEXT NOT NULL,        -- completed | failed
    input_sha256    BLOB NOT NULL,
    output_sha256   BLOB,
    error_code      TEXT,
    error_message   TEXT,
    batch_id        INTEGER,              -- the batch it went through the node in
    started_at_ms   INTEGER NOT NULL,
    duration_ms     INTEGER NOT NULL,
    PRIMARY KEY (run_id, state_id)
) WITHOUT ROWID;

-- Named values a guest attached to a node state (template_hash, variables_hash, …).
CREATE TABLE IF NOT EXISTS node_state_attributes (
    run_id    INTEGER NOT NULL,
    state_id  INTEGER NOT NULL,
    key       TEXT NOT NULL,
    value     TEXT NOT NULL,          -- a SHA-256 in lowercase hex as its 32 bytes, as hashes are
    PRIMARY KEY (run_id, state_id, key)
) WITHOUT ROWID;

-- Every attempt of every external call. A call whose node state is missing
-- was under way when its process was killed.
CREATE TABLE IF NOT EXISTS calls (
    run_id             INTEGER NOT NULL,
    state_id           INTEGER NOT NULL,
    row_index          INTEGER NOT NULL,  -- the row whose node state made it
    node_id            INTEGER NOT NULL,
    call_index         INTEGER NOT NULL,  -- unique within the node state, in order of issue
    endpoint           TEXT NOT NULL,
    request_index      INTEGER NOT NULL,  -- which logical request of the state this attempt serves
    attempt            INTEGER NOT NULL,  -- 1 for the first try of a request
    request_sha256     BLOB NOT NULL,
    response_sha256    BLOB,
    status             INTEGER,           -- HTTP status, NULL when no answer arrived
    error              TEXT,              -- transport error or timeout
    retry_cause        TEXT,              -- capacity | transient | hung, when this attempt was retried
    latency_ms         INTEGER NOT NULL,
    prompt_tokens      INTEGER,
    completion_tokens  INTEGER,
    started_at_ms      INTEGER NOT NULL,
    replayed           INTEGER NOT NULL,  -- 1: answered from the payload an earlier segment recorded, not sent
    cost_usd           REAL,              -- by the endpoint's price, for a successful attempt
    cost_estimated     INTEGER,           -- 1: the answer had no usage; tokens were estimated from the text
    cached             INTEGER NOT NULL DEFAULT 0, -- 1: answered from the response cache, not sent
    provider_batch     TEXT,              -- the provider's batch id, for a call answered through a Batch API
    -- Keyed by row first, so a row's calls are found without another index.
    PRIMARY KEY (run_id, row_index, state_id, call_index)
) WITHOUT ROWID;

-- Rows a batching node gave its component together (`batch:` on a transform).
CREATE TABLE IF NOT EXISTS batches (
    run_id    INTEGER NOT NULL,
    batch_id  INTEGER NOT NULL,
    node_id   INTEGER NOT NULL,
    mode      TEXT NOT NULL,              -- passthrough | transform
    size      INTEGER NOT NULL,           -- member rows
    PRIMARY KEY (run_id, batch_id)
);

CREATE TABLE IF NOT EXISTS batch_members (
    run_id     INTEGER NOT NULL,
    batch_id   INTEGER NOT NULL,
    row_index  INTEGER NOT NULL,
    PRIMARY KEY (run_id, batch_id, row_index)
) WITHOUT ROWID;

-- Exactly one per source row.
CREATE TABLE IF NOT EXISTS row_outcomes (
    run_id         INTEGER NOT NULL,
    row_index      INTEGER NOT NULL,
    outcome        TEXT NOT NULL,         -- completed | failed | quarantined | discarded | consumed_in_batch
    node_id        INTEGER,               -- where it failed
    error_code     TEXT,
    error_message  TEXT,
    rows_written   INTEGER NOT NULL,      -- output rows written to each sink
    batch_id       INTEGER,               -- the transform batch that consumed it
    error_sink     TEXT,                  -- the on_error sink it was written to
    segment        INTEGER NOT NULL,
    PRIMARY KEY (run_id, row_index)
) WITHOUT ROWID;

-- How far each sink file is known good: the bytes written for the rows whose
-- outcomes are committed. Updated in the same transaction as those outcomes,
-- so a resume cuts the file back to here and carries on.
CREATE TABLE IF NOT EXISTS sink_checkpoints (
    run_id       INTEGER NOT NULL,
    path         TEXT NOT NULL,
    byte_offset  INTEGER NOT NULL,
    PRIMARY KEY (run_id, path)
) WITHOUT ROWID;

-- Bodies by row: its source row (rows.content_sha256), node inputs and
-- outputs (node_states.*_sha256), requests and responses (calls.*_sha256).
-- Optional (`audit.payloads: false`) and purgeable (`weir purge RUN`); the
-- hashes elsewhere stay. A resume answers a request from here instead of
-- sending it again. The bodies a row recorded in one transaction are one
-- part (its source row waits for the next of them, or the row's outcome):
-- a zstd frame without its 4-byte magic number, compressed against a
-- dictionary built into weir, of entries each made of the first 2 bytes of
-- the body's SHA-256, its length in bytes as a LEB128 varint, and the body.
-- A body is kept once per row, and found by its key and then its hash.
CREATE TABLE IF NOT EXISTS row_payloads (
    run_id     INTEGER NOT NULL,
    row_index  INTEGER NOT NULL,
    part       INTEGER NOT NULL,      -- 0, 1, … in the order they were written
    bodies     BLOB NOT NULL,
    PRIMARY KEY (run_id, row_index, part)
) WITHOUT ROWID;

-- Bodies by hash, as weir kept them before schema 7: read, no longer written.
-- An upgraded database keys them by the hash's 32 bytes.
CREATE TABLE IF NOT EXISTS payloads (
    run_id  INTEGER NOT NULL,
    sha256  BLOB NOT NULL,
    body    TEXT NOT NULL,
    PRIMARY KEY (run_id, sha256)
);

-- Changes of an endpoint's state: its circuit breaker opening, half-opening
-- for a probe, closing again.
CREATE TABLE IF NOT EXISTS endpoint_events (
    run_id    INTEGER NOT NULL,
    endpoint  TEXT NOT NULL,
    at_ms     INTEGER NOT NULL,
    event     TEXT NOT NULL,          -- breaker_open | breaker_half_open | breaker_closed
    detail    TEXT NOT NULL
);

-- What each endpoint's adaptive concurrency limit had learned by the end of
-- a run (and every few seconds before, so a killed run leaves it too): the
-- next run against the same endpoint starts from it. Keyed by what identifies
-- the endpoint, not by its name in one pipeline.
CREATE TABLE IF NOT EXISTS learned_limits (
    url                TEXT NOT NULL,     -- kind and URL, e.g. `openai https://api.openai.com/v1`
    model              TEXT NOT NULL,     -- the models its nodes ask for, comma-separated; '' when none is named
    run_id             INTEGER NOT NULL,
    endpoint           TEXT NOT NULL,     -- its name in that run's pipeline
    concurrency_limit  INTEGER NOT NULL,
    floor              INTEGER NOT NULL,  -- the limit was not cut below this
    no_load_rtt_ms     INTEGER,           -- round trip with no queue at the endpoint
    recorded_at_ms     INTEGER NOT NULL,
    held_by_queue      INTEGER NOT NULL DEFAULT 0,  -- 1 when a queue at the endpoint, not refusals, held the limit
    PRIMARY KEY (url, model, run_id)
);

-- Batch API mode. Every request is recorded here, with the batch it goes in,
-- before that batch is uploaded or submitted (write-ahead): a run killed at
-- any moment finds on resume what the provider holds, and never submits a
-- request twice. `custom_id` is derived from (run, row, node, request).
CREATE TABLE IF NOT EXISTS provider_batches (
    run_id          INTEGER NOT NULL,
    job_id          INTEGER NOT NULL,     -- weir's number for the batch, in order of preparation
    endpoint        TEXT NOT NULL,
    state           TEXT NOT NULL,        -- preparing | uploaded | submitted | ended | cancelled
    input_file_id   TEXT,                 -- OpenAI / Azure: the uploaded JSONL file
    batch_id        TEXT,                 -- the provider's id for the batch
    status          TEXT,                 -- the provider's status when last asked
    requests        INTEGER NOT NULL,
    succeeded       INTEGER,
    failed          INTEGER,
    prepared_at_ms  INTEGER NOT NULL,
    submitted_at_ms INTEGER,
    ended_at_ms     INTEGER,
    PRIMARY KEY (run_id, job_id)
);

CREATE TABLE IF NOT EXISTS batch_requests (
    run_id          INTEGER NOT NULL,
    custom_id       TEXT NOT NULL,
    endpoint        TEXT NOT NULL,
    row_index       INTEGER NOT NULL,
    node_id         INTEGER NOT NULL,
    request_index   INTEGER NOT NULL,
    request_sha256  TEXT NOT NULL,
    body            TEXT NOT NULL,        -- the component's request, as a batch line carries it; no secrets
    job_id          INTEGER,              -- the batch it was last put in
    state           TEXT NOT NULL,        -- submitted | answered | failed | retry
    status          INTEGER,              -- the HTTP status of its answer
    response        TEXT,                 -- the answer's body
    error           TEXT,                 -- why its line failed, as the provider said
    prompt_tokens   INTEGER,
    completion_tokens INTEGER,
    PRIMARY KEY (run_id, custom_id)
) WITHOUT ROWID;
