//! The checks of a scenario's intents: unique ids, known actions and their parameters, steps
//! that come after earlier intents, lineages (a replacement follows what it replaces, is the
//! same action and acts on the same business key), a put that changes what it overwrites,
//! and transfers the chain account can pay for.

use vocabulary::action::{CHAIN_TRANSFER, FILES_PUT};

use super::*;
use crate::model::{IntentSpec, TRIGGER_EVENT};

/// What the intents checked so far leave for the checks of the ones after them.
#[derive(Default)]
struct Earlier<'s> {
    /// Wei the chain transfers move, all of them (a replacement's too: the sum bounds what
    /// can take effect).
    transferred: u128,
    /// Intent id to its index.
    ids: BTreeMap<&'s str, usize>,
    /// Replaced intent's id to its replacement's.
    replaced_by: BTreeMap<&'s str, &'s str>,
    /// Per intent, the index of its lineage's first intent.
    roots: Vec<usize>,
    /// Per action, lineage key value to the lineage root that uses it.
    owners: BTreeMap<(&'s str, String), usize>,
}

impl Scenario {
    /// One intent at least and at most [`INTENTS_MAX`], each checked in order against the
    /// ones before it; the first problem found is the answer.
    pub(super) fn check_intents(&self, at: &FieldPath) -> Check {
        if self.intents.is_empty() {
            return Err(Invalid::new(at.clone(), "a scenario needs at least one intent")
                .hint("add an [[intents]] table with id, action and params"));
        }
        if self.intents.len() > INTENTS_MAX {
            return Err(Invalid::new(
                at.index(INTENTS_MAX),
                format!("{} intents; a scenario has at most {INTENTS_MAX}", self.intents.len()),
            ));
        }
        let mut earlier = Earlier { roots: Vec::with_capacity(self.intents.len()), ..Earlier::default() };
        for i in 0..self.intents.len() {
            self.check_intent(i, &at.index(i), &mut earlier)?;
        }
        Ok(())
    }

    /// Intent `i`, at `here`, against the intents before it (which it adds itself to).
    fn check_intent<'s>(&'s self, i: usize, here: &FieldPath, earlier: &mut Earlier<'s>) -> Check {
        let intent = &self.intents[i];
        identifier(&intent.id, here.key("id"), "an intent id")?;
        if let Some(first) = earlier.ids.insert(&intent.id, i) {
            return Err(Invalid::new(
                here.key("id"),
                format!("intent id \"{}\" is already used by intents[{first}]", intent.id),
            )
            .hint("intent ids are unique within a scenario"));
        }
        let names: Vec<&str> = ACTIONS.iter().map(|a| a.name).collect();
        let Some(spec) = action(&intent.action) else {
            return Err(Invalid::unknown(here.key("action"), "action", &intent.action, &names));
        };
        // A refund larger than its payment intent is fair: the service refuses it (400
        // `amount_too_large`), a refusal every correct executor escalates for a person.
        check_params(spec, &intent.params, &here.key("params"))?;
        self.check_after(i, spec, here)?;
        self.check_trigger(intent, here)?;
        self.check_put_changes(intent, spec, here)?;
        check_transfer_budget(intent, spec, here, &mut earlier.transferred)?;
        let root = self.root_of(i, here, earlier)?;
        earlier.roots.push(root);
        self.check_business_key(i, root, spec, here, &mut earlier.owners)
    }

    /// An intent a webhook triggers: `payment_intent.succeeded` of a payment intent that no
    /// other intent refunds (it is unpaid until the application listens), neither a step nor a
    /// replacement (it starts when the event arrives), and paid or forged alike by every
    /// trigger that names it.
    fn check_trigger(&self, intent: &IntentSpec, here: &FieldPath) -> Check {
        let Some(trigger) = &intent.on_event else { return Ok(()) };
        let at = here.key("on_event");
        if trigger.kind != TRIGGER_EVENT {
            return Err(Invalid::new(
                at.key("type"),
                format!("on_event type \"{}\": a trigger is a {TRIGGER_EVENT} event", trigger.kind),
            )
            .hint(format!("type = \"{TRIGGER_EVENT}\"")));
        }
        let pi = &trigger.payment_intent;
        if pi.is_empty() || pi.len() > ID_MAX || pi.contains(['/', ' ', '\t', '\n']) {
            return Err(Invalid::new(
                at.key("payment_intent"),
                format!("payment_intent {pi:?} is not an id"),
            )
            .hint("an id such as \"pi_order_1\", without spaces or slashes"));
        }
        if intent.replaces.is_some() || !intent.after.is_empty() {
            let key = if intent.replaces.is_some() { "replaces" } else { "after" };
            return Err(Invalid::new(
                here.key(key),
                format!("intent \"{}\" waits for a webhook: it cannot also have `{key}`", intent.id),
            )
            .hint(
                "an intent a webhook triggers starts when the event arrives; drop `on_event` or this key",
            ));
        }
        let refunded = self.intents.iter().any(|other| {
            other.action == "payments.refund"
                && other.params.get("payment_intent").and_then(|v| v.as_str()) == Some(pi.as_str())
        });
        if refunded {
            return Err(Invalid::new(
                at.key("payment_intent"),
                format!(
                    "payment intent \"{pi}\" is unpaid until the application listens: no intent may refund it"
                ),
            )
            .hint("trigger on one payment intent and refund another"));
        }
        let clash = self.triggers().find(|t| &t.payment_intent == pi && t.forged != trigger.forged);
        if clash.is_some() {
            return Err(Invalid::new(
                at.key("forged"),
                format!("payment intent \"{pi}\" is both paid and forged by the triggers that name it"),
            )
            .hint("give every trigger of one payment intent the same `forged`"));
        }
        Ok(())
    }

    /// A put of an object the scenario seeds must write another body: one that changes
    /// nothing leaves no trace a read could find.
    fn check_put_changes(&self, intent: &IntentSpec, spec: &ActionSpec, here: &FieldPath) -> Check {
        if spec.name == FILES_PUT.name
            && let (Some(bucket), Some(key), Some(body)) = (
                intent.params.get("bucket").and_then(Value::as_str),
                intent.params.get("key").and_then(Value::as_str),
                intent.params.get("body").and_then(Value::as_str),
            )
            && self.seeded_object(bucket, key) == Some(body)
        {
            return Err(Invalid::new(
                here.key("params").key("body"),
                format!("{bucket}/{key} is seeded with this very body"),
            )
            .hint("a put that changes nothing leaves no trace a read could find; write another body"));
        }
        Ok(())
    }

    /// The index of the first intent of intent `i`'s lineage: its own where it replaces
    /// nothing, else that of the earlier intent of the same action it replaces, which no
    /// other intent replaces (a lineage is a chain).
    fn root_of<'s>(
        &'s self,
        i: usize,
        here: &FieldPath,
        earlier: &mut Earlier<'s>,
    ) -> Result<usize, Invalid> {
        let intent = &self.intents[i];
        let Some(old) = &intent.replaces else { return Ok(i) };
        let path = here.key("replaces");
        if old == &intent.id {
            return Err(Invalid::new(path, format!("intent {old} replaces itself")));
        }
        let Some(&j) = earlier.ids.get(old.as_str()) else {
            if self.intents.iter().any(|other| &other.id == old) {
                return Err(Invalid::new(
                    path,
                    format!("intent {} replaces {old}, which comes later", intent.id),
                )
                .hint("a replacement must follow the intent it replaces"));
            }
            let earlier: Vec<&str> = self.intents[..i].iter().map(|x| x.id.as_str()).collect();
            return Err(Invalid::unknown(path, "intent", old, &earlier));
        };
        let older = &self.intents[j];
        if older.action != intent.action {
            return Err(Invalid::new(
                path,
                format!(
                    "intent {} ({}) cannot replace {old} ({}): a replacement is the same action",
                    intent.id, intent.action, older.action
                ),
            ));
        }
        if let Some(other) = earlier.replaced_by.insert(old.as_str(), intent.id.as_str()) {
            return Err(Invalid::new(path, format!("intent {old} is already replaced by {other}"))
                .hint(format!("a lineage is a chain: replace {other} instead")));
        }
        Ok(earlier.roots[j])
    }

    /// Intent `i`'s business key: its lineage's (a replacement acts on what it replaces), and
    /// for an action whose lineages cannot share one (a workspace's external id, an object's
    /// key), no other lineage's.
    fn check_business_key<'s>(
        &'s self,
        i: usize,
        root: usize,
        spec: &'s ActionSpec,
        here: &FieldPath,
        owners: &mut BTreeMap<(&'s str, String), usize>,
    ) -> Check {
        let key = spec.business_key;
        let value = lineage_value(&self.intents[i].params, key);
        let root_value = lineage_value(&self.intents[root].params, key);
        if root != i && value != root_value {
            return Err(Invalid::new(
                here.key("params").key(key),
                format!(
                    "a replacement acts on the same {key} as its lineage: {} has {root_value}, this one {value}",
                    self.intents[root].id
                ),
            ));
        }
        // Several lineages may act on one payment, recipient or address; one workspace
        // per external id and one object per key stay one lineage's.
        if let Some(&owner) = owners.get(&(spec.name, value.clone()))
            && owner != root
            && !spec.shares_business_key
        {
            return Err(Invalid::new(
                here.key("params").key(key),
                format!(
                    "{key} {value} is already used by intent {} of another lineage; {} acts on one \
                     {key} per lineage, so each lineage needs its own",
                    self.intents[owner].id, spec.name
                ),
            )
            .hint(format!(
                "use another {key}, or set replaces = \"{}\" if this intent replaces it",
                self.intents[owner].id
            )));
        }
        owners.insert((spec.name, value), root);
        Ok(())
    }

    /// An intent's `after` names earlier intents, each once, and every parameter reference
    /// reads a result field of one of them.
    fn check_after(&self, i: usize, spec: &ActionSpec, here: &FieldPath) -> Check {
        let intent = &self.intents[i];
        let earlier = &self.intents[..i];
        let earlier_ids: Vec<&str> = earlier.iter().map(|x| x.id.as_str()).collect();
        for (j, id) in intent.after.iter().enumerate() {
            let path = here.key("after").index(j);
            if intent.after[..j].contains(id) {
                return Err(Invalid::new(path, format!("\"{id}\" is listed twice in after")));
            }
            if id == &intent.id {
                return Err(Invalid::new(path, format!("intent {id} comes after itself")));
            }
            if !earlier_ids.contains(&id.as_str()) {
                if self.intents.iter().any(|other| &other.id == id) {
                    return Err(Invalid::new(
                        path,
                        format!("intent {} comes after {id}, which comes later", intent.id),
                    )
                    .hint("list a step after the intents it comes after"));
                }
                return Err(Invalid::unknown(path, "intent", id, &earlier_ids));
            }
        }
        for (param, reference) in intent.references() {
            let from = earlier.iter().find(|x| x.id == reference.from).and_then(|x| action(&x.action));
            let listed = intent.after.contains(&reference.from);
            if let Err(problem) =
                vocabulary::workflow::check_reference(spec, &param, &reference, from, listed)
            {
                let hint = if from.is_some() && !listed {
                    format!("add after = [\"{}\"]", reference.from)
                } else {
                    "a reference reads a result field of an earlier intent listed in after".to_string()
                };
                return Err(Invalid::new(here.key("params").key(&param), problem).hint(hint));
            }
        }
        Ok(())
    }
}

/// A transfer's value, added to `transferred` (the wei of the transfers before it), must
/// leave the chain account its gas reserve: a transfer it cannot pay can only be refused for
/// insufficient funds.
fn check_transfer_budget(
    intent: &IntentSpec,
    spec: &ActionSpec,
    here: &FieldPath,
    transferred: &mut u128,
) -> Check {
    if spec.name == CHAIN_TRANSFER.name
        && let Some(value) =
            intent.params.get("value").and_then(Value::as_str).and_then(|v| v.parse::<u128>().ok())
    {
        *transferred = transferred.saturating_add(value);
        let budget = CHAIN_ACCOUNT_BALANCE_WEI - GAS_RESERVE_WEI;
        if *transferred > budget {
            return Err(Invalid::new(
                here.key("params").key("value"),
                format!(
                    "the transfers add up to {transferred} wei, more than the {budget} wei the chain \
                     account can send (it holds {CHAIN_ACCOUNT_BALANCE_WEI} wei and keeps {GAS_RESERVE_WEI} for gas)"
                ),
            )
            .hint("such a transfer can only be refused for insufficient funds; send less"));
        }
    }
    Ok(())
}
