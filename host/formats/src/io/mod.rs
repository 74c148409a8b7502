//! Row sources and sinks, streamed: neither holds more than a row at a time.

mod csv_records;
pub mod sink;
pub mod source;

pub use sink::{RowSink, open_sink};
pub use source::{SourceReader, SourceRow, SourceScan, open_source, read_source, scan_source};
