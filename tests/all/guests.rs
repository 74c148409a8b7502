//! Guests from the outside: contract versions (an old component still runs,
//! an unknown one is refused with the supported range), and `weir test` with
//! fixtures written by hand or recorded from a real run.

use crate::common::*;
use weir_test_llm_server::Reply;

const CHAOS_V0_1: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../guests/dist/test-chaos.wasm"
);

const TEST_V0_2: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../guests/dist/test-v0-2.wasm");

/// A component that exports `weir:transform/transform` at `version`, with
/// bodies that trap: enough to be loaded and judged by its contract.
fn component_for_contract(version: &str) -> Vec<u8> {
    component_of(&format!(
        "package weir:transform@{version};\n\
         interface transform {{\n  configure: func(options: string) -> result<list<string>, string>;\n}}\n\
         world node {{ export transform; }}\n"
    ))
}

/// A component of the first world in `wit`, made with wit-component.
fn component_of(wit: &str) -> Vec<u8> {
    let mut resolve = wit_parser::Resolve::default();
    let package = resolve.push_str("test.wit", wit).unwrap();
    let world = resolve.select_world(&[package], None).unwrap();
    let mut module = wit_component::dummy_module(
        &resolve,
        world,
        wit_parser::ManglingAndAbi::Legacy(wit_parser::LiftLowerAbi::Sync),
    );
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
        false,
    )
    .unwrap();
    let mut encoder = wit_component::ComponentEncoder::default();
    encoder.module(&module).unwrap().validate(true);
    encoder.encode().unwrap()
}

fn one_node_pipeline(component: &str) -> String {
    format!(
        "source:\n  path: in.jsonl\ntransforms:\n  - name: node\n    component: {component}\n\
         sinks:\n  - path: out.jsonl\n"
    )
}

#[tokio::test]
async fn components_of_each_supported_contract_run_side_by_side_in_one_pipeline() {
    let server = server_replying(Reply::Echo).await;
    let ws = Workspace::new();
    ws.write(
        "in.jsonl",
        "{\"id\":1,\"text\":\"a\"}\n{\"id\":2,\"text\":\"b\"}\n",
    );
    let p = ws.write(
        "p.yaml",
        &format!(
            "source:\n  path: in.jsonl\nendpoints:\n  llm:\n    base_url: ${{OPENAI_BASE_URL}}\n    \
             api_key: ${{OPENAI_API_KEY}}\ntransforms:\n  - name: old\n    component: {CHAOS_V0_1}\n  \
             - name: middle\n    component: {TEST_V0_2}\n  \
             - name: new\n    component: llm\n    endpoints: [llm]\n    options:\n{ECHO_OPTIONS}\
             sinks:\n  - path: out.jsonl\n"
        ),
    );
    let out = run_with_key(&p, &server.base_url()).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let rows = read_jsonl(&ws, "out.jsonl");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["ok"], true, "the 0.1.0 component ran");
    assert_eq!(rows[0]["v2_node"], "middle", "the 0.2.0 component ran");
    assert_eq!(
        rows[1]["llm_response"], "echo: Q2: b",
        "the 0.3.0 component ran"
    );
    let versions: Vec<(String, String)> =
        audit_pairs(&ws, "SELECT name, wit_version FROM nodes ORDER BY node_id");
    assert_eq!(
        versions,
        vec![
            ("old".into(), "0.1.0".into()),
            ("middle".into(), "0.2.0".into()),
            ("new".into(), "0.3.0".into())
        ]
    );
}

#[tokio::test]
async fn a_component_of_an_unknown_contract_is_refused_naming_its_version_and_the_range() {
    let ws = Workspace::new();
    ws.write("in.jsonl", "{\"id\":1}\n");
    for (version, advice) in [("0.9.0", "upgrade weir"), ("0.0.3", "rebuild it")] {
        let file = format!("future-{version}.wasm");
        std::fs::write(ws.path(&file), component_for_contract(version)).unwrap();
        let p = ws.write("p.yaml", &one_node_pipeline(&file));
        let out = weir(&["validate", p.to_str().unwrap()], &[]).await;
        assert!(!out.status.success());
        let err = stderr(&out);
        for needle in [
            &file,
            &format!("weir:transform@{version}"),
            "supports 0.1.0 to 0.3.0",
            advice,
            "p.yaml:5",
        ] {
            assert!(err.contains(needle), "`{needle}` missing from: {err}");
        }
    }
}

#[tokio::test]
async fn a_component_whose_imports_and_export_name_different_contracts_is_refused() {
    let ws = Workspace::new();
    ws.write("in.jsonl", "{\"id\":1}\n");
    let mixed = component_of(
        "package weir:transform@0.2.0;\n\
         interface transform {\n  configure: func(options: string) -> result<list<string>, string>;\n}\n\
         world node { import weir:transform/log@0.1.0; export transform; }\n\
         package weir:transform@0.1.0 { interface log { log: func(message: string); } }\n",
    );
    std::fs::write(ws.path("mixed.wasm"), mixed).unwrap();
    let p = ws.write("p.yaml", &one_node_pipeline("mixed.wasm"));
    let out = weir(&["validate", p.to_str().unwrap()], &[]).await;
    assert!(!out.status.success());
    let err = stderr(&out);
    for needle in [
        "mixed.wasm",
        "exports `weir:transform/transform@0.2.0`",
        "imports `weir:transform/log@0.1.0`",
        "different contract versions",
        "p.yaml:5",
    ] {
        assert!(err.contains(needle), "`{needle}` missing from: {err}");
    }
}

#[tokio::test]
async fn a_component_that_is_no_transform_is_refused() {
    let ws = Workspace::new();
    ws.write("in.jsonl", "{\"id\":1}\n");
    let other = component_of(
        "package acme:other@1.0.0;\ninterface run { go: func(); }\nworld w { export run; }\n",
    );
    std::fs::write(ws.path("other.wasm"), other).unwrap();
    let p = ws.write("p.yaml", &one_node_pipeline("other.wasm"));
    let out = weir(&["validate", p.to_str().unwrap()], &[]).await;
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("not a weir transform") && err.contains("acme:other/run@1.0.0"),
        "{err}"
    );
}

/// Fixtures for the built-in `llm` component asking `llm` by template.
const LLM_FIXTURES: &str = r#"
component: llm
options:
  model: test-model
  template: "Q{{ row.id }}: {{ row.text }}"
  response_field: answer
endpoints: [llm]
cases:
  - name: the answer lands on the row
    row: {id: 1, text: "hello"}
    calls:
      - endpoint: llm
        request:
          model: test-model
          messages: [{role: user, content: "Q1: hello"}]
        answer: "hi there"
    expect:
      rows: [{id: 1, text: "hello", answer: "hi there"}]
  - name: a refused prompt fails the row
    row: {id: 2, text: "bad"}
    calls:
      - status: 400
        body: {error: {message: "no", code: "content_filter"}}
    expect:
      error: content_filtered
  - name: two rows in one call
    rows: [{id: 3, text: "a"}, {id: 4, text: "b"}]
    calls:
      - answer: "x"
      - error: {deadline_exceeded: "gave up after 30 s"}
    expect:
      - rows: [{id: 3, text: "a", answer: "x"}]
      - error: retry_timeout
  - name: a bad template is refused at configure
    options: {template: "{{ row.id ", response_field: answer}
    expect:
      configure_error: template
"#;

#[tokio::test]
async fn weir_test_into_a_reader_that_quit_still_tells_by_its_exit_code() {
    let ws = Workspace::new();
    let good = ws.write("good.yaml", LLM_FIXTURES);
    let bad = ws.write(
        "bad.yaml",
        &LLM_FIXTURES.replace("answer: \"hi there\"}", "answer: \"bye\"}"),
    );
    for (fixtures, code) in [(good, 0), (bad, 1)] {
        let out = weir_into_a_closed_pipe(&["test", fixtures.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(code), "{}", stderr(&out));
        assert!(out.stderr.is_empty(), "{}", stderr(&out));
    }
}

#[tokio::test]
async fn weir_test_passes_matching_fixtures_and_explains_each_mismatch() {
    let ws = Workspace::new();
    let good = ws.write("good.yaml", LLM_FIXTURES);
    let out = weir(&["test", good.to_str().unwrap()], &[]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", stderr(&out));
    assert!(stdout.contains("4 passed, 0 failed"), "{stdout}");

    let bad = ws.write(
        "bad.yaml",
        &LLM_FIXTURES
            .replace("content: \"Q1: hello\"", "content: \"Q1: HELLO\"")
            .replace("answer: \"hi there\"}", "answer: \"bye\"}")
            .replace("      - answer: \"x\"\n", "")
            .replace("error: content_filtered", "error: llm_call_failed"),
    );
    let out = weir(&["test", bad.to_str().unwrap()], &[]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    for needle in [
        "FAIL  the answer lands on the row  (",
        "sent a different request (- expected, + sent)",
        "-       \"content\": \"Q1: HELLO\"",
        "+       \"content\": \"Q1: hello\"",
        "-     \"answer\": \"bye\"",
        "+     \"answer\": \"hi there\"",
        "the row failed with `content_filtered` instead of `llm_call_failed`",
        "call 2 (row 1, to `llm`) is not scripted; it sent:",
        "1 passed, 3 failed",
    ] {
        assert!(
            stdout.contains(needle),
            "`{needle}` missing from:\n{stdout}"
        );
    }
}

#[tokio::test]
async fn fixtures_recorded_from_a_run_replay_it_and_catch_a_changed_prompt() {
    let server = server_replying(Reply::Echo).await;
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(5));
    let p = ws.write(
        "p.yaml",
        &pipeline_yaml("in.csv", "out.csv", 4, ECHO_OPTIONS),
    );
    let out = run_with_key(&p, &server.base_url()).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let recorded = ws.path("recorded.yaml");
    let out = weir(
        &[
            "record-fixtures",
            "1",
            "ask",
            "-p",
            p.to_str().unwrap(),
            "--limit",
            "3",
            "-o",
            recorded.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = ws.read("recorded.yaml");
    assert_eq!(text.matches("- name: row ").count(), 3, "{text}");
    let doc: serde_json::Value = weir_formats::yaml::from_str(&recorded, &text).unwrap();
    assert_eq!(
        doc["cases"][2]["expect"]["rows"][0]["llm_response"],
        echo_of(2).as_str(),
        "{text}"
    );
    assert!(
        !text.contains(KEY),
        "the key must not reach a fixtures file"
    );

    let out = weir(&["test", recorded.to_str().unwrap()], &[]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", stderr(&out));
    assert!(stdout.contains("3 passed, 0 failed"), "{stdout}");

    // The same fixtures against a changed prompt: every case names the change.
    ws.write(
        "recorded.yaml",
        &text.replace(
            "Q{{ row.id }}: {{ row.text }}",
            "Q{{ row.id }}:: {{ row.text }}",
        ),
    );
    let out = weir(&["test", recorded.to_str().unwrap()], &[]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert_eq!(
        stdout.matches("sent a different request").count(),
        3,
        "{stdout}"
    );
}

#[tokio::test]
async fn a_new_guest_is_the_example_under_its_own_name() {
    let ws = Workspace::new();
    for (lang, source) in [
        ("rust", "src/lib.rs"),
        ("python", "app.py"),
        ("js", "transform.js"),
        ("c", "topic.c"),
    ] {
        let dir = ws.path(&format!("my-{lang}"));
        let out = weir(
            &["guest", "new", "--lang", lang, dir.to_str().unwrap()],
            &[],
        )
        .await;
        assert!(out.status.success(), "{}", stderr(&out));
        for file in [
            source,
            "README.md",
            "fixtures.yaml",
            "pipeline.yaml",
            "tickets.csv",
        ] {
            let text = std::fs::read_to_string(dir.join(file)).unwrap();
            assert!(
                !text.contains(&format!("topic-{lang}")),
                "{lang}/{file} kept the example's name"
            );
        }
        let fixtures = std::fs::read_to_string(dir.join("fixtures.yaml")).unwrap();
        assert!(
            fixtures.contains(&format!("component: my-{lang}.wasm")),
            "{fixtures}"
        );
        // Made twice, the second refuses rather than overwrite.
        let again = weir(
            &["guest", "new", "--lang", lang, dir.to_str().unwrap()],
            &[],
        )
        .await;
        assert!(
            stderr(&again).contains("already exists"),
            "{}",
            stderr(&again)
        );
    }
    let manifest = ws.read("my-rust/Cargo.toml");
    let sdk = std::fs::canonicalize(concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk/rust")).unwrap();
    assert!(manifest.contains("name = \"my-rust\""), "{manifest}");
    assert!(
        manifest.contains(&format!("path = {:?}", sdk.display().to_string())),
        "{manifest}"
    );
    let out = weir(
        &[
            "guest",
            "new",
            "--lang",
            "c",
            ws.path("Bad Name").to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert!(
        stderr(&out).contains("a guest name starts with a lowercase letter"),
        "{}",
        stderr(&out)
    );
}

/// The SDK folder of this checkout, as `weir guest new` names it.
fn checkout_sdk(language: &str) -> String {
    std::fs::canonicalize(format!("{}/../sdk/{language}", env!("CARGO_MANIFEST_DIR")))
        .unwrap()
        .display()
        .to_string()
}

#[tokio::test]
async fn a_new_python_or_js_guest_uses_the_sdk_of_this_checkout_and_brings_native_tests() {
    let ws = Workspace::new();
    for lang in ["python", "js"] {
        let dir = ws.path(&format!("my-{lang}"));
        let out = weir(
            &["guest", "new", "--lang", lang, dir.to_str().unwrap()],
            &[],
        )
        .await;
        assert!(out.status.success(), "{}", stderr(&out));
    }

    // Python: the SDK by absolute path, so the folder works wherever it is.
    let requirements = ws.read("my-python/requirements.txt");
    let python_sdk = checkout_sdk("python");
    assert!(
        requirements.lines().any(|l| l.trim() == python_sdk),
        "{requirements}"
    );
    assert!(
        std::path::Path::new(&python_sdk)
            .join("pyproject.toml")
            .is_file()
    );
    assert!(ws.read("my-python/app.py").contains("weir_sdk.export("));
    let tests = ws.read("my-python/test_app.py");
    assert!(
        tests.contains("from weir_sdk.testing import MockHost"),
        "{tests}"
    );

    // JavaScript: the same, as a file: dependency.
    let manifest: serde_json::Value = serde_json::from_str(&ws.read("my-js/package.json")).unwrap();
    let js_sdk = checkout_sdk("js");
    assert_eq!(
        manifest["dependencies"]["weir-sdk"],
        format!("file:{js_sdk}"),
        "{manifest}"
    );
    assert!(
        manifest["devDependencies"]["rolldown"].is_string(),
        "{manifest}"
    );
    assert!(ws.read("my-js/transform.js").contains("from 'weir-sdk'"));

    // The new guest's own tests pass as made, run by Node's test runner
    // against the checkout's SDK (linked as `npm install` links a file:
    // dependency; the build tools it would also fetch are not needed here).
    if std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("node is not installed: the JavaScript guest's tests were not run");
        return;
    }
    let modules = ws.path("my-js/node_modules");
    std::fs::create_dir_all(&modules).unwrap();
    std::os::unix::fs::symlink(&js_sdk, modules.join("weir-sdk")).unwrap();
    let out = std::process::Command::new("node")
        .arg("--test")
        .current_dir(ws.path("my-js"))
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}{}", stderr(&out));
    assert!(
        report.contains("# pass 5") && report.contains("# fail 0"),
        "{report}"
    );
}

/// The same component with a custom section added: other bytes, so another
/// entry in the compiled-component cache.
fn variant_of(component: &[u8], tag: u8) -> Vec<u8> {
    let mut bytes = component.to_vec();
    // A custom section: id 0, size, then the name `v` and one byte.
    bytes.extend_from_slice(&[0, 3, 1, b'v', tag]);
    bytes
}

fn cached_components(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".cwasm"))
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn compiled_components_kept_across_runs_stay_under_their_cap() {
    let ws = Workspace::new();
    ws.write("in.jsonl", "{\"id\":1}\n");
    let chaos = std::fs::read(CHAOS_V0_1).unwrap();
    let cache = ws.path("components");
    let cache_dir = cache.to_str().unwrap();
    let mut seen = Vec::new();
    for tag in 1..=3u8 {
        std::fs::write(ws.path(&format!("c{tag}.wasm")), variant_of(&chaos, tag)).unwrap();
        let p = ws.write(
            &format!("p{tag}.yaml"),
            &one_node_pipeline(&format!("c{tag}.wasm")),
        );
        // A cap of 0 keeps only the component compiled last.
        let out = weir(
            &["validate", p.to_str().unwrap()],
            &[("WEIR_CACHE_DIR", cache_dir), ("WEIR_CACHE_MAX_MB", "0")],
        )
        .await;
        assert!(out.status.success(), "{}", stderr(&out));
        let kept = cached_components(&cache);
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert!(!seen.contains(&kept[0]), "{kept:?} was kept before");
        seen.push(kept[0].clone());
    }
    let listing = weir(&["cache", "components"], &[("WEIR_CACHE_DIR", cache_dir)]).await;
    let text = String::from_utf8_lossy(&listing.stdout);
    assert!(
        text.contains("1 compiled components") && text.contains("of a 1024 MiB cap"),
        "{text}"
    );
    let cleared = weir(
        &["cache", "components", "--clear"],
        &[("WEIR_CACHE_DIR", cache_dir)],
    )
    .await;
    assert!(cleared.status.success(), "{}", stderr(&cleared));
    assert!(cached_components(&cache).is_empty());
}

/// `weir test` runs a case's rows through the code `weir run` uses: a trap
/// is the row error `guest_trap`, and a configure that traps fails its own
/// cases, not the whole file.
#[tokio::test]
async fn weir_test_judges_rows_as_run_does_and_a_trapping_configure_fails_only_its_cases() {
    let ws = Workspace::new();
    let contract = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../wit/0.2.0/transform.wit"
    ))
    .unwrap();
    // Every export of this component traps, configure included.
    std::fs::write(ws.path("traps.wasm"), component_of(&contract)).unwrap();
    let trapping = ws.write(
        "traps.yaml",
        "component: traps.wasm\ncases:\n  - name: first\n    row: {id: 1}\n    expect:\n      \
         rows: [{id: 1}]\n  - name: second\n    row: {id: 2}\n    expect:\n      rows: [{id: 2}]\n",
    );
    let chaos = ws.write(
        "chaos.yaml",
        &format!(
            "component: {CHAOS_V0_1}\ncases:\n  - name: a panic is a guest trap\n    \
             row: {{act: panic}}\n    expect:\n      error: guest_trap\n  \
             - name: a plain row passes\n    row: {{id: 3}}\n    expect:\n      \
             rows: [{{id: 3, ok: true}}]\n"
        ),
    );
    let out = weir(
        &["test", trapping.to_str().unwrap(), chaos.to_str().unwrap()],
        &[],
    )
    .await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert_eq!(
        text.matches("the component failed while starting").count(),
        2,
        "{text}"
    );
    assert!(text.contains("0 passed, 2 failed"), "{text}");
    assert!(text.contains("2 passed, 0 failed"), "{text}");
    assert!(text.contains("in all: 2 passed, 2 failed"), "{text}");
}

/// A component built against a patch release of a supported contract
/// (0.2.1) runs on that contract's bindings, without a folder of its own.
#[tokio::test]
async fn a_component_of_a_patch_release_of_the_contract_runs() {
    let ws = Workspace::new();
    let contract = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../wit/0.2.0/transform.wit"
    ))
    .unwrap()
    .replace(
        "package weir:transform@0.2.0;",
        "package weir:transform@0.2.1;",
    );
    // Its exports trap, so starting it gets as far as configure and no further.
    std::fs::write(ws.path("patch.wasm"), component_of(&contract)).unwrap();
    ws.write("in.jsonl", "{\"id\":1}\n");
    let p = ws.write("p.yaml", &one_node_pipeline("patch.wasm"));
    let out = weir(&["validate", p.to_str().unwrap()], &[]).await;
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(err.contains("failed while starting"), "{err}");
    assert!(
        !err.contains("supports") && !err.contains("does not implement"),
        "{err}"
    );
}
