//! Intents a webhook triggers, as `twice/1` carries them (`docs/protocol.md` §3.2, "Intents
//! an event starts"). An executor that announces [`WEBHOOKS_FEATURE`] receives such an intent
//! in `propose` with an `on_event`: it registers a webhook endpoint of its own with the
//! payments service (it has the URL and the key) and carries the intent out once a genuine
//! event of that type for that object reaches it, once however often the event comes.

use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// The feature an executor announces in `init_ok.features` when it receives webhooks. The
/// harness proposes no triggered intent to one that does not, and reports those intents as
/// unsupported.
pub const WEBHOOKS_FEATURE: &str = "webhooks";

/// The event that starts an intent: its type, and the object it is about (for
/// `payment_intent.succeeded`, the payment intent's id). Whether the event will be genuine
/// is the harness's secret: an executor learns it from the signature, as an app would.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OnEvent {
    #[serde(rename = "type")]
    pub kind: String,
    pub payment_intent: String,
}

/// The name of the header Stripe signs its deliveries in.
pub const SIGNATURE_HEADER: &str = "stripe-signature";

/// How old a signature may be, as the SDKs check it by default (stripe-python's and
/// stripe-node's tolerance): an older one is a replay.
pub const SIGNATURE_TOLERANCE_S: u64 = 300;

/// The `Stripe-Signature` header of `body` sent at `t_s` (unix seconds) under `secret`:
/// `t=<t_s>,v1=<hex of HMAC-SHA256(secret, "<t_s>.<body>")>`, the secret's `whsec_` prefix
/// included in the key.
pub fn stripe_signature(secret: &str, t_s: u64, body: &[u8]) -> String {
    format!("t={t_s},v1={}", hex(&hmac_sha256(secret, t_s, body)))
}

fn hmac_sha256(secret: &str, t_s: u64, body: &[u8]) -> Vec<u8> {
    // An HMAC takes a key of any length: `new_from_slice` cannot fail for it.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts keys of every length"),
    };
    mac.update(t_s.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Why a delivery's signature is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureError {
    /// No header, or one without `t=` and a `v1=`.
    Malformed,
    /// No `v1` is the HMAC of this body at this time under this secret.
    Mismatch,
    /// Signed more than [`SIGNATURE_TOLERANCE_S`] from `now_s`: a replay.
    Stale { age_s: u64 },
}

impl std::fmt::Display for SignatureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SignatureError::Malformed => write!(f, "no Stripe-Signature with t= and v1="),
            SignatureError::Mismatch => {
                write!(f, "no signature matches the body under the endpoint's secret")
            }
            SignatureError::Stale { age_s } => {
                write!(f, "signed {age_s} s ago, more than the {SIGNATURE_TOLERANCE_S} s tolerated")
            }
        }
    }
}

/// Checks a `Stripe-Signature` header as the SDKs' `construct_event` does: some `v1` is the
/// HMAC of `t.body` under `secret`, and `t` is within [`SIGNATURE_TOLERANCE_S`] of `now_s`.
pub fn verify_stripe_signature(
    header: Option<&str>,
    body: &[u8],
    secret: &str,
    now_s: u64,
) -> Result<(), SignatureError> {
    let header = header.ok_or(SignatureError::Malformed)?;
    let mut t_s = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t_s = v.parse::<u64>().ok(),
            Some(("v1", v)) => signatures.push(v.to_string()),
            _ => {}
        }
    }
    let t_s = t_s.ok_or(SignatureError::Malformed)?;
    if signatures.is_empty() {
        return Err(SignatureError::Malformed);
    }
    let expected = hex(&hmac_sha256(secret, t_s, body));
    // Compared whole: a length or prefix never tells more than a mismatch.
    if !signatures.iter().any(|s| constant_time_eq(s.as_bytes(), expected.as_bytes())) {
        return Err(SignatureError::Mismatch);
    }
    let age_s = now_s.abs_diff(t_s);
    if age_s > SIGNATURE_TOLERANCE_S {
        return Err(SignatureError::Stale { age_s });
    }
    Ok(())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The header stripe-python's `WebhookSignature.generate_signature_header` writes for the
    /// same secret, time and body (computed with Python's `hmac`).
    #[test]
    fn the_header_is_t_and_the_hmac_sha256_of_t_dot_body() {
        let header = stripe_signature("whsec_test", 1_700_000_000, b"{\"id\":\"evt_1\"}");
        assert_eq!(
            header,
            "t=1700000000,v1=c89214b5b5da833daed6f0b8c5bb6bd58cea9022bd80ccc78230f3942d632925"
        );
    }

    #[test]
    fn a_signature_is_accepted_fresh_and_refused_forged_altered_stale_or_malformed() {
        let body = b"{\"id\":\"evt_1\"}";
        let t = 1_700_000_000;
        let good = stripe_signature("whsec_a", t, body);
        assert_eq!(verify_stripe_signature(Some(&good), body, "whsec_a", t + 10), Ok(()));
        let two = format!("{},v1=00", good);
        assert_eq!(verify_stripe_signature(Some(&two), body, "whsec_a", t), Ok(()));
        let forged = stripe_signature("whsec_guess", t, body);
        assert_eq!(verify_stripe_signature(Some(&forged), body, "whsec_a", t), Err(SignatureError::Mismatch));
        assert_eq!(verify_stripe_signature(Some(&good), b"{}", "whsec_a", t), Err(SignatureError::Mismatch));
        assert_eq!(
            verify_stripe_signature(Some(&good), body, "whsec_a", t + 600),
            Err(SignatureError::Stale { age_s: 600 })
        );
        for bad in [None, Some(""), Some("v1=abc"), Some("t=1")] {
            assert_eq!(
                verify_stripe_signature(bad, body, "whsec_a", t),
                Err(SignatureError::Malformed),
                "{bad:?}"
            );
        }
    }
}
