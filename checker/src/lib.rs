//! The checker: the invariants of design §5, each a named check with a verdict and evidence.
//!
//! [`check`] compares what an executor finally claims ([`Observed::claims`]) with what the
//! ledgers show ([`Observed::ledgers`]). It never takes the executor's word for what
//! happened in the world. It returns one [`Verdict`] per invariant, in [`INVARIANTS`] order,
//! then one for [`EXPECTED_STATES`] (the scenario's `expect` table); or, when the run could
//! not be checked ([`Observed::executor_error`]), a single [`EXECUTOR_ERROR`] verdict, and when
//! the world could not settle ([`Observed::unsettled`]), a single [`WORLD_UNSETTLED`] one. A
//! verdict's evidence is empty when it held, and otherwise says, one line per problem, which
//! intents, which effects (service, object id, ledger seq) and which states are involved.
//! Lines come in a stable order (scenario order for intents, ledger order for effects), so
//! the same run always gives the same verdicts.
//!
//! # Attribution
//!
//! Effects are found by the business key of the action table (`vocabulary::ACTIONS`: service,
//! `effect_kind`, `business_key`), which the checker reads:
//!
//! | action | effects | business key | shared by several intents |
//! |---|---|---|---|
//! | `payments.refund` | `payments` ledger, kind `refund.created` | `params.payment_intent` | yes (partial refunds) |
//! | `workspaces.create` | `workspaces` ledger, kind `workspace.created` | `params.external_id` | no |
//! | `files.put` | `files` ledger, kind `object.put` | `params.key` | no |
//! | `chain.transfer` | `chain` ledger, kind `tx.mined` | `params.to` | yes |
//! | `messages.send` | `messages` ledger, kind `message.delivered` | `params.to` | yes |
//!
//! An effect with an intent's business key is a *candidate* of that intent when it carries
//! exactly the parameters the intent authorised (every field of its `params`, e.g. `amount`
//! for a refund, `name` for a workspace, `bucket` and `body` for an object, `value` for a
//! transfer, `subject` and `body` for a message). Three things narrow the candidates:
//!
//! - **The caller's tag.** An effect whose write was tagged with an intent's id
//!   (`vocabulary::INTENT_TAG`: refund or workspace `metadata[twice_intent]`, an object's
//!   `x-amz-meta-twice-intent`, a message's `X-Twice-Intent` header or `twice_intent` tag) is
//!   that intent's, where it carries that intent's parameters (a tag is not believed over
//!   parameters another intent authorised). The reference executor and the example executors
//!   tag every write a service lets them tag.
//! - **A claim that names the effect**, where exactly one candidate's does: its idempotency
//!   key (`key` or `previous_keys` in the evidence), or its object id as `external_id` (a
//!   refund's or a workspace's id) or `tx_hash`. An executor that knows which effect is its
//!   own says so; two claims naming one effect narrow nothing.
//! - **Nobody authorised the parameters**: the effect was meant for the intent its tag names,
//!   or for the only intent of its key, and [`NO_UNAUTHORISED_EFFECT`] reports how it differs
//!   (with several intents on the key and no tag it is nobody's; in a lineage of several
//!   members, the lineage's).
//!
//! Where an effect still has several candidates, the ledger can be read more than one way
//! (`check/readings.rs`): a *reading* gives each effect one of its candidates, and only the
//! readings with the fewest duplicates count (each lineage owns one effect at most). A
//! duplicate is proved when a business key's effects outnumber the lineages that could own
//! them; a claim is judged against every reading, violated where all of them contradict it and
//! not judged, with the effects in doubt named, where only some do. The first reading that
//! bears every claim out is the attribution the other checks and the reports use.
//!
//! A *lineage* is an intent and its replacements (`replaces`): at most one effect between
//! them. An effect whose business key belongs to no intent of the scenario, or of a kind no
//! action makes (an object deleted), is an effect nobody authorised
//! ([`NO_UNAUTHORISED_EFFECT`]). An effect the service made again by itself,
//! `params.provider_redelivery = true` (a message the provider delivered a second time by its
//! own retry), is the provider's: no invariant counts it, and [`attribute`] leaves it out
//! (the reports mark it as the provider's). Intents whose action has no row above are checked
//! for everything that needs no ledger (nothing lost, escalation evidence, liveness, expected
//! states). Intents whose action is in [`Observed::unsupported`] are exempt from every check,
//! and so are the effects that carry their business keys.
//!
//! # Verdicts: held, violated, not judged
//!
//! Every verdict names harm that happened in this run, shown by the ledgers, the journals and
//! the timeline; a habit that did no harm is a [`Hazard`] (below), never a violation. Where a
//! run gives an invariant nothing to judge, its verdict is [`Status::NotJudged`] with the
//! reason: no intent of an action whose ledger the checker reads, nothing acknowledged, no
//! replacement (or one whose predecessor's resolution the executor never reported), no
//! second worker life writing where a guard was offered, no expectations.
//!
//! # Stale writes
//!
//! [`NO_STALE_WRITE`] judges writes to a service that offers a guard against them in the
//! scenario's contract (`workspaces` with `fencing`, `files` with `conditional_writes`), and
//! only when more than one worker life reached that service. Every request carries its worker
//! life as its origin (`w1#1`, `w2#1`, `w1#2` after a restart: the harness labels it by the
//! connection it came on, never by anything the executor says). A write *won although a newer
//! decision had been made* when, for one business key, an effect of the older life A (the
//! one whose first request reached the service first) lands after an effect of another life B,
//! and no request of A reached the service between B's effect and A's write: A decided on a
//! world without B's write. That is a stale worker's write landing on top of its successor's,
//! whether it was held in flight (a late commit) or sent when the worker woke. A guard the
//! executor used (a fencing token lower than the newest, an `If-Match` on an older version) is
//! what stops such a write from ever reaching the ledger.
//!
//! # Refusals
//!
//! [`REFUSAL_RESPECTED`] judges what an executor did after a service refused one of its writes
//! with a status a person must act on (400 or 422: the input; 401 or 403: a credential or a
//! permission). A fake records such a refusal in its journal with what the refused request
//! asked for (`JournalEntry::params`, in its effect's parameter names), which attributes it to
//! an intent as an effect is attributed; an effect of that intent whose request reached the
//! service after the refusal (journal order), from the worker life that got it (the journal's
//! origin), is a write the service had said must wait for a person. A send that left before
//! the refusal and landed late is none, nor is one from another life, which may never have
//! learnt of the refusal (its predecessor killed before it read the answer). Not judged when
//! no write of an intent was refused that way. [`HONEST_TERMINAL_STATES`] holds the claim that
//! goes with such a refusal to the ledger: an `escalated` intent whose evidence says
//! `could_duplicate: false` (going on cannot write twice) must have no effect.
//!
//! # Hazards
//!
//! [`hazards`] lists the safeguards a contract offered that a write did not use, whatever the
//! verdicts: a create without a fencing token where `fencing` is offered
//! ([`HAZARD_NO_FENCING_TOKEN`]), an object put without `If-Match` or `If-None-Match` where
//! `conditional_writes` is offered ([`HAZARD_NO_PRECONDITION`]), and a write sent under an
//! idempotency key longer after a write under it took effect than the service keeps keys
//! ([`HAZARD_KEY_PAST_RETENTION`]; a resend after sends that never took effect repeats
//! nothing), and a replacement that took effect before its predecessor was resolved where the
//! predecessor never took effect ([`HAZARD_EARLY_REPLACEMENT`]: had it, that would be a
//! [`LINEAGE`] violation). Each names the catalog scenario that would exploit it.
//!
//! # The timeline's state moments
//!
//! The [`LINEAGE`] check reads when a predecessor was resolved from the timeline: a
//! [`results::Moment`] with kind [`STATE_MOMENT`] (`"state"`), the worker as lane, and
//! as detail `ID -> STATE`, written by [`state_detail`]. [`parse_state_detail`] is tolerant:
//! space around the arrow is optional, `→` works as well as `->`, the id is everything before
//! the last arrow, the state is the first word after it (a note may follow, e.g.
//! `r1 -> failed (card declined)`), and states compare case-insensitively.

// What the crate does not export is `pub(crate)`, so that its API is what it says it is.
#![warn(unreachable_pub)]

use std::collections::BTreeMap;

use scenarios::Scenario;
use vocabulary::State;

use results::{EffectRef, Observed};
use results::{Hazard, Verdict};

// One module per group of invariants, each adding its checks to the `Facts` that
// `attribution` builds; this file holds the names and the public entry points.
mod attribution;
mod claims;
mod duplicates;
mod hazards;
mod lineage;
mod readings;
mod refusals;
mod stale;
mod status;
#[cfg(test)]
mod tests;
mod unauthorised;
mod workflow;

use attribution::Facts;

/// At most one effect per intent, and at most one per lineage (every supported action is
/// exclusive); where the ledger cannot say whose an effect is, no more effects on a business
/// key than the lineages that could own them.
pub const NO_DUPLICATE_EFFECT: &str = "no-duplicate-effect";
/// Every effect in every ledger is one an intent of the scenario authorised: its action, its
/// business key and exactly its parameters. Reads, seeds and a provider's own redelivery are
/// not effects.
pub const NO_UNAUTHORISED_EFFECT: &str = "no-unauthorised-effect";
/// `confirmed` only with exactly one effect carrying exactly the authorised parameters;
/// `failed` only with no effect, and `escalated` with `could_duplicate: false` (going on cannot
/// write twice) only with none either.
pub const HONEST_TERMINAL_STATES: &str = "honest-terminal-states";
/// `escalated` carries evidence; no `confirmed` without an effect, no `failed` with one.
pub const UNKNOWN_IS_NOT_A_LIE: &str = "unknown-is-not-a-lie";
/// Every acknowledged intent is in the final status.
pub const NOTHING_LOST: &str = "nothing-lost";
/// A replacement never takes effect where its predecessor took effect too: it ran while the
/// predecessor was unresolved, or after it took effect. Released early with a predecessor
/// that never took effect, it did no harm: [`HAZARD_EARLY_REPLACEMENT`].
pub const LINEAGE: &str = "lineage";
/// A workflow's step takes effect only after every intent it comes after took effect, and a
/// parameter that reads a predecessor's result carries exactly what the predecessor's effect
/// produced, as its ledger shows it.
pub const WORKFLOW: &str = "workflow";
/// Where the service offers fencing or conditional writes, no write of an older worker life
/// lands on top of a newer life's write it had not seen.
pub const NO_STALE_WRITE: &str = "no-stale-write";
/// After heal and reconcile, every intent is terminal.
pub const LIVENESS: &str = "liveness";
/// Once a service refused an intent's write with 400, 401, 403 or 422 (a person must fix the
/// input or a permission, and propose again), no later send of that intent by the worker life
/// that got the refusal takes effect.
pub const REFUSAL_RESPECTED: &str = "refusal-respected";

/// Every invariant, in the order [`check`] returns their verdicts.
pub const INVARIANTS: [&str; 10] = [
    NO_DUPLICATE_EFFECT,
    NO_UNAUTHORISED_EFFECT,
    HONEST_TERMINAL_STATES,
    UNKNOWN_IS_NOT_A_LIE,
    NOTHING_LOST,
    LINEAGE,
    WORKFLOW,
    NO_STALE_WRITE,
    LIVENESS,
    REFUSAL_RESPECTED,
];

/// The verdict on the scenario's `expect` table; it follows the invariants.
pub const EXPECTED_STATES: &str = "expected-states";

/// The only verdict of a run that could not be checked because the executor misbehaved.
pub const EXECUTOR_ERROR: &str = "executor-error";

/// The only verdict of an observation made while the world was still moving and could not
/// settle ([`Observed::unsettled`]: a request held at a step the test never said it performed,
/// or something still in flight past the settle bound): violated, its evidence naming what was
/// still moving, and no invariant judged.
pub const WORLD_UNSETTLED: &str = "world-unsettled";

/// The timeline kind of a state change; its detail is [`state_detail`].
pub const STATE_MOMENT: &str = "state";

/// A create without a fencing token where the service offers fencing.
pub const HAZARD_NO_FENCING_TOKEN: &str = "no-fencing-token";
/// An object put without `If-Match` or `If-None-Match` where conditional writes are offered.
pub const HAZARD_NO_PRECONDITION: &str = "no-precondition";
/// A write sent under an idempotency key longer after a write under it took effect than the
/// service keeps keys.
pub const HAZARD_KEY_PAST_RETENTION: &str = "key-past-retention";
/// A replacement that took effect before its predecessor was resolved, where the predecessor
/// never took effect (had it, [`LINEAGE`] would say so).
pub const HAZARD_EARLY_REPLACEMENT: &str = "early-replacement";

/// A write sent again under another idempotency key after a refusal its worker could not read
/// (stopped past its request timeout, or the answer never arrived): to the worker its first
/// send's fate was unknown, and a new key is what doubles such a write when it did land.
pub const HAZARD_NEW_KEY_AFTER_UNREAD_REFUSAL: &str = "new-key-after-unread-refusal";

/// Every hazard, with the catalog scenario that exploits it.
pub const HAZARDS: [(&str, &str); 5] = [
    (HAZARD_NO_FENCING_TOKEN, "stale_worker_overwrite"),
    (HAZARD_NO_PRECONDITION, "files_stale_worker_overwrite"),
    (HAZARD_KEY_PAST_RETENTION, "key_expired_before_reconciliation"),
    (HAZARD_EARLY_REPLACEMENT, "amount_changed_while_unknown"),
    (HAZARD_NEW_KEY_AFTER_UNREAD_REFUSAL, "key_regenerated_per_attempt"),
];

/// Evidence fields, any one of which (a non-empty string) makes an escalation honest.
pub const ESCALATION_EVIDENCE: [&str; 3] = ["key", "external_id", "tx_hash"];

/// Whether `state` names a terminal [`State`] (case-insensitive, space around it ignored):
/// one after which the executor will not act on an intent by itself.
pub fn is_terminal(state: &str) -> bool {
    State::parse_loosely(state).is_some_and(State::is_terminal)
}

/// The detail of a [`STATE_MOMENT`]: `ID -> STATE`.
pub fn state_detail(id: &str, state: &str) -> String {
    format!("{id} -> {state}")
}

/// Reads `ID -> STATE` (see the module documentation for what it tolerates).
pub fn parse_state_detail(detail: &str) -> Option<(&str, &str)> {
    let (id, rest) = ["->", "→"]
        .iter()
        .filter_map(|arrow| detail.rfind(arrow).map(|at| (at, arrow.len())))
        .max_by_key(|(at, _)| *at)
        .map(|(at, len)| (&detail[..at], &detail[at + len..]))?;
    let id = id.trim();
    let state = rest
        .split(|c: char| c.is_whitespace() || matches!(c, '(' | ',' | ';' | ':'))
        .find(|w| !w.is_empty())?;
    (!id.is_empty()).then_some((id, state))
}

/// What the checker makes of one run: its verdicts, its hazards and which effects are whose.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    /// As [`check`] gives them.
    pub verdicts: Vec<Verdict>,
    /// As [`hazards`] gives them.
    pub hazards: Vec<Hazard>,
    /// As [`attribute`] gives it.
    pub attribution: BTreeMap<String, Vec<EffectRef>>,
}

/// [`check`], [`hazards`] and [`attribute`] at once, reading the run once.
pub fn judgement(scenario: &Scenario, observed: &Observed) -> Judgement {
    let mut run = Facts::new(scenario, observed);
    let (verdicts, hazards) = match single_verdict(observed) {
        // Nothing was judged, so no hazard is read either.
        Some(verdict) => (vec![verdict], vec![]),
        None => {
            let verdicts = run.judge_worlds();
            (verdicts, run.hazards())
        }
    };
    Judgement { verdicts, hazards, attribution: run.attribution() }
}

/// Checks `observed` against the invariants and the scenario's expectations.
pub fn check(scenario: &Scenario, observed: &Observed) -> Vec<Verdict> {
    match single_verdict(observed) {
        Some(verdict) => vec![verdict],
        None => Facts::new(scenario, observed).judge_worlds(),
    }
}

/// The only verdict of a run that could not be judged: the executor broke it, or (a team's own
/// route) the world had not settled when the ledgers were read: a ledger that can still change
/// gives every invariant the wrong answer, either way.
fn single_verdict(observed: &Observed) -> Option<Verdict> {
    if let Some(reason) = observed.executor_error.as_deref() {
        let reason =
            if reason.trim().is_empty() { "the executor misbehaved (no reason given)" } else { reason };
        return Some(Verdict::from_evidence(EXECUTOR_ERROR, vec![reason.to_string()]));
    }
    (!observed.unsettled.is_empty())
        .then(|| Verdict::from_evidence(WORLD_UNSETTLED, observed.unsettled.clone()))
}

/// The safeguards the scenario's contracts offered that the run's writes did not use (see the
/// module documentation), in ledger and journal order; `command` is left empty for the caller,
/// which knows how the run was started. None for a run the executor broke.
pub fn hazards(scenario: &Scenario, observed: &Observed) -> Vec<Hazard> {
    if single_verdict(observed).is_some() {
        return vec![];
    }
    let mut run = Facts::new(scenario, observed);
    run.judge_worlds();
    run.hazards()
}

/// The catalog scenario that exploits hazard `kind`.
pub fn exploited_by(kind: &str) -> &'static str {
    HAZARDS.iter().find(|(k, _)| *k == kind).map_or("", |(_, s)| s)
}

/// The ledger effects the checker attributes to each intent (see the module documentation),
/// by intent id; intents with none, or whose action is exempt, are absent.
pub fn attribute(scenario: &Scenario, observed: &Observed) -> BTreeMap<String, Vec<EffectRef>> {
    let mut run = Facts::new(scenario, observed);
    run.judge_worlds();
    run.attribution()
}

/// The verdicts that were violated.
pub fn violations(verdicts: &[Verdict]) -> impl Iterator<Item = &Verdict> {
    verdicts.iter().filter(|v| v.violated())
}

/// Whether no verdict was violated (some may be not judged).
pub fn all_held(verdicts: &[Verdict]) -> bool {
    verdicts.iter().all(|v| !v.violated())
}
