//! The progress bar on a terminal. Its total comes from the count of the
//! source's rows on a side thread (`rows_left`), so that the first rows
//! never wait for a large file to be scanned.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

#[derive(Clone)]
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    pub fn start(visible: bool) -> Self {
        let bar = if visible {
            ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} rows ({per_sec}, eta {eta}) {msg}",
            )
            .expect("valid progress template"),
        );
        Self { bar }
    }

    /// Whether the bar is drawn, and so wants the source's rows counted.
    pub fn is_shown(&self) -> bool {
        !self.bar.is_hidden()
    }

    /// The source's rows, once counted.
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
        self.bar.finish_and_clear();
    }
}
