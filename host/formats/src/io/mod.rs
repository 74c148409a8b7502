//! Row sources and sinks, streamed: neither holds more than a row at a time.

mod csv_records;
mod decode;
mod json_array;
pub mod sink;
pub mod source;

pub use sink::{RowSink, SinkError, open_sink};
pub use source::{
    FileStamp, SourceError, SourceReader, SourceRow, SourceScan, open_source, open_source_hashed,
    read_source, scan_source,
};
