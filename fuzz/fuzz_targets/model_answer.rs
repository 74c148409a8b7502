//! Any bytes as an endpoint's answer: read into text or a row error with a
//! code, and any text searched for JSON, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_sdk::{Response, chat, json};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let status = if data.first().is_some_and(|b| b % 4 == 0) {
        429
    } else {
        200
    };
    let result = chat::interpret(Ok(Response {
        status,
        body: text.to_string(),
        attempts: 1,
        latency_ms: 0,
    }));
    if let Err(e) = result {
        assert!(!e.code.is_empty());
    }
    if let Ok(value) = json::extract_json(&text) {
        assert!(value.is_object() || value.is_array() || !text.trim().is_empty());
    }
});
