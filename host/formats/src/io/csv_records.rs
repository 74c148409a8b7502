//! A strict CSV record reader. Quoting follows RFC 4180: a field that starts
//! with `"` runs to the next lone `"`, and a quote inside it is doubled.
//!
//! Lenient readers turn a stray quote into silent data loss: a field that
//! opens a quote and never closes it swallows every later line, and
//! `"He said "hi" there"` loses a quote without a word. Here such a record is
//! refused at the line it starts on, and reading resumes on the line after
//! it, so one bad line costs one row, never the rows behind it.

use std::collections::VecDeque;
use std::io::BufRead;

/// A quoted field may span lines, but a record that grows past this is taken
/// for a quote that never closes: memory stays bounded whatever the file.
pub const MAX_RECORD_BYTES: usize = 64 << 20;

pub struct Record {
    /// 1-based line the record starts on.
    pub line: u64,
    /// Raw field bytes, quotes removed, `""` unescaped.
    pub fields: Vec<Vec<u8>>,
}

#[derive(Debug)]
pub struct Malformed {
    /// 1-based line the record starts on.
    pub line: u64,
    pub message: String,
    /// The record's first line as written (at most a few hundred bytes).
    pub text: String,
}

pub struct CsvRecords<R> {
    input: R,
    /// Lines read past a malformed record's first line, read again after it.
    pushback: VecDeque<Vec<u8>>,
    /// The number of the last line handed out.
    line: u64,
    delimiter: u8,
    /// Set once the input has failed: nothing more can be read.
    failed: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum State {
    FieldStart,
    Unquoted,
    Quoted {
        line: u64,
        column: usize,
    },
    /// A quote inside a quoted field: the end of the field, or the first of a pair.
    QuoteInQuoted {
        line: u64,
        column: usize,
    },
}

const SAMPLE_BYTES: usize = 200;

impl<R: BufRead> CsvRecords<R> {
    pub fn new(input: R, delimiter: u8) -> Self {
        Self {
            input,
            pushback: VecDeque::new(),
            line: 0,
            delimiter,
            failed: false,
        }
    }

    fn next_line(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        if let Some(line) = self.pushback.pop_front() {
            self.line += 1;
            return Ok(Some(line));
        }
        let mut buffer = Vec::new();
        match self.input.read_until(b'\n', &mut buffer)? {
            0 => Ok(None),
            _ => {
                self.line += 1;
                if self.line == 1 && buffer.starts_with(b"\xEF\xBB\xBF") {
                    buffer.drain(..3);
                }
                Ok(Some(buffer))
            }
        }
    }

    /// The next record, or why the record starting on the next line is
    /// malformed; None at the end of the input.
    pub fn next_record(&mut self) -> Option<Result<Record, Malformed>> {
        if self.failed {
            return None;
        }
        loop {
            let first = match self.next_line() {
                Ok(Some(line)) => line,
                Ok(None) => return None,
                Err(e) => {
                    self.failed = true;
                    return Some(Err(Malformed {
                        line: self.line + 1,
                        message: format!("cannot read the file: {e}"),
                        text: String::new(),
                    }));
                }
            };
            if is_blank(&first) {
                continue;
            }
            return Some(self.parse_from(first));
        }
    }

    fn parse_from(&mut self, first: Vec<u8>) -> Result<Record, Malformed> {
        let start = self.line;
        let mut continued: Vec<Vec<u8>> = Vec::new();
        let mut fields = Vec::new();
        let mut field = Vec::new();
        let mut state = State::FieldStart;
        let mut size = first.len();
        let mut current = first.clone();
        loop {
            match self.scan(&current, &mut state, &mut field, &mut fields) {
                Ok(true) => {
                    return Ok(Record {
                        line: start,
                        fields,
                    });
                }
                Ok(false) => {}
                Err(message) => return Err(self.resync(start, &first, continued, message)),
            }
            // Only a quoted field carries a record onto the next line.
            let State::Quoted { line, column } = state else {
                fields.push(std::mem::take(&mut field));
                return Ok(Record {
                    line: start,
                    fields,
                });
            };
            let next = match self.next_line() {
                Ok(next) => next,
                Err(e) => {
                    let message = format!("cannot read the file: {e}");
                    return Err(self.resync(start, &first, continued, message));
                }
            };
            let Some(next) = next else {
                let message = unclosed(line, column, start, "the file ends first");
                return Err(self.resync(start, &first, continued, message));
            };
            size += next.len();
            if size > MAX_RECORD_BYTES {
                continued.push(next);
                let limit = format!("the record grows past {} MiB", MAX_RECORD_BYTES >> 20);
                let message = unclosed(line, column, start, &limit);
                return Err(self.resync(start, &first, continued, message));
            }
            continued.push(next.clone());
            current = next;
        }
    }

    /// Reads one line's bytes into the record. Ok(true) when the record ends
    /// on this line, Ok(false) when the line ran out first.
    fn scan(
        &self,
        bytes: &[u8],
        state: &mut State,
        field: &mut Vec<u8>,
        fields: &mut Vec<Vec<u8>>,
    ) -> Result<bool, String> {
        let line = self.line;
        for (i, &b) in bytes.iter().enumerate() {
            let at_line_end = b == b'\n' || (b == b'\r' && bytes.get(i + 1) == Some(&b'\n'));
            match *state {
                State::FieldStart | State::Unquoted if at_line_end => {
                    fields.push(std::mem::take(field));
                    return Ok(true);
                }
                State::FieldStart if b == b'"' => {
                    *state = State::Quoted {
                        line,
                        column: i + 1,
                    };
                }
                State::FieldStart | State::Unquoted if b == self.delimiter => {
                    fields.push(std::mem::take(field));
                    *state = State::FieldStart;
                }
                State::FieldStart | State::Unquoted => {
                    // A quote inside an unquoted field (`12" pizza`) is text.
                    field.push(b);
                    *state = State::Unquoted;
                }
                State::Quoted { line, column } if b == b'"' => {
                    *state = State::QuoteInQuoted { line, column };
                }
                State::Quoted { .. } => field.push(b),
                State::QuoteInQuoted { line, column } if b == b'"' => {
                    field.push(b'"');
                    *state = State::Quoted { line, column };
                }
                State::QuoteInQuoted { .. } if at_line_end => {
                    fields.push(std::mem::take(field));
                    return Ok(true);
                }
                State::QuoteInQuoted { .. } if b == self.delimiter => {
                    fields.push(std::mem::take(field));
                    *state = State::FieldStart;
                }
                State::QuoteInQuoted {
                    line: opened,
                    column,
                } => {
                    let opened_at = if opened == line {
                        format!("column {column}")
                    } else {
                        format!("line {opened}, column {column}")
                    };
                    return Err(format!(
                        "the quoted field that opens at {opened_at} closes at column {} but `{}` \
                         follows the closing quote; a quote inside a quoted field must be doubled \
                         (\"\"), or the field left unquoted",
                        i,
                        char_at(bytes, i)
                    ));
                }
            }
        }
        Ok(false)
    }

    /// Gives back the lines read past the record's first line, so reading
    /// carries on right after it, and describes the record.
    fn resync(
        &mut self,
        start: u64,
        first: &[u8],
        continued: Vec<Vec<u8>>,
        message: String,
    ) -> Malformed {
        for line in continued.into_iter().rev() {
            self.pushback.push_front(line);
        }
        self.line = start;
        Malformed {
            line: start,
            message,
            text: sample(first),
        }
    }
}

fn unclosed(line: u64, column: usize, start: u64, why: &str) -> String {
    let at = if line == start {
        format!("column {column}")
    } else {
        format!("line {line}, column {column}")
    };
    format!(
        "the quoted field that opens at {at} is never closed ({why}); the lines after it are read \
         as rows of their own"
    )
}

fn char_at(bytes: &[u8], i: usize) -> String {
    let end = (i + 4).min(bytes.len());
    match String::from_utf8_lossy(&bytes[i..end]).chars().next() {
        Some(c) => c.escape_debug().to_string(),
        None => String::new(),
    }
}

fn is_blank(line: &[u8]) -> bool {
    matches!(line, b"\n" | b"\r\n")
}

/// The start of a line, for an error message: printable, one line, short.
pub fn sample(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end_matches(['\n', '\r']);
    let mut out = String::new();
    for c in text.chars() {
        if out.len() >= SAMPLE_BYTES {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (line, fields) of a record, or (line, message) of a malformed one.
    type Read = Result<(u64, Vec<String>), (u64, String)>;

    fn records(text: &str) -> Vec<Read> {
        let mut reader = CsvRecords::new(text.as_bytes(), b',');
        std::iter::from_fn(|| reader.next_record())
            .map(|r| match r {
                Ok(r) => Ok((
                    r.line,
                    r.fields
                        .into_iter()
                        .map(|f| String::from_utf8(f).unwrap())
                        .collect(),
                )),
                Err(e) => Err((e.line, e.message)),
            })
            .collect()
    }

    #[test]
    fn quoted_fields_span_lines_and_double_their_quotes() {
        let got = records("a,b\n1,\"x\ny\"\n2,\"say \"\"hi\"\"\"\r\n3,12\" pizza\n\n4,\n");
        let ok: Vec<_> = got.into_iter().map(Result::unwrap).collect();
        assert_eq!(ok[0], (1, vec!["a".into(), "b".into()]));
        assert_eq!(ok[1], (2, vec!["1".into(), "x\ny".into()]));
        assert_eq!(ok[2], (4, vec!["2".into(), "say \"hi\"".into()]));
        assert_eq!(ok[3], (5, vec!["3".into(), "12\" pizza".into()]));
        assert_eq!(ok[4], (7, vec!["4".into(), "".into()]));
        assert_eq!(ok.len(), 5);
    }

    #[test]
    fn a_quote_that_never_closes_costs_its_own_line_only() {
        let mut text = String::from("id,text\n");
        for i in 0..100 {
            if i == 5 {
                text.push_str("r5,\"Broken quote I love it\n");
            } else {
                text.push_str(&format!("r{i},fine {i}\n"));
            }
        }
        let got = records(&text);
        assert_eq!(got.len(), 101);
        let (line, message) = got[6].clone().unwrap_err();
        assert_eq!(line, 7);
        assert!(
            message.contains("opens at column 4 is never closed"),
            "{message}"
        );
        let (line, fields) = got[7].clone().unwrap();
        assert_eq!((line, fields[0].as_str()), (8, "r6"));
        assert_eq!(got[100].clone().unwrap().0, 101);
    }

    #[test]
    fn text_after_a_closing_quote_is_refused_and_reading_goes_on() {
        let got = records("id,text,label\nr5,\"He said \"hi\" there\",NEUTRAL\nr6,ok,POSITIVE\n");
        let (line, message) = got[1].clone().unwrap_err();
        assert_eq!(line, 2);
        assert!(
            message.contains("`h` follows the closing quote"),
            "{message}"
        );
        assert_eq!(got[2].clone().unwrap().1[0], "r6");
    }

    #[test]
    fn a_stray_quote_closed_lines_later_is_refused_at_its_first_line() {
        let got = records("id,text\nr1,\"open\nr2,fine\nr3,he said \"no\" twice\nr4,end\n");
        let (line, message) = got[1].clone().unwrap_err();
        assert_eq!(line, 2);
        assert!(message.contains("follows the closing quote"), "{message}");
        let lines: Vec<u64> = got[2..].iter().map(|r| r.clone().unwrap().0).collect();
        assert_eq!(lines, vec![3, 4, 5]);
    }

    #[test]
    fn a_byte_order_mark_and_a_missing_last_newline_are_fine() {
        let got = records("\u{feff}a,b\n1,\"2\"");
        assert_eq!(got[0].clone().unwrap().1, vec!["a", "b"]);
        assert_eq!(got[1].clone().unwrap().1, vec!["1", "2"]);
    }
}
