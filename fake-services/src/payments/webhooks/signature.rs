//! Stripe's webhook signature: `Stripe-Signature: t=<unix seconds>,v1=<hex>`, where the hex is
//! HMAC-SHA256 under the endpoint's whole secret (`whsec_…`, prefix included) of
//! `"<t>.<body>"`. stripe-python's `Webhook.construct_event` and stripe-node's
//! `webhooks.constructEvent` check it unchanged, and refuse a `t` more than
//! [`SIGNATURE_TOLERANCE_S`] older than their own wall clock, so `t` is the wall clock's, not
//! the service clock's (which a scenario may have jumped).

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The SDKs' default tolerance for a signature's age.
pub const SIGNATURE_TOLERANCE_S: u64 = 300;

/// The `Stripe-Signature` header of `body` sent at `t_s` (unix seconds) under `secret`.
pub fn sign(secret: &str, t_s: u64, body: &str) -> String {
    // An HMAC takes a key of any length: `new_from_slice` cannot fail for it.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts keys of every length"),
    };
    mac.update(t_s.to_string().as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("t={t_s},v1={hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The header stripe-python's `WebhookSignature.generate_signature_header` writes for the
    /// same secret, time and body (computed with Python's `hmac`).
    #[test]
    fn the_header_is_t_and_the_hmac_sha256_of_t_dot_body() {
        let header = sign("whsec_test", 1_700_000_000, "{\"id\":\"evt_1\"}");
        assert_eq!(
            header,
            "t=1700000000,v1=c89214b5b5da833daed6f0b8c5bb6bd58cea9022bd80ccc78230f3942d632925"
        );
    }
}
