//! Warm in-memory logs for the simulation: connections that stay open, schema parsed and
//! statements prepared, from one simulated run to the next.
//!
//! A fresh SQLite connection parses the schema on its first statement and prepares every
//! statement once more; in the sim, where a case lasts about a millisecond, that was most of
//! the log's cost. So the names handed out by [`MemoryLog`] are reused: a run takes a name
//! that no other run holds, empties its tables, and every worker of the run that opens the
//! name gets one of its idle connections, which goes back when the worker's log is dropped
//! (its crash or its end). What a crash loses does not change: a connection goes back only
//! when no transaction is open on it (every change is one transaction that runs to its end
//! between two awaits), and one dropped inside a transaction is closed, which rolls it back,
//! as a killed process's connection is.

use std::collections::BTreeMap;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

use rusqlite::Connection;

use super::{IntentLog, LogError};

/// Idle connections kept per name; more are closed when they go back.
const IDLE_PER_NAME_MAX: usize = 8;

struct Registry {
    /// Every name [`MemoryLog`] handed out, with its idle connections.
    idle: BTreeMap<String, Vec<Connection>>,
    /// Names no run holds now.
    free: Vec<String>,
    made: u64,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry { idle: BTreeMap::new(), free: Vec::new(), made: 0 });

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    // Nothing in the registry is left half-changed by a panic (each change is one push or
    // pop), so a poisoned lock is still good to use.
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// What `name` has for an opener: `None` when it is not a warm name (open as usual),
/// `Some(None)` when it is but no connection is idle (open one, and give it back later),
/// `Some(Some(c))` for an idle connection, ready to use.
pub(super) fn take(name: &str) -> Option<Option<Connection>> {
    registry().idle.get_mut(name).map(Vec::pop)
}

fn give_back(name: &str, conn: Connection) {
    let mut registry = registry();
    if let Some(idle) = registry.idle.get_mut(name)
        && idle.len() < IDLE_PER_NAME_MAX
    {
        idle.push(conn);
        return;
    }
    drop(registry);
    drop(conn);
}

/// A log's connection: closed when dropped, or, for a warm name, given back to it.
pub(super) struct Handle {
    conn: ManuallyDrop<Connection>,
    home: Option<String>,
}

impl Handle {
    pub(super) fn new(conn: Connection, home: Option<String>) -> Handle {
        Handle { conn: ManuallyDrop::new(conn), home }
    }
}

impl Deref for Handle {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl DerefMut for Handle {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: `conn` is taken exactly once, here, and `self` is not used afterwards.
        let conn = unsafe { ManuallyDrop::take(&mut self.conn) };
        match self.home.take() {
            // No transaction open: nothing uncommitted to lose, so the connection may serve
            // the next opener as a new one would.
            Some(name) if conn.is_autocommit() => give_back(&name, conn),
            _ => drop(conn),
        }
    }
}

/// An empty in-memory log that one run holds: its name is the run's alone until this is
/// dropped. Open it from each worker with [`IntentLog::open_in_memory`] and [`Self::name`].
pub struct MemoryLog {
    name: String,
    _keeper: IntentLog,
}

impl MemoryLog {
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for MemoryLog {
    fn drop(&mut self) {
        registry().free.push(std::mem::take(&mut self.name));
    }
}

impl IntentLog {
    /// An empty in-memory log for one simulated run, on a warm name when one is free (see
    /// the module's documentation): the schema and statements of its connections are ready,
    /// and its tables are emptied, counters included, so the run sees what a new log shows.
    pub fn fresh_in_memory() -> Result<MemoryLog, LogError> {
        let name = {
            let mut registry = registry();
            match registry.free.pop() {
                Some(name) => name,
                None => {
                    registry.made += 1;
                    let name = format!("twice-warm-{}-{}", std::process::id(), registry.made);
                    registry.idle.insert(name.clone(), Vec::new());
                    name
                }
            }
        };
        let mut keeper = IntentLog::open_in_memory(&name)?;
        keeper.empty()?;
        Ok(MemoryLog { name, _keeper: keeper })
    }

    /// Deletes every row of every table, and the `AUTOINCREMENT` counters with them: every
    /// table the schema has, read from the database, so that a table added later is emptied
    /// too.
    pub(super) fn empty(&mut self) -> Result<(), LogError> {
        let path = self.path.clone();
        let err = |source| LogError::Sqlite { path: path.clone(), source };
        let tables: Vec<String> = self
            .conn
            .prepare_cached(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
            )
            .and_then(|mut stmt| stmt.query_map([], |r| r.get(0))?.collect())
            .map_err(err)?;
        let tx = super::tx::Tx::deferred(&self.conn).map_err(err)?;
        for table in tables.iter().map(String::as_str).chain(["sqlite_sequence"]) {
            tx.execute(&format!("DELETE FROM \"{table}\""), []).map_err(err)?;
        }
        tx.commit().map_err(err)
    }
}

#[cfg(test)]
mod tests {
    use crate::log::IntentLog;
    use crate::log::testing::transfer;
    use crate::model::Evidence;
    use vocabulary::State;

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
}
