//! The JSON Schema of the scenario format (`schemas/scenario.schema.json`), generated from
//! the model's serde types with schemars, for editors (taplo's `#:schema` comment) and for
//! tools that write scenario files. The schema says the shape (keys, types, names, the
//! parameters of each action); the validator ([`crate::Scenario::validate`]) still checks
//! what a schema cannot (references between intents, fairness, bounds across fields).
//! `scenarios/tests/it/schema.rs` holds the committed file equal to [`scenario_schema`].
//! The parts the model's derives name (service and action names, each action's parameters)
//! are in `schema_parts.rs`, below the model.

use schemars::SchemaGenerator;
use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

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
