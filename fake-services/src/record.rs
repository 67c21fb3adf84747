//! What a fake remembers: the ledger of effects, the journal of requests, and the
//! idempotency keys it has seen. The shapes of a ledger's [`Effect`] and a journal's
//! [`JournalEntry`] are shared ([`vocabulary::record`]); this module keeps them.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use vocabulary::record::{Effect, JournalEntry};

use crate::wire::FakeResponse;

/// The append-only ledger of one service. It is never trimmed: it is the truth.
#[derive(Debug, Default)]
pub struct Ledger {
    effects: Vec<Effect>,
}

impl Ledger {
    /// Appends an effect and returns its sequence number: one past the last effect's, so that
    /// a ledger's sequence numbers only grow (whatever `seq` the effect came with).
    pub fn record(&mut self, mut effect: Effect) -> u64 {
        effect.seq = self.effects.len() as u64 + 1;
        let seq = effect.seq;
        // A checker orders effects by `seq`: one that went back would reorder what happened.
        // Checked in every build, as every invariant the checker's verdicts rest on.
        assert!(
            self.effects.last().is_none_or(|last| last.seq < seq),
            "a ledger's sequence numbers only grow"
        );
        self.effects.push(effect);
        seq
    }

    pub fn effects(&self) -> &[Effect] {
        &self.effects
    }
}

/// A bounded journal: at most `capacity` requests, and a count of those refused because it
/// was full (the service refuses them unseen, so that no entry is ever let go).
#[derive(Debug)]
pub struct Journal {
    entries: VecDeque<JournalEntry>,
    capacity: usize,
    next_seq: u64,
    refused: u64,
    /// Entries still `pending`: requests the fake is working on.
    pending: usize,
}

/// The outcome of a journal entry whose request has not ended.
pub const PENDING: &str = "pending";

/// Requests a journal keeps by default; past it the service refuses requests until a reset.
pub const JOURNAL_ENTRIES_MAX: usize = 100_000;

impl Default for Journal {
    fn default() -> Self {
        Journal::with_capacity(JOURNAL_ENTRIES_MAX)
    }
}

impl Journal {
    pub fn with_capacity(capacity: usize) -> Self {
        Journal { entries: VecDeque::new(), capacity, next_seq: 0, refused: 0, pending: 0 }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
    }

    /// Whether a new request would go past the capacity: the service refuses it unseen.
    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.capacity
    }

    /// Counts a request refused because the journal was full.
    pub fn refuse(&mut self) {
        self.refused += 1;
    }

    /// Starts an entry and returns its sequence number. The caller checks
    /// [`Journal::is_full`] first and refuses the request instead, so that the journal never
    /// passes its capacity (a debug build asserts it; a release build would keep an entry past
    /// the capacity rather than lose it).
    pub fn begin(&mut self, mut entry: JournalEntry) -> u64 {
        self.next_seq += 1;
        entry.seq = self.next_seq;
        if entry.outcome == PENDING {
            self.pending += 1;
        }
        self.entries.push_back(entry);
        assert!(
            self.entries.len() <= self.capacity,
            "a journal never passes its capacity: the service refuses a request once it is full"
        );
        self.next_seq
    }

    /// How many requests the fake is still working on (their entries are `pending`).
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Records how request `seq` ended; a no-op if the entry was already let go.
    /// `params`: what a refused write asked for (`JournalEntry::params`). Returns the entry
    /// as it now stands, for the request's log line.
    pub fn end(
        &mut self,
        seq: u64,
        at_ms: u64,
        outcome: &'static str,
        status: Option<u16>,
        replayed: bool,
        params: Option<serde_json::Value>,
    ) -> Option<&JournalEntry> {
        let first = self.entries.front().map(|e| e.seq)?;
        let index = seq.checked_sub(first)?;
        let entry = self.entries.get_mut(index as usize)?;
        if entry.outcome == PENDING {
            self.pending -= 1;
        }
        set_outcome(&mut entry.outcome, outcome);
        entry.status = status;
        entry.replayed = replayed;
        entry.ended_ms = Some(at_ms);
        entry.params = params;
        Some(entry)
    }

    /// Marks request `seq` `abandoned` if it has not ended: its caller went away (the
    /// connection closed) while the fake was still working on it, before any commit.
    /// Returns the entry if it was abandoned now.
    pub fn abandon(&mut self, seq: u64, at_ms: u64) -> Option<&JournalEntry> {
        let first = self.entries.front().map(|e| e.seq)?;
        let index = seq.checked_sub(first)?;
        let entry = self.entries.get_mut(index as usize).filter(|e| e.outcome == PENDING)?;
        self.pending -= 1;
        set_outcome(&mut entry.outcome, "abandoned");
        entry.ended_ms = Some(at_ms);
        Some(entry)
    }

    pub fn entries(&self) -> impl DoubleEndedIterator<Item = &JournalEntry> {
        self.entries.iter()
    }

    /// How many requests were refused because the journal was full.
    pub fn refused(&self) -> u64 {
        self.refused
    }
}

/// A hash map for ids and keys the fakes look up one at a time, hashed with [`IdHasher`].
pub type IdMap<V> = HashMap<String, V, BuildHasherDefault<IdHasher>>;

/// A fast, unkeyed hash for short strings (the multiply-rotate hash rustc uses for its own
/// tables). A fake's tables hold ids it made and keys its callers sent; it serves tests on
/// loopback, where nobody has a reason to craft colliding keys, and std's SipHash cost more
/// than the rest of a key lookup.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher {
    hash: u64,
}

impl IdHasher {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(Self::SEED);
    }
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, byte: u8) {
        self.add(u64::from(byte));
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}

/// Room enough for every outcome a journal entry takes, so that ending one writes in place.
const OUTCOME_BYTES: usize = 16;

/// A `pending` outcome with room for the one that ends it.
pub fn pending_outcome() -> String {
    let mut outcome = String::with_capacity(OUTCOME_BYTES);
    outcome.push_str(PENDING);
    outcome
}

fn set_outcome(slot: &mut String, outcome: &str) {
    slot.clear();
    slot.push_str(outcome);
}

/// What the service remembers of an idempotency key.
#[derive(Debug, Clone)]
pub enum KeyState {
    /// The first request with this key is still executing.
    InFlight,
    /// The first result, replayed to every later request with the key.
    Done(FakeResponse),
}

#[derive(Debug, Clone)]
struct KeyEntry {
    created_ms: u64,
    fingerprint: String,
    state: KeyState,
}

/// What a key lookup found.
#[derive(Debug, Clone)]
pub enum KeyLookup {
    New,
    InFlight,
    Replay(FakeResponse),
    /// The key was first used with other parameters.
    Mismatch,
    /// A new key, and the store holds as many keys within retention as it may.
    Full,
}

/// Idempotency keys, pruned by age against the service clock.
///
/// A hash map: keys are only ever looked up one at a time, never listed in order, and a tree
/// of hundreds of thousands of keys costs a string comparison per level and a large node
/// allocation every few inserts.
#[derive(Debug, Default)]
pub struct KeyStore {
    keys: IdMap<KeyEntry>,
}

impl KeyStore {
    /// Looks `key` up, treating entries at least `retention_ms` old as pruned. A new key is
    /// reserved as in flight, unless `keys_max` keys within retention are held already.
    pub fn lookup(
        &mut self,
        key: &str,
        fingerprint: String,
        now_ms: u64,
        retention_ms: u64,
        keys_max: usize,
    ) -> KeyLookup {
        if let Some(entry) = self.keys.get(key)
            && now_ms.saturating_sub(entry.created_ms) < retention_ms
        {
            return if entry.fingerprint != fingerprint {
                KeyLookup::Mismatch
            } else {
                match &entry.state {
                    KeyState::InFlight => KeyLookup::InFlight,
                    KeyState::Done(response) => KeyLookup::Replay(response.clone()),
                }
            };
        }
        if self.keys.len() >= keys_max && !self.keys.contains_key(key) {
            // Only keys past retention may go; a key within it still answers a retry.
            self.forget(now_ms, retention_ms);
            if self.keys.len() >= keys_max {
                return KeyLookup::Full;
            }
        }
        self.keys
            .insert(key.to_string(), KeyEntry { created_ms: now_ms, fingerprint, state: KeyState::InFlight });
        KeyLookup::New
    }

    /// Saves the first result for `key`.
    pub fn complete(&mut self, key: &str, response: FakeResponse) {
        if let Some(entry) = self.keys.get_mut(key) {
            entry.state = KeyState::Done(response);
        }
    }

    /// Drops a reservation whose request never executed (it was cancelled before the commit).
    pub fn release(&mut self, key: &str) {
        if matches!(self.keys.get(key), Some(KeyEntry { state: KeyState::InFlight, .. })) {
            self.keys.remove(key);
        }
    }

    /// Forgets every key at least `older_than_ms` old.
    pub fn forget(&mut self, now_ms: u64, older_than_ms: u64) {
        self.keys.retain(|_, e| now_ms.saturating_sub(e.created_ms) < older_than_ms);
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok() -> FakeResponse {
        FakeResponse::json(200, &serde_json::json!({"id": "re_1"}))
    }

    #[test]
    fn keys_replay_until_retention_then_start_over() {
        let mut keys = KeyStore::default();
        assert!(matches!(keys.lookup("k", "a".into(), 0, 100, 10), KeyLookup::New));
        assert!(matches!(keys.lookup("k", "a".into(), 10, 100, 10), KeyLookup::InFlight));
        keys.complete("k", ok());
        assert!(matches!(keys.lookup("k", "a".into(), 99, 100, 10), KeyLookup::Replay(r) if r == ok()));
        assert!(matches!(keys.lookup("k", "b".into(), 99, 100, 10), KeyLookup::Mismatch));
        assert!(matches!(keys.lookup("k", "b".into(), 100, 100, 10), KeyLookup::New), "pruned at retention");
    }

    #[test]
    fn forget_and_release_drop_keys() {
        let mut keys = KeyStore::default();
        keys.lookup("old", "a".into(), 0, 1_000, 10);
        keys.complete("old", ok());
        keys.lookup("young", "a".into(), 90, 1_000, 10);
        keys.complete("young", ok());
        keys.forget(100, 50);
        assert_eq!(keys.len(), 1);
        keys.forget(100, 0);
        assert!(keys.is_empty());
        keys.lookup("k", "a".into(), 0, 1_000, 10);
        keys.release("k");
        assert!(keys.is_empty());
    }

    fn entry() -> JournalEntry {
        JournalEntry {
            seq: 0,
            at_ms: 0,
            method: "GET".into(),
            path: "/".into(),
            idempotency_key: None,
            request_id: "req".into(),
            origin: None,
            faults: vec![],
            outcome: "pending".into(),
            status: None,
            replayed: false,
            ended_ms: None,
            params: None,
        }
    }

    fn effect(seq: u64) -> Effect {
        Effect {
            seq,
            at_ms: 0,
            kind: "refund.created".into(),
            object_id: "re_1".into(),
            params: serde_json::json!({}),
            idempotency_key: None,
            fencing_token: None,
            request_id: "req".into(),
        }
    }

    #[test]
    fn the_journal_is_bounded_and_ends_entries_by_seq() {
        let mut journal = Journal::with_capacity(2);
        let entry = entry();
        for _ in 0..2 {
            assert!(!journal.is_full());
            journal.begin(entry.clone());
        }
        assert!(journal.is_full(), "full at capacity: the service refuses the next request");
        journal.refuse();
        assert_eq!(journal.pending(), 2);
        journal.end(1, 5, "answered", Some(200), false, None);
        journal.end(0, 5, "reset", None, false, None);
        let outcomes: Vec<_> = journal.entries().map(|e| (e.seq, e.outcome.as_str())).collect();
        assert_eq!(outcomes, vec![(1, "answered"), (2, "pending")], "no entry let go, seq 0 is none");
        assert_eq!(journal.refused(), 1);
        assert_eq!(journal.pending(), 1);
        journal.abandon(2, 6);
        journal.abandon(2, 7);
        assert_eq!(journal.pending(), 0, "each ending counted once");
    }

    /// Filled to its capacity, a journal is full: the service refuses (and counts) every
    /// request after that instead of appending it, so the journal stays at its capacity; a
    /// capacity lowered below what it holds keeps every entry and refuses from then on.
    #[test]
    fn a_full_journal_refuses_and_stays_at_its_capacity() {
        let mut journal = Journal::with_capacity(3);
        for _ in 0..10 {
            if journal.is_full() {
                journal.refuse();
            } else {
                journal.begin(entry());
            }
            assert!(journal.entries().count() <= journal.capacity());
        }
        assert_eq!((journal.entries().count(), journal.refused()), (3, 7));
        let seqs: Vec<u64> = journal.entries().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3], "the first requests are kept, none let go");
        journal.set_capacity(2);
        assert!(journal.is_full());
        assert_eq!(journal.entries().count(), 3, "a lower capacity lets no entry go");
    }

    /// The invariant's assertion: an append past the capacity is a bug in the caller.
    #[test]
    fn appending_to_a_full_journal_fails_an_assertion() {
        let mut journal = Journal::with_capacity(1);
        journal.begin(entry());
        let second = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| journal.begin(entry())));
        let message = second.expect_err("the append past the capacity panics");
        let text = message
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| message.downcast_ref::<String>().map(String::as_str))
            .unwrap_or_default();
        assert!(text.starts_with("a journal never passes its capacity"), "{text}");
    }

    /// Whatever `seq` an effect comes with, the ledger numbers it one past the last: sequence
    /// numbers only grow.
    #[test]
    fn a_ledgers_sequence_numbers_only_grow() {
        let mut ledger = Ledger::default();
        let given = [0, 99, 5, 5, 1];
        let returned: Vec<u64> = given.iter().map(|&seq| ledger.record(effect(seq))).collect();
        assert_eq!(returned, vec![1, 2, 3, 4, 5]);
        let seqs: Vec<u64> = ledger.effects().iter().map(|e| e.seq).collect();
        assert_eq!(seqs, returned);
        assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    }

    /// A new key past the bound is refused unless keys past retention can go; a key within
    /// retention is never forgotten early.
    #[test]
    fn the_key_store_is_bounded_without_forgetting_live_keys() {
        let mut keys = KeyStore::default();
        assert!(matches!(keys.lookup("a", "f".into(), 0, 100, 2), KeyLookup::New));
        assert!(matches!(keys.lookup("b", "f".into(), 50, 100, 2), KeyLookup::New));
        assert!(matches!(keys.lookup("c", "f".into(), 60, 100, 2), KeyLookup::Full));
        assert!(
            matches!(keys.lookup("a", "f".into(), 60, 100, 2), KeyLookup::InFlight),
            "a held key answers"
        );
        assert!(matches!(keys.lookup("c", "f".into(), 100, 100, 2), KeyLookup::New), "a past retention went");
        assert_eq!(keys.len(), 2);
    }
}
