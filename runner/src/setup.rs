//! The steps and constants a scenario's world is made of ([`crate::world::World::prepare`]
//! puts them together for every caller): contracts, seeds and faults set on the fakes, a heal,
//! the settle bound, the limits and secrets every worker is told.

use std::collections::BTreeMap;

use fake_services::Fakes;
use scenarios::Scenario;
use scenarios::model::CHAIN_ACCOUNT_BALANCE_WEI;
use vocabulary::Contract;

/// The start of time in simulations: 2026-01-01T00:00:00Z.
pub const EPOCH_MS: u64 = 1_767_225_600_000;

/// The services every run announces to its workers and reports ledgers for, used or not: the
/// services of the first catalog, whose reports stay as they were. Any other service is
/// announced and reported only where the scenario uses it.
pub const ALWAYS_ANNOUNCED: [&str; 2] = ["payments", "workspaces"];

/// The limits every executor is told in `init`, the same in both drivers, so that scenario
/// authors can reason about them (a pause past the lease is a pause longer than `lease_ms`).
pub fn limits() -> vocabulary::protocol::Limits {
    vocabulary::protocol::Limits {
        request_timeout_ms: 1_000,
        lease_ms: 3_000,
        attempts_max: 5,
        escalate_after_ms: 20_000,
        pass_pause_ms: 20,
        batch_max: 64,
    }
}

/// The limits for a scenario: [`limits`] with the scenario's own request timeout and lease.
pub fn limits_for(scenario: &Scenario) -> vocabulary::protocol::Limits {
    vocabulary::protocol::Limits {
        request_timeout_ms: scenario.request_timeout_ms(),
        lease_ms: scenario.lease_ms(),
        ..limits()
    }
}

/// Reconciliation rounds the harness runs, at most, after healing.
pub const RECONCILE_ROUNDS_MAX: u32 = 12;

/// Added to each pause between reconciliation rounds, past the request timeout and the settle
/// bound, so that a round starts after every answer that could still change what it finds.
/// The harness's own margin: it drives any executor and knows none's internals.
pub const ROUND_MARGIN_MS: u64 = 100;

/// Why a scenario could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("scenario {scenario}: unknown service \"{service}\"")]
    UnknownService { scenario: String, service: String },
    #[error("scenario {scenario}: {problem}")]
    Rejected { scenario: String, problem: String },
    #[error("cannot open the run's intent log: {0}")]
    Storage(String),
}

/// Whether workers are told of `service` in this scenario, and its ledger and journal are
/// observed (see [`ALWAYS_ANNOUNCED`]).
pub fn announced(scenario: &Scenario, service: &str) -> bool {
    ALWAYS_ANNOUNCED.contains(&service) || used_services(scenario).iter().any(|s| s == service)
}

/// The contract each announced service offers in this scenario: its default with the
/// scenario's changes.
pub fn contracts(scenario: &Scenario, fakes: &Fakes) -> BTreeMap<String, Contract> {
    fakes
        .all()
        .iter()
        .filter(|fake| announced(scenario, fake.name()))
        .filter_map(|fake| scenario.contract(fake.name()).map(|c| (fake.name().to_string(), c)))
        .collect()
}

/// The address of the chain account, from [`vocabulary::protocol::CHAIN_PRIVATE_KEY`](vocabulary::protocol::CHAIN_PRIVATE_KEY).
pub fn chain_account() -> String {
    // Derived once: it is an elliptic-curve multiplication, and every run seeds the account.
    static ACCOUNT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ACCOUNT
        .get_or_init(|| {
            fake_services::chain::address_of(vocabulary::protocol::CHAIN_PRIVATE_KEY)
                .expect("vocabulary::protocol::CHAIN_PRIVATE_KEY is a valid key (a unit test checks it)")
        })
        .clone()
}

/// Sets contracts, seeds what the scenario uses (payment intents, paid or waiting for the
/// application to listen, buckets and objects, the chain account) and arms its faults.
pub fn prepare(scenario: &Scenario, fakes: &Fakes) -> Result<(), SetupError> {
    let rejected = |problem: String| SetupError::Rejected { scenario: scenario.name.clone(), problem };
    for (service, patch) in &scenario.services {
        let fake = fakes.get(service).ok_or_else(|| SetupError::UnknownService {
            scenario: scenario.name.clone(),
            service: service.clone(),
        })?;
        fake.patch_contract(patch.clone());
    }
    let intents = scenario.payment_intents_to_seed();
    for (id, amount) in intents {
        fakes.payments.seed_payment_intent(Some(&id), amount, "usd").map_err(rejected)?;
    }
    // The payments the triggers wait for: unpaid now, paid (or forged) once the application
    // listens for their event.
    for (id, amount) in scenario.unpaid_payment_intents() {
        fakes.payments.seed_unpaid_intent(&id, amount, "usd").map_err(rejected)?;
        let forged = scenario.triggers().any(|t| t.payment_intent == id && t.forged);
        fakes.payments.pay_once_listened(&id, forged);
    }
    for bucket in scenario.buckets_to_seed() {
        fakes.files.seed_bucket(&bucket).map_err(|e| rejected(format!("bucket {bucket}: {e}")))?;
    }
    for object in &scenario.objects {
        fakes
            .files
            .seed_object(&object.bucket, &object.key, object.body.as_bytes())
            .map_err(|e| rejected(format!("object {}/{}: {e}", object.bucket, object.key)))?;
    }
    if scenario.strict_keys {
        strict_keys(fakes).map_err(rejected)?;
    }
    if used_services(scenario).iter().any(|s| s == "chain") {
        fakes
            .chain
            .seed_account(&chain_account(), CHAIN_ACCOUNT_BALANCE_WEI)
            .map_err(|e| rejected(format!("chain account: {e}")))?;
    }
    for fault in &scenario.faults {
        let fake = fakes.get(&fault.service).ok_or_else(|| SetupError::UnknownService {
            scenario: scenario.name.clone(),
            service: fault.service.clone(),
        })?;
        fake.add_rule(fault.rule.clone()).map_err(rejected)?;
    }
    Ok(())
}

/// Strict keys on the payments fake: it accepts only [`vocabulary::protocol::PAYMENTS_API_KEY`], the key every
/// worker is given, and the restricted keys seeded after this.
pub fn strict_keys(fakes: &Fakes) -> Result<(), String> {
    fakes.payments.seed_secret_key(vocabulary::protocol::PAYMENTS_API_KEY)?;
    fakes.payments.set_strict_keys(true);
    Ok(())
}

/// Disarms every fault.
pub fn heal(fakes: &Fakes) {
    for fake in fakes.all() {
        fake.clear_rules();
    }
}

/// The services a scenario uses: those its intents act on, its faults target or its
/// contracts name.
pub fn used_services(scenario: &Scenario) -> Vec<String> {
    // Sorted and deduplicated as borrowed names: one allocation per service, not per mention.
    let mut used: Vec<&str> = scenario
        .intents
        .iter()
        .filter_map(|i| i.action.split_once('.').map(|(service, _)| service))
        .chain(scenario.faults.iter().map(|f| f.service.as_str()))
        .chain(scenario.services.keys().map(String::as_str))
        // An event an intent waits for comes from the payments service, whose API the
        // executor registers its endpoint with and reads the payment from.
        .chain(scenario.needs_webhooks().then_some("payments"))
        .collect();
    used.sort_unstable();
    used.dedup();
    used.into_iter().map(str::to_string).collect()
}

/// The longest a request may take to commit or die, plus the longest a read may lag, over
/// the services the scenario uses: what the harness waits out before it trusts a ledger.
pub fn settle_ms(scenario: &Scenario, contracts: &BTreeMap<String, Contract>) -> u64 {
    let used = used_services(scenario);
    contracts
        .iter()
        .filter(|(name, _)| used.contains(name))
        .map(|(_, c)| c.settle_ms_max + c.read_lag_ms_max)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_account_is_the_keys_address() {
        // keccak256("twice chain account 1") and its address, as any Ethereum tool derives them.
        assert_eq!(chain_account(), "0x1cbc11e4f4f8b32508b5375e0c2e87473f393802");
        assert_eq!(
            vocabulary::protocol::secrets()["chain_private_key"],
            vocabulary::protocol::CHAIN_PRIVATE_KEY
        );
    }

    #[test]
    fn only_used_services_are_announced_beyond_the_first_two() {
        let scenario: Scenario = serde_json::from_value(serde_json::json!({
            "name": "x",
            "intents": [{"id": "f1", "action": "files.put", "params": {"bucket": "b", "key": "k", "body": "v"}}],
        }))
        .expect("a scenario");
        let fakes = Fakes::new(std::sync::Arc::new(vocabulary::ManualClock::new(0)), 1);
        let names: Vec<String> = contracts(&scenario, &fakes).into_keys().collect();
        assert_eq!(names, ["files", "payments", "workspaces"]);
    }
}
