//! Resolving an intent that may have taken effect: a resend under its key where the
//! contract makes that safe (`key_safe`), otherwise a lookup whose "not there" is believed
//! only once the settle and read-lag bounds have passed (`settled`).

use executor::Action;
use executor::config::{Acks, Contract, KeyPolicy};
use executor::services::{self, Lookup};

use super::store::{Rec, St};
use super::worker::Turn;
use super::{Bug, MARGIN_MS, Style, Worker};

impl Worker {
    /// A negative answer is final once every request sent could no longer land and every
    /// read could no longer lag.
    fn settled(&self, rec: &Rec, contract: &Contract, now: u64) -> bool {
        rec.last_sent_ms.is_none_or(|t| {
            now >= t
                + contract.settle_ms_max
                + contract.read_lag_ms_max
                + self.limits().request_timeout_ms
                + MARGIN_MS
        })
    }

    /// Whether a resend under the current key is a replay of the first send, if that landed.
    fn key_safe(&self, rec: &Rec, contract: &Contract, now: u64) -> bool {
        let honored = contract.idempotency_keys == KeyPolicy::Honored || self.has(Bug::KeysAssumedHonored);
        let retained = self.has(Bug::KeyOutlivesRetention)
            || rec.key_first_sent_ms.is_some_and(|t| {
                now + self.limits().request_timeout_ms + MARGIN_MS < t + contract.key_retention_ms
            });
        honored && contract.acks == Acks::Reliable && retained
    }

    /// An intent that may have taken effect: resend under its key where that is safe,
    /// otherwise look.
    pub(super) async fn resolve(&self, mut rec: Rec, action: &Action, from: St, turn: &mut Turn) {
        let Some(contract) = self.service(action).map(|s| s.contract.clone()) else { return };
        let now = self.now();
        if self.has(Bug::UniqueIdsAssumed) && matches!(action, Action::CreateWorkspace { .. }) {
            return self.send(rec, action, from, false, turn).await;
        }
        let paused_enough = rec
            .last_sent_ms
            .is_none_or(|t| now >= t + self.limits().request_timeout_ms * u64::from(rec.attempts.max(1)));
        let guarded = services::resend_is_guarded(action, &contract);
        if self.style == Style::KeyRetry
            && (self.key_safe(&rec, &contract, now) || guarded)
            && rec.attempts < self.limits().attempts_max
        {
            if !paused_enough {
                return;
            }
            if self.has(Bug::KeyOutlivesRetention) {
                // The key is believed to make this resend's answer the intent's answer.
                rec.maybe_executed = false;
            }
            let rotate = self.has(Bug::KeyPerAttempt);
            return self.send(rec, action, from, rotate, turn).await;
        }
        let found = self.lookup(&rec, action).await;
        self.decide(rec, action, from, found, &contract, turn).await;
    }

    pub(super) async fn lookup(&self, rec: &Rec, action: &Action) -> Lookup {
        match self.service(action) {
            Some(service) => {
                services::lookup(action, &rec.as_intent(), &self.config, service, self.transport.as_ref())
                    .await
            }
            None => Lookup::Failed { error: "service not configured".into() },
        }
    }

    /// What a lookup means for an intent that may have taken effect.
    async fn decide(
        &self,
        mut rec: Rec,
        action: &Action,
        from: St,
        found: Lookup,
        contract: &Contract,
        turn: &mut Turn,
    ) {
        let now = self.now();
        match found {
            Lookup::Found { external_id, params_match } => {
                rec.external_id = Some(external_id);
                rec.state = if params_match { St::Confirmed } else { St::Escalated };
                rec.reason =
                    Some(if params_match { "found by lookup" } else { "found with other parameters" }.into());
            }
            Lookup::Absent if self.settled(&rec, contract, now) || self.has(Bug::TrustsStaleRead) => {
                if rec.attempts >= self.limits().attempts_max {
                    rec.state = St::Failed;
                    rec.reason = Some("no effect, and none can appear any more".into());
                } else {
                    // Nothing landed and nothing can: a new send is safe. Where acks may lie
                    // the old key may hold a hollow success, so a new key.
                    rec.maybe_executed = false;
                    let rotate = contract.acks == Acks::MayLie || self.has(Bug::TrustsStaleRead);
                    return self.send(rec, action, from, rotate, turn).await;
                }
            }
            Lookup::Superseded { what } if self.settled(&rec, contract, now) => {
                rec.state = St::Failed;
                rec.reason = Some(format!("it can no longer take effect: {what}"));
            }
            Lookup::Absent
                if services::resend_is_guarded(action, contract)
                    && rec.attempts < self.limits().attempts_max =>
            {
                // Neither a conditional put nor a signed transaction can land twice.
                if rec.last_sent_ms.is_some_and(|t| now < t + self.limits().request_timeout_ms) {
                    return;
                }
                return self.send(rec, action, from, false, turn).await;
            }
            Lookup::Absent | Lookup::Failed { .. } | Lookup::Superseded { .. } => {
                if from != St::Submitted {
                    return;
                }
                rec.state = St::Unknown;
                rec.maybe_executed = true;
                rec.reason = Some("its sender stopped before recording the answer".into());
            }
        }
        if let Some(rec) = self.write(rec) {
            turn.note(from, &rec);
        }
    }
}
