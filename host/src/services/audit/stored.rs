//! How hashes and bodies are laid out on disk since schema 7. Every row of a
//! run records several hashes and several bodies, so their form decides the
//! size of the database. A SHA-256 is kept as its 32 bytes rather than 64 hex
//! digits. Bodies are kept by row (`row_payloads`): those a row recorded in
//! one transaction go into one zstd frame, compressed together against a
//! built-in dictionary of LLM API JSON, so that a request, its answer and the
//! node output that repeats both cost little more than what differs. A body
//! keyed by its hash in a table of its own cost about five times as much:
//! two copies of a random 32-byte key (table and index), B-tree pages left a
//! third empty by inserts in random order, and each body compressed alone.
//! What is read back is what was written: the hex text of the hash, the
//! body's text.

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, Value, ValueRef};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

/// The vocabulary of chat requests and answers (OpenAI, Azure OpenAI,
/// Anthropic) and of the rows the `llm` guest writes. Bodies of a few
/// hundred bytes share little with each other inside one frame; with this
/// as history they compress to about a third (AUDIT.md). Frames name no
/// dictionary: one that ever replaces it must be a zstd dictionary with its
/// own id, so that these frames still read with this one.
const DICTIONARY: &[u8] = include_bytes!("payloads.dict");

/// A row's bodies (about 1 KB) come out 8 % smaller at 5 than at 3, for
/// about 2 µs more; above 5 they hardly shrink further.
const LEVEL: i32 = 5;

static ENCODER: LazyLock<zstd::dict::EncoderDictionary<'static>> =
    LazyLock::new(|| zstd::dict::EncoderDictionary::copy(DICTIONARY, LEVEL));
static DECODER: LazyLock<zstd::dict::DecoderDictionary<'static>> =
    LazyLock::new(|| zstd::dict::DecoderDictionary::copy(DICTIONARY));

thread_local! {
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

/// A hash as a query parameter: the 32 bytes of a SHA-256 in lowercase hex
/// (every hash weir computes), any other text as it is, so that what is read
/// back is exactly what was given.
pub struct Hash<'a>(pub &'a str);

impl ToSql for Hash<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match sha256_bytes(self.0) {
            Some(bytes) => ToSqlOutput::Owned(Value::Blob(bytes.to_vec())),
            None => ToSqlOutput::Borrowed(ValueRef::Text(self.0.as_bytes())),
        })
    }
}

fn sha256_bytes(text: &str) -> Option<[u8; 32]> {
    let digits = text.as_bytes();
    if digits.len() != 64
        || !digits
            .iter()
            .all(|d| matches!(d, b'0'..=b'9' | b'a'..=b'f'))
    {
        return None;
    }
    let mut bytes = [0; 32];
    hex::decode_to_slice(digits, &mut bytes).ok()?;
    Some(bytes)
}

/// A hash column read back as hex text, whichever form it was kept in (a
/// database older than schema 7, read as it is, holds the text).
pub struct HashText(pub String);

impl FromSql for HashText {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        match value {
            ValueRef::Blob(bytes) => Ok(Self(hex::encode(bytes))),
            ValueRef::Text(text) => Ok(Self(
                std::str::from_utf8(text)
                    .map_err(|e| FromSqlError::Other(Box::new(e)))?
                    .to_string(),
            )),
            _ => Err(FromSqlError::InvalidType),
        }
    }
}

/// The same test in SQL, for migrations and merges: `column` as the 32-byte
/// form when it holds a SHA-256 as lowercase hex, else unchanged.
pub fn hex_to_blob_sql(column: &str) -> String {
    format!(
        "CASE WHEN typeof({column}) = 'text' AND length({column}) = 64 \
         AND NOT {column} GLOB '*[^0-9a-f]*' THEN unhex({column}) ELSE {column} END"
    )
}

/// What a body is found by among its row's: the first 2 bytes of its
/// SHA-256. A row records a handful of bodies, so this picks one out, and
/// the body's own hash then confirms it: more bytes would cost more than
/// hashing the few bodies that share them.
type Key = [u8; 2];

/// The first bytes of every zstd frame, left out of the stored parts.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

fn full_hash(sha256: &str) -> [u8; 32] {
    sha256_bytes(sha256).unwrap_or_else(|| {
        use sha2::Digest;
        sha2::Sha256::digest(sha256.as_bytes()).into()
    })
}

fn key(sha256: &str) -> Key {
    let full = full_hash(sha256);
    [full[0], full[1]]
}

/// Whether `body` is the one kept under `sha256`, whose key it shares. Every
/// body weir keeps is hashed so (canonical JSON, or the text that does not
/// parse); a hash it did not compute itself can only be told by the key.
fn is_body_of(body: &str, sha256: &str) -> bool {
    sha256_bytes(sha256).is_none()
        || crate::hashing::sha256_hex(body) == sha256
        || crate::hashing::json_text_sha256(body) == sha256
}

fn push_entry(entries: &mut Vec<u8>, key: Key, body: &str) {
    entries.extend_from_slice(&key);
    let mut len = body.len() as u64;
    loop {
        let byte = (len & 0x7f) as u8;
        len >>= 7;
        if len == 0 {
            entries.push(byte);
            break;
        }
        entries.push(byte | 0x80);
    }
    entries.extend_from_slice(body.as_bytes());
}

/// Source rows held at most: rows that wait long (on a provider batch, by
/// the hundred thousand) have theirs written alone rather than kept in
/// memory all that time.
const HELD_ROWS: usize = 8192;

/// Rows whose body hashes are remembered at most. Past it the oldest row
/// forgets them: should it record one of those bodies again, the body is
/// stored twice, which costs bytes on disk rather than memory for every
/// row waiting on a provider batch.
const KEPT_ROWS: usize = 8192;

/// Gathers on the writer thread the bodies each row records during one
/// transaction, and writes them, compressed together, as that transaction's
/// part of the row.
pub struct Bundler {
    compressor: zstd::bulk::Compressor<'static>,
    /// Entries by row, to write when the transaction commits.
    pending: BTreeMap<u64, Vec<u8>>,
    /// Source rows waiting for their row's next bodies. Alone, a source row
    /// hardly compresses; the node input, request and output that follow
    /// repeat it. A process killed meanwhile loses it with the row, which
    /// has no outcome then and is read again by the resume.
    held: HashMap<u64, Vec<u8>>,
    /// Hashes of the bodies kept for each row not ended yet: node k + 1
    /// receives what node k returned, and a row may send a request twice.
    kept: BTreeMap<u64, Vec<[u8; 32]>>,
}

impl Bundler {
    pub fn new() -> std::io::Result<Self> {
        let mut compressor = zstd::bulk::Compressor::with_prepared_dictionary(&ENCODER)?;
        // The dictionary is raw content and has no id; naming none in every
        // frame saves its bytes.
        compressor.set_parameter(zstd::zstd_safe::CParameter::DictIdFlag(false))?;
        compressor.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(false))?;
        Ok(Self {
            compressor,
            pending: BTreeMap::new(),
            held: HashMap::new(),
            kept: BTreeMap::new(),
        })
    }

    /// Whether `sha256` is new for the row, remembering it.
    fn first_time(&mut self, row_index: u64, sha256: &str) -> bool {
        let full = full_hash(sha256);
        if self.kept.len() >= KEPT_ROWS && !self.kept.contains_key(&row_index) {
            self.kept.pop_first();
        }
        let kept = self.kept.entry(row_index).or_default();
        if kept.contains(&full) {
            return false;
        }
        kept.push(full);
        true
    }

    /// Keeps `body` with row `row_index`, once per row, in this transaction.
    pub fn add(&mut self, row_index: u64, sha256: &str, body: &str) {
        if !self.first_time(row_index, sha256) {
            return;
        }
        let entries = self.pending.entry(row_index).or_default();
        if let Some(source) = self.held.remove(&row_index) {
            entries.extend_from_slice(&source);
        }
        push_entry(entries, key(sha256), body);
    }

    /// Keeps a source row's body, to write with the row's next bodies.
    pub fn add_source(&mut self, row_index: u64, sha256: &str, body: &str) {
        if !self.first_time(row_index, sha256) {
            return;
        }
        if self.held.len() >= HELD_ROWS {
            self.release();
        }
        let entries = match self.pending.get_mut(&row_index) {
            Some(entries) => entries,
            None => self.held.entry(row_index).or_default(),
        };
        push_entry(entries, key(sha256), body);
    }

    /// The row has its outcome: what it holds is written with it, and no
    /// more bodies will come for it.
    pub fn forget(&mut self, row_index: u64) {
        self.kept.remove(&row_index);
        if let Some(source) = self.held.remove(&row_index) {
            self.pending
                .entry(row_index)
                .or_default()
                .extend_from_slice(&source);
        }
    }

    /// Everything held is written with the next commit.
    pub fn release(&mut self) {
        for (row_index, source) in self.held.drain() {
            self.pending
                .entry(row_index)
                .or_default()
                .extend_from_slice(&source);
        }
    }

    pub fn is_idle(&self) -> bool {
        self.pending.is_empty() && self.held.is_empty()
    }

    /// Writes what rows gathered, in the transaction about to commit.
    pub fn write(&mut self, tx: &rusqlite::Transaction, run: i64) -> rusqlite::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut insert = tx.prepare_cached(
            "INSERT INTO row_payloads VALUES (?1, ?2,
                 (SELECT coalesce(max(part) + 1, 0) FROM row_payloads
                  WHERE run_id = ?1 AND row_index = ?2), ?3)",
        )?;
        for (row_index, entries) in std::mem::take(&mut self.pending) {
            let frame = self
                .compressor
                .compress(&entries)
                .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
            let part = frame.strip_prefix(&ZSTD_MAGIC).unwrap_or(&frame);
            insert.execute(rusqlite::params![run, row_index, part])?;
        }
        Ok(())
    }
}

/// Every body a part holds, with its key.
fn entries(frame: &[u8]) -> std::io::Result<Vec<(Key, String)>> {
    let bytes = unpack(frame)?;
    let bad = || std::io::Error::other("a part of `row_payloads` is cut short");
    let mut entries = Vec::new();
    let mut rest = bytes.as_slice();
    while !rest.is_empty() {
        let (key, tail) = rest.split_first_chunk::<2>().ok_or_else(bad)?;
        let mut len = 0u64;
        let mut shift = 0;
        let mut tail = tail;
        loop {
            let (&byte, after) = tail.split_first().ok_or_else(bad)?;
            tail = after;
            len |= u64::from(byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                break;
            }
        }
        let len = usize::try_from(len).map_err(|_| bad())?;
        let body = tail.get(..len).ok_or_else(bad)?;
        entries.push((*key, String::from_utf8_lossy(body).into_owned()));
        rest = &tail[len..];
    }
    Ok(entries)
}

fn io_error(e: std::io::Error) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Blob, Box::new(e))
}

/// A body row `row_index` recorded under `sha256`. `schema_7`: the database
/// has `row_payloads`, and keys `payloads` (the bodies an older weir kept)
/// by the hash's bytes.
pub fn body(
    conn: &rusqlite::Connection,
    run_id: i64,
    row_index: u64,
    sha256: &str,
    schema_7: bool,
) -> rusqlite::Result<Option<String>> {
    use rusqlite::OptionalExtension;
    if schema_7 {
        let wanted = key(sha256);
        let mut parts = conn.prepare_cached(
            "SELECT bodies FROM row_payloads WHERE run_id = ?1 AND row_index = ?2 ORDER BY part",
        )?;
        let mut rows = parts.query(rusqlite::params![run_id, row_index])?;
        while let Some(row) = rows.next()? {
            let frame: Vec<u8> = row.get(0)?;
            let found = entries(&frame)
                .map_err(io_error)?
                .into_iter()
                .find(|(key, body)| *key == wanted && is_body_of(body, sha256));
            if let Some((_, body)) = found {
                return Ok(Some(body));
            }
        }
    }
    let mut legacy =
        conn.prepare_cached("SELECT body FROM payloads WHERE run_id = ?1 AND sha256 = ?2")?;
    let found = if schema_7 {
        legacy.query_row(rusqlite::params![run_id, Hash(sha256)], |r| {
            r.get::<_, String>(0)
        })
    } else {
        legacy.query_row(rusqlite::params![run_id, sha256], |r| r.get::<_, String>(0))
    };
    found.optional()
}

/// Every body kept for the run, in no particular order.
pub fn bodies(conn: &rusqlite::Connection, run_id: i64) -> rusqlite::Result<Vec<String>> {
    let mut bodies: Vec<String> = conn
        .prepare("SELECT body FROM payloads WHERE run_id = ?1")?
        .query_map([run_id], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut parts = conn.prepare("SELECT bodies FROM row_payloads WHERE run_id = ?1")?;
    let mut rows = parts.query([run_id])?;
    while let Some(row) = rows.next()? {
        let frame: Vec<u8> = row.get(0)?;
        let part = entries(&frame).map_err(io_error)?;
        bodies.extend(part.into_iter().map(|(_, body)| body));
    }
    Ok(bodies)
}

fn unpack(part: &[u8]) -> std::io::Result<Vec<u8>> {
    let frame = [&ZSTD_MAGIC[..], part].concat();
    let frame = frame.as_slice();
    let size = zstd::zstd_safe::get_frame_content_size(frame)
        .ok()
        .flatten()
        .ok_or_else(|| std::io::Error::other("a payload's zstd frame does not say its size"))?;
    DECOMPRESSOR.with(|slot| {
        let mut slot = slot.borrow_mut();
        let decompressor = match slot.as_mut() {
            Some(d) => d,
            None => slot.insert(zstd::bulk::Decompressor::with_prepared_dictionary(
                &DECODER,
            )?),
        };
        decompressor.decompress(frame, size as usize)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    const SHA: &str = "b279e75d19e6e4b297b4c6d25486743007711c5c910a102a28e1f95c76f07b01";

    #[test]
    fn hashes_read_back_as_written() {
        let conn = Connection::open_in_memory().unwrap();
        for hash in [SHA, "h0", "", &SHA.to_uppercase()] {
            let (back, kind): (HashText, String) = conn
                .query_row("SELECT ?1, typeof(?1)", [Hash(hash)], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .unwrap();
            assert_eq!(back.0, hash);
            assert_eq!(kind, if hash == SHA { "blob" } else { "text" });
        }
        let converted: String = conn
            .query_row(
                &format!("SELECT hex({}) FROM (SELECT ?1 AS h)", hex_to_blob_sql("h")),
                [SHA],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(converted, SHA.to_uppercase());
    }

    #[test]
    fn bodies_are_found_by_row_and_hash_once_each() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(include_str!("schema.sql")).unwrap();
        let mut bundler = Bundler::new().unwrap();
        let request =
            r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Review: fine"}]}"#;
        let request_sha = crate::hashing::json_text_sha256(request);
        let long = format!("\"{}\"", "é".repeat(300));
        let long_sha = crate::hashing::json_text_sha256(&long);
        let source_sha = crate::hashing::json_text_sha256("{}");
        let tx = conn.transaction().unwrap();
        bundler.add_source(3, &source_sha, "{}");
        bundler.add(3, &request_sha, request);
        bundler.add(3, &long_sha, &long);
        bundler.add_source(4, "h0", "[]");
        bundler.write(&tx, 1).unwrap();
        // Kept once per row, in whichever part first had it.
        bundler.add(3, &request_sha, request);
        bundler.add(3, "h1", "[1]");
        bundler.forget(4);
        bundler.write(&tx, 1).unwrap();
        tx.commit().unwrap();
        let parts: Vec<(u64, i64)> = conn
            .prepare("SELECT row_index, part FROM row_payloads")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        // Row 4's source row waited for its end.
        assert_eq!(parts, [(3, 0), (3, 1), (4, 0)]);
        let found = |row, sha: &str| body(&conn, 1, row, sha, true).unwrap();
        assert_eq!(found(3, &source_sha).as_deref(), Some("{}"));
        // A body under another hash is not taken for it.
        assert_eq!(found(3, SHA), None);
        assert_eq!(found(3, &request_sha).as_deref(), Some(request));
        assert_eq!(found(3, &long_sha), Some(long.clone()));
        assert_eq!(found(3, "h1").as_deref(), Some("[1]"));
        assert_eq!(found(4, "h0").as_deref(), Some("[]"));
        assert_eq!(found(5, SHA), None);
        assert_eq!(found(4, &request_sha), None);
        assert_eq!(bodies(&conn, 1).unwrap().len(), 5);
    }

    #[test]
    fn a_body_is_told_from_another_with_the_same_key() {
        // Two documents whose hashes start alike, as a few in 65,536 pairs do.
        let mut seen = HashMap::new();
        let (a, b) = (0..)
            .map(|i: u64| i.to_string())
            .find_map(|text| {
                let key = key(&crate::hashing::json_text_sha256(&text));
                seen.insert(key, text.clone()).map(|other| (other, text))
            })
            .unwrap();
        let (sha_a, sha_b) = (
            crate::hashing::json_text_sha256(&a),
            crate::hashing::json_text_sha256(&b),
        );
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(include_str!("schema.sql")).unwrap();
        let mut bundler = Bundler::new().unwrap();
        let tx = conn.transaction().unwrap();
        bundler.add(0, &sha_a, &a);
        bundler.add(1, &sha_a, &a);
        bundler.add(1, &sha_b, &b);
        bundler.write(&tx, 1).unwrap();
        tx.commit().unwrap();
        assert_eq!(body(&conn, 1, 0, &sha_b, true).unwrap(), None);
        assert_eq!(body(&conn, 1, 1, &sha_a, true).unwrap(), Some(a));
        assert_eq!(body(&conn, 1, 1, &sha_b, true).unwrap(), Some(b));
    }
}
