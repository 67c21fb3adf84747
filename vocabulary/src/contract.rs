//! Service contracts: what a service promises its callers (design §4).
//!
//! A contract is at once a setting of a fake (some terms change what it does: keys ignored,
//! key retention, unique business keys, fencing), the promise the harness announces to an
//! executor in `init` (`docs/protocol.md` §3.1), and what a scenario's faults must stay
//! inside. It used to be two types, one per side, bridged through JSON; now both sides hold
//! this one, so a term added here reaches the fakes, the executor and the scenarios at once.
//!
//! [`Contract::admits`] says whether a fault stays inside the promise, so that a harness can
//! inject only faults for which a correct executor exists.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::rule::FaultSpec;

/// Whether a service honours `Idempotency-Key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeyPolicy {
    Honored,
    Ignored,
}

/// How fresh reads are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Reads {
    Strong,
    Eventual,
}

/// Whether a success reply can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Acks {
    Reliable,
    MayLie,
}

/// The terms a service promises. Times are in service milliseconds.
///
/// Absent JSON terms take the cautious reading where one exists ([`Contract::default`]): keys
/// are not assumed to be honoured, reads are strong, acks reliable, and a request settles
/// within 30 s. Executors rely on exactly these defaults (`docs/protocol.md` §3.1), and an
/// unknown term is refused rather than ignored, so that a misspelt term is never silently
/// dropped. The harness always sends every term.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Contract {
    pub idempotency_keys: KeyPolicy,
    /// Keys at least this old may be pruned; a reuse after that is a new request.
    pub key_retention_ms: u64,
    pub reads: Reads,
    /// With eventual reads, a write is visible to every read at most this long after it.
    pub read_lag_ms_max: u64,
    pub acks: Acks,
    /// A request still in flight commits or dies within this bound.
    pub settle_ms_max: u64,
    /// A second create for the same business id is refused.
    pub unique_business_key: bool,
    /// The service accepts a fencing token and refuses a lower one.
    pub fencing: bool,
    /// The service offers conditional writes (compare-and-set).
    pub conditional_writes: bool,
}

/// The cautious reading of a contract that says nothing: what an executor must assume.
impl Default for Contract {
    fn default() -> Self {
        Contract {
            idempotency_keys: KeyPolicy::Ignored,
            key_retention_ms: 0,
            reads: Reads::Strong,
            read_lag_ms_max: 0,
            acks: Acks::Reliable,
            settle_ms_max: 30_000,
            unique_business_key: false,
            fencing: false,
            conditional_writes: false,
        }
    }
}

/// 24 hours: Stripe's documented minimum key retention, and Resend's.
pub const DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// How far a test mailbox's reads may lag behind deliveries by default: a few polls of a
/// mailbox that is read every second or so.
pub const MESSAGES_READ_LAG_MS: u64 = 2_000;

impl Contract {
    /// What Stripe promises for refunds.
    pub fn payments_default() -> Self {
        Contract {
            idempotency_keys: KeyPolicy::Honored,
            key_retention_ms: DAY_MS,
            reads: Reads::Strong,
            read_lag_ms_max: 0,
            acks: Acks::Reliable,
            settle_ms_max: 30_000,
            unique_business_key: false,
            fencing: false,
            conditional_writes: false,
        }
    }

    /// A careful SaaS create API: keys honoured, unique external ids, fencing tokens.
    pub fn workspaces_default() -> Self {
        Contract { unique_business_key: true, fencing: true, ..Self::payments_default() }
    }

    /// S3: no idempotency keys (a retried PUT is the same bytes again), strong reads since
    /// 2020, conditional writes (`If-None-Match: *`, `If-Match`).
    pub fn files_default() -> Self {
        Contract {
            idempotency_keys: KeyPolicy::Ignored,
            conditional_writes: true,
            ..Self::payments_default()
        }
    }

    /// An Ethereum node: no idempotency keys, but a signed transaction is its own key (its
    /// hash), and a nonce is used once.
    pub fn chain_default() -> Self {
        Contract { idempotency_keys: KeyPolicy::Ignored, ..Self::payments_default() }
    }

    /// An email API (Resend): keys honoured and kept 24 hours like Stripe's, an inbox that is
    /// read with a lag behind deliveries (a test mailbox polls what the provider delivered),
    /// and acks that may lie: a 200 says the message was accepted, not that it arrived. Only
    /// the recipient's inbox shows that.
    pub fn messages_default() -> Self {
        Contract {
            reads: Reads::Eventual,
            read_lag_ms_max: MESSAGES_READ_LAG_MS,
            acks: Acks::MayLie,
            ..Self::payments_default()
        }
    }

    /// The contract `service` (one of [`crate::SERVICES`]) offers before a scenario changes
    /// it; `None` for a service that does not exist.
    pub fn default_for(service: &str) -> Option<Contract> {
        match service {
            "payments" => Some(Contract::payments_default()),
            "workspaces" => Some(Contract::workspaces_default()),
            "files" => Some(Contract::files_default()),
            "chain" => Some(Contract::chain_default()),
            "messages" => Some(Contract::messages_default()),
            _ => None,
        }
    }

    /// Applies the fields present in `patch`.
    pub fn apply(&mut self, patch: ContractPatch) {
        let ContractPatch {
            idempotency_keys,
            key_retention_ms,
            reads,
            read_lag_ms_max,
            acks,
            settle_ms_max,
            unique_business_key,
            fencing,
            conditional_writes,
        } = patch;
        if let Some(v) = idempotency_keys {
            self.idempotency_keys = v;
        }
        if let Some(v) = key_retention_ms {
            self.key_retention_ms = v;
        }
        if let Some(v) = reads {
            self.reads = v;
        }
        if let Some(v) = read_lag_ms_max {
            self.read_lag_ms_max = v;
        }
        if let Some(v) = acks {
            self.acks = v;
        }
        if let Some(v) = settle_ms_max {
            self.settle_ms_max = v;
        }
        if let Some(v) = unique_business_key {
            self.unique_business_key = v;
        }
        if let Some(v) = fencing {
            self.fencing = v;
        }
        if let Some(v) = conditional_writes {
            self.conditional_writes = v;
        }
    }

    /// Whether injecting `fault` keeps the service inside this contract. A fault outside it
    /// would make a scenario that no executor can pass, so a harness must not inject it.
    pub fn admits(&self, fault: &FaultSpec) -> Result<(), String> {
        match fault {
            FaultSpec::IgnoreKeys if self.idempotency_keys == KeyPolicy::Honored => {
                Err("ignore_keys breaks a contract whose idempotency_keys are honored".into())
            }
            FaultSpec::SilentNoop if self.acks == Acks::Reliable => {
                Err("silent_noop breaks a contract whose acks are reliable".into())
            }
            FaultSpec::StaleRead { lag_ms } => {
                if self.reads == Reads::Strong {
                    Err("stale_read breaks a contract whose reads are strong".into())
                } else if *lag_ms > self.read_lag_ms_max {
                    Err(format!(
                        "stale_read lag_ms {lag_ms} exceeds the contract's read_lag_ms_max {}",
                        self.read_lag_ms_max
                    ))
                } else {
                    Ok(())
                }
            }
            FaultSpec::CommitAfterTimeout { delay_ms: Some(d) } if *d > self.settle_ms_max => Err(format!(
                "commit_after_timeout delay_ms {d} exceeds the contract's settle_ms_max {}",
                self.settle_ms_max
            )),
            // A delivery is part of what a request does: it lands within the settle bound of
            // the request, or the executor could never know when "not in the inbox" is final.
            FaultSpec::DeliverLate { delay_ms: d } if *d > self.settle_ms_max => Err(format!(
                "deliver_late delay_ms {d} exceeds the contract's settle_ms_max {}",
                self.settle_ms_max
            )),
            FaultSpec::Redeliver { after_ms: d } if *d > self.settle_ms_max => Err(format!(
                "redeliver after_ms {d} exceeds the contract's settle_ms_max {}",
                self.settle_ms_max
            )),
            // A webhook the fake still owes is sent within the settle bound of the request that
            // made its event (its retries after that are the endpoint's doing).
            FaultSpec::DuplicateWebhook { after_ms: d }
            | FaultSpec::DelayWebhook { delay_ms: d }
            | FaultSpec::WebhookEndpointDown { for_ms: d }
                if *d > self.settle_ms_max =>
            {
                Err(format!(
                    "{} {d} ms exceeds the contract's settle_ms_max {}",
                    fault.kind(),
                    self.settle_ms_max
                ))
            }
            FaultSpec::ForgetKeys { older_than_ms } => {
                let older = older_than_ms.unwrap_or(0);
                if self.idempotency_keys == KeyPolicy::Honored && older < self.key_retention_ms {
                    Err(format!(
                        "forget_keys older_than_ms {older} forgets keys inside the contract's key_retention_ms {}",
                        self.key_retention_ms
                    ))
                } else {
                    Ok(())
                }
            }
            _ => Ok(()),
        }
    }
}

/// A partial contract, for the control API and a scenario's `[services.NAME]`: absent fields
/// stay as they are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContractPatch {
    /// Whether the service honours `Idempotency-Key`.
    pub idempotency_keys: Option<KeyPolicy>,
    /// Keys at least this old may be pruned; a reuse after that is a new request.
    pub key_retention_ms: Option<u64>,
    /// How fresh reads are.
    pub reads: Option<Reads>,
    /// With eventual reads, a write is visible to every read at most this long after it.
    pub read_lag_ms_max: Option<u64>,
    /// Whether a success reply can be trusted (`may_lie`: a success may have committed
    /// nothing).
    pub acks: Option<Acks>,
    /// A request still in flight commits or dies within this bound.
    pub settle_ms_max: Option<u64>,
    /// A second create for the same business id is refused.
    pub unique_business_key: Option<bool>,
    /// The service accepts a fencing token and refuses a lower one.
    pub fencing: Option<bool>,
    /// The service offers conditional writes (compare-and-set).
    pub conditional_writes: Option<bool>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(contract: &Contract, fault: FaultSpec, fair: bool) {
        assert_eq!(contract.admits(&fault).is_ok(), fair, "{fault:?} under {contract:?}");
    }

    #[test]
    fn fairness_follows_the_announced_terms() {
        let strict = Contract::payments_default();
        let mut loose = Contract::payments_default();
        loose.apply(ContractPatch {
            idempotency_keys: Some(KeyPolicy::Ignored),
            reads: Some(Reads::Eventual),
            read_lag_ms_max: Some(500),
            acks: Some(Acks::MayLie),
            settle_ms_max: Some(2_000),
            ..ContractPatch::default()
        });
        check(&strict, FaultSpec::IgnoreKeys, false);
        check(&loose, FaultSpec::IgnoreKeys, true);
        check(&strict, FaultSpec::SilentNoop, false);
        check(&loose, FaultSpec::SilentNoop, true);
        check(&strict, FaultSpec::StaleRead { lag_ms: 100 }, false);
        check(&loose, FaultSpec::StaleRead { lag_ms: 500 }, true);
        check(&loose, FaultSpec::StaleRead { lag_ms: 501 }, false);
        check(&loose, FaultSpec::CommitAfterTimeout { delay_ms: Some(2_000) }, true);
        check(&loose, FaultSpec::CommitAfterTimeout { delay_ms: Some(2_001) }, false);
        check(&strict, FaultSpec::ForgetKeys { older_than_ms: None }, false);
        check(&strict, FaultSpec::ForgetKeys { older_than_ms: Some(DAY_MS) }, true);
        check(&strict, FaultSpec::DropAfterCommit, true);
        check(&strict, FaultSpec::Refuse, true);
        // Late and repeated deliveries stay within the settle bound, whatever the acks.
        check(&loose, FaultSpec::DeliverLate { delay_ms: 2_000 }, true);
        check(&loose, FaultSpec::DeliverLate { delay_ms: 2_001 }, false);
        check(&strict, FaultSpec::Redeliver { after_ms: 0 }, true);
        check(&loose, FaultSpec::Redeliver { after_ms: 2_001 }, false);
    }

    /// `docs/protocol.md` §3.1: every term optional, the cautious default for each, unknown
    /// terms refused with their name.
    #[test]
    fn absent_terms_take_the_cautious_reading_and_unknown_ones_are_refused() {
        let empty: Contract = serde_json::from_value(json!({})).unwrap();
        assert_eq!(empty, Contract::default());
        assert_eq!(
            serde_json::to_value(&empty).unwrap(),
            json!({"idempotency_keys": "ignored", "key_retention_ms": 0, "reads": "strong",
                   "read_lag_ms_max": 0, "acks": "reliable", "settle_ms_max": 30000,
                   "unique_business_key": false, "fencing": false, "conditional_writes": false})
        );
        let one: Contract = serde_json::from_value(json!({"idempotency_keys": "honored"})).unwrap();
        assert_eq!(one, Contract { idempotency_keys: KeyPolicy::Honored, ..Contract::default() });
        let err = serde_json::from_value::<Contract>(json!({"fenceing": true})).unwrap_err();
        assert!(err.to_string().contains("unknown field `fenceing`"), "{err}");
    }

    /// The terms are written in this order wherever a contract is printed (the control API,
    /// `init`), so a field moved here would change bytes elsewhere.
    #[test]
    fn terms_serialize_in_their_documented_order() {
        let text = serde_json::to_string(&Contract::payments_default()).unwrap();
        assert_eq!(
            text,
            "{\"idempotency_keys\":\"honored\",\"key_retention_ms\":86400000,\"reads\":\"strong\",\
             \"read_lag_ms_max\":0,\"acks\":\"reliable\",\"settle_ms_max\":30000,\
             \"unique_business_key\":false,\"fencing\":false,\"conditional_writes\":false}"
        );
    }

    #[test]
    fn every_service_has_its_own_terms() {
        for service in crate::SERVICES {
            assert!(Contract::default_for(service).is_some(), "{service}");
        }
        assert_eq!(Contract::default_for("mail"), None);
        // Messages: a 200 is not a delivery, and the inbox is read with a lag.
        let messages = Contract::messages_default();
        assert_eq!((messages.acks, messages.reads), (Acks::MayLie, Reads::Eventual));
        assert_eq!((messages.idempotency_keys, messages.key_retention_ms), (KeyPolicy::Honored, DAY_MS));
        assert!(messages.admits(&FaultSpec::SilentNoop).is_ok());
    }
}
