//! Reading the log: one intent, all of them, how many, the rows in one state, the history of
//! one; and the rows not yet terminal, which a drain asks for at every pass, read again only
//! when the log changed since the last read.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use rusqlite::OptionalExtension;

use super::row::{COLUMNS, read_row};
use super::{HistoryEntry, IntentLog, LogError, Seen};
use crate::model::Intent;
use vocabulary::State;

/// The statements with the column list in them, written once per process rather than at
/// every call (`prepare_cached` looks them up by their text).
static ALL_SQL: LazyLock<String> = LazyLock::new(|| format!("SELECT {COLUMNS} FROM intents ORDER BY seq"));
/// Where `seq` comes in [`ACTIVE_SQL`]'s rows: right after the columns of [`COLUMNS`].
static ACTIVE_SEQ_COLUMN: LazyLock<usize> = LazyLock::new(|| COLUMNS.split(',').count());
/// The rows not yet terminal, found through the `state` index, with their `seq` after the
/// columns to order them by: ordered in memory rather than by an `ORDER BY`, for which SQLite
/// copied every row found into a temporary B-tree and read it back at every read.
static ACTIVE_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {COLUMNS}, seq FROM intents WHERE state IN ('recorded', 'blocked', 'submitted', 'unknown')"
    )
});
pub(super) static GET_SQL: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {COLUMNS} FROM intents WHERE id = ?1"));

impl IntentLog {
    /// One intent by id. A row read since the log last changed (by `get`, or among the
    /// active rows) is answered from memory, as [`Self::active`] answers: the same row.
    pub fn get(&self, id: &str) -> Result<Option<Intent>, LogError> {
        let seen = self.seen()?;
        {
            let mut rows = self.rows_by_id.borrow_mut();
            if rows.0 != Some(seen) {
                *rows = (Some(seen), BTreeMap::new());
            } else if let Some(row) = rows.1.get(id) {
                return Ok(row.clone());
            }
        }
        if let Some((at, active)) = self.active_rows.borrow().as_ref()
            && *at == seen
            && let Some(row) = active.iter().find(|i| i.id == id)
        {
            return Ok(Some(row.clone()));
        }
        // Cached, as every statement here: lineage checks ask for rows by id at every pass.
        let mut stmt = self.conn.prepare_cached(&GET_SQL).map_err(|e| self.sqlite(e))?;
        let row = stmt.query_row([id], read_row).optional().map_err(|e| self.sqlite(e))?;
        let row = match row {
            None => None,
            Some(r) => Some(r.map_err(|problem| self.corrupt(id, problem))?),
        };
        self.rows_by_id.borrow_mut().1.insert(id.to_string(), row.clone());
        Ok(row)
    }

    /// Every intent, in the order they were recorded.
    pub fn all(&self) -> Result<Vec<Intent>, LogError> {
        self.select(&ALL_SQL, [])
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
            &format!("SELECT {COLUMNS} FROM intents WHERE state = '{}' ORDER BY seq", state.as_str()),
            [],
        )
    }

    /// `f` of the intents not yet terminal. A drain asks for them at every pass, and a pass
    /// that waits (for a lease, a backoff, a settle bound) changes nothing: the rows read last
    /// are used again while the log is as it was then, that is while no other connection
    /// committed (`PRAGMA data_version`) and this one changed no row (`total_changes`).
    fn with_active<R>(&self, f: impl FnOnce(&[Intent]) -> R) -> Result<R, LogError> {
        let seen = self.seen()?;
        let mut cache = self.active_rows.borrow_mut();
        if let Some((at, rows)) = cache.as_ref()
            && *at == seen
        {
            return Ok(f(rows));
        }
        let mut stmt = self.conn.prepare_cached(&ACTIVE_SQL).map_err(|e| self.sqlite(e))?;
        let found = stmt
            .query_map([], |r| Ok((r.get::<_, i64>(*ACTIVE_SEQ_COLUMN)?, read_row(r)?)))
            .map_err(|e| self.sqlite(e))?;
        let mut found = found.collect::<Result<Vec<_>, _>>().map_err(|e| self.sqlite(e))?;
        // In the order they were recorded, as `ORDER BY seq` gave them (`seq` is unique); an
        // unreadable row is the first one in that order, as it was.
        found.sort_unstable_by_key(|(seq, _)| *seq);
        let rows = found
            .into_iter()
            .map(|(_, row)| row.map_err(|problem| self.corrupt("?", problem)))
            .collect::<Result<Vec<Intent>, _>>()?;
        let out = f(&rows);
        *cache = Some((seen, rows));
        Ok(out)
    }

    /// The log's change counters now: no other connection committed (`PRAGMA data_version`)
    /// and this one changed no row (`total_changes`) while they stay the same.
    fn seen(&self) -> Result<Seen, LogError> {
        let data_version: i64 = self
            .conn
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut stmt| stmt.query_row([], |r| r.get(0)))
            .map_err(|e| self.sqlite(e))?;
        Ok((data_version, self.conn.total_changes()))
    }

    /// The intents `sql` selects (whole rows, [`COLUMNS`]).
    fn select<P: rusqlite::Params>(&self, sql: &str, params: P) -> Result<Vec<Intent>, LogError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(|e| self.sqlite(e))?;
        let rows = stmt.query_map(params, read_row).map_err(|e| self.sqlite(e))?;
        let mut out = Vec::new();
        for row in rows {
            let row = row.map_err(|e| self.sqlite(e))?;
            out.push(row.map_err(|problem| self.corrupt("?", problem))?);
        }
        Ok(out)
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
}

#[cfg(test)]
mod tests {
    use crate::log::testing::transfer;
    use crate::log::{Change, IntentLog};
    use crate::model::Evidence;
    use vocabulary::State;

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

    /// A row read by id is read again once the log changed, by this connection or another
    /// one; an id not found is looked for again too.
    #[test]
    fn rows_by_id_follow_every_commit_of_either_connection() {
        let name = format!("twice-log-get-{}", std::process::id());
        let mut a = IntentLog::open_in_memory(&name).unwrap();
        let mut b = IntentLog::open_in_memory(&name).unwrap();
        assert_eq!(a.get("a").unwrap(), None);
        let mut row = transfer("a", 0);
        row.evidence = Evidence::default();
        b.record(&row).unwrap();
        let found = a.get("a").unwrap().unwrap();
        assert_eq!(found.state, State::Recorded, "another connection's commit is seen");
        assert_eq!(a.get("a").unwrap().unwrap(), found, "the same row, from memory");
        let mut done = found.clone();
        done.state = State::Submitted;
        let change = Change { new: &done, expect_version: 0, from_state: State::Recorded, note: None };
        assert_eq!(a.update(&[change]).unwrap(), [true]);
        assert_eq!(a.get("a").unwrap().unwrap().state, State::Submitted, "its own commit is seen");
        let mut failed = b.get("a").unwrap().unwrap();
        assert_eq!(failed.state, State::Submitted);
        failed.state = State::Failed;
        let change = Change { new: &failed, expect_version: 1, from_state: State::Submitted, note: None };
        assert_eq!(b.update(&[change]).unwrap(), [true]);
        assert_eq!(a.get("a").unwrap().unwrap().state, State::Failed);
    }
}
