//! The durable intent log: one SQLite file in the state directory.
//!
//! Every change is an optimistic, conditional write: a row is read with its `version`, changed
//! in memory, and written back only if the version is still the same. Several writes can go
//! in one transaction (one fsync), which is how a pass over many intents stays cheap. The
//! payload (`params`, and `after_ids`, the intents a step comes after) is written once, at
//! record time, with its hash; no update touches it. The values a step's references resolve
//! to are part of its evidence (`evidence.resolved`), written with the row that marks it
//! `submitted` and carried by every later write of the row.
//!
//! Where each part lives: this file holds the log's types and opens it (WAL, durability, or
//! the sim's in-process `memdb`); `schema` (the tables, and the migration of an older file),
//! `row` (the column list, and an intent to a row and back), `write` (recording, and the
//! conditional writes), `tx` (transactions on statements kept prepared), `transition` (what
//! a write is checked against in debug builds), `query` (the reads, the rows not yet terminal
//! kept between passes, and the rows read by id, kept while the log does not change),
//! `nonces` (the `nonces` table: each signed transfer's nonce, claimed by one intent at most),
//! `webhooks` (the intents an event starts, the events taken, each worker's endpoint) and
//! `warm` (the sim's warm in-memory logs).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::Connection;

use crate::model::Intent;
use vocabulary::State;

mod nonces;
mod query;
mod row;
mod schema;
#[cfg(test)]
mod testing;
mod transition;
mod tx;
mod warm;
mod webhooks;
mod write;

use warm::Handle;
pub use warm::MemoryLog;
pub use webhooks::{Armed, Endpoint, Trigger};

/// How hard SQLite works to make a commit durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// `synchronous=FULL`: a commit survives power loss. The default.
    Full,
    /// `synchronous=NORMAL` in WAL mode: a commit survives a process crash (SIGKILL), and may
    /// be lost on power loss.
    Normal,
}

/// What can go wrong with the log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("intent log {path}: {source}")]
    Sqlite { path: PathBuf, source: rusqlite::Error },
    #[error("intent log {path}: row {id} is unreadable: {problem}")]
    Corrupt { path: PathBuf, id: String, problem: String },
    /// A write that would break an invariant of the log (leave a terminal state, move a lease
    /// epoch back): refused, and nothing of its transaction written.
    #[error("intent log {path}: {problem}; the write was refused")]
    Transition { path: PathBuf, problem: String },
}

/// The result of recording an intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// A new row.
    New(Intent),
    /// The same id with the same payload was recorded before: nothing changed.
    Existing(Intent),
    /// The same id was recorded before with another payload: refused.
    Conflict(Intent),
}

/// One recorded state change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    pub at_ms: u64,
    /// `None` for the recording itself.
    pub from: Option<State>,
    pub to: State,
    /// The lease owner that made the change.
    pub owner: Option<String>,
    pub note: String,
}

/// One conditional write.
#[derive(Debug)]
pub struct Change<'a> {
    pub new: &'a Intent,
    pub expect_version: u64,
    pub from_state: State,
    pub note: Option<&'a str>,
}

/// How long a writer waits for another process's lock before giving up.
const BUSY_TIMEOUT_MS: u64 = 5_000;

/// Turns the log's file to WAL (a setting the file keeps). Workers started at once on a new
/// state directory all ask for it: SQLite answers `SQLITE_BUSY` at once, without waiting
/// for its busy timeout, to every connection but the one that converts the file, so a busy
/// answer is asked again, every 10 ms, until the file is WAL or [`BUSY_TIMEOUT_MS`] has
/// passed.
fn wal(conn: &Connection) -> Result<(), rusqlite::Error> {
    let deadline = std::time::Instant::now() + Duration::from_millis(BUSY_TIMEOUT_MS);
    loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get::<_, String>(0)) {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
            Ok(mode) => {
                return Err(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
                    Some(format!("the log's file cannot be WAL (journal mode {mode})")),
                ));
            }
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e),
        }
    }
}

/// The intent log.
pub struct IntentLog {
    conn: Handle,
    path: PathBuf,
    /// The rows `with_active` read last, and the log's change counters when it read them.
    active_rows: RefCell<Option<(Seen, Vec<Intent>)>>,
    /// The rows `get` read (`None`: no such id) since the log last changed, and the change
    /// counters they were read at: lineage and `after` checks ask for the same rows at every
    /// pass, and a pass that waits changes nothing.
    rows_by_id: RefCell<(Option<Seen>, RowsById)>,
    /// Whether commits wait for the disk (a file log opened with [`Durability::Full`]); a
    /// commit that reconciliation could redo does not (`write.rs`, [`IntentLog::update`]).
    synced: bool,
}

/// Rows read by id (`None`: no row has that id).
type RowsById = BTreeMap<String, Option<Intent>>;

/// The log's change counters: `PRAGMA data_version` (commits of other connections) and this
/// connection's `total_changes`.
type Seen = (i64, u64);

impl IntentLog {
    /// Opens (creating if needed) the log at `path`.
    pub fn open(path: &Path, durability: Durability) -> Result<IntentLog, LogError> {
        let err = |source| LogError::Sqlite { path: path.to_path_buf(), source };
        no_memory_statistics();
        let conn = Connection::open(path).map_err(err)?;
        conn.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS)).map_err(err)?;
        wal(&conn).map_err(err)?;
        let sync = match durability {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", sync).map_err(err)?;
        let mut log = IntentLog::ready(conn, path.to_path_buf(), None)?;
        log.synced = durability == Durability::Full;
        Ok(log)
    }

    /// Opens (creating if needed) the log named `name` in this process's memory: SQLite's
    /// `memdb` file system, shared by every connection of the process that opens the same
    /// name, and gone once the last of them closes. The simulation's storage: the same
    /// schema, statements and transactions as a file, without the kernel's file creation,
    /// locks and writes. What a simulated crash loses is what it loses on disk: every change
    /// is one transaction that runs to its end between two awaits, so a crash (a dropped
    /// task) falls between transactions, never inside one, and no power cut is simulated.
    /// A name from [`IntentLog::fresh_in_memory`] is served from its warm connections (see
    /// [`MemoryLog`]).
    pub fn open_in_memory(name: &str) -> Result<IntentLog, LogError> {
        use rusqlite::OpenFlags;
        let path = PathBuf::from(format!("memory:{name}"));
        let home = match warm::take(name) {
            Some(Some(conn)) => {
                return Ok(IntentLog::with(Handle::new(conn, Some(name.to_string())), path));
            }
            Some(None) => Some(name.to_string()),
            None => None,
        };
        let err = |source| LogError::Sqlite { path: path.clone(), source };
        no_memory_statistics();
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        // A name starting with "/" is what makes a memdb database shared between connections.
        let conn = Connection::open_with_flags(format!("file:/{name}?vfs=memdb"), flags).map_err(err)?;
        conn.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS)).map_err(err)?;
        conn.pragma_update(None, "synchronous", "OFF").map_err(err)?;
        IntentLog::ready(conn, path, home)
    }

    fn with(conn: Handle, path: PathBuf) -> IntentLog {
        IntentLog {
            conn,
            path,
            active_rows: RefCell::new(None),
            rows_by_id: RefCell::new((None, BTreeMap::new())),
            synced: false,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sqlite(&self, source: rusqlite::Error) -> LogError {
        LogError::Sqlite { path: self.path.clone(), source }
    }

    fn corrupt(&self, id: &str, problem: String) -> LogError {
        LogError::Corrupt { path: self.path.clone(), id: id.to_string(), problem }
    }
}

/// Turns off SQLite's process-wide memory statistics, once, before SQLite initialises.
///
/// They are on by default, and kept behind one global mutex that every allocation and free
/// inside SQLite takes: with logs in use on several threads at once (the sim driver runs cases
/// in parallel, each with its own log) that mutex is contended on every statement, and the
/// threads take turns. Nothing here reads the statistics (`sqlite3_memory_used` and the soft
/// heap limit), and they change nothing about what is stored or when it is durable.
fn no_memory_statistics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: `sqlite3_config` must not run while another thread uses SQLite, and only
        // takes effect before `sqlite3_initialize`. Every log opens through here, and the
        // `Once` holds other openers back until the call returned; if something else in the
        // process initialised SQLite first, the call returns SQLITE_MISUSE and changes
        // nothing (the statistics stay on, which only costs speed).
        unsafe {
            rusqlite::ffi::sqlite3_config(rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS, 0 as std::ffi::c_int);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::testing::transfer;
    use super::*;
    use crate::model::Evidence;

    /// Several workers started at once on a state directory nobody has used yet: each opens
    /// the log (creating it, turning on WAL, writing the schema) beside the others, and every
    /// one of them gets it.
    #[test]
    fn workers_opening_a_new_log_at_once_all_get_it() {
        let root = std::env::temp_dir().join(format!("twice-log-opening-{}", std::process::id()));
        for round in 0..40 {
            let dir = root.join(round.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("intents.sqlite");
            let start = std::sync::Barrier::new(6);
            let failures: Vec<String> = std::thread::scope(|scope| {
                let opening: Vec<_> = (0..6)
                    .map(|_| {
                        scope.spawn(|| {
                            start.wait();
                            IntentLog::open(&path, Durability::Full).err().map(|e| e.to_string())
                        })
                    })
                    .collect();
                opening.into_iter().filter_map(|t| t.join().unwrap()).collect()
            });
            assert!(failures.is_empty(), "round {round}: {failures:?}");
        }
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// The same race made certain: another connection holds a new file's write lock while the
    /// log opens, as one worker creating the log does to the others. The switch to WAL is
    /// answered busy at once; the log waits for the lock (released after 300 ms) and opens.
    #[test]
    fn a_new_log_opens_while_another_connection_holds_its_write_lock() {
        let dir = std::env::temp_dir().join(format!("twice-log-new-locked-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("intents.sqlite");
        let holder = Connection::open(&path).unwrap();
        holder.execute_batch("BEGIN IMMEDIATE").unwrap();
        let opened = std::thread::scope(|scope| {
            let opening =
                scope.spawn(|| IntentLog::open(&path, Durability::Full).map(drop).map_err(|e| e.to_string()));
            std::thread::sleep(Duration::from_millis(300));
            holder.execute_batch("COMMIT").unwrap();
            opening.join().unwrap()
        });
        assert_eq!(opened, Ok(()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_second_worker_opens_the_log_while_another_holds_the_write_lock() {
        let dir = std::env::temp_dir().join(format!("twice-log-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("intents.sqlite");
        drop(IntentLog::open(&path, Durability::Normal).unwrap());
        // A worker stopped in the middle of a write transaction keeps the write lock.
        let holder = Connection::open(&path).unwrap();
        holder.execute_batch("BEGIN IMMEDIATE").unwrap();
        let second = IntentLog::open(&path, Durability::Normal).unwrap();
        second.conn.busy_timeout(Duration::from_millis(0)).unwrap();
        assert_eq!(second.count().unwrap(), 0, "reads go on beside the held write lock");
        holder.execute_batch("ROLLBACK").unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The sim's log: every worker that opens the name sees what the others committed, a
    /// worker's connection going (its crash) loses nothing committed while another keeps the
    /// name open, and the last one going frees it.
    #[test]
    fn an_in_memory_log_is_shared_by_name_and_outlives_a_dropped_connection() {
        let name = format!("twice-log-memory-{}", std::process::id());
        let keeper = IntentLog::open_in_memory(&name).unwrap();
        let mut first = IntentLog::open_in_memory(&name).unwrap();
        let mut row = transfer("a", 0);
        row.evidence = Evidence::default();
        first.record(&row).unwrap();
        // Mid-transaction work that a crash interrupts is never committed.
        first.conn.execute_batch("BEGIN IMMEDIATE; UPDATE intents SET state = 'failed'").unwrap();
        drop(first);
        let second = IntentLog::open_in_memory(&name).unwrap();
        let found = second.get("a").unwrap().expect("the committed row outlives the connection");
        assert_eq!(found.state, State::Recorded, "the open transaction was rolled back");
        assert_eq!(keeper.count().unwrap(), 1);
        assert_eq!(second.busy().unwrap(), 1);
        drop((keeper, second));
        let fresh = IntentLog::open_in_memory(&name).unwrap();
        assert_eq!(fresh.count().unwrap(), 0, "the last connection going freed the log");
        let other = IntentLog::open_in_memory(&format!("{name}-other")).unwrap();
        assert_eq!(other.count().unwrap(), 0, "another name is another log");
    }
}
