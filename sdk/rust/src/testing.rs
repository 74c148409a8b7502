//! A scripted host for unit tests of transform logic with `cargo test`: it
//! answers requests from a script, records what the transform sent, attached
//! and logged, and never touches a network.
//!
//! The crate's front page shows it in use.

use crate::chat;
use crate::config_error::ConfigError;
use crate::host::{CallError, Host, Level, Request, Response};
use crate::row::{Row, RowError};
use crate::transform::{NodeCx, Transform};
use serde_json::Value;
use std::cell::RefCell;
use std::collections::VecDeque;

type Answer = Result<Response, CallError>;

/// A host whose endpoints answer from a script, in order per endpoint.
pub struct MockHost {
    node_name: String,
    endpoints: Vec<String>,
    script: RefCell<Vec<(String, VecDeque<Answer>)>>,
    requests: RefCell<Vec<Request>>,
    attached: RefCell<Vec<(u32, String, String)>>,
    logs: RefCell<Vec<(Level, String)>>,
}

impl Default for MockHost {
    fn default() -> Self {
        Self::new()
    }
}

impl MockHost {
    /// A host for a node named `test` with no endpoints granted.
    pub fn new() -> Self {
        Self {
            node_name: "test".into(),
            endpoints: Vec::new(),
            script: RefCell::new(Vec::new()),
            requests: RefCell::new(Vec::new()),
            attached: RefCell::new(Vec::new()),
            logs: RefCell::new(Vec::new()),
        }
    }

    pub fn named(mut self, node_name: &str) -> Self {
        self.node_name = node_name.into();
        self
    }

    /// Grants `endpoint`, as the node's `endpoints:` would.
    pub fn grant(mut self, endpoint: &str) -> Self {
        self.endpoints.push(endpoint.into());
        self
    }

    /// Queues an answer for the next request to `endpoint`.
    pub fn answer(self, endpoint: &str, answer: Answer) -> Self {
        {
            let mut script = self.script.borrow_mut();
            match script.iter_mut().find(|(name, _)| name == endpoint) {
                Some((_, queue)) => queue.push_back(answer),
                None => script.push((endpoint.into(), VecDeque::from([answer]))),
            }
        }
        self
    }

    /// Queues an HTTP answer (a status of 400 or more arrives as
    /// `CallError::Status`, as the host delivers it).
    pub fn reply(self, endpoint: &str, status: u16, body: &str) -> Self {
        let response = Response {
            status,
            body: body.into(),
            attempts: 1,
            latency_ms: 0,
        };
        let answer = if status >= 400 {
            Err(CallError::Status(response))
        } else {
            Ok(response)
        };
        self.answer(endpoint, answer)
    }

    /// Queues a successful chat answer whose text is `content`.
    pub fn reply_chat(self, endpoint: &str, content: &str) -> Self {
        self.reply(endpoint, 200, &chat::reply_body(content))
    }

    /// Every request the transform sent, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.borrow().clone()
    }

    /// The request bodies, parsed as JSON.
    pub fn request_bodies(&self) -> Vec<Value> {
        self.requests
            .borrow()
            .iter()
            .map(|r| serde_json::from_str(&r.body).unwrap_or(Value::String(r.body.clone())))
            .collect()
    }

    /// `(row, key, value)` of every audit attachment.
    pub fn attached(&self) -> Vec<(u32, String, String)> {
        self.attached.borrow().clone()
    }

    pub fn logs(&self) -> Vec<(Level, String)> {
        self.logs.borrow().clone()
    }

    /// Answers scripted but never asked for.
    pub fn unused_answers(&self) -> usize {
        self.script.borrow().iter().map(|(_, q)| q.len()).sum()
    }

    fn next_answer(&self, request: &Request) -> Answer {
        if !self.endpoints.contains(&request.endpoint) {
            return Err(CallError::Denied(format!(
                "endpoint `{}` is not granted to node `{}`",
                request.endpoint, self.node_name
            )));
        }
        let mut script = self.script.borrow_mut();
        script
            .iter_mut()
            .find(|(name, _)| *name == request.endpoint)
            .and_then(|(_, queue)| queue.pop_front())
            .unwrap_or_else(|| {
                Err(CallError::Transport(format!(
                    "MockHost has no answer scripted for this request to `{}`: {}",
                    request.endpoint, request.body
                )))
            })
    }
}

impl Host for MockHost {
    fn send(&self, requests: Vec<Request>) -> Vec<Answer> {
        requests
            .into_iter()
            .map(|request| {
                let answer = self.next_answer(&request);
                self.requests.borrow_mut().push(request);
                answer
            })
            .collect()
    }

    fn attach(&self, row: u32, key: &str, value: &str) {
        self.attached
            .borrow_mut()
            .push((row, key.into(), value.into()));
    }

    fn log(&self, level: Level, message: &str) {
        self.logs.borrow_mut().push((level, message.into()));
    }

    fn node_name(&self) -> String {
        self.node_name.clone()
    }

    fn endpoints(&self) -> Vec<String> {
        self.endpoints.clone()
    }
}

/// The results of one `process` call with these options and rows, as the
/// real host would make it: configure, then process every row together.
pub fn run<T: Transform>(
    host: &MockHost,
    options: Value,
    rows: Vec<Value>,
) -> Result<Vec<Result<Vec<Row>, RowError>>, ConfigError> {
    let node = T::configure(options, &NodeCx::from_host(host))?;
    let rows = rows
        .into_iter()
        .map(Row::try_from)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ConfigError::whole(format!("a test row is not a JSON object: {e}")))?;
    Ok(node.process(rows, host))
}
