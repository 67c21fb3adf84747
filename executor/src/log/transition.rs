//! The structural invariants of a state transition, checked in debug builds against the row
//! as the write's own transaction finds it: nothing leaves a terminal state, a lease epoch
//! (the fencing token) never goes back, and a version only goes up. A write that breaks one
//! panics before its transaction commits, so it is never written. Release builds (the
//! benchmarked ones) do not read the row.

use rusqlite::OptionalExtension;

use super::Change;
use vocabulary::State;

/// What a conditional write is checked against in debug builds: the row as the transaction
/// finds it just before the write.
#[derive(Debug)]
pub(super) struct Before {
    pub(super) version: u64,
    state: Option<State>,
    lease_epoch: u64,
}

/// The row's version, state and lease epoch, read in the write's own transaction (debug builds
/// only). The read is a no-op `UPDATE ... RETURNING` rather than a `SELECT` so that the
/// transaction takes the write lock first, exactly where the write itself would: a deferred
/// transaction that has read before its first write cannot wait for another worker's lock
/// (SQLite answers `SQLITE_BUSY_SNAPSHOT` at once), so a plain `SELECT` here could turn a wait
/// into an error.
pub(super) fn row_before(tx: &rusqlite::Connection, id: &str) -> rusqlite::Result<Option<Before>> {
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
pub(super) fn row_version(tx: &rusqlite::Connection, id: &str) -> rusqlite::Result<Option<u64>> {
    tx.prepare_cached("SELECT version FROM intents WHERE id = ?1")?
        .query_row([id], |r| r.get::<_, i64>(0))
        .optional()
        .map(|v| v.map(|v| v as u64))
}

/// The structural invariants of a state transition, checked before every write that will
/// apply, in every build: nothing leaves a terminal state, and a lease epoch (the fencing
/// token) never goes back. A breach is the reason the write is refused. (That the version
/// goes up is checked after the write, on the row, in debug builds: the statement itself
/// writes `version + 1`.)
pub(super) fn check_transition(before: &Before, change: &Change<'_>) -> Result<(), String> {
    let new = change.new;
    if before.state.is_some_and(State::is_terminal) && before.state != Some(new.state) {
        return Err(format!(
            "intent {}: would leave the terminal state {} for {}",
            new.id,
            before.state.map_or("?", State::as_str),
            new.state
        ));
    }
    if new.lease_epoch < before.lease_epoch {
        return Err(format!(
            "intent {}: lease epoch would go back from {} to {}",
            new.id, before.lease_epoch, new.lease_epoch
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::log::testing::transfer;
    use crate::log::{Change, Durability, IntentLog};
    use crate::model::{Evidence, Intent};
    use vocabulary::State;

    /// In every build, a write that would move a lease epoch back or take an intent out of a
    /// terminal state is refused before it is written, naming the intent and both values.
    #[test]
    fn an_illegal_transition_is_refused_and_not_written() {
        let dir = std::env::temp_dir().join(format!("twice-log-transitions-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut log = IntentLog::open(&dir.join("intents.sqlite"), Durability::Normal).unwrap();
        let mut row = transfer("a", 0);
        row.evidence = Evidence::default();
        log.record(&row).unwrap();
        let write = |log: &mut IntentLog, row: &Intent, new: &Intent| {
            let change = Change { new, expect_version: row.version, from_state: row.state, note: None };
            log.update(&[change]).map(|applied| applied[0]).map_err(|e| e.to_string())
        };
        let mut leased = row.clone();
        leased.lease_epoch = 2;
        assert_eq!(write(&mut log, &row, &leased), Ok(true));
        let row = log.get("a").unwrap().unwrap();

        let mut older = row.clone();
        older.lease_epoch = 1;
        let error = write(&mut log, &row, &older).expect_err("an epoch going back is refused");
        assert!(
            error.ends_with("intent a: lease epoch would go back from 2 to 1; the write was refused"),
            "{error}"
        );
        assert_eq!(log.get("a").unwrap().unwrap(), row, "the write was rolled back");

        let mut confirmed = row.clone();
        confirmed.state = State::Confirmed;
        assert_eq!(write(&mut log, &row, &confirmed), Ok(true));
        let row = log.get("a").unwrap().unwrap();
        let mut reopened = row.clone();
        reopened.state = State::Unknown;
        let error = write(&mut log, &row, &reopened).expect_err("leaving a terminal state is refused");
        assert!(
            error.ends_with(
                "intent a: would leave the terminal state confirmed for unknown; the write was refused"
            ),
            "{error}"
        );
        assert_eq!(log.get("a").unwrap().unwrap().state, State::Confirmed);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
