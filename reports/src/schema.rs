//! The JSON Schema of `results.json` (`schemas/results.schema.json`), generated with
//! schemars from the types the file is serialized from ([`crate::json`]'s file form over
//! the `results` crate's model), as written: a field left out when empty is optional, every other one
//! required (the hand-written parts that belong to the model's own types, a claim's evidence
//! and a passed intent's row, are in `results::schema`). Objects stay open (no `additionalProperties: false`): fields may be added within
//! a schema version, and readers ignore those they do not know. `reports/tests/schema.rs`
//! holds the committed file equal to [`results_schema`].

use schemars::generate::SchemaSettings;
use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::{Value, json};

use results::RESULTS_SCHEMA;

/// The schema's `$id`.
pub const RESULTS_SCHEMA_ID: &str = "urn:twice:schema:twice.results/2";

/// Where the schema is kept, from the workspace root.
pub const RESULTS_SCHEMA_PATH: &str = "schemas/results.schema.json";

/// `results.json`'s JSON Schema (draft 2020-12), as `schemas/results.schema.json` holds it
/// (render it with [`vocabulary::schema::render`]).
pub fn results_schema() -> Value {
    let generator = SchemaGenerator::new(SchemaSettings::draft2020_12().for_serialize());
    let mut schema = generator.into_root_schema_for::<crate::json::RunFile<'static>>().to_value();
    if let Value::Object(root) = &mut schema {
        root.insert("$id".into(), json!(RESULTS_SCHEMA_ID));
        root.insert("title".into(), json!(format!("twice results ({RESULTS_SCHEMA})")));
        root.insert(
            "description".into(),
            json!(format!(
                "results.json, the record of a `twice run` from which every report is rendered (docs/reports.md), schema `{RESULTS_SCHEMA}`: everything of the cases that did not pass, and a compact form of those that passed; every case's row has its `verdicts`. Generated from the Rust types."
            )),
        );
    }
    schema
}

/// The file's `schema`: exactly [`RESULTS_SCHEMA`].
pub(crate) fn schema_name(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "const": RESULTS_SCHEMA,
        "description": "The file format and its version; a reader refuses another."
    })
}
