//! Resolving an intent that may have taken effect: a resend under its key where the
//! contract makes that safe (`key_safe`), otherwise a lookup whose "not there" is believed
//! only once the settle and read-lag bounds have passed (`settled`).

use executor::Action;
use executor::services::{self, Lookup};
use vocabulary::{Contract, KeyPolicy};

use super::store::{Rec, St};
use super::worker::Turn;
use super::{Bug, Style, Worker};

impl Worker {
    /// A negative answer is final once every request sent could no longer land and every
    /// read could no longer lag.
    fn settled(&self, rec: &Rec, contract: &Contract, now: u64) -> bool {
        let sent = if self.has(Bug::SettleFromFirstSend) { rec.key_first_sent_ms } else { rec.last_sent_ms };
        sent.is_none_or(|t| {
            now >= t
                + contract.settle_ms_max
                + contract.read_lag_ms_max
                + self.limits().request_timeout_ms
                + self.margin_ms()
        })
    }

    /// Whether a resend under the current key is a replay of the first send, if that landed.
    /// Never where a success may be hollow (acks that may lie, an accepted message): the key
    /// would replay the hollow answer.
    fn key_safe(&self, rec: &Rec, action: &Action, contract: &Contract, now: u64) -> bool {
        let honored = contract.idempotency_keys == KeyPolicy::Honored || self.has(Bug::KeysAssumedHonored);
        let retained = self.has(Bug::KeyOutlivesRetention)
            || rec.key_first_sent_ms.is_some_and(|t| {
                now + self.limits().request_timeout_ms + self.margin_ms() < t + contract.key_retention_ms
            });
        honored && !services::success_may_be_hollow(action, contract) && retained
    }

    /// An intent that may have taken effect: resend under its key where that is safe,
    /// otherwise look.
    pub(super) async fn resolve(&self, mut rec: Rec, action: &Action, from: St, turn: &mut Turn) {
        let Some(contract) = self.service(action).map(|s| s.contract.clone()) else { return };
        let now = self.now();
        if self.has(Bug::UniqueIdsAssumed) && matches!(action, Action::CreateWorkspace { .. }) {
            return self.send(rec, action, from, false, turn).await;
        }
        if from == St::Submitted {
            // Its sender stopped (or was stopped) before recording the answer: that send may
            // have landed, so a resend's definite "not executed" does not make it unsent.
            rec.maybe_executed = true;
        }
        let paused_enough =
            rec.last_sent_ms.is_none_or(|t| now >= t + self.backoff_ms() * u64::from(rec.attempts.max(1)));
        let guarded = services::resend_is_guarded(action, &contract);
        if self.style == Style::KeyRetry
            && (self.key_safe(&rec, action, &contract, now) || guarded)
            && rec.attempts < self.limits().attempts_max
            && rec.decision.is_none()
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
        let looked_at_ms = self.now();
        let found = self.reconciling_lookup(&mut rec, action).await;
        self.decide(rec, action, from, (found, looked_at_ms), &contract, turn).await;
    }

    /// The lookup that resolves an uncertain intent. With [`Bug::VerdictBeforeLookup`] the
    /// row says `failed` while the question is out, and is put back once the answer is in
    /// (`rec` follows the row's version, so the caller's write still applies).
    pub(super) async fn reconciling_lookup(&self, rec: &mut Rec, action: &Action) -> Lookup {
        if !self.has(Bug::VerdictBeforeLookup) {
            return self.lookup(rec, action).await;
        }
        let mut guess = rec.clone();
        guess.state = St::Failed;
        guess.reason = Some("no effect found (the lookup is on its way)".into());
        let Some(written) = self.write(guess) else {
            return Lookup::Failed { error: "store conflict".into() };
        };
        rec.version = written.version;
        let found = self.lookup(rec, action).await;
        match self.write(rec.clone()) {
            Some(restored) => rec.version = restored.version,
            None => return Lookup::Failed { error: "store conflict".into() },
        }
        found
    }

    pub(super) async fn lookup(&self, rec: &Rec, action: &Action) -> Lookup {
        let Some(service) = self.service(action) else {
            return Lookup::Failed { error: "service not configured".into() };
        };
        let found =
            services::lookup(action, &rec.as_intent(), &self.config, service, self.transport.as_ref()).await;
        if let Lookup::Found { external_id, .. } = &found
            && self.has(Bug::ServiceClockTrusted)
            && self.stamped_too_late(rec, action, external_id).await
        {
            return Lookup::Absent;
        }
        found
    }

    /// [`Bug::ServiceClockTrusted`]: whether the service stamped the effect `id` later than
    /// any send of `rec` could have landed, comparing the service's stamp with this
    /// executor's clock.
    async fn stamped_too_late(&self, rec: &Rec, action: &Action, id: &str) -> bool {
        let Some(service) = self.service(action) else { return false };
        let request = services::lookup_request(action, &rec.as_intent(), &self.config, service, None);
        let Ok(response) = self.transport.send(request).await else { return false };
        let created_s = response.json().and_then(|page| {
            page.get("data")?
                .as_array()?
                .iter()
                .find(|item| item.get("id").and_then(|v| v.as_str()) == Some(id))?
                .get("created")?
                .as_u64()
        });
        let (Some(created_s), Some(sent)) = (created_s, rec.last_sent_ms) else { return false };
        // Stamps are whole seconds: a second of slack.
        let latest = sent
            + service.contract.settle_ms_max
            + self.limits().request_timeout_ms
            + self.margin_ms()
            + 1000;
        created_s * 1000 > latest
    }

    /// What a lookup, and when it was sent, means for an intent that may have taken effect.
    pub(super) async fn decide(
        &self,
        mut rec: Rec,
        action: &Action,
        from: St,
        (found, looked_at_ms): (Lookup, u64),
        contract: &Contract,
        turn: &mut Turn,
    ) {
        let now = self.now();
        let looked_at_ms = if self.has(Bug::SettledWhenRead) { now } else { looked_at_ms };
        match found {
            Lookup::Found { external_id, params_match } => {
                rec.external_id = Some(external_id);
                rec.state = if params_match { St::Confirmed } else { St::Escalated };
                if params_match {
                    rec.decision = None;
                } else {
                    rec.could_duplicate = Some(true);
                }
                rec.reason =
                    Some(if params_match { "found by lookup" } else { "found with other parameters" }.into());
            }
            // Refused for a decision, and no earlier send landed or can: the person decides.
            Lookup::Absent if rec.decision.is_some() && self.settled(&rec, contract, looked_at_ms) => {
                rec.maybe_executed = false;
                if self.choices.refusals_fail {
                    rec.state = St::Failed;
                    rec.reason = Some("refused, and nothing landed: never sent again".into());
                } else {
                    rec.state = St::Escalated;
                    rec.could_duplicate = Some(false);
                    rec.reason = Some("refused, and nothing landed: a person must decide".into());
                }
            }
            // Settled as of when the lookup was sent: a worker paused before reading its answer
            // must not take an old "not there" for a final one.
            Lookup::Absent
                if self.settled(&rec, contract, looked_at_ms) || self.has(Bug::TrustsStaleRead) =>
            {
                if rec.attempts >= self.limits().attempts_max && !rec.holds_a_nonce() {
                    rec.state = St::Failed;
                    rec.reason = Some("no effect, and none can appear any more".into());
                } else {
                    // Nothing landed and nothing can: a new send is safe. Where acks may lie
                    // the old key may hold a hollow success, so a new key.
                    rec.maybe_executed = false;
                    let hollow =
                        services::success_may_be_hollow(action, contract) && !self.has(Bug::OldKeyResend);
                    let rotate = hollow || self.has(Bug::TrustsStaleRead);
                    return self.send(rec, action, from, rotate, turn).await;
                }
            }
            Lookup::Superseded { what } if self.settled(&rec, contract, looked_at_ms) => {
                rec.state = St::Failed;
                rec.reason = Some(format!("it can no longer take effect: {what}"));
            }
            Lookup::Absent
                if services::resend_is_guarded(action, contract)
                    && (rec.attempts < self.limits().attempts_max || rec.holds_a_nonce())
                    && rec.decision.is_none() =>
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
