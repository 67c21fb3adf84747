//! Writing the log: recording intents (each id once, with its payload and its hash) and the
//! conditional writes a pass commits, several per transaction, each applied only if the row
//! still has the version it was read with and, for a signed transfer, only if its nonce is
//! still its own. A state change also appends to the `history` table, with the lease owner
//! that made it.

use rusqlite::{Connection, OptionalExtension, params};

use super::nonces::{Claim, claim_nonce, holds_nonce, release_nonce};
use super::query::GET_SQL;
use super::row::{evidence_json, insert, read_row};
use super::transition::{check_transition, row_before, row_version};
use super::tx::Tx;
use super::{Change, IntentLog, LogError, Recorded};
use crate::model::Intent;
use vocabulary::State;

impl IntentLog {
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
        let tx = Tx::immediate(&self.conn).map_err(err)?;
        let mut out = Vec::with_capacity(intents.len());
        let mut wrote = false;
        for intent in intents {
            let existing = tx
                .prepare_cached(&GET_SQL)
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

    /// Writes each changed intent if its row still has the version it was read with (and, for
    /// a row with a signed transaction, if no other intent holds its nonce), all in one
    /// transaction; returns, per intent, whether it was written. A state change also appends
    /// to the history.
    ///
    /// With [`Durability::Full`](super::Durability::Full), the commit waits for the disk
    /// unless every change in it confirms an intent that was already submitted or unknown:
    /// such a write is the one thing a power cut may take back, because what it records can
    /// be found again. Its intent would read as before (`submitted` or `unknown`) after the
    /// cut, and the next pass reconciles it as after any crash (a lookup, or a resend under
    /// the same key, which the service answers with the same success); where neither can
    /// tell, the intent becomes `unknown`, never sent blind. The write is on disk at the next commit that waits (the
    /// next proposal, or the marker before the next send: SQLite's WAL is written in order and
    /// one fsync covers every frame before it) or at the next checkpoint. Every other write
    /// waits: a proposal (`propose_ok` promises it), the markers written before a send (a
    /// resend after a cut must know the first send may have landed), and every failure,
    /// escalation or refusal (redoing those could turn a "failed" the caller acted on into an
    /// effect). Group commit thus costs one wait per batch for the proposal and one per pass
    /// for its sends.
    pub fn update(&mut self, changes: &[Change<'_>]) -> Result<Vec<bool>, LogError> {
        let lazy = self.synced && !changes.is_empty() && changes.iter().all(can_redo);
        if lazy {
            self.conn.execute_batch("PRAGMA synchronous = NORMAL").map_err(|e| self.sqlite(e))?;
        }
        let written = self.update_in_one_transaction(changes);
        if lazy {
            // Back to waiting for the disk whatever the write did: the next commit may be one
            // that must.
            self.conn.execute_batch("PRAGMA synchronous = FULL").map_err(|e| self.sqlite(e))?;
        }
        written
    }

    fn update_in_one_transaction(&mut self, changes: &[Change<'_>]) -> Result<Vec<bool>, LogError> {
        let path = self.path.clone();
        let err = move |source| LogError::Sqlite { path: path.clone(), source };
        let tx = Tx::deferred(&self.conn).map_err(err.clone())?;
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
            // Every build checks the transition against the row as this transaction finds it; a
            // breach refuses the write, and dropping the transaction rolls back its other rows.
            let before = row_before(&tx, &new.id).map_err(err.clone())?;
            if let Some(before) = &before
                && before.version == change.expect_version
            {
                check_transition(before, change)
                    .map_err(|problem| LogError::Transition { path: self.path.clone(), problem })?;
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
            if cfg!(debug_assertions)
                && n == 1
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

    /// Overwrites a stored payload without its hash: only for tests that prove a corrupted
    /// row is escalated rather than executed.
    #[doc(hidden)]
    pub fn corrupt_payload_for_tests(&mut self, id: &str, params: &str) -> Result<(), LogError> {
        self.conn
            .execute("UPDATE intents SET params = ?1 WHERE id = ?2", params![params, id])
            .map(|_| ())
            .map_err(|e| self.sqlite(e))
    }
}

/// Whether a power cut may take `change` back: it confirms an intent the log held as
/// submitted or unknown, which reconciliation finds confirmed again (see [`IntentLog::update`]).
fn can_redo(change: &Change<'_>) -> bool {
    change.new.state == State::Confirmed && matches!(change.from_state, State::Submitted | State::Unknown)
}

/// Appends one state change of `i` to the `history` table.
fn history(tx: &Connection, i: &Intent, from: Option<State>, note: &str) -> rusqlite::Result<usize> {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rusqlite::Connection;

    use crate::log::testing::transfer;
    use crate::log::{Durability, IntentLog};
    use crate::model::Evidence;

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

    /// A write that only confirms is redone by reconciliation if a power cut takes it; every
    /// other write is not, and must wait for the disk.
    #[test]
    fn only_a_confirmation_of_a_sent_intent_may_skip_the_wait() {
        use super::can_redo;
        use crate::log::Change;
        use vocabulary::State;
        let change = |from: State, to: State| {
            let mut new = transfer("t", 1);
            new.state = to;
            can_redo(&Change { new: &new, expect_version: 0, from_state: from, note: None })
        };
        assert!(change(State::Submitted, State::Confirmed));
        assert!(change(State::Unknown, State::Confirmed));
        assert!(!change(State::Recorded, State::Submitted), "the marker before a send waits");
        assert!(
            !change(State::Recorded, State::Confirmed),
            "a confirmation without a send is not found again"
        );
        assert!(!change(State::Submitted, State::Failed), "a failure the caller may act on waits");
        assert!(!change(State::Submitted, State::Escalated));
        assert!(!change(State::Submitted, State::Unknown));
    }

    /// A confirmation written without waiting is committed all the same (another connection
    /// reads it), and the log waits for the disk again afterwards.
    #[test]
    fn a_confirmation_is_committed_and_the_log_waits_again_after_it() {
        use crate::log::Change;
        use vocabulary::State;
        let dir = std::env::temp_dir().join(format!("twice-log-lazy-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("intents.sqlite");
        let mut log = IntentLog::open(&path, Durability::Full).unwrap();
        let row = transfer("t", 1);
        log.record_many(std::slice::from_ref(&row)).unwrap();
        let mut submitted = row.clone();
        submitted.state = State::Submitted;
        let written = log
            .update(&[Change { new: &submitted, expect_version: 0, from_state: State::Recorded, note: None }])
            .unwrap();
        assert_eq!(written, vec![true]);
        let mut confirmed = submitted.clone();
        confirmed.state = State::Confirmed;
        let written = log
            .update(&[Change {
                new: &confirmed,
                expect_version: 1,
                from_state: State::Submitted,
                note: None,
            }])
            .unwrap();
        assert_eq!(written, vec![true]);
        let sync: i64 = log.conn.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap();
        assert_eq!(sync, 2, "FULL again after the confirmation");
        let other = Connection::open(&path).unwrap();
        let state: String =
            other.query_row("SELECT state FROM intents WHERE id = 't'", [], |r| r.get(0)).unwrap();
        assert_eq!(state, "confirmed");
        drop(log);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
