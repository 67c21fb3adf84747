//! `schemas/scenario.schema.json`: the committed file is the schema the model generates, and
//! an independent validator (the `jsonschema` crate) accepts every catalog scenario and every
//! generated one, and refuses a misspelt key, a wrong type and an unknown name.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use vocabulary::schema::render;

fn schema_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(scenarios::schema::SCENARIO_SCHEMA_PATH)
}

fn validator() -> jsonschema::Validator {
    jsonschema::draft202012::new(&scenarios::schema::scenario_schema())
        .expect("the schema is a valid 2020-12 schema")
}

/// A scenario's TOML as the JSON value the schema describes.
fn as_json(toml_text: &str) -> Value {
    let value: toml::Value = toml::from_str(toml_text).expect("the TOML parses");
    serde_json::to_value(value).expect("TOML values are JSON values")
}

fn errors(validator: &jsonschema::Validator, instance: &Value) -> Vec<String> {
    validator.iter_errors(instance).map(|e| format!("{}: {e}", e.instance_path())).collect()
}

/// The committed file, byte for byte; `UPDATE_SCHEMAS=1 cargo test -p scenarios --test it
/// schema` rewrites it.
#[test]
fn the_committed_scenario_schema_is_the_generated_one() {
    let want = render(&scenarios::schema::scenario_schema());
    let path = schema_path();
    if std::env::var_os("UPDATE_SCHEMAS").is_some() {
        std::fs::write(&path, &want).expect("the schema file writes");
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is out of date with the scenario types; run \
         UPDATE_SCHEMAS=1 cargo test -p scenarios --test it schema",
        path.display()
    );
}

#[test]
fn every_catalog_scenario_validates() {
    let validator = validator();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("catalog");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("the catalog directory reads") {
        let path = entry.expect("an entry reads").path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a catalog file reads");
        let problems = errors(&validator, &as_json(&text));
        assert!(problems.is_empty(), "{}:\n{}", path.display(), problems.join("\n"));
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} catalog files found in {}", dir.display());
}

/// What the generator writes (shrunk failures are written with `to_toml`) is in the schema too.
#[test]
fn generated_scenarios_validate() {
    let validator = validator();
    for index in 0..300 {
        let scenario = scenarios::generate::case(7, index).expect("the case generates");
        let text = scenarios::to_toml(&scenario, "").expect("a generated case writes");
        let problems = errors(&validator, &as_json(&text));
        assert!(problems.is_empty(), "generated case {index}:\n{text}\n{}", problems.join("\n"));
    }
}

/// The comment an editor reads (`#:schema`) is only a comment to the parser.
#[test]
fn a_schema_comment_line_is_accepted() {
    let text = "#:schema ../schemas/scenario.schema.json\n\
                name = \"with-schema-comment\"\n\
                [[intents]]\n\
                id = \"r1\"\n\
                action = \"payments.refund\"\n\
                params = { payment_intent = \"pi_1\", amount = 500 }\n";
    let scenario = scenarios::parse_scenario(text, "with-schema-comment.toml").expect("the scenario parses");
    assert_eq!(scenario.name, "with-schema-comment");
    assert!(validator().is_valid(&as_json(text)));
}

fn base() -> Value {
    json!({
        "name": "negative",
        "services": { "payments": { "acks": "may_lie", "settle_ms_max": 2000 } },
        "intents": [
            { "id": "r1", "action": "payments.refund", "params": { "payment_intent": "pi_1", "amount": 500 } },
            { "id": "put", "action": "files.put", "params": { "bucket": "reports", "key": "a.csv", "body": "x" } }
        ],
        "faults": [ { "service": "payments", "nth": 1, "fault": { "kind": "reject", "status": 503 } } ],
        "events": [ { "at": { "service": "payments", "nth": 1 }, "do": "crash" } ],
        "expect": { "r1": "confirmed" }
    })
}

#[test]
fn the_schema_refuses_what_the_parser_refuses() {
    let validator = validator();
    let problems = errors(&validator, &base());
    assert!(problems.is_empty(), "the base case is valid: {problems:?}");
    type Change = fn(&mut Value);
    let cases: &[(&str, Change)] = &[
        ("an unknown top-level key", |v| v["nmae"] = json!("x")),
        ("an unknown key in an intent", |v| v["intents"][0]["replace"] = json!("r0")),
        ("an unknown key in a fault", |v| v["faults"][0]["nht"] = json!(1)),
        ("an unknown key in an event", |v| v["events"][0]["for_ms"] = json!(5)),
        ("an unknown key in a point", |v| v["events"][0]["at"]["nht"] = json!(2)),
        ("an unknown contract term", |v| v["services"]["payments"]["ack"] = json!("reliable")),
        ("a parameter of a fault that takes none", |v| {
            v["faults"][0]["fault"] = json!({"kind": "refuse", "status": 1})
        }),
        ("a misspelt fault parameter", |v| {
            v["faults"][0]["fault"] = json!({"kind": "latency", "befor_ms": 3})
        }),
        ("a parameter the action does not take", |v| v["intents"][0]["params"]["amont"] = json!(5)),
        ("a missing parameter", |v| v["intents"][1]["params"] = json!({"bucket": "reports", "key": "a.csv"})),
        ("a wrong type: name", |v| v["name"] = json!(3)),
        ("a wrong type: nth", |v| v["faults"][0]["nth"] = json!("1")),
        ("a wrong type: amount", |v| v["intents"][0]["params"]["amount"] = json!("500")),
        ("a wrong type: intents", |v| v["intents"] = json!({"id": "r1"})),
        ("a reference in the business key", |v| {
            v["intents"][0]["params"]["payment_intent"] = json!({"from": "put", "field": "etag"})
        }),
        ("a bad enum: fault name", |v| v["faults"][0]["fault"] = json!("drop_after_comit")),
        ("a bad enum: fault kind", |v| v["faults"][0]["fault"] = json!({"kind": "silent_nop"})),
        ("a fault that needs parameters, bare", |v| v["faults"][0]["fault"] = json!("reject")),
        ("a bad enum: acks", |v| v["services"]["payments"]["acks"] = json!("maybe")),
        ("a bad enum: service", |v| v["faults"][0]["service"] = json!("payment")),
        ("a bad enum: action", |v| v["intents"][0]["action"] = json!("payments.refnd")),
        ("a bad enum: event", |v| v["events"][0]["do"] = json!("crsh")),
        ("a bad enum: phase", |v| v["events"][0]["at"] = json!({"after_phase": "settle"})),
        ("a bad enum: expected state", |v| v["expect"]["r1"] = json!("done")),
        ("a key of another event", |v| v["events"][0]["by_ms"] = json!(5)),
        ("a status that is no error", |v| v["faults"][0]["fault"] = json!({"kind": "reject", "status": 200})),
        ("a probability above 1", |v| v["faults"][0]["probability"] = json!(1.5)),
        ("nth 0", |v| v["faults"][0]["nth"] = json!(0)),
        ("a name that is no slug", |v| v["name"] = json!("Refund Lost")),
        ("an intent id with a space", |v| v["intents"][0]["id"] = json!("r 1")),
        ("no intents", |v| v["intents"] = json!([])),
        ("no name", |v| {
            v.as_object_mut().map(|o| o.remove("name"));
        }),
    ];
    for (what, change) in cases {
        let mut instance = base();
        change(&mut instance);
        assert!(!validator.is_valid(&instance), "the schema accepts {what}: {instance}");
    }
}
