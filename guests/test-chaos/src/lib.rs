//! TEST TOOL, not a transform to use: a guest that misbehaves on purpose, so
//! tests can check that weir keeps a guest inside its box. Each row's `act`
//! field picks what happens to it:
//!
//! - `loop`: spins forever;
//! - `alloc`: allocates memory until something stops it;
//! - `panic`: panics (which aborts: a trap);
//! - `big`: comes back with a field of `size` bytes;
//! - `log`: logs `text` (or `size` bytes of `x`) at warn level, `count` times;
//! - `attach`: attaches `count` audit values of `size` bytes, under keys
//!   `k0`, `k1`, …;
//! - `fan`: comes back as `n` rows, numbered in a field `fan`;
//! - `fail`: fails with the code `code` and the message `text`;
//! - `hold`: allocates and fills `mb` MiB, then, if the row names an endpoint
//!   in `wait`, sends it one request and waits for the answer before letting
//!   go, so that many rows hold their memory at once;
//! - anything else: comes back with `ok: true`.

use serde_json::{Map, Value};

#[cfg(target_arch = "wasm32")]
mod component;

/// The host imports the chaos guest uses, for one row of a call.
pub trait Host {
    fn log(&self, message: &str);
    fn attach(&self, key: &str, value: &str);
    /// Sends one request to `endpoint` and waits for its answer.
    fn wait_on(&self, endpoint: &str);
}

/// Why a row failed: a code and a message.
pub type Failure = (String, String);

/// The output rows for `row` (JSON text), or why it failed; `loop`, `alloc`
/// and `panic` never return.
pub fn act(row: &str, host: &impl Host) -> Result<Vec<String>, Failure> {
    let mut row: Map<String, Value> = serde_json::from_str(row).map_err(|e| {
        (
            "bad_row".to_string(),
            format!("the row is not a JSON object: {e}"),
        )
    })?;
    let text = |key: &str| row.get(key).and_then(Value::as_str).map(str::to_string);
    let number = |key: &str, default: u64| row.get(key).and_then(Value::as_u64).unwrap_or(default);
    let size = number("size", 1 << 20) as usize;
    let count = number("count", 1);
    match row.get("act").and_then(Value::as_str).unwrap_or_default() {
        "loop" => spin(),
        "alloc" => hoard(),
        "panic" => panic!("asked to panic"),
        "big" => {
            row.insert("ok".into(), Value::String("x".repeat(size)));
        }
        "fail" => {
            let code = text("code").unwrap_or_else(|| "chaos".into());
            return Err((code, text("text").unwrap_or_default()));
        }
        "log" => {
            let line = text("text").unwrap_or_else(|| "x".repeat(size));
            (0..count).for_each(|_| host.log(&line));
            row.insert("ok".into(), Value::Bool(true));
        }
        "attach" => {
            let value = "v".repeat(size);
            (0..count).for_each(|i| host.attach(&format!("k{i}"), &value));
            row.insert("ok".into(), Value::Bool(true));
        }
        "fan" => {
            let n = number("n", 1);
            return Ok(fan_out(row, n));
        }
        "hold" => {
            let held = std::hint::black_box(vec![1u8; (number("mb", 1) as usize) << 20]);
            if let Some(endpoint) = row.get("wait").and_then(Value::as_str) {
                host.wait_on(endpoint);
            }
            row.insert(
                "ok".into(),
                Value::Bool(held.iter().step_by(4096).all(|&b| b == 1)),
            );
        }
        _ => {
            row.insert("ok".into(), Value::Bool(true));
        }
    }
    Ok(vec![Value::Object(row).to_string()])
}

fn fan_out(row: Map<String, Value>, n: u64) -> Vec<String> {
    (0..n)
        .map(|i| {
            let mut out = row.clone();
            out.insert("ok".into(), Value::Bool(true));
            out.insert("fan".into(), Value::from(i));
            Value::Object(out).to_string()
        })
        .collect()
}

fn spin() -> ! {
    let mut i: u64 = 0;
    loop {
        i = std::hint::black_box(i.wrapping_add(1));
    }
}

fn hoard() -> ! {
    let mut held: Vec<Vec<u8>> = Vec::new();
    loop {
        held.push(std::hint::black_box(vec![1u8; 1 << 20]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[derive(Default)]
    struct Recorder(RefCell<Vec<String>>);

    impl Host for Recorder {
        fn log(&self, message: &str) {
            self.0.borrow_mut().push(format!("log {message}"));
        }
        fn attach(&self, key: &str, value: &str) {
            self.0.borrow_mut().push(format!("attach {key}={value}"));
        }
        fn wait_on(&self, endpoint: &str) {
            self.0.borrow_mut().push(format!("wait {endpoint}"));
        }
    }

    #[test]
    fn a_plain_row_comes_back_marked() {
        let host = Recorder::default();
        assert_eq!(
            act(r#"{"id":1}"#, &host).unwrap(),
            [r#"{"id":1,"ok":true}"#]
        );
        assert_eq!(
            act(r#"{"act":"big","size":3}"#, &host).unwrap(),
            [r#"{"act":"big","size":3,"ok":"xxx"}"#]
        );
        assert_eq!(act("[1]", &host).unwrap_err().0, "bad_row");
        assert_eq!(
            act(r#"{"act":"fail","code":"c","text":"t"}"#, &host).unwrap_err(),
            ("c".to_string(), "t".to_string())
        );
        assert!(host.0.borrow().is_empty());
    }

    #[test]
    fn rows_use_the_host_as_they_ask() {
        let host = Recorder::default();
        act(r#"{"act":"log","text":"a\nb","count":2}"#, &host).unwrap();
        act(r#"{"act":"attach","size":2,"count":2}"#, &host).unwrap();
        let held = act(r#"{"act":"hold","mb":1,"wait":"llm"}"#, &host).unwrap();
        assert_eq!(
            *host.0.borrow(),
            [
                "log a\nb",
                "log a\nb",
                "attach k0=vv",
                "attach k1=vv",
                "wait llm"
            ]
        );
        assert!(held[0].ends_with(r#""ok":true}"#));
    }

    #[test]
    fn a_fanned_row_becomes_n_rows() {
        let rows = act(r#"{"act":"fan","n":3}"#, &Recorder::default()).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[2], r#"{"act":"fan","n":3,"ok":true,"fan":2}"#);
    }
}
