//! Stripe's webhook signature: `Stripe-Signature: t=<unix seconds>,v1=<hex>`, the format
//! `vocabulary::webhook::stripe_signature` defines. stripe-python's
//! `Webhook.construct_event` and stripe-node's `webhooks.constructEvent` check it unchanged,
//! and refuse a `t` more than `vocabulary::webhook::SIGNATURE_TOLERANCE_S` older than their own wall clock, so
//! `t` is the wall clock's, not the service clock's (which a scenario may have jumped).

/// The `Stripe-Signature` header of `body` sent at `t_s` (unix seconds) under `secret`.
pub fn sign(secret: &str, t_s: u64, body: &str) -> String {
    vocabulary::webhook::stripe_signature(secret, t_s, body.as_bytes())
}
