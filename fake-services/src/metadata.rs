//! Stripe's metadata: the key-value pairs a caller attaches to an object it creates, to find
//! its own write again (a refund's `metadata[twice_intent]`), kept as given and echoed on
//! every read. Payments (refunds and PaymentIntents) and workspaces, a Stripe-style API, hold
//! it to Stripe's limits, each refused in Stripe's words.

use serde_json::{Map, Value};

use crate::core::ApiError;

/// Most keys one object's metadata holds (Stripe's limit).
pub const KEYS_MAX: usize = 50;
/// Longest metadata key, in characters (Stripe's limit).
pub const KEY_CHARS_MAX: usize = 40;
/// Longest metadata value, in characters (Stripe's limit).
pub const VALUE_CHARS_MAX: usize = 500;

/// `metadata` checked against Stripe's limits: at most [`KEYS_MAX`] keys of at most
/// [`KEY_CHARS_MAX`] characters, each value a string of at most [`VALUE_CHARS_MAX`].
pub(crate) fn check(metadata: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    if metadata.len() > KEYS_MAX {
        return Err(ApiError::invalid(format!("Metadata can have up to {KEYS_MAX} keys.")).param("metadata"));
    }
    for (k, v) in metadata {
        let Value::String(v) = v else {
            return Err(ApiError::invalid(format!("Invalid value for metadata[{k}]: must be a string"))
                .param("metadata"));
        };
        if k.chars().count() > KEY_CHARS_MAX || v.chars().count() > VALUE_CHARS_MAX {
            return Err(ApiError::invalid(format!(
                "Metadata keys can be up to {KEY_CHARS_MAX} characters long and values up to {VALUE_CHARS_MAX} characters long."
            ))
            .param(format!("metadata[{k}]")));
        }
    }
    Ok(metadata.clone())
}
