//! The checker: the invariants of design §5, each a named check with a verdict and evidence.
//!
//! [`check`] compares what an executor finally claims ([`Observed::claims`]) with what the
//! ledgers show ([`Observed::ledgers`]). It never takes the executor's word for what
//! happened in the world. It returns one [`Verdict`] per invariant, in [`INVARIANTS`] order,
//! then one for [`EXPECTED_STATES`] (the scenario's `expect` table); or, when the run could
//! not be checked ([`Observed::executor_error`]), a single [`EXECUTOR_ERROR`] verdict. A
//! verdict's evidence is empty when it held, and otherwise says, one line per problem, which
//! intents, which effects (service, object id, ledger seq) and which states are involved.
//! Lines come in a stable order (scenario order for intents, ledger order for effects), so
//! the same run always gives the same verdicts.
//!
//! # Attribution
//!
//! Effects are attributed to intents by the business key the harness makes unique per
//! intent, never by anything the executor says:
//!
//! | action | effects | business key |
//! |---|---|---|
//! | `payments.refund` | `payments` ledger, kind `refund.created` | `params.payment_intent` |
//! | `workspaces.create` | `workspaces` ledger, kind `workspace.created` | `params.external_id` |
//! | `files.put` | `files` ledger, kind `object.put` | `params.key` |
//! | `chain.transfer` | `chain` ledger, kind `tx.mined` | `params.to` |
//!
//! A *lineage* is a set of intents linked by `replaces` (and, in any case, every intent that
//! shares a business key): an effect with a lineage's business key belongs to the lineage,
//! then to the member whose authorised parameters it carries exactly (every field of the
//! intent's `params`, e.g. `amount` for a refund, `name` for a workspace, `bucket` and `body`
//! for an object, `value` for a transfer). Two edge cases:
//!
//! - Several members authorised the same parameters (a replacement with the same amount):
//!   the effect's idempotency key decides if exactly one of them lists it in its claim's
//!   evidence (`key` or `previous_keys`); otherwise the checker gives the executor the
//!   benefit of the doubt and picks the member the effect makes no violation for (one that
//!   claims `confirmed` and has no effect yet, then any member not claiming `failed`).
//! - No member authorised the effect's parameters: with a single member it is still that
//!   member's effect (with the wrong parameters); in a larger lineage it belongs to the
//!   lineage only. Either way [`HONEST_TERMINAL_STATES`] reports it, since an intent's
//!   payload is immutable.
//!
//! An effect of one of the kinds above whose business key belongs to no intent of the
//! scenario is an effect nobody authorised, also reported by [`HONEST_TERMINAL_STATES`].
//! Other ledger kinds are ignored. Intents whose action has no row above are checked for
//! everything that needs no ledger (nothing lost, escalation evidence, liveness, expected
//! states). Intents whose action is in [`Observed::unsupported`] are exempt from every
//! check, and so are the effects that carry their business keys.
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
//! # Hazards
//!
//! [`hazards`] lists the safeguards a contract offered that a write did not use, whatever the
//! verdicts: a create without a fencing token where `fencing` is offered
//! ([`HAZARD_NO_FENCING_TOKEN`]), an object put without `If-Match` or `If-None-Match` where
//! `conditional_writes` is offered ([`HAZARD_NO_PRECONDITION`]), and a write sent under an
//! idempotency key longer after a write under it took effect than the service keeps keys
//! ([`HAZARD_KEY_PAST_RETENTION`]; a resend after sends that never took effect repeats
//! nothing). Each names the catalog scenario that would exploit it.
//!
//! # The timeline's state moments
//!
//! The [`LINEAGE`] check reads when a predecessor was resolved from the timeline: a
//! [`crate::observe::Moment`] with kind [`STATE_MOMENT`] (`"state"`), the worker as lane, and
//! as detail `ID -> STATE`, written by [`state_detail`]. [`parse_state_detail`] is tolerant:
//! space around the arrow is optional, `→` works as well as `->`, the id is everything before
//! the last arrow, the state is the first word after it (a note may follow, e.g.
//! `r1 -> failed (card declined)`), and states compare case-insensitively.

use std::collections::{BTreeMap, BTreeSet};

use fake_services::{Contract, Effect};
use scenarios::{IntentSpec, Scenario};
use serde_json::Value;

use crate::observe::{Claim, EffectRef, Observed};

pub use reports::model::{Hazard, Status, Verdict};

/// At most one effect per intent, and at most one per lineage (every supported action is
/// exclusive).
pub const NO_DUPLICATE_EFFECT: &str = "no-duplicate-effect";
/// `confirmed` only with exactly one effect carrying exactly the authorised parameters;
/// `failed` only with no effect; and no effect with parameters nobody authorised.
pub const HONEST_TERMINAL_STATES: &str = "honest-terminal-states";
/// `escalated` carries evidence; no `confirmed` without an effect, no `failed` with one.
pub const UNKNOWN_IS_NOT_A_LIE: &str = "unknown-is-not-a-lie";
/// Every acknowledged intent is in the final status.
pub const NOTHING_LOST: &str = "nothing-lost";
/// A replacement never executes while its predecessor is unresolved, nor after it took effect.
pub const LINEAGE: &str = "lineage";
/// Where the service offers fencing or conditional writes, no write of an older worker life
/// lands on top of a newer life's write it had not seen.
pub const NO_STALE_WRITE: &str = "no-stale-write";
/// After heal and reconcile, every intent is terminal.
pub const LIVENESS: &str = "liveness";

/// Every invariant, in the order [`check`] returns their verdicts.
pub const INVARIANTS: [&str; 7] = [
    NO_DUPLICATE_EFFECT,
    HONEST_TERMINAL_STATES,
    UNKNOWN_IS_NOT_A_LIE,
    NOTHING_LOST,
    LINEAGE,
    NO_STALE_WRITE,
    LIVENESS,
];

/// The verdict on the scenario's `expect` table; it follows the invariants.
pub const EXPECTED_STATES: &str = "expected-states";

/// The only verdict of a run that could not be checked because the executor misbehaved.
pub const EXECUTOR_ERROR: &str = "executor-error";

/// States after which the executor will not act on an intent by itself.
pub const TERMINAL_STATES: [&str; 3] = ["confirmed", "failed", "escalated"];

/// The timeline kind of a state change; its detail is [`state_detail`].
pub const STATE_MOMENT: &str = "state";

/// A create without a fencing token where the service offers fencing.
pub const HAZARD_NO_FENCING_TOKEN: &str = "no-fencing-token";
/// An object put without `If-Match` or `If-None-Match` where conditional writes are offered.
pub const HAZARD_NO_PRECONDITION: &str = "no-precondition";
/// A write sent under an idempotency key longer after a write under it took effect than the
/// service keeps keys.
pub const HAZARD_KEY_PAST_RETENTION: &str = "key-past-retention";

/// Every hazard, with the catalog scenario that exploits it.
pub const HAZARDS: [(&str, &str); 3] = [
    (HAZARD_NO_FENCING_TOKEN, "stale_worker_overwrite"),
    (HAZARD_NO_PRECONDITION, "files_stale_worker_overwrite"),
    (HAZARD_KEY_PAST_RETENTION, "key_expired_before_reconciliation"),
];

/// Evidence fields, any one of which (a non-empty string) makes an escalation honest.
pub const ESCALATION_EVIDENCE: [&str; 3] = ["key", "external_id", "tx_hash"];

/// Whether `state` is terminal (case-insensitive).
pub fn is_terminal(state: &str) -> bool {
    TERMINAL_STATES.iter().any(|t| t.eq_ignore_ascii_case(state.trim()))
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

/// Checks `observed` against the invariants and the scenario's expectations.
pub fn check(scenario: &Scenario, observed: &Observed) -> Vec<Verdict> {
    if let Some(reason) = &observed.executor_error {
        let reason =
            if reason.trim().is_empty() { "the executor misbehaved (no reason given)" } else { reason };
        return vec![Verdict::from_evidence(EXECUTOR_ERROR, vec![reason.to_string()])];
    }
    let run = Run::new(scenario, observed);
    vec![
        run.no_duplicate_effect(),
        run.honest_terminal_states(),
        run.unknown_is_not_a_lie(),
        run.nothing_lost(),
        run.lineage(),
        run.no_stale_write(),
        run.liveness(),
        run.expected_states(),
    ]
}

/// The safeguards the scenario's contracts offered that the run's writes did not use (see the
/// module documentation), in ledger and journal order; `command` is left empty for the caller,
/// which knows how the run was started. None for a run the executor broke.
pub fn hazards(scenario: &Scenario, observed: &Observed) -> Vec<Hazard> {
    if observed.executor_error.is_some() {
        return vec![];
    }
    Run::new(scenario, observed).hazards()
}

/// The catalog scenario that exploits hazard `kind`.
pub fn exploited_by(kind: &str) -> &'static str {
    HAZARDS.iter().find(|(k, _)| *k == kind).map_or("", |(_, s)| s)
}

/// The ledger effects the checker attributes to each intent (see the module documentation),
/// by intent id; intents with none, or whose action is exempt, are absent.
pub fn attribute(scenario: &Scenario, observed: &Observed) -> BTreeMap<String, Vec<EffectRef>> {
    let run = Run::new(scenario, observed);
    let mut out: BTreeMap<String, Vec<EffectRef>> = BTreeMap::new();
    for found in &run.effects {
        if let Some(owner) = found.owner {
            out.entry(run.intents[owner].id().to_string()).or_default().push(EffectRef {
                service: found.service.to_string(),
                seq: found.effect.seq,
                object_id: found.effect.object_id.clone(),
                at_ms: found.effect.at_ms,
            });
        }
    }
    out
}

/// The verdicts that were violated.
pub fn violations(verdicts: &[Verdict]) -> impl Iterator<Item = &Verdict> {
    verdicts.iter().filter(|v| v.violated())
}

/// Whether no verdict was violated (some may be not judged).
pub fn all_held(verdicts: &[Verdict]) -> bool {
    verdicts.iter().all(|v| !v.violated())
}

/// How the checker finds an action's effects.
#[derive(Debug)]
struct Rule {
    action: &'static str,
    service: &'static str,
    kind: &'static str,
    /// The params field that is the business key, in the intent and in the effect.
    key_param: &'static str,
    /// The fake can enforce fencing tokens on this action (when its contract says so).
    fenced: bool,
    /// The fake records this action's conditional headers (`if_match`, `replaced`), and can
    /// refuse an overwrite whose `If-Match` is stale (when its contract offers conditional
    /// writes).
    conditional: bool,
    default_contract: fn() -> Contract,
}

static RULES: [Rule; 4] = [
    Rule {
        action: "payments.refund",
        service: "payments",
        kind: "refund.created",
        key_param: "payment_intent",
        fenced: false,
        conditional: false,
        default_contract: Contract::payments_default,
    },
    Rule {
        action: "workspaces.create",
        service: "workspaces",
        kind: "workspace.created",
        key_param: "external_id",
        fenced: true,
        conditional: false,
        default_contract: Contract::workspaces_default,
    },
    Rule {
        action: "files.put",
        service: "files",
        kind: "object.put",
        key_param: "key",
        fenced: false,
        conditional: true,
        default_contract: Contract::files_default,
    },
    Rule {
        action: "chain.transfer",
        service: "chain",
        kind: "tx.mined",
        key_param: "to",
        fenced: false,
        conditional: false,
        default_contract: Contract::chain_default,
    },
];

impl Rule {
    /// The contract the scenario announces for this rule's service.
    fn contract(&self, scenario: &Scenario) -> Contract {
        let mut contract = (self.default_contract)();
        if let Some(patch) = scenario.services.get(self.service) {
            contract.apply(patch.clone());
        }
        contract
    }
}

fn rule_for_action(action: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.action == action)
}

fn rule_for_effect(service: &str, kind: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.service == service && r.kind == kind)
}

/// What a contract offers against a stale write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guard {
    /// `fencing`: the service refuses a token lower than the newest it has seen.
    Fencing,
    /// `conditional_writes`: `If-Match` and `If-None-Match`.
    ConditionalWrites,
}

/// A business key: the action (which names the rule) and the key.
type BusinessKey<'a> = (&'static str, &'a str);

/// A checked intent (not exempt).
struct Intent<'a> {
    spec: &'a IntentSpec,
    /// The rule and business key, when the intent's effects can be attributed.
    attribution: Option<(&'static Rule, &'a str)>,
    claim: Option<&'a Claim>,
    lineage: usize,
    /// Indices into `Run::effects`, in ledger order.
    effects: Vec<usize>,
}

impl Intent<'_> {
    fn id(&self) -> &str {
        &self.spec.id
    }

    fn state(&self) -> Option<String> {
        self.claim.map(|c| c.state.trim().to_ascii_lowercase())
    }

    fn claims(&self, state: &str) -> bool {
        self.state().as_deref() == Some(state)
    }
}

/// An effect of an attributable kind, with where it was attributed.
struct Found<'a> {
    service: &'a str,
    effect: &'a Effect,
    rule: &'static Rule,
    key: Option<&'a str>,
    /// `None`: no intent of the scenario has this business key.
    lineage: Option<usize>,
    owner: Option<usize>,
    /// How the effect's parameters differ from its owner's authorised ones.
    mismatch: Vec<String>,
}

impl Found<'_> {
    fn label(&self) -> String {
        format!("{} {} (seq {})", self.service, self.effect.object_id, self.effect.seq)
    }

    /// With the time of the effect, in ms from the run's first moment (`start_ms`).
    fn label_at(&self, start_ms: u64) -> String {
        format!(
            "{} {} (seq {}, at {} ms)",
            self.service,
            self.effect.object_id,
            self.effect.seq,
            self.effect.at_ms.saturating_sub(start_ms)
        )
    }

    fn key_text(&self) -> String {
        match self.key {
            Some(key) => format!("{} {key}", self.rule.key_param),
            None => format!("no {}", self.rule.key_param),
        }
    }
}

struct StateMoment<'a> {
    at_ms: u64,
    state: &'a str,
    lane: &'a str,
}

struct Run<'a> {
    scenario: &'a Scenario,
    observed: &'a Observed,
    intents: Vec<Intent<'a>>,
    by_id: BTreeMap<&'a str, usize>,
    /// Ids of the intents whose action the executor does not support.
    exempt: BTreeSet<&'a str>,
    claims: BTreeMap<&'a str, &'a Claim>,
    /// Members of each lineage, in scenario order; lineages in order of their first member.
    lineages: Vec<Vec<usize>>,
    /// Attributable effects, per service in ledger order.
    effects: Vec<Found<'a>>,
    states: BTreeMap<&'a str, Vec<StateMoment<'a>>>,
    /// Per service, who sent each request, from the journals.
    senders: BTreeMap<&'a str, Senders<'a>>,
    /// The run's first moment: evidence gives times from it, which read better than epoch
    /// milliseconds (0 when the timeline is empty).
    start_ms: u64,
}

/// Who sent the requests one service saw: the worker lives of the journal's origins.
#[derive(Default)]
struct Senders<'a> {
    /// Per request id: its origin and arrival (service time).
    requests: BTreeMap<&'a str, (&'a str, u64)>,
    /// Per origin: every arrival, in order.
    arrivals: BTreeMap<&'a str, Vec<u64>>,
    /// Per origin: the journal position of its first request (arrivals in one millisecond
    /// keep their order there).
    first_seq: BTreeMap<&'a str, u64>,
}

impl<'a> Senders<'a> {
    fn of(journal: &'a [fake_services::JournalEntry]) -> Senders<'a> {
        let mut senders = Senders::default();
        for entry in journal {
            let Some(origin) = entry.origin.as_deref() else { continue };
            senders.requests.insert(entry.request_id.as_str(), (origin, entry.at_ms));
            senders.arrivals.entry(origin).or_default().push(entry.at_ms);
            let first = senders.first_seq.entry(origin).or_insert(entry.seq);
            *first = (*first).min(entry.seq);
        }
        for arrivals in senders.arrivals.values_mut() {
            arrivals.sort_unstable();
        }
        senders
    }

    /// Where `origin`'s first request is in the journal: the smaller, the earlier it came.
    fn first(&self, origin: &str) -> Option<u64> {
        self.first_seq.get(origin).copied()
    }

    /// Whether a request of `origin` arrived at or after `from_ms` and before `until_ms`.
    fn any_between(&self, origin: &str, from_ms: u64, until_ms: u64) -> bool {
        self.arrivals.get(origin).is_some_and(|a| a.iter().any(|t| (from_ms..until_ms).contains(t)))
    }
}

impl<'a> Run<'a> {
    fn new(scenario: &'a Scenario, observed: &'a Observed) -> Run<'a> {
        let unsupported: BTreeSet<&str> = observed.unsupported.iter().map(String::as_str).collect();
        // The final claim per id: the last one, should an executor repeat itself.
        let claims: BTreeMap<&str, &Claim> = observed.claims.iter().map(|c| (c.id.as_str(), c)).collect();

        let mut intents = Vec::new();
        let mut by_id = BTreeMap::new();
        let mut exempt = BTreeSet::new();
        let mut exempt_keys: BTreeSet<BusinessKey> = BTreeSet::new();
        for spec in &scenario.intents {
            let id = spec.id.as_str();
            if by_id.contains_key(id) || exempt.contains(id) {
                continue;
            }
            let attribution = rule_for_action(&spec.action).and_then(|rule| {
                spec.params.get(rule.key_param).and_then(Value::as_str).map(|key| (rule, key))
            });
            if unsupported.contains(spec.action.as_str()) {
                exempt.insert(id);
                if let Some((rule, key)) = attribution {
                    exempt_keys.insert((rule.action, key));
                }
                continue;
            }
            by_id.insert(id, intents.len());
            intents.push(Intent {
                spec,
                attribution,
                claim: claims.get(id).copied(),
                lineage: 0,
                effects: vec![],
            });
        }

        // Lineages: union-find over `replaces` and shared business keys.
        let mut groups: BTreeMap<BusinessKey, Vec<usize>> = BTreeMap::new();
        for (i, intent) in intents.iter().enumerate() {
            if let Some((rule, key)) = intent.attribution {
                groups.entry((rule.action, key)).or_default().push(i);
            }
        }
        let mut parent: Vec<usize> = (0..intents.len()).collect();
        for (i, intent) in intents.iter().enumerate() {
            if let Some(p) = intent.spec.replaces.as_deref().and_then(|p| by_id.get(p)) {
                union(&mut parent, i, *p);
            }
        }
        for members in groups.values() {
            for m in &members[1..] {
                union(&mut parent, members[0], *m);
            }
        }
        let mut lineages: Vec<Vec<usize>> = Vec::new();
        let mut lineage_of_root = BTreeMap::new();
        for (i, intent) in intents.iter_mut().enumerate() {
            let root = find(&mut parent, i);
            let lineage = *lineage_of_root.entry(root).or_insert_with(|| {
                lineages.push(vec![]);
                lineages.len() - 1
            });
            lineages[lineage].push(i);
            intent.lineage = lineage;
        }

        // Effects: first by business key and exact parameters, then the ambiguous ones.
        let mut effects = Vec::new();
        let mut ambiguous: Vec<(usize, Vec<usize>)> = Vec::new();
        for (service, ledger) in &observed.ledgers {
            let mut ledger: Vec<&Effect> = ledger.iter().collect();
            ledger.sort_by_key(|e| e.seq);
            for effect in ledger {
                let Some(rule) = rule_for_effect(service, &effect.kind) else { continue };
                let key = effect.params.get(rule.key_param).and_then(Value::as_str);
                let members = key.and_then(|k| groups.get(&(rule.action, k)));
                let Some(members) = members else {
                    if key.is_some_and(|k| exempt_keys.contains(&(rule.action, k))) {
                        continue;
                    }
                    effects.push(Found {
                        service,
                        effect,
                        rule,
                        key,
                        lineage: None,
                        owner: None,
                        mismatch: vec![],
                    });
                    continue;
                };
                let exact: Vec<usize> = members
                    .iter()
                    .copied()
                    .filter(|m| param_diff(&intents[*m].spec.params, &effect.params).is_empty())
                    .collect();
                let candidates = if exact.is_empty() { members.clone() } else { exact.clone() };
                let owner = match candidates.as_slice() {
                    [only] => Some(*only),
                    _ => by_idempotency_key(&intents, &candidates, effect),
                };
                let index = effects.len();
                if owner.is_none() && !exact.is_empty() {
                    ambiguous.push((index, candidates));
                }
                let mismatch =
                    owner.map(|o| param_diff(&intents[o].spec.params, &effect.params)).unwrap_or_default();
                effects.push(Found {
                    service,
                    effect,
                    rule,
                    key,
                    lineage: Some(intents[members[0]].lineage),
                    owner,
                    mismatch,
                });
            }
        }
        for (index, effect) in effects.iter().enumerate() {
            if let Some(owner) = effect.owner {
                intents[owner].effects.push(index);
            }
        }
        // Benefit of the doubt: the member this effect makes no violation for.
        for (index, candidates) in ambiguous {
            let rank = |m: &usize| {
                let intent = &intents[*m];
                (intent.claims("failed"), !intent.effects.is_empty(), !intent.claims("confirmed"))
            };
            if let Some(owner) = candidates.iter().copied().min_by_key(rank) {
                effects[index].owner = Some(owner);
                intents[owner].effects.push(index);
                intents[owner].effects.sort_unstable();
            }
        }

        let mut states: BTreeMap<&str, Vec<StateMoment>> = BTreeMap::new();
        for moment in &observed.timeline {
            if !moment.kind.trim().eq_ignore_ascii_case(STATE_MOMENT) {
                continue;
            }
            if let Some((id, state)) = parse_state_detail(&moment.detail) {
                states.entry(id).or_default().push(StateMoment {
                    at_ms: moment.at_ms,
                    state,
                    lane: &moment.lane,
                });
            }
        }

        let senders = observed
            .journals
            .iter()
            .map(|(service, journal)| (service.as_str(), Senders::of(journal)))
            .collect();

        let start_ms = observed.timeline.iter().map(|m| m.at_ms).min().unwrap_or(0);
        Run {
            scenario,
            observed,
            intents,
            by_id,
            exempt,
            claims,
            lineages,
            effects,
            states,
            senders,
            start_ms,
        }
    }

    /// Whether any intent's effects can be told apart in a ledger.
    fn any_attributable(&self) -> bool {
        self.intents.iter().any(|i| i.attribution.is_some())
    }

    fn members_text(&self, lineage: usize) -> String {
        self.lineages[lineage].iter().map(|m| self.intents[*m].id()).collect::<Vec<_>>().join(", ")
    }

    fn effects_text(&self, effects: &[usize]) -> String {
        effects.iter().map(|e| self.effects[*e].label()).collect::<Vec<_>>().join(", ")
    }

    fn owner_text(&self, effect: &Found) -> String {
        match effect.owner {
            Some(o) => format!("{} of {}", effect.label(), self.intents[o].id()),
            None => format!("{} of no member", effect.label()),
        }
    }

    fn claim_text(intent: &Intent) -> String {
        match intent.state() {
            Some(state) => format!("claims {state}"),
            None => "no claim".to_string(),
        }
    }

    fn no_duplicate_effect(&self) -> Verdict {
        if !self.any_attributable() {
            return Verdict::not_judged(NO_DUPLICATE_EFFECT, NO_LEDGER_REASON);
        }
        let mut lines = Vec::new();
        for (lineage, members) in self.lineages.iter().enumerate() {
            for intent in members.iter().map(|m| &self.intents[*m]) {
                if intent.effects.len() > 1 {
                    lines.push(format!(
                        "intent {} has {} effects, at most one allowed: {}",
                        intent.id(),
                        intent.effects.len(),
                        self.effects_text(&intent.effects)
                    ));
                }
            }
            let effects: Vec<&Found> = self.effects.iter().filter(|e| e.lineage == Some(lineage)).collect();
            let one_owner =
                effects.first().and_then(|e| e.owner).filter(|o| effects.iter().all(|e| e.owner == Some(*o)));
            if effects.len() > 1 && one_owner.is_none() {
                lines.push(format!(
                    "lineage {} has {} effects, at most one allowed: {}",
                    self.members_text(lineage),
                    effects.len(),
                    effects.iter().map(|e| self.owner_text(e)).collect::<Vec<_>>().join(", ")
                ));
            }
        }
        Verdict::from_evidence(NO_DUPLICATE_EFFECT, lines)
    }

    fn honest_terminal_states(&self) -> Verdict {
        let judged = self.intents.iter().any(|i| i.attribution.is_some() && i.claim.is_some())
            || !self.effects.is_empty();
        if !judged {
            return Verdict::not_judged(
                HONEST_TERMINAL_STATES,
                "no intent of an action whose ledger the checker reads has a final claim, and no such effect exists",
            );
        }
        let mut lines = Vec::new();
        for intent in &self.intents {
            let Some((rule, key)) = intent.attribution else { continue };
            let id = intent.id();
            if intent.claims("confirmed") {
                match intent.effects.len() {
                    0 => lines.push(format!(
                        "{id} claims confirmed, but {} has no effect for it ({} {key})",
                        rule.service, rule.key_param
                    )),
                    1 => {} // wrong parameters are reported per effect below
                    n => lines.push(format!(
                        "{id} claims confirmed, but {} has {n} effects for it: {}",
                        rule.service,
                        self.effects_text(&intent.effects)
                    )),
                }
            } else if intent.claims("failed") && !intent.effects.is_empty() {
                lines.push(format!(
                    "{id} claims failed, but the ledger has {} for it",
                    self.effects_text(&intent.effects)
                ));
            }
        }
        for effect in &self.effects {
            match (effect.lineage, effect.owner) {
                (None, _) => lines.push(format!(
                    "{} for {} was made for no intent of the scenario",
                    effect.label(),
                    effect.key_text()
                )),
                (Some(_), Some(owner)) if !effect.mismatch.is_empty() => {
                    let intent = &self.intents[owner];
                    lines.push(format!(
                        "{} of {} ({}) does not carry the authorised parameters: {}",
                        effect.label(),
                        intent.id(),
                        Self::claim_text(intent),
                        effect.mismatch.join(", ")
                    ));
                }
                (Some(lineage), None) => {
                    let differences: Vec<String> = self.lineages[lineage]
                        .iter()
                        .map(|m| &self.intents[*m])
                        .filter(|i| {
                            i.attribution
                                .is_some_and(|(r, k)| r.action == effect.rule.action && Some(k) == effect.key)
                        })
                        .map(|i| {
                            format!(
                                "{}: {}",
                                i.id(),
                                param_diff(&i.spec.params, &effect.effect.params).join(", ")
                            )
                        })
                        .collect();
                    lines.push(format!(
                        "{} for {} carries parameters no member of lineage {} authorised ({})",
                        effect.label(),
                        effect.key_text(),
                        self.members_text(lineage),
                        differences.join("; ")
                    ));
                }
                _ => {}
            }
        }
        Verdict::from_evidence(HONEST_TERMINAL_STATES, lines)
    }

    fn unknown_is_not_a_lie(&self) -> Verdict {
        let judged = self.intents.iter().any(|i| {
            i.claims("escalated") || i.attribution.is_some() && (i.claims("confirmed") || i.claims("failed"))
        });
        if !judged {
            return Verdict::not_judged(
                UNKNOWN_IS_NOT_A_LIE,
                "no intent claims escalated, nor confirmed or failed where a ledger can contradict it",
            );
        }
        let mut lines = Vec::new();
        for intent in &self.intents {
            let Some(claim) = intent.claim else { continue };
            let id = intent.id();
            if intent.claims("escalated") && !has_escalation_evidence(&claim.evidence) {
                lines.push(format!(
                    "{id} is escalated without evidence (no non-empty {})",
                    ESCALATION_EVIDENCE.join(", ")
                ));
            }
            let Some((rule, key)) = intent.attribution else { continue };
            if intent.claims("confirmed") && intent.effects.is_empty() {
                lines.push(format!(
                    "{id} claims confirmed, contrary to the ledger: {} holds nothing for {} {key}",
                    rule.service, rule.key_param
                ));
            } else if intent.claims("failed") && !intent.effects.is_empty() {
                lines.push(format!(
                    "{id} claims failed, contrary to the ledger: {} took effect",
                    self.effects_text(&intent.effects)
                ));
            }
        }
        Verdict::from_evidence(UNKNOWN_IS_NOT_A_LIE, lines)
    }

    fn nothing_lost(&self) -> Verdict {
        if self.observed.acknowledged.iter().all(|id| self.exempt.contains(id.as_str())) {
            return Verdict::not_judged(NOTHING_LOST, "the executor acknowledged no intent as recorded");
        }
        let mut seen = BTreeSet::new();
        let mut lines = Vec::new();
        for id in &self.observed.acknowledged {
            let id = id.as_str();
            if !seen.insert(id) || self.exempt.contains(id) {
                continue;
            }
            if !self.claims.contains_key(id) {
                lines.push(format!("{id} was acknowledged as recorded but is missing from the final status"));
            }
        }
        Verdict::from_evidence(NOTHING_LOST, lines)
    }

    /// The last state `id` reached at or before `at_ms`, per the timeline; `None` when it has
    /// no state moments at all, `Some(None)` when it has none that early. Among moments at the
    /// same time, the later one in the timeline wins.
    fn state_at(&self, id: &str, at_ms: u64) -> Option<Option<&StateMoment<'a>>> {
        let moments = self.states.get(id)?;
        Some(moments.iter().filter(|m| m.at_ms <= at_ms).max_by_key(|m| m.at_ms))
    }

    fn lineage(&self) -> Verdict {
        let mut lines = Vec::new();
        let mut untimed = Vec::new();
        let mut replacements = 0;
        for replacement in &self.intents {
            let Some(predecessor) = replacement.spec.replaces.as_deref().and_then(|p| self.by_id.get(p))
            else {
                continue;
            };
            replacements += 1;
            let predecessor = &self.intents[*predecessor];
            let (r, p) = (replacement.id(), predecessor.id());
            for effect in replacement.effects.iter().map(|e| &self.effects[*e]) {
                if !predecessor.effects.is_empty() {
                    lines.push(format!(
                        "{r} took effect ({}) although its predecessor {p} took effect too ({})",
                        effect.label(),
                        self.effects_text(&predecessor.effects)
                    ));
                }
                match self.state_at(p, effect.effect.at_ms) {
                    Some(Some(moment)) if !is_terminal(moment.state) => lines.push(format!(
                        "{r} took effect ({}) while its predecessor {p} was unresolved ({} since {} ms on {})",
                        effect.label_at(self.start_ms),
                        moment.state,
                        moment.at_ms.saturating_sub(self.start_ms),
                        moment.lane
                    )),
                    Some(None) => lines.push(format!(
                        "{r} took effect ({}) before its predecessor {p} reached any state",
                        effect.label_at(self.start_ms)
                    )),
                    // A predecessor without any state moment cannot be judged on timing.
                    None if predecessor.effects.is_empty() => untimed.push(format!(
                        "the executor sent no state events for {p}, so whether {r} took effect ({}) after {p} \
                         was resolved cannot be told",
                        effect.label_at(self.start_ms)
                    )),
                    _ => {}
                }
            }
        }
        if replacements == 0 {
            return Verdict::not_judged(LINEAGE, "no intent replaces another");
        }
        if lines.is_empty() && !untimed.is_empty() {
            return Verdict::not_judged(LINEAGE, untimed.join("; "));
        }
        Verdict::from_evidence(LINEAGE, lines)
    }

    /// The rules whose writes this scenario's contracts guard, with the guard.
    fn guarded(&self) -> Vec<(&'static Rule, Guard)> {
        RULES
            .iter()
            .filter_map(|rule| {
                let contract = rule.contract(self.scenario);
                if rule.fenced && contract.fencing {
                    Some((rule, Guard::Fencing))
                } else if rule.conditional && contract.conditional_writes {
                    Some((rule, Guard::ConditionalWrites))
                } else {
                    None
                }
            })
            .filter(|(rule, _)| {
                self.intents.iter().any(|i| i.attribution.is_some_and(|(r, _)| r.action == rule.action))
            })
            .collect()
    }

    fn no_stale_write(&self) -> Verdict {
        let guarded = self.guarded();
        if guarded.is_empty() {
            return Verdict::not_judged(
                NO_STALE_WRITE,
                "no intent writes to a service that offers fencing or conditional writes in this scenario",
            );
        }
        let contested: Vec<&Rule> = guarded
            .iter()
            .filter(|(rule, _)| self.senders.get(rule.service).is_some_and(|s| s.arrivals.len() > 1))
            .map(|(rule, _)| *rule)
            .collect();
        if contested.is_empty() {
            let services: Vec<&str> = guarded.iter().map(|(r, _)| r.service).collect();
            return Verdict::not_judged(
                NO_STALE_WRITE,
                format!("only one worker life reached {}: no write could be stale", services.join(" and ")),
            );
        }
        let mut lines = Vec::new();
        for rule in contested {
            let Some(senders) = self.senders.get(rule.service) else { continue };
            let writes: Vec<(&Found, &str, u64)> = self
                .effects
                .iter()
                .filter(|e| e.rule.action == rule.action)
                .filter_map(|e| {
                    let (origin, arrived_ms) = senders.requests.get(e.effect.request_id.as_str())?;
                    Some((e, *origin, *arrived_ms))
                })
                .collect();
            for (j, (late, older, sent_ms)) in writes.iter().enumerate() {
                let Some(older_first) = senders.first(older) else { continue };
                let overtaken = writes[..j].iter().find(|(newer_write, newer, _)| {
                    newer_write.key == late.key
                        && newer != older
                        && senders.first(newer).is_some_and(|first| older_first < first)
                        && !senders.any_between(older, newer_write.effect.at_ms, *sent_ms)
                });
                if let Some((newer_write, newer, _)) = overtaken {
                    lines.push(format!(
                        "{} for {} was written by {older} and landed after {newer}'s write {} at {} ms, which \
                         {older} had not seen (none of its requests reached {} in between): a stale write won",
                        late.label_at(self.start_ms),
                        late.key_text(),
                        newer_write.label(),
                        newer_write.effect.at_ms.saturating_sub(self.start_ms),
                        rule.service
                    ));
                }
            }
        }
        Verdict::from_evidence(NO_STALE_WRITE, lines)
    }

    fn hazards(&self) -> Vec<Hazard> {
        let mut out: Vec<Hazard> = Vec::new();
        let mut seen = BTreeSet::new();
        let mut push = |kind: &str, service: &str, intent: Option<&str>, detail: String, once: String| {
            if seen.insert((kind.to_string(), once)) {
                out.push(Hazard {
                    kind: kind.to_string(),
                    service: service.to_string(),
                    intent: intent.map(str::to_string),
                    detail,
                    exploited_by: exploited_by(kind).to_string(),
                    command: String::new(),
                });
            }
        };
        for (rule, guard) in self.guarded() {
            for effect in self.effects.iter().filter(|e| e.rule.action == rule.action) {
                let owner = effect.owner.map(|o| self.intents[o].id());
                let once = owner.map_or_else(|| effect.label(), str::to_string);
                let params = &effect.effect.params;
                if guard == Guard::Fencing && effect.effect.fencing_token.is_none() {
                    push(
                        HAZARD_NO_FENCING_TOKEN,
                        rule.service,
                        owner,
                        format!(
                            "{} for {} was created without a Fencing-Token, though {} offers fencing",
                            effect.label(),
                            effect.key_text(),
                            rule.service
                        ),
                        once,
                    );
                } else if guard == Guard::ConditionalWrites
                    && params.get("if_match").is_none_or(Value::is_null)
                    && params.get("if_none_match").and_then(Value::as_bool) != Some(true)
                {
                    push(
                        HAZARD_NO_PRECONDITION,
                        rule.service,
                        owner,
                        format!(
                            "{} for {} was written without If-Match or If-None-Match, though {} offers \
                             conditional writes",
                            effect.label(),
                            effect.key_text(),
                            rule.service
                        ),
                        once,
                    );
                }
            }
        }
        for rule in &RULES {
            let contract = rule.contract(self.scenario);
            if contract.idempotency_keys != fake_services::KeyPolicy::Honored {
                continue;
            }
            let Some(journal) = self.observed.journals.get(rule.service) else { continue };
            // When a write under each key first took effect: only then is there something for a
            // later send under the key to repeat, and only the key's retention stops it.
            let mut effect_ms: BTreeMap<&str, u64> = BTreeMap::new();
            for effect in self.observed.ledgers.get(rule.service).into_iter().flatten() {
                if let Some(key) = effect.idempotency_key.as_deref() {
                    let first = effect_ms.entry(key).or_insert(effect.at_ms);
                    *first = (*first).min(effect.at_ms);
                }
            }
            for entry in journal.iter().filter(|e| e.method == "POST") {
                let Some(key) = entry.idempotency_key.as_deref() else { continue };
                let Some(took_effect_ms) = effect_ms.get(key) else { continue };
                let age_ms = entry.at_ms.saturating_sub(*took_effect_ms);
                if age_ms > contract.key_retention_ms {
                    let owner = self.intents.iter().find(|i| claim_lists_key(i.claim, key)).map(Intent::id);
                    push(
                        HAZARD_KEY_PAST_RETENTION,
                        rule.service,
                        owner,
                        format!(
                            "{} {} was sent under idempotency key {key} {age_ms} ms after a write under it took \
                             effect, though {} keeps keys for {} ms",
                            entry.method, entry.path, rule.service, contract.key_retention_ms
                        ),
                        key.to_string(),
                    );
                }
            }
        }
        out
    }

    fn liveness(&self) -> Verdict {
        let rounds = self.observed.reconcile_rounds;
        let mut ids: Vec<&str> = Vec::new();
        let mut seen = BTreeSet::new();
        let acknowledged = self.observed.acknowledged.iter().map(String::as_str);
        let claimed = self.intents.iter().filter(|i| i.claim.is_some()).map(Intent::id);
        for id in acknowledged.chain(claimed) {
            if seen.insert(id) && !self.exempt.contains(id) {
                ids.push(id);
            }
        }
        let mut lines = Vec::new();
        for id in ids {
            // A missing claim is `nothing-lost`'s to report.
            let Some(claim) = self.claims.get(id) else { continue };
            if !is_terminal(&claim.state) {
                lines.push(format!(
                    "{id} is still {} after {rounds} reconcile round{}: not terminal",
                    claim.state,
                    if rounds == 1 { "" } else { "s" }
                ));
            }
        }
        if lines.is_empty() && self.claims.keys().all(|id| self.exempt.contains(id)) {
            return Verdict::not_judged(LIVENESS, "the executor reported no intent");
        }
        Verdict::from_evidence(LIVENESS, lines)
    }

    fn expected_states(&self) -> Verdict {
        if self.scenario.expect.keys().all(|id| self.exempt.contains(id.as_str())) {
            return Verdict::not_judged(EXPECTED_STATES, "the scenario expects no states");
        }
        let mut lines = Vec::new();
        for (id, want) in &self.scenario.expect {
            if self.exempt.contains(id.as_str()) {
                continue;
            }
            match self.claims.get(id.as_str()) {
                None => lines.push(format!("{id}: expected {want}, but there is no claim for it")),
                Some(claim) if !claim.state.trim().eq_ignore_ascii_case(want.trim()) => {
                    lines.push(format!("{id}: expected {want}, claimed {}", claim.state))
                }
                Some(_) => {}
            }
        }
        Verdict::from_evidence(EXPECTED_STATES, lines)
    }
}

/// Why the ledger invariants have nothing to judge.
const NO_LEDGER_REASON: &str = "no intent's action has a ledger the checker reads";

/// Whether `claim`'s evidence names `key` as the intent's key or one of its earlier ones.
fn claim_lists_key(claim: Option<&Claim>, key: &str) -> bool {
    let Some(evidence) = claim.map(|c| &c.evidence) else { return false };
    evidence.get("key").and_then(Value::as_str) == Some(key)
        || evidence
            .get("previous_keys")
            .and_then(Value::as_array)
            .is_some_and(|keys| keys.iter().any(|k| k.as_str() == Some(key)))
}

fn find(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

/// Joins two sets; the lower index becomes the root, so lineages follow scenario order.
fn union(parent: &mut [usize], a: usize, b: usize) {
    let (ra, rb) = (find(parent, a), find(parent, b));
    if ra != rb {
        parent[ra.max(rb)] = ra.min(rb);
    }
}

/// The one candidate whose claim lists the effect's idempotency key, if exactly one does.
fn by_idempotency_key(intents: &[Intent], candidates: &[usize], effect: &Effect) -> Option<usize> {
    let key = effect.idempotency_key.as_deref()?;
    let listed = |m: &&usize| claim_lists_key(intents[**m].claim, key);
    match candidates.iter().filter(listed).collect::<Vec<_>>().as_slice() {
        [only] => Some(**only),
        _ => None,
    }
}

/// How `actual` differs from the `authorised` parameters, one entry per differing field.
fn param_diff(authorised: &Value, actual: &Value) -> Vec<String> {
    let Value::Object(fields) = authorised else {
        return if authorised == actual {
            vec![]
        } else {
            vec![format!("params {actual} (authorised {authorised})")]
        };
    };
    fields
        .iter()
        .filter_map(|(name, want)| match actual.get(name) {
            Some(got) if same(got, want) => None,
            Some(got) => Some(format!("{name} {got} (authorised {want})")),
            None => Some(format!("{name} missing (authorised {want})")),
        })
        .collect()
}

/// JSON equality, with numbers compared by value (`500` equals `500.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64(), x.as_u64(), y.as_u64()) {
            (Some(x), Some(y), _, _) => x == y,
            (_, _, Some(x), Some(y)) => x == y,
            _ => x.as_f64().zip(y.as_f64()).is_some_and(|(x, y)| x == y),
        },
        _ => a == b,
    }
}

fn has_escalation_evidence(evidence: &Value) -> bool {
    ESCALATION_EVIDENCE
        .iter()
        .any(|field| evidence.get(field).and_then(Value::as_str).is_some_and(|s| !s.trim().is_empty()))
}

#[cfg(test)]
mod tests {
    use fake_services::ContractPatch;
    use serde_json::json;

    use super::*;
    use crate::observe::Moment;

    fn refund(id: &str, payment_intent: &str, amount: u64) -> IntentSpec {
        IntentSpec {
            id: id.into(),
            action: "payments.refund".into(),
            params: json!({"payment_intent": payment_intent, "amount": amount}),
            replaces: None,
        }
    }

    fn create(id: &str, external_id: &str, name: &str) -> IntentSpec {
        IntentSpec {
            id: id.into(),
            action: "workspaces.create".into(),
            params: json!({"external_id": external_id, "name": name}),
            replaces: None,
        }
    }

    fn put(id: &str, key: &str, body: &str) -> IntentSpec {
        IntentSpec {
            id: id.into(),
            action: "files.put".into(),
            params: json!({"bucket": "reports", "key": key, "body": body}),
            replaces: None,
        }
    }

    fn transfer(id: &str, to: &str, value: &str) -> IntentSpec {
        IntentSpec {
            id: id.into(),
            action: "chain.transfer".into(),
            params: json!({"to": to, "value": value}),
            replaces: None,
        }
    }

    /// An action no rule attributes.
    fn mail(id: &str) -> IntentSpec {
        IntentSpec {
            id: id.into(),
            action: "mail.send".into(),
            params: json!({"to": "ops@example.com", "text": "x"}),
            replaces: None,
        }
    }

    fn replacing(spec: IntentSpec, predecessor: &str) -> IntentSpec {
        IntentSpec { replaces: Some(predecessor.into()), ..spec }
    }

    /// A scenario with only these intents; built from JSON so that fields added to the model
    /// later (all defaulted) do not break these tables.
    fn scenario(intents: Vec<IntentSpec>) -> Scenario {
        serde_json::from_value(json!({"name": "case", "intents": intents})).unwrap()
    }

    fn expecting(mut scenario: Scenario, expect: &[(&str, &str)]) -> Scenario {
        scenario.expect = expect.iter().map(|(id, state)| (id.to_string(), state.to_string())).collect();
        scenario
    }

    type Entry = (&'static str, Effect);

    fn effect(seq: u64, at_ms: u64, kind: &str, object: &str, params: Value, token: Option<u64>) -> Effect {
        Effect {
            seq,
            at_ms,
            kind: kind.into(),
            object_id: object.into(),
            params,
            idempotency_key: None,
            fencing_token: token,
            request_id: format!("req_{seq}"),
        }
    }

    fn refunded(seq: u64, at_ms: u64, object: &str, payment_intent: &str, amount: u64) -> Entry {
        let params = json!({
            "payment_intent": payment_intent,
            "charge": format!("ch_{payment_intent}"),
            "amount": amount,
            "currency": "usd",
            "reason": null,
            "metadata": {},
        });
        ("payments", effect(seq, at_ms, "refund.created", object, params, None))
    }

    fn keyed(entry: Entry, key: &str) -> Entry {
        let (service, mut effect) = entry;
        effect.idempotency_key = Some(key.into());
        (service, effect)
    }

    fn created(
        seq: u64,
        at_ms: u64,
        object: &str,
        external_id: &str,
        name: &str,
        token: Option<u64>,
    ) -> Entry {
        let params = json!({"external_id": external_id, "name": name});
        ("workspaces", effect(seq, at_ms, "workspace.created", object, params, token))
    }

    /// An object stored by a PUT; `replaced` and `if_match` are quoted ETags.
    fn stored(seq: u64, key: &str, body: &str, replaced: Option<&str>, if_match: Option<&str>) -> Entry {
        let params = json!({
            "bucket": "reports",
            "key": key,
            "body": body,
            "etag": format!("\"etag-{seq}\""),
            "size": body.len(),
            "if_match": if_match,
            "if_none_match": replaced.is_none(),
            "replaced": replaced,
        });
        ("files", effect(seq, seq * 100, "object.put", &format!("reports/{key}"), params, None))
    }

    /// A transfer mined in block `seq`.
    fn mined(seq: u64, to: &str, value: &str, nonce: u64) -> Entry {
        let hash = format!("0x{seq:064x}");
        let params = json!({
            "from": "0x00000000000000000000000000000000000000a0",
            "to": to,
            "value": value,
            "nonce": nonce,
            "hash": hash,
            "block": seq,
        });
        ("chain", effect(seq, seq * 100, "tx.mined", &hash, params, None))
    }

    /// A claim with the evidence an honest executor sends.
    fn claim(id: &str, state: &str) -> Claim {
        Claim {
            id: id.into(),
            state: state.into(),
            attempts: 1,
            evidence: json!({"key": format!("key-{id}")}),
        }
    }

    fn claim_with(id: &str, state: &str, evidence: Value) -> Claim {
        Claim { id: id.into(), state: state.into(), attempts: 1, evidence }
    }

    fn moment(at_ms: u64, id: &str, state: &str) -> Moment {
        Moment { at_ms, lane: "w1".into(), kind: STATE_MOMENT.into(), detail: state_detail(id, state) }
    }

    fn observed(acknowledged: &[&str], claims: Vec<Claim>, effects: Vec<Entry>) -> Observed {
        let mut ledgers: BTreeMap<String, Vec<Effect>> = BTreeMap::new();
        for (service, effect) in effects {
            ledgers.entry(service.to_string()).or_default().push(effect);
        }
        Observed {
            acknowledged: acknowledged.iter().map(|id| id.to_string()).collect(),
            claims,
            ledgers,
            reconcile_rounds: 1,
            ..Observed::default()
        }
    }

    /// The timeline of a run that started at 0 ms, as every run's does with its first worker.
    fn timed(mut observed: Observed, timeline: Vec<Moment>) -> Observed {
        let start =
            Moment { at_ms: 0, lane: "w1".into(), kind: "start".into(), detail: "incarnation 1".into() };
        observed.timeline = std::iter::once(start).chain(timeline).collect();
        observed
    }

    /// Adds journal entries to `service`: `(request_id, origin, arrived_ms)`, as a transport
    /// that labels its requests records them.
    fn sent(mut observed: Observed, service: &str, requests: &[(&str, &str, u64)]) -> Observed {
        let journal = observed.journals.entry(service.to_string()).or_default();
        for (request_id, origin, at_ms) in requests {
            journal.push(fake_services::JournalEntry {
                seq: journal.len() as u64 + 1,
                at_ms: *at_ms,
                method: "POST".into(),
                path: "/".into(),
                idempotency_key: None,
                request_id: request_id.to_string(),
                origin: Some(origin.to_string()),
                faults: vec![],
                outcome: "answered".into(),
                status: Some(200),
                replayed: false,
                ended_ms: Some(*at_ms),
            });
        }
        observed
    }

    struct Case {
        name: &'static str,
        scenario: Scenario,
        observed: Observed,
        /// Exactly the verdicts that must not hold.
        broken: &'static [&'static str],
        /// (verdict, text one of its evidence lines must contain).
        says: &'static [(&'static str, &'static str)],
    }

    fn cases() -> Vec<Case> {
        vec![
            Case {
                name: "an honest run holds everything",
                scenario: expecting(
                    scenario(vec![
                        refund("r1", "pi_1", 500),
                        create("w1", "ext_1", "Acme"),
                        refund("r2", "pi_2", 300),
                        refund("r3", "pi_3", 100),
                        put("f1", "q3.csv", "v2"),
                        put("f2", "q4.csv", "v1"),
                        transfer("t1", "0x00000000000000000000000000000000000000b1", "1000"),
                    ]),
                    &[("r1", "confirmed"), ("r2", "failed")],
                ),
                observed: timed(
                    observed(
                        &["r1", "w1", "r2", "r3", "f1", "f2", "t1"],
                        vec![
                            claim("r1", "confirmed"),
                            claim("w1", "confirmed"),
                            claim("r2", "failed"),
                            claim("r3", "escalated"),
                            claim("f1", "confirmed"),
                            claim("f2", "confirmed"),
                            claim("t1", "confirmed"),
                        ],
                        vec![
                            refunded(1, 100, "re_1", "pi_1", 500),
                            created(1, 120, "ws_1", "ext_1", "Acme", Some(1)),
                            stored(1, "q3.csv", "v2", Some("\"etag-0\""), Some("\"etag-0\"")),
                            stored(2, "q4.csv", "v1", None, None),
                            mined(1, "0x00000000000000000000000000000000000000b1", "1000", 0),
                        ],
                    ),
                    vec![moment(90, "r1", "submitted"), moment(110, "r1", "confirmed")],
                ),
                broken: &[],
                says: &[],
            },
            Case {
                name: "one intent, two effects",
                scenario: scenario(vec![refund("r1", "pi_1", 500)]),
                observed: observed(
                    &["r1"],
                    vec![claim("r1", "escalated")],
                    vec![refunded(1, 100, "re_1", "pi_1", 500), refunded(2, 200, "re_2", "pi_1", 500)],
                ),
                broken: &[NO_DUPLICATE_EFFECT],
                says: &[(
                    NO_DUPLICATE_EFFECT,
                    "intent r1 has 2 effects, at most one allowed: payments re_1 (seq 1), payments re_2 (seq 2)",
                )],
            },
            Case {
                name: "a lineage, one effect per member",
                scenario: scenario(vec![
                    refund("r1", "pi_1", 500),
                    replacing(refund("r2", "pi_1", 400), "r1"),
                ]),
                observed: timed(
                    observed(
                        &["r1", "r2"],
                        vec![claim("r1", "escalated"), claim("r2", "confirmed")],
                        vec![refunded(1, 100, "re_1", "pi_1", 500), refunded(2, 300, "re_2", "pi_1", 400)],
                    ),
                    vec![moment(200, "r1", "escalated")],
                ),
                broken: &[NO_DUPLICATE_EFFECT, LINEAGE],
                says: &[
                    (NO_DUPLICATE_EFFECT, "lineage r1, r2 has 2 effects"),
                    (NO_DUPLICATE_EFFECT, "payments re_1 (seq 1) of r1, payments re_2 (seq 2) of r2"),
                    (
                        LINEAGE,
                        "r2 took effect (payments re_2 (seq 2)) although its predecessor r1 took effect too",
                    ),
                ],
            },
            Case {
                name: "confirmed with the wrong amount",
                scenario: scenario(vec![refund("r1", "pi_1", 500)]),
                observed: observed(
                    &["r1"],
                    vec![claim("r1", "confirmed")],
                    vec![refunded(1, 100, "re_1", "pi_1", 499)],
                ),
                broken: &[HONEST_TERMINAL_STATES],
                says: &[(
                    HONEST_TERMINAL_STATES,
                    "payments re_1 (seq 1) of r1 (claims confirmed) does not carry the authorised parameters: \
                     amount 499 (authorised 500)",
                )],
            },
            Case {
                name: "a workspace with the wrong name",
                scenario: scenario(vec![create("w1", "ext_1", "Acme")]),
                observed: observed(
                    &["w1"],
                    vec![claim("w1", "confirmed")],
                    vec![created(1, 100, "ws_1", "ext_1", "Acme Inc", Some(1))],
                ),
                broken: &[HONEST_TERMINAL_STATES],
                says: &[(HONEST_TERMINAL_STATES, "name \"Acme Inc\" (authorised \"Acme\")")],
            },
            Case {
                name: "confirmed with two effects",
                scenario: scenario(vec![refund("r1", "pi_1", 500)]),
                observed: observed(
                    &["r1"],
                    vec![claim("r1", "confirmed")],
                    vec![refunded(1, 100, "re_1", "pi_1", 500), refunded(2, 200, "re_2", "pi_1", 500)],
                ),
                broken: &[NO_DUPLICATE_EFFECT, HONEST_TERMINAL_STATES],
                says: &[(HONEST_TERMINAL_STATES, "r1 claims confirmed, but payments has 2 effects for it")],
            },
            Case {
                name: "failed, but it happened",
                scenario: scenario(vec![refund("r1", "pi_1", 500)]),
                observed: observed(
                    &["r1"],
                    vec![claim("r1", "failed")],
                    vec![refunded(1, 100, "re_1", "pi_1", 500)],
                ),
                broken: &[HONEST_TERMINAL_STATES, UNKNOWN_IS_NOT_A_LIE],
                says: &[
                    (
                        HONEST_TERMINAL_STATES,
                        "r1 claims failed, but the ledger has payments re_1 (seq 1) for it",
                    ),
                    (UNKNOWN_IS_NOT_A_LIE, "r1 claims failed, contrary to the ledger: payments re_1 (seq 1)"),
                ],
            },
            Case {
                name: "confirmed, but nothing happened",
                scenario: scenario(vec![create("w1", "ext_1", "Acme")]),
                observed: observed(&["w1"], vec![claim("w1", "confirmed")], vec![]),
                broken: &[HONEST_TERMINAL_STATES, UNKNOWN_IS_NOT_A_LIE],
                says: &[
                    (
                        HONEST_TERMINAL_STATES,
                        "w1 claims confirmed, but workspaces has no effect for it (external_id ext_1)",
                    ),
                    (UNKNOWN_IS_NOT_A_LIE, "w1 claims confirmed, contrary to the ledger"),
                ],
            },
            Case {
                name: "an effect nobody asked for",
                scenario: scenario(vec![refund("r1", "pi_1", 500)]),
                observed: observed(
                    &["r1"],
                    vec![claim("r1", "confirmed")],
                    vec![refunded(1, 100, "re_1", "pi_1", 500), refunded(2, 200, "re_9", "pi_9", 10)],
                ),
                broken: &[HONEST_TERMINAL_STATES],
                says: &[(
                    HONEST_TERMINAL_STATES,
                    "payments re_9 (seq 2) for payment_intent pi_9 was made for no intent of the scenario",
                )],
            },
            Case {
                name: "escalated without evidence",
                scenario: scenario(vec![refund("r1", "pi_1", 500)]),
                observed: observed(
                    &["r1"],
                    vec![claim_with("r1", "escalated", json!({"key": "", "last_error": "timeout"}))],
                    vec![],
                ),
                broken: &[UNKNOWN_IS_NOT_A_LIE],
                says: &[(UNKNOWN_IS_NOT_A_LIE, "r1 is escalated without evidence")],
            },
            Case {
                name: "escalated with an external id or a tx hash",
                scenario: scenario(vec![refund("r1", "pi_1", 500), refund("r2", "pi_2", 500)]),
                observed: observed(
                    &["r1", "r2"],
                    vec![
                        claim_with("r1", "escalated", json!({"external_id": "re_1"})),
                        claim_with("r2", "escalated", json!({"tx_hash": "0xabc"})),
                    ],
                    vec![refunded(1, 100, "re_1", "pi_1", 500)],
                ),
                broken: &[],
                says: &[],
            },
            Case {
                name: "acknowledged, then lost",
                scenario: scenario(vec![refund("r1", "pi_1", 500), refund("r2", "pi_2", 500)]),
                observed: observed(&["r1", "r2"], vec![claim("r1", "failed")], vec![]),
                broken: &[NOTHING_LOST],
                says: &[(
                    NOTHING_LOST,
                    "r2 was acknowledged as recorded but is missing from the final status",
                )],
            },
            Case {
                name: "never acknowledged, never claimed",
                scenario: scenario(vec![refund("r1", "pi_1", 500), refund("r2", "pi_2", 500)]),
                observed: observed(&["r1"], vec![claim("r1", "failed")], vec![]),
                broken: &[],
                says: &[],
            },
            Case {
                name: "a replacement runs while its predecessor is in flight",
                scenario: scenario(vec![
                    refund("r1", "pi_1", 500),
                    replacing(refund("r2", "pi_1", 400), "r1"),
                ]),
                observed: timed(
                    observed(
                        &["r1", "r2"],
                        vec![claim("r1", "failed"), claim("r2", "confirmed")],
                        vec![refunded(1, 250, "re_2", "pi_1", 400)],
                    ),
                    vec![moment(100, "r1", "submitted"), moment(400, "r1", "failed")],
                ),
                broken: &[LINEAGE],
                says: &[(
                    LINEAGE,
                    "r2 took effect (payments re_2 (seq 1, at 250 ms)) while its predecessor r1 was unresolved \
                     (submitted since 100 ms on w1)",
                )],
            },
            Case {
                name: "a replacement runs before its predecessor had any state",
                scenario: scenario(vec![
                    create("w1", "ext_1", "A"),
                    replacing(create("w2", "ext_1", "B"), "w1"),
                ]),
                observed: timed(
                    observed(
                        &["w1", "w2"],
                        vec![claim("w1", "failed"), claim("w2", "confirmed")],
                        vec![created(1, 250, "ws_2", "ext_1", "B", Some(2))],
                    ),
                    vec![moment(400, "w1", "failed")],
                ),
                broken: &[LINEAGE],
                says: &[(LINEAGE, "before its predecessor w1 reached any state")],
            },
            Case {
                name: "a replacement runs after its predecessor failed",
                scenario: scenario(vec![
                    refund("r1", "pi_1", 500),
                    replacing(refund("r2", "pi_1", 400), "r1"),
                ]),
                observed: timed(
                    observed(
                        &["r1", "r2"],
                        vec![claim("r1", "failed"), claim("r2", "confirmed")],
                        vec![refunded(1, 500, "re_2", "pi_1", 400)],
                    ),
                    vec![
                        moment(100, "r1", "unknown"),
                        moment(400, "r1", "failed"),
                        moment(450, "r2", "submitted"),
                    ],
                ),
                broken: &[],
                says: &[],
            },
            Case {
                name: "without state moments, timing is not judged",
                scenario: scenario(vec![
                    refund("r1", "pi_1", 500),
                    replacing(refund("r2", "pi_1", 400), "r1"),
                ]),
                observed: observed(
                    &["r1", "r2"],
                    vec![claim("r1", "failed"), claim("r2", "confirmed")],
                    vec![refunded(1, 500, "re_2", "pi_1", 400)],
                ),
                broken: &[],
                says: &[],
            },
            Case {
                name: "same amount replacement: the doubt benefits the executor",
                scenario: scenario(vec![
                    refund("r1", "pi_1", 500),
                    replacing(refund("r2", "pi_1", 500), "r1"),
                ]),
                observed: timed(
                    observed(
                        &["r1", "r2"],
                        vec![claim("r1", "failed"), claim("r2", "confirmed")],
                        vec![refunded(1, 500, "re_1", "pi_1", 500)],
                    ),
                    vec![moment(400, "r1", "failed")],
                ),
                broken: &[],
                says: &[],
            },
            Case {
                name: "same amount replacement: the idempotency key decides",
                scenario: scenario(vec![
                    refund("r1", "pi_1", 500),
                    replacing(refund("r2", "pi_1", 500), "r1"),
                ]),
                observed: observed(
                    &["r1", "r2"],
                    vec![claim("r1", "escalated"), claim("r2", "confirmed")],
                    vec![keyed(refunded(1, 500, "re_1", "pi_1", 500), "key-r1")],
                ),
                broken: &[HONEST_TERMINAL_STATES, UNKNOWN_IS_NOT_A_LIE],
                says: &[(HONEST_TERMINAL_STATES, "r2 claims confirmed, but payments has no effect for it")],
            },
            Case {
                name: "an effect no member of the lineage authorised",
                scenario: scenario(vec![
                    refund("r1", "pi_1", 500),
                    replacing(refund("r2", "pi_1", 400), "r1"),
                ]),
                observed: timed(
                    observed(
                        &["r1", "r2"],
                        vec![claim("r1", "failed"), claim("r2", "confirmed")],
                        vec![refunded(1, 50, "re_x", "pi_1", 450), refunded(2, 100, "re_2", "pi_1", 400)],
                    ),
                    vec![moment(10, "r1", "failed")],
                ),
                broken: &[NO_DUPLICATE_EFFECT, HONEST_TERMINAL_STATES],
                says: &[
                    (NO_DUPLICATE_EFFECT, "payments re_x (seq 1) of no member, payments re_2 (seq 2) of r2"),
                    (
                        HONEST_TERMINAL_STATES,
                        "payments re_x (seq 1) for payment_intent pi_1 carries parameters no member of lineage r1, r2 \
                         authorised (r1: amount 450 (authorised 500); r2: amount 450 (authorised 400))",
                    ),
                ],
            },
            Case {
                name: "a create without a fencing token by one worker: a hazard, not a violation",
                scenario: scenario(vec![create("w1", "ext_1", "Acme")]),
                observed: sent(
                    observed(
                        &["w1"],
                        vec![claim("w1", "confirmed")],
                        vec![created(1, 100, "ws_1", "ext_1", "Acme", None)],
                    ),
                    "workspaces",
                    &[("req_1", "w1#1", 90)],
                ),
                broken: &[],
                says: &[],
            },
            Case {
                name: "a stale worker's create lands after its successor's",
                scenario: scenario(vec![create("w1", "ext_1", "Acme")]),
                observed: sent(
                    observed(
                        &["w1"],
                        vec![claim("w1", "escalated")],
                        vec![
                            created(1, 100, "ws_1", "ext_1", "Acme", Some(1)),
                            created(2, 300, "ws_2", "ext_1", "Acme", Some(1)),
                        ],
                    ),
                    "workspaces",
                    &[("req_0", "w1#1", 0), ("req_1", "w2#1", 90), ("req_2", "w1#1", 300)],
                ),
                broken: &[NO_DUPLICATE_EFFECT, NO_STALE_WRITE],
                says: &[(
                    NO_STALE_WRITE,
                    "workspaces ws_2 (seq 2, at 300 ms) for external_id ext_1 was written by w1#1 and landed after \
                     w2#1's write workspaces ws_1 (seq 1) at 100 ms, which w1#1 had not seen (none of its requests \
                     reached workspaces in between): a stale write won",
                )],
            },
            Case {
                name: "a second create after a look at the service is a duplicate, not a stale write",
                scenario: scenario(vec![create("w1", "ext_1", "Acme")]),
                observed: sent(
                    observed(
                        &["w1"],
                        vec![claim("w1", "escalated")],
                        vec![
                            created(1, 100, "ws_1", "ext_1", "Acme", Some(1)),
                            created(2, 300, "ws_2", "ext_1", "Acme", Some(1)),
                        ],
                    ),
                    "workspaces",
                    &[
                        ("req_0", "w1#1", 0),
                        ("req_1", "w2#1", 90),
                        ("req_9", "w1#1", 200),
                        ("req_2", "w1#1", 300),
                    ],
                ),
                broken: &[NO_DUPLICATE_EFFECT],
                says: &[],
            },
            Case {
                name: "the newer worker's second write is a duplicate, not a stale write",
                scenario: scenario(vec![create("w1", "ext_1", "Acme")]),
                observed: sent(
                    observed(
                        &["w1"],
                        vec![claim("w1", "escalated")],
                        vec![
                            created(1, 100, "ws_1", "ext_1", "Acme", Some(1)),
                            created(2, 300, "ws_2", "ext_1", "Acme", Some(2)),
                        ],
                    ),
                    "workspaces",
                    &[("req_1", "w1#1", 90), ("req_2", "w2#1", 300)],
                ),
                broken: &[NO_DUPLICATE_EFFECT],
                says: &[],
            },
            Case {
                name: "no stale write where the contract offers no fencing",
                scenario: {
                    let mut s = scenario(vec![create("w1", "ext_1", "Acme")]);
                    let patch = ContractPatch { fencing: Some(false), ..ContractPatch::default() };
                    s.services.insert("workspaces".into(), patch);
                    s
                },
                observed: sent(
                    observed(
                        &["w1"],
                        vec![claim("w1", "confirmed")],
                        vec![
                            created(1, 100, "ws_1", "ext_1", "Acme", None),
                            created(2, 300, "ws_2", "ext_1", "Acme", None),
                        ],
                    ),
                    "workspaces",
                    &[("req_0", "w1#1", 0), ("req_1", "w2#1", 90), ("req_2", "w1#1", 300)],
                ),
                broken: &[NO_DUPLICATE_EFFECT, HONEST_TERMINAL_STATES],
                says: &[],
            },
            Case {
                name: "a blind overwrite by one worker: a hazard, not a violation",
                scenario: scenario(vec![put("f1", "q3.csv", "v2")]),
                observed: observed(
                    &["f1"],
                    vec![claim("f1", "confirmed")],
                    vec![stored(1, "q3.csv", "v2", Some("\"etag-0\""), None)],
                ),
                broken: &[],
                says: &[],
            },
            Case {
                name: "a stale worker's put, held in flight, lands on its successor's",
                scenario: scenario(vec![put("f1", "q3.csv", "v2")]),
                observed: sent(
                    observed(
                        &["f1"],
                        vec![claim("f1", "confirmed")],
                        vec![
                            stored(1, "q3.csv", "v2", Some("\"etag-0\""), None),
                            stored(2, "q3.csv", "v2", Some("\"etag-1\""), None),
                        ],
                    ),
                    "files",
                    &[("req_2", "w1#1", 0), ("req_1", "w2#1", 50)],
                ),
                broken: &[NO_DUPLICATE_EFFECT, HONEST_TERMINAL_STATES, NO_STALE_WRITE],
                says: &[
                    (NO_DUPLICATE_EFFECT, "intent f1 has 2 effects, at most one allowed"),
                    (
                        NO_STALE_WRITE,
                        "files reports/q3.csv (seq 2, at 200 ms) for key q3.csv was written by w1#1",
                    ),
                ],
            },
            Case {
                name: "an object stored twice by one worker is a duplicate, not a stale write",
                scenario: scenario(vec![put("f1", "q3.csv", "v2")]),
                observed: observed(
                    &["f1"],
                    vec![claim("f1", "confirmed")],
                    vec![
                        stored(1, "q3.csv", "v2", None, None),
                        stored(2, "q3.csv", "v2", Some("\"etag-1\""), None),
                    ],
                ),
                broken: &[NO_DUPLICATE_EFFECT, HONEST_TERMINAL_STATES],
                says: &[(NO_DUPLICATE_EFFECT, "intent f1 has 2 effects, at most one allowed")],
            },
            Case {
                name: "an object with another body",
                scenario: scenario(vec![put("f1", "q3.csv", "v2")]),
                observed: observed(
                    &["f1"],
                    vec![claim("f1", "confirmed")],
                    vec![stored(1, "q3.csv", "v3", None, None)],
                ),
                broken: &[HONEST_TERMINAL_STATES],
                says: &[(HONEST_TERMINAL_STATES, "body \"v3\" (authorised \"v2\")")],
            },
            Case {
                name: "a transfer signed twice with two nonces",
                scenario: scenario(vec![transfer(
                    "t1",
                    "0x00000000000000000000000000000000000000b1",
                    "1000",
                )]),
                observed: observed(
                    &["t1"],
                    vec![claim("t1", "confirmed")],
                    vec![
                        mined(1, "0x00000000000000000000000000000000000000b1", "1000", 0),
                        mined(2, "0x00000000000000000000000000000000000000b1", "1000", 1),
                    ],
                ),
                broken: &[NO_DUPLICATE_EFFECT, HONEST_TERMINAL_STATES],
                says: &[(
                    NO_DUPLICATE_EFFECT,
                    "intent t1 has 2 effects, at most one allowed: chain 0x0000000000000000000000000000000000000000000000000000000000000001 (seq 1)",
                )],
            },
            Case {
                name: "a transfer claimed failed that was mined",
                scenario: scenario(vec![transfer(
                    "t1",
                    "0x00000000000000000000000000000000000000b1",
                    "1000",
                )]),
                observed: observed(
                    &["t1"],
                    vec![claim("t1", "failed")],
                    vec![mined(1, "0x00000000000000000000000000000000000000b1", "1000", 0)],
                ),
                broken: &[HONEST_TERMINAL_STATES, UNKNOWN_IS_NOT_A_LIE],
                says: &[(UNKNOWN_IS_NOT_A_LIE, "t1 claims failed, contrary to the ledger: chain 0x")],
            },
            Case {
                name: "stuck after reconciliation",
                scenario: scenario(vec![
                    refund("r1", "pi_1", 500),
                    refund("r2", "pi_2", 500),
                    refund("r3", "pi_3", 500),
                    replacing(refund("r4", "pi_3", 400), "r3"),
                ]),
                observed: {
                    let mut o = observed(
                        &["r1", "r2", "r3", "r4"],
                        vec![
                            claim("r1", "unknown"),
                            claim("r2", "submitted"),
                            claim("r3", "recorded"),
                            claim("r4", "blocked"),
                        ],
                        vec![],
                    );
                    o.reconcile_rounds = 3;
                    o
                },
                broken: &[LIVENESS],
                says: &[
                    (LIVENESS, "r1 is still unknown after 3 reconcile rounds: not terminal"),
                    (LIVENESS, "r2 is still submitted"),
                    (LIVENESS, "r3 is still recorded"),
                    (LIVENESS, "r4 is still blocked"),
                ],
            },
            Case {
                name: "unsupported actions are exempt from everything",
                scenario: expecting(
                    scenario(vec![put("f1", "q3.csv", "v2"), refund("r1", "pi_1", 500)]),
                    &[("f1", "confirmed")],
                ),
                observed: {
                    let mut o = observed(
                        &["f1", "r1"],
                        vec![claim("f1", "unknown")],
                        vec![
                            refunded(1, 100, "re_1", "pi_1", 500),
                            refunded(2, 200, "re_2", "pi_1", 500),
                            stored(1, "q3.csv", "v2", Some("\"etag-0\""), None),
                        ],
                    );
                    o.unsupported = vec!["files.put".into(), "payments.refund".into()];
                    o
                },
                broken: &[],
                says: &[],
            },
            Case {
                name: "an action without attribution still gets the checks that need no ledger",
                scenario: scenario(vec![mail("f1"), mail("f2")]),
                observed: observed(
                    &["f1", "f2"],
                    vec![claim("f1", "confirmed"), claim_with("f2", "escalated", json!({}))],
                    vec![],
                ),
                broken: &[UNKNOWN_IS_NOT_A_LIE],
                says: &[(UNKNOWN_IS_NOT_A_LIE, "f2 is escalated without evidence")],
            },
            Case {
                name: "an expected state that differs",
                scenario: expecting(
                    scenario(vec![refund("r1", "pi_1", 500), refund("r2", "pi_2", 500)]),
                    &[("r1", "failed"), ("r2", "failed")],
                ),
                observed: observed(
                    &["r1"],
                    vec![claim("r1", "confirmed")],
                    vec![refunded(1, 100, "re_1", "pi_1", 500)],
                ),
                broken: &[EXPECTED_STATES],
                says: &[
                    (EXPECTED_STATES, "r1: expected failed, claimed confirmed"),
                    (EXPECTED_STATES, "r2: expected failed, but there is no claim for it"),
                ],
            },
        ]
    }

    fn slugs() -> Vec<&'static str> {
        INVARIANTS.iter().copied().chain([EXPECTED_STATES]).collect()
    }

    #[test]
    fn every_case_breaks_exactly_what_it_should() {
        for case in cases() {
            let verdicts = check(&case.scenario, &case.observed);
            let order: Vec<&str> = verdicts.iter().map(|v| v.invariant.as_str()).collect();
            assert_eq!(order, slugs(), "{}: verdict order", case.name);
            let broken: Vec<&str> = violations(&verdicts).map(|v| v.invariant.as_str()).collect();
            assert_eq!(broken, case.broken, "{}: {verdicts:#?}", case.name);
            assert_eq!(all_held(&verdicts), case.broken.is_empty(), "{}", case.name);
            for verdict in &verdicts {
                assert_eq!(verdict.held, verdict.evidence.is_empty(), "{}: {verdict:?}", case.name);
            }
            for (slug, text) in case.says {
                let verdict = verdicts.iter().find(|v| v.invariant == *slug).unwrap();
                assert!(
                    verdict.evidence.iter().any(|line| line.contains(text)),
                    "{}: {slug} should say {text:?}, says {:#?}",
                    case.name,
                    verdict.evidence
                );
            }
        }
    }

    /// Every action is exclusive (one effect per lineage), so a stale write, which needs two
    /// effects on one business key, is always a duplicate too: `no-stale-write` says which of
    /// the two won wrongly. Every other verdict breaks alone somewhere.
    #[test]
    fn every_verdict_holds_somewhere_and_breaks_alone_somewhere() {
        let cases = cases();
        for slug in slugs() {
            let held = cases.iter().any(|c| {
                check(&c.scenario, &c.observed)
                    .iter()
                    .any(|v| v.invariant == slug && v.status == Status::Held)
            });
            assert!(held, "a case where {slug} is judged and holds");
            let alone: &[&str] =
                if slug == NO_STALE_WRITE { &[NO_DUPLICATE_EFFECT, NO_STALE_WRITE] } else { &[slug] };
            assert!(
                cases.iter().any(|c| c.broken == alone),
                "a case where {slug} breaks alone (or, for {NO_STALE_WRITE}, with {NO_DUPLICATE_EFFECT} only)"
            );
        }
    }

    /// Where a run gives an invariant nothing to judge, its verdict says so, and why.
    #[test]
    fn what_a_run_cannot_show_is_not_judged_with_a_reason() {
        let want: &[(&str, &str, &str)] = &[
            (
                "a create without a fencing token by one worker: a hazard, not a violation",
                NO_STALE_WRITE,
                "only one worker life reached workspaces",
            ),
            (
                "a create without a fencing token by one worker: a hazard, not a violation",
                LINEAGE,
                "no intent replaces another",
            ),
            (
                "a create without a fencing token by one worker: a hazard, not a violation",
                EXPECTED_STATES,
                "the scenario expects no states",
            ),
            (
                "without state moments, timing is not judged",
                LINEAGE,
                "the executor sent no state events for r1",
            ),
            (
                "one intent, two effects",
                NO_STALE_WRITE,
                "no intent writes to a service that offers fencing or conditional writes",
            ),
            (
                "unsupported actions are exempt from everything",
                NOTHING_LOST,
                "the executor acknowledged no intent",
            ),
            (
                "unsupported actions are exempt from everything",
                NO_DUPLICATE_EFFECT,
                "no intent's action has a ledger",
            ),
        ];
        let cases = cases();
        for (name, slug, reason) in want {
            let case = cases.iter().find(|c| c.name == *name).unwrap_or_else(|| panic!("no case {name}"));
            let verdicts = check(&case.scenario, &case.observed);
            let verdict = verdicts.iter().find(|v| v.invariant == *slug).unwrap();
            assert_eq!(verdict.status, Status::NotJudged, "{name}: {verdict:?}");
            assert!(verdict.held && verdict.evidence.is_empty(), "{name}: {verdict:?}");
            let said = verdict.reason.as_deref().unwrap_or_default();
            assert!(said.contains(reason), "{name}: {slug} should say {reason:?}, says {said:?}");
        }
    }

    /// A safeguard the contract offered and a write skipped is a hazard, with the scenario that
    /// would exploit it; where the contract offers none, or the write used it, there is none.
    #[test]
    fn unused_safeguards_are_hazards_with_the_scenario_that_exploits_them() {
        let cases = cases();
        let kinds = |name: &str| -> Vec<(String, Option<String>, String)> {
            let case = cases.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no case {name}"));
            hazards(&case.scenario, &case.observed)
                .into_iter()
                .map(|h| (h.kind, h.intent, h.exploited_by))
                .collect()
        };
        let one = |kind: &str, intent: &str, scenario: &str| {
            vec![(kind.to_string(), Some(intent.to_string()), scenario.to_string())]
        };
        assert_eq!(
            kinds("a create without a fencing token by one worker: a hazard, not a violation"),
            one(HAZARD_NO_FENCING_TOKEN, "w1", "stale_worker_overwrite")
        );
        assert_eq!(
            kinds("a blind overwrite by one worker: a hazard, not a violation"),
            one(HAZARD_NO_PRECONDITION, "f1", "files_stale_worker_overwrite")
        );
        assert_eq!(kinds("no stale write where the contract offers no fencing"), vec![]);
        assert_eq!(kinds("a stale worker's create lands after its successor's"), vec![], "tokens were sent");
        assert_eq!(kinds("an honest run holds everything"), vec![]);

        let scenario = scenario(vec![refund("r1", "pi_1", 500)]);
        let mut observed = observed(
            &["r1"],
            vec![claim("r1", "confirmed")],
            vec![keyed(refunded(1, 0, "re_1", "pi_1", 500), "key-r1")],
        );
        let sent_under_key = |at_ms: u64| fake_services::JournalEntry {
            seq: at_ms,
            at_ms,
            method: "POST".into(),
            path: "/v1/refunds".into(),
            idempotency_key: Some("key-r1".into()),
            request_id: format!("req_{at_ms}"),
            origin: Some("w1#1".into()),
            faults: vec![],
            outcome: "answered".into(),
            status: Some(200),
            replayed: false,
            ended_ms: Some(at_ms),
        };
        let retention_ms = Contract::payments_default().key_retention_ms;
        observed.journals.insert("payments".into(), vec![sent_under_key(0), sent_under_key(retention_ms)]);
        assert_eq!(hazards(&scenario, &observed), vec![], "still within the retention");
        observed
            .journals
            .insert("payments".into(), vec![sent_under_key(0), sent_under_key(retention_ms + 1)]);
        let found = hazards(&scenario, &observed);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].kind.as_str(), found[0].intent.as_deref()),
            (HAZARD_KEY_PAST_RETENTION, Some("r1"))
        );
        assert!(found[0].detail.contains("after a write under it took effect"), "{found:?}");
        // A resend after a send that never took effect repeats nothing: no hazard.
        observed.ledgers.clear();
        assert_eq!(hazards(&scenario, &observed), vec![], "nothing took effect under the key");
    }

    #[test]
    fn liveness_evidence_counts_rounds_and_names_every_stuck_intent() {
        let case = cases().into_iter().find(|c| c.name == "stuck after reconciliation").unwrap();
        let verdicts = check(&case.scenario, &case.observed);
        let liveness = verdicts.iter().find(|v| v.invariant == LIVENESS).unwrap();
        assert_eq!(liveness.evidence.len(), 4, "{liveness:?}");
        assert!(liveness.evidence.iter().all(|l| l.contains("after 3 reconcile rounds")));
    }

    #[test]
    fn an_executor_error_is_the_only_verdict() {
        let mut observed = observed(&["r1"], vec![], vec![]);
        observed.executor_error = Some("garbage on stdout: line 3".into());
        let verdicts = check(&scenario(vec![refund("r1", "pi_1", 500)]), &observed);
        assert_eq!(
            verdicts,
            vec![Verdict {
                invariant: EXECUTOR_ERROR.into(),
                status: Status::Violated,
                held: false,
                evidence: vec!["garbage on stdout: line 3".into()],
                reason: None,
            }]
        );
        observed.executor_error = Some(String::new());
        let verdicts = check(&scenario(vec![]), &observed);
        assert!(verdicts[0].evidence[0].contains("no reason given"));
    }

    #[test]
    fn verdicts_do_not_depend_on_ledger_order() {
        for case in cases() {
            let want = check(&case.scenario, &case.observed);
            let mut shuffled = case.observed.clone();
            for ledger in shuffled.ledgers.values_mut() {
                ledger.reverse();
            }
            assert_eq!(check(&case.scenario, &shuffled), want, "{}", case.name);
        }
    }

    #[test]
    fn state_details_parse_tolerantly() {
        let cases = [
            ("r1 -> failed", Some(("r1", "failed"))),
            ("r1->confirmed", Some(("r1", "confirmed"))),
            ("  r1   ->   unknown  ", Some(("r1", "unknown"))),
            ("r1 → escalated", Some(("r1", "escalated"))),
            ("r1 -> failed (card declined)", Some(("r1", "failed"))),
            ("r1 -> failed, after 2 attempts", Some(("r1", "failed"))),
            ("a->b -> submitted", Some(("a->b", "submitted"))),
            ("r1 -> ", None),
            ("-> failed", None),
            ("r1 failed", None),
            ("", None),
        ];
        for (detail, want) in cases {
            assert_eq!(parse_state_detail(detail), want, "{detail:?}");
        }
        assert_eq!(parse_state_detail(&state_detail("r7", "blocked")), Some(("r7", "blocked")));
    }

    #[test]
    fn timeline_states_compare_without_case() {
        let scenario = scenario(vec![refund("r1", "pi_1", 500), replacing(refund("r2", "pi_1", 400), "r1")]);
        let mut observed = observed(
            &["r1", "r2"],
            vec![claim("r1", "failed"), claim("r2", "confirmed")],
            vec![refunded(1, 500, "re_2", "pi_1", 400)],
        );
        observed.timeline = vec![Moment {
            at_ms: 400,
            lane: "w2".into(),
            kind: "State".into(),
            detail: "r1 → FAILED".into(),
        }];
        assert!(all_held(&check(&scenario, &observed)));
    }

    #[test]
    fn terminal_states_agree_with_the_reference_vocabulary() {
        for state in executor::State::ALL {
            assert_eq!(is_terminal(state.as_str()), state.is_terminal(), "{state}");
        }
        assert!(!is_terminal("pending"));
    }

    #[test]
    fn verdicts_round_trip_through_json() {
        let case = cases().into_iter().find(|c| c.name == "one intent, two effects").unwrap();
        let verdicts = check(&case.scenario, &case.observed);
        let text = serde_json::to_string(&verdicts).unwrap();
        let back: Vec<Verdict> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, verdicts);
    }

    #[test]
    fn numbers_compare_by_value() {
        assert!(param_diff(&json!({"amount": 500}), &json!({"amount": 500.0, "currency": "usd"})).is_empty());
        assert_eq!(param_diff(&json!({"amount": 500}), &json!({})), vec!["amount missing (authorised 500)"]);
        assert_eq!(
            param_diff(&json!({"amount": -1}), &json!({"amount": 1})),
            vec!["amount 1 (authorised -1)"]
        );
    }
}
