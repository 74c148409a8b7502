//! One shard of a run spread over several processes or machines: shard I of
//! N takes a contiguous part of the source rows and writes its own part of
//! each sink and its own audit database; `weir merge` joins them.

use super::ConfigError;
use super::Pipeline;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// From 0, as Kubernetes' JOB_COMPLETION_INDEX and Slurm's array index.
    pub index: u32,
    pub count: u32,
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let parsed = text
            .split_once('/')
            .and_then(|(i, n)| Some((i.trim().parse().ok()?, n.trim().parse().ok()?)));
        match parsed {
            Some((index, count)) if count > 0 && index < count => Ok(Self { index, count }),
            _ => Err(format!(
                "`{text}` is not a shard: give I/N with 0 <= I < N, e.g. 0/4"
            )),
        }
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// The source rows this shard takes, of `total`: contiguous, and every
    /// row in exactly one shard.
    pub fn rows(&self, total: u64) -> std::ops::Range<u64> {
        let at = |i: u32| (total as u128 * i as u128 / self.count as u128) as u64;
        at(self.index)..at(self.index + 1)
    }

    /// `out.csv` → `out.part-2-of-4.csv`.
    pub fn part_path(&self, path: &Path) -> PathBuf {
        part_path(path, self.index, self.count)
    }
}

pub fn part_path(path: &Path, index: u32, count: u32) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let name = match path.extension() {
        Some(ext) => format!("{stem}.part-{index}-of-{count}.{}", ext.to_string_lossy()),
        None => format!("{stem}.part-{index}-of-{count}"),
    };
    path.with_file_name(name)
}

impl Pipeline {
    /// Makes this pipeline shard `shard`: its sinks, on_error sinks and
    /// audit database become part files, and each endpoint's rate limits
    /// (set, and reported by the provider) its share, unless the endpoint
    /// sets them per shard. The share is one over the shards running at
    /// once: `at_once` when the scheduler runs fewer than all (a Kubernetes
    /// Job's `parallelism`, a Slurm array's `%K`), else all of them;
    /// `at_once` is from 1 to the shard count.
    pub fn into_shard(mut self, shard: Shard, at_once: Option<u32>) -> Result<Self, ConfigError> {
        if !self.source.is_regular_file() {
            return Err(ConfigError::in_file(
                &self.file.path,
                format!(
                    "a sharded run needs a source it can read more than once, and {} is not a \
                     regular file",
                    self.source.path.display()
                ),
            ));
        }
        for sink in self.sinks.iter_mut().chain(self.error_sinks.iter_mut()) {
            sink.path = shard.part_path(&sink.path);
        }
        self.audit_path = shard.part_path(&self.audit_path);
        self.configured_audit_path = shard.part_path(&self.configured_audit_path);
        let sharing = at_once.unwrap_or(shard.count);
        for endpoint in self.endpoints.values_mut() {
            if endpoint.rate_limits_per_shard {
                continue;
            }
            let share = |limit: u32| limit.div_ceil(sharing).max(1);
            endpoint.requests_per_minute = endpoint.requests_per_minute.map(share);
            endpoint.tokens_per_minute = endpoint.tokens_per_minute.map(share);
            endpoint.shards_sharing_windows = sharing;
        }
        self.shard = Some(shard);
        self.shards_at_once = at_once;
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_cover_every_row_once_in_order() {
        for total in [0, 1, 7, 100, 1001] {
            for count in 1..=5 {
                let mut next = 0;
                for index in 0..count {
                    let rows = Shard { index, count }.rows(total);
                    assert_eq!(rows.start, next);
                    next = rows.end;
                }
                assert_eq!(next, total);
            }
        }
        assert!("4/4".parse::<Shard>().is_err());
        assert!("x".parse::<Shard>().is_err());
        assert_eq!(
            "1/4".parse::<Shard>().unwrap(),
            Shard { index: 1, count: 4 }
        );
    }

    #[test]
    fn part_files_keep_their_extension() {
        let shard = Shard { index: 2, count: 4 };
        assert_eq!(
            shard.part_path(Path::new("out/a.csv")),
            Path::new("out/a.part-2-of-4.csv")
        );
        assert_eq!(shard.part_path(Path::new("a")), Path::new("a.part-2-of-4"));
    }
}
