//! The test server's batch APIs (a TEST TOOL, not a provider), driven over
//! loopback as a client would: OpenAI, Azure OpenAI and Anthropic.

use reqwest::multipart::{Form, Part};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};
use weir_test_llm_server::{Fault, Script, TestLlmServer};

const KEY: &str = "sk-test";
const AZURE_QUERY: &str = "api-version=2024-10-21";

fn script() -> Script {
    Script {
        reject_marker: Some("REJECT".into()),
        batch_expire_marker: Some("EXPIRE".into()),
        fault_kinds: vec![Fault::Status(429)],
        fault_marker: Some("BUSY".into()),
        fault_rate: 1.0,
        ..Script::default()
    }
}

fn prompts() -> Vec<String> {
    (0..5).map(|i| format!("row {i}: the weather")).collect()
}

/// A JSONL batch input file, one chat request a line.
fn jsonl(url: &str, model: &str, prompts: &[String]) -> String {
    prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            json!({"custom_id": format!("row-{i}"), "method": "POST", "url": url,
                   "body": {"model": model, "messages": [
                       {"role": "system", "content": "be brief"},
                       {"role": "user", "content": p}]}})
            .to_string()
                + "\n"
        })
        .collect()
}

/// OpenAI and Azure, told apart by where they live and how they take keys.
struct OpenAi {
    http: reqwest::Client,
    base: String,
    azure: bool,
}

impl OpenAi {
    fn new(server: &TestLlmServer, azure: bool) -> Self {
        let base = match azure {
            true => format!("{}/openai", server.root_url()),
            false => server.base_url(),
        };
        Self {
            http: reqwest::Client::new(),
            base,
            azure,
        }
    }

    fn url(&self, path: &str) -> String {
        let join = if path.contains('?') { '&' } else { '?' };
        match self.azure {
            true => format!("{}{path}{join}{AZURE_QUERY}", self.base),
            false => format!("{}{path}", self.base),
        }
    }

    fn auth(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self.azure {
            true => request.header("api-key", KEY),
            false => request.bearer_auth(KEY),
        }
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> (u16, Value) {
        let response = self.auth(request).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn upload_with(&self, purpose: &str, content: &str) -> (u16, Value) {
        let form = Form::new().text("purpose", purpose.to_string()).part(
            "file",
            Part::bytes(content.as_bytes().to_vec()).file_name("batch.jsonl"),
        );
        self.send(self.http.post(self.url("/files")).multipart(form))
            .await
    }

    async fn upload(&self, content: &str) -> String {
        let (status, file) = self.upload_with("batch", content).await;
        assert_eq!(status, 200, "{file}");
        assert_eq!(file["object"], "file");
        assert_eq!(file["purpose"], "batch");
        assert_eq!(file["bytes"], content.len());
        assert_eq!(file["filename"], "batch.jsonl");
        assert!(file["created_at"].is_u64());
        file["id"].as_str().unwrap().to_string()
    }

    fn endpoint(&self) -> &'static str {
        match self.azure {
            true => "/chat/completions",
            false => "/v1/chat/completions",
        }
    }

    async fn create_with(&self, body: Value) -> (u16, Value) {
        self.send(self.http.post(self.url("/batches")).json(&body))
            .await
    }

    async fn create(&self, file_id: &str) -> Value {
        let (status, batch) = self
            .create_with(
                json!({"input_file_id": file_id, "endpoint": self.endpoint(),
                                "completion_window": "24h", "metadata": {"run": "r1"}}),
            )
            .await;
        assert_eq!(status, 200, "{batch}");
        batch
    }

    async fn get(&self, id: &str) -> Value {
        let (status, batch) = self
            .send(self.http.get(self.url(&format!("/batches/{id}"))))
            .await;
        assert_eq!(status, 200, "{batch}");
        batch
    }

    /// Polls until the batch ends; every batch object seen on the way.
    async fn wait(&self, id: &str) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut seen = Vec::new();
        loop {
            let batch = self.get(id).await;
            let status = batch["status"].as_str().unwrap().to_string();
            seen.push(batch);
            if ["completed", "failed", "expired", "cancelled"].contains(&status.as_str()) {
                return seen;
            }
            assert!(Instant::now() < deadline, "batch {id} still {status}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn content(&self, file_id: &str) -> String {
        let response = self
            .auth(
                self.http
                    .get(self.url(&format!("/files/{file_id}/content"))),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.text().await.unwrap()
    }

    async fn lines(&self, file_id: &Value) -> Vec<Value> {
        match file_id.as_str() {
            None => Vec::new(),
            Some(id) => self
                .content(id)
                .await
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect(),
        }
    }
}

fn custom_ids(lines: &[Value]) -> Vec<&str> {
    lines
        .iter()
        .map(|l| l["custom_id"].as_str().unwrap())
        .collect()
}

fn content_of(line: &Value) -> &str {
    line["response"]["body"]["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
}

const BATCH_FIELDS: [&str; 20] = [
    "id",
    "object",
    "endpoint",
    "errors",
    "input_file_id",
    "completion_window",
    "status",
    "output_file_id",
    "error_file_id",
    "created_at",
    "in_progress_at",
    "expires_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
    "request_counts",
    "metadata",
];

async fn every_line_gets_its_own_answer(azure: bool) {
    let server = TestLlmServer::start(Script {
        require_key: Some(KEY.into()),
        ..script()
    })
    .await
    .unwrap();
    let client = OpenAi::new(&server, azure);
    let model = if azure { "my-gpt-deployment" } else { "gpt-x" };
    let prompts = prompts();
    let file_id = client
        .upload(&jsonl(client.endpoint(), model, &prompts))
        .await;
    assert!(file_id.starts_with("file-"));
    let (status, file) = client
        .send(client.http.get(client.url(&format!("/files/{file_id}"))))
        .await;
    assert_eq!((status, &file["id"]), (200, &json!(file_id)));

    let created = client.create(&file_id).await;
    for field in BATCH_FIELDS {
        assert!(created.get(field).is_some(), "no {field} in {created}");
    }
    let id = created["id"].as_str().unwrap();
    assert!(id.starts_with("batch_"));
    assert_eq!(created["object"], "batch");
    // With no batch time, validating is skipped and the first look finds it done.
    assert_eq!(created["status"], "in_progress");
    assert_eq!(created["endpoint"], client.endpoint());
    assert_eq!(created["metadata"], json!({"run": "r1"}));
    assert_eq!(created["output_file_id"], Value::Null);

    let done = client.wait(id).await.pop().unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["request_counts"],
        json!({"total": 5, "completed": 5, "failed": 0})
    );
    assert!(done["completed_at"].is_u64() && done["in_progress_at"].is_u64());
    assert_eq!(done["error_file_id"], Value::Null);
    let output = client.lines(&done["output_file_id"]).await;
    assert_eq!(output.len(), 5);
    let ids = custom_ids(&output);
    assert_ne!(ids, ["row-0", "row-1", "row-2", "row-3", "row-4"]);
    for line in &output {
        let i: usize = line["custom_id"].as_str().unwrap()[4..].parse().unwrap();
        assert_eq!(content_of(line), format!("echo: {}", prompts[i]));
        assert_eq!(line["response"]["status_code"], 200);
        assert_eq!(line["response"]["body"]["model"], model);
        assert!(line["id"].as_str().unwrap().starts_with("batch_req_"));
        assert!(line["response"]["request_id"].is_string());
        assert_eq!(line["error"], Value::Null);
    }
    // The same order every time it is read.
    assert_eq!(output, client.lines(&done["output_file_id"]).await);

    let served = server.served();
    assert_eq!(served.len(), 5);
    assert!(served.iter().all(|s| s.path == client.endpoint()));
    assert!(
        served
            .iter()
            .all(|s| s.status == 200 && s.body["model"] == model)
    );
    let seen = server.batches();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].id, id);
    assert_eq!(seen[0].provider, if azure { "azure" } else { "openai" });
    assert_eq!(seen[0].status, "completed");
    assert_eq!(
        seen[0].custom_ids,
        ["row-0", "row-1", "row-2", "row-3", "row-4"]
    );
    assert_eq!(server.files_uploaded(), 1);

    let (status, deleted) = client
        .send(client.http.delete(client.url(&format!("/files/{file_id}"))))
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        deleted,
        json!({"id": file_id, "object": "file", "deleted": true})
    );
    assert_eq!(server.files_deleted(), 1);
    let (status, _) = client
        .send(client.http.get(client.url(&format!("/files/{file_id}"))))
        .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn openai_batch_answers_every_line_from_its_own_prompt() {
    every_line_gets_its_own_answer(false).await;
}

#[tokio::test]
async fn azure_batch_answers_every_line_from_its_own_prompt() {
    every_line_gets_its_own_answer(true).await;
}

async fn expired_rejected_and_faulted_lines_land_in_the_error_file(azure: bool) {
    let server = TestLlmServer::start(script()).await.unwrap();
    let client = OpenAi::new(&server, azure);
    let mut prompts = prompts();
    prompts[1] += " EXPIRE";
    prompts[3] += " REJECT";
    prompts[4] += " BUSY";
    let file_id = client
        .upload(&jsonl(client.endpoint(), "m", &prompts))
        .await;
    let id = client.create(&file_id).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let done = client.wait(&id).await.pop().unwrap();
    assert_eq!(done["status"], "expired", "{done}");
    assert!(done["expired_at"].is_u64());
    assert_eq!(
        done["request_counts"],
        json!({"total": 5, "completed": 2, "failed": 3})
    );
    let output = client.lines(&done["output_file_id"]).await;
    let mut ok = custom_ids(&output);
    ok.sort();
    assert_eq!(ok, ["row-0", "row-2"]);
    let errors = client.lines(&done["error_file_id"]).await;
    let by_id: HashMap<&str, &Value> = errors
        .iter()
        .map(|l| (l["custom_id"].as_str().unwrap(), l))
        .collect();
    assert_eq!(by_id.len(), 3);
    assert_eq!(by_id["row-1"]["response"], Value::Null);
    assert_eq!(
        by_id["row-1"]["error"],
        json!({"code": "batch_expired",
               "message": "This request could not be executed before the completion window expired."})
    );
    assert_eq!(by_id["row-3"]["response"]["status_code"], 400);
    assert!(by_id["row-3"]["response"]["body"]["error"]["message"].is_string());
    assert_eq!(by_id["row-4"]["response"]["status_code"], 429);
    // The expired line was never asked; the others were, under the line's url.
    let served = server.served();
    assert_eq!(served.len(), 4);
    assert!(served.iter().all(|s| !s.user_message.contains("EXPIRE")));
    assert!(served.iter().all(|s| s.path == client.endpoint()));
    assert_eq!(
        served
            .iter()
            .find(|s| s.user_message.contains("BUSY"))
            .unwrap()
            .fault,
        Some(Fault::Status(429))
    );
    assert_eq!(server.batches()[0].status, "expired");
}

#[tokio::test]
async fn openai_expired_rejected_and_faulted_lines_land_in_the_error_file() {
    expired_rejected_and_faulted_lines_land_in_the_error_file(false).await;
}

#[tokio::test]
async fn azure_expired_rejected_and_faulted_lines_land_in_the_error_file() {
    expired_rejected_and_faulted_lines_land_in_the_error_file(true).await;
}

async fn progress_shows_while_the_batch_runs(azure: bool) {
    let server = TestLlmServer::start(Script {
        batch_seconds: Duration::from_millis(800),
        ..script()
    })
    .await
    .unwrap();
    let client = OpenAi::new(&server, azure);
    let file_id = client
        .upload(&jsonl(client.endpoint(), "m", &prompts()))
        .await;
    let created = client.create(&file_id).await;
    assert_eq!(created["status"], "validating");
    assert_eq!(created["in_progress_at"], Value::Null);
    let seen = client.wait(created["id"].as_str().unwrap()).await;
    let statuses: Vec<&str> = seen.iter().map(|b| b["status"].as_str().unwrap()).collect();
    for status in ["validating", "in_progress", "finalizing", "completed"] {
        assert!(statuses.contains(&status), "{statuses:?}");
    }
    let counts: Vec<u64> = seen
        .iter()
        .map(|b| b["request_counts"]["completed"].as_u64().unwrap())
        .collect();
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
    assert!(counts.iter().any(|&c| c > 0 && c < 5), "{counts:?}");
    assert_eq!(counts.last(), Some(&5));
    let done = seen.last().unwrap();
    let t = |f: &str| done[f].as_u64().unwrap();
    assert!(t("created_at") <= t("in_progress_at") && t("in_progress_at") <= t("completed_at"));
    // Answered over time, not all at once.
    let served = server.served();
    assert!(served.last().unwrap().at - served[0].at >= Duration::from_millis(200));
}

#[tokio::test]
async fn openai_progress_shows_while_the_batch_runs() {
    progress_shows_while_the_batch_runs(false).await;
}

#[tokio::test]
async fn azure_progress_shows_while_the_batch_runs() {
    progress_shows_while_the_batch_runs(true).await;
}

async fn cancel_keeps_the_lines_already_answered(azure: bool) {
    let server = TestLlmServer::start(Script {
        batch_seconds: Duration::from_millis(600),
        ..script()
    })
    .await
    .unwrap();
    let client = OpenAi::new(&server, azure);
    let file_id = client
        .upload(&jsonl(client.endpoint(), "m", &prompts()))
        .await;
    let id = client.create(&file_id).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(3);
    while client.get(&id).await["request_counts"]["completed"] == 0 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, cancelling) = client
        .send(
            client
                .http
                .post(client.url(&format!("/batches/{id}/cancel"))),
        )
        .await;
    assert_eq!(status, 200, "{cancelling}");
    assert_eq!(cancelling["status"], "cancelling");
    assert!(cancelling["cancelling_at"].is_u64());
    let done = client.wait(&id).await.pop().unwrap();
    assert_eq!(done["status"], "cancelled");
    assert!(done["cancelled_at"].is_u64());
    assert_eq!(done["completed_at"], Value::Null);
    let answered = done["request_counts"]["completed"].as_u64().unwrap();
    assert!((1..5).contains(&answered), "{done}");
    let output = client.lines(&done["output_file_id"]).await;
    assert_eq!(output.len() as u64, answered);
    assert_eq!(server.served().len() as u64, answered);
    assert_eq!(server.batches()[0].status, "cancelled");
    // Well after the batch's time, nothing more was answered.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(client.get(&id).await, done);
    assert_eq!(server.served().len() as u64, answered);

    // A batch that completed cannot be cancelled.
    let id = client.create(&file_id).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(client.wait(&id).await.pop().unwrap()["status"], "completed");
    let (status, refused) = client
        .send(
            client
                .http
                .post(client.url(&format!("/batches/{id}/cancel"))),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(refused["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn openai_cancel_keeps_the_lines_already_answered() {
    cancel_keeps_the_lines_already_answered(false).await;
}

#[tokio::test]
async fn azure_cancel_keeps_the_lines_already_answered() {
    cancel_keeps_the_lines_already_answered(true).await;
}

fn assert_openai_error(status: u16, body: &Value, want: u16) {
    assert_eq!(status, want, "{body}");
    let error = &body["error"];
    assert!(error["message"].is_string(), "{body}");
    assert_eq!(error["type"], "invalid_request_error", "{body}");
    assert!(
        error.get("param").is_some() && error.get("code").is_some(),
        "{body}"
    );
}

async fn refusals_are_worded_as_openai_words_them(azure: bool) {
    let server = TestLlmServer::start(Script {
        require_key: Some(KEY.into()),
        ..script()
    })
    .await
    .unwrap();
    let client = OpenAi::new(&server, azure);
    let good = jsonl(client.endpoint(), "m", &prompts());
    let (status, body) = client.upload_with("fine-tune", &good).await;
    assert_openai_error(status, &body, 400);
    let (status, body) = client
        .upload_with("batch", &(good.clone() + "not json\n"))
        .await;
    assert_openai_error(status, &body, 400);
    let first = good.lines().next().unwrap();
    let (status, body) = client
        .upload_with("batch", &format!("{first}\n{first}\n"))
        .await;
    assert_openai_error(status, &body, 400);
    assert!(body["error"]["message"].as_str().unwrap().contains("row-0"));
    for field in ["custom_id", "method", "url", "body"] {
        let mut line: Value = serde_json::from_str(first).unwrap();
        line.as_object_mut().unwrap().remove(field);
        let (status, body) = client.upload_with("batch", &line.to_string()).await;
        assert_openai_error(status, &body, 400);
        assert!(body["error"]["message"].as_str().unwrap().contains(field));
    }
    let limit = if azure { 100_000 } else { 50_000 };
    let many: String = (0..=limit)
        .map(|i| format!("{{\"custom_id\":\"r{i}\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{{}}}}\n"))
        .collect();
    let (status, body) = client.upload_with("batch", &many).await;
    assert_openai_error(status, &body, 400);
    assert_eq!(server.files_uploaded(), 0);

    let file_id = client.upload(&good).await;
    let (status, body) = client
        .create_with(
            json!({"input_file_id": "file-nope", "endpoint": client.endpoint(),
                            "completion_window": "24h"}),
        )
        .await;
    assert_openai_error(status, &body, 404);
    let (status, body) = client
        .create_with(
            json!({"input_file_id": file_id, "endpoint": "/v1/embeddings",
                            "completion_window": "24h"}),
        )
        .await;
    assert_openai_error(status, &body, 400);
    assert_eq!(body["error"]["param"], "endpoint");
    let (status, body) = client
        .create_with(
            json!({"input_file_id": file_id, "endpoint": client.endpoint(),
                            "completion_window": "1h"}),
        )
        .await;
    assert_openai_error(status, &body, 400);
    assert_eq!(body["error"]["param"], "completion_window");

    // A line for another endpoint fails the batch's validation.
    // The endpoint appears once a line, in its url: lines 1 and 2 change.
    let mixed = good.replacen(client.endpoint(), "/v1/completions", 2);
    let file_id = client.upload(&mixed).await;
    let id = client.create(&file_id).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let failed = client.wait(&id).await.pop().unwrap();
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(failed["failed_at"].is_u64());
    assert_eq!(failed["output_file_id"], Value::Null);
    let data = failed["errors"]["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    assert_eq!(data[0]["line"], 1);
    assert_eq!(data[1]["line"], 2);
    assert!(data[0]["code"].is_string() && data[0]["message"].is_string());
    assert!(server.served().is_empty());

    // The key is checked on every route.
    let response = reqwest::Client::new()
        .get(client.url(&format!("/batches/{id}")))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    assert_openai_error(status, &response.json().await.unwrap(), 401);
}

#[tokio::test]
async fn openai_refusals_are_worded_as_openai_words_them() {
    refusals_are_worded_as_openai_words_them(false).await;
}

#[tokio::test]
async fn azure_refusals_are_worded_as_openai_words_them() {
    refusals_are_worded_as_openai_words_them(true).await;
}

#[tokio::test]
async fn azure_wants_an_api_version_and_its_own_key_header() {
    let server = TestLlmServer::start(Script {
        require_key: Some(KEY.into()),
        ..script()
    })
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let root = server.root_url();
    for (method, path) in [
        (reqwest::Method::POST, "/openai/files"),
        (reqwest::Method::GET, "/openai/files/file-x"),
        (reqwest::Method::GET, "/openai/files/file-x/content"),
        (reqwest::Method::DELETE, "/openai/files/file-x"),
        (reqwest::Method::POST, "/openai/batches"),
        (reqwest::Method::GET, "/openai/batches"),
        (reqwest::Method::GET, "/openai/batches/batch_x"),
        (reqwest::Method::POST, "/openai/batches/batch_x/cancel"),
    ] {
        let response = http
            .request(method.clone(), format!("{root}{path}"))
            .header("api-key", KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{method} {path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["param"], "api-version");
    }
    // A bearer token is not Azure's key header.
    let response = http
        .get(format!("{root}/openai/batches?{AZURE_QUERY}"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let response = http
        .get(format!("{root}/openai/batches?{AZURE_QUERY}"))
        .header("api-key", "wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    // Azure takes the OpenAI endpoint name as well.
    let client = OpenAi::new(&server, true);
    let file_id = client
        .upload(&jsonl("/chat/completions", "dep", &prompts()))
        .await;
    let (status, batch) = client
        .create_with(
            json!({"input_file_id": file_id, "endpoint": "/v1/chat/completions",
                            "completion_window": "24h"}),
        )
        .await;
    assert_eq!(status, 200, "{batch}");
    let done = client
        .wait(batch["id"].as_str().unwrap())
        .await
        .pop()
        .unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    // Files and batches of one provider are not another's.
    let openai = OpenAi::new(&server, false);
    let (status, _) = openai
        .send(openai.http.get(openai.url(&format!("/files/{file_id}"))))
        .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn openai_lists_batches_newest_first_with_their_metadata() {
    let server = TestLlmServer::start(script()).await.unwrap();
    let client = OpenAi::new(&server, false);
    let file_id = client
        .upload(&jsonl(client.endpoint(), "m", &prompts()))
        .await;
    let mut ids = Vec::new();
    for run in ["a", "b", "c"] {
        let (status, batch) = client
            .create_with(
                json!({"input_file_id": file_id, "endpoint": client.endpoint(),
                                "completion_window": "24h", "metadata": {"weir_run": run}}),
            )
            .await;
        assert_eq!(status, 200);
        ids.push(batch["id"].as_str().unwrap().to_string());
    }
    let (status, page) = client
        .send(client.http.get(client.url("/batches?limit=2")))
        .await;
    assert_eq!(status, 200);
    assert_eq!(page["object"], "list");
    assert_eq!(page["has_more"], true);
    let listed: Vec<&str> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [ids[2].as_str(), ids[1].as_str()]);
    assert_eq!(page["first_id"], ids[2]);
    assert_eq!(page["last_id"], ids[1]);
    assert_eq!(page["data"][0]["metadata"], json!({"weir_run": "c"}));
    let (_, rest) = client
        .send(client.http.get(client.url(&format!(
            "/batches?limit=2&after={}",
            page["last_id"].as_str().unwrap()
        ))))
        .await;
    assert_eq!(rest["has_more"], false);
    assert_eq!(rest["data"].as_array().unwrap().len(), 1);
    assert_eq!(rest["data"][0]["id"], ids[0]);
    assert_eq!(rest["data"][0]["metadata"], json!({"weir_run": "a"}));
    let seen = server.batches();
    assert_eq!(seen.len(), 3);
    assert!(seen.windows(2).all(|w| w[0].created_at <= w[1].created_at));
}

/// Anthropic's batch routes, with the key in `x-api-key`.
struct Anthropic {
    http: reqwest::Client,
    root: String,
}

impl Anthropic {
    fn new(server: &TestLlmServer) -> Self {
        Self {
            http: reqwest::Client::new(),
            root: server.root_url(),
        }
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> (u16, Value) {
        let response = request
            .header("x-api-key", KEY)
            .header("anthropic-version", "2023-06-01")
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn create_with(&self, body: &Value) -> (u16, Value) {
        self.send(
            self.http
                .post(format!("{}/v1/messages/batches", self.root))
                .json(body),
        )
        .await
    }

    async fn create(&self, prompts: &[String]) -> Value {
        let (status, batch) = self.create_with(&requests(prompts)).await;
        assert_eq!(status, 200, "{batch}");
        batch
    }

    async fn get(&self, id: &str) -> Value {
        let (status, batch) = self
            .send(
                self.http
                    .get(format!("{}/v1/messages/batches/{id}", self.root)),
            )
            .await;
        assert_eq!(status, 200, "{batch}");
        batch
    }

    async fn wait(&self, id: &str) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut seen = Vec::new();
        loop {
            let batch = self.get(id).await;
            let ended = batch["processing_status"] == "ended";
            seen.push(batch);
            if ended {
                return seen;
            }
            assert!(Instant::now() < deadline, "batch {id} not ended");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn results(&self, url: &str) -> Vec<Value> {
        let response = self
            .http
            .get(url)
            .header("x-api-key", KEY)
            .header("anthropic-version", "2023-06-01")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response
            .text()
            .await
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn params(prompt: &str) -> Value {
    json!({"model": "claude-x", "max_tokens": 100, "system": "be brief",
           "messages": [{"role": "user", "content": prompt}]})
}

fn requests(prompts: &[String]) -> Value {
    let requests: Vec<Value> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| json!({"custom_id": format!("row-{i}"), "params": params(p)}))
        .collect();
    json!({ "requests": requests })
}

#[tokio::test]
async fn anthropic_batch_results_are_the_online_answers() {
    let server = TestLlmServer::start(Script {
        require_key: Some(KEY.into()),
        fault_kinds: vec![Fault::Status(529)],
        ..script()
    })
    .await
    .unwrap();
    let client = Anthropic::new(&server);
    let mut prompts = prompts();
    prompts[1] += " EXPIRE";
    prompts[3] += " REJECT";
    prompts[4] += " BUSY";
    let created = client.create(&prompts).await;
    for field in [
        "id",
        "type",
        "processing_status",
        "request_counts",
        "ended_at",
        "created_at",
        "expires_at",
        "cancel_initiated_at",
        "archived_at",
        "results_url",
    ] {
        assert!(created.get(field).is_some(), "no {field} in {created}");
    }
    let id = created["id"].as_str().unwrap();
    assert!(id.starts_with("msgbatch_"));
    assert_eq!(created["type"], "message_batch");
    assert_eq!(created["processing_status"], "in_progress");
    assert_eq!(created["results_url"], Value::Null);
    assert_eq!(created["request_counts"]["processing"], 5);
    assert!(created["created_at"].as_str().unwrap().ends_with('Z'));

    let done = client.wait(id).await.pop().unwrap();
    assert_eq!(
        done["request_counts"],
        json!({"processing": 0, "succeeded": 2, "errored": 2, "canceled": 0, "expired": 1})
    );
    assert!(done["ended_at"].is_string());
    let url = done["results_url"].as_str().unwrap();
    assert_eq!(
        url,
        format!("{}/v1/messages/batches/{id}/results", server.root_url())
    );
    let results = client.results(url).await;
    assert_eq!(results.len(), 5);
    assert_ne!(
        custom_ids(&results),
        ["row-0", "row-1", "row-2", "row-3", "row-4"]
    );
    assert_eq!(results, client.results(url).await);
    let by_id: HashMap<&str, &Value> = results
        .iter()
        .map(|l| (l["custom_id"].as_str().unwrap(), &l["result"]))
        .collect();
    for i in [0, 2] {
        let result = by_id[format!("row-{i}").as_str()];
        assert_eq!(result["type"], "succeeded");
        let message = &result["message"];
        assert_eq!(
            message["content"][0]["text"],
            format!("echo: {}", prompts[i])
        );
        // Just what the online route answers, but for the id.
        let online = reqwest::Client::new()
            .post(format!("{}/v1/messages", server.root_url()))
            .header("x-api-key", KEY)
            .header("anthropic-version", "2023-06-01")
            .json(&params(&prompts[i]))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap();
        let strip = |m: &Value| {
            let mut m = m.clone();
            m.as_object_mut().unwrap().remove("id");
            m
        };
        assert_eq!(strip(message), strip(&online));
    }
    assert_eq!(by_id["row-1"], &json!({"type": "expired"}));
    assert_eq!(by_id["row-3"]["type"], "errored");
    assert_eq!(by_id["row-3"]["error"]["type"], "error");
    assert_eq!(
        by_id["row-3"]["error"]["error"]["type"],
        "invalid_request_error"
    );
    assert!(by_id["row-3"]["error"]["error"]["message"].is_string());
    assert_eq!(by_id["row-4"]["error"]["error"]["type"], "overloaded_error");
    let batch_served: Vec<_> = server
        .served()
        .into_iter()
        .filter(|s| s.body["system"] == "be brief")
        .collect();
    assert!(batch_served.iter().all(|s| s.path == "/v1/messages"));
    // Four batch lines (the expired one never asked) and two online checks.
    assert_eq!(batch_served.len(), 6);
    let seen = server.batches();
    assert_eq!(seen[0].provider, "anthropic");
    assert_eq!(seen[0].status, "ended");
    assert_eq!(seen[0].custom_ids.len(), 5);
}

#[tokio::test]
async fn anthropic_progress_shows_and_cancel_cancels_the_rest() {
    let server = TestLlmServer::start(Script {
        batch_seconds: Duration::from_millis(800),
        ..script()
    })
    .await
    .unwrap();
    let client = Anthropic::new(&server);
    let id = client.create(&prompts()).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let seen = client.wait(&id).await;
    let processing: Vec<u64> = seen
        .iter()
        .map(|b| b["request_counts"]["processing"].as_u64().unwrap())
        .collect();
    assert!(
        processing.windows(2).all(|w| w[0] >= w[1]),
        "{processing:?}"
    );
    assert!(processing.iter().any(|&p| p > 0 && p < 5), "{processing:?}");
    assert_eq!(seen.last().unwrap()["request_counts"]["succeeded"], 5);
    assert!(
        seen[..seen.len() - 1]
            .iter()
            .all(|b| b["results_url"].is_null())
    );

    // Results are not there before the end.
    let id = client.create(&prompts()).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, body) = client
        .send(
            client
                .http
                .get(format!("{}/v1/messages/batches/{id}/results", client.root)),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["type"], "error");
    let deadline = Instant::now() + Duration::from_secs(3);
    while client.get(&id).await["request_counts"]["succeeded"] == 0 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, canceling) = client
        .send(
            client
                .http
                .post(format!("{}/v1/messages/batches/{id}/cancel", client.root)),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(canceling["processing_status"], "canceling");
    assert!(canceling["cancel_initiated_at"].is_string());
    let done = client.wait(&id).await.pop().unwrap();
    let counts = &done["request_counts"];
    let succeeded = counts["succeeded"].as_u64().unwrap();
    assert!((1..5).contains(&succeeded), "{done}");
    assert_eq!(counts["canceled"].as_u64().unwrap(), 5 - succeeded);
    let results = client.results(done["results_url"].as_str().unwrap()).await;
    assert_eq!(results.len(), 5);
    let canceled = results
        .iter()
        .filter(|r| r["result"] == json!({"type": "canceled"}))
        .count();
    assert_eq!(canceled as u64, 5 - succeeded);
}

#[tokio::test]
async fn anthropic_refusals_are_worded_as_anthropic_words_them() {
    let server = TestLlmServer::start(Script {
        require_key: Some(KEY.into()),
        ..script()
    })
    .await
    .unwrap();
    let client = Anthropic::new(&server);
    let url = format!("{}/v1/messages/batches", client.root);
    let refused = |status: u16, body: &Value, want: u16, kind: &str| {
        assert_eq!(status, want, "{body}");
        assert_eq!(body["type"], "error", "{body}");
        assert_eq!(body["error"]["type"], kind, "{body}");
        assert!(body["error"]["message"].is_string(), "{body}");
    };
    let good = requests(&prompts());
    // No anthropic-version.
    let response = client
        .http
        .post(&url)
        .header("x-api-key", KEY)
        .json(&good)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    refused(
        status,
        &response.json().await.unwrap(),
        400,
        "invalid_request_error",
    );
    // No key, then a bearer token, which recent SDKs send.
    let response = client
        .http
        .post(&url)
        .header("anthropic-version", "2023-06-01")
        .json(&good)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    refused(
        status,
        &response.json().await.unwrap(),
        401,
        "authentication_error",
    );
    let response = client
        .http
        .post(&url)
        .header("anthropic-version", "2023-06-01")
        .bearer_auth(KEY)
        .json(&good)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    for bad_id in ["has space", "", "dot.ted", &"x".repeat(65)] {
        let body = json!({"requests": [{"custom_id": bad_id, "params": params("hi")}]});
        let (status, body) = client.create_with(&body).await;
        refused(status, &body, 400, "invalid_request_error");
    }
    let (status, body) = client
        .create_with(&json!({"requests": [{"custom_id": &"x".repeat(64), "params": params("hi")}]}))
        .await;
    assert_eq!(status, 200, "{body}");
    let twice = json!({"requests": [{"custom_id": "a", "params": params("hi")},
                                    {"custom_id": "a", "params": params("ho")}]});
    let (status, body) = client.create_with(&twice).await;
    refused(status, &body, 400, "invalid_request_error");
    let many: Vec<Value> = (0..100_001)
        .map(|i| json!({"custom_id": format!("r{i}"), "params": {}}))
        .collect();
    let (status, body) = client.create_with(&json!({ "requests": many })).await;
    refused(status, &body, 400, "invalid_request_error");
    let (status, body) = client.create_with(&json!({"requests": []})).await;
    refused(status, &body, 400, "invalid_request_error");
    let (status, body) = client
        .send(client.http.get(format!("{url}/msgbatch_nope")))
        .await;
    refused(status, &body, 404, "not_found_error");
    // A request the Messages API would refuse comes back errored.
    let (_, batch) = client
        .create_with(&json!({"requests": [{"custom_id": "no-max",
            "params": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}]}))
        .await;
    let done = client
        .wait(batch["id"].as_str().unwrap())
        .await
        .pop()
        .unwrap();
    let results = client.results(done["results_url"].as_str().unwrap()).await;
    assert_eq!(
        results[0]["result"]["error"]["error"]["type"],
        "invalid_request_error"
    );
    assert_eq!(server.batches().len(), 3);
}

#[tokio::test]
async fn anthropic_lists_batches_newest_first() {
    let server = TestLlmServer::start(script()).await.unwrap();
    let client = Anthropic::new(&server);
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            client.create(&prompts()).await["id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let (status, page) = client
        .send(
            client
                .http
                .get(format!("{}/v1/messages/batches?limit=2", client.root)),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(page["has_more"], true);
    assert_eq!(page["first_id"], ids[2]);
    assert_eq!(page["last_id"], ids[1]);
    let (_, rest) = client
        .send(client.http.get(format!(
            "{}/v1/messages/batches?limit=2&after_id={}",
            client.root, ids[1]
        )))
        .await;
    assert_eq!(rest["has_more"], false);
    assert_eq!(rest["data"][0]["id"], ids[0]);
    // No custom_id went out in two batches of one run here, but each batch
    // holds its own: the server tells them apart.
    let seen = server.batches();
    let distinct: HashSet<&str> = seen.iter().map(|b| b.id.as_str()).collect();
    assert_eq!(distinct.len(), 3);
}

#[tokio::test]
async fn a_hang_or_a_broken_answer_is_a_500_line_and_online_knobs_stay_online() {
    let server = TestLlmServer::start(Script {
        fault_kinds: vec![Fault::Hang, Fault::Reset, Fault::MalformedJson],
        faults_first: 3,
        fault_rate: 0.0,
        fault_marker: None,
        latency: Duration::from_secs(30),
        capacity: Some(0),
        ..script()
    })
    .await
    .unwrap();
    let client = OpenAi::new(&server, false);
    let file_id = client
        .upload(&jsonl(client.endpoint(), "m", &prompts()))
        .await;
    let started = Instant::now();
    let id = client.create(&file_id).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let done = client.wait(&id).await.pop().unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(
        done["request_counts"],
        json!({"total": 5, "completed": 2, "failed": 3})
    );
    let errors = client.lines(&done["error_file_id"]).await;
    assert!(errors.iter().all(|l| l["response"]["status_code"] == 500));
    let output = client.lines(&done["output_file_id"]).await;
    for line in &output {
        let i: usize = line["custom_id"].as_str().unwrap()[4..].parse().unwrap();
        assert_eq!(content_of(line), format!("echo: {}", prompts()[i]));
    }
}
