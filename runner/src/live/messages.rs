//! The `twice/1` messages the live backend makes and reads: an intent as `propose` sends it,
//! the features of an `init_ok`, the claims of a `status_ok`, and the timeline's name for the
//! wait on each kind of reply.

use results::Claim;
use scenarios::IntentSpec;
use serde_json::{Value, json};
use vocabulary::{WEBHOOKS_FEATURE, WORKFLOWS_FEATURE};

/// The timeline's wait kind of a reply to a `kind` request.
pub(super) fn reply_kind(kind: &str) -> &'static str {
    match kind {
        "propose" => "reply.propose",
        "drain" => "reply.drain",
        "reconcile" => "reply.reconcile",
        "status" => "reply.status",
        _ => "reply.other",
    }
}

pub(super) fn intent_message(intent: &IntentSpec) -> Value {
    let mut message = json!({"id": intent.id, "action": intent.action, "params": intent.params});
    if let Some(map) = message.as_object_mut() {
        if let Some(replaces) = &intent.replaces {
            map.insert("replaces".into(), json!(replaces));
        }
        // Only steps carry it, so an executor without workflows never sees the field.
        if intent.is_step() {
            map.insert("after".into(), json!(intent.after));
        }
        // Only intents an event starts carry it; whether the event will be forged is not said.
        if let Some(trigger) = &intent.on_event {
            map.insert(
                "on_event".into(),
                json!({"type": trigger.kind, "payment_intent": trigger.payment_intent}),
            );
        }
    }
    message
}

/// Whether an `init_ok` lists the `workflows` feature.
pub(super) fn announces_workflows(init_ok: &Value) -> bool {
    announces(init_ok, WORKFLOWS_FEATURE)
}

/// Whether an `init_ok` lists the `webhooks` feature.
pub(super) fn announces_webhooks(init_ok: &Value) -> bool {
    announces(init_ok, WEBHOOKS_FEATURE)
}

fn announces(init_ok: &Value, feature: &str) -> bool {
    init_ok
        .get("features")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|x| x.as_str() == Some(feature)))
}

/// The claims in a `status_ok`.
pub(super) fn claims(reply: &Value) -> Result<Vec<Claim>, String> {
    let intents = reply.get("intents").and_then(Value::as_array).ok_or("no intents list")?;
    intents
        .iter()
        .map(|i| {
            let id = i
                .get("id")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("an intent without a string id: {i}"))?;
            let state = i
                .get("state")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("intent {id} has no string state"))?;
            Ok(Claim {
                id: id.to_string(),
                state: state.to_string(),
                attempts: i.get("attempts").and_then(Value::as_u64).unwrap_or(0),
                evidence: i.get("evidence").cloned().unwrap_or(Value::Null),
            })
        })
        .collect()
}
