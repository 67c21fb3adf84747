//! The mutant table: each deliberately broken executor (the executor of `mutant_naive.rs` with
//! one [`Bug`] switched on), the failure modes it stands for, and what must catch it.
//!
//! The mutant tests (`mutants.rs`) check the table against the catalog, the generator and
//! `docs/failure-modes.md`; the search benchmark (`tests/benches/search.rs`) runs the same
//! mutants against generated cases and a protocol-unaware baseline. Both include this file,
//! so neither keeps its own copy.

use harness::check;

use crate::mutant_naive::{Bug, Naive, Style};

pub const NO_DUPLICATE: &str = check::NO_DUPLICATE_EFFECT;
pub const HONEST: &str = check::HONEST_TERMINAL_STATES;
pub const NOTHING_LOST: &str = check::NOTHING_LOST;
pub const LINEAGE: &str = check::LINEAGE;
pub const NO_STALE_WRITE: &str = check::NO_STALE_WRITE;
pub const LIVENESS: &str = check::LIVENESS;

/// One broken executor and what must catch it.
// The benchmark reads only some of the fields.
#[allow(dead_code)]
pub struct Mutant {
    /// Its name in `docs/failure-modes.md`.
    pub name: &'static str,
    pub style: Style,
    pub bug: Bug,
    /// The catalog's `failure_mode` slugs it stands for.
    pub failure_modes: &'static [&'static str],
    /// The catalog scenarios of those failure modes, each with the invariant it must name.
    pub catalog: &'static [(&'static str, &'static str)],
    /// Other catalog scenarios that catch it too (the second table of the doc).
    pub also: &'static [(&'static str, &'static str)],
    /// The invariant the generated (and shrunk) failure must name; `None` for a bug in an
    /// action the generator does not propose (it makes payments and workspaces scenarios
    /// only), which the catalog alone must catch.
    pub generated: Option<&'static str>,
}

impl Mutant {
    pub fn factory(&self) -> Naive {
        Naive::with(self.style, self.bug)
    }
}

/// The mutants, in the order of the failure modes of design §1 and `docs/failure-modes.md`.
pub const MUTANTS: &[Mutant] = &[
    Mutant {
        name: "naive-retry",
        style: Style::LookupFirst,
        bug: Bug::NaiveRetry,
        failure_modes: &["lost_reply"],
        // pi_4812 holds exactly the refund, so the keyless resend is refused (already
        // refunded) and the mutant believes that refusal: `failed` with the refund in the ledger.
        catalog: &[("lost_refund_reply", HONEST)],
        also: &[("timeout_taken_as_no", NO_DUPLICATE), ("second_worker_same_state", NO_DUPLICATE)],
        generated: Some(NO_DUPLICATE),
    },
    Mutant {
        name: "timeout-as-no",
        style: Style::LookupFirst,
        bug: Bug::TimeoutAsNo,
        failure_modes: &["timeout_as_failure"],
        catalog: &[("timeout_taken_as_no", HONEST)],
        also: &[("fault_timeout_after_commit", HONEST), ("fault_drop_after_commit", HONEST)],
        generated: Some(HONEST),
    },
    Mutant {
        name: "key-per-attempt",
        style: Style::KeyRetry,
        bug: Bug::KeyPerAttempt,
        failure_modes: &["key_per_attempt"],
        catalog: &[("key_regenerated_per_attempt", NO_DUPLICATE)],
        also: &[("fault_error_after_commit", NO_DUPLICATE)],
        generated: Some(NO_DUPLICATE),
    },
    Mutant {
        name: "memory-only",
        style: Style::KeyRetry,
        bug: Bug::MemoryOnly,
        failure_modes: &["memory_only_state", "lost_intent"],
        catalog: &[("crash_while_refund_in_flight", NOTHING_LOST), ("crash_after_record", NOTHING_LOST)],
        also: &[("crash_during_reconciliation", NOTHING_LOST)],
        generated: Some(NOTHING_LOST),
    },
    Mutant {
        name: "no-unknown-state",
        style: Style::LookupFirst,
        bug: Bug::NoUnknownState,
        failure_modes: &["no_unknown_state"],
        catalog: &[("unknown_state_required", HONEST)],
        also: &[("fault_commit_after_timeout", HONEST), ("stale_read_back", HONEST)],
        generated: Some(HONEST),
    },
    Mutant {
        name: "no-reconciliation",
        style: Style::KeyRetry,
        bug: Bug::NoReconciliation,
        failure_modes: &["no_reconciliation"],
        catalog: &[("reconciliation_required", LIVENESS)],
        also: &[("crash_during_reconciliation", LIVENESS), ("fault_refuse", LIVENESS)],
        generated: Some(LIVENESS),
    },
    Mutant {
        name: "trusts-ack",
        style: Style::KeyRetry,
        bug: Bug::TrustsAck,
        failure_modes: &["silent_noop"],
        catalog: &[("silent_noop_refund", HONEST), ("fault_silent_noop", HONEST)],
        also: &[],
        generated: Some(HONEST),
    },
    Mutant {
        name: "trusts-stale-read",
        style: Style::LookupFirst,
        bug: Bug::TrustsStaleRead,
        failure_modes: &["stale_read_back", "stale_read"],
        catalog: &[("stale_read_back", NO_DUPLICATE), ("fault_stale_read", NO_DUPLICATE)],
        also: &[("unknown_state_required", NO_DUPLICATE), ("fault_commit_after_timeout", NO_DUPLICATE)],
        // Rare in generated cases, which need a lost reply and a stale read on the same
        // service: about one in four thousand (seed 20 has one at case 135, seed 1 not
        // before case 12265).
        generated: Some(NO_DUPLICATE),
    },
    Mutant {
        name: "key-outlives-retention",
        style: Style::KeyRetry,
        bug: Bug::KeyOutlivesRetention,
        failure_modes: &["key_retention", "forget_keys"],
        // pi_9071 cannot take the refund twice, so the late resend is refused, and the
        // mutant takes the refusal as the intent's answer: `failed` beside the refund.
        catalog: &[("key_expired_before_reconciliation", HONEST), ("fault_forget_keys", NO_DUPLICATE)],
        also: &[("crash_while_refund_in_flight", NO_DUPLICATE), ("reconciliation_required", NO_DUPLICATE)],
        generated: Some(NO_DUPLICATE),
    },
    Mutant {
        name: "keys-assumed-honored",
        style: Style::KeyRetry,
        bug: Bug::KeysAssumedHonored,
        failure_modes: &["keys_ignored", "ignore_keys"],
        catalog: &[("keys_ignored_by_service", NO_DUPLICATE), ("fault_ignore_keys", NO_DUPLICATE)],
        also: &[("clock_jump_inside_terms", NO_DUPLICATE)],
        generated: Some(NO_DUPLICATE),
    },
    Mutant {
        name: "replacement-while-unknown",
        style: Style::KeyRetry,
        bug: Bug::ReplacementWhileUnknown,
        failure_modes: &["replacement_while_unknown"],
        catalog: &[("amount_changed_while_unknown", LINEAGE)],
        also: &[],
        generated: Some(LINEAGE),
    },
    Mutant {
        name: "no-lease",
        style: Style::KeyRetry,
        bug: Bug::NoLease,
        failure_modes: &["stale_worker"],
        catalog: &[("stale_worker_overwrite", NO_STALE_WRITE), ("stale_worker_after_lookup", NO_STALE_WRITE)],
        also: &[],
        // Judged by what happened, not by the missing header: the generator's takeovers
        // rarely leave the paused worker a send still due on a fenced service, so what the
        // search finds first (seed 20, case 975) is a refund the woken worker made after its
        // successor had given up on it: `failed` beside a refund.
        generated: Some(HONEST),
    },
    Mutant {
        name: "unique-ids-assumed",
        style: Style::KeyRetry,
        bug: Bug::UniqueIdsAssumed,
        failure_modes: &["duplicate_create"],
        catalog: &[("workspace_created_twice", NO_DUPLICATE)],
        also: &[("fault_timeout_after_commit", NO_DUPLICATE), ("fault_error_after_commit", NO_DUPLICATE)],
        generated: Some(NO_DUPLICATE),
    },
    Mutant {
        name: "redo-everything",
        style: Style::KeyRetry,
        bug: Bug::RedoEverything,
        failure_modes: &["partial_retry"],
        catalog: &[("only_failed_step_retried", NO_DUPLICATE)],
        also: &[],
        generated: Some(NO_DUPLICATE),
    },
    Mutant {
        name: "re-sign-after-timeout",
        style: Style::KeyRetry,
        bug: Bug::ReSignAfterTimeout,
        failure_modes: &["nonce_trap"],
        catalog: &[("chain_nonce_trap", NO_DUPLICATE)],
        also: &[("chain_error_after_commit", NO_DUPLICATE)],
        generated: None,
    },
    Mutant {
        name: "unfenced-put",
        style: Style::KeyRetry,
        bug: Bug::Unfenced,
        failure_modes: &["blind_overwrite"],
        catalog: &[("files_stale_worker_overwrite", NO_STALE_WRITE)],
        also: &[("files_put_drop_after_commit", NO_DUPLICATE)],
        generated: None,
    },
];
