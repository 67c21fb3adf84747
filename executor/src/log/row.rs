//! An intent as a row of the `intents` table, and back: the column list every statement
//! names, the insert that records a row (its payload, `params` and `after_ids`, written once,
//! here, with its hash), and the reading of a row, which tells a row that does not make
//! sense (an unknown state, unreadable evidence) from an error of SQLite.

use std::sync::LazyLock;

use rusqlite::{Row, params};

use crate::model::{Evidence, Intent};
use vocabulary::State;

pub(super) const COLUMNS: &str = "id, action, params, params_hash, idem_key, state, attempts, replaces, evidence, \
     maybe_executed, lease_owner, lease_epoch, lease_until_ms, version, created_ms, updated_ms, \
     key_first_sent_ms, last_sent_ms, after_ids";

/// The insert, written once per process (`prepare_cached` looks statements up by their text).
static INSERT_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO intents ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)"
    )
});

pub(super) fn evidence_json(evidence: &Evidence) -> String {
    serde_json::to_string(evidence).unwrap_or_else(|_| "{}".into())
}

fn after_json(after: &[String]) -> String {
    serde_json::to_string(after).unwrap_or_else(|_| "[]".into())
}

pub(super) fn insert(tx: &rusqlite::Connection, i: &Intent) -> rusqlite::Result<usize> {
    tx.prepare_cached(&INSERT_SQL)?.execute(params![
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

/// Column `idx` as text, borrowed from the row rather than copied: the columns only parsed
/// (state, evidence, after_ids). A value that is not text is refused with the error
/// `Row::get::<String>` gives.
fn text<'r>(r: &'r Row<'_>, idx: usize) -> rusqlite::Result<&'r str> {
    match r.get_ref(idx)?.as_str() {
        Ok(text) => Ok(text),
        Err(_) => r.get::<_, String>(idx).and_then(|_| Err(rusqlite::Error::InvalidColumnIndex(idx))),
    }
}

/// Reads a row; the inner error is a row that SQLite returned but that does not make sense.
pub(super) fn read_row(r: &Row<'_>) -> rusqlite::Result<Result<Intent, String>> {
    let state = text(r, 5)?;
    let evidence = text(r, 8)?;
    let Some(state) = State::parse(state) else {
        return Ok(Err(format!("unknown state \"{state}\"")));
    };
    let after: Vec<String> = match serde_json::from_str(text(r, 18)?) {
        Ok(a) => a,
        Err(e) => return Ok(Err(format!("after_ids: {e}"))),
    };
    let evidence: Evidence = match serde_json::from_str(evidence) {
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
