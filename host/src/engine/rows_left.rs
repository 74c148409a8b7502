//! The rows a run will take from its source, counted on a side thread, so
//! that its endpoints can tell its last stretch (`RowsToCome`) without the
//! first rows waiting for a large file to be scanned.

use crate::config::{DataFile, Format};
use crate::services::executor::RowsToCome;
use std::io::{BufRead, BufReader};
use std::ops::Range;
use std::sync::Arc;

/// The rows of `range` a run will take from `source`, less the `done` ones
/// an earlier run finished: at once when the range is bounded (a shard's
/// part), or once the file is counted. A pipe cannot be read twice: its
/// total stays unknown.
pub fn count(source: &DataFile, range: Range<u64>, done: u64) -> Arc<RowsToCome> {
    let rows = Arc::new(RowsToCome::default());
    if range.end != u64::MAX {
        rows.set_total((range.end - range.start).saturating_sub(done));
        return rows;
    }
    if source.path.metadata().is_ok_and(|m| m.is_file()) {
        let (path, format, counted) = (source.path.clone(), source.format, Arc::clone(&rows));
        std::thread::spawn(move || {
            if let Some(total) = count_rows(&path, format) {
                counted.set_total(total.saturating_sub(range.start).saturating_sub(done));
            }
        });
    }
    rows
}

/// The data rows in a source file.
pub fn count_rows(path: &std::path::Path, format: Format) -> Option<u64> {
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
