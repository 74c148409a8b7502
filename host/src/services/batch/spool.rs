//! A batch's request lines, spooled to an unnamed temporary file as they are
//! read from the audit database: a batch may hold 200 MB of requests (the
//! providers' limit), which are streamed to the provider rather than held
//! in memory, twice, while they upload.

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};

pub struct Spool {
    out: BufWriter<File>,
    /// Anthropic takes the lines inline, as the `requests` array of one
    /// JSON body; OpenAI and Azure as a JSONL file.
    inline: bool,
    count: usize,
}

impl Spool {
    pub fn new(inline: bool) -> std::io::Result<Self> {
        let mut out = BufWriter::new(tempfile::tempfile()?);
        if inline {
            out.write_all(b"{\"requests\":[")?;
        }
        Ok(Self {
            out,
            inline,
            count: 0,
        })
    }

    pub fn push(&mut self, line: &str) -> std::io::Result<()> {
        if self.inline && self.count > 0 {
            self.out.write_all(b",")?;
        }
        self.out.write_all(line.as_bytes())?;
        if !self.inline {
            self.out.write_all(b"\n")?;
        }
        self.count += 1;
        Ok(())
    }

    pub fn finish(mut self) -> std::io::Result<Spooled> {
        if self.inline {
            self.out.write_all(b"]}")?;
        }
        let mut file = self.out.into_inner().map_err(|e| e.into_error())?;
        let len = file.seek(SeekFrom::End(0))?;
        Ok(Spooled {
            file,
            len,
            count: self.count,
        })
    }
}

/// The spooled lines, ready to send as often as a retry needs.
pub struct Spooled {
    file: File,
    pub len: u64,
    /// How many requests the lines are.
    pub count: usize,
}

impl Spooled {
    /// The lines as a request body, read from the start of the file.
    pub fn body(&self) -> std::io::Result<reqwest::Body> {
        let mut file = self.file.try_clone()?;
        file.seek(SeekFrom::Start(0))?;
        Ok(reqwest::Body::from(tokio::fs::File::from_std(file)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn text(spooled: &Spooled) -> String {
        let mut file = spooled.file.try_clone().unwrap();
        file.seek(SeekFrom::Start(0)).unwrap();
        let mut text = String::new();
        file.read_to_string(&mut text).unwrap();
        text
    }

    #[test]
    fn lines_spool_as_jsonl_or_as_one_inline_json_body() {
        let mut jsonl = Spool::new(false).unwrap();
        let mut inline = Spool::new(true).unwrap();
        for line in [r#"{"a":1}"#, r#"{"b":2}"#] {
            jsonl.push(line).unwrap();
            inline.push(line).unwrap();
        }
        let (jsonl, inline) = (jsonl.finish().unwrap(), inline.finish().unwrap());
        assert_eq!(text(&jsonl), "{\"a\":1}\n{\"b\":2}\n");
        assert_eq!(jsonl.len, 16);
        let body: serde_json::Value = serde_json::from_str(&text(&inline)).unwrap();
        assert_eq!(body, serde_json::json!({"requests": [{"a": 1}, {"b": 2}]}));
        assert_eq!((jsonl.count, inline.count), (2, 2));
        // A retry reads it from the start again.
        assert_eq!(text(&jsonl), text(&jsonl));
    }
}
