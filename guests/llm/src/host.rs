//! The host services the transform uses, as a trait, so that the logic runs
//! against the real imports inside wasm and against a scripted host in tests.

/// One request for the executor; mirrors `executor.request` in the WIT.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub endpoint: String,
    pub body: String,
    pub row: u32,
}

/// Mirrors `executor.response`.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub status: u16,
    pub body: String,
    pub attempts: u32,
    pub latency_ms: u32,
}

/// Mirrors `executor.call-error`.
#[derive(Debug, Clone, PartialEq)]
pub enum CallError {
    Denied(String),
    Status(Response),
    DeadlineExceeded(String),
    Transport(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Debug,
    Info,
    Warn,
}

pub trait Host {
    fn send(&self, requests: Vec<Request>) -> Vec<Result<Response, CallError>>;
    fn attach(&self, row: u32, key: &str, value: &str);
    fn log(&self, level: Level, message: &str);
}
