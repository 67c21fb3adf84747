//! What the executor is told at start: its services with their contracts, its secrets and its
//! limits. The JSON shapes are those of the `init` message in `docs/protocol.md`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What a service promises (design §4): the one contract type the fakes and the scenarios
/// use too. Absent terms take the cautious reading (`Contract::default`): keys are not assumed
/// to be honoured, reads are strong, acks reliable.
pub use vocabulary::contract::{Acks, Contract, KeyPolicy, Reads};

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
