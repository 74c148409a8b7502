//! The providers' Batch APIs over HTTP: upload (OpenAI, Azure OpenAI),
//! create, look up, poll, fetch results and cancel. Auth headers are the
//! endpoint's own; nothing here is shown to guests.

use super::lines::{self, LineResult, Wire};
use super::spool::Spooled;
use super::store::Request;
use crate::config::model::defaults::{ANTHROPIC_BASE_URL, OPENAI_BASE_URL};
use crate::config::{EndpointKind, EndpointSpec};
use crate::context::Context;
use crate::services::redirects;
use reqwest::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderMap};
use serde_json::{Value, json};
use std::time::Duration;

use super::BatchError;

type Result<T, E = BatchError> = std::result::Result<T, E>;

/// A batch as the provider reports it.
#[derive(Debug, Clone, Default)]
pub struct Status {
    pub status: String,
    /// The provider will not work on it any more.
    pub ended: bool,
    pub total: u64,
    pub done: u64,
    pub failed: u64,
    pub output_file_id: Option<String>,
    pub error_file_id: Option<String>,
    pub results_url: Option<String>,
    /// Why the provider refused the whole batch (OpenAI `failed`).
    pub errors: Option<String>,
}

pub struct Client {
    wire: Wire,
    /// OpenAI: `…/v1`; Azure: `…/openai`; Anthropic: `…/v1/messages/batches`.
    base: String,
    /// Azure's `api-version`.
    query: Vec<(String, String)>,
    deployment: Option<String>,
    headers: HeaderMap,
    http: reqwest::Client,
}

/// A refusal by the provider, with its status: 401/403 stop the run.
#[derive(Debug)]
pub struct Refused {
    pub status: u16,
    pub message: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "status {}: {}", self.status, self.message)
    }
}

impl std::error::Error for Refused {}

impl Client {
    pub fn new(name: &str, spec: &EndpointSpec, headers: HeaderMap) -> Result<Self> {
        let base = spec
            .base_url
            .as_deref()
            .unwrap_or(match spec.kind {
                EndpointKind::Anthropic => ANTHROPIC_BASE_URL,
                _ => OPENAI_BASE_URL,
            })
            .trim_end_matches('/');
        let (wire, base, query) = match spec.kind {
            EndpointKind::Openai => (Wire::OpenAi, base.to_string(), Vec::new()),
            EndpointKind::AzureOpenai => (
                Wire::Azure,
                format!("{base}/openai"),
                vec![(
                    "api-version".to_string(),
                    spec.api_version.clone().unwrap_or_default(),
                )],
            ),
            EndpointKind::Anthropic => (
                Wire::Anthropic,
                format!("{base}/v1/messages/batches"),
                Vec::new(),
            ),
            EndpointKind::Http => {
                return Err(BatchError::Invalid(format!(
                    "endpoint `{name}`: kind http has no Batch API"
                )));
            }
        };
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs_f64(spec.connect_timeout_seconds))
            // Uploads and result files can be hundreds of MB.
            .timeout(Duration::from_secs(600))
            .redirect(redirects::policy())
            .user_agent(concat!("weir/", env!("CARGO_PKG_VERSION")))
            .build()
            .with_context(|| format!("endpoint `{name}`: cannot build the HTTP client"))?;
        Ok(Self {
            wire,
            base,
            query,
            deployment: spec.deployment.clone(),
            headers,
            http,
        })
    }

    pub fn wire(&self) -> Wire {
        self.wire
    }

    /// The batch's lines as JSONL (OpenAI, Azure) or as Anthropic's list.
    /// The batch's lines, each as JSON text followed by `separator`: built
    /// one at a time, so a batch of 50,000 costs its text and no more.
    /// A request as a line of the provider's batch file (or array).
    pub fn line(&self, request: &Request) -> String {
        lines::line(
            self.wire,
            &request.custom_id,
            &request.body,
            self.deployment.as_deref(),
        )
        .to_string()
    }

    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let mut headers = self.headers.clone();
        headers.remove(CONTENT_TYPE);
        self.http
            .request(method, url)
            .headers(headers)
            .query(&self.query)
    }

    async fn send(&self, builder: reqwest::RequestBuilder, what: &str) -> Result<String> {
        let response = builder
            .send()
            .await
            .with_context(|| format!("cannot {what}"))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response
            .text()
            .await
            .with_context(|| format!("cannot {what}: the answer broke off"))?;
        if !(200..300).contains(&status) {
            return Err(refused(what, status, &headers, &text));
        }
        Ok(text)
    }

    async fn send_json(&self, builder: reqwest::RequestBuilder, what: &str) -> Result<Value> {
        let text = self.send(builder, what).await?;
        Ok(serde_json::from_str(&text).with_context(|| {
            format!("cannot {what}: the answer is not JSON: {}", excerpt(&text))
        })?)
    }

    /// OpenAI and Azure: uploads the batch's JSONL file; returns its id.
    pub async fn upload(&self, lines: &Spooled) -> Result<String> {
        let body = lines.body().context("cannot read the spooled batch file")?;
        let part = reqwest::multipart::Part::stream_with_length(body, lines.len)
            .file_name("weir-batch.jsonl")
            .mime_str("application/jsonl")?;
        let form = reqwest::multipart::Form::new()
            .text("purpose", "batch")
            .part("file", part);
        let url = format!("{}/files", self.base);
        let file = self
            .send_json(
                self.request(reqwest::Method::POST, &url).multipart(form),
                "upload the batch file",
            )
            .await?;
        string_field(&file, "id").ok_or(BatchError::Answer("the uploaded file has no id"))
    }

    /// Creates the batch; `tag` goes in its metadata (OpenAI, Azure), so a
    /// run killed before it recorded the id can find it again.
    pub async fn create(
        &self,
        file_id: Option<&str>,
        lines: &Spooled,
        tag: &str,
    ) -> Result<String> {
        let (url, body, len) = match self.wire {
            Wire::OpenAi | Wire::Azure => {
                let body = json!({
                    "input_file_id": file_id.ok_or(BatchError::Answer("an OpenAI batch needs its file"))?,
                    "endpoint": if self.wire == Wire::Azure { "/chat/completions" } else { "/v1/chat/completions" },
                    "completion_window": "24h",
                    "metadata": { "weir_batch": tag },
                })
                .to_string();
                let len = body.len() as u64;
                (format!("{}/batches", self.base), body.into(), len)
            }
            Wire::Anthropic => (
                self.base.clone(),
                lines
                    .body()
                    .context("cannot read the spooled batch requests")?,
                lines.len,
            ),
        };
        let batch = self
            .send_json(
                self.request(reqwest::Method::POST, &url)
                    .header(CONTENT_TYPE, "application/json")
                    .header(CONTENT_LENGTH, len)
                    .body(body),
                "create the batch",
            )
            .await?;
        string_field(&batch, "id").ok_or(BatchError::Answer("the new batch has no id"))
    }

    /// OpenAI, Azure: the batch whose metadata carries `tag`, among the
    /// newest ones.
    pub async fn find(&self, tag: &str) -> Result<Option<String>> {
        if self.wire == Wire::Anthropic {
            return Ok(None);
        }
        let url = format!("{}/batches", self.base);
        Ok(self
            .newest(&url)
            .await?
            .iter()
            .find(|b| b["metadata"]["weir_batch"] == tag)
            .and_then(|b| string_field(b, "id")))
    }

    /// Anthropic: a batch of `requests` requests created since `since_ms`
    /// that no recorded batch of the run is, among the newest: the one a run
    /// killed between creating it and recording its id had sent (Anthropic
    /// batches carry no metadata to tag them with).
    pub async fn find_untagged(
        &self,
        since_ms: i64,
        requests: usize,
        known: &std::collections::HashSet<String>,
    ) -> Result<Option<String>> {
        Ok(self
            .newest(&self.base)
            .await?
            .iter()
            .filter(|b| {
                let counts = &b["request_counts"];
                let total: u64 = ["processing", "succeeded", "errored", "canceled", "expired"]
                    .iter()
                    .map(|k| counts[*k].as_u64().unwrap_or(0))
                    .sum();
                // Clocks differ: a minute of slack.
                let created = b["created_at"].as_str().and_then(unix_ms_of_rfc3339);
                total == requests as u64 && created.is_some_and(|at| at >= since_ms - 60_000)
            })
            .filter_map(|b| string_field(b, "id"))
            .find(|id| !known.contains(id)))
    }

    /// The newest 100 batches the account holds, newest first.
    async fn newest(&self, url: &str) -> Result<Vec<Value>> {
        let mut list = self
            .send_json(
                self.request(reqwest::Method::GET, url)
                    .query(&[("limit", "100")]),
                "list the batches",
            )
            .await?;
        Ok(match list["data"].take() {
            Value::Array(batches) => batches,
            _ => Vec::new(),
        })
    }

    pub async fn status(&self, batch_id: &str) -> Result<Status> {
        let url = match self.wire {
            Wire::OpenAi | Wire::Azure => format!("{}/batches/{batch_id}", self.base),
            Wire::Anthropic => format!("{}/{batch_id}", self.base),
        };
        let batch = self
            .send_json(
                self.request(reqwest::Method::GET, &url),
                &format!("ask for batch {batch_id}"),
            )
            .await?;
        Ok(match self.wire {
            Wire::OpenAi | Wire::Azure => {
                let status = string_field(&batch, "status").unwrap_or_default();
                let counts = &batch["request_counts"];
                Status {
                    ended: matches!(
                        status.as_str(),
                        "completed" | "failed" | "expired" | "cancelled"
                    ),
                    total: counts["total"].as_u64().unwrap_or(0),
                    done: counts["completed"].as_u64().unwrap_or(0),
                    failed: counts["failed"].as_u64().unwrap_or(0),
                    output_file_id: string_field(&batch, "output_file_id"),
                    error_file_id: string_field(&batch, "error_file_id"),
                    results_url: None,
                    errors: batch["errors"]["data"]
                        .as_array()
                        .filter(|e| !e.is_empty())
                        .map(|e| {
                            e.iter()
                                .filter_map(|e| e["message"].as_str())
                                .collect::<Vec<_>>()
                                .join("; ")
                        }),
                    status,
                }
            }
            Wire::Anthropic => {
                let status = string_field(&batch, "processing_status").unwrap_or_default();
                let counts = &batch["request_counts"];
                let count = |k: &str| counts[k].as_u64().unwrap_or(0);
                let done = count("succeeded");
                let failed = count("errored") + count("canceled") + count("expired");
                Status {
                    ended: status == "ended",
                    total: done + failed + count("processing"),
                    done,
                    failed,
                    output_file_id: None,
                    error_file_id: None,
                    results_url: string_field(&batch, "results_url"),
                    errors: None,
                    status,
                }
            }
        })
    }

    /// Hands `each` every result line of an ended batch as it downloads;
    /// returns how many lines could not be read.
    pub async fn results(
        &self,
        status: &Status,
        mut each: impl FnMut(LineResult),
    ) -> Result<usize> {
        let mut downloads = Vec::new();
        match self.wire {
            Wire::OpenAi | Wire::Azure => {
                for file in [&status.output_file_id, &status.error_file_id]
                    .into_iter()
                    .flatten()
                {
                    let url = format!("{}/files/{file}/content", self.base);
                    downloads.push((url, format!("download the batch file {file}")));
                }
            }
            Wire::Anthropic => {
                if let Some(url) = &status.results_url {
                    downloads.push((url.clone(), "download the batch results".to_string()));
                }
            }
        }
        let mut unreadable = 0;
        for (url, what) in downloads {
            self.read_lines(self.request(reqwest::Method::GET, &url), &what, |line| {
                match lines::parse_line(self.wire, line) {
                    Some(Some(result)) => each(result),
                    Some(None) => unreadable += 1,
                    None => {}
                }
            })
            .await?;
        }
        Ok(unreadable)
    }

    /// Hands each line of the answer to `each` as it arrives: a results
    /// file of 50,000 answers is never held whole.
    async fn read_lines(
        &self,
        builder: reqwest::RequestBuilder,
        what: &str,
        mut each: impl FnMut(&str),
    ) -> Result<()> {
        let mut response = builder
            .send()
            .await
            .with_context(|| format!("cannot {what}"))?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            let headers = response.headers().clone();
            let text = response.text().await.unwrap_or_default();
            return Err(refused(what, status, &headers, &text));
        }
        let mut pending: Vec<u8> = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .with_context(|| format!("cannot {what}: the answer broke off"))?
        {
            pending.extend_from_slice(&chunk);
            let mut start = 0;
            while let Some(end) = pending[start..].iter().position(|&b| b == b'\n') {
                each(&String::from_utf8_lossy(&pending[start..start + end]));
                start += end + 1;
            }
            pending.drain(..start);
        }
        each(&String::from_utf8_lossy(&pending));
        Ok(())
    }

    pub async fn cancel(&self, batch_id: &str) -> Result<()> {
        let url = match self.wire {
            Wire::OpenAi | Wire::Azure => format!("{}/batches/{batch_id}/cancel", self.base),
            Wire::Anthropic => format!("{}/{batch_id}/cancel", self.base),
        };
        self.send(
            self.request(reqwest::Method::POST, &url),
            &format!("cancel batch {batch_id}"),
        )
        .await?;
        Ok(())
    }
}

/// Milliseconds since the Unix epoch of an RFC 3339 UTC time such as
/// `2024-09-24T18:37:24.100435Z`.
fn unix_ms_of_rfc3339(text: &str) -> Option<i64> {
    let (date, time) = text.split_once('T')?;
    let mut ymd = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let time = time.trim_end_matches('Z');
    let time = time.split(['+']).next()?;
    let mut hms = time.split(':');
    let (h, min) = (
        hms.next()?.parse::<i64>().ok()?,
        hms.next()?.parse::<i64>().ok()?,
    );
    let secs: f64 = hms.next()?.parse().ok()?;
    // Howard Hinnant's days-from-civil algorithm.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3600 + min * 60) * 1000 + (secs * 1000.0) as i64)
}

/// A request the Batch API did not answer with success: its status, and
/// its body's start, or where a redirect not followed pointed.
fn refused(what: &str, status: u16, headers: &HeaderMap, text: &str) -> BatchError {
    let message = match redirects::is_redirect(status) {
        true => redirects::describe(headers),
        false => excerpt(text),
    };
    BatchError::Refused {
        what: what.to_string(),
        source: Refused { status, message },
    }
}

fn string_field(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_string)
}

/// A provider's words, short and on one line.
fn excerpt(text: &str) -> String {
    let one_line: String = text
        .chars()
        .take(300)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    crate::terminal::escape(&one_line).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times_read_as_unix_milliseconds() {
        assert_eq!(unix_ms_of_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            unix_ms_of_rfc3339("2024-09-24T18:37:24.100435Z"),
            Some(1_727_203_044_100)
        );
        assert_eq!(unix_ms_of_rfc3339("not a time"), None);
    }
}
