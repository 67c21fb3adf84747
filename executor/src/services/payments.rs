//! `payments.refund` (Stripe-style refunds): the metadata key a refund carries the intent's
//! id under, and the API key its requests are authorised with; and what receiving webhooks
//! asks of the payments API (registering an endpoint, moving it or reading it back, reading a
//! payment now, listing events). Its write, answers and list lookup follow the JSON API
//! conventions it shares with workspaces, in the parent module.

use vocabulary::protocol::{Config, Service};

use crate::world::HttpRequest;

/// The metadata key under which a refund carries the intent's id, so that a lookup can tell
/// this intent's refund from any other refund of the same payment intent.
pub const INTENT_METADATA_KEY: &str = "twice_intent";

/// The API key refunds are created and listed with.
pub(super) fn api_key(config: &Config) -> &str {
    config.secrets.get("payments_api_key").map(String::as_str).unwrap_or("sk_test_twice")
}

/// A request of the payments API at `path_and_query`, authorised with the API key; a
/// `form`, where given, is its body.
fn request(
    service: &Service,
    config: &Config,
    method: &'static str,
    path_and_query: &str,
    form: Option<String>,
) -> HttpRequest {
    let mut headers = vec![("authorization".to_string(), format!("Bearer {}", api_key(config)))];
    if form.is_some() {
        headers.push(("content-type".into(), "application/x-www-form-urlencoded".into()));
    }
    HttpRequest {
        method,
        url: format!("{}{path_and_query}", super::base(service)),
        headers,
        body: form.unwrap_or_default().into_bytes(),
        timeout_ms: config.limits.request_timeout_ms,
    }
}

/// The `POST /v1/webhook_endpoints` that registers worker `worker_id`'s endpoint at `url` for
/// `event_types`, under an idempotency key of the worker's own, so that a registration whose
/// answer was lost and is sent again makes one endpoint where the service honours keys.
pub fn register_endpoint(service: &Service, config: &Config, url: &str, event_types: &[&str]) -> HttpRequest {
    let mut form = form_urlencoded::Serializer::new(String::new());
    form.append_pair("url", url);
    for event_type in event_types {
        form.append_pair("enabled_events[]", event_type);
    }
    form.append_pair("description", &format!("twice-executor worker {}", config.worker_id));
    let mut request = request(service, config, "POST", "/v1/webhook_endpoints", Some(form.finish()));
    request.headers.push(("idempotency-key".into(), format!("twice-endpoint-{}", config.worker_id)));
    request
}

/// The `POST /v1/webhook_endpoints/{id}` that moves endpoint `id` to `url` (a restarted
/// worker listens on another port).
pub fn move_endpoint(service: &Service, config: &Config, id: &str, url: &str) -> HttpRequest {
    let form = form_urlencoded::Serializer::new(String::new()).append_pair("url", url).finish();
    request(service, config, "POST", &format!("/v1/webhook_endpoints/{id}"), Some(form))
}

/// The `GET /v1/payment_intents/{id}` that reads a payment's state now (what an event says of
/// it may be stale, or forged).
pub fn read_payment_intent(service: &Service, config: &Config, id: &str) -> HttpRequest {
    request(service, config, "GET", &format!("/v1/payment_intents/{id}"), None)
}

/// The `GET /v1/events?type=...` that lists the service's own events of a type, newest first:
/// what a worker that may have missed a delivery reads them from (the API is authenticated,
/// so what it lists is genuine).
pub fn list_events(service: &Service, config: &Config, event_type: &str) -> HttpRequest {
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("type", event_type)
        .append_pair("limit", "100")
        .finish();
    request(service, config, "GET", &format!("/v1/events?{query}"), None)
}

/// The `GET /v1/webhook_endpoints/{id}` that reads an endpoint back: where acks may lie, a
/// registration's 200 proves nothing until the endpoint shows.
pub fn read_endpoint(service: &Service, config: &Config, id: &str) -> HttpRequest {
    request(service, config, "GET", &format!("/v1/webhook_endpoints/{id}"), None)
}
