//! The JSON Schema of the scenario format (`schemas/scenario.schema.json`), generated from
//! the model's serde types with schemars, for editors (taplo's `#:schema` comment) and for
//! tools that write scenario files. The schema says the shape (keys, types, names, the
//! parameters of each action); the validator ([`crate::Scenario::validate`]) still checks
//! what a schema cannot (references between intents, fairness, bounds across fields).
//! `scenarios/tests/it/schema.rs` holds the committed file equal to [`scenario_schema`].

use schemars::generate::SchemaSettings;
use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::{Value, json};
use vocabulary::{ACTIONS, ContractPatch, SERVICES};

use crate::model::Scenario;

/// The schema's `$id`.
pub const SCENARIO_SCHEMA_ID: &str = "urn:twice:schema:scenario";

/// Where the schema is kept, from the workspace root.
pub const SCENARIO_SCHEMA_PATH: &str = "schemas/scenario.schema.json";

/// The scenario format's JSON Schema (draft 2020-12), as `schemas/scenario.schema.json`
/// holds it (render it with [`vocabulary::schema::render`]).
pub fn scenario_schema() -> Value {
    let generator = SchemaGenerator::new(SchemaSettings::draft2020_12().for_deserialize());
    let mut schema = generator.into_root_schema_for::<Scenario>().to_value();
    without_null(&mut schema);
    if let Value::Object(root) = &mut schema {
        root.insert("$id".into(), json!(SCENARIO_SCHEMA_ID));
        root.insert("title".into(), json!("twice scenario"));
        root.insert(
            "description".into(),
            json!(
                "A twice scenario file (TOML; docs/scenarios.md): the contracts services announce, the intents an agent proposes, the faults the fakes inject, the process events the harness applies, and the final states expected. Generated from the Rust types; `twice` checks more than this schema can (references between intents, fairness of faults, bounds across fields)."
            ),
        );
    }
    schema
}

/// Drops `null` from every type: an absent `Option` is an absent key, and TOML has no null,
/// so a schema that offered one would only mislead an editor.
fn without_null(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::Array(types)) = map.get_mut("type") {
                types.retain(|t| t != "null");
                if let [only] = types.as_slice() {
                    let only = only.clone();
                    map.insert("type".into(), only);
                }
            }
            for key in ["anyOf", "oneOf"] {
                if let Some(Value::Array(options)) = map.get_mut(key) {
                    options.retain(|o| o != &json!({ "type": "null" }));
                }
            }
            map.values_mut().for_each(without_null);
        }
        Value::Array(items) => items.iter_mut().for_each(without_null),
        _ => {}
    }
}

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
