//! How a run shows its progress: a bar on a terminal, or where stderr is a
//! log (a scheduler's job, `nohup`, CI), a line now and then (every 30 s
//! unless `WEIR_PROGRESS_SECONDS` says otherwise), so that an hours-long run
//! says how far it is without drawing a bar into a file.
//! The total comes from the count of the source's rows on a side thread
//! (`rows_left`), so that the first rows never wait for a large file to be
//! scanned.

use crate::services::budget::Budget;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::sync::mpsc::{RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressKind {
    /// A bar redrawn in place: stderr is a terminal.
    Bar,
    /// A line this often: stderr is a file or a pipe.
    Lines(Duration),
    /// Nothing (`--no-progress`).
    Hidden,
}

#[derive(Clone)]
pub struct Progress {
    bar: ProgressBar,
    /// Stops the thread that writes the lines, once dropped.
    lines: Arc<Mutex<Option<Sender<()>>>>,
}

impl Progress {
    /// `spent`: the run's budget, whose spending the lines tell, where the
    /// endpoints have prices.
    pub fn start(kind: ProgressKind, spent: Option<Arc<Budget>>) -> Self {
        let bar = match kind {
            ProgressKind::Bar => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
            // The hidden bar still counts rows and their pace for the lines.
            ProgressKind::Lines(_) | ProgressKind::Hidden => ProgressBar::hidden(),
        };
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} rows ({per_sec}, eta {eta}) {msg}",
            )
            .expect("valid progress template"),
        );
        let lines = match kind {
            ProgressKind::Lines(every) => Some(write_lines(bar.clone(), every, spent)),
            _ => None,
        };
        Self {
            bar,
            lines: Arc::new(Mutex::new(lines)),
        }
    }

    /// The rows this process is to take, once counted.
    pub fn set_length(&self, total: u64) {
        self.bar.set_length(total);
    }

    pub fn row_done(&self, failed: u64) {
        self.bar.inc(1);
        if failed > 0 {
            self.bar.set_message(format!("{failed} failed"));
        }
    }

    pub fn finish(&self) {
        if let Ok(mut lines) = self.lines.lock() {
            lines.take();
        }
        self.bar.finish_and_clear();
    }
}

/// Starts the thread that writes a line `every` so often until the
/// returned sender is dropped.
fn write_lines(bar: ProgressBar, every: Duration, spent: Option<Arc<Budget>>) -> Sender<()> {
    let (tx, rx) = channel::<()>();
    std::thread::spawn(move || {
        while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(every) {
            eprintln!(
                "{}",
                line(&bar, spent.as_ref().map(|budget| budget.spent()))
            );
        }
    });
    tx
}

/// `weir: 12000 of 100000 rows (12 %) in 1m 30s, 310.2 rows/s, eta 4m 12s;
/// $1.23 spent; 3 failed`
fn line(bar: &ProgressBar, spent_usd: Option<f64>) -> String {
    let done = bar.position();
    let mut text = match bar.length().filter(|&total| total > 0) {
        Some(total) => format!(
            "weir: {done} of {total} rows ({} %)",
            done * 100 / total.max(1)
        ),
        None => format!("weir: {done} rows"),
    };
    text.push_str(&format!(
        " in {}, {:.1} rows/s",
        span(bar.elapsed()),
        bar.per_sec()
    ));
    if bar.length().is_some_and(|total| total > done) && done > 0 {
        text.push_str(&format!(", eta {}", span(bar.eta())));
    }
    if let Some(usd) = spent_usd {
        text.push_str(&format!("; {} spent", super::report::usd(usd)));
    }
    let message = bar.message();
    if !message.is_empty() {
        text.push_str(&format!("; {message}"));
    }
    text
}

/// `1h 02m`, `4m 12s`, `9s`.
fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_says_how_far_and_how_fast() {
        let bar = ProgressBar::hidden();
        let text = line(&bar, None);
        assert!(text.starts_with("weir: 0 rows in 0s, "), "{text}");
        bar.set_length(200);
        bar.inc(50);
        bar.set_message("3 failed");
        let text = line(&bar, Some(1.5));
        assert!(
            text.starts_with("weir: 50 of 200 rows (25 %) in "),
            "{text}"
        );
        assert!(text.contains(", eta "), "{text}");
        assert!(text.ends_with("; $1.50 spent; 3 failed"), "{text}");
        assert_eq!(span(Duration::from_secs(252)), "4m 12s");
        assert_eq!(span(Duration::from_secs(3720)), "1h 02m");
    }
}
