//! The checks of single values a scenario holds: an action's parameters, a fault rule and
//! its fairness under the announced contract, names, texts, bounds, HTTP methods and paths,
//! worker names. Each returns the problems it found with the field they are at.

use vocabulary::ParamRef;

use super::*;

/// The lineage key's value as text (a missing one was refused by `check_params` already).
pub(super) fn lineage_value(params: &Value, key: &str) -> String {
    match params.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

pub(super) fn check_params(spec: &ActionSpec, params: &Value, at: &FieldPath) -> Check {
    let Value::Object(map) = params else {
        return Err(Invalid::new(at.clone(), format!("params of {} must be a table", spec.name)));
    };
    let names = spec.param_names();
    for key in map.keys() {
        if !names.contains(&key.as_str()) {
            return Err(Invalid::new(
                at.key(key).name_of_key(),
                format!("{} has no parameter \"{key}\"", spec.name),
            )
            .hint(suggest(key, &names)));
        }
    }
    for param in spec.params {
        let name = param.name;
        let Some(value) = map.get(name) else {
            if !param.required {
                continue;
            }
            return Err(Invalid::new(at.clone(), format!("{} needs parameter \"{name}\"", spec.name))
                .hint(format!("it takes {}", names.join(", "))));
        };
        match ParamRef::parse(value) {
            Ok(None) => param_value(param.kind, name, value, at.key(name))?,
            Ok(Some(reference)) => {
                if !spec.param_takes_reference(name) {
                    return Err(Invalid::new(
                        at.key(name),
                        format!("{name} of {} cannot take its value from another intent", spec.name),
                    )
                    .hint(format!(
                        "only text parameters and object keys other than the business key ({}) can",
                        spec.business_key
                    )));
                }
                // What the value will be is known only when the step runs; a format must
                // already give a valid value around any result (an object key's characters).
                if reference.format.is_some() {
                    let example = Value::from(reference.render("x"));
                    param_value(param.kind, name, &example, at.key(name).key("format"))?;
                }
            }
            Err(problem) => {
                return Err(Invalid::new(at.key(name), problem)
                    .hint("a reference is { from = \"<earlier intent id>\", field = \"<result field>\" }, with an optional format = \"text with {}\""));
            }
        }
    }
    Ok(())
}

/// One parameter's value, checked against its kind.
pub(super) fn param_value(kind: ParamKind, name: &str, value: &Value, here: FieldPath) -> Check {
    let text = value.as_str().unwrap_or_default();
    match kind {
        ParamKind::Text => match value {
            Value::String(s) if !s.is_empty() && s.chars().count() <= TEXT_MAX => Ok(()),
            _ => Err(Invalid::new(here, format!("{name} must be a string of 1 to {TEXT_MAX} characters"))),
        },
        ParamKind::PositiveInteger => match value.as_u64() {
            Some(n) if (1..=AMOUNT_MAX).contains(&n) => Ok(()),
            _ => Err(Invalid::new(
                here,
                format!("{name} must be an integer from 1 to {AMOUNT_MAX}, found {value}"),
            )),
        },
        ParamKind::Bucket => {
            let edges = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
            let ok = value.is_string()
                && (3..=63).contains(&text.len())
                && text
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
                && edges(text.chars().next())
                && edges(text.chars().last());
            if ok {
                return Ok(());
            }
            Err(Invalid::new(here, format!("{name} {value} is not a bucket name"))
                .hint("use 3 to 63 lowercase letters, digits, '.' and '-', starting and ending with a letter or digit"))
        }
        ParamKind::ObjectKey => {
            let ok = value.is_string()
                && !text.is_empty()
                && text.chars().count() <= TEXT_MAX
                && !text.starts_with('/')
                && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"!-_.*'()/".contains(&b));
            if ok {
                return Ok(());
            }
            Err(Invalid::new(here, format!("{name} {value} is not an object key the harness can use")).hint(
                format!("use 1 to {TEXT_MAX} letters, digits and ! - _ . * ' ( ) /, not starting with '/'"),
            ))
        }
        ParamKind::Address => {
            let ok = value.is_string()
                && text.len() == 42
                && text.starts_with("0x")
                && text[2..].bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            if ok {
                return Ok(());
            }
            let hint = if value.is_string()
                && text.len() == 42
                && text[2..].bytes().all(|b| b.is_ascii_hexdigit())
            {
                "write it in lowercase: the chain's ledger does, and effects are matched by it as text"
            } else {
                "an address is 0x and 40 hex digits, e.g. \"0x00000000000000000000000000000000000000b0\""
            };
            Err(Invalid::new(here, format!("{name} {value} is not a lowercase 0x address")).hint(hint))
        }
        ParamKind::Wei => {
            let parsed = value
                .as_str()
                .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) && !t.starts_with('0'))
                .and_then(|t| t.parse::<u128>().ok())
                .filter(|n| (1..=TRANSFER_WEI_MAX).contains(n));
            if parsed.is_some() {
                return Ok(());
            }
            let hint = if value.is_number() {
                "write wei as a decimal string, e.g. \"1000000000000000000\" for one ether: it outgrows TOML's integers"
            } else {
                "a decimal string of digits without leading zeros"
            };
            Err(Invalid::new(here, format!("{name} must be 1 to {TRANSFER_WEI_MAX} wei, found {value}"))
                .hint(hint))
        }
        ParamKind::Email => {
            if value.is_string() && vocabulary::is_email_address(text) {
                return Ok(());
            }
            let hint = if value.is_string() && vocabulary::is_email_address(&text.to_ascii_lowercase()) {
                "write it in lowercase: the messages ledger does, and deliveries are matched by it as text"
            } else {
                "an address such as \"ada@example.com\": lowercase letters, digits and . _ + -, then @ and a dotted domain"
            };
            Err(Invalid::new(here, format!("{name} {value} is not an email address")).hint(hint))
        }
    }
}

/// A rule's fields, each checked on its own so that the error points at the field.
pub(super) fn check_rule(rule: &FaultRule, at: &FieldPath) -> Check {
    let alone = || FaultRule::always(FaultSpec::Refuse);
    let field = |name: &str, probe: FaultRule| {
        probe.validate().map_err(|message| Invalid::new(at.key(name), message))
    };
    if let Some(m) = &rule.method {
        field("method", alone().method(m))?;
    }
    if let Some(p) = &rule.path {
        http_path(p, at.key("path"))?;
    }
    for key in rule.fields.keys() {
        if key.is_empty() {
            return Err(Invalid::new(at.key("where"), "a `where` field needs a name"));
        }
    }
    if let Some(n) = rule.nth {
        field("nth", alone().nth(n))?;
    }
    if rule.times == Some(0) {
        return Err(Invalid::new(at.key("times"), "times = 0 never fires").hint("remove the rule instead"));
    }
    if let Some(p) = rule.probability {
        let mut probe = alone();
        probe.probability = Some(p);
        field("probability", probe)?;
    }
    rule.fault.validate().map_err(|message| Invalid::new(at.key("fault"), message))?;
    rule.validate().map_err(|message| Invalid::new(at.clone(), message))
}

/// Fairness: the fault stays inside the contract `service` announces.
pub(super) fn fair(contract: &Contract, service: &str, fault: &FaultSpec, at: FieldPath) -> Check {
    let Err(reason) = contract.admits(fault) else { return Ok(()) };
    let table = format!("[services.{service}]");
    let hint = match fault {
        FaultSpec::IgnoreKeys => format!("announce it: idempotency_keys = \"ignored\" under {table}"),
        FaultSpec::SilentNoop => format!("announce it: acks = \"may_lie\" under {table}"),
        FaultSpec::StaleRead { lag_ms } => {
            format!(
                "announce it: reads = \"eventual\" and read_lag_ms_max = {lag_ms} (or more) under {table}"
            )
        }
        FaultSpec::CommitAfterTimeout { delay_ms } => format!(
            "announce settle_ms_max = {} (or more) under {table}, or shorten delay_ms",
            delay_ms.unwrap_or(0)
        ),
        FaultSpec::ForgetKeys { .. } => format!(
            "set older_than_ms to at least key_retention_ms ({}), or shorten key_retention_ms under {table}",
            contract.key_retention_ms
        ),
        FaultSpec::DeliverLate { delay_ms: d }
        | FaultSpec::Redeliver { after_ms: d }
        | FaultSpec::DuplicateWebhook { after_ms: d }
        | FaultSpec::DelayWebhook { delay_ms: d }
        | FaultSpec::WebhookEndpointDown { for_ms: d } => {
            format!("announce settle_ms_max = {d} (or more) under {table}, or deliver sooner")
        }
        _ => "only faults inside the announced contract are fair".to_string(),
    };
    Err(Invalid::new(at, format!("unfair fault on {service}: {reason}")).hint(hint))
}

pub(super) fn slug(value: &str, at: FieldPath, what: &str) -> Check {
    let ok = !value.is_empty()
        && value.len() <= ID_MAX
        && value.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && value.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if ok {
        return Ok(());
    }
    Err(Invalid::new(at, format!("{what} \"{value}\" is not a slug")).hint(format!(
        "use 1 to {ID_MAX} lowercase letters, digits, '_' and '-', starting with a letter or digit"
    )))
}

/// An id: 1 to [`ID_MAX`] characters, none of them white space or control characters.
pub(super) fn identifier(value: &str, at: FieldPath, what: &str) -> Check {
    if value.is_empty() || value.chars().count() > ID_MAX {
        return Err(Invalid::new(at, format!("{what} must be 1 to {ID_MAX} characters")));
    }
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Invalid::new(at, format!("{what} must not contain spaces or control characters")));
    }
    Ok(())
}

pub(super) fn text(value: &str, at: FieldPath, what: &str) -> Check {
    if value.is_empty() || value.chars().count() > TEXT_MAX {
        return Err(Invalid::new(at, format!("{what} must be 1 to {TEXT_MAX} characters")));
    }
    Ok(())
}

pub(super) fn within(value: Option<u64>, (low, high): (u64, u64), at: FieldPath, name: &str) -> Check {
    match value {
        Some(v) if v < low || v > high => {
            Err(Invalid::new(at, format!("{name} is {v}; it must be {low} to {high}")))
        }
        _ => Ok(()),
    }
}

pub(super) fn at_most(value: u64, high: u64, at: FieldPath, name: &str) -> Check {
    if value > high {
        return Err(Invalid::new(at, format!("{name} is {value}, above the limit of {high}")));
    }
    Ok(())
}

pub(super) fn http_method(method: &str, at: FieldPath) -> Check {
    FaultRule::always(FaultSpec::Refuse)
        .method(method)
        .validate()
        .map_err(|message| Invalid::new(at, message))
}

pub(super) fn http_path(path: &str, at: FieldPath) -> Check {
    if !path.starts_with('/') {
        return Err(Invalid::new(at, format!("path \"{path}\" must start with '/'"))
            .hint("e.g. \"/v1/refunds\", or \"/v1/*\" for a prefix"));
    }
    Ok(())
}

pub(super) fn known_worker(worker: &str, started: &[&str], at: FieldPath) -> Check {
    if started.contains(&worker) {
        return Ok(());
    }
    Err(Invalid::new(at, format!("worker \"{worker}\" is not running here")).hint(format!(
        "only {FIRST_WORKER} runs from the start; a start_worker event listed earlier starts another{}",
        match closest(worker, started) {
            Some(near) => format!("; did you mean \"{near}\"?"),
            None => String::new(),
        }
    )))
}
