//! Readers for CSV (with a header row), JSON Lines and JSON arrays. A bad row
//! becomes a row error at its line; it never stops the rows after it, save
//! where a JSON array's shape breaks (a missing `,`, a file cut short).

use super::csv_records::CsvRecords;
use super::decode::Utf8Reader;
use super::json_array::ArrayElements;
use crate::config::{DataFile, Format};
use crate::hashing::{ContentHash, HashingReader};
use crate::types::{Row, RowError};
use serde_json::Value;
use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::time::UNIX_EPOCH;

type Result<T, E = SourceError> = std::result::Result<T, E>;

/// A source that cannot be opened, or whose header cannot be read. A bad row
/// is not one of these: it becomes that row's error.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot open source {}", path.display())]
    Open {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read the metadata of {}", path.display())]
    Metadata {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `name`: the source as errors call it; `line`: where the header is.
    #[error("{name}{}: {problem}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Header {
        name: String,
        line: Option<u64>,
        problem: String,
    },
}

impl SourceError {
    fn open(path: &Path, source: std::io::Error) -> Self {
        Self::Open {
            path: path.to_path_buf(),
            source,
        }
    }

    /// The source's first bytes could not be read.
    fn unreadable(name: &str, error: std::io::Error) -> Self {
        Self::Header {
            name: name.to_string(),
            line: None,
            problem: format!("cannot read it: {error}"),
        }
    }

    fn metadata(path: &Path, source: std::io::Error) -> Self {
        Self::Metadata {
            path: path.to_path_buf(),
            source,
        }
    }
}

pub struct SourceRow {
    /// 0-based position among the source's rows.
    pub index: u64,
    /// 1-based line where the row starts.
    pub line: u64,
    pub row: Result<Row, RowError>,
}

pub struct SourceReader {
    /// The CSV header; JSON Lines have none.
    pub columns: Option<Vec<String>>,
    rows: Box<dyn Iterator<Item = SourceRow> + Send>,
}

impl Iterator for SourceReader {
    type Item = SourceRow;
    fn next(&mut self) -> Option<SourceRow> {
        self.rows.next()
    }
}

pub fn open_source(file: &DataFile) -> Result<SourceReader> {
    let handle = File::open(&file.path).map_err(|e| SourceError::open(&file.path, e))?;
    read_source(handle, file, &file.path.display().to_string())
}

/// What a full read of a source found: how many rows, and the rows it
/// cannot read, the first few of them with their errors.
#[derive(Debug, Default)]
pub struct SourceScan {
    pub rows: u64,
    pub rejected: u64,
    /// (line, error message) of the first rejected rows.
    pub first_rejected: Vec<(u64, String)>,
}

/// Reads the whole source once, to find the rows it cannot read before any
/// of them costs a call. None for a source that can be read only once (a
/// pipe): it is checked row by row as it streams instead.
pub fn scan_source(file: &DataFile) -> Result<Option<SourceScan>> {
    if !file.is_regular_file() {
        return Ok(None);
    }
    let mut scan = SourceScan::default();
    for row in open_source(file)? {
        scan.rows += 1;
        if let Err(error) = row.row {
            scan.rejected += 1;
            if scan.first_rejected.len() < 5 {
                scan.first_rejected.push((row.line, error.message));
            }
        }
    }
    Ok(Some(scan))
}

/// A source file's size and modification time: what tells, on resume,
/// whether it changed since a run began reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    pub size: u64,
    /// Nanoseconds since the Unix epoch; none where the file system keeps no
    /// modification time.
    pub modified_ns: Option<i64>,
}

impl FileStamp {
    pub fn of(path: &Path) -> Result<Self> {
        let metadata = std::fs::metadata(path).map_err(|e| SourceError::metadata(path, e))?;
        Ok(Self::from(&metadata))
    }
}

impl From<&std::fs::Metadata> for FileStamp {
    fn from(metadata: &std::fs::Metadata) -> Self {
        let modified_ns = metadata
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .and_then(|d| i64::try_from(d.as_nanos()).ok());
        Self {
            size: metadata.len(),
            modified_ns,
        }
    }
}

/// A source opened for a run: its rows, its stamp as it was opened, and the
/// hash of its bytes, which is complete once the rows are read to the end.
pub fn open_source_hashed(file: &DataFile) -> Result<(SourceReader, FileStamp, ContentHash)> {
    let handle = File::open(&file.path).map_err(|e| SourceError::open(&file.path, e))?;
    let stamp = FileStamp::from(
        &handle
            .metadata()
            .map_err(|e| SourceError::metadata(&file.path, e))?,
    );
    let reader = HashingReader::new(handle);
    let hash = reader.hash();
    let rows = read_source(reader, file, &file.path.display().to_string())?;
    Ok((rows, stamp, hash))
}

/// Rows from any reader, in `file`'s format; `name` stands for it in errors.
pub fn read_source(
    input: impl Read + Send + 'static,
    file: &DataFile,
    name: &str,
) -> Result<SourceReader> {
    let input: Box<dyn Read + Send> = match file.encoding {
        Some(encoding) => Box::new(Utf8Reader::new(input, encoding)),
        None => Box::new(input),
    };
    match file.format {
        Format::Csv => csv_rows(input, file.delimiter, name),
        Format::Jsonl => Ok(SourceReader {
            columns: None,
            rows: Box::new(jsonl_rows(BufReader::new(input), name.to_string())),
        }),
        Format::Json => json_rows(BufReader::new(input), name),
    }
}

/// A `.json` source: an array of objects when its first byte (after a byte
/// order mark and white space) is `[`, else JSON Lines.
fn json_rows(mut input: BufReader<Box<dyn Read + Send>>, name: &str) -> Result<SourceReader> {
    let start = input
        .fill_buf()
        .map_err(|e| SourceError::unreadable(name, e))?;
    let bom = if start.starts_with(UTF8_BOM) {
        UTF8_BOM.len()
    } else {
        0
    };
    let first = start[bom..].iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'[') {
        return Ok(SourceReader {
            columns: None,
            rows: Box::new(jsonl_rows(input, name.to_string())),
        });
    }
    input.consume(bom);
    let mut elements = ArrayElements::new(input);
    let name = name.to_string();
    let mut index = 0u64;
    let rows = std::iter::from_fn(move || {
        let (line, row) = match elements.next_element()? {
            Ok(element) => (element.line, json_row(&element.bytes, Unit::Element)),
            Err(broken) => (
                broken.line,
                Err(RowError::new(
                    "source_invalid",
                    format!(
                        "{}; the rest of the file cannot be read as rows",
                        broken.problem
                    ),
                )),
            ),
        };
        let item = SourceRow {
            index,
            line,
            row: row.map_err(|e| located(&name, line, e)),
        };
        index += 1;
        Some(item)
    });
    Ok(SourceReader {
        columns: None,
        rows: Box::new(rows),
    })
}

fn csv_rows(
    input: impl Read + Send + 'static,
    delimiter: Option<u8>,
    name: &str,
) -> Result<SourceReader> {
    let mut input = BufReader::with_capacity(SNIFF_BYTES, input);
    let delimiter = match delimiter {
        Some(given) => given,
        None => sniff_delimiter(
            input
                .fill_buf()
                .map_err(|e| SourceError::unreadable(name, e))?,
        ),
    };
    let mut records = CsvRecords::new(input, delimiter);
    let header_error = |line: Option<u64>, problem: String| SourceError::Header {
        name: name.to_string(),
        line,
        problem,
    };
    let header = match records.next_record() {
        None => {
            return Err(header_error(
                None,
                "the file is empty; a CSV source needs a header row".into(),
            ));
        }
        Some(Err(bad)) => {
            return Err(header_error(
                Some(bad.line),
                format!("the header row is malformed: {}", bad.message),
            ));
        }
        Some(Ok(header)) => header,
    };
    let mut columns = Vec::with_capacity(header.fields.len());
    let mut seen = HashSet::new();
    for (i, raw) in header.fields.iter().enumerate() {
        let Ok(column) = std::str::from_utf8(raw) else {
            return Err(header_error(
                Some(header.line),
                format!(
                    "column {} of the header is not valid UTF-8{OTHER_ENCODING}",
                    i + 1
                ),
            ));
        };
        if !seen.insert(column.to_string()) {
            return Err(header_error(
                Some(header.line),
                format!("the header names column `{column}` twice; column names must be unique"),
            ));
        }
        columns.push(column.to_string());
    }
    let names = columns.clone();
    let name = name.to_string();
    let mut index = 0u64;
    let rows = std::iter::from_fn(move || {
        let (line, row) = match records.next_record()? {
            Ok(record) => (record.line, csv_row(&names, &record.fields)),
            Err(bad) => (
                bad.line,
                Err(RowError::new(
                    "source_invalid",
                    format!("{}: {}", bad.message, bad.text),
                )),
            ),
        };
        let row = row.map_err(|e| located(&name, line, e));
        let item = SourceRow { index, line, row };
        index += 1;
        Some(item)
    });
    Ok(SourceReader {
        columns: Some(columns),
        rows: Box::new(rows),
    })
}

/// What a text that is not UTF-8 may be, said where it is met.
const OTHER_ENCODING: &str =
    " (if the file is in another encoding, give it as source.encoding, e.g. windows-1252)";

/// What the header line is read from when the delimiter is to be told.
const SNIFF_BYTES: usize = 64 * 1024;

/// The field separator of a CSV whose pipeline file names none, from its
/// header line: a comma wherever the line has one, else the most frequent
/// of `;` (spreadsheets where the comma is the decimal mark), tab and `|`
/// outside quotes, else a comma (a file of one column).
fn sniff_delimiter(start: &[u8]) -> u8 {
    let line = start.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut counts = [(b',', 0usize), (b';', 0), (b'\t', 0), (b'|', 0)];
    let mut quoted = false;
    for &b in line {
        if b == b'"' {
            quoted = !quoted;
        } else if !quoted && let Some(count) = counts.iter_mut().find(|(d, _)| *d == b) {
            count.1 += 1;
        }
    }
    if counts[0].1 > 0 {
        return b',';
    }
    counts
        .iter()
        .filter(|(_, n)| *n > 0)
        .max_by_key(|(_, n)| *n)
        .map_or(b',', |(d, _)| *d)
}

/// Prefixes a row error with the file and line it comes from.
fn located(name: &str, line: u64, error: RowError) -> RowError {
    RowError::new(&error.code, format!("{name}:{line}: {}", error.message))
}

fn csv_row(columns: &[String], fields: &[Vec<u8>]) -> Result<Row, RowError> {
    if fields.len() != columns.len() {
        return Err(RowError::new(
            "source_invalid",
            format!(
                "the row has {} fields but the header has {}",
                fields.len(),
                columns.len()
            ),
        ));
    }
    let mut row = Row::with_capacity(columns.len());
    for (column, raw) in columns.iter().zip(fields) {
        let value = std::str::from_utf8(raw).map_err(|_| {
            RowError::new(
                "source_invalid",
                format!("field `{column}` is not valid UTF-8{OTHER_ENCODING}"),
            )
        })?;
        row.insert(column.clone(), Value::String(value.to_string()));
    }
    Ok(row)
}

fn jsonl_rows(
    mut reader: impl BufRead + Send + 'static,
    name: String,
) -> impl Iterator<Item = SourceRow> + Send {
    let mut line_number = 0u64;
    let mut index = 0u64;
    let mut buffer = Vec::new();
    std::iter::from_fn(move || {
        loop {
            buffer.clear();
            line_number += 1;
            let read = reader.read_until(b'\n', &mut buffer);
            // A byte order mark, as Windows tools write before UTF-8.
            if line_number == 1 && buffer.starts_with(UTF8_BOM) {
                buffer.drain(..UTF8_BOM.len());
            }
            let row = match read {
                Ok(0) => return None,
                Ok(_) if buffer.iter().all(u8::is_ascii_whitespace) => continue,
                Ok(_) => json_row(&buffer, Unit::Line),
                Err(e) => Err(RowError::new(
                    "source_invalid",
                    format!("cannot read the line: {e}"),
                )),
            };
            let item = SourceRow {
                index,
                line: line_number,
                row: row.map_err(|e| located(&name, line_number, e)),
            };
            index += 1;
            return Some(item);
        }
    })
}

const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

/// The first integer of a line of valid JSON that no 64-bit integer holds
/// (an id of 20 digits and more), which a JSON number would turn into a
/// float and so into another number, silently.
fn integer_beyond_64_bits(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i + 1 < bytes.len()
                    && matches!(bytes[i + 1], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                {
                    i += 1;
                }
                let number = &text[start..=i];
                let integer = !number.contains(['.', 'e', 'E']);
                if integer
                    && number.len() >= 20
                    && number.parse::<i64>().is_err()
                    && number.parse::<u64>().is_err()
                {
                    return Some(number);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// What holds one row: a line of JSON Lines, an element of an array.
#[derive(Clone, Copy)]
enum Unit {
    Line,
    Element,
}

impl Unit {
    fn name(self) -> &'static str {
        match self {
            Unit::Line => "line",
            Unit::Element => "element",
        }
    }
}

fn json_row(bytes: &[u8], unit: Unit) -> Result<Row, RowError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        RowError::new(
            "source_invalid",
            format!(
                "the {} is not valid UTF-8{OTHER_ENCODING}: {e}",
                unit.name()
            ),
        )
    })?;
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(_)) if let Some(number) = integer_beyond_64_bits(text) => {
            Err(RowError::new(
                "source_invalid",
                format!(
                    "the integer {number} is beyond 64 bits, and weir would keep only its \
                     nearest float; write it as a string (\"{number}\")"
                ),
            ))
        }
        Ok(Value::Object(row)) => Ok(row),
        Ok(other) => Err(RowError::new(
            "source_invalid",
            format!(
                "each {} must be a JSON object, found {}",
                unit.name(),
                json_kind(&other)
            ),
        )),
        Err(e) => Err(RowError::new(
            "source_invalid",
            format!("invalid JSON: {e}"),
        )),
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn read(format: Format, content: &[u8]) -> (Option<Vec<String>>, Vec<SourceRow>) {
        let dir = tempfile::tempdir().unwrap();
        let path: PathBuf = dir.path().join("input");
        std::fs::write(&path, content).unwrap();
        let reader = open_source(&DataFile {
            path,
            format,
            delimiter: None,
            encoding: None,
        })
        .unwrap();
        let columns = reader.columns.clone();
        (columns, reader.collect())
    }

    #[test]
    fn crlf_csv_rows_report_their_own_lines_and_lose_the_cr() {
        let (columns, rows) = read(
            Format::Csv,
            b"id,text\r\n1,\"two\r\nlines\"\r\n2,plain\r\n3,\"quoted\"\r\n",
        );
        assert_eq!(columns.unwrap(), vec!["id", "text"]);
        let lines: Vec<u64> = rows.iter().map(|r| r.line).collect();
        assert_eq!(lines, vec![2, 4, 5]);
        let texts: Vec<String> = rows
            .iter()
            .map(|r| {
                r.row.as_ref().unwrap()["text"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(texts, vec!["two\r\nlines", "plain", "quoted"]);
    }

    #[test]
    fn a_csv_delimiter_is_told_from_the_header_line_or_taken_as_given() {
        assert_eq!(sniff_delimiter(b"id;text\n1;a,b\n"), b';');
        assert_eq!(sniff_delimiter(b"id\ttext\tlabel"), b'\t');
        assert_eq!(sniff_delimiter(b"a|b;c|d\n"), b'|');
        assert_eq!(sniff_delimiter(b"id,text;note\n"), b',', "a comma wins");
        assert_eq!(sniff_delimiter(b"\"a;b\"\n"), b',', "quoted: one column");
        assert_eq!(sniff_delimiter(b"text\n"), b',');
        assert_eq!(sniff_delimiter(b""), b',');
        let (columns, rows) = read(Format::Csv, b"id;text\n1;\"bad; broken\"\n2;1,5\n");
        assert_eq!(columns.unwrap(), vec!["id", "text"]);
        let texts: Vec<_> = rows
            .iter()
            .map(|r| r.row.as_ref().unwrap()["text"].clone())
            .collect();
        assert_eq!(texts, ["bad; broken", "1,5"]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.csv");
        std::fs::write(&path, "a;b\n1;2\n").unwrap();
        let given = open_source(&DataFile {
            path,
            format: Format::Csv,
            delimiter: Some(b','),
            encoding: None,
        })
        .unwrap();
        assert_eq!(given.columns.unwrap(), vec!["a;b"], "as the file says");
    }

    #[test]
    fn a_source_in_another_encoding_is_read_as_utf_8_and_one_not_given_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.csv");
        std::fs::write(&path, b"id;text\n1;caf\xe9 cr\xe8me\n").unwrap();
        let file = |encoding| DataFile {
            path: path.clone(),
            format: Format::Csv,
            delimiter: None,
            encoding,
        };
        let rows: Vec<_> = open_source(&file(Some(encoding_rs::WINDOWS_1252)))
            .unwrap()
            .collect();
        assert_eq!(rows[0].row.as_ref().unwrap()["text"], "café crème");
        let rows: Vec<_> = open_source(&file(None)).unwrap().collect();
        let error = rows[0].row.as_ref().unwrap_err();
        assert!(
            error.message.ends_with(
                "field `text` is not valid UTF-8 (if the file is in another encoding, give it \
                 as source.encoding, e.g. windows-1252)"
            ),
            "{error}"
        );
    }

    #[test]
    fn an_integer_beyond_64_bits_fails_its_row_rather_than_change() {
        let (_, rows) = read(
            Format::Jsonl,
            b"{\"id\":12345678901234567890123,\"t\":\"a\"}\n\
              {\"id\":18446744073709551615,\"n\":-9223372036854775808,\"f\":1.2345678901234567890123e5}\n\
              {\"id\":\"12345678901234567890123\",\"t\":\"12345678901234567890123 \\\" 99999999999999999999\"}\n\
              {\"a\":[1,-18446744073709551616]}\n",
        );
        let error = rows[0].row.as_ref().unwrap_err();
        assert!(
            error.message.ends_with(
                "the integer 12345678901234567890123 is beyond 64 bits, and weir would keep only \
                 its nearest float; write it as a string (\"12345678901234567890123\")"
            ),
            "{error}"
        );
        assert!(rows[1].row.is_ok(), "u64, i64 and a float as written");
        assert!(rows[2].row.is_ok(), "strings, with a quote escaped");
        let error = rows[3].row.as_ref().unwrap_err();
        assert!(error.message.contains("-18446744073709551616"), "{error}");
    }

    #[test]
    fn a_json_lines_file_may_begin_with_a_byte_order_mark() {
        let (_, rows) = read(Format::Jsonl, b"\xef\xbb\xbf{\"id\":1}\r\n{\"id\":2}\n");
        let ids: Vec<_> = rows
            .iter()
            .map(|r| r.row.as_ref().unwrap()["id"].clone())
            .collect();
        assert_eq!(ids, [1, 2]);
        let (_, rows) = read(Format::Jsonl, b"{\"id\":1}\n\xef\xbb\xbf{\"id\":2}\n");
        assert!(
            rows[1].row.is_err(),
            "only the file's first bytes may be one"
        );
    }

    #[test]
    fn csv_rows_keep_column_order_and_lines() {
        let (columns, rows) = read(Format::Csv, b"id,text\n1,\"multi\nline\"\n2,plain\n");
        assert_eq!(columns.unwrap(), vec!["id", "text"]);
        assert_eq!(rows.len(), 2);
        let first = rows[0].row.as_ref().unwrap();
        assert_eq!(first.keys().collect::<Vec<_>>(), vec!["id", "text"]);
        assert_eq!(first["text"], "multi\nline");
        assert_eq!((rows[0].line, rows[1].line), (2, 4));
        assert_eq!(rows[1].index, 1);
    }

    #[test]
    fn ragged_and_non_utf8_csv_rows_fail_alone() {
        let (_, rows) = read(Format::Csv, b"a,b\n1,2\n1,2,3\n\xff,x\n5,6\n");
        assert_eq!(rows.len(), 4);
        assert!(rows[0].row.is_ok());
        let ragged = rows[1].row.as_ref().unwrap_err();
        assert!(
            ragged.message.contains("3 fields but the header has 2"),
            "{ragged}"
        );
        assert_eq!(rows[1].line, 3);
        let bad = rows[2].row.as_ref().unwrap_err();
        assert!(bad.message.contains("`a` is not valid UTF-8"), "{bad}");
        assert_eq!(rows[3].row.as_ref().unwrap()["b"], "6");
    }

    #[test]
    fn duplicate_csv_columns_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.csv");
        std::fs::write(&path, "a,a\n1,2\n").unwrap();
        let err = open_source(&DataFile {
            path,
            format: Format::Csv,
            delimiter: None,
            encoding: None,
        })
        .err()
        .unwrap();
        assert!(err.to_string().contains("names column `a` twice"), "{err}");
    }

    #[test]
    fn a_json_array_gives_a_row_an_element_at_the_line_it_begins_on() {
        let text = b"\xef\xbb\xbf[\n  {\"id\": 1, \"text\": \"a\"},\n  {\"id\": 2,\n   \"text\": \"b\"},\n  [3],\n  {\"id\": 4}\n]\n";
        let (columns, rows) = read(Format::Json, text);
        assert!(columns.is_none());
        let lines: Vec<u64> = rows.iter().map(|r| r.line).collect();
        assert_eq!(lines, [2, 3, 5, 6]);
        assert_eq!(rows[1].row.as_ref().unwrap()["text"], "b");
        let error = &rows[2].row.as_ref().unwrap_err().message;
        assert!(
            error.ends_with(":5: each element must be a JSON object, found an array"),
            "{error}"
        );
        assert_eq!(rows[3].row.as_ref().unwrap()["id"], 4);
        assert_eq!(rows[3].index, 3);
    }

    #[test]
    fn a_json_file_of_lines_is_read_as_json_lines() {
        let (_, rows) = read(Format::Json, b"{\"id\": 1}\n{\"id\": 2}\n");
        let ids: Vec<i64> = rows
            .iter()
            .map(|r| r.row.as_ref().unwrap()["id"].as_i64().unwrap())
            .collect();
        assert_eq!(ids, [1, 2]);
    }

    #[test]
    fn a_json_array_cut_short_fails_where_it_breaks_after_its_whole_rows() {
        let (_, rows) = read(Format::Json, b"[{\"id\": 1},\n{\"id\": 2},\n{\"id\"");
        assert_eq!(rows.len(), 3);
        assert!(rows[..2].iter().all(|r| r.row.is_ok()));
        let error = &rows[2].row.as_ref().unwrap_err().message;
        assert!(
            error.ends_with(
                ":3: the file ends inside the element that begins here; the rest of the file \
                 cannot be read as rows"
            ),
            "{error}"
        );
    }

    #[test]
    fn jsonl_skips_blank_lines_and_reports_bad_ones() {
        let (columns, rows) = read(Format::Jsonl, b"{\"a\":1}\n\n[1]\n{bad\n{\"a\":2}");
        assert!(columns.is_none());
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[0].row.as_ref().unwrap()["a"], 1);
        assert!(
            rows[1]
                .row
                .as_ref()
                .unwrap_err()
                .message
                .contains("found an array")
        );
        assert_eq!(rows[1].line, 3);
        assert!(
            rows[2]
                .row
                .as_ref()
                .unwrap_err()
                .message
                .contains("invalid JSON")
        );
        assert_eq!(rows[3].row.as_ref().unwrap()["a"], 2);
        assert_eq!(rows[3].index, 3);
    }
}
