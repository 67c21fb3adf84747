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
    "chain_commit_after_timeout",
    "chain_crash_after_signing",
    "chain_crash_during_broadcast",
    "chain_error_after_commit",
    "chain_lost_reply",
    "chain_nonce_trap",
    "chain_replacement_after_rejection",
    "chain_silent_noop",
    "chain_stale_nonce",
    "chain_stale_worker",
    "chain_transfer_rejected_outright",
    "chain_two_transfers_to_one_address",
    "clock_jump_inside_terms",
    "crash_after_record",
    "crash_after_record_every_service",
    "crash_during_reconciliation",
    "crash_while_refund_in_flight",
    "draft_saved_after_lost_reply",
    "equal_partial_refunds_reply_lost",
    "every_service_healed_and_reconciled",
    "fault_commit_after_timeout",
    "fault_delay_webhook",
    "fault_deliver_late",
    "fault_drop_after_commit",
    "fault_duplicate_webhook",
    "fault_error_after_commit",
    "fault_forget_keys",
    "fault_ignore_keys",
    "fault_latency",
    "fault_lose_webhook_ack",
    "fault_redeliver",
    "fault_refuse",
    "fault_reject",
    "fault_silent_noop",
    "fault_stale_read",
    "fault_stale_webhook",
    "fault_timeout_after_commit",
    "fault_webhook_endpoint_down",
    "files_crash_during_reconciliation",
    "files_crash_while_put_in_flight",
    "files_put_commit_after_timeout",
    "files_put_drop_after_commit",
    "files_put_error_after_commit",
    "files_put_forbidden",
    "files_put_refuse",
    "files_put_reject",
    "files_put_silent_noop",
    "files_put_stale_read",
    "files_put_timeout_after_commit",
    "files_put_without_conditional_writes",
    "files_replacement_after_rejection",
    "files_stale_worker_after_read",
    "files_stale_worker_overwrite",
    "key_expired_before_reconciliation",
    "key_regenerated_per_attempt",
    "keys_ignored_by_service",
    "late_commit_after_retries",
    "latency_at_random",
    "lost_refund_reply",
    "messages_accepted_not_delivered",
    "messages_crash_after_record",
    "messages_crash_during_reconciliation",
    "messages_every_answer_goes_wrong",
    "messages_forget_keys",
    "messages_keys_ignored",
    "messages_late_commit",
    "messages_lost_reply",
    "messages_replacement_after_rejection",
    "messages_stale_worker",
    "messages_two_to_one_recipient",
    "onboarding_fault_at_every_step",
    "only_failed_step_retried",
    "partial_refund_exceeds_what_remains",
    "partial_refund_reply_lost",
    "paused_before_the_answer",
    "payments_forget_keys",
    "payments_ignore_keys",
    "payments_stale_worker",
    "permission_denied_after_lost_reply",
    "permission_error_mid_workflow",
    "receipt_nobody_asked_for",
    "reconciliation_required",
    "refund_larger_than_the_charge",
    "refund_permission_denied",
    "refusal_answered_while_paused",
    "replacement_after_rejection",
    "replacement_after_retryable_refusal",
    "second_worker_same_state",
    "silent_noop_refund",
    "stale_read_back",
    "stale_worker_after_lookup",
    "stale_worker_overwrite",
    "step_resolved_once",
    "timeout_taken_as_no",
    "two_workers_race_a_lookup",
    "unknown_state_required",
    "webhook_crash_before_acting",
    "webhook_crash_while_sending",
    "webhook_forged_payment",
    "workspace_created_twice",
    "workspace_name_refused",
    "workspaces_crash_during_reconciliation",
    "workspaces_crash_while_create_in_flight",
    "workspaces_replacement_after_rejection",
];

/// How errors name an embedded scenario: `catalog/NAME.toml`.
pub fn origin(name: &str) -> String {
    format!("catalog/{name}.toml")
}

/// Every catalog scenario, parsed and validated, in the order of [`CATALOG`]: those whose
/// intents an event starts ([`Scenario::needs_webhooks`]) included. An executor that does not
/// receive webhooks has those intents reported as unsupported.
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
