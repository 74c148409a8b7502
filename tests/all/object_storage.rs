//! Sources, sinks, part files and audit databases on S3, against moto's S3
//! server (a test tool, from PyPI: `pip install 'moto[server]'`), with the
//! real `weir` binary and the test LLM server (a test tool) over loopback.

use crate::common::*;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, PutPayload};
use std::time::Duration;
use weir_test_llm_server::{Script, TestLlmServer};

const BUCKET: &str = "weir-test";
const ROWS: usize = 120;
/// moto takes any credentials; these only have to be findable if leaked.
const ACCESS_KEY: &str = "AKIAWEIRTEST7Q2";
const SECRET_KEY: &str = "weir-s3-secret-5e8a1c";

/// A moto S3 server on a free loopback port, stopped when dropped.
struct Moto {
    endpoint: String,
    _child: tokio::process::Child,
}

impl Moto {
    /// None, after saying why, where moto is not installed.
    async fn start() -> Option<Self> {
        let program = std::env::var("WEIR_MOTO_SERVER").unwrap_or_else(|_| "moto_server".into());
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = tokio::process::Command::new(&program)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn();
        let Ok(mut child) = child else {
            eprintln!(
                "skipped: `{program}` not found; install moto's S3 server with \
                 `pip install 'moto[server]'`, or point WEIR_MOTO_SERVER at moto_server"
            );
            return None;
        };
        let endpoint = format!("http://127.0.0.1:{port}");
        for _ in 0..300 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Some(Self {
                    endpoint,
                    _child: child,
                });
            }
            // A wrapper (a pyenv shim) whose Python lacks moto exits at once.
            if let Ok(Some(status)) = child.try_wait() {
                eprintln!(
                    "skipped: `{program}` exited with {status} before listening; install \
                     moto's S3 server with `pip install 'moto[server]'`"
                );
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("moto_server did not listen on port {port} within 30 s");
    }

    /// What weir reads its S3 settings from.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ALLOW_HTTP", "true".into()),
        ]
    }

    /// The test's own client, configured apart from weir's.
    async fn bucket(&self) -> AmazonS3 {
        let created = reqwest::Client::new()
            .put(format!("{}/{BUCKET}", self.endpoint))
            .send()
            .await
            .unwrap();
        assert!(created.status().is_success(), "{created:?}");
        AmazonS3Builder::new()
            .with_bucket_name(BUCKET)
            .with_endpoint(&self.endpoint)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id(ACCESS_KEY)
            .with_secret_access_key(SECRET_KEY)
            .build()
            .unwrap()
    }
}

async fn get(store: &AmazonS3, key: &str) -> Option<Vec<u8>> {
    match store.get(&ObjectPath::from(key)).await {
        Ok(got) => Some(got.bytes().await.unwrap().to_vec()),
        Err(object_store::Error::NotFound { .. }) => None,
        Err(e) => panic!("{key}: {e}"),
    }
}

/// `weir` with the endpoint, S3's settings and a staging folder of its own:
/// a process with a fresh folder finds nothing of another's stand-ins, so
/// whatever it reads of another's output it reads from S3.
async fn weir_s3(
    moto: &Moto,
    llm: &TestLlmServer,
    staging: &std::path::Path,
    args: &[&str],
) -> std::process::Output {
    let base_url = llm.base_url();
    let mut env: Vec<(&str, String)> = moto.env();
    env.push(("OPENAI_API_KEY", KEY.into()));
    env.push(("OPENAI_BASE_URL", base_url));
    env.push(("WEIR_STAGING_DIR", staging.display().to_string()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    weir(args, &env).await
}

fn s3_pipeline(ws: &Workspace, source: &str) -> std::path::PathBuf {
    ws.write(
        "s3.yaml",
        &pipeline_with(
            &format!("s3://{BUCKET}/{source}"),
            &format!("s3://{BUCKET}/out/result.csv"),
            "pool_size: 8",
            "",
            ECHO_OPTIONS,
        ),
    )
}

#[tokio::test]
async fn two_shards_read_and_write_s3_and_merge_there_into_what_one_local_run_writes() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let store = moto.bucket().await;
    let llm = TestLlmServer::start(Script {
        latency: Duration::from_millis(30),
        ..Script::default()
    })
    .await
    .unwrap();
    let source = numbered_rows(ROWS);
    store
        .put(
            &ObjectPath::from("in/rows.csv"),
            PutPayload::from(source.clone().into_bytes()),
        )
        .await
        .unwrap();
    let ws = Workspace::new();
    let p = s3_pipeline(&ws, "in/rows.csv");
    let p = p.to_str().unwrap();

    let checked = weir_s3(&moto, &llm, &ws.path("checker"), &["validate", p]).await;
    let said = String::from_utf8_lossy(&checked.stdout);
    assert_eq!(checked.status.code(), Some(0), "{}", stderr(&checked));
    assert!(
        said.contains(&format!("source  s3://{BUCKET}/in/rows.csv")),
        "{said}"
    );

    // Each shard as on a machine of its own.
    let shard = |i: u32| {
        let staging = ws.path(&format!("machine-{i}"));
        let shard = format!("{i}/2");
        let (moto, llm) = (&moto, &llm);
        async move { weir_s3(moto, llm, &staging, &["run", p, "--shard", &shard]).await }
    };
    let first = shard(0).await;
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    assert!(
        get(&store, "out/result.part-0-of-2.csv").await.is_some(),
        "shard 0's part is uploaded"
    );

    // The merge runs elsewhere, reads the parts from S3, and refuses while
    // one is missing, naming its URL.
    let merger = ws.path("merger");
    let refused = weir_s3(&moto, &llm, &merger, &["merge", p, "--shards", "2"]).await;
    let message = stderr(&refused);
    assert_eq!(refused.status.code(), Some(1), "{message}");
    assert!(
        message.contains(&format!(
            "shard 1/2 has not run: there is no s3://{BUCKET}/out/weir-audit.part-1-of-2.sqlite"
        )),
        "{message}"
    );
    assert!(get(&store, "out/result.csv").await.is_none());

    // Shard 1 is killed mid-run and resumed: its rows so far wait in its
    // machine's partial file, and S3 gets only the finished part.
    let machine = ws.path("machine-1");
    let mut env = moto.env();
    env.push(("WEIR_STAGING_DIR", machine.display().to_string()));
    let mut killed = tokio::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", p, "--no-progress", "--shard", "1/2"])
        .env("OPENAI_API_KEY", KEY)
        .env("OPENAI_BASE_URL", llm.base_url())
        .envs(env)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let before = llm.served().len();
    while llm.served().len() < before + ROWS / 4 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    killed.start_kill().unwrap();
    killed.wait().await.unwrap();
    assert!(get(&store, "out/result.part-1-of-2.csv").await.is_none());
    let second = weir_s3(
        &moto,
        &llm,
        &machine,
        &["run", p, "--shard", "1/2", "--resume"],
    )
    .await;
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    assert!(
        stderr(&second).contains("resumed  segment 2"),
        "the shard resumed rather than started again: {}",
        stderr(&second)
    );
    let merged = weir_s3(&moto, &llm, &merger, &["merge", p, "--shards", "2"]).await;
    let said = String::from_utf8_lossy(&merged.stdout);
    assert_eq!(merged.status.code(), Some(0), "{}", stderr(&merged));
    assert!(
        said.contains(&format!("output   s3://{BUCKET}/out/result.csv")),
        "{said}"
    );

    // One local run over the same rows writes the same bytes.
    let single = Workspace::new();
    single.write("rows.csv", &source);
    let local = single.write(
        "p.yaml",
        &pipeline_with("rows.csv", "result.csv", "pool_size: 8", "", ECHO_OPTIONS),
    );
    let out = run_with_key(&local, &llm.base_url()).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let expected = std::fs::read(single.path("result.csv")).unwrap();
    // The header and a row for each source row.
    assert_eq!(read_csv(&single.path("result.csv")).len(), ROWS + 1);
    assert_eq!(get(&store, "out/result.csv").await.unwrap(), expected);

    // The merged audit database is on S3, and a third machine reads it.
    let reader = ws.path("reader");
    let audit_url = format!("s3://{BUCKET}/out/weir-audit.sqlite");
    let runs = weir_s3(&moto, &llm, &reader, &["runs", "--audit", &audit_url]).await;
    let listed = String::from_utf8_lossy(&runs.stdout);
    assert!(listed.contains("merged 2"), "{listed}{}", stderr(&runs));
    assert!(listed.contains(&format!("{ROWS} completed")), "{listed}");
    let story = weir_s3(
        &moto,
        &llm,
        &reader,
        &["explain", "1", "100", "--audit", &audit_url],
    )
    .await;
    let text = String::from_utf8_lossy(&story.stdout);
    assert!(text.contains("ended     completed"), "{text}");
    // No credential reaches the audit database.
    let audit = get(&store, "out/weir-audit.sqlite").await.unwrap();
    assert!(
        !contains(&audit, SECRET_KEY.as_bytes()),
        "the S3 secret is in the audit"
    );
    assert!(
        !contains(&audit, KEY.as_bytes()),
        "the API key is in the audit"
    );
}

#[tokio::test]
async fn a_missing_object_is_named_by_its_url() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let _store = moto.bucket().await;
    let llm = TestLlmServer::start(Script::default()).await.unwrap();
    let ws = Workspace::new();
    let p = s3_pipeline(&ws, "in/absent.csv");
    let out = weir_s3(
        &moto,
        &llm,
        &ws.path("staging"),
        &["run", p.to_str().unwrap()],
    )
    .await;
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{message}");
    assert!(
        message.contains(&format!(
            "s3://{BUCKET}/in/absent.csv does not exist: no such object, or no such bucket"
        )),
        "{message}"
    );
    assert!(llm.served().is_empty(), "no row was sent");
}
