//! Stripe's checks of a request's parameters, shared by refunds and PaymentIntents: the
//! `Idempotency-Key`, unknown parameters, strings, amounts and metadata, each refused in
//! Stripe's words.

use http::header::HeaderName;
use serde_json::{Map, Value};

use crate::core::ApiError;
use crate::wire::FakeRequest;

/// Stripe's limit on a key's length: an `Idempotency-Key`, and the fake holds a restricted
/// key to it too.
pub(super) const KEY_CHARS_MAX: usize = 255;

/// Stripe's limits on an `Idempotency-Key`: at most 255 characters of printable ASCII.
pub(super) fn check_key(req: &FakeRequest) -> Result<(), ApiError> {
    // Looked up by a ready-made name: a `&str` is parsed into a header name on every lookup.
    match req.headers.get(&IDEMPOTENCY_KEY).map(|v| v.to_str()) {
        Some(Ok(key)) if key.len() > KEY_CHARS_MAX => {
            return Err(ApiError::invalid(format!(
                "Idempotency-Key must be at most {KEY_CHARS_MAX} characters long."
            )));
        }
        Some(Err(_)) => return Err(ApiError::invalid("Idempotency-Key must be printable ASCII.")),
        Some(Ok(_)) | None => {}
    }
    Ok(())
}

/// The `Idempotency-Key` header's name.
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The first parameter that is not one of `known`, as Stripe reports it.
pub(super) fn unknown_parameters(params: &Map<String, Value>, known: &[&str]) -> Result<(), ApiError> {
    match params.keys().find(|name| !known.contains(&name.as_str())) {
        Some(name) => {
            Err(ApiError::invalid(format!("Received unknown parameter: {name}")).param(name.clone()))
        }
        None => Ok(()),
    }
}

pub(super) fn optional_string(params: &Map<String, Value>, name: &str) -> Result<Option<String>, ApiError> {
    match params.get(name) {
        None => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        Some(_) => Err(not_a_string(name)),
    }
}

/// [`optional_string`] of a form value that is text (a name without brackets), borrowed.
pub(super) fn optional_text<'a>(value: Option<&'a str>, name: &str) -> Result<Option<&'a str>, ApiError> {
    match value {
        Some("") => Err(not_a_string(name)),
        value => Ok(value),
    }
}

fn not_a_string(name: &str) -> ApiError {
    ApiError::invalid(format!("Invalid string: {name} must be a non-empty string")).param(name)
}

pub(super) fn positive_integer(value: &Value, name: &str) -> Result<u64, ApiError> {
    positive_integer_text(value.as_str().unwrap_or_default(), name)
}

/// [`positive_integer`] of a form value that is text.
pub(super) fn positive_integer_text(text: &str, name: &str) -> Result<u64, ApiError> {
    match text.parse::<u64>() {
        Ok(0) => Err(ApiError::invalid("This value must be greater than or equal to 1.").param(name)),
        Ok(n) if n <= 99_999_999 => Ok(n),
        Ok(_) => Err(ApiError::invalid("This value must be less than or equal to 99999999.").param(name)),
        Err(_) => Err(ApiError::invalid(format!("Invalid integer: {text}")).param(name)),
    }
}

/// Stripe's limits on metadata (`crate::metadata`, which workspaces share).
pub(super) fn check_metadata(metadata: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    crate::metadata::check(metadata)
}
