//! Serve's check waits for a settled world before it reads the ledgers, as `twice run`'s engine
//! does before it collects: nothing a fake can still do by itself (a request being worked on,
//! a late commit, a delivery still due, a transaction a block will take) may change a ledger
//! after the verdict. The wait is bounded by the scenario's own settle bound, plus
//! [`SETTLE_MARGIN_MS`].
//!
//! Two things end it early without a verdict on the invariants: a request held at a step's
//! point for a step the test never said it performed (it waits for the caller, so no wait can
//! end it), and, once the bound has passed, anything still moving. Either way the check says
//! what was still moving, by name, in a single `world-unsettled` verdict. A transaction queued
//! behind a nonce its sender never sent waits for its sender too, but no step of the test's:
//! the check does not wait for it, and judges, listing it as pending.
//!
//! Never holds serve's world lock while it waits: the application under test (and the tap on
//! every fake) need it meanwhile.

use std::time::{Duration, Instant};

use results::SettleWait;

use super::world::World;
use runner::setup;

/// Past the scenario's settle bound, how long the check still waits: a fake's timers (a late
/// commit's sleep) may fire a little after their due time on a loaded machine.
pub(crate) const SETTLE_MARGIN_MS: u64 = 1_000;
/// The longest the check waits, whatever a contract announces: the longest settle bound a
/// scenario may announce (a `settle_ms_max` and a `read_lag_ms_max` of at most
/// `HOLD_MS_MAX`, 600 s, each) plus the margin. A contract patched past it over a fake's
/// control API is cut to it.
pub(crate) const SETTLE_WAIT_MS_MAX: u64 = 2 * vocabulary::rule::HOLD_MS_MAX + SETTLE_MARGIN_MS;
/// How often the fakes are asked, while the check waits.
const POLL_MS: u64 = 20;

/// How the wait ended: what to record of it, and, when the world could not settle, what was
/// still moving.
#[derive(Debug, Clone)]
pub(crate) struct Settling {
    pub wait: SettleWait,
    /// Empty when the world settled (or the caller asked not to wait); otherwise one line per
    /// thing still moving, for the single `world-unsettled` verdict.
    pub unsettled: Vec<String>,
}

/// The longest the check waits for the world set up now: its settle bound, computed from the
/// contracts the fakes hold now (a test may have patched one), or the bound of any other fake
/// with work under way if longer, plus [`SETTLE_MARGIN_MS`], at most [`SETTLE_WAIT_MS_MAX`].
/// `None` with no scenario set up.
pub(crate) fn bound_ms(world: &World) -> Option<u64> {
    let guard = world.lock();
    let scenario = &guard.as_ref()?.case.scenario;
    let settle_ms = setup::settle_ms(scenario, &setup::contracts(scenario, &world.fakes));
    // A service the scenario does not use may have work under way too (an email nobody asked
    // for): its own bound counts as well.
    let busy_ms = world
        .fakes
        .all()
        .iter()
        .filter(|fake| !fake.pending().is_empty())
        .map(|fake| {
            let c = fake.contract();
            c.settle_ms_max + c.read_lag_ms_max
        })
        .max()
        .unwrap_or(0);
    Some(settle_ms.max(busy_ms).saturating_add(SETTLE_MARGIN_MS).min(SETTLE_WAIT_MS_MAX))
}

/// Waits until nothing pending at the scenario's fakes can change a ledger by itself, at most
/// `bound_ms`; at once when `wait` is false. Returns early, with what holds it, when a request
/// is held at a step the test has not said is done.
pub(crate) async fn settle(world: &World, bound_ms: u64, wait: bool) -> Settling {
    let started = Instant::now();
    let record = |waited: bool| SettleWait {
        waited,
        waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        bound_ms,
    };
    if !wait {
        return Settling { wait: record(false), unsettled: Vec::new() };
    }
    let deadline = started + Duration::from_millis(bound_ms);
    loop {
        let (held, moving) = {
            let guard = world.lock();
            let Some(current) = guard.as_ref() else {
                // Reset meanwhile: the caller finds no scenario and says so.
                return Settling { wait: record(true), unsettled: Vec::new() };
            };
            let held = World::held_at_steps(current);
            drop(guard);
            let moving: Vec<_> = runner::world::World::pending(&world.fakes)
                .into_iter()
                // What only someone else can end (a sender's next transaction, an application
                // that listens) is no reason to wait.
                .filter(|p| fake_services::PendingKind::named(&p.what).is_none_or(|k| k.ends_by_itself()))
                .collect();
            (held, moving)
        };
        if !held.is_empty() {
            // Only the test can let these go; the check cannot wait them out.
            let mut unsettled: Vec<String> = held.iter().map(super::world::HeldAtStep::line).collect();
            unsettled.extend(moving.iter().map(|p| format!("also still moving: {}", p.line(None))));
            return Settling { wait: record(true), unsettled };
        }
        if moving.is_empty() {
            return Settling { wait: record(true), unsettled: Vec::new() };
        }
        let now = Instant::now();
        if now >= deadline {
            let waited = record(true);
            let mut unsettled = vec![format!(
                "still moving after {} ms, past the scenario's settle bound and serve's margin ({} ms): a fake \
                 broke its own bound, or a contract was patched past the longest wait",
                waited.waited_ms, bound_ms
            )];
            unsettled.extend(moving.iter().map(|p| p.line(None)));
            return Settling { wait: waited, unsettled };
        }
        tokio::time::sleep((deadline - now).min(Duration::from_millis(POLL_MS))).await;
    }
}
