//! Resend's error shape, `{"statusCode": 422, "message": "...", "name": "validation_error"}`,
//! and the errors the shared pipeline raises in Stripe's words, said in Resend's.

use serde_json::json;

use crate::core::ApiError;
use crate::wire::FakeResponse;

/// The kind of every error this fake raises itself; its `code` is Resend's `name`.
const RESEND: &str = "resend_error";

/// An error with Resend's `name`.
pub(crate) fn resend(status: u16, name: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::new(status, RESEND, message).code(name)
}

/// 422 `validation_error`: a field is there but not as Resend takes it.
pub(crate) fn invalid(message: impl Into<String>) -> ApiError {
    resend(422, "validation_error", message)
}

/// 422 `missing_required_field`, with Resend's wording.
pub(crate) fn missing(field: &str) -> ApiError {
    resend(422, "missing_required_field", format!("Missing `{field}` field."))
}

pub(crate) fn not_found() -> ApiError {
    resend(404, "not_found", "The requested endpoint does not exist.")
}

pub(crate) fn wrong_method() -> ApiError {
    resend(405, "method_not_allowed", "Method is not allowed for the requested path.")
}

/// The name Resend gives an error of `status` that carries no name of its own (a `reject`
/// fault's, a failure inside, a body the transport refused).
fn name_for(status: u16) -> &'static str {
    match status {
        401 => "missing_api_key",
        403 => "invalid_api_key",
        404 => "not_found",
        405 => "method_not_allowed",
        409 => "concurrent_idempotent_requests",
        429 => "rate_limit_exceeded",
        451 => "security_error",
        500 => "application_error",
        400..=499 => "validation_error",
        _ => "internal_server_error",
    }
}

/// Resend's error body. The shared pipeline's key errors come in Stripe's terms (a 400
/// `idempotency_error` for another payload under a key, a 409 `idempotency_key_in_use` for a
/// key in flight) and are said here as Resend says them: both are 409s.
pub(crate) fn error_body(error: &ApiError) -> FakeResponse {
    let (status, name, message) = match (error.kind, error.code) {
        ("idempotency_error", _) => (
            409,
            "invalid_idempotent_request",
            "Same idempotency key used with a different request payload.".to_string(),
        ),
        (_, Some("idempotency_key_in_use")) => (
            409,
            "concurrent_idempotent_requests",
            "Same idempotency key used while original request is still in progress.".to_string(),
        ),
        (RESEND, Some(name)) => (error.status, name, error.message.clone()),
        _ => (error.status, name_for(error.status), error.message.clone()),
    };
    // Resend tells a client over its rate limit when to come back: the shared pipeline puts
    // `Retry-After` on this 429, as on every service's (`crate::core::RETRY_AFTER_S`).
    FakeResponse::json(status, &json!({"statusCode": status, "message": message, "name": name}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(error: &ApiError) -> (u16, serde_json::Value) {
        let response = error_body(error);
        (response.status, response.body_json().unwrap())
    }

    #[test]
    fn every_error_has_resends_three_fields() {
        let cases = [
            (missing("to"), 422, "missing_required_field", "Missing `to` field."),
            (ApiError::internal(500), 500, "application_error", "An unknown error occurred"),
            (ApiError::internal(503), 503, "internal_server_error", "An unknown error occurred"),
            (
                ApiError::new(429, "api_error", "The request was rejected."),
                429,
                "rate_limit_exceeded",
                "rejected",
            ),
            (ApiError::new(413, "invalid_request_error", "too large"), 413, "validation_error", "too large"),
            (
                ApiError::new(400, "idempotency_error", "x"),
                409,
                "invalid_idempotent_request",
                "different request payload",
            ),
            (
                ApiError::new(409, "invalid_request_error", "x").code("idempotency_key_in_use"),
                409,
                "concurrent_idempotent_requests",
                "still in progress",
            ),
        ];
        for (error, status, name, says) in cases {
            let (got, body) = shape(&error);
            assert_eq!(got, status, "{error:?}");
            assert_eq!(body["statusCode"], status, "{body}");
            assert_eq!(body["name"], name, "{body}");
            assert!(body["message"].as_str().unwrap().contains(says), "{body}");
        }
    }
}
