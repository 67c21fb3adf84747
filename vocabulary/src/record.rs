//! What a service records: an [`Effect`] in its ledger when something really happens, and a
//! [`JournalEntry`] for every request it sees. The fakes write them, the control API and the
//! harness read them, and `results.json` carries them (`observed.ledgers`,
//! `observed.journals`), so their field names, order and defaults are public.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One effect that really happened: the ground truth a checker reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Effect {
    /// Position in this service's ledger, from 1.
    pub seq: u64,
    /// Service time of the commit.
    pub at_ms: u64,
    /// What happened, e.g. `refund.created` (see [`crate::ActionSpec::effect_kind`]).
    pub kind: String,
    /// The id of the object the effect created or changed.
    pub object_id: String,
    /// The parameters the effect was executed with.
    #[schemars(schema_with = "crate::schema::effect_params")]
    pub params: serde_json::Value,
    /// The `Idempotency-Key` of the request that made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The fencing token the request carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
    /// The request that caused it.
    pub request_id: String,
}

/// The effect parameter that marks an effect the service made again by itself, such as a
/// message the provider's own retry delivered a second time: `params.provider_redelivery =
/// true`. Such an effect is the provider's doing, never a duplicate by the executor.
pub const PROVIDER_REDELIVERY: &str = "provider_redelivery";

/// The name under which a caller tags a write with the id of the intent it carries out: a
/// refund's or a workspace's `metadata[twice_intent]`, an object's `x-amz-meta-twice-intent`
/// (kept as `metadata["twice-intent"]`), a message's `X-Twice-Intent` header or its Resend tag
/// `twice_intent`. The real APIs all let a caller tag a write; a checker that finds the tag in
/// the ledger knows whose effect it is without guessing from the parameters.
pub const INTENT_TAG: &str = "twice_intent";

/// [`INTENT_TAG`] as a header name, and as S3 user metadata is named after its header.
const INTENT_TAG_HEADER: &str = "x-twice-intent";
const INTENT_TAG_METADATA: &str = "twice-intent";

impl Effect {
    /// Whether the service made this effect again by itself ([`PROVIDER_REDELIVERY`]).
    pub fn by_provider(&self) -> bool {
        self.params.get(PROVIDER_REDELIVERY).and_then(serde_json::Value::as_bool) == Some(true)
    }

    /// The intent id the caller tagged this effect's write with ([`INTENT_TAG`]), wherever the
    /// service keeps a caller's tags in the effect: `params.metadata` (payments, workspaces,
    /// files), `params.headers` (any case) or `params.tags` (`[{name, value}]`, messages).
    /// `None` for an untagged write or an empty tag.
    pub fn intent_tag(&self) -> Option<&str> {
        use serde_json::Value;
        let params = &self.params;
        let metadata = params.get("metadata").and_then(Value::as_object);
        let in_metadata = metadata
            .and_then(|m| m.get(INTENT_TAG).or_else(|| m.get(INTENT_TAG_METADATA)))
            .and_then(Value::as_str);
        let in_headers = || {
            params.get("headers").and_then(Value::as_object).and_then(|headers| {
                headers
                    .iter()
                    .find(|(name, _)| name.eq_ignore_ascii_case(INTENT_TAG_HEADER))
                    .and_then(|(_, value)| value.as_str())
            })
        };
        let in_tags = || {
            params.get("tags").and_then(Value::as_array).and_then(|tags| {
                tags.iter()
                    .find(|tag| tag.get("name").and_then(Value::as_str) == Some(INTENT_TAG))
                    .and_then(|tag| tag.get("value").and_then(Value::as_str))
            })
        };
        in_metadata.or_else(in_headers).or_else(in_tags).map(str::trim).filter(|tag| !tag.is_empty())
    }
}

/// A fault that fired on a request, as journals name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Applied {
    /// The rule's id (`rule-N` when the rule had none).
    pub rule: String,
    /// The fault's kind, e.g. `drop_after_commit`.
    pub fault: String,
}

/// One request as the service saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JournalEntry {
    /// Position in this service's journal, from 1.
    pub seq: u64,
    /// Service time at which the request arrived.
    pub at_ms: u64,
    /// The HTTP method.
    pub method: String,
    /// The request's path, without the query.
    pub path: String,
    /// The `Idempotency-Key` the request carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The id the service gave the request.
    pub request_id: String,
    /// Who sent it: the worker life whose connection carried it (`w1#2`), when the transport
    /// labels requests. The harness sets it from the connection, never from the request, so
    /// that an executor cannot claim another worker's write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// Faults that fired on this request.
    pub faults: Vec<Applied>,
    /// `pending` until the request ends, then `answered`, `reset`, `closed` or `held`.
    pub outcome: String,
    /// The HTTP status answered, when there was an answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The answer was a stored idempotent result.
    pub replayed: bool,
    /// Service time at which the request ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<u64>,
    /// A write refused with a status that needs a decision ([`needs_decision`]): the
    /// parameters it asked for, named as in the effect it would have made (a refund's
    /// `payment_intent` and `amount`, a workspace's `external_id` and `name`, an object's
    /// `bucket`, `key` and `body`, a transfer's `to` and `value`), as far as the service could
    /// read them. What tells a checker which intent the service refused; absent on every
    /// other request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::effect_params")]
    pub params: Option<serde_json::Value>,
}

/// The statuses of a refusal that a person must act on before the intent can go on: 400 and
/// 422 (the input is invalid), 401 (the credentials are not accepted) and 403 (they lack a
/// permission). Sending the same request again gets the same answer, so an executor does not
/// retry it; unlike 429 and 503, which say "not now".
pub const DECISION_STATUSES: [u16; 4] = [400, 401, 403, 422];

/// Whether an answer with `status` refuses a write until a person decides
/// ([`DECISION_STATUSES`]).
pub fn needs_decision(status: u16) -> bool {
    DECISION_STATUSES.contains(&status)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn effect(params: serde_json::Value) -> Effect {
        Effect {
            seq: 1,
            at_ms: 0,
            kind: "k".into(),
            object_id: "o".into(),
            params,
            idempotency_key: None,
            fencing_token: None,
            request_id: "req_1".into(),
        }
    }

    /// Each service keeps a caller's tags where its API puts them; the tag is read from each.
    #[test]
    fn an_intent_tag_is_read_wherever_a_service_keeps_it() {
        let cases = [
            (json!({"metadata": {"twice_intent": "r1"}}), Some("r1")),
            (json!({"metadata": {"twice-intent": "f1"}}), Some("f1")),
            (json!({"headers": {"X-Twice-Intent": "m1"}}), Some("m1")),
            (json!({"headers": {"x-twice-intent": "m2"}}), Some("m2")),
            (
                json!({"tags": [{"name": "kind", "value": "x"}, {"name": "twice_intent", "value": "m3"}]}),
                Some("m3"),
            ),
            (json!({"metadata": {"twice_intent": "  "}}), None),
            (json!({"metadata": {"order": "o-1"}}), None),
            (json!({"metadata": {"twice_intent": 7}}), None),
            (json!({"to": "ada@example.com"}), None),
        ];
        for (params, want) in cases {
            assert_eq!(effect(params.clone()).intent_tag(), want, "{params}");
        }
    }
}
