//! JSON Schema parts for the values the serde derives cannot describe: a fault written as a
//! bare name or a table, an effect's parameters, and an action's parameters by kind. The
//! types derive `schemars::JsonSchema`; these are their `schema_with` parts, and the crates
//! that own the files (`scenarios`, `reports`) assemble the schemas of `schemas/`.

use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::{Value, json};

use crate::action::{ActionSpec, ParamKind};
use crate::rule::{FAULT_KINDS, FaultSpec};

/// The fault names that may be written bare: those whose parameters all have defaults.
pub fn bare_fault_names() -> Vec<&'static str> {
    FAULT_KINDS.iter().copied().filter(|name| FaultSpec::from_name(name).is_ok()).collect()
}

/// A rule's `fault`: a bare name (only of a fault whose parameters all have defaults), or a
/// table with `kind` and the fault's parameters ([`FaultSpec`]). The field's own doc comment
/// describes it.
pub fn fault_name_or_table(generator: &mut SchemaGenerator) -> Schema {
    let table = generator.subschema_for::<FaultSpec>();
    json_schema!({
        "anyOf": [
            { "type": "string", "enum": bare_fault_names() },
            table
        ]
    })
}

/// The parameters an effect was made with (or a refused write asked for): an object whose
/// keys depend on the effect's kind (a refund's `payment_intent` and `amount`, an object's
/// `bucket`, `key` and `body`, ...), with the service's own values (a refund's `metadata` is
/// an object).
pub fn effect_params(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "description": "The parameters, named as in the effect the action makes (a refund's `payment_intent`, `amount` and `metadata`, a workspace's `external_id` and `name`, an object's `bucket`, `key` and `body`, a transfer's `to` and `value`, a message's `to`, `subject` and `body`); `provider_redelivery = true` marks a delivery the provider made again by itself."
    })
}

/// The schema of one parameter value of `kind`: its JSON type and, where a regular
/// expression can say it, its form. The scenario validator checks more (lengths, ranges, the
/// exact email grammar); a value this refuses, the validator refuses too.
pub fn param_kind(kind: ParamKind) -> Value {
    match kind {
        ParamKind::Text => json!({ "type": "string", "minLength": 1, "description": "A non-empty string." }),
        ParamKind::PositiveInteger => {
            json!({ "type": "integer", "minimum": 1, "description": "An integer greater than zero." })
        }
        ParamKind::Bucket => json!({
            "type": "string",
            "pattern": "^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$",
            "description": "An S3 bucket name: 3 to 63 lowercase letters, digits, '.' and '-', starting and ending with a letter or digit."
        }),
        ParamKind::ObjectKey => json!({
            "type": "string",
            "pattern": "^[A-Za-z0-9!_.*'()-][A-Za-z0-9!_.*'()/-]*$",
            "description": "An object key of S3's safe characters (letters, digits and ! - _ . * ' ( ) /), not starting with '/'."
        }),
        ParamKind::Address => json!({
            "type": "string",
            "pattern": "^0x[0-9a-f]{40}$",
            "description": "An Ethereum address: 0x and 40 lowercase hex digits."
        }),
        ParamKind::Wei => json!({
            "type": "string",
            "pattern": "^[0-9]+$",
            "description": "An amount of wei as a decimal string."
        }),
        ParamKind::Email => json!({
            "type": "string",
            "pattern": "^[a-z0-9_+-][a-z0-9._+-]*@[a-z0-9-]+(\\.[a-z0-9-]+)+$",
            "description": "An email address in lowercase letters, digits and . _ + - (the domain: letters, digits, '.' and '-', with a dot)."
        }),
    }
}

/// A parameter that takes its value from an earlier intent's result
/// ([`crate::ParamRef`]): `{from, field, format}`.
pub fn param_ref() -> Value {
    json!({
        "type": "object",
        "description": "A value read from an earlier intent's result: `from` (an intent of `after`), `field` (a result field of its action) and an optional `format` holding `{}` once, where the value goes.",
        "properties": {
            "from": { "type": "string", "minLength": 1 },
            "field": { "type": "string", "minLength": 1 },
            "format": { "type": "string", "pattern": "\\{\\}" }
        },
        "required": ["from", "field"],
        "additionalProperties": false
    })
}

/// The schema of an action's `params`: every parameter with its kind (or a reference, where
/// the action lets that parameter take one), the required ones required, no others.
pub fn action_params(spec: &ActionSpec) -> Value {
    let properties: serde_json::Map<String, Value> = spec
        .params
        .iter()
        .map(|param| {
            let value = param_kind(param.kind);
            let schema = if spec.param_takes_reference(param.name) {
                json!({ "anyOf": [value, param_ref()] })
            } else {
                value
            };
            (param.name.to_string(), schema)
        })
        .collect();
    let required: Vec<&str> = spec.params.iter().filter(|p| p.required).map(|p| p.name).collect();
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false
    })
}

/// [`crate::State`]'s wire names, as a schema.
pub fn state_name(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "enum": crate::State::NAMES,
        "description": "An intent's state (docs/protocol.md §7)."
    })
}

/// A schema file's text: pretty JSON, keys sorted at every level (whatever order the map
/// type keeps), and a final newline, so that the same types give the same bytes.
pub fn render(schema: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                Value::Object(entries.into_iter().map(|(k, v)| (k.clone(), sorted(v))).collect())
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    // A `Value` always serializes: its keys are strings.
    let mut text = serde_json::to_string_pretty(&sorted(schema)).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_faults_that_need_a_table_are_the_ones_the_rule_docs_name() {
        let need_table: Vec<&str> =
            FAULT_KINDS.iter().copied().filter(|k| !bare_fault_names().contains(k)).collect();
        assert_eq!(
            need_table,
            ["reject", "stale_read", "latency", "deliver_late", "delay_webhook", "webhook_endpoint_down"]
        );
    }

    #[test]
    fn rendering_sorts_keys_and_ends_with_a_newline() {
        let text = render(&json!({ "b": 1, "a": { "d": [ { "f": 1, "e": 2 } ], "c": 3 } }));
        assert_eq!(
            text,
            "{\n  \"a\": {\n    \"c\": 3,\n    \"d\": [\n      {\n        \"e\": 2,\n        \"f\": 1\n      }\n    ]\n  },\n  \"b\": 1\n}\n"
        );
    }
}
