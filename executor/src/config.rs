//! What the executor is told at start: its services with their contracts, its secrets and its
//! limits. The JSON shapes are those of the `init` message in `docs/protocol.md`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Whether a service honours idempotency keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyPolicy {
    Honored,
    Ignored,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reads {
    Strong,
    Eventual,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Acks {
    Reliable,
    MayLie,
}

/// What a service promises (design §4). Absent terms take the cautious reading where one
/// exists: keys are not assumed to be honoured, reads are strong, acks reliable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Contract {
    pub idempotency_keys: KeyPolicy,
    pub key_retention_ms: u64,
    pub reads: Reads,
    pub read_lag_ms_max: u64,
    pub acks: Acks,
    pub settle_ms_max: u64,
    pub unique_business_key: bool,
    pub fencing: bool,
    pub conditional_writes: bool,
}

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

/// A service the executor may call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub url: String,
    #[serde(default)]
    pub contract: Contract,
}

/// Bounds on everything the executor waits for or repeats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Each HTTP request, connect to last byte.
    pub request_timeout_ms: u64,
    /// How long a worker owns an intent after taking it.
    pub lease_ms: u64,
    /// Sends of one intent, over its life.
    pub attempts_max: u32,
    /// An intent unresolved this long after its first send is escalated (never earlier than
    /// its services' settle and read-lag bounds allow a negative answer to become final).
    pub escalate_after_ms: u64,
    /// Pause between passes while draining.
    pub pass_pause_ms: u64,
    /// Intents handled in one pass.
    pub batch_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            request_timeout_ms: 2_000,
            lease_ms: 10_000,
            attempts_max: 5,
            escalate_after_ms: 60_000,
            pass_pause_ms: 20,
            batch_max: 64,
        }
    }
}

/// Everything the executor is configured with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    pub worker_id: String,
    pub services: BTreeMap<String, Service>,
    /// e.g. `payments_api_key`.
    pub secrets: BTreeMap<String, String>,
    pub limits: Limits,
}
