//! What a fake still has to do that can change its ledger ([`Pending`]): a request it is still
//! working on, a late commit waiting for its time, and (from the services that do work after
//! the answer) a delivery still due or a transaction waiting in the pool. A settled fake has
//! none, and its ledger can only grow by new requests.
//!
//! [`LateCommits`] is the core's register of late commits (`commit_after_timeout`): each runs
//! on a task of its own after its caller was answered or went away, so the journal no longer
//! shows it, and only this register can name it.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// What kind of pending work a [`Pending`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PendingKind {
    /// A request the fake is still working on: its journal entry is `pending`.
    Request,
    /// A write that commits later (`commit_after_timeout`), whether or not its caller is still
    /// there.
    LateCommit,
    /// A message accepted and not yet in its recipient's inbox.
    Delivery,
    /// A webhook event not yet answered 2xx by an endpoint, with attempts left.
    Webhook,
    /// A payment that happens only once an application listens for its event (registers a
    /// webhook endpoint that wants it): a scenario's trigger.
    AwaitingListener,
    /// A transaction in the pool that a block will take by itself.
    PooledTx,
    /// A transaction in the pool that no block can take until its sender sends something
    /// more (the nonce before it, or funds): geth's "queued".
    QueuedTx,
}

impl PendingKind {
    /// Every kind, for a reader that has only a kind's name.
    pub const ALL: [PendingKind; 7] = [
        PendingKind::Request,
        PendingKind::LateCommit,
        PendingKind::Delivery,
        PendingKind::Webhook,
        PendingKind::AwaitingListener,
        PendingKind::PooledTx,
        PendingKind::QueuedTx,
    ];

    /// The kind called `name` ([`PendingKind::name`]).
    pub fn named(name: &str) -> Option<PendingKind> {
        PendingKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The kind's name in reports: `request`, `late-commit`, `delivery`, `webhook`,
    /// `awaiting-listener`, `pooled-tx`, `queued-tx`.
    pub fn name(self) -> &'static str {
        match self {
            PendingKind::Request => "request",
            PendingKind::LateCommit => "late-commit",
            PendingKind::Delivery => "delivery",
            PendingKind::Webhook => "webhook",
            PendingKind::AwaitingListener => "awaiting-listener",
            PendingKind::PooledTx => "pooled-tx",
            PendingKind::QueuedTx => "queued-tx",
        }
    }

    /// Whether it ends without anyone doing anything more: within the service's settle bound,
    /// or by its due time. A queued transaction does not: it waits for its sender; nor does a
    /// payment waiting for an application to listen.
    pub fn ends_by_itself(self) -> bool {
        !matches!(self, PendingKind::QueuedTx | PendingKind::AwaitingListener)
    }
}

/// One thing a fake still has to do that can change its ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// The service.
    pub service: &'static str,
    pub kind: PendingKind,
    /// The request it comes from, as `METHOD path`, where the fake knows it.
    pub request: Option<String>,
    /// That request's id (its journal entry's, and the effect's `request_id` once it lands).
    pub request_id: Option<String>,
    /// Service time (ms since the epoch, the service's own clock) when it is due; `None` for
    /// a request still being worked on (it ends within the service's settle bound) and for a
    /// queued transaction (it waits for its sender).
    pub due_ms: Option<u64>,
    /// What it is, in words, beyond its kind and request (which message, which transaction).
    pub detail: String,
}

/// One late commit waiting for its time.
#[derive(Debug, Clone)]
pub(crate) struct LateCommit {
    pub(crate) request: String,
    pub(crate) request_id: String,
    pub(crate) due_ms: u64,
}

/// The late commits of one service, from the moment each is scheduled until it has committed.
/// Kept outside the service's state, which a reset replaces: a late commit scheduled before a
/// reset still commits after it.
#[derive(Debug, Default)]
pub(crate) struct LateCommits {
    next: u64,
    waiting: BTreeMap<u64, LateCommit>,
}

impl LateCommits {
    /// Registers a late commit; returns the number that [`LateCommits::done`] takes.
    pub(crate) fn add(&mut self, late: LateCommit) -> u64 {
        self.next += 1;
        self.waiting.insert(self.next, late);
        self.next
    }

    pub(crate) fn done(&mut self, number: u64) {
        self.waiting.remove(&number);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &LateCommit> {
        self.waiting.values()
    }
}

/// The register's lock. A panic while holding it left nothing half-made (each change is one
/// map operation), so a poisoned lock is taken as it is.
pub(crate) fn lock(late: &Mutex<LateCommits>) -> MutexGuard<'_, LateCommits> {
    late.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serve reads a kind back from its name in a report: every name names its kind.
    #[test]
    fn every_kind_is_found_by_its_name() {
        for kind in PendingKind::ALL {
            assert_eq!(PendingKind::named(kind.name()), Some(kind));
        }
        assert_eq!(PendingKind::named("held-at-step"), None);
    }
}
