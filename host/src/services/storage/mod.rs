//! Sources, sinks and audit databases on object storage (`s3://`, `gs://`,
//! `az://`). A run reads and writes local stand-ins (see
//! `config::staging`); this copies a stand-in from its object before a run
//! and to it after.
//!
//! A source is downloaded whole into its stand-in rather than read as a
//! stream: weir reads a source twice (once to refuse unreadable rows before
//! any call, once to run), hashes it, counts its rows to find a shard's part,
//! and compares its size and time on resume, and all of that needs a file it
//! can read again. The download itself streams, a chunk at a time.
//!
//! A sink is written to its stand-in, as a local sink is, and uploaded in
//! parts once the run has finished it: a killed run's rows stay in the local
//! partial file that a resume carries on from, and the object only ever
//! holds a complete output.

mod error;
mod location;
mod transfer;

pub use error::StorageError;
pub use transfer::Fetched;

use crate::config::Staging;
use location::Location;
use std::path::Path;

type Result<T, E = StorageError> = std::result::Result<T, E>;

/// Brings the object `local` stands in for into it, if it is a stand-in and
/// does not already hold the object's current version. A missing object is
/// an error.
pub async fn fetch(staging: &Staging, local: &Path) -> Result<Fetched> {
    match staging.url_of(local) {
        Some(url) => transfer::fetch(&Location::parse(&url)?, local, true).await,
        None => Ok(Fetched::Current),
    }
}

/// Like `fetch`, for an object that may not exist yet: leaves `local` as it
/// is then.
pub async fn fetch_if_present(staging: &Staging, local: &Path) -> Result<Fetched> {
    match staging.url_of(local) {
        Some(url) => transfer::fetch(&Location::parse(&url)?, local, false).await,
        None => Ok(Fetched::Current),
    }
}

/// Like `fetch_if_present`, but never replaces a local copy: for an audit
/// database a run on this machine may be writing.
pub async fn fetch_if_missing(staging: &Staging, local: &Path) -> Result<Fetched> {
    if local.exists() {
        return Ok(Fetched::Current);
    }
    fetch_if_present(staging, local).await
}

/// Uploads `local` to the object it stands in for; nothing for a local file.
/// Returns the URL it went to.
pub async fn publish(staging: &Staging, local: &Path) -> Result<Option<String>> {
    let Some(url) = staging.url_of(local) else {
        return Ok(None);
    };
    transfer::upload(local, &Location::parse(&url)?).await?;
    Ok(Some(url))
}
