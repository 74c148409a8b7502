//! Copies between an object and a local file, a chunk at a time: neither
//! direction holds a whole object in memory.

use super::StorageError;
use super::location::Location;
use futures::StreamExt;
use object_store::{ObjectStoreExt, WriteMultipart};
use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::time::SystemTime;

type Result<T, E = StorageError> = std::result::Result<T, E>;

/// Parts of a multipart upload: above S3's 5 MiB floor for all but the last
/// part, and small enough that a few in flight stay a small share of memory.
const PART_BYTES: usize = 8 << 20;
/// Parts uploading at once.
const PARTS_IN_FLIGHT: usize = 4;
/// What one read from a local file hands to the upload.
const READ_BYTES: usize = 1 << 20;

/// What `fetch` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetched {
    /// The object was downloaded into the file.
    Downloaded,
    /// The file already held this version of the object.
    Current,
    /// There is no such object; the file was left as it was.
    Absent,
}

/// Downloads the object into `local`, unless `local` already holds it (same
/// size and modification time, which a download sets to the object's). The
/// object arrives in a file of its own that is renamed into place, so shards
/// fetching one source at once each see a whole file.
pub async fn fetch(location: &Location, local: &Path, required: bool) -> Result<Fetched> {
    let meta = match location.store.head(&location.path).await {
        Ok(meta) => meta,
        Err(object_store::Error::NotFound { .. }) if !required => return Ok(Fetched::Absent),
        Err(e) => return Err(StorageError::reading(&location.url, e)),
    };
    let modified: SystemTime = meta.last_modified.into();
    if let Ok(have) = std::fs::metadata(local)
        && have.is_file()
        && have.len() == meta.size
        && have.modified().is_ok_and(|m| m == modified)
    {
        return Ok(Fetched::Current);
    }
    if let Some(dir) = local.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| StorageError::io(format!("cannot create {}", dir.display()), e))?;
    }
    let mut name = local.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".download-{}", std::process::id()));
    let incoming = local.with_file_name(name);
    let result = download(location, &incoming, modified).await;
    if result.is_err() {
        let _ = std::fs::remove_file(&incoming);
    }
    result?;
    std::fs::rename(&incoming, local).map_err(|e| {
        StorageError::io(format!("cannot move {} into place", incoming.display()), e)
    })?;
    Ok(Fetched::Downloaded)
}

async fn download(location: &Location, into: &Path, modified: SystemTime) -> Result<()> {
    let cannot_write = |e| StorageError::io(format!("cannot write {}", into.display()), e);
    let mut file = File::create(into).map_err(cannot_write)?;
    let got = location
        .store
        .get(&location.path)
        .await
        .map_err(|e| StorageError::reading(&location.url, e))?;
    let mut chunks = got.into_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| StorageError::reading(&location.url, e))?;
        file.write_all(&chunk).map_err(cannot_write)?;
    }
    file.set_modified(modified).map_err(cannot_write)?;
    file.sync_all().map_err(cannot_write)
}

/// Uploads `local` in parts, then gives `local` the object's modification
/// time, so a later `fetch` of the object (by `weir merge` on this machine)
/// finds it current instead of downloading it again.
pub async fn upload(local: &Path, location: &Location) -> Result<()> {
    let put_error = |source| StorageError::Put {
        url: location.url.clone(),
        path: local.to_path_buf(),
        source,
    };
    let cannot_read = |e| StorageError::io(format!("cannot read {}", local.display()), e);
    let mut file = File::open(local).map_err(cannot_read)?;
    let upload = location
        .store
        .put_multipart(&location.path)
        .await
        .map_err(put_error)?;
    let mut parts = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
    let mut buffer = vec![0; READ_BYTES];
    loop {
        let read = match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                let _ = parts.abort().await;
                return Err(cannot_read(e));
            }
        };
        if let Err(e) = parts.wait_for_capacity(PARTS_IN_FLIGHT).await {
            return Err(put_error(e));
        }
        parts.write(&buffer[..read]);
    }
    parts.finish().await.map_err(put_error)?;
    let meta = location
        .store
        .head(&location.path)
        .await
        .map_err(|e| StorageError::reading(&location.url, e))?;
    let modified: SystemTime = meta.last_modified.into();
    File::options()
        .write(true)
        .open(local)
        .and_then(|f| f.set_modified(modified))
        .map_err(|e| StorageError::io(format!("cannot touch {}", local.display()), e))
}
