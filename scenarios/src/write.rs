//! Writing a scenario back as TOML, in the layout of the hand-written catalog, so that a
//! shrunk failure found by a generator becomes a file that `twice replay` runs again.
//!
//! For every scenario that validates, `parse_scenario(&to_toml(s, "")?, _)` gives `s` back;
//! `to_toml` refuses a scenario that does not validate, since its file would not load.
//! JSON nulls (which TOML cannot write) are left out: no valid scenario has one.

use std::fmt::Write as _;

use serde_json::Value;
use vocabulary::FaultSpec;

use crate::model::{Event, EventAction, Expected, FIRST_WORKER, IntentSpec, Point, Scenario, ServiceFault};
use crate::validate::{Invalid, is_bare_key};

/// The scenario as a TOML file that starts with `header` as comment lines (the seed, the
/// command that replays it; empty for none). Refuses a scenario that does not validate.
pub fn to_toml(scenario: &Scenario, header: &str) -> Result<String, Invalid> {
    scenario.validate()?;
    Ok(write(scenario, header))
}

fn write(scenario: &Scenario, header: &str) -> String {
    let mut out = String::new();
    for line in header.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            out.push_str("#\n");
        } else {
            // A comment line ends at the first newline; other control characters are not
            // allowed in comments, so they are written as spaces.
            let clean: String =
                line.chars().map(|c| if c.is_control() && c != '\t' { ' ' } else { c }).collect();
            let _ = writeln!(out, "# {clean}");
        }
    }
    if !out.is_empty() {
        out.push('\n');
    }
    pair(&mut out, "name", &string(&scenario.name));
    if !scenario.description.is_empty() {
        pair(&mut out, "description", &string(&scenario.description));
    }
    if let Some(mode) = &scenario.failure_mode {
        pair(&mut out, "failure_mode", &string(mode));
    }
    if !scenario.limits.is_empty() {
        out.push_str("\n[limits]\n");
        if let Some(ms) = scenario.limits.request_timeout_ms {
            pair(&mut out, "request_timeout_ms", &ms.to_string());
        }
        if let Some(ms) = scenario.limits.lease_ms {
            pair(&mut out, "lease_ms", &ms.to_string());
        }
    }
    for (service, patch) in &scenario.services {
        let _ = writeln!(out, "\n[services.{}]", key(service));
        if let Ok(Value::Object(terms)) = serde_json::to_value(patch) {
            for (term, value) in &terms {
                if !value.is_null() {
                    pair(&mut out, term, &inline(value));
                }
            }
        }
    }
    if !scenario.payment_intents.is_empty() {
        out.push_str("\n[payment_intents]\n");
        for (id, amount) in &scenario.payment_intents {
            pair(&mut out, &key(id), &amount.to_string());
        }
    }
    for object in &scenario.objects {
        out.push_str("\n[[objects]]\n");
        pair(&mut out, "bucket", &string(&object.bucket));
        pair(&mut out, "key", &string(&object.key));
        pair(&mut out, "body", &string(&object.body));
    }
    for intent in &scenario.intents {
        write_intent(&mut out, intent);
    }
    for fault in &scenario.faults {
        write_fault(&mut out, fault);
    }
    for event in &scenario.events {
        write_event(&mut out, event);
    }
    if !scenario.expect.is_empty() {
        out.push_str("\n[expect]\n");
        for (id, expected) in &scenario.expect {
            let value = match expected {
                Expected::One(state) => string(state),
                Expected::AnyOf(states) => {
                    format!("[{}]", states.iter().map(|s| string(s)).collect::<Vec<_>>().join(", "))
                }
            };
            pair(&mut out, &key(id), &value);
        }
    }
    out
}

fn pair(out: &mut String, key: &str, value: &str) {
    let _ = writeln!(out, "{key} = {value}");
}

fn write_intent(out: &mut String, intent: &IntentSpec) {
    out.push_str("\n[[intents]]\n");
    pair(out, "id", &string(&intent.id));
    pair(out, "action", &string(&intent.action));
    let params = if intent.params.is_object() { inline(&intent.params) } else { "{}".to_string() };
    pair(out, "params", &params);
    if let Some(old) = &intent.replaces {
        pair(out, "replaces", &string(old));
    }
    if !intent.after.is_empty() {
        let ids: Vec<String> = intent.after.iter().map(|id| string(id)).collect();
        pair(out, "after", &format!("[{}]", ids.join(", ")));
    }
    if let Some(t) = &intent.on_event {
        let forged = if t.forged { ", forged = true" } else { "" };
        let table = format!(
            "{{ type = {}, payment_intent = {}{forged} }}",
            string(&t.kind),
            string(&t.payment_intent)
        );
        pair(out, "on_event", &table);
    }
}

fn write_fault(out: &mut String, fault: &ServiceFault) {
    let rule = &fault.rule;
    out.push_str("\n[[faults]]\n");
    pair(out, "service", &string(&fault.service));
    if let Some(id) = &rule.id {
        pair(out, "id", &string(id));
    }
    if let Some(method) = &rule.method {
        pair(out, "method", &string(method));
    }
    if let Some(path) = &rule.path {
        pair(out, "path", &string(path));
    }
    if !rule.fields.is_empty() {
        let fields: Vec<String> =
            rule.fields.iter().map(|(k, v)| format!("{} = {}", key(k), string(v))).collect();
        pair(out, "where", &format!("{{ {} }}", fields.join(", ")));
    }
    if let Some(n) = rule.nth {
        pair(out, "nth", &n.to_string());
    }
    if let Some(n) = rule.times {
        pair(out, "times", &n.to_string());
    }
    if let Some(p) = rule.probability {
        pair(out, "probability", &float(p));
    }
    pair(out, "fault", &fault_spec(&rule.fault));
}

/// A bare name when the name alone means this fault (its defaults), else an inline table.
fn fault_spec(spec: &FaultSpec) -> String {
    let kind = spec.kind();
    if FaultSpec::from_name(kind).ok().as_ref() == Some(spec) {
        return string(kind);
    }
    let mut parts = vec![format!("kind = {}", string(kind))];
    if let Ok(Value::Object(map)) = serde_json::to_value(spec) {
        for (k, v) in &map {
            if k != "kind" && !v.is_null() {
                parts.push(format!("{} = {}", key(k), inline(v)));
            }
        }
    }
    format!("{{ {} }}", parts.join(", "))
}

fn write_event(out: &mut String, event: &Event) {
    out.push_str("\n[[events]]\n");
    let at = match &event.at {
        Point::Request { service, method, path, nth } => {
            let mut parts = vec![format!("service = {}", string(service))];
            if let Some(m) = method {
                parts.push(format!("method = {}", string(m)));
            }
            if let Some(p) = path {
                parts.push(format!("path = {}", string(p)));
            }
            if *nth != 1 {
                parts.push(format!("nth = {nth}"));
            }
            format!("{{ {} }}", parts.join(", "))
        }
        Point::AfterPropose { after_propose } => format!("{{ after_propose = {} }}", string(after_propose)),
        Point::Phase { after_phase } => format!("{{ after_phase = {} }}", string(after_phase.as_str())),
    };
    pair(out, "at", &at);
    pair(out, "do", &string(event.action.name()));
    let worker = |out: &mut String, worker: &str, always: bool| {
        if always || worker != FIRST_WORKER {
            pair(out, "worker", &string(worker));
        }
    };
    match &event.action {
        EventAction::Crash { worker: w } | EventAction::Reconcile { worker: w } => worker(out, w, false),
        EventAction::Pause { worker: w, for_ms } => {
            worker(out, w, false);
            pair(out, "for_ms", &for_ms.to_string());
        }
        EventAction::StartWorker { worker: w } => worker(out, w, true),
        EventAction::ClockJump { service, by_ms } => {
            pair(out, "service", &string(service));
            pair(out, "by_ms", &by_ms.to_string());
        }
        EventAction::Heal => {}
    }
}

/// A key, bare when TOML allows it.
fn key(k: &str) -> String {
    if is_bare_key(k) { k.to_string() } else { string(k) }
}

/// A TOML basic string.
fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn float(f: f64) -> String {
    toml::Value::Float(f).to_string()
}

/// A JSON value as an inline TOML value; nulls are left out.
fn inline(value: &Value) -> String {
    match value {
        Value::Null => "{}".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (None, Some(u), _) => u.to_string(),
            (None, None, Some(f)) => float(f),
            (None, None, None) => n.to_string(),
        },
        Value::String(s) => string(s),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().filter(|v| !v.is_null()).map(inline).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(map) => {
            let parts: Vec<String> = map
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| format!("{} = {}", key(k), inline(v)))
                .collect();
            if parts.is_empty() { "{}".to_string() } else { format!("{{ {} }}", parts.join(", ")) }
        }
    }
}
