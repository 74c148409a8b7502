//! Writers for CSV and JSON Lines. Output goes to `<path>.partial` and is
//! renamed into place only when the run ends, so a file at the sink's path is
//! always complete. A resumed run reopens the partial file and cuts it back to
//! the last checkpoint the audit database holds for it.

use crate::config::{DataFile, Format};
use crate::types::Row;
use serde_json::Value;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

type Result<T, E = SinkError> = std::result::Result<T, E>;

/// A sink that cannot be opened, written or moved into place.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("{context}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{context}")]
    Csv {
        context: String,
        #[source]
        source: csv::Error,
    },
    #[error(
        "{} holds {len} bytes, but the audit database says {offset} were written; it was \
         changed outside weir",
        partial.display()
    )]
    ChangedOutside {
        partial: PathBuf,
        len: u64,
        offset: u64,
    },
    #[error(transparent)]
    Metadata(std::io::Error),
}

/// Says which file a failed operation was on.
trait Context<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Context<T> for std::result::Result<T, std::io::Error> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| SinkError::Io {
            context: context(),
            source,
        })
    }
}

impl<T> Context<T> for std::result::Result<T, csv::Error> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| SinkError::Csv {
            context: context(),
            source,
        })
    }
}

pub trait RowSink: Send {
    fn write(&mut self, row: &Row) -> Result<()>;
    /// Hands everything written so far to the operating system and returns
    /// the file's length: where a resume would carry on after these rows.
    fn checkpoint(&mut self) -> Result<u64>;
    /// Flushes and moves the file into place.
    fn finish(self: Box<Self>) -> Result<()>;
    /// Removes the partial file after a failed run.
    fn abandon(self: Box<Self>);
}

/// `columns`: the CSV header. When unknown (a JSON Lines source), the first
/// row's keys are used. `resume_at`: the checkpoint to carry on from, when
/// resuming a run.
pub fn open_sink(
    file: &DataFile,
    columns: Option<Vec<String>>,
    resume_at: Option<u64>,
) -> Result<Box<dyn RowSink>> {
    let place = Placement {
        partial: partial_path(&file.path),
        path: file.path.clone(),
    };
    if let Some(dir) = file.path.parent() {
        std::fs::create_dir_all(dir)
            .context(|| format!("cannot create folder {}", dir.display()))?;
    }
    let (handle, resumed) = match resume_at {
        Some(offset) if offset > 0 => (place.reopen(offset)?, true),
        _ => (
            File::create(&place.partial)
                .context(|| format!("cannot create {}", place.partial.display()))?,
            false,
        ),
    };
    Ok(match file.format {
        Format::Csv => Box::new(CsvSink {
            writer: csv::WriterBuilder::new()
                .buffer_capacity(BUFFER)
                .delimiter(file.delimiter.unwrap_or(b','))
                .from_writer(handle),
            place,
            columns,
            header_written: resumed,
            warned_extra: false,
        }),
        // The pipeline file gives no sink `json` (see `config::format_of`).
        Format::Jsonl | Format::Json => Box::new(JsonlSink {
            writer: BufWriter::with_capacity(BUFFER, handle),
            place,
        }),
    })
}

const BUFFER: usize = 256 * 1024;

fn partial_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    path.with_file_name(name)
}

/// Where a sink writes while running, and where the file goes at the end.
struct Placement {
    partial: PathBuf,
    path: PathBuf,
}

impl Placement {
    /// The partial file of a killed run, cut back to `offset`.
    fn reopen(&self, offset: u64) -> Result<File> {
        // A run killed between moving its files into place and recording its
        // end has them at the final path.
        if !self.partial.exists() && self.path.exists() {
            std::fs::rename(&self.path, &self.partial)
                .context(|| format!("cannot reopen {}", self.path.display()))?;
        }
        let mut file = OpenOptions::new()
            .write(true)
            .open(&self.partial)
            .context(|| format!("cannot reopen {} to resume", self.partial.display()))?;
        let len = file.metadata().map_err(SinkError::Metadata)?.len();
        if len < offset {
            return Err(SinkError::ChangedOutside {
                partial: self.partial.clone(),
                len,
                offset,
            });
        }
        file.set_len(offset)
            .and_then(|()| file.seek(SeekFrom::End(0)))
            .context(|| {
                format!(
                    "cannot cut {} back to {offset} bytes",
                    self.partial.display()
                )
            })?;
        Ok(file)
    }

    /// What a failed write says: the file, then the operating system's error.
    fn cannot_write(&self) -> String {
        format!("cannot write {}", self.partial.display())
    }

    fn commit(&self, file: File) -> Result<()> {
        file.sync_all().context(|| self.cannot_write())?;
        std::fs::rename(&self.partial, &self.path)
            .context(|| format!("cannot move {} into place", self.partial.display()))
    }

    fn discard(&self) {
        let _ = std::fs::remove_file(&self.partial);
    }
}

struct JsonlSink {
    writer: BufWriter<File>,
    place: Placement,
}

impl RowSink for JsonlSink {
    fn write(&mut self, row: &Row) -> Result<()> {
        serde_json::to_writer(&mut self.writer, row)
            .map_err(std::io::Error::from)
            .and_then(|()| self.writer.write_all(b"\n"))
            .context(|| self.place.cannot_write())
    }
    fn checkpoint(&mut self) -> Result<u64> {
        self.writer
            .flush()
            .and_then(|()| self.writer.get_mut().stream_position())
            .context(|| self.place.cannot_write())
    }
    fn finish(self: Box<Self>) -> Result<()> {
        let file = self
            .writer
            .into_inner()
            .map_err(|e| e.into_error())
            .context(|| self.place.cannot_write())?;
        self.place.commit(file)
    }
    fn abandon(self: Box<Self>) {
        drop(self.writer);
        self.place.discard();
    }
}

struct CsvSink {
    writer: csv::Writer<File>,
    place: Placement,
    columns: Option<Vec<String>>,
    header_written: bool,
    warned_extra: bool,
}

impl CsvSink {
    fn write_header(&mut self, columns: &[String]) -> Result<()> {
        self.writer
            .write_record(columns)
            .context(|| self.place.cannot_write())?;
        self.header_written = true;
        Ok(())
    }
}

impl RowSink for CsvSink {
    fn write(&mut self, row: &Row) -> Result<()> {
        let columns = self
            .columns
            .take()
            .unwrap_or_else(|| row.keys().cloned().collect());
        if !self.header_written {
            self.write_header(&columns)?;
        }
        let written = self.writer.write_record(
            columns
                .iter()
                .map(|c| row.get(c).map(cell).unwrap_or_default()),
        );
        if !self.warned_extra
            && let Some(extra) = row.keys().find(|k| !columns.contains(k))
        {
            tracing::warn!(
                "field `{extra}` is not a column of {} (no node declares it); it is left out of the \
                 CSV. A JSON Lines sink keeps every field.",
                self.place.path.display()
            );
            self.warned_extra = true;
        }
        self.columns = Some(columns);
        written.context(|| self.place.cannot_write())
    }
    fn checkpoint(&mut self) -> Result<u64> {
        self.writer
            .flush()
            .and_then(|()| {
                let mut file: &File = self.writer.get_ref();
                file.stream_position()
            })
            .context(|| self.place.cannot_write())
    }
    fn finish(mut self: Box<Self>) -> Result<()> {
        if !self.header_written
            && let Some(columns) = self.columns.take()
        {
            self.write_header(&columns)?;
        }
        let file = self
            .writer
            .into_inner()
            .map_err(|e| e.into_error())
            .context(|| self.place.cannot_write())?;
        self.place.commit(file)
    }
    fn abandon(self: Box<Self>) {
        drop(self.writer);
        self.place.discard();
    }
}

/// Strings as they are; nested values as compact JSON; null as an empty cell.
fn cell(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Bool(_) | Value::Number(_) => value.to_string(),
        Value::Array(_) | Value::Object(_) => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(v: Value) -> Row {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn csv_sink_writes_header_cells_and_only_at_finish() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out/result.csv");
        let file = DataFile {
            path: path.clone(),
            format: Format::Csv,
            delimiter: None,
            encoding: None,
        };
        let mut sink = open_sink(
            &file,
            Some(vec!["id".into(), "answer".into(), "usage".into()]),
            None,
        )
        .unwrap();
        sink.write(&row(
            json!({"id": "1", "answer": "yes, \"quoted\"", "usage": {"t": 3}}),
        ))
        .unwrap();
        sink.write(&row(json!({"id": "2", "answer": null, "usage": 5})))
            .unwrap();
        assert!(
            !path.exists(),
            "the final file must appear only when the sink finishes"
        );
        sink.finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "id,answer,usage\n1,\"yes, \"\"quoted\"\"\",\"{\"\"t\"\":3}\"\n2,,5\n"
        );
        assert!(!dir.path().join("out/result.csv.partial").exists());
    }

    #[test]
    fn a_csv_sink_writes_the_delimiter_it_is_given() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("result.csv");
        let file = DataFile {
            path: path.clone(),
            format: Format::Csv,
            delimiter: Some(b';'),
            encoding: None,
        };
        let mut sink = open_sink(&file, Some(vec!["id".into(), "price".into()]), None).unwrap();
        sink.write(&row(json!({"id": "1", "price": "1,5; net"})))
            .unwrap();
        sink.finish().unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "id;price\n1;\"1,5; net\"\n"
        );
    }

    #[test]
    fn jsonl_sink_and_abandon() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let file = DataFile {
            path: path.clone(),
            format: Format::Jsonl,
            delimiter: None,
            encoding: None,
        };
        let mut sink = open_sink(&file, None, None).unwrap();
        sink.write(&row(json!({"b": 1, "a": 2}))).unwrap();
        sink.finish().unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"b\":1,\"a\":2}\n"
        );

        let other = DataFile {
            path: dir.path().join("gone.jsonl"),
            format: Format::Jsonl,
            delimiter: None,
            encoding: None,
        };
        let mut sink = open_sink(&other, None, None).unwrap();
        sink.write(&row(json!({"a": 1}))).unwrap();
        sink.abandon();
        assert!(!dir.path().join("gone.jsonl").exists());
        assert!(!dir.path().join("gone.jsonl.partial").exists());
    }

    #[test]
    fn a_resumed_sink_cuts_back_to_its_checkpoint_and_carries_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.csv");
        let file = DataFile {
            path: path.clone(),
            format: Format::Csv,
            delimiter: None,
            encoding: None,
        };
        let columns = Some(vec!["id".to_string()]);
        let mut sink = open_sink(&file, columns.clone(), None).unwrap();
        sink.write(&row(json!({"id": "1"}))).unwrap();
        let checkpoint = sink.checkpoint().unwrap();
        assert_eq!(checkpoint, "id\n1\n".len() as u64);
        // Written after the checkpoint, then the process dies.
        sink.write(&row(json!({"id": "2"}))).unwrap();
        sink.checkpoint().unwrap();
        drop(sink);

        let mut sink = open_sink(&file, columns.clone(), Some(checkpoint)).unwrap();
        sink.write(&row(json!({"id": "2"}))).unwrap();
        sink.write(&row(json!({"id": "3"}))).unwrap();
        sink.finish().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "id\n1\n2\n3\n");

        let error = open_sink(&file, columns, Some(1_000)).err().unwrap();
        assert!(
            format!("{error:#}").contains("changed outside weir"),
            "{error:#}"
        );
    }
}
