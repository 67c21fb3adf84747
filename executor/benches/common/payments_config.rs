//! The executor's configuration for the payments fake, shared by the intents benchmark and the
//! `count_intents` example (which includes this file by path), so that what is timed and what
//! is counted drive the same executor.

use std::collections::BTreeMap;

use vocabulary::Contract;
use vocabulary::KeyPolicy;
use vocabulary::protocol::Config;
use vocabulary::protocol::Limits;
use vocabulary::protocol::Service;

/// The payments service at `url` with the fake's contract (keys honoured for a day), and the
/// library's default limits; `worker_id` names the worker.
pub fn config(url: &str, worker_id: &str) -> Config {
    let contract = Contract {
        idempotency_keys: KeyPolicy::Honored,
        key_retention_ms: 86_400_000,
        ..Contract::default()
    };
    Config {
        worker_id: worker_id.into(),
        services: BTreeMap::from([("payments".to_string(), Service { url: url.to_string(), contract })]),
        secrets: BTreeMap::from([("payments_api_key".to_string(), "sk_test_twice".to_string())]),
        limits: Limits::default(),
    }
}
