//! The log's schema, and what a connection gets before its first use: the prepared
//! statement cache, the tables where they are missing, and the migration of a log an older
//! version wrote (schema 2 had no `after_ids`). A log already at this schema is opened
//! without a write.

use std::path::PathBuf;

use rusqlite::Connection;

use super::warm::Handle;
use super::{IntentLog, LogError};

/// Schema version in `PRAGMA user_version` (2: the `nonces` table; 3: `after_ids`, the
/// intents a step comes after; 4: `triggers`, `webhook_events` and `webhook_endpoints`, what
/// receiving webhooks keeps).
const SCHEMA_VERSION: i64 = 4;
/// Prepared statements each connection keeps (rusqlite keeps 16 unless told).
const STATEMENTS_CACHED: usize = 64;

impl IntentLog {
    /// Creates the schema where it is missing.
    pub(super) fn ready(
        conn: Connection,
        path: PathBuf,
        home: Option<String>,
    ) -> Result<IntentLog, LogError> {
        let err = |source| LogError::Sqlite { path: path.clone(), source };
        // Every statement of the log stays prepared: a pass runs the same dozen or so.
        conn.set_prepared_statement_cache_capacity(STATEMENTS_CACHED);
        // A log already at this schema is opened without writing: another worker may hold the
        // write lock for a long time (stopped by SIGSTOP in the middle of a transaction), and
        // a worker starting beside it must not wait on that lock just to open the file.
        let version: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0)).map_err(err)?;
        if version == SCHEMA_VERSION {
            return Ok(IntentLog::with(Handle::new(conn, home), path));
        }
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS intents (
                 seq INTEGER PRIMARY KEY AUTOINCREMENT,
                 id TEXT NOT NULL UNIQUE,
                 action TEXT NOT NULL,
                 params TEXT NOT NULL,
                 params_hash TEXT NOT NULL,
                 idem_key TEXT NOT NULL,
                 state TEXT NOT NULL,
                 attempts INTEGER NOT NULL,
                 replaces TEXT,
                 evidence TEXT NOT NULL,
                 maybe_executed INTEGER NOT NULL,
                 lease_owner TEXT,
                 lease_epoch INTEGER NOT NULL,
                 lease_until_ms INTEGER NOT NULL,
                 version INTEGER NOT NULL,
                 created_ms INTEGER NOT NULL,
                 updated_ms INTEGER NOT NULL,
                 key_first_sent_ms INTEGER,
                 last_sent_ms INTEGER,
                 after_ids TEXT NOT NULL DEFAULT '[]'
             );
             CREATE INDEX IF NOT EXISTS intents_state ON intents(state);
             CREATE TABLE IF NOT EXISTS nonces (
                 account TEXT NOT NULL,
                 nonce INTEGER NOT NULL,
                 intent_id TEXT NOT NULL,
                 PRIMARY KEY (account, nonce)
             );
             CREATE TABLE IF NOT EXISTS history (
                 seq INTEGER PRIMARY KEY AUTOINCREMENT,
                 intent_id TEXT NOT NULL,
                 at_ms INTEGER NOT NULL,
                 from_state TEXT,
                 to_state TEXT NOT NULL,
                 owner TEXT,
                 epoch INTEGER NOT NULL,
                 note TEXT
             );
             CREATE TABLE IF NOT EXISTS triggers (
                 intent_id TEXT PRIMARY KEY,
                 event_type TEXT NOT NULL,
                 object_id TEXT NOT NULL,
                 proposal TEXT NOT NULL
             );
             CREATE TABLE IF NOT EXISTS webhook_events (
                 event_id TEXT PRIMARY KEY,
                 event_type TEXT NOT NULL,
                 object_id TEXT NOT NULL,
                 received_ms INTEGER NOT NULL,
                 started_ms INTEGER
             );
             CREATE TABLE IF NOT EXISTS webhook_endpoints (
                 worker_id TEXT PRIMARY KEY,
                 endpoint_id TEXT NOT NULL,
                 secret TEXT NOT NULL,
                 url TEXT NOT NULL
             );",
        )
        .map_err(err)?;
        // A log of schema 2 has the table without `after_ids`: every intent in it comes
        // after none, which is what the column's default says.
        let has_after = conn
            .prepare("SELECT 1 FROM pragma_table_info('intents') WHERE name = 'after_ids'")
            .and_then(|mut stmt| stmt.exists([]))
            .map_err(err)?;
        if !has_after {
            conn.execute_batch("ALTER TABLE intents ADD COLUMN after_ids TEXT NOT NULL DEFAULT '[]'")
                .map_err(err)?;
        }
        conn.pragma_update(None, "user_version", SCHEMA_VERSION).map_err(err)?;
        Ok(IntentLog::with(Handle::new(conn, home), path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::Durability;
    use crate::log::testing::transfer;
    use crate::model::Evidence;

    /// A log written before workflows (schema 2, no `after_ids`) opens, gains the column,
    /// and reads its rows as intents that come after none.
    #[test]
    fn a_log_of_schema_2_gains_after_ids_and_keeps_its_rows() {
        let dir = std::env::temp_dir().join(format!("twice-log-schema2-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("intents.sqlite");
        {
            let mut log = IntentLog::open(&path, Durability::Normal).unwrap();
            let mut row = transfer("old", 0);
            row.evidence = Evidence::default();
            log.record(&row).unwrap();
            // Back to how schema 2 stored it.
            log.conn
                .execute_batch("ALTER TABLE intents DROP COLUMN after_ids; PRAGMA user_version = 2")
                .unwrap();
        }
        let mut log = IntentLog::open(&path, Durability::Normal).unwrap();
        let version: i64 = log.conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        assert_eq!(log.get("old").unwrap().unwrap().after, Vec::<String>::new());
        let mut step = transfer("step", 1);
        step.evidence = Evidence::default();
        step.after = vec!["old".into()];
        log.record(&step).unwrap();
        assert_eq!(log.get("step").unwrap().unwrap().after, ["old"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
