//! The naive worker's pass: proposing, each intent's turn (a blocked replacement's lineage, a
//! recorded intent's send, an uncertain one's resolution), leases, the
//! [`Bug::RedoEverything`](super::Bug::RedoEverything) mutant, and `drain_for`.

use std::collections::BTreeMap;
use std::sync::MutexGuard;
use std::sync::atomic::Ordering;
use std::time::Duration;

use executor::Action;
use executor::model::ActionError;
use executor::world::Clock;
use runner::sim::{Refusal, StateChange};
use scenarios::IntentSpec;
use serde_json::Value;
use vocabulary::protocol::Limits;
use vocabulary::protocol::Service;

use super::store::{Rec, St, Store};
use super::{Bug, Worker};

/// What became of one intent's turn in a pass.
#[derive(Default)]
pub(super) struct Turn {
    pub(super) changes: Vec<StateChange>,
    pub(super) sent: bool,
}

impl Turn {
    pub(super) fn note(&mut self, before: St, after: &Rec) {
        if before != after.state {
            self.changes.push(StateChange {
                intent_id: after.id.clone(),
                state: after.state.name().into(),
                at_ms: None,
            });
        }
    }
}

impl Worker {
    pub(super) fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    pub(super) fn limits(&self) -> &Limits {
        &self.config.limits
    }

    pub(super) fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn has(&self, bug: Bug) -> bool {
        self.bug == Some(bug)
    }

    /// Whether it takes leases (and sends their epochs as fencing tokens).
    pub(super) fn leases(&self) -> bool {
        !self.unleased() && !self.choices.single_worker
    }

    /// Whether a bug has it take no leases (and so guard nothing with versions either).
    pub(super) fn unleased(&self) -> bool {
        self.has(Bug::NoLease) || self.has(Bug::ConstantFencingToken)
    }

    /// Added to every bound before a negative answer is believed.
    pub(super) fn margin_ms(&self) -> u64 {
        self.choices.timing.margin_ms
    }

    /// The wait after a send before the next attempt, per attempt made.
    pub(super) fn backoff_ms(&self) -> u64 {
        self.choices.timing.backoff_ms.unwrap_or(self.limits().request_timeout_ms)
    }

    pub(super) fn new_key(&self) -> String {
        format!("{}.{}", self.key_prefix, self.keys.fetch_add(1, Ordering::SeqCst) + 1)
    }

    pub(super) fn service(&self, action: &Action) -> Option<&Service> {
        self.config.services.get(action.service())
    }

    pub(super) fn propose_now(&self, spec: &IntentSpec) -> Result<(), Refusal> {
        if spec.on_event.is_some() {
            return self.arm(spec);
        }
        // A step's references are checked with a stand-in value; the real one is known only
        // when its predecessors have taken effect.
        let references = vocabulary::workflow::references(&spec.params).map_err(Refusal::Other)?;
        let mut checked = spec.params.clone();
        for (name, reference) in &references {
            checked[name.as_str()] = Value::from(reference.render("x"));
        }
        if let Some(supported) = self.choices.actions
            && !supported.contains(&spec.action.as_str())
        {
            return Err(Refusal::Unsupported(format!("action {} is not supported", spec.action)));
        }
        let action = match Action::parse(&spec.action, &checked) {
            Ok(a) => a,
            Err(e @ ActionError::Unsupported(_)) => return Err(Refusal::Unsupported(e.to_string())),
            Err(e) => return Err(Refusal::Other(e.to_string())),
        };
        if self.service(&action).is_none() {
            return Err(Refusal::Unsupported(format!("service {} is not configured", action.service())));
        }
        let params = if references.is_empty() { action.params() } else { spec.params.clone() };
        let mut store = self.store();
        if let Some(existing) = store.get(&spec.id) {
            return if existing.action == spec.action
                && existing.params == params
                && existing.after == spec.after
            {
                Ok(())
            } else {
                Err(Refusal::Other(format!("intent {} was recorded with another payload", spec.id)))
            };
        }
        if let Some(unknown) = spec.after.iter().find(|id| store.get(id).is_none()) {
            return Err(Refusal::Other(format!("{} comes after unknown intent {unknown}", spec.id)));
        }
        let (mut state, mut reason) = match &spec.replaces {
            None => (St::Recorded, None),
            Some(old) if store.get(old).is_none() => {
                return Err(Refusal::Other(format!("{} replaces unknown intent {old}", spec.id)));
            }
            Some(old) => match self.lineage(&store, old) {
                Ancestry::Wait => (St::Blocked, None),
                other => other.verdict(),
            },
        };
        if state == St::Recorded && !spec.after.is_empty() {
            (state, reason) = match steps_gate(&store, &spec.after) {
                Gate::Wait => (St::Blocked, None),
                gate => gate.verdict(),
            };
        }
        let rec = Rec {
            id: spec.id.clone(),
            action: spec.action.clone(),
            params,
            replaces: spec.replaces.clone(),
            state,
            key: self.new_key(),
            previous_keys: vec![],
            attempts: 0,
            maybe_executed: false,
            key_first_sent_ms: None,
            last_sent_ms: None,
            external_id: None,
            last_error: None,
            reason,
            lease_owner: None,
            lease_epoch: 0,
            lease_until_ms: 0,
            version: 0,
            precondition: None,
            tx_hash: None,
            raw_tx: None,
            nonce: None,
            from: None,
            after: spec.after.clone(),
            resolved: Default::default(),
            decision: None,
            could_duplicate: None,
        };
        store.write(rec, false).map(|_| ()).ok_or_else(|| Refusal::Other("store conflict".into()))
    }

    /// What the intents a replacement replaces, directly or not, allow it: every supported
    /// action is exclusive, so one effect anywhere in the lineage cancels it.
    fn lineage(&self, store: &Store, predecessor: &str) -> Ancestry {
        let all = store.all();
        let mut next = Some(predecessor.to_string());
        let mut seen = 0;
        while let Some(id) = next.take() {
            seen += 1;
            let Some(p) = all.iter().find(|r| r.id == id) else { return Ancestry::Escalate(id) };
            match p.state {
                St::Confirmed => return Ancestry::Cancel(id),
                // Refused for a person's decision, certainly without effect: the replacement
                // is that decision.
                St::Escalated if p.nothing_done() => {}
                St::Escalated => return Ancestry::Escalate(id),
                St::Failed => {}
                // The bug: an unknown predecessor is as good as a failed one.
                St::Unknown if self.has(Bug::ReplacementWhileUnknown) => {}
                // The bug: a predecessor that was refused is as good as a failed one, though
                // it waits for its retry.
                St::Recorded if self.has(Bug::RefusalReleasesReplacement) && p.last_error.is_some() => {}
                _ => return Ancestry::Wait,
            }
            next = p.replaces.clone().filter(|_| seen <= all.len());
        }
        Ancestry::Run
    }

    /// Takes or renews the lease on `rec` in memory; false while another live worker holds it.
    fn lease(&self, rec: &mut Rec, now: u64) -> bool {
        if !self.leases() {
            return true;
        }
        let mine = rec.lease_owner.as_deref() == Some(self.owner.as_str());
        let earlier_life = rec
            .lease_owner
            .as_deref()
            .and_then(|o| o.rsplit_once('#'))
            .is_some_and(|(worker, _)| worker == self.worker_id);
        if !(rec.lease_owner.is_none() || rec.lease_until_ms < now || mine || earlier_life) {
            return false;
        }
        if !mine {
            rec.lease_owner = Some(self.owner.clone());
            rec.lease_epoch += 1;
        }
        rec.lease_until_ms = now + self.limits().lease_ms;
        true
    }

    pub(super) fn write(&self, rec: Rec) -> Option<Rec> {
        // None of these bugs compares versions: `NoLease` and `ConstantFencingToken` have no
        // lease to guard, and `LeaseWithoutCas` believes the lease it checked at the start of
        // the turn is still its own.
        let blind = self.unleased() || self.has(Bug::LeaseWithoutCas);
        self.store().write(rec, blind)
    }

    /// One pass over the unresolved intents: first the blocked replacements (one that its
    /// lineage releases is sent in the next pass, as the reference does), then sends and
    /// lookups, concurrently.
    pub(super) async fn pass(&self) -> Turn {
        self.webhooks_pass().await;
        let (blocked, active): (Vec<Rec>, Vec<Rec>) = self
            .store()
            .all()
            .into_iter()
            .filter(|r| !r.state.terminal())
            .partition(|r| r.state == St::Blocked);
        let mut all = Turn::default();
        for rec in blocked {
            all.changes.extend(self.turn(&rec.id).await.changes);
        }
        let turns = futures_util::future::join_all(active.iter().map(|r| self.turn(&r.id))).await;
        for t in turns {
            all.sent |= t.sent;
            all.changes.extend(t.changes);
        }
        if self.has(Bug::RedoEverything) {
            self.redo_everything(&mut all);
        }
        all
    }

    /// [`Bug::RedoEverything`]: after a step failed or turned uncertain, every completed
    /// step goes back to the start with a new key, once.
    fn redo_everything(&self, turn: &mut Turn) {
        let troubled = turn.changes.iter().any(|c| c.state == "unknown" || c.state == "failed");
        let mut redone = self.redone.lock().unwrap_or_else(|p| p.into_inner());
        if !troubled || *redone {
            return;
        }
        *redone = true;
        let mut store = self.store();
        for mut rec in store.all().into_iter().filter(|r| r.state == St::Confirmed) {
            rec.state = St::Recorded;
            rec.key = self.new_key();
            rec.key_first_sent_ms = None;
            rec.maybe_executed = false;
            rec.reason = Some("the workflow is run again".into());
            if let Some(rec) = store.write(rec, true) {
                turn.note(St::Confirmed, &rec);
            }
        }
    }

    /// One intent's turn in a pass.
    async fn turn(&self, id: &str) -> Turn {
        let mut turn = Turn::default();
        let now = self.now();
        let Some(stored) = self.store().get(id) else { return turn };
        let mut rec = stored.clone();
        if rec.state.terminal() || !self.lease(&mut rec, now) {
            return turn;
        }
        match stored.state {
            St::Blocked => {
                let ancestry = match rec.replaces.as_deref() {
                    Some(old) => self.lineage(&self.store(), old),
                    None => Ancestry::Run,
                };
                if ancestry == Ancestry::Wait {
                    return turn;
                }
                if matches!(ancestry, Ancestry::Escalate(_)) {
                    // Never sent: going on with it cannot repeat anything of its own.
                    rec.could_duplicate = Some(false);
                }
                (rec.state, rec.reason) = ancestry.verdict();
                if rec.state == St::Recorded && !rec.after.is_empty() {
                    match steps_gate(&self.store(), &rec.after) {
                        Gate::Wait => return turn,
                        gate => (rec.state, rec.reason) = gate.verdict(),
                    }
                }
                if let Some(rec) = self.write(rec) {
                    turn.note(St::Blocked, &rec);
                }
            }
            St::Recorded => {
                let backoff = rec.last_sent_ms.map(|t| t + self.backoff_ms() * u64::from(rec.attempts));
                if backoff.is_some_and(|t| now < t) {
                    return turn;
                }
                // A step's references are resolved once, from what its predecessors recorded,
                // and the values are durable before its first send.
                if rec.has_references() && rec.resolved.is_empty() {
                    match resolve_references(&self.store(), &rec) {
                        Ok(values) => rec.resolved = values,
                        Err(why) => {
                            rec.state = St::Escalated;
                            rec.reason = Some(why);
                        }
                    }
                    let before = rec.state;
                    rec = match self.write(rec) {
                        Some(written) => written,
                        None => return turn,
                    };
                    if before == St::Escalated {
                        turn.note(St::Recorded, &rec);
                        return turn;
                    }
                }
                let Some(action) = rec.action() else { return turn };
                let rotate = self.has(Bug::KeyPerAttempt) && rec.attempts > 0;
                self.send(rec, &action, St::Recorded, rotate, &mut turn).await;
            }
            St::Submitted | St::Unknown => {
                if stored.state == St::Unknown && self.has(Bug::NoReconciliation) {
                    return turn;
                }
                let Some(action) = rec.action() else { return turn };
                self.resolve(rec, &action, stored.state, &mut turn).await;
            }
            _ => {}
        }
        turn
    }

    pub(super) async fn drain_for(&self, timeout_ms: u64) -> Vec<StateChange> {
        if !self.active() {
            return Vec::new();
        }
        let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
        let mut changes = Vec::new();
        loop {
            let turn = self.pass().await;
            let progressed = turn.sent || !turn.changes.is_empty();
            changes.extend(turn.changes);
            let all = self.store().all();
            // A step whose predecessors are all settled is released by the next pass: work this
            // drain must still do.
            let busy = all.iter().any(|r| {
                matches!(r.state, St::Recorded | St::Submitted)
                    || r.state == St::Blocked
                        && !r.after.is_empty()
                        && steps_gate_of(&all, &r.after) != Gate::Wait
            });
            if !busy || tokio::time::Instant::now() >= deadline {
                return changes;
            }
            if !progressed {
                tokio::time::sleep(Duration::from_millis(self.limits().pass_pause_ms.max(1))).await;
            }
        }
    }
}

/// What a step's predecessors allow it.
#[derive(Debug, PartialEq, Eq)]
enum Gate {
    /// Every one is confirmed.
    Run,
    /// One is still unresolved.
    Wait,
    /// This one failed: the step is cancelled.
    Failed(String),
    /// This one is escalated: a person decides for the step too.
    Escalated(String),
}

impl Gate {
    fn verdict(self) -> (St, Option<String>) {
        match self {
            Gate::Run | Gate::Wait => (St::Recorded, None),
            Gate::Failed(id) => {
                (St::Failed, Some(format!("cancelled: the intent it comes after ({id}) failed")))
            }
            Gate::Escalated(id) => (St::Escalated, Some(format!("waits for {id}, which is escalated"))),
        }
    }
}

fn steps_gate(store: &Store, after: &[String]) -> Gate {
    steps_gate_of(&store.all(), after)
}

fn steps_gate_of(all: &[Rec], after: &[String]) -> Gate {
    let mut gate = Gate::Run;
    for id in after {
        match all.iter().find(|r| &r.id == id).map(|p| p.state) {
            Some(St::Confirmed) => {}
            Some(St::Failed) => return Gate::Failed(id.clone()),
            Some(St::Escalated) | None => return Gate::Escalated(id.clone()),
            Some(_) => gate = Gate::Wait,
        }
    }
    gate
}

/// A predecessor's recorded result field.
fn recorded_result(predecessor: &Rec, field: &str) -> Option<String> {
    match field {
        "tx_hash" => predecessor.tx_hash.clone(),
        // Refund, workspace and message ids, and a put's ETag: what the confirmation recorded.
        _ => predecessor.external_id.clone(),
    }
}

/// Every reference of `rec`, resolved from what its predecessors recorded.
fn resolve_references(store: &Store, rec: &Rec) -> Result<BTreeMap<String, String>, String> {
    let references = vocabulary::workflow::references(&rec.params)?;
    let mut values = BTreeMap::new();
    for (name, reference) in references {
        let value = store
            .get(&reference.from)
            .and_then(|p| recorded_result(&p, &reference.field))
            .ok_or_else(|| format!("{} has no recorded {} for {name}", reference.from, reference.field))?;
        values.insert(name, reference.render(&value));
    }
    Ok(values)
}

/// What a replacement's lineage allows it.
#[derive(Debug, PartialEq, Eq)]
enum Ancestry {
    /// Every earlier intent failed: it may run.
    Run,
    /// One is still unresolved.
    Wait,
    /// This one took effect.
    Cancel(String),
    /// This one is escalated or missing: running could do it twice.
    Escalate(String),
}

impl Ancestry {
    fn verdict(self) -> (St, Option<String>) {
        match self {
            Ancestry::Run | Ancestry::Wait => (St::Recorded, None),
            Ancestry::Cancel(id) => {
                (St::Failed, Some(format!("cancelled: {id}, in its lineage, is confirmed")))
            }
            Ancestry::Escalate(id) => {
                (St::Escalated, Some(format!("{id}, in its lineage, is escalated or missing")))
            }
        }
    }
}
