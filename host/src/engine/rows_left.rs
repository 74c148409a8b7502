//! The rows a run will take from its source, counted on a side thread, so
//! that its endpoints can tell its last stretch (`RowsToCome`) and the
//! progress bar its total, without the first rows waiting for a large file
//! to be scanned. One count serves both.

use super::progress::Progress;
use crate::config::{DataFile, Format};
use crate::services::executor::RowsToCome;
use std::io::{BufRead, BufReader};
use std::ops::Range;
use std::sync::Arc;

/// The rows of `range` a run will take from `source`, less the `done` ones
/// an earlier run finished: at once when the range is bounded (a shard's
/// part), or once the file is counted. The count also gives `progress` the
/// file's total when it is drawn. A pipe cannot be read twice: its total
/// stays unknown.
pub fn count(
    source: &DataFile,
    range: Range<u64>,
    done: u64,
    progress: &Progress,
) -> Arc<RowsToCome> {
    let rows = Arc::new(RowsToCome::default());
    let bounded = range.end != u64::MAX;
    if bounded {
        rows.set_total((range.end - range.start).saturating_sub(done));
    }
    let wanted = !bounded || progress.is_shown();
    if wanted && source.is_regular_file() {
        let (path, format) = (source.path.clone(), source.format);
        let (counted, progress) = (Arc::clone(&rows), progress.clone());
        std::thread::spawn(move || {
            if let Some(total) = count_rows(&path, format) {
                if !bounded {
                    counted.set_total(total.saturating_sub(range.start).saturating_sub(done));
                }
                progress.set_length(total);
            }
        });
    }
    rows
}

/// The data rows in a source file.
fn count_rows(path: &std::path::Path, format: Format) -> Option<u64> {
    let file = std::fs::File::open(path).ok()?;
    match format {
        Format::Csv => {
            let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(file);
            let mut record = csv::ByteRecord::new();
            let mut count = 0;
            while reader.read_byte_record(&mut record).ok()? {
                count += 1;
            }
            Some(count)
        }
        Format::Jsonl => {
            let mut count = 0;
            for line in BufReader::new(file).split(b'\n') {
                if !line.ok()?.iter().all(u8::is_ascii_whitespace) {
                    count += 1;
                }
            }
            Some(count)
        }
    }
}
