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
//! A row whose evidence carries a signed transaction claims its account's nonce in the
//! `nonces` table, in the same transaction as the row: a nonce is claimed by one intent at
//! most, so two workers sharing the log never sign two transfers with one nonce. A transfer
//! that failed without ever being pooled gives its nonce back, so that no later transfer
//! waits for ever behind a nonce nobody will use.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};

use crate::model::{Evidence, Intent, State};

mod warm;

use warm::Handle;
pub use warm::MemoryLog;

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

/// Schema version in `PRAGMA user_version` (2: the `nonces` table; 3: `after_ids`, the
/// intents a step comes after).
const SCHEMA_VERSION: i64 = 3;
/// Prepared statements each connection keeps (rusqlite keeps 16 unless told).
const STATEMENTS_CACHED: usize = 64;
/// How long a writer waits for another process's lock before giving up.
const BUSY_TIMEOUT_MS: u64 = 5_000;

const COLUMNS: &str = "id, action, params, params_hash, idem_key, state, attempts, replaces, evidence, \
     maybe_executed, lease_owner, lease_epoch, lease_until_ms, version, created_ms, updated_ms, \
     key_first_sent_ms, last_sent_ms, after_ids";

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
}

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
        IntentLog::ready(conn, path.to_path_buf(), None)
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

    /// Creates the schema where it is missing.
    fn ready(conn: Connection, path: PathBuf, home: Option<String>) -> Result<IntentLog, LogError> {
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

    fn with(conn: Handle, path: PathBuf) -> IntentLog {
        IntentLog { conn, path, active_rows: RefCell::new(None) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sqlite(&self, source: rusqlite::Error) -> LogError {
        LogError::Sqlite { path: self.path.clone(), source }
    }

    /// Records a new intent, durably, unless its id exists already.
    pub fn record(&mut self, intent: &Intent) -> Result<Recorded, LogError> {
        let mut recorded = self.record_many(std::slice::from_ref(intent))?;
        recorded.pop().ok_or_else(|| LogError::Corrupt {
            path: self.path.clone(),
            id: intent.id.clone(),
            problem: "recording it gave no result".into(),
        })
    }

    /// Records each intent whose id the log does not hold yet, all in one transaction (one
    /// durable commit), in order: an id that comes twice is recorded once, and the second
    /// finds the first. Returns, per intent, what recording it found.
    pub fn record_many(&mut self, intents: &[Intent]) -> Result<Vec<Recorded>, LogError> {
        let path = self.path.clone();
        let err = |source| LogError::Sqlite { path: path.clone(), source };
        // IMMEDIATE: the write lock first, waited for like any other write. A deferred
        // transaction reads before it writes, and when another worker commits in between,
        // SQLite refuses the upgrade at once (SQLITE_BUSY_SNAPSHOT, "database is locked")
        // without waiting: a proposal refused for nothing but a neighbour's commit.
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(err)?;
        let mut out = Vec::with_capacity(intents.len());
        let mut wrote = false;
        for intent in intents {
            let existing = tx
                .prepare_cached(&format!("SELECT {COLUMNS} FROM intents WHERE id = ?1"))
                .and_then(|mut stmt| stmt.query_row([&intent.id], read_row).optional())
                .map_err(err)?;
            if let Some(existing) = existing {
                let existing = existing.map_err(|problem| LogError::Corrupt {
                    path: path.clone(),
                    id: intent.id.clone(),
                    problem,
                })?;
                out.push(if existing.params_hash == intent.params_hash && existing.action == intent.action {
                    Recorded::Existing(existing)
                } else {
                    Recorded::Conflict(existing)
                });
                continue;
            }
            insert(&tx, intent).map_err(err)?;
            history(&tx, intent, None, "recorded").map_err(err)?;
            wrote = true;
            out.push(Recorded::New(intent.clone()));
        }
        // A batch that found every id recorded already wrote nothing: no commit to wait for.
        if wrote {
            tx.commit().map_err(err)?;
        }
        Ok(out)
    }

    /// One intent by id.
    pub fn get(&self, id: &str) -> Result<Option<Intent>, LogError> {
        // Cached, as every statement here: lineage checks ask for rows by id at every pass.
        let mut stmt = self
            .conn
            .prepare_cached(&format!("SELECT {COLUMNS} FROM intents WHERE id = ?1"))
            .map_err(|e| self.sqlite(e))?;
        let row = stmt.query_row([id], read_row).optional().map_err(|e| self.sqlite(e))?;
        match row {
            None => Ok(None),
            Some(r) => r.map(Some).map_err(|problem| self.corrupt(id, problem)),
        }
    }

    /// Every intent, in the order they were recorded.
    pub fn all(&self) -> Result<Vec<Intent>, LogError> {
        self.select("SELECT {COLUMNS} FROM intents ORDER BY seq", [])
    }

    /// How many intents the log holds.
    pub fn count(&self) -> Result<usize, LogError> {
        let mut stmt =
            self.conn.prepare_cached("SELECT COUNT(*) FROM intents").map_err(|e| self.sqlite(e))?;
        stmt.query_row([], |r| r.get::<_, i64>(0)).map(|n| n as usize).map_err(|e| self.sqlite(e))
    }

    /// How many intents are `recorded` or `submitted`: what a drain waits on.
    pub fn busy(&self) -> Result<usize, LogError> {
        self.with_active(|rows| {
            rows.iter().filter(|i| matches!(i.state, State::Recorded | State::Submitted)).count()
        })
    }

    /// Intents not yet terminal, in the order they were recorded.
    pub fn active(&self) -> Result<Vec<Intent>, LogError> {
        self.with_active(<[Intent]>::to_vec)
    }

    /// Intents in one state, in the order they were recorded.
    pub fn in_state(&self, state: State) -> Result<Vec<Intent>, LogError> {
        if !state.is_terminal() {
            return self.with_active(|rows| rows.iter().filter(|i| i.state == state).cloned().collect());
        }
        // The state is written into the statement (one cached statement per state) rather
        // than bound: bound, SQLite prepared the statement again at every run of it.
        self.select(
            &format!("SELECT {{COLUMNS}} FROM intents WHERE state = '{}' ORDER BY seq", state.as_str()),
            [],
        )
    }

    /// `f` of the intents not yet terminal. A drain asks for them at every pass, and a pass
    /// that waits (for a lease, a backoff, a settle bound) changes nothing: the rows read last
    /// are used again while the log is as it was then, that is while no other connection
    /// committed (`PRAGMA data_version`) and this one changed no row (`total_changes`).
    fn with_active<R>(&self, f: impl FnOnce(&[Intent]) -> R) -> Result<R, LogError> {
        let data_version: i64 = self
            .conn
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut stmt| stmt.query_row([], |r| r.get(0)))
            .map_err(|e| self.sqlite(e))?;
        let seen = (data_version, self.conn.total_changes());
        let mut cache = self.active_rows.borrow_mut();
        if let Some((at, rows)) = cache.as_ref()
            && *at == seen
        {
            return Ok(f(rows));
        }
        let rows = self.select(
            "SELECT {COLUMNS} FROM intents WHERE state IN ('recorded', 'blocked', 'submitted', 'unknown') ORDER BY seq",
            [],
        )?;
        let out = f(&rows);
        *cache = Some((seen, rows));
        Ok(out)
    }

    fn select<P: rusqlite::Params>(&self, sql: &str, params: P) -> Result<Vec<Intent>, LogError> {
        let sql = sql.replace("{COLUMNS}", COLUMNS);
        let mut stmt = self.conn.prepare_cached(&sql).map_err(|e| self.sqlite(e))?;
        let rows = stmt.query_map(params, read_row).map_err(|e| self.sqlite(e))?;
        let mut out = Vec::new();
        for row in rows {
            let row = row.map_err(|e| self.sqlite(e))?;
            out.push(row.map_err(|problem| self.corrupt("?", problem))?);
        }
        Ok(out)
    }

    /// The nonces of `account` that intents of this log have signed with.
    pub fn claimed_nonces(&self, account: &str) -> Result<BTreeSet<u64>, LogError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT nonce FROM nonces WHERE account = ?1")
            .map_err(|e| self.sqlite(e))?;
        let rows = stmt.query_map([account], |r| r.get::<_, i64>(0)).map_err(|e| self.sqlite(e))?;
        rows.map(|r| r.map(|n| n as u64)).collect::<Result<_, _>>().map_err(|e| self.sqlite(e))
    }

    /// Writes each changed intent if its row still has the version it was read with (and, for
    /// a row with a signed transaction, if no other intent holds its nonce), all in one
    /// transaction; returns, per intent, whether it was written. A state change also appends
    /// to the history.
    pub fn update(&mut self, changes: &[Change<'_>]) -> Result<Vec<bool>, LogError> {
        let path = self.path.clone();
        let err = move |source| LogError::Sqlite { path: path.clone(), source };
        let tx = self.conn.transaction().map_err(err.clone())?;
        let mut applied = Vec::with_capacity(changes.len());
        for change in changes {
            let new = change.new;
            let claimed = match claim_nonce(&tx, new).map_err(err.clone())? {
                Claim::Taken => {
                    applied.push(false);
                    continue;
                }
                Claim::New => true,
                Claim::None | Claim::Held => false,
            };
            // Debug builds check the transition against the row as this transaction finds it;
            // release builds (the benchmarked ones) do not read it.
            let before =
                if cfg!(debug_assertions) { row_before(&tx, &new.id).map_err(err.clone())? } else { None };
            if let Some(before) = &before
                && before.version == change.expect_version
            {
                check_transition(before, change);
            }
            let n = tx
                .prepare_cached(
                    "UPDATE intents SET idem_key = ?1, state = ?2, attempts = ?3, evidence = ?4,
                         maybe_executed = ?5, lease_owner = ?6, lease_epoch = ?7, lease_until_ms = ?8,
                         version = ?9 + 1, updated_ms = ?10, key_first_sent_ms = ?11, last_sent_ms = ?12
                     WHERE id = ?13 AND version = ?9",
                )
                .and_then(|mut stmt| {
                    stmt.execute(params![
                        new.key,
                        new.state.as_str(),
                        new.attempts,
                        evidence_json(&new.evidence),
                        new.maybe_executed,
                        new.lease_owner,
                        new.lease_epoch as i64,
                        new.lease_until_ms as i64,
                        change.expect_version as i64,
                        new.updated_ms as i64,
                        new.key_first_sent_ms.map(|v| v as i64),
                        new.last_sent_ms.map(|v| v as i64),
                        new.id,
                    ])
                })
                .map_err(err.clone())?;
            if n == 1
                && let Some(before) = &before
            {
                let after = row_version(&tx, &new.id).map_err(err.clone())?;
                debug_assert!(
                    after.is_some_and(|v| v > before.version),
                    "intent {}: version went from {} to {after:?}, not up",
                    new.id,
                    before.version
                );
            }
            if n == 1 && change.from_state != new.state {
                history(&tx, new, Some(change.from_state), change.note.unwrap_or("")).map_err(err.clone())?;
            }
            if (n != 1 && claimed) || (n == 1 && !holds_nonce(new)) {
                // The row was not written (neither is its claim), or its transaction will never
                // be broadcast again.
                release_nonce(&tx, new).map_err(err.clone())?;
            }
            applied.push(n == 1);
        }
        tx.commit().map_err(err)?;
        Ok(applied)
    }

    /// The recorded state changes of one intent, oldest first.
    pub fn history(&self, id: &str) -> Result<Vec<HistoryEntry>, LogError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT at_ms, from_state, to_state, owner, note FROM history WHERE intent_id = ?1 ORDER BY seq",
            )
            .map_err(|e| self.sqlite(e))?;
        let rows = stmt
            .query_map([id], |r| {
                Ok(HistoryEntry {
                    at_ms: r.get::<_, i64>(0)? as u64,
                    from: r.get::<_, Option<String>>(1)?.as_deref().and_then(State::parse),
                    to: State::parse(&r.get::<_, String>(2)?).unwrap_or(State::Escalated),
                    owner: r.get(3)?,
                    note: r.get::<_, Option<String>>(4)?.unwrap_or_default(),
                })
            })
            .map_err(|e| self.sqlite(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.sqlite(e))
    }

    /// Overwrites a stored payload without its hash: only for tests that prove a corrupted
    /// row is escalated rather than executed.
    #[doc(hidden)]
    pub fn corrupt_payload_for_tests(&mut self, id: &str, params: &str) -> Result<(), LogError> {
        self.conn
            .execute("UPDATE intents SET params = ?1 WHERE id = ?2", params![params, id])
            .map(|_| ())
            .map_err(|e| self.sqlite(e))
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

/// What a conditional write is checked against in debug builds: the row as the transaction
/// finds it just before the write.
#[derive(Debug)]
struct Before {
    version: u64,
    state: Option<State>,
    lease_epoch: u64,
}

/// The row's version, state and lease epoch, read in the write's own transaction (debug builds
/// only). The read is a no-op `UPDATE ... RETURNING` rather than a `SELECT` so that the
/// transaction takes the write lock first, exactly where the write itself would: a deferred
/// transaction that has read before its first write cannot wait for another worker's lock
/// (SQLite answers `SQLITE_BUSY_SNAPSHOT` at once), so a plain `SELECT` here could turn a wait
/// into an error.
fn row_before(tx: &rusqlite::Transaction<'_>, id: &str) -> rusqlite::Result<Option<Before>> {
    tx.prepare_cached(
        "UPDATE intents SET version = version WHERE id = ?1 RETURNING version, state, lease_epoch",
    )?
    .query_row([id], |r| {
        Ok(Before {
            version: r.get::<_, i64>(0)? as u64,
            state: State::parse(&r.get::<_, String>(1)?),
            lease_epoch: r.get::<_, i64>(2)? as u64,
        })
    })
    .optional()
}

/// The row's version as written (debug builds only; the transaction holds the write lock).
fn row_version(tx: &rusqlite::Transaction<'_>, id: &str) -> rusqlite::Result<Option<u64>> {
    tx.prepare_cached("SELECT version FROM intents WHERE id = ?1")?
        .query_row([id], |r| r.get::<_, i64>(0))
        .optional()
        .map(|v| v.map(|v| v as u64))
}

/// The structural invariants of a state transition, checked in debug builds before a write
/// that will apply: nothing leaves a terminal state, and a lease epoch (the fencing token)
/// never goes back. (That the version goes up is checked after the write, on the row.)
fn check_transition(before: &Before, change: &Change<'_>) {
    let new = change.new;
    debug_assert!(
        !before.state.is_some_and(State::is_terminal) || before.state == Some(new.state),
        "intent {}: would leave the terminal state {} for {}",
        new.id,
        before.state.map_or("?", State::as_str),
        new.state
    );
    debug_assert!(
        new.lease_epoch >= before.lease_epoch,
        "intent {}: lease epoch would go back from {} to {}",
        new.id,
        before.lease_epoch,
        new.lease_epoch
    );
}

/// What a row's nonce claim found.
enum Claim {
    /// The row carries no signed transaction.
    None,
    /// Claimed now.
    New,
    /// Already this intent's.
    Held,
    /// Another intent's: the row must not be written.
    Taken,
}

/// Whether a row's signed transaction keeps its nonce: all but a transfer that failed, or was
/// escalated for a person's decision, with no send that may have reached the node (refused,
/// or never sent), whose nonce is unused. It is never broadcast again, and every later
/// transfer of the account would wait behind its nonce.
fn holds_nonce(intent: &Intent) -> bool {
    let given_up = intent.state == State::Failed
        || (intent.state == State::Escalated && intent.evidence.could_duplicate == Some(false));
    !given_up || intent.maybe_executed
}

fn claim_nonce(tx: &rusqlite::Transaction<'_>, intent: &Intent) -> rusqlite::Result<Claim> {
    let (Some(account), Some(nonce)) = (&intent.evidence.from, intent.evidence.nonce) else {
        return Ok(Claim::None);
    };
    if !holds_nonce(intent) {
        return Ok(Claim::None);
    }
    let inserted = tx
        .prepare_cached(
            "INSERT INTO nonces (account, nonce, intent_id) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
        )?
        .execute(params![account, nonce as i64, intent.id])?;
    if inserted == 1 {
        return Ok(Claim::New);
    }
    let owner: String = tx
        .prepare_cached("SELECT intent_id FROM nonces WHERE account = ?1 AND nonce = ?2")?
        .query_row(params![account, nonce as i64], |r| r.get(0))?;
    Ok(if owner == intent.id { Claim::Held } else { Claim::Taken })
}

fn release_nonce(tx: &rusqlite::Transaction<'_>, intent: &Intent) -> rusqlite::Result<usize> {
    let (Some(account), Some(nonce)) = (&intent.evidence.from, intent.evidence.nonce) else {
        return Ok(0);
    };
    tx.prepare_cached("DELETE FROM nonces WHERE account = ?1 AND nonce = ?2 AND intent_id = ?3")?
        .execute(params![account, nonce as i64, intent.id])
}

fn evidence_json(evidence: &Evidence) -> String {
    serde_json::to_string(evidence).unwrap_or_else(|_| "{}".into())
}

fn after_json(after: &[String]) -> String {
    serde_json::to_string(after).unwrap_or_else(|_| "[]".into())
}

fn insert(tx: &rusqlite::Transaction<'_>, i: &Intent) -> rusqlite::Result<usize> {
    tx.prepare_cached(&format!(
        "INSERT INTO intents ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)"
    ))?
    .execute(params![
            i.id,
            i.action,
            i.params,
            i.params_hash,
            i.key,
            i.state.as_str(),
            i.attempts,
            i.replaces,
            evidence_json(&i.evidence),
            i.maybe_executed,
            i.lease_owner,
            i.lease_epoch as i64,
            i.lease_until_ms as i64,
            i.version as i64,
            i.created_ms as i64,
            i.updated_ms as i64,
            i.key_first_sent_ms.map(|v| v as i64),
            i.last_sent_ms.map(|v| v as i64),
            after_json(&i.after),
        ])
}

fn history(
    tx: &rusqlite::Transaction<'_>,
    i: &Intent,
    from: Option<State>,
    note: &str,
) -> rusqlite::Result<usize> {
    tx.prepare_cached(
        "INSERT INTO history (intent_id, at_ms, from_state, to_state, owner, epoch, note) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        i.id,
        i.updated_ms as i64,
        from.map(State::as_str),
        i.state.as_str(),
        i.lease_owner,
        i.lease_epoch as i64,
        if note.is_empty() { None } else { Some(note) },
    ])
}

/// Reads a row; the inner error is a row that SQLite returned but that does not make sense.
fn read_row(r: &Row<'_>) -> rusqlite::Result<Result<Intent, String>> {
    let state: String = r.get(5)?;
    let evidence: String = r.get(8)?;
    let Some(state) = State::parse(&state) else {
        return Ok(Err(format!("unknown state \"{state}\"")));
    };
    let after: String = r.get(18)?;
    let after: Vec<String> = match serde_json::from_str(&after) {
        Ok(a) => a,
        Err(e) => return Ok(Err(format!("after_ids: {e}"))),
    };
    let evidence: Evidence = match serde_json::from_str(&evidence) {
        Ok(e) => e,
        Err(e) => return Ok(Err(format!("evidence: {e}"))),
    };
    Ok(Ok(Intent {
        id: r.get(0)?,
        action: r.get(1)?,
        params: r.get(2)?,
        params_hash: r.get(3)?,
        key: r.get(4)?,
        state,
        attempts: r.get(6)?,
        replaces: r.get(7)?,
        after,
        evidence,
        maybe_executed: r.get(9)?,
        lease_owner: r.get(10)?,
        lease_epoch: r.get::<_, i64>(11)? as u64,
        lease_until_ms: r.get::<_, i64>(12)? as u64,
        version: r.get::<_, i64>(13)? as u64,
        created_ms: r.get::<_, i64>(14)? as u64,
        updated_ms: r.get::<_, i64>(15)? as u64,
        key_first_sent_ms: r.get::<_, Option<i64>>(16)?.map(|v| v as u64),
        last_sent_ms: r.get::<_, Option<i64>>(17)?.map(|v| v as u64),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Recording waits for another worker's write to commit, then records: it never reads a
    /// snapshot that the other's commit makes stale before it writes.
    #[test]
    fn recording_waits_for_another_workers_commit() {
        let dir = std::env::temp_dir().join(format!("twice-log-record-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("intents.sqlite");
        drop(IntentLog::open(&path, Durability::Normal).unwrap());
        let holder = Connection::open(&path).unwrap();
        holder
            .execute_batch(
                "BEGIN IMMEDIATE; INSERT INTO nonces (account, nonce, intent_id) VALUES ('0xa', 0, 'other')",
            )
            .unwrap();
        let recorder = {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut log = IntentLog::open(&path, Durability::Normal).unwrap();
                let mut row = transfer("mine", 1);
                row.evidence = Evidence::default();
                log.record_many(&[row]).map(|r| r.len())
            })
        };
        // Long enough for the recorder to be inside record_many, well within its busy timeout.
        std::thread::sleep(Duration::from_millis(300));
        holder.execute_batch("COMMIT").unwrap();
        assert_eq!(recorder.join().unwrap().unwrap(), 1, "recorded after the other commit");
        let log = IntentLog::open(&path, Durability::Normal).unwrap();
        assert_eq!(log.count().unwrap(), 1);
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

    /// The active rows are read again whenever the log changed since the last read, by this
    /// connection or another one, and only then.
    #[test]
    fn active_rows_follow_every_commit_of_either_connection() {
        let name = format!("twice-log-active-{}", std::process::id());
        let mut a = IntentLog::open_in_memory(&name).unwrap();
        let mut b = IntentLog::open_in_memory(&name).unwrap();
        let ids = |log: &IntentLog| log.active().unwrap().into_iter().map(|i| i.id).collect::<Vec<_>>();
        let mut row = transfer("a", 0);
        row.evidence = Evidence::default();
        a.record(&row).unwrap();
        assert_eq!(ids(&a), ["a"]);
        assert_eq!(ids(&a), ["a"], "read again from what it kept");
        let mut row = transfer("b", 1);
        row.evidence = Evidence::default();
        b.record(&row).unwrap();
        assert_eq!(ids(&a), ["a", "b"], "another connection's commit is seen");
        assert_eq!(a.busy().unwrap(), 2);
        let mut done = a.get("a").unwrap().unwrap();
        done.state = State::Submitted;
        let change = Change { new: &done, expect_version: 0, from_state: State::Recorded, note: None };
        assert_eq!(a.update(&[change]).unwrap(), [true]);
        assert_eq!(a.in_state(State::Submitted).unwrap().len(), 1, "its own commit is seen");
        assert_eq!(
            b.in_state(State::Recorded).unwrap().iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
            ["b"]
        );
    }

    /// The sim's warm logs: a run's log is empty whatever the run before it on the same name
    /// left (rows and counters), its workers share it, and a connection dropped inside a
    /// transaction (a crash) loses that transaction and is not handed to the next opener.
    #[test]
    fn a_warm_log_starts_empty_and_a_crash_inside_a_transaction_loses_only_that() {
        let first_name;
        {
            let run = IntentLog::fresh_in_memory().unwrap();
            first_name = run.name().to_string();
            let mut worker = IntentLog::open_in_memory(run.name()).unwrap();
            let mut row = transfer("a", 0);
            row.evidence = Evidence::default();
            worker.record(&row).unwrap();
            worker.conn.execute_batch("BEGIN IMMEDIATE; UPDATE intents SET state = 'failed'").unwrap();
            drop(worker);
            let other = IntentLog::open_in_memory(run.name()).unwrap();
            assert!(other.conn.is_autocommit(), "the crashed connection was not handed out again");
            assert_eq!(other.get("a").unwrap().unwrap().state, State::Recorded);
            assert_eq!(other.history("a").unwrap().len(), 1);
        }
        // Runs one after another on this thread: the name comes back, emptied.
        let mut names = Vec::new();
        for _ in 0..3 {
            let run = IntentLog::fresh_in_memory().unwrap();
            let mut worker = IntentLog::open_in_memory(run.name()).unwrap();
            assert_eq!(worker.count().unwrap(), 0, "a run's log starts empty");
            let mut row = transfer("b", 0);
            row.evidence = Evidence::default();
            worker.record(&row).unwrap();
            let seq: i64 =
                worker.conn.query_row("SELECT seq FROM intents WHERE id = 'b'", [], |r| r.get(0)).unwrap();
            assert_eq!(seq, 1, "the AUTOINCREMENT counter starts again");
            names.push(run.name().to_string());
        }
        assert!(names.iter().all(|n| n.starts_with("twice-warm-")));
        assert!(
            names.contains(&first_name) || names.windows(2).all(|w| w[0] == w[1]),
            "names are reused: {names:?}"
        );
    }

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

    fn transfer(id: &str, nonce: u64) -> Intent {
        Intent {
            id: id.into(),
            action: "chain.transfer".into(),
            params: "{}".into(),
            params_hash: String::new(),
            key: format!("k-{id}"),
            state: State::Recorded,
            attempts: 0,
            replaces: None,
            after: Vec::new(),
            evidence: Evidence::default(),
            maybe_executed: false,
            lease_owner: None,
            lease_epoch: 0,
            lease_until_ms: 0,
            version: 0,
            created_ms: 0,
            updated_ms: 0,
            key_first_sent_ms: None,
            last_sent_ms: None,
        }
        .signed(nonce)
    }

    impl Intent {
        fn signed(mut self, nonce: u64) -> Intent {
            self.evidence.from = Some("0xaa".into());
            self.evidence.nonce = Some(nonce);
            self
        }
    }

    fn submit(log: &mut IntentLog, row: &Intent) -> bool {
        let mut new = row.clone();
        new.state = State::Submitted;
        let change = Change { new: &new, expect_version: row.version, from_state: row.state, note: None };
        log.update(&[change]).unwrap()[0]
    }

    #[test]
    fn a_nonce_is_claimed_by_one_intent_and_given_back_when_its_transfer_failed_unsent() {
        let dir = std::env::temp_dir().join(format!("twice-log-nonces-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut log = IntentLog::open(&dir.join("intents.sqlite"), Durability::Normal).unwrap();
        let (mut a, b) = (transfer("a", 0), transfer("b", 0));
        for row in [&a, &b] {
            let mut unsigned = row.clone();
            unsigned.evidence = Evidence::default();
            log.record(&unsigned).unwrap();
        }
        assert!(submit(&mut log, &a), "the first claim of nonce 0 is written");
        assert!(!submit(&mut log, &b), "a second intent with nonce 0 is not");
        assert_eq!(log.claimed_nonces("0xaa").unwrap(), BTreeSet::from([0]));
        // A row that is not written does not keep the claim it made.
        let stale = transfer("b", 1);
        let mut moved = stale.clone();
        moved.version = 7;
        assert!(!submit(&mut log, &moved));
        assert_eq!(log.claimed_nonces("0xaa").unwrap(), BTreeSet::from([0]));
        // Refused for good, never pooled: the nonce is free again.
        a.version = 1;
        a.state = State::Submitted;
        let mut failed = a.clone();
        failed.state = State::Failed;
        let change = Change { new: &failed, expect_version: 1, from_state: State::Submitted, note: None };
        assert_eq!(log.update(&[change]).unwrap(), [true]);
        assert!(log.claimed_nonces("0xaa").unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// In debug builds, a write that would move a lease epoch back or take an intent out of a
    /// terminal state panics before it is written, naming the intent and both values.
    #[cfg(debug_assertions)]
    #[test]
    fn an_illegal_transition_fails_a_debug_assertion_and_is_not_written() {
        use std::panic::{AssertUnwindSafe, catch_unwind};

        let dir = std::env::temp_dir().join(format!("twice-log-transitions-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut log = IntentLog::open(&dir.join("intents.sqlite"), Durability::Normal).unwrap();
        let mut row = transfer("a", 0);
        row.evidence = Evidence::default();
        log.record(&row).unwrap();
        let write = |log: &mut IntentLog, row: &Intent, new: &Intent| {
            let change = Change { new, expect_version: row.version, from_state: row.state, note: None };
            catch_unwind(AssertUnwindSafe(|| log.update(&[change]).unwrap()[0]))
                .map_err(|panic| panic.downcast_ref::<String>().cloned().unwrap_or_default())
        };
        let mut leased = row.clone();
        leased.lease_epoch = 2;
        assert_eq!(write(&mut log, &row, &leased), Ok(true));
        let row = log.get("a").unwrap().unwrap();

        let mut older = row.clone();
        older.lease_epoch = 1;
        let error = write(&mut log, &row, &older).expect_err("an epoch going back panics");
        assert_eq!(error, "intent a: lease epoch would go back from 2 to 1");
        assert_eq!(log.get("a").unwrap().unwrap(), row, "the write was rolled back");

        let mut confirmed = row.clone();
        confirmed.state = State::Confirmed;
        assert_eq!(write(&mut log, &row, &confirmed), Ok(true));
        let row = log.get("a").unwrap().unwrap();
        let mut reopened = row.clone();
        reopened.state = State::Unknown;
        let error = write(&mut log, &row, &reopened).expect_err("leaving a terminal state panics");
        assert_eq!(error, "intent a: would leave the terminal state confirmed for unknown");
        assert_eq!(log.get("a").unwrap().unwrap().state, State::Confirmed);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
