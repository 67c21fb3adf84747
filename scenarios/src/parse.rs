//! Reading the TOML form of a scenario, with errors that point at the exact place:
//! `ORIGIN:LINE:COL: message (hint)`.
//!
//! Three stages, each with its own kind of error:
//!
//! 1. TOML syntax, from the `toml` crate's span;
//! 2. shape: the spanned document ([`DeTable`]) is walked table by table, so an unknown key
//!    points at the key (`nht` → `did you mean "nth"?`), an unknown fault, action or phase
//!    at its value, a wrong type at the value;
//! 3. meaning: [`Scenario::validate`] names a [`FieldPath`], which is looked up in the same
//!    spanned document.
//!
//! Serde's `flatten` (used by the model for `[[faults]]` and `[[events]]`) silently accepts
//! unknown keys, which is why the shape is not left to serde here.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use serde_json::{Map, Value};
use toml::Spanned;
use toml::de::{DeString, DeTable, DeValue};
use vocabulary::ContractPatch;

use crate::model::{Expected, IntentSpec, LimitOverrides, ObjectSeed, Scenario, Trigger};
use crate::validate::{FieldPath, Segment, render_hint, suggest};

mod injected;

use injected::{event, fault};

/// A scenario file that cannot be used, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}:{line}:{column}: {message}{}", render_hint(hint))]
pub struct ScenarioError {
    /// The file's path, or `catalog/NAME.toml` for an embedded scenario.
    pub origin: String,
    /// 1-based.
    pub line: usize,
    /// 1-based, in characters.
    pub column: usize,
    pub message: String,
    pub hint: Option<String>,
}

/// Why a scenario file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: cannot read: {source}")]
    Read { path: String, source: std::io::Error },
    #[error(transparent)]
    Invalid(#[from] ScenarioError),
}

/// Reads a scenario from `text` and validates it. `origin` names the text in errors.
pub fn parse_scenario(text: &str, origin: &str) -> Result<Scenario, ScenarioError> {
    let doc = DeTable::parse(text).map_err(|e| syntax_error(text, origin, &e))?;
    let scenario = convert(&doc).map_err(|e| e.locate(text, origin))?;
    scenario.validate().map_err(|invalid| {
        Located { span: span_of(&doc, &invalid.path), message: invalid.message, hint: invalid.hint }
            .locate(text, origin)
    })?;
    Ok(scenario)
}

/// Reads and validates the scenario file at `path`.
pub fn parse_file(path: &Path) -> Result<Scenario, LoadError> {
    let origin = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|source| LoadError::Read { path: origin.clone(), source })?;
    Ok(parse_scenario(&text, &origin)?)
}

fn syntax_error(text: &str, origin: &str, error: &toml::de::Error) -> ScenarioError {
    let span = error.span().unwrap_or(0..0);
    Located { span, message: error.message().trim().to_string(), hint: None }.locate(text, origin)
}

/// An error with a byte span, before it is turned into a line and column.
#[derive(Debug)]
struct Located {
    span: Range<usize>,
    message: String,
    hint: Option<String>,
}

impl Located {
    fn new(span: Range<usize>, message: impl Into<String>) -> Self {
        Located { span, message: message.into(), hint: None }
    }

    fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    fn locate(self, text: &str, origin: &str) -> ScenarioError {
        let (line, column) = line_column(text, self.span.start);
        ScenarioError { origin: origin.to_string(), line, column, message: self.message, hint: self.hint }
    }
}

/// 1-based line and column (in characters) of byte `offset`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// The span of what `path` names in the document: the deepest part of it that exists.
fn span_of(doc: &Spanned<DeTable<'_>>, path: &FieldPath) -> Range<usize> {
    let mut span = doc.span();
    let mut table: Option<&DeTable<'_>> = Some(doc.get_ref());
    let mut array: Option<&[Spanned<DeValue<'_>>]> = None;
    let segments = path.segments();
    for (i, segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        let next = match segment {
            Segment::Key(name) => {
                let Some((key, value)) = table.and_then(|t| t.iter().find(|(k, _)| k.get_ref() == name))
                else {
                    break;
                };
                if last && path.points_at_key() {
                    return key.span();
                }
                value
            }
            Segment::Index(n) => match array.and_then(|a| a.get(*n)) {
                Some(item) => item,
                None => break,
            },
        };
        span = next.span();
        table = match next.get_ref() {
            DeValue::Table(t) => Some(t),
            _ => None,
        };
        array = match next.get_ref() {
            DeValue::Array(a) => Some(a),
            _ => None,
        };
    }
    span
}

type Val<'i> = Spanned<DeValue<'i>>;
type Res<T> = Result<T, Located>;

/// Keys of the top level.
pub const TOP_KEYS: &[&str] = &[
    "name",
    "description",
    "failure_mode",
    "limits",
    "services",
    "payment_intents",
    "objects",
    "strict_keys",
    "intents",
    "faults",
    "events",
    "expect",
];

/// Keys of `[limits]`.
pub const LIMIT_KEYS: &[&str] = &["request_timeout_ms", "lease_ms"];

/// Keys of an `[[objects]]` table, all required.
pub const OBJECT_KEYS: &[&str] = &["bucket", "key", "body"];

/// Keys of an `[[intents]]` table.
pub const INTENT_KEYS: &[&str] = &["id", "action", "params", "replaces", "after", "on_event"];

/// Keys of an intent's `on_event`.
pub const TRIGGER_KEYS: &[&str] = &["type", "payment_intent", "forged"];

/// Keys of a fault rule (as in `docs/faults.md`); a `[[faults]]` table adds `service`.
pub const RULE_KEYS: &[&str] = &["id", "method", "path", "where", "nth", "times", "probability", "fault"];

/// The parameters each fault takes in its table form.
pub const FAULT_PARAMS: &[(&str, &[&str])] = &[
    ("refuse", &[]),
    ("reject", &["status", "body"]),
    ("error_after_commit", &["status"]),
    ("drop_after_commit", &[]),
    ("timeout_after_commit", &["hold_ms"]),
    ("commit_after_timeout", &["delay_ms"]),
    ("silent_noop", &[]),
    ("stale_read", &["lag_ms"]),
    ("forget_keys", &["older_than_ms"]),
    ("ignore_keys", &[]),
    ("latency", &["before_ms", "after_ms"]),
    ("deliver_late", &["delay_ms"]),
    ("redeliver", &["after_ms"]),
    ("duplicate_webhook", &["after_ms"]),
    ("delay_webhook", &["delay_ms"]),
    ("lose_webhook_ack", &[]),
    ("webhook_endpoint_down", &["for_ms"]),
    ("stale_webhook", &[]),
];

/// Every `do` of an event, with the keys it takes besides `at` and `do`.
pub const EVENT_ACTIONS: &[(&str, &[&str])] = &[
    ("crash", &["worker"]),
    ("pause", &["worker", "for_ms"]),
    ("start_worker", &["worker"]),
    ("clock_jump", &["service", "by_ms"]),
    ("heal", &[]),
    ("reconcile", &["worker"]),
];

/// Keys of an event's `at`.
pub const POINT_KEYS: &[&str] = &["service", "method", "path", "nth", "after_propose", "after_phase"];

/// Phases an `after_phase` point can name.
pub const PHASES: &[&str] = &["act", "drain"];

/// How a contract term is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TermKind {
    /// Milliseconds, an integer.
    Ms,
    /// `true` or `false`.
    Flag,
    /// One of these names.
    Choice(&'static [&'static str]),
}

/// Every contract term (see `docs/faults.md`).
pub const CONTRACT_TERMS: &[(&str, TermKind)] = &[
    ("idempotency_keys", TermKind::Choice(&["honored", "ignored"])),
    ("key_retention_ms", TermKind::Ms),
    ("reads", TermKind::Choice(&["strong", "eventual"])),
    ("read_lag_ms_max", TermKind::Ms),
    ("acks", TermKind::Choice(&["reliable", "may_lie"])),
    ("settle_ms_max", TermKind::Ms),
    ("unique_business_key", TermKind::Flag),
    ("fencing", TermKind::Flag),
    ("conditional_writes", TermKind::Flag),
];

/// A table of the document, its entries in file order.
struct Table<'a, 'i> {
    entries: Vec<(&'a Spanned<DeString<'i>>, &'a Val<'i>)>,
    span: Range<usize>,
    what: String,
}

impl<'a, 'i> Table<'a, 'i> {
    fn new(table: &'a DeTable<'i>, span: Range<usize>, what: impl Into<String>) -> Self {
        let mut entries: Vec<_> = table.iter().collect();
        entries.sort_by_key(|(k, _)| k.span().start);
        Table { entries, span, what: what.into() }
    }

    fn of(value: &'a Val<'i>, what: impl Into<String>) -> Res<Self> {
        let what = what.into();
        match value.get_ref() {
            DeValue::Table(t) => Ok(Table::new(t, value.span(), what)),
            other => Err(Located::new(value.span(), format!("{what} must be a table, found {}", a(other)))),
        }
    }

    /// Refuses the first key (in file order) that is not in `allowed`.
    fn allow(&self, allowed: &[&str]) -> Res<()> {
        match self.entries.iter().find(|(k, _)| !allowed.contains(&k.get_ref().as_ref())) {
            Some((key, _)) => {
                Err(Located::new(key.span(), format!("unknown key `{}` in {}", key.get_ref(), self.what))
                    .hint(suggest(key.get_ref(), allowed)))
            }
            None => Ok(()),
        }
    }

    fn get(&self, key: &str) -> Option<&'a Val<'i>> {
        self.entries.iter().find(|(k, _)| k.get_ref() == key).map(|(_, v)| *v)
    }

    fn required(&self, key: &str) -> Res<&'a Val<'i>> {
        self.get(key).ok_or_else(|| Located::new(self.span.clone(), format!("{} needs `{key}`", self.what)))
    }

    fn string(&self, key: &str) -> Res<String> {
        string(self.required(key)?, key)
    }

    fn opt_string(&self, key: &str) -> Res<Option<String>> {
        self.get(key).map(|v| string(v, key)).transpose()
    }

    fn opt_uint(&self, key: &str) -> Res<Option<u64>> {
        self.get(key).map(|v| uint(v, key)).transpose()
    }
}

/// "a string", "an integer", ...: for "found ..." in messages.
fn a(value: &DeValue<'_>) -> String {
    let name = value.type_str();
    let article = if name.starts_with(['a', 'i']) { "an" } else { "a" };
    format!("{article} {name}")
}

fn string(value: &Val<'_>, key: &str) -> Res<String> {
    match value.get_ref() {
        DeValue::String(s) => Ok(s.to_string()),
        other => Err(Located::new(value.span(), format!("`{key}` must be a string, found {}", a(other)))),
    }
}

fn integer(value: &Val<'_>, key: &str) -> Res<i128> {
    match value.get_ref() {
        DeValue::Integer(n) => i128::from_str_radix(n.as_str(), n.radix())
            .map_err(|_| Located::new(value.span(), format!("`{key}` is out of range"))),
        other => Err(Located::new(value.span(), format!("`{key}` must be an integer, found {}", a(other)))),
    }
}

fn uint(value: &Val<'_>, key: &str) -> Res<u64> {
    let n = integer(value, key)?;
    u64::try_from(n).map_err(|_| {
        let problem = if n < 0 { "must not be negative" } else { "is out of range" };
        Located::new(value.span(), format!("`{key}` {problem}, found {n}"))
    })
}

fn float(value: &Val<'_>, key: &str) -> Res<f64> {
    match value.get_ref() {
        DeValue::Integer(_) => Ok(integer(value, key)? as f64),
        DeValue::Float(f) => f
            .as_str()
            .parse::<f64>()
            .map_err(|_| Located::new(value.span(), format!("`{key}` is not a number"))),
        other => Err(Located::new(value.span(), format!("`{key}` must be a number, found {}", a(other)))),
    }
}

fn boolean(value: &Val<'_>, key: &str) -> Res<bool> {
    match value.get_ref() {
        DeValue::Boolean(b) => Ok(*b),
        other => {
            Err(Located::new(value.span(), format!("`{key}` must be true or false, found {}", a(other))))
        }
    }
}

/// A TOML value as JSON (params, a reject body).
fn json(value: &Val<'_>, key: &str) -> Res<Value> {
    Ok(match value.get_ref() {
        DeValue::String(s) => Value::String(s.to_string()),
        DeValue::Integer(_) => {
            let n = integer(value, key)?;
            if let Ok(i) = i64::try_from(n) {
                Value::from(i)
            } else if let Ok(u) = u64::try_from(n) {
                Value::from(u)
            } else {
                return Err(Located::new(value.span(), format!("`{key}` is out of range")));
            }
        }
        DeValue::Float(_) => {
            let f = float(value, key)?;
            Value::Number(serde_json::Number::from_f64(f).ok_or_else(|| {
                Located::new(value.span(), format!("`{key}` is {f}, which JSON cannot carry"))
            })?)
        }
        DeValue::Boolean(b) => Value::Bool(*b),
        DeValue::Datetime(_) => {
            return Err(Located::new(value.span(), format!("`{key}` is a date, which scenarios do not use"))
                .hint("write it as a string"));
        }
        DeValue::Array(items) => {
            Value::Array(items.iter().map(|item| json(item, key)).collect::<Res<Vec<_>>>()?)
        }
        DeValue::Table(table) => {
            let mut map = Map::new();
            for (k, v) in table.iter() {
                map.insert(k.get_ref().to_string(), json(v, k.get_ref())?);
            }
            Value::Object(map)
        }
    })
}

/// The items of an array of tables, such as `[[intents]]`.
fn tables<'a, 'i>(value: &'a Val<'i>, key: &str) -> Res<Vec<Table<'a, 'i>>> {
    let DeValue::Array(items) = value.get_ref() else {
        return Err(Located::new(
            value.span(),
            format!("`{key}` must be an array of tables, found {}", a(value.get_ref())),
        )
        .hint(format!("write each one under its own [[{key}]] header")));
    };
    items.iter().map(|item| Table::of(item, format!("a [[{key}]] table"))).collect()
}

fn convert(doc: &Spanned<DeTable<'_>>) -> Res<Scenario> {
    let root = Table::new(doc.get_ref(), doc.span(), "the scenario");
    root.allow(TOP_KEYS)?;
    let mut scenario = Scenario {
        name: root.string("name")?,
        description: root.opt_string("description")?.unwrap_or_default(),
        failure_mode: root.opt_string("failure_mode")?,
        ..Scenario::default()
    };
    if let Some(v) = root.get("limits") {
        scenario.limits = limits(&Table::of(v, "[limits]")?)?;
    }
    if let Some(v) = root.get("services") {
        let services = Table::of(v, "[services]")?;
        for (name, value) in &services.entries {
            let patch = contract(&Table::of(value, format!("[services.{}]", name.get_ref()))?)?;
            scenario.services.insert(name.get_ref().to_string(), patch);
        }
    }
    if let Some(v) = root.get("payment_intents") {
        let seeded = Table::of(v, "[payment_intents]")?;
        for (id, amount) in &seeded.entries {
            scenario.payment_intents.insert(id.get_ref().to_string(), uint(amount, id.get_ref())?);
        }
    }
    if let Some(v) = root.get("objects") {
        scenario.objects = tables(v, "objects")?.iter().map(object).collect::<Res<_>>()?;
    }
    if let Some(v) = root.get("strict_keys") {
        scenario.strict_keys = boolean(v, "strict_keys")?;
    }
    if let Some(v) = root.get("intents") {
        scenario.intents = tables(v, "intents")?.iter().map(intent).collect::<Res<_>>()?;
    }
    if let Some(v) = root.get("faults") {
        scenario.faults = tables(v, "faults")?.iter().map(fault).collect::<Res<_>>()?;
    }
    if let Some(v) = root.get("events") {
        scenario.events = tables(v, "events")?.iter().map(event).collect::<Res<_>>()?;
    }
    if let Some(v) = root.get("expect") {
        let expect = Table::of(v, "[expect]")?;
        let mut states = BTreeMap::new();
        for (id, state) in &expect.entries {
            states.insert(id.get_ref().to_string(), expected(state, id.get_ref())?);
        }
        scenario.expect = states;
    }
    Ok(scenario)
}

fn limits(table: &Table<'_, '_>) -> Res<LimitOverrides> {
    table.allow(LIMIT_KEYS)?;
    Ok(LimitOverrides {
        request_timeout_ms: table.opt_uint("request_timeout_ms")?,
        lease_ms: table.opt_uint("lease_ms")?,
    })
}

fn contract(table: &Table<'_, '_>) -> Res<ContractPatch> {
    let names: Vec<&str> = CONTRACT_TERMS.iter().map(|(n, _)| *n).collect();
    table.allow(&names)?;
    let mut terms = Map::new();
    for (key, value) in &table.entries {
        let name = key.get_ref().as_ref();
        let Some((_, kind)) = CONTRACT_TERMS.iter().find(|(n, _)| *n == name) else { continue };
        let term = match kind {
            TermKind::Ms => Value::from(uint(value, name)?),
            TermKind::Flag => Value::Bool(boolean(value, name)?),
            TermKind::Choice(choices) => {
                let word = string(value, name)?;
                if !choices.contains(&word.as_str()) {
                    return Err(Located::new(value.span(), format!("unknown {name} \"{word}\""))
                        .hint(suggest(&word, choices)));
                }
                Value::String(word)
            }
        };
        terms.insert(name.to_string(), term);
    }
    serde_json::from_value(Value::Object(terms)).map_err(|e| Located::new(table.span.clone(), e.to_string()))
}

fn object(table: &Table<'_, '_>) -> Res<ObjectSeed> {
    table.allow(OBJECT_KEYS)?;
    Ok(ObjectSeed { bucket: table.string("bucket")?, key: table.string("key")?, body: table.string("body")? })
}

fn intent(table: &Table<'_, '_>) -> Res<IntentSpec> {
    table.allow(INTENT_KEYS)?;
    let params = table.required("params")?;
    Table::of(params, "`params`")?;
    Ok(IntentSpec {
        id: table.string("id")?,
        action: table.string("action")?,
        params: json(params, "params")?,
        replaces: table.opt_string("replaces")?,
        after: table.get("after").map(|v| strings(v, "after")).transpose()?.unwrap_or_default(),
        on_event: table.get("on_event").map(trigger).transpose()?,
    })
}

fn trigger(value: &Val<'_>) -> Res<Trigger> {
    let table = Table::of(value, "`on_event`")?;
    table.allow(TRIGGER_KEYS)?;
    Ok(Trigger {
        kind: table.string("type")?,
        payment_intent: table.string("payment_intent")?,
        forged: table.get("forged").map(|v| boolean(v, "forged")).transpose()?.unwrap_or(false),
    })
}

/// An `[expect]` value: a state, or an array of the states that are each honest.
fn expected(value: &Val<'_>, key: &str) -> Res<Expected> {
    match value.get_ref() {
        DeValue::String(s) => Ok(Expected::One(s.to_string())),
        DeValue::Array(items) if !items.is_empty() => {
            Ok(Expected::AnyOf(items.iter().map(|item| string(item, key)).collect::<Res<_>>()?))
        }
        other => Err(Located::new(
            value.span(),
            format!("`{key}` must be a state or a non-empty array of states, found {}", a(other)),
        )
        .hint(format!(
            "write {key} = \"confirmed\", or {key} = [\"escalated\", \"failed\"] where each is honest"
        ))),
    }
}

/// An array of strings, such as an intent's `after`.
fn strings(value: &Val<'_>, key: &str) -> Res<Vec<String>> {
    let DeValue::Array(items) = value.get_ref() else {
        return Err(Located::new(
            value.span(),
            format!("`{key}` must be an array of strings, found {}", a(value.get_ref())),
        )
        .hint(format!("write {key} = [\"an-id\", \"another-id\"]")));
    };
    items.iter().map(|item| string(item, key)).collect()
}
