//! The Python clients weir is compared with (`bench/peers/`): plain aiohttp
//! with a semaphore, and the openai SDK with a semaphore. Each runs as a child
//! process, measured as weir is, against a fresh test LLM server (a test tool,
//! not a model) with the same script.

use crate::throughput::{Usage, measure_child};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use weir_test_llm_server::{Reply, expected_answer};

pub struct Peer {
    pub name: &'static str,
    script: &'static str,
    /// The package the script imports, checked before the run.
    module: &'static str,
}

pub const PEERS: [Peer; 2] = [
    Peer {
        name: "aiohttp",
        script: "aiohttp_peer.py",
        module: "aiohttp",
    },
    Peer {
        name: "openai SDK",
        script: "openai_peer.py",
        module: "openai",
    },
];

const SETUP: &str = "python3 -m venv bench/peers/.venv && \
                     bench/peers/.venv/bin/pip install -r bench/peers/requirements.txt";

fn peers_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers")
}

/// The Python that runs the peers: `WEIR_BENCH_PYTHON`, else the venv beside
/// the scripts; the reason to skip them when there is none.
pub fn python() -> Result<PathBuf, String> {
    if let Some(python) = std::env::var_os("WEIR_BENCH_PYTHON") {
        return Ok(PathBuf::from(python));
    }
    let venv = peers_dir().join(".venv/bin/python");
    if venv.is_file() {
        Ok(venv)
    } else {
        Err(format!(
            "no Python for the peers: set WEIR_BENCH_PYTHON or run `{SETUP}`"
        ))
    }
}

/// Why `peer` cannot run under `python`, if it cannot.
pub fn unavailable(python: &Path, peer: &Peer) -> Option<String> {
    let imported = std::process::Command::new(python)
        .args(["-c", &format!("import {}", peer.module)])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    match imported {
        Ok(status) if status.success() => None,
        Ok(_) => Some(format!(
            "{} cannot import {}: run `{SETUP}`",
            python.display(),
            peer.module
        )),
        Err(e) => Some(format!("cannot run {}: {e}", python.display())),
    }
}

pub struct PeerRun {
    /// Seconds from starting the child to its exit, as weir's wall time is.
    pub wall: f64,
    pub usage: Usage,
    /// Rows whose answer in the peer's output is the one the server gives.
    pub answered: usize,
}

/// Runs `peer` over `dir/rows.csv` against `base_url`, `concurrency` requests
/// at once.
pub async fn run(
    python: &Path,
    peer: &Peer,
    dir: &Path,
    base_url: &str,
    concurrency: usize,
) -> anyhow::Result<PeerRun> {
    let out = dir.join(format!("{}.jsonl", peer.module));
    let log = dir.join(format!("{}-stderr.log", peer.module));
    let mut command = std::process::Command::new(python);
    command
        .arg(peers_dir().join(peer.script))
        .args(["--base-url", base_url, "--concurrency"])
        .arg(concurrency.to_string())
        .arg("--rows")
        .arg(dir.join("rows.csv"))
        .arg("--out")
        .arg(&out)
        .stdout(std::fs::File::create(
            dir.join(format!("{}-counts.json", peer.module)),
        )?)
        .stderr(std::fs::File::create(&log)?);
    let started = std::time::Instant::now();
    let usage = measure_child(command, log, &[0], None).await?;
    Ok(PeerRun {
        wall: started.elapsed().as_secs_f64(),
        usage,
        answered: answered(dir, &out)?,
    })
}

/// Distinct rows of `out` (JSON lines of id and answer) answered as the
/// server answers their text, so a peer's work counts only when it is right.
fn answered(dir: &Path, out: &Path) -> anyhow::Result<usize> {
    let mut texts = HashMap::new();
    for record in csv::Reader::from_path(dir.join("rows.csv"))?.records() {
        let record = record?;
        texts.insert(record[0].to_string(), record[1].to_string());
    }
    let mut right = std::collections::HashSet::new();
    for line in std::fs::read_to_string(out)?.lines() {
        let line: serde_json::Value = serde_json::from_str(line)?;
        let (Some(id), Some(answer)) = (line["id"].as_str(), line["answer"].as_str()) else {
            continue;
        };
        if texts
            .get(id)
            .is_some_and(|text| answer == expected_answer(Reply::Echo, text))
        {
            right.insert(id.to_string());
        }
    }
    Ok(right.len())
}
