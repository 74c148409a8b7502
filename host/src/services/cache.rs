//! The response cache: successful answers kept in SQLite under the hash of
//! the canonical request and the endpoint's identity (kind and URL, never the
//! key), so an identical request is answered without a call.

use crate::context::{Context, Contextual};
use crate::hashing;
use crate::services::cost;
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

/// A request's place in the cache, worked out once per request: the lookup
/// and the write of its answer both need it, and it parses and hashes the
/// whole body.
pub struct CacheSlot {
    /// The endpoint's kind and URL, and the request as canonical JSON (so
    /// key order and spacing do not matter), hashed.
    key: String,
    /// The request samples: another call could answer differently.
    sampled: bool,
}

impl CacheSlot {
    pub fn of(endpoint_identity: &str, request: &str) -> Self {
        let parsed = serde_json::from_str::<serde_json::Value>(request).ok();
        let canonical = hashing::parsed_json_sha256(parsed.as_ref(), request);
        Self {
            key: hashing::sha256_hex(format!("{endpoint_identity}\n{canonical}")),
            sampled: parsed.as_ref().is_none_or(cost::samples),
        }
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn sampled(&self) -> bool {
        self.sampled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_found_by_an_equal_request_at_the_same_endpoint_only() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ResponseCache::open(&dir.path().join("c.sqlite")).unwrap();
        let a = CacheSlot::of("openai https://x/v1", r#"{"model":"m","temperature":0}"#);
        cache
            .put(a.key(), "openai https://x/v1", "answer", false, Some(0.5))
            .unwrap();
        let same = CacheSlot::of(
            "openai https://x/v1",
            r#"{ "temperature": 0, "model": "m" }"#,
        );
        assert_eq!(
            cache.get(same.key()).unwrap(),
            Some(("answer".into(), Some(0.5)))
        );
        let elsewhere = CacheSlot::of("openai https://y/v1", r#"{"model":"m","temperature":0}"#);
        assert_eq!(cache.get(elsewhere.key()).unwrap(), None);
        assert_eq!(cache.stats().unwrap().entries, 1);
        assert_eq!(cache.clear().unwrap(), 1);
        assert_eq!(cache.get(a.key()).unwrap(), None);
    }

    #[test]
    fn a_slot_knows_whether_its_request_samples() {
        let slot = |body| CacheSlot::of("openai https://x/v1", body).sampled();
        assert!(!slot(r#"{"model":"m","temperature":0}"#));
        assert!(slot(r#"{"model":"m","temperature":0.7}"#));
        assert!(slot(r#"{"model":"m"}"#), "the provider's default samples");
        assert!(slot("not json"));
    }

    #[test]
    fn a_body_that_is_not_json_is_keyed_by_its_text() {
        let a = CacheSlot::of("openai https://x/v1", "not json");
        let b = CacheSlot::of("openai https://x/v1", "not  json");
        assert_ne!(a.key(), b.key());
        assert_eq!(
            a.key(),
            CacheSlot::of("openai https://x/v1", "not json").key()
        );
    }
}
