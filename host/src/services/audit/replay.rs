//! Answers a resumed run's requests from the responses its earlier segments
//! recorded, so a call that was paid for is never made twice.

use anyhow::Result;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// (row, node, endpoint, request hash)
type Key = (u64, usize, String, String);

pub struct Replay {
    run_id: i64,
    /// Hash of the successful response to each request, by the row and node
    /// that sent it: an answer is only ever replayed to the row it was for,
    /// even where two rows send the same request.
    answers: HashMap<Key, String>,
    // Bodies are read when needed: all of them could be large.
    conn: Mutex<Connection>,
    used: AtomicU64,
}

impl Replay {
    pub fn load(path: &Path, run_id: i64) -> Result<Self> {
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        let answers = conn
            .prepare(
                "SELECT c.row_index, c.node_id, c.endpoint, c.request_sha256, c.response_sha256
                 FROM calls c
                 WHERE c.run_id = ?1 AND c.status BETWEEN 200 AND 299 AND c.error IS NULL
                   AND EXISTS (SELECT 1 FROM payloads p
                               WHERE p.run_id = c.run_id AND p.sha256 = c.response_sha256)",
            )?
            .query_map([run_id], |r| {
                Ok(((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?), r.get(4)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(Self {
            run_id,
            answers,
            conn: Mutex::new(conn),
            used: AtomicU64::new(0),
        })
    }

    /// The recorded response to this request of this row at this node, if
    /// there is one: its hash and body.
    pub fn answer(
        &self,
        row_index: u64,
        node_id: usize,
        endpoint: &str,
        request_sha256: &str,
    ) -> Option<(String, String)> {
        let key = (
            row_index,
            node_id,
            endpoint.to_string(),
            request_sha256.to_string(),
        );
        let response_sha256 = self.answers.get(&key)?;
        let conn = self.conn.lock().ok()?;
        let body: Option<String> = conn
            .prepare_cached("SELECT body FROM payloads WHERE run_id = ?1 AND sha256 = ?2")
            .ok()?
            .query_row(params![self.run_id, response_sha256], |r| r.get(0))
            .optional()
            .ok()?;
        if body.is_some() {
            self.used.fetch_add(1, Ordering::Relaxed);
        }
        body.map(|b| (response_sha256.clone(), b))
    }

    /// Calls answered from the record so far.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }
}
