//! Answers a resumed run's requests from the responses its earlier segments
//! recorded, so a call that was paid for is never made twice.

use super::stored::{self, HashText};
use rusqlite::{Connection, OpenFlags};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::AuditError;

type Result<T, E = AuditError> = std::result::Result<T, E>;

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
                   AND (EXISTS (SELECT 1 FROM row_payloads p
                                WHERE p.run_id = c.run_id AND p.row_index = c.row_index)
                        OR EXISTS (SELECT 1 FROM payloads p
                                   WHERE p.run_id = c.run_id AND p.sha256 = c.response_sha256))",
            )?
            .query_map([run_id], |r| {
                let request = r.get::<_, HashText>(3)?.0;
                let response = r.get::<_, HashText>(4)?.0;
                Ok(((r.get(0)?, r.get(1)?, r.get(2)?, request), response))
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
        // Opened after the run's own connection brought it to schema 7.
        let body = stored::body(&conn, self.run_id, row_index, response_sha256, true).ok()?;
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
