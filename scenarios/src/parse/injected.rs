//! The `[[faults]]` and `[[events]]` tables, what a scenario injects: a fault rule armed on a
//! service (its fault a name or a table of parameters) and a process event with the point
//! it happens at. Each unknown name or key is pointed at with the nearest known one.

use std::collections::BTreeMap;
use std::ops::Range;

use vocabulary::rule::FAULT_KINDS;
use vocabulary::{FaultRule, FaultSpec};

use super::*;
use crate::model::{Event, EventAction, FIRST_WORKER, PhaseName, Point, ServiceFault};

/// A `[[faults]]` table: the service and the rule armed on it (`where` fields are text).
pub(super) fn fault(table: &Table<'_, '_>) -> Res<ServiceFault> {
    let mut allowed = vec!["service"];
    allowed.extend_from_slice(RULE_KEYS);
    table.allow(&allowed)?;
    let mut fields = BTreeMap::new();
    if let Some(v) = table.get("where") {
        for (name, value) in &Table::of(v, "`where`")?.entries {
            let text = match value.get_ref() {
                DeValue::String(s) => s.to_string(),
                DeValue::Integer(_) | DeValue::Float(_) | DeValue::Boolean(_) => {
                    return Err(Located::new(
                        value.span(),
                        format!(
                            "`where` compares request fields as text, so `{}` must be a string",
                            name.get_ref()
                        ),
                    )
                    .hint(format!(
                        "write it in quotes: {} = \"{}\"",
                        name.get_ref(),
                        json(value, name.get_ref())?
                    )));
                }
                other => {
                    return Err(Located::new(
                        value.span(),
                        format!("`{}` must be a string, found {}", name.get_ref(), a(other)),
                    ));
                }
            };
            fields.insert(name.get_ref().to_string(), text);
        }
    }
    let rule = FaultRule {
        id: table.opt_string("id")?,
        method: table.opt_string("method")?,
        path: table.opt_string("path")?,
        fields,
        nth: table.opt_uint("nth")?,
        times: table.opt_uint("times")?,
        probability: table.get("probability").map(|v| float(v, "probability")).transpose()?,
        fault: fault_spec(table.required("fault")?)?,
    };
    Ok(ServiceFault { service: table.string("service")?, rule })
}

/// An unknown fault name, with the known one it is closest to.
fn unknown_fault(span: Range<usize>, name: &str) -> Located {
    Located::new(span, format!("unknown fault \"{name}\"")).hint(suggest(name, FAULT_KINDS))
}

/// A rule's `fault`: a name, or a table of its `kind` and that kind's parameters.
fn fault_spec(value: &Val<'_>) -> Res<FaultSpec> {
    let repr = match value.get_ref() {
        DeValue::String(name) => {
            if !FAULT_KINDS.contains(&name.as_ref()) {
                return Err(unknown_fault(value.span(), name));
            }
            return FaultSpec::from_name(name).map_err(|e| Located::new(value.span(), e));
        }
        DeValue::Table(_) => {
            let table = Table::of(value, "a fault table")?;
            let kind_value = table.get("kind").ok_or_else(|| {
                Located::new(value.span(), "a fault table needs `kind`").hint("e.g. kind = \"reject\"")
            })?;
            let kind = string(kind_value, "kind")?;
            let Some((_, params)) = FAULT_PARAMS.iter().find(|(k, _)| *k == kind) else {
                return Err(unknown_fault(kind_value.span(), &kind));
            };
            let mut map = Map::new();
            map.insert("kind".into(), Value::String(kind.clone()));
            for (key, param) in &table.entries {
                let name = key.get_ref().as_ref();
                if name == "kind" {
                    continue;
                }
                if !params.contains(&name) {
                    let hint = if params.is_empty() {
                        format!("{kind} takes no parameters")
                    } else {
                        match vocabulary::rule::closest(name, params) {
                            Some(near) => format!("did you mean \"{near}\"?"),
                            None => format!("{kind} takes {}", params.join(", ")),
                        }
                    };
                    return Err(
                        Located::new(key.span(), format!("`{name}` is not a parameter of {kind}")).hint(hint)
                    );
                }
                let v = if name == "body" { json(param, name)? } else { Value::from(uint(param, name)?) };
                map.insert(name.to_string(), v);
            }
            Value::Object(map)
        }
        other => {
            return Err(Located::new(
                value.span(),
                format!("`fault` must be a name or a table, found {}", a(other)),
            )
            .hint("e.g. fault = \"drop_after_commit\" or fault = { kind = \"reject\", status = 503 }"));
        }
    };
    serde_json::from_value(repr).map_err(|e| Located::new(value.span(), e.to_string()))
}

/// An `[[events]]` table: what happens (`do`, with only the keys that action takes) and
/// where (`at`).
pub(super) fn event(table: &Table<'_, '_>) -> Res<Event> {
    let names: Vec<&str> = EVENT_ACTIONS.iter().map(|(n, _)| *n).collect();
    let do_value = table.required("do")?;
    let name = string(do_value, "do")?;
    let Some((_, keys)) = EVENT_ACTIONS.iter().find(|(n, _)| *n == name) else {
        return Err(
            Located::new(do_value.span(), format!("unknown event \"{name}\"")).hint(suggest(&name, &names))
        );
    };
    let mut allowed = vec!["at", "do"];
    allowed.extend_from_slice(keys);
    for (key, _) in &table.entries {
        let k = key.get_ref().as_ref();
        if allowed.contains(&k) {
            continue;
        }
        let owners: Vec<&str> =
            EVENT_ACTIONS.iter().filter(|(_, ks)| ks.contains(&k)).map(|(n, _)| *n).collect();
        let located = if owners.is_empty() {
            Located::new(key.span(), format!("unknown key `{k}` in a [[events]] table"))
                .hint(suggest(k, &allowed))
        } else {
            Located::new(key.span(), format!("`{k}` does not apply to {name}"))
                .hint(format!("it is a key of {}", owners.join(", ")))
        };
        return Err(located);
    }
    let worker =
        || -> Res<String> { Ok(table.opt_string("worker")?.unwrap_or_else(|| FIRST_WORKER.to_string())) };
    let action = match name.as_str() {
        "crash" => EventAction::Crash { worker: worker()? },
        "pause" => {
            EventAction::Pause { worker: worker()?, for_ms: uint(table.required("for_ms")?, "for_ms")? }
        }
        "start_worker" => EventAction::StartWorker { worker: table.string("worker")? },
        "clock_jump" => EventAction::ClockJump {
            service: table.string("service")?,
            by_ms: uint(table.required("by_ms")?, "by_ms")?,
        },
        "heal" => EventAction::Heal,
        _ => EventAction::Reconcile { worker: worker()? },
    };
    Ok(Event { at: point(table.required("at")?)?, action })
}

/// An event's `at`: a request (service, method, path, nth), the end of a propose, or the
/// end of a phase; never keys of two of them.
fn point(value: &Val<'_>) -> Res<Point> {
    let table = Table::of(value, "`at`")?;
    table.allow(POINT_KEYS)?;
    let only = |key: &str| -> Res<()> {
        match table.entries.iter().find(|(k, _)| k.get_ref() != key) {
            Some((other, _)) => {
                Err(Located::new(other.span(), format!("`{}` does not go with `{key}`", other.get_ref()))
                    .hint("a point is a request (service, method, path, nth), after_propose or after_phase"))
            }
            None => Ok(()),
        }
    };
    if let Some(v) = table.get("after_propose") {
        only("after_propose")?;
        return Ok(Point::AfterPropose { after_propose: string(v, "after_propose")? });
    }
    if let Some(v) = table.get("after_phase") {
        only("after_phase")?;
        let phase = match string(v, "after_phase")?.as_str() {
            "act" => PhaseName::Act,
            "drain" => PhaseName::Drain,
            other => {
                return Err(
                    Located::new(v.span(), format!("unknown phase \"{other}\"")).hint(suggest(other, PHASES))
                );
            }
        };
        return Ok(Point::Phase { after_phase: phase });
    }
    if table.get("service").is_some() {
        return Ok(Point::Request {
            service: table.string("service")?,
            method: table.opt_string("method")?,
            path: table.opt_string("path")?,
            nth: table.opt_uint("nth")?.unwrap_or(1),
        });
    }
    Err(Located::new(value.span(), "a point needs `service` (a request), `after_propose` or `after_phase`")
        .hint("e.g. at = { service = \"payments\", method = \"POST\", nth = 1 }"))
}
