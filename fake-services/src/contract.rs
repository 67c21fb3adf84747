//! Service contracts: what a service promises its callers.
//!
//! A contract is both a setting of the fake (some terms change what it does: keys ignored,
//! key retention, unique business keys, fencing) and the promise the harness announces to an
//! executor. [`Contract::admits`] says whether a fault stays inside the promise, so that a
//! harness can inject only faults for which a correct executor exists.

use serde::{Deserialize, Serialize};

use crate::rule::FaultSpec;

/// Whether a service honours `Idempotency-Key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyPolicy {
    Honored,
    Ignored,
}

/// How fresh reads are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reads {
    Strong,
    Eventual,
}

/// Whether a success reply can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Acks {
    Reliable,
    MayLie,
}

/// The terms a service promises. Times are in service milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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

/// 24 hours: Stripe's documented minimum key retention.
pub const DAY_MS: u64 = 24 * 60 * 60 * 1000;

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

/// A partial contract, for the control API: absent fields stay as they are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContractPatch {
    pub idempotency_keys: Option<KeyPolicy>,
    pub key_retention_ms: Option<u64>,
    pub reads: Option<Reads>,
    pub read_lag_ms_max: Option<u64>,
    pub acks: Option<Acks>,
    pub settle_ms_max: Option<u64>,
    pub unique_business_key: Option<bool>,
    pub fencing: Option<bool>,
    pub conditional_writes: Option<bool>,
}

#[cfg(test)]
mod tests {
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
    }
}
