//! Any bytes as a CSV, JSON Lines or JSON source (an array, or lines), with its delimiter told from the
//! header or given, and read as UTF-8 or decoded from Windows-1252 or UTF-16:
//! every row read is a row or a row error at a line, never a panic; lines
//! only go forward.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_formats::config::{DataFile, Format};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let format = [Format::Csv, Format::Jsonl, Format::Json][selector as usize % 3];
    let delimiter = [None, Some(b';'), Some(b'\t')][(selector as usize / 3) % 3];
    let encoding = [
        None,
        Some(encoding_rs::WINDOWS_1252),
        Some(encoding_rs::UTF_16LE),
    ][(selector as usize / 9) % 3];
    let file = DataFile {
        path: "fuzz".into(),
        format,
        delimiter,
        encoding,
    };
    let Ok(reader) =
        weir_formats::io::read_source(std::io::Cursor::new(body.to_vec()), &file, "fuzz")
    else {
        return;
    };
    let mut last_line = 0;
    for (expected_index, row) in reader.take(10_000).enumerate() {
        assert_eq!(row.index, expected_index as u64);
        assert!(
            row.line >= last_line.max(1),
            "line {} after {last_line}",
            row.line
        );
        last_line = row.line;
    }
});
