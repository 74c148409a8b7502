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
/// part) or the file was counted already (`counted`: by the scan for
/// unreadable rows, or `rows_in_small_source`), else once the file is
/// counted. `progress` is given the same total: the rows this process is
/// to take, as it counts the rows it finishes. A pipe cannot be read
/// twice: its total stays unknown. `limit` (`--limit`) caps the rows to
/// come.
pub fn count(
    source: &DataFile,
    counted: Option<u64>,
    range: Range<u64>,
    done: u64,
    limit: Option<u64>,
    progress: &Progress,
) -> Arc<RowsToCome> {
    let rows = Arc::new(RowsToCome::default());
    let capped = move |rows: u64| limit.map_or(rows, |limit| rows.min(limit));
    let bounded = range.end != u64::MAX;
    if bounded {
        let left = capped((range.end - range.start).saturating_sub(done));
        rows.set_total(left);
        progress.set_length(left);
        return rows;
    }
    let known = move |rows: &RowsToCome, progress: &Progress, total: u64| {
        let left = capped(total.saturating_sub(range.start).saturating_sub(done));
        rows.set_total(left);
        progress.set_length(left);
    };
    if let Some(total) = counted {
        known(&rows, progress, total);
    } else if source.is_regular_file() {
        let source = source.clone();
        let (rows, progress) = (Arc::clone(&rows), progress.clone());
        std::thread::spawn(move || {
            if let Some(total) = count_rows(&source) {
                known(&rows, &progress, total);
            }
        });
    }
    rows
}

/// Sources up to this size are counted before the nodes are prepared: a few
/// milliseconds at most, against the instances a small run would otherwise
/// start ahead for rows it does not have.
const SMALL_SOURCE_BYTES: u64 = 1 << 20;

/// The rows in `source` when it is a file small enough to count at once.
pub fn rows_in_small_source(source: &DataFile) -> Option<u64> {
    let metadata = std::fs::metadata(&source.path).ok()?;
    if !metadata.is_file() || metadata.len() > SMALL_SOURCE_BYTES {
        return None;
    }
    count_rows(source)
}

/// The data rows in a source file.
fn count_rows(source: &DataFile) -> Option<u64> {
    let file = || std::fs::File::open(&source.path).ok();
    match source.format {
        Format::Csv => {
            let mut reader = csv::ReaderBuilder::new()
                .flexible(true)
                .from_reader(file()?);
            let mut record = csv::ByteRecord::new();
            let mut count = 0;
            while reader.read_byte_record(&mut record).ok()? {
                count += 1;
            }
            Some(count)
        }
        Format::Jsonl => {
            let mut count = 0;
            for line in BufReader::new(file()?).split(b'\n') {
                if !line.ok()?.iter().all(u8::is_ascii_whitespace) {
                    count += 1;
                }
            }
            Some(count)
        }
        // An array's elements are told apart only by reading them.
        Format::Json => Some(crate::io::open_source(source).ok()?.count() as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn data_file(dir: &std::path::Path, name: &str, text: &str) -> DataFile {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let format = if name.ends_with(".csv") {
            Format::Csv
        } else {
            Format::Jsonl
        };
        DataFile {
            path,
            format,
            delimiter: None,
            encoding: None,
        }
    }

    #[test]
    fn a_small_source_is_counted_at_once_by_its_data_rows() {
        let dir = tempfile::tempdir().unwrap();
        let csv = data_file(dir.path(), "t.csv", "id,text\n1,\"two\nlines\"\n2,b\n3,c\n");
        assert_eq!(rows_in_small_source(&csv), Some(3));
        let jsonl = data_file(dir.path(), "t.jsonl", "{\"a\":1}\n\n{\"a\":2}\n");
        assert_eq!(rows_in_small_source(&jsonl), Some(2));
    }

    #[test]
    fn a_large_or_missing_source_is_left_to_the_side_thread() {
        let dir = tempfile::tempdir().unwrap();
        let large = data_file(dir.path(), "large.csv", "id,text\n");
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&large.path)
            .unwrap();
        let line = "1,some text that fills the file\n";
        for _ in 0..=SMALL_SOURCE_BYTES as usize / line.len() {
            file.write_all(line.as_bytes()).unwrap();
        }
        drop(file);
        assert_eq!(rows_in_small_source(&large), None);
        let missing = DataFile {
            path: dir.path().join("missing.csv"),
            format: Format::Csv,
            delimiter: None,
            encoding: None,
        };
        assert_eq!(rows_in_small_source(&missing), None);
    }
}
