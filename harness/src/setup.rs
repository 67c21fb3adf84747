//! What both drivers do to the fakes: prepare them for a scenario, heal them, read them.

use std::collections::BTreeMap;

use fake_services::{Contract, Fakes};
use scenarios::Scenario;

/// The start of time in simulations: 2026-01-01T00:00:00Z.
pub const EPOCH_MS: u64 = 1_767_225_600_000;

/// The limits every executor is told in `init`, the same in both drivers, so that scenario
/// authors can reason about them (a pause past the lease is a pause longer than `lease_ms`).
pub fn limits() -> executor::Limits {
    executor::Limits {
        request_timeout_ms: 1_000,
        lease_ms: 3_000,
        attempts_max: 5,
        escalate_after_ms: 20_000,
        pass_pause_ms: 20,
        batch_max: 64,
    }
}

/// The limits for a scenario: [`limits`] with the scenario's own request timeout and lease.
pub fn limits_for(scenario: &Scenario) -> executor::Limits {
    executor::Limits {
        request_timeout_ms: scenario.request_timeout_ms(),
        lease_ms: scenario.lease_ms(),
        ..limits()
    }
}

/// Reconciliation rounds the harness runs, at most, after healing.
pub const RECONCILE_ROUNDS_MAX: u32 = 12;

/// Why a scenario could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("scenario {scenario}: unknown service \"{service}\"")]
    UnknownService { scenario: String, service: String },
    #[error("scenario {scenario}: {problem}")]
    Rejected { scenario: String, problem: String },
}

/// The contract each service announces in this scenario: its default with the scenario's
/// changes.
pub fn contracts(scenario: &Scenario, fakes: &Fakes) -> BTreeMap<String, Contract> {
    fakes
        .all()
        .iter()
        .filter_map(|fake| scenario.contract(fake.name()).map(|c| (fake.name().to_string(), c)))
        .collect()
}

/// Sets contracts, seeds the payment intents the scenario uses and arms its faults.
pub fn prepare(scenario: &Scenario, fakes: &Fakes) -> Result<(), SetupError> {
    for (service, patch) in &scenario.services {
        let fake = fakes.get(service).ok_or_else(|| SetupError::UnknownService {
            scenario: scenario.name.clone(),
            service: service.clone(),
        })?;
        fake.patch_contract(patch.clone());
    }
    let intents = scenario.payment_intents_to_seed();
    for (id, amount) in intents {
        fakes
            .payments
            .seed_payment_intent(Some(&id), amount, "usd")
            .map_err(|problem| SetupError::Rejected { scenario: scenario.name.clone(), problem })?;
    }
    for fault in &scenario.faults {
        let fake = fakes.get(&fault.service).ok_or_else(|| SetupError::UnknownService {
            scenario: scenario.name.clone(),
            service: fault.service.clone(),
        })?;
        fake.add_rule(fault.rule.clone())
            .map_err(|problem| SetupError::Rejected { scenario: scenario.name.clone(), problem })?;
    }
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
    let mut used: Vec<String> = scenario
        .intents
        .iter()
        .filter_map(|i| i.action.split_once('.').map(|(service, _)| service.to_string()))
        .chain(scenario.faults.iter().map(|f| f.service.clone()))
        .chain(scenario.services.keys().cloned())
        .collect();
    used.sort();
    used.dedup();
    used
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

/// The contract as the executor protocol spells it (the same terms, field for field).
pub fn announce(contract: &Contract) -> executor::Contract {
    // The two types are the two ends of one JSON shape; going through JSON keeps them from
    // drifting apart silently (a new term on one side fails here, in every test).
    serde_json::to_value(contract)
        .and_then(serde_json::from_value)
        .expect("fake and executor contracts share one JSON shape")
}
