//! Webhook endpoints (`/v1/webhook_endpoints`) and the deliveries of events to them.
//!
//! An app registers an endpoint with a `url` and the `enabled_events` it wants (`*` for every
//! type); the answer to the create is the only one that carries its signing secret
//! (`whsec_…`), as Stripe's does. From then on every event the fake makes whose type the
//! endpoint enables is queued for it (`deliveries.rs`) and sent by the delivery task
//! (`driver.rs`) as an HTTP POST of the event's JSON, signed in `Stripe-Signature`
//! (`signature.rs`). An event made before the endpoint existed is not sent to it, as Stripe
//! sends none. Deleting or disabling an endpoint ends what was still to be sent to it.
//!
//! Endpoint ids and secrets come from the endpoint's number on a stream of their own, so that
//! registering an endpoint moves no refund id and no fault draw.

mod deliveries;
pub(crate) mod driver;
mod signature;

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand::distr::{Alphanumeric, SampleString};
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, Value, json};

use super::PaymentsState;
use super::answer::{missing, stripe_error};
use super::events::render;
use super::list::{ListQuery, page};
use super::params::{check_key, check_metadata, unknown_parameters};
use crate::core::{ApiError, Commit, Inner, Mode, Stamp};
use crate::form;
use crate::wire::{FakeRequest, FakeResponse};

pub use deliveries::{ATTEMPTS_MAX, DELIVERY_TIMEOUT_MS, PAY_AFTER_LISTENER_MS, RETRY_AFTER_MS};
pub(super) use deliveries::{Awaiting, Signed, Standing, Webhooks};
pub use signature::sign;
use vocabulary::rule::STALE_SIGNATURE_AGE_S;

/// Stripe's limit on an account's endpoints (in test mode as in live mode).
pub const ENDPOINTS_MAX: usize = 16;
/// The longest URL an endpoint may have, as Stripe bounds it.
const URL_CHARS_MAX: usize = 5000;
/// The parameters a create takes, and an update (which adds `disabled`).
const CREATE_PARAMS: &[&str] = &["url", "enabled_events", "description", "metadata", "api_version", "expand"];
const UPDATE_PARAMS: &[&str] = &["url", "enabled_events", "description", "metadata", "disabled", "expand"];
/// Mixed into each endpoint's seed, so that its id and secret are no other stream's.
const ENDPOINT_STREAM: u64 = 0x7765_5f69_6473_6563;

/// A registered endpoint.
#[derive(Debug, Clone)]
pub(super) struct Endpoint {
    pub(super) id: String,
    pub(super) secret: String,
    pub(super) url: String,
    pub(super) enabled_events: Vec<String>,
    description: Option<String>,
    metadata: Map<String, Value>,
    pub(super) disabled: bool,
    pub(super) deleted: bool,
    created_ms: u64,
}

impl Endpoint {
    /// Whether an event of type `kind` is sent to this endpoint now.
    pub(super) fn wants(&self, kind: &str) -> bool {
        !self.disabled && !self.deleted && self.enabled_events.iter().any(|e| e == "*" || e == kind)
    }

    /// The endpoint as Stripe shows it; the secret only in the create's answer.
    fn to_json(&self, with_secret: bool) -> Value {
        let mut object = json!({
            "id": self.id,
            "object": "webhook_endpoint",
            "api_version": null,
            "application": null,
            "created": self.created_ms / 1000,
            "description": self.description,
            "enabled_events": self.enabled_events,
            "livemode": false,
            "metadata": self.metadata,
            "status": if self.disabled { "disabled" } else { "enabled" },
            "url": self.url,
        });
        if with_secret && let Some(map) = object.as_object_mut() {
            map.insert("secret".into(), json!(self.secret));
        }
        object
    }
}

/// The id and the secret of the endpoint numbered `number`.
fn id_and_secret(number: usize) -> (String, String) {
    let mut rng = ChaCha8Rng::seed_from_u64(ENDPOINT_STREAM ^ number as u64);
    let id = format!("we_{}", Alphanumeric.sample_string(&mut rng, 24));
    let secret = format!("whsec_{}", Alphanumeric.sample_string(&mut rng, 32));
    (id, secret)
}

/// What a create or an update asks for, checked.
#[derive(Debug, Default)]
struct Fields {
    url: Option<String>,
    enabled_events: Option<Vec<String>>,
    description: Option<String>,
    metadata: Option<Map<String, Value>>,
    disabled: Option<bool>,
}

fn read_fields(req: &FakeRequest, known: &[&str]) -> Result<(Fields, Map<String, Value>), ApiError> {
    check_key(req)?;
    let params = form::decode(&req.body).map_err(ApiError::invalid)?;
    unknown_parameters(&params, known)?;
    let mut fields = Fields::default();
    if let Some(url) = params.get("url") {
        fields.url = Some(check_url(url.as_str().unwrap_or_default())?);
    }
    if let Some(events) = params.get("enabled_events") {
        fields.enabled_events = Some(check_events(events)?);
    }
    match params.get("description") {
        None => {}
        Some(Value::String(text)) => fields.description = (!text.is_empty()).then(|| text.clone()),
        Some(_) => return Err(ApiError::invalid("Invalid string: description").param("description")),
    }
    match params.get("metadata") {
        None => {}
        Some(Value::Object(map)) => fields.metadata = Some(check_metadata(map)?),
        // `metadata=` (empty) clears it, as Stripe's does.
        Some(Value::String(s)) if s.is_empty() => fields.metadata = Some(Map::new()),
        Some(_) => return Err(ApiError::invalid("Invalid object").param("metadata")),
    }
    match params.get("disabled").and_then(Value::as_str) {
        None => {}
        Some("true") => fields.disabled = Some(true),
        Some("false") => fields.disabled = Some(false),
        Some(other) => {
            return Err(ApiError::invalid(format!("Invalid boolean: {other}")).param("disabled"));
        }
    }
    Ok((fields, params))
}

/// An endpoint's URL: absolute `http://`, since the fake sends over plain HTTP.
fn check_url(url: &str) -> Result<String, ApiError> {
    let invalid = |why: &str| ApiError::invalid(format!("Invalid URL: {why}")).param("url");
    if url.is_empty() {
        return Err(invalid("the URL must not be empty"));
    }
    if url.len() > URL_CHARS_MAX {
        return Err(invalid(&format!("the URL must be at most {URL_CHARS_MAX} characters")));
    }
    if url.starts_with("https://") {
        return Err(invalid(
            "the payments fake delivers over plain HTTP; give an http:// URL (Stripe asks for https in live mode only)",
        ));
    }
    match url.parse::<http::Uri>() {
        Ok(uri) if uri.scheme_str() == Some("http") && uri.host().is_some_and(|h| !h.is_empty()) => {
            Ok(url.to_string())
        }
        _ => Err(invalid("the URL must be an absolute http:// URL")),
    }
}

/// `enabled_events`: a non-empty list of event types, or `*` alone.
fn check_events(value: &Value) -> Result<Vec<String>, ApiError> {
    let list: Vec<String> = match value {
        Value::Array(items) => items.iter().map(|v| v.as_str().unwrap_or_default().to_string()).collect(),
        Value::Object(items) => items.values().map(|v| v.as_str().unwrap_or_default().to_string()).collect(),
        Value::String(one) if !one.is_empty() => vec![one.clone()],
        _ => Vec::new(),
    };
    if list.is_empty() {
        return Err(
            ApiError::invalid("Invalid array: enabled_events must not be empty").param("enabled_events")
        );
    }
    for (i, kind) in list.iter().enumerate() {
        let well_formed = kind == "*"
            || (kind.contains('.')
                && kind.split('.').all(|part| {
                    !part.is_empty()
                        && part.bytes().all(|b| b.is_ascii_lowercase() || b == b'_' || b.is_ascii_digit())
                }));
        if !well_formed {
            return Err(ApiError::invalid(format!(
                "Invalid enabled_events[{i}]: {kind:?} is not an event type (such as payment_intent.succeeded) or *"
            ))
            .param(format!("enabled_events[{i}]")));
        }
    }
    Ok(list)
}

/// `POST /v1/webhook_endpoints`, checked: the fingerprint and the commit.
pub(super) fn prepare_create(req: &FakeRequest) -> Result<(String, Commit<PaymentsState>), ApiError> {
    let (fields, params) = read_fields(req, CREATE_PARAMS)?;
    let Some(url) = fields.url.clone() else {
        return Err(ApiError::invalid("Missing required param: url.").param("url"));
    };
    let Some(enabled_events) = fields.enabled_events.clone() else {
        return Err(ApiError::invalid("Missing required param: enabled_events.").param("enabled_events"));
    };
    let fingerprint = format!("{} {}", req.path, Value::Object(params));
    let commit: Commit<PaymentsState> = Box::new(move |inner: &mut Inner<PaymentsState>, mode, stamp| {
        create(inner, mode, stamp, url, enabled_events, fields)
    });
    Ok((fingerprint, commit))
}

fn create(
    inner: &mut Inner<PaymentsState>,
    mode: Mode,
    stamp: &Stamp,
    url: String,
    enabled_events: Vec<String>,
    fields: Fields,
) -> FakeResponse {
    let hooks = &mut inner.state.webhooks;
    if hooks.live_endpoints() >= ENDPOINTS_MAX {
        return stripe_error(&ApiError::invalid(format!(
            "You have reached the maximum of {ENDPOINTS_MAX} test webhook endpoints."
        )));
    }
    let (id, secret) = id_and_secret(hooks.endpoints.len());
    let endpoint = Endpoint {
        id,
        secret,
        url,
        enabled_events,
        description: fields.description,
        metadata: fields.metadata.unwrap_or_default(),
        disabled: false,
        deleted: false,
        created_ms: stamp.now_ms,
    };
    let answer = FakeResponse::json(200, &endpoint.to_json(true));
    if mode == Mode::Apply {
        hooks.endpoints.push(endpoint);
        hooks.listening(stamp.now_ms);
    }
    answer
}

/// `POST /v1/webhook_endpoints/{id}`, checked.
pub(super) fn prepare_update(
    req: &FakeRequest,
    id: String,
) -> Result<(String, Commit<PaymentsState>), ApiError> {
    let (fields, params) = read_fields(req, UPDATE_PARAMS)?;
    let fingerprint = format!("{} {}", req.path, Value::Object(params));
    let commit: Commit<PaymentsState> = Box::new(move |inner: &mut Inner<PaymentsState>, mode, stamp| {
        update(inner, mode, stamp, &id, fields)
    });
    Ok((fingerprint, commit))
}

fn update(
    inner: &mut Inner<PaymentsState>,
    mode: Mode,
    stamp: &Stamp,
    id: &str,
    fields: Fields,
) -> FakeResponse {
    let hooks = &mut inner.state.webhooks;
    let Some(index) = hooks.endpoint_index(id) else {
        return stripe_error(&missing("webhook_endpoint", id).param("webhook_endpoint"));
    };
    let mut endpoint = hooks.endpoints[index].clone();
    if let Some(url) = fields.url {
        endpoint.url = url;
    }
    if let Some(events) = fields.enabled_events {
        endpoint.enabled_events = events;
    }
    if fields.description.is_some() {
        endpoint.description = fields.description;
    }
    if let Some(metadata) = fields.metadata {
        endpoint.metadata = metadata;
    }
    if let Some(disabled) = fields.disabled {
        endpoint.disabled = disabled;
    }
    let answer = FakeResponse::json(200, &endpoint.to_json(false));
    if mode == Mode::Apply {
        let now_disabled = endpoint.disabled;
        hooks.endpoints[index] = endpoint;
        if now_disabled {
            hooks.end_deliveries_to(index);
        } else {
            hooks.listening(stamp.now_ms);
        }
    }
    answer
}

/// `DELETE /v1/webhook_endpoints/{id}`.
pub(super) fn prepare_delete(
    req: &FakeRequest,
    id: String,
) -> Result<(String, Commit<PaymentsState>), ApiError> {
    check_key(req)?;
    let fingerprint = format!("DELETE {}", req.path);
    let commit: Commit<PaymentsState> = Box::new(move |inner: &mut Inner<PaymentsState>, mode, _stamp| {
        let hooks = &mut inner.state.webhooks;
        let Some(index) = hooks.endpoint_index(&id) else {
            return stripe_error(&missing("webhook_endpoint", &id).param("webhook_endpoint"));
        };
        if mode == Mode::Apply {
            hooks.endpoints[index].deleted = true;
            hooks.end_deliveries_to(index);
        }
        FakeResponse::json(200, &json!({"id": id, "object": "webhook_endpoint", "deleted": true}))
    });
    Ok((fingerprint, commit))
}

/// `GET /v1/webhook_endpoints/{id}`.
pub(super) fn retrieve_endpoint(
    inner: &mut Inner<PaymentsState>,
    id: &str,
    visible_until_ms: u64,
) -> FakeResponse {
    let hooks = &inner.state.webhooks;
    match hooks.endpoint_index(id).map(|i| &hooks.endpoints[i]) {
        Some(endpoint) if endpoint.created_ms <= visible_until_ms => {
            FakeResponse::json(200, &endpoint.to_json(false))
        }
        _ => stripe_error(&missing("webhook_endpoint", id).param("webhook_endpoint")),
    }
}

/// `GET /v1/webhook_endpoints`: newest first.
pub(super) fn list_endpoints(
    inner: &mut Inner<PaymentsState>,
    query: &ListQuery,
    visible_until_ms: u64,
) -> FakeResponse {
    let visible: Vec<&Endpoint> = inner
        .state
        .webhooks
        .endpoints
        .iter()
        .rev()
        .filter(|e| !e.deleted && e.created_ms <= visible_until_ms)
        .collect();
    match page(&visible, |e| e.id.as_str(), query, "webhook_endpoint") {
        Ok((endpoints, has_more)) => {
            let data: Vec<Value> = endpoints.iter().map(|e| e.to_json(false)).collect();
            FakeResponse::json(
                200,
                &json!({"object": "list", "url": "/v1/webhook_endpoints", "has_more": has_more, "data": data}),
            )
        }
        Err(e) => stripe_error(&e),
    }
}

/// One attempt to send, ready for the socket (or, in the simulation, for an executor in
/// process): where, what, and signed how.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// The delivery's number, for [`crate::payments::Payments::delivery_attempted`].
    pub delivery: u64,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// How long the endpoint has to answer.
    pub timeout_ms: u64,
}

/// The deliveries due by `now_ms`, each rendered and signed at `wall_s` (unix seconds).
pub(super) fn take_due(state: &mut PaymentsState, now_ms: u64, wall_s: u64) -> Vec<Outgoing> {
    let due = state.webhooks.take_due(now_ms);
    due.into_iter()
        .filter_map(|d| {
            let endpoint = state.webhooks.endpoints.get(d.endpoint)?;
            let genuine =
                || state.events.get(d.event).map(|record| render(state, d.event, record).to_string());
            let (body, signature) = match &d.signed {
                Signed::Genuine => {
                    let body = genuine()?;
                    let signature = sign(&endpoint.secret, wall_s, &body);
                    (body, signature)
                }
                Signed::Stale => {
                    let body = genuine()?;
                    let signature =
                        sign(&endpoint.secret, wall_s.saturating_sub(STALE_SIGNATURE_AGE_S), &body);
                    (body, signature)
                }
                Signed::Forged { body, secret, .. } => (body.to_string(), sign(secret, wall_s, body)),
            };
            let headers = vec![
                ("content-type".to_string(), "application/json; charset=utf-8".to_string()),
                ("user-agent".to_string(), "Stripe/1.0 (+https://stripe.com/docs/webhooks)".to_string()),
                ("stripe-signature".to_string(), signature),
            ];
            Some(Outgoing {
                delivery: d.number,
                url: endpoint.url.clone(),
                headers,
                body,
                timeout_ms: DELIVERY_TIMEOUT_MS,
            })
        })
        .collect()
}

/// Mixed into a forged event's seed: its id and the secret it is signed with are no genuine
/// stream's.
const FORGED_STREAM: u64 = 0x666f_7267_6564_2121;

/// What `POST /__twice/webhooks/forge` takes: the type of the event an attacker claims
/// happened, and the payment intent it claims it of.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Forgery {
    #[serde(rename = "type")]
    kind: String,
    payment_intent: String,
}

/// Forges `forgery` for the endpoints that want it, with [`forge`]; a helper of the payments
/// a scenario makes once an app listens.
pub(super) fn forge_payment(
    state: &mut PaymentsState,
    payment_intent: &str,
    now_ms: u64,
) -> Result<Value, String> {
    let forgery = Forgery { kind: "payment_intent.succeeded".into(), payment_intent: payment_intent.into() };
    forge(state, &forgery, now_ms)
}

/// Queues a forged event, as an attacker who does not hold the endpoint's secret would send
/// it: an id the fake never gave, the payment intent shown as succeeded whatever it really is,
/// signed under a secret of its own. Nothing enters the event log or the ledger. Answers the
/// forged event's id and how many endpoints it goes to.
pub(super) fn forge(state: &mut PaymentsState, forgery: &Forgery, now_ms: u64) -> Result<Value, String> {
    if !forgery.kind.starts_with("payment_intent.") {
        return Err(format!(
            "only payment_intent.* events can be forged (the object forged is the payment intent), not {:?}",
            forgery.kind
        ));
    }
    let number = state.webhooks.deliveries.len() as u64;
    let mut rng = ChaCha8Rng::seed_from_u64(FORGED_STREAM ^ number);
    let event_id = format!("evt_{}", Alphanumeric.sample_string(&mut rng, 24));
    let secret = format!("whsec_{}", Alphanumeric.sample_string(&mut rng, 32));
    let mut object = match state.intents.get(&forgery.payment_intent) {
        Some(history) => history.current().to_json(),
        None => json!({"id": forgery.payment_intent, "object": "payment_intent"}),
    };
    if let Some(map) = object.as_object_mut() {
        map.insert("status".into(), json!("succeeded"));
    }
    let body = json!({
        "id": event_id,
        "object": "event",
        "api_version": super::events::API_VERSION,
        "created": now_ms / 1000,
        "data": {"object": object},
        "livemode": false,
        "pending_webhooks": 1,
        "request": {"id": null, "idempotency_key": null},
        "type": forgery.kind,
    })
    .to_string();
    let endpoints = state.webhooks.forge(&forgery.kind, &body, &secret, &event_id, now_ms);
    Ok(json!({"forged": event_id, "endpoints": endpoints}))
}

/// The endpoints' ids and secrets, for the control API (`GET /__twice/webhooks`): what a test
/// needs to check a signature, without the secret having been kept from the create.
pub(super) fn secrets(state: &PaymentsState) -> BTreeMap<String, String> {
    state.webhooks.endpoints.iter().filter(|e| !e.deleted).map(|e| (e.id.clone(), e.secret.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_secrets_are_stable_distinct_and_shaped_as_stripe_s() {
        let (id, secret) = id_and_secret(0);
        assert_eq!((id.clone(), secret.clone()), id_and_secret(0));
        assert_ne!(id, id_and_secret(1).0);
        assert!(id.starts_with("we_") && id.len() == 27, "{id}");
        assert!(secret.starts_with("whsec_") && secret.len() == 38, "{secret}");
    }

    #[test]
    fn a_url_must_be_plain_http_and_event_types_well_formed() {
        assert!(check_url("http://127.0.0.1:8080/hooks").is_ok());
        let https = check_url("https://example.com/hooks").unwrap_err();
        assert!(https.message.contains("plain HTTP"), "{}", https.message);
        assert!(check_url("/hooks").is_err());
        assert!(check_events(&json!(["*"])).is_ok());
        assert!(check_events(&json!(["payment_intent.succeeded", "charge.refunded"])).is_ok());
        let bad = check_events(&json!(["payment_intent.succeeded", "Refund Created"])).unwrap_err();
        assert_eq!(bad.param.as_deref(), Some("enabled_events[1]"));
        assert!(check_events(&json!([])).is_err());
    }
}
