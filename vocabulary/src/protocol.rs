//! The stdio protocol `twice/1` (normative text: `docs/protocol.md`): the shapes both ends
//! share. The harness writes them into `init` and reads the error codes of replies; an
//! executor (the reference one in `executor`, or any other) reads and answers them. Neither
//! end owns them, so they live here, below both.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::contract::Contract;

/// The protocol version the harness and the reference executor speak.
pub const PROTOCOL: &str = "twice/1";

/// Longest line either end writes or reads; a longer one breaks the protocol.
pub const LINE_BYTES_MAX: usize = 1024 * 1024;

// The credentials every worker of every run is given in `init.secrets`, fixed so that runs
// are reproducible; the fakes accept them.

/// The payments API key every worker is given (`secrets.payments_api_key`).
pub const PAYMENTS_API_KEY: &str = "sk_test_twice";

/// The messages API key every worker is given (`secrets.messages_api_key`): Resend's keys
/// start with `re_`, and the fake refuses others.
pub const MESSAGES_API_KEY: &str = "re_test_twice";

/// The private key of the one chain account of every scenario (`secrets.chain_private_key`):
/// keccak256("twice chain account 1"). Fixed, so that runs are reproducible; the runner
/// seeds its address with `scenarios::model::CHAIN_ACCOUNT_BALANCE_WEI`.
pub const CHAIN_PRIVATE_KEY: &str = "0xbebd77e4aa6898d625823fb3dfffda55489b1c9249b01c5912c0ab964a68db9d";

/// The secrets every worker is given: the same in both drivers.
pub fn secrets() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("payments_api_key".to_string(), PAYMENTS_API_KEY.to_string()),
        (crate::CHAIN_PRIVATE_KEY_SECRET.to_string(), CHAIN_PRIVATE_KEY.to_string()),
        (crate::MESSAGES_API_KEY_SECRET.to_string(), MESSAGES_API_KEY.to_string()),
    ])
}

/// Error codes, after Maelstrom's: definite errors say the request did nothing.
pub mod code {
    /// The request timed out (indefinite).
    pub const TIMEOUT: u16 = 0;
    /// The operation or action is not supported (definite).
    pub const NOT_SUPPORTED: u16 = 10;
    /// Cannot serve this now, e.g. before `init` (definite).
    pub const TEMPORARILY_UNAVAILABLE: u16 = 11;
    /// The request is malformed (definite).
    pub const MALFORMED_REQUEST: u16 = 12;
    /// The executor failed inside (indefinite).
    pub const CRASH: u16 = 13;
    /// An intent with this id exists with another payload (definite).
    pub const KEY_ALREADY_EXISTS: u16 = 21;
}

/// A service an executor may call, as `init` announces it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub url: String,
    #[serde(default)]
    pub contract: Contract,
}

/// Bounds on everything an executor waits for or repeats, as `init` announces them.
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

/// Everything an executor is configured with at `init`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    pub worker_id: String,
    pub services: BTreeMap<String, Service>,
    /// e.g. `payments_api_key`.
    pub secrets: BTreeMap<String, String>,
    pub limits: Limits,
}
