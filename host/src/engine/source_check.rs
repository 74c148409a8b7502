//! A source with rows that cannot be read (a quote that never closes, a
//! ragged record, bad UTF-8 or JSON) is refused before any row costs a call,
//! unless the pipeline says where such rows go (`on_error`).

use crate::config::{OnError, Pipeline};
use crate::io;

use super::RunError;

type Result<T, E = RunError> = std::result::Result<T, E>;

/// Returns the scan it made, if it read the source, so that nothing reads
/// it a second time for the same count.
pub fn refuse_unreadable_rows(pipeline: &Pipeline) -> Result<Option<io::SourceScan>> {
    if pipeline.source_on_error != OnError::Fail {
        return Ok(None);
    }
    let Some(scan) = io::scan_source(&pipeline.source)? else {
        return Ok(None);
    };
    if scan.rejected == 0 {
        return Ok(Some(scan));
    }
    let mut message = format!(
        "{} of the {} rows of {} cannot be read:",
        scan.rejected,
        scan.rows,
        pipeline.source.path.display()
    );
    for (_, error) in &scan.first_rejected {
        message.push_str("\n  ");
        message.push_str(error);
    }
    if scan.rejected > scan.first_rejected.len() as u64 {
        message.push_str(&format!(
            "\n  … and {} more",
            scan.rejected - scan.first_rejected.len() as u64
        ));
    }
    message.push_str(
        "\nNo request was sent. Fix those lines, or add `on_error: {path: rejected.csv}` (or \
         `on_error: discard`) at the top level of the pipeline file to run the other rows and set \
         these aside",
    );
    Err(RunError::Invalid(message))
}
