//! Files on object storage (`s3://`, `gs://`, `az://`). Each has a local
//! stand-in under a staging folder, at a path that mirrors its URL
//! (`s3://bucket/out.csv` → `<staging>/s3/bucket/out.csv`): the run reads and
//! writes the stand-in as it would any local file, so resuming, sharding and
//! merging work unchanged, and the host copies stand-ins from and to their
//! objects around a run. Because the mapping is one-to-one, a part file or a
//! part audit database derived from a stand-in stands in for the part's URL.

use std::path::{Component, Path, PathBuf};

/// The URL schemes that name objects rather than local files.
pub const SCHEMES: &[&str] = &["s3", "gs", "az"];

/// Overrides where stand-ins live, e.g. on a volume that outlives a pod so
/// that a rescheduled shard finds its partial files and audit database.
pub const STAGING_ENV: &str = "WEIR_STAGING_DIR";

/// The staging folder's name beside a pipeline file, by default.
pub const STAGING_DIR_NAME: &str = ".weir-staging";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staging {
    root: PathBuf,
}

impl Staging {
    pub fn new(root: PathBuf) -> Self {
        Self { root }
    }

    /// `$WEIR_STAGING_DIR`, else `.weir-staging` in `dir` (the pipeline
    /// file's folder): a place every shard and `weir merge` agree on.
    pub fn for_dir(dir: &Path) -> Self {
        match std::env::var_os(STAGING_ENV).filter(|v| !v.is_empty()) {
            Some(root) => Self::new(PathBuf::from(root)),
            None => Self::new(dir.join(STAGING_DIR_NAME)),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where a path as a pipeline file (or the command line) writes it is
    /// read and written: a URL's stand-in, a `file://` path, or `text`
    /// against `dir`.
    pub fn place(&self, dir: &Path, text: &str) -> Result<PathBuf, String> {
        if let Some(local) = text.strip_prefix("file://") {
            return Ok(dir.join(local));
        }
        let Some((scheme, rest)) = split_url(text) else {
            return Ok(dir.join(text));
        };
        let mut path = self.root.join(scheme);
        let mut segments = rest.split('/').filter(|s| !s.is_empty() && *s != ".");
        match segments.next() {
            Some(bucket) if bucket != ".." => path.push(bucket),
            _ => return Err(format!("`{text}` names no bucket or container")),
        }
        let mut key = false;
        for segment in segments {
            if segment == ".." {
                return Err(format!("`{text}`: an object key cannot hold `..`"));
            }
            path.push(segment);
            key = true;
        }
        if !key {
            return Err(format!("`{text}` names a bucket but no object in it"));
        }
        Ok(path)
    }

    /// The URL `path` stands in for, if it is a stand-in.
    pub fn url_of(&self, path: &Path) -> Option<String> {
        let rest = path.strip_prefix(&self.root).ok()?;
        let mut parts = rest.components().map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        });
        let scheme = parts.next()??;
        if !SCHEMES.contains(&scheme) {
            return None;
        }
        let segments: Option<Vec<&str>> = parts.collect();
        let segments = segments?;
        if segments.len() < 2 {
            return None;
        }
        Some(format!("{scheme}://{}", segments.join("/")))
    }

    /// `path` as messages name it: its URL for a stand-in.
    pub fn shown(&self, path: &Path) -> String {
        self.url_of(path)
            .unwrap_or_else(|| path.display().to_string())
    }
}

/// Whether `text` names an object rather than a local file.
pub fn is_url(text: &str) -> bool {
    split_url(text).is_some()
}

fn split_url(text: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = text.split_once("://")?;
    SCHEMES.contains(&scheme).then_some((scheme, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_and_its_stand_in_map_both_ways() {
        let staging = Staging::new(PathBuf::from("/stage"));
        let dir = Path::new("/pipes");
        let local = staging.place(dir, "s3://bucket/runs/out.csv").unwrap();
        assert_eq!(local, Path::new("/stage/s3/bucket/runs/out.csv"));
        assert_eq!(
            staging.url_of(&local).as_deref(),
            Some("s3://bucket/runs/out.csv")
        );
        let part = crate::config::part_path(&local, 1, 4);
        assert_eq!(
            staging.url_of(&part).as_deref(),
            Some("s3://bucket/runs/out.part-1-of-4.csv")
        );
        assert_eq!(
            staging.place(dir, "out.csv").unwrap(),
            Path::new("/pipes/out.csv")
        );
        assert_eq!(
            staging.place(dir, "file:///tmp/x.csv").unwrap(),
            Path::new("/tmp/x.csv")
        );
        assert_eq!(staging.url_of(Path::new("/pipes/out.csv")), None);
        assert_eq!(staging.shown(Path::new("/pipes/out.csv")), "/pipes/out.csv");
        assert_eq!(
            staging.url_of(Path::new("/stage/gs/b/k")).as_deref(),
            Some("gs://b/k")
        );
        assert_eq!(staging.url_of(Path::new("/stage/http/b/k")), None);
    }

    #[test]
    fn urls_that_name_no_object_are_refused() {
        let staging = Staging::new(PathBuf::from("/stage"));
        for bad in [
            "s3://",
            "s3://bucket",
            "s3://bucket/",
            "gs://b/../x",
            "az://../k",
        ] {
            assert!(staging.place(Path::new("."), bad).is_err(), "{bad}");
        }
        assert!(is_url("az://c/k") && !is_url("http://x/y") && !is_url("a/b.csv"));
    }
}
