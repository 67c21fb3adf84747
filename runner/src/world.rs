//! A scenario's world on the fakes, prepared once and the same way for every caller: the sim
//! and live backends, `twice check-executor`'s protocol checks and `twice serve`.
//!
//! [`World::prepare`] sets the scenario's contracts, seeds what it uses and arms its faults
//! ([`setup::prepare`]), then derives what a run needs to know of them: the contracts each
//! announced service offers, the settle bound a ledger is trusted after, the limits workers
//! are told. [`World::apply`] is what the two events that happen to the fakes themselves (a
//! heal and a clock jump) do, for the engine and for serve alike, and [`World::pending`] what
//! the fakes still have to do when their ledgers are read. The [`Timeline`] is the
//! run's, shared with the backend whose workers report their state changes into it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use fake_services::Fakes;
use scenarios::{EventAction, Scenario};
use vocabulary::Clock;
use vocabulary::Contract;
use vocabulary::protocol::{Limits, Service};

use crate::setup::{self, SetupError};
use results::{Moment, Pending};

/// The run's timeline, shared by the engine and its backend (whose workers report state
/// changes as they happen).
#[derive(Debug, Clone, Default)]
pub struct Timeline(Arc<Mutex<Vec<Moment>>>);

impl Timeline {
    pub fn push(&self, moment: Moment) {
        self.moments().push(moment);
    }

    /// The moments so far, locked (a poisoned lock still holds good moments).
    pub fn moments(&self) -> MutexGuard<'_, Vec<Moment>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every moment, in time order (moments of one instant keep the order they came in).
    pub(crate) fn take_sorted(&self) -> Vec<Moment> {
        let mut moments = std::mem::take(&mut *self.moments());
        moments.sort_by_key(|m| m.at_ms);
        moments
    }
}

/// What a run needs besides its backend: the scenario's world on the fakes.
pub struct World<'a> {
    pub scenario: &'a Scenario,
    /// The fakes, prepared for the scenario.
    pub fakes: Fakes,
    /// The run's base clock, shared with the fakes: what the timeline is stamped with (a
    /// clock jump moves one service's time, never the run's).
    pub clock: Arc<dyn Clock>,
    /// The contract each announced service offers ([`setup::contracts`]).
    pub contracts: BTreeMap<String, Contract>,
    /// The settle bound of the services the scenario uses ([`setup::settle_ms`]).
    pub settle_ms: u64,
    /// The limits every worker is told in `init` ([`setup::limits_for`]).
    pub limits: Limits,
    /// The timeline the backend also writes to.
    pub timeline: Timeline,
}

impl<'a> World<'a> {
    /// Prepares `fakes` (fresh, or just reset) for `scenario`: contracts, seeds and faults.
    pub fn prepare(
        scenario: &'a Scenario,
        fakes: Fakes,
        clock: Arc<dyn Clock>,
    ) -> Result<World<'a>, SetupError> {
        setup::prepare(scenario, &fakes)?;
        let contracts = setup::contracts(scenario, &fakes);
        let settle_ms = setup::settle_ms(scenario, &contracts);
        Ok(World {
            scenario,
            fakes,
            clock,
            contracts,
            settle_ms,
            limits: setup::limits_for(scenario),
            timeline: Timeline::default(),
        })
    }

    /// The services `init` announces: each announced service at the URL `url_of` gives it
    /// (a loopback server's, or a name the sim's transport routes); a service without one is
    /// left out.
    pub fn services(&self, url_of: impl Fn(&str) -> Option<String>) -> BTreeMap<String, Service> {
        self.contracts
            .iter()
            .filter_map(|(name, contract)| {
                Some((name.clone(), Service { url: url_of(name)?, contract: contract.clone() }))
            })
            .collect()
    }

    /// Does what `event` does to the fakes, if it is one of the fakes' own (a heal disarms
    /// every fault; a clock jump moves one service's time), and returns the timeline's
    /// moment for it, stamped `at_ms`. A worker's event (crash, pause, start, reconcile) is
    /// the caller's, and gets `None`.
    pub fn apply(fakes: &Fakes, event: &EventAction, at_ms: u64) -> Option<Moment> {
        match event {
            EventAction::Heal => {
                setup::heal(fakes);
                Some(Self::healed(at_ms))
            }
            EventAction::ClockJump { service, by_ms } => {
                if let Some(fake) = fakes.get(service) {
                    fake.clock().jump_ms(*by_ms);
                }
                Some(Moment {
                    at_ms,
                    lane: service.clone(),
                    kind: "clock_jump".into(),
                    detail: format!("+{by_ms} ms"),
                })
            }
            EventAction::Crash { .. }
            | EventAction::Pause { .. }
            | EventAction::StartWorker { .. }
            | EventAction::Reconcile { .. } => None,
        }
    }

    /// Reads into `observed` the ledgers and journals of the services `scenario` announces,
    /// and of any other service an effect reached: every effect is judged, whoever was told of
    /// its service (an email an agent sent where the scenario used no email).
    pub fn read_ledgers(fakes: &Fakes, scenario: &Scenario, observed: &mut results::Observed) {
        for fake in fakes.all() {
            let ledger = fake.ledger();
            if setup::announced(scenario, fake.name()) || !ledger.is_empty() {
                observed.ledgers.insert(fake.name().to_string(), ledger);
                observed.journals.insert(fake.name().to_string(), fake.journal());
            }
        }
    }

    /// What any fake still has to do that could change its ledger
    /// ([`fake_services::Fake::pending`]), for the observation: read before the ledgers, so that
    /// nothing left out here lands after them unseen. Every fake, announced or not: an effect
    /// at a service the scenario never named is judged too (`no-unauthorised-effect`).
    /// Whether a fake still owes a webhook: a payment due (its event goes out then) or a
    /// delivery with attempts left.
    pub fn owes_webhooks(fakes: &Fakes) -> bool {
        // What the payments fake reports as pending webhook work is the one definition.
        fake_services::Fake::Payments(fakes.payments.clone())
            .pending()
            .iter()
            .any(|p| p.kind == fake_services::PendingKind::Webhook)
    }

    /// How many requests the fakes have seen so far, all services together.
    pub fn requests_seen(fakes: &Fakes) -> usize {
        fakes.all().iter().map(|f| f.journal().len()).sum()
    }

    pub fn pending(fakes: &Fakes) -> Vec<Pending> {
        fakes
            .all()
            .iter()
            .flat_map(fake_services::Fake::pending)
            .map(|p| Pending {
                service: p.service.to_string(),
                what: p.kind.name().to_string(),
                request: p.request,
                request_id: p.request_id,
                due_ms: p.due_ms,
                detail: p.detail,
            })
            .collect()
    }

    fn healed(at_ms: u64) -> Moment {
        Moment { at_ms, lane: "harness".into(), kind: "heal".into(), detail: "every fault disarmed".into() }
    }
}
