//! A guest's standard error, kept rather than discarded: the last few KiB a
//! component wrote (a Python traceback, a Rust panic message) are what
//! explains its trap, so they go into the trap's error.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

/// How much of the end of a guest's stderr is kept.
const KEEP: usize = 4096;

#[derive(Clone, Default)]
pub struct StderrTail {
    bytes: Arc<Mutex<VecDeque<u8>>>,
}

impl StderrTail {
    /// What was written since the last take, as text.
    pub fn take(&self) -> String {
        let mut bytes = self.bytes.lock().expect("stderr lock");
        let text = String::from_utf8_lossy(bytes.make_contiguous()).into_owned();
        bytes.clear();
        text
    }

    fn push(&self, data: &[u8]) {
        let mut bytes = self.bytes.lock().expect("stderr lock");
        bytes.extend(data);
        let excess = bytes.len().saturating_sub(KEEP);
        bytes.drain(..excess);
    }
}

impl IsTerminal for StderrTail {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for StderrTail {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl AsyncWrite for StderrTail {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_the_end() {
        let tail = StderrTail::default();
        tail.push(&vec![b'a'; KEEP]);
        tail.push(b"Traceback: boom");
        let text = tail.take();
        assert_eq!(text.len(), KEEP);
        assert!(text.ends_with("Traceback: boom"));
        assert_eq!(tail.take(), "");
    }
}
