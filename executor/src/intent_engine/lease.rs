//! Leases: a worker takes an intent for `lease_ms` of its own clock before it decides
//! anything about it. The owner is `worker_id#incarnation`, so a restarted worker recognises
//! its earlier life's leases as dead; the epoch grows with every new owner and is the fencing
//! token sent to services that take one. The fencing on the executor's side is in `send`
//! (no send once the lease ran out) and `pass` (no outcome written after it ran out).

use super::Executor;
use crate::model::Intent;

impl Executor {
    /// Takes or renews the lease on `intent` in memory, or `None` if another live worker
    /// holds it.
    pub(super) fn lease(&self, intent: &Intent, now: u64) -> Option<Intent> {
        let mine = intent.lease_owner.as_deref() == Some(self.owner.as_str());
        let my_earlier_life = intent
            .lease_owner
            .as_deref()
            .and_then(|o| o.rsplit_once('#'))
            .is_some_and(|(worker, _)| worker == self.config.worker_id);
        let free = intent.lease_owner.is_none() || intent.lease_until_ms < now || mine || my_earlier_life;
        if !free {
            return None;
        }
        let mut leased = intent.clone();
        if !mine {
            leased.lease_owner = Some(self.owner.clone());
            leased.lease_epoch += 1;
        }
        leased.lease_until_ms = now + self.config.limits.lease_ms;
        leased.updated_ms = now;
        Some(leased)
    }
}
