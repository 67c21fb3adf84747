//! The parts of the scenario format's JSON Schema that the model's derives cannot say by
//! themselves (service and action names from `vocabulary`, each action's parameters, the
//! `[expect]` table), which the model's `#[schemars(...)]` attributes name. Apart from
//! [`crate::schema`], which renders the whole schema from the model, so that the model
//! depends on these and not on the file that depends on it.

use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::{Value, json};
use vocabulary::{ACTIONS, ContractPatch, SERVICES};

/// A service name (`vocabulary::SERVICES`).
pub(crate) fn service_name(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "enum": SERVICES })
}

/// `[services.NAME]`: a contract patch per service.
pub(crate) fn services(generator: &mut SchemaGenerator) -> Schema {
    let patch = generator.subschema_for::<ContractPatch>();
    json_schema!({
        "type": "object",
        "description": "The contract each service announces, as changes to its defaults (docs/faults.md).",
        "propertyNames": { "enum": SERVICES },
        "additionalProperties": patch
    })
}

/// `[expect]`: intent id to a state name, or to the states that are each honest there.
pub(crate) fn expect(generator: &mut SchemaGenerator) -> Schema {
    let state = vocabulary::schema::state_name(generator);
    json_schema!({
        "type": "object",
        "description": "Final states the scenario accepts (intent id to a state, or to an array of the states that are each honest there), beyond the invariants.",
        "additionalProperties": {
            "oneOf": [
                state,
                { "type": "array", "items": state, "minItems": 1, "uniqueItems": true }
            ]
        }
    })
}

/// An intent's `action`: a name of the action table.
pub(crate) fn action_name(_: &mut SchemaGenerator) -> Schema {
    let names: Vec<&str> = ACTIONS.iter().map(|a| a.name).collect();
    json_schema!({ "type": "string", "enum": names })
}

/// An intent's `params` in general: a table; [`params_by_action`] says which keys and
/// values each action takes.
pub(crate) fn params(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object" })
}

/// An intent's `params` per action: one `if action = NAME then params = ...` per row of the
/// action table, so an editor knows each action's parameters and their kinds.
pub(crate) fn params_by_action(schema: &mut Schema) {
    let rules: Vec<Value> = ACTIONS
        .iter()
        .map(|spec| {
            json!({
                "if": { "properties": { "action": { "const": spec.name } }, "required": ["action"] },
                "then": { "properties": { "params": vocabulary::schema::action_params(spec) } }
            })
        })
        .collect();
    schema.insert("allOf".into(), Value::Array(rules));
}
