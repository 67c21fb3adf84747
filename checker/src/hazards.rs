//! Hazards: safeguards a contract offered that a write did not use, whatever the verdicts
//! (see "Hazards" in the module documentation of [`super`]).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use vocabulary::{ACTIONS, Guard, KeyPolicy};

use super::attribution::{Facts, Intent, claim_lists_key, contract_for};
use super::{
    HAZARD_EARLY_REPLACEMENT, HAZARD_KEY_PAST_RETENTION, HAZARD_NEW_KEY_AFTER_UNREAD_REFUSAL,
    HAZARD_NO_FENCING_TOKEN, HAZARD_NO_PRECONDITION, exploited_by,
};
use results::Hazard;

/// The hazards found so far, each once: a kind and the thing it is about (an intent, a key,
/// an effect) are said once however many writes show it.
#[derive(Default)]
struct Found {
    out: Vec<Hazard>,
    seen: BTreeSet<(String, String)>,
}

impl Found {
    fn push(&mut self, kind: &str, service: &str, intent: Option<&str>, detail: String, once: String) {
        if self.seen.insert((kind.to_string(), once)) {
            self.out.push(Hazard {
                kind: kind.to_string(),
                service: service.to_string(),
                intent: intent.map(str::to_string),
                detail,
                exploited_by: exploited_by(kind).to_string(),
                command: String::new(),
            });
        }
    }
}

impl Facts<'_> {
    pub(super) fn hazards(&self) -> Vec<Hazard> {
        let mut found = Found::default();
        self.unguarded_writes(&mut found);
        for (replacement, detail) in self.early_replacements() {
            let service = self
                .by_id
                .get(replacement.as_str())
                .and_then(|i| vocabulary::action(&self.intents[*i].spec.action))
                .map_or("", |a| a.service);
            found.push(HAZARD_EARLY_REPLACEMENT, service, Some(&replacement), detail, replacement.clone());
        }
        self.new_keys_after_unread_refusals(&mut found);
        self.keys_past_retention(&mut found);
        found.out
    }

    /// Writes made without the guard their service offers: a fencing token, a precondition.
    fn unguarded_writes(&self, found: &mut Found) {
        for (action, guard) in self.guarded() {
            for effect in self.effects.iter().filter(|e| e.action.name == action.name) {
                let owner = effect.owner.map(|o| self.intents[o].id());
                let once = owner.map_or_else(|| effect.label(), str::to_string);
                let params = &effect.effect.params;
                if guard == Guard::Fencing && effect.effect.fencing_token.is_none() {
                    found.push(
                        HAZARD_NO_FENCING_TOKEN,
                        action.service,
                        owner,
                        format!(
                            "{} for {} was created without a Fencing-Token, though {} offers fencing",
                            effect.label(),
                            effect.key_text(),
                            action.service
                        ),
                        once,
                    );
                } else if guard == Guard::ConditionalWrites
                    && params.get("if_match").is_none_or(Value::is_null)
                    && params.get("if_none_match").and_then(Value::as_bool) != Some(true)
                {
                    found.push(
                        HAZARD_NO_PRECONDITION,
                        action.service,
                        owner,
                        format!(
                            "{} for {} was written without If-Match or If-None-Match, though {} offers \
                             conditional writes",
                            effect.label(),
                            effect.key_text(),
                            action.service
                        ),
                        once,
                    );
                }
            }
        }
    }

    /// Sends under a new key (or none) after a refusal the worker could not read: had the
    /// first send taken effect, the new one would have doubled it.
    fn new_keys_after_unread_refusals(&self, found: &mut Found) {
        for s in
            self.sends_after_refusals().1.iter().filter(|s| s.unread.is_some() && !s.under_the_same_key())
        {
            let intent = self.intents[s.intent].id();
            found.push(
                HAZARD_NEW_KEY_AFTER_UNREAD_REFUSAL,
                s.service,
                Some(intent),
                format!(
                    "{intent} was sent again ({} {}, request {}) under {} after a refusal its worker could not read \
                     (request {}): had the first send taken effect, this one would have doubled it",
                    s.send.method,
                    s.send.path,
                    s.send.request_id,
                    s.send
                        .idempotency_key
                        .as_deref()
                        .map_or("no idempotency key".to_string(), |k| format!("another key, {k}")),
                    s.refusal.request_id
                ),
                s.send.request_id.clone(),
            );
        }
    }

    /// Sends under a key older than the service keeps keys: the service no longer knows it,
    /// so a repeat would take effect again.
    fn keys_past_retention(&self, found: &mut Found) {
        for action in ACTIONS {
            let contract = contract_for(action, self.scenario);
            if contract.idempotency_keys != KeyPolicy::Honored {
                continue;
            }
            let Some(journal) = self.observed.journals.get(action.service) else { continue };
            let effect_ms = self.first_effect_ms_by_key(action.service);
            for entry in journal.iter().filter(|e| e.method == "POST") {
                let Some(key) = entry.idempotency_key.as_deref() else { continue };
                let Some(took_effect_ms) = effect_ms.get(key) else { continue };
                let age_ms = entry.at_ms.saturating_sub(*took_effect_ms);
                if age_ms > contract.key_retention_ms {
                    let owner = self.intents.iter().find(|i| claim_lists_key(i.claim, key)).map(Intent::id);
                    found.push(
                        HAZARD_KEY_PAST_RETENTION,
                        action.service,
                        owner,
                        format!(
                            "{} {} was sent under idempotency key {key} {age_ms} ms after a write under it took \
                             effect, though {} keeps keys for {} ms",
                            entry.method, entry.path, action.service, contract.key_retention_ms
                        ),
                        key.to_string(),
                    );
                }
            }
        }
    }

    /// When a write under each key first took effect at `service`: only then is there
    /// something for a later send under the key to repeat, and only the key's retention stops
    /// it.
    fn first_effect_ms_by_key(&self, service: &str) -> BTreeMap<&str, u64> {
        let mut effect_ms: BTreeMap<&str, u64> = BTreeMap::new();
        for effect in self.observed.ledgers.get(service).into_iter().flatten() {
            if let Some(key) = effect.idempotency_key.as_deref() {
                let first = effect_ms.entry(key).or_insert(effect.at_ms);
                *first = (*first).min(effect.at_ms);
            }
        }
        effect_ms
    }
}
