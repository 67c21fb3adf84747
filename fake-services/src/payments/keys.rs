//! The API key a request carries ([`authorize`]: Stripe's 401 without one) and restricted keys
//! (`rk_...`): the [`Permission`]s each was given, and the 403 of a request that needs another.
//! Any other key may do everything, as a secret key may. With strict keys on, a key that was
//! not seeded (a secret or a restricted one) is Stripe's 401 for a key it never issued.

use super::PaymentsState;
use super::params::KEY_CHARS_MAX;
use crate::core::{ApiError, Inner, ServiceCore};
use crate::wire::FakeRequest;

/// A restricted key's permission on one resource, by Stripe's name for it. A write
/// permission includes the read one, as Stripe's "Write" does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Permission {
    RefundRead,
    RefundWrite,
    PaymentIntentRead,
    PaymentIntentWrite,
    /// Reading events; there is no event write.
    EventRead,
    WebhookRead,
    WebhookWrite,
}

impl Permission {
    pub(super) const ALL: [Permission; 7] = [
        Permission::RefundRead,
        Permission::RefundWrite,
        Permission::PaymentIntentRead,
        Permission::PaymentIntentWrite,
        Permission::EventRead,
        Permission::WebhookRead,
        Permission::WebhookWrite,
    ];

    /// Stripe's name, as its 403 says which permission is missing.
    pub fn name(self) -> &'static str {
        match self {
            Permission::RefundRead => "rak_refund_read",
            Permission::RefundWrite => "rak_refund_write",
            Permission::PaymentIntentRead => "rak_payment_intent_read",
            Permission::PaymentIntentWrite => "rak_payment_intent_write",
            Permission::EventRead => "rak_event_read",
            Permission::WebhookRead => "rak_webhook_read",
            Permission::WebhookWrite => "rak_webhook_write",
        }
    }

    pub fn parse(name: &str) -> Option<Permission> {
        Permission::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The write permission that includes this one.
    fn write(self) -> Permission {
        match self {
            Permission::RefundRead | Permission::RefundWrite => Permission::RefundWrite,
            Permission::PaymentIntentRead | Permission::PaymentIntentWrite => Permission::PaymentIntentWrite,
            Permission::EventRead => Permission::EventRead,
            Permission::WebhookRead | Permission::WebhookWrite => Permission::WebhookWrite,
        }
    }
}

/// The API key of a request, or Stripe's 401 without one.
pub(super) fn authorize(req: &FakeRequest) -> Result<&str, ApiError> {
    let no_key = || {
        ApiError::new(
            401,
            "invalid_request_error",
            "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY').",
        )
    };
    // Looked up by the ready-made name: a `&str` is parsed into a header name on every lookup.
    let value = req.headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let Some(value) = value else { return Err(no_key()) };
    let token = value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("Basic ")).map(str::trim);
    match token {
        Some(t) if !t.is_empty() => Ok(t),
        _ => Err(ApiError::new(401, "invalid_request_error", "Invalid API Key provided.")),
    }
}

/// `key` if the account accepts it: any key, unless strict keys are on; then only a seeded
/// secret or restricted key. Stripe answers a key it never issued with a 401 whose message
/// shows the key redacted.
pub(super) fn accepted<'k>(core: &ServiceCore<PaymentsState>, key: &'k str) -> Result<&'k str, ApiError> {
    let inner = core.lock();
    let state = &inner.state;
    if !state.strict_keys || state.secret_keys.contains(key) || state.restricted_keys.contains_key(key) {
        return Ok(key);
    }
    Err(ApiError::new(401, "invalid_request_error", format!("Invalid API Key provided: {}", redacted(key))))
}

/// Whether `key` may make a request that needs `needed`: a restricted key needs it, or the
/// write permission that includes it.
pub(super) fn permitted(
    core: &ServiceCore<PaymentsState>,
    key: &str,
    needed: Permission,
) -> Result<(), ApiError> {
    // Only an `rk_` key can be restricted (seeding refuses any other): a secret key needs
    // no look at the state, nor the lock every request of the service waits for.
    if !key.starts_with("rk_") {
        return Ok(());
    }
    let inner = core.lock();
    let Some(granted) = inner.state.restricted_keys.get(key) else { return Ok(()) };
    if granted.contains(&needed) || granted.contains(&needed.write()) {
        return Ok(());
    }
    Err(ApiError::new(
        403,
        "invalid_request_error",
        format!(
            "The provided key '{}' does not have the required permissions for this endpoint on account '{ACCOUNT}'. Having the '{}' permission would allow this request to continue.",
            redacted(key),
            needed.name()
        ),
    ))
}

/// The account every key belongs to, as Stripe names it in a permission error.
const ACCOUNT: &str = "acct_twice";

/// A key as Stripe shows it in an error: its prefix and its last four characters.
fn redacted(key: &str) -> String {
    let prefix_len = key.match_indices('_').nth(1).map_or(3.min(key.len()), |(at, _)| at + 1);
    let tail_len = 4.min(key.len().saturating_sub(prefix_len));
    let (prefix, tail) = (&key[..prefix_len], &key[key.len() - tail_len..]);
    format!("{prefix}{}{tail}", "*".repeat(key.len() - prefix_len - tail_len))
}

pub(super) fn seed_secret_key(inner: &mut Inner<PaymentsState>, key: &str) -> Result<(), String> {
    let printable = key.bytes().all(|b| b.is_ascii_graphic());
    if !key.starts_with("sk_") || key.len() < 8 || key.len() > KEY_CHARS_MAX || !printable {
        return Err(format!(
            "a secret key is \"sk_\" and at least 5 more printable characters, not \"{key}\""
        ));
    }
    inner.state.secret_keys.insert(key.to_string());
    Ok(())
}

pub(super) fn seed_restricted_key(
    inner: &mut Inner<PaymentsState>,
    key: &str,
    permissions: &[Permission],
) -> Result<(), String> {
    let printable = key.bytes().all(|b| b.is_ascii_graphic());
    if !key.starts_with("rk_") || key.len() < 8 || key.len() > KEY_CHARS_MAX || !printable {
        return Err(format!(
            "a restricted key is \"rk_\" and at least 5 more printable characters, not \"{key}\""
        ));
    }
    inner.state.restricted_keys.insert(key.to_string(), permissions.iter().copied().collect());
    Ok(())
}
