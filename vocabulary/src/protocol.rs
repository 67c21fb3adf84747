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
