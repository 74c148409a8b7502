//! The progress bar on a terminal. The total is counted on a side thread so
//! that the first rows never wait for a large file to be scanned.

use super::rows_left::count_rows;
use crate::config::DataFile;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    pub fn start(source: &DataFile, visible: bool) -> Self {
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
        // Counting reads the file a second time: not possible for a pipe.
        let regular_file = source.path.metadata().is_ok_and(|m| m.is_file());
        if !bar.is_hidden() && regular_file {
            let counter = bar.clone();
            let path = source.path.clone();
            let format = source.format;
            std::thread::spawn(move || {
                if let Some(total) = count_rows(&path, format) {
                    counter.set_length(total);
                }
            });
        }
        Self { bar }
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
