//! The naive executor's store: the intent row (`Rec`, with its state `St`) and where rows
//! live (`Store`): a JSON file written whole and renamed into place, or memory for the
//! [`Bug::MemoryOnly`](super::Bug::MemoryOnly) mutant. Writes are compare-and-set on the
//! row's version.

use std::collections::BTreeMap;
use std::path::PathBuf;

use executor::model::Precondition;
use executor::signing::SignedTransfer;
use executor::{Action, Evidence};
use results::Claim;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum St {
    Recorded,
    Blocked,
    Submitted,
    Confirmed,
    Failed,
    Unknown,
    Escalated,
}

impl St {
    pub(super) fn name(self) -> &'static str {
        match self {
            St::Recorded => "recorded",
            St::Blocked => "blocked",
            St::Submitted => "submitted",
            St::Confirmed => "confirmed",
            St::Failed => "failed",
            St::Unknown => "unknown",
            St::Escalated => "escalated",
        }
    }

    pub(super) fn terminal(self) -> bool {
        matches!(self, St::Confirmed | St::Failed | St::Escalated)
    }
}

/// One intent as the store holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Rec {
    pub(super) id: String,
    pub(super) action: String,
    pub(super) params: Value,
    pub(super) replaces: Option<String>,
    pub(super) state: St,
    pub(super) key: String,
    pub(super) previous_keys: Vec<String>,
    pub(super) attempts: u32,
    /// An earlier send may have taken effect.
    pub(super) maybe_executed: bool,
    /// When the current key was first sent (its retention runs from about then).
    pub(super) key_first_sent_ms: Option<u64>,
    pub(super) last_sent_ms: Option<u64>,
    pub(super) external_id: Option<String>,
    pub(super) last_error: Option<String>,
    pub(super) reason: Option<String>,
    pub(super) lease_owner: Option<String>,
    pub(super) lease_epoch: u64,
    pub(super) lease_until_ms: u64,
    /// Bumped by every write; writes are compare-and-set on it.
    pub(super) version: u64,
    /// A put's condition, read before its first send.
    #[serde(default)]
    pub(super) precondition: Option<Precondition>,
    /// A transfer's signed transaction, recorded before its first broadcast.
    #[serde(default)]
    pub(super) tx_hash: Option<String>,
    #[serde(default)]
    pub(super) raw_tx: Option<String>,
    #[serde(default)]
    pub(super) nonce: Option<u64>,
    #[serde(default)]
    pub(super) from: Option<String>,
    /// The intents it comes after (a workflow's step).
    #[serde(default)]
    pub(super) after: Vec<String>,
    /// Its references' values, resolved from the predecessors' results before its first send.
    #[serde(default)]
    pub(super) resolved: BTreeMap<String, String>,
    /// The first refusal that needs a person's decision (401, 403, 400, 422): status and the
    /// service's own words. A row with one is never sent again.
    #[serde(default)]
    pub(super) decision: Option<(u16, String)>,
    /// On an escalated row: whether a send of it may have taken effect unproven.
    #[serde(default)]
    pub(super) could_duplicate: Option<bool>,
}

impl Rec {
    /// The action with its references' resolved values; `None` while one is unresolved.
    pub(super) fn action(&self) -> Option<Action> {
        let mut params = self.params.clone();
        for (name, _) in vocabulary::workflow::references(&self.params).ok()? {
            params[name.as_str()] = Value::from(self.resolved.get(&name)?.clone());
        }
        Action::parse(&self.action, &params).ok()
    }

    /// Whether some parameter reads an earlier intent's result.
    pub(super) fn has_references(&self) -> bool {
        vocabulary::workflow::references(&self.params).is_ok_and(|r| !r.is_empty())
    }

    /// The reference's intent type, for its request builders (they read `id` and `key`).
    pub(super) fn as_intent(&self) -> executor::Intent {
        executor::Intent {
            id: self.id.clone(),
            action: self.action.clone(),
            params: self.params.to_string(),
            params_hash: String::new(),
            key: self.key.clone(),
            state: vocabulary::State::Submitted,
            attempts: self.attempts,
            replaces: self.replaces.clone(),
            after: self.after.clone(),
            maybe_executed: self.maybe_executed,
            lease_owner: self.lease_owner.clone(),
            lease_epoch: self.lease_epoch,
            lease_until_ms: self.lease_until_ms,
            version: self.version,
            evidence: self.evidence(),
            created_ms: 0,
            updated_ms: 0,
            key_first_sent_ms: self.key_first_sent_ms,
            last_sent_ms: self.last_sent_ms,
        }
    }

    /// What the reference's builders read of a row beyond its id and key.
    pub(super) fn evidence(&self) -> Evidence {
        Evidence {
            precondition: self.precondition.clone(),
            tx_hash: self.tx_hash.clone(),
            raw_tx: self.raw_tx.clone(),
            nonce: self.nonce,
            from: self.from.clone(),
            ..Evidence::default()
        }
    }

    /// Escalated with nothing sent that can have taken effect: as good as failed for a
    /// replacement, and its nonce (if it signed one) is free.
    pub(super) fn nothing_done(&self) -> bool {
        (self.state == St::Failed || self.state == St::Escalated && self.could_duplicate == Some(false))
            && !self.maybe_executed
    }

    /// Whether a signed transaction holds a nonce for it: such an intent is never given up
    /// for want of attempts, since every later transfer waits behind its nonce, and its bytes
    /// land at most once however often they are broadcast.
    pub(super) fn holds_a_nonce(&self) -> bool {
        self.raw_tx.is_some()
    }

    pub(super) fn record_signed(&mut self, signed: SignedTransfer) {
        self.tx_hash = Some(signed.hash);
        self.raw_tx = Some(signed.raw);
        self.nonce = Some(signed.nonce);
        self.from = Some(signed.from);
    }

    /// The row without its signed transaction ([`Bug::SignatureInMemory`](super::Bug)).
    pub(super) fn without_signature(&self) -> Rec {
        Rec { tx_hash: None, raw_tx: None, nonce: None, from: None, ..self.clone() }
    }

    pub(super) fn claim(&self) -> Claim {
        Claim {
            id: self.id.clone(),
            state: self.state.name().into(),
            attempts: u64::from(self.attempts),
            evidence: json!({
                "key": self.key,
                "previous_keys": self.previous_keys,
                "external_id": self.external_id,
                "last_error": self.last_error,
                "reason": self.reason,
                "tx_hash": self.tx_hash,
                "resolved": self.resolved,
                "decision": self.decision.as_ref().map(|(status, error)| json!({"status": status, "error": error})),
                "could_duplicate": self.could_duplicate,
            }),
        }
    }
}

/// Where intents live: a JSON file (durable: written whole, then renamed into place), or
/// memory (the [`Bug::MemoryOnly`] mutant).
pub(super) enum Store {
    File(PathBuf),
    Memory(Vec<Rec>),
}

impl Store {
    pub(super) fn all(&self) -> Vec<Rec> {
        match self {
            Store::Memory(recs) => recs.clone(),
            Store::File(path) => match std::fs::read(path) {
                Ok(bytes) => serde_json::from_slice(&bytes).expect("the naive store is valid JSON"),
                Err(_) => Vec::new(),
            },
        }
    }

    fn save(&mut self, recs: Vec<Rec>) {
        match self {
            Store::Memory(held) => *held = recs,
            Store::File(path) => write_whole(path, &recs),
        }
    }

    pub(super) fn get(&self, id: &str) -> Option<Rec> {
        self.all().into_iter().find(|r| r.id == id)
    }

    /// Writes `rec` if the stored row still has `rec.version` (or, `blind`, whatever it
    /// has); the written row's version is one more. Returns the written row.
    pub(super) fn write(&mut self, mut rec: Rec, blind: bool) -> Option<Rec> {
        let mut all = self.all();
        let at = all.iter().position(|r| r.id == rec.id);
        match at {
            Some(i) if blind || all[i].version == rec.version => {
                rec.version = all[i].version + 1;
                all[i] = rec.clone();
            }
            Some(_) => return None,
            None => {
                rec.version = 1;
                all.push(rec.clone());
            }
        }
        self.save(all);
        Some(rec)
    }
}

/// Writes `value` as JSON to `path` whole: to a file beside it, then renamed into place, so
/// that a crash leaves the old file or the new one, never half of one.
pub(super) fn write_whole(path: &std::path::Path, value: &impl Serialize) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(value).expect("the naive state serializes"))
        .expect("the naive state is writable");
    std::fs::rename(&tmp, path).expect("the naive state is writable");
}
