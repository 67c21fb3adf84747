//! Intents, their states and the actions they carry.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use vocabulary::action::{self, ActionSpec};
use vocabulary::workflow::{self, ParamRef};

/// Where an intent is in its life (`docs/protocol.md` §7): the one state type the harness,
/// the scenarios and the reports read too.
use vocabulary::State;

/// What the executor knows about an intent's effect, for people and checkers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// The idempotency key in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Keys used before a rotation (only after a negative lookup became authoritative).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_keys: Vec<String>,
    /// The id the service gave the effect (refund id, workspace id, message id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Why the intent is in its state, when that is not obvious.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Executor time of the first and the latest send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_sent_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sent_ms: Option<u64>,
    /// `files.put`: the condition every send carries, from what the object was before the
    /// first send (read then, and recorded before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precondition: Option<Precondition>,
    /// `chain.transfer`: the hash of the signed transaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_hash: Option<String>,
    /// `chain.transfer`: the signed transaction (EIP-2718, `0x` hex), recorded before its
    /// first broadcast: every broadcast sends these bytes, never a new signature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_tx: Option<String>,
    /// `chain.transfer`: the nonce the transaction was signed with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<u64>,
    /// `chain.transfer`: the sending account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// A step of a workflow: the value of each referenced parameter, resolved once from the
    /// recorded results of the intents it comes after and recorded no later than the step's
    /// first `submitted`. Every send of the step, by any worker after any crash, uses these
    /// values; they are never resolved again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resolved: BTreeMap<String, String>,
    /// The service refused the intent with a status a person must act on (401, 403, 400,
    /// 422): the first such refusal, kept whatever later lookups write into `last_error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// On an escalated intent: whether a send of it may have taken effect without being
    /// proven absent, so that a person who goes on (proposes it again, fixed) could make the
    /// effect twice. `false` only where no send of it can have taken effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub could_duplicate: Option<bool>,
}

/// A refusal that needs a person's decision: fix a permission or the input, then propose
/// again. Resending the same request would get the same answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// The HTTP status: 400, 401, 403 or 422.
    pub status: u16,
    /// The service's own code and message (`amount_too_large: Refund amount (8000) is
    /// greater than ...`, `AccessDenied: Access Denied`).
    pub error: String,
}

/// What a conditional write requires of the object it writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precondition {
    /// `If-None-Match: *`: the object did not exist, and must not.
    IfNoneMatch,
    /// `If-Match: <etag>`: the object was this version (a quoted ETag), and must still be.
    IfMatch(String),
}

impl Evidence {
    /// Whether a signed transaction holds a nonce for this intent. Such an intent is never
    /// given up for want of attempts: every later transfer of the account waits behind its
    /// nonce, so abandoning it would leave them stuck in the pool for good. Its bytes can be
    /// broadcast again any number of times and still land at most once.
    pub fn holds_a_nonce(&self) -> bool {
        self.raw_tx.is_some()
    }

    /// Records a signed transfer: what every broadcast of it sends.
    pub fn record_signed(&mut self, signed: &crate::signing::SignedTransfer) {
        self.tx_hash = Some(signed.hash.clone());
        self.raw_tx = Some(signed.raw.clone());
        self.nonce = Some(signed.nonce);
        self.from = Some(signed.from.clone());
    }
}

/// An action the executor can take in the world, with checked parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `payments.refund {payment_intent, amount}`
    Refund { payment_intent: String, amount: u64 },
    /// `workspaces.create {external_id, name}`
    CreateWorkspace { external_id: String, name: String },
    /// `files.put {bucket, key, body}`: the object `bucket/key` holds `body` afterwards.
    PutObject { bucket: String, key: String, body: String },
    /// `chain.transfer {to, value}`: `value` wei from the chain account to `to`.
    Transfer { to: String, value_wei: u128 },
    /// `messages.send {to, subject, body}`: an email with the plain-text `body` in `to`'s inbox.
    SendMessage { to: String, subject: String, body: String },
}

/// Every action name the executor supports: every row of the action table, in its order.
pub const ACTIONS: &[&str] = &vocabulary::action::ACTION_NAMES;

/// Why an action was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    #[error("action \"{0}\" is not supported; supported: {list}", list = ACTIONS.join(", "))]
    Unsupported(String),
    #[error("{action}: {problem}")]
    Malformed { action: String, problem: String },
}

impl Action {
    /// Checks `params` for `action`: only the parameters its row of the action table names,
    /// each of the value this executor can carry out.
    pub fn parse(action: &str, params: &Value) -> Result<Action, ActionError> {
        let malformed = |problem: String| ActionError::Malformed { action: action.to_string(), problem };
        let Value::Object(map) = params else {
            return Err(malformed("params must be a JSON object".into()));
        };
        let Some(spec) = vocabulary::action(action) else {
            return Err(ActionError::Unsupported(action.to_string()));
        };
        let text = |name: &str| -> Result<String, ActionError> {
            match map.get(name) {
                Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
                _ => Err(malformed(format!("\"{name}\" must be a non-empty string"))),
            }
        };
        if let Some(extra) = map.keys().find(|k| spec.param(k).is_none()) {
            return Err(malformed(format!("unknown parameter \"{extra}\"")));
        }
        // One arm per action this executor carries out (each a module of `services`); a row
        // of the table without one is unsupported here.
        match spec.name {
            "payments.refund" => {
                let amount = match map.get("amount") {
                    Some(Value::Number(n)) => n.as_u64().filter(|a| *a > 0),
                    _ => None,
                }
                .ok_or_else(|| malformed("\"amount\" must be a positive integer".into()))?;
                Ok(Action::Refund { payment_intent: text("payment_intent")?, amount })
            }
            "workspaces.create" => {
                Ok(Action::CreateWorkspace { external_id: text("external_id")?, name: text("name")? })
            }
            "files.put" => {
                let bucket = text("bucket")?;
                let key = text("key")?;
                // Both go into the request's path as they are: refuse what would need
                // escaping rather than guess how a service decodes it.
                let path_safe =
                    |s: &str| s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!-_.*'()/".contains(&b));
                if !path_safe(&bucket) || bucket.contains('/') {
                    return Err(malformed("\"bucket\" must be letters, digits, '.', '-' and '_'".into()));
                }
                if !path_safe(&key) || key.starts_with('/') {
                    return Err(malformed(
                        "\"key\" must be letters, digits and ! - _ . * ' ( ) /, not starting with '/'".into(),
                    ));
                }
                Ok(Action::PutObject { bucket, key, body: text("body")? })
            }
            "chain.transfer" => {
                let to = text("to")?;
                let address = to.len() == 42
                    && to.starts_with("0x")
                    && to[2..].bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
                if !address {
                    return Err(malformed("\"to\" must be 0x and 40 lowercase hex digits".into()));
                }
                let value = text("value")?;
                let value_wei = Some(value.as_str())
                    .filter(|v| v.bytes().all(|b| b.is_ascii_digit()) && !v.starts_with('0'))
                    .and_then(|v| v.parse::<u128>().ok())
                    .ok_or_else(|| malformed("\"value\" must be a positive decimal string of wei".into()))?;
                Ok(Action::Transfer { to, value_wei })
            }
            "messages.send" => {
                let to = text("to")?;
                // The address goes into the mailbox's URL path as it is, and is compared with
                // the inbox's as text: only the plain lowercase form the action table allows.
                if !vocabulary::is_email_address(&to) {
                    return Err(malformed(
                        "\"to\" must be an email address in lowercase letters, digits and . _ + -".into(),
                    ));
                }
                Ok(Action::SendMessage { to, subject: text("subject")?, body: text("body")? })
            }
            other => Err(ActionError::Unsupported(other.to_string())),
        }
    }

    /// The action's row of the action table.
    pub fn spec(&self) -> &'static ActionSpec {
        match self {
            Action::Refund { .. } => &action::PAYMENTS_REFUND,
            Action::CreateWorkspace { .. } => &action::WORKSPACES_CREATE,
            Action::PutObject { .. } => &action::FILES_PUT,
            Action::Transfer { .. } => &action::CHAIN_TRANSFER,
            Action::SendMessage { .. } => &action::MESSAGES_SEND,
        }
    }

    pub fn name(&self) -> &'static str {
        self.spec().name
    }

    /// The service the action is carried out by.
    pub fn service(&self) -> &'static str {
        self.spec().service
    }

    /// A secret the action needs from `init`, if any.
    pub fn secret(&self) -> Option<&'static str> {
        self.spec().secret
    }

    /// The parameters as JSON, in canonical form.
    pub fn params(&self) -> Value {
        match self {
            Action::Refund { payment_intent, amount } => {
                json!({"payment_intent": payment_intent, "amount": amount})
            }
            Action::CreateWorkspace { external_id, name } => {
                json!({"external_id": external_id, "name": name})
            }
            Action::PutObject { bucket, key, body } => json!({"bucket": bucket, "key": key, "body": body}),
            // Wei outgrow JSON's safe integers: a decimal string, as in the proposal.
            Action::Transfer { to, value_wei } => json!({"to": to, "value": value_wei.to_string()}),
            Action::SendMessage { to, subject, body } => json!({"to": to, "subject": subject, "body": body}),
        }
    }
}

/// Canonical JSON (RFC 8785) for the values intents carry: objects with sorted keys, no
/// insignificant white space, strings escaped as RFC 8785 says, integers only. Floats are
/// refused, since no action takes one and their canonical form is the hard part of the RFC.
pub fn canonical_json(value: &Value) -> Result<String, String> {
    let mut out = String::new();
    write_canonical(value, &mut out)?;
    Ok(out)
}

fn write_canonical(value: &Value, out: &mut String) -> Result<(), String> {
    match value {
        Value::Null | Value::Bool(_) | Value::String(_) => out.push_str(&value.to_string()),
        Value::Number(n) => {
            if n.is_f64() {
                return Err(format!("{n}: intents carry integers, not floats"));
            }
            out.push_str(&n.to_string());
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out)?;
            }
            out.push(']');
        }
        Value::Object(map) => {
            // RFC 8785 sorts by UTF-16 code units; for the keys actions use (ASCII) that is
            // the same as sorting by bytes.
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*key).clone()).to_string());
                out.push(':');
                write_canonical(&map[key.as_str()], out)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// SHA-256 of the canonical text, in lowercase hex.
pub fn payload_hash(canonical: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(canonical.as_bytes());
    // Checked at every read of a row (each pass), so without a `format!` per byte.
    let mut hex = String::with_capacity(digest.len() * 2);
    for b in digest {
        hex.push(char::from(HEX[usize::from(b >> 4)]));
        hex.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    hex
}

/// An intent as the log holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    pub id: String,
    pub action: String,
    /// Canonical JSON text of the parameters, exactly as recorded.
    pub params: String,
    pub params_hash: String,
    pub key: String,
    pub state: State,
    pub attempts: u32,
    pub replaces: Option<String>,
    /// The intents this one comes after (a step of a workflow): it is sent only once every
    /// one of them is confirmed, and its parameter references read their results.
    pub after: Vec<String>,
    pub evidence: Evidence,
    /// An earlier attempt may have taken effect (its answer was lost or ambiguous), so a
    /// definite rejection of a later attempt does not prove that nothing happened.
    pub maybe_executed: bool,
    pub lease_owner: Option<String>,
    pub lease_epoch: u64,
    pub lease_until_ms: u64,
    pub version: u64,
    pub created_ms: u64,
    pub updated_ms: u64,
    /// When the current key was first sent (for the retention window).
    pub key_first_sent_ms: Option<u64>,
    pub last_sent_ms: Option<u64>,
}

impl Intent {
    /// The authorised parameters (with their references, if any), checked against the
    /// payload hash: a mismatch means the stored row was changed behind the executor's back,
    /// and the intent must not be executed.
    pub fn payload(&self) -> Result<Value, String> {
        if payload_hash(&payload_text(&self.params, &self.after)) != self.params_hash {
            return Err("the stored payload does not match its hash".into());
        }
        serde_json::from_str(&self.params).map_err(|e| format!("stored payload: {e}"))
    }

    /// The parameter references of the authorised parameters, by parameter name.
    pub fn references(&self) -> Result<Vec<(String, ParamRef)>, String> {
        workflow::references(&self.payload()?)
    }

    /// The action to carry out: the authorised parameters, each reference replaced by its
    /// resolved value (`evidence.resolved`). An intent whose references are not resolved yet
    /// has no action.
    pub fn action(&self) -> Result<Action, String> {
        self.action_from(&self.payload()?)
    }

    /// [`Intent::action`] from `payload`, what [`Intent::payload`] already gave for this row:
    /// a pass checks each row's payload once and then builds its action, rather than hashing
    /// and parsing the same text again.
    pub fn action_from(&self, payload: &Value) -> Result<Action, String> {
        let params = with_resolved(payload, &self.evidence.resolved)?;
        Action::parse(&self.action, &params).map_err(|e| e.to_string())
    }

    /// The view a caller gets (`status` in the protocol).
    pub fn view(&self) -> Value {
        let params: Value = serde_json::from_str(&self.params).unwrap_or(Value::Null);
        let mut v = Map::new();
        v.insert("id".into(), json!(self.id));
        v.insert("action".into(), json!(self.action));
        v.insert("params".into(), params);
        v.insert("state".into(), json!(self.state));
        v.insert("attempts".into(), json!(self.attempts));
        if let Some(r) = &self.replaces {
            v.insert("replaces".into(), json!(r));
        }
        if !self.after.is_empty() {
            v.insert("after".into(), json!(self.after));
        }
        v.insert("evidence".into(), serde_json::to_value(&self.evidence).unwrap_or(Value::Null));
        Value::Object(v)
    }
}

/// The text the payload hash covers: the canonical parameters, and for a step of a workflow
/// its `after` too, so that proposing an id again compares everything that was authorised.
/// Without `after` it is the parameters alone, as before workflows existed.
pub fn payload_text(params: &str, after: &[String]) -> String {
    if after.is_empty() {
        return params.to_string();
    }
    // Canonical JSON of {"after": [...], "params": {...}}: the keys are already in order, and
    // `params` is canonical text.
    let after = canonical_json(&json!(after)).unwrap_or_default();
    format!("{{\"after\":{after},\"params\":{params}}}")
}

/// `params` with every reference replaced by its value in `resolved`; an error names the first
/// reference that has none.
pub fn with_resolved(params: &Value, resolved: &BTreeMap<String, String>) -> Result<Value, String> {
    let mut out = params.clone();
    for (name, reference) in workflow::references(params)? {
        let value = resolved.get(&name).ok_or_else(|| {
            format!("parameter \"{name}\" reads from \"{}\" and is not resolved yet", reference.from)
        })?;
        if let Value::Object(map) = &mut out {
            map.insert(name, Value::String(value.clone()));
        }
    }
    Ok(out)
}

/// `params` with every reference replaced by a valid value of its parameter's kind (an
/// unknown parameter by a string), so that everything but the references can be checked
/// before they are resolved.
pub fn with_placeholders(action: &str, params: &Value) -> Result<Value, String> {
    let mut out = params.clone();
    let spec = vocabulary::action(action);
    for (name, _) in workflow::references(params)? {
        let example =
            spec.and_then(|s| s.param(&name)).map(|p| p.kind.example()).unwrap_or_else(|| Value::from("x"));
        if let Value::Object(map) = &mut out {
            map.insert(name, example);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_sorts_keys_and_drops_space() {
        let cases = [
            (json!({"b": 1, "a": "x"}), r#"{"a":"x","b":1}"#),
            (json!({"a": [3, {"z": null, "y": true}]}), r#"{"a":[3,{"y":true,"z":null}]}"#),
            (json!("é\n\u{1f}"), "\"é\\n\\u001f\""),
        ];
        for (value, want) in cases {
            assert_eq!(canonical_json(&value).unwrap(), want);
        }
        assert!(canonical_json(&json!({"a": 1.5})).is_err());
    }

    #[test]
    fn actions_check_their_parameters() {
        let ok = Action::parse("payments.refund", &json!({"amount": 10, "payment_intent": "pi_1"})).unwrap();
        assert_eq!(ok, Action::Refund { payment_intent: "pi_1".into(), amount: 10 });
        let to = format!("0x{}", "b".repeat(40));
        let transfer =
            Action::parse("chain.transfer", &json!({"to": to, "value": "1000000000000000000000"})).unwrap();
        assert_eq!(transfer, Action::Transfer { to: to.clone(), value_wei: 1_000 * 10u128.pow(18) });
        assert_eq!(transfer.params(), json!({"to": to, "value": "1000000000000000000000"}));
        let put = json!({"bucket": "reports", "key": "q3/summary.csv", "body": "v2"});
        assert_eq!(Action::parse("files.put", &put).unwrap().params(), put);
        let cases = [
            ("payments.refund", json!({"amount": 0, "payment_intent": "pi"}), "positive integer"),
            ("payments.refund", json!({"amount": 1}), "payment_intent"),
            ("payments.refund", json!({"amount": 1, "payment_intent": "p", "x": 1}), "unknown parameter"),
            ("workspaces.create", json!({"external_id": "e"}), "name"),
            ("workspaces.create", json!([]), "JSON object"),
            ("files.put", json!({"bucket": "b", "key": "/k", "body": "x"}), "not starting with '/'"),
            ("files.put", json!({"bucket": "a b", "key": "k", "body": "x"}), "\"bucket\""),
            ("files.put", json!({"bucket": "b", "key": "k"}), "\"body\""),
            ("chain.transfer", json!({"to": "0xAB", "value": "1"}), "40 lowercase hex"),
            ("chain.transfer", json!({"to": format!("0x{}", "b".repeat(40)), "value": 1}), "\"value\""),
            ("chain.transfer", json!({"to": format!("0x{}", "b".repeat(40)), "value": "01"}), "decimal"),
            ("messages.send", json!({"to": "Ada@example.com", "subject": "s", "body": "b"}), "email address"),
            ("messages.send", json!({"to": "ada@example.com", "subject": "", "body": "b"}), "\"subject\""),
            ("messages.send", json!({"to": "ada@example.com", "subject": "s"}), "\"body\""),
            ("mail.send", json!({}), "not supported"),
        ];
        for (action, params, says) in cases {
            let err = Action::parse(action, &params).unwrap_err().to_string();
            assert!(err.contains(says), "{action} {params}: {err}");
        }
    }

    /// A step's payload hash covers `after`; without `after` it is the hash of the
    /// parameters alone, as it was before workflows (so older logs still verify).
    #[test]
    fn the_payload_hash_covers_after_and_nothing_changes_without_it() {
        let params = r#"{"amount":1,"payment_intent":"pi_1"}"#;
        assert_eq!(payload_text(params, &[]), params);
        let after = ["create".to_string(), "draft".to_string()];
        let text = payload_text(params, &after);
        assert_eq!(text, r#"{"after":["create","draft"],"params":{"amount":1,"payment_intent":"pi_1"}}"#);
        assert_eq!(canonical_json(&serde_json::from_str(&text).unwrap()).unwrap(), text, "canonical");
        let reordered = ["draft".to_string(), "create".to_string()];
        assert_ne!(payload_hash(&text), payload_hash(&payload_text(params, &reordered)));
    }

    #[test]
    fn a_step_has_an_action_only_once_its_references_are_resolved() {
        let params = json!({"bucket": "reports", "key": "welcome.txt",
                            "body": {"from": "create", "field": "id", "format": "Welcome to {}"}});
        let canonical = canonical_json(&params).unwrap();
        let after = vec!["create".to_string()];
        let mut step = Intent {
            id: "doc".into(),
            action: "files.put".into(),
            params_hash: payload_hash(&payload_text(&canonical, &after)),
            params: canonical,
            key: "k".into(),
            state: State::Recorded,
            attempts: 0,
            replaces: None,
            after,
            evidence: Evidence::default(),
            maybe_executed: false,
            lease_owner: None,
            lease_epoch: 0,
            lease_until_ms: 0,
            version: 0,
            created_ms: 0,
            updated_ms: 0,
            key_first_sent_ms: None,
            last_sent_ms: None,
        };
        let waiting = step.action().unwrap_err();
        assert!(waiting.contains("\"body\" reads from \"create\" and is not resolved yet"), "{waiting}");
        step.evidence.resolved.insert("body".into(), "Welcome to ws_1".into());
        let action = step.action().unwrap();
        let body = "Welcome to ws_1".to_string();
        assert_eq!(action, Action::PutObject { bucket: "reports".into(), key: "welcome.txt".into(), body });
        // The view keeps the authorised form, and shows `after` and what was resolved.
        let view = step.view();
        assert_eq!(view["params"]["body"]["from"], "create");
        assert_eq!(view["after"], json!(["create"]));
        assert_eq!(view["evidence"]["resolved"], json!({"body": "Welcome to ws_1"}));
        // `after` is part of what the hash covers: a row whose `after` changed is not executed.
        step.after.push("other".into());
        assert_eq!(step.action().unwrap_err(), "the stored payload does not match its hash");
    }

    #[test]
    fn placeholders_stand_for_references_of_each_parameter_kind() {
        let reference = json!({"from": "a", "field": "id"});
        let params = json!({"payment_intent": "pi_1", "amount": reference, "extra": reference});
        let placed = with_placeholders("payments.refund", &params).unwrap();
        assert_eq!(placed, json!({"payment_intent": "pi_1", "amount": 1, "extra": "x"}));
        let err = Action::parse("payments.refund", &placed).unwrap_err().to_string();
        assert!(err.contains("unknown parameter \"extra\""), "{err}");
        let bad = with_placeholders("files.put", &json!({"body": {"from": "a"}})).unwrap_err();
        assert!(bad.contains("needs \"field\""), "{bad}");
    }

    #[test]
    fn states_round_trip_through_text() {
        for s in State::ALL {
            assert_eq!(State::parse(s.as_str()), Some(s));
        }
    }

    #[test]
    fn every_row_of_the_action_table_is_carried_out_and_names_itself() {
        for spec in vocabulary::ACTIONS {
            let params: Map<String, Value> =
                spec.params.iter().map(|p| (p.name.to_string(), p.kind.example())).collect();
            let parsed = Action::parse(spec.name, &Value::Object(params)).unwrap();
            assert_eq!(parsed.spec(), spec);
        }
    }
}
