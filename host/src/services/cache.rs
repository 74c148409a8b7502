//! The response cache: successful answers kept in SQLite under the hash of
//! the canonical request and the endpoint's identity (kind and URL, never the
//! key), so an identical request is answered without a call.

use crate::context::{Context, Contextual};
use rusqlite::{Connection, OptionalExtension, params};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

type Result<T, E = CacheError> = std::result::Result<T, E>;

/// A response cache that cannot be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error(transparent)]
    SqliteAt(#[from] Contextual<rusqlite::Error>),
    #[error(transparent)]
    IoAt(#[from] Contextual<std::io::Error>),
}

pub struct ResponseCache {
    path: PathBuf,
    conn: Mutex<Connection>,
}

/// What `weir cache stats` shows.
#[derive(Debug, Default)]
pub struct CacheStats {
    pub entries: u64,
    /// Entries whose request samples (temperature above 0): a fresh call
    /// could have answered differently.
    pub sampled: u64,
    pub bytes: u64,
    /// (endpoint, entries), by endpoint.
    pub by_endpoint: Vec<(String, u64)>,
    /// What the cached answers cost when they were first paid for.
    pub cost_usd: f64,
}

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS responses (
    key          TEXT PRIMARY KEY,  -- SHA-256 of the endpoint identity and canonical request
    endpoint     TEXT NOT NULL,     -- kind and URL of the endpoint that answered
    response     TEXT NOT NULL,
    sampled      INTEGER NOT NULL,  -- 1: the request had temperature above 0
    cost_usd     REAL,              -- what the answer cost when it was paid for
    created_at_ms INTEGER NOT NULL
)";

impl ResponseCache {
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create the cache folder {}", dir.display()))?;
        }
        let conn = Connection::open(path)
            .with_context(|| format!("cannot open the response cache {}", path.display()))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.execute_batch(SCHEMA)
            .with_context(|| format!("{} is not a weir response cache", path.display()))?;
        Ok(Self {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The answer kept under `key`, with what it cost when it was paid for.
    pub fn get(&self, key: &str) -> Result<Option<(String, Option<f64>)>> {
        let conn = self.conn.lock().expect("cache lock");
        Ok(conn
            .prepare_cached("SELECT response, cost_usd FROM responses WHERE key = ?1")?
            .query_row([key], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }

    pub fn put(
        &self,
        key: &str,
        endpoint: &str,
        response: &str,
        sampled: bool,
        cost_usd: Option<f64>,
    ) -> Result<()> {
        let conn = self.conn.lock().expect("cache lock");
        conn.prepare_cached("INSERT OR IGNORE INTO responses VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?
            .execute(params![
                key,
                endpoint,
                response,
                sampled,
                cost_usd,
                crate::services::audit::now_ms()
            ])?;
        Ok(())
    }

    pub fn stats(&self) -> Result<CacheStats> {
        let conn = self.conn.lock().expect("cache lock");
        let (entries, sampled, bytes, cost_usd) = conn.query_row(
            "SELECT count(*), coalesce(sum(sampled), 0), coalesce(sum(length(response)), 0),
                    coalesce(sum(cost_usd), 0) FROM responses",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )?;
        let by_endpoint = conn
            .prepare(
                "SELECT endpoint, count(*) FROM responses GROUP BY endpoint ORDER BY endpoint",
            )?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(CacheStats {
            entries,
            sampled,
            bytes,
            by_endpoint,
            cost_usd,
        })
    }

    /// Deletes every entry; returns how many there were.
    pub fn clear(&self) -> Result<u64> {
        let conn = self.conn.lock().expect("cache lock");
        let deleted = conn.execute("DELETE FROM responses", [])?;
        conn.execute_batch("VACUUM")?;
        Ok(deleted as u64)
    }
}

/// The key of a request to an endpoint: the endpoint's kind and URL, and the
/// request as canonical JSON (so key order and spacing do not matter).
pub fn key(endpoint_identity: &str, request: &str) -> String {
    let canonical = crate::hashing::json_text_sha256(request);
    crate::hashing::sha256_hex(format!("{endpoint_identity}\n{canonical}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_found_by_an_equal_request_at_the_same_endpoint_only() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ResponseCache::open(&dir.path().join("c.sqlite")).unwrap();
        let a = key("openai https://x/v1", r#"{"model":"m","temperature":0}"#);
        cache
            .put(&a, "openai https://x/v1", "answer", false, Some(0.5))
            .unwrap();
        let same = key(
            "openai https://x/v1",
            r#"{ "temperature": 0, "model": "m" }"#,
        );
        assert_eq!(
            cache.get(&same).unwrap(),
            Some(("answer".into(), Some(0.5)))
        );
        let elsewhere = key("openai https://y/v1", r#"{"model":"m","temperature":0}"#);
        assert_eq!(cache.get(&elsewhere).unwrap(), None);
        assert_eq!(cache.stats().unwrap().entries, 1);
        assert_eq!(cache.clear().unwrap(), 1);
        assert_eq!(cache.get(&a).unwrap(), None);
    }
}
