//! Attribution: which ledger effect may belong to which intent, which intents form a lineage,
//! and which readings of the ledger the evidence leaves open (see the module documentation of
//! [`super`]). Every check reads the [`Facts`] built here; none of them looks at a ledger any
//! other way.

use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet};

use scenarios::{IntentSpec, Scenario};
use serde_json::Value;
use vocabulary::{ActionSpec, Contract, Effect, JournalEntry, State};

use super::{STATE_MOMENT, parse_state_detail};
use results::{Claim, Observed};

/// The contract the scenario announces for `action`'s service: its default with the
/// scenario's changes.
pub(super) fn contract_for(action: &ActionSpec, scenario: &Scenario) -> Contract {
    scenario.contract(action.service).unwrap_or_default()
}

/// A business key: the action and the key.
type BusinessKey<'a> = (&'static str, &'a str);

/// A checked intent (not exempt).
pub(super) struct Intent<'a> {
    pub(super) spec: &'a IntentSpec,
    /// The action and business key, when the intent's effects can be attributed.
    pub(super) attribution: Option<(&'static ActionSpec, &'a str)>,
    pub(super) claim: Option<&'a Claim>,
    pub(super) lineage: usize,
    /// Indices into `Facts::effects`, in ledger order: the effects of the chosen reading.
    pub(super) effects: Vec<usize>,
}

impl Intent<'_> {
    pub(super) fn id(&self) -> &str {
        &self.spec.id
    }

    pub(super) fn state(&self) -> Option<String> {
        self.claim.map(|c| c.state.trim().to_ascii_lowercase())
    }

    /// Whether the final claim is `state` (whatever its case and surrounding space).
    pub(super) fn claims(&self, state: State) -> bool {
        self.state().as_deref() == Some(state.as_str())
    }
}

/// An effect of an attributable kind, with whose it may be.
pub(super) struct Found<'a> {
    pub(super) service: &'a str,
    pub(super) effect: &'a Effect,
    pub(super) action: &'static ActionSpec,
    pub(super) key: Option<&'a str>,
    /// The business-key group it falls in (`Facts::groups`); `None`: no intent of the
    /// scenario acts on this business key.
    pub(super) group: Option<usize>,
    /// The intents it may belong to: the one its caller's tag names, else those that
    /// authorised exactly its parameters (narrowed to one whose claim alone names the effect:
    /// its idempotency key, or its object id as `external_id` or `tx_hash`); where nobody
    /// authorised them, the one it was meant for (its tag's intent, or the only intent of its
    /// key), with `mismatch` saying how it differs.
    pub(super) candidates: Vec<usize>,
    /// Whether some intent authorised exactly these parameters.
    pub(super) authorised: bool,
    /// The one lineage of its key, where no member may own it (a lineage of several members
    /// none of which authorised its parameters): it counts against that lineage.
    pub(super) lineage_alone: Option<usize>,
    /// Its lineage in the world applied (`readings.rs`): its owner's, or `lineage_alone`.
    pub(super) lineage: Option<usize>,
    /// Its owner in the world applied.
    pub(super) owner: Option<usize>,
    /// How the effect's parameters differ from those of the intent it was meant for.
    pub(super) mismatch: Vec<String>,
}

impl<'a> Found<'a> {
    /// An effect not yet placed: no candidates, nobody's.
    fn new(
        service: &'a str,
        effect: &'a Effect,
        action: &'static ActionSpec,
        key: Option<&'a str>,
        group: Option<usize>,
    ) -> Found<'a> {
        Found {
            service,
            effect,
            action,
            key,
            group,
            candidates: vec![],
            authorised: false,
            lineage_alone: None,
            lineage: None,
            owner: None,
            mismatch: vec![],
        }
    }

    pub(super) fn label(&self) -> String {
        format!("{} {} (seq {})", self.service, self.effect.object_id, self.effect.seq)
    }

    /// With the time of the effect, in ms from the run's first moment (`start_ms`).
    pub(super) fn label_at(&self, start_ms: u64) -> String {
        format!(
            "{} {} (seq {}, at {} ms)",
            self.service,
            self.effect.object_id,
            self.effect.seq,
            self.effect.at_ms.saturating_sub(start_ms)
        )
    }

    pub(super) fn key_text(&self) -> String {
        match self.key {
            Some(key) => format!("{} {key}", self.action.business_key),
            None => format!("no {}", self.action.business_key),
        }
    }
}

/// One business key's intents and effects, and the readings its ledger allows.
#[derive(Default)]
pub(super) struct Group {
    /// The intents acting on the key, in scenario order.
    pub(super) intents: Vec<usize>,
    /// Its effects (indices into `Facts::effects`), in ledger order.
    pub(super) effects: Vec<usize>,
    /// Each reading with as few duplicates as the ledger allows: an owner per effect of
    /// `effects` (`None` for an effect no intent may own).
    pub(super) readings: Vec<Vec<Option<usize>>>,
    /// The readings were more than `readings::READINGS_MAX`: only one is kept.
    pub(super) too_many: bool,
    /// Effects beyond what the key's lineages can own, one each: duplicates whoever made them.
    pub(super) excess: usize,
    /// Whether every effect has at most one possible owner, so that there is one reading.
    pub(super) fixed: bool,
}

/// An effect of a kind no action makes (an object deleted): nothing a scenario authorises.
pub(super) struct Other<'a> {
    pub(super) service: &'a str,
    pub(super) effect: &'a Effect,
}

pub(super) struct StateMoment<'a> {
    pub(super) at_ms: u64,
    pub(super) state: &'a str,
    pub(super) lane: &'a str,
}

/// The facts of one run, indexed for the invariants: its intents and claims, the effects
/// attributed to them, the states the timeline shows and who sent each request.
pub(super) struct Facts<'a> {
    pub(super) scenario: &'a Scenario,
    pub(super) observed: &'a Observed,
    pub(super) intents: Vec<Intent<'a>>,
    pub(super) by_id: BTreeMap<&'a str, usize>,
    /// Ids of the intents whose action the executor does not support, and of the workflow
    /// steps it was not given (it does not announce `workflows`).
    pub(super) exempt: BTreeSet<&'a str>,
    pub(super) claims: BTreeMap<&'a str, &'a Claim>,
    /// Members of each lineage (an intent and its replacements), in scenario order; lineages
    /// in order of their first member.
    pub(super) lineages: Vec<Vec<usize>>,
    /// Attributable effects, per service in ledger order.
    pub(super) effects: Vec<Found<'a>>,
    /// Effects of kinds no action makes, per service in ledger order.
    pub(super) others: Vec<Other<'a>>,
    /// The intents and effects of each business key, with the readings its ledger allows.
    pub(super) groups: Vec<Group>,
    /// The timeline's state moments per intent, read when a check first needs them.
    states: OnceCell<BTreeMap<&'a str, Vec<StateMoment<'a>>>>,
    /// Per service, who sent each request, from the journals, read when a check first needs it.
    senders: OnceCell<BTreeMap<&'a str, Senders<'a>>>,
    /// The run's first moment: evidence gives times from it, which read better than epoch
    /// milliseconds (0 when the timeline is empty).
    pub(super) start_ms: u64,
}

/// Who sent the requests one service saw: the worker lives of the journal's origins.
#[derive(Default)]
pub(super) struct Senders<'a> {
    /// Per request id: its origin and arrival (service time).
    pub(super) requests: BTreeMap<&'a str, (&'a str, u64)>,
    /// Per origin: every arrival, in order.
    pub(super) arrivals: BTreeMap<&'a str, Vec<u64>>,
    /// Per origin: the journal position of its first request (arrivals in one millisecond
    /// keep their order there).
    pub(super) first_seq: BTreeMap<&'a str, u64>,
}

impl<'a> Senders<'a> {
    pub(super) fn of(journal: &'a [JournalEntry]) -> Senders<'a> {
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
    pub(super) fn first(&self, origin: &str) -> Option<u64> {
        self.first_seq.get(origin).copied()
    }

    /// Whether a request of `origin` arrived at or after `from_ms` and before `until_ms`.
    pub(super) fn any_between(&self, origin: &str, from_ms: u64, until_ms: u64) -> bool {
        self.arrivals.get(origin).is_some_and(|a| a.iter().any(|t| (from_ms..until_ms).contains(t)))
    }
}

/// The intents the checker judges, and what it leaves to nobody.
struct Roll<'a> {
    intents: Vec<Intent<'a>>,
    by_id: BTreeMap<&'a str, usize>,
    exempt: BTreeSet<&'a str>,
    /// Business keys of exempt intents: effects carrying them are nobody's to judge.
    exempt_keys: BTreeSet<BusinessKey<'a>>,
}

impl<'a> Facts<'a> {
    pub(super) fn new(scenario: &'a Scenario, observed: &'a Observed) -> Facts<'a> {
        // The final claim per id: the last one, should an executor repeat itself.
        let claims: BTreeMap<&str, &Claim> = observed.claims.iter().map(|c| (c.id.as_str(), c)).collect();
        let Roll { mut intents, by_id, exempt, exempt_keys } = roll(scenario, observed, &claims);
        let lineages = lineages(&mut intents, &by_id);
        let (keys, mut groups) = groups(&intents);
        let mut effects = Vec::new();
        let mut others = Vec::new();
        for (service, ledger) in &observed.ledgers {
            let mut ledger: Vec<&Effect> = ledger.iter().collect();
            ledger.sort_by_key(|e| e.seq);
            for effect in ledger {
                // The provider's own second delivery (a message it delivered again by its own
                // retry): nothing an executor did or could stop, so no invariant counts it.
                if effect.by_provider() {
                    continue;
                }
                let Some(action) = vocabulary::action_for_effect(service, &effect.kind) else {
                    others.push(Other { service, effect });
                    continue;
                };
                let key = effect.params.get(action.business_key).and_then(Value::as_str);
                let group = key.and_then(|k| keys.get(&(action.name, k)).copied());
                if group.is_none() && key.is_some_and(|k| exempt_keys.contains(&(action.name, k))) {
                    continue;
                }
                if let Some(g) = group {
                    groups[g].effects.push(effects.len());
                }
                let members = group.map_or(&[][..], |g| groups[g].intents.as_slice());
                effects.push(found(&intents, members, Found::new(service, effect, action, key, group)));
            }
        }
        let mut facts = Facts {
            scenario,
            observed,
            intents,
            by_id,
            exempt,
            claims,
            lineages,
            effects,
            others,
            groups,
            states: OnceCell::new(),
            senders: OnceCell::new(),
            start_ms: observed.timeline.iter().map(|m| m.at_ms).min().unwrap_or(0),
        };
        facts.read_groups();
        facts
    }

    /// The timeline's state moments per intent id.
    pub(super) fn states(&self) -> &BTreeMap<&'a str, Vec<StateMoment<'a>>> {
        self.states.get_or_init(|| states(self.observed))
    }

    /// Who sent each request, per service.
    pub(super) fn senders(&self) -> &BTreeMap<&'a str, Senders<'a>> {
        self.senders.get_or_init(|| {
            self.observed
                .journals
                .iter()
                .map(|(service, journal)| (service.as_str(), Senders::of(journal)))
                .collect()
        })
    }

    /// Whether any intent's effects can be told apart in a ledger.
    pub(super) fn any_attributable(&self) -> bool {
        self.intents.iter().any(|i| i.attribution.is_some())
    }

    pub(super) fn members_text(&self, lineage: usize) -> String {
        self.ids_text(&self.lineages[lineage])
    }

    /// Intent ids, in the order given, joined with commas.
    pub(super) fn ids_text(&self, intents: &[usize]) -> String {
        intents.iter().map(|m| self.intents[*m].id()).collect::<Vec<_>>().join(", ")
    }

    pub(super) fn effects_text(&self, effects: &[usize]) -> String {
        effects.iter().map(|e| self.effects[*e].label()).collect::<Vec<_>>().join(", ")
    }

    pub(super) fn owner_text(&self, effect: &Found) -> String {
        match effect.owner {
            Some(o) => format!("{} of {}", effect.label(), self.intents[o].id()),
            None => format!("{} of no member", effect.label()),
        }
    }

    pub(super) fn claim_text(intent: &Intent) -> String {
        match intent.state() {
            Some(state) => format!("claims {state}"),
            None => "no claim".to_string(),
        }
    }
}

/// The intents to judge, in scenario order, and the exempt ones: an action the executor does
/// not support, a workflow step it was not given.
fn roll<'a>(scenario: &'a Scenario, observed: &'a Observed, claims: &BTreeMap<&str, &'a Claim>) -> Roll<'a> {
    let unsupported: BTreeSet<&str> = observed.unsupported.iter().map(String::as_str).collect();
    let unsupported_steps: BTreeSet<&str> = observed.unsupported_steps.iter().map(String::as_str).collect();
    let mut roll = Roll {
        intents: Vec::new(),
        by_id: BTreeMap::new(),
        exempt: BTreeSet::new(),
        exempt_keys: BTreeSet::new(),
    };
    for spec in &scenario.intents {
        let id = spec.id.as_str();
        if roll.by_id.contains_key(id) || roll.exempt.contains(id) {
            continue;
        }
        let attribution = vocabulary::action(&spec.action).and_then(|action| {
            spec.params.get(action.business_key).and_then(Value::as_str).map(|key| (action, key))
        });
        if unsupported.contains(spec.action.as_str()) || unsupported_steps.contains(id) {
            roll.exempt.insert(id);
            if let Some((action, key)) = attribution {
                roll.exempt_keys.insert((action.name, key));
            }
            continue;
        }
        roll.by_id.insert(id, roll.intents.len());
        roll.intents.push(Intent {
            spec,
            attribution,
            claim: claims.get(id).copied(),
            lineage: 0,
            effects: vec![],
        });
    }
    roll
}

/// The lineages, by union-find over `replaces`: an intent and every replacement of it. Sets
/// each intent's `lineage`.
fn lineages(intents: &mut [Intent], by_id: &BTreeMap<&str, usize>) -> Vec<Vec<usize>> {
    let mut parent: Vec<usize> = (0..intents.len()).collect();
    for (i, intent) in intents.iter().enumerate() {
        if let Some(p) = intent.spec.replaces.as_deref().and_then(|p| by_id.get(p)) {
            union(&mut parent, i, *p);
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
    lineages
}

/// The intents of each business key: the groups, in order of their first intent, and the
/// group of each key.
fn groups<'a>(intents: &[Intent<'a>]) -> (BTreeMap<BusinessKey<'a>, usize>, Vec<Group>) {
    let mut keys: BTreeMap<BusinessKey, usize> = BTreeMap::new();
    let mut groups: Vec<Group> = Vec::new();
    for (i, intent) in intents.iter().enumerate() {
        if let Some((action, key)) = intent.attribution {
            let g = *keys.entry((action.name, key)).or_insert_with(|| {
                groups.push(Group::default());
                groups.len() - 1
            });
            groups[g].intents.push(i);
        }
    }
    (keys, groups)
}

/// `found` placed among `members`, the intents of its business key: its candidates, whether
/// they authorised it, and the lineage it counts against where nobody may own it.
fn found<'a>(intents: &[Intent], members: &[usize], mut found: Found<'a>) -> Found<'a> {
    let (candidates, authorised, mismatch) = candidates(intents, members, found.effect);
    // Nobody's on a key that one lineage acts on: the lineage's all the same.
    found.lineage_alone = match (candidates.as_slice(), members.first()) {
        ([], Some(first)) if members.iter().all(|m| intents[*m].lineage == intents[*first].lineage) => {
            Some(intents[*first].lineage)
        }
        _ => None,
    };
    found.lineage = found.lineage_alone;
    found.candidates = candidates;
    found.authorised = authorised;
    found.mismatch = mismatch;
    found
}

/// Who may own `effect`, among `members` (the intents of its business key): its candidates,
/// whether one of them authorised exactly its parameters, and how it differs from the intent
/// it was meant for where none did (see [`Found::candidates`]).
fn candidates(intents: &[Intent], members: &[usize], effect: &Effect) -> (Vec<usize>, bool, Vec<String>) {
    let exact: Vec<usize> =
        members.iter().copied().filter(|m| params_match(&intents[*m].spec.params, &effect.params)).collect();
    let tagged =
        effect.intent_tag().and_then(|tag| members.iter().copied().find(|m| intents[*m].id() == tag));
    if let Some(tagged) = tagged {
        // A tag on parameters its intent did not authorise is not believed over them when
        // another intent did authorise them.
        if exact.contains(&tagged) {
            return (vec![tagged], true, vec![]);
        }
        if exact.is_empty() {
            return (vec![tagged], false, param_diff(&intents[tagged].spec.params, &effect.params));
        }
    }
    if !exact.is_empty() {
        let narrowed = match exact.as_slice() {
            [_] => None,
            _ => by_claim(intents, &exact, effect),
        };
        return (narrowed.map_or(exact, |one| vec![one]), true, vec![]);
    }
    // Nobody authorised these parameters: with a single intent on the key it is still that
    // intent's effect, with the wrong parameters; with several, nobody's.
    match members {
        [only] => (vec![*only], false, param_diff(&intents[*only].spec.params, &effect.params)),
        _ => (vec![], false, vec![]),
    }
}

fn states(observed: &Observed) -> BTreeMap<&str, Vec<StateMoment<'_>>> {
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
    states
}

/// Whether `claim`'s evidence names `key` as the intent's key or one of its earlier ones.
pub(super) fn claim_lists_key(claim: Option<&Claim>, key: &str) -> bool {
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

/// The one candidate whose claim names the effect, if exactly one does: by the idempotency key
/// of the request that made it, or by its object id as the claim's `external_id` or `tx_hash`
/// (a refund's or a workspace's id, a transaction's hash).
fn by_claim(intents: &[Intent], candidates: &[usize], effect: &Effect) -> Option<usize> {
    let names = |m: &&usize| {
        let claim = intents[**m].claim;
        let by_key = effect.idempotency_key.as_deref().is_some_and(|key| claim_lists_key(claim, key));
        let by_id = claim.is_some_and(|c| {
            ["external_id", "tx_hash"]
                .iter()
                .any(|field| c.evidence.get(field).and_then(Value::as_str) == Some(effect.object_id.as_str()))
        });
        by_key || by_id
    };
    match candidates.iter().filter(names).collect::<Vec<_>>().as_slice() {
        [only] => Some(**only),
        _ => None,
    }
}

/// Whether `actual` carries every one of the `authorised` parameters: [`param_diff`] is empty
/// (without writing the differences down).
fn params_match(authorised: &Value, actual: &Value) -> bool {
    let Value::Object(fields) = authorised else { return authorised == actual };
    fields.iter().all(|(name, want)| match actual.get(name) {
        _ if matches!(vocabulary::ParamRef::parse(want), Ok(Some(_))) => true,
        Some(got) => same(got, want),
        None => false,
    })
}

/// How `actual` differs from the `authorised` parameters, one entry per differing field.
pub(super) fn param_diff(authorised: &Value, actual: &Value) -> Vec<String> {
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
            // A value read from an earlier step's result: the `workflow` check judges it
            // against what that step's effect produced.
            _ if matches!(vocabulary::ParamRef::parse(want), Ok(Some(_))) => None,
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
