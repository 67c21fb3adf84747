//! Intents that exist before anything the scenario does: seeded succeeded, or seeded unpaid
//! for the customer to pay once an application listens.

use serde_json::Map;

use super::{History, Intent, Status, succeed};
use crate::core::Inner;
use crate::fault_engine::WebhookPlan;
use crate::payments::PaymentsState;
use crate::payments::event_log::Happened;

/// A seeded intent the customer has not paid yet: it needs only its confirmation (a test
/// card is on it), which [`customer_pays`] gives.
pub(in crate::payments) fn seeded_unpaid(
    number: usize,
    id: String,
    amount: u64,
    currency: &str,
    now_ms: u64,
) -> History {
    let mut intent = seed(id, amount, currency, now_ms);
    intent.status = Status::RequiresConfirmation;
    History::new(number, 0, intent)
}

/// The customer pays the unpaid intent `id`: it succeeds and is charged, and its
/// `payment_intent.succeeded` event goes out, its webhooks as `plan` says. What happens
/// outside the API's callers, as a seed does: no ledger effect, no journal entry.
pub(in crate::payments) fn customer_pays(
    inner: &mut Inner<PaymentsState>,
    id: &str,
    now_ms: u64,
    plan: WebhookPlan,
) -> Result<(), String> {
    let current = inner
        .state
        .intents
        .get(id)
        .map(|h| h.current().clone())
        .ok_or_else(|| format!("no payment intent \"{id}\" to pay"))?;
    if !matches!(current.status, Status::RequiresConfirmation | Status::RequiresPaymentMethod) {
        return Err(format!(
            "payment intent \"{id}\" is {}: only an unpaid one can be paid",
            current.status.as_str()
        ));
    }
    let mut intent = current;
    succeed(inner, &mut intent, "pm_card_visa".into());
    if let Some(charge) = &intent.latest_charge {
        inner.state.charges.insert(charge.clone(), intent.id.clone());
    }
    if let Some(history) = inner.state.intents.get_mut(id) {
        history.push(now_ms, intent);
    }
    inner.state.happened(Happened::IntentSucceeded { intent: id.to_string() }, now_ms, None, plan);
    Ok(())
}

/// A seeded intent, the service's `number`th: succeeded, its whole amount received, its charge
/// `ch_` + the id's tail; visible to every read however stale (it has always been there).
pub(in crate::payments) fn seeded(
    number: usize,
    id: String,
    charge: String,
    amount: u64,
    currency: &str,
    now_ms: u64,
) -> History {
    let mut intent = seed(id, amount, currency, now_ms);
    intent.status = Status::Succeeded;
    intent.amount_received = amount;
    intent.latest_charge = Some(charge);
    History::new(number, 0, intent)
}

/// An intent as a seed makes it, before it is paid: a test card on it, nothing received.
fn seed(id: String, amount: u64, currency: &str, now_ms: u64) -> Intent {
    let client_secret = format!("{id}_secret_seeded");
    Intent {
        id,
        amount,
        currency: currency.to_string(),
        status: Status::RequiresConfirmation,
        amount_received: 0,
        latest_charge: None,
        payment_method: Some("pm_card_visa".into()),
        metadata: Map::new(),
        description: None,
        client_secret,
        created_ms: now_ms,
        canceled_ms: None,
        cancellation_reason: None,
    }
}
