//! Sending: what a first send needs (a put's precondition, a transfer's signature), the
//! write request minus what a bug leaves out, and what an answer makes of the intent (a
//! [`Style::LookupFirst`](super::Style::LookupFirst) worker reads back at once).

use executor::Action;
use executor::services::{self, Lookup, WriteOutcome};
use executor::world::{HttpRequest, HttpResponse, SendError};
use serde_json::json;
use vocabulary::protocol::Service;
use vocabulary::{Acks, Reads};

use super::store::{Rec, St};
use super::worker::Turn;
use super::{Bug, Style, Worker};

impl Worker {
    /// Marks the intent submitted, sends it, and records what the answer means.
    pub(super) async fn send(&self, mut rec: Rec, action: &Action, from: St, rotate: bool, turn: &mut Turn) {
        // The bug: a step's references are read again from the services at every send, as
        // if the predecessors' results could only be trusted fresh.
        let reresolved;
        let action = if self.has(Bug::ReResolve) && rec.has_references() {
            self.resolve_from_services(&mut rec).await;
            match rec.action() {
                Some(a) => {
                    reresolved = a;
                    &reresolved
                }
                None => return,
            }
        } else {
            action
        };
        let Some(service) = self.service(action).cloned() else { return };
        let prepared = services::needs_preparation(action, &rec.evidence(), &service.contract);
        if prepared && let Err(error) = self.prepare(&mut rec, action, &service).await {
            if from == St::Recorded {
                rec.attempts += 1;
                rec.last_sent_ms = Some(self.now());
                rec.last_error = Some(error);
                if rec.attempts >= self.limits().attempts_max {
                    rec.state = St::Failed;
                    rec.reason = Some("never sent: its first send could not be prepared".into());
                }
                if let Some(rec) = self.write(rec) {
                    turn.note(from, &rec);
                }
            }
            return;
        }
        // From here to the write nothing awaits: a nonce allocated above is claimed by the
        // write before another intent's turn can allocate.
        let now = self.now();
        if rotate {
            let old = std::mem::replace(&mut rec.key, self.new_key());
            rec.previous_keys.push(old);
            rec.key_first_sent_ms = None;
        }
        rec.state = St::Submitted;
        rec.attempts += 1;
        rec.key_first_sent_ms.get_or_insert(now);
        rec.last_sent_ms = Some(now);
        // Durable before a byte leaves; [`Bug::SignatureInMemory`] leaves out the transaction
        // it has just signed, which only the write of the broadcast's answer records.
        let unsigned =
            prepared && self.has(Bug::SignatureInMemory) && matches!(action, Action::Transfer { .. });
        let durable = if unsigned { rec.without_signature() } else { rec.clone() };
        let Some(mut written) = self.write(durable) else { return };
        if unsigned {
            written = Rec { version: written.version, ..rec };
        }
        let mut rec = written;
        turn.note(from, &rec);
        turn.sent = true;
        loop {
            if self.leases() && self.now() >= rec.lease_until_ms {
                return;
            }
            let outcome = match self.request(&rec, action, &service) {
                Ok(request) => {
                    let answer = self.transport.send(request).await;
                    self.classify(action, &rec, answer)
                }
                Err(error) => WriteOutcome::NotExecuted { error },
            };
            // A message is read back in its inbox whatever the contract says: its 200 only
            // says the API accepted it.
            let read_back_done = match action {
                Action::SendMessage { .. } => !self.has(Bug::TrustThe202),
                _ => {
                    (service.contract.acks == Acks::MayLie && !self.has(Bug::TrustsAck))
                        || matches!(action, Action::Transfer { .. })
                }
            };
            let read_back = match outcome {
                WriteOutcome::Done { .. } if read_back_done => Some(self.lookup(&rec, action).await),
                WriteOutcome::Conflict { .. } => Some(self.lookup(&rec, action).await),
                // A refused resend: did an earlier send land?
                WriteOutcome::NeedsDecision { .. } if rec.maybe_executed => {
                    Some(self.lookup(&rec, action).await)
                }
                _ => None,
            };
            // Still ours? A worker that lost its lease while the request was out writes nothing.
            let now = self.now();
            if !self.unleased() {
                let current = self.store().get(&rec.id);
                let expired = self.leases() && now > rec.lease_until_ms;
                if current.is_none_or(|c| c.version != rec.version) || expired {
                    return;
                }
            }
            let strong = service.contract.reads == Reads::Strong;
            match self.outcome(rec, action, outcome, read_back, strong).await {
                Next::Write(new) => {
                    if let Some(new) = self.write(new) {
                        turn.note(St::Submitted, &new);
                    }
                    return;
                }
                Next::SendAgain(mut again, rotate) => {
                    if rotate {
                        let old = std::mem::replace(&mut again.key, self.new_key());
                        again.previous_keys.push(old);
                        again.key_first_sent_ms = None;
                    }
                    again.attempts += 1;
                    again.key_first_sent_ms.get_or_insert(now);
                    again.last_sent_ms = Some(now);
                    match self.write(again) {
                        Some(written) => rec = written,
                        None => return,
                    }
                }
                Next::Nothing => return,
            }
        }
    }

    /// [`Bug::ReResolve`]: every reference read from the service that holds the predecessor's
    /// effect (an object's ETag by a HEAD); a result it cannot read there keeps the recorded
    /// value.
    async fn resolve_from_services(&self, rec: &mut Rec) {
        let Ok(references) = vocabulary::workflow::references(&rec.params) else { return };
        for (name, reference) in references {
            let Some(predecessor) = self.store().get(&reference.from) else { continue };
            let Some(action) = predecessor.action() else { continue };
            let Some(service) = self.service(&action).cloned() else { continue };
            if reference.field != "etag" {
                continue;
            }
            let read =
                services::read_precondition(&action, &self.config, &service, self.transport.as_ref()).await;
            if let Ok(executor::model::Precondition::IfMatch(etag)) = read {
                rec.resolved.insert(name, reference.render(&etag));
            }
        }
    }

    /// The write request for `rec`, as the reference builds it, minus what a bug leaves out.
    fn request(&self, rec: &Rec, action: &Action, service: &Service) -> Result<HttpRequest, String> {
        let mut request =
            services::write_request(action, &rec.as_intent(), &self.config, service, rec.lease_epoch)?;
        let keyless = self.has(Bug::NaiveRetry) && rec.attempts > 1
            || self.has(Bug::UniqueIdsAssumed) && rec.maybe_executed;
        if keyless {
            request.headers.retain(|(name, _)| name != "idempotency-key");
        }
        if self.has(Bug::ConstantFencingToken) {
            for (name, value) in &mut request.headers {
                if name == "fencing-token" {
                    *value = "1".into();
                }
            }
        } else if !self.leases() {
            request.headers.retain(|(name, _)| name != "fencing-token");
        }
        if self.has(Bug::Unfenced) || self.has(Bug::UnconditionalResend) && rec.attempts > 1 {
            request.headers.retain(|(name, _)| name != "if-match" && name != "if-none-match");
        }
        Ok(request)
    }

    /// Reads and records what a first send needs: a put's precondition, a transfer's
    /// signature with the lowest nonce at or above the node's pending one that no intent of
    /// the store holds.
    async fn prepare(&self, rec: &mut Rec, action: &Action, service: &Service) -> Result<(), String> {
        match action {
            Action::PutObject { .. } => {
                let found =
                    services::read_precondition(action, &self.config, service, self.transport.as_ref())
                        .await?;
                rec.precondition = Some(found);
                Ok(())
            }
            Action::Transfer { .. } => {
                let key = services::chain_key(&self.config)?;
                let facts =
                    services::chain_facts(key.address(), &self.config, service, self.transport.as_ref())
                        .await?;
                let taken: Vec<u64> = self
                    .store()
                    .all()
                    .iter()
                    .filter(|r| r.from.as_deref() == Some(key.address()))
                    // A transfer that failed (or was escalated for a decision) without reaching
                    // the node leaves its nonce unused.
                    .filter(|r| !r.nothing_done())
                    .filter_map(|r| r.nonce)
                    .collect();
                let mut nonce = facts.pending_nonce;
                while taken.contains(&nonce) {
                    nonce += 1;
                }
                let signed = key.sign_transfer(&facts.transfer(action, nonce)?).map_err(|e| e.to_string())?;
                rec.record_signed(signed);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// [`Bug::ReSignAfterTimeout`]: a new transaction for the same transfer, with the nonce the
    /// node says is next.
    async fn resign(&self, rec: &mut Rec, action: &Action) -> Result<(), String> {
        let service = self.service(action).ok_or("no chain service")?;
        let key = services::chain_key(&self.config)?;
        let facts =
            services::chain_facts(key.address(), &self.config, service, self.transport.as_ref()).await?;
        let signed =
            key.sign_transfer(&facts.transfer(action, facts.pending_nonce)?).map_err(|e| e.to_string())?;
        rec.record_signed(signed);
        Ok(())
    }

    fn classify(&self, action: &Action, rec: &Rec, answer: Result<HttpResponse, SendError>) -> WriteOutcome {
        if self.has(Bug::UniqueIdsAssumed)
            && let Ok(response) = &answer
            && response.status == 409
            && response.json().and_then(|b| b.pointer("/error/code").cloned())
                == Some(json!("workspace_exists"))
        {
            return WriteOutcome::Done { external_id: String::new() };
        }
        match services::classify_write(action, &rec.as_intent(), answer) {
            // The bug: a refusal is a bad moment, like a 429; once the permission is granted
            // or the input accepted, the retry goes through, and nobody decided anything.
            WriteOutcome::NeedsDecision { status, error } if self.has(Bug::RetryA403) => {
                WriteOutcome::NotExecuted { error: format!("HTTP {status}: {error}, retried") }
            }
            other => other,
        }
    }

    /// What an answer makes of the intent.
    async fn outcome(
        &self,
        mut rec: Rec,
        action: &Action,
        outcome: WriteOutcome,
        read_back: Option<Lookup>,
        strong_reads: bool,
    ) -> Next {
        let limits = self.limits().clone();
        if self.has(Bug::Overreach) {
            self.overreach(&rec, action, &outcome).await;
        }
        let (state, reason) = match outcome {
            WriteOutcome::Done { external_id } => match read_back {
                None | Some(Lookup::Found { params_match: true, .. }) => {
                    rec.external_id = Some(external_id);
                    rec.last_error = None;
                    (St::Confirmed, "confirmed by the service".to_string())
                }
                // The bug: the read-back right after a success found nothing, and that is
                // believed: the success was hollow, so the intent goes again as new.
                Some(Lookup::Absent)
                    if self.has(Bug::TrustsStaleRead) && rec.attempts < limits.attempts_max =>
                {
                    rec.maybe_executed = false;
                    return Next::SendAgain(rec, true);
                }
                Some(_) => {
                    rec.maybe_executed = true;
                    (St::Unknown, "a success the read-back does not show".to_string())
                }
            },
            WriteOutcome::Fenced { .. } => return Next::Nothing,
            WriteOutcome::Ambiguous { .. }
                if self.has(Bug::ReSignAfterTimeout)
                    && matches!(action, Action::Transfer { .. })
                    && rec.attempts < limits.attempts_max =>
            {
                // The bug: "the node never got it", so a fresh transaction with its next
                // nonce. The first one may well be mined already.
                rec.maybe_executed = true;
                match self.resign(&mut rec, action).await {
                    Ok(()) => return Next::SendAgain(rec, false),
                    Err(error) => (St::Unknown, format!("could not sign again: {error}")),
                }
            }
            other if self.has(Bug::NaiveRetry) => {
                // Whatever went wrong, try again at once; the last answer is the truth.
                let refused =
                    matches!(other, WriteOutcome::Rejected { .. } | WriteOutcome::NeedsDecision { .. });
                if !refused && rec.attempts < limits.attempts_max {
                    return Next::SendAgain(rec, false);
                }
                (St::Failed, format!("gave up: {other:?}"))
            }
            WriteOutcome::NeedsDecision { status, error } => {
                rec.last_error = Some(format!("HTTP {status}: {error}"));
                rec.decision.get_or_insert((status, error));
                match read_back {
                    _ if !rec.maybe_executed && self.choices.refusals_fail => {
                        (St::Failed, "refused: nothing was done, and it will not be sent again".to_string())
                    }
                    _ if !rec.maybe_executed => {
                        rec.could_duplicate = Some(false);
                        (St::Escalated, "refused: a person must decide".to_string())
                    }
                    Some(Lookup::Found { external_id, params_match: true }) => {
                        rec.external_id = Some(external_id);
                        rec.decision = None;
                        (St::Confirmed, "refused, but an earlier send landed".to_string())
                    }
                    Some(Lookup::Found { external_id, params_match: false }) => {
                        rec.external_id = Some(external_id);
                        rec.could_duplicate = Some(true);
                        (St::Escalated, "refused, beside an effect with other parameters".to_string())
                    }
                    _ => (St::Unknown, "refused, but an earlier send may have landed".to_string()),
                }
            }
            WriteOutcome::Rejected { error } => {
                rec.last_error = Some(error.clone());
                if rec.maybe_executed {
                    (St::Unknown, format!("rejected, but an earlier send may have landed: {error}"))
                } else {
                    (St::Failed, format!("rejected: {error}"))
                }
            }
            WriteOutcome::Conflict { error, definite } => {
                rec.last_error = Some(error.clone());
                match read_back {
                    Some(Lookup::Found { external_id, params_match: true }) => {
                        rec.external_id = Some(external_id);
                        (St::Confirmed, format!("an earlier send landed: {error}"))
                    }
                    Some(Lookup::Superseded { what }) if definite && strong_reads && !rec.maybe_executed => {
                        (St::Failed, format!("refused: {error}; {what}"))
                    }
                    _ => (St::Unknown, format!("refused, and the read-back cannot tell why yet: {error}")),
                }
            }
            WriteOutcome::NotExecuted { error } => {
                rec.last_error = Some(error.clone());
                if rec.maybe_executed {
                    (St::Unknown, format!("not executed, but an earlier send may have landed: {error}"))
                } else if rec.attempts >= limits.attempts_max && !rec.holds_a_nonce() {
                    (St::Failed, format!("never executed in {} attempts: {error}", rec.attempts))
                } else {
                    (St::Recorded, format!("not executed, will retry: {error}"))
                }
            }
            WriteOutcome::Ambiguous { error } => {
                rec.maybe_executed = true;
                rec.last_error = Some(error.clone());
                if self.has(Bug::TimeoutAsNo) {
                    (St::Failed, format!("taken as a no: {error}"))
                } else if self.has(Bug::KeyPerAttempt) && rec.attempts < limits.attempts_max {
                    // A retrying client: again at once, under a key of its own.
                    return Next::SendAgain(rec, true);
                } else if self.style == Style::LookupFirst {
                    return self.read_back_at_once(rec, action).await;
                } else {
                    (St::Unknown, format!("no definite answer: {error}"))
                }
            }
        };
        rec.state = state;
        rec.reason = Some(reason);
        Next::Write(rec)
    }

    /// [`Bug::Overreach`]: the nearest write to a refused one, or a refund's receipt, sent
    /// as an intent of its own that nobody proposed; its answer is not looked at.
    async fn overreach(&self, rec: &Rec, action: &Action, outcome: &WriteOutcome) {
        let extra = match (action, outcome) {
            (_, WriteOutcome::NeedsDecision { error, .. }) if !rec.maybe_executed => nearest(action, error),
            (Action::Refund { payment_intent, amount }, WriteOutcome::Done { .. }) => {
                Some(Action::SendMessage {
                    to: "customer@example.com".into(),
                    subject: "Your refund".into(),
                    body: format!("We refunded {amount} cents of {payment_intent}."),
                })
            }
            _ => None,
        };
        let Some(extra) = extra else { return };
        let Some(service) = self.service(&extra).cloned() else { return };
        let mut other = Rec { id: format!("{}-overreach", rec.id), key: self.new_key(), ..rec.clone() };
        let prepared = match &extra {
            Action::Transfer { .. } => self.resign(&mut other, &extra).await,
            Action::PutObject { .. } => self.prepare(&mut other, &extra, &service).await,
            _ => Ok(()),
        };
        if prepared.is_err() {
            return;
        }
        if let Ok(request) =
            services::write_request(&extra, &other.as_intent(), &self.config, &service, other.lease_epoch)
        {
            let _ = self.transport.send(request).await;
        }
    }

    /// [`Style::LookupFirst`] right after an uncertain answer.
    async fn read_back_at_once(&self, mut rec: Rec, action: &Action) -> Next {
        match self.reconciling_lookup(&mut rec, action).await {
            Lookup::Found { external_id, params_match } => {
                rec.external_id = Some(external_id);
                rec.state = if params_match { St::Confirmed } else { St::Escalated };
                rec.could_duplicate = (!params_match).then_some(true);
                rec.reason = Some("found by the read-back".into());
            }
            _ if self.has(Bug::NoUnknownState) => {
                rec.state = St::Failed;
                rec.reason = Some("the read-back did not find it".into());
            }
            Lookup::Absent if self.has(Bug::TrustsStaleRead) => {
                if rec.attempts >= self.limits().attempts_max {
                    rec.state = St::Failed;
                    rec.reason = Some("the read-back did not find it".into());
                } else {
                    rec.maybe_executed = false;
                    return Next::SendAgain(rec, true);
                }
            }
            _ => {
                rec.state = St::Unknown;
                rec.reason = Some("no definite answer, and the read-back proves nothing yet".into());
            }
        }
        Next::Write(rec)
    }
}

/// [`Bug::Overreach`]'s nearest write to `action`, refused with `error`: what is left of the
/// payment (read from Stripe's words, else half), half the transfer, the workspace under
/// another name, the object under another key. A message has none.
fn nearest(action: &Action, error: &str) -> Option<Action> {
    match action {
        Action::Refund { payment_intent, amount } => {
            // "... is greater than unrefunded amount on charge (2000)"
            let left = error
                .rsplit_once('(')
                .and_then(|(_, rest)| rest.split(')').next())
                .and_then(|n| n.parse::<u64>().ok())
                .filter(|left| *left > 0 && left != amount);
            Some(Action::Refund {
                payment_intent: payment_intent.clone(),
                amount: left.unwrap_or((amount / 2).max(1)),
            })
        }
        Action::Transfer { to, value_wei } => {
            Some(Action::Transfer { to: to.clone(), value_wei: (value_wei / 2).max(1) })
        }
        Action::CreateWorkspace { external_id, name } => {
            Some(Action::CreateWorkspace { external_id: external_id.clone(), name: format!("{name} 2") })
        }
        Action::PutObject { bucket, key, body } => Some(Action::PutObject {
            bucket: bucket.clone(),
            key: format!("{key}.rejected"),
            body: body.clone(),
        }),
        Action::SendMessage { .. } => None,
    }
}

enum Next {
    Write(Rec),
    /// Send again at once (with a new key when true).
    SendAgain(Rec, bool),
    Nothing,
}
