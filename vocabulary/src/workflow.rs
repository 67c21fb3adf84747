//! Workflows: intents that come after other intents and take parameter values from their
//! results (`docs/protocol.md` §3.2, "Steps that build on steps").
//!
//! An intent may name the intents it comes `after`; a parameter value may be a reference
//! `{"from": "<intent id>", "field": "<result field>"}`, optionally with `"format"`, a text
//! with one `{}` that the value replaces. The scenario validator, the reference executor and
//! the checker read references with this one parser, so they never disagree on what a
//! reference is.

use serde_json::{Map, Value};

use crate::action::ActionSpec;

/// The feature an executor announces in `init_ok.features` when it understands `after` and
/// parameter references. The harness reports such intents as unsupported by an executor that
/// does not announce it.
pub const WORKFLOWS_FEATURE: &str = "workflows";

/// The placeholder a reference's `format` holds exactly once.
pub const PLACEHOLDER: &str = "{}";

/// Most characters of a `format`.
pub const FORMAT_CHARS_MAX: usize = 1_000;

/// A parameter whose value comes from an earlier intent's result.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ParamRef {
    /// The intent whose result it reads; it must be in the intent's `after`.
    pub from: String,
    /// The result field (`ActionSpec::result_fields` of that intent's action).
    pub field: String,
    /// A text with one `{}` that the value replaces; the value itself when absent.
    pub format: Option<String>,
}

impl ParamRef {
    /// The parameter's value once the field's value is known.
    pub fn render(&self, value: &str) -> String {
        match &self.format {
            Some(format) => format.replacen(PLACEHOLDER, value, 1),
            None => value.to_string(),
        }
    }

    /// The JSON form, as a proposal carries it.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("from".into(), Value::from(self.from.clone()));
        map.insert("field".into(), Value::from(self.field.clone()));
        if let Some(format) = &self.format {
            map.insert("format".into(), Value::from(format.clone()));
        }
        Value::Object(map)
    }

    /// Reads a parameter value: `Ok(None)` for a plain value, `Ok(Some(_))` for a
    /// well-formed reference, `Err` (saying what is wrong) for an object that is not one.
    pub fn parse(value: &Value) -> Result<Option<ParamRef>, String> {
        let Value::Object(map) = value else { return Ok(None) };
        if let Some(extra) = map.keys().find(|k| !matches!(k.as_str(), "from" | "field" | "format")) {
            return Err(format!(
                "unknown field \"{extra}\" in a reference; a reference has from, field and format"
            ));
        }
        let text = |name: &str| match map.get(name) {
            Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
            None => Ok(None),
            Some(_) => Err(format!("\"{name}\" of a reference must be a non-empty string")),
        };
        let from = text("from")?.ok_or("a reference needs \"from\", the id of an earlier intent")?;
        let field = text("field")?.ok_or("a reference needs \"field\", a field of that intent's result")?;
        let format = text("format")?;
        if let Some(f) = &format {
            if f.matches(PLACEHOLDER).count() != 1 {
                return Err(format!(
                    "\"format\" must hold \"{PLACEHOLDER}\" exactly once, where the value goes"
                ));
            }
            if f.chars().count() > FORMAT_CHARS_MAX {
                return Err(format!("\"format\" is longer than {FORMAT_CHARS_MAX} characters"));
            }
        }
        Ok(Some(ParamRef { from, field, format }))
    }
}

/// Every reference among `params`, by parameter name (in the map's order); a plain value is
/// skipped and a malformed reference is an error naming its parameter.
pub fn references(params: &Value) -> Result<Vec<(String, ParamRef)>, String> {
    let Value::Object(map) = params else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for (name, value) in map {
        match ParamRef::parse(value) {
            Ok(Some(r)) => out.push((name.clone(), r)),
            Ok(None) => {}
            Err(e) => return Err(format!("parameter \"{name}\": {e}")),
        }
    }
    Ok(out)
}

/// Checks one reference of an intent of action `spec` in parameter `param`, given the action
/// of the intent it reads from (`None` when no intent of that id came earlier) and whether
/// that intent is in the intent's `after`. Says what is wrong, for a proposal's refusal and a
/// scenario's error alike.
pub fn check_reference(
    spec: &ActionSpec,
    param: &str,
    reference: &ParamRef,
    from_action: Option<&ActionSpec>,
    listed_in_after: bool,
) -> Result<(), String> {
    if !spec.param_takes_reference(param) {
        return Err(format!(
            "parameter \"{param}\" of {} cannot take a reference (only text parameters and object keys that are not the business key \"{}\" can)",
            spec.name, spec.business_key
        ));
    }
    let Some(from) = from_action else {
        return Err(format!(
            "parameter \"{param}\" reads from \"{}\", which is no earlier intent",
            reference.from
        ));
    };
    if !listed_in_after {
        return Err(format!(
            "parameter \"{param}\" reads from \"{}\", which must also be listed in \"after\"",
            reference.from
        ));
    }
    if from.result_field(&reference.field).is_none() {
        let fields: Vec<&str> = from.result_fields.iter().map(|f| f.name).collect();
        return Err(format!(
            "parameter \"{param}\": {} has no result field \"{}\"; it has: {}",
            from.name,
            reference.field,
            fields.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::action::{FILES_PUT, PAYMENTS_REFUND, WORKSPACES_CREATE};

    #[test]
    fn a_reference_is_read_rendered_and_written_back() {
        let v = json!({"from": "create", "field": "id", "format": "Welcome to {}"});
        let r = ParamRef::parse(&v).unwrap().unwrap();
        assert_eq!(r.render("ws_1"), "Welcome to ws_1");
        assert_eq!(r.to_value(), v);
        assert_eq!(ParamRef::parse(&json!("plain")).unwrap(), None);
        let bare = ParamRef::parse(&json!({"from": "d", "field": "etag"})).unwrap().unwrap();
        assert_eq!(bare.render("\"abc\""), "\"abc\"");
    }

    #[test]
    fn malformed_references_say_what_is_wrong() {
        for (v, says) in [
            (json!({"from": "a"}), "needs \"field\""),
            (json!({"field": "id"}), "needs \"from\""),
            (json!({"from": "a", "field": "id", "fromat": "x"}), "unknown field \"fromat\""),
            (json!({"from": "a", "field": 3}), "non-empty string"),
            (json!({"from": "a", "field": "id", "format": "no placeholder"}), "exactly once"),
            (json!({"from": "a", "field": "id", "format": "{} and {}"}), "exactly once"),
        ] {
            let e = ParamRef::parse(&v).unwrap_err();
            assert!(e.contains(says), "{v}: {e}");
        }
        let e = references(&json!({"body": {"from": "a"}})).unwrap_err();
        assert!(e.starts_with("parameter \"body\""), "{e}");
    }

    #[test]
    fn references_go_only_where_the_table_allows() {
        let r = ParamRef { from: "create".into(), field: "id".into(), format: None };
        assert!(check_reference(&FILES_PUT, "body", &r, Some(&WORKSPACES_CREATE), true).is_ok());
        let key = check_reference(&FILES_PUT, "key", &r, Some(&WORKSPACES_CREATE), true).unwrap_err();
        assert!(key.contains("business key"), "{key}");
        let amount =
            check_reference(&PAYMENTS_REFUND, "amount", &r, Some(&WORKSPACES_CREATE), true).unwrap_err();
        assert!(amount.contains("cannot take a reference"), "{amount}");
        let unlisted = check_reference(&FILES_PUT, "body", &r, Some(&WORKSPACES_CREATE), false).unwrap_err();
        assert!(unlisted.contains("\"after\""), "{unlisted}");
        let nobody = check_reference(&FILES_PUT, "body", &r, None, false).unwrap_err();
        assert!(nobody.contains("no earlier intent"), "{nobody}");
        let etag = ParamRef { field: "etag".into(), ..r };
        let field = check_reference(&FILES_PUT, "body", &etag, Some(&WORKSPACES_CREATE), true).unwrap_err();
        assert!(field.contains("it has: id"), "{field}");
    }
}
