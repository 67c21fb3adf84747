//! Stripe's error envelope, which every answer of the payments fake that is not a success
//! wears, and the 404 of an object that is not there.

use bytes::Bytes;
use serde_json::{Map, json};

use crate::core::ApiError;
use crate::wire::FakeResponse;

/// Stripe's error envelope, with `Stripe-Should-Retry` where Stripe would send it.
pub(super) fn stripe_error(error: &ApiError) -> FakeResponse {
    let mut body = Map::new();
    body.insert("type".into(), json!(error.kind));
    body.insert("message".into(), json!(error.message));
    if let Some(code) = error.code {
        body.insert("code".into(), json!(code));
    }
    if let Some(param) = &error.param {
        body.insert("param".into(), json!(param));
    }
    let response = FakeResponse::json(error.status, &json!({"error": body}));
    match (error.code, error.status) {
        (Some("idempotency_key_in_use"), _) => response.with_header("Stripe-Should-Retry", "true"),
        (_, 400..=499) => response.with_header("Stripe-Should-Retry", "false"),
        _ => response,
    }
}

/// A JSON answer of `body`, with the headers [`FakeResponse::json_of`] gives one.
pub(super) fn json_answer(status: u16, body: Vec<u8>) -> FakeResponse {
    // Room for the headers the pipeline adds (request id, idempotency key, replay), as
    // `json_of` leaves.
    let mut headers = Vec::with_capacity(4);
    headers.push(("content-type".into(), "application/json".into()));
    // A boxed slice becomes `Bytes` without a shared header to allocate; `body` is exactly as
    // long as it holds, so boxing it moves nothing.
    FakeResponse { status, headers, body: Bytes::from(body.into_boxed_slice()) }
}

/// The 404 of an object that is not there, as Stripe words it.
pub(super) fn missing(what: &str, id: &str) -> ApiError {
    ApiError::new(404, "invalid_request_error", format!("No such {what}: '{id}'"))
        .code("resource_missing")
        .param(what)
}
