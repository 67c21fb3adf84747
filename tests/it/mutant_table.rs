//! The mutant table: each deliberately broken executor (the executor of `mutant_naive.rs` with
//! one [`Bug`] switched on), the failure modes it stands for, and what must catch it.
//!
//! The mutant tests (`mutants.rs`) check the table against the catalog, the generator and
//! `docs/failure-modes.md`; the search benchmark (`tests/benches/search.rs`) runs the same
//! mutants against generated cases and a protocol-unaware baseline. Both include this file,
//! so neither keeps its own copy.

use crate::mutant_naive::{Bug, Naive, Style};

pub const NO_DUPLICATE: &str = checker::NO_DUPLICATE_EFFECT;
pub const NO_UNAUTHORISED: &str = checker::NO_UNAUTHORISED_EFFECT;
pub const HONEST: &str = checker::HONEST_TERMINAL_STATES;
pub const NOTHING_LOST: &str = checker::NOTHING_LOST;
pub const LINEAGE: &str = checker::LINEAGE;
pub const NO_STALE_WRITE: &str = checker::NO_STALE_WRITE;
pub const LIVENESS: &str = checker::LIVENESS;
pub const WORKFLOW: &str = checker::WORKFLOW;
pub const REFUSAL_RESPECTED: &str = checker::REFUSAL_RESPECTED;
pub const EXPECTED_STATES: &str = checker::EXPECTED_STATES;

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
    /// The invariant the generated (and shrunk) failure must name; `None` for a bug no
    /// generated case can reach, which the catalog alone must catch.
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
        catalog: &[
            ("lost_refund_reply", HONEST),
            ("chain_lost_reply", HONEST),
            ("messages_lost_reply", HONEST),
        ],
        also: &[
            ("timeout_taken_as_no", NO_DUPLICATE),
            ("second_worker_same_state", NO_DUPLICATE),
            ("files_put_commit_after_timeout", HONEST),
            ("files_put_stale_read", HONEST),
            ("files_put_timeout_after_commit", HONEST),
            ("files_put_without_conditional_writes", HONEST),
            ("payments_forget_keys", HONEST),
            ("payments_ignore_keys", HONEST),
            ("workspaces_crash_during_reconciliation", HONEST),
            ("permission_denied_after_lost_reply", HONEST),
        ],
        generated: Some(HONEST),
    },
    Mutant {
        name: "timeout-as-no",
        style: Style::LookupFirst,
        bug: Bug::TimeoutAsNo,
        failure_modes: &["timeout_as_failure"],
        catalog: &[("timeout_taken_as_no", HONEST)],
        also: &[
            ("fault_timeout_after_commit", HONEST),
            ("fault_drop_after_commit", HONEST),
            ("chain_commit_after_timeout", HONEST),
            ("chain_lost_reply", HONEST),
            ("files_crash_during_reconciliation", HONEST),
            ("files_put_commit_after_timeout", HONEST),
            ("files_put_stale_read", HONEST),
            ("files_put_timeout_after_commit", HONEST),
            ("files_put_without_conditional_writes", HONEST),
            ("payments_forget_keys", HONEST),
            ("payments_ignore_keys", HONEST),
            ("workspaces_crash_during_reconciliation", HONEST),
            ("permission_denied_after_lost_reply", HONEST),
        ],
        generated: Some(HONEST),
    },
    Mutant {
        name: "key-per-attempt",
        style: Style::KeyRetry,
        bug: Bug::KeyPerAttempt,
        failure_modes: &["key_per_attempt"],
        // Where several refunds or messages share a payment or a recipient, the one resent is
        // the one doubled, whether its sibling differs (shipping and an item) or not (two
        // items of one price, where only the count of refunds can show it).
        catalog: &[
            ("key_regenerated_per_attempt", NO_DUPLICATE),
            ("partial_refund_reply_lost", NO_DUPLICATE),
            ("equal_partial_refunds_reply_lost", NO_DUPLICATE),
            ("messages_two_to_one_recipient", NO_DUPLICATE),
        ],
        also: &[
            ("fault_error_after_commit", NO_DUPLICATE),
            ("files_put_without_conditional_writes", NO_DUPLICATE),
            ("payments_forget_keys", NO_DUPLICATE),
            ("payments_ignore_keys", NO_DUPLICATE),
            ("payments_stale_worker", NO_DUPLICATE),
            ("workspaces_crash_during_reconciliation", NO_DUPLICATE),
        ],
        generated: Some(NO_DUPLICATE),
    },
    Mutant {
        name: "memory-only",
        style: Style::KeyRetry,
        bug: Bug::MemoryOnly,
        failure_modes: &["memory_only_state", "lost_intent"],
        catalog: &[
            ("crash_while_refund_in_flight", NOTHING_LOST),
            ("crash_after_record", NOTHING_LOST),
            ("crash_after_record_every_service", NOTHING_LOST),
            ("files_crash_while_put_in_flight", NOTHING_LOST),
            ("workspaces_crash_while_create_in_flight", NOTHING_LOST),
            ("messages_crash_after_record", NOTHING_LOST),
        ],
        also: &[
            ("crash_during_reconciliation", NOTHING_LOST),
            ("files_crash_during_reconciliation", NOTHING_LOST),
            ("workspaces_crash_during_reconciliation", NOTHING_LOST),
            ("chain_crash_during_broadcast", NOTHING_LOST),
        ],
        generated: Some(NOTHING_LOST),
    },
    Mutant {
        name: "no-unknown-state",
        style: Style::LookupFirst,
        bug: Bug::NoUnknownState,
        failure_modes: &["no_unknown_state"],
        catalog: &[("unknown_state_required", HONEST)],
        also: &[
            ("fault_commit_after_timeout", HONEST),
            ("stale_read_back", HONEST),
            ("chain_commit_after_timeout", HONEST),
            ("files_put_commit_after_timeout", HONEST),
            ("files_put_stale_read", HONEST),
            ("permission_denied_after_lost_reply", HONEST),
        ],
        generated: Some(HONEST),
    },
    Mutant {
        name: "no-reconciliation",
        style: Style::KeyRetry,
        bug: Bug::NoReconciliation,
        failure_modes: &["no_reconciliation"],
        catalog: &[("reconciliation_required", LIVENESS)],
        also: &[
            ("crash_during_reconciliation", LIVENESS),
            ("fault_refuse", LIVENESS),
            ("messages_accepted_not_delivered", LIVENESS),
            ("chain_commit_after_timeout", LIVENESS),
            ("chain_lost_reply", LIVENESS),
            ("chain_silent_noop", LIVENESS),
            ("files_crash_during_reconciliation", LIVENESS),
            ("files_put_commit_after_timeout", LIVENESS),
            ("files_put_refuse", LIVENESS),
            ("files_put_silent_noop", LIVENESS),
            ("files_put_stale_read", LIVENESS),
            ("files_put_timeout_after_commit", LIVENESS),
            ("files_put_without_conditional_writes", LIVENESS),
            ("payments_forget_keys", LIVENESS),
            ("payments_ignore_keys", LIVENESS),
            ("workspaces_crash_during_reconciliation", LIVENESS),
            ("permission_denied_after_lost_reply", LIVENESS),
        ],
        generated: Some(LIVENESS),
    },
    Mutant {
        name: "trusts-ack",
        style: Style::KeyRetry,
        bug: Bug::TrustsAck,
        failure_modes: &["silent_noop"],
        catalog: &[
            ("silent_noop_refund", HONEST),
            ("fault_silent_noop", HONEST),
            ("files_put_silent_noop", HONEST),
        ],
        also: &[],
        generated: Some(HONEST),
    },
    Mutant {
        name: "trust-the-202",
        style: Style::KeyRetry,
        bug: Bug::TrustThe202,
        failure_modes: &["accepted_not_delivered"],
        // The API accepts the message and it never arrives: the mutant claims `confirmed` on the
        // 200 while the recipient's inbox, and the ledger, hold nothing.
        catalog: &[("messages_accepted_not_delivered", HONEST)],
        also: &[],
        generated: Some(HONEST),
    },
    Mutant {
        name: "old-key-resend",
        style: Style::KeyRetry,
        bug: Bug::OldKeyResend,
        failure_modes: &["accepted_not_delivered"],
        // The inbox stays empty, so the message is sent again, under the key of the hollow
        // 200: the service, which keeps keys a day, replays that 200 at every attempt, and the
        // message ends `failed`, never delivered, where a new key delivers it.
        catalog: &[("messages_accepted_not_delivered", EXPECTED_STATES)],
        also: &[],
        generated: None,
    },
    Mutant {
        name: "trusts-stale-read",
        style: Style::LookupFirst,
        bug: Bug::TrustsStaleRead,
        failure_modes: &["stale_read_back", "stale_read", "delivered_late"],
        // A message on its way is not in the inbox yet: believing the first empty read sends it
        // again, and both copies land.
        catalog: &[
            ("stale_read_back", NO_DUPLICATE),
            ("fault_stale_read", NO_DUPLICATE),
            ("fault_deliver_late", NO_DUPLICATE),
        ],
        also: &[
            ("unknown_state_required", NO_DUPLICATE),
            ("fault_commit_after_timeout", NO_DUPLICATE),
            ("messages_late_commit", NO_DUPLICATE),
            ("permission_denied_after_lost_reply", HONEST),
        ],
        // Generated cases need a "not there" read before the effect is visible (a stale read,
        // or a commit held past the client's timeout): seed 20 has one at case 19.
        generated: Some(NO_DUPLICATE),
    },
    Mutant {
        name: "key-outlives-retention",
        style: Style::KeyRetry,
        bug: Bug::KeyOutlivesRetention,
        failure_modes: &["key_retention", "forget_keys"],
        // pi_9071 cannot take the refund twice, so the late resend is refused (400
        // amount_too_large), and the mutant takes the refusal as the intent's answer:
        // escalated, saying nothing was done, beside the refund.
        catalog: &[
            ("key_expired_before_reconciliation", HONEST),
            ("fault_forget_keys", NO_DUPLICATE),
            ("payments_forget_keys", NO_DUPLICATE),
        ],
        also: &[
            ("crash_while_refund_in_flight", NO_DUPLICATE),
            ("reconciliation_required", NO_DUPLICATE),
            ("workspaces_crash_during_reconciliation", NO_DUPLICATE),
            ("permission_denied_after_lost_reply", HONEST),
        ],
        generated: Some(NO_DUPLICATE),
    },
    Mutant {
        name: "keys-assumed-honored",
        style: Style::KeyRetry,
        bug: Bug::KeysAssumedHonored,
        failure_modes: &["keys_ignored", "ignore_keys"],
        catalog: &[
            ("keys_ignored_by_service", NO_DUPLICATE),
            ("fault_ignore_keys", NO_DUPLICATE),
            ("payments_ignore_keys", NO_DUPLICATE),
        ],
        also: &[
            ("clock_jump_inside_terms", NO_DUPLICATE),
            ("files_put_without_conditional_writes", NO_DUPLICATE),
        ],
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
        catalog: &[("stale_worker_overwrite", NO_STALE_WRITE)],
        also: &[],
        // Judged by what happened, not by the missing header: the generator's takeovers
        // rarely leave the paused worker a send still due on a fenced service, so what the
        // search finds first (seed 20, case 975) is a refund the woken worker made after its
        // successor had given up on it: `failed` beside a refund.
        generated: Some(HONEST),
    },
    Mutant {
        name: "constant-fencing-token",
        style: Style::KeyRetry,
        bug: Bug::ConstantFencingToken,
        failure_modes: &["stale_worker"],
        // A safeguard faked, not skipped: the token is there, so no hazard is listed, and the
        // paused worker's late write lands on its successor's, which the journals show.
        catalog: &[("stale_worker_overwrite", NO_STALE_WRITE)],
        also: &[],
        generated: Some(HONEST),
    },
    Mutant {
        name: "unique-ids-assumed",
        style: Style::KeyRetry,
        bug: Bug::UniqueIdsAssumed,
        failure_modes: &["duplicate_create"],
        catalog: &[("workspace_created_twice", NO_DUPLICATE)],
        also: &[
            ("fault_timeout_after_commit", NO_DUPLICATE),
            ("fault_error_after_commit", NO_DUPLICATE),
            ("workspaces_crash_during_reconciliation", NO_DUPLICATE),
        ],
        generated: Some(NO_DUPLICATE),
    },
    Mutant {
        name: "redo-everything",
        style: Style::KeyRetry,
        bug: Bug::RedoEverything,
        failure_modes: &["partial_retry"],
        catalog: &[
            ("only_failed_step_retried", NO_DUPLICATE),
            ("draft_saved_after_lost_reply", NO_DUPLICATE),
        ],
        also: &[],
        generated: Some(NO_DUPLICATE),
    },
    Mutant {
        name: "re-resolve",
        style: Style::KeyRetry,
        bug: Bug::ReResolve,
        failure_modes: &["reresolved_parameter"],
        catalog: &[("step_resolved_once", WORKFLOW)],
        also: &[],
        generated: None,
    },
    Mutant {
        name: "re-sign-after-timeout",
        style: Style::KeyRetry,
        bug: Bug::ReSignAfterTimeout,
        failure_modes: &["nonce_trap"],
        catalog: &[("chain_nonce_trap", NO_DUPLICATE), ("chain_two_transfers_to_one_address", NO_DUPLICATE)],
        also: &[("chain_error_after_commit", NO_DUPLICATE), ("chain_lost_reply", NO_DUPLICATE)],
        generated: Some(NO_DUPLICATE),
    },
    Mutant {
        name: "unfenced-put",
        style: Style::KeyRetry,
        bug: Bug::Unfenced,
        failure_modes: &["blind_overwrite"],
        catalog: &[("files_stale_worker_overwrite", NO_STALE_WRITE)],
        also: &[
            ("files_put_drop_after_commit", NO_DUPLICATE),
            ("files_crash_during_reconciliation", NO_DUPLICATE),
            ("files_crash_while_put_in_flight", NO_DUPLICATE),
            ("files_put_commit_after_timeout", NO_DUPLICATE),
            ("files_put_stale_read", NO_DUPLICATE),
            ("files_put_timeout_after_commit", NO_DUPLICATE),
        ],
        generated: Some(NO_DUPLICATE),
    },
    Mutant {
        name: "verdict-before-lookup",
        style: Style::LookupFirst,
        bug: Bug::VerdictBeforeLookup,
        failure_modes: &["crash_in_reconcile"],
        // The worker is killed while its read-back of the lost refund is out: the row says
        // `failed`, and the restarted worker leaves a terminal intent alone.
        catalog: &[("crash_during_reconciliation", HONEST), ("messages_crash_during_reconciliation", HONEST)],
        also: &[],
        generated: Some(HONEST),
    },
    Mutant {
        name: "unconditional-resend",
        style: Style::KeyRetry,
        bug: Bug::UnconditionalResend,
        failure_modes: &["error_after_commit"],
        // The first put stores the export and answers 500; the resend, without its
        // If-None-Match, stores it again.
        catalog: &[("files_put_error_after_commit", NO_DUPLICATE)],
        also: &[("files_put_drop_after_commit", NO_DUPLICATE)],
        generated: Some(NO_DUPLICATE),
    },
    Mutant {
        name: "signature-in-memory",
        style: Style::KeyRetry,
        bug: Bug::SignatureInMemory,
        failure_modes: &["crash_after_signing"],
        // The broadcast reaches the node and is mined as the worker dies; the restarted worker
        // finds no signed bytes and signs the transfer anew with the next nonce.
        catalog: &[("chain_crash_during_broadcast", NO_DUPLICATE)],
        also: &[],
        generated: Some(NO_DUPLICATE),
    },
    Mutant {
        name: "settle-from-first-send",
        style: Style::KeyRetry,
        bug: Bug::SettleFromFirstSend,
        failure_modes: &["commit_after_timeout"],
        // Two 429s put the third, late-committing send 1.5 s after the first: the bound
        // counted from the first is over before the workspace appears.
        catalog: &[("late_commit_after_retries", NO_DUPLICATE)],
        also: &[],
        generated: Some(NO_DUPLICATE),
    },
    Mutant {
        name: "refusal-releases-replacement",
        style: Style::KeyRetry,
        bug: Bug::RefusalReleasesReplacement,
        failure_modes: &["replacement_after_failure"],
        // The original's 429 releases the replacement; the original's retry goes through too.
        catalog: &[("replacement_after_retryable_refusal", LINEAGE)],
        also: &[],
        generated: Some(LINEAGE),
    },
    Mutant {
        name: "lease-without-cas",
        style: Style::KeyRetry,
        bug: Bug::LeaseWithoutCas,
        failure_modes: &["concurrent_workers"],
        // Both workers look the workspace up once the lease has run out, both find nothing,
        // and both create it on a service that ignores keys.
        catalog: &[("two_workers_race_a_lookup", NO_DUPLICATE)],
        also: &[],
        generated: Some(NO_DUPLICATE),
    },
    Mutant {
        name: "service-clock-trusted",
        style: Style::KeyRetry,
        bug: Bug::ServiceClockTrusted,
        failure_modes: &["clock_skew"],
        // The refund is stamped an hour ahead of the executor's clock, taken for someone
        // else's, and made again on a service that ignores keys.
        catalog: &[("clock_jump_inside_terms", NO_DUPLICATE)],
        also: &[],
        generated: Some(HONEST),
    },
    Mutant {
        name: "answer-judged-when-read",
        style: Style::KeyRetry,
        bug: Bug::SettledWhenRead,
        failure_modes: &["stale_read_back"],
        // The read-back is asked before the late commit and read two seconds later, past the
        // settle bound: taken for final, and the create is sent again on a service that
        // ignores keys.
        catalog: &[("paused_before_the_answer", NO_DUPLICATE)],
        also: &[],
        // It takes a pause at a lookup that is out before a late commit lands, while the run
        // still has work to drain: drawn step by step, all of them together came about once in
        // twenty thousand cases, so the generator lines them up whole in a case with a pause
        // (a stopped read-back, `aimed_steps` in `scenarios/src/generate/draw.rs`); the bug then
        // shows within a few hundred cases in every seed.
        generated: Some(NO_DUPLICATE),
    },
    Mutant {
        name: "retry-a-403",
        style: Style::KeyRetry,
        bug: Bug::RetryA403,
        failure_modes: &["needs_decision"],
        // The refund is refused with 403 once; the mutant sends it again, the permission is
        // there by then, and a refund nobody decided on lands.
        // In `refusal_answered_while_paused` the workspace's 422 waits past the worker's
        // timeout and is not held against anyone; the refund's 403, read, is.
        catalog: &[
            ("refund_permission_denied", REFUSAL_RESPECTED),
            ("refusal_answered_while_paused", REFUSAL_RESPECTED),
        ],
        also: &[
            ("files_replacement_after_rejection", REFUSAL_RESPECTED),
            ("chain_replacement_after_rejection", REFUSAL_RESPECTED),
        ],
        // A reject that needs a decision on a write is in the generator's table; one that
        // fires once lets the retry through.
        generated: Some(REFUSAL_RESPECTED),
    },
    Mutant {
        name: "overreach",
        style: Style::KeyRetry,
        bug: Bug::Overreach,
        failure_modes: &["overreach"],
        // A refusal decided by the executor itself, one per service, and a refund's receipt:
        // each an effect no intent authorised.
        catalog: &[
            ("partial_refund_exceeds_what_remains", NO_UNAUTHORISED),
            ("workspace_name_refused", NO_UNAUTHORISED),
            ("files_put_forbidden", NO_UNAUTHORISED),
            ("chain_transfer_rejected_outright", NO_UNAUTHORISED),
            ("receipt_nobody_asked_for", NO_UNAUTHORISED),
        ],
        also: &[
            ("refund_permission_denied", NO_UNAUTHORISED),
            ("refund_larger_than_the_charge", NO_UNAUTHORISED),
            ("files_put_reject", NO_UNAUTHORISED),
            ("chain_replacement_after_rejection", NO_UNAUTHORISED),
        ],
        // Generated refusals that need a decision, and refunds where messages are announced.
        generated: Some(NO_UNAUTHORISED),
    },
    Mutant {
        name: "webhook-no-dedupe",
        style: Style::KeyRetry,
        bug: Bug::WebhookNoDedupe,
        failure_modes: &["webhook_delivered_twice", "webhook_ack_lost"],
        // The second delivery, at once or after the lost 2xx, starts the email again under a
        // new key.
        catalog: &[("fault_duplicate_webhook", NO_DUPLICATE), ("fault_lose_webhook_ack", NO_DUPLICATE)],
        also: &[],
        generated: Some(NO_DUPLICATE),
    },
    Mutant {
        name: "webhook-ack-first",
        style: Style::KeyRetry,
        bug: Bug::WebhookAckFirst,
        failure_modes: &["webhook_acked_before_work"],
        // Killed as it reads the payment, after its 200: the service never sends the event
        // again, and the email never goes.
        catalog: &[("webhook_crash_before_acting", EXPECTED_STATES)],
        also: &[],
        // Generated cases expect no states: the email never sent is an intent lost.
        generated: Some(NOTHING_LOST),
    },
    Mutant {
        name: "webhook-trusts-body",
        style: Style::KeyRetry,
        bug: Bug::WebhookTrustsBody,
        failure_modes: &["webhook_forged"],
        // The forgery claims order 2 was paid; believed, it sends order 2's welcome.
        catalog: &[("webhook_forged_payment", NO_UNAUTHORISED)],
        also: &[],
        generated: Some(NO_UNAUTHORISED),
    },
];
