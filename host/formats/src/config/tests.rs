use super::*;

/// A temporary folder holding a pipeline file and an input file.
fn setup(yaml: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("in.csv"), "id,text\n1,a\n").unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, yaml).unwrap();
    (dir, path)
}

fn load_with(yaml: &str, env: &[(&str, &str)]) -> Result<Pipeline> {
    let (_dir, path) = setup(yaml);
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    load_text(&path, yaml, |name| {
        env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    })
}

const GOOD: &str = "\
source:
  path: in.csv
endpoints:
  llm:
    api_key: ${KEY}
    pool_size: 4
transforms:
  - name: classify
    component: llm
    endpoints: [llm]
    options:
      template: 'Say {{ row.text }}'
      temperature: 0
sinks:
  - path: out/result.jsonl
";

#[test]
fn a_good_file_resolves() {
    let p = load_with(GOOD, &[("KEY", "sk-1")]).unwrap();
    assert_eq!(p.source.format, Format::Csv);
    assert_eq!(p.endpoints["llm"].api_key.as_deref(), Some("sk-1"));
    assert_eq!(p.endpoints["llm"].max_capacity_retry_seconds, 3600.0);
    let node = &p.nodes[0];
    assert_eq!(node.component, ComponentRef::Builtin("llm".into()));
    assert_eq!(node.grants, vec![("llm".to_string(), "llm".to_string())]);
    assert_eq!(
        node.concurrency,
        4 + 256,
        "the pool plus a window of rows beyond it"
    );
    assert_eq!(node.reorder_window, DEFAULT_REORDER_WINDOW);
    let options: serde_json::Value = serde_json::from_str(&node.options_json).unwrap();
    assert_eq!(options["temperature"], 0);
    assert_eq!(p.sinks[0].format, Format::Jsonl);
    assert!(p.audit_path.ends_with("out/weir-audit.sqlite"));
}

#[test]
fn missing_key_names_the_variable_and_line() {
    let err = load_with(GOOD, &[]).unwrap_err().to_string();
    assert!(
        err.contains("pipeline.yaml:5: environment variable KEY is not set"),
        "{err}"
    );
}

#[test]
fn unknown_keys_and_wrong_types_point_at_their_line() {
    let typo = GOOD.replace("pool_size: 4", "pool_sise: 4");
    let err = load_with(&typo, &[("KEY", "k")]).unwrap_err().to_string();
    assert!(err.contains("pipeline.yaml:6:"), "{err}");
    assert!(err.contains("unknown field `pool_sise`"), "{err}");

    let wrong = GOOD.replace("pool_size: 4", "pool_size: many");
    let err = load_with(&wrong, &[("KEY", "k")]).unwrap_err().to_string();
    assert!(err.contains("pipeline.yaml:6:"), "{err}");
    assert!(err.contains("invalid type"), "{err}");
}

#[test]
fn semantic_errors_are_located() {
    let undeclared = GOOD.replace("endpoints: [llm]", "endpoints: [gpt]");
    let err = load_with(&undeclared, &[("KEY", "k")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("pipeline.yaml:10: endpoint `gpt` is not declared"),
        "{err}"
    );
    assert!(err.contains("declared: llm"), "{err}");

    let missing = GOOD.replace("path: in.csv", "path: nope.csv");
    let err = load_with(&missing, &[("KEY", "k")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("pipeline.yaml:2: source file `nope.csv` not found"),
        "{err}"
    );

    let no_format = GOOD.replace("out/result.jsonl", "out/result.txt");
    let err = load_with(&no_format, &[("KEY", "k")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("pipeline.yaml:15:"), "{err}");
    assert!(err.contains("format: csv"), "{err}");

    let zero = GOOD.replace("pool_size: 4", "pool_size: 0");
    let err = load_with(&zero, &[("KEY", "k")]).unwrap_err().to_string();
    assert!(
        err.contains("pipeline.yaml:6: endpoint `llm`: pool_size must be at least 1"),
        "{err}"
    );

    let no_window = GOOD.replace(
        "endpoints: [llm]",
        "endpoints: [llm]\n    reorder_window: 0",
    );
    let err = load_with(&no_window, &[("KEY", "k")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("pipeline.yaml:11: reorder_window must be at least 1"),
        "{err}"
    );
}

#[test]
fn duplicate_transform_names_are_refused() {
    let twice = GOOD.replace("sinks:", "  - name: classify\n    component: llm\nsinks:");
    let err = load_with(&twice, &[("KEY", "k")]).unwrap_err().to_string();
    assert!(
        err.contains("pipeline.yaml:14: transform name `classify` is used twice"),
        "{err}"
    );
}

#[test]
fn malformed_yaml_is_located() {
    let err = load_with("source:\n  path: [in.csv\n", &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("pipeline.yaml:"), "{err}");
}

#[test]
fn an_alias_bomb_is_refused_quickly_at_its_line() {
    // Nine levels of nine aliases: 9^9 (387 million) strings once expanded.
    let mut bomb = String::from("    options:\n      l0: &l0 \"lol\"\n");
    for level in 1..=9 {
        let aliases = vec![format!("*l{}", level - 1); 9].join(", ");
        bomb.push_str(&format!("      l{level}: &l{level} [{aliases}]\n"));
    }
    let yaml = GOOD.replace(
        "    options:\n      template: 'Say {{ row.text }}'\n      temperature: 0\n",
        &bomb,
    );
    assert_ne!(yaml, GOOD);
    let started = std::time::Instant::now();
    let err = load_with(&yaml, &[("KEY", "k")]).unwrap_err().to_string();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        err.contains(
            "pipeline.yaml:18:26: too large or too complex to read: more than 250000 values"
        ),
        "{err}"
    );
}

#[test]
fn nesting_beyond_reason_is_refused_at_its_line() {
    for (depth, says) in [
        (100, "nested more than 64 levels deep"),
        (100_000, "recursion limit exceeded"),
    ] {
        let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let yaml = GOOD.replace(
            "temperature: 0",
            &format!("temperature: 0\n      deep: {deep}"),
        );
        let started = std::time::Instant::now();
        let err = load_with(&yaml, &[("KEY", "k")]).unwrap_err().to_string();
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "took {:?}",
            started.elapsed()
        );
        assert!(err.contains("pipeline.yaml:14:"), "{err}");
        assert!(err.contains(says), "{err}");
    }
}

#[test]
fn an_endpoint_declared_twice_is_refused() {
    let twice = GOOD.replace("transforms:", "  llm:\n    pool_size: 2\ntransforms:");
    let err = load_with(&twice, &[("KEY", "k")]).unwrap_err().to_string();
    assert!(err.contains("pipeline.yaml:7:3: "), "{err}");
    assert!(err.contains("duplicate"), "{err}");
}

#[test]
fn azure_endpoints_need_their_settings() {
    let azure = GOOD.replace(
        "    api_key: ${KEY}\n",
        "    kind: azure-openai\n    api_key: ${KEY}\n",
    );
    let err = load_with(&azure, &[("KEY", "k")]).unwrap_err().to_string();
    assert!(err.contains("needs `base_url`"), "{err}");
}

#[test]
fn the_audit_database_is_found_without_the_pipelines_secrets() {
    let (_dir, path) = setup(GOOD);
    // `KEY` is not set: loading the pipeline would fail, finding its audit
    // database must not.
    assert!(load(&path).is_err());
    let full = load_text(&path, GOOD, |_| Some("sk-1".into())).unwrap();
    assert_eq!(audit_path_of(&path).unwrap(), full.audit_path);

    let elsewhere = format!("{GOOD}audit:\n  path: trail/a.sqlite\n  payloads: false\n");
    std::fs::write(&path, &elsewhere).unwrap();
    let full = load_text(&path, &elsewhere, |_| Some("sk-1".into())).unwrap();
    assert!(full.audit_path.ends_with("trail/a.sqlite"));
    assert!(!full.audit_payloads);
    assert_eq!(audit_path_of(&path).unwrap(), full.audit_path);
}

#[test]
fn durations_and_sizes_beyond_sense_are_refused_at_their_line() {
    let endpoint =
        |setting: &str| GOOD.replace("pool_size: 4", &format!("pool_size: 4\n    {setting}"));
    let transform = |setting: &str| {
        GOOD.replace(
            "endpoints: [llm]",
            &format!("endpoints: [llm]\n    {setting}"),
        )
    };
    let cases = [
        (
            endpoint("request_timeout_seconds: 1e30"),
            "7: endpoint `llm`: request_timeout_seconds must be a positive number of seconds, at most 31536000 (one year); got 1e30",
        ),
        (
            endpoint("max_capacity_retry_seconds: 99999999999999999999"),
            "7: endpoint `llm`: max_capacity_retry_seconds must",
        ),
        (
            endpoint("connect_timeout_seconds: .inf"),
            "7: endpoint `llm`: connect_timeout_seconds must",
        ),
        (
            endpoint("breaker_cooldown_seconds: 31536001"),
            "7: endpoint `llm`: breaker_cooldown_seconds must",
        ),
        (
            endpoint("request_timeout_seconds: .nan"),
            "7: endpoint `llm`: request_timeout_seconds must",
        ),
        (
            transform("row_deadline_seconds: 1e30"),
            "11: row_deadline_seconds must be a positive number of seconds, at most 31536000 (one year); got 1e30",
        ),
        (
            transform("batch:\n      count: 2\n      timeout_seconds: 4e9"),
            "13: batch.timeout_seconds must",
        ),
        (
            transform("limits:\n      cpu_ms_per_call: 40000000000000"),
            "12: limits.cpu_ms_per_call must be at most 31536000000",
        ),
        (
            transform("limits:\n      memory_mb: 4097"),
            "12: limits.memory_mb must be at most 4096",
        ),
        (
            transform("limits:\n      output_mb_per_row: 1e30"),
            "12: limits.output_mb_per_row must be a positive number, at most 4096 (a component's memory holds at most 4 GiB); got 1e30",
        ),
    ];
    for (yaml, expected) in cases {
        let err = load_with(&yaml, &[("KEY", "k")]).unwrap_err().to_string();
        assert!(err.contains(&format!("pipeline.yaml:{expected}")), "{err}");
    }
}

#[test]
fn a_year_and_4096_mb_are_still_allowed() {
    let yaml = GOOD
        .replace(
            "pool_size: 4",
            "pool_size: 4\n    max_capacity_retry_seconds: 31536000",
        )
        .replace(
            "endpoints: [llm]",
            "endpoints: [llm]\n    limits:\n      memory_mb: 4096\n      output_mb_per_row: 4096",
        );
    let p = load_with(&yaml, &[("KEY", "k")]).unwrap();
    assert_eq!(p.endpoints["llm"].max_capacity_retry_seconds, MAX_SECONDS);
    assert_eq!(p.nodes[0].limits.memory_bytes, 4096 << 20);
}

#[test]
fn huge_pool_sizes_do_not_overflow_the_default_concurrency() {
    let yaml = GOOD.replace("pool_size: 4", &format!("pool_size: {}", usize::MAX));
    let p = load_with(&yaml, &[("KEY", "k")]).unwrap();
    assert_eq!(p.nodes[0].concurrency, usize::MAX);
}

#[test]
fn output_and_memory_caps_have_defaults_and_are_checked_at_their_line() {
    let p = load_with(GOOD, &[("KEY", "k")]).unwrap();
    let limits = p.nodes[0].limits;
    assert_eq!(limits.log_bytes_per_row, 64 << 10);
    assert_eq!(limits.attach_bytes_per_row, 1 << 20);
    assert_eq!(limits.max_rows_per_input, 10_000);
    assert_eq!(limits.node_memory_bytes, 768 << 20);

    let big = GOOD.replace(
        "endpoints: [llm]",
        "endpoints: [llm]\n    limits:\n      memory_mb: 2048",
    );
    let limits = load_with(&big, &[("KEY", "k")]).unwrap().nodes[0].limits;
    assert_eq!(
        limits.node_memory_bytes,
        2048 << 20,
        "the default budget holds at least one instance"
    );

    for (setting, line) in [
        (
            "node_memory_mb: 0",
            "limits.node_memory_mb must be at least 1",
        ),
        (
            "max_rows_per_input: 0",
            "limits.max_rows_per_input must be at least 1",
        ),
        (
            "log_kb_per_row: 0",
            "limits.log_kb_per_row must be at least 1",
        ),
        (
            "attach_kb_per_row: 0",
            "limits.attach_kb_per_row must be at least 1",
        ),
    ] {
        let bad = GOOD.replace(
            "endpoints: [llm]",
            &format!("endpoints: [llm]\n    limits:\n      {setting}"),
        );
        let err = load_with(&bad, &[("KEY", "k")]).unwrap_err().to_string();
        assert!(err.contains(&format!("pipeline.yaml:12: {line}")), "{err}");
    }
}

#[test]
fn a_first_byte_timeout_is_within_the_request_timeout_and_refused_at_its_line() {
    let endpoint =
        |setting: &str| GOOD.replace("pool_size: 4", &format!("pool_size: 4\n    {setting}"));
    let ok = load_with(&endpoint("first_byte_timeout_seconds: 15"), &[("KEY", "k")]).unwrap();
    assert_eq!(ok.endpoints["llm"].first_byte_timeout_seconds, Some(15.0));
    let cases = [
        (
            endpoint("first_byte_timeout_seconds: 0"),
            "7: endpoint `llm`: first_byte_timeout_seconds must be a positive number of seconds",
        ),
        (
            endpoint("request_timeout_seconds: 30\n    first_byte_timeout_seconds: 60"),
            "8: endpoint `llm`: first_byte_timeout_seconds (60 s) must not exceed \
             request_timeout_seconds (30 s)",
        ),
    ];
    for (yaml, expected) in cases {
        let err = load_with(&yaml, &[("KEY", "k")]).unwrap_err().to_string();
        assert!(err.contains(&format!("pipeline.yaml:{expected}")), "{err}");
    }
}

#[test]
fn max_answer_mb_defaults_to_64_and_zero_is_refused_at_its_line() {
    let endpoint =
        |setting: &str| GOOD.replace("pool_size: 4", &format!("pool_size: 4\n    {setting}"));
    let default = load_with(GOOD, &[("KEY", "k")]).unwrap();
    assert_eq!(default.endpoints["llm"].max_answer_mb, 64);
    let set = load_with(&endpoint("max_answer_mb: 200"), &[("KEY", "k")]).unwrap();
    assert_eq!(set.endpoints["llm"].max_answer_mb, 200);
    let err = load_with(&endpoint("max_answer_mb: 0"), &[("KEY", "k")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("pipeline.yaml:7: endpoint `llm`: max_answer_mb must be at least 1"),
        "{err}"
    );
}

#[test]
fn http2_is_off_unless_an_endpoint_allows_it_and_must_be_true_or_false() {
    let endpoint =
        |setting: &str| GOOD.replace("pool_size: 4", &format!("pool_size: 4\n    {setting}"));
    let default = load_with(GOOD, &[("KEY", "k")]).unwrap();
    assert!(!default.endpoints["llm"].http2);
    let on = load_with(&endpoint("http2: true"), &[("KEY", "k")]).unwrap();
    assert!(on.endpoints["llm"].http2);
    let err = load_with(&endpoint("http2: sometimes"), &[("KEY", "k")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("pipeline.yaml:7:12: invalid boolean (true or false expected)"),
        "{err}"
    );
}

#[test]
fn the_attempt_timeout_is_on_by_default_and_its_settings_are_checked_at_their_line() {
    let endpoint =
        |setting: &str| GOOD.replace("pool_size: 4", &format!("pool_size: 4\n    {setting}"));
    let default = load_with(GOOD, &[("KEY", "k")]).unwrap();
    let llm = &default.endpoints["llm"];
    assert!(llm.adaptive_attempt_timeout);
    assert_eq!(
        (llm.attempt_timeout_factor, llm.min_attempt_timeout_seconds),
        (3.0, 5.0)
    );
    let off = load_with(
        &endpoint("adaptive_attempt_timeout: false"),
        &[("KEY", "k")],
    )
    .unwrap();
    assert!(!off.endpoints["llm"].adaptive_attempt_timeout);
    let cases = [
        (
            endpoint("attempt_timeout_factor: 0.5"),
            "7: endpoint `llm`: attempt_timeout_factor must be a number of at least 1, got 0.5",
        ),
        (
            endpoint("min_attempt_timeout_seconds: 0"),
            "7: endpoint `llm`: min_attempt_timeout_seconds must be a positive number of seconds",
        ),
    ];
    for (yaml, expected) in cases {
        let err = load_with(&yaml, &[("KEY", "k")]).unwrap_err().to_string();
        assert!(err.contains(&format!("pipeline.yaml:{expected}")), "{err}");
    }
}

#[test]
fn a_csv_delimiter_is_one_character_and_only_for_csv() {
    let with = |source: &str, sink: &str| {
        GOOD.replace("path: in.csv", &format!("path: in.csv\n  {source}"))
            .replace(
                "  - path: out/result.jsonl",
                &format!("  - path: out/result.csv\n    {sink}"),
            )
    };
    let p = load_with(&with("delimiter: ';'", "delimiter: tab"), &[("KEY", "k")]).unwrap();
    assert_eq!(
        (p.source.delimiter, p.sinks[0].delimiter),
        (Some(b';'), Some(b'\t'))
    );
    let p = load_with(
        &with("delimiter: \"\\t\"", "delimiter: '|'"),
        &[("KEY", "k")],
    )
    .unwrap();
    assert_eq!(
        (p.source.delimiter, p.sinks[0].delimiter),
        (Some(b'\t'), Some(b'|'))
    );
    let p = load_with(GOOD, &[("KEY", "k")]).unwrap();
    assert_eq!(p.source.delimiter, None, "told from the header line");
    let tsv = GOOD.replace("out/result.jsonl", "out/result.tsv");
    let p = load_with(&tsv, &[("KEY", "k")]).unwrap();
    assert_eq!(
        (p.sinks[0].format, p.sinks[0].delimiter),
        (Format::Csv, Some(b'\t'))
    );
    for (yaml, line) in [
        (with("delimiter: ';;'", ""), 3),
        (with("delimiter: '\"'", ""), 3),
        (with("", "delimiter: ''"), 17),
        (with("", "delimiter: é"), 17),
    ] {
        let err = load_with(&yaml, &[("KEY", "k")]).unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "pipeline.yaml:{line}: delimiter: expected one character"
            )),
            "{err}"
        );
    }
    let jsonl = GOOD.replace(
        "  - path: out/result.jsonl",
        "  - path: out/result.jsonl\n    delimiter: ';'",
    );
    let err = load_with(&jsonl, &[("KEY", "k")]).unwrap_err().to_string();
    assert!(err.contains("delimiter: only a CSV file has one"), "{err}");
}

#[test]
fn a_source_encoding_is_a_known_label_and_utf_8_is_read_as_it_is() {
    let with = |encoding: &str| {
        GOOD.replace(
            "path: in.csv",
            &format!("path: in.csv\n  encoding: {encoding}"),
        )
    };
    let p = load_with(&with("windows-1252"), &[("KEY", "k")]).unwrap();
    assert_eq!(p.source.encoding, Some(encoding_rs::WINDOWS_1252));
    let p = load_with(&with("latin1"), &[("KEY", "k")]).unwrap();
    assert_eq!(
        p.source.encoding,
        Some(encoding_rs::WINDOWS_1252),
        "as WHATWG maps it"
    );
    let p = load_with(&with("UTF-8"), &[("KEY", "k")]).unwrap();
    assert_eq!(p.source.encoding, None);
    let err = load_with(&with("klingon"), &[("KEY", "k")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("pipeline.yaml:3: encoding: `klingon` is not an encoding weir knows"),
        "{err}"
    );
}

#[test]
fn a_base_url_holding_the_path_weir_adds_is_refused_and_an_anthropic_version_dropped() {
    let with = |kind: &str, url: &str| {
        GOOD.replace(
            "    api_key: ${KEY}",
            &format!("    kind: {kind}\n    base_url: {url}\n    api_key: ${{KEY}}\n    deployment: d\n    api_version: v"),
        )
    };
    for (kind, url, base) in [
        (
            "openai",
            "https://api.openai.com/v1/chat/completions",
            "https://api.openai.com/v1",
        ),
        (
            "openai",
            "http://127.0.0.1:8000/v1/chat/completions/",
            "http://127.0.0.1:8000/v1",
        ),
        (
            "anthropic",
            "https://api.anthropic.com/v1/messages",
            "https://api.anthropic.com",
        ),
        (
            "azure-openai",
            "https://x.openai.azure.com/openai/deployments/gpt/chat/completions",
            "https://x.openai.azure.com",
        ),
    ] {
        let err = load_with(&with(kind, url), &[("KEY", "k")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("pipeline.yaml:6: endpoint `llm`: base_url holds the path weir adds"),
            "{err}"
        );
        assert!(
            err.ends_with(&format!("give the API's base without it: {base}")),
            "{err}"
        );
    }
    let p = load_with(
        &with("anthropic", "https://api.anthropic.com/v1/"),
        &[("KEY", "k")],
    )
    .unwrap();
    assert_eq!(
        p.endpoints["llm"].base_url.as_deref(),
        Some("https://api.anthropic.com")
    );
    let p = load_with(&with("openai", "http://127.0.0.1:8000/v1"), &[("KEY", "k")]).unwrap();
    assert_eq!(
        p.endpoints["llm"].base_url.as_deref(),
        Some("http://127.0.0.1:8000/v1")
    );
}

#[test]
fn json_is_a_sources_format_and_a_sink_is_told_to_write_json_lines() {
    let source = GOOD.replace("path: in.csv", "path: in.csv\n  format: json");
    let p = load_with(&source, &[("KEY", "k")]).unwrap();
    assert_eq!(p.source.format, Format::Json);
    let sink = GOOD.replace("out/result.jsonl", "out/result.json");
    let err = load_with(&sink, &[("KEY", "k")]).unwrap_err().to_string();
    assert!(
        err.contains("pipeline.yaml:15: `out/result.json`: a sink writes CSV or JSON Lines")
            && err.contains("name it .jsonl, or add `format: jsonl`"),
        "{err}"
    );
    let given = GOOD.replace(
        "  - path: out/result.jsonl",
        "  - path: out/result.jsonl\n    format: json",
    );
    let err = load_with(&given, &[("KEY", "k")]).unwrap_err().to_string();
    assert!(
        err.contains("pipeline.yaml:16: format: json is for a source"),
        "{err}"
    );
}
