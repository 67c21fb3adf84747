//! An application's claims about a scenario's intents (`POST /__twice/check`, `twice check
//! --claims`), read strictly: a claim that is malformed, names an intent the scenario does not
//! have, or contradicts the intent's action, parameters or lineage is refused with the field
//! and the value, never judged.

use std::collections::{BTreeMap, BTreeSet};

use results::Claim;
use scenarios::Scenario;
use serde::Deserialize;
use serde_json::Value;
use vocabulary::State;

/// The body: `{"claims": [...]}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClaimsDoc {
    pub claims: Vec<AppClaim>,
}

/// What the application says of one intent at the end of the test.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AppClaim {
    /// The scenario intent's id.
    pub id: String,
    /// Its action (`payments.refund`, ...): must be the scenario intent's.
    pub action: String,
    /// Its parameters, if the application reports them: must be the scenario intent's.
    #[serde(default)]
    pub params: Option<Value>,
    /// `recorded`, `blocked`, `submitted`, `confirmed`, `failed`, `unknown` or `escalated`.
    pub state: String,
    /// Sends the application made for it, if it counts them.
    #[serde(default)]
    pub attempts: Option<u64>,
    /// Keys, external ids, transaction hashes, the last error: whatever the application
    /// knows, as in the protocol's `status` (`docs/protocol.md`).
    #[serde(default)]
    pub evidence: Option<Value>,
    /// The intent it replaces, where there is lineage: must be the scenario intent's.
    #[serde(default)]
    pub replaces: Option<String>,
}

/// Claims as the checker takes them.
#[derive(Debug, Default)]
pub(crate) struct Parsed {
    /// Every claimed intent counts as recorded by the application.
    pub acknowledged: Vec<String>,
    /// The scenario's intents the claims leave out, with why.
    pub unacknowledged: BTreeMap<String, String>,
    pub claims: Vec<Claim>,
}

/// Reads `body` against `scenario`; the error names the field and the value.
pub(crate) fn parse(body: &[u8], scenario: &Scenario) -> Result<Parsed, String> {
    let doc: ClaimsDoc = serde_json::from_slice(body).map_err(|e| {
        format!(
            "claims: {e}; expected {{\"claims\": [{{\"id\": ..., \"action\": ..., \"state\": ..., \"params\": ..., \
             \"attempts\": ..., \"evidence\": {{...}}, \"replaces\": ...}}]}} (see docs/byo.md)"
        )
    })?;
    let intents: BTreeMap<&str, &scenarios::IntentSpec> =
        scenario.intents.iter().map(|i| (i.id.as_str(), i)).collect();
    let mut seen = BTreeSet::new();
    let mut parsed = Parsed::default();
    for (n, claim) in doc.claims.into_iter().enumerate() {
        let field = |name: &str| format!("claims[{n}].{name}");
        let Some(spec) = intents.get(claim.id.as_str()) else {
            let ids: Vec<&str> = intents.keys().copied().collect();
            return Err(format!(
                "{}: \"{}\" is not an intent of scenario {} (its intents: {})",
                field("id"),
                claim.id,
                scenario.name,
                ids.join(", ")
            ));
        };
        if !seen.insert(claim.id.clone()) {
            return Err(format!("{}: \"{}\" is claimed twice", field("id"), claim.id));
        }
        if vocabulary::action(&claim.action).is_none() {
            let names: Vec<&str> = vocabulary::ACTIONS.iter().map(|a| a.name).collect();
            return Err(format!(
                "{}: \"{}\" is not an action (one of {})",
                field("action"),
                claim.action,
                names.join(", ")
            ));
        }
        if claim.action != spec.action {
            return Err(format!(
                "{}: \"{}\", but intent {} is {}",
                field("action"),
                claim.action,
                spec.id,
                spec.action
            ));
        }
        if let Some(params) = &claim.params
            && let Some(problem) = differs(params, &spec.params)
        {
            return Err(format!(
                "{}: {problem} (intent {} of scenario {})",
                field("params"),
                spec.id,
                scenario.name
            ));
        }
        if claim.replaces.is_some() && claim.replaces != spec.replaces {
            return Err(format!(
                "{}: {:?}, but intent {} replaces {}",
                field("replaces"),
                claim.replaces.as_deref().unwrap_or_default(),
                spec.id,
                spec.replaces.as_deref().map(|r| format!("\"{r}\"")).unwrap_or_else(|| "nothing".into())
            ));
        }
        if State::parse(&claim.state).is_none() {
            return Err(format!(
                "{}: \"{}\" is not a state (one of {})",
                field("state"),
                claim.state,
                State::NAMES.join(", ")
            ));
        }
        let evidence = claim.evidence.unwrap_or(Value::Object(Default::default()));
        if !evidence.is_object() {
            return Err(format!("{}: expected an object, got {evidence}", field("evidence")));
        }
        parsed.acknowledged.push(claim.id.clone());
        parsed.claims.push(Claim {
            id: claim.id,
            state: claim.state,
            attempts: claim.attempts.unwrap_or(0),
            evidence,
        });
    }
    for spec in &scenario.intents {
        if !seen.contains(&spec.id) {
            parsed.unacknowledged.insert(spec.id.clone(), "the application's claims do not name it".into());
        }
    }
    Ok(parsed)
}

/// How `claimed` differs from `authorised`: the first field, with both values.
fn differs(claimed: &Value, authorised: &Value) -> Option<String> {
    let (Some(claimed), Some(authorised)) = (claimed.as_object(), authorised.as_object()) else {
        return (claimed != authorised).then(|| format!("{claimed}, but the scenario's are {authorised}"));
    };
    for (name, want) in authorised {
        match claimed.get(name) {
            None => return Some(format!("no \"{name}\" (the scenario's is {want})")),
            Some(got) if got != want => {
                return Some(format!("\"{name}\" is {got}, the scenario's is {want}"));
            }
            Some(_) => {}
        }
    }
    claimed
        .keys()
        .find(|name| !authorised.contains_key(*name))
        .map(|name| format!("\"{name}\" is not a parameter of the scenario's intent"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario() -> Scenario {
        scenarios::catalog::find("lost_refund_reply").expect("in the catalog").expect("loads")
    }

    fn claim(extra: &str) -> Vec<u8> {
        format!(r#"{{"claims": [{{"id": "refund-4812", "action": "payments.refund", "state": "confirmed"{extra}}}]}}"#)
            .into_bytes()
    }

    #[test]
    fn a_claim_is_read_and_the_intents_it_leaves_out_are_listed() {
        let parsed = parse(&claim(r#", "attempts": 2, "evidence": {"key": "k1"}"#), &scenario()).unwrap();
        assert_eq!(parsed.acknowledged, ["refund-4812"]);
        assert_eq!(parsed.claims[0].attempts, 2);
        assert_eq!(parsed.claims[0].evidence["key"], "k1");
    }

    #[test]
    fn each_bad_claim_names_its_field_and_value() {
        let s = scenario();
        let error = |body: &[u8]| parse(body, &s).expect_err("refused");
        assert!(error(&claim(r#", "state": "done""#)).contains("duplicate field"), "serde catches it");
        let bad_state =
            br#"{"claims": [{"id": "refund-4812", "action": "payments.refund", "state": "done"}]}"#;
        assert!(error(bad_state).starts_with("claims[0].state: \"done\" is not a state"));
        let unknown = br#"{"claims": [{"id": "zz", "action": "payments.refund", "state": "failed"}]}"#;
        assert!(
            error(unknown).starts_with("claims[0].id: \"zz\" is not an intent of scenario lost_refund_reply")
        );
        let action =
            br#"{"claims": [{"id": "refund-4812", "action": "payments.charge", "state": "failed"}]}"#;
        assert!(error(action).starts_with("claims[0].action: \"payments.charge\" is not an action"));
        let params = claim(r#", "params": {"payment_intent": "pi_9", "amount": 1}"#);
        assert!(error(&params).starts_with("claims[0].params: "), "{}", error(&params));
        assert!(error(&claim(r#", "colour": "red""#)).contains("unknown field `colour`"));
        assert!(error(&claim(r#", "evidence": 3"#)).starts_with("claims[0].evidence: expected an object"));
        let twice = br#"{"claims": [{"id": "refund-4812", "action": "payments.refund", "state": "failed"},
                                     {"id": "refund-4812", "action": "payments.refund", "state": "failed"}]}"#;
        assert!(error(twice).starts_with("claims[1].id: \"refund-4812\" is claimed twice"));
        assert!(error(b"{").starts_with("claims: EOF while parsing"));
    }
}
