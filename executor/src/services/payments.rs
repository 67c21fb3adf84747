//! `payments.refund` (Stripe-style refunds): the metadata key a refund carries the intent's
//! id under, and the API key its requests are authorised with. Its write, answers and list
//! lookup follow the JSON API conventions it shares with workspaces, in the parent module.

use vocabulary::protocol::Config;

/// The metadata key under which a refund carries the intent's id, so that a lookup can tell
/// this intent's refund from any other refund of the same payment intent.
pub const INTENT_METADATA_KEY: &str = "twice_intent";

/// The API key refunds are created and listed with.
pub(super) fn api_key(config: &Config) -> &str {
    config.secrets.get("payments_api_key").map(String::as_str).unwrap_or("sk_test_twice")
}
