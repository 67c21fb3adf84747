//! Duplicates and their causes: which effects and requests the page marks, and why.

use super::*;

/// What the timeline and the intent table highlight in one scenario, precomputed once.
#[derive(Default)]
pub(super) struct Marks<'a> {
    /// (service, ledger seq) of an effect that is the 2nd or later for its intent or business
    /// key, with what it duplicates ("second effect for intent refund-4812").
    pub(super) duplicate: BTreeMap<(&'a str, u64), String>,
    /// (service, ledger seq) of the first effect of a group that has duplicates.
    pub(super) first: BTreeMap<(&'a str, u64), String>,
    /// (service, request id) of a request that made a duplicate, with which one.
    pub(super) cause: BTreeMap<(&'a str, &'a str), String>,
    /// (service, ledger seq) to the intent the checker attributed the effect to.
    pub(super) owner: BTreeMap<(&'a str, u64), &'a str>,
    /// (service, ledger seq) of an effect the service made again by itself (a message the
    /// provider delivered twice): never a duplicate by the executor.
    pub(super) by_provider: BTreeMap<(&'a str, u64), String>,
    /// (service, ledger seq) of an effect the checker attributed to no intent and no
    /// duplicate mark explains: one nobody authorised (`no-unauthorised-effect` says why), or
    /// one its business key alone cannot place.
    pub(super) unowned: BTreeMap<(&'a str, u64), String>,
}

pub(super) fn ordinal(n: usize) -> String {
    match n {
        1 => "first".to_string(),
        2 => "second".to_string(),
        3 => "third".to_string(),
        n => format!("{n}th"),
    }
}

impl<'a> Marks<'a> {
    pub(super) fn of(r: &'a ScenarioResult) -> Marks<'a> {
        let mut marks = Marks::default();
        // By intent: the checker's attribution, in commit order.
        for intent in &r.intents {
            let mut refs: Vec<_> = intent.effects.iter().collect();
            refs.sort_by_key(|e| (e.at_ms, e.service.as_str(), e.seq));
            for (n, e) in refs.iter().enumerate() {
                let key = (e.service.as_str(), e.seq);
                marks.owner.insert(key, intent.id.as_str());
                if refs.len() < 2 {
                    continue;
                }
                let what = format!("{} effect for intent {}", ordinal(n + 1), intent.id);
                if n == 0 {
                    marks.first.insert(key, what);
                } else {
                    marks.duplicate.insert(key, what);
                }
            }
        }
        // By business key, which also catches effects no intent claimed.
        for (service, ledger) in &r.observed.ledgers {
            let mut groups: BTreeMap<(&str, &str, &str), Vec<&Effect>> = BTreeMap::new();
            for effect in ledger {
                if effect.by_provider() {
                    marks.by_provider.insert(
                        (service.as_str(), effect.seq),
                        format!(
                            "delivered again by the provider's own retry ({}), not by the executor",
                            effect.object_id
                        ),
                    );
                    continue;
                }
                if let Some((param, value)) = business_key(effect) {
                    groups.entry((effect.kind.as_str(), param, value)).or_default().push(effect);
                }
            }
            for ((_, param, value), effects) in groups.iter().filter(|(_, g)| g.len() > 1) {
                for (n, e) in effects.iter().enumerate() {
                    let key = (service.as_str(), e.seq);
                    if marks.duplicate.contains_key(&key) || marks.first.contains_key(&key) {
                        continue;
                    }
                    let what = format!("{} effect for {param} {value}", ordinal(n + 1));
                    if n == 0 {
                        marks.first.insert(key, what);
                    } else {
                        marks.duplicate.insert(key, what);
                    }
                }
            }
        }
        // What is left unexplained: an effect no intent owns. Not one of an action the executor
        // does not support: those are nobody's to judge.
        let exempt: Vec<&str> = r
            .intents
            .iter()
            .filter(|i| i.unsupported)
            .filter_map(|i| vocabulary::action(&i.action).map(|a| a.effect_kind))
            .collect();
        for (service, ledger) in &r.observed.ledgers {
            for effect in ledger {
                let key = (service.as_str(), effect.seq);
                let marked = marks.owner.contains_key(&key)
                    || marks.duplicate.contains_key(&key)
                    || marks.first.contains_key(&key)
                    || marks.by_provider.contains_key(&key);
                if !marked && !exempt.contains(&effect.kind.as_str()) {
                    marks.unowned.insert(key, "attributed to no intent".to_string());
                }
            }
        }
        // The requests that made the duplicates.
        let by_seq: BTreeMap<(&str, u64), &Effect> = r
            .observed
            .ledgers
            .iter()
            .flat_map(|(s, ledger)| ledger.iter().map(move |e| ((s.as_str(), e.seq), e)))
            .collect();
        for (&(service, seq), what) in &marks.duplicate {
            if let Some(effect) = by_seq.get(&(service, seq)) {
                marks.cause.insert((service, effect.request_id.as_str()), format!("made the {what}"));
            }
        }
        marks
    }
}

/// The effect's business key parameter and value, if it has one: the first business key of
/// the action table (as the checker attributes effects by them) that the effect's parameters
/// carry, among the actions where a second effect with the same key is a duplicate whatever
/// intent it belongs to (not `files.put`: two intents may write the same object).
pub(super) fn business_key(effect: &Effect) -> Option<(&'static str, &str)> {
    ACTIONS
        .iter()
        .filter(|a| a.duplicate_by_key)
        .map(|a| a.business_key)
        .find_map(|p| effect.params.get(p).and_then(|v| v.as_str()).map(|v| (p, v)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use results::{EffectRef, IntentResult, Observed, Outcome, Source};

    fn delivered(seq: u64, object: &str, by_provider: bool) -> Effect {
        let mut params = serde_json::json!({"to": "ada@example.com", "subject": "Hi", "body": "Hello"});
        if by_provider {
            params[vocabulary::PROVIDER_REDELIVERY] = true.into();
        }
        Effect {
            seq,
            at_ms: seq * 100,
            kind: "message.delivered".into(),
            object_id: object.into(),
            params,
            idempotency_key: None,
            fencing_token: None,
            request_id: format!("req_{seq}"),
        }
    }

    /// A run whose intent `m1` owns the effects of `ledger` at `owned` (ledger seqs).
    fn result(ledger: Vec<Effect>, owned: &[u64]) -> ScenarioResult {
        let effects = ledger
            .iter()
            .filter(|e| owned.contains(&e.seq))
            .map(|e| EffectRef {
                service: "messages".into(),
                seq: e.seq,
                object_id: e.object_id.clone(),
                at_ms: e.at_ms,
            })
            .collect();
        ScenarioResult {
            name: "redelivered".into(),
            position: 0,
            source: Source::Catalog,
            seed: 1,
            outcome: Outcome::Passed,
            verdicts: vec![],
            claims: vec![],
            intents: vec![IntentResult {
                id: "m1".into(),
                action: "messages.send".into(),
                state: Some("confirmed".into()),
                attempts: Some(1),
                effects,
                unsupported: false,
                after: vec![],
            }],
            effects: BTreeMap::from([("messages".to_string(), ledger.len())]),
            faults_applied: vec![],
            events: vec![],
            replay: String::new(),
            hazards: vec![],
            shrunk: None,
            shrink: None,
            verdict_set: None,
            summary: None,
            observed: Observed {
                ledgers: BTreeMap::from([("messages".to_string(), ledger)]),
                ..Observed::default()
            },
        }
    }

    /// A message the provider delivered twice is marked as the provider's, never as a
    /// duplicate; one the executor sent twice is a duplicate of its intent (a recipient may
    /// get several messages, so a second one to the same address is no duplicate by itself).
    #[test]
    fn a_providers_second_delivery_is_marked_as_its_own() {
        let r = result(vec![delivered(1, "e-1", false), delivered(2, "e-1", true)], &[1]);
        let marks = Marks::of(&r);
        assert!(marks.duplicate.is_empty() && marks.first.is_empty(), "{:?}", marks.duplicate);
        assert!(marks.by_provider[&("messages", 2)].contains("provider's own retry"));

        let ledger = vec![delivered(1, "e-1", false), delivered(2, "e-1", true), delivered(3, "e-2", false)];
        let unowned = result(ledger.clone(), &[1]);
        assert!(
            !Marks::of(&unowned).duplicate.contains_key(&("messages", 3)),
            "another message to the same address"
        );
        let r = result(ledger, &[1, 3]);
        let marks = Marks::of(&r);
        assert_eq!(
            marks.duplicate.get(&("messages", 3)).map(String::as_str),
            Some("second effect for intent m1")
        );
        assert!(!marks.duplicate.contains_key(&("messages", 2)));
    }
}
