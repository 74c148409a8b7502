//! An HTTPS endpoint that offers HTTP/2 and lets four streams run at once on
//! a connection, as servers cap them (often at 100 to 256), and TLS that
//! fails before any answer. The server here
//! is a test tool written for this file: TLS with a certificate of the test
//! CA in `tests/all/tls/` (trusted by `weir` through `SSL_CERT_FILE`), and
//! one canned chat answer after 100 ms. `weir` is the real binary.

use crate::common::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const STREAMS_PER_CONNECTION: u32 = 4;

fn tls_file(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/all/tls")
        .join(name)
}

/// Requests in flight at the server: now and at most, and whether any came
/// over HTTP/2.
#[derive(Default)]
struct Seen {
    now: AtomicUsize,
    peak: AtomicUsize,
    over_http2: AtomicUsize,
}

/// Serves HTTPS on a free loopback port until the test ends; returns its port.
async fn serve_tls(seen: Arc<Seen>) -> u16 {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = vec![CertificateDer::from_pem_file(tls_file("server.pem")).unwrap()];
    let key = PrivateKeyDer::from_pem_file(tls_file("server.key")).unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, seen) = (acceptor.clone(), Arc::clone(&seen));
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |request| {
                    let seen = Arc::clone(&seen);
                    async move { Ok::<_, std::convert::Infallible>(answer(&seen, request).await) }
                });
                let mut builder = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                );
                builder
                    .http2()
                    .max_concurrent_streams(STREAMS_PER_CONNECTION);
                let io = hyper_util::rt::TokioIo::new(tls);
                let _ = builder.serve_connection(io, service).await;
            });
        }
    });
    port
}

async fn answer(
    seen: &Seen,
    request: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<http_body_util::Full<bytes::Bytes>> {
    if request.version() == hyper::Version::HTTP_2 {
        seen.over_http2.fetch_add(1, Ordering::SeqCst);
    }
    let now = seen.now.fetch_add(1, Ordering::SeqCst) + 1;
    seen.peak.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    seen.now.fetch_sub(1, Ordering::SeqCst);
    let body = r#"{"id":"chatcmpl-tls","object":"chat.completion","created":0,"model":"test-model","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#;
    hyper::Response::builder()
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap()
}

/// Runs 48 rows with 16 in flight against the HTTPS server; what it saw.
async fn run_over_tls(endpoint: &str) -> Arc<Seen> {
    let seen = Arc::new(Seen::default());
    let port = serve_tls(Arc::clone(&seen)).await;
    let ws = Workspace::new();
    ws.write("in.csv", &numbered_rows(48));
    let settings = format!("pool_size: 16\nadaptive_concurrency: false\n{endpoint}");
    let p = ws.write(
        "p.yaml",
        &pipeline_with("in.csv", "out.csv", &settings, "", ECHO_OPTIONS),
    );
    let ca = tls_file("ca.pem");
    let base_url = format!("https://localhost:{port}/v1");
    let out = weir(
        &["run", p.to_str().unwrap(), "--no-progress"],
        &[
            ("OPENAI_API_KEY", KEY),
            ("OPENAI_BASE_URL", &base_url),
            ("SSL_CERT_FILE", ca.to_str().unwrap()),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(read_csv(&ws.path("out.csv")).len(), 49);
    seen
}

#[tokio::test]
async fn requests_in_flight_over_https_reach_the_pool_size_past_a_servers_stream_limit() {
    let seen = run_over_tls("").await;
    assert_eq!(seen.over_http2.load(Ordering::SeqCst), 0, "HTTP/1.1 each");
    assert_eq!(seen.peak.load(Ordering::SeqCst), 16);
}

#[tokio::test]
async fn an_endpoint_that_allows_http2_shares_one_connection_up_to_its_stream_limit() {
    let seen = run_over_tls("http2: true").await;
    assert_eq!(seen.over_http2.load(Ordering::SeqCst), 48);
    let peak = seen.peak.load(Ordering::SeqCst);
    assert!(
        peak <= 2 * STREAMS_PER_CONNECTION as usize,
        "{peak} in flight: one connection per guest thread at most, each at its stream limit"
    );
}

/// Runs `weir` on 20 rows against `base_url`, which must stop it at its
/// first request, before any row is done; what it said.
async fn run_stopped_at_once(base_url: &str) -> String {
    let ws = Workspace::new();
    let p = numbered_rows_pipeline(&ws, 20, "", "", ECHO_OPTIONS);
    let env = [("OPENAI_API_KEY", KEY), ("OPENAI_BASE_URL", base_url)];
    let out = weir(&["run", p.to_str().unwrap(), "--no-progress"], &env).await;
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{message}");
    assert!(
        message.contains("rows     0 finished before the stop")
            && !message.contains("circuit breaker has been open"),
        "stopped at once, not once the breaker gave up: {message}"
    );
    assert_eq!(run_status(&ws), "interrupted");
    message
}

/// No retry makes a certificate trusted: the run stops at its first
/// handshake and says where to give the CA.
#[tokio::test]
async fn a_certificate_weir_does_not_trust_stops_the_run_at_once_naming_ssl_cert_file() {
    let port = serve_tls(Arc::new(Seen::default())).await;
    let message = run_stopped_at_once(&format!("https://localhost:{port}/v1")).await;
    assert!(
        message.contains("the TLS handshake failed before any answer")
            && message.contains("invalid peer certificate: UnknownIssuer")
            && message.contains("SSL_CERT_FILE names a PEM bundle with the CA to trust"),
        "{message}"
    );
}

/// `https://` in front of a plain HTTP server (the test LLM server, a test
/// tool): what comes back is no TLS, and the run stops saying so.
#[tokio::test]
async fn an_https_url_for_a_plain_http_server_stops_the_run_at_once() {
    let server = weir_test_llm_server::TestLlmServer::start(Default::default())
        .await
        .unwrap();
    let base_url = server.base_url().replacen("http://", "https://", 1);
    let message = run_stopped_at_once(&base_url).await;
    assert!(
        message.contains("the TLS handshake failed before any answer")
            && message.contains("does base_url say https:// for a plain HTTP server?"),
        "{message}"
    );
    assert!(server.served().is_empty());
}
