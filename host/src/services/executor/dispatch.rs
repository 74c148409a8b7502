//! One attempt over HTTP: the request in the endpoint's shape, its answer
//! read whole, and what went wrong when it was not.

use super::anthropic;
use super::retry;
use super::secrets::Secrets;
use super::target::Target;
use crate::config::EndpointKind;
use std::time::Duration;

pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

/// Why an attempt got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// Refused, reset or broken off.
    Transport,
    /// The TLS handshake failed: nothing of the request went out.
    Tls(TlsFailure),
    /// The host name of the URL does not resolve (and not for a moment):
    /// nothing went out.
    Unresolved,
    /// No complete answer within `request_timeout_seconds`.
    Timeout,
    /// The answer did not begin within `first_byte_timeout_seconds`.
    NoFirstByte,
    /// The answer is larger than `max_answer_mb`: not read further.
    TooLarge,
}

/// Why a TLS handshake failed, as far as that tells what to fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFailure {
    /// The server's certificate is not one weir trusts.
    Untrusted,
    /// What came back is not TLS: a plain HTTP server behind `https://`.
    NotTls,
    Other,
}

pub struct AttemptFailure {
    pub message: String,
    pub kind: FailureKind,
}

/// How long an attempt may take: to its whole answer, and to the answer's
/// first byte (the response head), which a queueing server holds back
/// while the request waits in its queue.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub total: Duration,
    pub first_byte: Option<Duration>,
}

pub struct Dispatch<'a> {
    pub client: &'a reqwest::Client,
    pub target: &'a Target,
    pub kind: EndpointKind,
    pub secrets: &'a Secrets,
    /// `max_answer_mb` in bytes.
    pub max_answer_bytes: u64,
}

impl Dispatch<'_> {
    /// Sends `body` once; the answer, or the failure, with the endpoint's
    /// secrets taken out: an endpoint or a proxy may echo them back.
    pub async fn attempt(&self, body: &str, timeouts: Timeouts) -> Result<Answer, AttemptFailure> {
        match self.attempt_raw(body, timeouts).await {
            Ok(mut answer) => {
                self.secrets.redact_headers(&mut answer.headers);
                answer.body = self.secrets.redact(std::mem::take(&mut answer.body));
                Ok(answer)
            }
            Err(mut failure) => {
                failure.message = self.secrets.redact(std::mem::take(&mut failure.message));
                Err(failure)
            }
        }
    }

    async fn attempt_raw(&self, body: &str, timeouts: Timeouts) -> Result<Answer, AttemptFailure> {
        let body = match self.kind {
            EndpointKind::Anthropic => anthropic::request(body),
            _ => body.to_string(),
        };
        let sent = self
            .client
            .post(self.target.url.clone())
            .headers(self.target.headers.clone())
            .timeout(timeouts.total)
            .body(body)
            .send();
        let response = match timeouts.first_byte.filter(|f| *f < timeouts.total) {
            Some(first_byte) => match tokio::time::timeout(first_byte, sent).await {
                Ok(response) => response,
                Err(_) => return Err(AttemptFailure::no_first_byte(first_byte)),
            },
            None => sent.await,
        }
        .map_err(|e| AttemptFailure::from_reqwest(&e, timeouts.total))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = read_body(response, self.max_answer_bytes, timeouts.total).await?;
        let body = match self.kind {
            EndpointKind::Anthropic if (200..300).contains(&status) => anthropic::answer(&body),
            _ => body,
        };
        Ok(Answer {
            status,
            headers,
            body,
        })
    }
}

/// The answer's body as text, decoded by its charset as reqwest's `text()`
/// does, read no further than `limit` bytes: one that says it is larger is
/// not read at all.
async fn read_body(
    mut response: reqwest::Response,
    limit: u64,
    timeout: Duration,
) -> Result<String, AttemptFailure> {
    let declared = response.content_length();
    if declared.is_some_and(|length| length > limit) {
        return Err(AttemptFailure::too_large(limit));
    }
    let encoding = charset(response.headers());
    let mut bytes = Vec::with_capacity(declared.unwrap_or(0) as usize);
    while let Some(chunk) = response.chunk().await.map_err(|e| {
        let mut failure = AttemptFailure::from_reqwest(&e, timeout);
        failure.message = format!("the answer broke off: {}", failure.message);
        failure
    })? {
        if (bytes.len() + chunk.len()) as u64 > limit {
            return Err(AttemptFailure::too_large(limit));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(match encoding {
        None => match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        },
        Some(encoding) => encoding.decode(&bytes).0.into_owned(),
    })
}

/// The encoding the answer's `Content-Type` names, unless it is UTF-8 (or
/// none, or one not known), which needs no decoding but a check.
fn charset(headers: &reqwest::header::HeaderMap) -> Option<&'static encoding_rs::Encoding> {
    let content_type = headers.get(reqwest::header::CONTENT_TYPE)?.to_str().ok()?;
    let label = content_type.split(';').skip(1).find_map(|param| {
        let (name, value) = param.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("charset")
            .then(|| value.trim().trim_matches('"'))
    })?;
    encoding_rs::Encoding::for_label(label.as_bytes()).filter(|e| *e != encoding_rs::UTF_8)
}

impl AttemptFailure {
    fn too_large(limit: u64) -> Self {
        Self {
            message: format!(
                "the answer is larger than max_answer_mb ({} MiB): not read further",
                limit >> 20
            ),
            kind: FailureKind::TooLarge,
        }
    }

    fn from_reqwest(err: &reqwest::Error, timeout: Duration) -> Self {
        Self {
            message: describe_transport(err, timeout),
            kind: if err.is_timeout() {
                FailureKind::Timeout
            } else if let Some(tls) = tls_failure(err) {
                FailureKind::Tls(tls)
            } else if unresolved(err) {
                FailureKind::Unresolved
            } else {
                FailureKind::Transport
            },
        }
    }

    fn no_first_byte(after: Duration) -> Self {
        Self {
            message: format!(
                "no answer began within {} s (first_byte_timeout_seconds)",
                after.as_secs_f64()
            ),
            kind: FailureKind::NoFirstByte,
        }
    }
}

/// What the audit trail and the breaker say of a 2xx that is not JSON.
pub fn not_json(answer: &Answer) -> String {
    format!(
        "HTTP {} with a body that is not JSON: {}",
        answer.status,
        retry::body_start(&answer.body)
    )
}

/// The TLS failure among `err`'s causes, if any.
fn tls_failure(err: &reqwest::Error) -> Option<TlsFailure> {
    let tls = causes(err).find_map(rustls_error)?;
    Some(match tls {
        rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => {
            TlsFailure::Untrusted
        }
        rustls::Error::InvalidMessage(_)
        | rustls::Error::InappropriateMessage { .. }
        | rustls::Error::InappropriateHandshakeMessage { .. } => TlsFailure::NotTls,
        _ => TlsFailure::Other,
    })
}

/// Whether `err` says the URL's host name does not resolve: the connector's
/// "dns error" among its causes, for a reason other than a resolver that
/// asks to try again (EAI_AGAIN, "Temporary failure in name resolution"),
/// which a retry may get past. The resolver's reasons have no kind of
/// their own, only their text.
fn unresolved(err: &reqwest::Error) -> bool {
    let Some(dns) = causes(err).find(|error| error.to_string() == "dns error") else {
        return false;
    };
    let why = dns.source().map(|e| e.to_string().to_lowercase());
    why.is_some_and(|why| !why.contains("temporar") && !why.contains("try again"))
}

/// The host and port that refused `err`'s connection, if that is its cause.
fn refused_at(err: &reqwest::Error) -> Option<String> {
    let refused = causes(err).any(|error| {
        error
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
    });
    let url = err.url().filter(|_| refused && err.is_connect())?;
    Some(format!(
        "{}:{}",
        url.host_str()?,
        url.port_or_known_default()?
    ))
}

/// `err` and the errors it was caused by, outermost first.
fn causes(err: &reqwest::Error) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
    std::iter::successors(Some(err as &(dyn std::error::Error + 'static)), |error| {
        error.source()
    })
}

/// rustls's error, as it is or as the payload of an `io::Error`: the
/// connector hands it on wrapped, in two of them.
fn rustls_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut error = error;
    loop {
        if let Some(tls) = error.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        error = error.downcast_ref::<std::io::Error>()?.get_ref()?;
    }
}

/// reqwest's Display hides the cause that tells users what to fix.
fn describe_transport(err: &reqwest::Error, timeout: Duration) -> String {
    if err.is_timeout() {
        return format!(
            "no answer within {} s (request_timeout_seconds)",
            timeout.as_secs_f64()
        );
    }
    if let Some(at) = refused_at(err) {
        return format!(
            "connection refused at {at}: nothing listens there (is the server running, and \
             is the port in base_url right?)"
        );
    }
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
