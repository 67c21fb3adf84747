//! Fault rules: which requests a fault applies to, and what the fault is.
//!
//! A rule is plain JSON (and, embedded in scenario files, TOML), so its shape is kept flat:
//!
//! ```json
//! {"id": "lost-reply", "method": "POST", "path": "/v1/refunds",
//!  "where": {"payment_intent": "pi_1"}, "nth": 1, "times": 1,
//!  "fault": "drop_after_commit"}
//! ```
//!
//! `fault` is either a bare name or a table with `kind` and the fault's parameters:
//! `{"kind": "reject", "status": 429}`. See `docs/faults.md` for every field.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

/// Every fault name, in the order of the catalog in `docs/faults.md`.
pub const FAULT_KINDS: &[&str] = &[
    "refuse",
    "reject",
    "error_after_commit",
    "drop_after_commit",
    "timeout_after_commit",
    "commit_after_timeout",
    "silent_noop",
    "stale_read",
    "forget_keys",
    "ignore_keys",
    "latency",
    "deliver_late",
    "redeliver",
    "duplicate_webhook",
    "delay_webhook",
    "lose_webhook_ack",
    "webhook_endpoint_down",
    "stale_webhook",
];

/// The services a delivery fault applies to: only a service whose effect is a delivery that
/// comes after the answer (a message landing in an inbox) can deliver late or twice.
pub const DELIVERY_SERVICES: &[&str] = &["messages"];

/// The services a webhook fault applies to: only a service that sends events to an app's
/// endpoint (the payments fake's webhooks) can send one twice, late, or with a stale signature.
pub const WEBHOOK_SERVICES: &[&str] = &["payments"];

/// The webhook faults: they act on the webhooks of the events a request makes, not on the
/// request (`FaultSpec::is_webhook`).
pub const WEBHOOK_FAULT_KINDS: &[&str] =
    &["duplicate_webhook", "delay_webhook", "lose_webhook_ack", "webhook_endpoint_down", "stale_webhook"];

/// How old a `stale_webhook`'s signature is: twice the SDKs' 300 s tolerance.
pub const STALE_SIGNATURE_AGE_S: u64 = 600;

/// The punctuation a rule's id may hold besides ASCII letters and digits: what a URL path
/// segment carries unencoded (RFC 3986 `pchar`).
pub const RULE_ID_PUNCTUATION: &[u8] = b"-._~!$&'()*+,;=:@";

/// No fault holds a request longer than this: every wait in a fake is bounded.
pub const HOLD_MS_MAX: u64 = 600_000;

/// What a fake does to a request that a rule selected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum FaultSpec {
    /// Reset the connection before reading the request.
    Refuse,
    /// Answer `status` (and `body`, or the service's own error shape) without executing.
    Reject {
        /// The HTTP status, 400 to 599.
        #[schemars(range(min = 400, max = 599))]
        status: u16,
        /// The body to answer with, any JSON; the service's own error shape when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body: Option<serde_json::Value>,
    },
    /// Commit, then answer `status` (500 unless given) in the service's error shape.
    ErrorAfterCommit {
        /// The HTTP status, 400 to 599.
        #[serde(default = "default_error_status")]
        #[schemars(range(min = 400, max = 599))]
        status: u16,
    },
    /// Commit, then close the connection without sending a byte.
    DropAfterCommit,
    /// Commit, then hold the reply for `hold_ms` (past any sane client timeout) and close.
    TimeoutAfterCommit {
        /// How long the reply is held, at most 600 000.
        #[serde(default = "default_hold_ms")]
        #[schemars(range(max = HOLD_MS_MAX))]
        hold_ms: u64,
    },
    /// Hold the request for `delay_ms` (default: the contract's `settle_ms_max`), then commit;
    /// the commit happens even when the caller has gone.
    CommitAfterTimeout {
        /// How long the request is held before the commit, at most 600 000.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(max = HOLD_MS_MAX))]
        delay_ms: Option<u64>,
    },
    /// Answer success with a plausible body and commit nothing.
    SilentNoop,
    /// Serve reads from the state as it was `lag_ms` of service time ago.
    StaleRead {
        /// How far behind reads are, at most 600 000.
        #[schemars(range(max = HOLD_MS_MAX))]
        lag_ms: u64,
    },
    /// Forget idempotency keys at least `older_than_ms` old (all of them when absent).
    ForgetKeys {
        /// Only keys at least this old are forgotten.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        older_than_ms: Option<u64>,
    },
    /// Neither look up nor store this request's idempotency key.
    IgnoreKeys,
    /// Delay before the commit (after the key is reserved) and after it.
    Latency {
        /// Delay before the commit, at most 600 000.
        #[serde(default)]
        #[schemars(range(max = HOLD_MS_MAX))]
        before_ms: u64,
        /// Delay after the commit, before the answer, at most 600 000.
        #[serde(default)]
        #[schemars(range(max = HOLD_MS_MAX))]
        after_ms: u64,
    },
    /// Answer at once, and deliver `delay_ms` after the request arrived (or at the commit, if
    /// that is later): the message lands in the inbox late. Messages only.
    DeliverLate {
        /// How long after the request the message lands, at most 600 000.
        #[schemars(range(max = HOLD_MS_MAX))]
        delay_ms: u64,
    },
    /// Deliver, then deliver the same message again by the provider's own retry, `after_ms`
    /// after the request arrived (or right after the first delivery, if that is later); the
    /// second delivery's effect carries `params.provider_redelivery = true`. Messages only.
    Redeliver {
        /// When the second delivery comes, after the request arrived; at most 600 000.
        #[serde(default)]
        #[schemars(range(max = HOLD_MS_MAX))]
        after_ms: u64,
    },
    /// Send each webhook event this request makes a second time, `after_ms` after the first
    /// attempt was due (0: at once), as a new delivery of the same event. Payments only.
    DuplicateWebhook {
        /// How long after the first attempt the second delivery is sent; at most 600 000.
        #[serde(default)]
        #[schemars(range(max = HOLD_MS_MAX))]
        after_ms: u64,
    },
    /// Send each webhook event this request makes `delay_ms` late: after anything the app
    /// did meanwhile, and after the events of later requests (out of order). Payments only.
    DelayWebhook {
        /// How long the first attempt waits; at most 600 000.
        #[schemars(range(max = HOLD_MS_MAX))]
        delay_ms: u64,
    },
    /// Lose the app's first 2xx to each webhook event this request makes, as if the answer
    /// never came back: the fake sends the event again on its retry backoff. Payments only.
    LoseWebhookAck,
    /// The app's endpoint cannot be reached for `for_ms` after each webhook event this request
    /// makes: the attempts due meanwhile fail unsent, and the retries come on the backoff.
    /// Payments only.
    WebhookEndpointDown {
        /// How long attempts fail; at most 600 000.
        #[schemars(range(max = HOLD_MS_MAX))]
        for_ms: u64,
    },
    /// After each webhook event this request makes is delivered, send it once more as a
    /// replay signed 600 s ago (`STALE_SIGNATURE_AGE_S`): the SDKs refuse its timestamp, and
    /// an app that does not check acts twice. Payments only.
    StaleWebhook,
}

fn default_error_status() -> u16 {
    500
}

fn default_hold_ms() -> u64 {
    30_000
}

impl FaultSpec {
    /// The fault's name, as written in rules and journals.
    pub fn kind(&self) -> &'static str {
        match self {
            FaultSpec::Refuse => "refuse",
            FaultSpec::Reject { .. } => "reject",
            FaultSpec::ErrorAfterCommit { .. } => "error_after_commit",
            FaultSpec::DropAfterCommit => "drop_after_commit",
            FaultSpec::TimeoutAfterCommit { .. } => "timeout_after_commit",
            FaultSpec::CommitAfterTimeout { .. } => "commit_after_timeout",
            FaultSpec::SilentNoop => "silent_noop",
            FaultSpec::StaleRead { .. } => "stale_read",
            FaultSpec::ForgetKeys { .. } => "forget_keys",
            FaultSpec::IgnoreKeys => "ignore_keys",
            FaultSpec::Latency { .. } => "latency",
            FaultSpec::DeliverLate { .. } => "deliver_late",
            FaultSpec::Redeliver { .. } => "redeliver",
            FaultSpec::DuplicateWebhook { .. } => "duplicate_webhook",
            FaultSpec::DelayWebhook { .. } => "delay_webhook",
            FaultSpec::LoseWebhookAck => "lose_webhook_ack",
            FaultSpec::WebhookEndpointDown { .. } => "webhook_endpoint_down",
            FaultSpec::StaleWebhook => "stale_webhook",
        }
    }

    /// Where in a request's processing the fault acts, as docs/faults.md names the points:
    /// `arrival`, `key`, `before_commit`, `commit`, `after_commit` (a latency on both sides
    /// of the commit: `before_commit+after_commit`), `webhook` (the deliveries of the events
    /// the request makes). Logs say it with each fault fired.
    pub fn point(&self) -> &'static str {
        match self {
            FaultSpec::Refuse | FaultSpec::Reject { .. } => "arrival",
            FaultSpec::ForgetKeys { .. } | FaultSpec::IgnoreKeys => "key",
            FaultSpec::Latency { before_ms, after_ms } => match (*before_ms > 0, *after_ms > 0) {
                (true, true) => "before_commit+after_commit",
                (false, true) => "after_commit",
                _ => "before_commit",
            },
            FaultSpec::CommitAfterTimeout { .. }
            | FaultSpec::SilentNoop
            | FaultSpec::StaleRead { .. }
            | FaultSpec::ErrorAfterCommit { .. }
            | FaultSpec::DeliverLate { .. }
            | FaultSpec::Redeliver { .. } => "commit",
            FaultSpec::DropAfterCommit | FaultSpec::TimeoutAfterCommit { .. } => "after_commit",
            FaultSpec::DuplicateWebhook { .. }
            | FaultSpec::DelayWebhook { .. }
            | FaultSpec::LoseWebhookAck
            | FaultSpec::WebhookEndpointDown { .. }
            | FaultSpec::StaleWebhook => "webhook",
        }
    }

    /// The services this fault can act on; `None`: every service.
    pub fn services(&self) -> Option<&'static [&'static str]> {
        match self {
            FaultSpec::DeliverLate { .. } | FaultSpec::Redeliver { .. } => Some(DELIVERY_SERVICES),
            _ if self.is_webhook() => Some(WEBHOOK_SERVICES),
            _ => None,
        }
    }

    /// Whether this fault acts on the webhooks a request's events make, not on the request.
    pub fn is_webhook(&self) -> bool {
        self.point() == "webhook"
    }

    /// Whether this fault can act on `service`, with the reason when it cannot.
    pub fn check_service(&self, service: &str) -> Result<(), String> {
        match self.services() {
            Some(only) if !only.contains(&service) && self.is_webhook() => Err(format!(
                "{} applies only to {}: only a service that sends webhooks to an app can send one twice, late or stale, and {service} sends none",
                self.kind(),
                only.join(", ")
            )),
            Some(only) if !only.contains(&service) => Err(format!(
                "{} applies only to {}: only a delivery that comes after the answer can be late or repeated, and {service} makes none",
                self.kind(),
                only.join(", ")
            )),
            _ => Ok(()),
        }
    }

    /// The fault a bare name stands for, with its default parameters; faults that need
    /// parameters (`reject`, `stale_read`, `latency`) say so.
    pub fn from_name(name: &str) -> Result<FaultSpec, String> {
        let spec = match name {
            "refuse" => FaultSpec::Refuse,
            "error_after_commit" => FaultSpec::ErrorAfterCommit { status: default_error_status() },
            "drop_after_commit" => FaultSpec::DropAfterCommit,
            "timeout_after_commit" => FaultSpec::TimeoutAfterCommit { hold_ms: default_hold_ms() },
            "commit_after_timeout" => FaultSpec::CommitAfterTimeout { delay_ms: None },
            "silent_noop" => FaultSpec::SilentNoop,
            "forget_keys" => FaultSpec::ForgetKeys { older_than_ms: None },
            "ignore_keys" => FaultSpec::IgnoreKeys,
            "redeliver" => FaultSpec::Redeliver { after_ms: 0 },
            "duplicate_webhook" => FaultSpec::DuplicateWebhook { after_ms: 0 },
            "lose_webhook_ack" => FaultSpec::LoseWebhookAck,
            "stale_webhook" => FaultSpec::StaleWebhook,
            "delay_webhook" => {
                return Err(
                    "fault \"delay_webhook\" needs a delay: {kind = \"delay_webhook\", delay_ms = 800}"
                        .into(),
                );
            }
            "webhook_endpoint_down" => {
                return Err(
                    "fault \"webhook_endpoint_down\" needs a time: {kind = \"webhook_endpoint_down\", for_ms = 1500}"
                        .into(),
                );
            }
            "deliver_late" => {
                return Err(
                    "fault \"deliver_late\" needs a delay: {kind = \"deliver_late\", delay_ms = 800}".into(),
                );
            }
            "reject" => {
                return Err("fault \"reject\" needs a status: {kind = \"reject\", status = 503}".into());
            }
            "stale_read" => {
                return Err("fault \"stale_read\" needs a lag: {kind = \"stale_read\", lag_ms = 500}".into());
            }
            "latency" => {
                return Err("fault \"latency\" needs a delay: {kind = \"latency\", before_ms = 200}".into());
            }
            other => return Err(unknown_fault(other)),
        };
        Ok(spec)
    }

    /// Checks the parameters that serde cannot: ranges and bounds.
    pub fn validate(&self) -> Result<(), String> {
        let bounded = |name: &str, ms: u64| {
            if ms > HOLD_MS_MAX {
                Err(format!("{}.{name} is {ms}, above the limit of {HOLD_MS_MAX} ms", self.kind()))
            } else {
                Ok(())
            }
        };
        match self {
            FaultSpec::Reject { status, .. } | FaultSpec::ErrorAfterCommit { status } => {
                if !(400..=599).contains(status) {
                    return Err(format!(
                        "{}.status is {status}; a fault's status must be an error, 400 to 599",
                        self.kind()
                    ));
                }
                Ok(())
            }
            FaultSpec::TimeoutAfterCommit { hold_ms } => bounded("hold_ms", *hold_ms),
            FaultSpec::CommitAfterTimeout { delay_ms } => bounded("delay_ms", delay_ms.unwrap_or(0)),
            FaultSpec::StaleRead { lag_ms } => bounded("lag_ms", *lag_ms),
            FaultSpec::Latency { before_ms, after_ms } => {
                bounded("before_ms", *before_ms)?;
                bounded("after_ms", *after_ms)
            }
            FaultSpec::DeliverLate { delay_ms } => bounded("delay_ms", *delay_ms),
            FaultSpec::Redeliver { after_ms } | FaultSpec::DuplicateWebhook { after_ms } => {
                bounded("after_ms", *after_ms)
            }
            FaultSpec::DelayWebhook { delay_ms } => bounded("delay_ms", *delay_ms),
            FaultSpec::WebhookEndpointDown { for_ms } => bounded("for_ms", *for_ms),
            _ => Ok(()),
        }
    }
}

/// The error for a fault name that does not exist, with the nearest one as a hint.
pub fn unknown_fault(name: &str) -> String {
    match closest(name, FAULT_KINDS) {
        Some(near) => format!("unknown fault \"{name}\" (did you mean \"{near}\"?)"),
        None => format!("unknown fault \"{name}\"; faults are: {}", FAULT_KINDS.join(", ")),
    }
}

/// The candidate closest to `word`, if any is close enough to be a likely typo.
pub fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (strsim::damerau_levenshtein(word, c), *c))
        .filter(|(distance, c)| *distance <= (c.len() / 3).max(2))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, c)| c)
}

/// Reads a rule's `fault`: a bare name, or a table with `kind`, with a "did you mean" for a
/// misspelt kind (serde's own message would only list the variants).
fn fault_spec<'de, D: Deserializer<'de>>(deserializer: D) -> Result<FaultSpec, D::Error> {
    struct SpecVisitor;

    impl<'de> Visitor<'de> for SpecVisitor {
        type Value = FaultSpec;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a fault name such as \"drop_after_commit\", or a table with `kind`")
        }

        fn visit_str<E: de::Error>(self, name: &str) -> Result<FaultSpec, E> {
            FaultSpec::from_name(name).map_err(E::custom)
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<FaultSpec, A::Error> {
            let value = serde_json::Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
            match value.get("kind") {
                None => return Err(de::Error::custom("a fault table needs `kind`, e.g. kind = \"reject\"")),
                Some(serde_json::Value::String(kind)) if !FAULT_KINDS.contains(&kind.as_str()) => {
                    return Err(de::Error::custom(unknown_fault(kind)));
                }
                _ => {}
            }
            FaultSpec::deserialize(value).map_err(de::Error::custom)
        }
    }

    deserializer.deserialize_any(SpecVisitor)
}

/// A fault and the requests it applies to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FaultRule {
    /// A name for journals and reports; the engine assigns `rule-N` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// HTTP method to match (any when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Path to match: exact, or a prefix when it ends with `*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Request fields that must be equal: form or JSON body fields, query parameters, and for
    /// JSON-RPC the `method` of the call.
    #[serde(default, rename = "where", skip_serializing_if = "BTreeMap::is_empty")]
    pub fields: BTreeMap<String, String>,
    /// Fire first on the n-th request that matches (1-based; default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub nth: Option<u64>,
    /// Fire on at most this many matching requests (default: no limit, or 1 with `nth`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u64>,
    /// Fire on each eligible request with this probability, drawn from the service's seeded RNG.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub probability: Option<f64>,
    /// The fault: a bare name, for a fault whose parameters all have defaults, or a table
    /// with `kind` and the fault's parameters (`reject`, `stale_read`, `latency`,
    /// `deliver_late`, `delay_webhook` and `webhook_endpoint_down` need one: `vocabulary::schema::bare_fault_names` lists the others).
    #[serde(deserialize_with = "fault_spec")]
    #[schemars(schema_with = "crate::schema::fault_name_or_table")]
    pub fault: FaultSpec,
}

impl FaultRule {
    /// A rule that applies `fault` to every request.
    pub fn always(fault: FaultSpec) -> Self {
        FaultRule {
            id: None,
            method: None,
            path: None,
            fields: BTreeMap::new(),
            nth: None,
            times: None,
            probability: None,
            fault,
        }
    }

    pub fn method(mut self, method: &str) -> Self {
        self.method = Some(method.to_string());
        self
    }

    pub fn path(mut self, path: &str) -> Self {
        self.path = Some(path.to_string());
        self
    }

    pub fn field(mut self, name: &str, value: &str) -> Self {
        self.fields.insert(name.to_string(), value.to_string());
        self
    }

    pub fn nth(mut self, nth: u64) -> Self {
        self.nth = Some(nth);
        self
    }

    pub fn times(mut self, times: u64) -> Self {
        self.times = Some(times);
        self
    }

    /// Checks what serde cannot.
    pub fn validate(&self) -> Result<(), String> {
        // `DELETE /__twice/rules/{id}` names the rule in one path segment, read as it
        // arrives: an id that cannot be written there as it is (empty, a `/`, anything a
        // client percent-encodes) could never be disarmed alone. What is left is RFC 3986's
        // `pchar` without its percent-encoding.
        if let Some(id) = &self.id
            && (id.is_empty()
                || !id.bytes().all(|b| b.is_ascii_alphanumeric() || RULE_ID_PUNCTUATION.contains(&b)))
        {
            return Err(format!(
                "id {id:?}: an id is ASCII letters, digits and {}, so that DELETE /__twice/rules/{{id}} \
                 can name it",
                String::from_utf8_lossy(RULE_ID_PUNCTUATION)
            ));
        }
        if self.nth == Some(0) {
            return Err("nth is 1-based: the first matching request is nth = 1".into());
        }
        if let Some(p) = self.probability
            && (!(0.0..=1.0).contains(&p) || p.is_nan())
        {
            return Err(format!("probability is {p}; it must be between 0 and 1"));
        }
        if let Some(m) = &self.method
            && (m.is_empty() || !m.bytes().all(|b| b.is_ascii_alphabetic()))
        {
            return Err(format!("method \"{m}\" is not an HTTP method"));
        }
        self.fault.validate()
    }

    /// Whether the request's method, path and fields match; counting and probability are
    /// the engine's business.
    pub fn matches(&self, request: &RequestView<'_>) -> bool {
        if let Some(m) = &self.method
            && !m.eq_ignore_ascii_case(request.method)
        {
            return false;
        }
        if let Some(p) = &self.path {
            let hit = match p.strip_suffix('*') {
                Some(prefix) => request.path.starts_with(prefix),
                None => request.path == p,
            };
            if !hit {
                return false;
            }
        }
        self.fields.iter().all(|(name, want)| request.fields.get(name).is_some_and(|got| got == want))
    }
}

/// What a rule can see of a request.
#[derive(Debug, Clone)]
pub struct RequestView<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub fields: &'a BTreeMap<String, String>,
}

#[cfg(test)]
mod tests;
