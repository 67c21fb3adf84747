//! The hand-written parts of `results.json`'s JSON Schema that belong to this crate's types:
//! a claim's free-form `evidence` and a passed intent's row. The rest is derived, and the
//! whole schema is put together where the file form is (`reports::schema`).

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::json;

use crate::IntentBrief;

/// A claim's `evidence`: what the executor sent, as it sent it. The protocol's fields
/// (docs/protocol.md §6) are described, each `null` too (an executor may write an absent
/// field as null); an executor may add others, and one that breaks the protocol may send
/// something that is not an object at all (`null` when it sent none).
pub(crate) fn claim_evidence(_: &mut SchemaGenerator) -> Schema {
    let text = |description: &str| json!({ "type": ["string", "null"], "description": description });
    json_schema!({
        "description": "What the executor knows about the intent, as it sent it (docs/protocol.md §6): every field optional; other fields are the executor's own. Not an object only when an executor broke the protocol (null: it sent none).",
        "anyOf": [
            {
                "type": "object",
                "properties": {
                    "key": text("The idempotency key in use."),
                    "previous_keys": {
                        "type": ["array", "null"],
                        "items": { "type": "string" },
                        "description": "Keys used before a rotation."
                    },
                    "external_id": text("The id the service gave the effect."),
                    "tx_hash": text("chain.transfer: the hash of the signed transaction."),
                    "precondition": {
                        "description": "files.put: \"if_none_match\" or {\"if_match\": \"<etag>\"}, the condition every send carries.",
                        "anyOf": [
                            { "type": ["string", "null"] },
                            { "type": "object", "properties": { "if_match": { "type": "string" } } }
                        ]
                    },
                    "last_error": text("The last error met."),
                    "decision": {
                        "type": ["object", "null"],
                        "description": "The first refusal a person must act on (400, 401, 403, 422).",
                        "properties": {
                            "status": { "type": "integer" },
                            "error": { "type": "string" }
                        }
                    },
                    "could_duplicate": {
                        "type": ["boolean", "null"],
                        "description": "An escalated intent: whether going on could make an effect a send of it already made."
                    },
                    "reason": text("Why the intent is in its state."),
                    "resolved": {
                        "type": ["object", "null"],
                        "additionalProperties": { "type": "string" },
                        "description": "A workflow step: each referenced parameter's resolved value."
                    },
                    "first_sent_ms": { "type": ["integer", "null"], "description": "The executor's clock at the first send." },
                    "last_sent_ms": { "type": ["integer", "null"], "description": "The executor's clock at the latest send." }
                }
            },
            { "type": ["null", "boolean", "number", "string", "array"] }
        ]
    })
}

/// [`IntentBrief`] is written as a row, `[id, state, attempts, effects]`.
impl JsonSchema for IntentBrief {
    fn schema_name() -> Cow<'static, str> {
        "IntentBrief".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "array",
            "description": "One intent of a passed case: [id, final state (null when never reported), attempts (null when never reported), effects attributed].",
            "prefixItems": [
                { "type": "string", "description": "The intent's id." },
                { "type": ["string", "null"], "description": "The executor's final state." },
                { "type": ["integer", "null"], "minimum": 0, "description": "Sends the executor counted." },
                { "type": "integer", "minimum": 0, "description": "Ledger effects attributed to it." }
            ],
            "items": false,
            "minItems": 4
        })
    }
}
