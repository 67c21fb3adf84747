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

impl Effect {
    /// Whether the service made this effect again by itself ([`PROVIDER_REDELIVERY`]).
    pub fn by_provider(&self) -> bool {
        self.params.get(PROVIDER_REDELIVERY).and_then(serde_json::Value::as_bool) == Some(true)
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
