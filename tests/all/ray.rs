//! `examples/scale-out/ray_shards.py` on a local Ray instance: one Ray task
//! per shard, each a real `weir run --shard`, then `weir merge`, against the
//! test LLM server (a test tool). Ray comes from PyPI (`pip install ray`);
//! the test finds its Python through WEIR_RAY_PYTHON, else `python3`, and is
//! skipped, saying so, where Ray is not installed.

use crate::common::*;
use weir_test_llm_server::{Script, TestLlmServer};

const ROWS: usize = 90;
const SHARDS: u32 = 3;

/// A Python that imports Ray, or None after saying why not.
async fn python_with_ray() -> Option<String> {
    let python = std::env::var("WEIR_RAY_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = tokio::process::Command::new(&python)
        .args(["-c", "import ray"])
        .output()
        .await;
    match probe {
        Ok(out) if out.status.success() => Some(python),
        _ => {
            eprintln!(
                "skipped: `{python}` cannot import ray; `pip install ray` (or point \
                 WEIR_RAY_PYTHON at a Python that has it) to run the Ray example"
            );
            None
        }
    }
}

#[tokio::test]
async fn the_ray_example_runs_shards_as_tasks_and_merges_them_into_what_one_run_writes() {
    let Some(python) = python_with_ray().await else {
        return;
    };
    let server = TestLlmServer::start(Script::default()).await.unwrap();
    let pipeline = |ws: &Workspace| {
        ws.write("in.csv", &numbered_rows(ROWS));
        ws.write(
            "p.yaml",
            &pipeline_with("in.csv", "out/result.csv", "", "", ECHO_OPTIONS),
        )
    };
    let ws = Workspace::new();
    let p = pipeline(&ws);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/scale-out/ray_shards.py"
    );
    let mut cmd = tokio::process::Command::new(&python);
    cmd.args([script, p.to_str().unwrap(), "--shards", &SHARDS.to_string()])
        .env("WEIR", env!("CARGO_BIN_EXE_weir"))
        .env("OPENAI_API_KEY", KEY)
        .env("OPENAI_BASE_URL", server.base_url())
        .env(
            "WEIR_CACHE_DIR",
            std::env::temp_dir().join("weir-test-cache"),
        )
        // A local instance of its own, whatever cluster the machine names.
        .env_remove("RAY_ADDRESS")
        .kill_on_drop(true);
    let out = tokio::time::timeout(std::time::Duration::from_secs(180), cmd.output())
        .await
        .expect("the Ray example did not finish within 180 s")
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}{}", stderr(&out));
    assert!(
        said.contains("shards finished: exit codes [0, 0, 0]"),
        "{said}"
    );
    assert!(
        said.contains(&format!("merged {SHARDS} shards: {ROWS} rows")),
        "{said}"
    );
    for i in 0..SHARDS {
        let part = format!("out/result.part-{i}-of-{SHARDS}.csv");
        assert!(ws.path(&part).exists(), "{part}");
    }

    let single = Workspace::new();
    let p1 = pipeline(&single);
    let out = run_with_key(&p1, &server.base_url()).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read(ws.path("out/result.csv")).unwrap(),
        std::fs::read(single.path("out/result.csv")).unwrap()
    );
}
