//! Every fake behind one type, and the set of fakes that a run or `twice serve` starts.

use std::sync::Arc;

use crate::chain::{self, Chain};
use crate::clock::ServiceClock;
use crate::core::{ApiError, Bounds, Pending, PendingKind};
use crate::fault_engine::ArmedRule;
use crate::files::{self, Files};
use crate::messages::{self, Messages};
use crate::payments::{self, Payments};
use crate::wire::{Disposition, FakeRequest, FakeResponse};
use crate::workspaces::{self, Workspaces};
use vocabulary::Clock;
use vocabulary::Effect;
use vocabulary::JournalEntry;
use vocabulary::contract::{Contract, ContractPatch};
use vocabulary::rule::FaultRule;

/// One fake service.
#[derive(Clone)]
pub enum Fake {
    Payments(Payments),
    Workspaces(Workspaces),
    Files(Files),
    Chain(Chain),
    Messages(Messages),
}

/// Runs `$body` with `$core` bound to the fake's shared core, whatever its state type.
macro_rules! with_core {
    ($fake:expr, $core:ident => $body:expr) => {
        match $fake {
            Fake::Payments(f) => {
                let $core = f.core();
                $body
            }
            Fake::Workspaces(f) => {
                let $core = f.core();
                $body
            }
            Fake::Files(f) => {
                let $core = f.core();
                $body
            }
            Fake::Chain(f) => {
                let $core = f.core();
                $body
            }
            Fake::Messages(f) => {
                let $core = f.core();
                $body
            }
        }
    };
}

impl Fake {
    /// The service's name: one of `vocabulary::SERVICES`.
    pub fn name(&self) -> &'static str {
        match self {
            Fake::Payments(_) => payments::NAME,
            Fake::Workspaces(_) => workspaces::NAME,
            Fake::Files(_) => files::NAME,
            Fake::Chain(_) => chain::NAME,
            Fake::Messages(_) => messages::NAME,
        }
    }

    /// Processes one request, faults and all.
    pub async fn handle(&self, req: FakeRequest) -> Disposition {
        match self {
            Fake::Payments(f) => f.handle(req).await,
            Fake::Workspaces(f) => f.handle(req).await,
            Fake::Files(f) => f.handle(req).await,
            Fake::Chain(f) => f.handle(req).await,
            Fake::Messages(f) => f.handle(req).await,
        }
    }

    /// Largest request body this fake reads: [`crate::wire::BODY_BYTES_MAX`], or more for a
    /// service whose clients send larger bodies ([`files::BODY_BYTES_MAX`]).
    pub fn body_bytes_max(&self) -> usize {
        match self {
            Fake::Files(_) => files::BODY_BYTES_MAX,
            Fake::Payments(_) | Fake::Workspaces(_) | Fake::Chain(_) | Fake::Messages(_) => {
                crate::wire::BODY_BYTES_MAX
            }
        }
    }

    /// An error in this service's wire shape, for what the transport refuses before the fake
    /// sees a request (an oversized body, a body that never finishes).
    pub fn transport_error(&self, status: u16, message: &str) -> FakeResponse {
        let error = ApiError::new(status, "invalid_request_error", message);
        with_core!(self, core => core.stamped_error(&error))
    }

    /// Sets what this fake holds at most ([`Bounds`]; the defaults are docs/faults.md's
    /// "Limits"). A reset keeps them.
    pub fn set_bounds(&self, bounds: Bounds) {
        with_core!(self, core => core.set_bounds(bounds))
    }

    /// Arms a rule; returns its id.
    pub fn add_rule(&self, rule: FaultRule) -> Result<String, String> {
        with_core!(self, core => core.add_rule(rule))
    }

    pub fn rules(&self) -> Vec<ArmedRule> {
        with_core!(self, core => core.lock().engine.rules().to_vec())
    }

    /// Disarms one rule; false if no rule has that id.
    pub fn remove_rule(&self, id: &str) -> bool {
        with_core!(self, core => core.lock().engine.remove(id))
    }

    pub fn clear_rules(&self) {
        with_core!(self, core => core.lock().engine.clear())
    }

    /// The effects that really happened, in commit order.
    pub fn ledger(&self) -> Vec<Effect> {
        // The chain mines, and messages deliver, lazily on service time: blocks and deliveries
        // due by now are made before anyone reads what happened.
        match self {
            Fake::Chain(chain) => chain.mine_due(),
            Fake::Messages(messages) => messages.deliver_due(),
            _ => {}
        }
        with_core!(self, core => core.lock().ledger.effects().to_vec())
    }

    /// The requests seen, oldest first (bounded; see [`crate::record::JOURNAL_ENTRIES_MAX`]).
    pub fn journal(&self) -> Vec<JournalEntry> {
        with_core!(self, core => core.lock().journal.entries().cloned().collect())
    }

    pub fn contract(&self) -> Contract {
        with_core!(self, core => core.lock().contract.clone())
    }

    pub fn patch_contract(&self, patch: ContractPatch) -> Contract {
        with_core!(self, core => {
            let mut inner = core.lock();
            inner.contract.apply(patch);
            inner.contract.clone()
        })
    }

    pub fn clock(&self) -> &ServiceClock {
        with_core!(self, core => &core.clock)
    }

    /// Whether nothing is in flight at this fake: no request being worked on, no late commit
    /// waiting, (the chain) no transaction waiting in the pool for a block, (messages) no
    /// delivery still to make, and (payments) no webhook still to send. [`Fake::pending`] names what it waits for.
    pub fn settled(&self) -> bool {
        match self {
            Fake::Chain(chain) => {
                chain.mine_due();
                if chain.core().lock().state.pool_len() > 0 {
                    return false;
                }
            }
            Fake::Messages(messages) => {
                messages.deliver_due();
                if messages.pending_deliveries() > 0 {
                    return false;
                }
            }
            Fake::Payments(payments)
                if !payments.pending_deliveries().is_empty() || !payments.due_payments().is_empty() =>
            {
                return false;
            }
            _ => {}
        }
        with_core!(self, core => core.settled())
    }

    /// What [`Fake::settled`] waits for, named: each request the fake is still working on,
    /// each late commit still to come, (messages) each delivery still to make, (the chain) each
    /// transaction in the pool, with the request it came from and when it is due where the
    /// fake knows it (`crate::core::Pending`). Empty exactly when the fake is settled. Blocks
    /// and deliveries due by now are made first, as [`Fake::ledger`] makes them.
    pub fn pending(&self) -> Vec<Pending> {
        let mut out = with_core!(self, core => core.pending());
        match self {
            Fake::Chain(chain) => {
                chain.mine_due();
                for tx in chain.core().lock().state.pooled() {
                    let (kind, waits) = match tx.due_ms {
                        Some(_) => (PendingKind::PooledTx, "waits for a block".to_string()),
                        None => (
                            PendingKind::QueuedTx,
                            "waits for its sender: no block takes it until the nonce before it, or the funds \
                             it needs, arrive"
                                .to_string(),
                        ),
                    };
                    out.push(Pending {
                        service: self.name(),
                        kind,
                        request: Some("eth_sendRawTransaction".into()),
                        request_id: Some(tx.request_id),
                        due_ms: tx.due_ms,
                        detail: format!(
                            "transaction {} from {} nonce {}, {waits}",
                            tx.hash, tx.from, tx.nonce
                        ),
                    });
                }
            }
            Fake::Messages(messages) => {
                messages.deliver_due();
                for due in messages.core().lock().state.due() {
                    let again = if due.again { " (the provider's second delivery)" } else { "" };
                    out.push(Pending {
                        service: self.name(),
                        kind: PendingKind::Delivery,
                        request: Some("POST /emails".into()),
                        request_id: Some(due.request_id),
                        due_ms: Some(due.due_ms),
                        detail: format!(
                            "email {} to {}{again}, not in the inbox yet",
                            due.email_id, due.recipient
                        ),
                    });
                }
            }
            Fake::Payments(payments) => {
                for payment_intent in payments.awaiting_listener() {
                    out.push(Pending {
                        service: self.name(),
                        kind: PendingKind::AwaitingListener,
                        request: None,
                        request_id: None,
                        due_ms: None,
                        detail: format!(
                            "the payment of {payment_intent} waits for the application to listen: no webhook \
                             endpoint that wants payment_intent.succeeded is registered"
                        ),
                    });
                }
                for (payment_intent, forged, due_ms) in payments.due_payments() {
                    let what = if forged { "a forged event for" } else { "the payment of" };
                    out.push(Pending {
                        service: self.name(),
                        kind: PendingKind::Webhook,
                        request: None,
                        request_id: None,
                        due_ms: Some(due_ms),
                        detail: format!(
                            "{what} {payment_intent} is due: its payment_intent.succeeded goes out then"
                        ),
                    });
                }
                for (event, kind, url, attempts, due_ms) in payments.pending_deliveries() {
                    let when = if due_ms.is_some() { "due" } else { "being sent" };
                    out.push(Pending {
                        service: self.name(),
                        kind: PendingKind::Webhook,
                        request: None,
                        request_id: None,
                        due_ms,
                        detail: format!(
                            "webhook {event} ({kind}) to {url}, {when}, after {attempts} of at most {} attempts",
                            payments::ATTEMPTS_MAX
                        ),
                    });
                }
            }
            Fake::Workspaces(_) | Fake::Files(_) => {}
        }
        out
    }

    /// Forgets state, rules, ledger, journal and keys; the clock keeps its jumps.
    pub fn reset(&self) {
        with_core!(self, core => core.reset())
    }
}

/// The set of fakes that share one base clock and one seed.
#[derive(Clone)]
pub struct Fakes {
    pub payments: Payments,
    pub workspaces: Workspaces,
    pub files: Files,
    pub chain: Chain,
    pub messages: Messages,
}

impl Fakes {
    /// Every fake, each with its own service clock over `base` and its own RNG stream of `seed`.
    pub fn new(base: Arc<dyn Clock>, seed: u64) -> Self {
        Fakes {
            payments: Payments::new(ServiceClock::new(Arc::clone(&base)), seed),
            workspaces: Workspaces::new(ServiceClock::new(Arc::clone(&base)), seed),
            files: Files::new(ServiceClock::new(Arc::clone(&base)), seed),
            chain: Chain::new(ServiceClock::new(Arc::clone(&base)), seed),
            messages: Messages::new(ServiceClock::new(base), seed),
        }
    }

    /// All fakes, in a fixed order.
    pub fn all(&self) -> Vec<Fake> {
        vec![
            Fake::Payments(self.payments.clone()),
            Fake::Workspaces(self.workspaces.clone()),
            Fake::Files(self.files.clone()),
            Fake::Chain(self.chain.clone()),
            Fake::Messages(self.messages.clone()),
        ]
    }

    /// The fake with this name.
    pub fn get(&self, name: &str) -> Option<Fake> {
        self.all().into_iter().find(|f| f.name() == name)
    }
}
