//! How large a scenario and its values may be: counts of intents, faults, events and
//! objects, lengths of names and texts, and the ranges of amounts and times. The validator
//! checks them ([`crate::validate`], which is also where they are public), and the model's
//! schema states the ones a schema can (an id's length, the number of intents); so they sit
//! below both, depending on neither.

use vocabulary::DAY_MS;

/// Most intents in one scenario.
pub const INTENTS_MAX: usize = 1_000;
/// Most fault rules in one scenario.
pub const FAULTS_MAX: usize = 100;
/// Most events in one scenario.
pub const EVENTS_MAX: usize = 100;
/// Longest pause of a worker.
pub const PAUSE_MS_MAX: u64 = 60_000;
/// Largest single clock jump.
pub const CLOCK_JUMP_MS_MAX: u64 = 30 * DAY_MS;
/// Longest text parameter (the workspaces service refuses longer names and ids).
pub const TEXT_MAX: usize = 200;
/// Largest amount, in a payment intent or a refund.
pub const AMOUNT_MAX: u64 = 1_000_000_000_000;
/// Longest name, failure mode, intent id, worker id or rule id.
pub const ID_MAX: usize = 64;
/// Allowed range of `limits.request_timeout_ms`.
pub const REQUEST_TIMEOUT_MS: (u64, u64) = (50, 60_000);
/// Allowed range of `limits.lease_ms`.
pub const LEASE_MS: (u64, u64) = (100, 600_000);
/// Longest key retention a contract can announce.
pub const KEY_RETENTION_MS_MAX: u64 = 30 * DAY_MS;
/// Most objects a scenario seeds.
pub const OBJECTS_MAX: usize = 100;
