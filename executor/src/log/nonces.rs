//! Nonce claims, the `nonces` table: each chain account's nonce belongs to one intent at most.
//! (A pass picks new nonces with the `NonceBook` of `intent_engine/prepare.rs`, which asks
//! [`IntentLog::claimed_nonces`].)
//!
//! A row whose evidence carries a signed transaction claims its account's nonce in the
//! `nonces` table, in the same transaction as the row: a nonce is claimed by one intent at
//! most, so two workers sharing the log never sign two transfers with one nonce. A transfer
//! that failed without ever being pooled gives its nonce back, so that no later transfer
//! waits for ever behind a nonce nobody will use.

use std::collections::BTreeSet;

use rusqlite::params;

use super::{IntentLog, LogError};
use crate::model::Intent;
use vocabulary::State;

impl IntentLog {
    /// The nonces of `account` that intents of this log have signed with.
    pub fn claimed_nonces(&self, account: &str) -> Result<BTreeSet<u64>, LogError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT nonce FROM nonces WHERE account = ?1")
            .map_err(|e| self.sqlite(e))?;
        let rows = stmt.query_map([account], |r| r.get::<_, i64>(0)).map_err(|e| self.sqlite(e))?;
        rows.map(|r| r.map(|n| n as u64)).collect::<Result<_, _>>().map_err(|e| self.sqlite(e))
    }
}

/// What a row's nonce claim found.
pub(super) enum Claim {
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
pub(super) fn holds_nonce(intent: &Intent) -> bool {
    let given_up = intent.state == State::Failed
        || (intent.state == State::Escalated && intent.evidence.could_duplicate == Some(false));
    !given_up || intent.maybe_executed
}

/// Claims the nonce of `intent`'s signed transaction for it, in the row's own transaction.
pub(super) fn claim_nonce(tx: &rusqlite::Connection, intent: &Intent) -> rusqlite::Result<Claim> {
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

/// Gives the nonce of `intent`'s signed transaction back, if `intent` holds it.
pub(super) fn release_nonce(tx: &rusqlite::Connection, intent: &Intent) -> rusqlite::Result<usize> {
    let (Some(account), Some(nonce)) = (&intent.evidence.from, intent.evidence.nonce) else {
        return Ok(0);
    };
    tx.prepare_cached("DELETE FROM nonces WHERE account = ?1 AND nonce = ?2 AND intent_id = ?3")?
        .execute(params![account, nonce as i64, intent.id])
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use crate::log::testing::transfer;
    use crate::log::{Change, Durability, IntentLog};
    use crate::model::{Evidence, Intent};
    use vocabulary::State;

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
}
