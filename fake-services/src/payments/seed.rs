//! What a test seeds through the control API (`POST /__twice/seed`) or [`Payments`]' methods:
//! payment intents that have succeeded, to refund, restricted keys, secret keys, and whether
//! only the seeded keys are accepted.
//!
//! [`Payments`]: super::Payments

use serde::Deserialize;
use serde_json::{Value, json};

use super::PaymentsState;
use super::event_log::Happened;
use super::intents;
use super::keys::{Permission, seed_restricted_key, seed_secret_key};
use crate::core::Inner;
use crate::fault_engine::WebhookPlan;

/// A seeded payment intent that refunds can draw on: it has succeeded, and its whole amount
/// was received on `charge`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentIntent {
    pub id: String,
    pub charge: String,
    pub amount: u64,
    pub currency: String,
}

pub(super) fn seed_intent(
    inner: &mut Inner<PaymentsState>,
    id: Option<&str>,
    amount: u64,
    currency: &str,
    now_ms: u64,
) -> Result<PaymentIntent, String> {
    if amount == 0 {
        return Err("a payment intent needs an amount of at least 1".into());
    }
    let id = match id {
        Some(id) if id.is_empty() || id.contains('/') => {
            return Err(format!("invalid payment intent id \"{id}\""));
        }
        Some(id) => id.to_string(),
        None => inner.new_id("pi_", 24),
    };
    if inner.state.intents.contains_key(&id) {
        return Err(format!("payment intent \"{id}\" already exists"));
    }
    let charge = format!("ch_{}", id.strip_prefix("pi_").unwrap_or(&id));
    let intent =
        PaymentIntent { id: id.clone(), charge: charge.clone(), amount, currency: currency.to_string() };
    inner.state.charges.insert(charge.clone(), id.clone());
    let number = inner.state.intents.len();
    inner
        .state
        .intents
        .insert(id.clone(), intents::seeded(number, id.clone(), charge, amount, currency, now_ms));
    // A seeded intent has succeeded, before anything the scenario does.
    inner.state.happened(Happened::IntentSucceeded { intent: id }, now_ms, None, WebhookPlan::default());
    Ok(intent)
}

/// Seeds `id` unpaid (`requires_confirmation`, a test card on it), for the customer to pay
/// later ([`super::intents::customer_pays`]).
pub(super) fn seed_unpaid_intent(
    inner: &mut Inner<PaymentsState>,
    id: &str,
    amount: u64,
    currency: &str,
    now_ms: u64,
) -> Result<(), String> {
    if amount == 0 {
        return Err("a payment intent needs an amount of at least 1".into());
    }
    if id.is_empty() || id.contains('/') {
        return Err(format!("invalid payment intent id \"{id}\""));
    }
    if inner.state.intents.contains_key(id) {
        return Err(format!("payment intent \"{id}\" already exists"));
    }
    let number = inner.state.intents.len();
    inner
        .state
        .intents
        .insert(id.to_string(), intents::seeded_unpaid(number, id.to_string(), amount, currency, now_ms));
    Ok(())
}

pub(super) fn seed_from_json(
    inner: &mut Inner<PaymentsState>,
    body: &[u8],
    now_ms: u64,
) -> Result<Value, String> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Seed {
        #[serde(default)]
        payment_intents: Vec<SeedIntent>,
        #[serde(default)]
        restricted_keys: Vec<SeedKey>,
        #[serde(default)]
        secret_keys: Vec<String>,
        strict_keys: Option<bool>,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct SeedKey {
        key: String,
        permissions: Vec<String>,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct SeedIntent {
        id: Option<String>,
        amount: u64,
        #[serde(default = "usd")]
        currency: String,
    }
    fn usd() -> String {
        "usd".into()
    }
    let seed: Seed = serde_json::from_slice(body).map_err(|e| {
        format!(
            "expected {{\"payment_intents\": [{{\"id\": \"pi_1\", \"amount\": 5000}}], \"restricted_keys\": [{{\"key\": \"rk_test_x\", \"permissions\": [\"rak_refund_read\"]}}], \"secret_keys\": [\"sk_test_x\"], \"strict_keys\": true}}: {e}"
        )
    })?;
    let mut seeded = Vec::new();
    for s in seed.payment_intents {
        let pi = seed_intent(inner, s.id.as_deref(), s.amount, &s.currency, now_ms)?;
        seeded.push(json!({"id": pi.id, "charge": pi.charge, "amount": pi.amount, "currency": pi.currency}));
    }
    let mut keys = Vec::new();
    for k in seed.restricted_keys {
        let permissions = k
            .permissions
            .iter()
            .map(|name| {
                Permission::parse(name).ok_or_else(|| {
                    let known: Vec<&str> = Permission::ALL.iter().map(|p| p.name()).collect();
                    format!("unknown permission \"{name}\"; known: {}", known.join(", "))
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        seed_restricted_key(inner, &k.key, &permissions)?;
        keys.push(json!({"key": k.key, "permissions": k.permissions}));
    }
    for key in &seed.secret_keys {
        seed_secret_key(inner, key)?;
    }
    if let Some(strict) = seed.strict_keys {
        inner.state.strict_keys = strict;
    }
    let strict = inner.state.strict_keys;
    Ok(
        json!({"payment_intents": seeded, "restricted_keys": keys, "secret_keys": seed.secret_keys, "strict_keys": strict}),
    )
}
