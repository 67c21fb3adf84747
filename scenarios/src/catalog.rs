//! The hand-written catalog: at least one scenario per known failure mode, embedded in the
//! binary so that a run needs no files. `docs/scenarios.md` lists them.
//!
//! To add one: write `scenarios/catalog/NAME.toml` (its `name` is `NAME`), add `"NAME"` to
//! the list below (kept in alphabetical order), and add its row to `docs/scenarios.md`; the
//! tests fail until all three agree.

use crate::model::Scenario;
use crate::parse::{ScenarioError, parse_scenario};

macro_rules! embed {
    ($($name:literal,)*) => {
        &[$(($name, include_str!(concat!("../catalog/", $name, ".toml"))),)*]
    };
}

/// Every catalog scenario: its name and its TOML text, in alphabetical order.
pub const CATALOG: &[(&str, &str)] = embed![
    "amount_changed_while_unknown",
    "chain_crash_after_signing",
    "chain_error_after_commit",
    "chain_nonce_trap",
    "chain_stale_nonce",
    "clock_jump_inside_terms",
    "crash_after_record",
    "crash_during_reconciliation",
    "crash_while_refund_in_flight",
    "fault_commit_after_timeout",
    "fault_drop_after_commit",
    "fault_error_after_commit",
    "fault_forget_keys",
    "fault_ignore_keys",
    "fault_latency",
    "fault_refuse",
    "fault_reject",
    "fault_silent_noop",
    "fault_stale_read",
    "fault_timeout_after_commit",
    "files_put_drop_after_commit",
    "files_put_error_after_commit",
    "files_stale_worker_after_read",
    "files_stale_worker_overwrite",
    "key_expired_before_reconciliation",
    "key_regenerated_per_attempt",
    "keys_ignored_by_service",
    "lost_refund_reply",
    "only_failed_step_retried",
    "reconciliation_required",
    "replacement_after_rejection",
    "second_worker_same_state",
    "silent_noop_refund",
    "stale_read_back",
    "stale_worker_after_lookup",
    "stale_worker_overwrite",
    "timeout_taken_as_no",
    "unknown_state_required",
    "workspace_created_twice",
];

/// How errors name an embedded scenario: `catalog/NAME.toml`.
pub fn origin(name: &str) -> String {
    format!("catalog/{name}.toml")
}

/// Every catalog scenario, parsed and validated, in the order of [`CATALOG`].
pub fn catalog() -> Result<Vec<Scenario>, ScenarioError> {
    CATALOG.iter().map(|(name, text)| parse_scenario(text, &origin(name))).collect()
}

/// The catalog scenario called `name`, parsed and validated.
pub fn find(name: &str) -> Option<Result<Scenario, ScenarioError>> {
    source(name).map(|text| parse_scenario(text, &origin(name)))
}

/// The TOML text of the catalog scenario called `name`.
pub fn source(name: &str) -> Option<&'static str> {
    CATALOG.iter().find(|(n, _)| *n == name).map(|(_, text)| *text)
}
